/* The engine: seerd's state and the loop that drives its stages.
 *
 * Owns the engine's life (create: NVMe tier, arena, topology, I/O pool, and
 * the shape when the world size is configured; destroy in reverse), the
 * round of work the server's loop runs (engine_work: completions, peer
 * events, releases, preparation, fill, submission, publication, epoch
 * bookkeeping), the sleep handshake with trainers (engine_arm), stopping,
 * the periodic duties, and the engine's epoll fds and thread placement.
 * The stages themselves live in their own files (daemon/README.md has the
 * map). Dispatcher thread only. Failure: engine_create reports why in err
 * and leaves nothing behind; a fatal condition later (engine_fatal) makes
 * engine_finished true and the daemon exits with it. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../src/util/ctrl.h"
#include "../src/util/topo.h"
#include "../src/util/util.h"
#include "engine_int.h"
#include "seer.h"

/* ---- the engine's fds and threads ----------------------------------------------- */

/* Place the daemon's threads -- the I/O threads, the dispatcher and the
 * network thread -- away from the trainers (see src/util/topo.h for the policy). */
void engine_repin(struct engine *e)
{
	if (!e->topo || !e->tasks.pool_started)
		return;
	unsigned n = e->tasks.pool.nthreads, nx = xfs_threads(e, NULL);
	pthread_t th[n + nx + 2];
	memcpy(th, e->tasks.pool.threads, n * sizeof(pthread_t));
	n += xfs_threads(e, th + n);
	th[n++] = e->self.dispatcher;
	bool net = e->peers.net && net_thread(e->peers.net, &th[n]) == 0;
	n += net;
	char desc[sizeof(e->self.pin_desc)], xd[32] = "";
	int pus = topo_pin_threads(e->topo, e->cfg->daemon.cpuset, th, n, desc, sizeof(desc));
	xfs_placed(e, pus > 0 ? (unsigned)pus : 0);
	if (nx)
		snprintf(xd, sizeof(xd), ", %u transform", nx);
	if (strcmp(desc, e->self.pin_desc) != 0) {
		log_info("daemon threads (%u I/O%s, dispatcher%s) %s", e->tasks.pool.nthreads, xd,
			 net ? ", network" : "", desc);
		str_copy(e->self.pin_desc, sizeof(e->self.pin_desc), desc);
	}
}

/* ---- create / destroy -------------------------------------------------------------- */

/* Files each I/O thread's reader keeps open: the readers together take at
 * most half the file-descriptor limit (main raised it to the hard limit);
 * the rest is for trainers (4 each), connections and the daemon's own. */
static uint32_t reader_fds(const struct seer_config *cfg)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return CAT_FD_CACHE;
	uint64_t per = rl.rlim_cur / 2 / cfg->prefetch.io_threads;
	if (per < 1) {
		log_warn("[prefetch] io_threads = %llu with a limit of %llu open files: the I/O "
			 "threads alone may use more than half of it (one file each); raise the "
			 "limit (ulimit -n) or lower io_threads",
			 (unsigned long long)cfg->prefetch.io_threads, (unsigned long long)rl.rlim_cur);
		return 1;
	}
	if (per < CAT_FD_CACHE)
		log_info("each of the %llu I/O threads keeps up to %llu files open (limit %llu open "
			 "files)", (unsigned long long)cfg->prefetch.io_threads, (unsigned long long)per,
			 (unsigned long long)rl.rlim_cur);
	return (uint32_t)MIN(per, (uint64_t)CAT_FD_CACHE);
}

int engine_create(struct engine **out, const struct engine_opts *o, char *err, size_t errlen)
{
	struct engine *e = xcalloc(1, sizeof(*e));
	e->cfg = o->cfg;
	e->cat = o->cat;
	e->node = o->node;
	e->nnodes = o->nnodes;
	e->epfd = o->epfd;
	e->tasks.done = complete_task; /* completions to the stages that own them */
	e->st.t_start = now_s();
	e->ar.seg.fd = -1;
	const struct catalog *cat = o->cat;
	int rc;

	e->nvme = nvme_create(e->cfg, e->node, o->cat->nsamples);
	/* what the transform stage hands back goes to the stages that own it */
	const struct xfs_events xev = { .sample_done = pf_sample_done,
					.unstaged = complete_unstaged };
	if ((rc = xfs_create(e, &xev, err, errlen)) != 0)
		goto fail;
	uint64_t size = arena_layout(e);
	peer_bounce_init(e);
	e->pl.caps = xcalloc(e->nnodes, sizeof(*e->pl.caps));
	for (uint32_t k = 0; k < e->nnodes; k++)
		e->pl.caps[k] = engine_cap(e);

	char terr[256];
	if (topo_open(&e->topo, terr, sizeof(terr)) == 0) {
		topo_describe(e->topo, e->self.topo_desc, sizeof(e->self.topo_desc));
		log_info("topology: %s", e->self.topo_desc);
		if (*o->cfg->daemon.cpuset && topo_check_cpuset(e->topo, o->cfg->daemon.cpuset, err, errlen) != 0) {
			rc = SEER_ECONFIG;
			goto fail;
		}
	} else {
		log_warn("%s: threads and memory are not placed", terr);
	}
	if ((rc = arena_check_memory(e, size, err, errlen)) != 0 ||
	    (rc = arena_create(e, size, err, errlen)) != 0)
		goto fail;
	arena_prefill_staging(e);
	arena_prefill_cache(e);
	/* a task per sample this node caches, up to 8 chunks (~5 MB) */
	task_reserve(e, MIN(cat->nsamples / MAX(e->nnodes, 1u) + 2 * TASK_CHUNK, 8 * TASK_CHUNK));
	e->skip_corrupt = strcmp(o->cfg->dataset.on_corrupt, "skip") == 0;
	e->nopfs = strcmp(o->cfg->cache.policy, "nopfs") == 0;
	if (o->probe)
		e->ext.probe = *o->probe;
	ext_init(e);
	e->pl.bad = calloc(cat->nsamples, 1);
	e->cstate = calloc(cat->nsamples, sizeof(uint32_t));
	if (!e->cstate || !e->pl.bad) {
		snprintf(err, errlen, "out of memory");
		rc = -ENOMEM;
		goto fail;
	}
	e->tasks.reader_fds = reader_fds(o->cfg);
	rc = iopool_start(&e->tasks.pool, (unsigned)o->cfg->prefetch.io_threads, worker_exec, worker_init,
			  worker_fini, e);
	if (rc != 0) {
		snprintf(err, errlen, "cannot start %llu I/O threads: %s",
			 (unsigned long long)o->cfg->prefetch.io_threads, strerror(-rc));
		goto fail;
	}
	e->tasks.pool_started = true;
	e->self.dispatcher = pthread_self();
	engine_ep_add(e, e->tasks.pool.done_efd, EP_TAG(EP_POOL, 0));
	if (e->xf)
		engine_ep_add(e, xfs_event_fd(e), EP_TAG(EP_POOL, 1));
	engine_repin(e);
	xfs_log(e);
	if (o->cfg->job.world_size > 0 && (rc = place_shape_init(e, (uint32_t)o->cfg->job.world_size, NULL, false,
								     err, errlen)))
		goto fail;
	char a[32], b[32];
	log_info("arena: %s RAM cache + %s staging, %llu I/O threads, lookahead %llu batches",
		 fmt_size(a, sizeof(a), e->ar.cache_cap), fmt_size(b, sizeof(b), e->ar.stage_cap),
		 (unsigned long long)o->cfg->prefetch.io_threads, (unsigned long long)o->cfg->prefetch.lookahead);
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
	xfs_stop(e); /* first: I/O threads waiting for a decode are released */
	if (e->tasks.pool_started) {
		iopool_stop(&e->tasks.pool);
		for (struct io_task *io = iopool_take_done(&e->tasks.pool); io;) {
			struct io_task *next = io->next;
			task_free(e, (struct etask *)io);
			io = next;
		}
		iopool_destroy(&e->tasks.pool);
	}
	for (uint32_t r = 0; e->tr && r < e->world; r++) {
		sess_close(e, &e->tr[r]);
		if (e->tr[r].pending_sock >= 0)
			close(e->tr[r].pending_sock);
	}
	task_free_all(e);
	xfs_destroy(e);
	ext_free(e);
	place_shape_free(e);
	free((void *)e->cstate);
	free(e->pl.bad);
	stats_free(&e->st);
	free(e->pl.caps);
	peer_free(e);
	nvme_destroy(e->nvme);
	topo_close(e->topo);
	shm_destroy(&e->ar.seg);
	free(e);
}

void engine_work(struct engine *e)
{
	if (e->self.repin_due) { /* a session's trainer changed the CPUs to avoid */
		e->self.repin_due = false;
		engine_repin(e);
	}
	task_completions(e);
	xfs_completions(e);
	peer_events(e);
	if (!e->shape_ready)
		return;
	/* awake now: trainers need not ring until engine_arm asks again */
	for (uint32_t r = 0; r < e->world; r++)
		if (e->tr[r].attached)
			atomic_store_explicit(&e->tr[r].co->need_wakeup, 0, memory_order_relaxed);
	for (uint32_t r = 0; r < e->world; r++) {
		const char *why = pf_releases(e, &e->tr[r]);
		if (why) /* a bad release ring: the session's business */
			sess_evict(e, &e->tr[r], why);
	}
	if (e->plan_ready) {
		bool progress = true;
		while (progress) {
			progress = false;
			for (uint32_t i = 0; i < e->pl.nlocal; i++) {
				struct trainer *t = &e->tr[e->pl.local_ranks[i]];
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
		repl_fill(e); /* after every batch's reads: the lowest priority */
		ext_flush(e); /* coalesce the round's PFS reads into extents */
		task_flush(e);
	}
	/* after a stop nothing more is published: the trainers' next call says
	 * so, and their positions are what they took */
	bool stopping = atomic_load(&e->stopping);
	for (uint32_t r = 0; r < e->world && !stopping; r++)
		if (e->tr[r].attached && !e->tr[r].resetting)
			pf_publish(e, &e->tr[r]);
	for (uint32_t i = 0; e->plan_ready && i < e->pl.nlocal; i++)
		pf_check_held(e, &e->tr[e->pl.local_ranks[i]]);
	if (stats_check_epochs(e))
		fcast_note(e); /* the epoch now beginning, with the rates so far */
}

bool engine_arm(struct engine *e)
{
	if (!e->shape_ready)
		return true;
	bool sleep_ok = true;
	e->pf.pace_wake_ns = 0; /* pf_can_prepare below sets it again */
	/* While every trainer here has at least `below` (half the lookahead)
	 * batches ready and its last `lookahead` batches needed no PFS read, a
	 * take or a release gives us nothing to do at once (staging and slots
	 * are per trainer: one's release frees nothing another waits for): a
	 * trainer wakes us once its ring runs lower (ring_below; an empty ring
	 * always does) or once ring_below of its releases wait (a trainer that
	 * releases without taking: a TorchLoader's batches taken ahead, at an
	 * epoch's end), and that pass takes every release and refills every
	 * ring. Otherwise -- PFS reads to start early, a stop, a reset -- every
	 * take and release rings. Released positions (resume.c) are then
	 * recorded at that pass, or at the 1 s timer at the latest. */
	uint32_t below = (uint32_t)MAX(1u, (e->cfg->prefetch.lookahead + 1) / 2);
	bool lazy = e->plan_ready && !e->draining && !atomic_load(&e->stopping);
	for (uint32_t i = 0; lazy && i < e->pl.nlocal; i++) {
		struct trainer *t = &e->tr[e->pl.local_ranks[i]];
		lazy = !t->attached || (!t->resetting && t->no_pfs_run >= e->cfg->prefetch.lookahead &&
					sess_unread(t) >= below);
	}
	below = lazy ? below : 0;
	for (uint32_t r = 0; r < e->world; r++) {
		struct trainer *t = &e->tr[r];
		if (!t->attached)
			continue;
		atomic_store_explicit(&t->co->ring_below, below, memory_order_relaxed);
		atomic_store_explicit(&t->co->need_wakeup, 1, memory_order_release);
	}
	/* pairs with the trainers' fence between moving an index and reading
	 * need_wakeup and ring_below: either they see this pass's flag and
	 * threshold, or we see their update here */
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

int engine_wait_ms(const struct engine *e, int ms)
{
	if (!e->shape_ready || !e->pf.pace_wake_ns)
		return ms;
	uint64_t now = now_ns();
	uint64_t left = e->pf.pace_wake_ns > now ? (e->pf.pace_wake_ns - now + 999999u) / 1000000u : 0;
	return (int)MIN((uint64_t)ms, left);
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
		ssize_t r UNUSED = read(net_event_fd(e->peers.net), &v, sizeof(v));
		break;
	}
	case EP_TSOCK:
		if (e->shape_ready && id < e->world && e->tr[id].attached)
			sess_on_sock(e, &e->tr[id]);
		break;
	case EP_TEFD:
		if (e->shape_ready && id < e->world && e->tr[id].attached) {
			uint64_t v;
			if (read(e->tr[id].efd, &v, sizeof(v)) == (ssize_t)sizeof(v))
				e->tr[id].rings += v; /* the writes since the last read */
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

void engine_end(struct engine *e, bool complete)
{
	/* the loop has stopped: no tick updates the outlook, no completion is
	 * taken back from the pool any more */
	atomic_store_explicit(&e->pf.outlook.over, true, memory_order_relaxed);
	resume_end(e, complete);
}

int engine_next_job(struct engine *e)
{
	if (e->self.fatal[0] || e->draining || atomic_load(&e->stopping))
		return -1;
	if (!e->shape_ready)
		return 1;
	char busy[160];
	if (place_can_reshape(e, busy, sizeof(busy)) != 0)
		return 0;
	engine_end(e, true); /* a finished job's positions go, as at seerd's exit */
	place_drop_shape(e);
	log_info("job finished: serving the next job ([daemon] serve_jobs); its first trainer "
		 "declares it");
	return 1;
}

void engine_snapshot(struct engine *e)
{
	engine_work(e); /* releases the trainers made meanwhile into the positions */
	engine_write_stats(e);
	resume_sync(e);
}

bool engine_finished(const struct engine *e)
{
	if (e->self.fatal[0])
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
	for (uint32_t i = 0; i < e->pl.nlocal; i++)
		if (!e->tr[e->pl.local_ranks[i]].done)
			return false;
	return true;
}

const char *engine_fatal(const struct engine *e)
{
	return e->self.fatal[0] ? e->self.fatal : NULL;
}

void engine_tick(struct engine *e)
{
	double t = now_s();
	pf_outlook(e);
	if (e->self.retries_unreported && t - e->self.t_last_retry_warn >= 10.0) {
		log_warn("%llu failed reads retried since the last report (last: %s)",
			 (unsigned long long)e->self.retries_unreported, e->self.last_retry);
		e->self.retries_unreported = 0;
		e->self.t_last_retry_warn = t;
	}
	if (e->shape_ready && e->plan_ready && e->pf.fill_left > 0 && e->pl.cache_loaded > 0 &&
	    t - e->self.t_last_progress >= 10.0) {
		e->self.t_last_progress = t;
		uint64_t planned = e->pl.cache_planned + e->repl.ram_planned;
		log_info("warm-up: %llu of %llu cached samples loaded (%.1f%%)",
			 (unsigned long long)e->pl.cache_loaded, (unsigned long long)planned,
			 100.0 * (double)e->pl.cache_loaded / (double)MAX(planned, 1ull));
	}
	if (t - e->st.t_start > e->cfg->daemon.connect_timeout_s && t - e->self.t_last_wait_warn > 60.0) {
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
			e->self.t_last_wait_warn = t;
			if (!e->shape_ready)
				log_warn("no trainer connected after %.0f s (socket %s)", t - e->st.t_start,
					 e->cfg->daemon.socket);
			else
				log_warn("%u trainer rank(s) never connected after %.0f s: %s%s", count,
					 t - e->st.t_start, missing, count > 16 ? ",..." : "");
		}
	}
}

void engine_net_opts(struct engine *e, struct net_opts *o)
{
	o->region = e->ar.base;
	o->region_len = e->ar.seg.size;
	o->lookup = peer_lookup;
	o->lookup_ctx = e;
}

void engine_set_net(struct engine *e, struct net *n)
{
	e->peers.net = n;
	if (n) {
		engine_ep_add(e, net_event_fd(n), EP_TAG(EP_NET, 0));
		e->self.pin_desc[0] = '\0'; /* log the placement again, network thread included */
		engine_repin(e);
	}
}

void engine_pfs_outlook(void *arg, struct pfs_outlook *o)
{
	struct engine *e = arg;
	/* the engine outlives the checkpoint stage (server.c destroys the stage
	 * first); the fields are atomics, their values hints */
	*o = (struct pfs_outlook){ 0 };
	if (atomic_load_explicit(&e->pf.outlook.over, memory_order_relaxed))
		return; /* engine_end: the engine reads no more */
	o->queued = atomic_load_explicit(&e->tasks.pfs_queued, memory_order_relaxed);
	o->soon_reads = atomic_load_explicit(&e->pf.outlook.soon_reads, memory_order_relaxed);
	o->soon_bytes = atomic_load_explicit(&e->pf.outlook.soon_bytes, memory_order_relaxed);
}
