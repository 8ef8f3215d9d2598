/* libFuzzer: libseer's public API in arbitrary sequences with arbitrary
 * arguments, against no daemon or against a fake one built from the input.
 *
 * The fake daemon (a thread of this process) listens on a unix socket,
 * answers the HELLO with a WELCOME and three memfds whose sizes and headers
 * come from the input (a valid template, then byte mutations), and answers
 * seeks as the input says. Between calls the harness plays the daemon's
 * side of the shared memory: it publishes slot indices (valid or not) and
 * writes batch descriptors (sample offsets, lengths, counts, types) from the
 * input. Handles passed to the API come from a pool holding real, released,
 * closed (from earlier runs: stale) and forged values. Whatever happens,
 * libseer must not crash, read outside what it mapped (every data pointer it
 * returns is read at both ends), leak, or hang. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../proto/seer_proto.h"
#include "seer.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* ---- reading the input ------------------------------------------------------------ */

struct in {
	const uint8_t *p;
	size_t n;
};

static uint64_t take(struct in *in, int bytes)
{
	uint64_t v = 0;
	for (int i = 0; i < bytes && in->n; i++, in->p++, in->n--)
		v |= (uint64_t)*in->p << (8 * i);
	return v;
}

/* ---- the fake daemon ------------------------------------------------------------- */

struct seg {
	int fd;
	uint8_t *p;
	size_t size;
};

static char sock_path[108];
static int listen_fd = -1;

struct fake {
	struct seer_msg_welcome w;
	int nfds;                 /* fds sent with the welcome (4 when valid) */
	bool answer_hello;
	struct seg arena, co, ci;
	int efd;
	int stop[2];              /* main -> thread: the run is over */
	int progress_sent;        /* PROGRESS answers so far (a mutated welcome kind) */
	_Atomic int seek_answer;  /* 0: stay silent, 1: SEEK_OK */
	struct seer_msg_seek seek_reply;
};

static bool seg_new(struct seg *s, size_t size)
{
	s->size = size;
	s->fd = memfd_create("fuzz", MFD_CLOEXEC);
	if (s->fd < 0 || ftruncate(s->fd, (off_t)size) != 0)
		return false;
	s->p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
	return s->p != MAP_FAILED;
}

static void seg_free(struct seg *s)
{
	if (s->p && s->p != MAP_FAILED)
		munmap(s->p, s->size);
	if (s->fd >= 0)
		close(s->fd);
}

static void serve(struct fake *f, int fd)
{
	struct seer_msg_hello h;
	struct pollfd pf[2] = { { .fd = fd, .events = POLLIN }, { .fd = f->stop[0], .events = POLLIN } };
	bool welcomed = false;
	for (;;) {
		if (poll(pf, 2, -1) < 0 || (pf[1].revents & POLLIN))
			return;
		if (!welcomed) {
			if (recv(fd, &h, sizeof(h), 0) <= 0)
				return;
			welcomed = true;
			if (!f->answer_hello)
				continue;
			/* a welcome mutated into "still starting": libseer connects
			 * again while seerd says so (by design, a scan may be long),
			 * so play a daemon whose start-up ends, as seerd's does: the
			 * fourth answer is the welcome */
			struct seer_msg_welcome w = f->w;
			if (w.kind == SEER_MSG_PROGRESS && ++f->progress_sent > 3)
				w.kind = SEER_MSG_WELCOME;
			int fds[4] = { f->arena.fd, f->co.fd, f->ci.fd, f->efd };
			struct iovec iov = { &w, sizeof(w) };
			char ctl[CMSG_SPACE(sizeof(fds))] = { 0 };
			struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
			if (f->nfds > 0) {
				mh.msg_control = ctl;
				mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)f->nfds);
				struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
				cm->cmsg_level = SOL_SOCKET;
				cm->cmsg_type = SCM_RIGHTS;
				cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)f->nfds);
				memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)f->nfds);
			}
			sendmsg(fd, &mh, MSG_NOSIGNAL);
			continue;
		}
		struct seer_msg_seek m;
		if (recv(fd, &m, sizeof(m), 0) <= 0)
			return;
		if (atomic_load(&f->seek_answer))
			send(fd, &f->seek_reply, sizeof(f->seek_reply), MSG_NOSIGNAL);
	}
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	struct pollfd pf[2] = { { .fd = listen_fd, .events = POLLIN },
				{ .fd = f->stop[0], .events = POLLIN } };
	for (;;) {
		if (poll(pf, 2, -1) < 0 || (pf[1].revents & POLLIN))
			return NULL;
		int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			continue;
		serve(f, fd);
		close(fd);
	}
}

/* A valid daemon side for (nslots, batch, arena size), then mutations. */
static bool fake_build(struct fake *f, struct in *in)
{
	uint32_t nslots = 1u << take(in, 1) % 5, batch = 1 + (uint32_t)(take(in, 1) % 8);
	uint32_t ntypes = (uint32_t)(take(in, 1) % 4);
	size_t asize = 4096 * (1 + take(in, 1) % 4);
	uint64_t stride = seer_slot_stride(batch);
	size_t co_size = sizeof(struct seer_ctrl_out) + 4 * nslots + 64 + stride * nslots;
	size_t ci_size = sizeof(struct seer_ctrl_in) + 4 * nslots;
	if (!seg_new(&f->arena, asize) || !seg_new(&f->co, co_size) || !seg_new(&f->ci, ci_size))
		return false;
	f->efd = eventfd(0, EFD_CLOEXEC);
	struct seer_arena_hdr *ah = (void *)f->arena.p;
	*ah = (struct seer_arena_hdr){ .magic = SEER_MAGIC_ARENA, .version = SEER_PROTO_VERSION,
				       .size = asize, .types_off = 64, .ntypes = ntypes,
				       .data_off = 1024 };
	struct seer_wire_type *ty = (void *)(f->arena.p + 64);
	for (uint32_t t = 0; t < ntypes; t++) {
		ty[t].dtype = (uint32_t)take(in, 1) % 16;
		ty[t].ndim = (uint32_t)take(in, 1) % 12;
		for (int k = 0; k < SEER_MAX_DIMS; k++)
			ty[t].dims[k] = take(in, 1);
	}
	struct seer_ctrl_out *co = (void *)f->co.p;
	co->magic = SEER_MAGIC_CTOUT;
	co->version = SEER_PROTO_VERSION;
	co->size = co_size;
	co->nslots = nslots;
	co->batch_size = batch;
	co->slot_stride = stride;
	co->ring_off = sizeof(*co);
	co->slots_off = (sizeof(*co) + 4 * nslots + 63) & ~63ull;
	struct seer_ctrl_in *ci = (void *)f->ci.p;
	ci->magic = SEER_MAGIC_CTIN;
	ci->version = SEER_PROTO_VERSION;
	ci->nslots = nslots;
	ci->ring_off = sizeof(*ci);
	uint64_t epochs = 1 + take(in, 1) % 4, bpe = 1 + take(in, 1) % 8;
	f->w = (struct seer_msg_welcome){
		.kind = SEER_MSG_WELCOME, .nsamples = 100, .epochs = epochs, .batches_per_epoch = bpe,
		.start = take(in, 1) % (epochs * bpe), .arena_size = asize, .ctrl_out_size = co_size,
		.ctrl_in_size = ci_size, .batch_size = batch, .nslots = nslots, .seed = 7,
		.resume_batches = bpe,
	};
	f->nfds = 4;
	f->answer_hello = true;
	/* mutations: the welcome, then the segment headers */
	for (int m = (int)(take(in, 1) % 4); m > 0; m--) {
		uint64_t where = take(in, 2), what = take(in, 1);
		switch (where % 4) {
		case 0: ((uint8_t *)&f->w)[where / 4 % sizeof(f->w)] = (uint8_t)what; break;
		case 1: f->arena.p[where / 4 % 128] = (uint8_t)what; break;
		case 2: f->co.p[where / 4 % sizeof(*co)] = (uint8_t)what; break;
		default: f->ci.p[where / 4 % sizeof(*ci)] = (uint8_t)what; break;
		}
	}
	if (take(in, 1) % 16 == 0)
		f->nfds = (int)(take(in, 1) % 4);
	if (take(in, 1) % 32 == 0)
		f->answer_hello = false;
	return true;
}

/* Play the daemon: publish slot `idx` (maybe out of range) with a batch
 * descriptor from the input. */
static void fake_publish(struct fake *f, struct in *in, uint64_t next_global)
{
	struct seer_ctrl_out *co = (void *)f->co.p;
	uint32_t nslots = co->nslots ? co->nslots : 1;
	uint32_t idx = (uint32_t)take(in, 1);
	if (idx % 8)
		idx %= nslots;
	if (idx < nslots && co->slots_off + co->slot_stride * nslots <= f->co.size) {
		struct seer_wire_slot *s = (void *)(f->co.p + co->slots_off + co->slot_stride * idx);
		s->global = take(in, 1) % 4 ? next_global : take(in, 8);
		s->epoch = take(in, 1);
		s->step = take(in, 1);
		s->n = (uint32_t)take(in, 1) % (co->batch_size + 2);
		s->status = take(in, 1) % 8 ? 0 : SEER_EBATCH;
		memset(s->msg, 'm', sizeof(s->msg)); /* unterminated: libseer must cut it */
		struct seer_wire_sample *smp = (void *)(s + 1);
		for (uint32_t i = 0; i < s->n && i < co->batch_size; i++) {
			smp[i].id = take(in, 2);
			smp[i].offset = take(in, 1) % 4 ? take(in, 2) : take(in, 8);
			smp[i].length = take(in, 1) % 4 ? take(in, 2) : take(in, 8);
			smp[i].label = (int64_t)take(in, 1);
			smp[i].type = (uint32_t)take(in, 1) % 6;
		}
	}
	if (co->ring_off + 4ull * nslots <= f->co.size) {
		uint32_t *ring = (void *)(f->co.p + co->ring_off);
		uint32_t p = atomic_load(&co->prod);
		ring[p & (nslots - 1)] = idx;
		atomic_store(&co->prod, p + 1);
		atomic_fetch_add(&co->doorbell, 1);
	}
}

/* ---- the API side ------------------------------------------------------------------ */

#define POOL 16
static void *pool[POOL]; /* handles: real, released, closed (stale), forged */

static void *pick(struct in *in)
{
	uint64_t k = take(in, 1);
	if (k % 8 == 7)
		return (void *)(uintptr_t)take(in, 8); /* forged */
	return pool[k % POOL];
}

static void keep(void *h, struct in *in) { pool[take(in, 1) % POOL] = h; }

static void read_batch(const seer_batch_t *b, struct in *in)
{
	volatile uint8_t sink = 0;
	uint32_t n = seer_batch_len(b);
	seer_batch_epoch(b);
	seer_batch_step(b);
	const char *e = seer_batch_error(b);
	if (e)
		sink ^= (uint8_t)strlen(e);
	uint32_t i = (uint32_t)take(in, 1) % (n + 2);
	const uint8_t *d = seer_sample_data(b, i);
	uint64_t len = seer_sample_size(b, i);
	if (d && len) {
		sink ^= d[0];
		sink ^= d[len - 1];
	}
	seer_sample_label(b, i);
	seer_sample_id(b, i);
	seer_sample_dtype(b, i);
	uint64_t dims[SEER_MAX_DIMS];
	seer_sample_shape(b, i, dims, (int)(take(in, 1) % (SEER_MAX_DIMS + 1)));
	if (n <= 64) {
		uint64_t off[64], sz[64], ids[64];
		int64_t lab[64];
		uint32_t ty[64];
		seer_batch_export(b, off, sz, lab, ids, ty);
	}
	(void)sink;
}

static void client_ops(seer_client_t *c, struct fake *f, struct in *in)
{
	uint64_t next_global = f->w.start;
	for (int op = 0; op < 48 && in->n; op++) {
		seer_batch_t *b = NULL;
		switch (take(in, 1) % 10) {
		case 0:
		case 1:
			fake_publish(f, in, next_global);
			break;
		case 2:
			/* mostly a poll; now and then the futex wait (1 ms) */
			if (seer_next(c, take(in, 1) % 16 ? 0 : 1, &b) == 0 || b) {
				next_global++;
				keep(b, in);
			}
			break;
		case 3:
			if (take(in, 1) % 4)
				seer_release(take(in, 1) % 4 ? c : pick(in), pick(in));
			else /* a binding that takes ahead hands them out (or misuses it) */
				seer_handed(take(in, 1) % 4 ? c : pick(in), pick(in));
			break;
		case 4:
			read_batch(pick(in), in);
			break;
		case 5:
			f->seek_reply = (struct seer_msg_seek){
				.kind = take(in, 1) % 8 ? SEER_MSG_SEEK_OK : (uint32_t)take(in, 4),
				.status = take(in, 1) % 4 ? 0 : -(int32_t)take(in, 2),
				.start = take(in, 1), .prod = take(in, 4) };
			atomic_store(&f->seek_answer, take(in, 1) % 16 != 0);
			seer_seek(c, take(in, 1) % 6, take(in, 1) % 10);
			break;
		case 6:
			atomic_store((_Atomic uint32_t *)&((struct seer_ctrl_out *)f->co.p)->state,
				     (uint32_t)take(in, 1) % 4);
			break;
		case 7: {
			uint64_t dims[SEER_MAX_DIMS];
			int dt;
			seer_type_info(c, (uint32_t)take(in, 1) % 6, &dt, dims,
				       (int)(take(in, 1) % (SEER_MAX_DIMS + 1)));
			seer_rank(c);
			seer_num_samples(c);
			seer_alive(c);
			int fd = seer_arena_fd(c);
			if (fd >= 0)
				close(fd);
			break;
		}
		case 8:
			seer_close(c); /* the rest of the run uses a closed client */
			break;
		default: {
			void *h = pick(in);
			seer_next(h, 0, &b);
			seer_seek(h, 0, 0);
			seer_epochs(h);
			read_batch(h, in);
			break;
		}
		}
	}
}

static void no_daemon(struct in *in)
{
	char path[160];
	uint64_t len = take(in, 1);
	memset(path, 'p', sizeof(path));
	memcpy(path, "/nonexistent/", 13);
	path[MIN(13 + len, sizeof(path) - 1)] = '\0';
	seer_options_t o = { .socket_path = take(in, 1) % 2 ? path : NULL,
			     .rank = (int)take(in, 4), .world_size = (int)take(in, 4),
			     .flags = (unsigned)take(in, 1), .connect_timeout_ms = 1 };
	seer_client_t *c = NULL;
	if (seer_connect(&o, take(in, 1) % 8 ? &c : NULL) == 0)
		abort(); /* there is no daemon */
	seer_batch_t *b = NULL;
	void *h = pick(in);
	seer_next(h, 0, take(in, 1) % 2 ? &b : NULL);
	seer_release(h, pick(in));
	seer_seek(h, take(in, 8), take(in, 8));
	seer_close(pick(in));
	read_batch(pick(in), in);
	int64_t v;
	seer_constant(take(in, 1) % 2 ? "SEER_EEPOCH" : "nope", take(in, 1) % 2 ? &v : NULL);
	seer_dtype_name((int)take(in, 1) - 2);
	seer_options_offset(take(in, 1) % 2 ? "rank" : NULL);
	seer_strerror(-(int)take(in, 2));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	char dir[] = "/tmp/seer-fuzz-client-XXXXXX";
	if (!mkdtemp(dir))
		abort();
	snprintf(sock_path, sizeof(sock_path), "%s/s.sock", dir);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
	listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(listen_fd, 16) != 0)
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	if (take(&in, 1) % 4 == 0) {
		no_daemon(&in);
		return 0;
	}
	struct fake f = { .efd = -1, .arena.fd = -1, .co.fd = -1, .ci.fd = -1 };
	if (pipe2(f.stop, O_CLOEXEC) != 0)
		abort();
	pthread_t t;
	bool built = fake_build(&f, &in);
	if (built && pthread_create(&t, NULL, fake_main, &f) == 0) {
		seer_options_t o = { .socket_path = sock_path, .rank = 0, .world_size = 1,
				     .connect_timeout_ms = f.answer_hello ? 100 : 2,
				     .flags = take(&in, 1) % 2 ? SEER_OPT_TAKE_AHEAD : 0,
				     .max_held = (int)(take(&in, 1) % 8) };
		seer_client_t *c = NULL;
		if (seer_connect(&o, &c) == 0) {
			keep(c, &in);
			client_ops(c, &f, &in);
			seer_close(c); /* a second close when client_ops closed it */
		}
		if (write(f.stop[1], "x", 1) != 1)
			abort();
		pthread_join(t, NULL);
	}
	seg_free(&f.arena);
	seg_free(&f.co);
	seg_free(&f.ci);
	if (f.efd >= 0)
		close(f.efd);
	close(f.stop[0]);
	close(f.stop[1]);
	return 0;
}
