/* Placement glue: the job's shape, the plan (src/plan/plan.c, and under
 * cache.policy = nopfs src/plan/plan_nopfs.c), this node's replica set
 * (plan_node_build, cache.replicas = on, several nodes) and what routing
 * reads of them.
 *
 * Owns the shape (sampler, world, end of job, batch slots per trainer, the
 * batch scratch), the rank -> node map and this node's local ranks, the
 * per-node capacities, and the moment the plan is published to the network
 * thread (the release store of plan_published, after which the plan does
 * not change). Single node: the plan is made when the first trainer gives
 * the world size; several nodes: once the daemons agreed the rank map
 * (cluster.c). Dispatcher thread only. Failure: a shape that gives no batch
 * or a resume step past the epoch refuses the trainer (SEER_ECONFIG);
 * staging too small for the plan, or a world size other nodes disagree
 * with, is fatal for the job (engine_fatal); out of memory aborts. A world
 * size above the dataset's samples, or whose staging share is too small, is
 * refused before anything is sized by it. */
#define _GNU_SOURCE
/* batches a trainer may declare it holds at once without a [job] max_held
 * that large: 16 TorchLoader workers x prefetch 2 + the batch in hand is 33 */
#define HELD_DECLARED 64
#define HANDLE_SLOTS 4096 /* the most a client takes (config_finish) */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/util/util.h"
#include "cluster.h"
#include "engine_int.h"
#include "seer.h"

/* cache.policy = nopfs: the private copies (src/plan/plan_nopfs.c) and their
 * cache states, after the samples' */
static void np_build(struct engine *e)
{
	if (plan_nopfs_build(&e->pl.np, e->cat, &e->pl.smp, &e->sh, &e->rs, &e->tl, e->pl.local_ranks,
			     e->pl.nlocal, sampler_tl_g(&e->tl, e->pl.first_epoch, 0), e->pl.end,
			     e->ar.cache_cap) != 0) {
		log_error("out of memory placing the nopfs copies");
		abort();
	}
	uint64_t n = e->cat->nsamples;
	e->pl.local_cached_bytes += e->pl.np.bytes;
	e->cstate = xrealloc((void *)e->cstate, (n + e->pl.np.nkeys) * sizeof(uint32_t));
	memset((void *)(e->cstate + n), 0, e->pl.np.nkeys * sizeof(uint32_t));
	e->pl.cache_planned = e->pl.np.nkeys;
}

/* cache.replicas = on with several nodes: the samples this node rereads
 * most, in the RAM and NVMe its owned share leaves (src/plan/plan.h). A job too
 * long for the replica set's 32-bit ticks goes without, said once. */
static void repl_plan(struct engine *e)
{
	e->repl.on = false;
	e->repl.from_pfs = strcmp(e->cfg->cache.replica_fill, "pfs") == 0;
	if (!e->cfg->cache.replicas || e->nopfs || e->nnodes < 2 || e->pl.first_epoch + 1 >= e->cfg->job.epochs)
		return;
	struct plan_repl_opts ro = {
		.on = true, .fill = e->repl.from_pfs ? PLAN_FILL_PFS : PLAN_FILL_PEER,
	};
	/* transform.cache = decoded: replicas of decoded images, as the owners hold */
	int rc = plan_node_build(&e->repl.set, &e->plan, e->cat, xfs_plan_lengths(e), &e->sh, e->pl.first_epoch,
				 e->cfg->job.epochs - e->pl.first_epoch, e->rank_node, e->node,
				 &e->pl.caps[e->node], &ro, NULL);
	if (rc == -ENOMEM) {
		log_error("out of memory planning this node's replicas");
		abort();
	}
	if (rc != 0) {
		log_warn("no replicas: this node's reads over %llu epochs are too many to plan "
			 "them (%s); one copy per sample", (unsigned long long)e->cfg->job.epochs,
			 strerror(-rc));
		return;
	}
	e->repl.on = true;
	for (uint64_t i = 0; i < e->repl.set.nrepl; i++) {
		if (e->repl.set.tier[i] == PLAN_RAM)
			e->repl.ram_planned++;
		else
			e->repl.nvme_planned++;
	}
	nvme_planned_add(e->nvme, e->repl.nvme_planned);
	e->pl.local_cached_bytes += e->repl.set.repl_bytes;
	repl_init(e);
}

/* What the plan gives this node, and the PFS traffic it promises. */
static void log_plan(const struct engine *e, uint64_t t0)
{
	if (e->nopfs)
		log_info("cache.policy = nopfs: %u private copies in %u trainer shares of %llu bytes",
			 e->pl.np.nkeys, e->pl.nlocal,
			 (unsigned long long)(e->ar.cache_cap / MAX(e->pl.nlocal, 1u)));
	char a[32], b[32], c[32];
	/* in the bytes the caches hold (decoded images with transform.cache = decoded) */
	uint64_t D = xfs_cached_total(e), C = MIN(e->plan.cached_bytes, D), E = e->cfg->job.epochs;
	char d[32];
	log_info("plan: %llu of %llu samples (%s of %s) cached on %u node(s), %llu here (%s, "
		 "cap %s) in %.2f s; optimal PFS reads over %llu epochs: %.2fx the dataset",
		 (unsigned long long)e->plan.cached_samples, (unsigned long long)e->cat->nsamples,
		 fmt_size(a, sizeof(a), e->plan.cached_bytes), fmt_size(b, sizeof(b), D), e->nnodes,
		 (unsigned long long)e->pl.cache_planned,
		 fmt_size(d, sizeof(d), e->pl.local_cached_bytes - (e->repl.on ? e->repl.set.repl_bytes : 0)),
		 fmt_size(c, sizeof(c), e->ar.cache_cap), (double)(now_ns() - t0) / 1e9,
		 (unsigned long long)E,
		 ((double)D + (double)(D - C) * (double)(E - e->pl.first_epoch - 1)) / (double)D);
	if (e->repl.on) {
		char r[32], u[32], v[32];
		log_info("replicas: %llu samples (%s; %llu in RAM, %llu on NVMe) this node rereads, "
			 "filled from %s%s; RAM used %s, NVMe used %s",
			 (unsigned long long)e->repl.set.nrepl, fmt_size(r, sizeof(r), e->repl.set.repl_bytes),
			 (unsigned long long)e->repl.ram_planned,
			 (unsigned long long)e->repl.nvme_planned,
			 e->repl.from_pfs ? "the PFS" : "their owners",
			 e->cfg->cache.replica_fill_rate ? " (rate capped)" : "",
			 fmt_size(u, sizeof(u), e->repl.set.ram_used), fmt_size(v, sizeof(v), e->repl.set.nvme_used));
	}
}

void place_plan(struct engine *e)
{
	uint64_t t0 = now_ns();
	struct plan_cap none[e->nnodes];
	memset(none, 0, sizeof(none));
	/* nopfs: the node-wide plan caches nothing; np_build places the copies.
	 * Coalesced reads: packed files cached whole (src/plan/plan_group.c), unless
	 * the tiers hold decoded images (transform.cache = decoded: planned with
	 * their lengths) or the first epoch is an elastic one (its order of need
	 * is the re-sharded batches'): then sample by sample. */
	const uint64_t *lens = xfs_plan_lengths(e);
	const struct plan_cap *cap = e->nopfs ? none : e->pl.caps;
	bool files = e->ext.coalesce && !e->nopfs && !lens &&
		     !(e->rs.elastic && e->rs.epoch == e->pl.first_epoch);
	if ((files ? plan_build_files(&e->plan, e->cat, &e->sh, e->pl.first_epoch, e->rank_node,
				      e->nnodes, cap)
		   : plan_build_resumed(&e->plan, e->cat, lens, &e->sh, &e->rs, e->pl.first_epoch,
					e->rank_node, e->nnodes, cap)) != 0) {
		log_error("out of memory building the placement plan");
		abort();
	}
	if (e->nopfs)
		np_build(e);
	e->plan_ready = true;
	e->st.t_plan = now_s();
	if (e->ext.probe.reads) {
		/* node 0 read them before the job: counted in its first epoch, so
		 * its PFS bytes equal what the file system served (a new shape's
		 * stats start over and count them again) */
		struct epoch_stats *es = stats_epoch(e, e->pl.first_epoch);
		es->pfs_bytes += e->ext.probe.bytes;
		es->pfs_reads += e->ext.probe.reads;
	}
	struct route_view v = place_view(e);
	for (uint64_t s = 0; s < e->cat->nsamples; s++) {
		if (!route_owned(&v, (uint32_t)s))
			continue;
		if (route_local_ram(&v, (uint32_t)s)) {
			e->pl.cache_planned++;
			e->pl.local_cached_bytes += xfs_src_len(e, (uint32_t)s);
		} else if (route_local_nvme(&v, (uint32_t)s)) {
			nvme_planned_add(e->nvme, 1);
			e->pl.local_cached_bytes += xfs_src_len(e, (uint32_t)s);
		}
	}
	repl_plan(e);
	/* the NVMe file keeps the room this node's plan uses (owned + replicas) */
	nvme_fit(e->nvme, e->repl.on ? e->repl.set.nvme_used : e->plan.nvme_used[e->node]);
	/* the network thread may now look samples up */
	atomic_store_explicit(&e->plan_published, true, memory_order_release);
	e->pf.fill_left = e->pl.cache_planned;
	e->pf.fill_g = sampler_tl_g(&e->tl, e->pl.first_epoch, 0);
	e->pf.fill_r = 0; /* (a shape dropped mid-round left it for another world) */
	log_plan(e, t0);
	arena_split_staging(e);
	peer_replay_early(e);
	fcast_start(e);
}

/* One node: every rank is local, so staging splits world ways. Refuse a
 * share too small before allocating per-rank state or planning (an absurd
 * world size used to cost seconds and hundreds of MB before this check);
 * staging stays unused only when the RAM cache holds the whole dataset. */
static int staging_precheck(struct engine *e, uint32_t world, char *err, size_t errlen)
{
	const struct catalog *cat = e->cat;
	if (e->ar.cache_cap >= ALIGN_UP(cat->total_bytes + cat->nsamples * PLAN_RAM_ALIGN, 4096ull))
		return 0;
	uint32_t nlocal = e->pl.nlocal;
	e->pl.nlocal = world;
	int rc = arena_check_staging(e, err, errlen);
	e->pl.nlocal = nlocal;
	return rc;
}

/* The job's resume plan and each rank's start: the trainer's record, else
 * the saved positions ([job] resume = auto; not on a node that learnt the
 * plan from the map, `rec` then is the map's), else [job] resume = E:S, else
 * the start. */
static int shape_plan(struct engine *e, const struct sampler_record *rec, bool from_map, char *err,
		      size_t errlen)
{
	const struct seer_config *cfg = e->cfg;
	uint64_t re, rs, *starts = NULL;
	struct sampler_record *saved = NULL;
	int rc = 0;
	bool fixed = config_resume(cfg, &re, &rs) == 0, resumed = false;
	if (!rec && !from_map && strcmp(cfg->job.resume, "auto") == 0) {
		rc = resume_load(e, &saved, &starts, err, errlen);
		if (rc < 0)
			return rc;
		resumed = rc > 0;
	}
	rc = jobrec_plan(e, rec ? rec : saved, err, errlen);
	if (saved) {
		sampler_record_free(saved);
		free(saved);
	}
	if (rc < 0) {
		free(starts);
		return rc;
	}
	e->pl.end = sampler_tl_end(&e->tl);
	if (rec || resumed) {
		e->pl.default_start = MIN(sampler_tl_g(&e->tl, e->rs.epoch, e->rs.step), e->pl.end);
	} else if (fixed) {
		if (rs >= e->sh.bpe) {
			snprintf(err, errlen, "[job] resume step %llu: an epoch has %llu steps",
				 (unsigned long long)rs, (unsigned long long)e->sh.bpe);
			free(starts);
			return SEER_ECONFIG;
		}
		e->pl.default_start = re * e->sh.bpe + rs;
	}
	uint64_t lo = UINT64_MAX;
	for (uint32_t r = 0; r < e->world; r++) {
		e->tr[r].resume_g = starts ? MIN(starts[r], e->pl.end) : e->pl.default_start;
		lo = MIN(lo, e->tr[r].resume_g);
	}
	if (starts)
		e->pl.default_start = lo;
	free(starts);
	return 0;
}

/* Shape and plan once the world size is known (single node: at the first
 * trainer, whose checkpoint record `rec` (or NULL) makes the resume plan;
 * several nodes: the map's record when this node had no trainer yet). */
int place_shape_init(struct engine *e, uint32_t world, const struct sampler_record *rec,
		     bool from_map, char *err, size_t errlen)
{
	const struct seer_config *cfg = e->cfg;
	if (world > SEER_MAX_WORLD || world > e->cat->nsamples) {
		/* every rank needs a sample of its own, and memory per rank */
		snprintf(err, errlen, "world size %u is more than %s (%llu): a rank would get no "
			 "sample of its own; check the trainers' world size%s", world,
			 world > e->cat->nsamples ? "the dataset's samples" : "seer serves",
			 (unsigned long long)MIN((uint64_t)SEER_MAX_WORLD, e->cat->nsamples),
			 cfg->job.world_size ? " and [job] world_size" : "");
		return -EINVAL;
	}
	int rc = sampler_shape_init(&e->sh, e->cat->nsamples, cfg->job.seed, world, (uint32_t)cfg->job.batch_size,
				cfg->job.drop_last, cfg->job.shuffle);
	if (rc != 0) {
		snprintf(err, errlen, "%llu samples over %u trainers with batch_size %llu%s give no "
			 "batch: lower [job] batch_size",
			 (unsigned long long)e->cat->nsamples, world,
			 (unsigned long long)cfg->job.batch_size, cfg->job.drop_last ? " and drop_last" : "");
		return SEER_ECONFIG;
	}
	if (e->nnodes == 1 && staging_precheck(e, world, err, errlen) != 0)
		return SEER_ECONFIG; /* before anything is sized by the world */
	if (sampler_cache_init(&e->pl.smp, &e->sh) != 0) {
		snprintf(err, errlen, "out of memory for the epoch permutations");
		return -ENOMEM;
	}
	e->world = world;
	e->tr = xcalloc(world, sizeof(*e->tr));
	e->rank_node = xcalloc(world, sizeof(uint32_t));
	e->pl.local_ranks = xcalloc(world, sizeof(uint32_t));
	e->pl.local_idx = xcalloc(world, sizeof(uint32_t));
	e->pl.ids = xcalloc(e->sh.batch, sizeof(uint32_t));
	e->pl.keys = xcalloc(e->sh.batch, sizeof(uint32_t));
	e->pl.routes = xcalloc(e->sh.batch, 1);
	for (uint32_t r = 0; r < world; r++) {
		e->tr[r].rank = r;
		e->tr[r].sock = e->tr[r].efd = e->tr[r].pending_sock = -1;
		e->tr[r].out_seg.fd = e->tr[r].in_seg.fd = -1;
	}
	e->shape_ready = true; /* place_shape_free undoes all of it from here on */
	if ((rc = shape_plan(e, rec, from_map, err, errlen)) != 0)
		return rc;
	stats_steps_init(&e->st, e->pl.end);
	/* slots for the batches a trainer holds, the lookahead beyond them and
	 * two in reclaim (config_finish keeps this within a client's 4096); a
	 * trainer may declare more held batches at connect (a TorchLoader's
	 * workers x prefetch + 1): room for HELD_DECLARED of them by default */
	uint64_t room = MAX(e->cfg->job.max_held, (uint64_t)HELD_DECLARED);
	if (e->cfg->prefetch.lookahead + room + 2 > HANDLE_SLOTS)
		room = MAX(e->cfg->job.max_held, HANDLE_SLOTS - 2 - e->cfg->prefetch.lookahead);
	uint32_t ns = 4;
	while (ns < e->cfg->prefetch.lookahead + room + 2)
		ns *= 2;
	e->nslots = ns;
	if (e->nnodes == 1) {
		/* every rank is local; several nodes plan once the map is agreed */
		e->pl.nlocal = world;
		for (uint32_t r = 0; r < world; r++)
			e->pl.local_ranks[r] = e->pl.local_idx[r] = r;
		uint64_t step;
		jobrec_pos(e, MIN(e->pl.default_start, e->pl.end ? e->pl.end - 1 : 0), &e->pl.first_epoch, &step);
		place_plan(e);
		if (arena_check_staging(e, err, errlen) != 0)
			return SEER_ECONFIG;
		resume_begin(e); /* only for a run that can serve: the last run's files stay */
	}
	return 0;
}

/* Undo place_shape_init (and the plan it may have made). */
void place_shape_free(struct engine *e)
{
	resume_end(e, false); /* before the trainers it reads go */
	fcast_stop(e); /* its thread reads the plan */
	free(e->tr);
	free(e->rank_node);
	free(e->pl.local_ranks);
	free(e->pl.local_idx);
	free(e->pl.ids);
	free(e->pl.keys);
	free(e->pl.routes);
	e->tr = NULL;
	e->rank_node = e->pl.local_ranks = e->pl.local_idx = e->pl.ids = e->pl.keys = NULL;
	e->pl.routes = NULL;
	stats_steps_free(&e->st);
	plan_nopfs_free(&e->pl.np);
	repl_free(e);
	plan_free(&e->plan);
	jobrec_free(e);
	sampler_cache_free(&e->pl.smp); /* also after a failed init */
	atomic_store(&e->plan_published, false);
	e->plan_ready = false;
	e->shape_ready = false;
	e->world = e->pl.nlocal = 0;
	e->pl.cache_planned = e->pl.local_cached_bytes = e->pf.fill_left = 0;
	nvme_plan_reset(e->nvme);
}

int place_can_reshape(const struct engine *e, char *why, size_t whylen)
{
	if (e->cfg->job.world_size) {
		snprintf(why, whylen, "set by [job] world_size in seerd's configuration");
		return -EPERM;
	}
	if (e->nnodes > 1) {
		snprintf(why, whylen, "the job's %u nodes agreed on it", e->nnodes);
		return -EPERM;
	}
	for (uint32_t r = 0; r < e->world; r++) {
		const struct trainer *t = &e->tr[r];
		if (t->attached || t->resetting || t->pending_sock >= 0) {
			snprintf(why, whylen, "rank %u (pid %d) of those is %s", r, (int)t->pid,
				 t->attached ? "attached" : "still leaving");
			return -EBUSY;
		}
	}
	uint64_t free_tasks = 0;
	for (const struct etask *t = e->tasks.free; t; t = t->free_next)
		free_tasks++;
	if (free_tasks != (uint64_t)e->tasks.nchunks * TASK_CHUNK) {
		snprintf(why, whylen, "%llu of their reads are still in flight: try again in a moment",
			 (unsigned long long)((uint64_t)e->tasks.nchunks * TASK_CHUNK - free_tasks));
		return -EBUSY;
	}
	return 0;
}

void place_drop_shape(struct engine *e)
{
	uint32_t known = 0;
	for (uint32_t r = 0; r < e->world; r++)
		known += e->tr[r].known;
	log_warn("the job's world size of %u is dropped (%u of its ranks connected, none is "
		 "attached): their positions, the plan, the RAM and NVMe copies and the statistics "
		 "start over", e->world, known);
	place_shape_free(e);
	/* nothing is in flight (place_can_reshape): every key is ABSENT or READY */
	memset((void *)e->cstate, 0, e->cat->nsamples * sizeof(uint32_t));
	e->pl.cache_loaded = e->pl.cache_loaded_bytes = 0;
	nvme_forget(e->nvme);
	stats_forget(&e->st);
	e->pl.default_start = 0;
}

struct plan_cap engine_cap(const struct engine *e)
{
	return (struct plan_cap){ .ram = e->ar.cache_cap, .nvme = nvme_cap(e->nvme),
				  .nvme_align = nvme_align(e->nvme) };
}

void engine_set_caps(struct engine *e, const struct plan_cap *caps)
{
	memcpy(e->pl.caps, caps, e->nnodes * sizeof(*caps));
}

bool engine_roll(struct engine *e, struct cluster_plan *plan, uint32_t **ranks, uint32_t *n)
{
	if (!e->roll_dirty || e->plan_ready)
		return false;
	e->roll_dirty = false;
	*ranks = xcalloc(e->world, sizeof(uint32_t));
	*n = 0;
	uint64_t start = e->pl.end;
	for (uint32_t r = 0; r < e->world; r++) {
		const struct trainer *t = &e->tr[r];
		if (!t->known)
			continue;
		(*ranks)[(*n)++] = r;
		start = MIN(start, t->attached ? t->next_prep : t->resume_g);
	}
	*plan = (struct cluster_plan){ .world = e->world, .key = e->plan_key, .start = start,
				       .rec_len = (uint32_t)e->plan_rec_len, .rec = e->plan_rec };
	return true;
}

/* The map's plan on a node that has one already: the same (node 0 checked
 * every roll's key; this catches a node whose plan changed since). */
static int map_plan(struct engine *e, const struct cluster_plan *plan)
{
	char err[SEER_ERRMSG_MAX];
	if (!e->shape_ready) {
		/* no trainer here yet: the plan is the map's */
		struct sampler_record rec;
		bool have = plan->rec_len > 0;
		if (have && jobrec_decode(e, plan->rec, plan->rec_len, &rec, err, sizeof(err)) != 0) {
			snprintf(e->self.fatal, sizeof(e->self.fatal), "the job's resume plan: %.200s", err);
			return -EINVAL;
		}
		int rc = place_shape_init(e, plan->world, have ? &rec : NULL, true, err, sizeof(err));
		if (have)
			sampler_record_free(&rec);
		if (rc != 0) {
			str_copy(e->self.fatal, sizeof(e->self.fatal), err);
			return -EINVAL;
		}
	}
	if (plan->world != e->world) {
		snprintf(e->self.fatal, sizeof(e->self.fatal), "the job's world size is %u but trainers here "
			 "said %u", plan->world, e->world);
		return -EINVAL;
	}
	if (plan->key != e->plan_key) {
		snprintf(e->self.fatal, sizeof(e->self.fatal), "this node's resume plan (%08x) is not the "
			 "job's (%08x): give every rank the same checkpoint record", e->plan_key,
			 plan->key);
		return -EINVAL;
	}
	return 0;
}

int engine_set_map(struct engine *e, const struct cluster_plan *plan, const uint32_t *rank_node)
{
	char err[SEER_ERRMSG_MAX];
	int rc = map_plan(e, plan);
	if (rc != 0)
		return rc;
	uint32_t world = e->world;
	memcpy(e->rank_node, rank_node, world * sizeof(uint32_t));
	e->pl.nlocal = 0;
	for (uint32_t r = 0; r < world; r++) {
		if (rank_node[r] == e->node) {
			e->pl.local_idx[r] = e->pl.nlocal;
			e->pl.local_ranks[e->pl.nlocal++] = r;
		}
	}
	/* every node plans from the job's earliest batch, so all plan alike */
	uint64_t step;
	jobrec_pos(e, MIN(plan->start, e->pl.end ? e->pl.end - 1 : 0), &e->pl.first_epoch, &step);
	e->resume.run_id = plan->run;
	place_plan(e);
	if (arena_check_staging(e, err, sizeof(err)) != 0) {
		str_copy(e->self.fatal, sizeof(e->self.fatal), err);
		return -ENOSPC;
	}
	resume_begin(e);
	log_info("rank map agreed: %u trainers on %u nodes, %u here", world, e->nnodes, e->pl.nlocal);
	/* a trainer's declared batches were checked at connect against an even
	 * spread of the ranks; an uneven map can leave it a smaller share */
	for (uint32_t i = 0; i < e->pl.nlocal; i++) {
		const struct trainer *t = &e->tr[e->pl.local_ranks[i]];
		if ((t->attached || t->pending_sock >= 0) && t->held > e->cfg->job.max_held &&
		    arena_check_held(e, t->held, err, sizeof(err)) != 0)
			log_warn("rank %u: %s (it was accepted at connect, before the rank map put "
				 "%u trainers on this node: holding that many, it may get -EDEADLK)",
				 t->rank, err, e->pl.nlocal);
	}
	return 0;
}
