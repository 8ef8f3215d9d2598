/* Replicas: this node's copies of samples other nodes own (src/plan/plan.h,
 * plan_node; placement.c plans them), and how they get their bytes.
 *
 * Owns the background fills (struct repl, replica.h). Replicas are filled in the order of their
 * deadline (this node's first read of each after the plan's first epoch),
 * never before their owner has loaded the sample (its `ready` step of the
 * first epoch, judged by this node's trainers' progress: nodes of a job
 * move in step), from the owner over the data plane (cache.replica_fill =
 * peer) or from the PFS (= pfs, or when the owner is suspect). A fill never
 * delays a trainer's batch: it is queued behind every read a batch needs
 * (need_g NEED_NONE, keys after every batch's); at most io_threads / 4 of
 * them are PFS reads at once (they take I/O threads) and at most
 * max(8, io_threads / 2) are in flight in all (a fetch from a peer takes no
 * I/O thread here; its owner serves it as any peer read: from RAM on its
 * network thread, from NVMe through its bounce slots); and
 * cache.replica_fill_rate caps their bytes per second (a bucket of one
 * second's worth; the loop wakes at least once a second). A trainer that
 * reads a replica before its fill gets it from the owner and that read
 * fills it (repl_fetch); one that reads a replica being filled joins the
 * fill, which becomes as urgent as the read.
 *
 * RAM replicas land in their slot of the arena (the slot's cstate goes
 * READY as for owned samples); NVMe replicas land in a bounce slot (half of
 * the slots stay for serving peers) and are written to the NVMe file from
 * there (nvme.c), checked like every copy.
 *
 * Dispatcher thread only. Failure: a fill that fails leaves its replica
 * absent, and the next read of it loads it (from the PFS when the owner is
 * gone); a peer that does not answer makes the fill fall back to the PFS
 * (peer.c); out of memory aborts (the daemon's rule). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../src/util/util.h"
#include "engine_int.h"

/* Pool keys of background fills: after every key a batch's read can have
 * ((1 << 40) + batch * 1024 + 2048), in deadline order among themselves. */
#define REPL_KEY_BASE (1ull << 62)
/* Replicas looked at past the first one not started, per round. */
#define REPL_SCAN 1024u

static bool started(const struct engine *e, uint64_t i)
{
	return e->repl.started[i / 64] >> (i % 64) & 1;
}

static void mark(struct engine *e, uint64_t i)
{
	e->repl.started[i / 64] |= 1ull << (i % 64);
}

void repl_init(struct engine *e)
{
	const struct plan_node *nv = &e->repl.set;
	e->repl.started = xcalloc((nv->nrepl + 63) / 64 + 1, sizeof(uint64_t));
	e->repl.next = 0;
	e->repl.inflight = 0;
	e->repl.inflight_pfs = 0;
	e->repl.max_inflight = (uint32_t)MAX(8ull, e->cfg->prefetch.io_threads / 2);
	e->repl.max_pfs = (uint32_t)MAX(1ull, e->cfg->prefetch.io_threads / 4);
	e->repl.tokens = (double)MAX(e->cfg->cache.replica_fill_rate, e->cat->max_len);
	e->repl.t_ns = now_ns();
	e->repl.scan_g = UINT64_MAX;
}

void repl_free(struct engine *e)
{
	if (e->repl.on)
		plan_node_free(&e->repl.set);
	free(e->repl.started);
	e->repl.started = NULL;
	e->repl.on = false;
	e->repl.ram_planned = e->repl.nvme_planned = 0;
}

/* Where this node's trainers are: the earliest batch not yet published
 * among them (UINT64_MAX when none is known yet). */
static uint64_t progress(const struct engine *e)
{
	uint64_t p = UINT64_MAX;
	for (uint32_t i = 0; i < e->pl.nlocal; i++) {
		const struct trainer *t = &e->tr[e->pl.local_ranks[i]];
		if (t->attached)
			p = MIN(p, t->next_pub);
		else if (t->known && !t->done)
			p = MIN(p, t->resume_g);
	}
	return p;
}

/* cache.replica_fill_rate: may a fill start now? (A fill takes its bytes
 * when it starts; the bucket may go below zero by one sample.) */
static bool tokens_left(struct engine *e)
{
	double rate = (double)e->cfg->cache.replica_fill_rate;
	if (rate <= 0)
		return true;
	uint64_t now = now_ns();
	double burst = MAX(rate, (double)e->cat->max_len);
	e->repl.tokens = MIN(burst, e->repl.tokens + rate * (double)(now - e->repl.t_ns) / 1e9);
	e->repl.t_ns = now;
	return e->repl.tokens > 0;
}

static bool from_peer(const struct engine *e, uint32_t s)
{
	struct route_view v = place_view(e);
	return route_fill_src(&v, s, e->repl.from_pfs) == ROUTE_PEER;
}

/* tk loads replica s: from its owner (a peer fetch, true) or, when
 * route_fill_src says so, from the PFS (false: the caller queues it). */
static bool launch(struct engine *e, struct etask *tk)
{
	if (!from_peer(e, tk->sample))
		return false;
	tk->kind = TK_PEER;
	net_fetch(e->peers.net, e->plan.owner[tk->sample], tk->sample, e->ar.base + tk->dst_off, tk->len,
		  tk);
	return true;
}

bool repl_fetch(struct engine *e, struct etask *tk)
{
	if (!place_is_replica(e, tk->sample))
		return false;
	tk->repl = true;
	return launch(e, tk);
}

/* Background fill of replica i. 1: started; 0: not needed (loaded, being
 * loaded, known corrupt, or its NVMe tier is off); -EAGAIN: no bounce slot
 * or PFS read free for it now. */
static int fill_one(struct engine *e, uint64_t i)
{
	const struct plan_node *nv = &e->repl.set;
	uint32_t s = nv->smp[i];
	if (e->cstate[s] != CS_ABSENT || e->pl.bad[s] || (nv->tier[i] == PLAN_NVME && !nvme_on(e->nvme)))
		return 0;
	bool peer = from_peer(e, s);
	if (!peer && e->repl.inflight_pfs >= e->repl.max_pfs)
		return -EAGAIN;
	int32_t b = -1;
	if (nv->tier[i] == PLAN_NVME) {
		/* half the bounce slots stay free for peers' requests */
		if (e->peers.nfree <= e->peers.nslots / 2)
			return -EAGAIN;
		b = e->peers.free[--e->peers.nfree];
		e->peers.refs[b] = 1; /* the fill's */
	}
	uint64_t ep, step;
	plan_node_due(nv, i, &ep, &step);
	struct etask *tk = task_new(e);
	tk->sample = s;
	tk->len = xfs_src_len(e, s); /* the file, or its decoded image */
	tk->blob = xfs_blob(e, s);
	tk->repl = tk->repl_bg = true;
	tk->need_g = NEED_NONE;
	tk->bg_key = REPL_KEY_BASE + (ep * e->sh.bpe + step) * 1024;
	if (b < 0) {
		tk->to_cache = true;
		tk->ckey = s;
		tk->dst_off = arena_key_off(e, s);
	} else {
		tk->bounce = b;
		tk->dst_off = e->peers.base + (uint64_t)b * e->peers.size;
		tk->to_nvme = true; /* written to its NVMe slot once here */
	}
	e->cstate[s] = CS_TASK0 + tk->id;
	e->repl.inflight++;
	if (!peer || !launch(e, tk)) {
		e->repl.inflight_pfs++;
		task_submit(e, tk, NEED_NONE);
	}
	return 1;
}

void repl_fill(struct engine *e)
{
	if (!e->repl.on || !e->plan_ready || e->repl.next >= e->repl.set.nrepl ||
	    atomic_load(&e->stopping) || e->repl.inflight >= e->repl.max_inflight)
		return;
	uint64_t at = progress(e);
	if (at == UINT64_MAX || at == e->repl.scan_g)
		return; /* nobody to fill for yet, or nothing became ready since */
	const struct plan_node *nv = &e->repl.set;
	while (e->repl.next < nv->nrepl && started(e, e->repl.next))
		e->repl.next++;
	uint64_t first = sampler_tl_g(&e->tl, e->pl.first_epoch, 0);
	bool waiting = false, any = false;
	uint64_t end = MIN(nv->nrepl, e->repl.next + REPL_SCAN);
	for (uint64_t i = e->repl.next; i < end; i++) {
		if (started(e, i))
			continue;
		if (first + nv->ready[i] >= at) {
			waiting = true; /* its owner has not loaded it yet */
			continue;
		}
		if (e->repl.inflight >= e->repl.max_inflight || !tokens_left(e))
			return;
		int rc = fill_one(e, i);
		if (rc == -EAGAIN)
			return;
		mark(e, i);
		if (rc == 1) {
			e->repl.tokens -= (double)xfs_src_len(e, nv->smp[i]);
			any = true;
		}
	}
	/* the window holds only replicas their owners have yet to load: look
	 * again when the trainers have moved on */
	e->repl.scan_g = waiting && !any ? at : UINT64_MAX;
}

/* tk, which loads a replica (a background fill, or a read that found it not
 * filled), ended; the RAM slot or NVMe copy has already learnt it (task.c). */
void repl_landed(struct engine *e, struct etask *tk, int status)
{
	if (tk->repl_bg) {
		e->repl.inflight--;
		if (tk->kind != TK_PEER)
			e->repl.inflight_pfs--; /* (counted at its start or its fallback) */
		/* (its bounce slot, if any, is given back by complete.c next) */
	}
	if (status != 0) {
		e->repl.fills_failed++;
		return;
	}
	if (!tk->to_cache && !tk->to_nvme)
		return; /* substituted for a corrupt sample: not a replica's load any more */
	struct epoch_stats *es = stats_epoch(e, e->st.epochs_done);
	es->fill_samples++;
	es->fill_bytes += tk->len;
	e->repl.fills++;
	e->repl.fill_bytes += tk->len;
	if (tk->kind != TK_PEER)
		e->repl.fill_pfs_bytes += tk->len;
}
