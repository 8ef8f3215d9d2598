/* The PFS emulator's command line: options, defaults, presets, --help.
 *
 * Owns: the option table (one table drives parsing, defaults and --help) and
 * the presets (docs/pfsemu.md, "The lustre preset", gives the numbers' sources).
 * Threads: main thread only, before the file system starts.
 * Failure: emu_parse_args prints what is wrong (option, value, accepted
 * range) and returns -1; nothing is half-applied that the caller would use. */
#ifndef SEER_PFSEMU_OPTS_H
#define SEER_PFSEMU_OPTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define PROG "seer-pfsemu"
#define KERNEL_MAX_READ (1u << 20)  /* libfuse 3.14 negotiates at most 256 pages */
#define MIN_MAX_READ 4096u

enum fault_kind { FAULT_EIO = 0, FAULT_ENOENT, FAULT_SHORT, FAULT_NKINDS };
extern const char *const fault_names[FAULT_NKINDS];

struct emu_opts {
	bool foreground;
	bool debug;
	bool stats_per_file;
	bool allow_other;
	const char *preset;      /* name of the preset applied first, or NULL */
	const char *label;       /* free text echoed in the stats (a job id) */
	uint64_t bandwidth;      /* bytes/s; 0 = unlimited */
	uint64_t burst;          /* token bucket depth, bytes */
	double latency_ms;       /* added to every read RPC */
	double meta_latency_ms;  /* added to getattr/lookup, open, opendir, readlink */
	uint64_t max_inflight;   /* requests in flight over the mount; 0 = unlimited */
	uint64_t ost_inflight;   /* read RPCs in flight per OST; 0 = unlimited */
	uint64_t meta_inflight;  /* metadata operations in flight; 0 = unlimited */
	uint64_t osts;           /* OSTs the files are spread over */
	uint64_t rpc_size;       /* largest read RPC; 0 = max_read */
	uint64_t readahead;      /* readahead window per open file; 0 = off */
	uint64_t max_read;       /* largest FUSE read request, bytes */
	uint64_t blksize;        /* st_blksize reported; 0 = max_read */
	double attr_timeout;     /* kernel attr/entry/negative cache, seconds */
	uint64_t threads;        /* FUSE worker threads */
	const char *stats_path;  /* final JSON at unmount; NULL = none */
	double fault_rate;       /* probability per read */
	unsigned fault_kinds;    /* bit mask of enum fault_kind */
	uint64_t fault_seed;
	const char *fault_path;  /* substring; "" = every file */
	/* write mode (any of these mounts read-write; docs/pfsemu.md) */
	bool writable;           /* --writable: read-write, writes unthrottled */
	uint64_t write_bandwidth; /* bytes/s of all writes; 0 = unlimited */
	double write_latency_ms; /* added to every write request */
	uint64_t write_capacity; /* bytes that may be written in all; then ENOSPC (0 = no limit) */
	double write_fault_rate; /* probability that a write fails with EIO */
	bool write_shares;       /* writes also take their bytes from --bandwidth */
	const char *log_file;
	int log_level;           /* enum log_level */
};

/* Parse argv into o, *src and *mnt: defaults, then the preset named by
 * --preset (wherever it stands), then the options in order. 0 = run,
 * 1 = exit 0 (--help printed), -1 = usage error (message printed). */
int emu_parse_args(int argc, char **argv, struct emu_opts *o, const char **src,
		   const char **mnt);

/* splitmix64, shared with the fault generator. */
uint64_t emu_splitmix64(uint64_t x);

#endif
