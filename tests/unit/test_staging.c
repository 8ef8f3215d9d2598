/* The staging ring allocator (daemon/staging.c) driven directly: spans stay
 * inside the ring and never overlap a live one, wrap-around skips the short
 * tail, reclaim goes in order, and exhaustion is reported without changing
 * anything. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../daemon/staging.h"

#define BASE 4096u

Test(staging, allocates_in_order_from_base)
{
	struct stg s;
	stg_init(&s, BASE, 1000);
	uint64_t a, b;
	cr_assert_eq(stg_alloc(&s, 300, &a), 0);
	cr_assert_eq(stg_alloc(&s, 200, &b), 0);
	cr_assert_eq(a, BASE);
	cr_assert_eq(b, BASE + 300);
	cr_assert_eq(stg_used(&s), 500);
	cr_assert_eq(stg_mark(&s), 500);
}

Test(staging, zero_bytes_take_nothing)
{
	struct stg s;
	stg_init(&s, BASE, 100);
	uint64_t off = 1;
	cr_assert_eq(stg_alloc(&s, 0, &off), 0);
	cr_assert_eq(off, BASE);
	cr_assert_eq(stg_used(&s), 0);
}

Test(staging, exhaustion_is_reported_and_changes_nothing)
{
	struct stg s;
	stg_init(&s, BASE, 1000);
	uint64_t off = 7;
	cr_assert_eq(stg_alloc(&s, 1001, &off), -E2BIG, "bigger than the ring never fits");
	cr_assert_eq(off, 7);
	cr_assert_eq(stg_alloc(&s, 600, &off), 0);
	uint64_t before = off;
	cr_assert_eq(stg_alloc(&s, 401, &off), -ENOSPC, "full for now");
	cr_assert_eq(off, before);
	cr_assert_eq(stg_used(&s), 600);
	cr_assert_eq(stg_alloc(&s, 400, &off), 0, "exactly the rest fits");
	cr_assert_eq(off, BASE + 600);
	cr_assert_eq(stg_alloc(&s, 1, &off), -ENOSPC);
}

Test(staging, wrap_skips_the_short_tail)
{
	struct stg s;
	stg_init(&s, BASE, 1000);
	uint64_t a, b, c;
	cr_assert_eq(stg_alloc(&s, 700, &a), 0);
	uint64_t m1 = stg_mark(&s);
	cr_assert_eq(stg_alloc(&s, 200, &b), 0);
	uint64_t m2 = stg_mark(&s);
	cr_assert_eq(b, BASE + 700);
	/* 100 bytes left at the end: 300 do not fit there, nor at the start
	 * while the first span is live */
	cr_assert_eq(stg_alloc(&s, 300, &c), -ENOSPC);
	cr_assert_eq(stg_reclaim(&s, m1), 0);
	cr_assert_eq(stg_alloc(&s, 300, &c), 0);
	cr_assert_eq(c, BASE, "the allocation restarts at the base, not across the end");
	cr_assert_eq(stg_used(&s), 200 + 100 + 300, "the skipped tail counts until reclaimed");
	cr_assert_eq(stg_reclaim(&s, m2), 0);
	cr_assert_eq(stg_used(&s), 100 + 300);
	cr_assert_eq(stg_reclaim(&s, stg_mark(&s)), 0);
	cr_assert_eq(stg_used(&s), 0);
}

Test(staging, an_empty_ring_starts_over_at_its_base)
{
	/* 600 bytes taken and freed leave the head at 600: a 700-byte batch
	 * fits neither before the end nor, counting the skipped tail, in the
	 * ring; empty, the ring must start over at its base instead */
	struct stg s;
	stg_init(&s, BASE, 1000);
	uint64_t off;
	cr_assert_eq(stg_alloc(&s, 600, &off), 0);
	cr_assert_eq(stg_reclaim(&s, stg_mark(&s)), 0);
	cr_assert_eq(stg_alloc(&s, 700, &off), 0, "an empty ring must take a batch that fits it");
	cr_assert_eq(off, BASE);
	cr_assert_eq(stg_used(&s), 700, "nothing skipped");
	cr_assert_eq(stg_reclaim(&s, stg_mark(&s)), 0);
	cr_assert_eq(stg_alloc(&s, 1000, &off), 0, "the whole ring, when empty");
	cr_assert_eq(off, BASE);
}

Test(staging, reclaim_in_order_only)
{
	struct stg s;
	stg_init(&s, BASE, 1000);
	uint64_t off;
	cr_assert_eq(stg_alloc(&s, 100, &off), 0);
	uint64_t m1 = stg_mark(&s);
	cr_assert_eq(stg_alloc(&s, 100, &off), 0);
	uint64_t m2 = stg_mark(&s);
	cr_assert_eq(stg_reclaim(&s, m2), 0, "a later mark frees the earlier spans too");
	cr_assert_eq(stg_used(&s), 0);
	cr_assert_eq(stg_reclaim(&s, m1), -EINVAL, "a mark behind the tail");
	cr_assert_eq(stg_reclaim(&s, m2 + 1), -EINVAL, "a mark past the head");
	cr_assert_eq(stg_used(&s), 0);
}

Test(staging, reset_forgets_everything)
{
	struct stg s;
	stg_init(&s, BASE, 1000);
	uint64_t off;
	cr_assert_eq(stg_alloc(&s, 900, &off), 0);
	stg_reset(&s);
	cr_assert_eq(stg_used(&s), 0);
	cr_assert_eq(stg_alloc(&s, 1000, &off), 0);
	cr_assert_eq(off, BASE);
}

/* A FIFO of batches, as prepare and reclaim use the ring: random sizes,
 * reclaimed oldest first, the ring always holding as much as fits. Every
 * live span is inside the ring and overlaps no other live span. */
struct span {
	uint64_t off, len, mark;
};

static void check_disjoint(const struct span *q, size_t head, size_t n, uint64_t cap)
{
	for (size_t i = 0; i < n; i++) {
		const struct span *x = &q[(head + i) % 64];
		cr_assert(x->off >= BASE && x->off + x->len <= BASE + cap,
			  "span [%llu, +%llu) leaves the ring", (unsigned long long)x->off,
			  (unsigned long long)x->len);
		for (size_t j = i + 1; j < n; j++) {
			const struct span *y = &q[(head + j) % 64];
			cr_assert(x->off + x->len <= y->off || y->off + y->len <= x->off,
				  "live spans overlap: [%llu, +%llu) and [%llu, +%llu)",
				  (unsigned long long)x->off, (unsigned long long)x->len,
				  (unsigned long long)y->off, (unsigned long long)y->len);
		}
	}
}

ParameterizedTestParameters(staging, fifo_stress)
{
	static uint64_t caps[] = { 4096, 65536, 1000003 };
	return cr_make_param_array(uint64_t, caps, sizeof(caps) / sizeof(caps[0]));
}

ParameterizedTest(uint64_t *cap, staging, fifo_stress)
{
	struct stg s;
	stg_init(&s, BASE, *cap);
	struct span q[64];
	size_t head = 0, n = 0;
	unsigned seed = (unsigned)*cap;
	uint64_t wraps = 0, last = BASE;
	for (int it = 0; it < 20000; it++) {
		uint64_t len = 1 + (uint64_t)rand_r(&seed) % (*cap / 3);
		uint64_t off;
		int rc = stg_alloc(&s, len, &off);
		if (rc == 0) {
			cr_assert(n < 64);
			q[(head + n++) % 64] = (struct span){ off, len, stg_mark(&s) };
			wraps += off < last;
			last = off;
			check_disjoint(q, head, n, *cap);
			continue;
		}
		cr_assert_eq(rc, -ENOSPC);
		cr_assert(n > 0, "an empty ring refused %llu of %llu bytes", (unsigned long long)len,
			  (unsigned long long)*cap);
		cr_assert_eq(stg_reclaim(&s, q[head].mark), 0);
		head = (head + 1) % 64;
		n--;
	}
	cr_assert(wraps > 100, "the stress should wrap often (%llu)", (unsigned long long)wraps);
}
