/* xform — the image transform stage: encoded sample bytes (JPEG, PNG) in,
 * a fixed-shape tensor out, every random choice a pure function of
 * (job seed, epoch, sample id).
 *
 * Stages, one file each:
 *   xf_config.c    the [transform] keys: parsing and checks (pure)
 *   xf_crop.c      counter-based RNG, crop box and flip (pure; in libseer too)
 *   xf_jpeg.c      JPEG decode of a region at a DCT scale (libjpeg-turbo)
 *   xf_png.c       PNG decode of a region (libpng)
 *   xf_resample.c  PIL-compatible antialiased bilinear resize, normalise,
 *                  lay out, float16
 *   xf_sample.c    one sample end to end, the batch writer, decoded blobs
 *
 * Threads: a struct xf_params is read-only once checked and may be shared by
 * any number of threads. A struct xf_scratch belongs to one thread at a time
 * (one per transform worker); it keeps the decoder objects and buffers warm
 * between samples. Nothing else is shared: the output of a sample depends
 * only on (params, seed, epoch, id, input bytes), never on the thread, the
 * order of calls or the scratch's history.
 *
 * Errors: functions return 0 or a negative errno and write a one-line reason
 * into err (naming what is wrong with the input: "truncated JPEG: ...",
 * "not an image: starts with 50 4b 03 04 (zip)"); the caller adds the file
 * name. Bad input never crashes, hangs, or yields a tensor silently. */
#ifndef SEER_XFORM_H
#define SEER_XFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- parameters: the [transform] section ------------------------------- */

enum xf_decode { XF_DECODE_NONE = 0, XF_DECODE_IMAGE };
enum xf_crop { XF_CROP_NONE = 0, XF_CROP_RANDOM_RESIZED, XF_CROP_CENTER };
enum xf_output { XF_OUT_UINT8_HWC = 0, XF_OUT_FLOAT16_CHW, XF_OUT_FLOAT32_CHW };
enum xf_cache { XF_CACHE_ENCODED = 0, XF_CACHE_DECODED };
enum xf_jpeg_path { XF_JPEG_PARTIAL = 0, XF_JPEG_TURBO_FULL };

/* JPEG DCT scales M/8 the decoder may pick from (bit M). Default 1/8, 1/4,
 * 1/2 (and 8/8): libjpeg-turbo has SIMD IDCTs for these; 3/8 and 5/8..7/8
 * use plain C kernels that make the whole pipeline slower than decoding at
 * full size (measured: docs/transform.md). */
#define XF_DCT_SCALES_ALL 0x1feu
#define XF_DCT_SCALES_DEFAULT 0x116u

struct xf_params {
	enum xf_decode decode;   /* decode = none | image */
	enum xf_crop crop;       /* crop = none | random_resized | center */
	uint32_t out_h, out_w;   /* size = 224 | HxW */
	double scale[2];         /* scale = 0.08,1.0 (area fraction, random_resized) */
	double ratio[2];         /* ratio = 0.75,1.3333 (w/h, random_resized) */
	uint32_t resize;         /* resize = 256 (center: shorter side first; 0: none) */
	double hflip;            /* hflip = 0.5 (probability) */
	bool normalize;          /* normalize = none -> false (x/255 only for floats) */
	float mean[3], std[3];   /* normalize = imagenet | m0,m1,m2/s0,s1,s2 */
	enum xf_output output;   /* output = uint8_hwc | float16_chw | float32_chw */
	uint32_t threads;        /* threads = 0 (0: automatic) */
	enum xf_cache cache;     /* cache = encoded | decoded */
	uint32_t cache_size;     /* cache_size = 0 (decoded: shorter side; 0: full size) */
	/* Not configuration keys (tests and benchmarks): */
	bool exact;              /* never DCT-scale: JPEG tensors bit-equal PIL's */
	enum xf_jpeg_path jpeg_path;
	uint32_t dct_scales;     /* bit M: M/8 may be used (0: XF_DCT_SCALES_DEFAULT) */
};

/* The defaults: decode=none, crop=random_resized, size=224, scale=0.08,1.0,
 * ratio=0.75,1.3333 (3/4, 4/3 exactly), resize=256, hflip=0.5,
 * normalize=imagenet, output=float32_chw, threads=0, cache=encoded,
 * cache_size=0. */
void xf_params_default(struct xf_params *p);

/* Set one key from its text ("size", "224x192"); the key may carry the
 * "transform." prefix. 0, or -EINVAL with the reason in err ("size '0x5':
 * expected N or HxW with 1 <= N <= 16384"). Values are checked one by one;
 * cross-key rules are xf_params_check's. */
int xf_params_set(struct xf_params *p, const char *key, const char *value, char *err,
		  size_t errlen);
/* A whole spec: "key=value" items separated by blanks, ';' or newlines
 * ("crop=center resize=256 size=224"), applied over *p in order. */
int xf_params_parse(struct xf_params *p, const char *spec, char *err, size_t errlen);
/* Cross-key rules (normalize needs a float output, ...). 0 or -EINVAL. */
int xf_params_check(const struct xf_params *p, char *err, size_t errlen);
/* The effective values as a spec xf_params_parse reads back. */
void xf_params_format(const struct xf_params *p, char *buf, size_t len);

/* The single-key parsers, pure (for the config table). Each returns 0 or
 * -EINVAL with the reason in err. */
int xf_parse_decode(const char *s, enum xf_decode *out, char *err, size_t errlen);
int xf_parse_crop(const char *s, enum xf_crop *out, char *err, size_t errlen);
int xf_parse_size(const char *s, uint32_t *h, uint32_t *w, char *err, size_t errlen);
int xf_parse_range(const char *key, const char *s, double out[2], char *err, size_t errlen);
int xf_parse_normalize(const char *s, bool *on, float mean[3], float std[3], char *err,
		       size_t errlen);
int xf_parse_output(const char *s, enum xf_output *out, char *err, size_t errlen);
int xf_parse_cache(const char *s, enum xf_cache *out, char *err, size_t errlen);

/* ---- random choices ------------------------------------------------------ */

/* Draw `index` of the stream of (seed, epoch, id): SplitMix64's finaliser
 * over a counter (docs/transform.md gives the formula). */
uint64_t xf_draw(uint64_t seed, uint64_t epoch, uint64_t id, uint32_t index);

/* Where a sample's pixels come from and where they go: */
struct xf_crop_box {
	int32_t top, left, height, width; /* random_resized/none: in the image;
					   * center: in the image resized to (rh, rw),
					   * top/left negative when padding */
	int32_t flip;                    /* 1: mirror after resizing */
	int32_t rh, rw;                  /* center: size after resize; else image size */
	int32_t tries;                   /* random_resized: accepted try 1..10, 0: fallback */
};

/* Crop box and flip of sample `id` in `epoch` for an image of width x height
 * (> 0, < 2^30 each). Pure: same inputs, same box, on every node. */
void xf_crop_params(const struct xf_params *p, uint64_t seed, uint64_t epoch, uint64_t id,
		    uint32_t width, uint32_t height, struct xf_crop_box *out);

/* ---- output tensors -------------------------------------------------------- */

/* Bytes of one sample's tensor (0 when decode = none). */
size_t xf_sample_bytes(const struct xf_params *p);
/* Dims of one sample ([H, W, 3] or [3, H, W]) and its SEER_DTYPE_* code;
 * returns ndim (3). */
int xf_sample_shape(const struct xf_params *p, uint64_t dims[3], int *dtype);
/* float32 -> IEEE binary16, round to nearest even (inf/NaN kept). */
uint16_t xf_f32_to_f16(float f);

/* ---- one sample ---------------------------------------------------------- */

struct xf_scratch;

/* Per-thread decoder state and buffers. max_pixels bounds the images it
 * decodes (width * height; 0: 2^27), so a hostile header cannot make it
 * allocate gigabytes. NULL on out of memory. */
struct xf_scratch *xf_scratch_new(uint64_t max_pixels);
void xf_scratch_free(struct xf_scratch *s);

/* What xf_transform did (optional). */
struct xf_info {
	int format;                  /* XF_FMT_* of the input */
	uint32_t width, height;      /* of the encoded image (original pixels) */
	struct xf_crop_box box;
	uint32_t dct_num;            /* JPEG decoded at dct_num/8 (8: full size) */
	uint32_t region_w, region_h; /* pixels decoded */
	uint64_t decode_ns, resize_ns;
};

enum xf_format { XF_FMT_UNKNOWN = 0, XF_FMT_JPEG, XF_FMT_PNG, XF_FMT_BLOB };

/* Sniff the first bytes. */
enum xf_format xf_sniff(const void *src, size_t len);
/* Format and size from the header alone (no pixel decoded). 0, or -EINVAL /
 * -ENOTSUP with the reason in err. */
int xf_probe(struct xf_scratch *s, const void *src, size_t len, enum xf_format *fmt,
	     uint32_t *width, uint32_t *height, char *err, size_t errlen);

/* Decode, crop, resize, flip, normalise and lay out sample `id` of `epoch`:
 * src/len is the encoded file (JPEG, PNG) or a decoded blob of
 * xf_decode_blob; dst receives xf_sample_bytes(p) bytes (any alignment; the
 * batch writer keeps float tensors 4-byte aligned). On failure dst may hold
 * a partial tensor; the reason is in err. Requires p->decode = image. */
int xf_transform(const struct xf_params *p, struct xf_scratch *s, uint64_t seed,
		 uint64_t epoch, uint64_t id, const void *src, size_t len, void *dst,
		 struct xf_info *info, char *err, size_t errlen);

/* ---- batches --------------------------------------------------------------- */

/* A batch of B fixed-shape tensors is one block [B, 3, H, W] (float outputs)
 * or [B, H, W, 3] (uint8_hwc): sample i at batch + i * xf_sample_bytes(p).
 * Fills dims[0..4) and *dtype; returns 4. */
int xf_batch_shape(const struct xf_params *p, uint32_t batch, uint64_t dims[4], int *dtype);
/* xf_transform of sample `index` of the batch at `batch`. Different indices
 * of one batch may be written by different threads at once. */
int xf_batch_write(const struct xf_params *p, struct xf_scratch *s, uint64_t seed,
		   uint64_t epoch, uint64_t id, const void *src, size_t len, void *batch,
		   uint32_t index, struct xf_info *info, char *err, size_t errlen);

/* ---- decoded cache (cache = decoded) --------------------------------------
 * A blob holds an image decoded once (RGB, HWC uint8), optionally resized so
 * its shorter side is p->cache_size, behind a 32-byte header recording the
 * original size; xf_transform accepts it in place of the file and takes the
 * same crop (computed on the original size) from it. */
#define XF_BLOB_HEADER 32
/* Bytes of the blob of a width x height image under p (header included). */
uint64_t xf_blob_bytes(const struct xf_params *p, uint32_t width, uint32_t height);
/* Decode src into dst (cap bytes, >= xf_blob_bytes of its size); *used gets
 * the blob's length. -ENOSPC when cap is too small. */
int xf_decode_blob(const struct xf_params *p, struct xf_scratch *s, const void *src,
		   size_t len, void *dst, size_t cap, size_t *used, char *err, size_t errlen);

#endif /* SEER_XFORM_H */
