/* The running daemon's forecast: this node's bytes by source and time per
 * epoch (src/plan/forecast.h, "one node's forecast"), with the rates the daemon
 * has measured, against what each epoch actually did.
 *
 * Owns struct fcast (fcast.h; e->fc): the forecast thread and its tally: once the plan and the
 * replica set exist (place_plan), a thread of its own counts this node's
 * bytes per epoch (forecast_tally_node: O(epochs x samples) time, one epoch order
 * of memory) so the dispatcher never waits for it; it reads only what the
 * plan made (plan, replica set, catalog lengths, shape, rank map,
 * capacities: none changes until fcast_stop joins it) and writes only
 * e->fc.tally, published by the release store of e->fc.ready. Everything else
 * here runs on the dispatcher: at the start of each epoch the forecast for
 * it, with the rates measured so far, is kept in the epoch's statistics
 * (fcast_note), and `seerctl forecast` gets every epoch's forecast with the
 * current rates (engine_forecast_json).
 *
 * Measured rates (stats.h: e->st.src, e->st.compute_s): compute per step is
 * a trainer's time between two releases less what it waited for the batch;
 * a source's bandwidth is io_threads x the bytes per second of one read
 * (Little's law with the pool's reads in flight); the PFS's aggregate is
 * that times the nodes (every node reads alike). A source not read yet
 * drops its term. Failure: no thread or no memory for the tally: no
 * forecast ("ready": false, said once in the log); out of memory for the
 * JSON aborts (the daemon's rule). */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/util/util.h"
#include "engine_int.h"
#include "jout.h"

static void *tally_main(void *arg)
{
	struct engine *e = arg;
	e->fc.rc = forecast_tally_node(&e->fc.tally, &e->plan, e->repl.on ? &e->repl.set : NULL, e->cat, NULL,
				  &e->sh, e->pl.first_epoch, e->cfg->job.epochs - e->pl.first_epoch,
				  e->rank_node, e->node, e->pl.caps);
	atomic_store_explicit(&e->fc.ready, true, memory_order_release);
	return NULL;
}

void fcast_start(struct engine *e)
{
	if (e->fc.started || e->nopfs || e->pl.first_epoch >= e->cfg->job.epochs)
		return;
	atomic_store(&e->fc.ready, false);
	int rc = pthread_create(&e->fc.thread, NULL, tally_main, e);
	if (rc != 0) {
		log_warn("no forecast: cannot start its thread (%s)", strerror(rc));
		return;
	}
	e->fc.started = true;
}

void fcast_stop(struct engine *e)
{
	if (!e->fc.started)
		return;
	pthread_join(e->fc.thread, NULL);
	e->fc.started = false;
	atomic_store(&e->fc.ready, false);
	forecast_tally_free(&e->fc.tally);
}

/* The tally, once the thread is done and it worked. */
static const struct forecast_tally *tally(struct engine *e)
{
	if (!e->fc.started || !atomic_load_explicit(&e->fc.ready, memory_order_acquire))
		return NULL;
	if (e->fc.rc != 0) {
		if (!e->fc.warned)
			log_warn("no forecast: tallying this node's bytes failed (%s)",
				 strerror(-e->fc.rc));
		e->fc.warned = true;
		return NULL;
	}
	return &e->fc.tally;
}

static double src_bw(const struct engine *e, int src)
{
	const struct src_est *x = &e->st.src[src];
	return x->n ? x->bps * (double)e->cfg->prefetch.io_threads : 0;
}

static void rates(const struct engine *e, struct forecast_rates *r)
{
	*r = (struct forecast_rates){
		.compute_s = e->st.compute_n ? e->st.compute_s : 0,
		.pfs_bw = src_bw(e, SRC_PFS) * e->nnodes,
		.net_bw = src_bw(e, SRC_PEER),
		.nvme_bw = src_bw(e, SRC_NVME),
	};
}

/* Every epoch's forecast with the rates measured now (t->epochs entries,
 * malloc'd), or NULL. */
static struct forecast_node_epoch *forecast(struct engine *e, const struct forecast_tally *t)
{
	struct forecast_rates r;
	rates(e, &r);
	struct forecast_node_epoch *out = xcalloc(t->epochs, sizeof(*out));
	if (forecast_node_forecast(t, &r, out) != 0) {
		free(out);
		return NULL;
	}
	return out;
}

void fcast_note(struct engine *e)
{
	uint64_t ep = e->st.epochs_done;
	if (ep >= e->cfg->job.epochs || ep < e->pl.first_epoch ||
	    (ep < e->st.nes && e->st.es[ep].fc_set))
		return;
	const struct forecast_tally *t = tally(e);
	if (!t)
		return;
	struct forecast_node_epoch *f = forecast(e, t);
	if (!f)
		return;
	const struct forecast_node_epoch *o = &f[ep - e->pl.first_epoch];
	struct epoch_stats *s = stats_epoch(e, ep);
	s->fc_set = true;
	s->fc_timed = e->st.compute_n || e->st.src[SRC_PFS].n;
	s->fc_time = o->time;
	s->fc_lb = o->lb;
	s->fc_bound = (uint8_t)o->bound;
	s->fc_ram = o->b.ram;
	s->fc_nvme = o->b.nvme;
	s->fc_peer = o->b.peer_in + o->b.fill_in;
	s->fc_pfs = o->b.pfs + o->b.pfs_load;
	free(f);
}

/* ---- JSON -------------------------------------------------------------------------- */

#define JU(x) ((json_int_t)(x))

#define must jout_must
#define jreal jout_real

static json_t *actual_json(const struct engine *e, uint64_t ep)
{
	if (ep >= e->st.nes_used || e->st.es[ep].samples == 0)
		return json_null();
	const struct epoch_stats *s = &e->st.es[ep];
	double t0 = ep > 0 && e->st.es[ep - 1].t_done > 0 ? e->st.es[ep - 1].t_done : e->st.t_plan;
	return must(json_pack("{so sI sI sI sI sI}", "seconds",
			      s->t_done > 0 ? jreal(s->t_done - t0, 6) : json_null(), "ram_bytes",
			      JU(s->ram_bytes), "nvme_bytes", JU(s->nvme_bytes), "peer_bytes",
			      JU(s->peer_bytes), "pfs_bytes", JU(s->pfs_bytes), "replica_fill_bytes",
			      JU(s->fill_bytes)));
}

static json_t *epoch_json(const struct engine *e, uint64_t ep, const struct forecast_node_epoch *o)
{
	const struct forecast_bytes *b = &o->b;
	json_t *terms = must(json_object());
	for (int k = 0; k < FORECAST_NTERMS; k++)
		json_object_set_new(terms, forecast_term_name((enum forecast_term)k), must(jreal(o->t[k], 6)));
	return must(json_pack("{sI sI sI sI sI sI sI sI sI sI so so ss so so}", "epoch", JU(ep),
			      "ram_bytes", JU(b->ram), "nvme_bytes", JU(b->nvme), "replica_bytes",
			      JU(b->repl), "peer_bytes", JU(b->peer_in), "fill_bytes", JU(b->fill_in),
			      "sent_bytes", JU(b->peer_out + b->fill_out), "pfs_bytes",
			      JU(b->pfs + b->pfs_load), "pfs_cluster_bytes", JU(o->pfs_all),
			      "samples", JU(b->reads), "terms", terms, "seconds",
			      must(jreal(o->time, 6)), "bound", forecast_term_name(o->bound), "lower_bound",
			      must(jreal(o->lb, 6)), "actual", actual_json(e, ep)));
}

/* The measured rates, and where they come from. */
static json_t *rates_json(const struct engine *e, const struct forecast_rates *r)
{
	return must(json_pack("{so so so so sI sI sI sI sI}", "compute_s", jreal(r->compute_s, 6),
			      "pfs_bytes_per_s", jreal(r->pfs_bw, 0), "net_bytes_per_s",
			      jreal(r->net_bw, 0), "nvme_bytes_per_s", jreal(r->nvme_bw, 0),
			      "io_threads", JU(e->cfg->prefetch.io_threads), "steps", JU(e->st.compute_n),
			      "pfs_reads", JU(e->st.src[SRC_PFS].n), "peer_reads", JU(e->st.src[SRC_PEER].n),
			      "nvme_reads", JU(e->st.src[SRC_NVME].n)));
}

/* The same job and rates for seer-plan, which also searches the smallest
 * RAM and NVMe per node (every node's whole replay: a tool's job, not a
 * daemon's). Samples of the mean size; trainers spread evenly. */
static json_t *seer_plan_cmd(const struct engine *e, const struct forecast_rates *r)
{
	char cmd[1024];
	int n = snprintf(cmd, sizeof(cmd),
			 "seer-plan --samples %llu --sample-size %llu --nodes %u "
			 "--trainers-per-node %u --epochs %llu --batch %u --seed %llu%s --ram %llu "
			 "--nvme %llu --replicas %s --fill %s --forecast --search",
			 (unsigned long long)e->cat->nsamples,
			 (unsigned long long)(e->cat->total_bytes / MAX(e->cat->nsamples, 1ull)),
			 e->nnodes, MAX(1u, e->world / e->nnodes),
			 (unsigned long long)(e->cfg->job.epochs - e->pl.first_epoch), e->sh.batch,
			 (unsigned long long)e->cfg->job.seed, e->cfg->job.drop_last ? " --drop-last" : "",
			 (unsigned long long)e->ar.cache_cap, (unsigned long long)nvme_cap(e->nvme),
			 e->repl.on ? "on" : "off", e->repl.from_pfs ? "pfs" : "peer");
	if (r->pfs_bw > 0 && n < (int)sizeof(cmd))
		n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " --pfs-bw %.0f", r->pfs_bw);
	if (r->net_bw > 0 && n < (int)sizeof(cmd))
		n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " --net-bw %.0f", r->net_bw);
	if (r->nvme_bw > 0 && n < (int)sizeof(cmd))
		n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " --nvme-bw %.0f", r->nvme_bw);
	if (r->compute_s > 0 && n < (int)sizeof(cmd))
		snprintf(cmd + n, sizeof(cmd) - (size_t)n, " --compute-s %.6f", r->compute_s);
	return must(json_string(cmd));
}

char *engine_forecast_json(struct engine *e)
{
	const struct forecast_tally *t = e->plan_ready ? tally(e) : NULL;
	struct forecast_node_epoch *f = t ? forecast(e, t) : NULL;
	json_t *root = must(json_pack("{sI sI sb}", "node", JU(e->node), "nodes", JU(e->nnodes),
				      "ready", f != NULL));
	if (!f) {
		json_object_set_new(root, "why", must(json_string(
			!e->plan_ready ? "no plan yet: the trainers have not all attached"
			: e->nopfs ? "cache.policy = nopfs has no forecast"
			: "this node's bytes are still being counted")));
	} else {
		struct forecast_rates r;
		rates(e, &r);
		json_t *eps = must(json_array());
		double time = 0, lb = 0;
		for (uint64_t i = 0; i < t->epochs; i++) {
			json_array_append_new(eps, epoch_json(e, t->first_epoch + i, &f[i]));
			time += f[i].time;
			lb += f[i].lb;
		}
		json_object_set_new(root, "first_epoch", must(json_integer(JU(t->first_epoch))));
		json_object_set_new(root, "rates", rates_json(e, &r));
		json_object_set_new(root, "replicas", must(json_pack(
			"{sb sI ss}", "enabled", e->repl.on, "bytes", JU(t->repl_bytes),
			"fill_source", e->repl.from_pfs ? "pfs" : "peer")));
		json_object_set_new(root, "epochs", eps);
		json_object_set_new(root, "seconds", must(jreal(time, 6)));
		json_object_set_new(root, "lower_bound", must(jreal(lb, 6)));
		json_object_set_new(root, "seer_plan", seer_plan_cmd(e, &r));
		free(f);
	}
	char *text = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(15));
	json_decref(root);
	if (!text) {
		log_error("out of memory writing the forecast as JSON");
		abort();
	}
	return text;
}
