/* libseer: the trainer side of the seer protocol (see proto/seer_proto.h).
 * Never aborts or exits: every failure is a return code plus seer_errmsg(). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../proto/seer_proto.h"
#include "../src/ring.h"
#include "../src/shm.h"
#include "../src/util.h"
#include "seer.h"

#define SPIN_ITERS 2000

struct seer_batch {
	seer_client_t *c;
	const struct seer_wire_slot *slot;
	const struct seer_wire_sample *samples;
	uint32_t idx;
	bool held;
};

struct seer_client {
	int sock;
	int efd;
	int rank, world;
	const uint8_t *arena;
	size_t arena_size;
	const struct seer_wire_type *types;
	uint32_t ntypes;
	uint64_t data_off;
	const struct seer_ctrl_out *co;
	size_t co_size;
	struct seer_ctrl_in *ci;
	size_t ci_size;
	struct ring out;      /* daemon -> us */
	struct ring rel;      /* us -> daemon */
	struct seer_batch *batches;
	uint32_t nslots;
	uint32_t nheld;
	struct seer_msg_welcome w;
	uint64_t total;       /* epochs * batches_per_epoch */
	uint64_t next_global; /* the batch we expect next */
	bool epoch_marker;    /* return SEER_EEPOCH before the next batch */
};

static int env_int(const char *name, int *out)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return -1;
	int64_t x;
	if (parse_i64(v, &x) != 0 || x < 0 || x > INT32_MAX)
		return -1;
	*out = (int)x;
	return 0;
}

static int rank_from_env(int *rank, int *world)
{
	static const char *pairs[][2] = {
		{ "SEER_RANK", "SEER_WORLD_SIZE" },
		{ "RANK", "WORLD_SIZE" },
		{ "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
		{ "PMI_RANK", "PMI_SIZE" },
		{ "SLURM_PROCID", "SLURM_NTASKS" },
	};
	for (size_t i = 0; i < ARRAY_SIZE(pairs); i++)
		if (env_int(pairs[i][0], rank) == 0 && env_int(pairs[i][1], world) == 0)
			return 0;
	return -1;
}

static int connect_socket(const char *path, int timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		err_set("socket path %s is too long (max %zu)", path, sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;
	for (;;) {
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err_set("socket(): %s", strerror(errno));
			return -errno;
		}
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		int e = errno;
		close(fd);
		if (e == EACCES || e == EPERM) {
			err_set("cannot connect to seerd at %s: %s (the socket belongs to another "
				"user: seerd serves only the user that started it)", path, strerror(e));
			return -e;
		}
		if ((e != ENOENT && e != ECONNREFUSED && e != EAGAIN) || now_ns() >= deadline) {
			err_set("no seerd at %s (%s): start seerd for this job, or set SEER_SOCKET "
				"or SEER_JOB_ID to match it", path, strerror(e));
			return -e;
		}
		sleep_ns(20 * 1000000ull); /* the daemon may still be starting */
	}
}

static void client_free(seer_client_t *c)
{
	if (c->arena)
		munmap((void *)c->arena, c->arena_size);
	if (c->co)
		munmap((void *)c->co, c->co_size);
	if (c->ci)
		munmap(c->ci, c->ci_size);
	if (c->efd >= 0)
		close(c->efd);
	if (c->sock >= 0)
		close(c->sock);
	free(c->batches);
	free(c);
}

static int fd_size_is(int fd, uint64_t size)
{
	struct stat st;
	return fstat(fd, &st) == 0 && (uint64_t)st.st_size == size;
}

/* Map and check the three segments of a WELCOME. */
static int attach(seer_client_t *c, const int fds[SEER_WELCOME_NFDS])
{
	const struct seer_msg_welcome *w = &c->w;
	void *p;
	int rc;
	if (!fd_size_is(fds[0], w->arena_size) || !fd_size_is(fds[1], w->ctrl_out_size) ||
	    !fd_size_is(fds[2], w->ctrl_in_size) || w->nslots == 0 ||
	    (w->nslots & (w->nslots - 1)) != 0 || w->batch_size == 0) {
		err_set("daemon sent segments that do not match its welcome message");
		return SEER_EPROTO;
	}
	if ((rc = shm_map(fds[0], w->arena_size, 0, &p)) != 0)
		goto map_fail;
	c->arena = p;
	c->arena_size = w->arena_size;
	if ((rc = shm_map(fds[1], w->ctrl_out_size, 0, &p)) != 0)
		goto map_fail;
	c->co = p;
	c->co_size = w->ctrl_out_size;
	if ((rc = shm_map(fds[2], w->ctrl_in_size, 1, &p)) != 0)
		goto map_fail;
	c->ci = p;
	c->ci_size = w->ctrl_in_size;

	const struct seer_arena_hdr *ah = (const void *)c->arena;
	const struct seer_ctrl_out *co = c->co;
	uint64_t stride = seer_slot_stride(w->batch_size);
	if (ah->magic != SEER_MAGIC_ARENA || ah->version != SEER_PROTO_VERSION ||
	    ah->size != w->arena_size || ah->types_off > w->arena_size ||
	    ah->ntypes > (w->arena_size - ah->types_off) / sizeof(struct seer_wire_type) ||
	    co->magic != SEER_MAGIC_CTOUT || co->version != SEER_PROTO_VERSION ||
	    co->nslots != w->nslots || co->batch_size != w->batch_size ||
	    co->slot_stride != stride || co->ring_off + 4ull * w->nslots > w->ctrl_out_size ||
	    co->slots_off + stride * w->nslots > w->ctrl_out_size ||
	    c->ci->ring_off + 4ull * w->nslots > w->ctrl_in_size) {
		err_set("daemon's shared segments fail their layout checks (version mismatch?)");
		return SEER_EPROTO;
	}
	c->types = (const void *)(c->arena + ah->types_off);
	c->ntypes = ah->ntypes;
	c->data_off = ah->data_off;
	c->nslots = w->nslots;
	c->out = (struct ring){
		.prod = (_Atomic uint32_t *)&co->prod, .cons = &c->ci->cons,
		.entries = (uint32_t *)((uintptr_t)co + co->ring_off), .mask = w->nslots - 1,
	};
	c->rel = (struct ring){
		.prod = &c->ci->rel_prod, .cons = (_Atomic uint32_t *)&co->rel_cons,
		.entries = (uint32_t *)((uintptr_t)c->ci + c->ci->ring_off), .mask = w->nslots - 1,
	};
	c->batches = calloc(w->nslots, sizeof(*c->batches));
	if (!c->batches) {
		err_set("out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < w->nslots; i++) {
		struct seer_batch *b = &c->batches[i];
		b->c = c;
		b->idx = i;
		b->slot = (const void *)((const uint8_t *)co + co->slots_off + stride * i);
		b->samples = (const void *)(b->slot + 1);
	}
	return 0;
map_fail:
	err_set("cannot map the daemon's shared memory: %s", strerror(-rc));
	return rc;
}

SEER_API int seer_connect(const seer_options_t *opts, seer_client_t **out)
{
	static const seer_options_t zero;
	if (!opts)
		opts = &zero;
	*out = NULL;
	seer_client_t *c = calloc(1, sizeof(*c));
	if (!c) {
		err_set("out of memory");
		return -ENOMEM;
	}
	c->sock = -1;
	c->efd = -1;
	if (opts->world_size > 0) {
		c->rank = opts->rank;
		c->world = opts->world_size;
	} else if (rank_from_env(&c->rank, &c->world) != 0) {
		c->rank = 0;
		c->world = 1;
	}
	int rc;
	if (c->rank < 0 || c->rank >= c->world) {
		err_set("rank %d is not in [0, world size %d)", c->rank, c->world);
		rc = -EINVAL;
		goto fail;
	}
	const char *job = opts->job_id ? opts->job_id : seer_env_job_id();
	char path[4096];
	const char *sock = opts->socket_path ? opts->socket_path : getenv("SEER_SOCKET");
	if (!sock || !*sock) {
		if (seer_default_socket(path, sizeof(path), job) != 0) {
			err_set("socket path too long");
			rc = -ENAMETOOLONG;
			goto fail;
		}
		sock = path;
	}
	int ctmo = opts->connect_timeout_ms;
	if (ctmo <= 0) {
		ctmo = 30000;
		env_int("SEER_CONNECT_TIMEOUT_MS", &ctmo);
	}
	c->sock = connect_socket(sock, ctmo);
	if (c->sock < 0) {
		rc = c->sock;
		goto fail;
	}
	struct seer_msg_hello h = {
		.magic = SEER_MAGIC_HELLO, .kind = SEER_MSG_HELLO, .version = SEER_PROTO_VERSION,
		.rank = (uint32_t)c->rank, .world = (uint32_t)c->world,
		.epoch = (opts->flags & SEER_OPT_START_AT) ? opts->start_epoch : SEER_POS_RESUME,
		.step = (opts->flags & SEER_OPT_START_AT) ? opts->start_step : 0,
	};
	snprintf(h.job_id, sizeof(h.job_id), "%s", job);
	ssize_t n = sock_send(c->sock, &h, sizeof(h), NULL, 0);
	int fds[SEER_WELCOME_NFDS], nfds = 0;
	if (n != (ssize_t)sizeof(h)) {
		/* the daemon may have answered (a refusal) before closing */
		n = sock_recv(c->sock, &c->w, sizeof(c->w), fds, &nfds, SEER_WELCOME_NFDS);
		if (n <= 0 || c->w.kind != SEER_MSG_ERROR) {
			err_set("sending the handshake to %s: %s", sock, strerror(EPIPE));
			for (int i = 0; i < nfds; i++)
				close(fds[i]);
			rc = -EPIPE;
			goto fail;
		}
	} else {
		n = sock_recv(c->sock, &c->w, sizeof(c->w), fds, &nfds, SEER_WELCOME_NFDS);
	}
	if (n <= 0) {
		err_set("seerd at %s closed the connection during the handshake (%s)", sock,
			n < 0 ? strerror((int)-n) : "EOF");
		rc = n < 0 ? (int)n : SEER_EPROTO;
		goto fail;
	}
	if (n >= (ssize_t)offsetof(struct seer_msg_welcome, nsamples) &&
	    c->w.kind == SEER_MSG_ERROR) {
		c->w.msg[sizeof(c->w.msg) - 1] = '\0';
		err_set("seerd refused rank %d: %s", c->rank, c->w.msg);
		rc = c->w.status ? c->w.status : SEER_EREFUSED;
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		goto fail;
	}
	if (n != (ssize_t)sizeof(c->w) || c->w.kind != SEER_MSG_WELCOME ||
	    nfds != SEER_WELCOME_NFDS) {
		err_set("malformed welcome from seerd at %s (protocol version mismatch?)", sock);
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		rc = SEER_EPROTO;
		goto fail;
	}
	rc = attach(c, fds);
	close(fds[0]);
	close(fds[1]);
	close(fds[2]);
	c->efd = fds[3];
	if (rc != 0)
		goto fail;
	c->total = c->w.epochs * c->w.batches_per_epoch;
	c->next_global = c->w.start;
	*out = c;
	return 0;
fail:
	client_free(c);
	return rc;
}

static void notify_daemon(seer_client_t *c)
{
	/* pairs with the daemon's fence between setting need_wakeup and its last
	 * look at our indices before it sleeps */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&c->co->need_wakeup, memory_order_relaxed)) {
		uint64_t one = 1;
		ssize_t r UNUSED = write(c->efd, &one, sizeof(one));
	}
}

static int state_error(seer_client_t *c)
{
	uint32_t st = atomic_load_explicit(&c->co->state, memory_order_acquire);
	if (st == SEER_STATE_STOPPING) {
		err_set("seerd is shutting down");
		return SEER_ESHUTDOWN;
	}
	if (st == SEER_STATE_EVICTED) {
		err_set("seerd disconnected this trainer (it sent invalid control data or was "
			"replaced)");
		return SEER_EEVICTED;
	}
	return 0;
}

SEER_API int seer_next(seer_client_t *c, int timeout_ms, seer_batch_t **out)
{
	*out = NULL;
	if (c->epoch_marker) {
		c->epoch_marker = false;
		return SEER_EEPOCH;
	}
	if (c->next_global >= c->total)
		return SEER_EEND;
	uint32_t idx;
	int rc;
	for (int i = 0; i < SPIN_ITERS; i++) {
		if (ring_pop(&c->out, &idx) == 0)
			goto got;
		__builtin_ia32_pause();
	}
	uint64_t t0 = now_ns();
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : t0 + (uint64_t)timeout_ms * 1000000ull;
	for (;;) {
		uint32_t bell = atomic_load_explicit(&c->co->doorbell, memory_order_acquire);
		atomic_store_explicit(&c->ci->waiting, 1, memory_order_relaxed);
		/* pairs with the daemon's fence between bumping the doorbell and
		 * reading `waiting` */
		atomic_thread_fence(memory_order_seq_cst);
		if (ring_pop(&c->out, &idx) == 0) {
			atomic_store_explicit(&c->ci->waiting, 0, memory_order_relaxed);
			atomic_fetch_add_explicit(&c->ci->stall_ns, now_ns() - t0, memory_order_relaxed);
			atomic_fetch_add_explicit(&c->ci->stalls, 1, memory_order_relaxed);
			goto got;
		}
		if ((rc = state_error(c)) != 0) {
			atomic_store_explicit(&c->ci->waiting, 0, memory_order_relaxed);
			return rc;
		}
		uint64_t now = now_ns();
		if (now >= deadline) {
			atomic_store_explicit(&c->ci->waiting, 0, memory_order_relaxed);
			err_set("no batch within %d ms", timeout_ms);
			return -ETIMEDOUT;
		}
		/* wake at least every 200 ms to notice a daemon that died */
		uint64_t wait = MIN(deadline - now, 200000000ull);
		futex_wait(&((struct seer_ctrl_out *)c->co)->doorbell, bell, (int64_t)wait);
		atomic_store_explicit(&c->ci->waiting, 0, memory_order_relaxed);
		if (ring_count(&c->out) == 0) {
			char b;
			ssize_t r = recv(c->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
				err_set("seerd closed the connection (daemon exited?)");
				return SEER_ESHUTDOWN;
			}
		}
	}
got:
	notify_daemon(c); /* our consumer index moved: the daemon may prepare more */
	if (idx >= c->nslots) {
		err_set("daemon published slot %u of %u", idx, c->nslots);
		return SEER_EPROTO;
	}
	struct seer_batch *b = &c->batches[idx];
	if (b->held || b->slot->global != c->next_global || b->slot->n > c->w.batch_size) {
		err_set("daemon published batch %llu (slot %u%s), expected %llu",
			(unsigned long long)b->slot->global, idx, b->held ? ", already held" : "",
			(unsigned long long)c->next_global);
		return SEER_EPROTO;
	}
	b->held = true;
	c->nheld++;
	c->next_global++;
	if (c->next_global % c->w.batches_per_epoch == 0)
		c->epoch_marker = true;
	*out = b;
	return b->slot->status ? SEER_EBATCH : 0;
}

SEER_API int seer_release(seer_client_t *c, seer_batch_t *b)
{
	if (!b || b->c != c || !b->held) {
		err_set("release of a batch this client does not hold");
		return SEER_ENOTHELD;
	}
	b->held = false;
	c->nheld--;
	/* cannot be full: every slot is in the ring at most once */
	if (ring_push(&c->rel, b->idx) != 0) {
		err_set("release ring full (daemon stopped consuming?)");
		return SEER_EPROTO;
	}
	notify_daemon(c);
	return 0;
}

static void release_all(seer_client_t *c)
{
	for (uint32_t i = 0; i < c->nslots && c->nheld; i++)
		if (c->batches[i].held)
			seer_release(c, &c->batches[i]);
}

SEER_API int seer_seek(seer_client_t *c, uint64_t epoch, uint64_t step)
{
	if (epoch >= c->w.epochs || step >= c->w.batches_per_epoch) {
		err_set("seek to epoch %llu step %llu: the job has %llu epochs of %llu steps",
			(unsigned long long)epoch, (unsigned long long)step,
			(unsigned long long)c->w.epochs, (unsigned long long)c->w.batches_per_epoch);
		return -ERANGE;
	}
	release_all(c);
	struct seer_msg_seek m = { .kind = SEER_MSG_SEEK, .epoch = epoch, .step = step };
	ssize_t n = sock_send(c->sock, &m, sizeof(m), NULL, 0);
	if (n != (ssize_t)sizeof(m)) {
		err_set("seek: daemon connection lost");
		return SEER_ESHUTDOWN;
	}
	struct seer_msg_seek r;
	n = sock_recv(c->sock, &r, sizeof(r), NULL, NULL, 0);
	if (n != (ssize_t)sizeof(r) || r.kind != SEER_MSG_SEEK_OK) {
		err_set("seek: no answer from the daemon");
		return n == 0 ? SEER_ESHUTDOWN : SEER_EPROTO;
	}
	if (r.status != 0) {
		err_set("seek refused by the daemon: %s", seer_strerror(r.status));
		return r.status;
	}
	/* entries published before the restart were reclaimed by the daemon */
	atomic_store_explicit(&c->ci->cons, (uint32_t)r.prod, memory_order_release);
	c->next_global = r.start;
	c->epoch_marker = false;
	return 0;
}

SEER_API void seer_close(seer_client_t *c)
{
	if (!c)
		return;
	release_all(c);
	client_free(c);
}

/* ---- accessors ------------------------------------------------------------ */

SEER_API uint32_t seer_batch_len(const seer_batch_t *b) { return b->slot->n; }
SEER_API uint64_t seer_batch_epoch(const seer_batch_t *b) { return b->slot->epoch; }
SEER_API uint64_t seer_batch_step(const seer_batch_t *b) { return b->slot->step; }

SEER_API const char *seer_batch_error(const seer_batch_t *b)
{
	return b->slot->status ? b->slot->msg : NULL;
}

static const struct seer_wire_sample *sample(const seer_batch_t *b, uint32_t i)
{
	return i < b->slot->n ? &b->samples[i] : NULL;
}

SEER_API const void *seer_sample_data(const seer_batch_t *b, uint32_t i)
{
	const struct seer_wire_sample *s = sample(b, i);
	if (!s || s->offset > b->c->arena_size || s->length > b->c->arena_size - s->offset)
		return NULL;
	return b->c->arena + s->offset;
}

SEER_API uint64_t seer_sample_size(const seer_batch_t *b, uint32_t i)
{
	const struct seer_wire_sample *s = sample(b, i);
	return s ? s->length : 0;
}

SEER_API int64_t seer_sample_label(const seer_batch_t *b, uint32_t i)
{
	const struct seer_wire_sample *s = sample(b, i);
	return s ? s->label : -1;
}

SEER_API uint64_t seer_sample_id(const seer_batch_t *b, uint32_t i)
{
	const struct seer_wire_sample *s = sample(b, i);
	return s ? s->id : UINT64_MAX;
}

SEER_API int seer_type_info(const seer_client_t *c, uint32_t t, int *dtype, uint64_t *dims,
			    int maxdims)
{
	if (t >= c->ntypes)
		return -ERANGE;
	const struct seer_wire_type *ty = &c->types[t];
	if (dtype)
		*dtype = (int)ty->dtype;
	int nd = (int)MIN(ty->ndim, (uint32_t)SEER_MAX_DIMS);
	for (int k = 0; k < nd && k < maxdims; k++)
		dims[k] = ty->dims[k];
	return nd;
}

SEER_API int seer_sample_dtype(const seer_batch_t *b, uint32_t i)
{
	const struct seer_wire_sample *s = sample(b, i);
	int dt = SEER_DTYPE_BYTES;
	if (s)
		seer_type_info(b->c, s->type, &dt, NULL, 0);
	return dt;
}

SEER_API int seer_sample_shape(const seer_batch_t *b, uint32_t i, uint64_t *dims, int maxdims)
{
	const struct seer_wire_sample *s = sample(b, i);
	if (!s)
		return -ERANGE;
	return seer_type_info(b->c, s->type, NULL, dims, maxdims);
}

SEER_API int seer_batch_export(const seer_batch_t *b, uint64_t *offsets, uint64_t *sizes,
			       int64_t *labels, uint64_t *ids, uint32_t *types)
{
	uint32_t n = b->slot->n;
	for (uint32_t i = 0; i < n; i++) {
		const struct seer_wire_sample *s = &b->samples[i];
		if (offsets)
			offsets[i] = s->offset;
		if (sizes)
			sizes[i] = s->length;
		if (labels)
			labels[i] = s->label;
		if (ids)
			ids[i] = s->id;
		if (types)
			types[i] = s->type;
	}
	return (int)n;
}

SEER_API const void *seer_arena_base(const seer_client_t *c) { return c->arena; }
SEER_API uint64_t seer_arena_size(const seer_client_t *c) { return c->arena_size; }
SEER_API uint32_t seer_type_count(const seer_client_t *c) { return c->ntypes; }
SEER_API int seer_rank(const seer_client_t *c) { return c->rank; }
SEER_API int seer_world_size(const seer_client_t *c) { return c->world; }
SEER_API uint64_t seer_num_samples(const seer_client_t *c) { return c->w.nsamples; }
SEER_API uint64_t seer_epochs(const seer_client_t *c) { return c->w.epochs; }
SEER_API uint64_t seer_batches_per_epoch(const seer_client_t *c) { return c->w.batches_per_epoch; }
SEER_API uint32_t seer_batch_size(const seer_client_t *c) { return c->w.batch_size; }
SEER_API uint64_t seer_seed(const seer_client_t *c) { return c->w.seed; }
