/* sampler_timeline and sampler_plan_batch: a resumed job's batches numbered through
 * the job (how seerd and libseer agree on global batch numbers when one
 * epoch, re-sharded by an elastic resume, has its own batch count), and the
 * batch a plan serves at each (epoch, rank, step).
 *
 * Checked against the public sampler (seer_sampler_resume: the contract a
 * trainer can compute anywhere) and against counting: the numbering is a
 * bijection between [0, end) and every (epoch, step) of the job in order. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "seer.h"
#include "../../src/sampler/sampler.h"
#include "../../src/sampler/sampler_elastic.h"
#include "../../src/sampler/sampler_record.h"

#define SEED 77
#define HASH 0xabcdefull
#define EPOCHS 6

/* A plan resuming `job` (world w2) from epoch `e`, every one of `w` ranks
 * having consumed `c` batches (c == 0: a fresh job, rec NULL). */
static void plan(struct sampler_resume *p, uint64_t n, uint32_t w, uint32_t w2, uint32_t b,
		 bool drop, uint64_t e, uint64_t c)
{
	struct sampler_job job = { .n = n, .seed = SEED, .dataset_hash = HASH, .world = w, .batch = b,
			       .drop_last = drop, .shuffle = true };
	struct sampler_record r;
	sampler_record_init(&r, &job, e, SMP_REC_ALL);
	cr_assert_eq(sampler_record_push(&r, w, 1, &c), 0);
	job.world = w2;
	cr_assert_eq(sampler_resume_init(p, &job, c ? &r : NULL), 0);
	sampler_record_free(&r);
}

/* g runs through every (epoch, step) of the job once, in order. */
static void check_numbering(const struct sampler_timeline *tl)
{
	uint64_t g = 0;
	for (uint64_t e = 0; e < tl->epochs; e++) {
		for (uint64_t s = 0; s < sampler_tl_batches(tl, e); s++, g++) {
			cr_assert_eq(sampler_tl_g(tl, e, s), g, "epoch %llu step %llu",
				     (unsigned long long)e, (unsigned long long)s);
			uint64_t e2, s2;
			sampler_tl_pos(tl, g, &e2, &s2);
			cr_assert(e2 == e && s2 == s, "g %llu -> %llu:%llu, want %llu:%llu",
				  (unsigned long long)g, (unsigned long long)e2,
				  (unsigned long long)s2, (unsigned long long)e,
				  (unsigned long long)s);
		}
	}
	cr_assert_eq(sampler_tl_end(tl), g);
	uint64_t e, s;
	sampler_tl_pos(tl, g, &e, &s);
	cr_assert(e == tl->epochs && s == 0, "the end maps to %llu:%llu", (unsigned long long)e,
		  (unsigned long long)s);
}

Test(timeline, fresh_job_is_epoch_times_bpe)
{
	struct sampler_timeline tl;
	sampler_timeline_init(&tl, 7, EPOCHS, NULL);
	for (uint64_t g = 0; g < 7 * EPOCHS; g++) {
		uint64_t e, s;
		sampler_tl_pos(&tl, g, &e, &s);
		cr_assert(e == g / 7 && s == g % 7);
	}
	check_numbering(&tl);
}

/* Fewer, more and as many batches in the re-sharded epoch as in a plain one;
 * the resumed epoch first, in the middle, last. */
Test(timeline, resharded_epoch_has_its_own_count)
{
	static const struct { uint32_t w, w2; uint64_t c, e; } cases[] = {
		{ 4, 2, 5, 0 }, { 4, 2, 1, 3 }, { 2, 3, 7, 2 }, { 3, 4, 2, EPOCHS - 1 },
		{ 4, 1, 3, 1 }, { 1, 8, 20, 4 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct sampler_resume p;
		plan(&p, 101, cases[i].w, cases[i].w2, 3, false, cases[i].e, cases[i].c);
		cr_assert(p.elastic, "case %zu re-shards", i);
		struct sampler_shape sh;
		cr_assert_eq(sampler_shape_init(&sh, 101, SEED, cases[i].w2, 3, false, true), 0);
		struct sampler_timeline tl;
		sampler_timeline_init(&tl, sh.bpe, EPOCHS, &p);
		cr_assert_eq(sampler_tl_batches(&tl, p.epoch), p.rsh.bpe);
		cr_assert_eq(sampler_tl_batches(&tl, p.epoch + 1), sh.bpe);
		check_numbering(&tl);
		sampler_resume_free(&p);
	}
}

/* sampler_plan_batch serves what a trainer's sampler resumed from the same record
 * says, epoch by epoch, and sampler_plan_batch_len its length. */
Test(timeline, plan_batch_is_the_samplers)
{
	static const struct { uint32_t w, w2; uint64_t c; bool drop; } cases[] = {
		{ 4, 2, 5, false }, { 2, 3, 7, false }, { 3, 4, 2, true }, { 4, 4, 0, false },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const uint64_t n = 101, e0 = 2;
		const uint32_t b = 3;
		struct sampler_resume p;
		plan(&p, n, cases[i].w, cases[i].w2, b, cases[i].drop, e0, cases[i].c);
		struct sampler_shape sh;
		cr_assert_eq(sampler_shape_init(&sh, n, SEED, cases[i].w2, b, cases[i].drop, true), 0);
		struct sampler_cache cache;
		cr_assert_eq(sampler_cache_init(&cache, &sh), 0);
		struct sampler_timeline tl;
		sampler_timeline_init(&tl, sh.bpe, EPOCHS, &p);
		/* the public side: a record of the same position, and a sampler */
		seer_record_t *rec = NULL;
		if (cases[i].c) {
			seer_sampler_t *old;
			unsigned f = cases[i].drop ? SEER_SAMPLER_DROP_LAST : 0;
			cr_assert_eq(seer_sampler_resume(n, SEED, cases[i].w, b, f, HASH, NULL, &old), 0);
			cr_assert_eq(seer_sampler_record(old, SEER_RECORD_ALL_RANKS, e0, cases[i].c,
							 &rec), 0);
			seer_sampler_free(old);
		}
		seer_sampler_t *s;
		cr_assert_eq(seer_sampler_resume(n, SEED, cases[i].w2, b,
						 cases[i].drop ? SEER_SAMPLER_DROP_LAST : 0, HASH, rec,
						 &s), 0);
		uint32_t ids[16];
		uint64_t want[16];
		for (uint64_t g = sampler_tl_g(&tl, p.epoch, p.step); g < sampler_tl_end(&tl); g++) {
			uint64_t e, st;
			sampler_tl_pos(&tl, g, &e, &st);
			for (uint32_t r = 0; r < cases[i].w2; r++) {
				int k = sampler_plan_batch(&cache, &p, e, r, st, ids);
				int k2 = seer_sampler_batch(s, e, r, st, want);
				cr_assert(k > 0 && k == k2, "case %zu %llu:%llu rank %u: %d vs %d", i,
					  (unsigned long long)e, (unsigned long long)st, r, k, k2);
				cr_assert_eq((uint32_t)k, sampler_plan_batch_len(&sh, &p, e, st));
				for (int j = 0; j < k; j++)
					cr_assert_eq(ids[j], want[j]);
			}
		}
		seer_record_free(rec);
		seer_sampler_free(s);
		sampler_cache_free(&cache);
		sampler_resume_free(&p);
	}
}
