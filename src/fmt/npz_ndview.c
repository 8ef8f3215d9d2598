/* Which bytes of an array make sample k, and copying them out: a sample is
 * the index k of the first or last axis of a C- or Fortran-ordered array,
 * delivered C-ordered. Dimensions are merged where contiguous on both sides,
 * so most copies are a few long runs.
 *
 * Pure functions of their arguments: any thread. */
#define _GNU_SOURCE
#include "npz.h"

#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "../util/util.h"

uint64_t npz_axis_stride(const uint64_t *shape, uint32_t nd, bool fortran, bool last,
			 uint32_t isz)
{
	uint32_t a = last ? nd - 1 : 0;
	uint64_t s = isz;
	if (fortran)
		for (uint32_t i = 0; i < a; i++)
			s *= shape[i];
	else
		for (uint32_t i = nd - 1; i > a; i--)
			s *= shape[i];
	return s;
}

/* Drop unit dims, order by decreasing input stride (runs then come in
 * increasing file order), merge neighbours contiguous on both sides. */
static void view_order(struct nd_view *v, const uint64_t *dims, const uint64_t *in,
		       const uint64_t *out, uint32_t m, uint32_t isz)
{
	uint32_t n = 0;
	for (uint32_t j = 0; j < m; j++) {
		if (dims[j] == 1)
			continue;
		uint32_t at = n++;
		while (at > 0 && v->in_st[at - 1] < in[j]) {
			v->dims[at] = v->dims[at - 1];
			v->in_st[at] = v->in_st[at - 1];
			v->out_st[at] = v->out_st[at - 1];
			at--;
		}
		v->dims[at] = dims[j];
		v->in_st[at] = in[j];
		v->out_st[at] = out[j];
	}
	uint32_t w = 0;
	for (uint32_t j = 1; j < n; j++) {
		if (v->in_st[w] == v->in_st[j] * v->dims[j] &&
		    v->out_st[w] == v->out_st[j] * v->dims[j]) {
			v->dims[w] *= v->dims[j];
			v->in_st[w] = v->in_st[j];
			v->out_st[w] = v->out_st[j];
		} else {
			w++;
			v->dims[w] = v->dims[j];
			v->in_st[w] = v->in_st[j];
			v->out_st[w] = v->out_st[j];
		}
	}
	n = n ? w + 1 : 0;
	v->run = isz;
	if (n > 0 && v->in_st[n - 1] == isz && v->out_st[n - 1] == isz) {
		v->run = v->dims[n - 1] * isz;
		n--;
	}
	v->ndim = n;
	v->extent = v->run;
	for (uint32_t j = 0; j < n; j++)
		v->extent += (v->dims[j] - 1) * v->in_st[j];
}

void npz_view_init(struct nd_view *v, const uint64_t *shape, uint32_t nd, bool fortran,
		   bool last, uint64_t k, uint32_t isz)
{
	memset(v, 0, sizeof(*v));
	uint64_t st[NPY_MAX_DIMS] = { 0 };
	uint64_t s = isz;
	if (fortran) {
		for (uint32_t i = 0; i < nd; i++) {
			st[i] = s;
			s *= shape[i];
		}
	} else {
		for (uint32_t i = nd; i-- > 0;) {
			st[i] = s;
			s *= shape[i];
		}
	}
	uint32_t a = last ? nd - 1 : 0;
	v->base = k * st[a];
	uint64_t dims[NPY_MAX_DIMS], in[NPY_MAX_DIMS], out[NPY_MAX_DIMS];
	uint32_t m = 0;
	for (uint32_t i = 0; i < nd; i++) {
		if (i == a)
			continue;
		dims[m] = shape[i];
		in[m] = st[i];
		m++;
	}
	s = isz;
	for (uint32_t j = m; j-- > 0;) {
		out[j] = s;
		s *= dims[j];
	}
	v->total = s;
	view_order(v, dims, in, out, m, isz);
}

bool npz_interleaved(const struct nd_view *v, uint64_t n, uint32_t isz)
{
	return n > 1 && v->ndim == 1 && v->run == isz && v->out_st[0] == isz &&
	       v->in_st[0] == n * isz && v->total == v->dims[0] * isz;
}

/* Advance g to its next run; false when the sample is complete. */
static bool gather_next(struct npz_gather *g)
{
	const struct nd_view *v = g->v;
	for (uint32_t j = v->ndim; j-- > 0;) {
		g->in += v->in_st[j];
		g->out += v->out_st[j];
		if (++g->idx[j] < v->dims[j])
			return true;
		g->in -= v->in_st[j] * v->dims[j];
		g->out -= v->out_st[j] * v->dims[j];
		g->idx[j] = 0;
	}
	return false;
}

void npz_gather_feed(struct npz_gather *g, const uint8_t *data, size_t len, uint64_t pos)
{
	const struct nd_view *v = g->v;
	if (pos + len <= g->hdr)
		return;
	if (pos < g->hdr) {
		data += g->hdr - pos;
		len -= (size_t)(g->hdr - pos);
		pos = 0;
	} else {
		pos -= g->hdr;
	}
	uint64_t end = pos + len;
	while (!g->finished) {
		uint64_t want = g->base + g->in + g->done;
		if (want >= end || want < pos)
			return;
		uint64_t n = MIN(v->run - g->done, end - want);
		memcpy(g->dst + g->out + g->done, data + (want - pos), n);
		g->done += n;
		if (g->done < v->run)
			return;
		g->done = 0;
		if (!gather_next(g))
			g->finished = true;
	}
}

/* One tile: nr rows from sp (row stride step) into column-major dp. */
static inline void tile_col(const uint8_t *sp, uint64_t step, uint64_t nr, uint8_t *dp,
			    uint32_t isz)
{
	switch (isz) {
	case 1:
		for (uint64_t r = 0; r < nr; r++, sp += step)
			dp[r] = *sp;
		break;
	case 2:
		for (uint64_t r = 0; r < nr; r++, sp += step)
			memcpy(dp + 2 * r, sp, 2);
		break;
	case 4:
		for (uint64_t r = 0; r < nr; r++, sp += step)
			memcpy(dp + 4 * r, sp, 4);
		break;
	default:
		for (uint64_t r = 0; r < nr; r++, sp += step)
			memcpy(dp + 8 * r, sp, 8);
		break;
	}
}

/* By tiles of about 16 KiB: the source tile stays in L1 while each
 * destination column of the tile is written as one sequential run. */
static void transpose_scalar(const uint8_t *src, uint64_t rows, uint64_t ncols, uint64_t c0,
			     uint64_t cc, uint8_t *const *dst, uint64_t r0, uint32_t isz)
{
	const uint64_t tc = MIN(cc, (uint64_t)64);
	const uint64_t tr = MAX((uint64_t)64, (16u << 10) / (MAX(tc, (uint64_t)1) * isz));
	const uint64_t step = ncols * isz;
	for (uint64_t ra = 0; ra < rows; ra += tr) {
		uint64_t nr = MIN(rows - ra, tr);
		for (uint64_t ca = 0; ca < cc; ca += tc) {
			uint64_t cb = MIN(cc, ca + tc);
			for (uint64_t c = ca; c < cb; c++)
				if (dst[c])
					tile_col(src + (ra * ncols + c0 + c) * isz, step, nr,
						 dst[c] + (r0 + ra) * isz, isz);
		}
	}
}

#ifdef __SSE2__
/* 16 x 16 bytes in registers: 16 rows of 16 bytes at sp (row stride step)
 * become 16 columns, column j's 16 bytes stored at dp[j] + off (dp[j] NULL:
 * not wanted). Four rounds of interleaving, each doubling the width of the
 * units moved: bytes of row pairs, then 2-byte, 4-byte and 8-byte units. */
static inline void t16x16(const uint8_t *sp, uint64_t step, uint8_t *const *dp, uint64_t off)
{
	__m128i a[16], b[16];
	for (int i = 0; i < 16; i++)
		a[i] = _mm_loadu_si128((const __m128i *)(const void *)(sp + (uint64_t)i * step));
	for (int i = 0; i < 8; i++) { /* b[2i + h]: rows 2i, 2i+1 of columns 8h.. */
		b[2 * i] = _mm_unpacklo_epi8(a[2 * i], a[2 * i + 1]);
		b[2 * i + 1] = _mm_unpackhi_epi8(a[2 * i], a[2 * i + 1]);
	}
	for (int j = 0; j < 4; j++) /* a[4j + q]: rows 4j.. of columns 4q.. */
		for (int h = 0; h < 2; h++) {
			a[4 * j + 2 * h] = _mm_unpacklo_epi16(b[4 * j + h], b[4 * j + 2 + h]);
			a[4 * j + 2 * h + 1] = _mm_unpackhi_epi16(b[4 * j + h], b[4 * j + 2 + h]);
		}
	for (int k = 0; k < 2; k++) /* b[8k + m]: rows 8k.. of columns 2m, 2m+1 */
		for (int q = 0; q < 4; q++) {
			b[8 * k + 2 * q] = _mm_unpacklo_epi32(a[8 * k + q], a[8 * k + 4 + q]);
			b[8 * k + 2 * q + 1] = _mm_unpackhi_epi32(a[8 * k + q], a[8 * k + 4 + q]);
		}
	for (int m = 0; m < 8; m++) { /* column 2m, then 2m+1: rows 0-15 */
		if (dp[2 * m])
			_mm_storeu_si128((__m128i *)(void *)(dp[2 * m] + off),
					 _mm_unpacklo_epi64(b[m], b[8 + m]));
		if (dp[2 * m + 1])
			_mm_storeu_si128((__m128i *)(void *)(dp[2 * m + 1] + off),
					 _mm_unpackhi_epi64(b[m], b[8 + m]));
	}
}
#endif

/* One-byte elements (DLIO's uint8 images) go 16 x 16 at a time through
 * registers: 16-byte loads and stores instead of one byte each (2 MiB of
 * DLIO's (64, 64, 512) npz array: 1.9 ms -> 0.5 ms on the development VM).
 * Column groups outer: each destination is written front to back.
 * The edges (fewer than 16 rows or columns) and wider elements are copied
 * element by element. */
void npz_transpose_cols(const uint8_t *src, uint64_t rows, uint64_t ncols, uint64_t c0,
			uint64_t cc, uint8_t *const *dst, uint64_t r0, uint32_t isz)
{
#ifdef __SSE2__
	if (isz == 1 && rows >= 16 && cc >= 16) {
		const uint64_t rf = rows & ~(uint64_t)15, cf = cc & ~(uint64_t)15;
		for (uint64_t ca = 0; ca < cf; ca += 16)
			for (uint64_t r = 0; r < rf; r += 16)
				t16x16(src + r * ncols + c0 + ca, ncols, dst + ca, r0 + r);
		if (rf < rows)
			transpose_scalar(src + rf * ncols, rows - rf, ncols, c0, cf, dst, r0 + rf, 1);
		if (cf < cc)
			transpose_scalar(src, rows, ncols, c0 + cf, cc - cf, dst + cf, r0, 1);
		return;
	}
#endif
	transpose_scalar(src, rows, ncols, c0, cc, dst, r0, isz);
}
