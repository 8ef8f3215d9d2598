/* Internals shared by the plan simulator's files (see plansim.h for what the
 * policies model):
 *
 *   plansim.c        the job check, the access walk, the replay every policy
 *                    but the optimum runs, seer's policy, the optimum, names,
 *                    the epoch-time bound and the lognormal sizes
 *   plansim_lru.c    one LRU per node over RAM then NVMe
 *   plansim_nopfs.c  NoPFS's per-rank caches: which samples, then the replay
 *
 * Threads: whichever thread runs a policy; a run shares nothing with other
 * runs (the job is only read), so several may run at once. Failure: a run
 * returns -EINVAL (a job it cannot simulate), -ENOMEM or -EOVERFLOW, and then
 * leaves its result empty; nothing is printed. */
#ifndef SEER_PLANSIM_INT_H
#define SEER_PLANSIM_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/base.h"
#include "plansim.h"

#define NIL UINT32_MAX

/* Large arrays touched at random, on transparent huge pages when that is
 * worth it. Free with free(); NULL on out of memory. */
void *plansim_big_alloc(size_t bytes);

/* What a sample takes in a tier (plan.c's alignments). */
enum { T_RAM = 0, T_NVME = 1 };
static inline uint64_t plansim_ram_size(uint64_t len)
{
	return ALIGN_UP(len, (uint64_t)PLAN_RAM_ALIGN);
}
static inline uint64_t plansim_nvme_size(uint64_t len)
{
	return ALIGN_UP(len, (uint64_t)PLAN_NVME_ALIGN);
}
static inline uint64_t plansim_tier_size(uint64_t len, uint32_t t)
{
	return t == T_RAM ? plansim_ram_size(len) : plansim_nvme_size(len);
}

/* Check the job and start out for policy p (epoch rows, dataset and
 * capacity). 0, or -EINVAL / -ENOMEM with out empty. */
int plansim_result_start(const struct plansim_job *job, enum plansim_policy p, struct plansim_result *out);
/* out->total from the epochs; tot (may be NULL): per-node bytes received
 * from peers over the job, whose maximum is total.peer_max. */
void plansim_result_finish(struct plansim_result *r, const uint64_t *tot, uint32_t nnodes);

/* ---- the access sequence in order of need ---------------------------------
 * Inside an epoch: step by step; inside a step rank by rank; each rank's
 * batch in order (as src/plan/plan.c walks it). */
struct plansim_walk {
	const struct sampler_shape *sh;
	uint32_t *order;  /* the epoch's permutation */
	uint32_t *smp;    /* nacc: sample of each read */
	uint32_t *rank;   /* nacc: its reader */
	uint64_t nacc;
};

/* reads: also the smp/rank arrays of plansim_walk_epoch. 0 or -ENOMEM. */
int plansim_walk_init(struct plansim_walk *w, const struct sampler_shape *sh, bool reads);
void plansim_walk_free(struct plansim_walk *w);
/* The epoch's order only / its reads in order of need. */
void plansim_walk_order(struct plansim_walk *w, uint64_t epoch);
void plansim_walk_epoch(struct plansim_walk *w, uint64_t epoch);

/* Sample at padded position pos (wrap-around padding). */
static inline uint32_t plansim_walk_at(const struct plansim_walk *w, uint64_t pos)
{
	return w->order[pos < w->sh->n ? pos : pos % w->sh->n];
}

/* ---- the replay -----------------------------------------------------------
 * What the seer, LRU and NoPFS policies share: the job's reads epoch by
 * epoch, each charged to one of pfs / ram / nvme / peer by the policy, and
 * per-node bytes received from peers. */
struct plansim_replay {
	const struct plansim_job *job;
	struct plansim_result *out;
	struct plansim_walk w;
	uint64_t *recv;  /* per node: bytes received from peers this epoch */
	uint64_t *tot;   /* per node: the same over the job */
};

/* plansim_result_start, then the walk and the counters. 0, or -EINVAL / -ENOMEM
 * with out empty and nothing to free. */
int plansim_replay_init(struct plansim_replay *rp, const struct plansim_job *job, enum plansim_policy p,
		   struct plansim_result *out);
/* Epoch e's reads into rp->w (smp, rank; nacc of them); returns its row. */
struct plansim_epoch *plansim_replay_epoch(struct plansim_replay *rp, uint64_t e);
/* A read of len bytes that node k receives from a peer. */
static inline void plansim_replay_peer(struct plansim_replay *rp, struct plansim_epoch *ep, uint32_t k,
				  uint64_t len)
{
	ep->peer += len;
	rp->recv[k] += len;
}
/* After the epoch's reads: its peer_max. */
void plansim_replay_close(struct plansim_replay *rp, struct plansim_epoch *ep);
/* Ends the replay with the run's status: 0 fills out->total, anything else
 * empties out. Frees what plansim_replay_init made; returns rc. */
int plansim_replay_end(struct plansim_replay *rp, int rc);

#endif /* SEER_PLANSIM_INT_H */
