/* Internals of the npz and npy formats, shared by their files:
 *   npy.c        NPY header parser (public: fmt.h)
 *   zip.c        zip structures (public parsers: fmt.h), an archive's member index
 *   npz_member.c where a member's bytes are, and decoding a range of them
 *   npz_ndview.c which bytes of an array make sample k; gathering, transposing
 *   npz_scan.c   the catalog scan of .npz and .npy files, and the two fmt_ops
 *   npz_read.c   reading a sample: one pread, or through the decoded-member cache
 * Not for other modules. Pure helpers unless said otherwise; the scan runs on
 * the catalog-building thread, reads on any reader thread. */
#ifndef SEER_FMT_NPZ_H
#define SEER_FMT_NPZ_H

#include <stdbool.h>
#include <stdint.h>

#include "fmt.h"

/* ---- members ----------------------------------------------------------------- */

/* Where an array's bytes are: a zip member, or a whole .npy file. */
struct member {
	uint64_t off;   /* first byte of the member's data in the file */
	uint64_t csize; /* bytes in the file */
	uint64_t usize; /* bytes decoded (NPY header + array) */
	uint32_t crc;
	bool deflated;
	bool has_crc;
};

#define NPZ_WIN (256u << 10)  /* decode window: the most a reader holds outside the budget */
#define NPZ_ZBUF (64u << 10)  /* compressed bytes read at once */

/* Called with consecutive decoded pieces; pos: member offset of data[0]. */
typedef void (*npz_piece_fn)(void *ctx, const uint8_t *data, size_t len, uint64_t pos);

/* Where a member's bytes are read from: the file on fd, or (buf set) a
 * buffer already holding the file's bytes [off, off + len): a coalesced
 * read, decoded without reading the file again. */
struct npz_src {
	int fd;
	const uint8_t *buf;
	uint64_t off, len;
};
/* As npz_member_decode, from src. */
int npz_member_decode_src(const struct npz_src *src, const struct member *m, uint64_t origin,
			  uint64_t lo, uint64_t hi, npz_piece_fn fn, void *ctx, char *err,
			  size_t errlen);

/* Decode bytes [lo, hi) of member m and pass them to fn in pieces that start
 * at origin + j * NPZ_WIN (or at lo), so that pieces keep the element
 * alignment of origin. Stored members are read from lo only; deflated ones
 * are inflated from their start. The zip CRC is checked when the whole member
 * is decoded (lo 0, hi usize). Every byte read is counted (fmt_pread). */
int npz_member_decode(int fd, const struct member *m, uint64_t origin, uint64_t lo,
		      uint64_t hi, npz_piece_fn fn, void *ctx, char *err, size_t errlen);
/* The whole member into dst (m->usize bytes), CRC checked. */
int npz_member_read_all(int fd, const struct member *m, uint8_t *dst, char *err, size_t errlen);
/* The NPY header at the start of a member. */
int npz_member_npy_header(int fd, const struct member *m, struct npy_header *h, char *err,
			  size_t errlen);

/* ---- the zip archive's members -------------------------------------------------- */

struct zip_index {
	struct zip_dir d;
	uint8_t *cd;    /* the central directory, malloc'd */
};
/* End records and central directory of the archive on fd (size bytes). */
int npz_zip_read_index(int fd, uint64_t size, struct zip_index *z, char *err, size_t errlen);
/* The member named name + ".npy" (np.savez's naming), else exactly name.
 * *found false when neither exists; list gets the first names, for messages.
 * Two members of the chosen name are an error naming it (numpy would take
 * the last, other readers the first: the archive is ambiguous). */
int npz_zip_lookup(const struct zip_index *z, const char *name, struct zip_entry *out,
		   bool *found, char *list, size_t listlen, char *err, size_t errlen);
/* Check the member's method, flags and local header; locate its data. */
int npz_member_open(int fd, uint64_t size, const struct zip_index *z, const struct zip_entry *e,
		    struct member *m, char *err, size_t errlen);

/* ---- array layout ------------------------------------------------------------------ */

struct nd_view {
	uint32_t ndim;                   /* dims left after merging; 0: one run */
	uint64_t dims[NPY_MAX_DIMS];
	uint64_t in_st[NPY_MAX_DIMS];    /* bytes, in the array data */
	uint64_t out_st[NPY_MAX_DIMS];   /* bytes, in the delivered sample */
	uint64_t base;                   /* first byte of the sample in the array data */
	uint64_t run;                    /* bytes contiguous on both sides */
	uint64_t total;                  /* bytes of the sample */
	uint64_t extent;                 /* from its first byte to past its last, in the data */
};

/* Bytes between samples k and k + 1 in the array data. */
uint64_t npz_axis_stride(const uint64_t *shape, uint32_t nd, bool fortran, bool last,
			 uint32_t isz);
/* Sample k of an array of shape[nd] (nd >= 1, C or Fortran order), the index
 * of its first or last axis, delivered in C order. */
void npz_view_init(struct nd_view *v, const uint64_t *shape, uint32_t nd, bool fortran,
		   bool last, uint64_t k, uint32_t isz);
/* Are the n samples interleaved element by element (an (elements x n)
 * matrix: C order, last axis)? Then decoding transposes. */
bool npz_interleaved(const struct nd_view *v, uint64_t n, uint32_t isz);

/* Copies one sample out of decoded pieces fed in increasing position. */
struct npz_gather {
	const struct nd_view *v;
	uint8_t *dst;
	uint64_t hdr;        /* array data starts here in the member */
	uint64_t base;       /* first byte of this sample in the array data */
	uint64_t idx[NPY_MAX_DIMS];
	uint64_t in, out;    /* of the current run */
	uint64_t done;       /* bytes of the current run copied */
	bool finished;
};
void npz_gather_feed(struct npz_gather *g, const uint8_t *data, size_t len, uint64_t pos);

/* Columns [c0, c0 + cc) of a block of rows x ncols elements (row-major at
 * src, rows r0.. of the matrix), column-major into a destination per column:
 * column c0 + j goes to dst[j] (rows r0.. of it; NULL: not wanted).
 * Cache-blocked. */
void npz_transpose_cols(const uint8_t *src, uint64_t rows, uint64_t ncols, uint64_t c0,
			uint64_t cc, uint8_t *const *dst, uint64_t r0, uint32_t isz);

/* ---- per-file facts (catalog_file.aux) ---------------------------------------------
 * aux[0] member data offset, aux[1] stored bytes, aux[2] decoded bytes,
 * aux[3] NPY header length | flags | zip CRC << 32. */
#define AUX_HDR_MASK 0xffffffull
#define AUX_DEFLATED (1ull << 24)
#define AUX_FORTRAN (1ull << 25)
#define AUX_LAST (1ull << 26)
#define AUX_SWAP (1ull << 27)
#define AUX_CRC (1ull << 28)

void npz_aux_put(uint64_t *aux, const struct member *m, const struct npy_header *h, bool last);
void npz_aux_get(const uint64_t *aux, struct member *m, uint64_t *hdr);

/* ---- the format -------------------------------------------------------------------- */

/* "(2, 3)" for messages. */
const char *npy_shape_str(char *buf, size_t len, const uint64_t *dims, uint32_t nd);
int npz_read(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s, void *dst);
bool npz_span(const struct catalog *c, uint64_t id, const struct catalog_sample *s, uint64_t *lo,
	      uint64_t *hi);
int npz_cut_many(struct catalog_reader *rd, uint32_t file, const uint8_t *buf, uint64_t off,
		 uint64_t len, uint32_t n, const uint64_t *ids, void *const *dsts);
void *npz_shared_new(const struct catalog *c);
void npz_shared_free(void *shared);
void npz_mem_stats(void *shared, struct fmt_mem_stats *st);
/* Samples per decoded-cache entry for a file of n samples of sbytes each under
 * a budget of limit bytes; 0: decode each sample on its own. */
uint64_t npz_range_count(uint64_t n, uint64_t sbytes, uint64_t limit);

#endif /* SEER_FMT_NPZ_H */
