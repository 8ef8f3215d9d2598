/* Statistics (stats.h says what they own, their thread and failures): the
 * counters, the estimates, the step series, and their JSON for status.c. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/util/ctrl.h"
#include "../src/util/util.h"
#include "engine_int.h"
#include "jout.h"
#include "node_path.h"

struct epoch_stats *stats_epoch(struct engine *e, uint64_t epoch)
{
	if (epoch >= e->st.nes) {
		uint64_t n = MAX(epoch + 1, e->st.nes * 2);
		e->st.es = xrealloc(e->st.es, n * sizeof(*e->st.es));
		memset(e->st.es + e->st.nes, 0, (n - e->st.nes) * sizeof(*e->st.es));
		e->st.nes = n;
	}
	e->st.nes_used = MAX(e->st.nes_used, epoch + 1);
	return &e->st.es[epoch];
}

void stats_observe(struct engine *e, int src, double seconds, uint64_t bytes)
{
	struct src_est *x = &e->st.src[src];
	const double a = 0.05;
	if (seconds <= 0)
		return;
	double bps = (double)bytes / seconds;
	if (x->n++ == 0) {
		x->lat_s = seconds;
		x->bps = bps;
	} else {
		x->lat_s += a * (seconds - x->lat_s);
		x->bps += a * (bps - x->bps);
	}
}

/* A read from src (SRC_*) delivered `bytes`, in the job's current epoch. */
void stats_read(struct engine *e, int src, uint64_t bytes)
{
	struct epoch_stats *es = stats_epoch(e, e->st.epochs_done);
	if (src == SRC_PEER) {
		es->peer_samples++;
		es->peer_bytes += bytes;
	} else if (src == SRC_NVME) {
		es->nvme_samples++;
		es->nvme_bytes += bytes;
	} else {
		es->pfs_samples++;
		es->pfs_bytes += bytes;
	}
}

void stats_delivered(struct engine *e, uint64_t epoch, uint64_t bytes, uint32_t n)
{
	struct epoch_stats *s = stats_epoch(e, epoch);
	s->samples += n;
	s->bytes += bytes;
}

void stats_step(struct engine *e, struct trainer *t, uint64_t g)
{
	uint64_t stall = atomic_load_explicit(&t->ci->stall_ns, memory_order_relaxed);
	double waited = stall >= t->last_stall_ns ? (double)(stall - t->last_stall_ns) / 1e9 : 0.0;
	t->last_stall_ns = stall;
	if (t->last_release_ns) {
		/* the trainer's own time for the step: since its last release,
		 * less what it waited for this batch (the forecast's compute) */
		double dt = (double)(now_ns() - t->last_release_ns) / 1e9;
		double c = MAX(0.0, dt - waited);
		e->st.compute_s = e->st.compute_n++ ? e->st.compute_s + 0.05 * (c - e->st.compute_s) : c;
	}
	if (!e->st.step_done || g % e->st.step_stride != 0 || g / e->st.step_stride >= e->st.nsteps)
		return;
	uint64_t k = g / e->st.step_stride;
	e->st.step_done[k] = MAX(e->st.step_done[k], now_s() - e->st.t_start);
	e->st.step_stall[k] += (float)waited;
	e->st.step_count[k]++;
}

bool stats_check_epochs(struct engine *e)
{
	if (!e->plan_ready || e->pl.nlocal == 0)
		return false;
	uint64_t min_tail = UINT64_MAX;
	for (uint32_t i = 0; i < e->pl.nlocal; i++) {
		const struct trainer *t = &e->tr[e->pl.local_ranks[i]];
		if (!t->known)
			return false;
		min_tail = MIN(min_tail, t->attached ? t->tail_g : t->resume_g);
	}
	uint64_t done, step;
	jobrec_pos(e, min_tail, &done, &step);
	while (e->st.epochs_done < done) {
		uint64_t ep = e->st.epochs_done++;
		struct epoch_stats *s = stats_epoch(e, ep);
		s->t_done = now_s();
		if (s->samples == 0)
			continue; /* skipped by a resume */
		double t0 = ep > 0 && e->st.es[ep - 1].t_done > 0 ? e->st.es[ep - 1].t_done : e->st.t_plan;
		double dt = s->t_done - t0;
		char a[32], b[32], c[32];
		log_info("epoch %llu done in %.2f s: %llu samples (%.0f/s, %s/s), RAM hits %.1f%%, "
			 "peers %s in %llu, PFS %s for %llu samples in %llu reads (%llu coalesced)%s",
			 (unsigned long long)ep, dt, (unsigned long long)s->samples,
			 (double)s->samples / MAX(dt, 1e-9),
			 fmt_size(a, sizeof(a), (uint64_t)((double)s->bytes / MAX(dt, 1e-9))),
			 100.0 * (double)s->ram_samples / (double)MAX(s->samples, 1ull),
			 fmt_size(c, sizeof(c), s->peer_bytes), (unsigned long long)s->peer_samples,
			 fmt_size(b, sizeof(b), s->pfs_bytes), (unsigned long long)s->pfs_samples,
			 (unsigned long long)s->pfs_reads, (unsigned long long)s->extents,
			 s->failed ? ", SOME BATCHES FAILED" : "");
	}
	return true;
}

void stats_steps_init(struct stats *st, uint64_t end)
{
	st->step_stride = MAX(1ull, (end + 99999) / 100000);
	st->nsteps = (end + st->step_stride - 1) / st->step_stride;
	st->step_done = xcalloc(st->nsteps, sizeof(double));
	st->step_stall = xcalloc(st->nsteps, sizeof(float));
	st->step_count = xcalloc(st->nsteps, sizeof(uint16_t));
}

void stats_steps_free(struct stats *st)
{
	free(st->step_done);
	free(st->step_stall);
	free(st->step_count);
	st->step_done = NULL;
	st->step_stall = NULL;
	st->step_count = NULL;
}

void stats_forget(struct stats *st)
{
	free(st->es);
	st->es = NULL;
	st->nes = st->nes_used = st->epochs_done = 0;
	st->step_s = 0;
}

void stats_free(struct stats *st)
{
	stats_steps_free(st);
	free(st->es);
	st->es = NULL;
}

struct stats_extents stats_extent_totals(const struct stats *st)
{
	struct stats_extents x = { 0 };
	for (uint64_t i = 0; i < st->nes_used; i++) {
		x.extents += st->es[i].extents;
		x.samples += st->es[i].extent_samples;
		x.bytes += st->es[i].extent_bytes;
		x.useful += st->es[i].extent_useful;
		x.pfs_reads += st->es[i].pfs_reads;
	}
	return x;
}

/* ---- JSON (status.c assembles it) ---- */

#define must jout_must
#define jreal jout_real
#define JU(x) ((json_int_t)(x))

static const char *const src_names[SRC_COUNT] = { "pfs", "nvme", "peer" };

/* What this node's forecast said of the epoch as it began (fcast_note
 * fills fc_*), null when it made none. */
static json_t *forecast_json(const struct epoch_stats *s)
{
	if (!s->fc_set)
		return json_null();
	return must(json_pack("{so so ss sI sI sI sI}", "seconds",
			      s->fc_timed ? jreal(s->fc_time, 6) : json_null(), "lower_bound",
			      s->fc_timed ? jreal(s->fc_lb, 6) : json_null(), "bound",
			      s->fc_timed ? forecast_term_name((enum forecast_term)s->fc_bound) : "unknown",
			      "ram_bytes", JU(s->fc_ram), "nvme_bytes", JU(s->fc_nvme), "peer_bytes",
			      JU(s->fc_peer), "pfs_bytes", JU(s->fc_pfs)));
}

static json_t *epoch_json(const struct stats *st, uint64_t i)
{
	const struct epoch_stats *s = &st->es[i];
	double t0 = i > 0 && st->es[i - 1].t_done > 0 ? st->es[i - 1].t_done : st->t_plan;
	json_t *j = json_pack("{sI sI sI sI sI sI sI sI sI sI sI sI sI sI sI sI sI sI sI so}",
			 "epoch", JU(i), "samples", JU(s->samples), "bytes", JU(s->bytes),
			 "ram_samples", JU(s->ram_samples), "ram_bytes", JU(s->ram_bytes),
			 "nvme_samples", JU(s->nvme_samples), "nvme_bytes", JU(s->nvme_bytes),
			 "nvme_written", JU(s->nvme_written), "nvme_corrupt", JU(s->nvme_corrupt),
			 "peer_samples", JU(s->peer_samples), "peer_bytes", JU(s->peer_bytes),
			 "pfs_samples", JU(s->pfs_samples), "pfs_bytes", JU(s->pfs_bytes),
			 "served_samples", JU(s->served_samples), "served_bytes", JU(s->served_bytes),
			 "peer_fallbacks", JU(s->fallbacks), "skipped", JU(s->skipped),
			 "retries", JU(s->retries), "failed_batches", JU(s->failed),
			 "seconds", jreal(s->t_done > 0 ? s->t_done - t0 : -1.0, 6));
	/* replicas: reads they served (part of ram_* / nvme_*), and their loads
	 * (part of peer_* / pfs_*) */
	json_object_set_new(must(j), "replica_samples", must(json_integer(JU(s->repl_samples))));
	json_object_set_new(j, "replica_bytes", must(json_integer(JU(s->repl_bytes))));
	json_object_set_new(j, "replica_fill_samples", must(json_integer(JU(s->fill_samples))));
	json_object_set_new(j, "replica_fill_bytes", must(json_integer(JU(s->fill_bytes))));
	/* what this node's forecast said of the epoch as it began (fcast.c) */
	json_object_set_new(j, "forecast", forecast_json(s));
	return j;
}

/* Coalesced reads of epoch i (extent.c): reads of the PFS (samples read
 * alone + extents), extents, the samples cut from them, their bytes and
 * the bytes of the samples they delivered. */
static void epoch_extents_json(const struct stats *st, uint64_t i, json_t *o)
{
	const struct epoch_stats *s = &st->es[i];
	json_object_set_new(o, "pfs_reads", must(json_integer(JU(s->pfs_reads))));
	json_object_set_new(o, "extents", must(json_integer(JU(s->extents))));
	json_object_set_new(o, "extent_samples", must(json_integer(JU(s->extent_samples))));
	json_object_set_new(o, "extent_bytes", must(json_integer(JU(s->extent_bytes))));
	json_object_set_new(o, "extent_useful_bytes", must(json_integer(JU(s->extent_useful))));
}

/* "epochs_omitted" and the last max_epochs epochs (0: all) into root. */
void stats_epochs_json(const struct stats *st, json_t *root, uint64_t max_epochs,
		       uint64_t job_epochs)
{
	uint64_t last = MIN(st->nes_used, job_epochs);
	uint64_t from = max_epochs && last > max_epochs ? last - max_epochs : 0;
	json_t *list = must(json_array());
	for (uint64_t i = from; i < last; i++) {
		json_t *ep = must(epoch_json(st, i));
		epoch_extents_json(st, i, ep);
		json_array_append_new(list, ep);
	}
	json_object_set_new(root, "epochs_omitted", must(json_integer(JU(from))));
	json_object_set_new(root, "epochs", list);
}

json_t *stats_sources_json(const struct stats *st)
{
	json_t *o = must(json_object());
	for (int k = 0; k < SRC_COUNT; k++)
		json_object_set_new(o, src_names[k],
				    must(json_pack("{sI so so}", "reads", JU(st->src[k].n),
						   "latency_ms", jreal(st->src[k].lat_s * 1e3, 3),
						   "mb_per_s", jreal(st->src[k].bps / 1e6, 1))));
	return o;
}

void stats_steps_json(const struct stats *st, json_t *root)
{
	json_t *steps = must(json_array());
	for (uint64_t k = 0; k < st->nsteps; k++) {
		if (!st->step_count || !st->step_count[k])
			continue;
		json_array_append_new(steps, must(json_pack("[I o o]", JU(k * st->step_stride),
							     jreal(st->step_done[k], 6),
							     jreal((double)st->step_stall[k], 6))));
	}
	json_object_set_new(root, "step_stride", must(json_integer(JU(st->step_stride))));
	json_object_set_new(root, "steps", steps);
}
