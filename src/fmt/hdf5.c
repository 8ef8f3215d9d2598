/* The hdf5 format: a dataset of shape (n, ...) holds n samples.
 *
 * Names come from dataset.hdf5_data: a dataset of that name, or DLIO's split
 * records_0..records_{k-1} (name as prefix), whose rows i together make sample
 * i, delivered stacked as shape (k, ...). Labels (dataset.hdf5_labels, an
 * integer dataset of n values) are read into the catalog at scan time.
 *
 * Contiguous datasets are located at scan time (H5Dget_offset) and read with
 * plain pread: no HDF5 call and no lock on that path. Chunked or compressed
 * datasets are read row by row through HDF5, under the process-wide HDF5 lock
 * (Debian's HDF5 is not thread-safe), with files kept open per reader. */
#define _GNU_SOURCE
#include "fmt.h"

#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seer.h"
#include "../util.h"

static pthread_mutex_t h5_mu = PTHREAD_MUTEX_INITIALIZER;
static bool h5_quiet;

void fmt_h5_lock(void)
{
	pthread_mutex_lock(&h5_mu);
	if (!h5_quiet) {
		H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* errors come back as messages */
		h5_quiet = true;
	}
}

void fmt_h5_unlock(void)
{
	pthread_mutex_unlock(&h5_mu);
}

#define fail fmt_fail

struct errbuf {
	char *buf;
	size_t len;
};

static herr_t err_walk(unsigned n, const H5E_error2_t *e, void *ctx)
{
	struct errbuf *eb = ctx;
	if (n == 0 && e->desc)
		snprintf(eb->buf, eb->len, "%s", e->desc);
	return 0;
}

/* The innermost message of HDF5's error stack, which is then cleared. Lock held. */
static const char *h5_errmsg(char *buf, size_t len)
{
	struct errbuf eb = { buf, len };
	buf[0] = '\0';
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, err_walk, &eb);
	H5Eclear2(H5E_DEFAULT);
	if (!buf[0])
		str_copy(buf, len, "unknown HDF5 error");
	return buf;
}

/* File access: tolerate file systems without locks; a bigger chunk cache so
 * that chunks holding several samples are decompressed once. */
static hid_t h5_fapl(void)
{
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	if (fapl < 0)
		return fapl;
	H5Pset_file_locking(fapl, true, true);
	H5Pset_cache(fapl, 0, 12421, 16u << 20, 0.75);
	return fapl;
}

static const char *class_name(H5T_class_t c)
{
	switch (c) {
	case H5T_INTEGER: return "integer";
	case H5T_FLOAT: return "float";
	case H5T_TIME: return "time";
	case H5T_STRING: return "string";
	case H5T_BITFIELD: return "bitfield";
	case H5T_OPAQUE: return "opaque";
	case H5T_COMPOUND: return "compound";
	case H5T_REFERENCE: return "reference";
	case H5T_ENUM: return "enum";
	case H5T_VLEN: return "variable-length";
	case H5T_ARRAY: return "array";
	default: return "unknown";
	}
}

/* The seer dtype of an HDF5 type laid out as plain little/big-endian numbers. */
static bool h5_dtype(hid_t t, uint32_t *dt, bool *swap)
{
	H5T_class_t cls = H5Tget_class(t);
	size_t size = H5Tget_size(t);
	*swap = size > 1 && H5Tget_order(t) == H5T_ORDER_BE;
	*dt = SEER_DT_COUNT_;
	if (cls == H5T_INTEGER) {
		if (H5Tget_precision(t) != size * 8 || H5Tget_offset(t) != 0)
			return false;
		bool sgn = H5Tget_sign(t) == H5T_SGN_2;
		switch (size) {
		case 1: *dt = sgn ? SEER_DT_I8 : SEER_DT_U8; break;
		case 2: *dt = sgn ? SEER_DT_I16 : SEER_DT_U16; break;
		case 4: *dt = sgn ? SEER_DT_I32 : SEER_DT_U32; break;
		case 8: *dt = sgn ? SEER_DT_I64 : SEER_DT_U64; break;
		default: return false;
		}
		return true;
	}
	if (cls == H5T_FLOAT) {
		size_t spos, epos, esize, mpos, msize;
		if (H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0 ||
		    H5Tget_offset(t) != 0)
			return false;
		size_t bias = H5Tget_ebias(t);
		if (size == 2 && spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 &&
		    bias == 15)
			*dt = SEER_DT_F16;
		else if (size == 4 && spos == 31 && epos == 23 && esize == 8 && mpos == 0 &&
			 msize == 23 && bias == 127)
			*dt = SEER_DT_F32;
		else if (size == 8 && spos == 63 && epos == 52 && esize == 11 && mpos == 0 &&
			 msize == 52 && bias == 1023)
			*dt = SEER_DT_F64;
		return *dt != SEER_DT_COUNT_;
	}
	if (cls == H5T_ENUM && size == 1 && H5Tget_nmembers(t) == 2) {
		/* h5py stores numpy bool as enum int8 { FALSE = 0, TRUE = 1 } */
		int8_t v0 = -1, v1 = -1;
		if (H5Tget_member_value(t, 0, &v0) < 0 || H5Tget_member_value(t, 1, &v1) < 0)
			return false;
		if (v0 == 0 && v1 == 1) {
			*dt = SEER_DT_BOOL;
			*swap = false;
			return true;
		}
	}
	return false;
}

/* Does path (with '/' separated groups) name an object? Lock held. */
static bool h5_exists(hid_t fid, const char *path)
{
	char buf[1024];
	if (strlen(path) >= sizeof(buf))
		return false;
	strcpy(buf, path);
	for (char *s = buf + (buf[0] == '/'); *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		bool ok = H5Lexists(fid, buf, H5P_DEFAULT) > 0;
		*s = '/';
		if (!ok)
			return false;
	}
	return H5Lexists(fid, path, H5P_DEFAULT) > 0 &&
	       H5Oexists_by_name(fid, path, H5P_DEFAULT) > 0;
}

struct names {
	char *buf;
	size_t len, used;
	unsigned n;
};

static herr_t list_names(hid_t g, const char *name, const H5L_info_t *info, void *ctx)
{
	(void)g;
	(void)info;
	struct names *nm = ctx;
	if (nm->n++ < 12 && nm->used < nm->len)
		nm->used += (size_t)snprintf(nm->buf + nm->used, nm->len - nm->used, "%s'%s'",
					     nm->n > 1 ? ", " : "", name);
	return 0;
}

#define H5_MAX_SPLIT 4096  /* records_0 .. records_4095 */
#define PREAD_MAX_SPLIT 3  /* datasets whose offsets fit the file's aux words */

enum { H5_MODE_PREAD = 1, H5_MODE_LIB = 2 };

struct h5_info {
	uint32_t k;                /* datasets per sample */
	uint32_t mode;
	bool swap;
	uint64_t n;                /* samples */
	uint64_t part;             /* bytes of one row of one dataset */
	struct seer_wire_type type;
	haddr_t addr0;             /* object header of the first dataset */
	uint64_t off[PREAD_MAX_SPLIT];
	int64_t *labels;           /* n, or NULL */
};

/* One sample dataset: shape, type and where its data are. Lock held. */
static int probe_dset(hid_t fid, const char *name, uint64_t fsize, struct h5_info *in,
		      uint32_t j, bool *contig, uint64_t *off, char *err, size_t errlen)
{
	char h5e[256];
	int rc = SEER_EDATASET;
	hid_t d = H5Dopen2(fid, name, H5P_DEFAULT), sp = -1, t = -1, dcpl = -1;
	if (d < 0)
		return fail(err, errlen, "'%s' is not a readable dataset: %s", name,
			    h5_errmsg(h5e, sizeof(h5e)));
	sp = H5Dget_space(d);
	t = H5Dget_type(d);
	dcpl = H5Dget_create_plist(d);
	if (sp < 0 || t < 0 || dcpl < 0) {
		fail(err, errlen, "dataset '%s': %s", name, h5_errmsg(h5e, sizeof(h5e)));
		goto out;
	}
	int rank = H5Sget_simple_extent_ndims(sp);
	hsize_t dims[H5S_MAX_RANK];
	uint32_t max_rank = SEER_MAX_DIMS + (in->k == 1 ? 1 : 0);
	if (rank < 1) {
		fail(err, errlen, "dataset '%s' is a scalar: samples need a shape (n, ...)", name);
		goto out;
	}
	if ((uint32_t)rank > max_rank) {
		fail(err, errlen, "dataset '%s' has %d dimensions, at most %u supported", name, rank,
		     max_rank);
		goto out;
	}
	H5Sget_simple_extent_dims(sp, dims, NULL);
	uint32_t dt;
	bool swap;
	if (!h5_dtype(t, &dt, &swap)) {
		fail(err, errlen, "dataset '%s' has an unsupported %zu-byte %s type (supported: "
		     "integers, IEEE floats, bool)", name, H5Tget_size(t),
		     class_name(H5Tget_class(t)));
		goto out;
	}
	struct seer_wire_type ty = { .dtype = dt };
	uint64_t part = fmt_dtype_size(dt);
	uint32_t o = in->k == 1 ? 0 : 1;
	ty.ndim = (uint32_t)rank - 1 + o;
	if (o)
		ty.dims[0] = in->k;
	for (int i = 1; i < rank; i++) {
		ty.dims[i - 1 + o] = dims[i];
		if (__builtin_mul_overflow(part, (uint64_t)dims[i], &part))
			part = UINT64_MAX;
	}
	if (j == 0) {
		in->n = dims[0];
		in->part = part;
		in->type = ty;
		in->swap = swap;
		H5O_info_t oi;
		if (H5Oget_info2(d, &oi, H5O_INFO_BASIC) < 0) {
			fail(err, errlen, "dataset '%s': %s", name, h5_errmsg(h5e, sizeof(h5e)));
			goto out;
		}
		in->addr0 = oi.addr;
	} else if (dims[0] != in->n || part != in->part ||
		   memcmp(&ty, &in->type, sizeof(ty)) != 0 || swap != in->swap) {
		fail(err, errlen, "dataset '%s' differs in shape or type from the first dataset of "
		     "the split: all parts of a record must match", name);
		goto out;
	}
	if (dims[0] > 0 && (part == 0 || part == UINT64_MAX || dims[0] > UINT32_MAX)) {
		fail(err, errlen, "dataset '%s' holds %llu samples of %llu bytes: unsupported",
		     name, (unsigned long long)dims[0], (unsigned long long)part);
		goto out;
	}
	*contig = false;
	if (H5Pget_layout(dcpl) == H5D_CONTIGUOUS && H5Pget_external_count(dcpl) == 0) {
		haddr_t a = H5Dget_offset(d);
		if (a != HADDR_UNDEF) {
			uint64_t bytes = part * dims[0];
			if (a > fsize || bytes > fsize - a) {
				fail(err, errlen, "dataset '%s': its %llu bytes at offset %llu run past "
				     "the end of the file (%llu bytes): truncated", name,
				     (unsigned long long)bytes, (unsigned long long)a,
				     (unsigned long long)fsize);
				goto out;
			}
			*contig = true;
			*off = a;
		}
	}
	H5Eclear2(H5E_DEFAULT);
	rc = 0;
out:
	if (dcpl >= 0)
		H5Pclose(dcpl);
	if (t >= 0)
		H5Tclose(t);
	if (sp >= 0)
		H5Sclose(sp);
	H5Dclose(d);
	return rc;
}

/* Labels: n integers (or integral floats). Lock held. */
static int probe_labels(hid_t fid, const char *name, struct h5_info *in, char *err, size_t errlen)
{
	char h5e[256];
	if (!h5_exists(fid, name))
		return fail(err, errlen, "no labels dataset '%s': set dataset.hdf5_labels to the "
				 "labels dataset, or to \"\" for none", name);
	int rc = SEER_EDATASET;
	hid_t d = H5Dopen2(fid, name, H5P_DEFAULT), sp = -1, t = -1;
	double *dbl = NULL;
	if (d < 0)
		return fail(err, errlen, "labels '%s' are not a readable dataset: %s", name,
			    h5_errmsg(h5e, sizeof(h5e)));
	sp = H5Dget_space(d);
	t = H5Dget_type(d);
	if (sp < 0 || t < 0) {
		fail(err, errlen, "labels '%s': %s", name, h5_errmsg(h5e, sizeof(h5e)));
		goto out;
	}
	int rank = H5Sget_simple_extent_ndims(sp);
	hsize_t dims[H5S_MAX_RANK];
	H5Sget_simple_extent_dims(sp, dims, NULL);
	uint64_t nelem = 1;
	int big = 0;
	for (int i = 0; i < rank; i++) {
		nelem *= dims[i];
		big += dims[i] > 1;
	}
	if (big > 1) {
		fail(err, errlen, "labels '%s' are not 1-D (one label per sample)", name);
		goto out;
	}
	if (nelem != in->n) {
		fail(err, errlen, "labels '%s' hold %llu values for %llu samples", name,
		     (unsigned long long)nelem, (unsigned long long)in->n);
		goto out;
	}
	H5T_class_t cls = H5Tget_class(t);
	if (cls != H5T_INTEGER && cls != H5T_FLOAT) {
		fail(err, errlen, "labels '%s' have a %s type: need integers", name,
		     class_name(cls));
		goto out;
	}
	in->labels = malloc(MAX(in->n, (uint64_t)1) * sizeof(int64_t));
	if (!in->labels) {
		rc = -ENOMEM;
		goto out;
	}
	if (in->n == 0) {
		rc = 0;
		goto out;
	}
	if (cls == H5T_FLOAT) {
		dbl = malloc(in->n * sizeof(double));
		if (!dbl) {
			rc = -ENOMEM;
			goto out;
		}
		if (H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, dbl) < 0) {
			fail(err, errlen, "labels '%s' do not read: %s", name,
			     h5_errmsg(h5e, sizeof(h5e)));
			goto out;
		}
		for (uint64_t i = 0; i < in->n; i++) {
			double x = dbl[i];
			if (!(x >= -9.2e18 && x <= 9.2e18) || x != (double)(int64_t)x) {
				fail(err, errlen, "labels '%s': label %g of sample %llu is not an "
				     "integer", name, x, (unsigned long long)i);
				goto out;
			}
			in->labels[i] = (int64_t)x;
		}
	} else if (H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, in->labels) < 0) {
		fail(err, errlen, "labels '%s' do not read as int64: %s", name,
		     h5_errmsg(h5e, sizeof(h5e)));
		goto out;
	}
	rc = 0;
out:
	free(dbl);
	if (t >= 0)
		H5Tclose(t);
	if (sp >= 0)
		H5Sclose(sp);
	H5Dclose(d);
	return rc;
}

static int h5_probe(const char *path, const struct cat_params *p, uint64_t fsize,
		    struct h5_info *in, char *err, size_t errlen)
{
	const char *data = p->hdf5_data && *p->hdf5_data ? p->hdf5_data : "records";
	const char *labels = p->hdf5_labels ? p->hdf5_labels : "labels";
	char h5e[256], name[1100];
	int rc = SEER_EDATASET;
	memset(in, 0, sizeof(*in));
	hid_t fapl = h5_fapl();
	hid_t fid = H5Fopen(path, H5F_ACC_RDONLY, fapl);
	if (fid < 0)
		h5_errmsg(h5e, sizeof(h5e)); /* before the next call clears the stack */
	H5Pclose(fapl);
	if (fid < 0)
		return fail(err, errlen, "not a readable HDF5 file: %s", h5e);
	bool split = false;
	if (h5_exists(fid, data)) {
		in->k = 1;
	} else {
		for (in->k = 0; in->k < H5_MAX_SPLIT; in->k++) {
			snprintf(name, sizeof(name), "%s_%u", data, in->k);
			if (!h5_exists(fid, name))
				break;
		}
		split = true;
	}
	if (in->k == 0) {
		char list[512] = "";
		struct names nm = { list, sizeof(list), 0, 0 };
		hsize_t idx = 0;
		H5Literate(fid, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, list_names, &nm);
		H5Eclear2(H5E_DEFAULT);
		fail(err, errlen, "no dataset '%s' nor '%s_0' (top-level objects: %s): set "
		     "dataset.hdf5_data", data, data, nm.n ? list : "none");
		goto out;
	}
	bool all_contig = in->k <= PREAD_MAX_SPLIT;
	for (uint32_t j = 0; j < in->k; j++) {
		if (split)
			snprintf(name, sizeof(name), "%s_%u", data, j);
		else
			str_copy(name, sizeof(name), data);
		bool contig = false;
		uint64_t off = 0;
		if ((rc = probe_dset(fid, name, fsize, in, j, &contig, &off, err, errlen)) != 0)
			goto out;
		rc = SEER_EDATASET;
		all_contig = all_contig && contig;
		if (j < PREAD_MAX_SPLIT)
			in->off[j] = off;
	}
	in->mode = all_contig ? H5_MODE_PREAD : H5_MODE_LIB;
	if (*labels && (rc = probe_labels(fid, labels, in, err, errlen)) != 0)
		goto out;
	rc = 0;
out:
	if (rc) {
		free(in->labels);
		in->labels = NULL;
	}
	H5Fclose(fid);
	H5Eclear2(H5E_DEFAULT);
	return rc;
}

/* aux[0]: mode | swap << 4 | k << 32; PREAD: aux[1 + j] = data offset of
 * dataset j; LIB: aux[1] = object address of the first dataset. */
#define AUX_SWAP (1ull << 4)

static int h5_scan(struct cat_builder *b, uint32_t file, int fd, uint64_t size)
{
	(void)fd;
	char path[PATH_MAX], err[768];
	if (snprintf(path, sizeof(path), "%s/%s", cat_builder_root(b), cat_builder_path(b, file)) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	struct h5_info in;
	fmt_h5_lock();
	int rc = h5_probe(path, cat_builder_params(b), size, &in, err, sizeof(err));
	fmt_h5_unlock();
	if (rc) {
		if (rc == SEER_EDATASET)
			cat_builder_error(b, "%s", err);
		return rc;
	}
	uint32_t type;
	rc = cat_intern_type(b, &in.type, &type);
	uint64_t *aux = cat_builder_aux(b, file);
	aux[0] = in.mode | (in.swap ? AUX_SWAP : 0) | (uint64_t)in.k << 32;
	if (in.mode == H5_MODE_PREAD)
		for (uint32_t j = 0; j < in.k; j++)
			aux[1 + j] = in.off[j];
	else
		aux[1] = in.addr0;
	for (uint64_t i = 0; rc == 0 && i < in.n; i++)
		rc = cat_add_sample(b, file, i * in.part, in.part * in.k,
				    in.labels ? in.labels[i] : -1, type);
	free(in.labels);
	return rc;
}

static bool h5_accept(const struct cat_params *p, const char *relpath)
{
	(void)p;
	const char *dot = strrchr(relpath, '.');
	if (!dot || strchr(dot, '/'))
		return false;
	return strcasecmp(dot, ".h5") == 0 || strcasecmp(dot, ".hdf5") == 0 ||
	       strcasecmp(dot, ".hdf") == 0 || strcasecmp(dot, ".he5") == 0;
}

/* ---- reading through HDF5 ------------------------------------------------------ */

#define H5_OPEN_FILES 4

struct h5_handle {
	bool open;
	uint32_t file;
	uint64_t used;
	hid_t fid;
	uint32_t k;
	hid_t *dset;
	hid_t *mtype;
};

struct h5_state {
	struct h5_handle h[H5_OPEN_FILES];
	uint64_t tick;
};

/* Lock held. */
static void handle_close(struct h5_handle *h)
{
	if (!h->open)
		return;
	for (uint32_t j = 0; j < h->k; j++) {
		if (h->mtype[j] >= 0)
			H5Tclose(h->mtype[j]);
		if (h->dset[j] >= 0)
			H5Dclose(h->dset[j]);
	}
	free(h->dset);
	free(h->mtype);
	H5Fclose(h->fid);
	H5Eclear2(H5E_DEFAULT);
	memset(h, 0, sizeof(*h));
}

struct find_addr {
	haddr_t addr;
	char path[1024];
	bool found;
};

static herr_t visit_find(hid_t o, const char *name, const H5O_info_t *info, void *ctx)
{
	(void)o;
	struct find_addr *fa = ctx;
	if (info->addr == fa->addr && info->type == H5O_TYPE_DATASET) {
		str_copy(fa->path, sizeof(fa->path), name);
		fa->found = true;
		return 1;
	}
	return 0;
}

/* Open the file's sample datasets: the first by address, its split siblings by
 * the name it has in the file. Lock held. */
static int handle_open(struct h5_handle *h, const struct catalog *c, uint32_t file, char *err,
		       size_t errlen)
{
	char path[PATH_MAX], h5e[256];
	const uint64_t *aux = c->files[file].aux;
	uint32_t k = (uint32_t)(aux[0] >> 32);
	if (k == 0 || k > H5_MAX_SPLIT)
		return fail(err, errlen, "catalog entry damaged (%u datasets)", k);
	snprintf(path, sizeof(path), "%s/%s", c->root, cat_path(c, file));
	memset(h, 0, sizeof(*h));
	hid_t fapl = h5_fapl();
	h->fid = H5Fopen(path, H5F_ACC_RDONLY, fapl);
	if (h->fid < 0)
		h5_errmsg(h5e, sizeof(h5e));
	H5Pclose(fapl);
	if (h->fid < 0)
		return fail(err, errlen, "HDF5 open failed: %s", h5e);
	h->open = true;
	h->file = file;
	h->k = k;
	h->dset = malloc(k * sizeof(hid_t));
	h->mtype = malloc(k * sizeof(hid_t));
	if (!h->dset || !h->mtype) {
		handle_close(h);
		return -ENOMEM;
	}
	for (uint32_t j = 0; j < k; j++)
		h->dset[j] = h->mtype[j] = -1;
	h->dset[0] = H5Oopen_by_addr(h->fid, (haddr_t)aux[1]);
	if (h->dset[0] < 0 || H5Iget_type(h->dset[0]) != H5I_DATASET) {
		fail(err, errlen, "the sample dataset is gone from the file (changed since the "
		     "catalog was built?): %s", h5_errmsg(h5e, sizeof(h5e)));
		handle_close(h);
		return SEER_EDATASET;
	}
	if (k > 1) {
		struct find_addr fa = { .addr = (haddr_t)aux[1] };
		H5Ovisit2(h->fid, H5_INDEX_NAME, H5_ITER_NATIVE, visit_find, &fa, H5O_INFO_BASIC);
		size_t n = strlen(fa.path);
		if (!fa.found || n < 2 || strcmp(fa.path + n - 2, "_0") != 0) {
			fail(err, errlen, "cannot find the split datasets <name>_0..%u", k - 1);
			handle_close(h);
			return SEER_EDATASET;
		}
		fa.path[n - 1] = '\0';
		for (uint32_t j = 1; j < k; j++) {
			char name[1100];
			snprintf(name, sizeof(name), "%s%u", fa.path, j);
			h->dset[j] = H5Dopen2(h->fid, name, H5P_DEFAULT);
			if (h->dset[j] < 0) {
				fail(err, errlen, "dataset '%s' does not open: %s", name,
				     h5_errmsg(h5e, sizeof(h5e)));
				handle_close(h);
				return SEER_EDATASET;
			}
		}
	}
	for (uint32_t j = 0; j < k; j++) {
		/* the stored type in little-endian order: HDF5 converts, nothing else */
		hid_t t = H5Dget_type(h->dset[j]);
		h->mtype[j] = t >= 0 ? H5Tcopy(t) : -1;
		if (t >= 0)
			H5Tclose(t);
		if (h->mtype[j] < 0 ||
		    (H5Tget_class(h->mtype[j]) != H5T_ENUM && H5Tget_size(h->mtype[j]) > 1 &&
		     H5Tset_order(h->mtype[j], H5T_ORDER_LE) < 0)) {
			fail(err, errlen, "dataset type: %s", h5_errmsg(h5e, sizeof(h5e)));
			handle_close(h);
			return SEER_EDATASET;
		}
	}
	return 0;
}

/* Read row `row` of every dataset into dst. Lock held. */
static int handle_read(struct h5_handle *h, uint64_t row, uint64_t part, uint8_t *dst,
		       char *err, size_t errlen)
{
	char h5e[256];
	for (uint32_t j = 0; j < h->k; j++) {
		hid_t fs = H5Dget_space(h->dset[j]);
		int rank = fs >= 0 ? H5Sget_simple_extent_ndims(fs) : -1;
		hsize_t dims[H5S_MAX_RANK], start[H5S_MAX_RANK] = { 0 }, count[H5S_MAX_RANK];
		if (rank < 1) {
			if (fs >= 0)
				H5Sclose(fs);
			return fail(err, errlen, "dataset space: %s", h5_errmsg(h5e, sizeof(h5e)));
		}
		H5Sget_simple_extent_dims(fs, dims, NULL);
		uint64_t elems = 1;
		for (int i = 0; i < rank; i++) {
			count[i] = i == 0 ? 1 : dims[i];
			elems *= count[i];
		}
		start[0] = row;
		if (row >= dims[0] || elems * H5Tget_size(h->mtype[j]) != part) {
			H5Sclose(fs);
			return fail(err, errlen, "dataset shape changed since the catalog was built: "
					 "restart seerd to rescan");
		}
		/* the memory space has the selection's shape: HDF5 then maps chunks
		 * directly instead of element by element */
		hid_t ms = H5Screate_simple(rank, count, NULL);
		herr_t r = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
		if (ms >= 0 && r >= 0)
			r = H5Dread(h->dset[j], h->mtype[j], ms, fs, H5P_DEFAULT, dst + j * part);
		if (ms < 0 || r < 0)
			h5_errmsg(h5e, sizeof(h5e)); /* before the next call clears the stack */
		if (ms >= 0)
			H5Sclose(ms);
		H5Sclose(fs);
		if (ms < 0 || r < 0)
			return fail(err, errlen, "HDF5 read of row %llu failed: %s (damaged chunk?)",
				    (unsigned long long)row, h5e);
	}
	return 0;
}

static int h5_read_lib(struct cat_reader *rd, uint64_t id, const struct cat_sample *s,
		       void *dst)
{
	struct h5_state *st = rd->fmt_state;
	if (!st) {
		st = rd->fmt_state = calloc(1, sizeof(*st));
		if (!st)
			return -ENOMEM;
	}
	const struct cat_file *f = &rd->cat->files[s->file];
	uint32_t k = (uint32_t)(f->aux[0] >> 32);
	char err[512];
	int rc = 0;
	fmt_h5_lock();
	struct h5_handle *h = NULL, *victim = &st->h[0];
	for (int i = 0; i < H5_OPEN_FILES; i++) {
		if (st->h[i].open && st->h[i].file == s->file) {
			h = &st->h[i];
			break;
		}
		if (!st->h[i].open || (victim->open && st->h[i].used < victim->used))
			victim = &st->h[i];
	}
	if (!h) {
		handle_close(victim);
		rc = handle_open(victim, rd->cat, s->file, err, sizeof(err));
		if (rc == 0)
			h = victim;
	}
	if (h) {
		h->used = ++st->tick;
		rc = handle_read(h, id - f->first, s->length / k, dst, err, sizeof(err));
		if (rc)
			handle_close(h);
	}
	fmt_h5_unlock();
	if (rc == SEER_EDATASET)
		return cat_read_error(rd, id, rc, "%s", err);
	return rc;
}

static int h5_read(struct cat_reader *rd, uint64_t id, const struct cat_sample *s, void *dst)
{
	const struct cat_file *f = &rd->cat->files[s->file];
	uint32_t mode = f->aux[0] & 0xf, k = (uint32_t)(f->aux[0] >> 32);
	if (k == 0 || s->length % k != 0 || (mode == H5_MODE_PREAD && k > PREAD_MAX_SPLIT) ||
	    (mode != H5_MODE_PREAD && mode != H5_MODE_LIB))
		return cat_read_error(rd, id, SEER_EDATASET, "catalog entry damaged: rebuild the "
				      "catalog");
	int fd = cat_reader_fd(rd, s->file); /* also notices a file that changed size */
	if (fd < 0)
		return fd;
	if (mode == H5_MODE_LIB)
		return h5_read_lib(rd, id, s, dst);
	uint64_t part = s->length / k;
	for (uint32_t j = 0; j < k; j++) {
		int rc = pread_full(fd, (uint8_t *)dst + j * part, (size_t)part, f->aux[1 + j] + s->offset);
		if (rc == -ENODATA)
			return cat_read_error(rd, id, SEER_EDATASET, "file shorter than its catalogued "
					      "layout: restart seerd to rescan");
		if (rc)
			return rc;
	}
	if (f->aux[0] & AUX_SWAP) {
		uint32_t isz = fmt_dtype_size(rd->cat->types[s->type].dtype);
		uint8_t *p = dst;
		for (uint64_t i = 0; isz > 1 && i + isz <= s->length; i += isz)
			for (uint32_t a = 0, b = isz - 1; a < b; a++, b--) {
				uint8_t x = p[i + a];
				p[i + a] = p[i + b];
				p[i + b] = x;
			}
	}
	return 0;
}

static void h5_reader_fini(struct cat_reader *rd)
{
	struct h5_state *st = rd->fmt_state;
	if (!st)
		return;
	fmt_h5_lock();
	for (int i = 0; i < H5_OPEN_FILES; i++)
		handle_close(&st->h[i]);
	fmt_h5_unlock();
	free(st);
	rd->fmt_state = NULL;
}

const struct fmt_ops fmt_hdf5 = {
	.name = "hdf5",
	.accept = h5_accept,
	.scan = h5_scan,
	.read = h5_read,
	.reader_fini = h5_reader_fini,
};
