/* The PFS emulator's timing model (tools/pfsemu/model.c) on synthetic clocks:
 * in-flight bounds and FIFO order, RPC splitting, bandwidth, readahead,
 * metadata queue, busy time and reset. Every expectation is computed by hand
 * from the model's definition (docs/pfsemu.md, "The model"), not by the model. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "../../src/util/util.h"
#include "../../tools/pfsemu/model.h"

#define MS 1000000ull
#define MiB (1ull << 20)

static struct pfsm_config cfg(void)
{
	return (struct pfsm_config){ .osts = 1, .rpc_size = MiB, .lat_ns = 2 * MS,
				     .meta_lat_ns = MS };
}

static const struct pfsm_queue_snap *queue(const struct pfsm_snap *s, const char *name)
{
	for (size_t i = 0; i < s->nq; i++)
		if (strcmp(s->q[i].name, name) == 0)
			return &s->q[i];
	cr_assert_fail("no queue %s", name);
	return NULL;
}

/* n reads of `size` bytes, each on its own open file, all arriving at t. */
static void burst(struct pfsm *m, unsigned n, uint64_t size, uint64_t t, uint64_t *done)
{
	for (unsigned i = 0; i < n; i++) {
		struct pfsm_file f;
		struct pfsm_read r;
		pfsm_file_init(&f, 0);
		pfsm_read(m, &f, t, 1000 + 7919 * i, size, 100 * MiB, &r);
		done[i] = r.done;
		cr_assert_eq(r.rpcs, 1);
		pfsm_file_close(m, &f);
	}
}

Test(pfsemu_model, ost_inflight_bound_is_fifo_servers)
{
	struct pfsm_config c = cfg();
	c.ost_limit = 8;
	struct pfsm m;
	pfsm_init(&m, &c, 0);
	uint64_t done[100];
	burst(&m, 100, 2500, 0, done);
	for (unsigned i = 0; i < 100; i++)
		cr_assert_eq(done[i], (i / 8 + 1) * 2 * MS, "read %u done at %llu", i,
			     (unsigned long long)done[i]);
	struct pfsm_snap s;
	pfsm_snapshot(&m, 0, &s);
	cr_assert_eq(queue(&s, "ost0")->hwm, 8);
	cr_assert_eq(queue(&s, "mount")->hwm, 8);
	cr_assert_eq(queue(&s, "ost0")->inflight, 8);
	cr_assert_eq(s.k.rpcs, 100);
	cr_assert_eq(s.k.rpc_bytes, 250000);
	/* queue wait: reads 8k..8k+7 start at 2k ms */
	uint64_t wait = 0;
	for (unsigned i = 0; i < 100; i++)
		wait += (i / 8) * 2 * MS;
	cr_assert_eq(queue(&s, "ost0")->wait_ns, wait);
	pfsm_snap_free(&s);
	pfsm_snapshot(&m, 26 * MS, &s);
	cr_assert_eq(queue(&s, "ost0")->inflight, 0);
	cr_assert_eq(s.busy_ns, 26 * MS, "busy %llu", (unsigned long long)s.busy_ns);
	pfsm_snap_free(&s);
	pfsm_destroy(&m);
}

Test(pfsemu_model, mount_limit_binds_with_ost_limit)
{
	struct pfsm_config c = cfg();
	c.ost_limit = 8;
	c.mount_limit = 3;
	struct pfsm m;
	pfsm_init(&m, &c, 0);
	uint64_t done[30];
	burst(&m, 30, 4096, 5 * MS, done);
	for (unsigned i = 0; i < 30; i++)
		cr_assert_eq(done[i], 5 * MS + (i / 3 + 1) * 2 * MS);
	struct pfsm_snap s;
	pfsm_snapshot(&m, 5 * MS, &s);
	cr_assert_eq(queue(&s, "mount")->hwm, 3);
	cr_assert_eq(queue(&s, "ost0")->hwm, 3);
	pfsm_snap_free(&s);
	pfsm_destroy(&m);
}

Test(pfsemu_model, files_spread_over_osts_each_with_its_bound)
{
	struct pfsm_config c = cfg();
	c.osts = 2;
	c.ost_limit = 1;
	struct pfsm m;
	pfsm_init(&m, &c, 0);
	struct pfsm_file a, b;
	pfsm_file_init(&a, 0);
	pfsm_file_init(&b, 1);
	struct pfsm_read r;
	uint64_t last_a = 0, last_b = 0;
	for (int i = 0; i < 4; i++) {
		pfsm_read(&m, &a, 0, (uint64_t)i * 10 * MiB, 100, 100 * MiB, &r);
		last_a = r.done;
		pfsm_read(&m, &b, 0, (uint64_t)i * 10 * MiB, 100, 100 * MiB, &r);
		last_b = r.done;
	}
	cr_assert_eq(last_a, 8 * MS);  /* 4 reads, one at a time per OST */
	cr_assert_eq(last_b, 8 * MS);
	struct pfsm_snap s;
	pfsm_snapshot(&m, 0, &s);
	cr_assert_eq(queue(&s, "mount")->hwm, 2);
	cr_assert_eq(queue(&s, "ost0")->requests, 4);
	cr_assert_eq(queue(&s, "ost1")->requests, 4);
	pfsm_snap_free(&s);
	cr_assert_lt(pfsm_ost_of(&m, "train/img_0_of_8.tfrecord"), 2);
	pfsm_file_close(&m, &a);
	pfsm_file_close(&m, &b);
	pfsm_destroy(&m);
}

Test(pfsemu_model, large_reads_split_into_rpcs_in_parallel)
{
	struct pfsm_config c = cfg();
	c.rpc_size = 256 << 10;
	struct pfsm m;
	pfsm_init(&m, &c, 0);
	struct pfsm_file f;
	pfsm_file_init(&f, 0);
	struct pfsm_read r;
	pfsm_read(&m, &f, 0, 0, MiB, 10 * MiB, &r);
	cr_assert_eq(r.rpcs, 4);
	cr_assert_eq(r.rpc_bytes, MiB);
	cr_assert_eq(r.done, 2 * MS, "the four RPCs run at once: one latency");
	pfsm_read(&m, &f, 10 * MS, 3 * MiB + 1, 300000, 10 * MiB, &r);
	cr_assert_eq(r.rpcs, 2, "300000 bytes = 262144 + 37856");
	pfsm_file_close(&m, &f);
	pfsm_destroy(&m);

	c.ost_limit = 1;
	pfsm_init(&m, &c, 0);
	pfsm_file_init(&f, 0);
	pfsm_read(&m, &f, 0, 0, MiB, 10 * MiB, &r);
	cr_assert_eq(r.done, 8 * MS, "one RPC in flight: four latencies");
	struct pfsm_snap s;
	pfsm_snapshot(&m, 0, &s);
	cr_assert_eq(queue(&s, "ost0")->hwm, 1);
	cr_assert_eq(s.k.rpcs, 4);
	pfsm_snap_free(&s);
	pfsm_file_close(&m, &f);
	pfsm_destroy(&m);
}

Test(pfsemu_model, bandwidth_is_shared_and_never_exceeded)
{
	struct pfsm_config c = cfg();
	c.lat_ns = 0;
	c.bandwidth = 1000000000; /* 1 GB/s: 1 MB per ms */
	struct pfsm m;
	pfsm_init(&m, &c, 0);
	uint64_t done[10];
	for (unsigned i = 0; i < 10; i++) {
		struct pfsm_file f;
		struct pfsm_read r;
		pfsm_file_init(&f, 0);
		pfsm_read(&m, &f, 0, 0, 1000000, 10 * MiB, &r);
		done[i] = r.done;
		pfsm_file_close(&m, &f);
	}
	for (unsigned i = 0; i < 10; i++)
		cr_assert_eq(done[i], (i + 1) * MS);
	/* after idle time the link starts again from the arrival */
	struct pfsm_file f;
	struct pfsm_read r;
	pfsm_file_init(&f, 0);
	pfsm_read(&m, &f, 50 * MS, 0, 500000, 10 * MiB, &r);
	cr_assert_eq(r.done, 50 * MS + MS / 2);
	pfsm_file_close(&m, &f);
	pfsm_destroy(&m);
}

/* A reader that reads 1 MiB sequentially, each read issued when the previous
 * one returns (like cat). */
static uint64_t seq_reader(struct pfsm *m, struct pfsm_file *f, uint64_t t, uint64_t fsize,
			   uint64_t *rpcs)
{
	*rpcs = 0;
	for (uint64_t off = 0; off < fsize; off += MiB) {
		struct pfsm_read r;
		pfsm_read(m, f, t, off, MIN(MiB, fsize - off), fsize, &r);
		*rpcs += r.rpcs;
		t = r.done;
	}
	return t;
}

Test(pfsemu_model, readahead_serves_sequential_reads)
{
	struct pfsm_config c = cfg();
	c.rpc_size = 4 * MiB;
	c.ra_max = 16 * MiB;
	c.ost_limit = 8;
	struct pfsm m;
	pfsm_init(&m, &c, 0);
	struct pfsm_file f;
	pfsm_file_init(&f, 0);
	uint64_t rpcs;
	uint64_t t = seq_reader(&m, &f, 0, 64 * MiB, &rpcs);
	struct pfsm_snap s;
	pfsm_snapshot(&m, t, &s);
	cr_assert_eq(s.k.rpc_bytes, 64 * MiB, "every byte fetched once, nothing past EOF");
	/* read 1: [0,1); read 2: [1,4) + [4,8); then one aligned 4 MiB RPC per
	 * window step until the end: 1 + 2 + 14 = 17 */
	cr_assert_eq(s.k.rpcs, 17, "rpcs %llu", (unsigned long long)s.k.rpcs);
	cr_assert_eq(rpcs, 17);
	cr_assert_eq(s.k.ra_hit_bytes, 62 * MiB, "reads 3..64 come from readahead");
	cr_assert_eq(s.k.ra_unused_bytes, 0);
	/* without readahead: 64 reads of one latency each = 128 ms */
	cr_assert_lt(t, 64 * 2 * MS / 4, "t %llu", (unsigned long long)t);
	pfsm_snap_free(&s);

	/* a seek drops the window: its unread bytes are unused */
	struct pfsm_file g;
	pfsm_file_init(&g, 0);
	struct pfsm_read r;
	pfsm_read(&m, &g, t, 0, MiB, 64 * MiB, &r);
	pfsm_read(&m, &g, t, MiB, MiB, 64 * MiB, &r);   /* fetches [1, 8) */
	cr_assert_eq(r.rpcs, 2);
	pfsm_read(&m, &g, t, 40 * MiB, 4096, 64 * MiB, &r);
	cr_assert_eq(r.rpcs, 1);
	cr_assert_eq(r.rpc_bytes, 4096);
	cr_assert_eq(r.hit_bytes, 0);
	pfsm_snapshot(&m, t, &s);
	cr_assert_eq(s.k.ra_unused_bytes, 6 * MiB, "[2, 8) never read");
	pfsm_snap_free(&s);
	pfsm_file_close(&m, &g);
	pfsm_file_close(&m, &f);
	pfsm_destroy(&m);
}

Test(pfsemu_model, random_reads_get_no_readahead)
{
	struct pfsm_config c = cfg();
	c.rpc_size = 4 * MiB;
	c.ra_max = 256 * MiB;
	struct pfsm m;
	pfsm_init(&m, &c, 0);
	struct pfsm_file f;
	pfsm_file_init(&f, 0);
	for (unsigned i = 0; i < 50; i++) {
		struct pfsm_read r;
		pfsm_read(&m, &f, 0, (i * 37 % 50) * 50000, 2500, 2500000, &r);
		cr_assert_eq(r.rpcs, 1);
	}
	struct pfsm_snap s;
	pfsm_snapshot(&m, 0, &s);
	cr_assert_eq(s.k.rpc_bytes, 50 * 2500);
	cr_assert_eq(s.k.ra_bytes, 0);
	pfsm_snap_free(&s);
	pfsm_file_close(&m, &f);
	pfsm_destroy(&m);
}

Test(pfsemu_model, metadata_has_its_own_queue)
{
	struct pfsm_config c = cfg();
	c.meta_limit = 1;
	c.ost_limit = 8;
	struct pfsm m;
	pfsm_init(&m, &c, 0);
	for (unsigned i = 0; i < 5; i++)
		cr_assert_eq(pfsm_meta(&m, 0), (i + 1) * MS);
	struct pfsm_file f;
	struct pfsm_read r;
	pfsm_file_init(&f, 0);
	pfsm_read(&m, &f, 0, 0, 100, 1000, &r);
	cr_assert_eq(r.done, 2 * MS, "a read does not wait for metadata");
	struct pfsm_snap s;
	pfsm_snapshot(&m, 0, &s);
	cr_assert_eq(s.k.meta_ops, 5);
	cr_assert_eq(queue(&s, "mdt")->hwm, 1);
	cr_assert_eq(queue(&s, "mount")->hwm, 2);
	pfsm_snap_free(&s);
	pfsm_file_close(&m, &f);
	pfsm_destroy(&m);
}

Test(pfsemu_model, busy_time_and_reset)
{
	struct pfsm_config c = cfg();
	struct pfsm m;
	pfsm_init(&m, &c, 0);
	uint64_t d[2];
	burst(&m, 2, 100, 0, d);
	burst(&m, 1, 100, 10 * MS, d);
	struct pfsm_snap s;
	pfsm_snapshot(&m, 11 * MS, &s);
	cr_assert_eq(s.busy_ns, 3 * MS);
	cr_assert_eq(queue(&s, "mount")->inflight, 1);
	pfsm_snap_free(&s);
	pfsm_reset(&m, 11 * MS);
	pfsm_snapshot(&m, 20 * MS, &s);
	cr_assert_eq(s.busy_ns, MS, "the part of the running read after the reset");
	cr_assert_eq(s.k.rpcs, 0);
	cr_assert_eq(queue(&s, "mount")->hwm, 1, "restarts at what is in flight");
	cr_assert_eq(queue(&s, "mount")->requests, 0);
	pfsm_snap_free(&s);
	pfsm_destroy(&m);
}
