/* The NVMe tier: one cache file per node on node-local flash, each planned
 * sample written once (after its first PFS read) and read back checked.
 *
 * Owns the file (e->nvme_fd, unlinked as soon as it is open), the written
 * copies' checksums (e->nvme_sum) and the loads others follow (a task that
 * needs a copy being written waits for it instead of reading the PFS
 * again). Dispatcher thread, except that the I/O threads read and write the
 * file (worker.c) at offsets the plan gives. Failure: a tier that cannot be
 * set up is left out (logged once); a write or read error disables it for
 * the rest of the job (its samples then come from the PFS); a copy failing
 * its checksum is never delivered (read from the PFS and written again). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../src/util/util.h"
#include "engine_int.h"
#include "node_path.h"
#include "seer.h"

uint64_t nvme_io_len(const struct engine *e, uint64_t len)
{
	return e->nvme_direct ? ALIGN_UP(len, (uint64_t)e->nvme_align) : len;
}

void nvme_disable(struct engine *e, const char *why)
{
	if (!e->nvme_ok)
		return;
	e->nvme_ok = false; /* its samples are read from the PFS from now on */
	log_warn("NVMe tier disabled (%s): serving from RAM, peers and the PFS", why);
}

/* Open this node's NVMe cache file, reserve its space and unlink it at once:
 * it disappears with the daemon whatever way the daemon ends. A tier that
 * cannot be set up is reported once and left out. */
void nvme_open(struct engine *e)
{
	const struct seer_config *cfg = e->cfg;
	e->nvme_fd = -1;
	if (cfg->nvme == 0 || !cfg->nvme_dir || !*cfg->nvme_dir)
		return;
	char dir[4096], path[4200], why[512];
	e->nvme_ok = true; /* so nvme_disable reports */
	int rc = node_path(dir, sizeof(dir), cfg->nvme_dir, e->node);
	if (rc != 0) {
		snprintf(why, sizeof(why), "[cache] nvme_dir %.300s is too long", cfg->nvme_dir);
		nvme_disable(e, why);
		return;
	}
	rc = mkdir_p(dir, 0700);
	if (rc != 0) {
		snprintf(why, sizeof(why), "cannot create %.300s: %s", dir, strerror(-rc));
		nvme_disable(e, why);
		return;
	}
	snprintf(path, sizeof(path), "%s/.seer-%s-n%u-%d.cache", dir, cfg->job_id, e->node,
		 (int)getpid());
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		snprintf(why, sizeof(why), "cannot create %.300s: %s", path, strerror(errno));
		nvme_disable(e, why);
		return;
	}
	unlink(path);
	uint64_t cap = cfg->nvme & ~(NVME_ALIGN - 1);
	rc = posix_fallocate(fd, 0, (off_t)cap);
	if (rc == EOPNOTSUPP || rc == EINVAL) {
		rc = ftruncate(fd, (off_t)cap) == 0 ? 0 : errno;
	}
	if (rc != 0) {
		char a[32];
		snprintf(why, sizeof(why), "%.300s has no room for %s: %s; lower [cache] nvme", dir,
			 fmt_size(a, sizeof(a), cap), strerror(rc));
		close(fd);
		nvme_disable(e, why);
		return;
	}
	/* O_DIRECT when the file system has it, at the alignment it asks for
	 * (statx STATX_DIOALIGN, Linux 6.1+; 4 KiB when it does not say) */
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	e->nvme_align = PLAN_RAM_ALIGN;
	int dfd = open(self, O_RDWR | O_DIRECT | O_CLOEXEC);
	if (dfd >= 0) {
		uint32_t align = (uint32_t)NVME_ALIGN;
		struct statx sx;
		if (syscall(SYS_statx, dfd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
		    (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align > 0)
			align = MAX(MAX(sx.stx_dio_offset_align, sx.stx_dio_mem_align), 64u);
		void *probe = NULL;
		if (align <= NVME_ALIGN && posix_memalign(&probe, NVME_ALIGN, NVME_ALIGN) == 0 &&
		    pread(dfd, probe, align, 0) == (ssize_t)align) {
			close(fd);
			fd = dfd;
			e->nvme_direct = true;
			e->nvme_align = align;
		} else {
			close(dfd);
		}
		free(probe);
	}
	e->nvme_fd = fd;
	e->nvme_cap = cap;
	e->nvme_size = cap;
	e->nvme_sum = xcalloc(e->cat->nsamples, sizeof(uint64_t));
	char a[32];
	log_info("NVMe tier: %s in %s (%s, %u-byte slots)", fmt_size(a, sizeof(a), cap), dir,
		 e->nvme_direct ? "O_DIRECT" : "buffered: the file system has no O_DIRECT",
		 e->nvme_align);
}

/* Point tk at the written NVMe copy of its sample (its one way to read it). */
void nvme_read_copy(struct engine *e, struct etask *tk)
{
	tk->kind = TK_NVME_READ;
	tk->nvme_off = place_local_off(e, tk->sample);
	tk->sum = e->nvme_sum[tk->sample];
}

/* tk reads s, which this node keeps on NVMe: from the copy when it is
 * written, else from the PFS writing the copy afterwards (tk then loads it).
 * When another task is loading the copy, returns that task and leaves tk
 * as it is. */
struct etask *nvme_claim(struct engine *e, struct etask *tk, uint32_t s)
{
	uint32_t st = e->cstate[s];
	if (st == CS_READY) {
		nvme_read_copy(e, tk);
	} else if (st == CS_ABSENT) {
		tk->to_nvme = true; /* this node's one PFS read of it, kept on NVMe */
		e->cstate[s] = CS_TASK0 + tk->id;
	} else {
		return task_get(e, st - CS_TASK0);
	}
	return NULL;
}

/* A load ended: its followers read the fresh NVMe copy (ok) or the PFS. */
void nvme_release_followers(struct engine *e, struct etask *tk, bool ok)
{
	struct etask *f = tk->followers;
	tk->followers = NULL;
	while (f) {
		struct etask *next = f->next_follower;
		f->next_follower = NULL;
		if (ok) {
			nvme_read_copy(e, f);
		} else {
			f->kind = TK_PFS;
		}
		task_submit(e, f, f->need_g);
		f = next;
	}
}

/* An NVMe write finished: the copy is usable, or the tier is not. */
void nvme_write_done(struct engine *e, struct etask *tk, int status)
{
	if (status == 0) {
		e->nvme_sum[tk->sample] = tk->sum;
		atomic_store_explicit(&e->cstate[tk->sample], CS_READY, memory_order_release);
		e->nvme_loaded++;
		e->nvme_loaded_bytes += tk->len;
		stats_epoch(e, e->epochs_done)->nvme_written++;
	} else {
		e->cstate[tk->sample] = CS_ABSENT;
		nvme_disable(e, tk->err[0] ? tk->err : strerror(-status));
	}
	nvme_release_followers(e, tk, status == 0);
	if (!tk->pin.peer && tk->stage_rank >= 0) {
		struct trainer *t = &e->tr[tk->pin.a];
		if (t->gen == tk->pin.b && t->slots) {
			struct tslot *sl = &t->slots[tk->pin.c & (t->nslots - 1)];
			if (sl->g == tk->pin.c && sl->pins > 0) {
				sl->pins--;
				pf_reclaim(t);
			}
		}
	}
	if (tk->bounce >= 0)
		peer_bounce_unref(e, tk->bounce);
}

/* A PFS read that must also land on NVMe: queue the write, pinning the
 * memory it reads (the batch's staging, or a bounce slot). */
void nvme_write_after(struct engine *e, struct etask *tk)
{
	struct etask *w = task_new(e);
	w->kind = TK_NVME_WRITE;
	w->sample = tk->sample;
	w->dst_off = tk->dst_off;
	w->len = tk->len;
	w->nvme_off = place_local_off(e, tk->sample);
	w->bg_key = tk->bg_key; /* a background fill's write stays in the background */
	e->cstate[tk->sample] = CS_TASK0 + w->id;
	w->followers = tk->followers;
	tk->followers = NULL;
	if (tk->bounce >= 0) {
		w->bounce = tk->bounce;
		e->bounce_refs[tk->bounce]++;
	} else {
		/* the one trainer waiter of a staging read */
		w->pin = tk->w[0];
		w->stage_rank = tk->stage_rank;
		struct trainer *t = &e->tr[w->pin.a];
		t->inflight++;
		struct tslot *sl = &t->slots[w->pin.c & (t->nslots - 1)];
		if (t->gen == w->pin.b && sl->g == w->pin.c)
			sl->pins++;
	}
	task_submit(e, w, tk->need_g);
}

/* The plan uses `used` bytes of the file (owned samples and replicas, at
 * their offsets): the file keeps that much reserved and gives the rest of
 * [cache] nvme back to the file system; a later, larger plan (a re-plan)
 * reserves again, and a file system without room then disables the tier. */
void nvme_fit(struct engine *e, uint64_t used)
{
	if (e->nvme_fd < 0 || !e->nvme_ok)
		return;
	uint64_t want = MIN(ALIGN_UP(used, NVME_ALIGN), e->nvme_cap);
	if (want == e->nvme_size)
		return;
	int rc = 0;
	if (want < e->nvme_size)
		rc = ftruncate(e->nvme_fd, (off_t)want) == 0 ? 0 : errno;
	else if ((rc = posix_fallocate(e->nvme_fd, 0, (off_t)want)) == EOPNOTSUPP || rc == EINVAL)
		rc = ftruncate(e->nvme_fd, (off_t)want) == 0 ? 0 : errno;
	if (rc != 0) {
		char why[256], a[32];
		snprintf(why, sizeof(why), "cannot size the cache file to %s: %s",
			 fmt_size(a, sizeof(a), want), strerror(rc));
		nvme_disable(e, why);
		return;
	}
	char a[32], b[32];
	log_info("NVMe tier: the plan uses %s of %s; the file keeps that much",
		 fmt_size(a, sizeof(a), want), fmt_size(b, sizeof(b), e->nvme_cap));
	e->nvme_size = want;
}

/* Close the tier (engine_destroy, after the I/O threads stopped). */
void nvme_close(struct engine *e)
{
	free(e->nvme_sum);
	e->nvme_sum = NULL;
	if (e->nvme_fd >= 0)
		close(e->nvme_fd);
	e->nvme_fd = -1;
	e->nvme_ok = false;
}

/* A PFS read that was to give this node its NVMe copy ended: the copy is
 * written next, or (failed, or the tier is off) whoever followed the load
 * reads on its own. */
void nvme_load_done(struct engine *e, struct etask *tk, int status)
{
	if (status == 0 && e->nvme_ok) {
		nvme_write_after(e, tk);
	} else {
		e->cstate[tk->sample] = CS_ABSENT;
		nvme_release_followers(e, tk, false);
	}
}

/* tk's NVMe copy was bad or unreadable: it is never delivered. tk reads the
 * PFS instead and, while the tier works, writes a fresh copy. */
void nvme_read_failed(struct engine *e, struct etask *tk, int status)
{
	if (status == SEER_EDATASET) {
		stats_epoch(e, e->epochs_done)->nvme_corrupt++;
		log_warn("%s: reading sample %u from the PFS instead", tk->err, tk->sample);
	} else {
		/* the device fails: said once, and no batch plans on it again */
		nvme_disable(e, tk->err[0] ? tk->err : strerror(-status));
	}
	tk->kind = TK_PFS;
	tk->err[0] = '\0';
	tk->to_nvme = e->nvme_ok && e->cstate[tk->sample] == CS_READY;
	if (tk->to_nvme)
		e->cstate[tk->sample] = CS_TASK0 + tk->id;
}
