/* The open-file and chunk-cache plan of chunked HDF5 reads (src/fmt/hdf5_plan.c):
 * every file open with a cache of all its chunks when the budget holds them;
 * otherwise as many such files as fit and the expected amplification; no
 * cache at all for chunks of one sample; the descriptor cap obeyed. */
#include <criterion/criterion.h>

#include "../../src/fmt/hdf5.h"

#define MIB (1ull << 20)

/* DLIO gzip hdf5: 32 files of 64 samples of 64 KiB, chunks of 8 samples. */
static struct hdf5_plan_in dlio32(uint64_t budget)
{
	return (struct hdf5_plan_in){ .budget = budget, .files = 32, .open_cap = 256,
				      .max_need = 4 * MIB, .total_need = 128 * MIB,
				      .max_rows = 8 };
}

Test(hdf5_plan, budget_holding_every_chunk_keeps_every_file_open)
{
	struct hdf5_plan_in in = dlio32(160 * MIB);
	struct hdf5_plan p;
	hdf5_plan_make(&in, &p);
	cr_expect_eq(p.open, 32);
	cr_expect_eq(p.cache, 4 * MIB);
	cr_expect(!p.rereads);
	cr_expect_float_eq(p.amp, 1.0, 1e-9);
}

Test(hdf5_plan, small_budget_holds_whole_files_and_says_the_cost)
{
	struct hdf5_plan_in in = dlio32(32 * MIB);
	struct hdf5_plan p;
	hdf5_plan_make(&in, &p);
	cr_expect_eq(p.open, 8, "32 MiB holds 8 files' chunks, got %u", p.open);
	cr_expect_eq(p.cache, 4 * MIB);
	cr_expect(p.rereads);
	/* a quarter of the chunks cached: a chunk of 8 samples loaded 1 + 7 * 3/4 times */
	cr_expect_float_eq(p.amp, 6.25, 1e-9);
}

Test(hdf5_plan, budget_below_one_file_gives_it_all)
{
	struct hdf5_plan_in in = dlio32(1 * MIB);
	struct hdf5_plan p;
	hdf5_plan_make(&in, &p);
	cr_expect_eq(p.open, 1);
	cr_expect_eq(p.cache, 1 * MIB);
	cr_expect(p.rereads);
	cr_expect(p.amp > 7.9 && p.amp < 8.0, "amp %g", p.amp);
}

Test(hdf5_plan, descriptor_cap_limits_open_files_even_with_memory)
{
	struct hdf5_plan_in in = dlio32(1024 * MIB);
	in.open_cap = 16;
	struct hdf5_plan p;
	hdf5_plan_make(&in, &p);
	cr_expect_eq(p.open, 16);
	cr_expect_eq(p.cache, 4 * MIB);
	cr_expect(p.rereads, "files beyond the cap are closed: their chunks are lost");
	cr_expect_float_eq(p.amp, 4.5, 1e-9); /* half the files open: 1 + 7 / 2 */
}

Test(hdf5_plan, one_sample_chunks_need_no_cache)
{
	struct hdf5_plan_in in = { .budget = 32 * MIB, .files = 70, .open_cap = 256,
				   .max_need = 0, .total_need = 0, .max_rows = 1 };
	struct hdf5_plan p;
	hdf5_plan_make(&in, &p);
	cr_expect_eq(p.open, 70);
	cr_expect_eq(p.cache, 0);
	cr_expect(!p.rereads);
	in.files = 5000;
	hdf5_plan_make(&in, &p);
	cr_expect_eq(p.open, 256);
	cr_expect_eq(p.cache, 0);
}

Test(hdf5_plan, no_budget_no_cache)
{
	struct hdf5_plan_in in = dlio32(0);
	struct hdf5_plan p;
	hdf5_plan_make(&in, &p);
	cr_expect_eq(p.cache, 0);
	cr_expect_eq(p.open, 32);
	cr_expect(p.rereads);
	cr_expect_float_eq(p.amp, 8.0, 1e-9);
}

Test(hdf5_plan, open_files_are_charged_to_the_budget)
{
	struct hdf5_plan_in in = { .budget = 32 * MIB, .files = 70, .open_cap = 256,
				   .max_rows = 1, .file_cost = MIB / 2 };
	struct hdf5_plan p;
	hdf5_plan_make(&in, &p);
	cr_expect_eq(p.open, 64, "32 MiB / 512 KiB per open file, got %u", p.open);
	cr_expect_eq(p.cache, 0);
	in = dlio32(32 * MIB);
	in.file_cost = MIB / 2;
	hdf5_plan_make(&in, &p);
	cr_expect_eq(p.open, 7, "4.5 MiB per open file, got %u", p.open);
	cr_expect_eq(p.cache, 4 * MIB);
	in.budget = 128 * MIB; /* the chunks fit, the open files with them do not */
	hdf5_plan_make(&in, &p);
	cr_expect(p.rereads && p.open == 28, "open %u", p.open);
	in.budget = 144 * MIB;
	hdf5_plan_make(&in, &p);
	cr_expect(!p.rereads && p.open == 32 && p.cache == 4 * MIB);
}
