/* The catalog's cache file: a self-checking image of a built catalog.
 *
 * catalog_serialize writes header, files, samples, the image sizes when the
 * catalog has them (flag CAT_IMG_F_IMAGES; version 3), types, directories,
 * string pool (with the root appended) and an XXH64 of all of it; catalog_deserialize checks
 * every field and index before use, so a damaged or hostile file gives an
 * error, never a catalog that reads out of bounds. Pure functions of their
 * arguments (no shared state): any thread; the daemon calls them on its main
 * thread while opening the dataset. */
#define _GNU_SOURCE
#include "catalog_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "../fmt/fmt.h"
#include "seer.h"
#include "../util/util.h"

#define CAT_IMG_MAGIC "SEERCAT"
/* 3: optional image sizes; 4: class labels number every directory of the
 * root (torchvision's find_classes), not only those with samples: a cache of
 * version 3 may carry the old labels; 5: each file's ctime (catalog_file),
 * checked with its size and mtime at every start */
#define CAT_IMG_VERSION 5u
#define CAT_IMG_F_IMAGES 1u /* struct catalog_image[nsamples] follows the samples */
/* no image side wider than this is recorded (JPEG's limit is 65500) */
#define CAT_IMG_MAX_SIDE (1u << 24)

struct cat_img_hdr {
	char magic[8];
	uint32_t version;
	uint32_t hdr_size;
	uint64_t params_hash;
	uint64_t hash;
	uint64_t nsamples;
	uint64_t strpool_len;
	uint32_t nfiles;
	uint32_t ntypes;
	uint32_t ndirs;
	uint32_t nclasses;
	uint32_t root_off;
	uint32_t flags;       /* CAT_IMG_F_* */
	char format[16];
	int64_t scan_ns;      /* wall-clock start of the scan */
};
_Static_assert(sizeof(struct cat_img_hdr) == 96, "catalog image header");

/* Every count is bounded by the header's field widths: no overflow in u64. */
static uint64_t img_size(uint64_t nfiles, uint64_t nsamples, uint64_t ntypes, uint64_t ndirs,
			 uint64_t pool, uint32_t flags)
{
	uint64_t n = sizeof(struct cat_img_hdr);
	n += nfiles * sizeof(struct catalog_file);
	n += nsamples * sizeof(struct catalog_sample);
	if (flags & CAT_IMG_F_IMAGES)
		n += nsamples * sizeof(struct catalog_image);
	n += ntypes * sizeof(struct seer_wire_type);
	n += ndirs * sizeof(struct catalog_dir);
	n += ALIGN_UP(pool, 8);
	n += sizeof(uint64_t); /* checksum */
	return n;
}

int catalog_serialize(const struct catalog *c, void **buf, size_t *len)
{
	/* the root goes into a copy of the pool so the image is self-contained */
	uint64_t root_len = strlen(c->root) + 1;
	uint64_t pool = c->strpool_len + root_len;
	uint32_t flags = c->images ? CAT_IMG_F_IMAGES : 0;
	uint64_t n = img_size(c->nfiles, c->nsamples, c->ntypes, c->ndirs, pool, flags);
	char *p = calloc(1, n);
	if (!p)
		return -ENOMEM;
	struct cat_img_hdr h = {
		.magic = CAT_IMG_MAGIC, .version = CAT_IMG_VERSION, .hdr_size = sizeof(h),
		.params_hash = c->params_hash, .hash = c->hash, .nsamples = c->nsamples,
		.strpool_len = pool, .nfiles = c->nfiles, .ntypes = c->ntypes, .ndirs = c->ndirs,
		.nclasses = c->nclasses, .root_off = (uint32_t)c->strpool_len, .scan_ns = c->scan_ns,
		.flags = flags,
	};
	snprintf(h.format, sizeof(h.format), "%s", c->fmt->name);
	char *q = p;
	memcpy(q, &h, sizeof(h));
	q += sizeof(h);
	memcpy(q, c->files, c->nfiles * sizeof(*c->files));
	q += c->nfiles * sizeof(*c->files);
	memcpy(q, c->samples, c->nsamples * sizeof(*c->samples));
	q += c->nsamples * sizeof(*c->samples);
	if (c->images) {
		memcpy(q, c->images, c->nsamples * sizeof(*c->images));
		q += c->nsamples * sizeof(*c->images);
	}
	memcpy(q, c->types, c->ntypes * sizeof(*c->types));
	q += c->ntypes * sizeof(*c->types);
	memcpy(q, c->dirs, c->ndirs * sizeof(*c->dirs));
	q += c->ndirs * sizeof(*c->dirs);
	memcpy(q, c->strpool, c->strpool_len);
	memcpy(q + c->strpool_len, c->root, root_len);
	q += ALIGN_UP(pool, 8);
	uint64_t sum = XXH64(p, (size_t)(q - p), 0);
	memcpy(q, &sum, sizeof(sum));
	*buf = p;
	*len = n;
	return 0;
}

#define BAD(...) do { snprintf(err, errlen, __VA_ARGS__); return SEER_EDATASET; } while (0)

/* Header, size and checksum; the format it names. */
static int img_check(const char *p, size_t len, struct cat_img_hdr *h,
		     const struct fmt_ops **fmt, char *err, size_t errlen)
{
	if (len < sizeof(*h) + sizeof(uint64_t))
		BAD("catalog cache truncated (%zu bytes)", len);
	memcpy(h, p, sizeof(*h));
	if (memcmp(h->magic, CAT_IMG_MAGIC, sizeof(h->magic)) != 0)
		BAD("not a seer catalog cache (bad magic)");
	if (h->version < CAT_IMG_VERSION && h->hdr_size == sizeof(*h))
		BAD("catalog cache of version %u, written by an older seerd (this one writes "
		    "version %u, with each file's ctime for the start-up check)", h->version,
		    CAT_IMG_VERSION);
	if (h->version != CAT_IMG_VERSION || h->hdr_size != sizeof(*h))
		BAD("catalog cache version %u, expected %u", h->version, CAT_IMG_VERSION);
	if (h->nsamples > UINT32_MAX || h->strpool_len > UINT32_MAX || h->strpool_len == 0)
		BAD("catalog cache counts out of range");
	if (h->flags & ~CAT_IMG_F_IMAGES)
		BAD("catalog cache has unknown flags %#x", h->flags);
	uint64_t need = img_size(h->nfiles, h->nsamples, h->ntypes, h->ndirs, h->strpool_len,
				 h->flags);
	if (need != len)
		BAD("catalog cache size %zu, header implies %llu", len, (unsigned long long)need);
	uint64_t sum;
	memcpy(&sum, p + len - sizeof(sum), sizeof(sum));
	if (XXH64(p, len - sizeof(sum), 0) != sum)
		BAD("catalog cache checksum mismatch (file damaged)");
	h->format[sizeof(h->format) - 1] = '\0';
	*fmt = fmt_registry_find(h->format);
	if (!*fmt)
		BAD("catalog cache names unknown format '%s'", h->format);
	return 0;
}

/* The arrays of the image into a new catalog (not yet checked). */
static int img_copy(const char *p, const struct cat_img_hdr *h, struct catalog **out)
{
	struct catalog *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->params_hash = h->params_hash;
	c->nfiles = h->nfiles;
	c->nsamples = h->nsamples;
	c->ntypes = h->ntypes;
	c->ndirs = h->ndirs;
	c->nclasses = h->nclasses;
	c->strpool_len = h->strpool_len;
	c->files = malloc(MAX(1, (size_t)h->nfiles * sizeof(*c->files)));
	c->samples = malloc(MAX(1, (size_t)h->nsamples * sizeof(*c->samples)));
	c->types = malloc(MAX(1, (size_t)h->ntypes * sizeof(*c->types)));
	c->dirs = malloc(MAX(1, (size_t)h->ndirs * sizeof(*c->dirs)));
	c->strpool = malloc((size_t)h->strpool_len);
	if (h->flags & CAT_IMG_F_IMAGES)
		c->images = malloc(MAX(1, (size_t)h->nsamples * sizeof(*c->images)));
	if (!c->files || !c->samples || !c->types || !c->dirs || !c->strpool ||
	    (!c->images && (h->flags & CAT_IMG_F_IMAGES))) {
		catalog_free(c);
		return -ENOMEM;
	}
	const char *q = p + sizeof(*h);
	memcpy(c->files, q, h->nfiles * sizeof(*c->files));
	q += h->nfiles * sizeof(*c->files);
	memcpy(c->samples, q, h->nsamples * sizeof(*c->samples));
	q += h->nsamples * sizeof(*c->samples);
	if (c->images) {
		memcpy(c->images, q, h->nsamples * sizeof(*c->images));
		q += h->nsamples * sizeof(*c->images);
	}
	memcpy(c->types, q, h->ntypes * sizeof(*c->types));
	q += h->ntypes * sizeof(*c->types);
	memcpy(c->dirs, q, h->ndirs * sizeof(*c->dirs));
	q += h->ndirs * sizeof(*c->dirs);
	memcpy(c->strpool, q, h->strpool_len);
	*out = c;
	return 0;
}

/* Every index of c in range, every sample inside its file's range. */
static int img_validate(const struct catalog *c, uint32_t root_off, char *err, size_t errlen)
{
	if (c->strpool[c->strpool_len - 1] != '\0')
		BAD("catalog cache string pool not terminated");
	if (root_off >= c->strpool_len)
		BAD("catalog cache root out of range");
	uint64_t expect_first = 0;
	for (uint32_t i = 0; i < c->nfiles; i++) {
		const struct catalog_file *f = &c->files[i];
		if (f->path_off >= root_off)
			BAD("catalog cache file %u path out of range", i);
		if (f->first != expect_first || f->nsamples > c->nsamples - f->first)
			BAD("catalog cache file %u sample range inconsistent", i);
		expect_first += f->nsamples;
	}
	if (expect_first != c->nsamples)
		BAD("catalog cache sample count inconsistent");
	for (uint32_t i = 0; i < c->ndirs; i++)
		if (c->dirs[i].path_off >= root_off)
			BAD("catalog cache directory %u path out of range", i);
	for (uint32_t i = 0; i < c->ntypes; i++)
		if (c->types[i].dtype >= SEER_DT_COUNT_ || c->types[i].ndim > SEER_MAX_DIMS)
			BAD("catalog cache type %u invalid", i);
	for (uint64_t i = 0; i < c->nsamples; i++) {
		const struct catalog_sample *s = &c->samples[i];
		if (s->file >= c->nfiles || s->type >= c->ntypes)
			BAD("catalog cache sample %llu refers out of range", (unsigned long long)i);
		const struct catalog_file *f = &c->files[s->file];
		if (i < f->first || i - f->first >= f->nsamples)
			BAD("catalog cache sample %llu not inside its file's range",
			    (unsigned long long)i);
	}
	for (uint64_t i = 0; c->images && i < c->nsamples; i++)
		if (c->images[i].width > CAT_IMG_MAX_SIDE || c->images[i].height > CAT_IMG_MAX_SIDE ||
		    (c->images[i].width == 0) != (c->images[i].height == 0))
			BAD("catalog cache image size of sample %llu out of range",
			    (unsigned long long)i);
	if (c->nsamples == 0)
		BAD("catalog cache holds no samples");
	return 0;
}

static int hash_mismatch(char *err, size_t errlen)
{
	BAD("catalog cache content hash mismatch");
}

int catalog_deserialize(const void *buf, size_t len, struct catalog **out, char *err, size_t errlen)
{
	struct cat_img_hdr h;
	const struct fmt_ops *fmt;
	struct catalog *c = NULL;
	int rc = img_check(buf, len, &h, &fmt, err, errlen);
	if (rc == 0)
		rc = img_copy(buf, &h, &c);
	if (rc)
		return rc;
	c->fmt = fmt;
	rc = img_validate(c, h.root_off, err, errlen);
	if (rc == 0) {
		c->root = strdup(c->strpool + h.root_off);
		rc = c->root ? 0 : -ENOMEM;
	}
	if (rc == 0) {
		catalog_finish_totals(c);
		c->hash = h.hash;
		if (catalog_hash_content(c) != h.hash)
			rc = hash_mismatch(err, errlen);
	}
	if (rc == 0)
		rc = catalog_attach_shared(c, err, errlen);
	if (rc) {
		catalog_free(c);
		return rc;
	}
	c->from_cache = true;
	c->scan_ns = h.scan_ns;
	*out = c;
	return 0;
}

char *catalog_cache_path(const struct catalog_opts *o)
{
	XXH64_state_t *st = XXH64_createState();
	XXH64_reset(st, 0);
	XXH64_update(st, o->root, strlen(o->root));
	uint64_t ph = catalog_hash_params(o);
	XXH64_update(st, &ph, sizeof(ph));
	uint64_t h = XXH64_digest(st);
	XXH64_freeState(st);
	return xasprintf("%s/catalog-%016llx.bin", o->cache_dir, (unsigned long long)h);
}
