/* Listing the dataset tree: which files belong to the dataset.
 *
 * Iterative (an explicit stack, no recursion: any depth on any stack size),
 * depth first, each directory's entries in bytewise name order, so the walk
 * is the same on every node and every run. Names starting with '.' are
 * skipped (hidden files, seer's own temporary files).
 *
 * Symbolic links are followed, with one rule: a directory (device, inode) is
 * walked once. A link leading to a directory already walked — its own
 * ancestor (a loop such as loop/self -> ../loop) or a directory reachable by
 * another path — is not followed; the first path in walk order names its
 * files, and the skipped link is reported (a few warnings, then a count).
 * Links to files are followed and each name is a sample (a file linked under
 * two names is two samples, as with any directory listing); dangling links
 * are skipped.
 *
 * Class directories (catalog_walk_classes) are listed apart, as torchvision's
 * find_classes lists them: every directory of the root, hidden ones and links
 * included, whether or not the walk finds samples in it.
 *
 * Readers open samples by their full path, so a path longer than PATH_MAX is
 * an error naming it (abbreviated) and saying what to do.
 *
 * Runs on the thread building the catalog; logs warnings, never aborts. */
#define _GNU_SOURCE
#include "catalog_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seer.h"
#include "../util/util.h"

#define WALK_WARN_MAX 5 /* skipped links reported one by one; then counted */

/* A directory walked: its identity, and the pool offset of the path that
 * first reached it (to name it when a link leads there again). */
struct seen {
	dev_t dev;
	ino_t ino;
	uint32_t path_off;
	bool used;
};

struct walk {
	struct catalog_walk *out;
	struct strpool *pool;
	const struct fmt_ops *fmt;
	const struct catalog_params *params;
	const char *root;
	int root_fd;
	bool progress;
	struct seen *seen;        /* open addressing on (dev, ino) */
	size_t nseen, capseen;
	char **stack;             /* directories still to walk (relative paths, owned) */
	size_t nstack, capstack;
	uint64_t skipped;         /* links to directories not followed */
	char *err;
	size_t errlen;
};

static size_t seen_home(const struct walk *w, dev_t dev, ino_t ino)
{
	uint64_t h = ((uint64_t)dev * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)ino * 0xc2b2ae3d27d4eb4full);
	return (size_t)(h ^ (h >> 29)) & (w->capseen - 1);
}

static void seen_put(struct seen *tab, size_t cap, const struct seen *e, const struct walk *w)
{
	size_t i = seen_home(w, e->dev, e->ino);
	while (tab[i].used)
		i = (i + 1) & (cap - 1);
	tab[i] = *e;
}

/* The entry for (dev, ino), added when new (*first says which; the caller
 * sets path_off). */
static struct seen *seen_add(struct walk *w, dev_t dev, ino_t ino, bool *first)
{
	if ((w->nseen + 1) * 2 > w->capseen) {
		size_t old = w->capseen, cap = MAX(old * 2, (size_t)64);
		struct seen *tab = xcalloc(cap, sizeof(*tab));
		w->capseen = cap;
		for (size_t i = 0; i < old; i++)
			if (w->seen[i].used)
				seen_put(tab, cap, &w->seen[i], w);
		free(w->seen);
		w->seen = tab;
	}
	size_t i = seen_home(w, dev, ino);
	for (; w->seen[i].used; i = (i + 1) & (w->capseen - 1)) {
		if (w->seen[i].dev == dev && w->seen[i].ino == ino) {
			*first = false;
			return &w->seen[i];
		}
	}
	w->seen[i] = (struct seen){ .dev = dev, .ino = ino, .used = true };
	w->nseen++;
	*first = true;
	return &w->seen[i];
}

static void push_dir(struct walk *w, char *rel)
{
	if (w->nstack == w->capstack) {
		w->capstack = MAX(w->capstack * 2, (size_t)64);
		w->stack = xrealloc(w->stack, w->capstack * sizeof(char *));
	}
	w->stack[w->nstack++] = rel;
}

static void add_file(struct walk *w, char *rel)
{
	struct catalog_walk *o = w->out;
	if (o->n == o->cap) {
		o->cap = MAX(o->cap * 2, (size_t)1024);
		o->paths = xrealloc(o->paths, o->cap * sizeof(char *));
	}
	o->paths[o->n++] = rel;
	if (o->prog)
		atomic_store_explicit(&o->prog->listed, o->n, memory_order_relaxed);
	if (w->progress && o->n % 100000 == 0)
		log_info("catalog: %zu files found so far", o->n);
}

/* A link to a directory walked before: said, not followed. */
static void skip_dir(struct walk *w, const char *rel, const struct seen *s)
{
	w->skipped++;
	if (w->skipped > WALK_WARN_MAX)
		return;
	const char *first = w->pool->buf + s->path_off;
	size_t fl = strlen(first);
	bool loop = fl == 0 || (strncmp(rel, first, fl) == 0 && rel[fl] == '/');
	char a[CAT_PATH_SHOW], b[CAT_PATH_SHOW];
	log_warn("dataset %s: %s is the directory already walked as %s%s: not followed (%s)%s",
		 w->root, catalog_path_abbrev(a, sizeof(a), rel), fl ? "" : "the dataset root",
		 catalog_path_abbrev(b, sizeof(b), first),
		 loop ? "a symbolic link loop" : "its files are listed once, under the first path",
		 w->skipped == WALK_WARN_MAX ? "; further links of this kind are only counted" : "");
}

static int path_too_long(struct walk *w, const char *rel)
{
	char a[CAT_PATH_SHOW];
	snprintf(w->err, w->errlen, "dataset %s: path %s is longer than PATH_MAX (%d bytes with the "
		 "root): seer opens samples by full path; shorten the directory names or point "
		 "dataset.path deeper", w->root, catalog_path_abbrev(a, sizeof(a), rel), PATH_MAX);
	return SEER_EDATASET;
}

struct entry {
	char *name;
	bool dir;
};

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

/* The entries of the open directory fd that are directories or regular files
 * (links followed), unsorted. Consumes fd. */
static int read_entries(int fd, struct entry **out, size_t *n)
{
	DIR *d = fdopendir(fd);
	if (!d) {
		int e = -errno;
		close(fd);
		return e;
	}
	size_t cnt = 0, cap = 0;
	struct entry *v = NULL;
	int rc = 0;
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);
		if (!de) {
			rc = -errno; /* 0 at the end of the directory */
			break;
		}
		if (de->d_name[0] == '.')
			continue; /* ".", "..", hidden files and seer's own temp files */
		unsigned char type = de->d_type;
		if (type == DT_UNKNOWN || type == DT_LNK) {
			struct stat es;
			if (fstatat(dirfd(d), de->d_name, &es, 0) != 0)
				continue; /* dangling link */
			type = S_ISDIR(es.st_mode) ? DT_DIR : S_ISREG(es.st_mode) ? DT_REG : DT_UNKNOWN;
		}
		if (type != DT_DIR && type != DT_REG)
			continue;
		if (cnt == cap) {
			cap = MAX(cap * 2, (size_t)64);
			v = xrealloc(v, cap * sizeof(*v));
		}
		v[cnt++] = (struct entry){ .name = xstrdup(de->d_name), .dir = type == DT_DIR };
	}
	closedir(d);
	*out = v;
	*n = cnt;
	return rc;
}

/* Open the directory rel, or say why not. */
static int open_dir(struct walk *w, const char *rel, int *fd, struct stat *st)
{
	*fd = openat(w->root_fd, *rel ? rel : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (*fd < 0 || fstat(*fd, st) != 0) {
		int e = errno;
		char a[CAT_PATH_SHOW];
		if (*fd >= 0)
			close(*fd);
		snprintf(w->err, w->errlen, "dataset %s: cannot open directory %s: %s", w->root,
			 *rel ? catalog_path_abbrev(a, sizeof(a), rel) : ".", strerror(e));
		return e == ENOMEM ? -ENOMEM : SEER_EDATASET;
	}
	return 0;
}

/* Walk one directory: record it, list its files, push its subdirectories. */
static int walk_one(struct walk *w, const char *rel)
{
	int fd;
	struct stat st;
	int rc = open_dir(w, rel, &fd, &st);
	if (rc)
		return rc;
	bool first;
	struct seen *s = seen_add(w, st.st_dev, st.st_ino, &first);
	if (!first) {
		close(fd);
		skip_dir(w, rel, s);
		return 0;
	}
	uint32_t off = s->path_off = catalog_pool_add(w->pool, rel);
	struct catalog_walk *o = w->out;
	if (o->ndirs == o->capdirs) {
		o->capdirs = MAX(o->capdirs * 2, (size_t)64);
		o->dirs = xrealloc(o->dirs, o->capdirs * sizeof(*o->dirs));
	}
	o->dirs[o->ndirs++] = (struct catalog_dir){ .path_off = off, .mtime_ns = catalog_ts_ns(&st.st_mtim) };
	struct entry *ents = NULL;
	size_t n = 0;
	rc = read_entries(fd, &ents, &n);
	if (rc) {
		char a[CAT_PATH_SHOW];
		snprintf(w->err, w->errlen, "dataset %s: cannot list directory %s: %s", w->root,
			 *rel ? catalog_path_abbrev(a, sizeof(a), rel) : ".", strerror(-rc));
		rc = rc == -ENOMEM ? rc : SEER_EDATASET;
	}
	if (n > 1)
		qsort(ents, n, sizeof(*ents), cmp_entry);
	size_t room = PATH_MAX - strlen(w->root) - 1; /* "root/" + rel + NUL fits PATH_MAX */
	for (size_t i = n; rc == 0 && i-- > 0;) { /* reversed: the stack pops them in order */
		char *child = *rel ? xasprintf("%s/%s", rel, ents[i].name) : xstrdup(ents[i].name);
		if (strlen(child) >= room)
			rc = path_too_long(w, child);
		if (rc == 0 && ents[i].dir)
			push_dir(w, child);
		else if (rc == 0 && (!w->fmt->accept || w->fmt->accept(w->params, child)))
			add_file(w, child);
		else
			free(child);
	}
	for (size_t i = 0; i < n; i++)
		free(ents[i].name);
	free(ents);
	return rc;
}

int catalog_walk_tree(const char *root, const struct fmt_ops *fmt, const struct catalog_params *params,
		  bool progress, struct strpool *pool, struct catalog_walk *out, char *err, size_t errlen)
{
	struct walk w = { .out = out, .pool = pool, .fmt = fmt, .params = params, .root = root,
			  .progress = progress, .err = err, .errlen = errlen };
	w.root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (w.root_fd < 0) {
		snprintf(err, errlen, "dataset %s: %s", root, strerror(errno));
		return SEER_EDATASET;
	}
	int rc = 0;
	push_dir(&w, xstrdup(""));
	while (w.nstack > 0) {
		char *rel = w.stack[--w.nstack];
		if (rc == 0 && out->prog && atomic_load(&out->prog->stop)) {
			snprintf(err, errlen, "dataset %s: the catalog build was stopped", root);
			rc = -ECANCELED;
		}
		if (rc == 0)
			rc = walk_one(&w, rel);
		free(rel);
	}
	if (rc == 0 && w.skipped > 0)
		log_warn("dataset %s: %llu symbolic links to directories already in the dataset were "
			 "not followed", root, (unsigned long long)w.skipped);
	out->skipped_links = w.skipped;
	close(w.root_fd);
	free(w.stack);
	free(w.seen);
	return rc;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int catalog_walk_classes(const char *root, char ***names, uint32_t *n, char *err, size_t errlen)
{
	*names = NULL;
	*n = 0;
	DIR *d = opendir(root);
	if (!d) {
		int e = errno;
		snprintf(err, errlen, "dataset %s: cannot list its class directories: %s", root,
			 strerror(e));
		return e == ENOMEM ? -ENOMEM : SEER_EDATASET;
	}
	size_t cnt = 0, cap = 0;
	char **v = NULL;
	int rc = 0;
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);
		if (!de) {
			rc = errno;
			break;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		bool dir = de->d_type == DT_DIR;
		if (de->d_type == DT_UNKNOWN || de->d_type == DT_LNK) {
			struct stat es; /* os.scandir's is_dir(): links followed, dangling ones not */
			dir = fstatat(dirfd(d), de->d_name, &es, 0) == 0 && S_ISDIR(es.st_mode);
		}
		if (!dir)
			continue;
		if (cnt == cap) {
			cap = MAX(cap * 2, (size_t)64);
			v = xrealloc(v, cap * sizeof(char *));
		}
		v[cnt++] = xstrdup(de->d_name);
	}
	closedir(d);
	if (rc == 0 && cnt > UINT32_MAX)
		rc = EOVERFLOW;
	if (rc != 0) {
		snprintf(err, errlen, "dataset %s: cannot list its class directories: %s", root,
			 strerror(rc));
		for (size_t i = 0; i < cnt; i++)
			free(v[i]);
		free(v);
		return rc == ENOMEM ? -ENOMEM : SEER_EDATASET;
	}
	if (cnt > 1)
		qsort(v, cnt, sizeof(char *), cmp_name);
	*names = v;
	*n = (uint32_t)cnt;
	return 0;
}

void catalog_walk_free(struct catalog_walk *w)
{
	for (size_t i = 0; i < w->n; i++)
		free(w->paths[i]);
	free(w->paths);
	free(w->dirs);
	memset(w, 0, sizeof(*w));
}
