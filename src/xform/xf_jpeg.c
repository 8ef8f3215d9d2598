/* xf_jpeg.c — JPEG decode of only what a crop needs, through libjpeg-turbo.
 *
 * Default path (XF_JPEG_PARTIAL): libjpeg-turbo's libjpeg API with IDCT
 * scaling (scale_num/8), jpeg_crop_scanline for the columns and
 * jpeg_skip_scanlines for the rows above the crop; decoding stops after the
 * crop's last row. The requested columns are widened by one pixel each side
 * so that fancy upsampling at the edges of the cropped band sees its real
 * neighbours: the pixels delivered equal a full decode's (tested).
 * XF_JPEG_TURBO_FULL: TurboJPEG's tjDecompress2 of the whole image at the
 * same scale (for comparison; docs/transform.md has the measurements).
 *
 * Output: RGB. Grayscale is replicated, CMYK/YCCK converted as PIL converts
 * them (Adobe inverted CMYK, PIL's cmyk2rgb). ISLOW IDCT and fancy
 * upsampling, as PIL decodes: at full scale the pixels equal PIL's.
 *
 * Errors: libjpeg's error exits and the warnings that mean lost data
 * (premature end of file or segment, bad Huffman/arithmetic code, lost
 * sync, bad scan parameters) fail the sample with libjpeg's message; benign
 * warnings (extraneous bytes, unknown JFIF revision or Adobe transform) are
 * ignored as PIL ignores them. More than 500 progressive scans, or more
 * pixels than the scratch allows, fail before any large allocation.
 * Touched only by the scratch's thread. */
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <turbojpeg.h>

#include "xf_internal.h"
#include "../util/util.h"

#define XFJ_MAX_SCANS 500

struct xf_jpeg_err {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	char msg[JMSG_LENGTH_MAX];
	int kind; /* 0 invalid, 1 corrupt data, 2 truncated, 3 too many scans */
};

struct xf_jpeg {
	struct jpeg_decompress_struct ci;
	struct xf_jpeg_err err;
	struct jpeg_progress_mgr prog;
	tjhandle tj;
};

static void xf_jpeg_error_exit(j_common_ptr c)
{
	struct xf_jpeg_err *e = (struct xf_jpeg_err *)c->err;
	(*c->err->format_message)(c, e->msg);
	longjmp(e->jb, 1);
}

/* Warnings that mean pixels are wrong or missing. */
static int lost_data(int code)
{
	return code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE ||
	       code == JWRN_ARITH_BAD_CODE || code == JWRN_MUST_RESYNC ||
	       code == JWRN_NOT_SEQUENTIAL || code == JWRN_TOO_MUCH_DATA;
}

static void xf_jpeg_emit(j_common_ptr c, int level)
{
	struct xf_jpeg_err *e = (struct xf_jpeg_err *)c->err;
	if (level >= 0 || !lost_data(c->err->msg_code))
		return; /* trace messages and benign warnings */
	(*c->err->format_message)(c, e->msg);
	e->kind = c->err->msg_code == JWRN_JPEG_EOF || c->err->msg_code == JWRN_HIT_MARKER ? 2 : 1;
	longjmp(e->jb, 1);
}

static void xf_jpeg_output(j_common_ptr c)
{
	(void)c; /* never print */
}

static void xf_jpeg_progress(j_common_ptr c)
{
	j_decompress_ptr d = (j_decompress_ptr)c;
	struct xf_jpeg_err *e = (struct xf_jpeg_err *)c->err;
	if (c->is_decompressor && d->progressive_mode && d->input_scan_number > XFJ_MAX_SCANS) {
		snprintf(e->msg, sizeof(e->msg), "more than %d progressive scans", XFJ_MAX_SCANS);
		e->kind = 3;
		longjmp(e->jb, 1);
	}
}

static struct xf_jpeg *xf_jpeg_get(struct xf_scratch *s)
{
	if (s->jpeg)
		return s->jpeg;
	struct xf_jpeg *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	j->ci.err = jpeg_std_error(&j->err.pub);
	j->err.pub.error_exit = xf_jpeg_error_exit;
	j->err.pub.emit_message = xf_jpeg_emit;
	j->err.pub.output_message = xf_jpeg_output;
	if (setjmp(j->err.jb)) { /* out of memory in jpeg_create_decompress */
		free(j);
		return NULL;
	}
	jpeg_create_decompress(&j->ci);
	j->prog.progress_monitor = xf_jpeg_progress;
	j->ci.progress = &j->prog;
	s->jpeg = j;
	return j;
}

void xf_jpeg_free(struct xf_jpeg *j)
{
	if (!j)
		return;
	jpeg_destroy_decompress(&j->ci);
	if (j->tj)
		tjDestroy(j->tj);
	free(j);
}

static int xf_jpeg_fail(struct xf_jpeg *j, char *err, size_t errlen)
{
	const char *what[] = { "invalid JPEG", "corrupt JPEG data", "truncated JPEG",
			       "unsupported JPEG" };
	int k = j->err.kind;
	jpeg_abort_decompress(&j->ci);
	return xf_fail(err, errlen, -EINVAL, "%s: %s", what[k], j->err.msg);
}

/* Header and checks shared by both calls; inside the caller's setjmp. */
static int read_header(struct xf_scratch *s, struct xf_jpeg *j, const uint8_t *src, size_t len,
		       char *err, size_t errlen)
{
	j->err.kind = 0;
	jpeg_mem_src(&j->ci, src, (unsigned long)len);
	jpeg_read_header(&j->ci, TRUE);
	uint64_t px = (uint64_t)j->ci.image_width * j->ci.image_height;
	if (px > s->max_pixels) {
		jpeg_abort_decompress(&j->ci);
		return xf_fail(err, errlen, -EFBIG,
			       "JPEG image %ux%u is larger than this decoder's limit of %llu pixels",
			       j->ci.image_width, j->ci.image_height,
			       (unsigned long long)s->max_pixels);
	}
	j->ci.mem->max_memory_to_use = (long)MAX(64ull << 20, s->max_pixels * 8);
	return 0;
}

int xf_jpeg_header(struct xf_scratch *s, const uint8_t *src, size_t len, uint32_t *w, uint32_t *h,
	       char *err, size_t errlen)
{
	struct xf_jpeg *j = xf_jpeg_get(s);
	if (!j)
		return xf_fail(err, errlen, -ENOMEM, "out of memory for a JPEG decoder");
	if (setjmp(j->err.jb))
		return xf_jpeg_fail(j, err, errlen);
	int rc = read_header(s, j, src, len, err, errlen);
	if (rc)
		return rc;
	*w = j->ci.image_width;
	*h = j->ci.image_height;
	jpeg_abort_decompress(&j->ci);
	return 0;
}

/* PIL's MULDIV255 and cmyk2rgb over libjpeg's (Adobe-inverted) CMYK. */
static inline uint8_t muldiv255(uint32_t a, uint32_t b)
{
	uint32_t t = a * b + 128;
	return (uint8_t)(((t >> 8) + t) >> 8);
}

static void cmyk_to_rgb(const uint8_t *in, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++, in += 4, out += 3) {
		uint32_t nk = in[3];
		for (int c = 0; c < 3; c++) {
			int v = (int)nk - muldiv255(255u - in[c], nk);
			out[c] = (uint8_t)(v < 0 ? 0 : v);
		}
	}
}

static int is_cmyk(J_COLOR_SPACE cs)
{
	return cs == JCS_CMYK || cs == JCS_YCCK;
}

/* Rows [y0, y1) of the started decompressor into out (stride bytes apart),
 * w pixels each. Inside the caller's setjmp. */
static int read_rows(struct xf_scratch *s, struct xf_jpeg *j, int32_t y0, int32_t y1,
		     uint8_t *out, size_t stride, uint32_t w, int cmyk)
{
	if (cmyk && xf_buf_reserve(&s->row, (size_t)w * 4))
		return -ENOMEM;
	if (y0 > 0 && jpeg_skip_scanlines(&j->ci, (JDIMENSION)y0) != (JDIMENSION)y0)
		return -EIO;
	for (int32_t y = y0; y < y1;) {
		JSAMPROW rows[16];
		int n = 0;
		if (cmyk) {
			rows[n++] = s->row.p;
		} else {
			for (; n < 16 && y + n < y1; n++)
				rows[n] = out + (size_t)(y - y0 + n) * stride;
		}
		JDIMENSION got = jpeg_read_scanlines(&j->ci, rows, (JDIMENSION)n);
		if (got == 0)
			return -EIO;
		if (cmyk)
			cmyk_to_rgb(s->row.p, out + (size_t)(y - y0) * stride, w);
		y += (int32_t)got;
	}
	return 0;
}

static int decode_partial(struct xf_scratch *s, struct xf_jpeg *j, const uint8_t *src,
			  size_t len, uint32_t num, const struct xf_rect *want,
			  struct xf_region *out, char *err, size_t errlen)
{
	j_decompress_ptr ci = &j->ci;
	if (setjmp(j->err.jb))
		return xf_jpeg_fail(j, err, errlen);
	int rc = read_header(s, j, src, len, err, errlen);
	if (rc)
		return rc;
	int cmyk = is_cmyk(ci->jpeg_color_space);
	ci->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
	ci->scale_num = num;
	ci->scale_denom = 8;
	ci->dct_method = JDCT_ISLOW;
	ci->do_fancy_upsampling = TRUE;
	jpeg_start_decompress(ci);
	uint32_t W = ci->output_width, H = ci->output_height;
	if (W != xf_scaled(ci->image_width, num) || H != xf_scaled(ci->image_height, num) ||
	    want->x1 > (int32_t)W || want->y1 > (int32_t)H || want->x0 < 0 || want->y0 < 0) {
		jpeg_abort_decompress(ci);
		return xf_fail(err, errlen, -EINVAL, "JPEG decoder gave %ux%u at %u/8 of %ux%u",
			       W, H, num, ci->image_width, ci->image_height);
	}
	/* one more column each side: fancy upsampling needs its neighbours */
	JDIMENSION xo = want->x0 > 0 ? (JDIMENSION)want->x0 - 1 : 0;
	JDIMENSION xw = (JDIMENSION)MIN((uint32_t)want->x1 + 1, W) - xo;
	if (xo > 0 || xw < W)
		jpeg_crop_scanline(ci, &xo, &xw);
	size_t stride = (size_t)xw * 3;
	int32_t rows = want->y1 - want->y0;
	if (xf_buf_reserve(&s->region, stride * (size_t)rows + XF_SLACK)) {
		jpeg_abort_decompress(ci);
		return xf_fail(err, errlen, -ENOMEM, "out of memory for %ux%d decoded pixels", xw,
			       rows);
	}
	rc = read_rows(s, j, want->y0, want->y1, s->region.p, stride, xw, cmyk);
	jpeg_abort_decompress(ci);
	if (rc)
		return xf_fail(err, errlen, rc, "JPEG decoder stopped early (%s)", strerror(-rc));
	*out = (struct xf_region){ .px = s->region.p, .stride = stride, .x0 = (int32_t)xo,
				   .y0 = want->y0, .w = (int32_t)xw, .h = rows,
				   .iw = (int32_t)W, .ih = (int32_t)H, .slack = XF_SLACK };
	return 0;
}

/* TurboJPEG: the whole image at num/8. */
static int decode_turbo(struct xf_scratch *s, struct xf_jpeg *j, const uint8_t *src, size_t len,
			uint32_t num, struct xf_region *out, char *err, size_t errlen)
{
	if (!j->tj && !(j->tj = tjInitDecompress()))
		return xf_fail(err, errlen, -ENOMEM, "TurboJPEG: %s", tjGetErrorStr2(NULL));
	int w, h, sub, cs;
	if (tjDecompressHeader3(j->tj, src, (unsigned long)len, &w, &h, &sub, &cs) != 0)
		return xf_fail(err, errlen, -EINVAL, "invalid JPEG: %s", tjGetErrorStr2(j->tj));
	if ((uint64_t)w * (uint64_t)h > s->max_pixels)
		return xf_fail(err, errlen, -EFBIG, "JPEG image %dx%d is larger than %llu pixels",
			       w, h, (unsigned long long)s->max_pixels);
	tjscalingfactor sf = { (int)num, 8 };
	int W = TJSCALED(w, sf), H = TJSCALED(h, sf);
	int cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
	size_t px = (size_t)W * (size_t)H;
	if (xf_buf_reserve(&s->region, px * 3 + XF_SLACK) || (cmyk && xf_buf_reserve(&s->row, px * 4)))
		return xf_fail(err, errlen, -ENOMEM, "out of memory for %dx%d pixels", W, H);
	uint8_t *dst = cmyk ? s->row.p : s->region.p;
	if (tjDecompress2(j->tj, src, (unsigned long)len, dst, W, 0, H, cmyk ? TJPF_CMYK : TJPF_RGB,
			  TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0)
		return xf_fail(err, errlen, -EINVAL, "corrupt JPEG: %s", tjGetErrorStr2(j->tj));
	if (cmyk)
		cmyk_to_rgb(s->row.p, s->region.p, px);
	*out = (struct xf_region){ .px = s->region.p, .stride = (size_t)W * 3, .x0 = 0, .y0 = 0,
				   .w = W, .h = H, .iw = W, .ih = H, .slack = XF_SLACK };
	return 0;
}

int xf_jpeg_decode(struct xf_scratch *s, enum xf_jpeg_path path, const uint8_t *src, size_t len,
	       uint32_t num, const struct xf_rect *want, struct xf_region *out, char *err,
	       size_t errlen)
{
	struct xf_jpeg *j = xf_jpeg_get(s);
	if (!j)
		return xf_fail(err, errlen, -ENOMEM, "out of memory for a JPEG decoder");
	if (num < 1 || num > 8)
		return xf_fail(err, errlen, -EINVAL, "JPEG scale %u/8 not in 1/8..8/8", num);
	if (path == XF_JPEG_TURBO_FULL)
		return decode_turbo(s, j, src, len, num, out, err, errlen);
	return decode_partial(s, j, src, len, num, want, out, err, errlen);
}
