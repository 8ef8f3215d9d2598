/* The owner side of the data plane (see net_int.h for the file map): answers
 * to other nodes' REQUESTs. The lookup callback decides: serve the bytes at
 * once (zero copy from the caller's memory), defer to the dispatcher (the
 * requester is told QUEUED and given 10 x its budget; the dispatcher answers
 * with net_reply / net_reply_error), or NAK.
 *
 * Threads: the network thread only (lookup is called on it). Failure: a
 * request is answered at most once; nothing is sent after 90 % of the
 * requester's budget (the reply reports -ETIMEDOUT instead), a reply of the
 * wrong length is refused (-EINVAL) and the request NAKed -EIO, and memory a
 * provider cannot use is NAKed -EFAULT. */
#define _GNU_SOURCE
#include "net_int.h"

#include <errno.h>
#include <stdlib.h>

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "../util/util.h"

static void queue_nak(struct net *n, uint32_t peer, uint64_t id, uint32_t sample, int error,
		      bool bundled)
{
	struct op *op = net_op_new(OP_NAK);
	op->ev.peer = peer;
	op->ev.req_id = id;
	op->ev.sample = sample;
	op->error = error < 0 && error > -4096 ? error : -EIO;
	if (bundled)
		net_bundle_answer(n, op);
	else
		net_pend_add(n, op);
}

void net_send_finish(struct net *n, struct op *op, int status)
{
	net_pend_del(n, op);
	net_home_set(op, NULL);
	if (status == 0) {
		pthread_mutex_lock(&n->st_mu);
		n->st.served++;
		n->st.served_bytes += op->ev.len;
		pthread_mutex_unlock(&n->st_mu);
	}
	if (op->kind == OP_REPLY) {
		op->ev.kind = NET_REPLY_DONE;
		op->ev.status = status;
		net_event_push(n, &op->ev);
	} else {
		free(op);
	}
}

/* 1 = done with posting, 0 = FI_EAGAIN. */
int net_send_post(struct net *n, struct op *op, uint64_t now)
{
	if (now > op->deadline) {
		/* the requester gave up already: sending would leave data nobody takes */
		net_send_finish(n, op, -ETIMEDOUT);
		return 1;
	}
	bool ok;
	void *desc = net_desc_for(n, op->buf, op->ev.len, &ok);
	if (!ok) {
		/* unregistered memory on a provider that needs it: tell the requester */
		queue_nak(n, op->ev.peer, op->ev.req_id, op->ev.sample, -EFAULT, false);
		net_send_finish(n, op, -EFAULT);
		return 1;
	}
	ssize_t r = fi_tsend(n->ep, op->buf, op->ev.len, desc, op->ev.peer, op->ev.req_id, &op->ctx.fi);
	if (r == -FI_EAGAIN)
		return 0;
	if (r != 0) {
		log_warn("net: sending %llu bytes to node %u: %s", (unsigned long long)op->ev.len,
			 op->ev.peer, fi_strerror((int)-r));
		net_send_finish(n, op, net_errno((int)r));
		return 1;
	}
	net_pend_del(n, op);
	net_home_set(op, &n->sending);
	return 1;
}

int net_nak_post(struct net *n, struct op *op)
{
	struct wire_msg m = {
		.magic = WIRE_MAGIC,
		.version = WIRE_VERSION,
		.type = op->error ? MSG_NAK : MSG_QUEUED,
		.from = n->o.node,
		.budget_ms = op->error ? 0 : op->grant_ms,
		.id = op->ev.req_id,
		.sample = op->ev.sample,
		.arg = (uint64_t)-op->error,
	};
	ssize_t r = fi_inject(n->ep, &m, sizeof(m), op->ev.peer);
	if (r == -FI_EAGAIN)
		return 0;
	net_pend_del(n, op);
	if (r == 0 && !op->error) {
		/* QUEUED sent */
	} else if (r == 0) {
		pthread_mutex_lock(&n->st_mu);
		n->st.naks++;
		pthread_mutex_unlock(&n->st_mu);
	} else {
		log_debug("net: NAK to node %u: %s", op->ev.peer, fi_strerror((int)-r));
	}
	free(op);
	return 1;
}

void net_on_request(struct net *n, const struct wire_msg *m, uint64_t now)
{
	uint64_t len = m->arg;
	if (len == 0 || len > n->max_len) {
		net_count_bad(n, "request length", len);
		return;
	}
	net_request_entry(n, m->from, m->id, (uint32_t)m->sample, len, m->budget_ms, now, false);
}

/* An answer op goes out alone or in the peer's bundle. */
static void queue_answer(struct net *n, struct op *op, bool bundled)
{
	if (bundled)
		net_bundle_answer(n, op);
	else
		net_pend_add(n, op);
}

/* Defer a request to the dispatcher: remembered until answered or expired,
 * QUEUED to the requester with 10 x its budget. */
static void defer(struct net *n, uint32_t peer, uint64_t id, uint32_t sample, uint64_t len,
		  uint32_t budget_ms, uint64_t now, bool bundled)
{
	uint64_t grant = MIN((uint64_t)budget_ms * QUEUED_GRANT, UINT32_MAX);
	struct op *q = net_op_new(OP_NAK);
	q->ev.peer = peer;
	q->ev.req_id = id;
	q->ev.sample = sample;
	q->grant_ms = (uint32_t)grant;
	queue_answer(n, q, bundled);
	struct deferred *d = xcalloc(1, sizeof(*d));
	d->h.key = id;
	d->deadline = now + grant * 900000u;
	d->peer = peer;
	d->sample = sample;
	d->len = len;
	d->bundled = bundled;
	net_hmap_put(&n->deferred_ids, &d->h);
	if (n->dq_tail)
		n->dq_tail->next = d;
	else
		n->dq_head = d;
	n->dq_tail = d;
	struct net_event *e = xcalloc(1, sizeof(*e));
	e->kind = NET_REQUEST;
	e->peer = peer;
	e->req_id = id;
	e->sample = sample;
	e->len = len;
	net_event_push(n, e);
}

void net_request_entry(struct net *n, uint32_t peer, uint64_t id, uint32_t sample, uint64_t len,
		      uint32_t budget_ms, uint64_t now, bool bundled)
{
	if (len == 0) {
		net_count_bad(n, "request length", len);
		return;
	}
	if (budget_ms == 0) {
		net_count_bad(n, "request budget", 0);
		return;
	}
	if (net_hmap_get(&n->deferred_ids, id)) {
		net_count_bad(n, "duplicate request id", id);
		return;
	}
	/* keep a tenth of the requester's budget for the way back */
	uint64_t deadline = now + (uint64_t)budget_ms * 900000u;
	const void *src = NULL;
	int r = n->o.lookup(n->o.lookup_ctx, peer, sample, len, &src);
	if (r > 0 && !src) {
		queue_nak(n, peer, id, sample, -EFAULT, bundled);
	} else if (r > 0) {
		struct op *op = net_op_new(OP_SERVE);
		op->ev.peer = peer;
		op->ev.req_id = id;
		op->ev.sample = sample;
		op->ev.len = len;
		op->buf = (void *)(uintptr_t)src;
		op->t0 = now;
		op->deadline = deadline;
		queue_answer(n, op, bundled);
	} else if (r == 0) {
		defer(n, peer, id, sample, len, budget_ms, now, bundled);
	} else {
		queue_nak(n, peer, id, sample, r, bundled);
	}
}

/* The dispatcher answered a deferred request: 0 if it may still be sent
 * (op gets the request's deadline and sample), -ETIMEDOUT when the
 * requester has given up or the request is unknown, -EINVAL when a reply's
 * length is not the one asked for (the request is then NAKed). */
static int deferred_take(struct net *n, struct op *op, uint64_t now)
{
	struct hnode *h = net_hmap_get(&n->deferred_ids, op->ev.req_id);
	if (!h)
		return -ETIMEDOUT;
	struct deferred *d = container_of(h, struct deferred, h);
	if (d->peer != op->ev.peer)
		return -ETIMEDOUT;
	net_hmap_del(&n->deferred_ids, &d->h);
	d->answered = true;
	op->bundled = d->bundled;
	op->deadline = d->deadline;
	op->ev.sample = d->sample;
	if (now > d->deadline)
		return -ETIMEDOUT;
	if (op->kind == OP_REPLY && op->ev.len != d->len) {
		log_warn("net: reply of %llu bytes to a request for %llu bytes of sample %u: "
			 "refused", (unsigned long long)op->ev.len, (unsigned long long)d->len,
			 d->sample);
		queue_nak(n, op->ev.peer, op->ev.req_id, d->sample, -EIO, d->bundled);
		return -EINVAL;
	}
	return 0;
}

void net_deferred_expire(struct net *n, uint64_t now)
{
	while (n->dq_head && (n->dq_head->answered || n->dq_head->deadline < now)) {
		struct deferred *d = n->dq_head;
		n->dq_head = d->next;
		if (!n->dq_head)
			n->dq_tail = NULL;
		if (!d->answered)
			net_hmap_del(&n->deferred_ids, &d->h);
		free(d);
	}
}

void net_answer_start(struct net *n, struct op *op, uint64_t now)
{
	switch (op->kind) {
	case OP_REPLY: {
		int rc = deferred_take(n, op, now);
		if (rc) {
			op->ev.kind = NET_REPLY_DONE;
			op->ev.status = rc;
			net_event_push(n, &op->ev);
			break;
		}
		queue_answer(n, op, op->bundled);
		break;
	}
	case OP_NAK:
		if (deferred_take(n, op, now)) {
			free(op);
			break;
		}
		queue_answer(n, op, op->bundled);
		break;
	default:
		free(op); /* OP_SERVE is never queued by the dispatcher */
		break;
	}
}
