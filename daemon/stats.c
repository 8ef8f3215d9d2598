/* Statistics: per-epoch counters, source estimates, the per-step series,
 * the `seerctl status` reply and the stats file.
 *
 * Owns e->es (per epoch), e->src (EWMA of each source's service time and
 * rate), e->step_s and the step series. Every function runs on the
 * dispatcher; the counters are fed by the stage that sees the event
 * (prefetch: deliveries and RAM hits; task: reads by source; peer: served
 * samples). Failure: out of memory aborts (house rule for the daemon); a
 * stats file that cannot be written is logged and the daemon goes on. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/ctrl.h"
#include "../src/util.h"
#include "engine_int.h"
#include "paths.h"

static const char *const src_names[SRC_COUNT] = { "pfs", "nvme", "peer" };

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
	uint64_t done = min_tail / e->sh.bpe;
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
			 "peers %s in %llu, PFS %s in %llu reads%s",
			 (unsigned long long)ep, dt, (unsigned long long)s->samples,
			 (double)s->samples / MAX(dt, 1e-9),
			 fmt_size(a, sizeof(a), (uint64_t)((double)s->bytes / MAX(dt, 1e-9))),
			 100.0 * (double)s->ram_samples / (double)MAX(s->samples, 1ull),
			 fmt_size(c, sizeof(c), s->peer_bytes), (unsigned long long)s->peer_samples,
			 fmt_size(b, sizeof(b), s->pfs_bytes), (unsigned long long)s->pfs_samples,
			 s->failed ? ", SOME BATCHES FAILED" : "");
	}
}

struct sbuf {
	char *p;
	size_t len, cap;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) PRINTF_LIKE(2, 3);

static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (b->p && (size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		b->cap = MAX(b->cap * 2, b->len + (size_t)n + 4096);
		b->p = xrealloc(b->p, b->cap);
	}
}

static void json_epochs(struct engine *e, struct sbuf *b, uint64_t max_epochs)
{
	uint64_t last = MIN(e->nes_used, e->cfg->epochs);
	uint64_t from = max_epochs && last > max_epochs ? last - max_epochs : 0;
	sb_printf(b, "\"epochs_omitted\":%llu,\"epochs\":[", (unsigned long long)from);
	for (uint64_t i = from; i < last; i++) {
		const struct epoch_stats *s = &e->es[i];
		double t0 = i > 0 && e->es[i - 1].t_done > 0 ? e->es[i - 1].t_done : e->t_plan;
		sb_printf(b, "%s{\"epoch\":%llu,\"samples\":%llu,\"bytes\":%llu,\"ram_samples\":%llu,"
			  "\"ram_bytes\":%llu,\"nvme_samples\":%llu,\"nvme_bytes\":%llu,"
			  "\"nvme_written\":%llu,\"nvme_corrupt\":%llu,\"peer_samples\":%llu,"
			  "\"peer_bytes\":%llu,\"pfs_samples\":%llu,\"pfs_bytes\":%llu,"
			  "\"served_samples\":%llu,\"served_bytes\":%llu,\"peer_fallbacks\":%llu,"
			  "\"skipped\":%llu,\"retries\":%llu,"
			  "\"failed_batches\":%llu,\"seconds\":%.6f}",
			  i > from ? "," : "", (unsigned long long)i, (unsigned long long)s->samples,
			  (unsigned long long)s->bytes, (unsigned long long)s->ram_samples,
			  (unsigned long long)s->ram_bytes, (unsigned long long)s->nvme_samples,
			  (unsigned long long)s->nvme_bytes, (unsigned long long)s->nvme_written,
			  (unsigned long long)s->nvme_corrupt, (unsigned long long)s->peer_samples,
			  (unsigned long long)s->peer_bytes, (unsigned long long)s->pfs_samples,
			  (unsigned long long)s->pfs_bytes, (unsigned long long)s->served_samples,
			  (unsigned long long)s->served_bytes, (unsigned long long)s->fallbacks,
			  (unsigned long long)s->skipped, (unsigned long long)s->retries,
			  (unsigned long long)s->failed,
			  s->t_done > 0 ? s->t_done - t0 : -1.0);
	}
	sb_printf(b, "]");
}

char *engine_status_json(struct engine *e, uint64_t max_epochs)
{
	struct sbuf b = { 0 };
	sb_printf(&b, "{\"node\":%u,\"nodes\":%u,\"pid\":%d,\"job_id\":\"%s\",\"uptime_s\":%.3f,",
		  e->node, e->nnodes, (int)getpid(), e->cfg->job_id, now_s() - e->t_start);
	sb_printf(&b, "\"state\":\"%s\",\"world\":%u,\"batches_per_epoch\":%llu,\"job_epochs\":%llu,",
		  atomic_load(&e->stopping) ? "stopping" : e->draining ? "draining"
		  : e->plan_ready ? "serving" : "waiting",
		  e->world, (unsigned long long)(e->shape_ready ? e->sh.bpe : 0),
		  (unsigned long long)e->cfg->epochs);
	sb_printf(&b, "\"dataset\":{\"samples\":%llu,\"bytes\":%llu,\"files\":%u,\"format\":\"%s\"},",
		  (unsigned long long)e->cat->nsamples, (unsigned long long)e->cat->total_bytes,
		  e->cat->nfiles, e->cat->fmt->name);
	sb_printf(&b, "\"cache\":{\"ram_capacity\":%llu,\"ram_planned_samples\":%llu,"
		  "\"ram_planned_bytes\":%llu,\"ram_loaded_samples\":%llu,\"ram_loaded_bytes\":%llu,"
		  "\"staging_capacity\":%llu,\"nvme_enabled\":%s,\"nvme_capacity\":%llu,"
		  "\"nvme_planned_samples\":%llu,\"nvme_loaded_samples\":%llu,"
		  "\"nvme_loaded_bytes\":%llu},",
		  (unsigned long long)e->cache_cap, (unsigned long long)e->cache_planned,
		  (unsigned long long)e->local_cached_bytes,
		  (unsigned long long)e->cache_loaded, (unsigned long long)e->cache_loaded_bytes,
		  (unsigned long long)e->stage_cap, e->nvme_ok ? "true" : "false",
		  (unsigned long long)e->nvme_cap, (unsigned long long)e->nvme_planned,
		  (unsigned long long)e->nvme_loaded, (unsigned long long)e->nvme_loaded_bytes);
	sb_printf(&b, "\"io\":{\"threads\":%llu,\"pending\":%u,\"placement\":\"%s\"},"
		  "\"topology\":\"%s\",",
		  (unsigned long long)e->cfg->io_threads, iopool_pending(&e->pool), e->pin_desc,
		  e->topo_desc);
	sb_printf(&b, "\"sources\":{");
	for (int k = 0; k < SRC_COUNT; k++)
		sb_printf(&b, "%s\"%s\":{\"reads\":%llu,\"latency_ms\":%.3f,\"mb_per_s\":%.1f}",
			  k ? "," : "", src_names[k], (unsigned long long)e->src[k].n,
			  e->src[k].lat_s * 1e3, e->src[k].bps / 1e6);
	sb_printf(&b, "},\"step_ms\":%.3f,", e->step_s * 1e3);
	sb_printf(&b, "\"trainers\":[");
	bool first = true;
	for (uint32_t r = 0; e->shape_ready && r < e->world; r++) {
		struct trainer *t = &e->tr[r];
		if (!t->known)
			continue;
		uint64_t pos = t->attached ? t->next_pub : t->resume_g;
		uint32_t unread = 0, held = 0;
		uint64_t stall_ns = 0, stalls = 0;
		if (t->attached) {
			unread = ctrl_unread(atomic_load(&t->co->prod), atomic_load(&t->ci->cons),
					     t->nslots);
			for (uint32_t i = 0; i < t->nslots; i++)
				held += t->slots[i].st == SL_PUB;
			held = held >= unread ? held - unread : 0;
			stall_ns = atomic_load(&t->ci->stall_ns);
			stalls = atomic_load(&t->ci->stalls);
		}
		sb_printf(&b, "%s{\"rank\":%u,\"pid\":%d,\"attached\":%s,\"done\":%s,\"epoch\":%llu,"
			  "\"step\":%llu,\"prefetch_lead\":%llu,\"ready_unread\":%u,\"held\":%u,"
			  "\"staging_used\":%llu,\"staging_capacity\":%llu,\"inflight\":%u,"
			  "\"batches\":%llu,\"samples\":%llu,\"bytes\":%llu,\"stall_s\":%.6f,"
			  "\"stalls\":%llu}",
			  first ? "" : ",", r, (int)t->pid, t->attached ? "true" : "false",
			  t->done ? "true" : "false", (unsigned long long)(pos / e->sh.bpe),
			  (unsigned long long)(pos % e->sh.bpe),
			  (unsigned long long)(t->attached ? t->next_prep - (t->next_pub - unread) : 0),
			  unread, held, (unsigned long long)stg_used(&t->stg),
			  (unsigned long long)t->stg.cap, t->inflight, (unsigned long long)t->batches,
			  (unsigned long long)t->samples, (unsigned long long)t->bytes,
			  (double)stall_ns / 1e9, (unsigned long long)stalls);
		first = false;
	}
	sb_printf(&b, "],");
	json_epochs(e, &b, max_epochs);
	sb_printf(&b, "}");
	return b.p;
}

void engine_write_stats(struct engine *e)
{
	resume_save(e, false);
	if (!e->cfg->stats_file || !*e->cfg->stats_file)
		return;
	char *status = engine_status_json(e, 0);
	/* the status plus the per-step series */
	struct sbuf sb = { 0 };
	sb_printf(&sb, "%.*s,\"step_stride\":%llu,\"steps\":[", (int)strlen(status) - 1, status,
		  (unsigned long long)e->step_stride);
	free(status);
	bool first = true;
	for (uint64_t k = 0; k < e->nsteps; k++) {
		if (!e->step_count || !e->step_count[k])
			continue;
		sb_printf(&sb, "%s[%llu,%.6f,%.6f]", first ? "" : ",",
			  (unsigned long long)(k * e->step_stride), e->step_done[k],
			  (double)e->step_stall[k]);
		first = false;
	}
	sb_printf(&sb, "]}");
	char *json = sb.p;
	char path[4096];
	int rc = node_path(path, sizeof(path), e->cfg->stats_file, e->node);
	if (rc == 0)
		rc = write_file_atomic(path, json, strlen(json));
	else
		str_copy(path, sizeof(path), e->cfg->stats_file);
	if (rc != 0)
		log_warn("cannot write the stats file %s: %s", path, strerror(-rc));
	else
		log_info("statistics written to %s", path);
	free(json);
}
