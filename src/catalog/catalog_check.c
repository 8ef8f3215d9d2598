/* Is a cached catalog current? First its directories (catalog_check_dirs:
 * their mtimes say no file was added, removed or renamed), then every file
 * (catalog_check_files): a stat each, compared with the size, mtime and
 * ctime its scan recorded (catalog_check_file_state). A file rewritten in place
 * (DLIO's generator truncates and rewrites) keeps its name and its
 * directory's mtime: only the second check sees it.
 *
 * On a parallel file system a stat is a metadata round trip: the stats are
 * made by catalog_opts.threads threads (the caller's among them), each
 * taking CHECK_CHUNK catalog-ordered files at a time and reaching them
 * through an O_PATH descriptor on their directory. Runs on the thread
 * opening the dataset; the helpers it starts end before it returns. A stat
 * that fails marks its file changed (the rescan reports why); a stop
 * (catalog_progress.stop) ends the check early. */
#define _GNU_SOURCE
#include "catalog_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/util.h"

enum catalog_file_state catalog_check_file_state(const struct catalog_file *f, uint64_t size,
						 int64_t mtime_ns, int64_t ctime_ns, int64_t scan_ns)
{
	if (size != f->size)
		return CAT_FILE_SIZE;
	if (mtime_ns != f->mtime_ns)
		return CAT_FILE_MTIME;
	if (ctime_ns != f->ctime_ns)
		return CAT_FILE_CTIME;
	if (f->mtime_ns >= scan_ns - CAT_RACY_NS)
		return CAT_FILE_RACY;
	return CAT_FILE_SAME;
}

#define CHECK_CHUNK 64u /* items a checking thread takes at once */

/* A checking thread's own: the directory of the file it looked at last,
 * open (O_PATH: a lookup, no open on the file system), so that a stat of
 * the next file of that directory is one lookup of its name, not of its
 * whole path (the catalog lists a directory's files together). */
struct par_local {
	int dfd;                  /* -1: none */
	size_t dirlen;
	char dir[PATH_MAX];
};

/* fn(ctx, pl, i) for every i < n, by up to `threads` threads (the caller's
 * among them), CHECK_CHUNK items at a time. false when prog's stop came
 * first (some items not done). */
struct par {
	uint32_t n;
	const struct catalog_progress *prog;
	void (*fn)(void *ctx, struct par_local *pl, uint32_t i);
	void *ctx;
	_Atomic uint32_t next;
	_Atomic bool stopped;
};

/* A stat of root/rel (rel relative to rootfd) through pl's directory. */
static int par_stat(struct par_local *pl, int rootfd, const char *rel, struct stat *st)
{
	const char *slash = strrchr(rel, '/');
	if (!slash)
		return fstatat(rootfd, rel, st, 0);
	size_t n = (size_t)(slash - rel);
	if (n >= sizeof(pl->dir))
		return fstatat(rootfd, rel, st, 0);
	if (pl->dfd < 0 || n != pl->dirlen || memcmp(pl->dir, rel, n) != 0) {
		if (pl->dfd >= 0)
			close(pl->dfd);
		memcpy(pl->dir, rel, n);
		pl->dir[n] = '\0';
		pl->dirlen = n;
		pl->dfd = openat(rootfd, pl->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (pl->dfd < 0)
			return fstatat(rootfd, rel, st, 0); /* says why */
	}
	return fstatat(pl->dfd, slash + 1, st, 0);
}

/* A stop came? (Looked at before each item: a stat may take long.) */
static bool par_stopped(struct par *p)
{
	if (p->prog && atomic_load_explicit(&p->prog->stop, memory_order_relaxed))
		atomic_store(&p->stopped, true);
	return atomic_load_explicit(&p->stopped, memory_order_relaxed);
}

static void *par_thread(void *arg)
{
	struct par *p = arg;
	struct par_local pl = { .dfd = -1 };
	while (!par_stopped(p)) {
		uint32_t i0 = atomic_fetch_add(&p->next, CHECK_CHUNK);
		if (i0 >= p->n)
			break;
		uint32_t i1 = (uint32_t)MIN((uint64_t)i0 + CHECK_CHUNK, (uint64_t)p->n);
		for (uint32_t i = i0; i < i1 && !par_stopped(p); i++)
			p->fn(p->ctx, &pl, i);
	}
	if (pl.dfd >= 0)
		close(pl.dfd);
	return NULL;
}

static bool check_parallel(uint32_t n, unsigned threads, const struct catalog_progress *prog,
			 void (*fn)(void *ctx, struct par_local *pl, uint32_t i), void *ctx,
			 unsigned *used)
{
	struct par p = { .n = n, .prog = prog, .fn = fn, .ctx = ctx };
	unsigned nt = (unsigned)MIN((uint64_t)MAX(threads, 1u), (uint64_t)n / CHECK_CHUNK + 1);
	pthread_t *th = xcalloc(nt, sizeof(*th));
	unsigned started = 0;
	for (unsigned k = 1; k < nt; k++, started++)
		if (pthread_create(&th[k], NULL, par_thread, &p) != 0)
			break; /* fewer threads: slower, not wrong */
	par_thread(&p);
	for (unsigned k = 1; k <= started; k++)
		pthread_join(th[k], NULL);
	free(th);
	if (used)
		*used = started + 1;
	return !atomic_load(&p.stopped);
}

struct check {
	const struct catalog *c;
	struct catalog_progress *prog; /* counts `checked`, or NULL */
	int dfd;
	_Atomic uint32_t nchanged, nracy;
	_Atomic bool dirs_changed;
	bool *changed;             /* per file: scan it again */
	pthread_mutex_t mu;
	uint32_t first;            /* the first changed file (racy ones count last), under mu */
	int first_rank;            /* 2: changed, 1: racy, 0: none */
	char first_why[200];
};

/* Why file i counts as changed, for the log. */
static void check_note(struct check *ck, uint32_t i, enum catalog_file_state s,
		       const struct stat *st, int e)
{
	const struct catalog_file *f = &ck->c->files[i];
	int rank = s == CAT_FILE_RACY ? 1 : 2;
	pthread_mutex_lock(&ck->mu);
	if (rank > ck->first_rank || (rank == ck->first_rank && i < ck->first)) {
		ck->first = i;
		ck->first_rank = rank;
		char *w = ck->first_why;
		size_t n = sizeof(ck->first_why);
		if (e)
			snprintf(w, n, "%s", strerror(e));
		else if (s == CAT_FILE_SIZE)
			snprintf(w, n, "%llu bytes, %llu when scanned", (unsigned long long)st->st_size,
				 (unsigned long long)f->size);
		else if (s == CAT_FILE_MTIME)
			snprintf(w, n, "same size, modified since it was scanned (mtime)");
		else if (s == CAT_FILE_CTIME)
			snprintf(w, n, "same size and mtime, inode changed since it was scanned (ctime)");
		else
			snprintf(w, n, "written within %lld s of the scan: the scan may have missed a "
				 "later write", CAT_RACY_NS / 1000000000ll);
	}
	pthread_mutex_unlock(&ck->mu);
}

static void check_file(void *arg, struct par_local *pl, uint32_t i)
{
	struct check *ck = arg;
	const struct catalog *c = ck->c;
	struct stat st;
	int e = par_stat(pl, ck->dfd, catalog_path(c, i), &st) != 0 ? errno : 0;
	if (ck->prog)
		atomic_fetch_add_explicit(&ck->prog->checked, 1, memory_order_relaxed);
	enum catalog_file_state s = e ? CAT_FILE_SIZE
		: catalog_check_file_state(&c->files[i], (uint64_t)st.st_size, catalog_ts_ns(&st.st_mtim),
				     catalog_ts_ns(&st.st_ctim), c->scan_ns);
	if (s == CAT_FILE_SAME)
		return;
	ck->changed[i] = true;
	atomic_fetch_add(s == CAT_FILE_RACY ? &ck->nracy : &ck->nchanged, 1);
	check_note(ck, i, s, &st, e);
}

/* Directory i as at the scan, and not changed within CAT_RACY_NS of it? */
static void check_dir(void *arg, struct par_local *pl, uint32_t i)
{
	(void)pl;
	struct check *ck = arg;
	const struct catalog *c = ck->c;
	const char *rel = c->strpool + c->dirs[i].path_off;
	struct stat st;
	if ((*rel ? fstatat(ck->dfd, rel, &st, 0) : fstat(ck->dfd, &st)) != 0) {
		atomic_store(&ck->dirs_changed, true);
		return;
	}
	int64_t m = catalog_ts_ns(&st.st_mtim);
	if (m != c->dirs[i].mtime_ns || m >= c->scan_ns - CAT_RACY_NS)
		atomic_store(&ck->dirs_changed, true);
}

static unsigned check_threads(const struct catalog_opts *o)
{
	return o->threads ? o->threads : CAT_SCAN_THREADS;
}

bool catalog_check_dirs(const struct catalog *c, const struct catalog_opts *o)
{
	struct check ck = { .c = c };
	ck.dfd = open(c->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ck.dfd < 0)
		return false;
	bool done = check_parallel(c->ndirs, check_threads(o), o->prog, check_dir, &ck, NULL);
	close(ck.dfd);
	return done && !atomic_load(&ck.dirs_changed);
}

int catalog_check_files(const struct catalog *c, const struct catalog_opts *o, bool **changed,
			uint32_t *n)
{
	struct check ck = { .c = c, .prog = o->prog };
	*changed = NULL;
	*n = 0;
	ck.dfd = open(c->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ck.dfd < 0)
		return -errno;
	ck.changed = xcalloc(MAX(c->nfiles, 1u), sizeof(bool));
	pthread_mutex_init(&ck.mu, NULL);
	if (o->prog)
		atomic_store(&o->prog->check_total, c->nfiles);
	uint64_t t0 = now_ns();
	unsigned used;
	bool done = check_parallel(c->nfiles, check_threads(o), o->prog, check_file, &ck, &used);
	pthread_mutex_destroy(&ck.mu);
	close(ck.dfd);
	if (!done) {
		free(ck.changed);
		return -ECANCELED;
	}
	double secs = (double)(now_ns() - t0) / 1e9;
	uint32_t nch = atomic_load(&ck.nchanged), nracy = atomic_load(&ck.nracy);
	*n = nch + nracy;
	*changed = ck.changed;
	if (*n == 0) {
		log_info("catalog: %u files checked unchanged (size, mtime, ctime) in %.3f s by %u "
			 "threads", c->nfiles, secs, used);
		return 0;
	}
	char show[CAT_PATH_SHOW], racy[96] = "";
	if (nracy)
		snprintf(racy, sizeof(racy), " (and %u written too close to its scan to trust)",
			 nracy);
	log_info("catalog: %u of %u files changed since the catalog was saved%s, checked in "
		 "%.3f s by %u threads; e.g. %s: %s; scanning those %u again", nch, c->nfiles, racy,
		 secs, used, catalog_file_abbrev(show, sizeof(show), c->root, catalog_path(c, ck.first)),
		 ck.first_why, *n);
	return 0;
}
