/* seerd's start-up: the job's socket and signals before the event loop runs.
 *
 * From before the catalog scan until the server's loop takes over, a thread
 * of its own listens on the job's socket and takes the signals, so that a
 * long scan (a large dataset on a parallel file system) is neither deaf nor
 * invisible: a trainer's HELLO is answered with SEER_MSG_PROGRESS (libseer
 * then waits on, its connect timeout counted from each answer), `seerctl
 * status` with the progress ("scanning: N of M files"), `seerctl stop`,
 * SIGTERM, SIGINT and SIGQUIT stop the scan (catalog_progress.stop), SIGUSR1,
 * SIGUSR2 and SIGHUP are logged. */
#ifndef SEERD_STARTUP_H
#define SEERD_STARTUP_H

#include <stdbool.h>
#include <stdint.h>

#include "../src/catalog/catalog.h"
#include "../src/config/config.h"

struct startup;

/* What the start-up is doing, for the progress text. */
enum startup_phase {
	STARTUP_SCAN = 0,  /* node 0: listing and scanning the dataset */
	STARTUP_WAIT,      /* other nodes: waiting for node 0's catalog */
	STARTUP_SETUP,     /* the catalog is in: the cache and the data plane */
};

/* Listen on the node's socket ([daemon] socket, %n = node) and answer on a
 * thread of its own; prog is the catalog build's (its stop is set by a stop
 * signal or `seerctl stop`). 0, or the error in err (the socket is taken by
 * another seerd, its path is too long). Main thread, after
 * server_block_signals. */
int startup_begin(struct startup **out, const struct seer_config *cfg, uint32_t node,
		  uint32_t nnodes, struct catalog_progress *prog, char *err, size_t errlen);
void startup_phase(struct startup *st, enum startup_phase phase);
/* Whether a stop was asked (a signal or seerctl) so far. */
bool startup_stopping(struct startup *st);
/* The server's loop takes over: the thread answers the connections it has
 * accepted and ends; returns the listening socket (the caller's from now
 * on) and frees st. *stop: a stop was asked. */
int startup_end(struct startup *st, bool *stop);
/* Start-up failed or was stopped: the thread ends, the socket is closed and
 * removed, st freed. NULL is ignored. */
void startup_abort(struct startup *st);

#endif /* SEERD_STARTUP_H */
