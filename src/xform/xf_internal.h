/* xf_internal.h — what the transform stages share and nobody else uses: the
 * per-thread scratch, decoded regions, and resampling taps. Touched only by
 * the thread that owns the scratch. */
#ifndef SEER_XF_INTERNAL_H
#define SEER_XF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "../common/base.h"
#include "xform.h"

#define XF_MAX_SIDE 65500u                 /* JPEG's own limit; PNG is held to it too */
#define XF_DEFAULT_MAX_PIXELS (1ull << 27) /* 134 Mpx */

/* A growable buffer owned by a scratch. */
struct xf_buf {
	void *p;
	size_t cap;
};

/* Grow b to at least n bytes (contents not kept). 0 or -ENOMEM. */
int xf_buf_reserve(struct xf_buf *b, size_t n);

/* Pixels [x0, x0 + w) x [y0, y0 + h) of a decoded image of iw x ih, RGB
 * uint8, row r at px + r * stride. Points into scratch memory or a blob;
 * `slack` bytes past the last row may be read (never used). */
struct xf_region {
	const uint8_t *px;
	size_t stride;
	int32_t x0, y0, w, h;
	int32_t iw, ih;
	size_t slack;
};

/* What decoders leave readable past their regions: the SIMD horizontal pass
 * loads 4 bytes at a pixel and at the next one. */
#define XF_SLACK 16

/* A rectangle [x0, x1) x [y0, y1) of a decoded image. */
struct xf_rect {
	int32_t x0, y0, x1, y1;
};

struct xf_jpeg;  /* xf_jpeg.c: decompressor objects */

struct xf_scratch {
	uint64_t max_pixels;
	struct xf_jpeg *jpeg;
	struct xf_buf region;   /* decoded pixels */
	struct xf_buf row;      /* a decoder's row (CMYK, interlaced PNG) */
	struct xf_buf tmp;      /* horizontal pass output */
	struct xf_buf acc;      /* vertical pass accumulators, output rows */
	struct xf_buf taps[2];  /* x and y taps */
	struct xf_buf dbl;      /* weights before fixed point */
};

/* ---- decoders (xf_jpeg.c, xf_png.c) ----------------------------------------
 * *_header: the image size from the header. *_decode: decode at least the
 * pixels of `want` (coordinates of the image decoded at num/8 of its size;
 * PNG: num must be 8) into s->region, describing them in *out. Errors name
 * the defect ("truncated JPEG: ...", "corrupt PNG: ..."). */
int xf_jpeg_header(struct xf_scratch *s, const uint8_t *src, size_t len, uint32_t *w,
	       uint32_t *h, char *err, size_t errlen);
int xf_jpeg_decode(struct xf_scratch *s, enum xf_jpeg_path path, const uint8_t *src, size_t len,
	       uint32_t num, const struct xf_rect *want, struct xf_region *out, char *err,
	       size_t errlen);
void xf_jpeg_free(struct xf_jpeg *j);

int xf_png_header(struct xf_scratch *s, const uint8_t *src, size_t len, uint32_t *w,
	       uint32_t *h, char *err, size_t errlen);
int xf_png_decode(struct xf_scratch *s, const uint8_t *src, size_t len, const struct xf_rect *want,
	       struct xf_region *out, char *err, size_t errlen);

/* Size of an image decoded at num/8: ceil(side * num / 8), as libjpeg. */
static inline uint32_t xf_scaled(uint32_t side, uint32_t num)
{
	return (uint32_t)(((uint64_t)side * num + 7) / 8);
}

/* torchvision's Resize(int) output size (xf_crop.c): the shorter side
 * becomes `resize`, the longer int(resize * long / short); resize 0 keeps
 * the size. */
void xf_resize_dims(uint32_t resize, uint32_t w, uint32_t h, uint32_t *rw, uint32_t *rh);

/* ---- resampling (xf_resample.c) ---------------------------------------------
 * One axis of a resize, in PIL's terms: the source span [in0, in1) (source
 * coordinates, origin at decoded pixel `origin`) is resized onto out_total
 * pixels, sources outside [clamp_lo, clamp_hi) never contribute; the tensor
 * holds resized pixels out_first .. out_first + count - 1, and those outside
 * [0, out_total) are padding (zero). */
struct xf_axis {
	double in0, in1;
	int32_t clamp_lo, clamp_hi;
	int32_t origin;
	int32_t out_total;
	int32_t out_first;
	int32_t count;
};

/* Fixed-point taps of one axis. Output t (0 <= t < n) is tensor index
 * first + t and reads sources lo[t] .. lo[t] + len[t] - 1 (decoded-image
 * pixels until xf_taps_rebase, then region-relative) with weights
 * k[t * ksize ...]. */
struct xf_taps {
	int32_t n, first, count, ksize;
	int32_t need_lo, need_hi; /* decoded pixels read: [need_lo, need_hi) */
	int32_t *lo, *len, *k;
	/* the same weights for pmaddwd: per output, per pair of taps, 8 int16
	 * of (k >> 11) then 8 of (k & 2047), each pair repeated 4 times */
	int16_t *k16;
	int32_t npairs;
};

/* Compute the taps of ax (PIL ImagingResample, bilinear filter, 22-bit
 * fixed point). mem holds them; dbl is a work buffer. 0 or -ENOMEM/-EINVAL. */
int xf_taps_build(struct xf_taps *t, const struct xf_axis *ax, struct xf_buf *mem,
		  struct xf_buf *dbl);
/* Make lo[] relative to a region starting at decoded pixel `origin`. */
void xf_taps_rebase(struct xf_taps *t, int32_t origin);

/* Resize a region into a tensor: horizontal pass over the rows the vertical
 * pass reads, then per output row the vertical pass, flip, normalisation
 * and layout (p->output) straight into dst. */
int xf_resample(struct xf_scratch *s, const struct xf_params *p, const struct xf_region *r,
		const struct xf_taps *tx, const struct xf_taps *ty, int flip, void *dst);
/* The same into a plain HWC uint8 image of tx->count x ty->count (blobs). */
int xf_resample_u8(struct xf_scratch *s, const struct xf_region *r, const struct xf_taps *tx,
		   const struct xf_taps *ty, uint8_t *dst);

/* Error text helper: snprintf into err when err is not NULL; returns rc. */
#define xf_fail err_fmt /* src/common/base.h: the message into err, returns rc */

#endif /* SEER_XF_INTERNAL_H */
