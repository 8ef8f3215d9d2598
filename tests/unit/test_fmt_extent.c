/* Coalesced reads at the format layer (catalog_span, catalog_read_range, catalog_cut):
 * for every format written by its real writer, a byte range of a file read
 * once and every sample cut out of it must equal what numpy/h5py/the
 * TFRecord writer wrote (all of a file's samples, every other one, in
 * reverse order); the bytes read are the range's; damaged bytes in the range
 * fail exactly the samples they belong to with the format's message (a
 * TFRecord payload CRC, an npz member's zip CRC); a range that does not hold
 * a sample's span is refused, never read past. */
#define _GNU_SOURCE
#include "fmt_fixture.h"

struct cut_log {
	uint32_t n;
	int rc[4096];
	char err[4096][160];
};

static void on_cut(void *ctx, uint32_t i, int rc, const char *err)
{
	struct cut_log *l = ctx;
	cr_assert_lt(i, l->n);
	l->rc[i] = rc;
	snprintf(l->err[i], sizeof(l->err[i]), "%s", err);
}

/* The union of the spans of file f's samples; false when one is read alone. */
static bool file_span(const struct catalog *c, uint32_t f, uint64_t *lo, uint64_t *hi)
{
	*lo = UINT64_MAX;
	*hi = 0;
	for (uint64_t id = c->files[f].first; id < c->files[f].first + c->files[f].nsamples; id++) {
		uint64_t a, b;
		if (!catalog_span(c, id, &a, &b))
			return false;
		*lo = MIN(*lo, a);
		*hi = MAX(*hi, b);
	}
	return c->files[f].nsamples > 0;
}

/* Cut samples ids (of file f) from buf and compare them with the writer's. */
static void cut_and_check(struct catalog_reader *rd, uint32_t f, const uint8_t *buf, uint64_t lo,
			  uint64_t hi, const uint64_t *ids, uint32_t n, const struct expect *e)
{
	const struct catalog *c = rd->cat;
	uint8_t *out = malloc(n * MAX(c->max_len, (uint64_t)1));
	void **dsts = calloc(MAX(n, 1u), sizeof(*dsts));
	static struct cut_log log;
	log.n = n;
	for (uint32_t i = 0; i < n; i++) {
		dsts[i] = out + i * c->max_len;
		log.rc[i] = 12345;
	}
	memset(out, 0xa5, n * c->max_len);
	catalog_cut(rd, f, buf, lo, hi - lo, n, ids, dsts, on_cut, &log);
	for (uint32_t i = 0; i < n; i++) {
		cr_assert_eq(log.rc[i], 0, "sample %llu: cut failed (%d): %s",
			     (unsigned long long)ids[i], log.rc[i], log.err[i]);
		cr_assert(memcmp(dsts[i], e[ids[i]].data, e[ids[i]].len) == 0,
			  "sample %llu (%s): cut bytes differ from the writer's",
			  (unsigned long long)ids[i], catalog_path(c, f));
	}
	free(dsts);
	free(out);
}

ParameterizedTestParameters(fmt_extent, cut_equals_writer)
{
	return cr_make_param_array(int, good_idx, ARRAY_SIZE(good_idx));
}

ParameterizedTest(int *gi, fmt_extent, cut_equals_writer)
{
	const struct good *g = &goods[*gi];
	struct expset x;
	load_expect(g->expect, &x);
	struct catalog_params p = params_of(g);
	char err[1024];
	struct catalog *c;
	cr_assert_eq(open_cat(g->ds, g->fmt, &p, NULL, &c, err, sizeof(err)), 0, "%s", err);
	struct catalog_reader rd;
	catalog_reader_init(&rd, c);
	uint32_t coalescible = 0;
	for (uint32_t f = 0; f < c->nfiles; f++) {
		uint64_t lo, hi;
		if (!file_span(c, f, &lo, &hi))
			continue;
		coalescible++;
		uint8_t *buf = malloc(hi - lo);
		cr_assert_eq(catalog_read_range(&rd, f, lo, hi - lo, buf), 0, "%s", rd.err);
		cr_assert_eq(rd.last_bytes, hi - lo, "the range's bytes are the bytes read");
		uint32_t n = c->files[f].nsamples;
		cr_assert_leq(n, 4096);
		uint64_t ids[4096];
		for (uint32_t i = 0; i < n; i++)
			ids[i] = c->files[f].first + i;
		cut_and_check(&rd, f, buf, lo, hi, ids, n, x.e);
		uint32_t m = 0; /* every other one, last first */
		for (uint32_t i = n; i-- > 0;)
			if (i % 2 == 0)
				ids[m++] = c->files[f].first + i;
		cut_and_check(&rd, f, buf, lo, hi, ids, m, x.e);
		cr_assert_eq(rd.last_bytes, hi - lo, "cutting reads nothing");
		free(buf);
	}
	/* which files must be coalescible: all but split HDF5 records (hdf5_chunked's
	 * chunked a, b, d, g -- plain, gzip + shuffle, gzip, 2-row big-endian
	 * chunks -- are read by seer, a row's span its band of chunks; its c, e,
	 * f are contiguous, c big-endian) */
	uint32_t want = strcmp(g->expect, "hdf5_split") == 0 ? 0 : c->nfiles;
	cr_assert_eq(coalescible, want, "%s: %u of %u files coalescible, expected %u", g->ds,
		     coalescible, c->nfiles, want);
	catalog_reader_fini(&rd);
	catalog_free(c);
	free_expect(&x);
}

/* A damaged byte in the range: the sample it belongs to fails with the
 * format's message; with a record per sample (TFRecord) the others still cut. */
static void damaged(const char *ds, const char *expect, const char *fmt, const char *want,
		    bool all_fail)
{
	struct expset x;
	load_expect(expect, &x);
	char err[1024];
	struct catalog *c;
	cr_assert_eq(open_cat(ds, fmt, NULL, NULL, &c, err, sizeof(err)), 0, "%s", err);
	struct catalog_reader rd;
	catalog_reader_init(&rd, c);
	uint32_t f = 0;
	while (f < c->nfiles && c->files[f].nsamples < 3)
		f++;
	cr_assert_lt(f, c->nfiles, "%s: no file of 3 samples", ds);
	uint64_t lo, hi;
	cr_assert(file_span(c, f, &lo, &hi));
	uint8_t *buf = malloc(hi - lo);
	cr_assert_eq(catalog_read_range(&rd, f, lo, hi - lo, buf), 0, "%s", rd.err);
	uint64_t victim = c->files[f].first + 1, vlo, vhi;
	cr_assert(catalog_span(c, victim, &vlo, &vhi));
	buf[vhi - lo - 6] ^= 0x5a; /* inside the victim's bytes (its payload or data) */
	uint32_t n = c->files[f].nsamples;
	uint64_t ids[4096];
	void *dsts[4096];
	uint8_t *out = malloc(n * c->max_len);
	static struct cut_log log;
	log.n = n;
	for (uint32_t i = 0; i < n; i++) {
		ids[i] = c->files[f].first + i;
		dsts[i] = out + i * c->max_len;
	}
	catalog_cut(&rd, f, buf, lo, hi - lo, n, ids, dsts, on_cut, &log);
	for (uint32_t i = 0; i < n; i++) {
		if (ids[i] == victim || all_fail) {
			cr_assert_eq(log.rc[i], SEER_EDATASET, "%s: sample %llu must fail", ds,
				     (unsigned long long)ids[i]);
			cr_assert(strstr(log.err[i], want) && strstr(log.err[i], catalog_path(c, f)),
				  "%s: message '%s' must name the file and say '%s'", ds, log.err[i],
				  want);
		} else {
			cr_assert_eq(log.rc[i], 0, "%s: sample %llu: %s", ds,
				     (unsigned long long)ids[i], log.err[i]);
			cr_assert(memcmp(dsts[i], x.e[ids[i]].data, x.e[ids[i]].len) == 0);
		}
	}
	free(out);
	free(buf);
	catalog_reader_fini(&rd);
	catalog_free(c);
	free_expect(&x);
}

Test(fmt_extent, damaged_tfrecord_fails_its_record_only)
{
	damaged("tfrecord/train", "tfrecord", "tfrecord", "payload CRC mismatch", false);
}

Test(fmt_extent, damaged_npz_member_fails_by_its_crc)
{
	damaged("npz_dlio/train", "npz_dlio", "npz", "CRC", true);
}

/* A range that does not hold a sample's bytes: refused, nothing read past it. */
Test(fmt_extent, range_without_the_sample_is_refused)
{
	char err[1024];
	struct catalog *c;
	const char *sets[][2] = { { "tfrecord/train", "tfrecord" }, { "indexed/train", "indexed" },
				  { "hdf5_dlio/train", "hdf5" }, { "npz_dlio/train", "npz" } };
	for (size_t k = 0; k < ARRAY_SIZE(sets); k++) {
		cr_assert_eq(open_cat(sets[k][0], sets[k][1], NULL, NULL, &c, err, sizeof(err)), 0,
			     "%s", err);
		struct catalog_reader rd;
		catalog_reader_init(&rd, c);
		uint64_t id = c->files[0].first + c->files[0].nsamples - 1, lo, hi;
		cr_assert(catalog_span(c, id, &lo, &hi));
		uint64_t len = hi - lo - 1; /* one byte short */
		uint8_t *buf = calloc(1, len + 1), *dst = malloc(c->max_len);
		static struct cut_log log;
		log.n = 1;
		void *d = dst;
		catalog_cut(&rd, 0, buf, lo, len, 1, &id, &d, on_cut, &log);
		cr_assert_neq(log.rc[0], 0, "%s: a short range must be refused", sets[k][0]);
		/* past the end of the file: the file is shorter than the catalog */
		uint64_t size = c->files[0].size;
		uint8_t *big = malloc(size + 16);
		int rc = catalog_read_range(&rd, 0, 0, size + 16, big);
		cr_assert_eq(rc, SEER_EDATASET, "%s: reading past the end: %d", sets[k][0], rc);
		cr_assert(strstr(rd.err, "shorter"), "%s", rd.err);
		free(big);
		free(buf);
		free(dst);
		catalog_reader_fini(&rd);
		catalog_free(c);
	}
}
