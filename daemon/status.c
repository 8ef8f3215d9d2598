/* What seerd tells the outside, as JSON (libjansson): the `seerctl status`,
 * `config`, `stop` and `drain` replies and the stats file ([daemon]
 * stats_file, every epoch plus the per-step series).
 *
 * Assembles the stages' own parts (stats_*_json, nvme_summary,
 * xfs_status_json) with the trainers' sessions and the configuration;
 * writes nothing of the engine. Dispatcher thread only.
 * Strings are escaped by the library, so any job id, path or message
 * parses; bytes that are not UTF-8 show as '?'. Reals carry the digits
 * their clocks are worth (seconds to 1 us). Failure: out of memory aborts
 * (the daemon's rule); a stats file that cannot be written is logged and
 * the daemon goes on. */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/util/ctrl.h"
#include "../src/util/util.h"
#include "engine_int.h"
#include "jout.h"
#include "node_path.h"

#define must jout_must
#define jreal jout_real

/* Text from the configuration or the system: JSON strings are UTF-8, so
 * other bytes are shown as '?' rather than dropping the value. */
static json_t *jtext(const char *s)
{
	json_t *j = json_string(s);
	if (j)
		return j;
	char *t = xstrdup(s);
	for (char *p = t; *p; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	j = json_string(t);
	free(t);
	return j;
}

#define JU(x) ((json_int_t)(x))

/* The job's coalesced reads: settings, totals, read amplification (bytes the
 * extents read / bytes of the samples they delivered) and extent memory. */
static json_t *coalescing_json(const struct engine *e)
{
	struct stats_extents x = stats_extent_totals(&e->st);
	uint64_t n = x.extents, samples = x.samples, bytes = x.bytes, useful = x.useful,
		 reads = x.pfs_reads;
	json_t *probe = json_null();
	if (e->ext.probe.measured || e->ext.probe.why[0])
		probe = must(json_pack("{sb sb sI sI sI sI so so sI sI ss}", "measured",
				       e->ext.probe.measured, "coalesce", e->ext.probe.coalesce,
				       "reads_at_once", JU(e->ext.probe.q), "small_bytes",
				       JU(e->ext.probe.small), "big_bytes", JU(e->ext.probe.big),
				       "rounds", JU(e->ext.probe.rounds),
				       "small_s", jreal(e->ext.probe.t_small, 6),
				       "big_s", jreal(e->ext.probe.t_big, 6), "pfs_bytes",
				       JU(e->ext.probe.bytes), "pfs_reads", JU(e->ext.probe.reads),
				       "why", e->ext.probe.why));
	return must(json_pack("{sb ss so sI sI so sI sI sI sI so sI sI sI}", "on", e->ext.coalesce,
			      "mode", e->cfg->prefetch.coalesce, "probe", probe,
			      "extent_max", JU(e->cfg->prefetch.extent_max),
			      "extent_memory", JU(e->cfg->prefetch.extent_memory),
			      "max_amplification", jreal(e->cfg->prefetch.max_amplification, 3),
			      "pfs_reads", JU(reads), "extents", JU(n), "samples", JU(samples),
			      "bytes", JU(bytes),
			      "amplification", jreal(useful ? (double)bytes / (double)useful : 0.0, 4),
			      "useful_bytes", JU(useful), "memory_in_flight", JU(e->ext.mem),
			      "memory_peak", JU(e->ext.mem_peak)));
}

static json_t *trainer_json(const struct engine *e, const struct trainer *t)
{
	uint64_t pos = t->attached ? t->next_pub : t->resume_g;
	uint32_t unread = 0, held = 0;
	uint64_t stall_ns = 0, stalls = 0;
	if (t->attached) {
		unread = sess_unread(t);
		for (uint32_t i = 0; i < t->nslots; i++)
			held += t->slots[i].st == SL_PUB;
		held = held >= unread ? held - unread : 0;
		stall_ns = atomic_load(&t->ci->stall_ns);
		stalls = atomic_load(&t->ci->stalls);
	}
	uint64_t ep, st, rep, rst;
	jobrec_pos(e, pos, &ep, &st);
	/* where it resumes: its first batch not released */
	jobrec_pos(e, t->attached && !t->resetting ? sess_first_unreleased(t) : t->resume_g, &rep,
		   &rst);
	return json_pack("{sI sI sb sb sI sI sI sI sI sI sI sI sI sI sI sI sI so sI sI}",
			 "rank", JU(t->rank), "pid", JU(t->pid), "attached", t->attached,
			 "done", t->done, "epoch", JU(ep), "step", JU(st),
			 "resume_epoch", JU(rep), "resume_step", JU(rst),
			 "prefetch_lead", JU(t->attached ? t->next_prep - (t->next_pub - unread) : 0),
			 "ready_unread", JU(unread), "held", JU(held),
			 "staging_used", JU(stg_used(&t->stg)), "staging_capacity", JU(t->stg.cap),
			 "inflight", JU(t->inflight), "batches", JU(t->batches),
			 "samples", JU(t->samples), "bytes", JU(t->bytes),
			 "stall_s", jreal((double)stall_ns / 1e9, 6), "stalls", JU(stalls),
			 "rings", JU(t->rings));
}

/* This node's replicas (replica.c): planned, filled, how. */
static json_t *replicas_json(const struct engine *e)
{
	const struct plan_node *nv = &e->repl.set;
	bool on = e->repl.on;
	uint64_t loaded = 0; /* RAM slots READY, NVMe copies written */
	for (uint64_t i = 0; on && i < nv->nrepl; i++)
		loaded += atomic_load_explicit(&e->cstate[nv->smp[i]], memory_order_relaxed) == CS_READY;
	return json_pack("{sb sI ss sI sI sI sI sI sI sI sI sI sI sI sI}", "enabled", on,
			 "loaded_samples", JU(loaded),
			 "fill_source", e->repl.from_pfs ? "pfs" : "peer",
			 "fill_rate", JU(e->cfg->cache.replica_fill_rate),
			 "samples", JU(on ? nv->nrepl : 0), "bytes", JU(on ? nv->repl_bytes : 0),
			 "ram_samples", JU(e->repl.ram_planned), "nvme_samples", JU(e->repl.nvme_planned),
			 "ram_used", JU(on ? nv->ram_used : e->plan_ready ? e->plan.ram_used[e->node] : 0),
			 "nvme_used", JU(on ? nv->nvme_used : e->plan_ready ? e->plan.nvme_used[e->node] : 0),
			 "filled_samples", JU(e->repl.fills), "filled_bytes", JU(e->repl.fill_bytes),
			 "filled_from_pfs_bytes", JU(e->repl.fill_pfs_bytes),
			 "fills_failed", JU(e->repl.fills_failed), "fills_inflight", JU(e->repl.inflight));
}

static json_t *cache_json(const struct engine *e)
{
	struct nvme_summary nvs = nvme_summary(e->nvme);
	json_t *j = json_pack("{sI sI sI sI sI sI sb sI sI sI sI}", "ram_capacity", JU(e->ar.cache_cap),
			 "ram_planned_samples", JU(e->pl.cache_planned + e->repl.ram_planned),
			 "ram_planned_bytes", JU(e->pl.local_cached_bytes),
			 "ram_loaded_samples", JU(e->pl.cache_loaded),
			 "ram_loaded_bytes", JU(e->pl.cache_loaded_bytes),
			 "staging_capacity", JU(e->ar.stage_cap), "nvme_enabled", nvs.enabled,
			 "nvme_capacity", JU(nvs.capacity), "nvme_planned_samples", JU(nvs.planned),
			 "nvme_loaded_samples", JU(nvs.loaded),
			 "nvme_loaded_bytes", JU(nvs.loaded_bytes));
	json_object_set_new(must(j), "replicas", must(replicas_json(e)));
	return j;
}

static const char *state_name(struct engine *e)
{
	return atomic_load(&e->stopping) ? "stopping" : e->draining ? "draining"
	       : e->plan_ready ? "serving" : "waiting";
}

/* The status as a JSON object (the stats file adds the step series). */
static json_t *status_json(struct engine *e, uint64_t max_epochs)
{
	json_t *root = json_pack(
		"{sI sI sI so so ss sI sI sI s{sI sI sI so} so s{sI sI so} so so so}",
		"node", JU(e->node), "nodes", JU(e->nnodes), "pid", JU(getpid()),
		"job_id", jtext(e->cfg->job.id), "uptime_s", jreal(now_s() - e->st.t_start, 3),
		"state", state_name(e), "world", JU(e->world),
		"batches_per_epoch", JU(e->shape_ready ? e->sh.bpe : 0),
		"job_epochs", JU(e->cfg->job.epochs),
		"dataset", "samples", JU(e->cat->nsamples), "bytes", JU(e->cat->total_bytes),
		"files", JU(e->cat->nfiles), "format", jtext(e->cat->fmt->name),
		"cache", cache_json(e),
		"io", "threads", JU(e->cfg->prefetch.io_threads), "pending", JU(iopool_pending(&e->tasks.pool)),
		"placement", jtext(e->self.pin_desc),
		"topology", jtext(e->self.topo_desc), "sources", stats_sources_json(&e->st),
		"step_ms", jreal(e->st.step_s * 1e3, 3));
	json_t *tr = must(json_array());
	for (uint32_t r = 0; e->shape_ready && r < e->world; r++)
		if (e->tr[r].known)
			json_array_append_new(tr, must(trainer_json(e, &e->tr[r])));
	json_object_set_new(must(root), "trainers", tr);
	json_object_set_new(root, "transform", must(xfs_status_json(e)));
	if (e->shape_ready)
		json_object_set_new(root, "resume", must(json_pack(
			"{sI sI sb sI sI}", "epoch", JU(e->rs.epoch), "step", JU(e->rs.step),
			"elastic", e->rs.elastic, "elastic_batches", JU(e->tl.nb),
			"record_bytes", JU(e->plan_rec_len))));
	json_object_set_new(root, "coalescing", coalescing_json(e));
	json_object_set_new(root, "pacing", must(json_pack("{sb sI}", "on", e->cfg->prefetch.pace,
							   "deferred", JU(e->pf.paced))));
	stats_epochs_json(&e->st, root, max_epochs, e->cfg->job.epochs);
	return root;
}

static char *dump(json_t *root)
{
	char *text = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(15));
	json_decref(root);
	if (!text)
		jout_oom();
	return text;
}

char *engine_status_json(struct engine *e, uint64_t max_epochs)
{
	return dump(status_json(e, max_epochs));
}

void engine_write_stats(struct engine *e)
{
	if (!e->cfg->daemon.stats_file || !*e->cfg->daemon.stats_file)
		return;
	/* the status plus the per-step series: [global batch, done at, summed wait] */
	json_t *root = status_json(e, 0);
	stats_steps_json(&e->st, root);
	char *json = dump(root);
	char path[4096];
	int rc = node_path(path, sizeof(path), e->cfg->daemon.stats_file, e->node);
	if (rc == 0)
		rc = write_file_atomic(path, json, strlen(json));
	else
		str_copy(path, sizeof(path), e->cfg->daemon.stats_file);
	if (rc != 0)
		log_warn("cannot write the stats file %s: %s", path, strerror(-rc));
	else
		log_info("statistics written to %s", path);
	free(json);
}

/* One configuration value as JSON: its kind's type (integers past
 * int64 stay text, as written). */
static json_t *config_value(const struct config_item *it)
{
	char *end;
	errno = 0;
	if (it->kind == 'u') {
		unsigned long long v = strtoull(it->value, &end, 10);
		if (errno == 0 && !*end && v <= INT64_MAX)
			return json_integer((json_int_t)v);
	} else if (it->kind == 'd') {
		double v = strtod(it->value, &end);
		if (errno == 0 && !*end && isfinite(v))
			return json_real(v);
	} else if (it->kind == 'b') {
		return json_boolean(strcmp(it->value, "true") == 0);
	}
	return jtext(it->value);
}

/* `seerctl config`: {"config": {section: {key: value}}, "origin":
 * {"section.key": where it was set}, "ini": the same as INI text that
 * seerd -c reads back}. */
char *engine_config_json(const struct seer_config *cfg)
{
	json_t *conf = must(json_object()), *origin = must(json_object());
	struct config_item it;
	for (size_t i = 0; config_item(cfg, i, &it); i++) {
		json_t *sec = json_object_get(conf, it.section);
		if (!sec)
			json_object_set_new(conf, it.section, sec = must(json_object()));
		char key[160];
		snprintf(key, sizeof(key), "%s.%s", it.section, it.name);
		json_object_set_new(sec, it.name, must(config_value(&it)));
		json_object_set_new(origin, key, jtext(it.origin));
	}
	char *ini = config_dump(cfg);
	json_t *root = json_pack("{so so so}", "config", conf, "origin", origin, "ini", jtext(ini));
	free(ini);
	return dump(must(root));
}

/* A small JSON reply ({"ok": true, "state": ...}). */
char *engine_ack_json(const char *state)
{
	return dump(must(json_pack("{sb ss}", "ok", 1, "state", state)));
}
