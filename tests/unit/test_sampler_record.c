/* sampler_record: the checkpoint record's byte form (pinned by golden
 * bytes computed independently with Python's struct and zlib), corruption
 * and truncation detection, checks against another job, merging the
 * records of several ranks, and records built by a sampler. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "seer.h"
#include "../../src/sampler/sampler_record.h"

/* n 1000, seed 42, hash 0123456789abcdef, batch 8, epoch 7, all ranks,
 * drop_last off, shuffle on; 8 ranks at steps 3,3,2,3,3,3,3,3, then 4 ranks
 * at step 5 (world 4). */
static const char golden_hex[] =
	"53454552504f530001004800a4000000e8030000000000002a00000000000000"
	"efcdab896745230107000000000000000800000004000000ffffffff02000000"
	"0200000000000000080000000800000003000000000000000300000000000000"
	"0200000000000000030000000000000003000000000000000300000000000000"
	"0300000000000000030000000000000004000000010000000500000000000000"
	"765ebc8b";

static size_t unhex(const char *h, uint8_t *out)
{
	size_t n = strlen(h) / 2;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		cr_assert_eq(sscanf(h + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
	return n;
}

static void golden_record(struct sampler_record *r)
{
	struct sampler_job job = { 1000, 42, 0x0123456789abcdefull, 4, 8, false, true };
	static const uint64_t s0[8] = { 3, 3, 2, 3, 3, 3, 3, 3 }, s1 = 5;
	sampler_record_init(r, &job, 7, SMP_REC_ALL);
	cr_assert_eq(sampler_record_push(r, 8, 8, s0), 0);
	cr_assert_eq(sampler_record_push(r, 4, 1, &s1), 0);
}

Test(record, golden_bytes)
{
	uint8_t want[256], got[256];
	size_t n = unhex(golden_hex, want);
	struct sampler_record r;
	golden_record(&r);
	cr_assert_eq(sampler_record_size(&r), n);
	sampler_record_encode(&r, got);
	cr_assert_arr_eq(got, want, n, "the byte form changed: a deliberate change bumps "
				       "SMP_REC_VERSION");
	sampler_record_free(&r);

	seer_record_t *d;
	cr_assert_eq(seer_record_decode(want, n, &d), 0, "%s", seer_errmsg());
	cr_assert_eq(seer_record_epoch(d), 7);
	char text[200];
	seer_record_describe(d, text, sizeof(text));
	cr_assert_str_eq(text, "epoch 7: 8 ranks at steps 3,3,2,3,3,3,3,3, then 4 ranks at step 5");
	/* round trip: the same bytes again */
	cr_assert_eq(seer_record_encode(d, NULL, 0), (int64_t)n);
	cr_assert_eq(seer_record_encode(d, got, n - 1), (int64_t)n); /* too small: not written */
	memset(got, 0, sizeof(got));
	cr_assert_eq(seer_record_encode(d, got, sizeof(got)), (int64_t)n);
	cr_assert_arr_eq(got, want, n);
	seer_record_free(d);
	seer_record_free(NULL);
}

/* Every single-byte change and every truncation is refused, never taken for
 * another position. */
Test(record, corruption_and_truncation_detected)
{
	uint8_t buf[256];
	size_t n = unhex(golden_hex, buf);
	seer_record_t *d;
	static const uint8_t flips[] = { 0x01, 0x80, 0xff, 0x10 };
	for (size_t i = 0; i < n; i++)
		for (size_t f = 0; f < sizeof(flips); f++) {
			buf[i] ^= flips[f];
			int rc = seer_record_decode(buf, n, &d);
			cr_assert_eq(rc, -EBADMSG, "byte %zu ^ %#x accepted (rc %d)", i, flips[f], rc);
			cr_assert_null(d);
			buf[i] ^= flips[f];
		}
	for (size_t len = 0; len < n; len++) {
		cr_assert_eq(seer_record_decode(buf, len, &d), -EBADMSG, "%zu of %zu bytes", len, n);
		cr_assert(strstr(seer_errmsg(), "checkpoint record") != NULL, "%s", seer_errmsg());
	}
	buf[n] = 0;
	cr_assert_eq(seer_record_decode(buf, n + 1, &d), -EBADMSG);
	cr_assert(strstr(seer_errmsg(), "truncated or padded") != NULL, "%s", seer_errmsg());
	cr_assert_eq(seer_record_decode(NULL, 0, &d), -EINVAL);
	cr_assert_eq(seer_record_decode(buf, n, &d), 0); /* the original still decodes */
	seer_record_free(d);
}

/* Records whose checksum is right but whose content is not (a newer format,
 * impossible counts) are refused with the reason. */
static int decode_crafted(struct sampler_record *r, char *msg, size_t len)
{
	uint8_t buf[512];
	size_t n = sampler_record_size(r);
	cr_assert_leq(n, sizeof(buf));
	sampler_record_encode(r, buf);
	seer_record_t *d;
	int rc = seer_record_decode(buf, n, &d);
	snprintf(msg, len, "%s", seer_errmsg());
	seer_record_free(d);
	sampler_record_free(r);
	return rc;
}

Test(record, well_formed_but_impossible)
{
	char msg[1024];
	struct sampler_job job = { 1000, 42, 7, 8, 8, false, true };
	struct sampler_record r;

	/* 1000 over 8 ranks: 125 each, 16 batches of 8 */
	uint64_t c = 17;
	sampler_record_init(&r, &job, 0, SMP_REC_ALL);
	sampler_record_push(&r, 8, 1, &c);
	cr_assert_eq(decode_crafted(&r, msg, sizeof(msg)), -EBADMSG);
	cr_assert(strstr(msg, "every rank consumed 17 batches, the segment has 16") != NULL, "%s", msg);

	/* a complete segment followed by another */
	job.world = 4;
	uint64_t s0 = 16, s1 = 1;
	sampler_record_init(&r, &job, 0, SMP_REC_ALL);
	sampler_record_push(&r, 8, 1, &s0);
	sampler_record_push(&r, 4, 1, &s1);
	cr_assert_eq(decode_crafted(&r, msg, sizeof(msg)), -EBADMSG);
	cr_assert(strstr(msg, "is complete, yet segment 1 follows") != NULL, "%s", msg);

	/* world size other than the last segment's */
	job.world = 3;
	sampler_record_init(&r, &job, 0, SMP_REC_ALL);
	sampler_record_push(&r, 8, 1, &s1);
	cr_assert_eq(decode_crafted(&r, msg, sizeof(msg)), -EBADMSG);

	/* saved by a rank outside the world */
	job.world = 8;
	sampler_record_init(&r, &job, 0, 8);
	sampler_record_push(&r, 8, 1, &s1);
	cr_assert_eq(decode_crafted(&r, msg, sizeof(msg)), -EBADMSG);
	cr_assert(strstr(msg, "rank 8 of 8") != NULL, "%s", msg);

	/* a segment that can give no batch */
	struct sampler_job tiny = { 3, 42, 7, 4, 1, true, true };
	uint64_t zero = 0;
	sampler_record_init(&r, &tiny, 0, SMP_REC_ALL);
	sampler_record_push(&r, 4, 1, &zero);
	cr_assert_eq(decode_crafted(&r, msg, sizeof(msg)), -EBADMSG);
	cr_assert(strstr(msg, "give no batch") != NULL, "%s", msg);

	/* a newer format version (checksum recomputed) */
	uint8_t buf[256];
	size_t n = unhex(golden_hex, buf);
	buf[8] = 2;
	uint32_t crc = (uint32_t)crc32(0L, buf, (uInt)(n - 4)); /* as the format defines it */
	for (int i = 0; i < 4; i++)
		buf[n - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
	seer_record_t *d;
	cr_assert_eq(seer_record_decode(buf, n, &d), -EBADMSG);
	cr_assert(strstr(seer_errmsg(), "newer seer") != NULL, "%s", seer_errmsg());
}

/* ---- a record against another job ------------------------------------------ */

static seer_record_t *record_at(uint64_t n, uint64_t seed, uint32_t W, uint32_t B, unsigned flags,
				uint64_t hash, uint32_t rank, uint64_t epoch, uint64_t steps)
{
	seer_sampler_t *s;
	cr_assert_eq(seer_sampler_resume(n, seed, W, B, flags, hash, NULL, &s), 0, "%s",
		     seer_errmsg());
	seer_record_t *r;
	cr_assert_eq(seer_sampler_record(s, rank, epoch, steps, &r), 0, "%s", seer_errmsg());
	seer_sampler_free(s);
	return r;
}

static void expect_refused(const seer_record_t *rec, uint64_t n, uint64_t seed, uint32_t W,
			   uint32_t B, unsigned flags, uint64_t hash, int code, const char *a,
			   const char *b)
{
	seer_sampler_t *s;
	int rc = seer_sampler_resume(n, seed, W, B, flags, hash, rec, &s);
	cr_assert_eq(rc, code, "rc %d (%s)", rc, seer_errmsg());
	cr_assert_null(s);
	cr_assert(strstr(seer_errmsg(), a) && strstr(seer_errmsg(), b),
		  "the message names neither \"%s\" nor \"%s\": %s", a, b, seer_errmsg());
	/* and the same through seer_record_check */
	cr_assert_eq(seer_sampler_resume(n, seed, W, B, flags, hash, NULL, &s), 0);
	cr_assert_eq(seer_record_check(rec, s), code);
	seer_sampler_free(s);
}

Test(record, mismatch_names_both_values)
{
	seer_record_t *r = record_at(1000, 42, 4, 8, 0, 0xabcdef, 0, 2, 5);
	expect_refused(r, 1000, 43, 4, 8, 0, 0xabcdef, SEER_ECONFIG, "seed 42", "seed 43");
	expect_refused(r, 1000, 42, 4, 8, 0, 0xabcdee, SEER_EDATASET, "0000000000abcdef",
		       "0000000000abcdee");
	expect_refused(r, 1001, 42, 4, 8, 0, 0xabcdef, SEER_EDATASET, "for 1000 samples",
		       "has 1001");
	expect_refused(r, 1000, 42, 4, 16, 0, 0xabcdef, SEER_ECONFIG, "batch size 8",
		       "batch size 16");
	expect_refused(r, 1000, 42, 4, 8, SEER_SAMPLER_DROP_LAST, 0xabcdef, SEER_ECONFIG,
		       "drop_last 0", "drop_last 1");
	expect_refused(r, 1000, 42, 4, 8, SEER_SAMPLER_NO_SHUFFLE, 0xabcdef, SEER_ECONFIG,
		       "shuffle 1", "shuffle 0");
	/* another world size is what elastic resume is for */
	for (uint32_t W = 1; W <= 9; W++) {
		seer_sampler_t *s;
		cr_assert_eq(seer_sampler_resume(1000, 42, W, 8, 0, 0xabcdef, r, &s), 0, "W=%u: %s",
			     W, seer_errmsg());
		cr_assert_eq(seer_record_check(r, s), 0);
		seer_sampler_free(s);
	}
	seer_record_free(r);
}

/* ---- merging the ranks' records ------------------------------------------------- */

static seer_record_t *merge(seer_record_t *const *in, size_t k, int want_rc)
{
	seer_record_t *m = NULL;
	int rc = seer_record_merge((const seer_record_t *const *)in, k, &m);
	cr_assert_eq(rc, want_rc, "merge: %d (%s)", rc, seer_errmsg());
	return m;
}

static bool same_bytes(const seer_record_t *a, const seer_record_t *b)
{
	uint8_t x[512], y[512];
	int64_t n1 = seer_record_encode(a, x, sizeof(x)), n2 = seer_record_encode(b, y, sizeof(y));
	return n1 == n2 && memcmp(x, y, (size_t)n1) == 0;
}

Test(record, merge_lockstep_ranks)
{
	/* 1000 over 4 ranks, batches of 8: 250 each, 32 batches */
	seer_record_t *r[4], *all = record_at(1000, 1, 4, 8, 0, 9, SEER_RECORD_ALL_RANKS, 2, 5);
	for (uint32_t q = 0; q < 4; q++)
		r[q] = record_at(1000, 1, 4, 8, 0, 9, q, 2, 5);
	/* rank 0's record alone stands for the job */
	seer_record_t *m1 = merge(r, 1, 0), *m4 = merge(r, 4, 0);
	cr_assert(same_bytes(m1, r[0]));
	cr_assert(same_bytes(m4, all), "every rank's records merge to the all-ranks record");
	seer_sampler_t *a, *b;
	cr_assert_eq(seer_sampler_resume(1000, 1, 4, 8, 0, 9, m1, &a), 0);
	cr_assert_eq(seer_sampler_resume(1000, 1, 4, 8, 0, 9, m4, &b), 0);
	uint64_t e1, s1, e2, s2;
	seer_sampler_start(a, &e1, &s1);
	seer_sampler_start(b, &e2, &s2);
	cr_assert(e1 == 2 && s1 == 5 && e2 == 2 && s2 == 5);
	seer_sampler_free(a);
	seer_sampler_free(b);
	seer_record_free(m1);
	seer_record_free(m4);
	seer_record_free(all);
	for (int q = 0; q < 4; q++)
		seer_record_free(r[q]);
}

Test(record, merge_refuses_what_it_cannot_know)
{
	seer_record_t *r[4];
	for (uint32_t q = 0; q < 4; q++)
		r[q] = record_at(1000, 1, 4, 8, 0, 9, q, 2, q == 2 ? 4 : 5);
	/* unequal counts with ranks missing */
	merge(r, 3, -EINVAL);
	cr_assert(strstr(seer_errmsg(), "ranks 0 and 2 consumed 5 and 4 batches of epoch 2") &&
			  strstr(seer_errmsg(), "records of 1 of the 4 ranks are missing (rank 3"),
		  "%s", seer_errmsg());
	/* all four: a per-rank record */
	seer_record_t *m = merge(r, 4, 0);
	char text[128];
	seer_record_describe(m, text, sizeof(text));
	cr_assert_str_eq(text, "epoch 2: 4 ranks at steps 5,5,4,5");
	seer_record_free(m);
	/* one rank, two stories */
	seer_record_t *dup[2] = { r[1], record_at(1000, 1, 4, 8, 0, 9, 1, 2, 7) };
	merge(dup, 2, -EINVAL);
	cr_assert(strstr(seer_errmsg(), "disagree on rank 1: one says it consumed 5 batches, "
					"another 7"), "%s", seer_errmsg());
	seer_record_free(dup[1]);
	/* records of two jobs */
	seer_record_t *other[2] = { r[0], record_at(1000, 2, 4, 8, 0, 9, 1, 2, 5) };
	merge(other, 2, -EINVAL);
	cr_assert(strstr(seer_errmsg(), "has seed 1, rank 1's 2"), "%s", seer_errmsg());
	seer_record_free(other[1]);
	/* epochs two apart are not one moment */
	seer_record_t *far[2] = { r[0], record_at(1000, 1, 4, 8, 0, 9, 1, 4, 0) };
	merge(far, 2, -EINVAL);
	cr_assert(strstr(seer_errmsg(), "not from one moment"), "%s", seer_errmsg());
	seer_record_free(far[1]);
	merge(r, 0, -EINVAL);
	for (int q = 0; q < 4; q++)
		seer_record_free(r[q]);
}

/* A rank that finished epoch e (its record says e + 1, step 0) merges with one
 * still in e; an epoch every rank finished becomes the next one's start. */
Test(record, merge_across_the_epoch_boundary)
{
	seer_record_t *r[2] = { record_at(1000, 1, 2, 8, 0, 9, 0, 3, 63),
				record_at(1000, 1, 2, 8, 0, 9, 1, 3, 62) };
	/* 500 per rank: 63 batches, so 63 ends the epoch */
	cr_assert_eq(seer_record_epoch(r[0]), 4);
	cr_assert_eq(seer_record_epoch(r[1]), 3);
	seer_record_t *m = merge(r, 2, 0);
	char text[128];
	seer_record_describe(m, text, sizeof(text));
	cr_assert_str_eq(text, "epoch 3: 2 ranks at steps 63,62");
	/* resumed by 3 ranks: what rank 1's last batch held, re-sharded */
	seer_sampler_t *s;
	cr_assert_eq(seer_sampler_resume(1000, 1, 3, 8, 0, 9, m, &s), 0, "%s", seer_errmsg());
	uint64_t e, st;
	seer_sampler_start(s, &e, &st);
	cr_assert(e == 3 && st == 0);
	cr_assert_eq(seer_sampler_epoch_batches(s, 3), 1); /* 4 samples over 3 ranks: 2 each, 2 of the 6 padding */
	seer_sampler_free(s);
	seer_record_free(m);
	seer_record_free(r[1]);
	r[1] = record_at(1000, 1, 2, 8, 0, 9, 1, 3, 63);
	m = merge(r, 2, 0);
	seer_record_describe(m, text, sizeof(text));
	cr_assert_str_eq(text, "epoch 4: 2 ranks at step 0");
	seer_record_free(m);
	seer_record_free(r[0]);
	seer_record_free(r[1]);
}

Test(record, sampler_record_errors)
{
	seer_sampler_t *s;
	cr_assert_eq(seer_sampler_resume(1000, 1, 4, 8, 0, 9, NULL, &s), 0);
	seer_record_t *r;
	cr_assert_eq(seer_sampler_record(s, 4, 0, 1, &r), -EINVAL);
	cr_assert_null(r);
	cr_assert_eq(seer_sampler_record(s, 0, 0, 33, &r), -ERANGE); /* 32 batches per epoch */
	cr_assert(strstr(seer_errmsg(), "epoch 0 step 33 is not a position"), "%s", seer_errmsg());
	seer_record_t *mid;
	cr_assert_eq(seer_sampler_record(s, 0, 5, 10, &mid), 0);
	seer_sampler_t *t;
	cr_assert_eq(seer_sampler_resume(1000, 1, 4, 8, 0, 9, mid, &t), 0);
	/* before the resume point: refused */
	cr_assert_eq(seer_sampler_record(t, 0, 4, 0, &r), -ERANGE);
	cr_assert_eq(seer_sampler_epoch_batches(t, 4), 0);
	uint64_t ids[8];
	cr_assert_eq(seer_sampler_batch(t, 4, 0, 0, ids), -ERANGE);
	cr_assert_eq(seer_sampler_epoch_batches(t, 5), 32);
	seer_sampler_free(t);
	seer_sampler_free(s);
	seer_record_free(mid);
}
