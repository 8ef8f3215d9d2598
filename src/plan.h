/* Placement plan: which samples the cluster caches, on which node, in which
 * tier, at which offset. Every daemon computes the same plan from the same
 * inputs, so no directory service is needed to find a sample.
 *
 * Why a static set is optimal: under exact per-epoch shuffling every sample
 * is read once per epoch, so every reuse crosses an epoch boundary, where a
 * cache of C bytes holds at most C bytes. Over E epochs of a D-byte dataset
 * the PFS must deliver at least D + (D - C)(E - 1) bytes; caching any fixed
 * set of C bytes from its first read to the end of the job reaches exactly
 * that (docs/design.md has the argument and the measurements).
 *
 * Which set: each sample is owned by the node whose trainers read it first
 * in the plan's first epoch, so the first epoch fills the caches with the
 * bytes it reads anyway (no extra PFS read, no transfer). RAM is filled
 * before NVMe. A node whose own first-epoch reads exceed its capacity leaves
 * the rest to nodes with room, which load them from the PFS in the first
 * epoch (a second read of those samples, once per job). */
#ifndef SEER_PLAN_H
#define SEER_PLAN_H

#include <stdint.h>

#include "catalog.h"
#include "sampler.h"

enum plan_tier { PLAN_NONE = 0, PLAN_RAM = 1, PLAN_NVME = 2 };

#define PLAN_RAM_ALIGN 64u
#define PLAN_NVME_ALIGN 4096u

struct plan_cap {
	uint64_t ram;
	uint64_t nvme;
	uint32_t nvme_align;  /* NVMe slot alignment (the file system's O_DIRECT
				 alignment); 0: PLAN_NVME_ALIGN */
	uint32_t pad_;
};

struct plan {
	uint64_t n;
	uint32_t nnodes;
	uint8_t *tier;        /* per sample: enum plan_tier */
	uint16_t *owner;      /* per sample: node holding it (tier != NONE) */
	uint64_t *off;        /* per sample: offset in the owner's tier region */
	uint64_t *ram_used;   /* per node, bytes incl. alignment */
	uint64_t *nvme_used;
	uint64_t cached_samples;
	uint64_t cached_bytes;   /* sample bytes (no alignment) */
	uint64_t spilled;        /* samples cached on a node other than their first
				    reader's, or read by nobody in the first epoch */
};

/* Build the plan for a job starting at `first_epoch`. rank_node[r] is the
 * node of trainer rank r (sh->world entries); cap[k] the capacities of node k.
 * 0 or -ENOMEM / -EINVAL. */
int plan_build(struct plan *p, const struct catalog *c, const struct smp_shape *sh,
	       uint64_t first_epoch, const uint32_t *rank_node, uint32_t nnodes,
	       const struct plan_cap *cap);
void plan_free(struct plan *p);

/* Same as plan_build but from sample lengths alone (for the planner tool). */
int plan_build_lengths(struct plan *p, const uint64_t *len, uint64_t n, const struct smp_shape *sh,
		       uint64_t first_epoch, const uint32_t *rank_node, uint32_t nnodes,
		       const struct plan_cap *cap);

#endif /* SEER_PLAN_H */
