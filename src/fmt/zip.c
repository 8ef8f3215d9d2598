/* The zip container of an .npz: the public parsers of its end records,
 * central directory entries and local headers (fmt.h), and the member index
 * the npz scan builds from them.
 *
 * Parsers read only the buffer given; zip64, multi-part archives, encryption
 * and compression methods other than stored and deflate are recognised and
 * refused by name. Pure functions, or reads of the caller's fd: any thread. */
#define _GNU_SOURCE
#include "npz.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seer.h"
#include "../util/util.h"

#define fail fmt_fail

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

/* ---- an archive's members ----------------------------------------------------- */

#define CD_MAX (256ull << 20)

int npz_zip_read_index(int fd, uint64_t size, struct zip_index *z, char *err, size_t errlen)
{
	size_t tl = (size_t)MIN(size, (uint64_t)ZIP_TAIL_MAX);
	uint8_t *tail = malloc(MAX(tl, (size_t)1));
	if (!tail)
		return -ENOMEM;
	int rc = fmt_pread(fd, tail, tl, size - tl);
	if (rc == 0)
		rc = zip_find_eocd(tail, tl, size, &z->d, err, errlen);
	free(tail);
	if (rc)
		return rc;
	if (z->d.eocd64_off != UINT64_MAX) {
		uint8_t rec[ZIP_EOCD64_LEN];
		rc = fmt_pread(fd, rec, sizeof(rec), z->d.eocd64_off);
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
	rc = fmt_pread(fd, z->cd, (size_t)z->d.cd_size, z->d.cd_off);
	return rc == -ENODATA ? fail(err, errlen, "zip central directory truncated") : rc;
}

int npz_zip_lookup(const struct zip_index *z, const char *name, struct zip_entry *out,
		   bool *found, char *list, size_t listlen, char *err, size_t errlen)
{
	size_t pos = 0, nl = strlen(name), used = 0;
	uint64_t n_npy = 0, n_same = 0;
	struct zip_entry e_npy = { 0 }, e_same = { 0 };
	list[0] = '\0';
	for (uint64_t i = 0; i < z->d.nentries; i++) {
		struct zip_entry e;
		int rc = zip_next_entry(z->cd, (size_t)z->d.cd_size, &pos, &e, err, errlen);
		if (rc)
			return rc;
		if (used < listlen && i < 12)
			used += (size_t)snprintf(list + used, listlen - used, "%s'%.*s'",
						 i ? ", " : "", (int)MIN(e.name_len, 40), e.name);
		if (e.name_len == nl + 4 && memcmp(e.name, name, nl) == 0 &&
		    memcmp(e.name + nl, ".npy", 4) == 0 && n_npy++ == 0)
			e_npy = e;
		if (e.name_len == nl && memcmp(e.name, name, nl) == 0 && n_same++ == 0)
			e_same = e;
	}
	*found = n_npy > 0 || n_same > 0;
	*out = n_npy ? e_npy : e_same;
	uint64_t copies = n_npy ? n_npy : n_same;
	if (copies > 1)
		return fail(err, errlen, "zip member '%.*s' appears %llu times (numpy reads the last "
				 "copy, other zip readers the first): the archive is ambiguous; "
				 "rewrite it with one member of each name", (int)MIN(out->name_len, 64),
			    out->name, (unsigned long long)copies);
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

int npz_member_open(int fd, uint64_t size, const struct zip_index *z, const struct zip_entry *e,
		    struct member *m, char *err, size_t errlen)
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
	int rc = fmt_pread(fd, lh, want, e->lh_off);
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

