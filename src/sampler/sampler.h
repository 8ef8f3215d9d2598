/* The access sequence: which sample trainer `rank` reads at each step.
 *
 * Epoch order: a Fisher-Yates shuffle of [0, n) driven by a counter-based
 * generator keyed by (seed, epoch); no state carries from epoch to epoch, so
 * any epoch can be computed on its own, identically on every node.
 *
 * Sharding follows torch.utils.data.DistributedSampler: the epoch order is
 * padded by wrapping around (drop_last false) or cut (drop_last true) to a
 * multiple of `world`; rank r takes positions r, r + world, ...; its samples
 * are then cut into batches of `batch` (the last one partial unless
 * drop_last). Every rank has the same number of batches.
 *
 * Sample ids are < 2^32 (the catalog enforces it). */
#ifndef SEER_SAMPLER_H
#define SEER_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

/* Writes the permutation of epoch `epoch` into out[0..n). */
void sampler_permute(uint64_t seed, uint64_t epoch, uint64_t n, uint32_t *out);

struct sampler_shape {
	uint64_t n;          /* samples in the dataset */
	uint64_t seed;
	uint32_t world;      /* trainers */
	uint32_t batch;      /* samples per batch per trainer */
	bool drop_last;
	bool shuffle;
	uint64_t per_rank;   /* samples per rank per epoch */
	uint64_t bpe;        /* batches per rank per epoch */
};

/* Fills the derived fields; -EINVAL when an argument is zero or the ids do
 * not fit 32 bits, -ERANGE when no rank would get a single batch. */
int sampler_shape_init(struct sampler_shape *sh, uint64_t n, uint64_t seed, uint32_t world,
		   uint32_t batch, bool drop_last, bool shuffle);

/* Writes epoch `epoch`'s order into out[0..sh->n): the permutation, or the
 * identity without shuffle. */
void sampler_epoch_order(const struct sampler_shape *sh, uint64_t epoch, uint32_t *out);

/* Samples in batch `step` (< bpe). */
static inline uint32_t sampler_batch_len(const struct sampler_shape *sh, uint64_t step)
{
	uint64_t first = step * sh->batch;
	uint64_t left = sh->per_rank - first;
	return (uint32_t)(left < sh->batch ? left : sh->batch);
}

/* Position in the padded epoch order of sample i of batch `step` of `rank`. */
static inline uint64_t sampler_position(const struct sampler_shape *sh, uint32_t rank, uint64_t step,
				    uint32_t i)
{
	return (uint64_t)rank + (uint64_t)sh->world * (step * sh->batch + i);
}

/* A small cache of epoch permutations, so a consumer walking two epochs at
 * once (the end of one, the start of the next) does not recompute them.
 * Not thread-safe. */
#define SMP_CACHE_WAYS 3
struct sampler_cache {
	struct sampler_shape sh;
	uint32_t *perm[SMP_CACHE_WAYS];
	uint64_t epoch[SMP_CACHE_WAYS];
	uint64_t used[SMP_CACHE_WAYS];
	uint64_t tick;
};

/* 0 or -ENOMEM. */
int sampler_cache_init(struct sampler_cache *c, const struct sampler_shape *sh);
void sampler_cache_free(struct sampler_cache *c);
/* The epoch's order (n entries), or NULL on out of memory. Valid until the
 * next call that asks for an epoch not cached. */
const uint32_t *sampler_cache_epoch(struct sampler_cache *c, uint64_t epoch);

/* Sample id at padded position `pos` of an epoch order. */
static inline uint32_t sampler_at(const struct sampler_shape *sh, const uint32_t *order, uint64_t pos)
{
	return order[pos % sh->n];
}

/* Fills ids with batch `step` of `rank` in `epoch`; returns its length, or
 * -ERANGE / -ENOMEM. */
int sampler_batch(struct sampler_cache *c, uint64_t epoch, uint32_t rank, uint64_t step, uint32_t *ids);

#endif /* SEER_SAMPLER_H */
