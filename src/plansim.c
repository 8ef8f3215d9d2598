#define _GNU_SOURCE /* madvise */
#include "plansim.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util.h"

#define NIL UINT32_MAX
#define HUGE_PAGE (2u << 20)

/* ---- helpers ------------------------------------------------------------ */

/* Large arrays are touched at random: ask for transparent huge pages so the
 * TLB does not dominate. Free with free(). */
static void *big_alloc(size_t bytes)
{
	if (bytes < 4 * (size_t)HUGE_PAGE)
		return malloc(bytes ? bytes : 1);
	size_t sz = ALIGN_UP(bytes, (size_t)HUGE_PAGE);
	void *p = aligned_alloc(HUGE_PAGE, sz);
	if (p)
		madvise(p, sz, MADV_HUGEPAGE); /* advice only: failure is harmless */
	return p;
}

static inline uint64_t ram_size(uint64_t len) { return ALIGN_UP(len, (uint64_t)PLAN_RAM_ALIGN); }
static inline uint64_t nvme_size(uint64_t len) { return ALIGN_UP(len, (uint64_t)PLAN_NVME_ALIGN); }

static int job_check(const struct psim_job *job)
{
	if (!job || !job->len || !job->sh || !job->rank_node || !job->cap || job->epochs == 0 ||
	    job->nnodes == 0 || job->nnodes > UINT16_MAX || job->sh->n == 0 ||
	    job->sh->world == 0 || job->sh->per_rank == 0)
		return -EINVAL;
	for (uint32_t r = 0; r < job->sh->world; r++)
		if (job->rank_node[r] >= job->nnodes)
			return -EINVAL;
	return 0;
}

static int result_init(struct psim_result *r, enum psim_policy p, const struct psim_job *job)
{
	memset(r, 0, sizeof(*r));
	r->policy = p;
	r->epochs = job->epochs;
	r->ep = calloc(job->epochs, sizeof(*r->ep));
	if (!r->ep)
		return -ENOMEM;
	for (uint64_t s = 0; s < job->sh->n; s++)
		r->dataset += job->len[s];
	for (uint32_t k = 0; k < job->nnodes; k++)
		r->capacity += job->cap[k].ram + job->cap[k].nvme;
	return 0;
}

void psim_result_free(struct psim_result *r)
{
	free(r->ep);
	memset(r, 0, sizeof(*r));
}

/* Per-node bytes received from peers: the epoch's maximum goes to ep, the
 * job's per-node sums to tot; recv is cleared for the next epoch. */
static void epoch_close(struct psim_epoch *ep, uint64_t *recv, uint64_t *tot, uint32_t nnodes)
{
	for (uint32_t k = 0; k < nnodes; k++) {
		ep->peer_max = MAX(ep->peer_max, recv[k]);
		tot[k] += recv[k];
		recv[k] = 0;
	}
}

static void result_finish(struct psim_result *r, const uint64_t *tot, uint32_t nnodes)
{
	struct psim_epoch *t = &r->total;
	memset(t, 0, sizeof(*t));
	for (uint64_t e = 0; e < r->epochs; e++) {
		t->demand += r->ep[e].demand;
		t->pfs += r->ep[e].pfs;
		t->fill += r->ep[e].fill;
		t->peer += r->ep[e].peer;
		t->ram += r->ep[e].ram;
		t->nvme += r->ep[e].nvme;
	}
	for (uint32_t k = 0; tot && k < nnodes; k++)
		t->peer_max = MAX(t->peer_max, tot[k]);
}

/* ---- the access sequence in order of need --------------------------------
 * Inside an epoch: step by step; inside a step rank by rank; each rank's
 * batch in order (as src/plan.c walks it). */
struct walk {
	const struct smp_shape *sh;
	uint32_t *order;  /* the epoch's permutation */
	uint32_t *smp;    /* nacc: sample of each read */
	uint32_t *rank;   /* nacc: its reader */
	uint64_t nacc;
};

static void walk_free(struct walk *w)
{
	free(w->order);
	free(w->smp);
	free(w->rank);
	memset(w, 0, sizeof(*w));
}

static int walk_init(struct walk *w, const struct smp_shape *sh, bool reads)
{
	memset(w, 0, sizeof(*w));
	w->sh = sh;
	w->nacc = sh->per_rank * sh->world;
	w->order = malloc(sh->n * sizeof(uint32_t));
	if (reads) {
		w->smp = malloc(w->nacc * sizeof(uint32_t));
		w->rank = malloc(w->nacc * sizeof(uint32_t));
	}
	if (!w->order || (reads && (!w->smp || !w->rank))) {
		walk_free(w);
		return -ENOMEM;
	}
	return 0;
}

static void walk_order(struct walk *w, uint64_t epoch)
{
	const struct smp_shape *sh = w->sh;
	if (sh->shuffle) {
		smp_permute(sh->seed, epoch, sh->n, w->order);
	} else {
		for (uint64_t i = 0; i < sh->n; i++)
			w->order[i] = (uint32_t)i;
	}
}

/* Sample at padded position pos (wrap-around padding). */
static inline uint32_t walk_at(const struct walk *w, uint64_t pos)
{
	return w->order[pos < w->sh->n ? pos : pos % w->sh->n];
}

static void walk_epoch(struct walk *w, uint64_t epoch)
{
	const struct smp_shape *sh = w->sh;
	walk_order(w, epoch);
	uint64_t t = 0;
	for (uint64_t step = 0; step < sh->bpe; step++) {
		uint32_t blen = smp_batch_len(sh, step);
		for (uint32_t r = 0; r < sh->world; r++) {
			for (uint32_t i = 0; i < blen; i++, t++) {
				w->smp[t] = walk_at(w, smp_position(sh, r, step, i));
				w->rank[t] = r;
			}
		}
	}
}

/* ---- seer ------------------------------------------------------------------ */

int psim_seer(const struct psim_job *job, struct psim_result *out)
{
	memset(out, 0, sizeof(*out));
	int rc = job_check(job);
	if (rc)
		return rc;
	const struct smp_shape *sh = job->sh;
	const uint64_t n = sh->n;
	struct plan p;
	struct walk w = { 0 };
	uint8_t *seen = NULL;
	uint64_t *recv = NULL, *tot = NULL;
	if ((rc = result_init(out, PSIM_SEER, job)) != 0)
		return rc;
	rc = plan_build_lengths(&p, job->len, n, sh, 0, job->rank_node, job->nnodes, job->cap);
	if (rc)
		goto fail_result;
	rc = -ENOMEM;
	seen = calloc(n, 1);
	recv = calloc(job->nnodes, sizeof(uint64_t));
	tot = calloc(job->nnodes, sizeof(uint64_t));
	if (!seen || !recv || !tot || walk_init(&w, sh, true) != 0)
		goto fail;

	for (uint64_t e = 0; e < job->epochs; e++) {
		struct psim_epoch *ep = &out->ep[e];
		walk_epoch(&w, e);
		for (uint64_t t = 0; t < w.nacc; t++) {
			uint32_t s = w.smp[t];
			uint32_t k = job->rank_node[w.rank[t]];
			uint64_t len = job->len[s];
			ep->demand += len;
			if (e == 0 && !seen[s]) {
				/* first read of the job: from the PFS, filling the owner
				 * if it is this node; another owner loads it too */
				seen[s] = 1;
				ep->pfs += len;
				if (p.tier[s] != PLAN_NONE && p.owner[s] != k) {
					ep->pfs += len;
					ep->fill += len;
				}
				continue;
			}
			if (p.tier[s] == PLAN_NONE) {
				ep->pfs += len;
			} else if (p.owner[s] == k) {
				if (p.tier[s] == PLAN_RAM)
					ep->ram += len;
				else
					ep->nvme += len;
			} else {
				ep->peer += len;
				recv[k] += len;
			}
		}
		if (e == 0) {
			/* planned samples nobody read in epoch 0 (drop_last tails):
			 * their owners load them from the PFS */
			for (uint64_t s = 0; s < n; s++) {
				if (!seen[s] && p.tier[s] != PLAN_NONE) {
					ep->pfs += job->len[s];
					ep->fill += job->len[s];
				}
			}
		}
		epoch_close(ep, recv, tot, job->nnodes);
	}
	out->held = out->distinct = p.cached_bytes;
	out->spilled = p.spilled;
	result_finish(out, tot, job->nnodes);
	rc = 0;
fail:
	walk_free(&w);
	free(tot);
	free(recv);
	free(seen);
	plan_free(&p);
	if (rc == 0)
		return 0;
fail_result:
	psim_result_free(out);
	return rc;
}

/* ---- LRU per node --------------------------------------------------------------
 * Two tiers per node: RAM holds the most recently read samples, NVMe the next
 * most recent. A miss enters RAM; RAM's least recent moves down to NVMe;
 * NVMe's least recent leaves; an NVMe hit moves back to RAM. With equal sizes
 * this is one LRU stack of RAM + NVMe split at RAM's capacity.
 *
 * Recency order is kept as a log per node and tier: every read appends
 * (sample, stamp) at the tail, the head is the least recent, and an entry is
 * live while st[k * n + s] still carries its stamp (later reads make older
 * entries stale; they are skipped at the head and squeezed out when the log
 * fills). Every step touches the log sequentially and st at one place, so
 * the random accesses can be prefetched: no pointer chasing. */
enum { T_RAM = 0, T_NVME = 1 };

static inline uint64_t tier_size(uint64_t len, uint32_t t)
{
	return t == T_RAM ? ram_size(len) : nvme_size(len);
}

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
		nd->used[T_NVME] -= nvme_size(x.len);
	}
}

/* s (not in NVMe) enters NVMe as its most recent, or leaves the cache if it
 * cannot fit. */
static int lru_put_nvme(struct lru *L, uint32_t k, uint32_t s, uint32_t stamp, uint64_t len)
{
	struct lru_node *nd = &L->node[k];
	uint64_t a = nvme_size(len);
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
	uint64_t a = ram_size(len);
	if (a > nd->cap[T_RAM])
		return lru_put_nvme(L, k, s, stamp, len);
	L->st[(uint64_t)k * L->n + s] = lru_code(stamp, T_RAM);
	if (lru_append(L, k, T_RAM, s, stamp, len) != 0)
		return -ENOMEM;
	nd->used[T_RAM] += a;
	while (nd->used[T_RAM] > nd->cap[T_RAM]) {
		struct lru_ent x = lru_pop(L, k, T_RAM);
		nd->used[T_RAM] -= ram_size(x.len);
		if (lru_put_nvme(L, k, x.smp, x.stamp, x.len) != 0)
			return -ENOMEM;
	}
	return 0;
}


int psim_lru(const struct psim_job *job, struct psim_result *out)
{
	memset(out, 0, sizeof(*out));
	int rc = job_check(job);
	if (rc)
		return rc;
	const struct smp_shape *sh = job->sh;
	const uint64_t n = sh->n;
	const uint32_t nn = job->nnodes;
	struct lru L = { .n = n };
	struct walk w = { 0 };
	uint64_t *recv = NULL, *tot = NULL, *reads = NULL;
	uint8_t *mark = NULL;
	if ((rc = result_init(out, PSIM_LRU, job)) != 0)
		return rc;
	rc = -ENOMEM;
	L.node = calloc(nn, sizeof(struct lru_node));
	L.st = big_alloc((size_t)nn * n * sizeof(uint32_t));
	recv = calloc(nn, sizeof(uint64_t));
	tot = calloc(nn, sizeof(uint64_t));
	reads = calloc(nn, sizeof(uint64_t));
	if (!L.node || !L.st || !recv || !tot || !reads || walk_init(&w, sh, true) != 0)
		goto fail;
	memset(L.st, 0, (size_t)nn * n * sizeof(uint32_t));

	/* stamps are 31 bits per node */
	for (uint32_t r = 0; r < sh->world; r++)
		reads[job->rank_node[r]] += sh->per_rank;
	for (uint32_t k = 0; k < nn; k++) {
		if (reads[k] * job->epochs >= (1u << 31)) {
			rc = -EOVERFLOW;
			goto fail;
		}
	}
	for (uint32_t k = 0; k < nn; k++) {
		struct lru_node *nd = &L.node[k];
		nd->cap[T_RAM] = job->cap[k].ram;
		nd->cap[T_NVME] = job->cap[k].nvme;
		for (uint32_t t = 0; t < 2; t++) {
			nd->log[t].size = 1024;
			nd->log[t].e = malloc(nd->log[t].size * sizeof(struct lru_ent));
			if (!nd->log[t].e)
				goto fail;
		}
	}

	enum { AHEAD = 32 };
	for (uint64_t e = 0; e < job->epochs; e++) {
		struct psim_epoch *ep = &out->ep[e];
		walk_epoch(&w, e);
		for (uint64_t t = 0; t < w.nacc; t++) {
			if (t + AHEAD < w.nacc) {
				__builtin_prefetch(&L.st[(uint64_t)job->rank_node[w.rank[t + AHEAD]] * n +
							 w.smp[t + AHEAD]]);
				__builtin_prefetch(&job->len[w.smp[t + AHEAD]]);
			}
			uint32_t s = w.smp[t];
			uint32_t k = job->rank_node[w.rank[t]];
			uint64_t len = job->len[s];
			uint32_t v = L.st[(uint64_t)k * n + s];
			ep->demand += len;
			if (v == 0) {
				ep->pfs += len;
			} else if ((v & 1) == T_RAM) {
				ep->ram += len;
				L.node[k].used[T_RAM] -= ram_size(len);
			} else {
				ep->nvme += len;
				L.node[k].used[T_NVME] -= nvme_size(len);
			}
			/* the old log entry (if any) goes stale with the new stamp */
			if (lru_put_ram(&L, k, s, len) != 0)
				goto fail;
		}
		epoch_close(ep, recv, tot, nn);
	}

	/* what the caches hold at the end */
	mark = calloc(n, 1);
	if (!mark)
		goto fail;
	for (uint32_t k = 0; k < nn; k++) {
		for (uint32_t t = 0; t < 2; t++) {
			const struct lru_log *g = &L.node[k].log[t];
			for (uint64_t r = g->head; r != g->tail; r++) {
				const struct lru_ent *x = &g->e[r & (g->size - 1)];
				if (!lru_live(&L, k, x, t))
					continue;
				out->held += x->len;
				if (!mark[x->smp]) {
					mark[x->smp] = 1;
					out->distinct += x->len;
				}
			}
		}
	}
	result_finish(out, tot, nn);
	rc = 0;
fail:
	free(mark);
	walk_free(&w);
	free(reads);
	free(tot);
	free(recv);
	for (uint32_t k = 0; L.node && k < nn; k++) {
		free(L.node[k].log[0].e);
		free(L.node[k].log[1].e);
	}
	free(L.node);
	free(L.st);
	if (rc)
		psim_result_free(out);
	return rc;
}

/* ---- NoPFS -----------------------------------------------------------------------
 * What each rank caches (NoPFS Sampler::get_prefetch_string): the samples its
 * own stream reads, in order of decreasing frequency over the job, ties by
 * first access; RAM takes them while they fit, the first that does not fit
 * starts NVMe, the first that does not fit NVMe ends the list.
 *
 * Frequencies need every epoch's readers of a sample at once: pmap[s*E + e]
 * is the position of s in epoch e (NIL when not read; extra reads from
 * padding are in `ex`). A rank's order key for sample s is
 *     ord = (E - freq) * E * PR + first,  first = e * PR + j
 * (PR samples per rank per epoch, j the index in the rank's epoch stream of
 * its first read), unique per rank. The RAM cut is the first ord whose
 * cumulative size exceeds the RAM share; it is found by narrowing an ord
 * range with a B-bucket byte histogram per rank and pass; the NVMe cut the
 * same way from there. Memory: 4 * n * E bytes for pmap, about 28 bytes per
 * (rank, sample) held while the caches are built and 3 during the replay.
 * Limits: < 65536 ranks and epochs, < 2^32 reads per rank over the job. */
struct nx_extra {
	uint32_t s, e, p;
};

struct nsel {
	const struct psim_job *job;
	uint64_t n, E, PR;
	uint32_t W;
	uint64_t wmagic;     /* p / W without a division: see nsel_add */
	uint32_t *pmap;
	struct nx_extra *ex;
	uint64_t nex;
	/* readers of the current sample */
	uint32_t *stamp, *cnt, *touched;
	uint64_t *first;
	uint32_t ntouched;
};

static int cmp_extra(const void *a, const void *b)
{
	const struct nx_extra *x = a, *y = b;
	if (x->s != y->s)
		return x->s < y->s ? -1 : 1;
	if (x->e != y->e)
		return x->e < y->e ? -1 : 1;
	return (x->p > y->p) - (x->p < y->p);
}

static inline void nsel_add(struct nsel *q, uint32_t s, uint64_t e, uint32_t p)
{
	/* exact for 32-bit p and W (Lemire, Kaser, Kurz 2019, "Faster
	 * remainder by direct computation") */
	uint32_t j = q->W == 1 ? p : (uint32_t)(((unsigned __int128)q->wmagic * p) >> 64);
	uint32_t r = p - j * q->W;
	uint64_t key = e * q->PR + j;
	if (q->stamp[r] != s + 1) {
		q->stamp[r] = s + 1;
		q->cnt[r] = 1;
		q->first[r] = key;
		q->touched[q->ntouched++] = r;
	} else {
		q->cnt[r]++;
		if (key < q->first[r])
			q->first[r] = key;
	}
}

/* Readers of s into touched/cnt/first; *cur walks ex (sorted by sample). */
static inline void nsel_gather(struct nsel *q, uint32_t s, uint64_t *cur)
{
	const uint32_t *row = &q->pmap[(uint64_t)s * q->E];
	q->ntouched = 0;
	for (uint64_t e = 0; e < q->E; e++)
		if (row[e] != NIL)
			nsel_add(q, s, e, row[e]);
	while (*cur < q->nex && q->ex[*cur].s == s) {
		nsel_add(q, s, q->ex[*cur].e, q->ex[*cur].p);
		(*cur)++;
	}
}

static inline uint64_t nsel_ord(const struct nsel *q, uint32_t r)
{
	return (q->E - q->cnt[r]) * q->E * q->PR + q->first[r];
}

static void nsel_free(struct nsel *q)
{
	free(q->pmap);
	free(q->ex);
	free(q->stamp);
	free(q->cnt);
	free(q->touched);
	free(q->first);
}

static int nsel_init(struct nsel *q, const struct psim_job *job)
{
	const struct smp_shape *sh = job->sh;
	memset(q, 0, sizeof(*q));
	q->job = job;
	q->n = sh->n;
	q->E = job->epochs;
	q->PR = sh->per_rank;
	q->W = sh->world;
	q->wmagic = UINT64_MAX / q->W + 1; /* unused (0) when W == 1 */
	/* ord must fit 64 bits and positions 32 bits */
	if (q->E >= (1u << 16) || q->E * q->PR >= (1ull << 32) || sh->per_rank * sh->world >= NIL ||
	    q->W > UINT16_MAX)
		return -EINVAL;
	struct walk w;
	if (walk_init(&w, sh, false) != 0)
		return -ENOMEM;
	uint64_t nread = sh->per_rank * sh->world;
	uint64_t pad = nread > q->n ? nread - q->n : 0;
	q->pmap = big_alloc(q->n * q->E * sizeof(uint32_t));
	q->ex = malloc((pad * q->E + 1) * sizeof(*q->ex));
	q->stamp = calloc(q->W, sizeof(uint32_t));
	q->cnt = calloc(q->W, sizeof(uint32_t));
	q->touched = calloc(q->W, sizeof(uint32_t));
	q->first = calloc(q->W, sizeof(uint64_t));
	if (!q->pmap || !q->ex || !q->stamp || !q->cnt || !q->touched || !q->first) {
		walk_free(&w);
		nsel_free(q);
		return -ENOMEM;
	}
	memset(q->pmap, 0xff, q->n * q->E * sizeof(uint32_t));
	for (uint64_t e = 0; e < q->E; e++) {
		walk_order(&w, e);
		uint64_t lim = MIN(nread, q->n);
		for (uint64_t p = 0; p < lim; p++)
			q->pmap[(uint64_t)w.order[p] * q->E + e] = (uint32_t)p;
		for (uint64_t p = q->n; p < nread; p++)
			q->ex[q->nex++] = (struct nx_extra){ walk_at(&w, p), (uint32_t)e, (uint32_t)p };
	}
	walk_free(&w);
	qsort(q->ex, q->nex, sizeof(*q->ex), cmp_extra);
	return 0;
}

/* Per rank: the first ord in [lo, hi) at which the cumulative size (RAM or
 * NVMe alignment) of the rank's samples, counted from cum bytes at lo,
 * exceeds target. Results in lo (UINT64_MAX: never) and cum (bytes before). */
struct ncut {
	uint64_t lo, hi, cum, target;
	bool active;
};

static int nsel_cut(struct nsel *q, struct ncut *c, uint32_t tier)
{
	const uint32_t W = q->W;
	const uint32_t B = W <= 1024 ? 4096 : MAX(64u, (4u << 20) / W);
	uint64_t *hist = malloc((size_t)W * B * sizeof(uint64_t));
	uint64_t *width = malloc(W * sizeof(uint64_t));
	if (!hist || !width) {
		free(hist);
		free(width);
		return -ENOMEM;
	}
	for (;;) {
		bool any = false;
		for (uint32_t r = 0; r < W; r++) {
			if (!c[r].active)
				continue;
			any = true;
			width[r] = (c[r].hi - c[r].lo + B - 1) / B;
			memset(&hist[(size_t)r * B], 0, B * sizeof(uint64_t));
		}
		if (!any)
			break;
		uint64_t cur = 0;
		for (uint64_t s = 0; s < q->n; s++) {
			nsel_gather(q, (uint32_t)s, &cur);
			uint64_t sz = tier_size(q->job->len[s], tier);
			for (uint32_t i = 0; i < q->ntouched; i++) {
				uint32_t r = q->touched[i];
				if (!c[r].active)
					continue;
				uint64_t o = nsel_ord(q, r);
				if (o >= c[r].lo && o < c[r].hi)
					hist[(size_t)r * B + (o - c[r].lo) / width[r]] += sz;
			}
		}
		for (uint32_t r = 0; r < W; r++) {
			if (!c[r].active)
				continue;
			const uint64_t *h = &hist[(size_t)r * B];
			uint64_t run = c[r].cum;
			uint32_t b = 0;
			while (b < B && run + h[b] <= c[r].target)
				run += h[b++];
			c[r].cum = run;
			if (b == B) {
				c[r].lo = UINT64_MAX; /* everything fits */
				c[r].active = false;
			} else {
				c[r].lo += b * width[r];
				c[r].hi = MIN(c[r].hi, c[r].lo + width[r]);
				if (width[r] == 1)
					c[r].active = false; /* the one sample with ord lo */
			}
		}
	}
	free(hist);
	free(width);
	return 0;
}

struct nent {
	uint32_t rank;
	uint32_t off;    /* index in the rank's list of this tier, by first access */
	uint32_t tier;   /* PLAN_RAM or PLAN_NVME */
};

/* What the replay needs of the caches, 3 bytes per (rank, sample) held. */
#define NF_TIER 3u    /* enum plan_tier of the copy */
#define NF_FILLED 4u  /* the copy is there */
struct ncache {
	uint64_t *row;       /* n + 1: sample s's holders are [row[s], row[s+1]) */
	uint16_t *rank;      /* holder ranks; the designated holder comes first */
	uint8_t *flags;      /* NF_* */
	uint64_t nent;
};

/* Sorts a[0..n) by their low `bits` bits (LSD radix, 11-bit digits); tmp
 * holds n values. */
static void radix_sort(uint64_t *a, uint64_t *tmp, size_t n, unsigned bits)
{
	enum { D = 11, R = 1 << D };
	if (n < 64) {
		for (size_t i = 1; i < n; i++) {
			uint64_t v = a[i];
			size_t j = i;
			for (; j > 0 && a[j - 1] > v; j--)
				a[j] = a[j - 1];
			a[j] = v;
		}
		return;
	}
	size_t cnt[R];
	uint64_t *src = a, *dst = tmp;
	for (unsigned sh = 0; sh < bits; sh += D) {
		memset(cnt, 0, sizeof(cnt));
		for (size_t i = 0; i < n; i++)
			cnt[(src[i] >> sh) & (R - 1)]++;
		size_t sum = 0;
		for (size_t d = 0; d < R; d++) {
			size_t c = cnt[d];
			cnt[d] = sum;
			sum += c;
		}
		for (size_t i = 0; i < n; i++)
			dst[cnt[(src[i] >> sh) & (R - 1)]++] = src[i];
		uint64_t *t = src;
		src = dst;
		dst = t;
	}
	if (src != a)
		memcpy(a, src, n * sizeof(uint64_t));
}

static unsigned bit_width(uint64_t v)
{
	unsigned b = 0;
	while (v) {
		b++;
		v >>= 1;
	}
	return b;
}

static inline bool nent_before(const struct nent *a, const struct nent *b)
{
	if (a->tier != b->tier)
		return a->tier < b->tier;
	if (a->off != b->off)
		return a->off < b->off;
	return a->rank < b->rank;
}

/* The rank caches as NoPFS plans them; the holder a non-holder asks (NoPFS
 * DistributedManager: lowest storage class, then lowest offset in the
 * holder's prefetch list) first in each row. */
static int nopfs_caches(const struct psim_job *job, struct ncache *nc)
{
	struct nsel q;
	int rc = nsel_init(&q, job);
	if (rc)
		return rc;
	const uint32_t W = q.W;
	struct ncut *ramc = calloc(W, sizeof(*ramc)), *nvmc = calloc(W, sizeof(*nvmc));
	uint32_t *on_node = calloc(job->nnodes, sizeof(uint32_t));
	uint64_t *keys = NULL, *gstart = NULL, *gfill = NULL, *gkeys = NULL, *gidx = NULL;
	struct nent *ent = NULL;
	memset(nc, 0, sizeof(*nc));
	rc = -ENOMEM;
	if (!ramc || !nvmc || !on_node)
		goto out;
	for (uint32_t r = 0; r < W; r++)
		on_node[job->rank_node[r]]++;
	const uint64_t end = q.E * q.E * q.PR;
	for (uint32_t r = 0; r < W; r++) {
		uint32_t k = job->rank_node[r];
		ramc[r] = (struct ncut){ 0, end, 0, job->cap[k].ram / on_node[k], true };
	}
	if ((rc = nsel_cut(&q, ramc, T_RAM)) != 0)
		goto out;
	for (uint32_t r = 0; r < W; r++) {
		uint32_t k = job->rank_node[r];
		uint64_t lo = ramc[r].lo;
		nvmc[r] = (struct ncut){ lo, end, 0, job->cap[k].nvme / on_node[k], lo != UINT64_MAX };
	}
	if ((rc = nsel_cut(&q, nvmc, T_NVME)) != 0)
		goto out;

	/* the holders, sample by sample */
	rc = -ENOMEM;
	uint64_t capn = 1024;
	ent = malloc(capn * sizeof(struct nent));
	nc->row = malloc((q.n + 1) * sizeof(uint64_t));
	keys = malloc(capn * sizeof(uint64_t));
	if (!nc->row || !ent || !keys)
		goto out;
	uint64_t cur = 0;
	for (uint64_t s = 0; s < q.n; s++) {
		nc->row[s] = nc->nent;
		nsel_gather(&q, (uint32_t)s, &cur);
		for (uint32_t i = 0; i < q.ntouched; i++) {
			uint32_t r = q.touched[i];
			uint64_t o = nsel_ord(&q, r);
			uint8_t tier = o < ramc[r].lo ? PLAN_RAM : o < nvmc[r].lo ? PLAN_NVME : PLAN_NONE;
			if (tier == PLAN_NONE)
				continue;
			if (nc->nent == capn) {
				capn *= 2;
				struct nent *ne = realloc(ent, capn * sizeof(struct nent));
				uint64_t *nk = ne ? realloc(keys, capn * sizeof(uint64_t)) : NULL;
				if (ne)
					ent = ne;
				if (nk)
					keys = nk;
				if (!ne || !nk)
					goto out;
			}
			ent[nc->nent] = (struct nent){ r, 0, tier };
			keys[nc->nent++] = q.first[r];
		}
	}
	nc->row[q.n] = nc->nent;

	/* offsets: index by first access in each (rank, tier) list. A group
	 * holds at most E * PR samples (< 2^32, checked in nsel_init), so
	 * (first access key << b | position in group) fits 64 bits. */
	const uint64_t G = 2ull * W;
	const unsigned b = bit_width(q.E * q.PR);
	gstart = calloc(G + 1, sizeof(uint64_t));
	gfill = calloc(G, sizeof(uint64_t));
	gkeys = malloc((nc->nent + 1) * sizeof(uint64_t));
	gidx = malloc((nc->nent + 1) * sizeof(uint64_t));
	if (!gstart || !gfill || !gkeys || !gidx)
		goto out;
	for (uint64_t i = 0; i < nc->nent; i++)
		gstart[2ull * ent[i].rank + ent[i].tier - 1 + 1]++;
	uint64_t gmax = 0;
	for (uint64_t g = 0; g < G; g++) {
		gmax = MAX(gmax, gstart[g + 1]);
		gstart[g + 1] += gstart[g];
	}
	for (uint64_t i = 0; i < nc->nent; i++) {
		uint64_t g = 2ull * ent[i].rank + ent[i].tier - 1;
		uint64_t pos = gfill[g]++;
		gkeys[gstart[g] + pos] = keys[i] << b | pos;
		gidx[gstart[g] + pos] = i;
	}
	free(keys);
	keys = malloc((gmax + 1) * sizeof(uint64_t)); /* radix scratch */
	if (!keys)
		goto out;
	for (uint64_t g = 0; g < G; g++) {
		uint64_t *gk = &gkeys[gstart[g]];
		uint64_t m = gstart[g + 1] - gstart[g];
		radix_sort(gk, keys, m, 2 * b);
		for (uint64_t p = 0; p < m; p++)
			ent[gidx[gstart[g] + (gk[p] & ((1ull << b) - 1))]].off = (uint32_t)p;
	}
	for (uint64_t s = 0; s < q.n; s++) {
		struct nent *row = &ent[nc->row[s]];
		uint64_t m = nc->row[s + 1] - nc->row[s];
		for (uint64_t i = 1; i < m; i++) {
			if (nent_before(&row[i], &row[0])) {
				struct nent t = row[0];
				row[0] = row[i];
				row[i] = t;
			}
		}
	}
	free(gidx);
	free(gkeys);
	free(keys);
	gidx = gkeys = keys = NULL;
	nc->rank = malloc((nc->nent + 1) * sizeof(uint16_t));
	nc->flags = malloc(nc->nent + 1);
	if (!nc->rank || !nc->flags)
		goto out;
	for (uint64_t i = 0; i < nc->nent; i++) {
		nc->rank[i] = (uint16_t)ent[i].rank;
		nc->flags[i] = ent[i].tier;
	}
	rc = 0;
out:
	if (rc) {
		free(nc->row);
		free(nc->rank);
		free(nc->flags);
		memset(nc, 0, sizeof(*nc));
	}
	free(ent);
	free(gidx);
	free(gkeys);
	free(gfill);
	free(gstart);
	free(keys);
	free(on_node);
	free(nvmc);
	free(ramc);
	nsel_free(&q);
	return rc;
}

int psim_nopfs(const struct psim_job *job, struct psim_result *out)
{
	memset(out, 0, sizeof(*out));
	int rc = job_check(job);
	if (rc)
		return rc;
	const struct smp_shape *sh = job->sh;
	struct ncache nc;
	struct walk w = { 0 };
	uint64_t *recv = NULL, *tot = NULL;
	if ((rc = result_init(out, PSIM_NOPFS, job)) != 0)
		return rc;
	if ((rc = nopfs_caches(job, &nc)) != 0) {
		psim_result_free(out);
		return rc;
	}
	rc = -ENOMEM;
	recv = calloc(job->nnodes, sizeof(uint64_t));
	tot = calloc(job->nnodes, sizeof(uint64_t));
	if (!recv || !tot || walk_init(&w, sh, true) != 0)
		goto out;
	for (uint64_t s = 0; s < sh->n; s++) {
		if (nc.row[s + 1] > nc.row[s])
			out->distinct += job->len[s];
		out->held += (nc.row[s + 1] - nc.row[s]) * job->len[s];
	}
	if (job->nopfs_fill == PSIM_FILL_PREFETCH) {
		for (uint64_t i = 0; i < nc.nent; i++)
			nc.flags[i] |= NF_FILLED;
		out->ep[0].pfs += out->held;
		out->ep[0].fill += out->held;
	}

	enum { AHEAD = 32 };
	for (uint64_t e = 0; e < job->epochs; e++) {
		struct psim_epoch *ep = &out->ep[e];
		walk_epoch(&w, e);
		for (uint64_t t = 0; t < w.nacc; t++) {
			if (t + AHEAD < w.nacc) {
				__builtin_prefetch(&nc.row[w.smp[t + AHEAD]]);
				__builtin_prefetch(&job->len[w.smp[t + AHEAD]]);
			}
			if (t + AHEAD / 2 < w.nacc) {
				uint64_t b = nc.row[w.smp[t + AHEAD / 2]];
				__builtin_prefetch(&nc.rank[b]);
				__builtin_prefetch(&nc.flags[b]);
			}
			uint32_t s = w.smp[t];
			uint32_t r = w.rank[t];
			uint32_t k = job->rank_node[r];
			uint64_t len = job->len[s];
			uint64_t b = nc.row[s], m = nc.row[s + 1] - b;
			const uint16_t *rk = &nc.rank[b];
			ep->demand += len;
			uint64_t own = 0;
			while (own < m && rk[own] != r)
				own++;
			/* the rank's own copy, else the designated holder's */
			uint64_t src = own < m ? own : 0;
			if (m && (nc.flags[b + src] & NF_FILLED)) {
				if (job->rank_node[rk[src]] != k) {
					ep->peer += len;
					recv[k] += len;
				} else if ((nc.flags[b + src] & NF_TIER) == PLAN_RAM) {
					ep->ram += len;
				} else {
					ep->nvme += len;
				}
				continue;
			}
			/* not cached where this rank looks: the PFS; a planned
			 * sample of its own cache is filled on the way */
			ep->pfs += len;
			if (own < m)
				nc.flags[b + own] |= NF_FILLED;
		}
		epoch_close(ep, recv, tot, job->nnodes);
	}
	result_finish(out, tot, job->nnodes);
	rc = 0;
out:
	walk_free(&w);
	free(tot);
	free(recv);
	free(nc.row);
	free(nc.rank);
	free(nc.flags);
	if (rc)
		psim_result_free(out);
	return rc;
}

/* ---- the optimum -------------------------------------------------------------- */

int psim_optimum(const struct psim_job *job, struct psim_result *out)
{
	memset(out, 0, sizeof(*out));
	int rc = job_check(job);
	if (rc)
		return rc;
	const struct smp_shape *sh = job->sh;
	if ((rc = result_init(out, PSIM_OPTIMUM, job)) != 0)
		return rc;
	const uint64_t c = MIN(out->dataset, out->capacity);
	const uint64_t nread = sh->per_rank * sh->world;
	struct walk w = { 0 };
	if (nread != sh->n && walk_init(&w, sh, false) != 0) {
		psim_result_free(out);
		return -ENOMEM;
	}
	for (uint64_t e = 0; e < job->epochs; e++) {
		struct psim_epoch *ep = &out->ep[e];
		uint64_t de = out->dataset; /* bytes of distinct samples read */
		ep->demand = de;
		if (nread != sh->n) {
			walk_order(&w, e);
			de = 0;
			for (uint64_t p = 0; p < MIN(nread, sh->n); p++)
				de += job->len[w.order[p]];
			ep->demand = de;
			for (uint64_t p = sh->n; p < nread; p++)
				ep->demand += job->len[walk_at(&w, p)];
		}
		ep->pfs = e == 0 ? de : de > c ? de - c : 0;
	}
	walk_free(&w);
	out->held = out->distinct = c;
	result_finish(out, NULL, 0);
	return 0;
}

int psim_run(const struct psim_job *job, enum psim_policy p, struct psim_result *out)
{
	switch (p) {
	case PSIM_SEER: return psim_seer(job, out);
	case PSIM_NOPFS: return psim_nopfs(job, out);
	case PSIM_LRU: return psim_lru(job, out);
	case PSIM_OPTIMUM: return psim_optimum(job, out);
	default: memset(out, 0, sizeof(*out)); return -EINVAL;
	}
}

/* ---- small things ----------------------------------------------------------------- */

static const char *const policy_names[PSIM_NPOLICIES] = { "seer", "nopfs", "lru", "optimum" };

const char *psim_policy_name(enum psim_policy p)
{
	return (unsigned)p < PSIM_NPOLICIES ? policy_names[p] : "?";
}

int psim_parse_policies(const char *list, unsigned *mask)
{
	unsigned m = 0;
	const char *s = list;
	while (*s) {
		size_t l = strcspn(s, ",");
		bool ok = false;
		if (l == 3 && strncmp(s, "all", 3) == 0) {
			m |= PSIM_ALL;
			ok = true;
		}
		for (unsigned p = 0; p < PSIM_NPOLICIES && !ok; p++) {
			if (strlen(policy_names[p]) == l && strncmp(s, policy_names[p], l) == 0) {
				m |= PSIM_BIT(p);
				ok = true;
			}
		}
		if (!ok)
			return -EINVAL;
		s += l;
		if (*s == ',')
			s++;
	}
	if (!m)
		return -EINVAL;
	*mask = m;
	return 0;
}

double psim_epoch_time(const struct psim_epoch *e, uint64_t steps, double compute_s,
		       double pfs_bw, double net_bw, const char **bound)
{
	double t = compute_s * (double)steps;
	const char *b = "compute";
	if (pfs_bw > 0 && (double)e->pfs / pfs_bw > t) {
		t = (double)e->pfs / pfs_bw;
		b = "pfs";
	}
	if (net_bw > 0 && (double)e->peer_max / net_bw > t) {
		t = (double)e->peer_max / net_bw;
		b = "net";
	}
	if (bound)
		*bound = b;
	return t;
}

static inline uint64_t splitmix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in (0, 1). */
static inline double unit_open(uint64_t x)
{
	return ((double)(x >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

void psim_lognormal_sizes(uint64_t *len, uint64_t n, double mean, double sd, uint64_t seed)
{
	const double two_pi = 6.283185307179586476925286766559;
	double s2 = log1p((sd / mean) * (sd / mean));
	double mu = log(mean) - s2 / 2, sigma = sqrt(s2);
	uint64_t key = splitmix(seed ^ 0x51a3e5d1f7c2b9a1ull);
	for (uint64_t i = 0; i < n; i++) {
		double u1 = unit_open(splitmix(key + (2 * i + 1) * 0x9e3779b97f4a7c15ull));
		double u2 = unit_open(splitmix(key + (2 * i + 2) * 0x9e3779b97f4a7c15ull));
		double z = sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
		double v = exp(mu + sigma * z);
		len[i] = v < 1.0 ? 1 : v > 1e18 ? (uint64_t)1e18 : (uint64_t)llround(v);
	}
}
