/* Tier routing (daemon/route.c) driven directly, without a daemon: for a
 * hand-made plan of two nodes, each sample's need is served from RAM, this
 * node's NVMe, a peer or the PFS, and the answer follows what the node can
 * use now (a disabled NVMe tier, a suspect peer, no data plane, nopfs,
 * replicas of the other node's samples and where their fills come from);
 * and when a trainer's next batch is prepared (lookahead, pacing). */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>

#include "../../daemon/route.h"
#include "../../src/plan/plan.h"

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

/* Replicas on node 0 of samples node 1 owns: 1 (RAM there) in RAM here,
 * 3 (NVMe there) on NVMe here. Sample 4 is cached nowhere: never a replica. */
static const uint32_t repl_idx[8] = { 0, 1, 0, 2, 0, 0, 0, 0 };
static const uint8_t repl_tier[2] = { PLAN_RAM, PLAN_NVME };

static struct route_view view_repl(void)
{
	struct route_view v = view();
	v.repl_idx = repl_idx;
	v.repl_tier = repl_tier;
	return v;
}

Test(route, replicas_are_read_locally)
{
	struct route_view v = view_repl();
	static const enum route_src want[8] = { ROUTE_RAM, ROUTE_RAM, ROUTE_NVME, ROUTE_NVME,
						ROUTE_PFS, ROUTE_RAM, ROUTE_NVME, ROUTE_PFS };
	for (uint32_t s = 0; s < 8; s++) {
		uint32_t key = 12345;
		enum route_src got = route(&v, s, &key);
		cr_assert_eq(got, want[s], "sample %u: route %d, want %d", s, got, want[s]);
		cr_assert_eq(key, got == ROUTE_RAM ? s : ROUTE_NOKEY,
			     "a replica's RAM slot is keyed by its sample like an owned one");
	}
	cr_assert(route_replica(&v, 1) && route_replica(&v, 3));
	cr_assert(!route_replica(&v, 0) && !route_replica(&v, 2) && !route_replica(&v, 4));
	cr_assert(route_local_ram(&v, 1) && !route_local_nvme(&v, 1));
	cr_assert(route_local_nvme(&v, 3) && !route_local_ram(&v, 3));
	/* peers ask only the owner: a replica is not this node's to serve */
	cr_assert(route_owned(&v, 0) && route_owned(&v, 2) && route_owned(&v, 5));
	cr_assert(!route_owned(&v, 1) && !route_owned(&v, 3), "a replica is not owned");
	cr_assert(!route_owned(&v, 4), "a sample cached nowhere has no owner");
}

Test(route, replica_without_its_tier_asks_the_owner)
{
	struct route_view v = view_repl();
	uint32_t key;
	v.nvme_ok = false;
	cr_assert_eq(route(&v, 3, &key), ROUTE_PEER, "NVMe replica, tier off: the owner's copy");
	cr_assert_eq(route(&v, 1, &key), ROUTE_RAM, "the RAM replica is unaffected");
	suspect[1] = true;
	cr_assert_eq(route(&v, 3, &key), ROUTE_PFS, "and with the owner suspect: the PFS");
	cr_assert_eq(route(&v, 1, &key), ROUTE_RAM,
		     "a RAM replica stays local; its load asks route_fill_src");
}

Test(route, replica_fill_source)
{
	struct route_view v = view_repl();
	cr_assert_eq(route_fill_src(&v, 1, false), ROUTE_PEER, "from the owner");
	cr_assert_eq(route_fill_src(&v, 3, false), ROUTE_PEER, "from the owner's NVMe");
	cr_assert_eq(route_fill_src(&v, 1, true), ROUTE_PFS, "cache.replica_fill = pfs");
	suspect[1] = true;
	cr_assert_eq(route_fill_src(&v, 1, false), ROUTE_PFS, "owner suspect: the PFS");
	suspect[1] = false;
	cr_assert_eq(route_fill_src(&v, 1, false), ROUTE_PEER, "decided per load: the owner is back");
	cr_assert_eq(route_fill_src(&v, 0, false), ROUTE_PFS, "this node's own sample");
	cr_assert_eq(route_fill_src(&v, 4, false), ROUTE_PFS, "cached nowhere");
	v.peer_ok = NULL;
	cr_assert_eq(route_fill_src(&v, 1, false), ROUTE_PFS, "no data plane");
}

Test(route, no_replica_is_the_one_copy_route)
{
	/* an empty replica set routes every sample as replicas = off does */
	static const uint32_t none[8] = { 0 };
	struct route_view off = view(), empty = view_repl();
	empty.repl_idx = none;
	for (int nvme = 0; nvme < 2; nvme++) {
		for (int sus = 0; sus < 2; sus++) {
			off.nvme_ok = empty.nvme_ok = nvme;
			for (uint32_t s = 0; s < 8; s++) {
				suspect[1] = sus;
				uint32_t k1, k2;
				cr_assert_eq(route(&off, s, &k1), route(&empty, s, &k2), "sample %u", s);
				cr_assert_eq(k1, k2);
				cr_assert_eq(route_local_ram(&off, s), route_local_ram(&empty, s));
				cr_assert_eq(route_local_nvme(&off, s), route_local_nvme(&empty, s));
			}
		}
	}
}

/* Which needs still take a PFS read (the checkpoint drain's outlook): a PFS
 * route always; a RAM slot or NVMe copy only while absent and filled from
 * the PFS; a peer never. */
Test(route, reads_pfs_only_for_absent_copies_loaded_from_the_pfs)
{
	struct route_view v = view_repl();
	uint32_t key;
	for (uint32_t s = 0; s < 8; s++) {
		enum route_src src = route(&v, s, &key);
		bool want_absent = src == ROUTE_PFS || (src != ROUTE_PEER && !route_replica(&v, s));
		cr_assert_eq(route_reads_pfs(&v, src, key, s, CS_ABSENT, false), want_absent,
			     "sample %u (route %d) absent", s, src);
		cr_assert_eq(route_reads_pfs(&v, src, key, s, CS_READY, false), src == ROUTE_PFS,
			     "sample %u (route %d) loaded", s, src);
		cr_assert_eq(route_reads_pfs(&v, src, key, s, CS_TASK0 + 7, false), src == ROUTE_PFS,
			     "sample %u (route %d) loading: its read is queued already", s, src);
	}
	/* replicas 1 (RAM) and 3 (NVMe) come from their owner... */
	cr_assert(!route_reads_pfs(&v, ROUTE_RAM, 1, 1, CS_ABSENT, false));
	cr_assert(!route_reads_pfs(&v, ROUTE_NVME, ROUTE_NOKEY, 3, CS_ABSENT, false));
	/* ...unless the fill source is the PFS or the owner is suspect */
	cr_assert(route_reads_pfs(&v, ROUTE_RAM, 1, 1, CS_ABSENT, true));
	suspect[1] = true;
	cr_assert(route_reads_pfs(&v, ROUTE_NVME, ROUTE_NOKEY, 3, CS_ABSENT, false));
	cr_assert(!route_reads_pfs(&v, ROUTE_PEER, ROUTE_NOKEY, 3, CS_ABSENT, true),
		  "a peer fetch is never a PFS read (its fallback is queued when it fails)");
	/* nopfs: a rank's own copy not loaded yet is read from the PFS */
	cr_assert(route_reads_pfs(&v, ROUTE_RAM, 8 + 2, 4, CS_ABSENT, false));
	cr_assert(!route_reads_pfs(&v, ROUTE_RAM, 8 + 2, 4, CS_READY, false));
}

/* ---- when a trainer's next batch is prepared (route_next) ---- */

/* A trainer that took 10 batches and holds 2 more published (next_pub 12),
 * lookahead 4, a step of 100 ms, its take seen at t = 1 s. */
static struct route_next next_of(void)
{
	return (struct route_next){ .next_prep = 12, .next_pub = 12, .taken = 10, .lookahead = 4,
				    .pace = true, .step_s = 0.1, .taken_ns = 1000000000ull,
				    .now_ns = 1000000000ull };
}

Test(route_next, stays_lookahead_ahead_of_the_take)
{
	struct route_next n = next_of();
	n.pace = false;
	uint64_t until = 7;
	for (uint64_t p = 10; p < 14; p++) {
		n.next_prep = p;
		cr_assert_eq(route_next(&n, &until), ROUTE_PREPARE, "batch %llu", (unsigned long long)p);
	}
	n.next_prep = 14;
	cr_assert_eq(route_next(&n, &until), ROUTE_WAIT, "4 ahead of the 10 taken");
	n.taken = 11;
	cr_assert_eq(route_next(&n, &until), ROUTE_PREPARE, "one more taken, one more prepared");
	cr_assert_eq(until, 7, "untouched unless paced");
}

Test(route_next, paced_a_quarter_step_after_the_take)
{
	struct route_next n = next_of();
	uint64_t until = 0;
	cr_assert_eq(route_next(&n, &until), ROUTE_PACED, "it holds 2 more: it is not waiting");
	cr_assert_eq(until, 1000000000ull + 25000000ull, "25 ms: a quarter of 100 ms");
	n.now_ns = until - 1;
	cr_assert_eq(route_next(&n, &until), ROUTE_PACED);
	n.now_ns = until;
	cr_assert_eq(route_next(&n, &until), ROUTE_PREPARE, "the quarter step is over");
}

Test(route_next, at_most_pace_max)
{
	struct route_next n = next_of();
	n.step_s = 10.0;
	uint64_t until = 0;
	cr_assert_eq(route_next(&n, &until), ROUTE_PACED);
	cr_assert_eq(until, n.taken_ns + ROUTE_PACE_MAX_NS, "50 ms, not 2.5 s");
}

Test(route_next, at_once_when_pacing_cannot_help)
{
	uint64_t until = 0;
	struct route_next n = next_of();
	n.next_pub = n.taken; /* behind: it has nothing more in hand */
	n.next_prep = n.next_pub;
	cr_assert_eq(route_next(&n, &until), ROUTE_PREPARE, "behind");
	n = next_of();
	n.step_s = 0;
	cr_assert_eq(route_next(&n, &until), ROUTE_PREPARE, "no step time yet");
	n = next_of();
	n.step_s = 0.003; /* a quarter: 0.75 ms, under 1 ms */
	cr_assert_eq(route_next(&n, &until), ROUTE_PREPARE, "a step too short");
	n.step_s = 0.008; /* 2 ms */
	cr_assert_eq(route_next(&n, &until), ROUTE_PACED);
	cr_assert_eq(until, n.taken_ns + 2 * ROUTE_PACE_MIN_NS);
	n = next_of();
	n.pace = false;
	cr_assert_eq(route_next(&n, &until), ROUTE_PREPARE, "prefetch.pace = off");
	n = next_of();
	n.next_prep = 14;
	cr_assert_eq(route_next(&n, &until), ROUTE_WAIT, "lookahead first, paced or not");
}
