/* Coalesced reads: one read of a byte range of a file (an extent) serving
 * several samples (docs/design.md, "Coalesced reads").
 *
 * Owns the extent tasks (TK_EXTENT) from planning to completion. Before the
 * round's reads go to the I/O pool (task_flush), every PFS read of a sample
 * whose format reads it by a byte range is a trigger: the samples of its
 * file around it that this node wants -- a read of them already queued (a
 * trainer's batch needs them within the prefetch horizon, a peer asked) or
 * a RAM slot of this node's cache they are planned for and not yet loaded
 * -- are offered to the extent planner (src/plan/extent_plan.c: extent_max, the
 * amplification bound, extent_gap); those it picks become the extent's
 * members: queued reads are taken back from the pool, planned ones get a
 * RAM-load task of their own. The extent waits until the extent memory
 * (prefetch.extent_memory) has room, then runs on an I/O thread
 * (worker.c: one counted read into a buffer of the extent region, made at
 * start, each member's sample cut into its destination: a staging span, a
 * RAM slot, a bounce slot). When it ends,
 * each member ends as a read of its own would (task_finish): caches,
 * waiters, corrupt samples; its bytes are the extent's, counted once.
 * Samples neither wanted nor planned here that lie inside are read and
 * dropped (the amplification). An extent that fails reads its members one
 * by one, as before coalescing.
 *
 * Dispatcher thread only; members belong to the extent, and the extent to
 * its I/O thread, between submission and completion. Failure: out of memory
 * aborts (the daemon's rule); a failed extent falls back as said. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../src/util/util.h"
#include "engine_int.h"
#include "seer.h"

/* The extent region: prefetch.extent_memory (at most XREGION_MAX) mapped,
 * populated and written once at start, from which the extents' buffers are
 * cut (first fit, spans.h) while they fit; an extent that does not (a
 * fragmented region, or one larger than it) maps a buffer of its own, as
 * all did before. Why: a fresh 2 MiB buffer per extent cost its page
 * allocation in the read, and, on the development VM (shadow paging), a
 * trap on the first user-mode read of each of its 512 pages -- taken by the
 * zip CRC pass, which became the cold npz epoch's largest CPU cost (19% of
 * the samples while the extents were read, against 3% for the transpose) --
 * and another on the kernel's first write of each (the read itself): the
 * region is primed for both at start (mem_prime_pages).
 * Resident from start to end: at most XREGION_MAX, 8 MiB (four 2 MiB
 * extents of DLIO's npz files; with the default 16 MiB of extent memory a
 * second 8 MiB in flight maps its own), so that seerd stays within cache +
 * staging + 64 MiB beside a full format cache (test_formats_e2e). Failure:
 * no region (logged); every extent maps its own buffer. */
#define XREGION_MAX (8ull << 20)
static void xregion_init(struct engine *e)
{
	uint64_t cap = ALIGN_UP(MIN(e->cfg->prefetch.extent_memory, XREGION_MAX), 4096ull);
	void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		log_warn("no memory for the %llu-byte extent region (%s): each coalesced read "
			 "maps its own buffer", (unsigned long long)cap, strerror(errno));
		return;
	}
	(void)madvise(p, cap, MADV_POPULATE_WRITE); /* a hint; older kernels fault instead */
	mem_prime_pages(p, cap);
	e->ext.base = p;
	e->ext.cap = cap;
	spans_init(&e->ext.spans, cap);
}

void ext_init(struct engine *e)
{
	const struct fmt_ops *f = e->cat->fmt;
	enum config_coalesce m = config_coalesce(e->cfg);
	bool on = m == CFG_COALESCE_ON ||
		  (m == CFG_COALESCE_AUTO && (!e->ext.probe.measured || e->ext.probe.coalesce));
	e->ext.coalesce = on && f->span && (f->cut || f->cut_many);
	if (e->ext.coalesce) {
		e->ext.pfs_q = xcalloc(MAX(e->cat->nsamples, 1ull), sizeof(uint32_t));
		xregion_init(e);
	}
}

/* The planner's memory (task_free_all frees the waiting extents' members)
 * and the extent region (no extent runs any more). */
void ext_free(struct engine *e)
{
	if (e->ext.base) {
		munmap(e->ext.base, e->ext.cap);
		spans_fini(&e->ext.spans);
		e->ext.base = NULL;
	}
	free(e->ext.pfs_q);
	free(e->ext.wait);
	free(e->ext.cand);
	free(e->ext.take);
	free(e->ext.tk);
	free(e->ext.todo);
	e->ext.pfs_q = NULL;
	e->ext.wait = e->ext.tk = e->ext.todo = NULL;
	e->ext.cand = NULL;
	e->ext.take = NULL;
}

static void scratch(struct engine *e, uint32_t n)
{
	if (n <= e->ext.cand_cap)
		return;
	e->ext.cand_cap = MAX(n, e->ext.cand_cap * 2);
	e->ext.cand = xrealloc(e->ext.cand, e->ext.cand_cap * sizeof(*e->ext.cand));
	e->ext.take = xrealloc(e->ext.take, e->ext.cand_cap * sizeof(*e->ext.take));
	e->ext.tk = xrealloc(e->ext.tk, e->ext.cand_cap * sizeof(*e->ext.tk));
}

/* A queued single PFS read that an extent may take over: not running, not
 * an extent's already, not one that must read alone, not one a transform
 * thread decodes into a decoded-image cache entry (a blob: a cut delivers
 * file bytes). */
static bool takeable(const struct etask *tk, uint32_t s)
{
	return tk->kind == TK_PFS && tk->sample == s && !tk->ext && !tk->single && !tk->cut &&
	       !tk->blob;
}

/* Does this node want sample x read now? Its queued read (*tk set), or its
 * planned, absent RAM slot (*tk NULL). (route.h's rule for a local RAM
 * slot, inline: this runs for every candidate.) */
static bool wanted(struct engine *e, uint32_t x, struct etask **tk)
{
	*tk = NULL;
	if (e->pl.bad[x])
		return false;
	if (!e->nopfs && e->plan.tier[x] == PLAN_RAM && e->plan.owner[x] == e->node) {
		uint32_t st = e->cstate[x];
		if (st == CS_ABSENT)
			return !xfs_blob(e, x);
		if (st < CS_TASK0)
			return false;
		struct etask *t = task_get(e, st - CS_TASK0);
		if (!takeable(t, x))
			return false;
		*tk = t;
		return true;
	}
	if (e->ext.pfs_q[x]) {
		struct etask *t = task_get(e, e->ext.pfs_q[x] - 1);
		if (takeable(t, x)) {
			*tk = t;
			return true;
		}
	}
	return false;
}

/* Sample x's byte range (the format's span; the format was checked to
 * have one at ext_init, the file's bounds are checked here). */
static bool span(const struct engine *e, uint64_t x, uint64_t *lo, uint64_t *hi)
{
	const struct catalog *c = e->cat;
	const struct catalog_sample *cs = &c->samples[x];
	return c->fmt->span(c, x, cs, lo, hi) && *lo < *hi && *hi <= c->files[cs->file].size;
}

/* Candidate x into the scratch at i; false when x has no byte range. */
static bool candidate(struct engine *e, uint64_t x, uint32_t i, bool trigger)
{
	scratch(e, i + 1);
	struct extent_cand *c = &e->ext.cand[i];
	if (!span(e, x, &c->lo, &c->hi))
		return false;
	c->useful = e->cat->samples[x].length;
	c->want = wanted(e, (uint32_t)x, &e->ext.tk[i]) || trigger;
	if (trigger)
		e->ext.tk[i] = NULL;
	return true;
}

/* The candidates around trigger s into the scratch, in file order: sample
 * ids [*a, *b), the trigger at s - *a. Each side is scanned while the bytes
 * stay within extent_max of the trigger and the gap since the last wanted
 * sample within extent_gap (nothing beyond could join). */
static void gather(struct engine *e, uint32_t s, uint64_t *a, uint64_t *b)
{
	const struct catalog_file *f = &e->cat->files[e->cat->samples[s].file];
	const uint64_t max = e->cfg->prefetch.extent_max, gap = e->cfg->prefetch.extent_gap;
	/* right side first, from index 1; the left side is then put before it */
	uint32_t n = 0;
	candidate(e, s, n++, true);
	const uint64_t lo_s = e->ext.cand[0].lo, hi_s = e->ext.cand[0].hi;
	uint64_t edge = hi_s; /* highest end of a wanted one so far */
	for (uint64_t x = s + 1; x < f->first + f->nsamples; x++) {
		if (!candidate(e, x, n, false))
			break;
		const struct extent_cand *c = &e->ext.cand[n];
		if (MAX(c->hi, lo_s) - lo_s > max || (c->lo > edge && c->lo - edge > gap))
			break;
		if (c->want)
			edge = MAX(edge, c->hi);
		n++;
	}
	uint32_t right = n;
	edge = lo_s; /* lowest start of a wanted one so far */
	for (uint64_t x = s; x-- > f->first;) {
		if (!candidate(e, x, n, false))
			break;
		const struct extent_cand *c = &e->ext.cand[n];
		if (hi_s - MIN(c->lo, hi_s) > max || (c->hi < edge && edge - c->hi > gap))
			break;
		if (c->want)
			edge = MIN(edge, c->lo);
		n++;
	}
	/* into file order: the left ones (collected backwards) first */
	uint32_t left = n - right;
	scratch(e, n + left);
	for (uint32_t i = 0; i < left; i++) {
		e->ext.cand[n + i] = e->ext.cand[n - 1 - i];
		e->ext.tk[n + i] = e->ext.tk[n - 1 - i];
	}
	memmove(e->ext.cand + left, e->ext.cand, right * sizeof(*e->ext.cand));
	memmove(e->ext.tk + left, e->ext.tk, right * sizeof(*e->ext.tk));
	memcpy(e->ext.cand, e->ext.cand + n, left * sizeof(*e->ext.cand));
	memcpy(e->ext.tk, e->ext.tk + n, left * sizeof(*e->ext.tk));
	*a = s - left;
	*b = s + right;
}

/* Queued reads of candidates taken back from the pool (still in e->tasks.sub:
 * they are simply dropped from it at the end of ext_flush); a read a
 * worker already took is no candidate. */
static void take_back(struct engine *e, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		struct etask *tk = e->ext.tk[i];
		if (!tk || !e->ext.take[i] || tk->in_sub)
			continue;
		if (!task_cancel(e, tk)) {
			e->ext.take[i] = false; /* running: its own read serves it */
			e->ext.tk[i] = NULL;
		}
	}
}

/* The extent for trigger t, if one meets the bounds: its members taken or
 * made, queued for extent memory. */
static bool ext_try(struct engine *e, struct etask *t)
{
	uint64_t lo_s, hi_s, a, b;
	if (t->blob || !span(e, t->sample, &lo_s, &hi_s))
		return false;
	gather(e, t->sample, &a, &b);
	const struct extent_opts o = { .max_bytes = e->cfg->prefetch.extent_max,
				    .max_amp = e->cfg->prefetch.max_amplification,
				    .gap_max = e->cfg->prefetch.extent_gap };
	struct extent_plan p = extent_plan(e->ext.cand, (uint32_t)(b - a), (uint32_t)(t->sample - a), &o,
				     e->ext.take);
	if (p.taken < 2)
		return false;
	take_back(e, b - a);
	struct etask *x = task_new(e);
	x->kind = TK_EXTENT;
	x->file = e->cat->samples[t->sample].file;
	x->need_g = t->need_g;
	x->io.pq.key = t->io.pq.key;
	x->mem = xmalloc(p.taken * sizeof(*x->mem));
	uint64_t lo = UINT64_MAX, hi = 0;
	for (uint64_t i = p.first; i <= p.last; i++) {
		if (!e->ext.take[i])
			continue;
		uint32_t s = (uint32_t)(a + i);
		struct etask *m = s == t->sample ? t : e->ext.tk[i];
		if (!m) {
			/* planned here, absent: its slot's load rides along */
			m = ram_load_new(e, s, s, false);
			m->need_g = t->need_g;
			m->bg_key = t->bg_key; /* a background trigger's members stay background */
			m->io.pq.key = t->io.pq.key;
		}
		if (e->ext.pfs_q[s] == m->id + 1)
			e->ext.pfs_q[s] = 0;
		m->ext = x;
		x->mem[x->nmem++] = m;
		lo = MIN(lo, e->ext.cand[i].lo);
		hi = MAX(hi, e->ext.cand[i].hi);
		if (m->io.pq.key < x->io.pq.key) {
			x->io.pq.key = m->io.pq.key;
			x->need_g = m->need_g;
		}
	}
	x->foff = lo;
	x->len = hi - lo;
	if (e->ext.next_wait == e->ext.cap_wait) {
		e->ext.cap_wait = MAX(e->ext.cap_wait * 2, 16);
		e->ext.wait = xrealloc(e->ext.wait, e->ext.cap_wait * sizeof(*e->ext.wait));
	}
	e->ext.wait[e->ext.next_wait++] = x;
	return true;
}

/* Extents waiting for memory go out, most urgent first, while it has room
 * (one always may when none runs). */
static void ext_pump(struct engine *e)
{
	while (e->ext.next_wait > 0) {
		uint32_t best = 0;
		for (uint32_t i = 1; i < e->ext.next_wait; i++)
			if (e->ext.wait[i]->io.pq.key < e->ext.wait[best]->io.pq.key)
				best = i;
		struct etask *x = e->ext.wait[best];
		if (e->ext.mem > 0 && e->ext.mem + x->len > e->cfg->prefetch.extent_memory)
			return;
		e->ext.wait[best] = e->ext.wait[--e->ext.next_wait];
		x->xpool = e->ext.base && spans_alloc(&e->ext.spans, ALIGN_UP(x->len, 4096ull),
						   &x->xoff) == 0;
		e->ext.mem += x->len;
		e->ext.mem_peak = MAX(e->ext.mem_peak, e->ext.mem);
		if (e->tasks.nsub == e->tasks.capsub) {
			e->tasks.capsub = MAX(e->tasks.capsub * 2, 256);
			e->tasks.sub = xrealloc(e->tasks.sub, e->tasks.capsub * sizeof(*e->tasks.sub));
		}
		e->tasks.sub[e->tasks.nsub++] = &x->io;
	}
}

static int by_key(const void *pa, const void *pb)
{
	const struct etask *a = *(struct etask *const *)pa, *b = *(struct etask *const *)pb;
	return a->io.pq.key < b->io.pq.key ? -1 : a->io.pq.key > b->io.pq.key ? 1
	       : a->id < b->id ? -1 : a->id > b->id;
}

void ext_flush(struct engine *e)
{
	if (!e->ext.coalesce || !e->plan_ready)
		return;
	uint32_t n = e->tasks.nsub;
	if (n > e->ext.todo_cap) {
		e->ext.todo_cap = MAX(n, e->ext.todo_cap * 2);
		e->ext.todo = xrealloc(e->ext.todo, e->ext.todo_cap * sizeof(*e->ext.todo));
	}
	for (uint32_t i = 0; i < n; i++)
		e->ext.todo[i] = (struct etask *)e->tasks.sub[i];
	/* the most urgent trigger first: it decides the extent its neighbours join */
	qsort(e->ext.todo, n, sizeof(*e->ext.todo), by_key);
	for (uint32_t i = 0; i < n; i++) {
		struct etask *t = e->ext.todo[i];
		if (t->kind == TK_PFS && !t->ext && !t->single)
			ext_try(e, t);
	}
	/* what joined an extent leaves the list; the extents that fit go out */
	uint32_t k = 0;
	for (uint32_t i = 0; i < e->tasks.nsub; i++) {
		struct etask *t = (struct etask *)e->tasks.sub[i];
		if (!t->ext)
			e->tasks.sub[k++] = e->tasks.sub[i];
		else
			t->in_sub = false;
	}
	e->tasks.nsub = k;
	ext_pump(e);
}

/* Counted once for the extent: its bytes, and the samples it delivered. */
static void ext_count(struct engine *e, const struct etask *x, uint64_t useful, uint64_t ok)
{
	struct epoch_stats *es = stats_epoch(e, e->st.epochs_done);
	es->pfs_reads++;
	es->pfs_bytes += x->pfs_read;
	es->extents++;
	es->extent_bytes += x->pfs_read;
	es->extent_samples += ok;
	es->extent_useful += useful;
}

/* A member's place in the order its extent ends them: by the batch that
 * needs it, then (peers' requests, need 0) in the order the requests came,
 * so the requester's earliest batch gets its samples first. */
static uint64_t first_request(const struct etask *m)
{
	uint64_t id = UINT64_MAX;
	for (uint32_t k = 0; k < m->nw; k++)
		if (m->w[k].peer)
			id = MIN(id, m->w[k].c);
	return id;
}

static int by_need(const void *pa, const void *pb)
{
	const struct etask *a = *(struct etask *const *)pa, *b = *(struct etask *const *)pb;
	if (a->need_g != b->need_g)
		return a->need_g < b->need_g ? -1 : 1;
	uint64_t ra = first_request(a), rb = first_request(b);
	return ra < rb ? -1 : ra > rb;
}

void ext_done(struct engine *e, struct etask *x, int status)
{
	if (e->ext.mem >= x->len)
		e->ext.mem -= x->len;
	if (x->xpool)
		spans_free(&e->ext.spans, x->xoff, ALIGN_UP(x->len, 4096ull));
	x->xpool = false;
	uint64_t useful = 0, ok = 0;
	for (uint32_t i = 0; status == 0 && i < x->nmem; i++)
		if (x->mem[i]->io.status == 0) {
			useful += x->mem[i]->len;
			ok++;
		}
	ext_count(e, x, useful, ok);
	log_debug("extent of %s: %u samples, %llu bytes at %llu, waited %.1f ms, read in %.1f ms",
		  catalog_path(e->cat, x->file), x->nmem, (unsigned long long)x->len,
		  (unsigned long long)x->foff,
		  x->io.t_start > x->io.t_submit ? (double)(x->io.t_start - x->io.t_submit) / 1e6 : 0.0,
		  x->io.t_end > x->io.t_start ? (double)(x->io.t_end - x->io.t_start) / 1e6 : 0.0);
	if (status != 0 && status != -ECANCELED)
		log_warn("%s: reading its %u samples one by one", x->err[0] ? x->err
			 : seer_strerror(status), x->nmem);
	else
		qsort(x->mem, x->nmem, sizeof(*x->mem), by_need);
	for (uint32_t i = 0; i < x->nmem; i++) {
		struct etask *m = x->mem[i];
		m->ext = NULL;
		m->pfs_read = 0;
		if (status != 0 && status != -ECANCELED) {
			/* read alone, with its own retries and errors */
			m->single = true;
			m->err[0] = '\0';
			task_submit(e, m, m->need_g);
			continue;
		}
		m->cut = status == 0;
		task_finish(e, m, status ? status : m->io.status);
	}
	free(x->mem);
	x->mem = NULL;
	x->nmem = 0;
	task_free(e, x);
	ext_pump(e);
}
