/* The dataset formats against files written by their real writers (numpy,
 * h5py, an independent TFRecord writer, DLIO's indexed_binary layout):
 * every sample's bytes, type and label as the writer wrote them, from one
 * reader and from four at once; damaged copies fail with errors naming file,
 * sample and cause; mutated inputs never crash a parser. Memory and bytes
 * read are test_fmt_memory.c; the parsers on hand-made input test_fmt_parsers.c. */
#define _GNU_SOURCE
#include "fmt_fixture.h"

ParameterizedTestParameters(formats, delivers_what_the_writer_wrote)
{
	return cr_make_param_array(int, good_idx, ARRAY_SIZE(good_idx));
}

ParameterizedTest(int *gi, formats, delivers_what_the_writer_wrote)
{
	const struct good *g = &goods[*gi];
	struct expset x;
	load_expect(g->expect, &x);
	struct catalog_params p = params_of(g);
	char err[1024], cache[PATH_MAX];
	snprintf(cache, sizeof(cache), "%s/cache-%s", data_dir(), g->expect);
	struct catalog *c;
	int rc = open_cat(g->ds, g->fmt, &p, cache, &c, err, sizeof(err));
	cr_assert_eq(rc, 0, "%s: %s", g->ds, err);
	cr_assert(!c->from_cache);
	check_all(c, x.e, x.n);
	catalog_free(c);
	/* the per-file aux words survive the catalog cache */
	rc = open_cat(g->ds, g->fmt, &p, cache, &c, err, sizeof(err));
	cr_assert_eq(rc, 0, "%s: %s", g->ds, err);
	cr_assert(c->from_cache, "%s: catalog not loaded from its cache", g->ds);
	check_all(c, x.e, x.n);
	catalog_free(c);
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
	struct catalog_reader rd;
	catalog_reader_init(&rd, t->c);
	uint8_t *buf = malloc(t->c->max_len);
	for (int round = 0; round < 200 && !t->bad; round++) {
		uint64_t id = rand_r(&t->seed) % t->c->nsamples;
		int rc = catalog_read(&rd, id, buf);
		if (rc != 0 || memcmp(buf, t->e[id].data, t->e[id].len) != 0) {
			t->bad = 1;
			snprintf(t->err, sizeof(t->err), "sample %llu: rc %d %s",
				 (unsigned long long)id, rc, rd.err);
		}
	}
	free(buf);
	catalog_reader_fini(&rd);
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
	struct catalog_params p = params_of(g);
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
	catalog_free(c);
	free_expect(&x);
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
	{ "bad_npz_dup", "npz", "zip member 'x.npy' appears 2 times", -1, NULL, -1, "a.npz" },
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
	{ "bad_h5_chunk", "hdf5", NULL, 1, "inflate failed", 0, "a.h5" },
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
			 20, 21, 22, 23, 24, 25 };
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
	struct catalog_reader rd;
	catalog_reader_init(&rd, c);
	uint8_t *buf = malloc(c->max_len);
	if (b->ok_id >= 0)
		cr_assert_eq(catalog_read(&rd, (uint64_t)b->ok_id, buf), 0, "%s: %s", b->ds, rd.err);
	rc = catalog_read(&rd, (uint64_t)b->read_id, buf);
	cr_assert_eq(rc, SEER_EDATASET, "%s: read gave %d (%s)", b->ds, rc, rd.err);
	char sample[64];
	snprintf(sample, sizeof(sample), "sample %lld (", (long long)b->read_id);
	cr_assert(has_any(rd.err, b->read), "%s: error lacks \"%s\": %s", b->ds, b->read, rd.err);
	cr_assert(strstr(rd.err, sample) && strstr(rd.err, b->file),
		  "%s: error does not name sample and file: %s", b->ds, rd.err);
	/* the reader stays usable */
	if (b->ok_id >= 0)
		cr_assert_eq(catalog_read(&rd, (uint64_t)b->ok_id, buf), 0, "%s: %s", b->ds, rd.err);
	free(buf);
	catalog_reader_fini(&rd);
	catalog_free(c);
}

Test(formats, index_files_are_not_samples)
{
	char err[1024];
	struct catalog *c;
	cr_assert_eq(open_cat("indexed/train", "indexed", NULL, NULL, &c, err, sizeof(err)), 0,
		     "%s", err);
	cr_assert_eq(c->nfiles, 3);
	for (uint32_t f = 0; f < c->nfiles; f++)
		cr_assert(!strstr(catalog_path(c, f), ".idx"), "%s taken as data", catalog_path(c, f));
	catalog_free(c);
	/* a tfrecord root holding DLIO's index/ directory: the .idx files are skipped */
	cr_assert_eq(open_cat("tfrecord", "tfrecord", NULL, NULL, &c, err, sizeof(err)), 0, "%s",
		     err);
	cr_assert_eq(c->nfiles, 4);
	catalog_free(c);
}

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


/* ---- parsers on mutated real files --------------------------------------------------- */

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
		struct tfrecord_extent *ix;
		uint64_t nix;
		rc = tfrecord_parse_index((const char *)copy, cut, &ix, &nix, err, sizeof(err));
		cr_assert(rc == 0 || rc == SEER_EDATASET);
		if (rc == 0)
			free(ix);
		uint64_t plen;
		tfrecord_parse_header(copy, cut, &plen, err, sizeof(err));
		free(copy);
	}
}

