/* seerd's event loop: the trainers' socket, signals, seerctl requests. */
#ifndef SEERD_SERVER_H
#define SEERD_SERVER_H

#include <signal.h>

#include "../src/catalog/catalog.h"
#include "../src/config/config.h"
#include "cluster.h"

struct pfs_probe;

struct startup;

/* Serve the job until every trainer finished (on every node), a stop was
 * requested, or a fatal error. Returns the process exit code. `probe`:
 * prefetch.coalesce = auto's verdict (daemon/main.c), or NULL. `st`: the
 * start-up thread listening on the socket (startup.h); it is ended here, its
 * socket taken over, and a stop it took stops the job at once. */
int server_run(const struct seer_config *cfg, struct catalog *cat, struct cluster *cl,
	       unsigned node, unsigned nnodes, const struct pfs_probe *probe, struct startup *st);

/* Listen on the unix socket path (created 0600; a socket file left by a dead
 * daemon is replaced, a live daemon's is an error). 0 and *lfd, or the error
 * in err. */
int server_listen(const char *path, int *lfd, char *err, size_t errlen);

/* Block the signals the loop takes through its signalfd (server_signals) in
 * the calling thread; ignore SIGPIPE. Call first thing in main, before MPI or
 * any library starts a thread: threads inherit the mask, and a thread with
 * SIGTERM unblocked would take it with the default action (death without a
 * drain). */
void server_block_signals(void);
/* The signals seerd takes itself: SIGTERM, SIGINT, SIGQUIT (stop), SIGUSR1,
 * SIGUSR2 (snapshot), SIGHUP (ignored, logged). */
void server_signals(sigset_t *mask);

#endif /* SEERD_SERVER_H */
