/* One node's forecast (src/plan/forecast_node.c), the daemon's: for every node of
 * a job, its bytes by source per epoch must equal what forecast_run (which replays
 * every node and keeps every epoch's order) counts for it, bit for bit, with
 * replicas on and off; with replicas off what it sends too. With a resumed
 * job (first epoch > 0, which forecast_run does not model) the bytes are checked
 * against an independent replay through the sampler's batches (sampler_batch).
 * The estimate of what a node sends with replicas on is checked against the
 * cluster's exact sum; the schedule with rates keeps the byte identities. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/plan/forecast.h"
#include "plan_fixture.h"

struct ncase {
	uint32_t nodes, tpn, batch, epochs;
	uint64_t ram, nvme;       /* per node, bytes */
	bool lognormal, drop_last, cyclic, starve0;
};

static struct ncase cases[] = {
	{ 4, 2, 8, 5, 40000 * KiB, 0, false, false, false, false },
	{ 4, 2, 8, 5, 1000 * KiB, 1000 * KiB, true, false, false, false },
	{ 3, 3, 5, 4, 500 * KiB, 2000 * KiB, true, true, false, false },
	{ 4, 2, 7, 3, 3000 * KiB, 3000 * KiB, false, false, true, false },
	{ 3, 1, 10, 4, 6000 * KiB, 0, false, false, false, true },
	{ 2, 2, 9, 3, 0, 0, true, true, false, false },
	{ 4, 1, 6, 6, 12000 * KiB, 0, false, true, false, false },
};

static void ncase_job(struct tjob *t, const struct ncase *c)
{
	tjob_init(t, 3000, c->nodes, c->tpn, c->batch, c->drop_last, c->epochs, 13);
	if (c->lognormal)
		plansim_lognormal_sizes(t->len, t->sh.n, 4000, 3000, 6);
	else
		tjob_sizes(t, 4000);
	tjob_caps(t, c->ram, c->nvme);
	if (c->cyclic)
		for (uint32_t r = 0; r < t->sh.world; r++)
			t->rank_node[r] = r % c->nodes;
	if (c->starve0)
		t->cap[0].ram = 0; /* node 0 spills what it reads first */
}

/* Node k's tally and forecast (no rates) for a job from first_epoch. */
static void node_forecast(const struct tjob *t, const struct plan *p, bool on, uint32_t k,
			  uint64_t first_epoch, uint64_t epochs, struct forecast_tally *ta,
			  struct forecast_node_epoch *out, struct plan_node *nv)
{
	struct plan_repl_opts ro = { .on = on };
	cr_assert_eq(plan_node_build(nv, p, NULL, t->len, &t->sh, first_epoch, epochs, t->rank_node,
				     k, &t->cap[k], &ro, NULL), 0);
	cr_assert_eq(forecast_tally_node(ta, p, nv, NULL, t->len, &t->sh, first_epoch, epochs,
				   t->rank_node, k, t->cap), 0);
	struct forecast_rates none = { 0 };
	cr_assert_eq(forecast_node_forecast(ta, &none, out), 0);
}

#define SAME(f, what)                                                                        \
	cr_assert_eq(a->f, b->f, "%s node %u epoch %llu: " #f " %llu, forecast_run %llu", what, k,      \
		     (unsigned long long)e, (unsigned long long)a->f, (unsigned long long)b->f)

static void compare_nodes(const struct ncase *c, bool on)
{
	struct tjob t;
	ncase_job(&t, c);
	struct forecast_job j = { .len = t.len, .sh = &t.sh, .epochs = c->epochs, .nnodes = c->nodes,
			    .rank_node = t.rank_node, .cap = t.cap, .repl = { .on = on } };
	struct forecast_rates none = { 0 };
	struct forecast_result f;
	cr_assert_eq(forecast_run(&j, &none, &f), 0);
	struct plan p;
	cr_assert_eq(plan_build_lengths(&p, t.len, t.sh.n, &t.sh, 0, t.rank_node, c->nodes, t.cap), 0);
	struct forecast_node_epoch *out = calloc(c->epochs, sizeof(*out));
	const char *what = on ? "replicas on" : "replicas off";
	uint64_t est_out = 0, true_out = 0;
	for (uint32_t k = 0; k < c->nodes; k++) {
		struct forecast_tally ta;
		struct plan_node nv;
		node_forecast(&t, &p, on, k, 0, c->epochs, &ta, out, &nv);
		cr_assert_eq(ta.repl_bytes, nv.repl_bytes);
		for (uint64_t e = 0; e < c->epochs; e++) {
			const struct forecast_bytes *a = &out[e].b, *b = &f.node[e * c->nodes + k];
			SAME(reads, what);
			SAME(demand, what);
			SAME(ram, what);
			SAME(nvme, what);
			SAME(repl, what);
			SAME(peer_in, what);
			SAME(pfs, what);
			SAME(pfs_load, what);
			SAME(fill_in, what);
			cr_assert_eq(a->demand, a->ram + a->nvme + a->peer_in + a->pfs);
			cr_assert_eq(out[e].pfs_all, f.ep[e].sum.pfs + f.ep[e].sum.pfs_load,
				     "%s epoch %llu: the cluster's PFS bytes", what, (unsigned long long)e);
			if (!on) {
				SAME(peer_out, what);
				SAME(nvme_read, what);
				SAME(fill_out, what);
			}
			est_out += a->peer_out + a->fill_out;
			true_out += b->peer_out + b->fill_out;
		}
		plan_node_free(&nv);
		forecast_tally_free(&ta);
	}
	/* what nodes send, estimated from their own reads: the cluster's sum
	 * (exact: what all receive) within 5 % (same in distribution) */
	double err = true_out ? fabs((double)est_out - (double)true_out) / (double)true_out : 0;
	cr_assert(err <= (on ? 0.05 : 0.0), "%s: sent %llu estimated, %llu exact (%.1f %%)", what,
		  (unsigned long long)est_out, (unsigned long long)true_out, 100 * err);
	free(out);
	plan_free(&p);
	forecast_result_free(&f);
	tjob_free(&t);
}

ParameterizedTestParameters(forecast_node, equals_fc_run_off)
{
	return cr_make_param_array(struct ncase, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct ncase *c, forecast_node, equals_fc_run_off)
{
	compare_nodes(c, false);
}

ParameterizedTestParameters(forecast_node, equals_fc_run_on)
{
	return cr_make_param_array(struct ncase, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct ncase *c, forecast_node, equals_fc_run_on)
{
	compare_nodes(c, true);
}

/* A resumed job (plan from epoch 2 of 6): node k's bytes per epoch against
 * its trainers' batches replayed through sampler_batch, each sample classified
 * by hand (first read of the plan's first epoch: PFS; later: owned or a
 * replica here by tier, otherwise the owner, or the PFS if cached nowhere). */
Test(forecast_node, resumed_job_by_hand)
{
	struct tjob t;
	tjob_init(&t, 1500, 3, 2, 7, false, 6, 41);
	plansim_lognormal_sizes(t.len, t.sh.n, 4000, 2000, 3);
	tjob_caps(&t, 700 * 4096, 300 * 4096);
	const uint64_t first = 2, E = 4;
	struct plan p;
	cr_assert_eq(plan_build_lengths(&p, t.len, t.sh.n, &t.sh, first, t.rank_node, 3, t.cap), 0);
	struct sampler_cache sc;
	cr_assert_eq(sampler_cache_init(&sc, &t.sh), 0);
	uint32_t ids[7];
	struct forecast_node_epoch out[4];
	for (uint32_t k = 0; k < 3; k++) {
		struct forecast_tally ta;
		struct plan_node nv;
		node_forecast(&t, &p, true, k, first, E, &ta, out, &nv);
		cr_assert_gt(nv.nrepl, 0, "node %u has spare room for replicas", k);
		for (uint64_t i = 0; i < E; i++) {
			uint64_t ram = 0, nvme = 0, peer = 0, pfs = 0, repl = 0, demand = 0;
			for (uint32_t r = 0; r < t.sh.world; r++) {
				if (t.rank_node[r] != k)
					continue;
				for (uint64_t step = 0; step < t.sh.bpe; step++) {
					int m = sampler_batch(&sc, first + i, r, step, ids);
					cr_assert_gt(m, 0);
					for (int x = 0; x < m; x++) {
						uint32_t s = ids[x];
						uint64_t l = t.len[s];
						struct plan_loc loc = plan_locate(&p, &nv, k, s);
						demand += l;
						if (loc.tier == PLAN_RAM)
							ram += l;
						else if (loc.tier == PLAN_NVME)
							nvme += l;
						else if (p.tier[s] == PLAN_NONE)
							pfs += l;
						else
							peer += l;
						repl += loc.replica ? l : 0;
					}
				}
			}
			const struct forecast_bytes *b = &out[i].b;
			cr_assert_eq(b->demand, demand);
			if (i == 0)
				continue; /* the plan's first epoch: first reads from the PFS */
			unsigned long long ep = (unsigned long long)(first + i);
			cr_assert_eq(b->ram, ram, "node %u epoch %llu ram", k, ep);
			cr_assert_eq(b->nvme, nvme, "node %u epoch %llu nvme", k, ep);
			cr_assert_eq(b->peer_in, peer, "node %u epoch %llu peer", k, ep);
			cr_assert_eq(b->pfs, pfs, "node %u epoch %llu pfs", k, ep);
			cr_assert_eq(b->repl, repl, "node %u epoch %llu replicas", k, ep);
			cr_assert_gt(repl, 0, "replicas serve reads after the first epoch");
		}
		plan_node_free(&nv);
		forecast_tally_free(&ta);
	}
	sampler_cache_free(&sc);
	plan_free(&p);
	tjob_free(&t);
}

/* With a tight network the fills spread over epochs, and those that miss
 * their deadline become the reads that need them: every replica byte is
 * loaded exactly once, by a fill or by its first read. */
Test(forecast_node, tight_links_keep_the_bytes)
{
	struct tjob t;
	tjob_init(&t, 2000, 4, 2, 10, false, 6, 23);
	tjob_sizes(&t, 4096);
	tjob_caps(&t, 2000 * 4096, 0);
	struct plan p;
	cr_assert_eq(plan_build_lengths(&p, t.len, t.sh.n, &t.sh, 0, t.rank_node, 4, t.cap), 0);
	struct forecast_tally ta;
	struct plan_node nv;
	struct forecast_node_epoch loose[6], tight[6];
	node_forecast(&t, &p, true, 1, 0, 6, &ta, loose, &nv);
	struct forecast_rates r = { .compute_s = 0.01, .net_bw = 4096 * 100, .pfs_bw = 1e12 };
	cr_assert_eq(forecast_node_forecast(&ta, &r, tight), 0);
	uint64_t due = 0, fill = 0, extra = 0;
	for (int e = 0; e < 6; e++) {
		const struct forecast_bytes *b = &tight[e].b;
		cr_assert_eq(b->demand, b->ram + b->nvme + b->peer_in + b->pfs);
		cr_assert_eq(b->demand, loose[e].b.demand);
		cr_assert_eq(b->pfs, loose[e].b.pfs, "PFS bytes do not depend on the fills");
		due += e ? ta.ep[e].due : 0;
		fill += b->fill_in;
		extra += b->peer_in - loose[e].b.peer_in;
		cr_assert_geq(tight[e].time, tight[e].lb * (1 - 1e-12));
		cr_assert_eq(tight[e].bound == FORECAST_NET || tight[e].bound == FORECAST_COMPUTE, true);
		cr_assert(b->fill_in == 0 || tight[e].bound != FORECAST_NET,
			  "epoch %d: fills go only into the link's unused time", e);
		cr_assert_eq(b->peer_out - loose[e].b.peer_out, b->peer_in - loose[e].b.peer_in,
			     "epoch %d: peers miss fills from this node as it misses theirs", e);
	}
	cr_assert_eq(loose[0].b.fill_in, due, "without rates every fill lands in the first epoch");
	cr_assert_eq(fill + extra, due, "every replica byte loaded once: %llu filled, %llu read",
		     (unsigned long long)fill, (unsigned long long)extra);
	cr_assert_gt(extra, 0, "a 400 KB/s link cannot fill everything in time");
	cr_assert_gt(fill, 0);
	plan_node_free(&nv);
	forecast_tally_free(&ta);
	plan_free(&p);
	tjob_free(&t);
}

/* The terms by hand: one node, one trainer, 100 samples of 1000 B in 10
 * steps; RAM for 50 (the first 50 of epoch 0). */
Test(forecast_node, terms_by_hand)
{
	struct tjob t;
	tjob_init(&t, 100, 1, 1, 10, false, 3, 1);
	tjob_sizes(&t, 1000);
	tjob_caps(&t, 50 * 1024, 0);
	struct plan p;
	cr_assert_eq(plan_build_lengths(&p, t.len, 100, &t.sh, 0, t.rank_node, 1, t.cap), 0);
	struct forecast_tally ta;
	cr_assert_eq(forecast_tally_node(&ta, &p, NULL, NULL, t.len, &t.sh, 0, 3, t.rank_node, 0, t.cap), 0);
	struct forecast_rates r = { .compute_s = 0.5, .pfs_bw = 10000, .decode_s = 0.01, .cores = 2 };
	struct forecast_node_epoch o[3];
	cr_assert_eq(forecast_node_forecast(&ta, &r, o), 0);
	cr_assert_eq(o[0].pfs_all, 100000);
	cr_assert_float_eq(o[0].t[FORECAST_COMPUTE], 5.0, 1e-12);
	cr_assert_float_eq(o[0].t[FORECAST_PFS], 10.0, 1e-12);
	cr_assert_float_eq(o[0].t[FORECAST_DECODE], 0.5, 1e-12);
	cr_assert_eq(o[0].bound, FORECAST_PFS);
	cr_assert_float_eq(o[0].lb, 10.0, 1e-12);
	for (int e = 1; e < 3; e++) {
		cr_assert_eq(o[e].b.ram, 50000);
		cr_assert_eq(o[e].pfs_all, 50000);
		cr_assert_float_eq(o[e].time, 5.0, 1e-12, "compute and PFS tie at 5 s");
		cr_assert_eq(o[e].bound, FORECAST_COMPUTE, "a tie is not I/O-bound");
		cr_assert_eq(o[e].pfs_opt, 100000 - 50 * 1024);
	}
	forecast_tally_free(&ta);
	plan_free(&p);
	tjob_free(&t);
}

Test(forecast_node, bad_input)
{
	struct tjob t;
	tjob_init(&t, 100, 2, 1, 10, false, 3, 1);
	tjob_sizes(&t, 1000);
	tjob_caps(&t, 100 * 1024, 0);
	struct plan p;
	cr_assert_eq(plan_build_lengths(&p, t.len, 100, &t.sh, 0, t.rank_node, 2, t.cap), 0);
	struct forecast_tally ta;
	cr_assert_eq(forecast_tally_node(&ta, &p, NULL, NULL, t.len, &t.sh, 0, 0, t.rank_node, 0, t.cap),
		     -EINVAL, "no epoch");
	cr_assert_eq(forecast_tally_node(&ta, &p, NULL, NULL, t.len, &t.sh, 0, 3, t.rank_node, 2, t.cap),
		     -EINVAL, "no such node");
	cr_assert_eq(forecast_tally_node(&ta, &p, NULL, NULL, NULL, &t.sh, 0, 3, t.rank_node, 0, t.cap),
		     -EINVAL, "no sizes");
	t.rank_node[1] = 5;
	cr_assert_eq(forecast_tally_node(&ta, &p, NULL, NULL, t.len, &t.sh, 0, 3, t.rank_node, 0, t.cap),
		     -EINVAL, "a rank on a node that does not exist");
	cr_assert_null(ta.ep);
	plan_free(&p);
	tjob_free(&t);
}
