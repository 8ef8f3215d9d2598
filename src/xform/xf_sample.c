/* xf_sample.c — one sample end to end (sniff, header, crop box, DCT scale,
 * taps, region decode, resample into the destination), the batch writer,
 * and decoded blobs for cache = decoded.
 *
 * Called by transform/I-O worker threads, each with its own scratch; the
 * destination is caller memory (a slot of a batch in the staging arena).
 * Failure: a negative errno and a sentence in err about the input ("not a
 * JPEG or PNG image: ...", "truncated JPEG: ..."); the caller names the file. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#include "seer.h"
#include "xf_internal.h"
#include "../util/util.h"

static const char blob_magic[8] = { 'S', 'E', 'E', 'R', 'R', 'G', 'B', '1' };

struct xf_scratch *xf_scratch_new(uint64_t max_pixels)
{
	struct xf_scratch *s = calloc(1, sizeof(*s));
	if (s)
		s->max_pixels = max_pixels ? max_pixels : XF_DEFAULT_MAX_PIXELS;
	return s;
}

void xf_scratch_free(struct xf_scratch *s)
{
	if (!s)
		return;
	xf_jpeg_free(s->jpeg);
	free(s->region.p);
	free(s->row.p);
	free(s->tmp.p);
	free(s->acc.p);
	free(s->taps[0].p);
	free(s->taps[1].p);
	free(s->dbl.p);
	free(s);
}

/* ---- shapes ------------------------------------------------------------------ */

size_t xf_sample_bytes(const struct xf_params *p)
{
	if (p->decode != XF_DECODE_IMAGE)
		return 0;
	size_t esz = p->output == XF_OUT_FLOAT32_CHW ? 4 : p->output == XF_OUT_FLOAT16_CHW ? 2 : 1;
	return (size_t)p->out_h * p->out_w * 3 * esz;
}

int xf_sample_shape(const struct xf_params *p, uint64_t dims[3], int *dtype)
{
	if (p->output == XF_OUT_UINT8_HWC) {
		dims[0] = p->out_h;
		dims[1] = p->out_w;
		dims[2] = 3;
		*dtype = SEER_DTYPE_U8;
	} else {
		dims[0] = 3;
		dims[1] = p->out_h;
		dims[2] = p->out_w;
		*dtype = p->output == XF_OUT_FLOAT16_CHW ? SEER_DTYPE_F16 : SEER_DTYPE_F32;
	}
	return 3;
}

int xf_batch_shape(const struct xf_params *p, uint32_t batch, uint64_t dims[4], int *dtype)
{
	dims[0] = batch;
	xf_sample_shape(p, dims + 1, dtype);
	return 4;
}

/* ---- what the bytes are -------------------------------------------------------- */

enum xf_format xf_sniff(const void *src, size_t len)
{
	const uint8_t *b = src;
	if (len >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
		return XF_FMT_JPEG;
	if (len >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0)
		return XF_FMT_PNG;
	if (len >= XF_BLOB_HEADER && memcmp(b, blob_magic, sizeof(blob_magic)) == 0)
		return XF_FMT_BLOB;
	return XF_FMT_UNKNOWN;
}

static const char *guess_kind(const uint8_t *b, size_t len)
{
	static const struct { const char *magic; size_t off, n; const char *name; } k[] = {
		{ "GIF8", 0, 4, "GIF" }, { "BM", 0, 2, "BMP" }, { "WEBP", 8, 4, "WebP" },
		{ "II*\0", 0, 4, "TIFF" }, { "MM\0*", 0, 4, "TIFF" },
		{ "ftyp", 4, 4, "ISO media: HEIF/AVIF/MP4" }, { "PK\3\4", 0, 4, "zip" },
		{ "\x1f\x8b", 0, 2, "gzip" }, { "%PDF", 0, 4, "PDF" },
		{ "\x93NUMPY", 0, 6, "numpy .npy" }, { "\xff\xd8", 0, 2, "JPEG cut short" },
		{ "\x89PNG", 0, 4, "PNG cut short" },
	};
	for (size_t i = 0; i < ARRAY_SIZE(k); i++)
		if (len >= k[i].off + k[i].n && memcmp(b + k[i].off, k[i].magic, k[i].n) == 0)
			return k[i].name;
	return "unknown content";
}

static int not_an_image(const uint8_t *b, size_t len, char *err, size_t errlen)
{
	if (len == 0)
		return xf_fail(err, errlen, -EINVAL, "not an image: the file is empty");
	char hex[40] = "";
	for (size_t i = 0; i < len && i < 8; i++)
		snprintf(hex + strlen(hex), sizeof(hex) - strlen(hex), "%s%02x", i ? " " : "", b[i]);
	return xf_fail(err, errlen, -EINVAL,
		       "not a JPEG or PNG image: starts with %s (%s); seer decodes JPEG and PNG",
		       hex, guess_kind(b, len));
}

struct blob_hdr {
	char magic[8];
	uint32_t orig_w, orig_h, w, h, channels, reserved;
};
_Static_assert(sizeof(struct blob_hdr) == XF_BLOB_HEADER, "blob header layout");

static int blob_header(const uint8_t *b, size_t len, struct blob_hdr *h, char *err,
		       size_t errlen)
{
	memcpy(h, b, sizeof(*h));
	if (h->channels != 3 || h->w == 0 || h->h == 0 || h->w > h->orig_w ||
	    h->h > h->orig_h || h->orig_w > XF_MAX_SIDE || h->orig_h > XF_MAX_SIDE ||
	    len != XF_BLOB_HEADER + (uint64_t)h->w * h->h * 3)
		return xf_fail(err, errlen, -EINVAL,
			       "corrupt decoded-image blob (%ux%u of %ux%u, %zu bytes)", h->w, h->h,
			       h->orig_w, h->orig_h, len);
	return 0;
}

int xf_probe(struct xf_scratch *s, const void *src, size_t len, enum xf_format *fmt,
	     uint32_t *width, uint32_t *height, char *err, size_t errlen)
{
	*fmt = xf_sniff(src, len);
	switch (*fmt) {
	case XF_FMT_JPEG:
		return xf_jpeg_header(s, src, len, width, height, err, errlen);
	case XF_FMT_PNG:
		return xf_png_header(s, src, len, width, height, err, errlen);
	case XF_FMT_BLOB: {
		struct blob_hdr h;
		int rc = blob_header(src, len, &h, err, errlen);
		*width = h.orig_w;
		*height = h.orig_h;
		return rc;
	}
	default:
		return not_an_image(src, len, err, errlen);
	}
}

/* ---- geometry --------------------------------------------------------------------- */

/* The smallest TurboJPEG scaling factor num/8 <= 1 at which every (span,
 * target) pair keeps span * num/8 >= target: the crop still covers the
 * output at that scale. */
static uint32_t pick_scale(uint32_t allowed, const uint32_t span[2], const uint32_t target[2])
{
	allowed = allowed ? allowed : XF_DCT_SCALES_DEFAULT;
	int n = 0;
	const tjscalingfactor *f = tjGetScalingFactors(&n);
	uint32_t best = 8;
	for (int i = 0; f && i < n; i++) {
		if (f[i].num <= 0 || f[i].denom <= 0 || (8 * f[i].num) % f[i].denom != 0)
			continue;
		uint32_t m = (uint32_t)(8 * f[i].num / f[i].denom);
		if (m == 0 || m >= best || !(allowed & (1u << m)))
			continue;
		if ((uint64_t)span[0] * m >= (uint64_t)target[0] * 8 &&
		    (uint64_t)span[1] * m >= (uint64_t)target[1] * 8)
			best = m;
	}
	return best;
}

/* How one axis maps onto the tensor. b0/bl: the crop box (resized-image
 * offset for center), rtot: the resized size (center), side: the original
 * size, D: the decoded size, sc: decoded pixels per original pixel (unit:
 * exactly 1). */
static void plan_axis(const struct xf_params *p, int32_t b0, int32_t bl, int32_t rtot,
		      uint32_t side, uint32_t count, double sc, int unit, int32_t D,
		      struct xf_axis *ax)
{
	ax->count = (int32_t)count;
	if (p->crop == XF_CROP_CENTER) {
		/* PIL resizes the whole image, then CenterCrop takes its part */
		ax->origin = 0;
		ax->in0 = 0;
		ax->in1 = unit ? (double)side : (double)side * sc;
		ax->clamp_lo = 0;
		ax->clamp_hi = D;
		ax->out_total = rtot;
		ax->out_first = b0;
		return;
	}
	/* PIL crops first: only the box's pixels contribute */
	ax->out_total = (int32_t)count;
	ax->out_first = 0;
	if (unit) {
		ax->origin = b0;
		ax->in0 = 0;
		ax->in1 = bl;
		ax->clamp_lo = 0;
		ax->clamp_hi = bl;
		return;
	}
	ax->origin = 0;
	ax->in0 = b0 * sc;
	ax->in1 = (b0 + bl) * sc;
	ax->clamp_lo = (int32_t)floor(ax->in0);
	ax->clamp_hi = (int32_t)MIN(ceil(ax->in1), (double)D);
	if (ax->clamp_lo >= D)
		ax->clamp_lo = D - 1;
	if (ax->clamp_hi <= ax->clamp_lo)
		ax->clamp_hi = ax->clamp_lo + 1;
}

/* Source geometry of one sample: decoded size and scale per axis. */
struct geom {
	uint32_t num;   /* JPEG DCT scale num/8 */
	int32_t dw, dh; /* decoded image size */
	double sx, sy;
	int unit;
};

static void choose_geom(const struct xf_params *p, enum xf_format fmt, const struct blob_hdr *bh,
			const struct xf_crop_box *b, uint32_t W, uint32_t H, struct geom *g)
{
	*g = (struct geom){ .num = 8, .dw = (int32_t)W, .dh = (int32_t)H, .sx = 1, .sy = 1,
			    .unit = 1 };
	if (fmt == XF_FMT_BLOB) {
		g->dw = (int32_t)bh->w;
		g->dh = (int32_t)bh->h;
		g->unit = bh->w == W && bh->h == H;
		g->sx = (double)bh->w / W;
		g->sy = (double)bh->h / H;
		return;
	}
	if (fmt != XF_FMT_JPEG || p->exact)
		return;
	uint32_t span[2], target[2];
	if (p->crop == XF_CROP_CENTER) {
		span[0] = W, span[1] = H, target[0] = (uint32_t)b->rw, target[1] = (uint32_t)b->rh;
	} else {
		span[0] = (uint32_t)b->width, span[1] = (uint32_t)b->height;
		target[0] = p->out_w, target[1] = p->out_h;
	}
	g->num = pick_scale(p->dct_scales, span, target);
	g->dw = (int32_t)xf_scaled(W, g->num);
	g->dh = (int32_t)xf_scaled(H, g->num);
	g->sx = g->sy = g->num / 8.0;
	g->unit = g->num == 8;
}

/* ---- one sample ----------------------------------------------------------------- */

static int header(struct xf_scratch *s, enum xf_format fmt, const uint8_t *b, size_t len,
		  struct blob_hdr *bh, uint32_t *W, uint32_t *H, char *err, size_t errlen)
{
	switch (fmt) {
	case XF_FMT_JPEG:
		return xf_jpeg_header(s, b, len, W, H, err, errlen);
	case XF_FMT_PNG:
		return xf_png_header(s, b, len, W, H, err, errlen);
	case XF_FMT_BLOB: {
		int rc = blob_header(b, len, bh, err, errlen);
		*W = bh->orig_w;
		*H = bh->orig_h;
		return rc;
	}
	default:
		return not_an_image(b, len, err, errlen);
	}
}

/* Decode the pixels the taps read into *reg. */
static int decode_region(const struct xf_params *p, struct xf_scratch *s, enum xf_format fmt,
			 const uint8_t *b, size_t len, const struct blob_hdr *bh, uint32_t num,
			 const struct xf_rect *want, struct xf_region *reg, char *err,
			 size_t errlen)
{
	int rc = 0;
	if (fmt == XF_FMT_JPEG)
		rc = xf_jpeg_decode(s, p->jpeg_path, b, len, num, want, reg, err, errlen);
	else if (fmt == XF_FMT_PNG)
		rc = xf_png_decode(s, b, len, want, reg, err, errlen);
	else
		*reg = (struct xf_region){ .px = b + XF_BLOB_HEADER, .stride = (size_t)bh->w * 3,
					   .w = (int32_t)bh->w, .h = (int32_t)bh->h,
					   .iw = (int32_t)bh->w, .ih = (int32_t)bh->h };
	if (rc)
		return rc;
	if (reg->x0 > want->x0 || reg->y0 > want->y0 || reg->x0 + reg->w < want->x1 ||
	    reg->y0 + reg->h < want->y1)
		return xf_fail(err, errlen, -EIO, "decoder returned %dx%d+%d+%d for %d..%d x %d..%d",
			       reg->w, reg->h, reg->x0, reg->y0, want->x0, want->x1, want->y0,
			       want->y1);
	return 0;
}

int xf_transform(const struct xf_params *p, struct xf_scratch *s, uint64_t seed,
		 uint64_t epoch, uint64_t id, const void *src, size_t len, void *dst,
		 struct xf_info *info, char *err, size_t errlen)
{
	uint64_t t0 = now_ns();
	const uint8_t *b = src;
	struct xf_info in = { 0 };
	struct blob_hdr bh;
	if (p->decode != XF_DECODE_IMAGE)
		return xf_fail(err, errlen, -EINVAL, "transform called with decode = none");
	in.format = xf_sniff(b, len);
	int rc = header(s, in.format, b, len, &bh, &in.width, &in.height, err, errlen);
	if (rc)
		return rc;
	xf_crop_params(p, seed, epoch, id, in.width, in.height, &in.box);
	struct geom g;
	choose_geom(p, in.format, &bh, &in.box, in.width, in.height, &g);
	struct xf_axis ax, ay;
	plan_axis(p, in.box.left, in.box.width, in.box.rw, in.width, p->out_w, g.sx, g.unit, g.dw,
		  &ax);
	plan_axis(p, in.box.top, in.box.height, in.box.rh, in.height, p->out_h, g.sy, g.unit, g.dh,
		  &ay);
	struct xf_taps tx, ty;
	if ((rc = xf_taps_build(&tx, &ax, &s->taps[0], &s->dbl)) != 0 ||
	    (rc = xf_taps_build(&ty, &ay, &s->taps[1], &s->dbl)) != 0)
		return xf_fail(err, errlen, rc, "resize plan failed (%s)", strerror(-rc));
	struct xf_rect want = { tx.need_lo, ty.need_lo, tx.need_hi, ty.need_hi };
	struct xf_region reg;
	rc = decode_region(p, s, in.format, b, len, &bh, g.num, &want, &reg, err, errlen);
	if (rc)
		return rc;
	xf_taps_rebase(&tx, reg.x0);
	xf_taps_rebase(&ty, reg.y0);
	uint64_t t1 = now_ns();
	rc = xf_resample(s, p, &reg, &tx, &ty, in.box.flip, dst);
	if (rc)
		return xf_fail(err, errlen, rc, "out of memory while resizing");
	if (info) {
		in.dct_num = g.num;
		in.region_w = (uint32_t)reg.w;
		in.region_h = (uint32_t)reg.h;
		in.decode_ns = t1 - t0;
		in.resize_ns = now_ns() - t1;
		*info = in;
	}
	return 0;
}

int xf_batch_write(const struct xf_params *p, struct xf_scratch *s, uint64_t seed,
		   uint64_t epoch, uint64_t id, const void *src, size_t len, void *batch,
		   uint32_t index, struct xf_info *info, char *err, size_t errlen)
{
	uint8_t *dst = (uint8_t *)batch + (size_t)index * xf_sample_bytes(p);
	return xf_transform(p, s, seed, epoch, id, src, len, dst, info, err, errlen);
}

/* ---- decoded blobs ---------------------------------------------------------------- */

/* Size of the cached image: torchvision Resize(cache_size) when that shrinks it. */
static void blob_dims(const struct xf_params *p, uint32_t W, uint32_t H, uint32_t *bw,
		      uint32_t *bh)
{
	*bw = W;
	*bh = H;
	if (p->cache_size > 0 && MIN(W, H) > p->cache_size)
		xf_resize_dims(p->cache_size, W, H, bw, bh);
}

uint64_t xf_blob_bytes(const struct xf_params *p, uint32_t width, uint32_t height)
{
	uint32_t bw, bh;
	blob_dims(p, width, height, &bw, &bh);
	return XF_BLOB_HEADER + (uint64_t)bw * bh * 3;
}

/* The whole image decoded (at a DCT scale that still covers bw x bh), then
 * resized to bw x bh into px when smaller. */
static int blob_pixels(const struct xf_params *p, struct xf_scratch *s, enum xf_format fmt,
		       const uint8_t *b, size_t len, uint32_t W, uint32_t H, uint32_t bw,
		       uint32_t bh, uint8_t *px, char *err, size_t errlen)
{
	uint32_t num = 8;
	if (fmt == XF_FMT_JPEG && !p->exact && (bw != W || bh != H))
		num = pick_scale(p->dct_scales, (uint32_t[2]){ W, H }, (uint32_t[2]){ bw, bh });
	struct xf_rect all = { 0, 0, (int32_t)xf_scaled(W, num), (int32_t)xf_scaled(H, num) };
	struct xf_region reg;
	int rc = decode_region(p, s, fmt, b, len, NULL, num, &all, &reg, err, errlen);
	if (rc)
		return rc;
	if (bw == (uint32_t)reg.iw && bh == (uint32_t)reg.ih && reg.x0 == 0 && reg.y0 == 0) {
		for (uint32_t y = 0; y < bh; y++)
			memcpy(px + (size_t)y * bw * 3, reg.px + (size_t)y * reg.stride, (size_t)bw * 3);
		return 0;
	}
	struct xf_axis ax = { .in0 = 0, .in1 = W * (num / 8.0), .clamp_hi = reg.iw,
			      .out_total = (int32_t)bw, .count = (int32_t)bw };
	struct xf_axis ay = { .in0 = 0, .in1 = H * (num / 8.0), .clamp_hi = reg.ih,
			      .out_total = (int32_t)bh, .count = (int32_t)bh };
	struct xf_taps tx, ty;
	if ((rc = xf_taps_build(&tx, &ax, &s->taps[0], &s->dbl)) != 0 ||
	    (rc = xf_taps_build(&ty, &ay, &s->taps[1], &s->dbl)) != 0)
		return xf_fail(err, errlen, rc, "resize plan failed (%s)", strerror(-rc));
	xf_taps_rebase(&tx, reg.x0);
	xf_taps_rebase(&ty, reg.y0);
	if (xf_resample_u8(s, &reg, &tx, &ty, px))
		return xf_fail(err, errlen, -ENOMEM, "out of memory while resizing");
	return 0;
}

int xf_decode_blob(const struct xf_params *p, struct xf_scratch *s, const void *src,
		   size_t len, void *dst, size_t cap, size_t *used, char *err, size_t errlen)
{
	struct blob_hdr h = { .channels = 3 };
	enum xf_format fmt = xf_sniff(src, len);
	if (fmt == XF_FMT_BLOB)
		return xf_fail(err, errlen, -EINVAL, "already a decoded-image blob");
	int rc = header(s, fmt, src, len, NULL, &h.orig_w, &h.orig_h, err, errlen);
	if (rc)
		return rc;
	blob_dims(p, h.orig_w, h.orig_h, &h.w, &h.h);
	uint64_t need = XF_BLOB_HEADER + (uint64_t)h.w * h.h * 3;
	if (need > cap)
		return xf_fail(err, errlen, -ENOSPC, "decoded image needs %llu bytes, %zu given",
			       (unsigned long long)need, cap);
	rc = blob_pixels(p, s, fmt, src, len, h.orig_w, h.orig_h, h.w, h.h,
			 (uint8_t *)dst + XF_BLOB_HEADER, err, errlen);
	if (rc)
		return rc;
	memcpy(h.magic, blob_magic, sizeof(blob_magic));
	memcpy(dst, &h, sizeof(h));
	*used = (size_t)need;
	return 0;
}
