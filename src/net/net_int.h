/* Internals shared by the data plane's files (see net.h for the contract,
 * docs/net.md for the protocol, the threading and the failure behaviour):
 *
 *   net_setup.c      provider, endpoint, memory registration; create, start, destroy
 *   net_api.c        the dispatcher's calls: fetch, reply, events, stats
 *   net_fabric.c     the network thread: commands, posting, control messages,
 *                    completions, deadlines, sleeping in the provider
 *   net_requester.c  this node's fetches: post, time out, cancel, complete; peer health
 *   net_owner.c      answering other nodes' requests: serve, defer, NAK, QUEUED
 *   net_core.c       lists and maps of operations, events and counters, errors
 *   net_bundle.c     small samples many to a message: REQUEST_MANY and bundles
 *
 * Ownership: an operation (struct op) belongs to the dispatcher until it is
 * queued as a command, then to the network thread until it comes back as the
 * event it embeds (fetches, deferred replies) or is freed there (sends
 * answered from lookup, NAKs). Every libfabric call after net_start is made
 * on the network thread, except fi_cq_signal, the documented cross-thread
 * wake-up of fi_cq_sread. struct net below groups its fields by thread. */
#ifndef SEER_NET_INT_H
#define SEER_NET_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_domain.h>

#include "../util/handoff.h"
#include "net.h"

/* ---- wire format ----------------------------------------------------------
 * Control messages are untagged and fixed-size; sample bytes travel as one
 * tagged message whose tag is the request id. Daemons of one job run the
 * same build on the same architecture, so fields are in host byte order. */
#define WIRE_MAGIC 0x4e524553u /* "SERN" */
#define WIRE_VERSION 3
/* QUEUED: the owner deferred the request (the sample is still to be read)
 * and grants budget_ms more: the requester keeps waiting and, should even
 * that run out, falls back without taking the (live) owner for dead. */
enum { MSG_REQUEST = 1, MSG_NAK = 2, MSG_QUEUED = 3, MSG_REQUEST_MANY = 4 };
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

/* REQUEST_MANY: a wire_msg {type, from, budget_ms, arg = count} followed by
 * `count` entries; each is answered in a bundle (net_bundle.c). */
struct wire_entry {
	uint64_t id;        /* the fetch's request id */
	uint32_t sample;
	uint32_t len;
};
_Static_assert(sizeof(struct wire_entry) == 16, "wire_entry is 16 bytes on the wire");
#define MANY_MAX 64u        /* entries in one REQUEST_MANY */

/* A bundle: one tagged message (tag BUNDLE_TAG) from an owner to a
 * requester: a header, then `count` answers, each an entry followed, when
 * status is 0, by its `len` sample bytes padded to 8. status > 0: QUEUED,
 * that many ms granted; < 0: NAK, -errno. */
#define BUNDLE_TAG UINT64_C(2)
#define BUNDLE_MAGIC 0x42524553u /* "SERB" */
struct bundle_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t pad;
	uint32_t from;
	uint32_t count;
};
struct bundle_ent {
	uint64_t id;
	uint32_t len;
	int32_t status;
};
_Static_assert(sizeof(struct bundle_hdr) == 16 && sizeof(struct bundle_ent) == 16,
	       "bundle headers are 16 bytes on the wire");
#define BUNDLE_BYTES (15u << 10)      /* a bundle at most, headers included */
#define BUNDLE_SAMPLE_MAX (8u << 10)  /* larger samples travel alone, zero copy */
#define BUNDLE_TX 16u                 /* owner: bundle buffers being filled or sent */
#define BUNDLE_RX 64u                 /* requester: bundle receives kept posted */
#define REQ_TX 32u                    /* requester: REQUEST_MANY buffers */
#define PEER_TX_MAX 8u                /* of them one peer may hold */
#define PEER_REQ_MAX 16u

#define CTRL_BUF (sizeof(struct wire_msg) + MANY_MAX * sizeof(struct wire_entry) + 8)

/* ---- operations ------------------------------------------------------------ */
enum ctx_kind { CTX_OP = 1, CTX_SLOT = 2, CTX_WARM = 3, CTX_BUF = 4 };

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
	bool bundled;          /* FETCH: answered in a bundle; SERVE/REPLY/NAK: goes into one */
	bool in_b;             /* in a peer's bundle queue (blink) */
	int final;             /* FETCH: status reported when a cancelled receive ends */
	int error;             /* NAK: what to send; 0 with grant_ms: send QUEUED */
	uint32_t grant_ms;     /* QUEUED: the window granted */
	struct op *qnext;      /* command queue */
	struct link pend;      /* pending: waits for the provider (FI_EAGAIN) */
	struct link hlink;     /* in `home`: fetches, cancelling or sending */
	struct link blink;     /* in a peer's bundle queue: to ask for / to answer */
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
#define BLINK offsetof(struct op, blink)

/* A request the lookup deferred, waiting for net_reply / net_reply_error. */
struct deferred {
	struct hnode h;        /* key: request id */
	struct deferred *next; /* FIFO, for expiry */
	uint64_t deadline;
	uint64_t len;
	uint32_t peer, sample;
	bool answered;
	bool bundled;          /* asked in a REQUEST_MANY: answered in a bundle */
};

/* A registered buffer of the bundle pools (net_bundle.c). */
struct nbuf {
	struct octx c;
	struct nbuf *next;     /* free list */
	uint8_t *data;
	uint32_t cap, used;
	uint32_t peer;
	uint8_t pool;          /* enum nbuf_pool */
};
enum nbuf_pool { NB_TX = 1, NB_RX = 2, NB_REQ = 3 };

/* Per peer: bundling state (network thread). */
struct bpeer {
	struct olist ask;      /* requester: fetches to put in a REQUEST_MANY */
	struct olist answer;   /* owner: answers to put in a bundle */
	struct nbuf *out;      /* a filled buffer whose post met FI_EAGAIN */
	struct nbuf *req_out;  /* the same for a REQUEST_MANY */
	uint32_t tx_held, req_held; /* buffers taken for this peer, not yet back */
};

struct ctrl_slot {
	struct octx c;
	_Alignas(8) uint8_t buf[CTRL_BUF];
};

struct hmap {
	struct hnode **b;
	uint32_t mask, count;
};


/* Bundles (net_bundle.c): the registered buffers, their free lists and the
 * per-peer queues. Set up before net_start; then the network thread's (the
 * on/off flag stays read-only). */
struct net_bundles {
	bool bundles;
	uint8_t *bmem;
	size_t bmem_len;
	struct fid_mr *bmem_mr;
	void *bmem_desc;
	struct nbuf *nbufs;    /* BUNDLE_TX + BUNDLE_RX + REQ_TX */
	struct nbuf *tx_free, *req_free;
	struct nbuf *rx_repost; /* receives whose fi_trecv met FI_EAGAIN */
	struct bpeer *bp;      /* per node */
	uint32_t bq_n;         /* ops in bundle queues, buffers out (for wait_ms) */
	uint32_t bturn;        /* the peer the next pump starts with */
};

/* The warm-up exchange (net_warm.c): network thread only. */
struct net_warmup {
	struct octx *warm;
	uint8_t *warm_buf;
	uint32_t warm_n, warm_posted, warm_out;
	uint64_t warm_t0;
};

struct net {
	/* set before net_start, read-only afterwards */
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

	/* bundles (net_bundle.c): on unless the options turn them off */
	struct net_bundles bd;

	struct ctrl_slot *slots;
	uint32_t nslots;
	uint32_t *repost;      /* network thread: slots whose fi_recv met FI_EAGAIN */
	uint32_t nrepost;

	/* dispatcher -> network thread */
	pthread_mutex_t cmd_mu;
	struct op *cmd_head, *cmd_tail;
	atomic_int sleeping;   /* the thread is (about to be) in fi_cq_sread */
	atomic_bool stop;

	/* network thread -> dispatcher */
	pthread_mutex_t ev_mu;
	struct handoff events; /* of struct net_event, under ev_mu */
	int efd;

	/* both threads */
	_Atomic uint64_t next_seq;
	_Atomic uint64_t *suspect_until; /* ns (CLOCK_MONOTONIC) per node; 0 = fine */
	pthread_mutex_t st_mu;
	struct net_stats st;

	/* dispatcher only */
	pthread_t thread;
	bool started;           /* net_start succeeded */

	/* network thread only */
	struct olist pending, fetches, cancelling, sending;
	struct olist acked;    /* fetches the owner said it queued (own deadline order) */
	struct hmap fetch_ids, deferred_ids;
	struct deferred *dq_head, *dq_tail;
	uint8_t *peer_blocked;  /* this pass: a send to the node met FI_EAGAIN */
	uint32_t *blocked;
	uint32_t nblocked;
	uint64_t last_stuck_check;
	/* warm-up (net_warm.c): receives [0, warm_n), then sends */
	struct net_warmup wu;
};

/* ---- net_core.c: containers, operations, events, counters ------------------
 * Lists and maps: network thread only. Events and counters: any thread. */
/* Plain list operations on the link at offset off of each op. */
void net_olist_push(struct olist *l, struct op *op, size_t off);
void net_olist_del(struct olist *l, struct op *op, size_t off);
/* Move op to list l (or to none), off the list it was in. */
void net_home_set(struct op *op, struct olist *l);
/* Queue op for posting (FI_EAGAIN, or not yet posted) / take it off. */
void net_pend_add(struct net *n, struct op *op);
void net_pend_del(struct net *n, struct op *op);
void net_hmap_init(struct hmap *h);
void net_hmap_put(struct hmap *h, struct hnode *e);
struct hnode *net_hmap_get(const struct hmap *h, uint64_t key);
void net_hmap_del(struct hmap *h, struct hnode *e);

/* A libfabric error (either sign) as a negative errno. */
int net_errno(int fierr);
/* A zeroed operation of that kind (aborts on out of memory, as xcalloc). */
struct op *net_op_new(enum op_kind kind);
/* Hand an event to the dispatcher (rings the event fd). */
void net_event_push(struct net *n, struct net_event *e);
/* Report a fetch with `status` (the op becomes the event) and count it. The
 * caller has unlinked it from every list. */
void net_fetch_report(struct net *n, struct op *op, int status);
/* Count a malformed control message; warns for the first ten, then at powers
 * of two. */
void net_count_bad(struct net *n, const char *what, uint64_t v);
/* The registration descriptor for [p, p + len): the region's, or NULL; *ok
 * is false when the provider needs one and the range is outside the region. */
void *net_desc_for(struct net *n, const void *p, uint64_t len, bool *ok);

static inline bool net_peer_suspect_at(struct net *n, uint32_t peer, uint64_t now)
{
	return atomic_load_explicit(&n->suspect_until[peer], memory_order_relaxed) > now;
}

/* ---- net_requester.c: this node's fetches (network thread) ----------------- */
/* A fetch command arrives: fail it at once if the peer is suspect, else
 * track it and queue its posts. */
void net_fetch_start(struct net *n, struct op *op, uint64_t now);
/* Post what a fetch still needs. 1 = done with posting, 0 = FI_EAGAIN. */
int net_fetch_post(struct net *n, struct op *op, uint64_t now);
/* Its receive completed with len bytes / failed. */
void net_fetch_completed(struct net *n, struct op *op, uint64_t len);
void net_fetch_failed(struct net *n, struct op *op, const struct fi_cq_err_entry *e);
/* End a fetch with status (unlinked from everything first). */
void net_fetch_finish(struct net *n, struct op *op, int status);
/* The owner queued it: wait grant_ms more. */
void net_fetch_queued(struct net *n, struct op *op, uint32_t grant_ms, uint64_t now);
/* The owner's NAK / QUEUED for one of our fetches (fields checked). */
void net_on_nak(struct net *n, const struct wire_msg *m, uint64_t now);
void net_on_queued(struct net *n, const struct wire_msg *m, uint64_t now);
/* Give up on fetches past their deadline (the peer of an unanswered one
 * becomes suspect); warn once about cancelled transfers that never end. */
void net_fetch_expire(struct net *n, uint64_t now);
void net_fetch_check_stuck(struct net *n, uint64_t now);

/* ---- net_owner.c: answering other nodes (network thread) ------------------- */
/* A REQUEST arrived (fields checked): serve it from lookup, defer it to the
 * dispatcher (answering QUEUED) or NAK it. */
void net_on_request(struct net *n, const struct wire_msg *m, uint64_t now);
/* One request (REQUEST, or an entry of a REQUEST_MANY when bundled): serve,
 * defer or NAK it. */
void net_request_entry(struct net *n, uint32_t peer, uint64_t id, uint32_t sample, uint64_t len,
		      uint32_t budget_ms, uint64_t now, bool bundled);
/* A net_reply / net_reply_error command arrives for a deferred request. */
void net_answer_start(struct net *n, struct op *op, uint64_t now);
/* Post a send (REPLY, SERVE) / a NAK or QUEUED. 1 = done, 0 = FI_EAGAIN. */
int net_send_post(struct net *n, struct op *op, uint64_t now);
int net_nak_post(struct net *n, struct op *op);
/* A send ended (0 or -errno): count it, report a REPLY, free a SERVE. */
void net_send_finish(struct net *n, struct op *op, int status);
/* Forget deferred requests that were answered or whose requester gave up. */
void net_deferred_expire(struct net *n, uint64_t now);

/* ---- net_bundle.c: small samples, many per message --------------------------- */
/* Buffers: allocate and register (net_create), post the receives (net_start),
 * free (net_destroy). 0 or -errno/-FI_* with a message. */
int net_bundle_setup(struct net *n, char *err, size_t errlen);
void net_bundle_start(struct net *n);
void net_bundle_free(struct net *n);
/* Requester: does this fetch go by bundle? Then queue it to be asked for. */
bool net_bundle_wants(const struct net *n, const struct op *op);
void net_bundle_ask(struct net *n, struct op *op);
/* Take op off whichever bundle queue holds it. */
void net_bundle_unqueue(struct net *n, struct op *op);
/* Owner: a REQUEST_MANY arrived (header checked, entries not yet). */
void net_on_request_many(struct net *n, const struct wire_msg *m, const struct wire_entry *ents,
			uint64_t now);
/* Owner: queue an answer (SERVE, REPLY, NAK/QUEUED op with bundled set). */
void net_bundle_answer(struct net *n, struct op *op);
/* A bundle buffer's operation completed: a bundle arrived (len bytes), a
 * send ended; or failed with err. */
void net_bundle_completed(struct net *n, struct nbuf *b, uint64_t len, uint64_t now);
void net_bundle_failed(struct net *n, struct nbuf *b, const struct fi_cq_err_entry *e);
/* Send what the queues hold: REQUEST_MANYs and bundles. Returns how many
 * posts were made. */
int net_bundle_pump(struct net *n, uint64_t now);

/* ---- net_warm.c: connecting and growing the provider's pools early --------- */
void net_warm_init(struct net *n);
int net_warm_post(struct net *n, uint64_t now);
void net_warm_done(struct net *n, int err);
bool net_warm_busy(const struct net *n, uint64_t now);
void net_warm_free(struct net *n);

/* ---- net_fabric.c: the network thread -------------------------------------- */
/* (Re)post control receive slot i. */
void net_slot_post(struct net *n, uint32_t i);
void *net_thread_main(void *arg);

#endif /* SEER_NET_INT_H */
