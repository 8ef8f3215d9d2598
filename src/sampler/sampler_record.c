/* Checkpoint records: in-memory and byte forms (sampler_record.h).
 * No shared state; every failure is a negative errno with err_set(). */
#include "sampler_record.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "seer.h"
#include "../common/base.h"

void sampler_record_init(struct sampler_record *r, const struct sampler_job *job, uint64_t epoch,
		     uint32_t rank)
{
	memset(r, 0, sizeof(*r));
	r->job = *job;
	r->epoch = epoch;
	r->rank = rank;
}

void sampler_record_free(struct sampler_record *r)
{
	for (uint32_t k = 0; k < r->nseg && k < SMP_REC_MAX_SEGS; k++) {
		free(r->seg[k].steps);
		r->seg[k].steps = NULL;
	}
	r->nseg = 0;
}

int sampler_record_push(struct sampler_record *r, uint32_t world, uint32_t nsteps, const uint64_t *steps)
{
	if (r->nseg >= SMP_REC_MAX_SEGS) {
		err_set("checkpoint record: more than %u segments in one epoch", SMP_REC_MAX_SEGS);
		return -E2BIG;
	}
	if (world == 0 || world > SMP_REC_MAX_WORLD || (nsteps != 1 && nsteps != world)) {
		err_set("checkpoint record: a segment of %u trainers with %u step counts", world,
			nsteps);
		return -EINVAL;
	}
	uint64_t *s = malloc(sizeof(*s) * nsteps);
	if (!s) {
		err_set("checkpoint record: out of memory for %u step counts", nsteps);
		return -ENOMEM;
	}
	memcpy(s, steps, sizeof(*s) * nsteps);
	r->seg[r->nseg++] = (struct sampler_segment){ .world = world, .nsteps = nsteps, .steps = s };
	return 0;
}

int sampler_record_copy(struct sampler_record *dst, const struct sampler_record *src, uint32_t nseg)
{
	sampler_record_init(dst, &src->job, src->epoch, src->rank);
	for (uint32_t k = 0; k < src->nseg && k < nseg; k++) {
		int rc = sampler_record_push(dst, src->seg[k].world, src->seg[k].nsteps,
					 src->seg[k].steps);
		if (rc < 0) {
			sampler_record_free(dst);
			return rc;
		}
	}
	return 0;
}

/* ---- byte form ----------------------------------------------------------- */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

size_t sampler_record_size(const struct sampler_record *r)
{
	size_t n = SMP_REC_HDR_SIZE + 4;
	for (uint32_t k = 0; k < r->nseg; k++)
		n += 8 + 8 * (size_t)r->seg[k].nsteps;
	return n;
}

void sampler_record_encode(const struct sampler_record *r, uint8_t *buf)
{
	size_t size = sampler_record_size(r);
	memset(buf, 0, SMP_REC_HDR_SIZE);
	memcpy(buf, SMP_REC_MAGIC, 8);
	put16(buf + 8, SMP_REC_VERSION);
	put16(buf + 10, SMP_REC_HDR_SIZE);
	put32(buf + 12, (uint32_t)size);
	put64(buf + 16, r->job.n);
	put64(buf + 24, r->job.seed);
	put64(buf + 32, r->job.dataset_hash);
	put64(buf + 40, r->epoch);
	put32(buf + 48, r->job.batch);
	put32(buf + 52, r->job.world);
	put32(buf + 56, r->rank);
	put32(buf + 60, (r->job.drop_last ? SMP_REC_FLAG_DROP_LAST : 0) |
				(r->job.shuffle ? SMP_REC_FLAG_SHUFFLE : 0));
	put32(buf + 64, r->nseg);
	uint8_t *p = buf + SMP_REC_HDR_SIZE;
	for (uint32_t k = 0; k < r->nseg; k++) {
		put32(p, r->seg[k].world);
		put32(p + 4, r->seg[k].nsteps);
		p += 8;
		for (uint32_t i = 0; i < r->seg[k].nsteps; i++, p += 8)
			put64(p, r->seg[k].steps[i]);
	}
	put32(p, (uint32_t)crc32(0L, buf, (uInt)(size - 4)));
}

#define BAD(...) do { err_set("checkpoint record: " __VA_ARGS__); return -EBADMSG; } while (0)

/* Header fields; the segments are read by the caller. */
static int decode_header(const uint8_t *buf, size_t len, struct sampler_record *r, uint32_t *nseg)
{
	if (len < 8 || memcmp(buf, SMP_REC_MAGIC, 8) != 0)
		BAD("not a seer position record (no \"SEERPOS\" magic in its %zu bytes)", len);
	if (len < SMP_REC_HDR_SIZE + 4)
		BAD("truncated: %zu bytes, a record has at least %u", len, SMP_REC_HDR_SIZE + 4);
	uint16_t version = get16(buf + 8);
	if (version != SMP_REC_VERSION)
		BAD("format version %u; this seer reads version %u%s", version, SMP_REC_VERSION,
		    version > SMP_REC_VERSION ? " (the record comes from a newer seer: upgrade)" : "");
	uint32_t size = get32(buf + 12);
	if (get16(buf + 10) != SMP_REC_HDR_SIZE)
		BAD("header of %u bytes, version %u has %u", get16(buf + 10), version,
		    SMP_REC_HDR_SIZE);
	if (size != len)
		BAD("%zu bytes, its header says %u (truncated or padded)", len, size);
	uint32_t want = get32(buf + len - 4);
	uint32_t got = (uint32_t)crc32(0L, buf, (uInt)(len - 4));
	if (want != got)
		BAD("checksum mismatch (stored %08" PRIx32 ", computed %08" PRIx32
		    "): the record is corrupt", want, got);
	uint32_t flags = get32(buf + 60);
	if ((flags & ~(SMP_REC_FLAG_DROP_LAST | SMP_REC_FLAG_SHUFFLE)) || get32(buf + 68) != 0)
		BAD("unknown flags %#x or reserved field set", flags);
	struct sampler_job job = {
		.n = get64(buf + 16), .seed = get64(buf + 24), .dataset_hash = get64(buf + 32),
		.batch = get32(buf + 48), .world = get32(buf + 52),
		.drop_last = flags & SMP_REC_FLAG_DROP_LAST, .shuffle = flags & SMP_REC_FLAG_SHUFFLE,
	};
	sampler_record_init(r, &job, get64(buf + 40), get32(buf + 56));
	*nseg = get32(buf + 64);
	if (job.n == 0 || job.n > UINT32_MAX || job.batch == 0)
		BAD("%" PRIu64 " samples, batch size %u", job.n, job.batch);
	if (*nseg == 0 || *nseg > SMP_REC_MAX_SEGS)
		BAD("%u segments (1 to %u)", *nseg, SMP_REC_MAX_SEGS);
	return 0;
}

int sampler_record_decode(const uint8_t *buf, size_t len, struct sampler_record *r)
{
	uint32_t nseg;
	memset(r, 0, sizeof(*r));
	int rc = decode_header(buf, len, r, &nseg);
	if (rc < 0)
		return rc;
	const uint8_t *p = buf + SMP_REC_HDR_SIZE, *end = buf + len - 4;
	for (uint32_t k = 0; k < nseg; k++) {
		if (end - p < 8)
			goto short_;
		uint32_t world = get32(p), nsteps = get32(p + 4);
		p += 8;
		if (world == 0 || world > SMP_REC_MAX_WORLD || (nsteps != 1 && nsteps != world)) {
			sampler_record_free(r);
			BAD("segment %u: %u trainers with %u step counts", k, world, nsteps);
		}
		if ((size_t)(end - p) < 8 * (size_t)nsteps)
			goto short_;
		uint64_t *steps = malloc(8 * (size_t)nsteps);
		if (!steps) {
			sampler_record_free(r);
			err_set("checkpoint record: out of memory");
			return -ENOMEM;
		}
		for (uint32_t i = 0; i < nsteps; i++, p += 8)
			steps[i] = get64(p);
		r->seg[r->nseg++] = (struct sampler_segment){ world, nsteps, steps };
	}
	if (p != end) {
		sampler_record_free(r);
		BAD("%td bytes after the last segment", end - p);
	}
	const struct sampler_segment *last = &r->seg[r->nseg - 1];
	if (r->job.world != last->world) {
		sampler_record_free(r);
		BAD("world size %u, but its last segment has %u trainers", r->job.world,
		    last->world);
	}
	if (r->rank != SMP_REC_ALL && (r->rank >= last->world || last->nsteps != 1)) {
		sampler_record_free(r);
		BAD("saved by rank %u of %u with %u step counts", r->rank, last->world,
		    last->nsteps);
	}
	return 0;
short_:
	sampler_record_free(r);
	BAD("segment list ends early (the size field and the segments disagree)");
}

/* ---- comparison and text --------------------------------------------------- */

int sampler_record_check_job(const struct sampler_record *r, const struct sampler_job *job)
{
	const struct sampler_job *a = &r->job;
	if (a->dataset_hash != job->dataset_hash) {
		err_set("checkpoint record is for dataset hash %016" PRIx64 ", this job's dataset "
			"has hash %016" PRIx64 ": the dataset changed since the checkpoint (restore "
			"it, or start the job without the record)", a->dataset_hash,
			job->dataset_hash);
		return SEER_EDATASET;
	}
	if (a->n != job->n) {
		err_set("checkpoint record is for %" PRIu64 " samples, this job has %" PRIu64
			": the dataset changed since the checkpoint", a->n, job->n);
		return SEER_EDATASET;
	}
	const char *what = NULL;
	uint64_t x = 0, y = 0;
	if (a->seed != job->seed)
		what = "seed", x = a->seed, y = job->seed;
	else if (a->batch != job->batch)
		what = "batch size", x = a->batch, y = job->batch;
	else if (a->drop_last != job->drop_last)
		what = "drop_last", x = a->drop_last, y = job->drop_last;
	else if (a->shuffle != job->shuffle)
		what = "shuffle", x = a->shuffle, y = job->shuffle;
	if (what) {
		err_set("checkpoint record is for %s %" PRIu64 ", this job has %s %" PRIu64
			": start the job with %s %" PRIu64 " to resume from it, or without the record",
			what, x, what, y, what, x);
		return SEER_ECONFIG;
	}
	return 0;
}

static void describe_segment(const struct sampler_segment *s, char *buf, size_t len)
{
	size_t o = (size_t)snprintf(buf, len, "%u rank%s at step%s ", s->world,
				    s->world == 1 ? "" : "s", s->nsteps == 1 ? "" : "s");
	for (uint32_t i = 0; i < s->nsteps && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%" PRIu64, i ? "," : "", s->steps[i]);
}

void sampler_record_describe(const struct sampler_record *r, char *buf, size_t len)
{
	if (len == 0)
		return;
	size_t o = (size_t)snprintf(buf, len, "epoch %" PRIu64 ":", r->epoch);
	for (uint32_t k = 0; k < r->nseg && o < len; k++) {
		char seg[512];
		describe_segment(&r->seg[k], seg, sizeof(seg));
		o += (size_t)snprintf(buf + o, len - o, "%s %s", k ? ", then" : "", seg);
	}
	if (o < len && r->rank != SMP_REC_ALL)
		snprintf(buf + o, len - o, " (saved by rank %u)", r->rank);
}
