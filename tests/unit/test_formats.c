/* The dataset formats against files written by their real writers (numpy,
 * h5py, an independent TFRecord writer, DLIO's indexed_binary layout):
 * tests/data/gen_formats.py writes them with the samples numpy/h5py read, and
 * damaged copies whose errors are checked here. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/catalog.h"
#include "../../src/fmt/fmt.h"
#include "../../src/util.h"
#include "seer.h"

#define PY "/usr/bin/python3"
#define ENV_DIR "SEER_FMT_TESTDATA"

/* ---- test data: generated once per run, in the runner process -------------- */

static char gen_dir[PATH_MAX];

static const char *generator(void)
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
	if (system(cmd) == 0)
		setenv(ENV_DIR, gen_dir, 1);
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

static const char *data_dir(void)
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
static void load_expect(const char *name, struct expset *x)
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

static void free_expect(struct expset *x)
{
	free(x->e);
	free(x->raw);
}

static char *ds_path(const char *ds)
{
	return xasprintf("%s/%s", data_dir(), ds);
}

static int open_cat(const char *ds, const char *fmt, const struct cat_params *p,
		    const char *cache_dir, struct catalog **c, char *err, size_t errlen)
{
	char *root = ds_path(ds);
	struct cat_opts o = { .root = root, .format = fmt, .cache_dir = cache_dir };
	if (p)
		o.params = *p;
	int rc = cat_open(&o, c, err, errlen);
	free(root);
	return rc;
}

static void check_sample(struct cat_reader *rd, uint64_t id, const struct expect *e,
			 uint8_t *buf)
{
	const struct catalog *c = rd->cat;
	const struct cat_sample *s = &c->samples[id];
	const struct seer_wire_type *t = &c->types[s->type];
	memset(buf, 0xa5, c->max_len);
	int rc = cat_read(rd, id, buf);
	cr_assert_eq(rc, 0, "sample %llu: %d %s", (unsigned long long)id, rc, rd->err);
	cr_assert_eq(s->length, e->len, "sample %llu (%s): length %llu, expected %llu",
		     (unsigned long long)id, cat_path(c, s->file), (unsigned long long)s->length,
		     (unsigned long long)e->len);
	cr_assert_eq(t->dtype, e->dtype, "sample %llu (%s): dtype %u, expected %u",
		     (unsigned long long)id, cat_path(c, s->file), t->dtype, e->dtype);
	cr_assert_eq(t->ndim, e->ndim, "sample %llu (%s): ndim %u, expected %u",
		     (unsigned long long)id, cat_path(c, s->file), t->ndim, e->ndim);
	for (uint32_t d = 0; d < t->ndim; d++)
		cr_assert_eq(t->dims[d], e->dims[d], "sample %llu: dim %u is %llu, expected %llu",
			     (unsigned long long)id, d, (unsigned long long)t->dims[d],
			     (unsigned long long)e->dims[d]);
	cr_assert_eq(s->label, e->label, "sample %llu (%s): label %lld, expected %lld",
		     (unsigned long long)id, cat_path(c, s->file), (long long)s->label,
		     (long long)e->label);
	cr_assert(memcmp(buf, e->data, e->len) == 0, "sample %llu (%s): bytes differ",
		  (unsigned long long)id, cat_path(c, s->file));
}

/* Every sample, forwards then backwards (other cache states), against numpy. */
static void check_all(const struct catalog *c, const struct expect *e, size_t n)
{
	cr_assert_eq(c->nsamples, n, "%llu samples, expected %zu", (unsigned long long)c->nsamples,
		     n);
	struct cat_reader rd;
	cat_reader_init(&rd, c);
	uint8_t *buf = malloc(MAX(c->max_len, (uint64_t)1));
	for (uint64_t id = 0; id < n; id++)
		check_sample(&rd, id, &e[id], buf);
	for (uint64_t id = n; id-- > 0;)
		check_sample(&rd, id, &e[id], buf);
	free(buf);
	cat_reader_fini(&rd);
}

/* ---- every format against its writer ------------------------------------------ */

struct good {
	const char *ds, *expect, *fmt;
	const char *data, *labels, *axis;
};

static struct good goods[] = {
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

static struct cat_params params_of(const struct good *g)
{
	return (struct cat_params){ .hdf5_data = g->data, .npz_data = g->data,
				    .hdf5_labels = g->labels, .npz_labels = g->labels,
				    .npz_sample_axis = g->axis };
}

/* Parameters are indices into the tables: a test runs in a re-executed
 * process, where pointers to the runner's string literals would not hold. */
static int good_idx[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 };
_Static_assert(ARRAY_SIZE(good_idx) == ARRAY_SIZE(goods), "one index per dataset");

ParameterizedTestParameters(formats, delivers_what_the_writer_wrote)
{
	return cr_make_param_array(int, good_idx, ARRAY_SIZE(good_idx));
}

ParameterizedTest(int *gi, formats, delivers_what_the_writer_wrote)
{
	const struct good *g = &goods[*gi];
	struct expset x;
	load_expect(g->expect, &x);
	struct cat_params p = params_of(g);
	char err[1024], cache[PATH_MAX];
	snprintf(cache, sizeof(cache), "%s/cache-%s", data_dir(), g->expect);
	struct catalog *c;
	int rc = open_cat(g->ds, g->fmt, &p, cache, &c, err, sizeof(err));
	cr_assert_eq(rc, 0, "%s: %s", g->ds, err);
	cr_assert(!c->from_cache);
	check_all(c, x.e, x.n);
	cat_free(c);
	/* the per-file aux words survive the catalog cache */
	rc = open_cat(g->ds, g->fmt, &p, cache, &c, err, sizeof(err));
	cr_assert_eq(rc, 0, "%s: %s", g->ds, err);
	cr_assert(c->from_cache, "%s: catalog not loaded from its cache", g->ds);
	check_all(c, x.e, x.n);
	cat_free(c);
	free_expect(&x);
}

/* Readers on several threads at once (HDF5's global lock, per-reader caches). */
struct thr {
	const struct catalog *c;
	const struct expect *e;
	unsigned seed;
	int bad;
	char err[600];
};

static void *reader_thread(void *arg)
{
	struct thr *t = arg;
	struct cat_reader rd;
	cat_reader_init(&rd, t->c);
	uint8_t *buf = malloc(t->c->max_len);
	for (int round = 0; round < 200 && !t->bad; round++) {
		uint64_t id = rand_r(&t->seed) % t->c->nsamples;
		int rc = cat_read(&rd, id, buf);
		if (rc != 0 || memcmp(buf, t->e[id].data, t->e[id].len) != 0) {
			t->bad = 1;
			snprintf(t->err, sizeof(t->err), "sample %llu: rc %d %s",
				 (unsigned long long)id, rc, rd.err);
		}
	}
	free(buf);
	cat_reader_fini(&rd);
	return NULL;
}

ParameterizedTestParameters(formats, concurrent_readers)
{
	return cr_make_param_array(int, good_idx, ARRAY_SIZE(good_idx));
}

ParameterizedTest(int *gi, formats, concurrent_readers)
{
	const struct good *g = &goods[*gi];
	struct expset x;
	load_expect(g->expect, &x);
	struct cat_params p = params_of(g);
	char err[1024];
	struct catalog *c;
	cr_assert_eq(open_cat(g->ds, g->fmt, &p, NULL, &c, err, sizeof(err)), 0, "%s", err);
	struct thr t[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		t[i] = (struct thr){ .c = c, .e = x.e, .seed = 17u + (unsigned)i };
		pthread_create(&th[i], NULL, reader_thread, &t[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		cr_expect(!t[i].bad, "thread %d: %s", i, t[i].err);
	}
	cat_free(c);
	free_expect(&x);
}

/* ---- the decoded-member cache and the direct paths ------------------------------- */

static uint32_t file_named(const struct catalog *c, const char *rel)
{
	for (uint32_t f = 0; f < c->nfiles; f++)
		if (strcmp(cat_path(c, f), rel) == 0)
			return f;
	cr_assert_fail("no file %s in the catalog", rel);
	return 0;
}

Test(formats, npz_file_decoded_once_while_cached)
{
	struct expset x;
	load_expect("npz_dlio", &x);
	const struct expect *e = x.e;
	struct catalog *c;
	char err[1024];
	cr_assert_eq(open_cat("npz_dlio/train", "npz", NULL, NULL, &c, err, sizeof(err)), 0, "%s",
		     err);
	struct cat_reader rd;
	cat_reader_init(&rd, c);
	uint8_t *buf = malloc(c->max_len);
	/* 16 samples strided along the last axis of a stored member; then 7 of a
	 * deflated one; in a scrambled order */
	const char *files[] = { "0/img_4_of_5.npz", "1/img_1_of_5.npz" };
	uint64_t loads = 0;
	for (int k = 0; k < 2; k++) {
		const struct cat_file *f = &c->files[file_named(c, files[k])];
		cr_assert(f->nsamples == (k == 0 ? 16 : 7));
		for (uint32_t i = 0; i < f->nsamples; i++) {
			uint64_t id = f->first + (i * 5) % f->nsamples;
			check_sample(&rd, id, &e[id], buf);
		}
		loads++;
		cr_assert_eq(fmt_member_loads(&rd), loads, "%s decoded %llu times", files[k],
			     (unsigned long long)fmt_member_loads(&rd));
	}
	/* the first file is still cached */
	const struct cat_file *f = &c->files[file_named(c, files[0])];
	check_sample(&rd, f->first + 3, &e[f->first + 3], buf);
	cr_assert_eq(fmt_member_loads(&rd), loads);
	free(buf);
	cat_reader_fini(&rd);
	cat_free(c);
	free_expect(&x);
}

Test(formats, contiguous_samples_are_plain_reads)
{
	struct expset x;
	load_expect("npz_first", &x);
	const struct expect *e = x.e;
	struct cat_params p = { .npz_data = "images", .npz_labels = "lab",
				.npz_sample_axis = "first" };
	struct catalog *c;
	char err[1024];
	cr_assert_eq(open_cat("npz_first", "npz", &p, NULL, &c, err, sizeof(err)), 0, "%s", err);
	struct cat_reader rd;
	cat_reader_init(&rd, c);
	uint8_t *buf = malloc(c->max_len);
	const struct cat_file *f = &c->files[file_named(c, "a.npz")]; /* stored, C order */
	for (uint32_t i = 0; i < f->nsamples; i++)
		check_sample(&rd, f->first + i, &e[f->first + i], buf);
	cr_assert_eq(fmt_member_loads(&rd), 0, "contiguous stored samples went through the cache");
	free(buf);
	cat_reader_fini(&rd);
	cat_free(c);

	/* contiguous HDF5 datasets: pread only, no HDF5 state in the reader */
	free_expect(&x);
	load_expect("hdf5_dlio", &x);
	e = x.e;
	cr_assert_eq(open_cat("hdf5_dlio/train", "hdf5", NULL, NULL, &c, err, sizeof(err)), 0, "%s",
		     err);
	cat_reader_init(&rd, c);
	buf = malloc(c->max_len);
	for (uint64_t id = 0; id < x.n; id++)
		check_sample(&rd, id, &e[id], buf);
	cr_assert_null(rd.fmt_state, "contiguous HDF5 reads went through the HDF5 library");
	free(buf);
	cat_reader_fini(&rd);
	cat_free(c);
	free_expect(&x);
}

/* Many files, random order: with room for all, each is decoded once; with room
 * for a few, evicted ones are decoded again and every sample stays right. */
Test(formats, cache_many_files)
{
	struct expset x;
	load_expect("npz_many", &x);
	struct catalog *c;
	char err[1024];
	cr_assert_eq(open_cat("npz_many", "npz", NULL, NULL, &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c->nfiles, 300);
	uint8_t *buf = malloc(c->max_len);
	for (int limited = 0; limited < 2; limited++) {
		fmt_set_cache_limit(limited ? 4096 : 0); /* 4 KiB: a few dozen members */
		struct cat_reader rd;
		cat_reader_init(&rd, c);
		unsigned seed = 5;
		for (int i = 0; i < 6000; i++) {
			uint64_t id = (uint64_t)rand_r(&seed) % c->nsamples;
			check_sample(&rd, id, &x.e[id], buf);
		}
		uint64_t loads = fmt_member_loads(&rd);
		if (limited)
			cr_assert(loads > 3000, "only %llu decodes with a 4 KiB cache",
				  (unsigned long long)loads);
		else
			cr_assert_eq(loads, 300, "%llu decodes for 300 files",
				     (unsigned long long)loads);
		cat_reader_fini(&rd);
	}
	fmt_set_cache_limit(0);
	free(buf);
	cat_free(c);
	free_expect(&x);
}

/* Members larger than the whole cache are streamed for each sample. */
Test(formats, members_larger_than_the_cache_stream)
{
	fmt_set_cache_limit(64);
	const struct good *g[ARRAY_SIZE(goods)];
	size_t ng = 0;
	for (size_t k = 0; k < ARRAY_SIZE(goods); k++)
		if (strcmp(goods[k].fmt, "npz") == 0 || strcmp(goods[k].fmt, "npy") == 0)
			g[ng++] = &goods[k];
	cr_assert_eq(ng, 6);
	for (size_t k = 0; k < ng; k++) {
		struct expset x;
		load_expect(g[k]->expect, &x);
		struct cat_params p = params_of(g[k]);
		struct catalog *c;
		char err[1024];
		cr_assert_eq(open_cat(g[k]->ds, g[k]->fmt, &p, NULL, &c, err, sizeof(err)), 0, "%s",
			     err);
		check_all(c, x.e, x.n);
		cat_free(c);
		free_expect(&x);
	}
	fmt_set_cache_limit(0);
	cr_assert_eq(fmt_cache_limit(), FMT_CACHE_DEFAULT);
}

/* ---- damaged files: clear errors naming file, sample and cause ------------------- */

struct bad {
	const char *ds, *fmt;
	const char *scan;     /* expected in the scan error; NULL: the scan succeeds */
	int64_t read_id;      /* sample whose read must fail, -1: none */
	const char *read;     /* expected in that read error ('|' separates choices) */
	int64_t ok_id;        /* a sample that still reads, -1: none */
	const char *file;     /* named in the error */
};

static struct bad bads[] = {
	{ "bad_npz_trunc", "npz", "end-of-central-directory", -1, NULL, -1, "a.npz" },
	{ "bad_npz_method", "npz", "compressed with method 12 (bzip2)", -1, NULL, -1, "a.npz" },
	{ "bad_npz_header", "npz", "unexpected key 'shapf'", -1, NULL, -1, "a.npz" },
	{ "bad_npz_size", "npz", "but its NPY header describes", -1, NULL, -1, "a.npz" },
	{ "bad_npz_object", "npz", "object array", -1, NULL, -1, "a.npz" },
	{ "bad_npz_labels", "npz", "holds 6 labels for 5 samples", -1, NULL, -1, "a.npz" },
	{ "bad_npz_nox", "npz", "no data member 'x.npy'", -1, NULL, -1, "a.npz" },
	{ "bad_npz_flip", "npz", NULL, 3, "CRC mismatch", -1, "a.npz" },
	{ "bad_npz_deflate", "npz", NULL, 0, "CRC mismatch|inflate failed|deflate stream|inflates to", -1,
	  "a.npz" },
	{ "bad_npy_trunc", "npy", "truncated", -1, NULL, -1, "a.npy" },
	{ "bad_npy_magic", "npy", "bad magic", -1, NULL, -1, "a.npy" },
	{ "bad_npy_header", "npy", "unexpected key 'descx'", -1, NULL, -1, "a.npy" },
	{ "bad_npy_dtype", "npy", "unsupported dtype '<c8'", -1, NULL, -1, "a.npy" },
	{ "bad_h5_nodset", "hdf5", "no dataset 'records'", -1, NULL, -1, "a.hdf5" },
	{ "bad_h5_trunc", "hdf5", "truncated", -1, NULL, -1, "a.hdf5" },
	{ "bad_h5_magic", "hdf5", "not a readable HDF5 file", -1, NULL, -1, "a.hdf5" },
	{ "bad_h5_labels", "hdf5", "hold 6 values for 5 samples", -1, NULL, -1, "a.hdf5" },
	{ "bad_h5_chunk", "hdf5", NULL, 1, "HDF5 read of row 1 failed", 0, "a.h5" },
	{ "bad_tfr_len", "tfrecord", "record 2 at offset 112: length CRC mismatch", -1, NULL, -1,
	  "a.tfrecord" },
	{ "bad_tfr_payload", "tfrecord", NULL, 1, "payload CRC mismatch", 0, "a.tfrecord" },
	{ "bad_tfr_trunc", "tfrecord", "truncated", -1, NULL, -1, "a.tfrecord" },
	{ "bad_tfr_notfr", "tfrecord", "not a TFRecord file", -1, NULL, -1, "a.tfrecord" },
	{ "bad_idx_missing", "indexed", "a.indexed_binary.sz.idx", -1, NULL, -1,
	  "a.indexed_binary" },
	{ "bad_idx_range", "indexed", "runs past the end of the data file", -1, NULL, -1,
	  "a.indexed_binary" },
	{ "bad_idx_mismatch", "indexed", "index files disagree", -1, NULL, -1,
	  "a.indexed_binary" },
};

static bool has_any(const char *s, const char *choices)
{
	char buf[256];
	str_copy(buf, sizeof(buf), choices);
	for (char *save = NULL, *t = strtok_r(buf, "|", &save); t; t = strtok_r(NULL, "|", &save))
		if (strstr(s, t))
			return true;
	return false;
}

static int bad_idx[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
			 20, 21, 22, 23, 24 };
_Static_assert(ARRAY_SIZE(bad_idx) == ARRAY_SIZE(bads), "one index per damaged dataset");

ParameterizedTestParameters(formats, damaged_files)
{
	return cr_make_param_array(int, bad_idx, ARRAY_SIZE(bad_idx));
}

ParameterizedTest(int *bi, formats, damaged_files)
{
	const struct bad *b = &bads[*bi];
	char err[1024] = "";
	struct catalog *c = NULL;
	int rc = open_cat(b->ds, b->fmt, NULL, NULL, &c, err, sizeof(err));
	if (b->scan) {
		cr_assert_eq(rc, SEER_EDATASET, "%s: scan gave %d (%s)", b->ds, rc, err);
		cr_assert(strstr(err, b->scan), "%s: error lacks \"%s\": %s", b->ds, b->scan, err);
		cr_assert(strstr(err, b->file), "%s: error does not name the file: %s", b->ds, err);
		return;
	}
	cr_assert_eq(rc, 0, "%s: %s", b->ds, err);
	struct cat_reader rd;
	cat_reader_init(&rd, c);
	uint8_t *buf = malloc(c->max_len);
	if (b->ok_id >= 0)
		cr_assert_eq(cat_read(&rd, (uint64_t)b->ok_id, buf), 0, "%s: %s", b->ds, rd.err);
	rc = cat_read(&rd, (uint64_t)b->read_id, buf);
	cr_assert_eq(rc, SEER_EDATASET, "%s: read gave %d (%s)", b->ds, rc, rd.err);
	char sample[64];
	snprintf(sample, sizeof(sample), "sample %lld (", (long long)b->read_id);
	cr_assert(has_any(rd.err, b->read), "%s: error lacks \"%s\": %s", b->ds, b->read, rd.err);
	cr_assert(strstr(rd.err, sample) && strstr(rd.err, b->file),
		  "%s: error does not name sample and file: %s", b->ds, rd.err);
	/* the reader stays usable */
	if (b->ok_id >= 0)
		cr_assert_eq(cat_read(&rd, (uint64_t)b->ok_id, buf), 0, "%s: %s", b->ds, rd.err);
	free(buf);
	cat_reader_fini(&rd);
	cat_free(c);
}

Test(formats, index_files_are_not_samples)
{
	char err[1024];
	struct catalog *c;
	cr_assert_eq(open_cat("indexed/train", "indexed", NULL, NULL, &c, err, sizeof(err)), 0,
		     "%s", err);
	cr_assert_eq(c->nfiles, 3);
	for (uint32_t f = 0; f < c->nfiles; f++)
		cr_assert(!strstr(cat_path(c, f), ".idx"), "%s taken as data", cat_path(c, f));
	cat_free(c);
	/* a tfrecord root holding DLIO's index/ directory: the .idx files are skipped */
	cr_assert_eq(open_cat("tfrecord", "tfrecord", NULL, NULL, &c, err, sizeof(err)), 0, "%s",
		     err);
	cr_assert_eq(c->nfiles, 4);
	cat_free(c);
}

/* ---- parsers, directly ------------------------------------------------------------ */

static size_t npy_make(uint8_t *buf, unsigned major, const char *dict)
{
	size_t dl = strlen(dict), hoff = major == 1 ? 10 : 12;
	memcpy(buf, "\x93NUMPY", 6);
	buf[6] = (uint8_t)major;
	buf[7] = 0;
	if (major == 1) {
		buf[8] = (uint8_t)dl;
		buf[9] = (uint8_t)(dl >> 8);
	} else {
		uint32_t l = (uint32_t)dl;
		memcpy(buf + 8, &l, 4);
	}
	memcpy(buf + hoff, dict, dl);
	return hoff + dl;
}

Test(parsers, npy_header)
{
	uint8_t buf[512];
	char err[256];
	struct npy_header h;
	uint64_t need;
	size_t n = npy_make(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4, 5), }"
				    "          \n");
	cr_assert_eq(npy_parse_header(buf, n, &h, &need, err, sizeof(err)), 0, "%s", err);
	cr_assert(h.dtype == SEER_DT_F32 && h.itemsize == 4 && !h.swap && !h.fortran);
	cr_assert(h.ndim == 3 && h.shape[0] == 3 && h.shape[2] == 5 && h.nelem == 60);
	cr_assert(h.data_off == n && h.nbytes == 240);
	cr_assert_eq(npy_parse_header(buf, 30, &h, &need, err, sizeof(err)), -EAGAIN);
	cr_assert_eq(need, n);
	cr_assert_eq(npy_parse_header(buf, 7, &h, &need, err, sizeof(err)), -EAGAIN);

	n = npy_make(buf, 2, "{\"shape\": (7,), \"fortran_order\": True, \"descr\": \">i8\"}\n");
	cr_assert_eq(npy_parse_header(buf, n, &h, &need, err, sizeof(err)), 0, "%s", err);
	cr_assert(h.dtype == SEER_DT_I64 && h.swap && h.fortran && h.ndim == 1 && h.shape[0] == 7);
	n = npy_make(buf, 3, "{'descr': '|b1', 'fortran_order': False, 'shape': ()}");
	cr_assert_eq(npy_parse_header(buf, n, &h, &need, err, sizeof(err)), 0, "%s", err);
	cr_assert(h.dtype == SEER_DT_BOOL && h.ndim == 0 && h.nelem == 1);
	n = npy_make(buf, 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (2L, 3L), }");
	cr_assert_eq(npy_parse_header(buf, n, &h, &need, err, sizeof(err)), 0, "%s", err);
	cr_assert(h.dtype == SEER_DT_U16 && h.shape[1] == 3);

	static const struct {
		const char *dict, *why;
	} bad[] = {
		{ "{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", "object array" },
		{ "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", "structured" },
		{ "{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", "unsupported dtype" },
		{ "{'descr': '<U5', 'fortran_order': False, 'shape': (3,), }", "unsupported dtype" },
		{ "{'descr': '<f4', 'fortran_order': 0, 'shape': (3,), }", "True/False" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }", "non-negative" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': [3], }", "not a tuple" },
		{ "{'descr': '<f4', 'fortran_order': False}", "lacks 'shape'" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}", "unexpected key" },
		{ "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", "repeats" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} junk", "after its dict" },
		{ "['descr']", "not a dict" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 2)}",
		  "overflows" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1)}",
		  "more than 9 dimensions" },
		{ "{'descr': '<f4' 'fortran_order': False, 'shape': (3,)}", "does not parse" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (3,", "not a non-negative" },
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		n = npy_make(buf, 1, bad[i].dict);
		int rc = npy_parse_header(buf, n, &h, &need, err, sizeof(err));
		cr_expect_eq(rc, SEER_EDATASET, "%s: rc %d", bad[i].dict, rc);
		cr_expect(strstr(err, bad[i].why), "%s: '%s' lacks '%s'", bad[i].dict, err,
			  bad[i].why);
	}
	n = npy_make(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}");
	buf[6] = 4;
	cr_assert_eq(npy_parse_header(buf, n, &h, &need, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "version 4.0"), "%s", err);
	buf[0] = 'x';
	cr_assert_eq(npy_parse_header(buf, n, &h, &need, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "bad magic"), "%s", err);
}

/* CRC32C one bit at a time: the reference for the table and SSE4.2 paths. */
static uint32_t crc32c_bitwise(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	while (n--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
	}
	return ~c;
}

Test(parsers, crc32c)
{
	cr_assert_eq(crc32c(0, "123456789", 9), 0xe3069283u);
	cr_assert_eq(crc32c(0, "", 0), 0u);
	static uint8_t buf[100003];
	unsigned seed = 3;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rand_r(&seed);
	/* lengths and alignments around the 3 x 2 KiB stride of the fast path */
	static const size_t lens[] = { 1, 7, 8, 9, 6143, 6144, 6145, 12295, 65536, 100000 };
	for (size_t i = 0; i < ARRAY_SIZE(lens); i++)
		for (size_t off = 0; off < 3; off++)
			cr_assert_eq(crc32c(0, buf + off, lens[i]), crc32c_bitwise(buf + off, lens[i]),
				     "length %zu at offset %zu", lens[i], off);
	uint32_t whole = crc32c(0, buf, 20000);
	for (size_t cut = 0; cut < 40; cut++) {
		uint32_t c = crc32c(0, buf, cut);
		c = crc32c(c, buf + cut, 6151);
		c = crc32c(c, buf + cut + 6151, 20000 - cut - 6151);
		cr_assert_eq(c, whole, "split at %zu", cut);
	}
	/* a TFRecord header as TensorFlow frames a 5-byte payload */
	uint8_t hdr[TFR_HDR_LEN] = { 5, 0, 0, 0, 0, 0, 0, 0 };
	uint32_t m = tfr_mask_crc(crc32c(0, hdr, 8));
	memcpy(hdr + 8, &m, 4);
	uint64_t len;
	char err[256];
	cr_assert_eq(tfr_parse_header(hdr, sizeof(hdr), &len, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(len, 5);
	hdr[0] = 6;
	cr_assert_eq(tfr_parse_header(hdr, sizeof(hdr), &len, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "length CRC mismatch"), "%s", err);
}

Test(parsers, tfrecord_index)
{
	struct tfr_extent *e;
	uint64_t n;
	char err[256];
	const char *ok = "0 20\n20 31  \r\n\n51 16";
	cr_assert_eq(tfr_parse_index(ok, strlen(ok), &e, &n, err, sizeof(err)), 0, "%s", err);
	cr_assert(n == 3 && e[1].off == 20 && e[1].len == 31 && e[2].off == 51 && e[2].len == 16);
	free(e);
	cr_assert_eq(tfr_parse_index("", 0, &e, &n, err, sizeof(err)), 0);
	cr_assert(n == 0 && e == NULL);
	const char *bad[] = { "0 20 7\n", "0\n", "x 1\n", "0 -1\n", "0 99999999999999999999\n" };
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		cr_expect_eq(tfr_parse_index(bad[i], strlen(bad[i]), &e, &n, err, sizeof(err)),
			     SEER_EDATASET, "'%s' accepted", bad[i]);
		cr_expect(strstr(err, "line 1"), "%s", err);
	}
}

Test(parsers, zip_and_idx)
{
	char err[256];
	struct zip_dir d;
	uint8_t tail[64] = { 0 };
	cr_assert_eq(zip_find_eocd(tail, sizeof(tail), 64, &d, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "end-of-central-directory"), "%s", err);
	/* an EOCD whose directory would start past it */
	uint8_t e[22] = { 'P', 'K', 5, 6, 0, 0, 0, 0, 1, 0, 1, 0, 46, 0, 0, 0, 200, 0, 0, 0, 0, 0 };
	memcpy(tail + 42, e, sizeof(e));
	cr_assert_eq(zip_find_eocd(tail, sizeof(tail), 64, &d, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "outside the file"), "%s", err);
	e[16] = 0;
	e[12] = 42;
	memcpy(tail + 42, e, sizeof(e));
	cr_assert_eq(zip_find_eocd(tail, sizeof(tail), 64, &d, err, sizeof(err)), 0, "%s", err);
	cr_assert(d.cd_off == 0 && d.cd_size == 42 && d.nentries == 1);
	size_t pos = 0;
	struct zip_entry ze;
	cr_assert_eq(zip_next_entry(tail, 42, &pos, &ze, err, sizeof(err)), SEER_EDATASET);

	uint64_t off[3] = { 0, 10, 90 }, sz[3] = { 10, 80, 10 };
	cr_assert_eq(idx_check(off, sz, 3, 100, 0, err, sizeof(err)), 0, "%s", err);
	sz[2] = 11;
	cr_assert_eq(idx_check(off, sz, 3, 100, 7, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "sample 9 "), "%s", err);
	sz[2] = 0;
	cr_assert_eq(idx_check(off, sz, 3, 100, 0, err, sizeof(err)), SEER_EDATASET);
	off[2] = UINT64_MAX;
	sz[2] = 2;
	cr_assert_eq(idx_check(off, sz, 3, 100, 0, err, sizeof(err)), SEER_EDATASET);
}

/* Mutated inputs: every parser answers 0, -EAGAIN or SEER_EDATASET, and never
 * reads outside its buffer (the ASan build checks that). */
Test(parsers, mutations_never_crash)
{
	uint8_t good[256];
	size_t n = npy_make(good, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 4), }"
				     "   \n");
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/npz_nolabel/d.npz", data_dir());
	FILE *f = fopen(path, "rb");
	cr_assert(f);
	uint8_t zip[4096];
	size_t zn = fread(zip, 1, sizeof(zip), f);
	fclose(f);
	unsigned seed = 1;
	char err[256];
	for (int round = 0; round < 20000; round++) {
		uint8_t buf[4096];
		size_t len = round % 2 ? n : zn;
		memcpy(buf, round % 2 ? good : zip, len);
		for (int k = rand_r(&seed) % 4; k >= 0; k--)
			buf[(size_t)rand_r(&seed) % len] = (uint8_t)rand_r(&seed);
		size_t cut = (size_t)rand_r(&seed) % (len + 1);
		uint8_t *copy = malloc(MAX(cut, (size_t)1));
		memcpy(copy, buf, cut);
		struct npy_header h;
		uint64_t need;
		int rc = npy_parse_header(copy, cut, &h, &need, err, sizeof(err));
		cr_assert(rc == 0 || rc == -EAGAIN || rc == SEER_EDATASET);
		struct zip_dir d;
		rc = zip_find_eocd(copy, cut, cut, &d, err, sizeof(err));
		cr_assert(rc == 0 || rc == SEER_EDATASET);
		if (rc == 0 && d.eocd64_off < cut) {
			rc = zip_parse_eocd64(copy + d.eocd64_off, cut - d.eocd64_off, cut, &d, err,
					      sizeof(err));
			cr_assert(rc == 0 || rc == SEER_EDATASET);
		}
		if (rc == 0) {
			size_t pos = (size_t)d.cd_off;
			for (uint64_t i = 0; i < d.nentries && i < 8; i++) {
				struct zip_entry ze;
				if (zip_next_entry(copy, (size_t)(d.cd_off + d.cd_size), &pos, &ze, err,
						   sizeof(err)) != 0)
					break;
				uint64_t doff;
				if (ze.lh_off < cut)
					zip_local_data_off(copy + ze.lh_off, cut - (size_t)ze.lh_off,
							   &ze, &doff, err, sizeof(err));
			}
		}
		struct tfr_extent *ix;
		uint64_t nix;
		rc = tfr_parse_index((const char *)copy, cut, &ix, &nix, err, sizeof(err));
		cr_assert(rc == 0 || rc == SEER_EDATASET);
		if (rc == 0)
			free(ix);
		uint64_t plen;
		tfr_parse_header(copy, cut, &plen, err, sizeof(err));
		free(copy);
	}
}
