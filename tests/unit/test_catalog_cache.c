/* catalog cache file: reuse, invalidation by changes, racy mtimes, damaged
 * images rebuilt, and catalog_deserialize on hostile input (every bit flip,
 * garbage, mutations); files rewritten in place under the same names found
 * by the start-up check and scanned again (the others reused). */
#define _GNU_SOURCE
#include "catalog_fixture.h"

/* ---- the cache file -------------------------------------------------------------- */

TestSuite(catalog, .init = setup, .fini = teardown, .timeout = 60);

static void make_tree(void)
{
	mkfile("cat/1", 100, 1);
	mkfile("cat/2", 200, 2);
	mkfile("dog/1", 300, 3);
	mkfile("dog/puppies/1", 400, 4);
}

static char *cache_file(void)
{
	struct catalog_opts o = opts(true);
	return catalog_cache_path(&o);
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
		cr_assert_str_eq(catalog_path(a, i), catalog_path(b, i));
		cr_assert_eq(a->files[i].size, b->files[i].size);
	}
	cr_assert_arr_eq(a->samples, b->samples, a->nsamples * sizeof(*a->samples));
	cr_assert_arr_eq(a->types, b->types, a->ntypes * sizeof(*a->types));
}

Test(catalog, cache_is_reused)
{
	make_tree();
	age_tree();
	struct catalog_opts o = opts(true);
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
	o.params.allow_empty_classes = true; /* dog has no *.bin: a class with no sample */
	char *cf2 = catalog_cache_path(&o);
	cr_assert_str_neq(cf, cf2);
	mkfile("cat/3.bin", 7, 9);
	struct catalog *c4 = open_ok(&o);
	cr_assert_eq(c4->from_cache, false);
	cr_assert_eq(c4->nsamples, 1);
	catalog_free(c4);
	free(cf2);
	free(cf);
	catalog_free(c1);
	catalog_free(c2);
	catalog_free(c3);
}

/* Any change of the tree's directories (a file added or removed, in a class
 * or deeper, a class added) makes the next open rescan. */
Test(catalog, cache_invalidated_by_changes)
{
	make_tree();
	age_tree();
	struct catalog_opts o = opts(true);
	struct catalog *c = open_ok(&o);
	cr_assert_eq(c->nsamples, 4);
	catalog_free(c);

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
		catalog_free(c);
		c = open_ok(&o);
		cr_assert_eq(c->from_cache, true, "step %zu: the rescan was not saved", i);
		cr_assert_eq(c->nsamples, steps[i].nsamples);
		catalog_free(c);
	}
	/* the new class shifted nothing before it and got the next label */
	c = open_ok(&o);
	cr_assert_eq(c->nclasses, 3);
	cr_assert_str_eq(catalog_path(c, c->nfiles - 1), "emu/1");
	cr_assert_eq(c->samples[c->nsamples - 1].label, 2);
	catalog_free(c);
}

/* A directory changed within the file system's timestamp granularity of the
 * scan keeps its mtime (1 s on some parallel file systems; a clock tick on
 * kernels without fine-grained timestamps): simulated here by putting the
 * old mtime back. A cache must not be trusted for directories whose mtime
 * was that close to the scan (git's "racy clean" problem). */
Test(catalog, racy_mtime)
{
	make_tree();
	struct catalog_opts o = opts(true);
	struct catalog *c = open_ok(&o);
	char dir[PATH_MAX + 8];
	snprintf(dir, sizeof(dir), "%s/cat", data);
	struct stat st;
	cr_assert_eq(stat(dir, &st), 0);
	mkfile("cat/3", 5, 5);
	struct timespec ts[2] = { st.st_atim, st.st_mtim };
	cr_assert_eq(utimensat(AT_FDCWD, dir, ts, 0), 0);
	catalog_free(c);
	c = open_ok(&o);
	cr_assert_eq(c->from_cache, false, "a change in the scan's last tick went unseen");
	cr_assert_eq(c->nsamples, 5);
	catalog_free(c);
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
	size_t samples_at = hdr + c->nfiles * sizeof(struct catalog_file);
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
		size_t at = samples_at + offsetof(struct catalog_sample, length);
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
	struct catalog_opts o = opts(true);
	struct catalog *good = open_ok(&o);
	char *cf = cache_file();
	static const enum damage all[] = { FLIP_MIDDLE, FLIP_HEADER, FLIP_CHECKSUM, TRUNCATE,
					   EXTEND, EMPTY, GARBAGE, FORGED_LENGTH, FORGED_PATH };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		damage_cache(cf, all[i], good);
		struct catalog *c = open_ok(&o);
		cr_assert_eq(c->from_cache, false, "damage %zu: the damaged cache was trusted", i);
		assert_same_catalog(good, c);
		catalog_free(c);
		/* and the rebuilt catalog was saved again */
		c = open_ok(&o);
		cr_assert_eq(c->from_cache, true, "damage %zu: cache not rewritten", i);
		assert_same_catalog(good, c);
		catalog_free(c);
	}
	free(cf);
	catalog_free(good);
}

/* ---- catalog_deserialize on hostile bytes ------------------------------------------- */

static void *serialize(const struct catalog *c, size_t *len)
{
	void *img = NULL;
	cr_assert_eq(catalog_serialize(c, &img, len), 0);
	return img;
}

/* An accepted image must describe a catalog every reader can walk. */
static void assert_consistent(const struct catalog *c)
{
	cr_assert_not_null(c->root);
	cr_assert_gt(c->nsamples, 0);
	for (uint32_t i = 0; i < c->nfiles; i++) {
		cr_assert_lt(c->files[i].path_off, c->strpool_len);
		cr_assert_lt(strnlen(catalog_path(c, i), c->strpool_len - c->files[i].path_off),
			     c->strpool_len - c->files[i].path_off);
	}
	for (uint64_t i = 0; i < c->nsamples; i++) {
		cr_assert_lt(c->samples[i].file, c->nfiles);
		cr_assert_lt(c->samples[i].type, c->ntypes);
	}
	for (uint32_t i = 0; i < c->ndirs; i++)
		cr_assert_lt(c->dirs[i].path_off, c->strpool_len);
}


/* Feed one buffer, copied to an exact-size allocation so that ASan sees
 * any read beyond it. Returns whether it was accepted. */
static bool feed(const uint8_t *buf, size_t len)
{
	uint8_t *copy = malloc(len ? len : 1);
	memcpy(copy, buf, len);
	struct catalog *c = NULL;
	char e[256];
	int rc = catalog_deserialize(copy, len, &c, e, sizeof(e));
	free(copy);
	if (rc != 0) {
		cr_assert_null(c);
		cr_assert_eq(rc, SEER_EDATASET, "rc %d", rc);
		cr_assert_gt(strlen(e), 0, "rejected without a reason");
		return false;
	}
	cr_assert_not_null(c);
	assert_consistent(c);
	catalog_free(c);
	return true;
}

Test(catalog, deserialize_round_trip_and_every_flip)
{
	make_tree();
	struct catalog_opts o = opts(false);
	struct catalog *c = open_ok(&o);
	size_t len;
	uint8_t *img = serialize(c, &len);
	struct catalog *back = NULL;
	cr_assert_eq(catalog_deserialize(img, len, &back, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(back->from_cache, true);
	assert_same_catalog(c, back);
	catalog_free(back);
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
	catalog_free(c);
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
	struct catalog_opts o = opts(false);
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
	catalog_free(c);
}

/* ---- image sizes (transform.cache = decoded plans with them) -------------------- */

#include <turbojpeg.h>

/* data/<rel>: a w x h JPEG, with `pad` bytes of APP15 segments before the
 * frame header (so the header lies past the first 64 KiB when pad is large). */
static void mkjpeg(const char *rel, int w, int h, size_t pad)
{
	tjhandle tj = tjInitCompress();
	uint8_t *px = calloc((size_t)w * h * 3, 1), *jpg = NULL;
	unsigned long n = 0;
	cr_assert_eq(tjCompress2(tj, px, w, 0, h, TJPF_RGB, &jpg, &n, TJSAMP_420, 90, 0), 0);
	size_t segs = (pad + 65532) / 65533, total = n + segs * 65537;
	uint8_t *out = malloc(total), *q = out;
	memcpy(q, jpg, 2); /* SOI */
	q += 2;
	for (size_t i = 0; i < segs; i++) {
		*q++ = 0xff, *q++ = 0xef, *q++ = 0xff, *q++ = 0xff; /* APP15, length 65535 */
		memset(q, 'x', 65533);
		q += 65533;
	}
	memcpy(q, jpg + 2, n - 2);
	q += n - 2;
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", data, rel);
	char *slash = strrchr(path, '/');
	*slash = '\0';
	cr_assert_eq(mkdir_p(path, 0755), 0);
	*slash = '/';
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(out, 1, (size_t)(q - out), f), (size_t)(q - out));
	fclose(f);
	free(out);
	free(px);
	tjFree(jpg);
	tjDestroy(tj);
}

Test(catalog, image_sizes_probed_saved_and_reloaded)
{
	mkjpeg("a/small.jpg", 40, 30, 0);
	mkjpeg("a/exif.jpg", 17, 23, 150000); /* header after 150 KB of APP segments */
	mkfile("b/notes.txt", 100, 3);
	mkjpeg("b/wide.jpg", 640, 8, 0);
	age_tree();
	struct catalog_opts o = opts(true);
	/* first without sizes: none recorded */
	struct catalog *plain = open_ok(&o);
	cr_assert_null(plain->images);
	catalog_free(plain);
	/* asked for: the cached catalog gains them and is saved again */
	o.image_sizes = true;
	struct catalog *c = open_ok(&o);
	cr_assert_eq(c->from_cache, true);
	cr_assert_not_null(c->images);
	static const struct { const char *path; uint32_t w, h; } want[] = {
		{ "a/exif.jpg", 17, 23 }, { "a/small.jpg", 40, 30 }, { "b/notes.txt", 0, 0 },
		{ "b/wide.jpg", 640, 8 },
	};
	cr_assert_eq(c->nsamples, 4);
	for (int i = 0; i < 4; i++) {
		cr_assert_str_eq(catalog_path(c, c->samples[i].file), want[i].path);
		cr_assert_eq(c->images[i].width, want[i].w, "%s: width %u", want[i].path,
			     c->images[i].width);
		cr_assert_eq(c->images[i].height, want[i].h, "%s: height %u", want[i].path,
			     c->images[i].height);
	}
	/* the saved file carries them: a plain open now gets them too */
	o.image_sizes = false;
	struct catalog *again = open_ok(&o);
	cr_assert_eq(again->from_cache, true);
	cr_assert_not_null(again->images);
	cr_assert_arr_eq(again->images, c->images, 4 * sizeof(*c->images));
	/* and the image round-trips through catalog_serialize, every flip rejected */
	size_t len;
	uint8_t *img = serialize(again, &len);
	for (size_t i = 0; i < len; i += 7) {
		img[i] ^= 0x10;
		cr_assert(!feed(img, len), "flip at byte %zu accepted", i);
		img[i] ^= 0x10;
	}
	cr_assert(feed(img, len));
	free(img);
	catalog_free(again);
	catalog_free(c);
}

/* ---- files rewritten in place (issue 32): the start-up check of every file ---- */

/* The decision alone: the recorded entry against a stat now. */
Test(catalog, file_state_decision)
{
	const int64_t s = 1000 * 1000000000ll; /* the scan's start */
	const struct catalog_file f = { .size = 100, .mtime_ns = s - 10000000000ll,
					.ctime_ns = s - 9000000000ll };
	static const struct {
		int64_t dsize, dmtime, dctime;
		enum catalog_file_state want;
	} cases[] = {
		{ 0, 0, 0, CAT_FILE_SAME },
		{ 1, 0, 0, CAT_FILE_SIZE },
		{ -100, 0, 0, CAT_FILE_SIZE },           /* truncated to nothing */
		{ 0, 1, 1, CAT_FILE_MTIME },             /* rewritten, same size, 1 ns later */
		{ 0, -5000000000ll, 7, CAT_FILE_MTIME }, /* an mtime set back by a tool */
		{ 0, 0, 1, CAT_FILE_CTIME },             /* mtime put back after a rewrite */
		{ 5, 1, 1, CAT_FILE_SIZE },              /* the size is named first */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_assert_eq(catalog_check_file_state(&f, (uint64_t)((int64_t)f.size + cases[i].dsize),
						f.mtime_ns + cases[i].dmtime,
						f.ctime_ns + cases[i].dctime, s),
			     cases[i].want, "case %zu", i);
	/* racy: recorded within CAT_RACY_NS of the scan (or after it) */
	struct catalog_file r = f;
	r.mtime_ns = s - CAT_RACY_NS;
	cr_assert_eq(catalog_check_file_state(&r, r.size, r.mtime_ns, r.ctime_ns, s), CAT_FILE_RACY);
	r.mtime_ns = s + 5;
	cr_assert_eq(catalog_check_file_state(&r, r.size, r.mtime_ns, r.ctime_ns, s), CAT_FILE_RACY);
	r.mtime_ns = s - CAT_RACY_NS - 1;
	cr_assert_eq(catalog_check_file_state(&r, r.size, r.mtime_ns, r.ctime_ns, s), CAT_FILE_SAME);
	/* a change is a change, racy or not */
	r.mtime_ns = s - 1;
	cr_assert_eq(catalog_check_file_state(&r, r.size + 1, r.mtime_ns, r.ctime_ns, s), CAT_FILE_SIZE);
}

/* data/<rel>'s mtime a minute in the past, as age_tree. */
static void age_file(const char *rel)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", data, rel);
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	now.tv_sec -= 60;
	struct timespec ts[2] = { now, now };
	cr_assert_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
}

/* Files truncated and rewritten under the same names (DLIO's generator):
 * the directories keep their mtimes, the next open scans the changed files
 * again, reuses the others, and gets the catalog a full scan gets. */
Test(catalog, rewritten_files_scanned_again)
{
	make_tree();
	age_tree();
	struct catalog_opts o = opts(true);
	struct catalog *c = open_ok(&o);
	cr_assert_eq(c->files_scanned, 4);
	catalog_free(c);
	char dir[PATH_MAX + 8];
	snprintf(dir, sizeof(dir), "%s/cat", data);
	struct stat before, after;
	cr_assert_eq(stat(dir, &before), 0);
	mkfile("cat/2", 200, 7); /* other bytes, same size */
	mkfile("dog/1", 333, 8); /* another size */
	cr_assert_eq(stat(dir, &after), 0);
	cr_assert(before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
		  before.st_mtim.tv_nsec == after.st_mtim.tv_nsec,
		  "a rewrite in place must leave the directory alone");
	c = open_ok(&o);
	cr_assert_eq(c->from_cache, false, "the stale catalog was used");
	cr_assert_eq(c->files_scanned, 2, "%u files scanned, 2 changed", c->files_scanned);
	static const struct expect want[] = {
		{ "cat/1", 0, 100, 1 }, { "cat/2", 0, 200, 7 },
		{ "dog/1", 1, 333, 8 }, { "dog/puppies/1", 1, 400, 4 },
	};
	assert_catalog(c, want, 4);
	/* the same catalog (hash included) as a full scan */
	o.rebuild = true;
	struct catalog *full = open_ok(&o);
	cr_assert_eq(full->files_scanned, 4);
	assert_same_catalog(c, full);
	catalog_free(full);
	catalog_free(c);
	/* the rescan was saved: once the rewritten files are older than the
	 * racy window, the cache is used as is */
	o.rebuild = false;
	age_file("cat/2");
	age_file("dog/1");
	c = open_ok(&o);
	cr_assert_eq(c->files_scanned, 2, "the aged files' mtimes changed");
	catalog_free(c);
	c = open_ok(&o);
	cr_assert_eq(c->from_cache, true, "the rescan was not saved");
	assert_catalog(c, want, 4);
	catalog_free(c);
}

/* Same size, and the old mtime put back after the rewrite (a copy that
 * keeps times, a clock too coarse to tell): the ctime tells. */
Test(catalog, rewrite_with_mtime_put_back)
{
	make_tree();
	age_tree();
	struct catalog_opts o = opts(true);
	struct catalog *c = open_ok(&o);
	catalog_free(c);
	char path[PATH_MAX + 8];
	snprintf(path, sizeof(path), "%s/cat/1", data);
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	mkfile("cat/1", 100, 9);
	struct timespec ts[2] = { st.st_atim, st.st_mtim };
	cr_assert_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
	c = open_ok(&o);
	cr_assert_eq(c->from_cache, false, "a rewrite with its mtime put back went unseen");
	cr_assert_eq(c->files_scanned, 1);
	static const struct expect want[] = {
		{ "cat/1", 0, 100, 9 }, { "cat/2", 0, 200, 2 },
		{ "dog/1", 1, 300, 3 }, { "dog/puppies/1", 1, 400, 4 },
	};
	assert_catalog(c, want, 4);
	catalog_free(c);
}

/* A file written within CAT_RACY_NS of the scan may change again unseen
 * within its timestamp's granularity: it is scanned again at the next open,
 * the others not. */
Test(catalog, racy_file)
{
	make_tree();
	age_tree();
	mkfile("dog/1", 300, 3); /* just written */
	struct catalog_opts o = opts(true);
	struct catalog *c = open_ok(&o);
	catalog_free(c);
	c = open_ok(&o);
	cr_assert_eq(c->from_cache, false);
	cr_assert_eq(c->files_scanned, 1, "%u files scanned, 1 racy", c->files_scanned);
	catalog_free(c);
	age_file("dog/1");
	c = open_ok(&o);
	catalog_free(c);
	c = open_ok(&o);
	cr_assert_eq(c->from_cache, true);
	catalog_free(c);
}

/* A cache file of version 4 (no ctimes) is refused naming why, and rebuilt. */
Test(catalog, old_version_cache_rebuilt)
{
	make_tree();
	age_tree();
	struct catalog_opts o = opts(true);
	struct catalog *c = open_ok(&o);
	catalog_free(c);
	char *cf = cache_file();
	size_t len;
	uint8_t *img = slurp(cf, &len);
	uint32_t v = 4;
	memcpy(img + 8, &v, sizeof(v));
	fix_checksum(img, len);
	struct catalog *back = NULL;
	cr_assert_neq(catalog_deserialize(img, len, &back, err, sizeof(err)), 0);
	assert_has(err, "version 4, written by an older seerd");
	spit(cf, img, len);
	free(img);
	c = open_ok(&o);
	cr_assert_eq(c->from_cache, false);
	catalog_free(c);
	c = open_ok(&o);
	cr_assert_eq(c->from_cache, true, "the rebuilt catalog was not saved");
	catalog_free(c);
	free(cf);
}

/* Image sizes: those of the files reused are kept, a rewritten image's are
 * read again. */
Test(catalog, rescan_keeps_and_renews_image_sizes)
{
	mkjpeg("a/small.jpg", 40, 30, 0);
	mkjpeg("b/wide.jpg", 640, 8, 0);
	age_tree();
	struct catalog_opts o = opts(true);
	o.image_sizes = true;
	struct catalog *c = open_ok(&o);
	cr_assert_eq(c->images[0].width, 40);
	catalog_free(c);
	mkjpeg("a/small.jpg", 50, 20, 0);
	o.image_sizes = false; /* the cached catalog's sizes stay with it */
	c = open_ok(&o);
	cr_assert_eq(c->files_scanned, 1);
	cr_assert_not_null(c->images);
	cr_assert_eq(c->images[0].width, 50);
	cr_assert_eq(c->images[0].height, 20);
	cr_assert_eq(c->images[1].width, 640);
	cr_assert_eq(c->images[1].height, 8);
	catalog_free(c);
}

/* A file rewritten under a running reader: that read fails asking for a
 * restart; the next open finds that file changed and scans it again (the
 * cache file stays: the others are reused). */
Test(catalog, rewrite_mid_job_fails_the_read)
{
	make_tree();
	age_tree();
	struct catalog_opts o = opts(true);
	struct catalog *c = open_ok(&o);
	mkfile("cat/2", 200, 6); /* same size, other bytes */
	struct catalog_reader rd;
	catalog_reader_init(&rd, c);
	uint8_t buf[200];
	cr_assert_eq(catalog_read(&rd, 1, buf), -ESTALE);
	assert_has(rd.err, "cat/2");
	assert_has(rd.err, "restart seerd to rescan");
	catalog_reader_fini(&rd);
	catalog_free(c);
	c = open_ok(&o);
	cr_assert_eq(c->files_scanned, 1, "%u files scanned, 1 rewritten", c->files_scanned);
	static const struct expect want[] = {
		{ "cat/1", 0, 100, 1 }, { "cat/2", 0, 200, 6 },
		{ "dog/1", 1, 300, 3 }, { "dog/puppies/1", 1, 400, 4 },
	};
	assert_catalog(c, want, 4);
	catalog_free(c);
}

/* Many files, checked and rescanned by several threads: exactly the
 * rewritten ones scanned again, the catalog a full scan's. */
Test(catalog, parallel_check_many_files)
{
	char rel[64];
	for (int i = 0; i < 600; i++) {
		snprintf(rel, sizeof(rel), "c%d/%04d", i % 3, i);
		mkfile(rel, 10 + (size_t)i % 50, (unsigned)i);
	}
	age_tree();
	struct catalog_opts o = opts(true);
	o.threads = 8;
	struct catalog *c = open_ok(&o);
	cr_assert_eq(c->files_scanned, 600);
	catalog_free(c);
	static const int redo[] = { 0, 1, 299, 300, 598 };
	for (size_t k = 0; k < sizeof(redo) / sizeof(redo[0]); k++) {
		snprintf(rel, sizeof(rel), "c%d/%04d", redo[k] % 3, redo[k]);
		mkfile(rel, 10 + (size_t)redo[k] % 50 + k % 2, 1000 + (unsigned)k);
	}
	c = open_ok(&o);
	cr_assert_eq(c->files_scanned, 5, "%u files scanned, 5 rewritten", c->files_scanned);
	o.rebuild = true;
	struct catalog *full = open_ok(&o);
	assert_same_catalog(c, full);
	catalog_free(full);
	catalog_free(c);
}
