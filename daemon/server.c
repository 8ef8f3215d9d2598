/* The server: seerd's event loop (the dispatcher thread) around the engine.
 *
 * Owns the listening socket, the connections before their handshake (and
 * seerctl's, until its reply is sent), signals, the 1 s timer, the data
 * plane's start-up with the other nodes (join_peers) and the round the
 * loop runs: engine work, control-plane messages, the end of the job.
 * Everything here runs on the dispatcher thread. Failure: set-up errors are
 * logged and the daemon exits 1; a bad connection is answered with the
 * reason and closed; out of file descriptors, accepting pauses until the
 * next tick (one connection is told why on a spare descriptor) with one
 * warning per 10 s; a fatal engine or cluster error stops every node. */
#define _GNU_SOURCE
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "../proto/seer_proto.h"
#include "../src/shm.h"
#include "../src/util.h"
#include "cluster.h"
#include "engine.h"
#include "node_path.h"
#include "seer.h"

#define MAX_PENDING 256
#define HELLO_TIMEOUT_S 5.0

/* A connection before its handshake, or a seerctl whose reply did not fit
 * the socket buffer at once: the rest is sent as the socket drains (the
 * dispatcher never blocks on a slow reader). */
struct pending {
	int fd;
	pid_t pid;
	double since;      /* connected, or reply started */
	long refuse_uid;   /* >= 0: another user's: refuse once its hello is read */
	bool refuse_fds;   /* accepted on the spare fd: refuse once its hello is read */
	char *out;         /* seerctl reply text still being sent, or NULL */
	size_t out_len, out_off;
	int32_t out_status;
	bool have_hello;   /* its HELLO came; the checkpoint record is arriving */
	struct seer_msg_hello hello;
	uint8_t *rec;      /* the record's bytes so far (hello.record_len in all) */
	size_t rec_got;
};

struct server {
	const struct seer_config *cfg;
	struct engine *e;
	struct cluster *cl;
	struct net *net;
	uint32_t node, nnodes;
	bool fatal_sent, done_sent, stop_sent;
	int epfd, lfd, sfd, tfd;
	char sock_path[512];      /* > sun_path: make_listener refuses a long path, never cuts */
	struct pending pend[MAX_PENDING];
	double stop_deadline;
	double done_since;       /* local trainers finished (waiting for the others) */
	bool peer_trouble;       /* a peer had stopped answering when they finished */
	int exit_code;
	uint64_t shed;           /* connections dropped by a flood, not yet logged */
	double t_shed_log;
	uint64_t silent;         /* connections closed without a handshake, not yet logged */
	double t_silent_log;
	int spare_fd;            /* /dev/null, closed to accept and refuse one at EMFILE */
	bool accept_paused;      /* out of fds: the listener is out of epoll until the tick */
	uint64_t accept_fails;   /* not yet logged */
	double t_accept_log;
	int accept_errno;
};

static int make_listener(struct server *s, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(s->sock_path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path %s is longer than %zu bytes: set [daemon] socket",
			 s->sock_path, sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, s->sock_path);
	/* a socket file left by a dead daemon is removed; a live one is an error */
	int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (probe >= 0) {
		if (connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			snprintf(err, errlen, "another seerd already serves %s (same job id?): stop it "
				 "or choose another [job] id", s->sock_path);
			return -EADDRINUSE;
		}
		close(probe);
	}
	unlink(s->sock_path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		snprintf(err, errlen, "socket(): %s", strerror(errno));
		return -errno;
	}
	mode_t old = umask(0177); /* the socket is created 0600 (bind: 0777 & ~umask) */
	int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (rc != 0 || chmod(s->sock_path, 0600) != 0 || listen(fd, 128) != 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", s->sock_path, strerror(errno));
		rc = -errno;
		close(fd);
		return rc;
	}
	s->lfd = fd;
	return 0;
}

static void ep_add(int epfd, int fd, uint64_t tag)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = tag };
	epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* The spare descriptor back, once the connection it made room for is gone
 * (fails quietly while the process is still out of descriptors). */
static void spare_restore(struct server *s)
{
	if (s->spare_fd < 0)
		s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void pend_close(struct server *s, int i)
{
	struct pending *p = &s->pend[i];
	if (p->fd >= 0) {
		epoll_ctl(s->epfd, EPOLL_CTL_DEL, p->fd, NULL);
		close(p->fd);
		if (p->refuse_fds)
			spare_restore(s);
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
 * (accept_all); one line per 10 s says how often it happened. */
static void accept_pause(struct server *s, int err)
{
	if (!s->accept_paused)
		epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->lfd, NULL);
	s->accept_paused = true;
	s->accept_errno = err;
	s->accept_fails++;
}

/* The 1 s tick: listen again, and report the pauses. */
static void accept_resume(struct server *s, double t)
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
		ep_add(s->epfd, s->lfd, EP_TAG(EP_LISTEN, 0));
	}
	spare_restore(s);
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
	pend_close(s, oldest);
	s->shed++;
	return oldest;
}

static void accept_all(struct server *s)
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
					spare_restore(s);
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
		ep_add(s->epfd, fd, EP_TAG(EP_CONN, slot));
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
	pend_close(s, i);
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
static void stop_job(struct server *s, bool all)
{
	engine_stop(s->e, true);
	s->stop_deadline = now_s() + s->cfg->stop_grace_s;
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
	} else if (strcmp(cmd, "stop") == 0) {
		log_info("stop requested by seerctl");
		stop_job(s, true);
		ctl_reply(s, slot, 0, engine_ack_json("stopping"));
	} else if (strcmp(cmd, "drain") == 0) {
		log_info("drain requested by seerctl: no new trainers; exit when the attached finish");
		engine_stop(s->e, false);
		ctl_reply(s, slot, 0, engine_ack_json("draining"));
	} else {
		char msg[256];
		snprintf(msg, sizeof(msg), "unknown command '%s' (status, config, forecast, drain, stop)", cmd);
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
		pend_close(s, (int)slot);
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
	pend_close(s, (int)slot);
}

static void on_conn(struct server *s, uint32_t slot)
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
	struct seer_msg_hello h;
	ssize_t n = sock_recv(p->fd, &h, sizeof(h), NULL, NULL, 0);
	if (n == -EAGAIN)
		return;
	int fd = p->fd;
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, fd, NULL);
	p->fd = -1;
	if (p->refuse_uid >= 0) {
		char msg[SEER_ERRMSG_MAX];
		snprintf(msg, sizeof(msg), "permission denied: seerd serves only its own user (uid "
			 "%u); you are uid %ld", (unsigned)getuid(), p->refuse_uid);
		refuse_conn(fd, &h, n, SEER_EREFUSED, msg);
		return;
	}
	if (p->refuse_fds) {
		struct rlimit rl = { 0, 0 };
		getrlimit(RLIMIT_NOFILE, &rl);
		char msg[SEER_ERRMSG_MAX];
		snprintf(msg, sizeof(msg), "seerd is out of file descriptors (open-file limit %llu): "
			 "try again later; raise its limit (ulimit -n) or lower [prefetch] io_threads",
			 (unsigned long long)rl.rlim_cur);
		p->refuse_fds = false;
		refuse_conn(fd, &h, n, -EMFILE, msg);
		spare_restore(s);
		return;
	}
	bool magic = n >= 16 && h.magic == SEER_MAGIC_HELLO;
	if (magic && h.version != SEER_PROTO_VERSION) {
		char msg[SEER_ERRMSG_MAX];
		snprintf(msg, sizeof(msg), "protocol version %u, this seerd speaks %u: use the "
			 "libseer of the same seer build", h.version, SEER_PROTO_VERSION);
		log_warn("pid %d speaks protocol version %u; refused", (int)p->pid, h.version);
		refuse_conn(fd, &h, n, SEER_EPROTO, msg);
		return;
	}
	if (n != (ssize_t)sizeof(h) || !magic) {
		if (n > 0) {
			char msg[SEER_ERRMSG_MAX];
			snprintf(msg, sizeof(msg), "malformed handshake (%zd bytes): the client is not "
				 "a libseer of this version", n);
			log_warn("pid %d sent a malformed handshake (%zd bytes)", (int)p->pid, n);
			refuse_conn(fd, &h, n, SEER_EPROTO, msg);
		} else {
			close(fd);
		}
		return;
	}
	if (h.kind == SEER_MSG_CTL) {
		/* the slot holds the connection until the reply is sent */
		p->fd = fd;
		epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd,
			  &(struct epoll_event){ .events = EPOLLIN, .data.u64 = EP_TAG(EP_CONN, slot) });
		handle_ctl(s, (int)slot, &h);
		return;
	}
	if (h.kind != SEER_MSG_HELLO) {
		char msg[SEER_ERRMSG_MAX];
		snprintf(msg, sizeof(msg), "unknown request kind %u", h.kind);
		log_warn("pid %d sent an unknown request kind %u; closing", (int)p->pid, h.kind);
		refuse_conn(fd, &h, n, SEER_EPROTO, msg);
		return;
	}
	if (h.record_len > 0) {
		if (h.record_len > SEER_RECORD_MAX) {
			char msg[SEER_ERRMSG_MAX];
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
		epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd,
			  &(struct epoll_event){ .events = EPOLLIN, .data.u64 = EP_TAG(EP_CONN, slot) });
		return;
	}
	/* the engine owns the socket from here on success */
	if (engine_attach(s->e, fd, &h, NULL, 0, p->pid) < 0)
		close(fd);
}

static void expire_pending(struct server *s)
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
			pend_close(s, i);
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

static void on_signal(struct server *s)
{
	struct signalfd_siginfo si;
	while (read(s->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
			if (s->stop_deadline > 0) {
				log_warn("second %s: exiting now", strsignal((int)si.ssi_signo));
				s->stop_deadline = now_s();
				continue;
			}
			log_info("%s: stopping (trainers are told; shared memory and socket are "
				 "removed)", strsignal((int)si.ssi_signo));
			stop_job(s, true);
			s->exit_code = 0;
		}
	}
}

/* Several nodes: exchange capacities and fabric addresses, start the data
 * plane. Every node learns whether every other one succeeded, so all stop
 * together with the first node's reason. */
static int join_peers(struct server *s, char *err, size_t errlen)
{
	struct plan_cap mine = engine_cap(s->e);
	struct plan_cap *caps = xcalloc(s->nnodes, sizeof(*caps));
	cluster_allgather(s->cl, &mine, sizeof(mine), caps);
	engine_set_caps(s->e, caps);
	free(caps);

	struct net_opts no = {
		.provider = s->cfg->provider, .node = s->node, .nnodes = s->nnodes,
		.timeout_s = s->cfg->peer_timeout_ms / 1000.0, .suspect_s = 10.0,
	};
	engine_net_opts(s->e, &no);
	void *addr = NULL;
	size_t alen = 0;
	struct {
		int32_t rc;
		uint32_t len;
		char msg[240];
	} me = { 0 }, *all = xcalloc(s->nnodes, sizeof(me));
	me.rc = net_create(&s->net, &no, &addr, &alen, me.msg, sizeof(me.msg));
	me.len = (uint32_t)alen;
	cluster_allgather(s->cl, &me, sizeof(me), all);
	int rc = 0;
	for (uint32_t k = 0; k < s->nnodes && rc == 0; k++) {
		if (all[k].rc != 0) {
			snprintf(err, errlen, "node %u cannot open the data plane: %.200s", k, all[k].msg);
			rc = -EIO;
		} else if (all[k].len != all[0].len) {
			snprintf(err, errlen, "fabric address sizes differ between nodes (%u vs %u): "
				 "every node must use the same [net] provider", all[k].len, all[0].len);
			rc = -EIO;
		}
	}
	free(all);
	if (rc != 0) {
		free(addr);
		return rc;
	}
	char *addrs = xcalloc(s->nnodes, alen);
	cluster_allgather(s->cl, addr, alen, addrs);
	free(addr);
	me.rc = net_start(s->net, addrs, alen, me.msg, sizeof(me.msg));
	free(addrs);
	int32_t worst = me.rc, *rcs = xcalloc(s->nnodes, sizeof(int32_t));
	cluster_allgather(s->cl, &worst, sizeof(worst), rcs);
	for (uint32_t k = 0; k < s->nnodes && rc == 0; k++)
		if (rcs[k] != 0) {
			snprintf(err, errlen, "node %u could not start its data plane%s%.200s", k,
				 k == s->node ? ": " : "", k == s->node ? me.msg : "");
			rc = -EIO;
		}
	free(rcs);
	if (rc == 0) {
		engine_set_net(s->e, s->net);
		log_info("data plane up: libfabric provider %s, %u nodes", s->cfg->provider, s->nnodes);
	}
	return rc;
}

static void stop_signals(sigset_t *mask)
{
	sigemptyset(mask);
	sigaddset(mask, SIGTERM);
	sigaddset(mask, SIGINT);
}

void server_block_signals(void)
{
	sigset_t mask;
	stop_signals(&mask);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* The loop's own fds: SIGTERM/SIGINT through a signalfd (blocked by main
 * before MPI or any thread started, so only it sees them), epoll, and the
 * 1 s timer. */
static int loop_open(struct server *s)
{
	sigset_t mask;
	stop_signals(&mask);
	server_block_signals(); /* already done by main; harmless again */
	s->sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	s->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (s->sfd < 0 || s->epfd < 0 || s->tfd < 0) {
		log_error("cannot set up the event loop: %s", strerror(errno));
		return -errno;
	}
	struct itimerspec its = { { 1, 0 }, { 1, 0 } };
	timerfd_settime(s->tfd, 0, &its, NULL);
	ep_add(s->epfd, s->sfd, EP_TAG(EP_SIGNAL, 0));
	ep_add(s->epfd, s->tfd, EP_TAG(EP_TIMER, 0));
	return 0;
}

/* The control plane's part of a round: local ranks to node 0, the agreed
 * rank map, stop requests and fatal errors. false: leave the loop. */
static bool cluster_round(struct server *s)
{
	uint32_t *ranks, nranks;
	struct cluster_plan plan;
	if (engine_roll(s->e, &plan, &ranks, &nranks)) {
		cluster_roll(s->cl, &plan, ranks, nranks);
		free(ranks);
	}
	const char *fatal = NULL;
	uint32_t *map;
	if (cluster_poll(s->cl, &plan, &map, &fatal)) {
		engine_set_map(s->e, &plan, map);
		free(map);
		free(plan.rec);
		engine_work(s->e);
	}
	if (fatal) {
		log_error("stopping: %s", fatal);
		engine_stop(s->e, true);
		s->exit_code = 1;
		return false;
	}
	if (cluster_stop_requested(s->cl) && s->stop_deadline == 0) {
		log_info("another node stopped the job: stopping");
		stop_job(s, false);
	}
	if (engine_fatal(s->e) && !s->fatal_sent) {
		cluster_abort_all(s->cl, engine_fatal(s->e));
		s->fatal_sent = true;
	}
	return true;
}

/* The local trainers are done (or the engine stopped): one node leaves;
 * several keep serving peers until every node is done, bounded in case a
 * node died (shorter once a peer stopped answering the data plane).
 * false: leave the loop. */
static bool finished_round(struct server *s)
{
	if (s->nnodes == 1 || engine_fatal(s->e))
		return false;
	if (!s->done_sent) {
		log_info("local trainers done; serving peers until every node is done");
		cluster_local_done(s->cl);
		s->done_sent = true;
		s->done_since = now_s();
		for (uint32_t k = 0; s->net && k < s->nnodes; k++)
			if (k != s->node && net_peer_suspect(s->net, k))
				s->peer_trouble = true;
	}
	if (cluster_all_done(s->cl))
		return false;
	double limit = s->cfg->done_timeout_s;
	if (s->peer_trouble)
		limit = MIN(limit, MAX(5.0, 10 * s->cfg->peer_timeout_ms / 1000.0));
	if (now_s() - s->done_since > limit) {
		log_error("other nodes did not finish within %.0f s of this one (a daemon died?): "
			  "leaving without them", limit);
		s->exit_code = 1;
		return false;
	}
	return true;
}

/* Sleep until an event (not at all when the engine has work, briefly while
 * the cluster needs polling) and hand each to its owner. false: leave. */
static bool dispatch(struct server *s)
{
	int timeout = engine_arm(s->e) ? (cluster_busy(s->cl) ? 10 : 1000) : 0;
	struct epoll_event evs[64];
	int k = epoll_wait(s->epfd, evs, 64, timeout);
	if (k < 0 && errno != EINTR) {
		log_error("epoll_wait: %s", strerror(errno));
		s->exit_code = 1;
		return false;
	}
	for (int i = 0; i < k; i++) {
		uint64_t tag = evs[i].data.u64;
		switch (EP_KIND(tag)) {
		case EP_LISTEN:
			accept_all(s);
			break;
		case EP_CONN:
			if (EP_ID(tag) < MAX_PENDING)
				on_conn(s, EP_ID(tag));
			break;
		case EP_SIGNAL:
			on_signal(s);
			break;
		case EP_TIMER: {
			uint64_t v;
			ssize_t r UNUSED = read(s->tfd, &v, sizeof(v));
			expire_pending(s);
			accept_resume(s, now_s());
			engine_tick(s->e);
			break;
		}
		default:
			engine_on_event(s->e, tag, evs[i].events);
			break;
		}
	}
	return true;
}

/* Everything after the loop: the stats file, then the data plane before the
 * arena it sends from, then the engine, the socket and the loop's fds. */
static void server_close(struct server *s, int rc)
{
	if (s->e) {
		if (engine_fatal(s->e))
			log_error("stopping: %s", engine_fatal(s->e));
		else if (rc == 0 && s->stop_deadline == 0 && engine_finished(s->e))
			log_info("job finished: all trainers done");
		engine_end(s->e, rc == 0 && s->stop_deadline == 0 && !engine_fatal(s->e) &&
			   engine_finished(s->e) &&
			   (s->nnodes == 1 || (s->done_sent && cluster_all_done(s->cl))));
		engine_write_stats(s->e);
		if (s->net)
			net_destroy(s->net);
		engine_destroy(s->e);
	}
	if (s->lfd >= 0) {
		close(s->lfd);
		unlink(s->sock_path);
	}
	for (int i = 0; i < MAX_PENDING; i++)
		pend_close(s, i);
	if (s->spare_fd >= 0)
		close(s->spare_fd);
	if (s->tfd >= 0)
		close(s->tfd);
	if (s->sfd >= 0)
		close(s->sfd);
	if (s->epfd >= 0)
		close(s->epfd);
}

int server_run(const struct seer_config *cfg, struct catalog *cat, struct cluster *cl,
	       unsigned node, unsigned nnodes)
{
	struct server s = { .cfg = cfg, .lfd = -1, .sfd = -1, .tfd = -1, .epfd = -1, .cl = cl,
			    .node = node, .nnodes = nnodes, .spare_fd = -1 };
	for (int i = 0; i < MAX_PENDING; i++)
		s.pend[i].fd = -1;
	char err[1024];
	int rc = 1;
	/* the socket path may carry the node rank (several daemons on one host) */
	if (node_path(s.sock_path, sizeof(s.sock_path), cfg->socket, node) != 0) {
		char show[CAT_PATH_SHOW];
		log_error("[daemon] socket %s is longer than %zu bytes with the node rank: set a "
			  "shorter path", cat_path_abbrev(show, sizeof(show), cfg->socket),
			  sizeof(s.sock_path) - 1);
		goto out;
	}
	if (loop_open(&s) != 0)
		goto out;
	struct engine_opts eo = { .cfg = cfg, .cat = cat, .node = node, .nnodes = nnodes,
				  .epfd = s.epfd };
	if (engine_create(&s.e, &eo, err, sizeof(err)) != 0 ||
	    (nnodes > 1 && join_peers(&s, err, sizeof(err)) != 0) ||
	    make_listener(&s, err, sizeof(err)) != 0) {
		log_error("%s", err);
		goto out;
	}
	ep_add(s.epfd, s.lfd, EP_TAG(EP_LISTEN, 0));
	spare_restore(&s);
	/* launch scripts wait for this line's file */
	log_info("serving job '%s' on %s", cfg->job_id, s.sock_path);
	s.exit_code = 0;
	for (;;) {
		engine_work(s.e);
		if (!cluster_round(&s))
			break;
		if (engine_finished(s.e) && !finished_round(&s))
			break;
		if (s.stop_deadline > 0 && now_s() >= s.stop_deadline && !s.done_sent) {
			log_warn("trainers still attached %.0f s after the stop ([daemon] stop_grace_s); "
				 "exiting anyway", s.cfg->stop_grace_s);
			break;
		}
		if (!dispatch(&s))
			break;
	}
	rc = engine_fatal(s.e) ? 1 : s.exit_code;
out:
	server_close(&s, rc);
	return rc;
}
