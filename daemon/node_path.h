/* Configured paths that name this daemon's node: "%n" in [daemon] socket,
 * [daemon] stats_file and [cache] nvme_dir becomes the node rank, so that
 * several daemons on one host keep their files apart. */
#ifndef SEERD_NODE_PATH_H
#define SEERD_NODE_PATH_H

#include <stddef.h>
#include <stdint.h>

/* pattern with every "%n" replaced by node, into out[len]. 0, or
 * -ENAMETOOLONG when it does not fit (out is then empty). Any thread. */
int node_path(char *out, size_t len, const char *pattern, uint32_t node);

#endif /* SEERD_NODE_PATH_H */
