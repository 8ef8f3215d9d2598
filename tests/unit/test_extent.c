/* The extent planner (src/plan/extent_plan.c) without a daemon: which samples join an
 * extent (a wanted run, gaps bridged or not), the longest extent, the
 * amplification bound (also on random files: every plan within both bounds,
 * only wanted samples, none wanted left out inside its range), overlapping
 * ranges (npz members read whole) and a trigger too long for an extent;
 * and the first-fit ranges of the extent region (src/util/spans.c). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/plan/extent_plan.h"
#include "../../src/util/spans.h"
#include "../../src/util/util.h"

#define N 4096

static struct extent_cand c[N];
static bool take[N];

/* n records of `len` bytes back to back, each preceded by `hdr` bytes of
 * framing (TFRecord-like); all wanted unless said otherwise. */
static void records(uint32_t n, uint64_t len, uint64_t hdr)
{
	for (uint32_t i = 0; i < n; i++)
		c[i] = (struct extent_cand){ .lo = i * (len + hdr), .hi = (i + 1) * (len + hdr),
					  .useful = len, .want = true };
}

static const struct extent_opts opts = { .max_bytes = 8u << 20, .max_amp = 1.25,
				      .gap_max = 1u << 20 };

static uint32_t count_taken(uint32_t n)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < n; i++)
		k += take[i];
	return k;
}

Test(extent, a_wanted_run_is_one_extent)
{
	records(960, 2500, 16);
	struct extent_plan p = extent_plan(c, 960, 500, &opts, take);
	cr_assert_eq(p.taken, 960, "every record of the file joins: %u", p.taken);
	cr_assert_eq(count_taken(960), 960);
	cr_assert_eq(p.lo, 0);
	cr_assert_eq(p.hi, 960ull * 2516);
	cr_assert_eq(p.useful, 960ull * 2500);
	cr_assert_eq(p.first, 0);
	cr_assert_eq(p.last, 959);
}

Test(extent, never_longer_than_max_bytes)
{
	records(4096, 4096, 0); /* 16 MiB of wanted samples */
	struct extent_opts o = opts;
	o.max_bytes = 1u << 20;
	struct extent_plan p = extent_plan(c, 4096, 2000, &o, take);
	cr_assert_leq(p.hi - p.lo, o.max_bytes);
	cr_assert_eq(p.taken, 256, "1 MiB of 4 KiB samples: %u", p.taken);
	cr_assert(take[2000] && p.lo <= c[2000].lo && p.hi >= c[2000].hi);
	/* right first: the trigger starts the extent when the right side has room */
	cr_assert_eq(p.first, 2000, "grows forward first (readahead): first %u", p.first);
	/* near the end of the file it grows backwards for the rest */
	p = extent_plan(c, 4096, 4090, &o, take);
	cr_assert_eq(p.taken, 256);
	cr_assert_eq(p.last, 4095);
	cr_assert_eq(p.first, 4096 - 256);
}

Test(extent, gaps_are_bridged_within_the_bound)
{
	/* every 5th sample unwanted: 4 of 5 delivered = amplification 1.25 */
	records(100, 1000, 0);
	for (uint32_t i = 0; i < 100; i++)
		c[i].want = i % 5 != 4;
	struct extent_plan p = extent_plan(c, 100, 0, &opts, take);
	cr_assert_eq(p.taken, 80, "%u", p.taken);
	cr_assert(extent_amp_ok(p.hi - p.lo, p.useful, 1.25));
	for (uint32_t i = 0; i < 100; i++)
		cr_assert_eq(take[i], c[i].want, "sample %u", i);
	/* every 3rd unwanted: 1.5 > 1.25 overall; the extent stops where the
	 * bound would break: samples 0, 1, 3, 4 (5000 bytes for 4000) and no
	 * more (0..7: 8000 for 6000) */
	for (uint32_t i = 0; i < 100; i++)
		c[i].want = i % 3 != 2;
	p = extent_plan(c, 100, 0, &opts, take);
	cr_assert(extent_amp_ok(p.hi - p.lo, p.useful, 1.25), "%llu / %llu",
		  (unsigned long long)(p.hi - p.lo), (unsigned long long)p.useful);
	cr_assert_eq(p.taken, 4, "samples 0, 1, 3, 4 meet the bound: %u", p.taken);
	cr_assert(take[0] && take[1] && !take[2] && take[3] && take[4] && !take[6]);
}

Test(extent, a_gap_longer_than_gap_max_is_not_bridged)
{
	records(20, 100000, 0);
	for (uint32_t i = 0; i < 20; i++)
		c[i].want = true;
	c[5].want = false; /* a 100 KB gap after 5 wanted ones */
	struct extent_opts o = opts;
	o.max_amp = 4.0;
	o.gap_max = 50000;
	struct extent_plan p = extent_plan(c, 20, 0, &o, take);
	cr_assert_eq(p.taken, 5, "the gap (100 KB) exceeds gap_max (50 KB): %u", p.taken);
	o.gap_max = 100000;
	p = extent_plan(c, 20, 0, &o, take);
	cr_assert_eq(p.taken, 19, "bridged when gap_max allows: %u", p.taken);
	cr_assert(!take[5], "an unwanted sample never joins");
}

Test(extent, a_cluster_beyond_a_gap_is_reached)
{
	/* trigger, a long gap, then a dense run: the run pays for the gap */
	records(40, 1000, 0);
	for (uint32_t i = 0; i < 40; i++)
		c[i].want = i == 0 || i >= 5;
	struct extent_plan p = extent_plan(c, 40, 0, &opts, take);
	cr_assert_eq(p.taken, 36, "%u", p.taken);
	cr_assert_eq(p.last, 39);
	cr_assert(extent_amp_ok(p.hi - p.lo, p.useful, 1.25));
}

Test(extent, overlapping_member_joins_once_enough_are_wanted)
{
	/* npz in DLIO's layout: every sample's range is the whole 2 MiB member */
	const uint32_t n = 512;
	for (uint32_t i = 0; i < n; i++)
		c[i] = (struct extent_cand){ .lo = 100, .hi = 100 + (2u << 20), .useful = 4096,
					  .want = i < 420 };
	struct extent_plan p = extent_plan(c, n, 0, &opts, take);
	cr_assert_eq(p.taken, 420, "82%% wanted: 2 MiB / 1.72 MB < 1.25: all join (%u)", p.taken);
	for (uint32_t i = 0; i < n; i++)
		c[i].want = i < 409;
	p = extent_plan(c, n, 0, &opts, take);
	cr_assert_eq(p.taken, 1, "80%% wanted: 2 MiB / 1.675 MB > 1.25: read alone (%u)", p.taken);
	/* the trigger in the middle: neither side alone meets the bound, both
	 * together do */
	for (uint32_t i = 0; i < n; i++)
		c[i].want = i % 7 != 3;
	p = extent_plan(c, n, 400, &opts, take);
	cr_assert_eq(p.taken, n - 73, "every wanted sample of the member joins: %u", p.taken);
	cr_assert(extent_amp_ok(p.hi - p.lo, p.useful, 1.25));
}

Test(extent, a_trigger_longer_than_an_extent_is_alone)
{
	records(4, 16u << 20, 0);
	struct extent_plan p = extent_plan(c, 4, 1, &opts, take);
	cr_assert_eq(p.taken, 1);
	cr_assert_eq(count_taken(4), 1);
	cr_assert(take[1]);
}

/* Random files: every plan meets both bounds, takes only wanted samples and
 * all wanted ones inside its range, and reports its range and bytes. */
Test(extent, random_files_meet_the_bounds)
{
	unsigned seed = 7;
	for (int round = 0; round < 400; round++) {
		uint32_t n = 1 + (uint32_t)(rand_r(&seed) % 300);
		uint64_t pos = 0;
		for (uint32_t i = 0; i < n; i++) {
			uint64_t len = 1 + (uint64_t)(rand_r(&seed) % 200000);
			uint64_t gap = rand_r(&seed) % 4 == 0 ? (uint64_t)(rand_r(&seed) % 50000) : 0;
			c[i] = (struct extent_cand){ .lo = pos + gap, .hi = pos + gap + len + 16,
						  .useful = len, .want = rand_r(&seed) % 3 != 0 };
			pos = c[i].hi;
		}
		uint32_t t = (uint32_t)(rand_r(&seed) % n);
		c[t].want = true;
		struct extent_opts o = { .max_bytes = 1 + (uint64_t)(rand_r(&seed) % (4u << 20)),
				      .max_amp = 1.0 + (rand_r(&seed) % 100) / 100.0,
				      .gap_max = (uint64_t)(rand_r(&seed) % 200000) };
		struct extent_plan p = extent_plan(c, n, t, &o, take);
		cr_assert(take[t]);
		cr_assert_eq(p.taken, count_taken(n));
		uint64_t useful = 0, lo = UINT64_MAX, hi = 0;
		for (uint32_t i = 0; i < n; i++) {
			if (!take[i])
				continue;
			cr_assert(c[i].want, "round %d: unwanted sample %u taken", round, i);
			useful += c[i].useful;
			lo = MIN(lo, c[i].lo);
			hi = MAX(hi, c[i].hi);
		}
		cr_assert_eq(p.useful, useful);
		cr_assert_eq(p.lo, lo);
		cr_assert_eq(p.hi, hi);
		if (p.taken > 1) {
			cr_assert_leq(p.hi - p.lo, o.max_bytes, "round %d", round);
			cr_assert(extent_amp_ok(p.hi - p.lo, p.useful, o.max_amp), "round %d: %llu / %llu",
				  round, (unsigned long long)(p.hi - p.lo),
				  (unsigned long long)p.useful);
		}
		/* every wanted sample inside the extent's index range joined: none
		 * is read and then dropped */
		for (uint32_t i = p.first; i <= p.last; i++)
			cr_assert_eq(take[i], c[i].want, "round %d: wanted %u inside not taken", round, i);
	}
}

/* ---- the extent region's ranges (src/util/spans.c) ---------------------------- */

/* Every byte of the region is free or in exactly one live range, whatever
 * the order of allocations and frees; frees merge back to one range. */
static void spans_check(const struct spans *s, const uint8_t *owner, uint64_t cap)
{
	uint64_t freeb = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		cr_assert(s->free[i].len > 0);
		cr_assert(s->free[i].off + s->free[i].len <= cap);
		if (i > 0) /* sorted, disjoint, never adjacent */
			cr_assert(s->free[i - 1].off + s->free[i - 1].len < s->free[i].off);
		for (uint64_t b = s->free[i].off; b < s->free[i].off + s->free[i].len; b++)
			cr_assert_eq(owner[b], 0, "byte %llu is free and taken", (unsigned long long)b);
		freeb += s->free[i].len;
	}
	uint64_t taken = 0;
	for (uint64_t b = 0; b < cap; b++)
		taken += owner[b] != 0;
	cr_assert_eq(freeb + taken, cap);
	cr_assert_eq(spans_free_bytes(s), freeb);
}

Test(spans, first_fit_out_of_order_frees_merge)
{
	enum { CAP = 4096, LIVE = 24 };
	struct spans s;
	spans_init(&s, CAP);
	uint8_t owner[CAP] = { 0 };
	uint64_t off[LIVE], len[LIVE];
	bool live[LIVE] = { false };
	uint64_t rng = 12345;
	for (int step = 0; step < 4000; step++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t k = (uint32_t)(rng >> 33) % LIVE;
		if (live[k]) {
			spans_free(&s, off[k], len[k]);
			memset(owner + off[k], 0, len[k]);
			live[k] = false;
		} else {
			len[k] = 1 + (rng >> 45) % 700;
			uint64_t lowest = UINT64_MAX; /* first fit: the lowest range that holds it */
			for (uint32_t i = 0; i < s.n && lowest == UINT64_MAX; i++)
				if (s.free[i].len >= len[k])
					lowest = s.free[i].off;
			int rc = spans_alloc(&s, len[k], &off[k]);
			if (lowest == UINT64_MAX) {
				cr_assert_eq(rc, -ENOSPC);
			} else {
				cr_assert_eq(rc, 0);
				cr_assert_eq(off[k], lowest);
				for (uint64_t b = off[k]; b < off[k] + len[k]; b++)
					cr_assert_eq(owner[b], 0, "byte %llu given twice",
						     (unsigned long long)b);
				memset(owner + off[k], k + 1, len[k]);
				live[k] = true;
			}
		}
		spans_check(&s, owner, CAP);
	}
	for (int k = 0; k < LIVE; k++)
		if (live[k])
			spans_free(&s, off[k], len[k]);
	cr_assert_eq(s.n, 1);
	cr_assert(s.free[0].off == 0 && s.free[0].len == CAP);
	uint64_t o;
	cr_assert_eq(spans_alloc(&s, CAP + 1, &o), -ENOSPC);
	cr_assert_eq(spans_alloc(&s, CAP, &o), 0);
	cr_assert_eq(o, 0);
	cr_assert_eq(spans_alloc(&s, 1, &o), -ENOSPC);
	spans_fini(&s);
}
