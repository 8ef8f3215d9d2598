/* The plan by files (src/plan/plan_group.c, plan_build_files) on hand-made
 * catalogs: a packed file is cached whole by one node, the node reading most
 * of it unless that breaks the even share of the files or its capacity;
 * capacity is filled in order of first need (whole files, the last one cut
 * where the cache ends, its rest spilled to nodes with room); one-sample
 * files are placed exactly as plan_build places them. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/catalog/catalog.h"
#include "../../src/plan/plan.h"
#include "../../src/sampler/sampler.h"
#include "../../src/util/util.h"

/* A catalog of nfiles files of per samples of len bytes each (only what
 * the plan reads: files, samples, counts). */
static struct catalog *fake(uint32_t nfiles, uint32_t per, uint64_t len)
{
	struct catalog *c = calloc(1, sizeof(*c));
	c->nfiles = nfiles;
	c->nsamples = (uint64_t)nfiles * per;
	c->files = calloc(nfiles, sizeof(*c->files));
	c->samples = calloc(c->nsamples, sizeof(*c->samples));
	for (uint32_t f = 0; f < nfiles; f++) {
		c->files[f].first = (uint64_t)f * per;
		c->files[f].nsamples = per;
		for (uint32_t i = 0; i < per; i++)
			c->samples[f * per + i] = (struct catalog_sample){ .length = len, .file = f };
	}
	return c;
}

static void fake_free(struct catalog *c)
{
	free(c->files);
	free(c->samples);
	free(c);
}

struct setup {
	struct sampler_shape sh;
	uint32_t rank_node[64];
	struct plan_cap cap[8];
};

/* nodes x tpn trainers, block placement, every node with ram bytes of RAM. */
static void setup(struct setup *s, const struct catalog *c, uint32_t nodes, uint32_t tpn,
		  uint32_t batch, uint64_t ram)
{
	cr_assert_eq(sampler_shape_init(&s->sh, c->nsamples, 42, nodes * tpn, batch, false, true), 0);
	for (uint32_t r = 0; r < nodes * tpn; r++)
		s->rank_node[r] = r / tpn;
	for (uint32_t k = 0; k < nodes; k++)
		s->cap[k] = (struct plan_cap){ .ram = ram };
}

/* The node caching all of file f, or -1 when its samples are split (or one
 * is not cached). */
static int file_node(const struct plan *p, const struct catalog *c, uint32_t f)
{
	int node = -1;
	for (uint64_t s = c->files[f].first; s < c->files[f].first + c->files[f].nsamples; s++) {
		if (p->tier[s] == PLAN_NONE)
			return -1;
		if (node < 0)
			node = p->owner[s];
		else if (node != p->owner[s])
			return -1;
	}
	return node;
}

Test(plan_group, files_cached_whole_and_spread_over_the_nodes)
{
	/* bench bert: 8 files of 960 records of 2500 bytes, 2 nodes x 2
	 * trainers, aggregate RAM 1.2x the dataset */
	struct catalog *c = fake(8, 960, 2500);
	struct setup s;
	uint64_t D = 8ull * 960 * ALIGN_UP(2500ull, 64ull);
	setup(&s, c, 2, 2, 48, D * 6 / 10);
	struct plan p;
	cr_assert_eq(plan_build_files(&p, c, &s.sh, 0, s.rank_node, 2, s.cap), 0);
	uint32_t per_node[2] = { 0, 0 };
	for (uint32_t f = 0; f < 8; f++) {
		int k = file_node(&p, c, f);
		cr_assert(k >= 0, "file %u is split over the nodes or not cached", f);
		per_node[k]++;
	}
	cr_assert_eq(per_node[0], 4, "files per node: %u / %u", per_node[0], per_node[1]);
	cr_assert_eq(p.cached_samples, c->nsamples);
	cr_assert_leq(p.ram_used[0], s.cap[0].ram);
	cr_assert_leq(p.ram_used[1], s.cap[1].ram);
	/* a file's samples sit in file order in its owner's RAM */
	for (uint64_t i = 1; i < 960; i++)
		cr_assert_gt(p.off[i], p.off[i - 1]);
	plan_free(&p);
	fake_free(c);
}

Test(plan_group, the_node_reading_most_owns_within_its_share)
{
	/* node 0 runs 3 trainers, node 1 one: node 0 reads 3/4 of every file.
	 * Capacity for everything: node 0 owns the files it reads most until
	 * its even share is reached, node 1 the rest */
	struct catalog *c = fake(6, 100, 1000);
	struct setup s;
	cr_assert_eq(sampler_shape_init(&s.sh, c->nsamples, 1, 4, 10, false, true), 0);
	uint32_t rn[4] = { 0, 0, 0, 1 };
	memcpy(s.rank_node, rn, sizeof(rn));
	s.cap[0] = s.cap[1] = (struct plan_cap){ .ram = 1ull << 30 };
	struct plan p;
	cr_assert_eq(plan_build_files(&p, c, &s.sh, 0, s.rank_node, 2, s.cap), 0);
	uint32_t per_node[2] = { 0, 0 };
	for (uint32_t f = 0; f < 6; f++) {
		int k = file_node(&p, c, f);
		cr_assert(k >= 0, "file %u split", f);
		per_node[k]++;
	}
	cr_assert_eq(per_node[0], 3, "node 0 reads most, up to its even share (3 files): %u",
		     per_node[0]);
	cr_assert_eq(per_node[1], 3);
	plan_free(&p);
	fake_free(c);
}

Test(plan_group, a_smaller_cache_holds_whole_files_first)
{
	/* one node, RAM for 2.5 of 5 files: two whole files and half of a
	 * third, the rest uncached; cached bytes = what the RAM holds */
	struct catalog *c = fake(5, 200, 1024);
	struct setup s;
	setup(&s, c, 1, 2, 16, 500ull * 1024);
	struct plan p;
	cr_assert_eq(plan_build_files(&p, c, &s.sh, 0, s.rank_node, 1, s.cap), 0);
	cr_assert_eq(p.cached_samples, 500);
	uint32_t whole = 0, none = 0, part = 0;
	for (uint32_t f = 0; f < 5; f++) {
		uint32_t k = 0;
		for (uint64_t x = c->files[f].first; x < c->files[f].first + 200; x++)
			k += p.tier[x] != PLAN_NONE;
		whole += k == 200;
		none += k == 0;
		part += k > 0 && k < 200;
	}
	cr_assert(whole == 2 && part == 1 && none == 2, "whole %u, part %u, none %u", whole, part,
		  none);
	plan_free(&p);
	fake_free(c);
}

Test(plan_group, a_full_owner_spills_the_rest_of_its_file)
{
	/* 2 nodes with RAM for 1.5 files each, 3 files: the third goes half to
	 * each node (whole files first) */
	struct catalog *c = fake(3, 100, 4096);
	struct setup s;
	setup(&s, c, 2, 1, 8, 150ull * 4096);
	struct plan p;
	cr_assert_eq(plan_build_files(&p, c, &s.sh, 0, s.rank_node, 2, s.cap), 0);
	cr_assert_eq(p.cached_samples, 300, "everything fits the aggregate cache");
	uint32_t split = 0;
	for (uint32_t f = 0; f < 3; f++)
		split += file_node(&p, c, f) < 0;
	cr_assert_eq(split, 1, "one file split over the two nodes: %u", split);
	cr_assert_gt(p.spilled, 0);
	plan_free(&p);
	fake_free(c);
}

Test(plan_group, one_sample_files_as_plan_build)
{
	struct catalog *c = fake(300, 1, 5000);
	for (uint64_t x = 0; x < 300; x++)
		c->samples[x].length = 1000 + x * 37 % 9000;
	struct setup s;
	setup(&s, c, 3, 2, 4, 300ull * 1024);
	struct plan a, b;
	cr_assert_eq(plan_build_files(&a, c, &s.sh, 0, s.rank_node, 3, s.cap), 0);
	cr_assert_eq(plan_build(&b, c, &s.sh, 0, s.rank_node, 3, s.cap), 0);
	cr_assert(memcmp(a.tier, b.tier, 300) == 0 && memcmp(a.owner, b.owner, 300 * 2) == 0 &&
		  memcmp(a.off, b.off, 300 * 8) == 0, "one-sample files: the same plan");
	plan_free(&a);
	plan_free(&b);
	fake_free(c);
}
