/* Image sizes in the catalog: each sample's width and height read from its
 * header (xform's xf_probe), recorded once when the catalog is built and
 * saved with it, so every daemon of a job plans the decoded-image cache
 * (transform.cache = decoded) from the same numbers without decoding.
 *
 * For the files format the first 64 KiB of each file are read (the whole
 * file when its header lies further, behind large EXIF segments); other
 * formats produce the sample through their reader. Runs on the thread
 * building or loading the catalog (node 0's main thread). Failure: a sample
 * that cannot be read or is not a JPEG/PNG image gets 0 x 0 and is counted
 * (its read or transform names it later); only out of memory fails. */
#define _GNU_SOURCE
#include "catalog_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fmt/fmt.h"
#include "../util/util.h"
#include "../xform/xform.h"

#define PROBE_HEAD (64u << 10)

struct probe {
	struct catalog_reader rd;
	struct xf_scratch *xs;
	uint8_t *buf;
	size_t cap;
};

static int probe_room(struct probe *p, size_t n)
{
	if (n <= p->cap)
		return 0;
	uint8_t *b = realloc(p->buf, MAX(n, (size_t)PROBE_HEAD));
	if (!b)
		return -ENOMEM;
	p->buf = b;
	p->cap = MAX(n, (size_t)PROBE_HEAD);
	return 0;
}

/* The first `want` bytes of sample id into p->buf (files: straight from the
 * file; other formats: the whole sample). Returns bytes read, or < 0. */
static int64_t probe_read(struct probe *p, uint64_t id, uint64_t want, char *why, size_t whylen)
{
	const struct catalog *c = p->rd.cat;
	const struct catalog_sample *s = &c->samples[id];
	bool files = strcmp(c->fmt->name, "files") == 0;
	uint64_t n = files ? MIN(want, s->length) : s->length;
	if (n > SIZE_MAX / 2 || probe_room(p, (size_t)MAX(n, 1ull)) != 0)
		return -ENOMEM;
	if (!files) {
		int rc = catalog_read(&p->rd, id, p->buf);
		if (rc != 0)
			str_copy(why, whylen, p->rd.err);
		return rc != 0 ? rc : (int64_t)n;
	}
	int fd = catalog_reader_fd(&p->rd, s->file);
	int rc = fd < 0 ? fd : fmt_pread(fd, p->buf, (size_t)n, s->offset);
	if (rc != 0)
		snprintf(why, whylen, "cannot read it: %s", strerror(rc == -ENODATA ? EIO : -rc));
	return rc != 0 ? rc : (int64_t)n;
}

/* One sample's size into *img (0 x 0 when it is not an image); the reason
 * into why when it is not. */
static int probe_one(struct probe *p, uint64_t id, struct catalog_image *img, char *why, size_t whylen)
{
	*img = (struct catalog_image){ 0, 0 };
	uint64_t len = p->rd.cat->samples[id].length;
	int64_t n = probe_read(p, id, PROBE_HEAD, why, whylen);
	if (n == -ENOMEM)
		return -ENOMEM;
	if (n < 0)
		return 0;
	enum xf_format fmt;
	uint32_t w, h;
	int rc = xf_probe(p->xs, p->buf, (size_t)n, &fmt, &w, &h, why, whylen);
	if (rc != 0 && (uint64_t)n < len && fmt != XF_FMT_UNKNOWN) {
		/* the header lies beyond the first bytes (large EXIF, iCCP) */
		n = probe_read(p, id, len, why, whylen);
		if (n == -ENOMEM)
			return -ENOMEM;
		if (n < 0)
			return 0;
		rc = xf_probe(p->xs, p->buf, (size_t)n, &fmt, &w, &h, why, whylen);
	}
	if (rc == 0 && (fmt == XF_FMT_JPEG || fmt == XF_FMT_PNG) && w > 0 && h > 0)
		*img = (struct catalog_image){ w, h };
	else if (rc == 0)
		snprintf(why, whylen, "not a JPEG or PNG image");
	return 0;
}

int catalog_probe_images(struct catalog *c, uint64_t *nonimage, char *first, size_t firstlen)
{
	return catalog_probe_images_some(c, NULL, nonimage, first, firstlen);
}

int catalog_probe_images_some(struct catalog *c, const bool *redo, uint64_t *nonimage, char *first,
			      size_t firstlen)
{
	*nonimage = 0;
	if (first && firstlen)
		first[0] = '\0';
	struct catalog_image *img = calloc(MAX(1, c->nsamples), sizeof(*img));
	struct probe p = { .xs = xf_scratch_new(0) };
	if (!img || !p.xs) {
		free(img);
		xf_scratch_free(p.xs);
		return -ENOMEM;
	}
	catalog_reader_init(&p.rd, c);
	int rc = 0;
	for (uint64_t id = 0; id < c->nsamples && rc == 0; id++) {
		char why[320] = "";
		if (redo && c->images && !redo[c->samples[id].file]) {
			img[id] = c->images[id];
			*nonimage += img[id].width == 0;
			continue;
		}
		rc = probe_one(&p, id, &img[id], why, sizeof(why));
		if (rc == 0 && img[id].width == 0)
			(*nonimage)++;
		if (rc == 0 && img[id].width == 0 && first && firstlen && !first[0]) {
			char full[2 * 4096], show[CAT_PATH_SHOW];
			snprintf(full, sizeof(full), "%s/%s", c->root, catalog_path(c, c->samples[id].file));
			snprintf(first, firstlen, "sample %llu (%s): %s", (unsigned long long)id,
				 catalog_path_abbrev(show, sizeof(show), full), why);
		}
	}
	catalog_reader_fini(&p.rd);
	xf_scratch_free(p.xs);
	free(p.buf);
	if (rc != 0) {
		free(img);
		return rc;
	}
	free(c->images);
	c->images = img;
	return 0;
}
