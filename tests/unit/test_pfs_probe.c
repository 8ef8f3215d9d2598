/* The PFS probe (src/util/pfs_probe.c): the verdict rule, what the probe reads
 * (bytes and requests within the budget, each range once), and its failures
 * (a missing file, a dataset too small) leaving coalescing on. The files are
 * local (page cache): a verdict of "bound by requests" is what a fast file
 * system gives, the 1 ms floor of the rule keeps it there under load. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/util/pfs_probe.h"

#define NFILES 4
#define FILE_BYTES (1u << 20)

static char root[] = "/tmp/seer-probe-XXXXXX";

/* A catalog of NFILES files of FILE_BYTES, `nsamples` samples over them. */
static void make_catalog(struct catalog *c, uint64_t nsamples, bool write_files)
{
	cr_assert_not_null(mkdtemp(root));
	memset(c, 0, sizeof(*c));
	c->root = root;
	c->nfiles = NFILES;
	c->files = calloc(NFILES, sizeof(*c->files));
	c->strpool = calloc(NFILES, 16);
	for (uint32_t f = 0; f < NFILES; f++) {
		c->files[f].size = FILE_BYTES;
		c->files[f].path_off = f * 16;
		snprintf(c->strpool + f * 16, 16, "part-%u", f);
		if (!write_files)
			continue;
		char path[256];
		snprintf(path, sizeof(path), "%s/part-%u", root, f);
		FILE *fp = fopen(path, "wb");
		cr_assert_not_null(fp);
		char *buf = malloc(FILE_BYTES);
		memset(buf, (int)f + 1, FILE_BYTES);
		cr_assert_eq(fwrite(buf, 1, FILE_BYTES, fp), FILE_BYTES);
		fclose(fp);
		free(buf);
	}
	c->nsamples = nsamples;
	c->total_bytes = (uint64_t)NFILES * FILE_BYTES;
}

static void drop_catalog(struct catalog *c)
{
	for (uint32_t f = 0; f < NFILES; f++) {
		char path[256];
		snprintf(path, sizeof(path), "%s/part-%u", root, f);
		unlink(path);
	}
	rmdir(root);
	free(c->files);
	free(c->strpool);
	strcpy(root, "/tmp/seer-probe-XXXXXX");
}

Test(pfs_probe, rule)
{
	/* bandwidth: 4x the bytes took >= 4/1.5 times as long and >= 1 ms more */
	cr_assert_not(pfs_probe_decide(0.006, 0.021, 4));
	cr_assert_not(pfs_probe_decide(0.003, 0.0081, 4));
	/* requests: about as long, or longer but not by the bytes' share */
	cr_assert(pfs_probe_decide(0.0055, 0.0055, 4));
	cr_assert(pfs_probe_decide(0.0046, 0.0100, 4));
	/* too fast to tell (page cache): under the 1 ms floor it stays on */
	cr_assert(pfs_probe_decide(0.00005, 0.0009, 4));
}

Test(pfs_probe, measures_within_the_budget)
{
	struct catalog c;
	make_catalog(&c, 8192, true); /* 512 B samples: budget 64 KiB */
	struct pfs_probe p;
	pfs_probe_run(&c, 16, &p);
	cr_assert(p.measured, "%s", p.why);
	cr_assert_eq(p.small, 512);
	cr_assert_eq(p.big, 2048);
	cr_assert_eq(p.k, 4);
	cr_assert(p.q >= 8 && p.q <= 16 && p.rounds >= 1 && p.rounds <= 3, "q %u rounds %u",
		  p.q, p.rounds);
	cr_assert_eq(p.reads, 2ull * p.q * p.rounds);
	cr_assert_eq(p.bytes, (uint64_t)p.q * p.rounds * (512 + 2048));
	cr_assert_leq(p.bytes, c.total_bytes / 64);
	cr_assert(p.t_small > 0 && p.t_big > 0);
	cr_assert(p.coalesce, "local files must read as request-bound: %s", p.why);
	cr_assert_not_null(strstr(p.why, "coalesced reads"), "%s", p.why);
	drop_catalog(&c);
}

Test(pfs_probe, fewer_readers_than_asked_for)
{
	struct catalog c;
	make_catalog(&c, 8192, true);
	struct pfs_probe p;
	pfs_probe_run(&c, 5, &p);
	cr_assert(p.measured, "%s", p.why);
	cr_assert_eq(p.q, 5);
	cr_assert_eq(p.reads, 2ull * 5 * p.rounds);
	drop_catalog(&c);
}

Test(pfs_probe, missing_file_leaves_coalescing_on)
{
	struct catalog c;
	make_catalog(&c, 8192, false);
	struct pfs_probe p;
	pfs_probe_run(&c, 16, &p);
	cr_assert_not(p.measured);
	cr_assert(p.coalesce);
	cr_assert_eq(p.reads, 0);
	cr_assert_not_null(strstr(p.why, "part-0"), "the message names the file: %s", p.why);
	drop_catalog(&c);
}

Test(pfs_probe, too_small_to_measure)
{
	struct catalog c;
	make_catalog(&c, 8192, true);
	c.total_bytes = 64 * 1024; /* budget 1 KiB: not even 4 reads */
	c.nsamples = 128;
	struct pfs_probe p;
	pfs_probe_run(&c, 16, &p);
	cr_assert_not(p.measured);
	cr_assert(p.coalesce);
	cr_assert_eq(p.bytes, 0);
	cr_assert_not_null(strstr(p.why, "too small"), "%s", p.why);
	drop_catalog(&c);
}

Test(pfs_probe, too_few_io_threads)
{
	struct catalog c;
	make_catalog(&c, 8192, true);
	struct pfs_probe p;
	pfs_probe_run(&c, 2, &p);
	cr_assert_not(p.measured);
	cr_assert(p.coalesce);
	cr_assert_eq(p.reads, 0);
	cr_assert_not_null(strstr(p.why, "prefetch.io_threads = 2"), "%s", p.why);
	drop_catalog(&c);
}
