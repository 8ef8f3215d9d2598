/* What the formats hold in memory and read from the files: the decoded-member
 * cache shared by readers (a file decoded once for all threads, ranges when a
 * file does not fit, nothing kept when not even two samples fit, the budget
 * never exceeded), plain reads where samples are contiguous, and the bytes
 * each read reports against the kernel's own count. */
#define _GNU_SOURCE
#include "fmt_fixture.h"

static void stats(const struct catalog *c, struct fmt_mem_stats *st)
{
	fmt_memory_stats(c, st);
}

/* Bytes a whole-member decode of file f reads: the stored member, or the
 * compressed one (aux words: data offset, stored bytes, decoded bytes). */
static uint64_t member_read_bytes(const struct catalog_file *f)
{
	return f->aux[1];
}

static void restore_memory(void)
{
	fmt_set_memory(FMT_MEMORY_DEFAULT);
}

TestSuite(memory, .fini = restore_memory);

Test(memory, npz_file_decoded_once_while_cached)
{
	struct expset x;
	load_expect("npz_dlio", &x);
	const struct expect *e = x.e;
	struct catalog *c;
	char err[1024];
	cr_assert_eq(open_cat("npz_dlio/train", "npz", NULL, NULL, &c, err, sizeof(err)), 0, "%s",
		     err);
	struct catalog_reader rd;
	catalog_reader_init(&rd, c);
	uint8_t *buf = malloc(c->max_len);
	/* 16 samples strided along the last axis of a stored member; then 7 of a
	 * deflated one; in a scrambled order */
	const char *files[] = { "0/img_4_of_5.npz", "1/img_1_of_5.npz" };
	uint64_t want_bytes = 0;
	struct fmt_mem_stats st;
	for (int k = 0; k < 2; k++) {
		const struct catalog_file *f = &c->files[file_named(c, files[k])];
		cr_assert(f->nsamples == (k == 0 ? 16 : 7));
		for (uint32_t i = 0; i < f->nsamples; i++) {
			uint64_t id = f->first + (i * 5) % f->nsamples;
			check_sample(&rd, id, &e[id], buf);
		}
		want_bytes += member_read_bytes(f);
		stats(c, &st);
		cr_assert_eq(st.loads, (uint64_t)k + 1, "%s decoded %llu times", files[k],
			     (unsigned long long)st.loads);
		cr_assert_eq(rd.bytes_read, want_bytes, "read %llu bytes, the members hold %llu",
			     (unsigned long long)rd.bytes_read, (unsigned long long)want_bytes);
	}
	/* the first file is still cached: no decode, no byte read */
	const struct catalog_file *f = &c->files[file_named(c, files[0])];
	check_sample(&rd, f->first + 3, &e[f->first + 3], buf);
	stats(c, &st);
	cr_assert_eq(st.loads, 2);
	cr_assert_eq(rd.last_bytes, 0);
	cr_assert_eq(st.hits, 16 + 7 - 2 + 1);
	free(buf);
	catalog_reader_fini(&rd);
	catalog_free(c);
	free_expect(&x);
}

Test(memory, contiguous_samples_are_plain_reads)
{
	struct expset x;
	load_expect("npz_first", &x);
	const struct expect *e = x.e;
	struct catalog_params p = { .npz_data = "images", .npz_labels = "lab",
				.npz_sample_axis = "first" };
	struct catalog *c;
	char err[1024];
	cr_assert_eq(open_cat("npz_first", "npz", &p, NULL, &c, err, sizeof(err)), 0, "%s", err);
	struct catalog_reader rd;
	catalog_reader_init(&rd, c);
	uint8_t *buf = malloc(c->max_len);
	const struct catalog_file *f = &c->files[file_named(c, "a.npz")]; /* stored, C order */
	for (uint32_t i = 0; i < f->nsamples; i++) {
		check_sample(&rd, f->first + i, &e[f->first + i], buf);
		cr_assert_eq(rd.last_bytes, c->samples[f->first + i].length,
			     "a contiguous stored sample is one read of its bytes");
	}
	struct fmt_mem_stats st;
	stats(c, &st);
	cr_assert_eq(st.loads + st.streamed, 0, "contiguous stored samples were decoded");
	free(buf);
	catalog_reader_fini(&rd);
	catalog_free(c);

	/* contiguous HDF5 datasets: pread only, no HDF5 call */
	free_expect(&x);
	load_expect("hdf5_dlio", &x);
	e = x.e;
	cr_assert_eq(open_cat("hdf5_dlio/train", "hdf5", NULL, NULL, &c, err, sizeof(err)), 0, "%s",
		     err);
	catalog_reader_init(&rd, c);
	buf = malloc(c->max_len);
	for (uint64_t id = 0; id < x.n; id++) {
		check_sample(&rd, id, &e[id], buf);
		cr_assert_eq(rd.last_bytes, c->samples[id].length);
	}
	stats(c, &st);
	cr_assert_eq(st.lib_reads, 0, "contiguous HDF5 reads went through the HDF5 library");
	free(buf);
	catalog_reader_fini(&rd);
	catalog_free(c);
	free_expect(&x);
}

/* Many files, random order: with room for all, each is decoded once; with room
 * for a few, evicted ones are decoded again, the budget is never exceeded and
 * every sample stays right. */
Test(memory, cache_many_files)
{
	struct expset x;
	load_expect("npz_many", &x);
	for (int limited = 0; limited < 2; limited++) {
		fmt_set_memory(limited ? 1024 : FMT_MEMORY_DEFAULT); /* 1 KiB: 17 files of 60 B */
		struct catalog *c;
		char err[1024];
		cr_assert_eq(open_cat("npz_many", "npz", NULL, NULL, &c, err, sizeof(err)), 0, "%s",
			     err);
		cr_assert_eq(c->nfiles, 300);
		uint8_t *buf = malloc(c->max_len);
		struct catalog_reader rd;
		catalog_reader_init(&rd, c);
		unsigned seed = 5;
		for (int i = 0; i < 6000; i++) {
			uint64_t id = (uint64_t)rand_r(&seed) % c->nsamples;
			check_sample(&rd, id, &x.e[id], buf);
		}
		struct fmt_mem_stats st;
		stats(c, &st);
		if (limited) {
			cr_assert(st.loads > 3000, "only %llu decodes with a 1 KiB budget",
				  (unsigned long long)st.loads);
			cr_assert_leq(st.peak, 1024, "held %llu bytes", (unsigned long long)st.peak);
		} else {
			cr_assert_eq(st.loads, 300, "%llu decodes for 300 files",
				     (unsigned long long)st.loads);
		}
		catalog_reader_fini(&rd);
		free(buf);
		catalog_free(c);
	}
	free_expect(&x);
}

/* A budget holding a few samples: files are decoded by ranges. */
Test(memory, ranges_of_samples)
{
	struct expset x;
	load_expect("npz_dlio", &x);
	fmt_set_memory(4 * 256); /* the 16-sample file has 256-byte samples: ranges of 2 */
	struct catalog *c;
	char err[1024];
	cr_assert_eq(open_cat("npz_dlio/train", "npz", NULL, NULL, &c, err, sizeof(err)), 0, "%s",
		     err);
	const struct catalog_file *f = &c->files[file_named(c, "0/img_4_of_5.npz")];
	cr_assert_eq(c->samples[f->first].length, 256);
	struct catalog_reader rd;
	catalog_reader_init(&rd, c);
	uint8_t *buf = malloc(c->max_len);
	for (uint32_t i = 0; i < 16; i++)
		check_sample(&rd, f->first + i, &x.e[f->first + i], buf);
	struct fmt_mem_stats st;
	stats(c, &st);
	cr_assert_eq(st.loads, 8, "%llu ranges loaded", (unsigned long long)st.loads);
	cr_assert_eq(st.hits, 8);
	cr_assert_leq(st.peak, 1024);
	check_all(c, x.e, x.n);
	free(buf);
	catalog_reader_fini(&rd);
	catalog_free(c);
	free_expect(&x);
}

/* No format memory (or too little for two samples): each sample decodes its
 * own part of the member, nothing is kept. */
Test(memory, no_budget_every_sample_decoded_alone)
{
	fmt_set_memory(0);
	size_t ng = 0;
	for (size_t k = 0; k < ARRAY_SIZE(goods); k++) {
		const struct good *g = &goods[k];
		if (strcmp(g->fmt, "npz") != 0 && strcmp(g->fmt, "npy") != 0)
			continue;
		ng++;
		struct expset x;
		load_expect(g->expect, &x);
		struct catalog_params p = params_of(g);
		struct catalog *c;
		char err[1024];
		cr_assert_eq(open_cat(g->ds, g->fmt, &p, NULL, &c, err, sizeof(err)), 0, "%s", err);
		check_all(c, x.e, x.n);
		struct fmt_mem_stats st;
		stats(c, &st);
		cr_assert_eq(st.loads, 0, "%s: %llu entries loaded", g->ds,
			     (unsigned long long)st.loads);
		cr_assert_eq(st.peak, 0);
		cr_assert_eq(st.limit, 0);
		catalog_free(c);
		free_expect(&x);
	}
	cr_assert_eq(ng, 6);
}

/* Readers on four threads share the cache: each file decoded once in all, the
 * same bytes read as by one reader, the budget held. */
struct thr {
	const struct catalog *c;
	const struct expect *e;
	unsigned seed;
	uint64_t read;
	int bad;
	char err[600];
};

static void *read_every_sample(void *arg)
{
	struct thr *t = arg;
	struct catalog_reader rd;
	catalog_reader_init(&rd, t->c);
	uint8_t *buf = malloc(t->c->max_len);
	uint64_t n = t->c->nsamples, start = (uint64_t)rand_r(&t->seed) % n;
	for (uint64_t i = 0; i < n && !t->bad; i++) {
		uint64_t id = (start + i * 7) % n; /* 7 is prime to the sample counts used */
		int rc = catalog_read(&rd, id, buf);
		if (rc != 0 || memcmp(buf, t->e[id].data, t->e[id].len) != 0) {
			t->bad = 1;
			snprintf(t->err, sizeof(t->err), "sample %llu: rc %d %s",
				 (unsigned long long)id, rc, rd.err);
		}
	}
	t->read = rd.bytes_read;
	free(buf);
	catalog_reader_fini(&rd);
	return NULL;
}

static void run_readers(const struct catalog *c, const struct expect *e, int n,
			uint64_t *read)
{
	struct thr t[4];
	pthread_t th[4];
	for (int i = 0; i < n; i++) {
		t[i] = (struct thr){ .c = c, .e = e, .seed = 11u + (unsigned)i };
		pthread_create(&th[i], NULL, read_every_sample, &t[i]);
	}
	*read = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		cr_assert(!t[i].bad, "thread %d: %s", i, t[i].err);
		*read += t[i].read;
	}
}

Test(memory, shared_by_reader_threads)
{
	struct expset x;
	load_expect("npz_dlio", &x);
	char err[1024];
	struct catalog *c;
	struct fmt_mem_stats one, four;
	uint64_t read1, read4;
	cr_assert_eq(open_cat("npz_dlio/train", "npz", NULL, NULL, &c, err, sizeof(err)), 0, "%s",
		     err);
	run_readers(c, x.e, 1, &read1);
	stats(c, &one);
	catalog_free(c);
	cr_assert_eq(open_cat("npz_dlio/train", "npz", NULL, NULL, &c, err, sizeof(err)), 0, "%s",
		     err);
	run_readers(c, x.e, 4, &read4);
	stats(c, &four);
	catalog_free(c);
	cr_assert_eq(four.loads, one.loads, "4 readers decoded %llu times, 1 reader %llu",
		     (unsigned long long)four.loads, (unsigned long long)one.loads);
	/* every reader reads every sample: the contiguous ones are read 4 times */
	uint64_t contiguous = 0;
	cr_assert_eq(open_cat("npz_dlio/train", "npz", NULL, NULL, &c, err, sizeof(err)), 0, "%s",
		     err);
	struct catalog_reader rd;
	catalog_reader_init(&rd, c);
	uint8_t *buf = malloc(c->max_len);
	struct fmt_mem_stats before, after;
	for (uint64_t id = 0; id < c->nsamples; id++) {
		stats(c, &before);
		cr_assert_eq(catalog_read(&rd, id, buf), 0);
		stats(c, &after);
		if (after.loads + after.hits == before.loads + before.hits)
			contiguous += rd.last_bytes; /* not through the cache */
	}
	cr_assert_gt(contiguous, 0, "npz_dlio has a stored one-sample file");
	catalog_reader_fini(&rd);
	free(buf);
	catalog_free(c);
	cr_assert_eq(read4, read1 + 3 * contiguous, "4 readers read %llu bytes, 1 reader %llu",
		     (unsigned long long)read4, (unsigned long long)read1);

	/* a budget for about two files, four threads: held, and still right */
	fmt_set_memory(3000);
	cr_assert_eq(open_cat("npz_dlio/train", "npz", NULL, NULL, &c, err, sizeof(err)), 0, "%s",
		     err);
	run_readers(c, x.e, 4, &read4);
	stats(c, &four);
	cr_assert_leq(four.peak, 3000, "held %llu bytes", (unsigned long long)four.peak);
	catalog_free(c);
	free_expect(&x);
}

/* Every format: the bytes a reader reports are the bytes the kernel counted
 * for its thread (pread and HDF5's own reads alike). */
ParameterizedTestParameters(memory, bytes_read_are_the_kernels_count)
{
	return cr_make_param_array(int, good_idx, ARRAY_SIZE(good_idx));
}

ParameterizedTest(int *gi, memory, bytes_read_are_the_kernels_count)
{
	const struct good *g = &goods[*gi];
	struct expset x;
	load_expect(g->expect, &x);
	struct catalog_params p = params_of(g);
	char err[1024];
	struct catalog *c;
	cr_assert_eq(open_cat(g->ds, g->fmt, &p, NULL, &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_gt(c->scan_bytes, 0, "%s: the scan read nothing?", g->ds);
	struct catalog_reader rd;
	catalog_reader_init(&rd, c);
	uint8_t *buf = malloc(c->max_len);
	struct fmt_lib_io io;
	fmt_lib_io_begin(&io);
	for (uint64_t id = 0; id < x.n; id++)
		check_sample(&rd, id, &x.e[id], buf);
	uint64_t kernel = fmt_lib_io_end(&io);
	cr_assert_neq(kernel, UINT64_MAX, "no per-thread I/O accounting in this kernel");
	cr_assert_eq(rd.bytes_read, kernel, "%s: reported %llu bytes, the kernel counted %llu",
		     g->ds, (unsigned long long)rd.bytes_read, (unsigned long long)kernel);
	cr_assert_geq(rd.bytes_read, c->total_bytes / 2, "%s: %llu bytes for %llu of samples",
		      g->ds, (unsigned long long)rd.bytes_read,
		      (unsigned long long)c->total_bytes);
	free(buf);
	catalog_reader_fini(&rd);
	catalog_free(c);
	free_expect(&x);
}
