/* The resume files' bytes and which batch a rank resumes at (resume_file.h
 * says what they are, and that these are pure: no I/O, no logging). */
#include <errno.h>
#include <string.h>
#include <zlib.h>

#include "../src/util/util.h"
#include "resume_file.h"

#define PLAN_MAGIC "SEERPLN1"
#define RANK_MAGIC "SEERRNK1"
#define PLAN_HDR 96u

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

uint8_t *resume_file_plan_encode(const struct resume_plan *p, const uint64_t *starts, size_t *n)
{
	size_t len = PLAN_HDR + p->rec_len + 8ull * p->job.world + 4;
	uint8_t *b = xcalloc(1, len);
	memcpy(b, PLAN_MAGIC, 8);
	put32(b + 8, 1);
	put32(b + 12, PLAN_HDR);
	put64(b + 16, len);
	put64(b + 24, p->run);
	put64(b + 32, p->job.n);
	put64(b + 40, p->job.seed);
	put64(b + 48, p->job.dataset_hash);
	put32(b + 56, p->job.batch);
	put32(b + 60, (p->job.drop_last ? 1u : 0) | (p->job.shuffle ? 2u : 0));
	put32(b + 64, p->job.world);
	put32(b + 68, p->rec_len);
	put64(b + 72, p->epochs);
	put64(b + 80, p->bpe);
	if (p->rec_len)
		memcpy(b + PLAN_HDR, p->rec, p->rec_len);
	uint8_t *st = b + PLAN_HDR + p->rec_len;
	for (uint32_t r = 0; r < p->job.world; r++)
		put64(st + 8ull * r, starts[r]);
	put32(b + len - 4, (uint32_t)crc32(0L, b, (uInt)(len - 4)));
	*n = len;
	return b;
}

int resume_file_plan_decode(const uint8_t *b, size_t n, struct resume_plan *p)
{
	if (n < PLAN_HDR + 4 || memcmp(b, PLAN_MAGIC, 8) != 0 || get32(b + 8) != 1 ||
	    get32(b + 12) != PLAN_HDR || get64(b + 16) != n ||
	    get32(b + n - 4) != (uint32_t)crc32(0L, b, (uInt)(n - 4)) ||
	    n != PLAN_HDR + (size_t)get32(b + 68) + 8ull * get32(b + 64) + 4)
		return -EBADMSG;
	uint32_t flags = get32(b + 60);
	*p = (struct resume_plan){
		.run = (uint32_t)get64(b + 24),
		.job = { .n = get64(b + 32), .seed = get64(b + 40), .dataset_hash = get64(b + 48),
			 .batch = get32(b + 56), .world = get32(b + 64), .drop_last = flags & 1,
			 .shuffle = flags & 2 },
		.epochs = get64(b + 72),
		.bpe = get64(b + 80),
		.rec = b + PLAN_HDR,
		.rec_len = get32(b + 68),
		.starts_ = b + PLAN_HDR + get32(b + 68),
	};
	return 0;
}

uint64_t resume_file_plan_start(const struct resume_plan *p, uint32_t r)
{
	return get64(p->starts_ + 8ull * r);
}

void resume_file_slot_init(struct resume_slot *s, uint32_t run, uint32_t rank, uint32_t world,
			   uint64_t g)
{
	*s = (struct resume_slot){ .run = run, .rank = rank, .world = world, .g = g };
	memcpy(s->magic, RANK_MAGIC, 8);
	s->crc = (uint32_t)crc32(0L, (const Bytef *)s, offsetof(struct resume_slot, crc));
}

int resume_file_slot_check(const struct resume_slot *s, uint32_t run, uint32_t rank,
			   uint32_t world, uint64_t *g)
{
	if (memcmp(s->magic, RANK_MAGIC, 8) != 0 || s->run != run || s->rank != rank ||
	    s->world != world ||
	    s->crc != (uint32_t)crc32(0L, (const Bytef *)s, offsetof(struct resume_slot, crc)))
		return -ENOENT;
	*g = s->g;
	return 0;
}

bool resume_file_rank_start(const struct resume_plan *p, uint32_t r,
			    const struct resume_slot *slot, uint64_t end, uint64_t *g)
{
	uint64_t v = resume_file_plan_start(p, r);
	bool from_slot = slot && resume_file_slot_check(slot, p->run, r, p->job.world, &v) == 0;
	*g = MIN(v, end);
	return from_slot;
}
