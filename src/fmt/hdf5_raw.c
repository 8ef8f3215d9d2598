/* Chunked HDF5 read without the HDF5 library: datasets whose chunks are all
 * allocated and filtered by deflate and/or shuffle only (the scan sets
 * AUX_RAW: h5py's gzip, DLIO's hdf5 with compression).
 *
 * The first read of a file opens it through HDF5 (under the HDF5 lock, the
 * bytes counted), takes each sample dataset's chunk table (H5Dget_chunk_info:
 * address, stored size, skipped filters) and geometry, closes it, and
 * publishes the table; it is kept until the catalog is freed (16 bytes a
 * chunk). A row is then read as its chunks: pread (counted), inflated
 * (libdeflate, zlib format), unshuffled, copied into the row: on the reader's
 * thread, in parallel with the others, no lock, no open HDF5 file (an open
 * file costs HDF5 about 0.5 MiB, and a file opened again reads its metadata
 * again). Chunks spanning R rows are decoded by bands (the R rows of one
 * chunk row) into the shared decoded cache (mcache.h, prefetch.format_memory),
 * sample-major, so each chunk is inflated once while its band is cached; a
 * band larger than the budget is decoded for each of its rows.
 *
 * Reader threads. The table slots are published with release/acquire; two
 * readers building the same file's table at once serialise on the HDF5 lock
 * and the second finds the first's. */
#define _GNU_SOURCE
#include "hdf5.h"

#include <errno.h>
#include <libdeflate.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "mcache.h"
#include "seer.h"
#include "../util/util.h"

#define fail fmt_fail
#define RAW_MAX_FILTERS 8

struct raw_chunk {
	uint64_t addr;
	uint32_t size;
	uint32_t mask;             /* filters skipped for this chunk (bit i: filter i) */
};

struct raw_dset {
	uint32_t rank, esize, nfilt;
	int filt[RAW_MAX_FILTERS]; /* pipeline order (applied in reverse on read) */
	uint64_t dims[H5_RAW_MAX_RANK], cdims[H5_RAW_MAX_RANK], grid[H5_RAW_MAX_RANK];
	uint64_t cbytes;           /* a decoded chunk */
	uint64_t nchunks;
	struct raw_chunk *chunks;  /* by linear chunk index, row-major over the grid */
};

struct raw_file {
	uint32_t k;
	struct raw_dset d[];
};

struct hdf5_raw {
	struct mcache *mc;         /* decoded bands of chunks spanning several rows */
	uint32_t nfiles;
	_Atomic(struct raw_file *) *f;
	_Atomic uint64_t table_bytes;
};

struct hdf5_raw *hdf5_raw_new(uint32_t nfiles, uint64_t budget)
{
	struct hdf5_raw *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->nfiles = nfiles;
	r->f = calloc(MAX(nfiles, 1u), sizeof(*r->f));
	r->mc = mcache_new(budget);
	if (!r->f || !r->mc) {
		hdf5_raw_free(r);
		return NULL;
	}
	return r;
}

static void raw_file_free(struct raw_file *f)
{
	if (!f)
		return;
	for (uint32_t j = 0; j < f->k; j++)
		free(f->d[j].chunks);
	free(f);
}

void hdf5_raw_free(struct hdf5_raw *r)
{
	if (!r)
		return;
	for (uint32_t i = 0; i < r->nfiles; i++)
		raw_file_free(atomic_load(&r->f[i]));
	if (r->mc)
		mcache_free(r->mc);
	free(r->f);
	free(r);
}

uint64_t hdf5_raw_table_bytes(struct hdf5_raw *r)
{
	return r ? atomic_load(&r->table_bytes) : 0;
}

void hdf5_raw_mem_stats(struct hdf5_raw *r, struct fmt_mem_stats *st)
{
	mcache_stats(r->mc, st);
}

/* The geometry and chunk table of dataset d. Lock held. */
static int table_dset(hid_t d, hid_t mtype, struct raw_dset *t, char *err, size_t errlen)
{
	char h5e[256];
	hid_t sp = H5Dget_space(d), dcpl = H5Dget_create_plist(d);
	int rc = 0, rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
	hsize_t dims[H5S_MAX_RANK], cd[H5S_MAX_RANK];
	if (sp < 0 || dcpl < 0 || rank < 1 || rank > H5_RAW_MAX_RANK ||
	    H5Sget_simple_extent_dims(sp, dims, NULL) != rank || H5Pget_chunk(dcpl, rank, cd) != rank)
		rc = fail(err, errlen, "chunk layout changed since the catalog was built: restart "
				 "seerd to rescan (%s)", hdf5_errmsg(h5e, sizeof(h5e)));
	int nf = rc ? 0 : H5Pget_nfilters(dcpl);
	if (rc == 0 && (nf < 0 || nf > RAW_MAX_FILTERS))
		rc = fail(err, errlen, "filter pipeline changed since the catalog was built: restart "
				 "seerd to rescan");
	t->rank = (uint32_t)MAX(rank, 0);
	t->esize = (uint32_t)H5Tget_size(mtype);
	t->nfilt = (uint32_t)MAX(nf, 0);
	t->cbytes = t->esize;
	t->nchunks = 1;
	for (int i = 0; rc == 0 && i < nf; i++) {
		unsigned flags = 0, conf = 0;
		size_t nelem = 0;
		t->filt[i] = (int)H5Pget_filter2(dcpl, (unsigned)i, &flags, &nelem, NULL, 0, NULL, &conf);
		if (t->filt[i] != H5Z_FILTER_DEFLATE && t->filt[i] != H5Z_FILTER_SHUFFLE)
			rc = fail(err, errlen, "filter pipeline changed since the catalog was built: "
					 "restart seerd to rescan");
	}
	for (int i = 0; rc == 0 && i < rank; i++) {
		if (cd[i] == 0)
			rc = fail(err, errlen, "chunk of 0 elements");
		t->dims[i] = dims[i];
		t->cdims[i] = cd[i];
		t->grid[i] = cd[i] ? (dims[i] + cd[i] - 1) / cd[i] : 0;
		t->cbytes *= cd[i];
		t->nchunks *= t->grid[i];
	}
	hsize_t have = 0;
	if (rc == 0 && (H5Dget_num_chunks(d, sp, &have) < 0 || have != t->nchunks))
		rc = fail(err, errlen, "%llu of %llu chunks allocated: changed since the catalog was "
				 "built? restart seerd to rescan", (unsigned long long)have,
			  (unsigned long long)t->nchunks);
	if (rc == 0 && !(t->chunks = calloc(t->nchunks, sizeof(*t->chunks))))
		rc = -ENOMEM;
	/* by coordinates: an index lookup each (H5Dget_chunk_info walks the
	 * index up to its n-th chunk: quadratic) */
	for (uint64_t lin = 0; rc == 0 && lin < t->nchunks; lin++) {
		hsize_t off[H5S_MAX_RANK];
		uint64_t rest = lin;
		for (int i = rank - 1; i >= 0; i--) {
			off[i] = rest % t->grid[i] * cd[i];
			rest /= t->grid[i];
		}
		unsigned mask = 0;
		haddr_t addr = HADDR_UNDEF;
		hsize_t size = 0;
		if (H5Dget_chunk_info_by_coord(d, off, &mask, &addr, &size) < 0 || addr == HADDR_UNDEF ||
		    size > UINT32_MAX) {
			rc = fail(err, errlen, "chunk %llu: %s", (unsigned long long)lin,
				  hdf5_errmsg(h5e, sizeof(h5e)));
			break;
		}
		t->chunks[lin] = (struct raw_chunk){ .addr = addr, .size = (uint32_t)size, .mask = mask };
	}
	if (dcpl >= 0)
		H5Pclose(dcpl);
	if (sp >= 0)
		H5Sclose(sp);
	H5Eclear2(H5E_DEFAULT);
	return rc;
}

/* The file's tables, built on its first read. */
static int raw_file_get(struct hdf5_raw *r, const struct catalog *c, uint32_t file,
			struct raw_file **out, char *err, size_t errlen)
{
	*out = atomic_load_explicit(&r->f[file], memory_order_acquire);
	if (*out)
		return 0;
	struct fmt_lib_io io;
	fmt_h5_lock();
	fmt_lib_io_begin(&io);
	*out = atomic_load_explicit(&r->f[file], memory_order_acquire);
	int rc = 0;
	struct hdf5_handle h;
	if (!*out)
		rc = hdf5_handle_open(&h, c, file, 0, err, errlen);
	if (!*out && rc == 0) {
		struct raw_file *f = calloc(1, sizeof(*f) + h.k * sizeof(f->d[0]));
		uint64_t bytes = 0;
		rc = f ? 0 : -ENOMEM;
		if (f)
			f->k = h.k;
		for (uint32_t j = 0; rc == 0 && j < h.k; j++) {
			rc = table_dset(h.dset[j], h.mtype[j], &f->d[j], err, errlen);
			bytes += f->d[j].nchunks * sizeof(struct raw_chunk);
		}
		hdf5_handle_close(&h);
		if (rc == 0) {
			atomic_fetch_add(&r->table_bytes, bytes);
			atomic_store_explicit(&r->f[file], f, memory_order_release);
			*out = f;
		} else {
			raw_file_free(f);
		}
	}
	fmt_lib_io_end(&io);
	fmt_h5_unlock();
	return rc;
}

/* Undo the filters the chunk went through (in reverse), into out (cbytes). */
static int decode(struct libdeflate_decompressor *dc, const struct raw_dset *t,
		  const struct raw_chunk *ch, uint8_t *in, uint8_t *tmp, uint8_t **out, char *err,
		  size_t errlen)
{
	uint8_t *cur = in;
	size_t len = ch->size;
	for (int i = (int)t->nfilt - 1; i >= 0; i--) {
		if (ch->mask & (1u << i))
			continue;
		uint8_t *dst = cur == tmp ? in : tmp;
		if (t->filt[i] == H5Z_FILTER_DEFLATE) {
			size_t got = 0;
			enum libdeflate_result lr = libdeflate_zlib_decompress(dc, cur, len, dst,
									      t->cbytes, &got);
			if (lr != LIBDEFLATE_SUCCESS || got != t->cbytes)
				return fail(err, errlen, "inflate failed (%d, %zu of %llu bytes): damaged "
						 "chunk", (int)lr, got, (unsigned long long)t->cbytes);
			len = got;
		} else { /* shuffle: byte b of element e was at b * n + e */
			if (len != t->cbytes)
				return fail(err, errlen, "unshuffle of %zu bytes, chunk has %llu: damaged "
						 "chunk", len, (unsigned long long)t->cbytes);
			size_t n = len / t->esize;
			for (size_t b = 0; b < t->esize; b++)
				for (size_t e = 0; e < n; e++)
					dst[e * t->esize + b] = cur[b * n + e];
			memcpy(dst + n * t->esize, cur + n * t->esize, len - n * t->esize);
		}
		cur = dst;
	}
	if (len != t->cbytes)
		return fail(err, errlen, "chunk holds %zu bytes, %llu expected: damaged chunk", len,
			    (unsigned long long)t->cbytes);
	*out = cur;
	return 0;
}

/* Copy the part of chunk `cc` (grid coordinates, cc[0] the row) that lies in
 * the dataset into the row at dst (dims[1..] in C order). */
static void copy_part(const struct raw_dset *t, const uint64_t *cc, const uint8_t *src, uint8_t *dst)
{
	uint32_t r = t->rank;
	uint64_t ext[H5_RAW_MAX_RANK], sstride[H5_RAW_MAX_RANK], dstride[H5_RAW_MAX_RANK];
	uint64_t ss = t->esize, ds = t->esize;
	for (int i = (int)r - 1; i >= 1; i--) {
		sstride[i] = ss;
		dstride[i] = ds;
		ss *= t->cdims[i];
		ds *= t->dims[i];
		ext[i] = MIN(t->cdims[i], t->dims[i] - cc[i] * t->cdims[i]);
	}
	if (r == 1) { /* a row is one element */
		memcpy(dst, src, t->esize);
		return;
	}
	uint64_t base = 0;
	for (uint32_t i = 1; i < r; i++)
		base += cc[i] * t->cdims[i] * dstride[i];
	uint64_t idx[H5_RAW_MAX_RANK] = { 0 };
	uint64_t run = ext[r - 1] * t->esize;
	for (;;) {
		uint64_t so = 0, dof = base;
		for (uint32_t i = 1; i + 1 < r; i++) {
			so += idx[i] * sstride[i];
			dof += idx[i] * dstride[i];
		}
		memcpy(dst + dof, src + so, run);
		int i = (int)r - 2;
		while (i >= 1 && ++idx[i] == ext[i])
			idx[i--] = 0;
		if (i < 1)
			break;
	}
}

/* Where a band's chunks come from: the file (fd), or the bytes
 * [off, off + len) of it in buf (coalesced reads). */
struct src {
	int fd;
	const uint8_t *buf;
	uint64_t off, len;
};

static int src_get(struct catalog_reader *rd, uint64_t id, const struct src *sr,
		   const struct raw_chunk *ch, uint8_t *in)
{
	if (!sr->buf) {
		int rc = fmt_pread(sr->fd, in, ch->size, ch->addr);
		if (rc == -ENODATA)
			return catalog_read_error(rd, id, SEER_EDATASET, "file shorter than its chunk "
					      "table: restart seerd to rescan");
		return rc;
	}
	if (ch->addr < sr->off || ch->addr - sr->off > sr->len || ch->size > sr->len - (ch->addr - sr->off))
		return catalog_read_error(rd, id, -ERANGE, "chunk at %llu is not inside the bytes "
				      "read (%llu..%llu)", (unsigned long long)ch->addr,
				      (unsigned long long)sr->off,
				      (unsigned long long)(sr->off + sr->len));
	memcpy(in, sr->buf + (ch->addr - sr->off), ch->size);
	return 0;
}

/* Rows [first, first + count) of every dataset -- one band of chunks, all of
 * them inside it -- into dsts[i] (a sample's bytes each); with `only`, just
 * row `only` into dsts[0]. */
static int read_band(struct catalog_reader *rd, uint64_t id, const struct src *sr,
		     const struct raw_file *f, uint64_t first, uint64_t count, uint64_t part,
		     uint64_t only, uint8_t *const *dsts)
{
	char err[400];
	struct libdeflate_decompressor *dc = libdeflate_alloc_decompressor();
	int rc = dc ? 0 : -ENOMEM;
	for (uint32_t j = 0; rc == 0 && j < f->k; j++) {
		const struct raw_dset *t = &f->d[j];
		uint64_t rowbytes = t->esize, sub = t->esize;
		for (uint32_t i = 1; i < t->rank; i++) {
			rowbytes *= t->dims[i];
			sub *= t->cdims[i];
		}
		uint64_t g = first / t->cdims[0];
		if (first + count > t->dims[0] || rowbytes != part || first % t->cdims[0] != 0) {
			rc = catalog_read_error(rd, id, SEER_EDATASET, "dataset shape changed since "
						"the catalog was built: restart seerd to rescan");
			break;
		}
		uint64_t per_row = t->nchunks / t->grid[0], maxc = 0;
		for (uint64_t n = 0; n < per_row; n++)
			maxc = MAX(maxc, (uint64_t)t->chunks[g * per_row + n].size);
		uint8_t *in = fmt_buf_alloc(MAX(maxc, t->cbytes)), *tmp = fmt_buf_alloc(t->cbytes);
		if (!in || !tmp)
			rc = -ENOMEM;
		uint64_t cc[H5_RAW_MAX_RANK] = { g };
		for (uint64_t n = 0; rc == 0 && n < per_row; n++) {
			const struct raw_chunk *ch = &t->chunks[g * per_row + n];
			uint64_t rest = n;
			for (int i = (int)t->rank - 1; i >= 1; i--) {
				cc[i] = rest % t->grid[i];
				rest /= t->grid[i];
			}
			uint8_t *out = NULL;
			rc = src_get(rd, id, sr, ch, in);
			if (rc == 0 && (rc = decode(dc, t, ch, in, tmp, &out, err, sizeof(err))) != 0)
				rc = rc == SEER_EDATASET ?
				     catalog_read_error(rd, id, rc, "dataset %u, chunk at %llu: %s", j,
							(unsigned long long)ch->addr, err) : rc;
			for (uint64_t r = 0; rc == 0 && r < count; r++) {
				if (only != UINT64_MAX && first + r != only)
					continue;
				uint8_t *d = dsts[only != UINT64_MAX ? 0 : r] + j * part;
				copy_part(t, cc, out + r * sub, d);
			}
		}
		fmt_buf_free(in, MAX(maxc, t->cbytes));
		fmt_buf_free(tmp, t->cbytes);
	}
	if (dc)
		libdeflate_free_decompressor(dc);
	return rc;
}

static int raw_sample(struct hdf5_raw *r, struct catalog_reader *rd, uint64_t id,
		      const struct catalog_sample *s, const struct src *sr, void *dst)
{
	const struct catalog *c = rd->cat;
	const struct catalog_file *cf = &c->files[s->file];
	char err[400];
	struct raw_file *f;
	if (s->file >= r->nfiles)
		return catalog_read_error(rd, id, SEER_EDATASET, "catalog entry damaged: rebuild "
				      "the catalog");
	int rc = raw_file_get(r, c, s->file, &f, err, sizeof(err));
	if (rc == SEER_EDATASET)
		return catalog_read_error(rd, id, rc, "%s", err);
	if (rc)
		return rc;
	uint64_t row = id - cf->first, part = s->length / f->k, rows = f->d[0].cdims[0];
	for (uint32_t j = 1; j < f->k; j++)
		if (f->d[j].cdims[0] != rows)
			return catalog_read_error(rd, id, SEER_EDATASET, "chunk layout changed since "
					      "the catalog was built: restart seerd to rescan");
	uint64_t first = row / rows * rows, count = MIN(rows, (uint64_t)cf->nsamples - first);
	uint8_t *one[1] = { dst };
	struct mcache_entry *e = NULL;
	int got = rows > 1 && r->mc ? mcache_acquire(r->mc, s->file, (uint32_t)first,
						    (uint32_t)count, count * s->length, &e) :
		  MC_NOFIT;
	if (got == MC_NOFIT) {
		rc = read_band(rd, id, sr, f, first, count, part, row, one);
	} else {
		if (got == MC_LOAD) {
			uint8_t **dsts = malloc(count * sizeof(*dsts));
			for (uint64_t i = 0; dsts && i < count; i++)
				dsts[i] = e->buf + i * s->length;
			rc = dsts ? read_band(rd, id, sr, f, first, count, part, UINT64_MAX, dsts) :
			     -ENOMEM;
			free(dsts);
			if (rc) {
				mcache_abort(r->mc, e);
				return rc;
			}
			mcache_ready(r->mc, e);
		}
		memcpy(dst, e->buf + (row - first) * s->length, (size_t)s->length);
		mcache_release(r->mc, e);
	}
	if (rc == 0 && (cf->aux[0] & AUX_SWAP))
		fmt_swap(dst, s->length, fmt_dtype_size(c->types[s->type].dtype));
	return rc;
}

int hdf5_raw_read(struct hdf5_raw *r, struct catalog_reader *rd, uint64_t id,
		  const struct catalog_sample *s, void *dst)
{
	int fd = catalog_reader_fd(rd, s->file);
	if (fd < 0)
		return fd;
	const struct src sr = { .fd = fd };
	return raw_sample(r, rd, id, s, &sr, dst);
}

int hdf5_raw_cut(struct hdf5_raw *r, struct catalog_reader *rd, uint64_t id,
		 const struct catalog_sample *s, const uint8_t *buf, uint64_t off, uint64_t len,
		 void *dst)
{
	const struct src sr = { .fd = -1, .buf = buf, .off = off, .len = len };
	return raw_sample(r, rd, id, s, &sr, dst);
}
