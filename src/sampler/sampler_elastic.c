/* Elastic resume: segment shapes, record validation, merging, resume plans
 * and the re-sharded batches (sampler_elastic.h, docs/resume.md).
 * No shared state; failures are negative codes with err_set(). */
#include "sampler_elastic.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seer.h"
#include "../common/base.h"

void sampler_seg_shape(uint64_t m, uint32_t world, uint32_t batch, bool drop_last,
		   struct sampler_seg_shape *out)
{
	out->m = m;
	out->world = world;
	/* DistributedSampler then BatchSampler, as sampler_shape_init */
	out->per_rank = drop_last ? m / world : (m + world - 1) / world;
	out->bpe = drop_last ? out->per_rank / batch : (out->per_rank + batch - 1) / batch;
	if (drop_last)
		out->per_rank = out->bpe * batch;
}

/* Stream entries rank `rank` consumed: its first min(steps * batch, per_rank). */
static uint64_t consumed_entries(const struct sampler_seg_shape *sh, uint32_t batch, uint64_t steps)
{
	if (steps >= sh->bpe)
		return sh->per_rank;
	return MIN(steps * batch, sh->per_rank);
}

uint64_t sampler_seg_consumed(const struct sampler_seg_shape *sh, uint32_t batch,
			  const struct sampler_segment *seg)
{
	uint64_t total = 0;
	for (uint32_t r = 0; r < sh->world && r < sh->m; r++) {
		/* stream entry t of rank r is list index r + W t: real while < m */
		uint64_t real = (sh->m - r + sh->world - 1) / sh->world;
		total += MIN(consumed_entries(sh, batch, sampler_seg_steps(seg, r)), real);
	}
	return total;
}

#define BAD(...) do { err_set("checkpoint record: " __VA_ARGS__); return -EBADMSG; } while (0)

int sampler_record_validate(const struct sampler_record *r, uint64_t *m_out)
{
	const struct sampler_job *j = &r->job;
	if (r->nseg == 0 || r->nseg > SMP_REC_MAX_SEGS || j->n == 0 || j->n > UINT32_MAX ||
	    j->batch == 0)
		BAD("%u segments, %" PRIu64 " samples, batch size %u", r->nseg, j->n, j->batch);
	if (j->world != r->seg[r->nseg - 1].world)
		BAD("world size %u, its last segment has %u trainers", j->world,
		    r->seg[r->nseg - 1].world);
	uint64_t m = j->n;
	for (uint32_t k = 0; k < r->nseg; k++) {
		const struct sampler_segment *s = &r->seg[k];
		struct sampler_seg_shape sh;
		sampler_seg_shape(m, s->world, j->batch, j->drop_last, &sh);
		if (sh.bpe == 0)
			BAD("segment %u: %" PRIu64 " samples over %u trainers give no batch of %u",
			    k, m, s->world, j->batch);
		bool complete = true;
		for (uint32_t i = 0; i < s->nsteps; i++) {
			if (s->steps[i] > sh.bpe) {
				char who[32];
				if (s->nsteps == 1)
					snprintf(who, sizeof(who), "every rank");
				else
					snprintf(who, sizeof(who), "rank %u", i);
				BAD("segment %u: %s consumed %" PRIu64 " batches, the segment has %"
				    PRIu64 " per rank", k, who, s->steps[i], sh.bpe);
			}
			complete &= s->steps[i] == sh.bpe;
		}
		if (complete && k + 1 < r->nseg)
			BAD("segment %u of epoch %" PRIu64 " is complete, yet segment %u follows",
			    k, r->epoch, k + 1);
		m -= sampler_seg_consumed(&sh, j->batch, s);
		if (m_out)
			m_out[k] = m;
	}
	return 0;
}

/* Remainder length before segment k. */
static uint64_t m_before(const struct sampler_record *r, const uint64_t *m, uint32_t k)
{
	return k == 0 ? r->job.n : m[k - 1];
}

static bool seg_uniform(const struct sampler_segment *s)
{
	for (uint32_t i = 1; i < s->nsteps; i++)
		if (s->steps[i] != s->steps[0])
			return false;
	return true;
}

int sampler_record_normalize(struct sampler_record *r)
{
	uint64_t m[SMP_REC_MAX_SEGS];
	if (sampler_record_validate(r, m) != 0)
		return -EBADMSG;
	for (uint32_t k = 0; k < r->nseg; k++)
		if (r->seg[k].nsteps > 1 && seg_uniform(&r->seg[k]))
			r->seg[k].nsteps = 1; /* the array keeps its size; only [0] is read */
	const struct sampler_segment *last = &r->seg[r->nseg - 1];
	struct sampler_seg_shape sh;
	sampler_seg_shape(m_before(r, m, r->nseg - 1), last->world, r->job.batch, r->job.drop_last,
		      &sh);
	if (last->nsteps != 1 || last->steps[0] != sh.bpe)
		return 0;
	if (r->epoch == UINT64_MAX) {
		err_set("checkpoint record: the last epoch there is is complete");
		return -ERANGE;
	}
	uint32_t world = last->world;
	sampler_record_free(r);
	r->epoch++;
	uint64_t zero = 0;
	return sampler_record_push(r, world, 1, &zero);
}

/* ---- merging ------------------------------------------------------------- */

static const char *job_diff(const struct sampler_job *a, const struct sampler_job *b, uint64_t *x,
			    uint64_t *y)
{
#define CMP(f, name) if (a->f != b->f) { *x = a->f; *y = b->f; return name; }
	CMP(n, "sample count")
	CMP(seed, "seed")
	CMP(dataset_hash, "dataset hash")
	CMP(world, "world size")
	CMP(batch, "batch size")
	CMP(drop_last, "drop_last")
	CMP(shuffle, "shuffle")
#undef CMP
	return NULL;
}

static bool seg_equal(const struct sampler_segment *a, const struct sampler_segment *b)
{
	if (a->world != b->world)
		return false;
	uint32_t w = a->world;
	for (uint32_t r = 0; r < w; r++)
		if (sampler_seg_steps(a, r) != sampler_seg_steps(b, r))
			return false;
	return true;
}

static const char *rank_name(uint32_t rank, char *buf, size_t len)
{
	if (rank == SMP_REC_ALL)
		return "all ranks";
	snprintf(buf, len, "rank %u", rank);
	return buf;
}

/* Inputs share the job, the epoch (or start the next one) and the history. */
static int merge_check(const struct sampler_record *const *in, size_t k, const struct sampler_record **base)
{
	char n1[32], n2[32];
	uint64_t emin = UINT64_MAX;
	for (size_t i = 0; i < k; i++) {
		int rc = sampler_record_validate(in[i], NULL);
		if (rc < 0)
			return rc;
		uint64_t x, y;
		const char *what = job_diff(&in[0]->job, &in[i]->job, &x, &y);
		if (what) {
			err_set("checkpoint records disagree on the job: %s's has %s %" PRIu64 ", %s's "
				"%" PRIu64 " (records of different jobs?)",
				rank_name(in[0]->rank, n1, sizeof(n1)), what, x,
				rank_name(in[i]->rank, n2, sizeof(n2)), y);
			return -EINVAL;
		}
		if (in[i]->epoch < emin) {
			emin = in[i]->epoch;
			*base = in[i];
		}
	}
	const struct sampler_record *b = *base;
	for (size_t i = 0; i < k; i++) {
		const struct sampler_record *r = in[i];
		bool fresh = r->nseg == 1 && r->seg[0].nsteps == 1 && r->seg[0].steps[0] == 0;
		bool ok = r->epoch == emin ? r->nseg == b->nseg : r->epoch == emin + 1 && fresh;
		for (uint32_t s = 0; ok && r->epoch == emin && s + 1 < r->nseg; s++)
			ok = seg_equal(&r->seg[s], &b->seg[s]);
		if (!ok) {
			char d1[256], d2[256];
			sampler_record_describe(b, d1, sizeof(d1));
			sampler_record_describe(r, d2, sizeof(d2));
			err_set("checkpoint records are not from one moment of the job: %s and %s "
				"(save every rank's record at the same step)", d1, d2);
			return -EINVAL;
		}
	}
	return 0;
}

/* Records rank's count; -EINVAL when an earlier input said otherwise. */
static int merge_fact(uint64_t *cnt, uint8_t *known, uint32_t rank, uint64_t c)
{
	if (known[rank] && cnt[rank] != c) {
		err_set("checkpoint records disagree on rank %u: one says it consumed %" PRIu64
			" batches, another %" PRIu64, rank, cnt[rank], c);
		return -EINVAL;
	}
	known[rank] = 1;
	cnt[rank] = c;
	return 0;
}

/* Counts of the last segment from every input: cnt[r] with known[r]. */
static int merge_gather(const struct sampler_record *const *in, size_t k, const struct sampler_record *b,
			uint64_t *cnt, uint8_t *known)
{
	uint64_t m[SMP_REC_MAX_SEGS];
	int rc = sampler_record_validate(b, m);
	if (rc < 0)
		return rc;
	struct sampler_seg_shape sh;
	sampler_seg_shape(m_before(b, m, b->nseg - 1), b->job.world, b->job.batch, b->job.drop_last,
		      &sh);
	for (size_t i = 0; i < k && rc == 0; i++) {
		const struct sampler_record *r = in[i];
		const struct sampler_segment *s = &r->seg[r->nseg - 1];
		bool finished = r->epoch != b->epoch; /* at the start of the next epoch */
		for (uint32_t q = 0; q < s->world && rc == 0; q++) {
			if (r->rank != SMP_REC_ALL && q != r->rank)
				continue;
			uint64_t c = finished ? sh.bpe : r->rank == SMP_REC_ALL ? sampler_seg_steps(s, q)
								  : s->steps[0];
			rc = merge_fact(cnt, known, q, c);
		}
	}
	return rc;
}

/* The last segment from the gathered counts: all known, or all equal. */
static int merge_last(const uint64_t *cnt, const uint8_t *known, uint32_t world,
		      struct sampler_record *out)
{
	uint32_t first = UINT32_MAX, missing = 0, first_missing = 0, other = UINT32_MAX;
	for (uint32_t q = 0; q < world; q++) {
		if (!known[q]) {
			if (missing++ == 0)
				first_missing = q;
			continue;
		}
		if (first == UINT32_MAX)
			first = q;
		else if (cnt[q] != cnt[first] && other == UINT32_MAX)
			other = q;
	}
	if (missing == 0) {
		out->rank = SMP_REC_ALL;
		return sampler_record_push(out, world, world, cnt);
	}
	if (other != UINT32_MAX) {
		err_set("checkpoint records: ranks %u and %u consumed %" PRIu64 " and %" PRIu64
			" batches of epoch %" PRIu64 ", and the records of %u of the %u ranks are "
			"missing (rank %u first): merge the records of every rank", first, other,
			cnt[first], cnt[other], out->epoch, missing, world, first_missing);
		return -EINVAL;
	}
	out->rank = first; /* a lockstep claim, as the inputs made */
	return sampler_record_push(out, world, 1, &cnt[first]);
}

int sampler_record_merge(const struct sampler_record *const *in, size_t k, struct sampler_record *out)
{
	memset(out, 0, sizeof(*out));
	if (k == 0) {
		err_set("checkpoint records: nothing to merge");
		return -EINVAL;
	}
	const struct sampler_record *b = NULL;
	int rc = merge_check(in, k, &b);
	if (rc < 0)
		return rc;
	uint32_t world = b->job.world;
	uint64_t *cnt = calloc(world, sizeof(*cnt));
	uint8_t *known = calloc(world, 1);
	if (!cnt || !known) {
		err_set("checkpoint records: out of memory for %u ranks", world);
		rc = -ENOMEM;
		goto out;
	}
	rc = merge_gather(in, k, b, cnt, known);
	if (rc == 0)
		rc = sampler_record_copy(out, b, b->nseg - 1);
	if (rc == 0)
		rc = merge_last(cnt, known, world, out);
	if (rc == 0)
		rc = sampler_record_normalize(out);
	if (rc < 0)
		sampler_record_free(out);
out:
	free(cnt);
	free(known);
	return rc;
}

/* ---- resume plans ------------------------------------------------------------ */

/* L after the first `nseg` segments of r, as epoch positions. */
static int build_remainder(const struct sampler_record *r, uint32_t nseg, uint32_t **out,
			   uint64_t *mout)
{
	const struct sampler_job *j = &r->job;
	uint32_t *pos = malloc(sizeof(*pos) * j->n);
	if (!pos) {
		err_set("elastic resume: out of memory for %" PRIu64 " positions", j->n);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < j->n; i++)
		pos[i] = (uint32_t)i;
	uint64_t m = j->n;
	for (uint32_t k = 0; k < nseg; k++) {
		const struct sampler_segment *s = &r->seg[k];
		struct sampler_seg_shape sh;
		sampler_seg_shape(m, s->world, j->batch, j->drop_last, &sh);
		uint64_t w = 0; /* compaction in place: w never passes the read index */
		for (uint64_t t = 0, i = 0; i < m; t++)
			for (uint32_t q = 0; q < s->world && i < m; q++, i++)
				if (t >= consumed_entries(&sh, j->batch, sampler_seg_steps(s, q)))
					pos[w++] = pos[i];
		m = w;
	}
	*out = pos;
	*mout = m;
	return 0;
}

/* Which segments are finished and whether the last one continues. */
static void plan_shape(const struct sampler_record *rec, const uint64_t *m, uint32_t world,
		       struct sampler_resume *p, uint32_t *frozen)
{
	const struct sampler_job *j = &rec->job;
	uint32_t last = rec->nseg - 1;
	const struct sampler_segment *s = &rec->seg[last];
	struct sampler_seg_shape sh;
	sampler_seg_shape(m_before(rec, m, last), s->world, j->batch, j->drop_last, &sh);
	bool uniform = seg_uniform(s);
	p->epoch = rec->epoch;
	p->step = 0;
	if (uniform && s->steps[0] == sh.bpe) {
		*frozen = 0; /* complete: the next epoch, plain */
		p->epoch = rec->epoch + 1;
	} else if (uniform && s->steps[0] == 0) {
		*frozen = last; /* the last segment consumed nothing: as if it never ran */
	} else if (uniform && s->world == world) {
		*frozen = last; /* the same world continues its segment */
		p->step = s->steps[0];
	} else {
		*frozen = rec->nseg;
	}
}

/* The epoch after the record's does not exist. */
static int past_end(const struct sampler_resume *p, const struct sampler_record *rec)
{
	if (p->epoch >= rec->epoch)
		return 0;
	err_set("checkpoint record: epoch %" PRIu64 " is complete and is the last there is",
		rec->epoch);
	return -ERANGE;
}

int sampler_resume_init(struct sampler_resume *p, const struct sampler_job *job, const struct sampler_record *rec)
{
	memset(p, 0, sizeof(*p));
	p->job = *job;
	if (!rec)
		return 0;
	int rc = sampler_record_check_job(rec, job);
	if (rc < 0)
		return rc;
	uint64_t m[SMP_REC_MAX_SEGS];
	rc = sampler_record_validate(rec, m);
	if (rc < 0)
		return rc;
	uint32_t frozen;
	plan_shape(rec, m, job->world, p, &frozen);
	if (frozen == 0)
		return past_end(p, rec); /* a plain epoch: the new world's order from p->step */
	rc = build_remainder(rec, frozen, &p->pos, &p->rsh.m);
	if (rc < 0)
		return rc;
	sampler_seg_shape(p->rsh.m, job->world, job->batch, job->drop_last, &p->rsh);
	if (p->rsh.bpe == 0) {
		/* nothing (or less than a batch per rank, dropped) left */
		free(p->pos);
		p->pos = NULL;
		p->rsh = (struct sampler_seg_shape){ 0 };
		p->epoch = rec->epoch + 1;
		p->step = 0;
		return past_end(p, rec);
	}
	rc = sampler_record_copy(&p->hist, rec, frozen);
	if (rc < 0) {
		free(p->pos);
		p->pos = NULL;
		return rc;
	}
	p->hist.rank = SMP_REC_ALL;
	p->elastic = true;
	return 0;
}

void sampler_resume_free(struct sampler_resume *p)
{
	free(p->pos);
	p->pos = NULL;
	sampler_record_free(&p->hist);
}

uint64_t sampler_resume_batches(const struct sampler_resume *p, const struct sampler_shape *sh,
			    uint64_t epoch)
{
	if (epoch < p->epoch)
		return 0;
	if (p->elastic && epoch == p->epoch)
		return p->rsh.bpe;
	return sh->bpe;
}

int sampler_resume_batch(const struct sampler_resume *p, const uint32_t *order, uint32_t rank,
		     uint64_t step, uint32_t *ids)
{
	const struct sampler_seg_shape *rs = &p->rsh;
	if (!p->elastic || rank >= rs->world || step >= rs->bpe)
		return -ERANGE;
	uint64_t first = step * p->job.batch;
	uint32_t len = (uint32_t)MIN(rs->per_rank - first, (uint64_t)p->job.batch);
	for (uint32_t i = 0; i < len; i++) {
		uint64_t idx = rank + (uint64_t)rs->world * (first + i);
		/* past the list: the epoch's own padding, its order's start */
		uint64_t pos = idx < rs->m ? p->pos[idx] : (idx - rs->m) % p->job.n;
		ids[i] = order[pos];
	}
	return (int)len;
}

int sampler_resume_record(const struct sampler_resume *p, const struct sampler_shape *sh, uint32_t rank,
		      uint64_t epoch, uint64_t steps, struct sampler_record *out)
{
	memset(out, 0, sizeof(*out));
	if (rank != SMP_REC_ALL && rank >= p->job.world) {
		err_set("checkpoint record: rank %u of %u", rank, p->job.world);
		return -EINVAL;
	}
	uint64_t nb = sampler_resume_batches(p, sh, epoch);
	if (epoch < p->epoch || steps > nb) {
		err_set("checkpoint record: epoch %" PRIu64 " step %" PRIu64 " is not a position "
			"of this job (it resumed at epoch %" PRIu64 " step %" PRIu64 "; the epoch "
			"has %" PRIu64 " batches per rank)", epoch, steps, p->epoch, p->step, nb);
		return -ERANGE;
	}
	int rc;
	if (p->elastic && epoch == p->epoch) {
		rc = sampler_record_copy(out, &p->hist, SMP_REC_MAX_SEGS);
		out->job = p->job;
	} else {
		sampler_record_init(out, &p->job, epoch, rank);
		rc = 0;
	}
	out->rank = rank;
	if (rc == 0)
		rc = sampler_record_push(out, p->job.world, 1, &steps);
	if (rc == 0)
		rc = sampler_record_normalize(out);
	if (rc < 0)
		sampler_record_free(out);
	return rc;
}

/* ---- a resumed job's batches, numbered --------------------------------------- */

void sampler_timeline_init(struct sampler_timeline *tl, uint64_t bpe, uint64_t epochs,
		       const struct sampler_resume *p)
{
	tl->bpe = bpe;
	tl->epochs = epochs;
	tl->epoch = p && p->elastic ? p->epoch : 0;
	tl->nb = p && p->elastic ? p->rsh.bpe : bpe;
}

int sampler_plan_batch(struct sampler_cache *c, const struct sampler_resume *p, uint64_t epoch,
		   uint32_t rank, uint64_t step, uint32_t *ids)
{
	if (!p || !p->elastic || epoch != p->epoch)
		return sampler_batch(c, epoch, rank, step, ids);
	const uint32_t *order = sampler_cache_epoch(c, epoch);
	if (!order)
		return -ENOMEM;
	return sampler_resume_batch(p, order, rank, step, ids);
}

uint32_t sampler_plan_batch_len(const struct sampler_shape *sh, const struct sampler_resume *p,
			    uint64_t epoch, uint64_t step)
{
	if (!p || !p->elastic || epoch != p->epoch)
		return sampler_batch_len(sh, step);
	uint64_t first = step * p->job.batch;
	return (uint32_t)MIN(p->rsh.per_rank - first, (uint64_t)p->job.batch);
}
