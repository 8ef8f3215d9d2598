/* The control plane: the daemons of a job joined by MPI.
 *
 * seerd uses MPI only when a launcher started it (mpirun, or srun with
 * PMIx): a daemon started by hand is a one-node job and pays no MPI start-up.
 * All MPI calls happen on the event-loop thread. Blocking collectives are
 * used only during start-up (catalog, configuration, capacities, fabric
 * addresses); afterwards the loop polls non-blocking messages:
 *
 *   ROLL  node -> 0   "these trainer ranks attached here" (world size, ranks, the
 *                     resume plan they attached with, their earliest batch)
 *   MAP   0 -> all    the agreed rank -> node map and resume plan, once every
 *                     rank is known (node 0 checks that every node's plan is
 *                     the same: a fatal error otherwise)
 *   ABORT any -> all  a fatal error: every daemon stops with the message
 * and a non-blocking barrier decides when every node is done, so no daemon
 * leaves while a peer may still fetch samples from it. */
#ifndef SEERD_CLUSTER_H
#define SEERD_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../src/catalog/catalog.h"
#include "../src/config/config.h"

struct cluster;

/* Join the job. Sets *node and *nnodes (0 and 1 without a launcher). */
int cluster_init(struct cluster **out, int *argc, char ***argv, uint32_t *node, uint32_t *nnodes);
/* Leave: MPI_Finalize, or MPI_Abort when code != 0 and peers may hang. */
void cluster_fini(struct cluster *cl, int code);
bool cluster_is_mpi(const struct cluster *cl);

/* Every node must run with the same job configuration: 0, or -EINVAL with
 * one message (on every node) naming the node and the keys that differ. */
int cluster_agree_config(struct cluster *cl, const struct seer_config *cfg, char *err,
			 size_t errlen);
/* Node 0 builds (or loads) the catalog and broadcasts it; every node checks
 * that it sees the same dataset (a sample of files' sizes). */
int cluster_share_catalog(struct cluster *cl, const struct catalog_opts *o, struct catalog **out,
			  char *err, size_t errlen);
/* Node 0's `len` bytes at buf to every node (blocking). */
int cluster_bcast(struct cluster *cl, void *buf, size_t len);
/* Blocking all-gather of `len` bytes per node into all[nnodes * len]. */
int cluster_allgather(struct cluster *cl, const void *mine, size_t len, void *all);

/* ---- after start-up: called from the event loop ----------------------- */

/* A node's resume plan as the control plane carries it: every node must
 * plan alike (the same key), from the job's earliest batch. */
struct cluster_plan {
	uint32_t world;
	uint32_t key;     /* the plan's key (jobrec.c; 0: a plain plan) */
	uint64_t start;   /* roll: the earliest batch of a rank here; map: of any rank */
	uint32_t run;     /* map: the run's id (names the position files) */
	uint32_t rec_len;
	uint8_t *rec;     /* the record the plan was made from (map: malloc'd) */
};

/* Tell node 0 which trainer ranks are attached here and with what plan
 * (before the map). */
void cluster_roll(struct cluster *cl, const struct cluster_plan *plan, const uint32_t *ranks,
		  uint32_t n);
/* Progress messages. Returns true when the rank map arrived: *plan and
 * *rank_node (malloc'd, plan->world entries; plan->rec malloc'd too) are set.
 * A fatal ABORT from another node or a conflicting roll sets *fatal (static
 * text) instead. */
bool cluster_poll(struct cluster *cl, struct cluster_plan *plan, uint32_t **rank_node,
		  const char **fatal);
/* Broadcast a fatal error to every node. */
void cluster_abort_all(struct cluster *cl, const char *msg);
/* Ask every other node to stop (SIGTERM, seerctl stop), and whether such a
 * request arrived here (reported once). */
void cluster_stop_all(struct cluster *cl);
bool cluster_stop_requested(struct cluster *cl);
/* This node has finished its part (enter the non-blocking barrier). */
void cluster_local_done(struct cluster *cl);
/* Every node finished (the barrier completed). */
bool cluster_all_done(struct cluster *cl);
/* Messages are pending that need quick polling (map not yet known). */
bool cluster_busy(const struct cluster *cl);
/* This node's trainers attached and the rank map is awaited (the first 2 s):
 * poll every millisecond, the trainers are waiting for it. */
bool cluster_urgent(const struct cluster *cl);

#endif /* SEERD_CLUSTER_H */
