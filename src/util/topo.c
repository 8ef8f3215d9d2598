#define _GNU_SOURCE
#include "topo.h"

#include <errno.h>
#include <hwloc.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct topo {
	hwloc_topology_t h;
	hwloc_bitmap_t trainers;   /* PUs the trainers may run on */
	int nic_numa;              /* NUMA node of the first NIC, or -1 */
};

static int numa_of(hwloc_topology_t h, hwloc_obj_t io)
{
	hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(h, io);
	if (!anc || !anc->nodeset)
		return -1;
	int first = hwloc_bitmap_first(anc->nodeset);
	/* an ancestor spanning every NUMA node says nothing about locality */
	return hwloc_bitmap_weight(anc->nodeset) == 1 ? first : -1;
}

int topo_open(struct topo **out, char *err, size_t errlen)
{
	struct topo *t = xcalloc(1, sizeof(*t));
	t->nic_numa = -1;
	if (hwloc_topology_init(&t->h) != 0) {
		snprintf(err, errlen, "hwloc_topology_init: %s", strerror(errno));
		free(t);
		return -errno;
	}
	hwloc_topology_set_io_types_filter(t->h, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	if (hwloc_topology_load(t->h) != 0) {
		int e = errno;
		snprintf(err, errlen, "hwloc cannot read this node's topology: %s", strerror(e));
		hwloc_topology_destroy(t->h);
		free(t);
		return -e;
	}
	t->trainers = hwloc_bitmap_alloc();
	for (hwloc_obj_t o = hwloc_get_next_osdev(t->h, NULL); o; o = hwloc_get_next_osdev(t->h, o)) {
		if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ||
		    o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
			t->nic_numa = numa_of(t->h, o);
			break;
		}
	}
	*out = t;
	return 0;
}

void topo_close(struct topo *t)
{
	if (!t)
		return;
	hwloc_bitmap_free(t->trainers);
	hwloc_topology_destroy(t->h);
	free(t);
}

unsigned topo_numa_nodes(struct topo *t)
{
	int n = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_NUMANODE);
	return n > 0 ? (unsigned)n : 1;
}

void topo_describe(struct topo *t, char *buf, size_t len)
{
	hwloc_topology_t h = t->h;
	size_t n = (size_t)snprintf(buf, len, "%d package(s), %u NUMA node(s), %d core(s), %d PU(s)",
				    hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PACKAGE), topo_numa_nodes(t),
				    hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_CORE),
				    hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PU));
	for (hwloc_obj_t o = hwloc_get_next_osdev(h, NULL); o && n < len; o = hwloc_get_next_osdev(h, o)) {
		const char *kind;
		switch (o->attr->osdev.type) {
		case HWLOC_OBJ_OSDEV_NETWORK: kind = "NIC"; break;
		case HWLOC_OBJ_OSDEV_OPENFABRICS: kind = "HCA"; break;
		case HWLOC_OBJ_OSDEV_BLOCK: kind = "disk"; break;
		default: continue;
		}
		int numa = numa_of(h, o);
		if (numa >= 0)
			n += (size_t)snprintf(buf + n, len - n, "; %s %s on NUMA %d", kind,
					      o->name ? o->name : "?", numa);
		else
			n += (size_t)snprintf(buf + n, len - n, "; %s %s (locality unknown)", kind,
					      o->name ? o->name : "?");
	}
}

int topo_check_cpuset(struct topo *t, const char *list, char *err, size_t errlen)
{
	hwloc_bitmap_t b = hwloc_bitmap_alloc();
	int rc = 0;
	if (hwloc_bitmap_list_sscanf(b, list) != 0 || hwloc_bitmap_iszero(b)) {
		snprintf(err, errlen, "[daemon] cpuset '%s' is not a CPU list such as 0-3,8", list);
		rc = -EINVAL;
	} else if (!hwloc_bitmap_isincluded(b, hwloc_topology_get_allowed_cpuset(t->h))) {
		char all[128];
		hwloc_bitmap_list_snprintf(all, sizeof(all), hwloc_topology_get_allowed_cpuset(t->h));
		snprintf(err, errlen, "[daemon] cpuset '%s' is outside this node's CPUs %s", list, all);
		rc = -EINVAL;
	}
	hwloc_bitmap_free(b);
	return rc;
}

int topo_add_trainer(struct topo *t, pid_t pid)
{
	hwloc_bitmap_t b = hwloc_bitmap_alloc();
	int changed = 0;
	if (hwloc_get_proc_cpubind(t->h, pid, b, HWLOC_CPUBIND_PROCESS) == 0) {
		hwloc_bitmap_t before = hwloc_bitmap_dup(t->trainers);
		hwloc_bitmap_or(t->trainers, t->trainers, b);
		changed = !hwloc_bitmap_isequal(before, t->trainers);
		hwloc_bitmap_free(before);
	}
	hwloc_bitmap_free(b);
	return changed;
}

int topo_pin_threads(struct topo *t, const char *cfg_cpuset, const pthread_t *threads, unsigned n,
		     char *desc, size_t desclen)
{
	hwloc_const_bitmap_t all = hwloc_topology_get_allowed_cpuset(t->h);
	hwloc_bitmap_t set = hwloc_bitmap_alloc();
	const char *why;
	if (cfg_cpuset && *cfg_cpuset) {
		hwloc_bitmap_list_sscanf(set, cfg_cpuset);
		why = "[daemon] cpuset";
	} else if (!hwloc_bitmap_iszero(t->trainers) && !hwloc_bitmap_isincluded(all, t->trainers)) {
		hwloc_bitmap_andnot(set, all, t->trainers);
		why = "cores the trainers do not use";
	} else {
		hwloc_bitmap_copy(set, all);
		why = NULL;
	}
	if (why == NULL || hwloc_bitmap_iszero(set)) {
		/* unpinned: undo a previous pinning */
		for (unsigned i = 0; i < n; i++)
			hwloc_set_thread_cpubind(t->h, threads[i], all, HWLOC_CPUBIND_THREAD);
		snprintf(desc, desclen, "not pinned (the trainers are not pinned)");
		hwloc_bitmap_free(set);
		return 0;
	}
	for (unsigned i = 0; i < n; i++)
		hwloc_set_thread_cpubind(t->h, threads[i], set, HWLOC_CPUBIND_THREAD);
	char list[128];
	hwloc_bitmap_list_snprintf(list, sizeof(list), set);
	snprintf(desc, desclen, "pinned to CPUs %s (%s)", list, why);
	int w = hwloc_bitmap_weight(set);
	hwloc_bitmap_free(set);
	return w;
}

int topo_bind_memory(struct topo *t, void *addr, size_t len)
{
	if (topo_numa_nodes(t) < 2 || t->nic_numa < 0)
		return -1;
	hwloc_bitmap_t ns = hwloc_bitmap_alloc();
	hwloc_bitmap_only(ns, (unsigned)t->nic_numa);
	int rc = hwloc_set_area_membind(t->h, addr, len, ns, HWLOC_MEMBIND_BIND,
					HWLOC_MEMBIND_BYNODESET);
	hwloc_bitmap_free(ns);
	return rc == 0 ? t->nic_numa : -1;
}
