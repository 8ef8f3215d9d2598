/* dessim: a discrete-event simulation of seer's data path at scale, on the
 * daemon's own planner (src/plan/plan.h: owner map and every node's replica set)
 * and sampler (src/sampler/sampler.h).
 *
 * What is simulated (docs/simulation.md has the model and its limits):
 *   - trainers, bulk-synchronous: step g of every trainer starts when step
 *     g - 1 has ended everywhere (the gradient all-reduce) and its batch is in
 *     staging; it computes for compute_s + batch bytes / compute_bw;
 *   - the daemon of each node keeps `lookahead` batches ahead of each of its
 *     trainers: batch g + lookahead is requested when batch g is consumed
 *     (0: requested when needed, nothing overlaps the compute);
 *   - every sample read follows its path through first-come-first-served
 *     servers with a next-free time: the reading node's RAM or NVMe, or the
 *     owner's RAM or NVMe then the owner's outgoing and the reader's incoming
 *     link (stages pipelined), or the PFS; then one of the node's decode
 *     cores;
 *   - the PFS delivers t(clients) in aggregate, clients = nodes with PFS reads
 *     in flight (DESSIM_PFS_AGGREGATE: one shared server at t(clients), each
 *     node behind its own link), or, as the NoPFS simulator does, every read
 *     stream of a node gets t(clients) / clients (DESSIM_PFS_PER_STREAM: the
 *     aggregate then grows with the streams per node);
 *   - replicas are filled in the background, earliest deadline first, from
 *     owners that already hold them, as far as the receiving link is idle; a
 *     replica read before its fill is read from its owner (and is filled).
 *
 * Writes into RAM and NVMe cost nothing (as in the NoPFS simulator); no
 * latency unless configured; no network contention beyond each node's two
 * links (a full-bisection fabric).
 *
 * Deterministic: a function of the parameters. Not thread-safe per call;
 * separate calls may run concurrently. */
#ifndef SEER_DESSIM_H
#define SEER_DESSIM_H

#include <stdbool.h>
#include <stdint.h>

#include "../plan/forecast.h"
#include "../plan/plan.h"
#include "../sampler/sampler.h"

enum dessim_policy {
	DESSIM_SEER = 0,   /* seer's plan (replicas per `repl`) */
	DESSIM_NAIVE,      /* every read from the PFS, nothing cached */
	DESSIM_NPOLICIES
};

enum dessim_pfs_model { DESSIM_PFS_AGGREGATE = 0, DESSIM_PFS_PER_STREAM = 1 };

struct dessim_params {
	/* the job */
	const uint64_t *len;          /* sh->n sample sizes */
	const struct sampler_shape *sh;
	uint32_t nnodes;
	const uint32_t *rank_node;    /* sh->world entries */
	const struct plan_cap *cap;   /* nnodes entries */
	uint64_t epochs;              /* epochs of the job (the plan's horizon) */
	uint64_t sim_epochs;          /* epochs simulated, <= epochs (0: all) */
	/* the policy */
	enum dessim_policy policy;
	struct plan_repl_opts repl;
	uint32_t lookahead;           /* batches prepared ahead of each trainer */
	/* compute, per trainer */
	double compute_s;             /* per step */
	double compute_bw;            /* bytes/s of its batch (0: no such term) */
	/* decode, per node */
	double decode_s;              /* per sample */
	double decode_bw;             /* bytes/s per core (0: no such term) */
	uint32_t cores;               /* decode channels (0: 1) */
	/* PFS */
	enum dessim_pfs_model pfs_model;
	double pfs_bw;                /* aggregate bytes/s when npfs == 0 */
	const double *pfs_clients;    /* t(clients), as in struct forecast_rates */
	const double *pfs_curve;
	uint32_t npfs;
	double pfs_link_bw;           /* per node (0: unlimited) */
	uint32_t pfs_streams;         /* per node, DESSIM_PFS_PER_STREAM (0: 1) */
	double pfs_lat;               /* seconds added to every PFS read */
	/* network and tiers, per node */
	double net_bw;                /* each direction (0: unlimited) */
	double net_lat;
	double ram_bw;                /* 0: unlimited */
	double nvme_bw;               /* 0: unlimited */
};

struct dessim_epoch {
	double time;          /* wall time of the epoch */
	double compute;       /* its steps' compute alone (the NoPFS simulator's
			       * lower bound: every sample there when needed) */
	double stall;         /* time - compute */
	double lb;            /* max(compute, the optimum's PFS bytes /
			       * t(nodes), decode) */
	uint64_t pfs_opt;
	struct forecast_bytes sum, max;  /* bytes per node, as in the forecast */
	uint64_t net_max;     /* most bytes one node sent or received */
};

struct dessim_result {
	uint64_t epochs;      /* simulated */
	uint32_t nnodes;
	struct dessim_epoch *ep;
	struct forecast_bytes *node;     /* epochs x nnodes */
	double time, compute, lb;  /* sums */
	uint64_t reads;
	uint64_t forced;           /* replica reads that found no fill yet */
	uint64_t mem_bytes;        /* the simulator's main allocations */
};

/* 0, -EINVAL, -ENOMEM. */
int dessim_run(const struct dessim_params *p, struct dessim_result *out);
void dessim_result_free(struct dessim_result *r);
const char *dessim_policy_name(enum dessim_policy p);

/* n sizes from a normal law truncated to [1, inf) (the NoPFS simulator's
 * synthetic datasets), deterministic in seed. */
void dessim_normal_sizes(uint64_t *len, uint64_t n, double mean, double sd, uint64_t seed);

#endif /* SEER_DESSIM_H */
