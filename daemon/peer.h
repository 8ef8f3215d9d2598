/* The peer stage's state (peer.c says what it serves and how): this
 * node's data-plane handle, the bounce slots NVMe samples are sent to other
 * daemons from, and the requests it answers later.
 *
 * Owns struct peers (the engine holds it as e->peers). Threads: the
 * dispatcher's alone; the network thread (src/net/) is reached only through
 * `net` (its own queues and locks) and calls back peer_lookup, which reads
 * none of this. The bounce region (base, size, nslots) is fixed when the
 * arena is laid out (arena_layout), before any thread starts.
 * Failure: see peer.c (requests not held: -ENOENT; our failed fetch: PFS). */
#ifndef SEERD_PEER_H
#define SEERD_PEER_H

#include <stdint.h>

struct net;

/* A peer's request the dispatcher answers later (before the plan, or while
 * every bounce slot is taken). */
struct deferred_req {
	uint32_t peer, sample;
	uint64_t req_id, len;
};

struct peers {
	struct net *net;         /* NULL on one node */
	uint64_t base, size;     /* bounce slots in the arena: NVMe samples sent to peers */
	uint32_t nslots;
	int32_t *free;           /* stack of free slot indices */
	uint32_t nfree;
	uint32_t *refs;          /* per slot: the sends and NVMe writes still reading it */
	struct deferred_req *early;   /* requests that came before the plan */
	uint32_t nearly, capearly;
	struct deferred_req *bwait;   /* requests waiting for a bounce slot */
	uint32_t nbwait, capbwait;
};

#endif /* SEERD_PEER_H */
