/* The catalog: building it from the dataset tree, or loading it from its
 * cache file when the tree has not changed (see catalog.h for the contract).
 *
 * Runs on the thread opening the dataset (seerd's main thread, a tool's or a
 * test's); the catalog it returns is read-only afterwards and shared by every
 * reader thread. The tree walk is catalog_walk.c, the check of a cached
 * catalog's directories and files catalog_check.c, the cache image
 * catalog_cache.c, reading samples catalog_read.c, the formats src/fmt/. */
#define _GNU_SOURCE
#include "catalog_int.h"
#include "../fmt/fmt.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "seer.h"
#include "../util/util.h"

/* ---- string pool and builder ------------------------------------------- */

uint32_t catalog_pool_add(struct strpool *p, const char *s)
{
	size_t n = strlen(s) + 1;
	if (p->len + n > p->cap) {
		p->cap = MAX(p->cap * 2, p->len + n + 4096);
		p->buf = xrealloc(p->buf, p->cap);
	}
	memcpy(p->buf + p->len, s, n);
	uint64_t off = p->len;
	p->len += n;
	if (off > UINT32_MAX) {
		log_error("catalog string pool exceeds 4 GiB");
		abort();
	}
	return (uint32_t)off;
}

struct catalog_builder {
	struct catalog *c;
	const struct catalog_opts *o;
	struct strpool pool;
	uint32_t *type_hash;   /* open addressing: type index + 1, 0 = empty */
	uint32_t type_hash_cap;
	uint64_t cap_samples;
	uint32_t cap_types;
	char **classes;      /* sorted class directory names */
	uint32_t nclasses;
	char err[512];
};

int catalog_add_sample(struct catalog_builder *b, uint32_t file, uint64_t offset, uint64_t length,
		   int64_t label, uint32_t type)
{
	struct catalog *c = b->c;
	if (c->nsamples >= UINT32_MAX) {
		catalog_builder_error(b, "more than 2^32-1 samples are not supported");
		return -EOVERFLOW;
	}
	if (c->nsamples == b->cap_samples) {
		b->cap_samples = MAX(b->cap_samples * 2, 1024);
		c->samples = xrealloc(c->samples, b->cap_samples * sizeof(*c->samples));
	}
	c->samples[c->nsamples++] = (struct catalog_sample){
		.offset = offset, .length = length, .file = file, .type = type, .label = label,
	};
	c->files[file].nsamples++;
	return 0;
}

/* Datasets whose files each have their own shape (DLIO's varying sizes) make
 * as many types as files: a hash table keeps interning O(1). */
int catalog_intern_type(struct catalog_builder *b, const struct seer_wire_type *t, uint32_t *idx)
{
	struct catalog *c = b->c;
	if ((uint64_t)(c->ntypes + 1) * 2 > b->type_hash_cap) {
		uint32_t cap = MAX(b->type_hash_cap * 2, 64u);
		uint32_t *h = xcalloc(cap, sizeof(uint32_t));
		for (uint32_t i = 0; i < c->ntypes; i++) {
			uint64_t k = XXH64(&c->types[i], sizeof(*t), 0) & (cap - 1);
			while (h[k])
				k = (k + 1) & (cap - 1);
			h[k] = i + 1;
		}
		free(b->type_hash);
		b->type_hash = h;
		b->type_hash_cap = cap;
	}
	uint64_t k = XXH64(t, sizeof(*t), 0) & (b->type_hash_cap - 1);
	for (; b->type_hash[k]; k = (k + 1) & (b->type_hash_cap - 1)) {
		uint32_t i = b->type_hash[k] - 1;
		if (memcmp(&c->types[i], t, sizeof(*t)) == 0) {
			*idx = i;
			return 0;
		}
	}
	if (c->ntypes == b->cap_types) {
		b->cap_types = MAX(b->cap_types * 2, 8);
		c->types = xrealloc(c->types, b->cap_types * sizeof(*c->types));
	}
	c->types[c->ntypes] = *t;
	b->type_hash[k] = c->ntypes + 1;
	*idx = c->ntypes++;
	return 0;
}

uint64_t *catalog_builder_aux(struct catalog_builder *b, uint32_t file) { return b->c->files[file].aux; }
const struct catalog_params *catalog_builder_params(const struct catalog_builder *b) { return &b->o->params; }
const char *catalog_builder_root(const struct catalog_builder *b) { return b->c->root; }

const char *catalog_builder_path(const struct catalog_builder *b, uint32_t file)
{
	return b->pool.buf + b->c->files[file].path_off;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int64_t catalog_builder_class(const struct catalog_builder *b, const char *relpath)
{
	const char *slash = strchr(relpath, '/');
	if (!slash)
		return b->nclasses == 0 ? 0 : -1;
	char name[NAME_MAX + 1];
	size_t n = MIN((size_t)(slash - relpath), sizeof(name) - 1);
	memcpy(name, relpath, n);
	name[n] = '\0';
	const char *key = name;
	char **hit = bsearch(&key, b->classes, b->nclasses, sizeof(char *), cmp_str);
	return hit ? (int64_t)(hit - b->classes) : -1;
}

void catalog_builder_error(struct catalog_builder *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(b->err, sizeof(b->err), fmt, ap);
	va_end(ap);
}

uint64_t catalog_hash_params(const struct catalog_opts *o)
{
	XXH64_state_t *st = XXH64_createState();
	XXH64_reset(st, 0x5ee2ca7a);
	const char *parts[] = { o->format, o->params.hdf5_data, o->params.hdf5_labels,
				o->params.npz_data, o->params.npz_labels, o->params.npz_sample_axis,
				o->params.extensions };
	for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
		const char *s = parts[i] ? parts[i] : "\x01(default)";
		XXH64_update(st, s, strlen(s) + 1);
	}
	uint64_t h = XXH64_digest(st);
	XXH64_freeState(st);
	return h;
}

uint64_t catalog_hash_content(const struct catalog *c)
{
	XXH64_state_t *st = XXH64_createState();
	XXH64_reset(st, 0xca7a1065);
	XXH64_update(st, c->fmt->name, strlen(c->fmt->name) + 1);
	XXH64_update(st, &c->params_hash, sizeof(c->params_hash));
	for (uint32_t i = 0; i < c->nfiles; i++) {
		const char *p = catalog_path(c, i);
		XXH64_update(st, p, strlen(p) + 1);
		XXH64_update(st, &c->files[i].size, sizeof(c->files[i].size));
	}
	XXH64_update(st, c->samples, c->nsamples * sizeof(*c->samples));
	XXH64_update(st, c->types, c->ntypes * sizeof(*c->types));
	uint64_t h = XXH64_digest(st);
	XXH64_freeState(st);
	return h;
}

void catalog_finish_totals(struct catalog *c)
{
	c->total_bytes = 0;
	c->max_len = 0;
	for (uint64_t i = 0; i < c->nsamples; i++) {
		c->total_bytes += c->samples[i].length;
		c->max_len = MAX(c->max_len, c->samples[i].length);
	}
}

const char *catalog_path_abbrev(char *buf, size_t len, const char *path)
{
	size_t n = strlen(path);
	if (n < len || len < 16) {
		snprintf(buf, len, "%s", path);
		return buf;
	}
	size_t keep = len - 4, head = keep / 3, tail = keep - head; /* head + "..." + tail + NUL */
	snprintf(buf, len, "%.*s...%s", (int)head, path, path + n - tail);
	return buf;
}

const char *catalog_file_abbrev(char *buf, size_t len, const char *root, const char *rel)
{
	char *full = xasprintf("%s/%s", root, rel);
	catalog_path_abbrev(buf, len, full);
	free(full);
	return buf;
}

static void builder_free(struct catalog_builder *b)
{
	for (uint32_t i = 0; i < b->nclasses; i++)
		free(b->classes[i]);
	free(b->classes);
	free(b->type_hash);
	free(b->pool.buf);
}

/* Class directories, for a format labelling by them with some file below
 * the root: every directory of the root, as torchvision's find_classes
 * numbers them (catalog_walk_classes), so that labels agree with an ImageFolder
 * over the same tree. Files only at the root: flat, every label 0. */
static int find_classes(struct catalog_builder *b, char **paths, size_t n, char *err, size_t errlen)
{
	bool nested = false;
	for (size_t i = 0; i < n && !nested; i++)
		nested = strchr(paths[i], '/') != NULL;
	if (!nested || !b->c->fmt->dir_labels)
		return 0;
	int rc = catalog_walk_classes(b->c->root, &b->classes, &b->nclasses, err, errlen);
	b->c->nclasses = b->nclasses;
	return rc;
}

/* Class directories with no sample (has[i] false; torchvision's ImageFolder
 * refuses them: "Found no valid file for the classes ..."): an error naming
 * them and what to do, or with dataset.allow_empty_classes a warning. The
 * numbering stays find_classes' either way. */
static int check_empty_classes(const struct catalog_params *p, const char *root, char *const *names,
			       uint32_t n, const bool *has, char *err, size_t errlen)
{
	uint32_t empty = 0;
	char list[400] = "";
	size_t used = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (has[i])
			continue;
		if (empty < 8 && used < sizeof(list)) {
			int k = snprintf(list + used, sizeof(list) - used, "%s'%s'", empty ? ", " : "",
					 names[i]);
			used += k > 0 ? (size_t)k : 0;
		}
		empty++;
	}
	if (empty == 0)
		return 0;
	char more[48] = "", why[300], show[CAT_PATH_SHOW];
	if (empty > 8)
		snprintf(more, sizeof(more), " and %u more", empty - 8);
	if (p->extensions && *p->extensions)
		snprintf(why, sizeof(why), "no file with an extension of dataset.extensions = %.200s",
			 p->extensions);
	else
		snprintf(why, sizeof(why), "no sample of their own (no file, only hidden ones, or "
			 "a directory already listed under another name)");
	catalog_path_abbrev(show, sizeof(show), root);
	if (p->allow_empty_classes) {
		log_warn("dataset %s: %u of %u class directories hold %s: %s%s; with "
			 "dataset.allow_empty_classes = true they keep their labels (torchvision's "
			 "find_classes numbering) and have no samples", show, empty, n, why, list, more);
		return 0;
	}
	snprintf(err, errlen, "dataset %s: %u of %u class directories hold %s: %s%s. Labels number "
		 "every directory of the root as torchvision's find_classes does (ImageFolder "
		 "refuses such a tree too): put samples in them, remove them, or set "
		 "dataset.allow_empty_classes = true to keep that numbering with no samples for them",
		 show, empty, n, why, list, more);
	return SEER_EDATASET;
}

/* ---- the scan: every listed file opened, stat'ed and scanned ----------------
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
 * scan's. */
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

/* Is file i of the old catalog reused by a rescan (scan_reuse)? */
static bool file_reused(const struct catalog *old, const bool *changed, uint32_t i)
{
	return old && !changed[i] && old->files[i].nsamples > 0;
}

static uint32_t cat_count_reused(const struct catalog *old, const bool *changed)
{
	uint32_t n = 0;
	for (uint32_t i = 0; old && i < old->nfiles; i++)
		n += file_reused(old, changed, i);
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
	if (file_reused(sc->old, sc->changed, i)) {
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

/* Open, stat and scan every listed file (with old: those changed[] says),
 * merged in catalog order. *bytes: what the scan read from the files. */
static int scan_files(struct catalog_builder *b, char **paths, const struct catalog *old,
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

/* The files the walk found become the catalog's files, sorted by path. */
static int list_files(struct catalog_builder *b, struct catalog_walk *w, char *err, size_t errlen)
{
	struct catalog *c = b->c;
	if (w->n == 0) {
		snprintf(err, errlen,
			 "dataset %s holds no files of format %s: point dataset.path at the data "
			 "directory or set dataset.format (one of %s)",
			 c->root, c->fmt->name, fmt_registry_names());
		return SEER_EDATASET;
	}
	if (w->n > UINT32_MAX) {
		snprintf(err, errlen, "dataset %s: more than 2^32-1 files", c->root);
		return SEER_EDATASET;
	}
	qsort(w->paths, w->n, sizeof(char *), cmp_str);
	int rc = find_classes(b, w->paths, w->n, err, errlen);
	if (rc == 0 && b->nclasses > 0) {
		bool *has = xcalloc(b->nclasses, sizeof(bool));
		for (size_t i = 0; i < w->n; i++) {
			int64_t k = catalog_builder_class(b, w->paths[i]);
			if (k >= 0)
				has[k] = true;
		}
		rc = check_empty_classes(&b->o->params, c->root, b->classes, b->nclasses, has, err,
					 errlen);
		free(has);
	}
	if (rc != 0)
		return rc;
	c->nfiles = (uint32_t)w->n;
	c->files = xcalloc(w->n, sizeof(*c->files));
	for (size_t i = 0; i < w->n; i++)
		c->files[i].path_off = catalog_pool_add(&b->pool, w->paths[i]);
	return 0;
}

/* The walk a cached catalog's directories, checked unchanged, stand for:
 * its files and directories (paths into b's pool). */
static void walk_from(struct catalog_walk *w, struct strpool *pool, const struct catalog *old)
{
	w->ndirs = w->capdirs = old->ndirs;
	w->dirs = xcalloc(MAX(old->ndirs, 1u), sizeof(*w->dirs));
	for (uint32_t i = 0; i < old->ndirs; i++)
		w->dirs[i] = (struct catalog_dir){
			.path_off = catalog_pool_add(pool, old->strpool + old->dirs[i].path_off),
			.mtime_ns = old->dirs[i].mtime_ns };
	w->n = w->cap = old->nfiles;
	w->paths = xcalloc(MAX(old->nfiles, 1u), sizeof(*w->paths));
	for (uint32_t i = 0; i < old->nfiles; i++)
		w->paths[i] = xstrdup(catalog_path(old, i));
	w->skipped_links = old->skipped_links;
}

/* Walk and scan root; or, with old (a cached catalog whose directories are
 * unchanged), scan again its files that changed[] names and reuse the
 * others' entries. scan_ns: when the scan (or the check before it) began. */
static int cat_build(const struct catalog_opts *o, const struct fmt_ops *fmt, const char *root,
		     const struct catalog *old, const bool *changed, int64_t scan_ns,
		     struct catalog **out, char *err, size_t errlen)
{
	struct catalog *c = xcalloc(1, sizeof(*c));
	c->root = xstrdup(root);
	c->fmt = fmt;
	c->scan_ns = scan_ns;
	c->params_hash = catalog_hash_params(o);
	struct catalog_builder b = { .c = c, .o = o };
	struct catalog_walk w = { .prog = o->prog };
	uint64_t t0 = now_ns();
	int rc = 0;
	if (old)
		walk_from(&w, &b.pool, old);
	else
		rc = catalog_walk_tree(root, fmt, &o->params, o->progress, &b.pool, &w, err, errlen);
	if (rc == 0)
		rc = list_files(&b, &w, err, errlen);
	if (rc == 0)
		c->skipped_links = w.skipped_links;
	if (rc == 0 && !old && (o->progress || w.n >= 100000))
		log_info("catalog: %zu files under %s listed in %.1f s", w.n, root,
			 (double)(now_ns() - t0) / 1e9);
	if (rc == 0)
		rc = scan_files(&b, w.paths, old, changed, &c->scan_bytes, err, errlen);
	if (rc == 0)
		c->files_scanned = c->nfiles - cat_count_reused(old, changed);
	if (rc == 0 && c->nsamples == 0) {
		snprintf(err, errlen, "dataset %s: its %u %s files hold no samples", root, c->nfiles,
			 fmt->name);
		rc = SEER_EDATASET;
	}
	if (rc == 0) {
		c->ndirs = (uint32_t)w.ndirs;
		c->dirs = w.dirs;
		w.dirs = NULL;
		c->strpool = b.pool.buf;
		c->strpool_len = b.pool.len;
		b.pool.buf = NULL;
		catalog_finish_totals(c);
		c->hash = catalog_hash_content(c);
		rc = catalog_attach_shared(c, err, errlen);
	}
	if (rc == 0) {
		*out = c;
		c = NULL;
	}
	catalog_walk_free(&w);
	builder_free(&b);
	catalog_free(c);
	return rc;
}

void catalog_free(struct catalog *c)
{
	if (!c)
		return;
	free(c->root);
	free(c->files);
	free(c->samples);
	free(c->types);
	free(c->dirs);
	free(c->strpool);
	free(c->cache_path);
	free(c->images);
	if (c->fmt_shared)
		c->fmt->shared_free(c->fmt_shared);
	free(c);
}

int catalog_attach_shared(struct catalog *c, char *err, size_t errlen)
{
	if (!c->fmt->shared_new)
		return 0;
	c->fmt_shared = c->fmt->shared_new(c);
	if (c->fmt_shared)
		return 0;
	snprintf(err, errlen, "out of memory for the %s readers' shared state", c->fmt->name);
	return -ENOMEM;
}

/* A cached catalog's class directories checked as a scan would
 * (check_empty_classes, with this start's dataset.allow_empty_classes):
 * false to rescan (the scan then says what is wrong). */
static bool cat_classes_ok(const struct catalog *c, const struct catalog_opts *o)
{
	if (!c->fmt->dir_labels || c->nclasses == 0)
		return true;
	char **names, err[1024];
	uint32_t n;
	if (catalog_walk_classes(c->root, &names, &n, err, sizeof(err)) != 0)
		return false;
	bool ok = n == c->nclasses;
	if (ok) {
		bool *has = xcalloc(n, sizeof(bool));
		for (uint64_t i = 0; i < c->nsamples; i++)
			if (c->samples[i].label >= 0 && c->samples[i].label < (int64_t)n)
				has[c->samples[i].label] = true;
		ok = check_empty_classes(&o->params, c->root, names, n, has, err, sizeof(err)) == 0;
		free(has);
	}
	for (uint32_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return ok;
}

static struct catalog *cat_try_load(const struct catalog_opts *o, const char *root, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	struct stat st;
	struct catalog *c = NULL;
	char why[512];
	if (path_check_owned_file(fd, path, why, sizeof(why)) != 0) {
		log_warn("catalog cache not trusted (%s); rescanning", why);
		close(fd);
		return NULL;
	}
	if (fstat(fd, &st) == 0 && st.st_size > 0) {
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m != MAP_FAILED) {
			char err[256];
			if (catalog_deserialize(m, (size_t)st.st_size, &c, err, sizeof(err)) != 0)
				log_warn("catalog cache %s unusable (%s); rescanning", path, err);
			munmap(m, (size_t)st.st_size);
		}
	}
	close(fd);
	if (!c)
		return NULL;
	if (strcmp(c->root, root) != 0 || c->params_hash != catalog_hash_params(o) ||
	    strcmp(c->fmt->name, o->format) != 0) {
		log_info("catalog cache %s was built for other settings; rescanning", path);
	} else if (!catalog_check_dirs(c, o)) {
		log_info("dataset %s changed since its catalog was saved; rescanning", root);
	} else if (cat_classes_ok(c, o)) {
		return c;
	}
	catalog_free(c);
	return NULL;
}

/* Save c as the catalog cache file cpath (a failure is logged: the next
 * start rescans). */
static void cat_save(const struct catalog *c, const char *cache_dir, const char *cpath)
{
	void *img;
	size_t len;
	int mk = mkdir_p(cache_dir, 0700);
	if (mk == 0 && (mk = catalog_serialize(c, &img, &len)) == 0) {
		mk = write_file_atomic(cpath, img, len);
		free(img);
	}
	if (mk != 0)
		log_warn("cannot save the catalog to %s: %s (the next start rescans)", cpath,
			 strerror(-mk));
}

/* catalog_opts.image_sizes: each sample's image size, read from its header;
 * with old (c rescanned from it, cat_build), the sizes old holds for the
 * files reused are kept, only the others are read. */
static int cat_add_images(struct catalog *c, const struct catalog *old, const bool *changed,
			  char *err, size_t errlen)
{
	uint64_t t0 = now_ns(), bad = 0;
	char first[512] = "";
	bool *redo = NULL;
	if (old && old->images) {
		redo = xcalloc(MAX(c->nfiles, 1u), sizeof(bool));
		free(c->images);
		c->images = xcalloc(MAX(c->nsamples, 1ull), sizeof(*c->images));
		for (uint32_t i = 0; i < c->nfiles; i++) {
			const struct catalog_file *f = &c->files[i], *of = &old->files[i];
			redo[i] = !file_reused(old, changed, i) || f->nsamples != of->nsamples;
			if (!redo[i])
				memcpy(&c->images[f->first], &old->images[of->first],
				       f->nsamples * sizeof(*c->images));
		}
	}
	int rc = catalog_probe_images_some(c, redo, &bad, first, sizeof(first));
	free(redo);
	if (rc != 0) {
		snprintf(err, errlen, "out of memory recording the image sizes of %llu samples",
			 (unsigned long long)c->nsamples);
		return -ENOMEM;
	}
	log_info("catalog: image sizes of %llu samples read from their headers in %.2f s%s%s",
		 (unsigned long long)c->nsamples, (double)(now_ns() - t0) / 1e9,
		 first[0] ? "; not JPEG/PNG images: " : "", first);
	if (bad > 1)
		log_info("catalog: %llu samples in all are not JPEG/PNG images",
			 (unsigned long long)bad);
	return 0;
}

/* A cached catalog found current is the catalog (with image sizes added
 * when asked for and missing). Takes c and cpath. */
static int cat_loaded(struct catalog *c, const struct catalog_opts *o, char *cpath,
		      struct catalog **out, char *err, size_t errlen)
{
	log_info("catalog: %llu samples in %u files loaded from %s",
		 (unsigned long long)c->nsamples, c->nfiles, cpath);
	if (o->image_sizes && !c->images) {
		int rc = cat_add_images(c, NULL, NULL, err, errlen);
		if (rc != 0) {
			catalog_free(c);
			free(cpath);
			return rc;
		}
		cat_save(c, o->cache_dir, cpath);
	}
	c->cache_path = cpath;
	*out = c;
	return 0;
}

/* Wall-clock now, in the files' timestamps' terms. */
static int64_t real_ns(void)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	return catalog_ts_ns(&now);
}

int catalog_open(const struct catalog_opts *o, struct catalog **out, char *err, size_t errlen)
{
	const struct fmt_ops *fmt = fmt_registry_find(o->format);
	if (!fmt) {
		snprintf(err, errlen, "unknown dataset format '%s' (known: %s)", o->format,
			 fmt_registry_names());
		return SEER_ECONFIG;
	}
	char root[PATH_MAX], show[CAT_PATH_SHOW]; /* abbreviated: the reason must survive */
	if (!o->root || !realpath(o->root, root)) {
		int e = errno;
		snprintf(err, errlen,
			 "dataset path %s: %s: set dataset.path to the directory holding the samples",
			 o->root ? catalog_path_abbrev(show, sizeof(show), o->root) : "(unset)",
			 o->root ? strerror(e) : "not set");
		return SEER_EDATASET;
	}
	struct stat st;
	if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "dataset path %s is not a directory",
			 catalog_path_abbrev(show, sizeof(show), root));
		return SEER_EDATASET;
	}
	struct catalog_opts ro = *o;
	ro.root = root;
	char *cpath = o->cache_dir ? catalog_cache_path(&ro) : NULL;
	/* a rescan's start: before the directories are checked, so that a
	 * change after the check is later than the saved scan time */
	int64_t scan_ns = real_ns();
	struct catalog *old = NULL;
	bool *changed = NULL;
	if (cpath && !o->rebuild)
		old = cat_try_load(&ro, root, cpath);
	if (old) {
		uint32_t nchanged = 0;
		int rc = catalog_check_files(old, &ro, &changed, &nchanged);
		if (rc == -ECANCELED) {
			snprintf(err, errlen, "dataset %s: the check of the cached catalog's files was "
				 "stopped", root);
			catalog_free(old);
			free(cpath);
			return rc;
		}
		if (rc == 0 && nchanged == 0) {
			free(changed);
			return cat_loaded(old, o, cpath, out, err, errlen);
		}
		if (rc != 0) { /* the full rescan says what is wrong */
			catalog_free(old);
			old = NULL;
		}
	}
	if (!old)
		scan_ns = real_ns();
	struct catalog *c = NULL;
	uint64_t t0 = now_ns();
	int rc = cat_build(&ro, fmt, root, old, changed, scan_ns, &c, err, errlen);
	if (rc == 0) {
		char sz[32], again[96] = "";
		if (old)
			snprintf(again, sizeof(again), " (%u changed files scanned again, %u reused)",
				 c->files_scanned, c->nfiles - c->files_scanned);
		log_info("catalog: %llu samples (%s) in %u files scanned in %.2f s%s",
			 (unsigned long long)c->nsamples, fmt_size(sz, sizeof(sz), c->total_bytes),
			 c->nfiles, (double)(now_ns() - t0) / 1e9, again);
		/* a cached catalog's image sizes stay with it (cat_loaded) */
		if (o->image_sizes || (old && old->images))
			rc = cat_add_images(c, old, changed, err, errlen);
	}
	catalog_free(old);
	free(changed);
	if (rc != 0) {
		catalog_free(c);
		free(cpath);
		return rc;
	}
	if (cpath)
		cat_save(c, o->cache_dir, cpath);
	c->cache_path = cpath;
	*out = c;
	return 0;
}
