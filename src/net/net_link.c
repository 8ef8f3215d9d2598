/* A blocking point-to-point libfabric channel for one thread: see
 * net_link.h for the contract (threads, failure). The endpoint is set up
 * as the data plane's (net_setup.c: RDM, FI_MSG | FI_TAGGED, FI_CONTEXT2,
 * FI_THREAD_DOMAIN, the same mr_mode), in a domain of its own. */
#define _GNU_SOURCE
#include "net_link.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "../util/util.h"

#define LINK_DEFAULT_PROVIDER "tcp;ofi_rxm"
#define LINK_PEERS 16           /* addresses remembered (more are inserted uncached) */
#define LINK_ADDR_MAX 256

struct net_link {
	char prov[64];
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_ep *ep;
	struct fid_mr *smr, *rmr;
	void *sbuf, *rbuf, *sdesc, *rdesc;
	size_t slen, rlen;
	bool sread;                /* the CQ has a wait object: fi_cq_sread */
	/* the one send and the one receive that can be outstanding */
	struct fi_context2 sctx, rctx;
	bool sbusy;                /* posted, not completed: sbuf is the provider's */
	int sres;
	bool rposted, rdone;
	int rres;
	size_t rn;
	uint64_t rtag;
	struct { uint8_t a[LINK_ADDR_MAX]; size_t len; fi_addr_t fa; } peers[LINK_PEERS];
	size_t npeers;
};

static int link_failed(const struct net_link *l, int rc, const char *what, char *err,
		       size_t errlen)
{
	return err_fmt(err, errlen, rc < 0 ? rc : -rc, "libfabric provider '%s': %s failed: %s",
		       l->prov, what, fi_strerror(rc < 0 ? -rc : rc));
}

static int close_fid(struct fid *f, const char *what)
{
	if (!f)
		return 0;
	int r = fi_close(f);
	if (r == -FI_EBUSY)
		log_info("net link: the provider still holds resources of an unfinished transfer "
			 "(closing the %s)", what);
	else if (r)
		log_warn("net link: closing the %s: %s", what, fi_strerror(-r));
	return r;
}

void net_link_close(struct net_link *l)
{
	if (!l)
		return;
	/* closing the endpoint drops what is posted; a registration or domain
	 * the provider still holds keeps its memory (returned at exit) */
	close_fid(l->ep ? &l->ep->fid : NULL, "endpoint");
	close_fid(l->av ? &l->av->fid : NULL, "address vector");
	close_fid(l->cq ? &l->cq->fid : NULL, "completion queue");
	bool busy = close_fid(l->smr ? &l->smr->fid : NULL, "send buffer registration") != 0;
	busy |= close_fid(l->rmr ? &l->rmr->fid : NULL, "receive buffer registration") != 0;
	busy |= close_fid(l->domain ? &l->domain->fid : NULL, "domain") != 0;
	close_fid(l->fabric ? &l->fabric->fid : NULL, "fabric");
	if (l->info)
		fi_freeinfo(l->info);
	if (!busy) {
		free(l->sbuf);
		free(l->rbuf);
	}
	free(l);
}

static int reg_buf(struct net_link *l, size_t len, uint64_t key, void **buf, struct fid_mr **mr,
		   void **desc, char *err, size_t errlen)
{
	*buf = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
	if (!*buf)
		abort();
	memset(*buf, 0, len);
	/* keys are ignored under FI_MR_PROV_KEY, else they must differ */
	int rc = fi_mr_reg(l->domain, *buf, len, FI_SEND | FI_RECV, 0, key, 0, mr, NULL);
	if (rc == 0) {
		*desc = fi_mr_desc(*mr);
		return 0;
	}
	*mr = NULL;
	*desc = NULL;
	if (l->info->domain_attr->mr_mode & FI_MR_LOCAL)
		return link_failed(l, rc, "fi_mr_reg (bounce buffer)", err, errlen);
	return 0; /* the provider does not need it */
}

struct net_link *net_link_open(const char *provider, size_t send_len, size_t recv_len,
			       char *err, size_t errlen)
{
	struct net_link *l = xcalloc(1, sizeof(*l));
	str_copy(l->prov, sizeof(l->prov), provider && *provider ? provider : LINK_DEFAULT_PROVIDER);
	l->slen = MAX(send_len, (size_t)64);
	l->rlen = MAX(recv_len, (size_t)64);
	struct fi_info *h = fi_allocinfo();
	if (!h)
		abort();
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_TAGGED;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
	h->fabric_attr->prov_name = xstrdup(l->prov);
	int rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, h,
			    &l->info);
	fi_freeinfo(h);
	if (rc) {
		const char *env = getenv("FI_PROVIDER");
		err_fmt(err, errlen, rc, "libfabric provider '%s' not available here (fi_getinfo: "
			"%s): set [net] provider%s%s%s", l->prov, fi_strerror(-rc),
			env ? " (FI_PROVIDER=" : "", env ? env : "", env ? " is set)" : "");
		goto fail;
	}
	if ((size_t)l->info->ep_attr->max_msg_size < MAX(l->slen, l->rlen)) {
		err_fmt(err, errlen, -EMSGSIZE, "libfabric provider '%s' moves at most %zu bytes "
			"per message, the link needs %zu: choose another [net] provider", l->prov,
			(size_t)l->info->ep_attr->max_msg_size, MAX(l->slen, l->rlen));
		goto fail;
	}
	if ((rc = fi_fabric(l->info->fabric_attr, &l->fabric, NULL))) {
		link_failed(l, rc, "fi_fabric", err, errlen);
		goto fail;
	}
	if ((rc = fi_domain(l->fabric, l->info, &l->domain, NULL))) {
		link_failed(l, rc, "fi_domain", err, errlen);
		goto fail;
	}
	struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC,
				  .size = 64 };
	l->sread = true;
	if (fi_cq_open(l->domain, &cqa, &l->cq, NULL)) {
		cqa.wait_obj = FI_WAIT_NONE; /* polled, with short sleeps */
		l->sread = false;
		if ((rc = fi_cq_open(l->domain, &cqa, &l->cq, NULL))) {
			link_failed(l, rc, "fi_cq_open", err, errlen);
			goto fail;
		}
	}
	struct fi_av_attr ava = { .type = FI_AV_TABLE, .count = LINK_PEERS };
	if ((rc = fi_av_open(l->domain, &ava, &l->av, NULL))) {
		link_failed(l, rc, "fi_av_open", err, errlen);
		goto fail;
	}
	if ((rc = fi_endpoint(l->domain, l->info, &l->ep, NULL))) {
		link_failed(l, rc, "fi_endpoint", err, errlen);
		goto fail;
	}
	if ((rc = fi_ep_bind(l->ep, &l->av->fid, 0)) ||
	    (rc = fi_ep_bind(l->ep, &l->cq->fid, FI_TRANSMIT | FI_RECV)) || (rc = fi_enable(l->ep))) {
		link_failed(l, rc, "fi_ep_bind/fi_enable", err, errlen);
		goto fail;
	}
	if (reg_buf(l, l->slen, 1, &l->sbuf, &l->smr, &l->sdesc, err, errlen) ||
	    reg_buf(l, l->rlen, 2, &l->rbuf, &l->rmr, &l->rdesc, err, errlen))
		goto fail;
	return l;
fail:
	net_link_close(l);
	return NULL;
}

const char *net_link_provider(const struct net_link *l)
{
	return l->info && l->info->fabric_attr->prov_name ? l->info->fabric_attr->prov_name
							  : l->prov;
}

int net_link_addr(const struct net_link *l, void *buf, size_t cap, size_t *len)
{
	size_t n = cap;
	int rc = fi_getname(&l->ep->fid, buf, &n);
	*len = n;
	if (rc == -FI_ETOOSMALL)
		return -ENOSPC;
	return rc ? (rc < 0 ? rc : -rc) : 0;
}

int net_link_peer(struct net_link *l, const void *addr, size_t len, uint64_t *peer, char *err,
		  size_t errlen)
{
	for (size_t i = 0; i < l->npeers; i++)
		if (l->peers[i].len == len && memcmp(l->peers[i].a, addr, len) == 0) {
			*peer = l->peers[i].fa;
			return 0;
		}
	fi_addr_t fa = FI_ADDR_UNSPEC;
	int k = fi_av_insert(l->av, addr, 1, &fa, 0, NULL);
	if (k != 1)
		return err_fmt(err, errlen, k < 0 ? k : -EINVAL, "libfabric provider '%s': "
			       "fi_av_insert of a peer's address failed (%s): every seerd must use "
			       "the same provider", l->prov, k < 0 ? fi_strerror(-k) : "bad address");
	if (l->npeers < LINK_PEERS && len <= LINK_ADDR_MAX) {
		memcpy(l->peers[l->npeers].a, addr, len);
		l->peers[l->npeers].len = len;
		l->peers[l->npeers++].fa = fa;
	}
	*peer = fa;
	return 0;
}

void *net_link_send_buf(struct net_link *l)
{
	return l->sbuf;
}

size_t net_link_send_len(const struct net_link *l)
{
	return l->slen;
}

/* Processes one completion, waiting until `deadline` (now_s() clock): 0, or
 * -ETIMEDOUT, or a failure of the queue itself. */
static int wait_one(struct net_link *l, double deadline)
{
	struct fi_cq_tagged_entry e;
	for (;;) {
		double left = deadline - now_s();
		ssize_t r;
		if (l->sread && left > 0)
			r = fi_cq_sread(l->cq, &e, 1, NULL, (int)MIN(left * 1000.0 + 1, 100.0));
		else
			r = fi_cq_read(l->cq, &e, 1);
		if (r == 1) {
			if (e.op_context == &l->sctx) {
				l->sbusy = false;
				l->sres = 0;
			} else if (e.op_context == &l->rctx) {
				l->rdone = true;
				l->rres = 0;
				l->rn = e.len;
				l->rtag = e.tag;
			}
			return 0;
		}
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry ee = { 0 };
			if (fi_cq_readerr(l->cq, &ee, 0) != 1) {
				/* the error entry could not be read: no spin past the deadline */
				if (now_s() >= deadline)
					return -ETIMEDOUT;
				continue;
			}
			int er = ee.err ? -(int)ee.err : -EIO;
			if (ee.err == FI_ETRUNC)
				er = -EMSGSIZE;
			if (ee.err == FI_ECANCELED)
				er = -ECANCELED;
			if (ee.op_context == &l->sctx) {
				l->sbusy = false;
				l->sres = er;
			} else if (ee.op_context == &l->rctx) {
				l->rdone = true;
				l->rres = er;
				l->rn = 0;
				l->rtag = ee.tag;
			}
			return 0;
		}
		if (r != -FI_EAGAIN && r != -FI_EINTR && r < 0)
			return (int)r;
		if (now_s() >= deadline)
			return -ETIMEDOUT;
		if (!l->sread)
			nanosleep(&(struct timespec){ .tv_nsec = 100000 }, NULL);
	}
}

int net_link_send_ready(struct net_link *l, double timeout_s)
{
	double deadline = now_s() + timeout_s;
	while (l->sbusy) {
		int rc = wait_one(l, deadline);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* The provider's queue is full (-FI_EAGAIN): make progress for a moment.
 * 0 to try again, -ETIMEDOUT past the deadline, or the provider's error. */
static int queue_full_wait(struct net_link *l, double deadline)
{
	int rc = wait_one(l, MIN(deadline, now_s() + 0.001));
	if (rc != 0 && rc != -ETIMEDOUT)
		return rc;
	return now_s() >= deadline ? -ETIMEDOUT : 0;
}

int net_link_send(struct net_link *l, uint64_t peer, uint64_t tag, size_t n, double timeout_s)
{
	double deadline = now_s() + timeout_s;
	if (n > l->slen)
		return -EMSGSIZE;
	int rc;
	/* an earlier send the provider could not cancel still owns the buffer */
	while (l->sbusy)
		if ((rc = wait_one(l, deadline)) != 0)
			return rc;
	for (;;) {
		ssize_t r = fi_tsend(l->ep, l->sbuf, n, l->sdesc, peer, tag, &l->sctx);
		if (r == 0)
			break;
		if (r != -FI_EAGAIN)
			return (int)r;
		if ((rc = queue_full_wait(l, deadline)) != 0)
			return rc;
	}
	l->sbusy = true;
	while (l->sbusy) {
		rc = wait_one(l, deadline);
		if (rc == -ETIMEDOUT) {
			/* cancelled: its completion (if the provider can) frees the buffer */
			fi_cancel(&l->ep->fid, &l->sctx);
			wait_one(l, now_s() + 0.01);
			return -ETIMEDOUT;
		}
		if (rc != 0)
			return rc;
	}
	return l->sres;
}

int net_link_recv(struct net_link *l, const void **buf, size_t *n, uint64_t *tag,
		  double timeout_s)
{
	double deadline = now_s() + timeout_s;
	int rc;
	while (!l->rposted) {
		ssize_t r = fi_trecv(l->ep, l->rbuf, l->rlen, l->rdesc, FI_ADDR_UNSPEC, 0, ~UINT64_C(0),
				     &l->rctx);
		if (r == 0) {
			l->rposted = true;
			l->rdone = false;
			break;
		}
		if (r != -FI_EAGAIN)
			return (int)r;
		if ((rc = queue_full_wait(l, deadline)) != 0)
			return rc;
	}
	while (!l->rdone)
		if ((rc = wait_one(l, deadline)) != 0)
			return rc; /* -ETIMEDOUT: the receive stays posted */
	l->rposted = false;
	l->rdone = false;
	*buf = l->rbuf;
	*n = l->rn;
	*tag = l->rtag;
	return l->rres;
}
