/* Connections before their handshake (daemon/server.c's loop calls these).
 *
 * Owns accepting (the peer's uid checked, the open-file limit met by pausing
 * accept and refusing one connection on a spare descriptor), the pending
 * slots, a trainer's HELLO and checkpoint record until the engine takes the
 * connection, seerctl's requests and their replies (sent as the socket
 * drains), and the expiry of silent connections (one warning per 10 s).
 * Runs on the dispatcher thread only. Failure: a bad connection is answered
 * with the reason (a control reply seerctl prints, or an ERROR welcome) and
 * closed; nothing here stops the daemon. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../src/common/shm.h"
#include "../src/util/util.h"
#include "seer.h"
#include "server_int.h"

/* The spare descriptor back, once the connection it made room for is gone
 * (fails quietly while the process is still out of descriptors). */
void conn_spare_restore(struct server *s)
{
	if (s->spare_fd < 0)
		s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void conn_pend_close(struct server *s, int i)
{
	struct pending *p = &s->pend[i];
	if (p->fd >= 0) {
		epoll_ctl(s->epfd, EPOLL_CTL_DEL, p->fd, NULL);
		close(p->fd);
		if (p->refuse_fds)
			conn_spare_restore(s);
	}
	free(p->out);
	p->out = NULL;
	free(p->rec);
	p->rec = NULL;
	p->have_hello = false;
	p->fd = -1;
	p->refuse_fds = false;
}

/* Out of descriptors (or kernel memory): the backlog keeps the listener
 * readable, so accept would fail in a loop. Stop watching it until the next
 * 1 s tick; one connection is taken on the spare descriptor and told why
 * (conn_accept_all); one line per 10 s says how often it happened. */
static void accept_pause(struct server *s, int err)
{
	if (!s->accept_paused)
		epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->lfd, NULL);
	s->accept_paused = true;
	s->accept_errno = err;
	s->accept_fails++;
}

/* The 1 s tick: listen again, and report the pauses. */
void conn_accept_resume(struct server *s, double t)
{
	if (s->accept_fails && t - s->t_accept_log >= 10.0) {
		struct rlimit rl = { 0, 0 };
		getrlimit(RLIMIT_NOFILE, &rl);
		log_warn("cannot accept connections: %s (open-file limit %llu); stopped accepting "
			 "for a second %llu time(s) since the last report: raise the limit (ulimit "
			 "-n) or lower [prefetch] io_threads", strerror(s->accept_errno),
			 (unsigned long long)rl.rlim_cur, (unsigned long long)s->accept_fails);
		s->accept_fails = 0;
		s->t_accept_log = t;
	}
	if (s->accept_paused) {
		s->accept_paused = false;
		epoll_watch(s->epfd, s->lfd, EP_TAG(EP_LISTEN, 0));
	}
	conn_spare_restore(s);
}

/* A free pending slot, making one from the oldest silent connection if
 * needed (a flood: the oldest goes, so a real trainer arriving now still
 * gets in). */
static int pend_slot(struct server *s)
{
	int oldest = 0;
	for (int i = 0; i < MAX_PENDING; i++) {
		if (s->pend[i].fd < 0)
			return i;
		if (s->pend[i].since < s->pend[oldest].since)
			oldest = i;
	}
	struct seer_msg_welcome w = { .kind = SEER_MSG_ERROR, .status = SEER_EREFUSED };
	snprintf(w.msg, sizeof(w.msg), "too many connections awaiting their handshake");
	sock_send(s->pend[oldest].fd, &w, sizeof(w), NULL, 0);
	conn_pend_close(s, oldest);
	s->shed++;
	return oldest;
}

void conn_accept_all(struct server *s)
{
	for (;;) {
		bool spare = false;
		int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			       errno == ENOMEM)) {
			int err = errno;
			if (s->spare_fd >= 0 && (err == EMFILE || err == ENFILE)) {
				close(s->spare_fd);
				s->spare_fd = -1;
				fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
				spare = fd >= 0;
				if (fd < 0)
					conn_spare_restore(s);
			}
			accept_pause(s, err);
			if (fd < 0)
				return;
		}
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				log_warn("accept: %s", strerror(errno));
			return;
		}
		struct ucred cred = { .pid = 0, .uid = (uid_t)-1 };
		socklen_t cl = sizeof(cred);
		long refuse = -1;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != getuid()) {
			/* answered once its hello is read: replying now and closing
			 * would reset the connection before the client reads why */
			refuse = (long)cred.uid;
			log_warn("refused a connection from uid %ld (pid %d): not the job's user",
				 refuse, (int)cred.pid);
		}
		int slot = pend_slot(s);
		s->pend[slot] = (struct pending){ .fd = fd, .pid = cred.pid, .since = now_s(),
						  .refuse_uid = refuse, .refuse_fds = spare };
		epoll_watch(s->epfd, fd, EP_TAG(EP_CONN, slot));
		if (spare)
			return; /* paused until the tick */
	}
}

/* Send what the socket takes of slot i's reply, one SEQPACKET packet of at
 * most SEER_CTL_CHUNK bytes of text each; close the connection when all is
 * sent or the reader went away, else wait for EPOLLOUT. */
static void ctl_flush(struct server *s, int i)
{
	struct pending *p = &s->pend[i];
	char buf[sizeof(struct seer_msg_ctl_reply) + SEER_CTL_CHUNK];
	do {
		size_t n = MIN(p->out_len - p->out_off, (size_t)SEER_CTL_CHUNK);
		struct seer_msg_ctl_reply h = { .kind = SEER_MSG_CTL_REPLY, .status = p->out_status,
						.more = p->out_off + n < p->out_len,
						.len = (uint32_t)n };
		memcpy(buf, &h, sizeof(h));
		memcpy(buf + sizeof(h), p->out + p->out_off, n);
		ssize_t r = sock_send(p->fd, buf, sizeof(h) + n, NULL, 0);
		if (r == -EAGAIN) {
			struct epoll_event ev = { .events = EPOLLOUT, .data.u64 = EP_TAG(EP_CONN, i) };
			epoll_ctl(s->epfd, EPOLL_CTL_MOD, p->fd, &ev);
			return;
		}
		if (r < 0)
			break; /* seerctl is gone */
		p->out_off += n;
	} while (p->out_off < p->out_len);
	conn_pend_close(s, i);
}

/* Answer the seerctl on slot i with `text` (taken over, malloc'd). */
static void ctl_reply(struct server *s, int i, int status, char *text)
{
	struct pending *p = &s->pend[i];
	p->out = text;
	p->out_len = strlen(text);
	p->out_off = 0;
	p->out_status = status;
	p->since = now_s();
	ctl_flush(s, i);
}

/* Stop now (SIGTERM, seerctl stop, another node's stop), trainers told;
 * the loop gives them [daemon] stop_grace_s. `all`: ask the other nodes too. */
void conn_stop_job(struct server *s, bool all)
{
	engine_stop(s->e, true);
	s->stop_deadline = now_s() + s->cfg->daemon.stop_grace_s;
	if (all && !s->stop_sent) {
		cluster_stop_all(s->cl);
		s->stop_sent = true;
	}
}

static void handle_ctl(struct server *s, int slot, const struct seer_msg_hello *h)
{
	char cmd[sizeof(h->ctl) + 1];
	memcpy(cmd, h->ctl, sizeof(h->ctl));
	cmd[sizeof(h->ctl)] = '\0';
	if (strcmp(cmd, "status") == 0) {
		ctl_reply(s, slot, 0, engine_status_json(s->e, SEER_STATUS_EPOCHS));
	} else if (strcmp(cmd, "config") == 0) {
		ctl_reply(s, slot, 0, engine_config_json(s->cfg));
	} else if (strcmp(cmd, "forecast") == 0) {
		ctl_reply(s, slot, 0, engine_forecast_json(s->e));
	} else if (strcmp(cmd, "checkpoints") == 0) {
		ctl_reply(s, slot, 0, ckpt_list_json(s->ck));
	} else if (strcmp(cmd, "stop") == 0) {
		log_info("stop requested by seerctl");
		conn_stop_job(s, true);
		ctl_reply(s, slot, 0, engine_ack_json("stopping"));
	} else if (strcmp(cmd, "drain") == 0) {
		log_info("drain requested by seerctl: no new trainers; exit when the attached finish");
		engine_stop(s->e, false);
		ctl_reply(s, slot, 0, engine_ack_json("draining"));
	} else {
		char msg[256];
		snprintf(msg, sizeof(msg), "unknown command '%s' (status, config, forecast, checkpoints, drain, stop)", cmd);
		ctl_reply(s, slot, -EINVAL, xstrdup(msg));
	}
}

/* Refuse a connection whose hello (n bytes) was read: seerctl gets a
 * control reply it can print, a trainer an ERROR; then close it. */
static void refuse_conn(int fd, const struct seer_msg_hello *h, ssize_t n, int status,
			const char *msg)
{
	if (n == (ssize_t)sizeof(*h) && h->magic == SEER_MAGIC_HELLO && h->kind == SEER_MSG_CTL) {
		char buf[sizeof(struct seer_msg_ctl_reply) + SEER_ERRMSG_MAX];
		size_t len = strnlen(msg, SEER_ERRMSG_MAX);
		struct seer_msg_ctl_reply r = { .kind = SEER_MSG_CTL_REPLY, .status = status,
						.len = (uint32_t)len };
		memcpy(buf, &r, sizeof(r));
		memcpy(buf + sizeof(r), msg, len);
		sock_send(fd, buf, sizeof(r) + len, NULL, 0);
	} else {
		struct seer_msg_welcome w = { .kind = SEER_MSG_ERROR, .status = status };
		str_copy(w.msg, sizeof(w.msg), msg);
		sock_send(fd, &w, sizeof(w), NULL, 0);
	}
	close(fd);
}

/* A piece of the checkpoint record after slot's HELLO. The whole record
 * hands the connection to the engine. */
static void on_record(struct server *s, uint32_t slot)
{
	struct pending *p = &s->pend[slot];
	struct {
		struct seer_msg_record h;
		uint8_t data[SEER_RECORD_CHUNK];
	} m;
	ssize_t n = sock_recv(p->fd, &m, sizeof(m), NULL, NULL, 0);
	if (n == -EAGAIN)
		return;
	int fd = p->fd;
	size_t total = p->hello.record_len;
	if (n < (ssize_t)sizeof(m.h) || m.h.kind != SEER_MSG_RECORD || m.h.total != total ||
	    m.h.offset != p->rec_got || m.h.len != (size_t)n - sizeof(m.h) ||
	    m.h.len > total - p->rec_got || (m.h.len == 0 && p->rec_got < total)) {
		log_warn("pid %d sent a malformed checkpoint record after its hello (%zd bytes)",
			 (int)p->pid, n);
		epoll_ctl(s->epfd, EPOLL_CTL_DEL, fd, NULL);
		p->fd = -1;
		refuse_conn(fd, &p->hello, sizeof(p->hello), SEER_EPROTO,
			    "malformed checkpoint record packet after the hello");
		conn_pend_close(s, (int)slot);
		return;
	}
	memcpy(p->rec + p->rec_got, m.data, m.h.len);
	p->rec_got += m.h.len;
	if (p->rec_got < total)
		return;
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, fd, NULL);
	p->fd = -1;
	/* the engine owns the socket from here on success */
	if (engine_attach(s->e, fd, &p->hello, p->rec, total, p->pid) < 0)
		close(fd);
	conn_pend_close(s, (int)slot);
}

/* Whether the hello (n bytes read) of pending connection p may go on: 0;
 * 1 when the peer closed before sending anything; else the status to refuse
 * it with, msg saying why (another user, out of descriptors, another
 * protocol version, a malformed handshake). */
static int hello_check(struct pending *p, const struct seer_msg_hello *h,
		       ssize_t n, char *msg, size_t len)
{
	if (p->refuse_uid >= 0) {
		snprintf(msg, len, "permission denied: seerd serves only its own user (uid %u); you "
			 "are uid %ld", (unsigned)getuid(), p->refuse_uid);
		return SEER_EREFUSED;
	}
	if (p->refuse_fds) {
		struct rlimit rl = { 0, 0 };
		getrlimit(RLIMIT_NOFILE, &rl);
		snprintf(msg, len, "seerd is out of file descriptors (open-file limit %llu): try "
			 "again later; raise its limit (ulimit -n) or lower [prefetch] io_threads",
			 (unsigned long long)rl.rlim_cur);
		p->refuse_fds = false;
		return -EMFILE; /* on the spare descriptor: conn_input gives it back */
	}
	bool magic = n >= 16 && h->magic == SEER_MAGIC_HELLO;
	if (magic && h->version != SEER_PROTO_VERSION) {
		snprintf(msg, len, "protocol version %u, this seerd speaks %u: use the libseer of the "
			 "same seer build", h->version, SEER_PROTO_VERSION);
		log_warn("pid %d speaks protocol version %u; refused", (int)p->pid, h->version);
		return SEER_EPROTO;
	}
	if (n != (ssize_t)sizeof(*h) || !magic) {
		if (n <= 0)
			return 1;
		snprintf(msg, len, "malformed handshake (%zd bytes): the client is not a libseer of "
			 "this version", n);
		log_warn("pid %d sent a malformed handshake (%zd bytes)", (int)p->pid, n);
		return SEER_EPROTO;
	}
	return 0;
}

void conn_input(struct server *s, uint32_t slot)
{
	struct pending *p = &s->pend[slot];
	if (p->fd < 0)
		return;
	if (p->out) {
		ctl_flush(s, (int)slot);
		return;
	}
	if (p->have_hello) {
		on_record(s, slot);
		return;
	}
	/* a HELLO or CTL, or a checkpoint stage's request (a larger packet) */
	union {
		struct seer_msg_hello h;
		struct seer_msg_ckpt c;
	} *first = xmalloc(sizeof(*first));
	ssize_t n = sock_recv(p->fd, first, sizeof(*first), NULL, NULL, 0);
	if (n == -EAGAIN) {
		free(first);
		return;
	}
	int fd = p->fd;
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, fd, NULL);
	p->fd = -1;
	char msg[SEER_ERRMSG_MAX];
	if (n >= (ssize_t)sizeof(uint64_t) && first->c.magic == SEER_MAGIC_CKPT) {
		if (p->refuse_uid >= 0 || p->refuse_fds) {
			struct seer_msg_ckpt r = { .magic = SEER_MAGIC_CKPT, .kind = SEER_MSG_CKPT_REPLY,
						   .version = SEER_CKPT_VERSION,
						   .status = SEER_EREFUSED };
			snprintf(r.msg, sizeof(r.msg), "%s", p->refuse_fds ? "seerd is out of file "
				 "descriptors: try again later" : "permission denied: seerd serves "
				 "only its own user's checkpoints");
			sock_send(fd, &r, sizeof(r), NULL, 0);
			close(fd);
			if (p->refuse_fds) {
				p->refuse_fds = false;
				conn_spare_restore(s);
			}
		} else {
			ckpt_attach(s->ck, fd, &first->c, (size_t)n, p->pid);
		}
		free(first);
		return;
	}
	struct seer_msg_hello h;
	memcpy(&h, &first->h, sizeof(h));
	free(first);
	int status = hello_check(p, &h, n, msg, sizeof(msg));
	if (status == 1) {
		close(fd); /* closed before a byte came */
		return;
	}
	if (status != 0) {
		refuse_conn(fd, &h, n, status, msg);
		if (status == -EMFILE)
			conn_spare_restore(s);
		return;
	}
	if (h.kind == SEER_MSG_CTL) {
		/* the slot holds the connection until the reply is sent */
		p->fd = fd;
		epoll_watch(s->epfd, fd, EP_TAG(EP_CONN, slot));
		handle_ctl(s, (int)slot, &h);
		return;
	}
	if (h.kind != SEER_MSG_HELLO) {
		snprintf(msg, sizeof(msg), "unknown request kind %u", h.kind);
		log_warn("pid %d sent an unknown request kind %u; closing", (int)p->pid, h.kind);
		refuse_conn(fd, &h, n, SEER_EPROTO, msg);
		return;
	}
	if (h.record_len > 0) {
		if (h.record_len > SEER_RECORD_MAX) {
			snprintf(msg, sizeof(msg), "checkpoint record of %u bytes: seerd takes at most "
				 "%u", h.record_len, SEER_RECORD_MAX);
			refuse_conn(fd, &h, n, -EMSGSIZE, msg);
			return;
		}
		/* the slot holds the connection until the record is in */
		p->fd = fd;
		p->have_hello = true;
		p->hello = h;
		p->rec = xmalloc(h.record_len);
		p->rec_got = 0;
		epoll_watch(s->epfd, fd, EP_TAG(EP_CONN, slot));
		return;
	}
	/* the engine owns the socket from here on success */
	if (engine_attach(s->e, fd, &h, NULL, 0, p->pid) < 0)
		close(fd);
}

void conn_expire_pending(struct server *s)
{
	double t = now_s();
	if (s->shed && t - s->t_shed_log >= 10.0) {
		log_warn("too many connections awaiting their handshake: dropped %llu that sent none "
			 "(oldest first) to let new ones in", (unsigned long long)s->shed);
		s->shed = 0;
		s->t_shed_log = t;
	}
	pid_t last = 0;
	for (int i = 0; i < MAX_PENDING; i++) {
		if (s->pend[i].fd >= 0 && t - s->pend[i].since > HELLO_TIMEOUT_S) {
			if (s->pend[i].out) {
				log_warn("seerctl pid %d read %zu of its %zu-byte reply in %.0f s; "
					 "closing", (int)s->pend[i].pid, s->pend[i].out_off,
					 s->pend[i].out_len, HELLO_TIMEOUT_S);
			} else if (s->pend[i].have_hello) {
				log_warn("pid %d sent %zu of its %u-byte checkpoint record in %.0f s; "
					 "closing", (int)s->pend[i].pid, s->pend[i].rec_got,
					 s->pend[i].hello.record_len, HELLO_TIMEOUT_S);
			} else {
				s->silent++;
				last = s->pend[i].pid;
			}
			conn_pend_close(s, i);
		}
	}
	/* one line per 10 s, however many connections stay silent */
	if (s->silent && t - s->t_silent_log >= 10.0) {
		char who[48] = "";
		if (last)
			snprintf(who, sizeof(who), " (the last from pid %d)", (int)last);
		log_warn("%llu connection(s) sent no handshake within %.0f s and were closed%s",
			 (unsigned long long)s->silent, HELLO_TIMEOUT_S, who);
		s->silent = 0;
		s->t_silent_log = t;
	}
}
