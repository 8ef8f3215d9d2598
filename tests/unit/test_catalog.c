/* catalog: the files format on real trees in a temporary directory (ids,
 * labels, lengths, bytes), its error messages, the cache file (reuse,
 * invalidation, corruption), cat_deserialize on hostile input, and reads of
 * files that changed after cataloguing. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "seer.h"
#include "../../src/catalog.h"
#include "../../src/util.h"


static char base[64];            /* the fixture's temporary directory */
static char data[PATH_MAX];      /* dataset root (realpath) */
static char cache[PATH_MAX];     /* catalog cache directory */
static char err[1024];

static void setup(void)
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

static void teardown(void)
{
	nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(catalog, .init = setup, .fini = teardown, .timeout = 60);

/* ---- helpers ----------------------------------------------------------------- */

static uint8_t content_byte(unsigned seed, uint64_t i)
{
	return (uint8_t)(seed * 131u + i * 7u + (i >> 8) + 1u);
}

/* Writes data/<rel> (creating directories) with `len` bytes of pattern `seed`. */
static void mkfile(const char *rel, size_t len, unsigned seed)
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

static void rmfile(const char *rel)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", data, rel);
	cr_assert_eq(unlink(path), 0, "unlink %s", path);
}

static void truncate_file(const char *rel, off_t len)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", data, rel);
	cr_assert_eq(truncate(path, len), 0, "truncate %s", path);
}

/* Directory mtimes are what tells a stale cache apart; on file systems
 * with a coarse clock, a change right after the scan could keep the same
 * mtime (see racy_mtime below). Tests of invalidation step past that. */
static void settle(void)
{
	struct timespec ts = { 0, 25000000 };
	nanosleep(&ts, NULL);
}

/* A real dataset's directories were written long before the job: put the
 * tree's directory mtimes a minute in the past, out of the racy window in
 * which a cache is not trusted (see racy_mtime). */
static int age_dir(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)f;
	if (flag == FTW_D || flag == FTW_DP) {
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now);
		now.tv_sec -= 60;
		struct timespec ts[2] = { now, now };
		utimensat(AT_FDCWD, p, ts, 0);
	}
	return 0;
}

static void age_tree(void)
{
	nftw(data, age_dir, 16, FTW_PHYS);
}

static struct cat_opts opts(bool with_cache)
{
	return (struct cat_opts){ .root = data, .format = "files",
				  .cache_dir = with_cache ? cache : NULL };
}

static struct catalog *open_ok(const struct cat_opts *o)
{
	struct catalog *c = NULL;
	err[0] = '\0';
	int rc = cat_open(o, &c, err, sizeof(err));
	cr_assert_eq(rc, 0, "cat_open(%s): %d %s", o->root, rc, err);
	cr_assert_not_null(c);
	return c;
}

static int open_fails(const struct cat_opts *o)
{
	struct catalog *c = NULL;
	err[0] = '\0';
	int rc = cat_open(o, &c, err, sizeof(err));
	cr_assert_neq(rc, 0, "cat_open(%s) succeeded", o->root);
	cr_assert_null(c);
	return rc;
}

static void assert_has(const char *msg, const char *needle)
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
static void assert_catalog(const struct catalog *c, const struct expect *want, size_t n)
{
	cr_assert_eq(c->nsamples, n, "%llu samples, want %zu", (unsigned long long)c->nsamples, n);
	cr_assert_eq(c->nfiles, n);
	cr_assert_str_eq(c->root, data);
	uint64_t total = 0, maxlen = 0;
	struct cat_reader rd;
	cr_assert_eq(cat_reader_init(&rd, c), 0);
	for (size_t id = 0; id < n; id++) {
		const struct cat_sample *s = &c->samples[id];
		cr_assert_str_eq(cat_path(c, s->file), want[id].path, "sample %zu", id);
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
		int rc = cat_read(&rd, id, buf);
		cr_assert_eq(rc, 0, "cat_read %zu: %d %s", id, rc, rd.err);
		for (size_t i = 0; i < want[id].len; i++)
			cr_assert_eq(buf[i], content_byte(want[id].seed, i), "%s byte %zu",
				     want[id].path, i);
		for (size_t i = 0; i < 16; i++)
			cr_assert_eq(buf[want[id].len + i], 0x5a, "cat_read wrote past the sample");
		free(buf);
	}
	cr_assert_eq(c->total_bytes, total);
	cr_assert_eq(c->max_len, maxlen);
	uint8_t one;
	cr_assert_eq(cat_read(&rd, n, &one), -ERANGE);
	cat_reader_fini(&rd);
}

/* ---- layouts ------------------------------------------------------------------- */

/* Class directories sorted bytewise (uppercase before lowercase, UTF-8
 * after ASCII, "a" < "a-b" < "a0"); sample ids follow the sorted relative
 * paths ('-' < '/' < '0' puts "a-b/1" before "a/1"); nested directories
 * belong to their top-level class; hidden entries are ignored. */
Test(catalog, class_directories)
{
	mkfile("b/1", 11, 1);
	mkfile("b/2", 12, 2);
	mkfile("a/1", 13, 3);
	mkfile("a/sub/deep", 14, 4);
	mkfile("a-b/1", 15, 5);
	mkfile("a0/1", 16, 6);
	mkfile("B/1", 17, 7);
	mkfile("Z/1", 18, 8);
	mkfile("\xc3\xa9/1", 19, 9);
	mkfile("a/0-empty", 0, 10);
	/* hidden: files, directories, inside classes */
	mkfile(".hidden", 5, 0);
	mkfile(".git/objects/x", 5, 0);
	mkfile("a/.DS_Store", 5, 0);
	mkfile("a/sub/.swp", 5, 0);
	mkfile(".hiddenclass/1", 5, 0);
	struct cat_opts o = opts(false);
	struct catalog *c = open_ok(&o);
	/* classes: B=0 Z=1 a=2 a-b=3 a0=4 b=5 é=6 */
	static const struct expect want[] = {
		{ "B/1", 0, 17, 7 },
		{ "Z/1", 1, 18, 8 },
		{ "a-b/1", 3, 15, 5 },
		{ "a/0-empty", 2, 0, 10 },
		{ "a/1", 2, 13, 3 },
		{ "a/sub/deep", 2, 14, 4 },
		{ "a0/1", 4, 16, 6 },
		{ "b/1", 5, 11, 1 },
		{ "b/2", 5, 12, 2 },
		{ "\xc3\xa9/1", 6, 19, 9 },
	};
	cr_assert_eq(c->nclasses, 7);
	assert_catalog(c, want, sizeof(want) / sizeof(want[0]));
	cr_assert_eq(c->from_cache, false);
	cat_free(c);
}

Test(catalog, flat_directory)
{
	mkfile("x.bin", 3, 1);
	mkfile("a.bin", 4, 2);
	mkfile("B.bin", 5, 3);
	mkfile("a.bin.1", 6, 4);
	mkfile(".hidden", 7, 5);
	struct cat_opts o = opts(false);
	struct catalog *c = open_ok(&o);
	static const struct expect want[] = {
		{ "B.bin", 0, 5, 3 },
		{ "a.bin", 0, 4, 2 },
		{ "a.bin.1", 0, 6, 4 },
		{ "x.bin", 0, 3, 1 },
	};
	cr_assert_eq(c->nclasses, 0);
	assert_catalog(c, want, 4);
	cat_free(c);
}

/* The dataset root given with a trailing slash, through a symlink or with
 * "..": the same catalog, rooted at the real path. */
Test(catalog, root_is_canonical)
{
	mkfile("k/1", 8, 1);
	char alt[PATH_MAX * 2];
	snprintf(alt, sizeof(alt), "%s/../data/", data);
	struct cat_opts o = opts(false);
	o.root = alt;
	struct catalog *c = open_ok(&o);
	cr_assert_str_eq(c->root, data);
	cat_free(c);
	char link[PATH_MAX];
	snprintf(link, sizeof(link), "%s/link", base);
	cr_assert_eq(symlink(data, link), 0);
	o.root = link;
	c = open_ok(&o);
	cr_assert_str_eq(c->root, data);
	cat_free(c);
}

Test(catalog, extension_filter)
{
	mkfile("a/x.jpg", 3, 1);
	mkfile("a/y.PNG", 4, 2);
	mkfile("a/z.txt", 5, 3);
	mkfile("a/jpg", 6, 4);
	mkfile("b/w.jpeg", 7, 5);
	mkfile("c/v.png", 8, 6);
	struct cat_opts o = opts(false);
	o.params.extensions = "jpg, png";
	struct catalog *c = open_ok(&o);
	static const struct expect want[] = {
		{ "a/x.jpg", 0, 3, 1 },
		{ "a/y.PNG", 0, 4, 2 },
		{ "c/v.png", 1, 8, 6 },
	};
	assert_catalog(c, want, 3);
	cat_free(c);
}

/* ---- errors ------------------------------------------------------------------ */

Test(catalog, file_beside_class_directories)
{
	mkfile("cat/1", 3, 1);
	mkfile("dog/1", 3, 2);
	mkfile("stray.txt", 3, 3);
	struct cat_opts o = opts(false);
	cr_assert_eq(open_fails(&o), SEER_EDATASET);
	assert_has(err, "stray.txt");
	assert_has(err, "class");
}

Test(catalog, empty_dataset)
{
	mkfile(".only-hidden", 3, 1);
	char dir[PATH_MAX * 2];
	snprintf(dir, sizeof(dir), "%s/emptyclass", data);
	cr_assert_eq(mkdir(dir, 0755), 0);
	struct cat_opts o = opts(true);
	cr_assert_eq(open_fails(&o), SEER_EDATASET);
	assert_has(err, data);
	assert_has(err, "no");
}

Test(catalog, missing_dataset)
{
	char missing[PATH_MAX + 16];
	snprintf(missing, sizeof(missing), "%s/nope", data);
	struct cat_opts o = opts(true);
	o.root = missing;
	cr_assert_eq(open_fails(&o), SEER_EDATASET);
	assert_has(err, missing);
	assert_has(err, strerror(ENOENT));
	o.root = NULL;
	cr_assert_eq(open_fails(&o), SEER_EDATASET);
	assert_has(err, "dataset.path");
}

Test(catalog, dataset_is_a_file)
{
	mkfile("f", 3, 1);
	char f[PATH_MAX + 8];
	snprintf(f, sizeof(f), "%s/f", data);
	struct cat_opts o = opts(false);
	o.root = f;
	cr_assert_eq(open_fails(&o), SEER_EDATASET);
	assert_has(err, f);
	assert_has(err, "not a directory");
}

Test(catalog, unknown_format)
{
	mkfile("a/1", 3, 1);
	struct cat_opts o = opts(false);
	o.format = "parquet";
	cr_assert_eq(open_fails(&o), SEER_ECONFIG);
	assert_has(err, "parquet");
	assert_has(err, "files");
}

/* ---- the cache file -------------------------------------------------------------- */

static void make_tree(void)
{
	mkfile("cat/1", 100, 1);
	mkfile("cat/2", 200, 2);
	mkfile("dog/1", 300, 3);
	mkfile("dog/puppies/1", 400, 4);
}

static char *cache_file(void)
{
	struct cat_opts o = opts(true);
	return cat_cache_path(&o);
}

static void assert_same_catalog(const struct catalog *a, const struct catalog *b)
{
	cr_assert_str_eq(a->root, b->root);
	cr_assert_eq(a->fmt, b->fmt);
	cr_assert_eq(a->nfiles, b->nfiles);
	cr_assert_eq(a->nsamples, b->nsamples);
	cr_assert_eq(a->nclasses, b->nclasses);
	cr_assert_eq(a->ntypes, b->ntypes);
	cr_assert_eq(a->hash, b->hash);
	cr_assert_eq(a->params_hash, b->params_hash);
	cr_assert_eq(a->total_bytes, b->total_bytes);
	cr_assert_eq(a->max_len, b->max_len);
	for (uint32_t i = 0; i < a->nfiles; i++) {
		cr_assert_str_eq(cat_path(a, i), cat_path(b, i));
		cr_assert_eq(a->files[i].size, b->files[i].size);
	}
	cr_assert_arr_eq(a->samples, b->samples, a->nsamples * sizeof(*a->samples));
	cr_assert_arr_eq(a->types, b->types, a->ntypes * sizeof(*a->types));
}

Test(catalog, cache_is_reused)
{
	make_tree();
	age_tree();
	struct cat_opts o = opts(true);
	struct catalog *c1 = open_ok(&o);
	cr_assert_eq(c1->from_cache, false);
	char *cf = cache_file();
	cr_assert_eq(access(cf, R_OK), 0, "no cache file %s", cf);
	struct catalog *c2 = open_ok(&o);
	cr_assert_eq(c2->from_cache, true, "second open rescanned");
	assert_same_catalog(c1, c2);
	static const struct expect want[] = {
		{ "cat/1", 0, 100, 1 }, { "cat/2", 0, 200, 2 },
		{ "dog/1", 1, 300, 3 }, { "dog/puppies/1", 1, 400, 4 },
	};
	assert_catalog(c2, want, 4);
	/* rebuild ignores a good cache */
	o.rebuild = true;
	struct catalog *c3 = open_ok(&o);
	cr_assert_eq(c3->from_cache, false);
	assert_same_catalog(c1, c3);
	/* other parameters: another cache file, not this one */
	o.rebuild = false;
	o.params.extensions = "bin";
	char *cf2 = cat_cache_path(&o);
	cr_assert_str_neq(cf, cf2);
	mkfile("cat/3.bin", 7, 9);
	struct catalog *c4 = open_ok(&o);
	cr_assert_eq(c4->from_cache, false);
	cr_assert_eq(c4->nsamples, 1);
	cat_free(c4);
	free(cf2);
	free(cf);
	cat_free(c1);
	cat_free(c2);
	cat_free(c3);
}

/* Any change of the tree's directories (a file added or removed, in a class
 * or deeper, a class added) makes the next open rescan. */
Test(catalog, cache_invalidated_by_changes)
{
	make_tree();
	age_tree();
	struct cat_opts o = opts(true);
	struct catalog *c = open_ok(&o);
	cr_assert_eq(c->nsamples, 4);
	cat_free(c);

	static const struct {
		const char *add, *remove;
		uint64_t nsamples;
	} steps[] = {
		{ "cat/0", NULL, 5 },
		{ NULL, "cat/2", 4 },
		{ "dog/puppies/2", NULL, 5 },
		{ "dog/puppies/kittens/1", NULL, 6 },
		{ "emu/1", NULL, 7 },
		{ NULL, "dog/puppies/1", 6 },
	};
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		settle();
		if (steps[i].add)
			mkfile(steps[i].add, 10 + i, (unsigned)i);
		if (steps[i].remove)
			rmfile(steps[i].remove);
		age_tree();
		c = open_ok(&o);
		cr_assert_eq(c->from_cache, false, "step %zu: stale cache used", i);
		cr_assert_eq(c->nsamples, steps[i].nsamples, "step %zu", i);
		cat_free(c);
		c = open_ok(&o);
		cr_assert_eq(c->from_cache, true, "step %zu: the rescan was not saved", i);
		cr_assert_eq(c->nsamples, steps[i].nsamples);
		cat_free(c);
	}
	/* the new class shifted nothing before it and got the next label */
	c = open_ok(&o);
	cr_assert_eq(c->nclasses, 3);
	cr_assert_str_eq(cat_path(c, c->nfiles - 1), "emu/1");
	cr_assert_eq(c->samples[c->nsamples - 1].label, 2);
	cat_free(c);
}

/* A directory changed within the file system's timestamp granularity of the
 * scan keeps its mtime (1 s on some parallel file systems; a clock tick on
 * kernels without fine-grained timestamps): simulated here by putting the
 * old mtime back. A cache must not be trusted for directories whose mtime
 * was that close to the scan (git's "racy clean" problem). */
Test(catalog, racy_mtime)
{
	make_tree();
	struct cat_opts o = opts(true);
	struct catalog *c = open_ok(&o);
	char dir[PATH_MAX + 8];
	snprintf(dir, sizeof(dir), "%s/cat", data);
	struct stat st;
	cr_assert_eq(stat(dir, &st), 0);
	mkfile("cat/3", 5, 5);
	struct timespec ts[2] = { st.st_atim, st.st_mtim };
	cr_assert_eq(utimensat(AT_FDCWD, dir, ts, 0), 0);
	cat_free(c);
	c = open_ok(&o);
	cr_assert_eq(c->from_cache, false, "a change in the scan's last tick went unseen");
	cr_assert_eq(c->nsamples, 5);
	cat_free(c);
}

static void *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "%s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	void *buf = malloc((size_t)n + 1);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void spit(const char *path, const void *buf, size_t len)
{
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(buf, 1, len, f), len);
	fclose(f);
}

/* Put a valid checksum on an image whose bytes were changed. */
static void fix_checksum(uint8_t *img, size_t len)
{
	if (len < 8)
		return;
	uint64_t sum = XXH64(img, len - 8, 0);
	memcpy(img + len - 8, &sum, 8);
}

enum damage { FLIP_MIDDLE, FLIP_HEADER, FLIP_CHECKSUM, TRUNCATE, EXTEND, EMPTY, GARBAGE,
	      FORGED_LENGTH, FORGED_PATH };

static void damage_cache(const char *cf, enum damage how, const struct catalog *c)
{
	size_t len;
	uint8_t *img = slurp(cf, &len);
	size_t hdr = 88;
	size_t samples_at = hdr + c->nfiles * sizeof(struct cat_file);
	switch (how) {
	case FLIP_MIDDLE:
		img[len / 2] ^= 0x10;
		break;
	case FLIP_HEADER:
		img[40] ^= 0x01; /* a count */
		break;
	case FLIP_CHECKSUM:
		img[len - 1] ^= 0x80;
		break;
	case TRUNCATE:
		len -= 9;
		break;
	case EXTEND:
		img = realloc(img, len + 8);
		memset(img + len, 0, 8);
		len += 8;
		break;
	case EMPTY:
		len = 0;
		break;
	case GARBAGE:
		for (size_t i = 0; i < len; i++)
			img[i] = (uint8_t)(i * 151 + 7);
		break;
	case FORGED_LENGTH: {
		/* a sample length changed and the checksum made to match: the
		 * content hash still catches it */
		uint64_t l;
		size_t at = samples_at + offsetof(struct cat_sample, length);
		memcpy(&l, img + at, 8);
		l += 1;
		memcpy(img + at, &l, 8);
		fix_checksum(img, len);
		break;
	}
	case FORGED_PATH: {
		/* a file path changed ("cat/1" -> "cat/9"), checksum fixed */
		uint8_t *p = memmem(img, len, "cat/1", 6);
		cr_assert_not_null(p);
		p[4] = '9';
		fix_checksum(img, len);
		break;
	}
	}
	spit(cf, img, len);
	free(img);
}

Test(catalog, damaged_cache_is_rebuilt)
{
	make_tree();
	age_tree();
	struct cat_opts o = opts(true);
	struct catalog *good = open_ok(&o);
	char *cf = cache_file();
	static const enum damage all[] = { FLIP_MIDDLE, FLIP_HEADER, FLIP_CHECKSUM, TRUNCATE,
					   EXTEND, EMPTY, GARBAGE, FORGED_LENGTH, FORGED_PATH };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		damage_cache(cf, all[i], good);
		struct catalog *c = open_ok(&o);
		cr_assert_eq(c->from_cache, false, "damage %zu: the damaged cache was trusted", i);
		assert_same_catalog(good, c);
		cat_free(c);
		/* and the rebuilt catalog was saved again */
		c = open_ok(&o);
		cr_assert_eq(c->from_cache, true, "damage %zu: cache not rewritten", i);
		assert_same_catalog(good, c);
		cat_free(c);
	}
	free(cf);
	cat_free(good);
}

/* ---- cat_deserialize on hostile bytes ------------------------------------------- */

static void *serialize(const struct catalog *c, size_t *len)
{
	void *img = NULL;
	cr_assert_eq(cat_serialize(c, &img, len), 0);
	return img;
}

/* An accepted image must describe a catalog every reader can walk. */
static void assert_consistent(const struct catalog *c)
{
	cr_assert_not_null(c->root);
	cr_assert_gt(c->nsamples, 0);
	for (uint32_t i = 0; i < c->nfiles; i++) {
		cr_assert_lt(c->files[i].path_off, c->strpool_len);
		cr_assert_lt(strnlen(cat_path(c, i), c->strpool_len - c->files[i].path_off),
			     c->strpool_len - c->files[i].path_off);
	}
	for (uint64_t i = 0; i < c->nsamples; i++) {
		cr_assert_lt(c->samples[i].file, c->nfiles);
		cr_assert_lt(c->samples[i].type, c->ntypes);
	}
	for (uint32_t i = 0; i < c->ndirs; i++)
		cr_assert_lt(c->dirs[i].path_off, c->strpool_len);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Feed one buffer, copied to an exact-size allocation so that ASan sees
 * any read beyond it. Returns whether it was accepted. */
static bool feed(const uint8_t *buf, size_t len)
{
	uint8_t *copy = malloc(len ? len : 1);
	memcpy(copy, buf, len);
	struct catalog *c = NULL;
	char e[256];
	int rc = cat_deserialize(copy, len, &c, e, sizeof(e));
	free(copy);
	if (rc != 0) {
		cr_assert_null(c);
		cr_assert_eq(rc, SEER_EDATASET, "rc %d", rc);
		cr_assert_gt(strlen(e), 0, "rejected without a reason");
		return false;
	}
	cr_assert_not_null(c);
	assert_consistent(c);
	cat_free(c);
	return true;
}

Test(catalog, deserialize_round_trip_and_every_flip)
{
	make_tree();
	struct cat_opts o = opts(false);
	struct catalog *c = open_ok(&o);
	size_t len;
	uint8_t *img = serialize(c, &len);
	struct catalog *back = NULL;
	cr_assert_eq(cat_deserialize(img, len, &back, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(back->from_cache, true);
	assert_same_catalog(c, back);
	cat_free(back);
	/* every single-bit change anywhere is rejected */
	for (size_t i = 0; i < len; i++) {
		img[i] ^= (uint8_t)(1u << (i % 8));
		cr_assert(!feed(img, len), "flip of bit %zu of byte %zu accepted", i % 8, i);
		img[i] ^= (uint8_t)(1u << (i % 8));
	}
	/* every truncation is rejected */
	for (size_t n = 0; n < len; n++)
		cr_assert(!feed(img, n), "image cut to %zu of %zu bytes accepted", n, len);
	free(img);
	cat_free(c);
}

Test(catalog, deserialize_garbage_never_crashes)
{
	uint8_t buf[4096];
	/* plain random bytes and lengths */
	for (int k = 0; k < 3000; k++) {
		size_t len = next_rand() % sizeof(buf);
		for (size_t i = 0; i < len; i++)
			buf[i] = (uint8_t)next_rand();
		feed(buf, len);
	}
	/* a plausible header (magic, version, size) with random counts and a
	 * matching checksum: gets past the first checks */
	for (int k = 0; k < 3000; k++) {
		size_t len = 96 + next_rand() % 2048;
		for (size_t i = 0; i < len; i++)
			buf[i] = (uint8_t)next_rand();
		memcpy(buf, "SEERCAT", 8);
		uint32_t ver = 1, hs = 88;
		memcpy(buf + 8, &ver, 4);
		memcpy(buf + 12, &hs, 4);
		/* small counts in the header most of the time */
		for (size_t off = 32; off < 72; off += 4) {
			uint32_t v = next_rand() % 4 ? (uint32_t)(next_rand() % 8) : (uint32_t)next_rand();
			memcpy(buf + off, &v, 4);
		}
		memcpy(buf + 72, "files", 6);
		fix_checksum(buf, len);
		feed(buf, len);
	}
}

/* Mutations of a real image with the checksum repaired each time, so the
 * structural checks behind it are what decides. */
Test(catalog, deserialize_mutations_never_crash)
{
	make_tree();
	struct cat_opts o = opts(false);
	struct catalog *c = open_ok(&o);
	size_t len;
	uint8_t *img = serialize(c, &len);
	uint8_t *m = malloc(len);
	int accepted = 0;
	for (int k = 0; k < 20000; k++) {
		memcpy(m, img, len);
		int nmut = 1 + (int)(next_rand() % 4);
		for (int j = 0; j < nmut; j++) {
			size_t at = next_rand() % (len - 8);
			switch (next_rand() % 4) {
			case 0:
				m[at] ^= (uint8_t)(1u << (next_rand() % 8));
				break;
			case 1:
				m[at] = (uint8_t)next_rand();
				break;
			case 2: /* a 32-bit field to an extreme */
				at &= ~(size_t)3;
				if (at + 4 <= len - 8) {
					uint32_t v = next_rand() % 2 ? UINT32_MAX : (uint32_t)next_rand() % 64;
					memcpy(m + at, &v, 4);
				}
				break;
			case 3: /* a 64-bit field to an extreme */
				at &= ~(size_t)7;
				if (at + 8 <= len - 8) {
					uint64_t v = next_rand() % 2 ? UINT64_MAX : next_rand() % 64;
					memcpy(m + at, &v, 8);
				}
				break;
			}
		}
		fix_checksum(m, len);
		accepted += feed(m, len);
	}
	cr_log_info("%d of 20000 repaired mutations accepted (fields outside the content hash)",
		    accepted);
	free(m);
	free(img);
	cat_free(c);
}

/* ---- files that change after cataloguing --------------------------------------- */

Test(catalog, shrunk_file_is_a_read_error)
{
	mkfile("a/1", 1000, 1);
	mkfile("a/2", 1000, 2);
	mkfile("a/3", 1000, 3);
	struct cat_opts o = opts(false);
	struct catalog *c = open_ok(&o);
	struct cat_reader rd;
	cat_reader_init(&rd, c);
	uint8_t *buf = malloc(1000);

	/* shrinks before the reader opened it */
	truncate_file("a/1", 500);
	int rc = cat_read(&rd, 0, buf);
	cr_assert_neq(rc, 0, "a shrunk file was read as a sample");
	assert_has(rd.err, "a/1");
	assert_has(rd.err, data);

	/* shrinks while the reader holds it open */
	cr_assert_eq(cat_read(&rd, 1, buf), 0, "%s", rd.err);
	truncate_file("a/2", 10);
	memset(buf, 0, 1000);
	rc = cat_read(&rd, 1, buf);
	cr_assert_neq(rc, 0, "a short sample was delivered");
	assert_has(rd.err, "a/2");

	/* grows: the catalogued length no longer describes it */
	mkfile("a/3", 2000, 3);
	rc = cat_read(&rd, 2, buf);
	cr_assert_neq(rc, 0, "a changed file was read as its old sample");
	assert_has(rd.err, "a/3");

	/* gone */
	rmfile("a/1");
	rc = cat_read(&rd, 0, buf);
	cr_assert_neq(rc, 0);
	assert_has(rd.err, "a/1");

	cat_reader_fini(&rd);
	free(buf);
	cat_free(c);
}

/* More files than the reader keeps open: reads stay right while fds are
 * recycled. */
Test(catalog, reader_fd_cache)
{
	enum { N = CAT_FD_CACHE * 3 + 1 };
	struct expect want[N];
	static char names[N][16];
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "f%03d", i);
		mkfile(names[i], (size_t)(i * 3 + 1), (unsigned)i);
		want[i] = (struct expect){ names[i], 0, (size_t)(i * 3 + 1), (unsigned)i };
	}
	struct cat_opts o = opts(false);
	struct catalog *c = open_ok(&o);
	for (int pass = 0; pass < 3; pass++)
		assert_catalog(c, want, N);
	struct cat_reader rd;
	cat_reader_init(&rd, c);
	uint8_t buf[256];
	for (int k = 0; k < 500; k++) {
		uint64_t id = next_rand() % N;
		cr_assert_eq(cat_read(&rd, id, buf), 0, "%s", rd.err);
		for (size_t i = 0; i < want[id].len; i++)
			cr_assert_eq(buf[i], content_byte(want[id].seed, i));
	}
	cat_reader_fini(&rd);
	cat_free(c);
}
