/* Peer serving: this node's side of the data plane (src/net/net_fabric.c).
 *
 * Owns the answers to other daemons' requests for samples this node caches:
 * from RAM at once when loaded (on the network thread, peer_lookup), else
 * here on the dispatcher once the load ends; NVMe samples through bounce
 * slots of the arena (a request for a copy being loaded follows that load);
 * requests that came before the plan, replayed once it exists. Only owned
 * samples are served: replicas (replica.c) are this node's own. Also takes
 * the network thread's events (fetches of ours that ended, requests,
 * replies sent). Threads: peer_lookup runs on the network
 * thread and reads only what engine_int.h says; everything else runs on the
 * dispatcher. Failure: a request for a sample this node does not hold, or
 * of the wrong length, gets -ENOENT; a sample failing its checks -EBADMSG;
 * a failed fetch of ours falls back to the PFS. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../src/util/util.h"
#include "engine_int.h"

#define BOUNCE_COOKIE(b) ((void *)(intptr_t)((b) + 1))

#define COOKIE_BOUNCE(p) ((int32_t)(intptr_t)(p) - 1)

void peer_bounce_unref(struct engine *e, int32_t b)
{
	if (b < 0 || (uint32_t)b >= e->peers.nslots || e->peers.refs[b] == 0)
		return;
	if (--e->peers.refs[b] > 0)
		return;
	e->peers.free[e->peers.nfree++] = b;
	/* a request waiting for a slot can go now */
	if (e->peers.nbwait > 0) {
		struct deferred_req r = e->peers.bwait[0];
		memmove(e->peers.bwait, e->peers.bwait + 1, --e->peers.nbwait * sizeof(*e->peers.bwait));
		peer_request(e, r.peer, r.req_id, r.sample, r.len);
	}
}

/* Send the bytes at arena offset off for a peer's request, counted as
 * served; a bounce slot stays referenced until the network thread reports
 * REPLY_DONE. */
static void peer_send(struct engine *e, uint32_t peer, uint64_t req_id, uint64_t off, uint64_t len,
		      int32_t bounce)
{
	net_reply(e->peers.net, peer, req_id, e->ar.base + off, len,
		  bounce >= 0 ? BOUNCE_COOKIE(bounce) : NULL);
	struct epoch_stats *es = stats_epoch(e, e->st.epochs_done);
	es->served_samples++;
	es->served_bytes += len;
}

/* tk, which the peer request w waits for, ended with status: the bytes or
 * the error go to the peer. */
void peer_answer(struct engine *e, const struct etask *tk, const struct waiter *w, int status)
{
	if (status == 0) {
		peer_send(e, w->a, w->c, tk->dst_off, tk->len, tk->bounce);
		return;
	}
	net_reply_error(e->peers.net, w->a, w->c, status < 0 && status > -4096 ? status : -EIO);
	if (tk->bounce >= 0)
		peer_bounce_unref(e, tk->bounce);
}

static void peer_request_nvme(struct engine *e, uint32_t peer, uint64_t req_id, uint32_t s,
			      uint64_t len)
{
	if (e->peers.nfree == 0) {
		if (e->peers.nbwait == e->peers.capbwait) {
			e->peers.capbwait = MAX(e->peers.capbwait * 2, 64);
			e->peers.bwait = xrealloc(e->peers.bwait, e->peers.capbwait * sizeof(*e->peers.bwait));
		}
		e->peers.bwait[e->peers.nbwait++] = (struct deferred_req){ peer, s, req_id, len };
		return;
	}
	int32_t b = e->peers.free[--e->peers.nfree];
	e->peers.refs[b] = 1; /* the reply's */
	struct etask *tk = task_new(e);
	tk->sample = s;
	tk->bounce = b;
	tk->dst_off = e->peers.base + (uint64_t)b * e->peers.size;
	tk->len = len;
	tk->blob = xfs_blob(e, s); /* a PFS read of it makes the decoded image */
	task_wait_w(tk, (struct waiter){ .peer = true, .a = peer, .c = req_id });
	struct etask *ld = nvme_load_claim(e, tk, s);
	if (ld) {
		/* being loaded meanwhile: read the copy once it is written (the
		 * sample's one PFS read stays one, also when a replica fill asks
		 * while this node loads it), now urgent */
		task_need(e, ld, 0);
		tk->kind = TK_NVME_READ;
		tk->next_follower = ld->followers;
		ld->followers = tk;
		return;
	}
	task_submit(e, tk, 0);
}

/* Owner side: a peer asked for a sample the network thread could not send
 * at once (not loaded yet, on NVMe, or the plan was not ready then). */
void peer_request(struct engine *e, uint32_t peer, uint64_t req_id, uint32_t s, uint64_t len)
{
	if (!e->plan_ready) {
		if (e->peers.nearly == e->peers.capearly) {
			e->peers.capearly = MAX(e->peers.capearly * 2, 64);
			e->peers.early = xrealloc(e->peers.early, e->peers.capearly * sizeof(*e->peers.early));
		}
		e->peers.early[e->peers.nearly++] = (struct deferred_req){ peer, s, req_id, len };
		return;
	}
	/* peers ask the owner only: this node's replicas are not served */
	struct route_view v = place_view(e);
	bool owned = s < e->cat->nsamples && route_owned(&v, s);
	if (owned && route_local_nvme(&v, s) && len == xfs_src_len(e, s) &&
	    e->peers.nslots > 0) {
		peer_request_nvme(e, peer, req_id, s, len);
		return;
	}
	if (!owned || !route_local_ram(&v, s) || len != xfs_src_len(e, s)) {
		net_reply_error(e->peers.net, peer, req_id, -ENOENT);
		return;
	}
	if (e->pl.bad[s]) {
		net_reply_error(e->peers.net, peer, req_id, -EBADMSG); /* it fails its checks */
		return;
	}
	if (e->cstate[s] == CS_READY) {
		peer_send(e, peer, req_id, arena_key_off(e, s), len, -1);
		return;
	}
	/* this node owns it: the load under way, or the one PFS read of it,
	 * now (a peer is waiting) */
	struct etask *tk = ram_load(e, s, s, 0, false);
	task_wait_w(tk, (struct waiter){ .peer = true, .a = peer, .c = req_id });
}

void peer_events(struct engine *e)
{
	if (!e->peers.net)
		return;
	struct net_event *ev = net_take_events(e->peers.net);
	while (ev) {
		struct net_event *next = ev->next;
		if (ev->kind == NET_FETCH_DONE) {
			struct etask *tk = ev->user;
			if (ev->status == 0) {
				stats_observe(e, SRC_PEER, ev->seconds, tk->len);
				task_finish(e, tk, 0);
			} else {
				/* the peer did not deliver: read the PFS instead */
				stats_epoch(e, e->st.epochs_done)->fallbacks++;
				log_debug("sample %u from node %u failed (%s): reading the PFS", tk->sample,
					  ev->peer, strerror(-ev->status));
				tk->kind = TK_PFS;
				if (tk->repl_bg)
					e->repl.inflight_pfs++; /* a background fill now reads the PFS */
				task_submit(e, tk, tk->need_g);
			}
		} else if (ev->kind == NET_REQUEST) {
			peer_request(e, ev->peer, ev->req_id, ev->sample, ev->len);
		} else if (ev->kind == NET_REPLY_DONE && ev->user) {
			peer_bounce_unref(e, COOKIE_BOUNCE(ev->user));
		}
		net_event_free(ev);
		ev = next;
	}
}

/* Network thread: answer at once from RAM when the sample is loaded. */
int peer_lookup(void *ctx, uint32_t peer, uint32_t s, uint64_t len, const void **src)
{
	(void)peer;
	struct engine *e = ctx;
	if (!atomic_load_explicit(&e->plan_published, memory_order_acquire))
		return 0; /* the dispatcher keeps it until the plan exists */
	if (s >= e->cat->nsamples || e->plan.tier[s] == PLAN_NONE || e->plan.owner[s] != e->node ||
	    len != xfs_src_len(e, s))
		return -ENOENT;
	if (e->plan.tier[s] == PLAN_RAM &&
	    atomic_load_explicit(&e->cstate[s], memory_order_acquire) == CS_READY) {
		*src = e->ar.base + e->ar.cache_base + e->plan.off[s];
		return 1;
	}
	return 0;
}

/* The bounce slots' free stack (arena_layout sized them). */
void peer_bounce_init(struct engine *e)
{
	e->peers.free = xcalloc(MAX(e->peers.nslots, 1u), sizeof(int32_t));
	e->peers.refs = xcalloc(MAX(e->peers.nslots, 1u), sizeof(uint32_t));
	for (uint32_t b = 0; b < e->peers.nslots; b++)
		e->peers.free[e->peers.nfree++] = (int32_t)(e->peers.nslots - 1 - b);
}

/* The plan exists: answer the requests peers sent before it did. */
void peer_replay_early(struct engine *e)
{
	struct deferred_req *early = e->peers.early;
	uint32_t nearly = e->peers.nearly;
	e->peers.early = NULL;
	e->peers.nearly = e->peers.capearly = 0;
	for (uint32_t i = 0; i < nearly; i++)
		peer_request(e, early[i].peer, early[i].req_id, early[i].sample, early[i].len);
	free(early);
}

/* Free what peer serving holds (engine_destroy, after the network thread). */
void peer_free(struct engine *e)
{
	free(e->peers.early);
	free(e->peers.bwait);
	free(e->peers.free);
	free(e->peers.refs);
	e->peers.early = e->peers.bwait = NULL;
	e->peers.free = NULL;
	e->peers.refs = NULL;
}
