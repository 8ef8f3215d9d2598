/* The npz and npy formats: numpy arrays, one sample per index of a sample axis.
 *
 * An .npz is a zip of .npy members (np.savez: stored, np.savez_compressed:
 * deflate). A sample is the sub-array at index k of the sample axis (the last
 * axis for DLIO's x of shape (d1, d2, n), or the first), delivered C-ordered
 * and little-endian whatever the stored order. This file is the catalog scan
 * (where each file's array is, its type, its labels) and the two fmt_ops;
 * reading is npz_read.c.
 *
 * Scan runs on the catalog-building thread. */
#define _GNU_SOURCE
#include "npz.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seer.h"
#include "../util/util.h"

#define fail fmt_fail
#define LABELS_MAX (1ull << 30)

static int sample_axis(struct catalog_builder *b, bool *last)
{
	const char *a = catalog_builder_params(b)->npz_sample_axis;
	if (!a || !*a || strcmp(a, "last") == 0) {
		*last = true;
	} else if (strcmp(a, "first") == 0) {
		*last = false;
	} else {
		catalog_builder_error(b, "npz_sample_axis is '%s': use 'last' (DLIO) or 'first'", a);
		return SEER_EDATASET;
	}
	return 0;
}

/* Is the array of h (held by member m) usable as samples? Fills the sample
 * type, its bytes and the sample count. */
static int array_check(struct catalog_builder *b, const struct npy_header *h, const struct member *m,
		       bool last, const char *what, struct seer_wire_type *t, uint64_t *bytes,
		       uint64_t *n)
{
	char sh[160];
	if (h->ndim == 0) {
		catalog_builder_error(b, "%s is a 0-d array: it has no sample axis", what);
		return SEER_EDATASET;
	}
	if (m->usize != h->data_off + h->nbytes) {
		catalog_builder_error(b, "%s holds %llu bytes but its NPY header describes %llu (a "
				  "%llu-byte header and shape %s of %u-byte elements): %s", what,
				  (unsigned long long)m->usize,
				  (unsigned long long)(h->data_off + h->nbytes),
				  (unsigned long long)h->data_off,
				  npy_shape_str(sh, sizeof(sh), h->shape, h->ndim), h->itemsize,
				  m->usize < h->data_off + h->nbytes ? "truncated, or a damaged header"
								     : "damaged");
		return SEER_EDATASET;
	}
	uint32_t nd = h->ndim;
	*n = last ? h->shape[nd - 1] : h->shape[0];
	*t = (struct seer_wire_type){ .dtype = h->dtype, .ndim = nd - 1 };
	*bytes = h->itemsize;
	for (uint32_t i = 0; i + 1 < nd; i++) {
		t->dims[i] = h->shape[last ? i : i + 1];
		*bytes *= t->dims[i];
	}
	if (*n > 0 && *bytes == 0) {
		catalog_builder_error(b, "%s of shape %s holds empty samples", what,
				  npy_shape_str(sh, sizeof(sh), h->shape, nd));
		return SEER_EDATASET;
	}
	if (*n > UINT32_MAX) {
		catalog_builder_error(b, "%s holds %llu samples (at most 2^32-1 per file)", what,
				  (unsigned long long)*n);
		return SEER_EDATASET;
	}
	return 0;
}

/* The array becomes the samples of file `file`. */
static int array_add(struct catalog_builder *b, uint32_t file, const struct npy_header *h,
		     const struct member *m, bool last, const struct seer_wire_type *t,
		     uint64_t bytes, uint64_t n, const int64_t *labels)
{
	uint32_t type;
	int rc = catalog_intern_type(b, t, &type);
	if (rc)
		return rc;
	npz_aux_put(catalog_builder_aux(b, file), m, h, last);
	struct nd_view v;
	npz_view_init(&v, h->shape, h->ndim, h->fortran, last, 0, h->itemsize);
	if ((m->deflated || v.ndim > 0) && n > 1 && npz_range_count(n, bytes, fmt_memory()) == 0) {
		static _Atomic bool warned;
		char sz[32], lim[32];
		if (!atomic_exchange(&warned, true))
			log_warn("%s: its samples of %s are not stored one after the other, and the "
				 "format memory (prefetch.format_memory = %s) cannot hold two of them "
				 "decoded: every sample will decode its part of the member on its own; "
				 "raise prefetch.format_memory, or store samples uncompressed on the "
				 "first axis (further files not reported)", catalog_builder_path(b, file),
				 fmt_size(sz, sizeof(sz), bytes), fmt_size(lim, sizeof(lim), fmt_memory()));
	}
	uint64_t stride = npz_axis_stride(h->shape, h->ndim, h->fortran, last, h->itemsize);
	for (uint64_t k = 0; k < n; k++) {
		rc = catalog_add_sample(b, file, k * stride, bytes, labels ? labels[k] : -1, type);
		if (rc)
			return rc;
	}
	return 0;
}

/* Labels: an integer (or integral float) array of n values. */
static int labels_decode(const uint8_t *buf, uint64_t len, uint64_t n, int64_t *out,
			 const char *what, char *err, size_t errlen)
{
	struct npy_header h;
	uint64_t need;
	int rc = npy_parse_header(buf, (size_t)len, &h, &need, err, errlen);
	if (rc == -EAGAIN)
		return fail(err, errlen, "%s: data ends inside its NPY header", what);
	if (rc)
		return rc;
	if (h.data_off + h.nbytes != len)
		return fail(err, errlen, "%s holds %llu bytes but its NPY header describes %llu",
			    what, (unsigned long long)len,
			    (unsigned long long)(h.data_off + h.nbytes));
	uint32_t big = 0;
	for (uint32_t i = 0; i < h.ndim; i++)
		big += h.shape[i] > 1;
	if (big > 1)
		return fail(err, errlen, "%s is not 1-D (one label per sample)", what);
	if (h.nelem != n)
		return fail(err, errlen, "%s holds %llu labels for %llu samples", what,
			    (unsigned long long)h.nelem, (unsigned long long)n);
	if (h.dtype == SEER_DT_F16)
		return fail(err, errlen, "%s: float16 labels are not supported", what);
	const uint8_t *p = buf + h.data_off;
	for (uint64_t i = 0; i < n; i++, p += h.itemsize) {
		uint8_t e[8];
		memcpy(e, p, h.itemsize);
		if (h.swap)
			fmt_swap(e, h.itemsize, h.itemsize);
		int64_t v;
		switch (h.dtype) {
		case SEER_DT_BOOL: case SEER_DT_U8: v = e[0]; break;
		case SEER_DT_I8: v = (int8_t)e[0]; break;
		case SEER_DT_U16: { uint16_t x; memcpy(&x, e, 2); v = x; break; }
		case SEER_DT_I16: { int16_t x; memcpy(&x, e, 2); v = x; break; }
		case SEER_DT_U32: { uint32_t x; memcpy(&x, e, 4); v = x; break; }
		case SEER_DT_I32: { int32_t x; memcpy(&x, e, 4); v = x; break; }
		case SEER_DT_I64: memcpy(&v, e, 8); break;
		case SEER_DT_U64: {
			uint64_t x;
			memcpy(&x, e, 8);
			if (x > INT64_MAX)
				return fail(err, errlen, "%s: label %llu of sample %llu exceeds int64",
					    what, (unsigned long long)x, (unsigned long long)i);
			v = (int64_t)x;
			break;
		}
		default: {
			double x;
			if (h.dtype == SEER_DT_F32) {
				float f;
				memcpy(&f, e, 4);
				x = f;
			} else {
				memcpy(&x, e, 8);
			}
			if (!(x >= -9.2e18 && x <= 9.2e18) || x != (double)(int64_t)x)
				return fail(err, errlen, "%s: label %g of sample %llu is not an "
						 "integer", what, x, (unsigned long long)i);
			v = (int64_t)x;
			break;
		}
		}
		out[i] = v;
	}
	return 0;
}

static int npz_labels(int fd, uint64_t size, const struct zip_index *z, const char *name,
		      uint64_t n, int64_t **out, char *err, size_t errlen)
{
	struct zip_entry e;
	bool found;
	char list[512];
	int rc = npz_zip_lookup(z, name, &e, &found, list, sizeof(list), err, errlen);
	if (rc)
		return rc;
	if (!found)
		return fail(err, errlen, "no labels member '%s.npy' (members: %s): set "
				 "dataset.npz_labels to the labels member, or to \"\" for none",
			    name, list);
	struct member m;
	if ((rc = npz_member_open(fd, size, z, &e, &m, err, errlen)) != 0)
		return rc;
	if (m.usize > LABELS_MAX)
		return fail(err, errlen, "labels member '%s' of %llu bytes is too large", name,
			    (unsigned long long)m.usize);
	uint8_t *buf = malloc(MAX((size_t)m.usize, (size_t)1));
	int64_t *lab = malloc(MAX((size_t)n, (size_t)1) * sizeof(int64_t));
	if (!buf || !lab) {
		free(buf);
		free(lab);
		return -ENOMEM;
	}
	char what[128];
	snprintf(what, sizeof(what), "labels member '%.*s'", (int)MIN(e.name_len, 64), e.name);
	rc = npz_member_read_all(fd, &m, buf, err, errlen);
	if (rc == SEER_EDATASET) {
		char inner[256];
		str_copy(inner, sizeof(inner), err);
		fail(err, errlen, "%s: %s", what, inner);
	}
	if (rc == 0)
		rc = labels_decode(buf, m.usize, n, lab, what, err, errlen);
	free(buf);
	if (rc) {
		free(lab);
		return rc;
	}
	*out = lab;
	return 0;
}

static int npz_scan(struct catalog_builder *b, uint32_t file, int fd, uint64_t size)
{
	const struct catalog_params *p = catalog_builder_params(b);
	const char *xname = p->npz_data && *p->npz_data ? p->npz_data : "x";
	const char *yname = p->npz_labels ? p->npz_labels : "y";
	bool last;
	int rc = sample_axis(b, &last);
	if (rc)
		return rc;
	char err[512], list[512], what[128];
	struct zip_index z = { .cd = NULL };
	struct zip_entry e;
	struct member m;
	struct npy_header h;
	int64_t *labels = NULL;
	bool found;
	rc = npz_zip_read_index(fd, size, &z, err, sizeof(err));
	if (rc == 0)
		rc = npz_zip_lookup(&z, xname, &e, &found, list, sizeof(list), err, sizeof(err));
	if (rc == 0 && !found)
		rc = fail(err, sizeof(err), "no data member '%s.npy' (members: %s): set "
			  "dataset.npz_data to the member holding the samples", xname, list);
	if (rc)
		goto out;
	snprintf(what, sizeof(what), "data member '%.*s'", (int)MIN(e.name_len, 64), e.name);
	rc = npz_member_open(fd, size, &z, &e, &m, err, sizeof(err));
	if (rc == 0)
		rc = npz_member_npy_header(fd, &m, &h, err, sizeof(err));
	if (rc == SEER_EDATASET) {
		char inner[512];
		str_copy(inner, sizeof(inner), err);
		fail(err, sizeof(err), "%s: %s", what, inner);
	}
	if (rc)
		goto out;
	struct seer_wire_type t;
	uint64_t bytes, n;
	if ((rc = array_check(b, &h, &m, last, what, &t, &bytes, &n)) != 0) {
		free(z.cd);
		return rc;
	}
	if (*yname && (rc = npz_labels(fd, size, &z, yname, n, &labels, err, sizeof(err))) != 0)
		goto out;
	free(z.cd);
	rc = array_add(b, file, &h, &m, last, &t, bytes, n, labels);
	free(labels);
	return rc;
out:
	free(z.cd);
	free(labels);
	if (rc == SEER_EDATASET)
		catalog_builder_error(b, "%s", err);
	return rc;
}

static int npy_scan(struct catalog_builder *b, uint32_t file, int fd, uint64_t size)
{
	bool last;
	int rc = sample_axis(b, &last);
	if (rc)
		return rc;
	char err[512];
	struct member m = { .off = 0, .csize = size, .usize = size };
	struct npy_header h;
	rc = npz_member_npy_header(fd, &m, &h, err, sizeof(err));
	if (rc == SEER_EDATASET)
		catalog_builder_error(b, "%s", err);
	if (rc)
		return rc;
	struct seer_wire_type t;
	uint64_t bytes, n;
	rc = array_check(b, &h, &m, last, "the file", &t, &bytes, &n);
	return rc ? rc : array_add(b, file, &h, &m, last, &t, bytes, n, NULL);
}

static bool npz_accept(const struct catalog_params *p, const char *relpath)
{
	(void)p;
	return fmt_has_suffix(relpath, ".npz");
}

static bool npy_accept(const struct catalog_params *p, const char *relpath)
{
	(void)p;
	return fmt_has_suffix(relpath, ".npy");
}


const struct fmt_ops fmt_npz = {
	.name = "npz",
	.accept = npz_accept,
	.scan = npz_scan,
	.read = npz_read,
	.shared_new = npz_shared_new,
	.shared_free = npz_shared_free,
	.mem_stats = npz_mem_stats,
	.span = npz_span,
	.cut_many = npz_cut_many,
};

const struct fmt_ops fmt_npy = {
	.name = "npy",
	.accept = npy_accept,
	.scan = npy_scan,
	.read = npz_read,
	.shared_new = npz_shared_new,
	.shared_free = npz_shared_free,
	.mem_stats = npz_mem_stats,
	.span = npz_span,
	.cut_many = npz_cut_many,
};
