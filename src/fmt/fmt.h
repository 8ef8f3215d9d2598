/* Dataset formats (src/fmt/): the catalog's plug-ins and the parsers behind
 * them. The list of formats is fmt/registry.h; each format lives in its own
 * file(s) and defines `const struct fmt_ops fmt_<name>`.
 *
 * Every parser here reads only the (buffer, length) it is given, whatever the
 * bytes say, so tests and fuzz harnesses can call it directly. On malformed
 * input it returns SEER_EDATASET and writes why into err[errlen] (always
 * terminated); it never aborts. Parsers are pure functions: any thread. See
 * docs/formats.md for what each format delivers as a sample. */
#ifndef SEER_FMT_H
#define SEER_FMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "../catalog/catalog.h"
#include "crc32c.h"
#include "registry.h"

#define FMT_DECLARE(name, desc) extern const struct fmt_ops fmt_##name;
FMT_LIST(FMT_DECLARE)
#undef FMT_DECLARE

/* Known format? (fmt/registry.c, from the list in registry.h) */
const struct fmt_ops *fmt_registry_find(const char *name);
const char *fmt_registry_names(void); /* "files, npz, ..." for messages */

/* Write why into err (printf-style) and return SEER_EDATASET. */
int fmt_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* accept() for formats whose directories also hold *.idx index files. */
bool fmt_not_index(const struct catalog_params *p, const char *relpath);
/* Does s end with suf (case-insensitive), with at least one byte before it? */
bool fmt_has_suffix(const char *s, const char *suf);
/* Byte-swap elements of isz (2, 4 or 8) bytes in place; other sizes: no-op. */
void fmt_swap(uint8_t *p, uint64_t bytes, uint32_t isz);

/* ---- reading dataset files: every byte counted ------------------------------
 * Formats read dataset files only through fmt_pread/fmt_preadv (or count what
 * a library read with fmt_lib_io_*), so the bytes taken from the file system
 * are known exactly: a running count per thread, which catalog_read turns into
 * catalog_reader.last_bytes and the catalog scan into catalog.scan_bytes. */

/* As pread/preadv until done: 0, -ENODATA at the end of the file, -errno.
 * Counts every byte returned, also when the call then fails. */
int fmt_pread(int fd, void *buf, size_t len, uint64_t off);
int fmt_preadv(int fd, struct iovec *iov, int cnt, uint64_t off);
/* Bytes this thread has read through the two above (and counted). */
uint64_t fmt_thread_bytes(void);
void fmt_count_bytes(uint64_t n);

/* Bytes read by a library doing its own I/O (HDF5) between begin and end, on
 * this thread: the change of the thread's read(2) count (/proc/thread-self/io,
 * rchar, less what the accounting itself read from /proc, nested pairs
 * included). end() adds them to the thread's count and returns them; when the
 * kernel does not account per-thread I/O it returns UINT64_MAX and counts
 * nothing (the caller counts what it knows). */
struct fmt_lib_io {
	int64_t start;       /* rchar at begin, -1: unavailable */
	uint64_t self;       /* the thread's /proc bytes at begin (excluded) */
};
void fmt_lib_io_begin(struct fmt_lib_io *io);
uint64_t fmt_lib_io_end(struct fmt_lib_io *io);

/* ---- memory -----------------------------------------------------------------
 * The bytes a catalog's format may hold for decoded data (npz/npy decoded
 * members, the HDF5 chunk caches), shared by all its readers: the process-wide
 * setting (prefetch.format_memory) when the catalog is opened. 0: none kept,
 * every sample decoded on its own. */
#define FMT_MEMORY_DEFAULT (32ull << 20)
void fmt_set_memory(uint64_t bytes);
uint64_t fmt_memory(void);

struct fmt_mem_stats {
	uint64_t limit;        /* the budget */
	uint64_t held, peak;   /* bytes held now, at most */
	uint64_t loads;        /* decoded-cache entries loaded */
	uint64_t loaded_bytes; /* and their bytes */
	uint64_t hits;         /* samples served from a loaded entry */
	uint64_t waits;        /* times a reader waited for another's load or for room */
	uint64_t streamed;     /* samples decoded without the cache */
	uint64_t lib_reads;    /* samples read through a format library (HDF5) */
	uint64_t evictions;
};
/* The catalog's format memory so far (zeros when its format keeps none). */
void fmt_memory_stats(const struct catalog *c, struct fmt_mem_stats *st);

/* Bytes per element of a seer dtype (1 for BYTES); 0 for an invalid code. */
static inline uint32_t fmt_dtype_size(uint32_t dtype)
{
	static const uint8_t size[SEER_DT_COUNT_] = {
		[SEER_DT_BYTES] = 1, [SEER_DT_U8] = 1, [SEER_DT_I8] = 1, [SEER_DT_U16] = 2,
		[SEER_DT_I16] = 2, [SEER_DT_U32] = 4, [SEER_DT_I32] = 4, [SEER_DT_U64] = 8,
		[SEER_DT_I64] = 8, [SEER_DT_F16] = 2, [SEER_DT_F32] = 4, [SEER_DT_F64] = 8,
		[SEER_DT_BOOL] = 1,
	};
	return dtype < SEER_DT_COUNT_ ? size[dtype] : 0;
}

/* Little-endian loads from byte buffers (any alignment). */
static inline uint16_t fmt_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}
static inline uint32_t fmt_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t fmt_le64(const uint8_t *p)
{
	return fmt_le32(p) | (uint64_t)fmt_le32(p + 4) << 32;
}

/* ---- NPY (numpy's .npy, also the members of an .npz) -------------------- */

#define NPY_MAX_DIMS (SEER_MAX_DIMS + 1) /* the sample axis + a sample's dims */
#define NPY_MAX_HEADER (1u << 20)        /* longest header dict accepted */

struct npy_header {
	uint32_t dtype;      /* enum seer_dtype */
	uint32_t itemsize;   /* bytes per element */
	bool swap;           /* stored big-endian: bytes are swapped on delivery */
	bool fortran;        /* column-major element order */
	uint32_t ndim;
	uint64_t shape[NPY_MAX_DIMS];
	uint64_t data_off;   /* from the magic to the first element */
	uint64_t nelem;
	uint64_t nbytes;     /* nelem * itemsize */
};

/* Parse the NPY header at the start of buf. Returns 0; -EAGAIN when buf is
 * shorter than the header, with *need the byte count that holds it; or
 * SEER_EDATASET (bad magic, unsupported version or dtype, a dict that does not
 * parse, a shape whose size overflows). */
int npy_parse_header(const void *buf, size_t len, struct npy_header *h, uint64_t *need,
		     char *err, size_t errlen);

/* ---- zip (the container of an .npz) ------------------------------------- */

#define ZIP_EOCD_LEN 22      /* end of central directory record, no comment */
#define ZIP_EOCD64_LEN 56    /* zip64 end of central directory record */
#define ZIP_TAIL_MAX (ZIP_EOCD_LEN + 65535 + 20) /* tail that surely holds the EOCD */
#define ZIP_LOCAL_LEN 30     /* local file header without name and extra */

struct zip_dir {
	uint64_t nentries;
	uint64_t cd_off;     /* central directory: offset and size in the file */
	uint64_t cd_size;
	uint64_t eocd64_off; /* zip64 record to parse next; UINT64_MAX: none */
};

/* Find the end of central directory in tail, the last len bytes of a file of
 * file_size bytes. When the archive is zip64, d->eocd64_off names the record
 * that zip_parse_eocd64() must complete d from. */
int zip_find_eocd(const void *tail, size_t len, uint64_t file_size, struct zip_dir *d,
		  char *err, size_t errlen);
int zip_parse_eocd64(const void *buf, size_t len, uint64_t file_size, struct zip_dir *d,
		     char *err, size_t errlen);

struct zip_entry {
	const char *name;    /* into the central directory buffer; not terminated */
	uint16_t name_len;
	uint16_t method;     /* 0 stored, 8 deflate (others are rejected by the reader) */
	uint16_t flags;
	uint32_t crc32;
	uint64_t csize;      /* bytes in the file */
	uint64_t usize;      /* bytes once inflated */
	uint64_t lh_off;     /* local header */
};

/* Parse the central directory entry at *pos of cd[len] and advance *pos. */
int zip_next_entry(const void *cd, size_t len, size_t *pos, struct zip_entry *e, char *err,
		   size_t errlen);
/* Check the local header at the start of buf against e and give the member
 * data's offset from that header. buf must hold ZIP_LOCAL_LEN + e->name_len
 * bytes (fewer: SEER_EDATASET). */
int zip_local_data_off(const void *buf, size_t len, const struct zip_entry *e,
		       uint64_t *data_off, char *err, size_t errlen);

/* ---- TFRecord ------------------------------------------------------------- */

#define TFR_HDR_LEN 12    /* u64 length + u32 masked CRC32C of it */
#define TFR_FOOTER_LEN 4  /* u32 masked CRC32C of the payload */

/* Payload length of the record whose header starts buf, its CRC checked. */
int tfrecord_parse_header(const void *buf, size_t len, uint64_t *payload_len, char *err,
		     size_t errlen);

struct tfrecord_extent {
	uint64_t off;        /* of the record header */
	uint64_t len;        /* whole record: header + payload + footer */
};
/* Parse a DALI tfrecord2idx index ("<offset> <size>\n" per record). *out is
 * malloc'd (the caller frees it), NULL when *n is 0. -ENOMEM possible. */
int tfrecord_parse_index(const char *buf, size_t len, struct tfrecord_extent **out, uint64_t *n,
		    char *err, size_t errlen);

/* ---- indexed binary ------------------------------------------------------- */

/* Check n (offset, size) pairs, little-endian u64 arrays as DLIO writes them to
 * <data>.off.idx and <data>.sz.idx, against a data file of data_size bytes;
 * first is the index of off[0] (for messages). */
int indexed_check(const void *off, const void *sz, uint64_t n, uint64_t data_size, uint64_t first,
	      char *err, size_t errlen);

/* ---- HDF5 ---------------------------------------------------------------------
 * Debian's HDF5 is built without thread safety: every H5* call in the process
 * must hold this lock. */
void fmt_h5_lock(void);
void fmt_h5_unlock(void);

#endif /* SEER_FMT_H */
