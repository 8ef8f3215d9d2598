/* Listing the dataset tree: which files belong to the dataset.
 *
 * Runs on the thread building the catalog. */
#define _GNU_SOURCE
#include "catalog_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seer.h"
#include "util.h"

struct walk {
	struct cat_walk *out;
	struct strpool *pool;
	const struct fmt_ops *fmt;
	const struct cat_params *params;
	bool progress;
	char err[512];
};

static int walk_dir(struct walk *w, int parent_fd, const char *name, const char *rel)
{
	struct cat_walk *o = w->out;
	int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(w->err, sizeof(w->err), "cannot open directory %s: %s", *rel ? rel : ".",
			 strerror(errno));
		return -errno;
	}
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	if (o->ndirs == o->capdirs) {
		o->capdirs = MAX(o->capdirs * 2, 64);
		o->dirs = xrealloc(o->dirs, o->capdirs * sizeof(*o->dirs));
	}
	o->dirs[o->ndirs++] = (struct cat_dir){
		.path_off = cat_pool_add(w->pool, rel), .mtime_ns = cat_ts_ns(&st.st_mtim),
	};
	DIR *d = fdopendir(fd);
	if (!d) {
		int e = -errno;
		close(fd);
		return e;
	}
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue; /* ".", "..", hidden files and seer's own temp files */
		unsigned char type = de->d_type;
		if (type == DT_UNKNOWN || type == DT_LNK) {
			struct stat es;
			if (fstatat(dirfd(d), de->d_name, &es, 0) != 0)
				continue; /* dangling link */
			type = S_ISDIR(es.st_mode) ? DT_DIR : S_ISREG(es.st_mode) ? DT_REG : DT_UNKNOWN;
		}
		char *child = *rel ? xasprintf("%s/%s", rel, de->d_name) : xstrdup(de->d_name);
		if (type == DT_DIR) {
			rc = walk_dir(w, dirfd(d), de->d_name, child);
			free(child);
			if (rc != 0)
				break;
		} else if (type == DT_REG && (!w->fmt->accept || w->fmt->accept(w->params, child))) {
			if (o->n == o->cap) {
				o->cap = MAX(o->cap * 2, 1024);
				o->paths = xrealloc(o->paths, o->cap * sizeof(char *));
			}
			o->paths[o->n++] = child;
			if (w->progress && o->n % 100000 == 0)
				log_info("catalog: %zu files found so far", o->n);
		} else {
			free(child);
		}
	}
	closedir(d);
	return rc;
}

int cat_walk_tree(const char *root, const struct fmt_ops *fmt, const struct cat_params *params,
		  bool progress, struct strpool *pool, struct cat_walk *out, char *err, size_t errlen)
{
	struct walk w = { .out = out, .pool = pool, .fmt = fmt, .params = params,
			  .progress = progress };
	int rc = walk_dir(&w, AT_FDCWD, root, "");
	if (rc != 0) {
		snprintf(err, errlen, "dataset %s: %s", root, w.err[0] ? w.err : strerror(-rc));
		return SEER_EDATASET;
	}
	return 0;
}

void cat_walk_free(struct cat_walk *w)
{
	for (size_t i = 0; i < w->n; i++)
		free(w->paths[i]);
	free(w->paths);
	free(w->dirs);
	memset(w, 0, sizeof(*w));
}
