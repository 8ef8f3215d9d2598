/* Warming the data plane: one small tagged message to every other node when
 * the network thread starts (docs/net.md, "Warm-up").
 *
 * ofi_rxm connects to a peer at the first message sent to it, and grows its
 * transmit pool (1,024 eager buffers of ~16.9 KiB, zeroed: 17.3 MB) at the
 * first message longer than the inject size. Left to the job, both happen in
 * the first epoch, when the first samples go to a peer: measured on the
 * bert-lustre benchmark (a uprobe on libfabric's pool growth, perf), the
 * connection was made ~50 ms and the pool grown ~160 ms into the cold epoch,
 * and memset + page faults under fi_tsend were ~30% of seerd's CPU samples
 * in it, on the network thread, ahead of the samples. Here they happen
 * while the daemons wait for their trainers: every node posts a receive per
 * other node and sends each one WARM_LEN bytes with tag WARM_TAG (bit 63
 * clear: no request id has it), whose contents nobody reads.
 *
 * Network thread only (net_warm_post, net_warm_done); net_warm_init before
 * net_start, net_warm_free after the endpoint is closed. Failure: warming is
 * best effort -- a send or receive that fails is logged at debug level and
 * forgotten (the job's own messages connect as before); providers that need
 * registered local buffers are not warmed. */
#define _GNU_SOURCE
#include "net_int.h"

#include <stdlib.h>

#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "../util/util.h"

#define WARM_TAG UINT64_C(1)
/* Longer than any provider's inject size seen (ofi_rxm over tcp: 64 B), so
 * the send takes an eager buffer: it is the pool that must grow. */
#define WARM_LEN 1024
/* The thread polls briefly while warming (progress of the connection), but
 * not for longer than this: a peer that never answers is the job's problem,
 * found by its own timeouts. */
#define WARM_BUSY_NS (UINT64_C(5) * 1000000000u)

void net_warm_init(struct net *n)
{
	uint32_t peers = n->o.nnodes > 0 ? n->o.nnodes - 1 : 0;
	if (peers == 0 || n->mr_local)
		return;
	n->wu.warm = xcalloc(2 * (size_t)peers, sizeof(*n->wu.warm));
	n->wu.warm_buf = xcalloc(2 * (size_t)peers, WARM_LEN); /* receives, then the send */
	n->wu.warm_n = peers;
	for (uint32_t i = 0; i < 2 * peers; i++)
		n->wu.warm[i].kind = CTX_WARM;
}

/* Post what is left: the receives first (a peer's message may come at
 * once), then one send per other node. 1 when something was posted. */
int net_warm_post(struct net *n, uint64_t now)
{
	if (n->wu.warm_posted == 2 * n->wu.warm_n)
		return 0;
	if (!n->wu.warm_t0)
		n->wu.warm_t0 = now;
	int posted = 0;
	while (n->wu.warm_posted < n->wu.warm_n) {
		uint32_t i = n->wu.warm_posted;
		ssize_t r = fi_trecv(n->ep, n->wu.warm_buf + (size_t)i * WARM_LEN, WARM_LEN, NULL,
				     FI_ADDR_UNSPEC, WARM_TAG, 0, &n->wu.warm[i].fi);
		if (r == -FI_EAGAIN)
			return posted;
		n->wu.warm_posted++;
		if (r != 0) {
			log_debug("net: warm-up receive: %s", fi_strerror((int)-r));
			continue;
		}
		n->wu.warm_out++;
		posted = 1;
	}
	while (n->wu.warm_posted < 2 * n->wu.warm_n) {
		uint32_t k = n->wu.warm_posted - n->wu.warm_n;
		uint32_t peer = k < n->o.node ? k : k + 1;
		ssize_t r = fi_tsend(n->ep, n->wu.warm_buf + (size_t)n->wu.warm_n * WARM_LEN, WARM_LEN,
				     NULL, peer, WARM_TAG, &n->wu.warm[n->wu.warm_posted].fi);
		if (r == -FI_EAGAIN)
			return posted;
		n->wu.warm_posted++;
		if (r != 0) {
			log_debug("net: warm-up send to node %u: %s", peer, fi_strerror((int)-r));
			continue;
		}
		n->wu.warm_out++;
		posted = 1;
	}
	return posted;
}

/* A warm-up operation ended (err 0, or the libfabric error). */
void net_warm_done(struct net *n, int err)
{
	if (n->wu.warm_out > 0)
		n->wu.warm_out--;
	if (err && !(err == FI_ECANCELED && atomic_load(&n->stop)))
		log_debug("net: warm-up message: %s", fi_strerror(err));
	if (n->wu.warm_out == 0 && n->wu.warm_posted == 2 * n->wu.warm_n)
		log_debug("net: warm-up with %u node(s) done in %.1f ms", n->wu.warm_n,
			  (double)(now_ns() - n->wu.warm_t0) / 1e6);
}

/* Operations still out, and not for too long: the thread keeps polling. */
bool net_warm_busy(const struct net *n, uint64_t now)
{
	return (n->wu.warm_out > 0 || n->wu.warm_posted < 2 * n->wu.warm_n) &&
	       now - n->wu.warm_t0 < WARM_BUSY_NS;
}

void net_warm_free(struct net *n)
{
	free(n->wu.warm);
	free(n->wu.warm_buf);
	n->wu.warm = NULL;
	n->wu.warm_buf = NULL;
}
