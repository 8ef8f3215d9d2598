/* dessim (src/sim/dessim.h): the discrete-event simulation against bounds worked
 * out by hand for simple cases (compute-bound, PFS-bound, network-bound, a
 * shared PFS), against the forecast's byte counts (the same plan replayed
 * without time), byte identities, and determinism. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/sim/dessim.h"
#include "../../src/plan/forecast.h"
#include "plan_fixture.h"

#define MAX(a, b) ((a) > (b) ? (a) : (b))

static struct dessim_params dparams(const struct tjob *t, uint64_t sim_epochs)
{
	return (struct dessim_params){ .len = t->len, .sh = &t->sh, .nnodes = t->job.nnodes,
				    .rank_node = t->rank_node, .cap = t->cap,
				    .epochs = t->job.epochs, .sim_epochs = sim_epochs,
				    .policy = DESSIM_SEER, .lookahead = 4, .cores = 1 };
}

static struct dessim_result drun(const struct dessim_params *p)
{
	struct dessim_result r;
	int rc = dessim_run(p, &r);
	cr_assert_eq(rc, 0, "dessim_run: %d", rc);
	return r;
}

static void check_identities(const struct dessim_result *r)
{
	for (uint64_t e = 0; e < r->epochs; e++) {
		uint64_t in = 0, out = 0, fin = 0, fout = 0;
		for (uint32_t k = 0; k < r->nnodes; k++) {
			const struct forecast_bytes *b = &r->node[e * r->nnodes + k];
			cr_assert_eq(b->demand, b->ram + b->nvme + b->peer_in + b->pfs);
			in += b->peer_in;
			out += b->peer_out;
			fin += b->fill_in;
			fout += b->fill_out;
		}
		cr_assert_eq(in, out);
		cr_assert_eq(fin, fout, "epoch %llu: fills in %llu, out %llu", (unsigned long long)e,
			     (unsigned long long)fin, (unsigned long long)fout);
	}
}

/* One node, one trainer, the dataset fits in RAM, a PFS far faster than the
 * trainer: every epoch is its compute; the first also waits for the first
 * batch. */
Test(dessim, compute_bound_single_node)
{
	struct tjob t;
	tjob_init(&t, 1000, 1, 1, 10, false, 3, 1);
	tjob_sizes(&t, 1000);
	tjob_caps(&t, 1 << 20, 0);
	struct dessim_params p = dparams(&t, 3);
	p.compute_s = 0.5;
	p.pfs_bw = 1e9;
	struct dessim_result r = drun(&p);
	double first = 10 * 1000 / 1e9;
	cr_assert_float_eq(r.ep[0].time, 100 * 0.5 + first, 1e-9, "%.12f", r.ep[0].time);
	for (uint64_t e = 1; e < 3; e++) {
		cr_assert_float_eq(r.ep[e].time, 50.0, 1e-9);
		cr_assert_float_eq(r.ep[e].stall, 0.0, 1e-9);
		cr_assert_eq(r.ep[e].sum.ram, 1000 * 1000);
	}
	cr_assert_float_eq(r.compute, 150.0, 1e-9);
	check_identities(&r);
	dessim_result_free(&r);
	tjob_free(&t);
}

/* Nothing cached, every batch requested at the start (lookahead covers the
 * job), compute negligible: the job lasts the PFS's time for all bytes, plus
 * the last step. */
Test(dessim, pfs_bound_single_node)
{
	struct tjob t;
	tjob_init(&t, 1000, 1, 1, 10, false, 2, 2);
	plansim_lognormal_sizes(t.len, t.sh.n, 3000, 1000, 5);
	uint64_t d = 0;
	for (uint64_t s = 0; s < 1000; s++)
		d += t.len[s];
	struct dessim_params p = dparams(&t, 2);
	p.lookahead = 1000;
	p.compute_s = 1e-6;
	p.pfs_bw = 1e6;
	struct dessim_result r = drun(&p);
	cr_assert_float_eq(r.time, 2.0 * (double)d / 1e6 + 1e-6, 1e-9, "%.12f", r.time);
	cr_assert_eq(r.ep[0].sum.pfs + r.ep[1].sum.pfs, 2 * d);
	cr_assert_float_eq(r.ep[0].lb, (double)d / 1e6, 1e-9);
	dessim_result_free(&r);
	tjob_free(&t);
}

/* Two nodes share the PFS: t(1) = 1 MB/s, t(2) = 1.5 MB/s. Both read the
 * whole time, so the job moves all bytes at t(2); one node alone at t(1). */
Test(dessim, shared_pfs_curve)
{
	struct tjob t;
	tjob_init(&t, 1000, 2, 1, 10, false, 1, 3);
	tjob_sizes(&t, 1000);
	double x[] = { 1, 2 }, y[] = { 1e6, 1.5e6 };
	struct dessim_params p = dparams(&t, 1);
	p.policy = DESSIM_NAIVE;
	p.lookahead = 100;
	p.compute_s = 1e-6;
	p.pfs_clients = x;
	p.pfs_curve = y;
	p.npfs = 2;
	struct dessim_result r = drun(&p);
	cr_assert_float_eq(r.time, 1e6 / 1.5e6 + 1e-6, 1e-6, "%.9f", r.time);
	dessim_result_free(&r);
	t.rank_node[1] = 0; /* one node reads everything */
	p.nnodes = 1;
	r = drun(&p);
	cr_assert_float_eq(r.time, 1e6 / 1e6 + 1e-6, 1e-6, "%.9f", r.time);
	dessim_result_free(&r);
	tjob_free(&t);
}

/* One copy per sample on two nodes: after the first epoch each node reads
 * its peer's half over its link, and nothing else is slow. */
Test(dessim, network_bound_second_epoch)
{
	struct tjob t;
	tjob_init(&t, 2000, 2, 1, 10, false, 2, 4);
	tjob_sizes(&t, 1000);
	tjob_caps(&t, 2 << 20, 0);
	struct dessim_params p = dparams(&t, 2);
	p.lookahead = 1000;
	p.compute_s = 1e-6;
	p.net_bw = 1e6;
	p.repl.on = false;
	struct dessim_result r = drun(&p);
	uint64_t in0 = r.node[2].peer_in, in1 = r.node[3].peer_in;
	cr_assert_gt(in0, 0);
	/* both links run in parallel; the slower side decides */
	double want = (double)MAX(in0, in1) / 1e6;
	cr_assert_float_eq(r.ep[1].time, want, 0.01 * want, "%.6f vs %.6f", r.ep[1].time, want);
	dessim_result_free(&r);
	tjob_free(&t);
}

/* Replicas off: per node and epoch, the bytes of every source are the
 * forecast's (the same plan, replayed without time). */
Test(dessim, bytes_are_the_forecasts)
{
	struct tjob t;
	tjob_init(&t, 3000, 3, 2, 8, false, 4, 5);
	plansim_lognormal_sizes(t.len, t.sh.n, 4000, 2000, 3);
	tjob_caps(&t, 2000 * KiB, 1500 * KiB);
	struct dessim_params p = dparams(&t, 4);
	p.repl.on = false;
	p.compute_s = 0.01;
	p.net_bw = 1e7;
	p.pfs_bw = 1e7;
	p.nvme_bw = 1e8;
	struct dessim_result r = drun(&p);
	struct forecast_job j = { .len = t.len, .sh = &t.sh, .epochs = 4, .nnodes = 3,
			    .rank_node = t.rank_node, .cap = t.cap };
	struct forecast_rates none = { 0 };
	struct forecast_result f;
	cr_assert_eq(forecast_run(&j, &none, &f), 0);
	for (uint64_t i = 0; i < 4 * 3; i++) {
		const struct forecast_bytes *a = &r.node[i], *b = &f.node[i];
		cr_assert(a->reads == b->reads && a->demand == b->demand && a->ram == b->ram &&
			  a->nvme == b->nvme && a->peer_in == b->peer_in &&
			  a->peer_out == b->peer_out && a->pfs == b->pfs &&
			  a->pfs_load == b->pfs_load && a->nvme_read == b->nvme_read,
			  "epoch %llu node %llu differs", (unsigned long long)(i / 3),
			  (unsigned long long)(i % 3));
	}
	check_identities(&r);
	forecast_result_free(&f);
	dessim_result_free(&r);
	tjob_free(&t);
}

/* Room for the dataset on every node: no PFS byte beyond the dataset, and no
 * network after the second epoch (the first loads, fills run in its idle
 * time, epoch 1's reads requested ahead may fill their own replicas). */
Test(dessim, replicas_quiet_the_network)
{
	struct tjob t;
	tjob_init(&t, 3000, 4, 2, 8, false, 8, 6);
	tjob_sizes(&t, 4000);
	tjob_caps(&t, 3000 * 4032, 0);
	struct dessim_params p = dparams(&t, 5);
	p.repl.on = true;
	p.compute_s = 0.01;
	p.pfs_bw = 2e7;
	p.net_bw = 1e8;
	struct dessim_result r = drun(&p);
	check_identities(&r);
	uint64_t pfs = 0;
	for (uint64_t e = 0; e < 5; e++)
		pfs += r.ep[e].sum.pfs + r.ep[e].sum.pfs_load;
	cr_assert_eq(pfs, 3000 * 4000);
	for (uint64_t e = 2; e < 5; e++) {
		cr_assert_eq(r.ep[e].sum.peer_in + r.ep[e].sum.fill_in, 0, "epoch %llu",
			     (unsigned long long)e);
		cr_assert_float_eq(r.ep[e].stall, 0.0, 1e-9);
	}
	p.repl.on = false;
	struct dessim_result off = drun(&p);
	cr_assert_gt(off.ep[3].sum.peer_in, 0);
	dessim_result_free(&off);
	dessim_result_free(&r);
	tjob_free(&t);
}

/* Bulk-synchronous compute proportional to batch bytes: the compute column
 * is the sum over steps of the slowest trainer's batch bytes / rate (the
 * NoPFS simulator's lower bound), recomputed here through sampler_batch. */
Test(dessim, bulk_synchronous_compute)
{
	struct tjob t;
	tjob_init(&t, 2000, 4, 1, 25, false, 2, 7);
	dessim_normal_sizes(t.len, t.sh.n, 2e6, 2e5, 42);
	struct dessim_params p = dparams(&t, 2);
	p.policy = DESSIM_NAIVE;
	p.compute_bw = 1e8;
	struct dessim_result r = drun(&p);
	struct sampler_cache sc;
	cr_assert_eq(sampler_cache_init(&sc, &t.sh), 0);
	uint32_t ids[25];
	double want = 0;
	for (uint64_t e = 0; e < 2; e++)
		for (uint64_t g = 0; g < t.sh.bpe; g++) {
			double worst = 0;
			for (uint32_t rank = 0; rank < 4; rank++) {
				int m = sampler_batch(&sc, e, rank, g, ids);
				double b = 0;
				for (int i = 0; i < m; i++)
					b += (double)t.len[ids[i]];
				worst = MAX(worst, b / 1e8);
			}
			want += worst;
		}
	cr_assert_float_eq(r.compute, want, 1e-9 * want);
	/* with unlimited I/O the time is the compute */
	cr_assert_float_eq(r.time, want, 1e-9 * want);
	sampler_cache_free(&sc);
	dessim_result_free(&r);
	tjob_free(&t);
}

Test(dessim, deterministic_and_bad_input)
{
	struct tjob t;
	tjob_init(&t, 2000, 3, 2, 8, false, 6, 8);
	plansim_lognormal_sizes(t.len, t.sh.n, 4000, 2000, 2);
	tjob_caps(&t, 2500 * KiB, 2000 * KiB);
	struct dessim_params p = dparams(&t, 3);
	p.repl.on = true;
	p.compute_s = 0.01;
	p.pfs_bw = 5e6;
	p.net_bw = 3e6;
	p.nvme_bw = 2e7;
	p.decode_s = 1e-4;
	p.cores = 2;
	struct dessim_result a = drun(&p), b = drun(&p);
	cr_assert_eq(memcmp(a.node, b.node, 3 * 3 * sizeof(struct forecast_bytes)), 0);
	for (uint64_t e = 0; e < 3; e++)
		cr_assert(a.ep[e].time == b.ep[e].time);
	check_identities(&a);
	dessim_result_free(&a);
	dessim_result_free(&b);
	struct dessim_result r;
	p.sim_epochs = 7;
	cr_assert_eq(dessim_run(&p, &r), -EINVAL);
	p.sim_epochs = 3;
	t.rank_node[0] = 9;
	cr_assert_eq(dessim_run(&p, &r), -EINVAL);
	tjob_free(&t);
}

/* Node 0 caches nothing and reads half of every epoch: after the first, all
 * of its reads come from the two others, so its incoming link (1.5 MB per
 * epoch) binds, not their outgoing ones (about 1.1 MB each). */
Test(dessim, incoming_link_binds)
{
	struct tjob t;
	tjob_init(&t, 3000, 3, 1, 10, false, 2, 9);
	free(t.rank_node);
	t.rank_node = calloc(4, sizeof(uint32_t));
	uint32_t rn[4] = { 0, 0, 1, 2 };
	memcpy(t.rank_node, rn, sizeof(rn));
	cr_assert_eq(sampler_shape_init(&t.sh, 3000, 9, 4, 10, false, true), 0);
	tjob_sizes(&t, 1000);
	tjob_caps(&t, 4 << 20, 0);
	t.cap[0].ram = 0;
	struct dessim_params p = dparams(&t, 2);
	p.lookahead = 1000;
	p.compute_s = 1e-6;
	p.net_bw = 1e6;
	p.repl.on = false;
	struct dessim_result r = drun(&p);
	uint64_t in0 = r.node[3].peer_in;
	cr_assert_eq(in0, 1500 * 1000);
	cr_assert_lt(r.node[4].peer_out, in0);
	cr_assert_lt(r.node[5].peer_out, in0);
	cr_assert_float_eq(r.ep[1].time, 1.5, 0.01 * 1.5, "%.6f", r.ep[1].time);
	dessim_result_free(&r);
	tjob_free(&t);
}
