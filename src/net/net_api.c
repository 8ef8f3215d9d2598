/* The dispatcher's side of the data plane (see net_int.h for the file map):
 * the calls of net.h that seerd's event loop makes after net_create. Each
 * fetch or answer becomes an operation queued for the network thread, which
 * is woken with fi_cq_signal when it sleeps in fi_cq_sread; events come back
 * on a hand-off list with an eventfd.
 *
 * Threads: the dispatcher (one thread at a time; the calls are not meant to
 * race each other). Failure: a fetch that cannot go anywhere (bad arguments,
 * unregistered memory a provider needs, a suspect peer) gets its event at
 * once; a reply with bad arguments reports NET_REPLY_DONE -EINVAL; nothing
 * blocks on the network. */
#define _GNU_SOURCE
#include "net_int.h"

#include <errno.h>
#include <stdlib.h>

#include <rdma/fi_eq.h>

#include "../util/util.h"

static void queue_command(struct net *n, struct op *op)
{
	op->qnext = NULL;
	pthread_mutex_lock(&n->cmd_mu);
	if (n->cmd_tail)
		n->cmd_tail->qnext = op;
	else
		n->cmd_head = op;
	n->cmd_tail = op;
	pthread_mutex_unlock(&n->cmd_mu);
	/* The thread stores `sleeping` before it checks the queue under cmd_mu,
	 * so either it saw this command or this load sees it sleeping. */
	if (n->started && atomic_load(&n->sleeping))
		fi_cq_signal(n->cq);
}

/* A fetch that never reaches the network: reported at once. */
static void fetch_fail_now(struct net *n, struct op *op, int status)
{
	net_fetch_report(n, op, status);
}

void net_fetch(struct net *n, uint32_t peer, uint32_t sample, void *dst, uint64_t len, void *user)
{
	struct op *op = net_op_new(OP_FETCH);
	uint64_t now = now_ns();
	op->ev.peer = peer;
	op->ev.sample = sample;
	op->ev.len = len;
	op->ev.user = user;
	op->buf = dst;
	op->t0 = now;
	op->deadline = now + n->timeout_ns;
	uint64_t seq = atomic_fetch_add(&n->next_seq, 1) & ID_SEQ_MASK;
	op->ev.req_id = ID_DATA_BIT | ((uint64_t)n->o.node << ID_NODE_SHIFT) | seq;
	bool ok = false;
	if (peer < n->o.nnodes && dst && len > 0 && len <= n->max_len)
		net_desc_for(n, dst, len, &ok);
	if (peer >= n->o.nnodes || peer == n->o.node || !dst || len == 0) {
		fetch_fail_now(n, op, -EINVAL);
	} else if (len > n->max_len) {
		fetch_fail_now(n, op, -EMSGSIZE);
	} else if (!ok) {
		fetch_fail_now(n, op, -EFAULT); /* the provider needs registered memory */
	} else if (net_peer_suspect_at(n, peer, now)) {
		fetch_fail_now(n, op, -EHOSTDOWN);
	} else {
		queue_command(n, op);
	}
}

void net_reply(struct net *n, uint32_t peer, uint64_t req_id, const void *src, uint64_t len,
	       void *user)
{
	struct op *op = net_op_new(OP_REPLY);
	op->ev.peer = peer;
	op->ev.req_id = req_id;
	op->ev.len = len;
	op->ev.user = user;
	op->buf = (void *)(uintptr_t)src;
	op->t0 = now_ns();
	if (peer >= n->o.nnodes || !src || len == 0 || len > n->max_len) {
		op->ev.kind = NET_REPLY_DONE;
		op->ev.status = -EINVAL;
		net_event_push(n, &op->ev);
		return;
	}
	queue_command(n, op);
}

void net_reply_error(struct net *n, uint32_t peer, uint64_t req_id, int error)
{
	if (peer >= n->o.nnodes)
		return;
	struct op *op = net_op_new(OP_NAK);
	op->ev.peer = peer;
	op->ev.req_id = req_id;
	op->error = error < 0 && error > -4096 ? error : -EIO;
	queue_command(n, op);
}

int net_event_fd(const struct net *n)
{
	return n->efd;
}

int net_thread(const struct net *n, pthread_t *out)
{
	if (!n->started)
		return -1;
	*out = n->thread;
	return 0;
}

struct net_event *net_take_events(struct net *n)
{
	return (struct net_event *)handoff_take(&n->events, &n->ev_mu, n->efd);
}

void net_event_free(struct net_event *e)
{
	free(e); /* an op starts with its event, so this frees either */
}

void net_get_stats(struct net *n, struct net_stats *s)
{
	pthread_mutex_lock(&n->st_mu);
	*s = n->st;
	pthread_mutex_unlock(&n->st_mu);
}

int net_peer_suspect(struct net *n, uint32_t peer)
{
	if (peer >= n->o.nnodes)
		return 0;
	return net_peer_suspect_at(n, peer, now_ns());
}
