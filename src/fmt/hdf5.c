/* The hdf5 format: a dataset of shape (n, ...) holds n samples.
 *
 * Names come from dataset.hdf5_data: a dataset of that name, or DLIO's split
 * records_0..records_{k-1} (name as prefix), whose rows i together make sample
 * i, delivered stacked as shape (k, ...). Labels (dataset.hdf5_labels, an
 * integer dataset of n values) are read into the catalog at scan time.
 *
 * Contiguous datasets are located at scan time (H5Dget_offset) and read with
 * plain pread: no HDF5 call and no lock on that path. Chunked datasets
 * filtered by deflate/shuffle only are read by seer from their chunk tables
 * (hdf5_raw.c); other chunked or compressed datasets row by row through HDF5
 * (hdf5_read.c), under the process-wide HDF5 lock (Debian's HDF5 is not
 * thread-safe: "Threadsafety: no" in libhdf5.settings). Every filter of a
 * dataset read must be available at scan, else the file is refused.
 *
 * This file: the lock, HDF5's errors, types, and the catalog scan (on the
 * catalog-building thread; the bytes HDF5 reads are counted, fmt_lib_io). */
#define _GNU_SOURCE
#include "hdf5.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seer.h"
#include "../util/util.h"

static pthread_mutex_t hdf5_mu = PTHREAD_MUTEX_INITIALIZER;
static bool hdf5_quiet;

void fmt_h5_lock(void)
{
	pthread_mutex_lock(&hdf5_mu);
	if (!hdf5_quiet) {
		H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* errors come back as messages */
		/* HDF5 keeps what it frees on its own free lists, unbounded by
		 * default: files opened again and again grew seerd by 50 MiB */
		H5set_free_list_limits(1 << 20, 256 << 10, 1 << 20, 256 << 10, 1 << 20, 256 << 10);
		hdf5_quiet = true;
	}
}

void fmt_h5_unlock(void)
{
	pthread_mutex_unlock(&hdf5_mu);
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

const char *hdf5_errmsg(char *buf, size_t len)
{
	struct errbuf eb = { buf, len };
	buf[0] = '\0';
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, err_walk, &eb);
	H5Eclear2(H5E_DEFAULT);
	if (!buf[0])
		str_copy(buf, len, "unknown HDF5 error");
	return buf;
}

hid_t hdf5_fapl(uint64_t chunk_bytes, size_t nchunks)
{
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	if (fapl < 0)
		return fapl;
	H5Pset_file_locking(fapl, true, true);
	/* a chunk's slot is its index modulo the slots: as many as chunks, no
	 * two chunks of a file evict each other (8 bytes each, per dataset);
	 * no cache, no slots */
	H5Pset_cache(fapl, 0, chunk_bytes ? MAX(nchunks + 1, (size_t)521) : 1, (size_t)chunk_bytes,
		     0.75);
	H5Pset_sieve_buf_size(fapl, 4096); /* HDF5's 64 KiB per open file: metadata reads */
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
static bool hdf5_dtype(hid_t t, uint32_t *dt, bool *swap)
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
static bool hdf5_exists(hid_t fid, const char *path)
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

struct hdf5_info {
	uint32_t k;                /* datasets per sample */
	uint32_t mode;
	bool swap;
	uint64_t n;                /* samples */
	uint64_t part;             /* bytes of one row of one dataset */
	struct seer_wire_type type;
	haddr_t addr0;             /* object header of the first dataset */
	uint64_t chunk_bytes;      /* chunked: bytes of one chunk of the first dataset */
	uint64_t nchunks;          /* and its chunks */
	uint64_t chunk_rows;       /* and the rows (samples) one chunk spans */
	bool raw;                  /* every dataset readable by hdf5_raw.c */
	uint64_t *band;            /* one dataset, raw: per chunk row, its span (H5_SPAN_*) */
	uint64_t off[PREAD_MAX_SPLIT];
	int64_t *labels;           /* n, or NULL */
};

/* Close a dataset with its space and type (either may be < 0); returns rc. Lock held. */
static int close_dset(hid_t d, hid_t sp, hid_t t, int rc)
{
	if (t >= 0)
		H5Tclose(t);
	if (sp >= 0)
		H5Sclose(sp);
	H5Dclose(d);
	return rc;
}

/* The shape and type of a sample dataset: the sample type (stacked for a
 * split record), the bytes of one row. Lock held. */
static int dset_shape(const char *name, hid_t sp, hid_t t, const struct hdf5_info *in,
		      struct seer_wire_type *ty, uint64_t *rows, uint64_t *part, bool *swap,
		      char *err, size_t errlen)
{
	int rank = H5Sget_simple_extent_ndims(sp);
	hsize_t dims[H5S_MAX_RANK];
	uint32_t max_rank = SEER_MAX_DIMS + (in->k == 1 ? 1 : 0);
	if (rank < 1)
		return fail(err, errlen, "dataset '%s' is a scalar: samples need a shape (n, ...)",
			    name);
	if ((uint32_t)rank > max_rank)
		return fail(err, errlen, "dataset '%s' has %d dimensions, at most %u supported",
			    name, rank, max_rank);
	H5Sget_simple_extent_dims(sp, dims, NULL);
	uint32_t dt;
	if (!hdf5_dtype(t, &dt, swap))
		return fail(err, errlen, "dataset '%s' has an unsupported %zu-byte %s type "
				 "(supported: integers, IEEE floats, bool)", name, H5Tget_size(t),
			    class_name(H5Tget_class(t)));
	*ty = (struct seer_wire_type){ .dtype = dt };
	*part = fmt_dtype_size(dt);
	uint32_t o = in->k == 1 ? 0 : 1;
	ty->ndim = (uint32_t)rank - 1 + o;
	if (o)
		ty->dims[0] = in->k;
	for (int i = 1; i < rank; i++) {
		ty->dims[i - 1 + o] = dims[i];
		if (__builtin_mul_overflow(*part, (uint64_t)dims[i], part))
			*part = UINT64_MAX;
	}
	*rows = dims[0];
	if (*rows > 0 && (*part == 0 || *part == UINT64_MAX || *rows > UINT32_MAX))
		return fail(err, errlen, "dataset '%s' holds %llu samples of %llu bytes: "
				 "unsupported", name, (unsigned long long)*rows,
			    (unsigned long long)*part);
	return 0;
}

/* Filters HDF5 finds only as plugins, and what brings them on Debian. */
static const struct {
	H5Z_filter_t id;
	const char *name, *deb;
} plugin_filters[] = {
	{ 307, "BZIP2", "hdf5-filter-plugin" },
	{ 32000, "LZF", "hdf5-plugin-lzf" },
	{ 32001, "Blosc", "hdf5-filter-plugin-blosc-serial" },
	{ 32004, "LZ4", "hdf5-filter-plugin" },
	{ 32008, "bitshuffle", "hdf5-filter-plugin" },
	{ 32013, "ZFP", "hdf5-filter-plugin-zfp-serial" },
	{ 32015, "Zstandard", NULL },
	{ 32017, "SZ", NULL },
	{ 32026, "Blosc2", NULL },
};

/* Debian's hdf5-plugin-lzf calls liblzf without linking it (no DT_NEEDED):
 * HDF5's dlopen of the plugin fails unless liblzf1 is already loaded. Load it
 * globally once and ask again. Lock held. */
static bool lzf_preload(void)
{
	static bool tried;
	if (!tried) {
		tried = true;
		if (!dlopen("liblzf.so.1", RTLD_NOW | RTLD_GLOBAL))
			return false;
	}
	bool ok = H5Zfilter_avail(32000) > 0;
	H5Eclear2(H5E_DEFAULT);
	return ok;
}

/* Is every filter of the pipeline available (built in, or a plugin that
 * loads)? A missing one is refused here, at scan, naming the dataset, the
 * filter and what brings it, instead of failing every read. Lock held. */
static int check_filters(const char *name, hid_t dcpl, char *err, size_t errlen)
{
	int nf = H5Pget_nfilters(dcpl);
	for (int i = 0; i < nf; i++) {
		char fname[128] = "";
		unsigned flags = 0, conf = 0;
		size_t nelem = 0;
		H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &nelem, NULL,
						 sizeof(fname), fname, &conf);
		if (id < 0 || H5Zfilter_avail(id) > 0 || (id == 32000 && lzf_preload()))
			continue;
		H5Eclear2(H5E_DEFAULT);
		const char *known = NULL, *deb = NULL;
		for (size_t j = 0; j < sizeof(plugin_filters) / sizeof(plugin_filters[0]); j++)
			if (plugin_filters[j].id == id) {
				known = plugin_filters[j].name;
				deb = plugin_filters[j].deb;
			}
		char dir[512] = "";
		if (H5PLget(0, dir, sizeof(dir)) < 0)
			dir[0] = '\0';
		H5Eclear2(H5E_DEFAULT);
		char bring[256];
		if (deb)
			snprintf(bring, sizeof(bring), "install the Debian package %s, or put the "
				 "filter's plugin in a directory named by HDF5_PLUGIN_PATH", deb);
		else
			snprintf(bring, sizeof(bring), "put the filter's plugin in a directory named "
				 "by HDF5_PLUGIN_PATH");
		return fail(err, errlen, "dataset '%s' is compressed with HDF5 filter %d (%s), "
				 "which this HDF5 does not have (plugins searched in %s): %s, "
				 "or rewrite the file with gzip", name, (int)id,
			    known ? known : fname[0] ? fname : "unknown",
			    dir[0] ? dir : "HDF5_PLUGIN_PATH or HDF5's default directory", bring);
	}
	return 0;
}

/* Can hdf5_raw.c read this dataset: every chunk allocated, as many rows a
 * chunk as the first dataset's, only deflate and shuffle? Lock held. */
static bool dset_raw_ok(hid_t d, hid_t dcpl, hid_t sp, uint64_t nchunks, uint64_t rows)
{
	hsize_t cd[H5S_MAX_RANK], have = 0;
	int rank = H5Sget_simple_extent_ndims(sp);
	if (H5Pget_layout(dcpl) != H5D_CHUNKED || rank < 1 || rank > H5_RAW_MAX_RANK ||
	    H5Pget_chunk(dcpl, rank, cd) != rank || cd[0] != rows)
		return false;
	int nf = H5Pget_nfilters(dcpl);
	for (int i = 0; i < nf; i++) {
		unsigned flags = 0, conf = 0;
		size_t nelem = 0;
		H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &nelem, NULL, 0, NULL,
						 &conf);
		if (id != H5Z_FILTER_DEFLATE && id != H5Z_FILTER_SHUFFLE)
			return false;
	}
	bool ok = H5Dget_num_chunks(d, sp, &have) >= 0 && have == nchunks;
	H5Eclear2(H5E_DEFAULT);
	return ok;
}

/* The bytes of the file each band (chunk row) of a raw dataset lies in, for
 * coalesced reads: in->band[g] = lo | 4 KiB units << 48; none (band NULL)
 * when a band's chunks lie far apart (its span over 1.25x their bytes) or
 * the numbers do not fit. Lock held. */
static void dset_bands(hid_t d, hid_t dcpl, hid_t sp, struct hdf5_info *in)
{
	hsize_t dims[H5S_MAX_RANK], cd[H5S_MAX_RANK], grid[H5S_MAX_RANK];
	int rank = H5Sget_simple_extent_ndims(sp);
	if (rank < 1 || rank > H5S_MAX_RANK || H5Sget_simple_extent_dims(sp, dims, NULL) != rank ||
	    H5Pget_chunk(dcpl, rank, cd) != rank)
		return;
	uint64_t per_row = 1;
	for (int i = 0; i < rank; i++) {
		grid[i] = (dims[i] + cd[i] - 1) / cd[i];
		per_row *= i ? grid[i] : 1;
	}
	uint64_t *band = malloc(MAX(grid[0], (hsize_t)1) * sizeof(*band));
	for (uint64_t g = 0; band && g < grid[0]; g++) {
		uint64_t lo = UINT64_MAX, hi = 0, stored = 0;
		for (uint64_t n = 0; n < per_row; n++) {
			hsize_t off[H5S_MAX_RANK], size = 0;
			uint64_t rest = n;
			for (int i = rank - 1; i >= 1; i--) {
				off[i] = rest % grid[i] * cd[i];
				rest /= grid[i];
			}
			off[0] = g * cd[0];
			unsigned mask = 0;
			haddr_t addr = HADDR_UNDEF;
			if (H5Dget_chunk_info_by_coord(d, off, &mask, &addr, &size) < 0 ||
			    addr == HADDR_UNDEF) {
				lo = UINT64_MAX;
				break;
			}
			lo = MIN(lo, (uint64_t)addr);
			hi = MAX(hi, (uint64_t)addr + size);
			stored += size;
		}
		uint64_t units = lo < hi ? (hi - lo + H5_SPAN_UNIT - 1) / H5_SPAN_UNIT : 0;
		if (lo >= H5_SPAN_LO_MAX || units == 0 || units > H5_SPAN_UNITS_MAX ||
		    hi - lo > stored + stored / 4 + H5_SPAN_UNIT) {
			free(band);
			band = NULL;
			break;
		}
		band[g] = lo | units << 48;
	}
	H5Eclear2(H5E_DEFAULT);
	in->band = band;
}

/* The chunk geometry of a chunked dataset (zeros otherwise). Lock held. */
static void dset_chunks(hid_t dcpl, hid_t sp, hid_t t, struct hdf5_info *in)
{
	hsize_t dims[H5S_MAX_RANK], cd[H5S_MAX_RANK];
	int rank = H5Sget_simple_extent_ndims(sp);
	if (H5Pget_layout(dcpl) != H5D_CHUNKED || rank < 1 || H5Pget_chunk(dcpl, rank, cd) != rank ||
	    H5Sget_simple_extent_dims(sp, dims, NULL) != rank) {
		H5Eclear2(H5E_DEFAULT);
		return;
	}
	uint64_t bytes = H5Tget_size(t), n = 1;
	for (int i = 0; i < rank; i++) {
		if (cd[i] == 0)
			return;
		bytes *= cd[i];
		n *= (dims[i] + cd[i] - 1) / cd[i];
	}
	in->chunk_bytes = bytes;
	in->nchunks = n;
	in->chunk_rows = cd[0];
}

/* Where a contiguous dataset's bytes are (*contig false otherwise). Lock held. */
static int dset_place(const char *name, hid_t d, hid_t dcpl, uint64_t bytes, uint64_t fsize,
		      bool *contig, uint64_t *off, char *err, size_t errlen)
{
	*contig = false;
	if (H5Pget_layout(dcpl) != H5D_CONTIGUOUS || H5Pget_external_count(dcpl) != 0)
		return 0;
	haddr_t a = H5Dget_offset(d);
	if (a == HADDR_UNDEF)
		return 0;
	if (a > fsize || bytes > fsize - a)
		return fail(err, errlen, "dataset '%s': its %llu bytes at offset %llu run past the "
				 "end of the file (%llu bytes): truncated", name,
			    (unsigned long long)bytes, (unsigned long long)a,
			    (unsigned long long)fsize);
	*contig = true;
	*off = a;
	return 0;
}

/* One sample dataset (part j of a split record): shape, type and where its
 * data are; the first one sets what the others must match. Lock held. */
static int probe_dset(hid_t fid, const char *name, uint64_t fsize, struct hdf5_info *in,
		      uint32_t j, bool *contig, uint64_t *off, char *err, size_t errlen)
{
	char h5e[256];
	hid_t d = H5Dopen2(fid, name, H5P_DEFAULT);
	if (d < 0)
		return fail(err, errlen, "'%s' is not a readable dataset: %s", name,
			    hdf5_errmsg(h5e, sizeof(h5e)));
	hid_t sp = H5Dget_space(d), t = H5Dget_type(d), dcpl = H5Dget_create_plist(d);
	struct seer_wire_type ty;
	uint64_t rows = 0, part = 0;
	bool swap = false;
	int rc = 0;
	if (sp < 0 || t < 0 || dcpl < 0)
		rc = fail(err, errlen, "dataset '%s': %s", name, hdf5_errmsg(h5e, sizeof(h5e)));
	if (rc == 0)
		rc = dset_shape(name, sp, t, in, &ty, &rows, &part, &swap, err, errlen);
	H5O_info_t oi;
	if (rc == 0 && j == 0 && H5Oget_info2(d, &oi, H5O_INFO_BASIC) < 0)
		rc = fail(err, errlen, "dataset '%s': %s", name, hdf5_errmsg(h5e, sizeof(h5e)));
	if (rc == 0 && j == 0) {
		in->n = rows;
		in->part = part;
		in->type = ty;
		in->swap = swap;
		in->addr0 = oi.addr;
	} else if (rc == 0 && (rows != in->n || part != in->part ||
			       memcmp(&ty, &in->type, sizeof(ty)) != 0 || swap != in->swap)) {
		rc = fail(err, errlen, "dataset '%s' differs in shape or type from the first dataset "
			  "of the split: all parts of a record must match", name);
	}
	if (rc == 0)
		rc = check_filters(name, dcpl, err, errlen);
	if (rc == 0 && j == 0) {
		dset_chunks(dcpl, sp, t, in);
		in->raw = true;
	}
	if (rc == 0)
		in->raw = in->raw && in->nchunks && dset_raw_ok(d, dcpl, sp, in->nchunks,
								       in->chunk_rows);
	if (rc == 0 && j == 0 && in->k == 1 && in->raw)
		dset_bands(d, dcpl, sp, in);
	if (rc == 0)
		rc = dset_place(name, d, dcpl, part * rows, fsize, contig, off, err, errlen);
	H5Eclear2(H5E_DEFAULT);
	if (dcpl >= 0)
		H5Pclose(dcpl);
	return close_dset(d, sp, t, rc);
}

/* n labels as int64 from dataset d of class cls (integral floats accepted).
 * Lock held. */
static int read_labels(hid_t d, H5T_class_t cls, const char *name, struct hdf5_info *in,
		       char *err, size_t errlen)
{
	char h5e[256];
	in->labels = malloc(MAX(in->n, (uint64_t)1) * sizeof(int64_t));
	if (!in->labels)
		return -ENOMEM;
	if (in->n == 0)
		return 0;
	if (cls != H5T_FLOAT) {
		if (H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, in->labels) < 0)
			return fail(err, errlen, "labels '%s' do not read as int64: %s", name,
				    hdf5_errmsg(h5e, sizeof(h5e)));
		return 0;
	}
	double *dbl = malloc(in->n * sizeof(double));
	if (!dbl)
		return -ENOMEM;
	int rc = 0;
	if (H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, dbl) < 0)
		rc = fail(err, errlen, "labels '%s' do not read: %s", name,
			  hdf5_errmsg(h5e, sizeof(h5e)));
	for (uint64_t i = 0; rc == 0 && i < in->n; i++) {
		double x = dbl[i];
		if (!(x >= -9.2e18 && x <= 9.2e18) || x != (double)(int64_t)x)
			rc = fail(err, errlen, "labels '%s': label %g of sample %llu is not an "
				  "integer", name, x, (unsigned long long)i);
		else
			in->labels[i] = (int64_t)x;
	}
	free(dbl);
	return rc;
}

/* Labels: n integers (or integral floats). Lock held. */
static int probe_labels(hid_t fid, const char *name, struct hdf5_info *in, char *err, size_t errlen)
{
	char h5e[256];
	if (!hdf5_exists(fid, name))
		return fail(err, errlen, "no labels dataset '%s': set dataset.hdf5_labels to the "
				 "labels dataset, or to \"\" for none", name);
	hid_t d = H5Dopen2(fid, name, H5P_DEFAULT);
	if (d < 0)
		return fail(err, errlen, "labels '%s' are not a readable dataset: %s", name,
			    hdf5_errmsg(h5e, sizeof(h5e)));
	hid_t sp = H5Dget_space(d), t = H5Dget_type(d);
	int rc = 0;
	if (sp < 0 || t < 0)
		rc = fail(err, errlen, "labels '%s': %s", name, hdf5_errmsg(h5e, sizeof(h5e)));
	int rank = rc ? 0 : H5Sget_simple_extent_ndims(sp);
	hsize_t dims[H5S_MAX_RANK];
	if (rc == 0)
		H5Sget_simple_extent_dims(sp, dims, NULL);
	uint64_t nelem = 1;
	int big = 0;
	for (int i = 0; i < rank; i++) {
		nelem *= dims[i];
		big += dims[i] > 1;
	}
	H5T_class_t cls = rc ? H5T_NO_CLASS : H5Tget_class(t);
	if (rc == 0 && big > 1)
		rc = fail(err, errlen, "labels '%s' are not 1-D (one label per sample)", name);
	if (rc == 0 && nelem != in->n)
		rc = fail(err, errlen, "labels '%s' hold %llu values for %llu samples", name,
			  (unsigned long long)nelem, (unsigned long long)in->n);
	if (rc == 0 && cls != H5T_INTEGER && cls != H5T_FLOAT)
		rc = fail(err, errlen, "labels '%s' have a %s type: need integers", name,
			  class_name(cls));
	hid_t dcpl = rc ? -1 : H5Dget_create_plist(d);
	if (dcpl >= 0) {
		rc = check_filters(name, dcpl, err, errlen);
		H5Pclose(dcpl);
	}
	if (rc == 0)
		rc = read_labels(d, cls, name, in, err, errlen);
	return close_dset(d, sp, t, rc);
}

static int hdf5_probe(const char *path, const struct catalog_params *p, uint64_t fsize,
		    struct hdf5_info *in, char *err, size_t errlen)
{
	const char *data = p->hdf5_data && *p->hdf5_data ? p->hdf5_data : "records";
	const char *labels = p->hdf5_labels ? p->hdf5_labels : "labels";
	char h5e[256], name[1100];
	int rc = SEER_EDATASET;
	memset(in, 0, sizeof(*in));
	hid_t fapl = hdf5_fapl(1u << 20, 0);
	hid_t fid = H5Fopen(path, H5F_ACC_RDONLY, fapl);
	if (fid < 0)
		hdf5_errmsg(h5e, sizeof(h5e)); /* before the next call clears the stack */
	H5Pclose(fapl);
	if (fid < 0)
		return fail(err, errlen, "not a readable HDF5 file: %s", h5e);
	bool split = false;
	if (hdf5_exists(fid, data)) {
		in->k = 1;
	} else {
		for (in->k = 0; in->k < H5_MAX_SPLIT; in->k++) {
			snprintf(name, sizeof(name), "%s_%u", data, in->k);
			if (!hdf5_exists(fid, name))
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
		free(in->band);
		in->band = NULL;
		in->labels = NULL;
	}
	H5Fclose(fid);
	H5Eclear2(H5E_DEFAULT);
	return rc;
}

static int hdf5_scan(struct catalog_builder *b, uint32_t file, int fd, uint64_t size)
{
	(void)fd;
	char path[PATH_MAX], err[768];
	if (snprintf(path, sizeof(path), "%s/%s", catalog_builder_root(b), catalog_builder_path(b, file)) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	struct hdf5_info in;
	struct fmt_lib_io io;
	fmt_h5_lock();
	fmt_lib_io_begin(&io);
	int rc = hdf5_probe(path, catalog_builder_params(b), size, &in, err, sizeof(err));
	fmt_lib_io_end(&io);
	fmt_h5_unlock();
	if (rc) {
		if (rc == SEER_EDATASET)
			catalog_builder_error(b, "%s", err);
		return rc;
	}
	uint32_t type;
	rc = catalog_intern_type(b, &in.type, &type);
	uint64_t *aux = catalog_builder_aux(b, file);
	aux[0] = in.mode | (in.swap ? AUX_SWAP : 0) | (uint64_t)in.k << 32;
	if (in.mode == H5_MODE_PREAD)
		for (uint32_t j = 0; j < in.k; j++)
			aux[1 + j] = in.off[j];
	else {
		aux[1] = in.addr0;
		aux[2] = in.chunk_bytes;
		aux[3] = MIN(in.nchunks, AUX_NCHUNKS_MAX) | MIN(in.chunk_rows, AUX_CROWS_MAX) << 40 |
			 AUX_GEOM;
		if (in.raw && in.nchunks <= AUX_NCHUNKS_MAX)
			aux[0] |= AUX_RAW;
	}
	bool spans = (aux[0] & AUX_RAW) && in.band && in.chunk_rows;
	if (spans)
		aux[0] |= AUX_SPAN;
	for (uint64_t i = 0; rc == 0 && i < in.n; i++)
		rc = catalog_add_sample(b, file, spans ? in.band[i / in.chunk_rows] : i * in.part,
				    in.part * in.k, in.labels ? in.labels[i] : -1, type);
	free(in.labels);
	free(in.band);
	return rc;
}

static bool hdf5_accept(const struct catalog_params *p, const char *relpath)
{
	(void)p;
	const char *dot = strrchr(relpath, '.');
	if (!dot || strchr(dot, '/'))
		return false;
	return strcasecmp(dot, ".h5") == 0 || strcasecmp(dot, ".hdf5") == 0 ||
	       strcasecmp(dot, ".hdf") == 0 || strcasecmp(dot, ".he5") == 0;
}


const struct fmt_ops fmt_hdf5 = {
	.name = "hdf5",
	.accept = hdf5_accept,
	.scan = hdf5_scan,
	.read = hdf5_read,
	.shared_new = hdf5_shared_new,
	.shared_free = hdf5_shared_free,
	.mem_stats = hdf5_mem_stats,
	.span = hdf5_span,
	.cut = hdf5_cut,
};
