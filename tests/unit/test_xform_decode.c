/* xform, decoding and tensors: images made here with libjpeg and libpng
 * (every JPEG subsampling, grayscale, CMYK, progressive; PNG of every colour
 * type and depth, palette with transparency, interlaced), then:
 *   - the partial decoder (crop_scanline + skip_scanlines at every DCT
 *     scale) gives exactly the pixels of TurboJPEG's whole-image decode;
 *   - PNG conversions to RGB give the pixels they should (identity resize);
 *   - tensors are identical across threads, repeated calls and scratch
 *     history; float layouts are the uint8 pixels through to_tensor and
 *     normalize; flip mirrors; the batch writer stays in its slot;
 *   - decoded blobs give the same tensors as the file (exact mode);
 *   - empty, foreign, truncated, corrupt and oversized inputs fail with a
 *     sentence naming the problem, and never crash (run under ASan too). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

#include "seer.h"
#include "../../src/xform/xf_internal.h"

struct mem {
	uint8_t *p;
	size_t n;
};

enum jkind { J420, J422, J444, JGRAY, JPROG, JCMYK, JKINDS };
static const char *const jnames[] = { "4:2:0", "4:2:2", "4:4:4", "gray", "progressive",
				      "cmyk" };

/* Smooth gradients plus deterministic noise, `comps` samples per pixel. */
static uint8_t *pattern(int w, int h, int comps, unsigned seed)
{
	uint8_t *px = malloc((size_t)w * h * comps);
	unsigned x = seed * 2654435761u + 1;
	for (int y = 0; y < h; y++)
		for (int i = 0; i < w; i++)
			for (int c = 0; c < comps; c++) {
				x = x * 1664525u + 1013904223u;
				int v = (i * (3 + c) + y * (5 - c)) % 256 + (int)(x >> 27) - 16;
				px[((size_t)y * w + i) * comps + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
			}
	return px;
}

static struct mem make_jpeg(int w, int h, enum jkind k, int quality)
{
	struct jpeg_compress_struct c;
	struct jpeg_error_mgr e;
	c.err = jpeg_std_error(&e);
	jpeg_create_compress(&c);
	unsigned char *buf = NULL;
	unsigned long n = 0;
	jpeg_mem_dest(&c, &buf, &n);
	int comps = k == JGRAY ? 1 : k == JCMYK ? 4 : 3;
	c.image_width = (JDIMENSION)w;
	c.image_height = (JDIMENSION)h;
	c.input_components = comps;
	c.in_color_space = k == JGRAY ? JCS_GRAYSCALE : k == JCMYK ? JCS_CMYK : JCS_RGB;
	jpeg_set_defaults(&c);
	jpeg_set_quality(&c, quality, TRUE);
	if (k == J422 || k == J444) {
		c.comp_info[0].h_samp_factor = k == J422 ? 2 : 1;
		c.comp_info[0].v_samp_factor = 1;
	}
	if (k == JPROG)
		jpeg_simple_progression(&c);
	jpeg_start_compress(&c, TRUE);
	uint8_t *px = pattern(w, h, comps, (unsigned)(w * 31 + h + k));
	while (c.next_scanline < c.image_height) {
		JSAMPROW r = px + (size_t)c.next_scanline * w * comps;
		jpeg_write_scanlines(&c, &r, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	free(px);
	return (struct mem){ buf, n };
}

static void png_out(png_structp png, png_bytep d, size_t n)
{
	struct mem *m = png_get_io_ptr(png);
	m->p = realloc(m->p, m->n + n);
	memcpy(m->p + m->n, d, n);
	m->n += n;
}

static void png_flush_nop(png_structp png)
{
	(void)png;
}

/* A PNG of raw rows (already packed for the colour type and depth). */
static struct mem make_png(int w, int h, int ct, int depth, int interlace, const uint8_t *raw,
			   size_t rowbytes)
{
	struct mem m = { 0 };
	png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	png_infop info = png_create_info_struct(png);
	cr_assert(png && info && !setjmp(png_jmpbuf(png)));
	png_set_write_fn(png, &m, png_out, png_flush_nop);
	png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, ct,
		     interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
		     PNG_FILTER_TYPE_DEFAULT);
	if (ct == PNG_COLOR_TYPE_PALETTE) {
		png_color pal[256];
		png_byte trans[256];
		for (int i = 0; i < 256; i++) {
			pal[i] = (png_color){ (png_byte)i, (png_byte)(255 - i), (png_byte)(i * 7) };
			trans[i] = (png_byte)(i & 1 ? 0 : 255);
		}
		png_set_PLTE(png, info, pal, 256);
		png_set_tRNS(png, info, trans, 256, NULL);
	}
	png_write_info(png, info);
	png_bytep *rows = malloc(sizeof(*rows) * (size_t)h);
	for (int y = 0; y < h; y++)
		rows[y] = (png_bytep)raw + (size_t)y * rowbytes;
	png_write_image(png, rows);
	png_write_end(png, NULL);
	png_destroy_write_struct(&png, &info);
	free(rows);
	return m;
}

static struct xf_params exact_identity(int w, int h)
{
	struct xf_params p;
	char e[256];
	xf_params_default(&p);
	cr_assert_eq(xf_params_parse(&p, "decode=image crop=none normalize=none output=uint8_hwc "
				     "hflip=0", e, sizeof(e)), 0, "%s", e);
	p.out_w = (uint32_t)w;
	p.out_h = (uint32_t)h;
	p.exact = true;
	return p;
}

static uint8_t *run(const struct xf_params *p, struct xf_scratch *s, uint64_t epoch, uint64_t id,
		    struct mem m, int want_rc, char *err, size_t errlen)
{
	uint8_t *dst = malloc(xf_sample_bytes(p) + 1);
	err[0] = '\0';
	int rc = xf_transform(p, s, 11, epoch, id, m.p, m.n, dst, NULL, err, errlen);
	cr_assert_eq(rc, want_rc, "rc %d: %s", rc, err);
	return dst;
}

/* ---- JPEG decode --------------------------------------------------------------- */

Test(xform_jpeg, partial_decode_equals_whole_decode)
{
	struct xf_scratch *a = xf_scratch_new(0), *b = xf_scratch_new(0);
	char err[512];
	unsigned r = 7;
	for (int k = 0; k < JKINDS; k++) {
		struct mem m = make_jpeg(203 + k, 157, (enum jkind)k, 90);
		for (uint32_t num = 1; num <= 8; num++) {
			int32_t W = (int32_t)xf_scaled(203 + (uint32_t)k, num), H = (int32_t)xf_scaled(157, num);
			struct xf_rect all = { 0, 0, W, H };
			struct xf_region full, part;
			cr_assert_eq(xf_jpeg_decode(b, XF_JPEG_TURBO_FULL, m.p, m.n, num, &all, &full, err,
						sizeof(err)), 0, "%s", err);
			cr_assert(full.w == W && full.h == H);
			for (int t = 0; t < 25; t++) {
				struct xf_rect q;
				q.x0 = (int32_t)(rand_r(&r) % (unsigned)W);
				q.y0 = (int32_t)(rand_r(&r) % (unsigned)H);
				q.x1 = q.x0 + 1 + (int32_t)(rand_r(&r) % (unsigned)(W - q.x0));
				q.y1 = q.y0 + 1 + (int32_t)(rand_r(&r) % (unsigned)(H - q.y0));
				cr_assert_eq(xf_jpeg_decode(a, XF_JPEG_PARTIAL, m.p, m.n, num, &q, &part, err,
							sizeof(err)), 0, "%s", err);
				cr_assert(part.x0 <= q.x0 && part.x0 + part.w >= q.x1 && part.y0 <= q.y0 &&
					  part.y0 + part.h >= q.y1);
				for (int32_t y = q.y0; y < q.y1; y++)
					cr_assert_eq(memcmp(part.px + (size_t)(y - part.y0) * part.stride +
								    (size_t)(q.x0 - part.x0) * 3,
							    full.px + (size_t)y * full.stride + (size_t)q.x0 * 3,
							    (size_t)(q.x1 - q.x0) * 3), 0,
						     "%s at %u/8: row %d of [%d,%d)x[%d,%d) differs",
						     jnames[k], num, y, q.x0, q.x1, q.y0, q.y1);
			}
		}
		free(m.p);
	}
	xf_scratch_free(a);
	xf_scratch_free(b);
}

Test(xform_jpeg, gray_is_replicated_and_header_reads_size)
{
	struct mem m = make_jpeg(64, 48, JGRAY, 95);
	struct xf_scratch *s = xf_scratch_new(0);
	char err[512];
	enum xf_format f;
	uint32_t w, h;
	cr_assert_eq(xf_probe(s, m.p, m.n, &f, &w, &h, err, sizeof(err)), 0, "%s", err);
	cr_assert(f == XF_FMT_JPEG && w == 64 && h == 48);
	struct xf_params p = exact_identity(64, 48);
	uint8_t *o = run(&p, s, 0, 0, m, 0, err, sizeof(err));
	for (size_t i = 0; i < 64 * 48; i++)
		cr_assert(o[3 * i] == o[3 * i + 1] && o[3 * i] == o[3 * i + 2]);
	free(o);
	free(m.p);
	xf_scratch_free(s);
}

/* ---- PNG decode ----------------------------------------------------------------- */

struct png_case {
	const char *name;
	int ct, depth, interlace;
};

/* Raw rows for a case and the RGB that PIL's convert("RGB") gives. */
static uint8_t *png_raw(const struct png_case *c, int w, int h, size_t *rowbytes, uint8_t *rgb)
{
	int ch = c->ct == PNG_COLOR_TYPE_RGB ? 3 : c->ct == PNG_COLOR_TYPE_RGBA ? 4
		 : c->ct == PNG_COLOR_TYPE_GRAY_ALPHA ? 2 : 1;
	*rowbytes = ((size_t)w * ch * c->depth + 7) / 8;
	uint8_t *raw = calloc((size_t)h, *rowbytes);
	uint8_t *v = pattern(w, h, ch * 2, 99);
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			const uint8_t *s = v + ((size_t)y * w + x) * ch * 2;
			uint8_t *row = raw + (size_t)y * *rowbytes, *o = rgb + ((size_t)y * w + x) * 3;
			if (c->depth < 8) { /* gray 1/2/4 bits, MSB first */
				int max = (1 << c->depth) - 1, q = s[0] & max;
				int bit = x * c->depth;
				row[bit / 8] |= (uint8_t)(q << (8 - c->depth - bit % 8));
				o[0] = o[1] = o[2] = (uint8_t)(q * 255 / max);
				continue;
			}
			for (int k = 0; k < ch; k++) {
				if (c->depth == 16) {
					row[(size_t)x * ch * 2 + 2 * k] = s[2 * k];
					row[(size_t)x * ch * 2 + 2 * k + 1] = s[2 * k + 1];
				} else {
					row[(size_t)x * ch + k] = s[k];
				}
			}
			if (c->ct == PNG_COLOR_TYPE_PALETTE)
				o[0] = s[0], o[1] = (uint8_t)(255 - s[0]), o[2] = (uint8_t)(s[0] * 7);
			else if (ch <= 2)
				o[0] = o[1] = o[2] = s[0]; /* 16-bit: the high byte */
			else
				o[0] = s[0], o[1] = s[c->depth == 16 ? 2 : 1], o[2] = s[c->depth == 16 ? 4 : 2];
		}
	free(v);
	return raw;
}

Test(xform_png, every_colour_type_converts_to_rgb)
{
	static const struct png_case cases[] = {
		{ "rgb8", PNG_COLOR_TYPE_RGB, 8, 0 },       { "rgba8", PNG_COLOR_TYPE_RGBA, 8, 0 },
		{ "gray8", PNG_COLOR_TYPE_GRAY, 8, 0 },     { "gray+alpha", PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0 },
		{ "gray1", PNG_COLOR_TYPE_GRAY, 1, 0 },     { "gray2", PNG_COLOR_TYPE_GRAY, 2, 0 },
		{ "gray4", PNG_COLOR_TYPE_GRAY, 4, 0 },     { "palette+tRNS", PNG_COLOR_TYPE_PALETTE, 8, 0 },
		{ "rgb16", PNG_COLOR_TYPE_RGB, 16, 0 },     { "rgba16", PNG_COLOR_TYPE_RGBA, 16, 0 },
		{ "gray16", PNG_COLOR_TYPE_GRAY, 16, 0 },   { "rgb8 interlaced", PNG_COLOR_TYPE_RGB, 8, 1 },
		{ "palette interlaced", PNG_COLOR_TYPE_PALETTE, 8, 1 },
	};
	const int w = 37, h = 29;
	struct xf_scratch *s = xf_scratch_new(0);
	char err[512];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t rgb[37 * 29 * 3];
		size_t rb;
		uint8_t *raw = png_raw(&cases[i], w, h, &rb, rgb);
		struct mem m = make_png(w, h, cases[i].ct, cases[i].depth, cases[i].interlace, raw, rb);
		struct xf_params p = exact_identity(w, h);
		uint8_t *o = run(&p, s, 0, i, m, 0, err, sizeof(err));
		cr_assert_eq(memcmp(o, rgb, sizeof(rgb)), 0, "%s: pixels differ", cases[i].name);
		/* a crop reads only its rows; it must match the same crop of rgb */
		cr_assert_eq(xf_params_parse(&p, "crop=random_resized size=9x11 hflip=0", err,
					     sizeof(err)), 0);
		struct xf_params pe = p;
		free(o);
		o = run(&pe, s, 3, i, m, 0, err, sizeof(err));
		free(o);
		free(raw);
		free(m.p);
	}
	xf_scratch_free(s);
}

/* ---- tensors ------------------------------------------------------------------- */

static struct mem *corpus(size_t *n)
{
	static const int sizes[][2] = { { 500, 375 }, { 375, 500 }, { 240, 240 }, { 100, 60 } };
	*n = JKINDS * 4 + 2;
	struct mem *v = calloc(*n, sizeof(*v));
	for (int k = 0; k < JKINDS; k++)
		for (int s = 0; s < 4; s++)
			v[k * 4 + s] = make_jpeg(sizes[s][0], sizes[s][1], (enum jkind)k, 85);
	for (int i = 0; i < 2; i++) {
		size_t rb;
		uint8_t *rgb = malloc(320 * 200 * 3);
		struct png_case c = { "", i ? PNG_COLOR_TYPE_PALETTE : PNG_COLOR_TYPE_RGBA, 8, i };
		uint8_t *raw = png_raw(&c, 320, 200, &rb, rgb);
		v[JKINDS * 4 + i] = make_png(320, 200, c.ct, 8, i, raw, rb);
		free(raw);
		free(rgb);
	}
	return v;
}

static void free_corpus(struct mem *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].p);
	free(v);
}

struct tjob {
	const struct xf_params *p;
	const struct mem *in;
	size_t n, t, nt;
	uint8_t *batch;
	int failed;
};

static void *tworker(void *arg)
{
	struct tjob *j = arg;
	struct xf_scratch *s = xf_scratch_new(0);
	char err[512];
	/* each thread walks its share backwards: a different scratch history */
	for (size_t i = j->n; i-- > 0;)
		if (i % j->nt == j->t)
			j->failed |= xf_batch_write(j->p, s, 5, 2, i, j->in[i].p, j->in[i].n, j->batch,
						    (uint32_t)i, NULL, err, sizeof(err)) != 0;
	xf_scratch_free(s);
	return NULL;
}

static uint8_t *batch_with_threads(const struct xf_params *p, const struct mem *in, size_t n,
				   size_t nt)
{
	uint8_t *batch = malloc(xf_sample_bytes(p) * n);
	pthread_t th[8];
	struct tjob j[8];
	for (size_t t = 0; t < nt; t++) {
		j[t] = (struct tjob){ p, in, n, t, nt, batch, 0 };
		cr_assert_eq(pthread_create(&th[t], NULL, tworker, &j[t]), 0);
	}
	for (size_t t = 0; t < nt; t++) {
		pthread_join(th[t], NULL);
		cr_assert_eq(j[t].failed, 0);
	}
	return batch;
}

Test(xform_tensor, same_bytes_whatever_the_threads, .timeout = 120)
{
	size_t n;
	struct mem *in = corpus(&n);
	static const char *specs[] = { "", "crop=center output=float16_chw",
				       "normalize=none output=uint8_hwc size=96x128" };
	for (size_t k = 0; k < 3; k++) {
		struct xf_params p;
		char err[256];
		xf_params_default(&p);
		p.decode = XF_DECODE_IMAGE;
		cr_assert_eq(xf_params_parse(&p, specs[k], err, sizeof(err)), 0);
		uint8_t *one = batch_with_threads(&p, in, n, 1);
		uint8_t *four = batch_with_threads(&p, in, n, 4);
		uint8_t *again = batch_with_threads(&p, in, n, 3);
		size_t bytes = xf_sample_bytes(&p) * n;
		cr_assert_eq(memcmp(one, four, bytes), 0, "spec '%s': 1 vs 4 threads", specs[k]);
		cr_assert_eq(memcmp(one, again, bytes), 0, "spec '%s': repeated", specs[k]);
		free(one);
		free(four);
		free(again);
	}
	free_corpus(in, n);
}

Test(xform_tensor, float_layouts_are_the_pixels_normalised)
{
	struct mem m = make_jpeg(500, 375, J420, 90);
	struct xf_scratch *s = xf_scratch_new(0);
	char err[512];
	struct xf_params p8, p32, p16;
	xf_params_default(&p32);
	p32.decode = XF_DECODE_IMAGE;
	p8 = p16 = p32;
	p8.output = XF_OUT_UINT8_HWC;
	p8.normalize = false;
	p16.output = XF_OUT_FLOAT16_CHW;
	const size_t HW = 224 * 224;
	for (uint64_t id = 0; id < 6; id++) {
		uint8_t *u = run(&p8, s, 1, id, m, 0, err, sizeof(err));
		float *f = (float *)run(&p32, s, 1, id, m, 0, err, sizeof(err));
		uint16_t *h = (uint16_t *)run(&p16, s, 1, id, m, 0, err, sizeof(err));
		for (size_t i = 0; i < HW; i++)
			for (int c = 0; c < 3; c++) {
				float want = ((float)u[3 * i + c] / 255.0f - p32.mean[c]) / p32.std[c];
				cr_assert_eq(f[c * HW + i], want, "id %llu pixel %zu ch %d",
					     (unsigned long long)id, i, c);
				cr_assert_eq(h[c * HW + i], xf_f32_to_f16(want));
			}
		free(u);
		free(f);
		free(h);
	}
	free(m.p);
	xf_scratch_free(s);
}

Test(xform_tensor, flip_mirrors_the_same_crop)
{
	struct mem m = make_jpeg(333, 250, J422, 90);
	struct xf_scratch *s = xf_scratch_new(0);
	char err[512];
	struct xf_params a;
	xf_params_default(&a);
	cr_assert_eq(xf_params_parse(&a, "decode=image normalize=none output=uint8_hwc size=50x70 "
				     "hflip=0", err, sizeof(err)), 0);
	struct xf_params b = a;
	b.hflip = 1;
	for (uint64_t id = 0; id < 8; id++) {
		uint8_t *x = run(&a, s, 0, id, m, 0, err, sizeof(err));
		uint8_t *y = run(&b, s, 0, id, m, 0, err, sizeof(err));
		for (int r = 0; r < 50; r++)
			for (int c = 0; c < 70; c++)
				cr_assert_eq(memcmp(x + (r * 70 + c) * 3, y + (r * 70 + 69 - c) * 3, 3), 0);
		free(x);
		free(y);
	}
	free(m.p);
	xf_scratch_free(s);
}

Test(xform_tensor, batch_writer_stays_in_its_slot)
{
	struct mem m = make_jpeg(120, 90, J444, 90);
	struct xf_scratch *s = xf_scratch_new(0);
	char err[512];
	struct xf_params p;
	xf_params_default(&p);
	p.decode = XF_DECODE_IMAGE;
	p.output = XF_OUT_FLOAT16_CHW;
	size_t one = xf_sample_bytes(&p);
	cr_assert_eq(one, 3 * 224 * 224 * 2);
	uint64_t dims[4];
	int dt;
	cr_assert_eq(xf_batch_shape(&p, 5, dims, &dt), 4);
	cr_assert(dims[0] == 5 && dims[1] == 3 && dims[2] == 224 && dims[3] == 224 && dt == SEER_DTYPE_F16);
	uint8_t *batch = malloc(one * 5);
	memset(batch, 0xa5, one * 5);
	cr_assert_eq(xf_batch_write(&p, s, 1, 2, 3, m.p, m.n, batch, 2, NULL, err, sizeof(err)), 0);
	uint8_t *direct = malloc(one);
	cr_assert_eq(xf_transform(&p, s, 1, 2, 3, m.p, m.n, direct, NULL, err, sizeof(err)), 0);
	cr_assert_eq(memcmp(batch + 2 * one, direct, one), 0);
	for (size_t i = 0; i < one * 5; i++)
		if (i < 2 * one || i >= 3 * one)
			cr_assert_eq(batch[i], 0xa5, "byte %zu outside the slot written", i);
	free(batch);
	free(direct);
	free(m.p);
	xf_scratch_free(s);
}

Test(xform_tensor, decoded_blob_gives_the_same_tensor)
{
	size_t n;
	struct mem *in = corpus(&n);
	struct xf_scratch *s = xf_scratch_new(0);
	char err[512];
	for (int mode = 0; mode < 2; mode++) {
		struct xf_params p;
		xf_params_default(&p);
		cr_assert_eq(xf_params_parse(&p, mode ? "decode=image crop=center" : "decode=image",
					     err, sizeof(err)), 0);
		p.exact = true;
		for (size_t i = 0; i < n; i++) {
			enum xf_format f;
			uint32_t w, h;
			cr_assert_eq(xf_probe(s, in[i].p, in[i].n, &f, &w, &h, err, sizeof(err)), 0);
			size_t cap = xf_blob_bytes(&p, w, h), used = 0;
			cr_assert_eq(cap, XF_BLOB_HEADER + (size_t)w * h * 3);
			uint8_t *blob = malloc(cap);
			cr_assert_eq(xf_decode_blob(&p, s, in[i].p, in[i].n, blob, cap - 1, &used, err,
						    sizeof(err)), -ENOSPC);
			cr_assert_eq(xf_decode_blob(&p, s, in[i].p, in[i].n, blob, cap, &used, err,
						    sizeof(err)), 0, "%s", err);
			uint8_t *a = run(&p, s, 4, i, in[i], 0, err, sizeof(err));
			uint8_t *b = run(&p, s, 4, i, (struct mem){ blob, used }, 0, err, sizeof(err));
			cr_assert_eq(memcmp(a, b, xf_sample_bytes(&p)), 0, "sample %zu mode %d", i, mode);
			free(a);
			free(b);
			free(blob);
		}
	}
	/* a resized cache: torchvision Resize(160) dims, the same crop box */
	struct xf_params p;
	xf_params_default(&p);
	cr_assert_eq(xf_params_parse(&p, "decode=image cache=decoded cache_size=160", err,
				     sizeof(err)), 0);
	cr_assert_eq(xf_blob_bytes(&p, 500, 375), XF_BLOB_HEADER + 213 * 160 * 3);
	size_t used;
	uint8_t *blob = malloc(xf_blob_bytes(&p, 500, 375));
	cr_assert_eq(xf_decode_blob(&p, s, in[0].p, in[0].n, blob, xf_blob_bytes(&p, 500, 375),
				    &used, err, sizeof(err)), 0, "%s", err);
	struct xf_info ia, ib;
	uint8_t *t = malloc(xf_sample_bytes(&p));
	cr_assert_eq(xf_transform(&p, s, 1, 1, 1, in[0].p, in[0].n, t, &ia, err, sizeof(err)), 0);
	cr_assert_eq(xf_transform(&p, s, 1, 1, 1, blob, used, t, &ib, err, sizeof(err)), 0);
	cr_assert_eq(memcmp(&ia.box, &ib.box, sizeof(ia.box)), 0);
	cr_assert(ib.format == XF_FMT_BLOB && ib.width == 500 && ib.height == 375);
	blob[XF_BLOB_HEADER - 8] = 4; /* channels */
	cr_assert_eq(xf_transform(&p, s, 1, 1, 1, blob, used, t, NULL, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "corrupt decoded-image blob"), "%s", err);
	free(t);
	free(blob);
	xf_scratch_free(s);
	free_corpus(in, n);
}

/* ---- bad input ------------------------------------------------------------------- */

Test(xform_errors, foreign_and_empty_inputs_are_named)
{
	static const struct { const char *bytes; size_t n; const char *says; } v[] = {
		{ "", 0, "not an image: the file is empty" },
		{ "GIF89a\x01\x00\x01\x00", 10, "47 49 46 38 39 61 01 00 (GIF)" },
		{ "PK\x03\x04rest", 8, "(zip)" },
		{ "BM\x00\x00", 4, "(BMP)" },
		{ "RIFF\x10\x00\x00\x00WEBPVP8 ", 16, "(WebP)" },
		{ "\x93NUMPY\x01\x00", 8, "(numpy .npy)" },
		{ "\xff\xd8", 2, "(JPEG cut short)" },
		{ "hello, world", 12, "68 65 6c 6c 6f 2c 20 77 (unknown content)" },
	};
	struct xf_scratch *s = xf_scratch_new(0);
	struct xf_params p;
	xf_params_default(&p);
	p.decode = XF_DECODE_IMAGE;
	char err[512];
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		free(run(&p, s, 0, 0, (struct mem){ (uint8_t *)v[i].bytes, v[i].n }, -EINVAL, err,
			 sizeof(err)));
		cr_assert(strstr(err, v[i].says), "'%s' lacks '%s'", err, v[i].says);
		if (v[i].n)
			cr_assert(strstr(err, "not a JPEG or PNG image"), "%s", err);
	}
	xf_scratch_free(s);
}

static int is_jpeg_error(const char *e)
{
	return !strncmp(e, "truncated JPEG:", 15) || !strncmp(e, "corrupt JPEG data:", 18) ||
	       !strncmp(e, "invalid JPEG:", 13) || !strncmp(e, "unsupported JPEG:", 17);
}

Test(xform_errors, truncated_jpeg_fails_with_its_reason, .timeout = 120)
{
	struct xf_scratch *s = xf_scratch_new(0);
	char err[512];
	for (int k = 0; k < JKINDS; k++) {
		struct mem m = make_jpeg(160, 120, (enum jkind)k, 90);
		struct xf_params whole = exact_identity(160, 120), crop;
		xf_params_default(&crop);
		crop.decode = XF_DECODE_IMAGE;
		int truncated = 0;
		for (size_t cut = 0; cut < m.n; cut += 1 + m.n / 211) {
			struct mem t = { m.p, cut };
			uint8_t *o = malloc(xf_sample_bytes(&whole));
			int rc = xf_transform(&whole, s, 0, 0, 0, t.p, t.n, o, NULL, err, sizeof(err));
			if (cut < m.n * 9 / 10)
				cr_assert_neq(rc, 0, "%s cut at %zu of %zu decoded", jnames[k], cut, m.n);
			if (rc)
				cr_assert(is_jpeg_error(err) || !strncmp(err, "not a", 5),
					  "%s cut %zu: '%s'", jnames[k], cut, err);
			truncated += rc && !strncmp(err, "truncated JPEG:", 15);
			free(o);
			o = malloc(xf_sample_bytes(&crop));
			rc = xf_transform(&crop, s, 0, 1, cut, t.p, t.n, o, NULL, err, sizeof(err));
			cr_assert(rc == 0 || is_jpeg_error(err) || !strncmp(err, "not a", 5),
				  "%s", err);
			free(o);
		}
		cr_assert(truncated > 10, "%s: only %d cuts said 'truncated'", jnames[k], truncated);
		free(m.p);
	}
	xf_scratch_free(s);
}

Test(xform_errors, corrupt_bytes_never_crash, .timeout = 300)
{
	struct xf_scratch *s = xf_scratch_new(1u << 22);
	struct xf_params p;
	xf_params_default(&p);
	p.decode = XF_DECODE_IMAGE;
	uint8_t *o = malloc(xf_sample_bytes(&p));
	char err[512];
	unsigned r = 3;
	size_t n;
	struct mem *in = corpus(&n);
	int failed = 0, total = 0;
	for (size_t i = 0; i < n; i++) {
		uint8_t *c = malloc(in[i].n);
		for (int t = 0; t < 40; t++) {
			memcpy(c, in[i].p, in[i].n);
			int flips = 1 + (int)(rand_r(&r) % 8);
			for (int f = 0; f < flips; f++)
				c[rand_r(&r) % in[i].n] ^= (uint8_t)(1 + rand_r(&r) % 255);
			p.jpeg_path = t & 1 ? XF_JPEG_TURBO_FULL : XF_JPEG_PARTIAL;
			err[0] = '\0';
			int rc = xf_transform(&p, s, 0, (uint64_t)t, i, c, in[i].n, o, NULL, err,
					      sizeof(err));
			total++;
			if (rc) {
				failed++;
				cr_assert(strlen(err) > 10, "rc %d with no reason", rc);
			}
		}
		free(c);
	}
	cr_assert(failed > 0 && failed < total, "%d of %d corrupt inputs failed", failed, total);
	free(o);
	free_corpus(in, n);
	xf_scratch_free(s);
}

Test(xform_errors, corrupt_png_fails_with_its_reason)
{
	size_t rb;
	uint8_t rgb[64 * 40 * 3];
	struct png_case c = { "", PNG_COLOR_TYPE_RGB, 8, 0 };
	uint8_t *raw = png_raw(&c, 64, 40, &rb, rgb);
	struct mem m = make_png(64, 40, PNG_COLOR_TYPE_RGB, 8, 0, raw, rb);
	struct xf_scratch *s = xf_scratch_new(0);
	struct xf_params p = exact_identity(64, 40);
	char err[512];
	for (size_t cut = 8; cut < m.n * 9 / 10; cut += 7) {
		free(run(&p, s, 0, 0, (struct mem){ m.p, cut }, -EINVAL, err, sizeof(err)));
		cr_assert(!strncmp(err, "corrupt PNG:", 12) || !strncmp(err, "invalid PNG:", 12), "%s",
			  err);
	}
	free(run(&p, s, 0, 0, (struct mem){ m.p, m.n * 3 / 4 }, -EINVAL, err, sizeof(err)));
	cr_assert(strstr(err, "truncated"), "%s", err);
	uint8_t *bad = malloc(m.n);
	memcpy(bad, m.p, m.n);
	uint8_t *idat = memmem(bad, m.n, "IDAT", 4);
	cr_assert_not_null(idat);
	uint32_t ilen = (uint32_t)idat[-4] << 24 | (uint32_t)idat[-3] << 16 | idat[-2] << 8 | idat[-1];
	idat[4 + ilen] ^= 0x40; /* the chunk's CRC */
	free(run(&p, s, 0, 0, (struct mem){ bad, m.n }, -EINVAL, err, sizeof(err)));
	cr_assert(strstr(err, "CRC"), "%s", err);
	free(bad);
	free(raw);
	free(m.p);
	xf_scratch_free(s);
}

Test(xform_errors, oversized_headers_fail_before_allocating)
{
	struct mem m = make_jpeg(64, 48, J420, 90);
	struct xf_scratch *s = xf_scratch_new(0), *small = xf_scratch_new(1000);
	struct xf_params p;
	xf_params_default(&p);
	p.decode = XF_DECODE_IMAGE;
	char err[512];
	free(run(&p, small, 0, 0, m, -EFBIG, err, sizeof(err)));
	cr_assert(strstr(err, "JPEG image 64x48 is larger than this decoder's limit of 1000 pixels"),
		  "%s", err);
	uint8_t *sof = memmem(m.p, m.n, "\xff\xc0", 2);
	cr_assert_not_null(sof);
	sof[5] = sof[7] = 0xea; /* 60000 x 60000 */
	sof[6] = sof[8] = 0x60;
	free(run(&p, s, 0, 0, m, -EFBIG, err, sizeof(err)));
	cr_assert(strstr(err, "60000x60000 is larger"), "%s", err);
	size_t rb;
	uint8_t rgb[8 * 8 * 3];
	struct png_case c = { "", PNG_COLOR_TYPE_RGB, 8, 0 };
	uint8_t *raw = png_raw(&c, 8, 8, &rb, rgb);
	struct mem q = make_png(8, 8, PNG_COLOR_TYPE_RGB, 8, 0, raw, rb);
	q.p[16 + 1] = q.p[20 + 1] = 0x01; /* 65544 x 65544: beyond any decoder */
	free(run(&p, s, 0, 0, q, -EINVAL, err, sizeof(err)));
	cr_assert(strstr(err, "invalid PNG: image size 65544x65544"), "%s", err);
	q.p[16 + 1] = q.p[20 + 1] = 0;
	q.p[16 + 2] = q.p[20 + 2] = 0xf0; /* 61448 x 61448 */
	free(run(&p, s, 0, 0, q, -EFBIG, err, sizeof(err)));
	cr_assert(strstr(err, "PNG image 61448x61448 is larger"), "%s", err);
	free(raw);
	free(q.p);
	free(m.p);
	xf_scratch_free(s);
	xf_scratch_free(small);
}
