/* The transform stage: decoded, augmented tensors in the staging arena
 * ([transform] decode = image; the module itself is src/xform/).
 *
 * Between the caches and the trainer: once a sample's encoded bytes (or its
 * decoded-cache blob) are in the arena -- a RAM slot read in place, or a read
 * into the batch's staging -- a transform thread crops, resizes, flips and
 * normalises it into its slot of the batch tensor, one contiguous block
 * [n, 3, H, W] (or [n, H, W, 3]) at the head of the batch's staging span.
 * Every random choice is a pure function of (job seed, epoch, sample id):
 * the tensors do not depend on threads, trainers, nodes or restarts.
 *
 * With transform.cache = decoded the cache tiers (RAM, NVMe, peers) hold
 * decoded images (xf_decode_blob), planned like file bytes with their own
 * sizes (from the image sizes the catalog recorded), so later epochs only
 * crop, resize, flip and normalise.
 *
 * Owns: the transform parameters, the per-sample type of the arena's type
 * table, the cached lengths (decoded), the transform pool and its jobs, and
 * the transform statistics.
 *
 * Threads: a pool of its own (transform.threads), separate from the I/O
 * pool: I/O threads block on the PFS, transform is CPU work, and a shared
 * pool would either leave cores idle while reads wait or queue decodes
 * behind reads. Its threads are pinned with the daemon's other threads
 * (engine_repin). They run two kinds of job:
 *   - a sample's tensor (submitted by the dispatcher, handed back through
 *     the done list and its eventfd, like the I/O pool's tasks);
 *   - a decoded-cache blob (submitted by an I/O thread that has just read
 *     the file, which waits for it: decodes then run on the transform
 *     threads, and each I/O thread holds at most one encoded file).
 * A thread reads the job, the fixed-at-creation engine fields (cfg, cat,
 * ar.base) and this stage's parameters, and writes the job and the arena
 * bytes the job names. Everything else here is the dispatcher's.
 *
 * Failure: a sample that is not an image (or is corrupt) fails its batch
 * with the file named (dataset.on_corrupt = fail), or is substituted by the
 * next valid sample (skip), as a corrupt read is. Out of memory for a
 * thread's buffers fails the samples it is given, with the reason. */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../src/util/handoff.h"
#include "../src/util/pqueue.h"
#include "../src/util/util.h"
#include "../src/xform/xform.h"
#include "engine_int.h"
#include "seer.h"

enum { XJ_SAMPLE = 0, XJ_BLOB = 1 };

struct xjob {
	union {
		struct xjob *next;        /* done list, free list */
		struct handoff_node link; /* the same, as the done list sees it */
	};
	struct pqueue_node pq;       /* pq.key: the batch that needs it, as reads are keyed */
	uint8_t kind;
	bool done;               /* XJ_BLOB: the waiting I/O thread may go on */
	int status;
	/* XJ_SAMPLE: batch g's sample i of trainer rank (session gen) */
	uint32_t rank, gen, i, sample;
	uint64_t g, epoch;
	uint64_t src_off, src_len, dst_off;
	/* XJ_BLOB: the encoded file (the I/O thread's buffer) into dst */
	const uint8_t *enc;
	size_t enc_len, cap;
	uint8_t *dst;
	struct xf_info info;
	char err[SEER_ERRMSG_MAX];
};

struct xfs_epoch {
	uint64_t samples, decoded, from_blob, decode_ns, resize_ns, failed, skipped;
	uint64_t blobs, blob_ns;
};

struct xfs {
	struct engine *e;
	struct xfs_events ev;     /* what it hands back: the engine's handlers */
	struct xf_params p;
	uint64_t sb;              /* bytes of one sample's tensor */
	uint64_t dims[3];
	int dtype;
	uint32_t layout;          /* SEER_LY_* */
	uint32_t type;            /* the per-sample type's index in the arena's table */
	bool decoded;             /* the cache tiers hold decoded images */
	char why[320];            /* what is cached, and why */
	uint64_t *clen;           /* decoded: per sample, the bytes the tiers hold */
	uint64_t ctotal, cmax;    /* sum and max of the cached lengths */

	/* the pool: mu guards everything down to `threads` */
	pthread_mutex_t mu;
	pthread_cond_t cv, done_cv;
	struct pqueue queue;      /* queued jobs (the I/O pool's queue: src/util/pqueue.h) */
	struct handoff done;      /* finished sample jobs, for the dispatcher */
	int efd;                  /* readable while done jobs wait */
	unsigned nthreads, active; /* started, allowed to run (the daemon's PUs) */
	bool stop;
	pthread_t *threads;
	_Atomic uint64_t blob_n, blob_ns; /* blobs decoded (transform threads) */

	/* the dispatcher's */
	struct xjob *free;
	uint64_t inflight;        /* sample jobs submitted, not yet taken back */
	uint64_t blob_seen, blob_ns_seen;
	struct xfs_epoch *ep;
	uint64_t nep;
	struct xfs_epoch all;
};

/* ---- the pool ---------------------------------------------------------------- */

_Static_assert(offsetof(struct xjob, link) == 0, "a done job is its hand-off node");

static struct xjob *job_of(struct pqueue_node *n)
{
	return (struct xjob *)((char *)n - offsetof(struct xjob, pq));
}

/* A job is finished (caller holds mu): a blob's waiter wakes, a sample goes
 * to the done list. The thread never touches a blob job after this. */
static void job_finished(struct xfs *x, struct xjob *j)
{
	if (j->kind == XJ_BLOB) {
		j->done = true;
		pthread_cond_broadcast(&x->done_cv);
		return;
	}
	handoff_push(&x->done, &j->link, x->efd);
}

static void job_exec(struct xfs *x, struct xf_scratch *s, struct xjob *j)
{
	const struct engine *e = x->e;
	if (!s) {
		j->status = -ENOMEM;
		str_copy(j->err, sizeof(j->err), "out of memory for a transform thread's buffers");
		return;
	}
	if (j->kind == XJ_BLOB) {
		uint64_t t0 = now_ns();
		size_t used = 0;
		j->status = xf_decode_blob(&x->p, s, j->enc, j->enc_len, j->dst, j->cap, &used, j->err,
					   sizeof(j->err));
		if (j->status == 0 && used != j->cap) {
			j->status = -ESTALE;
			snprintf(j->err, sizeof(j->err), "the image decodes to %zu bytes, the catalog "
				 "planned %zu: the file changed since the catalog was built (restart "
				 "seerd to rescan)", used, j->cap);
		}
		atomic_fetch_add_explicit(&x->blob_n, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&x->blob_ns, now_ns() - t0, memory_order_relaxed);
		return;
	}
	j->status = xf_transform(&x->p, s, e->cfg->job.seed, j->epoch, j->sample, e->ar.base + j->src_off,
				 j->src_len, e->ar.base + j->dst_off, &j->info, j->err, sizeof(j->err));
}

struct thread_arg {
	struct xfs *x;
	unsigned idx;
};

static void *xfs_main(void *arg)
{
	struct thread_arg ta = *(struct thread_arg *)arg;
	free(arg);
	struct xfs *x = ta.x;
	struct xf_scratch *s = xf_scratch_new(0);
	pthread_mutex_lock(&x->mu);
	for (;;) {
		while (!x->stop && (x->queue.n == 0 || ta.idx >= x->active))
			pthread_cond_wait(&x->cv, &x->mu);
		if (x->stop)
			break;
		struct xjob *j = job_of(pqueue_pop(&x->queue));
		pthread_mutex_unlock(&x->mu);
		job_exec(x, s, j);
		pthread_mutex_lock(&x->mu);
		job_finished(x, j);
	}
	pthread_mutex_unlock(&x->mu);
	xf_scratch_free(s);
	return NULL;
}

static void pool_submit(struct xfs *x, struct xjob *j)
{
	pthread_mutex_lock(&x->mu);
	if (x->stop) {
		j->status = -ECANCELED;
		job_finished(x, j);
	} else {
		pqueue_push(&x->queue, &j->pq);
		pthread_cond_signal(&x->cv);
	}
	pthread_mutex_unlock(&x->mu);
}

/* Stop the threads after their current job; queued jobs end with
 * -ECANCELED (a waiting I/O thread wakes). */
static void pool_stop(struct xfs *x)
{
	pthread_mutex_lock(&x->mu);
	x->stop = true;
	pthread_cond_broadcast(&x->cv);
	pthread_mutex_unlock(&x->mu);
	for (unsigned i = 0; i < x->nthreads; i++)
		pthread_join(x->threads[i], NULL);
	x->nthreads = 0;
	pthread_mutex_lock(&x->mu);
	while (x->queue.n > 0) {
		struct xjob *j = job_of(pqueue_pop(&x->queue));
		j->status = -ECANCELED;
		str_copy(j->err, sizeof(j->err), "the daemon is stopping");
		job_finished(x, j);
	}
	pthread_mutex_unlock(&x->mu);
}

static int pool_start(struct xfs *x, unsigned n, char *err, size_t errlen)
{
	x->threads = xcalloc(n, sizeof(pthread_t));
	x->active = n;
	for (unsigned i = 0; i < n; i++) {
		struct thread_arg *ta = xmalloc(sizeof(*ta));
		*ta = (struct thread_arg){ x, i };
		int rc = pthread_create(&x->threads[i], NULL, xfs_main, ta);
		if (rc != 0) {
			free(ta);
			snprintf(err, errlen, "cannot start %u transform threads: %s", n, strerror(rc));
			return -rc;
		}
		char name[16];
		snprintf(name, sizeof(name), "seer-xf%u", i % 10000u);
		pthread_setname_np(x->threads[i], name);
		x->nthreads = i + 1;
	}
	return 0;
}

/* ---- creation ------------------------------------------------------------------ */

/* What the cache tiers hold: decoded images (their planned lengths) or the
 * files, and why. */
static void plan_cache(struct xfs *x, const struct engine *e)
{
	const struct catalog *c = e->cat;
	x->ctotal = c->total_bytes;
	x->cmax = c->max_len;
	if (x->p.cache != XF_CACHE_DECODED) {
		snprintf(x->why, sizeof(x->why), "transform.cache = encoded: the caches hold the "
			 "files, every epoch decodes");
		return;
	}
	if (strcmp(e->cfg->cache.policy, "nopfs") == 0) {
		snprintf(x->why, sizeof(x->why), "files, not decoded images: transform.cache = "
			 "decoded is not available with cache.policy = nopfs");
		return;
	}
	if (!c->images) {
		snprintf(x->why, sizeof(x->why), "files, not decoded images: the catalog has no "
			 "image sizes to plan them with");
		return;
	}
	x->clen = xmalloc(c->nsamples * sizeof(uint64_t));
	x->ctotal = x->cmax = 0;
	uint64_t images = 0;
	for (uint64_t s = 0; s < c->nsamples; s++) {
		const struct catalog_image *im = &c->images[s];
		x->clen[s] = im->width ? xf_blob_bytes(&x->p, im->width, im->height)
				       : c->samples[s].length;
		images += im->width != 0;
		x->ctotal += x->clen[s];
		x->cmax = MAX(x->cmax, x->clen[s]);
	}
	x->decoded = true;
	char a[32], b[32];
	snprintf(x->why, sizeof(x->why), "decoded images (transform.cache = decoded%s): %llu "
		 "images, %s decoded vs %s as files (%.1fx), planned like file bytes; later "
		 "epochs only crop, resize, flip and normalise",
		 x->p.cache_size ? ", shorter side cache_size" : "", (unsigned long long)images,
		 fmt_size(a, sizeof(a), x->ctotal), fmt_size(b, sizeof(b), c->total_bytes),
		 (double)x->ctotal / (double)MAX(c->total_bytes, 1ull));
}

int xfs_create(struct engine *e, const struct xfs_events *ev, char *err, size_t errlen)
{
	struct xf_params p;
	char why[400];
	if (config_transform(e->cfg, &p, why, sizeof(why)) != 0) {
		snprintf(err, errlen, "%s", why);
		return SEER_ECONFIG;
	}
	if (p.decode != XF_DECODE_IMAGE)
		return 0;
	struct xfs *x = xcalloc(1, sizeof(*x));
	x->ev = *ev;
	x->e = e;
	x->p = p;
	x->sb = xf_sample_bytes(&p);
	xf_sample_shape(&p, x->dims, &x->dtype);
	x->layout = p.output == XF_OUT_UINT8_HWC ? SEER_LY_NHWC : SEER_LY_NCHW;
	x->type = e->cat->ntypes;
	x->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pthread_mutex_init(&x->mu, NULL);
	pthread_cond_init(&x->cv, NULL);
	pthread_cond_init(&x->done_cv, NULL);
	e->xf = x;
	if (x->efd < 0) {
		snprintf(err, errlen, "cannot create the transform stage's eventfd: %s",
			 strerror(errno));
		return -errno;
	}
	plan_cache(x, e);
	/* automatic: every CPU; engine_repin then lets as many run as the
	 * daemon's threads have CPUs (the cores the trainers do not use) */
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned n = p.threads ? p.threads : (unsigned)MAX(1L, MIN(ncpu, 1024L));
	return pool_start(x, n, err, errlen);
}

void xfs_stop(struct engine *e)
{
	if (e->xf)
		pool_stop(e->xf);
}

void xfs_destroy(struct engine *e)
{
	struct xfs *x = e->xf;
	if (!x)
		return;
	pool_stop(x);
	for (struct xjob *j = (struct xjob *)x->done.head; j;) {
		struct xjob *next = j->next;
		free(j);
		j = next;
	}
	for (struct xjob *j = x->free; j;) {
		struct xjob *next = j->next;
		free(j);
		j = next;
	}
	if (x->efd >= 0)
		close(x->efd);
	pthread_mutex_destroy(&x->mu);
	pthread_cond_destroy(&x->cv);
	pthread_cond_destroy(&x->done_cv);
	pqueue_free(&x->queue);
	free(x->threads);
	free(x->clen);
	free(x->ep);
	free(x);
	e->xf = NULL;
}

int xfs_event_fd(const struct engine *e)
{
	return e->xf ? e->xf->efd : -1;
}

unsigned xfs_threads(const struct engine *e, pthread_t *out)
{
	const struct xfs *x = e->xf;
	if (!x)
		return 0;
	if (out)
		memcpy(out, x->threads, x->nthreads * sizeof(pthread_t));
	return x->nthreads;
}

void xfs_placed(struct engine *e, unsigned pus)
{
	struct xfs *x = e->xf;
	if (!x || x->p.threads)
		return; /* transform.threads set: that many, wherever they are placed */
	pthread_mutex_lock(&x->mu);
	x->active = MAX(1u, pus ? MIN(pus, x->nthreads) : x->nthreads);
	pthread_cond_broadcast(&x->cv);
	pthread_mutex_unlock(&x->mu);
}

/* ---- sizes ------------------------------------------------------------------------- */

bool xfs_blob(const struct engine *e, uint32_t s)
{
	return e->xf && e->xf->decoded && e->cat->images[s].width != 0;
}

uint64_t xfs_src_len(const struct engine *e, uint32_t s)
{
	return xfs_blob(e, s) ? e->xf->clen[s] : e->cat->samples[s].length;
}

const uint64_t *xfs_plan_lengths(const struct engine *e)
{
	return e->xf && e->xf->decoded ? e->xf->clen : NULL;
}

uint64_t xfs_cached_total(const struct engine *e)
{
	return e->xf ? e->xf->ctotal : e->cat->total_bytes;
}

uint64_t xfs_cached_max(const struct engine *e)
{
	return e->xf ? e->xf->cmax : e->cat->max_len;
}

uint64_t xfs_tensor_bytes(const struct engine *e, uint32_t n)
{
	return e->xf ? ALIGN_UP((uint64_t)n * e->xf->sb, 64ull) + 64 : 0;
}

uint32_t xfs_ntypes(const struct engine *e)
{
	return e->xf ? 1 : 0;
}

void xfs_type(const struct engine *e, struct seer_wire_type *t)
{
	const struct xfs *x = e->xf;
	*t = (struct seer_wire_type){ .dtype = (uint32_t)x->dtype, .ndim = 3 };
	memcpy(t->dims, x->dims, sizeof(x->dims));
}

/* ---- batches ----------------------------------------------------------------------- */

uint64_t xfs_slot_begin(struct engine *e, struct seer_wire_slot *ws, uint32_t n, uint64_t off)
{
	const struct xfs *x = e->xf;
	uint64_t base = ALIGN_UP(off, 64ull);
	ws->flags |= SEER_SLOT_TENSOR;
	ws->tensor = (struct seer_wire_tensor){
		.offset = base, .sample_bytes = x->sb, .dims = { n, x->dims[0], x->dims[1], x->dims[2] },
		.dtype = (uint32_t)x->dtype, .ndim = 4, .layout = x->layout, .type = x->type,
	};
	return base;
}

void xfs_describe(const struct engine *e, const struct seer_wire_slot *ws,
		  struct seer_wire_sample *d, uint32_t i)
{
	d->offset = ws->tensor.offset + (uint64_t)i * e->xf->sb;
	d->length = e->xf->sb;
	d->type = e->xf->type;
}

static struct xjob *job_new(struct xfs *x)
{
	struct xjob *j = x->free;
	if (j)
		x->free = j->next;
	else
		j = xmalloc(sizeof(*j));
	memset(j, 0, offsetof(struct xjob, err));
	j->err[0] = '\0';
	return j;
}

/* The slot of t's batch g, still being prepared in this session; or NULL. */
static struct tslot *live_slot(struct trainer *t, uint32_t gen, uint64_t g)
{
	if (t->gen != gen || !t->attached || !t->slots)
		return NULL;
	struct tslot *sl = &t->slots[g & (t->nslots - 1)];
	return sl->st == SL_PREP && sl->g == g ? sl : NULL;
}

/* Sample i of t's batch g is sample s, whose bytes are at [off, off + len):
 * its tensor next, on a transform thread. */
static void submit(struct engine *e, struct trainer *t, uint64_t g, uint32_t i, uint32_t s,
		   uint64_t off, uint64_t len)
{
	struct xfs *x = e->xf;
	struct xjob *j = job_new(x);
	j->kind = XJ_SAMPLE;
	j->rank = t->rank;
	j->gen = t->gen;
	j->g = g;
	j->i = i;
	j->sample = s;
	uint64_t step;
	jobrec_pos(e, g, &j->epoch, &step); /* the batch's epoch (an elastic one too) */
	j->src_off = off;
	j->src_len = len;
	j->dst_off = trainer_wslot(t, (uint32_t)(g & (t->nslots - 1)))->tensor.offset +
		     (uint64_t)i * x->sb;
	j->pq.key = (1ull << 40) + g * 1024; /* the batch that needs it, as reads are keyed */
	t->inflight++; /* it writes into t's staging: a reset waits for it */
	x->inflight++;
	pool_submit(x, j);
}

void xfs_ram_ready(struct engine *e, struct trainer *t, struct tslot *sl, uint32_t i, uint32_t key,
		   uint32_t s)
{
	sl->pending++;
	submit(e, t, sl->g, i, s, arena_key_off(e, key), xfs_src_len(e, s));
}

void xfs_after_read(struct engine *e, const struct etask *tk, const struct waiter *w)
{
	struct trainer *t = &e->tr[w->a];
	if (!live_slot(t, w->b, w->c))
		return; /* the batch is gone (reset, detach): nothing to make */
	submit(e, t, w->c, w->i, tk->sample, tk->dst_off, tk->len);
}

/* ---- a sample that is not an image --------------------------------------------------- */

/* The message for sample s's failure, naming its file. */
static void sample_error(const struct engine *e, uint32_t s, const char *why, char *out, size_t len)
{
	const struct catalog *c = e->cat;
	char full[2 * 4096], show[CAT_PATH_SHOW];
	snprintf(full, sizeof(full), "%s/%s", c->root, catalog_path(c, c->samples[s].file));
	snprintf(out, len, "sample %u (%s): %s", s, catalog_path_abbrev(show, sizeof(show), full),
		 why[0] ? why : "transform failed");
}

/* on_corrupt = skip: sample i of j's batch becomes the next valid sample,
 * read from its cache tier or into fresh staging. False when there is
 * none, or no staging for it now (the batch then fails). */
static bool substitute(struct engine *e, const struct xjob *j, struct trainer *t)
{
	uint32_t s = j->sample, x = s;
	uint64_t n = e->cat->nsamples;
	for (uint64_t k = 1; k < n && x == s; k++) {
		uint32_t c = (uint32_t)((s + k) % n);
		if (!e->pl.bad[c])
			x = c;
	}
	if (x == s)
		return false;
	struct route_view v = place_view(e);
	uint32_t key;
	enum route_src r = route_sample(&v, t->rank, x, &key);
	struct etask *tk = NULL;
	if (r == ROUTE_RAM && e->cstate[key] == CS_READY) {
		submit(e, t, j->g, j->i, x, arena_key_off(e, key), xfs_src_len(e, x));
	} else if (r == ROUTE_RAM) {
		tk = ram_load(e, key, x, j->g, false);
	} else {
		uint64_t off, len = e->cat->samples[x].length;
		if (stg_alloc(&t->stg, ALIGN_UP(len, (uint64_t)PLAN_RAM_ALIGN), &off) != 0)
			return false;
		tk = task_new(e);
		tk->sample = x;
		tk->dst_off = off;
		tk->len = len;
		tk->stage_rank = (int32_t)t->rank;
		t->inflight++;
		task_submit(e, tk, j->g);
	}
	if (tk)
		task_wait(tk, t->rank, t->gen, j->g, j->i);
	struct seer_wire_sample *d =
		(struct seer_wire_sample *)(trainer_wslot(t, (uint32_t)(j->g & (t->nslots - 1))) + 1);
	d[j->i].id = x;
	d[j->i].label = e->cat->samples[x].label;
	return true;
}

/* A sample's transform failed: the batch fails with the file named, or
 * (skip) the sample is replaced. */
static void job_failed(struct engine *e, struct xjob *j, struct xfs_epoch *ep)
{
	char msg[SEER_ERRMSG_MAX];
	sample_error(e, j->sample, j->err, msg, sizeof(msg));
	struct trainer *t = &e->tr[j->rank];
	struct waiter w = { .a = j->rank, .b = j->gen, .c = j->g, .i = j->i };
	bool input = j->status != -ENOMEM && j->status != -ECANCELED;
	if (input && e->skip_corrupt && live_slot(t, j->gen, j->g)) {
		if (!e->pl.bad[j->sample]) {
			e->pl.bad[j->sample] = 1;
			log_warn("%s: skipped (on_corrupt = skip)", msg);
		}
		if (substitute(e, j, t)) {
			ep->skipped++;
			e->xf->all.skipped++;
			stats_epoch(e, j->epoch)->skipped++; /* the batch's epoch */
			return;
		}
		str_copy(msg + strlen(msg), sizeof(msg) - strlen(msg),
			 " (skipped, but no valid sample or staging room for a substitute)");
	}
	if (input && !e->skip_corrupt)
		log_warn("%s", msg);
	ep->failed++;
	e->xf->all.failed++;
	e->xf->ev.sample_done(e, &w, input ? SEER_EDATASET : j->status, msg);
}

/* ---- completions --------------------------------------------------------------------- */

static struct xfs_epoch *xfs_epoch(struct xfs *x, uint64_t epoch)
{
	if (epoch >= x->nep) {
		uint64_t n = MAX(epoch + 1, x->nep * 2);
		x->ep = xrealloc(x->ep, n * sizeof(*x->ep));
		memset(x->ep + x->nep, 0, (n - x->nep) * sizeof(*x->ep));
		x->nep = n;
	}
	return &x->ep[epoch];
}

static void job_done(struct engine *e, struct xjob *j)
{
	struct xfs *x = e->xf;
	struct xfs_epoch *ep = xfs_epoch(x, j->epoch);
	if (j->status == 0) {
		bool blob = j->info.format == XF_FMT_BLOB;
		ep->samples++;
		ep->decoded += !blob;
		ep->from_blob += blob;
		ep->decode_ns += j->info.decode_ns;
		ep->resize_ns += j->info.resize_ns;
		x->all.samples++;
		x->all.decoded += !blob;
		x->all.from_blob += blob;
		x->all.decode_ns += j->info.decode_ns;
		x->all.resize_ns += j->info.resize_ns;
		struct waiter w = { .a = j->rank, .b = j->gen, .c = j->g, .i = j->i };
		x->ev.sample_done(e, &w, 0, "");
	} else if (live_slot(&e->tr[j->rank], j->gen, j->g)) {
		job_failed(e, j, ep);
	}
	/* it no longer writes into the trainer's staging */
	struct trainer *t = &e->tr[j->rank];
	x->inflight--;
	x->ev.unstaged(e, t); /* a reset waiting for it may go on */
}

void xfs_completions(struct engine *e)
{
	struct xfs *x = e->xf;
	if (!x)
		return;
	struct xjob *j = (struct xjob *)handoff_take(&x->done, &x->mu, x->efd);
	while (j) {
		struct xjob *next = j->next;
		job_done(e, j);
		j->next = x->free;
		x->free = j;
		j = next;
	}
	/* decoded-cache blobs made since the last look count in the job's epoch */
	uint64_t n = atomic_load_explicit(&x->blob_n, memory_order_relaxed);
	uint64_t ns = atomic_load_explicit(&x->blob_ns, memory_order_relaxed);
	if (n != x->blob_seen) {
		struct xfs_epoch *ep = xfs_epoch(x, e->st.epochs_done);
		ep->blobs += n - x->blob_seen;
		ep->blob_ns += ns - x->blob_ns_seen;
		x->all.blobs += n - x->blob_seen;
		x->all.blob_ns += ns - x->blob_ns_seen;
		x->blob_seen = n;
		x->blob_ns_seen = ns;
	}
}

/* ---- decoded-cache entries (I/O threads) ------------------------------------------------ */

int xfs_decode_blob(const struct engine *e, struct etask *tk, const void *enc, size_t len,
		    uint8_t *dst)
{
	struct xfs *x = e->xf;
	struct xjob j = { .kind = XJ_BLOB, .pq.key = tk->io.pq.key, .enc = enc, .enc_len = len,
			  .dst = dst, .cap = tk->len };
	pthread_mutex_lock(&x->mu);
	if (x->stop) {
		j.status = -ECANCELED;
	} else {
		pqueue_push(&x->queue, &j.pq);
		pthread_cond_signal(&x->cv);
		while (!j.done)
			pthread_cond_wait(&x->done_cv, &x->mu);
	}
	pthread_mutex_unlock(&x->mu);
	if (j.status == 0)
		return 0;
	if (j.status == -ECANCELED) {
		str_copy(tk->err, sizeof(tk->err), "the daemon is stopping");
		return -ECANCELED;
	}
	sample_error(e, tk->sample, j.err, tk->err, sizeof(tk->err));
	return j.status == -ENOMEM ? -ENOMEM : SEER_EDATASET;
}

/* ---- reporting ------------------------------------------------------------------------ */

void xfs_log(const struct engine *e)
{
	const struct xfs *x = e->xf;
	if (!x)
		return;
	char spec[512];
	xf_params_format(&x->p, spec, sizeof(spec));
	log_info("transform: %u threads, %s; cache: %s", x->nthreads, spec, x->why);
}

static json_t *epoch_json(uint64_t i, const struct xfs_epoch *s)
{
	return json_pack("{sI sI sI sI sf sf sI sf sI sI}", "epoch", (json_int_t)i,
			 "samples", (json_int_t)s->samples, "decoded", (json_int_t)s->decoded,
			 "from_decoded_cache", (json_int_t)s->from_blob,
			 "decode_s", (double)s->decode_ns / 1e9, "resize_s", (double)s->resize_ns / 1e9,
			 "cache_decodes", (json_int_t)s->blobs, "cache_decode_s",
			 (double)s->blob_ns / 1e9, "failed", (json_int_t)s->failed,
			 "skipped", (json_int_t)s->skipped);
}

json_t *xfs_status_json(const struct engine *e)
{
	const struct xfs *x = e->xf;
	if (!x)
		return json_pack("{ss}", "decode", "none");
	char spec[512];
	xf_params_format(&x->p, spec, sizeof(spec));
	json_t *eps = json_array();
	uint64_t last = MIN(x->nep, e->cfg->job.epochs);
	for (uint64_t i = 0; eps && i < last; i++)
		json_array_append_new(eps, epoch_json(i, &x->ep[i]));
	json_t *all = epoch_json(0, &x->all);
	if (all)
		json_object_del(all, "epoch");
	/* the daemon's peak resident memory (arena pages it touched included),
	 * to hold against its budgets */
	struct rusage ru;
	json_int_t rss = getrusage(RUSAGE_SELF, &ru) == 0 ? (json_int_t)ru.ru_maxrss * 1024 : -1;
	return json_pack("{ss ss s[III] sI sI sI ss ss sI sI so so}", "decode", "image", "spec", spec,
			 "shape", (json_int_t)x->dims[0], (json_int_t)x->dims[1],
			 (json_int_t)x->dims[2], "sample_bytes", (json_int_t)x->sb,
			 "threads", (json_int_t)x->nthreads, "active_threads", (json_int_t)x->active,
			 "cache", x->decoded ? "decoded" : "encoded", "cache_why", x->why,
			 "pending", (json_int_t)x->inflight, "max_rss_bytes", rss, "total", all,
			 "epochs", eps);
}
