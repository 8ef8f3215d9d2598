/* xf_config.c — the [transform] keys: defaults, one pure parser per value,
 * the cross-key checks, and the text form of a parameter set.
 *
 * Pure functions over caller memory; no allocation, no global state (used by
 * seerd's config table and by libseer's seer_xform_new). Every failure is
 * -EINVAL with a sentence in err naming the key, the value and what is
 * accepted. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xform.h"
#include "xf_internal.h"
#include "../common/base.h"

#define XF_MAX_OUT 16384u

static const float imagenet_mean[3] = { 0.485f, 0.456f, 0.406f };
static const float imagenet_std[3] = { 0.229f, 0.224f, 0.225f };

void xf_params_default(struct xf_params *p)
{
	memset(p, 0, sizeof(*p));
	p->decode = XF_DECODE_NONE;
	p->crop = XF_CROP_RANDOM_RESIZED;
	p->out_h = p->out_w = 224;
	p->scale[0] = 0.08;
	p->scale[1] = 1.0;
	p->ratio[0] = 3.0 / 4.0;
	p->ratio[1] = 4.0 / 3.0;
	p->resize = 256;
	p->hflip = 0.5;
	p->normalize = true;
	memcpy(p->mean, imagenet_mean, sizeof(p->mean));
	memcpy(p->std, imagenet_std, sizeof(p->std));
	p->output = XF_OUT_FLOAT32_CHW;
	p->cache = XF_CACHE_ENCODED;
}

/* Index of s in names[] (NULL-terminated), or -1. */
static int choice(const char *s, const char *const *names)
{
	for (int i = 0; names[i]; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -1;
}

static int bad_choice(const char *key, const char *s, const char *list, char *err, size_t errlen)
{
	return xf_fail(err, errlen, -EINVAL, "%s '%s' is not one of: %s", key, s, list);
}

static const char *const decode_names[] = { "none", "image", NULL };
static const char *const crop_names[] = { "none", "random_resized", "center", NULL };
static const char *const output_names[] = { "uint8_hwc", "float16_chw", "float32_chw", NULL };
static const char *const cache_names[] = { "encoded", "decoded", NULL };

int xf_parse_decode(const char *s, enum xf_decode *out, char *err, size_t errlen)
{
	int i = choice(s, decode_names);
	if (i < 0)
		return bad_choice("decode", s, "none, image", err, errlen);
	*out = (enum xf_decode)i;
	return 0;
}

int xf_parse_crop(const char *s, enum xf_crop *out, char *err, size_t errlen)
{
	int i = choice(s, crop_names);
	if (i < 0)
		return bad_choice("crop", s, "none, random_resized, center", err, errlen);
	*out = (enum xf_crop)i;
	return 0;
}

int xf_parse_output(const char *s, enum xf_output *out, char *err, size_t errlen)
{
	int i = choice(s, output_names);
	if (i < 0)
		return bad_choice("output", s, "uint8_hwc, float16_chw, float32_chw", err, errlen);
	*out = (enum xf_output)i;
	return 0;
}

int xf_parse_cache(const char *s, enum xf_cache *out, char *err, size_t errlen)
{
	int i = choice(s, cache_names);
	if (i < 0)
		return bad_choice("cache", s, "encoded, decoded", err, errlen);
	*out = (enum xf_cache)i;
	return 0;
}

/* A whole number in [lo, hi]. */
static int parse_dim(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint64_t v;
	if (!*s || !isdigit((unsigned char)*s) || parse_u64(s, &v) != 0 || v < lo || v > hi)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

int xf_parse_size(const char *s, uint32_t *h, uint32_t *w, char *err, size_t errlen)
{
	char a[32];
	const char *x = strchr(s, 'x');
	size_t n = x ? (size_t)(x - s) : strlen(s);
	uint32_t hh, ww;
	if (n == 0 || n >= sizeof(a))
		goto bad;
	memcpy(a, s, n);
	a[n] = '\0';
	if (parse_dim(a, 1, XF_MAX_OUT, &hh) != 0)
		goto bad;
	ww = hh;
	if (x && parse_dim(x + 1, 1, XF_MAX_OUT, &ww) != 0)
		goto bad;
	*h = hh;
	*w = ww;
	return 0;
bad:
	return xf_fail(err, errlen, -EINVAL,
		       "size '%s': expected N or HxW (height x width), 1 <= N <= %u", s,
		       XF_MAX_OUT);
}

int xf_parse_range(const char *key, const char *s, double out[2], char *err, size_t errlen)
{
	char a[64];
	const char *comma = strchr(s, ',');
	size_t n = comma ? (size_t)(comma - s) : 0;
	double lo, hi;
	if (!comma || n == 0 || n >= sizeof(a))
		goto bad;
	memcpy(a, s, n);
	a[n] = '\0';
	if (parse_double(a, &lo) != 0 || parse_double(comma + 1, &hi) != 0)
		goto bad;
	if (!(lo <= hi) || !(hi > 0) || lo < 0)
		return xf_fail(err, errlen, -EINVAL,
			       "%s '%s': need 0 <= min <= max and max > 0 (min,max)", key, s);
	out[0] = lo;
	out[1] = hi;
	return 0;
bad:
	return xf_fail(err, errlen, -EINVAL, "%s '%s': expected two numbers min,max", key, s);
}

/* "a,b,c" into v[3]. */
static int parse_triple(const char *s, size_t n, float v[3])
{
	char buf[128];
	if (n == 0 || n >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, n);
	buf[n] = '\0';
	char *p = buf;
	for (int i = 0; i < 3; i++) {
		char *c = strchr(p, ',');
		if ((i < 2) != (c != NULL))
			return -EINVAL;
		if (c)
			*c = '\0';
		double d;
		if (parse_double(p, &d) != 0 || fabs(d) > 1e6)
			return -EINVAL;
		v[i] = (float)d;
		p = c + 1;
	}
	return 0;
}

int xf_parse_normalize(const char *s, bool *on, float mean[3], float std[3], char *err,
		       size_t errlen)
{
	if (strcmp(s, "none") == 0) {
		*on = false;
		return 0;
	}
	if (strcmp(s, "imagenet") == 0) {
		*on = true;
		memcpy(mean, imagenet_mean, sizeof(imagenet_mean));
		memcpy(std, imagenet_std, sizeof(imagenet_std));
		return 0;
	}
	float m[3], d[3];
	const char *slash = strchr(s, '/');
	if (!slash || parse_triple(s, (size_t)(slash - s), m) != 0 ||
	    parse_triple(slash + 1, strlen(slash + 1), d) != 0)
		return xf_fail(err, errlen, -EINVAL,
			       "normalize '%s': expected none, imagenet or m0,m1,m2/s0,s1,s2 "
			       "(per-channel mean/std of pixels scaled to [0, 1])", s);
	for (int i = 0; i < 3; i++)
		if (!(d[i] > 0))
			return xf_fail(err, errlen, -EINVAL, "normalize '%s': std %d must be > 0",
				       s, i);
	*on = true;
	memcpy(mean, m, sizeof(m));
	memcpy(std, d, sizeof(d));
	return 0;
}

static int set_uint(const char *key, const char *v, uint32_t hi, uint32_t *out, char *err,
		    size_t errlen)
{
	if (parse_dim(v, 0, hi, out) != 0)
		return xf_fail(err, errlen, -EINVAL, "%s '%s': expected a whole number in [0, %u]",
			       key, v, hi);
	return 0;
}

int xf_params_set(struct xf_params *p, const char *key, const char *value, char *err,
		  size_t errlen)
{
	if (strncmp(key, "transform.", 10) == 0)
		key += 10;
	if (strcmp(key, "decode") == 0)
		return xf_parse_decode(value, &p->decode, err, errlen);
	if (strcmp(key, "crop") == 0)
		return xf_parse_crop(value, &p->crop, err, errlen);
	if (strcmp(key, "size") == 0)
		return xf_parse_size(value, &p->out_h, &p->out_w, err, errlen);
	if (strcmp(key, "scale") == 0)
		return xf_parse_range("scale", value, p->scale, err, errlen);
	if (strcmp(key, "ratio") == 0) {
		double r[2];
		int rc = xf_parse_range("ratio", value, r, err, errlen);
		if (rc == 0 && !(r[0] > 0))
			return xf_fail(err, errlen, -EINVAL, "ratio '%s': min must be > 0", value);
		if (rc == 0)
			memcpy(p->ratio, r, sizeof(r));
		return rc;
	}
	if (strcmp(key, "resize") == 0)
		return set_uint("resize", value, XF_MAX_OUT, &p->resize, err, errlen);
	if (strcmp(key, "hflip") == 0) {
		double d;
		if (parse_double(value, &d) != 0 || d < 0 || d > 1)
			return xf_fail(err, errlen, -EINVAL,
				       "hflip '%s': expected a probability in [0, 1]", value);
		p->hflip = d;
		return 0;
	}
	if (strcmp(key, "normalize") == 0)
		return xf_parse_normalize(value, &p->normalize, p->mean, p->std, err, errlen);
	if (strcmp(key, "output") == 0)
		return xf_parse_output(value, &p->output, err, errlen);
	if (strcmp(key, "threads") == 0)
		return set_uint("threads", value, 1024, &p->threads, err, errlen);
	if (strcmp(key, "cache") == 0)
		return xf_parse_cache(value, &p->cache, err, errlen);
	if (strcmp(key, "cache_size") == 0)
		return set_uint("cache_size", value, XF_MAX_OUT, &p->cache_size, err, errlen);
	return xf_fail(err, errlen, -EINVAL,
		       "unknown transform key '%s' (decode, crop, size, scale, ratio, resize, "
		       "hflip, normalize, output, threads, cache, cache_size)", key);
}

static bool is_sep(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ';';
}

int xf_params_parse(struct xf_params *p, const char *spec, char *err, size_t errlen)
{
	const char *s = spec;
	while (*s) {
		while (*s && is_sep(*s))
			s++;
		if (!*s)
			break;
		const char *e = s;
		while (*e && !is_sep(*e))
			e++;
		char item[256];
		size_t n = (size_t)(e - s);
		if (n >= sizeof(item))
			return xf_fail(err, errlen, -EINVAL, "item '%.40s...' too long", s);
		memcpy(item, s, n);
		item[n] = '\0';
		char *eq = strchr(item, '=');
		if (!eq || eq == item)
			return xf_fail(err, errlen, -EINVAL, "'%s': expected key=value", item);
		*eq = '\0';
		int rc = xf_params_set(p, item, eq + 1, err, errlen);
		if (rc)
			return rc;
		s = e;
	}
	return 0;
}

int xf_params_check(const struct xf_params *p, char *err, size_t errlen)
{
	if (p->decode == XF_DECODE_NONE) {
		if (p->cache == XF_CACHE_DECODED)
			return xf_fail(err, errlen, -EINVAL,
				       "cache = decoded needs decode = image");
		return 0;
	}
	if (p->normalize && p->output == XF_OUT_UINT8_HWC)
		return xf_fail(err, errlen, -EINVAL,
			       "normalize needs a float output (float16_chw or float32_chw): "
			       "uint8_hwc delivers raw pixels; set normalize = none");
	if (p->out_h == 0 || p->out_w == 0 || p->out_h > XF_MAX_OUT || p->out_w > XF_MAX_OUT)
		return xf_fail(err, errlen, -EINVAL, "size %ux%u out of range", p->out_h, p->out_w);
	if (!(p->ratio[0] > 0 && p->ratio[0] <= p->ratio[1] && p->scale[0] >= 0 &&
	      p->scale[0] <= p->scale[1] && p->scale[1] > 0))
		return xf_fail(err, errlen, -EINVAL, "scale/ratio: need 0 <= min <= max");
	for (int i = 0; i < 3; i++)
		if (p->normalize && !(p->std[i] > 0))
			return xf_fail(err, errlen, -EINVAL, "normalize: std must be > 0");
	return 0;
}

static int fmt_num(char *b, size_t len, double d)
{
	/* the shortest text that reads back as the same double */
	int n = 0;
	for (int prec = 6; prec <= 17; prec++) {
		n = snprintf(b, len, "%.*g", prec, d);
		if (strtod(b, NULL) == d)
			break;
	}
	return n;
}

static void fmt_float(char *b, size_t len, float f)
{
	for (int prec = 6; prec <= 9; prec++) {
		snprintf(b, len, "%.*g", prec, (double)f);
		if ((float)strtod(b, NULL) == f)
			break;
	}
}

void xf_params_format(const struct xf_params *p, char *buf, size_t len)
{
	char sc[2][32], ra[2][32], norm[256] = "none";
	fmt_num(sc[0], sizeof(sc[0]), p->scale[0]);
	fmt_num(sc[1], sizeof(sc[1]), p->scale[1]);
	fmt_num(ra[0], sizeof(ra[0]), p->ratio[0]);
	fmt_num(ra[1], sizeof(ra[1]), p->ratio[1]);
	if (p->normalize) {
		char v[6][32];
		for (int i = 0; i < 3; i++) {
			fmt_float(v[i], sizeof(v[i]), p->mean[i]);
			fmt_float(v[3 + i], sizeof(v[3 + i]), p->std[i]);
		}
		snprintf(norm, sizeof(norm), "%s,%s,%s/%s,%s,%s", v[0], v[1], v[2], v[3], v[4], v[5]);
	}
	char hf[32];
	fmt_num(hf, sizeof(hf), p->hflip);
	snprintf(buf, len,
		 "decode=%s crop=%s size=%ux%u scale=%s,%s ratio=%s,%s resize=%u hflip=%s "
		 "normalize=%s output=%s threads=%u cache=%s cache_size=%u",
		 decode_names[p->decode], crop_names[p->crop], p->out_h, p->out_w, sc[0], sc[1],
		 ra[0], ra[1], p->resize, hf, norm, output_names[p->output], p->threads,
		 cache_names[p->cache], p->cache_size);
}
