/* A job for the plan, forecast and simulation tests: sizes, ranks on nodes,
 * capacities, and the plansim_job describing them (block placement). */
#ifndef SEER_TEST_PLAN_FIXTURE_H
#define SEER_TEST_PLAN_FIXTURE_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/plan/plan.h"
#include "../../src/sim/plansim.h"
#include "../../src/sampler/sampler.h"

#define KiB 1024ull

struct tjob {
	struct sampler_shape sh;
	uint64_t *len;
	uint32_t *rank_node;
	struct plan_cap *cap;
	struct plansim_job job;
};

static inline void tjob_init(struct tjob *t, uint64_t n, uint32_t nodes, uint32_t tpn,
			     uint32_t batch, bool drop_last, uint64_t epochs, uint64_t seed)
{
	memset(t, 0, sizeof(*t));
	cr_assert_eq(sampler_shape_init(&t->sh, n, seed, nodes * tpn, batch, drop_last, true), 0);
	t->len = calloc(n, sizeof(uint64_t));
	t->rank_node = calloc(nodes * tpn, sizeof(uint32_t));
	t->cap = calloc(nodes, sizeof(struct plan_cap));
	cr_assert(t->len && t->rank_node && t->cap);
	for (uint32_t r = 0; r < nodes * tpn; r++)
		t->rank_node[r] = r / tpn;
	t->job = (struct plansim_job){ .len = t->len, .sh = &t->sh, .epochs = epochs, .nnodes = nodes,
				    .rank_node = t->rank_node, .cap = t->cap,
				    .nopfs_fill = PLANSIM_FILL_READ };
}

static inline void tjob_sizes(struct tjob *t, uint64_t size)
{
	for (uint64_t s = 0; s < t->sh.n; s++)
		t->len[s] = size;
}

static inline void tjob_caps(struct tjob *t, uint64_t ram, uint64_t nvme)
{
	for (uint32_t k = 0; k < t->job.nnodes; k++)
		t->cap[k] = (struct plan_cap){ .ram = ram, .nvme = nvme };
}

static inline void tjob_free(struct tjob *t)
{
	free(t->len);
	free(t->rank_node);
	free(t->cap);
}

#endif /* SEER_TEST_PLAN_FIXTURE_H */
