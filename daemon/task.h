/* The task stage's state (task.c says what a task is and how it ends):
 * the pool of tasks and the round's submissions.
 *
 * Owns struct tasks (the engine holds it as e->tasks): the I/O pool whose
 * threads run worker.c (made and stopped by engine.c), chunks of TASK_CHUNK
 * tasks (ids stay valid, the cache states name loading tasks by id), the
 * free list, and the tasks submitted this round, handed to the I/O pool by
 * task_flush (after extent.c coalesced them). Threads: the dispatcher's; a
 * task itself is its I/O or network thread's between submission and
 * completion. Failure: out of memory aborts. */
#ifndef SEERD_TASK_H
#define SEERD_TASK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "../src/util/iopool.h"

struct engine;
struct etask;

struct tasks {
	/* what a finished task did goes to the stages that own it: the
	 * engine's handler (complete_task), installed before the pool starts */
	void (*done)(struct engine *e, struct etask *tk, int status);
	struct iopool pool;      /* the I/O threads: its own locks (submit/take) */
	bool pool_started;
	uint32_t reader_fds;     /* files each I/O thread's reader keeps open (fixed
				    before the pool starts; the I/O threads read it) */
	struct etask **chunks;
	uint32_t nchunks;
	struct etask *free;
	struct io_task **sub;    /* submitted this round, not yet in the pool */
	uint32_t nsub, capsub;
	/* PFS reads (TK_PFS, TK_EXTENT) in the pool, queued or running: the
	 * dispatcher adds them at task_flush and takes them off when the pool
	 * hands them back or task_cancel takes them back; the checkpoint drain
	 * loads it (engine_pfs_outlook; a hint, relaxed) */
	_Atomic uint32_t pfs_queued;
};

/* Take tk back from the pool's queue (iopool_cancel): true if it was still
 * queued. */
bool task_cancel(struct engine *e, struct etask *tk);

#endif /* SEERD_TASK_H */
