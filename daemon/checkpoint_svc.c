/* The checkpoint stage's service thread: the trainers' checkpoint
 * connections (docs/checkpoint.md) and their requests BEGIN (memory handed
 * out as a sealed memfd, within [checkpoint] memory), COMMIT, WAIT (until a
 * level is reached, failed or the timeout), STATE and OPEN (the newest copy
 * seerd holds of a path: its own, or one held for a peer node).
 *
 * Owns: struct ck_svc (ck->svc, checkpoint_int.h): the connections (struct
 * ck_conn), the queue the dispatcher hands them over in and the eventfd that
 * wakes the thread (made and closed by checkpoint.c).
 *
 * Threads: the service thread (ckpt_svc_main) alone reads and answers the
 * connections; the dispatcher queues new ones (ckpt_attach, under ck->mu);
 * any thread of the stage wakes it (ckpt_svc_wake) after it changed an item,
 * so that waiting WAITs and BEGINs are answered. Items under ck->mu
 * (checkpoint_int.h).
 *
 * Failure: a request of another protocol version or a malformed one is
 * answered SEER_EPROTO and its connection closed; a bad path, job id or
 * size is refused at BEGIN naming it; a BEGIN that does not fit the memory
 * waits up to its timeout, then is refused naming the key to raise; a
 * connection that goes away abandons the checkpoint it began and did not
 * commit. A reply to a client that reads nothing is lost, never waited for.
 * Out of memory aborts (the daemon's rule). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../proto/seer_proto.h"
#include "../src/common/shm.h"
#include "../src/util/util.h"
#include "checkpoint_int.h"
#include "seer.h"

/* messages (why, paths in them) are cut to their fixed buffers on purpose */
#pragma GCC diagnostic ignored "-Wformat-truncation"

struct ck_conn {
	int fd;
	pid_t pid;
	uint64_t begun;            /* an item begun and not committed (0: none) */
	bool begin_wait;           /* a BEGIN waits for memory */
	struct seer_msg_ckpt req;  /* the waiting BEGIN or WAIT */
	double deadline;           /* of the wait (0: none, < 0 for ever) */
	bool wait;                 /* a WAIT is pending */
};

static const char *const level_names[SEER_CKL_COUNT_] = CK_LEVEL_NAMES;

void ckpt_svc_wake(struct ckpt *ck)
{
	uint64_t one = 1;
	ssize_t r UNUSED = write(ck->svc.efd, &one, sizeof(one));
}

void ckpt_svc_changed(struct ckpt *ck)
{
	ckpt_store_prune(ck, 0);
	pthread_cond_broadcast(&ck->cv);
	pthread_cond_broadcast(&ck->idle);
	ckpt_svc_wake(ck);
}

static struct ck_item *item_find(struct ckpt *ck, uint64_t id)
{
	for (struct ck_item *it = ck->items; it; it = it->next)
		if (it->id == id)
			return it;
	return NULL;
}

static void reply(int fd, const struct seer_msg_ckpt *req, int status, const char *msg,
		  const struct ck_item *it, int pass_fd)
{
	struct seer_msg_ckpt r;
	memset(&r, 0, sizeof(r));
	r.magic = SEER_MAGIC_CKPT;
	r.kind = SEER_MSG_CKPT_REPLY;
	r.version = SEER_CKPT_VERSION;
	r.status = status;
	r.level = req ? req->level : 0;
	if (it) {
		r.id = it->id;
		r.size = it->size;
		r.drained = it->st[SEER_CKL_PFS] == SEER_CKS_DONE ? it->size
			    : it->busy && it->st[SEER_CKL_LOCAL] != SEER_CKS_PENDING ? it->drained : 0;
		memcpy(r.state, it->st, sizeof(r.state));
		str_copy(r.path, sizeof(r.path), it->path);
	}
	if (msg)
		str_copy(r.msg, sizeof(r.msg), msg);
	/* the reply is small next to the socket buffer: a full one is a client
	 * that reads nothing, which loses its reply */
	sock_send(fd, &r, sizeof(r), pass_fd >= 0 ? &pass_fd : NULL, pass_fd >= 0 ? 1 : 0);
}

static void conn_drop(struct ckpt *ck, size_t i)
{
	struct ck_conn *c = &ck->svc.conns[i];
	if (c->begun) {
		struct ck_item *it = item_find(ck, c->begun);
		if (it && !it->committed) {
			log_info("checkpoint %s abandoned before its commit (pid %d went away)",
				 it->path, (int)c->pid);
			ckpt_store_drop(ck, it);
		}
	}
	close(c->fd);
	ck->svc.conns[i] = ck->svc.conns[--ck->svc.nconns];
}

static double deadline_of(int64_t ms)
{
	return ms < 0 ? -1.0 : now_s() + (double)ms / 1000.0;
}

/* A BEGIN that fits the memory budget now: the memfd, the item, the reply. */
static void begin_now(struct ckpt *ck, struct ck_conn *c)
{
	const struct seer_msg_ckpt *m = &c->req;
	c->begin_wait = false;
	char name[64];
	snprintf(name, sizeof(name), "seer-ckpt-%d", (int)c->pid);
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int rc = fd < 0 ? -errno : 0;
	if (rc == 0 && ftruncate(fd, (off_t)m->size) != 0)
		rc = -errno;
	/* the trainer maps it writable; it must never shrink under seerd */
	if (rc == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		rc = -errno;
	void *mem = MAP_FAILED;
	if (rc == 0) {
		mem = mmap(NULL, m->size, PROT_READ, MAP_SHARED, fd, 0);
		if (mem == MAP_FAILED)
			rc = -errno;
	}
	if (rc != 0) {
		char msg[SEER_ERRMSG_MAX];
		snprintf(msg, sizeof(msg), "seerd cannot make %" PRIu64 " bytes of shared memory: %s",
			 m->size, strerror(-rc));
		if (fd >= 0)
			close(fd);
		reply(c->fd, m, rc, msg, NULL, -1);
		return;
	}
	struct ck_item *it = calloc(1, sizeof(*it));
	if (!it)
		abort();
	uint64_t id = (uint64_t)time(NULL) << 20;
	it->id = id > ck->last_id ? id : ck->last_id + 1;
	ck->last_id = it->id;
	it->path = xstrdup(m->path);
	it->size = m->size;
	it->alloc = m->size;
	it->memfd = fd;
	it->mem = mem;
	it->rec_peer = -1;
	it->t_begin = now_s();
	it->st[SEER_CKL_MEM] = SEER_CKS_PENDING;
	it->st[SEER_CKL_LOCAL] = SEER_CKS_PENDING;
	it->st[SEER_CKL_PEER] = SEER_CKS_OFF;
	it->st[SEER_CKL_PFS] = SEER_CKS_PENDING;
	ck->mem_used += m->size;
	struct ck_item **pp = &ck->items;
	while (*pp)
		pp = &(*pp)->next;
	*pp = it;
	c->begun = it->id;
	reply(c->fd, m, 0, NULL, it, fd);
}

/* Whether the directory of `path` exists and seerd may write in it (else
 * msg says why): refused at BEGIN rather than failing every drain. */
static bool dir_writable(const char *path, char *msg, size_t len)
{
	char d[SEER_CKPT_PATH_MAX];
	str_copy(d, sizeof(d), path);
	char *slash = strrchr(d, '/');
	if (slash == d)
		slash[1] = '\0';
	else
		*slash = '\0';
	struct stat sb;
	if (stat(d, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		snprintf(msg, len, "the directory %s of the checkpoint does not exist: create it first",
			 d);
		return false;
	}
	if (access(d, W_OK | X_OK) != 0) {
		snprintf(msg, len, "seerd (your user) cannot write in %s: %s", d, strerror(errno));
		return false;
	}
	return true;
}

static void on_begin(struct ckpt *ck, struct ck_conn *c, const struct seer_msg_ckpt *m)
{
	char msg[SEER_ERRMSG_MAX], a[32], b[32];
	int st = 0;
	if (c->begun) {
		st = -EBUSY;
		snprintf(msg, sizeof(msg), "a checkpoint begun on this connection is not committed");
	} else if (strncmp(m->job_id, ck->cfg->job.id, SEER_JOBID_MAX) != 0) {
		st = SEER_ECONFIG;
		snprintf(msg, sizeof(msg), "job id '%.64s', this seerd serves '%.64s'", m->job_id,
			 ck->cfg->job.id);
	} else if (m->path[0] != '/' || strchr(m->path, '\n') ||
		   strnlen(m->path, sizeof(m->path)) == sizeof(m->path) ||
		   m->path[strlen(m->path) - 1] == '/') {
		st = -EINVAL;
		snprintf(msg, sizeof(msg), "checkpoint path '%.200s' must be an absolute file path "
			 "without newlines", m->path);
	} else if (!dir_writable(m->path, msg, sizeof(msg))) {
		st = -ENOENT;
	} else if (m->size == 0) {
		st = -EINVAL;
		snprintf(msg, sizeof(msg), "a checkpoint of 0 bytes");
	} else if (m->size > ck->cfg->checkpoint.memory) {
		st = -ENOMEM;
		snprintf(msg, sizeof(msg), "a checkpoint of %s is larger than [checkpoint] memory "
			 "(%s): raise it (seerd --set checkpoint.memory=...)",
			 fmt_size(a, sizeof(a), m->size), fmt_size(b, sizeof(b), ck->cfg->checkpoint.memory));
	} else if (ck->stopping) {
		st = SEER_ESHUTDOWN;
		snprintf(msg, sizeof(msg), "seerd is stopping: it takes no new checkpoint");
	}
	if (st != 0) {
		reply(c->fd, m, st, msg, NULL, -1);
		return;
	}
	c->req = *m;
	c->req.path[sizeof(c->req.path) - 1] = '\0';
	c->begin_wait = true;
	c->deadline = deadline_of(m->timeout_ms);
}

static int wait_state(const struct ck_item *it, uint32_t level, char *msg, size_t len)
{
	uint32_t s = it->st[level];
	if (s == SEER_CKS_DONE || s == SEER_CKS_PRUNED)
		return 0;
	if (level == SEER_CKL_PEER && s == SEER_CKS_OFF) {
		snprintf(msg, len, "no peer copy of %s: [checkpoint] peers is 0, or the job has one "
			 "node (docs/checkpoint.md)", it->path);
		return -ENOTSUP;
	}
	if (level == SEER_CKL_PEER && s == SEER_CKS_FAILED) {
		snprintf(msg, len, "%s", it->peer_why);
		return -EIO;
	}
	if (level == SEER_CKL_PEER)
		return 1;
	if (s == SEER_CKS_OFF) {
		snprintf(msg, len, "no NVMe copy of %s: %s", it->path,
			 it->why[0] ? it->why : "seerd has no [cache] nvme_dir, or no room in "
			 "[checkpoint] nvme; it goes straight to the PFS");
		return -ENOTSUP;
	}
	if (s == SEER_CKS_FAILED) {
		snprintf(msg, len, "%s", it->why);
		return -EIO;
	}
	return 1; /* pending */
}

static void on_request(struct ckpt *ck, size_t ci, const struct seer_msg_ckpt *m)
{
	struct ck_conn *c = &ck->svc.conns[ci];
	char msg[SEER_ERRMSG_MAX];
	if (m->kind == SEER_MSG_CKPT_BEGIN) {
		on_begin(ck, c, m);
		return;
	}
	if (m->kind == SEER_MSG_CKPT_OPEN) {
		struct ck_item *best = NULL;
		for (struct ck_item *it = ck->items; it; it = it->next)
			if (it->committed && strncmp(it->path, m->path, sizeof(m->path)) == 0 &&
			    (it->on_nvme || it->mem) && !(best && best->id > it->id))
				best = it;
		struct stat sb;
		/* a PFS file written after our copy was drained (by someone else) is newer */
		if (best && best->st[SEER_CKL_PFS] == SEER_CKS_DONE && stat(best->path, &sb) == 0 &&
		    sb.st_mtime > best->wall_pfs + 1)
			best = NULL;
		int fd = -1;
		uint32_t where = SEER_CKL_PFS;
		struct ck_item hit = { 0 };
		if (!best)
			fd = ckpt_held_open(ck, m->path, &hit);
		if (fd >= 0) {
			where = SEER_CKL_PEER;
			best = &hit;
		} else if (best) {
			char f[4200];
			if (best->on_nvme) {
				ckpt_store_file(ck, best->id, "data", f, sizeof(f));
				where = SEER_CKL_LOCAL;
			} else {
				snprintf(f, sizeof(f), "/proc/self/fd/%d", best->memfd);
				where = SEER_CKL_MEM;
			}
			fd = open(f, O_RDONLY | O_CLOEXEC);
		}
		struct seer_msg_ckpt q = *m;
		q.level = where;
		if (fd < 0)
			best = NULL;
		if (fd < 0) {
			reply(c->fd, &q, -ENOENT, "seerd holds no copy: read the PFS", NULL, -1);
			return;
		}
		reply(c->fd, &q, 0, NULL, best, fd);
		close(fd);
		return;
	}
	struct ck_item *it = item_find(ck, m->id);
	if (it && strncmp(it->path, m->path, sizeof(m->path)) != 0)
		it = NULL;
	if (!it) {
		snprintf(msg, sizeof(msg), "seerd knows no checkpoint %016" PRIx64 " of %.200s (seerd "
			 "restarted and it was not on NVMe yet, or retention forgot it)", m->id,
			 m->path);
		reply(c->fd, m, -ENOENT, msg, NULL, -1);
		return;
	}
	if (m->kind == SEER_MSG_CKPT_COMMIT) {
		if (it->committed || c->begun != it->id) {
			reply(c->fd, m, -EINVAL, "commit of a checkpoint not begun on this connection",
			      it, -1);
			return;
		}
		if (m->size == 0 || m->size > it->alloc) {
			reply(c->fd, m, -EINVAL, "commit of more bytes than were begun", it, -1);
			return;
		}
		it->size = m->size; /* the bytes used of those handed out */
		it->committed = true;
		it->t_commit = now_s();
		it->st[SEER_CKL_MEM] = SEER_CKS_DONE;
		if (!*ck->dir)
			it->st[SEER_CKL_LOCAL] = SEER_CKS_OFF;
		it->st[SEER_CKL_PEER] = *ck->peer.addr ? SEER_CKS_PENDING : SEER_CKS_OFF;
		c->begun = 0;
		pthread_cond_broadcast(&ck->cv);
		reply(c->fd, m, 0, NULL, it, -1);
		return;
	}
	if (m->kind == SEER_MSG_CKPT_STATE) {
		reply(c->fd, m, 0, it->why[0] ? it->why : NULL, it, -1);
		return;
	}
	if (m->kind == SEER_MSG_CKPT_WAIT && m->level > SEER_CKL_MEM && m->level < SEER_CKL_COUNT_) {
		int st = wait_state(it, m->level, msg, sizeof(msg));
		if (st <= 0) {
			reply(c->fd, m, st, st ? msg : NULL, it, -1);
			return;
		}
		c->wait = true;
		c->req = *m;
		c->deadline = deadline_of(m->timeout_ms);
		return;
	}
	snprintf(msg, sizeof(msg), "unknown checkpoint request kind %u (level %u)", m->kind, m->level);
	reply(c->fd, m, SEER_EPROTO, msg, NULL, -1);
}

/* Waiting BEGINs and WAITs that can be answered now (or timed out). */
static void answer_waiters(struct ckpt *ck)
{
	double t = now_s();
	char msg[SEER_ERRMSG_MAX], a[32], b[32], c3[32];
	for (size_t i = 0; i < ck->svc.nconns; i++) {
		struct ck_conn *c = &ck->svc.conns[i];
		bool late = c->deadline >= 0 && t >= c->deadline;
		if (c->begin_wait) {
			if (ck->stopping) {
				c->begin_wait = false;
				reply(c->fd, &c->req, SEER_ESHUTDOWN, "seerd is stopping: it takes no "
				      "new checkpoint", NULL, -1);
			} else if (ck->mem_used + c->req.size <= ck->cfg->checkpoint.memory) {
				begin_now(ck, c);
			} else if (late) {
				c->begin_wait = false;
				snprintf(msg, sizeof(msg), "checkpoint memory full: %s of checkpoints in "
					 "flight, this one needs %s of [checkpoint] memory %s; raise it "
					 "(seerd --set checkpoint.memory=...) or wait longer",
					 fmt_size(a, sizeof(a), ck->mem_used),
					 fmt_size(b, sizeof(b), c->req.size),
					 fmt_size(c3, sizeof(c3), ck->cfg->checkpoint.memory));
				reply(c->fd, &c->req, -ENOMEM, msg, NULL, -1);
			}
		}
		if (c->wait) {
			struct ck_item *it = item_find(ck, c->req.id);
			int st = it ? wait_state(it, c->req.level, msg, sizeof(msg)) : -ENOENT;
			if (!it)
				snprintf(msg, sizeof(msg), "the checkpoint was forgotten");
			if (st <= 0) {
				c->wait = false;
				reply(c->fd, &c->req, st, st ? msg : NULL, it, -1);
			} else if (late) {
				c->wait = false;
				snprintf(msg, sizeof(msg), "not %s within the timeout", level_names[c->req.level]);
				reply(c->fd, &c->req, -ETIMEDOUT, msg, it, -1);
			}
		}
	}
}

void *ckpt_svc_main(void *arg)
{
	struct ckpt *ck = arg;
	struct pollfd *pf = NULL;
	size_t cap = 0;
	pthread_mutex_lock(&ck->mu);
	while (!ck->stop) {
		/* take the connections the dispatcher handed over */
		for (size_t k = 0; k < ck->svc.nin; k++) {
			if (ck->svc.nconns == ck->svc.cap_conns) {
				ck->svc.cap_conns = ck->svc.cap_conns ? 2 * ck->svc.cap_conns : 16;
				ck->svc.conns = realloc(ck->svc.conns, ck->svc.cap_conns * sizeof(*ck->svc.conns));
				if (!ck->svc.conns)
					abort();
			}
			struct ck_in *in = &ck->svc.in[k];
			ck->svc.conns[ck->svc.nconns++] = (struct ck_conn){ .fd = in->fd, .pid = in->pid };
			if (in->n != sizeof(in->m) || in->m.version != SEER_CKPT_VERSION) {
				reply(in->fd, NULL, SEER_EPROTO, "checkpoint protocol version mismatch: "
				      "use the libseer of this seer build", NULL, -1);
				conn_drop(ck, ck->svc.nconns - 1);
				continue;
			}
			on_request(ck, ck->svc.nconns - 1, &in->m);
		}
		ck->svc.nin = 0;
		answer_waiters(ck);
		if (cap < ck->svc.nconns + 1) {
			cap = ck->svc.nconns + 16;
			pf = realloc(pf, cap * sizeof(*pf));
			if (!pf)
				abort();
		}
		pf[0] = (struct pollfd){ .fd = ck->svc.efd, .events = POLLIN };
		double t = now_s(), next = t + 1.0;
		for (size_t i = 0; i < ck->svc.nconns; i++) {
			pf[i + 1] = (struct pollfd){ .fd = ck->svc.conns[i].fd, .events = POLLIN };
			if ((ck->svc.conns[i].begin_wait || ck->svc.conns[i].wait) && ck->svc.conns[i].deadline >= 0)
				next = MIN(next, ck->svc.conns[i].deadline);
		}
		size_t n = ck->svc.nconns;
		pthread_mutex_unlock(&ck->mu);
		int ms = (int)MAX(0.0, (next - t) * 1000.0 + 1);
		int k = poll(pf, n + 1, ms);
		if (pf[0].revents & POLLIN) {
			uint64_t v;
			ssize_t r UNUSED = read(ck->svc.efd, &v, sizeof(v));
		}
		pthread_mutex_lock(&ck->mu);
		if (k <= 0)
			continue;
		/* from the end: conn_drop moves the last connection into i */
		for (size_t i = n; i-- > 0;) {
			if (!pf[i + 1].revents)
				continue;
			struct seer_msg_ckpt m;
			ssize_t r = sock_recv(ck->svc.conns[i].fd, &m, sizeof(m), NULL, NULL, 0);
			if (r == -EAGAIN || r == -EINTR)
				continue;
			if (r != (ssize_t)sizeof(m) || m.magic != SEER_MAGIC_CKPT ||
			    m.version != SEER_CKPT_VERSION) {
				if (r > 0)
					reply(ck->svc.conns[i].fd, NULL, SEER_EPROTO, "malformed checkpoint "
					      "request", NULL, -1);
				conn_drop(ck, i);
				continue;
			}
			m.path[sizeof(m.path) - 1] = '\0';
			on_request(ck, i, &m);
		}
	}
	while (ck->svc.nconns)
		conn_drop(ck, ck->svc.nconns - 1);
	pthread_mutex_unlock(&ck->mu);
	free(pf);
	return NULL;
}

void ckpt_attach(struct ckpt *ck, int fd, const void *msg, size_t n, pid_t pid)
{
	pthread_mutex_lock(&ck->mu);
	if (ck->svc.nin == ck->svc.cap_in) {
		ck->svc.cap_in = ck->svc.cap_in ? 2 * ck->svc.cap_in : 16;
		ck->svc.in = realloc(ck->svc.in, ck->svc.cap_in * sizeof(*ck->svc.in));
		if (!ck->svc.in)
			abort();
	}
	struct ck_in *in = &ck->svc.in[ck->svc.nin++];
	in->fd = fd;
	in->pid = pid;
	in->n = MIN(n, sizeof(in->m));
	memset(&in->m, 0, sizeof(in->m));
	memcpy(&in->m, msg, in->n);
	in->m.path[sizeof(in->m.path) - 1] = '\0';
	pthread_mutex_unlock(&ck->mu);
	ckpt_svc_wake(ck);
}

void ckpt_svc_destroy(struct ckpt *ck)
{
	for (size_t k = 0; k < ck->svc.nin; k++)
		close(ck->svc.in[k].fd);
	free(ck->svc.in);
	while (ck->svc.nconns)
		conn_drop(ck, ck->svc.nconns - 1);
	free(ck->svc.conns);
}
