/* Checkpoint records: where a job stands in its access sequence, saved by the
 * trainer with its model checkpoint and given back to resume exactly there,
 * with the same or another number of trainers (docs/resume.md).
 *
 * A record holds the job's fingerprint (what must not change for the
 * position to mean the same samples) and the position: the epoch and the
 * list of segments that delivered part of it. Segment 0 is the epoch as the
 * job first ran it; each elastic restart within the epoch appends one
 * (sampler_elastic.h defines what a segment delivers).
 *
 * This module owns the in-memory form and the byte form (little-endian,
 * versioned, CRC-32 checked); sampler_elastic.c owns the meaning (validation
 * against segment shapes, merging, resume plans).
 *
 * Threads: plain data, no shared state. Failures return a negative errno
 * (-EBADMSG for bytes that are not a valid record, -ENOMEM) with err_set()
 * saying what is wrong; the client library never aborts on them. */
#ifndef SEER_SAMPLER_RECORD_H
#define SEER_SAMPLER_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SMP_REC_MAGIC "SEERPOS\0"  /* 8 bytes */
#define SMP_REC_VERSION 1u
#define SMP_REC_ALL UINT32_MAX     /* rank of a record that speaks for every rank */
#define SMP_REC_MAX_SEGS 64u       /* elastic restarts within one epoch, plus one */
#define SMP_REC_MAX_WORLD (1u << 20)
#define SMP_REC_HDR_SIZE 72u
#define SMP_REC_FLAG_DROP_LAST 1u
#define SMP_REC_FLAG_SHUFFLE 2u

/* The job fingerprint. world is the number of trainers when the record was
 * made (the last segment's); every other field must match the job that
 * resumes from the record. */
struct sampler_job {
	uint64_t n;             /* samples in the dataset */
	uint64_t seed;
	uint64_t dataset_hash;  /* the catalog's content hash; 0 when unknown */
	uint32_t world;
	uint32_t batch;
	bool drop_last;
	bool shuffle;
};

/* One segment: `world` trainers, rank r consumed steps[r] batches of it
 * (nsteps == world), or every rank steps[0] (nsteps == 1). */
struct sampler_segment {
	uint32_t world;
	uint32_t nsteps;
	uint64_t *steps; /* owned by the record */
};

struct sampler_record {
	struct sampler_job job;
	uint64_t epoch;
	/* The rank that saved the record, whose count is the last segment's
	 * steps[0] (a DDP rank speaks for all: ranks move in lockstep), or
	 * SMP_REC_ALL for a record that knows every rank (built for the whole
	 * job, or merged). */
	uint32_t rank;
	uint32_t nseg;
	struct sampler_segment seg[SMP_REC_MAX_SEGS];
};

/* An empty record (no segment) for `job` at `epoch`. */
void sampler_record_init(struct sampler_record *r, const struct sampler_job *job, uint64_t epoch,
		     uint32_t rank);
void sampler_record_free(struct sampler_record *r);
/* Appends a segment (steps copied); 0, -E2BIG past SMP_REC_MAX_SEGS,
 * -EINVAL for nsteps not 1 or world, -ENOMEM. */
int sampler_record_push(struct sampler_record *r, uint32_t world, uint32_t nsteps,
		    const uint64_t *steps);
/* Deep copy of the first `nseg` segments of src (all when nseg >= src->nseg);
 * dst is overwritten (not freed first). 0 or -ENOMEM. */
int sampler_record_copy(struct sampler_record *dst, const struct sampler_record *src, uint32_t nseg);
/* Steps rank `rank` consumed in segment `k`. */
static inline uint64_t sampler_seg_steps(const struct sampler_segment *s, uint32_t rank)
{
	return s->nsteps == 1 ? s->steps[0] : s->steps[rank];
}

/* Byte form. Layout (little-endian):
 *   0  magic "SEERPOS\0"   8  u16 version   10 u16 header size (72)
 *   12 u32 total size (with the checksum)
 *   16 u64 nsamples  24 u64 seed  32 u64 dataset hash  40 u64 epoch
 *   48 u32 batch  52 u32 world  56 u32 rank  60 u32 flags (1 drop_last, 2 shuffle)
 *   64 u32 segments  68 u32 reserved (0)
 *   then per segment: u32 world, u32 nsteps, u64 steps[nsteps]
 *   last 4 bytes: CRC-32 (zlib's) of everything before them. */
size_t sampler_record_size(const struct sampler_record *r);
/* Writes sampler_record_size(r) bytes. */
void sampler_record_encode(const struct sampler_record *r, uint8_t *buf);
/* Parses and checks the structure (magic, version, sizes, checksum, segment
 * lists); not the counts against segment shapes (sampler_record_validate).
 * On success *r owns its segments; on failure *r holds nothing. */
int sampler_record_decode(const uint8_t *buf, size_t len, struct sampler_record *r);

/* Compares the fingerprint with `job` (world excepted: that is what an
 * elastic restart changes). 0, SEER_EDATASET (other sample count or dataset
 * hash) or SEER_ECONFIG (other seed, batch size, drop_last, shuffle), with
 * err_set() naming the field and both values. */
int sampler_record_check_job(const struct sampler_record *r, const struct sampler_job *job);

/* "epoch 3, 4 ranks at step 5" / "epoch 3: 4 ranks at steps 5,5,4,5, then 2
 * ranks at step 1". Truncated to len. */
void sampler_record_describe(const struct sampler_record *r, char *buf, size_t len);

#endif /* SEER_SAMPLER_RECORD_H */
