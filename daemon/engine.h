/* The engine: seerd's data plane, as the server (server.c) drives it.
 *
 * It owns the arena (RAM cache + staging), the placement plan, one stream
 * per trainer rank (batch slots, staging ring, control segments), the NVMe
 * tier, peer serving and the I/O pool; each is a stage file of its own
 * (daemon/README.md has the map, engine_int.h the shared state).
 *
 * Threads: every function declared here is called on the dispatcher (the
 * server's event-loop thread). The engine also runs code elsewhere: the I/O
 * threads run worker.c on the tasks handed to them, and with several nodes
 * the network thread calls the lookup that engine_net_opts installs
 * (peer_lookup). engine_int.h lists exactly which fields those read. */
#ifndef SEERD_ENGINE_H
#define SEERD_ENGINE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../proto/seer_proto.h"
#include "../src/catalog/catalog.h"
#include "../src/config/config.h"
#include "../src/net/net.h"
#include "../src/plan/plan.h"
#include "drain_pace.h"

struct pfs_probe;

struct engine;

/* epoll tags: the engine registers trainer fds in the server's epoll set
 * with data.u64 = EP_TAG(kind, id). */
enum ep_kind { EP_LISTEN = 1, EP_CONN, EP_TSOCK, EP_TEFD, EP_POOL, EP_SIGNAL, EP_TIMER, EP_NET };
#define EP_TAG(kind, id) (((uint64_t)(kind) << 56) | (uint64_t)(id))
#define EP_KIND(tag) ((unsigned)((tag) >> 56))
#define EP_ID(tag) ((uint32_t)(tag))

struct engine_opts {
	const struct seer_config *cfg;
	struct catalog *cat;
	uint32_t node, nnodes;
	int epfd;
	const struct pfs_probe *probe; /* prefetch.coalesce = auto: node 0's verdict, or NULL */
};

/* 0, or an error in err (the daemon then exits). */
int engine_create(struct engine **out, const struct engine_opts *o, char *err, size_t errlen);
void engine_destroy(struct engine *e);

/* A HELLO arrived on `sock` from process pid/uid, with the checkpoint record
 * it announced (rec_len bytes; NULL, 0: none; the engine copies what it
 * keeps). On success the engine owns sock. On refusal it sends the reason to
 * the peer and returns < 0; the caller closes sock. */
int engine_attach(struct engine *e, int sock, const struct seer_msg_hello *h, const uint8_t *rec,
		  size_t rec_len, pid_t pid);

/* epoll events for the engine's fds */
void engine_on_event(struct engine *e, uint64_t tag, uint32_t events);
/* Do all pending work: releases, completions, preparation, publication. */
void engine_work(struct engine *e);
/* Arm wake-ups before the loop sleeps. Returns false when new work showed
 * up meanwhile (do not sleep). */
bool engine_arm(struct engine *e);
/* ms, at most `ms`, until a prepare engine_arm found paced may go ahead
 * (prefetch.pace); call after engine_arm. */
int engine_wait_ms(const struct engine *e, int ms);

/* Drain: stop preparing, tell trainers; `now` true also drops batches
 * already published. */
void engine_stop(struct engine *e, bool now);
/* The run is over: `complete` (every rank of the job, on every node, took
 * its last batch) removes the saved positions, else they stay for the next
 * run and the log says where. From here the PFS outlook is empty: the
 * engine reads no more, and the checkpoint drain's last drains run at full
 * rate. */
void engine_end(struct engine *e, bool complete);
/* SIGUSR1/SIGUSR2: the stats file as it stands now, and this node's resume
 * positions written to disk (each logged); serving goes on. */
void engine_snapshot(struct engine *e);
/* Every trainer finished the job (or the engine stopped) and detached. */
bool engine_finished(const struct engine *e);
/* [daemon] serve_jobs, once engine_finished: the finished job's positions
 * removed and its shape dropped, so that the next trainer's definition
 * starts a new job (jobdef.c). 1: done; 0: not yet (its reads still land;
 * call again); -1: the engine is stopping or draining (leave). */
int engine_next_job(struct engine *e);
/* Trainers attached, leaving or reconnecting now (session.c). */
uint32_t engine_trainers(const struct engine *e);
/* Why the engine cannot go on (it then reports finished), or NULL. */
const char *engine_fatal(const struct engine *e);
/* Periodic duties (1 s): progress lines, connect warnings. */
void engine_tick(struct engine *e);

/* ---- several nodes ---------------------------------------------------------
 * This node's capacities, and every node's (node order) before the plan. */
struct plan_cap engine_cap(const struct engine *e);
void engine_set_caps(struct engine *e, const struct plan_cap *caps);
/* Fill the region/lookup part of net options (the arena; answers from RAM). */
void engine_net_opts(struct engine *e, struct net_opts *o);
void engine_set_net(struct engine *e, struct net *n);
/* Local trainer ranks changed before the map: *ranks (malloc'd) lists them,
 * *plan this node's resume plan (its record points into the engine). */
struct cluster_plan;
bool engine_roll(struct engine *e, struct cluster_plan *plan, uint32_t **ranks, uint32_t *n);
/* The agreed rank -> node map and resume plan: plan and start serving. 0, or
 * < 0 with engine_fatal() set. */
int engine_set_map(struct engine *e, const struct cluster_plan *plan, const uint32_t *rank_node);

/* JSON for `seerctl status` (malloc'd): the per-epoch list holds the last
 * max_epochs epochs (0: all), "epochs_omitted" says how many came before.
 * The stats file at exit has every epoch. */
#define SEER_STATUS_EPOCHS 64
char *engine_status_json(struct engine *e, uint64_t max_epochs);
/* JSON for `seerctl forecast` (malloc'd): this node's bytes by source, time
 * terms, binding term and lower bound per epoch with the rates measured so
 * far, each epoch's actual beside it, and the seer-plan command for the
 * capacity search; {"ready": false, "why": ...} before there is one. */
char *engine_forecast_json(struct engine *e);
/* Write the stats file (JSON) if configured. */
void engine_write_stats(struct engine *e);
/* `seerctl config` (malloc'd JSON): {"config": {section: {key: value}},
 * "origin": {"section.key": where it was set}, "ini": the same as INI text
 * that seerd -c reads back}. */
char *engine_config_json(const struct seer_config *cfg);
/* `seerctl stop` / `drain` (malloc'd JSON): {"ok": true, "state": state}. */
char *engine_ack_json(const char *state);
/* The engine's use of the PFS now and ahead for the checkpoint drain
 * (drain_pace.h): its PFS reads queued or running, and those the plan makes
 * within [checkpoint] drain_window_s ahead of the trainers (updated on the
 * tick). Any thread; `e` is a struct engine *. */
void engine_pfs_outlook(void *e, struct pfs_outlook *o);

#endif /* SEERD_ENGINE_H */
