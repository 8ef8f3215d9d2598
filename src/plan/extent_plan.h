/* The extent planner: which samples of one file join a coalesced read.
 *
 * A coalesced read (an *extent*) reads one byte range of a file and cuts
 * several samples out of it (docs/design.md, "Coalesced reads"). Given the
 * samples of one file near a sample that must be read (the trigger), each
 * with the byte range its read takes and whether this node wants it (needed
 * by a trainer within the prefetch horizon, or planned for this node's
 * cache), the planner picks the wanted samples that join the trigger's
 * extent:
 *
 *   - the extent is the union of their ranges, at most max_bytes long;
 *   - bytes read over bytes delivered (the wanted samples' lengths) stay at
 *     most max_amp: a gap -- unwanted samples, or bytes no sample uses --
 *     is bridged only while the bound holds, and only when it is at most
 *     gap_max bytes (reading it must cost less than another request);
 *   - among the extents that satisfy both, it grows to the farthest wanted
 *     sample on each side in turn (right first: a forward reader gets the
 *     file system's readahead), so one read serves as many as possible;
 *     and, when that serves more, both sides at once, nearest first, taking
 *     the best range on the way (ranges that overlap, as an npz member's
 *     samples do: wanted on both sides of the trigger, only together do
 *     they meet the bound).
 *
 * Samples whose ranges overlap (an npz member that must be read whole for
 * any of its samples) cost nothing to add once the member is read: the
 * extent joins once enough of them are wanted to meet the bound.
 *
 * Pure functions of their arguments: any thread (the dispatcher uses them;
 * tests/unit/test_extent.c drives them directly). */
#ifndef SEER_EXTENT_H
#define SEER_EXTENT_H

#include <stdbool.h>
#include <stdint.h>

struct extent_cand {
	uint64_t lo, hi;     /* bytes of the file its read takes */
	uint64_t useful;     /* bytes it delivers (the sample's length) */
	bool want;           /* needed, or planned for this node's cache */
};

struct extent_opts {
	uint64_t max_bytes;  /* longest extent */
	double max_amp;      /* bytes read / bytes delivered, at most (>= 1) */
	uint64_t gap_max;    /* longest gap bridged */
};

struct extent_plan {
	uint64_t lo, hi;     /* the extent: bytes [lo, hi) of the file */
	uint64_t useful;     /* bytes of the samples that join */
	uint32_t taken;      /* samples that join (the trigger included) */
	uint32_t first, last; /* the first and last candidates that join */
};

/* Plan the extent of trigger t among c[0..n), one file's samples sorted by
 * lo (file order; ranges may overlap). take[i] is set for the candidates
 * that join (c[t] always does). taken 1: no extent meets the bounds (the
 * trigger is read alone, as it would be without coalescing; its own range
 * may break max_amp, e.g. a sample interleaved in an npz member). Returns
 * the plan; when taken > 1, (hi - lo) <= max_bytes and
 * (hi - lo) <= max_amp * useful. */
struct extent_plan extent_plan(const struct extent_cand *c, uint32_t n, uint32_t t,
			 const struct extent_opts *o, bool *take);

/* Does an extent of `bytes` delivering `useful` bytes meet max_amp? */
static inline bool extent_amp_ok(uint64_t bytes, uint64_t useful, double max_amp)
{
	return (double)bytes <= max_amp * (double)useful;
}

#endif /* SEER_EXTENT_H */
