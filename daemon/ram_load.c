/* RAM-cache loads: the one way a sample's RAM slot gets its bytes. A load
 * is a task reading the PFS (or, for a replica not filled yet, its owner:
 * repl_fetch) into the slot at the plan's offset; whoever needs the slot
 * meanwhile -- a batch being prepared, fill, a peer's request, a substitute
 * for a corrupt sample, an extent taking it as a member -- joins that load.
 *
 * Owns the RAM keys' states in cstate from ABSENT to the loading task to
 * READY (release-stored: the network thread then reads the bytes), the
 * RAM cache's loaded counts (e->pl.cache_loaded*) and fill's budget and
 * in-flight count (e->pf.fill_left, fill_inflight). Dispatcher thread only.
 * Failure: a failed load leaves the slot ABSENT for the next need to load
 * again (and gives fill its budget back). */
#define _GNU_SOURCE
#include <stdatomic.h>

#include "engine_int.h"

/* The task loading RAM key `key` (sample s) for global batch g (0: now):
 * the one loading it already, made at least that urgent, or a new PFS read
 * into the slot. fill: a load ahead of need, counted in fill's budget. The
 * one way a RAM-cache load starts (prepare, fill, a peer's request, a
 * substitute for a corrupt sample). */
struct etask *ram_load(struct engine *e, uint32_t key, uint32_t s, uint64_t g, bool fill)
{
	uint32_t st = e->cstate[key];
	struct etask *tk;
	if (st >= CS_TASK0) {
		tk = task_get(e, st - CS_TASK0);
		task_need(e, tk, g);
		return tk;
	}
	tk = ram_load_new(e, key, s, fill);
	tk->need_g = g;
	if (!repl_fetch(e, tk)) /* a replica comes from its owner */
		task_submit(e, tk, g);
	return tk;
}

/* A new PFS read of RAM key `key` (sample s, absent) into its slot, not yet
 * submitted (an extent takes it as a member, extent.c). */
struct etask *ram_load_new(struct engine *e, uint32_t key, uint32_t s, bool fill)
{
	struct etask *tk = task_new(e);
	tk->sample = s;
	tk->to_cache = true;
	tk->ckey = key;
	tk->fill = fill;
	tk->dst_off = arena_key_off(e, key);
	tk->len = xfs_src_len(e, s); /* the file, or its decoded image */
	tk->blob = xfs_blob(e, s);
	e->cstate[key] = CS_TASK0 + tk->id;
	if (!place_is_replica(e, key))
		e->pf.fill_left--; /* (fill's budget is this node's owned samples) */
	if (fill)
		e->pf.fill_inflight++;
	return tk;
}

/* A RAM-cache load ended: the slot is READY (the release store publishes
 * the bytes to the network thread's lookup), or ABSENT again for the next
 * need to retry. */
void ram_load_done(struct engine *e, struct etask *tk, int status)
{
	if (status == 0) {
		atomic_store_explicit(&e->cstate[tk->ckey], CS_READY, memory_order_release);
		e->pl.cache_loaded++;
		e->pl.cache_loaded_bytes += tk->len;
	} else {
		e->cstate[tk->ckey] = CS_ABSENT;
		if (!tk->repl)
			e->pf.fill_left++;
	}
	if (tk->fill)
		e->pf.fill_inflight--;
}
