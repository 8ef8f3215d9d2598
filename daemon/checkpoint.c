/* The checkpoint stage: see checkpoint.h for what it owns, its threads and
 * what happens on failure; docs/checkpoint.md for the design.
 *
 * This file: the local writer (memory -> NVMe), the stage's start (with the
 * recovery of this node's own copies), finish, teardown and seerctl
 * listing. checkpoint_store.c keeps the items, retention and the NVMe
 * records; checkpoint_svc.c the connections; checkpoint_drain.c the drain
 * to the PFS; checkpoint_peer.c the peer level.
 * Locking: checkpoint_int.h. */
#define _GNU_SOURCE
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "../proto/seer_proto.h"
#include "../src/util/util.h"
#include "checkpoint_int.h"
#include "node_path.h"

/* messages (why, paths in them) are cut to their fixed buffers on purpose */
#pragma GCC diagnostic ignored "-Wformat-truncation"

static const char *const level_names[SEER_CKL_COUNT_] = CK_LEVEL_NAMES;
static const char *const state_names[] = { "pending", "done", "failed", "off", "pruned" };

/* A record of this node's own copy found at start (ckpt_store_walk): complete
 * ones come back, undrained ones go to the drain. */
static void recover_one(struct ckpt *ck, const struct ckpt_rec *r, void *arg UNUSED)
{
	struct ck_item *it = calloc(1, sizeof(*it));
	if (!it)
		abort();
	it->id = r->id;
	it->path = xstrdup(r->path);
	it->size = r->size;
	it->memfd = -1;
	it->committed = true;
	it->on_nvme = true;
	it->recovered = true;
	it->rec_drained = r->drained;
	it->rec_peer = r->peer; /* ckpt_peer_start sends it again unless its peer confirmed */
	memcpy(it->rec_peer_disk, r->peer_disk, sizeof(it->rec_peer_disk));
	it->t_begin = it->t_commit = now_s();
	it->st[SEER_CKL_MEM] = SEER_CKS_OFF;
	it->st[SEER_CKL_LOCAL] = SEER_CKS_DONE;
	it->st[SEER_CKL_PEER] = SEER_CKS_OFF;
	it->st[SEER_CKL_PFS] = r->drained ? SEER_CKS_DONE : SEER_CKS_PENDING;
	if (r->drained) {
		it->t_pfs = it->t_commit;
		it->wall_pfs = r->sb.st_mtime;
	}
	ck->nvme_used += r->size;
	if (r->id > ck->last_id)
		ck->last_id = r->id;
	/* in id (= begin) order */
	struct ck_item **pp = &ck->items;
	while (*pp && (*pp)->id < r->id)
		pp = &(*pp)->next;
	it->next = *pp;
	*pp = it;
	char sz[32];
	log_info("checkpoint %s (%s) found on NVMe at %s%s", r->path,
		 fmt_size(sz, sizeof(sz), r->size), r->data,
		 r->drained ? "" : ": not yet on the PFS, draining it now");
}

/* ---- the local writer: memory -> NVMe ----------------------------------- */

static struct ck_item *next_local(struct ckpt *ck)
{
	for (struct ck_item *it = ck->items; it; it = it->next)
		if (it->committed && !it->busy && it->st[SEER_CKL_LOCAL] == SEER_CKS_PENDING)
			return it;
	return NULL;
}

static int local_write(struct ckpt *ck, struct ck_item *it, char *why, size_t wlen)
{
	char f[4200];
	int rc = mkdir_p(ck->dir, 0700);
	if (rc != 0) {
		snprintf(why, wlen, "cannot create %s: %s", ck->dir, strerror(-rc));
		return rc;
	}
	ckpt_store_file(ck, it->id, "data", f, sizeof(f));
	int fd = open(f, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		snprintf(why, wlen, "cannot create %s: %s", f, strerror(errno));
		return -errno;
	}
	for (uint64_t off = 0; rc == 0 && off < it->size; off += CK_CHUNK) {
		size_t n = (size_t)MIN((uint64_t)CK_CHUNK, it->size - off);
		rc = ckpt_store_write_all(fd, it->mem + off, n, (off_t)off);
		if (ck->stop)
			rc = -ECANCELED;
	}
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	close(fd);
	if (rc == 0) {
		rc = ckpt_store_meta_write(ck, it);
		if (rc != 0)
			snprintf(why, wlen, "cannot record %s on NVMe: %s", f, strerror(-rc));
	} else {
		snprintf(why, wlen, "writing %s: %s", f, strerror(-rc));
	}
	if (rc != 0)
		unlink(f);
	return rc;
}

static void *local_main(void *arg)
{
	struct ckpt *ck = arg;
	pthread_mutex_lock(&ck->mu);
	while (!ck->stop) {
		struct ck_item *it = next_local(ck);
		if (!it) {
			pthread_cond_wait(&ck->cv, &ck->mu);
			continue;
		}
		char sz[32];
		if (!*ck->dir) {
			it->st[SEER_CKL_LOCAL] = SEER_CKS_OFF;
			continue;
		}
		ckpt_store_prune(ck, it->size);
		struct statvfs vs;
		uint64_t avail = statvfs(ck->dir, &vs) == 0 ? (uint64_t)vs.f_bavail * vs.f_frsize
							   : UINT64_MAX;
		/* the budget is shared with the copies held for a peer node */
		if (ck->nvme_used + ck->held.nvme_used + it->size > ck->cfg->checkpoint.nvme ||
		    it->size > avail) {
			it->st[SEER_CKL_LOCAL] = SEER_CKS_OFF;
			log_warn("checkpoint %s (%s): no room on NVMe ([checkpoint] nvme %s, %s in "
				 "undrained copies and copies held for a peer, %s free on the disk): it "
				 "stays in memory and goes straight to the PFS", it->path,
				 fmt_size(sz, sizeof(sz), it->size),
				 fmt_size((char[32]){ 0 }, 32, ck->cfg->checkpoint.nvme),
				 fmt_size((char[32]){ 0 }, 32, ck->nvme_used + ck->held.nvme_used),
				 fmt_size((char[32]){ 0 }, 32, avail));
			pthread_cond_broadcast(&ck->cv);
			ckpt_svc_wake(ck);
			continue;
		}
		it->busy = true;
		ck->nvme_used += it->size;
		pthread_mutex_unlock(&ck->mu);
		char why[SEER_ERRMSG_MAX];
		double t0 = now_s();
		int rc = local_write(ck, it, why, sizeof(why));
		double dt = now_s() - t0;
		pthread_mutex_lock(&ck->mu);
		it->busy = false;
		if (rc == 0) {
			it->on_nvme = true;
			it->st[SEER_CKL_LOCAL] = SEER_CKS_DONE;
			log_info("checkpoint %s (%s) on NVMe in %.2f s", it->path,
				 fmt_size(sz, sizeof(sz), it->size), dt);
			/* the drain reads the NVMe copy: the memory is free again */
			ckpt_store_free_mem(ck, it);
		} else {
			ck->nvme_used -= it->size;
			if (rc == -ECANCELED)
				break;
			it->st[SEER_CKL_LOCAL] = SEER_CKS_FAILED;
			str_copy(it->why, sizeof(it->why), why);
			log_warn("checkpoint %s: %s; it stays in memory and goes straight to the PFS",
				 it->path, why);
		}
		ckpt_svc_changed(ck);
	}
	pthread_mutex_unlock(&ck->mu);
	return NULL;
}

char *ckpt_list_json(struct ckpt *ck)
{
	json_t *root = json_object(), *arr = json_array();
	if (!root || !arr)
		abort();
	pthread_mutex_lock(&ck->mu);
	double t = now_s();
	uint64_t left = 0, inflight = 0;
	for (struct ck_item *it = ck->items; it; it = it->next) {
		json_t *o = json_object(), *lv = json_object();
		if (!o || !lv)
			abort();
		char id[32];
		snprintf(id, sizeof(id), "%016" PRIx64, it->id);
		json_object_set_new(o, "id", json_string(id));
		json_object_set_new(o, "path", json_string(it->path));
		json_object_set_new(o, "bytes", json_integer((json_int_t)it->size));
		json_object_set_new(o, "committed", json_boolean(it->committed));
		json_object_set_new(o, "recovered", json_boolean(it->recovered));
		for (int l = 0; l < SEER_CKL_COUNT_; l++)
			json_object_set_new(lv, level_names[l], json_string(state_names[it->st[l]]));
		json_object_set_new(o, "levels", lv);
		uint64_t drained = it->st[SEER_CKL_PFS] == SEER_CKS_DONE ? it->size
				   : it->busy && it->st[SEER_CKL_LOCAL] != SEER_CKS_PENDING ? it->drained
											 : 0;
		json_object_set_new(o, "drained", json_integer((json_int_t)drained));
		double rate = 0, eta = 0;
		if (it->busy && drained && it->st[SEER_CKL_PFS] != SEER_CKS_DONE) {
			rate = (double)drained / MAX(t - it->drain_t0, 1e-3);
			eta = (double)(it->size - drained) / rate;
		}
		json_object_set_new(o, "drain_rate", json_real(rate));
		json_object_set_new(o, "eta_s", json_real(eta));
		json_t *mb = json_object(); /* its last (or running) drain's bytes by pace */
		for (int m = DRAIN_FULL; m < DRAIN_NMODES; m++)
			json_object_set_new(mb, drain_mode_name(m),
					    json_integer((json_int_t)it->mode_bytes[m]));
		json_object_set_new(o, "drain_modes", mb);
		if (it->st[SEER_CKL_PFS] != SEER_CKS_DONE)
			left += it->size - drained;
		if (it->mem)
			inflight += it->size;
		if (it->why[0])
			json_object_set_new(o, "why", json_string(it->why));
		if (it->peer_why[0])
			json_object_set_new(o, "peer_why", json_string(it->peer_why));
		json_array_append_new(arr, o);
	}
	json_object_set_new(root, "checkpoints", arr);
	ckpt_held_list_json(ck, root);
	ckpt_peer_list_json(ck, root);
	json_object_set_new(root, "nvme_dir", json_string(ck->dir));
	json_object_set_new(root, "memory_used", json_integer((json_int_t)ck->mem_used));
	json_object_set_new(root, "memory", json_integer((json_int_t)ck->cfg->checkpoint.memory));
	json_object_set_new(root, "nvme_used", json_integer((json_int_t)ck->nvme_used));
	json_object_set_new(root, "nvme", json_integer((json_int_t)ck->cfg->checkpoint.nvme));
	json_object_set_new(root, "drain_rate", json_real(ck->drain.rate));
	json_object_set_new(root, "drain_rate_cap", json_integer((json_int_t)ck->cfg->checkpoint.drain_rate));
	json_object_set_new(root, "bytes_to_drain", json_integer((json_int_t)left));
	json_object_set_new(root, "eta_s",
			    json_real(ck->drain.rate > 0 ? (double)left / ck->drain.rate : 0));
	json_object_set_new(root, "drain_mode", json_string(drain_mode_name(ck->drain.mode)));
	pthread_mutex_unlock(&ck->mu);
	/* what the drain's next piece would see (the engine's atomics) */
	struct pfs_outlook po = { 0 };
	if (ck->outlook)
		ck->outlook(ck->outlook_arg, &po);
	json_t *jo = json_object();
	json_object_set_new(jo, "queued", json_integer((json_int_t)po.queued));
	json_object_set_new(jo, "soon_reads", json_integer((json_int_t)po.soon_reads));
	json_object_set_new(jo, "soon_bytes", json_integer((json_int_t)po.soon_bytes));
	json_object_set_new(jo, "window_s", json_real(ck->cfg->checkpoint.drain_window_s));
	json_object_set_new(jo, "mode", json_string(drain_mode_name(drain_pace_mode(&po))));
	json_object_set_new(root, "pfs_outlook", jo);
	char *s = json_dumps(root, JSON_INDENT(1));
	json_decref(root);
	if (!s)
		abort();
	return s;
}

struct ckpt *ckpt_create(const struct seer_config *cfg, unsigned node, ckpt_outlook_fn outlook,
			 void *outlook_arg, char *err, size_t errlen)
{
	struct ckpt *ck = calloc(1, sizeof(*ck));
	if (!ck)
		abort();
	ck->cfg = cfg;
	ck->node = node;
	ck->nnodes = 1;
	ck->outlook = outlook;
	ck->outlook_arg = outlook_arg;
	pthread_mutex_init(&ck->mu, NULL);
	pthread_mutex_init(&ck->meta_mu, NULL);
	pthread_cond_init(&ck->cv, NULL);
	pthread_cond_init(&ck->idle, NULL);
	ck->svc.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ck->svc.efd < 0) {
		snprintf(err, errlen, "checkpoints: eventfd: %s", strerror(errno));
		goto fail;
	}
	char dir[4096];
	if (cfg->cache.nvme_dir && *cfg->cache.nvme_dir && cfg->checkpoint.nvme > 0) {
		if (node_path(dir, sizeof(dir), cfg->cache.nvme_dir, node) != 0 ||
		    snprintf(ck->dir, sizeof(ck->dir), "%s/seer-ckpt-%s", dir, cfg->job.id) >=
			    (int)sizeof(ck->dir) - 64) {
			log_warn("checkpoints: [cache] nvme_dir %s is too long: checkpoints wait in "
				 "memory and go straight to the PFS", cfg->cache.nvme_dir);
			ck->dir[0] = '\0';
		}
		/* the folder is made with the first copy and removed at exit when
		 * empty: a seerd that took no checkpoint leaves nothing on NVMe */
	}
	if (*ck->dir) {
		char a[32];
		log_info("checkpoints: written to NVMe at %s (up to %s), then drained to the PFS",
			 ck->dir, fmt_size(a, sizeof(a), cfg->checkpoint.nvme));
		ckpt_store_walk(ck, ck->dir, "seer-ckpt", "checkpoint copy", recover_one, NULL);
		ckpt_held_recover(ck);
	} else {
		log_info("checkpoints: no NVMe tier ([cache] nvme_dir unset or [checkpoint] nvme 0): "
			 "they wait in memory and go straight to the PFS");
	}
	if (pthread_create(&ck->svc.th, NULL, ckpt_svc_main, ck) != 0)
		goto thread;
	ck->svc.started = true;
	if (pthread_create(&ck->th_local, NULL, local_main, ck) != 0)
		goto thread;
	ck->started_local = true;
	if (pthread_create(&ck->drain.th, NULL, ckpt_drain_main, ck) != 0)
		goto thread;
	ck->drain.started = true;
	return ck;
thread:
	snprintf(err, errlen, "checkpoints: cannot start a thread");
fail:
	ckpt_destroy(ck);
	return NULL;
}

void ckpt_finish(struct ckpt *ck, double deadline)
{
	if (!ck)
		return;
	pthread_mutex_lock(&ck->mu);
	ck->stopping = true;
	ckpt_svc_wake(ck);
	for (;;) {
		bool pending = false;
		for (struct ck_item *it = ck->items; it; it = it->next)
			if (it->committed && (it->st[SEER_CKL_LOCAL] == SEER_CKS_PENDING ||
					      it->st[SEER_CKL_PFS] == SEER_CKS_PENDING ||
					      it->st[SEER_CKL_PEER] == SEER_CKS_PENDING || it->busy ||
					      it->peer_busy))
				pending = true;
		double t = now_s();
		if (!pending || t >= deadline)
			break;
		ckpt_cond_wait_s(&ck->idle, &ck->mu, MIN(deadline - t, 0.5));
	}
	char sz[32];
	for (struct ck_item *it = ck->items; it; it = it->next) {
		if (!it->committed || it->st[SEER_CKL_PFS] == SEER_CKS_DONE)
			continue;
		char f[4200];
		ckpt_store_file(ck, it->id, "data", f, sizeof(f));
		if (it->on_nvme && !it->busy)
			log_warn("checkpoint %s (%s) is not on the PFS yet%s%s: its copy is on NVMe at "
				 "%s; the next seerd of this job on this node drains it", it->path,
				 fmt_size(sz, sizeof(sz), it->size), it->why[0] ? ": " : "", it->why, f);
		else if (it->on_nvme)
			log_warn("checkpoint %s (%s) was being drained at exit: its copy is on NVMe "
				 "at %s; the next seerd of this job on this node drains it again",
				 it->path, fmt_size(sz, sizeof(sz), it->size), f);
		else
			log_error("checkpoint %s (%s) is LOST at exit: it was only in seerd's memory "
				  "(no NVMe copy) and not on the PFS%s%s", it->path,
				  fmt_size(sz, sizeof(sz), it->size), it->why[0] ? ": " : "", it->why);
	}
	pthread_mutex_unlock(&ck->mu);
}

void ckpt_destroy(struct ckpt *ck)
{
	if (!ck)
		return;
	pthread_mutex_lock(&ck->mu);
	ck->stop = true;
	pthread_cond_broadcast(&ck->cv);
	pthread_mutex_unlock(&ck->mu);
	if (ck->svc.efd >= 0)
		ckpt_svc_wake(ck);
	if (ck->svc.started)
		pthread_join(ck->svc.th, NULL);
	if (ck->started_local)
		pthread_join(ck->th_local, NULL);
	if (ck->drain.started)
		pthread_join(ck->drain.th, NULL);
	ckpt_peer_destroy(ck);
	ckpt_held_destroy(ck);
	ckpt_svc_destroy(ck);
	while (ck->items)
		ckpt_store_drop(ck, ck->items);
	if (ck->svc.efd >= 0)
		close(ck->svc.efd);
	if (*ck->dir)
		rmdir(ck->dir); /* only when empty: undrained copies stay for the next seerd */
	pthread_cond_destroy(&ck->cv);
	pthread_cond_destroy(&ck->idle);
	pthread_mutex_destroy(&ck->meta_mu);
	pthread_mutex_destroy(&ck->mu);
	free(ck);
}
