/* catalog: the files format on real trees in a temporary directory (ids,
 * labels, lengths, bytes), its error messages, the tree walk (symbolic links,
 * loops, depth, long paths), and reads of files that changed after
 * cataloguing. The cache file is test_catalog_cache.c. */
#define _GNU_SOURCE
#include "catalog_fixture.h"
#include "../../src/catalog/catalog_int.h"

TestSuite(catalog, .init = setup, .fini = teardown, .timeout = 60);

/* ---- layouts ------------------------------------------------------------------- */

/* Class directories sorted bytewise (uppercase before lowercase, UTF-8
 * after ASCII, "a" < "a-b" < "a0"); sample ids follow the sorted relative
 * paths ('-' < '/' < '0' puts "a-b/1" before "a/1"); nested directories
 * belong to their top-level class; hidden files are not samples (hidden
 * directories of the root are classes: hidden_directories_are_classes). */
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
	/* hidden: files, directories inside classes */
	mkfile(".hidden", 5, 0);
	mkfile("a/.DS_Store", 5, 0);
	mkfile("a/sub/.swp", 5, 0);
	mkfile("a/.git/objects/x", 5, 0);
	struct catalog_opts o = opts(false);
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
	catalog_free(c);
}

Test(catalog, flat_directory)
{
	mkfile("x.bin", 3, 1);
	mkfile("a.bin", 4, 2);
	mkfile("B.bin", 5, 3);
	mkfile("a.bin.1", 6, 4);
	mkfile(".hidden", 7, 5);
	struct catalog_opts o = opts(false);
	struct catalog *c = open_ok(&o);
	static const struct expect want[] = {
		{ "B.bin", 0, 5, 3 },
		{ "a.bin", 0, 4, 2 },
		{ "a.bin.1", 0, 6, 4 },
		{ "x.bin", 0, 3, 1 },
	};
	cr_assert_eq(c->nclasses, 0);
	assert_catalog(c, want, 4);
	catalog_free(c);
}

/* The dataset root given with a trailing slash, through a symlink or with
 * "..": the same catalog, rooted at the real path. */
Test(catalog, root_is_canonical)
{
	mkfile("k/1", 8, 1);
	char alt[PATH_MAX * 2];
	snprintf(alt, sizeof(alt), "%s/../data/", data);
	struct catalog_opts o = opts(false);
	o.root = alt;
	struct catalog *c = open_ok(&o);
	cr_assert_str_eq(c->root, data);
	catalog_free(c);
	char link[PATH_MAX];
	snprintf(link, sizeof(link), "%s/link", base);
	cr_assert_eq(symlink(data, link), 0);
	o.root = link;
	c = open_ok(&o);
	cr_assert_str_eq(c->root, data);
	catalog_free(c);
}

Test(catalog, extension_filter)
{
	mkfile("a/x.jpg", 3, 1);
	mkfile("a/y.PNG", 4, 2);
	mkfile("a/z.txt", 5, 3);
	mkfile("a/jpg", 6, 4);
	mkfile("b/w.jpeg", 7, 5);
	mkfile("b/u.png", 9, 7);
	mkfile("c/v.png", 8, 6);
	struct catalog_opts o = opts(false);
	o.params.extensions = "jpg, png";
	struct catalog *c = open_ok(&o);
	static const struct expect want[] = {
		{ "a/x.jpg", 0, 3, 1 },
		{ "a/y.PNG", 0, 4, 2 },
		{ "b/u.png", 1, 9, 7 },
		{ "c/v.png", 2, 8, 6 },
	};
	assert_catalog(c, want, 4);
	catalog_free(c);
}

/* ---- class numbering: torchvision's find_classes (issue 28) ------------------- */

static void mklink(const char *target, const char *rel);
static const char *paths_of(const struct catalog *c);

static void mkdir_in_data(const char *rel)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", data, rel);
	cr_assert_eq(mkdir_p(path, 0755), 0, "mkdir -p %s", path);
}

/* a/, b/ (empty), c/: find_classes numbers a=0 b=1 c=2 (and ImageFolder
 * refuses the tree): refused naming b and what to do; with
 * allow_empty_classes c keeps label 2 (seer once said 1). */
Test(catalog, empty_class_keeps_its_index)
{
	mkfile("a/1", 3, 1);
	mkfile("a/2", 4, 2);
	mkdir_in_data("b");
	mkfile("c/1", 5, 3);
	mkdir_in_data("d/sub"); /* only empty directories below: no sample either */
	struct catalog_opts o = opts(false);
	cr_assert_eq(open_fails(&o), SEER_EDATASET);
	assert_has(err, "2 of 4 class directories");
	assert_has(err, "'b', 'd'");
	assert_has(err, "find_classes");
	assert_has(err, "dataset.allow_empty_classes = true");
	o.params.allow_empty_classes = true;
	struct catalog *c = open_ok(&o);
	static const struct expect want[] = {
		{ "a/1", 0, 3, 1 },
		{ "a/2", 0, 4, 2 },
		{ "c/1", 2, 5, 3 },
	};
	cr_assert_eq(c->nclasses, 4);
	assert_catalog(c, want, 3);
	catalog_free(c);
}

/* A class whose files dataset.extensions all leave out is a class with no
 * sample too: refused naming it and the extensions; allowed, the next class
 * keeps find_classes' index. */
Test(catalog, class_emptied_by_extensions)
{
	mkfile("a/x.jpg", 3, 1);
	mkfile("b/w.jpeg", 7, 5);
	mkfile("b/t.txt", 7, 6);
	mkfile("c/v.png", 8, 6);
	struct catalog_opts o = opts(false);
	o.params.extensions = "jpg,png";
	cr_assert_eq(open_fails(&o), SEER_EDATASET);
	assert_has(err, "1 of 3 class directories");
	assert_has(err, "'b'");
	assert_has(err, "dataset.extensions = jpg,png");
	o.params.allow_empty_classes = true;
	struct catalog *c = open_ok(&o);
	static const struct expect want[] = { { "a/x.jpg", 0, 3, 1 }, { "c/v.png", 2, 8, 6 } };
	cr_assert_eq(c->nclasses, 3);
	assert_catalog(c, want, 2);
	catalog_free(c);
}

/* find_classes lists every directory of the root (os.scandir, is_dir()):
 * hidden ones too (".git" sorts first), links to directories too, dangling
 * links and files not. Hidden files are never samples, so a hidden
 * directory is a class with no sample. */
Test(catalog, hidden_directories_are_classes)
{
	mkfile(".git/objects/x", 5, 0);
	mkfile("a/1", 3, 1);
	mkfile("b/1", 4, 2);
	mkfile(".stray", 1, 0);
	char outside[PATH_MAX * 2];
	snprintf(outside, sizeof(outside), "%s/outside", base);
	cr_assert_eq(mkdir(outside, 0755), 0);
	snprintf(outside, sizeof(outside), "%s/outside/f", base);
	FILE *f = fopen(outside, "w");
	cr_assert_not_null(f);
	fputs("link", f);
	fclose(f);
	mklink("../outside", "linked");
	mklink("nowhere", "dangling");
	struct catalog_opts o = opts(false);
	cr_assert_eq(open_fails(&o), SEER_EDATASET);
	assert_has(err, "1 of 4 class directories");
	assert_has(err, "'.git'");
	o.params.allow_empty_classes = true;
	struct catalog *c = open_ok(&o);
	cr_assert_eq(c->nclasses, 4); /* .git=0 a=1 b=2 linked=3 */
	cr_assert_str_eq(paths_of(c), "a/1 b/1 linked/f");
	cr_assert_eq(c->samples[0].label, 1);
	cr_assert_eq(c->samples[1].label, 2);
	cr_assert_eq(c->samples[2].label, 3);
	catalog_free(c);
}

/* A cached catalog with an empty class (saved under allow_empty_classes)
 * is not taken without it: the start refuses as a scan would. */
Test(catalog, cached_empty_class_checked_again)
{
	mkfile("a/1", 3, 1);
	mkdir_in_data("b");
	mkfile("c/1", 5, 3);
	age_tree();
	struct catalog_opts o = opts(true);
	o.params.allow_empty_classes = true;
	struct catalog *c = open_ok(&o);
	catalog_free(c);
	c = open_ok(&o);
	cr_assert_eq(c->from_cache, true);
	cr_assert_eq(c->samples[1].label, 2);
	catalog_free(c);
	o.params.allow_empty_classes = false;
	cr_assert_eq(open_fails(&o), SEER_EDATASET);
	assert_has(err, "'b'");
}

/* ---- errors ------------------------------------------------------------------ */

Test(catalog, file_beside_class_directories)
{
	mkfile("cat/1", 3, 1);
	mkfile("dog/1", 3, 2);
	mkfile("stray.txt", 3, 3);
	struct catalog_opts o = opts(false);
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
	struct catalog_opts o = opts(true);
	cr_assert_eq(open_fails(&o), SEER_EDATASET);
	assert_has(err, data);
	assert_has(err, "holds no files of format files"); /* once "no files sample files" */
	assert_has(err, "dataset.format");
}

Test(catalog, missing_dataset)
{
	char missing[PATH_MAX + 16];
	snprintf(missing, sizeof(missing), "%s/nope", data);
	struct catalog_opts o = opts(true);
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
	struct catalog_opts o = opts(false);
	o.root = f;
	cr_assert_eq(open_fails(&o), SEER_EDATASET);
	assert_has(err, f);
	assert_has(err, "not a directory");
}

Test(catalog, unknown_format)
{
	mkfile("a/1", 3, 1);
	struct catalog_opts o = opts(false);
	o.format = "parquet";
	cr_assert_eq(open_fails(&o), SEER_ECONFIG);
	assert_has(err, "parquet");
	assert_has(err, "files");
}

/* ---- the tree walk: symbolic links, loops, depth, long paths --------------------- */

static void mklink(const char *target, const char *rel)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", data, rel);
	cr_assert_eq(symlink(target, path), 0, "symlink %s: %s", path, strerror(errno));
}

/* Catalogued paths, in order, joined by spaces. */
static const char *paths_of(const struct catalog *c)
{
	static char buf[4096];
	size_t used = 0;
	buf[0] = '\0';
	for (uint32_t i = 0; i < c->nfiles && used < sizeof(buf); i++)
		used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s%s", i ? " " : "",
					 catalog_path(c, i));
	return buf;
}

/* loop1/self -> ../loop1 once made the scan recurse until it ran out of
 * memory or stack: a directory already walked is not entered again. */
Test(catalog, symlink_loop)
{
	mkfile("loop1/a", 10, 1);
	mkfile("loop1/b", 20, 2);
	mklink("../loop1", "loop1/self");
	struct catalog_opts o = opts(false);
	struct catalog *c = open_ok(&o);
	cr_assert_str_eq(paths_of(c), "loop1/a loop1/b");
	cr_assert_eq(c->skipped_links, 1);
	static const struct expect want[] = { { "loop1/a", 0, 10, 1 }, { "loop1/b", 0, 20, 2 } };
	assert_catalog(c, want, 2);
	catalog_free(c);
}

/* Two loops, one of them back to the root, and a link across to the other
 * loop: once made the scan never finish. Each real file appears once. */
Test(catalog, two_loops)
{
	mkfile("l1/f", 1, 1);
	mkfile("l2/g", 2, 2);
	mkfile("l2/sub/h", 3, 3);
	mklink("../l1", "l1/self");
	mklink("../..", "l2/sub/root");
	mklink("../l1", "l2/other");
	struct catalog_opts o = opts(false);
	struct catalog *c = open_ok(&o);
	cr_assert_str_eq(paths_of(c), "l1/f l2/g l2/sub/h");
	cr_assert_eq(c->skipped_links, 3);
	catalog_free(c);
}

/* The policy: links to files are followed (each name a sample), a link to a
 * directory is followed once (the first path in name order names its files),
 * dangling links are skipped. */
Test(catalog, symlinks_followed_once)
{
	mkfile("real/x", 5, 5);
	mkfile("real/y", 6, 6);
	mkfile("other/z", 7, 7);
	mklink("real", "alias");            /* "alias" < "real": walked first */
	mklink("../real/x", "other/x_link"); /* a file under a second name */
	mklink("nowhere", "other/dangling");
	mklink("../real", "other/real_again");
	struct catalog_opts o = opts(false);
	/* "real" is a class of find_classes with its files listed under "alias" */
	o.params.allow_empty_classes = true;
	struct catalog *c = open_ok(&o);
	cr_assert_str_eq(paths_of(c), "alias/x alias/y other/x_link other/z");
	cr_assert_eq(c->skipped_links, 2, "real and other/real_again are the directory of alias");
	static const struct expect want[] = {
		{ "alias/x", 0, 5, 5 }, { "alias/y", 0, 6, 6 },
		{ "other/x_link", 1, 5, 5 }, { "other/z", 1, 7, 7 },
	};
	assert_catalog(c, want, 4);
	catalog_free(c);
}

/* A tree deeper than a recursive walk survives on a small stack. */
#define DEEP 1900 /* "d/" per level: the deepest path stays under PATH_MAX */

struct deep_run {
	int rc;
	struct catalog *c;
};

static void *open_in_thread(void *arg)
{
	struct deep_run *r = arg;
	struct catalog_opts o = opts(false);
	r->rc = catalog_open(&o, &r->c, err, sizeof(err));
	return NULL;
}

Test(catalog, deep_tree_small_stack)
{
	int fd = open(data, O_RDONLY | O_DIRECTORY);
	cr_assert_geq(fd, 0);
	for (int i = 0; i < DEEP; i++) {
		cr_assert_eq(mkdirat(fd, "d", 0755), 0, "level %d: %s", i, strerror(errno));
		int next = openat(fd, "d", O_RDONLY | O_DIRECTORY);
		cr_assert_geq(next, 0);
		close(fd);
		fd = next;
	}
	int f = openat(fd, "leaf", O_WRONLY | O_CREAT, 0644);
	cr_assert_geq(f, 0);
	cr_assert_eq(write(f, "deep", 4), 4);
	close(f);
	close(fd);
	mkfile("e/top", 3, 1);
	/* 128 KiB: a recursive walk needs a few hundred bytes per level */
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 128 << 10);
	struct deep_run r = { 0 };
	pthread_t th;
	cr_assert_eq(pthread_create(&th, &at, open_in_thread, &r), 0);
	pthread_join(th, NULL);
	cr_assert_eq(r.rc, 0, "%s", err);
	cr_assert_eq(r.c->nfiles, 2);
	const char *leaf = catalog_path(r.c, 0);
	cr_assert_eq(strlen(leaf), DEEP * 2 + 4, "%zu", strlen(leaf));
	cr_assert_str_eq(catalog_path(r.c, 1), "e/top");
	cr_assert_eq(r.c->ndirs, DEEP + 2);
	struct catalog_reader rd;
	catalog_reader_init(&rd, r.c);
	char buf[4];
	cr_assert_eq(catalog_read(&rd, 0, buf), 0, "%s", rd.err);
	cr_assert(memcmp(buf, "deep", 4) == 0);
	catalog_reader_fini(&rd);
	catalog_free(r.c);
}

/* Creates nested directories of `n` names of `len` bytes under data, the
 * first starting with `first`; returns the relative path (static). */
static const char *long_dirs(int n, size_t len, char first)
{
	static char rel[PATH_MAX * 2];
	char name[256];
	memset(name, 'x', len);
	name[len] = '\0';
	int fd = open(data, O_RDONLY | O_DIRECTORY);
	size_t used = 0;
	for (int i = 0; i < n; i++) {
		name[0] = i ? (char)('a' + i % 26) : first;
		cr_assert_eq(mkdirat(fd, name, 0755), 0, "%s", strerror(errno));
		int next = openat(fd, name, O_RDONLY | O_DIRECTORY);
		close(fd);
		fd = next;
		used += (size_t)snprintf(rel + used, sizeof(rel) - used, "%s%s", i ? "/" : "", name);
	}
	close(fd);
	return rel;
}

/* Errors about long paths keep their reason: the path is shortened in the
 * middle, never the message at its end. */
Test(catalog, long_paths)
{
	/* 1.5 KiB deep: catalogued, and a read error still says why */
	const char *rel = long_dirs(6, 250, 'A');
	char file[PATH_MAX * 2];
	snprintf(file, sizeof(file), "%s/sample.bin", rel);
	mkfile(file, 100, 9);
	struct catalog_opts o = opts(false);
	struct catalog *c = open_ok(&o);
	cr_assert_str_eq(catalog_path(c, 0), file);
	truncate_file(file, 10);
	struct catalog_reader rd;
	catalog_reader_init(&rd, c);
	uint8_t buf[100];
	cr_assert_neq(catalog_read(&rd, 0, buf), 0);
	assert_has(rd.err, "sample 0 (");
	assert_has(rd.err, "sample.bin");
	assert_has(rd.err, "restart seerd to rescan");
	cr_assert_lt(strlen(rd.err), 256, "a trainer receives 256 bytes: %s", rd.err);
	catalog_reader_fini(&rd);
	catalog_free(c);

	/* past PATH_MAX: no reader could open it; the scan says so, and what to do */
	rel = long_dirs(18, 250, 'B');
	snprintf(file, sizeof(file), "%s/sample.bin", rel);
	int fd = open(data, O_RDONLY | O_DIRECTORY);
	cr_assert_eq(fchdir(fd), 0);
	close(fd);
	char here[PATH_MAX * 2];
	snprintf(here, sizeof(here), "%s", rel);
	for (char *s = here, *slash; (slash = strchr(s, '/')); s = slash + 1) {
		*slash = '\0';
		cr_assert_eq(chdir(s), 0, "%s", strerror(errno));
	}
	cr_assert_eq(chdir(strrchr(rel, '/') + 1), 0);
	fd = open("sample.bin", O_WRONLY | O_CREAT, 0644);
	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(chdir("/"), 0);
	cr_assert_eq(open_fails(&o), SEER_EDATASET);
	assert_has(err, "longer than PATH_MAX");
	assert_has(err, "point dataset.path deeper");
	cr_assert_lt(strlen(err), 600, "%s", err);
}

/* ---- the walk lists directories ahead in parallel ------------------------------- */

static struct catalog_progress *walk_prog; /* stop_after sets its stop */
static const char *walk_stop_at;

static bool stop_after(const struct catalog_params *p, const char *rel)
{
	(void)p;
	if (walk_stop_at && strcmp(rel, walk_stop_at) == 0)
		atomic_store(&walk_prog->stop, true);
	return strstr(rel, ".skip") == NULL;
}

/* Everything a walk of data with `threads` threads returns, as text (malloc'd):
 * rc, err, files in order, directories with their mtimes, links skipped. */
static char *walk_text(unsigned threads, const char *stop_at)
{
	static const struct fmt_ops fmt = { .name = "walktest", .accept = stop_after };
	struct catalog_params params = { 0 };
	struct catalog_progress prog = { 0 };
	struct strpool pool = { 0 };
	struct catalog_walk w = { .prog = &prog };
	char e[1024] = "";
	walk_prog = &prog;
	walk_stop_at = stop_at;
	int rc = catalog_walk_tree(data, &fmt, &params, false, threads, &pool, &w, e, sizeof(e));
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	fprintf(f, "rc %d err [%s] skipped %llu listed %llu\n", rc, e,
		(unsigned long long)w.skipped_links, (unsigned long long)atomic_load(&prog.listed));
	for (size_t i = 0; i < w.n; i++)
		fprintf(f, "file %s\n", w.paths[i]);
	for (size_t i = 0; i < w.ndirs; i++)
		fprintf(f, "dir [%s] %lld\n", pool.buf + w.dirs[i].path_off,
			(long long)w.dirs[i].mtime_ns);
	fclose(f);
	catalog_walk_free(&w);
	free(pool.buf);
	return text;
}

/* The walk with 2, 8 and 32 threads returns what the one-thread walk does
 * (several runs: the helpers' timing varies); returns the latter. */
static char *walk_same(const char *stop_at)
{
	char *one = walk_text(1, stop_at);
	static const unsigned th[] = { 2, 8, 32, 8, 32 };
	for (size_t k = 0; k < sizeof(th) / sizeof(th[0]); k++) {
		char *par = walk_text(th[k], stop_at);
		cr_assert_str_eq(par, one, "%u threads", th[k]);
		free(par);
	}
	return one;
}

/* Nested and wide directories (more subdirectories than the window listed
 * ahead), a link loop, a second path to a directory, a dangling link, hidden
 * entries, an empty directory, files the format refuses. */
static void walk_tree(void)
{
	char rel[128];
	for (unsigned i = 0; i < 40; i++)
		for (unsigned j = 0; j < 40; j++) {
			snprintf(rel, sizeof(rel), "w%02u/s%02u/f%u%s", i, j, (i + j) % 3,
				 j % 7 ? "" : ".skip");
			mkfile(rel, 1, i);
		}
	mkfile("a/b/c/d/deep", 1, 1);
	mkfile("a/b/f2", 1, 1);
	mkfile("a/f3", 1, 1);
	mkfile("a/b/c/.hidden/x", 1, 1);
	mkfile("a/.h", 1, 1);
	mkfile(".top/x", 1, 1);
	mkfile("loop/a", 1, 1);
	mklink("../loop", "loop/self");
	mkfile("real/x", 1, 1);
	mklink("real", "alias");
	mklink("../../real", "a/b/real_again"); /* walked before alias */
	mkfile("other/z", 1, 1);
	mklink("nowhere", "other/dangling");
	mklink("../real/x", "other/x_link");
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/empty", data);
	cr_assert_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/a/b/empty2", data);
	cr_assert_eq(mkdir(path, 0755), 0);
}

Test(catalog, parallel_walk_is_the_serial_walk)
{
	walk_tree();
	char *one = walk_same(NULL);
	/* files in walk order (a directory's files in reverse: the catalog sorts them) */
	assert_has(one, "rc 0 err [] skipped 3 listed 1367\n");
	assert_has(one, "\nfile a/f3\nfile a/b/f2\nfile a/b/c/d/deep\nfile a/b/real_again/x\n"
			"file loop/a\nfile other/z\nfile other/x_link\nfile w00/s01/f1\n");
	assert_has(one, "\nfile w39/s39/f0\ndir [] ");
	assert_has(one, "\ndir [a/b/empty2] ");
	assert_has(one, "\ndir [empty] ");
	cr_assert_null(strstr(one, "hidden"), "%s", one);
	cr_assert_null(strstr(one, "alias"), "%s", one);
	cr_assert_null(strstr(one, "dangling"), "%s", one);
	cr_assert_null(strstr(one, ".skip"), "%s", one);
	free(one);

	/* a stop met mid-walk: the directory in hand is finished, no other begun */
	one = walk_same("w20/s05/f1");
	assert_has(one, "rc -125 err [");
	assert_has(one, "the catalog build was stopped");
	assert_has(one, "\nfile w20/s05/f1\ndir [] ");
	cr_assert_null(strstr(one, "w20/s06"), "%s", one);
	free(one);
}

/* Two paths past PATH_MAX: the walk fails naming the first in walk order,
 * with what was found before it. */
Test(catalog, parallel_walk_reports_the_first_error)
{
	walk_tree();
	long_dirs(18, 250, 'x');
	const char *first = long_dirs(18, 250, 'p');
	char want[64];
	snprintf(want, sizeof(want), "path %.20s", first);
	char *one = walk_same(NULL);
	assert_has(one, "longer than PATH_MAX");
	assert_has(one, want);
	assert_has(one, "\nfile other/x_link\ndir [] ");
	cr_assert_null(strstr(one, "file w"), "%s", one);
	free(one);
}

/* ---- files that change after cataloguing --------------------------------------- */

Test(catalog, shrunk_file_is_a_read_error)
{
	mkfile("a/1", 1000, 1);
	mkfile("a/2", 1000, 2);
	mkfile("a/3", 1000, 3);
	struct catalog_opts o = opts(false);
	struct catalog *c = open_ok(&o);
	struct catalog_reader rd;
	catalog_reader_init(&rd, c);
	uint8_t *buf = malloc(1000);

	/* shrinks before the reader opened it */
	truncate_file("a/1", 500);
	int rc = catalog_read(&rd, 0, buf);
	cr_assert_neq(rc, 0, "a shrunk file was read as a sample");
	assert_has(rd.err, "a/1");
	assert_has(rd.err, data);

	/* shrinks while the reader holds it open */
	cr_assert_eq(catalog_read(&rd, 1, buf), 0, "%s", rd.err);
	truncate_file("a/2", 10);
	memset(buf, 0, 1000);
	rc = catalog_read(&rd, 1, buf);
	cr_assert_neq(rc, 0, "a short sample was delivered");
	assert_has(rd.err, "a/2");

	/* grows: the catalogued length no longer describes it */
	mkfile("a/3", 2000, 3);
	rc = catalog_read(&rd, 2, buf);
	cr_assert_neq(rc, 0, "a changed file was read as its old sample");
	assert_has(rd.err, "a/3");

	/* gone */
	rmfile("a/1");
	rc = catalog_read(&rd, 0, buf);
	cr_assert_neq(rc, 0);
	assert_has(rd.err, "a/1");

	catalog_reader_fini(&rd);
	free(buf);
	catalog_free(c);
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
	struct catalog_opts o = opts(false);
	struct catalog *c = open_ok(&o);
	for (int pass = 0; pass < 3; pass++)
		assert_catalog(c, want, N);
	struct catalog_reader rd;
	catalog_reader_init(&rd, c);
	uint8_t buf[256];
	for (int k = 0; k < 500; k++) {
		uint64_t id = next_rand() % N;
		cr_assert_eq(catalog_read(&rd, id, buf), 0, "%s", rd.err);
		for (size_t i = 0; i < want[id].len; i++)
			cr_assert_eq(buf[i], content_byte(want[id].seed, i));
	}
	catalog_reader_fini(&rd);
	catalog_free(c);
}


/* ---- the parallel scan ------------------------------------------------------ */

/* More files than the scan's window, in classes, of many sizes: scanned by
 * 8 threads, the catalog is the serial one exactly (files, sizes, samples,
 * types, hash). */
Test(catalog, parallel_scan_is_the_serial_catalog)
{
	char rel[64];
	for (unsigned i = 0; i < 2600; i++) {
		snprintf(rel, sizeof(rel), "c%02u/f%05u", (i * 7919u) % 13, i);
		mkfile(rel, (i * 37u) % 300, i);
	}
	struct catalog_opts o = opts(false);
	o.threads = 1;
	struct catalog *a = open_ok(&o);
	o.threads = 8;
	struct catalog_progress prog = { 0 };
	o.prog = &prog;
	struct catalog *b = open_ok(&o);
	cr_assert_eq(a->nfiles, 2600);
	cr_assert_eq(b->nfiles, a->nfiles);
	cr_assert_eq(b->nsamples, a->nsamples);
	cr_assert_eq(b->ntypes, a->ntypes);
	cr_assert_eq(b->hash, a->hash);
	cr_assert_eq(atomic_load(&prog.total), 2600);
	cr_assert_eq(atomic_load(&prog.scanned), 2600);
	cr_assert_eq(atomic_load(&prog.listed), 2600);
	for (uint32_t i = 0; i < a->nfiles; i++) {
		cr_assert_str_eq(catalog_path(b, i), catalog_path(a, i));
		cr_assert_eq(b->files[i].size, a->files[i].size);
		cr_assert_eq(b->files[i].first, a->files[i].first);
		cr_assert_eq(b->files[i].nsamples, a->files[i].nsamples);
	}
	cr_assert_eq(memcmp(b->samples, a->samples, a->nsamples * sizeof(*a->samples)), 0);
	cr_assert_eq(memcmp(b->types, a->types, a->ntypes * sizeof(*a->types)), 0);
	catalog_free(a);
	catalog_free(b);
}

/* Two bad files far apart: the parallel scan reports the first in catalog
 * order, as the serial one does. */
Test(catalog, parallel_scan_reports_the_first_bad_file)
{
	char rel[64];
	for (unsigned i = 0; i < 400; i++) {
		snprintf(rel, sizeof(rel), "%s/f%04u", i < 200 ? "a" : "z", i);
		mkfile(rel, 10, i);
	}
	mkfile("m-stray.txt", 3, 1);
	mkfile("y-stray.txt", 3, 2);
	struct catalog_opts o = opts(false);
	o.threads = 8;
	cr_assert_eq(open_fails(&o), SEER_EDATASET);
	assert_has(err, "m-stray.txt");
	cr_assert_null(strstr(err, "y-stray.txt"), "%s", err);
}

/* A stop set before or during the build: -ECANCELED, saying so. */
Test(catalog, scan_stops_when_asked)
{
	char rel[64];
	for (unsigned i = 0; i < 100; i++) {
		snprintf(rel, sizeof(rel), "a/f%04u", i);
		mkfile(rel, 10, i);
	}
	struct catalog_progress prog = { 0 };
	atomic_store(&prog.stop, true);
	struct catalog_opts o = opts(false);
	o.prog = &prog;
	cr_assert_eq(open_fails(&o), -ECANCELED);
	assert_has(err, "stopped");
}
