/* The PFS emulator's command line (see opts.h). */
#define _GNU_SOURCE
#include "opts.h"

#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../../src/util/util.h"

const char *const fault_names[FAULT_NKINDS] = { "eio", "enoent", "short" };

enum opt_type {
	OT_FLAG,   /* bool, no argument */
	OT_SIZE,   /* uint64_t bytes, parse_size units */
	OT_RATE,   /* uint64_t bytes/s: a size with optional "/s" */
	OT_MS,     /* double milliseconds >= 0 */
	OT_SEC,    /* double seconds >= 0 */
	OT_COUNT,  /* uint64_t */
	OT_PROB,   /* double in [0, 1] */
	OT_STR,    /* const char * */
	OT_KINDS,  /* unsigned bit mask from a comma list of fault_names */
	OT_SEED,   /* uint64_t, or "random" */
	OT_LEVEL,  /* int log level name */
	OT_PRESET, /* const char *, a name in presets[] (applied before the rest) */
};

/* min/max bounds apply to numeric types (max 0 = no upper bound). */
struct opt_def {
	const char *name;
	int short_name;
	enum opt_type type;
	size_t off;
	const char *def;
	const char *arg;
	double min, max;
	const char *help;
};

#define O(f) offsetof(struct emu_opts, f)
static const struct opt_def opt_table[] = {
	{ "foreground", 'f', OT_FLAG, O(foreground), NULL, NULL, 0, 0,
	  "stay in the foreground (default: daemonize once mounted)" },
	{ "debug", 'd', OT_FLAG, O(debug), NULL, NULL, 0, 0,
	  "libfuse request trace on stderr (implies -f)" },
	{ "preset", 0, OT_PRESET, O(preset), NULL, "NAME", 0, 0,
	  "start from a named model (lustre); later options override it" },
	{ "bandwidth", 'b', OT_RATE, O(bandwidth), "0", "RATE", 0, 0,
	  "aggregate bandwidth of all reads, e.g. 200MB/s (0 = unlimited)" },
	{ "burst", 0, OT_SIZE, O(burst), "0", "SIZE",  0, 0,
	  "bytes that may pass at once after idle time (bucket depth)" },
	{ "latency-ms", 'l', OT_MS, O(latency_ms), "0", "MS", 0, 600000,
	  "latency added to every read RPC" },
	{ "meta-latency-ms", 'm', OT_MS, O(meta_latency_ms), "0", "MS", 0, 600000,
	  "latency added to lookup/getattr, open, opendir, readlink" },
	{ "max-inflight", 'n', OT_COUNT, O(max_inflight), "0", "N", 0, 1000000,
	  "requests served at once over the mount, others queue in order (0 = unlimited)" },
	{ "ost-inflight", 0, OT_COUNT, O(ost_inflight), "0", "N", 0, 1000000,
	  "read RPCs in flight per OST (Lustre max_rpcs_in_flight; 0 = unlimited)" },
	{ "meta-inflight", 0, OT_COUNT, O(meta_inflight), "0", "N", 0, 1000000,
	  "metadata operations in flight (0 = unlimited)" },
	{ "osts", 0, OT_COUNT, O(osts), "1", "N", 1, 4096,
	  "OSTs the files are spread over, one per file by a hash of its path" },
	{ "rpc-size", 0, OT_SIZE, O(rpc_size), "0", "SIZE", 0, 1 << 30,
	  "largest read RPC: larger reads are split (0 = max-read)" },
	{ "readahead", 0, OT_SIZE, O(readahead), "0", "SIZE", 0, 1ull << 40,
	  "readahead window per open file for sequential reads (0 = off)" },
	{ "max-read", 0, OT_SIZE, O(max_read), "1MiB", "SIZE", MIN_MAX_READ, KERNEL_MAX_READ,
	  "largest read request (4KiB..1MiB); larger reads are split" },
	{ "blksize", 0, OT_SIZE, O(blksize), "0", "SIZE", 0, 1 << 30,
	  "st_blksize shown to clients, a power of two (0 = max-read)" },
	{ "attr-timeout", 0, OT_SEC, O(attr_timeout), "1", "SEC", 0, 86400,
	  "kernel cache time of attributes and names" },
	{ "threads", 't', OT_COUNT, O(threads), "64", "N", 1, 4096,
	  "FUSE worker threads: most requests the emulator sees at once" },
	{ "stats", 's', OT_STR, O(stats_path), NULL, "FILE",  0, 0,
	  "write the final counters as JSON to FILE at unmount" },
	{ "stats-per-file", 'p', OT_FLAG, O(stats_per_file), NULL, NULL, 0, 0,
	  "also count and list per file (memory grows with files opened)" },
	{ "label", 0, OT_STR, O(label), "", "TEXT", 0, 0,
	  "free text copied into the stats, e.g. a job id" },
	{ "fault-rate", 0, OT_PROB, O(fault_rate), "0", "R", 0, 1,
	  "probability that a read fails (0..1)" },
	{ "fault-kinds", 0, OT_KINDS, O(fault_kinds), "eio", "LIST", 0, 0,
	  "comma list of eio, enoent, short; one is drawn per fault" },
	{ "fault-seed", 0, OT_SEED, O(fault_seed), "random", "N", 0, 0,
	  "seed of the fault generator (0..2^63-1), for reproducible runs" },
	{ "fault-path", 0, OT_STR, O(fault_path), "", "SUBSTR", 0, 0,
	  "only files whose path under SRC_DIR contains SUBSTR" },
	{ "writable", 0, OT_FLAG, O(writable), NULL, NULL, 0, 0,
	  "mount read-write: create, write, fsync, rename, unlink reach SRC_DIR (implied by "
	  "any write option below)" },
	{ "write-bandwidth", 0, OT_RATE, O(write_bandwidth), "0", "RATE", 0, 0,
	  "aggregate bandwidth of all writes, e.g. 100MB/s (0 = unlimited)" },
	{ "write-latency-ms", 0, OT_MS, O(write_latency_ms), "0", "MS", 0, 600000,
	  "latency added to every write request" },
	{ "write-capacity", 0, OT_SIZE, O(write_capacity), "0", "SIZE", 0, 0,
	  "bytes that may be written through the mount in all; later writes fail with "
	  "ENOSPC (0 = no limit)" },
	{ "write-fault-rate", 0, OT_PROB, O(write_fault_rate), "0", "R", 0, 1,
	  "probability that a write fails with EIO (0..1; --fault-path applies)" },
	{ "write-shares-bandwidth", 0, OT_FLAG, O(write_shares), NULL, NULL, 0, 0,
	  "writes also take their bytes from --bandwidth, the reads' bucket: one link for both "
	  "(implies --writable)" },
	{ "allow-other", 0, OT_FLAG, O(allow_other), NULL, NULL, 0, 0,
	  "let other users access the mount (FUSE allow_other)" },
	{ "log-file", 0, OT_STR, O(log_file), NULL, "FILE", 0, 0,
	  "messages of the daemon (default: discarded)" },
	{ "log-level", 0, OT_LEVEL, O(log_level), "info", "LEVEL", 0, 0,
	  "error, warn, info or debug" },
};
#undef O

/* Presets: option name/value pairs applied after the defaults and before the
 * command line. docs/pfsemu.md ("The lustre preset") gives each number's
 * source and says which are assumptions. */
struct preset {
	const char *name;
	const char *what;
	const char *const kv[24];
};

static const struct preset presets[] = {
	{ "lustre", "one Lustre client node reading files of stripe count 1 on one OST",
	  { "ost-inflight", "8",      /* osc max_rpcs_in_flight default */
	    "meta-inflight", "8",     /* mdc max_rpcs_in_flight default */
	    "rpc-size", "4MiB",       /* max_pages_per_rpc = brw_size 4 MiB (1 MiB before 2.9) */
	    "readahead", "256MiB",    /* max_read_ahead_per_file_mb default cap */
	    "latency-ms", "2",        /* assumption: a small read RPC on disk-backed OSTs */
	    "meta-latency-ms", "1",   /* assumption */
	    "bandwidth", "2GB/s",     /* assumption: one client's share */
	    "osts", "1",
	    NULL } },
};

uint64_t emu_splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static const struct preset *find_preset(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(presets); i++)
		if (strcmp(presets[i].name, name) == 0)
			return &presets[i];
	return NULL;
}

static const struct opt_def *find_opt(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(opt_table); i++)
		if (strcmp(opt_table[i].name, name) == 0)
			return &opt_table[i];
	return NULL;
}

static int parse_kinds(const char *s, unsigned *out)
{
	unsigned mask = 0;
	char *dup = xstrdup(s), *save = NULL;
	int rc = 0;
	for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int k = -1;
		for (int i = 0; i < FAULT_NKINDS; i++)
			if (strcasecmp(tok, fault_names[i]) == 0)
				k = i;
		if (k < 0) {
			rc = -EINVAL;
			break;
		}
		mask |= 1u << k;
	}
	free(dup);
	if (rc == 0 && mask == 0)
		rc = -EINVAL;
	if (rc == 0)
		*out = mask;
	return rc;
}

/* The numeric value of s for option type t into *u (integers) or *v. */
static int parse_number(enum opt_type t, const char *s, uint64_t *u, double *v)
{
	int rc;
	switch (t) {
	case OT_RATE: {
		char tmp[64];
		size_t n = strlen(s);
		if (n >= sizeof(tmp))
			return -EINVAL;
		memcpy(tmp, s, n + 1);
		if (n > 2 && strcasecmp(tmp + n - 2, "/s") == 0)
			tmp[n - 2] = '\0';
		rc = parse_size(tmp, u);
		*v = (double)*u;
		return rc;
	}
	case OT_SIZE:
		rc = parse_size(s, u);
		*v = (double)*u;
		return rc;
	case OT_COUNT:
		rc = parse_u64(s, u);
		*v = (double)*u;
		return rc;
	default:
		return parse_double(s, v);
	}
}

/* Store value text s for option d into o; 0 or -EINVAL/-ERANGE. */
static int opt_set(struct emu_opts *o, const struct opt_def *d, const char *s)
{
	void *field = (char *)o + d->off;
	uint64_t u = 0;
	double v = 0;
	int rc = 0;
	switch (d->type) {
	case OT_FLAG:
		*(bool *)field = true;
		return 0;
	case OT_STR:
		*(const char **)field = s;
		return 0;
	case OT_PRESET:
		if (!find_preset(s))
			return -EINVAL;
		*(const char **)field = s;
		return 0;
	case OT_KINDS:
		return parse_kinds(s, (unsigned *)field);
	case OT_LEVEL: {
		enum log_level lvl;
		rc = log_parse_level(s, &lvl);
		if (rc == 0)
			*(int *)field = (int)lvl;
		return rc;
	}
	case OT_SEED:
		/* 63 bits: the seed is a JSON integer in the stats */
		if (strcmp(s, "random") == 0) {
			*(uint64_t *)field = emu_splitmix64(now_ns() ^ ((uint64_t)getpid() << 32)) >> 1;
			return 0;
		}
		rc = parse_u64(s, &u);
		if (rc == 0 && u > INT64_MAX)
			rc = -ERANGE;
		if (rc == 0)
			*(uint64_t *)field = u;
		return rc;
	default:
		break;
	}
	rc = parse_number(d->type, s, &u, &v);
	if (rc != 0)
		return rc;
	if (v < d->min || (d->max > 0 && v > d->max) || v != v)
		return -ERANGE;
	if (d->type == OT_MS || d->type == OT_SEC || d->type == OT_PROB)
		*(double *)field = v;
	else
		*(uint64_t *)field = u;
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: " PROG " SRC_DIR MOUNTPOINT [options]\n"
		"\n"
		"Mount SRC_DIR read-only at MOUNTPOINT (an empty directory) through FUSE, with\n"
		"the bandwidth, latency, concurrency, readahead and faults of a shared parallel\n"
		"file system as one client node sees it.\n"
		"Counters: MOUNTPOINT/.pfsemu/stats (JSON); opening MOUNTPOINT/.pfsemu/reset "
		"zeroes them.\n"
		"Unmount with `fusermount3 -u MOUNTPOINT`, SIGTERM or SIGINT (writes --stats).\n"
		"\n"
		"Sizes take units (4k, 1MiB, 200MB); rates are sizes per second (200MB/s).\n"
		"\n");
	for (size_t i = 0; i < ARRAY_SIZE(opt_table); i++) {
		const struct opt_def *d = &opt_table[i];
		char lhs[64];
		char sn[8] = "    ";
		if (d->short_name)
			snprintf(sn, sizeof(sn), "-%c, ", d->short_name);
		snprintf(lhs, sizeof(lhs), "%s--%s%s%s", sn, d->name, d->arg ? " " : "",
			 d->arg ? d->arg : "");
		fprintf(out, "  %-28s %s", lhs, d->help);
		if (d->def && *d->def && d->type != OT_FLAG)
			fprintf(out, " [%s]", d->def);
		fputc('\n', out);
	}
	fprintf(out, "  %-28s %s\n", "-h, --help", "this text");
	fprintf(out, "\nPresets (docs/pfsemu.md gives the sources):\n");
	for (size_t i = 0; i < ARRAY_SIZE(presets); i++) {
		fprintf(out, "  %-8s %s:\n          ", presets[i].name, presets[i].what);
		for (size_t k = 0; presets[i].kv[k]; k += 2)
			fprintf(out, " --%s %s", presets[i].kv[k], presets[i].kv[k + 1]);
		fputc('\n', out);
	}
}

static void bad_value(const struct opt_def *d, const char *val, int rc)
{
	fprintf(stderr, PROG ": bad value '%s' for --%s: %s", val, d->name,
		rc == -ERANGE ? "out of range" : "malformed");
	if (d->max > 0)
		fprintf(stderr, " (%.15g..%.15g)", d->min, d->max);
	if (d->type == OT_KINDS)
		fprintf(stderr, " (a comma list of eio, enoent, short)");
	if (d->type == OT_RATE)
		fprintf(stderr, " (e.g. 200MB/s, 1GiB/s, 0 = unlimited)");
	if (d->type == OT_PRESET) {
		fprintf(stderr, " (known presets:");
		for (size_t i = 0; i < ARRAY_SIZE(presets); i++)
			fprintf(stderr, " %s", presets[i].name);
		fprintf(stderr, ")");
	}
	fputc('\n', stderr);
}

/* Defaults, then the preset named anywhere on the command line (the last
 * --preset wins), so that every explicit option overrides it. */
static int apply_defaults_and_preset(int argc, char **argv, struct emu_opts *o)
{
	for (size_t i = 0; i < ARRAY_SIZE(opt_table); i++) {
		const struct opt_def *d = &opt_table[i];
		if (d->def && opt_set(o, d, d->def) != 0) {
			fprintf(stderr, PROG ": internal error: bad default for --%s\n", d->name);
			return -1;
		}
	}
	const char *name = NULL;
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
		if (strcmp(argv[i], "--preset") == 0 && i + 1 < argc)
			name = argv[i + 1];
		else if (strncmp(argv[i], "--preset=", 9) == 0)
			name = argv[i] + 9;
	}
	if (!name)
		return 0;
	const struct preset *p = find_preset(name);
	if (!p) {
		bad_value(find_opt("preset"), name, -EINVAL);
		return -1;
	}
	for (size_t k = 0; p->kv[k]; k += 2) {
		const struct opt_def *d = find_opt(p->kv[k]);
		if (!d || opt_set(o, d, p->kv[k + 1]) != 0) {
			fprintf(stderr, PROG ": internal error: preset %s sets --%s %s\n", p->name,
				p->kv[k], p->kv[k + 1]);
			return -1;
		}
	}
	o->preset = p->name;
	return 0;
}

int emu_parse_args(int argc, char **argv, struct emu_opts *o, const char **src,
		   const char **mnt)
{
	enum { N = ARRAY_SIZE(opt_table) };
	struct option lopts[N + 2];
	char shorts[2 * N + 4];
	size_t ns = 0;
	shorts[ns++] = ':'; /* getopt reports a missing value as ':' */
	for (size_t i = 0; i < N; i++) {
		const struct opt_def *d = &opt_table[i];
		lopts[i] = (struct option){ d->name, d->type == OT_FLAG ? no_argument
							: required_argument, NULL, 256 + (int)i };
		if (d->short_name) {
			shorts[ns++] = (char)d->short_name;
			if (d->type != OT_FLAG)
				shorts[ns++] = ':';
		}
	}
	shorts[ns++] = 'h';
	shorts[ns] = '\0';
	lopts[N] = (struct option){ "help", no_argument, NULL, 'h' };
	lopts[N + 1] = (struct option){ 0 };
	if (apply_defaults_and_preset(argc, argv, o) != 0)
		return -1;

	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, shorts, lopts, NULL)) != -1) {
		const struct opt_def *d = NULL;
		if (c == 'h') {
			usage(stdout);
			return 1;
		}
		if (c == '?' || c == ':') {
			const char *what = argv[optind - 1];
			if (c == ':')
				fprintf(stderr, PROG ": option %s needs a value\n", what);
			else
				fprintf(stderr, PROG ": unknown option %s\n", what);
			fprintf(stderr, "Try '" PROG " --help'.\n");
			return -1;
		}
		if (c >= 256 && c < 256 + (int)N) {
			d = &opt_table[c - 256];
		} else {
			for (size_t i = 0; i < N; i++)
				if (opt_table[i].short_name == c)
					d = &opt_table[i];
		}
		if (!d)
			return -1;
		int rc = opt_set(o, d, optarg);
		if (rc != 0) {
			bad_value(d, optarg, rc);
			return -1;
		}
	}
	if (argc - optind != 2) {
		fprintf(stderr, PROG ": expected SRC_DIR and MOUNTPOINT, got %d argument%s\n",
			argc - optind, argc - optind == 1 ? "" : "s");
		fprintf(stderr, "Try '" PROG " --help'.\n");
		return -1;
	}
	*src = argv[optind];
	*mnt = argv[optind + 1];
	return 0;
}
