/* connect.c: seer_connect — options, the socket (with the daemon's
 * credentials checked), the handshake, and mapping the shared segments.
 *
 * Runs on the caller's thread. Every blocking step (connect retries, sending
 * the hello, waiting for the welcome) ends by one deadline, the connect
 * timeout, moved on by each SEER_MSG_PROGRESS of a seerd still starting. On
 * failure everything set up so far is undone and the return value plus
 * seer_errmsg() say why; nothing aborts. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../src/common/base.h"
#include "../src/common/paths.h"
#include "../src/common/shm.h"
#include "client.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 30000
#define SUN_PATH_SIZE sizeof(((struct sockaddr_un *)0)->sun_path)

struct params {
	int rank, world;
	const char *job;
	char sock[SUN_PATH_SIZE];
	int timeout_ms;
	uint64_t epoch, step;
	const uint8_t *rec;   /* checkpoint record to resume from, or NULL */
	size_t rec_len;
	int reconnect_ms;
	uint32_t held;        /* batches it may hold at once (0: seerd's max_held) */
	bool take_ahead;      /* SEER_OPT_TAKE_AHEAD */
	struct client_jobdef jd; /* the job's definition the trainer declares */
};

_Static_assert(SEER_JOB_BATCH_SIZE == SEER_HELLO_JOB_BATCH_SIZE &&
	       SEER_JOB_SHUFFLE == SEER_HELLO_JOB_SHUFFLE &&
	       SEER_JOB_DROP_LAST == SEER_HELLO_JOB_DROP_LAST && SEER_JOB_SEED == SEER_HELLO_JOB_SEED &&
	       SEER_JOB_EPOCHS == SEER_HELLO_JOB_EPOCHS &&
	       SEER_JOB_DATASET == SEER_HELLO_JOB_DATASET, "job bits: seer.h and the protocol");

/* The options' job definition -> p->jd: 0, or -EINVAL/-ENAMETOOLONG with the
 * reason set. The dataset path is made absolute here (the trainer's view),
 * resolved through its links when it exists. */
static int resolve_job(const seer_options_t *o, struct params *p)
{
	struct client_jobdef *jd = &p->jd;
	memset(jd, 0, sizeof(*jd));
	if (o->job & ~SEER_HELLO_JOB_ALL) {
		err_set("seer_connect: unknown bits 0x%x in seer_options_t.job", o->job);
		return -EINVAL;
	}
	jd->job = o->job;
	if ((o->job & SEER_JOB_BATCH_SIZE) && o->batch_size == 0) {
		err_set("seer_connect: batch_size 0 (a batch holds at least one sample)");
		return -EINVAL;
	}
	if ((o->job & SEER_JOB_EPOCHS) && o->epochs == 0) {
		err_set("seer_connect: epochs 0 (a job has at least one epoch)");
		return -EINVAL;
	}
	jd->batch_size = o->batch_size;
	jd->seed = o->seed;
	jd->epochs = o->epochs;
	jd->shuffle = o->shuffle != 0;
	jd->drop_last = o->drop_last != 0;
	if (!(o->job & SEER_JOB_DATASET))
		return 0;
	if (!o->dataset || !*o->dataset) {
		err_set("seer_connect: SEER_JOB_DATASET without a dataset path");
		return -EINVAL;
	}
	char buf[PATH_MAX], cwd[PATH_MAX];
	const char *path = o->dataset;
	if (realpath(o->dataset, buf)) {
		path = buf;
	} else if (o->dataset[0] != '/' && getcwd(cwd, sizeof(cwd))) {
		if (snprintf(buf, sizeof(buf), "%s/%s", cwd, o->dataset) < (int)sizeof(buf))
			path = buf;
	}
	size_t len = strlen(path);
	if (len >= sizeof(jd->dataset)) {
		err_set("dataset path %.200s... is %zu bytes, more than the %zu seerd takes: use a "
			"shorter path (a link)", path, len, sizeof(jd->dataset) - 1);
		return -ENAMETOOLONG;
	}
	memcpy(jd->dataset, path, len + 1);
	return 0;
}

/* A non-negative int from the environment: 0, 1 (unset) or -EINVAL. */
static int env_int(const char *name, int *out)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return 1;
	char *end;
	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || *end || x < 0 || x > INT_MAX)
		return -EINVAL;
	*out = (int)x;
	return 0;
}

static void rank_from_env(int *rank, int *world)
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
			return;
	*rank = 0;
	*world = 1;
}

/* Options (NULL: all defaults) -> checked parameters. */
static int resolve(const seer_options_t *o, struct params *p)
{
	static const seer_options_t zero;
	if (!o)
		o = &zero;
	if (o->flags & ~(SEER_OPT_START_AT | SEER_OPT_RECONNECT | SEER_OPT_TAKE_AHEAD)) {
		err_set("seer_connect: unknown flags 0x%x in seer_options_t", o->flags);
		return -EINVAL;
	}
	if (o->world_size < 0 || o->connect_timeout_ms < 0 || o->reconnect_ms < 0 ||
	    o->max_held < 0) {
		err_set("seer_connect: negative %s", o->world_size < 0 ? "world_size" :
			o->reconnect_ms < 0 ? "reconnect_ms" :
			o->max_held < 0 ? "max_held" : "connect_timeout_ms");
		return -EINVAL;
	}
	p->held = (uint32_t)o->max_held;
	p->take_ahead = (o->flags & SEER_OPT_TAKE_AHEAD) != 0;
	if ((o->record == NULL) != (o->record_len == 0) || o->record_len > SEER_RECORD_MAX) {
		err_set("seer_connect: record %p of %zu bytes (a record is 1 to %u bytes, or NULL "
			"and 0)", o->record, o->record_len, SEER_RECORD_MAX);
		return -EINVAL;
	}
	p->rec = o->record;
	p->rec_len = o->record_len;
	p->reconnect_ms = o->flags & SEER_OPT_RECONNECT ? (o->reconnect_ms ? o->reconnect_ms : 60000)
							: 0;
	if (o->world_size > 0) {
		p->rank = o->rank;
		p->world = o->world_size;
	} else {
		rank_from_env(&p->rank, &p->world);
	}
	if (p->rank < 0 || p->rank >= p->world) {
		err_set("rank %d is not in [0, world size %d)", p->rank, p->world);
		return -EINVAL;
	}
	p->job = o->job_id ? o->job_id : seer_env_job_id();
	if (!*p->job || strlen(p->job) >= SEER_JOBID_MAX) {
		err_set("job id '%.80s%s' must be 1-%d characters", p->job,
			strlen(p->job) > 80 ? "..." : "", SEER_JOBID_MAX - 1);
		return -EINVAL;
	}
	const char *sock = o->socket_path ? o->socket_path : getenv("SEER_SOCKET");
	if (sock && *sock) {
		size_t len = strlen(sock);
		if (len >= SUN_PATH_SIZE) {
			err_set("socket path %.200s%s is %zu bytes, longer than the %zu a unix socket "
				"address holds: use a shorter path", sock, len > 200 ? "..." : "", len,
				SUN_PATH_SIZE - 1);
			return -ENAMETOOLONG;
		}
		memcpy(p->sock, sock, len + 1);
	} else {
		char why[768];
		int rc = path_default_socket(p->sock, sizeof(p->sock), p->job, false, why,
					     sizeof(why));
		if (rc != 0) {
			err_set("%s", why);
			return rc;
		}
	}
	p->timeout_ms = o->connect_timeout_ms;
	if (p->timeout_ms == 0 &&
	    (env_int("SEER_CONNECT_TIMEOUT_MS", &p->timeout_ms) != 0 || p->timeout_ms == 0))
		p->timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
	bool at = o->flags & SEER_OPT_START_AT;
	p->epoch = at ? o->start_epoch : SEER_POS_RESUME;
	p->step = at ? o->start_step : 0;
	return resolve_job(o, p);
}

/* Wait for `events` on fd until the deadline: 0, -ETIMEDOUT or -errno. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	for (;;) {
		uint64_t now = now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		uint64_t ms = (deadline - now + 999999) / 1000000;
		struct pollfd pf = { .fd = fd, .events = events };
		int r = poll(&pf, 1, (int)MIN(ms, (uint64_t)INT_MAX));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

/* The daemon must be us or root: anyone else listening there may be posing
 * as seerd to feed us its bytes. */
static int check_peer(int fd, const char *path)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
		err_set("cannot learn who serves %s: %s", path, strerror(errno));
		return -errno;
	}
	if (cr.uid != geteuid() && cr.uid != 0) {
		err_set("refusing the seerd at %s: it runs as uid %u (pid %d), not as you (uid %u) or "
			"root, so it may be another user posing as seerd. Start your own seerd, or set "
			"SEER_SOCKET to its socket", path, (unsigned)cr.uid, (int)cr.pid,
			(unsigned)geteuid());
		return -EPERM;
	}
	return 0;
}

int connect_open_socket(const char *path, uint64_t deadline)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	_Static_assert(sizeof(sa.sun_path) == SUN_PATH_SIZE, "sun_path");
	memcpy(sa.sun_path, path, strlen(path) + 1); /* resolve() checked the length */
	for (;;) {
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0) {
			err_set("socket(): %s", strerror(errno));
			return -errno;
		}
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			int rc = check_peer(fd, path);
			if (rc == 0)
				return fd;
			close(fd);
			return rc;
		}
		int e = errno;
		close(fd);
		if (e == EACCES || e == EPERM) {
			err_set("cannot connect to seerd at %s: %s (the socket or its directory belongs "
				"to another user: seerd serves only the user that started it)", path,
				strerror(e));
			return -e;
		}
		bool retry = e == ENOENT || e == ECONNREFUSED || e == EAGAIN;
		if (!retry || now_ns() >= deadline) {
			if (e == EAGAIN)
				err_set("seerd at %s accepts no connection (stopped or overloaded?)", path);
			else
				err_set("no seerd at %s (%s): start seerd for this job, or set SEER_SOCKET "
					"or SEER_JOB_ID to match it", path, strerror(e));
			return retry && e == EAGAIN ? -ETIMEDOUT : -e;
		}
		/* the daemon may still be starting */
		sleep_ns(MIN(20 * 1000000ull, deadline - now_ns() + 1));
	}
}

/* One packet (with up to SEER_WELCOME_NFDS fds) before the deadline. */
static ssize_t recv_until(int fd, void *buf, size_t len, int *fds, int *nfds, uint64_t deadline)
{
	for (;;) {
		ssize_t n = sock_recv(fd, buf, len, fds, nfds, fds ? SEER_WELCOME_NFDS : 0);
		if (n != -EAGAIN)
			return n;
		int rc = wait_fd(fd, POLLIN, deadline);
		if (rc != 0)
			return rc;
	}
}

static ssize_t send_until(int fd, const void *buf, size_t len, uint64_t deadline)
{
	for (;;) {
		ssize_t n = sock_send(fd, buf, len, NULL, 0);
		if (n != -EAGAIN)
			return n;
		int rc = wait_fd(fd, POLLOUT, deadline);
		if (rc != 0)
			return rc;
	}
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

static int timed_out(const struct params *p, const char *step)
{
	err_set("seerd at %s did not %s within the connect timeout (%d ms): is it stopped "
		"(SIGSTOP) or overloaded?", p->sock, step, p->timeout_ms);
	return -ETIMEDOUT;
}

/* A record in SEER_MSG_RECORD packets. */
static ssize_t send_record(int fd, const uint8_t *rec, size_t len, uint64_t deadline)
{
	struct {
		struct seer_msg_record h;
		uint8_t data[SEER_RECORD_CHUNK];
	} *m = malloc(sizeof(*m));
	if (!m)
		return -ENOMEM;
	ssize_t n = 0;
	for (size_t off = 0; off < len && n >= 0;) {
		size_t k = MIN(len - off, (size_t)SEER_RECORD_CHUNK);
		m->h = (struct seer_msg_record){ .kind = SEER_MSG_RECORD, .len = (uint32_t)k,
						 .offset = off, .total = len };
		memcpy(m->data, rec + off, k);
		n = send_until(fd, m, sizeof(m->h) + k, deadline);
		if (n == (ssize_t)(sizeof(m->h) + k))
			off += k;
		else if (n >= 0)
			n = -EPIPE;
	}
	free(m);
	return n < 0 ? n : 0;
}

/* The job plan's record after the WELCOME (c->w.record_len bytes). */
static int recv_plan_record(struct seer_client *c, const struct params *p, uint64_t deadline)
{
	size_t len = c->w.record_len, got = 0;
	if (len == 0)
		return 0;
	if (len > SEER_RECORD_MAX)
		goto bad;
	c->plan.plan_rec = malloc(len);
	struct {
		struct seer_msg_record h;
		uint8_t data[SEER_RECORD_CHUNK];
	} *m = malloc(sizeof(*m));
	if (!c->plan.plan_rec || !m) {
		free(m);
		err_set("out of memory for the job's %zu-byte resume plan", len);
		return -ENOMEM;
	}
	while (got < len) {
		ssize_t n = recv_until(c->sock, m, sizeof(*m), NULL, NULL, deadline);
		if (n == -ETIMEDOUT) {
			free(m);
			return timed_out(p, "send the job's resume plan");
		}
		if (n < (ssize_t)sizeof(m->h) || m->h.kind != SEER_MSG_RECORD || m->h.total != len ||
		    m->h.offset != got || m->h.len != (size_t)n - sizeof(m->h) ||
		    m->h.len > len - got || m->h.len == 0) {
			free(m);
			goto bad;
		}
		memcpy(c->plan.plan_rec + got, m->data, m->h.len);
		got += m->h.len;
	}
	free(m);
	c->plan.plan_rec_len = len;
	return 0;
bad:
	err_set("malformed resume plan from seerd at %s (protocol version mismatch?)", p->sock);
	return SEER_EPROTO;
}

/* handshake()'s answer when seerd says it is alive but still starting
 * (SEER_MSG_PROGRESS): not an error, connect again (open_session_wait). */
#define HS_STARTING 1

/* HELLO (+ the checkpoint record) -> WELCOME (+4 fds, + the plan's record),
 * ERROR, or PROGRESS (HS_STARTING). */
static int handshake(struct seer_client *c, const struct params *p, uint64_t deadline,
		     int fds[SEER_WELCOME_NFDS])
{
	struct seer_msg_hello h = {
		.magic = SEER_MAGIC_HELLO, .kind = SEER_MSG_HELLO, .version = SEER_PROTO_VERSION,
		.rank = (uint32_t)c->rank, .world = (uint32_t)c->world,
		.epoch = p->epoch, .step = p->step, .record_len = (uint32_t)p->rec_len,
		.held = p->held, .job = p->jd.job, .batch_size = p->jd.batch_size,
		.seed = p->jd.seed, .epochs = p->jd.epochs, .shuffle = p->jd.shuffle,
		.drop_last = p->jd.drop_last,
	};
	snprintf(h.job_id, sizeof(h.job_id), "%s", p->job);
	memcpy(h.dataset, p->jd.dataset, sizeof(h.dataset));
	ssize_t n = send_until(c->sock, &h, sizeof(h), deadline);
	if (n == -ETIMEDOUT)
		return timed_out(p, "take the handshake");
	int nfds = 0;
	bool sent = n == (ssize_t)sizeof(h);
	if (sent && p->rec_len) {
		n = send_record(c->sock, p->rec, p->rec_len, deadline);
		if (n == -ETIMEDOUT)
			return timed_out(p, "take the checkpoint record");
		sent = n == 0;
	}
	/* unsent: the daemon may have answered (a refusal) before closing */
	n = recv_until(c->sock, &c->w, sizeof(c->w), fds, &nfds, deadline);
	if (n == -ETIMEDOUT)
		return timed_out(p, "answer the handshake");
	if (n >= (ssize_t)offsetof(struct seer_msg_welcome, nsamples) &&
	    c->w.kind == SEER_MSG_PROGRESS) {
		close_fds(fds, nfds);
		c->w.msg[sizeof(c->w.msg) - 1] = '\0';
		return HS_STARTING;
	}
	bool refusal = n >= (ssize_t)offsetof(struct seer_msg_welcome, nsamples) &&
		       c->w.kind == SEER_MSG_ERROR;
	if (!sent && !refusal) {
		close_fds(fds, nfds);
		err_set("sending the handshake to %s: %s", p->sock, strerror(EPIPE));
		return -EPIPE;
	}
	if (n <= 0) {
		err_set("seerd at %s closed the connection during the handshake (%s)", p->sock,
			n < 0 ? strerror((int)-n) : "EOF");
		return n < 0 ? (int)n : SEER_EPROTO;
	}
	if (refusal) {
		close_fds(fds, nfds);
		c->w.msg[sizeof(c->w.msg) - 1] = '\0';
		err_set("seerd refused rank %d: %s", c->rank, c->w.msg);
		return c->w.status < 0 ? c->w.status : SEER_EREFUSED;
	}
	if (n != (ssize_t)sizeof(c->w) || c->w.kind != SEER_MSG_WELCOME ||
	    nfds != SEER_WELCOME_NFDS) {
		close_fds(fds, nfds);
		err_set("malformed welcome from seerd at %s (protocol version mismatch?)", p->sock);
		return SEER_EPROTO;
	}
	int rc = recv_plan_record(c, p, deadline);
	if (rc != 0)
		close_fds(fds, nfds);
	return rc;
}

static int fd_size_is(int fd, uint64_t size)
{
	struct stat st;
	return fstat(fd, &st) == 0 && (uint64_t)st.st_size == size;
}

static int map_segments(struct seer_client *c, const int fds[SEER_WELCOME_NFDS])
{
	const struct seer_msg_welcome *w = &c->w;
	void *p;
	int rc;
	if (!fd_size_is(fds[0], w->arena_size) || !fd_size_is(fds[1], w->ctrl_out_size) ||
	    !fd_size_is(fds[2], w->ctrl_in_size) || w->nslots == 0 ||
	    w->nslots > HANDLE_MAX_SLOTS || (w->nslots & (w->nslots - 1)) != 0 ||
	    w->batch_size == 0 || w->arena_size < sizeof(struct seer_arena_hdr) ||
	    w->ctrl_out_size < sizeof(struct seer_ctrl_out) ||
	    w->ctrl_in_size < sizeof(struct seer_ctrl_in) || w->batches_per_epoch == 0 ||
	    w->resume_batches == 0 || w->epochs > UINT64_MAX / 4 / w->batches_per_epoch ||
	    w->epochs > UINT64_MAX / 4 / w->resume_batches ||
	    (w->resume_batches != w->batches_per_epoch && w->resume_epoch >= w->epochs)) {
		err_set("daemon sent segments that do not match its welcome message");
		return SEER_EPROTO;
	}
	if ((rc = shm_map(fds[0], w->arena_size, 0, &p)) != 0)
		goto map_fail;
	c->shm.arena = p;
	c->shm.arena_size = w->arena_size;
	if ((rc = shm_map(fds[1], w->ctrl_out_size, 0, &p)) != 0)
		goto map_fail;
	c->shm.co = p;
	c->shm.co_size = w->ctrl_out_size;
	/* its batch slots mapped now (seerd wrote them all at creation): a slot
	 * first used in a warm epoch does not fault there (ignored by kernels
	 * before 5.14: the slots then fault in when first read) */
	madvise(p, w->ctrl_out_size, 22 /* MADV_POPULATE_READ, Linux 5.14 */);
	if ((rc = shm_map(fds[2], w->ctrl_in_size, 1, &p)) != 0)
		goto map_fail;
	c->shm.ci = p;
	c->shm.ci_size = w->ctrl_in_size;
	return 0;
map_fail:
	err_set("cannot map the daemon's shared memory: %s", strerror(-rc));
	return rc;
}

/* Check the segments' headers and set up rings and slots. */
static int attach(struct seer_client *c)
{
	const struct seer_msg_welcome *w = &c->w;
	const struct seer_arena_hdr *ah = (const void *)c->shm.arena;
	const struct seer_ctrl_out *co = c->shm.co;
	uint64_t stride = seer_slot_stride(w->batch_size);
	if (ah->magic != SEER_MAGIC_ARENA || ah->version != SEER_PROTO_VERSION ||
	    ah->size != w->arena_size || ah->types_off > w->arena_size ||
	    ah->ntypes > (w->arena_size - ah->types_off) / sizeof(struct seer_wire_type) ||
	    co->magic != SEER_MAGIC_CTOUT || co->version != SEER_PROTO_VERSION ||
	    co->nslots != w->nslots || co->batch_size != w->batch_size ||
	    co->slot_stride != stride || co->ring_off > w->ctrl_out_size ||
	    4ull * w->nslots > w->ctrl_out_size - co->ring_off ||
	    co->slots_off > w->ctrl_out_size ||
	    stride * w->nslots > w->ctrl_out_size - co->slots_off ||
	    c->shm.ci->ring_off > w->ctrl_in_size || 4ull * w->nslots > w->ctrl_in_size - c->shm.ci->ring_off ||
	    co->ring_off % 4 || c->shm.ci->ring_off % 4 || co->slots_off % 8) {
		err_set("daemon's shared segments fail their layout checks (version mismatch?)");
		return SEER_EPROTO;
	}
	c->shm.types = (const void *)(c->shm.arena + ah->types_off);
	c->shm.ntypes = ah->ntypes;
	c->nslots = w->nslots;
	c->out = (struct ring){
		.prod = (_Atomic uint32_t *)&co->prod, .cons = &c->shm.ci->cons,
		.entries = (uint32_t *)((uintptr_t)co + co->ring_off), .mask = w->nslots - 1,
	};
	c->rel = (struct ring){
		.prod = &c->shm.ci->rel_prod, .cons = (_Atomic uint32_t *)&co->rel_cons,
		.entries = (uint32_t *)((uintptr_t)c->shm.ci + c->shm.ci->ring_off), .mask = w->nslots - 1,
	};
	c->slots = calloc(w->nslots, sizeof(*c->slots));
	c->wslots = calloc(w->nslots, sizeof(*c->wslots));
	if (!c->slots || !c->wslots) {
		err_set("out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < w->nslots; i++) {
		c->wslots[i] = (const void *)((const uint8_t *)co + co->slots_off + stride * i);
		c->slots[i].ws = c->wslots[i];
	}
	c->plan.tl = (struct sampler_timeline){ .bpe = w->batches_per_epoch, .epoch = w->resume_epoch,
				       .nb = w->resume_batches, .epochs = w->epochs };
	if (c->plan.tl.nb == c->plan.tl.bpe)
		c->plan.tl.epoch = 0;
	c->plan.total = sampler_tl_end(&c->plan.tl);
	if (w->start > c->plan.total) {
		err_set("seerd starts this rank at batch %llu, past the job's %llu",
			(unsigned long long)w->start, (unsigned long long)c->plan.total);
		return SEER_EPROTO;
	}
	c->next_global = c->handed_next = w->start;
	prefault_init(c);
	return 0;
}

static struct seer_client *client_new(const struct params *p)
{
	struct seer_client *c = calloc(1, sizeof(*c));
	if (!c) {
		err_set("out of memory");
		return NULL;
	}
	c->sock = c->efd = c->shm.arena_fd = -1;
	c->rank = p->rank;
	c->world = p->world;
	c->timeout_ms = p->timeout_ms;
	c->rc.reconnect_ms = p->reconnect_ms;
	c->held = p->held;
	c->take_ahead = p->take_ahead;
	c->jd = p->jd;
	snprintf(c->job, sizeof(c->job), "%s", p->job);
	c->owner = getpid();
	_Static_assert(sizeof(c->sock_path) == sizeof(p->sock), "socket path size");
	memcpy(c->sock_path, p->sock, sizeof(p->sock));
	pthread_mutex_init(&c->lock, NULL);
	return c;
}

/* Open c's socket and run the handshake, map the segments and set up
 * rings and slots: c's session. On failure c holds what it got (the caller
 * destroys it). */
static int open_session(struct seer_client *c, const struct params *p, uint64_t deadline)
{
	int fds[SEER_WELCOME_NFDS];
	c->sock = connect_open_socket(p->sock, deadline);
	if (c->sock < 0)
		return c->sock;
	int rc = handshake(c, p, deadline, fds);
	if (rc != 0)
		return rc;
	rc = map_segments(c, fds);
	c->shm.arena_fd = fds[0]; /* kept for seer_arena_fd() */
	close(fds[1]);
	close(fds[2]);
	c->efd = fds[3];
	return rc != 0 ? rc : attach(c);
}

/* open_session, waiting while seerd answers that it is still starting (its
 * catalog scan): each such answer moves the deadline to the connect timeout
 * from then, never past `limit`. So a long scan never fails a trainer, and a
 * dead or stopped daemon still fails it within one connect timeout. */
static int open_session_wait(struct seer_client *c, const struct params *p, uint64_t deadline,
			     uint64_t limit)
{
	for (;;) {
		int rc = open_session(c, p, deadline);
		if (rc != HS_STARTING)
			return rc;
		close(c->sock);
		c->sock = -1;
		uint64_t t = now_ns();
		deadline = MIN(limit, t + (uint64_t)p->timeout_ms * 1000000ull);
		if (t >= deadline) {
			err_set("seerd at %s is still starting (%s) after the reconnect deadline",
				p->sock, c->w.msg);
			return -ETIMEDOUT;
		}
		sleep_ns(MIN(50 * 1000000ull, deadline - t));
	}
}

SEER_API int seer_connect(const seer_options_t *opts, seer_client_t **out)
{
	if (!out) {
		err_set("seer_connect: out is NULL (pass the address of a seer_client_t *)");
		return -EINVAL;
	}
	*out = NULL;
	struct params p;
	int rc = resolve(opts, &p);
	if (rc != 0)
		return rc;
	struct seer_client *c = client_new(&p);
	if (!c)
		return -ENOMEM;
	uint64_t deadline = now_ns() + (uint64_t)p.timeout_ms * 1000000ull;
	if ((rc = open_session_wait(c, &p, deadline, UINT64_MAX)) != 0 ||
	    (rc = handle_register(c, out)) != 0)
		goto fail;
	err_clear();
	return 0;
fail:
	client_destroy(c, false);
	return rc;
}

/* ---- reconnecting to a restarted seerd ----------------------------------------- */

/* An old session's shared memory (its arena, control segments). */
static void old_unmap(struct old_session *o)
{
	if (!o->arena)
		return;
	munmap((void *)o->arena, o->arena_size);
	munmap((void *)o->co, o->co_size);
	munmap(o->ci, o->ci_size);
	o->arena = NULL;
	o->co = NULL;
	o->ci = NULL;
}

/* n's session into c; c's old one to its graveyard (c->lock held). The
 * graveyard keeps the old session's memory mapped while a batch of it is
 * held (a batch taken before the reconnect stays readable until it is
 * released, also one taken ahead and dropped from the stream, which another
 * thread may still be reading); with none held it is unmapped now: a
 * trainer whose seerd restarts N times does not pin N arenas. Batches taken
 * and not handed (SEER_OPT_TAKE_AHEAD) leave the stream: the new session
 * delivers them again. */
static void swap_session(struct seer_client *c, struct seer_client *n, struct old_session *o,
			 uint64_t *held)
{
	*o = (struct old_session){ .next = c->rc.old, .arena = c->shm.arena, .arena_size = c->shm.arena_size,
				   .co = c->shm.co, .co_size = c->shm.co_size, .ci = c->shm.ci,
				   .ci_size = c->shm.ci_size, .slots = c->slots, .wslots = c->wslots,
				   .held = held };
	for (uint32_t i = 0; i < c->nslots; i++)
		if (atomic_load(&c->slots[i].held))
			held[o->nheld++] = atomic_load(&c->slots[i].delivery);
	c->rc.old = o;
	prefault_free(c); /* the prefault helper reads the session's arena: stopped first */
	if (o->nheld == 0)
		old_unmap(o);
	int fds[3] = { c->sock, c->efd, c->shm.arena_fd };
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	c->sock = n->sock;
	c->efd = n->efd;
	c->shm.arena_fd = n->shm.arena_fd;
	c->shm.arena = n->shm.arena;
	c->shm.arena_size = n->shm.arena_size;
	c->shm.types = n->shm.types;
	c->shm.ntypes = n->shm.ntypes;
	c->shm.co = n->shm.co;
	c->shm.co_size = n->shm.co_size;
	c->shm.ci = n->shm.ci;
	c->shm.ci_size = n->shm.ci_size;
	c->out = n->out;
	c->rel = n->rel;
	c->slots = n->slots;
	c->wslots = n->wslots;
	c->nslots = n->nslots;
	c->nheld = 0;
	c->w = n->w;
	c->plan.tl = n->plan.tl;
	c->plan.total = n->plan.total;
	/* batches taken beyond the last one handed (and the epoch marker among
	 * them, which the binding has seen) come again from the new session */
	if (c->next_global != n->next_global)
		c->epoch_marker = false;
	c->next_global = c->handed_next = n->next_global;
	free(c->plan.plan_rec);
	c->plan.plan_rec = n->plan.plan_rec;
	c->plan.plan_rec_len = n->plan.plan_rec_len;
	if (c->plan.sampler)
		seer_sampler_free(c->plan.sampler);
	c->plan.sampler = NULL;
	c->rc.first_delivery = handle_next_delivery();
	prefault_free(n);
	prefault_init(c); /* libseer's own mapping of the new arena (a binding names its own again) */
	atomic_fetch_add(&c->rc.reconnects, 1);
}

/* A batch of a replaced session (delivery d) was released: its session's
 * memory goes once the user holds none of its batches (c->lock held). */
void client_old_release(struct seer_client *c, uint64_t d)
{
	for (struct old_session *o = c->rc.old; o; o = o->next) {
		for (uint32_t i = 0; i < o->nheld; i++) {
			if (o->held[i] != d)
				continue;
			o->held[i] = o->held[--o->nheld];
			if (o->nheld == 0)
				old_unmap(o);
			return;
		}
	}
}

int client_reconnect(struct seer_client *c, uint64_t deadline)
{
	uint8_t *rec;
	size_t len;
	int rc = client_state(c, &rec, &len);
	if (rc != 0)
		return rc;
	uint64_t e0, s0, e1, s1;
	sampler_tl_pos(&c->plan.tl, c->handed_next, &e0, &s0);
	struct params p = { .rank = c->rank, .world = c->world, .job = c->job,
			    .timeout_ms = c->timeout_ms, .epoch = SEER_POS_RESUME, .rec = rec,
			    .rec_len = len, .reconnect_ms = c->rc.reconnect_ms, .held = c->held,
			    .take_ahead = c->take_ahead, .jd = c->jd };
	memcpy(p.sock, c->sock_path, sizeof(p.sock));
	struct seer_client *n = client_new(&p);
	struct old_session *o = malloc(sizeof(*o));
	uint64_t *held = calloc(MAX(c->nslots, 1u), sizeof(*held));
	if (!n || !o || !held) {
		free(rec);
		free(o);
		free(held);
		if (n)
			client_destroy(n, false);
		err_set("out of memory reconnecting");
		return -ENOMEM;
	}
	uint64_t hs = MIN(deadline, now_ns() + (uint64_t)c->timeout_ms * 1000000ull);
	rc = open_session_wait(n, &p, hs, deadline);
	free(rec);
	if (rc == 0) {
		sampler_tl_pos(&n->plan.tl, n->next_global, &e1, &s1);
		if (e1 != e0 || s1 != s0 || n->w.nsamples != c->w.nsamples ||
		    n->w.batch_size != c->w.batch_size) {
			err_set("the restarted seerd at %s resumed rank %d at epoch %llu step %llu, its "
				"record says epoch %llu step %llu", c->sock_path, c->rank,
				(unsigned long long)e1, (unsigned long long)s1, (unsigned long long)e0,
				(unsigned long long)s0);
			rc = SEER_EPROTO;
		}
	}
	if (rc != 0) {
		client_destroy(n, false);
		free(o);
		free(held);
		return rc;
	}
	pthread_mutex_lock(&c->lock);
	swap_session(c, n, o, held);
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_destroy(&n->lock);
	free(n);
	return 0;
}
