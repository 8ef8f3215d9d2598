/* Statistics: per-epoch counters, each source's running estimates, the
 * trainers' step time and the per-step series of the stats file.
 *
 * Owns struct stats (the engine holds it as e->st): what every other stage
 * counts goes through stats_* (the engine's side, engine_int.h) or, for
 * the per-epoch counters, into the struct epoch_stats stats_epoch returns.
 * Renders its own part of the status and the stats file (stats_*_json);
 * status.c assembles them.
 *
 * Threads: the dispatcher's alone (every counter is fed by the stage that
 * sees the event on the dispatcher: prefetch deliveries and RAM hits, task
 * reads by source, peer served samples). Failure: out of memory aborts
 * (the daemon's rule). */
#ifndef SEERD_STATS_H
#define SEERD_STATS_H

#include <stdbool.h>
#include <stdint.h>

/* Per-epoch counters. Deliveries (samples, bytes, ram_*) count in the epoch
 * of the batch. Reads from a source (pfs_*, nvme_*, peer_*, served_*, ...)
 * count in the epoch the job was in when they completed: the oldest epoch
 * not yet finished by every local trainer, which is what a PFS monitor sees
 * (trainers in lockstep, as under DDP, make both the same). */
struct epoch_stats {
	uint64_t samples, bytes;             /* delivered */
	uint64_t ram_samples, ram_bytes;     /* served from the RAM cache */
	uint64_t pfs_samples, pfs_bytes;     /* read from the PFS */
	uint64_t peer_samples, peer_bytes;   /* fetched from other daemons */
	uint64_t nvme_samples, nvme_bytes;   /* read from the local NVMe tier */
	uint64_t nvme_written, nvme_corrupt;
	uint64_t served_samples, served_bytes; /* sent to other daemons */
	uint64_t repl_samples, repl_bytes;   /* served from this node's replicas (RAM, NVMe) */
	uint64_t fill_samples, fill_bytes;   /* replicas loaded (a background fill, or the
						read that found it not filled yet) */
	uint64_t fallbacks;                  /* peer fetches that fell back to the PFS */
	uint64_t skipped;                    /* corrupt samples substituted (on_corrupt = skip) */
	uint64_t retries;                    /* failed reads that were tried again */
	uint64_t pfs_reads;                  /* reads of the PFS: samples read alone + extents */
	uint64_t extents;                    /* coalesced reads */
	uint64_t extent_samples;             /* samples cut from them */
	uint64_t extent_bytes;               /* bytes they read */
	uint64_t extent_useful;              /* bytes of the samples cut (the rest was bridged) */
	uint64_t failed;
	double t_done;                       /* when the last local trainer finished it */
	/* this node's forecast for the epoch, made as it began (fcast.c) */
	bool fc_set, fc_timed;               /* made; with a measured rate */
	uint8_t fc_bound;                    /* enum forecast_term */
	double fc_time, fc_lb;
	uint64_t fc_ram, fc_nvme, fc_peer, fc_pfs;
};

/* Running estimates of a source, from completed reads (no tables). */
struct src_est {
	double lat_s;      /* EWMA of one read's service time */
	double bps;        /* EWMA of one read's bytes / service time */
	uint64_t n;
};
enum { SRC_PFS, SRC_NVME, SRC_PEER, SRC_COUNT };

struct stats {
	struct epoch_stats *es;
	uint64_t nes;            /* allocated */
	uint64_t nes_used;       /* epochs that have any activity */
	uint64_t epochs_done;
	struct src_est src[SRC_COUNT];
	double step_s;           /* EWMA of a trainer's time per batch */
	double compute_s;        /* EWMA of the same less what it waited for the batch */
	uint64_t compute_n;
	/* per-step series for the stats file: every `step_stride`-th global
	 * batch, when the last local trainer released it and the trainers'
	 * summed wait for it */
	uint64_t step_stride, nsteps;
	double *step_done;
	float *step_stall;
	uint16_t *step_count;
	double t_plan;           /* when the plan was made (epoch 0 starts) */
	double t_start;          /* when the engine was made */
};

/* The step series for a job of `end` global batches (at most 100,000 points). */
void stats_steps_init(struct stats *st, uint64_t end);
void stats_steps_free(struct stats *st);
/* The counters start over (a dropped shape); the series is freed apart. */
void stats_forget(struct stats *st);
void stats_free(struct stats *st);

/* Coalesced reads over every epoch (extent.c counts them). */
struct stats_extents {
	uint64_t pfs_reads, extents, samples, bytes, useful;
};
struct stats_extents stats_extent_totals(const struct stats *st);

/* JSON for status.c (jansson; out of memory aborts). */
struct json_t;
/* "epochs_omitted" and the epochs below job_epochs, the last max_epochs
 * of them (0: all), into root. */
void stats_epochs_json(const struct stats *st, struct json_t *root, uint64_t max_epochs,
		       uint64_t job_epochs);
struct json_t *stats_sources_json(const struct stats *st);   /* per source: reads, latency, rate */
/* "step_stride" and "steps": [global batch, done at, summed wait] into root. */
void stats_steps_json(const struct stats *st, struct json_t *root);

#endif /* SEERD_STATS_H */
