/* Tasks: the engine's unit of I/O, one read (or NVMe write) of one sample,
 * or a coalesced read of several (an extent, extent.c), from creation to
 * its completion.
 *
 * Owns the task pool (chunks of TASK_CHUNK, ids stable for the cache
 * states that name loading tasks), submission to the I/O pool with its
 * priority (the batch that needs the read, adjusted by each source's
 * measured service time) and the hand-over of a finished task to the
 * engine's completion handler (task_finish -> complete.c), which updates
 * the caches it loads and wakes its waiters. Dispatcher thread only;
 * between submission and completion a task belongs to the I/O thread
 * running it (worker.c) or the network thread (TK_PEER). Failure: what a
 * failed read does (tried elsewhere, or its error to every waiter) is
 * complete.c's; out of memory aborts. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../src/util/util.h"
#include "engine_int.h"
#include "seer.h"

struct etask *task_get(struct engine *e, uint32_t id)
{
	return &e->tasks.chunks[id / TASK_CHUNK][id % TASK_CHUNK];
}

/* Another TASK_CHUNK tasks on the free list (every page written here). */
static void task_grow(struct engine *e)
{
	e->tasks.chunks = xrealloc(e->tasks.chunks, (e->tasks.nchunks + 1) * sizeof(*e->tasks.chunks));
	struct etask *c = xcalloc(TASK_CHUNK, sizeof(*c));
	e->tasks.chunks[e->tasks.nchunks] = c;
	for (uint32_t i = TASK_CHUNK; i-- > 0;) {
		c[i].id = e->tasks.nchunks * TASK_CHUNK + i;
		c[i].free_next = e->tasks.free;
		e->tasks.free = &c[i];
	}
	e->tasks.nchunks++;
}

/* A first epoch makes a task for every sample this node caches at once
 * (the plan's RAM loads), so growing the pool then put ~600 B per task of
 * page faults into the cold epoch: 10-14 ms of the dispatcher's CPU
 * between the rank map and the first extent (2 x 3,840 tasks, issue 13). */
void task_reserve(struct engine *e, uint64_t n)
{
	while ((uint64_t)e->tasks.nchunks * TASK_CHUNK < n)
		task_grow(e);
}

struct etask *task_new(struct engine *e)
{
	if (!e->tasks.free)
		task_grow(e);
	struct etask *t = e->tasks.free;
	e->tasks.free = t->free_next;
	uint32_t id = t->id;
	memset(t, 0, sizeof(*t));
	t->id = id;
	t->w = t->w_inline;
	t->capw = ARRAY_SIZE(t->w_inline);
	t->stage_rank = -1;
	t->bounce = -1;
	return t;
}

void task_free(struct engine *e, struct etask *t)
{
	if (t->w != t->w_inline)
		free(t->w);
	t->w = NULL;
	free(t->mem);
	t->mem = NULL;
	t->free_next = e->tasks.free;
	e->tasks.free = t;
}

void task_wait_w(struct etask *t, struct waiter w)
{
	if (t->nw == t->capw) {
		uint32_t cap = t->capw * 2;
		struct waiter *nw = xmalloc(cap * sizeof(*nw));
		memcpy(nw, t->w, t->nw * sizeof(*nw));
		if (t->w != t->w_inline)
			free(t->w);
		t->w = nw;
		t->capw = cap;
	}
	t->w[t->nw++] = w;
}

void task_wait(struct etask *t, uint32_t rank, uint32_t gen, uint64_t g, uint32_t i)
{
	task_wait_w(t, (struct waiter){ .peer = false, .a = rank, .b = gen, .c = g, .i = i });
}

/* Priority of a read needed by global batch g from `src`, in 1/1024ths of a
 * batch: the batch itself for the PFS, the slowest source; a faster source
 * (NVMe) waits the difference of the measured service times, in batches of
 * the trainers' pace (at most 2), so the PFS read of a later batch is not
 * queued behind it. Within a source, reads are served strictly in batch
 * order whatever the pace did between two submissions. */
static uint64_t read_key(const struct engine *e, uint64_t g, int src)
{
	uint64_t key = (1ull << 40) + g * 1024;
	if (src == SRC_PFS || !e->st.src[src].n || !e->st.src[SRC_PFS].n || e->st.step_s <= 0)
		return key;
	double d = (e->st.src[SRC_PFS].lat_s - e->st.src[src].lat_s) / e->st.step_s;
	return key + (uint64_t)(MAX(0.0, MIN(d, 2.0)) * 1024);
}

static int task_src(const struct etask *t)
{
	return t->kind == TK_NVME_READ || t->kind == TK_NVME_WRITE ? SRC_NVME : SRC_PFS;
}

/* Queue a read needed by global batch g (0: as soon as possible;
 * NEED_NONE: no batch yet, at t->bg_key behind every batch's reads). */
void task_submit(struct engine *e, struct etask *t, uint64_t g)
{
	uint64_t key = g == 0 ? 0 : g == NEED_NONE ? t->bg_key : read_key(e, g, task_src(t));
	t->need_g = g;
	t->io.pq.key = key;
	t->in_sub = true;
	t->cut = false;
	if (t->kind == TK_PFS && e->ext.pfs_q)
		e->ext.pfs_q[t->sample] = t->id + 1; /* an extent may take it over (extent.c) */
	if (e->tasks.nsub == e->tasks.capsub) {
		e->tasks.capsub = MAX(e->tasks.capsub * 2, 256);
		e->tasks.sub = xrealloc(e->tasks.sub, e->tasks.capsub * sizeof(*e->tasks.sub));
	}
	e->tasks.sub[e->tasks.nsub++] = &t->io;
}

/* A need at global batch g (0: now) joined task tk, which may be queued
 * behind less urgent reads: make it at least that urgent (priority
 * inversion otherwise: a trainer attaching late waits behind the others'
 * next epoch). */
void task_need(struct engine *e, struct etask *tk, uint64_t g)
{
	if (g >= tk->need_g)
		return;
	tk->need_g = g;
	if (tk->kind == TK_PEER)
		return; /* the network thread's: no queue to move up in (a fallback
			   to the PFS is queued at need_g) */
	uint64_t key = g == 0 ? 0 : read_key(e, g, task_src(tk));
	struct etask *x = tk->ext; /* a member: its extent reads it */
	if (x && g < x->need_g)
		x->need_g = g;
	iopool_boost(&e->tasks.pool, x ? &x->io : &tk->io, key);
}

/* A read of the dataset: counted in pfs_queued while the pool has it. */
static bool task_is_pfs(const struct etask *t)
{
	return t->kind == TK_PFS || t->kind == TK_EXTENT;
}

/* The round's submissions to the I/O pool (after extent.c coalesced them:
 * the engine calls ext_flush first). */
void task_flush(struct engine *e)
{
	uint32_t pfs = 0;
	for (uint32_t i = 0; i < e->tasks.nsub; i++) {
		struct etask *t = (struct etask *)e->tasks.sub[i];
		t->in_sub = false;
		pfs += task_is_pfs(t);
	}
	/* counted before the pool has them: the drain never misses a queued read */
	atomic_fetch_add_explicit(&e->tasks.pfs_queued, pfs, memory_order_relaxed);
	iopool_submit(&e->tasks.pool, e->tasks.sub, e->tasks.nsub);
	e->tasks.nsub = 0;
}

bool task_cancel(struct engine *e, struct etask *tk)
{
	if (!iopool_cancel(&e->tasks.pool, &tk->io))
		return false;
	if (task_is_pfs(tk))
		atomic_fetch_sub_explicit(&e->tasks.pfs_queued, 1, memory_order_relaxed);
	return true;
}

/* The pool (or the network thread) is done with tk: status 0 or why not.
 * What it did goes to the stages that own it -- caches, waiters, retries --
 * through the handler the engine installed (complete_task, complete.c):
 * task.c hands completions over and calls no stage above it. */
void task_finish(struct engine *e, struct etask *tk, int status)
{
	e->tasks.done(e, tk, status);
}

/* Free every task (engine_destroy, after the pool stopped). */
void task_free_all(struct engine *e)
{
	for (uint32_t i = 0; i < e->tasks.nchunks; i++) {
		for (uint32_t k = 0; k < TASK_CHUNK; k++) {
			if (e->tasks.chunks[i][k].w && e->tasks.chunks[i][k].w != e->tasks.chunks[i][k].w_inline)
				free(e->tasks.chunks[i][k].w);
			free(e->tasks.chunks[i][k].mem);
		}
		free(e->tasks.chunks[i]);
	}
	free(e->tasks.chunks);
	free(e->tasks.sub);
	e->tasks.chunks = NULL;
	e->tasks.sub = NULL;
	e->tasks.nchunks = 0;
}

void task_completions(struct engine *e)
{
	struct io_task *io = iopool_take_done(&e->tasks.pool);
	while (io) {
		struct io_task *next = io->next;
		if (task_is_pfs((struct etask *)io))
			atomic_fetch_sub_explicit(&e->tasks.pfs_queued, 1, memory_order_relaxed);
		task_finish(e, (struct etask *)io, io->status);
		io = next;
	}
}
