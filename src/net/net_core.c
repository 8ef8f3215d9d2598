/* The data plane's plumbing (see net_int.h for the file map): the lists and
 * maps that track operations, error mapping, operation allocation, the event
 * hand-off to the dispatcher, counters and registration descriptors.
 *
 * Threads: lists and maps are the network thread's; net_event_push and the
 * counters (st_mu) may be used from either thread, and net_fetch_report is
 * also called by the dispatcher for fetches it fails at once. Failure:
 * nothing here fails; allocation aborts on out of memory (xcalloc), as the
 * daemon does everywhere. */
#define _GNU_SOURCE
#include "net_int.h"

#include <errno.h>
#include <stdlib.h>

#include <rdma/fi_errno.h>

#include "../util/util.h"

/* ---- small containers -------------------------------------------------------- */
static struct link *lk(struct op *op, size_t off)
{
	return (struct link *)((char *)op + off);
}

void net_olist_push(struct olist *l, struct op *op, size_t off)
{
	struct link *k = lk(op, off);
	k->prev = l->tail;
	k->next = NULL;
	if (l->tail)
		lk(l->tail, off)->next = op;
	else
		l->head = op;
	l->tail = op;
	l->n++;
}

void net_olist_del(struct olist *l, struct op *op, size_t off)
{
	struct link *k = lk(op, off);
	if (k->prev)
		lk(k->prev, off)->next = k->next;
	else
		l->head = k->next;
	if (k->next)
		lk(k->next, off)->prev = k->prev;
	else
		l->tail = k->prev;
	k->prev = k->next = NULL;
	l->n--;
}

void net_home_set(struct op *op, struct olist *l)
{
	if (op->home)
		net_olist_del(op->home, op, HOME);
	op->home = l;
	if (l)
		net_olist_push(l, op, HOME);
}

void net_pend_add(struct net *n, struct op *op)
{
	if (!op->in_pend) {
		net_olist_push(&n->pending, op, PEND);
		op->in_pend = true;
	}
}

void net_pend_del(struct net *n, struct op *op)
{
	if (op->in_pend) {
		net_olist_del(&n->pending, op, PEND);
		op->in_pend = false;
	}
}

static uint32_t hslot(const struct hmap *h, uint64_t key)
{
	return (uint32_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & h->mask;
}

void net_hmap_init(struct hmap *h)
{
	h->mask = 1023;
	h->count = 0;
	h->b = xcalloc(h->mask + 1, sizeof(*h->b));
}

void net_hmap_put(struct hmap *h, struct hnode *e)
{
	if (h->count > h->mask) {
		uint32_t old = h->mask + 1;
		struct hnode **ob = h->b;
		h->mask = old * 2 - 1;
		h->b = xcalloc(old * 2, sizeof(*h->b));
		for (uint32_t i = 0; i < old; i++) {
			for (struct hnode *x = ob[i], *nx; x; x = nx) {
				nx = x->next;
				uint32_t s = hslot(h, x->key);
				x->next = h->b[s];
				h->b[s] = x;
			}
		}
		free(ob);
	}
	uint32_t s = hslot(h, e->key);
	e->next = h->b[s];
	h->b[s] = e;
	h->count++;
}

struct hnode *net_hmap_get(const struct hmap *h, uint64_t key)
{
	for (struct hnode *x = h->b[hslot(h, key)]; x; x = x->next)
		if (x->key == key)
			return x;
	return NULL;
}

void net_hmap_del(struct hmap *h, struct hnode *e)
{
	for (struct hnode **p = &h->b[hslot(h, e->key)]; *p; p = &(*p)->next) {
		if (*p == e) {
			*p = e->next;
			e->next = NULL;
			h->count--;
			return;
		}
	}
}

/* ---- errors ---------------------------------------------------------------- */
/* libfabric error numbers below 256 are errno values; the rest are its own. */
int net_errno(int fierr)
{
	if (fierr < 0)
		fierr = -fierr;
	if (fierr > 0 && fierr < 256)
		return -fierr;
	switch (fierr) {
	case FI_ETRUNC:
	case FI_ETOOSMALL:
	case FI_EOVERRUN:
		return -EPROTO;
	case FI_EAVAIL:
		return -EAGAIN;
	default:
		return -EIO;
	}
}

/* ---- operations, events and stats ------------------------------------------ */
struct op *net_op_new(enum op_kind kind)
{
	struct op *op = xcalloc(1, sizeof(*op));
	op->kind = kind;
	op->ctx.kind = CTX_OP;
	return op;
}

_Static_assert(offsetof(struct net_event, link) == 0, "an event is its hand-off node");

void net_event_push(struct net *n, struct net_event *e)
{
	pthread_mutex_lock(&n->ev_mu);
	handoff_push(&n->events, &e->link, n->efd);
	pthread_mutex_unlock(&n->ev_mu);
}

/* Report a fetch (the op becomes the event). Caller has unlinked it. */
void net_fetch_report(struct net *n, struct op *op, int status)
{
	uint64_t now = now_ns();
	op->ev.kind = NET_FETCH_DONE;
	op->ev.status = status;
	op->ev.seconds = (double)(now - op->t0) / 1e9;
	pthread_mutex_lock(&n->st_mu);
	n->st.fetches++;
	if (status == 0) {
		n->st.fetch_bytes += op->ev.len;
		n->st.fetch_seconds += op->ev.seconds;
	} else {
		n->st.fetch_failed++;
		if (status == -ETIMEDOUT)
			n->st.fetch_timeouts++;
	}
	pthread_mutex_unlock(&n->st_mu);
	net_event_push(n, &op->ev);
}

void net_count_bad(struct net *n, const char *what, uint64_t v)
{
	pthread_mutex_lock(&n->st_mu);
	uint64_t k = ++n->st.bad_msgs;
	pthread_mutex_unlock(&n->st_mu);
	/* a misbehaving peer must not flood the log */
	if (k <= 10 || (k & (k - 1)) == 0)
		log_warn("net: dropped a malformed control message (%s: %llu; %llu so far)", what,
			 (unsigned long long)v, (unsigned long long)k);
}

void *net_desc_for(struct net *n, const void *p, uint64_t len, bool *ok)
{
	uintptr_t a = (uintptr_t)p, r = (uintptr_t)n->o.region;
	if (n->region_mr && a >= r && len <= n->o.region_len && a - r <= n->o.region_len - len) {
		*ok = true;
		return n->region_desc;
	}
	*ok = !n->mr_local;
	return NULL;
}
