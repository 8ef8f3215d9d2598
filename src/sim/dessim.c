/* dessim: see dessim.h. Runs in the calling thread; all state is in the
 * struct sim of one call. Failure: a negative errno, nothing leaked.
 *
 * Time advances step by step. Every request is issued at a step boundary
 * (the end of the step whose batch frees a lookahead slot), and every
 * server is first-come-first-served with a next-free time, so a request's
 * completion is known when it is issued: no event queue is needed. Requests
 * issued at the same instant go to the servers interleaved across trainers
 * (sample i of every trainer, then sample i + 1), so no node is always
 * first. */
#include "dessim.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"

#define FILL_DEFER 64 /* fills an instant sets aside because the owner lacks them */

enum kind { K_RAM, K_NVME, K_PEER, K_PFS, K_PFS_FIRST };

struct dnode {
	double in, out, ram, nvme, link;  /* next-free times */
	double pfs_busy;                  /* its PFS reads in flight until */
	double *ch;                       /* PFS streams (per-stream model) */
	double *dec;                      /* decode cores */
	/* replicas due in the simulated epochs: by the step of the first
	 * epoch at which their owner has them (rdy), and, once that step has
	 * begun, in a heap by due (earliest deadline first) */
	uint32_t *fq, *fdue, *rdy;
	uint64_t nfq, rp;
	uint64_t *heap;                   /* due << 32 | sample */
	uint64_t nheap;
	uint64_t tail_in;                 /* bytes of its replicas due after the
					   * simulated epochs, still to fill */
	uint64_t tail_out;                /* ... of other nodes' such replicas
					   * it owns, still to send */
	uint64_t tail_onv;                /* ... of which on its NVMe */
	bool pfs_now;                     /* reads the PFS at this instant */
};

struct req {
	uint32_t s, r;        /* sample (UINT32_MAX: a stream of tail fills),
			       * reader rank (UINT32_MAX: a fill or a load) */
	uint32_t node;        /* reading or filling node */
	uint8_t kind;
	uint8_t tier;         /* of the copy read (local or the owner's) */
	uint64_t bytes;
};

struct sim {
	const struct dessim_params *p;
	struct dessim_result *out;
	const struct sampler_shape *sh;
	uint32_t K, L;
	uint64_t n, words, E;
	struct plan plan;
	uint64_t *held, *inram, *filled;  /* K x words bitmaps of replicas */
	double *have;                     /* when the owner holds each sample */
	struct dnode *nd;
	double pfs_free;                  /* the shared PFS (aggregate model) */
	double rate;                      /* PFS bytes/s per stream or in all */
	double *ready, *bbytes;           /* rank x (L + 1) ring of batches */
	struct forecast_orders orders;
	struct req *rq;
	uint64_t nrq, cap_rq;
	double step_s;                    /* the last step's duration */
	uint64_t tail_taken;              /* tail bytes filled at this instant */
	uint64_t tail_total;              /* sum of the owners' tail_out */
};

static inline uint64_t widx(const struct sim *x, uint32_t k, uint64_t s)
{
	return (uint64_t)k * x->words + s / 64;
}
static inline bool tst(const struct sim *x, const uint64_t *m, uint32_t k, uint64_t s)
{
	return m[widx(x, k, s)] >> (s % 64) & 1;
}
static inline void put(const struct sim *x, uint64_t *m, uint32_t k, uint64_t s)
{
	m[widx(x, k, s)] |= 1ull << (s % 64);
}
static inline double dur(uint64_t len, double bw)
{
	return bw > 0 ? (double)len / bw : 0.0;
}
static inline struct forecast_bytes *acct(struct sim *x, uint64_t e, uint32_t k)
{
	return &x->out->node[e * x->K + k];
}

const char *dessim_policy_name(enum dessim_policy p)
{
	static const char *const names[DESSIM_NPOLICIES] = { "seer", "naive" };
	return p < DESSIM_NPOLICIES ? names[p] : "?";
}

/* ---- servers ------------------------------------------------------------------ */

static double pfs_read(struct sim *x, uint32_t k, double a, uint64_t len)
{
	const struct dessim_params *p = x->p;
	struct dnode *d = &x->nd[k];
	double end;
	if (p->pfs_model == DESSIM_PFS_PER_STREAM) {
		uint32_t c = 0, ns = p->pfs_streams ? p->pfs_streams : 1;
		for (uint32_t i = 1; i < ns; i++)
			if (d->ch[i] < d->ch[c])
				c = i;
		double st = MAX(a, d->ch[c]);
		d->ch[c] = end = st + dur(len, x->rate);
	} else {
		double st = MAX(a, MAX(x->pfs_free, d->link));
		x->pfs_free = st + dur(len, x->rate);
		d->link = st + dur(len, p->pfs_link_bw);
		end = MAX(x->pfs_free, d->link);
	}
	end += p->pfs_lat;
	d->pfs_busy = MAX(d->pfs_busy, end);
	return end;
}

static double local_read(struct sim *x, uint32_t k, uint8_t tier, double a, uint64_t len)
{
	struct dnode *d = &x->nd[k];
	double *srv = tier == PLAN_RAM ? &d->ram : &d->nvme;
	double st = MAX(a, *srv);
	*srv = st + dur(len, tier == PLAN_RAM ? x->p->ram_bw : x->p->nvme_bw);
	return *srv;
}

/* Owner o's tier, o's outgoing link, k's incoming link, pipelined: each
 * stage starts no earlier than the one before and ends no earlier either. */
static double peer_read(struct sim *x, uint32_t k, uint32_t o, uint8_t tier, double a,
			uint64_t len)
{
	const struct dessim_params *p = x->p;
	struct dnode *src = &x->nd[o], *dst = &x->nd[k];
	double *srv = tier == PLAN_RAM ? &src->ram : &src->nvme;
	double st1 = MAX(a, *srv);
	double e1 = *srv = st1 + dur(len, tier == PLAN_RAM ? p->ram_bw : p->nvme_bw);
	double st2 = MAX(st1, src->out);
	src->out = st2 + dur(len, p->net_bw);
	double st3 = MAX(st2, dst->in);
	dst->in = st3 + dur(len, p->net_bw);
	return MAX(e1, MAX(src->out, dst->in)) + p->net_lat;
}

static double decode(struct sim *x, uint32_t k, double a, uint64_t len)
{
	struct dnode *d = &x->nd[k];
	uint32_t c = 0, nc = x->p->cores ? x->p->cores : 1;
	for (uint32_t i = 1; i < nc; i++)
		if (d->dec[i] < d->dec[c])
			c = i;
	double st = MAX(a, d->dec[c]);
	d->dec[c] = st + x->p->decode_s + dur(len, x->p->decode_bw);
	return d->dec[c];
}

/* ---- requests of one instant: classify (pass 1), then time (pass 2) --------- */

static int rq_push(struct sim *x, struct req r)
{
	if (x->nrq == x->cap_rq) {
		uint64_t nc = x->cap_rq ? 2 * x->cap_rq : 4096;
		struct req *q = realloc(x->rq, nc * sizeof(*q));
		if (!q)
			return -ENOMEM;
		x->rq = q;
		x->cap_rq = nc;
	}
	x->rq[x->nrq++] = r;
	return 0;
}

/* What a read of s (padded position pos of epoch e) by rank r takes, and the
 * bytes it moves. */
static struct req classify(struct sim *x, uint64_t e, uint64_t pos, uint32_t s, uint32_t r)
{
	const struct plan *pl = &x->plan;
	uint32_t k = x->p->rank_node[r];
	uint64_t len = x->p->len[s];
	struct forecast_bytes *b = acct(x, e, k);
	struct req q = { s, r, k, K_PFS, PLAN_NONE, len };
	b->reads++;
	b->demand += len;
	if (x->p->policy == DESSIM_NAIVE || pl->tier[s] == PLAN_NONE) {
		b->pfs += len;
		return q;
	}
	if (e == 0 && pos < x->n) {
		b->pfs += len;
		q.kind = K_PFS_FIRST;
		if (pl->owner[s] != k)
			acct(x, e, pl->owner[s])->pfs_load += len;
		return q;
	}
	bool repl = x->held && tst(x, x->held, k, s);
	if (pl->owner[s] == k || (repl && tst(x, x->filled, k, s))) {
		q.tier = pl->owner[s] == k ? pl->tier[s] : tst(x, x->inram, k, s) ? PLAN_RAM : PLAN_NVME;
		q.kind = q.tier == PLAN_RAM ? K_RAM : K_NVME;
		*(q.tier == PLAN_RAM ? &b->ram : &b->nvme) += len;
		if (q.tier == PLAN_NVME)
			b->nvme_read += len;
		if (pl->owner[s] != k)
			b->repl += len;
		return q;
	}
	if (repl) {
		put(x, x->filled, k, s); /* read through: this read fills it */
		x->out->forced++;
	}
	q.kind = K_PEER;
	q.tier = pl->tier[s];
	b->peer_in += len;
	struct forecast_bytes *ob = acct(x, e, pl->owner[s]);
	ob->peer_out += len;
	if (q.tier == PLAN_NVME)
		ob->nvme_read += len;
	return q;
}

static int classify_batch(struct sim *x, uint64_t g)
{
	const struct sampler_shape *sh = x->sh;
	uint64_t e = g / sh->bpe, step = g % sh->bpe;
	const uint32_t *order = forecast_order(&x->orders, e);
	if (!order)
		return -ENOMEM;
	uint32_t blen = sampler_batch_len(sh, step);
	for (uint32_t i = 0; i < blen; i++) {
		for (uint32_t r = 0; r < sh->world; r++) {
			uint64_t pos = sampler_position(sh, r, step, i);
			uint32_t s = sampler_at(sh, order, pos);
			if (pos < x->n)
				x->out->ep[e].pfs_opt += x->p->len[s]; /* distinct, for now */
			struct req q = classify(x, e, pos, s, r);
			if (q.kind >= K_PFS)
				x->nd[q.node].pfs_now = true;
			if (rq_push(x, q))
				return -ENOMEM;
		}
	}
	return 0;
}

static void heap_push(struct dnode *d, uint64_t v)
{
	uint64_t i = d->nheap++;
	while (i > 0 && d->heap[(i - 1) / 2] > v) {
		d->heap[i] = d->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	d->heap[i] = v;
}

static uint64_t heap_pop(struct dnode *d)
{
	uint64_t top = d->heap[0], v = d->heap[--d->nheap], i = 0;
	for (;;) {
		uint64_t c = 2 * i + 1;
		if (c >= d->nheap)
			break;
		if (c + 1 < d->nheap && d->heap[c + 1] < d->heap[c])
			c++;
		if (d->heap[c] >= v)
			break;
		d->heap[i] = d->heap[c];
		i = c;
	}
	if (d->nheap)
		d->heap[i] = v;
	return top;
}

/* One fill of sample s into node k (bytes counted in epoch e). */
static int fill_one(struct sim *x, uint32_t k, uint32_t s, uint64_t e, bool pfs)
{
	uint64_t len = x->p->len[s];
	put(x, x->filled, k, s);
	struct req q = { s, UINT32_MAX, k, pfs ? K_PFS : K_PEER, x->plan.tier[s], len };
	if (pfs) {
		x->nd[k].pfs_now = true;
		acct(x, e, k)->pfs_load += len;
	} else {
		acct(x, e, k)->fill_in += len;
		struct forecast_bytes *ob = acct(x, e, x->plan.owner[s]);
		ob->fill_out += len;
		if (q.tier == PLAN_NVME)
			ob->nvme_read += len;
	}
	return rq_push(x, q);
}

/* Background fills of node k at instant a (the start of global step g, in
 * epoch e): earliest due first among the replicas whose owner has them,
 * within the time k's incoming link (or its share of the PFS) stays idle
 * during one step. */
static int pick_fills(struct sim *x, uint32_t k, double a, uint64_t g, uint64_t e)
{
	struct dnode *d = &x->nd[k];
	bool pfs = plan_fill_choose(x->p->repl.fill, x->p->repl.pfs_bw, x->p->repl.net_bw, x->K) ==
		   PLAN_FILL_PFS;
	double bw = pfs ? forecast_pfs_bw(&(struct forecast_rates){ .pfs_bw = x->p->pfs_bw,
							 .pfs_clients = x->p->pfs_clients,
							 .pfs_curve = x->p->pfs_curve,
							 .npfs = x->p->npfs }, x->K) / x->K
			: x->p->net_bw;
	double room = bw <= 0 ? INFINITY : pfs ? bw * x->step_s
			   : bw * (a + x->step_s - MAX(d->in, a));
	while (d->rp < d->nfq && (g > x->sh->bpe || d->rdy[d->rp] < g))
		heap_push(d, (uint64_t)d->fdue[d->rp] << 32 | d->fq[d->rp]), d->rp++;
	uint64_t deferred[FILL_DEFER];
	unsigned nd = 0;
	while (d->nheap && room > 0 && nd < FILL_DEFER) {
		uint64_t top = heap_pop(d);
		uint32_t s = (uint32_t)top;
		if (tst(x, x->filled, k, s))
			continue;
		if (x->have[s] > a) {
			deferred[nd++] = top;
			continue;
		}
		room -= (double)x->p->len[s];
		int rc = fill_one(x, k, s, e, pfs);
		if (rc)
			return rc;
	}
	while (nd)
		heap_push(d, deferred[--nd]);
	/* past the queue: the replicas due after the simulated epochs, as a
	 * stream of bytes (they are read by nobody inside the window) */
	if (d->rp == d->nfq && !d->nheap && d->tail_in && room > 0) {
		uint64_t y = room == INFINITY ? d->tail_in : MIN(d->tail_in, (uint64_t)room);
		d->tail_in -= y;
		if (pfs) {
			acct(x, e, k)->pfs_load += y;
			d->pfs_now = true;
			return rq_push(x, (struct req){ UINT32_MAX, UINT32_MAX, k, K_PFS, PLAN_NONE, y });
		}
		acct(x, e, k)->fill_in += y;
		d->in = MAX(d->in, a) + dur(y, x->p->net_bw);
		x->tail_taken += y;
	}
	return 0;
}

/* The owners' side of this instant's tail fills, in proportion to what each
 * still has to send (exactly: the parts add up). */
static void tail_out(struct sim *x, double a, uint64_t e)
{
	uint64_t take = x->tail_taken, total = x->tail_total, cum = 0, prev = 0;
	x->tail_taken = 0;
	for (uint32_t o = 0; o < x->K && take; o++) {
		struct dnode *d = &x->nd[o];
		if (!d->tail_out)
			continue;
		cum += d->tail_out;
		uint64_t upto = (uint64_t)((unsigned __int128)take * cum / total);
		uint64_t y = upto - prev, yv = (uint64_t)((unsigned __int128)y * d->tail_onv / d->tail_out);
		prev = upto;
		d->tail_out -= y;
		d->tail_onv -= yv;
		struct forecast_bytes *b = acct(x, e, o);
		b->fill_out += y;
		b->nvme_read += yv;
		d->out = MAX(d->out, a) + dur(y, x->p->net_bw);
		d->nvme = MAX(d->nvme, a) + dur(yv, x->p->nvme_bw);
	}
	x->tail_total -= take;
}

/* Clients of the PFS at instant a: nodes with reads in flight or starting. */
static void pfs_rate(struct sim *x, double a)
{
	const struct dessim_params *p = x->p;
	uint32_t clients = 0;
	for (uint32_t k = 0; k < x->K; k++) {
		clients += x->nd[k].pfs_now || x->nd[k].pfs_busy > a;
		x->nd[k].pfs_now = false;
	}
	struct forecast_rates r = { .pfs_bw = p->pfs_bw, .pfs_clients = p->pfs_clients,
			      .pfs_curve = p->pfs_curve, .npfs = p->npfs };
	double agg = forecast_pfs_bw(&r, clients ? clients : 1);
	if (p->pfs_model == DESSIM_PFS_PER_STREAM) {
		x->rate = clients ? agg / clients : agg;
		if (p->pfs_link_bw > 0)
			x->rate = MIN(x->rate, p->pfs_link_bw);
	} else {
		x->rate = agg;
	}
}

/* Pass 2: completion of every request issued at a; readiness of batches. */
static void serve(struct sim *x, double a, uint64_t slot)
{
	const struct plan *pl = &x->plan;
	uint32_t L1 = x->L + 1;
	for (uint64_t i = 0; i < x->nrq; i++) {
		const struct req *q = &x->rq[i];
		uint64_t len = q->bytes;
		double t;
		if (q->s == UINT32_MAX) {
			pfs_read(x, q->node, a, len);
			continue;
		}
		if (q->kind == K_RAM || q->kind == K_NVME) {
			double from = pl->owner[q->s] == q->node ? MAX(a, x->have[q->s]) : a;
			t = local_read(x, q->node, q->tier, from, len);
		} else if (q->kind == K_PEER) {
			t = peer_read(x, q->node, pl->owner[q->s], q->tier, MAX(a, x->have[q->s]), len);
		} else {
			t = pfs_read(x, q->node, a, len);
			if (q->kind == K_PFS_FIRST) {
				uint32_t o = pl->owner[q->s];
				x->have[q->s] = o == q->node ? t : pfs_read(x, o, a, len);
			}
		}
		if (q->r == UINT32_MAX)
			continue; /* a fill: nobody waits for it */
		t = decode(x, q->node, t, len);
		double *rd = &x->ready[(uint64_t)q->r * L1 + slot];
		*rd = MAX(*rd, t);
		x->bbytes[(uint64_t)q->r * L1 + slot] += (double)len;
	}
	x->nrq = 0;
}

/* Planned samples nobody reads in epoch 0 (drop_last tails): their owners
 * load them at its last step. */
static int unread_loads(struct sim *x)
{
	const struct sampler_shape *sh = x->sh;
	const uint32_t *order = forecast_order(&x->orders, 0);
	if (!order)
		return -ENOMEM;
	for (uint64_t pos = MIN(x->n, sh->per_rank * sh->world); pos < x->n; pos++) {
		uint32_t s = order[pos];
		if (x->plan.tier[s] == PLAN_NONE || x->p->policy == DESSIM_NAIVE)
			continue;
		uint32_t o = x->plan.owner[s];
		acct(x, 0, o)->pfs_load += x->p->len[s];
		x->nd[o].pfs_now = true;
		if (rq_push(x, (struct req){ s, UINT32_MAX, o, K_PFS_FIRST, PLAN_NONE,
					     x->p->len[s] }))
			return -ENOMEM;
	}
	return 0;
}

/* Everything issued at instant a, the start of global step g_now: batch g
 * (if any) and the fills, whose bytes count in g_now's epoch. */
static int instant(struct sim *x, uint64_t g, double a, uint64_t G, uint64_t g_now)
{
	uint64_t e_now = MIN(g_now / x->sh->bpe, x->out->epochs - 1);
	uint32_t L1 = x->L + 1;
	int rc = 0;
	if (g < G) {
		uint64_t slot = g % L1;
		for (uint32_t r = 0; r < x->sh->world; r++) {
			x->ready[(uint64_t)r * L1 + slot] = a;
			x->bbytes[(uint64_t)r * L1 + slot] = 0;
		}
		rc = classify_batch(x, g);
		if (rc == 0 && g == x->sh->bpe - 1)
			rc = unread_loads(x);
	}
	for (uint32_t k = 0; k < x->K && rc == 0 && x->held; k++)
		rc = pick_fills(x, k, a, g_now, e_now);
	if (rc)
		return rc;
	tail_out(x, a, e_now);
	pfs_rate(x, a);
	serve(x, a, g % L1);
	return 0;
}

/* ---- the run ---------------------------------------------------------------------- */

/* Step by step: trainers wait for the barrier and their batch, compute;
 * the end of step g frees the slot of batch g for batch g + L + 1. */
static int simulate(struct sim *x)
{
	const struct dessim_params *p = x->p;
	const struct sampler_shape *sh = x->sh;
	uint64_t G = x->out->epochs * sh->bpe;
	uint32_t L1 = x->L + 1;
	double tau = 0;
	int rc = 0;
	double est = p->compute_s;
	for (uint64_t s = 0; s < x->n; s++)
		est += dur(p->len[s], p->compute_bw) * sh->batch / (double)x->n;
	x->step_s = est;
	for (uint64_t g = 0; g <= x->L && g < G && rc == 0; g++)
		rc = instant(x, g, 0.0, G, 0);
	for (uint64_t g = 0; g < G && rc == 0; g++) {
		struct dessim_epoch *ep = &x->out->ep[g / sh->bpe];
		uint64_t slot = g % L1;
		double end = tau, comp = 0;
		for (uint32_t r = 0; r < sh->world; r++) {
			double c = p->compute_s + dur((uint64_t)x->bbytes[(uint64_t)r * L1 + slot],
						      p->compute_bw);
			end = MAX(end, MAX(tau, x->ready[(uint64_t)r * L1 + slot]) + c);
			comp = MAX(comp, c);
		}
		ep->time += end - tau;
		ep->compute += comp;
		x->step_s = MAX(end - tau, est);
		tau = end;
		uint64_t next = g + L1;
		rc = instant(x, next, tau, G, g + 1);
	}
	return rc;
}

/* Node d's replicas due inside the simulated epochs (m of them), ordered by
 * the step at which their owner has them (a counting sort on ready). */
static int window_queue(struct sim *x, struct dnode *d, const struct plan_node *nv, uint64_t m)
{
	uint64_t bpe = x->sh->bpe, n1 = m ? m : 1;
	uint64_t *start = calloc(bpe + 2, sizeof(uint64_t));
	d->fq = malloc(n1 * sizeof(uint32_t));
	d->fdue = malloc(n1 * sizeof(uint32_t));
	d->rdy = malloc(n1 * sizeof(uint32_t));
	d->heap = malloc(n1 * sizeof(uint64_t));
	if (!start || !d->fq || !d->fdue || !d->rdy || !d->heap) {
		free(start);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < nv->nrepl; i++) {
		uint64_t e, step;
		plan_node_due(nv, i, &e, &step);
		if (e < x->out->epochs)
			start[MIN(nv->ready[i], bpe) + 1]++;
	}
	for (uint64_t r = 1; r <= bpe + 1; r++)
		start[r] += start[r - 1];
	for (uint64_t i = 0; i < nv->nrepl; i++) {
		uint64_t e, step;
		plan_node_due(nv, i, &e, &step);
		if (e >= x->out->epochs)
			continue;
		uint64_t j = start[MIN(nv->ready[i], bpe)]++;
		d->fq[j] = nv->smp[i];
		d->fdue[j] = nv->due[i];
		d->rdy[j] = nv->ready[i];
	}
	d->nfq = m;
	free(start);
	return 0;
}

static int build_replicas(struct sim *x)
{
	const struct dessim_params *p = x->p;
	struct plan_orders prov = forecast_orders_provider(&x->orders);
	uint64_t words = x->words * x->K;
	x->held = calloc(words, sizeof(uint64_t));
	x->inram = calloc(words, sizeof(uint64_t));
	x->filled = calloc(words, sizeof(uint64_t));
	if (!x->held || !x->inram || !x->filled)
		return -ENOMEM;
	x->out->mem_bytes += 3 * words * sizeof(uint64_t);
	for (uint32_t k = 0; k < x->K; k++) {
		struct plan_node nv;
		int rc = plan_node_build(&nv, &x->plan, NULL, p->len, x->sh, 0, x->E, p->rank_node, k,
					 &p->cap[k], &p->repl, &prov);
		if (rc)
			return rc;
		uint64_t m = 0;
		for (uint64_t i = 0; i < nv.nrepl; i++) {
			uint64_t d, step;
			plan_node_due(&nv, i, &d, &step);
			put(x, x->held, k, nv.smp[i]);
			if (nv.tier[i] == PLAN_RAM)
				put(x, x->inram, k, nv.smp[i]);
			m += d < x->out->epochs;
		}
		struct dnode *dn = &x->nd[k];
		int rc2 = window_queue(x, dn, &nv, m);
		if (rc2) {
			plan_node_free(&nv);
			return rc2;
		}
		for (uint64_t i = 0; i < nv.nrepl; i++) {
			uint64_t d, step, s = nv.smp[i];
			plan_node_due(&nv, i, &d, &step);
			if (d < x->out->epochs)
				continue;
			struct dnode *o = &x->nd[x->plan.owner[s]];
			dn->tail_in += p->len[s];
			o->tail_out += p->len[s];
			x->tail_total += p->len[s];
			if (x->plan.tier[s] == PLAN_NVME)
				o->tail_onv += p->len[s];
		}
		x->out->mem_bytes += m * 5 * sizeof(uint32_t);
		plan_node_free(&nv);
	}
	/* only the simulated epochs' orders are needed from here on */
	for (uint64_t e = x->out->epochs; e < x->orders.count; e++) {
		free(x->orders.perm[e]);
		x->orders.perm[e] = NULL;
	}
	return 0;
}

static int setup(struct sim *x)
{
	const struct dessim_params *p = x->p;
	uint32_t L1 = x->L + 1, ns = p->pfs_streams ? p->pfs_streams : 1, nc = p->cores ? p->cores : 1;
	struct dessim_result *out = x->out;
	out->ep = calloc(out->epochs, sizeof(*out->ep));
	out->node = calloc(out->epochs * x->K, sizeof(*out->node));
	x->nd = calloc(x->K, sizeof(*x->nd));
	x->have = malloc(x->n * sizeof(double));
	x->ready = calloc((uint64_t)x->sh->world * L1, sizeof(double));
	x->bbytes = calloc((uint64_t)x->sh->world * L1, sizeof(double));
	if (!out->ep || !out->node || !x->nd || !x->have || !x->ready || !x->bbytes)
		return -ENOMEM;
	for (uint32_t k = 0; k < x->K; k++) {
		x->nd[k].ch = calloc(ns, sizeof(double));
		x->nd[k].dec = calloc(nc, sizeof(double));
		if (!x->nd[k].ch || !x->nd[k].dec)
			return -ENOMEM;
	}
	for (uint64_t s = 0; s < x->n; s++)
		x->have[s] = 0;
	out->mem_bytes = x->n * (sizeof(double) + 11) + out->epochs * x->K * sizeof(struct forecast_bytes);
	int rc = forecast_orders_init(&x->orders, x->sh, 0, x->E);
	if (rc == 0 && p->policy == DESSIM_SEER)
		rc = plan_build_lengths(&x->plan, p->len, x->n, x->sh, 0, p->rank_node, x->K, p->cap);
	if (rc)
		return rc;
	/* a planned sample is on its owner once the owner has loaded it */
	for (uint64_t s = 0; s < x->n && p->policy == DESSIM_SEER; s++)
		if (x->plan.tier[s] != PLAN_NONE)
			x->have[s] = INFINITY;
	if (p->policy == DESSIM_SEER && p->repl.on && x->E > 1)
		rc = build_replicas(x);
	return rc;
}

static void teardown(struct sim *x)
{
	for (uint32_t k = 0; x->nd && k < x->K; k++) {
		free(x->nd[k].ch);
		free(x->nd[k].dec);
		free(x->nd[k].fq);
		free(x->nd[k].fdue);
		free(x->nd[k].rdy);
		free(x->nd[k].heap);
	}
	free(x->nd);
	free(x->have);
	free(x->ready);
	free(x->bbytes);
	free(x->held);
	free(x->inram);
	free(x->filled);
	free(x->rq);
	forecast_orders_free(&x->orders);
	plan_free(&x->plan);
}

/* Sums, maxima and bounds per epoch. */
static void finish(struct sim *x)
{
	const struct dessim_params *p = x->p;
	struct dessim_result *out = x->out;
	struct forecast_rates r = { .pfs_bw = p->pfs_bw, .pfs_clients = p->pfs_clients,
			      .pfs_curve = p->pfs_curve, .npfs = p->npfs };
	double bw = forecast_pfs_bw(&r, x->K);
	if (p->pfs_model == DESSIM_PFS_PER_STREAM) {
		double per = bw / x->K;
		if (p->pfs_link_bw > 0)
			per = MIN(per, p->pfs_link_bw);
		bw = per * x->K * (p->pfs_streams ? p->pfs_streams : 1);
	}
	uint64_t cap = 0, D = 0;
	for (uint32_t k = 0; k < x->K && p->policy == DESSIM_SEER; k++)
		cap += p->cap[k].ram + p->cap[k].nvme;
	for (uint64_t s = 0; s < x->n; s++)
		D += p->len[s];
	uint64_t C = MIN(cap, D);
	uint32_t nc = p->cores ? p->cores : 1;
	for (uint64_t e = 0; e < out->epochs; e++) {
		struct dessim_epoch *ep = &out->ep[e];
		uint64_t distinct = ep->pfs_opt;
		ep->pfs_opt = e == 0 ? distinct : distinct > C ? distinct - C : 0;
		double dec = 0;
		for (uint32_t k = 0; k < x->K; k++) {
			const struct forecast_bytes *b = &out->node[e * x->K + k];
			const uint64_t *f = &b->reads, *end = (const uint64_t *)(b + 1);
			uint64_t *s = &ep->sum.reads, *m = &ep->max.reads;
			for (; f < end; f++, s++, m++) {
				*s += *f;
				*m = MAX(*m, *f);
			}
			ep->net_max = MAX(ep->net_max, MAX(b->peer_in + b->fill_in, b->peer_out + b->fill_out));
			dec = MAX(dec, ((double)b->reads * p->decode_s + dur(b->demand, p->decode_bw)) / nc);
		}
		ep->stall = MAX(0.0, ep->time - ep->compute);
		ep->lb = MAX(ep->compute, dec);
		if (bw > 0)
			ep->lb = MAX(ep->lb, (double)ep->pfs_opt / bw);
		out->time += ep->time;
		out->compute += ep->compute;
		out->lb += ep->lb;
		out->reads += ep->sum.reads;
	}
}

int dessim_run(const struct dessim_params *p, struct dessim_result *out)
{
	memset(out, 0, sizeof(*out));
	if (!p || !p->len || !p->sh || !p->rank_node || (p->policy == DESSIM_SEER && !p->cap) ||
	    p->epochs == 0 || p->sim_epochs > p->epochs || p->policy >= DESSIM_NPOLICIES ||
	    p->sh->per_rank == 0 || plan_check_nodes(p->sh, p->rank_node, p->nnodes) != 0)
		return -EINVAL;
	struct sim x = { .p = p, .out = out, .sh = p->sh, .K = p->nnodes, .L = p->lookahead,
			 .n = p->sh->n, .E = p->epochs };
	x.words = (x.n + 63) / 64;
	out->epochs = p->sim_epochs ? p->sim_epochs : p->epochs;
	out->nnodes = p->nnodes;
	int rc = setup(&x);
	if (rc == 0)
		rc = simulate(&x);
	if (rc == 0)
		finish(&x);
	teardown(&x);
	if (rc)
		dessim_result_free(out);
	return rc;
}

void dessim_result_free(struct dessim_result *r)
{
	free(r->ep);
	free(r->node);
	memset(r, 0, sizeof(*r));
}

/* ---- sizes ---------------------------------------------------------------------- */

static inline uint64_t splitmix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline double unit_open(uint64_t seed, uint64_t i)
{
	return ((double)(splitmix(seed * 0x100000001b3ull + i) >> 11) + 0.5) / 9007199254740992.0;
}

void dessim_normal_sizes(uint64_t *len, uint64_t n, double mean, double sd, uint64_t seed)
{
	const double two_pi = 6.283185307179586476925;
	for (uint64_t i = 0; i < n; i++) {
		/* Box-Muller on two counter-based uniforms in (0, 1) */
		double u1 = unit_open(seed, 2 * i), u2 = unit_open(seed, 2 * i + 1);
		double v = mean + sd * sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
		len[i] = v < 1.0 ? 1 : (uint64_t)llround(v);
	}
}
