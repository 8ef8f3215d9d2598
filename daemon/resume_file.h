/* The resume files' bytes and which batch a rank resumes at: pure
 * functions of bytes in memory (resume.c reads, writes and maps the files;
 * docs/resume.md says what they are for).
 *
 *   plan           the job's fingerprint, world size and epochs, the record
 *                  the plan was made from, and every rank's start;
 *   <run>-r<rank>  per rank, its first batch not released (struct
 *                  resume_slot, 64 bytes, updated in place with one aligned
 *                  8-byte store).
 *
 * Owns nothing; no I/O, no thread of its own, no logging (any thread; the
 * daemon calls them on the dispatcher). Failure: bytes that are damaged, or
 * of another run, rank or world size, are refused (-EBADMSG for a plan,
 * -ENOENT for a rank's slot: that rank is at the plan's start); out of
 * memory aborts (resume_file_plan_encode). tests/unit/test_resume_file.c
 * drives them. */
#ifndef SEERD_RESUME_FILE_H
#define SEERD_RESUME_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../src/sampler/sampler_record.h"

/* A rank's position file, as mapped. */
struct resume_slot {
	char magic[8];
	uint64_t run;
	uint32_t rank, world;
	uint32_t crc;      /* of the bytes before it */
	uint32_t pad_;
	uint64_t g;        /* first batch not released: stored whole, in place */
	uint8_t pad2_[24];
};
_Static_assert(sizeof(struct resume_slot) == 64, "rank file layout");
_Static_assert(offsetof(struct resume_slot, g) % 8 == 0, "g is one aligned store");

/* The plan file's contents. Decoded, rec and the starts point into the
 * bytes given (valid while they are). */
struct resume_plan {
	uint32_t run;
	struct sampler_job job;  /* its world is the saved run's world size */
	uint64_t epochs, bpe;
	const uint8_t *rec;      /* the encoded record the plan was made from */
	uint32_t rec_len;        /* 0: a fresh job's plan */
	const uint8_t *starts_;  /* job.world u64s (resume_file_plan_start) */
};

/* The plan's bytes (*n of them; the caller frees them), starts[r] each
 * rank's start. Layout (host order; the files never leave the job's
 * machines):
 *   0 magic  8 u32 version 1, u32 header size  16 u64 total size  24 u64 run
 *   32 u64 nsamples  40 u64 seed  48 u64 dataset hash  56 u32 batch, u32 flags
 *   64 u32 world, u32 record length  72 u64 epochs  80 u64 bpe  88 reserved
 *   96 record bytes, then u64 start[world], then u32 CRC-32 of all before. */
uint8_t *resume_file_plan_encode(const struct resume_plan *p, const uint64_t *starts, size_t *n);
/* n bytes of a plan file into *p: 0, or -EBADMSG (magic, version, size or
 * checksum wrong). */
int resume_file_plan_decode(const uint8_t *b, size_t n, struct resume_plan *p);
/* Rank r's start as the plan saved it (r < p->job.world). */
uint64_t resume_file_plan_start(const struct resume_plan *p, uint32_t r);

/* A rank's slot holding g, for run `run`, rank and world size. */
void resume_file_slot_init(struct resume_slot *s, uint32_t run, uint32_t rank, uint32_t world,
			   uint64_t g);
/* The slot's batch into *g: 0, or -ENOENT when it is damaged or another
 * run's, rank's or world size's. */
int resume_file_slot_check(const struct resume_slot *s, uint32_t run, uint32_t rank,
			   uint32_t world, uint64_t *g);

/* Which global batch rank r of the saved run resumes at: its slot's
 * first unreleased batch when the slot is its own (slot NULL: none could
 * be read), else the plan's start; never past end (the job's last global
 * batch + 1). Returns true when the slot gave it. */
bool resume_file_rank_start(const struct resume_plan *p, uint32_t r,
			    const struct resume_slot *slot, uint64_t end, uint64_t *g);

#endif /* SEERD_RESUME_FILE_H */
