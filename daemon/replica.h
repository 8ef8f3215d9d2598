/* The replica stage's state (replica.c says how replicas are filled):
 * this node's replica set and the background fills that give it its bytes.
 *
 * Owns struct repl (the engine holds it as e->repl): the set (planned by
 * placement.c, repl_plan, with the plan; freed with it), the fill order,
 * tokens and in-flight bounds, and the counts status reports.
 * Threads: the dispatcher's; the forecast thread reads `set` (fcast.c),
 * which does not change until fcast_stop joins it. Failure: a failed fill
 * leaves its replica absent (the next read loads it); a set too large to
 * plan: no replicas (`on` false, logged). */
#ifndef SEERD_REPLICA_H
#define SEERD_REPLICA_H

#include <stdbool.h>
#include <stdint.h>

#include "../src/plan/plan.h"

struct repl {
	bool on;                 /* set holds this node's replica set */
	struct plan_node set;    /* valid when on */
	bool from_pfs;           /* cache.replica_fill = pfs */
	uint64_t *started;       /* bit per replica: its fill started or is not needed */
	uint64_t next;           /* replicas before it all have their bit */
	uint64_t scan_g;         /* progress at the last scan that found only replicas
				    not ready (UINT64_MAX: scan) */
	uint32_t inflight, max_inflight;   /* background fills */
	uint32_t inflight_pfs, max_pfs;    /* ... of them PFS reads (I/O threads) */
	double tokens;           /* cache.replica_fill_rate bucket, bytes */
	uint64_t t_ns;           /* when the bucket was last topped up */
	uint64_t ram_planned, nvme_planned;
	uint64_t fills, fill_bytes, fills_failed;
	uint64_t fill_pfs_bytes; /* ... of fill_bytes, read from the PFS */
};

#endif /* SEERD_REPLICA_H */
