/* cache.policy = nopfs: a model of NoPFS's per-rank placement, to measure
 * what node-wide planning (plan.h) gains over it.
 *
 * Each local trainer caches, in its own 1/nranks share of the node's RAM
 * cache, the samples its own stream reads most often over the job (ties:
 * first read first), filled on first read, never evicted, shared with
 * nobody. The list of a share ends at the first candidate that does not fit.
 *
 * Keys: share k holds keys [share[k].key0, share[k].key0 + share[k].n), one
 * per cached sample in sample order; off[key] is its offset in the RAM cache
 * (share k starts at k * share bytes). Pure computation, no threads. */
#ifndef SEER_PLAN_NOPFS_H
#define SEER_PLAN_NOPFS_H

#include <stdint.h>

#include "../catalog/catalog.h"
#include "../sampler/sampler.h"

#define PLAN_NOPFS_NONE UINT32_MAX

struct plan_nopfs_share {
	uint32_t *samples;    /* sorted */
	uint32_t n, key0;
};

struct plan_nopfs {
	struct plan_nopfs_share *share; /* nshares entries */
	uint32_t nshares;
	uint64_t *off;        /* per key: offset in the RAM cache */
	uint32_t nkeys;
	uint64_t share_bytes; /* each share's capacity */
	uint64_t bytes;       /* sample bytes placed (no alignment) */
};

/* Place the copies of ranks[0..nranks) over global batches [g0, g1) of the
 * job (numbered by tl, batches from the resume plan rs: sampler_elastic.h) in
 * a RAM cache of cache_cap bytes. 0, or -ENOMEM (np is then empty). */
struct sampler_resume;
struct sampler_timeline;
int plan_nopfs_build(struct plan_nopfs *np, const struct catalog *cat, struct sampler_cache *smp,
		     const struct sampler_shape *sh, const struct sampler_resume *rs,
		     const struct sampler_timeline *tl, const uint32_t *ranks, uint32_t nranks,
		     uint64_t g0, uint64_t g1, uint64_t cache_cap);
void plan_nopfs_free(struct plan_nopfs *np);

/* The key of sample s in share k, or PLAN_NOPFS_NONE. */
uint32_t plan_nopfs_key(const struct plan_nopfs *np, uint32_t k, uint32_t s);

#endif /* SEER_PLAN_NOPFS_H */
