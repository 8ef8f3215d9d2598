/* The engine's insides, shared by its stage files (daemon/README-style map
 * in docs/design.md, "The daemon, file by file"). server.c and main.c see
 * only engine.h.
 *
 * Threads. Three kinds of thread touch the engine:
 *   - the dispatcher (the event loop of server.c), which runs every function
 *     of the stage files except the two below, and owns every field not
 *     marked otherwise;
 *   - the I/O threads (src/iopool.c), which run worker.c: each works on the
 *     one task the pool handed it and reads the "fixed at creation" fields
 *     listed below (never a dispatcher-owned one);
 *   - the network thread (src/net_fabric.c, several nodes only), which calls
 *     peer_lookup (peer.c): it reads the plan after `plan_published` and a
 *     sample's RAM state in `cstate`, both through acquire loads.
 * Why that is enough is said at each group of fields. */
#ifndef SEERD_ENGINE_INT_H
#define SEERD_ENGINE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "../proto/seer_proto.h"
#include "../src/catalog.h"
#include "../src/config.h"
#include "../src/extent.h"
#include "../src/iopool.h"
#include "../src/net.h"
#include "../src/plan.h"
#include "../src/plan_nopfs.h"
#include "../src/ring.h"
#include "../src/sampler.h"
#include "../src/shm.h"
#include "engine.h"
#include "route.h"
#include "staging.h"

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
	int pending_sock;     /* a reconnect waiting for the reset, or -1 */
	struct seer_msg_hello pending_hello;
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
	uint64_t resume_g;
	struct stg stg;       /* its share of the node's staging */
	uint32_t inflight;    /* reads in flight into this trainer's staging */

	uint64_t batches, samples, bytes;
	uint64_t attach_ns;
	uint64_t last_release_ns;
	uint64_t last_stall_ns;  /* the trainer's stall counter at its last release */
	bool blocked;         /* could not prepare: waits for a release or take */
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
	uint64_t pfs_read;    /* TK_PFS: bytes cat_read read from the files, all attempts */
	char err[SEER_ERRMSG_MAX];
	struct etask *free_next;
	/* coalesced reads (extent.c) */
	struct etask *ext;    /* a member: the extent that reads it, until it ends */
	struct etask **mem;   /* TK_EXTENT: its members (their samples, destinations,
				 statuses and messages) */
	uint32_t nmem;
	uint32_t file;        /* TK_EXTENT: bytes [foff, foff + len) of this file */
	uint64_t foff;
	bool single;          /* TK_PFS: never coalesced (its extent failed) */
	bool in_sub;          /* submitted, not yet handed to the pool */
	bool cut;             /* its bytes were cut from an extent */
};

#define TASK_CHUNK 1024
#define SEER_MAX_WORLD (1u << 20) /* trainers per job */
#define NVME_ALIGN 4096ull

/* ---- statistics ------------------------------------------------------------------ */

/* Per-epoch counters. Deliveries (samples, bytes, ram_*) count in the epoch
 * of the batch. Reads from a source (pfs_*, nvme_*, peer_*, served_*, ...)
 * count in the epoch the job was in when they completed: the oldest epoch
 * not yet finished by every local trainer, which is what a PFS monitor sees
 * (trainers in lockstep, as under DDP, make both the same). */
struct epoch_stats {
	uint64_t samples, bytes;             /* delivered */
	uint64_t ram_samples, ram_bytes;     /* served from the RAM cache */
	uint64_t pfs_samples, pfs_bytes;     /* read from the PFS */
	uint64_t peer_samples, peer_bytes;   /* fetched from other daemons */
	uint64_t nvme_samples, nvme_bytes;   /* read from the local NVMe tier */
	uint64_t nvme_written, nvme_corrupt;
	uint64_t served_samples, served_bytes; /* sent to other daemons */
	uint64_t fallbacks;                  /* peer fetches that fell back to the PFS */
	uint64_t skipped;                    /* corrupt samples substituted (on_corrupt = skip) */
	uint64_t retries;                    /* failed reads that were tried again */
	uint64_t pfs_reads;                  /* reads of the PFS: samples read alone + extents */
	uint64_t extents;                    /* coalesced reads */
	uint64_t extent_samples;             /* samples cut from them */
	uint64_t extent_bytes;               /* bytes they read */
	uint64_t extent_useful;              /* bytes of the samples cut (the rest was bridged) */
	uint64_t failed;
	double t_done;                       /* when the last local trainer finished it */
};

/* Running estimates of a source, from completed reads (no tables). */
struct src_est {
	double lat_s;      /* EWMA of one read's service time */
	double bps;        /* EWMA of one read's bytes / service time */
	uint64_t n;
};
enum { SRC_PFS, SRC_NVME, SRC_PEER, SRC_COUNT };

/* A peer's request the dispatcher answers later (before the plan, or while
 * every bounce slot is taken). */
struct deferred_req {
	uint32_t peer, sample;
	uint64_t req_id, len;
};

/* ---- the engine ---------------------------------------------------------------- */

struct engine {
	/* == Fixed at creation: written by engine_create before the I/O threads
	 * start (pthread_create orders that; pool_started and dispatcher are set
	 * just after, and only the dispatcher reads them) and before the network
	 * thread exists; read-only afterwards. The I/O threads read exactly cfg
	 * (retries, retry_backoff_ms), cat (their readers), abase, nvme_fd,
	 * nvme_direct and nvme_align (worker.c); nvme_fd stays open, even when
	 * the tier is disabled, until engine_destroy has stopped the pool. The
	 * network thread reads cat, node, abase and cache_base (peer_lookup). */
	const struct seer_config *cfg;
	struct catalog *cat;
	uint32_t node, nnodes;
	int epfd;
	struct shm_seg arena;
	uint8_t *abase;
	uint64_t cache_base, cache_cap, stage_base, stage_cap;
	uint64_t bounce_base, bounce_size; /* bounce slots: NVMe samples sent to peers */
	uint32_t nbounce;
	int nvme_fd;             /* one file per node, unlinked as soon as it is open */
	bool nvme_direct;
	uint32_t nvme_align;     /* slot and transfer alignment (O_DIRECT's, or 64) */
	uint64_t nvme_cap;
	bool skip_corrupt;       /* dataset.on_corrupt = skip */
	bool nopfs;              /* cache.policy = nopfs */
	struct iopool pool;      /* its own locks: submit/take from the dispatcher */
	bool pool_started;
	pthread_t dispatcher;    /* the thread running engine_work */
	struct topo *topo;
	char topo_desc[512];

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
	struct smp_shape sh;
	struct smp_cache smp;
	uint32_t world;
	uint64_t end;            /* epochs * bpe */
	uint64_t default_start;  /* from [job] resume */
	bool shape_ready;
	uint32_t nslots;         /* batch slots per trainer */
	uint32_t *ids;           /* batch scratch: sample ids */
	uint32_t *keys;          /* batch scratch: RAM keys (ROUTE_RAM) */
	uint8_t *routes;         /* batch scratch: enum route_src */

	/* placement (placement.c) */
	bool plan_ready;
	struct plan_cap *caps;   /* per node */
	bool roll_dirty;         /* local ranks changed before the map */
	uint64_t first_epoch;
	uint32_t *rank_node;     /* world entries */
	uint32_t nlocal;
	uint32_t *local_ranks;
	uint32_t *local_idx;     /* rank -> index among the local ranks */
	struct plan_nopfs np;    /* cache.policy = nopfs: each local trainer's copies */
	uint64_t local_cached_bytes;
	uint64_t cache_planned, cache_loaded, cache_loaded_bytes;
	uint8_t *bad;            /* samples that failed their format checks (skip policy) */

	/* trainers (session.c, prefetch.c) */
	struct trainer *tr;      /* world entries once known */
	bool draining;

	/* fill (prefetch.c) */
	uint64_t fill_g;
	uint32_t fill_r;
	uint32_t fill_inflight;
	uint64_t fill_left;

	/* tasks (task.c) */
	struct etask **chunks;
	uint32_t nchunks;
	struct etask *free_tasks;
	struct io_task **sub;
	uint32_t nsub, capsub;

	/* coalesced reads (extent.c) */
	bool coalesce;           /* prefetch.coalesce and a format that cuts samples */
	uint32_t *pfs_q;         /* per sample: id + 1 of a PFS read of it not yet known
				    to have started (absorbable by an extent), or 0 */
	struct etask **ext_wait; /* extents waiting for extent memory */
	uint32_t next_wait, capext_wait;
	uint64_t ext_mem, ext_mem_peak; /* extent bytes in flight, at most */
	struct ext_cand *ext_c;  /* planning scratch, per candidate */
	bool *ext_take;
	struct etask **ext_tk;   /* the candidate's queued read, or NULL */
	uint32_t ext_cap;
	struct etask **ext_todo; /* flush scratch */
	uint32_t ext_todo_cap;

	/* NVMe tier (nvme.c) */
	bool nvme_ok;            /* false once disabled: its samples come from the PFS */
	uint64_t *nvme_sum;      /* per sample, valid when READY */
	uint64_t nvme_loaded, nvme_loaded_bytes, nvme_planned;

	/* peers (peer.c) */
	struct net *net;
	struct deferred_req *early;   /* requests that came before the plan */
	uint32_t nearly, capearly;
	int32_t *bounce_free;    /* stack of free slot indices */
	uint32_t nbounce_free;
	uint32_t *bounce_refs;
	struct deferred_req *bwait;   /* requests waiting for a bounce slot */
	uint32_t nbwait, capbwait;

	/* statistics (stats.c) */
	struct epoch_stats *es;
	uint64_t nes;            /* allocated */
	uint64_t nes_used;       /* epochs that have any activity */
	uint64_t epochs_done;
	struct src_est src[SRC_COUNT];
	double step_s;           /* EWMA of a trainer's time per batch */
	/* per-step series for the stats file: every `step_stride`-th global
	 * batch, when the last local trainer released it and the trainers'
	 * summed wait for it */
	uint64_t step_stride, nsteps;
	double *step_done;
	float *step_stall;
	uint16_t *step_count;
	double t_plan;
	double t_start;

	/* reporting (engine.c) */
	char pin_desc[160];
	double t_last_progress;
	double t_last_wait_warn;
	double t_last_retry_warn;
	uint64_t retries_unreported;
	char last_retry[SEER_ERRMSG_MAX];
	double t_last_resume_save;
	char fatal[SEER_ERRMSG_MAX];
};

/* The control-region slot of batch slot idx (its descriptors follow it). */
static inline struct seer_wire_slot *trainer_wslot(struct trainer *t, uint32_t idx)
{
	return (struct seer_wire_slot *)((uint8_t *)t->co + t->co->slots_off +
					 t->co->slot_stride * idx);
}

/* ---- the stages, in the order a sample flows through them ---------------------
 * Every function below runs on the dispatcher unless it says otherwise.
 * The contract of each is at its definition; the one-liners here map them. */

/* engine.c: the loop, creation, the engine's fds and threads */
void engine_ep_add(struct engine *e, int fd, uint64_t tag);
void engine_ep_del(struct engine *e, int fd);
void engine_repin(struct engine *e);          /* place the daemon's threads again */

/* placement.c: the job's shape and the plan */
int place_shape_init(struct engine *e, uint32_t world, char *err, size_t errlen);
void place_shape_free(struct engine *e);
void place_plan(struct engine *e);            /* plan, publish, split staging */
struct route_view place_view(const struct engine *e); /* what routing reads, now */
bool place_local_ram(const struct engine *e, uint32_t s);
bool place_local_nvme(const struct engine *e, uint32_t s);

/* arena.c: the shared segment and its parts */
uint64_t arena_layout(struct engine *e);      /* returns the arena's size */
int arena_create(struct engine *e, uint64_t size, char *err, size_t errlen);
void arena_split_staging(struct engine *e);
int arena_check_staging(struct engine *e, char *err, size_t errlen);
uint64_t arena_key_off(const struct engine *e, uint32_t key);   /* a RAM slot's offset */
uint64_t arena_stage_bytes(const struct engine *e, uint64_t len, bool nvme);

/* session.c: trainer sessions (engine_attach is in engine.h) */
void sess_on_sock(struct engine *e, struct trainer *t);
void sess_detach(struct engine *e, struct trainer *t, bool evicted, const char *why);
void sess_evict(struct engine *e, struct trainer *t, const char *why);
void sess_finish_reset(struct engine *e, struct trainer *t); /* last staged read landed */
void sess_close(struct engine *e, struct trainer *t);
void sess_doorbell(struct trainer *t);
uint64_t sess_first_unreleased(const struct trainer *t);

/* prefetch.c: each trainer's batches, from sampling to release; fill */
bool pf_can_prepare(struct engine *e, struct trainer *t);
bool pf_prepare(struct engine *e, struct trainer *t);    /* false: staging is full */
struct etask *pf_ram_load(struct engine *e, uint32_t key, uint32_t s, uint64_t g, bool fill);
struct etask *pf_ram_new(struct engine *e, uint32_t key, uint32_t s, bool fill); /* not submitted */
void pf_fill(struct engine *e);
void pf_ram_loaded(struct engine *e, struct etask *tk, int status);
void pf_sample_done(struct engine *e, const struct waiter *w, int status, const char *err);
bool pf_retarget_corrupt(struct engine *e, struct etask *tk);
void pf_publish(struct engine *e, struct trainer *t);
void pf_releases(struct engine *e, struct trainer *t);
void pf_reclaim(struct trainer *t);

/* task.c: tasks, submission and completion */
struct etask *task_new(struct engine *e);
struct etask *task_get(struct engine *e, uint32_t id);
void task_wait(struct etask *t, uint32_t rank, uint32_t gen, uint64_t g, uint32_t i);
void task_wait_w(struct etask *t, struct waiter w);
void task_submit(struct engine *e, struct etask *t, uint64_t g); /* g 0: now */
void task_need(struct engine *e, struct etask *tk, uint64_t g);  /* at least as urgent */
void task_flush(struct engine *e);
void task_completions(struct engine *e);
void task_finish(struct engine *e, struct etask *tk, int status);
void task_free(struct engine *e, struct etask *t);
void task_free_all(struct engine *e);

/* extent.c: coalesced reads */
void ext_init(struct engine *e);
void ext_free(struct engine *e);
void ext_flush(struct engine *e);             /* coalesce e->sub before it goes to the pool */
void ext_done(struct engine *e, struct etask *x, int status);

/* worker.c: the I/O threads' side (run on the I/O threads) */
void *worker_init(void *ctx, unsigned idx);
void worker_fini(void *tls, void *ctx);
void worker_exec(struct io_task *io, void *tls, void *ctx);

/* nvme.c: the NVMe tier */
void nvme_open(struct engine *e);
void nvme_close(struct engine *e);
void nvme_disable(struct engine *e, const char *why);
uint64_t nvme_io_len(const struct engine *e, uint64_t len); /* any thread */
void nvme_read_copy(struct engine *e, struct etask *tk);
struct etask *nvme_claim(struct engine *e, struct etask *tk, uint32_t s);
void nvme_load_done(struct engine *e, struct etask *tk, int status);
void nvme_write_after(struct engine *e, struct etask *tk);
void nvme_write_done(struct engine *e, struct etask *tk, int status);
void nvme_read_failed(struct engine *e, struct etask *tk, int status);
void nvme_release_followers(struct engine *e, struct etask *tk, bool ok);

/* peer.c: serving other nodes, and their events */
void peer_bounce_init(struct engine *e);
void peer_free(struct engine *e);
void peer_events(struct engine *e);
void peer_request(struct engine *e, uint32_t peer, uint64_t req_id, uint32_t s, uint64_t len);
void peer_replay_early(struct engine *e);
void peer_answer(struct engine *e, const struct etask *tk, const struct waiter *w, int status);
void peer_bounce_unref(struct engine *e, int32_t b);
/* the network thread's lookup (src/net.h): 1 with *src set when s is in RAM */
int peer_lookup(void *ctx, uint32_t peer, uint32_t s, uint64_t len, const void **src);

/* stats.c: counters and estimates (status.c renders them) */
struct epoch_stats *stats_epoch(struct engine *e, uint64_t epoch);
void stats_observe(struct engine *e, int src, double seconds, uint64_t bytes);
void stats_read(struct engine *e, int src, uint64_t bytes);
void stats_delivered(struct engine *e, uint64_t epoch, uint64_t bytes, uint32_t n);
void stats_step(struct engine *e, struct trainer *t, uint64_t g);
void stats_check_epochs(struct engine *e);

/* resume.c: resume records */
void resume_load(struct engine *e);
void resume_save(struct engine *e, bool quiet);

#endif /* SEERD_ENGINE_INT_H */
