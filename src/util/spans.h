/* Byte ranges of one region, allocated first-fit and freed in any order.
 *
 * The free ranges are kept sorted by offset, disjoint and never adjacent
 * (a free merges with its neighbours), so a region cut into k live ranges
 * has at most k + 1 free ones. Used for the buffers of coalesced reads
 * (daemon/extent.c), which end out of order.
 *
 * Pure bookkeeping, no locks: one owner thread (the dispatcher); tests in
 * tests/unit/test_extent.c. Failure: out of memory aborts (xrealloc). */
#ifndef SEER_SPANS_H
#define SEER_SPANS_H

#include <stdint.h>

struct span {
	uint64_t off, len;
};

struct spans {
	struct span *free;   /* sorted by off */
	uint32_t n, capn;
};

/* All of [0, cap) free. */
void spans_init(struct spans *s, uint64_t cap);
void spans_fini(struct spans *s);

/* len bytes (len > 0) at *off, the lowest free range that holds them: 0;
 * -ENOSPC when no free range is that long (nothing changes). */
int spans_alloc(struct spans *s, uint64_t len, uint64_t *off);

/* Give back [off, off + len), a range spans_alloc returned. */
void spans_free(struct spans *s, uint64_t off, uint64_t len);

/* Bytes free in all. */
uint64_t spans_free_bytes(const struct spans *s);

#endif /* SEER_SPANS_H */
