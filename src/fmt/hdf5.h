/* Internals of the hdf5 format, shared by hdf5.c (the scan, errors, types)
 * and hdf5_read.c (reading). Every H5* call holds fmt_h5_lock() (Debian's
 * HDF5 is not thread-safe); functions marked "lock held" expect it. */
#ifndef SEER_FMT_HDF5_H
#define SEER_FMT_HDF5_H

#include <hdf5.h>
#include <stdbool.h>
#include <stdint.h>

#include "fmt.h"

#define H5_MAX_SPLIT 4096  /* records_0 .. records_4095 */
#define PREAD_MAX_SPLIT 3  /* datasets whose offsets fit the file's aux words */

enum { H5_MODE_PREAD = 1, H5_MODE_LIB = 2 };

/* aux[0]: mode | swap << 4 | k << 32; PREAD: aux[1 + j] = data offset of
 * dataset j; LIB: aux[1] = object address of the first dataset, and when it
 * is chunked aux[2] = bytes of one chunk, aux[3] = its chunks | the rows one
 * chunk spans << 40 | AUX_GEOM (aux[3] 0: a catalog from before, unknown). */
#define AUX_SWAP (1ull << 4)
#define AUX_RAW (1ull << 5)   /* LIB: chunks read by hdf5_raw.c (its conditions) */
#define AUX_SPAN (1ull << 6)  /* RAW, one dataset: a sample's offset is its band's span */
#define H5_RAW_MAX_RANK 8
/* A band's span in a sample's catalog offset: lo | units << 48, units of 4 KiB. */
#define H5_SPAN_UNIT 4096u
#define H5_SPAN_LO_MAX (1ull << 48)
#define H5_SPAN_UNITS_MAX ((1ull << 16) - 1)
#define AUX_NCHUNKS_MAX ((1ull << 40) - 1)
#define AUX_CROWS_MAX ((1ull << 23) - 1)
#define AUX_GEOM (1ull << 63)

/* ---- the open-file and chunk-cache plan (hdf5_plan.c, pure) ----------------
 * Chunked files read through HDF5 share open handles, each file with a chunk
 * cache. A chunk spanning several rows (samples) is inflated once per epoch
 * only if it stays cached from its first sample's read to its last: in
 * shuffled order, for the whole epoch. */
struct hdf5_plan_in {
	uint64_t budget;       /* prefetch.format_memory */
	uint32_t files;        /* files read through HDF5 */
	uint32_t open_cap;     /* files HDF5 may hold open at once (descriptors) */
	uint64_t max_need;     /* largest chunk bytes of one file (all its sample datasets) */
	uint64_t total_need;   /* of all files whose chunks span several rows */
	uint64_t max_rows;     /* most rows one chunk spans (0 or 1: one row at most) */
	uint64_t file_cost;    /* memory of an open file besides its chunk cache */
};
#define H5_FILE_COST (1u << 20) /* charged per open file: 0.54 MiB measured, and arenas */
struct hdf5_plan {
	uint32_t open;         /* files held open at once */
	uint64_t cache;        /* chunk-cache bytes per open file */
	bool rereads;          /* some chunks are read (inflated) again in shuffled order */
	double amp;            /* then: bytes read / dataset, expected in shuffled order */
};
void hdf5_plan_make(const struct hdf5_plan_in *in, struct hdf5_plan *out);

/* The innermost message of HDF5's error stack, which is then cleared. Lock held. */
const char *hdf5_errmsg(char *buf, size_t len);
/* File access properties: no file locking (PFS without locks), a chunk cache
 * of chunk_bytes per dataset, with a slot for each of nchunks chunks. Lock held. */
hid_t hdf5_fapl(uint64_t chunk_bytes, size_t nchunks);

/* A file open through HDF5: its sample datasets (the first by address, split
 * siblings by name) and their little-endian memory types. Lock held. */
struct hdf5_handle {
	bool open;
	uint32_t file;
	uint64_t used;
	hid_t fid;
	uint32_t k;
	hid_t *dset;
	hid_t *mtype;
};
int hdf5_handle_open(struct hdf5_handle *h, const struct catalog *c, uint32_t file,
		     uint64_t chunk_bytes, char *err, size_t errlen);
void hdf5_handle_close(struct hdf5_handle *h);

int hdf5_read(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s, void *dst);
/* Coalesced reads of contiguous datasets (one part): a row is its bytes. */
bool hdf5_span(const struct catalog *c, uint64_t id, const struct catalog_sample *s, uint64_t *lo,
	     uint64_t *hi);
int hdf5_cut(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s, const uint8_t *buf,
	   uint64_t off, uint64_t len, void *dst);
void *hdf5_shared_new(const struct catalog *c);

/* ---- chunks of one row, deflate/shuffle only, read without HDF5 (hdf5_raw.c) ----
 * The first read of a file takes its chunk table from HDF5 (under the lock,
 * once; kept), then every read is a pread of the row's chunks, inflated
 * (libdeflate) and unshuffled on the reader's thread: no lock, no open HDF5
 * file, no metadata read again. */
struct hdf5_raw;
struct hdf5_raw *hdf5_raw_new(uint32_t nfiles, uint64_t budget);
void hdf5_raw_mem_stats(struct hdf5_raw *r, struct fmt_mem_stats *st);
void hdf5_raw_free(struct hdf5_raw *r);
uint64_t hdf5_raw_table_bytes(struct hdf5_raw *r);
int hdf5_raw_read(struct hdf5_raw *r, struct catalog_reader *rd, uint64_t id,
		  const struct catalog_sample *s, void *dst);
/* The same from buf, the file's bytes [off, off + len) holding the sample's
 * band (coalesced reads, AUX_SPAN). */
int hdf5_raw_cut(struct hdf5_raw *r, struct catalog_reader *rd, uint64_t id,
		 const struct catalog_sample *s, const uint8_t *buf, uint64_t off, uint64_t len,
		 void *dst);
void hdf5_shared_free(void *shared);
void hdf5_mem_stats(void *shared, struct fmt_mem_stats *st);

#endif /* SEER_FMT_HDF5_H */
