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
 * Threads: one seer_client_t is used by one thread at a time. Different
 * clients are independent.
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
#define SEER_VERSION_MINOR 1

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

/* Sample element types (seer_sample_dtype). */
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
 * new job). */
typedef struct seer_options {
	const char *socket_path;
	const char *job_id;
	int rank;           /* used when world_size > 0 */
	int world_size;     /* 0: rank and world size from the environment */
	unsigned flags;     /* SEER_OPT_* */
	uint64_t start_epoch; /* with SEER_OPT_START_AT */
	uint64_t start_step;
	int connect_timeout_ms; /* 0: $SEER_CONNECT_TIMEOUT_MS or 30000; retries a missing socket */
} seer_options_t;

#define SEER_OPT_START_AT 1u /* start at (start_epoch, start_step) */

/* Connect to the node's daemon. On success *out is a client to free with
 * seer_close(). On failure returns a negative code; seer_errmsg() says why
 * (e.g. "no seerd at /tmp/seer-u-42.sock: start seerd or set SEER_SOCKET"). */
SEER_API int seer_connect(const seer_options_t *opts, seer_client_t **out);

/* Close the connection. Held batches are released; their pointers become
 * invalid. The daemon keeps this rank's position for a later reconnect. */
SEER_API void seer_close(seer_client_t *c);

/* Take the next batch, waiting up to timeout_ms (< 0: forever, 0: poll).
 * Returns 0 with *out set, SEER_EEPOCH once after the last batch of each
 * epoch, SEER_EEND after the job's last batch, -ETIMEDOUT, SEER_ESHUTDOWN,
 * or SEER_EBATCH with *out set to a failed batch (seer_batch_error() says
 * which sample and why; release it like any other). */
SEER_API int seer_next(seer_client_t *c, int timeout_ms, seer_batch_t **out);

/* Give a batch back. Every pointer obtained from it becomes invalid. */
SEER_API int seer_release(seer_client_t *c, seer_batch_t *b);

/* Restart this trainer's stream at (epoch, step); releases held batches.
 * Returns 0, or -ERANGE when the position is past the job's end. */
SEER_API int seer_seek(seer_client_t *c, uint64_t epoch, uint64_t step);

/* Batch accessors. A batch and everything read from it is valid until it is
 * released (or the client closed). Sample data is mapped read-only: writing
 * through the pointer faults. */
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

/* Job facts, fixed for the client's lifetime. */
SEER_API int seer_rank(const seer_client_t *c);
SEER_API int seer_world_size(const seer_client_t *c);
SEER_API uint64_t seer_num_samples(const seer_client_t *c);
SEER_API uint64_t seer_epochs(const seer_client_t *c);
SEER_API uint64_t seer_batches_per_epoch(const seer_client_t *c);
SEER_API uint32_t seer_batch_size(const seer_client_t *c);
SEER_API uint64_t seer_seed(const seer_client_t *c);

SEER_API const char *seer_strerror(int err);
/* Detailed message of the calling thread's last failure; valid until the
 * thread's next seer call. */
SEER_API const char *seer_errmsg(void);

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
