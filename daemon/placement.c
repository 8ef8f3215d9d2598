/* Placement glue: the job's shape, the plan (src/plan.c, and under
 * cache.policy = nopfs src/plan_nopfs.c) and what routing reads of it.
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
 * with, is fatal for the job (engine_fatal); out of memory aborts. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/util.h"
#include "engine_int.h"
#include "seer.h"

static bool place_peer_ok(void *ctx, uint32_t node)
{
	const struct engine *e = ctx;
	return !net_peer_suspect(e->net, node);
}

/* What tier routing (route.h) reads of the engine, as it is now. */
struct route_view place_view(const struct engine *e)
{
	return (struct route_view){
		.node = e->node, .nsamples = e->cat->nsamples, .tier = e->plan.tier,
		.owner = e->plan.owner, .nvme_ok = e->nvme_ok, .np = e->nopfs ? &e->np : NULL,
		.local_idx = e->local_idx, .peer_ok = e->net ? place_peer_ok : NULL,
		.peer_ctx = (void *)e,
	};
}

bool place_local_ram(const struct engine *e, uint32_t s)
{
	struct route_view v = place_view(e);
	return route_local_ram(&v, s);
}

bool place_local_nvme(const struct engine *e, uint32_t s)
{
	struct route_view v = place_view(e);
	return route_local_nvme(&v, s);
}

/* cache.policy = nopfs: the private copies (src/plan_nopfs.c) and their
 * cache states, after the samples' */
static void np_build(struct engine *e)
{
	if (plan_nopfs_build(&e->np, e->cat, &e->smp, &e->sh, e->local_ranks, e->nlocal,
			     e->first_epoch * e->sh.bpe, e->end, e->cache_cap) != 0) {
		log_error("out of memory placing the nopfs copies");
		abort();
	}
	uint64_t n = e->cat->nsamples;
	e->local_cached_bytes += e->np.bytes;
	e->cstate = xrealloc((void *)e->cstate, (n + e->np.nkeys) * sizeof(uint32_t));
	memset((void *)(e->cstate + n), 0, e->np.nkeys * sizeof(uint32_t));
	e->cache_planned = e->np.nkeys;
}

/* What the plan gives this node, and the PFS traffic it promises. */
static void log_plan(const struct engine *e, uint64_t t0)
{
	if (e->nopfs)
		log_info("cache.policy = nopfs: %u private copies in %u trainer shares of %llu bytes",
			 e->np.nkeys, e->nlocal,
			 (unsigned long long)(e->cache_cap / MAX(e->nlocal, 1u)));
	char a[32], b[32], c[32];
	uint64_t D = e->cat->total_bytes, C = MIN(e->plan.cached_bytes, D), E = e->cfg->epochs;
	char d[32];
	log_info("plan: %llu of %llu samples (%s of %s) cached on %u node(s), %llu here (%s, "
		 "cap %s) in %.2f s; optimal PFS reads over %llu epochs: %.2fx the dataset",
		 (unsigned long long)e->plan.cached_samples, (unsigned long long)e->cat->nsamples,
		 fmt_size(a, sizeof(a), e->plan.cached_bytes), fmt_size(b, sizeof(b), D), e->nnodes,
		 (unsigned long long)e->cache_planned, fmt_size(d, sizeof(d), e->local_cached_bytes),
		 fmt_size(c, sizeof(c), e->cache_cap), (double)(now_ns() - t0) / 1e9,
		 (unsigned long long)E,
		 ((double)D + (double)(D - C) * (double)(E - e->first_epoch - 1)) / (double)D);
}

void place_plan(struct engine *e)
{
	uint64_t t0 = now_ns();
	struct plan_cap none[e->nnodes];
	memset(none, 0, sizeof(none));
	/* nopfs: the node-wide plan caches nothing; np_build places the copies.
	 * Coalesced reads: packed files cached whole (src/plan_group.c) */
	int (*build)(struct plan *, const struct catalog *, const struct smp_shape *, uint64_t,
		     const uint32_t *, uint32_t, const struct plan_cap *) =
		e->coalesce && !e->nopfs ? plan_build_files : plan_build;
	if (build(&e->plan, e->cat, &e->sh, e->first_epoch, e->rank_node, e->nnodes,
		  e->nopfs ? none : e->caps) != 0) {
		log_error("out of memory building the placement plan");
		abort();
	}
	if (e->nopfs)
		np_build(e);
	e->plan_ready = true;
	e->t_plan = now_s();
	struct route_view v = place_view(e);
	for (uint64_t s = 0; s < e->cat->nsamples; s++) {
		if (route_local_ram(&v, (uint32_t)s)) {
			e->cache_planned++;
			e->local_cached_bytes += e->cat->samples[s].length;
		} else if (route_local_nvme(&v, (uint32_t)s)) {
			e->nvme_planned++;
			e->local_cached_bytes += e->cat->samples[s].length;
		}
	}
	/* the network thread may now look samples up */
	atomic_store_explicit(&e->plan_published, true, memory_order_release);
	e->fill_left = e->cache_planned;
	e->fill_g = e->first_epoch * e->sh.bpe;
	log_plan(e, t0);
	arena_split_staging(e);
	peer_replay_early(e);
}

/* Shape and plan once the world size is known (single node: at the first
 * trainer; the multi-node path agrees on the rank map first). */
int place_shape_init(struct engine *e, uint32_t world, char *err, size_t errlen)
{
	const struct seer_config *cfg = e->cfg;
	int rc = smp_shape_init(&e->sh, e->cat->nsamples, cfg->seed, world, (uint32_t)cfg->batch_size,
				cfg->drop_last, cfg->shuffle);
	if (rc != 0) {
		snprintf(err, errlen, "%llu samples over %u trainers with batch_size %llu%s give no "
			 "batch: lower [job] batch_size",
			 (unsigned long long)e->cat->nsamples, world,
			 (unsigned long long)cfg->batch_size, cfg->drop_last ? " and drop_last" : "");
		return SEER_ECONFIG;
	}
	if (smp_cache_init(&e->smp, &e->sh) != 0) {
		snprintf(err, errlen, "out of memory for the epoch permutations");
		return -ENOMEM;
	}
	e->world = world;
	e->end = cfg->epochs * e->sh.bpe;
	e->step_stride = MAX(1ull, (e->end + 99999) / 100000);
	e->nsteps = (e->end + e->step_stride - 1) / e->step_stride;
	e->step_done = xcalloc(e->nsteps, sizeof(double));
	e->step_stall = xcalloc(e->nsteps, sizeof(float));
	e->step_count = xcalloc(e->nsteps, sizeof(uint16_t));
	uint64_t re, rs;
	bool auto_resume = strcmp(cfg->resume, "auto") == 0;
	if (cfg_resume(cfg, &re, &rs) == 0) {
		if (rs >= e->sh.bpe) {
			snprintf(err, errlen, "[job] resume step %llu: an epoch has %llu steps",
				 (unsigned long long)rs, (unsigned long long)e->sh.bpe);
			return SEER_ECONFIG;
		}
		e->default_start = re * e->sh.bpe + rs;
	}
	e->tr = xcalloc(world, sizeof(*e->tr));
	e->rank_node = xcalloc(world, sizeof(uint32_t));
	e->local_ranks = xcalloc(world, sizeof(uint32_t));
	e->local_idx = xcalloc(world, sizeof(uint32_t));
	e->ids = xcalloc(e->sh.batch, sizeof(uint32_t));
	e->keys = xcalloc(e->sh.batch, sizeof(uint32_t));
	e->routes = xcalloc(e->sh.batch, 1);
	for (uint32_t r = 0; r < world; r++) {
		e->tr[r].rank = r;
		e->tr[r].sock = e->tr[r].efd = e->tr[r].pending_sock = -1;
		e->tr[r].out_seg.fd = e->tr[r].in_seg.fd = -1;
		e->tr[r].resume_g = e->default_start;
	}
	if (auto_resume)
		resume_load(e);
	uint32_t ns = 4;
	while (ns < e->cfg->lookahead + 4)
		ns *= 2;
	e->nslots = ns;
	e->shape_ready = true;
	if (e->nnodes == 1) {
		/* every rank is local; several nodes plan once the map is agreed */
		e->nlocal = world;
		for (uint32_t r = 0; r < world; r++)
			e->local_ranks[r] = e->local_idx[r] = r;
		e->first_epoch = e->default_start / e->sh.bpe;
		place_plan(e);
		if (arena_check_staging(e, err, errlen) != 0)
			return SEER_ECONFIG;
	}
	return 0;
}

/* Undo place_shape_init (and the plan it may have made). */
void place_shape_free(struct engine *e)
{
	free(e->tr);
	free(e->rank_node);
	free(e->local_ranks);
	free(e->local_idx);
	free(e->ids);
	free(e->keys);
	free(e->routes);
	free(e->step_done);
	free(e->step_stall);
	free(e->step_count);
	e->tr = NULL;
	e->rank_node = e->local_ranks = e->local_idx = e->ids = e->keys = NULL;
	e->routes = NULL;
	e->step_done = NULL;
	e->step_stall = NULL;
	e->step_count = NULL;
	plan_nopfs_free(&e->np);
	plan_free(&e->plan);
	if (e->shape_ready)
		smp_cache_free(&e->smp);
	atomic_store(&e->plan_published, false);
	e->plan_ready = false;
	e->shape_ready = false;
	e->world = e->nlocal = 0;
	e->cache_planned = e->local_cached_bytes = e->fill_left = 0;
}

struct plan_cap engine_cap(const struct engine *e)
{
	return (struct plan_cap){ .ram = e->cache_cap, .nvme = e->nvme_ok ? e->nvme_cap : 0,
				  .nvme_align = e->nvme_align };
}

void engine_set_caps(struct engine *e, const struct plan_cap *caps)
{
	memcpy(e->caps, caps, e->nnodes * sizeof(*caps));
}

bool engine_roll(struct engine *e, uint32_t *world, uint32_t **ranks, uint32_t *n)
{
	if (!e->roll_dirty || e->plan_ready)
		return false;
	e->roll_dirty = false;
	*world = e->world;
	*ranks = xcalloc(e->world, sizeof(uint32_t));
	*n = 0;
	for (uint32_t r = 0; r < e->world; r++)
		if (e->tr[r].known)
			(*ranks)[(*n)++] = r;
	return true;
}

int engine_set_map(struct engine *e, uint32_t world, const uint32_t *rank_node)
{
	char err[SEER_ERRMSG_MAX];
	if (!e->shape_ready && place_shape_init(e, world, err, sizeof(err)) != 0) {
		str_copy(e->fatal, sizeof(e->fatal), err);
		return -EINVAL;
	}
	if (world != e->world) {
		snprintf(e->fatal, sizeof(e->fatal), "the job's world size is %u but trainers here "
			 "said %u", world, e->world);
		return -EINVAL;
	}
	memcpy(e->rank_node, rank_node, world * sizeof(uint32_t));
	e->nlocal = 0;
	uint64_t start = UINT64_MAX;
	for (uint32_t r = 0; r < world; r++) {
		if (rank_node[r] == e->node) {
			e->local_idx[r] = e->nlocal;
			e->local_ranks[e->nlocal++] = r;
			struct trainer *t = &e->tr[r];
			start = MIN(start, t->attached ? t->next_prep : t->resume_g);
		}
	}
	e->first_epoch = (start == UINT64_MAX ? e->default_start : start) / e->sh.bpe;
	place_plan(e);
	if (arena_check_staging(e, err, sizeof(err)) != 0) {
		str_copy(e->fatal, sizeof(e->fatal), err);
		return -ENOSPC;
	}
	log_info("rank map agreed: %u trainers on %u nodes, %u here", world, e->nnodes, e->nlocal);
	return 0;
}
