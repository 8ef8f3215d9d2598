/* The per-node LRU policy of the plan simulator (see plansim_int.h for the
 * file map, plansim.h for the model): two tiers per node, RAM holds the most
 * recently read samples, NVMe the next most recent. A miss enters RAM; RAM's
 * least recent moves down to NVMe; NVMe's least recent leaves; an NVMe hit
 * moves back to RAM. With equal sizes this is one LRU stack of RAM + NVMe
 * split at RAM's capacity. Node-local: no peer reads.
 *
 * Recency order is kept as a log per node and tier: every read appends
 * (sample, stamp) at the tail, the head is the least recent, and an entry is
 * live while st[k * n + s] still carries its stamp (later reads make older
 * entries stale; they are skipped at the head and squeezed out when the log
 * fills). Every step touches the log sequentially and st at one place, so
 * the random accesses can be prefetched: no pointer chasing.
 *
 * Threads: any; a run owns its state. Failure: -ENOMEM, or -EOVERFLOW when
 * a node reads 2^31 samples or more over the job (stamps are 31 bits). */
#include "plansim_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct lru_ent {
	uint32_t smp;
	uint32_t stamp;
	uint64_t len;    /* the sample's, kept here to spare a random read */
};

/* A ring of entries, oldest at head. */
struct lru_log {
	struct lru_ent *e;
	uint64_t size;       /* a power of two */
	uint64_t head, tail; /* free-running */
};

struct lru_node {
	struct lru_log log[2];
	uint64_t used[2], cap[2];
	uint32_t clock;
};

struct lru {
	uint64_t n;
	uint32_t *st;    /* nnodes * n: stamp << 1 | tier, 0 when not cached */
	struct lru_node *node;
};

static inline uint32_t lru_code(uint32_t stamp, uint32_t t) { return stamp << 1 | t; }

static inline bool lru_live(const struct lru *L, uint32_t k, const struct lru_ent *e, uint32_t t)
{
	return L->st[(uint64_t)k * L->n + e->smp] == lru_code(e->stamp, t);
}

/* Appends to a log. A full log first squeezes its stale entries out, and
 * doubles when that frees less than half of it: amortised O(1), and the log
 * stays within four times the live entries. 0 or -ENOMEM. */
static int lru_append(struct lru *L, uint32_t k, uint32_t t, uint32_t smp, uint32_t stamp,
		      uint64_t len)
{
	struct lru_log *g = &L->node[k].log[t];
	if (g->tail - g->head == g->size) {
		uint64_t w = g->head;
		for (uint64_t r = g->head; r != g->tail; r++) {
			struct lru_ent x = g->e[r & (g->size - 1)];
			if (lru_live(L, k, &x, t))
				g->e[w++ & (g->size - 1)] = x;
		}
		g->tail = w;
		if (g->tail - g->head > g->size / 2) {
			struct lru_ent *ne = malloc(2 * g->size * sizeof(*ne));
			if (!ne)
				return -ENOMEM;
			uint64_t m = 0;
			for (uint64_t r = g->head; r != g->tail; r++)
				ne[m++] = g->e[r & (g->size - 1)];
			free(g->e);
			g->e = ne;
			g->size *= 2;
			g->head = 0;
			g->tail = m;
		}
	}
	g->e[g->tail++ & (g->size - 1)] = (struct lru_ent){ smp, stamp, len };
	return 0;
}

/* The least recent live entry of a tier (its log is not empty of live ones
 * when used > 0); removes it from the log. */
static struct lru_ent lru_pop(struct lru *L, uint32_t k, uint32_t t)
{
	struct lru_log *g = &L->node[k].log[t];
	for (;;) {
		struct lru_ent x = g->e[g->head++ & (g->size - 1)];
		/* the log is read in order, st at random: fetch both ahead */
		__builtin_prefetch(&g->e[(g->head + 16) & (g->size - 1)]);
		if (g->head + 8 < g->tail)
			__builtin_prefetch(&L->st[(uint64_t)k * L->n +
						  g->e[(g->head + 8) & (g->size - 1)].smp]);
		if (lru_live(L, k, &x, t))
			return x;
	}
}

static void lru_fit_nvme(struct lru *L, uint32_t k)
{
	struct lru_node *nd = &L->node[k];
	while (nd->used[T_NVME] > nd->cap[T_NVME]) {
		struct lru_ent x = lru_pop(L, k, T_NVME);
		L->st[(uint64_t)k * L->n + x.smp] = 0;
		nd->used[T_NVME] -= plansim_nvme_size(x.len);
	}
}

/* s (not in NVMe) enters NVMe as its most recent, or leaves the cache if it
 * cannot fit. */
static int lru_put_nvme(struct lru *L, uint32_t k, uint32_t s, uint32_t stamp, uint64_t len)
{
	struct lru_node *nd = &L->node[k];
	uint64_t a = plansim_nvme_size(len);
	if (a > nd->cap[T_NVME]) {
		L->st[(uint64_t)k * L->n + s] = 0;
		return 0;
	}
	L->st[(uint64_t)k * L->n + s] = lru_code(stamp, T_NVME);
	if (lru_append(L, k, T_NVME, s, stamp, len) != 0)
		return -ENOMEM;
	nd->used[T_NVME] += a;
	lru_fit_nvme(L, k);
	return 0;
}

/* s (in no tier) is read now: it enters RAM, RAM's least recent move down. */
static int lru_put_ram(struct lru *L, uint32_t k, uint32_t s, uint64_t len)
{
	struct lru_node *nd = &L->node[k];
	uint32_t stamp = ++nd->clock;
	uint64_t a = plansim_ram_size(len);
	if (a > nd->cap[T_RAM])
		return lru_put_nvme(L, k, s, stamp, len);
	L->st[(uint64_t)k * L->n + s] = lru_code(stamp, T_RAM);
	if (lru_append(L, k, T_RAM, s, stamp, len) != 0)
		return -ENOMEM;
	nd->used[T_RAM] += a;
	while (nd->used[T_RAM] > nd->cap[T_RAM]) {
		struct lru_ent x = lru_pop(L, k, T_RAM);
		nd->used[T_RAM] -= plansim_ram_size(x.len);
		if (lru_put_nvme(L, k, x.smp, x.stamp, x.len) != 0)
			return -ENOMEM;
	}
	return 0;
}

static void lru_free(struct lru *L, uint32_t nn)
{
	for (uint32_t k = 0; L->node && k < nn; k++) {
		free(L->node[k].log[0].e);
		free(L->node[k].log[1].e);
	}
	free(L->node);
	free(L->st);
}

/* Empty caches of the job's capacities. 0, -ENOMEM or -EOVERFLOW; free
 * with lru_free either way. */
static int lru_init(struct lru *L, const struct plansim_job *job)
{
	const uint32_t nn = job->nnodes;
	L->n = job->sh->n;
	L->node = calloc(nn, sizeof(struct lru_node));
	L->st = plansim_big_alloc((size_t)nn * L->n * sizeof(uint32_t));
	uint64_t *reads = calloc(nn, sizeof(uint64_t));
	int rc = -ENOMEM;
	if (!L->node || !L->st || !reads)
		goto out;
	memset(L->st, 0, (size_t)nn * L->n * sizeof(uint32_t));
	/* stamps are 31 bits per node */
	rc = -EOVERFLOW;
	for (uint32_t r = 0; r < job->sh->world; r++)
		reads[job->rank_node[r]] += job->sh->per_rank;
	for (uint32_t k = 0; k < nn; k++)
		if (reads[k] * job->epochs >= (1u << 31))
			goto out;
	rc = -ENOMEM;
	for (uint32_t k = 0; k < nn; k++) {
		struct lru_node *nd = &L->node[k];
		nd->cap[T_RAM] = job->cap[k].ram;
		nd->cap[T_NVME] = job->cap[k].nvme;
		for (uint32_t t = 0; t < 2; t++) {
			nd->log[t].size = 1024;
			nd->log[t].e = malloc(nd->log[t].size * sizeof(struct lru_ent));
			if (!nd->log[t].e)
				goto out;
		}
	}
	rc = 0;
out:
	free(reads);
	return rc;
}

static int lru_epoch(struct plansim_replay *rp, struct lru *L, uint64_t e)
{
	enum { AHEAD = 32 };
	const struct plansim_job *job = rp->job;
	const struct plansim_walk *w = &rp->w;
	const uint64_t n = L->n;
	struct plansim_epoch *ep = plansim_replay_epoch(rp, e);
	for (uint64_t t = 0; t < w->nacc; t++) {
		if (t + AHEAD < w->nacc) {
			__builtin_prefetch(&L->st[(uint64_t)job->rank_node[w->rank[t + AHEAD]] * n +
						  w->smp[t + AHEAD]]);
			__builtin_prefetch(&job->len[w->smp[t + AHEAD]]);
		}
		uint32_t s = w->smp[t];
		uint32_t k = job->rank_node[w->rank[t]];
		uint64_t len = job->len[s];
		uint32_t v = L->st[(uint64_t)k * n + s];
		ep->demand += len;
		if (v == 0) {
			ep->pfs += len;
		} else if ((v & 1) == T_RAM) {
			ep->ram += len;
			L->node[k].used[T_RAM] -= plansim_ram_size(len);
		} else {
			ep->nvme += len;
			L->node[k].used[T_NVME] -= plansim_nvme_size(len);
		}
		/* the old log entry (if any) goes stale with the new stamp */
		if (lru_put_ram(L, k, s, len) != 0)
			return -ENOMEM;
	}
	plansim_replay_close(rp, ep);
	return 0;
}

/* What the caches hold at the end: out->held and out->distinct. */
static int lru_held(const struct lru *L, uint32_t nn, struct plansim_result *out)
{
	uint8_t *mark = calloc(L->n, 1);
	if (!mark)
		return -ENOMEM;
	for (uint32_t k = 0; k < nn; k++) {
		for (uint32_t t = 0; t < 2; t++) {
			const struct lru_log *g = &L->node[k].log[t];
			for (uint64_t r = g->head; r != g->tail; r++) {
				const struct lru_ent *x = &g->e[r & (g->size - 1)];
				if (!lru_live(L, k, x, t))
					continue;
				out->held += x->len;
				if (!mark[x->smp]) {
					mark[x->smp] = 1;
					out->distinct += x->len;
				}
			}
		}
	}
	free(mark);
	return 0;
}

int plansim_lru(const struct plansim_job *job, struct plansim_result *out)
{
	struct plansim_replay rp;
	int rc = plansim_replay_init(&rp, job, PLANSIM_LRU, out);
	if (rc)
		return rc;
	struct lru L = { 0 };
	rc = lru_init(&L, job);
	for (uint64_t e = 0; rc == 0 && e < job->epochs; e++)
		rc = lru_epoch(&rp, &L, e);
	if (rc == 0)
		rc = lru_held(&L, job->nnodes, out);
	lru_free(&L, job->nnodes);
	return plansim_replay_end(&rp, rc);
}
