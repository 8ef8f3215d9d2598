/* The placement plan by files (plan.h, plan_build_files): for datasets read
 * by coalesced extents, where a file's samples are best cached together.
 *
 * plan_build gives each sample to the node that reads it first, so the
 * first epoch caches bytes it reads anyway -- but a packed file's samples
 * then spread over every node, and each node reads its share of every file
 * sample by sample. Here each file (all its samples) goes to one owner: the
 * node whose trainers read most of its bytes in the first epoch, among the
 * nodes that still have room for the whole file and have not taken more
 * than their share of the files yet (so the first epoch's reading is spread
 * over the nodes). In the first epoch the owner reads the file once, in a
 * few large extents, and the other nodes get their samples from it over the
 * network. Files are placed in the order of their first need, each in file
 * order (RAM before NVMe, like plan_build); what does not fit its owner
 * goes to the nodes with room, in the same order of preference. Any static
 * set is optimal for the PFS bytes (plan.h): the first epoch reads every
 * byte once whoever caches it, later epochs the bytes outside the set.
 *
 * One-sample files have nothing to coalesce: their owner is the first
 * reader, as in plan_build. Pure function of its arguments. Memory: a count
 * per (multi-sample file, node), 8 bytes each, plus 4 bytes per file and
 * per sample; when the counts would pass PLAN_GROUP_MAX_COUNTS the plan is
 * plan_build's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "../util/util.h"

#define PLAN_GROUP_MAX_COUNTS (64ull << 20)

struct grp {
	const struct catalog *c;
	uint32_t nnodes;
	uint32_t *mix;        /* per file: index among multi-sample files + 1, or 0 */
	uint64_t *reads;      /* per (multi-sample file, node): bytes read in epoch 1 */
	uint32_t *first_node; /* per file: node of its first reader (UINT32_MAX: none) */
	uint32_t *forder;     /* files in order of first need */
	uint32_t nf;
	uint64_t *owned;      /* per node: bytes of the files it owns so far */
};

static void grp_free(struct grp *g)
{
	free(g->mix);
	free(g->reads);
	free(g->first_node);
	free(g->forder);
	free(g->owned);
}

/* Walk the first epoch in order of need: per file, its first reader and the
 * bytes each node reads of it; files in order of first need. */
static void grp_walk(struct grp *g, const struct sampler_shape *sh, const uint32_t *order,
		     const uint32_t *rank_node)
{
	const struct catalog *c = g->c;
	for (uint64_t step = 0; step < sh->bpe; step++) {
		uint32_t blen = sampler_batch_len(sh, step);
		for (uint32_t r = 0; r < sh->world; r++) {
			for (uint32_t i = 0; i < blen; i++) {
				uint32_t s = sampler_at(sh, order, sampler_position(sh, r, step, i));
				uint32_t f = c->samples[s].file, node = rank_node[r];
				if (g->first_node[f] == UINT32_MAX) {
					g->first_node[f] = node;
					g->forder[g->nf++] = f;
				}
				if (g->mix[f])
					g->reads[(uint64_t)(g->mix[f] - 1) * g->nnodes + node] +=
						c->samples[s].length;
			}
		}
	}
	for (uint32_t f = 0; f < c->nfiles; f++)
		if (g->first_node[f] == UINT32_MAX)
			g->forder[g->nf++] = f; /* nobody reads it in the first epoch */
}

static uint64_t node_free(const struct plan *p, const struct plan_cap *cap, uint32_t k)
{
	uint64_t ram = cap[k].ram > p->ram_used[k] ? cap[k].ram - p->ram_used[k] : 0;
	uint64_t nvme = cap[k].nvme > p->nvme_used[k] ? cap[k].nvme - p->nvme_used[k] : 0;
	return ram + nvme;
}

/* Nodes in order of preference for file f: most bytes read first, then its
 * first reader, then by index. */
static void grp_prefs(const struct grp *g, uint32_t f, uint32_t *pref)
{
	uint32_t n = g->nnodes;
	const uint64_t *rd = g->mix[f] ? &g->reads[(uint64_t)(g->mix[f] - 1) * n] : NULL;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t at = k;
		while (at > 0) {
			uint32_t q = pref[at - 1];
			uint64_t a = rd ? rd[k] : 0, b = rd ? rd[q] : 0;
			bool better = a > b || (a == b && k == g->first_node[f] && q != k);
			if (!better)
				break;
			pref[at] = q;
			at--;
		}
		pref[at] = k;
	}
}

/* The owner of file f (bytes `need` with alignment): the first preferred
 * node with room for all of it within its share of the files, else the
 * first with room, else the first preferred. */
static uint32_t grp_owner(const struct grp *g, const struct plan *p, const struct plan_cap *cap,
			  const uint32_t *pref, uint64_t need, uint64_t share)
{
	for (uint32_t j = 0; j < g->nnodes; j++)
		if (node_free(p, cap, pref[j]) >= need && g->owned[pref[j]] + need <= share)
			return pref[j];
	for (uint32_t j = 0; j < g->nnodes; j++)
		if (node_free(p, cap, pref[j]) >= need)
			return pref[j];
	return pref[0];
}

/* File f's samples in file order: to its owner while it has room, then to
 * the other nodes in order of preference. */
static void grp_place(struct grp *g, struct plan *p, const struct plan_cap *cap, uint32_t f,
		      const uint32_t *pref, uint64_t share)
{
	const struct catalog *c = g->c;
	const struct catalog_file *cf = &c->files[f];
	uint64_t need = 0;
	for (uint64_t s = cf->first; s < cf->first + cf->nsamples; s++)
		need += ALIGN_UP(c->samples[s].length, (uint64_t)PLAN_RAM_ALIGN);
	/* one-sample files: the first reader while it has room, as plan_build */
	uint32_t owner = grp_owner(g, p, cap, pref, need, g->mix[f] ? share : UINT64_MAX);
	g->owned[owner] += need;
	uint32_t j = 0; /* the spill target after the owner, in pref order */
	for (uint64_t s = cf->first; s < cf->first + cf->nsamples; s++) {
		uint64_t len = c->samples[s].length;
		if (plan_place(p, (uint32_t)s, len, owner, cap)) {
			if (owner != pref[0])
				p->spilled++;
			continue;
		}
		for (; j < g->nnodes; j++) {
			if (pref[j] == owner)
				continue;
			if (plan_place(p, (uint32_t)s, len, pref[j], cap)) {
				p->spilled++;
				break;
			}
		}
	}
}

int plan_build_files(struct plan *p, const struct catalog *c, const struct sampler_shape *sh,
		     uint64_t first_epoch, const uint32_t *rank_node, uint32_t nnodes,
		     const struct plan_cap *cap)
{
	struct grp g = { .c = c, .nnodes = nnodes };
	uint64_t multi = 0;
	for (uint32_t f = 0; f < c->nfiles; f++)
		multi += c->files[f].nsamples > 1;
	if (nnodes == 0 || multi == 0 || multi * nnodes > PLAN_GROUP_MAX_COUNTS ||
	    c->nsamples != sh->n)
		return plan_build(p, c, sh, first_epoch, rank_node, nnodes, cap);
	if (plan_check_nodes(sh, rank_node, nnodes) != 0)
		return -EINVAL;
	memset(p, 0, sizeof(*p));
	p->n = c->nsamples;
	p->nnodes = nnodes;
	p->tier = calloc(p->n, 1);
	p->owner = calloc(p->n, sizeof(uint16_t));
	p->off = calloc(p->n, sizeof(uint64_t));
	p->ram_used = calloc(nnodes, sizeof(uint64_t));
	p->nvme_used = calloc(nnodes, sizeof(uint64_t));
	g.mix = calloc(c->nfiles ? c->nfiles : 1, sizeof(uint32_t));
	g.reads = calloc(MAX(multi * nnodes, (uint64_t)1), sizeof(uint64_t));
	g.first_node = malloc((c->nfiles ? c->nfiles : 1) * sizeof(uint32_t));
	g.forder = malloc((c->nfiles ? c->nfiles : 1) * sizeof(uint32_t));
	g.owned = calloc(nnodes, sizeof(uint64_t));
	uint32_t *order = malloc((p->n ? p->n : 1) * sizeof(uint32_t));
	uint32_t *pref = malloc(nnodes * sizeof(uint32_t));
	if (!p->tier || !p->owner || !p->off || !p->ram_used || !p->nvme_used || !g.mix ||
	    !g.reads || !g.first_node || !g.forder || !g.owned || !order || !pref) {
		grp_free(&g);
		free(order);
		free(pref);
		plan_free(p);
		return -ENOMEM;
	}
	uint32_t m = 0;
	for (uint32_t f = 0; f < c->nfiles; f++) {
		g.first_node[f] = UINT32_MAX;
		if (c->files[f].nsamples > 1)
			g.mix[f] = ++m;
	}
	if (sh->shuffle)
		sampler_permute(sh->seed, first_epoch, p->n, order);
	else
		for (uint64_t i = 0; i < p->n; i++)
			order[i] = (uint32_t)i;
	grp_walk(&g, sh, order, rank_node);
	/* a node's share of the files: an even split (a file no node can take
	 * within its share goes to the preferred node with room) */
	uint64_t total = 0;
	for (uint32_t f = 0; f < c->nfiles; f++)
		for (uint64_t s = c->files[f].first; s < c->files[f].first + c->files[f].nsamples; s++)
			total += ALIGN_UP(c->samples[s].length, (uint64_t)PLAN_RAM_ALIGN);
	uint64_t share = (total + nnodes - 1) / nnodes;
	for (uint32_t i = 0; i < g.nf; i++) {
		grp_prefs(&g, g.forder[i], pref);
		grp_place(&g, p, cap, g.forder[i], pref, share);
	}
	grp_free(&g);
	free(order);
	free(pref);
	return 0;
}
