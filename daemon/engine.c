#define _GNU_SOURCE
#include "engine_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <linux/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xxhash.h>

#include "../src/ctrl.h"
#include "../src/iopool.h"
#include "../src/net.h"
#include "../src/plan.h"
#include "../src/plan_nopfs.h"
#include "../src/ring.h"
#include "../src/sampler.h"
#include "../src/shm.h"
#include "../src/topo.h"
#include "../src/util.h"
#include "route.h"
#include "seer.h"
#include "staging.h"

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

/* Staging bytes a sample of `len` bytes reserves: NVMe transfers need
 * aligned buffers and lengths (O_DIRECT), hence the slack. */
uint64_t arena_stage_bytes(const struct engine *e, uint64_t len, bool nvme)
{
	return nvme ? ALIGN_UP(len, (uint64_t)e->nvme_align) + e->nvme_align
		    : ALIGN_UP(len, (uint64_t)PLAN_RAM_ALIGN);
}

uint64_t arena_key_off(const struct engine *e, uint32_t key)
{
	uint64_t n = e->cat->nsamples;
	return e->cache_base + (key < n ? e->plan.off[key] : e->np.off[key - n]);
}



void engine_ep_add(struct engine *e, int fd, uint64_t tag)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = tag };
	if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
		log_error("epoll_ctl add: %s", strerror(errno));
}

void engine_ep_del(struct engine *e, int fd)
{
	epoll_ctl(e->epfd, EPOLL_CTL_DEL, fd, NULL);
}

/* ---- the plan ------------------------------------------------------------------------ */

static int arena_check_staging(struct engine *e, char *err, size_t errlen)
{
	uint64_t per = e->stage_cap / MAX(e->nlocal, 1u);
	per &= ~(NVME_ALIGN - 1);
	uint64_t one = arena_stage_bytes(e, e->cat->max_len, e->nvme_ok);
	uint64_t need = (uint64_t)e->sh.batch * one;
	if (e->plan_ready && e->plan.cached_samples == e->cat->nsamples && e->plan.nnodes == 1)
		return 0; /* every sample lives in the RAM cache: staging stays unused */
	if (per < need) {
		char a[32], b[32], c[32], d[32];
		snprintf(err, errlen,
			 "[cache] staging = %s gives each of the node's %u trainers %s, less than one "
			 "batch of the largest samples (%u x %s): set staging to at least %s",
			 fmt_size(a, sizeof(a), e->stage_cap), e->nlocal, fmt_size(b, sizeof(b), per),
			 e->sh.batch, fmt_size(c, sizeof(c), e->cat->max_len),
			 fmt_size(d, sizeof(d), need * e->nlocal));
		return -ENOSPC;
	}
	return 0;
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

void place_plan(struct engine *e)
{
	uint64_t t0 = now_ns();
	struct plan_cap none[e->nnodes];
	memset(none, 0, sizeof(none));
	/* nopfs: the node-wide plan caches nothing; np_build places the copies */
	if (plan_build(&e->plan, e->cat, &e->sh, e->first_epoch, e->rank_node, e->nnodes,
		       e->nopfs ? none : e->caps) != 0) {
		log_error("out of memory building the placement plan");
		abort();
	}
	if (e->nopfs)
		np_build(e);
	e->plan_ready = true;
	e->t_plan = now_s();
	for (uint64_t s = 0; s < e->cat->nsamples; s++) {
		if (place_local_ram(e, (uint32_t)s)) {
			e->cache_planned++;
			e->local_cached_bytes += e->cat->samples[s].length;
		} else if (place_local_nvme(e, (uint32_t)s)) {
			e->nvme_planned++;
			e->local_cached_bytes += e->cat->samples[s].length;
		}
	}
	/* the network thread may now look samples up */
	atomic_store_explicit(&e->plan_published, true, memory_order_release);
	e->fill_left = e->cache_planned;
	if (e->nopfs)
		log_info("cache.policy = nopfs: %u private copies in %u trainer shares of %llu bytes",
			 e->np.nkeys, e->nlocal,
			 (unsigned long long)(e->cache_cap / MAX(e->nlocal, 1u)));
	e->fill_g = e->first_epoch * e->sh.bpe;
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
	/* staging: split among the node's trainers (4 KiB-aligned for O_DIRECT) */
	uint64_t per = (e->stage_cap / MAX(e->nlocal, 1u)) & ~(NVME_ALIGN - 1);
	for (uint32_t i = 0; i < e->nlocal; i++) {
		struct trainer *t = &e->tr[e->local_ranks[i]];
		stg_init(&t->stg, e->stage_base + per * i, per);
	}
	/* requests peers sent before this node had its plan */
	struct deferred_req *early = e->early;
	uint32_t nearly = e->nearly;
	e->early = NULL;
	e->nearly = e->capearly = 0;
	for (uint32_t i = 0; i < nearly; i++)
		peer_request(e, early[i].peer, early[i].req_id, early[i].sample, early[i].len);
	free(early);
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

/* Place the daemon's threads -- the I/O threads, the dispatcher and the
 * network thread -- away from the trainers (see src/topo.h for the policy). */
void engine_repin(struct engine *e)
{
	if (!e->topo || !e->pool_started)
		return;
	unsigned n = e->pool.nthreads;
	pthread_t th[n + 2];
	memcpy(th, e->pool.threads, n * sizeof(pthread_t));
	th[n++] = e->dispatcher;
	bool net = e->net && net_thread(e->net, &th[n]) == 0;
	n += net;
	char desc[sizeof(e->pin_desc)];
	topo_pin_threads(e->topo, e->cfg->cpuset, th, n, desc, sizeof(desc));
	if (strcmp(desc, e->pin_desc) != 0) {
		log_info("daemon threads (%u I/O, dispatcher%s) %s", e->pool.nthreads,
			 net ? ", network" : "", desc);
		str_copy(e->pin_desc, sizeof(e->pin_desc), desc);
	}
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

/* ---- create / destroy -------------------------------------------------------------- */

int engine_create(struct engine **out, const struct engine_opts *o, char *err, size_t errlen)
{
	struct engine *e = xcalloc(1, sizeof(*e));
	e->cfg = o->cfg;
	e->cat = o->cat;
	e->node = o->node;
	e->nnodes = o->nnodes;
	e->epfd = o->epfd;
	e->t_start = now_s();
	e->arena.fd = -1;
	e->nvme_fd = -1;
	const struct catalog *cat = o->cat;
	int rc;

	/* no point reserving more cache than the dataset (with alignment) */
	uint64_t ds = cat->total_bytes + cat->nsamples * PLAN_RAM_ALIGN;
	e->cache_cap = ALIGN_UP(MIN(o->cfg->ram, ds), 4096ull);
	e->stage_cap = ALIGN_UP(o->cfg->staging, 4096ull);
	nvme_open(e);
	if (e->nvme_ok && e->nnodes > 1) {
		e->nbounce = (uint32_t)MIN(o->cfg->io_threads, 16ull);
		e->bounce_size = ALIGN_UP(cat->max_len, (uint64_t)e->nvme_align);
	}
	uint64_t types_off = ALIGN_UP(sizeof(struct seer_arena_hdr), 64ull);
	uint64_t data_off = ALIGN_UP(types_off + (uint64_t)cat->ntypes * sizeof(struct seer_wire_type),
				     4096ull);
	e->cache_base = data_off;
	e->stage_base = data_off + e->cache_cap;
	e->bounce_base = e->stage_base + e->stage_cap;
	uint64_t size = e->bounce_base + (uint64_t)e->nbounce * e->bounce_size;
	e->bounce_free = xcalloc(MAX(e->nbounce, 1u), sizeof(int32_t));
	e->bounce_refs = xcalloc(MAX(e->nbounce, 1u), sizeof(uint32_t));
	for (uint32_t b = 0; b < e->nbounce; b++)
		e->bounce_free[e->nbounce_free++] = (int32_t)(e->nbounce - 1 - b);
	e->caps = xcalloc(e->nnodes, sizeof(*e->caps));
	for (uint32_t k = 0; k < e->nnodes; k++)
		e->caps[k] = engine_cap(e);

	char terr[256];
	if (topo_open(&e->topo, terr, sizeof(terr)) == 0) {
		topo_describe(e->topo, e->topo_desc, sizeof(e->topo_desc));
		log_info("topology: %s", e->topo_desc);
		if (*o->cfg->cpuset && topo_check_cpuset(e->topo, o->cfg->cpuset, err, errlen) != 0) {
			rc = SEER_ECONFIG;
			goto fail;
		}
	} else {
		log_warn("%s: threads and memory are not placed", terr);
	}
	rc = shm_create(&e->arena, "seer-arena", size);
	if (rc != 0) {
		snprintf(err, errlen, "cannot create the %llu-byte arena: %s",
			 (unsigned long long)size, strerror(-rc));
		goto fail;
	}
	e->abase = e->arena.base;
	if (e->topo) {
		int numa = topo_bind_memory(e->topo, e->abase, size);
		if (numa >= 0)
			log_info("arena bound to NUMA node %d (the NIC's)", numa);
	}
	struct seer_arena_hdr *h = (void *)e->abase;
	*h = (struct seer_arena_hdr){
		.magic = SEER_MAGIC_ARENA, .version = SEER_PROTO_VERSION,
		.creator_pid = (uint32_t)getpid(), .size = size, .types_off = types_off,
		.ntypes = cat->ntypes, .data_off = data_off,
	};
	memcpy(e->abase + types_off, cat->types, cat->ntypes * sizeof(struct seer_wire_type));
	if ((rc = shm_seal_readonly(&e->arena)) != 0) {
		snprintf(err, errlen, "cannot seal the arena read-only for trainers: %s",
			 strerror(-rc));
		goto fail;
	}
	e->skip_corrupt = strcmp(o->cfg->on_corrupt, "skip") == 0;
	e->nopfs = strcmp(o->cfg->policy, "nopfs") == 0;
	e->bad = calloc(cat->nsamples, 1);
	e->cstate = calloc(cat->nsamples, sizeof(uint32_t));
	if (!e->cstate || !e->bad) {
		snprintf(err, errlen, "out of memory");
		rc = -ENOMEM;
		goto fail;
	}
	rc = iopool_start(&e->pool, (unsigned)o->cfg->io_threads, worker_exec, worker_init,
			  worker_fini, e);
	if (rc != 0) {
		snprintf(err, errlen, "cannot start %llu I/O threads: %s",
			 (unsigned long long)o->cfg->io_threads, strerror(-rc));
		goto fail;
	}
	e->pool_started = true;
	e->dispatcher = pthread_self();
	engine_ep_add(e, e->pool.done_efd, EP_TAG(EP_POOL, 0));
	engine_repin(e);
	if (o->cfg->world_size > 0 && (rc = place_shape_init(e, (uint32_t)o->cfg->world_size, err, errlen)))
		goto fail;
	char a[32], b[32];
	log_info("arena: %s RAM cache + %s staging, %llu I/O threads, lookahead %llu batches",
		 fmt_size(a, sizeof(a), e->cache_cap), fmt_size(b, sizeof(b), e->stage_cap),
		 (unsigned long long)o->cfg->io_threads, (unsigned long long)o->cfg->lookahead);
	*out = e;
	return 0;
fail:
	engine_destroy(e);
	return rc;
}

void engine_destroy(struct engine *e)
{
	if (!e)
		return;
	atomic_store(&e->stopping, true);
	if (e->pool_started) {
		iopool_stop(&e->pool);
		for (struct io_task *io = iopool_take_done(&e->pool); io;) {
			struct io_task *next = io->next;
			task_free(e, (struct etask *)io);
			io = next;
		}
		iopool_destroy(&e->pool);
	}
	for (uint32_t r = 0; e->tr && r < e->world; r++) {
		sess_close(e, &e->tr[r]);
		if (e->tr[r].pending_sock >= 0)
			close(e->tr[r].pending_sock);
	}
	task_free_all(e);
	place_shape_free(e);
	free((void *)e->cstate);
	free(e->bad);
	free(e->es);
	free(e->caps);
	free(e->early);
	free(e->bwait);
	free(e->bounce_free);
	free(e->bounce_refs);
	free(e->nvme_sum);
	if (e->nvme_fd >= 0)
		close(e->nvme_fd);
	topo_close(e->topo);
	shm_destroy(&e->arena);
	free(e);
}

void engine_work(struct engine *e)
{
	task_completions(e);
	peer_events(e);
	if (!e->shape_ready)
		return;
	/* awake now: trainers need not ring until engine_arm asks again */
	for (uint32_t r = 0; r < e->world; r++)
		if (e->tr[r].attached)
			atomic_store_explicit(&e->tr[r].co->need_wakeup, 0, memory_order_relaxed);
	for (uint32_t r = 0; r < e->world; r++)
		pf_releases(e, &e->tr[r]);
	if (e->plan_ready) {
		bool progress = true;
		while (progress) {
			progress = false;
			for (uint32_t i = 0; i < e->nlocal; i++) {
				struct trainer *t = &e->tr[e->local_ranks[i]];
				t->blocked = false;
				if (!pf_can_prepare(e, t))
					continue;
				if (pf_prepare(e, t))
					progress = true;
				else
					t->blocked = true;
			}
		}
		pf_fill(e);
		task_flush(e);
	}
	for (uint32_t r = 0; r < e->world; r++)
		if (e->tr[r].attached && !e->tr[r].resetting)
			pf_publish(e, &e->tr[r]);
	stats_check_epochs(e);
}

bool engine_arm(struct engine *e)
{
	if (!e->shape_ready)
		return true;
	bool sleep_ok = true;
	for (uint32_t r = 0; r < e->world; r++) {
		struct trainer *t = &e->tr[r];
		if (!t->attached)
			continue;
		atomic_store_explicit(&t->co->need_wakeup, 1, memory_order_relaxed);
	}
	/* pairs with the trainers' fence between moving an index and reading
	 * need_wakeup: either they see the flag, or we see their update here */
	atomic_thread_fence(memory_order_seq_cst);
	for (uint32_t r = 0; r < e->world; r++) {
		struct trainer *t = &e->tr[r];
		if (!t->attached || t->resetting)
			continue;
		if (atomic_load_explicit(t->rel.prod, memory_order_relaxed) !=
		    atomic_load_explicit(t->rel.cons, memory_order_relaxed))
			sleep_ok = false;
		else if (e->plan_ready && pf_can_prepare(e, t) && !t->blocked)
			sleep_ok = false;
	}
	return sleep_ok;
}

void engine_on_event(struct engine *e, uint64_t tag, uint32_t events)
{
	(void)events;
	uint32_t id = EP_ID(tag);
	switch (EP_KIND(tag)) {
	case EP_POOL:
		break; /* engine_work takes the completions */
	case EP_NET: {
		uint64_t v;
		ssize_t r UNUSED = read(net_event_fd(e->net), &v, sizeof(v));
		break;
	}
	case EP_TSOCK:
		if (e->shape_ready && id < e->world && e->tr[id].attached)
			sess_on_sock(e, &e->tr[id]);
		break;
	case EP_TEFD:
		if (e->shape_ready && id < e->world && e->tr[id].attached) {
			uint64_t v;
			ssize_t r UNUSED = read(e->tr[id].efd, &v, sizeof(v));
		}
		break;
	default:
		break;
	}
}

void engine_stop(struct engine *e, bool now)
{
	e->draining = true;
	if (!now)
		return;
	atomic_store(&e->stopping, true);
	for (uint32_t r = 0; e->shape_ready && r < e->world; r++) {
		struct trainer *t = &e->tr[r];
		if (!t->attached)
			continue;
		atomic_store_explicit(&t->co->state, SEER_STATE_STOPPING, memory_order_release);
		sess_doorbell(t);
	}
}

bool engine_finished(const struct engine *e)
{
	if (e->fatal[0])
		return true;
	bool stopping = atomic_load(&e->stopping) || e->draining;
	if (!e->shape_ready)
		return stopping;
	for (uint32_t r = 0; r < e->world; r++)
		if (e->tr[r].attached)
			return false;
	if (stopping)
		return true;
	if (!e->plan_ready)
		return false;
	for (uint32_t i = 0; i < e->nlocal; i++)
		if (!e->tr[e->local_ranks[i]].done)
			return false;
	return true;
}

const char *engine_fatal(const struct engine *e)
{
	return e->fatal[0] ? e->fatal : NULL;
}

void engine_tick(struct engine *e)
{
	double t = now_s();
	if (e->retries_unreported && t - e->t_last_retry_warn >= 10.0) {
		log_warn("%llu failed reads retried since the last report (last: %s)",
			 (unsigned long long)e->retries_unreported, e->last_retry);
		e->retries_unreported = 0;
		e->t_last_retry_warn = t;
	}
	/* keep the resume record fresh: a daemon killed without a chance to
	 * save still lets [job] resume = auto continue (never past a batch that
	 * was not released) */
	if (e->plan_ready && t - e->t_last_resume_save >= 10.0) {
		e->t_last_resume_save = t;
		resume_save(e, true);
	}
	if (e->shape_ready && e->plan_ready && e->fill_left > 0 && e->cache_loaded > 0 &&
	    t - e->t_last_progress >= 10.0) {
		e->t_last_progress = t;
		log_info("warm-up: %llu of %llu cached samples loaded (%.1f%%)",
			 (unsigned long long)e->cache_loaded, (unsigned long long)e->cache_planned,
			 100.0 * (double)e->cache_loaded / (double)MAX(e->cache_planned, 1ull));
	}
	if (t - e->t_start > e->cfg->connect_timeout_s && t - e->t_last_wait_warn > 60.0) {
		char missing[256] = "";
		size_t n = 0;
		uint32_t count = 0;
		for (uint32_t r = 0; e->shape_ready && r < e->world; r++) {
			if (e->tr[r].known)
				continue;
			if (count++ < 16)
				n += (size_t)snprintf(missing + n, sizeof(missing) - n, "%s%u",
						      count > 1 ? "," : "", r);
		}
		if (count > 0 || !e->shape_ready) {
			e->t_last_wait_warn = t;
			if (!e->shape_ready)
				log_warn("no trainer connected after %.0f s (socket %s)", t - e->t_start,
					 e->cfg->socket);
			else
				log_warn("%u trainer rank(s) never connected after %.0f s: %s%s", count,
					 t - e->t_start, missing, count > 16 ? ",..." : "");
		}
	}
}

/* ---- joining the cluster -------------------------------------------------------------- */

struct plan_cap engine_cap(const struct engine *e)
{
	return (struct plan_cap){ .ram = e->cache_cap, .nvme = e->nvme_ok ? e->nvme_cap : 0,
				  .nvme_align = e->nvme_align };
}

void engine_set_caps(struct engine *e, const struct plan_cap *caps)
{
	memcpy(e->caps, caps, e->nnodes * sizeof(*caps));
}

void engine_net_opts(struct engine *e, struct net_opts *o)
{
	o->region = e->abase;
	o->region_len = e->arena.size;
	o->lookup = peer_lookup;
	o->lookup_ctx = e;
}

void engine_set_net(struct engine *e, struct net *n)
{
	e->net = n;
	if (n) {
		engine_ep_add(e, net_event_fd(n), EP_TAG(EP_NET, 0));
		e->pin_desc[0] = '\0'; /* log the placement again, network thread included */
		engine_repin(e);
	}
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
