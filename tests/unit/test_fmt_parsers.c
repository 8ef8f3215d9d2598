/* The format parsers on hand-made input (NPY headers, CRC32C, TFRecord
 * framing and DALI indexes, zip end records, indexed-binary checks), the one
 * list of formats, the per-thread byte accounting, and the transpose that
 * cuts interleaved npz samples. No test data needed. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../../src/catalog/catalog.h"
#include "../../src/fmt/fmt.h"
#include "../../src/fmt/npz.h"
#include "../../src/util/util.h"
#include "seer.h"

static size_t npy_make(uint8_t *buf, unsigned major, const char *dict)
{
	size_t dl = strlen(dict), hoff = major == 1 ? 10 : 12;
	memcpy(buf, "\x93NUMPY", 6);
	buf[6] = (uint8_t)major;
	buf[7] = 0;
	if (major == 1) {
		buf[8] = (uint8_t)dl;
		buf[9] = (uint8_t)(dl >> 8);
	} else {
		uint32_t l = (uint32_t)dl;
		memcpy(buf + 8, &l, 4);
	}
	memcpy(buf + hoff, dict, dl);
	return hoff + dl;
}


Test(parsers, npy_header)
{
	uint8_t buf[512];
	char err[256];
	struct npy_header h;
	uint64_t need;
	size_t n = npy_make(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4, 5), }"
				    "          \n");
	cr_assert_eq(npy_parse_header(buf, n, &h, &need, err, sizeof(err)), 0, "%s", err);
	cr_assert(h.dtype == SEER_DT_F32 && h.itemsize == 4 && !h.swap && !h.fortran);
	cr_assert(h.ndim == 3 && h.shape[0] == 3 && h.shape[2] == 5 && h.nelem == 60);
	cr_assert(h.data_off == n && h.nbytes == 240);
	cr_assert_eq(npy_parse_header(buf, 30, &h, &need, err, sizeof(err)), -EAGAIN);
	cr_assert_eq(need, n);
	cr_assert_eq(npy_parse_header(buf, 7, &h, &need, err, sizeof(err)), -EAGAIN);

	n = npy_make(buf, 2, "{\"shape\": (7,), \"fortran_order\": True, \"descr\": \">i8\"}\n");
	cr_assert_eq(npy_parse_header(buf, n, &h, &need, err, sizeof(err)), 0, "%s", err);
	cr_assert(h.dtype == SEER_DT_I64 && h.swap && h.fortran && h.ndim == 1 && h.shape[0] == 7);
	n = npy_make(buf, 3, "{'descr': '|b1', 'fortran_order': False, 'shape': ()}");
	cr_assert_eq(npy_parse_header(buf, n, &h, &need, err, sizeof(err)), 0, "%s", err);
	cr_assert(h.dtype == SEER_DT_BOOL && h.ndim == 0 && h.nelem == 1);
	n = npy_make(buf, 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (2L, 3L), }");
	cr_assert_eq(npy_parse_header(buf, n, &h, &need, err, sizeof(err)), 0, "%s", err);
	cr_assert(h.dtype == SEER_DT_U16 && h.shape[1] == 3);

	static const struct {
		const char *dict, *why;
	} bad[] = {
		{ "{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", "object array" },
		{ "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", "structured" },
		{ "{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", "unsupported dtype" },
		{ "{'descr': '<U5', 'fortran_order': False, 'shape': (3,), }", "unsupported dtype" },
		{ "{'descr': '<f4', 'fortran_order': 0, 'shape': (3,), }", "True/False" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }", "non-negative" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': [3], }", "not a tuple" },
		{ "{'descr': '<f4', 'fortran_order': False}", "lacks 'shape'" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}", "unexpected key" },
		{ "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", "repeats" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} junk", "after its dict" },
		{ "['descr']", "not a dict" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 2)}",
		  "overflows" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1)}",
		  "more than 9 dimensions" },
		{ "{'descr': '<f4' 'fortran_order': False, 'shape': (3,)}", "does not parse" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (3,", "not a non-negative" },
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		n = npy_make(buf, 1, bad[i].dict);
		int rc = npy_parse_header(buf, n, &h, &need, err, sizeof(err));
		cr_expect_eq(rc, SEER_EDATASET, "%s: rc %d", bad[i].dict, rc);
		cr_expect(strstr(err, bad[i].why), "%s: '%s' lacks '%s'", bad[i].dict, err,
			  bad[i].why);
	}
	n = npy_make(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}");
	buf[6] = 4;
	cr_assert_eq(npy_parse_header(buf, n, &h, &need, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "version 4.0"), "%s", err);
	buf[0] = 'x';
	cr_assert_eq(npy_parse_header(buf, n, &h, &need, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "bad magic"), "%s", err);
}

/* CRC32C one bit at a time: the reference for the table and SSE4.2 paths. */
static uint32_t crc32c_bitwise(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	while (n--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
	}
	return ~c;
}

/* Columns [c0, c0 + cc) of a rows x ncols matrix of isz-byte elements into
 * one buffer per column, against the element-by-element definition: shapes
 * on and off the 16 x 16 blocks of the one-byte path, a column range that
 * starts mid-row, unwanted (NULL) columns and a row offset into the
 * destinations; bytes around each destination stay untouched. */
Test(parsers, npz_transpose_matches_the_definition)
{
	static const uint64_t shapes[][4] = { /* rows, ncols, c0, cc */
		{ 4096, 512, 0, 512 }, { 16, 16, 0, 16 }, { 37, 53, 5, 41 }, { 15, 40, 0, 40 },
		{ 200, 17, 1, 16 }, { 64, 100, 3, 15 }, { 1, 8, 2, 5 }, { 33, 33, 0, 33 },
	};
	const uint32_t iszs[] = { 1, 2, 4, 8 };
	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
		for (size_t ii = 0; ii < 4; ii++) {
			uint64_t rows = shapes[si][0], nc = shapes[si][1], c0 = shapes[si][2];
			uint64_t cc = shapes[si][3], r0 = 3, isz = iszs[ii];
			uint64_t col = (r0 + rows) * isz + 64; /* a destination, with a margin */
			uint8_t *src = malloc(rows * nc * isz), *out = malloc(cc * col);
			uint8_t **dst = malloc(cc * sizeof(*dst));
			cr_assert(src && out && dst);
			for (uint64_t i = 0; i < rows * nc * isz; i++)
				src[i] = (uint8_t)(i * 131 + i / 251 + 7);
			memset(out, 0xA5, cc * col);
			for (uint64_t j = 0; j < cc; j++)
				dst[j] = j % 7 == 3 ? NULL : out + j * col;
			npz_transpose_cols(src, rows, nc, c0, cc, dst, r0, (uint32_t)isz);
			for (uint64_t j = 0; j < cc; j++)
				for (uint64_t b = 0; b < col; b++) {
					uint64_t r = b / isz;
					uint8_t want = 0xA5;
					if (dst[j] && r >= r0 && r < r0 + rows)
						want = src[((r - r0) * nc + c0 + j) * isz + b % isz];
					cr_assert_eq(out[j * col + b], want,
						     "rows %llu cols %llu c0 %llu cc %llu isz %llu: column "
						     "%llu byte %llu", (unsigned long long)rows,
						     (unsigned long long)nc, (unsigned long long)c0,
						     (unsigned long long)cc, (unsigned long long)isz,
						     (unsigned long long)j, (unsigned long long)b);
				}
			free(src);
			free(out);
			free(dst);
		}
}

Test(parsers, crc32c)
{
	cr_assert_eq(crc32c(0, "123456789", 9), 0xe3069283u);
	cr_assert_eq(crc32c(0, "", 0), 0u);
	static uint8_t buf[100003];
	unsigned seed = 3;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rand_r(&seed);
	/* lengths and alignments around the 3 x 2 KiB stride of the fast path */
	static const size_t lens[] = { 1, 7, 8, 9, 6143, 6144, 6145, 12295, 65536, 100000 };
	for (size_t i = 0; i < ARRAY_SIZE(lens); i++)
		for (size_t off = 0; off < 3; off++)
			cr_assert_eq(crc32c(0, buf + off, lens[i]), crc32c_bitwise(buf + off, lens[i]),
				     "length %zu at offset %zu", lens[i], off);
	uint32_t whole = crc32c(0, buf, 20000);
	for (size_t cut = 0; cut < 40; cut++) {
		uint32_t c = crc32c(0, buf, cut);
		c = crc32c(c, buf + cut, 6151);
		c = crc32c(c, buf + cut + 6151, 20000 - cut - 6151);
		cr_assert_eq(c, whole, "split at %zu", cut);
	}
	/* a TFRecord header as TensorFlow frames a 5-byte payload */
	uint8_t hdr[TFR_HDR_LEN] = { 5, 0, 0, 0, 0, 0, 0, 0 };
	uint32_t m = tfrecord_mask_crc(crc32c(0, hdr, 8));
	memcpy(hdr + 8, &m, 4);
	uint64_t len;
	char err[256];
	cr_assert_eq(tfrecord_parse_header(hdr, sizeof(hdr), &len, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(len, 5);
	hdr[0] = 6;
	cr_assert_eq(tfrecord_parse_header(hdr, sizeof(hdr), &len, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "length CRC mismatch"), "%s", err);
}

Test(parsers, tfrecord_index)
{
	struct tfrecord_extent *e;
	uint64_t n;
	char err[256];
	const char *ok = "0 20\n20 31  \r\n\n51 16";
	cr_assert_eq(tfrecord_parse_index(ok, strlen(ok), &e, &n, err, sizeof(err)), 0, "%s", err);
	cr_assert(n == 3 && e[1].off == 20 && e[1].len == 31 && e[2].off == 51 && e[2].len == 16);
	free(e);
	cr_assert_eq(tfrecord_parse_index("", 0, &e, &n, err, sizeof(err)), 0);
	cr_assert(n == 0 && e == NULL);
	const char *bad[] = { "0 20 7\n", "0\n", "x 1\n", "0 -1\n", "0 99999999999999999999\n" };
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		cr_expect_eq(tfrecord_parse_index(bad[i], strlen(bad[i]), &e, &n, err, sizeof(err)),
			     SEER_EDATASET, "'%s' accepted", bad[i]);
		cr_expect(strstr(err, "line 1"), "%s", err);
	}
}

Test(parsers, zip_and_idx)
{
	char err[256];
	struct zip_dir d;
	uint8_t tail[64] = { 0 };
	cr_assert_eq(zip_find_eocd(tail, sizeof(tail), 64, &d, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "end-of-central-directory"), "%s", err);
	/* an EOCD whose directory would start past it */
	uint8_t e[22] = { 'P', 'K', 5, 6, 0, 0, 0, 0, 1, 0, 1, 0, 46, 0, 0, 0, 200, 0, 0, 0, 0, 0 };
	memcpy(tail + 42, e, sizeof(e));
	cr_assert_eq(zip_find_eocd(tail, sizeof(tail), 64, &d, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "outside the file"), "%s", err);
	e[16] = 0;
	e[12] = 42;
	memcpy(tail + 42, e, sizeof(e));
	cr_assert_eq(zip_find_eocd(tail, sizeof(tail), 64, &d, err, sizeof(err)), 0, "%s", err);
	cr_assert(d.cd_off == 0 && d.cd_size == 42 && d.nentries == 1);
	size_t pos = 0;
	struct zip_entry ze;
	cr_assert_eq(zip_next_entry(tail, 42, &pos, &ze, err, sizeof(err)), SEER_EDATASET);

	uint64_t off[3] = { 0, 10, 90 }, sz[3] = { 10, 80, 10 };
	cr_assert_eq(indexed_check(off, sz, 3, 100, 0, err, sizeof(err)), 0, "%s", err);
	sz[2] = 11;
	cr_assert_eq(indexed_check(off, sz, 3, 100, 7, err, sizeof(err)), SEER_EDATASET);
	cr_assert(strstr(err, "sample 9 "), "%s", err);
	sz[2] = 0;
	cr_assert_eq(indexed_check(off, sz, 3, 100, 0, err, sizeof(err)), SEER_EDATASET);
	off[2] = UINT64_MAX;
	sz[2] = 2;
	cr_assert_eq(indexed_check(off, sz, 3, 100, 0, err, sizeof(err)), SEER_EDATASET);
}

/* Mutated inputs: every parser answers 0, -EAGAIN or SEER_EDATASET, and never
 * reads outside its buffer (the ASan build checks that). */

/* ---- the one list of formats ---------------------------------------------------- */

Test(registry, every_listed_format_is_found_by_its_name)
{
	const char *names = fmt_registry_names();
	size_t n = 0;
#define CHECK_FORMAT(fname, fdesc)                                                           \
	do {                                                                               \
		const struct fmt_ops *f = fmt_registry_find(#fname);                         \
		cr_assert_not_null(f, "%s not found", #fname);                             \
		cr_assert_str_eq(f->name, #fname);                                          \
		cr_assert(f == &fmt_##fname);                                               \
		cr_assert(strstr(names, #fname), "%s missing from \"%s\"", #fname, names);    \
		n++;                                                                       \
	} while (0);
	FMT_LIST(CHECK_FORMAT)
#undef CHECK_FORMAT
	cr_assert_eq(n, 7);
	cr_assert_str_eq(names, "files, npz, npy, hdf5, tfrecord, indexed, tar");
	cr_assert_null(fmt_registry_find("parquet"));
}

/* ---- byte accounting -------------------------------------------------------------- */

Test(io, counted_reads)
{
	char path[] = "/tmp/seer-io-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	static uint8_t data[300000];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7);
	cr_assert_eq(write(fd, data, sizeof(data)), (ssize_t)sizeof(data));
	uint8_t buf[1000];
	uint64_t b0 = fmt_thread_bytes();
	cr_assert_eq(fmt_pread(fd, buf, 1000, 5), 0);
	cr_assert(memcmp(buf, data + 5, 1000) == 0);
	cr_assert_eq(fmt_thread_bytes() - b0, 1000);
	/* a read past the end still counts what it got */
	cr_assert_eq(fmt_pread(fd, buf, 1000, sizeof(data) - 10), -ENODATA);
	cr_assert_eq(fmt_thread_bytes() - b0, 1010);
	uint8_t a[7], b[9];
	struct iovec iov[2] = { { a, sizeof(a) }, { b, sizeof(b) } };
	cr_assert_eq(fmt_preadv(fd, iov, 2, 100), 0);
	cr_assert(memcmp(a, data + 100, 7) == 0 && memcmp(b, data + 107, 9) == 0);
	cr_assert_eq(fmt_thread_bytes() - b0, 1026);

	/* a library's own reads, seen by the kernel's per-thread count */
	struct fmt_lib_io io;
	fmt_lib_io_begin(&io);
	uint8_t *big = malloc(sizeof(data));
	cr_assert_eq(pread(fd, big, 123456, 17), 123456);
	cr_assert_eq(pread(fd, big, 1, 0), 1);
	uint64_t lib = fmt_lib_io_end(&io);
	cr_assert_eq(lib, 123457, "%llu bytes counted", (unsigned long long)lib);
	cr_assert_eq(fmt_thread_bytes() - b0, 1026 + 123457);
	free(big);
	close(fd);
	unlink(path);
}
