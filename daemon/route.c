/* Tier routing (see route.h): pure functions, called on the dispatcher. */
#include "route.h"

#include "../src/plan/plan.h"

bool route_owned(const struct route_view *v, uint32_t s)
{
	return v->tier[s] != PLAN_NONE && v->owner[s] == v->node;
}

bool route_replica(const struct route_view *v, uint32_t s)
{
	return v->repl_idx && v->repl_idx[s];
}

/* The tier s sits in on this node: the owned copy's, a replica's, or none. */
static uint8_t local_tier(const struct route_view *v, uint32_t s)
{
	if (route_owned(v, s))
		return v->tier[s];
	if (route_replica(v, s))
		return v->repl_tier[v->repl_idx[s] - 1];
	return PLAN_NONE;
}

bool route_local_ram(const struct route_view *v, uint32_t s)
{
	return local_tier(v, s) == PLAN_RAM;
}

bool route_local_nvme(const struct route_view *v, uint32_t s)
{
	return v->nvme_ok && local_tier(v, s) == PLAN_NVME;
}

enum route_src route_fill_src(const struct route_view *v, uint32_t s, bool from_pfs)
{
	if (!from_pfs && v->tier[s] != PLAN_NONE && v->owner[s] != v->node && v->peer_ok &&
	    v->peer_ok(v->peer_ctx, v->owner[s]))
		return ROUTE_PEER;
	return ROUTE_PFS;
}

uint32_t route_ram_key(const struct route_view *v, uint32_t rank, uint32_t s)
{
	if (!v->np)
		return route_local_ram(v, s) ? s : ROUTE_NOKEY;
	uint32_t k = plan_nopfs_key(v->np, v->local_idx[rank], s);
	return k == PLAN_NOPFS_NONE ? ROUTE_NOKEY : (uint32_t)v->nsamples + k;
}

enum route_src route_sample(const struct route_view *v, uint32_t rank, uint32_t s, uint32_t *key)
{
	*key = route_ram_key(v, rank, s);
	if (*key != ROUTE_NOKEY)
		return ROUTE_RAM;
	if (route_local_nvme(v, s))
		return ROUTE_NVME;
	uint32_t owner = v->owner[s];
	if (v->tier[s] != PLAN_NONE && owner != v->node && v->peer_ok &&
	    v->peer_ok(v->peer_ctx, owner))
		return ROUTE_PEER;
	return ROUTE_PFS;
}

bool route_reads_pfs(const struct route_view *v, enum route_src src, uint32_t key, uint32_t s,
		     uint32_t state, bool from_pfs)
{
	if (src == ROUTE_PFS)
		return true;
	if (src == ROUTE_PEER || state != CS_ABSENT)
		return false;
	if (src == ROUTE_RAM && key >= v->nsamples)
		return true; /* nopfs: the rank's own copy, read from the PFS */
	return !route_replica(v, s) || route_fill_src(v, s, from_pfs) == ROUTE_PFS;
}

enum route_go route_next(const struct route_next *n, uint64_t *until_ns)
{
	if (n->next_prep >= n->taken + n->lookahead)
		return ROUTE_WAIT;
	if (!n->pace || n->step_s <= 0 || n->next_pub == n->taken)
		return ROUTE_PREPARE; /* off, no step time yet, or nothing more in hand */
	uint64_t wait = (uint64_t)(n->step_s * 0.25e9);
	if (wait > ROUTE_PACE_MAX_NS)
		wait = ROUTE_PACE_MAX_NS;
	if (wait < ROUTE_PACE_MIN_NS)
		return ROUTE_PREPARE; /* a step too short to place anything in */
	uint64_t until = n->taken_ns + wait;
	if (n->now_ns >= until)
		return ROUTE_PREPARE;
	*until_ns = until;
	return ROUTE_PACED;
}
