/* sampler_elastic: re-sharding an interrupted epoch over a new world size.
 *
 * The checks compare libseer's resumed samplers (public API, through records
 * built, merged, encoded and decoded as a trainer would) with ref_*: a
 * literal transcription of docs/resume.md that materializes every
 * segment's padded list and rank streams, sharing no arithmetic with
 * src/sampler/sampler_elastic.c. Independently of the reference they check the
 * promises: no sample of the interrupted epoch is lost or repeated (apart
 * from padding, drop_last's tail), equal batch counts per rank, later epochs
 * equal a fresh job's, determinism. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "seer.h"
#include "../../src/sampler/sampler.h"
#include "../../src/sampler/sampler_record.h"
#include "../../src/util/util.h"

#define SEED 0x5eedull
#define HASH 0xda7a5e7ull
#define EPOCH 3

/* ---- the reference -------------------------------------------------------- */

struct ref_seg {
	uint32_t world;
	const uint64_t *steps; /* world entries */
};

/* The epoch order (sample ids by position). */
static uint32_t *ref_order(uint64_t n, bool shuffle)
{
	uint32_t *o = malloc(n * sizeof(*o));
	cr_assert_not_null(o);
	if (shuffle)
		sampler_permute(SEED, EPOCH, n, o);
	else
		for (uint64_t i = 0; i < n; i++)
			o[i] = (uint32_t)i;
	return o;
}

/* One segment over list L (epoch positions, m entries): the padded list
 * (DistributedSampler: L + the epoch order's start, wrapping; or L cut),
 * rank r's stream padded[r::W], BatchSampler batches. Fills stream[r][t] with
 * the padded index and returns per_rank; *bpe the batches per rank. */
static uint64_t ref_streams(uint64_t m, uint32_t W, uint32_t B, bool drop, uint64_t ***stream,
			    uint64_t *bpe)
{
	uint64_t per_rank = drop ? m / W : (m + W - 1) / W;
	*bpe = drop ? per_rank / B : (per_rank + B - 1) / B;
	uint64_t **s = calloc(W, sizeof(*s));
	cr_assert_not_null(s);
	for (uint32_t r = 0; r < W; r++) {
		s[r] = malloc((per_rank + 1) * sizeof(**s));
		cr_assert_not_null(s[r]);
		uint64_t t = 0;
		for (uint64_t i = r; i < per_rank * W; i += W)
			s[r][t++] = i;
		cr_assert_eq(t, per_rank);
	}
	*stream = s;
	return per_rank;
}

static void ref_free_streams(uint64_t **s, uint32_t W)
{
	for (uint32_t r = 0; r < W; r++)
		free(s[r]);
	free(s);
}

/* Sample id of padded index i of list L (m entries). */
static uint32_t ref_id(const uint32_t *order, uint64_t n, const uint32_t *L, uint64_t m, uint64_t i)
{
	return i < m ? order[L[i]] : order[(i - m) % n];
}

/* Applies the finished segments to L = [0, n); counts every consumed sample
 * into cnt and consumed padding into *pads. Returns L (m entries). */
static uint32_t *ref_consume(uint64_t n, uint32_t B, bool drop, const uint32_t *order,
			     const struct ref_seg *segs, int nseg, uint64_t *m_out, uint32_t *cnt,
			     uint64_t *pads)
{
	uint32_t *L = malloc(n * sizeof(*L));
	cr_assert_not_null(L);
	for (uint64_t i = 0; i < n; i++)
		L[i] = (uint32_t)i;
	uint64_t m = n;
	for (int k = 0; k < nseg; k++) {
		uint32_t W = segs[k].world;
		uint64_t **st, bpe;
		uint64_t per_rank = ref_streams(m, W, B, drop, &st, &bpe);
		uint8_t *gone = calloc(m + 1, 1);
		cr_assert_not_null(gone);
		for (uint32_t r = 0; r < W; r++) {
			cr_assert_leq(segs[k].steps[r], bpe);
			uint64_t take = segs[k].steps[r] * B;
			for (uint64_t t = 0; t < take && t < per_rank; t++) {
				uint64_t i = st[r][t];
				cnt[ref_id(order, n, L, m, i)]++;
				if (i < m)
					gone[i] = 1;
				else
					(*pads)++;
			}
		}
		uint64_t w = 0;
		for (uint64_t i = 0; i < m; i++)
			if (!gone[i])
				L[w++] = L[i];
		m = w;
		free(gone);
		ref_free_streams(st, W);
	}
	*m_out = m;
	return L;
}

/* ---- libseer side ----------------------------------------------------------- */

static unsigned flags_of(bool drop, bool shuffle)
{
	return (drop ? SEER_SAMPLER_DROP_LAST : 0) | (shuffle ? 0 : SEER_SAMPLER_NO_SHUFFLE);
}

/* Each rank's own record of having consumed steps[r] batches of EPOCH under s,
 * merged as a job would (one record when all ranks agree: rank 0's alone),
 * then sent through bytes. */
static seer_record_t *records_of(seer_sampler_t *s, uint32_t W, const uint64_t *steps)
{
	seer_record_t **per = calloc(W, sizeof(*per));
	cr_assert_not_null(per);
	bool equal = true;
	for (uint32_t r = 0; r < W; r++) {
		int rc = seer_sampler_record(s, r, EPOCH, steps[r], &per[r]);
		cr_assert_eq(rc, 0, "record of rank %u at step %llu: %s", r,
			     (unsigned long long)steps[r], seer_errmsg());
		equal &= steps[r] == steps[0];
	}
	seer_record_t *m;
	/* lockstep: rank 0's record alone must do */
	int rc = seer_record_merge((const seer_record_t *const *)per, equal ? 1 : W, &m);
	cr_assert_eq(rc, 0, "merge: %s", seer_errmsg());
	for (uint32_t r = 0; r < W; r++)
		seer_record_free(per[r]);
	free(per);
	int64_t len = seer_record_encode(m, NULL, 0);
	cr_assert_gt(len, 0);
	uint8_t *buf = malloc((size_t)len);
	cr_assert_eq(seer_record_encode(m, buf, (size_t)len), len);
	seer_record_free(m);
	seer_record_t *back;
	cr_assert_eq(seer_record_decode(buf, (size_t)len, &back), 0, "%s", seer_errmsg());
	free(buf);
	return back;
}

static seer_sampler_t *resumed(uint64_t n, uint32_t W, uint32_t B, bool drop, bool shuffle,
			       const seer_record_t *rec)
{
	seer_sampler_t *s;
	int rc = seer_sampler_resume(n, SEED, W, B, flags_of(drop, shuffle), HASH, rec, &s);
	cr_assert_eq(rc, 0, "resume n=%llu W=%u B=%u drop=%d: %s", (unsigned long long)n, W, B,
		     drop, seer_errmsg());
	return s;
}

/* Batches of `epoch` of s, rank r's steps from..to[r]-1 (to NULL: the
 * epoch's end), counted into cnt and compared with the reference segment over
 * list L (m entries) with W ranks, at the same absolute step. Returns the
 * samples taken. */
static uint64_t take(seer_sampler_t *s, uint32_t W, uint32_t B, bool drop, uint64_t from,
		     const uint64_t *to, uint32_t *cnt, const uint32_t *order, uint64_t n,
		     const uint32_t *L, uint64_t m)
{
	uint64_t nb = seer_sampler_epoch_batches(s, EPOCH), total = 0;
	uint64_t *ids = malloc(B * sizeof(*ids));
	uint64_t **st, bpe;
	uint64_t per_rank = ref_streams(m, W, B, drop, &st, &bpe);
	cr_assert_eq(nb, bpe, "%llu batches per rank, the reference %llu", (unsigned long long)nb,
		     (unsigned long long)bpe);
	for (uint32_t r = 0; r < W; r++) {
		uint64_t end = to ? to[r] : nb;
		for (uint64_t b = from; b < end; b++) {
			int len = seer_sampler_batch(s, EPOCH, r, b, ids);
			cr_assert_gt(len, 0, "rank %u step %llu: %d (%s)", r, (unsigned long long)b,
				     len, seer_errmsg());
			cr_assert_eq((uint64_t)len, MIN((uint64_t)B, per_rank - b * B));
			for (int i = 0; i < len; i++) {
				uint32_t want = ref_id(order, n, L, m, st[r][b * B + (uint64_t)i]);
				cr_assert_eq(ids[i], want, "rank %u step %llu [%d]: %llu, want %u", r,
					     (unsigned long long)b, i, (unsigned long long)ids[i], want);
				cnt[ids[i]]++;
				total++;
			}
		}
		/* equal batch counts: one past the end is out of range for every rank */
		cr_assert_eq(seer_sampler_batch(s, EPOCH, r, nb, ids), -ERANGE);
	}
	ref_free_streams(st, W);
	free(ids);
	return total;
}

/* Two samplers agree on every batch of epochs [e0, e1). */
static void same_epochs(seer_sampler_t *a, seer_sampler_t *b, uint32_t W, uint32_t B, uint64_t e0,
			uint64_t e1)
{
	uint64_t *x = malloc(B * sizeof(*x)), *y = malloc(B * sizeof(*y));
	for (uint64_t e = e0; e < e1; e++) {
		uint64_t nb = seer_sampler_epoch_batches(a, e);
		cr_assert_eq(nb, seer_sampler_epoch_batches(b, e), "epoch %llu", (unsigned long long)e);
		for (uint32_t r = 0; r < W; r++)
			for (uint64_t st = 0; st < nb; st++) {
				int n1 = seer_sampler_batch(a, e, r, st, x);
				int n2 = seer_sampler_batch(b, e, r, st, y);
				cr_assert_eq(n1, n2);
				cr_assert_gt(n1, 0);
				cr_assert_arr_eq(x, y, (size_t)n1 * sizeof(*x),
						 "epoch %llu rank %u step %llu differs",
						 (unsigned long long)e, r, (unsigned long long)st);
			}
	}
	free(x);
	free(y);
}

/* ---- the scenario runner ------------------------------------------------------ */

#define MAXW 16

/* A stage: `world` ranks run and rank r consumes code[r] of what is left of
 * the running segment: c >= 0 is c% of the batches left (rounded down), -1
 * one batch, -2 all but one. */
struct stage {
	uint32_t world;
	int16_t code[MAXW];
};

static uint64_t steps_of(int16_t c, uint64_t left)
{
	if (c == -1)
		return MIN(left, 1);
	if (c == -2)
		return left ? left - 1 : 0;
	return left * (uint64_t)c / 100;
}

struct scenario {
	uint64_t n;
	uint32_t B;
	bool drop, shuffle;
	const struct stage *st;
	int K;          /* stages run before the final restart */
	uint32_t Wfin;  /* the final world */
};

struct run_state {
	uint32_t *order, *cnt;
	struct ref_seg segs[SMP_REC_MAX_SEGS];
	uint64_t steps[SMP_REC_MAX_SEGS][MAXW];
	int nseg;
	uint32_t W, maxW;
	uint64_t from;   /* first step of the running segment the next sampler delivers */
	bool ended;      /* the interrupted epoch is over */
};

static uint32_t *ref_list(const struct scenario *sc, struct run_state *rs, uint64_t *m)
{
	uint32_t *scratch = calloc(sc->n, sizeof(*scratch));
	uint64_t pads = 0;
	uint32_t *L = ref_consume(sc->n, sc->B, sc->drop, rs->order, rs->segs, rs->nseg, m,
				  scratch, &pads);
	free(scratch);
	return L;
}

/* Stage k: consume, save records, restart with Wn; checks where the new
 * sampler starts. Returns the new sampler (and its record in *rec). */
static seer_sampler_t *run_stage(const struct scenario *sc, struct run_state *rs,
				 seer_sampler_t *s, int k, uint32_t Wn, seer_record_t **rec)
{
	uint64_t e, st0, m;
	seer_sampler_start(s, &e, &st0);
	/* a fresh job starts at 0:0, a resumed one where the last left off */
	cr_assert_eq(e, k == 0 ? 0 : EPOCH, "stage %d starts in epoch %llu", k, (unsigned long long)e);
	cr_assert_eq(st0, rs->from);
	uint64_t nb = seer_sampler_epoch_batches(s, EPOCH), steps[MAXW];
	bool complete = true, uniform = true;
	for (uint32_t r = 0; r < rs->W; r++) {
		steps[r] = rs->from + steps_of(sc->st[k].code[r], nb - rs->from);
		complete &= steps[r] == nb;
		uniform &= steps[r] == steps[0];
	}
	uint32_t *L = ref_list(sc, rs, &m);
	take(s, rs->W, sc->B, sc->drop, rs->from, steps, rs->cnt, rs->order, sc->n, L, m);
	free(L);
	*rec = records_of(s, rs->W, steps);
	seer_sampler_t *next = resumed(sc->n, Wn, sc->B, sc->drop, sc->shuffle, *rec);
	seer_sampler_start(next, &e, &st0);
	rs->maxW = MAX(rs->maxW, Wn);
	if (complete) {
		cr_assert(e == EPOCH + 1 && st0 == 0, "a complete epoch resumes at %llu:%llu",
			  (unsigned long long)e, (unsigned long long)st0);
		rs->ended = true;
		rs->W = Wn;
	} else if (uniform && Wn == rs->W && steps[0] > 0) {
		/* the same world continues its segment, steps numbered on */
		cr_assert(e == EPOCH && st0 == steps[0], "continues at %llu:%llu, want %d:%llu",
			  (unsigned long long)e, (unsigned long long)st0, EPOCH,
			  (unsigned long long)steps[0]);
		rs->from = steps[0];
	} else {
		memcpy(rs->steps[rs->nseg], steps, sizeof(steps));
		rs->segs[rs->nseg] = (struct ref_seg){ rs->W, rs->steps[rs->nseg] };
		rs->nseg++;
		rs->from = 0;
		rs->W = Wn;
		free(ref_list(sc, rs, &m));
		struct sampler_shape tmp;
		bool gives = sampler_shape_init(&tmp, m, 0, Wn, sc->B, sc->drop, true) == 0;
		rs->ended = !gives;
		cr_assert(gives ? e == EPOCH && st0 == 0 : e == EPOCH + 1 && st0 == 0,
			  "%llu samples left over %u ranks: resumes at %llu:%llu",
			  (unsigned long long)m, Wn, (unsigned long long)e, (unsigned long long)st0);
	}
	return next;
}

/* The promises, without the reference: no gap, repeats only as padding. */
static void check_coverage(const struct scenario *sc, const struct run_state *rs)
{
	uint64_t extra = 0, missing = 0;
	for (uint64_t i = 0; i < sc->n; i++) {
		uint32_t c = rs->cnt[rs->order[i]];
		if (sc->drop) {
			cr_assert_leq(c, 1, "drop_last: sample %u delivered %u times", rs->order[i], c);
			missing += c == 0;
		} else {
			cr_assert_geq(c, 1, "sample %u (position %llu) never delivered", rs->order[i],
				      (unsigned long long)i);
			/* padding repeats the epoch order's start, < W per segment */
			if (c > 1 && sc->n >= rs->maxW)
				cr_assert_lt(i, rs->maxW, "position %llu delivered %u times",
					     (unsigned long long)i, c);
			extra += c - 1;
		}
	}
	cr_assert_lt(extra, (uint64_t)(rs->nseg + 1) * rs->maxW);
	/* what drop_last loses is less than a batch per rank plus the rounding */
	cr_assert_lt(missing, (uint64_t)rs->maxW * (sc->B + 1));
}

static void run(const struct scenario *sc)
{
	struct run_state rs;
	memset(&rs, 0, sizeof(rs));
	rs.W = rs.maxW = sc->st[0].world;
	rs.order = ref_order(sc->n, sc->shuffle);
	rs.cnt = calloc(sc->n, sizeof(*rs.cnt));
	seer_sampler_t *s = resumed(sc->n, rs.W, sc->B, sc->drop, sc->shuffle, NULL);
	seer_record_t *rec = NULL;
	for (int k = 0; k < sc->K && !rs.ended; k++) {
		seer_record_free(rec);
		uint32_t Wn = k + 1 < sc->K ? sc->st[k + 1].world : sc->Wfin;
		seer_sampler_t *next = run_stage(sc, &rs, s, k, Wn, &rec);
		seer_sampler_free(s);
		s = next;
	}
	cr_assert(rs.ended || rs.W == sc->Wfin);
	if (!rs.ended) {
		uint64_t m;
		uint32_t *L = ref_list(sc, &rs, &m);
		take(s, rs.W, sc->B, sc->drop, rs.from, NULL, rs.cnt, rs.order, sc->n, L, m);
		free(L);
		/* determinism: the same record gives the same batches */
		seer_sampler_t *again = resumed(sc->n, sc->Wfin, sc->B, sc->drop, sc->shuffle, rec);
		same_epochs(s, again, sc->Wfin, sc->B, EPOCH, EPOCH + 1);
		seer_sampler_free(again);
	}
	check_coverage(sc, &rs);
	/* later epochs are a fresh job's of the final world */
	seer_sampler_t *fresh = resumed(sc->n, rs.W, sc->B, sc->drop, sc->shuffle, NULL);
	same_epochs(s, fresh, rs.W, sc->B, EPOCH + 1, EPOCH + 3);
	uint64_t ids[64];
	cr_assert_eq(seer_sampler_batch(s, EPOCH - 1, 0, 0, ids), -ERANGE);
	seer_sampler_free(fresh);
	seer_sampler_free(s);
	seer_record_free(rec);
	free(rs.order);
	free(rs.cnt);
}

/* ---- one restart: the matrix of the issue ----------------------------------- */

struct pair {
	uint32_t w, w2;
	bool drop;
};

static struct pair pairs[] = {
	{ 4, 2, false }, { 4, 2, true }, { 2, 3, false }, { 2, 3, true },
	{ 3, 4, false }, { 3, 4, true }, { 1, 4, false }, { 1, 4, true },
	{ 4, 1, false }, { 4, 1, true }, { 8, 3, false }, { 8, 3, true },
	/* the same world after a crash left ranks at different steps */
	{ 4, 4, false }, { 3, 3, true },
};

/* consumption patterns per rank (see struct stage): all equal at 0, one
 * batch, half, all but one, all; and unequal ones a crash can leave */
static const int16_t patterns[][MAXW] = {
	{ 0, 0, 0, 0, 0, 0, 0, 0 },
	{ -1, -1, -1, -1, -1, -1, -1, -1 },
	{ 50, 50, 50, 50, 50, 50, 50, 50 },
	{ -2, -2, -2, -2, -2, -2, -2, -2 },
	{ 100, 100, 100, 100, 100, 100, 100, 100 },
	{ 100, 0, 100, 0, 100, 0, 100, 0 },
	{ 30, 70, 0, 100, -2, -1, 50, 20 },
	{ -2, -2, -1, -2, -2, -2, -2, -2 },
	{ 100, 100, 100, -2, 100, 100, 100, 100 },
	{ 0, 0, -1, 0, 0, 0, 0, 0 },
};

ParameterizedTestParameters(elastic, one_restart)
{
	return cr_make_param_array(struct pair, pairs, sizeof(pairs) / sizeof(pairs[0]));
}

/* W -> W' for every dataset size (tiny ones, remainders smaller than W'),
 * batch size and consumption pattern. */
ParameterizedTest(struct pair *p, elastic, one_restart)
{
	static const uint64_t ns[] = { 1, 2, 3, 4, 5, 7, 8, 10, 13, 17, 24, 31, 64, 100, 257 };
	static const uint32_t bs[] = { 1, 2, 3, 5, 8 };
	unsigned ran = 0;
	for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++)
		for (size_t b = 0; b < sizeof(bs) / sizeof(bs[0]); b++) {
			struct sampler_shape sh;
			if (sampler_shape_init(&sh, ns[a], 0, p->w, bs[b], p->drop, true) != 0)
				continue; /* the original job cannot run */
			if (sampler_shape_init(&sh, ns[a], 0, p->w2, bs[b], p->drop, true) != 0) {
				/* nor can the new one: refused, whatever the record */
				seer_sampler_t *s;
				cr_assert_eq(seer_sampler_resume(ns[a], SEED, p->w2, bs[b],
								 flags_of(p->drop, true), HASH, NULL,
								 &s), -ERANGE);
				continue;
			}
			for (size_t q = 0; q < sizeof(patterns) / sizeof(patterns[0]); q++) {
				struct stage st = { .world = p->w };
				memcpy(st.code, patterns[q], sizeof(st.code));
				struct scenario sc = { ns[a], bs[b], p->drop, (q + a) % 4 != 0, &st, 1,
						       p->w2 };
				run(&sc);
				ran++;
			}
		}
	cr_assert_gt(ran, 150, "%u scenarios", ran);
}

/* ---- nested restarts: resized two and three times within one epoch --------- */

struct nested {
	struct stage st[4];
	int K;
	uint32_t Wfin;
};

static const struct nested nested_cases[] = {
	{ { { 4, { 50, 30, 60, 10 } }, { 3, { 40, 40, 40 } } }, 2, 2 },
	{ { { 2, { 25, 50 } }, { 5, { -1, 0, 80, 30, 50 } } }, 2, 1 },
	/* same world, unequal (new segment), then equal (continues), then 4 */
	{ { { 3, { 20, 40, 30 } }, { 3, { 10, 60, 0 } }, { 3, { 30, 30, 30 } } }, 3, 4 },
	{ { { 8, { 10, 10, 10, 10, 20, 20, 20, 20 } }, { 3, { 30, 0, 60 } },
	    { 8, { 50, 50, 50, 50, 50, 50, 50, -2 } } }, 3, 1 },
	{ { { 1, { 30 } }, { 4, { 25, 25, 25, 25 } }, { 2, { -2, -1 } } }, 3, 3 },
	/* a stage that ends the epoch: later stages never run */
	{ { { 2, { 50, 50 } }, { 3, { 100, 100, 100 } }, { 2, { 50, 50 } } }, 3, 4 },
};

Test(elastic, nested_restarts)
{
	static const uint64_t ns[] = { 5, 17, 64, 100, 257, 1000 };
	static const uint32_t bs[] = { 1, 2, 3, 8 };
	unsigned ran = 0;
	for (size_t c = 0; c < sizeof(nested_cases) / sizeof(nested_cases[0]); c++)
		for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++)
			for (size_t b = 0; b < sizeof(bs) / sizeof(bs[0]); b++)
				for (int drop = 0; drop < 2; drop++) {
					const struct nested *nc = &nested_cases[c];
					bool ok = true;
					struct sampler_shape sh;
					for (int k = 0; k < nc->K; k++)
						ok &= sampler_shape_init(&sh, ns[a], 0, nc->st[k].world,
								     bs[b], drop, true) == 0;
					ok &= sampler_shape_init(&sh, ns[a], 0, nc->Wfin, bs[b], drop,
							     true) == 0;
					if (!ok)
						continue;
					struct scenario sc = { ns[a], bs[b], drop, true, nc->st, nc->K,
							       nc->Wfin };
					run(&sc);
					ran++;
				}
	cr_assert_gt(ran, 200, "%u scenarios", ran);
}

/* The nested record says what happened, segment by segment. */
Test(elastic, nested_record_describes_segments)
{
	seer_sampler_t *s = resumed(100, 4, 2, false, true, NULL), *s2, *s3;
	const uint64_t c0[4] = { 5, 3, 5, 4 }, c1[3] = { 2, 2, 2 };
	seer_record_t *r0 = records_of(s, 4, c0);
	s2 = resumed(100, 3, 2, false, true, r0);
	seer_record_t *r1 = records_of(s2, 3, c1);
	s3 = resumed(100, 2, 2, false, true, r1);
	char text[256];
	seer_record_describe(r1, text, sizeof(text));
	cr_assert_str_eq(text, "epoch 3: 4 ranks at steps 5,3,5,4, then 3 ranks at step 2 (saved by "
			       "rank 0)");
	uint64_t e, st;
	seer_sampler_start(s3, &e, &st);
	cr_assert(e == EPOCH && st == 0);
	/* 100 - (10+6+10+8) = 66 left over 3 ranks: 22 each, 11 batches of 2;
	 * then 66 - 3*4 = 54 over 2 ranks: 27 each, 14 batches (the last of 1) */
	cr_assert_eq(seer_sampler_epoch_batches(s2, EPOCH), 11);
	cr_assert_eq(seer_sampler_epoch_batches(s3, EPOCH), 14);
	seer_record_free(r0);
	seer_record_free(r1);
	seer_sampler_free(s);
	seer_sampler_free(s2);
	seer_sampler_free(s3);
}

/* ---- the two identities the design rests on --------------------------------- */

static seer_record_t *craft(uint64_t n, uint32_t B, bool drop, uint32_t nseg,
			    const uint32_t *worlds, const uint64_t *steps)
{
	struct sampler_job job = { n, SEED, HASH, worlds[nseg - 1], B, drop, true };
	struct sampler_record r;
	sampler_record_init(&r, &job, EPOCH, SMP_REC_ALL);
	for (uint32_t k = 0; k < nseg; k++)
		cr_assert_eq(sampler_record_push(&r, worlds[k], 1, &steps[k]), 0);
	size_t len = sampler_record_size(&r);
	uint8_t *buf = malloc(len);
	sampler_record_encode(&r, buf);
	sampler_record_free(&r);
	seer_record_t *out;
	cr_assert_eq(seer_record_decode(buf, len, &out), 0, "%s", seer_errmsg());
	free(buf);
	return out;
}

/* Re-sharding what W ranks at step c left, over the same W, is the rest of
 * the unbroken epoch (padding included): the record [(W, c), (W, 0)] forces
 * the re-sharding path (its empty last segment is dropped, a new one made). */
Test(elastic, same_world_resharding_is_the_unbroken_run)
{
	static const uint64_t ns[] = { 7, 10, 33, 100, 101 };
	for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++)
		for (uint32_t W = 1; W <= 5; W++)
			for (uint32_t B = 1; B <= 4; B++)
				for (int drop = 0; drop < 2; drop++) {
					seer_sampler_t *fresh;
					if (seer_sampler_resume(ns[a], SEED, W, B, flags_of(drop, true),
								HASH, NULL, &fresh) != 0)
						continue;
					uint64_t bpe = seer_sampler_batches_per_epoch(fresh);
					for (uint64_t c = 1; c < bpe; c++) {
						const uint32_t worlds[2] = { W, W };
						const uint64_t steps[2] = { c, 0 };
						seer_record_t *rec = craft(ns[a], B, drop, 2, worlds, steps);
						seer_sampler_t *s = resumed(ns[a], W, B, drop, true, rec);
						cr_assert_eq(seer_sampler_epoch_batches(s, EPOCH), bpe - c);
						uint64_t x[8], y[8];
						for (uint32_t r = 0; r < W; r++)
							for (uint64_t j = 0; j < bpe - c; j++) {
								int n1 = seer_sampler_batch(s, EPOCH, r, j, x);
								int n2 = seer_sampler_batch(fresh, EPOCH, r,
											    c + j, y);
								cr_assert_eq(n1, n2);
								cr_assert_arr_eq(x, y, (size_t)n1 * 8,
										 "n=%llu W=%u B=%u c=%llu",
										 (unsigned long long)ns[a],
										 W, B,
										 (unsigned long long)c);
							}
						seer_record_free(rec);
						seer_sampler_free(s);
					}
					seer_sampler_free(fresh);
				}
}

/* A segment over the untouched epoch is a fresh job's epoch, for any world:
 * [(W0, 0), (W1, 0)] re-shards all n positions over W'. */
Test(elastic, untouched_epoch_is_a_fresh_epoch)
{
	static const uint32_t W2[] = { 1, 2, 3, 5, 8 };
	for (size_t w = 0; w < sizeof(W2) / sizeof(W2[0]); w++)
		for (int drop = 0; drop < 2; drop++) {
			const uint32_t worlds[2] = { 4, 3 };
			const uint64_t steps[2] = { 0, 0 };
			seer_record_t *rec = craft(101, 3, drop, 2, worlds, steps);
			seer_sampler_t *s = resumed(101, W2[w], 3, drop, true, rec);
			seer_sampler_t *fresh = resumed(101, W2[w], 3, drop, true, NULL);
			same_epochs(s, fresh, W2[w], 3, EPOCH, EPOCH + 2);
			seer_record_free(rec);
			seer_sampler_free(s);
			seer_sampler_free(fresh);
		}
}
