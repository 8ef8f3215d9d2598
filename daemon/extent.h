/* The coalescing stage's state (extent.c says how reads are joined into
 * extents): whether it is on, node 0's probe, the PFS reads an extent may
 * absorb, the extents waiting for memory, the extent region and the
 * planner's scratch.
 *
 * Owns struct ext (the engine holds it as e->ext). Threads: the
 * dispatcher's; the I/O threads read `base` (the extent region, made before
 * the job, fixed) to find an extent's buffer, and an extent with its members
 * is its I/O thread's between submission and completion. Failure: out of
 * memory aborts; a failed extent reads its members one by one. */
#ifndef SEERD_EXTENT_H
#define SEERD_EXTENT_H

#include <stdbool.h>
#include <stdint.h>

#include "../src/plan/extent_plan.h"
#include "../src/util/pfs_probe.h"
#include "../src/util/spans.h"

struct etask;

struct ext {
	bool coalesce;           /* prefetch.coalesce (auto: the probe's verdict) and a
				    format that cuts samples */
	struct pfs_probe probe;  /* auto: node 0's measurement (probe.reads 0: none) */
	uint32_t *pfs_q;         /* per sample: id + 1 of a PFS read of it not yet known
				    to have started (absorbable by an extent), or 0 */
	struct etask **wait;     /* extents waiting for extent memory */
	uint32_t next_wait, cap_wait;
	uint64_t mem, mem_peak;  /* extent bytes in flight, at most */
	uint8_t *base;           /* the extent region: buffers made before the job */
	uint64_t cap;
	struct spans spans;      /* its free ranges */
	struct extent_cand *cand; /* planning scratch, per candidate */
	bool *take;
	struct etask **tk;       /* the candidate's queued read, or NULL */
	uint32_t cand_cap;
	struct etask **todo;     /* flush scratch */
	uint32_t todo_cap;
};

#endif /* SEERD_EXTENT_H */
