/* Elastic resume: the rest of an interrupted epoch, re-sharded exactly over
 * a new number of trainers (docs/resume.md has the full statement).
 *
 * An epoch's delivery is a list of segments (sampler_record.h). Segment k
 * works on a list L_k of epoch positions (indices into the epoch's order):
 * L_0 = [0, n). With m_k = |L_k| it shards L_k like DistributedSampler +
 * BatchSampler (sampler.h) over its W_k trainers: per_rank and bpe from
 * (m_k, W_k, batch, drop_last); rank r's stream is the indices
 * r, r + W_k, ... (< per_rank * W_k) of L_k padded to per_rank * W_k
 * entries. Padding (drop_last false) follows the epoch's own rule: padded
 * index m_k + j is epoch position j mod n, the epoch order's start, as in an
 * unbroken epoch. Rank r consumed its first steps[r] batches, i.e. its first
 * min(steps[r] * batch, per_rank) stream entries. L_{k+1} is L_k without the
 * entries consumed (padded entries are not in L_k, so consuming them changes
 * nothing), in L_k's order.
 *
 * Consequences (tested): a segment whose ranks all consumed c batches leaves
 * L_k minus its first c * batch * W_k entries, so re-sharding over the same
 * W gives exactly the batches an unbroken run gives from step c; a segment
 * over untouched L_0 with any W gives a fresh W job's epoch.
 *
 * The epoch is over when every rank of the last segment consumed its bpe
 * batches (or when the remainder gives a new world no batch). Later epochs
 * are plain epochs of the new world.
 *
 * Threads: no shared state; a struct sampler_resume is read-only after init and
 * may be shared by readers. Failures: negative errno or SEER_E* with
 * err_set(). */
#ifndef SEER_SAMPLER_ELASTIC_H
#define SEER_SAMPLER_ELASTIC_H

#include <stdbool.h>
#include <stdint.h>

#include "sampler.h"
#include "sampler_record.h"

/* Shape of a segment over m list entries: sampler_shape_init's counts, with
 * bpe == 0 (and no error) when the segment gives no batch. */
struct sampler_seg_shape {
	uint64_t m;
	uint64_t per_rank;
	uint64_t bpe;
	uint32_t world;
};
void sampler_seg_shape(uint64_t m, uint32_t world, uint32_t batch, bool drop_last,
		   struct sampler_seg_shape *out);
/* List entries (not padding) the segment's ranks consumed. */
uint64_t sampler_seg_consumed(const struct sampler_seg_shape *sh, uint32_t batch,
			  const struct sampler_segment *seg);

/* Checks a record's counts against its segments' shapes: every segment gives
 * at least one batch, no rank consumed more than bpe, only the last segment
 * may be complete. 0 or -EBADMSG (err_set() says which segment and rank).
 * m_out (optional) gets the remainder length after each segment: m_out[k] is
 * |L_{k+1}|. */
int sampler_record_validate(const struct sampler_record *r, uint64_t *m_out);

/* Canonical form: per-rank counts that are all equal become one count; a
 * complete last segment becomes the next epoch's start (epoch + 1, one
 * segment of the same world at step 0). Assumes a validated record. 0 or
 * -ENOMEM. */
int sampler_record_normalize(struct sampler_record *r);

/* One record from several (each DDP rank saves its own). All must share the
 * fingerprint and the epoch's history (a rank at the start of epoch e + 1
 * counts as having finished epoch e). Ranks whose counts are known from the
 * inputs must agree, or every rank must be known. 0, -EINVAL with err_set()
 * naming the disagreeing ranks and values, -EBADMSG, -ENOMEM. *out is
 * normalized; free it with sampler_record_free(). */
int sampler_record_merge(const struct sampler_record *const *in, size_t k, struct sampler_record *out);

/* The resumed job: (epoch, step) it starts at, and the interrupted epoch's
 * remainder when that epoch runs re-sharded. */
struct sampler_resume {
	struct sampler_job job;       /* the new job (its world W') */
	uint64_t epoch;           /* first epoch delivered */
	uint64_t step;            /* first step delivered in it */
	bool elastic;             /* `epoch` runs the remainder below */
	struct sampler_seg_shape rsh; /* the running segment: m entries over W' */
	uint32_t *pos;            /* rsh.m epoch positions (L of the running segment) */
	struct sampler_record hist;   /* epoch and the finished segments before it */
};

/* Plans `job` resuming from `rec` (NULL: a fresh job at 0:0). The record is
 * validated and checked against the job (see sampler_record_check_job).
 *  - last segment complete: epoch + 1, step 0;
 *  - last segment's ranks all at c and world == W': that segment continues
 *    at step c (a plain epoch when it is segment 0);
 *  - otherwise a new segment of W' ranks over what nobody consumed, from
 *    step 0 (epoch + 1 when it gives no batch).
 * 0 or a negative code; free with sampler_resume_free(). */
int sampler_resume_init(struct sampler_resume *p, const struct sampler_job *job, const struct sampler_record *rec);
void sampler_resume_free(struct sampler_resume *p);

/* Batches per rank in `epoch` (0 for epochs before the resume point). */
uint64_t sampler_resume_batches(const struct sampler_resume *p, const struct sampler_shape *sh,
			    uint64_t epoch);
/* Batch `step` of `rank` of the running segment (p->elastic), from the
 * epoch's order; returns its length or -ERANGE. */
int sampler_resume_batch(const struct sampler_resume *p, const uint32_t *order, uint32_t rank,
		     uint64_t step, uint32_t *ids);
/* The record of `rank` (or SMP_REC_ALL: every rank) having consumed `steps`
 * batches of `epoch` as this plan numbers them; normalized. 0, -ERANGE (an
 * epoch before the resume point, steps past the epoch's batches), -ENOMEM. */
int sampler_resume_record(const struct sampler_resume *p, const struct sampler_shape *sh, uint32_t rank,
		      uint64_t epoch, uint64_t steps, struct sampler_record *out);

/* ---- a resumed job's batches, numbered -------------------------------------
 * The job's plan (p, NULL for a fresh job) fixes which batches each epoch has:
 * the re-sharded epoch p->epoch has p->rsh.bpe per rank, every other epoch the
 * plain bpe. Daemon and client number a rank's batches through the job with
 * one global index g: epoch * bpe + step up to the re-sharded epoch, shifted
 * by the difference after it (a fresh job's g is epoch * bpe + step). */
struct sampler_timeline {
	uint64_t bpe;      /* batches per rank of a plain epoch */
	uint64_t epoch;    /* the re-sharded epoch (0 when none: nb == bpe) */
	uint64_t nb;       /* its batches per rank */
	uint64_t epochs;   /* epochs in the job */
};

void sampler_timeline_init(struct sampler_timeline *tl, uint64_t bpe, uint64_t epochs,
		       const struct sampler_resume *p);

static inline uint64_t sampler_tl_batches(const struct sampler_timeline *tl, uint64_t epoch)
{
	return epoch == tl->epoch ? tl->nb : tl->bpe;
}

/* g of (epoch, step); (epochs, 0) is the job's end. */
static inline uint64_t sampler_tl_g(const struct sampler_timeline *tl, uint64_t epoch, uint64_t step)
{
	if (epoch <= tl->epoch)
		return epoch * tl->bpe + step;
	return tl->epoch * tl->bpe + tl->nb + (epoch - tl->epoch - 1) * tl->bpe + step;
}

static inline uint64_t sampler_tl_end(const struct sampler_timeline *tl)
{
	return sampler_tl_g(tl, tl->epochs, 0);
}

static inline void sampler_tl_pos(const struct sampler_timeline *tl, uint64_t g, uint64_t *epoch,
			      uint64_t *step)
{
	uint64_t g0 = tl->epoch * tl->bpe;
	if (g < g0) {
		*epoch = g / tl->bpe;
		*step = g % tl->bpe;
	} else if (g - g0 < tl->nb) {
		*epoch = tl->epoch;
		*step = g - g0;
	} else {
		uint64_t h = g - g0 - tl->nb;
		*epoch = tl->epoch + 1 + h / tl->bpe;
		*step = h % tl->bpe;
	}
}

/* Batch `step` of `rank` in `epoch` of the job planned by p (NULL: a fresh
 * job), from the cache's orders: the re-sharded epoch by sampler_resume_batch,
 * the others by sampler_batch. Returns its length, -ERANGE or -ENOMEM. */
int sampler_plan_batch(struct sampler_cache *c, const struct sampler_resume *p, uint64_t epoch,
		   uint32_t rank, uint64_t step, uint32_t *ids);
/* Samples in that batch (step within the epoch's batches). */
uint32_t sampler_plan_batch_len(const struct sampler_shape *sh, const struct sampler_resume *p,
			    uint64_t epoch, uint64_t step);

#endif /* SEER_SAMPLER_ELASTIC_H */
