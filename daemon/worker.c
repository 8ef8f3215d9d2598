/* The I/O threads' side of a task (src/util/iopool.c calls these).
 *
 * Each I/O thread has its own catalog reader (worker_init); worker_exec
 * moves one task's bytes: the dataset into the arena (PFS reads, with
 * retries of transient errors; an extent's byte range, its members'
 * samples cut out of it), the NVMe copy into the arena (checked), or arena
 * bytes to the NVMe file; a read into a decoded-image cache entry (task
 * `blob`) reads the file into the thread's buffer and waits for the
 * transform pool to decode it in place. Runs on the I/O threads only. It
 * reads the task it was handed and the engine fields engine_int.h lists as
 * fixed at creation (cfg, cat, tasks.reader_fds, ar.base, nvme, ext.base, xf)
 * plus the atomic `stopping`; it writes only the task, its own buffer and
 * the arena bytes the task names. Failure: the task's status
 * (negative errno or SEER_E*) and a
 * message in its err. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#include "../src/util/util.h"
#include "engine_int.h"
#include "nvme.h"
#include "seer.h"

static bool transient(int rc)
{
	return rc < 0 && rc > -4096 && rc != -ESTALE && rc != -ENAMETOOLONG && rc != -ERANGE;
}

/* After attempt `attempt` of a PFS read ended with rc: whether to try again
 * (a transient error, retries left, no stop), after sleeping *backoff_ms,
 * which doubles. */
static bool retry_after(const struct engine *e, int rc, uint32_t attempt, double *backoff_ms)
{
	if (rc == 0 || !transient(rc) || attempt >= e->cfg->prefetch.retries ||
	    atomic_load_explicit(&e->stopping, memory_order_relaxed))
		return false;
	sleep_ns((uint64_t)(*backoff_ms * 1e6));
	*backoff_ms *= 2;
	return true;
}

/* worker_blob_read's buffer: this I/O thread's, freed by worker_fini */
static _Thread_local uint8_t *blob_buf;
static _Thread_local size_t blob_cap;

void *worker_init(void *ctx, unsigned idx)
{
	(void)idx;
	struct engine *e = ctx;
	struct catalog_reader *rd = xmalloc(sizeof(*rd));
	catalog_reader_init(rd, e->cat);
	catalog_reader_limit_fds(rd, e->tasks.reader_fds);
	return rd;
}

void worker_fini(void *tls, void *ctx)
{
	(void)ctx;
	catalog_reader_fini(tls);
	free(tls);
	free(blob_buf); /* worker_blob_read's, on this same thread */
	blob_buf = NULL;
	blob_cap = 0;
}

/* TK_PFS: the dataset through the format's reader, transient errors tried
 * again with a doubling back-off (not once the engine stops). */
static int worker_pfs_read(const struct engine *e, struct etask *t, struct catalog_reader *rd,
			   uint8_t *dst)
{
	double backoff_ms = e->cfg->prefetch.retry_backoff_ms;
	int rc;
	uint64_t read0 = rd->bytes_read;
	for (uint32_t attempt = 0;; attempt++) {
		rc = catalog_read(rd, t->sample, dst);
		t->pfs_read = rd->bytes_read - read0;
		t->attempts = attempt + 1;
		if (!retry_after(e, rc, attempt, &backoff_ms))
			break;
	}
	if (t->attempts > 1 && rc == 0)
		str_copy(t->err, sizeof(t->err), rd->err); /* why it had to retry, for the log */
	if (rc != 0) {
		str_copy(t->err, sizeof(t->err), rd->err);
		if (t->attempts > 1) {
			char tail[40];
			snprintf(tail, sizeof(tail), " (after %u attempts)", t->attempts);
			size_t n = strlen(t->err), m = strlen(tail);
			if (n + m >= sizeof(t->err))
				n = sizeof(t->err) - m - 1;
			memcpy(t->err + n, tail, m + 1);
		}
	}
	return rc;
}

/* TK_PFS into a decoded-cache entry (transform.cache = decoded): the file
 * into this thread's buffer, then a transform thread decodes it into dst
 * (this thread waits: each I/O thread holds at most one file, in a buffer
 * as large as the largest it read, freed with the thread). */
static int worker_blob_read(const struct engine *e, struct etask *t, struct catalog_reader *rd,
			    uint8_t *dst)
{
	uint64_t len = e->cat->samples[t->sample].length;
	if (len > blob_cap) {
		free(blob_buf);
		blob_cap = 0;
		blob_buf = malloc(MAX(len, 1ull));
		if (!blob_buf) {
			snprintf(t->err, sizeof(t->err), "out of memory reading sample %u", t->sample);
			return -ENOMEM;
		}
		blob_cap = len;
	}
	int rc = worker_pfs_read(e, t, rd, blob_buf);
	return rc == 0 ? xfs_decode_blob(e, t, blob_buf, len, dst) : rc;
}

static void cut_done(void *ctx, uint32_t i, int rc, const char *err)
{
	struct etask *m = ((struct etask *)ctx)->mem[i];
	m->io.status = rc;
	if (rc)
		str_copy(m->err, sizeof(m->err), err);
}

/* The members' destinations faulted in with one call before they are
 * written, when they lie close together (a file's RAM slots: the plan puts
 * them in file order): page by page, a first write to fresh memory traps
 * once a page, which on the development VM (nested virtualisation) costs
 * 50 us a page. A hint: errors are ignored (kernels before 5.14 lack
 * MADV_POPULATE_WRITE). */
static void populate_dsts(const struct engine *e, const struct etask *t)
{
#ifdef MADV_POPULATE_WRITE
	uint64_t lo = UINT64_MAX, hi = 0, bytes = 0;
	for (uint32_t i = 0; i < t->nmem; i++) {
		lo = MIN(lo, t->mem[i]->dst_off);
		hi = MAX(hi, t->mem[i]->dst_off + t->mem[i]->len);
		bytes += t->mem[i]->len;
	}
	if (t->nmem == 0 || hi - lo > 2 * bytes + (1u << 20))
		return; /* scattered (staging spans of several batches): fault as they come */
	uintptr_t a = (uintptr_t)(e->ar.base + lo) & ~(uintptr_t)4095;
	uintptr_t b = ALIGN_UP((uintptr_t)(e->ar.base + hi), (uintptr_t)4096);
	madvise((void *)a, b - a, MADV_POPULATE_WRITE);
#else
	(void)e;
	(void)t;
#endif
}

/* TK_EXTENT: the byte range into its buffer (counted in the extent memory
 * the dispatcher reserved: a range of the extent region, or its own),
 * transient errors tried again as for one sample; then every member's
 * sample cut into its destination, its status and message in the member. */
static int worker_extent(const struct engine *e, struct etask *t, struct catalog_reader *rd)
{
	uint8_t *buf = t->xpool ? e->ext.base + t->xoff
				: mmap(NULL, t->len, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t *ids = malloc(t->nmem * sizeof(*ids));
	void **dsts = malloc(t->nmem * sizeof(*dsts));
	int rc = buf == MAP_FAILED || !ids || !dsts ? -ENOMEM : 0;
	double backoff_ms = e->cfg->prefetch.retry_backoff_ms;
	t->pfs_read = 0;
	for (uint32_t attempt = 0; rc == 0; attempt++) {
		rc = catalog_read_range(rd, t->file, t->foff, t->len, buf);
		t->pfs_read += rd->last_bytes;
		t->attempts = attempt + 1;
		if (!retry_after(e, rc, attempt, &backoff_ms))
			break;
		rc = 0;
	}
	if (rc == 0) {
		populate_dsts(e, t);
		for (uint32_t i = 0; i < t->nmem; i++) {
			ids[i] = t->mem[i]->sample;
			dsts[i] = e->ar.base + t->mem[i]->dst_off;
			t->mem[i]->io.status = 0;
		}
		catalog_cut(rd, t->file, buf, t->foff, t->len, t->nmem, ids, dsts, cut_done, t);
	} else if (rc == -ENOMEM) {
		snprintf(t->err, sizeof(t->err), "no memory for a %llu-byte read",
			 (unsigned long long)t->len);
	} else {
		str_copy(t->err, sizeof(t->err), rd->err);
	}
	if (!t->xpool && buf != MAP_FAILED)
		munmap(buf, t->len);
	free(ids);
	free(dsts);
	return rc;
}

/* One task on an I/O thread: its bytes land at ar.base + dst_off (a staging
 * span, a RAM slot or a bounce slot), or its error is in t->err. The raw
 * bytes are complete here, on the thread that read them; the tensors are
 * made on the transform threads once the dispatcher saw them land
 * (transform.c), decoded-cache entries here through worker_blob_read. */
void worker_exec(struct io_task *io, void *tls, void *ctx)
{
	const struct engine *e = ctx;
	struct etask *t = (struct etask *)io;
	uint8_t *dst = e->ar.base + t->dst_off;
	if (t->kind == TK_NVME_READ)
		io->status = nvme_pread(e->nvme, t->sample, dst, t->len, t->nvme_off, t->sum, t->err,
					 sizeof(t->err));
	else if (t->kind == TK_NVME_WRITE)
		io->status = nvme_pwrite(e->nvme, t->sample, dst, t->len, t->nvme_off, &t->sum, t->err,
					  sizeof(t->err));
	else if (t->kind == TK_EXTENT)
		io->status = worker_extent(e, t, tls);
	else if (t->blob)
		io->status = worker_blob_read(e, t, tls, dst);
	else
		io->status = worker_pfs_read(e, t, tls, dst);
}
