/* The checkpoint stage's private parts, shared by its files:
 *   checkpoint.c        the stage's start, finish, teardown, seerctl list,
 *                       the local writer (memory -> NVMe)
 *   checkpoint_peer.c   the peer level: the links, the sender and receiver
 *                       threads (the copies to node + 1)
 *   checkpoint_drain.c  the drain thread: -> the PFS path
 *   checkpoint_svc.c    the service thread: the trainers' connections
 *   checkpoint_held.c   the copies held for node - 1
 *   checkpoint_store.c  this node's own copies: the items, their memory and
 *                       NVMe records, retention, the file helpers
 * Each calls only the files below it in this list (checkpoint.c calls all;
 * checkpoint_store.c none). Nothing outside these files includes it.
 *
 * Every field of struct ckpt, of its items and of its held copies is under
 * ck->mu, except what a thread reads from an item it marked busy or
 * peer_busy (the bytes, the path), which nobody frees or changes meanwhile,
 * and what is set before the threads that read it start (cfg, dir, node,
 * nnodes, peer.secret, peer.addr, peer.disk). */
#ifndef SEERD_CHECKPOINT_INT_H
#define SEERD_CHECKPOINT_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "../proto/seer_proto.h"
#include "checkpoint.h"

#define CK_CHUNK (8u << 20)     /* bytes per write to NVMe, per peer message */
#define CK_DRAIN_PIECE (1u << 20) /* bytes per write of the drain to the PFS */
#define CK_RETRY_S 10.0         /* a failed drain is tried again after this */
#define CK_KEEP_ITEMS 256       /* finished checkpoints remembered for seerctl */
/* the levels' names (index: SEER_CKL_*), in replies and seerctl */
#define CK_LEVEL_NAMES { "memory", "local", "peer", "pfs" }

struct ck_item {
	struct ck_item *next;      /* list in commit (begin) order, oldest first */
	uint64_t id;
	char *path;
	uint64_t size;             /* the checkpoint's bytes (COMMIT may say fewer than alloc) */
	uint64_t alloc;            /* bytes of memfd, counted in mem_used while it is held */
	double t_begin, t_commit, t_pfs; /* now_s(); t_pfs: drained */
	time_t wall_pfs;           /* time() the drain finished (for OPEN's "newest") */
	int memfd;                 /* the bytes in memory, or -1 */
	uint8_t *mem;              /* seerd's mapping of memfd */
	bool committed;
	bool on_nvme;              /* <dir>/<id>.data and .meta exist */
	bool busy;                 /* a writer thread reads it: not freed, not pruned */
	bool peer_busy;            /* the peer sender reads it: not freed, not pruned */
	char peer_why[SEER_ERRMSG_MAX]; /* why the peer copy failed */
	bool recovered;            /* found on NVMe at start */
	/* what its NVMe record (<id>.meta) says; set under mu by the thread
	 * that then calls ckpt_store_meta_write */
	bool rec_drained;          /* on the PFS */
	int64_t rec_peer;          /* the node that confirmed a complete copy (-1: none) */
	uint8_t rec_peer_disk[16]; /* that node's receiver id (its answer; zero: unknown) */
	/* the peer copy's retries (checkpoint_peer.c) */
	uint32_t peer_fails;       /* failed tries so far */
	double peer_retry_at;      /* now_s() of the next try while "peer" is failed */
	bool peer_retry;           /* failed, and tried again at peer_retry_at */
	uint32_t st[SEER_CKL_COUNT_];
	char why[SEER_ERRMSG_MAX]; /* the last failure */
	uint64_t drained;          /* bytes of the current drain written */
	uint64_t mode_bytes[DRAIN_NMODES]; /* ... of them written in each pacing mode */
	double drain_t0;
	double retry_at;
	uint32_t drain_fails;
};

/* A copy this node keeps for a peer node ([checkpoint] peers): on NVMe under
 * <dir>/peer-<origin>/, or in a memfd without an NVMe tier. */
struct ck_held {
	struct ck_held *next;      /* oldest first */
	uint32_t origin;           /* the node that sent it */
	uint64_t id, size;
	char *path;
	int memfd;                 /* -1: on NVMe */
	time_t wall;               /* when it was complete here */
};

/* The peer level's part of the stage (checkpoint_peer.c). */
struct ck_peers {
	uint32_t node;             /* the node this one sends to: (node + 1) % nnodes */
	struct net_link *rx;       /* the receiver's: node - 1's copies (NULL: none) */
	struct net_link *tx;       /* the sender's: the copies to node + 1 */
	uint64_t to;               /* node + 1's receiver, in tx's address vector */
	uint8_t tx_addr[100];      /* tx's address (each HDR carries it, for the answer) */
	size_t tx_addr_len;
	uint32_t seq;              /* the sender's copy serial (the sender thread's) */
	uint8_t secret[16];        /* a sender names it: only the job's seerd push copies */
	char addr[256];            /* the provider of the copies to node + 1 ("": no peer) */
	uint8_t dest_secret[16];   /* the peer node's secret */
	/* a receiver's id: random, kept in <dir>/peer-id (created once; per
	 * process without NVMe), sent in each answer: a confirmation counts
	 * at start only if the peer announces the same id (not a replaced
	 * node with an empty disk) */
	uint8_t disk[16];          /* this node's */
	uint8_t dest_disk[16];     /* the peer node's, from the exchange at start */
	pthread_t th_tx, th_rx;
	bool started_tx, started_rx;
};

/* The copies held for node - 1 (checkpoint_held.c). */
struct ck_held_list {
	struct ck_held *copies;    /* ordered by id, oldest first */
	uint64_t nvme_used;        /* bytes of held copies on NVMe (memfds count in mem_used) */
};

struct ck_conn;
struct net_link;

/* The service thread's part of the stage (checkpoint_svc.c). */
struct ck_svc {
	pthread_t th;
	bool started;
	int efd;                   /* wakes the service thread */
	/* handed by the dispatcher, taken by the service thread */
	struct ck_in { int fd; pid_t pid; size_t n; struct seer_msg_ckpt m; } *in;
	size_t nin, cap_in;
	/* the service thread's own */
	struct ck_conn *conns;
	size_t nconns, cap_conns;
};

/* The drain's part of the stage (checkpoint_drain.c). */
struct ck_drain {
	pthread_t th;
	bool started;
	double rate;               /* bytes/s of the last drain */
	enum drain_mode mode;      /* the running drain's pacing (DRAIN_IDLE: none) */
};

struct ckpt {
	const struct seer_config *cfg;
	pthread_mutex_t mu;
	pthread_mutex_t meta_mu;   /* one record write at a time (taken before mu) */
	pthread_cond_t cv;         /* work for the writers, or stop */
	pthread_cond_t idle;       /* a writer finished something (ckpt_finish) */
	pthread_t th_local;        /* the local writer (checkpoint.c) */
	bool started_local;
	bool stop, stopping;       /* stop: threads leave; stopping: no new BEGIN */
	char dir[4096];            /* NVMe directory ("" : none) */
	ckpt_outlook_fn outlook;
	void *outlook_arg;
	struct ck_item *items;
	uint64_t mem_used, nvme_used, last_id;
	struct ck_svc svc;         /* the connections */
	struct ck_drain drain;     /* the drain to the PFS */
	uint32_t node, nnodes;
	struct ck_peers peer;      /* [checkpoint] peers = 1, several nodes */
	struct ck_held_list held;  /* the copies this node holds for node - 1 */
};

/* ---- the peer copy's wire (checkpoint_peer.c sends, checkpoint_held.c
 * receives) ---------------------------------------------------------------- */

/* After END the sender waits [net] peer_timeout_ms + size / this for the
 * answer (the receiver's fsync); the receiver writes back every
 * CK_PEER_WRITEBACK bytes meanwhile, so that its final fsync is short. */
#define CK_PEER_FSYNC_RATE 50e6
#define CK_PEER_WRITEBACK (64ull << 20)

/* The copy over libfabric (src/net/net_link.h), tagged messages: HDR (a
 * struct ck_peer_hdr, then the sender's address: uint32_t length and its
 * bytes, so that the receiver can answer), DATA (CK_PEER_MSG bytes each but
 * the last; the tag counts them), END (the bytes' crc32c, uint32_t), and
 * the receiver's ACK (a struct ck_peer_ack). The tag: type << 60 | copy
 * serial (28 bits) << 32 | DATA's index. A message of another copy than the
 * current one is dropped; a HDR ends the copy in progress (not kept). */
#define CK_PEER_MAGIC 0x53434b52u /* "SCKR", version 3 (the answer names the disk) */
#define CK_PEER_MSG (4u << 20)  /* the links' bounce buffers */
#define CK_PEER_ADDR_MAX 100    /* bytes of a link address (hex in the allgather) */
enum { CKT_HDR = 1, CKT_DATA = 2, CKT_END = 3, CKT_ACK = 4 };
#define CKT(type, seq, idx) ((uint64_t)(type) << 60 | ((uint64_t)(seq) & 0x0fffffffu) << 32 | \
			     (uint64_t)(uint32_t)(idx))
#define CKT_TYPE(tag) ((unsigned)((tag) >> 60))
#define CKT_SEQ(tag) ((uint32_t)((tag) >> 32) & 0x0fffffffu)
#define CKT_IDX(tag) ((uint32_t)(tag))
struct ck_peer_hdr {
	uint32_t magic;
	uint32_t origin;
	uint64_t id, size;
	uint8_t secret[16];
	char path[SEER_CKPT_PATH_MAX];
};
struct ck_peer_ack {
	int32_t status;            /* 0: complete, fsync'd and its checksum right */
	uint8_t disk[16];          /* the receiver's id (struct ck_peers) */
	char msg[SEER_ERRMSG_MAX];
};

/* A message taken from a link (valid until its next net_link_recv). */
struct ck_msg {
	const void *b;
	size_t n;
	uint64_t tag;
	bool have;                 /* a HDR read ahead, for the receiver's loop */
};

/* [net] peer_timeout_ms in seconds, at least 1. */
static inline double ckpt_peer_timeout_s(const struct ckpt *ck)
{
	double s = ck->cfg->net.peer_timeout_ms / 1000.0;
	return s > 1.0 ? s : 1.0;
}

/* ---- checkpoint_svc.c, for the other files ------------------------------- */

/* The service thread (pthread_create'd by ckpt_create). */
void *ckpt_svc_main(void *ck);
/* Wakes the service thread (it answers the waiters). Any thread. */
void ckpt_svc_wake(struct ckpt *ck);
/* A writer thread is done with an item (a level reached or failed):
 * retention runs, then the writers (cv), ckpt_finish (idle) and the service
 * thread (its waiting WAITs and BEGINs) are told. Under mu. */
void ckpt_svc_changed(struct ckpt *ck);
/* Teardown, after the service thread was joined: closes the connections
 * still queued or open (an uncommitted checkpoint of one is abandoned). */
void ckpt_svc_destroy(struct ckpt *ck);

/* ---- checkpoint_drain.c, for checkpoint.c --------------------------------- */

/* The drain thread (pthread_create'd by ckpt_create). */
void *ckpt_drain_main(void *ck);

/* ---- checkpoint_store.c, for every file of the stage --------------------- */

/* Unmaps and closes the item's memory, if any (mem_used drops). Under mu. */
void ckpt_store_free_mem(struct ckpt *ck, struct ck_item *it);
/* Takes the item out of the list and frees it (its memory too). Under mu. */
void ckpt_store_drop(struct ckpt *ck, struct ck_item *it);
/* Whether a thread still needs the item's bytes. Under mu. */
bool ckpt_store_in_use(const struct ck_item *it);
/* Retention (see checkpoint_store.c). Under mu. */
void ckpt_store_prune(struct ckpt *ck, uint64_t need);
/* <dir>/<id>.<ext> of this node's own copy. */
void ckpt_store_file(const struct ckpt *ck, uint64_t id, const char *ext, char *buf, size_t len);
/* pwrite of all n bytes at off: 0 or -errno. */
int ckpt_store_write_all(int fd, const uint8_t *p, size_t n, off_t off);
/* fsync of the directory holding `file`: 0 or -errno. */
int ckpt_store_fsync_dir(const char *file);
/* `text` to the file `f` through f.tmp, fsync, rename, fsync of the directory:
 * 0 or -errno (nothing left at f.tmp). */
int ckpt_store_record_write(const char *f, const char *text);
/* The item's <id>.meta from its fields (id, size, path, rec_drained,
 * rec_peer, read under mu): 0 or -errno. Without mu; by the thread that
 * holds the item busy or peer_busy (so it is not pruned meanwhile). */
int ckpt_store_meta_write(struct ckpt *ck, const struct ck_item *it);

/* One record found by ckpt_store_walk: the .meta's "key value" lines. */
struct ckpt_rec {
	const char *meta;          /* the record's file */
	char data[4400];           /* its copy: the same name ending in .data */
	int version;               /* from the first line "<magic> <version>" */
	uint64_t id, size;
	uint32_t origin;
	int drained;
	int64_t peer;              /* "peer <node>": that node confirmed a copy; -1: none */
	uint8_t peer_disk[16];     /* "peer_disk <hex>": its receiver id (zero: none) */
	char path[SEER_CKPT_PATH_MAX];
	struct stat sb;            /* of the copy */
};
/* Startup, before the threads: for each <id>.meta in `dir` whose first line
 * is `magic` 1, with an id, a path and a .data of its size, calls fn; a
 * damaged record (and its copy) is removed, naming it `what`; a .data
 * without its .meta (seerd died while writing it) and temporary files are
 * removed. A missing directory is fine. */
void ckpt_store_walk(struct ckpt *ck, const char *dir, const char *magic, const char *what,
		     void (*fn)(struct ckpt *ck, const struct ckpt_rec *r, void *arg), void *arg);

/* ---- checkpoint_peer.c, for checkpoint.c --------------------------------- */

/* seerctl: "peer" (the node copies go to, or null) into root. Under mu. */
void ckpt_peer_list_json(struct ckpt *ck, void *json_root);
/* Teardown, after ck->stop is set: joins the peer threads, closes the
 * links. */
void ckpt_peer_destroy(struct ckpt *ck);

/* ---- checkpoint_held.c, for checkpoint.c, checkpoint_svc.c and
 * checkpoint_peer.c --------------------------------------------------------- */

/* Startup, before the threads: the copies held for peer nodes that an
 * earlier seerd of this node left under <dir>/peer-<origin>/. */
void ckpt_held_recover(struct ckpt *ck);
/* The peer receiver: one copy from node - 1, its HDR in *m: room reserved,
 * bytes received and checked, fsync'd, recorded, held; or nothing kept.
 * 0, or -errno with why (-ECANCELED: seerd stops); *src (with *answer)
 * where to send the answer. A new copy's HDR read meanwhile is left in *m
 * (m->have). Without mu. */
int ckpt_held_receive(struct ckpt *ck, struct ck_msg *m, uint64_t *src, bool *answer,
		      char *why, size_t wlen);
/* OPEN: a read-only fd of the newest copy held for a peer node of `path`
 * (its id, size and path in *hit, path valid under mu), or -1. Under mu. */
int ckpt_held_open(struct ckpt *ck, const char *path, struct ck_item *hit);
/* seerctl: "held", "held_nvme", "held_memory" into root. Under mu. */
void ckpt_held_list_json(struct ckpt *ck, void *json_root);
/* Teardown, after the peer threads were joined: forgets the held copies
 * (those on NVMe stay for a later seerd; with none on NVMe, <dir>/peer-id
 * and the empty peer-<origin> folders go). */
void ckpt_held_destroy(struct ckpt *ck);

/* ---- for every file of the stage ---------------------------------------- */

/* Wait on cv (mu held) for up to s seconds (a signal or a spurious wakeup
 * ends it sooner: callers re-check their condition). */
static inline void ckpt_cond_wait_s(pthread_cond_t *cv, pthread_mutex_t *mu, double s)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	s = s > 0.0 ? s : 0.0;
	ts.tv_sec += (time_t)s;
	ts.tv_nsec += (long)((s - (double)(time_t)s) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(cv, mu, &ts);
}

#endif /* SEERD_CHECKPOINT_INT_H */
