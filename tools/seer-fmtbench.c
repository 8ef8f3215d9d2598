/* seer-fmtbench: samples/s reading every sample of a dataset through catalog_read,
 * per format, cold (page cache dropped, when permitted) and warm.
 *
 *   /usr/bin/python3 tests/data/gen_formats.py --bench /tmp/fb      # same bytes, every format
 *   seer-fmtbench [-t THREADS] [-o seq|shuffle] [-r REPEATS] files=/tmp/fb/files/train \
 *       npz=/tmp/fb/npz/train hdf5=/tmp/fb/hdf5/train hdf5:gzip=/tmp/fb/hdf5_gzip/train ...
 *
 * FORMAT[:LABEL]=DIR: the label only names the line.
 *
 * The first pass of each dataset is cold (after dropping the page cache, when
 * permitted; "cold?" when not), the REPEATS others warm; -W: warm only.
 * Each pass reads all samples once, split across THREADS readers (one per
 * thread, as in the daemon), in catalog order or in one fixed shuffled order.
 * It prints one line per (dataset, pass): samples/s, the bytes delivered and
 * the bytes read from the files (their ratio is the read amplification of the
 * format), the decoded-cache loads (-m sets the format memory, as
 * prefetch.format_memory does; default 32 MiB), and a checksum of the samples
 * read (order-independent), which must agree between datasets holding the
 * same bytes. A benchmark, not a test: it never fails on a timing. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "../src/catalog/catalog.h"
#include "../src/fmt/fmt.h"
#include "../src/util/util.h"

struct job {
	const struct catalog *c;
	const uint64_t *ids;
	uint64_t n;
	uint64_t bytes, read, sum;
	int rc;
	char err[600];
};

static void *run_reader(void *arg)
{
	struct job *j = arg;
	struct catalog_reader rd;
	catalog_reader_init(&rd, j->c);
	uint8_t *buf = malloc(MAX(j->c->max_len, (uint64_t)1));
	for (uint64_t i = 0; i < j->n && buf; i++) {
		uint64_t id = j->ids[i];
		int rc = catalog_read(&rd, id, buf);
		if (rc) {
			j->rc = rc;
			str_copy(j->err, sizeof(j->err), rd.err);
			break;
		}
		uint64_t len = j->c->samples[id].length;
		j->bytes += len;
		j->sum += XXH64(buf, len, 0);
	}
	j->read = rd.bytes_read;
	free(buf);
	catalog_reader_fini(&rd);
	return NULL;
}

/* 1: dropped, 0: not permitted */
static int drop_caches(void)
{
	sync();
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	int ok = write(fd, "3\n", 2) == 2;
	close(fd);
	return ok;
}

static void usage(void)
{
	fprintf(stderr, "usage: seer-fmtbench [-t threads] [-o seq|shuffle] [-r repeats] [-W] "
			"[-m format_memory] FORMAT[:LABEL]=DIR ...\n  FORMAT: %s\n"
			"  -W: warm passes only (no cold pass, no page-cache drop)\n"
			"  -m: bytes the format may keep decoded (e.g. 256MiB; default 32MiB)\n",
		fmt_registry_names());
	exit(2);
}

/* ids 0..n-1, in order or in one fixed shuffled order (malloc'd). */
static uint64_t *order(uint64_t n, bool shuffle)
{
	uint64_t *ids = xmalloc(MAX(n, (uint64_t)1) * sizeof(*ids));
	for (uint64_t i = 0; i < n; i++)
		ids[i] = i;
	uint64_t s = 0x9e3779b97f4a7c15ull;
	for (uint64_t i = n; shuffle && i > 1; i--) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		uint64_t k = s % i, t = ids[i - 1];
		ids[i - 1] = ids[k];
		ids[k] = t;
	}
	return ids;
}

/* One pass over every sample with `threads` readers; prints its line. 0 or 1. */
static int run_pass(const struct catalog *c, const uint64_t *ids, int threads, const char *label,
		    const char *name, bool shuffle)
{
	struct job jobs[64];
	pthread_t th[64];
	struct fmt_mem_stats m0, m1;
	fmt_memory_stats(c, &m0);
	uint64_t t0 = now_ns();
	for (int t = 0; t < threads; t++) {
		uint64_t lo = c->nsamples * (uint64_t)t / (uint64_t)threads;
		uint64_t hi = c->nsamples * (uint64_t)(t + 1) / (uint64_t)threads;
		jobs[t] = (struct job){ .c = c, .ids = ids + lo, .n = hi - lo };
		pthread_create(&th[t], NULL, run_reader, &jobs[t]);
	}
	uint64_t bytes = 0, sum = 0, read = 0;
	int rc = 0;
	for (int t = 0; t < threads; t++) {
		pthread_join(th[t], NULL);
		if (jobs[t].rc && !rc) {
			fprintf(stderr, "%s: %s\n", label, jobs[t].err);
			rc = 1;
		}
		bytes += jobs[t].bytes;
		sum += jobs[t].sum;
		read += jobs[t].read;
	}
	if (rc)
		return rc;
	double s = (double)(now_ns() - t0) / 1e9;
	fmt_memory_stats(c, &m1);
	printf("%-12s %-6s %-7s %8llu %9.1f %9.1f %8.3f %11.0f %9.1f %7llu  %016llx\n", label, name,
	       shuffle ? "shuffle" : "seq", (unsigned long long)c->nsamples,
	       (double)bytes / (1 << 20), (double)read / (1 << 20), s, (double)c->nsamples / s,
	       (double)bytes / (1 << 20) / s,
	       (unsigned long long)(m1.loads - m0.loads + m1.streamed - m0.streamed),
	       (unsigned long long)sum);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	int threads = 1, repeats = 3, opt;
	bool shuffle = false, cold = true;
	uint64_t mem = FMT_MEMORY_DEFAULT;
	while ((opt = getopt(argc, argv, "t:o:r:m:Wh")) != -1) {
		switch (opt) {
		case 'm':
			if (parse_size(optarg, &mem) != 0)
				usage();
			break;
		case 't': threads = atoi(optarg); break;
		case 'o': shuffle = strcmp(optarg, "shuffle") == 0; break;
		case 'r': repeats = atoi(optarg); break;
		case 'W': cold = false; break;
		default: usage();
		}
	}
	if (optind >= argc || threads < 1 || threads > 64 || repeats < (cold ? 0 : 1))
		usage();
	log_set_level(LOG_WARN);
	fmt_set_memory(mem);
	printf("%-12s %-6s %-7s %8s %9s %9s %8s %11s %9s %7s  %s\n", "format", "pass", "order",
	       "samples", "MiB", "read MiB", "seconds", "samples/s", "MiB/s", "decodes",
	       "checksum");
	for (int a = optind; a < argc; a++) {
		char *spec = xstrdup(argv[a]), *eq = strchr(spec, '=');
		if (!eq)
			usage();
		*eq = '\0';
		char *label = xstrdup(spec), *colon = strchr(spec, ':');
		if (colon)
			*colon = '\0';
		struct catalog_opts o = { .root = eq + 1, .format = spec };
		struct catalog *c;
		char err[1024];
		if (catalog_open(&o, &c, err, sizeof(err)) != 0) {
			fprintf(stderr, "%s: %s\n", argv[a], err);
			return 1;
		}
		uint64_t *ids = order(c->nsamples, shuffle);
		int rc = 0;
		for (int pass = cold ? 0 : 1; pass <= repeats && rc == 0; pass++)
			rc = run_pass(c, ids, threads, label,
				      pass ? "warm" : drop_caches() ? "cold" : "cold?", shuffle);
		free(ids);
		catalog_free(c);
		free(label);
		free(spec);
		if (rc)
			return rc;
	}
	return 0;
}
