/* Staging: a trainer's share of the arena for samples on their way to it
 * (read from the PFS, a peer or the NVMe tier into memory the trainer maps).
 *
 * A ring allocator over [base, base + cap) in virtual positions that only
 * grow (physical = v % cap): batches allocate in order and are reclaimed in
 * order, so a batch's span is one mark (the head after its allocation).
 * An allocation never wraps inside itself: when the rest of the ring is too
 * short it skips to the start (the skipped tail is reclaimed with it; an
 * empty ring skips nothing: it starts over at its base).
 *
 * Pure bookkeeping, no locks: the dispatcher owns each trainer's ring
 * (tests/unit/test_staging.c drives it directly). */
#ifndef SEERD_STAGING_H
#define SEERD_STAGING_H

#include <stdint.h>

struct stg {
	uint64_t base, cap;
	uint64_t vhead, vtail;
};

/* An empty ring over [base, base + cap). */
void stg_init(struct stg *s, uint64_t base, uint64_t cap);
/* Forget every allocation (a trainer's stream restarts). */
void stg_reset(struct stg *s);

/* `need` contiguous bytes at *off (an arena offset). 0; -E2BIG when need
 * exceeds the whole ring (it never fits); -ENOSPC when the ring is full for
 * now (it fits once earlier spans are reclaimed). need 0 gives base and
 * takes nothing. On error nothing changes. */
int stg_alloc(struct stg *s, uint64_t need, uint64_t *off);

/* The mark that ends everything allocated so far: a batch records it after
 * its allocations, and stg_reclaim(mark) frees the batch and all before it. */
static inline uint64_t stg_mark(const struct stg *s) { return s->vhead; }

/* Free everything allocated before `mark` (a value stg_mark returned). Marks
 * are reclaimed in order: 0; -EINVAL for a mark behind the tail (already
 * free: also a zero-byte batch's mark from before an empty ring started
 * over) or past the head (nothing changes). */
int stg_reclaim(struct stg *s, uint64_t mark);

/* Bytes taken, skipped tails included. */
static inline uint64_t stg_used(const struct stg *s) { return s->vhead - s->vtail; }

#endif /* SEERD_STAGING_H */
