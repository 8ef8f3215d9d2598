/* seerd's server internals, shared by server.c (the event loop) and conn.c
 * (connections before their handshake, seerctl requests). Dispatcher thread
 * only. */
#ifndef SEERD_SERVER_INT_H
#define SEERD_SERVER_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../proto/seer_proto.h"
#include "../src/config/config.h"
#include "checkpoint.h"
#include "cluster.h"
#include "engine.h"

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
	struct ckpt *ck;          /* the checkpoint stage (checkpoint.h) */
	struct cluster *cl;
	struct net *net;
	uint32_t node, nnodes;
	bool fatal_sent, done_sent, stop_sent;
	int epfd, lfd, sfd, tfd;
	char sock_path[512];      /* > sun_path: make_listener refuses a long path, never cuts */
	struct pending pend[MAX_PENDING];
	double stop_deadline;
	double done_since;       /* local trainers finished (waiting for the others) */
	double idle_since;       /* no trainer connected since then ([daemon] idle_exit_s) */
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

/* conn.c */
void conn_spare_restore(struct server *s);
void conn_pend_close(struct server *s, int i);
void conn_accept_all(struct server *s);
void conn_input(struct server *s, uint32_t slot);
void conn_expire_pending(struct server *s);
void conn_accept_resume(struct server *s, double t);
void conn_stop_job(struct server *s, bool all);

#endif /* SEERD_SERVER_INT_H */
