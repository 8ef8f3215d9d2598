/* The tar header parser and member walk (src/fmt/tar.c) on archives built
 * here byte by byte: ustar (with its prefix field), GNU long names, pax
 * path and size records, base-256 sizes, checksums (unsigned and signed,
 * damaged), truncation at every place it can happen, WebDataset's name split
 * and the ASCII label. No test data needed. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/fmt/fmt.h"
#include "../../src/fmt/tar.h"
#include "seer.h"

struct ar {
	uint8_t buf[1 << 18];
	size_t len;
};

static void put_oct(uint8_t *f, size_t n, uint64_t v)
{
	char tmp[32];
	snprintf(tmp, sizeof(tmp), "%0*llo", (int)n - 1, (unsigned long long)v);
	memcpy(f, tmp, n - 1);
	f[n - 1] = 0;
}

static void set_cksum(uint8_t *h)
{
	memset(h + 148, ' ', 8);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += h[i];
	char tmp[8];
	snprintf(tmp, sizeof(tmp), "%06o", sum);
	memcpy(h + 148, tmp, 6);
	h[154] = 0;
	h[155] = ' ';
}

/* A header block (magic: "posix" ustar, "gnu", or NULL for v7) and data. */
static uint8_t *add(struct ar *a, const char *name, const char *prefix, char type, const void *data,
		    size_t n, const char *magic)
{
	uint8_t *h = a->buf + a->len;
	memset(h, 0, 512);
	memcpy(h, name, strnlen(name, 100));
	put_oct(h + 100, 8, 0644);
	put_oct(h + 124, 12, n);
	put_oct(h + 136, 12, 1700000000);
	h[156] = (uint8_t)type;
	if (magic && strcmp(magic, "posix") == 0)
		memcpy(h + 257, "ustar\0" "00", 8);
	else if (magic)
		memcpy(h + 257, "ustar  \0", 8);
	if (prefix)
		memcpy(h + 345, prefix, strlen(prefix));
	set_cksum(h);
	a->len += 512;
	memcpy(a->buf + a->len, data, n);
	size_t pad = (n + 511) / 512 * 512;
	memset(a->buf + a->len + n, 0, pad - n);
	a->len += pad;
	return h;
}

static void end(struct ar *a)
{
	memset(a->buf + a->len, 0, 1024);
	a->len += 1024;
}

struct mem {
	const uint8_t *p;
	size_t n;
	unsigned reads;
	uint64_t bytes;
};

static int mem_read(void *ctx, void *buf, size_t len, uint64_t off)
{
	struct mem *m = ctx;
	m->reads++;
	if (off > m->n || len > m->n - off)
		return -ENODATA;
	memcpy(buf, m->p + off, len);
	m->bytes += len;
	return 0;
}

/* Walk a[0..len): members into out (names, offsets, sizes); returns the last rc. */
static int walk(const uint8_t *p, size_t len, struct tar_member *out, int max, int *n, char *err)
{
	struct mem m = { p, len, 0, 0 };
	struct tar_walk w;
	cr_assert_eq(tar_walk_init(&w, mem_read, &m, len), 0);
	struct tar_member *mb = malloc(sizeof(*mb));
	int rc;
	*n = 0;
	while ((rc = tar_next(&w, mb, err, 512)) == 1) {
		cr_assert(*n < max);
		out[(*n)++] = *mb;
	}
	free(mb);
	tar_walk_fini(&w);
	return rc;
}

static struct tar_member mem_out[16];

Test(tar, ustar_members_and_prefix)
{
	static struct ar a;
	a.len = 0;
	add(&a, "dir", NULL, '5', "", 0, "posix");
	add(&a, "k1.jpg", "some/deep/dir", '0', "JPEGDATA", 8, "posix");
	add(&a, "k1.cls", "some/deep/dir", '0', "3\n", 2, "posix");
	add(&a, "link", NULL, '2', "", 0, "posix");
	add(&a, "old.bin", NULL, '\0', "x", 1, NULL); /* v7: NUL type, no magic */
	end(&a);
	char err[512];
	int n;
	cr_assert_eq(walk(a.buf, a.len, mem_out, 16, &n, err), 0, "%s", err);
	cr_assert_eq(n, 3);
	cr_assert_str_eq(mem_out[0].name, "some/deep/dir/k1.jpg");
	cr_assert_eq(mem_out[0].data_off, 1024);
	cr_assert_eq(mem_out[0].hdr_off, 512);
	cr_assert_eq(mem_out[0].size, 8);
	cr_assert(!mem_out[0].pax_size);
	cr_assert_str_eq(mem_out[1].name, "some/deep/dir/k1.cls");
	cr_assert_eq(mem_out[1].data_off, 2048);
	cr_assert_str_eq(mem_out[2].name, "old.bin");
	cr_assert_eq(memcmp(a.buf + mem_out[0].data_off, "JPEGDATA", 8), 0);

	/* a GNU header keeps other things in the prefix field: not a prefix */
	a.len = 0;
	add(&a, "k.jpg", "notaprefix", '0', "ab", 2, "gnu");
	end(&a);
	cr_assert_eq(walk(a.buf, a.len, mem_out, 16, &n, err), 0, "%s", err);
	cr_assert_eq(n, 1);
	cr_assert_str_eq(mem_out[0].name, "k.jpg");
}

Test(tar, gnu_long_name)
{
	static struct ar a;
	a.len = 0;
	char longname[300];
	memset(longname, 'n', 250);
	memcpy(longname + 250, "/key0.jpg", 10);
	add(&a, "././@LongLink", NULL, 'L', longname, strlen(longname) + 1, "gnu");
	add(&a, "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"
		"nnnnnnnnnnnnnnn", NULL, '0', "DATA", 4, "gnu");
	add(&a, "short.cls", NULL, '0', "1", 1, "gnu"); /* the long name does not stick */
	end(&a);
	char err[512];
	int n;
	cr_assert_eq(walk(a.buf, a.len, mem_out, 16, &n, err), 0, "%s", err);
	cr_assert_eq(n, 2);
	cr_assert_str_eq(mem_out[0].name, longname);
	cr_assert_eq(strlen(mem_out[0].name), 259);
	cr_assert_eq(mem_out[0].data_off, 1536);
	cr_assert_eq(memcmp(a.buf + mem_out[0].data_off, "DATA", 4), 0);
	cr_assert_str_eq(mem_out[1].name, "short.cls");
}

static size_t pax_rec(char *out, const char *kv)
{
	/* "<len> kv\n" where len counts itself */
	size_t body = strlen(kv) + 2, len = body + 1;
	while (snprintf(NULL, 0, "%zu", len) + body != len)
		len++;
	return (size_t)sprintf(out, "%zu %s\n", len, kv);
}

Test(tar, pax_path_and_size)
{
	static struct ar a;
	a.len = 0;
	char recs[600], path[400] = "path=";
	memset(path + 5, 'p', 200);
	strcpy(path + 205, "/\xc3\xa9t\xc3\xa9.jpg");
	size_t k = pax_rec(recs, "mtime=1700000000.5");
	k += pax_rec(recs + k, path);
	k += pax_rec(recs + k, "size=5");
	add(&a, "PaxHeaders/x", NULL, 'x', recs, k, "posix");
	/* size field 0 (a writer that put the size in pax only) */
	uint8_t *h = add(&a, "truncated-name.jpg", NULL, '0', "", 0, "posix");
	/* the data: 5 bytes after the header, in one block */
	memcpy(a.buf + a.len, "HELLO", 5);
	memset(a.buf + a.len + 5, 0, 507);
	a.len += 512;
	(void)h;
	add(&a, "next.cls", NULL, '0', "9", 1, "posix"); /* pax does not stick */
	end(&a);
	char err[512];
	int n;
	cr_assert_eq(walk(a.buf, a.len, mem_out, 16, &n, err), 0, "%s", err);
	cr_assert_eq(n, 2);
	cr_assert_str_eq(mem_out[0].name, path + 5);
	cr_assert_eq(mem_out[0].size, 5);
	cr_assert(mem_out[0].pax_size);
	cr_assert_eq(memcmp(a.buf + mem_out[0].data_off, "HELLO", 5), 0);
	cr_assert_str_eq(mem_out[1].name, "next.cls");
	cr_assert_eq(mem_out[1].size, 1);
	cr_assert(!mem_out[1].pax_size);

	/* records on their own */
	struct tar_pax p = { 0 };
	cr_assert_eq(tar_parse_pax(recs, k, &p, err, sizeof(err)), 0, "%s", err);
	cr_assert(p.has_path && p.has_size && p.size == 5);
	cr_assert_eq(tar_parse_pax("12 path=ab\n", 11, &p, err, sizeof(err)), SEER_EDATASET);
	cr_assert_eq(tar_parse_pax("10 size=x\n", 10, &p, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "not a decimal"), "%s", err);
	cr_assert_eq(tar_parse_pax("8 path\n\n", 8, &p, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "key="), "%s", err);
	char sp[64];
	size_t sl = pax_rec(sp, "GNU.sparse.major=1");
	cr_assert_eq(tar_parse_pax(sp, sl, &p, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "sparse"), "%s", err);
}

Test(tar, checksums)
{
	static struct ar a;
	a.len = 0;
	add(&a, "a.jpg", NULL, '0', "abc", 3, "posix");
	add(&a, "a.cls", NULL, '0', "1", 1, "posix");
	end(&a);
	struct tar_header h;
	char err[512];
	cr_assert_eq(tar_parse_header(a.buf, 512, &h, err, sizeof(err)), 0, "%s", err);
	cr_assert(!h.zero && h.type == '0' && h.size == 3);
	cr_assert_str_eq(h.name, "a.jpg");
	/* the signed sum (old tars) is accepted: a name byte >= 0x80 */
	uint8_t blk[512];
	memcpy(blk, a.buf, 512);
	blk[10] = 0xe9;
	memset(blk + 148, ' ', 8);
	int ssum = 0;
	for (int i = 0; i < 512; i++)
		ssum += (int8_t)blk[i];
	snprintf((char *)blk + 148, 8, "%06o", ssum);
	cr_assert_eq(tar_parse_header(blk, 512, &h, err, sizeof(err)), 0, "%s", err);
	/* one damaged byte: refused, and the walk names the offset */
	a.buf[1024 + 1] ^= 0x01; /* the second header's name */
	int n;
	cr_assert_eq(walk(a.buf, a.len, mem_out, 16, &n, err), SEER_EDATASET);
	cr_assert_eq(n, 1);
	cr_assert(strstr(err, "checksum") && strstr(err, "offset 1024"), "%s", err);
	/* a checksum field that is not octal */
	memcpy(blk, a.buf, 512);
	memcpy(blk + 148, "zzzzzz", 6);
	cr_assert_eq(tar_parse_header(blk, 512, &h, err, sizeof(err)), SEER_EDATASET);
	cr_assert_eq(tar_parse_header(blk, 100, &h, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "truncated"), "%s", err);
	memset(blk, 0, 512);
	cr_assert_eq(tar_parse_header(blk, 512, &h, err, sizeof(err)), 0);
	cr_assert(h.zero);
}

Test(tar, base256_size)
{
	static struct ar a;
	a.len = 0;
	uint8_t *h = add(&a, "big.jpg", NULL, '0', "0123456789", 10, "gnu");
	memset(h + 124, 0, 12);
	h[124] = 0x80;
	h[135] = 10;
	set_cksum(h);
	end(&a);
	char err[512];
	int n;
	cr_assert_eq(walk(a.buf, a.len, mem_out, 16, &n, err), 0, "%s", err);
	cr_assert_eq(n, 1);
	cr_assert_eq(mem_out[0].size, 10);
	h[124] = 0xff; /* negative */
	set_cksum(h);
	cr_assert_eq(walk(a.buf, a.len, mem_out, 16, &n, err), SEER_EDATASET);
}

Test(tar, truncation)
{
	static struct ar a;
	a.len = 0;
	add(&a, "a.jpg", NULL, '0', "0123456789", 10, "gnu");
	add(&a, "b.jpg", NULL, '0', "abcdefghij", 10, "gnu");
	size_t full = a.len; /* no end blocks: ends at a member boundary */
	char err[512];
	int n;
	cr_assert_eq(walk(a.buf, full, mem_out, 16, &n, err), 0, "%s", err);
	cr_assert_eq(n, 2);
	/* inside b's data */
	cr_assert_eq(walk(a.buf, 1024 + 512 + 5, mem_out, 16, &n, err), SEER_EDATASET);
	cr_assert_eq(n, 1);
	cr_assert(strstr(err, "'b.jpg'") && strstr(err, "truncated"), "%s", err);
	/* inside b's padding */
	cr_assert_eq(walk(a.buf, 1024 + 512 + 100, mem_out, 16, &n, err), SEER_EDATASET);
	cr_assert(strstr(err, "truncated"), "%s", err);
	/* inside b's header */
	cr_assert_eq(walk(a.buf, 1024 + 200, mem_out, 16, &n, err), SEER_EDATASET);
	cr_assert(strstr(err, "too short for a header"), "%s", err);
	/* a long-name header whose name runs past the end */
	a.len = 0;
	add(&a, "././@LongLink", NULL, 'L', "x/very-long.jpg", 16, "gnu");
	cr_assert_eq(walk(a.buf, 512 + 8, mem_out, 16, &n, err), SEER_EDATASET);
	cr_assert(strstr(err, "truncated"), "%s", err);
	/* a member bigger than the read window is passed over, not read */
	static uint8_t big[(1 << 20) + 4096];
	struct ar *b = malloc(sizeof(*b));
	b->len = 0;
	add(b, "huge.jpg", NULL, '0', "", 0, "gnu");
	put_oct(b->buf + 124, 12, sizeof(big) - 2048);
	set_cksum(b->buf);
	memcpy(big, b->buf, 512);
	free(b);
	struct mem m = { big, sizeof(big), 0, 0 };
	struct tar_walk w;
	cr_assert_eq(tar_walk_init(&w, mem_read, &m, sizeof(big)), 0);
	struct tar_member *mb = malloc(sizeof(*mb));
	cr_assert_eq(tar_next(&w, mb, err, sizeof(err)), 1, "%s", err);
	cr_assert_eq(mb->size, sizeof(big) - 2048);
	cr_assert_eq(tar_next(&w, mb, err, sizeof(err)), 0, "%s", err); /* the zero block after */
	cr_assert_eq(m.reads, 2, "the data was read: %u reads", m.reads);
	free(mb);
	tar_walk_fini(&w);
}

Test(tar, sparse_refused)
{
	static struct ar a;
	a.len = 0;
	add(&a, "s.jpg", NULL, 'S', "", 0, "gnu");
	end(&a);
	char err[512];
	int n;
	cr_assert_eq(walk(a.buf, a.len, mem_out, 16, &n, err), SEER_EDATASET);
	cr_assert(strstr(err, "sparse"), "%s", err);
}

Test(tar, names_and_labels)
{
	size_t k;
	const char *ext;
	cr_assert(tar_split_name("a/b.c/key.seg.png", &k, &ext));
	cr_assert_eq(k, strlen("a/b.c/key"));
	cr_assert_str_eq(ext, "seg.png");
	cr_assert(tar_split_name("k.jpg", &k, &ext) && k == 1);
	cr_assert(!tar_split_name("dir/noext", &k, &ext));
	cr_assert(!tar_split_name("dir/.hidden", &k, &ext));
	cr_assert(!tar_split_name("dir.x/", &k, &ext));
	int64_t l;
	cr_assert_eq(tar_parse_label("42", 2, &l), 0);
	cr_assert_eq(l, 42);
	cr_assert_eq(tar_parse_label(" -7\n", 4, &l), 0);
	cr_assert_eq(l, -7);
	cr_assert_eq(tar_parse_label("9223372036854775807", 19, &l), 0);
	cr_assert_eq(l, INT64_MAX);
	cr_assert_eq(tar_parse_label("9223372036854775808", 19, &l), SEER_EDATASET);
	cr_assert_eq(tar_parse_label("seven", 5, &l), SEER_EDATASET);
	cr_assert_eq(tar_parse_label("1.5", 3, &l), SEER_EDATASET);
	cr_assert_eq(tar_parse_label("", 0, &l), SEER_EDATASET);
	cr_assert_eq(tar_parse_label(" \n", 2, &l), SEER_EDATASET);
	cr_assert_eq(tar_parse_label("1 2", 3, &l), SEER_EDATASET);
}

/* The scan's window adapts: ~100 KiB members cost a few KiB each, 1 KiB
 * members are read in a few large windows. */
Test(tar, window_adapts)
{
	size_t cap = 64u << 20;
	struct ar *a = malloc(sizeof(*a));
	uint8_t *buf = malloc(cap);
	size_t len = 0;
	static uint8_t blk[100000];
	memset(blk, 'x', sizeof(blk));
	char name[32];
	for (int i = 0; i < 200; i++) {
		a->len = 0;
		snprintf(name, sizeof(name), "k%04d.jpg", i);
		add(a, name, NULL, '0', blk, sizeof(blk), "gnu");
		memcpy(buf + len, a->buf, 512);
		len += 512 + (sizeof(blk) + 511) / 512 * 512;
		a->len = 0;
		snprintf(name, sizeof(name), "k%04d.cls", i);
		add(a, name, NULL, '0', "1", 1, "gnu");
		memcpy(buf + len, a->buf, 1024);
		len += 1024;
	}
	memset(buf + len, 0, 1024);
	len += 1024;
	struct mem m = { buf, len, 0, 0 };
	struct tar_walk w;
	char err[512];
	cr_assert_eq(tar_walk_init(&w, mem_read, &m, len), 0);
	struct tar_member *mb = malloc(sizeof(*mb));
	int n = 0, rc;
	while ((rc = tar_next(&w, mb, err, sizeof(err))) == 1)
		n++;
	cr_assert_eq(rc, 0, "%s", err);
	cr_assert_eq(n, 400);
	cr_assert_lt(m.bytes, len / 20, "large members: %llu of %zu bytes read in %u reads",
		     (unsigned long long)m.bytes, len, m.reads);
	cr_assert_leq(m.reads, 205);
	tar_walk_fini(&w);
	/* 1 KiB members: the window grows, few reads */
	len = 0;
	for (int i = 0; i < 2000; i++) {
		a->len = 0;
		snprintf(name, sizeof(name), "s%05d.jpg", i);
		add(a, name, NULL, '0', blk, 1000, "gnu");
		memcpy(buf + len, a->buf, a->len);
		len += a->len;
	}
	memset(buf + len, 0, 1024);
	len += 1024;
	m = (struct mem){ buf, len, 0, 0 };
	cr_assert_eq(tar_walk_init(&w, mem_read, &m, len), 0);
	n = 0;
	while ((rc = tar_next(&w, mb, err, sizeof(err))) == 1)
		n++;
	cr_assert_eq(rc, 0, "%s", err);
	cr_assert_eq(n, 2000);
	cr_assert_leq(m.bytes, len + m.reads * TAR_BLOCK, "each byte about once: %llu of %zu", (unsigned long long)m.bytes, len);
	cr_assert_leq(m.reads, 10, "%u reads of a %zu-byte shard of small members", m.reads, len);
	tar_walk_fini(&w);
	free(mb);
	free(buf);
	free(a);
}
