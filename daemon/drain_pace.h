/* The checkpoint drain's pacing: how fast the drain (checkpoint_drain.c) writes
 * to the PFS after each piece, from what seerd's own PFS reads look like
 * (the engine's outlook, engine_pfs_outlook) and the [checkpoint] keys.
 *
 *   YIELD  seerd's own PFS reads are queued or running now: the drain takes
 *          at most drain_share of the time (it sleeps after each piece)
 *   PLAN   none now, but the plan reads the PFS within [checkpoint]
 *          drain_window_s ahead of the trainers: the drain fills the gap
 *          piece by piece (no sleep) and yields from the piece after a read
 *          is queued, so a read waits for one piece at most
 *   FULL   the plan needs no PFS read in the window (a warm epoch served from
 *          RAM, NVMe or peers; no trainer): only drain_rate caps it
 *
 * Owns nothing; pure functions of their arguments (tests/unit/test_drain_pace.c),
 * called on the checkpoint stage's drain thread. */
#ifndef SEERD_DRAIN_PACE_H
#define SEERD_DRAIN_PACE_H

#include <stdint.h>

/* What seerd's own use of the PFS looks like now and ahead (engine.c
 * publishes it; read on the drain thread, any moment: a hint). */
struct pfs_outlook {
	uint32_t queued;        /* PFS reads (single or extents) queued or running */
	uint64_t soon_reads;    /* samples the plan reads from the PFS within the window */
	uint64_t soon_bytes;    /* ... and their bytes */
};

enum drain_mode { DRAIN_IDLE = 0, DRAIN_FULL, DRAIN_PLAN, DRAIN_YIELD, DRAIN_NMODES };

/* "idle" (no drain running), "full", "plan", "yield". */
const char *drain_mode_name(enum drain_mode m);

/* The mode the outlook calls for. */
enum drain_mode drain_pace_mode(const struct pfs_outlook *o);

/* After a piece of a drain: how long to sleep before the next one.
 * done: bytes of this drain written so far; elapsed: seconds since it
 * started; piece_s: seconds the last piece took to write; rate: the cap in
 * bytes/s (0: none); share: drain_share (0 < share <= 1). The cap keeps the
 * drain from getting ahead of rate bytes/s since its start; in YIELD the
 * drain writes at most `share` of the time. The longer of the two
 * waits, never negative. */
double drain_pace_sleep(enum drain_mode m, uint64_t done, double elapsed, double piece_s,
			uint64_t rate, double share);

#endif /* SEERD_DRAIN_PACE_H */
