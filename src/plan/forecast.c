/* forecast: see forecast.h. Called from tools (seer-plan, seer-sim) and, for
 * a running job, from the daemon's forecast thread (fcast.c); nothing here is shared
 * between calls except a forecast_orders the caller passes in. Failure: a negative
 * errno, nothing leaked, *out empty. */
#include "forecast.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"

/* ---- epoch orders ------------------------------------------------------------ */

int forecast_orders_init(struct forecast_orders *o, const struct sampler_shape *sh, uint64_t first_epoch,
		   uint64_t epochs)
{
	memset(o, 0, sizeof(*o));
	o->sh = sh;
	o->first = first_epoch;
	o->count = epochs;
	o->perm = calloc(epochs ? epochs : 1, sizeof(*o->perm));
	return o->perm ? 0 : -ENOMEM;
}

void forecast_orders_free(struct forecast_orders *o)
{
	for (uint64_t i = 0; o->perm && i < o->count; i++)
		free(o->perm[i]);
	free(o->perm);
	memset(o, 0, sizeof(*o));
}

const uint32_t *forecast_order(struct forecast_orders *o, uint64_t epoch)
{
	if (epoch < o->first || epoch - o->first >= o->count)
		return NULL;
	uint32_t **slot = &o->perm[epoch - o->first];
	if (!*slot) {
		const struct sampler_shape *sh = o->sh;
		*slot = malloc(sh->n * sizeof(uint32_t));
		if (!*slot) {
			o->failed = true;
			return NULL;
		}
		sampler_epoch_order(sh, epoch, *slot);
	}
	return *slot;
}

static const uint32_t *orders_get(void *ctx, uint64_t epoch)
{
	return forecast_order(ctx, epoch);
}

struct plan_orders forecast_orders_provider(struct forecast_orders *o)
{
	return (struct plan_orders){ orders_get, o };
}

/* ---- rates ------------------------------------------------------------------- */

double forecast_pfs_bw(const struct forecast_rates *r, double clients)
{
	if (r->npfs == 0)
		return r->pfs_bw;
	const double *x = r->pfs_clients, *y = r->pfs_curve;
	if (clients <= x[0])
		return y[0];
	for (uint32_t i = 1; i < r->npfs; i++)
		if (clients <= x[i])
			return y[i - 1] + (clients - x[i - 1]) * (y[i] - y[i - 1]) / (x[i] - x[i - 1]);
	return y[r->npfs - 1];
}

const char *forecast_term_name(enum forecast_term t)
{
	static const char *const names[FORECAST_NTERMS] = { "compute", "pfs", "net", "nvme", "decode" };
	return t < FORECAST_NTERMS ? names[t] : "?";
}

/* ---- the run ------------------------------------------------------------------- */

struct run {
	const struct forecast_job *job;
	const struct forecast_rates *r;
	struct forecast_result *out;
	struct plan p;
	struct forecast_orders own_orders;
	struct forecast_orders *orders;
	uint32_t *ranks;      /* ranks of the node being walked */
	uint32_t *buf;        /* its reads of one epoch ... */
	uint64_t *pos;        /* ... and their positions */
	/* replica fills still to do, per node and due epoch (node * E + d) */
	uint64_t *pend_in;    /* bytes node k must receive before epoch d */
	uint64_t *pend_ram;   /* ... of which into its RAM */
	uint64_t *pend_out;   /* bytes owner k must send for epoch-d replicas */
	uint64_t *pend_onv;   /* ... of which read from its NVMe */
	uint64_t *prop;       /* fills proposed this epoch, node * E + d */
	double *oload;        /* per owner: bytes those proposals ask of it */
};

static inline struct forecast_bytes *nb(const struct run *x, uint64_t e, uint32_t k)
{
	return &x->out->node[e * x->job->nnodes + k];
}

static int job_check(const struct forecast_job *j)
{
	if (!j || !j->len || !j->sh || !j->rank_node || !j->cap || j->epochs == 0 ||
	    j->sh->n == 0 || j->sh->per_rank == 0)
		return -EINVAL;
	return plan_check_nodes(j->sh, j->rank_node, j->nnodes);
}

/* One read of sample s (position pos of epoch e's padded order) by node k. */
static void account(struct run *x, struct plan_node *nv, uint64_t e, uint32_t k, uint64_t pos,
		    uint32_t s)
{
	const struct plan *p = &x->p;
	uint64_t len = x->job->len[s];
	struct forecast_bytes *b = nb(x, e, k);
	b->reads++;
	b->demand += len;
	if (pos < x->job->sh->n)
		x->out->ep[e].distinct += len;
	if (e == 0 && pos < x->job->sh->n) {
		/* the job's first read of s: from the PFS; it loads the owner
		 * when the owner is k, else the owner reads it too (a spill) */
		b->pfs += len;
		if (p->tier[s] != PLAN_NONE && p->owner[s] != k)
			nb(x, e, p->owner[s])->pfs_load += len;
		return;
	}
	struct plan_loc l = plan_locate(p, e > 0 ? nv : NULL, k, s);
	if (l.tier == PLAN_RAM) {
		b->ram += len;
	} else if (l.tier == PLAN_NVME) {
		b->nvme += len;
		b->nvme_read += len;
	} else if (p->tier[s] == PLAN_NONE) {
		b->pfs += len;
		return;
	} else {
		struct forecast_bytes *o = nb(x, e, p->owner[s]);
		b->peer_in += len;
		o->peer_out += len;
		if (p->tier[s] == PLAN_NVME)
			o->nvme_read += len;
		return;
	}
	if (l.replica)
		b->repl += len;
}

/* Node k: its replica set, its reads of every epoch, and its fills by due
 * epoch. */
static int walk_node(struct run *x, uint32_t k)
{
	const struct forecast_job *j = x->job;
	const struct sampler_shape *sh = j->sh;
	const uint64_t E = j->epochs;
	struct plan_node nv;
	struct plan_orders prov = forecast_orders_provider(x->orders);
	int rc = plan_node_build(&nv, &x->p, NULL, j->len, sh, 0, E, j->rank_node, k, &j->cap[k],
				 &j->repl, &prov);
	if (rc)
		return rc;
	struct forecast_result *out = x->out;
	out->repl_bytes += nv.repl_bytes;
	out->repl_count += nv.nrepl;
	out->repl_min = k == 0 ? nv.repl_bytes : MIN(out->repl_min, nv.repl_bytes);
	out->repl_max = MAX(out->repl_max, nv.repl_bytes);
	for (uint64_t i = 0; i < nv.nrepl; i++) {
		uint64_t d, step, len = j->len[nv.smp[i]];
		plan_node_due(&nv, i, &d, &step);
		uint32_t o = x->p.owner[nv.smp[i]];
		x->pend_in[(uint64_t)k * E + d] += len;
		if (nv.tier[i] == PLAN_RAM)
			x->pend_ram[(uint64_t)k * E + d] += len;
		x->pend_out[(uint64_t)o * E + d] += len;
		if (x->p.tier[nv.smp[i]] == PLAN_NVME)
			x->pend_onv[(uint64_t)o * E + d] += len;
	}
	uint32_t nr = 0;
	for (uint32_t r = 0; r < sh->world; r++)
		if (j->rank_node[r] == k)
			x->ranks[nr++] = r;
	for (uint64_t e = 0; e < E && rc == 0; e++) {
		const uint32_t *order = forecast_order(x->orders, e);
		if (!order) {
			rc = -ENOMEM;
			break;
		}
		uint64_t m = plan_node_reads(sh, order, x->ranks, nr, x->buf, x->pos);
		for (uint64_t i = 0; i < m; i++) {
			if (i + 16 < m) {
				uint32_t a = x->buf[i + 16];
				__builtin_prefetch(&x->p.tier[a]);
				__builtin_prefetch(&x->p.owner[a]);
				__builtin_prefetch(&j->len[a]);
				__builtin_prefetch(&nv.idx[a]);
			}
			account(x, &nv, e, k, x->pos[i], x->buf[i]);
		}
	}
	plan_node_free(&nv);
	return rc;
}

/* Planned samples no rank reads in epoch 0 (drop_last tails): their owners
 * load them from the PFS then. */
static int unread_loads(struct run *x)
{
	const struct sampler_shape *sh = x->job->sh;
	const uint32_t *order = forecast_order(x->orders, 0);
	if (!order)
		return -ENOMEM;
	for (uint64_t pos = MIN(sh->n, sh->per_rank * sh->world); pos < sh->n; pos++) {
		uint32_t s = order[pos];
		if (x->p.tier[s] != PLAN_NONE)
			nb(x, 0, x->p.owner[s])->pfs_load += x->job->len[s];
	}
	return 0;
}

/* Terms of epoch e from its per-node bytes; fills the sums and maxima. */
static void epoch_times(struct run *x, uint64_t e)
{
	const struct forecast_rates *r = x->r;
	struct forecast_epoch *ep = &x->out->ep[e];
	uint32_t K = x->job->nnodes, readers = 0;
	uint64_t net = 0, nvme = 0, reads = 0;
	memset(&ep->sum, 0, sizeof(ep->sum));
	memset(&ep->max, 0, sizeof(ep->max));
	for (uint32_t k = 0; k < K; k++) {
		const struct forecast_bytes *b = nb(x, e, k);
		const uint64_t *f = &b->reads, *end = (const uint64_t *)(b + 1);
		uint64_t *s = &ep->sum.reads, *m = &ep->max.reads;
		for (; f < end; f++, s++, m++) {
			*s += *f;
			*m = MAX(*m, *f);
		}
		net = MAX(net, MAX(b->peer_in + b->fill_in, b->peer_out + b->fill_out));
		nvme = MAX(nvme, b->nvme_read);
		reads = MAX(reads, b->reads);
		readers += b->pfs + b->pfs_load > 0;
	}
	ep->net_max = net;
	double pfs_bw = forecast_pfs_bw(r, readers ? readers : K);
	uint32_t cores = r->cores ? r->cores : 1;
	memset(ep->t, 0, sizeof(ep->t));
	ep->t[FORECAST_COMPUTE] = r->compute_s * (double)x->job->sh->bpe;
	if (pfs_bw > 0)
		ep->t[FORECAST_PFS] = (double)(ep->sum.pfs + ep->sum.pfs_load) / pfs_bw;
	if (r->net_bw > 0)
		ep->t[FORECAST_NET] = (double)net / r->net_bw;
	if (r->nvme_bw > 0)
		ep->t[FORECAST_NVME] = (double)nvme / r->nvme_bw;
	ep->t[FORECAST_DECODE] = r->decode_s * (double)reads / cores;
	ep->time = 0;
	ep->bound = FORECAST_COMPUTE;
	/* a term binds when it exceeds the others by more than rounding: fills
	 * sized to the unused time must not make an epoch look net-bound */
	for (int t = 0; t < FORECAST_NTERMS; t++) {
		if (ep->t[t] > ep->time * (1 + 1e-9)) {
			ep->time = ep->t[t];
			ep->bound = (enum forecast_term)t;
		}
	}
	double opt_bw = forecast_pfs_bw(r, K);
	ep->lb = MAX(ep->t[FORECAST_COMPUTE], ep->t[FORECAST_DECODE]);
	if (opt_bw > 0)
		ep->lb = MAX(ep->lb, (double)ep->pfs_opt / opt_bw);
}

/* Replicas due at epoch e that no fill reached in time: their first read goes
 * to the owner instead (and fills them). */
static void forced(struct run *x, uint64_t e)
{
	uint32_t K = x->job->nnodes;
	uint64_t E = x->job->epochs;
	for (uint32_t k = 0; k < K; k++) {
		uint64_t f = x->pend_in[(uint64_t)k * E + e], fr = x->pend_ram[(uint64_t)k * E + e];
		struct forecast_bytes *b = nb(x, e, k);
		b->ram -= fr;
		b->nvme -= f - fr;
		b->nvme_read -= f - fr;
		b->repl -= f;
		b->peer_in += f;
		uint64_t o = x->pend_out[(uint64_t)k * E + e];
		nb(x, e, k)->peer_out += o;
		nb(x, e, k)->nvme_read += x->pend_onv[(uint64_t)k * E + e];
		x->pend_in[(uint64_t)k * E + e] = x->pend_ram[(uint64_t)k * E + e] = 0;
		x->pend_out[(uint64_t)k * E + e] = x->pend_onv[(uint64_t)k * E + e] = 0;
	}
}

/* Splits `take` bytes of the column d of a per-owner array over owners in
 * proportion to what each has pending, exactly (the parts sum to take). */
static void split_owners(struct run *x, uint64_t d, uint64_t take, uint64_t total, uint64_t e,
			 bool count_fill)
{
	uint32_t K = x->job->nnodes;
	uint64_t E = x->job->epochs, cum = 0, prev = 0;
	for (uint32_t o = 0; o < K && take; o++) {
		uint64_t *po = &x->pend_out[(uint64_t)o * E + d], *pv = &x->pend_onv[(uint64_t)o * E + d];
		if (!*po)
			continue;
		cum += *po;
		uint64_t upto = (uint64_t)((unsigned __int128)take * cum / total);
		uint64_t y = upto - prev, yv = *po ? (uint64_t)((unsigned __int128)y * *pv / *po) : 0;
		prev = upto;
		if (count_fill) {
			nb(x, e, o)->fill_out += y;
			nb(x, e, o)->nvme_read += yv;
		}
		*po -= y;
		*pv -= yv;
	}
}

/* Fills in epoch e: each node, earliest due first, within the time the epoch
 * leaves unused on its link (PEER: on the receiver's and, through a common
 * scale factor, on every owner's) or on the PFS (PFS: an equal share per
 * node); unlimited without rates. In the first epoch only half of that time:
 * the owners load the samples as that epoch runs. */
static void fills(struct run *x, uint64_t e)
{
	const struct forecast_job *j = x->job;
	uint32_t K = j->nnodes;
	uint64_t E = j->epochs;
	struct forecast_epoch *ep = &x->out->ep[e];
	bool pfs = plan_fill_choose(j->repl.fill, j->repl.pfs_bw, j->repl.net_bw, K) ==
		   PLAN_FILL_PFS;
	double pfs_bw = forecast_pfs_bw(x->r, K);
	double rate = pfs ? pfs_bw : x->r->net_bw;
	bool unlimited = rate <= 0 || ep->time <= 0;
	double window = ep->time * (e == 0 ? 0.5 : 1.0);
	double pfs_room = pfs_bw * window - (double)(ep->sum.pfs + ep->sum.pfs_load);
	uint64_t *y = x->prop;
	/* what each node would take, earliest due first */
	for (uint32_t k = 0; k < K; k++) {
		const struct forecast_bytes *b = nb(x, e, k);
		double room = pfs ? pfs_room / K
				  : rate * window - (double)MAX(b->peer_in + b->fill_in,
								b->peer_out + b->fill_out);
		for (uint64_t d = e + 1; d < E; d++) {
			uint64_t pi = x->pend_in[(uint64_t)k * E + d];
			uint64_t t = unlimited ? pi : room >= 1 ? MIN(pi, (uint64_t)room) : 0;
			y[(uint64_t)k * E + d] = t;
			room -= (double)t;
		}
	}
	/* what that asks of the owners' links: one scale factor for all */
	double scale = 1.0;
	if (!unlimited && !pfs) {
		for (uint32_t o = 0; o < K; o++)
			x->oload[o] = 0;
		for (uint64_t d = e + 1; d < E; d++) {
			double want = 0, total = 0;
			for (uint32_t k = 0; k < K; k++) {
				want += (double)y[(uint64_t)k * E + d];
				total += (double)x->pend_out[(uint64_t)k * E + d];
			}
			for (uint32_t o = 0; want > 0 && o < K; o++)
				x->oload[o] += want * (double)x->pend_out[(uint64_t)o * E + d] / total;
		}
		for (uint32_t o = 0; o < K; o++) {
			const struct forecast_bytes *b = nb(x, e, o);
			double room = rate * window - (double)MAX(b->peer_out + b->fill_out,
								  b->peer_in + b->fill_in);
			if (x->oload[o] > 0)
				scale = MIN(scale, MAX(room, 0.0) / x->oload[o]);
		}
	}
	for (uint64_t d = e + 1; d < E; d++) {
		uint64_t total = 0, taken = 0;
		for (uint32_t k = 0; k < K; k++)
			total += x->pend_out[(uint64_t)k * E + d];
		for (uint32_t k = 0; k < K; k++) {
			uint64_t t = (uint64_t)((double)y[(uint64_t)k * E + d] * scale);
			if (scale >= 1.0)
				t = y[(uint64_t)k * E + d];
			if (!t)
				continue;
			uint64_t *pr = &x->pend_ram[(uint64_t)k * E + d];
			x->pend_in[(uint64_t)k * E + d] -= t;
			*pr -= MIN(t, *pr);
			taken += t;
			*(pfs ? &nb(x, e, k)->pfs_load : &nb(x, e, k)->fill_in) += t;
		}
		if (taken)
			split_owners(x, d, taken, total, e, !pfs);
	}
}

static int run_alloc(struct run *x)
{
	const struct forecast_job *j = x->job;
	uint64_t E = j->epochs, KE = (uint64_t)j->nnodes * E;
	struct forecast_result *out = x->out;
	out->ep = calloc(E, sizeof(*out->ep));
	out->node = calloc(KE, sizeof(*out->node));
	x->ranks = malloc(j->sh->world * sizeof(uint32_t));
	x->buf = malloc(j->sh->per_rank * j->sh->world * sizeof(uint32_t));
	x->pos = malloc(j->sh->per_rank * j->sh->world * sizeof(uint64_t));
	x->pend_in = calloc(KE, sizeof(uint64_t));
	x->pend_ram = calloc(KE, sizeof(uint64_t));
	x->pend_out = calloc(KE, sizeof(uint64_t));
	x->pend_onv = calloc(KE, sizeof(uint64_t));
	x->prop = calloc(KE, sizeof(uint64_t));
	x->oload = calloc(j->nnodes, sizeof(double));
	if (!out->ep || !out->node || !x->ranks || !x->buf || !x->pos || !x->pend_in ||
	    !x->pend_ram || !x->pend_out || !x->pend_onv || !x->prop || !x->oload)
		return -ENOMEM;
	if (j->orders) {
		x->orders = j->orders;
		return 0;
	}
	x->orders = &x->own_orders;
	return forecast_orders_init(&x->own_orders, j->sh, 0, E);
}

static void run_free(struct run *x)
{
	free(x->ranks);
	free(x->buf);
	free(x->pos);
	free(x->pend_in);
	free(x->pend_ram);
	free(x->pend_out);
	free(x->pend_onv);
	free(x->prop);
	free(x->oload);
	if (x->orders == &x->own_orders)
		forecast_orders_free(&x->own_orders);
	plan_free(&x->p);
}

void forecast_result_free(struct forecast_result *r)
{
	free(r->ep);
	free(r->node);
	memset(r, 0, sizeof(*r));
}

/* Epoch by epoch: forced first reads, times, fills, times again; sums. */
static void schedule(struct run *x)
{
	const struct forecast_job *j = x->job;
	struct forecast_result *out = x->out;
	uint64_t C = MIN(out->dataset, out->capacity);
	for (uint64_t e = 0; e < j->epochs; e++) {
		struct forecast_epoch *ep = &out->ep[e];
		ep->pfs_opt = e == 0 ? ep->distinct : (ep->distinct > C ? ep->distinct - C : 0);
		if (e > 0)
			forced(x, e);
		epoch_times(x, e);
		fills(x, e);
		epoch_times(x, e);
		out->time += ep->time;
		out->lb += ep->lb;
		const uint64_t *f = &ep->sum.reads, *end = (const uint64_t *)(&ep->sum + 1);
		uint64_t *t = &out->total.reads;
		for (; f < end; f++, t++)
			*t += *f;
	}
}

int forecast_run(const struct forecast_job *job, const struct forecast_rates *r, struct forecast_result *out)
{
	memset(out, 0, sizeof(*out));
	int rc = job_check(job);
	if (rc)
		return rc;
	struct run x = { .job = job, .r = r, .out = out };
	out->epochs = job->epochs;
	out->nnodes = job->nnodes;
	for (uint64_t s = 0; s < job->sh->n; s++)
		out->dataset += job->len[s];
	for (uint32_t k = 0; k < job->nnodes; k++)
		out->capacity += job->cap[k].ram + job->cap[k].nvme;
	rc = run_alloc(&x);
	if (rc == 0)
		rc = plan_build_lengths(&x.p, job->len, job->sh->n, job->sh, 0, job->rank_node,
					job->nnodes, job->cap);
	out->owned = x.p.cached_bytes;
	out->spilled = x.p.spilled;
	for (uint32_t k = 0; k < job->nnodes && rc == 0; k++)
		rc = walk_node(&x, k);
	if (rc == 0)
		rc = unread_loads(&x);
	if (rc == 0)
		schedule(&x);
	run_free(&x);
	if (rc)
		forecast_result_free(out);
	return rc;
}

/* ---- the capacity search ---------------------------------------------------------- */

static int io_free_after_first(const struct forecast_job *job, const struct forecast_rates *r,
			       struct plan_cap *cap, bool which_nvme, uint64_t bytes, bool *ok)
{
	for (uint32_t k = 0; k < job->nnodes; k++) {
		cap[k] = job->cap[k];
		*(which_nvme ? &cap[k].nvme : &cap[k].ram) = bytes;
	}
	struct forecast_job j = *job;
	j.cap = cap;
	struct forecast_result res;
	int rc = forecast_run(&j, r, &res);
	if (rc)
		return rc;
	*ok = true;
	for (uint64_t e = 1; e < res.epochs; e++)
		if (forecast_io_bound(&res.ep[e]))
			*ok = false;
	forecast_result_free(&res);
	return 0;
}

int forecast_min_capacity(const struct forecast_job *job, const struct forecast_rates *r, bool which_nvme,
		    uint64_t tol, uint64_t *bytes, bool *found)
{
	int rc = job_check(job);
	if (rc)
		return rc;
	struct forecast_orders own;
	struct forecast_job j = *job;
	if (!j.orders) {
		if ((rc = forecast_orders_init(&own, job->sh, 0, job->epochs)) != 0)
			return rc;
		j.orders = &own;
	}
	struct plan_cap *cap = malloc(job->nnodes * sizeof(*cap));
	uint64_t hi = 0, lo = 0;
	uint32_t align = job->cap[0].nvme_align ? job->cap[0].nvme_align : PLAN_NVME_ALIGN;
	for (uint64_t s = 0; s < job->sh->n; s++)
		hi += which_nvme ? ALIGN_UP(job->len[s], (uint64_t)align)
				 : ALIGN_UP(job->len[s], (uint64_t)PLAN_RAM_ALIGN);
	bool ok = false;
	*found = false;
	*bytes = hi;
	rc = cap ? io_free_after_first(&j, r, cap, which_nvme, hi, &ok) : -ENOMEM;
	if (rc == 0 && ok) {
		*found = true;
		rc = io_free_after_first(&j, r, cap, which_nvme, 0, &ok);
		if (rc == 0 && ok)
			hi = 0;
		while (rc == 0 && hi > 0 && hi - lo > MAX(tol, 1)) {
			uint64_t mid = lo + (hi - lo) / 2;
			rc = io_free_after_first(&j, r, cap, which_nvme, mid, &ok);
			*(ok ? &hi : &lo) = mid;
		}
		*bytes = hi;
	}
	free(cap);
	if (j.orders == &own)
		forecast_orders_free(&own);
	return rc;
}
