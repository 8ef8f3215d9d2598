/* libseer internals: the client object, its batch slots, and the handle
 * table that turns both into tokens.
 *
 * Handles. seer_client_t * and seer_batch_t * given to the caller are never
 * pointers: they are 64-bit tokens decoded against a process-wide table, so a
 * stale, closed, forged or NULL handle is recognised (-EBADF, -ESTALE,
 * -EINVAL) instead of dereferenced. A client token carries its table index
 * and the entry's generation (odd while live, bumped at close); a batch token
 * carries the client's index, the slot and the delivery number (a process-wide
 * counter), so a batch handle kept after its slot was reused is stale.
 *
 * Threads. Every call holds a reference on the table entry while it runs
 * (handle_acquire/handle_release); seer_close waits until the last reference
 * is gone before it frees, so a close from another thread never pulls memory
 * from under a running call. seer_next/seer_seek are single-consumer (the
 * `busy` flag detects a second thread); releases and accessors may run on any
 * thread (`lock` guards the slots' held state and the release ring).
 *
 * Fork. A pthread_atfork child handler closes every client's socket and
 * eventfd in the child and marks it forked: only the parent holds the rank. */
#ifndef SEER_CLIENT_INTERNAL_H
#define SEER_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../proto/seer_proto.h"
#include "../src/common/ring.h"
#include "../src/sampler/sampler_elastic.h"
#include "seer.h"

_Static_assert(sizeof(void *) == 8, "handles are 64-bit tokens: libseer needs a 64-bit platform");

#define HANDLE_MAX 1024u     /* clients open at once in one process */
#define HANDLE_MAX_SLOTS 4096u /* batch slots per client a token can name */

/* Per-slot state, private to this process (the shared slot is re-read only
 * for sample descriptors, which are bounds-checked on every access). */
struct slot {
	_Atomic uint64_t delivery; /* delivery number of the batch now in the slot */
	_Atomic bool held;
	uint64_t global;           /* the batch's number through the job */
	const struct seer_wire_slot *ws; /* the shared slot (this session's mapping) */
	uint32_t n;                /* samples, checked <= batch_size at delivery */
	uint64_t epoch, step;
	int32_t status;
	char msg[SEER_ERRMSG_MAX]; /* copied at delivery when status != 0 */
	bool has_tensor;           /* the batch is one tensor (checked at delivery) */
	struct seer_wire_tensor tensor;
};

/* Mapping the daemon's filled arena pages ahead of the trainer's reads
 * (prefault.c): owned by the helper thread while it runs, by the consumer
 * thread otherwise. */
struct prefault {
	/* the consumer thread's */
	bool off;                  /* SEER_PREFAULT=0, or no memory for the bitmap */
	bool boundary;             /* the first epoch boundary has passed: no helper */
	bool running;              /* the helper thread exists */
	pthread_t th;
	_Atomic uint32_t stop;     /* the helper's stop word (a futex) */
	/* the pass: the helper's while it runs, the consumer's otherwise */
	const uint8_t *base;       /* the mapping to fill: ours, or seer_arena_reader's */
	uint64_t pos;              /* next offset of the open pass (arena_size: none open) */
	uint64_t *done;            /* one bit per arena page already mapped */
	uint64_t npages;
	uint64_t pages, passes;    /* pages mapped, passes begun */
	bool no_populate;          /* MADV_POPULATE_READ refused: byte reads only */
	bool no_seek;              /* the fd cannot seek data: nothing to do */
	int8_t huge;               /* the arena is in huge pages: 1, not: 0, unknown: -1 */
	bool stage_known;          /* the other trainers' staging shares marked done */
	uint8_t sink;
};

/* A session replaced by a reconnect: its mappings stay while the user holds
 * one of its batches (pointers into batches handed before the reconnect stay
 * readable until released), and are unmapped with the last release; its
 * slot arrays stay until seer_close (a racing accessor never reads freed
 * memory). */
struct old_session {
	struct old_session *next;
	uint64_t *held;            /* delivery numbers of its batches the user holds */
	uint32_t nheld;
	const uint8_t *arena;
	size_t arena_size;
	const struct seer_ctrl_out *co;
	size_t co_size;
	struct seer_ctrl_in *ci;
	size_t ci_size;
	struct slot *slots;
	const struct seer_wire_slot **wslots;
};

/* The job's definition the trainer declared (seer_options_t's job fields in
 * the hello's form): sent in every hello, a reconnect's included. */
struct client_jobdef {
	uint32_t job;              /* SEER_HELLO_JOB_* */
	uint32_t batch_size, shuffle, drop_last;
	uint64_t seed, epochs;
	char dataset[SEER_DATASET_MAX];
};

/* What a session maps from seerd: the arena and the control segments (a
 * reconnect swaps them under `lock`; the replaced ones go to `old`). */
struct client_shm {
	int arena_fd;
	const uint8_t *arena;
	size_t arena_size;
	const struct seer_wire_type *types;
	uint32_t ntypes;
	const struct seer_ctrl_out *co;
	size_t co_size;
	struct seer_ctrl_in *ci;
	size_t ci_size;
};

/* The job's plan as this trainer knows it (consumer thread). */
struct client_plan {
	struct sampler_timeline tl;    /* global batch numbers of the job's plan */
	uint8_t *plan_rec;         /* the record the job's plan was made from (or NULL) */
	size_t plan_rec_len;
	seer_sampler_t *sampler;   /* that plan, for seer_state (made on first use) */
	uint64_t total;            /* the job's end (sampler_tl_end) */
};

/* Reconnect (consumer thread, swaps under `lock`). */
struct client_reconnect {
	int reconnect_ms;          /* 0: off */
	uint64_t lost_deadline;    /* the daemon went away: reconnect until then (0: not lost) */
	int lost_code;             /* what to report when the deadline passes */
	uint64_t first_delivery;   /* deliveries before this belong to replaced sessions */
	_Atomic uint64_t reconnects;
	struct old_session *old;
};

struct seer_client {
	uint32_t hidx;             /* handle table index */
	int sock, efd;
	int rank, world;
	int timeout_ms;            /* the connect timeout, for every blocking step */
	pid_t owner;               /* the process that connected */
	struct client_shm shm;
	struct ring out;           /* daemon -> us: popped by the consumer thread */
	struct ring rel;           /* us -> daemon: pushed under `lock` */
	struct slot *slots;
	const struct seer_wire_slot **wslots;
	uint32_t nslots;
	uint32_t nheld;            /* under `lock` */
	struct seer_msg_welcome w;
	struct client_plan plan;
	uint64_t next_global;      /* the batch we expect next (consumer thread) */
	uint64_t handed_next;      /* the first batch not handed to the user (consumer thread;
				      next_global unless take_ahead) */
	bool take_ahead;           /* SEER_OPT_TAKE_AHEAD: seer_handed says what was handed */
	uint32_t held;             /* batches declared to seerd (seer_options_t.max_held) */
	bool epoch_marker;         /* return SEER_EEPOCH before the next batch */
	struct client_reconnect rc;
	struct client_jobdef jd;   /* the job's definition, sent again at a reconnect */
	char job[SEER_JOBID_MAX];
	char sock_path[108];
	pthread_mutex_t lock;
	_Atomic int busy;          /* a thread is in seer_next or seer_seek */
	_Atomic bool closing;      /* seer_close started: waiting calls return */
	_Atomic bool forked;       /* we are a fork child: the connection is the parent's */
	_Atomic bool broken;       /* a seek timed out: the stream position is unknown */
	struct prefault pf;
};

/* ---- handle table (handle.c) ------------------------------------------------ */
/* Enter c into the table; 0 with *token, or -EMFILE. Registers the atfork
 * handler on first use. */
int handle_register(struct seer_client *c, seer_client_t **token);
/* Take a reference on the client a client token names: 0 with *c, -EINVAL
 * (NULL or not a client token) or -EBADF (closed, or the parent's after
 * fork). Sets seer_errmsg() on failure, naming `fn`. */
int handle_acquire(const seer_client_t *token, const char *fn, struct seer_client **c);
void handle_release(struct seer_client *c);
/* Take a reference on the client and slot a batch token names: 0, -EINVAL,
 * -EBADF, or -ESTALE (the slot was released or reused since). */
int handle_acquire_batch(const seer_batch_t *b, const char *fn, struct seer_client **c,
			 struct slot **s);
/* Split a batch token: 0, or -EINVAL (NULL or not a batch token). */
int handle_batch_decode(const seer_batch_t *b, const char *fn, uint32_t *hidx, uint32_t *slot,
			uint64_t *delivery);
/* The token of the batch delivered into slot idx (delivery number d). */
seer_batch_t *handle_batch_token(const struct seer_client *c, uint32_t idx, uint64_t d);
/* Process-wide delivery numbers (never 0). */
uint64_t handle_next_delivery(void);
/* seer_close's part: mark the entry closed so new calls fail, wake a waiter,
 * drop our own reference and wait for the others. Returns false when another
 * close got there first (the caller then just returns). */
bool handle_close_begin(struct seer_client *c);
/* Free the entry for reuse (after the client's memory is gone). */
void handle_close_end(uint32_t hidx);

/* ---- connecting (connect.c) ------------------------------------------------------ */
/* Connect to seerd's socket at `path`, retrying while the daemon may still be
 * starting (until `deadline`, ns); the daemon must run as us or root
 * (SO_PEERCRED). The fd, or a negative errno with seer_errmsg() set. */
int connect_open_socket(const char *path, uint64_t deadline);
/* Connect again to c's socket after its daemon went away, presenting c's
 * position (seer_state's record), until `deadline`; on success the new
 * session replaces the old one (kept mapped until close). 0, -ETIMEDOUT
 * (nobody answered yet: try again later), or the refusal's code. */
int client_reconnect(struct seer_client *c, uint64_t deadline);
/* A batch of a replaced session, delivery d, was released (c->lock held). */
void client_old_release(struct seer_client *c, uint64_t d);
/* c's position record (the batches it took) into a malloc'd buffer. */
int client_state(struct seer_client *c, uint8_t **buf, size_t *len);

/* ---- the client (client.c) ---------------------------------------------------- */
/* Free everything; with `tell_daemon`, hand held batches back first. */
void client_destroy(struct seer_client *c, bool tell_daemon);
/* The client has failed for good (fork child, lost seek): -EBADF or
 * -EPIPE with seer_errmsg() set, else 0. */
int client_unusable(struct seer_client *c, const char *fn);

/* ---- prefaulting the arena (prefault.c) ---------------------------------------- */
/* Set up (after the arena is mapped); prefault_free stops the helper and frees.
 * Never fails: without memory for the bitmap, prefaulting is off. */
void prefault_init(struct seer_client *c);
void prefault_free(struct seer_client *c);
/* Start the helper thread unless it runs, is off, or the first epoch
 * boundary has passed (consumer thread, from seer_next). */
void prefault_start(struct seer_client *c);
/* At an epoch's last batch (consumer thread): stop the helper, map every
 * page present in the arena now, and start the helper again unless the
 * first boundary has passed (it maps what is filled until the boundary). */
void prefault_last_batch(struct seer_client *c);
/* At an epoch boundary (consumer thread): stop the helper for good, then,
 * when another epoch follows (more), map every page present in the arena now. */
void prefault_epoch_end(struct seer_client *c, bool more);
/* Prefault the mapping at base from now on (nothing of it mapped yet). */
void prefault_retarget(struct seer_client *c, const uint8_t *base);

#endif /* SEER_CLIENT_INTERNAL_H */
