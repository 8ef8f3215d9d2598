/* The NoPFS-like placement (see plan_nopfs.h). Pure computation on the
 * caller's thread; out of memory returns -ENOMEM with nothing allocated. */
#include "plan_nopfs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "../sampler/sampler_elastic.h"
#include "../util/util.h"

struct cand {
	uint32_t sample, count, first;
};

static int cmp_cand(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	return x->first < y->first ? -1 : x->first > y->first;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

struct scratch {
	uint32_t *count, *first, *ids;
	struct cand *cand;
};

/* The samples `rank` reads in [g0, g1), most read first, into x->cand;
 * returns how many, or -ENOMEM. */
static int64_t rank_candidates(struct scratch *x, const struct catalog *cat, struct sampler_cache *smp,
			       const struct sampler_resume *rs, const struct sampler_timeline *tl,
			       uint32_t rank, uint64_t g0, uint64_t g1)
{
	memset(x->count, 0, cat->nsamples * sizeof(uint32_t));
	uint32_t pos = 0, ncand = 0;
	for (uint64_t g = g0; g < g1; g++) {
		uint64_t epoch, step;
		sampler_tl_pos(tl, g, &epoch, &step);
		int m = sampler_plan_batch(smp, rs, epoch, rank, step, x->ids);
		if (m < 0)
			return m;
		for (int i = 0; i < m; i++) {
			if (x->count[x->ids[i]]++ == 0) {
				x->first[x->ids[i]] = pos++;
				x->cand[ncand++].sample = x->ids[i];
			}
		}
	}
	for (uint32_t i = 0; i < ncand; i++) {
		x->cand[i].count = x->count[x->cand[i].sample];
		x->cand[i].first = x->first[x->cand[i].sample];
	}
	qsort(x->cand, ncand, sizeof(*x->cand), cmp_cand);
	return ncand;
}

/* Share k: the leading candidates that fit, keyed from np->nkeys on. */
static int take_share(struct plan_nopfs *np, uint32_t k, const struct catalog *cat,
		      const struct cand *cand, uint32_t ncand, uint64_t *cap_keys)
{
	uint64_t used = 0;
	uint32_t take = 0;
	while (take < ncand) {
		uint64_t a = ALIGN_UP(cat->samples[cand[take].sample].length, (uint64_t)PLAN_RAM_ALIGN);
		if (np->share_bytes - used < a)
			break; /* the first that does not fit ends the list */
		used += a;
		take++;
	}
	struct plan_nopfs_share *sh = &np->share[k];
	sh->n = take;
	sh->key0 = np->nkeys;
	sh->samples = calloc(MAX(take, 1u), sizeof(uint32_t));
	if (!sh->samples)
		return -ENOMEM;
	for (uint32_t i = 0; i < take; i++)
		sh->samples[i] = cand[i].sample;
	qsort(sh->samples, take, sizeof(uint32_t), cmp_u32);
	if (np->nkeys + (uint64_t)take > *cap_keys) {
		uint64_t cap = MAX(*cap_keys * 2, np->nkeys + (uint64_t)take);
		uint64_t *off = realloc(np->off, cap * sizeof(uint64_t));
		if (!off)
			return -ENOMEM;
		np->off = off;
		*cap_keys = cap;
	}
	uint64_t off = np->share_bytes * k;
	for (uint32_t i = 0; i < take; i++) {
		uint64_t len = cat->samples[sh->samples[i]].length;
		np->off[np->nkeys + i] = off;
		off += ALIGN_UP(len, (uint64_t)PLAN_RAM_ALIGN);
		np->bytes += len;
	}
	np->nkeys += take;
	return 0;
}

int plan_nopfs_build(struct plan_nopfs *np, const struct catalog *cat, struct sampler_cache *smp,
		     const struct sampler_shape *sh, const struct sampler_resume *rs,
		     const struct sampler_timeline *tl, const uint32_t *ranks, uint32_t nranks,
		     uint64_t g0, uint64_t g1, uint64_t cache_cap)
{
	memset(np, 0, sizeof(*np));
	uint64_t n = cat->nsamples;
	struct scratch x = {
		.count = calloc(n, sizeof(uint32_t)), .first = calloc(n, sizeof(uint32_t)),
		.ids = calloc(sh->batch, sizeof(uint32_t)), .cand = calloc(n, sizeof(struct cand)),
	};
	np->nshares = MAX(nranks, 1u);
	np->share = calloc(np->nshares, sizeof(*np->share));
	np->share_bytes = (cache_cap / np->nshares) & ~(uint64_t)(PLAN_RAM_ALIGN - 1);
	int rc = x.count && x.first && x.ids && x.cand && np->share ? 0 : -ENOMEM;
	uint64_t cap_keys = 0;
	for (uint32_t k = 0; k < nranks && rc == 0; k++) {
		int64_t ncand = rank_candidates(&x, cat, smp, rs, tl, ranks[k], g0, g1);
		rc = ncand < 0 ? (int)ncand : take_share(np, k, cat, x.cand, (uint32_t)ncand, &cap_keys);
	}
	free(x.count);
	free(x.first);
	free(x.ids);
	free(x.cand);
	if (rc != 0)
		plan_nopfs_free(np);
	return rc;
}

void plan_nopfs_free(struct plan_nopfs *np)
{
	for (uint32_t k = 0; np->share && k < np->nshares; k++)
		free(np->share[k].samples);
	free(np->share);
	free(np->off);
	memset(np, 0, sizeof(*np));
}

uint32_t plan_nopfs_key(const struct plan_nopfs *np, uint32_t k, uint32_t s)
{
	const struct plan_nopfs_share *sh = &np->share[k];
	uint32_t lo = 0, hi = sh->n;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (sh->samples[mid] < s)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < sh->n && sh->samples[lo] == s ? sh->key0 + lo : PLAN_NOPFS_NONE;
}
