/* seerd's start-up thread (startup.h): the job's socket and the signals
 * while the main thread builds the catalog and sets up the engine.
 *
 * Owns the listening socket until startup_end hands it to the server, its
 * own signalfd (the signals are blocked in every thread since main started,
 * so whichever signalfd is open takes them), and the connections it
 * accepted: each is answered once and closed (a trainer's HELLO, after its
 * checkpoint record if it announced one, with SEER_MSG_PROGRESS; seerctl's
 * status and stop with a control reply; anything else with why). Runs on
 * the start-up thread, except begin/phase/stopping/end/abort (main thread);
 * they share only atomics, and the thread's fds until it is joined.
 * Failure: a bad connection is refused with the reason and closed; a second
 * stop signal removes the socket and exits the process at once (the scan
 * may be stuck in a file system call). */
#define _GNU_SOURCE
#include "startup.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../proto/seer_proto.h"
#include "../src/common/shm.h"
#include "../src/util/util.h"
#include "node_path.h"
#include "seer.h"
#include "server.h"

#define ST_PENDING 64      /* connections awaiting their hello at once */
#define ST_HELLO_S 5.0     /* a connection silent this long is closed */
#define ST_DRAIN_S 1.0     /* startup_end waits this long for accepted hellos */

enum { TAG_LISTEN = 1, TAG_SIGNAL, TAG_QUIT, TAG_CONN = 16 };

struct st_conn {
	int fd;
	double since;
	bool other_user;
	bool have_hello;         /* a HELLO came; its record is arriving */
	uint64_t rec_left;       /* record bytes still to read */
};

struct startup {
	const struct seer_config *cfg;
	uint32_t node, nnodes;
	struct catalog_progress *prog;
	char sock[512];
	int lfd, sfd, epfd, qfd;
	pthread_t thread;
	bool started;
	_Atomic int phase;
	_Atomic bool stop;
	_Atomic bool quit;
	int nsig;                /* stop signals taken (thread) */
	double t0;
	struct st_conn conn[ST_PENDING];
};

/* "scanning: 1200 of 10000 files" and the like. */
static void progress_text(struct startup *st, char *buf, size_t len)
{
	uint64_t listed = atomic_load(&st->prog->listed), total = atomic_load(&st->prog->total),
		 done = atomic_load(&st->prog->scanned),
		 ctotal = atomic_load(&st->prog->check_total);
	switch (atomic_load(&st->phase)) {
	case STARTUP_SCAN:
		if (ctotal && !total)
			snprintf(buf, len, "scanning: checking the cached catalog, %llu of %llu files "
				 "stat'ed", (unsigned long long)atomic_load(&st->prog->checked),
				 (unsigned long long)ctotal);
		else if (total)
			snprintf(buf, len, "scanning: %llu of %llu files", (unsigned long long)done,
				 (unsigned long long)total);
		else
			snprintf(buf, len, "scanning: listing the dataset, %llu files found so far",
				 (unsigned long long)listed);
		break;
	case STARTUP_WAIT:
		snprintf(buf, len, "scanning: node 0 is building the catalog; node %u waits for it",
			 st->node);
		break;
	default:
		snprintf(buf, len, "starting: catalog ready, setting up the cache%s",
			 st->nnodes > 1 ? " and the data plane" : "");
		break;
	}
}

static char *status_json(struct startup *st)
{
	char text[200];
	progress_text(st, text, sizeof(text));
	json_t *o = json_pack("{ss ss ss si si si sf sI sI sI sI}", "state",
			      atomic_load(&st->phase) == STARTUP_SETUP ? "starting" : "scanning",
			      "scanning", text, "job_id", st->cfg->job.id, "node", (int)st->node,
			      "nodes", (int)st->nnodes, "pid", (int)getpid(), "uptime_s",
			      now_s() - st->t0, "files_listed",
			      (json_int_t)atomic_load(&st->prog->listed), "files_total",
			      (json_int_t)atomic_load(&st->prog->total), "files_scanned",
			      (json_int_t)atomic_load(&st->prog->scanned), "files_checked",
			      (json_int_t)atomic_load(&st->prog->checked));
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return s ? s : xstrdup("{\"state\": \"scanning\"}");
}

static void ctl_send(int fd, int status, const char *text)
{
	char buf[sizeof(struct seer_msg_ctl_reply) + 4096];
	size_t n = MIN(strlen(text), sizeof(buf) - sizeof(struct seer_msg_ctl_reply));
	struct seer_msg_ctl_reply r = { .kind = SEER_MSG_CTL_REPLY, .status = status,
					.len = (uint32_t)n };
	memcpy(buf, &r, sizeof(r));
	memcpy(buf + sizeof(r), text, n);
	sock_send(fd, buf, sizeof(r) + n, NULL, 0);
}

static void welcome_send(int fd, uint32_t kind, int status, const char *text)
{
	struct seer_msg_welcome w = { .kind = kind, .status = status };
	str_copy(w.msg, sizeof(w.msg), text);
	sock_send(fd, &w, sizeof(w), NULL, 0);
}

static void request_stop(struct startup *st, const char *why)
{
	if (!atomic_exchange(&st->stop, true))
		log_info("%s during start-up: stopping (the catalog scan ends at the next file; the "
			 "socket is removed)", why);
	atomic_store(&st->prog->stop, true);
}

static void conn_close(struct startup *st, int i)
{
	struct st_conn *c = &st->conn[i];
	if (c->fd >= 0) {
		epoll_ctl(st->epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	c->fd = -1;
}

/* A trainer's HELLO (and its whole record): alive, still starting. */
static void answer_progress(struct startup *st, int i)
{
	char text[200];
	progress_text(st, text, sizeof(text));
	welcome_send(st->conn[i].fd, SEER_MSG_PROGRESS, 0, text);
	conn_close(st, i);
}

static void on_hello(struct startup *st, int i, const struct seer_msg_hello *h, ssize_t n)
{
	struct st_conn *c = &st->conn[i];
	bool ctl = n == (ssize_t)sizeof(*h) && h->magic == SEER_MAGIC_HELLO &&
		   h->kind == SEER_MSG_CTL;
	char msg[512];
	int status = 0;
	if (n <= 0) {
		conn_close(st, i);
		return;
	}
	if (c->other_user) {
		snprintf(msg, sizeof(msg), "permission denied: seerd serves only its own user (uid "
			 "%u)", (unsigned)getuid());
		status = SEER_EREFUSED;
	} else if (n >= 16 && h->magic == SEER_MAGIC_HELLO && h->version != SEER_PROTO_VERSION) {
		snprintf(msg, sizeof(msg), "protocol version %u, this seerd speaks %u: use the libseer "
			 "of the same seer build", h->version, SEER_PROTO_VERSION);
		status = SEER_EPROTO;
	} else if (n != (ssize_t)sizeof(*h) || h->magic != SEER_MAGIC_HELLO ||
		   (h->kind != SEER_MSG_HELLO && h->kind != SEER_MSG_CTL)) {
		snprintf(msg, sizeof(msg), "malformed handshake (%zd bytes): the client is not a "
			 "libseer of this version", n);
		status = SEER_EPROTO;
	}
	if (status != 0) {
		if (ctl)
			ctl_send(c->fd, status, msg);
		else
			welcome_send(c->fd, SEER_MSG_ERROR, status, msg);
		conn_close(st, i);
		return;
	}
	if (ctl) {
		char cmd[sizeof(h->ctl) + 1];
		memcpy(cmd, h->ctl, sizeof(h->ctl));
		cmd[sizeof(h->ctl)] = '\0';
		if (strcmp(cmd, "status") == 0) {
			char *js = status_json(st);
			ctl_send(c->fd, 0, js);
			free(js);
		} else if (strcmp(cmd, "stop") == 0) {
			request_stop(st, "stop requested by seerctl");
			ctl_send(c->fd, 0, "{\"ok\": true, \"state\": \"stopping\"}");
		} else {
			char text[200];
			progress_text(st, text, sizeof(text));
			snprintf(msg, sizeof(msg), "seerd is still starting (%s): it answers status and "
				 "stop until it serves", text);
			ctl_send(c->fd, -EAGAIN, msg);
		}
		conn_close(st, i);
		return;
	}
	if (h->record_len > SEER_RECORD_MAX) {
		snprintf(msg, sizeof(msg), "checkpoint record of %u bytes: seerd takes at most %u",
			 h->record_len, SEER_RECORD_MAX);
		welcome_send(c->fd, SEER_MSG_ERROR, -EMSGSIZE, msg);
		conn_close(st, i);
		return;
	}
	if (h->record_len == 0) {
		answer_progress(st, i);
		return;
	}
	/* read the record first: closing with unread data resets the
	 * connection before the trainer reads the answer */
	c->have_hello = true;
	c->rec_left = h->record_len;
}

static void on_conn(struct startup *st, int i)
{
	struct st_conn *c = &st->conn[i];
	if (c->fd < 0)
		return;
	if (!c->have_hello) {
		struct seer_msg_hello h;
		ssize_t n = sock_recv(c->fd, &h, sizeof(h), NULL, NULL, 0);
		if (n != -EAGAIN)
			on_hello(st, i, &h, n);
		return;
	}
	static _Thread_local uint8_t buf[sizeof(struct seer_msg_record) + SEER_RECORD_CHUNK];
	ssize_t n = sock_recv(c->fd, buf, sizeof(buf), NULL, NULL, 0);
	if (n == -EAGAIN)
		return;
	struct seer_msg_record r;
	if (n < (ssize_t)sizeof(r)) {
		conn_close(st, i);
		return;
	}
	memcpy(&r, buf, sizeof(r));
	if (r.kind != SEER_MSG_RECORD || r.len != (size_t)n - sizeof(r) || r.len > c->rec_left) {
		welcome_send(c->fd, SEER_MSG_ERROR, SEER_EPROTO,
			     "malformed checkpoint record packet after the hello");
		conn_close(st, i);
		return;
	}
	c->rec_left -= r.len;
	if (c->rec_left == 0)
		answer_progress(st, i);
}

static void accept_all(struct startup *st)
{
	for (;;) {
		int fd = accept4(st->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return; /* EAGAIN; out of fds: the rest wait in the backlog */
		int i = 0, oldest = 0;
		for (; i < ST_PENDING && st->conn[i].fd >= 0; i++)
			if (st->conn[i].since < st->conn[oldest].since)
				oldest = i;
		if (i == ST_PENDING) {
			conn_close(st, oldest); /* a flood: the oldest silent one goes */
			i = oldest;
		}
		struct ucred cred = { .pid = 0, .uid = (uid_t)-1 };
		socklen_t cl = sizeof(cred);
		bool other = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 ||
			     cred.uid != getuid();
		st->conn[i] = (struct st_conn){ .fd = fd, .since = now_s(), .other_user = other };
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = TAG_CONN + (uint64_t)i };
		epoll_ctl(st->epfd, EPOLL_CTL_ADD, fd, &ev);
	}
}

static void on_signals(struct startup *st)
{
	struct signalfd_siginfo si;
	while (read(st->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		int sig = (int)si.ssi_signo;
		char text[200];
		progress_text(st, text, sizeof(text));
		if (sig == SIGTERM || sig == SIGINT || sig == SIGQUIT) {
			if (st->nsig++ > 0) {
				log_warn("second %s during start-up (%s): exiting now", strsignal(sig),
					 text);
				unlink(st->sock);
				_exit(1);
			}
			char why[256];
			snprintf(why, sizeof(why), "%s (%s)", strsignal(sig), text);
			request_stop(st, why);
		} else if (sig == SIGHUP) {
			log_info("SIGHUP from pid %u ignored: seerd is not a terminal program and reloads "
				 "nothing (SIGTERM stops it)", si.ssi_pid);
		} else {
			log_info("received %s from pid %u (Slurm's --signal warning?) during start-up "
				 "(%s): no statistics or positions to save yet", strsignal(sig),
				 si.ssi_pid, text);
		}
	}
}

static void expire(struct startup *st, double limit)
{
	double t = now_s();
	for (int i = 0; i < ST_PENDING; i++)
		if (st->conn[i].fd >= 0 && t - st->conn[i].since > limit)
			conn_close(st, i);
}

static bool any_pending(const struct startup *st)
{
	for (int i = 0; i < ST_PENDING; i++)
		if (st->conn[i].fd >= 0)
			return true;
	return false;
}

static void *startup_thread(void *arg)
{
	struct startup *st = arg;
	double drain_until = 0;
	for (;;) {
		if (drain_until > 0 && (!any_pending(st) || now_s() >= drain_until))
			break;
		struct epoll_event evs[32];
		int k = epoll_wait(st->epfd, evs, 32, drain_until > 0 ? 20 : 1000);
		for (int j = 0; j < k; j++) {
			uint64_t tag = evs[j].data.u64;
			if (tag == TAG_LISTEN) {
				accept_all(st);
			} else if (tag == TAG_SIGNAL) {
				on_signals(st);
			} else if (tag == TAG_QUIT) {
				/* stop accepting (the backlog is the server's); answer
				 * the accepted ones that send their hello soon */
				epoll_ctl(st->epfd, EPOLL_CTL_DEL, st->lfd, NULL);
				epoll_ctl(st->epfd, EPOLL_CTL_DEL, st->qfd, NULL);
				drain_until = now_s() + ST_DRAIN_S;
			} else if (tag >= TAG_CONN && tag < TAG_CONN + ST_PENDING) {
				on_conn(st, (int)(tag - TAG_CONN));
			}
		}
		expire(st, ST_HELLO_S);
	}
	for (int i = 0; i < ST_PENDING; i++)
		conn_close(st, i);
	return NULL;
}

static void fds_close(struct startup *st)
{
	if (st->sfd >= 0)
		close(st->sfd);
	if (st->epfd >= 0)
		close(st->epfd);
	if (st->qfd >= 0)
		close(st->qfd);
}

int startup_begin(struct startup **out, const struct seer_config *cfg, uint32_t node,
		  uint32_t nnodes, struct catalog_progress *prog, char *err, size_t errlen)
{
	*out = NULL;
	struct startup *st = xcalloc(1, sizeof(*st));
	*st = (struct startup){ .cfg = cfg, .node = node, .nnodes = nnodes, .prog = prog,
				.lfd = -1, .sfd = -1, .epfd = -1, .qfd = -1, .t0 = now_s() };
	atomic_store(&st->phase, node == 0 ? STARTUP_SCAN : STARTUP_WAIT);
	for (int i = 0; i < ST_PENDING; i++)
		st->conn[i].fd = -1;
	if (node_path(st->sock, sizeof(st->sock), cfg->daemon.socket, node) != 0) {
		char show[CAT_PATH_SHOW];
		snprintf(err, errlen, "[daemon] socket %s is longer than %zu bytes with the node "
			 "rank: set a shorter path", catalog_path_abbrev(show, sizeof(show), cfg->daemon.socket),
			 sizeof(st->sock) - 1);
		free(st);
		return -ENAMETOOLONG;
	}
	int rc = server_listen(st->sock, &st->lfd, err, errlen);
	if (rc != 0) {
		free(st);
		return rc;
	}
	sigset_t mask;
	server_signals(&mask);
	st->sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	st->epfd = epoll_create1(EPOLL_CLOEXEC);
	st->qfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (st->sfd < 0 || st->epfd < 0 || st->qfd < 0) {
		snprintf(err, errlen, "cannot set up the start-up thread: %s", strerror(errno));
		rc = -errno;
		goto fail;
	}
	struct epoll_event ev = { .events = EPOLLIN };
	ev.data.u64 = TAG_LISTEN;
	epoll_ctl(st->epfd, EPOLL_CTL_ADD, st->lfd, &ev);
	ev.data.u64 = TAG_SIGNAL;
	epoll_ctl(st->epfd, EPOLL_CTL_ADD, st->sfd, &ev);
	ev.data.u64 = TAG_QUIT;
	epoll_ctl(st->epfd, EPOLL_CTL_ADD, st->qfd, &ev);
	rc = -pthread_create(&st->thread, NULL, startup_thread, st);
	if (rc != 0) {
		snprintf(err, errlen, "cannot start the start-up thread: %s", strerror(-rc));
		goto fail;
	}
	st->started = true;
	log_info("listening on %s during start-up (trainers wait; seerctl status shows the "
		 "progress)", st->sock);
	*out = st;
	return 0;
fail:
	fds_close(st);
	close(st->lfd);
	unlink(st->sock);
	free(st);
	return rc;
}

void startup_phase(struct startup *st, enum startup_phase phase)
{
	if (st)
		atomic_store(&st->phase, (int)phase);
}

bool startup_stopping(struct startup *st)
{
	return st && atomic_load(&st->stop);
}

/* End the thread (after it answered what it accepted). */
static void join(struct startup *st)
{
	if (!st->started)
		return;
	uint64_t one = 1;
	ssize_t w UNUSED = write(st->qfd, &one, sizeof(one));
	pthread_join(st->thread, NULL);
	st->started = false;
}

int startup_end(struct startup *st, bool *stop)
{
	join(st);
	int lfd = st->lfd;
	fds_close(st);
	*stop = atomic_load(&st->stop);
	free(st);
	return lfd;
}

void startup_abort(struct startup *st)
{
	if (!st)
		return;
	join(st);
	fds_close(st);
	close(st->lfd);
	unlink(st->sock);
	free(st);
}
