/* Bundles (see net_int.h for the file map, docs/net.md "Bundles"): small
 * samples travel many to a message each way. A first epoch has each node
 * ask its peers for thousands of samples of a few KiB at once; one message
 * per request and one per answer spent the network threads' CPU in the
 * kernel's TCP path (2 x 1,865 fetches of 2.4 KiB took ~100 ms of a 0.23 s
 * cold epoch on 2 cores). So:
 *
 *   requester: a fetch of at most BUNDLE_SAMPLE_MAX bytes posts no receive
 *              of its own; the fetches queued for one peer in a pass go out
 *              in REQUEST_MANY messages (up to MANY_MAX entries, sent from
 *              a registered buffer: providers inject only 64 bytes);
 *   owner:     every answer to those entries -- the bytes (copied from the
 *              cache, or from the dispatcher's net_reply), QUEUED, NAK --
 *              is appended to the peer's bundle, sent as one tagged message
 *              (tag BUNDLE_TAG) at the end of the pass or when it is full;
 *   requester: BUNDLE_RX receives stay posted for bundles; each entry's
 *              bytes are copied into its fetch's dst and the fetch ends.
 *
 * One copy on each side replaces the provider's per-message work; larger
 * samples keep the zero-copy path of one tagged message each.
 *
 * Threads: the network thread only (setup and free: the dispatcher, with
 * the thread not running). Failure: a malformed bundle or entry is counted
 * (bad_msgs) and dropped -- its fetches time out; an entry of the wrong
 * length ends its fetch -EPROTO; answers for fetches that already ended
 * are ignored; a REQUEST_MANY whose send fails ends its fetches with that
 * error; a bundle whose send fails is lost (its fetches time out and the
 * owner becomes suspect, as for an unanswered request). */
#define _GNU_SOURCE
#include "net_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "../util/util.h"

#define PAD8(x) (((x) + 7u) & ~(uint64_t)7u)
#define REQ_CAP ((uint32_t)PAD8(CTRL_BUF))
#define NBUFS (BUNDLE_TX + BUNDLE_RX + REQ_TX)

/* ---- buffers ------------------------------------------------------------------ */
int net_bundle_setup(struct net *n, char *err, size_t errlen)
{
	/* answering bundles is always on (a node asking in them gets answers
	 * whatever this node's net.bundles); the option only decides asking */
	n->bd.bundles = !n->o.no_bundles;
	n->bd.bmem_len = (size_t)(BUNDLE_TX + BUNDLE_RX) * BUNDLE_BYTES + (size_t)REQ_TX * REQ_CAP;
	void *m = mmap(NULL, n->bd.bmem_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		n->bd.bmem = NULL;
		return err_fmt(err, errlen, -errno, "net: %zu bytes for bundle buffers: %s",
			       n->bd.bmem_len, strerror(errno));
	}
	n->bd.bmem = m;
	n->bd.nbufs = xcalloc(NBUFS, sizeof(*n->bd.nbufs));
	uint8_t *p = n->bd.bmem;
	for (uint32_t i = 0; i < NBUFS; i++) {
		struct nbuf *b = &n->bd.nbufs[i];
		b->c.kind = CTX_BUF;
		b->pool = i < BUNDLE_TX ? NB_TX : i < BUNDLE_TX + BUNDLE_RX ? NB_RX : NB_REQ;
		b->cap = b->pool == NB_REQ ? REQ_CAP : BUNDLE_BYTES;
		b->data = p;
		p += b->cap;
		if (b->pool == NB_TX) {
			b->next = n->bd.tx_free;
			n->bd.tx_free = b;
		} else if (b->pool == NB_REQ) {
			b->next = n->bd.req_free;
			n->bd.req_free = b;
		}
	}
	n->bd.bp = xcalloc(n->o.nnodes, sizeof(*n->bd.bp));
	int rc = fi_mr_reg(n->domain, n->bd.bmem, n->bd.bmem_len, FI_SEND | FI_RECV, 0, 3, 0, &n->bd.bmem_mr,
			   NULL);
	if (rc == 0) {
		n->bd.bmem_desc = fi_mr_desc(n->bd.bmem_mr);
		return 0;
	}
	n->bd.bmem_mr = NULL;
	if (n->mr_local)
		return err_fmt(err, errlen, rc,
			       "libfabric provider '%s' could not register %zu bytes of bundle "
			       "buffers (fi_mr_reg: %s): check the locked-memory limit (ulimit -l)",
			       n->prov, n->bd.bmem_len, fi_strerror(-rc));
	return 0;
}

static void rx_post(struct net *n, struct nbuf *b)
{
	ssize_t r = fi_trecv(n->ep, b->data, b->cap, n->bd.bmem_desc, FI_ADDR_UNSPEC, BUNDLE_TAG, 0,
			     &b->c.fi);
	if (r == 0)
		return;
	if (r != -FI_EAGAIN)
		log_warn("net: posting a bundle receive: %s", fi_strerror((int)-r));
	b->next = n->bd.rx_repost;
	n->bd.rx_repost = b;
}

void net_bundle_start(struct net *n)
{
	for (uint32_t i = 0; i < NBUFS; i++)
		if (n->bd.nbufs[i].pool == NB_RX)
			rx_post(n, &n->bd.nbufs[i]);
}

/* With the endpoint closed and the thread stopped: answers never sent. */
void net_bundle_free(struct net *n)
{
	for (uint32_t p = 0; n->bd.bp && p < n->o.nnodes; p++) {
		for (struct op *op = n->bd.bp[p].answer.head, *next; op; op = next) {
			next = op->blink.next;
			free(op);
		}
	}
	free(n->bd.bp);
	free(n->bd.nbufs);
	if (n->bd.bmem)
		munmap(n->bd.bmem, n->bd.bmem_len);
	n->bd.bp = NULL;
	n->bd.nbufs = NULL;
	n->bd.bmem = NULL;
}

/* ---- queues ------------------------------------------------------------------- */
bool net_bundle_wants(const struct net *n, const struct op *op)
{
	return n->bd.bundles && op->ev.len <= BUNDLE_SAMPLE_MAX;
}

static void enqueue(struct net *n, struct olist *l, struct op *op)
{
	op->bundled = true;
	op->in_b = true;
	net_olist_push(l, op, BLINK);
	n->bd.bq_n++;
}

void net_bundle_ask(struct net *n, struct op *op)
{
	enqueue(n, &n->bd.bp[op->ev.peer].ask, op);
}

void net_bundle_answer(struct net *n, struct op *op)
{
	enqueue(n, &n->bd.bp[op->ev.peer].answer, op);
}

void net_bundle_unqueue(struct net *n, struct op *op)
{
	if (!op->in_b)
		return;
	struct bpeer *p = &n->bd.bp[op->ev.peer];
	net_olist_del(op->kind == OP_FETCH ? &p->ask : &p->answer, op, BLINK);
	op->in_b = false;
	n->bd.bq_n--;
}

/* A buffer of the pool for peer, or NULL when none is free or the peer
 * holds its share already (a requester that stopped reading must not take
 * every buffer from the others). */
static struct nbuf *take(struct net *n, enum nbuf_pool pool, uint32_t peer)
{
	struct bpeer *p = &n->bd.bp[peer];
	struct nbuf **free_list = pool == NB_TX ? &n->bd.tx_free : &n->bd.req_free;
	uint32_t *held = pool == NB_TX ? &p->tx_held : &p->req_held;
	struct nbuf *b = *free_list;
	if (!b || *held >= (pool == NB_TX ? PEER_TX_MAX : PEER_REQ_MAX))
		return NULL;
	*free_list = b->next;
	(*held)++;
	n->bd.bq_n++;
	b->peer = peer;
	b->used = 0;
	return b;
}

static void give_back(struct net *n, struct nbuf *b)
{
	struct bpeer *p = &n->bd.bp[b->peer];
	n->bd.bq_n--;
	if (b->pool == NB_TX) {
		p->tx_held--;
		b->next = n->bd.tx_free;
		n->bd.tx_free = b;
	} else {
		p->req_held--;
		b->next = n->bd.req_free;
		n->bd.req_free = b;
	}
}

/* ---- requester: asking -------------------------------------------------------- */
/* The fetches of REQUEST_MANY b end with status (its send failed). */
static void fail_asked(struct net *n, const struct nbuf *b, int status)
{
	struct wire_msg m;
	memcpy(&m, b->data, sizeof(m));
	for (uint64_t i = 0; i < m.arg; i++) {
		struct wire_entry e;
		memcpy(&e, b->data + sizeof(m) + i * sizeof(e), sizeof(e));
		struct hnode *h = net_hmap_get(&n->fetch_ids, e.id);
		if (h)
			net_fetch_finish(n, container_of(h, struct op, h), status);
	}
}

/* Fill a REQUEST_MANY from p's queue, oldest first. The budget is the
 * newest entry's: an owner keeps answers that long, and an answer for a
 * fetch that ended already is ignored, while one dropped early would leave
 * a live fetch waiting for its timeout. */
static void fill_request(struct net *n, struct bpeer *p, struct nbuf *b, uint64_t now)
{
	const struct op *last = p->ask.head;
	for (uint32_t i = 1; i < MANY_MAX && last->blink.next; i++)
		last = last->blink.next;
	uint64_t budget = last->deadline > now ? (last->deadline - now) / 1000000u : 0;
	struct wire_msg m = {
		.magic = WIRE_MAGIC,
		.version = WIRE_VERSION,
		.type = MSG_REQUEST_MANY,
		.from = n->o.node,
		.budget_ms = (uint32_t)MIN(MAX(budget, 1), UINT32_MAX),
	};
	uint32_t k = 0;
	while (p->ask.head && k < MANY_MAX) {
		struct op *op = p->ask.head;
		net_bundle_unqueue(n, op);
		op->state = FS_SENT;
		struct wire_entry e = { .id = op->ev.req_id, .sample = op->ev.sample,
					.len = (uint32_t)op->ev.len };
		memcpy(b->data + sizeof(m) + k * sizeof(e), &e, sizeof(e));
		k++;
	}
	m.arg = k;
	memcpy(b->data, &m, sizeof(m));
	b->used = (uint32_t)(sizeof(m) + k * sizeof(struct wire_entry));
}

/* 1 = posted, 0 = FI_EAGAIN (kept for the next pass). */
static int post_request(struct net *n, struct bpeer *p, struct nbuf *b)
{
	ssize_t r = fi_send(n->ep, b->data, b->used, n->bd.bmem_desc, b->peer, &b->c.fi);
	if (r == -FI_EAGAIN) {
		p->req_out = b;
		return 0;
	}
	p->req_out = NULL;
	if (r != 0) {
		log_warn("net: sending a request to node %u: %s", b->peer, fi_strerror((int)-r));
		fail_asked(n, b, net_errno((int)r));
		give_back(n, b);
	}
	return 1;
}

static int pump_asks(struct net *n, uint32_t peer, uint64_t now)
{
	struct bpeer *p = &n->bd.bp[peer];
	int k = 0;
	if (p->req_out && !post_request(n, p, p->req_out))
		return k;
	while (p->ask.head) {
		struct nbuf *b = take(n, NB_REQ, peer);
		if (!b)
			break; /* a send completion frees one */
		fill_request(n, p, b, now);
		k++;
		if (!post_request(n, p, b))
			break;
	}
	return k;
}

/* ---- owner: answering --------------------------------------------------------- */
/* Append op's answer to bundle b; false when it does not fit. Ends the op. */
static bool append(struct net *n, struct nbuf *b, struct op *op, uint64_t now)
{
	struct bundle_ent e = { .id = op->ev.req_id };
	bool data = op->kind != OP_NAK;
	if (data && now > op->deadline) {
		/* the requester gave up already */
		net_bundle_unqueue(n, op);
		net_send_finish(n, op, -ETIMEDOUT);
		return true;
	}
	uint64_t need = sizeof(e) + (data ? PAD8(op->ev.len) : 0);
	if (b->used + need > b->cap)
		return false;
	net_bundle_unqueue(n, op);
	if (data) {
		e.len = (uint32_t)op->ev.len;
		uint8_t *d = b->data + b->used + sizeof(e);
		memcpy(d, op->buf, op->ev.len);
		memset(d + op->ev.len, 0, PAD8(op->ev.len) - op->ev.len); /* no stale bytes out */
	} else {
		e.status = op->error ? op->error : (int32_t)MIN(MAX(op->grant_ms, 1u), INT32_MAX);
	}
	memcpy(b->data + b->used, &e, sizeof(e));
	b->used += (uint32_t)need;
	if (data) {
		net_send_finish(n, op, 0); /* counted served; a REPLY's src is free again */
	} else {
		if (op->error) {
			pthread_mutex_lock(&n->st_mu);
			n->st.naks++;
			pthread_mutex_unlock(&n->st_mu);
		}
		free(op);
	}
	return true;
}

/* 1 = posted, 0 = FI_EAGAIN (kept for the next pass). */
static int post_bundle(struct net *n, struct bpeer *p, struct nbuf *b)
{
	ssize_t r = fi_tsend(n->ep, b->data, b->used, n->bd.bmem_desc, b->peer, BUNDLE_TAG, &b->c.fi);
	if (r == -FI_EAGAIN) {
		p->out = b;
		return 0;
	}
	p->out = NULL;
	if (r != 0) {
		log_warn("net: sending a bundle of %u bytes to node %u: %s", b->used, b->peer,
			 fi_strerror((int)-r));
		give_back(n, b);
	}
	return 1;
}

static int pump_answers(struct net *n, uint32_t peer, uint64_t now)
{
	struct bpeer *p = &n->bd.bp[peer];
	int k = 0;
	if (p->out && !post_bundle(n, p, p->out))
		return k;
	/* answers the requester gave up on end now, buffer or not */
	while (p->answer.head && p->answer.head->kind != OP_NAK && now > p->answer.head->deadline) {
		struct op *op = p->answer.head;
		net_bundle_unqueue(n, op);
		net_send_finish(n, op, -ETIMEDOUT);
	}
	while (p->answer.head) {
		struct nbuf *b = take(n, NB_TX, peer);
		if (!b)
			break;
		b->used = sizeof(struct bundle_hdr);
		uint32_t count = 0;
		while (p->answer.head) {
			struct op *op = p->answer.head;
			bool counted = op->kind == OP_NAK || now <= op->deadline;
			if (!append(n, b, op, now))
				break;
			count += counted;
		}
		if (count == 0) {
			give_back(n, b); /* only expired answers */
			continue;
		}
		struct bundle_hdr h = { .magic = BUNDLE_MAGIC, .version = WIRE_VERSION,
					.from = n->o.node, .count = count };
		memcpy(b->data, &h, sizeof(h));
		k++;
		if (!post_bundle(n, p, b))
			break;
	}
	return k;
}

int net_bundle_pump(struct net *n, uint64_t now)
{
	int k = 0;
	while (n->bd.rx_repost) {
		struct nbuf *b = n->bd.rx_repost;
		n->bd.rx_repost = b->next;
		rx_post(n, b);
		if (n->bd.rx_repost == b)
			break; /* FI_EAGAIN again: next pass */
		k++;
	}
	/* a different peer first each pass: none waits behind the others */
	uint32_t first = n->bd.bturn++ % n->o.nnodes;
	for (uint32_t i = 0; i < n->o.nnodes && n->bd.bq_n; i++) {
		uint32_t peer = (first + i) % n->o.nnodes;
		k += pump_asks(n, peer, now);
		k += pump_answers(n, peer, now);
	}
	return k;
}

/* ---- owner: REQUEST_MANY -------------------------------------------------------- */
void net_on_request_many(struct net *n, const struct wire_msg *m, const struct wire_entry *ents,
			uint64_t now)
{
	for (uint64_t i = 0; i < m->arg; i++) {
		struct wire_entry e;
		memcpy(&e, &ents[i], sizeof(e));
		if (!(e.id & ID_DATA_BIT) || ((e.id & ~ID_DATA_BIT) >> ID_NODE_SHIFT) != m->from) {
			net_count_bad(n, "request id", e.id);
			continue;
		}
		if (e.len > BUNDLE_SAMPLE_MAX) {
			net_count_bad(n, "bundled request length", e.len);
			continue;
		}
		net_request_entry(n, m->from, e.id, e.sample, e.len, m->budget_ms, now, true);
	}
}

/* ---- requester: a bundle arrived ----------------------------------------------- */
static void on_entry(struct net *n, uint32_t from, const struct bundle_ent *e,
		     const uint8_t *bytes, uint64_t now)
{
	struct hnode *h = net_hmap_get(&n->fetch_ids, e->id);
	if (!h)
		return; /* the fetch ended already (timed out): a late answer */
	struct op *op = container_of(h, struct op, h);
	if (!op->bundled || op->ev.peer != from) {
		net_count_bad(n, "bundle entry does not match its request", e->id);
		return;
	}
	if (e->status > 0) {
		net_fetch_queued(n, op, (uint32_t)e->status, now);
	} else if (e->status < 0) {
		net_fetch_finish(n, op, e->status);
	} else if (e->len != op->ev.len) {
		log_warn("net: node %u sent %u bytes of sample %u, %llu were asked for", from, e->len,
			 op->ev.sample, (unsigned long long)op->ev.len);
		net_fetch_finish(n, op, -EPROTO);
	} else {
		memcpy(op->buf, bytes, e->len);
		net_fetch_finish(n, op, 0);
	}
}

static void on_bundle(struct net *n, const uint8_t *d, uint64_t len, uint64_t now)
{
	struct bundle_hdr h;
	if (len < sizeof(h)) {
		net_count_bad(n, "bundle size", len);
		return;
	}
	memcpy(&h, d, sizeof(h));
	if (h.magic != BUNDLE_MAGIC || h.version != WIRE_VERSION) {
		net_count_bad(n, "bundle magic/version", ((uint64_t)h.magic << 16) | h.version);
		return;
	}
	if (h.from >= n->o.nnodes || h.from == n->o.node) {
		net_count_bad(n, "bundle sender", h.from);
		return;
	}
	uint64_t off = sizeof(h);
	for (uint32_t i = 0; i < h.count; i++) {
		struct bundle_ent e;
		if (len - off < sizeof(e)) {
			net_count_bad(n, "bundle truncated", i);
			return;
		}
		memcpy(&e, d + off, sizeof(e));
		off += sizeof(e);
		if (e.status == 0 && (e.len == 0 || e.len > len - off)) {
			net_count_bad(n, "bundle entry length", e.len);
			return;
		}
		if (e.status != 0 && (e.len != 0 || e.status <= -4096)) {
			net_count_bad(n, "bundle entry status", (uint64_t)(int64_t)e.status);
			return;
		}
		on_entry(n, h.from, &e, d + off, now);
		if (e.status == 0)
			off = MIN(len, off + PAD8(e.len));
	}
}

void net_bundle_completed(struct net *n, struct nbuf *b, uint64_t len, uint64_t now)
{
	if (b->pool != NB_RX) {
		give_back(n, b);
		return;
	}
	on_bundle(n, b->data, len, now);
	rx_post(n, b);
}

void net_bundle_failed(struct net *n, struct nbuf *b, const struct fi_cq_err_entry *e)
{
	if (b->pool == NB_RX) {
		if (e->err == FI_ECANCELED && atomic_load(&n->stop))
			return;
		if (e->err == FI_ETRUNC || e->err == FI_ETOOSMALL)
			net_count_bad(n, "oversized bundle", e->len + e->olen);
		else
			log_debug("net: bundle receive: %s", fi_strerror(e->err));
		rx_post(n, b);
		return;
	}
	log_warn("net: sending %s of %u bytes to node %u failed: %s",
		 b->pool == NB_REQ ? "a request" : "a bundle", b->used, b->peer, fi_strerror(e->err));
	if (b->pool == NB_REQ)
		fail_asked(n, b, net_errno(e->err));
	give_back(n, b);
}
