/* Statistics: per-epoch counters, source estimates, the per-step series
 * (status.c renders them as JSON).
 *
 * Owns e->es (per epoch), e->src (EWMA of each source's service time and
 * rate), e->step_s and the step series. Every function runs on the
 * dispatcher; the counters are fed by the stage that sees the event
 * (prefetch: deliveries and RAM hits; task: reads by source; peer: served
 * samples). Failure: out of memory aborts (house rule for the daemon). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/util/ctrl.h"
#include "../src/util/util.h"
#include "engine_int.h"
#include "node_path.h"

struct epoch_stats *stats_epoch(struct engine *e, uint64_t epoch)
{
	if (epoch >= e->nes) {
		uint64_t n = MAX(epoch + 1, e->nes * 2);
		e->es = xrealloc(e->es, n * sizeof(*e->es));
		memset(e->es + e->nes, 0, (n - e->nes) * sizeof(*e->es));
		e->nes = n;
	}
	e->nes_used = MAX(e->nes_used, epoch + 1);
	return &e->es[epoch];
}

void stats_observe(struct engine *e, int src, double seconds, uint64_t bytes)
{
	struct src_est *x = &e->src[src];
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
	struct epoch_stats *es = stats_epoch(e, e->epochs_done);
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
		e->compute_s = e->compute_n++ ? e->compute_s + 0.05 * (c - e->compute_s) : c;
	}
	if (!e->step_done || g % e->step_stride != 0 || g / e->step_stride >= e->nsteps)
		return;
	uint64_t k = g / e->step_stride;
	e->step_done[k] = MAX(e->step_done[k], now_s() - e->t_start);
	e->step_stall[k] += (float)waited;
	e->step_count[k]++;
}

void stats_check_epochs(struct engine *e)
{
	if (!e->plan_ready || e->nlocal == 0)
		return;
	uint64_t min_tail = UINT64_MAX;
	for (uint32_t i = 0; i < e->nlocal; i++) {
		const struct trainer *t = &e->tr[e->local_ranks[i]];
		if (!t->known)
			return;
		min_tail = MIN(min_tail, t->attached ? t->tail_g : t->resume_g);
	}
	uint64_t done, step;
	jobrec_pos(e, min_tail, &done, &step);
	while (e->epochs_done < done) {
		uint64_t ep = e->epochs_done++;
		struct epoch_stats *s = stats_epoch(e, ep);
		s->t_done = now_s();
		if (s->samples == 0)
			continue; /* skipped by a resume */
		double t0 = ep > 0 && e->es[ep - 1].t_done > 0 ? e->es[ep - 1].t_done : e->t_plan;
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
	fcast_note(e); /* the epoch now beginning, with the rates so far */
}
