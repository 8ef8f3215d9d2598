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

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "xf_internal.h"
#include "../util/util.h"

#define PRECISION_BITS (32 - 8 - 2)

/* The vectorisable loops get an AVX2 clone beside the baseline x86-64 one,
 * chosen at load time (GCC function multi-versioning). Not under TSan: the
 * ifunc resolver runs during relocation, before the TSan runtime exists, and
 * crashes in its instrumentation (seerd under TSan died at start). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
	!defined(__SANITIZE_THREAD__)
#define XF_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define XF_CLONES
#endif

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

/* k[0..ksize) as pmaddwd operands: for each pair (k[2j], k[2j+1]), 8 int16
 * of the high 11 bits then 8 of the low 11, the pair repeated 4 times. */
static void split_pairs(const int32_t *k, int32_t ksize, int16_t *out)
{
	for (int32_t j = 0; j < (ksize + 1) / 2; j++, out += 16) {
		int32_t a = k[2 * j], b = 2 * j + 1 < ksize ? k[2 * j + 1] : 0;
		for (int l = 0; l < 4; l++) {
			out[2 * l] = (int16_t)(a >> 11);
			out[2 * l + 1] = (int16_t)(b >> 11);
			out[8 + 2 * l] = (int16_t)(a & 2047);
			out[8 + 2 * l + 1] = (int16_t)(b & 2047);
		}
	}
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
	int32_t npairs = (ksize + 1) / 2;
	size_t words = ALIGN_UP((size_t)n * (2 + (size_t)ksize) + 1, 8);
	size_t need = words * sizeof(int32_t) + (size_t)n * npairs * 16 * sizeof(int16_t);
	if (xf_buf_reserve(mem, need) || xf_buf_reserve(dbl, (size_t)ksize * sizeof(double)))
		return -ENOMEM;
	t->n = n;
	t->first = j0;
	t->count = ax->count;
	t->ksize = ksize;
	t->npairs = npairs;
	t->lo = mem->p;
	t->len = t->lo + n;
	t->k = t->len + n;
	t->k16 = (int16_t *)(t->lo + words);
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
		split_pairs(k, ksize, t->k16 + (size_t)i * npairs * 16);
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

/* Horizontal pass of one row, scalar: PIL's loop. */
static void hpass_row(const uint8_t *restrict in, const struct xf_taps *tx, uint8_t *restrict o)
{
	const int32_t *lo = tx->lo, *len = tx->len, *kk = tx->k;
	const int32_t n = tx->n, ks = tx->ksize;
	for (int32_t i = 0; i < n; i++) {
		const int32_t *k = kk + (size_t)i * ks;
		const uint8_t *q = in + (size_t)lo[i] * 3;
		int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
		for (int32_t x = 0; x < len[i]; x++) {
			s0 += q[3 * x] * k[x];
			s1 += q[3 * x + 1] * k[x];
			s2 += q[3 * x + 2] * k[x];
		}
		o[3 * i] = clip8(s0);
		o[3 * i + 1] = clip8(s1);
		o[3 * i + 2] = clip8(s2);
	}
}

#if defined(__SSE2__)
/* The same sums, two taps of three channels per step: the bytes of pixels
 * x and x + 1 interleaved (R R G G B B . .) and multiplied by the weights'
 * high and low 11 bits with pmaddwd; 2^11 * high + low is PIL's integer sum
 * exactly. Reads 4 bytes at each pixel: up to 7 bytes past the last one. */
static void hpass_row_sse2(const uint8_t *restrict in, const struct xf_taps *tx,
			   uint8_t *restrict o)
{
	const __m128i zero = _mm_setzero_si128();
	const int32_t *lo = tx->lo, *len = tx->len;
	const int32_t n = tx->n, np = tx->npairs;
	for (int32_t i = 0; i < n; i++) {
		const __m128i *kv = (const __m128i *)(tx->k16 + (size_t)i * np * 16);
		const uint8_t *q = in + (size_t)lo[i] * 3;
		__m128i hi = zero, low = zero;
		for (int32_t x = 0; x < len[i]; x += 2, q += 6, kv += 2) {
			uint32_t a, b;
			memcpy(&a, q, 4);
			memcpy(&b, q + 3, 4);
			__m128i p = _mm_unpacklo_epi8(_mm_cvtsi32_si128((int)a), _mm_cvtsi32_si128((int)b));
			p = _mm_unpacklo_epi8(p, zero);
			hi = _mm_add_epi32(hi, _mm_madd_epi16(p, _mm_loadu_si128(kv)));
			low = _mm_add_epi32(low, _mm_madd_epi16(p, _mm_loadu_si128(kv + 1)));
		}
		__m128i sum = _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(hi, 11), low),
					    _mm_set1_epi32(1 << (PRECISION_BITS - 1)));
		/* clip8: >> 22, then saturate to [0, 255] */
		sum = _mm_srai_epi32(sum, PRECISION_BITS);
		sum = _mm_packus_epi16(_mm_packs_epi32(sum, sum), zero);
		uint32_t rgbx = (uint32_t)_mm_cvtsi128_si32(sum);
		memcpy(o + 3 * i, &rgbx, 4); /* the 4th byte: overwritten next, or slack */
	}
}
#endif

/* Horizontal pass: region rows [ty->need_lo, ty->need_hi) into tmp, tx->n
 * RGB pixels per row. */
static void hpass(const struct xf_region *r, const struct xf_taps *tx, const struct xf_taps *ty,
		  uint8_t *tmp)
{
	size_t n3 = (size_t)tx->n * 3;
	for (int32_t y = ty->need_lo; y < ty->need_hi; y++) {
		const uint8_t *in = r->px + (size_t)y * r->stride;
		uint8_t *o = tmp + (size_t)(y - ty->need_lo) * n3;
#if defined(__SSE2__)
		/* the SIMD loads may run 7 bytes past the row: fine inside the
		 * region, and past its end only with the decoder's slack */
		if (y + 1 < r->h || r->slack >= 8) {
			hpass_row_sse2(in, tx, o);
			continue;
		}
#endif
		hpass_row(in, tx, o);
	}
}

/* Vertical pass of tensor row `oy` into row (tx->count RGB pixels, padding
 * zero). acc holds tx->n * 3 int32. */
XF_CLONES static void vpass_row(const uint8_t *tmp, const struct xf_taps *tx, const struct xf_taps *ty,
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

/* Write tensor row oy from row (RGB, W pixels; mirrored in place if flip):
 * each pixel's three values through the tables into the three planes. */
static void emit_row(const struct xf_params *p, const struct xf_lut *l, uint8_t *row,
		     int32_t W, int32_t H, int32_t oy, int flip, void *dst)
{
	if (flip)
		for (int32_t a = 0, b = W - 1; a < b; a++, b--)
			for (int c = 0; c < 3; c++) {
				uint8_t t = row[3 * a + c];
				row[3 * a + c] = row[3 * b + c];
				row[3 * b + c] = t;
			}
	size_t plane = (size_t)W * H, at = (size_t)oy * W;
	if (p->output == XF_OUT_UINT8_HWC) {
		memcpy((uint8_t *)dst + at * 3, row, (size_t)W * 3);
	} else if (p->output == XF_OUT_FLOAT32_CHW) {
		uint8_t *d0 = (uint8_t *)dst + at * 4, *d1 = d0 + plane * 4, *d2 = d1 + plane * 4;
		for (int32_t x = 0; x < W; x++, row += 3) {
			memcpy(d0 + 4 * (size_t)x, &l->f[0][row[0]], 4);
			memcpy(d1 + 4 * (size_t)x, &l->f[1][row[1]], 4);
			memcpy(d2 + 4 * (size_t)x, &l->f[2][row[2]], 4);
		}
	} else {
		uint8_t *d0 = (uint8_t *)dst + at * 2, *d1 = d0 + plane * 2, *d2 = d1 + plane * 2;
		for (int32_t x = 0; x < W; x++, row += 3) {
			memcpy(d0 + 2 * (size_t)x, &l->h[0][row[0]], 2);
			memcpy(d1 + 2 * (size_t)x, &l->h[1][row[1]], 2);
			memcpy(d2 + 2 * (size_t)x, &l->h[2][row[2]], 2);
		}
	}
}

/* Scratch layout for one resample: tmp rows, then acc/row/lut. */
static int reserve(struct xf_scratch *s, const struct xf_taps *tx, const struct xf_taps *ty,
		   int32_t **acc, uint8_t **row, struct xf_lut **lut)
{
	size_t rows = (size_t)(ty->need_hi - ty->need_lo);
	if (xf_buf_reserve(&s->tmp, rows * (size_t)tx->n * 3 + 4))
		return -ENOMEM;
	size_t a = ALIGN_UP((size_t)tx->n * 3 * sizeof(int32_t), 64);
	size_t rw = ALIGN_UP((size_t)tx->count * 3, 64);
	if (xf_buf_reserve(&s->acc, a + rw + sizeof(struct xf_lut)))
		return -ENOMEM;
	*acc = s->acc.p;
	*row = (uint8_t *)s->acc.p + a;
	*lut = (struct xf_lut *)((uint8_t *)s->acc.p + a + rw);
	return 0;
}

int xf_resample(struct xf_scratch *s, const struct xf_params *p, const struct xf_region *r,
		const struct xf_taps *tx, const struct xf_taps *ty, int flip, void *dst)
{
	int32_t *acc;
	uint8_t *row;
	struct xf_lut *lut;
	if (reserve(s, tx, ty, &acc, &row, &lut))
		return -ENOMEM;
	if (p->output != XF_OUT_UINT8_HWC)
		lut_fill(lut, p);
	hpass(r, tx, ty, s->tmp.p);
	for (int32_t oy = 0; oy < ty->count; oy++) {
		vpass_row(s->tmp.p, tx, ty, oy, acc, row);
		emit_row(p, lut, row, tx->count, ty->count, oy, flip, dst);
	}
	return 0;
}

int xf_resample_u8(struct xf_scratch *s, const struct xf_region *r, const struct xf_taps *tx,
		   const struct xf_taps *ty, uint8_t *dst)
{
	int32_t *acc;
	uint8_t *row;
	struct xf_lut *lut;
	if (reserve(s, tx, ty, &acc, &row, &lut))
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
