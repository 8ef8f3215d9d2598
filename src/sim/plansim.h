/* plansim: how many bytes each cache policy reads from the PFS, from peers
 * and locally, epoch by epoch, over a job's known access sequence.
 *
 * The access sequence is the one src/sampler/sampler.h defines (epoch e = 0, 1, ...,
 * DistributedSampler sharding); inside an epoch reads happen in order of need:
 * step by step, and inside a step rank by rank, each rank's batch in order.
 * A read of sample s by rank r on node k is served, per policy:
 *
 *   seer     src/plan/plan.c's static plan built for epoch 0. Owner k: local hit
 *            (RAM or NVMe); other owner: peer transfer to k; uncached: PFS.
 *            In epoch 0 a sample's first read comes from the PFS and fills
 *            the owner when the owner is the reader's node; a sample owned by
 *            another node (spilled, or never read in epoch 0) costs its owner
 *            one more PFS read in epoch 0 (counted as `fill`).
 *   nopfs    NoPFS / HDMLP (SC21): one cache per rank with capacity
 *            (node RAM, node NVMe) / ranks on the node; each rank caches the
 *            samples its own stream reads most often over the job (docs/
 *            planner.md has the model and where it comes from).
 *   lru      one LRU per node over RAM then NVMe (an NVMe hit moves back to
 *            RAM, RAM's tail moves down to NVMe), node-local, insert on miss.
 *   optimum  the lower bound: epoch 0 reads D_0 (bytes of distinct samples
 *            read in epoch 0), epoch e > 0 reads max(0, D_e - C) with
 *            C = min(D, sum of RAM + NVMe). Without drop_last D_e = D, so the
 *            job total is D + (D - C)(E - 1).
 *
 * All policies store a sample in RAM at a multiple of PLAN_RAM_ALIGN and in
 * NVMe at a multiple of PLAN_NVME_ALIGN bytes, as src/plan/plan.c does; the
 * optimum uses the raw capacity.
 *
 * Functions here are reentrant: several may run at once on the same job from
 * different threads. */
#ifndef SEER_PLANSIM_H
#define SEER_PLANSIM_H

#include <stdbool.h>
#include <stdint.h>

#include "../plan/plan.h"
#include "../sampler/sampler.h"

enum plansim_policy { PLANSIM_SEER = 0, PLANSIM_NOPFS, PLANSIM_LRU, PLANSIM_OPTIMUM, PLANSIM_NPOLICIES };
#define PLANSIM_BIT(p) (1u << (p))
#define PLANSIM_ALL ((1u << PLANSIM_NPOLICIES) - 1)

/* When a NoPFS rank's cache gets its samples. READ: on the rank's first read
 * of each (NoPFS's fetch_and_cache path; the copy is not visible to other
 * ranks before). PREFETCH: all of them before the first step (NoPFS's
 * background prefetchers at infinite speed; the fill bytes are charged to
 * epoch 0). The truth lies between. */
enum plansim_nopfs_fill { PLANSIM_FILL_READ = 0, PLANSIM_FILL_PREFETCH = 1 };

struct plansim_job {
	const uint64_t *len;          /* sh->n sample sizes in bytes */
	const struct sampler_shape *sh;   /* the access sequence; sh->world ranks */
	uint64_t epochs;              /* epochs 0 .. epochs-1 are simulated */
	uint32_t nnodes;
	const uint32_t *rank_node;    /* sh->world entries, each < nnodes */
	const struct plan_cap *cap;   /* nnodes entries */
	enum plansim_nopfs_fill nopfs_fill;
};

/* Bytes of one epoch (or of the job). */
struct plansim_epoch {
	uint64_t demand;    /* bytes the trainers read */
	uint64_t pfs;       /* bytes read from the PFS, fill included */
	uint64_t fill;      /* PFS bytes that served no trainer read (cache loads) */
	uint64_t peer;      /* bytes moved between nodes */
	uint64_t ram;       /* bytes served from the reading node's RAM */
	uint64_t nvme;      /* bytes served from the reading node's NVMe */
	uint64_t peer_max;  /* most bytes one node received from peers */
};
/* For every policy but the optimum: demand == pfs - fill + peer + ram + nvme.
 * The optimum fills only pfs and demand. */

struct plansim_result {
	enum plansim_policy policy;
	uint64_t epochs;
	struct plansim_epoch *ep;      /* epochs entries, owned: plansim_result_free */
	struct plansim_epoch total;    /* sums; total.peer_max is the most bytes one
				     * node received over the job */
	uint64_t dataset;           /* D: bytes of all samples */
	uint64_t capacity;          /* sum of node RAM + NVMe */
	uint64_t held;              /* seer: planned bytes; nopfs: sum of the rank
				     * caches' sets; lru: bytes held at the end */
	uint64_t distinct;          /* bytes of distinct samples among `held` */
	uint64_t spilled;           /* seer: samples owned by a node that is not
				     * their first reader */
};

/* Each returns 0, -EINVAL (bad job) or -ENOMEM; on success *out is filled
 * and owns memory until plansim_result_free(out). On failure *out is empty. */
int plansim_seer(const struct plansim_job *job, struct plansim_result *out);
int plansim_nopfs(const struct plansim_job *job, struct plansim_result *out);
int plansim_lru(const struct plansim_job *job, struct plansim_result *out);
int plansim_optimum(const struct plansim_job *job, struct plansim_result *out);
/* Dispatch on p. */
int plansim_run(const struct plansim_job *job, enum plansim_policy p, struct plansim_result *out);
void plansim_result_free(struct plansim_result *r);

/* "seer", "nopfs", "lru", "optimum". */
const char *plansim_policy_name(enum plansim_policy p);
/* Comma-separated names (or "all") to a PLANSIM_BIT mask; 0 or -EINVAL. */
int plansim_parse_policies(const char *list, unsigned *mask);

/* Lower bound on an epoch's time in seconds:
 * max(compute_s * steps, pfs / pfs_bw, peer_max / net_bw); a bandwidth of 0
 * drops its term. *bound (may be NULL) gets "compute", "pfs" or "net". */
double plansim_epoch_time(const struct plansim_epoch *e, uint64_t steps, double compute_s,
		       double pfs_bw, double net_bw, const char **bound);

/* n sample sizes drawn from a lognormal law with the given mean and standard
 * deviation in bytes (deterministic in seed; every size >= 1). */
void plansim_lognormal_sizes(uint64_t *len, uint64_t n, double mean, double sd, uint64_t seed);

#endif /* SEER_PLANSIM_H */
