/* Setting the data plane up and tearing it down (see net_int.h for the file
 * map): the provider (fi_getinfo, with a message naming what would work when
 * it is missing), fabric, domain, completion queue, address vector and
 * endpoint, the memory registrations, this node's address, the peers'
 * addresses and the network thread; and their release in reverse order.
 *
 * Threads: the dispatcher, before net_start and after the thread stopped
 * (net_destroy joins it first). Failure: net_create and net_start return
 * -errno or -FI_* with a message naming the provider and the failing call;
 * net_create frees what it made; net_destroy never waits for peers (closing
 * the endpoint drops every posted operation; their events are not sent). */
#define _GNU_SOURCE
#include "net_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include "../util/util.h"

#define DEFAULT_PROVIDER "tcp;ofi_rxm"
#define DEFAULT_TIMEOUT_S 2.0
#define DEFAULT_SUSPECT_S 30.0
#define CTRL_SLOTS_MAX 256u
#define NET_MAX_LEN (UINT64_C(1) << 32) /* largest sample we move */

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
	for (struct net_event *e = (struct net_event *)n->events.head, *next; e; e = next) {
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
	close_fid(n->bd.bmem_mr ? &n->bd.bmem_mr->fid : NULL, "bundle memory registration");
	close_fid(n->domain ? &n->domain->fid : NULL, "domain");
	close_fid(n->fabric ? &n->fabric->fid : NULL, "fabric");
	if (n->info)
		fi_freeinfo(n->info);
	free_ops(n);
	net_bundle_free(n);
	net_warm_free(n);
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
	return err_fmt(err, errlen, rc < 0 ? rc : -rc, "libfabric provider '%s': %s failed: %s", n->prov,
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
	net_hmap_init(&n->fetch_ids);
	net_hmap_init(&n->deferred_ids);
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
		return err_fmt(err, errlen, -ENOMEM, "net: out of memory");
	int rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, hints,
			    &n->info);
	fi_freeinfo(hints);
	if (rc) {
		char avail[512];
		list_providers(avail, sizeof(avail));
		const char *env = getenv("FI_PROVIDER");
		return err_fmt(err, errlen, rc,
			    "libfabric provider '%s' not available here (fi_getinfo: %s): set [net] "
			    "provider or FI_PROVIDER to one of: %s%s%s%s",
			    n->prov, fi_strerror(-rc), avail, env ? " (FI_PROVIDER=" : "",
			    env ? env : "", env ? " is set and limits this list)" : "");
	}
	if (n->info->tx_attr->inject_size < sizeof(struct wire_msg))
		return err_fmt(err, errlen, -ENOTSUP,
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
		return err_fmt(err, errlen, rc,
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
		return err_fmt(err, errlen, -errno, "net: eventfd: %s", strerror(errno));
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
		return err_fmt(err, errlen, -EINVAL,
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
		rc = net_bundle_setup(n, err, errlen);
	if (rc == 0)
		rc = local_address(n, addr, addrlen, err, errlen);
	if (rc != 0) {
		net_destroy(n);
		return rc;
	}
	*out = n;
	log_debug("net: node %u on '%s' (%s, domain %s), mr_mode %#x, inject %zu, %u control slots, "
		  "bundles %s",
		  n->o.node, n->info->fabric_attr->prov_name, n->info->fabric_attr->name,
		  n->info->domain_attr->name, (unsigned)n->info->domain_attr->mr_mode,
		  n->info->tx_attr->inject_size, n->nslots, n->bd.bundles ? "on" : "off");
	return 0;
}

int net_start(struct net *n, const void *addrs, size_t addrlen, char *err, size_t errlen)
{
	if (n->started)
		return err_fmt(err, errlen, -EALREADY, "net: already started");
	if (!addrs || addrlen == 0)
		return err_fmt(err, errlen, -EINVAL, "net: no addresses");
	fi_addr_t *fa = xcalloc(n->o.nnodes, sizeof(*fa));
	int k = fi_av_insert(n->av, addrs, n->o.nnodes, fa, 0, NULL);
	int rc = 0;
	if (k != (int)n->o.nnodes) {
		rc = err_fmt(err, errlen, k < 0 ? k : -EINVAL,
			  "libfabric provider '%s': %d of %u node addresses inserted (%s); every "
			  "daemon must use the same provider and address family",
			  n->prov, k < 0 ? 0 : k, n->o.nnodes, k < 0 ? fi_strerror(-k) : "bad address");
	} else {
		for (uint32_t i = 0; i < n->o.nnodes; i++) {
			if (fa[i] != i) {
				rc = err_fmt(err, errlen, -EPROTO,
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
		net_slot_post(n, i);
	net_bundle_start(n);
	net_warm_init(n);
	n->last_stuck_check = now_ns();
	rc = pthread_create(&n->thread, NULL, net_thread_main, n);
	if (rc)
		return err_fmt(err, errlen, -rc, "net: starting the network thread: %s", strerror(rc));
	pthread_setname_np(n->thread, "seer-net");
	n->started = true;
	return 0;
}
