#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <ini.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "catalog.h"
#include "fmt/registry.h"
#include "util.h"
#include "xform/xform.h"

enum cfg_type { CFG_STR, CFG_U64, CFG_SIZE, CFG_BOOL, CFG_DOUBLE, CFG_ENUM, CFG_LOGLEVEL };

struct cfg_key {
	const char *section;
	const char *name;
	enum cfg_type type;
	size_t off;
	const char *def;
	uint64_t min, max;        /* numbers and sizes */
	const char *const *choices; /* CFG_ENUM */
	bool job;                 /* all nodes of a job must agree */
	const char *help;
};

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

#define F(field) offsetof(struct seer_config, field)
#define U64MAX UINT64_MAX
/* Byte sizes of memory and disk: 1 EiB, far beyond any node, and far from
 * 2^64 so that rounding them up (to pages, to O_DIRECT alignment) and adding
 * them cannot wrap (2^64 - 1 used to round to "0 B") */
#define SIZEMAX (1ull << 60)

static const struct cfg_key keys[] = {
	{ "dataset", "path", CFG_STR, F(dataset_path), "", 0, 0, NULL, false,
	  "directory holding the dataset (required)" },
	{ "dataset", "format", CFG_ENUM, F(dataset_format), "files", 0, 0, formats, true,
	  FMT_HELP },
	{ "dataset", "extensions", CFG_STR, F(extensions), "", 0, 0, NULL, true,
	  "files format: comma list of extensions to include (empty: all files)" },
	{ "dataset", "hdf5_data", CFG_STR, F(hdf5_data), "records", 0, 0, NULL, true,
	  "hdf5: sample dataset name, or prefix of records_0..k-1" },
	{ "dataset", "hdf5_labels", CFG_STR, F(hdf5_labels), "labels", 0, 0, NULL, true,
	  "hdf5: label dataset name (empty: no labels)" },
	{ "dataset", "npz_data", CFG_STR, F(npz_data), "x", 0, 0, NULL, true,
	  "npz: member holding the samples" },
	{ "dataset", "npz_labels", CFG_STR, F(npz_labels), "y", 0, 0, NULL, true,
	  "npz: member holding the labels (empty: no labels)" },
	{ "dataset", "npz_sample_axis", CFG_ENUM, F(npz_sample_axis), "last", 0, 0, axes, true,
	  "npz/npy: axis that indexes samples: last (DLIO: x is (d1, d2, n)) or first" },
	{ "dataset", "on_corrupt", CFG_ENUM, F(on_corrupt), "fail", 0, 0, corrupt_policies, true,
	  "a sample that fails its checks: fail its batch, or skip (substitute the next valid one)" },
	{ "dataset", "rebuild_catalog", CFG_BOOL, F(catalog_rebuild), "false", 0, 0, NULL, false,
	  "rescan the dataset even when a current catalog cache exists" },

	{ "job", "id", CFG_STR, F(job_id), "${SEER_JOB_ID:-${SLURM_JOB_ID:-default}}", 0, 0, NULL,
	  true, "job id: names the socket and the state; trainers must use the same" },
	{ "job", "seed", CFG_U64, F(seed), "0", 0, U64MAX, NULL, true,
	  "shuffle seed: the whole access sequence is a function of it" },
	{ "job", "epochs", CFG_U64, F(epochs), "1", 1, 1000000, NULL, true, "epochs in the job" },
	{ "job", "batch_size", CFG_U64, F(batch_size), "32", 1, 1u << 20, NULL, true,
	  "samples per batch per trainer" },
	{ "job", "drop_last", CFG_BOOL, F(drop_last), "false", 0, 0, NULL, true,
	  "true: drop the tail so shares are equal; false: pad by wrapping around" },
	{ "job", "shuffle", CFG_BOOL, F(shuffle), "true", 0, 0, NULL, true,
	  "false: every epoch in catalog order" },
	{ "job", "world_size", CFG_U64, F(world_size), "0", 0, 1u << 24, NULL, true,
	  "trainers in the job (0: from the trainers' handshake)" },
	{ "job", "max_held", CFG_U64, F(max_held), "2", 1, 1024, NULL, true,
	  "batches a trainer may hold at once (taken, not yet released: 2 for double buffering, "
	  "k for k-step gradient accumulation); staging is checked to fit them. Asking for one "
	  "more while holding them all fails at once (-EDEADLK) instead of waiting" },
	{ "job", "resume", CFG_STR, F(resume), "", 0, 0, NULL, false,
	  "epoch:step to start every trainer at; auto: where each rank stopped last time "
	  "(recorded in state_dir); empty: from the start" },

	{ "cache", "ram", CFG_SIZE, F(ram), "1GiB", 0, SIZEMAX, NULL, false,
	  "node RAM for cached samples" },
	{ "cache", "staging", CFG_SIZE, F(staging), "256MiB", 1u << 20, SIZEMAX, NULL, false,
	  "node RAM for samples in flight to trainers (split between local trainers)" },
	{ "cache", "nvme_dir", CFG_STR, F(nvme_dir), "", 0, 0, NULL, false,
	  "node-local directory for the NVMe tier (empty: no NVMe tier)" },
	{ "cache", "nvme", CFG_SIZE, F(nvme), "0", 0, SIZEMAX, NULL, false,
	  "bytes of the NVMe tier" },
	{ "cache", "policy", CFG_ENUM, F(policy), "seer", 0, 0, policies, true,
	  "seer: one planned copy per sample across the cluster; nopfs: for comparison, each "
	  "trainer caches what it reads most in its own share of RAM (no sharing, no peers, "
	  "no NVMe)" },
	{ "cache", "replicas", CFG_BOOL, F(replicas), "on", 0, 0, NULL, true,
	  "seer policy: fill the RAM and NVMe left after a node's owned share with copies of "
	  "the samples it reads most, so later epochs read them locally (off: one copy per "
	  "sample, as before)" },
	{ "cache", "replica_fill", CFG_ENUM, F(replica_fill), "peer", 0, 0, fill_sources, false,
	  "where replicas are filled from: peer (the owner, over the network: no PFS bytes) or "
	  "pfs (no network bytes)" },
	{ "cache", "replica_fill_rate", CFG_SIZE, F(replica_fill_rate), "0", 0, U64MAX, NULL, false,
	  "bytes per second the background replica fills may take, e.g. 200MB (0: no cap; fills "
	  "are always the lowest priority and at most io_threads / 4 in flight)" },

	{ "prefetch", "io_threads", CFG_U64, F(io_threads), "16", 1, 1024, NULL, false,
	  "threads reading samples (reads in flight)" },
	{ "prefetch", "format_memory", CFG_SIZE, F(format_memory), "32MiB", 0, U64MAX, NULL, false,
	  "memory the format readers share for decoded data (npz/npy members that must be "
	  "decoded or transposed whole, HDF5 chunk caches); 0: keep nothing decoded" },
	{ "prefetch", "lookahead", CFG_U64, F(lookahead), "8", 1, 4096, NULL, false,
	  "batches prepared ahead of each trainer" },
	{ "prefetch", "retries", CFG_U64, F(retries), "3", 0, 100, NULL, false,
	  "retries of a failed read before its batch fails" },
	{ "prefetch", "retry_backoff_ms", CFG_DOUBLE, F(retry_backoff_ms), "20", 0, 60000, NULL,
	  false, "first retry delay; doubles per retry" },
	{ "prefetch", "coalesce", CFG_BOOL, F(coalesce), "on", 0, 0, NULL, true,
	  "read samples of one file needed soon or planned for this node's cache as one extent "
	  "and cut them out; packed files are cached whole by one node, which reads them in the "
	  "first epoch and serves the others (off: one read per sample)" },
	{ "prefetch", "extent_max", CFG_SIZE, F(extent_max), "8MiB", 4096, 1ull << 34, NULL, false,
	  "longest coalesced read" },
	{ "prefetch", "extent_memory", CFG_SIZE, F(extent_memory), "16MiB", 4096, U64MAX, NULL,
	  false, "memory for coalesced reads in flight (at least extent_max)" },
	{ "prefetch", "max_amplification", CFG_DOUBLE, F(max_amplification), "1.25", 1, 1000, NULL,
	  false, "a coalesced read reads at most this many bytes per byte of the samples it "
	  "delivers (gaps between wanted samples are bridged within it)" },
	{ "prefetch", "extent_gap", CFG_SIZE, F(extent_gap), "256KiB", 0, U64MAX, NULL, false,
	  "longest gap between wanted samples a coalesced read bridges (about what the PFS moves "
	  "in one request's latency)" },

	{ "net", "provider", CFG_STR, F(provider), "${FI_PROVIDER:-tcp;ofi_rxm}", 0, 0, NULL, true,
	  "libfabric provider for sample transfer between daemons" },
	{ "net", "peer_timeout_ms", CFG_DOUBLE, F(peer_timeout_ms), "2000", 1, 3600000, NULL, false,
	  "a peer fetch not answered in this time is read from the PFS instead" },

	{ "daemon", "socket", CFG_STR, F(socket), "", 0, 0, NULL, false,
	  "unix socket path (empty: seer-<user>-<job id>.sock in $SEER_RUNTIME_DIR, a private "
	  "$XDG_RUNTIME_DIR or ${TMPDIR:-/tmp}/seer-<uid>); "
	  "%n is replaced by the node rank" },
	{ "daemon", "state_dir", CFG_STR, F(state_dir),
	  "${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/seer", 0, 0, NULL, false,
	  "where the catalog cache and resume state live (checked: owned by you, not writable "
	  "by others, nor any ancestor unless sticky like /tmp)" },
	{ "daemon", "log_level", CFG_LOGLEVEL, F(log_level), "info", 0, 0, NULL, false,
	  "error, warn, info or debug" },
	{ "daemon", "stats_file", CFG_STR, F(stats_file), "", 0, 0, NULL, false,
	  "JSON statistics written at exit (empty: none); %n is the node rank" },
	{ "daemon", "cpuset", CFG_STR, F(cpuset), "", 0, 0, NULL, false,
	  "cores for seerd's threads, e.g. 0-3 (empty: automatic)" },
	{ "daemon", "done_timeout_s", CFG_DOUBLE, F(done_timeout_s), "300", 1, 1e7, NULL, false,
	  "how long a node whose trainers finished waits for the other nodes (shorter once a "
	  "peer stopped answering)" },
	{ "daemon", "connect_timeout_s", CFG_DOUBLE, F(connect_timeout_s), "600", 1, 1e7, NULL,
	  false, "how long to wait for every trainer to connect before warning" },
	{ "daemon", "stop_grace_s", CFG_DOUBLE, F(stop_grace_s), "30", 0, 1e7, NULL, false,
	  "after SIGTERM or seerctl stop, how long trainers may take to finish the batch they "
	  "hold and detach (their releases are recorded) before seerd exits anyway; keep it "
	  "below Slurm's KillWait and mpirun's odls_base_sigkill_timeout" },

	{ "transform", "decode", CFG_ENUM, F(xf_decode), "none", 0, 0, xf_decodes, true,
	  "none: deliver file bytes; image: decode JPEG/PNG and deliver tensors" },
	{ "transform", "crop", CFG_ENUM, F(xf_crop), "random_resized", 0, 0, xf_crops, true,
	  "random_resized (RandomResizedCrop), center (Resize(resize) + CenterCrop), none "
	  "(whole image resized to size)" },
	{ "transform", "size", CFG_STR, F(xf_size), "224", 0, 0, NULL, true,
	  "output size: N or HxW" },
	{ "transform", "scale", CFG_STR, F(xf_scale), "0.08,1.0", 0, 0, NULL, true,
	  "random_resized: min,max fraction of the image area" },
	{ "transform", "ratio", CFG_STR, F(xf_ratio), "0.75,1.3333333333333333", 0, 0, NULL, true,
	  "random_resized: min,max aspect ratio (width/height)" },
	{ "transform", "resize", CFG_U64, F(xf_resize), "256", 0, 16384, NULL, true,
	  "center: shorter side before the crop (0: no resize)" },
	{ "transform", "hflip", CFG_DOUBLE, F(xf_hflip), "0.5", 0, 1, NULL, true,
	  "probability of a horizontal flip" },
	{ "transform", "normalize", CFG_STR, F(xf_normalize), "imagenet", 0, 0, NULL, true,
	  "none, imagenet, or m0,m1,m2/s0,s1,s2 (of pixels scaled to [0, 1])" },
	{ "transform", "output", CFG_ENUM, F(xf_output), "float32_chw", 0, 0, xf_outputs, true,
	  "uint8_hwc (normalize = none), float16_chw or float32_chw" },
	{ "transform", "threads", CFG_U64, F(xf_threads), "0", 0, 1024, NULL, false,
	  "transform threads (0: the cores the trainers do not use)" },
	{ "transform", "cache", CFG_ENUM, F(xf_cache), "encoded", 0, 0, xf_caches, true,
	  "what the cache tiers hold: encoded file bytes, or decoded images" },
	{ "transform", "cache_size", CFG_U64, F(xf_cache_size), "0", 0, 16384, NULL, true,
	  "decoded: shorter side of cached images (0: full size)" },
};

#define NKEYS ARRAY_SIZE(keys)

static void *field(struct seer_config *c, const struct cfg_key *k) { return (char *)c + k->off; }

static const struct cfg_key *find_key(const char *section, const char *name)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].name, name) == 0)
			return &keys[i];
	return NULL;
}

/* ---- ${VAR} expansion ------------------------------------------------------ */

static bool expand_into(const char *s, size_t len, char **out, size_t *olen, size_t *ocap,
			int depth, char *err, size_t errlen)
{
	if (depth > 8) {
		snprintf(err, errlen, "${...} nested too deeply");
		return false;
	}
	for (size_t i = 0; i < len; i++) {
		char ch = s[i];
		const char *piece = &s[i];
		size_t plen = 1;
		char *owned = NULL;
		if (ch == '$' && i + 1 < len && s[i + 1] == '$') {
			i++;
		} else if (ch == '$' && i + 1 < len && s[i + 1] == '{') {
			/* find the matching brace */
			size_t j = i + 2, lvl = 1;
			for (; j < len && lvl; j++) {
				if (s[j] == '{')
					lvl++;
				else if (s[j] == '}')
					lvl--;
			}
			if (lvl) {
				snprintf(err, errlen, "unterminated ${ in '%.*s'", (int)len, s);
				return false;
			}
			const char *body = s + i + 2;
			size_t blen = j - 1 - (i + 2);
			const char *sep = NULL;
			for (size_t k = 0; k + 1 < blen; k++)
				if (body[k] == ':' && body[k + 1] == '-') {
					sep = body + k;
					break;
				}
			size_t nlen = sep ? (size_t)(sep - body) : blen;
			char name[256];
			if (nlen == 0 || nlen >= sizeof(name)) {
				snprintf(err, errlen, "bad variable name in '%.*s'", (int)len, s);
				return false;
			}
			memcpy(name, body, nlen);
			name[nlen] = '\0';
			const char *v = getenv(name);
			if (v && *v) {
				piece = v;
				plen = strlen(v);
			} else if (sep) {
				char *sub = NULL;
				size_t sl = 0, sc = 0;
				if (!expand_into(sep + 2, blen - nlen - 2, &sub, &sl, &sc, depth + 1, err,
						 errlen)) {
					free(sub);
					return false;
				}
				owned = sub;
				piece = sub ? sub : "";
				plen = sl;
			} else {
				snprintf(err, errlen,
					 "environment variable %s is not set (use ${%s:-default})",
					 name, name);
				return false;
			}
			i = j - 1;
		}
		if (*olen + plen + 1 > *ocap) {
			*ocap = MAX(*ocap * 2, *olen + plen + 64);
			*out = xrealloc(*out, *ocap);
		}
		memcpy(*out + *olen, piece, plen);
		*olen += plen;
		(*out)[*olen] = '\0';
		free(owned);
	}
	return true;
}

char *cfg_expand(const char *s, char *err, size_t errlen)
{
	char *out = NULL;
	size_t olen = 0, ocap = 0;
	if (!expand_into(s, strlen(s), &out, &olen, &ocap, 0, err, errlen)) {
		free(out);
		return NULL;
	}
	return out ? out : xstrdup("");
}

/* ---- setting one key -------------------------------------------------------- */

static int set_key(struct seer_config *c, const struct cfg_key *k, const char *raw,
		   const char *origin, char *why, size_t whylen)
{
	char *v = cfg_expand(raw, why, whylen);
	if (!v)
		return -EINVAL;
	int rc = 0;
	void *f = field(c, k);
	switch (k->type) {
	case CFG_STR:
		free(*(char **)f);
		*(char **)f = v;
		v = NULL;
		break;
	case CFG_ENUM:
	case CFG_LOGLEVEL: {
		bool ok = false;
		if (k->type == CFG_LOGLEVEL) {
			enum log_level l;
			ok = log_parse_level(v, &l) == 0;
		} else {
			for (const char *const *ch = k->choices; *ch; ch++)
				ok |= strcmp(*ch, v) == 0;
		}
		if (!ok) {
			char list[256] = "";
			if (k->type == CFG_LOGLEVEL)
				snprintf(list, sizeof(list), "error, warn, info, debug");
			else
				for (const char *const *ch = k->choices; *ch; ch++)
					snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
						 ch == k->choices ? "" : ", ", *ch);
			snprintf(why, whylen, "'%s' is not one of: %s", v, list);
			rc = -EINVAL;
			break;
		}
		free(*(char **)f);
		*(char **)f = v;
		v = NULL;
		break;
	}
	case CFG_U64:
	case CFG_SIZE: {
		uint64_t n;
		rc = k->type == CFG_SIZE ? parse_size(v, &n) : parse_u64(v, &n);
		if (rc != 0) {
			snprintf(why, whylen, k->type == CFG_SIZE
				 ? "'%s' is not a size (use e.g. 512MiB, 64GiB, 0)"
				 : "'%s' is not a non-negative integer", v);
			break;
		}
		if (n < k->min || n > k->max) {
			snprintf(why, whylen, "%s is out of range [%llu, %llu]", v,
				 (unsigned long long)k->min, (unsigned long long)k->max);
			rc = -ERANGE;
			break;
		}
		*(uint64_t *)f = n;
		break;
	}
	case CFG_BOOL:
		rc = parse_bool(v, (bool *)f);
		if (rc != 0)
			snprintf(why, whylen, "'%s' is not a boolean (true/false, yes/no, 1/0)", v);
		break;
	case CFG_DOUBLE: {
		double d;
		rc = parse_double(v, &d);
		if (rc != 0 || d < (double)k->min || d > (double)k->max) {
			snprintf(why, whylen, "'%s' is not a number in [%llu, %llu]", v,
				 (unsigned long long)k->min, (unsigned long long)k->max);
			rc = -EINVAL;
			break;
		}
		*(double *)f = d;
		break;
	}
	}
	free(v);
	if (rc == 0) {
		size_t idx = (size_t)(k - keys);
		free(c->origin[idx]);
		c->origin[idx] = xstrdup(origin);
	}
	return rc ? -EINVAL : 0;
}

int cfg_init(struct seer_config *c, char *err, size_t errlen)
{
	memset(c, 0, sizeof(*c));
	c->origin = xcalloc(NKEYS, sizeof(char *));
	for (size_t i = 0; i < NKEYS; i++) {
		char why[256];
		if (set_key(c, &keys[i], keys[i].def, "default", why, sizeof(why)) != 0) {
			snprintf(err, errlen, "default of [%s] %s: %s", keys[i].section, keys[i].name, why);
			return -EINVAL;
		}
	}
	return 0;
}

void cfg_free(struct seer_config *c)
{
	for (size_t i = 0; i < NKEYS; i++) {
		if (keys[i].type == CFG_STR || keys[i].type == CFG_ENUM || keys[i].type == CFG_LOGLEVEL)
			free(*(char **)field(c, &keys[i]));
		if (c->origin)
			free(c->origin[i]);
	}
	free(c->origin);
	memset(c, 0, sizeof(*c));
}

struct ini_ctx {
	struct seer_config *c;
	const char *path;
	FILE *f;
	char msg[512];
	int line;          /* lines read: the one inih is parsing */
	int fail_line;     /* line that msg is about */
	int max_line;      /* longest line inih can take */
	bool too_long;     /* line `line` did not fit inih's buffer */
	bool failed;
};

/* inih reads the file through this, so that the handler knows its line and
 * a line longer than inih's fixed buffer stops the parse (inih would cut it
 * in two and parse the halves as two lines). */
static char *cfg_ini_read_line(char *buf, int num, void *stream)
{
	struct ini_ctx *x = stream;
	if (x->too_long || !fgets(buf, num, x->f))
		return NULL;
	x->line++;
	size_t n = strlen(buf);
	if (n > 0 && buf[n - 1] != '\n') {
		int ch = getc(x->f);
		if (ch != EOF && ch != '\n') {
			x->too_long = true;
			x->max_line = num - 1;
			return NULL;
		}
	}
	return buf;
}

static int cfg_ini_handler(void *user, const char *section, const char *name, const char *value)
{
	struct ini_ctx *x = user;
	if (x->failed)
		return 0;
	if (!section || !*section) {
		snprintf(x->msg, sizeof(x->msg), "key '%s' outside a [section]", name);
		x->failed = true;
		x->fail_line = x->line;
		return 0;
	}
	const struct cfg_key *k = find_key(section, name);
	if (!k) {
		bool sec_known = false;
		for (size_t i = 0; i < NKEYS; i++)
			sec_known |= strcmp(keys[i].section, section) == 0;
		if (sec_known)
			snprintf(x->msg, sizeof(x->msg),
				 "unknown key '%s' in [%s] (seerd --help lists the keys)", name, section);
		else
			snprintf(x->msg, sizeof(x->msg),
				 "key '%s' in unknown section [%s] (sections: dataset, job, cache, "
				 "prefetch, net, daemon, transform)", name, section);
		x->failed = true;
		x->fail_line = x->line;
		return 0;
	}
	char why[400];
	char origin[300];
	snprintf(origin, sizeof(origin), "%s:%d", x->path, x->line);
	if (set_key(x->c, k, value, origin, why, sizeof(why)) != 0) {
		snprintf(x->msg, sizeof(x->msg), "[%s] %s: %s", section, name, why);
		x->failed = true;
		x->fail_line = x->line;
		return 0;
	}
	return 1;
}

int cfg_load_file(struct seer_config *c, const char *path, char *err, size_t errlen)
{
	struct ini_ctx x = { .c = c, .path = path };
	x.f = fopen(path, "r");
	if (!x.f) {
		snprintf(err, errlen, "config file %s: %s", path, strerror(errno));
		return -EINVAL;
	}
	int line = ini_parse_stream(cfg_ini_read_line, &x, cfg_ini_handler, &x);
	bool io_error = ferror(x.f);
	fclose(x.f);
	if (line == -2) {
		snprintf(err, errlen, "config file %s: out of memory", path);
		return -ENOMEM;
	}
	/* inih reports the first bad line; the handler's message is about
	 * its own line, which may come after a syntax error */
	if (line > 0) {
		if (x.failed && x.fail_line == line)
			snprintf(err, errlen, "%s:%d: %s", path, line, x.msg);
		else
			snprintf(err, errlen, "%s:%d: syntax error (expected [section] or key = value)",
				 path, line);
		return -EINVAL;
	}
	if (x.too_long) {
		snprintf(err, errlen, "%s:%d: line longer than %d characters (give long values "
			 "with --set section.key=value)", path, x.line, x.max_line);
		return -EINVAL;
	}
	if (io_error) {
		snprintf(err, errlen, "config file %s: read error", path);
		return -EIO;
	}
	return 0;
}

int cfg_set(struct seer_config *c, const char *assignment, char *err, size_t errlen)
{
	const char *eq = strchr(assignment, '=');
	const char *dot = strchr(assignment, '.');
	if (!eq || !dot || dot > eq) {
		snprintf(err, errlen, "--set %s: expected section.key=value", assignment);
		return -EINVAL;
	}
	char section[64], name[64];
	size_t sl = (size_t)(dot - assignment), nl = (size_t)(eq - dot - 1);
	if (sl == 0 || sl >= sizeof(section) || nl == 0 || nl >= sizeof(name)) {
		snprintf(err, errlen, "--set %s: expected section.key=value", assignment);
		return -EINVAL;
	}
	memcpy(section, assignment, sl);
	section[sl] = '\0';
	memcpy(name, dot + 1, nl);
	name[nl] = '\0';
	const struct cfg_key *k = find_key(section, name);
	if (!k) {
		snprintf(err, errlen, "--set %s: unknown key %s.%s (seerd --help lists the keys)",
			 assignment, section, name);
		return -EINVAL;
	}
	char why[400];
	if (set_key(c, k, eq + 1, "--set", why, sizeof(why)) != 0) {
		snprintf(err, errlen, "--set %s.%s: %s", section, name, why);
		return -EINVAL;
	}
	return 0;
}

static int parse_resume(const char *s, uint64_t *e, uint64_t *st)
{
	const char *colon = strchr(s, ':');
	if (!colon)
		return -EINVAL;
	char a[32];
	size_t n = (size_t)(colon - s);
	if (n == 0 || n >= sizeof(a))
		return -EINVAL;
	memcpy(a, s, n);
	a[n] = '\0';
	if (parse_u64(a, e) || parse_u64(colon + 1, st))
		return -EINVAL;
	return 0;
}

int cfg_finish(struct seer_config *c, char *err, size_t errlen)
{
	if (!c->dataset_path || !*c->dataset_path) {
		snprintf(err, errlen, "[dataset] path is not set: give the dataset directory in the "
				      "config file or with --set dataset.path=DIR");
		return -EINVAL;
	}
	if (!*c->job_id || strlen(c->job_id) >= 64 || strchr(c->job_id, '/')) {
		snprintf(err, errlen, "[job] id '%s' must be 1-63 characters without '/'", c->job_id);
		return -EINVAL;
	}
	if (*c->resume && strcmp(c->resume, "auto") != 0) {
		uint64_t e, s;
		if (parse_resume(c->resume, &e, &s) != 0) {
			snprintf(err, errlen, "[job] resume '%s': expected epoch:step (e.g. 3:120) or auto",
				 c->resume);
			return -EINVAL;
		}
		if (e >= c->epochs) {
			snprintf(err, errlen, "[job] resume epoch %llu is past the job's %llu epochs",
				 (unsigned long long)e, (unsigned long long)c->epochs);
			return -EINVAL;
		}
	}
	if (c->lookahead + c->max_held + 2 > 4096) {
		/* batch slots per trainer: a power of two >= lookahead + max_held + 2,
		 * at most the 4096 a client takes */
		snprintf(err, errlen, "[prefetch] lookahead %llu + [job] max_held %llu is more than "
			 "4094 batches per trainer: lower one of them",
			 (unsigned long long)c->lookahead, (unsigned long long)c->max_held);
		return -EINVAL;
	}
	if (c->extent_memory < c->extent_max) {
		snprintf(err, errlen, "[prefetch] extent_memory (%llu bytes) is less than extent_max "
			 "(%llu bytes): raise extent_memory or lower extent_max",
			 (unsigned long long)c->extent_memory, (unsigned long long)c->extent_max);
		return -EINVAL;
	}
	if (c->nvme > 0 && !*c->nvme_dir) {
		snprintf(err, errlen, "[cache] nvme is %llu bytes but nvme_dir is not set",
			 (unsigned long long)c->nvme);
		return -EINVAL;
	}
	struct xf_params xp;
	int xrc = cfg_transform(c, &xp, err, errlen);
	if (xrc)
		return xrc;
	if (!*c->socket) {
		char buf[4096], why[768];
		if (path_default_socket(buf, sizeof(buf), c->job_id, true, why, sizeof(why)) != 0) {
			snprintf(err, errlen, "default socket path: %s (or set [daemon] socket)", why);
			return -EINVAL;
		}
		free(c->socket);
		c->socket = xstrdup(buf);
	}
	char why[768], show[CAT_PATH_SHOW];
	if (path_check_private_dir(c->state_dir, why, sizeof(why)) != 0) {
		/* both paths abbreviated: the reason and the advice must survive */
		snprintf(err, errlen, "[daemon] state_dir %s cannot be trusted: %s. Another user "
			 "could plant a forged catalog or resume record there: set [daemon] "
			 "state_dir (or HOME / XDG_CACHE_HOME) to a directory only you can write",
			 cat_path_abbrev(show, sizeof(show), c->state_dir), why);
		return -EINVAL;
	}
	return 0;
}

int cfg_transform(const struct seer_config *c, struct xf_params *p, char *err, size_t errlen)
{
	static const char *const names[] = { "decode", "crop", "size", "scale", "ratio",
					     "normalize", "output", "cache" };
	const char *vals[] = { c->xf_decode, c->xf_crop, c->xf_size, c->xf_scale, c->xf_ratio,
			       c->xf_normalize, c->xf_output, c->xf_cache };
	char why[300];
	xf_params_default(p);
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		if (xf_params_set(p, names[i], vals[i] ? vals[i] : "", why, sizeof(why)) != 0) {
			snprintf(err, errlen, "[transform] %s: %s", names[i], why);
			return -EINVAL;
		}
	}
	p->resize = (uint32_t)c->xf_resize;
	p->hflip = c->xf_hflip;
	p->threads = (uint32_t)c->xf_threads;
	p->cache_size = (uint32_t)c->xf_cache_size;
	if (xf_params_check(p, why, sizeof(why)) != 0) {
		snprintf(err, errlen, "[transform] %s", why);
		return -EINVAL;
	}
	return 0;
}

int cfg_resume(const struct seer_config *c, uint64_t *epoch, uint64_t *step)
{
	if (!*c->resume || strcmp(c->resume, "auto") == 0)
		return -ENOENT;
	return parse_resume(c->resume, epoch, step);
}

static void value_str(const struct seer_config *c, const struct cfg_key *k, char *buf, size_t len)
{
	const void *f = (const char *)c + k->off;
	switch (k->type) {
	case CFG_STR:
	case CFG_ENUM:
	case CFG_LOGLEVEL:
		snprintf(buf, len, "%s", *(char *const *)f ? *(char *const *)f : "");
		break;
	case CFG_U64:
	case CFG_SIZE:
		snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)f);
		break;
	case CFG_BOOL:
		snprintf(buf, len, "%s", *(const bool *)f ? "true" : "false");
		break;
	case CFG_DOUBLE: {
		/* the shortest text that reads back as the same double */
		double d = *(const double *)f;
		for (int prec = 6; prec <= 17; prec++) {
			snprintf(buf, len, "%.*g", prec, d);
			if (strtod(buf, NULL) == d)
				break;
		}
		break;
	}
	}
}

char *cfg_dump(const struct seer_config *c)
{
	size_t cap = 8192, len = 0;
	char *out = xmalloc(cap);
	out[0] = '\0';
	const char *section = "";
	for (size_t i = 0; i < NKEYS; i++) {
		char raw[1024], val[1024], line[1400];
		value_str(c, &keys[i], raw, sizeof(raw));
		/* '$' doubled, so that reading the dump back does not expand it */
		size_t v = 0;
		for (const char *r = raw; *r && v + 2 < sizeof(val); r++) {
			if (*r == '$')
				val[v++] = '$';
			val[v++] = *r;
		}
		val[v] = '\0';
		int n = 0;
		if (strcmp(section, keys[i].section) != 0) {
			section = keys[i].section;
			n = snprintf(line, sizeof(line), "%s[%s]\n", len ? "\n" : "", section);
		}
		n += snprintf(line + n, sizeof(line) - (size_t)n, "%s = %s    ; %s\n", keys[i].name, val,
			      c->origin && c->origin[i] ? c->origin[i] : "default");
		if (len + (size_t)n + 1 > cap) {
			cap = cap * 2 + (size_t)n;
			out = xrealloc(out, cap);
		}
		memcpy(out + len, line, (size_t)n + 1);
		len += (size_t)n;
	}
	return out;
}

void cfg_help(FILE *out)
{
	const char *section = "";
	for (size_t i = 0; i < NKEYS; i++) {
		if (strcmp(section, keys[i].section) != 0) {
			section = keys[i].section;
			fprintf(out, "\n[%s]\n", section);
		}
		static const char *tn[] = { "string", "integer", "size", "bool", "number", "choice",
					    "level" };
		fprintf(out, "  %-18s %-8s default %-12s %s\n", keys[i].name, tn[keys[i].type],
			*keys[i].def ? keys[i].def : "\"\"", keys[i].help);
	}
}

uint64_t cfg_job_hash(const struct seer_config *c)
{
	XXH64_state_t *st = XXH64_createState();
	XXH64_reset(st, 0x10b5);
	for (size_t i = 0; i < NKEYS; i++) {
		if (!keys[i].job)
			continue;
		char val[1024];
		value_str(c, &keys[i], val, sizeof(val));
		XXH64_update(st, keys[i].section, strlen(keys[i].section) + 1);
		XXH64_update(st, keys[i].name, strlen(keys[i].name) + 1);
		XXH64_update(st, val, strlen(val) + 1);
	}
	uint64_t h = XXH64_digest(st);
	XXH64_freeState(st);
	return h;
}


char *cfg_dump_job(const struct seer_config *c)
{
	size_t cap = 4096, len = 0;
	char *out = xmalloc(cap);
	out[0] = '\0';
	for (size_t i = 0; i < NKEYS; i++) {
		if (!keys[i].job)
			continue;
		char val[1024], line[1200];
		value_str(c, &keys[i], val, sizeof(val));
		int n = snprintf(line, sizeof(line), "%s%s.%s = %s\n", "", keys[i].section,
				 keys[i].name, val);
		if (len + (size_t)n + 1 > cap) {
			cap = cap * 2 + (size_t)n;
			out = xrealloc(out, cap);
		}
		memcpy(out + len, line, (size_t)n + 1);
		len += (size_t)n;
	}
	return out;
}

bool cfg_item(const struct seer_config *c, size_t i, struct cfg_item *out)
{
	if (i >= NKEYS)
		return false;
	const struct cfg_key *k = &keys[i];
	static const char kinds[] = { [CFG_STR] = 's', [CFG_U64] = 'u', [CFG_SIZE] = 'u',
				      [CFG_BOOL] = 'b', [CFG_DOUBLE] = 'd', [CFG_ENUM] = 's',
				      [CFG_LOGLEVEL] = 's' };
	out->section = k->section;
	out->name = k->name;
	out->origin = c->origin && c->origin[i] ? c->origin[i] : "default";
	out->kind = kinds[k->type];
	value_str(c, k, out->value, sizeof(out->value));
	return true;
}
