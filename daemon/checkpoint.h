/* The checkpoint stage: trainers hand seerd their checkpoints in shared
 * memory; seerd makes them durable on this node's NVMe and drains them to
 * their PFS path (docs/checkpoint.md).
 *
 * Owns: struct ckpt (its own state; the engine holds none of it): the
 * checkpoints in flight and their state per level, the memory budget
 * ([checkpoint] memory), the NVMe copies under <nvme_dir>/seer-ckpt-<job>
 * (their own budget, [checkpoint] nvme; keep-last-K retention) and the
 * checkpoint connections (first packet with SEER_MAGIC_CKPT, handed over by
 * conn.c).
 *
 * Threads: three of its own (five with peer copies), all under ck->mu: the
 * peer sender (each committed checkpoint -> node + 1 over libfabric, crc32c; the
 * peer answers once its copy is complete, checked and fsync'd; a failed
 * copy is retried) and the peer receiver (node - 1's copies ->
 * <dir>/peer-<origin>/ or a memfd; a copy cut short or with a wrong checksum
 * is deleted, never served), both in checkpoint_peer.c (the held copies:
 * checkpoint_held.c); the service thread (checkpoint_svc.c: the
 * connections: BEGIN, COMMIT, WAIT, STATE, OPEN), the local writer
 * (checkpoint.c: memory -> NVMe, fsync) and the drain (checkpoint_drain.c:
 * -> a temporary name beside the PFS path, fsync, rename: a reader never
 * sees a partial file), capped by
 * [checkpoint] drain_rate and paced by seerd's own PFS reads now and in
 * the plan ahead (the outlook callback, drain_pace.h: full rate, the gaps
 * between reads filled, or drain_share of the time while reads are
 * queued). The dispatcher calls ckpt_attach, ckpt_list_json and
 * ckpt_create/ckpt_finish/ckpt_destroy.
 *
 * Failure: nothing is lost silently. An NVMe write that fails keeps the
 * checkpoint in memory and drains it from there; a PFS write that fails
 * (EIO, ENOSPC, permissions) leaves no file at the path, keeps the copy it
 * has (NVMe or memory), says why to WAIT/STATE and seerctl, and is retried
 * every 10 s. A copy on NVMe not yet drained is found by the next seerd of
 * the node and drained then. Memory full: BEGIN waits up to its timeout,
 * then is refused naming the key to raise. Out of memory aborts (the
 * daemon's rule). */
#ifndef SEERD_CHECKPOINT_H
#define SEERD_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "../src/config/config.h"
#include "drain_pace.h"

struct ckpt;

/* seerd's own PFS reads now and ahead (called on the drain thread after
 * each piece it writes; cheap). */
typedef void (*ckpt_outlook_fn)(void *arg, struct pfs_outlook *o);

/* Set up the stage and start its threads; recovers undrained NVMe copies of
 * this job left by an earlier seerd of the node. NULL with `err` on failure
 * (no thread, no memory). */
struct ckpt *ckpt_create(const struct seer_config *cfg, unsigned node, ckpt_outlook_fn outlook,
			 void *outlook_arg, char *err, size_t errlen);
/* Several nodes (nnodes), [checkpoint] peers = 1: open the libfabric links
 * ([net] provider), start receiving node - 1's copies (a thread of the stage)
 * and write into `addr` what node - 1 needs to reach it ("<address hex>
 * <secret hex>"; "" with peers = 0 or on failure, logged).
 * Dispatcher, at start, before ckpt_peer_start. */
int ckpt_peer_listen(struct ckpt *ck, uint32_t nnodes, char *addr, size_t len);
/* Every node's ckpt_peer_listen address (stride bytes each): start sending
 * each committed checkpoint to node (node + 1) % nnodes. NULL ck is fine. */
void ckpt_peer_start(struct ckpt *ck, uint32_t node, uint32_t nnodes, const char *addrs,
		    size_t stride);
/* A connection whose first packet (msg, n bytes) carries SEER_MAGIC_CKPT:
 * the stage owns fd from here (closes it on any failure). Dispatcher. */
void ckpt_attach(struct ckpt *ck, int fd, const void *msg, size_t n, pid_t pid);
/* `seerctl checkpoints`: JSON, malloc'd. */
char *ckpt_list_json(struct ckpt *ck);
/* The end of the daemon: refuse new checkpoints, let pending NVMe writes and
 * drains finish until `deadline` (now_s() clock), then log what is where. */
void ckpt_finish(struct ckpt *ck, double deadline);
/* Stop the threads, close the connections, free. NULL is fine. */
void ckpt_destroy(struct ckpt *ck);

#endif /* SEERD_CHECKPOINT_H */
