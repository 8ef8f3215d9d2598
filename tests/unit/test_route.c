/* Tier routing (daemon/route.c) driven directly, without a daemon: for a
 * hand-made plan of two nodes, each sample's need is served from RAM, this
 * node's NVMe, a peer or the PFS, and the answer follows what the node can
 * use now (a disabled NVMe tier, a suspect peer, no data plane, nopfs). */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>

#include "../../daemon/route.h"
#include "../../src/plan.h"

/* Eight samples on nodes 0 and 1; this node is 0. */
static const uint8_t tier[8] = { PLAN_RAM, PLAN_RAM, PLAN_NVME, PLAN_NVME,
				 PLAN_NONE, PLAN_RAM, PLAN_NVME, PLAN_NONE };
static const uint16_t owner[8] = { 0, 1, 0, 1, 0, 0, 0, 0 };
static bool suspect[2];

static bool peer_ok(void *ctx, uint32_t node)
{
	cr_assert_eq(ctx, (void *)suspect, "the context is passed through");
	return !suspect[node];
}

static struct route_view view(void)
{
	suspect[0] = suspect[1] = false;
	return (struct route_view){ .node = 0, .nsamples = 8, .tier = tier, .owner = owner,
				    .nvme_ok = true, .peer_ok = peer_ok, .peer_ctx = suspect };
}

static enum route_src route(const struct route_view *v, uint32_t s, uint32_t *key)
{
	return route_sample(v, 0, s, key);
}

Test(route, each_tier_per_sample)
{
	struct route_view v = view();
	static const enum route_src want[8] = { ROUTE_RAM, ROUTE_PEER, ROUTE_NVME, ROUTE_PEER,
						ROUTE_PFS, ROUTE_RAM, ROUTE_NVME, ROUTE_PFS };
	for (uint32_t s = 0; s < 8; s++) {
		uint32_t key = 12345;
		enum route_src got = route(&v, s, &key);
		cr_assert_eq(got, want[s], "sample %u: route %d, want %d", s, got, want[s]);
		if (got == ROUTE_RAM)
			cr_assert_eq(key, s, "the node-wide plan keys a RAM slot by its sample");
		else
			cr_assert_eq(key, ROUTE_NOKEY);
	}
	cr_assert(route_local_ram(&v, 0) && !route_local_ram(&v, 1) && !route_local_ram(&v, 2));
	cr_assert(route_local_nvme(&v, 2) && !route_local_nvme(&v, 3) && !route_local_nvme(&v, 0));
}

Test(route, disabled_nvme_reads_the_pfs)
{
	struct route_view v = view();
	v.nvme_ok = false;
	uint32_t key;
	cr_assert_eq(route(&v, 2, &key), ROUTE_PFS, "this node's NVMe sample, tier off");
	cr_assert_eq(route(&v, 6, &key), ROUTE_PFS);
	cr_assert_eq(route(&v, 3, &key), ROUTE_PEER, "another node's NVMe copy is still asked for");
	cr_assert_eq(route(&v, 0, &key), ROUTE_RAM);
}

Test(route, suspect_peer_or_no_data_plane_reads_the_pfs)
{
	struct route_view v = view();
	uint32_t key;
	suspect[1] = true;
	cr_assert_eq(route(&v, 1, &key), ROUTE_PFS);
	cr_assert_eq(route(&v, 3, &key), ROUTE_PFS);
	suspect[1] = false;
	cr_assert_eq(route(&v, 1, &key), ROUTE_PEER, "decided per need: the peer is back");
	v.peer_ok = NULL;
	cr_assert_eq(route(&v, 1, &key), ROUTE_PFS, "one node: no data plane");
	cr_assert_eq(route(&v, 0, &key), ROUTE_RAM);
}

Test(route, nopfs_serves_each_rank_its_own_copies)
{
	/* ranks 0 and 1 on this node: share 0 holds samples 1 and 4 (keys 0, 1),
	 * share 1 holds sample 4 (key 2) */
	uint32_t s0[] = { 1, 4 }, s1[] = { 4 };
	struct plan_nopfs_share shares[2] = { { s0, 2, 0 }, { s1, 1, 2 } };
	struct plan_nopfs np = { .share = shares, .nshares = 2, .nkeys = 3 };
	static const uint8_t none[8] = { 0 };
	uint32_t local_idx[2] = { 0, 1 };
	struct route_view v = view();
	v.tier = none; /* the node-wide plan caches nothing under nopfs */
	v.np = &np;
	v.local_idx = local_idx;
	v.peer_ok = NULL;
	uint32_t key;
	cr_assert_eq(route_sample(&v, 0, 1, &key), ROUTE_RAM);
	cr_assert_eq(key, 8 + 0, "keys follow the samples' 8");
	cr_assert_eq(route_sample(&v, 0, 4, &key), ROUTE_RAM);
	cr_assert_eq(key, 8 + 1);
	cr_assert_eq(route_sample(&v, 1, 4, &key), ROUTE_RAM);
	cr_assert_eq(key, 8 + 2, "rank 1 has a copy of its own");
	cr_assert_eq(route_sample(&v, 1, 1, &key), ROUTE_PFS, "not in rank 1's share");
	cr_assert_eq(route_sample(&v, 0, 0, &key), ROUTE_PFS);
	cr_assert_eq(route_ram_key(&v, 1, 7), ROUTE_NOKEY);
}
