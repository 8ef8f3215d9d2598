/* The placement stage's state (placement.c says how the shape and the plan
 * are made): the sampler of the job's shape, the batch scratch routing
 * fills, this node's local ranks, the per-node capacities, the nopfs
 * copies, the RAM cache's counts and the samples known bad.
 *
 * Owns struct place (the engine holds it as e->pl); the shape's world,
 * slots and readiness, the rank map and the published plan stay in the
 * engine (the sessions' handshake and the network thread read them).
 * Threads: the dispatcher's; the forecast thread reads local_ranks, caps
 * and the shape (fcast.c), which do not change until fcast_stop joins it.
 * Failure: see placement.c (a shape that gives no batch refuses the
 * trainer; staging too small for the plan is fatal); out of memory aborts. */
#ifndef SEERD_PLACEMENT_H
#define SEERD_PLACEMENT_H

#include <stdint.h>

#include "../src/plan/plan.h"
#include "../src/plan/plan_nopfs.h"
#include "../src/sampler/sampler.h"

struct place {
	struct sampler_cache smp;
	uint64_t end;            /* the job's last global batch + 1 (sampler_tl_end) */
	uint64_t default_start;  /* from [job] resume */
	uint32_t *ids;           /* batch scratch: sample ids */
	uint32_t *keys;          /* batch scratch: RAM keys (ROUTE_RAM) */
	uint8_t *routes;         /* batch scratch: enum route_src */
	struct plan_cap *caps;   /* per node */
	uint64_t first_epoch;
	uint32_t nlocal;
	uint32_t *local_ranks;
	uint32_t *local_idx;     /* rank -> index among the local ranks */
	struct plan_nopfs np;    /* cache.policy = nopfs: each local trainer's copies */
	uint64_t local_cached_bytes;
	uint64_t cache_planned, cache_loaded, cache_loaded_bytes; /* owned RAM samples */
	uint8_t *bad;            /* samples that failed their format checks (skip policy) */
};

#endif /* SEERD_PLACEMENT_H */
