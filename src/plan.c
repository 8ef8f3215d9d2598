#include "plan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

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

static int build(struct plan *p, const struct catalog *c, const uint64_t *lens, uint64_t n,
		 const struct smp_shape *sh, uint64_t first_epoch, const uint32_t *rank_node,
		 uint32_t nnodes, const struct plan_cap *cap)
{
	memset(p, 0, sizeof(*p));
	if (nnodes == 0 || nnodes > UINT16_MAX || n != sh->n)
		return -EINVAL;
	for (uint32_t r = 0; r < sh->world; r++)
		if (rank_node[r] >= nnodes)
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
	if (!p->tier || !p->owner || !p->off || !p->ram_used || !p->nvme_used || !order || !seen ||
	    !spill) {
		free(order);
		free(seen);
		free(spill);
		plan_free(p);
		return -ENOMEM;
	}
	if (sh->shuffle)
		smp_permute(sh->seed, first_epoch, n, order);
	else
		for (uint64_t i = 0; i < n; i++)
			order[i] = (uint32_t)i;

	/* pass 1: walk the first epoch in order of need (step-major, then rank),
	 * give each sample to the node that reads it first while it has room */
	uint64_t nspill = 0;
	for (uint64_t step = 0; step < sh->bpe; step++) {
		uint32_t blen = smp_batch_len(sh, step);
		for (uint32_t r = 0; r < sh->world; r++) {
			for (uint32_t i = 0; i < blen; i++) {
				uint32_t s = smp_at(sh, order, smp_position(sh, r, step, i));
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

	/* pass 2: spill to nodes with room, round-robin, in order of need */
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
	free(order);
	free(seen);
	free(spill);
	return 0;
}

int plan_build(struct plan *p, const struct catalog *c, const struct smp_shape *sh,
	       uint64_t first_epoch, const uint32_t *rank_node, uint32_t nnodes,
	       const struct plan_cap *cap)
{
	return build(p, c, NULL, c->nsamples, sh, first_epoch, rank_node, nnodes, cap);
}

int plan_build_lengths(struct plan *p, const uint64_t *len, uint64_t n, const struct smp_shape *sh,
		       uint64_t first_epoch, const uint32_t *rank_node, uint32_t nnodes,
		       const struct plan_cap *cap)
{
	return build(p, NULL, len, n, sh, first_epoch, rank_node, nnodes, cap);
}
