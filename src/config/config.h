/* seerd configuration: one table of keys drives parsing (INI via libinih),
 * --set overrides, defaults, --help and the dump of the effective values.
 *
 * Values may use ${VAR} (error when VAR is unset) and ${VAR:-default}
 * (nested) expansion; "$$" is a literal '$'. Sizes take units (64GiB, 512MB).
 * Errors name the source (file:line or --set), the key and what is expected. */
#ifndef SEER_CONFIG_H
#define SEER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One member per INI section, one field per key, named as the key:
 * [cache] ram is c->cache.ram (config_keys.c's table says so with offsetof). */
struct seer_config {
	struct config_dataset {	/* [dataset] */
		char *path;
		char *format;
		char *extensions;
		bool allow_empty_classes;
		char *hdf5_data;
		char *hdf5_labels;
		char *npz_data;
		char *npz_labels;
		char *npz_sample_axis;
		char *tar_extensions;   /* tar: data member extensions, first present wins */
		char *tar_label;        /* tar: label member extension ("" = none) */
		char *on_corrupt;       /* "fail" or "skip" */
		bool rebuild_catalog;
	} dataset;
	struct config_job {	/* [job] */
		char *id;
		uint64_t seed;
		uint64_t epochs;
		uint64_t batch_size;
		bool drop_last;
		bool shuffle;
		uint64_t world_size;    /* 0: learned from the first trainer */
		uint64_t max_held;      /* batches a trainer may hold at once */
		char *resume;           /* "" or "epoch:step" */
	} job;
	struct config_cache {	/* [cache] */
		uint64_t ram;
		uint64_t staging;
		char *nvme_dir;
		uint64_t nvme;
		char *policy;           /* "seer" or "nopfs" */
		char *huge_pages;       /* "auto", "on" or "off": the arena in 2 MiB huge pages */
		bool replicas;          /* spare RAM/NVMe holds replicas (src/plan/plan.h) */
		char *replica_fill;     /* "peer" or "pfs" */
		uint64_t replica_fill_rate; /* bytes/s of background fills (0: no cap) */
	} cache;
	struct config_prefetch {	/* [prefetch] */
		uint64_t io_threads;
		uint64_t format_memory;  /* bytes the formats may keep decoded */
		uint64_t lookahead;
		uint64_t retries;
		double retry_backoff_ms;
		char *coalesce;          /* "auto", "on" or "off": coalesced reads (extents) and
					    the plan by files (auto: src/util/pfs_probe.h decides) */
		uint64_t extent_max;     /* longest extent */
		uint64_t extent_memory;  /* bytes of extents in flight at once */
		double max_amplification; /* extent bytes read / sample bytes delivered, at most */
		uint64_t extent_gap;     /* longest gap an extent bridges */
		bool pace;               /* defer a prepare off the trainer's take */
	} prefetch;
	struct config_net {	/* [net] */
		char *provider;
		double peer_timeout_ms;
		bool bundles;
	} net;
	struct config_daemon {	/* [daemon] */
		char *socket;
		char *state_dir;
		char *log_level;
		char *stats_file;
		char *cpuset;
		double connect_timeout_s;
		double done_timeout_s;
		double stop_grace_s;    /* after a stop: trainers' time to detach */
		double idle_exit_s;     /* one node: stop after this long without a trainer (0: never) */
		bool serve_jobs;        /* one node: a finished job is followed by the next */
	} daemon;
	struct config_checkpoint {	/* [checkpoint] */
		uint64_t memory;    /* bytes of checkpoints in flight in memory */
		uint64_t nvme;      /* bytes of checkpoint copies on the NVMe tier */
		uint64_t keep;      /* drained copies kept on NVMe (newest first) */
		uint64_t drain_rate; /* bytes/s to the PFS (0: no cap) */
		double drain_share; /* share of time a drain takes while PFS reads wait */
		double drain_window_s; /* the trainers' future looked at for PFS reads */
		uint64_t peers;     /* 0 or 1: copies on another node's seerd */
	} checkpoint;
	struct config_transform {	/* [transform] */
		char *decode;
		char *crop;
		char *size;
		char *scale;
		char *ratio;
		uint64_t resize;
		double hflip;
		char *normalize;
		char *output;
		uint64_t threads;
		char *cache;
		uint64_t cache_size;
	} transform;
	/* where each key was last set ("default", "job.ini:12", "--set") */
	char **origin;
};

/* Fill with defaults. 0, or an error text in err (a default that does not
 * expand in this environment). */
int config_init(struct seer_config *c, char *err, size_t errlen);
void config_free(struct seer_config *c);

/* Apply an INI file / a "section.key=value" assignment. 0 or -EINVAL with
 * a message naming the source, line and key in err. */
int config_load_file(struct seer_config *c, const char *path, char *err, size_t errlen);
int config_set(struct seer_config *c, const char *assignment, char *err, size_t errlen);

/* Where "section.key" was last set ("default", "job.ini:12", "--set", or a
 * config_set_from origin); NULL for an unknown key. Valid until the key is
 * set again. */
const char *config_origin(const struct seer_config *c, const char *key);
/* Set "section.key" to value (text, as in a file) and record `origin` as
 * where it came from (e.g. "trainer rank 0 (pid 123)"). 0, or -EINVAL with
 * "section.key: why" in err; nothing changed then. */
/* Whether value parses and is in range for the number-typed "section.key":
 * 0, or -EINVAL with "section.key: why" in err. Sets nothing. */
int config_check_value(const char *key, const char *value, char *err, size_t errlen);
int config_set_from(struct seer_config *c, const char *key, const char *value, const char *origin,
		    char *err, size_t errlen);

/* Cross-key checks and derived values (socket path from the job id).
 * Call once after all files and --set. */
int config_finish(struct seer_config *c, char *err, size_t errlen);

/* The effective configuration as INI text with each key's origin (malloc'd);
 * config_load_file reads it back to the same values. */
char *config_dump(const struct seer_config *c);
/* Every key with type, default and description. */
void config_help(FILE *out);
/* "section.key = value" lines of the keys every node must agree on (malloc'd). */
char *config_dump_job(const struct seer_config *c);
/* Hash of the keys every node of a job must agree on. */
uint64_t config_job_hash(const struct seer_config *c);

/* Expand ${VAR} and ${VAR:-default} in s. Returns a malloc'd string, or NULL
 * with the reason in err. */
char *config_expand(const char *s, char *err, size_t errlen);

/* The [transform] section as checked transform parameters. 0, or -EINVAL
 * with "[transform] key: reason" in err. */
struct xf_params;
int config_transform(const struct seer_config *c, struct xf_params *p, char *err, size_t errlen);

/* [prefetch] coalesce: "auto", or on/off in any of the boolean spellings
 * (the key was a boolean before auto). */
enum config_coalesce { CFG_COALESCE_AUTO, CFG_COALESCE_ON, CFG_COALESCE_OFF };
enum config_coalesce config_coalesce(const struct seer_config *c);
/* [cache] huge_pages, the same three ways (CFG_COALESCE_* values). */
enum config_coalesce config_huge_pages(const struct seer_config *c);

/* [job] resume as (epoch, step); -ENOENT when unset or "auto". */
int config_resume(const struct seer_config *c, uint64_t *epoch, uint64_t *step);

/* Key i of the table (0, 1, ... in --help order) with its effective value
 * as text (as config_dump writes it, '$' not doubled) and where it was set.
 * kind: 's' text, 'u' unsigned integer (sizes in bytes), 'b' true/false,
 * 'd' number. false past the last key. section/name/origin stay valid as
 * long as c. */
struct config_item {
	const char *section, *name, *origin;
	char kind;
	char value[1024];
};
bool config_item(const struct seer_config *c, size_t i, struct config_item *out);

#endif /* SEER_CONFIG_H */
