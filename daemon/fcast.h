/* The forecast's state (fcast.c says what it computes): this node's bytes
 * per epoch, counted once per plan by a thread of its own.
 *
 * Owns the forecast thread and its tally. Threads: the forecast thread
 * writes only `tally` and `rc`, then release-stores `ready`; the
 * dispatcher reads them only after an acquire load of `ready`, and
 * everything else (started, warned, the thread's handle) is the
 * dispatcher's. fcast_stop joins the thread before the plan it reads goes.
 * Failure: no thread or no memory for the tally: no forecast (said once). */
#ifndef SEERD_FCAST_H
#define SEERD_FCAST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "../src/plan/forecast.h"

struct fcast {
	pthread_t thread;
	bool started, warned;
	_Atomic bool ready;
	int rc;
	struct forecast_tally tally;
};

#endif /* SEERD_FCAST_H */
