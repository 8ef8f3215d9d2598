/* The job's resume plan and the trainers' checkpoint records (docs/resume.md).
 *
 * Owns e->rs (the plan: where the job starts, and the epoch an elastic resume
 * re-shards), e->tl (global batch numbers over that plan), the record the
 * plan was made from (sent to every trainer after its WELCOME, so it numbers
 * and records positions as the daemon does) and the plan key the nodes of a
 * job compare. The plan comes from the first trainer's record, else the saved
 * positions ([job] resume = auto, resume.c), else a fresh job; it is fixed for
 * the daemon's run. A later trainer's record is taken when the job's plan
 * serves it, from its position on, exactly the batches its own record's plan
 * would (same history of the re-sharded epoch): ranks at different steps of
 * one plan each continue from their own. Dispatcher thread only. Failure: a
 * record that cannot be decoded, is for another job, or needs another plan
 * is refused with a message naming both positions (the trainer gets it);
 * out of memory aborts (house rule). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../src/common/base.h"
#include "../src/util/util.h"
#include "engine_int.h"
#include "seer.h"

struct sampler_job jobrec_job(const struct engine *e, uint32_t world)
{
	return (struct sampler_job){
		.n = e->cat->nsamples, .seed = e->cfg->job.seed, .dataset_hash = e->cat->hash,
		.world = world, .batch = (uint32_t)e->cfg->job.batch_size,
		.drop_last = e->cfg->job.drop_last, .shuffle = e->cfg->job.shuffle,
	};
}

int jobrec_decode(struct engine *e, const uint8_t *buf, size_t len, struct sampler_record *out,
		  char *msg, size_t msglen)
{
	int rc = sampler_record_decode(buf, len, out);
	if (rc == 0 && (rc = sampler_record_validate(out, NULL)) < 0)
		sampler_record_free(out);
	if (rc == 0) {
		struct sampler_job job = jobrec_job(e, out->job.world);
		if ((rc = sampler_record_check_job(out, &job)) < 0)
			sampler_record_free(out);
	}
	if (rc < 0)
		snprintf(msg, msglen, "%s", seer_errmsg());
	return rc;
}

/* "a fresh job" or the record's description. */
static void describe(const struct sampler_record *r, char *buf, size_t len)
{
	if (r)
		sampler_record_describe(r, buf, len);
	else
		snprintf(buf, len, "a fresh job (no checkpoint record)");
}

/* The plan's key: what every node must plan alike. A plain plan (no epoch
 * re-sharded) has none: its ranks may start anywhere. */
static uint32_t plan_key(const struct sampler_resume *p)
{
	if (!p->elastic)
		return 0;
	uLong c = crc32(0L, Z_NULL, 0);
	uint64_t head[2] = { p->epoch, p->rsh.world };
	c = crc32(c, (const Bytef *)head, sizeof(head));
	c = crc32_z(c, (const Bytef *)p->pos, p->rsh.m * sizeof(uint32_t));
	return (uint32_t)c | 1u; /* never 0 */
}

int jobrec_plan(struct engine *e, const struct sampler_record *rec, char *msg, size_t msglen)
{
	jobrec_free(e);
	struct sampler_job job = jobrec_job(e, e->world);
	int rc = sampler_resume_init(&e->rs, &job, rec);
	if (rc < 0) {
		snprintf(msg, msglen, "%s", seer_errmsg());
		memset(&e->rs, 0, sizeof(e->rs));
		return rc;
	}
	sampler_timeline_init(&e->tl, e->sh.bpe, e->cfg->job.epochs, &e->rs);
	if (rec) {
		e->plan_rec_len = sampler_record_size(rec);
		e->plan_rec = xmalloc(e->plan_rec_len);
		sampler_record_encode(rec, e->plan_rec);
	}
	e->plan_key = plan_key(&e->rs);
	char d[200];
	describe(rec, d, sizeof(d));
	if (e->rs.elastic)
		log_info("resume plan: %s; epoch %llu re-sharded over %u trainers: %llu samples left, "
			 "%llu batches per rank", d, (unsigned long long)e->rs.epoch, e->world,
			 (unsigned long long)e->rs.rsh.m, (unsigned long long)e->rs.rsh.bpe);
	else if (rec)
		log_info("resume plan: %s; the job continues at epoch %llu step %llu", d,
			 (unsigned long long)e->rs.epoch, (unsigned long long)e->rs.step);
	return 0;
}

void jobrec_free(struct engine *e)
{
	sampler_resume_free(&e->rs);
	memset(&e->rs, 0, sizeof(e->rs));
	free(e->plan_rec);
	e->plan_rec = NULL;
	e->plan_rec_len = 0;
	e->plan_key = 0;
}

/* The re-sharded epoch's history (the segments before the running one) of
 * two plans is the same: they serve it alike. */
static bool same_history(const struct sampler_resume *a, const struct sampler_resume *b)
{
	if (a->epoch != b->epoch || a->hist.nseg != b->hist.nseg || a->rsh.m != b->rsh.m)
		return false;
	for (uint32_t k = 0; k < a->hist.nseg; k++) {
		const struct sampler_segment *x = &a->hist.seg[k], *y = &b->hist.seg[k];
		if (x->world != y->world)
			return false;
		for (uint32_t r = 0; r < x->world; r++)
			if (sampler_seg_steps(x, r) != sampler_seg_steps(y, r))
				return false;
	}
	return true;
}

int jobrec_start(struct engine *e, const struct sampler_record *rec, uint64_t *g, char *msg,
		 size_t msglen)
{
	struct sampler_job job = jobrec_job(e, e->world);
	struct sampler_resume p;
	int rc = sampler_resume_init(&p, &job, rec);
	if (rc < 0) {
		snprintf(msg, msglen, "%s", seer_errmsg());
		return rc;
	}
	/* from the record's position on, the job's plan must serve what the
	 * record's own plan would: the same re-sharded epoch, or none */
	bool ok = p.elastic ? e->rs.elastic && same_history(&p, &e->rs)
			    : !(e->rs.elastic && e->rs.epoch >= p.epoch);
	if (ok) {
		*g = p.epoch >= e->cfg->job.epochs ? e->pl.end : MIN(sampler_tl_g(&e->tl, p.epoch, p.step), e->pl.end);
	} else {
		char mine[200], theirs[200];
		struct sampler_record job_rec;
		bool have = e->plan_rec && sampler_record_decode(e->plan_rec, e->plan_rec_len, &job_rec) == 0;
		describe(have ? &job_rec : NULL, mine, sizeof(mine));
		describe(rec, theirs, sizeof(theirs));
		if (have)
			sampler_record_free(&job_rec);
		snprintf(msg, msglen, "its checkpoint record (%s) needs another resume plan than this "
			 "job's (%s): every rank must connect with the same record (or restart every "
			 "seerd with it)", theirs, mine);
		rc = SEER_EREFUSED;
	}
	sampler_resume_free(&p);
	return rc;
}

uint32_t jobrec_batch(struct engine *e, uint32_t rank, uint64_t g, uint32_t *ids)
{
	uint64_t epoch, step;
	sampler_tl_pos(&e->tl, g, &epoch, &step);
	int n = sampler_plan_batch(&e->pl.smp, &e->rs, epoch, rank, step, ids);
	if (n < 0) {
		log_error("batch %llu:%llu of rank %u: %s", (unsigned long long)epoch,
			  (unsigned long long)step, rank,
			  n == -ENOMEM ? "out of memory computing the epoch's order" : "not in the job");
		abort();
	}
	return (uint32_t)n;
}

void jobrec_pos(const struct engine *e, uint64_t g, uint64_t *epoch, uint64_t *step)
{
	sampler_tl_pos(&e->tl, g, epoch, step);
}
