/* config_keys.c - every configuration key: section, name, type, default,
 * range, whether all nodes of a job must agree, and its help line. Data only;
 * parsing and checks are in config.c. Read-only after load, any thread. */
#include "config.h"
#include "config_int.h"

#include "../fmt/registry.h"
#include "../util/util.h"

#define FMT_NAME(name, desc) #name,
static const char *const formats[] = { FMT_LIST(FMT_NAME) NULL };
#undef FMT_NAME
static const char *const corrupt_policies[] = { "fail", "skip", NULL };
static const char *const axes[] = { "last", "first", NULL };
static const char *const policies[] = { "seer", "nopfs", NULL };
static const char *const fill_sources[] = { "peer", "pfs", NULL };
static const char *const xf_decodes[] = { "none", "image", NULL };
static const char *const xf_crops[] = { "none", "random_resized", "center", NULL };
static const char *const xf_outputs[] = { "uint8_hwc", "float16_chw", "float32_chw", NULL };
static const char *const xf_caches[] = { "encoded", "decoded", NULL };
static const char *const coalesce_modes[] = { "auto", "on", "off", "true", "false", "yes",
					      "no", "1", "0", NULL };

#define F(field) offsetof(struct seer_config, field)
#define U64MAX UINT64_MAX
/* Byte sizes of memory and disk: 1 EiB, far beyond any node, and far from
 * 2^64 so that rounding them up (to pages, to O_DIRECT alignment) and adding
 * them cannot wrap (2^64 - 1 used to round to "0 B") */
#define SIZEMAX (1ull << 60)

const struct config_key config_keys[] = {
	{ "dataset", "path", CFG_STR, F(dataset.path), "", 0, 0, NULL, false,
	  "directory holding the dataset (required)" },
	{ "dataset", "format", CFG_ENUM, F(dataset.format), "files", 0, 0, formats, true,
	  FMT_HELP },
	{ "dataset", "extensions", CFG_STR, F(dataset.extensions), "", 0, 0, NULL, true,
	  "files format: comma list of extensions to include (empty: all files)" },
	{ "dataset", "allow_empty_classes", CFG_BOOL, F(dataset.allow_empty_classes), "false", 0, 0, NULL,
	  true, "files format: a class directory with no sample (empty, or emptied by extensions) "
	  "is warned about, not refused (torchvision's allow_empty); labels number every "
	  "directory of the root either way" },
	{ "dataset", "hdf5_data", CFG_STR, F(dataset.hdf5_data), "records", 0, 0, NULL, true,
	  "hdf5: sample dataset name, or prefix of records_0..k-1" },
	{ "dataset", "hdf5_labels", CFG_STR, F(dataset.hdf5_labels), "labels", 0, 0, NULL, true,
	  "hdf5: label dataset name (empty: no labels)" },
	{ "dataset", "npz_data", CFG_STR, F(dataset.npz_data), "x", 0, 0, NULL, true,
	  "npz: member holding the samples" },
	{ "dataset", "npz_labels", CFG_STR, F(dataset.npz_labels), "y", 0, 0, NULL, true,
	  "npz: member holding the labels (empty: no labels)" },
	{ "dataset", "npz_sample_axis", CFG_ENUM, F(dataset.npz_sample_axis), "last", 0, 0, axes, true,
	  "npz/npy: axis that indexes samples: last (DLIO: x is (d1, d2, n)) or first" },
	{ "dataset", "tar_extensions", CFG_STR, F(dataset.tar_extensions), "jpg,jpeg,png,webp", 0, 0, NULL,
	  true, "tar: comma list of member extensions (after the first dot of the base name, any "
	  "case); a sample delivers its member of the first one present" },
	{ "dataset", "tar_label", CFG_STR, F(dataset.tar_label), "cls", 0, 0, NULL, true,
	  "tar: extension of the member holding the label as an ASCII integer; a sample without "
	  "one takes its shard's class directory (root/<class>/*.tar), else -1 (empty: none)" },
	{ "dataset", "on_corrupt", CFG_ENUM, F(dataset.on_corrupt), "fail", 0, 0, corrupt_policies, true,
	  "a sample that fails its checks: fail its batch, or skip (substitute the next valid one; "
	  "tar: damaged samples found at scan are left out of the catalog, warned)" },
	{ "dataset", "rebuild_catalog", CFG_BOOL, F(dataset.rebuild_catalog), "false", 0, 0, NULL, false,
	  "rescan the dataset even when a current catalog cache exists" },

	{ "job", "id", CFG_STR, F(job.id), "${SEER_JOB_ID:-${SLURM_JOB_ID:-default}}", 0, 0, NULL,
	  true, "job id: names the socket and the state; trainers must use the same" },
	{ "job", "seed", CFG_U64, F(job.seed), "0", 0, U64MAX, NULL, true,
	  "shuffle seed: the whole access sequence is a function of it" },
	{ "job", "epochs", CFG_U64, F(job.epochs), "1", 1, 1000000, NULL, true, "epochs in the job" },
	{ "job", "batch_size", CFG_U64, F(job.batch_size), "32", 1, 1u << 20, NULL, true,
	  "samples per batch per trainer" },
	{ "job", "drop_last", CFG_BOOL, F(job.drop_last), "false", 0, 0, NULL, true,
	  "true: drop the tail so shares are equal; false: pad by wrapping around" },
	{ "job", "shuffle", CFG_BOOL, F(job.shuffle), "true", 0, 0, NULL, true,
	  "false: every epoch in catalog order" },
	{ "job", "world_size", CFG_U64, F(job.world_size), "0", 0, 1u << 24, NULL, true,
	  "trainers in the job (0: from the trainers' handshake)" },
	{ "job", "max_held", CFG_U64, F(job.max_held), "2", 1, 1024, NULL, true,
	  "batches a trainer may hold at once (taken, not yet released: 2 for double buffering, "
	  "k for k-step gradient accumulation); staging is checked to fit them. Asking for one "
	  "more while holding them all fails at once (-EDEADLK) instead of waiting" },
	{ "job", "resume", CFG_STR, F(job.resume), "", 0, 0, NULL, false,
	  "epoch:step to start every trainer at; auto: where each rank stopped last time "
	  "(recorded in state_dir); empty: from the start" },

	{ "cache", "ram", CFG_SIZE, F(cache.ram), "1GiB", 0, SIZEMAX, NULL, false,
	  "node RAM for cached samples" },
	{ "cache", "staging", CFG_SIZE, F(cache.staging), "256MiB", 1u << 20, SIZEMAX, NULL, false,
	  "node RAM for samples in flight to trainers (split between local trainers)" },
	{ "cache", "nvme_dir", CFG_STR, F(cache.nvme_dir), "", 0, 0, NULL, false,
	  "node-local directory for the NVMe tier (empty: no NVMe tier)" },
	{ "cache", "nvme", CFG_SIZE, F(cache.nvme), "0", 0, SIZEMAX, NULL, false,
	  "bytes of the NVMe tier" },
	{ "cache", "huge_pages", CFG_ENUM, F(cache.huge_pages), "auto", 0, 0, coalesce_modes, false,
	  "the arena (cache and staging) in the node's reserved 2 MiB huge pages (hugetlbfs, "
	  "vm.nr_hugepages): far fewer page faults for the daemon and every trainer. auto: when "
	  "enough are free, else 4 KiB pages (logged); on: fail at start without them; off: "
	  "4 KiB pages" },
	{ "cache", "policy", CFG_ENUM, F(cache.policy), "seer", 0, 0, policies, true,
	  "seer: one planned copy per sample across the cluster; nopfs: for comparison, each "
	  "trainer caches what it reads most in its own share of RAM (no sharing, no peers, "
	  "no NVMe)" },
	{ "cache", "replicas", CFG_BOOL, F(cache.replicas), "on", 0, 0, NULL, true,
	  "seer policy: fill the RAM and NVMe left after a node's owned share with copies of "
	  "the samples it reads most, so later epochs read them locally (off: one copy per "
	  "sample, as before)" },
	{ "cache", "replica_fill", CFG_ENUM, F(cache.replica_fill), "peer", 0, 0, fill_sources, false,
	  "where replicas are filled from: peer (the owner, over the network: no PFS bytes) or "
	  "pfs (no network bytes)" },
	{ "cache", "replica_fill_rate", CFG_SIZE, F(cache.replica_fill_rate), "0", 0, U64MAX, NULL, false,
	  "bytes per second the background replica fills may take, e.g. 200MB (0: no cap; fills "
	  "are always the lowest priority and at most io_threads / 4 in flight)" },

	{ "prefetch", "io_threads", CFG_U64, F(prefetch.io_threads), "16", 1, 1024, NULL, false,
	  "threads reading samples (reads in flight)" },
	{ "prefetch", "format_memory", CFG_SIZE, F(prefetch.format_memory), "32MiB", 0, U64MAX, NULL, false,
	  "memory the format readers share for decoded data (npz/npy members that must be "
	  "decoded or transposed whole, HDF5 chunk caches); 0: keep nothing decoded" },
	{ "prefetch", "lookahead", CFG_U64, F(prefetch.lookahead), "8", 1, 4096, NULL, false,
	  "batches prepared ahead of each trainer" },
	{ "prefetch", "pace", CFG_BOOL, F(prefetch.pace), "true", 0, 0, NULL, false,
	  "when a trainer holds a ready batch beyond the one it took, prepare the next one a "
	  "quarter of a step (at most 50 ms) after the take, not at it: the transfers it starts "
	  "run while the trainer computes instead of while it reads its batch; false: at once" },
	{ "prefetch", "retries", CFG_U64, F(prefetch.retries), "3", 0, 100, NULL, false,
	  "retries of a failed read before its batch fails" },
	{ "prefetch", "retry_backoff_ms", CFG_DOUBLE, F(prefetch.retry_backoff_ms), "20", 0, 60000, NULL,
	  false, "first retry delay; doubles per retry" },
	{ "prefetch", "coalesce", CFG_ENUM, F(prefetch.coalesce), "auto", 0, 0, coalesce_modes, true,
	  "on: read samples of one file needed soon or planned for this node's cache as one "
	  "extent and cut them out; packed files are cached whole by one node, which reads them "
	  "in the first epoch and serves the others. off: one read per sample, in the order of "
	  "need. auto: node 0 times a few reads at start and picks on when the PFS is bound by "
	  "requests, off when it is bound by bandwidth (docs/design.md)" },
	{ "prefetch", "extent_max", CFG_SIZE, F(prefetch.extent_max), "8MiB", 4096, 1ull << 34, NULL, false,
	  "longest coalesced read" },
	{ "prefetch", "extent_memory", CFG_SIZE, F(prefetch.extent_memory), "16MiB", 4096, U64MAX, NULL,
	  false, "memory for coalesced reads in flight (at least extent_max)" },
	{ "prefetch", "max_amplification", CFG_DOUBLE, F(prefetch.max_amplification), "1.25", 1, 1000, NULL,
	  false, "a coalesced read reads at most this many bytes per byte of the samples it "
	  "delivers (gaps between wanted samples are bridged within it)" },
	{ "prefetch", "extent_gap", CFG_SIZE, F(prefetch.extent_gap), "256KiB", 0, U64MAX, NULL, false,
	  "longest gap between wanted samples a coalesced read bridges (about what the PFS moves "
	  "in one request's latency)" },

	{ "net", "provider", CFG_STR, F(net.provider), "${FI_PROVIDER:-tcp;ofi_rxm}", 0, 0, NULL, true,
	  "libfabric provider for sample transfer between daemons" },
	{ "net", "peer_timeout_ms", CFG_DOUBLE, F(net.peer_timeout_ms), "2000", 1, 3600000, NULL, false,
	  "a peer fetch not answered in this time is read from the PFS instead" },
	{ "net", "bundles", CFG_BOOL, F(net.bundles), "true", 0, 0, NULL, false,
	  "samples of at most 8 KiB travel many to a message (one request for up to 64, "
	  "answers in bundles of up to 15 KiB); false: this node asks for each in a message of "
	  "its own (it still answers others' bundled requests)" },

	{ "daemon", "socket", CFG_STR, F(daemon.socket), "", 0, 0, NULL, false,
	  "unix socket path (empty: seer-<user>-<job id>.sock in $SEER_RUNTIME_DIR, a private "
	  "$XDG_RUNTIME_DIR or ${TMPDIR:-/tmp}/seer-<uid>); "
	  "%n is replaced by the node rank" },
	{ "daemon", "state_dir", CFG_STR, F(daemon.state_dir),
	  "${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/seer", 0, 0, NULL, false,
	  "where the catalog cache and resume state live (checked: owned by you, not writable "
	  "by others, nor any ancestor unless sticky like /tmp)" },
	{ "daemon", "log_level", CFG_LOGLEVEL, F(daemon.log_level), "info", 0, 0, NULL, false,
	  "error, warn, info or debug" },
	{ "daemon", "stats_file", CFG_STR, F(daemon.stats_file), "", 0, 0, NULL, false,
	  "JSON statistics written at exit (empty: none); %n is the node rank" },
	{ "daemon", "cpuset", CFG_STR, F(daemon.cpuset), "", 0, 0, NULL, false,
	  "cores for seerd's threads, e.g. 0-3 (empty: automatic)" },
	{ "daemon", "done_timeout_s", CFG_DOUBLE, F(daemon.done_timeout_s), "300", 1, 1e7, NULL, false,
	  "how long a node whose trainers finished waits for the other nodes (shorter once a "
	  "peer stopped answering)" },
	{ "daemon", "connect_timeout_s", CFG_DOUBLE, F(daemon.connect_timeout_s), "600", 1, 1e7, NULL,
	  false, "how long to wait for every trainer to connect before warning" },
	{ "daemon", "idle_exit_s", CFG_DOUBLE, F(daemon.idle_exit_s), "0", 0, 1e7, NULL, false,
	  "one node: stop (positions saved) once no trainer has been connected for this long, "
	  "from the start or the last one leaving (0: never; TorchLoader(daemon=\"auto\") sets "
	  "it for the seerd it starts)" },
	{ "daemon", "serve_jobs", CFG_BOOL, F(daemon.serve_jobs), "false", 0, 0, NULL, false,
	  "one node: after a job's end, serve the next job (its definition from its first "
	  "trainer) instead of exiting; [daemon] idle_exit_s ends it" },
	{ "daemon", "stop_grace_s", CFG_DOUBLE, F(daemon.stop_grace_s), "30", 0, 1e7, NULL, false,
	  "after SIGTERM or seerctl stop, how long trainers may take to finish the batch they "
	  "hold and detach (their releases are recorded) before seerd exits anyway; keep it "
	  "below Slurm's KillWait and mpirun's odls_base_sigkill_timeout" },

	{ "checkpoint", "memory", CFG_SIZE, F(checkpoint.memory), "2GiB", 1u << 20, SIZEMAX, NULL, false,
	  "node RAM for checkpoints in flight (seer.checkpoint.save waits, then fails naming "
	  "this key, when it is full)" },
	{ "checkpoint", "nvme", CFG_SIZE, F(checkpoint.nvme), "16GiB", 0, SIZEMAX, NULL, false,
	  "bytes of checkpoint copies in <cache.nvme_dir>/seer-ckpt-<job> (apart from the cache "
	  "tier; 0 or no nvme_dir: checkpoints wait in memory and go straight to the PFS)" },
	{ "checkpoint", "keep", CFG_U64, F(checkpoint.keep), "2", 0, 1u << 20, NULL, false,
	  "copies kept on NVMe once drained to the PFS, newest first (an undrained copy is "
	  "never removed)" },
	{ "checkpoint", "drain_rate", CFG_SIZE, F(checkpoint.drain_rate), "0", 0, SIZEMAX, NULL, false,
	  "bytes/s of checkpoint writes to the PFS (0: no cap)" },
	{ "checkpoint", "drain_share", CFG_DOUBLE, F(checkpoint.drain_share), "0.25", 0, 1, NULL,
	  false, "while seerd's own PFS reads are queued, the share of time the drain may write "
	  "(more than 0); between them it writes" },
	{ "checkpoint", "drain_window_s", CFG_DOUBLE, F(checkpoint.drain_window_s), "5", 0, 3600,
	  NULL, false, "seconds of the trainers' batches ahead seerd looks at for PFS reads of the "
	  "plan (seerctl checkpoints: the outlook, pace \"plan\" or \"full\"); the drain "
	  "fills the gaps between reads either way; 0: only reads queued now count" },
	{ "checkpoint", "peers", CFG_U64, F(checkpoint.peers), "1", 0, 1, NULL, false,
	  "nodes that hold a copy of each checkpoint besides its own (0 or 1: the next node, "
	  "(node + 1) % nodes; no effect on one node)" },

	{ "transform", "decode", CFG_ENUM, F(transform.decode), "none", 0, 0, xf_decodes, true,
	  "none: deliver file bytes; image: decode JPEG/PNG and deliver tensors" },
	{ "transform", "crop", CFG_ENUM, F(transform.crop), "random_resized", 0, 0, xf_crops, true,
	  "random_resized (RandomResizedCrop), center (Resize(resize) + CenterCrop), none "
	  "(whole image resized to size)" },
	{ "transform", "size", CFG_STR, F(transform.size), "224", 0, 0, NULL, true,
	  "output size: N or HxW" },
	{ "transform", "scale", CFG_STR, F(transform.scale), "0.08,1.0", 0, 0, NULL, true,
	  "random_resized: min,max fraction of the image area" },
	{ "transform", "ratio", CFG_STR, F(transform.ratio), "0.75,1.3333333333333333", 0, 0, NULL, true,
	  "random_resized: min,max aspect ratio (width/height)" },
	{ "transform", "resize", CFG_U64, F(transform.resize), "256", 0, 16384, NULL, true,
	  "center: shorter side before the crop (0: no resize)" },
	{ "transform", "hflip", CFG_DOUBLE, F(transform.hflip), "0.5", 0, 1, NULL, true,
	  "probability of a horizontal flip" },
	{ "transform", "normalize", CFG_STR, F(transform.normalize), "imagenet", 0, 0, NULL, true,
	  "none, imagenet, or m0,m1,m2/s0,s1,s2 (of pixels scaled to [0, 1])" },
	{ "transform", "output", CFG_ENUM, F(transform.output), "float32_chw", 0, 0, xf_outputs, true,
	  "uint8_hwc (normalize = none), float16_chw or float32_chw" },
	{ "transform", "threads", CFG_U64, F(transform.threads), "0", 0, 1024, NULL, false,
	  "transform threads (0: the cores the trainers do not use)" },
	{ "transform", "cache", CFG_ENUM, F(transform.cache), "encoded", 0, 0, xf_caches, true,
	  "what the cache tiers hold: encoded file bytes, or decoded images" },
	{ "transform", "cache_size", CFG_U64, F(transform.cache_size), "0", 0, 16384, NULL, true,
	  "decoded: shorter side of cached images (0: full size)" },
};

const size_t config_nkeys = ARRAY_SIZE(config_keys);
