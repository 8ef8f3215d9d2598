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

#include "../catalog/catalog.h"
#include "../sampler/sampler.h"

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
int plan_build(struct plan *p, const struct catalog *c, const struct sampler_shape *sh,
	       uint64_t first_epoch, const uint32_t *rank_node, uint32_t nnodes,
	       const struct plan_cap *cap);
struct sampler_resume; /* sampler_elastic.h */
/* The same for a resumed job: when first_epoch is the epoch rs re-shards
 * (an elastic resume), its order of need is the re-sharded batches'. len,
 * when not NULL, gives the c->nsamples lengths to place instead of the
 * files' (transform.cache = decoded: the decoded images'). */
int plan_build_resumed(struct plan *p, const struct catalog *c, const uint64_t *len,
		       const struct sampler_shape *sh, const struct sampler_resume *rs, uint64_t first_epoch,
		       const uint32_t *rank_node, uint32_t nnodes, const struct plan_cap *cap);
void plan_free(struct plan *p);

/* Whether nnodes nodes can carry a plan (1 .. UINT16_MAX: owners are 16-bit)
 * and every one of the sh->world ranks is on one of them: 0 or -EINVAL. */
int plan_check_nodes(const struct sampler_shape *sh, const uint32_t *rank_node, uint32_t nnodes);
/* The plan for coalesced reads (src/plan/plan_group.c): the same inputs, but
 * each file with several samples is cached whole by one owner -- the node
 * whose trainers read most of it in the first epoch, among those with room
 * and within an even share of the files -- which reads it once in large
 * extents and serves the others. Files with one sample, or a catalog of
 * only those: as plan_build. Equally optimal in PFS bytes. */
int plan_build_files(struct plan *p, const struct catalog *c, const struct sampler_shape *sh,
		     uint64_t first_epoch, const uint32_t *rank_node, uint32_t nnodes,
		     const struct plan_cap *cap);
/* Place sample s (len bytes) on node: RAM if it fits, else NVMe; 1 when
 * placed, 0 when the node is full. */
int plan_place(struct plan *p, uint32_t s, uint64_t len, uint32_t node, const struct plan_cap *cap);

/* Same as plan_build but from sample lengths alone (for the planner tool). */
int plan_build_lengths(struct plan *p, const uint64_t *len, uint64_t n, const struct sampler_shape *sh,
		       uint64_t first_epoch, const uint32_t *rank_node, uint32_t nnodes,
		       const struct plan_cap *cap);

/* ---- replicas: one node's use of its spare capacity --------------------------
 *
 * The plan above places one copy of each sample (its owner's). What is left
 * of a node's RAM and NVMe after its owned share holds replicas: copies of
 * samples other nodes own, which this node's trainers then read locally
 * instead of over the network.
 *
 * Which samples: those this node reads most often over the rest of the job
 * (epochs first_epoch + 1 .. first_epoch + epochs - 1), ties broken by the
 * soonest first read; samples it never reads again are not replicated.
 * Under exact shuffling a node reads a given sample in an epoch with
 * probability 1/nodes, so the number of its reads varies from sample to
 * sample; a copy saves (reads - 1) transfers (the first read or the fill
 * moves the bytes once), so the most-read samples save the most per byte of
 * capacity (docs/planner.md). The most-read go to RAM, the rest to NVMe.
 *
 * Only owned samples are replicated (a sample nobody caches has no owner to
 * copy from; that only happens when the cluster's capacity is exhausted, and
 * then no node has spare room). The owned plan is not changed: with replicas
 * off, or no spare room, a node holds exactly what plan_build gives it.
 *
 * Each node computes only its own replica set; nobody else needs it (a read
 * of a sample this node lacks goes to the owner, which always has it). The
 * memory is that of the node: 4 bytes per dataset sample for the index plus
 * 21 bytes per replica. */

enum plan_fill {
	PLAN_FILL_PEER = 0,  /* from the owner over the network: no PFS bytes */
	PLAN_FILL_PFS = 1,   /* from the PFS: network bytes stay free, PFS bytes grow */
	PLAN_FILL_AUTO = 2,  /* choose by the rates (plan_fill_choose) */
};

struct plan_repl_opts {
	bool on;             /* false: no replicas (the one-copy plan) */
	enum plan_fill fill;
	double pfs_bw;       /* for PLAN_FILL_AUTO: aggregate PFS bytes/s */
	double net_bw;       /* for PLAN_FILL_AUTO: network bytes/s per node */
};

struct plan_node {
	uint32_t node;
	uint32_t bpe;            /* steps per epoch (to decode due ticks) */
	uint32_t reads_per_step; /* this node's read slots per step: trainers x batch */
	uint64_t n;              /* dataset samples (entries of idx) */
	uint64_t first_epoch;
	enum plan_fill fill;     /* PEER or PFS (AUTO resolved) */
	uint64_t nrepl;
	uint32_t *idx;           /* n: 0, or 1 + the replica's index below */
	/* the replicas, in fill order: by due, then by order of need */
	uint32_t *smp;           /* sample id */
	uint8_t *tier;           /* PLAN_RAM or PLAN_NVME */
	uint64_t *off;           /* offset in this node's tier region (after the
				  * owned samples) */
	uint32_t *due;           /* tick of this node's first read after the first
				  * epoch (plan_node_due decodes it) */
	uint32_t *ready;         /* step of the first epoch after which the owner
				  * holds the sample (bpe: by the end of it) */
	uint64_t ram_used;       /* this node's regions, owned + replicas, aligned */
	uint64_t nvme_used;
	uint64_t repl_bytes;     /* sample bytes of the replicas */
	uint64_t repl_ram;       /* ... of those in RAM */
};

/* Where node `node` holds sample s. */
struct plan_loc {
	uint8_t tier;        /* enum plan_tier; PLAN_NONE: not on this node */
	bool replica;        /* a replica (false: the owned copy, or nothing) */
	uint16_t owner;      /* the owner (valid when p->tier[s] != PLAN_NONE) */
	uint64_t off;        /* in this node's tier region */
};

/* An epoch order provider, so a caller that holds every epoch's permutation
 * (the planner tools) does not recompute them per node. NULL: computed. */
struct plan_orders {
	const uint32_t *(*get)(void *ctx, uint64_t epoch);
	void *ctx;
};

/* The replica set of node `node` for a job of `epochs` epochs starting at
 * first_epoch, after plan p (built with the same sh, first_epoch, rank_node,
 * cap). len: the sample lengths to place (they win over c's: decoded
 * images), or NULL to take them from catalog c. On success
 * *nv owns memory (plan_node_free). Replicas off, epochs <= 1 or no spare
 * room: an empty set. 0, -EINVAL, -ENOMEM, or -EOVERFLOW when this node's
 * reads over the job do not fit 32-bit ticks. */
int plan_node_build(struct plan_node *nv, const struct plan *p, const struct catalog *c,
		    const uint64_t *len, const struct sampler_shape *sh, uint64_t first_epoch,
		    uint64_t epochs, const uint32_t *rank_node, uint32_t node,
		    const struct plan_cap *cap, const struct plan_repl_opts *o,
		    const struct plan_orders *orders);
void plan_node_free(struct plan_node *nv);

/* Where nv's node holds sample s (nv may be NULL: the one-copy plan). */
static inline struct plan_loc plan_locate(const struct plan *p, const struct plan_node *nv,
					  uint32_t node, uint64_t s)
{
	struct plan_loc l = { PLAN_NONE, false, p->owner[s], 0 };
	if (p->tier[s] != PLAN_NONE && p->owner[s] == node) {
		l.tier = p->tier[s];
		l.off = p->off[s];
	} else if (nv && nv->idx[s]) {
		uint32_t i = nv->idx[s] - 1;
		l.tier = nv->tier[i];
		l.off = nv->off[i];
		l.replica = true;
	}
	return l;
}

/* Replica i's deadline: the epoch and step of its node's first read of it. */
static inline void plan_node_due(const struct plan_node *nv, uint64_t i, uint64_t *epoch,
				 uint64_t *step)
{
	uint64_t per_epoch = (uint64_t)nv->bpe * nv->reads_per_step;
	uint64_t t = nv->due[i];
	*epoch = nv->first_epoch + 1 + t / per_epoch;
	*step = (t % per_epoch) / nv->reads_per_step;
}

/* The samples `nranks` trainers (ranks, ascending) read in one epoch of
 * order `order`, in order of need (step, rank, position in the batch), into
 * smp (per_rank * nranks entries) and, if pos is not NULL, their padded
 * positions. Returns the count. */
uint64_t plan_node_reads(const struct sampler_shape *sh, const uint32_t *order, const uint32_t *ranks,
			 uint32_t nranks, uint32_t *smp, uint64_t *pos);

/* PLAN_FILL_AUTO: PFS when a node's share of the PFS (pfs_bw / nnodes) beats
 * its network link, else peers; PEER and PFS are returned unchanged. */
enum plan_fill plan_fill_choose(enum plan_fill f, double pfs_bw, double net_bw, uint32_t nnodes);

#endif /* SEER_PLAN_H */
