/* The format tests' fixture (test_formats.c, test_fmt_memory.c): test data
 * written by the formats' real writers (tests/data/gen_formats.py: numpy,
 * h5py, an independent TFRecord writer, DLIO's indexed_binary layout), once
 * per test binary in the runner process, with the samples numpy/h5py read;
 * and checks of delivered samples against them. Static helpers: one copy
 * per test binary. */
#ifndef SEER_TEST_FMT_FIXTURE_H
#define SEER_TEST_FMT_FIXTURE_H

#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../src/catalog/catalog.h"
#include "../../src/fmt/fmt.h"
#include "../../src/util/util.h"
#include "seer.h"

#define FIXTURE_FN __attribute__((unused))
#define FIXTURE_VAR __attribute__((unused))

#define PY "/usr/bin/python3"
#define ENV_DIR "SEER_FMT_TESTDATA"

/* ---- test data: generated once per run, in the runner process -------------- */

static char gen_dir[PATH_MAX];

FIXTURE_FN static const char *generator(void)
{
	static char path[PATH_MAX];
	const char *env = getenv("SEER_FMT_GEN");
	if (env)
		return env;
	/* this file is tests/unit/test_formats.c; the script is tests/data/ */
	snprintf(path, sizeof(path), "%s", __FILE__);
	char *slash = strrchr(path, '/');
	if (slash)
		*slash = '\0';
	slash = strrchr(path, '/');
	if (slash)
		strcpy(slash, "/data/gen_formats.py");
	else
		snprintf(path, sizeof(path), "tests/data/gen_formats.py");
	return path;
}

/* The generated files, as a dataset written long before its job: mtimes a
 * minute in the past, out of the window in which the catalog cache does not
 * trust a file (src/catalog/catalog_check.c: written within 2 s of a scan). */
static int age_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)f;
	if (flag == FTW_D || flag == FTW_DP || flag == FTW_F) {
		struct timespec ts[2];
		clock_gettime(CLOCK_REALTIME, &ts[0]);
		ts[0].tv_sec -= 60;
		ts[1] = ts[0];
		utimensat(AT_FDCWD, p, ts, 0);
	}
	return 0;
}

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	(void)set;
	const char *tmp = getenv("TMPDIR");
	snprintf(gen_dir, sizeof(gen_dir), "%s/seer-fmt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(gen_dir)) {
		gen_dir[0] = '\0';
		return;
	}
	char cmd[2 * PATH_MAX + 64];
	snprintf(cmd, sizeof(cmd), PY " %s %s", generator(), gen_dir);
	if (system(cmd) == 0) {
		nftw(gen_dir, age_entry, 16, FTW_PHYS);
		setenv(ENV_DIR, gen_dir, 1);
	}
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
	(void)stats;
	if (gen_dir[0])
		nftw(gen_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

FIXTURE_FN static const char *data_dir(void)
{
	const char *d = getenv(ENV_DIR);
	cr_assert(d, "test data not generated: does '" PY " %s' run?", generator());
	return d;
}

/* ---- expected samples --------------------------------------------------------- */

struct expect {
	uint32_t dtype, ndim;
	uint64_t dims[8];
	int64_t label;
	uint64_t len;
	const uint8_t *data;
};

struct expset {
	uint8_t *raw;
	struct expect *e;
	size_t n;
};

/* OUT/<name>.expect; free with free_expect(). */
FIXTURE_FN static void load_expect(const char *name, struct expset *x)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s.expect", data_dir(), name);
	FILE *f = fopen(path, "rb");
	cr_assert(f, "%s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *buf = malloc((size_t)n);
	cr_assert(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
	fclose(f);
	cr_assert(n >= 16 && memcmp(buf, "SEEREXP1", 8) == 0, "%s: bad expect file", path);
	uint64_t cnt;
	memcpy(&cnt, buf + 8, 8);
	struct expect *e = calloc(cnt ? cnt : 1, sizeof(*e));
	const uint8_t *p = buf + 16, *end = buf + n;
	for (uint64_t i = 0; i < cnt; i++) {
		cr_assert(end - p >= 88, "%s: truncated", path);
		memcpy(&e[i].dtype, p, 4);
		memcpy(&e[i].ndim, p + 4, 4);
		memcpy(e[i].dims, p + 8, 64);
		memcpy(&e[i].label, p + 72, 8);
		memcpy(&e[i].len, p + 80, 8);
		p += 88;
		cr_assert((uint64_t)(end - p) >= e[i].len, "%s: truncated", path);
		e[i].data = p;
		p += e[i].len;
	}
	*x = (struct expset){ .raw = buf, .e = e, .n = cnt };
}

FIXTURE_FN static void free_expect(struct expset *x)
{
	free(x->e);
	free(x->raw);
}

FIXTURE_FN static char *ds_path(const char *ds)
{
	return xasprintf("%s/%s", data_dir(), ds);
}

FIXTURE_FN static int open_cat(const char *ds, const char *fmt, const struct catalog_params *p,
		    const char *cache_dir, struct catalog **c, char *err, size_t errlen)
{
	char *root = ds_path(ds);
	struct catalog_opts o = { .root = root, .format = fmt, .cache_dir = cache_dir };
	if (p)
		o.params = *p;
	int rc = catalog_open(&o, c, err, errlen);
	free(root);
	return rc;
}

FIXTURE_FN static void check_sample(struct catalog_reader *rd, uint64_t id, const struct expect *e,
			 uint8_t *buf)
{
	const struct catalog *c = rd->cat;
	const struct catalog_sample *s = &c->samples[id];
	const struct seer_wire_type *t = &c->types[s->type];
	memset(buf, 0xa5, c->max_len);
	int rc = catalog_read(rd, id, buf);
	cr_assert_eq(rc, 0, "sample %llu: %d %s", (unsigned long long)id, rc, rd->err);
	cr_assert_eq(s->length, e->len, "sample %llu (%s): length %llu, expected %llu",
		     (unsigned long long)id, catalog_path(c, s->file), (unsigned long long)s->length,
		     (unsigned long long)e->len);
	cr_assert_eq(t->dtype, e->dtype, "sample %llu (%s): dtype %u, expected %u",
		     (unsigned long long)id, catalog_path(c, s->file), t->dtype, e->dtype);
	cr_assert_eq(t->ndim, e->ndim, "sample %llu (%s): ndim %u, expected %u",
		     (unsigned long long)id, catalog_path(c, s->file), t->ndim, e->ndim);
	for (uint32_t d = 0; d < t->ndim; d++)
		cr_assert_eq(t->dims[d], e->dims[d], "sample %llu: dim %u is %llu, expected %llu",
			     (unsigned long long)id, d, (unsigned long long)t->dims[d],
			     (unsigned long long)e->dims[d]);
	cr_assert_eq(s->label, e->label, "sample %llu (%s): label %lld, expected %lld",
		     (unsigned long long)id, catalog_path(c, s->file), (long long)s->label,
		     (long long)e->label);
	cr_assert(memcmp(buf, e->data, e->len) == 0, "sample %llu (%s): bytes differ",
		  (unsigned long long)id, catalog_path(c, s->file));
}

/* Every sample, forwards then backwards (other cache states), against numpy. */
FIXTURE_FN static void check_all(const struct catalog *c, const struct expect *e, size_t n)
{
	cr_assert_eq(c->nsamples, n, "%llu samples, expected %zu", (unsigned long long)c->nsamples,
		     n);
	struct catalog_reader rd;
	catalog_reader_init(&rd, c);
	uint8_t *buf = malloc(MAX(c->max_len, (uint64_t)1));
	for (uint64_t id = 0; id < n; id++)
		check_sample(&rd, id, &e[id], buf);
	for (uint64_t id = n; id-- > 0;)
		check_sample(&rd, id, &e[id], buf);
	free(buf);
	catalog_reader_fini(&rd);
}

/* ---- every format against its writer ------------------------------------------ */

struct good {
	const char *ds, *expect, *fmt;
	const char *data, *labels, *axis;
};

FIXTURE_VAR static struct good goods[] = {
	{ "npz_dlio/train", "npz_dlio", "npz", NULL, NULL, NULL },
	{ "npz_first", "npz_first", "npz", "images", "lab", "first" },
	{ "npz_nolabel", "npz_nolabel", "npz", NULL, "", "last" },
	{ "npz_many", "npz_many", "npz", NULL, NULL, NULL },
	{ "npy_dlio/train", "npy_dlio", "npy", NULL, NULL, NULL },
	{ "npy_first", "npy_first", "npy", NULL, NULL, "first" },
	{ "hdf5_dlio/train", "hdf5_dlio", "hdf5", NULL, NULL, NULL },
	{ "hdf5_chunked", "hdf5_chunked", "hdf5", NULL, NULL, NULL },
	{ "hdf5_split", "hdf5_split", "hdf5", NULL, NULL, NULL },
	{ "hdf5_custom", "hdf5_custom", "hdf5", "grp/images", "", NULL },
	{ "tfrecord/train", "tfrecord", "tfrecord", NULL, NULL, NULL },
	{ "indexed/train", "indexed", "indexed", NULL, NULL, NULL },
};

FIXTURE_FN static struct catalog_params params_of(const struct good *g)
{
	return (struct catalog_params){ .hdf5_data = g->data, .npz_data = g->data,
				    .hdf5_labels = g->labels, .npz_labels = g->labels,
				    .npz_sample_axis = g->axis };
}

/* Parameters are indices into the tables: a test runs in a re-executed
 * process, where pointers to the runner's string literals would not hold. */
FIXTURE_VAR static int good_idx[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 };
_Static_assert(ARRAY_SIZE(good_idx) == ARRAY_SIZE(goods), "one index per dataset");

FIXTURE_FN static uint32_t file_named(const struct catalog *c, const char *rel)
{
	for (uint32_t f = 0; f < c->nfiles; f++)
		if (strcmp(catalog_path(c, f), rel) == 0)
			return f;
	cr_assert_fail("no file %s in the catalog", rel);
	return 0;
}


#endif /* SEER_TEST_FMT_FIXTURE_H */
