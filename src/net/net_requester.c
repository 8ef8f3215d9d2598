/* The requester side of the data plane (see net_int.h for the file map):
 * this node's fetches from their command to their event. A fetch posts its
 * tagged receive, then sends the REQUEST; it ends on the data, on a NAK (after
 * cancelling the receive), or at its deadline. Peer health lives here too: a
 * peer that lets a fetch time out without having answered QUEUED is suspect
 * for suspect_s, and net_fetch fails fetches to it at once (net_api.c).
 *
 * Threads: the network thread only (suspect_until is also read by the
 * dispatcher, relaxed). Failure: every fetch ends with exactly one event,
 * 0 or -errno (-ETIMEDOUT, -EHOSTDOWN, the owner's NAK, -EPROTO for a wrong
 * length, a provider error); a cancelled receive reports only once the
 * provider gave its buffer back. */
#define _GNU_SOURCE
#include "net_int.h"

#include <errno.h>
#include <stdlib.h>

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "../util/util.h"

static void fetch_unlink(struct net *n, struct op *op)
{
	net_pend_del(n, op);
	net_bundle_unqueue(n, op);
	net_home_set(op, NULL);
	if (op->h.key) {
		net_hmap_del(&n->fetch_ids, &op->h);
		op->h.key = 0;
	}
}

void net_fetch_finish(struct net *n, struct op *op, int status)
{
	fetch_unlink(n, op);
	net_fetch_report(n, op, status);
}

static void mark_suspect(struct net *n, uint32_t peer, uint64_t now)
{
	bool was = net_peer_suspect_at(n, peer, now);
	atomic_store_explicit(&n->suspect_until[peer], now + n->suspect_ns, memory_order_relaxed);
	if (!was)
		log_warn("net: node %u did not answer within %.3g s; fetching from it is skipped "
			 "for %.3g s", peer, (double)n->timeout_ns / 1e9, (double)n->suspect_ns / 1e9);
}

/* Give up on a fetch whose receive is posted: the receive may still complete
 * (the data won the race), else it ends with FI_ECANCELED and `status` is
 * reported. Either way dst is untouched once its completion is read. */
static void fetch_cancel(struct net *n, struct op *op, int status, uint64_t now)
{
	op->final = status;
	op->state = FS_CANCELLING;
	op->cancel_t = now;
	net_pend_del(n, op);
	if (op->h.key) {
		net_hmap_del(&n->fetch_ids, &op->h);
		op->h.key = 0;
	}
	net_home_set(op, &n->cancelling);
	ssize_t r = fi_cancel(&n->ep->fid, &op->ctx.fi);
	if (r != 0 && r != -FI_ENOENT)
		log_debug("net: fi_cancel for request %#llx: %s", (unsigned long long)op->ev.req_id,
			  fi_strerror((int)-r));
}

/* Post what a fetch still needs. 1 = done with posting, 0 = FI_EAGAIN. */
int net_fetch_post(struct net *n, struct op *op, uint64_t now)
{
	if (op->state == FS_NEW) {
		bool ok;
		void *desc = net_desc_for(n, op->buf, op->ev.len, &ok);
		ssize_t r = fi_trecv(n->ep, op->buf, op->ev.len, desc, FI_ADDR_UNSPEC, op->ev.req_id, 0,
				     &op->ctx.fi);
		if (r == -FI_EAGAIN)
			return 0;
		if (r != 0) {
			log_warn("net: fi_trecv (%llu bytes): %s", (unsigned long long)op->ev.len,
				 fi_strerror((int)-r));
			net_fetch_finish(n, op, net_errno((int)r));
			return 1;
		}
		op->state = FS_RECV_POSTED;
	}
	if (op->state == FS_RECV_POSTED) {
		if (now >= op->deadline)
			return 1; /* expire() cancels it */
		uint64_t budget = (op->deadline - now) / 1000000u;
		struct wire_msg m = {
			.magic = WIRE_MAGIC,
			.version = WIRE_VERSION,
			.type = MSG_REQUEST,
			.from = n->o.node,
			.budget_ms = (uint32_t)MIN(MAX(budget, 1), UINT32_MAX),
			.id = op->ev.req_id,
			.sample = op->ev.sample,
			.arg = op->ev.len,
		};
		ssize_t r = fi_inject(n->ep, &m, sizeof(m), op->ev.peer);
		if (r == -FI_EAGAIN)
			return 0;
		if (r != 0) {
			log_warn("net: sending a request to node %u: %s", op->ev.peer,
				 fi_strerror((int)-r));
			fetch_cancel(n, op, net_errno((int)r), now);
			return 1;
		}
		op->state = FS_SENT;
	}
	net_pend_del(n, op);
	return 1;
}

void net_fetch_completed(struct net *n, struct op *op, uint64_t len)
{
	/* Complete data is good data, even after a timeout or a NAK. */
	int status = len == op->ev.len ? 0 : -EPROTO;
	if (status)
		log_warn("net: node %u sent %llu bytes of sample %u, %llu were asked for", op->ev.peer,
			 (unsigned long long)len, op->ev.sample, (unsigned long long)op->ev.len);
	net_fetch_finish(n, op, status);
}

void net_fetch_failed(struct net *n, struct op *op, const struct fi_cq_err_entry *e)
{
	int status;
	if (e->err == FI_ECANCELED && op->state == FS_CANCELLING) {
		status = op->final;
	} else {
		status = net_errno(e->err);
		if (op->state == FS_CANCELLING && op->final)
			status = op->final;
		else if (e->err == FI_ETRUNC)
			log_warn("net: node %u sent more than the %llu bytes of sample %u",
				 op->ev.peer, (unsigned long long)op->ev.len, op->ev.sample);
		else
			log_debug("net: receive from node %u failed: %s", op->ev.peer,
				  fi_strerror(e->err));
	}
	net_fetch_finish(n, op, status);
}

void net_on_nak(struct net *n, const struct wire_msg *m, uint64_t now)
{
	struct hnode *h = net_hmap_get(&n->fetch_ids, m->id);
	if (!h)
		return; /* already finished or cancelled: nothing to do */
	struct op *op = container_of(h, struct op, h);
	if (op->ev.peer != m->from || op->ev.sample != m->sample || op->state != FS_SENT) {
		net_count_bad(n, "NAK does not match its request", m->id);
		return;
	}
	if (op->bundled)
		net_fetch_finish(n, op, -(int)m->arg); /* no receive of its own to cancel */
	else
		fetch_cancel(n, op, -(int)m->arg, now);
}

/* The owner has the request queued: wait the granted window, in the acked
 * list (kept in deadline order: every grant is the same multiple of about
 * the same budget). */
void net_on_queued(struct net *n, const struct wire_msg *m, uint64_t now)
{
	struct hnode *h = net_hmap_get(&n->fetch_ids, m->id);
	if (!h)
		return; /* finished or cancelled meanwhile */
	struct op *op = container_of(h, struct op, h);
	if (op->ev.peer != m->from || op->ev.sample != m->sample) {
		net_count_bad(n, "QUEUED does not match its request", m->id);
		return;
	}
	net_fetch_queued(n, op, m->budget_ms, now);
}

void net_fetch_queued(struct net *n, struct op *op, uint32_t grant_ms, uint64_t now)
{
	if (op->home != &n->fetches || op->state == FS_CANCELLING)
		return;
	op->deadline = MAX(op->deadline, now + (uint64_t)grant_ms * 1000000u);
	net_home_set(op, &n->acked);
}

void net_fetch_start(struct net *n, struct op *op, uint64_t now)
{
	if (net_peer_suspect_at(n, op->ev.peer, now)) {
		net_fetch_report(n, op, -EHOSTDOWN);
		return;
	}
	op->h.key = op->ev.req_id;
	net_hmap_put(&n->fetch_ids, &op->h);
	net_home_set(op, &n->fetches); /* arrival order is deadline order */
	if (net_bundle_wants(n, op))
		net_bundle_ask(n, op); /* no receive of its own: the answer comes in a bundle */
	else
		net_pend_add(n, op);
}

void net_fetch_expire(struct net *n, uint64_t now)
{
	while (n->fetches.head && n->fetches.head->deadline <= now) {
		struct op *op = n->fetches.head;
		mark_suspect(n, op->ev.peer, now);
		if (op->state == FS_NEW || op->bundled)
			net_fetch_finish(n, op, -ETIMEDOUT); /* nothing posted yet */
		else
			fetch_cancel(n, op, -ETIMEDOUT, now);
	}
	/* the owner answered "queued": it lives, it is only slow */
	while (n->acked.head && n->acked.head->deadline <= now) {
		struct op *op = n->acked.head;
		if (op->bundled)
			net_fetch_finish(n, op, -ETIMEDOUT);
		else
			fetch_cancel(n, op, -ETIMEDOUT, now);
	}
}

void net_fetch_check_stuck(struct net *n, uint64_t now)
{
	if (now - n->last_stuck_check < 1000000000u)
		return;
	n->last_stuck_check = now;
	for (struct op *op = n->cancelling.head; op; op = op->hlink.next) {
		if (!op->warned && now - op->cancel_t > n->timeout_ns) {
			op->warned = true;
			log_warn("net: the transfer of sample %u from node %u started but does not "
				 "finish; its buffer stays with the provider until it does",
				 op->ev.sample, op->ev.peer);
		}
	}
}
