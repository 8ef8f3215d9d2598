/* seer wire protocol: what seerd and libseer must agree on byte for byte.
 *
 * Transport: a unix SOCK_SEQPACKET socket (one message per packet) for the
 * handshake and control requests, and three shared-memory segments per trainer:
 *
 *   arena     memfd, sealed F_SEAL_FUTURE_WRITE: trainers can only map it
 *             read-only. Holds the sample type table and all sample bytes
 *             (RAM cache and staging). Shared by every trainer of the daemon.
 *   ctrl_out  memfd, sealed like the arena: written by the daemon only.
 *             Out-ring (batch slot indices, daemon -> trainer) and the batch
 *             slots themselves (descriptors).
 *   ctrl_in   memfd, written by the trainer: release ring (slot indices,
 *             trainer -> daemon), its consumer position and wait flag.
 *             The daemon reads it as untrusted input and validates every value.
 *
 * No segment holds a pointer: only offsets from the segment's start.
 * Ring indices are free-running 32-bit counters masked on access; each index
 * has exactly one writer.
 */
#ifndef SEER_PROTO_H
#define SEER_PROTO_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SEER_PROTO_VERSION 6u /* 2: the batch tensor in struct seer_wire_slot, or checkpoint records
				 * in the handshake (two builds); 3: both; 4: ctrl_out's ring_below;
				 * 5: the HELLO's held; 6: the job's definition in the HELLO */
#define SEER_CACHELINE 64

#define SEER_MAGIC_HELLO 0x4f4c4c4548524553ull /* "SERHELLO" */
#define SEER_MAGIC_ARENA 0x414e455241524553ull /* "SERARENA" */
#define SEER_MAGIC_CTOUT 0x54554f4c54435253ull /* "SRCTLOUT" */
#define SEER_MAGIC_CTIN 0x4e494c4c54435253ull  /* "SRCTLLIN" */

#define SEER_JOBID_MAX 64
#define SEER_DATASET_MAX 1024 /* the HELLO's dataset path, NUL included */
#define SEER_ERRMSG_MAX 256
#define SEER_MAX_DIMS 8

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "32-bit atomics must be lock-free");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free");

/* ---- socket messages ---------------------------------------------------- */

enum seer_msg_kind {
	SEER_MSG_HELLO = 1,   /* trainer -> daemon: attach as a trainer rank */
	SEER_MSG_WELCOME = 2, /* daemon -> trainer: reply + SCM_RIGHTS fds */
	SEER_MSG_SEEK = 3,    /* trainer -> daemon: restart stream at (epoch, step) */
	SEER_MSG_SEEK_OK = 4, /* daemon -> trainer */
	SEER_MSG_CTL = 5,     /* seerctl -> daemon: a command (status, config, stop) */
	SEER_MSG_CTL_REPLY = 6, /* daemon -> seerctl: struct seer_msg_ctl_reply + text */
	SEER_MSG_ERROR = 7,   /* daemon -> peer: request refused, text in msg */
	SEER_MSG_RECORD = 8,  /* a position record, in pieces: trainer -> daemon after a
				 HELLO, daemon -> trainer after a WELCOME */
	SEER_MSG_PROGRESS = 9, /* daemon -> trainer, instead of a WELCOME while seerd is still
				  starting (its catalog scan): a struct seer_msg_welcome with
				  this kind, status 0 and the progress in msg ("scanning: N
				  of M files"); the daemon then closes the connection. The
				  daemon is alive: libseer connects again, its connect
				  timeout counted from this answer. */
};

/* seer_msg_hello.job: which of the job's fields the trainer declares (the
 * same values as include/seer.h's SEER_JOB_*). */
#define SEER_HELLO_JOB_BATCH_SIZE 1u
#define SEER_HELLO_JOB_SHUFFLE 2u
#define SEER_HELLO_JOB_DROP_LAST 4u
#define SEER_HELLO_JOB_SEED 8u
#define SEER_HELLO_JOB_EPOCHS 16u
#define SEER_HELLO_JOB_DATASET 32u
#define SEER_HELLO_JOB_ALL 63u

/* Start position in a HELLO/SEEK: resume where this rank's last session left
 * off (the first batch it did not release), or at the job's start. */
#define SEER_POS_RESUME UINT64_MAX

struct seer_msg_hello {
	uint64_t magic;    /* SEER_MAGIC_HELLO */
	uint32_t kind;     /* SEER_MSG_HELLO or SEER_MSG_CTL */
	uint32_t version;  /* SEER_PROTO_VERSION */
	uint32_t rank;
	uint32_t world;
	uint64_t epoch;    /* start position or SEER_POS_RESUME */
	uint64_t step;
	char job_id[SEER_JOBID_MAX]; /* NUL-terminated; must match the daemon's */
	char ctl[128];     /* SEER_MSG_CTL only: the command, NUL-terminated */
	uint32_t record_len; /* HELLO: bytes of the checkpoint record that follow in
				SEER_MSG_RECORD packets (0: none); the trainer
				resumes after the batches it says were consumed */
	uint32_t held;     /* HELLO: batches the trainer may hold at once (taken, not
			      released; seer_options_t.max_held); 0: the daemon's
			      [job] max_held. seerd refuses more than its batch slots
			      and the trainer's staging can serve (version 5) */
	/* HELLO, version 6: the job's definition as the trainer's script declares
	 * it (the DataLoader's arguments). A field counts only with its
	 * SEER_HELLO_JOB_* bit in `job`. seerd takes a value its config left
	 * unset from the first trainer (one node, world size not fixed), and
	 * refuses any other disagreement naming both values and their sources
	 * (daemon/jobdef.c). */
	uint32_t job;      /* SEER_HELLO_JOB_* bits */
	uint32_t batch_size;
	uint64_t seed;
	uint64_t epochs;
	uint32_t shuffle;  /* 0 or 1 */
	uint32_t drop_last;
	char dataset[SEER_DATASET_MAX]; /* the dataset's path, resolved by the trainer;
					   NUL-terminated */
};
_Static_assert(sizeof(struct seer_msg_hello) == 1296, "hello layout");
/* The version is at the same offset in every protocol version, so a daemon
 * can name it in its refusal whatever the size of the hello. */
_Static_assert(offsetof(struct seer_msg_hello, version) == 12, "hello version offset");

struct seer_msg_welcome {
	uint32_t kind;           /* SEER_MSG_WELCOME or SEER_MSG_ERROR */
	int32_t status;          /* 0, or a negative seer error code */
	char msg[SEER_ERRMSG_MAX]; /* error text when status != 0 */
	uint64_t nsamples;       /* samples in the catalog */
	uint64_t epochs;         /* epochs in the job */
	uint64_t batches_per_epoch; /* per trainer, identical for every rank */
	uint64_t start;          /* first global batch index the stream delivers */
	uint64_t arena_size;
	uint64_t ctrl_out_size;
	uint64_t ctrl_in_size;
	uint32_t batch_size;
	uint32_t nslots;
	uint32_t node;           /* the daemon's node rank */
	uint32_t nodes;
	uint64_t seed;
	uint32_t drop_last;
	uint32_t shuffle;
	uint64_t dataset_hash;   /* the catalog's content hash (checkpoint records carry it) */
	uint32_t record_len;     /* bytes of the record the job's plan was made from, sent
				    after the WELCOME in SEER_MSG_RECORD packets (0: the
				    plan of a fresh job) */
	uint32_t pad_;
	uint64_t resume_epoch;   /* the epoch re-sharded by an elastic resume (0: none) */
	uint64_t resume_batches; /* its batches per rank (batches_per_epoch: none); global
				    batch numbers follow sampler_timeline (src/sampler/sampler_elastic.h) */
};
_Static_assert(sizeof(struct seer_msg_welcome) == 384, "welcome layout");
/* A WELCOME with status 0 carries 4 fds: arena, ctrl_out, ctrl_in, eventfd
 * (the trainer writes 1 to it when ctrl_out->need_wakeup is set). */
#define SEER_WELCOME_NFDS 4

struct seer_msg_seek {
	uint32_t kind;    /* SEER_MSG_SEEK / SEER_MSG_SEEK_OK */
	int32_t status;
	uint64_t epoch;
	uint64_t step;
	uint64_t start;   /* SEEK_OK: first global batch of the new stream */
	uint64_t prod;    /* SEEK_OK: out-ring producer index at the restart */
};
_Static_assert(sizeof(struct seer_msg_seek) == 40, "seek layout");

/* A position record (src/sampler/sampler_record.h's byte form) in packets: this header,
 * then `len` bytes at `offset` of the record's `total`. Packets come in order;
 * the last ends at total. */
struct seer_msg_record {
	uint32_t kind;    /* SEER_MSG_RECORD */
	uint32_t len;
	uint64_t offset;
	uint64_t total;
};
_Static_assert(sizeof(struct seer_msg_record) == 24, "record layout");
#define SEER_RECORD_CHUNK 32768
#define SEER_RECORD_MAX (16u << 20) /* a record of 2M per-rank counts */

/* Reply to a CTL request: one or more packets, each this header followed by
 * text; the last has more == 0. */
struct seer_msg_ctl_reply {
	uint32_t kind;    /* SEER_MSG_CTL_REPLY */
	int32_t status;   /* 0, or a negative error: the text says why */
	uint32_t more;    /* further packets follow */
	uint32_t len;     /* bytes of text after this header */
};
#define SEER_CTL_CHUNK 32768

/* ---- checkpoints (daemon/checkpoint.c, client/checkpoint.c) -------------
 *
 * A connection whose first packet starts with SEER_MAGIC_CKPT (instead of a
 * HELLO's magic) belongs to the checkpoint stage. Every packet either way is
 * one struct seer_msg_ckpt; the kinds below are numbered after the others
 * with room left, and have their own version (SEER_CKPT_VERSION), so a change
 * of the HELLO does not touch them.
 *
 *   BEGIN  path, size, timeout_ms -> REPLY with id and one fd: a memfd of
 *          `size` bytes (sealed against resizing) the trainer maps writable
 *          and fills. Waits up to timeout_ms for [checkpoint] memory.
 *   COMMIT id -> REPLY: the bytes are seerd's; the trainer unmaps them.
 *          Closing the connection before COMMIT abandons the checkpoint.
 *   WAIT   id, path, level, timeout_ms -> REPLY when the level is reached
 *          (status 0), failed (status < 0, msg says why) or the time is up
 *          (-ETIMEDOUT). Any checkpoint connection may ask about any id.
 *   STATE  id, path -> REPLY with state[] and drained.
 *   OPEN   path -> REPLY with one read-only fd of the newest complete copy
 *          seerd holds (level says where), or -ENOENT: read the PFS. */
#define SEER_MAGIC_CKPT 0x54504b4352455353ull /* "SSERCKPT" */
#define SEER_CKPT_VERSION 1u
#define SEER_CKPT_PATH_MAX 4096

enum seer_ckpt_kind {
	SEER_MSG_CKPT_BEGIN = 32,
	SEER_MSG_CKPT_COMMIT = 33,
	SEER_MSG_CKPT_WAIT = 34,
	SEER_MSG_CKPT_STATE = 35,
	SEER_MSG_CKPT_OPEN = 36,
	SEER_MSG_CKPT_REPLY = 37,
};

/* Levels (index of state[]) and the state of one level. */
enum seer_ckpt_level_code { SEER_CKL_MEM = 0, SEER_CKL_LOCAL = 1, SEER_CKL_PEER = 2,
			    SEER_CKL_PFS = 3, SEER_CKL_COUNT_ = 4 };
enum seer_ckpt_state_code {
	SEER_CKS_PENDING = 0, /* not there yet */
	SEER_CKS_DONE = 1,    /* complete (fsync'd) at this level */
	SEER_CKS_FAILED = 2,  /* failed (msg: why); seerd retries a PFS drain */
	SEER_CKS_OFF = 3,     /* this level is not used (no NVMe, no peers) */
	SEER_CKS_PRUNED = 4,  /* was complete; removed by retention */
};

struct seer_msg_ckpt {
	uint64_t magic;      /* SEER_MAGIC_CKPT */
	uint32_t kind;       /* SEER_MSG_CKPT_* */
	uint32_t version;    /* SEER_CKPT_VERSION */
	int32_t status;      /* REPLY: 0 or a negative errno / SEER_E* code */
	uint32_t level;      /* WAIT: enum seer_ckpt_level_code; OPEN reply: where from */
	uint64_t id;         /* the checkpoint (BEGIN's reply names it) */
	uint64_t size;       /* bytes */
	int64_t timeout_ms;  /* BEGIN, WAIT: < 0 waits for ever */
	uint64_t drained;    /* STATE reply: bytes written to the PFS so far */
	uint32_t state[SEER_CKL_COUNT_]; /* STATE/WAIT reply: enum seer_ckpt_state_code */
	char job_id[SEER_JOBID_MAX];
	char msg[SEER_ERRMSG_MAX];       /* REPLY: why, when status != 0 */
	char path[SEER_CKPT_PATH_MAX];   /* absolute destination on the PFS */
};
_Static_assert(sizeof(struct seer_msg_ckpt) == 4488, "ckpt message layout");
_Static_assert(offsetof(struct seer_msg_ckpt, magic) == 0, "ckpt magic first");

/* ---- the arena ---------------------------------------------------------- */

enum seer_dtype {
	SEER_DT_BYTES = 0, /* opaque bytes (an encoded image, a record) */
	SEER_DT_U8, SEER_DT_I8, SEER_DT_U16, SEER_DT_I16, SEER_DT_U32,
	SEER_DT_I32, SEER_DT_U64, SEER_DT_I64, SEER_DT_F16, SEER_DT_F32,
	SEER_DT_F64, SEER_DT_BOOL,
	SEER_DT_COUNT_
};

/* Shape and dtype of a sample; samples refer to entries by index. */
struct seer_wire_type {
	uint32_t dtype;   /* enum seer_dtype */
	uint32_t ndim;    /* 0..SEER_MAX_DIMS; 0 with BYTES: 1-D of the length */
	uint64_t dims[SEER_MAX_DIMS];
};
_Static_assert(sizeof(struct seer_wire_type) == 72, "type layout");

struct seer_arena_hdr {
	uint64_t magic;       /* SEER_MAGIC_ARENA */
	uint32_t version;
	uint32_t creator_pid;
	uint64_t size;        /* whole segment, bytes */
	uint64_t types_off;   /* offset of struct seer_wire_type[ntypes] */
	uint32_t ntypes;
	uint32_t pad_;
	uint64_t data_off;    /* first byte of sample storage */
};
_Static_assert(sizeof(struct seer_arena_hdr) == 48, "arena header layout");

/* ---- control regions ---------------------------------------------------- */

/* One sample of a delivered batch. Bytes live in the arena at [offset,
 * offset + length); they stay put until the batch slot is released. */
struct seer_wire_sample {
	uint64_t id;      /* position in the catalog */
	uint64_t offset;  /* in the arena */
	uint64_t length;  /* bytes */
	int64_t label;
	uint32_t type;    /* index in the arena's type table */
	uint32_t pad_;
};
_Static_assert(sizeof(struct seer_wire_sample) == 40, "sample layout");

/* Layouts of a batch tensor. */
enum seer_layout {
	SEER_LY_NONE = 0, /* no batch tensor: samples are separate byte ranges */
	SEER_LY_NCHW = 1, /* dims [n, C, H, W] (float16/float32 outputs) */
	SEER_LY_NHWC = 2, /* dims [n, H, W, C] (uint8 output) */
};

/* A batch of fixed-shape tensors ([transform] decode = image): one C-
 * contiguous block in the arena, sample i at offset + i * sample_bytes.
 * Every sample descriptor of the batch points into it (offset + i *
 * sample_bytes, length sample_bytes, type = the per-sample type), so the
 * per-sample view and the batch view are the same bytes. */
struct seer_wire_tensor {
	uint64_t offset;       /* arena offset of sample 0, 64-byte aligned */
	uint64_t sample_bytes; /* bytes of one sample's tensor = product(dims[1..]) * dtype size */
	uint64_t dims[4];      /* dims[0] = the slot's n */
	uint32_t dtype;        /* enum seer_dtype: SEER_DT_U8, SEER_DT_F16 or SEER_DT_F32 */
	uint32_t ndim;         /* 4 */
	uint32_t layout;       /* enum seer_layout (SEER_LY_*) */
	uint32_t type;         /* index of one sample's type ([C,H,W] or [H,W,C]) in the table */
};
_Static_assert(sizeof(struct seer_wire_tensor) == 64, "tensor layout");

#define SEER_SLOT_TENSOR 1u /* seer_wire_slot.flags: `tensor` describes the batch */

struct seer_wire_slot {
	uint64_t global;   /* the rank's batch number through the job (sampler_timeline) */
	uint64_t epoch;
	uint64_t step;
	uint32_t n;        /* samples in this batch */
	uint32_t flags;    /* SEER_SLOT_* */
	int32_t status;    /* 0, or a negative seer error: the batch failed */
	uint32_t pad_;
	char msg[SEER_ERRMSG_MAX]; /* why, when status != 0 */
	struct seer_wire_tensor tensor; /* valid when flags & SEER_SLOT_TENSOR */
	/* struct seer_wire_sample samples[batch_size] follows */
};
_Static_assert(sizeof(struct seer_wire_slot) == 360, "slot layout");
_Static_assert(offsetof(struct seer_wire_slot, tensor) == 296, "slot tensor offset");
_Static_assert(sizeof(struct seer_wire_slot) % 8 == 0, "slot alignment");

enum seer_daemon_state {
	SEER_STATE_RUNNING = 0,
	SEER_STATE_STOPPING = 1, /* drain: no new batches; trainers see SEER_ESHUTDOWN */
	SEER_STATE_EVICTED = 2,  /* this trainer was disconnected by the daemon */
};

struct seer_ctrl_out {
	uint64_t magic;       /* SEER_MAGIC_CTOUT */
	uint32_t version;
	uint32_t creator_pid;
	uint64_t size;
	uint32_t nslots;      /* power of two */
	uint32_t batch_size;
	uint64_t slot_stride; /* bytes per slot */
	uint64_t ring_off;    /* uint32_t ring[nslots]: slot indices */
	uint64_t slots_off;   /* first slot */
	uint32_t max_held;    /* [job] max_held: batches the trainer may hold at once */
	uint8_t pad0_[SEER_CACHELINE - 60];

	/* Producer index of the out-ring; written by the daemon only, with a
	 * store-release after the slot and ring entry are written. */
	_Alignas(SEER_CACHELINE) _Atomic uint32_t prod;
	/* Bumped (release) after every publish and every state change; the
	 * trainer futex-waits on it, so no wake-up can be lost. */
	_Atomic uint32_t doorbell;
	uint8_t pad1_[SEER_CACHELINE - 8];

	_Alignas(SEER_CACHELINE) _Atomic uint32_t state;  /* enum seer_daemon_state */
	_Atomic uint32_t need_wakeup; /* daemon sleeps: write the eventfd (see ring_below) */
	/* While need_wakeup is set, the trainer writes the eventfd after taking
	 * or releasing a batch only if ring_below is 0 or fewer than ring_below
	 * published batches remain untaken in its ring. The daemon sets it
	 * before need_wakeup: half the lookahead when every trainer on the node
	 * has at least that many ready (a take or release gives it nothing
	 * urgent: it is woken once per few batches instead of twice per batch),
	 * else 0 (every take and release rings). An empty ring always rings. */
	_Atomic uint32_t ring_below;
	_Atomic uint32_t rel_cons;    /* release-ring consumer index (daemon's) */
	/* held_block is 1 while the daemon cannot prepare the trainer's next
	 * batch until the trainer releases one (the oldest batch it holds pins
	 * its staging and slots, which are reclaimed in order); held_rel is the
	 * release-ring position the daemon had consumed when it found so
	 * (written before held_block, which is stored with release). A trainer
	 * that finds its ring empty, held_block set and held_rel equal to its
	 * own rel_prod would wait for ever: seer_next fails with -EDEADLK. */
	_Atomic uint32_t held_block;
	_Atomic uint32_t held_rel;
	/* The node's staging [stage_lo, stage_hi) and this trainer's share of it
	 * [own_lo, own_hi) (arena offsets), written once the rank map is known,
	 * before stage_set is stored (release) as 1. The trainer's prefault
	 * (client/prefault.c) then leaves the other trainers' shares alone.
	 * stage_set 0 (before that, or an older daemon): nothing is known. */
	_Atomic uint32_t stage_set;
	uint32_t pad2_;
	uint64_t stage_lo, stage_hi, own_lo, own_hi; /* (ends the line) */
};
_Static_assert(offsetof(struct seer_ctrl_out, prod) % SEER_CACHELINE == 0, "prod on its own line");
_Static_assert(offsetof(struct seer_ctrl_out, state) % SEER_CACHELINE == 0, "state on its own line");
_Static_assert(offsetof(struct seer_ctrl_out, stage_lo) % 8 == 0, "stage ranges aligned");
_Static_assert(sizeof(struct seer_ctrl_out) == 3 * SEER_CACHELINE, "ctrl_out header layout");

struct seer_ctrl_in {
	uint64_t magic;       /* SEER_MAGIC_CTIN, written by the daemon at creation */
	uint32_t version;
	uint32_t nslots;
	uint64_t ring_off;    /* uint32_t rel_ring[nslots] */
	uint8_t pad0_[SEER_CACHELINE - 24];

	/* Release ring producer index; written by the trainer with a
	 * store-release after the ring entry. */
	_Alignas(SEER_CACHELINE) _Atomic uint32_t rel_prod;
	uint8_t pad1_[SEER_CACHELINE - 4];

	/* Out-ring consumer index (trainer-owned; a hint the daemon uses to
	 * keep `lookahead` batches ahead of what the trainer took). */
	_Alignas(SEER_CACHELINE) _Atomic uint32_t cons;
	_Atomic uint32_t waiting;     /* trainer is (about to be) in futex wait */
	_Atomic uint64_t stall_ns;    /* trainer's time waiting for batches (stats only) */
	_Atomic uint64_t stalls;      /* batches it had to wait for (stats only) */
	uint8_t pad2_[SEER_CACHELINE - 24];
};
_Static_assert(offsetof(struct seer_ctrl_in, rel_prod) % SEER_CACHELINE == 0, "rel_prod on its own line");
_Static_assert(offsetof(struct seer_ctrl_in, cons) % SEER_CACHELINE == 0, "cons on its own line");
_Static_assert(sizeof(struct seer_ctrl_in) == 3 * SEER_CACHELINE, "ctrl_in header layout");

static inline uint64_t seer_slot_stride(uint32_t batch_size)
{
	uint64_t s = sizeof(struct seer_wire_slot) +
		(uint64_t)batch_size * sizeof(struct seer_wire_sample);
	return (s + SEER_CACHELINE - 1) & ~(uint64_t)(SEER_CACHELINE - 1);
}

#endif /* SEER_PROTO_H */
