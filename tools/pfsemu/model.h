/* The PFS emulator's timing model: what one client node of a parallel file
 * system (a Lustre client, by default numbers) sees, computed as a schedule
 * in virtual time. docs/pfsemu.md ("The model") describes it for users.
 *
 * Owns: the request queues (mount-wide, one per OST, metadata), the shared
 * bandwidth token bucket, the busy-time accounting, the RPC counters and the
 * per-open-file readahead state. It never sleeps and never reads the clock:
 * every call takes the arrival time `now` (CLOCK_MONOTONIC ns in the
 * emulator, synthetic times in tests/unit/test_pfsemu_model.c) and returns
 * the time at which the request completes; the caller sleeps until then.
 *
 * Model, in short:
 *  - A read of a file is served by read RPCs of at most rpc_size bytes; each
 *    pays the latency, holds a slot of the mount queue and of its file's OST
 *    queue from its start to its completion, and is charged to the bandwidth.
 *    Metadata operations hold a slot of the mount queue and of the metadata
 *    queue for meta latency. A queue with limit N runs at most N requests at
 *    once; the others start, in arrival order, when a slot frees (N servers,
 *    FIFO).
 *  - Readahead (ra_max > 0): a second consecutive sequential read on an open
 *    file starts a window that grows by one RPC per sequential read up to
 *    ra_max; the window beyond the read is fetched at once by RPCs cut on
 *    rpc_size boundaries, and later reads covered by them wait only for those
 *    RPCs. A read that is not sequential drops the window (its unread bytes
 *    count as unused).
 *
 * Threads: any number of callers (the FUSE worker threads). One mutex guards
 * the model; a pfsm_file has its own mutex, taken before the model's.
 * Failure: allocation failures abort (xcalloc); nothing else can fail. */
#ifndef SEER_PFSEMU_MODEL_H
#define SEER_PFSEMU_MODEL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pfsm_config {
	uint64_t bandwidth;    /* bytes/s shared by every RPC; 0 = unlimited */
	uint64_t burst;        /* bytes that may pass at once after idle time */
	uint64_t lat_ns;       /* per read RPC */
	uint64_t meta_lat_ns;  /* per metadata operation */
	uint64_t mount_limit;  /* requests in flight over the whole mount; 0 = unlimited */
	uint64_t ost_limit;    /* read RPCs in flight per OST; 0 = unlimited */
	uint64_t meta_limit;   /* metadata operations in flight; 0 = unlimited */
	unsigned osts;         /* OSTs the files are spread over (>= 1) */
	uint64_t rpc_size;     /* largest read RPC, bytes (> 0) */
	uint64_t ra_max;       /* readahead window per open file, bytes; 0 = off */
};

/* An admitted request: [start, end) in virtual time; prev_end is when the
 * request it replaced on the same server ended (0 for a server not busy). */
struct pfsm_slot {
	uint64_t start, end, prev_end;
};

/* N servers in arrival order: a min-heap (on end) of the admitted requests
 * not known to be finished. */
struct pfsm_queue {
	char name[16];
	uint64_t limit;          /* 0 = unlimited */
	struct pfsm_slot *h;
	size_t n, cap;
	uint64_t requests;       /* admitted since the last reset */
	uint64_t wait_ns;        /* sum of start - arrival */
	uint64_t hwm;            /* most requests in flight at once since the reset */
};

struct pfsm_counters {
	uint64_t rpcs;            /* read RPCs (demand and readahead) */
	uint64_t rpc_bytes;       /* bytes they moved (charged to the bandwidth) */
	uint64_t ra_rpcs;         /* RPCs wholly beyond the read that issued them */
	uint64_t ra_bytes;        /* bytes fetched beyond the read that issued them */
	uint64_t ra_hit_bytes;    /* bytes of reads served by earlier readahead */
	uint64_t ra_unused_bytes; /* readahead bytes dropped unread */
	uint64_t meta_ops;
};

struct pfsm {
	struct pfsm_config c;
	pthread_mutex_t lock;
	uint64_t clock;              /* latest arrival seen: arrivals never go back */
	uint64_t burst_ns, tat;      /* token bucket as a virtual schedule */
	struct pfsm_queue mount, mdt;
	struct pfsm_queue *ost;      /* c.osts of them */
	struct pfsm_counters k;
	uint64_t busy_done;          /* busy time of segments that ended */
	struct pfsm_slot *seg;       /* disjoint busy segments not yet ended */
	size_t nseg, capseg;
};

/* A readahead RPC: bytes [off, off + len) of the file arrive at `end`. */
struct pfsm_piece {
	uint64_t off, len, end;
};

/* Per open file (one per open file description). */
struct pfsm_file {
	pthread_mutex_t lock;
	unsigned ost;
	uint64_t next;            /* end offset of the last read; UINT64_MAX before any */
	uint64_t nreads;
	unsigned seq;             /* consecutive sequential reads, this one included */
	uint64_t win;             /* readahead window beyond the read, bytes */
	struct pfsm_piece *p;     /* readahead in flight or arrived, ascending, contiguous */
	size_t np, cap;
};

/* What one read cost. */
struct pfsm_read {
	uint64_t done;            /* when every byte of the read has arrived */
	uint64_t rpcs, rpc_bytes; /* RPCs this read issued (readahead included) */
	uint64_t hit_bytes;       /* bytes of the read already fetched by readahead */
};

/* A point-in-time copy of the counters for the stats document. */
struct pfsm_queue_snap {
	char name[16];
	uint64_t limit, requests, wait_ns, hwm, inflight;
};

struct pfsm_snap {
	struct pfsm_counters k;
	uint64_t busy_ns;
	size_t nq;                /* queues: mount, mdt, then the OSTs */
	struct pfsm_queue_snap *q;
};

/* c->osts, c->rpc_size must be > 0. */
void pfsm_init(struct pfsm *m, const struct pfsm_config *c, uint64_t now);
void pfsm_destroy(struct pfsm *m);

/* `bytes` written arriving at now, charged to the shared bandwidth (the
 * read bucket) without holding a queue slot: when its last byte has passed
 * (seer-pfsemu --write-shares-bandwidth). */
uint64_t pfsm_charge(struct pfsm *m, uint64_t now, uint64_t bytes);
/* A metadata operation arriving at now: its completion time. */
uint64_t pfsm_meta(struct pfsm *m, uint64_t now);

/* A read of [off, off + n) (n > 0, inside the file of fsize bytes) arriving
 * at now through open file f: RPCs, readahead, completion time in r. */
void pfsm_read(struct pfsm *m, struct pfsm_file *f, uint64_t now, uint64_t off, uint64_t n,
	       uint64_t fsize, struct pfsm_read *r);

/* One read RPC moving `bytes` (0 for a failed one), outside the readahead
 * logic (injected faults): its completion time; r as pfsm_read. */
void pfsm_rpc(struct pfsm *m, struct pfsm_file *f, uint64_t now, uint64_t bytes,
	      struct pfsm_read *r);

/* The OST a file lives on (a hash of its path, like stripe count 1). */
unsigned pfsm_ost_of(const struct pfsm *m, const char *path);
void pfsm_file_init(struct pfsm_file *f, unsigned ost);
/* Close: unread readahead counts as unused. */
void pfsm_file_close(struct pfsm *m, struct pfsm_file *f);

/* Zero the counters at now (high-water marks restart at what is in flight). */
void pfsm_reset(struct pfsm *m, uint64_t now);
/* Fill s (s->q allocated; free with pfsm_snap_free). */
void pfsm_snapshot(struct pfsm *m, uint64_t now, struct pfsm_snap *s);
void pfsm_snap_free(struct pfsm_snap *s);

#endif
