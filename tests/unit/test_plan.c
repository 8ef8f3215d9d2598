/* plan and plansim: the placement plan, and the byte accounting of seer's
 * plan, NoPFS-style rank caches, per-node LRU and the optimum.
 *
 * First readers and the LRU reference below walk the access sequence through
 * the sampler's public batch API (sampler_batch), not through the walkers the
 * code under test uses. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/plan/plan.h"
#include "../../src/sim/plansim.h"
#include "../../src/sampler/sampler.h"



#include "plan_fixture.h"

static struct plansim_result run(const struct tjob *t, enum plansim_policy p)
{
	struct plansim_result r;
	int rc = plansim_run(&t->job, p, &r);
	cr_assert_eq(rc, 0, "%s: %d", plansim_policy_name(p), rc);
	return r;
}

/* Node of the first reader of every sample in epoch 0 (UINT32_MAX: unread),
 * walking batches step by step, rank by rank. */
static uint32_t *first_readers(const struct tjob *t)
{
	const struct sampler_shape *sh = &t->sh;
	struct sampler_cache c;
	cr_assert_eq(sampler_cache_init(&c, sh), 0);
	uint32_t *first = malloc(sh->n * sizeof(uint32_t));
	uint32_t *ids = malloc(sh->batch * sizeof(uint32_t));
	cr_assert(first && ids);
	memset(first, 0xff, sh->n * sizeof(uint32_t));
	for (uint64_t step = 0; step < sh->bpe; step++) {
		for (uint32_t r = 0; r < sh->world; r++) {
			int m = sampler_batch(&c, 0, r, step, ids);
			cr_assert_gt(m, 0);
			for (int i = 0; i < m; i++)
				if (first[ids[i]] == UINT32_MAX)
					first[ids[i]] = t->rank_node[r];
		}
	}
	free(ids);
	sampler_cache_free(&c);
	return first;
}

/* ---- plan_build --------------------------------------------------------------- */

static int cmp_off(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;
	return (x[0] > y[0]) - (x[0] < y[0]);
}

/* Every cached sample sits in one (node, tier) region, inside the capacity,
 * overlapping no other; the totals add up. */
static void check_plan(const struct plan *p, const struct tjob *t)
{
	uint64_t n = t->sh.n, cached = 0, bytes = 0;
	uint64_t (*iv)[2] = malloc(n * sizeof(*iv));
	cr_assert_not_null(iv);
	for (uint32_t k = 0; k < p->nnodes; k++) {
		for (int tier = PLAN_RAM; tier <= PLAN_NVME; tier++) {
			uint64_t align = tier == PLAN_RAM ? PLAN_RAM_ALIGN : PLAN_NVME_ALIGN;
			uint64_t capb = tier == PLAN_RAM ? t->cap[k].ram : t->cap[k].nvme;
			uint64_t used = tier == PLAN_RAM ? p->ram_used[k] : p->nvme_used[k];
			uint64_t m = 0, sum = 0;
			for (uint64_t s = 0; s < n; s++) {
				if (p->tier[s] != tier || p->owner[s] != k)
					continue;
				uint64_t a = (t->len[s] + align - 1) / align * align;
				cr_assert_eq(p->off[s] % align, 0, "sample %llu misaligned",
					     (unsigned long long)s);
				iv[m][0] = p->off[s];
				iv[m][1] = p->off[s] + a;
				m++;
				sum += a;
			}
			qsort(iv, m, sizeof(*iv), cmp_off);
			for (uint64_t i = 0; i + 1 < m; i++)
				cr_assert_leq(iv[i][1], iv[i + 1][0], "node %u tier %d: overlap", k, tier);
			if (m)
				cr_assert_leq(iv[m - 1][1], capb, "node %u tier %d: past capacity", k, tier);
			cr_assert_eq(sum, used, "node %u tier %d: used %llu, placed %llu", k, tier,
				     (unsigned long long)used, (unsigned long long)sum);
			cr_assert_leq(used, capb);
		}
	}
	for (uint64_t s = 0; s < n; s++) {
		cr_assert_leq(p->tier[s], PLAN_NVME);
		if (p->tier[s] != PLAN_NONE) {
			cr_assert_lt(p->owner[s], p->nnodes);
			cached++;
			bytes += t->len[s];
		}
	}
	cr_assert_eq(cached, p->cached_samples);
	cr_assert_eq(bytes, p->cached_bytes);
	free(iv);
}

static struct plan build(const struct tjob *t)
{
	struct plan p;
	int rc = plan_build_lengths(&p, t->len, t->sh.n, &t->sh, 0, t->rank_node, t->job.nnodes,
				    t->cap);
	cr_assert_eq(rc, 0, "plan_build_lengths: %d", rc);
	return p;
}

struct capcase {
	uint64_t ram, nvme; /* per node, in KiB */
	bool drop_last;
};

ParameterizedTestParameters(plan, within_capacity)
{
	static struct capcase cases[] = {
		{ 0, 0, false },        { 64, 0, false },      { 0, 4096, false },
		{ 1000, 3000, false },  { 20000, 0, false },   { 20000, 80000, false },
		{ 1000, 3000, true },   { 100000, 100000, true },
	};
	return cr_make_param_array(struct capcase, cases, sizeof(cases) / sizeof(cases[0]));
}

/* Variable sizes, capacities from none to more than the dataset. */
ParameterizedTest(struct capcase *c, plan, within_capacity)
{
	struct tjob t;
	tjob_init(&t, 3001, 4, 3, 7, c->drop_last, 1, 11);
	plansim_lognormal_sizes(t.len, t.sh.n, 20000, 15000, 5);
	tjob_caps(&t, c->ram * KiB, c->nvme * KiB);
	struct plan p = build(&t);
	check_plan(&p, &t);
	uint64_t d = 0;
	for (uint64_t s = 0; s < t.sh.n; s++)
		d += t.len[s];
	if ((c->ram + c->nvme) * KiB * 4 >= 2 * d)
		cr_assert_eq(p.cached_samples, t.sh.n, "ample room, yet %llu of %llu cached",
			     (unsigned long long)p.cached_samples, (unsigned long long)t.sh.n);
	plan_free(&p);
	tjob_free(&t);
}

/* Aggregate >= dataset and every node has room for what it reads first:
 * everything is cached, each sample on its first reader's node. */
Test(plan, owners_are_first_readers)
{
	struct tjob t;
	tjob_init(&t, 4000, 4, 2, 10, false, 1, 3);
	tjob_sizes(&t, 4 * KiB);
	/* 1000 first reads per node: 600 in RAM, 400+ in NVMe */
	tjob_caps(&t, 600 * 4 * KiB, 500 * 4 * KiB);
	struct plan p = build(&t);
	check_plan(&p, &t);
	uint32_t *first = first_readers(&t);
	cr_assert_eq(p.cached_samples, t.sh.n);
	cr_assert_eq(p.spilled, 0);
	uint64_t ram = 0;
	for (uint64_t s = 0; s < t.sh.n; s++) {
		cr_assert_eq(p.owner[s], first[s], "sample %llu: owner %u, first reader %u",
			     (unsigned long long)s, p.owner[s], first[s]);
		ram += p.tier[s] == PLAN_RAM;
	}
	cr_assert_eq(ram, 4 * 600);
	free(first);
	plan_free(&p);
	tjob_free(&t);
}

/* Variable sizes, room to spare on every node: still no spill. */
Test(plan, no_spill_when_balanced_variable_sizes)
{
	struct tjob t;
	tjob_init(&t, 5000, 5, 4, 16, false, 1, 9);
	plansim_lognormal_sizes(t.len, t.sh.n, 50000, 30000, 1);
	uint64_t d = 0;
	for (uint64_t s = 0; s < t.sh.n; s++)
		d += t.len[s];
	tjob_caps(&t, d / 5 / 2, d / 5); /* 1.5x the node's share */
	struct plan p = build(&t);
	check_plan(&p, &t);
	uint32_t *first = first_readers(&t);
	cr_assert_eq(p.cached_samples, t.sh.n);
	cr_assert_eq(p.spilled, 0);
	for (uint64_t s = 0; s < t.sh.n; s++)
		cr_assert_eq(p.owner[s], first[s]);
	free(first);
	plan_free(&p);
	tjob_free(&t);
}

/* One node with no room: what it reads first goes to the others. */
Test(plan, spills_to_nodes_with_room)
{
	struct tjob t;
	tjob_init(&t, 3000, 3, 1, 10, false, 1, 4);
	tjob_sizes(&t, 4 * KiB);
	tjob_caps(&t, 1500 * 4 * KiB, 0);
	t.cap[0].ram = 0;
	struct plan p = build(&t);
	check_plan(&p, &t);
	uint32_t *first = first_readers(&t);
	cr_assert_eq(p.cached_samples, t.sh.n);
	cr_assert_eq(p.spilled, 1000);
	for (uint64_t s = 0; s < t.sh.n; s++) {
		cr_assert_neq(p.owner[s], 0);
		if (first[s] != 0)
			cr_assert_eq(p.owner[s], first[s]);
	}
	free(first);
	plan_free(&p);
	tjob_free(&t);
}

/* ---- seer against the optimum -------------------------------------------------- */

static void assert_accounting(const struct plansim_result *r, const struct tjob *t)
{
	uint64_t reads = t->sh.per_rank * t->sh.world;
	for (uint64_t e = 0; e < r->epochs; e++) {
		const struct plansim_epoch *x = &r->ep[e];
		cr_assert_eq(x->pfs - x->fill + x->peer + x->ram + x->nvme, x->demand,
			     "%s epoch %llu: bytes do not add up", plansim_policy_name(r->policy),
			     (unsigned long long)e);
		if (t->len[0] == t->len[t->sh.n - 1] && t->len[0] == t->len[t->sh.n / 2])
			cr_assert_eq(x->demand, reads * t->len[0]);
		cr_assert_leq(x->peer_max, x->peer);
	}
}

struct regime {
	const char *name;
	uint64_t ram, nvme; /* per node, in samples of 4 KiB */
};

ParameterizedTestParameters(plansim, seer_is_optimal)
{
	/* 4800 samples, 4 nodes x 2 trainers: 1200 first reads per node */
	static struct regime r[] = {
		{ "dataset <= aggregate RAM", 1500, 0 },
		{ "dataset = aggregate RAM", 1200, 0 },
		{ "aggregate RAM < dataset <= RAM + NVMe", 700, 700 },
		{ "dataset = RAM + NVMe", 500, 700 },
		{ "dataset = 3x (RAM + NVMe)", 250, 150 },
		{ "no cache", 0, 0 },
	};
	return cr_make_param_array(struct regime, r, sizeof(r) / sizeof(r[0]));
}

ParameterizedTest(struct regime *g, plansim, seer_is_optimal)
{
	struct tjob t;
	tjob_init(&t, 4800, 4, 2, 12, false, 5, 21);
	tjob_sizes(&t, 4 * KiB);
	tjob_caps(&t, g->ram * 4 * KiB, g->nvme * 4 * KiB);
	struct plansim_result s = run(&t, PLANSIM_SEER), o = run(&t, PLANSIM_OPTIMUM);
	assert_accounting(&s, &t);
	cr_assert_eq(s.spilled, 0, "%s", g->name);
	for (uint64_t e = 0; e < 5; e++)
		cr_assert_eq(s.ep[e].pfs, o.ep[e].pfs, "%s, epoch %llu: seer %llu, optimum %llu",
			     g->name, (unsigned long long)e, (unsigned long long)s.ep[e].pfs,
			     (unsigned long long)o.ep[e].pfs);
	uint64_t d = 4800 * 4 * KiB, c = 4 * (g->ram + g->nvme) * 4 * KiB;
	c = c < d ? c : d;
	cr_assert_eq(o.total.pfs, d + (d - c) * 4);
	cr_assert_eq(s.total.pfs, o.total.pfs);
	/* what the plan caches is read locally or from a peer, in tier */
	cr_assert_eq(s.ep[1].ram + s.ep[1].nvme + s.ep[1].peer, c);
	if (g->nvme == 0)
		cr_assert_eq(s.total.nvme, 0);
	plansim_result_free(&s);
	plansim_result_free(&o);
	tjob_free(&t);
}

/* A spilled sample costs its owner one more PFS read, in epoch 0 only. */
Test(plansim, seer_spill_costs_one_read)
{
	struct tjob t;
	tjob_init(&t, 1000, 2, 1, 10, false, 3, 8);
	tjob_sizes(&t, 8 * KiB);
	t.cap[0] = (struct plan_cap){ .ram = 0, .nvme = 0 };
	t.cap[1] = (struct plan_cap){ .ram = 1000 * 8 * KiB, .nvme = 0 };
	struct plansim_result s = run(&t, PLANSIM_SEER);
	assert_accounting(&s, &t);
	cr_assert_eq(s.spilled, 500);
	cr_assert_eq(s.ep[0].fill, 500 * 8 * KiB);
	cr_assert_eq(s.ep[0].pfs, 1500 * 8 * KiB);
	for (int e = 1; e < 3; e++) {
		cr_assert_eq(s.ep[e].pfs, 0);
		cr_assert_eq(s.ep[e].peer, 500 * 8 * KiB); /* node 0 reads everything from node 1 */
		cr_assert_eq(s.ep[e].peer_max, 500 * 8 * KiB);
		cr_assert_eq(s.ep[e].ram, 500 * 8 * KiB);
	}
	plansim_result_free(&s);
	tjob_free(&t);
}

/* 1 node, 10 samples, room for 5, 3 epochs: 10 + 5 + 5 reads. */
Test(plansim, hand_checked)
{
	struct tjob t;
	tjob_init(&t, 10, 1, 1, 2, false, 3, 0);
	tjob_sizes(&t, 4 * KiB);
	tjob_caps(&t, 5 * 4 * KiB, 0);
	for (enum plansim_policy p = PLANSIM_SEER; p <= PLANSIM_OPTIMUM; p++) {
		if (p == PLANSIM_LRU)
			continue;
		struct plansim_result r = run(&t, p);
		cr_assert_eq(r.ep[0].pfs, 10 * 4 * KiB, "%s", plansim_policy_name(p));
		cr_assert_eq(r.ep[1].pfs, 5 * 4 * KiB, "%s", plansim_policy_name(p));
		cr_assert_eq(r.ep[2].pfs, 5 * 4 * KiB, "%s", plansim_policy_name(p));
		plansim_result_free(&r);
	}
	/* two nodes, each reading 5 first and holding 5: nothing after epoch 0 */
	struct tjob u;
	tjob_init(&u, 10, 2, 1, 1, false, 3, 0);
	tjob_sizes(&u, 4 * KiB);
	tjob_caps(&u, 5 * 4 * KiB, 0);
	struct plansim_result r = run(&u, PLANSIM_SEER);
	cr_assert_eq(r.ep[0].pfs, 10 * 4 * KiB);
	cr_assert_eq(r.ep[1].pfs, 0);
	cr_assert_eq(r.ep[2].pfs, 0);
	cr_assert_eq(r.ep[1].ram + r.ep[1].peer, 10 * 4 * KiB);
	plansim_result_free(&r);
	tjob_free(&u);
	tjob_free(&t);
}

/* ---- LRU ---------------------------------------------------------------------- */

/* Reference LRU, equal sizes, one tier, `slots` samples per node: recency
 * stamps and a linear search for the oldest. Returns PFS reads per epoch. */
static void ref_lru(const struct tjob *t, uint64_t slots, uint64_t *misses)
{
	const struct sampler_shape *sh = &t->sh;
	uint32_t nn = t->job.nnodes;
	uint64_t *stamp = calloc((size_t)nn * sh->n, sizeof(uint64_t)); /* 0: not cached */
	uint64_t *count = calloc(nn, sizeof(uint64_t));
	uint32_t *ids = malloc(sh->batch * sizeof(uint32_t));
	struct sampler_cache c;
	cr_assert(stamp && count && ids && sampler_cache_init(&c, sh) == 0);
	uint64_t clock = 0;
	for (uint64_t e = 0; e < t->job.epochs; e++) {
		misses[e] = 0;
		for (uint64_t step = 0; step < sh->bpe; step++) {
			for (uint32_t r = 0; r < sh->world; r++) {
				int m = sampler_batch(&c, e, r, step, ids);
				uint32_t k = t->rank_node[r];
				uint64_t *st = &stamp[(size_t)k * sh->n];
				for (int i = 0; i < m; i++) {
					uint32_t s = ids[i];
					if (st[s]) {
						st[s] = ++clock;
						continue;
					}
					misses[e]++;
					if (slots == 0)
						continue;
					if (count[k] == slots) {
						uint64_t old = 0;
						for (uint64_t x = 0; x < sh->n; x++)
							if (st[x] && (!old || st[x] < st[old - 1]))
								old = x + 1;
						st[old - 1] = 0;
						count[k]--;
					}
					st[s] = ++clock;
					count[k]++;
				}
			}
		}
	}
	sampler_cache_free(&c);
	free(ids);
	free(count);
	free(stamp);
}

/* Against the reference, over enough reads that the recency logs are
 * squeezed and grown; RAM + NVMe behaves as one LRU of the sum. */
Test(plansim, lru_matches_reference)
{
	enum { E = 12, SLOTS = 1200 }; /* the logs start at 1024 entries: they must grow */
	struct tjob t;
	tjob_init(&t, 4000, 3, 2, 5, false, E, 13);
	tjob_sizes(&t, 4 * KiB);
	uint64_t want[E];
	ref_lru(&t, SLOTS, want);
	const uint64_t split[][2] = { { SLOTS, 0 }, { 0, SLOTS }, { 500, 700 }, { SLOTS - 1, 1 } };
	for (size_t i = 0; i < sizeof(split) / sizeof(split[0]); i++) {
		tjob_caps(&t, split[i][0] * 4 * KiB, split[i][1] * 4 * KiB);
		struct plansim_result r = run(&t, PLANSIM_LRU);
		assert_accounting(&r, &t);
		for (int e = 0; e < E; e++)
			cr_assert_eq(r.ep[e].pfs, want[e] * 4 * KiB,
				     "RAM %llu + NVMe %llu, epoch %d: %llu reads, reference %llu",
				     (unsigned long long)split[i][0], (unsigned long long)split[i][1],
				     e, (unsigned long long)(r.ep[e].pfs / (4 * KiB)),
				     (unsigned long long)want[e]);
		cr_assert_eq(r.total.peer, 0);
		cr_assert_eq(r.held, 3 * SLOTS * 4 * KiB);
		if (split[i][1] == 0)
			cr_assert_eq(r.total.nvme, 0);
		if (split[i][0] == 0)
			cr_assert_eq(r.total.ram, 0);
		plansim_result_free(&r);
	}
	tjob_free(&t);
}

/* DESIGN.md: 200,000 equal samples, 10 epochs, one node with one trainer
 * (exact shuffling of the whole dataset every epoch). */
Test(plansim, design_table, .timeout = 120)
{
	static const struct {
		double frac, opt, lru;
	} rows[] = { { 0.10, 9.10, 9.95 }, { 0.50, 5.50, 8.62 }, { 0.90, 1.90, 3.97 } };
	struct tjob t;
	tjob_init(&t, 200000, 1, 1, 32, false, 10, 0);
	tjob_sizes(&t, 4 * KiB);
	double d = 200000.0 * 4 * KiB;
	for (size_t i = 0; i < 3; i++) {
		tjob_caps(&t, (uint64_t)(rows[i].frac * 200000) * 4 * KiB, 0);
		struct plansim_result o = run(&t, PLANSIM_OPTIMUM), l = run(&t, PLANSIM_LRU),
				   s = run(&t, PLANSIM_SEER);
		double ro = (double)o.total.pfs / d, rl = (double)l.total.pfs / d;
		cr_assert_float_eq(ro, rows[i].opt, 1e-9, "optimum %.4f, table %.2f", ro, rows[i].opt);
		cr_assert_float_eq(rl, rows[i].lru, 0.02, "LRU %.4f, table %.2f", rl, rows[i].lru);
		cr_assert_eq(s.total.pfs, o.total.pfs);
		plansim_result_free(&o);
		plansim_result_free(&l);
		plansim_result_free(&s);
	}
	tjob_free(&t);
}

/* ---- every policy against the bound ----------------------------------------------- */

struct boundcase {
	uint32_t nodes, tpn, batch;
	uint64_t ram, nvme;  /* per node, KiB */
	bool lognormal, drop_last, cyclic;
};

ParameterizedTestParameters(plansim, never_below_optimum)
{
	static struct boundcase c[] = {
		{ 4, 4, 8, 256, 0, false, false, false },
		{ 4, 4, 8, 2048, 4096, false, false, true },
		{ 2, 3, 7, 8000, 8000, false, true, false },
		{ 3, 2, 7, 1000, 3000, true, false, false },
		{ 3, 2, 7, 10000, 30000, true, true, true },
		{ 1, 4, 6, 3000, 1000, true, false, false },
	};
	return cr_make_param_array(struct boundcase, c, sizeof(c) / sizeof(c[0]));
}

ParameterizedTest(struct boundcase *c, plansim, never_below_optimum)
{
	struct tjob t;
	tjob_init(&t, 3000, c->nodes, c->tpn, c->batch, c->drop_last, 6, 17);
	if (c->lognormal)
		plansim_lognormal_sizes(t.len, t.sh.n, 12000, 9000, 3);
	else
		tjob_sizes(&t, 12 * KiB);
	if (c->cyclic)
		for (uint32_t r = 0; r < c->nodes * c->tpn; r++)
			t.rank_node[r] = r % c->nodes;
	tjob_caps(&t, c->ram * KiB, c->nvme * KiB);
	struct plansim_result o = run(&t, PLANSIM_OPTIMUM);
	for (enum plansim_policy p = PLANSIM_SEER; p < PLANSIM_OPTIMUM; p++) {
		for (int fill = 0; fill < (p == PLANSIM_NOPFS ? 2 : 1); fill++) {
			t.job.nopfs_fill = fill ? PLANSIM_FILL_PREFETCH : PLANSIM_FILL_READ;
			struct plansim_result r = run(&t, p);
			assert_accounting(&r, &t);
			cr_assert_geq(r.total.pfs, o.total.pfs, "%s (fill %d): %llu below optimum %llu",
				      plansim_policy_name(p), fill, (unsigned long long)r.total.pfs,
				      (unsigned long long)o.total.pfs);
			for (uint64_t e = 0; e < 6; e++)
				cr_assert_eq(r.ep[e].demand, o.ep[e].demand);
			plansim_result_free(&r);
		}
	}
	plansim_result_free(&o);
	tjob_free(&t);
}

/* ---- NoPFS ------------------------------------------------------------------------- */

/* One rank: every sample is read once per epoch, so all frequencies tie and
 * the rank keeps the first ones it reads: exactly the optimum. */
Test(plansim, nopfs_single_rank_is_optimal)
{
	struct tjob t;
	tjob_init(&t, 2000, 1, 1, 10, false, 5, 6);
	tjob_sizes(&t, 4 * KiB);
	tjob_caps(&t, 300 * 4 * KiB, 500 * 4 * KiB);
	struct plansim_result n = run(&t, PLANSIM_NOPFS), o = run(&t, PLANSIM_OPTIMUM);
	assert_accounting(&n, &t);
	cr_assert_eq(n.total.pfs, o.total.pfs);
	cr_assert_eq(n.held, 800 * 4 * KiB);
	cr_assert_eq(n.ep[1].ram, 300 * 4 * KiB);
	cr_assert_eq(n.ep[1].nvme, 500 * 4 * KiB);
	plansim_result_free(&n);
	plansim_result_free(&o);
	tjob_free(&t);
}

/* Ranks on one node choose alone: copies repeat, fewer distinct samples are
 * held than seer holds, and more is read from the PFS. Prefetching the caches
 * never costs more PFS bytes than filling them on first read. */
Test(plansim, nopfs_duplicates)
{
	struct tjob t;
	tjob_init(&t, 4000, 2, 4, 10, false, 8, 2);
	tjob_sizes(&t, 4 * KiB);
	tjob_caps(&t, 800 * 4 * KiB, 400 * 4 * KiB);
	struct plansim_result n = run(&t, PLANSIM_NOPFS), s = run(&t, PLANSIM_SEER);
	t.job.nopfs_fill = PLANSIM_FILL_PREFETCH;
	struct plansim_result np = run(&t, PLANSIM_NOPFS);
	cr_assert_eq(n.held, 2 * 1200 * 4 * KiB, "each rank fills its share (%llu)",
		     (unsigned long long)n.held);
	cr_assert_lt(n.distinct, n.held);
	cr_assert_lt(n.distinct, s.distinct);
	cr_assert_gt(n.total.pfs, s.total.pfs);
	cr_assert_leq(np.total.pfs, n.total.pfs);
	cr_assert_eq(np.held, n.held);
	cr_assert_eq(np.ep[0].fill, np.held);
	/* once filled, every epoch misses exactly the samples nobody holds */
	for (int e = 1; e < 8; e++)
		cr_assert_eq(np.ep[e].pfs, s.dataset - np.distinct);
	plansim_result_free(&n);
	plansim_result_free(&np);
	plansim_result_free(&s);
	tjob_free(&t);
}

/* Reference NoPFS, by brute force from the model in docs/planner.md: every
 * rank sorts the samples it reads by (frequency desc, first access asc), RAM
 * takes them while they fit, the first that does not fit starts NVMe, the
 * first that does not fit NVMe ends the list; a non-holder asks the holder
 * with the lowest (tier, index in its list by first access, rank). */
static const struct tjob *ref_t;
static const uint32_t *ref_freq;
static const uint64_t *ref_first;
static uint32_t ref_rank;

static int cmp_ref(const void *a, const void *b)
{
	uint64_t n = ref_t->sh.n;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	uint32_t fx = ref_freq[ref_rank * n + x], fy = ref_freq[ref_rank * n + y];
	if (fx != fy)
		return fx > fy ? -1 : 1;
	uint64_t kx = ref_first[ref_rank * n + x], ky = ref_first[ref_rank * n + y];
	return (kx > ky) - (kx < ky);
}

static int cmp_first(const void *a, const void *b)
{
	uint64_t n = ref_t->sh.n;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	uint64_t kx = ref_first[ref_rank * n + x], ky = ref_first[ref_rank * n + y];
	return (kx > ky) - (kx < ky);
}

static void ref_nopfs(const struct tjob *t, bool prefetch, struct plansim_epoch *out)
{
	const struct sampler_shape *sh = &t->sh;
	const uint64_t n = sh->n, E = t->job.epochs;
	const uint32_t W = sh->world, nn = t->job.nnodes;
	uint32_t *freq = calloc(W * n, sizeof(uint32_t));
	uint64_t *first = malloc(W * n * sizeof(uint64_t));
	uint8_t *tier = calloc(W * n, 1), *filled = calloc(W * n, 1);
	uint32_t *off = calloc(W * n, sizeof(uint32_t)), *list = malloc(n * sizeof(uint32_t));
	uint32_t *desig = malloc(n * sizeof(uint32_t)), *on_node = calloc(nn, sizeof(uint32_t));
	uint32_t *ids = malloc(sh->batch * sizeof(uint32_t));
	uint64_t *recv = calloc(nn, sizeof(uint64_t));
	struct sampler_cache c;
	cr_assert(freq && first && tier && filled && off && list && desig && on_node && ids && recv);
	cr_assert_eq(sampler_cache_init(&c, sh), 0);
	memset(first, 0xff, W * n * sizeof(uint64_t));
	for (uint64_t e = 0; e < E; e++)
		for (uint64_t step = 0; step < sh->bpe; step++)
			for (uint32_t r = 0; r < W; r++) {
				int m = sampler_batch(&c, e, r, step, ids);
				for (int i = 0; i < m; i++) {
					uint64_t key = e * sh->per_rank + step * sh->batch + (uint64_t)i;
					freq[r * n + ids[i]]++;
					if (key < first[r * n + ids[i]])
						first[r * n + ids[i]] = key;
				}
			}
	for (uint32_t r = 0; r < W; r++)
		on_node[t->rank_node[r]]++;
	ref_t = t;
	ref_freq = freq;
	ref_first = first;
	for (uint32_t r = 0; r < W; r++) {
		uint32_t k = t->rank_node[r];
		uint64_t capr[3] = { 0, t->cap[k].ram / on_node[k], t->cap[k].nvme / on_node[k] };
		uint64_t m = 0;
		for (uint64_t s = 0; s < n; s++)
			if (freq[r * n + s])
				list[m++] = (uint32_t)s;
		ref_rank = r;
		qsort(list, m, sizeof(uint32_t), cmp_ref);
		uint64_t used = 0;
		uint8_t cur = PLAN_RAM;
		for (uint64_t i = 0; i < m; i++) {
			uint64_t align = cur == PLAN_RAM ? PLAN_RAM_ALIGN : PLAN_NVME_ALIGN;
			uint64_t a = (t->len[list[i]] + align - 1) / align * align;
			if (used + a > capr[cur]) {
				if (cur == PLAN_NVME)
					break;
				cur = PLAN_NVME;
				used = 0;
				a = (t->len[list[i]] + PLAN_NVME_ALIGN - 1) / PLAN_NVME_ALIGN * PLAN_NVME_ALIGN;
				if (a > capr[cur])
					break;
			}
			used += a;
			tier[r * n + list[i]] = cur;
		}
		for (uint8_t tt = PLAN_RAM; tt <= PLAN_NVME; tt++) {
			m = 0;
			for (uint64_t s = 0; s < n; s++)
				if (tier[r * n + s] == tt)
					list[m++] = (uint32_t)s;
			qsort(list, m, sizeof(uint32_t), cmp_first);
			for (uint64_t i = 0; i < m; i++)
				off[r * n + list[i]] = (uint32_t)i;
		}
	}
	uint64_t held = 0;
	for (uint64_t s = 0; s < n; s++) {
		desig[s] = UINT32_MAX;
		for (uint32_t r = 0; r < W; r++) {
			uint8_t tr = tier[r * n + s];
			if (!tr)
				continue;
			held += t->len[s];
			uint32_t d = desig[s];
			if (d == UINT32_MAX || tr < tier[d * n + s] ||
			    (tr == tier[d * n + s] && off[r * n + s] < off[d * n + s]))
				desig[s] = r;
		}
	}
	memset(out, 0, E * sizeof(*out));
	if (prefetch) {
		for (uint64_t i = 0; i < W * n; i++)
			filled[i] = tier[i] != 0;
		out[0].pfs = out[0].fill = held;
	}
	for (uint64_t e = 0; e < E; e++) {
		for (uint64_t step = 0; step < sh->bpe; step++)
			for (uint32_t r = 0; r < W; r++) {
				int m = sampler_batch(&c, e, r, step, ids);
				uint32_t k = t->rank_node[r];
				for (int i = 0; i < m; i++) {
					uint32_t s = ids[i];
					uint64_t len = t->len[s];
					bool own = tier[r * n + s] != 0;
					uint32_t src = own ? r : desig[s];
					out[e].demand += len;
					if (src != UINT32_MAX && filled[src * n + s]) {
						if (t->rank_node[src] != k) {
							out[e].peer += len;
							recv[k] += len;
						} else if (tier[src * n + s] == PLAN_RAM) {
							out[e].ram += len;
						} else {
							out[e].nvme += len;
						}
						continue;
					}
					out[e].pfs += len;
					if (own)
						filled[r * n + s] = 1;
				}
			}
		for (uint32_t k = 0; k < nn; k++) {
			if (recv[k] > out[e].peer_max)
				out[e].peer_max = recv[k];
			recv[k] = 0;
		}
	}
	sampler_cache_free(&c);
	free(recv);
	free(ids);
	free(on_node);
	free(desig);
	free(list);
	free(off);
	free(filled);
	free(tier);
	free(first);
	free(freq);
}

ParameterizedTestParameters(plansim, nopfs_matches_reference)
{
	static struct boundcase c[] = {
		{ 2, 3, 4, 100, 200, false, false, false },
		{ 3, 2, 5, 60, 0, false, false, true },
		{ 2, 4, 3, 0, 300, false, true, false },
		{ 3, 3, 4, 150, 250, true, false, false },
		{ 2, 2, 5, 400, 400, true, true, true },
		{ 1, 1, 7, 200, 100, true, false, false },
	};
	return cr_make_param_array(struct boundcase, c, sizeof(c) / sizeof(c[0]));
}

/* Checks the frequency cut (found by histogram narrowing, not by sorting),
 * the designated holders and the fill rules, epoch by epoch. */
ParameterizedTest(struct boundcase *c, plansim, nopfs_matches_reference)
{
	struct tjob t;
	tjob_init(&t, 701, c->nodes, c->tpn, c->batch, c->drop_last, 7, 31);
	if (c->lognormal)
		plansim_lognormal_sizes(t.len, t.sh.n, 6000, 5000, 9);
	else
		tjob_sizes(&t, 4 * KiB);
	if (c->cyclic)
		for (uint32_t r = 0; r < c->nodes * c->tpn; r++)
			t.rank_node[r] = r % c->nodes;
	tjob_caps(&t, c->ram * KiB, c->nvme * KiB);
	struct plansim_epoch want[7];
	for (int fill = 0; fill < 2; fill++) {
		t.job.nopfs_fill = fill ? PLANSIM_FILL_PREFETCH : PLANSIM_FILL_READ;
		ref_nopfs(&t, fill, want);
		struct plansim_result r = run(&t, PLANSIM_NOPFS);
		for (int e = 0; e < 7; e++) {
			const struct plansim_epoch *x = &r.ep[e], *y = &want[e];
			cr_assert(x->pfs == y->pfs && x->fill == y->fill && x->peer == y->peer &&
				  x->ram == y->ram && x->nvme == y->nvme && x->peer_max == y->peer_max &&
				  x->demand == y->demand,
				  "fill %d epoch %d: pfs %llu/%llu peer %llu/%llu ram %llu/%llu "
				  "nvme %llu/%llu (simulated/reference)", fill, e,
				  (unsigned long long)x->pfs, (unsigned long long)y->pfs,
				  (unsigned long long)x->peer, (unsigned long long)y->peer,
				  (unsigned long long)x->ram, (unsigned long long)y->ram,
				  (unsigned long long)x->nvme, (unsigned long long)y->nvme);
		}
		plansim_result_free(&r);
	}
	tjob_free(&t);
}

/* ---- small things ------------------------------------------------------------------- */

Test(plansim, policies_and_bounds)
{
	unsigned m = 0;
	cr_assert_eq(plansim_parse_policies("seer,lru", &m), 0);
	cr_assert_eq(m, PLANSIM_BIT(PLANSIM_SEER) | PLANSIM_BIT(PLANSIM_LRU));
	cr_assert_eq(plansim_parse_policies("all", &m), 0);
	cr_assert_eq(m, PLANSIM_ALL);
	cr_assert_eq(plansim_parse_policies("seer,fifo", &m), -EINVAL);
	cr_assert_eq(plansim_parse_policies("", &m), -EINVAL);

	struct plansim_epoch e = { .pfs = 1000, .peer_max = 300 };
	const char *b;
	cr_assert_float_eq(plansim_epoch_time(&e, 10, 0.5, 100, 100, &b), 10.0, 1e-12);
	cr_assert_str_eq(b, "pfs");
	cr_assert_float_eq(plansim_epoch_time(&e, 10, 0.5, 1000, 10, &b), 30.0, 1e-12);
	cr_assert_str_eq(b, "net");
	cr_assert_float_eq(plansim_epoch_time(&e, 10, 0.5, 0, 0, &b), 5.0, 1e-12);
	cr_assert_str_eq(b, "compute");

	struct tjob t;
	tjob_init(&t, 10, 1, 1, 2, false, 1, 0);
	t.job.epochs = 0;
	struct plansim_result r;
	cr_assert_eq(plansim_seer(&t.job, &r), -EINVAL);
	t.job.epochs = 1;
	t.rank_node[0] = 1;
	cr_assert_eq(plansim_lru(&t.job, &r), -EINVAL);
	tjob_free(&t);
}

Test(plansim, lognormal_sizes)
{
	uint64_t n = 200000;
	uint64_t *len = malloc(n * sizeof(uint64_t)), *again = malloc(n * sizeof(uint64_t));
	cr_assert(len && again);
	plansim_lognormal_sizes(len, n, 110 * 1024.0, 40 * 1024.0, 7);
	plansim_lognormal_sizes(again, n, 110 * 1024.0, 40 * 1024.0, 7);
	cr_assert_eq(memcmp(len, again, n * sizeof(uint64_t)), 0);
	double s = 0, s2 = 0;
	for (uint64_t i = 0; i < n; i++) {
		cr_assert_geq(len[i], 1);
		s += (double)len[i];
		s2 += (double)len[i] * (double)len[i];
	}
	double mean = s / (double)n, sd = sqrt(s2 / (double)n - mean * mean);
	cr_assert_float_eq(mean, 110 * 1024.0, 0.01 * 110 * 1024, "mean %.0f", mean);
	cr_assert_float_eq(sd, 40 * 1024.0, 0.03 * 40 * 1024, "sd %.0f", sd);
	free(len);
	free(again);
}
