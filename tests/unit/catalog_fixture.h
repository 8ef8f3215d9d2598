/* The catalog tests' fixture (test_catalog.c, test_catalog_cache.c): a
 * temporary dataset directory per test, files of known bytes, and checks of a
 * catalog against what the tree holds. Header of static helpers, one copy per
 * test binary. */
#ifndef SEER_TEST_CATALOG_FIXTURE_H
#define SEER_TEST_CATALOG_FIXTURE_H

#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "seer.h"
#include "../../src/catalog/catalog.h"
#include "../../src/util/util.h"


#define FIXTURE_FN __attribute__((unused))

static char base[64];            /* the fixture's temporary directory */
static char data[PATH_MAX];      /* dataset root (realpath) */
static char cache[PATH_MAX];     /* catalog cache directory */
static char err[1024];

FIXTURE_FN static void setup(void)
{
	log_set_level(LOG_ERROR);
	snprintf(base, sizeof(base), "/tmp/seer-cat-XXXXXX");
	cr_assert_not_null(mkdtemp(base));
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s/data", base);
	cr_assert_eq(mkdir(tmp, 0755), 0);
	cr_assert_not_null(realpath(tmp, data));
	snprintf(cache, sizeof(cache), "%s/cache", base);
	err[0] = '\0';
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

FIXTURE_FN static void teardown(void)
{
	nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}


/* ---- helpers ----------------------------------------------------------------- */

FIXTURE_FN static uint8_t content_byte(unsigned seed, uint64_t i)
{
	return (uint8_t)(seed * 131u + i * 7u + (i >> 8) + 1u);
}

/* Writes data/<rel> (creating directories) with `len` bytes of pattern `seed`. */
FIXTURE_FN static void mkfile(const char *rel, size_t len, unsigned seed)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", data, rel);
	char *slash = strrchr(path, '/');
	*slash = '\0';
	cr_assert_eq(mkdir_p(path, 0755), 0, "mkdir -p %s", path);
	*slash = '/';
	uint8_t *buf = malloc(len + 1);
	for (size_t i = 0; i < len; i++)
		buf[i] = content_byte(seed, i);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0, "create %s: %s", path, strerror(errno));
	cr_assert_eq(write_full(fd, buf, len), 0);
	close(fd);
	free(buf);
}

FIXTURE_FN static void rmfile(const char *rel)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", data, rel);
	cr_assert_eq(unlink(path), 0, "unlink %s", path);
}

FIXTURE_FN static void truncate_file(const char *rel, off_t len)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", data, rel);
	cr_assert_eq(truncate(path, len), 0, "truncate %s", path);
}

/* Directory mtimes are what tells a stale cache apart; on file systems
 * with a coarse clock, a change right after the scan could keep the same
 * mtime (see racy_mtime below). Tests of invalidation step past that. */
FIXTURE_FN static void settle(void)
{
	struct timespec ts = { 0, 25000000 };
	nanosleep(&ts, NULL);
}

/* A real dataset was written long before the job: put the tree's mtimes
 * (directories and files) a minute in the past, out of the racy window in
 * which a cache is not trusted (see racy_mtime, racy_file). */
FIXTURE_FN static int age_dir(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)f;
	if (flag == FTW_D || flag == FTW_DP || flag == FTW_F) {
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now);
		now.tv_sec -= 60;
		struct timespec ts[2] = { now, now };
		utimensat(AT_FDCWD, p, ts, 0);
	}
	return 0;
}

FIXTURE_FN static void age_tree(void)
{
	nftw(data, age_dir, 16, FTW_PHYS);
}

FIXTURE_FN static struct catalog_opts opts(bool with_cache)
{
	return (struct catalog_opts){ .root = data, .format = "files",
				  .cache_dir = with_cache ? cache : NULL };
}

FIXTURE_FN static struct catalog *open_ok(const struct catalog_opts *o)
{
	struct catalog *c = NULL;
	err[0] = '\0';
	int rc = catalog_open(o, &c, err, sizeof(err));
	cr_assert_eq(rc, 0, "catalog_open(%s): %d %s", o->root, rc, err);
	cr_assert_not_null(c);
	return c;
}

FIXTURE_FN static int open_fails(const struct catalog_opts *o)
{
	struct catalog *c = NULL;
	err[0] = '\0';
	int rc = catalog_open(o, &c, err, sizeof(err));
	cr_assert_neq(rc, 0, "catalog_open(%s) succeeded", o->root);
	cr_assert_null(c);
	return rc;
}

FIXTURE_FN static void assert_has(const char *msg, const char *needle)
{
	cr_assert(strstr(msg, needle) != NULL, "message lacks \"%s\": %s", needle, msg);
}

struct expect {
	const char *path;
	int64_t label;
	size_t len;
	unsigned seed;
};

/* The catalog holds exactly `want`, in that order, and reads back the bytes. */
FIXTURE_FN static void assert_catalog(const struct catalog *c, const struct expect *want, size_t n)
{
	cr_assert_eq(c->nsamples, n, "%llu samples, want %zu", (unsigned long long)c->nsamples, n);
	cr_assert_eq(c->nfiles, n);
	cr_assert_str_eq(c->root, data);
	uint64_t total = 0, maxlen = 0;
	struct catalog_reader rd;
	cr_assert_eq(catalog_reader_init(&rd, c), 0);
	for (size_t id = 0; id < n; id++) {
		const struct catalog_sample *s = &c->samples[id];
		cr_assert_str_eq(catalog_path(c, s->file), want[id].path, "sample %zu", id);
		cr_assert_eq(s->label, want[id].label, "%s: label %lld, want %lld", want[id].path,
			     (long long)s->label, (long long)want[id].label);
		cr_assert_eq(s->length, want[id].len, "%s: length", want[id].path);
		cr_assert_eq(c->files[s->file].size, want[id].len);
		cr_assert_eq(c->files[s->file].first, id);
		cr_assert_eq(c->files[s->file].nsamples, 1);
		total += want[id].len;
		maxlen = want[id].len > maxlen ? want[id].len : maxlen;
		/* the bytes, with a guard after them */
		uint8_t *buf = malloc(want[id].len + 16);
		memset(buf, 0x5a, want[id].len + 16);
		int rc = catalog_read(&rd, id, buf);
		cr_assert_eq(rc, 0, "catalog_read %zu: %d %s", id, rc, rd.err);
		for (size_t i = 0; i < want[id].len; i++)
			cr_assert_eq(buf[i], content_byte(want[id].seed, i), "%s byte %zu",
				     want[id].path, i);
		for (size_t i = 0; i < 16; i++)
			cr_assert_eq(buf[want[id].len + i], 0x5a, "catalog_read wrote past the sample");
		free(buf);
	}
	cr_assert_eq(c->total_bytes, total);
	cr_assert_eq(c->max_len, maxlen);
	uint8_t one;
	cr_assert_eq(catalog_read(&rd, n, &one), -ERANGE);
	catalog_reader_fini(&rd);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

FIXTURE_FN static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

#endif /* SEER_TEST_CATALOG_FIXTURE_H */
