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
 * Listing ahead. On a parallel file system each directory's open, fstat and
 * getdents are metadata round trips (about 1 ms each), so the directories the
 * walk will enter next are listed ahead by helper threads: the WALK_AHEAD
 * per thread frames nearest the top of the stack (the next popped) each get
 * a listing (open, fstat, entries read and sorted), which the walk consumes
 * when it pops that frame, or makes itself when none was begun. A listing
 * depends only on its path, so the walk's output is the serial walk's: the
 * (dev, ino) dedupe, the directories and files recorded, the links skipped
 * and their warnings, the PATH_MAX checks and every error stay on the walking
 * thread, in walk order (a listing's error is reported when the walk reaches
 * that directory, never before). A frame pushed out of the window by new
 * subdirectories loses its listing (freed; listed again when the walk comes
 * near it), so at most window + threads listings are held. The stop flag is
 * read at each directory; the helpers then finish the listing in hand.
 *
 * Threads: the thread building the catalog walks; it owns w->out, the pool,
 * the seen table and the warnings. The helpers (started and joined within
 * catalog_walk_tree) read root_fd and a frame's path, and write only their
 * listing; the stack, the frames' listing pointers and the listings' states
 * are under w->mu. Logs warnings, never aborts. */
#define _GNU_SOURCE
#include "catalog_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seer.h"
#include "../util/util.h"

#define WALK_WARN_MAX 5 /* skipped links reported one by one; then counted */
#define WALK_THREADS_MAX 32u /* directories listed at once, the walking thread's among them */
#define WALK_AHEAD 4u   /* frames listed ahead per thread */

struct entry {
	char *name;
	bool dir;
};

/* One directory listed (list_dir): opened and stat'ed, or why not; its
 * entries, sorted. */
struct listing {
	int open_err;         /* errno of the open or fstat; 0: opened */
	int list_rc;          /* read_entries' result when opened */
	struct stat st;
	struct entry *ents;
	size_t n;
	enum { LS_QUEUED, LS_RUNNING, LS_DONE } state; /* under mu */
	bool claimed;         /* popped by the walk, which waits for it (under mu) */
};

/* A directory still to walk. */
struct frame {
	char *rel;            /* relative path, owned */
	struct listing *ls;   /* NULL: not listed ahead (under mu) */
};

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
	struct frame *stack;      /* directories still to walk (under mu) */
	size_t nstack, capstack;
	uint64_t skipped;         /* links to directories not followed */
	char *err;
	size_t errlen;
	pthread_mutex_t mu;
	pthread_cond_t work_cv;   /* a listing queued, or quit */
	pthread_cond_t done_cv;   /* a listing done */
	size_t ahead;             /* frames nearest the top listed ahead; 0: none (set under mu) */
	size_t nqueued;           /* listings queued, not begun (under mu) */
	bool quit;                /* helpers: return (under mu) */
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

/* Under mu. */
static void push_dir(struct walk *w, char *rel)
{
	if (w->nstack == w->capstack) {
		w->capstack = MAX(w->capstack * 2, (size_t)64);
		w->stack = xrealloc(w->stack, w->capstack * sizeof(*w->stack));
	}
	w->stack[w->nstack++] = (struct frame){ .rel = rel };
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

static void listing_free(struct listing *ls)
{
	for (size_t i = 0; ls && i < ls->n; i++)
		free(ls->ents[i].name);
	if (ls)
		free(ls->ents);
	free(ls);
}

/* List the directory rel into ls: open, fstat, entries read and sorted (any
 * thread: reads only root_fd). */
static void list_dir(int root_fd, const char *rel, struct listing *ls)
{
	int fd = openat(root_fd, *rel ? rel : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &ls->st) != 0) {
		ls->open_err = errno;
		if (fd >= 0)
			close(fd);
		return;
	}
	ls->list_rc = read_entries(fd, &ls->ents, &ls->n);
	if (ls->n > 1)
		qsort(ls->ents, ls->n, sizeof(*ls->ents), cmp_entry);
}

/* Walk one directory from its listing: record it, list its files, push its
 * subdirectories. Consumes ls. */
static int walk_one(struct walk *w, const char *rel, struct listing *ls)
{
	char a[CAT_PATH_SHOW];
	if (ls->open_err) {
		int e = ls->open_err;
		listing_free(ls);
		snprintf(w->err, w->errlen, "dataset %s: cannot open directory %s: %s", w->root,
			 *rel ? catalog_path_abbrev(a, sizeof(a), rel) : ".", strerror(e));
		return e == ENOMEM ? -ENOMEM : SEER_EDATASET;
	}
	bool first;
	struct seen *s = seen_add(w, ls->st.st_dev, ls->st.st_ino, &first);
	if (!first) {
		listing_free(ls);
		skip_dir(w, rel, s);
		return 0;
	}
	uint32_t off = s->path_off = catalog_pool_add(w->pool, rel);
	struct catalog_walk *o = w->out;
	if (o->ndirs == o->capdirs) {
		o->capdirs = MAX(o->capdirs * 2, (size_t)64);
		o->dirs = xrealloc(o->dirs, o->capdirs * sizeof(*o->dirs));
	}
	o->dirs[o->ndirs++] = (struct catalog_dir){ .path_off = off,
						    .mtime_ns = catalog_ts_ns(&ls->st.st_mtim) };
	int rc = ls->list_rc;
	if (rc) {
		snprintf(w->err, w->errlen, "dataset %s: cannot list directory %s: %s", w->root,
			 *rel ? catalog_path_abbrev(a, sizeof(a), rel) : ".", strerror(-rc));
		rc = rc == -ENOMEM ? rc : SEER_EDATASET;
	}
	size_t room = PATH_MAX - strlen(w->root) - 1; /* "root/" + rel + NUL fits PATH_MAX */
	size_t n0 = w->nstack; /* written by this thread only */
	for (size_t i = ls->n; rc == 0 && i-- > 0;) { /* reversed: the stack pops them in order */
		struct entry *e = &ls->ents[i];
		char *child = *rel ? xasprintf("%s/%s", rel, e->name) : xstrdup(e->name);
		if (strlen(child) >= room)
			rc = path_too_long(w, child);
		if (rc == 0 && e->dir) {
			pthread_mutex_lock(&w->mu);
			push_dir(w, child);
			pthread_mutex_unlock(&w->mu);
		} else if (rc == 0 && (!w->fmt->accept || w->fmt->accept(w->params, child)))
			add_file(w, child);
		else
			free(child);
	}
	/* frames pushed out of the window lose their listing (one in hand is
	 * dropped by its helper when done) */
	pthread_mutex_lock(&w->mu);
	for (size_t i = n0 > w->ahead ? n0 - w->ahead : 0; i + w->ahead < w->nstack && i < n0; i++) {
		struct listing *x = w->stack[i].ls;
		if (!x || x->state == LS_RUNNING)
			continue;
		if (x->state == LS_QUEUED)
			w->nqueued--;
		listing_free(x);
		w->stack[i].ls = NULL;
	}
	pthread_mutex_unlock(&w->mu);
	listing_free(ls);
	return rc;
}

/* Under mu: queue a listing for each frame of the window that has none. */
static void walk_refill(struct walk *w)
{
	size_t lo = w->nstack > w->ahead ? w->nstack - w->ahead : 0;
	bool queued = false;
	for (size_t i = w->nstack; i-- > lo;) {
		if (w->stack[i].ls)
			continue;
		w->stack[i].ls = xcalloc(1, sizeof(struct listing));
		w->nqueued++;
		queued = true;
	}
	if (queued)
		pthread_cond_broadcast(&w->work_cv);
}

/* A helper: lists the queued frame nearest the top, until quit. */
static void *walk_helper(void *arg)
{
	struct walk *w = arg;
	pthread_mutex_lock(&w->mu);
	while (!w->quit) {
		size_t pos = SIZE_MAX; /* queued listings are all in the window */
		size_t lo = w->nstack > w->ahead ? w->nstack - w->ahead : 0;
		for (size_t i = w->nstack; w->nqueued > 0 && pos == SIZE_MAX && i-- > lo;)
			if (w->stack[i].ls && w->stack[i].ls->state == LS_QUEUED)
				pos = i;
		if (pos == SIZE_MAX) {
			pthread_cond_wait(&w->work_cv, &w->mu);
			continue;
		}
		struct listing *ls = w->stack[pos].ls;
		const char *rel = w->stack[pos].rel; /* freed only once ls is done */
		ls->state = LS_RUNNING;
		w->nqueued--;
		pthread_mutex_unlock(&w->mu);
		list_dir(w->root_fd, rel, ls);
		pthread_mutex_lock(&w->mu);
		ls->state = LS_DONE;
		if (!ls->claimed && pos + w->ahead < w->nstack) { /* pushed out of the window */
			listing_free(ls);
			w->stack[pos].ls = NULL;
		}
		pthread_cond_broadcast(&w->done_cv);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* Pop the next directory and its listing (waited for when a helper has it
 * in hand; made here when none was begun). */
static struct listing *walk_pop(struct walk *w, char **rel)
{
	pthread_mutex_lock(&w->mu);
	struct frame f = w->stack[--w->nstack];
	struct listing *ls = f.ls;
	if (ls) {
		ls->claimed = true;
		if (ls->state == LS_QUEUED) {
			w->nqueued--;
			listing_free(ls);
			ls = NULL;
		}
	}
	walk_refill(w); /* the frame that came into the window, for an idle helper */
	while (ls && ls->state != LS_DONE)
		pthread_cond_wait(&w->done_cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
	if (!ls) {
		ls = xcalloc(1, sizeof(*ls));
		list_dir(w->root_fd, f.rel, ls);
	}
	*rel = f.rel;
	return ls;
}

int catalog_walk_tree(const char *root, const struct fmt_ops *fmt, const struct catalog_params *params,
		      bool progress, unsigned threads, struct strpool *pool, struct catalog_walk *out,
		      char *err, size_t errlen)
{
	struct walk w = { .out = out, .pool = pool, .fmt = fmt, .params = params, .root = root,
			  .progress = progress, .err = err, .errlen = errlen };
	w.root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (w.root_fd < 0) {
		snprintf(err, errlen, "dataset %s: %s", root, strerror(errno));
		return SEER_EDATASET;
	}
	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.work_cv, NULL);
	pthread_cond_init(&w.done_cv, NULL);
	unsigned nth = MIN(MAX(threads, 1u), WALK_THREADS_MAX);
	pthread_t th[WALK_THREADS_MAX];
	unsigned started = 0;
	for (unsigned k = 1; k < nth; k++, started++)
		if (pthread_create(&th[started], NULL, walk_helper, &w) != 0)
			break; /* fewer helpers: the walk is slower, not wrong */
	int rc = 0;
	pthread_mutex_lock(&w.mu);
	w.ahead = started ? (size_t)WALK_AHEAD * (started + 1) : 0;
	push_dir(&w, xstrdup(""));
	pthread_mutex_unlock(&w.mu);
	while (rc == 0 && w.nstack > 0) {
		if (out->prog && atomic_load(&out->prog->stop)) {
			snprintf(err, errlen, "dataset %s: the catalog build was stopped", root);
			rc = -ECANCELED;
			break;
		}
		char *rel;
		struct listing *ls = walk_pop(&w, &rel);
		rc = walk_one(&w, rel, ls);
		free(rel);
	}
	pthread_mutex_lock(&w.mu);
	w.quit = true;
	pthread_cond_broadcast(&w.work_cv);
	pthread_mutex_unlock(&w.mu);
	for (unsigned k = 0; k < started; k++)
		pthread_join(th[k], NULL);
	for (size_t i = 0; i < w.nstack; i++) {
		listing_free(w.stack[i].ls);
		free(w.stack[i].rel);
	}
	if (rc == 0 && w.skipped > 0)
		log_warn("dataset %s: %llu symbolic links to directories already in the dataset were "
			 "not followed", root, (unsigned long long)w.skipped);
	out->skipped_links = w.skipped;
	pthread_cond_destroy(&w.done_cv);
	pthread_cond_destroy(&w.work_cv);
	pthread_mutex_destroy(&w.mu);
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
