/* The network thread (see net_int.h for the file map): one loop that owns
 * the endpoint. Each pass takes the dispatcher's commands, posts what waits
 * (in order; after FI_EAGAIN it skips what needs the same resource), reads
 * the completion queue (control messages are checked here before anything
 * reads them), gives up on what is past its deadline, and sleeps in
 * fi_cq_sread -- briefly, because layered providers do not always wake it
 * (docs/net.md, "Short sreads").
 *
 * Threads: this is the network thread; the only other thread touching what
 * it uses is the dispatcher, through cmd_mu and `sleeping` (net_api.c).
 * Failure: a malformed control message is dropped and counted; a provider
 * error ends the operation it belongs to with -errno; FI_EAGAIN is retried
 * on a later pass; nothing stops the loop but net_destroy. */
#define _GNU_SOURCE
#include "net_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include "../util/util.h"

#define CQ_BATCH 64
/* Longest sleeps in fi_cq_sread. Layered providers cannot always announce
 * their pending progress on the wait object (ofi_rxm over tcp was seen
 * sleeping through 100+ ms while fi_cq_read had completions to give), so
 * the thread never sleeps long while it has operations outstanding. */
#define BUSY_WAIT_MS 1
#define IDLE_WAIT_MS 10
/* Sample sends posted to the provider and not yet completed, at most. ofi_rxm
 * copies every eager send into a transmit buffer of its pool and grows the
 * pool, zeroed, by 1,024 buffers of ~16.9 KiB (17.3 MB) whenever more sends
 * are posted than it holds. The warm-up (net_warm.c) makes the first 1,024;
 * a first epoch answers a few thousand peer requests at once (each extent
 * ends ~1,000 samples), so without a bound the pool grew again, in the
 * epoch. 1,024 keeps it at its first size. A window of 64 was tried first
 * and looked like it throttled warm epochs (a full window waits for
 * completions the thread may notice only at its 1 ms sreads, "Short sreads"
 * in docs/net.md): their samples/s were below the old build's in 6 of 8
 * benchmark pairs, against 5 of 10 with 1,024 -- within the noise of the
 * loaded machine, but nothing argues for the smaller window. */
#define SEND_WINDOW 1024

/* ---- control messages ------------------------------------------------------ */
void net_slot_post(struct net *n, uint32_t i)
{
	struct ctrl_slot *s = &n->slots[i];
	ssize_t r = fi_recv(n->ep, s->buf, sizeof(s->buf), n->ctrl_desc, FI_ADDR_UNSPEC, &s->c.fi);
	if (r == 0)
		return;
	if (r != -FI_EAGAIN)
		log_warn("net: posting a control receive: %s", fi_strerror((int)-r));
	n->repost[n->nrepost++] = i;
}

/* id names a data fetch this node issued (answers to anything else are bogus). */
static bool own_fetch_id(const struct net *n, uint64_t id)
{
	return (id & ID_DATA_BIT) && ((id & ~ID_DATA_BIT) >> ID_NODE_SHIFT) == n->o.node;
}

static void on_ctrl(struct net *n, const uint8_t *buf, size_t len, uint64_t now)
{
	struct wire_msg m;
	if (len < sizeof(m)) {
		net_count_bad(n, "size", len);
		return;
	}
	memcpy(&m, buf, sizeof(m));
	if (m.type == MSG_REQUEST_MANY && m.magic == WIRE_MAGIC && m.version == WIRE_VERSION &&
	    m.from < n->o.nnodes && m.from != n->o.node) {
		if (m.arg == 0 || m.arg > MANY_MAX || len != sizeof(m) + m.arg * sizeof(struct wire_entry) ||
		    m.id != 0 || m.sample != 0 || m.budget_ms == 0) {
			net_count_bad(n, "REQUEST_MANY fields", m.arg);
			return;
		}
		net_on_request_many(n, &m, (const struct wire_entry *)(buf + sizeof(m)), now);
		return;
	}
	if (len != sizeof(m)) {
		net_count_bad(n, "size", len);
		return;
	}
	if (m.magic != WIRE_MAGIC || m.version != WIRE_VERSION) {
		net_count_bad(n, "magic/version", ((uint64_t)m.magic << 16) | m.version);
		return;
	}
	if (m.from >= n->o.nnodes || m.from == n->o.node) {
		net_count_bad(n, "sender node", m.from);
		return;
	}
	if (m.sample > UINT32_MAX) {
		net_count_bad(n, "sample", m.sample);
		return;
	}
	switch (m.type) {
	case MSG_REQUEST:
		if (!(m.id & ID_DATA_BIT) || ((m.id & ~ID_DATA_BIT) >> ID_NODE_SHIFT) != m.from) {
			net_count_bad(n, "request id", m.id);
			return;
		}
		net_on_request(n, &m, now);
		break;
	case MSG_NAK:
		if (!own_fetch_id(n, m.id) || m.arg == 0 || m.arg >= 4096 || m.budget_ms != 0) {
			net_count_bad(n, "NAK fields", m.id);
			return;
		}
		net_on_nak(n, &m, now);
		break;
	case MSG_QUEUED:
		if (!own_fetch_id(n, m.id) || m.arg != 0 || m.budget_ms == 0) {
			net_count_bad(n, "QUEUED fields", m.id);
			return;
		}
		net_on_queued(n, &m, now);
		break;
	default:
		net_count_bad(n, "type", m.type);
		break;
	}
}

/* ---- completions ------------------------------------------------------------ */
static void on_completion(struct net *n, const struct fi_cq_tagged_entry *c, uint64_t now)
{
	struct octx *x = c->op_context;
	if (!x)
		return;
	if (x->kind == CTX_WARM) {
		net_warm_done(n, 0);
		return;
	}
	if (x->kind == CTX_BUF) {
		net_bundle_completed(n, container_of(x, struct nbuf, c), c->len, now);
		return;
	}
	if (x->kind == CTX_SLOT) {
		struct ctrl_slot *s = container_of(x, struct ctrl_slot, c);
		on_ctrl(n, s->buf, c->len, now);
		net_slot_post(n, (uint32_t)(s - n->slots));
		return;
	}
	struct op *op = container_of(x, struct op, ctx);
	if (op->kind == OP_FETCH)
		net_fetch_completed(n, op, c->len);
	else
		net_send_finish(n, op, 0);
}

static void on_error(struct net *n, const struct fi_cq_err_entry *e)
{
	struct octx *x = e->op_context;
	if (!x) {
		log_warn("net: completion error without context: %s", fi_strerror(e->err));
		return;
	}
	if (x->kind == CTX_WARM) {
		net_warm_done(n, e->err);
		return;
	}
	if (x->kind == CTX_BUF) {
		net_bundle_failed(n, container_of(x, struct nbuf, c), e);
		return;
	}
	if (x->kind == CTX_SLOT) {
		struct ctrl_slot *s = container_of(x, struct ctrl_slot, c);
		if (e->err == FI_ECANCELED && atomic_load(&n->stop))
			return;
		if (e->err == FI_ETRUNC || e->err == FI_ETOOSMALL)
			net_count_bad(n, "oversized", e->len + e->olen);
		else
			log_debug("net: control receive: %s", fi_strerror(e->err));
		net_slot_post(n, (uint32_t)(s - n->slots));
		return;
	}
	struct op *op = container_of(x, struct op, ctx);
	if (op->kind == OP_FETCH) {
		net_fetch_failed(n, op, e);
	} else {
		char why[128];
		const char *pe = fi_cq_strerror(n->cq, e->prov_errno, e->err_data, why, sizeof(why));
		log_debug("net: sending %llu bytes to node %u failed: %s (%s)",
			  (unsigned long long)op->ev.len, op->ev.peer, fi_strerror(e->err),
			  pe ? pe : "");
		net_send_finish(n, op, net_errno(e->err));
	}
}

static int cq_drain_errors(struct net *n)
{
	int k = 0;
	for (;;) {
		struct fi_cq_err_entry e;
		memset(&e, 0, sizeof(e));
		ssize_t r = fi_cq_readerr(n->cq, &e, 0);
		if (r != 1)
			break;
		on_error(n, &e);
		k++;
	}
	return k;
}

/* Returns how many completions were handled. */
static int cq_handle(struct net *n, ssize_t r, const struct fi_cq_tagged_entry *ents)
{
	uint64_t now = now_ns();
	if (r > 0) {
		for (ssize_t i = 0; i < r; i++)
			on_completion(n, &ents[i], now);
		return (int)r;
	}
	if (r == -FI_EAVAIL)
		return cq_drain_errors(n);
	return 0;
}

/* ---- the network thread ------------------------------------------------------ */
static void take_commands(struct net *n, uint64_t now)
{
	pthread_mutex_lock(&n->cmd_mu);
	struct op *op = n->cmd_head;
	n->cmd_head = n->cmd_tail = NULL;
	pthread_mutex_unlock(&n->cmd_mu);
	while (op) {
		struct op *next = op->qnext;
		op->qnext = NULL;
		if (op->kind == OP_FETCH)
			net_fetch_start(n, op, now);
		else
			net_answer_start(n, op, now);
		op = next;
	}
}

/* Post what waits, in order; after FI_EAGAIN skip what needs the same
 * resource in this pass (receives, or sends to that node). */
static int post_pending(struct net *n, uint64_t now)
{
	int posted = 0;
	bool recv_blocked = false;
	posted += net_warm_post(n, now);
	while (n->nrepost > 0 && !recv_blocked) {
		uint32_t i = n->repost[--n->nrepost];
		uint32_t before = n->nrepost;
		net_slot_post(n, i);
		if (n->nrepost > before)
			recv_blocked = true;
	}
	for (struct op *op = n->pending.head, *next; op; op = next) {
		next = op->pend.next;
		bool needs_recv = op->kind == OP_FETCH && op->state == FS_NEW;
		if (needs_recv ? recv_blocked : n->peer_blocked[op->ev.peer])
			continue;
		int r;
		switch (op->kind) {
		case OP_FETCH:
			r = net_fetch_post(n, op, now);
			if (!r && op->state == FS_NEW)
				recv_blocked = true;
			else if (!r)
				goto peer;
			break;
		case OP_REPLY:
		case OP_SERVE:
			if (n->sending.n >= SEND_WINDOW)
				continue; /* a completion frees room; fetches still go */
			r = net_send_post(n, op, now);
			if (!r)
				goto peer;
			break;
		default:
			r = net_nak_post(n, op);
			if (!r)
				goto peer;
			break;
		}
		posted += r;
		continue;
peer:
		if (!n->peer_blocked[op->ev.peer]) {
			n->peer_blocked[op->ev.peer] = 1;
			n->blocked[n->nblocked++] = op->ev.peer;
		}
	}
	while (n->nblocked > 0)
		n->peer_blocked[n->blocked[--n->nblocked]] = 0;
	return posted;
}

static void expire(struct net *n, uint64_t now)
{
	net_fetch_expire(n, now);
	net_deferred_expire(n, now);
	net_fetch_check_stuck(n, now);
}

static int wait_ms(struct net *n, uint64_t now)
{
	if (n->pending.n || n->nrepost || n->fetches.n || n->acked.n || n->cancelling.n ||
	    n->sending.n || n->bd.bq_n || n->bd.rx_repost || net_warm_busy(n, now))
		return BUSY_WAIT_MS;
	uint64_t ms = IDLE_WAIT_MS;
	if (n->fetches.head) {
		uint64_t d = n->fetches.head->deadline;
		uint64_t left = d > now ? (d - now + 999999u) / 1000000u : 0;
		ms = MIN(ms, left);
	}
	return (int)MAX(ms, 1);
}

static bool commands_waiting(struct net *n)
{
	pthread_mutex_lock(&n->cmd_mu);
	bool w = n->cmd_head != NULL;
	pthread_mutex_unlock(&n->cmd_mu);
	return w;
}

void *net_thread_main(void *arg)
{
	struct net *n = arg;
	struct fi_cq_tagged_entry ents[CQ_BATCH];
	while (!atomic_load(&n->stop)) {
		uint64_t now = now_ns();
		take_commands(n, now);
		int busy = post_pending(n, now);
		ssize_t r = fi_cq_read(n->cq, ents, CQ_BATCH);
		busy += cq_handle(n, r, ents);
		if (r < 0 && r != -FI_EAGAIN && r != -FI_EAVAIL)
			log_debug("net: fi_cq_read: %s", fi_strerror((int)-r));
		now = now_ns();
		expire(n, now);
		/* what this pass queued for bundles goes out together */
		busy += net_bundle_pump(n, now);
		if (busy)
			continue;
		/* Sleep in the provider. The dispatcher signals the CQ only when it
		 * sees `sleeping` after queueing a command; pairs with the
		 * mutex-ordered check below (see queue_command). */
		int ms = wait_ms(n, now);
		atomic_store(&n->sleeping, 1);
		if (commands_waiting(n) || atomic_load(&n->stop)) {
			atomic_store(&n->sleeping, 0);
			continue;
		}
		r = fi_cq_sread(n->cq, ents, CQ_BATCH, NULL, ms);
		atomic_store(&n->sleeping, 0);
		cq_handle(n, r, ents);
	}
	return NULL;
}
