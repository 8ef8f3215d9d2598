/* A small blocking point-to-point channel over libfabric for one thread
 * (the checkpoint stage's peer copies, docs/checkpoint.md): its own fabric,
 * domain (FI_THREAD_DOMAIN), completion queue, address vector and RDM
 * endpoint on [net] provider, tagged messages only, and two registered
 * bounce buffers (one to send from, one to receive into), so providers that
 * need FI_MR_LOCAL work. The data plane (net.h) is not involved.
 *
 * Threads: every call on one link from one thread (or under the caller's
 * lock). Failure: functions return 0 or a negative errno (-ETIMEDOUT when
 * the time ran out) and, where they take `err`, a message naming the
 * provider and the failing call. A send that times out is cancelled
 * (fi_cancel); if the provider cannot cancel it, its buffer stays in use
 * and the next send first waits for it (up to its own timeout). One receive
 * stays posted across net_link_recv calls that time out: a message that
 * arrives later is returned by the next call. */
#ifndef SEER_NET_LINK_H
#define SEER_NET_LINK_H

#include <stddef.h>
#include <stdint.h>

struct net_link;

/* Opens a link on `provider` (NULL or "": "tcp;ofi_rxm") with a send buffer
 * of send_len and a receive buffer of recv_len bytes (each at least 64).
 * NULL with err on failure. */
struct net_link *net_link_open(const char *provider, size_t send_len, size_t recv_len,
			       char *err, size_t errlen);
/* Closes the endpoint (what is posted is dropped), then frees. NULL is fine. */
void net_link_close(struct net_link *l);
/* The provider's name ("tcp;ofi_rxm"), valid until close. */
const char *net_link_provider(const struct net_link *l);
/* This link's address: *len bytes copied into buf (at most cap): 0, or
 * -ENOSPC when cap is too small (*len says how much is needed). */
int net_link_addr(const struct net_link *l, void *buf, size_t cap, size_t *len);
/* The peer at `addr` (len bytes, from its net_link_addr): *peer to send to.
 * The same address again gives the same *peer. 0 or -errno with err. */
int net_link_peer(struct net_link *l, const void *addr, size_t len, uint64_t *peer, char *err,
		  size_t errlen);
/* Waits up to timeout_s until the send buffer is free again (a send that
 * timed out and could not be cancelled still owns it): 0 or -ETIMEDOUT. */
int net_link_send_ready(struct net_link *l, double timeout_s);
/* The send buffer (send_len bytes, registered): once net_link_send_ready
 * (or the last net_link_send) returned 0, fill it, then net_link_send. */
void *net_link_send_buf(struct net_link *l);
size_t net_link_send_len(const struct net_link *l);
/* Sends the first n bytes of the send buffer to `peer` with `tag` and waits
 * up to timeout_s for the provider to complete it (for ofi_rxm's large
 * messages: the receiver took them). 0, -ETIMEDOUT, or the provider's error
 * as -errno. */
int net_link_send(struct net_link *l, uint64_t peer, uint64_t tag, size_t n, double timeout_s);
/* The next message from anyone, any tag, into the receive buffer: waits up
 * to timeout_s (0: only what has arrived). 0 with *buf (valid until the next
 * net_link_recv), *n, *tag; -ETIMEDOUT; -EMSGSIZE (a message longer than the
 * receive buffer: dropped); or the provider's error. */
int net_link_recv(struct net_link *l, const void **buf, size_t *n, uint64_t *tag,
		  double timeout_s);

#endif /* SEER_NET_LINK_H */
