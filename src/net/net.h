/* Sample transfer between daemons over libfabric (the data plane).
 *
 * One RDM endpoint per daemon, driven by one network thread that owns every
 * libfabric object. The dispatcher (seerd's event-loop thread) talks to it
 * through commands (net_fetch, net_reply, ...) and takes back events from a
 * done list signalled by an eventfd — the same shape as the I/O pool.
 *
 * Protocol (tag matching, no RMA so any RDM provider works):
 *   requester: posts a tagged receive of exactly `len` bytes into its
 *              destination buffer, tag = request id, then sends a small
 *              untagged REQUEST {id, sample, len} to the owner;
 *   owner:     answers with a tagged send of the sample bytes straight from
 *              its cache memory (tag = request id), or an untagged NAK
 *              {id, error} when it cannot serve it.
 *   A request not completed within its timeout is cancelled and reported
 *   -ETIMEDOUT; the peer is then "suspect" for a while and new fetches to it
 *   fail at once with -EHOSTDOWN (the caller reads the PFS instead).
 *
 * Memory: `dst` of a fetch and `src` of a reply must stay valid until the
 * matching event; addresses inside the region given to net_create are
 * registered with the provider when it needs registration (FI_MR_LOCAL). */
#ifndef SEER_NET_H
#define SEER_NET_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/handoff.h"

struct net;

enum net_event_kind {
	NET_FETCH_DONE = 1,  /* a net_fetch finished: status 0 or -errno */
	NET_REQUEST = 2,     /* a peer asks for `sample` (owner side, deferred path) */
	NET_REPLY_DONE = 3,  /* a net_reply's bytes left (its src may be reused) */
};

struct net_event {
	union {
		struct net_event *next;   /* the list net_take_events returns */
		struct handoff_node link; /* the same, as the event list sees it */
	};
	enum net_event_kind kind;
	int status;          /* FETCH_DONE / REPLY_DONE: 0 or -errno */
	uint32_t peer;       /* node */
	uint64_t req_id;     /* REQUEST: the requester's id, pass to net_reply */
	uint32_t sample;
	uint64_t len;
	void *user;          /* FETCH_DONE / REPLY_DONE: the caller's cookie */
	double seconds;      /* FETCH_DONE: request to completion */
};

/* Decide how to answer a request, on the network thread (must be quick and
 * thread-safe: it may only read state published with release semantics).
 * Return 1 with *src set to send `len` bytes now; 0 to defer (a NET_REQUEST
 * event goes to the dispatcher, which later calls net_reply/net_reply_error);
 * or a negative errno to NAK. */
typedef int (*net_lookup_fn)(void *ctx, uint32_t peer, uint32_t sample, uint64_t len,
			     const void **src);

struct net_opts {
	const char *provider;      /* e.g. "tcp;ofi_rxm", "sockets", "verbs;ofi_rxm" */
	uint32_t node, nnodes;
	void *region;              /* memory that fetches land in / replies come from */
	size_t region_len;
	net_lookup_fn lookup;
	void *lookup_ctx;
	double timeout_s;          /* per fetch */
	double suspect_s;          /* how long a timed-out peer is skipped */
	bool no_bundles;           /* every sample in a message of its own (net_bundle.c) */
};

/* Open the endpoint. On success *addr (malloc'd, *addrlen bytes) is this
 * daemon's address to exchange with the others. Returns 0 or -errno/-FI_*
 * with a message in err. */
int net_create(struct net **out, const struct net_opts *o, void **addr, size_t *addrlen,
	       char *err, size_t errlen);
/* Insert every node's address (nnodes * addrlen bytes, node order) and start
 * the network thread. */
int net_start(struct net *n, const void *addrs, size_t addrlen, char *err, size_t errlen);
/* Stop the thread and close the endpoint. Operations still pending end
 * without events; when it returns the provider no longer touches any dst or
 * src. Never waits for peers. */
void net_destroy(struct net *n);

/* Readable when events wait. */
int net_event_fd(const struct net *n);
/* The network thread, once net_start succeeded (for CPU placement).
 * Returns 0 and sets *out, or -1 before the start. */
int net_thread(const struct net *n, pthread_t *out);
/* Take every pending event (a list; free each with net_event_free). */
struct net_event *net_take_events(struct net *n);
void net_event_free(struct net_event *e);

/* Ask `peer` for `len` bytes of `sample` into dst. Completes with a
 * NET_FETCH_DONE event carrying `user`. */
void net_fetch(struct net *n, uint32_t peer, uint32_t sample, void *dst, uint64_t len, void *user);
/* Answer a deferred NET_REQUEST. src must stay valid until the
 * NET_REPLY_DONE event carrying `user`. */
void net_reply(struct net *n, uint32_t peer, uint64_t req_id, const void *src, uint64_t len,
	       void *user);
void net_reply_error(struct net *n, uint32_t peer, uint64_t req_id, int error);

/* Counters (thread-safe snapshot). fetches counts finished fetches, failed
 * ones included (fetch_failed of them, fetch_timeouts of those with
 * -ETIMEDOUT); fetch_bytes and fetch_seconds cover the successful ones, so
 * their mean latency is fetch_seconds / (fetches - fetch_failed). served
 * counts sends that completed (lookup and net_reply alike). */
struct net_stats {
	uint64_t fetches, fetch_bytes, fetch_failed, fetch_timeouts;
	uint64_t served, served_bytes, naks;
	double fetch_seconds;        /* sum of fetch latencies */
	uint64_t bad_msgs;           /* malformed control messages dropped */
};
void net_get_stats(struct net *n, struct net_stats *s);
/* Is the peer currently skipped after a timeout? */
int net_peer_suspect(struct net *n, uint32_t peer);

#endif /* SEER_NET_H */
