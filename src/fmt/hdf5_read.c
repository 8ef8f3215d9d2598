/* Reading hdf5 samples.
 *
 * Contiguous datasets: plain pread at the offsets the scan found, no HDF5
 * call, no lock. Chunked deflate/shuffle ones: hdf5_raw.c. Other chunked or
 * compressed ones: row by row through HDF5, under the process-wide HDF5
 * lock. Since every HDF5 call is serialised anyway, the open files are
 * shared by all readers of the catalog (not one set per reader thread): as
 * many files, each with a chunk cache, as the plan (hdf5_plan.c) fits in
 * prefetch.format_memory, whatever the number of I/O threads. The bytes HDF5
 * reads (chunks, metadata) are counted from the kernel's per-thread count
 * (fmt_lib_io), with the lock held so that they are this read's.
 *
 * Reader threads; the shared handles only under fmt_h5_lock(). */
#define _GNU_SOURCE
#include "hdf5.h"

#include <errno.h>
#include <stdatomic.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "seer.h"
#include "../util/util.h"

#define fail fmt_fail
#define H5_OPEN_MAX 1024 /* files open at once at most (also: descriptors / 4) */

/* The catalog's open files, shared by its readers. Lock held for all of it. */
struct hdf5_shared {
	struct hdf5_handle *h;     /* plan.open of them */
	struct hdf5_plan plan;
	struct hdf5_raw *raw;      /* files whose chunks are read without HDF5 */
	uint64_t tick;
	uint64_t budget;
	uint64_t opens, reads;
	_Atomic uint64_t raw_reads;
};

void hdf5_handle_close(struct hdf5_handle *h)
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


/* A split record's other parts, named like the first (found by its address)
 * with _1.._{k-1}. Lock held. */
static int open_siblings(struct hdf5_handle *h, haddr_t addr, char *err, size_t errlen)
{
	char h5e[256];
	struct find_addr fa = { .addr = addr };
	H5Ovisit2(h->fid, H5_INDEX_NAME, H5_ITER_NATIVE, visit_find, &fa, H5O_INFO_BASIC);
	size_t n = strlen(fa.path);
	if (!fa.found || n < 2 || strcmp(fa.path + n - 2, "_0") != 0)
		return fail(err, errlen, "cannot find the split datasets <name>_0..%u", h->k - 1);
	fa.path[n - 1] = '\0';
	for (uint32_t j = 1; j < h->k; j++) {
		char name[1100];
		snprintf(name, sizeof(name), "%s%u", fa.path, j);
		h->dset[j] = H5Dopen2(h->fid, name, H5P_DEFAULT);
		if (h->dset[j] < 0)
			return fail(err, errlen, "dataset '%s' does not open: %s", name,
				    hdf5_errmsg(h5e, sizeof(h5e)));
	}
	return 0;
}

/* The stored types in little-endian order: HDF5 converts, nothing else. Lock held. */
static int memory_types(struct hdf5_handle *h, char *err, size_t errlen)
{
	char h5e[256];
	for (uint32_t j = 0; j < h->k; j++) {
		hid_t t = H5Dget_type(h->dset[j]);
		h->mtype[j] = t >= 0 ? H5Tcopy(t) : -1;
		if (t >= 0)
			H5Tclose(t);
		if (h->mtype[j] < 0 ||
		    (H5Tget_class(h->mtype[j]) != H5T_ENUM && H5Tget_size(h->mtype[j]) > 1 &&
		     H5Tset_order(h->mtype[j], H5T_ORDER_LE) < 0))
			return fail(err, errlen, "dataset type: %s", hdf5_errmsg(h5e, sizeof(h5e)));
	}
	return 0;
}

/* Open the file's sample datasets: the first by address, its split siblings by
 * the name it has in the file. Lock held. */
int hdf5_handle_open(struct hdf5_handle *h, const struct catalog *c, uint32_t file,
		     uint64_t chunk_bytes, char *err, size_t errlen)
{
	char path[PATH_MAX], h5e[256];
	const uint64_t *aux = c->files[file].aux;
	uint32_t k = (uint32_t)(aux[0] >> 32);
	if (k == 0 || k > H5_MAX_SPLIT)
		return fail(err, errlen, "catalog entry damaged (%u datasets)", k);
	snprintf(path, sizeof(path), "%s/%s", c->root, catalog_path(c, file));
	memset(h, 0, sizeof(*h));
	uint64_t nch = aux[3] & AUX_NCHUNKS_MAX;
	hid_t fapl = hdf5_fapl(chunk_bytes / k, (size_t)MIN(nch, (uint64_t)1 << 24));
	h->fid = H5Fopen(path, H5F_ACC_RDONLY, fapl);
	if (h->fid < 0)
		hdf5_errmsg(h5e, sizeof(h5e));
	H5Pclose(fapl);
	if (h->fid < 0)
		return fail(err, errlen, "HDF5 open failed: %s", h5e);
	h->open = true;
	h->file = file;
	h->k = k;
	h->dset = malloc(k * sizeof(hid_t));
	h->mtype = malloc(k * sizeof(hid_t));
	if (!h->dset || !h->mtype) {
		hdf5_handle_close(h);
		return -ENOMEM;
	}
	for (uint32_t j = 0; j < k; j++)
		h->dset[j] = h->mtype[j] = -1;
	int rc = 0;
	h->dset[0] = H5Oopen_by_addr(h->fid, (haddr_t)aux[1]);
	if (h->dset[0] < 0 || H5Iget_type(h->dset[0]) != H5I_DATASET)
		rc = fail(err, errlen, "the sample dataset is gone from the file (changed since the "
			  "catalog was built?): %s", hdf5_errmsg(h5e, sizeof(h5e)));
	if (rc == 0 && k > 1)
		rc = open_siblings(h, (haddr_t)aux[1], err, errlen);
	if (rc == 0)
		rc = memory_types(h, err, errlen);
	if (rc)
		hdf5_handle_close(h);
	return rc;
}

/* Read row `row` of every dataset into dst. Lock held. */
static int handle_read(struct hdf5_handle *h, uint64_t row, uint64_t part, uint8_t *dst,
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
			return fail(err, errlen, "dataset space: %s", hdf5_errmsg(h5e, sizeof(h5e)));
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
			hdf5_errmsg(h5e, sizeof(h5e)); /* before the next call clears the stack */
		if (ms >= 0)
			H5Sclose(ms);
		H5Sclose(fs);
		if (ms < 0 || r < 0)
			return fail(err, errlen, "HDF5 read of row %llu failed: %s (damaged chunk?)",
				    (unsigned long long)row, h5e);
	}
	return 0;
}

/* The shared handle of the file, opened (evicting the least recently used)
 * when needed. Lock held. */
static int handle_get(struct hdf5_shared *st, const struct catalog *c, uint32_t file,
		      struct hdf5_handle **out, char *err, size_t errlen)
{
	struct hdf5_handle *victim = &st->h[0];
	for (uint32_t i = 0; i < st->plan.open; i++) {
		if (st->h[i].open && st->h[i].file == file) {
			*out = &st->h[i];
			return 0;
		}
		if (!st->h[i].open || (victim->open && st->h[i].used < victim->used))
			victim = &st->h[i];
	}
	hdf5_handle_close(victim);
	int rc = hdf5_handle_open(victim, c, file, st->plan.cache, err, errlen);
	if (rc == 0) {
		st->opens++;
		*out = victim;
	}
	return rc;
}

static int hdf5_read_lib(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s,
		       void *dst)
{
	struct hdf5_shared *st = rd->cat->fmt_shared;
	const struct catalog_file *f = &rd->cat->files[s->file];
	uint32_t k = (uint32_t)(f->aux[0] >> 32);
	char err[512];
	struct hdf5_handle *h = NULL;
	struct fmt_lib_io io;
	fmt_h5_lock();
	fmt_lib_io_begin(&io);
	int rc = handle_get(st, rd->cat, s->file, &h, err, sizeof(err));
	if (rc == 0) {
		h->used = ++st->tick;
		st->reads++;
		rc = handle_read(h, id - f->first, s->length / k, dst, err, sizeof(err));
		if (rc)
			hdf5_handle_close(h);
	}
	if (fmt_lib_io_end(&io) == UINT64_MAX)
		fmt_count_bytes(s->length); /* no per-thread accounting: at least the sample */
	fmt_h5_unlock();
	if (rc == SEER_EDATASET)
		return catalog_read_error(rd, id, rc, "%s", err);
	return rc;
}

int hdf5_read(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s, void *dst)
{
	const struct catalog_file *f = &rd->cat->files[s->file];
	uint32_t mode = f->aux[0] & 0xf, k = (uint32_t)(f->aux[0] >> 32);
	if (k == 0 || s->length % k != 0 || (mode == H5_MODE_PREAD && k > PREAD_MAX_SPLIT) ||
	    (mode != H5_MODE_PREAD && mode != H5_MODE_LIB))
		return catalog_read_error(rd, id, SEER_EDATASET, "catalog entry damaged: rebuild the "
				      "catalog");
	int fd = catalog_reader_fd(rd, s->file); /* also notices a file that changed size */
	if (fd < 0)
		return fd;
	if (mode == H5_MODE_LIB && (f->aux[0] & AUX_RAW)) {
		struct hdf5_shared *st = rd->cat->fmt_shared;
		atomic_fetch_add_explicit(&st->raw_reads, 1, memory_order_relaxed);
		return hdf5_raw_read(st->raw, rd, id, s, dst);
	}
	if (mode == H5_MODE_LIB)
		return hdf5_read_lib(rd, id, s, dst);
	uint64_t part = s->length / k;
	for (uint32_t j = 0; j < k; j++) {
		int rc = fmt_pread(fd, (uint8_t *)dst + j * part, (size_t)part,
				   f->aux[1 + j] + s->offset);
		if (rc == -ENODATA)
			return catalog_read_error(rd, id, SEER_EDATASET, "file shorter than its catalogued "
					      "layout: restart seerd to rescan");
		if (rc)
			return rc;
	}
	if (f->aux[0] & AUX_SWAP)
		fmt_swap(dst, s->length, fmt_dtype_size(rd->cat->types[s->type].dtype));
	return 0;
}

/* Contiguous, one dataset: row k is bytes offset + k * length of the file.
 * Raw chunks (one dataset): the span of the row's band of chunks, from its
 * catalog offset (AUX_SPAN). Split records (parts far apart) and chunks read
 * by HDF5 are read alone. */
bool hdf5_span(const struct catalog *c, uint64_t id, const struct catalog_sample *s, uint64_t *lo,
	     uint64_t *hi)
{
	(void)id;
	const struct catalog_file *f = &c->files[s->file];
	if ((f->aux[0] & 0xf) == H5_MODE_LIB && (f->aux[0] & AUX_SPAN) &&
	    (uint32_t)(f->aux[0] >> 32) == 1) {
		*lo = s->offset & (H5_SPAN_LO_MAX - 1);
		*hi = MIN(*lo + (s->offset >> 48) * H5_SPAN_UNIT, f->size);
		return *hi > *lo;
	}
	if ((f->aux[0] & 0xf) != H5_MODE_PREAD || (uint32_t)(f->aux[0] >> 32) != 1)
		return false;
	*lo = f->aux[1] + s->offset;
	*hi = *lo + s->length;
	return *hi > *lo;
}

int hdf5_cut(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s, const uint8_t *buf,
	   uint64_t off, uint64_t len, void *dst)
{
	uint64_t lo, hi;
	const struct catalog_file *f = &rd->cat->files[s->file];
	if (!hdf5_span(rd->cat, id, s, &lo, &hi) || lo < off || hi - off > len)
		return catalog_read_error(rd, id, -ERANGE, "row is not inside the bytes read "
				      "(%llu..%llu)", (unsigned long long)off,
				      (unsigned long long)(off + len));
	if ((f->aux[0] & 0xf) == H5_MODE_LIB) {
		struct hdf5_shared *st = rd->cat->fmt_shared;
		atomic_fetch_add_explicit(&st->raw_reads, 1, memory_order_relaxed);
		return hdf5_raw_cut(st->raw, rd, id, s, buf, off, len, dst);
	}
	memcpy(dst, buf + (lo - off), (size_t)s->length);
	if (f->aux[0] & AUX_SWAP)
		fmt_swap(dst, s->length, fmt_dtype_size(rd->cat->types[s->type].dtype));
	return 0;
}

/* The chunk bytes of a file read through HDF5 (all its sample datasets) and
 * the rows one chunk spans. A catalog from before the geometry was kept:
 * its samples' bytes, assumed to share chunks. */
static void file_need(const struct catalog *c, const struct catalog_file *f, uint64_t *need,
		      uint64_t *rows)
{
	uint64_t k = f->aux[0] >> 32;
	*need = *rows = 0;
	if (f->nsamples == 0)
		return;
	if (!(f->aux[3] & AUX_GEOM)) {
		*need = f->nsamples * c->samples[f->first].length;
		*rows = 2;
		return;
	}
	*rows = (f->aux[3] & ~AUX_GEOM) >> 40;
	uint64_t nch = f->aux[3] & AUX_NCHUNKS_MAX;
	if (__builtin_mul_overflow(f->aux[2], nch, need) || __builtin_mul_overflow(*need, k, need))
		*need = UINT64_MAX / 4;
}

void *hdf5_shared_new(const struct catalog *c)
{
	struct hdf5_shared *st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	st->budget = fmt_memory();
	struct rlimit rl;
	uint64_t fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ?
		       rl.rlim_cur / 4 : H5_OPEN_MAX;
	struct hdf5_plan_in in = { .budget = st->budget, .file_cost = H5_FILE_COST,
				   .open_cap = (uint32_t)MAX(MIN(fds, (uint64_t)H5_OPEN_MAX), 8) };
	uint64_t raw_total = 0, raw_rows = 0;
	uint32_t raw_files = 0;
	for (uint32_t i = 0; i < c->nfiles; i++) {
		const struct catalog_file *f = &c->files[i];
		uint64_t need, rows;
		if ((f->aux[0] & 0xf) != H5_MODE_LIB)
			continue;
		file_need(c, f, &need, &rows);
		if (f->aux[0] & AUX_RAW) {
			if (rows > 1) {
				raw_total += f->nsamples * c->samples[f->first].length;
				raw_rows = MAX(raw_rows, rows);
				raw_files++;
			}
			continue;
		}
		in.files++;
		in.max_rows = MAX(in.max_rows, rows);
		if (rows > 1) {
			in.max_need = MAX(in.max_need, need);
			in.total_need += need;
		}
	}
	hdf5_plan_make(&in, &st->plan);
	uint64_t lib_mem = in.files ? st->plan.open * (st->plan.cache + H5_FILE_COST) : 0;
	uint64_t raw_budget = st->budget - MIN(st->budget, lib_mem);
	st->h = calloc(st->plan.open, sizeof(*st->h));
	st->raw = hdf5_raw_new(c->nfiles, raw_budget);
	if (!st->h || !st->raw) {
		hdf5_raw_free(st->raw);
		free(st->h);
		free(st);
		return NULL;
	}
	if (raw_total > raw_budget) {
		/* bands of decoded chunks, cached: a fraction f of them at a time */
		double f = (double)raw_budget / (double)raw_total;
		char a[32], b[32], g[32];
		log_warn("dataset %s: %u HDF5 files hold %s in chunks that serve up to %llu samples "
			 "each, more than prefetch.format_memory (%s%s) keeps decoded: in shuffled "
			 "order chunks are read and inflated again, about %.1fx the dataset per epoch. "
			 "Raise prefetch.format_memory to %s to read each chunk once, or write the files "
			 "with one sample per chunk (chunks=(1, ...))", c->root, raw_files,
			 fmt_size(a, sizeof(a), raw_total), (unsigned long long)raw_rows,
			 fmt_size(b, sizeof(b), raw_budget), lib_mem ? " left by the other files" : "",
			 1.0 + (double)(raw_rows - 1) * (1.0 - f),
			 fmt_size(g, sizeof(g), raw_total + raw_total / 16 + lib_mem));
	}
	if (st->plan.rereads) {
		char a[32], b[32], e[32], g[32];
		log_warn("dataset %s: %u chunked HDF5 files hold %s of chunks that serve up to %llu "
			 "samples each; prefetch.format_memory (%s) keeps %u of them open with %s of "
			 "chunk cache each: in shuffled order chunks are read and inflated again, about "
			 "%.1fx the dataset per epoch. Raise prefetch.format_memory to %s to read each "
			 "chunk once, or write the files with one sample per chunk (chunks=(1, ...))",
			 c->root, in.files, fmt_size(a, sizeof(a), in.total_need),
			 (unsigned long long)in.max_rows, fmt_size(b, sizeof(b), st->budget),
			 st->plan.open, fmt_size(e, sizeof(e), st->plan.cache), st->plan.amp,
			 fmt_size(g, sizeof(g), in.total_need + in.total_need / 16 +
					     (uint64_t)in.files * H5_FILE_COST));
	}
	return st;
}

void hdf5_shared_free(void *shared)
{
	struct hdf5_shared *st = shared;
	fmt_h5_lock();
	for (uint32_t i = 0; i < st->plan.open; i++)
		hdf5_handle_close(&st->h[i]);
	fmt_h5_unlock();
	hdf5_raw_free(st->raw);
	free(st->h);
	free(st);
}

void hdf5_mem_stats(void *shared, struct fmt_mem_stats *st)
{
	struct hdf5_shared *s = shared;
	fmt_h5_lock();
	uint64_t held = 0;
	for (uint32_t i = 0; i < s->plan.open; i++)
		held += s->h[i].open ? s->plan.cache : 0;
	held += hdf5_raw_table_bytes(s->raw);
	struct fmt_mem_stats r;
	hdf5_raw_mem_stats(s->raw, &r);
	*st = r;
	st->limit = MAX(s->budget, s->plan.cache);
	st->held += held;
	st->peak += held;
	st->loads += s->opens;
	st->lib_reads = s->reads + atomic_load(&s->raw_reads);
	fmt_h5_unlock();
}
