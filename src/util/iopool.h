/* I/O worker pool: threads that execute read tasks in order of need.
 *
 * The submitter (seerd's dispatcher thread) owns every task except while it
 * is queued or running: iopool_submit hands it over, iopool_take_done hands
 * it back. Workers never touch any other dispatcher state, so the dispatcher
 * needs no locks of its own. Queued tasks run smallest `key` first (the
 * global batch index of the earliest need), FIFO among equal keys. */
#ifndef SEER_IOPOOL_H
#define SEER_IOPOOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "handoff.h"
#include "pqueue.h"

struct io_task {
	union {
		struct io_task *next;     /* done-list link */
		struct handoff_node link; /* the same, as the done list sees it */
	};
	struct pqueue_node pq;      /* pq.key: priority, smaller runs first (seq, idx: the pool's) */
	uint64_t t_submit, t_start, t_end; /* ns, monotonic */
	int status;             /* set by the exec function */
	void *user;             /* owned by the submitter */
};

/* Runs in a worker thread. `tls` is the worker's own state from tls_init. */
typedef void (*io_exec_fn)(struct io_task *t, void *tls, void *ctx);
typedef void *(*io_tls_init_fn)(void *ctx, unsigned worker);
typedef void (*io_tls_fini_fn)(void *tls, void *ctx);

struct iopool {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct pqueue queue;    /* queued tasks */
	struct handoff done;    /* finished tasks, under mu */
	int done_efd;           /* eventfd: readable when done tasks wait */
	unsigned nthreads;
	unsigned running;       /* tasks being executed */
	bool stop;
	pthread_t *threads;
	io_exec_fn exec;
	io_tls_init_fn tls_init;
	io_tls_fini_fn tls_fini;
	void *ctx;
	const char *cpuset;     /* for worker pinning; may be NULL */
};

/* Start n workers. 0 or -errno. */
int iopool_start(struct iopool *p, unsigned n, io_exec_fn exec, io_tls_init_fn tls_init,
		 io_tls_fini_fn tls_fini, void *ctx);
/* Queue tasks (one lock for the whole array). */
void iopool_submit(struct iopool *p, struct io_task **tasks, uint32_t n);
/* A more urgent need joined task t: lower its key to `key` if that is
 * earlier. Works whether t is queued (re-sorted), running or not yet
 * submitted (the key is just set). */
void iopool_boost(struct iopool *p, struct io_task *t, uint64_t key);
/* Take t back if it is still queued (not running, not done): true, and it
 * is the submitter's again; false when a worker has it or had it. */
bool iopool_cancel(struct iopool *p, struct io_task *t);
/* Finished tasks, in completion order (NULL when none). Clears the eventfd. */
struct io_task *iopool_take_done(struct iopool *p);
/* Tasks queued or running. */
uint32_t iopool_pending(struct iopool *p);
/* Stop the workers after their current task; queued tasks are returned
 * through the done list with status -ECANCELED. */
void iopool_stop(struct iopool *p);
/* Release what iopool_start set up (after iopool_stop and a last take_done). */
void iopool_destroy(struct iopool *p);

#endif /* SEER_IOPOOL_H */
