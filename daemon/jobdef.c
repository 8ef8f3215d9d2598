/* The job's definition a trainer declares in its HELLO (proto version 6),
 * against seerd's: [job] batch_size, shuffle, drop_last, seed, epochs and
 * [dataset] path.
 *
 * The training script owns the job: a key seerd's config left at its default
 * is taken from the first trainer that declares it, while the job's shape can
 * still follow (one node, [job] world_size unset, no shape yet) or once every
 * trainer of the job that set it has gone (place_can_reshape: the shape, the
 * positions and the plan start over for the new job). The value is written
 * into seerd's configuration with the trainer as its origin (seerctl config
 * shows it). Everything else that differs is refused naming both values and
 * where each came from: seerd's config (file:line, --set), its default (a
 * seerd of several nodes, or with a fixed world size, fixes the job at
 * start), or the trainer that set it. The dataset path cannot follow (the
 * catalog is scanned at start): it is compared (the same directory, or the
 * same path) and refused when it differs. With [daemon] serve_jobs (one
 * node) engine_next_job (engine.c) ends a finished job (its positions removed, its
 * shape dropped) so that the next trainer's definition starts the next one.
 *
 * Dispatcher thread only; the configuration's job keys are written here and
 * nowhere else, before the shape that reads them exists (no other thread
 * reads them until a trainer is served). Failure: SEER_ECONFIG with the
 * reason in err, nothing changed. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../src/config/config.h"
#include "../src/util/util.h"
#include "engine_int.h"
#include "seer.h"

enum { JD_BATCH, JD_SHUFFLE, JD_DROP, JD_SEED, JD_EPOCHS, JD_N };

static const struct {
	const char *key;
	uint32_t bit;
} jd_keys[JD_N] = {
	{ "job.batch_size", SEER_HELLO_JOB_BATCH_SIZE }, { "job.shuffle", SEER_HELLO_JOB_SHUFFLE },
	{ "job.drop_last", SEER_HELLO_JOB_DROP_LAST },  { "job.seed", SEER_HELLO_JOB_SEED },
	{ "job.epochs", SEER_HELLO_JOB_EPOCHS },
};

static uint64_t cfg_value(const struct seer_config *c, int i)
{
	switch (i) {
	case JD_BATCH: return c->job.batch_size;
	case JD_SHUFFLE: return c->job.shuffle;
	case JD_DROP: return c->job.drop_last;
	case JD_SEED: return c->job.seed;
	default: return c->job.epochs;
	}
}

static uint64_t hello_value(const struct seer_msg_hello *h, int i)
{
	switch (i) {
	case JD_BATCH: return h->batch_size;
	case JD_SHUFFLE: return h->shuffle != 0;
	case JD_DROP: return h->drop_last != 0;
	case JD_SEED: return h->seed;
	default: return h->epochs;
	}
}

static void show(char *buf, size_t len, int i, uint64_t v)
{
	if (i == JD_SHUFFLE || i == JD_DROP)
		snprintf(buf, len, "%s", v ? "true" : "false");
	else
		snprintf(buf, len, "%" PRIu64, v);
}

/* Whether a value seerd holds (origin `from`) may still follow a trainer:
 * 1 yes (the shape is to be dropped when *drop), 0 no with *why saying what
 * fixed it. */
static int may_follow(struct engine *e, const char *from, bool *drop, char *why, size_t whylen)
{
	bool dflt = strcmp(from, "default") == 0;
	bool trainer = strncmp(from, "trainer", 7) == 0;
	if (!dflt && !trainer) {
		snprintf(why, whylen, "seerd's config says");
		return 0;
	}
	if (e->nnodes > 1 || e->cfg->job.world_size) {
		snprintf(why, whylen, "seerd's default is (%s fixes the job at start; set it in its "
			 "config)", e->nnodes > 1 ? "several nodes" : "job.world_size");
		return 0;
	}
	if (!e->shape_ready) {
		*drop = false;
		return 1;
	}
	char busy[160];
	if (place_can_reshape(e, busy, sizeof(busy)) != 0) {
		bool ended = e->plan_ready && e->world > 0;
		for (uint32_t r = 0; ended && r < e->world; r++)
			ended = e->tr[r].done || !e->tr[r].known;
		if (ended && e->cfg->daemon.serve_jobs)
			snprintf(why, whylen, "the last job's trainers are still leaving (try again "
				 "in a moment); it has");
		else if (strstr(busy, "in flight"))
			snprintf(why, whylen, "the last job's reads are still in flight (try again "
				 "in a moment); it has");
		else if (trainer)
			snprintf(why, whylen, "%s declared", from);
		else
			snprintf(why, whylen, "seerd's default (the job's first trainer declared none) "
				 "is");
		return 0;
	}
	*drop = true; /* every trainer of that job has gone: a new job */
	return 1;
}

/* The declared dataset against [dataset] path: the same directory (device and
 * inode) or the same path. */
static bool same_dataset(const char *cfg_path, const char *asked)
{
	struct stat a, b;
	if (stat(cfg_path, &a) == 0 && stat(asked, &b) == 0)
		return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
	char buf[PATH_MAX];
	const char *mine = realpath(cfg_path, buf) ? buf : cfg_path;
	return strcmp(mine, asked) == 0;
}

int jobdef_take(struct engine *e, const struct seer_msg_hello *h, pid_t pid, char *err,
		size_t errlen)
{
	struct seer_config *cfg = (struct seer_config *)e->cfg; /* see the header comment */
	if (h->job & SEER_HELLO_JOB_DATASET) {
		char asked[SEER_DATASET_MAX];
		memcpy(asked, h->dataset, sizeof(asked));
		asked[sizeof(asked) - 1] = '\0';
		if (!same_dataset(cfg->dataset.path, asked)) {
			snprintf(err, errlen, "dataset.path: seerd's config says %.70s (%s), this "
				 "trainer asks %.70s: one seerd serves one dataset", cfg->dataset.path,
				 config_origin(cfg, "dataset.path"), asked);
			return SEER_ECONFIG;
		}
	}
	bool follow[JD_N] = { false }, drop = false;
	int nfollow = 0;
	for (int i = 0; i < JD_N; i++) {
		if (!(h->job & jd_keys[i].bit))
			continue;
		uint64_t have = cfg_value(cfg, i), want = hello_value(h, i);
		if (have == want)
			continue;
		const char *from = config_origin(cfg, jd_keys[i].key);
		char why[160], a[32], b[32];
		bool d = false;
		if (may_follow(e, from, &d, why, sizeof(why))) {
			char v[32], bad[SEER_ERRMSG_MAX];
			show(v, sizeof(v), i, want);
			if (config_check_value(jd_keys[i].key, v, bad, sizeof(bad)) != 0) {
				snprintf(err, errlen, "this trainer's %s", bad);
				return SEER_ECONFIG;
			}
			follow[i] = true;
			drop = drop || d;
			nfollow++;
			continue;
		}
		show(a, sizeof(a), i, have);
		show(b, sizeof(b), i, want);
		if (strcmp(why, "seerd's config says") == 0)
			snprintf(err, errlen, "%s: seerd's config says %s (%.60s), this trainer (rank "
				 "%u) asks %s: the script and seerd must agree", jd_keys[i].key, a,
				 from, h->rank, b);
		else
			snprintf(err, errlen, "%s: %s %s, this trainer (rank %u) asks %s: every "
				 "trainer of a job declares the same job", jd_keys[i].key, why, a,
				 h->rank, b);
		return SEER_ECONFIG;
	}
	if (nfollow == 0)
		return 0;
	if (drop)
		place_drop_shape(e);
	char origin[96];
	snprintf(origin, sizeof(origin), "trainer rank %u (pid %d)", h->rank, (int)pid);
	for (int i = 0; i < JD_N; i++) {
		if (!follow[i])
			continue;
		char v[32];
		show(v, sizeof(v), i, hello_value(h, i));
		if (config_set_from(cfg, jd_keys[i].key, v, origin, err, errlen) != 0)
			abort(); /* config_check_value passed it above */
		log_info("%s = %s, as %s declares it", jd_keys[i].key, v, origin);
	}
	return 0;
}
