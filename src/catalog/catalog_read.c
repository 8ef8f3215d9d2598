/* Reading samples: per-thread readers over a shared, read-only catalog.
 *
 * A reader (struct catalog_reader) belongs to one thread at a time: it keeps a few
 * files open (checked against the catalog's size and mtime when opened) and
 * the format's per-reader state. catalog_read asks the format for one sample and
 * turns any failure into a message naming the sample, its file and why. */
#define _GNU_SOURCE
#include "catalog_int.h"
#include "../fmt/fmt.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seer.h"
#include "../util/util.h"

int catalog_reader_init(struct catalog_reader *rd, const struct catalog *c)
{
	memset(rd, 0, sizeof(*rd));
	rd->cat = c;
	rd->fd_max = CAT_FD_CACHE;
	for (int i = 0; i < CAT_FD_CACHE; i++)
		rd->fd[i] = -1;
	return 0;
}

void catalog_reader_limit_fds(struct catalog_reader *rd, unsigned n)
{
	rd->fd_max = n < 1 ? 1 : n > CAT_FD_CACHE ? CAT_FD_CACHE : n;
	for (unsigned i = rd->fd_max; i < CAT_FD_CACHE; i++) {
		if (rd->fd[i] >= 0)
			close(rd->fd[i]);
		rd->fd[i] = -1;
	}
}

/* Open path read-only for slot `victim`; out of descriptors, close the
 * victim's file first (it is replaced anyway) and try once more. */
static int reader_open(struct catalog_reader *rd, const char *path, int victim)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && (errno == EMFILE || errno == ENFILE) && rd->fd[victim] >= 0) {
		close(rd->fd[victim]);
		rd->fd[victim] = -1;
		fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	return fd;
}

void catalog_reader_fini(struct catalog_reader *rd)
{
	for (int i = 0; i < CAT_FD_CACHE; i++)
		if (rd->fd[i] >= 0)
			close(rd->fd[i]);
	if (rd->cat && rd->cat->fmt->reader_fini)
		rd->cat->fmt->reader_fini(rd);
	rd->fmt_state = NULL;
}

int catalog_reader_fd(struct catalog_reader *rd, uint32_t file)
{
	int victim = -1, n = (int)rd->fd_max;
	for (int i = 0; i < n; i++) {
		if (rd->fd[i] >= 0 && rd->fd_file[i] == file) {
			rd->fd_used[i] = ++rd->tick;
			return rd->fd[i];
		}
		if (rd->fd[i] < 0 && victim < 0)
			victim = i;
	}
	if (victim < 0) {
		victim = 0;
		for (int i = 1; i < n; i++)
			if (rd->fd_used[i] < rd->fd_used[victim])
				victim = i;
	}
	char path[PATH_MAX];
	const struct catalog *c = rd->cat;
	if (snprintf(path, sizeof(path), "%s/%s", c->root, catalog_path(c, file)) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = reader_open(rd, path, victim);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	if ((uint64_t)st.st_size != c->files[file].size || mtime != c->files[file].mtime_ns) {
		close(fd);
		return -ESTALE; /* the file changed since the catalog was built */
	}
	if (rd->fd[victim] >= 0)
		close(rd->fd[victim]);
	rd->fd[victim] = fd;
	rd->fd_file[victim] = file;
	rd->fd_used[victim] = ++rd->tick;
	return fd;
}

void catalog_reader_forget(struct catalog_reader *rd, uint32_t file)
{
	for (int i = 0; i < CAT_FD_CACHE; i++) {
		if (rd->fd[i] >= 0 && rd->fd_file[i] == file) {
			close(rd->fd[i]);
			rd->fd[i] = -1;
		}
	}
}

int catalog_read_error(struct catalog_reader *rd, uint64_t id, int code, const char *fmt, ...)
{
	const struct catalog *c = rd->cat;
	const struct catalog_sample *s = &c->samples[id];
	/* the path abbreviated (the message reaches trainers in 256 bytes): the
	 * reason after it always survives */
	char full[2 * PATH_MAX], show[CAT_PATH_SHOW];
	snprintf(full, sizeof(full), "%s/%s", c->root, catalog_path(c, s->file));
	int n = snprintf(rd->err, sizeof(rd->err), "sample %llu (%s): ", (unsigned long long)id,
			 catalog_path_abbrev(show, sizeof(show), full));
	if (n < 0 || n >= (int)sizeof(rd->err))
		return code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rd->err + n, sizeof(rd->err) - (size_t)n, fmt, ap);
	va_end(ap);
	return code;
}

int catalog_read(struct catalog_reader *rd, uint64_t id, void *dst)
{
	const struct catalog *c = rd->cat;
	rd->last_bytes = 0;
	if (id >= c->nsamples)
		return -ERANGE;
	rd->err[0] = '\0';
	const struct catalog_sample *s = &c->samples[id];
	uint64_t b0 = fmt_thread_bytes();
	int rc = c->fmt->read(rd, id, s, dst);
	rd->last_bytes = fmt_thread_bytes() - b0;
	rd->bytes_read += rd->last_bytes;
	if (rc != 0) {
		if (rd->err[0] == '\0')
			catalog_read_error(rd, id, rc, "%s", rc == -ESTALE
				       ? "file changed (size or mtime) since the catalog was built: "
					 "restart seerd to rescan"
				       : seer_strerror(rc));
		catalog_reader_forget(rd, s->file);
	}
	return rc;
}

/* ---- coalesced reads ---------------------------------------------------------- */

bool catalog_span(const struct catalog *c, uint64_t id, uint64_t *lo, uint64_t *hi)
{
	if (id >= c->nsamples || !c->fmt->span || (!c->fmt->cut && !c->fmt->cut_many))
		return false;
	const struct catalog_sample *s = &c->samples[id];
	if (!c->fmt->span(c, id, s, lo, hi))
		return false;
	/* a span outside the file is a damaged catalog: the sample's own read
	 * reports it */
	return *lo < *hi && *hi <= c->files[s->file].size;
}

int catalog_read_range(struct catalog_reader *rd, uint32_t file, uint64_t off, uint64_t len, void *buf)
{
	const struct catalog *c = rd->cat;
	rd->last_bytes = 0;
	rd->err[0] = '\0';
	if (file >= c->nfiles)
		return -ERANGE;
	char full[2 * PATH_MAX], show[CAT_PATH_SHOW];
	snprintf(full, sizeof(full), "%s/%s", c->root, catalog_path(c, file));
	catalog_path_abbrev(show, sizeof(show), full);
	uint64_t b0 = fmt_thread_bytes();
	int fd = catalog_reader_fd(rd, file);
	int rc = fd < 0 ? fd : fmt_pread(fd, buf, (size_t)len, off);
	rd->last_bytes = fmt_thread_bytes() - b0;
	rd->bytes_read += rd->last_bytes;
	if (rc == 0)
		return 0;
	if (rc == -ENODATA) {
		rc = SEER_EDATASET;
		snprintf(rd->err, sizeof(rd->err), "%s: bytes %llu..%llu: file shorter than the "
			 "catalog says: restart seerd to rescan", show, (unsigned long long)off,
			 (unsigned long long)(off + len));
	} else {
		snprintf(rd->err, sizeof(rd->err), "%s: bytes %llu..%llu: %s", show,
			 (unsigned long long)off, (unsigned long long)(off + len),
			 rc == -ESTALE ? "file changed (size or mtime) since the catalog was built: "
					 "restart seerd to rescan" : seer_strerror(rc));
	}
	catalog_reader_forget(rd, file);
	return rc;
}

void catalog_cut(struct catalog_reader *rd, uint32_t file, const uint8_t *buf, uint64_t off, uint64_t len,
	     uint32_t n, const uint64_t *ids, void *const *dsts, catalog_cut_fn done, void *ctx)
{
	const struct catalog *c = rd->cat;
	if (c->fmt->cut_many) {
		rd->err[0] = '\0';
		int rc = c->fmt->cut_many(rd, file, buf, off, len, n, ids, dsts);
		for (uint32_t i = 0; i < n; i++) {
			if (rc != 0 && rd->err[0] == '\0')
				catalog_read_error(rd, ids[i], rc, "%s", seer_strerror(rc));
			done(ctx, i, rc, rc ? rd->err : "");
		}
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		rd->err[0] = '\0';
		int rc = ids[i] < c->nsamples && c->samples[ids[i]].file == file
			 ? c->fmt->cut(rd, ids[i], &c->samples[ids[i]], buf, off, len, dsts[i])
			 : -ERANGE;
		if (rc != 0 && rd->err[0] == '\0')
			catalog_read_error(rd, ids[i] < c->nsamples ? ids[i] : 0, rc, "%s", seer_strerror(rc));
		done(ctx, i, rc, rc ? rd->err : "");
	}
}
