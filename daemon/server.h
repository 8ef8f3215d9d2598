/* seerd's event loop: the trainers' socket, signals, seerctl requests. */
#ifndef SEERD_SERVER_H
#define SEERD_SERVER_H

#include "../src/catalog.h"
#include "../src/config.h"
#include "cluster.h"

/* Serve the job until every trainer finished (on every node), a stop was
 * requested, or a fatal error. Returns the process exit code. */
int server_run(const struct seer_config *cfg, struct catalog *cat, struct cluster *cl,
	       unsigned node, unsigned nnodes);

#endif /* SEERD_SERVER_H */
