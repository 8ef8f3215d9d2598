/* The PFS probe: is this file system bound by requests or by bytes, for
 * this dataset's samples? (prefetch.coalesce = auto; docs/design.md,
 * "Coalesced reads: on, off or auto".)
 *
 * Coalesced reads save requests but a shuffled first epoch then waits for
 * whole files before its first batch: on a PFS bound by its bandwidth that
 * costs the overlap of reading with compute and saves nothing. The probe
 * times q reads of one sample's size at once, then q reads of k times that
 * size at once (distinct byte ranges of the dataset's files, each read
 * once, then dropped from the page cache): when k times the bytes take
 * about k times as long, bytes are what the PFS charges for and one read
 * per sample costs no more than extents. At most 1/64 of the dataset's
 * bytes, 1-3 rounds, none started after 2 s.
 *
 * Runs once, on node 0, before the job (the calling thread and q short-lived
 * readers); every node then plans with node 0's verdict. Failure: a read
 * that fails, a dataset too small to measure within the byte budget or a
 * thread that cannot start leave coalescing on, and `why` says so. */
#ifndef SEER_PFS_PROBE_H
#define SEER_PFS_PROBE_H

#include <stdbool.h>
#include <stdint.h>

#include "../catalog/catalog.h"

struct pfs_probe {
	bool measured;           /* both phases ran */
	bool coalesce;           /* the verdict: coalesced reads on */
	uint32_t q, k, rounds;   /* reads at once, size ratio, rounds run (best kept) */
	uint64_t small, big;     /* bytes per read in each phase */
	double t_small, t_big;   /* seconds for q reads at once, best round */
	uint64_t bytes, reads;   /* what the probe read from the PFS */
	char why[256];           /* the verdict in words */
};

/* At most this share of the dataset's bytes is read by the probe (1/64). */
#define PFS_PROBE_BUDGET_SHIFT 6

/* Measure with up to q reads at once; fills *p (never fails: no verdict
 * means coalescing on). */
void pfs_probe_run(const struct catalog *cat, uint32_t q, struct pfs_probe *p);

/* One round's verdict from its two timings: true (coalesce) unless k times
 * the bytes took at least k / 1.5 times as long (one read per sample then
 * costs at most 1.5x the time of the bytes alone) and at least 1 ms longer.
 * The probe coalesces unless every round says bandwidth. */
bool pfs_probe_decide(double t_small, double t_big, uint32_t k);

#endif
