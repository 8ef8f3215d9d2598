/* Tier routing: where a trainer's need of a sample is served from, decided
 * per sample from the placement plan and what this node can use now:
 *
 *   RAM   the sample has a slot in this node's RAM cache for this rank (the
 *         node-wide plan's slot -- the owned copy or a replica -- or under
 *         cache.policy = nopfs the rank's own copy); key names the slot (an
 *         index into the engine's cstate)
 *   NVME  this node's NVMe tier holds (or will hold) it, owned or a replica,
 *         and the tier works
 *   PEER  another node caches it (and this node has no replica of it) and
 *         its daemon is not suspect
 *   PFS   anything else: the dataset itself
 *
 * A replica (src/plan/plan.h, plan_node) is a copy of a sample another node
 * owns, kept in this node's spare RAM or NVMe. It routes like an owned
 * sample; where its bytes come from the first time (its fill, or the read
 * that finds it not filled yet) is route_fill_src's answer.
 *
 * Also when a trainer's next batch is prepared (route_next: lookahead and
 * pacing).
 *
 * Whether the RAM slot or NVMe copy is loaded yet is not routing's business:
 * the prefetcher (prefetch.c) looks at the cache state after routing. Pure
 * functions of their arguments (tests/unit/test_route.c); the dispatcher
 * calls them. */
#ifndef SEERD_ROUTE_H
#define SEERD_ROUTE_H

#include <stdbool.h>
#include <stdint.h>

#include "../src/plan/plan_nopfs.h"

enum route_src { ROUTE_RAM = 0, ROUTE_NVME, ROUTE_PEER, ROUTE_PFS };

#define ROUTE_NOKEY UINT32_MAX

/* A RAM key's or NVMe sample's cache state (the engine's cstate): absent,
 * ready, or being loaded by task (state - CS_TASK0). */
enum { CS_ABSENT = 0, CS_READY = 1, CS_TASK0 = 2 };

/* What routing reads. tier/owner are the plan's (plan.h) arrays. */
struct route_view {
	uint32_t node;              /* this node */
	uint64_t nsamples;
	const uint8_t *tier;        /* per sample: enum plan_tier */
	const uint16_t *owner;      /* per sample: the node caching it */
	bool nvme_ok;               /* this node's NVMe tier is usable */
	const struct plan_nopfs *np; /* cache.policy = nopfs, else NULL */
	const uint32_t *local_idx;  /* nopfs: rank -> its share */
	/* this node's replicas (plan_node idx/tier): repl_idx[s] is 0, or 1 +
	 * the replica's index into repl_tier; NULL: no replicas */
	const uint32_t *repl_idx;
	const uint8_t *repl_tier;
	/* whether node's daemon may be asked now; NULL: no data plane */
	bool (*peer_ok)(void *ctx, uint32_t node);
	void *peer_ctx;
};

/* This node caches s in RAM / on NVMe (by the node-wide plan: the owned
 * copy or a replica). */
bool route_local_ram(const struct route_view *v, uint32_t s);
bool route_local_nvme(const struct route_view *v, uint32_t s);
/* This node owns s (holds the plan's one copy: the one peers ask for). */
bool route_owned(const struct route_view *v, uint32_t s);
/* s is a replica on this node. */
bool route_replica(const struct route_view *v, uint32_t s);
/* Where replica s's bytes come from when this node loads it (its
 * background fill, or a read that finds it not filled yet): ROUTE_PEER (its
 * owner) unless the fill source is the PFS (from_pfs), there is no data
 * plane, or the owner is suspect: then ROUTE_PFS. */
enum route_src route_fill_src(const struct route_view *v, uint32_t s, bool from_pfs);

/* The RAM slot serving `rank`'s need of s, or ROUTE_NOKEY. seer: one slot
 * per sample this node holds in RAM, owned or replica (key = s: a node
 * never owns and replicates the same sample), shared by every local trainer;
 * nopfs: the rank's own copy (key = nsamples + its plan_nopfs key). */
uint32_t route_ram_key(const struct route_view *v, uint32_t rank, uint32_t s);

/* Where rank's need of s is served from; *key is set for ROUTE_RAM. */
enum route_src route_sample(const struct route_view *v, uint32_t rank, uint32_t s,
			    uint32_t *key);

/* Whether serving rank's need of s from src (route_sample's answer, key
 * its RAM key) still takes a PFS read: ROUTE_PFS always; RAM or NVMe while
 * the copy is absent (state: cstate of the RAM key, or of s for NVMe) and
 * its load comes from the PFS (this node's own copy, a nopfs copy, or a
 * replica whose fill source is the PFS: route_fill_src with from_pfs); a
 * copy loading or loaded, or a peer, never. The checkpoint drain's outlook
 * (prefetch.c, pf_outlook) counts these ahead of the trainers. */
bool route_reads_pfs(const struct route_view *v, enum route_src src, uint32_t key, uint32_t s,
		     uint32_t state, bool from_pfs);

/* ---- when a trainer's next batch is prepared ----
 *
 * A trainer's batches are prepared in order, `lookahead` ahead of what it
 * took. Pacing (prefetch.pace): a trainer takes a batch, reads it, then
 * computes; preparing its next batch at the take makes that batch's
 * transfers compete with its read on a node whose cores are all busy. So
 * when it still holds a published batch beyond the one it took (it will
 * not wait), the prepare waits until a quarter of a step (at most
 * ROUTE_PACE_MAX_NS) after the take was first seen, when it is computing.
 * Behind (nothing more in hand), before a step time is known, or when a
 * quarter step is under ROUTE_PACE_MIN_NS (the dispatcher sleeps in ms): at
 * once. */
#define ROUTE_PACE_MAX_NS 50000000ull
#define ROUTE_PACE_MIN_NS 1000000ull

struct route_next {
	uint64_t next_prep;      /* the trainer's next batch to prepare (global g) */
	uint64_t next_pub;       /* its next batch to publish */
	uint64_t taken;          /* batches it took (next_pub less those unread) */
	uint64_t lookahead;      /* prefetch.lookahead */
	bool pace;               /* prefetch.pace */
	double step_s;           /* a trainer's time per batch (0: not known yet) */
	uint64_t taken_ns;       /* when `taken` was first seen */
	uint64_t now_ns;
};

enum route_go {
	ROUTE_WAIT = 0,          /* lookahead batches ahead already */
	ROUTE_PREPARE,           /* now */
	ROUTE_PACED,             /* not before *until_ns */
};

/* Whether the next batch (its slot free, the trainer attached) is prepared
 * now, later (ROUTE_PACED, *until_ns set) or not until it takes another. */
enum route_go route_next(const struct route_next *n, uint64_t *until_ns);

#endif /* SEERD_ROUTE_H */
