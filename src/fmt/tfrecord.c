/* The tfrecord format: one sample per record.
 *
 * A record is framed as u64 length (little-endian), u32 masked CRC32C of the
 * length bytes, the payload, u32 masked CRC32C of the payload. The sample is
 * the payload (dtype BYTES), label -1. The length CRC is checked at scan time,
 * the payload CRC (and the header again) at every read.
 *
 * DLIO writes DALI index files (tfrecord2idx: "<offset> <size>" per record) to
 * <data>/index/<split>/<file>.idx beside <data>/<split>/; when one is found
 * its records are checked against the file, and a disagreeing index is
 * ignored (with a warning) for a scan of the file itself. */
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

/* ---- framing and index parsing ------------------------------------------------ */

int tfrecord_parse_header(const void *buf, size_t len, uint64_t *payload_len, char *err,
		     size_t errlen)
{
	const uint8_t *p = buf;
	if (len < TFR_HDR_LEN)
		return fail(err, errlen, "record header truncated (%zu of %d bytes)", len,
			    TFR_HDR_LEN);
	uint32_t stored = fmt_le32(p + 8), want = tfrecord_mask_crc(crc32c(0, p, 8));
	if (stored != want)
		return fail(err, errlen, "length CRC mismatch (stored %08x, computed %08x): not a "
				 "TFRecord file, or damaged", stored, want);
	*payload_len = fmt_le64(p);
	return 0;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

static bool parse_num(const char **p, const char *end, uint64_t *v)
{
	const char *s = *p;
	uint64_t x = 0;
	while (s < end && *s >= '0' && *s <= '9') {
		if (x > (UINT64_MAX - 9) / 10)
			return false;
		x = x * 10 + (uint64_t)(*s - '0');
		s++;
	}
	if (s == *p)
		return false;
	*p = s;
	*v = x;
	return true;
}

int tfrecord_parse_index(const char *buf, size_t len, struct tfrecord_extent **out, uint64_t *n,
		    char *err, size_t errlen)
{
	const char *p = buf, *end = buf + len;
	struct tfrecord_extent *v = NULL;
	uint64_t cnt = 0, cap = 0, line = 0;
	*out = NULL;
	*n = 0;
	while (p < end) {
		line++;
		while (p < end && is_space(*p))
			p++;
		if (p < end && *p == '\n') {
			p++;
			continue;
		}
		if (p == end)
			break;
		struct tfrecord_extent e;
		if (!parse_num(&p, end, &e.off))
			goto bad;
		if (p == end || !is_space(*p))
			goto bad;
		while (p < end && is_space(*p))
			p++;
		if (!parse_num(&p, end, &e.len))
			goto bad;
		while (p < end && is_space(*p))
			p++;
		if (p < end && *p != '\n')
			goto bad;
		if (p < end)
			p++;
		if (cnt == cap) {
			cap = MAX(cap * 2, 256);
			struct tfrecord_extent *nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
		}
		v[cnt++] = e;
	}
	*out = v;
	*n = cnt;
	return 0;
bad:
	free(v);
	return fail(err, errlen, "line %llu is not \"<offset> <size>\"", (unsigned long long)line);
}

/* ---- scanning -------------------------------------------------------------------- */

#define SCAN_WIN (1u << 20)
#define INDEX_MAX (1ull << 30)

struct recs {
	struct tfrecord_extent *v; /* off: record start, len: payload bytes */
	uint64_t n, cap;
};

static int recs_push(struct recs *r, uint64_t off, uint64_t len)
{
	if (r->n == r->cap) {
		r->cap = MAX(r->cap * 2, 1024);
		struct tfrecord_extent *nv = realloc(r->v, r->cap * sizeof(*r->v));
		if (!nv)
			return -ENOMEM;
		r->v = nv;
	}
	r->v[r->n++] = (struct tfrecord_extent){ off, len };
	return 0;
}

/* Walk the records of the file, reading headers through a window (payloads
 * larger than the window are skipped, not read). With an index, every entry
 * must match the record found at its place: else *index_bad says why. */
static int tfrecord_walk(int fd, uint64_t size, const struct tfrecord_extent *ix, uint64_t nix,
		    struct recs *out, char *why, size_t whylen, bool *index_bad, char *err,
		    size_t errlen)
{
	uint8_t *win = malloc(SCAN_WIN);
	if (!win)
		return -ENOMEM;
	uint64_t wpos = 0, wlen = 0, pos = 0, i = 0;
	int rc = 0;
	*index_bad = false;
	while (pos < size) {
		if (ix && (i >= nix || ix[i].off != pos)) {
			*index_bad = true;
			if (i >= nix)
				snprintf(why, whylen, "it lists %llu records, the file holds more",
					 (unsigned long long)nix);
			else
				snprintf(why, whylen, "entry %llu says offset %llu, the record starts "
					 "at %llu", (unsigned long long)i,
					 (unsigned long long)ix[i].off, (unsigned long long)pos);
			break;
		}
		if (size - pos < TFR_HDR_LEN + TFR_FOOTER_LEN) {
			rc = fail(err, errlen, "record %llu at offset %llu: the last %llu bytes are "
					 "too short for a record (truncated)", (unsigned long long)i,
				  (unsigned long long)pos, (unsigned long long)(size - pos));
			break;
		}
		if (pos < wpos || pos + TFR_HDR_LEN > wpos + wlen) {
			wlen = MIN(size - pos, (uint64_t)SCAN_WIN);
			rc = fmt_pread(fd, win, (size_t)wlen, pos);
			if (rc == -ENODATA)
				rc = fail(err, errlen, "file shrank while being scanned");
			if (rc)
				break;
			wpos = pos;
		}
		uint64_t len;
		rc = tfrecord_parse_header(win + (pos - wpos), TFR_HDR_LEN, &len, err, errlen);
		if (rc) {
			char inner[256];
			str_copy(inner, sizeof(inner), err);
			fail(err, errlen, "record %llu at offset %llu: %s", (unsigned long long)i,
			     (unsigned long long)pos, inner);
			break;
		}
		if (len > size - pos - TFR_HDR_LEN - TFR_FOOTER_LEN) {
			rc = fail(err, errlen, "record %llu at offset %llu: its payload of %llu bytes "
					 "runs past the end of the file (truncated)",
				  (unsigned long long)i, (unsigned long long)pos,
				  (unsigned long long)len);
			break;
		}
		if (ix && ix[i].len != len + TFR_HDR_LEN + TFR_FOOTER_LEN) {
			*index_bad = true;
			snprintf(why, whylen, "entry %llu says %llu bytes, the record holds %llu",
				 (unsigned long long)i, (unsigned long long)ix[i].len,
				 (unsigned long long)(len + TFR_HDR_LEN + TFR_FOOTER_LEN));
			break;
		}
		if ((rc = recs_push(out, pos, len)) != 0)
			break;
		pos += TFR_HDR_LEN + len + TFR_FOOTER_LEN;
		i++;
	}
	if (rc == 0 && !*index_bad && ix && i != nix) {
		*index_bad = true;
		snprintf(why, whylen, "it lists %llu records, the file holds %llu",
			 (unsigned long long)nix, (unsigned long long)i);
	}
	free(win);
	return rc;
}

static bool file_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* DLIO's index of <data>/<split>/[sub/]<name>: <data>/index/<split>/<name>.idx,
 * with the dataset root either <data>/<split> or <data>; else <file>.idx. */
static char *find_index(const char *root, const char *rel)
{
	const char *base = strrchr(rel, '/');
	base = base ? base + 1 : rel;
	const char *rbase = strrchr(root, '/');
	char path[PATH_MAX];
	if (rbase && rbase != root) {
		int n = snprintf(path, sizeof(path), "%.*s/index/%s/%s.idx", (int)(rbase - root),
				 root, rbase + 1, base);
		if (n < (int)sizeof(path) && file_exists(path))
			return xstrdup(path);
	}
	const char *slash = strchr(rel, '/');
	if (slash) {
		int n = snprintf(path, sizeof(path), "%s/index/%.*s/%s.idx", root,
				 (int)(slash - rel), rel, base);
		if (n < (int)sizeof(path) && file_exists(path))
			return xstrdup(path);
	}
	int n = snprintf(path, sizeof(path), "%s/%s.idx", root, rel);
	if (n < (int)sizeof(path) && file_exists(path))
		return xstrdup(path);
	return NULL;
}

static int read_small_file(const char *path, char **buf, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int rc = fstat(fd, &st) == 0 ? 0 : -errno;
	if (rc == 0 && (uint64_t)st.st_size > INDEX_MAX)
		rc = -EFBIG;
	if (rc == 0) {
		*len = (size_t)st.st_size;
		*buf = malloc(MAX(*len, (size_t)1));
		rc = *buf ? fmt_pread(fd, *buf, *len, 0) : -ENOMEM;
		if (rc) {
			free(*buf);
			*buf = NULL;
		}
	}
	close(fd);
	return rc;
}

static int tfrecord_scan(struct catalog_builder *b, uint32_t file, int fd, uint64_t size)
{
	const char *rel = catalog_builder_path(b, file);
	char err[512], why[256];
	struct recs r = { 0 };
	bool index_bad = false;
	int rc = 0;
	char *ipath = find_index(catalog_builder_root(b), rel);
	if (ipath) {
		char *text = NULL;
		size_t tlen = 0;
		struct tfrecord_extent *ix = NULL;
		uint64_t nix = 0;
		rc = read_small_file(ipath, &text, &tlen);
		if (rc == 0) {
			rc = tfrecord_parse_index(text, tlen, &ix, &nix, why, sizeof(why));
			free(text);
			if (rc == SEER_EDATASET) {
				index_bad = true;
				rc = 0;
			}
		} else {
			snprintf(why, sizeof(why), "%s", strerror(-rc));
			index_bad = true;
			rc = 0;
		}
		if (rc == 0 && !index_bad)
			rc = tfrecord_walk(fd, size, ix, nix, &r, why, sizeof(why), &index_bad, err,
				      sizeof(err));
		free(ix);
		if (rc == 0 && index_bad) {
			log_warn("tfrecord %s: index %s does not match the file (%s); scanning the "
				 "file instead", rel, ipath, why);
			r.n = 0;
		}
	}
	if (rc == 0 && (!ipath || index_bad))
		rc = tfrecord_walk(fd, size, NULL, 0, &r, why, sizeof(why), &index_bad, err, sizeof(err));
	free(ipath);
	if (rc == 0) {
		static const struct seer_wire_type bytes = { .dtype = SEER_DT_BYTES };
		uint32_t type;
		rc = catalog_intern_type(b, &bytes, &type);
		for (uint64_t i = 0; rc == 0 && i < r.n; i++)
			rc = catalog_add_sample(b, file, r.v[i].off, r.v[i].len, -1, type);
	} else if (rc == SEER_EDATASET) {
		catalog_builder_error(b, "%s", err);
	}
	free(r.v);
	return rc;
}


/* ---- reading ------------------------------------------------------------------------ */

static int tfrecord_read(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s, void *dst)
{
	int fd = catalog_reader_fd(rd, s->file);
	if (fd < 0)
		return fd;
	uint8_t hdr[TFR_HDR_LEN], foot[TFR_FOOTER_LEN];
	struct iovec iov[3] = {
		{ hdr, sizeof(hdr) }, { dst, (size_t)s->length }, { foot, sizeof(foot) },
	};
	int rc = fmt_preadv(fd, iov, 3, s->offset);
	if (rc == -ENODATA)
		return catalog_read_error(rd, id, SEER_EDATASET, "file shorter than its catalogued "
				      "records: restart seerd to rescan");
	if (rc)
		return rc;
	char err[256];
	uint64_t len;
	if (tfrecord_parse_header(hdr, sizeof(hdr), &len, err, sizeof(err)) != 0)
		return catalog_read_error(rd, id, SEER_EDATASET, "record at offset %llu: %s",
				      (unsigned long long)s->offset, err);
	if (len != s->length)
		return catalog_read_error(rd, id, SEER_EDATASET, "record at offset %llu holds %llu bytes, "
				      "the catalog says %llu: restart seerd to rescan",
				      (unsigned long long)s->offset, (unsigned long long)len,
				      (unsigned long long)s->length);
	uint32_t stored = fmt_le32(foot), want = tfrecord_mask_crc(crc32c(0, dst, (size_t)s->length));
	if (stored != want)
		return catalog_read_error(rd, id, SEER_EDATASET, "record at offset %llu: payload CRC "
				      "mismatch (stored %08x, computed %08x): the file is damaged",
				      (unsigned long long)s->offset, stored, want);
	return 0;
}

/* ---- coalesced reads: records cut out of a byte range --------------------------------- */

static bool tfrecord_span(const struct catalog *c, uint64_t id, const struct catalog_sample *s, uint64_t *lo,
		     uint64_t *hi)
{
	(void)c;
	(void)id;
	*lo = s->offset;
	*hi = s->offset + TFR_HDR_LEN + s->length + TFR_FOOTER_LEN;
	return *hi > *lo;
}

/* The record at s->offset out of buf (the file's bytes [off, off + len)):
 * header CRC and length, payload CRC, as tfrecord_read checks them. */
static int tfrecord_cut(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s,
		   const uint8_t *buf, uint64_t off, uint64_t len, void *dst)
{
	uint64_t need = TFR_HDR_LEN + s->length + TFR_FOOTER_LEN;
	if (s->offset < off || s->offset - off > len || len - (s->offset - off) < need)
		return catalog_read_error(rd, id, -ERANGE, "record at offset %llu is not inside the "
				      "bytes read (%llu..%llu)", (unsigned long long)s->offset,
				      (unsigned long long)off, (unsigned long long)(off + len));
	const uint8_t *p = buf + (s->offset - off);
	char err[256];
	uint64_t plen;
	if (tfrecord_parse_header(p, TFR_HDR_LEN, &plen, err, sizeof(err)) != 0)
		return catalog_read_error(rd, id, SEER_EDATASET, "record at offset %llu: %s",
				      (unsigned long long)s->offset, err);
	if (plen != s->length)
		return catalog_read_error(rd, id, SEER_EDATASET, "record at offset %llu holds %llu bytes, "
				      "the catalog says %llu: restart seerd to rescan",
				      (unsigned long long)s->offset, (unsigned long long)plen,
				      (unsigned long long)s->length);
	const uint8_t *payload = p + TFR_HDR_LEN;
	uint32_t stored = fmt_le32(payload + s->length);
	uint32_t want = tfrecord_mask_crc(crc32c(0, payload, (size_t)s->length));
	if (stored != want)
		return catalog_read_error(rd, id, SEER_EDATASET, "record at offset %llu: payload CRC "
				      "mismatch (stored %08x, computed %08x): the file is damaged",
				      (unsigned long long)s->offset, stored, want);
	memcpy(dst, payload, (size_t)s->length);
	return 0;
}

const struct fmt_ops fmt_tfrecord = {
	.name = "tfrecord",
	.accept = fmt_not_index,
	.scan = tfrecord_scan,
	.read = tfrecord_read,
	.span = tfrecord_span,
	.cut = tfrecord_cut,
};
