/* sampler: epoch permutations and DistributedSampler sharding.
 *
 * The sharding checks compare against a literal transcription of what
 * torch.utils.data.DistributedSampler + BatchSampler do (ref_* below), not
 * against seer's own position arithmetic; sampler_vs_torch.py checks the
 * same against the real PyTorch. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "seer.h"
#include "../../src/sampler/sampler.h"


static uint32_t *perm(uint64_t seed, uint64_t epoch, uint64_t n)
{
	uint32_t *o = malloc(n * sizeof(*o) + 1);
	cr_assert_not_null(o);
	sampler_permute(seed, epoch, n, o);
	return o;
}

static void assert_permutation(const uint32_t *o, uint64_t n)
{
	uint8_t *seen = calloc(n + 1, 1);
	cr_assert_not_null(seen);
	for (uint64_t i = 0; i < n; i++) {
		cr_assert_lt(o[i], n, "order[%llu] = %u is not < n = %llu", (unsigned long long)i,
			     o[i], (unsigned long long)n);
		cr_assert_eq(seen[o[i]], 0, "sample %u appears twice", o[i]);
		seen[o[i]] = 1;
	}
	free(seen);
}

/* ---- the permutation ------------------------------------------------------ */

Test(sampler, permute_is_a_permutation)
{
	static const uint64_t sizes[] = { 1, 2, 3, 5, 10, 64, 1000, 4099, 65537 };
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
		for (uint64_t seed = 0; seed < 3; seed++)
			for (uint64_t e = 0; e < 4; e++) {
				uint32_t *o = perm(seed * 0x9e3779b9ull, e, sizes[k]);
				assert_permutation(o, sizes[k]);
				free(o);
			}
	/* extreme keys */
	uint32_t *o = perm(UINT64_MAX, UINT64_MAX, 257);
	assert_permutation(o, 257);
	free(o);
}

/* The algorithm is part of the job's contract: every node, and a resumed job,
 * must compute the very same order. A change here breaks resume across
 * versions, so it must be deliberate. */
Test(sampler, permute_golden_values)
{
	static const uint32_t want_42_0[16] = { 10, 13, 6, 7, 1, 2, 15, 12, 0, 5, 8, 3, 4, 14, 9, 11 };
	static const uint32_t want_42_7[16] = { 8, 6, 14, 12, 3, 11, 5, 15, 13, 10, 0, 4, 9, 2, 1, 7 };
	static const uint32_t want_0_0[10] = { 7, 3, 9, 5, 8, 4, 1, 2, 6, 0 };
	uint32_t o[16];
	sampler_permute(42, 0, 16, o);
	cr_assert_arr_eq(o, want_42_0, sizeof(want_42_0));
	sampler_permute(42, 7, 16, o);
	cr_assert_arr_eq(o, want_42_7, sizeof(want_42_7));
	sampler_permute(0, 0, 10, o);
	cr_assert_arr_eq(o, want_0_0, sizeof(want_0_0));
}

Test(sampler, permute_deterministic)
{
	const uint64_t n = 5000;
	for (uint64_t e = 0; e < 5; e++) {
		uint32_t *a = perm(1234, e, n), *b = perm(1234, e, n);
		cr_assert_arr_eq(a, b, n * sizeof(*a), "epoch %llu differs between two calls",
				 (unsigned long long)e);
		free(a);
		free(b);
	}
}

static bool same(const uint32_t *a, const uint32_t *b, uint64_t n)
{
	return memcmp(a, b, n * sizeof(*a)) == 0;
}

Test(sampler, epochs_and_seeds_differ)
{
	const uint64_t n = 1000;
	enum { E = 16 };
	uint32_t *o[E];
	for (int e = 0; e < E; e++) {
		o[e] = perm(7, (uint64_t)e, n);
		bool identity = true;
		for (uint64_t i = 0; i < n; i++)
			identity &= o[e][i] == i;
		cr_assert(!identity, "epoch %d is the identity", e);
	}
	for (int a = 0; a < E; a++)
		for (int b = a + 1; b < E; b++)
			cr_assert(!same(o[a], o[b], n), "epochs %d and %d give the same order", a, b);
	for (int e = 0; e < E; e++)
		free(o[e]);

	/* keys that a careless mix would confuse: seed+epoch, seed^epoch, swapped,
	 * high bits only */
	static const uint64_t pairs[][4] = {
		{ 1, 0, 0, 1 },          /* (seed 1, epoch 0) vs (seed 0, epoch 1) */
		{ 1, 2, 2, 1 },
		{ 3, 0, 1, 2 },          /* 3^0 == 1^2, 3+0 == 1+2 */
		{ 7, 0, 8, 0 },
		{ 0, 0, 1ull << 63, 0 },
		{ 0, 0, 0, 1ull << 32 },
		{ 0, 1ull << 63, 0, 0 },
	};
	for (size_t k = 0; k < sizeof(pairs) / sizeof(pairs[0]); k++) {
		uint32_t *a = perm(pairs[k][0], pairs[k][1], n);
		uint32_t *b = perm(pairs[k][2], pairs[k][3], n);
		cr_assert(!same(a, b, n), "(seed %llu, epoch %llu) and (seed %llu, epoch %llu) agree",
			  (unsigned long long)pairs[k][0], (unsigned long long)pairs[k][1],
			  (unsigned long long)pairs[k][2], (unsigned long long)pairs[k][3]);
		free(a);
		free(b);
	}
}

/* Fisher-Yates done right gives each of the n! orders with equal
 * probability; off-by-one variants (Sattolo's cycle, j in [0, i-1)) and
 * modulo-biased draws fail this. Fixed seed: the outcome is deterministic. */
Test(sampler, permute_uniform)
{
	enum { N = 4, NPERM = 24, EPOCHS = 48000 };
	static uint32_t count[NPERM];
	static uint32_t pos[N][N];
	for (uint64_t e = 0; e < EPOCHS; e++) {
		uint32_t o[N];
		sampler_permute(99, e, N, o);
		/* Lehmer code -> index in [0, 24) */
		unsigned idx = 0;
		for (int i = 0; i < N; i++) {
			unsigned smaller = 0;
			for (int j = i + 1; j < N; j++)
				smaller += o[j] < o[i];
			idx = idx * (unsigned)(N - i) + smaller;
		}
		count[idx]++;
		for (int i = 0; i < N; i++)
			pos[o[i]][i]++;
	}
	double chi = 0, expect = (double)EPOCHS / NPERM;
	for (int i = 0; i < NPERM; i++) {
		cr_assert_gt(count[i], 0, "order %d never drawn", i);
		chi += (count[i] - expect) * (count[i] - expect) / expect;
	}
	/* 23 degrees of freedom: P(chi2 > 70) < 1e-6 */
	cr_assert_lt(chi, 70.0, "permutation frequencies are not uniform (chi2 = %.1f)", chi);
	for (int s = 0; s < N; s++)
		for (int i = 0; i < N; i++) {
			double d = (double)pos[s][i] - (double)EPOCHS / N;
			cr_assert_lt(d * d, 25.0 * EPOCHS * (1.0 / N) * (1.0 - 1.0 / N), /* 5 sigma */
				     "sample %d lands at position %d %u times", s, i, pos[s][i]);
		}
}

/* ---- shapes: the PyTorch counts ----------------------------------------- */

struct shape_case {
	uint64_t n;
	uint32_t world, batch;
	bool drop;
	int rc;              /* of sampler_shape_init */
	uint64_t per_rank;   /* DistributedSampler.num_samples */
	uint64_t bpe;        /* len(BatchSampler) */
	uint32_t last_len;   /* samples in the last batch */
};

/* Expected values worked out by hand from the PyTorch formulas:
 * num_samples = ceil(n / W) when padding, floor(n / W) when dropping;
 * batches = ceil(num_samples / B) when padding, floor(...) when dropping. */
static struct shape_case shape_cases[] = {
	/* n not divisible by world nor by batch */
	{ 10, 3, 2, false, 0, 4, 2, 2 },
	{ 10, 3, 2, true, 0, 3, 1, 2 },
	{ 10, 3, 3, false, 0, 4, 2, 1 },
	{ 10, 3, 3, true, 0, 3, 1, 3 },
	{ 10, 3, 4, false, 0, 4, 1, 4 },
	{ 10, 3, 4, true, -ERANGE, 3, 0, 0 },
	/* fewer samples than trainers */
	{ 7, 8, 1, false, 0, 1, 1, 1 },
	{ 7, 8, 1, true, -ERANGE, 0, 0, 0 },
	{ 3, 8, 2, false, 0, 1, 1, 1 },
	{ 1, 4, 2, false, 0, 1, 1, 1 },
	/* n < world * batch */
	{ 5, 2, 3, false, 0, 3, 1, 3 },
	{ 5, 2, 3, true, -ERANGE, 2, 0, 0 },
	/* one trainer */
	{ 100, 1, 32, false, 0, 100, 4, 4 },
	{ 100, 1, 32, true, 0, 100, 3, 32 },
	{ 1, 1, 1, false, 0, 1, 1, 1 },
	{ 1, 1, 1, true, 0, 1, 1, 1 },
	{ 1, 1, 8, false, 0, 1, 1, 1 },
	/* everything divides */
	{ 96, 4, 8, false, 0, 24, 3, 8 },
	{ 96, 4, 8, true, 0, 24, 3, 8 },
	{ 13, 13, 1, false, 0, 1, 1, 1 },
	/* larger */
	{ 1000, 8, 32, false, 0, 125, 4, 29 },
	{ 1000, 8, 32, true, 0, 125, 3, 32 },
	{ 1001, 8, 5, false, 0, 126, 26, 1 },
	{ 1001, 8, 5, true, 0, 125, 25, 5 },
	{ 17, 16, 1, false, 0, 2, 2, 1 },
	{ 17, 16, 1, true, 0, 1, 1, 1 },
	{ 65537, 6, 64, false, 0, 10923, 171, 43 },
	{ 65537, 6, 64, true, 0, 10922, 170, 64 },
};

ParameterizedTestParameters(sampler, shape)
{
	return cr_make_param_array(struct shape_case, shape_cases,
				   sizeof(shape_cases) / sizeof(shape_cases[0]));
}

/* The reference: DistributedSampler.__iter__ then BatchSampler, transcribed.
 *   indices = order; if !drop_last: indices += (indices * ceil(pad / n))[:pad]
 *   else indices = indices[:total]; rank's = indices[rank:total:W]
 * Returns the rank's sample list (num_samples entries). */
static uint32_t *ref_rank_samples(const struct shape_case *c, const uint32_t *order,
				  uint32_t rank)
{
	uint64_t total = c->per_rank * c->world;
	uint32_t *indices = malloc((total + c->n) * sizeof(*indices));
	cr_assert_not_null(indices);
	memcpy(indices, order, c->n * sizeof(*indices));
	uint64_t len = c->n;
	if (!c->drop) {
		uint64_t pad = total - c->n;
		uint64_t reps = (pad + c->n - 1) / c->n;
		/* (indices * reps)[:pad] */
		for (uint64_t k = 0; k < reps * c->n && k < pad; k++)
			indices[len++] = order[k % c->n];
	} else {
		len = total;
	}
	cr_assert_eq(len, total);
	uint32_t *mine = malloc(c->per_rank * sizeof(*mine) + 1);
	cr_assert_not_null(mine);
	uint64_t m = 0;
	for (uint64_t i = rank; i < total; i += c->world)
		mine[m++] = indices[i];
	cr_assert_eq(m, c->per_rank);
	free(indices);
	return mine;
}

ParameterizedTest(struct shape_case *c, sampler, shape)
{
	struct sampler_shape sh;
	int rc = sampler_shape_init(&sh, c->n, 5, c->world, c->batch, c->drop, true);
	cr_assert_eq(rc, c->rc, "n=%llu W=%u B=%u drop=%d: rc %d, want %d",
		     (unsigned long long)c->n, c->world, c->batch, c->drop, rc, c->rc);
	if (rc != 0)
		return;
	cr_assert_eq(sh.bpe, c->bpe, "n=%llu W=%u B=%u drop=%d: %llu batches, want %llu",
		     (unsigned long long)c->n, c->world, c->batch, c->drop,
		     (unsigned long long)sh.bpe, (unsigned long long)c->bpe);
	for (uint64_t b = 0; b < sh.bpe; b++)
		cr_assert_eq(sampler_batch_len(&sh, b), b + 1 < sh.bpe ? c->batch : c->last_len,
			     "batch %llu length", (unsigned long long)b);
}

/* Every rank's batches, two epochs, against the reference; and the coverage
 * rules: without padding each sample at most once, with n % W == 0 (and full
 * batches) exactly once, with padding the extra ones are the wrap-around of
 * the order's start. */
ParameterizedTestParameters(sampler, shards_match_distributed_sampler)
{
	return cr_make_param_array(struct shape_case, shape_cases,
				   sizeof(shape_cases) / sizeof(shape_cases[0]));
}

ParameterizedTest(struct shape_case *c, sampler, shards_match_distributed_sampler)
{
	if (c->rc != 0)
		return;
	struct sampler_shape sh;
	cr_assert_eq(sampler_shape_init(&sh, c->n, 11, c->world, c->batch, c->drop, true), 0);
	struct sampler_cache cache;
	cr_assert_eq(sampler_cache_init(&cache, &sh), 0);
	uint32_t *ids = malloc(c->batch * sizeof(*ids));
	uint32_t *cnt = calloc(c->n, sizeof(*cnt));
	cr_assert(ids && cnt);
	for (uint64_t epoch = 0; epoch < 2; epoch++) {
		uint32_t *order = perm(11, epoch, c->n);
		memset(cnt, 0, c->n * sizeof(*cnt));
		uint64_t delivered = 0;
		for (uint32_t r = 0; r < c->world; r++) {
			uint32_t *mine = ref_rank_samples(c, order, r);
			uint64_t k = 0;
			for (uint64_t b = 0; b < c->bpe; b++) {
				int len = sampler_batch(&cache, epoch, r, b, ids);
				uint32_t want = b + 1 < c->bpe ? c->batch : c->last_len;
				cr_assert_eq(len, (int)want, "rank %u batch %llu: %d samples, want %u",
					     r, (unsigned long long)b, len, want);
				for (int i = 0; i < len; i++, k++) {
					cr_assert_eq(ids[i], mine[k],
						     "epoch %llu rank %u batch %llu [%d]: %u, want %u",
						     (unsigned long long)epoch, r,
						     (unsigned long long)b, i, ids[i], mine[k]);
					cnt[ids[i]]++;
					delivered++;
				}
			}
			/* every rank has exactly bpe batches */
			cr_assert_eq(sampler_batch(&cache, epoch, r, c->bpe, ids), -ERANGE);
			/* the part BatchSampler(drop_last) drops is never delivered */
			cr_assert_eq(k, c->drop ? c->bpe * c->batch : c->per_rank);
			free(mine);
		}
		uint64_t pad = c->drop ? 0 : c->per_rank * c->world - c->n;
		cr_assert_eq(delivered, c->drop ? (uint64_t)c->world * c->bpe * c->batch
					       : c->n + pad);
		if (c->drop) {
			for (uint64_t s = 0; s < c->n; s++)
				cr_assert_leq(cnt[s], 1, "sample %llu delivered %u times",
					      (unsigned long long)s, cnt[s]);
			if (c->n % c->world == 0 && (c->n / c->world) % c->batch == 0)
				for (uint64_t s = 0; s < c->n; s++)
					cr_assert_eq(cnt[s], 1, "sample %llu delivered %u times",
						     (unsigned long long)s, cnt[s]);
		} else {
			/* order[i] appears once, plus once per padding slot j < pad
			 * with j % n == i (the wrap-around of the order's start) */
			for (uint64_t i = 0; i < c->n; i++) {
				uint32_t want = 1;
				for (uint64_t j = i; j < pad; j += c->n)
					want++;
				cr_assert_eq(cnt[order[i]], want,
					     "order[%llu] = %u delivered %u times, want %u",
					     (unsigned long long)i, order[i], cnt[order[i]], want);
			}
			if (c->n % c->world == 0)
				cr_assert_eq(pad, 0);
		}
		free(order);
	}
	free(ids);
	free(cnt);
	sampler_cache_free(&cache);
}

/* The public wrapper returns exactly what sampler_batch computes, both orders. */
ParameterizedTestParameters(sampler, public_api_matches_sampler_batch)
{
	return cr_make_param_array(struct shape_case, shape_cases,
				   sizeof(shape_cases) / sizeof(shape_cases[0]));
}

ParameterizedTest(struct shape_case *c, sampler, public_api_matches_sampler_batch)
{
	for (int shuffle = 0; shuffle < 2; shuffle++) {
		unsigned flags = (c->drop ? SEER_SAMPLER_DROP_LAST : 0) |
				 (shuffle ? 0 : SEER_SAMPLER_NO_SHUFFLE);
		seer_sampler_t *s = seer_sampler_new(c->n, 77, c->world, c->batch, flags);
		if (c->rc != 0) {
			cr_assert_null(s);
			cr_assert(strstr(seer_errmsg(), "no full batch") != NULL, "errmsg: %s",
				  seer_errmsg());
			return;
		}
		cr_assert_not_null(s, "%s", seer_errmsg());
		cr_assert_eq(seer_sampler_batches_per_epoch(s), c->bpe);
		struct sampler_shape sh;
		cr_assert_eq(sampler_shape_init(&sh, c->n, 77, c->world, c->batch, c->drop, shuffle), 0);
		struct sampler_cache cache;
		cr_assert_eq(sampler_cache_init(&cache, &sh), 0);
		uint64_t *got = malloc(c->batch * sizeof(*got));
		uint32_t *want = malloc(c->batch * sizeof(*want));
		cr_assert(got && want);
		for (uint64_t epoch = 0; epoch < 3; epoch++)
			for (uint32_t r = 0; r < c->world; r++)
				for (uint64_t b = 0; b < c->bpe; b++) {
					int n1 = seer_sampler_batch(s, epoch, r, b, got);
					int n2 = sampler_batch(&cache, epoch, r, b, want);
					cr_assert_eq(n1, n2);
					cr_assert_gt(n1, 0);
					for (int i = 0; i < n1; i++)
						cr_assert_eq(got[i], (uint64_t)want[i]);
				}
		free(got);
		free(want);
		sampler_cache_free(&cache);
		seer_sampler_free(s);
	}
}

/* ---- edges ------------------------------------------------------------- */

Test(sampler, out_of_range_rank_and_step)
{
	seer_sampler_t *s = seer_sampler_new(100, 1, 4, 8, 0);
	cr_assert_not_null(s);
	uint64_t bpe = seer_sampler_batches_per_epoch(s);
	cr_assert_eq(bpe, 4); /* 25 per rank, batches of 8: 8 8 8 1 */
	uint64_t ids[8];
	memset(ids, 0xab, sizeof(ids));
	cr_assert_eq(seer_sampler_batch(s, 0, 3, bpe - 1, ids), 1);
	cr_assert_eq(seer_sampler_batch(s, 0, 4, 0, ids), -ERANGE);
	cr_assert_eq(seer_sampler_batch(s, 0, UINT32_MAX, 0, ids), -ERANGE);
	cr_assert_eq(seer_sampler_batch(s, 0, 0, bpe, ids), -ERANGE);
	cr_assert_eq(seer_sampler_batch(s, 0, 0, UINT64_MAX, ids), -ERANGE);
	seer_sampler_free(s);

	struct sampler_shape sh;
	cr_assert_eq(sampler_shape_init(&sh, 100, 1, 4, 8, false, true), 0);
	struct sampler_cache c;
	cr_assert_eq(sampler_cache_init(&c, &sh), 0);
	uint32_t ids32[8];
	cr_assert_eq(sampler_batch(&c, 0, 4, 0, ids32), -ERANGE);
	cr_assert_eq(sampler_batch(&c, 0, 0, 4, ids32), -ERANGE);
	sampler_cache_free(&c);
	seer_sampler_free(NULL); /* allowed */
}

Test(sampler, invalid_shapes)
{
	struct sampler_shape sh;
	cr_assert_eq(sampler_shape_init(&sh, 0, 1, 1, 1, false, true), -EINVAL);
	cr_assert_eq(sampler_shape_init(&sh, 10, 1, 0, 1, false, true), -EINVAL);
	cr_assert_eq(sampler_shape_init(&sh, 10, 1, 1, 0, false, true), -EINVAL);
	cr_assert_eq(sampler_shape_init(&sh, 1ull << 32, 1, 1, 1, false, true), -EINVAL);
	cr_assert_eq(sampler_shape_init(&sh, UINT32_MAX, 1, 1, 1, false, true), 0);
	cr_assert_eq(sh.bpe, UINT32_MAX);
	cr_assert_null(seer_sampler_new(0, 1, 1, 1, 0));
	cr_assert(strlen(seer_errmsg()) > 0);
	cr_assert_null(seer_sampler_new(10, 1, 0, 1, 0));
	cr_assert_null(seer_sampler_new(10, 1, 1, 0, 0));
}

Test(sampler, no_shuffle_is_identity)
{
	const uint64_t n = 37;
	seer_sampler_t *s = seer_sampler_new(n, 123, 1, (uint32_t)n, SEER_SAMPLER_NO_SHUFFLE);
	cr_assert_not_null(s);
	uint64_t ids[37];
	for (uint64_t epoch = 0; epoch < 3; epoch++) {
		cr_assert_eq(seer_sampler_batch(s, epoch * 1000, 0, 0, ids), (int)n);
		for (uint64_t i = 0; i < n; i++)
			cr_assert_eq(ids[i], i, "epoch %llu: ids[%llu] = %llu",
				     (unsigned long long)epoch, (unsigned long long)i,
				     (unsigned long long)ids[i]);
	}
	seer_sampler_free(s);

	/* three ranks: rank r gets r, r + 3, ... then the wrap-around */
	s = seer_sampler_new(10, 123, 3, 4, SEER_SAMPLER_NO_SHUFFLE);
	cr_assert_not_null(s);
	static const uint64_t want[3][4] = { { 0, 3, 6, 9 }, { 1, 4, 7, 0 }, { 2, 5, 8, 1 } };
	for (uint32_t r = 0; r < 3; r++) {
		cr_assert_eq(seer_sampler_batch(s, 0, r, 0, ids), 4);
		cr_assert_arr_eq(ids, want[r], sizeof(want[r]), "rank %u", r);
	}
	seer_sampler_free(s);

	/* and the shuffled sampler is not the identity */
	s = seer_sampler_new(n, 123, 1, (uint32_t)n, 0);
	cr_assert_not_null(s);
	cr_assert_eq(seer_sampler_batch(s, 0, 0, 0, ids), (int)n);
	bool identity = true;
	for (uint64_t i = 0; i < n; i++)
		identity &= ids[i] == i;
	cr_assert(!identity);
	seer_sampler_free(s);
}

/* The permutation cache returns the right epoch whatever the access pattern
 * (hits, misses, evictions), including the largest epoch number. */
Test(sampler, cache_any_access_pattern)
{
	const uint64_t n = 333;
	struct sampler_shape sh;
	cr_assert_eq(sampler_shape_init(&sh, n, 4242, 2, 16, false, true), 0);
	struct sampler_cache c;
	cr_assert_eq(sampler_cache_init(&c, &sh), 0);
	uint32_t *want = malloc(n * sizeof(*want));
	cr_assert_not_null(want);
	/* first request of a fresh cache: the largest epoch */
	static const uint64_t first[] = { UINT64_MAX, 0, UINT64_MAX - 1, UINT64_MAX };
	for (size_t k = 0; k < sizeof(first) / sizeof(first[0]); k++) {
		const uint32_t *got = sampler_cache_epoch(&c, first[k]);
		cr_assert_not_null(got);
		sampler_permute(4242, first[k], n, want);
		cr_assert_arr_eq(got, want, n * sizeof(*want), "epoch %llu",
				 (unsigned long long)first[k]);
	}
	uint64_t x = 0x1234567;
	for (int k = 0; k < 300; k++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		uint64_t e = (x >> 33) % 6;
		const uint32_t *got = sampler_cache_epoch(&c, e);
		cr_assert_not_null(got);
		sampler_permute(4242, e, n, want);
		cr_assert_arr_eq(got, want, n * sizeof(*want), "request %d: epoch %llu", k,
				 (unsigned long long)e);
	}
	free(want);
	sampler_cache_free(&c);
}

Test(sampler, public_api_largest_epoch)
{
	seer_sampler_t *s = seer_sampler_new(50, 9, 1, 50, 0);
	cr_assert_not_null(s);
	uint64_t ids[50];
	uint32_t want[50];
	cr_assert_eq(seer_sampler_batch(s, UINT64_MAX, 0, 0, ids), 50);
	sampler_permute(9, UINT64_MAX, 50, want);
	for (int i = 0; i < 50; i++)
		cr_assert_eq(ids[i], want[i], "ids[%d] = %llu, want %u", i,
			     (unsigned long long)ids[i], want[i]);
	seer_sampler_free(s);
}

/* A resumed trainer computes batch (e, r, b) on its own: it must equal what a
 * sampler that walked every batch before it returned. */
Test(sampler, resume_is_exact)
{
	seer_sampler_t *walk = seer_sampler_new(1000, 5, 4, 7, 0);
	cr_assert_not_null(walk);
	uint64_t bpe = seer_sampler_batches_per_epoch(walk);
	uint64_t a[7], b[7];
	for (uint64_t e = 0; e < 3; e++)
		for (uint64_t st = 0; st < bpe; st++) {
			int n1 = seer_sampler_batch(walk, e, 2, st, a);
			seer_sampler_t *fresh = seer_sampler_new(1000, 5, 4, 7, 0);
			int n2 = seer_sampler_batch(fresh, e, 2, st, b);
			cr_assert_eq(n1, n2);
			cr_assert_arr_eq(a, b, (size_t)n1 * sizeof(a[0]));
			seer_sampler_free(fresh);
		}
	seer_sampler_free(walk);
}
