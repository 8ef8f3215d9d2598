/* Internals shared by the catalog's files (catalog.c builds and opens,
 * catalog_walk.c lists the tree, catalog_cache.c saves and loads, catalog_read.c
 * reads samples, catalog_scan.c scans the files, catalog_check.c checks a
 * cached catalog against the files).
 * Not for formats or callers: see catalog.h.
 * All of it runs on the thread building or loading the catalog. */
#ifndef SEER_CATALOG_INT_H
#define SEER_CATALOG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "catalog.h"

/* NUL-terminated strings appended to one buffer, found by offset. */
struct strpool {
	char *buf;
	uint64_t len, cap;
};
/* Offset of a copy of s; aborts past 4 GiB (offsets are 32-bit). */
uint32_t catalog_pool_add(struct strpool *p, const char *s);

/* A catalog being built (catalog.c), seen by the formats through the
 * catalog_builder_* functions; the scan (catalog_scan.c) gives each file
 * one of its own. */
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

/* What a walk of the dataset tree found: the relative paths of the files the
 * format accepts (malloc'd, unsorted) and every directory walked with its
 * mtime (path_off into the pool). */
struct catalog_walk {
	char **paths;
	size_t n, cap;
	struct catalog_dir *dirs;
	size_t ndirs, capdirs;
	uint64_t skipped_links;  /* links to directories walked before, not followed */
	struct catalog_progress *prog; /* set by the caller: counts `listed`, obeys `stop` */
};
/* Walk root, listing up to `threads` directories at once (the result is the
 * same for any number; 0 or 1: one). 0, or SEER_EDATASET / -errno with why in
 * err (naming the path, the first failing one in walk order), -ECANCELED when
 * w->prog->stop was set.
 * w holds what was found so far either way: free it with catalog_walk_free. */
int catalog_walk_tree(const char *root, const struct fmt_ops *fmt, const struct catalog_params *params,
		      bool progress, unsigned threads, struct strpool *pool, struct catalog_walk *w,
		      char *err, size_t errlen);
void catalog_walk_free(struct catalog_walk *w);
/* The class directories of root as torchvision's find_classes lists them:
 * every entry that is a directory, a symbolic link to one included, hidden
 * names included, sorted bytewise (Python sorts str by code point: the same
 * order for UTF-8 names). *names malloc'd (free each and the array); 0 or
 * SEER_EDATASET / -ENOMEM with why in err. */
int catalog_walk_classes(const char *root, char ***names, uint32_t *n, char *err, size_t errlen);

uint64_t catalog_hash_params(const struct catalog_opts *o);
uint64_t catalog_hash_content(const struct catalog *c);
/* Give c its format's shared reader state (fmt_ops.shared_new). 0 or -ENOMEM. */
int catalog_attach_shared(struct catalog *c, char *err, size_t errlen);
/* catalog_probe_images, reading only the samples of the files redo[] marks
 * (all when redo is NULL or c->images is): the others keep c->images. */
int catalog_probe_images_some(struct catalog *c, const bool *redo, uint64_t *nonimage, char *first,
			      size_t firstlen);
/* total_bytes and max_len from the samples. */
void catalog_finish_totals(struct catalog *c);

/* root/rel for a message, abbreviated (catalog_path_abbrev). Returns buf. */
const char *catalog_file_abbrev(char *buf, size_t len, const char *root, const char *rel);

/* catalog_scan.c: open, stat and scan the files paths[0..b->c->nfiles)
 * (b->c->files listed), by catalog_opts.threads threads, merged in catalog
 * order; with old (a cached catalog of the same files), only those changed[]
 * marks, the others' entries copied from old. *bytes: what the scan read
 * from the files. 0, or SEER_EDATASET / -ENOMEM / -ECANCELED with err
 * naming the first failing file in catalog order. */
int catalog_scan_files(struct catalog_builder *b, char **paths, const struct catalog *old,
		       const bool *changed, uint64_t *bytes, char *err, size_t errlen);
/* Is file i of old reused by such a rescan (not changed, and with samples:
 * a file with none is scanned, so that its type is interned as in a full
 * scan)? And how many are. */
bool catalog_scan_reused(const struct catalog *old, const bool *changed, uint32_t i);
uint32_t catalog_scan_count_reused(const struct catalog *old, const bool *changed);

/* catalog_check.c: is the cached catalog c current? Its directories as at
 * its scan, none changed within CAT_RACY_NS of it (false on a stop too: the
 * rescan that follows stops). */
bool catalog_check_dirs(const struct catalog *c, const struct catalog_opts *o);
/* Stat every file of c: *changed (malloc'd, per file) marks those to scan
 * again (changed or racy: catalog_file_state), *n counts them; the outcome is
 * logged (how many, one example and why, the time). 0, -ECANCELED (a stop),
 * or -errno when the root cannot be opened (the caller rescans everything,
 * which reports it). */
int catalog_check_files(const struct catalog *c, const struct catalog_opts *o, bool **changed,
			uint32_t *n);

/* Wall-clock nanoseconds of a timespec (file times, scan start). */
static inline int64_t catalog_ts_ns(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

#endif /* SEER_CATALOG_INT_H */
