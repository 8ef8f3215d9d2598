/* tar archives as WebDataset shards: the header parser and the member walk
 * behind the tar format (src/fmt/tar.c, docs/formats.md "tar").
 *
 * Like every parser of src/fmt/ they read only the bytes they are given (the
 * walk reads the archive through the caller's read function), return
 * SEER_EDATASET with the reason in err[errlen] on malformed input and never
 * abort. Pure functions; a walk belongs to one thread. */
#ifndef SEER_FMT_TAR_H
#define SEER_FMT_TAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TAR_BLOCK 512u
#define TAR_NAME_MAX 4096u  /* longest member path accepted (GNU long name, pax path) */
#define TAR_LABEL_MAX 64u   /* longest label member (an ASCII integer) */

/* One 512-byte header block, as written (long names and pax records are the
 * walk's business). */
struct tar_header {
	bool zero;          /* an all-zero block: the end of the archive */
	char type;          /* typeflag; '\0' (old regular file) is given as '0' */
	uint64_t size;      /* the size field: octal, or GNU base-256 */
	char name[257];     /* name, with the ustar prefix ("prefix/name") when the
			       magic is POSIX ustar; NUL-terminated */
};

/* Parse the header block at the start of buf (len >= TAR_BLOCK, else
 * truncated): checksum (unsigned sum, or the signed sum old tars wrote),
 * numeric fields. */
int tar_parse_header(const void *buf, size_t len, struct tar_header *h, char *err, size_t errlen);

/* The pax extended header records seer uses ("<len> <key>=<value>\n"). */
struct tar_pax {
	bool has_path, has_size;
	uint64_t size;
	char path[TAR_NAME_MAX];
};
/* Parse the records of a pax header's data buf[len] into p (fields found are
 * set; others untouched). Refused: a record that does not parse, a path
 * longer than TAR_NAME_MAX - 1, a size that is not a decimal number, GNU
 * sparse records (a sparse member's data is not its bytes in the archive). */
int tar_parse_pax(const void *buf, size_t len, struct tar_pax *p, char *err, size_t errlen);

/* WebDataset's split of a member path into key and extension: the key is the
 * path up to the first dot of its base name, the extension what follows that
 * dot. false when the base name has no dot (or nothing before it): such a
 * member belongs to no sample. */
bool tar_split_name(const char *name, size_t *keylen, const char **ext);

/* An ASCII integer label ("3", " -7\n"): 0, or SEER_EDATASET. */
int tar_parse_label(const void *buf, size_t len, int64_t *label);

/* ---- walking an archive ------------------------------------------------------- */

/* A member that carries data (a regular file). */
struct tar_member {
	char name[TAR_NAME_MAX]; /* full path: GNU long name, pax path or ustar name */
	uint64_t hdr_off;        /* its own header block (after any long-name/pax headers) */
	uint64_t data_off;       /* first data byte: hdr_off + TAR_BLOCK */
	uint64_t size;
	bool pax_size;           /* size from a pax record, unlike the header's field */
};

/* Reads len bytes at off of the archive: 0, -ENODATA past its end, -errno. */
typedef int (*tar_read_fn)(void *ctx, void *buf, size_t len, uint64_t off);

struct tar_walk {
	tar_read_fn read;
	void *ctx;
	uint64_t size;           /* of the archive */
	uint64_t pos;            /* next header */
	uint8_t *win;            /* read window */
	uint64_t wpos, wlen;
	uint64_t chunk;          /* bytes the next window read takes (adapts: 4 KiB after
				    a large member was passed over, doubled while the
				    headers are dense) */
	uint64_t headers;        /* header blocks parsed (for messages) */
};
#define TAR_WIN (1u << 20)

/* 0 or -ENOMEM. */
int tar_walk_init(struct tar_walk *w, tar_read_fn read, void *ctx, uint64_t size);
void tar_walk_fini(struct tar_walk *w);
/* The next regular-file member into m: 1; 0 at the end of the archive (a zero
 * block, or the end of the file at a member boundary, as Python's tarfile and
 * GNU tar accept); SEER_EDATASET (bad checksum, a member or header cut short
 * by the end of the file, sparse or multi-volume members) or -errno with err
 * naming the offset and, when known, the member. Directories, links and
 * devices are passed over. */
int tar_next(struct tar_walk *w, struct tar_member *m, char *err, size_t errlen);
/* Bytes [off, off + len) of the archive, len <= TAR_WIN, through the window:
 * *p points at them until the next call. 0, SEER_EDATASET past the end, -errno. */
int tar_bytes(struct tar_walk *w, uint64_t off, size_t len, const uint8_t **p, char *err,
	      size_t errlen);

#endif /* SEER_FMT_TAR_H */
