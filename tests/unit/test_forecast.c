/* forecast (src/plan/forecast.h): bytes per node and epoch by source, replica
 * fills, epoch times, the capacity search.
 *
 * With replicas off the byte counts must equal plansim's seer policy (an
 * independent replay of the same plan, whole-cluster sums) bit for bit; with
 * replicas on they must keep the byte identities, the optimum PFS bytes, and
 * the network floor computed here from the sampler's batches. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/plan/forecast.h"
#include "plan_fixture.h"

static struct forecast_job fjob(const struct tjob *t, bool on)
{
	return (struct forecast_job){ .len = t->len, .sh = &t->sh, .epochs = t->job.epochs,
				.nnodes = t->job.nnodes, .rank_node = t->rank_node, .cap = t->cap,
				.repl = { .on = on } };
}

static struct forecast_result frun(const struct tjob *t, bool on, const struct forecast_rates *r)
{
	struct forecast_job j = fjob(t, on);
	struct forecast_rates none = { 0 };
	struct forecast_result res;
	int rc = forecast_run(&j, r ? r : &none, &res);
	cr_assert_eq(rc, 0, "forecast_run: %d", rc);
	return res;
}

static uint64_t dataset(const struct tjob *t)
{
	uint64_t d = 0;
	for (uint64_t s = 0; s < t->sh.n; s++)
		d += t->len[s];
	return d;
}

static uint64_t net(const struct forecast_bytes *b)
{
	return b->peer_in + b->fill_in;
}

/* Per node and epoch: every byte read came from somewhere, every byte sent
 * was received. */
static void check_identities(const struct forecast_result *r)
{
	for (uint64_t e = 0; e < r->epochs; e++) {
		uint64_t in = 0, out = 0, fin = 0, fout = 0;
		for (uint32_t k = 0; k < r->nnodes; k++) {
			const struct forecast_bytes *b = &r->node[e * r->nnodes + k];
			cr_assert_eq(b->demand, b->ram + b->nvme + b->peer_in + b->pfs,
				     "epoch %llu node %u: bytes lost", (unsigned long long)e, k);
			cr_assert_leq(b->repl, b->ram + b->nvme);
			in += b->peer_in;
			out += b->peer_out;
			fin += b->fill_in;
			fout += b->fill_out;
		}
		cr_assert_eq(in, out, "epoch %llu: peers sent %llu, received %llu",
			     (unsigned long long)e, (unsigned long long)out, (unsigned long long)in);
		cr_assert_eq(fin, fout, "epoch %llu: fills sent %llu, received %llu",
			     (unsigned long long)e, (unsigned long long)fout, (unsigned long long)fin);
	}
}

struct fcase {
	uint32_t nodes, tpn, batch, epochs;
	uint64_t ram, nvme;       /* per node, bytes */
	bool lognormal, drop_last, cyclic, starve0;
};

static struct fcase cases[] = {
	{ 4, 2, 8, 5, 40000 * KiB, 0, false, false, false, false },
	{ 4, 2, 8, 5, 1000 * KiB, 1000 * KiB, true, false, false, false },
	{ 3, 3, 5, 4, 500 * KiB, 2000 * KiB, true, true, false, false },
	{ 4, 2, 7, 3, 3000 * KiB, 3000 * KiB, false, false, true, false },
	{ 3, 1, 10, 4, 6000 * KiB, 0, false, false, false, true },
	{ 2, 2, 9, 3, 0, 0, true, true, false, false },
	{ 4, 1, 6, 6, 12000 * KiB, 0, false, true, false, false },
};

ParameterizedTestParameters(forecast, off_is_plansim_seer)
{
	return cr_make_param_array(struct fcase, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTestParameters(forecast, on_keeps_pfs_and_identities)
{
	return cr_make_param_array(struct fcase, cases, sizeof(cases) / sizeof(cases[0]));
}

static void fcase_job(struct tjob *t, const struct fcase *c)
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

/* Replicas off: the one-copy plan, byte for byte what plansim's seer counts. */
ParameterizedTest(struct fcase *c, forecast, off_is_plansim_seer)
{
	struct tjob t;
	fcase_job(&t, c);
	struct plansim_result ps;
	cr_assert_eq(plansim_seer(&t.job, &ps), 0);
	struct forecast_result f = frun(&t, false, NULL);
	check_identities(&f);
	cr_assert_eq(f.repl_bytes, 0);
	for (uint64_t e = 0; e < c->epochs; e++) {
		const struct forecast_epoch *x = &f.ep[e];
		const struct plansim_epoch *y = &ps.ep[e];
		cr_assert_eq(x->sum.pfs + x->sum.pfs_load, y->pfs, "epoch %llu pfs",
			     (unsigned long long)e);
		cr_assert_eq(x->sum.pfs_load, y->fill);
		cr_assert_eq(x->sum.peer_in, y->peer);
		cr_assert_eq(x->sum.ram, y->ram);
		cr_assert_eq(x->sum.nvme, y->nvme);
		cr_assert_eq(x->sum.demand, y->demand);
		cr_assert_eq(x->max.peer_in, y->peer_max);
		cr_assert_eq(x->sum.fill_in, 0);
	}
	plansim_result_free(&ps);
	forecast_result_free(&f);
	tjob_free(&t);
}

/* Replicas on: the same PFS bytes (the optimum's, with 4 KiB samples that
 * waste no slot), the identities, and less or equal network. */
ParameterizedTest(struct fcase *c, forecast, on_keeps_pfs_and_identities)
{
	struct tjob t;
	fcase_job(&t, c);
	if (!c->lognormal)
		tjob_sizes(&t, 4096);
	struct forecast_result off = frun(&t, false, NULL), on = frun(&t, true, NULL);
	check_identities(&on);
	cr_assert_eq(on.total.pfs + on.total.pfs_load, off.total.pfs + off.total.pfs_load);
	for (uint64_t e = 0; e < c->epochs; e++)
		cr_assert_eq(on.ep[e].sum.pfs + on.ep[e].sum.pfs_load,
			     off.ep[e].sum.pfs + off.ep[e].sum.pfs_load);
	cr_assert_leq(net(&on.total), net(&off.total));
	if (!c->lognormal && !c->drop_last && !c->starve0) {
		struct plansim_result opt;
		cr_assert_eq(plansim_optimum(&t.job, &opt), 0);
		cr_assert_eq(on.total.pfs + on.total.pfs_load, opt.total.pfs);
		plansim_result_free(&opt);
	}
	forecast_result_free(&off);
	forecast_result_free(&on);
	tjob_free(&t);
}

/* Every node can hold the dataset: no network after the first epoch, and over
 * the job exactly the floor: each sample crosses the network once per node
 * that reads it, except to the node that loads it from the PFS. */
Test(forecast, room_for_all_is_the_network_floor)
{
	struct tjob t;
	tjob_init(&t, 3000, 4, 2, 8, false, 6, 17);
	plansim_lognormal_sizes(t.len, t.sh.n, 5000, 3000, 2);
	uint64_t d = dataset(&t);
	tjob_caps(&t, d / 2 + 3000 * 64, d);
	struct forecast_result on = frun(&t, true, NULL);
	check_identities(&on);
	for (uint64_t e = 1; e < 6; e++)
		cr_assert_eq(net(&on.ep[e].sum), 0, "epoch %llu: %llu network bytes",
			     (unsigned long long)e, (unsigned long long)net(&on.ep[e].sum));
	/* N_s: distinct nodes reading s over the job */
	struct sampler_cache sc;
	cr_assert_eq(sampler_cache_init(&sc, &t.sh), 0);
	uint8_t *seen = calloc(t.sh.n * 4, 1);
	uint32_t ids[8];
	for (uint64_t e = 0; e < 6; e++)
		for (uint64_t step = 0; step < t.sh.bpe; step++)
			for (uint32_t r = 0; r < t.sh.world; r++) {
				int m = sampler_batch(&sc, e, r, step, ids);
				for (int i = 0; i < m; i++)
					seen[ids[i] * 4 + t.rank_node[r]] = 1;
			}
	uint64_t floor = 0;
	for (uint64_t s = 0; s < t.sh.n; s++) {
		uint32_t ns = seen[s * 4] + seen[s * 4 + 1] + seen[s * 4 + 2] + seen[s * 4 + 3];
		floor += (ns - 1) * t.len[s];
	}
	cr_assert_eq(net(&on.total), floor, "network %llu, floor %llu",
		     (unsigned long long)net(&on.total), (unsigned long long)floor);
	cr_assert_eq(on.total.pfs + on.total.pfs_load, d);
	free(seen);
	sampler_cache_free(&sc);
	forecast_result_free(&on);
	tjob_free(&t);
}

/* More room never costs more network (and once every sample a node reads
 * twice fits, more room only moves single reads earlier: equal). */
Test(forecast, network_falls_with_capacity)
{
	struct tjob t;
	tjob_init(&t, 3000, 4, 2, 8, false, 8, 19);
	tjob_sizes(&t, 4000);
	uint64_t prev = UINT64_MAX;
	for (uint64_t ram = 1000 * 4032; ram <= 3000 * 4032; ram += 250 * 4032) {
		tjob_caps(&t, ram, 0);
		struct forecast_result on = frun(&t, true, NULL);
		cr_assert_leq(net(&on.total), prev, "ram %llu", (unsigned long long)ram);
		if (ram == 1250 * 4032)
			cr_assert_lt(net(&on.total), prev, "ram %llu", (unsigned long long)ram);
		prev = net(&on.total);
		forecast_result_free(&on);
	}
	tjob_free(&t);
}

/* Fills within the unused time of tight links: the same bytes over the job
 * as unlimited fills, moved later, some read on demand; with generous links
 * no epoch after the first is network-bound. */
Test(forecast, fills_fit_the_links)
{
	struct tjob t;
	tjob_init(&t, 2000, 4, 2, 10, false, 6, 23);
	tjob_sizes(&t, 4096);
	tjob_caps(&t, 2000 * 4096, 0);
	struct forecast_result free_fill = frun(&t, true, NULL);
	struct forecast_rates r = { .compute_s = 0.01, .pfs_bw = 5e6, .net_bw = 4e6 };
	struct forecast_result tight = frun(&t, true, &r);
	check_identities(&tight);
	cr_assert_eq(net(&tight.total), net(&free_fill.total));
	cr_assert_eq(tight.total.pfs + tight.total.pfs_load, 2000 * 4096);
	uint64_t late = 0;
	for (uint64_t e = 1; e < 6; e++)
		late += net(&tight.ep[e].sum);
	cr_assert_gt(late, 0, "tight links filled everything in the first epoch");
	for (uint64_t e = 1; e < 6; e++)
		cr_assert_neq(tight.ep[e].bound, FORECAST_NET, "epoch %llu network-bound",
			      (unsigned long long)e);
	r.net_bw = 1e9;
	struct forecast_result wide = frun(&t, true, &r);
	for (uint64_t e = 1; e < 6; e++) {
		cr_assert_eq(net(&wide.ep[e].sum), 0);
		cr_assert_eq(wide.ep[e].bound, FORECAST_COMPUTE);
	}
	forecast_result_free(&free_fill);
	forecast_result_free(&tight);
	forecast_result_free(&wide);
	tjob_free(&t);
}

/* The terms, by hand: one node, one trainer, 100 samples of 1000 bytes,
 * batch 10 (10 steps), no cache. */
Test(forecast, terms_by_hand)
{
	struct tjob t;
	tjob_init(&t, 100, 1, 1, 10, false, 3, 1);
	tjob_sizes(&t, 1000);
	struct forecast_rates r = { .compute_s = 0.5, .pfs_bw = 1000, .decode_s = 0.2, .cores = 4 };
	struct forecast_result f = frun(&t, true, &r);
	for (uint64_t e = 0; e < 3; e++) {
		const struct forecast_epoch *x = &f.ep[e];
		cr_assert_float_eq(x->t[FORECAST_COMPUTE], 5.0, 1e-12);
		cr_assert_float_eq(x->t[FORECAST_PFS], 100.0, 1e-12);
		cr_assert_float_eq(x->t[FORECAST_DECODE], 100 * 0.2 / 4, 1e-12);
		cr_assert_float_eq(x->time, 100.0, 1e-12);
		cr_assert_eq(x->bound, FORECAST_PFS);
		cr_assert_float_eq(x->lb, 100.0, 1e-12);
		cr_assert(forecast_io_bound(x));
	}
	forecast_result_free(&f);
	/* the whole dataset in RAM: only the first epoch reads the PFS */
	tjob_caps(&t, 100 * 1024, 0);
	f = frun(&t, true, &r);
	cr_assert_eq(f.ep[0].bound, FORECAST_PFS);
	cr_assert_eq(f.ep[1].bound, FORECAST_COMPUTE);
	cr_assert_float_eq(f.ep[1].time, 5.0, 1e-12);
	cr_assert_float_eq(f.time, 110.0, 1e-9);
	cr_assert_float_eq(f.lb, 110.0, 1e-9);
	forecast_result_free(&f);

	double x[] = { 1, 2, 3, 4 }, y[] = { 66, 86, 129, 146 };
	struct forecast_rates c = { .pfs_clients = x, .pfs_curve = y, .npfs = 4 };
	cr_assert_float_eq(forecast_pfs_bw(&c, 0.5), 66, 1e-12);
	cr_assert_float_eq(forecast_pfs_bw(&c, 2.5), 107.5, 1e-12);
	cr_assert_float_eq(forecast_pfs_bw(&c, 4), 146, 1e-12);
	cr_assert_float_eq(forecast_pfs_bw(&c, 1024), 146, 1e-12);
	tjob_free(&t);
}

static bool io_free(const struct tjob *t, uint64_t ram, const struct forecast_rates *r, bool on)
{
	struct tjob u = *t;
	struct plan_cap cap[8];
	for (uint32_t k = 0; k < t->job.nnodes; k++)
		cap[k] = (struct plan_cap){ .ram = ram };
	u.cap = cap;
	struct forecast_result f = frun(&u, on, r);
	bool ok = true;
	for (uint64_t e = 1; e < f.epochs; e++)
		ok &= !forecast_io_bound(&f.ep[e]);
	forecast_result_free(&f);
	return ok;
}

/* The smallest RAM per node with no I/O-bound epoch after the first: found
 * with replicas (it is enough, less is not), none without (one copy keeps
 * every epoch on the network). */
Test(forecast, min_capacity)
{
	struct tjob t;
	tjob_init(&t, 2000, 4, 2, 10, false, 6, 29);
	tjob_sizes(&t, 4096);
	struct forecast_rates r = { .compute_s = 0.01, .pfs_bw = 5e6, .net_bw = 4e6 };
	struct forecast_job j = fjob(&t, true);
	uint64_t bytes, tol = 4096 * 20;
	bool found;
	cr_assert_eq(forecast_min_capacity(&j, &r, false, tol, &bytes, &found), 0);
	cr_assert(found);
	cr_assert(io_free(&t, bytes, &r, true));
	cr_assert_not(io_free(&t, bytes - tol, &r, true));
	cr_assert_lt(bytes, 2000 * 4096);
	cr_assert_gt(bytes, 500 * 4096);
	j.repl.on = false;
	cr_assert_eq(forecast_min_capacity(&j, &r, false, tol, &bytes, &found), 0);
	cr_assert_not(found);
	cr_assert_not(io_free(&t, 2000 * 4096, &r, false));
	tjob_free(&t);
}

Test(forecast, deterministic_and_bad_input)
{
	struct tjob t;
	tjob_init(&t, 2000, 3, 2, 8, false, 5, 31);
	plansim_lognormal_sizes(t.len, t.sh.n, 4000, 2000, 8);
	tjob_caps(&t, 3000 * KiB, 3000 * KiB);
	struct forecast_rates r = { .compute_s = 0.01, .pfs_bw = 5e6, .net_bw = 2e6, .nvme_bw = 1e7 };
	struct forecast_result a = frun(&t, true, &r), b = frun(&t, true, &r);
	cr_assert_eq(memcmp(a.node, b.node, 5 * 3 * sizeof(struct forecast_bytes)), 0);
	for (uint64_t e = 0; e < 5; e++)
		cr_assert(a.ep[e].time == b.ep[e].time && a.ep[e].bound == b.ep[e].bound);
	forecast_result_free(&a);
	forecast_result_free(&b);
	struct forecast_job j = fjob(&t, true);
	struct forecast_result f;
	j.epochs = 0;
	cr_assert_eq(forecast_run(&j, &r, &f), -EINVAL);
	j.epochs = 5;
	t.rank_node[0] = 3;
	cr_assert_eq(forecast_run(&j, &r, &f), -EINVAL);
	tjob_free(&t);
}
