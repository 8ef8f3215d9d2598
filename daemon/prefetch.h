/* The prefetch stage's own state beyond each trainer's slots (prefetch.c
 * says how batches flow): the fill of planned RAM samples ahead of need and
 * the pacing of prepares.
 *
 * Owns struct prefetch (the engine holds it as e->pf). Threads: the
 * dispatcher's alone, but for `outlook`, which the checkpoint drain thread
 * loads (atomics). Failure: none of its own (a failed fill leaves the
 * slot absent; the read that needs it loads it). */
#ifndef SEERD_PREFETCH_H
#define SEERD_PREFETCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct prefetch {
	uint64_t fill_g;         /* fill: the next batch it walks */
	uint32_t fill_r;         /* ... and rank */
	uint32_t fill_inflight;  /* fill reads in flight */
	uint64_t fill_left;      /* planned RAM samples not loaded yet */
	uint64_t pace_wake_ns;   /* earliest end of a paced prepare's wait (0: none) */
	uint64_t paced;          /* takes after which a prepare was deferred (prefetch.pace) */
	/* The plan's PFS reads ahead of the trainers (pf_outlook, dispatcher,
	 * on the tick): samples and their bytes within [checkpoint]
	 * drain_window_s. The checkpoint drain thread loads them
	 * (engine_pfs_outlook): hints, relaxed atomics. */
	struct {
		_Atomic uint64_t soon_reads, soon_bytes;
		_Atomic bool over; /* engine_end: the outlook is empty from here */
	} outlook;
};

#endif /* SEERD_PREFETCH_H */
