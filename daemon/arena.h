/* The arena's state (arena.c says how the segment is cut up and filled):
 * the one shared-memory segment per daemon that every local trainer maps,
 * where it is mapped here, and its parts.
 *
 *   header | sample type table | RAM cache | staging | bounce slots
 *
 * Owns struct arena (the engine holds it as e->ar); the bounce slots' place
 * is the peer stage's (peer.h). Threads: set up on the dispatcher before any
 * other thread exists, then fixed: the I/O, network and transform threads
 * read `base` and `cache_base` and write the bytes their task names;
 * stage_filled and stage_split are the dispatcher's. Failure: a segment
 * that cannot be made stops the daemon with the reason (arena.c). */
#ifndef SEERD_ARENA_H
#define SEERD_ARENA_H

#include <stdbool.h>
#include <stdint.h>

#include "../src/common/shm.h"

struct arena {
	struct shm_seg seg;      /* the memfd the trainers map */
	uint8_t *base;           /* where it is mapped here */
	uint64_t cache_base, cache_cap; /* the RAM cache */
	uint64_t stage_base, stage_cap; /* staging, split among the trainers */
	uint64_t stage_filled;   /* staging's first bytes populated */
	bool stage_split;        /* the trainers' shares are set (arena_split_staging) */
};

#endif /* SEERD_ARENA_H */
