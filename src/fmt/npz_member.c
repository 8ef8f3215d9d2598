/* Decoding the bytes of an npz member (or a whole .npy file): stored members
 * are read by offset, deflated ones inflated (zlib) through a bounded window.
 * Sizes and the zip CRC-32 are checked whenever a whole member is decoded;
 * the CRC with libdeflate's (carry-less multiply: 12.6-13.3 GB/s against
 * zlib's 5.6 on the development VM; on a cold epoch of DLIO's npz files
 * zlib's was ~5% of the machine's CPU while the extents were read).
 *
 * The bytes come from the caller's fd, or from a buffer already holding them
 * (a coalesced read: struct npz_src). Runs on the calling thread; memory:
 * one window of NPZ_WIN and NPZ_ZBUF bytes (and zlib's state) while a call
 * runs. */
#define _GNU_SOURCE
#include "npz.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <libdeflate.h>
#include <zlib.h>

#include "seer.h"
#include "../util/util.h"

#define fail fmt_fail

/* ---- inflating ------------------------------------------------------------------ */

/* n bytes of the file at pos from src: 0, -ENODATA past the end (of the
 * file, or of the buffer), or -errno. */
static int src_read(const struct npz_src *src, void *dst, size_t n, uint64_t pos)
{
	if (!src->buf)
		return fmt_pread(src->fd, dst, n, pos);
	if (pos < src->off || pos - src->off > src->len || src->len - (pos - src->off) < n)
		return -ENODATA;
	memcpy(dst, src->buf + (pos - src->off), n);
	return 0;
}

struct zin {
	z_stream zs;
	const struct npz_src *src;
	uint64_t off, left;  /* compressed bytes not yet read */
	uint8_t *buf;
	bool ended;
};

static int zin_begin(struct zin *z, const struct npz_src *src, const struct member *m)
{
	memset(z, 0, sizeof(*z));
	z->buf = src->buf ? NULL : malloc(NPZ_ZBUF);
	if (!src->buf && !z->buf)
		return -ENOMEM;
	if (inflateInit2(&z->zs, -MAX_WBITS) != Z_OK) {
		free(z->buf);
		return -ENOMEM;
	}
	z->src = src;
	z->off = m->off;
	z->left = m->csize;
	return 0;
}

/* The next compressed input: read into z->buf, or straight from the
 * source's buffer. */
static int zin_feed(struct zin *z, char *err, size_t errlen)
{
	const struct npz_src *src = z->src;
	size_t n = (size_t)MIN(z->left, src->buf ? (uint64_t)1 << 30 : (uint64_t)NPZ_ZBUF);
	if (src->buf) {
		if (z->off < src->off || z->off - src->off > src->len ||
		    src->len - (z->off - src->off) < n)
			return fail(err, errlen, "compressed data runs past the bytes read "
					 "(truncated member?)");
		z->zs.next_in = (Bytef *)(uintptr_t)(src->buf + (z->off - src->off));
	} else {
		int rc = fmt_pread(src->fd, z->buf, n, z->off);
		if (rc == -ENODATA)
			return fail(err, errlen, "compressed data runs past the end of the "
					 "file (truncated)");
		if (rc)
			return rc;
		z->zs.next_in = z->buf;
	}
	z->off += n;
	z->left -= n;
	z->zs.avail_in = (uInt)n;
	return 0;
}

static void zin_end(struct zin *z)
{
	inflateEnd(&z->zs);
	free(z->buf);
}

/* Inflate into out[cap]; *got < cap only when the stream ended. */
static int zin_run(struct zin *z, uint8_t *out, size_t cap, size_t *got, char *err, size_t errlen)
{
	size_t done = 0;
	while (done < cap && !z->ended) {
		if (z->zs.avail_in == 0 && z->left > 0) {
			int rc = zin_feed(z, err, errlen);
			if (rc)
				return rc;
		}
		uInt room = (uInt)MIN(cap - done, (size_t)1 << 30);
		z->zs.next_out = out + done;
		z->zs.avail_out = room;
		int r = inflate(&z->zs, Z_NO_FLUSH);
		done += room - z->zs.avail_out;
		if (r == Z_STREAM_END) {
			z->ended = true;
		} else if (r == Z_BUF_ERROR) {
			if (z->zs.avail_in != 0 || z->left == 0)
				return fail(err, errlen, "deflate stream ends early (damaged or "
						 "truncated member)");
		} else if (r == Z_MEM_ERROR) {
			return -ENOMEM;
		} else if (r != Z_OK) {
			return fail(err, errlen, "inflate failed: %s (damaged member)",
				    z->zs.msg ? z->zs.msg : "invalid data");
		}
	}
	*got = done;
	return 0;
}

/* After all usize bytes: the stream must end there. */
static int zin_finish(struct zin *z, const struct member *m, char *err, size_t errlen)
{
	if (z->ended)
		return 0;
	uint8_t extra;
	size_t more = 0;
	int rc = zin_run(z, &extra, 1, &more, err, errlen);
	if (rc == 0 && more)
		rc = fail(err, errlen, "member inflates to more than its recorded %llu bytes "
			  "(damaged)", (unsigned long long)m->usize);
	return rc;
}

static int check_crc(const struct member *m, uint32_t crc, char *err, size_t errlen)
{
	if (m->has_crc && crc != m->crc)
		return fail(err, errlen, "zip member CRC mismatch (stored %08x, computed %08x): the "
				 "file is damaged", m->crc, crc);
	return 0;
}

/* ---- decoding a range ----------------------------------------------------------- */

/* End of the piece starting at pos: the next origin + j * NPZ_WIN. */
static uint64_t piece_end(uint64_t pos, uint64_t origin)
{
	if (pos < origin)
		return origin - ((origin - pos - 1) / NPZ_WIN) * NPZ_WIN;
	return origin + ((pos - origin) / NPZ_WIN + 1) * NPZ_WIN;
}

/* One piece [pos, pos + n) into win: read by offset or inflated. A stored
 * member in a buffer is not copied: *piece points into the buffer. */
static int next_piece(const struct npz_src *src, const struct member *m, struct zin *z,
		      uint8_t *win, const uint8_t **piece, size_t n, uint64_t pos, char *err,
		      size_t errlen)
{
	*piece = win;
	if (!m->deflated) {
		uint64_t at = m->off + pos;
		if (src->buf && at >= src->off && at - src->off <= src->len &&
		    src->len - (at - src->off) >= n) {
			*piece = src->buf + (at - src->off);
			return 0;
		}
		int rc = src_read(src, win, n, at);
		if (rc == -ENODATA)
			rc = fail(err, errlen, "member data runs past the end of the %s "
				  "(truncated)", src->buf ? "bytes read" : "file");
		return rc;
	}
	size_t got = 0;
	int rc = zin_run(z, win, n, &got, err, errlen);
	if (rc == 0 && got < n)
		rc = fail(err, errlen, "member inflates to %llu bytes, %llu recorded (damaged)",
			  (unsigned long long)(pos + got), (unsigned long long)m->usize);
	return rc;
}

int npz_member_decode(int fd, const struct member *m, uint64_t origin, uint64_t lo,
		      uint64_t hi, npz_piece_fn fn, void *ctx, char *err, size_t errlen)
{
	const struct npz_src src = { .fd = fd };
	return npz_member_decode_src(&src, m, origin, lo, hi, fn, ctx, err, errlen);
}

int npz_member_decode_src(const struct npz_src *src, const struct member *m, uint64_t origin,
			  uint64_t lo, uint64_t hi, npz_piece_fn fn, void *ctx, char *err,
			  size_t errlen)
{
	if (lo > hi || hi > m->usize)
		return fail(err, errlen, "bytes %llu..%llu outside the %llu-byte member (damaged "
				 "catalog cache?)", (unsigned long long)lo, (unsigned long long)hi,
			    (unsigned long long)m->usize);
	bool whole = lo == 0 && hi == m->usize;
	uint8_t *win = malloc(NPZ_WIN);
	if (!win)
		return -ENOMEM;
	struct zin z;
	int rc = m->deflated ? zin_begin(&z, src, m) : 0;
	if (rc) {
		free(win);
		return rc;
	}
	uint32_t crc = 0;
	uint64_t pos = m->deflated ? 0 : lo; /* inflating starts at the member's start */
	while (rc == 0 && pos < hi) {
		size_t n = (size_t)(MIN(piece_end(pos, origin), hi) - pos);
		const uint8_t *piece;
		rc = next_piece(src, m, &z, win, &piece, n, pos, err, errlen);
		if (rc)
			break;
		if (whole)
			crc = libdeflate_crc32(crc, piece, n);
		if (pos + n > lo) {
			size_t skip = pos < lo ? (size_t)(lo - pos) : 0;
			fn(ctx, piece + skip, n - skip, pos + skip);
		}
		pos += n;
	}
	if (rc == 0 && m->deflated && whole)
		rc = zin_finish(&z, m, err, errlen);
	if (m->deflated)
		zin_end(&z);
	free(win);
	return rc ? rc : whole ? check_crc(m, crc, err, errlen) : 0;
}

struct copy_all {
	uint8_t *dst;
};

static void copy_piece(void *ctx, const uint8_t *data, size_t len, uint64_t pos)
{
	memcpy(((struct copy_all *)ctx)->dst + pos, data, len);
}

int npz_member_read_all(int fd, const struct member *m, uint8_t *dst, char *err, size_t errlen)
{
	struct copy_all c = { dst };
	return npz_member_decode(fd, m, 0, 0, m->usize, copy_piece, &c, err, errlen);
}

/* The first min(want, usize) decoded bytes into dst; *got says how many. */
static int member_read_prefix(int fd, const struct member *m, uint8_t *dst, size_t want,
			      size_t *got, char *err, size_t errlen)
{
	size_t n = (size_t)MIN((uint64_t)want, m->usize);
	if (!m->deflated) {
		int rc = fmt_pread(fd, dst, n, m->off);
		if (rc == -ENODATA)
			return fail(err, errlen, "member data runs past the end of the file "
					 "(truncated)");
		*got = n;
		return rc;
	}
	struct zin z;
	const struct npz_src src = { .fd = fd };
	int rc = zin_begin(&z, &src, m);
	if (rc)
		return rc;
	rc = zin_run(&z, dst, n, got, err, errlen);
	zin_end(&z);
	return rc;
}

int npz_member_npy_header(int fd, const struct member *m, struct npy_header *h, char *err,
			  size_t errlen)
{
	size_t want = 256;
	for (int round = 0; round < 3; round++) {
		uint8_t *buf = malloc(MAX(want, (size_t)1));
		if (!buf)
			return -ENOMEM;
		size_t got = 0;
		uint64_t need = 0;
		int rc = member_read_prefix(fd, m, buf, want, &got, err, errlen);
		if (rc == 0)
			rc = npy_parse_header(buf, got, h, &need, err, errlen);
		free(buf);
		if (rc != -EAGAIN)
			return rc;
		if (got < want || need > m->usize || need <= want)
			return fail(err, errlen, "data ends inside the NPY header (truncated)");
		want = (size_t)need;
	}
	return fail(err, errlen, "NPY header does not parse");
}

/* ---- per-file facts ----------------------------------------------------------------- */

void npz_aux_put(uint64_t *aux, const struct member *m, const struct npy_header *h, bool last)
{
	aux[0] = m->off;
	aux[1] = m->csize;
	aux[2] = m->usize;
	aux[3] = (h->data_off & AUX_HDR_MASK) | (m->deflated ? AUX_DEFLATED : 0) |
		 (h->fortran ? AUX_FORTRAN : 0) | (last ? AUX_LAST : 0) | (h->swap ? AUX_SWAP : 0) |
		 (m->has_crc ? AUX_CRC : 0) | (uint64_t)m->crc << 32;
}

void npz_aux_get(const uint64_t *aux, struct member *m, uint64_t *hdr)
{
	m->off = aux[0];
	m->csize = aux[1];
	m->usize = aux[2];
	m->deflated = aux[3] & AUX_DEFLATED;
	m->has_crc = aux[3] & AUX_CRC;
	m->crc = (uint32_t)(aux[3] >> 32);
	*hdr = aux[3] & AUX_HDR_MASK;
}
