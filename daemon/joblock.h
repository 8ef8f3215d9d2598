/* The job's state lock: one seerd (one job, node 0 of it) at a time owns a
 * job's saved positions, <state_dir>/seer-pos-<job id>/ (daemon/resume.c).
 *
 * Two daemons started with the same [job] id and [daemon] state_dir would
 * overwrite each other's resume plan and position files. Node 0 takes an
 * fcntl lock on <dir>/lock (an open-file-description lock, F_OFD_SETLK) at
 * start-up, before it writes anything there, and holds it for the daemon's
 * life; the file names the holder (host, pid, socket, start time). A second
 * seerd finding the lock held refuses to start with who holds it; the other
 * nodes of the same job take no lock (they share the directory). The kernel
 * (or, on NFSv4, the server) drops the lock when its holder dies, however it
 * dies: the next start takes it over and logs whose it was. A clean exit
 * removes the file (and the directory when it is empty).
 *
 * Main thread, at start-up and exit only. Failure: a lock held by a live
 * seerd refuses the start; a directory that cannot be created or a file
 * system without locks is logged and the job goes on unguarded (as the
 * positions themselves: daemon/resume.c). */
#ifndef SEERD_JOBLOCK_H
#define SEERD_JOBLOCK_H

#include <stddef.h>

#include "../src/config/config.h"

/* The job's state directory, <state_dir>/seer-pos-<job id> (malloc'd). */
char *joblock_dir(const struct seer_config *cfg);

/* Take the job's lock for this daemon (serving on socket `sock`): 0 with
 * *fd the lock's descriptor (-1: unguarded, logged), or -EBUSY with err
 * naming the job, the holder and what to do. */
int joblock_take(const struct seer_config *cfg, const char *sock, int *fd, char *err,
		 size_t errlen);

/* Release it at exit: the file removed, the directory too when empty. */
void joblock_drop(const struct seer_config *cfg, int fd);

#endif /* SEERD_JOBLOCK_H */
