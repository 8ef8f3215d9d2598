/* The catalog: building it from the dataset tree, or loading it from its
 * cache file when the tree has not changed (see catalog.h for the contract).
 *
 * Runs on the thread opening the dataset (seerd's main thread, a tool's or a
 * test's); the catalog it returns is read-only afterwards and shared by every
 * reader thread. The tree walk is catalog_walk.c, the scan of the files
 * catalog_scan.c, the check of a cached catalog's directories and files
 * catalog_check.c, the cache image catalog_cache.c, reading samples
 * catalog_read.c, the formats src/fmt/. */
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
	/* tar's keys, only for tar: the other formats' catalogs keep their hash */
	if (o->format && strcmp(o->format, "tar") == 0) {
		const char *tp[] = { o->params.tar_extensions, o->params.tar_label,
				     o->params.skip_corrupt ? "skip" : "fail" };
		for (size_t i = 0; i < ARRAY_SIZE(tp); i++) {
			const char *s = tp[i] ? tp[i] : "\x01(default)";
			XXH64_update(st, s, strlen(s) + 1);
		}
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
		rc = catalog_walk_tree(root, fmt, &o->params, o->progress,
				       o->threads ? o->threads : CAT_SCAN_THREADS, &b.pool, &w, err,
				       errlen);
	if (rc == 0)
		rc = list_files(&b, &w, err, errlen);
	if (rc == 0)
		c->skipped_links = w.skipped_links;
	if (rc == 0 && !old && (o->progress || w.n >= 100000))
		log_info("catalog: %zu files under %s listed in %.1f s", w.n, root,
			 (double)(now_ns() - t0) / 1e9);
	if (rc == 0)
		rc = catalog_scan_files(&b, w.paths, old, changed, &c->scan_bytes, err, errlen);
	if (rc == 0)
		c->files_scanned = c->nfiles - catalog_scan_count_reused(old, changed);
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
			redo[i] = !catalog_scan_reused(old, changed, i) || f->nsamples != of->nsamples;
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
	free(cpath);
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
	free(cpath);
	*out = c;
	return 0;
}
