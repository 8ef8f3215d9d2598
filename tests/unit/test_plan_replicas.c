/* Replicas (src/plan/plan.h, plan_node_build): what each node does with the RAM
 * and NVMe its owned share leaves free.
 *
 * The reference below recomputes a node's replica set independently: it
 * walks the access sequence through the sampler's public batch API
 * (sampler_batch), counts each sample's reads by the node, ranks by (count
 * descending, first read ascending) with qsort, and places greedily; the
 * code under test walks the permutations itself and counting-sorts. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan_fixture.h"

static struct plan build(const struct tjob *t)
{
	struct plan p;
	cr_assert_eq(plan_build_lengths(&p, t->len, t->sh.n, &t->sh, 0, t->rank_node,
					t->job.nnodes, t->cap), 0);
	return p;
}

static struct plan_node node_view(const struct tjob *t, const struct plan *p, uint32_t k,
				  bool on)
{
	struct plan_node nv;
	struct plan_repl_opts o = { .on = on };
	int rc = plan_node_build(&nv, p, NULL, t->len, &t->sh, 0, t->job.epochs, t->rank_node, k,
				 &t->cap[k], &o, NULL);
	cr_assert_eq(rc, 0, "plan_node_build(node %u): %d", k, rc);
	return nv;
}

/* ---- the reference ------------------------------------------------------------- */

struct ref_cand {
	uint32_t s;
	uint32_t cnt;
	uint64_t first;   /* order of need: ((epoch-1) * bpe + step) * slots + rank * B + i */
};

static int ref_cmp(const void *a, const void *b)
{
	const struct ref_cand *x = a, *y = b;
	if (x->cnt != y->cnt)
		return x->cnt > y->cnt ? -1 : 1;
	return (x->first > y->first) - (x->first < y->first);
}

static int ref_by_first(const void *a, const void *b)
{
	const struct ref_cand *x = a, *y = b;
	return (x->first > y->first) - (x->first < y->first);
}

struct ref_repl {
	uint64_t n;
	struct ref_cand *c;    /* the placed ones, by first read */
	uint8_t *tier;         /* per placed one */
	uint64_t *off;
	uint32_t *ready;       /* per sample: step of epoch 0 of its first read */
};

static struct ref_repl reference(const struct tjob *t, const struct plan *p, uint32_t k)
{
	const struct sampler_shape *sh = &t->sh;
	uint64_t n = sh->n;
	struct sampler_cache sc;
	cr_assert_eq(sampler_cache_init(&sc, sh), 0);
	uint32_t *cnt = calloc(n, sizeof(uint32_t));
	uint64_t *first = malloc(n * sizeof(uint64_t));
	uint32_t *ids = malloc(sh->batch * sizeof(uint32_t));
	struct ref_repl R = { 0 };
	R.ready = malloc(n * sizeof(uint32_t));
	cr_assert(cnt && first && ids && R.ready);
	uint32_t nranks = 0;
	for (uint32_t r = 0; r < sh->world; r++)
		nranks += t->rank_node[r] == k;
	uint64_t slots = (uint64_t)nranks * sh->batch;
	for (uint64_t e = 1; e < t->job.epochs; e++) {
		for (uint64_t step = 0; step < sh->bpe; step++) {
			uint32_t lr = 0;
			for (uint32_t r = 0; r < sh->world; r++) {
				if (t->rank_node[r] != k)
					continue;
				int m = sampler_batch(&sc, e, r, step, ids);
				cr_assert_gt(m, 0);
				for (int i = 0; i < m; i++) {
					uint32_t s = ids[i];
					if (p->tier[s] == PLAN_NONE || p->owner[s] == k)
						continue;
					uint64_t f = ((e - 1) * sh->bpe + step) * slots + lr * sh->batch +
						     (uint64_t)i;
					if (cnt[s]++ == 0 || f < first[s])
						first[s] = f;
				}
				lr++;
			}
		}
	}
	/* epoch 0: the step at which each sample is first read */
	for (uint64_t s = 0; s < n; s++)
		R.ready[s] = (uint32_t)sh->bpe;
	for (uint64_t step = 0; step < sh->bpe; step++)
		for (uint32_t r = 0; r < sh->world; r++) {
			int m = sampler_batch(&sc, 0, r, step, ids);
			for (int i = 0; i < m; i++)
				if (R.ready[ids[i]] == sh->bpe)
					R.ready[ids[i]] = (uint32_t)step;
		}
	struct ref_cand *all = malloc(n * sizeof(*all));
	uint64_t m = 0;
	for (uint64_t s = 0; s < n; s++)
		if (cnt[s])
			all[m++] = (struct ref_cand){ (uint32_t)s, cnt[s], first[s] };
	qsort(all, m, sizeof(*all), ref_cmp);
	uint64_t ram_free = t->cap[k].ram - p->ram_used[k], nvme_free = t->cap[k].nvme - p->nvme_used[k];
	uint8_t *where = calloc(m + 1, 1);
	for (uint64_t i = 0; i < m; i++) {
		uint64_t ra = (t->len[all[i].s] + 63) / 64 * 64;
		uint64_t na = (t->len[all[i].s] + 4095) / 4096 * 4096;
		if (ra <= ram_free) {
			ram_free -= ra;
			where[i] = PLAN_RAM;
		} else if (na <= nvme_free) {
			nvme_free -= na;
			where[i] = PLAN_NVME;
		}
	}
	R.c = malloc((m + 1) * sizeof(*R.c));
	R.tier = malloc(m + 1);
	R.off = malloc((m + 1) * sizeof(uint64_t));
	for (uint64_t i = 0; i < m; i++)
		if (where[i]) {
			R.tier[R.n] = where[i];
			R.c[R.n++] = all[i];
		}
	/* fill order: first read; tiers travel with their samples */
	struct ref_cand *tmp = malloc((R.n + 1) * sizeof(*tmp));
	uint8_t *tt = malloc(R.n + 1);
	memcpy(tmp, R.c, R.n * sizeof(*tmp));
	qsort(R.c, R.n, sizeof(*R.c), ref_by_first);
	for (uint64_t i = 0; i < R.n; i++)
		for (uint64_t j = 0; j < R.n; j++)
			if (tmp[j].s == R.c[i].s)
				tt[i] = R.tier[j];
	memcpy(R.tier, tt, R.n);
	uint64_t ro = p->ram_used[k], no = p->nvme_used[k];
	for (uint64_t i = 0; i < R.n; i++) {
		uint64_t len = t->len[R.c[i].s];
		R.off[i] = R.tier[i] == PLAN_RAM ? ro : no;
		if (R.tier[i] == PLAN_RAM)
			ro += (len + 63) / 64 * 64;
		else
			no += (len + 4095) / 4096 * 4096;
	}
	free(tmp);
	free(tt);
	free(where);
	free(all);
	free(ids);
	free(first);
	free(cnt);
	sampler_cache_free(&sc);
	return R;
}

static void ref_free(struct ref_repl *R)
{
	free(R->c);
	free(R->tier);
	free(R->off);
	free(R->ready);
}

/* ---- checks ----------------------------------------------------------------- */

static int cmp_iv(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;
	return (x[0] > y[0]) - (x[0] < y[0]);
}

/* A node's regions: owned samples and replicas together, aligned, disjoint,
 * inside the capacity; replicas are owned elsewhere, listed once, indexed. */
static void check_node(const struct tjob *t, const struct plan *p, const struct plan_node *nv)
{
	uint32_t k = nv->node;
	uint64_t n = t->sh.n;
	uint64_t (*iv)[2] = malloc((n + 1) * sizeof(*iv));
	cr_assert_not_null(iv);
	for (int tier = PLAN_RAM; tier <= PLAN_NVME; tier++) {
		uint64_t align = tier == PLAN_RAM ? PLAN_RAM_ALIGN : PLAN_NVME_ALIGN;
		uint64_t capb = tier == PLAN_RAM ? t->cap[k].ram : t->cap[k].nvme;
		uint64_t used = tier == PLAN_RAM ? nv->ram_used : nv->nvme_used;
		uint64_t m = 0, sum = 0;
		for (uint64_t s = 0; s < n; s++) {
			struct plan_loc l = plan_locate(p, nv, k, s);
			if (l.tier != tier)
				continue;
			uint64_t a = (t->len[s] + align - 1) / align * align;
			cr_assert_eq(l.off % align, 0);
			iv[m][0] = l.off;
			iv[m++][1] = l.off + a;
			sum += a;
		}
		qsort(iv, m, sizeof(*iv), cmp_iv);
		for (uint64_t i = 0; i + 1 < m; i++)
			cr_assert_leq(iv[i][1], iv[i + 1][0], "node %u tier %d: overlap", k, tier);
		if (m)
			cr_assert_leq(iv[m - 1][1], capb, "node %u tier %d: past capacity", k, tier);
		cr_assert_eq(sum, used, "node %u tier %d: used %llu, placed %llu", k, tier,
			     (unsigned long long)used, (unsigned long long)sum);
		cr_assert_leq(used, capb);
	}
	uint64_t bytes = 0, ram = 0;
	for (uint64_t i = 0; i < nv->nrepl; i++) {
		uint32_t s = nv->smp[i];
		cr_assert_neq(p->tier[s], PLAN_NONE, "replica of an uncached sample");
		cr_assert_neq(p->owner[s], k, "replica of an owned sample");
		cr_assert_eq(nv->idx[s], i + 1, "sample %u indexed twice or wrongly", s);
		bytes += t->len[s];
		ram += nv->tier[i] == PLAN_RAM ? t->len[s] : 0;
		if (i)
			cr_assert_lt(nv->due[i - 1], nv->due[i], "not in fill order");
	}
	uint64_t indexed = 0;
	for (uint64_t s = 0; s < n; s++)
		indexed += nv->idx[s] != 0;
	cr_assert_eq(indexed, nv->nrepl);
	cr_assert_eq(bytes, nv->repl_bytes);
	cr_assert_eq(ram, nv->repl_ram);
	free(iv);
}

struct rcase {
	uint32_t nodes, tpn, batch, epochs;
	uint64_t ram, nvme;      /* per node, bytes */
	bool lognormal, drop_last;
};

/* 4000 samples of 4000 bytes (or lognormal around it): about 4 MB owned per
 * node with 4 nodes. */
ParameterizedTestParameters(replicas, match_reference)
{
	static struct rcase cases[] = {
		/* room for everything; RAM only; NVMe only; a bit of each */
		{ 4, 2, 8, 6, 40000 * KiB, 0, false, false },
		{ 4, 2, 8, 6, 8000 * KiB, 0, false, false },
		{ 4, 2, 8, 6, 0, 8000 * KiB, false, false },
		{ 3, 3, 5, 5, 4000 * KiB, 4000 * KiB, true, false },
		{ 5, 1, 7, 8, 2000 * KiB, 3000 * KiB, true, true },
		{ 2, 4, 16, 4, 100000 * KiB, 100000 * KiB, true, false },
		/* the owned share (1000 samples in 4032-byte RAM slots) exactly
		 * fills each node: no replica */
		{ 4, 2, 8, 6, 1000 * 4032, 0, false, false },
		/* room for exactly ten more in RAM, then NVMe */
		{ 4, 2, 8, 6, 1010 * 4032, 20 * 4096, false, false },
	};
	return cr_make_param_array(struct rcase, cases, sizeof(cases) / sizeof(cases[0]));
}

/* Exactly the reference's set, tiers, offsets, fill order, deadlines and
 * ready steps, on every node. */
ParameterizedTest(struct rcase *c, replicas, match_reference, .timeout = 60)
{
	struct tjob t;
	tjob_init(&t, 4000, c->nodes, c->tpn, c->batch, c->drop_last, c->epochs, 21);
	if (c->lognormal)
		plansim_lognormal_sizes(t.len, t.sh.n, 4000, 3000, 3);
	else
		tjob_sizes(&t, 4000);
	tjob_caps(&t, c->ram, c->nvme);
	struct plan p = build(&t);
	uint64_t total = 0;
	for (uint32_t k = 0; k < c->nodes; k++) {
		struct plan_node nv = node_view(&t, &p, k, true);
		check_node(&t, &p, &nv);
		struct ref_repl R = reference(&t, &p, k);
		cr_assert_eq(nv.nrepl, R.n, "node %u: %llu replicas, reference %llu", k,
			     (unsigned long long)nv.nrepl, (unsigned long long)R.n);
		for (uint64_t i = 0; i < R.n; i++) {
			cr_assert_eq(nv.smp[i], R.c[i].s, "node %u replica %llu", k,
				     (unsigned long long)i);
			cr_assert_eq(nv.tier[i], R.tier[i]);
			cr_assert_eq(nv.off[i], R.off[i]);
			uint64_t slots = (uint64_t)nv.reads_per_step;
			uint64_t e, step;
			plan_node_due(&nv, i, &e, &step);
			cr_assert_eq(e, 1 + R.c[i].first / (slots * t.sh.bpe));
			cr_assert_eq(step, R.c[i].first / slots % t.sh.bpe);
			cr_assert_eq(nv.ready[i], R.ready[nv.smp[i]]);
		}
		total += nv.nrepl;
		ref_free(&R);
		plan_node_free(&nv);
	}
	if (c->ram == 1000 * 4032)
		cr_assert_eq(total, 0, "a full node holds replicas");
	else
		cr_assert_gt(total, 0, "spare room and no replica");
	plan_free(&p);
	tjob_free(&t);
}

/* Room for the dataset on every node: a node holds everything it reads after
 * the first epoch; nothing it never reads again. */
Test(replicas, full_room_holds_what_is_read)
{
	struct tjob t;
	tjob_init(&t, 3000, 4, 2, 8, false, 5, 2);
	plansim_lognormal_sizes(t.len, t.sh.n, 5000, 2000, 9);
	tjob_caps(&t, 3000 * 8 * KiB, 0);
	struct plan p = build(&t);
	struct sampler_cache sc;
	cr_assert_eq(sampler_cache_init(&sc, &t.sh), 0);
	uint32_t ids[8];
	for (uint32_t k = 0; k < 4; k++) {
		struct plan_node nv = node_view(&t, &p, k, true);
		uint8_t *read = calloc(t.sh.n, 1);
		for (uint64_t e = 1; e < 5; e++)
			for (uint64_t step = 0; step < t.sh.bpe; step++)
				for (uint32_t r = 2 * k; r < 2 * k + 2; r++) {
					int m = sampler_batch(&sc, e, r, step, ids);
					for (int i = 0; i < m; i++)
						read[ids[i]] = 1;
				}
		for (uint64_t s = 0; s < t.sh.n; s++) {
			bool want = read[s] && p.owner[s] != k;
			cr_assert_eq(nv.idx[s] != 0, want, "node %u sample %llu", k,
				     (unsigned long long)s);
		}
		free(read);
		plan_node_free(&nv);
	}
	sampler_cache_free(&sc);
	plan_free(&p);
	tjob_free(&t);
}

/* Off: nothing besides the owned plan, which replicas never change. */
Test(replicas, off_and_one_epoch_are_the_owned_plan)
{
	struct tjob t;
	tjob_init(&t, 2000, 3, 2, 8, false, 4, 5);
	tjob_sizes(&t, 4000);
	tjob_caps(&t, 2000 * 4 * KiB, 0);
	struct plan p = build(&t);
	for (uint32_t k = 0; k < 3; k++) {
		struct plan_node nv = node_view(&t, &p, k, false);
		cr_assert_eq(nv.nrepl, 0);
		cr_assert_eq(nv.ram_used, p.ram_used[k]);
		cr_assert_eq(nv.nvme_used, p.nvme_used[k]);
		for (uint64_t s = 0; s < t.sh.n; s++) {
			struct plan_loc l = plan_locate(&p, &nv, k, s);
			cr_assert_eq(l.tier, p.owner[s] == k ? p.tier[s] : PLAN_NONE);
			cr_assert_eq(l.replica, false);
			struct plan_loc l0 = plan_locate(&p, NULL, k, s);
			cr_assert(l.tier == l0.tier && l.off == l0.off && l.owner == l0.owner &&
				  l.replica == l0.replica);
			cr_assert_eq(l.owner, p.owner[s]);
		}
		plan_node_free(&nv);
	}
	t.job.epochs = 1;
	struct plan_node nv = node_view(&t, &p, 0, true);
	cr_assert_eq(nv.nrepl, 0);
	plan_node_free(&nv);
	plan_free(&p);
	tjob_free(&t);
}

static const uint32_t *cached_order(void *ctx, uint64_t epoch)
{
	uint32_t **perms = ctx;
	return perms[epoch];
}

/* Same set from the same inputs, with or without an order provider. */
Test(replicas, deterministic)
{
	struct tjob t;
	tjob_init(&t, 3000, 4, 2, 8, false, 6, 8);
	plansim_lognormal_sizes(t.len, t.sh.n, 5000, 3000, 4);
	tjob_caps(&t, 4000 * KiB, 4000 * KiB);
	struct plan p = build(&t);
	uint32_t *perms[6];
	for (uint64_t e = 0; e < 6; e++) {
		perms[e] = malloc(t.sh.n * sizeof(uint32_t));
		sampler_permute(t.sh.seed, e, t.sh.n, perms[e]);
	}
	struct plan_orders prov = { cached_order, perms };
	struct plan_repl_opts o = { .on = true };
	for (uint32_t k = 0; k < 4; k++) {
		struct plan_node a = node_view(&t, &p, k, true), b;
		cr_assert_eq(plan_node_build(&b, &p, NULL, t.len, &t.sh, 0, 6, t.rank_node, k,
					     &t.cap[k], &o, &prov), 0);
		cr_assert_eq(a.nrepl, b.nrepl);
		cr_assert_gt(a.nrepl, 0);
		cr_assert_eq(memcmp(a.idx, b.idx, t.sh.n * sizeof(uint32_t)), 0);
		cr_assert_eq(memcmp(a.smp, b.smp, a.nrepl * sizeof(uint32_t)), 0);
		cr_assert_eq(memcmp(a.off, b.off, a.nrepl * sizeof(uint64_t)), 0);
		cr_assert_eq(memcmp(a.tier, b.tier, a.nrepl), 0);
		cr_assert_eq(memcmp(a.due, b.due, a.nrepl * sizeof(uint32_t)), 0);
		cr_assert_eq(memcmp(a.ready, b.ready, a.nrepl * sizeof(uint32_t)), 0);
		plan_node_free(&a);
		plan_node_free(&b);
	}
	for (uint64_t e = 0; e < 6; e++)
		free(perms[e]);
	plan_free(&p);
	tjob_free(&t);
}

Test(replicas, bad_input_and_fill_choice)
{
	struct tjob t;
	tjob_init(&t, 100, 2, 1, 4, false, 3, 0);
	tjob_sizes(&t, 100);
	tjob_caps(&t, 1 << 20, 0);
	struct plan p = build(&t);
	struct plan_node nv;
	struct plan_repl_opts o = { .on = true };
	cr_assert_eq(plan_node_build(&nv, &p, NULL, t.len, &t.sh, 0, 3, t.rank_node, 2, &t.cap[0],
				     &o, NULL), -EINVAL);
	cr_assert_eq(plan_node_build(&nv, &p, NULL, NULL, &t.sh, 0, 3, t.rank_node, 0, &t.cap[0],
				     &o, NULL), -EINVAL);
	/* a node with no trainer reads nothing: no replica */
	t.rank_node[1] = 0;
	cr_assert_eq(plan_node_build(&nv, &p, NULL, t.len, &t.sh, 0, 3, t.rank_node, 1, &t.cap[1],
				     &o, NULL), 0);
	cr_assert_eq(nv.nrepl, 0);
	plan_node_free(&nv);
	cr_assert_eq(plan_fill_choose(PLAN_FILL_PEER, 1e12, 1, 4), PLAN_FILL_PEER);
	cr_assert_eq(plan_fill_choose(PLAN_FILL_PFS, 1, 1e12, 4), PLAN_FILL_PFS);
	/* 4 nodes sharing 100 GB/s of PFS get 25 GB/s each: more than 10 GB/s links */
	cr_assert_eq(plan_fill_choose(PLAN_FILL_AUTO, 100e9, 10e9, 4), PLAN_FILL_PFS);
	cr_assert_eq(plan_fill_choose(PLAN_FILL_AUTO, 100e9, 10e9, 64), PLAN_FILL_PEER);
	cr_assert_eq(plan_fill_choose(PLAN_FILL_AUTO, 0, 10e9, 4), PLAN_FILL_PEER);
	plan_free(&p);
	tjob_free(&t);
}
