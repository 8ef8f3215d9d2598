/* The scan: every listed file opened, stat'ed and scanned into the catalog.
 *
 * On a parallel file system each open and fstat is a metadata round trip
 * (about 1 ms), so files are scanned by several threads at once, the caller's
 * among them. Each file is scanned into a slot of its own, with a builder
 * whose samples and types are the slot's (the format's calls are unchanged:
 * they see one file of the catalog); the slots are merged into the catalog
 * strictly in file order, under the scan's lock, by whichever thread
 * completes the next file in order. Types are interned in the order the serial
 * scan met them, so the catalog (and its hash) is the same for any number of
 * threads. Files are handed out at most SCAN_WINDOW ahead of the merge (the
 * memory of a scan does not grow with the dataset). The first failing file
 * in catalog order is the one reported, as in a serial scan.
 *
 * A rescan of a cached catalog whose files were found changed (scan.old,
 * scan.changed: the same file list) scans only those: an unchanged file's
 * slot is filled from the old catalog's entries, with no system call, and
 * merged like a scanned one, so the catalog and its hash equal a full
 * scan's.
 *
 * Runs on the thread building the catalog and the helper threads it starts
 * (ended before catalog_scan_files returns). A file that cannot be opened
 * or that its format refuses fails the scan with a message naming it. */
#define _GNU_SOURCE
#include "catalog_int.h"
#include "../fmt/fmt.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seer.h"
#include "../util/util.h"

#define SCAN_WINDOW 1024u

struct scan_slot {
	struct catalog_sample *samples; /* type: index into types */
	uint64_t nsamples, cap;
	struct seer_wire_type *types;
	uint32_t ntypes, cap_types;
	int rc;
	bool done;
	char err[1024];
};

struct scan {
	struct catalog_builder *b;  /* the catalog's builder (merge only, under mu) */
	char **paths;
	int dfd;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t next, merged;  /* files handed out, files merged (under mu) */
	bool failed;            /* a file failed or a stop came: hand out no more */
	int rc;
	char *err;
	size_t errlen;
	struct scan_slot *slots; /* SCAN_WINDOW, file i in slots[i % SCAN_WINDOW] */
	uint64_t bytes;         /* read from the files (fmt_thread_bytes), under mu */
	uint64_t t_log;         /* ns of the last progress line */
	const struct catalog *old; /* NULL, or the cached catalog of the same files */
	const bool *changed;    /* with old: which files to scan again */
};

bool catalog_scan_reused(const struct catalog *old, const bool *changed, uint32_t i)
{
	return old && !changed[i] && old->files[i].nsamples > 0;
}

uint32_t catalog_scan_count_reused(const struct catalog *old, const bool *changed)
{
	uint32_t n = 0;
	for (uint32_t i = 0; old && i < old->nfiles; i++)
		n += catalog_scan_reused(old, changed, i);
	return n;
}

/* File i's entries out of the old catalog into its slot, as its scan would
 * have put them: types in order of first use (every format interns its
 * file's type before adding samples; a file with no sample is scanned
 * instead, so an unused type is interned as a full scan would). */
static void scan_reuse(struct scan *sc, uint32_t i)
{
	const struct catalog *old = sc->old;
	const struct catalog_file *of = &old->files[i];
	struct catalog_file *f = &sc->b->c->files[i];
	struct scan_slot *sl = &sc->slots[i % SCAN_WINDOW];
	f->size = of->size;
	f->mtime_ns = of->mtime_ns;
	f->ctime_ns = of->ctime_ns;
	memcpy(f->aux, of->aux, sizeof(f->aux));
	if (sl->cap < of->nsamples) {
		sl->cap = of->nsamples;
		sl->samples = xrealloc(sl->samples, sl->cap * sizeof(*sl->samples));
	}
	sl->ntypes = 0;
	for (uint64_t k = 0; k < of->nsamples; k++) {
		struct catalog_sample x = old->samples[of->first + k];
		const struct seer_wire_type *t = &old->types[x.type];
		uint32_t j = 0;
		while (j < sl->ntypes && memcmp(&sl->types[j], t, sizeof(*t)) != 0)
			j++;
		if (j == sl->ntypes) {
			if (sl->ntypes == sl->cap_types) {
				sl->cap_types = MAX(sl->cap_types * 2, 8u);
				sl->types = xrealloc(sl->types, sl->cap_types * sizeof(*sl->types));
			}
			sl->types[sl->ntypes++] = *t;
		}
		x.type = j;
		x.file = i;
		sl->samples[k] = x;
	}
	sl->nsamples = of->nsamples;
	sl->rc = 0;
	sl->err[0] = '\0';
}

/* Scan file i into its slot (no lock held: the slot and files[i] are this
 * thread's until done is set). tb holds the thread's type hash. */
static void scan_one(struct scan *sc, uint32_t i, struct catalog_builder *tb)
{
	struct catalog *c = sc->b->c;
	struct scan_slot *sl = &sc->slots[i % SCAN_WINDOW];
	const char *rel = sc->paths[i];
	char show[CAT_PATH_SHOW];
	if (catalog_scan_reused(sc->old, sc->changed, i)) {
		scan_reuse(sc, i);
		return;
	}
	sl->rc = 0;
	sl->err[0] = '\0';
	int fd = openat(sc->dfd, rel, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		int e = errno;
		snprintf(sl->err, sizeof(sl->err), "dataset file %s: %s",
			 catalog_file_abbrev(show, sizeof(show), c->root, rel), strerror(e));
		if (fd >= 0)
			close(fd);
		sl->rc = SEER_EDATASET;
		return;
	}
	c->files[i].size = (uint64_t)st.st_size;
	c->files[i].mtime_ns = catalog_ts_ns(&st.st_mtim);
	c->files[i].ctime_ns = catalog_ts_ns(&st.st_ctim);
	/* the file's own catalog: the slot's arrays, the shared files and strings */
	struct catalog fc = { .root = c->root, .fmt = c->fmt, .nfiles = c->nfiles, .files = c->files,
			      .samples = sl->samples, .types = sl->types };
	tb->c = &fc;
	tb->cap_samples = sl->cap;
	tb->cap_types = sl->cap_types;
	tb->err[0] = '\0';
	if (tb->type_hash)
		memset(tb->type_hash, 0, tb->type_hash_cap * sizeof(uint32_t));
	c->files[i].nsamples = 0;
	int rc = c->fmt->scan(tb, i, fd, (uint64_t)st.st_size);
	close(fd);
	sl->samples = fc.samples;
	sl->nsamples = fc.nsamples;
	sl->cap = tb->cap_samples;
	sl->types = fc.types;
	sl->ntypes = fc.ntypes;
	sl->cap_types = tb->cap_types;
	tb->c = NULL;
	if (rc != 0) {
		snprintf(sl->err, sizeof(sl->err), "dataset file %s: %s",
			 catalog_file_abbrev(show, sizeof(show), c->root, rel),
			 tb->err[0] ? tb->err : seer_strerror(rc));
		sl->rc = rc == -ENOMEM ? rc : SEER_EDATASET;
	}
}

/* Merge the slots done in file order into the catalog (mu held). */
static void scan_merge(struct scan *sc)
{
	struct catalog_builder *b = sc->b;
	struct catalog *c = b->c;
	while (sc->merged < c->nfiles && sc->slots[sc->merged % SCAN_WINDOW].done) {
		uint32_t i = sc->merged;
		struct scan_slot *sl = &sc->slots[i % SCAN_WINDOW];
		sl->done = false;
		int rc = sl->rc;
		if (rc == 0 && !sc->failed) {
			uint32_t map[16], *m = sl->ntypes <= 16 ? map : xcalloc(sl->ntypes, sizeof(*m));
			for (uint32_t t = 0; t < sl->ntypes && rc == 0; t++)
				rc = catalog_intern_type(b, &sl->types[t], &m[t]);
			c->files[i].first = c->nsamples;
			c->files[i].nsamples = 0;
			b->err[0] = '\0';
			for (uint64_t k = 0; k < sl->nsamples && rc == 0; k++) {
				const struct catalog_sample *x = &sl->samples[k];
				rc = catalog_add_sample(b, i, x->offset, x->length, x->label, m[x->type]);
			}
			if (m != map)
				free(m);
			if (rc != 0) {
				char show[CAT_PATH_SHOW];
				snprintf(sl->err, sizeof(sl->err), "dataset file %s: %s",
					 catalog_file_abbrev(show, sizeof(show), c->root, sc->paths[i]),
					 b->err[0] ? b->err : seer_strerror(rc));
			}
		}
		if (rc != 0 && !sc->failed) {
			snprintf(sc->err, sc->errlen, "%s", sl->err);
			sc->rc = rc == -ENOMEM ? rc : SEER_EDATASET;
			sc->failed = true;
		}
		sc->merged++;
		const struct catalog_opts *o = b->o;
		if (o->prog)
			atomic_store_explicit(&o->prog->scanned, sc->merged, memory_order_relaxed);
		if (o->progress && (sc->merged % 100000 == 0 || now_ns() - sc->t_log >= 10000000000ull)) {
			sc->t_log = now_ns();
			log_info("catalog: scanned %u of %u files", sc->merged, c->nfiles);
		}
	}
}

/* One scanning thread (the caller's too): take the next file within the
 * window, scan it, merge what is complete in order; until every file is
 * handed out, or a failure or a stop. */
static void *scan_thread(void *arg)
{
	struct scan *sc = arg;
	struct catalog_builder *b = sc->b;
	struct catalog_builder tb = { .o = b->o, .pool = b->pool, .classes = b->classes,
				  .nclasses = b->nclasses };
	uint64_t b0 = fmt_thread_bytes();
	const struct catalog_opts *o = b->o;
	pthread_mutex_lock(&sc->mu);
	for (;;) {
		if (!sc->failed && o->prog && atomic_load(&o->prog->stop)) {
			snprintf(sc->err, sc->errlen, "dataset %s: the catalog scan was stopped after "
				 "%u of %u files", b->c->root, sc->merged, b->c->nfiles);
			sc->rc = -ECANCELED;
			sc->failed = true;
			pthread_cond_broadcast(&sc->cv);
		}
		if (sc->failed || sc->next >= b->c->nfiles)
			break;
		if (sc->next >= sc->merged + SCAN_WINDOW) {
			pthread_cond_wait(&sc->cv, &sc->mu);
			continue;
		}
		uint32_t i = sc->next++;
		pthread_mutex_unlock(&sc->mu);
		scan_one(sc, i, &tb);
		pthread_mutex_lock(&sc->mu);
		sc->slots[i % SCAN_WINDOW].done = true;
		if (i == sc->merged) {
			scan_merge(sc);
			pthread_cond_broadcast(&sc->cv);
		}
	}
	sc->bytes += fmt_thread_bytes() - b0;
	pthread_mutex_unlock(&sc->mu);
	free(tb.type_hash);
	return NULL;
}

int catalog_scan_files(struct catalog_builder *b, char **paths, const struct catalog *old,
		       const bool *changed, uint64_t *bytes, char *err, size_t errlen)
{
	struct catalog *c = b->c;
	struct scan sc = { .b = b, .paths = paths, .err = err, .errlen = errlen,
			   .t_log = now_ns(), .old = old, .changed = changed };
	sc.dfd = open(c->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sc.dfd < 0) {
		snprintf(err, errlen, "dataset %s: %s", c->root, strerror(errno));
		return SEER_EDATASET;
	}
	if (b->o->prog)
		atomic_store(&b->o->prog->total, c->nfiles);
	sc.slots = xcalloc(MIN(c->nfiles, SCAN_WINDOW), sizeof(*sc.slots));
	pthread_mutex_init(&sc.mu, NULL);
	pthread_cond_init(&sc.cv, NULL);
	unsigned n = b->o->threads ? b->o->threads : CAT_SCAN_THREADS;
	n = (unsigned)MIN((uint64_t)n, (uint64_t)c->nfiles);
	pthread_t *th = xcalloc(MAX(n, 1u), sizeof(*th));
	unsigned started = 0;
	for (unsigned k = 1; k < n; k++, started++)
		if (pthread_create(&th[k], NULL, scan_thread, &sc) != 0)
			break; /* fewer threads: the scan is slower, not wrong */
	scan_thread(&sc);
	for (unsigned k = 1; k <= started; k++)
		pthread_join(th[k], NULL);
	/* a thread that stopped early may leave files done but not merged */
	if (!sc.failed)
		scan_merge(&sc);
	free(th);
	for (uint32_t k = 0; k < MIN(c->nfiles, SCAN_WINDOW); k++) {
		free(sc.slots[k].samples);
		free(sc.slots[k].types);
	}
	free(sc.slots);
	pthread_cond_destroy(&sc.cv);
	pthread_mutex_destroy(&sc.mu);
	close(sc.dfd);
	*bytes = sc.bytes;
	return sc.rc;
}
