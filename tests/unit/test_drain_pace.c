/* The checkpoint drain's pacing (daemon/drain_pace.c) driven directly: the
 * mode follows seerd's own PFS use (reads queued now: yield; the plan reads
 * the PFS within the window: plan; neither: full), and the sleep after a
 * piece keeps the drain at drain_share of the time in yield, under
 * drain_rate always, and not at all in plan or at full rate without a cap. */
#include <criterion/criterion.h>
#include <string.h>

#include "../../daemon/drain_pace.h"

Test(drain_pace, mode_follows_the_outlook)
{
	struct pfs_outlook o = { 0 };
	cr_assert_eq(drain_pace_mode(&o), DRAIN_FULL, "no read now, none planned: full rate");
	o.soon_reads = 3;
	o.soon_bytes = 3 << 20;
	cr_assert_eq(drain_pace_mode(&o), DRAIN_PLAN, "the plan reads the PFS soon");
	o.queued = 1;
	cr_assert_eq(drain_pace_mode(&o), DRAIN_YIELD, "reads queued win over the plan");
	o.soon_reads = 0;
	o.soon_bytes = 0;
	cr_assert_eq(drain_pace_mode(&o), DRAIN_YIELD, "reads queued, none planned beyond");
}

Test(drain_pace, names)
{
	cr_assert_str_eq(drain_mode_name(DRAIN_IDLE), "idle");
	cr_assert_str_eq(drain_mode_name(DRAIN_FULL), "full");
	cr_assert_str_eq(drain_mode_name(DRAIN_PLAN), "plan");
	cr_assert_str_eq(drain_mode_name(DRAIN_YIELD), "yield");
	cr_assert_str_eq(drain_mode_name(DRAIN_NMODES), "?");
}

Test(drain_pace, full_rate_without_cap_never_sleeps)
{
	for (uint64_t done = 0; done < (1ull << 34); done += 1ull << 30)
		cr_assert_eq(drain_pace_sleep(DRAIN_FULL, done, 0.001, 0.5, 0, 0.25), 0.0);
}

Test(drain_pace, share_of_time_in_yield)
{
	/* a piece took 0.1 s: at share 0.25 the drain sleeps 0.3 s, so it
	 * writes a quarter of the time */
	double s = drain_pace_sleep(DRAIN_YIELD, 8 << 20, 0.1, 0.1, 0, 0.25);
	cr_assert_float_eq(s, 0.3, 1e-12, "yield: %g", s);
	cr_assert_float_eq(0.1 / (0.1 + s), 0.25, 1e-12);
	cr_assert_float_eq(drain_pace_sleep(DRAIN_YIELD, 8 << 20, 0.1, 0.1, 0, 0.5), 0.1, 1e-12);
	/* share 0.05: 19 pieces' time asleep after each piece */
	cr_assert_float_eq(drain_pace_sleep(DRAIN_YIELD, 1 << 20, 0.5, 0.01, 0, 0.05), 0.19,
			   1e-12);
	/* share 1: all the time is the drain's */
	cr_assert_eq(drain_pace_sleep(DRAIN_YIELD, 8 << 20, 0.1, 0.1, 0, 1.0), 0.0);
	cr_assert_eq(drain_pace_sleep(DRAIN_FULL, 8 << 20, 0.1, 0.1, 0, 0.25), 0.0,
		     "full rate ignores the share");
}

Test(drain_pace, plan_fills_the_gap)
{
	/* no read queued now, some in the window: the link is free, so the
	 * drain writes the next piece at once (the piece after a read is
	 * queued yields) */
	for (double share = 0.05; share < 1; share += 0.2)
		cr_assert_eq(drain_pace_sleep(DRAIN_PLAN, 8 << 20, 0.1, 0.1, 0, share), 0.0,
			     "share %g", share);
}

Test(drain_pace, cap_holds_in_every_mode)
{
	/* 10 MB/s cap, 5 MB written after 0.2 s: wait until 0.5 s */
	enum drain_mode m[] = { DRAIN_FULL, DRAIN_PLAN, DRAIN_YIELD };
	for (int i = 0; i < 3; i++)
		cr_assert_float_eq(drain_pace_sleep(m[i], 5000000, 0.2, 0.01, 10000000, 0.25), 0.3,
				   1e-9, "%s", drain_mode_name(m[i]));
	/* behind the cap: no wait at full rate or in plan; the share's wait in yield */
	cr_assert_eq(drain_pace_sleep(DRAIN_FULL, 5000000, 1.0, 0.1, 10000000, 0.25), 0.0);
	cr_assert_eq(drain_pace_sleep(DRAIN_PLAN, 5000000, 1.0, 0.1, 10000000, 0.25), 0.0);
	cr_assert_float_eq(drain_pace_sleep(DRAIN_YIELD, 5000000, 1.0, 0.1, 10000000, 0.25), 0.3,
			   1e-12);
	/* the longer of the two waits, not their sum */
	cr_assert_float_eq(drain_pace_sleep(DRAIN_YIELD, 5000000, 0.2, 0.05, 10000000, 0.25), 0.3,
			   1e-9);
}
