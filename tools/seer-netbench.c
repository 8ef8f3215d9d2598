/* seer-netbench: peer sample-transfer throughput and latency through the
 * data plane (src/net/net.h), between daemons started by MPI.
 *
 *   mpirun -np 2 bin/seer-netbench --provider "tcp;ofi_rxm" --size 128KiB \
 *          --count 20000 --inflight 8
 *
 * Rank 0 owns the samples and answers from its lookup (zero-copy, or through
 * its dispatcher with --defer); every other rank fetches from rank 0 with
 * --inflight fetches outstanding. Addresses are exchanged with MPI_Allgather,
 * as seerd does. A benchmark: it prints numbers and fails only on errors. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <mpi.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/net/net.h"
#include "../src/util/util.h"

#define SRC_SLOTS 8u   /* distinct source buffers on the owner */
#define TAG_DONE 71

struct opts {
	const char *provider;
	uint64_t size, count, inflight, warmup;
	double timeout_s;
	bool defer, verify;
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: mpirun -np N seer-netbench [options]\n"
		"\n"
		"Ranks 1..N-1 fetch samples from rank 0 over libfabric, as seerd's peers do,\n"
		"and report GB/s and per-fetch latency percentiles.\n"
		"\n"
		"  --provider NAME   libfabric provider (tcp;ofi_rxm)\n"
		"  --size BYTES      sample size, units allowed: 128KiB, 2MiB (128KiB)\n"
		"  --count N         timed fetches per requester (10000)\n"
		"  --inflight K      fetches outstanding per requester (8)\n"
		"  --warmup N        untimed fetches first (count / 10, at most 1000)\n"
		"  --defer           the owner answers through its dispatcher (net_reply)\n"
		"                    instead of from the lookup\n"
		"  --verify          compare every delivered byte (slower)\n"
		"  --timeout SEC     per-fetch timeout (10)\n");
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "provider", required_argument, NULL, 'p' },
		{ "size", required_argument, NULL, 's' },
		{ "count", required_argument, NULL, 'n' },
		{ "inflight", required_argument, NULL, 'k' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "timeout", required_argument, NULL, 't' },
		{ "defer", no_argument, NULL, 'd' },
		{ "verify", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	*o = (struct opts){ .provider = "tcp;ofi_rxm", .size = 128 << 10, .count = 10000,
			    .inflight = 8, .warmup = UINT64_MAX, .timeout_s = 10 };
	int c, li = 0;
	while ((c = getopt_long(argc, argv, "h", lo, &li)) != -1) {
		int rc = 0;
		switch (c) {
		case 'p':
			o->provider = optarg;
			break;
		case 's':
			rc = parse_size(optarg, &o->size);
			break;
		case 'n':
			rc = parse_u64(optarg, &o->count);
			break;
		case 'k':
			rc = parse_u64(optarg, &o->inflight);
			break;
		case 'w':
			rc = parse_u64(optarg, &o->warmup);
			break;
		case 't':
			rc = parse_double(optarg, &o->timeout_s);
			break;
		case 'd':
			o->defer = true;
			break;
		case 'v':
			o->verify = true;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return 2;
		}
		if (rc) {
			fprintf(stderr, "seer-netbench: invalid value '%s' for --%s\n", optarg,
				lo[li].name);
			return 2;
		}
	}
	if (o->size == 0 || o->size > (UINT64_C(1) << 30) || o->count == 0 || o->inflight == 0 ||
	    o->inflight > 100000 || o->timeout_s <= 0) {
		fprintf(stderr, "seer-netbench: need 0 < size <= 1GiB, count > 0, "
				"0 < inflight <= 100000, timeout > 0\n");
		return 2;
	}
	if (o->warmup == UINT64_MAX)
		o->warmup = MIN(o->count / 10, 1000);
	return 0;
}

static uint8_t pattern_byte(uint64_t i)
{
	return (uint8_t)((i * UINT64_C(0x9E3779B97F4A7C15)) >> 56);
}

struct owner {
	uint8_t *src;
	uint64_t size;
	bool defer;
};

static int lookup(void *ctx, uint32_t peer, uint32_t sample, uint64_t len, const void **src)
{
	struct owner *ow = ctx;
	(void)peer;
	if (len != ow->size)
		return -EINVAL;
	if (ow->defer)
		return 0;
	*src = ow->src + (sample % SRC_SLOTS) * ow->size;
	return 1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(const double *v, uint64_t n, double p)
{
	uint64_t i = (uint64_t)(p * (double)(n - 1) + 0.5);
	return v[MIN(i, n - 1)];
}

/* Owner: answer until every requester says it is done. */
static int run_owner(struct net *n, struct owner *ow, int nranks)
{
	int ndone = 0, dummy[64];
	MPI_Request req[64];
	for (int r = 1; r < nranks; r++)
		MPI_Irecv(&dummy[r], 1, MPI_INT, r, TAG_DONE, MPI_COMM_WORLD, &req[r - 1]);
	uint64_t replies = 0, reply_errors = 0;
	while (ndone < nranks - 1) {
		struct pollfd pf = { net_event_fd(n), POLLIN, 0 };
		poll(&pf, 1, 1);
		for (struct net_event *e = net_take_events(n), *next; e; e = next) {
			next = e->next;
			if (e->kind == NET_REQUEST)
				net_reply(n, e->peer, e->req_id,
					  ow->src + (e->sample % SRC_SLOTS) * ow->size, e->len, NULL);
			else if (e->kind == NET_REPLY_DONE && (replies++, e->status))
				reply_errors++;
			net_event_free(e);
		}
		int flag = 0;
		MPI_Testall(nranks - 1, req, &flag, MPI_STATUSES_IGNORE);
		if (flag)
			ndone = nranks - 1;
	}
	struct net_stats s;
	net_get_stats(n, &s);
	printf("rank 0 served %llu samples (%llu bytes), %llu NAKs, %llu deferred replies "
	       "(%llu failed), %llu malformed messages\n",
	       (unsigned long long)s.served, (unsigned long long)s.served_bytes,
	       (unsigned long long)s.naks, (unsigned long long)replies,
	       (unsigned long long)reply_errors, (unsigned long long)s.bad_msgs);
	return reply_errors ? 1 : 0;
}

struct slot {
	uint32_t idx;
	uint32_t sample;
};

/* Requester: `total` fetches with `o->inflight` outstanding; latencies of
 * the timed ones into lat. Returns failures. */
static uint64_t fetch_phase(struct net *n, const struct opts *o, uint8_t *dst, struct slot *slots,
			    uint64_t total, uint32_t first_sample, double *lat, uint64_t *bad_bytes)
{
	uint64_t issued = 0, done = 0, failed = 0;
	uint64_t k = MIN(o->inflight, total);
	for (uint64_t i = 0; i < k; i++) {
		slots[i].sample = first_sample + (uint32_t)issued++;
		net_fetch(n, 0, slots[i].sample, dst + i * o->size, o->size, &slots[i]);
	}
	while (done < total) {
		struct pollfd pf = { net_event_fd(n), POLLIN, 0 };
		poll(&pf, 1, 100);
		for (struct net_event *e = net_take_events(n), *next; e; e = next) {
			next = e->next;
			struct slot *sl = e->user;
			uint8_t *d = dst + sl->idx * o->size;
			if (e->status) {
				failed++;
				if (failed <= 5)
					fprintf(stderr, "seer-netbench: fetch of sample %u: %s\n",
						sl->sample, strerror(-e->status));
			} else {
				uint64_t base = (uint64_t)(sl->sample % SRC_SLOTS) * o->size;
				if (d[0] != pattern_byte(base) ||
				    d[o->size - 1] != pattern_byte(base + o->size - 1))
					(*bad_bytes)++;
				else if (o->verify)
					for (uint64_t i = 0; i < o->size; i++)
						if (d[i] != pattern_byte(base + i)) {
							(*bad_bytes)++;
							break;
						}
				/* the next fetch into this slot must write them again */
				d[0] = (uint8_t)~pattern_byte(base);
				d[o->size - 1] = (uint8_t)~pattern_byte(base + o->size - 1);
			}
			if (lat)
				lat[done] = e->seconds;
			done++;
			if (issued < total) {
				sl->sample = first_sample + (uint32_t)issued++;
				net_fetch(n, 0, sl->sample, d, o->size, sl);
			}
			net_event_free(e);
		}
	}
	return failed;
}

int main(int argc, char **argv)
{
	int provided;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
	int rank, nranks;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	log_set_node(rank);
	log_set_prog("seer-netbench");
	struct opts o;
	int rc = parse_args(argc, argv, &o);
	if (rc || nranks < 2 || nranks > 64) {
		if (!rc && rank == 0)
			fprintf(stderr, "seer-netbench: run with 2 to 64 MPI ranks\n");
		MPI_Finalize();
		return rc == 1 ? 0 : 2;
	}

	struct owner ow = { .size = o.size, .defer = o.defer };
	size_t region_len = rank == 0 ? SRC_SLOTS * o.size : o.inflight * o.size;
	uint8_t *region = aligned_alloc(4096, ALIGN_UP(region_len, 4096));
	if (!region) {
		fprintf(stderr, "seer-netbench: out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	if (rank == 0)
		for (size_t i = 0; i < region_len; i++)
			region[i] = pattern_byte(i);
	else
		memset(region, 0, region_len);
	ow.src = region;

	struct net_opts no = {
		.provider = o.provider,
		.node = (uint32_t)rank,
		.nnodes = (uint32_t)nranks,
		.region = region,
		.region_len = region_len,
		.lookup = lookup,
		.lookup_ctx = &ow,
		.timeout_s = o.timeout_s,
		.suspect_s = 1,
	};
	struct net *n;
	void *addr;
	size_t alen;
	char err[512];
	rc = net_create(&n, &no, &addr, &alen, err, sizeof(err));
	int ok = rc == 0, all_ok;
	MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
	if (!all_ok) {
		if (!ok)
			fprintf(stderr, "seer-netbench: rank %d: %s\n", rank, err);
		if (ok)
			net_destroy(n);
		MPI_Finalize();
		return 1;
	}
	unsigned long my_len = alen, max_len = 0;
	MPI_Allreduce(&my_len, &max_len, 1, MPI_UNSIGNED_LONG, MPI_MAX, MPI_COMM_WORLD);
	if (max_len != my_len) {
		fprintf(stderr, "seer-netbench: rank %d: address lengths differ (%zu vs %lu)\n",
			rank, alen, max_len);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	uint8_t *addrs = xmalloc(alen * (size_t)nranks);
	MPI_Allgather(addr, (int)alen, MPI_BYTE, addrs, (int)alen, MPI_BYTE, MPI_COMM_WORLD);
	free(addr);
	rc = net_start(n, addrs, alen, err, sizeof(err));
	free(addrs);
	if (rc) {
		fprintf(stderr, "seer-netbench: rank %d: %s\n", rank, err);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	if (rank == 0) {
		char sz[32];
		printf("seer-netbench: provider %s, %d ranks, sample %s, %llu timed fetches per "
		       "requester, %llu in flight, %llu warm-up, %s\n",
		       o.provider, nranks, fmt_size(sz, sizeof(sz), o.size),
		       (unsigned long long)o.count, (unsigned long long)o.inflight,
		       (unsigned long long)o.warmup,
		       o.defer ? "deferred replies (net_reply)" : "zero-copy replies from lookup");
		fflush(stdout);
	}
	MPI_Barrier(MPI_COMM_WORLD);

	int status = 0;
	if (rank == 0) {
		status = run_owner(n, &ow, nranks);
	} else {
		struct slot *slots = xcalloc(o.inflight, sizeof(*slots));
		for (uint64_t i = 0; i < o.inflight; i++)
			slots[i].idx = (uint32_t)i;
		double *lat = xcalloc(o.count, sizeof(*lat));
		uint64_t bad = 0, failed = 0;
		if (o.warmup)
			failed += fetch_phase(n, &o, region, slots, o.warmup, 0, NULL, &bad);
		double t0 = now_s();
		failed += fetch_phase(n, &o, region, slots, o.count, (uint32_t)o.warmup, lat, &bad);
		double el = now_s() - t0;
		qsort(lat, o.count, sizeof(*lat), cmp_double);
		double gbs = (double)(o.count * o.size) / el / 1e9;
		printf("rank %d <- rank 0: %llu x %llu B in %.3f s = %.3f GB/s (%.2f GiB/s), %.0f "
		       "fetches/s; latency us p50 %.0f p90 %.0f p99 %.0f max %.0f; failed %llu, "
		       "wrong bytes %llu\n",
		       rank, (unsigned long long)o.count, (unsigned long long)o.size, el, gbs,
		       gbs * 1e9 / (1u << 30), (double)o.count / el, pct(lat, o.count, .5) * 1e6,
		       pct(lat, o.count, .9) * 1e6, pct(lat, o.count, .99) * 1e6,
		       lat[o.count - 1] * 1e6, (unsigned long long)failed, (unsigned long long)bad);
		fflush(stdout);
		status = failed || bad;
		int one = 1;
		MPI_Send(&one, 1, MPI_INT, 0, TAG_DONE, MPI_COMM_WORLD);
		free(lat);
		free(slots);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	net_destroy(n);
	free(region);
	int any = 0;
	MPI_Allreduce(&status, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
	MPI_Finalize();
	return any ? 1 : 0;
}
