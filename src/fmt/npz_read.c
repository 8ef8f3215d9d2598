/* Reading an npz/npy sample.
 *
 * - A sample contiguous in a stored member (first axis in C order, last axis
 *   in Fortran order, or one sample per file) is one pread at its offset:
 *   nothing decoded, nothing kept, the bytes read are the sample's.
 * - Any other sample (interleaved in DLIO's (d1, d2, n) layout, or in a
 *   deflated member) needs decoding. Decoded samples go into the catalog's
 *   shared cache (mcache.h) by ranges of consecutive samples of one file,
 *   sample-major: the range's part of the member is decoded once (read by
 *   offset when stored, inflated when deflated) and transposed or gathered,
 *   and every sample of the range is then a memcpy, for every reader thread.
 *   A range is the whole file when it fits half the budget (the budget must
 *   hold two, so that readers of two files do not take turns), else as many
 *   samples as do.
 * - When not even two samples fit the budget, each sample decodes its own
 *   part of the member on its own (stored: from its first byte to its last).
 *
 * Runs on reader threads; the cache is shared, everything else is the
 * reader's own. */
#define _GNU_SOURCE
#include "npz.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mcache.h"
#include "seer.h"
#include "../util/util.h"

#define fail fmt_fail

/* Bytes of the files whose samples must be decoded (not contiguous in a
 * stored member), and how many such files. */
static uint64_t decoded_need(const struct catalog *c, uint32_t *files, uint64_t *samples)
{
	uint64_t need = 0;
	*files = 0;
	*samples = 0;
	for (uint32_t i = 0; i < c->nfiles; i++) {
		const struct catalog_file *f = &c->files[i];
		if (f->nsamples < 2)
			continue;
		const struct catalog_sample *s = &c->samples[f->first];
		bool deflated = f->aux[3] & AUX_DEFLATED;
		bool contiguous = c->samples[f->first + 1].offset - s->offset == s->length;
		if (deflated || !contiguous) {
			need += f->nsamples * s->length;
			*samples += f->nsamples;
			(*files)++;
		}
	}
	return need;
}

void *npz_shared_new(const struct catalog *c)
{
	uint64_t limit = fmt_memory();
	uint32_t files;
	uint64_t samples;
	uint64_t need = decoded_need(c, &files, &samples);
	if (need > limit) {
		/* a sample whose file is not held decoded reads (about) its whole
		 * member: with a fraction f of the files held, a file of n samples
		 * is read 1 + (n - 1)(1 - f) times per shuffled epoch */
		double n = (double)samples / files, f = (double)limit / (double)need;
		char a[32], b[32];
		log_warn("dataset %s: %u %s files hold %s of samples that must be decoded "
			 "(interleaved or compressed), more than prefetch.format_memory (%s) keeps: "
			 "in shuffled order a sample whose file is not held decoded reads its member "
			 "again, about %.0fx or more the bytes of the samples read so (%.0f per file, "
			 "%.0f%% of them held); the engine's coalesced reads avoid it only for the "
			 "files the RAM cache holds. Raise prefetch.format_memory toward %s, or store "
			 "samples uncompressed on the first axis", c->root, files, c->fmt->name,
			 fmt_size(a, sizeof(a), need), fmt_size(b, sizeof(b), limit),
			 1.0 + (n - 1.0) * (1.0 - f), n, 100.0 * f, a);
	}
	return mcache_new(limit);
}

void npz_shared_free(void *shared)
{
	mcache_free(shared);
}

void npz_mem_stats(void *shared, struct fmt_mem_stats *st)
{
	mcache_stats(shared, st);
}

uint64_t npz_range_count(uint64_t n, uint64_t sbytes, uint64_t limit)
{
	uint64_t per = limit / 2;
	if (sbytes == 0)
		return 0;
	uint64_t cnt = MIN(n, per / sbytes);
	return cnt >= 2 ? cnt : 0;
}

/* One file's array as the catalog describes it. */
struct arr {
	struct member m;
	uint64_t hdr;         /* NPY header bytes before the data */
	uint64_t n;           /* samples in the file */
	uint64_t stride;      /* data bytes between consecutive samples */
	uint32_t isz;
	bool swap;
	struct nd_view v;     /* of the sample read (base: that sample's) */
};

/* a from the catalog alone; false when the entry does not match the layout. */
static bool arr_layout(const struct catalog *c, uint64_t id, const struct catalog_sample *s,
		       struct arr *a)
{
	const struct catalog_file *f = &c->files[s->file];
	const struct seer_wire_type *t = &c->types[s->type];
	npz_aux_get(f->aux, &a->m, &a->hdr);
	bool last = f->aux[3] & AUX_LAST, fortran = f->aux[3] & AUX_FORTRAN;
	a->swap = f->aux[3] & AUX_SWAP;
	a->isz = fmt_dtype_size(t->dtype);
	a->n = f->nsamples;
	uint32_t nd = t->ndim + 1;
	uint64_t shape[NPY_MAX_DIMS];
	for (uint32_t i = 0; i < t->ndim; i++)
		shape[last ? i : i + 1] = t->dims[i];
	shape[last ? nd - 1 : 0] = f->nsamples;
	npz_view_init(&a->v, shape, nd, fortran, last, id - f->first, a->isz);
	a->stride = npz_axis_stride(shape, nd, fortran, last, a->isz);
	/* the last sample's bytes must lie inside the member */
	uint64_t end = a->hdr + (a->n - 1) * a->stride + a->v.extent;
	return !(a->isz == 0 || a->v.total != s->length || a->v.base != s->offset ||
		 a->m.usize < a->hdr || end > a->m.usize || end < a->hdr);
}

static int arr_init(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s,
		    struct arr *a)
{
	if (!arr_layout(rd->cat, id, s, a))
		return catalog_read_error(rd, id, SEER_EDATASET, "catalog entry does not match the "
				      "array layout (damaged catalog cache?): rebuild the catalog");
	return 0;
}

/* ---- decoding samples [first, first + cnt) into sample-major dst ---------------- */

struct range {
	const struct arr *a;
	uint64_t first, cnt;
	uint8_t *const *dsts;        /* sample first + j into dsts[j]; NULL: not wanted */
	uint64_t rows;               /* interleaved: elements per sample */
	struct npz_gather *g;        /* otherwise: one per sample */
};

/* Interleaved: the data is a (rows x n) matrix, sample k its column k. */
static void transpose_piece(void *ctx, const uint8_t *data, size_t len, uint64_t pos)
{
	struct range *r = ctx;
	const struct arr *a = r->a;
	if (pos + len <= a->hdr)
		return;
	if (pos < a->hdr) { /* the NPY header, decoded for the CRC */
		data += a->hdr - pos;
		len -= (size_t)(a->hdr - pos);
		pos = a->hdr;
	}
	uint64_t isz = a->isz, n = a->n, c0 = r->first, c1 = r->first + r->cnt;
	uint64_t e = (pos - a->hdr) / isz, end = e + len / isz;
	const uint8_t *src = data;
	while (e < end) {
		uint64_t row = e / n, col = e % n;
		if (col == 0 && end - e >= n) { /* whole rows */
			uint64_t rows = (end - e) / n;
			npz_transpose_cols(src, rows, n, c0, r->cnt, r->dsts, row, a->isz);
			e += rows * n;
			src += rows * n * isz;
			continue;
		}
		uint64_t stop = MIN(n, col + (end - e));
		for (uint64_t c = MAX(col, c0); c < MIN(stop, c1); c++)
			if (r->dsts[c - c0])
				memcpy(r->dsts[c - c0] + row * isz, src + (c - col) * isz, isz);
		src += (stop - col) * isz;
		e += stop - col;
	}
}

/* Samples stored one after the other: the range is one run of the data. */
static void linear_piece(void *ctx, const uint8_t *data, size_t len, uint64_t pos)
{
	struct range *r = ctx;
	const uint64_t total = r->a->v.total;
	uint64_t lo = r->a->hdr + r->first * r->a->stride;
	uint64_t hi = lo + r->cnt * total;
	uint64_t a = MAX(pos, lo), b = MIN(pos + len, hi);
	while (a < b) {
		uint64_t j = (a - lo) / total, in = (a - lo) % total;
		uint64_t n = MIN(b - a, total - in);
		if (r->dsts[j])
			memcpy(r->dsts[j] + in, data + (a - pos), (size_t)n);
		a += n;
	}
}

static void gather_piece(void *ctx, const uint8_t *data, size_t len, uint64_t pos)
{
	struct range *r = ctx;
	if (pos + len <= r->a->hdr)
		return;
	for (uint64_t j = 0; j < r->cnt; j++)
		npz_gather_feed(&r->g[j], data, len, pos);
}

/* Samples [first, first + cnt) into dsts (NULL entries skipped). whole: the
 * source holds the whole member, which is decoded whole (CRC checked). */
static int decode_range(const struct npz_src *src, const struct arr *a, uint64_t first,
			uint64_t cnt, uint8_t *const *dsts, bool whole, char *err, size_t errlen)
{
	struct range r = { .a = a, .first = first, .cnt = cnt, .dsts = dsts };
	/* the bytes the range spans; the whole member when it is the whole file,
	 * so that its CRC is checked */
	uint64_t lo = a->hdr + first * a->stride;
	uint64_t hi = a->hdr + (first + cnt - 1) * a->stride + a->v.extent;
	if (whole || (first == 0 && cnt == a->n)) {
		lo = 0;
		hi = a->m.usize;
	}
	npz_piece_fn fn;
	if (a->v.ndim == 0 && a->stride == a->v.total) {
		fn = linear_piece;
	} else if (npz_interleaved(&a->v, a->n, a->isz)) {
		r.rows = a->v.dims[0];
		fn = transpose_piece;
	} else {
		r.g = calloc(cnt, sizeof(*r.g));
		if (!r.g)
			return -ENOMEM;
		for (uint64_t j = 0; j < cnt; j++)
			r.g[j] = (struct npz_gather){ .v = &a->v, .hdr = a->hdr, .dst = dsts[j],
						      .base = (first + j) * a->stride,
						      .finished = !dsts[j] };
		fn = gather_piece;
	}
	int rc = npz_member_decode_src(src, &a->m, a->hdr, lo, hi, fn, &r, err, errlen);
	for (uint64_t j = 0; rc == 0 && r.g && j < cnt; j++)
		if (!r.g[j].finished)
			rc = fail(err, errlen, "member ended before sample %llu's bytes",
				  (unsigned long long)(first + j));
	free(r.g);
	return rc;
}

/* ---- the three paths ------------------------------------------------------------ */

/* Through the shared cache; MC_NOFIT when it cannot hold the range. */
static int read_cached(struct catalog_reader *rd, uint64_t id, int fd, const struct arr *a,
		       uint64_t k, uint64_t count, uint8_t *dst)
{
	struct mcache *mc = rd->cat->fmt_shared;
	uint64_t first = k / count * count, cnt = MIN(count, a->n - first);
	uint32_t file = rd->cat->samples[id].file;
	struct mcache_entry *e;
	int got = mcache_acquire(mc, file, (uint32_t)first, (uint32_t)cnt, cnt * a->v.total, &e);
	if (got == MC_NOFIT)
		return MC_NOFIT;
	if (got == MC_LOAD) {
		char err[256];
		const struct npz_src src = { .fd = fd };
		uint8_t **dsts = malloc(cnt * sizeof(*dsts));
		for (uint64_t j = 0; dsts && j < cnt; j++)
			dsts[j] = e->buf + j * a->v.total;
		int rc = dsts ? decode_range(&src, a, first, cnt, dsts, false, err, sizeof(err))
			      : -ENOMEM;
		free(dsts);
		if (rc) {
			mcache_abort(mc, e);
			return rc == SEER_EDATASET ? catalog_read_error(rd, id, rc, "%s", err) : rc;
		}
		mcache_ready(mc, e);
	}
	memcpy(dst, e->buf + (k - first) * a->v.total, (size_t)a->v.total);
	mcache_release(mc, e);
	return 0;
}

int npz_read(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s, void *dst)
{
	struct arr a;
	int rc = arr_init(rd, id, s, &a);
	if (rc)
		return rc;
	int fd = catalog_reader_fd(rd, s->file);
	if (fd < 0)
		return fd;
	uint64_t k = id - rd->cat->files[s->file].first;
	if (!a.m.deflated && a.v.ndim == 0) {
		rc = fmt_pread(fd, dst, (size_t)a.v.total, a.m.off + a.hdr + a.v.base);
		if (rc == -ENODATA)
			return catalog_read_error(rd, id, SEER_EDATASET, "file shorter than its catalogued "
					      "layout: restart seerd to rescan");
	} else {
		struct mcache *mc = rd->cat->fmt_shared;
		uint64_t count = npz_range_count(a.n, a.v.total, mcache_limit(mc));
		rc = count ? read_cached(rd, id, fd, &a, k, count, dst) : MC_NOFIT;
		if (rc == MC_NOFIT) {
			char err[256];
			const struct npz_src src = { .fd = fd };
			uint8_t *one = dst;
			mcache_note_streamed(mc);
			rc = decode_range(&src, &a, k, 1, &one, false, err, sizeof(err));
			if (rc == SEER_EDATASET)
				return catalog_read_error(rd, id, rc, "%s", err);
		}
	}
	if (rc == 0 && a.swap)
		fmt_swap(dst, a.v.total, a.isz);
	return rc;
}

/* ---- coalesced reads -------------------------------------------------------------- */

/* A sample contiguous in a stored member is its own bytes; any other needs
 * the whole member (stored: to find its elements and check the CRC;
 * deflated: to inflate from its start). */
bool npz_span(const struct catalog *c, uint64_t id, const struct catalog_sample *s, uint64_t *lo,
	      uint64_t *hi)
{
	struct arr a;
	if (!arr_layout(c, id, s, &a))
		return false;
	if (!a.m.deflated && a.v.ndim == 0) {
		*lo = a.m.off + a.hdr + a.v.base;
		*hi = *lo + a.v.total;
	} else {
		*lo = a.m.off;
		*hi = a.m.off + (a.m.deflated ? a.m.csize : a.m.usize);
	}
	return *hi > *lo;
}

/* Samples ids of one file out of buf (the file's bytes [off, off + len),
 * holding every one's span): a copy each when contiguous and stored, else
 * one decoding pass over the member, transposed or gathered straight into
 * the destinations (no decoded copy of the member is kept). */
int npz_cut_many(struct catalog_reader *rd, uint32_t file, const uint8_t *buf, uint64_t off,
		 uint64_t len, uint32_t n, const uint64_t *ids, void *const *dsts)
{
	const struct catalog *c = rd->cat;
	const struct npz_src src = { .fd = -1, .buf = buf, .off = off, .len = len };
	uint64_t kmin = UINT64_MAX, kmax = 0, first = c->files[file].first;
	struct arr a;
	for (uint32_t i = 0; i < n; i++) {
		if (ids[i] >= c->nsamples || c->samples[ids[i]].file != file)
			return -ERANGE;
		int rc = arr_init(rd, ids[i], &c->samples[ids[i]], &a);
		if (rc)
			return rc;
		kmin = MIN(kmin, ids[i] - first);
		kmax = MAX(kmax, ids[i] - first);
		if (!a.m.deflated && a.v.ndim == 0) {
			uint64_t at = a.m.off + a.hdr + a.v.base;
			if (at < off || at - off > len || len - (at - off) < a.v.total)
				return catalog_read_error(rd, ids[i], -ERANGE, "sample is not inside the "
						      "bytes read (%llu..%llu)", (unsigned long long)off,
						      (unsigned long long)(off + len));
			memcpy(dsts[i], buf + (at - off), (size_t)a.v.total);
			if (a.swap)
				fmt_swap(dsts[i], a.v.total, a.isz);
		}
	}
	if (n == 0 || (!a.m.deflated && a.v.ndim == 0))
		return 0;
	uint64_t cnt = kmax - kmin + 1;
	uint8_t **d = calloc(cnt, sizeof(*d));
	if (!d)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		d[ids[i] - first - kmin] = dsts[i];
	char err[256];
	int rc = decode_range(&src, &a, kmin, cnt, d, true, err, sizeof(err));
	free(d);
	if (rc)
		return rc == SEER_EDATASET ? catalog_read_error(rd, ids[0], rc, "%s", err) : rc;
	for (uint32_t i = 0; a.swap && i < n; i++)
		fmt_swap(dsts[i], a.v.total, a.isz);
	return 0;
}
