/* Node topology through hwloc: what the daemon prints at start, where its
 * threads run and where its memory lives.
 *
 * Placement policy:
 *  - [daemon] cpuset given: the daemon's threads (I/O, dispatcher,
 *    network) run there;
 *  - else, when the trainers are pinned (their affinity does not cover the
 *    node), they run on the cores the trainers do not use;
 *  - else nothing is pinned: there is no trainer core to keep away from.
 *  The arena is bound to the NUMA node of the NIC (peer traffic and staging
 *  copies start there) when the node has several NUMA nodes. */
#ifndef SEER_TOPO_H
#define SEER_TOPO_H

#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>

struct topo;

/* 0, or -errno with the reason in err (hwloc could not load the topology). */
int topo_open(struct topo **out, char *err, size_t errlen);
void topo_close(struct topo *t);

/* One line: packages, NUMA nodes, cores, PUs, and where NICs and disks sit. */
void topo_describe(struct topo *t, char *buf, size_t len);
unsigned topo_numa_nodes(struct topo *t);

/* Validate a cpuset list ("0-3,8") against the machine; 0 or -EINVAL. */
int topo_check_cpuset(struct topo *t, const char *list, char *err, size_t errlen);

/* Add a trainer process's CPU affinity to the set the daemon avoids.
 * Returns 1 if the set changed. */
int topo_add_trainer(struct topo *t, pid_t pid);

/* Pin the given threads per the policy above. Returns the number of PUs
 * they may use (0 = not pinned); *desc says where. */
int topo_pin_threads(struct topo *t, const char *cfg_cpuset, const pthread_t *threads, unsigned n,
		     char *desc, size_t desclen);

/* Bind [addr, addr+len) to the NIC's NUMA node (before first touch). Returns
 * the NUMA node index, or -1 when nothing was bound. */
int topo_bind_memory(struct topo *t, void *addr, size_t len);

#endif /* SEER_TOPO_H */
