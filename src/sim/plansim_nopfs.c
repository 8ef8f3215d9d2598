/* The NoPFS policy of the plan simulator (see plansim_int.h for the file map,
 * plansim.h and docs/planner.md for the model).
 *
 * What each rank caches (NoPFS Sampler::get_prefetch_string): the samples
 * its own stream reads, in order of decreasing frequency over the job, ties
 * by first access; RAM takes them while they fit, the first that does not
 * fit starts NVMe, the first that does not fit NVMe ends the list.
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
 * Limits: < 65536 ranks and epochs, < 2^32 reads per rank over the job.
 *
 * Threads: any; a run owns its state. Failure: -EINVAL past those limits,
 * -ENOMEM; the result is then empty. */
#include "plansim_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct nx_extra {
	uint32_t s, e, p;
};

struct nsel {
	const struct plansim_job *job;
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

static int nsel_init(struct nsel *q, const struct plansim_job *job)
{
	const struct sampler_shape *sh = job->sh;
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
	struct plansim_walk w;
	if (plansim_walk_init(&w, sh, false) != 0)
		return -ENOMEM;
	uint64_t nread = sh->per_rank * sh->world;
	uint64_t pad = nread > q->n ? nread - q->n : 0;
	q->pmap = plansim_big_alloc(q->n * q->E * sizeof(uint32_t));
	q->ex = malloc((pad * q->E + 1) * sizeof(*q->ex));
	q->stamp = calloc(q->W, sizeof(uint32_t));
	q->cnt = calloc(q->W, sizeof(uint32_t));
	q->touched = calloc(q->W, sizeof(uint32_t));
	q->first = calloc(q->W, sizeof(uint64_t));
	if (!q->pmap || !q->ex || !q->stamp || !q->cnt || !q->touched || !q->first) {
		plansim_walk_free(&w);
		nsel_free(q);
		return -ENOMEM;
	}
	memset(q->pmap, 0xff, q->n * q->E * sizeof(uint32_t));
	for (uint64_t e = 0; e < q->E; e++) {
		plansim_walk_order(&w, e);
		uint64_t lim = MIN(nread, q->n);
		for (uint64_t p = 0; p < lim; p++)
			q->pmap[(uint64_t)w.order[p] * q->E + e] = (uint32_t)p;
		for (uint64_t p = q->n; p < nread; p++)
			q->ex[q->nex++] = (struct nx_extra){ plansim_walk_at(&w, p), (uint32_t)e, (uint32_t)p };
	}
	plansim_walk_free(&w);
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
			uint64_t sz = plansim_tier_size(q->job->len[s], tier);
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

static void ncache_free(struct ncache *nc)
{
	free(nc->row);
	free(nc->rank);
	free(nc->flags);
	memset(nc, 0, sizeof(*nc));
}

/* Each rank's RAM cut (ramc) and NVMe cut (nvmc): its share of its node's
 * capacities. */
static int nopfs_cuts(struct nsel *q, struct ncut **ramc_out, struct ncut **nvmc_out)
{
	const struct plansim_job *job = q->job;
	const uint32_t W = q->W;
	struct ncut *ramc = calloc(W, sizeof(*ramc)), *nvmc = calloc(W, sizeof(*nvmc));
	uint32_t *on_node = calloc(job->nnodes, sizeof(uint32_t));
	*ramc_out = ramc;
	*nvmc_out = nvmc;
	int rc = -ENOMEM;
	if (!ramc || !nvmc || !on_node)
		goto out;
	for (uint32_t r = 0; r < W; r++)
		on_node[job->rank_node[r]]++;
	const uint64_t end = q->E * q->E * q->PR;
	for (uint32_t r = 0; r < W; r++) {
		uint32_t k = job->rank_node[r];
		ramc[r] = (struct ncut){ 0, end, 0, job->cap[k].ram / on_node[k], true };
	}
	if ((rc = nsel_cut(q, ramc, T_RAM)) != 0)
		goto out;
	for (uint32_t r = 0; r < W; r++) {
		uint32_t k = job->rank_node[r];
		uint64_t lo = ramc[r].lo;
		nvmc[r] = (struct ncut){ lo, end, 0, job->cap[k].nvme / on_node[k], lo != UINT64_MAX };
	}
	rc = nsel_cut(q, nvmc, T_NVME);
out:
	free(on_node);
	return rc;
}

/* The holders, sample by sample: nc->row, and per entry its rank and tier
 * (*ent) and the rank's first access of the sample (*keys). */
static int nopfs_holders(struct nsel *q, const struct ncut *ramc, const struct ncut *nvmc,
			 struct ncache *nc, struct nent **ent_out, uint64_t **keys_out)
{
	uint64_t capn = 1024;
	struct nent *ent = malloc(capn * sizeof(struct nent));
	uint64_t *keys = malloc(capn * sizeof(uint64_t));
	*ent_out = ent;
	*keys_out = keys;
	nc->row = malloc((q->n + 1) * sizeof(uint64_t));
	if (!nc->row || !ent || !keys)
		return -ENOMEM;
	uint64_t cur = 0;
	for (uint64_t s = 0; s < q->n; s++) {
		nc->row[s] = nc->nent;
		nsel_gather(q, (uint32_t)s, &cur);
		for (uint32_t i = 0; i < q->ntouched; i++) {
			uint32_t r = q->touched[i];
			uint64_t o = nsel_ord(q, r);
			uint8_t tier = o < ramc[r].lo ? PLAN_RAM : o < nvmc[r].lo ? PLAN_NVME : PLAN_NONE;
			if (tier == PLAN_NONE)
				continue;
			if (nc->nent == capn) {
				capn *= 2;
				struct nent *ne = realloc(ent, capn * sizeof(struct nent));
				uint64_t *nk = ne ? realloc(keys, capn * sizeof(uint64_t)) : NULL;
				if (ne)
					*ent_out = ent = ne;
				if (nk)
					*keys_out = keys = nk;
				if (!ne || !nk)
					return -ENOMEM;
			}
			ent[nc->nent] = (struct nent){ r, 0, tier };
			keys[nc->nent++] = q->first[r];
		}
	}
	nc->row[q->n] = nc->nent;
	return 0;
}

/* Offsets: index by first access in each (rank, tier) list. A group holds
 * at most E * PR samples (< 2^32, checked in nsel_init), so (first access
 * key << b | position in group) fits 64 bits. Frees *keys (so that the sort's
 * scratch does not add to the peak). */
static int nopfs_offsets(const struct nsel *q, const struct ncache *nc, struct nent *ent,
			 uint64_t **keys)
{
	const uint64_t G = 2ull * q->W;
	const unsigned b = bit_width(q->E * q->PR);
	uint64_t *gstart = calloc(G + 1, sizeof(uint64_t));
	uint64_t *gfill = calloc(G, sizeof(uint64_t));
	uint64_t *gkeys = malloc((nc->nent + 1) * sizeof(uint64_t));
	uint64_t *gidx = malloc((nc->nent + 1) * sizeof(uint64_t));
	int rc = -ENOMEM;
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
		gkeys[gstart[g] + pos] = (*keys)[i] << b | pos;
		gidx[gstart[g] + pos] = i;
	}
	free(*keys);
	*keys = malloc((gmax + 1) * sizeof(uint64_t)); /* radix scratch */
	if (!*keys)
		goto out;
	for (uint64_t g = 0; g < G; g++) {
		uint64_t *gk = &gkeys[gstart[g]];
		uint64_t m = gstart[g + 1] - gstart[g];
		radix_sort(gk, *keys, m, 2 * b);
		for (uint64_t p = 0; p < m; p++)
			ent[gidx[gstart[g] + (gk[p] & ((1ull << b) - 1))]].off = (uint32_t)p;
	}
	rc = 0;
out:
	free(gidx);
	free(gkeys);
	free(gfill);
	free(gstart);
	return rc;
}

/* The designated holder first in each row, then the rows' ranks and flags. */
static int nopfs_rows(struct ncache *nc, struct nent *ent, uint64_t n)
{
	for (uint64_t s = 0; s < n; s++) {
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
	nc->rank = malloc((nc->nent + 1) * sizeof(uint16_t));
	nc->flags = malloc(nc->nent + 1);
	if (!nc->rank || !nc->flags)
		return -ENOMEM;
	for (uint64_t i = 0; i < nc->nent; i++) {
		nc->rank[i] = (uint16_t)ent[i].rank;
		nc->flags[i] = ent[i].tier;
	}
	return 0;
}

/* The rank caches as NoPFS plans them; the holder a non-holder asks (NoPFS
 * DistributedManager: lowest storage class, then lowest offset in the
 * holder's prefetch list) first in each row. */
static int nopfs_caches(const struct plansim_job *job, struct ncache *nc)
{
	struct nsel q;
	memset(nc, 0, sizeof(*nc));
	int rc = nsel_init(&q, job);
	if (rc)
		return rc;
	struct ncut *ramc = NULL, *nvmc = NULL;
	struct nent *ent = NULL;
	uint64_t *keys = NULL;
	rc = nopfs_cuts(&q, &ramc, &nvmc);
	if (rc == 0)
		rc = nopfs_holders(&q, ramc, nvmc, nc, &ent, &keys);
	if (rc == 0)
		rc = nopfs_offsets(&q, nc, ent, &keys);
	free(keys);
	keys = NULL;
	if (rc == 0)
		rc = nopfs_rows(nc, ent, q.n);
	if (rc)
		ncache_free(nc);
	free(ent);
	free(nvmc);
	free(ramc);
	nsel_free(&q);
	return rc;
}

/* Epoch e of the replay against the rank caches nc. */
static void nopfs_epoch(struct plansim_replay *rp, struct ncache *nc, uint64_t e)
{
	enum { AHEAD = 32 };
	const struct plansim_job *job = rp->job;
	const struct plansim_walk *w = &rp->w;
	struct plansim_epoch *ep = plansim_replay_epoch(rp, e);
	for (uint64_t t = 0; t < w->nacc; t++) {
		if (t + AHEAD < w->nacc) {
			__builtin_prefetch(&nc->row[w->smp[t + AHEAD]]);
			__builtin_prefetch(&job->len[w->smp[t + AHEAD]]);
		}
		if (t + AHEAD / 2 < w->nacc) {
			uint64_t b = nc->row[w->smp[t + AHEAD / 2]];
			__builtin_prefetch(&nc->rank[b]);
			__builtin_prefetch(&nc->flags[b]);
		}
		uint32_t s = w->smp[t];
		uint32_t r = w->rank[t];
		uint32_t k = job->rank_node[r];
		uint64_t len = job->len[s];
		uint64_t b = nc->row[s], m = nc->row[s + 1] - b;
		const uint16_t *rk = &nc->rank[b];
		ep->demand += len;
		uint64_t own = 0;
		while (own < m && rk[own] != r)
			own++;
		/* the rank's own copy, else the designated holder's */
		uint64_t src = own < m ? own : 0;
		if (m && (nc->flags[b + src] & NF_FILLED)) {
			if (job->rank_node[rk[src]] != k)
				plansim_replay_peer(rp, ep, k, len);
			else if ((nc->flags[b + src] & NF_TIER) == PLAN_RAM)
				ep->ram += len;
			else
				ep->nvme += len;
			continue;
		}
		/* not cached where this rank looks: the PFS; a planned
		 * sample of its own cache is filled on the way */
		ep->pfs += len;
		if (own < m)
			nc->flags[b + own] |= NF_FILLED;
	}
	plansim_replay_close(rp, ep);
}

int plansim_nopfs(const struct plansim_job *job, struct plansim_result *out)
{
	struct plansim_replay rp;
	int rc = plansim_replay_init(&rp, job, PLANSIM_NOPFS, out);
	if (rc)
		return rc;
	struct ncache nc;
	if ((rc = nopfs_caches(job, &nc)) != 0)
		return plansim_replay_end(&rp, rc);
	for (uint64_t s = 0; s < job->sh->n; s++) {
		if (nc.row[s + 1] > nc.row[s])
			out->distinct += job->len[s];
		out->held += (nc.row[s + 1] - nc.row[s]) * job->len[s];
	}
	if (job->nopfs_fill == PLANSIM_FILL_PREFETCH) {
		for (uint64_t i = 0; i < nc.nent; i++)
			nc.flags[i] |= NF_FILLED;
		out->ep[0].pfs += out->held;
		out->ep[0].fill += out->held;
	}
	for (uint64_t e = 0; e < job->epochs; e++)
		nopfs_epoch(&rp, &nc, e);
	ncache_free(&nc);
	return plansim_replay_end(&rp, 0);
}
