/* forecast, one node (see forecast.h, "one node's forecast"): the daemon's
 * own node, in bounded memory. forecast_tally_node runs on whatever thread the
 * caller gives it (seerd: a thread of its own, reading a plan that no longer
 * changes); forecast_node_forecast is a pure function of the tally and the rates.
 * Failure: a negative errno, nothing leaked, the output empty. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "forecast.h"
#include "../util/util.h"

void forecast_tally_free(struct forecast_tally *t)
{
	free(t->ep);
	memset(t, 0, sizeof(*t));
}

static inline uint64_t sample_len(const struct catalog *c, const uint64_t *len, uint32_t s)
{
	return c ? c->samples[s].length : len[s];
}

/* The job's first read of s in the tally's first epoch, by node j: from the
 * PFS; a sample owned elsewhere (spilled) is loaded by its owner too. */
static void first_read(struct forecast_tally *t, const struct plan *p, struct forecast_tally_epoch *ep,
		       uint32_t s, uint32_t j, uint64_t len)
{
	ep->pfs_all += len;
	if (p->tier[s] != PLAN_NONE && p->owner[s] != j) {
		ep->pfs_all += len;
		if (p->owner[s] == t->node)
			ep->b.pfs_load += len;
	}
	if (j == t->node) {
		ep->b.reads++;
		ep->b.demand += len;
		ep->b.pfs += len;
	}
}

/* A later read of s by node j (replicas in effect after the first epoch). */
static void later_read(struct forecast_tally *t, const struct plan *p, const struct plan_node *nv,
		       struct forecast_tally_epoch *ep, uint32_t s, uint32_t j, uint64_t len)
{
	struct forecast_bytes *b = &ep->b;
	if (p->tier[s] == PLAN_NONE) {
		ep->pfs_all += len;
		if (j == t->node) {
			b->reads++;
			b->demand += len;
			b->pfs += len;
		}
		return;
	}
	if (j != t->node) {
		if (p->owner[s] == t->node) {
			ep->peer_out1 += len;
			if (p->tier[s] == PLAN_NVME)
				ep->peer_out1_nvme += len;
		}
		return;
	}
	b->reads++;
	b->demand += len;
	if (p->owner[s] != t->node)
		ep->peer_in1 += len;
	struct plan_loc l = plan_locate(p, nv, t->node, s);
	if (l.tier == PLAN_RAM) {
		b->ram += len;
	} else if (l.tier == PLAN_NVME) {
		b->nvme += len;
		b->nvme_read += len;
	} else {
		b->peer_in += len;
		return;
	}
	if (l.replica)
		b->repl += len;
}

/* Epoch i of the tally (the job's first_epoch + i) in order `order`. */
static void tally_epoch(struct forecast_tally *t, const struct plan *p, const struct plan_node *nv,
			const struct catalog *c, const uint64_t *len, const struct sampler_shape *sh,
			const uint32_t *rank_node, const uint32_t *order, uint64_t i)
{
	struct forecast_tally_epoch *ep = &t->ep[i];
	const uint64_t n = sh->n, W = sh->world, read = sh->per_rank * W;
	for (uint64_t pos = 0; pos < read; pos++) {
		if (pos + 16 < read) {
			uint32_t a = order[(pos + 16) % n];
			__builtin_prefetch(&p->tier[a]);
			__builtin_prefetch(&p->owner[a]);
			__builtin_prefetch(c ? (const void *)&c->samples[a].length : &len[a]);
		}
		/* padded position pos is rank pos % W's (sampler_position) */
		uint32_t s = order[pos < n ? pos : pos % n];
		uint32_t j = rank_node[pos % W];
		uint64_t l = sample_len(c, len, s);
		if (pos < n)
			ep->distinct += l;
		if (i == 0 && pos < n)
			first_read(t, p, ep, s, j, l);
		else
			later_read(t, p, i > 0 ? nv : NULL, ep, s, j, l);
	}
	/* planned samples nobody reads in the first epoch (drop_last tails):
	 * their owners load them then */
	for (uint64_t pos = read; i == 0 && pos < n; pos++) {
		uint32_t s = order[pos];
		if (p->tier[s] == PLAN_NONE)
			continue;
		uint64_t l = sample_len(c, len, s);
		ep->pfs_all += l;
		if (p->owner[s] == t->node)
			ep->b.pfs_load += l;
	}
}

int forecast_tally_node(struct forecast_tally *t, const struct plan *p, const struct plan_node *nv,
		  const struct catalog *c, const uint64_t *len, const struct sampler_shape *sh,
		  uint64_t first_epoch, uint64_t epochs, const uint32_t *rank_node, uint32_t node,
		  const struct plan_cap *cap)
{
	memset(t, 0, sizeof(*t));
	if (!p || !sh || !rank_node || !cap || (!c && !len) || node >= p->nnodes || p->n != sh->n ||
	    epochs == 0 || sh->n == 0 || (nv && nv->n != sh->n))
		return -EINVAL;
	for (uint32_t r = 0; r < sh->world; r++)
		if (rank_node[r] >= p->nnodes)
			return -EINVAL;
	t->first_epoch = first_epoch;
	t->epochs = epochs;
	t->node = node;
	t->nnodes = p->nnodes;
	t->steps = sh->bpe;
	t->pfs_fill = nv && nv->fill == PLAN_FILL_PFS;
	t->repl_bytes = nv ? nv->repl_bytes : 0;
	for (uint32_t k = 0; k < p->nnodes; k++)
		t->capacity += cap[k].ram + cap[k].nvme;
	for (uint64_t s = 0; s < sh->n; s++) {
		uint64_t l = sample_len(c, len, (uint32_t)s);
		t->dataset += l;
		if (p->tier[s] != PLAN_NONE && p->owner[s] == node) {
			t->owned += l;
			if (p->tier[s] == PLAN_NVME)
				t->owned_nvme += l;
		}
	}
	t->ep = calloc(epochs, sizeof(*t->ep));
	uint32_t *order = malloc(sh->n * sizeof(uint32_t));
	if (!t->ep || !order) {
		free(order);
		forecast_tally_free(t);
		return -ENOMEM;
	}
	for (uint64_t i = 0; nv && i < nv->nrepl; i++) {
		uint64_t d, step;
		plan_node_due(nv, i, &d, &step);
		if (d < first_epoch || d - first_epoch >= epochs)
			continue;
		uint64_t l = sample_len(c, len, nv->smp[i]);
		t->ep[d - first_epoch].due += l;
		if (nv->tier[i] == PLAN_RAM)
			t->ep[d - first_epoch].due_ram += l;
	}
	for (uint64_t i = 0; i < epochs; i++) {
		if (sh->shuffle) {
			sampler_permute(sh->seed, first_epoch + i, sh->n, order);
		} else {
			for (uint64_t s = 0; s < sh->n; s++)
				order[s] = (uint32_t)s;
		}
		tally_epoch(t, p, nv, c, len, sh, rank_node, order, i);
	}
	free(order);
	return 0;
}

/* ---- rates ---------------------------------------------------------------------- */

struct sched {
	const struct forecast_tally *t;
	const struct forecast_rates *r;
	uint64_t *pin, *pram;  /* replica bytes still to fill, by due epoch (and in RAM) */
	double onv;            /* share of this node's owned bytes on NVMe */
};

static uint64_t scaled(uint64_t x, double f)
{
	return (uint64_t)((double)x * f + 0.5);
}

/* The terms of epoch i from its bytes. */
static void node_times(const struct sched *x, struct forecast_node_epoch *o)
{
	const struct forecast_rates *r = x->r;
	const struct forecast_bytes *b = &o->b;
	double K = x->t->nnodes;
	double pfs_bw = forecast_pfs_bw(r, K);
	memset(o->t, 0, sizeof(o->t));
	o->t[FORECAST_COMPUTE] = r->compute_s * (double)x->t->steps;
	if (pfs_bw > 0)
		o->t[FORECAST_PFS] = (double)o->pfs_all / pfs_bw;
	if (r->net_bw > 0)
		o->t[FORECAST_NET] = (double)MAX(b->peer_in + b->fill_in, b->peer_out + b->fill_out) /
			       r->net_bw;
	if (r->nvme_bw > 0)
		o->t[FORECAST_NVME] = (double)b->nvme_read / r->nvme_bw;
	o->t[FORECAST_DECODE] = r->decode_s * (double)b->reads / (r->cores ? r->cores : 1);
	o->time = 0;
	o->bound = FORECAST_COMPUTE;
	for (int k = 0; k < FORECAST_NTERMS; k++) {
		if (o->t[k] > o->time * (1 + 1e-9)) {
			o->time = o->t[k];
			o->bound = (enum forecast_term)k;
		}
	}
	o->lb = MAX(o->t[FORECAST_COMPUTE], o->t[FORECAST_DECODE]);
	if (pfs_bw > 0)
		o->lb = MAX(o->lb, (double)o->pfs_opt / pfs_bw);
}

/* Fills in epoch i, earliest due first, into the time it leaves unused on
 * this node's link (the fills it serves estimated equal to those it takes)
 * or on its share of the PFS; all of them without rates; half the time in
 * the first epoch (the owners load the samples as it runs). */
static void node_fills(struct sched *x, uint64_t i, struct forecast_node_epoch *o)
{
	const struct forecast_tally *t = x->t;
	const struct forecast_rates *r = x->r;
	struct forecast_bytes *b = &o->b;
	double K = t->nnodes, pfs_bw = forecast_pfs_bw(r, K);
	double rate = t->pfs_fill ? pfs_bw : r->net_bw;
	bool unlimited = rate <= 0 || o->time <= 0;
	double window = o->time * (i == 0 ? 0.5 : 1.0);
	double room = t->pfs_fill ? (pfs_bw * window - (double)o->pfs_all) / K
				  : rate * window - (double)MAX(b->peer_in + b->fill_in,
								b->peer_out + b->fill_out);
	for (uint64_t d = i + 1; d < t->epochs; d++) {
		uint64_t take = unlimited ? x->pin[d] : room >= 1 ? MIN(x->pin[d], (uint64_t)room) : 0;
		if (!take)
			continue;
		room -= (double)take;
		x->pin[d] -= take;
		x->pram[d] -= MIN(take, x->pram[d]);
		if (t->pfs_fill) {
			b->pfs_load += take;
			o->pfs_all += take * t->nnodes;
		} else {
			b->fill_in += take;
			b->fill_out += take;
			b->nvme_read += scaled(take, x->onv);
		}
	}
}

int forecast_node_forecast(const struct forecast_tally *t, const struct forecast_rates *r, struct forecast_node_epoch *out)
{
	const uint64_t E = t->epochs;
	struct sched x = { .t = t, .r = r };
	x.pin = calloc(E, sizeof(uint64_t));
	x.pram = calloc(E, sizeof(uint64_t));
	if (!x.pin || !x.pram) {
		free(x.pin);
		free(x.pram);
		return -ENOMEM;
	}
	x.onv = t->owned ? (double)t->owned_nvme / (double)t->owned : 0;
	for (uint64_t i = 0; i < E; i++) {
		x.pin[i] = t->ep[i].due;
		x.pram[i] = t->ep[i].due_ram;
	}
	uint64_t C = MIN(t->dataset, t->capacity);
	for (uint64_t i = 0; i < E; i++) {
		const struct forecast_tally_epoch *te = &t->ep[i];
		struct forecast_node_epoch *o = &out[i];
		memset(o, 0, sizeof(*o));
		o->b = te->b;
		o->pfs_all = te->pfs_all;
		o->pfs_opt = i == 0 ? te->distinct : te->distinct > C ? te->distinct - C : 0;
		/* what peers read of this node's samples: in the proportion its own
		 * reads of theirs still go over the network */
		double ratio = te->peer_in1 ? (double)te->b.peer_in / (double)te->peer_in1 : 1.0;
		o->b.peer_out = scaled(te->peer_out1, ratio);
		o->b.nvme_read += scaled(te->peer_out1_nvme, ratio);
		if (i > 0 && x.pin[i]) {
			/* replicas due now that no fill reached: their first read
			 * goes where their fill would have (and fills them): the
			 * owner (peers' likewise, from this node), or the PFS */
			uint64_t f = x.pin[i], fr = x.pram[i];
			o->b.ram -= fr;
			o->b.nvme -= f - fr;
			o->b.nvme_read -= f - fr;
			o->b.repl -= f;
			if (t->pfs_fill) {
				o->b.pfs += f;
				o->pfs_all += f * t->nnodes;
			} else {
				o->b.peer_in += f;
				o->b.peer_out += f;
				o->b.nvme_read += scaled(f, x.onv);
			}
			x.pin[i] = x.pram[i] = 0;
		}
		node_times(&x, o);
		node_fills(&x, i, o);
		node_times(&x, o);
	}
	free(x.pin);
	free(x.pram);
	return 0;
}
