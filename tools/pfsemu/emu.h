/* The PFS emulator's shared state: the one `struct emu` of the process, its
 * counters and the per-file table, as seen by the FUSE callbacks
 * (tools/seer-pfsemu.c) and the stats document (tools/pfsemu/stats.c).
 *
 * Threads: the FUSE worker threads update the counters (relaxed atomics) and
 * the per-file table (its mutex); the timing model has its own lock
 * (model.h). Everything else is written by the main thread before the file
 * system starts and only read afterwards.
 * Failure: nothing here fails; allocation failures abort (x* helpers). */
#ifndef SEER_PFSEMU_EMU_H
#define SEER_PFSEMU_EMU_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "model.h"
#include "opts.h"

#define CTL_DIR ".pfsemu"           /* virtual control directory under the root */
#define STATS_FORMAT 2              /* "format" of the stats JSON (2: RPC model) */

/* Totals since the last reset; relaxed atomics, summed at render time. */
struct emu_totals {
	_Atomic uint64_t reads;        /* read requests served (not EOF ones) */
	_Atomic uint64_t bytes;        /* bytes returned by those reads */
	_Atomic uint64_t eof_reads;    /* reads at or past EOF, answered at once */
	_Atomic uint64_t opens;        /* source files opened */
	_Atomic uint64_t getattrs;     /* getattr/lookup on source paths */
	_Atomic uint64_t opendirs;
	_Atomic uint64_t readlinks;
	_Atomic uint64_t faults[FAULT_NKINDS];
	_Atomic uint64_t io_errors;    /* real errors from the source file system */
	_Atomic uint64_t read_ns;      /* sum of read service times, arrival to reply */
	/* write mode */
	_Atomic uint64_t writes;       /* write requests that wrote */
	_Atomic uint64_t write_bytes;  /* bytes they wrote */
	_Atomic uint64_t write_ns;     /* sum of write service times */
	_Atomic uint64_t write_eio;    /* writes failed by --write-fault-rate */
	_Atomic uint64_t write_enospc; /* writes refused by --write-capacity */
	_Atomic uint64_t fsyncs, renames, unlinks, creates;
};

/* Per-file counters, keyed by the path relative to SRC_DIR. Entries live until
 * exit; a reset zeroes them. */
struct pf_file {
	struct pf_file *next;
	uint64_t hash;
	_Atomic uint64_t opens, reads, bytes, faults, rpcs, rpc_bytes;
	char path[];
};

struct pf_table {
	pthread_mutex_t lock;
	struct pf_file **slots;
	size_t nslots, count;
};

struct emu {
	struct emu_opts o;
	char *src;              /* absolute */
	char *mnt;              /* absolute */
	char *stats_path;       /* absolute --stats, or NULL */
	int src_fd;
	int stop_fd;            /* eventfd, readable once shutdown starts */
	atomic_bool stopping;
	uint64_t start_ns;
	_Atomic uint64_t reset_ns;
	time_t start_wall;
	struct emu_totals t;
	struct pfsm model;
	struct pf_table files;
	_Atomic uint64_t fault_ctr;
	_Atomic uint64_t written;       /* bytes written since the mount (--write-capacity) */
	pthread_mutex_t wlock;          /* the write bucket */
	uint64_t wtat;                  /* when the write bandwidth is free again (ns) */
	unsigned nkinds;
	enum fault_kind kinds[FAULT_NKINDS];
};

extern struct emu emu;

/* The per-file entry for rel (path under SRC_DIR), created on first use; never
 * NULL (aborts on out of memory). pf_free_all frees the table at exit. */
struct pf_file *pf_get(struct pf_table *t, const char *rel);
void pf_free_all(struct pf_table *t);

/* Start-up (startup.c): each check logs what is wrong and returns -1. */
int emu_check_fuse_dev(void);
int emu_check_source(const char *src);       /* opens emu.src_fd, sets emu.src */
int emu_check_mountpoint(const char *mnt);   /* sets emu.mnt */
int emu_check_stats_path(void);              /* sets emu.stats_path */
void emu_print_limits(void);
/* Detach once mounted: the parent prints the daemon's pid and exits; returns 0
 * in the daemon, -errno on failure (in the original process). */
int emu_daemonize(int log_fd);

/* The stats document (JSON, newline-terminated); the caller frees it.
 * Counters are read one by one while requests may run, so totals are exact
 * only once the clients are quiet. Aborts only on out of memory. */
char *stats_render(size_t *len);

#endif
