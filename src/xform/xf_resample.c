/* xf_resample.c — resize a decoded region straight to the output tensor:
 * PIL-compatible antialiased bilinear (Pillow's ImagingResample with the
 * triangle filter, support scaled by the downscale factor, 22-bit fixed
 * point weights, horizontal pass then vertical pass, each rounded to uint8),
 * then flip, normalisation and layout in the same per-row pass.
 *
 * Runs on the thread that owns the scratch; all memory is the scratch's.
 * Fails only with -ENOMEM (buffers) or -EINVAL (an empty axis). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xf_internal.h"
#include "../util.h"

#define PRECISION_BITS (32 - 8 - 2)

int xf_buf_reserve(struct xf_buf *b, size_t n)
{
	if (n <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < n)
		cap *= 2;
	void *p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

static inline double triangle(double x)
{
	if (x < 0.0)
		x = -x;
	return x < 1.0 ? 1.0 - x : 0.0;
}

/* PIL's normalize_coeffs_8bpc: round half away from zero to 22 bits. */
static inline int32_t fixed(double w)
{
	double s = w * (double)(1 << PRECISION_BITS);
	return (int32_t)(w < 0 ? s - 0.5 : s + 0.5);
}

/* Weights of one output at `center` (PIL precompute_coeffs): sources
 * [*xmin, *xmin + return) of the clamp range. */
static int32_t one_output(const struct xf_axis *ax, double center, double support, double ss,
			  int32_t ksize, double *w, int32_t *xmin_out)
{
	int32_t xmin = (int32_t)(center - support + 0.5);
	int32_t xmax = (int32_t)(center + support + 0.5);
	if (xmin < ax->clamp_lo)
		xmin = ax->clamp_lo;
	if (xmax > ax->clamp_hi)
		xmax = ax->clamp_hi;
	int32_t n = xmax - xmin;
	if (n > ksize)
		n = ksize;
	double ww = 0.0;
	for (int32_t x = 0; x < n; x++) {
		w[x] = triangle((x + xmin - center + 0.5) * ss);
		ww += w[x];
	}
	if (n <= 0 || ww == 0.0) {
		/* the span lies outside the clamp range (a degenerate crop):
		 * take the nearest allowed source */
		xmin = center < ax->clamp_lo ? ax->clamp_lo
		     : center >= ax->clamp_hi ? ax->clamp_hi - 1
		     : (int32_t)center;
		w[0] = 1.0;
		*xmin_out = xmin;
		return 1;
	}
	for (int32_t x = 0; x < n; x++)
		w[x] /= ww;
	*xmin_out = xmin;
	return n;
}

int xf_taps_build(struct xf_taps *t, const struct xf_axis *ax, struct xf_buf *mem,
		  struct xf_buf *dbl)
{
	if (ax->out_total <= 0 || ax->count <= 0 || ax->clamp_hi <= ax->clamp_lo ||
	    !(ax->in1 > ax->in0))
		return -EINVAL;
	double scale = (ax->in1 - ax->in0) / ax->out_total;
	double fs = scale < 1.0 ? 1.0 : scale;
	double support = 1.0 * fs; /* the triangle filter's support is 1 */
	double ss = 1.0 / fs;
	if (support > 1e6)
		return -EINVAL;
	int32_t ksize = (int32_t)ceil(support) * 2 + 1;
	int32_t j0 = ax->out_first < 0 ? -ax->out_first : 0;
	int32_t j1 = ax->out_total - ax->out_first;
	if (j1 > ax->count)
		j1 = ax->count;
	int32_t n = j1 > j0 ? j1 - j0 : 0;
	size_t need = ((size_t)n * (2 + (size_t)ksize) + 1) * sizeof(int32_t);
	if (xf_buf_reserve(mem, need) || xf_buf_reserve(dbl, (size_t)ksize * sizeof(double)))
		return -ENOMEM;
	t->n = n;
	t->first = j0;
	t->count = ax->count;
	t->ksize = ksize;
	t->lo = mem->p;
	t->len = t->lo + n;
	t->k = t->len + n;
	t->need_lo = INT32_MAX;
	t->need_hi = INT32_MIN;
	double *w = dbl->p;
	for (int32_t i = 0; i < n; i++) {
		int32_t xx = ax->out_first + j0 + i, xmin;
		double center = ax->in0 + (xx + 0.5) * scale;
		int32_t c = one_output(ax, center, support, ss, ksize, w, &xmin);
		int32_t *k = t->k + (size_t)i * ksize;
		for (int32_t x = 0; x < ksize; x++)
			k[x] = x < c ? fixed(w[x]) : 0;
		t->lo[i] = xmin + ax->origin;
		t->len[i] = c;
		t->need_lo = MIN(t->need_lo, t->lo[i]);
		t->need_hi = MAX(t->need_hi, t->lo[i] + c);
	}
	if (n == 0)
		t->need_lo = t->need_hi = ax->origin + ax->clamp_lo;
	return 0;
}

void xf_taps_rebase(struct xf_taps *t, int32_t origin)
{
	for (int32_t i = 0; i < t->n; i++)
		t->lo[i] -= origin;
	t->need_lo -= origin;
	t->need_hi -= origin;
}

static inline uint8_t clip8(int32_t v)
{
	if (v >= (1 << PRECISION_BITS << 8))
		return 255;
	if (v <= 0)
		return 0;
	return (uint8_t)(v >> PRECISION_BITS);
}

/* Horizontal pass: region rows [ty->need_lo, ty->need_hi) into tmp, tx->n
 * RGB pixels per row. */
static void hpass(const struct xf_region *r, const struct xf_taps *tx, const struct xf_taps *ty,
		  uint8_t *tmp)
{
	size_t n3 = (size_t)tx->n * 3;
	for (int32_t y = ty->need_lo; y < ty->need_hi; y++) {
		const uint8_t *in = r->px + (size_t)y * r->stride;
		uint8_t *o = tmp + (size_t)(y - ty->need_lo) * n3;
		for (int32_t i = 0; i < tx->n; i++) {
			const int32_t *k = tx->k + (size_t)i * tx->ksize;
			const uint8_t *q = in + (size_t)tx->lo[i] * 3;
			int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
			for (int32_t x = 0; x < tx->len[i]; x++) {
				s0 += q[3 * x] * k[x];
				s1 += q[3 * x + 1] * k[x];
				s2 += q[3 * x + 2] * k[x];
			}
			o[3 * i] = clip8(s0);
			o[3 * i + 1] = clip8(s1);
			o[3 * i + 2] = clip8(s2);
		}
	}
}

/* Vertical pass of tensor row `oy` into row (tx->count RGB pixels, padding
 * zero). acc holds tx->n * 3 int32. */
static void vpass_row(const uint8_t *tmp, const struct xf_taps *tx, const struct xf_taps *ty,
		      int32_t oy, int32_t *acc, uint8_t *row)
{
	size_t n3 = (size_t)tx->n * 3;
	memset(row, 0, (size_t)tx->count * 3);
	int32_t t = oy - ty->first;
	if (t < 0 || t >= ty->n)
		return;
	for (size_t x = 0; x < n3; x++)
		acc[x] = 1 << (PRECISION_BITS - 1);
	const int32_t *k = ty->k + (size_t)t * ty->ksize;
	for (int32_t i = 0; i < ty->len[t]; i++) {
		const uint8_t *in = tmp + (size_t)(ty->lo[t] + i - ty->need_lo) * n3;
		int32_t w = k[i];
		for (size_t x = 0; x < n3; x++)
			acc[x] += in[x] * w;
	}
	uint8_t *o = row + (size_t)tx->first * 3;
	for (size_t x = 0; x < n3; x++)
		o[x] = clip8(acc[x]);
}

/* Per-channel tables: the float tensor value of each byte (torchvision:
 * to_tensor's v / 255 in float32, then (x - mean) / std in float32). */
struct xf_lut {
	float f[3][256];
	uint16_t h[3][256];
};

static void lut_fill(struct xf_lut *l, const struct xf_params *p)
{
	for (int c = 0; c < 3; c++)
		for (int v = 0; v < 256; v++) {
			float x = (float)v / 255.0f;
			if (p->normalize)
				x = (x - p->mean[c]) / p->std[c];
			l->f[c][v] = x;
			l->h[c][v] = xf_f32_to_f16(x);
		}
}

/* Write tensor row oy from row (RGB, tx count pixels). */
static void emit_row(const struct xf_params *p, const struct xf_lut *l, const uint8_t *row,
		     int32_t W, int32_t H, int32_t oy, int flip, void *dst, void *fbuf)
{
	if (p->output == XF_OUT_UINT8_HWC) {
		uint8_t *o = (uint8_t *)dst + (size_t)oy * W * 3;
		if (!flip) {
			memcpy(o, row, (size_t)W * 3);
			return;
		}
		for (int32_t x = 0; x < W; x++)
			memcpy(o + 3 * (size_t)x, row + 3 * (size_t)(W - 1 - x), 3);
		return;
	}
	size_t plane = (size_t)W * H, esz = p->output == XF_OUT_FLOAT32_CHW ? 4 : 2;
	for (int c = 0; c < 3; c++) {
		if (esz == 4) {
			float *f = fbuf;
			for (int32_t x = 0; x < W; x++)
				f[x] = l->f[c][row[3 * (flip ? W - 1 - x : x) + c]];
		} else {
			uint16_t *h = fbuf;
			for (int32_t x = 0; x < W; x++)
				h[x] = l->h[c][row[3 * (flip ? W - 1 - x : x) + c]];
		}
		memcpy((uint8_t *)dst + ((size_t)c * plane + (size_t)oy * W) * esz, fbuf,
		       (size_t)W * esz);
	}
}

/* Scratch layout for one resample: tmp rows, then acc/row/fbuf. */
static int reserve(struct xf_scratch *s, const struct xf_taps *tx, const struct xf_taps *ty,
		   int32_t **acc, uint8_t **row, void **fbuf, struct xf_lut **lut)
{
	size_t rows = (size_t)(ty->need_hi - ty->need_lo);
	if (xf_buf_reserve(&s->tmp, rows * (size_t)tx->n * 3 + 1))
		return -ENOMEM;
	size_t a = ALIGN_UP((size_t)tx->n * 3 * sizeof(int32_t), 64);
	size_t rw = ALIGN_UP((size_t)tx->count * 3, 64);
	size_t fb = ALIGN_UP((size_t)tx->count * sizeof(float), 64);
	if (xf_buf_reserve(&s->acc, a + rw + fb + sizeof(struct xf_lut)))
		return -ENOMEM;
	*acc = s->acc.p;
	*row = (uint8_t *)s->acc.p + a;
	*fbuf = (uint8_t *)s->acc.p + a + rw;
	*lut = (struct xf_lut *)((uint8_t *)s->acc.p + a + rw + fb);
	return 0;
}

int xf_resample(struct xf_scratch *s, const struct xf_params *p, const struct xf_region *r,
		const struct xf_taps *tx, const struct xf_taps *ty, int flip, void *dst)
{
	int32_t *acc;
	uint8_t *row;
	void *fbuf;
	struct xf_lut *lut;
	if (reserve(s, tx, ty, &acc, &row, &fbuf, &lut))
		return -ENOMEM;
	if (p->output != XF_OUT_UINT8_HWC)
		lut_fill(lut, p);
	hpass(r, tx, ty, s->tmp.p);
	for (int32_t oy = 0; oy < ty->count; oy++) {
		vpass_row(s->tmp.p, tx, ty, oy, acc, row);
		emit_row(p, lut, row, tx->count, ty->count, oy, flip, dst, fbuf);
	}
	return 0;
}

int xf_resample_u8(struct xf_scratch *s, const struct xf_region *r, const struct xf_taps *tx,
		   const struct xf_taps *ty, uint8_t *dst)
{
	int32_t *acc;
	uint8_t *row;
	void *fbuf;
	struct xf_lut *lut;
	if (reserve(s, tx, ty, &acc, &row, &fbuf, &lut))
		return -ENOMEM;
	hpass(r, tx, ty, s->tmp.p);
	for (int32_t oy = 0; oy < ty->count; oy++)
		vpass_row(s->tmp.p, tx, ty, oy, acc, dst + (size_t)oy * tx->count * 3);
	return 0;
}

/* ---- float16 ------------------------------------------------------------- */

uint16_t xf_f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof(x));
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
	uint32_t ax = x & 0x7fffffffu;
	if (ax >= 0x7f800000u) /* inf, or NaN kept quiet with its top payload bits */
		return sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0);
	if (ax >= 0x477ff000u) /* >= 65520: rounds to infinity */
		return sign | 0x7c00;
	uint32_t q, rem, half;
	if (ax < 0x38800000u) { /* below 2^-14: a subnormal half (or zero) */
		if (ax < 0x33000000u) /* below 2^-25: rounds to zero */
			return sign;
		uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126 - e; /* units of 2^-24 */
		q = m >> shift;
		rem = m & ((1u << shift) - 1);
		half = 1u << (shift - 1);
	} else {
		uint32_t rb = ax - 0x38000000u; /* exponent bias 127 -> 15 */
		q = rb >> 13;
		rem = rb & 0x1fffu;
		half = 0x1000u;
	}
	if (rem > half || (rem == half && (q & 1)))
		q++; /* a carry into the exponent is the right result */
	return sign | (uint16_t)q;
}
