/* The server: seerd's event loop (the dispatcher thread) around the engine.
 *
 * Owns the listening socket once the start-up thread (startup.c) hands it
 * over (the connections before their handshake and
 * seerctl's requests are conn.c's), signals, the 1 s timer, the data
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
#include "../src/common/shm.h"
#include "../src/util/util.h"
#include "cluster.h"
#include "engine.h"
#include "node_path.h"
#include "seer.h"

#include "server_int.h"
#include "startup.h"

int server_listen(const char *path, int *lfd, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path %s is longer than %zu bytes: set [daemon] socket",
			 path, sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	/* a socket file left by a dead daemon is removed; a live one is an error */
	int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (probe >= 0) {
		if (connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			snprintf(err, errlen, "another seerd already serves %s (same job id?): stop it "
				 "or choose another [job] id", path);
			return -EADDRINUSE;
		}
		close(probe);
	}
	unlink(path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		snprintf(err, errlen, "socket(): %s", strerror(errno));
		return -errno;
	}
	mode_t old = umask(0177); /* the socket is created 0600 (bind: 0777 & ~umask) */
	int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (rc != 0 || chmod(path, 0600) != 0 || listen(fd, 128) != 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(errno));
		rc = -errno;
		close(fd);
		return rc;
	}
	*lfd = fd;
	return 0;
}

/* What seerd does with each signal it takes (server_signals lists them):
 * SIGTERM, SIGINT, SIGQUIT: the clean stop (a second one: exit now);
 * SIGUSR1, SIGUSR2: a snapshot (Slurm's --signal=USR1@T warns this way
 * before the time limit), serving goes on; SIGHUP: logged and ignored
 * (seerd has no terminal and no configuration to reload). */
static void on_signal(struct server *s)
{
	struct signalfd_siginfo si;
	while (read(s->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		int sig = (int)si.ssi_signo;
		if (sig == SIGHUP) {
			log_info("SIGHUP from pid %u ignored: seerd is not a terminal program and reloads "
				 "nothing (SIGTERM stops it)", si.ssi_pid);
		} else if (sig == SIGUSR1 || sig == SIGUSR2) {
			log_info("received %s from pid %u (Slurm's --signal warning?): writing the "
				 "statistics and the resume positions; serving goes on",
				 sig == SIGUSR1 ? "SIGUSR1" : "SIGUSR2", si.ssi_pid);
			engine_snapshot(s->e);
		} else if (sig == SIGTERM || sig == SIGINT || sig == SIGQUIT) {
			if (s->stop_deadline > 0) {
				log_warn("second %s: exiting now", strsignal(sig));
				s->stop_deadline = now_s();
				continue;
			}
			log_info("%s: stopping (trainers are told; shared memory and socket are "
				 "removed)", strsignal(sig));
			conn_stop_job(s, true);
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
		.provider = s->cfg->net.provider, .node = s->node, .nnodes = s->nnodes,
		.timeout_s = s->cfg->net.peer_timeout_ms / 1000.0, .suspect_s = 10.0,
		.no_bundles = !s->cfg->net.bundles,
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
		log_info("data plane up: libfabric provider %s, %u nodes", s->cfg->net.provider, s->nnodes);
	}
	return rc;
}

void server_signals(sigset_t *mask)
{
	sigemptyset(mask);
	sigaddset(mask, SIGTERM);
	sigaddset(mask, SIGINT);
	sigaddset(mask, SIGQUIT);
	sigaddset(mask, SIGHUP);
	sigaddset(mask, SIGUSR1);
	sigaddset(mask, SIGUSR2);
}

void server_block_signals(void)
{
	sigset_t mask;
	server_signals(&mask);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* The loop's own fds: server_signals' signals through a signalfd (blocked
 * by main before MPI or any thread started, so only it sees them), epoll,
 * and the 1 s timer. */
static int loop_open(struct server *s)
{
	sigset_t mask;
	server_signals(&mask);
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
	epoll_watch(s->epfd, s->sfd, EP_TAG(EP_SIGNAL, 0));
	epoll_watch(s->epfd, s->tfd, EP_TAG(EP_TIMER, 0));
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
		conn_stop_job(s, false);
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
	double limit = s->cfg->daemon.done_timeout_s;
	if (s->peer_trouble)
		limit = MIN(limit, MAX(5.0, 10 * s->cfg->net.peer_timeout_ms / 1000.0));
	if (now_s() - s->done_since > limit) {
		log_error("other nodes did not finish within %.0f s of this one (a daemon died?): "
			  "leaving without them", limit);
		s->exit_code = 1;
		return false;
	}
	return true;
}

/* [daemon] idle_exit_s on one node: a seerd whose trainers have all gone
 * (a script that died, or never came) stops after that long, saving the
 * positions, instead of lingering; a connection pending its handshake or a
 * trainer leaving counts as present. */
static void idle_check(struct server *s, double t)
{
	double limit = s->cfg->daemon.idle_exit_s;
	if (limit <= 0 || s->nnodes > 1 || s->stop_deadline > 0)
		return;
	bool pending = false;
	for (int i = 0; i < MAX_PENDING && !pending; i++)
		pending = s->pend[i].fd >= 0;
	if (pending || engine_trainers(s->e) > 0) {
		s->idle_since = t;
		return;
	}
	if (t - s->idle_since < limit)
		return;
	log_info("no trainer connected for %.0f s ([daemon] idle_exit_s): stopping; the positions "
		 "are saved for a restarted script", t - s->idle_since);
	conn_stop_job(s, true);
}

/* Sleep until an event (not at all when the engine has work, briefly while
 * the cluster needs polling) and hand each to its owner. false: leave. */
static bool dispatch(struct server *s)
{
	int timeout = !engine_arm(s->e) ? 0 : cluster_urgent(s->cl) ? 1 : cluster_busy(s->cl) ? 10
										    : 1000;
	timeout = engine_wait_ms(s->e, timeout);
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
			conn_accept_all(s);
			break;
		case EP_CONN:
			if (EP_ID(tag) < MAX_PENDING)
				conn_input(s, EP_ID(tag));
			break;
		case EP_SIGNAL:
			on_signal(s);
			break;
		case EP_TIMER: {
			uint64_t v;
			ssize_t r UNUSED = read(s->tfd, &v, sizeof(v));
			conn_expire_pending(s);
			conn_accept_resume(s, now_s());
			engine_tick(s->e);
			idle_check(s, now_s());
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
		/* pending checkpoint writes before the engine whose reads they yield to */
		ckpt_finish(s->ck, s->stop_deadline > 0 ? s->stop_deadline
							 : now_s() + s->cfg->daemon.stop_grace_s);
		ckpt_destroy(s->ck);
		s->ck = NULL;
		if (s->net)
			net_destroy(s->net);
		engine_destroy(s->e);
	}
	if (s->lfd >= 0) {
		close(s->lfd);
		unlink(s->sock_path);
	}
	for (int i = 0; i < MAX_PENDING; i++)
		conn_pend_close(s, i);
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
	       unsigned node, unsigned nnodes, const struct pfs_probe *probe, struct startup *st)
{
	struct server s = { .cfg = cfg, .lfd = -1, .sfd = -1, .tfd = -1, .epfd = -1, .cl = cl,
			    .node = node, .nnodes = nnodes, .spare_fd = -1 };
	for (int i = 0; i < MAX_PENDING; i++)
		s.pend[i].fd = -1;
	char err[1024];
	int rc = 1;
	/* the socket path may carry the node rank (several daemons on one host) */
	if (node_path(s.sock_path, sizeof(s.sock_path), cfg->daemon.socket, node) != 0) {
		char show[CAT_PATH_SHOW];
		log_error("[daemon] socket %s is longer than %zu bytes with the node rank: set a "
			  "shorter path", catalog_path_abbrev(show, sizeof(show), cfg->daemon.socket),
			  sizeof(s.sock_path) - 1);
		startup_abort(st);
		goto out;
	}
	if (loop_open(&s) != 0) {
		s.lfd = startup_end(st, &(bool){ false });
		goto out;
	}
	struct engine_opts eo = { .cfg = cfg, .cat = cat, .node = node, .nnodes = nnodes,
				  .epfd = s.epfd, .probe = probe };
	bool stop = false;
	if (engine_create(&s.e, &eo, err, sizeof(err)) != 0 ||
	    (nnodes > 1 && join_peers(&s, err, sizeof(err)) != 0)) {
		log_error("%s", err);
		s.lfd = startup_end(st, &stop);
		goto out;
	}
	s.ck = ckpt_create(cfg, node, engine_pfs_outlook, s.e, err, sizeof(err));
	if (nnodes > 1) {
		/* every node takes part, even one whose stage failed (it sends "") */
		char mine[320], *all = xcalloc(nnodes, sizeof(mine));
		ckpt_peer_listen(s.ck, nnodes, mine, sizeof(mine));
		cluster_allgather(s.cl, mine, sizeof(mine), all);
		ckpt_peer_start(s.ck, node, nnodes, all, sizeof(mine));
		free(all);
	}
	if (!s.ck) {
		log_error("%s", err);
		s.lfd = startup_end(st, &stop);
		goto out;
	}
	/* the start-up thread's socket: what waits in its backlog is ours */
	s.lfd = startup_end(st, &stop);
	epoll_watch(s.epfd, s.lfd, EP_TAG(EP_LISTEN, 0));
	conn_spare_restore(&s);
	/* launch scripts wait for this line's file */
	log_info("serving job '%s' on %s", cfg->job.id, s.sock_path);
	s.exit_code = 0;
	s.idle_since = now_s();
	if (stop) {
		log_info("stopping: a stop was asked during start-up");
		conn_stop_job(&s, true);
	}
	for (;;) {
		engine_work(s.e);
		if (!cluster_round(&s))
			break;
		if (engine_finished(s.e) && !(s.cfg->daemon.serve_jobs && s.nnodes == 1 &&
					       s.stop_deadline == 0 && engine_next_job(s.e) >= 0) &&
		    !finished_round(&s))
			break;
		if (s.stop_deadline > 0 && now_s() >= s.stop_deadline && !s.done_sent) {
			log_warn("trainers still attached %.0f s after the stop ([daemon] stop_grace_s); "
				 "exiting anyway", s.cfg->daemon.stop_grace_s);
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
