/* The npz and npy formats: numpy arrays, one sample per index of a sample axis.
 *
 * An .npz is a zip of .npy members (np.savez: stored, np.savez_compressed:
 * deflate). The zip structures and the NPY header are parsed here, bounds
 * checked against the file. A sample is the sub-array at index k of the
 * sample axis (the last axis for DLIO's x of shape (d1, d2, n), or the first),
 * delivered C-ordered and little-endian whatever the stored order.
 *
 * Reading: a sample that is contiguous in a stored member is one pread. Any
 * other sample (strided, Fortran-ordered, deflated) is gathered from the whole
 * decoded member, which the reader keeps in a byte-bounded LRU so that serving
 * every sample of a file decodes it once. A member larger than the whole cache
 * is streamed through a window for each sample instead. */
#define _GNU_SOURCE
#include "fmt.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "seer.h"
#include "../util.h"

#define fail fmt_fail

static const char *shape_str(char *buf, size_t len, const uint64_t *dims, uint32_t nd)
{
	size_t used = (size_t)snprintf(buf, len, "(");
	for (uint32_t i = 0; i < nd && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%llu", i ? ", " : "",
					 (unsigned long long)dims[i]);
	if (used < len)
		snprintf(buf + used, len - used, nd == 1 ? ",)" : ")");
	return buf;
}

/* ---- NPY header ------------------------------------------------------------ */

struct lex {
	const char *p, *end;
};

static void lex_ws(struct lex *l)
{
	while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\n' || *l->p == '\r'))
		l->p++;
}

static bool lex_eat(struct lex *l, char c)
{
	lex_ws(l);
	if (l->p < l->end && *l->p == c) {
		l->p++;
		return true;
	}
	return false;
}

static bool lex_peek(struct lex *l, char c)
{
	lex_ws(l);
	return l->p < l->end && *l->p == c;
}

/* A quoted string without escapes, as [*s, *s + *n). */
static bool lex_str(struct lex *l, const char **s, size_t *n)
{
	lex_ws(l);
	if (l->p >= l->end || (*l->p != '\'' && *l->p != '"'))
		return false;
	char q = *l->p++;
	const char *b = l->p;
	while (l->p < l->end && *l->p != q) {
		if (*l->p == '\\')
			return false;
		l->p++;
	}
	if (l->p >= l->end)
		return false;
	*s = b;
	*n = (size_t)(l->p - b);
	l->p++;
	return true;
}

static bool lex_word(struct lex *l, const char *w)
{
	lex_ws(l);
	size_t n = strlen(w);
	if ((size_t)(l->end - l->p) < n || memcmp(l->p, w, n) != 0)
		return false;
	if ((size_t)(l->end - l->p) > n && (isalnum((unsigned char)l->p[n]) || l->p[n] == '_'))
		return false;
	l->p += n;
	return true;
}

static bool lex_uint(struct lex *l, uint64_t *v)
{
	lex_ws(l);
	const char *b = l->p;
	uint64_t x = 0;
	while (l->p < l->end && *l->p >= '0' && *l->p <= '9') {
		if (x > (UINT64_MAX - 9) / 10)
			return false;
		x = x * 10 + (uint64_t)(*l->p - '0');
		l->p++;
	}
	if (l->p == b)
		return false;
	if (l->p < l->end && *l->p == 'L') /* written by Python 2 */
		l->p++;
	*v = x;
	return true;
}

static bool key_is(const char *k, size_t n, const char *want)
{
	return n == strlen(want) && memcmp(k, want, n) == 0;
}

/* numpy's array-protocol type string: byte order, kind, item size. */
static int npy_descr(const char *s, size_t n, struct npy_header *h, char *err, size_t errlen)
{
	const char *supported = "supported: bool, int8..int64, uint8..uint64, float16/32/64";
	int show = (int)MIN(n, 32);
	size_t i = 0;
	char order = '|';
	if (n > 0 && (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '='))
		order = s[i++];
	if (i >= n)
		return fail(err, errlen, "NPY header: dtype '%.*s' does not parse", show, s);
	char kind = s[i++];
	uint64_t size = 0;
	if (kind == 'O')
		return fail(err, errlen,
			    "NPY header: dtype '%.*s' is an object array (Python pickles, not raw "
			    "data); save a numeric array (%s)", show, s, supported);
	if (i == n)
		return fail(err, errlen, "NPY header: dtype '%.*s' has no item size", show, s);
	for (; i < n; i++) {
		if (s[i] < '0' || s[i] > '9' || size > 1000)
			return fail(err, errlen, "NPY header: dtype '%.*s' does not parse", show, s);
		size = size * 10 + (uint64_t)(s[i] - '0');
	}
	uint32_t dt = SEER_DT_COUNT_;
	switch (kind) {
	case 'b':
		dt = size == 1 ? SEER_DT_BOOL : dt;
		break;
	case 'i':
		dt = size == 1 ? SEER_DT_I8 : size == 2 ? SEER_DT_I16 : size == 4 ? SEER_DT_I32
		   : size == 8 ? SEER_DT_I64 : dt;
		break;
	case 'u':
		dt = size == 1 ? SEER_DT_U8 : size == 2 ? SEER_DT_U16 : size == 4 ? SEER_DT_U32
		   : size == 8 ? SEER_DT_U64 : dt;
		break;
	case 'f':
		dt = size == 2 ? SEER_DT_F16 : size == 4 ? SEER_DT_F32 : size == 8 ? SEER_DT_F64 : dt;
		break;
	default:
		break;
	}
	if (dt == SEER_DT_COUNT_)
		return fail(err, errlen, "NPY header: unsupported dtype '%.*s' (%s)", show, s, supported);
	h->dtype = dt;
	h->itemsize = (uint32_t)size;
	h->swap = order == '>' && size > 1;
	return 0;
}

int npy_parse_header(const void *buf, size_t len, struct npy_header *h, uint64_t *need,
		     char *err, size_t errlen)
{
	static const uint8_t magic[6] = { 0x93, 'N', 'U', 'M', 'P', 'Y' };
	const uint8_t *p = buf;
	memset(h, 0, sizeof(*h));
	if (memcmp(p, magic, MIN(len, sizeof(magic))) != 0)
		return fail(err, errlen, "not an NPY array (bad magic)");
	if (len < 10) {
		*need = 10;
		return -EAGAIN;
	}
	unsigned major = p[6], minor = p[7];
	if (major < 1 || major > 3 || minor != 0)
		return fail(err, errlen, "unsupported NPY format version %u.%u (known: 1.0, 2.0, 3.0)",
			    major, minor);
	uint64_t hoff = major == 1 ? 10 : 12;
	if (len < hoff) {
		*need = hoff;
		return -EAGAIN;
	}
	uint64_t hlen = major == 1 ? fmt_le16(p + 8) : fmt_le32(p + 8);
	if (hlen > NPY_MAX_HEADER)
		return fail(err, errlen, "NPY header claims %llu bytes (more than %u: damaged)",
			    (unsigned long long)hlen, NPY_MAX_HEADER);
	h->data_off = hoff + hlen;
	if (len < h->data_off) {
		*need = h->data_off;
		return -EAGAIN;
	}
	struct lex l = { (const char *)p + hoff, (const char *)p + h->data_off };
	bool have_descr = false, have_order = false, have_shape = false;
	if (!lex_eat(&l, '{'))
		return fail(err, errlen, "NPY header is not a dict");
	for (;;) {
		if (lex_eat(&l, '}'))
			break;
		const char *k;
		size_t kn;
		if (!lex_str(&l, &k, &kn) || !lex_eat(&l, ':'))
			return fail(err, errlen, "NPY header dict does not parse (expected 'key':)");
		int show = (int)MIN(kn, 32);
		if (key_is(k, kn, "descr")) {
			if (have_descr)
				return fail(err, errlen, "NPY header repeats 'descr'");
			if (lex_peek(&l, '['))
				return fail(err, errlen, "NPY header: structured dtypes (record arrays) "
						 "are not supported; save one numeric array per member");
			const char *d;
			size_t dn;
			if (!lex_str(&l, &d, &dn))
				return fail(err, errlen, "NPY header: 'descr' is not a string");
			int rc = npy_descr(d, dn, h, err, errlen);
			if (rc)
				return rc;
			have_descr = true;
		} else if (key_is(k, kn, "fortran_order")) {
			if (have_order)
				return fail(err, errlen, "NPY header repeats 'fortran_order'");
			if (lex_word(&l, "True"))
				h->fortran = true;
			else if (lex_word(&l, "False"))
				h->fortran = false;
			else
				return fail(err, errlen, "NPY header: 'fortran_order' is not True/False");
			have_order = true;
		} else if (key_is(k, kn, "shape")) {
			if (have_shape)
				return fail(err, errlen, "NPY header repeats 'shape'");
			if (!lex_eat(&l, '('))
				return fail(err, errlen, "NPY header: 'shape' is not a tuple");
			if (!lex_eat(&l, ')')) {
				for (;;) {
					uint64_t v;
					if (!lex_uint(&l, &v))
						return fail(err, errlen, "NPY header: 'shape' entry is "
								 "not a non-negative integer");
					if (h->ndim == NPY_MAX_DIMS)
						return fail(err, errlen, "array has more than %d "
								 "dimensions", NPY_MAX_DIMS);
					h->shape[h->ndim++] = v;
					if (lex_eat(&l, ')'))
						break;
					if (!lex_eat(&l, ','))
						return fail(err, errlen, "NPY header: 'shape' tuple "
								 "does not parse");
					if (lex_eat(&l, ')'))
						break;
				}
			}
			have_shape = true;
		} else {
			return fail(err, errlen, "NPY header has unexpected key '%.*s'", show, k);
		}
		if (lex_eat(&l, ','))
			continue;
		if (lex_eat(&l, '}'))
			break;
		return fail(err, errlen, "NPY header dict does not parse after '%.*s'", show, k);
	}
	lex_ws(&l);
	if (l.p != l.end)
		return fail(err, errlen, "NPY header has bytes after its dict");
	if (!have_descr || !have_order || !have_shape)
		return fail(err, errlen, "NPY header lacks '%s'",
			    !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
	uint64_t n = 1;
	for (uint32_t i = 0; i < h->ndim; i++)
		if (__builtin_mul_overflow(n, h->shape[i], &n))
			return fail(err, errlen, "NPY shape overflows 64 bits");
	h->nelem = n;
	if (__builtin_mul_overflow(n, (uint64_t)h->itemsize, &h->nbytes) ||
	    h->nbytes > (uint64_t)INT64_MAX - h->data_off)
		return fail(err, errlen, "NPY array size overflows 64 bits");
	return 0;
}

/* ---- zip ----------------------------------------------------------------------- */

#define ZIP_SIG_EOCD 0x06054b50u
#define ZIP_SIG_LOC64 0x07064b50u
#define ZIP_SIG_EOCD64 0x06064b50u
#define ZIP_SIG_CENTRAL 0x02014b50u
#define ZIP_SIG_LOCAL 0x04034b50u

/* The central directory an end record (classic or zip64) points to: one
 * disk only, and inside the file before the record at `end`. */
static int cd_accept(struct zip_dir *d, uint32_t disk, uint32_t cd_disk, uint64_t n_disk,
		     uint64_t n, uint64_t off, uint64_t size, uint64_t end, char *err, size_t errlen)
{
	if (disk != 0 || cd_disk != 0 || n != n_disk)
		return fail(err, errlen, "multi-part (spanned) zip archives are not supported");
	if (off > end || size > end - off)
		return fail(err, errlen, "zip central directory (offset %llu, %llu bytes) lies "
				 "outside the file (truncated or damaged)",
			    (unsigned long long)off, (unsigned long long)size);
	d->nentries = n;
	d->cd_off = off;
	d->cd_size = size;
	return 0;
}

int zip_find_eocd(const void *tail, size_t len, uint64_t file_size, struct zip_dir *d,
		  char *err, size_t errlen)
{
	const uint8_t *p = tail;
	memset(d, 0, sizeof(*d));
	d->eocd64_off = UINT64_MAX;
	if (len > file_size)
		return fail(err, errlen, "zip tail longer than the file");
	if (len < ZIP_EOCD_LEN)
		return fail(err, errlen, "file too short (%llu bytes) to be a zip archive",
			    (unsigned long long)file_size);
	uint64_t base = file_size - len; /* file offset of tail[0] */
	size_t lo = len - ZIP_EOCD_LEN > 65535 ? len - ZIP_EOCD_LEN - 65535 : 0;
	size_t at = SIZE_MAX;
	for (size_t i = len - ZIP_EOCD_LEN + 1; i-- > lo;) {
		if (fmt_le32(p + i) != ZIP_SIG_EOCD)
			continue;
		size_t clen = fmt_le16(p + i + 20);
		if (i + ZIP_EOCD_LEN + clen == len) {
			at = i;
			break;
		}
		if (at == SIZE_MAX && i + ZIP_EOCD_LEN + clen <= len)
			at = i;
	}
	if (at == SIZE_MAX)
		return fail(err, errlen, "no zip end-of-central-directory record: not an npz/zip "
				 "archive, or truncated");
	const uint8_t *e = p + at;
	uint64_t eocd_pos = base + at;
	uint32_t disk = fmt_le16(e + 4), cd_disk = fmt_le16(e + 6);
	uint64_t n_disk = fmt_le16(e + 8), n = fmt_le16(e + 10);
	uint64_t cd_size = fmt_le32(e + 12), cd_off = fmt_le32(e + 16);
	bool saturated = disk == 0xffff || cd_disk == 0xffff || n_disk == 0xffff || n == 0xffff ||
			 cd_size == 0xffffffffu || cd_off == 0xffffffffu;
	if (at >= 20 && fmt_le32(e - 20) == ZIP_SIG_LOC64) {
		uint32_t z64_disk = fmt_le32(e - 16), ndisks = fmt_le32(e - 4);
		uint64_t off = fmt_le64(e - 12);
		if (z64_disk != 0 || ndisks > 1)
			return fail(err, errlen, "multi-part (spanned) zip archives are not supported");
		if (off > eocd_pos - 20 || eocd_pos - 20 - off < ZIP_EOCD64_LEN)
			return fail(err, errlen, "zip64 end-of-central-directory offset %llu out of "
					 "range (damaged)", (unsigned long long)off);
		d->eocd64_off = off;
		return 0;
	}
	if (saturated)
		return fail(err, errlen, "zip64 archive without its zip64 locator (damaged)");
	return cd_accept(d, disk, cd_disk, n_disk, n, cd_off, cd_size, eocd_pos, err, errlen);
}

int zip_parse_eocd64(const void *buf, size_t len, uint64_t file_size, struct zip_dir *d,
		     char *err, size_t errlen)
{
	const uint8_t *p = buf;
	if (len < ZIP_EOCD64_LEN || fmt_le32(p) != ZIP_SIG_EOCD64)
		return fail(err, errlen, "zip64 end-of-central-directory record missing (damaged)");
	if (d->eocd64_off > file_size)
		return fail(err, errlen, "zip64 record outside the file");
	uint32_t disk = fmt_le32(p + 16), cd_disk = fmt_le32(p + 20);
	uint64_t n_disk = fmt_le64(p + 24), n = fmt_le64(p + 32);
	uint64_t size = fmt_le64(p + 40), off = fmt_le64(p + 48);
	return cd_accept(d, disk, cd_disk, n_disk, n, off, size, d->eocd64_off, err, errlen);
}

int zip_next_entry(const void *cd, size_t len, size_t *pos, struct zip_entry *e, char *err,
		   size_t errlen)
{
	size_t at = *pos;
	if (at > len || len - at < 46)
		return fail(err, errlen, "zip central directory truncated at offset %zu", at);
	const uint8_t *q = (const uint8_t *)cd + at;
	if (fmt_le32(q) != ZIP_SIG_CENTRAL)
		return fail(err, errlen, "zip central directory damaged (bad entry signature at "
				 "offset %zu)", at);
	memset(e, 0, sizeof(*e));
	e->flags = fmt_le16(q + 8);
	e->method = fmt_le16(q + 10);
	e->crc32 = fmt_le32(q + 16);
	e->csize = fmt_le32(q + 20);
	e->usize = fmt_le32(q + 24);
	e->name_len = fmt_le16(q + 28);
	size_t xlen = fmt_le16(q + 30), clen = fmt_le16(q + 32);
	uint32_t disk = fmt_le16(q + 34);
	e->lh_off = fmt_le32(q + 42);
	size_t total = 46 + (size_t)e->name_len + xlen + clen;
	if (len - at < total)
		return fail(err, errlen, "zip central directory entry at offset %zu truncated", at);
	e->name = (const char *)q + 46;
	const uint8_t *x = q + 46 + e->name_len, *xend = x + xlen;
	bool z64 = false;
	while (xend - x >= 4) {
		uint16_t id = fmt_le16(x), sz = fmt_le16(x + 2);
		x += 4;
		if (sz > xend - x)
			return fail(err, errlen, "zip extra field of '%.*s' damaged",
				    (int)MIN(e->name_len, 64), e->name);
		if (id == 0x0001) {
			const uint8_t *f = x, *fend = x + sz;
			z64 = true;
			if (e->usize == 0xffffffffu) {
				if (fend - f < 8)
					goto short64;
				e->usize = fmt_le64(f);
				f += 8;
			}
			if (e->csize == 0xffffffffu) {
				if (fend - f < 8)
					goto short64;
				e->csize = fmt_le64(f);
				f += 8;
			}
			if (e->lh_off == 0xffffffffu) {
				if (fend - f < 8)
					goto short64;
				e->lh_off = fmt_le64(f);
				f += 8;
			}
			if (disk == 0xffff) {
				if (fend - f < 4)
					goto short64;
				disk = fmt_le32(f);
			}
		}
		x += sz;
	}
	if (!z64 && (e->usize == 0xffffffffu || e->csize == 0xffffffffu ||
		     e->lh_off == 0xffffffffu || disk == 0xffff))
		return fail(err, errlen, "zip entry '%.*s' lacks its zip64 sizes (damaged)",
			    (int)MIN(e->name_len, 64), e->name);
	if (disk != 0)
		return fail(err, errlen, "multi-part (spanned) zip archives are not supported");
	*pos = at + total;
	return 0;
short64:
	return fail(err, errlen, "zip64 extra field of '%.*s' too short (damaged)",
		    (int)MIN(e->name_len, 64), e->name);
}

int zip_local_data_off(const void *buf, size_t len, const struct zip_entry *e,
		       uint64_t *data_off, char *err, size_t errlen)
{
	const uint8_t *p = buf;
	int show = (int)MIN(e->name_len, 64);
	if (len < ZIP_LOCAL_LEN || fmt_le32(p) != ZIP_SIG_LOCAL)
		return fail(err, errlen, "local header of zip member '%.*s' missing (damaged)",
			    show, e->name);
	size_t nlen = fmt_le16(p + 26), xlen = fmt_le16(p + 28);
	if (nlen != e->name_len || len - ZIP_LOCAL_LEN < nlen ||
	    memcmp(p + ZIP_LOCAL_LEN, e->name, nlen) != 0)
		return fail(err, errlen, "local header of zip member '%.*s' names another member "
				 "(damaged)", show, e->name);
	if (fmt_le16(p + 8) != e->method)
		return fail(err, errlen, "zip member '%.*s': local and central headers disagree on "
				 "the compression method (damaged)", show, e->name);
	*data_off = ZIP_LOCAL_LEN + nlen + xlen;
	return 0;
}

/* ---- members: where an array's bytes are, and decoding them ----------------- */

struct member {
	uint64_t off;   /* first byte of the member's data in the file */
	uint64_t csize; /* bytes in the file */
	uint64_t usize; /* bytes decoded (NPY header + array) */
	uint32_t crc;
	bool deflated;
	bool has_crc;
};

#define ZBUF_LEN (256u << 10)
#define STREAM_WIN (4u << 20)

struct zin {
	z_stream zs;
	int fd;
	uint64_t off, left;  /* compressed bytes not yet read */
	uint8_t *buf;
	bool ended;
};

static int zin_begin(struct zin *z, int fd, const struct member *m)
{
	memset(z, 0, sizeof(*z));
	z->buf = malloc(ZBUF_LEN);
	if (!z->buf)
		return -ENOMEM;
	if (inflateInit2(&z->zs, -MAX_WBITS) != Z_OK) {
		free(z->buf);
		return -ENOMEM;
	}
	z->fd = fd;
	z->off = m->off;
	z->left = m->csize;
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
			size_t n = (size_t)MIN(z->left, (uint64_t)ZBUF_LEN);
			int rc = pread_full(z->fd, z->buf, n, z->off);
			if (rc == -ENODATA)
				return fail(err, errlen, "compressed data runs past the end of the "
						 "file (truncated)");
			if (rc)
				return rc;
			z->off += n;
			z->left -= n;
			z->zs.next_in = z->buf;
			z->zs.avail_in = (uInt)n;
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

static int check_crc(const struct member *m, uint32_t crc, char *err, size_t errlen)
{
	if (m->has_crc && crc != m->crc)
		return fail(err, errlen, "zip member CRC mismatch (stored %08x, computed %08x): the "
				 "file is damaged", m->crc, crc);
	return 0;
}

/* The whole member into dst (m->usize bytes), CRC checked. */
static int member_read_all(int fd, const struct member *m, uint8_t *dst, char *err, size_t errlen)
{
	if (!m->deflated) {
		int rc = pread_full(fd, dst, (size_t)m->usize, m->off);
		if (rc == -ENODATA)
			return fail(err, errlen, "member data runs past the end of the file "
					 "(truncated)");
		if (rc)
			return rc;
	} else {
		struct zin z;
		int rc = zin_begin(&z, fd, m);
		if (rc)
			return rc;
		size_t got = 0;
		rc = zin_run(&z, dst, (size_t)m->usize, &got, err, errlen);
		if (rc == 0 && got == m->usize && !z.ended) {
			uint8_t extra;
			size_t more = 0;
			rc = zin_run(&z, &extra, 1, &more, err, errlen);
			if (rc == 0 && more)
				rc = fail(err, errlen, "member inflates to more than its recorded "
						 "%llu bytes (damaged)", (unsigned long long)m->usize);
		}
		if (rc == 0 && got != m->usize)
			rc = fail(err, errlen, "member inflates to %zu bytes, %llu recorded (damaged)",
				  got, (unsigned long long)m->usize);
		zin_end(&z);
		if (rc)
			return rc;
	}
	return m->has_crc ? check_crc(m, (uint32_t)crc32_z(0, dst, (size_t)m->usize), err, errlen)
			  : 0;
}

/* The first min(want, usize) decoded bytes into dst; *got says how many. */
static int member_read_prefix(int fd, const struct member *m, uint8_t *dst, size_t want,
			      size_t *got, char *err, size_t errlen)
{
	size_t n = (size_t)MIN((uint64_t)want, m->usize);
	if (!m->deflated) {
		int rc = pread_full(fd, dst, n, m->off);
		if (rc == -ENODATA)
			return fail(err, errlen, "member data runs past the end of the file "
					 "(truncated)");
		*got = n;
		return rc;
	}
	struct zin z;
	int rc = zin_begin(&z, fd, m);
	if (rc)
		return rc;
	rc = zin_run(&z, dst, n, got, err, errlen);
	zin_end(&z);
	return rc;
}

/* Decode the whole member through a window, calling fn on each piece
 * (pos = offset of data[0] in the decoded member); sizes and CRC checked. */
typedef void (*piece_fn)(void *ctx, const uint8_t *data, size_t len, uint64_t pos);

static int member_stream(int fd, const struct member *m, piece_fn fn, void *ctx, char *err,
			 size_t errlen)
{
	uint8_t *win = malloc(STREAM_WIN);
	if (!win)
		return -ENOMEM;
	struct zin z;
	int rc = 0;
	if (m->deflated && (rc = zin_begin(&z, fd, m)) != 0) {
		free(win);
		return rc;
	}
	uint32_t crc = 0;
	uint64_t pos = 0;
	while (pos < m->usize) {
		size_t n = (size_t)MIN(m->usize - pos, (uint64_t)STREAM_WIN), got = n;
		if (!m->deflated) {
			rc = pread_full(fd, win, n, m->off + pos);
			if (rc == -ENODATA)
				rc = fail(err, errlen, "member data runs past the end of the file "
						"(truncated)");
		} else {
			rc = zin_run(&z, win, n, &got, err, errlen);
			if (rc == 0 && got < n)
				rc = fail(err, errlen, "member inflates to %llu bytes, %llu recorded "
						 "(damaged)", (unsigned long long)(pos + got),
					  (unsigned long long)m->usize);
		}
		if (rc)
			break;
		crc = (uint32_t)crc32_z(crc, win, got);
		fn(ctx, win, got, pos);
		pos += got;
	}
	if (rc == 0 && m->deflated && !z.ended) {
		uint8_t extra;
		size_t more = 0;
		rc = zin_run(&z, &extra, 1, &more, err, errlen);
		if (rc == 0 && more)
			rc = fail(err, errlen, "member inflates to more than its recorded %llu bytes "
					 "(damaged)", (unsigned long long)m->usize);
	}
	if (m->deflated)
		zin_end(&z);
	free(win);
	return rc ? rc : check_crc(m, crc, err, errlen);
}

/* The NPY header of a member. */
static int member_npy_header(int fd, const struct member *m, struct npy_header *h, char *err,
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

/* ---- sample layout: which bytes of the array make sample k ------------------- */

struct nd_view {
	uint32_t ndim;                   /* dims left after merging; 0: one run */
	uint64_t dims[NPY_MAX_DIMS];
	uint64_t in_st[NPY_MAX_DIMS];    /* bytes, in the array data */
	uint64_t out_st[NPY_MAX_DIMS];   /* bytes, in the delivered sample */
	uint64_t base;                   /* first byte of the sample in the array data */
	uint64_t run;                    /* bytes contiguous on both sides */
	uint64_t total;                  /* bytes of the sample */
};

/* The array has shape[nd] (nd >= 1) in C or Fortran order; the sample is index
 * k of its first or last axis, delivered in C order. Dims are visited in
 * decreasing input stride, so runs come in increasing file order. */
static uint64_t axis_stride(const uint64_t *shape, uint32_t nd, bool fortran, bool last,
			    uint32_t isz)
{
	uint32_t a = last ? nd - 1 : 0;
	uint64_t s = isz;
	if (fortran)
		for (uint32_t i = 0; i < a; i++)
			s *= shape[i];
	else
		for (uint32_t i = nd - 1; i > a; i--)
			s *= shape[i];
	return s;
}

static void view_init(struct nd_view *v, const uint64_t *shape, uint32_t nd, bool fortran,
		      bool last, uint64_t k, uint32_t isz)
{
	uint64_t st[NPY_MAX_DIMS] = { 0 };
	uint64_t s = isz;
	if (fortran) {
		for (uint32_t i = 0; i < nd; i++) {
			st[i] = s;
			s *= shape[i];
		}
	} else {
		for (uint32_t i = nd; i-- > 0;) {
			st[i] = s;
			s *= shape[i];
		}
	}
	uint32_t a = last ? nd - 1 : 0;
	v->base = k * st[a];
	uint64_t dims[NPY_MAX_DIMS], in[NPY_MAX_DIMS], out[NPY_MAX_DIMS];
	uint32_t m = 0;
	for (uint32_t i = 0; i < nd; i++) {
		if (i == a)
			continue;
		dims[m] = shape[i];
		in[m] = st[i];
		m++;
	}
	s = isz;
	for (uint32_t j = m; j-- > 0;) {
		out[j] = s;
		s *= dims[j];
	}
	v->total = s;
	/* drop unit dims, then order by decreasing input stride */
	uint32_t n = 0;
	for (uint32_t j = 0; j < m; j++) {
		if (dims[j] == 1)
			continue;
		uint32_t at = n++;
		while (at > 0 && v->in_st[at - 1] < in[j]) {
			v->dims[at] = v->dims[at - 1];
			v->in_st[at] = v->in_st[at - 1];
			v->out_st[at] = v->out_st[at - 1];
			at--;
		}
		v->dims[at] = dims[j];
		v->in_st[at] = in[j];
		v->out_st[at] = out[j];
	}
	/* merge neighbours that are contiguous on both sides */
	uint32_t w = 0;
	for (uint32_t j = 1; j < n; j++) {
		if (v->in_st[w] == v->in_st[j] * v->dims[j] &&
		    v->out_st[w] == v->out_st[j] * v->dims[j]) {
			v->dims[w] *= v->dims[j];
			v->in_st[w] = v->in_st[j];
			v->out_st[w] = v->out_st[j];
		} else {
			w++;
			v->dims[w] = v->dims[j];
			v->in_st[w] = v->in_st[j];
			v->out_st[w] = v->out_st[j];
		}
	}
	n = n ? w + 1 : 0;
	v->run = isz;
	if (n > 0 && v->in_st[n - 1] == isz && v->out_st[n - 1] == isz) {
		v->run = v->dims[n - 1] * isz;
		n--;
	}
	v->ndim = n;
}

/* Copy the sample from the whole array data at src. */
static void gather_all(const uint8_t *src, uint8_t *dst, const struct nd_view *v)
{
	src += v->base;
	if (v->ndim == 0) {
		memcpy(dst, src, v->run);
		return;
	}
	uint32_t last = v->ndim - 1;
	uint64_t idx[NPY_MAX_DIMS] = { 0 };
	uint64_t in = 0, out = 0;
	const uint64_t n = v->dims[last], is = v->in_st[last], os = v->out_st[last];
	for (;;) {
		const uint8_t *s = src + in;
		uint8_t *d = dst + out;
		switch (v->run) {
		case 1:
			for (uint64_t i = 0; i < n; i++, s += is, d += os)
				*d = *s;
			break;
		case 2:
			for (uint64_t i = 0; i < n; i++, s += is, d += os)
				memcpy(d, s, 2);
			break;
		case 4:
			for (uint64_t i = 0; i < n; i++, s += is, d += os)
				memcpy(d, s, 4);
			break;
		case 8:
			for (uint64_t i = 0; i < n; i++, s += is, d += os)
				memcpy(d, s, 8);
			break;
		default:
			for (uint64_t i = 0; i < n; i++, s += is, d += os)
				memcpy(d, s, v->run);
			break;
		}
		uint32_t j = last;
		for (;;) {
			if (j == 0)
				return;
			j--;
			in += v->in_st[j];
			out += v->out_st[j];
			if (++idx[j] < v->dims[j])
				break;
			in -= v->in_st[j] * v->dims[j];
			out -= v->out_st[j] * v->dims[j];
			idx[j] = 0;
		}
	}
}

/* The same, fed piece by piece in increasing position (the streaming path). */
struct gather {
	const struct nd_view *v;
	uint8_t *dst;
	uint64_t hdr;        /* array data starts here in the member */
	uint64_t idx[NPY_MAX_DIMS];
	uint64_t in, out;    /* of the current run */
	uint64_t done;       /* bytes of the current run copied */
	bool finished;
};

static void gather_feed(void *ctx, const uint8_t *data, size_t len, uint64_t pos)
{
	struct gather *g = ctx;
	const struct nd_view *v = g->v;
	if (pos + len <= g->hdr)
		return;
	if (pos < g->hdr) {
		data += g->hdr - pos;
		len -= (size_t)(g->hdr - pos);
		pos = 0;
	} else {
		pos -= g->hdr;
	}
	uint64_t end = pos + len;
	while (!g->finished) {
		uint64_t want = v->base + g->in + g->done;
		if (want >= end || want < pos)
			return;
		uint64_t n = MIN(v->run - g->done, end - want);
		memcpy(g->dst + g->out + g->done, data + (want - pos), n);
		g->done += n;
		if (g->done < v->run)
			return;
		g->done = 0;
		uint32_t j = v->ndim;
		for (;;) {
			if (j == 0) {
				g->finished = true;
				break;
			}
			j--;
			g->in += v->in_st[j];
			g->out += v->out_st[j];
			if (++g->idx[j] < v->dims[j])
				break;
			g->in -= v->in_st[j] * v->dims[j];
			g->out -= v->out_st[j] * v->dims[j];
			g->idx[j] = 0;
		}
	}
}

static void swap_elems(uint8_t *p, uint64_t bytes, uint32_t isz)
{
	for (uint64_t i = 0; i + isz <= bytes; i += isz) {
		if (isz == 2) {
			uint16_t x;
			memcpy(&x, p + i, 2);
			x = __builtin_bswap16(x);
			memcpy(p + i, &x, 2);
		} else if (isz == 4) {
			uint32_t x;
			memcpy(&x, p + i, 4);
			x = __builtin_bswap32(x);
			memcpy(p + i, &x, 4);
		} else if (isz == 8) {
			uint64_t x;
			memcpy(&x, p + i, 8);
			x = __builtin_bswap64(x);
			memcpy(p + i, &x, 8);
		}
	}
}

/* dst (cols x rows) = transpose of src (rows x cols), elements of isz bytes, by
 * tiles of about 16 KiB: the source tile stays in L1 while each destination row
 * of the tile is written as one sequential run. */
static void transpose(const uint8_t *src, uint8_t *dst, uint64_t rows, uint64_t cols,
		      uint32_t isz)
{
	const uint64_t tc = MIN(cols, (uint64_t)64);
	const uint64_t tr = MAX((uint64_t)64, (16u << 10) / (tc * isz));
	for (uint64_t r0 = 0; r0 < rows; r0 += tr) {
		uint64_t nr = MIN(rows - r0, tr);
		for (uint64_t c0 = 0; c0 < cols; c0 += tc) {
			uint64_t c1 = MIN(cols, c0 + tc);
			for (uint64_t c = c0; c < c1; c++) {
				const uint8_t *sp = src + (r0 * cols + c) * isz;
				uint8_t *dp = dst + (c * rows + r0) * isz;
				uint64_t step = cols * isz;
				switch (isz) {
				case 1:
					for (uint64_t r = 0; r < nr; r++, sp += step)
						dp[r] = *sp;
					break;
				case 2:
					for (uint64_t r = 0; r < nr; r++, sp += step)
						memcpy(dp + 2 * r, sp, 2);
					break;
				case 4:
					for (uint64_t r = 0; r < nr; r++, sp += step)
						memcpy(dp + 4 * r, sp, 4);
					break;
				default:
					for (uint64_t r = 0; r < nr; r++, sp += step)
						memcpy(dp + 8 * r, sp, 8);
					break;
				}
			}
		}
	}
}

/* Are the n samples interleaved element by element (C order, last axis: the
 * array is a (sample elements x n) matrix)? Then a decoded member is worth
 * transposing once to sample-major order. */
static bool interleaved(const struct nd_view *v, uint64_t n, uint32_t isz)
{
	return n > 1 && v->ndim == 1 && v->run == isz && v->out_st[0] == isz &&
	       v->in_st[0] == n * isz && v->total == v->dims[0] * isz;
}

/* ---- per-file facts (cat_file.aux) ------------------------------------------
 * aux[0] member data offset, aux[1] stored bytes, aux[2] decoded bytes,
 * aux[3] NPY header length | flags | zip CRC << 32. */
#define AUX_HDR_MASK 0xffffffull
#define AUX_DEFLATED (1ull << 24)
#define AUX_FORTRAN (1ull << 25)
#define AUX_LAST (1ull << 26)
#define AUX_SWAP (1ull << 27)
#define AUX_CRC (1ull << 28)

static void aux_put(uint64_t *aux, const struct member *m, const struct npy_header *h, bool last)
{
	aux[0] = m->off;
	aux[1] = m->csize;
	aux[2] = m->usize;
	aux[3] = (h->data_off & AUX_HDR_MASK) | (m->deflated ? AUX_DEFLATED : 0) |
		 (h->fortran ? AUX_FORTRAN : 0) | (last ? AUX_LAST : 0) | (h->swap ? AUX_SWAP : 0) |
		 (m->has_crc ? AUX_CRC : 0) | (uint64_t)m->crc << 32;
}

static void aux_get(const uint64_t *aux, struct member *m, uint64_t *hdr)
{
	m->off = aux[0];
	m->csize = aux[1];
	m->usize = aux[2];
	m->deflated = aux[3] & AUX_DEFLATED;
	m->has_crc = aux[3] & AUX_CRC;
	m->crc = (uint32_t)(aux[3] >> 32);
	*hdr = aux[3] & AUX_HDR_MASK;
}

/* ---- scanning ------------------------------------------------------------------ */

static int sample_axis(struct cat_builder *b, bool *last)
{
	const char *a = cat_builder_params(b)->npz_sample_axis;
	if (!a || !*a || strcmp(a, "last") == 0) {
		*last = true;
	} else if (strcmp(a, "first") == 0) {
		*last = false;
	} else {
		cat_builder_error(b, "npz_sample_axis is '%s': use 'last' (DLIO) or 'first'", a);
		return SEER_EDATASET;
	}
	return 0;
}

/* Is the array of h (held by member m) usable as samples? Fills the sample
 * type, its bytes and the sample count. */
static int array_check(struct cat_builder *b, const struct npy_header *h, const struct member *m,
		       bool last, const char *what, struct seer_wire_type *t, uint64_t *bytes,
		       uint64_t *n)
{
	char sh[160];
	if (h->ndim == 0) {
		cat_builder_error(b, "%s is a 0-d array: it has no sample axis", what);
		return SEER_EDATASET;
	}
	if (m->usize != h->data_off + h->nbytes) {
		cat_builder_error(b, "%s holds %llu bytes but its NPY header describes %llu (a "
				  "%llu-byte header and shape %s of %u-byte elements): %s", what,
				  (unsigned long long)m->usize,
				  (unsigned long long)(h->data_off + h->nbytes),
				  (unsigned long long)h->data_off,
				  shape_str(sh, sizeof(sh), h->shape, h->ndim), h->itemsize,
				  m->usize < h->data_off + h->nbytes ? "truncated, or a damaged header"
								     : "damaged");
		return SEER_EDATASET;
	}
	uint32_t nd = h->ndim;
	*n = last ? h->shape[nd - 1] : h->shape[0];
	*t = (struct seer_wire_type){ .dtype = h->dtype, .ndim = nd - 1 };
	*bytes = h->itemsize;
	for (uint32_t i = 0; i + 1 < nd; i++) {
		t->dims[i] = h->shape[last ? i : i + 1];
		*bytes *= t->dims[i];
	}
	if (*n > 0 && *bytes == 0) {
		cat_builder_error(b, "%s of shape %s holds empty samples", what,
				  shape_str(sh, sizeof(sh), h->shape, nd));
		return SEER_EDATASET;
	}
	if (*n > UINT32_MAX) {
		cat_builder_error(b, "%s holds %llu samples (at most 2^32-1 per file)", what,
				  (unsigned long long)*n);
		return SEER_EDATASET;
	}
	return 0;
}

/* The array becomes the samples of file `file`. */
static int array_add(struct cat_builder *b, uint32_t file, const struct npy_header *h,
		     const struct member *m, bool last, const struct seer_wire_type *t,
		     uint64_t bytes, uint64_t n, const int64_t *labels)
{
	uint32_t type;
	int rc = cat_intern_type(b, t, &type);
	if (rc)
		return rc;
	aux_put(cat_builder_aux(b, file), m, h, last);
	struct nd_view v;
	view_init(&v, h->shape, h->ndim, h->fortran, last, 0, h->itemsize);
	if ((m->deflated || v.ndim > 0) && n > 1 && m->usize > fmt_cache_limit()) {
		static _Atomic bool warned;
		char sz[32];
		if (!atomic_exchange(&warned, true))
			log_warn("%s: its %s array is larger than the per-reader member cache, so "
				 "every sample will decode it whole: store such data uncompressed "
				 "with samples on the first axis (further files not reported)",
				 cat_builder_path(b, file), fmt_size(sz, sizeof(sz), m->usize));
	}
	uint64_t stride = axis_stride(h->shape, h->ndim, h->fortran, last, h->itemsize);
	for (uint64_t k = 0; k < n; k++) {
		rc = cat_add_sample(b, file, k * stride, bytes, labels ? labels[k] : -1, type);
		if (rc)
			return rc;
	}
	return 0;
}

/* Labels: an integer (or integral float) array of n values. */
static int labels_decode(const uint8_t *buf, uint64_t len, uint64_t n, int64_t *out,
			 const char *what, char *err, size_t errlen)
{
	struct npy_header h;
	uint64_t need;
	int rc = npy_parse_header(buf, (size_t)len, &h, &need, err, errlen);
	if (rc == -EAGAIN)
		return fail(err, errlen, "%s: data ends inside its NPY header", what);
	if (rc)
		return rc;
	if (h.data_off + h.nbytes != len)
		return fail(err, errlen, "%s holds %llu bytes but its NPY header describes %llu",
			    what, (unsigned long long)len,
			    (unsigned long long)(h.data_off + h.nbytes));
	uint32_t big = 0;
	for (uint32_t i = 0; i < h.ndim; i++)
		big += h.shape[i] > 1;
	if (big > 1)
		return fail(err, errlen, "%s is not 1-D (one label per sample)", what);
	if (h.nelem != n)
		return fail(err, errlen, "%s holds %llu labels for %llu samples", what,
			    (unsigned long long)h.nelem, (unsigned long long)n);
	if (h.dtype == SEER_DT_F16)
		return fail(err, errlen, "%s: float16 labels are not supported", what);
	const uint8_t *p = buf + h.data_off;
	for (uint64_t i = 0; i < n; i++, p += h.itemsize) {
		uint8_t e[8];
		memcpy(e, p, h.itemsize);
		if (h.swap)
			swap_elems(e, h.itemsize, h.itemsize);
		int64_t v;
		switch (h.dtype) {
		case SEER_DT_BOOL: case SEER_DT_U8: v = e[0]; break;
		case SEER_DT_I8: v = (int8_t)e[0]; break;
		case SEER_DT_U16: { uint16_t x; memcpy(&x, e, 2); v = x; break; }
		case SEER_DT_I16: { int16_t x; memcpy(&x, e, 2); v = x; break; }
		case SEER_DT_U32: { uint32_t x; memcpy(&x, e, 4); v = x; break; }
		case SEER_DT_I32: { int32_t x; memcpy(&x, e, 4); v = x; break; }
		case SEER_DT_I64: memcpy(&v, e, 8); break;
		case SEER_DT_U64: {
			uint64_t x;
			memcpy(&x, e, 8);
			if (x > INT64_MAX)
				return fail(err, errlen, "%s: label %llu of sample %llu exceeds int64",
					    what, (unsigned long long)x, (unsigned long long)i);
			v = (int64_t)x;
			break;
		}
		default: {
			double x;
			if (h.dtype == SEER_DT_F32) {
				float f;
				memcpy(&f, e, 4);
				x = f;
			} else {
				memcpy(&x, e, 8);
			}
			if (!(x >= -9.2e18 && x <= 9.2e18) || x != (double)(int64_t)x)
				return fail(err, errlen, "%s: label %g of sample %llu is not an "
						 "integer", what, x, (unsigned long long)i);
			v = (int64_t)x;
			break;
		}
		}
		out[i] = v;
	}
	return 0;
}

#define CD_MAX (256ull << 20)
#define LABELS_MAX (1ull << 30)

struct zip_index {
	struct zip_dir d;
	uint8_t *cd;
};

static int zip_read_index(int fd, uint64_t size, struct zip_index *z, char *err, size_t errlen)
{
	size_t tl = (size_t)MIN(size, (uint64_t)ZIP_TAIL_MAX);
	uint8_t *tail = malloc(MAX(tl, (size_t)1));
	if (!tail)
		return -ENOMEM;
	int rc = pread_full(fd, tail, tl, size - tl);
	if (rc == 0)
		rc = zip_find_eocd(tail, tl, size, &z->d, err, errlen);
	free(tail);
	if (rc)
		return rc;
	if (z->d.eocd64_off != UINT64_MAX) {
		uint8_t rec[ZIP_EOCD64_LEN];
		rc = pread_full(fd, rec, sizeof(rec), z->d.eocd64_off);
		if (rc == -ENODATA)
			return fail(err, errlen, "zip64 record runs past the end of the file");
		if (rc == 0)
			rc = zip_parse_eocd64(rec, sizeof(rec), size, &z->d, err, errlen);
		if (rc)
			return rc;
	}
	if (z->d.cd_size > CD_MAX)
		return fail(err, errlen, "zip central directory of %llu bytes is too large for an "
				 "npz", (unsigned long long)z->d.cd_size);
	z->cd = malloc(MAX((size_t)z->d.cd_size, (size_t)1));
	if (!z->cd)
		return -ENOMEM;
	rc = pread_full(fd, z->cd, (size_t)z->d.cd_size, z->d.cd_off);
	return rc == -ENODATA ? fail(err, errlen, "zip central directory truncated") : rc;
}

/* The entry named name + ".npy" (np.savez's naming) or exactly name. */
static int zip_lookup(const struct zip_index *z, const char *name, struct zip_entry *out,
		      bool *found, char *list, size_t listlen, char *err, size_t errlen)
{
	size_t pos = 0, nl = strlen(name), used = 0;
	*found = false;
	list[0] = '\0';
	bool exact = false;
	for (uint64_t i = 0; i < z->d.nentries; i++) {
		struct zip_entry e;
		int rc = zip_next_entry(z->cd, (size_t)z->d.cd_size, &pos, &e, err, errlen);
		if (rc)
			return rc;
		if (used < listlen && i < 12)
			used += (size_t)snprintf(list + used, listlen - used, "%s'%.*s'",
						 i ? ", " : "", (int)MIN(e.name_len, 40), e.name);
		bool npy = e.name_len == nl + 4 && memcmp(e.name, name, nl) == 0 &&
			   memcmp(e.name + nl, ".npy", 4) == 0;
		bool same = e.name_len == nl && memcmp(e.name, name, nl) == 0;
		if ((npy && !exact) || (same && !*found)) {
			*out = e;
			*found = true;
			exact = npy;
		}
	}
	return 0;
}

static const char *method_name(unsigned m)
{
	switch (m) {
	case 1: return "shrink";
	case 6: return "implode";
	case 9: return "deflate64";
	case 12: return "bzip2";
	case 14: return "lzma";
	case 93: return "zstd";
	case 95: return "xz";
	case 98: return "ppmd";
	case 99: return "AES encryption";
	default: return "unknown";
	}
}

static int member_open(int fd, uint64_t size, const struct zip_index *z,
		       const struct zip_entry *e, struct member *m, char *err, size_t errlen)
{
	int show = (int)MIN(e->name_len, 64);
	if (e->flags & 1)
		return fail(err, errlen, "zip member '%.*s' is encrypted", show, e->name);
	if (e->method != 0 && e->method != 8)
		return fail(err, errlen, "zip member '%.*s' is compressed with method %u (%s): "
				 "only stored and deflate (np.savez, np.savez_compressed) are "
				 "supported", show, e->name, e->method, method_name(e->method));
	if (e->method == 0 && e->csize != e->usize)
		return fail(err, errlen, "stored zip member '%.*s' has sizes %llu and %llu "
				 "(damaged)", show, e->name, (unsigned long long)e->csize,
			    (unsigned long long)e->usize);
	if (e->lh_off >= z->d.cd_off)
		return fail(err, errlen, "zip member '%.*s' starts past the member area (damaged)",
			    show, e->name);
	size_t want = (size_t)MIN((uint64_t)ZIP_LOCAL_LEN + e->name_len, size - e->lh_off);
	uint8_t *lh = malloc(want);
	if (!lh)
		return -ENOMEM;
	uint64_t doff;
	int rc = pread_full(fd, lh, want, e->lh_off);
	if (rc == 0)
		rc = zip_local_data_off(lh, want, e, &doff, err, errlen);
	free(lh);
	if (rc)
		return rc;
	m->off = e->lh_off + doff;
	if (m->off > z->d.cd_off || e->csize > z->d.cd_off - m->off)
		return fail(err, errlen, "zip member '%.*s' runs into the central directory "
				 "(truncated or damaged)", show, e->name);
	m->csize = e->csize;
	m->usize = e->usize;
	m->crc = e->crc32;
	m->deflated = e->method == 8;
	m->has_crc = true;
	return 0;
}

static int npz_labels(int fd, uint64_t size, const struct zip_index *z, const char *name,
		      uint64_t n, int64_t **out, char *err, size_t errlen)
{
	struct zip_entry e;
	bool found;
	char list[512];
	int rc = zip_lookup(z, name, &e, &found, list, sizeof(list), err, errlen);
	if (rc)
		return rc;
	if (!found)
		return fail(err, errlen, "no labels member '%s.npy' (members: %s): set "
				 "dataset.npz_labels to the labels member, or to \"\" for none",
			    name, list);
	struct member m;
	if ((rc = member_open(fd, size, z, &e, &m, err, errlen)) != 0)
		return rc;
	if (m.usize > LABELS_MAX)
		return fail(err, errlen, "labels member '%s' of %llu bytes is too large", name,
			    (unsigned long long)m.usize);
	uint8_t *buf = malloc(MAX((size_t)m.usize, (size_t)1));
	int64_t *lab = malloc(MAX((size_t)n, (size_t)1) * sizeof(int64_t));
	if (!buf || !lab) {
		free(buf);
		free(lab);
		return -ENOMEM;
	}
	char what[128];
	snprintf(what, sizeof(what), "labels member '%.*s'", (int)MIN(e.name_len, 64), e.name);
	rc = member_read_all(fd, &m, buf, err, errlen);
	if (rc == SEER_EDATASET) {
		char inner[256];
		str_copy(inner, sizeof(inner), err);
		fail(err, errlen, "%s: %s", what, inner);
	}
	if (rc == 0)
		rc = labels_decode(buf, m.usize, n, lab, what, err, errlen);
	free(buf);
	if (rc) {
		free(lab);
		return rc;
	}
	*out = lab;
	return 0;
}

static int npz_scan(struct cat_builder *b, uint32_t file, int fd, uint64_t size)
{
	const struct cat_params *p = cat_builder_params(b);
	const char *xname = p->npz_data && *p->npz_data ? p->npz_data : "x";
	const char *yname = p->npz_labels ? p->npz_labels : "y";
	bool last;
	int rc = sample_axis(b, &last);
	if (rc)
		return rc;
	char err[512], list[512], what[128];
	struct zip_index z = { .cd = NULL };
	struct zip_entry e;
	struct member m;
	struct npy_header h;
	int64_t *labels = NULL;
	bool found;
	rc = zip_read_index(fd, size, &z, err, sizeof(err));
	if (rc == 0)
		rc = zip_lookup(&z, xname, &e, &found, list, sizeof(list), err, sizeof(err));
	if (rc == 0 && !found)
		rc = fail(err, sizeof(err), "no data member '%s.npy' (members: %s): set "
			  "dataset.npz_data to the member holding the samples", xname, list);
	if (rc)
		goto out;
	snprintf(what, sizeof(what), "data member '%.*s'", (int)MIN(e.name_len, 64), e.name);
	rc = member_open(fd, size, &z, &e, &m, err, sizeof(err));
	if (rc == 0)
		rc = member_npy_header(fd, &m, &h, err, sizeof(err));
	if (rc == SEER_EDATASET) {
		char inner[512];
		str_copy(inner, sizeof(inner), err);
		fail(err, sizeof(err), "%s: %s", what, inner);
	}
	if (rc)
		goto out;
	struct seer_wire_type t;
	uint64_t bytes, n;
	if ((rc = array_check(b, &h, &m, last, what, &t, &bytes, &n)) != 0) {
		free(z.cd);
		return rc;
	}
	if (*yname && (rc = npz_labels(fd, size, &z, yname, n, &labels, err, sizeof(err))) != 0)
		goto out;
	free(z.cd);
	rc = array_add(b, file, &h, &m, last, &t, bytes, n, labels);
	free(labels);
	return rc;
out:
	free(z.cd);
	free(labels);
	if (rc == SEER_EDATASET)
		cat_builder_error(b, "%s", err);
	return rc;
}

static int npy_scan(struct cat_builder *b, uint32_t file, int fd, uint64_t size)
{
	bool last;
	int rc = sample_axis(b, &last);
	if (rc)
		return rc;
	char err[512];
	struct member m = { .off = 0, .csize = size, .usize = size };
	struct npy_header h;
	rc = member_npy_header(fd, &m, &h, err, sizeof(err));
	if (rc == SEER_EDATASET)
		cat_builder_error(b, "%s", err);
	if (rc)
		return rc;
	struct seer_wire_type t;
	uint64_t bytes, n;
	rc = array_check(b, &h, &m, last, "the file", &t, &bytes, &n);
	return rc ? rc : array_add(b, file, &h, &m, last, &t, bytes, n, NULL);
}

static bool has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);
	return n > m && strcasecmp(s + n - m, suf) == 0;
}

static bool npz_accept(const struct cat_params *p, const char *relpath)
{
	(void)p;
	return has_suffix(relpath, ".npz");
}

static bool npy_accept(const struct cat_params *p, const char *relpath)
{
	(void)p;
	return has_suffix(relpath, ".npy");
}

/* ---- reading: the decoded-member cache ------------------------------------------ */

static _Atomic uint64_t cache_limit = FMT_CACHE_DEFAULT;

void fmt_set_cache_limit(uint64_t bytes)
{
	atomic_store_explicit(&cache_limit, bytes ? bytes : FMT_CACHE_DEFAULT,
			      memory_order_relaxed);
}

uint64_t fmt_cache_limit(void)
{
	return atomic_load_explicit(&cache_limit, memory_order_relaxed);
}

/* The cache: decoded members in LRU order, found by file through an
 * open-addressing map; bounded only by bytes. */
struct cache_ent {
	uint8_t *buf;        /* the decoded member */
	uint64_t len;
	bool sample_major;   /* buf holds the samples one after the other */
	uint32_t file;
	struct cache_ent *prev, *next; /* LRU list, most recent first */
};

struct arr_state {
	struct cache_ent **map; /* cap slots, NULL: empty */
	uint32_t cap, count;
	struct cache_ent lru;   /* list head */
	uint64_t bytes, limit, loads;
};

static struct arr_state *arr_state(struct cat_reader *rd)
{
	if (!rd->fmt_state) {
		struct arr_state *st = calloc(1, sizeof(*st));
		if (!st)
			return NULL;
		st->limit = fmt_cache_limit();
		st->lru.next = st->lru.prev = &st->lru;
		rd->fmt_state = st;
	}
	return rd->fmt_state;
}

static uint32_t map_home(const struct arr_state *st, uint32_t file)
{
	return (uint32_t)((file * 0x9e3779b97f4a7c15ull) >> 32) & (st->cap - 1);
}

static struct cache_ent **map_find(struct arr_state *st, uint32_t file)
{
	if (st->cap == 0)
		return NULL;
	for (uint32_t i = map_home(st, file);; i = (i + 1) & (st->cap - 1)) {
		if (!st->map[i])
			return NULL;
		if (st->map[i]->file == file)
			return &st->map[i];
	}
}

static void map_put(struct arr_state *st, struct cache_ent *e)
{
	uint32_t i = map_home(st, e->file);
	while (st->map[i])
		i = (i + 1) & (st->cap - 1);
	st->map[i] = e;
}

static int map_add(struct arr_state *st, struct cache_ent *e)
{
	if ((st->count + 1) * 2 > st->cap) {
		uint32_t ncap = st->cap ? st->cap * 2 : 64;
		struct cache_ent **old = st->map, **nm = calloc(ncap, sizeof(*nm));
		if (!nm)
			return -ENOMEM;
		uint32_t ocap = st->cap;
		st->map = nm;
		st->cap = ncap;
		for (uint32_t i = 0; i < ocap; i++)
			if (old[i])
				map_put(st, old[i]);
		free(old);
	}
	map_put(st, e);
	st->count++;
	return 0;
}

/* Remove the slot, shifting back the entries of its probe chain. */
static void map_del(struct arr_state *st, struct cache_ent **slot)
{
	uint32_t i = (uint32_t)(slot - st->map), j = i;
	st->map[i] = NULL;
	for (;;) {
		j = (j + 1) & (st->cap - 1);
		if (!st->map[j])
			break;
		uint32_t h = map_home(st, st->map[j]->file);
		/* may the entry at j move to the hole at i? (h not cyclically in (i, j]) */
		if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
			st->map[i] = st->map[j];
			st->map[j] = NULL;
			i = j;
		}
	}
	st->count--;
}

static void lru_unlink(struct cache_ent *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
}

static void lru_front(struct arr_state *st, struct cache_ent *e)
{
	e->next = st->lru.next;
	e->prev = &st->lru;
	st->lru.next->prev = e;
	st->lru.next = e;
}

static void cache_drop(struct arr_state *st, struct cache_ent *e)
{
	map_del(st, map_find(st, e->file));
	lru_unlink(e);
	st->bytes -= e->len + sizeof(*e);
	free(e->buf);
	free(e);
}

static void arr_reader_fini(struct cat_reader *rd)
{
	struct arr_state *st = rd->fmt_state;
	if (!st)
		return;
	while (st->lru.next != &st->lru)
		cache_drop(st, st->lru.next);
	free(st->map);
	free(st);
	rd->fmt_state = NULL;
}

uint64_t fmt_member_loads(const struct cat_reader *rd)
{
	if (!rd->cat || (rd->cat->fmt != &fmt_npz && rd->cat->fmt != &fmt_npy) || !rd->fmt_state)
		return 0;
	return ((const struct arr_state *)rd->fmt_state)->loads;
}

static struct cache_ent *cache_find(struct arr_state *st, uint32_t file)
{
	struct cache_ent **slot = map_find(st, file);
	if (!slot)
		return NULL;
	lru_unlink(*slot);
	lru_front(st, *slot);
	return *slot;
}

/* Keep buf (len bytes, decoded member of file) after evicting least recently
 * used members to stay within the limit; frees buf on failure. */
static struct cache_ent *cache_add(struct arr_state *st, uint32_t file, uint8_t *buf,
				   uint64_t len, bool sample_major)
{
	while (st->lru.prev != &st->lru && st->bytes + len + sizeof(struct cache_ent) > st->limit)
		cache_drop(st, st->lru.prev);
	struct cache_ent *e = malloc(sizeof(*e));
	if (e)
		*e = (struct cache_ent){ .buf = buf, .len = len, .sample_major = sample_major,
					 .file = file };
	if (!e || map_add(st, e) != 0) {
		free(e);
		free(buf);
		return NULL;
	}
	lru_front(st, e);
	st->bytes += len + sizeof(*e);
	return e;
}

static int arr_read(struct cat_reader *rd, uint64_t id, const struct cat_sample *s, void *dst)
{
	const struct catalog *c = rd->cat;
	const struct cat_file *f = &c->files[s->file];
	const struct seer_wire_type *t = &c->types[s->type];
	struct member m;
	uint64_t hdr;
	aux_get(f->aux, &m, &hdr);
	bool last = f->aux[3] & AUX_LAST, fortran = f->aux[3] & AUX_FORTRAN;
	bool swap = f->aux[3] & AUX_SWAP;
	uint32_t isz = fmt_dtype_size(t->dtype);
	uint32_t nd = t->ndim + 1;
	uint64_t shape[NPY_MAX_DIMS];
	for (uint32_t i = 0; i < t->ndim; i++)
		shape[last ? i : i + 1] = t->dims[i];
	shape[last ? nd - 1 : 0] = f->nsamples;
	struct nd_view v;
	view_init(&v, shape, nd, fortran, last, id - f->first, isz);
	if (isz == 0 || v.total != s->length || v.base != s->offset ||
	    hdr + v.base + v.total > m.usize)
		return cat_read_error(rd, id, SEER_EDATASET, "catalog entry does not match the "
				      "array layout (damaged catalog cache?): rebuild the catalog");
	int fd = cat_reader_fd(rd, s->file);
	if (fd < 0)
		return fd;
	char err[512];
	int rc = 0;
	if (!m.deflated && v.ndim == 0) {
		rc = pread_full(fd, dst, (size_t)v.total, m.off + hdr + v.base);
		if (rc == -ENODATA)
			return cat_read_error(rd, id, SEER_EDATASET, "file shorter than its catalogued "
					      "layout: restart seerd to rescan");
		if (rc)
			return rc;
		if (swap)
			swap_elems(dst, v.total, isz);
		return 0;
	}
	struct arr_state *st = arr_state(rd);
	if (!st)
		return -ENOMEM;
	struct cache_ent *e = cache_find(st, s->file);
	if (!e && m.usize <= st->limit) {
		uint8_t *buf = malloc(MAX((size_t)m.usize, (size_t)1));
		if (!buf)
			return -ENOMEM;
		rc = member_read_all(fd, &m, buf, err, sizeof(err));
		st->loads++;
		if (rc) {
			free(buf);
			return rc == SEER_EDATASET ? cat_read_error(rd, id, rc, "%s", err) : rc;
		}
		uint64_t len = m.usize;
		bool major = false;
		if (interleaved(&v, f->nsamples, isz)) {
			uint64_t data = m.usize - hdr;
			uint8_t *tbuf = malloc(MAX((size_t)data, (size_t)1));
			if (tbuf) {
				transpose(buf + hdr, tbuf, v.dims[0], f->nsamples, isz);
				free(buf);
				buf = tbuf;
				len = data;
				major = true;
			}
		}
		e = cache_add(st, s->file, buf, len, major);
		if (!e)
			return -ENOMEM;
	}
	if (e && e->sample_major) {
		memcpy(dst, e->buf + (id - f->first) * v.total, (size_t)v.total);
	} else if (e) {
		gather_all(e->buf + hdr, dst, &v);
	} else {
		/* larger than the whole cache: one decoding pass per sample */
		struct gather g = { .v = &v, .dst = dst, .hdr = hdr };
		rc = member_stream(fd, &m, gather_feed, &g, err, sizeof(err));
		st->loads++;
		if (rc == 0 && !g.finished)
			rc = fail(err, sizeof(err), "member ended before the sample's bytes");
		if (rc)
			return rc == SEER_EDATASET ? cat_read_error(rd, id, rc, "%s", err) : rc;
	}
	if (swap)
		swap_elems(dst, v.total, isz);
	return 0;
}

const struct fmt_ops fmt_npz = {
	.name = "npz",
	.accept = npz_accept,
	.scan = npz_scan,
	.read = arr_read,
	.reader_fini = arr_reader_fini,
};

const struct fmt_ops fmt_npy = {
	.name = "npy",
	.accept = npy_accept,
	.scan = npy_scan,
	.read = arr_read,
	.reader_fini = arr_reader_fini,
};
