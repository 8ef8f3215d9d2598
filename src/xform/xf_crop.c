/* xf_crop.c — the random choices of the transform: a counter-based generator
 * keyed by (seed, epoch, sample id), the crop box (torchvision's
 * RandomResizedCrop.get_params, CenterCrop after Resize) and the flip.
 *
 * Pure functions of their arguments, no state: any thread, process or node
 * computes the same box. Linked into seerd and into libseer (the exported
 * seer_xform_* functions below), so a trainer can recompute any tensor.
 *
 * Draw layout of one sample's stream (docs/transform.md):
 *   index 0            flip: u < hflip
 *   index 1 + 2t       try t's area fraction  (t = 0..9)
 *   index 2 + 2t       try t's log aspect ratio
 *   index 21, 22, ...  the accepted try's top, then left (Lemire's unbiased
 *                      integer draw; a rejected draw moves to the next index) */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "seer.h"
#include "xform.h"
#include "xf_internal.h"
#include "../common/base.h"

#define GOLDEN 0x9e3779b97f4a7c15ull
#define XF_DOMAIN 0x7866726d5eed0001ull /* "xfrm": apart from the sampler's stream */
#define XF_TRIES 10
#define XF_IDX_FLIP 0u
#define XF_IDX_TRY 1u
#define XF_IDX_INT 21u

/* SplitMix64's output function (Steele, Lea, Flood 2014). */
static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t stream_key(uint64_t seed, uint64_t epoch, uint64_t id)
{
	uint64_t k = mix64(seed ^ XF_DOMAIN);
	k = mix64(k + (epoch + 1) * GOLDEN);
	return mix64(k + (id + 1) * GOLDEN);
}

static inline uint64_t draw_at(uint64_t key, uint32_t index)
{
	return mix64(key + ((uint64_t)index + 1) * GOLDEN);
}

uint64_t xf_draw(uint64_t seed, uint64_t epoch, uint64_t id, uint32_t index)
{
	return draw_at(stream_key(seed, epoch, id), index);
}

/* [0, 1) with 53 random bits. */
static inline double unit(uint64_t x)
{
	return (double)(x >> 11) * 0x1.0p-53;
}

/* torch's uniform_(a, b): a + (b - a) * u. */
static inline double uniform(double a, double b, uint64_t x)
{
	return a + (b - a) * unit(x);
}

/* Uniform in [0, range) without bias (Lemire 2019), consuming draws from
 * *idx onwards. */
static uint64_t below(uint64_t key, uint32_t *idx, uint64_t range)
{
	unsigned __int128 m = (unsigned __int128)draw_at(key, (*idx)++) * range;
	uint64_t lo = (uint64_t)m;
	if (lo < range) {
		uint64_t t = -range % range;
		while (lo < t) {
			m = (unsigned __int128)draw_at(key, (*idx)++) * range;
			lo = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}

/* Python's round() on a double: nearest, ties to even (the default FP
 * rounding mode, which nothing in seer changes). */
static inline double round_even(double x)
{
	return nearbyint(x);
}

static void crop_random(const struct xf_params *p, uint64_t key, uint32_t W, uint32_t H,
			struct xf_crop_box *o)
{
	double area = (double)((uint64_t)W * H);
	double lr0 = log(p->ratio[0]), lr1 = log(p->ratio[1]);
	for (uint32_t t = 0; t < XF_TRIES; t++) {
		double ta = area * uniform(p->scale[0], p->scale[1], draw_at(key, XF_IDX_TRY + 2 * t));
		double ar = exp(uniform(lr0, lr1, draw_at(key, XF_IDX_TRY + 2 * t + 1)));
		double w = round_even(sqrt(ta * ar));
		double h = round_even(sqrt(ta / ar));
		if (w > 0 && w <= W && h > 0 && h <= H) {
			uint32_t idx = XF_IDX_INT;
			o->height = (int32_t)h;
			o->width = (int32_t)w;
			o->top = (int32_t)below(key, &idx, (uint64_t)(H - (uint32_t)h) + 1);
			o->left = (int32_t)below(key, &idx, (uint64_t)(W - (uint32_t)w) + 1);
			o->tries = (int32_t)t + 1;
			return;
		}
	}
	/* fallback: central crop at the closest allowed ratio */
	double in_ratio = (double)W / (double)H;
	uint32_t w = W, h = H;
	if (in_ratio < p->ratio[0])
		h = (uint32_t)round_even((double)w / p->ratio[0]);
	else if (in_ratio > p->ratio[1])
		w = (uint32_t)round_even((double)h * p->ratio[1]);
	/* the rounding can reach 0 only for a ratio far outside the image's */
	h = h ? h : 1;
	w = w ? w : 1;
	o->height = (int32_t)h;
	o->width = (int32_t)w;
	o->top = (int32_t)((H - h) / 2);
	o->left = (int32_t)((W - w) / 2);
	o->tries = 0;
}

/* torchvision's Resize(int) size: shorter side to `resize`, the longer one
 * int(resize * long / short). */
void xf_resize_dims(uint32_t resize, uint32_t W, uint32_t H, uint32_t *rw, uint32_t *rh)
{
	if (resize == 0) {
		*rw = W;
		*rh = H;
		return;
	}
	uint32_t s = W <= H ? W : H, l = W <= H ? H : W;
	uint32_t nl = (uint32_t)((double)((uint64_t)resize * l) / (double)s);
	*rw = W <= H ? resize : nl;
	*rh = W <= H ? nl : resize;
}

/* CenterCrop's offset on one axis: zero padding split as torchvision's pad
 * (floor half first) when the crop is larger, else round((in - out) / 2). */
static int32_t center_offset(uint32_t in, uint32_t out)
{
	if (out > in)
		return -(int32_t)((out - in) / 2);
	return (int32_t)round_even((double)(in - out) / 2.0);
}

void xf_crop_params(const struct xf_params *p, uint64_t seed, uint64_t epoch, uint64_t id,
		    uint32_t width, uint32_t height, struct xf_crop_box *out)
{
	uint64_t key = stream_key(seed, epoch, id);
	memset(out, 0, sizeof(*out));
	out->rw = (int32_t)width;
	out->rh = (int32_t)height;
	out->flip = unit(draw_at(key, XF_IDX_FLIP)) < p->hflip;
	switch (p->crop) {
	case XF_CROP_RANDOM_RESIZED:
		crop_random(p, key, width, height, out);
		break;
	case XF_CROP_CENTER: {
		uint32_t rw, rh;
		xf_resize_dims(p->resize, width, height, &rw, &rh);
		out->rw = (int32_t)rw;
		out->rh = (int32_t)rh;
		out->height = (int32_t)p->out_h;
		out->width = (int32_t)p->out_w;
		out->top = center_offset(rh, p->out_h);
		out->left = center_offset(rw, p->out_w);
		break;
	}
	case XF_CROP_NONE:
	default:
		out->height = (int32_t)height;
		out->width = (int32_t)width;
		break;
	}
}

/* ---- public API ------------------------------------------------------------ */

struct seer_xform {
	struct xf_params p;
};

SEER_API seer_xform_t *seer_xform_new(const char *spec)
{
	struct xf_params p;
	char why[256];
	xf_params_default(&p);
	p.decode = XF_DECODE_IMAGE;
	if (spec && xf_params_parse(&p, spec, why, sizeof(why)) != 0) {
		err_set("transform spec: %s", why);
		return NULL;
	}
	if (xf_params_check(&p, why, sizeof(why)) != 0) {
		err_set("transform spec: %s", why);
		return NULL;
	}
	seer_xform_t *x = calloc(1, sizeof(*x));
	if (!x) {
		err_set("transform spec: out of memory");
		return NULL;
	}
	x->p = p;
	return x;
}

SEER_API void seer_xform_free(seer_xform_t *x)
{
	free(x);
}

SEER_API int seer_xform_crop(const seer_xform_t *x, uint64_t seed, uint64_t epoch, uint64_t id,
			     uint32_t width, uint32_t height, int32_t out[SEER_XFORM_CROP_FIELDS])
{
	if (!x || !out || width == 0 || height == 0 || width >= (1u << 30) ||
	    height >= (1u << 30)) {
		err_set("seer_xform_crop: need a transform and an image size in [1, 2^30)");
		return -EINVAL;
	}
	struct xf_crop_box b;
	xf_crop_params(&x->p, seed, epoch, id, width, height, &b);
	int32_t v[SEER_XFORM_CROP_FIELDS] = { b.top, b.left, b.height, b.width, b.flip,
					      b.rh, b.rw, b.tries };
	memcpy(out, v, sizeof(v));
	return 0;
}

SEER_API uint64_t seer_xform_draw(uint64_t seed, uint64_t epoch, uint64_t id, uint32_t index)
{
	return xf_draw(seed, epoch, id, index);
}

SEER_API int seer_xform_describe(const seer_xform_t *x, char *buf, size_t len)
{
	if (!x || !buf || len == 0)
		return -EINVAL;
	xf_params_format(&x->p, buf, len);
	return 0;
}
