/* forecast: before a job runs, the bytes seer's plan moves per epoch and per
 * node by source (local RAM, local NVMe, peers, PFS), replica fills included,
 * and the predicted epoch time from rates:
 *
 *   time = max(compute, PFS bytes / PFS bandwidth, network bytes / network
 *              bandwidth, NVMe bytes / NVMe bandwidth, decode time / cores)
 *
 * with the binding term named. The same code serves seer-plan (rates from the
 * command line) and the daemon and `seerctl forecast` (rates it has
 * measured; its own node only: forecast_tally_node and forecast_node_forecast below):
 * everything is a function of the job and the rates.
 *
 * The bytes come from replaying the job's exact access sequence against the
 * plan (src/plan/plan.h: the owner map and every node's replica set, as each
 * daemon computes it). What is modelled, and what is not, is in
 * docs/planner.md ("Forecast"). In short: per epoch and node, bytes are
 * exact; replica fills are background traffic placed, earliest deadline
 * first, into the network time an epoch leaves unused (a fill that misses its
 * deadline becomes the read that needed it); times are bandwidth bounds, no
 * latency or queueing (the discrete-event simulation, src/sim/dessim.h, adds
 * those).
 *
 * Not thread-safe per object; separate jobs may run concurrently. */
#ifndef SEER_FORECAST_H
#define SEER_FORECAST_H

#include <stdbool.h>
#include <stdint.h>

#include "plan.h"
#include "../sampler/sampler.h"

/* Every epoch's order of a job, computed on first use and kept (4 n bytes
 * per epoch), so repeated forecasts (the capacity search) and per-node
 * replica selection do not recompute permutations. */
struct forecast_orders {
	const struct sampler_shape *sh;
	uint64_t first, count;    /* epochs first .. first + count - 1 */
	uint32_t **perm;
	bool failed;              /* an allocation failed */
};

int forecast_orders_init(struct forecast_orders *o, const struct sampler_shape *sh, uint64_t first_epoch,
		   uint64_t epochs);
void forecast_orders_free(struct forecast_orders *o);
/* The provider plan_node_build takes. */
struct plan_orders forecast_orders_provider(struct forecast_orders *o);
/* Order of `epoch` (within the range), or NULL on out of memory. */
const uint32_t *forecast_order(struct forecast_orders *o, uint64_t epoch);

/* Rates. A zero rate drops its term. */
struct forecast_rates {
	double compute_s;          /* per training step */
	double pfs_bw;             /* aggregate PFS bytes/s (when npfs == 0) */
	const double *pfs_clients; /* t(clients): npfs points, clients ascending */
	const double *pfs_curve;   /* aggregate bytes/s at that many clients */
	uint32_t npfs;
	double net_bw;             /* per node and direction, bytes/s */
	double nvme_bw;            /* per node, bytes/s read from NVMe */
	double decode_s;           /* per sample, one core */
	uint32_t cores;            /* per node, for decoding (0: 1) */
};

/* Aggregate PFS bandwidth with `clients` nodes reading: pfs_bw, or the curve
 * interpolated linearly between its points and held flat outside them (the
 * NoPFS simulator's rule, Böhringer 2021, eq. 4.1). */
double forecast_pfs_bw(const struct forecast_rates *r, double clients);

struct forecast_job {
	const uint64_t *len;        /* sh->n sample sizes */
	const struct sampler_shape *sh;
	uint64_t epochs;            /* epochs 0 .. epochs - 1 */
	uint32_t nnodes;
	const uint32_t *rank_node;  /* sh->world entries */
	const struct plan_cap *cap; /* nnodes entries */
	struct plan_repl_opts repl;
	struct forecast_orders *orders;   /* optional: shared across runs of the same job */
};

enum forecast_term { FORECAST_COMPUTE = 0, FORECAST_PFS, FORECAST_NET, FORECAST_NVME, FORECAST_DECODE, FORECAST_NTERMS };
const char *forecast_term_name(enum forecast_term t);

/* One node's bytes in one epoch (or a sum or maximum over nodes). */
struct forecast_bytes {
	uint64_t reads;       /* samples its trainers read */
	uint64_t demand;      /* bytes its trainers read */
	uint64_t ram, nvme;   /* ... served from its own RAM / NVMe */
	uint64_t repl;        /* ... of which from replicas */
	uint64_t peer_in;     /* ... served by peers */
	uint64_t pfs;         /* ... read from the PFS */
	uint64_t peer_out;    /* bytes it served to peers' reads */
	uint64_t pfs_load;    /* PFS bytes loading its cache that no read of its
			       * own took (spills, unread planned samples,
			       * replicas filled from the PFS) */
	uint64_t fill_in;     /* replica bytes it received from owners */
	uint64_t fill_out;    /* replica bytes it sent as an owner */
	uint64_t nvme_read;   /* bytes read from its NVMe: its reads, peers'
			       * reads and fills it served */
};

struct forecast_epoch {
	struct forecast_bytes sum, max;  /* over nodes (max field by field) */
	uint64_t net_max;          /* most network bytes of one node, one direction,
				    * fills included */
	uint64_t distinct;         /* bytes of the distinct samples read */
	double t[FORECAST_NTERMS];       /* seconds per term */
	double time;               /* max of the terms */
	enum forecast_term bound;
	double lb;                 /* lower bound: max(compute, decode, the
				    * optimum's PFS bytes / PFS bandwidth) */
	uint64_t pfs_opt;          /* the optimum's PFS bytes this epoch */
};

struct forecast_result {
	uint64_t epochs;
	uint32_t nnodes;
	struct forecast_epoch *ep;
	struct forecast_bytes *node;     /* epochs x nnodes: node[e * nnodes + k] */
	struct forecast_bytes total;     /* sums over the job */
	double time, lb;           /* sums over epochs */
	uint64_t dataset;          /* D */
	uint64_t capacity;         /* sum of RAM + NVMe */
	uint64_t owned;            /* bytes of the owned plan (one copy each) */
	uint64_t spilled;
	uint64_t repl_bytes;       /* replica bytes over all nodes */
	uint64_t repl_count;
	uint64_t repl_min, repl_max; /* replica bytes of the least / most */
};

/* 0, -EINVAL, -ENOMEM, -EOVERFLOW (plan_node_build). */
int forecast_run(const struct forecast_job *job, const struct forecast_rates *r, struct forecast_result *out);
void forecast_result_free(struct forecast_result *r);

/* Is an epoch I/O-bound (PFS, network or NVMe binds)? */
static inline bool forecast_io_bound(const struct forecast_epoch *e)
{
	return e->time > 0 && (e->bound == FORECAST_PFS || e->bound == FORECAST_NET || e->bound == FORECAST_NVME);
}

/* The smallest capacity per node for which no epoch after the first is
 * I/O-bound, found by bisection to within `tol` bytes: RAM with every node's
 * NVMe as in job->cap (which_nvme false), or NVMe with RAM as in job->cap
 * (true). *found false: not even a whole dataset's worth is enough (then
 * *bytes is that upper end). Capacities of every node are set alike. */
int forecast_min_capacity(const struct forecast_job *job, const struct forecast_rates *r, bool which_nvme,
		    uint64_t tol, uint64_t *bytes, bool *found);

/* ---- one node's forecast, for a running daemon (src/plan/forecast_node.c) -----
 *
 * forecast_run replays every node and keeps every epoch's order: right for the
 * tools, too much for a daemon (461 MiB of orders at ImageNet / 90 epochs).
 * A daemon knows the owner map and its own replica set only, so it
 * forecasts its own node:
 *   - its bytes by source per epoch are exact: the same replay as forecast_run's,
 *     one epoch order at a time;
 *   - the cluster's PFS bytes are exact (first reads, spills, uncached
 *     samples; replica fills from the PFS are this node's times nodes);
 *   - what it sends is estimated, because the other nodes' replica sets are
 *     not known here but are the same in distribution under uniform
 *     shuffling: peers' reads of its samples are served by their replicas
 *     in the proportion its own reads of theirs are by its replicas (exact
 *     with replicas off), and they fill from it what it fills from them.
 * Memory: one epoch order (4 n bytes) while tallying, then O(epochs).
 *
 * Two steps: forecast_tally_node counts the bytes (no rates: once per plan,
 * O(epochs x n) time, on a thread of its own in the daemon), and
 * forecast_node_forecast adds the rates: missed fills, fills placed in the time
 * each epoch leaves unused, the time terms (O(epochs^2), cheap enough for
 * every request). Epoch i of both is the job's epoch first_epoch + i. */

struct forecast_tally_epoch {
	struct forecast_bytes b;         /* this node, every replica filled by its deadline:
				    * fill_* and peer_out zero (forecast_node_forecast
				    * estimates them) */
	uint64_t peer_in1;         /* this node's reads owned elsewhere (one copy) */
	uint64_t peer_out1;        /* peers' reads of samples this node owns (one copy) */
	uint64_t peer_out1_nvme;   /* ... of those, owned on its NVMe */
	uint64_t pfs_all;          /* the whole cluster's PFS bytes (no replica fills) */
	uint64_t distinct;         /* bytes of the distinct samples read */
	uint64_t due, due_ram;     /* replica bytes first needed this epoch (in RAM) */
};

struct forecast_tally {
	uint64_t first_epoch, epochs;
	uint32_t node, nnodes;
	uint64_t steps;            /* per epoch */
	uint64_t dataset;          /* D */
	uint64_t capacity;         /* all nodes' RAM + NVMe */
	uint64_t owned, owned_nvme; /* bytes this node owns (one copy), on NVMe */
	uint64_t repl_bytes;
	bool pfs_fill;             /* replicas filled from the PFS */
	struct forecast_tally_epoch *ep; /* epochs entries */
};

/* This node's bytes over epochs first_epoch .. first_epoch + epochs - 1 of
 * plan p (built with the same sh, first_epoch, rank_node, cap) and its
 * replica set nv (NULL: none). len: sample sizes, or NULL to take them from
 * catalog c. cap: every node's capacities (p->nnodes entries). 0, -EINVAL,
 * -ENOMEM (nothing to free then). */
int forecast_tally_node(struct forecast_tally *t, const struct plan *p, const struct plan_node *nv,
		  const struct catalog *c, const uint64_t *len, const struct sampler_shape *sh,
		  uint64_t first_epoch, uint64_t epochs, const uint32_t *rank_node, uint32_t node,
		  const struct plan_cap *cap);
void forecast_tally_free(struct forecast_tally *t);

struct forecast_node_epoch {
	struct forecast_bytes b;         /* this node's bytes, fills and missed fills
				    * included (peer_out, fill_out estimated) */
	uint64_t pfs_all;          /* the cluster's PFS bytes, PFS fills included */
	uint64_t pfs_opt;          /* the optimum's PFS bytes this epoch */
	double t[FORECAST_NTERMS];       /* seconds per term */
	double time;               /* the largest */
	enum forecast_term bound;
	double lb;                 /* max(compute, decode, pfs_opt / PFS bandwidth) */
};

/* The forecast of t with rates r into out (t->epochs entries): per epoch,
 * fills due then that no earlier epoch had room for become the reads that
 * need them, then the terms, then fills into the unused time (as forecast_run).
 * 0 or -ENOMEM. */
int forecast_node_forecast(const struct forecast_tally *t, const struct forecast_rates *r, struct forecast_node_epoch *out);

#endif /* SEER_FORECAST_H */
