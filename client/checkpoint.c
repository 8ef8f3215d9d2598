/* checkpoint.c: seer_ckpt_* — a trainer's checkpoint handed to the node's
 * seerd in shared memory (include/seer.h; the daemon's side is
 * daemon/checkpoint.c; the messages are proto/seer_proto.h's seer_msg_ckpt).
 *
 * Owns a seer_ckpt_t: its connection to seerd's checkpoint stage and, until
 * the commit, the writable mapping of the memfd seerd handed out. Runs on
 * the caller's thread (one at a time per handle). Every blocking step ends
 * by its deadline. A connection that breaks while waiting (seerd restarted)
 * is made again and the question asked again. On failure the return value
 * plus seer_errmsg() say why; nothing aborts, nothing is left mapped. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../proto/seer_proto.h"
#include "../src/common/base.h"
#include "../src/common/paths.h"
#include "../src/common/shm.h"
#include "client.h"
#include "seer.h"

/* Handles are tokens, as seer_client_t's (docs/client.md): [1:0] tag 2,
 * [13:2] the table index, [63:32] the entry's generation (odd while live,
 * bumped at close), so a closed, forged or NULL handle is refused, never
 * dereferenced. One thread at a time per handle (seer.h). */
#define CK_TAG 2u
#define CK_IDX_BITS 12
#define CK_MAX (1u << CK_IDX_BITS)
#define SUN_PATH_SIZE sizeof(((struct sockaddr_un *)0)->sun_path)
#define DEFAULT_CONNECT_MS 30000
#define OPEN_CONNECT_MS 2000

struct seer_ckpt {
	uint32_t idx;            /* its entry in ck_table */
	int sock;                /* -1: to be made again */
	int connect_ms;
	char sock_path[SUN_PATH_SIZE];
	char job[SEER_JOBID_MAX];
	char path[SEER_CKPT_PATH_MAX];
	uint64_t id, size;
	void *data;              /* writable mapping until the commit */
	bool committed;
};

static int where(const seer_options_t *o, char *sock, char *job, int *connect_ms, int dflt_ms)
{
	const char *j = o && o->job_id ? o->job_id : seer_env_job_id();
	if (!*j || strlen(j) >= SEER_JOBID_MAX) {
		err_set("job id '%.80s' must be 1-%d characters", j, SEER_JOBID_MAX - 1);
		return -EINVAL;
	}
	strcpy(job, j);
	const char *s = o && o->socket_path ? o->socket_path : getenv("SEER_SOCKET");
	if (s && *s) {
		if (strlen(s) >= SUN_PATH_SIZE) {
			err_set("socket path %.200s is longer than a unix socket address holds", s);
			return -ENAMETOOLONG;
		}
		strcpy(sock, s);
	} else {
		char why[768];
		int rc = path_default_socket(sock, SUN_PATH_SIZE, job, false, why, sizeof(why));
		if (rc != 0) {
			err_set("%s", why);
			return rc;
		}
	}
	*connect_ms = o && o->connect_timeout_ms > 0 ? o->connect_timeout_ms : dflt_ms;
	return 0;
}

static uint64_t deadline_of(int ms)
{
	return ms < 0 ? UINT64_MAX : now_ns() + (uint64_t)ms * 1000000ull;
}

static int wait_fd(int fd, short events, uint64_t deadline)
{
	for (;;) {
		uint64_t now = now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		uint64_t ms = deadline == UINT64_MAX ? 1000 : (deadline - now + 999999) / 1000000;
		struct pollfd pf = { .fd = fd, .events = events };
		int r = poll(&pf, 1, (int)MIN(ms, (uint64_t)1000));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

/* One request and its reply (with at most one fd). 0 and *r filled, or
 * -errno: -EPIPE/-ECONNRESET when seerd went away, -ETIMEDOUT. */
static int rpc(int sock, const struct seer_msg_ckpt *q, struct seer_msg_ckpt *r, int *fd,
	       uint64_t deadline)
{
	for (;;) {
		ssize_t n = sock_send(sock, q, sizeof(*q), NULL, 0);
		if (n == (ssize_t)sizeof(*q))
			break;
		if (n != -EAGAIN)
			return n < 0 ? (int)n : -EPIPE;
		int rc = wait_fd(sock, POLLOUT, deadline);
		if (rc != 0)
			return rc;
	}
	for (;;) {
		int fds[1], nfds = 0;
		ssize_t n = sock_recv(sock, r, sizeof(*r), fd ? fds : NULL, fd ? &nfds : NULL,
				      fd ? 1 : 0);
		if (n == -EAGAIN) {
			int rc = wait_fd(sock, POLLIN, deadline);
			if (rc != 0)
				return rc;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return (int)n;
		if (fd)
			*fd = nfds ? fds[0] : -1;
		if (n != (ssize_t)sizeof(*r) || r->magic != SEER_MAGIC_CKPT ||
		    r->kind != SEER_MSG_CKPT_REPLY) {
			if (fd && nfds)
				close(fds[0]);
			err_set("seerd sent a malformed checkpoint reply (%zd bytes)", n);
			return SEER_EPROTO;
		}
		if (r->status != 0) {
			r->msg[sizeof(r->msg) - 1] = '\0';
			err_set("%s", r->msg[0] ? r->msg : "checkpoint request refused");
		}
		return 0;
	}
}

static void req_init(struct seer_msg_ckpt *q, const struct seer_ckpt *k, uint32_t kind)
{
	memset(q, 0, sizeof(*q));
	q->magic = SEER_MAGIC_CKPT;
	q->kind = kind;
	q->version = SEER_CKPT_VERSION;
	q->id = k->id;
	q->size = k->size;
	memcpy(q->job_id, k->job, sizeof(q->job_id));
	memcpy(q->path, k->path, sizeof(q->path));
}

static struct {
	uint32_t gen;            /* odd: live */
	struct seer_ckpt *k;
} ck_table[CK_MAX];
static pthread_mutex_t ck_lock = PTHREAD_MUTEX_INITIALIZER;

/* A token for k, or NULL when CK_MAX handles are open. */
static seer_ckpt_t *token_new(struct seer_ckpt *k)
{
	pthread_mutex_lock(&ck_lock);
	for (uint32_t i = 0; i < CK_MAX; i++) {
		if (ck_table[i].gen & 1)
			continue;
		ck_table[i].gen++;
		ck_table[i].k = k;
		k->idx = i;
		uint64_t t = (uint64_t)ck_table[i].gen << 32 | (uint64_t)i << 2 | CK_TAG;
		pthread_mutex_unlock(&ck_lock);
		return (seer_ckpt_t *)(uintptr_t)t;
	}
	pthread_mutex_unlock(&ck_lock);
	return NULL;
}

/* The handle's object, or NULL with *code -EINVAL (not a handle) or -EBADF
 * (closed) and seer_errmsg() set. */
static struct seer_ckpt *handle_code(seer_ckpt_t *h, int *code)
{
	uint64_t t = (uint64_t)(uintptr_t)h;
	uint32_t gen = (uint32_t)(t >> 32), idx = (uint32_t)(t >> 2) & (CK_MAX - 1);
	if (!h || (t & 3) != CK_TAG || (t & 0xffffc000ull) || !(gen & 1)) {
		err_set("not a seer_ckpt_t handle");
		*code = -EINVAL;
		return NULL;
	}
	pthread_mutex_lock(&ck_lock);
	struct seer_ckpt *k = ck_table[idx].gen == gen ? ck_table[idx].k : NULL;
	pthread_mutex_unlock(&ck_lock);
	if (!k) {
		err_set("seer_ckpt_t handle already closed");
		*code = -EBADF;
	}
	return k;
}

static struct seer_ckpt *handle(seer_ckpt_t *h)
{
	int unused;
	return handle_code(h, &unused);
}

static void unmap(struct seer_ckpt *k)
{
	if (k->data) {
		munmap(k->data, k->size);
		k->data = NULL;
	}
}

int seer_ckpt_begin(const seer_options_t *opts, const char *path, uint64_t size, int timeout_ms,
		    seer_ckpt_t **out)
{
	if (!out || !path) {
		err_set("seer_ckpt_begin: NULL %s", out ? "path" : "out");
		return -EINVAL;
	}
	*out = NULL;
	if (path[0] != '/' || strlen(path) >= SEER_CKPT_PATH_MAX) {
		err_set("checkpoint path '%.200s' must be absolute and under %d bytes", path,
			SEER_CKPT_PATH_MAX);
		return -EINVAL;
	}
	struct seer_ckpt *k = calloc(1, sizeof(*k));
	if (!k) {
		err_set("out of memory");
		return -ENOMEM;
	}
	k->sock = -1;
	strcpy(k->path, path);
	k->size = size;
	int rc = where(opts, k->sock_path, k->job, &k->connect_ms, DEFAULT_CONNECT_MS);
	if (rc != 0)
		goto fail;
	uint64_t connect_by = deadline_of(k->connect_ms);
	struct seer_msg_ckpt q, r;
	req_init(&q, k, SEER_MSG_CKPT_BEGIN);
	q.timeout_ms = timeout_ms;
	int mfd = -1;
	for (;;) {
		rc = connect_open_socket(k->sock_path, connect_by);
		if (rc < 0)
			goto fail;
		k->sock = rc;
		/* seerd answers by timeout_ms; a little more for the reply to come */
		rc = rpc(k->sock, &q, &r, &mfd, timeout_ms < 0 ? UINT64_MAX
					       : deadline_of(timeout_ms + k->connect_ms));
		/* a seerd still starting (its catalog scan) closes a checkpoint
		 * connection unanswered: ask again until the connect timeout */
		if ((rc != -ECONNRESET && rc != -EPIPE) || now_ns() >= connect_by)
			break;
		close(k->sock);
		k->sock = -1;
		sleep_ns(50 * 1000000ull);
	}
	if (rc == 0 && r.status != 0) {
		rc = r.status;
		if (mfd >= 0)
			close(mfd);
		goto fail;
	}
	if (rc != 0) {
		if (rc != SEER_EPROTO)
			err_set("seerd at %s did not answer the checkpoint request: %s", k->sock_path,
				strerror(-rc));
		goto fail;
	}
	if (mfd < 0 || r.size != size) {
		if (mfd >= 0)
			close(mfd);
		err_set("seerd's checkpoint reply carries no memory of %llu bytes",
			(unsigned long long)size);
		rc = SEER_EPROTO;
		goto fail;
	}
	k->id = r.id;
	/* populated at once: one call instead of a page fault per 4 KiB while
	 * the caller fills it (half the fill time of a fresh mapping) */
	k->data = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, mfd, 0);
	rc = k->data == MAP_FAILED ? -errno : 0;
	close(mfd);
	if (rc != 0) {
		err_set("cannot map %llu bytes of checkpoint memory: %s", (unsigned long long)size,
			strerror(-rc));
		k->data = NULL;
		goto fail;
	}
	*out = token_new(k);
	if (!*out) {
		err_set("%u checkpoint handles are open: close some (seer_ckpt_close)", CK_MAX);
		munmap(k->data, k->size);
		rc = -EMFILE;
		goto fail;
	}
	return 0;
fail:
	if (k->sock >= 0)
		close(k->sock);
	free(k);
	return rc;
}

void *seer_ckpt_data(seer_ckpt_t *h)
{
	struct seer_ckpt *k = handle(h);
	return k ? k->data : NULL;
}

uint64_t seer_ckpt_size(seer_ckpt_t *h)
{
	struct seer_ckpt *k = handle(h);
	return k ? k->size : 0;
}

uint64_t seer_ckpt_id(seer_ckpt_t *h)
{
	struct seer_ckpt *k = handle(h);
	return k ? k->id : 0;
}

int seer_ckpt_commit(seer_ckpt_t *h)
{
	int bad;
	struct seer_ckpt *k = handle_code(h, &bad);
	return k ? seer_ckpt_commit_len(h, k->size) : bad;
}

int seer_ckpt_commit_len(seer_ckpt_t *h, uint64_t len)
{
	int bad;
	struct seer_ckpt *k = handle_code(h, &bad);
	if (!k)
		return bad;
	if (len == 0 || len > k->size) {
		err_set("checkpoint %s: commit of %llu bytes of %llu", k->path,
			(unsigned long long)len, (unsigned long long)k->size);
		return -EINVAL;
	}
	if (k->committed || k->sock < 0) {
		err_set("checkpoint %s: %s", k->path, k->committed ? "already committed"
								  : "its connection to seerd is gone");
		return k->committed ? -EALREADY : SEER_EDAEMON;
	}
	unmap(k);
	k->size = len;
	struct seer_msg_ckpt q, r;
	req_init(&q, k, SEER_MSG_CKPT_COMMIT);
	int rc = rpc(k->sock, &q, &r, NULL, deadline_of(k->connect_ms));
	if (rc != 0) {
		if (rc != SEER_EPROTO)
			err_set("checkpoint %s: seerd went away before the commit (%s): the checkpoint "
				"is lost, save it again", k->path, strerror(-rc));
		close(k->sock);
		k->sock = -1;
		return rc == SEER_EPROTO ? rc : SEER_EDAEMON;
	}
	if (r.status != 0)
		return r.status;
	k->committed = true;
	return 0;
}

/* A request about a committed checkpoint, asked again on a new connection
 * when seerd went away (it may have restarted), until the deadline. */
static int ask(struct seer_ckpt *k, struct seer_msg_ckpt *q, struct seer_msg_ckpt *r,
	       uint64_t deadline)
{
	for (;;) {
		if (k->sock < 0) {
			int fd = connect_open_socket(k->sock_path, deadline);
			if (fd < 0)
				return fd == -ENOENT || fd == -ECONNREFUSED ? -ETIMEDOUT : fd;
			k->sock = fd;
		}
		/* seerd answers a WAIT by its timeout: give the reply a moment more */
		uint64_t d = deadline == UINT64_MAX ? UINT64_MAX : deadline + 2000000000ull;
		int rc = rpc(k->sock, q, r, NULL, d);
		if (rc == 0)
			return 0;
		if (rc != -ECONNRESET && rc != -EPIPE && rc != -ENOTCONN)
			return rc;
		close(k->sock);
		k->sock = -1;
		if (now_ns() >= deadline)
			return -ETIMEDOUT;
		if (q->timeout_ms >= 0) {
			uint64_t left = deadline - now_ns();
			q->timeout_ms = (int64_t)(left / 1000000);
		}
	}
}

int seer_ckpt_wait(seer_ckpt_t *h, int level, int timeout_ms)
{
	int bad;
	struct seer_ckpt *k = handle_code(h, &bad);
	if (!k)
		return bad;
	if (!k->committed) {
		err_set("checkpoint %s is not committed", k->path);
		return -EINVAL;
	}
	if (level < SEER_CKPT_LOCAL || level > SEER_CKPT_PFS) {
		err_set("seer_ckpt_wait: level %d (SEER_CKPT_LOCAL, _PEER or _PFS)", level);
		return -EINVAL;
	}
	struct seer_msg_ckpt q, r;
	req_init(&q, k, SEER_MSG_CKPT_WAIT);
	q.level = (uint32_t)level;
	q.timeout_ms = timeout_ms;
	int rc = ask(k, &q, &r, deadline_of(timeout_ms));
	if (rc == -ETIMEDOUT) {
		err_set("checkpoint %s: not at level %d within %d ms", k->path, level, timeout_ms);
		return rc;
	}
	if (rc != 0)
		return rc;
	return r.status;
}

int seer_ckpt_state(seer_ckpt_t *h, int level, uint64_t *drained)
{
	int bad;
	struct seer_ckpt *k = handle_code(h, &bad);
	if (!k)
		return bad;
	if (level < SEER_CKPT_MEMORY || level > SEER_CKPT_PFS) {
		err_set("seer_ckpt_state: level %d", level);
		return -EINVAL;
	}
	if (!k->committed)
		return SEER_CKPT_PENDING; /* seerd has nothing of it yet */
	struct seer_msg_ckpt q, r;
	req_init(&q, k, SEER_MSG_CKPT_STATE);
	int rc = ask(k, &q, &r, deadline_of(k->connect_ms));
	if (rc != 0)
		return rc;
	if (r.status != 0)
		return r.status;
	if (drained)
		*drained = r.drained;
	if (r.state[level] == SEER_CKPT_FAILED || r.msg[0])
		err_set("%s", r.msg);
	return (int)r.state[level];
}

void seer_ckpt_close(seer_ckpt_t *h)
{
	struct seer_ckpt *k = handle(h);
	if (!k)
		return;
	unmap(k);
	if (k->sock >= 0)
		close(k->sock); /* before a commit: seerd abandons it */
	pthread_mutex_lock(&ck_lock);
	ck_table[k->idx].gen++;
	ck_table[k->idx].k = NULL;
	pthread_mutex_unlock(&ck_lock);
	free(k);
}

int seer_ckpt_open(const seer_options_t *opts, const char *path, int *fd, uint64_t *size,
		   int *level)
{
	if (!path || !fd || strlen(path) >= SEER_CKPT_PATH_MAX) {
		err_set("seer_ckpt_open: NULL or too long an argument");
		return -EINVAL;
	}
	*fd = -1;
	struct seer_ckpt k = { .sock = -1 };
	int rc = where(opts, k.sock_path, k.job, &k.connect_ms, OPEN_CONNECT_MS);
	if (rc != 0)
		return rc;
	strcpy(k.path, path);
	rc = connect_open_socket(k.sock_path, deadline_of(k.connect_ms));
	if (rc < 0)
		return rc;
	k.sock = rc;
	struct seer_msg_ckpt q, r;
	req_init(&q, &k, SEER_MSG_CKPT_OPEN);
	int got = -1;
	rc = rpc(k.sock, &q, &r, &got, deadline_of(k.connect_ms));
	close(k.sock);
	if (rc != 0)
		return rc;
	if (r.status != 0) {
		if (got >= 0)
			close(got);
		return r.status;
	}
	if (got < 0) {
		err_set("seerd's reply to open %s carries no file", path);
		return SEER_EPROTO;
	}
	*fd = got;
	if (size)
		*size = r.size;
	if (level)
		*level = (int)r.level;
	return 0;
}
