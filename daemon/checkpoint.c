/* The checkpoint stage: see checkpoint.h for what it owns, its threads and
 * what happens on failure; docs/checkpoint.md for the design.
 *
 * This file: the service thread (the connections), the local writer, the
 * drain, the stage's start (with the recovery of this node's own copies),
 * finish, teardown and seerctl listing. checkpoint_store.c keeps the items,
 * retention and the NVMe records; checkpoint_peer.c the peer level.
 * Locking: checkpoint_int.h. */
#define _GNU_SOURCE
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "../proto/seer_proto.h"
#include "../src/common/shm.h"
#include "../src/util/util.h"
#include "checkpoint_int.h"
#include "node_path.h"
#include "seer.h"

/* messages (why, paths in them) are cut to their fixed buffers on purpose */
#pragma GCC diagnostic ignored "-Wformat-truncation"

struct ck_conn {
	int fd;
	pid_t pid;
	uint64_t begun;            /* an item begun and not committed (0: none) */
	bool begin_wait;           /* a BEGIN waits for memory */
	struct seer_msg_ckpt req;  /* the waiting BEGIN or WAIT */
	double deadline;           /* of the wait (0: none, < 0 for ever) */
	bool wait;                 /* a WAIT is pending */
};

static const char *const level_names[SEER_CKL_COUNT_] = { "memory", "local", "peer", "pfs" };
static const char *const state_names[] = { "pending", "done", "failed", "off", "pruned" };

void ckpt_wake_svc(struct ckpt *ck)
{
	uint64_t one = 1;
	ssize_t r UNUSED = write(ck->efd, &one, sizeof(one));
}

static struct ck_item *item_find(struct ckpt *ck, uint64_t id)
{
	for (struct ck_item *it = ck->items; it; it = it->next)
		if (it->id == id)
			return it;
	return NULL;
}

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
		if (ck->nvme_used + ck->peer.held_used + it->size > ck->cfg->checkpoint.nvme ||
		    it->size > avail) {
			it->st[SEER_CKL_LOCAL] = SEER_CKS_OFF;
			log_warn("checkpoint %s (%s): no room on NVMe ([checkpoint] nvme %s, %s in "
				 "undrained copies and copies held for a peer, %s free on the disk): it "
				 "stays in memory and goes straight to the PFS", it->path,
				 fmt_size(sz, sizeof(sz), it->size),
				 fmt_size((char[32]){ 0 }, 32, ck->cfg->checkpoint.nvme),
				 fmt_size((char[32]){ 0 }, 32, ck->nvme_used + ck->peer.held_used),
				 fmt_size((char[32]){ 0 }, 32, avail));
			pthread_cond_broadcast(&ck->cv);
			ckpt_wake_svc(ck);
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
		ckpt_store_prune(ck, 0);
		pthread_cond_broadcast(&ck->cv);
		pthread_cond_broadcast(&ck->idle);
		ckpt_wake_svc(ck);
	}
	pthread_mutex_unlock(&ck->mu);
	return NULL;
}

/* ---- the drain: NVMe or memory -> the PFS path -------------------------- */

static struct ck_item *next_drain(struct ckpt *ck, double t)
{
	for (struct ck_item *it = ck->items; it; it = it->next)
		if (it->committed && !it->busy && it->st[SEER_CKL_LOCAL] != SEER_CKS_PENDING &&
		    (it->st[SEER_CKL_PFS] == SEER_CKS_PENDING ||
		     (it->st[SEER_CKL_PFS] == SEER_CKS_FAILED && t >= it->retry_at)) &&
		    (it->mem || it->on_nvme))
			return it;
	return NULL;
}


/* Sleep up to `s` seconds unless stopped (drain pacing). */
static void drain_sleep(struct ckpt *ck, double s)
{
	if (s <= 0)
		return;
	pthread_mutex_lock(&ck->mu);
	if (!ck->stop)
		ckpt_cond_wait_s(&ck->cv, &ck->mu, s);
	pthread_mutex_unlock(&ck->mu);
}

/* Write it to <dir>/.<name>.seer-<id>.tmp, fsync, rename to its path, fsync
 * the directory. 0, or -errno with why (the temporary file removed). */
static int drain_one(struct ckpt *ck, struct ck_item *it, char *why, size_t wlen)
{
	char tmp[SEER_CKPT_PATH_MAX + 64], src[4200] = "";
	const char *slash = strrchr(it->path, '/');
	snprintf(tmp, sizeof(tmp), "%.*s/.%s.seer-%016" PRIx64 ".tmp", (int)(slash - it->path),
		 it->path, slash + 1, it->id);
	int in = -1;
	uint8_t *buf = NULL;
	if (!it->mem) {
		ckpt_store_file(ck, it->id, "data", src, sizeof(src));
		in = open(src, O_RDONLY | O_CLOEXEC);
		if (in < 0) {
			snprintf(why, wlen, "cannot read its NVMe copy %s: %s", src, strerror(errno));
			return -errno;
		}
		buf = malloc(CK_CHUNK);
		if (!buf)
			abort();
	}
	int rc = 0;
	int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0) {
		rc = -errno;
		snprintf(why, wlen, "cannot create %s: %s", tmp, strerror(errno));
		goto out;
	}
	fchmod(out, 0600); /* a leftover of an earlier try keeps its mode otherwise */
	double t0 = now_s();
	uint64_t rate = ck->cfg->checkpoint.drain_rate;
	double share = ck->cfg->checkpoint.drain_share;
	/* under a cap, pieces of an eighth of a second's bytes keep it smooth */
	uint64_t chunk = rate ? MAX(MIN(rate / 8, (uint64_t)CK_CHUNK), (uint64_t)4096) : CK_CHUNK;
	for (uint64_t off = 0; off < it->size; off += chunk) {
		size_t n = (size_t)MIN(chunk, it->size - off);
		const uint8_t *p = it->mem ? it->mem + off : buf;
		if (!it->mem) {
			ssize_t r = pread(in, buf, n, (off_t)off);
			if (r != (ssize_t)n) {
				rc = r < 0 ? -errno : -EIO;
				snprintf(why, wlen, "reading its NVMe copy %s: %s", src,
					 r < 0 ? strerror(errno) : "short read");
				goto out;
			}
		}
		double c0 = now_s();
		rc = ckpt_store_write_all(out, p, n, (off_t)off);
		if (rc != 0) {
			snprintf(why, wlen, "writing %s: %s", tmp, strerror(-rc));
			goto out;
		}
		double cdt = now_s() - c0;
		/* seerd's own PFS reads now and in the plan ahead decide the pace */
		struct pfs_outlook o = { 0 };
		if (ck->outlook)
			ck->outlook(ck->outlook_arg, &o);
		enum drain_mode m = drain_pace_mode(&o);
		pthread_mutex_lock(&ck->mu);
		it->drained = off + n;
		it->mode_bytes[m] += n;
		ck->mode = m;
		bool stop = ck->stop;
		pthread_mutex_unlock(&ck->mu);
		if (stop) {
			rc = -ECANCELED;
			snprintf(why, wlen, "seerd stopped during the drain");
			goto out;
		}
		drain_sleep(ck, drain_pace_sleep(m, off + n, now_s() - t0, cdt, rate, share));
		pthread_mutex_lock(&ck->mu);
		stop = ck->stop;
		pthread_mutex_unlock(&ck->mu);
		if (stop) {
			rc = -ECANCELED;
			snprintf(why, wlen, "seerd stopped during the drain");
			goto out;
		}
	}
	if (fsync(out) != 0) {
		rc = -errno;
		snprintf(why, wlen, "fsync %s: %s", tmp, strerror(errno));
		goto out;
	}
	close(out);
	out = -1;
	if (rename(tmp, it->path) != 0) {
		rc = -errno;
		snprintf(why, wlen, "rename %s to %s: %s", tmp, it->path, strerror(errno));
		goto out;
	}
	rc = ckpt_store_fsync_dir(it->path);
	if (rc != 0)
		snprintf(why, wlen, "fsync of the directory of %s: %s", it->path, strerror(-rc));
out:
	if (out >= 0)
		close(out);
	if (rc != 0)
		unlink(tmp);
	if (in >= 0)
		close(in);
	free(buf);
	return rc;
}

static void *drain_main(void *arg)
{
	struct ckpt *ck = arg;
	pthread_mutex_lock(&ck->mu);
	while (!ck->stop) {
		double t = now_s();
		struct ck_item *it = next_drain(ck, t);
		if (!it) {
			/* a failed drain comes back after CK_RETRY_S */
			ckpt_cond_wait_s(&ck->cv, &ck->mu, 1.0);
			continue;
		}
		it->busy = true;
		it->drained = 0;
		memset(it->mode_bytes, 0, sizeof(it->mode_bytes));
		it->drain_t0 = t;
		pthread_mutex_unlock(&ck->mu);
		char why[SEER_ERRMSG_MAX], sz[32];
		int rc = drain_one(ck, it, why, sizeof(why));
		double dt = now_s() - t;
		/* a record left saying "not drained" only costs a second drain */
		if (rc == 0) {
			pthread_mutex_lock(&ck->mu);
			it->rec_drained = true;
			pthread_mutex_unlock(&ck->mu);
		}
		if (rc == 0 && it->on_nvme && ckpt_store_meta_write(ck, it) != 0)
			log_warn("checkpoint %s: cannot mark its NVMe record drained", it->path);
		pthread_mutex_lock(&ck->mu);
		it->busy = false;
		ck->mode = DRAIN_IDLE;
		if (rc == 0) {
			it->st[SEER_CKL_PFS] = SEER_CKS_DONE;
			it->t_pfs = now_s();
			it->wall_pfs = time(NULL);
			it->why[0] = '\0';
			ck->rate = dt > 0 ? (double)it->size / dt : 0;
			char f[32], p[32], y[32];
			log_info("checkpoint %s (%s) on the PFS in %.2f s (%.1f MB/s; at full rate %s, "
				 "drain_share beside the plan's PFS reads %s, yielding to queued reads %s)",
				 it->path, fmt_size(sz, sizeof(sz), it->size), dt, ck->rate / 1e6,
				 fmt_size(f, sizeof(f), it->mode_bytes[DRAIN_FULL]),
				 fmt_size(p, sizeof(p), it->mode_bytes[DRAIN_PLAN]),
				 fmt_size(y, sizeof(y), it->mode_bytes[DRAIN_YIELD]));
			if (!it->on_nvme && !ckpt_store_in_use(it))
				ckpt_store_free_mem(ck, it);
			ckpt_store_prune(ck, 0);
		} else if (rc != -ECANCELED) {
			it->st[SEER_CKL_PFS] = SEER_CKS_FAILED;
			it->retry_at = now_s() + CK_RETRY_S;
			it->drain_fails++;
			snprintf(it->why, sizeof(it->why), "%s; the copy stays %s, seerd tries again "
				 "every %.0f s", why, it->on_nvme ? "on NVMe" : "in memory",
				 CK_RETRY_S);
			if (it->drain_fails == 1 || it->drain_fails % 30 == 0)
				log_warn("checkpoint %s: drain to the PFS failed (%u time(s)): %s",
					 it->path, it->drain_fails, it->why);
		}
		pthread_cond_broadcast(&ck->idle);
		ckpt_wake_svc(ck);
	}
	pthread_mutex_unlock(&ck->mu);
	return NULL;
}

/* ---- the service thread: the connections -------------------------------- */

static void reply(int fd, const struct seer_msg_ckpt *req, int status, const char *msg,
		  const struct ck_item *it, int pass_fd)
{
	struct seer_msg_ckpt r;
	memset(&r, 0, sizeof(r));
	r.magic = SEER_MAGIC_CKPT;
	r.kind = SEER_MSG_CKPT_REPLY;
	r.version = SEER_CKPT_VERSION;
	r.status = status;
	r.level = req ? req->level : 0;
	if (it) {
		r.id = it->id;
		r.size = it->size;
		r.drained = it->st[SEER_CKL_PFS] == SEER_CKS_DONE ? it->size
			    : it->busy && it->st[SEER_CKL_LOCAL] != SEER_CKS_PENDING ? it->drained : 0;
		memcpy(r.state, it->st, sizeof(r.state));
		str_copy(r.path, sizeof(r.path), it->path);
	}
	if (msg)
		str_copy(r.msg, sizeof(r.msg), msg);
	/* the reply is small next to the socket buffer: a full one is a client
	 * that reads nothing, which loses its reply */
	sock_send(fd, &r, sizeof(r), pass_fd >= 0 ? &pass_fd : NULL, pass_fd >= 0 ? 1 : 0);
}

static void conn_drop(struct ckpt *ck, size_t i)
{
	struct ck_conn *c = &ck->conns[i];
	if (c->begun) {
		struct ck_item *it = item_find(ck, c->begun);
		if (it && !it->committed) {
			log_info("checkpoint %s abandoned before its commit (pid %d went away)",
				 it->path, (int)c->pid);
			ckpt_store_drop(ck, it);
		}
	}
	close(c->fd);
	ck->conns[i] = ck->conns[--ck->nconns];
}

static double deadline_of(int64_t ms)
{
	return ms < 0 ? -1.0 : now_s() + (double)ms / 1000.0;
}

/* A BEGIN that fits the memory budget now: the memfd, the item, the reply. */
static void begin_now(struct ckpt *ck, struct ck_conn *c)
{
	const struct seer_msg_ckpt *m = &c->req;
	c->begin_wait = false;
	char name[64];
	snprintf(name, sizeof(name), "seer-ckpt-%d", (int)c->pid);
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int rc = fd < 0 ? -errno : 0;
	if (rc == 0 && ftruncate(fd, (off_t)m->size) != 0)
		rc = -errno;
	/* the trainer maps it writable; it must never shrink under seerd */
	if (rc == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		rc = -errno;
	void *mem = MAP_FAILED;
	if (rc == 0) {
		mem = mmap(NULL, m->size, PROT_READ, MAP_SHARED, fd, 0);
		if (mem == MAP_FAILED)
			rc = -errno;
	}
	if (rc != 0) {
		char msg[SEER_ERRMSG_MAX];
		snprintf(msg, sizeof(msg), "seerd cannot make %" PRIu64 " bytes of shared memory: %s",
			 m->size, strerror(-rc));
		if (fd >= 0)
			close(fd);
		reply(c->fd, m, rc, msg, NULL, -1);
		return;
	}
	struct ck_item *it = calloc(1, sizeof(*it));
	if (!it)
		abort();
	uint64_t id = (uint64_t)time(NULL) << 20;
	it->id = id > ck->last_id ? id : ck->last_id + 1;
	ck->last_id = it->id;
	it->path = xstrdup(m->path);
	it->size = m->size;
	it->alloc = m->size;
	it->memfd = fd;
	it->mem = mem;
	it->rec_peer = -1;
	it->t_begin = now_s();
	it->st[SEER_CKL_MEM] = SEER_CKS_PENDING;
	it->st[SEER_CKL_LOCAL] = SEER_CKS_PENDING;
	it->st[SEER_CKL_PEER] = SEER_CKS_OFF;
	it->st[SEER_CKL_PFS] = SEER_CKS_PENDING;
	ck->mem_used += m->size;
	struct ck_item **pp = &ck->items;
	while (*pp)
		pp = &(*pp)->next;
	*pp = it;
	c->begun = it->id;
	reply(c->fd, m, 0, NULL, it, fd);
}

/* Whether the directory of `path` exists and seerd may write in it (else
 * msg says why): refused at BEGIN rather than failing every drain. */
static bool dir_writable(const char *path, char *msg, size_t len)
{
	char d[SEER_CKPT_PATH_MAX];
	str_copy(d, sizeof(d), path);
	char *slash = strrchr(d, '/');
	if (slash == d)
		slash[1] = '\0';
	else
		*slash = '\0';
	struct stat sb;
	if (stat(d, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		snprintf(msg, len, "the directory %s of the checkpoint does not exist: create it first",
			 d);
		return false;
	}
	if (access(d, W_OK | X_OK) != 0) {
		snprintf(msg, len, "seerd (your user) cannot write in %s: %s", d, strerror(errno));
		return false;
	}
	return true;
}

static void on_begin(struct ckpt *ck, struct ck_conn *c, const struct seer_msg_ckpt *m)
{
	char msg[SEER_ERRMSG_MAX], a[32], b[32];
	int st = 0;
	if (c->begun) {
		st = -EBUSY;
		snprintf(msg, sizeof(msg), "a checkpoint begun on this connection is not committed");
	} else if (strncmp(m->job_id, ck->cfg->job.id, SEER_JOBID_MAX) != 0) {
		st = SEER_ECONFIG;
		snprintf(msg, sizeof(msg), "job id '%.64s', this seerd serves '%.64s'", m->job_id,
			 ck->cfg->job.id);
	} else if (m->path[0] != '/' || strchr(m->path, '\n') ||
		   strnlen(m->path, sizeof(m->path)) == sizeof(m->path) ||
		   m->path[strlen(m->path) - 1] == '/') {
		st = -EINVAL;
		snprintf(msg, sizeof(msg), "checkpoint path '%.200s' must be an absolute file path "
			 "without newlines", m->path);
	} else if (!dir_writable(m->path, msg, sizeof(msg))) {
		st = -ENOENT;
	} else if (m->size == 0) {
		st = -EINVAL;
		snprintf(msg, sizeof(msg), "a checkpoint of 0 bytes");
	} else if (m->size > ck->cfg->checkpoint.memory) {
		st = -ENOMEM;
		snprintf(msg, sizeof(msg), "a checkpoint of %s is larger than [checkpoint] memory "
			 "(%s): raise it (seerd --set checkpoint.memory=...)",
			 fmt_size(a, sizeof(a), m->size), fmt_size(b, sizeof(b), ck->cfg->checkpoint.memory));
	} else if (ck->stopping) {
		st = SEER_ESHUTDOWN;
		snprintf(msg, sizeof(msg), "seerd is stopping: it takes no new checkpoint");
	}
	if (st != 0) {
		reply(c->fd, m, st, msg, NULL, -1);
		return;
	}
	c->req = *m;
	c->req.path[sizeof(c->req.path) - 1] = '\0';
	c->begin_wait = true;
	c->deadline = deadline_of(m->timeout_ms);
}

static int wait_state(const struct ck_item *it, uint32_t level, char *msg, size_t len)
{
	uint32_t s = it->st[level];
	if (s == SEER_CKS_DONE || s == SEER_CKS_PRUNED)
		return 0;
	if (level == SEER_CKL_PEER && s == SEER_CKS_OFF) {
		snprintf(msg, len, "no peer copy of %s: [checkpoint] peers is 0, or the job has one "
			 "node (docs/checkpoint.md)", it->path);
		return -ENOTSUP;
	}
	if (level == SEER_CKL_PEER && s == SEER_CKS_FAILED) {
		snprintf(msg, len, "%s", it->peer_why);
		return -EIO;
	}
	if (level == SEER_CKL_PEER)
		return 1;
	if (s == SEER_CKS_OFF) {
		snprintf(msg, len, "no NVMe copy of %s: %s", it->path,
			 it->why[0] ? it->why : "seerd has no [cache] nvme_dir, or no room in "
			 "[checkpoint] nvme; it goes straight to the PFS");
		return -ENOTSUP;
	}
	if (s == SEER_CKS_FAILED) {
		snprintf(msg, len, "%s", it->why);
		return -EIO;
	}
	return 1; /* pending */
}

static void on_request(struct ckpt *ck, size_t ci, const struct seer_msg_ckpt *m)
{
	struct ck_conn *c = &ck->conns[ci];
	char msg[SEER_ERRMSG_MAX];
	if (m->kind == SEER_MSG_CKPT_BEGIN) {
		on_begin(ck, c, m);
		return;
	}
	if (m->kind == SEER_MSG_CKPT_OPEN) {
		struct ck_item *best = NULL;
		for (struct ck_item *it = ck->items; it; it = it->next)
			if (it->committed && strncmp(it->path, m->path, sizeof(m->path)) == 0 &&
			    (it->on_nvme || it->mem) && !(best && best->id > it->id))
				best = it;
		struct stat sb;
		/* a PFS file written after our copy was drained (by someone else) is newer */
		if (best && best->st[SEER_CKL_PFS] == SEER_CKS_DONE && stat(best->path, &sb) == 0 &&
		    sb.st_mtime > best->wall_pfs + 1)
			best = NULL;
		int fd = -1;
		uint32_t where = SEER_CKL_PFS;
		struct ck_item hit = { 0 };
		if (!best)
			fd = ckpt_peer_open_held(ck, m->path, &hit);
		if (fd >= 0) {
			where = SEER_CKL_PEER;
			best = &hit;
		} else if (best) {
			char f[4200];
			if (best->on_nvme) {
				ckpt_store_file(ck, best->id, "data", f, sizeof(f));
				where = SEER_CKL_LOCAL;
			} else {
				snprintf(f, sizeof(f), "/proc/self/fd/%d", best->memfd);
				where = SEER_CKL_MEM;
			}
			fd = open(f, O_RDONLY | O_CLOEXEC);
		}
		struct seer_msg_ckpt q = *m;
		q.level = where;
		if (fd < 0)
			best = NULL;
		if (fd < 0) {
			reply(c->fd, &q, -ENOENT, "seerd holds no copy: read the PFS", NULL, -1);
			return;
		}
		reply(c->fd, &q, 0, NULL, best, fd);
		close(fd);
		return;
	}
	struct ck_item *it = item_find(ck, m->id);
	if (it && strncmp(it->path, m->path, sizeof(m->path)) != 0)
		it = NULL;
	if (!it) {
		snprintf(msg, sizeof(msg), "seerd knows no checkpoint %016" PRIx64 " of %.200s (seerd "
			 "restarted and it was not on NVMe yet, or retention forgot it)", m->id,
			 m->path);
		reply(c->fd, m, -ENOENT, msg, NULL, -1);
		return;
	}
	if (m->kind == SEER_MSG_CKPT_COMMIT) {
		if (it->committed || c->begun != it->id) {
			reply(c->fd, m, -EINVAL, "commit of a checkpoint not begun on this connection",
			      it, -1);
			return;
		}
		if (m->size == 0 || m->size > it->alloc) {
			reply(c->fd, m, -EINVAL, "commit of more bytes than were begun", it, -1);
			return;
		}
		it->size = m->size; /* the bytes used of those handed out */
		it->committed = true;
		it->t_commit = now_s();
		it->st[SEER_CKL_MEM] = SEER_CKS_DONE;
		if (!*ck->dir)
			it->st[SEER_CKL_LOCAL] = SEER_CKS_OFF;
		it->st[SEER_CKL_PEER] = *ck->peer.addr ? SEER_CKS_PENDING : SEER_CKS_OFF;
		c->begun = 0;
		pthread_cond_broadcast(&ck->cv);
		reply(c->fd, m, 0, NULL, it, -1);
		return;
	}
	if (m->kind == SEER_MSG_CKPT_STATE) {
		reply(c->fd, m, 0, it->why[0] ? it->why : NULL, it, -1);
		return;
	}
	if (m->kind == SEER_MSG_CKPT_WAIT && m->level > SEER_CKL_MEM && m->level < SEER_CKL_COUNT_) {
		int st = wait_state(it, m->level, msg, sizeof(msg));
		if (st <= 0) {
			reply(c->fd, m, st, st ? msg : NULL, it, -1);
			return;
		}
		c->wait = true;
		c->req = *m;
		c->deadline = deadline_of(m->timeout_ms);
		return;
	}
	snprintf(msg, sizeof(msg), "unknown checkpoint request kind %u (level %u)", m->kind, m->level);
	reply(c->fd, m, SEER_EPROTO, msg, NULL, -1);
}

/* Waiting BEGINs and WAITs that can be answered now (or timed out). */
static void answer_waiters(struct ckpt *ck)
{
	double t = now_s();
	char msg[SEER_ERRMSG_MAX], a[32], b[32], c3[32];
	for (size_t i = 0; i < ck->nconns; i++) {
		struct ck_conn *c = &ck->conns[i];
		bool late = c->deadline >= 0 && t >= c->deadline;
		if (c->begin_wait) {
			if (ck->stopping) {
				c->begin_wait = false;
				reply(c->fd, &c->req, SEER_ESHUTDOWN, "seerd is stopping: it takes no "
				      "new checkpoint", NULL, -1);
			} else if (ck->mem_used + c->req.size <= ck->cfg->checkpoint.memory) {
				begin_now(ck, c);
			} else if (late) {
				c->begin_wait = false;
				snprintf(msg, sizeof(msg), "checkpoint memory full: %s of checkpoints in "
					 "flight, this one needs %s of [checkpoint] memory %s; raise it "
					 "(seerd --set checkpoint.memory=...) or wait longer",
					 fmt_size(a, sizeof(a), ck->mem_used),
					 fmt_size(b, sizeof(b), c->req.size),
					 fmt_size(c3, sizeof(c3), ck->cfg->checkpoint.memory));
				reply(c->fd, &c->req, -ENOMEM, msg, NULL, -1);
			}
		}
		if (c->wait) {
			struct ck_item *it = item_find(ck, c->req.id);
			int st = it ? wait_state(it, c->req.level, msg, sizeof(msg)) : -ENOENT;
			if (!it)
				snprintf(msg, sizeof(msg), "the checkpoint was forgotten");
			if (st <= 0) {
				c->wait = false;
				reply(c->fd, &c->req, st, st ? msg : NULL, it, -1);
			} else if (late) {
				c->wait = false;
				snprintf(msg, sizeof(msg), "not %s within the timeout", level_names[c->req.level]);
				reply(c->fd, &c->req, -ETIMEDOUT, msg, it, -1);
			}
		}
	}
}

static void *svc_main(void *arg)
{
	struct ckpt *ck = arg;
	struct pollfd *pf = NULL;
	size_t cap = 0;
	pthread_mutex_lock(&ck->mu);
	while (!ck->stop) {
		/* take the connections the dispatcher handed over */
		for (size_t k = 0; k < ck->nin; k++) {
			if (ck->nconns == ck->cap_conns) {
				ck->cap_conns = ck->cap_conns ? 2 * ck->cap_conns : 16;
				ck->conns = realloc(ck->conns, ck->cap_conns * sizeof(*ck->conns));
				if (!ck->conns)
					abort();
			}
			struct ck_in *in = &ck->in[k];
			ck->conns[ck->nconns++] = (struct ck_conn){ .fd = in->fd, .pid = in->pid };
			if (in->n != sizeof(in->m) || in->m.version != SEER_CKPT_VERSION) {
				reply(in->fd, NULL, SEER_EPROTO, "checkpoint protocol version mismatch: "
				      "use the libseer of this seer build", NULL, -1);
				conn_drop(ck, ck->nconns - 1);
				continue;
			}
			on_request(ck, ck->nconns - 1, &in->m);
		}
		ck->nin = 0;
		answer_waiters(ck);
		if (cap < ck->nconns + 1) {
			cap = ck->nconns + 16;
			pf = realloc(pf, cap * sizeof(*pf));
			if (!pf)
				abort();
		}
		pf[0] = (struct pollfd){ .fd = ck->efd, .events = POLLIN };
		double t = now_s(), next = t + 1.0;
		for (size_t i = 0; i < ck->nconns; i++) {
			pf[i + 1] = (struct pollfd){ .fd = ck->conns[i].fd, .events = POLLIN };
			if ((ck->conns[i].begin_wait || ck->conns[i].wait) && ck->conns[i].deadline >= 0)
				next = MIN(next, ck->conns[i].deadline);
		}
		size_t n = ck->nconns;
		pthread_mutex_unlock(&ck->mu);
		int ms = (int)MAX(0.0, (next - t) * 1000.0 + 1);
		int k = poll(pf, n + 1, ms);
		if (pf[0].revents & POLLIN) {
			uint64_t v;
			ssize_t r UNUSED = read(ck->efd, &v, sizeof(v));
		}
		pthread_mutex_lock(&ck->mu);
		if (k <= 0)
			continue;
		/* from the end: conn_drop moves the last connection into i */
		for (size_t i = n; i-- > 0;) {
			if (!pf[i + 1].revents)
				continue;
			struct seer_msg_ckpt m;
			ssize_t r = sock_recv(ck->conns[i].fd, &m, sizeof(m), NULL, NULL, 0);
			if (r == -EAGAIN || r == -EINTR)
				continue;
			if (r != (ssize_t)sizeof(m) || m.magic != SEER_MAGIC_CKPT ||
			    m.version != SEER_CKPT_VERSION) {
				if (r > 0)
					reply(ck->conns[i].fd, NULL, SEER_EPROTO, "malformed checkpoint "
					      "request", NULL, -1);
				conn_drop(ck, i);
				continue;
			}
			m.path[sizeof(m.path) - 1] = '\0';
			on_request(ck, i, &m);
		}
	}
	while (ck->nconns)
		conn_drop(ck, ck->nconns - 1);
	pthread_mutex_unlock(&ck->mu);
	free(pf);
	return NULL;
}

/* ---- the dispatcher's side ---------------------------------------------- */

void ckpt_attach(struct ckpt *ck, int fd, const void *msg, size_t n, pid_t pid)
{
	pthread_mutex_lock(&ck->mu);
	if (ck->nin == ck->cap_in) {
		ck->cap_in = ck->cap_in ? 2 * ck->cap_in : 16;
		ck->in = realloc(ck->in, ck->cap_in * sizeof(*ck->in));
		if (!ck->in)
			abort();
	}
	struct ck_in *in = &ck->in[ck->nin++];
	in->fd = fd;
	in->pid = pid;
	in->n = MIN(n, sizeof(in->m));
	memset(&in->m, 0, sizeof(in->m));
	memcpy(&in->m, msg, in->n);
	in->m.path[sizeof(in->m.path) - 1] = '\0';
	pthread_mutex_unlock(&ck->mu);
	ckpt_wake_svc(ck);
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
	ckpt_peer_list_json(ck, root);
	json_object_set_new(root, "nvme_dir", json_string(ck->dir));
	json_object_set_new(root, "memory_used", json_integer((json_int_t)ck->mem_used));
	json_object_set_new(root, "memory", json_integer((json_int_t)ck->cfg->checkpoint.memory));
	json_object_set_new(root, "nvme_used", json_integer((json_int_t)ck->nvme_used));
	json_object_set_new(root, "nvme", json_integer((json_int_t)ck->cfg->checkpoint.nvme));
	json_object_set_new(root, "drain_rate", json_real(ck->rate));
	json_object_set_new(root, "drain_rate_cap", json_integer((json_int_t)ck->cfg->checkpoint.drain_rate));
	json_object_set_new(root, "bytes_to_drain", json_integer((json_int_t)left));
	json_object_set_new(root, "eta_s", json_real(ck->rate > 0 ? (double)left / ck->rate : 0));
	json_object_set_new(root, "drain_mode", json_string(drain_mode_name(ck->mode)));
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
	ck->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ck->efd < 0) {
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
		ckpt_peer_recover(ck);
	} else {
		log_info("checkpoints: no NVMe tier ([cache] nvme_dir unset or [checkpoint] nvme 0): "
			 "they wait in memory and go straight to the PFS");
	}
	if (pthread_create(&ck->th_svc, NULL, svc_main, ck) != 0)
		goto thread;
	ck->started_svc = true;
	if (pthread_create(&ck->th_local, NULL, local_main, ck) != 0)
		goto thread;
	ck->started_local = true;
	if (pthread_create(&ck->th_drain, NULL, drain_main, ck) != 0)
		goto thread;
	ck->started_drain = true;
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
	ckpt_wake_svc(ck);
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
	if (ck->efd >= 0)
		ckpt_wake_svc(ck);
	if (ck->started_svc)
		pthread_join(ck->th_svc, NULL);
	if (ck->started_local)
		pthread_join(ck->th_local, NULL);
	if (ck->started_drain)
		pthread_join(ck->th_drain, NULL);
	ckpt_peer_destroy(ck);
	for (size_t k = 0; k < ck->nin; k++)
		close(ck->in[k].fd);
	free(ck->in);
	while (ck->nconns)
		conn_drop(ck, ck->nconns - 1);
	free(ck->conns);
	while (ck->items)
		ckpt_store_drop(ck, ck->items);
	if (ck->efd >= 0)
		close(ck->efd);
	if (*ck->dir)
		rmdir(ck->dir); /* only when empty: undrained copies stay for the next seerd */
	pthread_cond_destroy(&ck->cv);
	pthread_cond_destroy(&ck->idle);
	pthread_mutex_destroy(&ck->meta_mu);
	pthread_mutex_destroy(&ck->mu);
	free(ck);
}
