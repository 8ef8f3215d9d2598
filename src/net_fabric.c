/* Data plane over libfabric (see net.h for the contract, docs/net.md for the
 * protocol, the threading and the failure behaviour).
 *
 * Ownership inside this file: an operation (struct op) belongs to the
 * dispatcher until it is queued as a command, then to the network thread
 * until it comes back as the event it embeds (fetches, deferred replies) or
 * is freed here (sends answered from lookup, NAKs). Every libfabric call
 * after net_start is made on the network thread, except fi_cq_signal, the
 * documented cross-thread wake-up of fi_cq_sread. */
#define _GNU_SOURCE
#include "net.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "util.h"

/* ---- wire format ----------------------------------------------------------
 * Control messages are untagged and fixed-size; sample bytes travel as one
 * tagged message whose tag is the request id. Daemons of one job run the
 * same build on the same architecture, so fields are in host byte order. */
#define WIRE_MAGIC 0x4e524553u /* "SERN" */
#define WIRE_VERSION 2
/* QUEUED: the owner deferred the request (the sample is still to be read)
 * and grants budget_ms more: the requester keeps waiting and, should even
 * that run out, falls back without taking the (live) owner for dead. */
enum { MSG_REQUEST = 1, MSG_NAK = 2, MSG_QUEUED = 3 };
#define QUEUED_GRANT 10 /* x the request's remaining budget */

struct wire_msg {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t from;      /* sender's node */
	uint32_t budget_ms; /* REQUEST: how long the requester still waits; QUEUED: how much
			       longer it may wait; NAK: 0 */
	uint64_t id;        /* request id, also the tag of the data */
	uint64_t sample;    /* < 2^32 */
	uint64_t arg;       /* REQUEST: length in bytes; NAK: positive errno */
};
_Static_assert(sizeof(struct wire_msg) == 40, "wire_msg is 40 bytes on the wire");

/* Request ids: bit 63 marks a data tag (tags without it stay free for other
 * uses), bits 40..62 the requester's node, bits 0..39 a per-daemon counter. */
#define ID_DATA_BIT (UINT64_C(1) << 63)
#define ID_NODE_SHIFT 40
#define ID_NODE_MAX (UINT32_C(1) << 23)
#define ID_SEQ_MASK ((UINT64_C(1) << ID_NODE_SHIFT) - 1)

#define NET_MAX_LEN (UINT64_C(1) << 32)   /* largest sample we move */
#define CTRL_BUF 64                      /* > sizeof(wire_msg): oversize shows */
#define CTRL_SLOTS_MAX 256u
#define CQ_BATCH 64
/* Longest sleeps in fi_cq_sread. Layered providers cannot always announce
 * their pending progress on the wait object (ofi_rxm over tcp was seen
 * sleeping through 100+ ms while fi_cq_read had completions to give), so
 * the thread never sleeps long while it has operations outstanding. */
#define BUSY_WAIT_MS 1
#define IDLE_WAIT_MS 10
#define DEFAULT_PROVIDER "tcp;ofi_rxm"
#define DEFAULT_TIMEOUT_S 2.0
#define DEFAULT_SUSPECT_S 30.0

/* ---- operations ------------------------------------------------------------ */
enum ctx_kind { CTX_OP = 1, CTX_SLOT = 2 };

/* Every operation context given to libfabric starts with this. */
struct octx {
	struct fi_context2 fi;
	uint8_t kind;
};

enum op_kind { OP_FETCH = 1, OP_REPLY, OP_SERVE, OP_NAK };
enum fetch_state { FS_NEW = 0, FS_RECV_POSTED, FS_SENT, FS_CANCELLING };

struct op;
struct link {
	struct op *prev, *next;
};
struct olist {
	struct op *head, *tail;
	uint32_t n;
};

struct hnode {
	struct hnode *next;
	uint64_t key;
};

struct op {
	struct net_event ev;   /* first: the op is handed back as this event */
	struct octx ctx;
	enum op_kind kind;
	uint8_t state;         /* FETCH: enum fetch_state */
	bool in_pend;
	int final;             /* FETCH: status reported when a cancelled receive ends */
	int error;             /* NAK: what to send; 0 with grant_ms: send QUEUED */
	uint32_t grant_ms;     /* QUEUED: the window granted */
	struct op *qnext;      /* command queue */
	struct link pend;      /* pending: waits for the provider (FI_EAGAIN) */
	struct link hlink;     /* in `home`: fetches, cancelling or sending */
	struct olist *home;    /* fetches, cancelling, sending or NULL */
	struct hnode h;        /* FETCH: id -> op until it can no longer be NAKed */
	void *buf;             /* FETCH: dst; REPLY/SERVE: src */
	uint64_t t0;           /* ns: FETCH: net_fetch; SERVE/REPLY: request arrival */
	uint64_t deadline;     /* ns: FETCH: give up; SERVE/REPLY: do not send after */
	uint64_t cancel_t;     /* ns: FETCH: when fi_cancel was issued */
	bool warned;
};

#define PEND offsetof(struct op, pend)
#define HOME offsetof(struct op, hlink)

/* A request the lookup deferred, waiting for net_reply / net_reply_error. */
struct deferred {
	struct hnode h;        /* key: request id */
	struct deferred *next; /* FIFO, for expiry */
	uint64_t deadline;
	uint64_t len;
	uint32_t peer, sample;
	bool answered;
};

struct ctrl_slot {
	struct octx c;
	_Alignas(8) uint8_t buf[CTRL_BUF];
};

struct hmap {
	struct hnode **b;
	uint32_t mask, count;
};

struct net {
	struct net_opts o;
	char prov[128];
	uint64_t timeout_ns, suspect_ns;
	uint64_t max_len;

	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fid_mr *region_mr, *ctrl_mr;
	void *region_desc, *ctrl_desc;
	bool mr_local;         /* the provider needs a desc for every buffer */

	struct ctrl_slot *slots;
	uint32_t nslots;
	uint32_t *repost;      /* slots whose fi_recv met FI_EAGAIN */
	uint32_t nrepost;

	/* dispatcher -> network thread */
	pthread_mutex_t cmd_mu;
	struct op *cmd_head, *cmd_tail;
	atomic_int sleeping;   /* the thread is (about to be) in fi_cq_sread */
	atomic_bool stop;

	/* network thread -> dispatcher */
	pthread_mutex_t ev_mu;
	struct net_event *ev_head, *ev_tail;
	int efd;

	_Atomic uint64_t next_seq;
	_Atomic uint64_t *suspect_until; /* ns (CLOCK_MONOTONIC) per node; 0 = fine */
	pthread_mutex_t st_mu;
	struct net_stats st;

	pthread_t thread;
	bool started;           /* dispatcher's view: net_start succeeded */

	/* network thread only */
	struct olist pending, fetches, cancelling, sending;
	struct olist acked;    /* fetches the owner said it queued (own deadline order) */
	struct hmap fetch_ids, deferred_ids;
	struct deferred *dq_head, *dq_tail;
	uint8_t *peer_blocked;  /* this pass: a send to the node met FI_EAGAIN */
	uint32_t *blocked;
	uint32_t nblocked;
	uint64_t last_stuck_check;
};

/* ---- small containers -------------------------------------------------------- */
static struct link *lk(struct op *op, size_t off)
{
	return (struct link *)((char *)op + off);
}

static void olist_push(struct olist *l, struct op *op, size_t off)
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

static void olist_del(struct olist *l, struct op *op, size_t off)
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

static void home_set(struct op *op, struct olist *l)
{
	if (op->home)
		olist_del(op->home, op, HOME);
	op->home = l;
	if (l)
		olist_push(l, op, HOME);
}

static void pend_add(struct net *n, struct op *op)
{
	if (!op->in_pend) {
		olist_push(&n->pending, op, PEND);
		op->in_pend = true;
	}
}

static void pend_del(struct net *n, struct op *op)
{
	if (op->in_pend) {
		olist_del(&n->pending, op, PEND);
		op->in_pend = false;
	}
}

static uint32_t hslot(const struct hmap *h, uint64_t key)
{
	return (uint32_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & h->mask;
}

static void hmap_init(struct hmap *h)
{
	h->mask = 1023;
	h->count = 0;
	h->b = xcalloc(h->mask + 1, sizeof(*h->b));
}

static void hmap_put(struct hmap *h, struct hnode *e)
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

static struct hnode *hmap_get(const struct hmap *h, uint64_t key)
{
	for (struct hnode *x = h->b[hslot(h, key)]; x; x = x->next)
		if (x->key == key)
			return x;
	return NULL;
}

static void hmap_del(struct hmap *h, struct hnode *e)
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
static int fi_to_errno(int fierr)
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

/* ---- events and stats ------------------------------------------------------ */
static void event_push(struct net *n, struct net_event *e)
{
	e->next = NULL;
	pthread_mutex_lock(&n->ev_mu);
	bool was_empty = n->ev_head == NULL;
	if (n->ev_tail)
		n->ev_tail->next = e;
	else
		n->ev_head = e;
	n->ev_tail = e;
	if (was_empty) {
		uint64_t one = 1;
		ssize_t r UNUSED = write(n->efd, &one, sizeof(one));
	}
	pthread_mutex_unlock(&n->ev_mu);
}

static bool peer_suspect_at(struct net *n, uint32_t peer, uint64_t now)
{
	return atomic_load_explicit(&n->suspect_until[peer], memory_order_relaxed) > now;
}

/* Report a fetch (the op becomes the event). Caller has unlinked it. */
static void fetch_report(struct net *n, struct op *op, int status)
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
	event_push(n, &op->ev);
}

static void count_bad(struct net *n, const char *what, uint64_t v)
{
	pthread_mutex_lock(&n->st_mu);
	uint64_t k = ++n->st.bad_msgs;
	pthread_mutex_unlock(&n->st_mu);
	/* a misbehaving peer must not flood the log */
	if (k <= 10 || (k & (k - 1)) == 0)
		log_warn("net: dropped a malformed control message (%s: %llu; %llu so far)", what,
			 (unsigned long long)v, (unsigned long long)k);
}

static void *desc_for(struct net *n, const void *p, uint64_t len, bool *ok)
{
	uintptr_t a = (uintptr_t)p, r = (uintptr_t)n->o.region;
	if (n->region_mr && a >= r && len <= n->o.region_len && a - r <= n->o.region_len - len) {
		*ok = true;
		return n->region_desc;
	}
	*ok = !n->mr_local;
	return NULL;
}

/* ---- requester side ------------------------------------------------------ */
static void fetch_unlink(struct net *n, struct op *op)
{
	pend_del(n, op);
	home_set(op, NULL);
	if (op->h.key) {
		hmap_del(&n->fetch_ids, &op->h);
		op->h.key = 0;
	}
}

static void fetch_finish(struct net *n, struct op *op, int status)
{
	fetch_unlink(n, op);
	fetch_report(n, op, status);
}

static void mark_suspect(struct net *n, uint32_t peer, uint64_t now)
{
	bool was = peer_suspect_at(n, peer, now);
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
	pend_del(n, op);
	if (op->h.key) {
		hmap_del(&n->fetch_ids, &op->h);
		op->h.key = 0;
	}
	home_set(op, &n->cancelling);
	ssize_t r = fi_cancel(&n->ep->fid, &op->ctx.fi);
	if (r != 0 && r != -FI_ENOENT)
		log_debug("net: fi_cancel for request %#llx: %s", (unsigned long long)op->ev.req_id,
			  fi_strerror((int)-r));
}

/* Post what a fetch still needs. 1 = done with posting, 0 = FI_EAGAIN. */
static int fetch_post(struct net *n, struct op *op, uint64_t now)
{
	if (op->state == FS_NEW) {
		bool ok;
		void *desc = desc_for(n, op->buf, op->ev.len, &ok);
		ssize_t r = fi_trecv(n->ep, op->buf, op->ev.len, desc, FI_ADDR_UNSPEC, op->ev.req_id, 0,
				     &op->ctx.fi);
		if (r == -FI_EAGAIN)
			return 0;
		if (r != 0) {
			log_warn("net: fi_trecv (%llu bytes): %s", (unsigned long long)op->ev.len,
				 fi_strerror((int)-r));
			fetch_finish(n, op, fi_to_errno((int)r));
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
			fetch_cancel(n, op, fi_to_errno((int)r), now);
			return 1;
		}
		op->state = FS_SENT;
	}
	pend_del(n, op);
	return 1;
}

static void fetch_completed(struct net *n, struct op *op, uint64_t len)
{
	/* Complete data is good data, even after a timeout or a NAK. */
	int status = len == op->ev.len ? 0 : -EPROTO;
	if (status)
		log_warn("net: node %u sent %llu bytes of sample %u, %llu were asked for", op->ev.peer,
			 (unsigned long long)len, op->ev.sample, (unsigned long long)op->ev.len);
	fetch_finish(n, op, status);
}

static void fetch_failed(struct net *n, struct op *op, const struct fi_cq_err_entry *e)
{
	int status;
	if (e->err == FI_ECANCELED && op->state == FS_CANCELLING) {
		status = op->final;
	} else {
		status = fi_to_errno(e->err);
		if (op->state == FS_CANCELLING && op->final)
			status = op->final;
		else if (e->err == FI_ETRUNC)
			log_warn("net: node %u sent more than the %llu bytes of sample %u",
				 op->ev.peer, (unsigned long long)op->ev.len, op->ev.sample);
		else
			log_debug("net: receive from node %u failed: %s", op->ev.peer,
				  fi_strerror(e->err));
	}
	fetch_finish(n, op, status);
}

static void on_nak(struct net *n, const struct wire_msg *m, uint64_t now)
{
	struct hnode *h = hmap_get(&n->fetch_ids, m->id);
	if (!h)
		return; /* already finished or cancelled: nothing to do */
	struct op *op = container_of(h, struct op, h);
	if (op->ev.peer != m->from || op->ev.sample != m->sample || op->state != FS_SENT) {
		count_bad(n, "NAK does not match its request", m->id);
		return;
	}
	fetch_cancel(n, op, -(int)m->arg, now);
}

/* The owner has the request queued: wait the granted window, in the acked
 * list (kept in deadline order: every grant is the same multiple of about
 * the same budget). */
static void on_queued(struct net *n, const struct wire_msg *m, uint64_t now)
{
	struct hnode *h = hmap_get(&n->fetch_ids, m->id);
	if (!h)
		return; /* finished or cancelled meanwhile */
	struct op *op = container_of(h, struct op, h);
	if (op->ev.peer != m->from || op->ev.sample != m->sample) {
		count_bad(n, "QUEUED does not match its request", m->id);
		return;
	}
	if (op->home != &n->fetches || op->state == FS_CANCELLING)
		return;
	op->deadline = MAX(op->deadline, now + (uint64_t)m->budget_ms * 1000000u);
	home_set(op, &n->acked);
}

/* ---- owner side ------------------------------------------------------------ */
static struct op *op_new(enum op_kind kind)
{
	struct op *op = xcalloc(1, sizeof(*op));
	op->kind = kind;
	op->ctx.kind = CTX_OP;
	return op;
}

static void queue_nak(struct net *n, uint32_t peer, uint64_t id, uint32_t sample, int error)
{
	struct op *op = op_new(OP_NAK);
	op->ev.peer = peer;
	op->ev.req_id = id;
	op->ev.sample = sample;
	op->error = error < 0 && error > -4096 ? error : -EIO;
	pend_add(n, op);
}

static void send_finish(struct net *n, struct op *op, int status)
{
	pend_del(n, op);
	home_set(op, NULL);
	if (status == 0) {
		pthread_mutex_lock(&n->st_mu);
		n->st.served++;
		n->st.served_bytes += op->ev.len;
		pthread_mutex_unlock(&n->st_mu);
	}
	if (op->kind == OP_REPLY) {
		op->ev.kind = NET_REPLY_DONE;
		op->ev.status = status;
		event_push(n, &op->ev);
	} else {
		free(op);
	}
}

/* 1 = done with posting, 0 = FI_EAGAIN. */
static int send_post(struct net *n, struct op *op, uint64_t now)
{
	if (now > op->deadline) {
		/* the requester gave up already: sending would leave data nobody takes */
		send_finish(n, op, -ETIMEDOUT);
		return 1;
	}
	bool ok;
	void *desc = desc_for(n, op->buf, op->ev.len, &ok);
	if (!ok) {
		/* unregistered memory on a provider that needs it: tell the requester */
		queue_nak(n, op->ev.peer, op->ev.req_id, op->ev.sample, -EFAULT);
		send_finish(n, op, -EFAULT);
		return 1;
	}
	ssize_t r = fi_tsend(n->ep, op->buf, op->ev.len, desc, op->ev.peer, op->ev.req_id, &op->ctx.fi);
	if (r == -FI_EAGAIN)
		return 0;
	if (r != 0) {
		log_warn("net: sending %llu bytes to node %u: %s", (unsigned long long)op->ev.len,
			 op->ev.peer, fi_strerror((int)-r));
		send_finish(n, op, fi_to_errno((int)r));
		return 1;
	}
	pend_del(n, op);
	home_set(op, &n->sending);
	return 1;
}

static int nak_post(struct net *n, struct op *op)
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
	pend_del(n, op);
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

static void on_request(struct net *n, const struct wire_msg *m, uint64_t now)
{
	uint64_t len = m->arg;
	if (len == 0 || len > n->max_len) {
		count_bad(n, "request length", len);
		return;
	}
	if (m->budget_ms == 0) {
		count_bad(n, "request budget", 0);
		return;
	}
	if (hmap_get(&n->deferred_ids, m->id)) {
		count_bad(n, "duplicate request id", m->id);
		return;
	}
	uint32_t peer = m->from, sample = (uint32_t)m->sample;
	/* keep a tenth of the requester's budget for the way back */
	uint64_t deadline = now + (uint64_t)m->budget_ms * 900000u;
	const void *src = NULL;
	int r = n->o.lookup(n->o.lookup_ctx, peer, sample, len, &src);
	if (r > 0) {
		if (!src) {
			queue_nak(n, peer, m->id, sample, -EFAULT);
			return;
		}
		struct op *op = op_new(OP_SERVE);
		op->ev.peer = peer;
		op->ev.req_id = m->id;
		op->ev.sample = sample;
		op->ev.len = len;
		op->buf = (void *)(uintptr_t)src;
		op->t0 = now;
		op->deadline = deadline;
		pend_add(n, op);
	} else if (r == 0) {
		/* tell the requester it is queued, and give it (and us) longer */
		uint64_t grant = MIN((uint64_t)m->budget_ms * QUEUED_GRANT, UINT32_MAX);
		struct op *q = op_new(OP_NAK);
		q->ev.peer = peer;
		q->ev.req_id = m->id;
		q->ev.sample = sample;
		q->grant_ms = (uint32_t)grant;
		pend_add(n, q);
		deadline = now + grant * 900000u;
		struct deferred *d = xcalloc(1, sizeof(*d));
		d->h.key = m->id;
		d->deadline = deadline;
		d->peer = peer;
		d->sample = sample;
		d->len = len;
		hmap_put(&n->deferred_ids, &d->h);
		if (n->dq_tail)
			n->dq_tail->next = d;
		else
			n->dq_head = d;
		n->dq_tail = d;
		struct net_event *e = xcalloc(1, sizeof(*e));
		e->kind = NET_REQUEST;
		e->peer = peer;
		e->req_id = m->id;
		e->sample = sample;
		e->len = len;
		event_push(n, e);
	} else {
		queue_nak(n, peer, m->id, sample, r);
	}
}

/* The dispatcher answered a deferred request: 0 if it may still be sent
 * (op gets the request's deadline and sample), -ETIMEDOUT when the
 * requester has given up or the request is unknown, -EINVAL when a reply's
 * length is not the one asked for (the request is then NAKed). */
static int deferred_take(struct net *n, struct op *op, uint64_t now)
{
	struct hnode *h = hmap_get(&n->deferred_ids, op->ev.req_id);
	if (!h)
		return -ETIMEDOUT;
	struct deferred *d = container_of(h, struct deferred, h);
	if (d->peer != op->ev.peer)
		return -ETIMEDOUT;
	hmap_del(&n->deferred_ids, &d->h);
	d->answered = true;
	op->deadline = d->deadline;
	op->ev.sample = d->sample;
	if (now > d->deadline)
		return -ETIMEDOUT;
	if (op->kind == OP_REPLY && op->ev.len != d->len) {
		log_warn("net: reply of %llu bytes to a request for %llu bytes of sample %u: "
			 "refused", (unsigned long long)op->ev.len, (unsigned long long)d->len,
			 d->sample);
		queue_nak(n, op->ev.peer, op->ev.req_id, d->sample, -EIO);
		return -EINVAL;
	}
	return 0;
}

static void deferred_expire(struct net *n, uint64_t now)
{
	while (n->dq_head && (n->dq_head->answered || n->dq_head->deadline < now)) {
		struct deferred *d = n->dq_head;
		n->dq_head = d->next;
		if (!n->dq_head)
			n->dq_tail = NULL;
		if (!d->answered)
			hmap_del(&n->deferred_ids, &d->h);
		free(d);
	}
}

/* ---- control messages ------------------------------------------------------ */
static void slot_post(struct net *n, uint32_t i)
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
	if (len != sizeof(m)) {
		count_bad(n, "size", len);
		return;
	}
	memcpy(&m, buf, sizeof(m));
	if (m.magic != WIRE_MAGIC || m.version != WIRE_VERSION) {
		count_bad(n, "magic/version", ((uint64_t)m.magic << 16) | m.version);
		return;
	}
	if (m.from >= n->o.nnodes || m.from == n->o.node) {
		count_bad(n, "sender node", m.from);
		return;
	}
	if (m.sample > UINT32_MAX) {
		count_bad(n, "sample", m.sample);
		return;
	}
	switch (m.type) {
	case MSG_REQUEST:
		if (!(m.id & ID_DATA_BIT) || ((m.id & ~ID_DATA_BIT) >> ID_NODE_SHIFT) != m.from) {
			count_bad(n, "request id", m.id);
			return;
		}
		on_request(n, &m, now);
		break;
	case MSG_NAK:
		if (!own_fetch_id(n, m.id) || m.arg == 0 || m.arg >= 4096 || m.budget_ms != 0) {
			count_bad(n, "NAK fields", m.id);
			return;
		}
		on_nak(n, &m, now);
		break;
	case MSG_QUEUED:
		if (!own_fetch_id(n, m.id) || m.arg != 0 || m.budget_ms == 0) {
			count_bad(n, "QUEUED fields", m.id);
			return;
		}
		on_queued(n, &m, now);
		break;
	default:
		count_bad(n, "type", m.type);
		break;
	}
}

/* ---- completions ------------------------------------------------------------ */
static void on_completion(struct net *n, const struct fi_cq_tagged_entry *c, uint64_t now)
{
	struct octx *x = c->op_context;
	if (!x)
		return;
	if (x->kind == CTX_SLOT) {
		struct ctrl_slot *s = container_of(x, struct ctrl_slot, c);
		on_ctrl(n, s->buf, c->len, now);
		slot_post(n, (uint32_t)(s - n->slots));
		return;
	}
	struct op *op = container_of(x, struct op, ctx);
	if (op->kind == OP_FETCH)
		fetch_completed(n, op, c->len);
	else
		send_finish(n, op, 0);
}

static void on_error(struct net *n, const struct fi_cq_err_entry *e)
{
	struct octx *x = e->op_context;
	if (!x) {
		log_warn("net: completion error without context: %s", fi_strerror(e->err));
		return;
	}
	if (x->kind == CTX_SLOT) {
		struct ctrl_slot *s = container_of(x, struct ctrl_slot, c);
		if (e->err == FI_ECANCELED && atomic_load(&n->stop))
			return;
		if (e->err == FI_ETRUNC || e->err == FI_ETOOSMALL)
			count_bad(n, "oversized", e->len + e->olen);
		else
			log_debug("net: control receive: %s", fi_strerror(e->err));
		slot_post(n, (uint32_t)(s - n->slots));
		return;
	}
	struct op *op = container_of(x, struct op, ctx);
	if (op->kind == OP_FETCH) {
		fetch_failed(n, op, e);
	} else {
		char why[128];
		const char *pe = fi_cq_strerror(n->cq, e->prov_errno, e->err_data, why, sizeof(why));
		log_debug("net: sending %llu bytes to node %u failed: %s (%s)",
			  (unsigned long long)op->ev.len, op->ev.peer, fi_strerror(e->err),
			  pe ? pe : "");
		send_finish(n, op, fi_to_errno(e->err));
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
		switch (op->kind) {
		case OP_FETCH:
			if (peer_suspect_at(n, op->ev.peer, now)) {
				fetch_report(n, op, -EHOSTDOWN);
				break;
			}
			op->h.key = op->ev.req_id;
			hmap_put(&n->fetch_ids, &op->h);
			home_set(op, &n->fetches); /* arrival order is deadline order */
			pend_add(n, op);
			break;
		case OP_REPLY: {
			int rc = deferred_take(n, op, now);
			if (rc) {
				op->ev.kind = NET_REPLY_DONE;
				op->ev.status = rc;
				event_push(n, &op->ev);
				break;
			}
			pend_add(n, op);
			break;
		}
		case OP_NAK:
			if (deferred_take(n, op, now)) {
				free(op);
				break;
			}
			pend_add(n, op);
			break;
		case OP_SERVE:
			free(op); /* never queued by the dispatcher */
			break;
		}
		op = next;
	}
}

/* Post what waits, in order; after FI_EAGAIN skip what needs the same
 * resource in this pass (receives, or sends to that node). */
static int post_pending(struct net *n, uint64_t now)
{
	int posted = 0;
	bool recv_blocked = false;
	while (n->nrepost > 0 && !recv_blocked) {
		uint32_t i = n->repost[--n->nrepost];
		uint32_t before = n->nrepost;
		slot_post(n, i);
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
			r = fetch_post(n, op, now);
			if (!r && op->state == FS_NEW)
				recv_blocked = true;
			else if (!r)
				goto peer;
			break;
		case OP_REPLY:
		case OP_SERVE:
			r = send_post(n, op, now);
			if (!r)
				goto peer;
			break;
		default:
			r = nak_post(n, op);
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
	while (n->fetches.head && n->fetches.head->deadline <= now) {
		struct op *op = n->fetches.head;
		mark_suspect(n, op->ev.peer, now);
		if (op->state == FS_NEW)
			fetch_finish(n, op, -ETIMEDOUT); /* nothing posted yet */
		else
			fetch_cancel(n, op, -ETIMEDOUT, now);
	}
	/* the owner answered "queued": it lives, it is only slow */
	while (n->acked.head && n->acked.head->deadline <= now)
		fetch_cancel(n, n->acked.head, -ETIMEDOUT, now);
	deferred_expire(n, now);
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

static int wait_ms(struct net *n, uint64_t now)
{
	if (n->pending.n || n->nrepost || n->fetches.n || n->acked.n || n->cancelling.n ||
	    n->sending.n)
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

static void *net_main(void *arg)
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

/* ---- dispatcher side --------------------------------------------------------- */
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
	fetch_report(n, op, status);
}

void net_fetch(struct net *n, uint32_t peer, uint32_t sample, void *dst, uint64_t len, void *user)
{
	struct op *op = op_new(OP_FETCH);
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
		desc_for(n, dst, len, &ok);
	if (peer >= n->o.nnodes || peer == n->o.node || !dst || len == 0) {
		fetch_fail_now(n, op, -EINVAL);
	} else if (len > n->max_len) {
		fetch_fail_now(n, op, -EMSGSIZE);
	} else if (!ok) {
		fetch_fail_now(n, op, -EFAULT); /* the provider needs registered memory */
	} else if (peer_suspect_at(n, peer, now)) {
		fetch_fail_now(n, op, -EHOSTDOWN);
	} else {
		queue_command(n, op);
	}
}

void net_reply(struct net *n, uint32_t peer, uint64_t req_id, const void *src, uint64_t len,
	       void *user)
{
	struct op *op = op_new(OP_REPLY);
	op->ev.peer = peer;
	op->ev.req_id = req_id;
	op->ev.len = len;
	op->ev.user = user;
	op->buf = (void *)(uintptr_t)src;
	op->t0 = now_ns();
	if (peer >= n->o.nnodes || !src || len == 0 || len > n->max_len) {
		op->ev.kind = NET_REPLY_DONE;
		op->ev.status = -EINVAL;
		event_push(n, &op->ev);
		return;
	}
	queue_command(n, op);
}

void net_reply_error(struct net *n, uint32_t peer, uint64_t req_id, int error)
{
	if (peer >= n->o.nnodes)
		return;
	struct op *op = op_new(OP_NAK);
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
	uint64_t v;
	ssize_t r UNUSED = read(n->efd, &v, sizeof(v));
	pthread_mutex_lock(&n->ev_mu);
	struct net_event *h = n->ev_head;
	n->ev_head = n->ev_tail = NULL;
	pthread_mutex_unlock(&n->ev_mu);
	return h;
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
	return peer_suspect_at(n, peer, now_ns());
}

/* ---- set-up and tear-down ------------------------------------------------------ */
static struct fi_info *make_hints(const char *prov)
{
	struct fi_info *h = fi_allocinfo();
	if (!h)
		return NULL;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_TAGGED;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
	if (prov) {
		h->fabric_attr->prov_name = strdup(prov);
		if (!h->fabric_attr->prov_name) {
			fi_freeinfo(h);
			return NULL;
		}
	}
	return h;
}

/* "tcp;ofi_rxm, sockets, ..." : the providers that would do here. */
static void list_providers(char *buf, size_t len)
{
	buf[0] = '\0';
	struct fi_info *h = make_hints(NULL), *info = NULL;
	if (!h)
		return;
	if (fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, h, &info) == 0) {
		size_t used = 0;
		for (struct fi_info *i = info; i; i = i->next) {
			const char *p = i->fabric_attr->prov_name;
			bool seen = !p;
			for (struct fi_info *j = info; j != i && !seen; j = j->next)
				seen = j->fabric_attr->prov_name && !strcmp(j->fabric_attr->prov_name, p);
			if (seen)
				continue;
			int k = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", p);
			if (k < 0 || (size_t)k >= len - used)
				break;
			used += (size_t)k;
		}
		fi_freeinfo(info);
	}
	fi_freeinfo(h);
	if (!buf[0])
		str_copy(buf, len, "(none)");
}

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...) PRINTF_LIKE(4, 5);
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

static void close_fid(struct fid *f, const char *what)
{
	if (!f)
		return;
	int r = fi_close(f);
	/* ofi_rxm keeps the registrations of rendezvous sends that never
	 * finished (a peer stopped mid-transfer): its domain then stays busy
	 * and that memory is only returned at exit */
	if (r == -FI_EBUSY)
		log_info("net: the provider still holds resources of unfinished transfers "
			 "(closing the %s: %s)", what, fi_strerror(-r));
	else if (r)
		log_warn("net: closing the %s: %s", what, fi_strerror(-r));
}

static void free_ops(struct net *n)
{
	/* pending NAK/SERVE/REPLY ops not yet posted live only in `pending` */
	for (struct op *op = n->pending.head, *next; op; op = next) {
		next = op->pend.next;
		if (!op->home)
			free(op);
	}
	struct olist *lists[] = { &n->fetches, &n->acked, &n->cancelling, &n->sending };
	for (size_t i = 0; i < ARRAY_SIZE(lists); i++) {
		for (struct op *op = lists[i]->head, *next; op; op = next) {
			next = op->hlink.next;
			free(op);
		}
	}
	for (struct op *op = n->cmd_head, *next; op; op = next) {
		next = op->qnext;
		free(op);
	}
	for (struct net_event *e = n->ev_head, *next; e; e = next) {
		next = e->next;
		free(e);
	}
	for (struct deferred *d = n->dq_head, *next; d; d = next) {
		next = d->next;
		free(d);
	}
}

void net_destroy(struct net *n)
{
	if (!n)
		return;
	if (n->started) {
		atomic_store(&n->stop, true);
		fi_cq_signal(n->cq);
		pthread_join(n->thread, NULL);
	}
	/* Closing the endpoint drops every posted operation: after this the
	 * provider touches no dst/src buffer. Then what it was bound to. */
	close_fid(n->ep ? &n->ep->fid : NULL, "endpoint");
	close_fid(n->av ? &n->av->fid : NULL, "address vector");
	close_fid(n->cq ? &n->cq->fid : NULL, "completion queue");
	close_fid(n->ctrl_mr ? &n->ctrl_mr->fid : NULL, "control memory registration");
	close_fid(n->region_mr ? &n->region_mr->fid : NULL, "region memory registration");
	close_fid(n->domain ? &n->domain->fid : NULL, "domain");
	close_fid(n->fabric ? &n->fabric->fid : NULL, "fabric");
	if (n->info)
		fi_freeinfo(n->info);
	free_ops(n);
	free(n->fetch_ids.b);
	free(n->deferred_ids.b);
	free(n->slots);
	free(n->repost);
	free(n->peer_blocked);
	free(n->blocked);
	free((void *)n->suspect_until);
	if (n->efd >= 0)
		close(n->efd);
	pthread_mutex_destroy(&n->cmd_mu);
	pthread_mutex_destroy(&n->ev_mu);
	pthread_mutex_destroy(&n->st_mu);
	free(n);
}

/* A libfabric call `what` failed with rc (negative or positive). */
static int fi_failed(const struct net *n, int rc, const char *what, char *err, size_t errlen)
{
	return fail(err, errlen, rc < 0 ? rc : -rc, "libfabric provider '%s': %s failed: %s", n->prov,
		    what, fi_strerror(rc < 0 ? -rc : rc));
}

/* The net object: options, locks, maps, per-peer state; no fabric yet. */
static struct net *net_alloc(const struct net_opts *o)
{
	struct net *n = xcalloc(1, sizeof(*n));
	n->o = *o;
	str_copy(n->prov, sizeof(n->prov), o->provider && o->provider[0] ? o->provider
								      : DEFAULT_PROVIDER);
	n->o.provider = n->prov;
	n->timeout_ns = (uint64_t)((o->timeout_s > 0 ? o->timeout_s : DEFAULT_TIMEOUT_S) * 1e9);
	n->suspect_ns = (uint64_t)((o->suspect_s > 0 ? o->suspect_s : DEFAULT_SUSPECT_S) * 1e9);
	n->efd = -1;
	pthread_mutex_init(&n->cmd_mu, NULL);
	pthread_mutex_init(&n->ev_mu, NULL);
	pthread_mutex_init(&n->st_mu, NULL);
	hmap_init(&n->fetch_ids);
	hmap_init(&n->deferred_ids);
	n->suspect_until = xcalloc(o->nnodes, sizeof(*n->suspect_until));
	n->peer_blocked = xcalloc(o->nnodes, 1);
	n->blocked = xcalloc(o->nnodes, sizeof(*n->blocked));
	return n;
}

/* The provider's description (fi_getinfo), and whether it can carry seer's
 * control messages. */
static int open_info(struct net *n, char *err, size_t errlen)
{
	struct fi_info *hints = make_hints(n->prov);
	if (!hints)
		return fail(err, errlen, -ENOMEM, "net: out of memory");
	int rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, hints,
			    &n->info);
	fi_freeinfo(hints);
	if (rc) {
		char avail[512];
		list_providers(avail, sizeof(avail));
		const char *env = getenv("FI_PROVIDER");
		return fail(err, errlen, rc,
			    "libfabric provider '%s' not available here (fi_getinfo: %s): set [net] "
			    "provider or FI_PROVIDER to one of: %s%s%s%s",
			    n->prov, fi_strerror(-rc), avail, env ? " (FI_PROVIDER=" : "",
			    env ? env : "", env ? " is set and limits this list)" : "");
	}
	if (n->info->tx_attr->inject_size < sizeof(struct wire_msg))
		return fail(err, errlen, -ENOTSUP,
			    "libfabric provider '%s' injects only %zu bytes, seer's control "
			    "messages need %zu: choose another [net] provider",
			    n->info->fabric_attr->prov_name, n->info->tx_attr->inject_size,
			    sizeof(struct wire_msg));
	n->max_len = MIN(NET_MAX_LEN, (uint64_t)n->info->ep_attr->max_msg_size);
	n->mr_local = (n->info->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
	return 0;
}

/* Fabric, domain, completion queue, address vector and the endpoint bound
 * to them, enabled. */
static int open_endpoint(struct net *n, char *err, size_t errlen)
{
	int rc = fi_fabric(n->info->fabric_attr, &n->fabric, NULL);
	if (rc)
		return fi_failed(n, rc, "fi_fabric", err, errlen);
	if ((rc = fi_domain(n->fabric, n->info, &n->domain, NULL)))
		return fi_failed(n, rc, "fi_domain", err, errlen);
	struct fi_cq_attr cqa = {
		.format = FI_CQ_FORMAT_TAGGED,
		.wait_obj = FI_WAIT_UNSPEC,
		/* room for every operation that can be outstanding, and then some */
		.size = MAX(n->info->tx_attr->size + n->info->rx_attr->size, 8192),
	};
	rc = fi_cq_open(n->domain, &cqa, &n->cq, NULL);
	if (rc) {
		cqa.size = 0; /* the provider's default */
		rc = fi_cq_open(n->domain, &cqa, &n->cq, NULL);
	}
	if (rc)
		return fi_failed(n, rc, "fi_cq_open", err, errlen);
	struct fi_av_attr ava = { .type = FI_AV_TABLE, .count = n->o.nnodes };
	if ((rc = fi_av_open(n->domain, &ava, &n->av, NULL)))
		return fi_failed(n, rc, "fi_av_open", err, errlen);
	if ((rc = fi_endpoint(n->domain, n->info, &n->ep, NULL)))
		return fi_failed(n, rc, "fi_endpoint", err, errlen);
	if ((rc = fi_ep_bind(n->ep, &n->av->fid, 0)))
		return fi_failed(n, rc, "fi_ep_bind (address vector)", err, errlen);
	if ((rc = fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV)))
		return fi_failed(n, rc, "fi_ep_bind (completion queue)", err, errlen);
	if ((rc = fi_enable(n->ep)))
		return fi_failed(n, rc, "fi_enable", err, errlen);
	return 0;
}

/* The control receive slots and the region, registered with the provider
 * (required under FI_MR_LOCAL, else used when it works). */
static int register_memory(struct net *n, char *err, size_t errlen)
{
	/* control receive slots: a quarter of the receive queue at most */
	n->nslots = (uint32_t)MIN((size_t)CTRL_SLOTS_MAX, MAX(n->info->rx_attr->size / 4, 8));
	n->slots = xcalloc(n->nslots, sizeof(*n->slots));
	n->repost = xcalloc(n->nslots, sizeof(*n->repost));
	for (uint32_t i = 0; i < n->nslots; i++)
		n->slots[i].c.kind = CTX_SLOT;
	/* keys are ignored under FI_MR_PROV_KEY, else they must differ */
	int rc = fi_mr_reg(n->domain, n->slots, n->nslots * sizeof(*n->slots), FI_SEND | FI_RECV, 0,
			   1, 0, &n->ctrl_mr, NULL);
	if (rc && n->mr_local)
		return fi_failed(n, rc, "fi_mr_reg (control buffers)", err, errlen);
	if (rc)
		n->ctrl_mr = NULL;
	else
		n->ctrl_desc = fi_mr_desc(n->ctrl_mr);
	if (!n->o.region_len)
		return 0;
	rc = fi_mr_reg(n->domain, n->o.region, n->o.region_len, FI_SEND | FI_RECV, 0, 2, 0,
		       &n->region_mr, NULL);
	if (rc == 0) {
		n->region_desc = fi_mr_desc(n->region_mr);
		return 0;
	}
	n->region_mr = NULL;
	if (n->mr_local)
		return fail(err, errlen, rc,
			    "libfabric provider '%s' could not register the %zu-byte region "
			    "(fi_mr_reg: %s): check the locked-memory limit (ulimit -l) or choose "
			    "another [net] provider",
			    n->info->fabric_attr->prov_name, n->o.region_len, fi_strerror(-rc));
	log_warn("net: registering the region with '%s' failed (%s); continuing without (the "
		 "provider does not need it)", n->info->fabric_attr->prov_name, fi_strerror(-rc));
	return 0;
}

/* The endpoint's address (malloc'd, for the other nodes) and the event fd. */
static int local_address(struct net *n, void **addr, size_t *addrlen, char *err, size_t errlen)
{
	size_t alen = 0;
	int rc = fi_getname(&n->ep->fid, NULL, &alen);
	if (rc != -FI_ETOOSMALL || alen == 0)
		return fi_failed(n, rc ? rc : -FI_EOTHER, "fi_getname", err, errlen);
	void *a = xmalloc(alen);
	if ((rc = fi_getname(&n->ep->fid, a, &alen))) {
		free(a);
		return fi_failed(n, rc, "fi_getname", err, errlen);
	}
	n->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (n->efd < 0) {
		free(a);
		return fail(err, errlen, -errno, "net: eventfd: %s", strerror(errno));
	}
	*addr = a;
	*addrlen = alen;
	return 0;
}

int net_create(struct net **out, const struct net_opts *o, void **addr, size_t *addrlen,
	       char *err, size_t errlen)
{
	*out = NULL;
	if (addr)
		*addr = NULL;
	if (!o || !o->lookup || o->nnodes == 0 || o->node >= o->nnodes || o->nnodes > ID_NODE_MAX ||
	    !addr || !addrlen || (o->region_len && !o->region))
		return fail(err, errlen, -EINVAL,
			    "net: invalid options (node %u of %u nodes, lookup %s, region %p+%zu)",
			    o ? o->node : 0, o ? o->nnodes : 0, o && o->lookup ? "set" : "missing",
			    o ? o->region : NULL, o ? o->region_len : 0);
	struct net *n = net_alloc(o);
	int rc = open_info(n, err, errlen);
	if (rc == 0)
		rc = open_endpoint(n, err, errlen);
	if (rc == 0)
		rc = register_memory(n, err, errlen);
	if (rc == 0)
		rc = local_address(n, addr, addrlen, err, errlen);
	if (rc != 0) {
		net_destroy(n);
		return rc;
	}
	*out = n;
	log_debug("net: node %u on '%s' (%s, domain %s), mr_mode %#x, inject %zu, %u control slots",
		  n->o.node, n->info->fabric_attr->prov_name, n->info->fabric_attr->name,
		  n->info->domain_attr->name, (unsigned)n->info->domain_attr->mr_mode,
		  n->info->tx_attr->inject_size, n->nslots);
	return 0;
}

int net_start(struct net *n, const void *addrs, size_t addrlen, char *err, size_t errlen)
{
	if (n->started)
		return fail(err, errlen, -EALREADY, "net: already started");
	if (!addrs || addrlen == 0)
		return fail(err, errlen, -EINVAL, "net: no addresses");
	fi_addr_t *fa = xcalloc(n->o.nnodes, sizeof(*fa));
	int k = fi_av_insert(n->av, addrs, n->o.nnodes, fa, 0, NULL);
	int rc = 0;
	if (k != (int)n->o.nnodes) {
		rc = fail(err, errlen, k < 0 ? k : -EINVAL,
			  "libfabric provider '%s': %d of %u node addresses inserted (%s); every "
			  "daemon must use the same provider and address family",
			  n->prov, k < 0 ? 0 : k, n->o.nnodes, k < 0 ? fi_strerror(-k) : "bad address");
	} else {
		for (uint32_t i = 0; i < n->o.nnodes; i++) {
			if (fa[i] != i) {
				rc = fail(err, errlen, -EPROTO,
					  "libfabric provider '%s': node %u got address %llu in a "
					  "table address vector", n->prov, i, (unsigned long long)fa[i]);
				break;
			}
		}
	}
	free(fa);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < n->nslots; i++)
		slot_post(n, i);
	n->last_stuck_check = now_ns();
	rc = pthread_create(&n->thread, NULL, net_main, n);
	if (rc)
		return fail(err, errlen, -rc, "net: starting the network thread: %s", strerror(rc));
	pthread_setname_np(n->thread, "seer-net");
	n->started = true;
	return 0;
}
