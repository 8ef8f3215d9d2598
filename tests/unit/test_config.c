/* config: the key table, INI files, --set, ${VAR} expansion, the dump and
 * the job hash. Every test runs with a scrubbed environment and its own
 * temporary directory for INI files. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <ftw.h>
#include <pwd.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/config/config.h"
#include "../../src/util/util.h"


static char tmpdir[64];
static struct seer_config cfg;
static char err[1024];

/* Variables the defaults or the tests read: none may leak in from the
 * environment that runs the tests. */
static const char *const scrubbed[] = {
	"SEER_JOB_ID", "SLURM_JOB_ID", "FI_PROVIDER", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR",
	"SEER_TEST_A", "SEER_TEST_B", "SEER_TEST_C", "SEER_TEST_UNSET", "SEER_TEST_EMPTY",
};

static void setup(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/seer-cfg-XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
	for (size_t i = 0; i < sizeof(scrubbed) / sizeof(scrubbed[0]); i++)
		unsetenv(scrubbed[i]);
	setenv("SEER_RUNTIME_DIR", tmpdir, 1);
	setenv("HOME", "/home/tester", 1);
	err[0] = '\0';
	cr_assert_eq(config_init(&cfg, err, sizeof(err)), 0, "config_init: %s", err);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static void teardown(void)
{
	config_free(&cfg);
	nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(config, .init = setup, .fini = teardown);

/* Writes an INI file into the fixture directory; returns its path (static). */
static const char *ini(const char *name, const char *text)
{
	static char path[2][256];
	static int which;
	char *p = path[which++ % 2];
	snprintf(p, sizeof(path[0]), "%s/%s", tmpdir, name);
	FILE *f = fopen(p, "w");
	cr_assert_not_null(f, "cannot write %s", p);
	fputs(text, f);
	cr_assert_eq(fclose(f), 0);
	return p;
}

static void assert_has(const char *msg, const char *needle)
{
	cr_assert(strstr(msg, needle) != NULL, "message lacks \"%s\": %s", needle, msg);
}

/* ---- defaults ---------------------------------------------------------------- */

Test(config, defaults)
{
	cr_assert_str_eq(cfg.dataset.path, "");
	cr_assert_str_eq(cfg.dataset.format, "files");
	cr_assert_str_eq(cfg.dataset.extensions, "");
	cr_assert_str_eq(cfg.dataset.hdf5_data, "records");
	cr_assert_str_eq(cfg.dataset.hdf5_labels, "labels");
	cr_assert_str_eq(cfg.dataset.npz_data, "x");
	cr_assert_str_eq(cfg.dataset.npz_labels, "y");
	cr_assert_str_eq(cfg.dataset.npz_sample_axis, "last");
	cr_assert_str_eq(cfg.dataset.on_corrupt, "fail");
	cr_assert_str_eq(cfg.dataset.tar_extensions, "jpg,jpeg,png,webp");
	cr_assert_str_eq(cfg.dataset.tar_label, "cls");
	cr_assert_eq(cfg.dataset.rebuild_catalog, false);
	cr_assert_str_eq(cfg.job.id, "default");
	cr_assert_eq(cfg.job.seed, 0);
	cr_assert_eq(cfg.job.epochs, 1);
	cr_assert_eq(cfg.job.batch_size, 32);
	cr_assert_eq(cfg.job.drop_last, false);
	cr_assert_eq(cfg.job.shuffle, true);
	cr_assert_eq(cfg.job.world_size, 0);
	cr_assert_eq(cfg.job.max_held, 2);
	cr_assert_str_eq(cfg.job.resume, "");
	cr_assert_eq(cfg.cache.ram, 1ull << 30);
	cr_assert_eq(cfg.cache.staging, 256ull << 20);
	cr_assert_str_eq(cfg.cache.nvme_dir, "");
	cr_assert_eq(cfg.cache.nvme, 0);
	cr_assert_eq(cfg.prefetch.io_threads, 16);
	cr_assert_eq(cfg.prefetch.lookahead, 8);
	cr_assert_eq(cfg.prefetch.retries, 3);
	cr_assert_float_eq(cfg.prefetch.retry_backoff_ms, 20.0, 0);
	cr_assert_str_eq(cfg.net.provider, "tcp;ofi_rxm");
	cr_assert_float_eq(cfg.net.peer_timeout_ms, 2000.0, 0);
	cr_assert_str_eq(cfg.daemon.socket, "");
	cr_assert_str_eq(cfg.daemon.state_dir, "/home/tester/.cache/seer");
	cr_assert_str_eq(cfg.daemon.log_level, "info");
	cr_assert_str_eq(cfg.daemon.stats_file, "");
	cr_assert_str_eq(cfg.daemon.cpuset, "");
	cr_assert_float_eq(cfg.daemon.connect_timeout_s, 600.0, 0);
	uint64_t e, s;
	cr_assert_eq(config_resume(&cfg, &e, &s), -ENOENT);
}

/* Defaults that come from the environment. */
Test(config, defaults_from_environment)
{
	config_free(&cfg);
	setenv("SLURM_JOB_ID", "4711", 1);
	setenv("FI_PROVIDER", "verbs", 1);
	setenv("XDG_CACHE_HOME", "/xdg", 1);
	cr_assert_eq(config_init(&cfg, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(cfg.job.id, "4711");
	cr_assert_str_eq(cfg.net.provider, "verbs");
	cr_assert_str_eq(cfg.daemon.state_dir, "/xdg/seer");
	config_free(&cfg);
	setenv("SEER_JOB_ID", "mine", 1); /* wins over Slurm's */
	unsetenv("XDG_CACHE_HOME");
	unsetenv("HOME");
	cr_assert_eq(config_init(&cfg, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(cfg.job.id, "mine");
	cr_assert_str_eq(cfg.daemon.state_dir, "/tmp/.cache/seer");
}

/* ---- a whole file --------------------------------------------------------- */

Test(config, file_parsing)
{
	setenv("SEER_TEST_A", "/pfs/imagenet", 1);
	const char *p = ini("job.ini",
			    "; a comment\n"
			    "# another comment\n"
			    "\n"
			    "[dataset]\n"
			    "path = ${SEER_TEST_A}/train\n"
			    "format=npz\n"
			    "npz_data   =   images   \n"
			    "\n"
			    "[job]\n"
			    "id = run-7   ; inline comment\n"
			    "seed = 12345\n"
			    "epochs = 90\n"
			    "batch_size = 256\n"
			    "drop_last = yes\n"
			    "shuffle = off\n"
			    "world_size = 64\n"
			    "resume = 3:120\n"
			    "[cache]\n"
			    "ram = 64GiB\n"
			    "staging = 1.5GiB\n"
			    "nvme_dir = /local/nvme\n"
			    "nvme = 2TB\n"
			    "[prefetch]\n"
			    "io_threads = 32\n"
			    "retry_backoff_ms = 12.5\n"
			    "[net]\n"
			    "provider = verbs;ofi_rxm\n"
			    "[daemon]\n"
			    "log_level = DEBUG\n"
			    "socket = /run/seer-%n.sock\n");
	cr_assert_eq(config_load_file(&cfg, p, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(cfg.dataset.path, "/pfs/imagenet/train");
	cr_assert_str_eq(cfg.dataset.format, "npz");
	cr_assert_str_eq(cfg.dataset.npz_data, "images");
	cr_assert_str_eq(cfg.job.id, "run-7");
	cr_assert_eq(cfg.job.seed, 12345);
	cr_assert_eq(cfg.job.epochs, 90);
	cr_assert_eq(cfg.job.batch_size, 256);
	cr_assert_eq(cfg.job.drop_last, true);
	cr_assert_eq(cfg.job.shuffle, false);
	cr_assert_eq(cfg.job.world_size, 64);
	cr_assert_eq(cfg.cache.ram, 64ull << 30);
	cr_assert_eq(cfg.cache.staging, 3ull << 29);
	cr_assert_str_eq(cfg.cache.nvme_dir, "/local/nvme");
	cr_assert_eq(cfg.cache.nvme, 2000000000000ull);
	cr_assert_eq(cfg.prefetch.io_threads, 32);
	cr_assert_float_eq(cfg.prefetch.retry_backoff_ms, 12.5, 0);
	cr_assert_str_eq(cfg.net.provider, "verbs;ofi_rxm");
	cr_assert_str_eq(cfg.daemon.log_level, "DEBUG");
	cr_assert_str_eq(cfg.daemon.socket, "/run/seer-%n.sock");
	/* untouched keys keep their defaults */
	cr_assert_eq(cfg.prefetch.lookahead, 8);
	cr_assert_str_eq(cfg.dataset.on_corrupt, "fail");
	cr_assert_eq(config_finish(&cfg, err, sizeof(err)), 0, "%s", err);
	uint64_t e = 0, s = 0;
	cr_assert_eq(config_resume(&cfg, &e, &s), 0);
	cr_assert_eq(e, 3);
	cr_assert_eq(s, 120);
}

Test(config, later_files_override_earlier)
{
	const char *a = ini("a.ini", "[job]\nseed = 1\nepochs = 5\n");
	cr_assert_eq(config_load_file(&cfg, a, err, sizeof(err)), 0, "%s", err);
	const char *b = ini("b.ini", "[job]\nseed = 2\n");
	cr_assert_eq(config_load_file(&cfg, b, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(cfg.job.seed, 2);
	cr_assert_eq(cfg.job.epochs, 5);
}

/* ---- every type: good and bad values, through a file and through --set ---- */

enum vtype { T_U64, T_BOOL, T_DBL, T_STR };

struct val_case {
	char section[16], key[24], value[48];
	bool ok;
	enum vtype type;
	size_t off;         /* field in struct seer_config */
	uint64_t u;         /* T_U64, T_BOOL */
	double d;           /* T_DBL */
	char s[24];         /* T_STR */
};

#define F(field) offsetof(struct seer_config, field)
#define GOOD_U(sec, k, v, field, want) { sec, k, v, true, T_U64, F(field), want, 0, "" }
#define GOOD_B(sec, k, v, field, want) { sec, k, v, true, T_BOOL, F(field), want, 0, "" }
#define GOOD_D(sec, k, v, field, want) { sec, k, v, true, T_DBL, F(field), 0, want, "" }
#define GOOD_S(sec, k, v, field, want) { sec, k, v, true, T_STR, F(field), 0, 0, want }
#define BAD(sec, k, v, type, field) { sec, k, v, false, type, F(field), 0, 0, "" }

static struct val_case val_cases[] = {
	/* sizes */
	GOOD_U("cache", "ram", "64GiB", cache.ram, 64ull << 30),
	GOOD_U("cache", "ram", "512MB", cache.ram, 512000000),
	GOOD_U("cache", "ram", "4k", cache.ram, 4096),
	GOOD_U("cache", "ram", "1.5G", cache.ram, 3ull << 29),
	GOOD_U("cache", "ram", "0", cache.ram, 0),
	GOOD_U("cache", "ram", "2 TiB", cache.ram, 2ull << 40),
	GOOD_U("cache", "staging", "1MiB", cache.staging, 1ull << 20),
	BAD("cache", "ram", "12 parsecs", T_U64, cache.ram),
	BAD("cache", "ram", "-1G", T_U64, cache.ram),
	BAD("cache", "ram", "0.5", T_U64, cache.ram),
	BAD("cache", "ram", "GiB", T_U64, cache.ram),
	BAD("cache", "ram", "", T_U64, cache.ram),
	BAD("cache", "ram", "99999999TiB", T_U64, cache.ram),
	BAD("cache", "staging", "1000", T_U64, cache.staging),       /* below 1 MiB */
	BAD("cache", "staging", "1048575", T_U64, cache.staging),
	BAD("cache", "staging", "18446744073709551615", T_U64, cache.staging), /* rounded to 0 B once */
	BAD("cache", "ram", "1152921504606846977", T_U64, cache.ram),
	BAD("cache", "nvme", "18446744073709551615", T_U64, cache.nvme),
	GOOD_U("cache", "staging", "1152921504606846976", cache.staging, 1ull << 60),
	/* integers with ranges */
	GOOD_U("job", "seed", "18446744073709551615", job.seed, UINT64_MAX),
	GOOD_U("job", "seed", "0x10", job.seed, 16),
	GOOD_U("job", "seed", "010", job.seed, 10),
	GOOD_U("job", "epochs", "1", job.epochs, 1),
	GOOD_U("job", "epochs", "1000000", job.epochs, 1000000),
	GOOD_U("job", "batch_size", "1048576", job.batch_size, 1048576),
	GOOD_U("job", "world_size", "0", job.world_size, 0),
	GOOD_U("job", "world_size", "16777216", job.world_size, 16777216),
	GOOD_U("job", "max_held", "1", job.max_held, 1),
	GOOD_U("job", "max_held", "1024", job.max_held, 1024),
	GOOD_U("prefetch", "retries", "0", prefetch.retries, 0),
	GOOD_U("prefetch", "io_threads", "1024", prefetch.io_threads, 1024),
	BAD("job", "seed", "18446744073709551616", T_U64, job.seed),
	BAD("job", "seed", "-3", T_U64, job.seed),
	BAD("job", "seed", "3x", T_U64, job.seed),
	BAD("job", "seed", "1.0", T_U64, job.seed),
	BAD("job", "epochs", "0", T_U64, job.epochs),
	BAD("job", "epochs", "1000001", T_U64, job.epochs),
	BAD("job", "batch_size", "0", T_U64, job.batch_size),
	BAD("job", "batch_size", "1048577", T_U64, job.batch_size),
	BAD("job", "world_size", "16777217", T_U64, job.world_size),
	BAD("job", "max_held", "0", T_U64, job.max_held),
	BAD("job", "max_held", "1025", T_U64, job.max_held),
	BAD("prefetch", "io_threads", "0", T_U64, prefetch.io_threads),
	BAD("prefetch", "io_threads", "1025", T_U64, prefetch.io_threads),
	BAD("prefetch", "lookahead", "4097", T_U64, prefetch.lookahead),
	BAD("prefetch", "retries", "101", T_U64, prefetch.retries),
	BAD("prefetch", "lookahead", "8k", T_U64, prefetch.lookahead),
	/* booleans */
	GOOD_B("job", "drop_last", "true", job.drop_last, 1),
	GOOD_B("job", "drop_last", "YES", job.drop_last, 1),
	GOOD_B("job", "drop_last", "on", job.drop_last, 1),
	GOOD_B("job", "drop_last", "1", job.drop_last, 1),
	GOOD_B("job", "shuffle", "false", job.shuffle, 0),
	GOOD_B("job", "shuffle", "No", job.shuffle, 0),
	GOOD_B("job", "shuffle", "off", job.shuffle, 0),
	GOOD_B("job", "shuffle", "0", job.shuffle, 0),
	GOOD_B("dataset", "rebuild_catalog", "true", dataset.rebuild_catalog, 1),
	BAD("job", "drop_last", "maybe", T_BOOL, job.drop_last),
	BAD("job", "drop_last", "2", T_BOOL, job.drop_last),
	BAD("job", "shuffle", "", T_BOOL, job.shuffle),
	BAD("job", "shuffle", "truefalse", T_BOOL, job.shuffle),
	/* choices */
	GOOD_S("dataset", "format", "npz", dataset.format, "npz"),
	GOOD_S("dataset", "format", "hdf5", dataset.format, "hdf5"),
	GOOD_S("dataset", "format", "tfrecord", dataset.format, "tfrecord"),
	GOOD_S("dataset", "format", "indexed", dataset.format, "indexed"),
	GOOD_S("dataset", "format", "tar", dataset.format, "tar"),
	GOOD_S("dataset", "tar_extensions", "png,jpg", dataset.tar_extensions, "png,jpg"),
	GOOD_S("dataset", "tar_label", "", dataset.tar_label, ""),
	GOOD_S("dataset", "on_corrupt", "skip", dataset.on_corrupt, "skip"),
	GOOD_S("dataset", "npz_sample_axis", "first", dataset.npz_sample_axis, "first"),
	GOOD_S("daemon", "log_level", "debug", daemon.log_level, "debug"),
	GOOD_S("daemon", "log_level", "WARN", daemon.log_level, "WARN"),
	BAD("dataset", "format", "zip", T_STR, dataset.format),
	BAD("dataset", "format", "NPZ", T_STR, dataset.format),
	BAD("dataset", "format", "", T_STR, dataset.format),
	BAD("dataset", "on_corrupt", "ignore", T_STR, dataset.on_corrupt),
	BAD("dataset", "npz_sample_axis", "middle", T_STR, dataset.npz_sample_axis),
	BAD("daemon", "log_level", "verbose", T_STR, daemon.log_level),
	/* numbers */
	GOOD_D("prefetch", "retry_backoff_ms", "2.5", prefetch.retry_backoff_ms, 2.5),
	GOOD_D("prefetch", "retry_backoff_ms", "0", prefetch.retry_backoff_ms, 0),
	GOOD_D("prefetch", "retry_backoff_ms", "60000", prefetch.retry_backoff_ms, 60000),
	GOOD_D("prefetch", "retry_backoff_ms", "1e3", prefetch.retry_backoff_ms, 1000),
	GOOD_D("net", "peer_timeout_ms", "1", net.peer_timeout_ms, 1),
	GOOD_D("daemon", "connect_timeout_s", "0.1e2", daemon.connect_timeout_s, 10),
	BAD("prefetch", "retry_backoff_ms", "-1", T_DBL, prefetch.retry_backoff_ms),
	BAD("prefetch", "retry_backoff_ms", "60000.5", T_DBL, prefetch.retry_backoff_ms),
	BAD("prefetch", "retry_backoff_ms", "abc", T_DBL, prefetch.retry_backoff_ms),
	BAD("prefetch", "retry_backoff_ms", "nan", T_DBL, prefetch.retry_backoff_ms),
	BAD("prefetch", "retry_backoff_ms", "inf", T_DBL, prefetch.retry_backoff_ms),
	BAD("prefetch", "retry_backoff_ms", "20ms", T_DBL, prefetch.retry_backoff_ms),
	BAD("net", "peer_timeout_ms", "0.5", T_DBL, net.peer_timeout_ms),
	BAD("daemon", "connect_timeout_s", "0", T_DBL, daemon.connect_timeout_s),
	/* strings take anything, after expansion */
	GOOD_S("dataset", "path", "/a b/c", dataset.path, "/a b/c"),
	GOOD_S("dataset", "extensions", "jpg,png", dataset.extensions, "jpg,png"),
	GOOD_S("daemon", "cpuset", "0-3,8", daemon.cpuset, "0-3,8"),
};

ParameterizedTestParameters(config, values_via_set)
{
	return cr_make_param_array(struct val_case, val_cases,
				   sizeof(val_cases) / sizeof(val_cases[0]));
}

ParameterizedTestParameters(config, values_via_file)
{
	return cr_make_param_array(struct val_case, val_cases,
				   sizeof(val_cases) / sizeof(val_cases[0]));
}

/* Field as text, so before/after comparisons work for every type. */
static void field_text(const struct seer_config *c, const struct val_case *v, char *buf,
		       size_t len)
{
	const char *f = (const char *)c + v->off;
	switch (v->type) {
	case T_U64:
		snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)f);
		break;
	case T_BOOL:
		snprintf(buf, len, "%d", *(const bool *)f);
		break;
	case T_DBL:
		snprintf(buf, len, "%.17g", *(const double *)f);
		break;
	case T_STR:
		snprintf(buf, len, "%s", *(char *const *)f);
		break;
	}
}

static void check_value(const struct val_case *v, int rc, const char *how)
{
	const char *f = (const char *)&cfg + v->off;
	if (!v->ok) {
		cr_assert_neq(rc, 0, "%s %s.%s=\"%s\" accepted", how, v->section, v->key, v->value);
		/* the message names the key and the offending value */
		assert_has(err, v->key);
		if (*v->value)
			assert_has(err, v->value);
		return;
	}
	cr_assert_eq(rc, 0, "%s %s.%s=\"%s\": %s", how, v->section, v->key, v->value, err);
	switch (v->type) {
	case T_U64:
		cr_assert_eq(*(const uint64_t *)f, v->u, "%s.%s=%s gives %llu", v->section, v->key,
			     v->value, (unsigned long long)*(const uint64_t *)f);
		break;
	case T_BOOL:
		cr_assert_eq(*(const bool *)f, (bool)v->u, "%s.%s=%s", v->section, v->key, v->value);
		break;
	case T_DBL:
		cr_assert_float_eq(*(const double *)f, v->d, 0, "%s.%s=%s gives %g", v->section,
				   v->key, v->value, *(const double *)f);
		break;
	case T_STR:
		cr_assert_str_eq(*(char *const *)f, v->s);
		break;
	}
}

ParameterizedTest(struct val_case *v, config, values_via_set)
{
	char before[128], after[128], a[128];
	field_text(&cfg, v, before, sizeof(before));
	snprintf(a, sizeof(a), "%s.%s=%s", v->section, v->key, v->value);
	int rc = config_set(&cfg, a, err, sizeof(err));
	check_value(v, rc, "--set");
	if (!v->ok) {
		assert_has(err, "--set");
		field_text(&cfg, v, after, sizeof(after));
		cr_assert_str_eq(after, before, "a rejected value changed the field");
	}
}

ParameterizedTest(struct val_case *v, config, values_via_file)
{
	char text[256], before[128], after[128];
	field_text(&cfg, v, before, sizeof(before));
	snprintf(text, sizeof(text), "[%s]\n\n%s = %s\n", v->section, v->key, v->value);
	const char *p = ini("v.ini", text);
	int rc = config_load_file(&cfg, p, err, sizeof(err));
	check_value(v, rc, "file");
	if (!v->ok) {
		char where[300];
		snprintf(where, sizeof(where), "%s:3", p);
		assert_has(err, where);
		field_text(&cfg, v, after, sizeof(after));
		cr_assert_str_eq(after, before, "a rejected value changed the field");
	}
}

/* ---- error messages: file, line and key ----------------------------------- */

struct err_case {
	char text[160];
	int line;
	char needles[3][24]; /* must all appear ("" = none) */
	char absent[24];     /* must not appear ("" = none) */
};

ParameterizedTestParameters(config, file_errors)
{
	static struct err_case cases[] = {
		{ "[job]\nseed = 1\n\nbogus_key = 3\n", 4, { "bogus_key", "[job]", "" }, "" },
		{ "; comment\n[jobs]\nseed = 1\n", 3, { "jobs", "seed", "" }, "" },
		{ "# hi\nseed = 1\n[job]\n", 2, { "seed", "section", "" }, "" },
		{ "[job]\nseed = 1\nthis line is wrong\n", 3, { "syntax", "", "" }, "" },
		{ "[job]\n\n\nepochs = 0\n", 4, { "epochs", "0", "range" }, "" },
		{ "[job\nseed = 1\n", 1, { "syntax", "", "" }, "" },
		{ "[dataset]\npath = ${SEER_TEST_UNSET}/x\n", 2, { "path", "SEER_TEST_UNSET", "" },
		  "" },
		{ "[dataset]\npath = ${SEER_TEST_UNSET\n", 2, { "path", "unterminated", "" }, "" },
		/* the first error is reported, with its own line and text */
		{ "[job]\nnot valid\nbogus = 1\n", 2, { "syntax", "", "" }, "bogus" },
		{ "[job]\nbogus = 1\nnot valid\n", 2, { "bogus", "", "" }, "syntax" },
		{ "[job]\nseed = 1\n[cache]\nram = lots\nstaging = 1\n", 4, { "ram", "lots", "" },
		  "staging" },
	};
	return cr_make_param_array(struct err_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct err_case *c, config, file_errors)
{
	const char *p = ini("bad.ini", c->text);
	cr_assert_eq(config_load_file(&cfg, p, err, sizeof(err)), -EINVAL, "accepted:\n%s", c->text);
	char where[300];
	snprintf(where, sizeof(where), "%s:%d:", p, c->line);
	assert_has(err, where);
	for (int i = 0; i < 3; i++)
		if (c->needles[i][0])
			assert_has(err, c->needles[i]);
	if (c->absent[0])
		cr_assert(strstr(err, c->absent) == NULL, "message names \"%s\": %s", c->absent, err);
}

Test(config, missing_file)
{
	char p[300];
	snprintf(p, sizeof(p), "%s/nope.ini", tmpdir);
	cr_assert_neq(config_load_file(&cfg, p, err, sizeof(err)), 0);
	assert_has(err, p);
	assert_has(err, strerror(ENOENT));
}

/* A value line longer than the INI reader's line buffer must not be cut
 * silently (nor reported as a syntax error on the next line): either the
 * whole value is read or the message says the line is too long. */
Test(config, long_line)
{
	char text[1024], path[700];
	memset(path, 0, sizeof(path));
	path[0] = '/';
	for (int i = 1; i < 600; i++)
		path[i] = (char)('a' + i % 26);
	snprintf(text, sizeof(text), "[job]\nseed = 3\n[dataset]\npath = %s\n[job]\nepochs = 4\n",
		 path);
	const char *p = ini("long.ini", text);
	int rc = config_load_file(&cfg, p, err, sizeof(err));
	if (rc == 0) {
		cr_assert_str_eq(cfg.dataset.path, path);
		cr_assert_eq(cfg.job.epochs, 4);
	} else {
		char where[300];
		snprintf(where, sizeof(where), "%s:4:", p);
		assert_has(err, where);
		assert_has(err, "long");
		cr_assert_str_eq(cfg.dataset.path, "", "a cut value was applied");
	}
}

/* ---- --set ---------------------------------------------------------------- */

Test(config, set_overrides_file)
{
	const char *p = ini("job.ini", "[job]\nseed = 1\nbatch_size = 8\n[dataset]\npath = /a\n");
	cr_assert_eq(config_load_file(&cfg, p, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config_set(&cfg, "job.seed=2", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config_set(&cfg, "dataset.path=/x=y.z", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(cfg.job.seed, 2);
	cr_assert_eq(cfg.job.batch_size, 8);
	cr_assert_str_eq(cfg.dataset.path, "/x=y.z");
	/* the dump says where each value came from */
	char *d = config_dump(&cfg);
	cr_assert(strstr(d, "seed = 2    ; --set") != NULL, "%s", d);
	char want[400];
	snprintf(want, sizeof(want), "batch_size = 8    ; %s", p);
	cr_assert(strstr(d, want) != NULL, "no \"%s\" in\n%s", want, d);
	cr_assert(strstr(d, "epochs = 1    ; default") != NULL, "%s", d);
	free(d);
}

Test(config, set_errors)
{
	static const char *bad[][2] = {
		{ "job.seed", "section.key=value" },
		{ "seed=1", "section.key=value" },
		{ "=1", "section.key=value" },
		{ "job.=1", "section.key=value" },
		{ ".seed=1", "section.key=value" },
		{ "a=b.c", "section.key=value" },
		{ "job.nokey=1", "job.nokey" },
		{ "jobs.seed=1", "jobs.seed" },
		{ "job.seed=abc", "job.seed" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		cr_assert_eq(config_set(&cfg, bad[i][0], err, sizeof(err)), -EINVAL, "accepted %s",
			     bad[i][0]);
		assert_has(err, bad[i][1]);
		assert_has(err, "--set");
	}
	cr_assert_eq(cfg.job.seed, 0);
}

/* ---- ${VAR} expansion ------------------------------------------------------- */

static void expands(const char *in, const char *want)
{
	char *out = config_expand(in, err, sizeof(err));
	cr_assert_not_null(out, "config_expand(\"%s\") failed: %s", in, err);
	cr_assert_str_eq(out, want, "config_expand(\"%s\")", in);
	free(out);
}

static void fails(const char *in, const char *needle)
{
	err[0] = '\0';
	char *out = config_expand(in, err, sizeof(err));
	cr_assert_null(out, "config_expand(\"%s\") = \"%s\", want an error", in, out ? out : "");
	assert_has(err, needle);
}

Test(config, expansion)
{
	setenv("SEER_TEST_A", "alpha", 1);
	setenv("SEER_TEST_B", "beta", 1);
	setenv("SEER_TEST_EMPTY", "", 1);
	expands("", "");
	expands("plain", "plain");
	expands("${SEER_TEST_A}", "alpha");
	expands("x${SEER_TEST_A}y${SEER_TEST_B}z", "xalphaybetaz");
	expands("${SEER_TEST_A:-dflt}", "alpha");
	expands("${SEER_TEST_UNSET:-dflt}", "dflt");
	expands("${SEER_TEST_EMPTY:-dflt}", "dflt");
	expands("${SEER_TEST_UNSET:-}", "");
	expands("${SEER_TEST_UNSET:-a b:c-d}", "a b:c-d");
	/* nested defaults */
	expands("${SEER_TEST_UNSET:-${SEER_TEST_B}}", "beta");
	expands("${SEER_TEST_UNSET:-${SEER_TEST_UNSET:-${SEER_TEST_A}/x}/y}", "alpha/x/y");
	expands("${SEER_TEST_A:-${SEER_TEST_UNSET}}", "alpha"); /* unused default: no error */
	expands("/${SEER_TEST_UNSET:-${SEER_TEST_C:-deep}}/", "/deep/");
	/* $$ is a literal $; a lone $ stays */
	expands("$$", "$");
	expands("a$$b", "a$b");
	expands("$${SEER_TEST_A}", "${SEER_TEST_A}");
	expands("$$$$", "$$");
	expands("$$$${SEER_TEST_A}", "$${SEER_TEST_A}");
	expands("$$${SEER_TEST_A}", "$alpha");
	expands("cost: 5$", "cost: 5$");
	expands("$x", "$x");
	/* errors */
	fails("${SEER_TEST_UNSET}", "SEER_TEST_UNSET");
	fails("a/${SEER_TEST_UNSET}/b", "SEER_TEST_UNSET");
	fails("${SEER_TEST_UNSET:-${SEER_TEST_C}}", "SEER_TEST_C");
	fails("${SEER_TEST_A", "unterminated");
	fails("${SEER_TEST_UNSET:-${SEER_TEST_A}", "unterminated");
	fails("${}", "name");
	fails("${:-x}", "name");
	/* nesting is bounded */
	char deep[1024] = "";
	for (int i = 0; i < 20; i++)
		strcat(deep, "${SEER_TEST_UNSET:-");
	strcat(deep, "x");
	for (int i = 0; i < 20; i++)
		strcat(deep, "}");
	fails(deep, "nested");
}

Test(config, expansion_in_values)
{
	setenv("SEER_TEST_A", "/pfs", 1);
	const char *p = ini("e.ini",
			    "[dataset]\n"
			    "path = ${SEER_TEST_A}/data\n"
			    "extensions = ${SEER_TEST_UNSET:-jpg}\n"
			    "[job]\n"
			    "seed = ${SEER_TEST_UNSET:-${SEER_TEST_B:-77}}\n"
			    "id = cost$$5\n");
	cr_assert_eq(config_load_file(&cfg, p, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(cfg.dataset.path, "/pfs/data");
	cr_assert_str_eq(cfg.dataset.extensions, "jpg");
	cr_assert_eq(cfg.job.seed, 77);
	cr_assert_str_eq(cfg.job.id, "cost$5");
	setenv("SEER_TEST_B", "88", 1);
	cr_assert_eq(config_set(&cfg, "job.seed=${SEER_TEST_B}", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(cfg.job.seed, 88);
	cr_assert_neq(config_set(&cfg, "job.seed=${SEER_TEST_UNSET}", err, sizeof(err)), 0);
	assert_has(err, "SEER_TEST_UNSET");
	assert_has(err, "job.seed");
	cr_assert_eq(cfg.job.seed, 88);
}

/* ---- config_finish ---------------------------------------------------------------- */

Test(config, finish_requires_dataset_path)
{
	cr_assert_eq(config_finish(&cfg, err, sizeof(err)), -EINVAL);
	assert_has(err, "[dataset] path");
	cr_assert_eq(config_set(&cfg, "dataset.path=/data", err, sizeof(err)), 0);
	cr_assert_eq(config_finish(&cfg, err, sizeof(err)), 0, "%s", err);
}

Test(config, finish_derives_socket)
{
	cr_assert_eq(config_set(&cfg, "dataset.path=/data", err, sizeof(err)), 0);
	cr_assert_eq(config_set(&cfg, "job.id=j42", err, sizeof(err)), 0);
	cr_assert_eq(config_finish(&cfg, err, sizeof(err)), 0, "%s", err);
	struct passwd *pw = getpwuid(getuid());
	char want[512];
	snprintf(want, sizeof(want), "%s/seer-%s-j42.sock", tmpdir, pw ? pw->pw_name : "?");
	cr_assert_str_eq(cfg.daemon.socket, want);
}

Test(config, finish_keeps_explicit_socket)
{
	cr_assert_eq(config_set(&cfg, "dataset.path=/data", err, sizeof(err)), 0);
	cr_assert_eq(config_set(&cfg, "daemon.socket=/run/s.sock", err, sizeof(err)), 0);
	cr_assert_eq(config_finish(&cfg, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(cfg.daemon.socket, "/run/s.sock");
}

Test(config, finish_cross_checks)
{
	static const struct {
		const char *set[2];
		const char *needle;
	} bad[] = {
		{ { "job.id=a/b", NULL }, "[job] id" },
		{ { "job.id=", NULL }, "[job] id" },
		{ { "job.id=0123456789012345678901234567890123456789012345678901234567890123",
		    NULL }, "[job] id" },
		{ { "job.resume=3", NULL }, "resume" },
		{ { "job.resume=x:1", NULL }, "resume" },
		{ { "job.resume=:1", NULL }, "resume" },
		{ { "job.resume=1:", NULL }, "resume" },
		{ { "job.epochs=5", "job.resume=5:0" }, "past" },
		{ { "cache.nvme=1GiB", NULL }, "nvme_dir" },
		{ { "prefetch.lookahead=4000", "job.max_held=95" }, "max_held" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		config_free(&cfg);
		cr_assert_eq(config_init(&cfg, err, sizeof(err)), 0);
		cr_assert_eq(config_set(&cfg, "dataset.path=/data", err, sizeof(err)), 0);
		for (int k = 0; k < 2 && bad[i].set[k]; k++)
			cr_assert_eq(config_set(&cfg, bad[i].set[k], err, sizeof(err)), 0, "%s", err);
		err[0] = '\0';
		cr_assert_eq(config_finish(&cfg, err, sizeof(err)), -EINVAL, "case %zu accepted", i);
		assert_has(err, bad[i].needle);
	}
	/* the good neighbours of those */
	config_free(&cfg);
	cr_assert_eq(config_init(&cfg, err, sizeof(err)), 0);
	cr_assert_eq(config_set(&cfg, "dataset.path=/data", err, sizeof(err)), 0);
	cr_assert_eq(config_set(&cfg, "job.epochs=5", err, sizeof(err)), 0);
	cr_assert_eq(config_set(&cfg, "job.resume=4:17", err, sizeof(err)), 0);
	cr_assert_eq(config_set(&cfg, "job.id=012345678901234567890123456789012345678901234567890123456789012",
			     err, sizeof(err)), 0);
	cr_assert_eq(config_set(&cfg, "cache.nvme=1GiB", err, sizeof(err)), 0);
	cr_assert_eq(config_set(&cfg, "cache.nvme_dir=/nvme", err, sizeof(err)), 0);
	cr_assert_eq(config_set(&cfg, "prefetch.lookahead=4000", err, sizeof(err)), 0);
	cr_assert_eq(config_set(&cfg, "job.max_held=94", err, sizeof(err)), 0);
	cr_assert_eq(config_finish(&cfg, err, sizeof(err)), 0, "%s", err);
	uint64_t e, s;
	cr_assert_eq(config_resume(&cfg, &e, &s), 0);
	cr_assert_eq(e, 4);
	cr_assert_eq(s, 17);
}

/* ---- the dump reads back ------------------------------------------------------ */

static void assert_same_config(const struct seer_config *a, const struct seer_config *b)
{
#define S(f) cr_assert_str_eq(a->f, b->f, #f)
#define N(f) cr_assert_eq(a->f, b->f, #f)
#define D(f) cr_assert_float_eq(a->f, b->f, 0, #f ": %.17g vs %.17g", a->f, b->f)
	S(dataset.path); S(dataset.format); S(dataset.extensions); S(dataset.hdf5_data); S(dataset.hdf5_labels);
	S(dataset.npz_data); S(dataset.npz_labels); S(dataset.npz_sample_axis); S(dataset.on_corrupt); N(dataset.rebuild_catalog);
	S(dataset.tar_extensions); S(dataset.tar_label);
	S(job.id); N(job.seed); N(job.epochs); N(job.batch_size); N(job.drop_last); N(job.shuffle); N(job.world_size);
	N(job.max_held);
	S(job.resume); N(cache.ram); N(cache.staging); S(cache.nvme_dir); N(cache.nvme); N(prefetch.io_threads); N(prefetch.lookahead);
	N(prefetch.retries); D(prefetch.retry_backoff_ms); S(net.provider); D(net.peer_timeout_ms); S(daemon.socket);
	S(daemon.state_dir); S(daemon.log_level); S(daemon.stats_file); S(daemon.cpuset); D(daemon.connect_timeout_s);
#undef S
#undef N
#undef D
}

/* Each line of a dump without its "; origin" comment. */
static char *strip_origins(const char *dump)
{
	char *out = strdup(dump), *w = out;
	for (const char *r = dump; *r;) {
		const char *nl = strchr(r, '\n');
		size_t len = nl ? (size_t)(nl - r) : strlen(r);
		const char *semi = memmem(r, len, "    ; ", 6);
		size_t keep = semi ? (size_t)(semi - r) : len;
		memcpy(w, r, keep);
		w += keep;
		if (nl)
			*w++ = '\n';
		r += len + (nl ? 1 : 0);
	}
	*w = '\0';
	return out;
}

static void round_trip(void)
{
	char *d1 = config_dump(&cfg);
	const char *p = ini("dump.ini", d1);
	struct seer_config c2;
	cr_assert_eq(config_init(&c2, err, sizeof(err)), 0);
	cr_assert_eq(config_load_file(&c2, p, err, sizeof(err)), 0, "the dump does not load: %s\n%s",
		     err, d1);
	assert_same_config(&cfg, &c2);
	char *d2 = config_dump(&c2);
	char *s1 = strip_origins(d1), *s2 = strip_origins(d2);
	cr_assert_str_eq(s1, s2);
	free(s1);
	free(s2);
	free(d1);
	free(d2);
	config_free(&c2);
}

Test(config, dump_round_trips_defaults)
{
	round_trip();
}

Test(config, dump_round_trips_every_key)
{
	static const char *set[] = {
		"dataset.path=/pfs/my data/train",
		"dataset.format=hdf5",
		"dataset.extensions=jpg,png",
		"dataset.hdf5_data=recs",
		"dataset.hdf5_labels=",
		"dataset.npz_data=xx",
		"dataset.npz_labels=yy",
		"dataset.npz_sample_axis=first",
		"dataset.on_corrupt=skip",
		"dataset.rebuild_catalog=true",
		"job.id=job-42",
		"job.seed=18446744073709551615",
		"job.epochs=7",
		"job.batch_size=3",
		"job.drop_last=true",
		"job.shuffle=false",
		"job.world_size=16",
		"job.resume=2:5",
		"cache.ram=1.5GiB",
		"cache.staging=3MiB",
		"cache.nvme_dir=/local/nvme",
		"cache.nvme=1TB",
		"prefetch.io_threads=3",
		"prefetch.lookahead=99",
		"prefetch.retries=0",
		"prefetch.retry_backoff_ms=20.123456789",
		"net.provider=verbs;ofi_rxm",
		"net.peer_timeout_ms=0.1e4",
		"daemon.socket=/tmp/s-%n.sock",
		"daemon.state_dir=/state",
		"daemon.log_level=debug",
		"daemon.stats_file=/stats-%n.json",
		"daemon.cpuset=0-3",
		"daemon.connect_timeout_s=1234.56789012345",
	};
	for (size_t i = 0; i < sizeof(set) / sizeof(set[0]); i++)
		cr_assert_eq(config_set(&cfg, set[i], err, sizeof(err)), 0, "%s: %s", set[i], err);
	round_trip();
}

/* Values holding '$' are dumped so that reading them back does not expand
 * them again. */
Test(config, dump_round_trips_dollars)
{
	setenv("SEER_TEST_A", "surprise", 1);
	cr_assert_eq(config_set(&cfg, "dataset.path=/a/$${SEER_TEST_A}/b", err, sizeof(err)), 0);
	cr_assert_eq(config_set(&cfg, "daemon.cpuset=$$$$", err, sizeof(err)), 0);
	cr_assert_eq(config_set(&cfg, "job.id=5$", err, sizeof(err)), 0);
	cr_assert_str_eq(cfg.dataset.path, "/a/${SEER_TEST_A}/b");
	cr_assert_str_eq(cfg.daemon.cpuset, "$$");
	round_trip();
}

Test(config, dump_lists_every_key_and_help_describes_it)
{
	char *d = config_dump(&cfg);
	char *help = NULL;
	size_t hlen = 0;
	FILE *f = open_memstream(&help, &hlen);
	config_help(f);
	fclose(f);
	static const char *sections[] = { "[dataset]", "[job]", "[cache]", "[prefetch]", "[net]",
					  "[daemon]" };
	for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++) {
		assert_has(d, sections[i]);
		assert_has(help, sections[i]);
	}
	/* every "key = " line of the dump is described by --help */
	int keys = 0;
	for (const char *l = d; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		const char *eq = strstr(l, " = ");
		const char *nl = strchr(l, '\n');
		if (!eq || (nl && eq > nl) || *l == '[')
			continue;
		char name[64];
		snprintf(name, sizeof(name), "  %.*s ", (int)(eq - l), l);
		assert_has(help, name);
		keys++;
	}
	cr_assert_geq(keys, 34, "the dump lists only %d keys", keys);
	free(help);
	free(d);
}

/* ---- the job hash ------------------------------------------------------------ */

struct hash_case {
	char assign[48];
	bool changes;
};

ParameterizedTestParameters(config, job_hash)
{
	static struct hash_case cases[] = {
		/* keys every node must agree on */
		{ "job.seed=1", true },
		{ "job.epochs=2", true },
		{ "job.batch_size=64", true },
		{ "job.drop_last=true", true },
		{ "job.shuffle=false", true },
		{ "job.world_size=8", true },
		{ "job.max_held=3", true },
		{ "job.id=other", true },
		{ "dataset.format=npz", true },
		{ "dataset.extensions=jpg", true },
		{ "dataset.hdf5_data=r", true },
		{ "dataset.hdf5_labels=l", true },
		{ "dataset.npz_data=a", true },
		{ "dataset.npz_labels=b", true },
		{ "dataset.npz_sample_axis=first", true },
		{ "dataset.on_corrupt=skip", true },
		{ "net.provider=verbs", true },
		/* node-local keys */
		{ "cache.ram=7GiB", false },
		{ "cache.staging=64MiB", false },
		{ "cache.nvme_dir=/nvme", false },
		{ "cache.nvme=1TB", false },
		{ "daemon.socket=/elsewhere.sock", false },
		{ "daemon.state_dir=/s", false },
		{ "daemon.log_level=debug", false },
		{ "daemon.stats_file=/x", false },
		{ "daemon.cpuset=0-1", false },
		{ "daemon.connect_timeout_s=5", false },
		{ "prefetch.io_threads=2", false },
		{ "prefetch.lookahead=2", false },
		{ "prefetch.retries=9", false },
		{ "prefetch.retry_backoff_ms=1", false },
		{ "net.peer_timeout_ms=10", false },
		{ "dataset.path=/mounted/elsewhere", false },
		{ "dataset.rebuild_catalog=true", false },
	};
	return cr_make_param_array(struct hash_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct hash_case *c, config, job_hash)
{
	uint64_t h0 = config_job_hash(&cfg);
	cr_assert_eq(config_job_hash(&cfg), h0, "the hash is not a function of the config");
	cr_assert_eq(config_set(&cfg, c->assign, err, sizeof(err)), 0, "%s: %s", c->assign, err);
	uint64_t h1 = config_job_hash(&cfg);
	if (c->changes)
		cr_assert_neq(h1, h0, "%s does not change the job hash", c->assign);
	else
		cr_assert_eq(h1, h0, "%s (node-local) changes the job hash", c->assign);
	/* and a second config with the same keys agrees */
	struct seer_config c2;
	cr_assert_eq(config_init(&c2, err, sizeof(err)), 0);
	cr_assert_eq(config_set(&c2, c->assign, err, sizeof(err)), 0);
	cr_assert_eq(config_job_hash(&c2), h1);
	config_free(&c2);
}

/* Values that only differ in where one ends and the next begins hash apart. */
Test(config, job_hash_separates_values)
{
	cr_assert_eq(config_set(&cfg, "dataset.npz_data=ab", err, sizeof(err)), 0);
	cr_assert_eq(config_set(&cfg, "dataset.npz_labels=c", err, sizeof(err)), 0);
	uint64_t h1 = config_job_hash(&cfg);
	cr_assert_eq(config_set(&cfg, "dataset.npz_data=a", err, sizeof(err)), 0);
	cr_assert_eq(config_set(&cfg, "dataset.npz_labels=bc", err, sizeof(err)), 0);
	cr_assert_neq(config_job_hash(&cfg), h1);
}

/* prefetch.coalesce: auto by default; on/off in the boolean spellings the
 * key took before auto; anything else refused, naming the choices. */
Test(config, coalesce_modes)
{
	cr_assert_eq(config_coalesce(&cfg), CFG_COALESCE_AUTO);
	static const struct { const char *v; enum config_coalesce m; } cases[] = {
		{ "on", CFG_COALESCE_ON }, { "yes", CFG_COALESCE_ON }, { "1", CFG_COALESCE_ON },
		{ "true", CFG_COALESCE_ON }, { "off", CFG_COALESCE_OFF }, { "no", CFG_COALESCE_OFF },
		{ "0", CFG_COALESCE_OFF }, { "false", CFG_COALESCE_OFF }, { "auto", CFG_COALESCE_AUTO },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char a[64];
		snprintf(a, sizeof(a), "prefetch.coalesce=%s", cases[i].v);
		cr_assert_eq(config_set(&cfg, a, err, sizeof(err)), 0, "%s: %s", a, err);
		cr_assert_eq(config_coalesce(&cfg), cases[i].m, "%s", a);
	}
	cr_assert_neq(config_set(&cfg, "prefetch.coalesce=maybe", err, sizeof(err)), 0);
	cr_assert_not_null(strstr(err, "auto, on, off"), "%s", err);
}

/* A key's origin: "default", --set, then what config_set_from names (the
 * trainer a job key came from, daemon/jobdef.c); a value out of range is
 * refused by config_check_value and config_set_from alike, nothing changed. */
Test(config, origin_and_set_from)
{
	cr_assert_str_eq(config_origin(&cfg, "job.batch_size"), "default");
	cr_assert_null(config_origin(&cfg, "job.nope"));
	cr_assert_null(config_origin(&cfg, "nodot"));
	cr_assert_eq(config_set(&cfg, "job.seed=9", err, sizeof(err)), 0);
	cr_assert_str_eq(config_origin(&cfg, "job.seed"), "--set");
	cr_assert_eq(config_set_from(&cfg, "job.batch_size", "128", "trainer rank 0 (pid 7)", err,
				     sizeof(err)), 0, "%s", err);
	cr_assert_eq(cfg.job.batch_size, 128);
	cr_assert_str_eq(config_origin(&cfg, "job.batch_size"), "trainer rank 0 (pid 7)");
	cr_assert_eq(config_set_from(&cfg, "job.shuffle", "false", "t", err, sizeof(err)), 0);
	cr_assert_eq(cfg.job.shuffle, false);
	cr_assert_eq(config_check_value("job.epochs", "1000000", err, sizeof(err)), 0);
	cr_assert_eq(config_check_value("job.epochs", "1000001", err, sizeof(err)), -EINVAL);
	assert_has(err, "job.epochs: 1000001 is out of range [1, 1000000]");
	cr_assert_eq(config_set_from(&cfg, "job.epochs", "0", "t", err, sizeof(err)), -EINVAL);
	cr_assert_eq(cfg.job.epochs, 1);
	cr_assert_str_eq(config_origin(&cfg, "job.epochs"), "default");
	cr_assert_eq(config_check_value("dataset.path", "/x", err, sizeof(err)), -EINVAL);
	cr_assert_eq(config_set_from(&cfg, "job.nope", "1", "t", err, sizeof(err)), -EINVAL);
	assert_has(err, "unknown key job.nope");
}
