/* xf_png.c — PNG decode of the rows a crop needs, through libpng.
 *
 * Converted to 8-bit RGB as PIL's Image.convert("RGB") does after opening:
 * palette expanded, transparency and alpha dropped (not composited),
 * grayscale replicated, 1/2/4-bit gray scaled to 0..255, 16-bit samples cut
 * to their high byte (PIL's RGB;16B). One deliberate difference: PIL opens
 * 16-bit grayscale as 32-bit integers and clips them at 255 when converting;
 * seer takes the high byte, like every other 16-bit PNG. Gamma, sBIT and
 * colour profiles are ignored, as PIL ignores them.
 *
 * Non-interlaced images are read row by row and reading stops after the
 * crop's last row; interlaced images are decoded whole. libpng's errors
 * (CRC, zlib, truncation) fail the sample with its message; warnings are
 * ignored. Touched only by the scratch's thread. */
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <png.h>

#include "xf_internal.h"
#include "../util/util.h"

struct xf_png_io {
	const uint8_t *p;
	size_t len, off;
	char msg[200];
};

static void xf_png_read(png_structp png, png_bytep out, size_t n)
{
	struct xf_png_io *io = png_get_io_ptr(png);
	if (n > io->len - io->off)
		png_error(png, "the data ends before the image does (truncated file)");
	memcpy(out, io->p + io->off, n);
	io->off += n;
}

static void xf_png_error(png_structp png, png_const_charp msg)
{
	struct xf_png_io *io = png_get_error_ptr(png);
	snprintf(io->msg, sizeof(io->msg), "%s", msg);
	png_longjmp(png, 1);
}

static void xf_png_warning(png_structp png, png_const_charp msg)
{
	(void)png;
	(void)msg;
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int xf_png_header(struct xf_scratch *s, const uint8_t *src, size_t len, uint32_t *w, uint32_t *h,
	       char *err, size_t errlen)
{
	/* signature (8), IHDR length (4), "IHDR", width, height */
	if (len < 33 || memcmp(src + 12, "IHDR", 4) != 0 || be32(src + 8) != 13)
		return xf_fail(err, errlen, -EINVAL, "invalid PNG: no IHDR chunk at the start%s",
			       len < 33 ? " (file too short)" : "");
	*w = be32(src + 16);
	*h = be32(src + 20);
	if (*w == 0 || *h == 0 || *w > XF_MAX_SIDE || *h > XF_MAX_SIDE)
		return xf_fail(err, errlen, -EINVAL, "invalid PNG: image size %ux%u", *w, *h);
	if ((uint64_t)*w * *h > s->max_pixels)
		return xf_fail(err, errlen, -EFBIG,
			       "PNG image %ux%u is larger than this decoder's limit of %llu pixels",
			       *w, *h, (unsigned long long)s->max_pixels);
	return 0;
}

/* Transformations to 8-bit RGB; returns the number of interlace passes. */
static int setup(png_structp png, png_infop info)
{
	int ct = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
	if (ct == PNG_COLOR_TYPE_PALETTE)
		png_set_palette_to_rgb(png);
	if (ct == PNG_COLOR_TYPE_GRAY && depth < 8)
		png_set_expand_gray_1_2_4_to_8(png);
	if (depth == 16)
		png_set_strip_16(png);
	png_set_strip_alpha(png);
	if (ct == PNG_COLOR_TYPE_GRAY || ct == PNG_COLOR_TYPE_GRAY_ALPHA)
		png_set_gray_to_rgb(png);
	int passes = png_set_interlace_handling(png);
	png_read_update_info(png, info);
	return passes;
}

/* Inside the caller's setjmp: rows into s->region. */
static int read_pixels(struct xf_scratch *s, png_structp png, png_infop info,
		       const struct xf_rect *want, struct xf_region *out, char *err, size_t errlen)
{
	int passes = setup(png, info);
	uint32_t W = png_get_image_width(png, info), H = png_get_image_height(png, info);
	size_t rb = png_get_rowbytes(png, info);
	if (rb != (size_t)W * 3 || want->x1 > (int32_t)W || want->y1 > (int32_t)H)
		return xf_fail(err, errlen, -EINVAL, "PNG decoder gave %zu bytes per row for %ux%u",
			       rb, W, H);
	if (passes > 1) { /* interlaced: the whole image */
		if (xf_buf_reserve(&s->region, rb * H + XF_SLACK) ||
		    xf_buf_reserve(&s->row, sizeof(png_bytep) * H))
			return xf_fail(err, errlen, -ENOMEM, "out of memory for %ux%u pixels", W, H);
		png_bytepp rows = s->row.p;
		for (uint32_t y = 0; y < H; y++)
			rows[y] = (png_bytep)s->region.p + (size_t)y * rb;
		png_read_image(png, rows);
		*out = (struct xf_region){ .px = s->region.p, .stride = rb, .w = (int32_t)W,
					   .h = (int32_t)H, .iw = (int32_t)W, .ih = (int32_t)H,
					   .slack = XF_SLACK };
		return 0;
	}
	size_t cols = (size_t)(want->x1 - want->x0) * 3;
	int32_t nrows = want->y1 - want->y0;
	if (xf_buf_reserve(&s->region, cols * (size_t)nrows + XF_SLACK) || xf_buf_reserve(&s->row, rb))
		return xf_fail(err, errlen, -ENOMEM, "out of memory for %ux%u pixels", W, H);
	for (int32_t y = 0; y < want->y1; y++) {
		png_read_row(png, s->row.p, NULL);
		if (y >= want->y0)
			memcpy((uint8_t *)s->region.p + (size_t)(y - want->y0) * cols,
			       (uint8_t *)s->row.p + (size_t)want->x0 * 3, cols);
	}
	*out = (struct xf_region){ .px = s->region.p, .stride = cols, .x0 = want->x0,
				   .y0 = want->y0, .w = want->x1 - want->x0, .h = nrows,
				   .iw = (int32_t)W, .ih = (int32_t)H, .slack = XF_SLACK };
	return 0;
}

int xf_png_decode(struct xf_scratch *s, const uint8_t *src, size_t len, const struct xf_rect *want,
	       struct xf_region *out, char *err, size_t errlen)
{
	uint32_t w, h;
	int rc = xf_png_header(s, src, len, &w, &h, err, errlen);
	if (rc)
		return rc;
	struct xf_png_io io = { .p = src, .len = len };
	png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, xf_png_error,
						 xf_png_warning);
	png_infop info = png ? png_create_info_struct(png) : NULL;
	if (!info) {
		png_destroy_read_struct(&png, NULL, NULL);
		return xf_fail(err, errlen, -ENOMEM, "out of memory for a PNG decoder");
	}
	if (setjmp(png_jmpbuf(png))) {
		png_destroy_read_struct(&png, &info, NULL);
		return xf_fail(err, errlen, -EINVAL, "corrupt PNG: %s", io.msg);
	}
	png_set_read_fn(png, &io, xf_png_read);
	png_set_user_limits(png, XF_MAX_SIDE, XF_MAX_SIDE);
	png_read_info(png, info);
	rc = read_pixels(s, png, info, want, out, err, errlen);
	png_destroy_read_struct(&png, &info, NULL);
	return rc;
}
