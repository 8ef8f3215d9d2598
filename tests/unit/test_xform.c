/* xform, the pure parts: [transform] parsing and checks (also through
 * seerd's config table), the counter-based draws, crop boxes against
 * torchvision's rules, float16 rounding against the compiler's _Float16, and
 * the libseer exports. Decoding and tensors: test_xform_decode.c; against
 * PIL + torchvision themselves: xform_vs_torch.py. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "seer.h"
#include "../../src/config/config.h"
#include "../../src/xform/xform.h"

static char err[512];

static struct xf_params defaults(void)
{
	struct xf_params p;
	xf_params_default(&p);
	p.decode = XF_DECODE_IMAGE;
	return p;
}

/* ---- parameters --------------------------------------------------------------- */

Test(xform_params, defaults_are_torchvisions)
{
	struct xf_params p = defaults();
	cr_assert_eq(p.crop, XF_CROP_RANDOM_RESIZED);
	cr_assert_eq(p.out_h, 224);
	cr_assert_eq(p.out_w, 224);
	cr_assert_eq(p.scale[0], 0.08);
	cr_assert_eq(p.scale[1], 1.0);
	cr_assert_eq(p.ratio[0], 3.0 / 4.0);
	cr_assert_eq(p.ratio[1], 4.0 / 3.0);
	cr_assert_eq(p.resize, 256);
	cr_assert_eq(p.hflip, 0.5);
	cr_assert(p.normalize);
	cr_assert_eq(p.mean[0], 0.485f);
	cr_assert_eq(p.std[2], 0.225f);
	cr_assert_eq(p.output, XF_OUT_FLOAT32_CHW);
	cr_assert_eq(p.cache, XF_CACHE_ENCODED);
	cr_assert_eq(xf_params_check(&p, err, sizeof(err)), 0, "%s", err);
}

Test(xform_params, every_key_parses)
{
	struct xf_params p = defaults();
	const char *spec = "decode=image crop=center size=192x160 scale=0.25,0.75 ratio=0.5,2 "
			   "resize=200 hflip=0.25; normalize=0.5,0.25,0.125/0.5,1,2\n"
			   "output=float16_chw threads=3 transform.cache=decoded cache_size=320";
	cr_assert_eq(xf_params_parse(&p, spec, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(p.crop, XF_CROP_CENTER);
	cr_assert_eq(p.out_h, 192);
	cr_assert_eq(p.out_w, 160);
	cr_assert_eq(p.scale[0], 0.25);
	cr_assert_eq(p.ratio[1], 2.0);
	cr_assert_eq(p.resize, 200);
	cr_assert_eq(p.hflip, 0.25);
	cr_assert_eq(p.mean[2], 0.125f);
	cr_assert_eq(p.std[2], 2.0f);
	cr_assert_eq(p.output, XF_OUT_FLOAT16_CHW);
	cr_assert_eq(p.threads, 3);
	cr_assert_eq(p.cache, XF_CACHE_DECODED);
	cr_assert_eq(p.cache_size, 320);
	cr_assert_eq(xf_params_set(&p, "normalize", "none", err, sizeof(err)), 0);
	cr_assert(!p.normalize);
	cr_assert_eq(xf_params_set(&p, "size", "7", err, sizeof(err)), 0);
	cr_assert(p.out_h == 7 && p.out_w == 7);
}

struct bad {
	const char *key, *value, *says;
};

Test(xform_params, bad_values_are_named)
{
	static const struct bad v[] = {
		{ "decode", "jpeg", "decode 'jpeg' is not one of: none, image" },
		{ "crop", "random", "not one of: none, random_resized, center" },
		{ "size", "0", "size '0': expected N or HxW" },
		{ "size", "224x", "size '224x'" },
		{ "size", "x224", "size 'x224'" },
		{ "size", "16385", "16384" },
		{ "size", "-3", "size '-3'" },
		{ "size", "2x3x4", "size '2x3x4'" },
		{ "scale", "1.0,0.08", "need 0 <= min <= max" },
		{ "scale", "0.5", "expected two numbers min,max" },
		{ "scale", "a,b", "expected two numbers" },
		{ "scale", "0.1,nan", "expected two numbers" },
		{ "ratio", "0,1", "ratio '0,1': min must be > 0" },
		{ "resize", "-1", "resize '-1': expected a whole number in [0, 16384]" },
		{ "hflip", "1.5", "hflip '1.5': expected a probability in [0, 1]" },
		{ "normalize", "imagenet2", "expected none, imagenet or m0,m1,m2/s0,s1,s2" },
		{ "normalize", "1,2/3,4,5", "normalize '1,2/3,4,5'" },
		{ "normalize", "0,0,0/1,0,1", "std 1 must be > 0" },
		{ "normalize", "0,0,0/1,1,1,1", "normalize '0,0,0/1,1,1,1'" },
		{ "output", "float64_chw", "uint8_hwc, float16_chw, float32_chw" },
		{ "threads", "2000", "threads '2000'" },
		{ "cache", "ram", "cache 'ram' is not one of: encoded, decoded" },
		{ "cache_size", "1e3", "cache_size '1e3'" },
		{ "colour", "rgb", "unknown transform key 'colour'" },
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		struct xf_params p = defaults(), before = p;
		err[0] = '\0';
		cr_assert_eq(xf_params_set(&p, v[i].key, v[i].value, err, sizeof(err)), -EINVAL,
			     "%s=%s accepted", v[i].key, v[i].value);
		cr_assert(strstr(err, v[i].says), "%s=%s: '%s' lacks '%s'", v[i].key, v[i].value,
			  err, v[i].says);
		cr_assert_eq(memcmp(&p, &before, sizeof(p)), 0, "%s: changed on failure", v[i].key);
	}
	struct xf_params p = defaults();
	cr_assert_eq(xf_params_parse(&p, "size=224 crop", err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "'crop': expected key=value"), "%s", err);
}

Test(xform_params, cross_key_rules)
{
	struct xf_params p = defaults();
	p.output = XF_OUT_UINT8_HWC;
	cr_assert_eq(xf_params_check(&p, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "normalize needs a float output"), "%s", err);
	p.normalize = false;
	cr_assert_eq(xf_params_check(&p, err, sizeof(err)), 0, "%s", err);
	p = defaults();
	p.decode = XF_DECODE_NONE;
	p.cache = XF_CACHE_DECODED;
	cr_assert_eq(xf_params_check(&p, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "cache = decoded needs decode = image"), "%s", err);
}

Test(xform_params, format_reads_back)
{
	static const char *specs[] = {
		"", "crop=center size=3x5 resize=0 normalize=none output=uint8_hwc hflip=0",
		"scale=0.1,0.30000000000000004 ratio=0.1,10 normalize=0.1,0.2,0.3/0.7,0.8,0.9 "
		"output=float16_chw cache=decoded cache_size=160 threads=7",
	};
	for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
		struct xf_params a = defaults(), b;
		cr_assert_eq(xf_params_parse(&a, specs[i], err, sizeof(err)), 0, "%s", err);
		char text[1024];
		xf_params_format(&a, text, sizeof(text));
		xf_params_default(&b);
		cr_assert_eq(xf_params_parse(&b, text, err, sizeof(err)), 0, "%s: %s", text, err);
		cr_assert_eq(memcmp(&a, &b, sizeof(a)), 0, "'%s' read back differently", text);
	}
}

Test(xform_params, config_table_section)
{
	struct seer_config c;
	struct xf_params p;
	setenv("HOME", "/tmp", 1);
	cr_assert_eq(config_init(&c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config_set(&c, "dataset.path=/tmp", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config_finish(&c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config_transform(&c, &p, err, sizeof(err)), 0, "%s", err);
	struct xf_params d;
	xf_params_default(&d);
	cr_assert_eq(memcmp(&p, &d, sizeof(p)), 0, "config defaults differ from the module's");
	const char *sets[] = { "transform.decode=image", "transform.crop=center",
			       "transform.size=160x128", "transform.resize=180",
			       "transform.hflip=0", "transform.output=float16_chw",
			       "transform.cache=decoded", "transform.cache_size=200" };
	for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++)
		cr_assert_eq(config_set(&c, sets[i], err, sizeof(err)), 0, "%s: %s", sets[i], err);
	cr_assert_eq(config_finish(&c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config_transform(&c, &p, err, sizeof(err)), 0, "%s", err);
	cr_assert(p.decode == XF_DECODE_IMAGE && p.crop == XF_CROP_CENTER && p.out_h == 160 &&
		  p.out_w == 128 && p.resize == 180 && p.hflip == 0 &&
		  p.output == XF_OUT_FLOAT16_CHW && p.cache_size == 200);
	cr_assert_eq(config_set(&c, "transform.output=uint8_hwc", err, sizeof(err)), 0);
	cr_assert_eq(config_finish(&c, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "[transform] normalize needs a float output"), "%s", err);
	cr_assert_eq(config_set(&c, "transform.normalize=none", err, sizeof(err)), 0);
	cr_assert_eq(config_set(&c, "transform.scale=2,1", err, sizeof(err)), 0);
	cr_assert_eq(config_finish(&c, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "[transform] scale: scale '2,1'"), "%s", err);
	cr_assert_eq(config_set(&c, "transform.output=png", err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "uint8_hwc, float16_chw, float32_chw"), "%s", err);
	config_free(&c);
}

/* ---- draws --------------------------------------------------------------------- */

/* docs/transform.md's formula, written out again. */
static uint64_t doc_mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t doc_draw(uint64_t seed, uint64_t epoch, uint64_t id, uint32_t i)
{
	const uint64_t g = 0x9e3779b97f4a7c15ull;
	uint64_t k = doc_mix(seed ^ 0x7866726d5eed0001ull);
	k = doc_mix(k + (epoch + 1) * g);
	k = doc_mix(k + (id + 1) * g);
	return doc_mix(k + ((uint64_t)i + 1) * g);
}

Test(xform_rng, draws_follow_the_documented_formula)
{
	uint64_t seeds[] = { 0, 1, 42, UINT64_MAX };
	for (size_t s = 0; s < 4; s++)
		for (uint64_t e = 0; e < 5; e++)
			for (uint64_t id = 0; id < 50; id += 7)
				for (uint32_t i = 0; i < 30; i++) {
					uint64_t v = xf_draw(seeds[s], e, id, i);
					cr_assert_eq(v, doc_draw(seeds[s], e, id, i));
					cr_assert_eq(v, seer_xform_draw(seeds[s], e, id, i));
				}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

Test(xform_rng, streams_do_not_collide)
{
	/* neighbouring seeds, epochs, ids and indices: all distinct draws */
	size_t n = 8 * 8 * 64 * 16, k = 0;
	uint64_t *v = malloc(n * sizeof(*v));
	double sum = 0;
	for (uint64_t s = 0; s < 8; s++)
		for (uint64_t e = 0; e < 8; e++)
			for (uint64_t id = 0; id < 64; id++)
				for (uint32_t i = 0; i < 16; i++) {
					v[k] = xf_draw(s, e, id, i);
					sum += (double)(v[k] >> 11) * 0x1.0p-53;
					k++;
				}
	qsort(v, n, sizeof(*v), cmp_u64);
	for (size_t i = 1; i < n; i++)
		cr_assert_neq(v[i], v[i - 1], "collision at %zu", i);
	cr_assert(fabs(sum / (double)n - 0.5) < 0.005, "mean %f", sum / (double)n);
	free(v);
}

/* ---- crop boxes ----------------------------------------------------------------- */

Test(xform_crop, random_boxes_lie_in_the_image)
{
	struct xf_params p = defaults();
	uint32_t sizes[][2] = { { 500, 375 }, { 375, 500 }, { 1, 1 }, { 2, 1000 }, { 4000, 3 },
				{ 224, 224 }, { 7, 5 }, { 1u << 20, 1u << 9 } };
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
		for (uint64_t id = 0; id < 3000; id++) {
			struct xf_crop_box b;
			uint32_t W = sizes[s][0], H = sizes[s][1];
			xf_crop_params(&p, 5, id % 7, id, W, H, &b);
			cr_assert(b.width > 0 && b.height > 0 && b.left >= 0 && b.top >= 0 &&
				  (uint32_t)(b.left + b.width) <= W && (uint32_t)(b.top + b.height) <= H,
				  "%ux%u id %llu: %d,%d %dx%d", W, H, (unsigned long long)id, b.top,
				  b.left, b.height, b.width);
			cr_assert(b.tries >= 0 && b.tries <= 10);
			cr_assert(b.flip == 0 || b.flip == 1);
		}
}

Test(xform_crop, pure_function_of_seed_epoch_id)
{
	struct xf_params p = defaults();
	int same_epoch = 0, same_seed = 0;
	for (uint64_t id = 0; id < 1000; id++) {
		struct xf_crop_box a, b, c, d;
		xf_crop_params(&p, 9, 3, id, 500, 375, &a);
		xf_crop_params(&p, 9, 3, id, 500, 375, &b);
		cr_assert_eq(memcmp(&a, &b, sizeof(a)), 0);
		xf_crop_params(&p, 9, 4, id, 500, 375, &c);
		xf_crop_params(&p, 10, 3, id, 500, 375, &d);
		same_epoch += memcmp(&a, &c, sizeof(a)) == 0;
		same_seed += memcmp(&a, &d, sizeof(a)) == 0;
	}
	cr_assert(same_epoch < 5 && same_seed < 5, "%d %d identical boxes", same_epoch, same_seed);
}

Test(xform_crop, fallback_when_every_try_fails)
{
	struct xf_params p = defaults();
	/* 1000x10: every try is too tall -> central crop at the widest ratio:
	 * h = 10, w = round(10 * 4/3) = 13, i = 0, j = (1000 - 13) // 2 */
	for (uint64_t id = 0; id < 200; id++) {
		struct xf_crop_box b;
		xf_crop_params(&p, 1, 0, id, 1000, 10, &b);
		cr_assert_eq(b.tries, 0);
		cr_assert(b.top == 0 && b.left == 493 && b.height == 10 && b.width == 13,
			  "%d,%d %dx%d", b.top, b.left, b.height, b.width);
		/* 10x1000: w = 10, h = round(10 / 0.75) = 13, i = (1000 - 13) // 2 */
		xf_crop_params(&p, 1, 0, id, 10, 1000, &b);
		cr_assert(b.tries == 0 && b.top == 493 && b.left == 0 && b.height == 13 &&
			  b.width == 10);
	}
	/* areas larger than the image: whole image when its ratio is allowed */
	cr_assert_eq(xf_params_set(&p, "scale", "1.5,2", err, sizeof(err)), 0);
	struct xf_crop_box b;
	xf_crop_params(&p, 1, 0, 3, 400, 300, &b);
	cr_assert(b.tries == 0 && b.top == 0 && b.left == 0 && b.height == 300 && b.width == 400);
}

Test(xform_crop, center_crop_follows_resize_and_centercrop)
{
	struct xf_params p = defaults();
	p.crop = XF_CROP_CENTER;
	struct xf_crop_box b;
	/* Resize(256): 500x375 -> int(256 * 500 / 375) = 341 x 256;
	 * CenterCrop(224): top round(16.0) = 16, left round(58.5) = 58 (ties to even) */
	xf_crop_params(&p, 0, 0, 0, 500, 375, &b);
	cr_assert(b.rw == 341 && b.rh == 256 && b.top == 16 && b.left == 58 && b.height == 224 &&
		  b.width == 224, "%dx%d %d,%d", b.rw, b.rh, b.top, b.left);
	xf_crop_params(&p, 0, 0, 0, 375, 501, &b);
	cr_assert(b.rw == 256 && b.rh == 342 && b.top == 59 && b.left == 16);
	/* larger crop than image: CenterCrop pads (floor half on top/left) */
	cr_assert_eq(xf_params_parse(&p, "resize=0 size=301x400", err, sizeof(err)), 0);
	xf_crop_params(&p, 0, 0, 0, 200, 100, &b);
	cr_assert(b.rw == 200 && b.rh == 100 && b.top == -100 && b.left == -100, "%d %d", b.top,
		  b.left);
	/* crop = none: the whole image */
	p.crop = XF_CROP_NONE;
	xf_crop_params(&p, 0, 0, 0, 200, 100, &b);
	cr_assert(b.top == 0 && b.left == 0 && b.height == 100 && b.width == 200);
}

Test(xform_crop, flip_probability)
{
	struct xf_params p = defaults();
	int flips[3] = { 0, 0, 0 };
	double probs[3] = { 0.0, 0.5, 1.0 };
	for (int k = 0; k < 3; k++) {
		p.hflip = probs[k];
		for (uint64_t id = 0; id < 20000; id++) {
			struct xf_crop_box b;
			xf_crop_params(&p, 77, 1, id, 64, 48, &b);
			flips[k] += b.flip;
		}
	}
	cr_assert_eq(flips[0], 0);
	cr_assert(flips[1] > 9700 && flips[1] < 10300, "%d", flips[1]);
	cr_assert_eq(flips[2], 20000);
}

Test(xform_crop, libseer_exports)
{
	seer_xform_t *x = seer_xform_new("crop=center size=224 resize=256");
	cr_assert_not_null(x, "%s", seer_errmsg());
	int32_t o[SEER_XFORM_CROP_FIELDS];
	cr_assert_eq(seer_xform_crop(x, 1, 2, 3, 500, 375, o), 0);
	cr_assert(o[0] == 16 && o[1] == 58 && o[2] == 224 && o[3] == 224 && o[5] == 256 &&
		  o[6] == 341);
	cr_assert_eq(seer_xform_crop(x, 1, 2, 3, 0, 375, o), -EINVAL);
	char d[512];
	cr_assert_eq(seer_xform_describe(x, d, sizeof(d)), 0);
	cr_assert(strstr(d, "crop=center") && strstr(d, "decode=image"), "%s", d);
	seer_xform_free(x);
	cr_assert_null(seer_xform_new("size=0"));
	cr_assert(strstr(seer_errmsg(), "size '0'"), "%s", seer_errmsg());
	cr_assert_null(seer_xform_new("output=uint8_hwc"));
	cr_assert(strstr(seer_errmsg(), "normalize needs a float output"), "%s", seer_errmsg());
}

/* ---- float16 -------------------------------------------------------------------- */

static uint16_t ref_half(float f)
{
	_Float16 h = (_Float16)f;
	uint16_t u;
	memcpy(&u, &h, sizeof(u));
	return u;
}

static void check_half(float f)
{
	uint16_t got = xf_f32_to_f16(f), want = ref_half(f);
	if (isnan(f))
		cr_assert((got & 0x7c00) == 0x7c00 && (got & 0x3ff), "NaN -> %04x", got);
	else
		cr_assert_eq(got, want, "%a -> %04x, _Float16 gives %04x", (double)f, got, want);
}

Test(xform_f16, rounds_like_float16)
{
	/* every half value, and the points between them (ties, just above,
	 * just below), over the whole float range */
	static const uint32_t lows[] = { 0, 1, 0xfff, 0x1000, 0x1001, 0x1fff };
	for (uint32_t hi = 0; hi < (1u << 19); hi++)
		for (size_t l = 0; l < sizeof(lows) / sizeof(lows[0]); l++) {
			uint32_t bits = hi << 13 | lows[l];
			float f;
			memcpy(&f, &bits, sizeof(f));
			check_half(f);
		}
	uint32_t x = 12345;
	for (int i = 0; i < 1000000; i++) {
		x = x * 1664525u + 1013904223u;
		float f;
		memcpy(&f, &x, sizeof(f));
		check_half(f);
	}
	float special[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65519.99f, 65520.0f,
			    0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1p-14f, 0x1.ffcp-15f };
	for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
		check_half(special[i]);
}
