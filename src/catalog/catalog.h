/* The catalog: every sample of the dataset, in a fixed order.
 *
 * Sample id = position in the catalog: files sorted bytewise by path relative
 * to the dataset root, samples inside a file in file order. Each sample knows
 * its file, where its bytes are, its delivered length, its label and its type
 * (dtype + shape). All sizes and offsets are 64-bit; ids fit 32 bits.
 *
 * A format (struct fmt_ops) decides which files belong to the dataset, what
 * samples a file holds (scan) and how to produce a sample's bytes (read).
 *
 * The catalog can be saved to a cache file and loaded back; a load checks the
 * file's integrity (checksum, every index in range), that the dataset's
 * directories have not changed since (their mtimes; else it is rebuilt) and
 * that every file has the size, mtime and ctime it was scanned with (a stat
 * per file, in parallel; the files that changed are scanned again, the
 * others' entries reused). */
#ifndef SEER_CATALOG_H
#define SEER_CATALOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../proto/seer_proto.h"

struct catalog_file {
	uint64_t size;
	int64_t mtime_ns;
	int64_t ctime_ns;    /* inode change: catches a rewrite whose mtime was put back */
	uint32_t path_off;   /* into catalog.strpool, NUL-terminated */
	uint32_t nsamples;
	uint64_t first;      /* id of its first sample */
	uint64_t aux[4];     /* format-private per-file facts (saved with the catalog) */
};

struct catalog_sample {
	uint64_t offset;     /* format-defined: usually the byte offset in the file */
	uint64_t length;     /* bytes delivered to the trainer */
	uint32_t file;
	uint32_t type;       /* index into catalog.types */
	int64_t label;
};
_Static_assert(sizeof(struct catalog_sample) == 32, "catalog entry stays compact");

/* An image sample's size in pixels, read from its header at catalog build
 * (catalog_probe_images); 0 x 0 when the sample is not a JPEG or PNG image. */
struct catalog_image {
	uint32_t width, height;
};

struct catalog_dir {
	uint32_t path_off;   /* "" for the root */
	uint32_t pad_;
	int64_t mtime_ns;
};

/* Options of the formats; unset strings take the format's default. */
struct catalog_params {
	const char *hdf5_data;     /* dataset name or prefix ("records") */
	const char *hdf5_labels;   /* "labels" */
	const char *npz_data;      /* "x" */
	const char *npz_labels;    /* "y" */
	const char *npz_sample_axis; /* "last" (DLIO) or "first" */
	const char *extensions;    /* comma list filter for the files format; "" = all */
	bool allow_empty_classes;  /* a class directory with no sample: warned, not refused */
	const char *tar_extensions; /* tar: comma list, first present is delivered ("jpg,jpeg,png,webp") */
	const char *tar_label;     /* tar: extension of the label member ("cls"; "" = none) */
	bool skip_corrupt;         /* dataset.on_corrupt = skip: tar leaves damaged samples out of
				      the catalog (warned) instead of failing the scan */
};

struct fmt_ops;
struct fmt_mem_stats;

struct catalog {
	char *root;                /* absolute dataset path, no trailing '/' */
	const struct fmt_ops *fmt;
	uint32_t nfiles;
	struct catalog_file *files;
	uint64_t nsamples;
	struct catalog_sample *samples;
	uint32_t ntypes;
	struct seer_wire_type *types;
	uint32_t ndirs;
	struct catalog_dir *dirs;
	char *strpool;
	uint64_t strpool_len;
	uint32_t nclasses;         /* files format: class directories (0 = flat) */
	uint64_t total_bytes;      /* sum of sample lengths */
	uint64_t max_len;
	uint64_t params_hash;      /* hash of format name + params */
	uint64_t hash;             /* content hash: files, samples, types */
	bool from_cache;           /* loaded from the cache file, not scanned */
	uint64_t skipped_links;    /* scan: links to directories walked before, not followed */
	int64_t scan_ns;           /* wall-clock time the scan started */
	uint64_t scan_bytes;       /* bytes the scan read from dataset files (0 when
				      loaded from the cache file) */
	uint32_t files_scanned;    /* files the build opened and scanned: all, or those
				      the check of a cached catalog found changed (the
				      others' entries reused); 0 when loaded */
	void *fmt_shared;          /* the format's state shared by all readers (its
				      decoded-data cache), or NULL; see fmt_ops */
	struct catalog_image *images;  /* per sample, when probed (catalog_opts.image_sizes),
				      else NULL; saved with the catalog */
};

/* A catalog build seen from another thread (seerd's start-up thread
 * answers `seerctl status` and SIGTERM with it while the main thread
 * builds): counters the build updates, a stop the build obeys. */
struct catalog_progress {
	_Atomic uint64_t listed;   /* files of the dataset found by the walk so far */
	_Atomic uint64_t total;    /* files to scan, once the walk is done (0 before) */
	_Atomic uint64_t scanned;  /* of them, scanned (in catalog order) */
	_Atomic uint64_t check_total; /* files of a cached catalog being checked (0: none) */
	_Atomic uint64_t checked;  /* of them, stat'ed so far */
	_Atomic bool stop;         /* set to stop the build: catalog_open returns -ECANCELED */
};

struct catalog_opts {
	const char *root;
	const char *format;        /* "files", "npz", "npy", "hdf5", "tfrecord", "indexed", "tar" */
	struct catalog_params params;
	const char *cache_dir;     /* where the catalog cache lives; NULL = none */
	bool rebuild;              /* ignore an existing cache file */
	bool progress;             /* log progress of long scans */
	bool image_sizes;          /* also record each sample's image size (the
				      decoded-image cache plans with it) */
	unsigned threads;          /* files scanned at once (open, fstat and the format's
				      header reads; the catalog is the same for any
				      number); 0: CAT_SCAN_THREADS */
	struct catalog_progress *prog; /* NULL, or the build's progress and stop */
};
#define CAT_SCAN_THREADS 16

static inline const char *catalog_path(const struct catalog *c, uint32_t file)
{
	return c->strpool + c->files[file].path_off;
}

/* A path for a message: as is when it fits buf, else its head and tail around
 * "...", so the file name and the reason after it survive. Returns buf. */
#define CAT_PATH_SHOW 128
const char *catalog_path_abbrev(char *buf, size_t len, const char *path);

/* Build (or load from the cache) the catalog. On failure returns a negative
 * errno or SEER_EDATASET with a message naming the path and what to do in err;
 * -ECANCELED when o->prog->stop was set during the build. The files are
 * scanned by o->threads threads (the caller's among them). */
int catalog_open(const struct catalog_opts *o, struct catalog **out, char *err, size_t errlen);
void catalog_free(struct catalog *c);

/* Serialization (exposed for tests and the fuzzer): a self-checking image of
 * the catalog. catalog_deserialize validates every field; it never trusts buf. */
int catalog_serialize(const struct catalog *c, void **buf, size_t *len);
int catalog_deserialize(const void *buf, size_t len, struct catalog **out, char *err, size_t errlen);
/* Read each sample's image size from its header (the first 64 KiB of a
 * file of the files format, else the whole sample) into c->images. A sample
 * that is not a JPEG or PNG image, or cannot be read now, gets 0 x 0 (its
 * read or transform reports it later); *nonimage counts them and `first`
 * (may be NULL) gets the first one's file and reason. 0, or -ENOMEM. */
int catalog_probe_images(struct catalog *c, uint64_t *nonimage, char *first, size_t firstlen);
/* Path of the cache file for these options (malloc'd). */
char *catalog_cache_path(const struct catalog_opts *o);

/* A file or directory whose mtime lies within this much of the scan's start
 * may have changed again within its timestamp's granularity (1 s on
 * Lustre/GPFS) after it was looked at: its mtime proves nothing (git's "racy
 * clean" rule), so it is scanned again at the next start. */
#define CAT_RACY_NS 2000000000ll

/* What a stat of a catalogued file says of its entry (the start-up check of a
 * cached catalog, catalog_check_files). */
enum catalog_file_state {
	CAT_FILE_SAME,      /* size, mtime, ctime as scanned, and scanned safely after it */
	CAT_FILE_SIZE,      /* another size */
	CAT_FILE_MTIME,     /* another mtime (rewritten in place) */
	CAT_FILE_CTIME,     /* same size and mtime, another ctime (mtime put back, chmod, ...) */
	CAT_FILE_RACY,      /* unchanged, but its mtime was within CAT_RACY_NS of the scan */
};
/* The decision alone (pure): entry f, recorded by a scan that started at
 * scan_ns, against a stat now giving size, mtime_ns, ctime_ns. */
enum catalog_file_state catalog_check_file_state(const struct catalog_file *f, uint64_t size,
						 int64_t mtime_ns, int64_t ctime_ns, int64_t scan_ns);

/* ---- reading samples ----------------------------------------------------
 * One reader per thread. It keeps a few files open and whatever per-thread
 * state the format needs. */
#define CAT_FD_CACHE 16
struct catalog_reader {
	const struct catalog *cat;
	unsigned fd_max;           /* files kept open: 1..CAT_FD_CACHE (catalog_reader_limit_fds) */
	int fd[CAT_FD_CACHE];
	uint32_t fd_file[CAT_FD_CACHE];
	uint64_t fd_used[CAT_FD_CACHE];
	uint64_t tick;
	void *fmt_state;           /* owned by the format */
	uint64_t last_bytes;       /* bytes the last catalog_read read from the file system
				      (its own reads; a sample another reader had
				      already decoded costs 0) */
	uint64_t bytes_read;       /* the sum over this reader's life */
	char err[512];             /* why the last read failed */
};

int catalog_reader_init(struct catalog_reader *rd, const struct catalog *c);
void catalog_reader_fini(struct catalog_reader *rd);
/* Keep at most n files open (1..CAT_FD_CACHE; the default is CAT_FD_CACHE):
 * seerd sizes its I/O threads' readers from its file-descriptor limit. A
 * reader whose open fails for want of descriptors (EMFILE, ENFILE) closes
 * the file it would evict for it and tries once more. */
void catalog_reader_limit_fds(struct catalog_reader *rd, unsigned n);
/* Read sample `id` into dst (catalog length bytes). 0, or a negative errno
 * (I/O: -EIO, -ENOENT, ...) or SEER_EDATASET (content does not match the
 * catalog or the format's checks), with rd->err naming file, sample and why.
 * Either way rd->last_bytes says how many bytes it read from the files (the
 * PFS bytes of this read: headers, whole members, retries of its own). */
int catalog_read(struct catalog_reader *rd, uint64_t id, void *dst);
/* ---- coalesced reads: one read of a byte range, several samples cut from it ----
 * (the engine's extents, docs/formats.md "Coalesced reads"). */

/* The bytes of its file that a read of sample `id` takes: [*lo, *hi). false
 * when the format does not read this sample by a byte range of its own (one
 * sample per file, HDF5 through the library, split HDF5 records): it is
 * read alone with catalog_read. Any thread (reads the catalog only). */
bool catalog_span(const struct catalog *c, uint64_t id, uint64_t *lo, uint64_t *hi);
/* Bytes [off, off + len) of the catalog's file `file` into buf, counted like
 * catalog_read (last_bytes, bytes_read). 0, a negative errno (-ESTALE: the file
 * changed) or SEER_EDATASET (the file is shorter), with rd->err saying so. */
int catalog_read_range(struct catalog_reader *rd, uint32_t file, uint64_t off, uint64_t len, void *buf);
/* Cut samples ids[0..n) -- all of file `file`, each with its span inside
 * [off, off + len) -- out of buf, which holds those bytes of the file, into
 * dsts[i] (catalog length bytes each), with every check catalog_read makes (the
 * TFRecord CRCs, the npz member's CRC when it is whole). done(ctx, i, rc,
 * err) once per sample: 0, or SEER_EDATASET / -errno and the message naming
 * the sample and its file. Reads no file. */
typedef void (*catalog_cut_fn)(void *ctx, uint32_t i, int rc, const char *err);
void catalog_cut(struct catalog_reader *rd, uint32_t file, const uint8_t *buf, uint64_t off, uint64_t len,
	     uint32_t n, const uint64_t *ids, void *const *dsts, catalog_cut_fn done, void *ctx);

/* An fd on the catalog's file `file`, kept open by the reader (do not close). */
int catalog_reader_fd(struct catalog_reader *rd, uint32_t file);
/* Drop the reader's fd for `file` (after an I/O error, to reopen fresh). */
void catalog_reader_forget(struct catalog_reader *rd, uint32_t file);

/* ---- for formats ---------------------------------------------------------- */
struct catalog_builder;

struct fmt_ops {
	const char *name;
	/* Does this relative path hold samples? NULL: every regular file. */
	bool (*accept)(const struct catalog_params *p, const char *relpath);
	/* Labels are class directories (catalog_builder_class): the catalog numbers
	 * the root's directories as torchvision's find_classes and refuses one
	 * with no sample (unless catalog_params.allow_empty_classes). */
	bool dir_labels;
	/* Add the samples of file `file` (open on fd, `size` bytes) with
	 * catalog_add_sample(). Return 0, or SEER_EDATASET/-errno with
	 * catalog_builder_error() called to say what is wrong. */
	int (*scan)(struct catalog_builder *b, uint32_t file, int fd, uint64_t size);
	/* Produce sample `id` (catalog entry s) into dst. */
	int (*read)(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s, void *dst);
	/* Free the reader's fmt_state (may be NULL). */
	void (*reader_fini)(struct catalog_reader *rd);
	/* State shared by all readers of a catalog (may be NULL): created when the
	 * catalog is built or loaded (NULL: out of memory), freed with it; must be
	 * safe to use from every reader thread at once. */
	void *(*shared_new)(const struct catalog *c);
	void (*shared_free)(void *shared);
	void (*mem_stats)(void *shared, struct fmt_mem_stats *st);
	/* Coalesced reads (NULL: every sample is read alone). span: the file
	 * bytes sample id's read takes (false: read alone); cut: sample id out
	 * of buf, the file's bytes [off, off + len); cut_many, instead of cut:
	 * several samples of one file at once, when that is cheaper than one by
	 * one (npz: one pass over the member). Both check what read checks and
	 * return its errors (cut_many's apply to every sample it was given). */
	bool (*span)(const struct catalog *c, uint64_t id, const struct catalog_sample *s, uint64_t *lo,
		     uint64_t *hi);
	int (*cut)(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s, const uint8_t *buf,
		   uint64_t off, uint64_t len, void *dst);
	int (*cut_many)(struct catalog_reader *rd, uint32_t file, const uint8_t *buf, uint64_t off,
			uint64_t len, uint32_t n, const uint64_t *ids, void *const *dsts);
};

/* Append a sample of the file being scanned; returns 0 or -ENOMEM/-EOVERFLOW. */
int catalog_add_sample(struct catalog_builder *b, uint32_t file, uint64_t offset, uint64_t length,
		   int64_t label, uint32_t type);
/* Index of a type equal to t, added when new. */
int catalog_intern_type(struct catalog_builder *b, const struct seer_wire_type *t, uint32_t *idx);
/* Per-file aux words for the format. */
uint64_t *catalog_builder_aux(struct catalog_builder *b, uint32_t file);
const struct catalog_params *catalog_builder_params(const struct catalog_builder *b);
const char *catalog_builder_path(const struct catalog_builder *b, uint32_t file); /* relative */
const char *catalog_builder_root(const struct catalog_builder *b);
/* Class label of a relative path: index of its top-level directory among the
 * class directories (every directory of the root, sorted: torchvision's
 * find_classes), 0 for a flat dataset. */
int64_t catalog_builder_class(const struct catalog_builder *b, const char *relpath);
/* Record why the scan failed (printf-style). */
void catalog_builder_error(struct catalog_builder *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Reader-side error (printf-style) naming the file and sample; returns code. */
int catalog_read_error(struct catalog_reader *rd, uint64_t id, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));


#endif /* SEER_CATALOG_H */
