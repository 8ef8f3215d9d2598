/* The checkpoint stage's drain: each committed checkpoint of this node, from
 * its NVMe copy (or from memory without one), to its PFS path through a
 * temporary name beside it (<dir>/.<name>.seer-<id>.tmp, fsync, rename,
 * fsync of the directory: a reader never sees a partial file), capped by
 * [checkpoint] drain_rate and paced by seerd's own PFS reads now and in the
 * plan ahead (the outlook callback; drain_pace.h: full rate, the plan's gaps
 * filled, or drain_share of the time while reads are queued), in pieces of
 * CK_DRAIN_PIECE each pushed out of the PFS client's write cache.
 *
 * Owns: an item's drain (st[SEER_CKL_PFS] once committed, drained,
 * mode_bytes, drain_t0, retry_at, drain_fails, rec_drained and its NVMe
 * record) and struct ck_drain (ck->drain, checkpoint_int.h): its thread and
 * its figures for seerctl (the last rate, the running pace).
 *
 * Threads: the drain thread (ckpt_drain_main, started by ckpt_create), one
 * checkpoint at a time, marked busy meanwhile; it takes ck->mu between
 * pieces, and calls the outlook without it.
 *
 * Failure: a PFS write that fails (EIO, ENOSPC, permissions) leaves no file
 * at the path, keeps the copy it has (NVMe or memory), says why (WAIT,
 * STATE, seerctl) and is tried again every CK_RETRY_S; seerd stopping
 * during a drain removes the temporary file, and the NVMe record, still
 * saying "not drained", makes the next seerd of the node drain it again. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../proto/seer_proto.h"
#include "../src/util/util.h"
#include "checkpoint_int.h"

/* messages (why, paths in them) are cut to their fixed buffers on purpose */
#pragma GCC diagnostic ignored "-Wformat-truncation"

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
		buf = malloc(CK_DRAIN_PIECE);
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
	/* pieces of CK_DRAIN_PIECE (a read queued meanwhile waits for one at
	 * most); under a cap, of an eighth of a second's bytes if less */
	uint64_t chunk = rate ? MAX(MIN(rate / 8, (uint64_t)CK_DRAIN_PIECE), (uint64_t)4096)
			      : CK_DRAIN_PIECE;
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
		/* out of a PFS client's write cache now, so the piece's time is
		 * the link's and the pace below holds on the wire (not later, all
		 * at once, in the flush); where the file system has no such
		 * cache it does nothing. A failed write-back is reported here
		 * once (the kernel advances the file's error mark: the fsync
		 * below would then say 0), so it fails the drain here. */
		if (sync_file_range(out, (off_t)off, (off_t)n, SYNC_FILE_RANGE_WAIT_BEFORE |
				    SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) != 0 &&
		    errno != EINVAL && errno != ESPIPE && errno != ENOSYS && errno != EOPNOTSUPP) {
			rc = -errno;
			snprintf(why, wlen, "writing %s: %s", tmp, strerror(errno));
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
		ck->drain.mode = m;
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

void *ckpt_drain_main(void *arg)
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
		ck->drain.mode = DRAIN_IDLE;
		if (rc == 0) {
			it->st[SEER_CKL_PFS] = SEER_CKS_DONE;
			it->t_pfs = now_s();
			it->wall_pfs = time(NULL);
			it->why[0] = '\0';
			ck->drain.rate = dt > 0 ? (double)it->size / dt : 0;
			char f[32], p[32], y[32];
			log_info("checkpoint %s (%s) on the PFS in %.2f s (%.1f MB/s; at full rate %s, "
				 "in the gaps between the plan's PFS reads %s, yielding to queued reads "
				 "%s)",
				 it->path, fmt_size(sz, sizeof(sz), it->size), dt, ck->drain.rate / 1e6,
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
		ckpt_svc_wake(ck);
	}
	pthread_mutex_unlock(&ck->mu);
	return NULL;
}
