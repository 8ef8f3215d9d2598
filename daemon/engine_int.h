/* The engine's insides, shared by its stage files (the map of which file
 * owns what: daemon/README.md). server.c and main.c see only engine.h.
 *
 * Threads. Six kinds of thread touch the engine:
 *   - the dispatcher (the event loop of server.c), which runs every function
 *     of the stage files except the two below, and owns every field not
 *     marked otherwise;
 *   - the I/O threads (src/util/iopool.c), which run worker.c: each works on the
 *     one task the pool handed it and reads the "fixed at creation" fields
 *     listed below (never a dispatcher-owned one);
 *   - the network thread (src/net/net_fabric.c, several nodes only), which calls
 *     peer_lookup (peer.c): it reads the plan after `plan_published` and a
 *     sample's RAM state in `cstate`, both through acquire loads;
 *   - the forecast thread (fcast.c), started once the plan is made: it reads
 *     the plan, the replica set, the catalog, the shape, the rank map and
 *     the capacities (none changes until fcast_stop joins it) and writes
 *     only its tally, published by the release store of `fc.ready`.
 *   - the transform threads (transform.c, [transform] decode = image), which
 *     run that stage's jobs under its own lock and read the fixed-at-creation
 *     cfg, cat and ar.base;
 *   - the checkpoint stage's drain thread (and seerctl's checkpoint list),
 *     which load tasks.pfs_queued and pf.outlook (prefetch.h),
 *     atomics, through engine_pfs_outlook.
 * Why that is enough is said at each group of fields. */
#ifndef SEERD_ENGINE_INT_H
#define SEERD_ENGINE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "../proto/seer_proto.h"
#include "../src/catalog/catalog.h"
#include "../src/config/config.h"
#include "../src/plan/extent_plan.h"
#include "../src/util/spans.h"
#include "../src/util/iopool.h"
#include "../src/util/ctrl.h"
#include "../src/util/util.h"
#include "../src/net/net.h"
#include "../src/util/pfs_probe.h"
#include "../src/plan/forecast.h"
#include "../src/plan/plan.h"
#include "../src/plan/plan_nopfs.h"
#include "../src/common/ring.h"
#include "../src/sampler/sampler.h"
#include "../src/sampler/sampler_elastic.h"
#include "../src/common/shm.h"
#include "arena.h"
#include "engine.h"
#include "extent.h"
#include "fcast.h"
#include "peer.h"
#include "placement.h"
#include "prefetch.h"
#include "replica.h"
#include "nvme.h"
#include "route.h"
#include "staging.h"
#include "stats.h"
#include "task.h"

/* ---- a trainer's batch slots and session ------------------------------------ */

enum sl_state { SL_FREE = 0, SL_PREP, SL_READY, SL_PUB, SL_REL };

struct tslot {
	uint8_t st;
	uint32_t pending;   /* samples still loading */
	uint32_t pins;      /* NVMe writes still reading this batch's staging */
	int32_t status;     /* first error of the batch */
	uint64_t g;         /* global batch index */
	uint64_t vend;      /* staging mark after this batch's allocation */
};

struct trainer {
	uint32_t rank;
	bool known;           /* connected at least once */
	bool attached;        /* a live session */
	bool resetting;       /* waiting for in-flight reads before a restart */
	bool seek_pending;
	bool done;            /* released the job's last batch */
	uint64_t restart_g;   /* where the stream restarts after the reset */
	bool ring_skipping;   /* a seek dropped the ring's entries before ring_skip... */
	uint32_t ring_skip;   /* ...(SEEK_OK's prod): until the trainer's consumer index
				 reaches it, they are not in its hands (sess_unread) */
	int pending_sock;     /* a reconnect waiting for the reset, or -1 */
	struct seer_msg_hello pending_hello;
	uint64_t pending_start; /* where that reconnect starts */
	pid_t pending_pid;

	uint32_t gen;         /* session generation: stale completions are ignored */
	int sock, efd;
	pid_t pid;
	struct shm_seg out_seg, in_seg;
	struct seer_ctrl_out *co;
	struct seer_ctrl_in *ci;
	struct ring out, rel;
	struct tslot *slots;
	uint32_t nslots;

	uint64_t next_prep, next_pub, tail_g;
	uint64_t resume_g;    /* where a session without a start position starts */
	struct resume_slot *pos; /* its position file, updated on release (resume.c) */
	struct stg stg;       /* its share of the node's staging */
	uint32_t inflight;    /* reads in flight into this trainer's staging */

	uint64_t batches, samples, bytes;
	uint64_t rings;       /* eventfd writes it made to wake us (ring_below) */
	uint32_t no_pfs_run;  /* batches prepared in a row without a PFS read (engine_arm) */
	uint64_t attach_ns;
	uint64_t last_release_ns;
	uint64_t pace_taken, pace_ns; /* batches it had taken, and when that count was first seen */
	bool pace_counted;    /* a prepare after that take was deferred (counted in e->pf.paced) */
	uint64_t last_stall_ns;  /* the trainer's stall counter at its last release */
	bool blocked;         /* could not prepare: waits for a release or take */
	uint32_t held;        /* batches it may hold at once: [job] max_held, or more
				 declared in its HELLO (arena_check_held) */
};

/* ---- tasks: one read (or NVMe write) of one sample ---------------------------- */

/* Who waits for a task: a trainer's batch (rank, session gen, global batch)
 * or a peer daemon's request (node, request id). */
struct waiter {
	bool peer;
	uint32_t a, b;
	uint64_t c;
	uint32_t i;           /* trainer: the sample's index in the batch */
};

enum tk_kind {
	TK_PFS = 0,        /* read from the dataset (the PFS) */
	TK_PEER = 1,       /* fetch from the owning daemon */
	TK_NVME_READ = 2,  /* read this node's NVMe copy, check its checksum */
	TK_NVME_WRITE = 3, /* write bytes already in memory to the NVMe tier */
	TK_EXTENT = 4,     /* a coalesced read: a byte range of one file, its
			      members' samples cut out of it (extent.c) */
};

/* Between task_submit and its completion a task belongs to the I/O thread
 * that runs it (or to the network thread for TK_PEER); the pool's queue lock
 * (or the network thread's event queue) orders the hand-over both ways. */
struct etask {
	struct io_task io;    /* first: the pool hands back io pointers */
	uint32_t id;
	uint32_t sample;
	uint8_t kind;         /* enum tk_kind: where the bytes come from */
	bool to_cache;
	uint32_t ckey;        /* to_cache: the RAM slot (key into cstate) it fills */
	bool to_nvme;         /* TK_PFS: write to the NVMe tier afterwards */
	bool fill;
	bool repl;            /* loads a replica of this node (replica.c) */
	bool repl_bg;         /* ... as a background fill (counted in repl_inflight) */
	uint64_t bg_key;      /* need_g == NEED_NONE: its pool key (background) */
	bool blob;            /* TK_PFS: decode the file into a decoded-cache entry of
				 len bytes (transform.cache = decoded; worker.c) */
	int32_t bounce;       /* bounce slot the bytes live in, or -1 */
	uint64_t nvme_off;    /* TK_NVME_*: offset in the NVMe file */
	uint64_t sum;         /* TK_NVME_*: xxh64 of the sample */
	struct waiter pin;    /* TK_NVME_WRITE: the batch whose staging it reads */
	struct etask *followers; /* NVMe reads waiting for this load's copy */
	struct etask *next_follower;
	int32_t stage_rank;   /* staging owner, or -1 */
	uint64_t dst_off, len; /* where the bytes land: arena offset (staging span,
				  RAM slot or bounce slot) and length */
	uint64_t need_g;      /* global batch that needs it (priority) */
	uint32_t nw, capw;
	struct waiter *w;
	struct waiter w_inline[2];
	uint32_t attempts;
	uint64_t pfs_read;    /* TK_PFS: bytes catalog_read read from the files, all attempts */
	char err[SEER_ERRMSG_MAX];
	struct etask *free_next;
	/* coalesced reads (extent.c) */
	struct etask *ext;    /* a member: the extent that reads it, until it ends */
	struct etask **mem;   /* TK_EXTENT: its members (their samples, destinations,
				 statuses and messages) */
	uint32_t nmem;
	uint32_t file;        /* TK_EXTENT: bytes [foff, foff + len) of this file */
	uint64_t foff;
	uint64_t xoff;        /* TK_EXTENT, xpool: its buffer, at e->ext.base + xoff */
	bool xpool;           /* TK_EXTENT: buffer from the extent region (else its own) */
	bool single;          /* TK_PFS: never coalesced (its extent failed) */
	bool in_sub;          /* submitted, not yet handed to the pool */
	bool cut;             /* its bytes were cut from an extent */
};

/* need_g of a task no batch waits for yet (a background replica fill): it
 * is queued at its bg_key, after every read a batch needs. */
#define NEED_NONE UINT64_MAX

#define TASK_CHUNK 1024
#define SEER_MAX_WORLD (1u << 20) /* trainers per job */

/* The engine's own bookkeeping (engine.c; the dispatcher's): its thread,
 * the machine and where the daemon's threads run, the warnings it times,
 * the first fatal message. */
struct engine_self {
	pthread_t dispatcher;    /* the thread running engine_work */
	bool repin_due;          /* a trainer came: place the threads again (engine_work) */
	char topo_desc[512];
	char pin_desc[160];
	double t_last_progress;
	double t_last_wait_warn;
	double t_last_retry_warn;
	uint64_t retries_unreported;
	char last_retry[SEER_ERRMSG_MAX];
	char fatal[SEER_ERRMSG_MAX];
};

/* Position files ([job] resume = auto; resume.c, the dispatcher's). */
struct resume_state {
	struct resume_files *files; /* NULL until resume_begin */
	uint32_t run_id;         /* this run's id in the position files */
};

/* ---- the engine ---------------------------------------------------------------- */

struct engine {
	/* == Fixed at creation: written by engine_create before the I/O threads
	 * start (pthread_create orders that; tasks.pool_started and self.dispatcher
	 * are set just after, and only the dispatcher reads them) and before the network
	 * thread exists; read-only afterwards. The I/O threads read exactly cfg
	 * (retries, retry_backoff_ms), cat (their readers), tasks.reader_fds, ar.base,
	 * nvme (its pread/pwrite, nvme.h), and xf to hand a decode to the
	 * transform pool (transform.c, under its lock), and the extent region
	 * (ext.base, extent.h). The network thread reads cat, node, ar.base,
	 * ar.cache_base and xf's fixed cached lengths (peer_lookup). */
	const struct seer_config *cfg;
	struct catalog *cat;
	uint32_t node, nnodes;
	int epfd;
	struct arena ar;         /* the shared segment and its parts (arena.h) */
	struct nvme_tier *nvme;  /* the NVMe tier (nvme.h): I/O threads call its pread/pwrite */
	bool skip_corrupt;       /* dataset.on_corrupt = skip */
	bool nopfs;              /* cache.policy = nopfs */
	struct topo *topo;
	struct xfs *xf;          /* the transform stage (transform.c), NULL for file
				    bytes; its own threads and lock, see there */

	/* == Shared through atomics. */
	_Atomic bool stopping;   /* dispatcher stores; I/O threads load it between
				    retries (a hint: relaxed is enough) */
	/* The plan (tier/owner/off) is written by the dispatcher before the
	 * release store of plan_published and not changed until engine_destroy,
	 * which runs after net_destroy joined the network thread. */
	_Atomic bool plan_published;
	struct plan plan;
	/* Per RAM key (see route.h) / NVMe sample: CS_ABSENT, CS_READY, or the
	 * loading task. The network thread acquire-loads a RAM key's state
	 * (only after plan_published, and only for samples the plan puts in
	 * RAM here); READY is release-stored after the bytes landed and is
	 * terminal for RAM keys, so the bytes it then sends stay put. The array
	 * is reallocated only before plan_published (nopfs keys). Every other
	 * access is the dispatcher's. */
	_Atomic uint32_t *cstate;

	/* == Everything below: the dispatcher's alone. */

	/* job shape (placement.c) */
	struct sampler_shape sh;
	uint32_t world;
	bool shape_ready;
	uint32_t nslots;         /* batch slots per trainer */

	/* the job's resume plan (jobrec.c): where it starts, the epoch an
	 * elastic resume re-shards, and the record it was made from */
	struct sampler_resume rs;
	struct sampler_timeline tl;  /* global batch numbers (g) <-> (epoch, step) */
	uint8_t *plan_rec;       /* that record, encoded (NULL: a fresh job's plan) */
	size_t plan_rec_len;
	uint32_t plan_key;       /* what every node's plan must share (0: plain) */

	/* position files (resume.c): the files, this run's id in them */
	struct resume_state resume;

	/* placement (placement.c; the rest of its state: placement.h) */
	bool plan_ready;
	bool roll_dirty;         /* local ranks changed before the map */
	uint32_t *rank_node;     /* world entries */
	struct place pl;

	/* replicas (replica.h): the set placement.c plans, replica.c fills */
	struct repl repl;

	/* trainers (session.c, prefetch.c) */
	struct trainer *tr;      /* world entries once known */
	bool draining;

	/* fill and pacing (prefetch.h) */
	struct prefetch pf;

	/* tasks (task.h): the task pool, and the I/O pool, whose own locks
	 * order the hand-over of a task to an I/O thread and back */
	struct tasks tasks;

	/* coalesced reads (extent.h) */
	struct ext ext;

	/* peers (peer.h): the data plane, bounce slots, deferred requests */
	struct peers peers;

	/* statistics (stats.h): counters, estimates, the step series */
	struct stats st;

	/* forecast (fcast.h): the forecast thread's tally */
	struct fcast fc;

	/* the engine's own: its thread, where threads run, warnings, fatal */
	struct engine_self self;
};

/* The control-region slot of batch slot idx (its descriptors follow it). */
static inline struct seer_wire_slot *trainer_wslot(struct trainer *t, uint32_t idx)
{
	return (struct seer_wire_slot *)((uint8_t *)t->co + t->co->slots_off +
					 t->co->slot_stride * idx);
}

/* ---- reads every stage makes (inline: reading the published plan, the
 * arena's layout or a session's rings needs no call into the file that
 * owns them, so no stage depends on the planner, the arena or the sessions
 * for them) ---------------------------------------------------------------- */

/* placement.c's plan, as tier routing (route.h) reads it now. */
static inline bool place_peer_ok(void *ctx, uint32_t node)
{
	const struct engine *e = ctx;
	return !net_peer_suspect(e->peers.net, node);
}

static inline struct route_view place_view(const struct engine *e)
{
	return (struct route_view){
		.node = e->node, .nsamples = e->cat->nsamples, .tier = e->plan.tier,
		.owner = e->plan.owner, .nvme_ok = nvme_on(e->nvme), .np = e->nopfs ? &e->pl.np : NULL,
		.local_idx = e->pl.local_idx, .peer_ok = e->peers.net ? place_peer_ok : NULL,
		.peer_ctx = (void *)e, .repl_idx = e->repl.on ? e->repl.set.idx : NULL,
		.repl_tier = e->repl.on ? e->repl.set.tier : NULL,
	};
}

static inline bool place_is_replica(const struct engine *e, uint32_t s)
{
	return e->repl.on && s < e->repl.set.n && e->repl.set.idx[s] != 0;
}

static inline uint64_t place_local_off(const struct engine *e, uint32_t s)
{
	return plan_locate(&e->plan, e->repl.on ? &e->repl.set : NULL, e->node, s).off;
}

static inline bool place_local_ram(const struct engine *e, uint32_t s)
{
	struct route_view v = place_view(e);
	return route_local_ram(&v, s);
}

static inline bool place_local_nvme(const struct engine *e, uint32_t s)
{
	struct route_view v = place_view(e);
	return route_local_nvme(&v, s);
}

/* arena.c's layout: a RAM slot's offset, a staged sample's bytes. */
/* Staging bytes a sample of `len` bytes reserves: NVMe transfers need
 * aligned buffers and lengths (O_DIRECT), hence the slack. */
static inline uint64_t arena_stage_bytes(const struct engine *e, uint64_t len, bool nvme)
{
	return nvme ? ALIGN_UP(len, (uint64_t)nvme_align(e->nvme)) + nvme_align(e->nvme)
		    : ALIGN_UP(len, (uint64_t)PLAN_RAM_ALIGN);
}

static inline uint64_t arena_key_off(const struct engine *e, uint32_t key)
{
	uint64_t n = e->cat->nsamples;
	/* key < n: the sample's slot, owned or replica (route.h) */
	return e->ar.cache_base + (key < n ? place_local_off(e, key) : e->pl.np.off[key - n]);
}

/* A session's rings (session.c): wake the trainer; its first batch not
 * released; batches published to it and not taken yet (its consumer index
 * is a hint, clamped; entries a seek dropped are not counted). */
static inline void sess_doorbell(struct trainer *t)
{
	atomic_fetch_add_explicit(&t->co->doorbell, 1, memory_order_release);
	/* pairs with the trainer's fence between setting `waiting` and its
	 * last look at the ring before it sleeps */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&t->ci->waiting, memory_order_relaxed))
		futex_wake_all(&t->co->doorbell);
}

static inline uint64_t sess_first_unreleased(const struct trainer *t)
{
	for (uint64_t g = t->tail_g; g < t->next_pub; g++)
		if (t->slots[g & (t->nslots - 1)].st == SL_PUB)
			return g;
	return t->next_pub;
}

static inline uint32_t sess_unread(const struct trainer *t)
{
	uint32_t prod = atomic_load_explicit(&t->co->prod, memory_order_relaxed);
	uint32_t cons = atomic_load_explicit(&t->ci->cons, memory_order_relaxed);
	/* After a seek the trainer moves its consumer index past the entries
	 * the seek dropped only once it has read SEEK_OK, and tells nobody:
	 * counted as in its hands, they held its next batches back and let an
	 * idle seerd sleep on ring_below while it waited on an empty ring, until
	 * the 1 s timer (issue 28, finding 7). */
	uint32_t behind = t->ring_skipping ? t->ring_skip - cons : 0;
	if (behind != 0 && behind <= t->nslots)
		cons = t->ring_skip;
	return ctrl_unread(prod, cons, t->nslots);
}

/* ---- the stages, in the order a sample flows through them ---------------------
 * Every function below runs on the dispatcher unless it says otherwise.
 * The contract of each is at its definition; the one-liners here map them. */

/* engine.c: the loop, creation, the engine's fds and threads */
static inline void engine_ep_add(struct engine *e, int fd, uint64_t tag)
{
	epoll_watch(e->epfd, fd, tag);
}
static inline void engine_ep_del(struct engine *e, int fd)
{
	epoll_ctl(e->epfd, EPOLL_CTL_DEL, fd, NULL);
}
void engine_repin(struct engine *e);          /* place the daemon's threads again */

/* placement.c: the job's shape and the plan */
int place_shape_init(struct engine *e, uint32_t world, const struct sampler_record *rec,
		     bool from_map, char *err, size_t errlen);
void place_shape_free(struct engine *e);
/* another world size: 0 when it may be decided again, else why not */
int place_can_reshape(const struct engine *e, char *why, size_t whylen);
void place_drop_shape(struct engine *e);      /* then forget the old one */

/* jobdef.c: a trainer's declared job against seerd's (0, or SEER_ECONFIG and why) */
int jobdef_take(struct engine *e, const struct seer_msg_hello *h, pid_t pid, char *err,
		size_t errlen);
void place_plan(struct engine *e);            /* plan, publish, split staging */

/* arena.c: the shared segment and its parts */
uint64_t arena_layout(struct engine *e);      /* returns the arena's size */
int arena_create(struct engine *e, uint64_t size, char *err, size_t errlen);
int arena_check_memory(const struct engine *e, uint64_t size, char *err, size_t errlen);
void arena_split_staging(struct engine *e);
void arena_publish_share(const struct engine *e, struct trainer *t);
void arena_prefill_staging(struct engine *e); /* at start, when staging will be used */
void arena_prefill_cache(struct engine *e);   /* at start: this node's share of the cache */
int arena_check_staging(struct engine *e, char *err, size_t errlen);
/* A trainer declared at connect that it may hold `held` batches at once
 * (more than [job] max_held): 0 when its batch slots and its staging share
 * serve that many, else -ENOSPC with err saying what to raise. */
int arena_check_held(struct engine *e, uint32_t held, char *err, size_t errlen);
/* Trainer t's staging ring sized for the batches it may hold (t->held),
 * within its share: at a session's start, before its control region is made
 * (no read is in flight into its staging then). */
void arena_trainer_ring(struct engine *e, struct trainer *t);

/* session.c: trainer sessions (engine_attach is in engine.h) */
void sess_on_sock(struct engine *e, struct trainer *t);
void sess_detach(struct engine *e, struct trainer *t, bool evicted, const char *why);
void sess_evict(struct engine *e, struct trainer *t, const char *why);
void sess_finish_reset(struct engine *e, struct trainer *t); /* last staged read landed */
void sess_close(struct engine *e, struct trainer *t);

/* prefetch.c: each trainer's batches, from sampling to release; fill */
bool pf_can_prepare(struct engine *e, struct trainer *t);
bool pf_prepare(struct engine *e, struct trainer *t);    /* false: staging is full */
void pf_fill(struct engine *e);
/* Publish the PFS reads the plan makes within [checkpoint] drain_window_s
 * ahead of the trainers (pf.outlook) for the checkpoint drain */
void pf_outlook(struct engine *e);
void pf_sample_done(struct engine *e, const struct waiter *w, int status, const char *err);
bool pf_retarget_corrupt(struct engine *e, struct etask *tk);
void pf_publish(struct engine *e, struct trainer *t);
/* t's releases taken in: NULL, or why its release ring is bad (the
 * caller evicts it, sess_evict) */
const char *pf_releases(struct engine *e, struct trainer *t);
void pf_reclaim(struct trainer *t);
void pf_check_held(struct engine *e, struct trainer *t); /* held batches block it: tell it */

/* ram_load.c: RAM-cache loads */
struct etask *ram_load(struct engine *e, uint32_t key, uint32_t s, uint64_t g, bool fill);
struct etask *ram_load_new(struct engine *e, uint32_t key, uint32_t s, bool fill); /* not submitted */
void ram_load_done(struct engine *e, struct etask *tk, int status);

/* task.c: tasks, submission and completion */
struct etask *task_new(struct engine *e);
/* Make n tasks ready to use (their memory touched now, not in an epoch). */
void task_reserve(struct engine *e, uint64_t n);
struct etask *task_get(struct engine *e, uint32_t id);
void task_wait(struct etask *t, uint32_t rank, uint32_t gen, uint64_t g, uint32_t i);
void task_wait_w(struct etask *t, struct waiter w);
void task_submit(struct engine *e, struct etask *t, uint64_t g); /* g 0: now;
							NEED_NONE: t->bg_key */
void task_need(struct engine *e, struct etask *tk, uint64_t g);  /* at least as urgent */
void task_flush(struct engine *e);
void task_completions(struct engine *e);
void task_finish(struct engine *e, struct etask *tk, int status);
void task_free(struct engine *e, struct etask *t);
void task_free_all(struct engine *e);

/* complete.c: a finished task's results to the stages that own them
 * (installed as e->tasks.done; task_finish calls it) */
void complete_task(struct engine *e, struct etask *tk, int status);
/* A read or transform job no longer writes into t's staging. */
void complete_unstaged(struct engine *e, struct trainer *t);

/* extent.c: coalesced reads */
void ext_init(struct engine *e);
void ext_free(struct engine *e);
void ext_flush(struct engine *e);             /* coalesce e->sub before it goes to the pool */
void ext_done(struct engine *e, struct etask *x, int status);

/* worker.c: the I/O threads' side (run on the I/O threads) */
void *worker_init(void *ctx, unsigned idx);
void worker_fini(void *tls, void *ctx);
void worker_exec(struct io_task *io, void *tls, void *ctx);

/* nvme_load.c: the NVMe tier's part in loads (the tier itself: nvme.h) */
void nvme_load_copy(struct engine *e, struct etask *tk);
struct etask *nvme_load_claim(struct engine *e, struct etask *tk, uint32_t s);
void nvme_load_done(struct engine *e, struct etask *tk, int status);
void nvme_load_write(struct engine *e, struct etask *tk);
void nvme_load_written(struct engine *e, struct etask *tk, int status);
void nvme_load_read_failed(struct engine *e, struct etask *tk, int status);
void nvme_load_release(struct engine *e, struct etask *tk, bool ok);

/* peer.c: serving other nodes, and their events */
void peer_bounce_init(struct engine *e);
void peer_free(struct engine *e);
void peer_events(struct engine *e);
void peer_request(struct engine *e, uint32_t peer, uint64_t req_id, uint32_t s, uint64_t len);
void peer_replay_early(struct engine *e);
void peer_answer(struct engine *e, const struct etask *tk, const struct waiter *w, int status);
void peer_bounce_unref(struct engine *e, int32_t b);
/* the network thread's lookup (src/net/net.h): 1 with *src set when s is in RAM */
int peer_lookup(void *ctx, uint32_t peer, uint32_t s, uint64_t len, const void **src);

/* transform.c: decoded, augmented tensors ([transform] decode = image).
 * Everything is a no-op or the file-bytes answer when e->xf is NULL. */
struct json_t;
struct xfs;
/* What the transform stage hands back, through handlers the engine gives it:
 * a sample's tensor done (0) or failed for the batch waiting for it, and a
 * job no longer writing into trainer t's staging. */
struct xfs_events {
	void (*sample_done)(struct engine *e, const struct waiter *w, int status, const char *err);
	void (*unstaged)(struct engine *e, struct trainer *t);
};
int xfs_create(struct engine *e, const struct xfs_events *ev, char *err,
	       size_t errlen);                        /* before the arena and I/O threads */
void xfs_stop(struct engine *e);      /* threads joined; waiting I/O threads released */
void xfs_destroy(struct engine *e);
void xfs_log(const struct engine *e);
int xfs_event_fd(const struct engine *e);
unsigned xfs_threads(const struct engine *e, pthread_t *out); /* out may be NULL */
void xfs_placed(struct engine *e, unsigned pus); /* the daemon's threads have pus CPUs (0: all) */
bool xfs_blob(const struct engine *e, uint32_t s);            /* tiers hold s decoded */
uint64_t xfs_src_len(const struct engine *e, uint32_t s);     /* bytes the tiers hold for s */
const uint64_t *xfs_plan_lengths(const struct engine *e);     /* decoded: per sample, else NULL */
uint64_t xfs_cached_total(const struct engine *e);
uint64_t xfs_cached_max(const struct engine *e);
uint64_t xfs_tensor_bytes(const struct engine *e, uint32_t n); /* staging of a batch tensor */
uint32_t xfs_ntypes(const struct engine *e);                  /* types it adds to the arena's */
void xfs_type(const struct engine *e, struct seer_wire_type *t);
uint64_t xfs_slot_begin(struct engine *e, struct seer_wire_slot *ws, uint32_t n, uint64_t off);
void xfs_describe(const struct engine *e, const struct seer_wire_slot *ws,
		  struct seer_wire_sample *d, uint32_t i);
void xfs_ram_ready(struct engine *e, struct trainer *t, struct tslot *sl, uint32_t i, uint32_t key,
		   uint32_t s);
void xfs_after_read(struct engine *e, const struct etask *tk, const struct waiter *w);
void xfs_completions(struct engine *e);
struct json_t *xfs_status_json(const struct engine *e);
/* I/O thread: the file at enc into tk's decoded-cache entry at dst */
int xfs_decode_blob(const struct engine *e, struct etask *tk, const void *enc, size_t len,
		    uint8_t *dst);

/* stats.c: the engine's side (the rest: stats.h) */
struct epoch_stats *stats_epoch(struct engine *e, uint64_t epoch);
void stats_observe(struct engine *e, int src, double seconds, uint64_t bytes);
void stats_read(struct engine *e, int src, uint64_t bytes);
void stats_delivered(struct engine *e, uint64_t epoch, uint64_t bytes, uint32_t n);
void stats_step(struct engine *e, struct trainer *t, uint64_t g);
/* Epochs every local trainer finished: logged, timed. True when every
 * local trainer is known (the forecast of the epoch now beginning may be
 * noted: fcast_note). */
bool stats_check_epochs(struct engine *e);

/* replica.c: this node's replicas, filled in the background */
void repl_init(struct engine *e);             /* after the replica set is planned */
void repl_free(struct engine *e);
void repl_fill(struct engine *e);             /* background fills, lowest priority */
bool repl_fetch(struct engine *e, struct etask *tk); /* a read that loads a replica */
void repl_landed(struct engine *e, struct etask *tk, int status);

/* fcast.c: this node's forecast against the measured rates */
void fcast_start(struct engine *e);           /* after the plan: the tally's thread */
void fcast_stop(struct engine *e);            /* join it (before the plan goes) */
void fcast_note(struct engine *e);            /* the forecast of the epoch beginning */

/* jobrec.c: the job's resume plan and the trainers' checkpoint records */
struct sampler_job jobrec_job(const struct engine *e, uint32_t world);
int jobrec_decode(struct engine *e, const uint8_t *buf, size_t len, struct sampler_record *out,
		  char *msg, size_t msglen);
int jobrec_plan(struct engine *e, const struct sampler_record *rec, char *msg, size_t msglen);
void jobrec_free(struct engine *e);
int jobrec_start(struct engine *e, const struct sampler_record *rec, uint64_t *g, char *msg,
		 size_t msglen);
uint32_t jobrec_batch(struct engine *e, uint32_t rank, uint64_t g, uint32_t *ids);
void jobrec_pos(const struct engine *e, uint64_t g, uint64_t *epoch, uint64_t *step);

/* resume.c: position files ([job] resume = auto) */
int resume_load(struct engine *e, struct sampler_record **rec, uint64_t **starts, char *msg,
		size_t msglen);
void resume_begin(struct engine *e);
void resume_note(struct engine *e, struct trainer *t);
void resume_end(struct engine *e, bool complete);
void resume_sync(struct engine *e);

#endif /* SEERD_ENGINE_INT_H */
