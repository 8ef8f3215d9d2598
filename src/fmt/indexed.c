/* The indexed format: DLIO's indexed_binary.
 *
 * A data file <name> of concatenated samples, described by <name>.off.idx and
 * <name>.sz.idx: arrays of little-endian u64, the offset and the size of each
 * sample in order. A sample is those bytes (dtype BYTES), label -1. The index
 * files are read and checked against the data file's size at scan time; they
 * are never data files themselves. */
#define _GNU_SOURCE
#include "fmt.h"

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

#define fail fmt_fail

int indexed_check(const void *off, const void *sz, uint64_t n, uint64_t data_size, uint64_t first,
	      char *err, size_t errlen)
{
	const uint8_t *o = off, *z = sz;
	for (uint64_t i = 0; i < n; i++, o += 8, z += 8) {
		uint64_t a = fmt_le64(o), len = fmt_le64(z);
		if (len == 0)
			return fail(err, errlen, "sample %llu has size 0",
				    (unsigned long long)(first + i));
		if (a > data_size || len > data_size - a)
			return fail(err, errlen, "sample %llu at offset %llu of %llu bytes runs past "
					 "the end of the data file (%llu bytes)",
				    (unsigned long long)(first + i), (unsigned long long)a,
				    (unsigned long long)len, (unsigned long long)data_size);
	}
	return 0;
}

struct idxfile {
	char path[PATH_MAX];
	int fd;
	uint64_t size;
};

static int indexed_open(struct catalog_builder *b, struct idxfile *f, const char *rel, const char *base,
		    const char *suffix)
{
	f->fd = -1;
	if (snprintf(f->path, sizeof(f->path), "%s/%s%s", catalog_builder_root(b), rel, suffix) >=
	    (int)sizeof(f->path))
		return -ENAMETOOLONG;
	f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (f->fd < 0 || fstat(f->fd, &st) != 0) {
		catalog_builder_error(b, "index file %s%s: %s (DLIO indexed_binary needs %s.off.idx and "
				  "%s.sz.idx beside each data file)", base, suffix, strerror(errno),
				  base, base);
		return SEER_EDATASET;
	}
	f->size = (uint64_t)st.st_size;
	if (f->size % 8 != 0) {
		catalog_builder_error(b, "index file %s%s holds %llu bytes, not a whole number of u64 "
				  "entries", base, suffix, (unsigned long long)f->size);
		return SEER_EDATASET;
	}
	return 0;
}

#define IDX_CHUNK 65536 /* entries read at once */

static int indexed_scan(struct catalog_builder *b, uint32_t file, int fd, uint64_t size)
{
	(void)fd;
	const char *rel = catalog_builder_path(b, file);
	/* messages name the index files by the data file's base name: the scan
	 * error already starts with the data file's (abbreviated) path */
	const char *base = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
	struct idxfile fo, fs;
	uint8_t *bo = NULL, *bs = NULL;
	int rc = indexed_open(b, &fo, rel, base, ".off.idx");
	if (rc == 0)
		rc = indexed_open(b, &fs, rel, base, ".sz.idx");
	else
		fs.fd = -1;
	if (rc)
		goto out;
	if (fo.size != fs.size) {
		catalog_builder_error(b, "index files disagree: %s.off.idx lists %llu offsets, "
				  "%s.sz.idx %llu sizes", base, (unsigned long long)(fo.size / 8),
				  base, (unsigned long long)(fs.size / 8));
		rc = SEER_EDATASET;
		goto out;
	}
	static const struct seer_wire_type bytes = { .dtype = SEER_DT_BYTES };
	uint32_t type;
	if ((rc = catalog_intern_type(b, &bytes, &type)) != 0)
		goto out;
	bo = malloc(IDX_CHUNK * 8);
	bs = malloc(IDX_CHUNK * 8);
	if (!bo || !bs) {
		rc = -ENOMEM;
		goto out;
	}
	uint64_t n = fo.size / 8;
	char err[512];
	for (uint64_t i = 0; i < n; i += IDX_CHUNK) {
		uint64_t cnt = MIN(n - i, (uint64_t)IDX_CHUNK);
		rc = fmt_pread(fo.fd, bo, cnt * 8, i * 8);
		if (rc == 0)
			rc = fmt_pread(fs.fd, bs, cnt * 8, i * 8);
		if (rc == -ENODATA) {
			catalog_builder_error(b, "index files of %s shrank while being read", base);
			rc = SEER_EDATASET;
		}
		if (rc)
			goto out;
		if ((rc = indexed_check(bo, bs, cnt, size, i, err, sizeof(err))) != 0) {
			catalog_builder_error(b, "%s.off.idx / .sz.idx: %s", base, err);
			goto out;
		}
		for (uint64_t j = 0; j < cnt && rc == 0; j++)
			rc = catalog_add_sample(b, file, fmt_le64(bo + 8 * j), fmt_le64(bs + 8 * j), -1,
					    type);
		if (rc)
			goto out;
	}
out:
	free(bo);
	free(bs);
	if (fo.fd >= 0)
		close(fo.fd);
	if (fs.fd >= 0)
		close(fs.fd);
	return rc;
}


static int indexed_read(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s, void *dst)
{
	int fd = catalog_reader_fd(rd, s->file);
	if (fd < 0)
		return fd;
	int rc = fmt_pread(fd, dst, (size_t)s->length, s->offset);
	if (rc == -ENODATA)
		return catalog_read_error(rd, id, SEER_EDATASET, "data file shorter than its index "
				      "(offset %llu + %llu bytes): restart seerd to rescan",
				      (unsigned long long)s->offset, (unsigned long long)s->length);
	return rc;
}

static bool indexed_span(const struct catalog *c, uint64_t id, const struct catalog_sample *s, uint64_t *lo,
		     uint64_t *hi)
{
	(void)c;
	(void)id;
	*lo = s->offset;
	*hi = s->offset + s->length;
	return *hi > *lo;
}

static int indexed_cut(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s,
		   const uint8_t *buf, uint64_t off, uint64_t len, void *dst)
{
	if (s->offset < off || s->offset - off > len || len - (s->offset - off) < s->length)
		return catalog_read_error(rd, id, -ERANGE, "sample at offset %llu is not inside the bytes "
				      "read (%llu..%llu)", (unsigned long long)s->offset,
				      (unsigned long long)off, (unsigned long long)(off + len));
	memcpy(dst, buf + (s->offset - off), (size_t)s->length);
	return 0;
}

const struct fmt_ops fmt_indexed = {
	.name = "indexed",
	.accept = fmt_not_index,
	.scan = indexed_scan,
	.read = indexed_read,
	.span = indexed_span,
	.cut = indexed_cut,
};
