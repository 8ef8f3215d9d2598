/* Resume records: [job] resume = auto restarts every rank where it stopped.
 *
 * One text file per node in daemon.state_dir, naming the job's shape (so a
 * changed job is not resumed by mistake) and each known rank's first
 * unreleased batch. Dispatcher thread only. Failure: a missing or damaged
 * record starts the job at the beginning (said in the log); a record that
 * cannot be written is logged and the job goes on. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/util.h"
#include "engine_int.h"

static char *resume_path(const struct engine *e)
{
	return xasprintf("%s/resume-%s-n%u.txt", e->cfg->state_dir, e->cfg->job_id, e->node);
}

/* [job] resume = auto: where every rank stopped last time. The file holds
 * the job's shape so a changed job is not resumed by mistake. */
void resume_load(struct engine *e)
{
	char *path = resume_path(e);
	FILE *f = fopen(path, "r");
	if (!f) {
		log_info("resume = auto: no saved position in %s; starting at the beginning", path);
		free(path);
		return;
	}
	char why[512];
	if (path_check_owned_file(fileno(f), path, why, sizeof(why)) != 0) {
		log_warn("resume = auto: record not trusted (%s); starting at the beginning", why);
		fclose(f);
		free(path);
		return;
	}
	unsigned long long n, seed, world, batch, bpe, rank, g;
	int ok = fscanf(f, "seer-resume 1 samples %llu seed %llu world %llu batch %llu bpe %llu",
			&n, &seed, &world, &batch, &bpe) == 5 && n == e->sh.n && seed == e->sh.seed &&
		 world == e->world && batch == e->sh.batch && bpe == e->sh.bpe;
	uint64_t lo = UINT64_MAX, hi = 0;
	uint32_t count = 0;
	while (ok && fscanf(f, " rank %llu at %llu", &rank, &g) == 2) {
		if (rank >= e->world || g > e->end) {
			ok = 0;
			break;
		}
		e->tr[rank].resume_g = g;
		lo = MIN(lo, g);
		hi = MAX(hi, g);
		count++;
	}
	fclose(f);
	if (!ok) {
		log_warn("resume = auto: %s is for another job shape or damaged; starting at the "
			 "beginning", path);
		for (uint32_t r = 0; r < e->world; r++)
			e->tr[r].resume_g = e->default_start;
	} else if (count) {
		e->default_start = lo;
		log_info("resume = auto: %u ranks resume between epoch %llu step %llu and epoch %llu "
			 "step %llu (%s)", count, (unsigned long long)(lo / e->sh.bpe),
			 (unsigned long long)(lo % e->sh.bpe), (unsigned long long)(hi / e->sh.bpe),
			 (unsigned long long)(hi % e->sh.bpe), path);
	}
	free(path);
}

/* Record every rank's resume position (or remove the record when the job
 * is complete). */
void resume_save(struct engine *e, bool quiet)
{
	if (!e->shape_ready)
		return;
	char *path = resume_path(e);
	bool all_done = true;
	for (uint32_t r = 0; r < e->world; r++)
		all_done &= e->tr[r].done || (e->plan_ready && e->rank_node[r] != e->node);
	if (all_done) {
		unlink(path);
		free(path);
		return;
	}
	size_t cap = 256 + (size_t)e->world * 48, n = 0;
	char *buf = xmalloc(cap);
	n += (size_t)snprintf(buf, cap, "seer-resume 1 samples %llu seed %llu world %u batch %u bpe %llu\n",
			      (unsigned long long)e->sh.n, (unsigned long long)e->sh.seed, e->world,
			      e->sh.batch, (unsigned long long)e->sh.bpe);
	for (uint32_t r = 0; r < e->world; r++) {
		const struct trainer *t = &e->tr[r];
		if (!t->known)
			continue;
		uint64_t g = t->attached ? sess_first_unreleased(t) : t->resume_g;
		n += (size_t)snprintf(buf + n, cap - n, "rank %u at %llu\n", r, (unsigned long long)g);
	}
	int rc = mkdir_p(e->cfg->state_dir, 0700);
	if (rc == 0)
		rc = write_file_atomic(path, buf, n);
	if (rc != 0)
		log_warn("cannot save the resume positions to %s: %s", path, strerror(-rc));
	else if (!quiet)
		log_info("resume positions saved to %s (restart with [job] resume = auto)", path);
	free(buf);
	free(path);
}
