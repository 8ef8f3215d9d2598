/* access.c: libseer's read-only calls — batch and sample accessors, job
 * facts, and the introspection bindings use instead of mirroring C layouts
 * (sizes, offsets, constants and dtype names; libuv's uv_handle_size()).
 *
 * Any thread. A handle that is NULL, closed, stale or not a handle makes the
 * call return its documented "nothing" value (0, NULL, or a negative code)
 * with seer_errmsg() set; memory the daemon can still write (sample
 * descriptors, the type table) is read once and bounds-checked. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>

#include "../src/common/base.h"
#include "../src/common/paths.h"
#include "client.h"

/* the wire's dtype codes are the public ones */
#define SAME_DT(x) ((int)SEER_DT_##x == (int)SEER_DTYPE_##x)
_Static_assert(SAME_DT(BYTES) && SAME_DT(U8) && SAME_DT(I8) && SAME_DT(U16) && SAME_DT(I16) &&
	       SAME_DT(U32) && SAME_DT(I32) && SAME_DT(U64) && SAME_DT(I64) && SAME_DT(F16) &&
	       SAME_DT(F32) && SAME_DT(F64) && SAME_DT(BOOL) &&
	       (int)SEER_DT_COUNT_ == (int)SEER_DTYPE_BOOL + 1,
	       "proto's SEER_DT_* and seer.h's SEER_DTYPE_* must be the same codes");
#undef SAME_DT

static const char invalid_batch[] = "not a valid batch (NULL, released, stale or closed)";

static struct slot *batch_get(const seer_batch_t *b, const char *fn, struct seer_client **c)
{
	struct slot *s;
	return handle_acquire_batch(b, fn, c, &s) == 0 ? s : NULL;
}

/* Sample i of the batch in slot s, as the daemon wrote it (one read). */
static bool sample_at(const struct seer_client *c, const struct slot *s, uint32_t i,
		      struct seer_wire_sample *out)
{
	if (i >= s->n)
		return false;
	(void)c;
	const struct seer_wire_slot *ws = s->ws;
	memcpy(out, (const struct seer_wire_sample *)(ws + 1) + i, sizeof(*out));
	return true;
}

SEER_API uint32_t seer_batch_len(const seer_batch_t *b)
{
	struct seer_client *c;
	struct slot *s = batch_get(b, "seer_batch_len", &c);
	if (!s)
		return 0;
	uint32_t n = s->n;
	handle_release(c);
	return n;
}

SEER_API uint64_t seer_batch_epoch(const seer_batch_t *b)
{
	struct seer_client *c;
	struct slot *s = batch_get(b, "seer_batch_epoch", &c);
	if (!s)
		return UINT64_MAX;
	uint64_t e = s->epoch;
	handle_release(c);
	return e;
}

SEER_API uint64_t seer_batch_step(const seer_batch_t *b)
{
	struct seer_client *c;
	struct slot *s = batch_get(b, "seer_batch_step", &c);
	if (!s)
		return UINT64_MAX;
	uint64_t st = s->step;
	handle_release(c);
	return st;
}

SEER_API const char *seer_batch_error(const seer_batch_t *b)
{
	struct seer_client *c;
	struct slot *s = batch_get(b, "seer_batch_error", &c);
	if (!s)
		return invalid_batch;
	const char *m = s->status ? s->msg : NULL;
	handle_release(c);
	return m;
}

SEER_API const void *seer_sample_data(const seer_batch_t *b, uint32_t i)
{
	struct seer_client *c;
	struct slot *s = batch_get(b, "seer_sample_data", &c);
	if (!s)
		return NULL;
	struct seer_wire_sample w;
	const void *p = NULL;
	if (sample_at(c, s, i, &w) && w.offset <= c->shm.arena_size &&
	    w.length <= c->shm.arena_size - w.offset)
		p = c->shm.arena + w.offset;
	handle_release(c);
	return p;
}

SEER_API uint64_t seer_sample_size(const seer_batch_t *b, uint32_t i)
{
	struct seer_client *c;
	struct slot *s = batch_get(b, "seer_sample_size", &c);
	if (!s)
		return 0;
	struct seer_wire_sample w;
	uint64_t n = sample_at(c, s, i, &w) ? w.length : 0;
	handle_release(c);
	return n;
}

SEER_API int64_t seer_sample_label(const seer_batch_t *b, uint32_t i)
{
	struct seer_client *c;
	struct slot *s = batch_get(b, "seer_sample_label", &c);
	if (!s)
		return -1;
	struct seer_wire_sample w;
	int64_t l = sample_at(c, s, i, &w) ? w.label : -1;
	handle_release(c);
	return l;
}

SEER_API uint64_t seer_sample_id(const seer_batch_t *b, uint32_t i)
{
	struct seer_client *c;
	struct slot *s = batch_get(b, "seer_sample_id", &c);
	if (!s)
		return UINT64_MAX;
	struct seer_wire_sample w;
	uint64_t id = sample_at(c, s, i, &w) ? w.id : UINT64_MAX;
	handle_release(c);
	return id;
}

/* Type t's dtype and up to maxdims dims; returns ndim or -ERANGE. */
static int type_info(const struct seer_client *c, uint32_t t, int *dtype, uint64_t *dims,
		     int maxdims)
{
	if (t >= c->shm.ntypes)
		return -ERANGE;
	struct seer_wire_type ty;
	memcpy(&ty, &c->shm.types[t], sizeof(ty));
	if (dtype)
		*dtype = (int)ty.dtype;
	int nd = (int)MIN(ty.ndim, (uint32_t)SEER_MAX_DIMS);
	for (int k = 0; dims && k < nd && k < maxdims; k++)
		dims[k] = ty.dims[k];
	return nd;
}

SEER_API int seer_sample_dtype(const seer_batch_t *b, uint32_t i)
{
	struct seer_client *c;
	struct slot *s = batch_get(b, "seer_sample_dtype", &c);
	if (!s)
		return -EINVAL;
	struct seer_wire_sample w;
	int dt = SEER_DTYPE_BYTES;
	if (sample_at(c, s, i, &w))
		type_info(c, w.type, &dt, NULL, 0);
	handle_release(c);
	return dt;
}

SEER_API int seer_sample_shape(const seer_batch_t *b, uint32_t i, uint64_t *dims, int maxdims)
{
	if (!dims && maxdims > 0) {
		err_set("seer_sample_shape: dims is NULL but maxdims is %d", maxdims);
		return -EINVAL;
	}
	struct seer_client *c;
	struct slot *s = batch_get(b, "seer_sample_shape", &c);
	if (!s)
		return -EINVAL;
	struct seer_wire_sample w;
	int rc = sample_at(c, s, i, &w) ? type_info(c, w.type, NULL, dims, maxdims) : -ERANGE;
	handle_release(c);
	return rc;
}

_Static_assert((int)SEER_LY_NONE == SEER_LAYOUT_NONE && (int)SEER_LY_NCHW == SEER_LAYOUT_NCHW &&
	       (int)SEER_LY_NHWC == SEER_LAYOUT_NHWC, "proto's and seer.h's layout codes must agree");

SEER_API int seer_batch_tensor(const seer_batch_t *b, const void **data, int *dtype, int *layout,
			       uint64_t *dims, int maxdims)
{
	if (data)
		*data = NULL;
	if (!dims && maxdims > 0) {
		err_set("seer_batch_tensor: dims is NULL but maxdims is %d", maxdims);
		return -EINVAL;
	}
	struct seer_client *c;
	struct slot *s = batch_get(b, "seer_batch_tensor", &c);
	if (!s)
		return -EINVAL;
	int nd = 0;
	if (s->has_tensor) {
		const struct seer_wire_tensor *t = &s->tensor; /* checked at delivery */
		nd = (int)t->ndim;
		if (data)
			*data = c->shm.arena + t->offset;
		if (dtype)
			*dtype = (int)t->dtype;
		if (layout)
			*layout = (int)t->layout;
		for (int k = 0; k < nd && k < maxdims; k++)
			dims[k] = t->dims[k];
	} else {
		if (dtype)
			*dtype = SEER_DTYPE_BYTES;
		if (layout)
			*layout = SEER_LAYOUT_NONE;
	}
	handle_release(c);
	return nd;
}

SEER_API int seer_batch_export(const seer_batch_t *b, uint64_t *offsets, uint64_t *sizes,
			       int64_t *labels, uint64_t *ids, uint32_t *types)
{
	struct seer_client *c;
	struct slot *s = batch_get(b, "seer_batch_export", &c);
	if (!s)
		return -EINVAL;
	uint32_t n = s->n;
	for (uint32_t i = 0; i < n; i++) {
		struct seer_wire_sample w;
		sample_at(c, s, i, &w);
		if (offsets)
			offsets[i] = w.offset;
		if (sizes)
			sizes[i] = w.length;
		if (labels)
			labels[i] = w.label;
		if (ids)
			ids[i] = w.id;
		if (types)
			types[i] = w.type;
	}
	handle_release(c);
	return (int)n;
}

/* ---- the client's facts ------------------------------------------------------ */

/* `expr` of the client the token names, or `bad` (errmsg set) */
#define CLIENT_FACT(fn, h, type, bad, expr)                                                 \
	do {                                                                                \
		struct seer_client *c_;                                                     \
		if (handle_acquire((h), fn, &c_) != 0)                                      \
			return (bad);                                                       \
		const struct seer_client *c = c_;                                           \
		type v_ = (expr);                                                           \
		handle_release(c_);                                                         \
		return v_;                                                                  \
	} while (0)

SEER_API int seer_type_info(const seer_client_t *h, uint32_t t, int *dtype, uint64_t *dims,
			    int maxdims)
{
	if (!dims && maxdims > 0) {
		err_set("seer_type_info: dims is NULL but maxdims is %d", maxdims);
		return -EINVAL;
	}
	CLIENT_FACT("seer_type_info", h, int, -EBADF, type_info(c, t, dtype, dims, maxdims));
}

SEER_API const void *seer_arena_base(const seer_client_t *h)
{
	CLIENT_FACT("seer_arena_base", h, const void *, NULL, c->shm.arena);
}

SEER_API uint64_t seer_arena_size(const seer_client_t *h)
{
	CLIENT_FACT("seer_arena_size", h, uint64_t, 0, c->shm.arena_size);
}

SEER_API int seer_arena_fd(const seer_client_t *h)
{
	struct seer_client *c;
	int rc = handle_acquire(h, "seer_arena_fd", &c);
	if (rc != 0)
		return rc;
	int fd = c->shm.arena_fd >= 0 ? fcntl(c->shm.arena_fd, F_DUPFD_CLOEXEC, 3) : -1;
	rc = fd >= 0 ? fd : c->shm.arena_fd < 0 ? -EBADF : -errno;
	if (fd < 0)
		err_set("seer_arena_fd: %s", strerror(-rc));
	handle_release(c);
	return rc;
}

SEER_API uint32_t seer_type_count(const seer_client_t *h)
{
	CLIENT_FACT("seer_type_count", h, uint32_t, 0, c->shm.ntypes);
}

SEER_API int seer_rank(const seer_client_t *h) { CLIENT_FACT("seer_rank", h, int, -EBADF, c->rank); }

SEER_API int seer_world_size(const seer_client_t *h)
{
	CLIENT_FACT("seer_world_size", h, int, -EBADF, c->world);
}

SEER_API uint64_t seer_num_samples(const seer_client_t *h)
{
	CLIENT_FACT("seer_num_samples", h, uint64_t, 0, c->w.nsamples);
}

SEER_API uint64_t seer_epochs(const seer_client_t *h)
{
	CLIENT_FACT("seer_epochs", h, uint64_t, 0, c->w.epochs);
}

SEER_API uint64_t seer_batches_per_epoch(const seer_client_t *h)
{
	CLIENT_FACT("seer_batches_per_epoch", h, uint64_t, 0, c->w.batches_per_epoch);
}

SEER_API uint64_t seer_epoch_batches(const seer_client_t *h, uint64_t epoch)
{
	CLIENT_FACT("seer_epoch_batches", h, uint64_t, 0,
		    epoch < c->w.epochs ? sampler_tl_batches(&c->plan.tl, epoch) : 0);
}

SEER_API uint64_t seer_dataset_hash(const seer_client_t *h)
{
	CLIENT_FACT("seer_dataset_hash", h, uint64_t, 0, c->w.dataset_hash);
}

SEER_API uint64_t seer_reconnects(const seer_client_t *h)
{
	CLIENT_FACT("seer_reconnects", h, uint64_t, 0, atomic_load(&c->rc.reconnects));
}

SEER_API uint32_t seer_batch_size(const seer_client_t *h)
{
	CLIENT_FACT("seer_batch_size", h, uint32_t, 0, c->w.batch_size);
}

SEER_API uint64_t seer_seed(const seer_client_t *h)
{
	CLIENT_FACT("seer_seed", h, uint64_t, 0, c->w.seed);
}

/* ---- introspection for bindings ---------------------------------------------- */

SEER_API int seer_socket_path(const char *job_id, char *buf, size_t cap)
{
	char why[768];
	const char *job = job_id ? job_id : seer_env_job_id();
	const char *env = getenv("SEER_SOCKET");
	if (env && *env) {
		if (strlen(env) >= cap) {
			err_set("seer_socket_path: $SEER_SOCKET is longer than the buffer");
			return -ENAMETOOLONG;
		}
		snprintf(buf, cap, "%s", env);
		return 0;
	}
	int rc = path_default_socket(buf, cap, job, false, why, sizeof(why));
	if (rc != 0)
		err_set("%s", why);
	return rc;
}

SEER_API size_t seer_options_size(void) { return sizeof(seer_options_t); }

SEER_API int64_t seer_options_offset(const char *field)
{
#define OPT(f) { #f, offsetof(seer_options_t, f) }
	static const struct { const char *name; size_t off; } fields[] = {
		OPT(socket_path), OPT(job_id), OPT(rank), OPT(world_size), OPT(flags),
		OPT(start_epoch), OPT(start_step), OPT(connect_timeout_ms), OPT(record),
		OPT(record_len), OPT(reconnect_ms), OPT(max_held), OPT(job), OPT(batch_size),
		OPT(seed), OPT(epochs), OPT(shuffle), OPT(drop_last), OPT(dataset),
	};
#undef OPT
	for (size_t i = 0; field && i < ARRAY_SIZE(fields); i++)
		if (strcmp(field, fields[i].name) == 0)
			return (int64_t)fields[i].off;
	err_set("seer_options_offset: seer_options_t has no field '%s'", field ? field : "(NULL)");
	return -ENOENT;
}

SEER_API int seer_constant(const char *name, int64_t *value)
{
#define K(x) { #x, x }
	static const struct { const char *name; int64_t v; } k[] = {
		K(SEER_EEPOCH), K(SEER_EEND), K(SEER_ESHUTDOWN), K(SEER_EPROTO),
		K(SEER_EREFUSED), K(SEER_EBATCH), K(SEER_ECONFIG), K(SEER_EDATASET),
		K(SEER_ENOTHELD), K(SEER_EEVICTED), K(SEER_EDAEMON), K(SEER_OPT_START_AT), K(SEER_OPT_RECONNECT),
		K(SEER_OPT_TAKE_AHEAD), K(SEER_JOB_BATCH_SIZE), K(SEER_JOB_SHUFFLE),
		K(SEER_JOB_DROP_LAST), K(SEER_JOB_SEED), K(SEER_JOB_EPOCHS), K(SEER_JOB_DATASET),
		K(SEER_SAMPLER_DROP_LAST), K(SEER_SAMPLER_NO_SHUFFLE), K(SEER_MAX_DIMS),
		K(SEER_VERSION_MAJOR), K(SEER_VERSION_MINOR), K(SEER_LAYOUT_NONE),
		K(SEER_LAYOUT_NCHW), K(SEER_LAYOUT_NHWC),
		K(SEER_CKPT_MEMORY), K(SEER_CKPT_LOCAL), K(SEER_CKPT_PEER), K(SEER_CKPT_PFS),
		K(SEER_CKPT_PENDING), K(SEER_CKPT_DONE), K(SEER_CKPT_FAILED), K(SEER_CKPT_OFF),
		K(SEER_CKPT_PRUNED),
	};
#undef K
	for (size_t i = 0; name && value && i < ARRAY_SIZE(k); i++) {
		if (strcmp(name, k[i].name) == 0) {
			*value = k[i].v;
			return 0;
		}
	}
	err_set("seer_constant: no constant '%s'%s", name ? name : "(NULL)",
		value ? "" : " (and value is NULL)");
	return value ? -ENOENT : -EINVAL;
}

SEER_API const char *seer_dtype_name(int dtype)
{
	static const char *names[] = {
		[SEER_DTYPE_BYTES] = "bytes", [SEER_DTYPE_U8] = "uint8", [SEER_DTYPE_I8] = "int8",
		[SEER_DTYPE_U16] = "uint16", [SEER_DTYPE_I16] = "int16",
		[SEER_DTYPE_U32] = "uint32", [SEER_DTYPE_I32] = "int32",
		[SEER_DTYPE_U64] = "uint64", [SEER_DTYPE_I64] = "int64",
		[SEER_DTYPE_F16] = "float16", [SEER_DTYPE_F32] = "float32",
		[SEER_DTYPE_F64] = "float64", [SEER_DTYPE_BOOL] = "bool",
	};
	_Static_assert(ARRAY_SIZE(names) == SEER_DT_COUNT_, "a name for every dtype");
	return dtype >= 0 && (size_t)dtype < ARRAY_SIZE(names) ? names[dtype] : NULL;
}
