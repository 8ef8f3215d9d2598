/* Which batch a rank resumes at, and the resume files' bytes
 * (daemon/resume_file.c), with no daemon, file or thread: a plan saved and
 * read back gives every rank its start; a rank's own slot beats the plan's
 * start; a slot of another run, rank or world size, or a damaged one, is
 * ignored; nothing resumes past the job's end; a damaged plan is refused. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../daemon/resume_file.h"

static const uint8_t REC[] = { 'r', 'e', 'c', 0, 1, 2, 3, 4, 5 }; /* odd length: starts unaligned */

static struct resume_plan plan4(void)
{
	return (struct resume_plan){
		.run = 0x1234567u,
		.job = { .n = 1000, .seed = 42, .dataset_hash = 0xfeedull, .world = 4, .batch = 8,
			 .drop_last = true, .shuffle = false },
		.epochs = 3, .bpe = 31, .rec = REC, .rec_len = sizeof(REC),
	};
}

static const uint64_t STARTS[4] = { 10, 11, 12, 13 };

Test(resume_file, plan_round_trips)
{
	struct resume_plan in = plan4(), out;
	size_t n;
	uint8_t *b = resume_file_plan_encode(&in, STARTS, &n);
	cr_assert_eq(n, 96 + sizeof(REC) + 4 * 8 + 4);
	cr_assert_eq(resume_file_plan_decode(b, n, &out), 0);
	cr_assert_eq(out.run, in.run);
	cr_assert_eq(out.job.n, 1000);
	cr_assert_eq(out.job.seed, 42);
	cr_assert_eq(out.job.dataset_hash, 0xfeedull);
	cr_assert_eq(out.job.world, 4);
	cr_assert_eq(out.job.batch, 8);
	cr_assert(out.job.drop_last);
	cr_assert(!out.job.shuffle);
	cr_assert_eq(out.epochs, 3);
	cr_assert_eq(out.bpe, 31);
	cr_assert_eq(out.rec_len, sizeof(REC));
	cr_assert_arr_eq(out.rec, REC, sizeof(REC));
	for (uint32_t r = 0; r < 4; r++)
		cr_assert_eq(resume_file_plan_start(&out, r), STARTS[r], "rank %u", r);
	free(b);
}

Test(resume_file, damaged_plan_is_refused)
{
	struct resume_plan in = plan4(), out;
	size_t n;
	uint8_t *b = resume_file_plan_encode(&in, STARTS, &n);
	for (size_t i = 0; i < n; i += 7) {
		b[i] ^= 0x40;
		cr_assert_eq(resume_file_plan_decode(b, n, &out), -EBADMSG, "byte %zu flipped", i);
		b[i] ^= 0x40;
	}
	cr_assert_eq(resume_file_plan_decode(b, n - 1, &out), -EBADMSG, "short");
	cr_assert_eq(resume_file_plan_decode(b, 50, &out), -EBADMSG, "shorter than a header");
	cr_assert_eq(resume_file_plan_decode(b, n, &out), 0);
	free(b);
}

Test(resume_file, rank_resumes_at_its_slot)
{
	struct resume_plan in = plan4(), p;
	size_t n;
	uint8_t *b = resume_file_plan_encode(&in, STARTS, &n);
	cr_assert_eq(resume_file_plan_decode(b, n, &p), 0);
	struct resume_slot s;
	resume_file_slot_init(&s, p.run, 2, 4, 57);
	uint64_t g = 0;
	cr_assert(resume_file_rank_start(&p, 2, &s, 1000, &g));
	cr_assert_eq(g, 57, "the slot's first unreleased batch, not the plan's 12");
	/* released further: the slot is updated in place (one 8-byte store) */
	s.g = 58;
	cr_assert(resume_file_rank_start(&p, 2, &s, 1000, &g));
	cr_assert_eq(g, 58);
	free(b);
}

Test(resume_file, rank_without_its_slot_is_at_the_plan_start)
{
	struct resume_plan in = plan4(), p;
	size_t n;
	uint8_t *b = resume_file_plan_encode(&in, STARTS, &n);
	cr_assert_eq(resume_file_plan_decode(b, n, &p), 0);
	uint64_t g = 0;
	cr_assert(!resume_file_rank_start(&p, 1, NULL, 1000, &g), "no file");
	cr_assert_eq(g, 11);

	struct resume_slot s;
	resume_file_slot_init(&s, p.run + 2, 1, 4, 99);
	cr_assert(!resume_file_rank_start(&p, 1, &s, 1000, &g), "another run's");
	cr_assert_eq(g, 11);
	resume_file_slot_init(&s, p.run, 3, 4, 99);
	cr_assert(!resume_file_rank_start(&p, 1, &s, 1000, &g), "another rank's");
	cr_assert_eq(g, 11);
	resume_file_slot_init(&s, p.run, 1, 8, 99);
	cr_assert(!resume_file_rank_start(&p, 1, &s, 1000, &g), "another world size's");
	cr_assert_eq(g, 11);
	resume_file_slot_init(&s, p.run, 1, 4, 99);
	s.magic[0] = 'X';
	cr_assert(!resume_file_rank_start(&p, 1, &s, 1000, &g), "bad magic");
	cr_assert_eq(g, 11);
	resume_file_slot_init(&s, p.run, 1, 4, 99);
	s.crc ^= 1;
	cr_assert(!resume_file_rank_start(&p, 1, &s, 1000, &g), "bad checksum");
	cr_assert_eq(g, 11);
	free(b);
}

Test(resume_file, never_past_the_end)
{
	struct resume_plan in = plan4(), p;
	size_t n;
	uint64_t starts[4] = { 500, 1, 2, 3 };
	uint8_t *b = resume_file_plan_encode(&in, starts, &n);
	cr_assert_eq(resume_file_plan_decode(b, n, &p), 0);
	uint64_t g = 0;
	cr_assert(!resume_file_rank_start(&p, 0, NULL, 93, &g));
	cr_assert_eq(g, 93, "a plan start past a shorter job's end is its end");
	struct resume_slot s;
	resume_file_slot_init(&s, p.run, 1, 4, 200);
	cr_assert(resume_file_rank_start(&p, 1, &s, 93, &g));
	cr_assert_eq(g, 93, "so is a slot's");
	free(b);
}

Test(resume_file, slot_layout_is_the_files)
{
	struct resume_slot s;
	resume_file_slot_init(&s, 7, 3, 16, 0x0102030405060708ull);
	cr_assert_arr_eq(s.magic, "SEERRNK1", 8);
	uint64_t g;
	memcpy(&g, (const uint8_t *)&s + 32, 8);
	cr_assert_eq(g, 0x0102030405060708ull, "g at byte 32, stored whole");
	cr_assert_eq(resume_file_slot_check(&s, 7, 3, 16, &g), 0);
}
