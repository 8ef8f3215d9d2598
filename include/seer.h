/* seer.h — client API of seer, the clairvoyant data-loading daemon.
 *
 * A trainer connects to the seerd of its node, then takes mini-batches in the
 * order fixed by (seed, epoch, rank, step) and releases them when done:
 *
 *     seer_client_t *c;
 *     if (seer_connect(NULL, &c) < 0) { fprintf(stderr, "%s\n", seer_errmsg()); ... }
 *     for (;;) {
 *             seer_batch_t *b;
 *             int rc = seer_next(c, -1, &b);
 *             if (rc == SEER_EEPOCH) continue;   // epoch boundary
 *             if (rc == SEER_EEND) break;         // job done
 *             if (rc < 0) { ... seer_errmsg() ... }
 *             for (uint32_t i = 0; i < seer_batch_len(b); i++)
 *                     train_on(seer_sample_data(b, i), seer_sample_size(b, i));
 *             seer_release(c, b);
 *     }
 *     seer_close(c);
 *
 * Errors: functions returning int give 0 (or a count) on success and a
 * negative errno or a negative SEER_E* code on failure; seer_strerror()
 * names both, seer_errmsg() gives the detailed message of the calling
 * thread's last failure. The library never aborts or exits the process.
 *
 * Handles: seer_client_t * and seer_batch_t * are opaque handles checked on
 * every call, never dereferenced blindly. NULL, a closed client, a released
 * or stale batch, or anything that is not a handle makes a call fail with
 * -EINVAL (NULL, not a handle), -EBADF (closed) or -ESTALE (a batch handle
 * kept after its batch was released); calls returning a value return its
 * "nothing" value instead (0, NULL, UINT64_MAX, -1 for a label) and set
 * seer_errmsg(). Nothing is freed under a handle that a caller may still
 * pass: seer_close() may be called twice, and any call after it fails
 * cleanly with -EBADF.
 *
 * Threads: a client may be shared by threads. seer_next() and seer_seek()
 * consume its one stream, so one thread at a time: a second thread calling
 * either while the first is inside gets -EBUSY at once (and the first is not
 * disturbed). seer_release(), the accessors and seer_close() may be called
 * from any thread; seer_close() from another thread makes a waiting
 * seer_next() return -EBADF, and returns once no call uses the client.
 * Different clients are independent.
 *
 * fork(): a child process does not inherit the connection. In the child,
 * every client opened before the fork fails with -EBADF (seer_close() frees
 * it); its socket is closed in the child at once, so the daemon sees the rank
 * gone when the parent exits, whatever the child does. The arena stays
 * mapped in the child: data pointers read before the fork remain readable.
 */
#ifndef SEER_H
#define SEER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SEER_API __attribute__((visibility("default")))
#else
#define SEER_API
#endif

#define SEER_VERSION_MAJOR 0
#define SEER_VERSION_MINOR 2

/* Status and error codes, outside errno space. */
#define SEER_EEPOCH (-30801)    /* end of an epoch: the next call starts the next */
#define SEER_EEND (-30802)      /* the job's last batch was delivered */
#define SEER_ESHUTDOWN (-30803) /* the daemon is stopping (drain or SIGTERM) */
#define SEER_EPROTO (-30804)    /* protocol mismatch or malformed message */
#define SEER_EREFUSED (-30805)  /* the daemon refused the connection; see seer_errmsg() */
#define SEER_EBATCH (-30806)    /* the batch could not be loaded; see seer_batch_error() */
#define SEER_ECONFIG (-30807)   /* invalid configuration */
#define SEER_EDATASET (-30808)  /* dataset missing, empty, changed or corrupt */
#define SEER_ENOTHELD (-30809)  /* release of a batch this client does not hold */
#define SEER_EEVICTED (-30810)  /* the daemon disconnected this trainer */
#define SEER_EDAEMON (-30811)   /* seerd went away without stopping the job (crashed, killed) */

/* Sample element types (seer_sample_dtype). */
#define SEER_MAX_DIMS 8 /* dims of a sample's shape, at most */
enum seer_dtype_code {
	SEER_DTYPE_BYTES = 0, /* opaque bytes: an encoded image, a serialized record */
	SEER_DTYPE_U8, SEER_DTYPE_I8, SEER_DTYPE_U16, SEER_DTYPE_I16,
	SEER_DTYPE_U32, SEER_DTYPE_I32, SEER_DTYPE_U64, SEER_DTYPE_I64,
	SEER_DTYPE_F16, SEER_DTYPE_F32, SEER_DTYPE_F64, SEER_DTYPE_BOOL,
};

typedef struct seer_client seer_client_t;
typedef struct seer_batch seer_batch_t;

/* Connection options. A zeroed struct (or NULL) means: socket from
 * $SEER_SOCKET or derived from the job id, job id from $SEER_JOB_ID or
 * $SLURM_JOB_ID, rank and world size from the launcher's environment
 * (SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/SIZE, RANK/WORLD_SIZE),
 * start where this rank's previous session stopped (epoch 0, step 0 for a
 * new job), or where the daemon's saved positions say ([job] resume = auto). */
typedef struct seer_options {
	const char *socket_path;
	const char *job_id;
	int rank;           /* used when world_size > 0 */
	int world_size;     /* 0: rank and world size from the environment */
	unsigned flags;     /* SEER_OPT_* */
	uint64_t start_epoch; /* with SEER_OPT_START_AT */
	uint64_t start_step;
	int connect_timeout_ms; /* 0: $SEER_CONNECT_TIMEOUT_MS or 30000; retries a missing socket */
	/* A checkpoint record (seer_state()'s bytes, saved with the model): the
	 * stream starts right after the batches it says were consumed, with this
	 * or another world size (docs/resume.md). NULL: none. Every rank of a job
	 * gives the same record (each rank's own, or one rank's: DDP ranks move
	 * in lockstep). The library copies it; seerd refuses one of another job,
	 * naming both values (SEER_EDATASET, SEER_ECONFIG). */
	const void *record;
	size_t record_len;
	int reconnect_ms;   /* with SEER_OPT_RECONNECT: how long seer_next waits for a
			       restarted seerd (0: 60000) */
	/* Batches this trainer may hold at once (taken and not yet released),
	 * told to seerd at connect: 0 = seerd's [job] max_held. A binding that
	 * takes batches ahead of its user (a prefetching pipeline: TorchLoader
	 * with workers) declares them all. seerd accepts it when its batch
	 * slots and the trainer's staging fit that many, else refuses the
	 * connect naming what to raise (SEER_EREFUSED). */
	int max_held;
	/* The job's definition as this trainer's script declares it (the
	 * DataLoader's arguments), told to seerd at connect. A field counts only
	 * with its SEER_JOB_* bit in `job` (0: take all of seerd's). A seerd
	 * whose config leaves a key unset (one node, [job] world_size unset)
	 * takes it from the first trainer; a value that differs from what
	 * seerd's config set, or from what an earlier trainer of the job set,
	 * is refused with SEER_ECONFIG, seer_errmsg() naming both values and
	 * where each came from. dataset is the dataset's path as the trainer
	 * sees it (the library resolves it to an absolute path); seerd compares
	 * it with its [dataset] path (the same file, or the same path). */
	unsigned job;       /* SEER_JOB_* */
	uint32_t batch_size;
	uint64_t seed;
	uint64_t epochs;
	int shuffle;        /* 0 or 1 */
	int drop_last;      /* 0 or 1 */
	const char *dataset;
} seer_options_t;

#define SEER_JOB_BATCH_SIZE 1u
#define SEER_JOB_SHUFFLE 2u
#define SEER_JOB_DROP_LAST 4u
#define SEER_JOB_SEED 8u
#define SEER_JOB_EPOCHS 16u
#define SEER_JOB_DATASET 32u

#define SEER_OPT_START_AT 1u /* start at (start_epoch, start_step) */
/* When seerd goes away (crashed, killed, or stopped with its trainers still
 * running), seer_next connects again to the same socket, presenting this
 * rank's position, and the stream continues exactly where it was: the caller
 * sees a delay, not an error. Batches held at that moment are released with
 * the old session (seer_release returns 0; their data stays readable until
 * seer_close). Off by default: a stopped job then ends at once with
 * SEER_ESHUTDOWN / SEER_EDAEMON instead of waiting for a restart. */
#define SEER_OPT_RECONNECT 2u
/* The caller takes batches ahead of its user (a prefetching binding): a
 * batch counts as given to the user -- for seer_state() and for the position
 * a reconnect continues from -- only once seer_handed() says so, in stream
 * order. At a reconnect, batches taken and not handed are dropped (their
 * handles go stale; releasing them returns 0) and the new session delivers
 * them again, starting right after the last batch handed. Without this
 * flag every batch seer_next returns is handed at once. */
#define SEER_OPT_TAKE_AHEAD 4u

/* Connect to the node's daemon. On success *out is a client to free with
 * seer_close(). On failure returns a negative code; seer_errmsg() says why
 * (e.g. "no seerd at /run/user/1000/seer-u-42.sock: start seerd ...").
 *
 * The default socket is seer-<user>-<job id>.sock in $SEER_RUNTIME_DIR, else
 * in $XDG_RUNTIME_DIR when that is the user's own private directory, else in
 * ${TMPDIR:-/tmp}/seer-<uid>, which must be a directory of the user's with
 * mode 0700 (-EPERM otherwise: someone else could pose as seerd there).
 * Whatever the path, the daemon must run as the same user or root
 * (SO_PEERCRED); another user's daemon is refused with -EPERM. Every step
 * (retrying a socket not there yet, the handshake) ends within the connect
 * timeout: -ETIMEDOUT against a stopped daemon. Returns -EINVAL for bad
 * options (out NULL, rank outside [0, world), unknown flags, job id over 63
 * characters), -ENAMETOOLONG for a socket path over 107 bytes. */
SEER_API int seer_connect(const seer_options_t *opts, seer_client_t **out);

/* The socket seer_connect uses when seer_options_t gives no path:
 * $SEER_SOCKET, else the default one of job_id (NULL: $SEER_JOB_ID /
 * $SLURM_JOB_ID / "default"). 0 with the path in buf, or a negative code with
 * seer_errmsg() saying why (e.g. no private directory). */
SEER_API int seer_socket_path(const char *job_id, char *buf, size_t cap);

/* ---- checkpoints (docs/checkpoint.md) ----------------------------------
 *
 * The trainer hands a checkpoint to the node's seerd: it asks for `size`
 * bytes of shared memory, fills them, commits, and goes on; seerd writes
 * them to the node's NVMe at once and drains them to `path` on the PFS in
 * the background (a temporary name beside it, fsync, rename: a reader never
 * sees a partial file at `path`). Works with or without a seer_client_t
 * (same options: socket and job id; rank fields unused).
 *
 *     seer_ckpt_t *k;
 *     if (seer_ckpt_begin(NULL, "/pfs/run/ckpt_100.pt", n, -1, &k) < 0) ...
 *     memcpy(seer_ckpt_data(k), bytes, n);
 *     seer_ckpt_commit(k);                  // the trainer goes on
 *     ...
 *     seer_ckpt_wait(k, SEER_CKPT_PFS, -1); // durable at the path
 *     seer_ckpt_close(k);
 *
 * A seer_ckpt_t is used by one thread at a time. */
typedef struct seer_ckpt seer_ckpt_t;

/* Levels of durability (seer_ckpt_wait, seer_ckpt_state). */
#define SEER_CKPT_MEMORY 0 /* committed: the bytes are in seerd's shared memory */
#define SEER_CKPT_LOCAL 1  /* complete and fsync'd on this node's NVMe */
#define SEER_CKPT_PEER 2   /* a second node holds a copy (not built yet: -ENOTSUP) */
#define SEER_CKPT_PFS 3    /* complete at its path, fsync'd, renamed into place */
/* States of one level (seer_ckpt_state). */
#define SEER_CKPT_PENDING 0
#define SEER_CKPT_DONE 1
#define SEER_CKPT_FAILED 2 /* seer_errmsg() says why; seerd retries a PFS drain */
#define SEER_CKPT_OFF 3    /* not used: no NVMe tier (or no room), no peers */
#define SEER_CKPT_PRUNED 4 /* was complete; its NVMe copy was removed by retention */

/* Ask seerd for `size` bytes of shared memory for a checkpoint to be
 * written to `path` (absolute; its directory must exist). Waits up to
 * timeout_ms (< 0: for ever) while seerd's [checkpoint] memory is full,
 * then fails with -ENOMEM naming the key to raise; -ENOMEM at once when
 * size exceeds the whole budget. *out: a handle to fill through
 * seer_ckpt_data() and commit; free it with seer_ckpt_close(). */
SEER_API int seer_ckpt_begin(const seer_options_t *opts, const char *path, uint64_t size,
			     int timeout_ms, seer_ckpt_t **out);
/* The writable shared bytes (seer_ckpt_size() of them); valid until
 * seer_ckpt_commit() or seer_ckpt_close(). NULL after either. */
SEER_API void *seer_ckpt_data(seer_ckpt_t *k);
SEER_API uint64_t seer_ckpt_size(seer_ckpt_t *k);
/* seerd's checkpoint id (0 before a begin succeeded). */
SEER_API uint64_t seer_ckpt_id(seer_ckpt_t *k);
/* Hand the bytes to seerd: they are unmapped here, seerd writes them. */
SEER_API int seer_ckpt_commit(seer_ckpt_t *k);
/* The same for the first `len` bytes only (1 .. seer_ckpt_size()): a caller
 * that asked for an upper bound of its size. */
SEER_API int seer_ckpt_commit_len(seer_ckpt_t *k, uint64_t len);
/* Wait until the checkpoint is durable at `level` (SEER_CKPT_LOCAL, _PFS):
 * 0; -ETIMEDOUT after timeout_ms (< 0: for ever); -EIO when that level
 * failed (a PFS write: seer_errmsg() says why; the copy stays on NVMe and
 * seerd retries); -ENOTSUP for a level seerd does not use (no NVMe tier, no
 * peers); -ENOENT when seerd no longer knows it. A seerd that restarts in
 * the meantime is asked again (it finds its NVMe copies). */
SEER_API int seer_ckpt_wait(seer_ckpt_t *k, int level, int timeout_ms);
/* The state of one level (SEER_CKPT_PENDING ... _PRUNED), or a negative
 * error; *drained (may be NULL): bytes written to the PFS so far. */
SEER_API int seer_ckpt_state(seer_ckpt_t *k, int level, uint64_t *drained);
/* Free the handle. Before its commit this abandons the checkpoint. */
SEER_API void seer_ckpt_close(seer_ckpt_t *k);
/* Read back: a read-only fd of the newest complete copy of `path` seerd
 * holds (*size bytes, the first of the file: a copy still in memory may be
 * longer; *level: SEER_CKPT_LOCAL for its NVMe copy, SEER_CKPT_MEMORY while
 * only in memory). -ENOENT when seerd holds none
 * (read `path` on the PFS); the errors of a failed connect when no seerd
 * answers (within the connect timeout: 0 in opts means 2000 ms here). The
 * caller closes the fd. */
SEER_API int seer_ckpt_open(const seer_options_t *opts, const char *path, int *fd,
			    uint64_t *size, int *level);

/* Close the connection; every batch handle becomes stale. Batches still
 * held are NOT counted as done: seerd keeps this rank's position at the first
 * batch it did not release (a restarted trainer gets the held ones again,
 * docs/resume.md), except once the job's last batch was handed, when the
 * held batches are released (the rank finished). NULL or an already closed
 * client: nothing happens. */
SEER_API void seer_close(seer_client_t *c);

/* Take the next batch, waiting up to timeout_ms (< 0: forever, 0: poll).
 * Returns 0 with *out set, SEER_EEPOCH once after the last batch of each
 * epoch, SEER_EEND after the job's last batch, -ETIMEDOUT, SEER_ESHUTDOWN,
 * or SEER_EBATCH with *out set to a failed batch (seer_batch_error() says
 * which sample and why; release it like any other). -EBUSY when another
 * thread is in seer_next/seer_seek on this client, -EBADF when the client is
 * closed (also by another thread while this call waits). A trainer may hold
 * (take and not yet release) up to seerd's [job] max_held batches at once
 * (default 2: double buffering), which its staging is checked to fit;
 * holding more works while staging has room, and when the batches it holds
 * are what keeps the next one from being prepared, seer_next fails at once
 * with -EDEADLK instead of waiting for ever: release one and call again. */
SEER_API int seer_next(seer_client_t *c, int timeout_ms, seer_batch_t **out);

/* Give a batch back (from any thread). Every pointer obtained from it
 * becomes invalid, and so does the handle: releasing it again gives
 * SEER_ENOTHELD, or -ESTALE once its slot carries a newer batch (which stays
 * held by whoever took it). -EBADF on a closed client or in a fork child. */
SEER_API int seer_release(seer_client_t *c, seer_batch_t *b);

/* With SEER_OPT_TAKE_AHEAD: batch b (taken with seer_next, held) reached
 * the user. Batches are handed in stream order: b must be the first batch
 * taken and not yet handed (-EINVAL otherwise, naming both). -ESTALE for a
 * batch of a session a reconnect replaced. Without the flag: 0, nothing to
 * do (seer_next handed it). */
SEER_API int seer_handed(seer_client_t *c, seer_batch_t *b);

/* This rank's position as a checkpoint record: the batches handed to the
 * user (by seer_next; by seer_handed with SEER_OPT_TAKE_AHEAD) are consumed
 * (the StatefulDataLoader convention: save it with the model after the step
 * on the last batch). Returns the record's size in
 * bytes and writes it to buf when cap is at least that (seer_record_decode
 * reads it; seer_options_t.record resumes from it). -EBUSY while another
 * thread is in seer_next on this client. */
SEER_API int64_t seer_state(seer_client_t *c, void *buf, size_t cap);

/* Restart this trainer's stream at (epoch, step); releases held batches.
 * Returns 0, -ERANGE when the position is past the job's end, -EBUSY when
 * another thread is in seer_next/seer_seek on this client. The
 * daemon's answer is awaited for at most the connect timeout: -ETIMEDOUT
 * then, and the client is unusable afterwards (-EPIPE: its stream position
 * is unknown; close it and connect again). */
SEER_API int seer_seek(seer_client_t *c, uint64_t epoch, uint64_t step);

/* Batch accessors. A batch and everything read from it is valid until it is
 * released (or the client closed); after that the accessors return their
 * "nothing" value (a released batch's data pointers stay mapped until
 * seer_close, but their bytes may change). Sample data is mapped read-only:
 * writing through the pointer faults. seer_batch_error() returns NULL when
 * the batch is fine, its reason when it failed, and a fixed message for a
 * handle that is not a held batch. */
SEER_API uint32_t seer_batch_len(const seer_batch_t *b);
SEER_API uint64_t seer_batch_epoch(const seer_batch_t *b);
SEER_API uint64_t seer_batch_step(const seer_batch_t *b);
SEER_API const char *seer_batch_error(const seer_batch_t *b); /* NULL if fine */

SEER_API const void *seer_sample_data(const seer_batch_t *b, uint32_t i);
SEER_API uint64_t seer_sample_size(const seer_batch_t *b, uint32_t i);
SEER_API int64_t seer_sample_label(const seer_batch_t *b, uint32_t i);
SEER_API uint64_t seer_sample_id(const seer_batch_t *b, uint32_t i);
SEER_API int seer_sample_dtype(const seer_batch_t *b, uint32_t i);
/* Writes up to maxdims dims; returns ndim (0 for opaque bytes). */
SEER_API int seer_sample_shape(const seer_batch_t *b, uint32_t i, uint64_t *dims, int maxdims);

/* The batch as one tensor, when the job decodes images ([transform] decode =
 * image): the whole batch is one C-contiguous, read-only block of
 * seer_batch_len(b) fixed-shape samples, `*data` its first byte:
 *   layout SEER_LAYOUT_NCHW: dims [n, 3, H, W], dtype SEER_DTYPE_F32 or F16;
 *   layout SEER_LAYOUT_NHWC: dims [n, H, W, 3], dtype SEER_DTYPE_U8.
 * Sample i starts at data + i * (dims[1] * dims[2] * dims[3] * element size),
 * which is also seer_sample_data(b, i) (its shape and dtype are the
 * per-sample type's: seer_sample_shape/dtype); labels and ids as for any
 * batch. Returns ndim (4) and writes up to maxdims dims; 0 with *data NULL,
 * *dtype SEER_DTYPE_BYTES and *layout SEER_LAYOUT_NONE when the batch is file
 * bytes (no transform); a negative code for a bad handle. Any output pointer
 * may be NULL. The pointer is valid until the batch is released; a failed
 * batch's (SEER_EBATCH) tensor bytes are undefined. A binding that maps the
 * arena itself takes the offset data - seer_arena_base(c). */
#define SEER_LAYOUT_NONE 0
#define SEER_LAYOUT_NCHW 1
#define SEER_LAYOUT_NHWC 2
SEER_API int seer_batch_tensor(const seer_batch_t *b, const void **data, int *dtype, int *layout,
			       uint64_t *dims, int maxdims);

/* Bulk export for bindings: fills n = seer_batch_len(b) entries of each
 * non-NULL array with arena offsets, sizes, labels, ids and type indices. */
SEER_API int seer_batch_export(const seer_batch_t *b, uint64_t *offsets, uint64_t *sizes,
			       int64_t *labels, uint64_t *ids, uint32_t *types);
/* The read-only arena all offsets refer to; valid until seer_close(). */
SEER_API const void *seer_arena_base(const seer_client_t *c);
SEER_API uint64_t seer_arena_size(const seer_client_t *c);
/* Type table: dtype and shape of type index t (see seer_batch_export). */
SEER_API uint32_t seer_type_count(const seer_client_t *c);
SEER_API int seer_type_info(const seer_client_t *c, uint32_t t, int *dtype, uint64_t *dims, int maxdims);

/* A new file descriptor (close-on-exec) of the arena, for bindings that map
 * it themselves so their views outlive the client (the Python shim does);
 * the caller closes it. Or a negative errno. */
SEER_API int seer_arena_fd(const seer_client_t *c);
/* libseer maps the arena pages the daemon has filled into the reader's page
 * tables ahead of its reads (at each epoch boundary and while seer_next
 * waits), so warm epochs take no page faults. A binding that reads through
 * its own mapping of seer_arena_fd() (all seer_arena_size() bytes, read-only,
 * MAP_SHARED) names it here so that mapping is the one filled; NULL goes back
 * to libseer's own. It must stay mapped until seer_close(). Call it from the
 * thread that calls seer_next. 0, -EINVAL (not a mapping of this arena),
 * -EBUSY or -EBADF. $SEER_PREFAULT=0 turns the prefaulting off. */
SEER_API int seer_arena_reader(seer_client_t *c, const void *base);

/* Job facts, fixed for the client's lifetime (0, or -EBADF for rank and
 * world size, on a bad handle). */
SEER_API int seer_rank(const seer_client_t *c);
SEER_API int seer_world_size(const seer_client_t *c);
SEER_API uint64_t seer_num_samples(const seer_client_t *c);
SEER_API uint64_t seer_epochs(const seer_client_t *c);
SEER_API uint64_t seer_batches_per_epoch(const seer_client_t *c);
/* Batches per rank in `epoch`: seer_batches_per_epoch(), except the epoch an
 * elastic resume re-shards, which has its own count. */
SEER_API uint64_t seer_epoch_batches(const seer_client_t *c, uint64_t epoch);
/* The dataset's catalog hash (checkpoint records carry it). */
SEER_API uint64_t seer_dataset_hash(const seer_client_t *c);
/* How many times this client reconnected to a restarted seerd
 * (SEER_OPT_RECONNECT); each gives a new arena (seer_arena_fd again). */
SEER_API uint64_t seer_reconnects(const seer_client_t *c);
/* Whether seerd still serves this client, without taking a batch (one
 * non-blocking syscall): 0; SEER_ESHUTDOWN once it stops the job;
 * SEER_EDAEMON when it went away; SEER_EEVICTED. A binding holding batches
 * it took ahead checks it before handing one out: after a stop, seerd's
 * positions are final and a batch handed then would be delivered again.
 * A consumer call, like seer_next: -EBUSY while another thread is in
 * seer_next or seer_seek (a reconnect there replaces what it reads). */
SEER_API int seer_alive(seer_client_t *c);
SEER_API uint32_t seer_batch_size(const seer_client_t *c);
SEER_API uint64_t seer_seed(const seer_client_t *c);

SEER_API const char *seer_strerror(int err);
/* Detailed message of the calling thread's last failure; valid until the
 * thread's next seer call. */
SEER_API const char *seer_errmsg(void);

/* ---- introspection for bindings (no C layout mirrored by hand) ----
 * sizeof(seer_options_t), and the byte offset of one of its fields by name
 * (-ENOENT for an unknown name). */
SEER_API size_t seer_options_size(void);
SEER_API int64_t seer_options_offset(const char *field);
/* The value of a SEER_* constant by name ("SEER_EEPOCH", "SEER_OPT_START_AT",
 * "SEER_SAMPLER_DROP_LAST", "SEER_MAX_DIMS", ...): 0, or -ENOENT. */
SEER_API int seer_constant(const char *name, int64_t *value);
/* numpy's name of a dtype code ("uint8", "float32", "bool"; "bytes" for
 * SEER_DTYPE_BYTES), NULL when dtype is not a code. */
SEER_API const char *seer_dtype_name(int dtype);

/* ---- the sampler: which samples make batch `step` of `rank` in `epoch` ----
 * A pure function of (nsamples, seed, world, batch, drop_last, epoch, rank,
 * step), identical to what seerd serves. PyTorch DistributedSampler rules:
 * rank r takes positions r, r + world, ... of the epoch's permutation;
 * drop_last drops the tail (and a last partial batch), otherwise the order is
 * padded by wrapping around so every rank gets the same number of batches. */
typedef struct seer_sampler seer_sampler_t;

#define SEER_SAMPLER_DROP_LAST 1u  /* drop the tail instead of padding */
#define SEER_SAMPLER_NO_SHUFFLE 2u /* identity order (evaluation passes) */

/* Returns NULL with seer_errmsg() set when an argument is out of range. */
SEER_API seer_sampler_t *seer_sampler_new(uint64_t nsamples, uint64_t seed, uint32_t world,
					  uint32_t batch, unsigned flags);
SEER_API void seer_sampler_free(seer_sampler_t *s);
SEER_API uint64_t seer_sampler_batches_per_epoch(const seer_sampler_t *s);
/* Fills ids[0..n) with batch `step` of `rank` in `epoch`; returns n (<= batch)
 * or a negative errno (-ERANGE for a step or rank out of range). Not
 * thread-safe on one sampler (it caches the epoch's permutation). */
SEER_API int seer_sampler_batch(seer_sampler_t *s, uint64_t epoch, uint32_t rank, uint64_t step,
				uint64_t *ids);

/* ==== checkpoint records and elastic resume (docs/resume.md) ==============
 * A record is where a job stands: its fingerprint (samples, seed, dataset
 * hash, batch size, world size, drop_last, shuffle) and its position (epoch,
 * and the batches each rank consumed of it, through any elastic restarts
 * within the epoch). Trainers save it with the model checkpoint; a job
 * resumed from it with the same or another number of trainers delivers every
 * sample the checkpoint had not consumed exactly once in the rest of the
 * epoch (padding and drop_last applied to that remainder), then plain epochs
 * of the new world size. The byte form is versioned and checksummed.
 *
 * Errors: -EBADMSG (not a record, truncated, corrupt, newer version),
 * SEER_EDATASET (another dataset: sample count or hash), SEER_ECONFIG
 * (another seed, batch size, drop_last or shuffle), -EINVAL (records that
 * cannot be merged, bad arguments), -ERANGE (a position outside the job),
 * -ENOMEM; seer_errmsg() names the field and both values. */
typedef struct seer_record seer_record_t;

#define SEER_RECORD_ALL_RANKS UINT32_MAX /* a record that speaks for every rank */

/* The sampler of a job (as seer_sampler_new, plus the dataset's catalog hash,
 * 0 when unknown) resuming from `rec` (NULL: from the start). 0 with *out
 * set, or a negative code. The record is checked against the job first. */
SEER_API int seer_sampler_resume(uint64_t nsamples, uint64_t seed, uint32_t world, uint32_t batch,
				 unsigned flags, uint64_t dataset_hash, const seer_record_t *rec,
				 seer_sampler_t **out);
/* Where a resumed sampler's job starts: the first batch to deliver is step
 * *step of epoch *epoch (0:0 for a fresh sampler). seer_sampler_batch()
 * answers for that epoch and every later one; an earlier epoch is -ERANGE. */
SEER_API void seer_sampler_start(const seer_sampler_t *s, uint64_t *epoch, uint64_t *step);
/* Batches per rank in `epoch`: the remainder's count for an interrupted epoch
 * re-sharded, seer_sampler_batches_per_epoch() for a plain epoch, 0 before
 * the start. */
SEER_API uint64_t seer_sampler_epoch_batches(const seer_sampler_t *s, uint64_t epoch);
/* The record of `rank` (or SEER_RECORD_ALL_RANKS) having consumed `steps`
 * batches (steps 0 .. steps-1, as s numbers them) of `epoch`. A rank's
 * record stands for every rank (DDP ranks move in lockstep); merge the ranks'
 * records when they may differ. Free with seer_record_free(). */
SEER_API int seer_sampler_record(const seer_sampler_t *s, uint32_t rank, uint64_t epoch,
				 uint64_t steps, seer_record_t **out);
/* 0 when rec can resume the job of s, else SEER_EDATASET / SEER_ECONFIG. */
SEER_API int seer_record_check(const seer_record_t *rec, const seer_sampler_t *s);

/* Byte form: seer_record_encode() returns the record's size in bytes and
 * writes it to buf when cap is at least that; seer_record_decode() checks
 * everything but the job (seer_record_check) and returns 0 with *out set. */
SEER_API int64_t seer_record_encode(const seer_record_t *rec, void *buf, size_t cap);
SEER_API int seer_record_decode(const void *buf, size_t len, seer_record_t **out);
/* One record from the records of several ranks (each DDP rank saves its
 * own): they must be of one job and one moment; ranks whose counts differ
 * need every rank's record. */
SEER_API int seer_record_merge(const seer_record_t *const *recs, size_t n, seer_record_t **out);
SEER_API uint64_t seer_record_epoch(const seer_record_t *rec);
/* Human-readable position ("epoch 3: 4 ranks at step 17"), truncated to
 * len bytes and always terminated. */
SEER_API void seer_record_describe(const seer_record_t *rec, char *buf, size_t len);
SEER_API void seer_record_free(seer_record_t *rec);
/* ==== end of checkpoint records and elastic resume ======================= */
/* ---- transforms: the random choices of seerd's image transform ----------
 * With a [transform] section, seerd decodes each image and delivers a tensor:
 * crop, resize to `size`, flip, normalise. Every random choice is a pure
 * function of (job seed, epoch, sample id), the same on every node, thread
 * count and restart. These functions give the choices, so a trainer can
 * rebuild any tensor with PIL + torchvision (docs/transform.md). */
typedef struct seer_xform seer_xform_t;

#define SEER_XFORM_CROP_FIELDS 8

/* spec: the [transform] keys as "key=value" items separated by blanks, ';'
 * or newlines, e.g. "crop=random_resized size=224 scale=0.08,1.0 hflip=0.5"
 * (unset keys take seerd's defaults). Returns NULL with seer_errmsg() set on
 * a bad spec. Free with seer_xform_free. Thread-safe once created. */
SEER_API seer_xform_t *seer_xform_new(const char *spec);
SEER_API void seer_xform_free(seer_xform_t *x);
/* Crop and flip of sample `id` in `epoch` for an image of width x height
 * pixels (as decoded, before any EXIF rotation, which seer does not apply).
 * out[] = { top, left, height, width, flip, resized_height, resized_width,
 * tries }:
 *   crop = random_resized: the box in the image (RandomResizedCrop's
 *     i, j, h, w); tries = the accepted attempt 1..10, 0 for the fallback
 *     central crop;
 *   crop = center: the image is first resized to resized_height x
 *     resized_width (shorter side = `resize`), the box is in that image
 *     (negative top/left: zero padding, as CenterCrop pads);
 *   crop = none: the whole image;
 *   flip = 1: mirror left-right after resizing.
 * Returns 0, or -EINVAL for a size outside [1, 2^30). */
SEER_API int seer_xform_crop(const seer_xform_t *x, uint64_t seed, uint64_t epoch, uint64_t id,
			     uint32_t width, uint32_t height, int32_t out[SEER_XFORM_CROP_FIELDS]);
/* Raw 64-bit draw `index` of the stream of (seed, epoch, id) (for
 * re-implementations; docs/transform.md says which index decides what). */
SEER_API uint64_t seer_xform_draw(uint64_t seed, uint64_t epoch, uint64_t id, uint32_t index);
/* The effective spec (every key) into buf; 0 or -EINVAL. */
SEER_API int seer_xform_describe(const seer_xform_t *x, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* SEER_H */
