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
 * dataset j; LIB: aux[1] = object address of the first dataset. */
#define AUX_SWAP (1ull << 4)

/* The innermost message of HDF5's error stack, which is then cleared. Lock held. */
const char *hdf5_errmsg(char *buf, size_t len);
/* File access properties: no file locking (PFS without locks), a chunk cache
 * of chunk_bytes per dataset. Lock held. */
hid_t hdf5_fapl(uint64_t chunk_bytes);

int hdf5_read(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s, void *dst);
/* Coalesced reads of contiguous datasets (one part): a row is its bytes. */
bool hdf5_span(const struct catalog *c, uint64_t id, const struct catalog_sample *s, uint64_t *lo,
	     uint64_t *hi);
int hdf5_cut(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s, const uint8_t *buf,
	   uint64_t off, uint64_t len, void *dst);
void *hdf5_shared_new(const struct catalog *c);
void hdf5_shared_free(void *shared);
void hdf5_mem_stats(void *shared, struct fmt_mem_stats *st);

#endif /* SEER_FMT_HDF5_H */
