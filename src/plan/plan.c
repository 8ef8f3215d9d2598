#include "plan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../sampler/sampler_elastic.h"
#include "../util/util.h"

void plan_free(struct plan *p)
{
	free(p->tier);
	free(p->owner);
	free(p->off);
	free(p->ram_used);
	free(p->nvme_used);
	memset(p, 0, sizeof(*p));
}

static int place(struct plan *p, uint32_t s, uint64_t len, uint32_t node,
		 const struct plan_cap *cap)
{
	uint64_t ra = ALIGN_UP(len, (uint64_t)PLAN_RAM_ALIGN);
	if (p->ram_used[node] <= cap[node].ram && cap[node].ram - p->ram_used[node] >= ra) {
		p->tier[s] = PLAN_RAM;
		p->off[s] = p->ram_used[node];
		p->ram_used[node] += ra;
	} else {
		uint64_t align = cap[node].nvme_align ? cap[node].nvme_align : PLAN_NVME_ALIGN;
		uint64_t na = ALIGN_UP(len, align);
		if (p->nvme_used[node] > cap[node].nvme || cap[node].nvme - p->nvme_used[node] < na)
			return 0;
		p->tier[s] = PLAN_NVME;
		p->off[s] = p->nvme_used[node];
		p->nvme_used[node] += na;
	}
	p->owner[s] = (uint16_t)node;
	p->cached_samples++;
	p->cached_bytes += len;
	return 1;
}

int plan_place(struct plan *p, uint32_t s, uint64_t len, uint32_t node, const struct plan_cap *cap)
{
	return place(p, s, len, node, cap);
}

int plan_check_nodes(const struct sampler_shape *sh, const uint32_t *rank_node, uint32_t nnodes)
{
	if (nnodes == 0 || nnodes > UINT16_MAX)
		return -EINVAL;
	for (uint32_t r = 0; r < sh->world; r++)
		if (rank_node[r] >= nnodes)
			return -EINVAL;
	return 0;
}

/* Pass 2 of build: the samples pass 1 could not place on their first reader's
 * node go to nodes with room, round-robin, in order of need; on one node,
 * only those pass 1 never tried (read by no rank in the first epoch). */
static void spill_pass(struct plan *p, const struct catalog *c, const uint64_t *lens,
		       const uint32_t *spill, uint64_t nspill, const uint8_t *seen, uint32_t nnodes,
		       const struct plan_cap *cap)
{
	uint32_t k = 0;
	for (uint64_t i = 0; i < nspill && nnodes > 1; i++) {
		uint32_t s = spill[i];
		uint64_t len = c ? c->samples[s].length : lens[s];
		for (uint32_t tries = 0; tries < nnodes; tries++) {
			uint32_t node = (k + tries) % nnodes;
			if (place(p, s, len, node, cap)) {
				p->spilled++;
				k = node + 1;
				break;
			}
		}
	}
	if (nnodes == 1) {
		for (uint64_t i = 0; i < nspill; i++) {
			uint32_t s = spill[i];
			if (seen[s])
				continue; /* already tried on the only node */
			uint64_t len = c ? c->samples[s].length : lens[s];
			if (place(p, s, len, 0, cap))
				p->spilled++;
		}
	}
}

static int build(struct plan *p, const struct catalog *c, const uint64_t *lens, uint64_t n,
		 const struct sampler_shape *sh, const struct sampler_resume *rs, uint64_t first_epoch,
		 const uint32_t *rank_node, uint32_t nnodes, const struct plan_cap *cap)
{
	memset(p, 0, sizeof(*p));
	if (n != sh->n || plan_check_nodes(sh, rank_node, nnodes) != 0)
		return -EINVAL;
	p->n = n;
	p->nnodes = nnodes;
	p->tier = calloc(n, 1);
	p->owner = calloc(n, sizeof(uint16_t));
	p->off = calloc(n, sizeof(uint64_t));
	p->ram_used = calloc(nnodes, sizeof(uint64_t));
	p->nvme_used = calloc(nnodes, sizeof(uint64_t));
	uint32_t *order = malloc(n * sizeof(uint32_t));
	uint8_t *seen = calloc(n, 1);
	/* first reader of each sample, for the spill pass */
	uint32_t *spill = malloc(n * sizeof(uint32_t));
	uint32_t *ids = malloc(sh->batch * sizeof(uint32_t));
	if (!p->tier || !p->owner || !p->off || !p->ram_used || !p->nvme_used || !order || !seen ||
	    !spill || !ids) {
		free(order);
		free(seen);
		free(spill);
		free(ids);
		plan_free(p);
		return -ENOMEM;
	}
	sampler_epoch_order(sh, first_epoch, order); /* n == sh->n, checked above */

	/* pass 1: walk the first epoch in order of need (step-major, then rank),
	 * give each sample to the node that reads it first while it has room;
	 * an epoch re-sharded by an elastic resume has its own batches */
	bool el = rs && rs->elastic && rs->epoch == first_epoch;
	uint64_t nb = el ? rs->rsh.bpe : sh->bpe, nspill = 0;
	for (uint64_t step = 0; step < nb; step++) {
		uint32_t blen = sampler_batch_len(sh, MIN(step, sh->bpe - 1));
		for (uint32_t r = 0; r < sh->world; r++) {
			if (el)
				blen = (uint32_t)sampler_resume_batch(rs, order, r, step, ids);
			for (uint32_t i = 0; i < blen; i++) {
				uint32_t s = el ? ids[i] : sampler_at(sh, order, sampler_position(sh, r, step, i));
				if (seen[s])
					continue;
				seen[s] = 1;
				uint64_t len = c ? c->samples[s].length : lens[s];
				if (!place(p, s, len, rank_node[r], cap))
					spill[nspill++] = s;
			}
		}
	}
	/* samples no rank reads in the first epoch (drop_last tails) are cached
	 * too if there is room: they come up in later epochs */
	for (uint64_t s = 0; s < n; s++)
		if (!seen[s])
			spill[nspill++] = (uint32_t)s;

	spill_pass(p, c, lens, spill, nspill, seen, nnodes, cap);
	free(order);
	free(seen);
	free(spill);
	free(ids);
	return 0;
}

int plan_build(struct plan *p, const struct catalog *c, const struct sampler_shape *sh,
	       uint64_t first_epoch, const uint32_t *rank_node, uint32_t nnodes,
	       const struct plan_cap *cap)
{
	return build(p, c, NULL, c->nsamples, sh, NULL, first_epoch, rank_node, nnodes, cap);
}

int plan_build_resumed(struct plan *p, const struct catalog *c, const uint64_t *len,
		       const struct sampler_shape *sh, const struct sampler_resume *rs, uint64_t first_epoch,
		       const uint32_t *rank_node, uint32_t nnodes, const struct plan_cap *cap)
{
	return build(p, len ? NULL : c, len, c->nsamples, sh, rs, first_epoch, rank_node, nnodes,
		     cap);
}

int plan_build_lengths(struct plan *p, const uint64_t *len, uint64_t n, const struct sampler_shape *sh,
		       uint64_t first_epoch, const uint32_t *rank_node, uint32_t nnodes,
		       const struct plan_cap *cap)
{
	return build(p, NULL, len, n, sh, NULL, first_epoch, rank_node, nnodes, cap);
}

/* ---- replicas -------------------------------------------------------------- */

enum plan_fill plan_fill_choose(enum plan_fill f, double pfs_bw, double net_bw, uint32_t nnodes)
{
	if (f != PLAN_FILL_AUTO)
		return f;
	if (pfs_bw > 0 && nnodes > 0 && (net_bw <= 0 || pfs_bw / nnodes > net_bw))
		return PLAN_FILL_PFS;
	return PLAN_FILL_PEER;
}

void plan_node_free(struct plan_node *nv)
{
	free(nv->idx);
	free(nv->smp);
	free(nv->tier);
	free(nv->off);
	free(nv->due);
	free(nv->ready);
	memset(nv, 0, sizeof(*nv));
}

/* Selection state of one node: per dataset sample its read count and first
 * read tick over the horizon, and the candidates in order of first read. */
struct rsel {
	uint16_t *cnt;
	uint32_t *first;
	uint32_t *cand;
	uint64_t ncand;
	uint32_t *ranks;     /* this node's ranks, ascending */
	uint32_t nranks;
	uint32_t *perm;      /* scratch epoch order when no provider */
	uint32_t *buf;       /* this node's reads of one epoch */
};

static void rsel_free(struct rsel *r)
{
	free(r->cnt);
	free(r->first);
	free(r->cand);
	free(r->ranks);
	free(r->perm);
	free(r->buf);
}

static const uint32_t *epoch_order(const struct plan_orders *o, const struct sampler_shape *sh,
				   uint64_t epoch, uint32_t *scratch)
{
	if (o && o->get)
		return o->get(o->ctx, epoch);
	sampler_epoch_order(sh, epoch, scratch);
	return scratch;
}

uint64_t plan_node_reads(const struct sampler_shape *sh, const uint32_t *order, const uint32_t *ranks,
			 uint32_t nranks, uint32_t *smp, uint64_t *pos_out)
{
	const uint64_t W = sh->world, n = sh->n, ahead = 2 * W * sh->batch;
	uint64_t m = 0;
	for (uint64_t step = 0; step < sh->bpe; step++) {
		uint32_t blen = sampler_batch_len(sh, step);
		for (uint32_t k = 0; k < nranks; k++) {
			uint64_t pos = ranks[k] + W * step * sh->batch;
			for (uint32_t i = 0; i < blen; i++, pos += W, m++) {
				if (pos + ahead < n)
					__builtin_prefetch(&order[pos + ahead]);
				smp[m] = order[pos < n ? pos : pos % n];
				if (pos_out)
					pos_out[m] = pos;
			}
		}
	}
	return m;
}

/* Walks this node's reads of epochs first+1 .. first+epochs-1 in order of need
 * (epoch, step, rank, position in batch), counting each owned-elsewhere
 * sample's reads and recording its first tick. Candidates come out in order
 * of their first read. */
static int rsel_walk(struct rsel *r, const struct plan *p, const struct sampler_shape *sh,
		     uint64_t first_epoch, uint64_t epochs, uint32_t node,
		     const struct plan_orders *orders)
{
	enum { AHEAD = 16 };
	uint64_t tick = 0;
	for (uint64_t e = first_epoch + 1; e < first_epoch + epochs; e++) {
		const uint32_t *order = epoch_order(orders, sh, e, r->perm);
		if (!order)
			return -ENOMEM;
		uint64_t nread = plan_node_reads(sh, order, r->ranks, r->nranks, r->buf, NULL);
		uint64_t m = 0;
		for (uint64_t step = 0; step < sh->bpe; step++) {
			uint32_t blen = sampler_batch_len(sh, step);
			for (uint32_t k = 0; k < r->nranks; k++) {
				for (uint32_t i = 0; i < blen; i++, m++) {
					if (m + AHEAD < nread) {
						uint32_t a = r->buf[m + AHEAD];
						__builtin_prefetch(&r->cnt[a], 1);
						__builtin_prefetch(&p->owner[a]);
						__builtin_prefetch(&p->tier[a]);
					}
					uint32_t s = r->buf[m];
					uint32_t t = (uint32_t)(tick + (uint64_t)k * sh->batch + i);
					if (p->tier[s] == PLAN_NONE || p->owner[s] == node)
						continue;
					if (r->cnt[s] == 0) {
						r->first[s] = t;
						r->cand[r->ncand++] = s;
					}
					if (r->cnt[s] < UINT16_MAX)
						r->cnt[s]++;
				}
			}
			tick += (uint64_t)r->nranks * sh->batch;
		}
	}
	return 0;
}

/* Candidates by decreasing read count, ties by first read (the walk's order):
 * a stable counting sort by count. */
static int rsel_rank(struct rsel *r, uint32_t **out)
{
	uint16_t maxc = 0;
	for (uint64_t i = 0; i < r->ncand; i++)
		maxc = MAX(maxc, r->cnt[r->cand[i]]);
	uint64_t *start = calloc((size_t)maxc + 2, sizeof(uint64_t));
	uint32_t *sorted = malloc((r->ncand ? r->ncand : 1) * sizeof(uint32_t));
	if (!start || !sorted) {
		free(start);
		free(sorted);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < r->ncand; i++)
		start[maxc - r->cnt[r->cand[i]] + 1]++;
	for (uint32_t c = 1; c <= (uint32_t)maxc + 1; c++)
		start[c] += start[c - 1];
	for (uint64_t i = 0; i < r->ncand; i++)
		sorted[start[maxc - r->cnt[r->cand[i]]]++] = r->cand[i];
	free(start);
	*out = sorted;
	return 0;
}

static int node_alloc(struct plan_node *nv, uint64_t m)
{
	m = m ? m : 1;
	nv->smp = malloc(m * sizeof(uint32_t));
	nv->tier = malloc(m);
	nv->off = malloc(m * sizeof(uint64_t));
	nv->due = malloc(m * sizeof(uint32_t));
	nv->ready = malloc(m * sizeof(uint32_t));
	return nv->smp && nv->tier && nv->off && nv->due && nv->ready ? 0 : -ENOMEM;
}

/* Places the ranked candidates in the spare room (RAM first, like the owned
 * share), then lists the placed ones in fill order (first read). */
static int node_place(struct plan_node *nv, struct rsel *r, const uint32_t *ranked,
		      const struct catalog *c, const uint64_t *lens, const struct plan_cap *cap)
{
	uint64_t align = cap->nvme_align ? cap->nvme_align : PLAN_NVME_ALIGN;
	uint64_t ram_free = cap->ram > nv->ram_used ? cap->ram - nv->ram_used : 0;
	uint64_t nvme_free = cap->nvme > nv->nvme_used ? cap->nvme - nv->nvme_used : 0;
	uint64_t m = 0;
	/* first pass, by rank: which fit, and in which tier (idx holds the
	 * rank + 1 of the placed ones until the second pass) */
	uint8_t *where = calloc(r->ncand ? r->ncand : 1, 1);
	if (!where)
		return -ENOMEM;
	for (uint64_t i = 0; i < r->ncand && (ram_free || nvme_free); i++) {
		if (i + 16 < r->ncand) {
			uint32_t a = ranked[i + 16];
			__builtin_prefetch(c ? (const void *)&c->samples[a].length : &lens[a]);
			__builtin_prefetch(&nv->idx[a], 1);
		}
		uint64_t len = c ? c->samples[ranked[i]].length : lens[ranked[i]];
		uint64_t ra = ALIGN_UP(len, (uint64_t)PLAN_RAM_ALIGN), na = ALIGN_UP(len, align);
		if (ra <= ram_free) {
			ram_free -= ra;
			where[i] = PLAN_RAM;
		} else if (na <= nvme_free) {
			nvme_free -= na;
			where[i] = PLAN_NVME;
		} else {
			continue;
		}
		nv->idx[ranked[i]] = (uint32_t)(i + 1); /* temporary: rank + 1 */
		m++;
	}
	int rc = node_alloc(nv, m);
	if (rc) {
		free(where);
		return rc;
	}
	/* second pass, in order of first read: offsets in fill order, so a tier
	 * region fills front to back as the replicas arrive */
	for (uint64_t j = 0; j < r->ncand; j++) {
		if (j + 16 < r->ncand) {
			uint32_t a = r->cand[j + 16];
			__builtin_prefetch(c ? (const void *)&c->samples[a].length : &lens[a]);
			__builtin_prefetch(&nv->idx[a], 1);
			__builtin_prefetch(&r->first[a]);
		}
		uint32_t s = r->cand[j];
		if (!nv->idx[s])
			continue;
		uint8_t t = where[nv->idx[s] - 1];
		uint64_t len = c ? c->samples[s].length : lens[s];
		uint64_t i = nv->nrepl++;
		nv->smp[i] = s;
		nv->tier[i] = t;
		nv->due[i] = r->first[s];
		nv->ready[i] = nv->bpe;
		if (t == PLAN_RAM) {
			nv->off[i] = nv->ram_used;
			nv->ram_used += ALIGN_UP(len, (uint64_t)PLAN_RAM_ALIGN);
			nv->repl_ram += len;
		} else {
			nv->off[i] = nv->nvme_used;
			nv->nvme_used += ALIGN_UP(len, align);
		}
		nv->repl_bytes += len;
		nv->idx[s] = (uint32_t)(i + 1);
	}
	free(where);
	return 0;
}

/* ready[i]: the step of the first epoch at which the owner first reads the
 * sample, i.e. loads it (position i < n of the epoch order is a sample's
 * first; positions past the read ones are loaded by the end: bpe). */
static int node_ready(struct plan_node *nv, const struct sampler_shape *sh, uint64_t first_epoch,
		      const struct plan_orders *orders, uint32_t *scratch)
{
	const uint32_t *order = epoch_order(orders, sh, first_epoch, scratch);
	if (!order)
		return -ENOMEM;
	uint64_t read = sh->per_rank * sh->world;
	for (uint64_t pos = 0; pos < sh->n; pos++) {
		if (pos + 16 < sh->n)
			__builtin_prefetch(&nv->idx[order[pos + 16]]);
		uint32_t i = nv->idx[order[pos]];
		if (i && pos < read)
			nv->ready[i - 1] = (uint32_t)((pos / sh->world) / sh->batch);
	}
	return 0;
}

int plan_node_build(struct plan_node *nv, const struct plan *p, const struct catalog *c,
		    const uint64_t *len, const struct sampler_shape *sh, uint64_t first_epoch,
		    uint64_t epochs, const uint32_t *rank_node, uint32_t node,
		    const struct plan_cap *cap, const struct plan_repl_opts *o,
		    const struct plan_orders *orders)
{
	memset(nv, 0, sizeof(*nv));
	if (!p || !sh || !rank_node || !cap || !o || (!c && !len) || node >= p->nnodes ||
	    p->n != sh->n)
		return -EINVAL;
	struct rsel r = { 0 };
	nv->node = node;
	nv->n = sh->n;
	nv->bpe = (uint32_t)sh->bpe;
	nv->first_epoch = first_epoch;
	nv->fill = o->fill == PLAN_FILL_AUTO ? plan_fill_choose(o->fill, o->pfs_bw, o->net_bw,
							       p->nnodes) : o->fill;
	nv->ram_used = p->ram_used[node];
	nv->nvme_used = p->nvme_used[node];
	for (uint32_t k = 0; k < sh->world; k++)
		r.nranks += rank_node[k] == node;
	nv->reads_per_step = r.nranks * sh->batch;
	nv->idx = calloc(sh->n, sizeof(uint32_t));
	if (!nv->idx)
		goto nomem;
	bool spare = cap->ram > nv->ram_used || cap->nvme > nv->nvme_used;
	if (!o->on || epochs <= 1 || r.nranks == 0 || !spare) {
		if (node_alloc(nv, 0) == 0)
			return 0;
		goto nomem;
	}
	if ((epochs - 1) * sh->bpe * nv->reads_per_step >= UINT32_MAX) {
		plan_node_free(nv);
		return -EOVERFLOW;
	}
	r.cnt = calloc(sh->n, sizeof(uint16_t));
	r.first = malloc(sh->n * sizeof(uint32_t));
	r.cand = malloc(sh->n * sizeof(uint32_t));
	r.ranks = malloc(r.nranks * sizeof(uint32_t));
	r.buf = malloc(sh->per_rank * r.nranks * sizeof(uint32_t));
	if (!(orders && orders->get))
		r.perm = malloc(sh->n * sizeof(uint32_t));
	if (!r.cnt || !r.first || !r.cand || !r.ranks || !r.buf ||
	    (!(orders && orders->get) && !r.perm))
		goto nomem;
	r.nranks = 0;
	for (uint32_t k = 0; k < sh->world; k++)
		if (rank_node[k] == node)
			r.ranks[r.nranks++] = k;
	uint32_t *ranked = NULL;
	int rc = rsel_walk(&r, p, sh, first_epoch, epochs, node, orders);
	if (rc == 0)
		rc = rsel_rank(&r, &ranked);
	if (rc == 0)
		rc = node_place(nv, &r, ranked, len ? NULL : c, len, cap); /* len wins */
	free(ranked);
	if (rc == 0 && nv->nrepl)
		rc = node_ready(nv, sh, first_epoch, orders, r.perm ? r.perm : r.first);
	rsel_free(&r);
	if (rc)
		plan_node_free(nv);
	return rc;
nomem:
	rsel_free(&r);
	plan_node_free(nv);
	return -ENOMEM;
}
