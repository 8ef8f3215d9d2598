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
static struct route_view place_view(const struct engine *e)
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



static void engine_ep_add(struct engine *e, int fd, uint64_t tag)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = tag };
	if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
		log_error("epoll_ctl add: %s", strerror(errno));
}

static void engine_ep_del(struct engine *e, int fd)
{
	epoll_ctl(e->epfd, EPOLL_CTL_DEL, fd, NULL);
}

static void sess_doorbell(struct trainer *t)
{
	atomic_fetch_add_explicit(&t->co->doorbell, 1, memory_order_release);
	/* pairs with the trainer's fence between setting `waiting` and its
	 * last look at the ring before it sleeps */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&t->ci->waiting, memory_order_relaxed))
		futex_wake_all(&t->co->doorbell);
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
static int place_shape_init(struct engine *e, uint32_t world, char *err, size_t errlen)
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
static void engine_repin(struct engine *e)
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
static void place_shape_free(struct engine *e)
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

static void sess_close(struct engine *e, struct trainer *t)
{
	if (t->sock >= 0) {
		engine_ep_del(e, t->sock);
		close(t->sock);
		t->sock = -1;
	}
	if (t->efd >= 0) {
		engine_ep_del(e, t->efd);
		close(t->efd);
		t->efd = -1;
	}
	shm_destroy(&t->out_seg);
	shm_destroy(&t->in_seg);
	t->co = NULL;
	t->ci = NULL;
	free(t->slots);
	t->slots = NULL;
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

/* ---- trainer sessions ----------------------------------------------------------------- */

static void send_refusal(int sock, int status, const char *fmt, ...) PRINTF_LIKE(3, 4);
static void send_refusal(int sock, int status, const char *fmt, ...)
{
	struct seer_msg_welcome w = { .kind = SEER_MSG_ERROR, .status = status };
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w.msg, sizeof(w.msg), fmt, ap);
	va_end(ap);
	log_warn("refused a trainer: %s", w.msg);
	sock_send(sock, &w, sizeof(w), NULL, 0);
}

static void reset_stream(struct trainer *t, uint64_t start)
{
	for (uint32_t i = 0; t->slots && i < t->nslots; i++)
		t->slots[i] = (struct tslot){ 0 };
	stg_reset(&t->stg);
	t->next_prep = t->next_pub = t->tail_g = start;
	t->resetting = false;
	t->blocked = false;
}

uint64_t sess_first_unreleased(const struct trainer *t)
{
	for (uint64_t g = t->tail_g; g < t->next_pub; g++)
		if (t->slots[g & (t->nslots - 1)].st == SL_PUB)
			return g;
	return t->next_pub;
}

static int open_session(struct engine *e, struct trainer *t, int sock, pid_t pid, uint64_t start)
{
	uint32_t ns = e->nslots;
	uint64_t stride = seer_slot_stride(e->sh.batch);
	uint64_t ring_off = sizeof(struct seer_ctrl_out);
	uint64_t slots_off = ALIGN_UP(ring_off + 4ull * ns, (uint64_t)SEER_CACHELINE);
	uint64_t out_size = ALIGN_UP(slots_off + stride * ns, 4096ull);
	uint64_t in_ring = sizeof(struct seer_ctrl_in);
	uint64_t in_size = ALIGN_UP(in_ring + 4ull * ns, 4096ull);
	int rc = shm_create(&t->out_seg, "seer-ctrl-out", out_size);
	if (rc == 0)
		rc = shm_create(&t->in_seg, "seer-ctrl-in", in_size);
	if (rc != 0) {
		send_refusal(sock, rc, "daemon cannot create shared memory: %s", strerror(-rc));
		goto fail;
	}
	t->co = t->out_seg.base;
	t->ci = t->in_seg.base;
	t->co->magic = SEER_MAGIC_CTOUT;
	t->co->version = SEER_PROTO_VERSION;
	t->co->creator_pid = (uint32_t)getpid();
	t->co->size = out_size;
	t->co->nslots = ns;
	t->co->batch_size = e->sh.batch;
	t->co->slot_stride = stride;
	t->co->ring_off = ring_off;
	t->co->slots_off = slots_off;
	t->ci->magic = SEER_MAGIC_CTIN;
	t->ci->version = SEER_PROTO_VERSION;
	t->ci->nslots = ns;
	t->ci->ring_off = in_ring;
	if ((rc = shm_seal_readonly(&t->out_seg)) != 0 || (rc = shm_seal_size(&t->in_seg)) != 0) {
		send_refusal(sock, rc, "daemon cannot seal shared memory: %s", strerror(-rc));
		goto fail;
	}
	t->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (t->efd < 0) {
		rc = -errno;
		send_refusal(sock, rc, "daemon cannot create an eventfd: %s", strerror(errno));
		goto fail;
	}
	t->out = (struct ring){ .prod = &t->co->prod, .cons = &t->ci->cons,
				.entries = (uint32_t *)((uint8_t *)t->co + ring_off), .mask = ns - 1 };
	t->rel = (struct ring){ .prod = &t->ci->rel_prod, .cons = &t->co->rel_cons,
				.entries = (uint32_t *)((uint8_t *)t->ci + in_ring), .mask = ns - 1 };
	t->nslots = ns;
	t->slots = xcalloc(ns, sizeof(*t->slots));

	struct seer_msg_welcome w = {
		.kind = SEER_MSG_WELCOME, .nsamples = e->cat->nsamples, .epochs = e->cfg->epochs,
		.batches_per_epoch = e->sh.bpe, .start = start, .arena_size = e->arena.size,
		.ctrl_out_size = out_size, .ctrl_in_size = in_size, .batch_size = e->sh.batch,
		.nslots = ns, .node = e->node, .nodes = e->nnodes, .seed = e->cfg->seed,
		.drop_last = e->cfg->drop_last,
	};
	int fds[SEER_WELCOME_NFDS] = { e->arena.fd, t->out_seg.fd, t->in_seg.fd, t->efd };
	ssize_t n = sock_send(sock, &w, sizeof(w), fds, SEER_WELCOME_NFDS);
	if (n != (ssize_t)sizeof(w)) {
		rc = n < 0 ? (int)n : -EPIPE;
		log_warn("trainer rank %u (pid %d) vanished during the handshake", t->rank, (int)pid);
		goto fail;
	}
	t->sock = sock;
	t->pid = pid;
	t->attached = true;
	t->known = true;
	t->done = false;
	t->gen++;
	t->attach_ns = now_ns();
	reset_stream(t, start);
	engine_ep_add(e, sock, EP_TAG(EP_TSOCK, t->rank));
	engine_ep_add(e, t->efd, EP_TAG(EP_TEFD, t->rank));
	if (e->topo && topo_add_trainer(e->topo, pid))
		engine_repin(e);
	log_info("trainer rank %u/%u (pid %d) attached at epoch %llu step %llu", t->rank, e->world,
		 (int)pid, (unsigned long long)(start / e->sh.bpe),
		 (unsigned long long)(start % e->sh.bpe));
	return 0;
fail:
	sess_close(e, t); /* sock is still the caller's: t->sock is -1 */
	return rc;
}

int engine_attach(struct engine *e, int sock, const struct seer_msg_hello *h, pid_t pid)
{
	if (h->magic != SEER_MAGIC_HELLO || h->version != SEER_PROTO_VERSION) {
		send_refusal(sock, SEER_EPROTO,
			     "protocol version %u, this seerd speaks %u: use the libseer of the "
			     "same seer build", h->version, SEER_PROTO_VERSION);
		return SEER_EPROTO;
	}
	char job[SEER_JOBID_MAX];
	memcpy(job, h->job_id, sizeof(job));
	job[sizeof(job) - 1] = '\0';
	if (strcmp(job, e->cfg->job_id) != 0) {
		send_refusal(sock, SEER_EREFUSED, "job id '%s' does not match this seerd's '%s'", job,
			     e->cfg->job_id);
		return SEER_EREFUSED;
	}
	if (e->draining || atomic_load(&e->stopping)) {
		send_refusal(sock, SEER_ESHUTDOWN, "seerd is shutting down");
		return SEER_ESHUTDOWN;
	}
	if (h->world == 0 || h->rank >= h->world) {
		send_refusal(sock, -EINVAL, "rank %u is not in [0, world size %u)", h->rank, h->world);
		return -EINVAL;
	}
	if (!e->shape_ready) {
		/* the first trainer sets the world size: check it before sizing
		 * anything by it, and refuse only that trainer when it is wrong */
		char err[SEER_ERRMSG_MAX];
		if (h->world > SEER_MAX_WORLD) {
			send_refusal(sock, -EINVAL, "world size %u is more than seer serves (%u)",
				     h->world, SEER_MAX_WORLD);
			return -EINVAL;
		}
		int rc = place_shape_init(e, h->world, err, sizeof(err));
		if (rc != 0) {
			place_shape_free(e);
			send_refusal(sock, rc, "%s", err);
			return rc;
		}
	}
	if (h->world != e->world) {
		send_refusal(sock, -EINVAL, "world size %u, but this job's trainers have world size %u",
			     h->world, e->world);
		return -EINVAL;
	}
	struct trainer *t = &e->tr[h->rank];
	if (e->plan_ready && e->rank_node[h->rank] != e->node) {
		send_refusal(sock, SEER_EREFUSED, "rank %u belongs to node %u in this job's plan, "
			     "not to node %u: start it where it first ran", h->rank,
			     e->rank_node[h->rank], e->node);
		return SEER_EREFUSED;
	}
	if (t->attached) {
		send_refusal(sock, SEER_EREFUSED,
			     "rank %u is already connected (pid %d): each rank connects once",
			     h->rank, (int)t->pid);
		return SEER_EREFUSED;
	}
	uint64_t start;
	if (h->epoch == SEER_POS_RESUME) {
		start = t->resume_g; /* [job] resume, the saved position, or where it left */
	} else {
		if (h->epoch >= e->cfg->epochs || h->step >= e->sh.bpe) {
			send_refusal(sock, -ERANGE, "start epoch %llu step %llu is past the job "
				     "(%llu epochs of %llu steps)", (unsigned long long)h->epoch,
				     (unsigned long long)h->step, (unsigned long long)e->cfg->epochs,
				     (unsigned long long)e->sh.bpe);
			return -ERANGE;
		}
		start = h->epoch * e->sh.bpe + h->step;
	}
	if (t->resetting) {
		/* the previous session's reads are still landing in its staging */
		if (t->pending_sock >= 0) {
			send_refusal(sock, SEER_EREFUSED, "rank %u is already reconnecting", h->rank);
			return SEER_EREFUSED;
		}
		t->pending_sock = sock;
		t->pending_hello = *h;
		t->pending_pid = pid;
		return 0;
	}
	int rc = open_session(e, t, sock, pid, start);
	if (rc == 0 && !e->plan_ready)
		e->roll_dirty = true;
	return rc;
}

static void sess_detach(struct engine *e, struct trainer *t, bool evicted, const char *why)
{
	uint64_t resume = sess_first_unreleased(t);
	t->resume_g = resume;
	if (evicted && t->co) {
		atomic_store_explicit(&t->co->state, SEER_STATE_EVICTED, memory_order_release);
		sess_doorbell(t);
	}
	if (!t->done || evicted)
		log_info("trainer rank %u (pid %d) %s: %s; it resumes at epoch %llu step %llu",
			 t->rank, (int)t->pid, evicted ? "evicted" : "detached", why,
			 (unsigned long long)(resume / e->sh.bpe),
			 (unsigned long long)(resume % e->sh.bpe));
	sess_close(e, t);
	t->attached = false;
	t->gen++;
	t->restart_g = resume;
	t->resetting = true;
	if (t->inflight == 0)
		sess_finish_reset(e, t);
}

void sess_finish_reset(struct engine *e, struct trainer *t)
{
	reset_stream(t, t->restart_g);
	if (t->seek_pending && t->attached) {
		t->seek_pending = false;
		struct seer_msg_seek r = {
			.kind = SEER_MSG_SEEK_OK, .start = t->restart_g,
			.prod = atomic_load_explicit(&t->co->prod, memory_order_relaxed),
		};
		if (sock_send(t->sock, &r, sizeof(r), NULL, 0) != (ssize_t)sizeof(r))
			sess_detach(e, t, false, "connection lost during seek");
		return;
	}
	if (t->pending_sock >= 0) {
		int sock = t->pending_sock;
		t->pending_sock = -1;
		const struct seer_msg_hello h = t->pending_hello;
		uint64_t start = h.epoch == SEER_POS_RESUME ? t->resume_g : h.epoch * e->sh.bpe + h.step;
		if (open_session(e, t, sock, t->pending_pid, start) != 0)
			close(sock);
	}
}

static void sess_evict(struct engine *e, struct trainer *t, const char *why)
{
	log_warn("trainer rank %u (pid %d) sent invalid control data (%s): disconnecting it",
		 t->rank, (int)t->pid, why);
	sess_detach(e, t, true, why);
}

static void handle_seek(struct engine *e, struct trainer *t, const struct seer_msg_seek *m);

static void pf_releases(struct engine *e, struct trainer *t);

static void sess_on_sock(struct engine *e, struct trainer *t)
{
	union {
		struct seer_msg_seek seek;
		char raw[512];
	} m;
	ssize_t n = sock_recv(t->sock, &m, sizeof(m), NULL, NULL, 0);
	if (n == 0 || n == -ECONNRESET) {
		pf_releases(e, t); /* what it released before leaving counts */
		if (t->attached)
			sess_detach(e, t, false, t->done ? "job finished" : "connection closed");
		return;
	}
	if (n < 0) {
		if (n != -EAGAIN)
			sess_detach(e, t, false, strerror((int)-n));
		return;
	}
	if (n == (ssize_t)sizeof(m.seek) && m.seek.kind == SEER_MSG_SEEK) {
		handle_seek(e, t, &m.seek);
		return;
	}
	sess_evict(e, t, "unknown message on the socket");
}

static void handle_seek(struct engine *e, struct trainer *t, const struct seer_msg_seek *m)
{
	pf_releases(e, t); /* the client released everything before asking */
	if (!t->attached)
		return;
	struct seer_msg_seek r = { .kind = SEER_MSG_SEEK_OK };
	if (m->epoch >= e->cfg->epochs || m->step >= e->sh.bpe || t->seek_pending) {
		r.status = -ERANGE;
		sock_send(t->sock, &r, sizeof(r), NULL, 0);
		return;
	}
	/* batches published after the client emptied its ring are dropped */
	for (uint32_t i = 0; i < t->nslots; i++)
		if (t->slots[i].st == SL_PUB)
			t->slots[i].st = SL_REL;
	t->gen++;
	t->restart_g = m->epoch * e->sh.bpe + m->step;
	t->seek_pending = true;
	t->resetting = true;
	log_info("trainer rank %u seeks to epoch %llu step %llu", t->rank,
		 (unsigned long long)m->epoch, (unsigned long long)m->step);
	if (t->inflight == 0)
		sess_finish_reset(e, t);
}

/* ---- releases, preparation, publication ---------------------------------------------- */

void pf_reclaim(struct trainer *t)
{
	while (t->tail_g < t->next_pub) {
		struct tslot *sl = &t->slots[t->tail_g & (t->nslots - 1)];
		if (sl->st != SL_REL || sl->pins)
			break; /* held, or an NVMe write still reads its staging */
		stg_reclaim(&t->stg, sl->vend);
		sl->st = SL_FREE;
		t->tail_g++;
	}
}

/* The trainer released the job's last batch (its staging may still be
 * pinned by NVMe writes: that is reclaim's business, not the trainer's). */
static void check_done(struct engine *e, struct trainer *t)
{
	if (!t->done && t->next_pub == e->end && sess_first_unreleased(t) == e->end) {
		t->done = true;
		log_info("trainer rank %u finished the job (%llu batches)", t->rank,
			 (unsigned long long)t->batches);
	}
}

struct rel_ctx {
	struct engine *e;
	struct trainer *t;
};

static bool slot_held(void *ctx, uint32_t idx)
{
	struct rel_ctx *x = ctx;
	return x->t->slots[idx].st == SL_PUB;
}

static void slot_release(void *ctx, uint32_t idx)
{
	struct rel_ctx *x = ctx;
	struct trainer *t = x->t;
	t->slots[idx].st = SL_REL;
	stats_step(x->e, t, t->slots[idx].g);
	uint64_t now = now_ns();
	if (t->last_release_ns) {
		double dt = (double)(now - t->last_release_ns) / 1e9;
		x->e->step_s = x->e->step_s > 0 ? x->e->step_s + 0.05 * (dt - x->e->step_s) : dt;
	}
	t->last_release_ns = now;
}

static void pf_releases(struct engine *e, struct trainer *t)
{
	if (!t->attached || t->resetting)
		return;
	struct rel_ctx x = { e, t };
	const struct ctrl_slots ops = { slot_held, slot_release, &x };
	uint32_t prod = atomic_load_explicit(t->rel.prod, memory_order_acquire);
	uint32_t cons = atomic_load_explicit(t->rel.cons, memory_order_relaxed);
	const char *why;
	int n = ctrl_take_releases(prod, &cons, t->rel.entries, t->nslots, &ops, &why);
	atomic_store_explicit(t->rel.cons, cons, memory_order_release);
	if (n < 0) {
		sess_evict(e, t, why);
		return;
	}
	if (n > 0) {
		pf_reclaim(t);
		check_done(e, t);
	}
}

static bool pf_can_prepare(struct engine *e, struct trainer *t)
{
	if (!t->attached || t->resetting || t->next_prep >= e->end || atomic_load(&e->stopping))
		return false;
	if (t->slots[t->next_prep & (t->nslots - 1)].st != SL_FREE)
		return false;
	/* stay `lookahead` batches ahead of what the trainer took; its consumer
	 * index is a hint: clamp it to what is possible */
	uint32_t unread = ctrl_unread(atomic_load_explicit(&t->co->prod, memory_order_relaxed),
				      atomic_load_explicit(&t->ci->cons, memory_order_relaxed),
				      t->nslots);
	uint64_t taken = t->next_pub - unread;
	return t->next_prep < taken + e->cfg->lookahead;
}

/* on_corrupt = skip: the first sample after s (cyclically) not known to be
 * corrupt and at most `room` bytes long; s itself when there is none. */
static uint32_t pf_substitute(const struct engine *e, uint32_t s, uint64_t room)
{
	uint64_t n = e->cat->nsamples;
	for (uint64_t k = 1; k < n; k++) {
		uint32_t x = (uint32_t)((s + k) % n);
		if (!e->bad[x] && e->cat->samples[x].length <= room)
			return x;
	}
	return s;
}

/* A read failed its format checks under on_corrupt = skip: read the
 * substitute into the same place instead and fix the waiting batches'
 * descriptors (not yet published). Returns false when nothing fits. */
bool pf_retarget_corrupt(struct engine *e, struct etask *tk)
{
	uint32_t s = tk->sample;
	if (!e->bad[s]) {
		e->bad[s] = 1;
		log_warn("%s: skipped (on_corrupt = skip)", tk->err);
	}
	uint64_t room = tk->to_cache ? ALIGN_UP(tk->len, (uint64_t)PLAN_RAM_ALIGN) : tk->len;
	if (tk->stage_rank >= 0)
		room = arena_stage_bytes(e, e->cat->samples[s].length, place_local_nvme(e, s));
	uint32_t x = pf_substitute(e, s, UINT64_MAX);
	if (x != s && e->cat->samples[x].length > room) {
		/* the next valid sample is bigger: give it fresh staging when the
		 * read's batch is a trainer's (the span is freed in order, after a
		 * later batch), else take the next one that fits */
		uint64_t off;
		struct trainer *t = tk->stage_rank >= 0 ? &e->tr[tk->stage_rank] : NULL;
		if (t && tk->nw == 1 && !tk->w[0].peer && t->gen == tk->w[0].b &&
		    stg_alloc(&t->stg, ALIGN_UP(e->cat->samples[x].length, (uint64_t)PLAN_RAM_ALIGN),
			      &off) == 0) {
			tk->dst_off = off;
			struct seer_wire_sample *d = (struct seer_wire_sample *)(
				trainer_wslot(t, (uint32_t)(tk->w[0].c & (t->nslots - 1))) + 1);
			d[tk->w[0].i].offset = off;
		} else {
			x = pf_substitute(e, s, room);
		}
	}
	if (x == s)
		return false;
	const struct cat_sample *cs = &e->cat->samples[x];
	for (uint32_t k = 0; k < tk->nw; k++) {
		const struct waiter *w = &tk->w[k];
		if (w->peer)
			return false; /* a peer asked for s itself: it gets the error */
		struct trainer *t = &e->tr[w->a];
		if (t->gen != w->b || !t->attached)
			continue;
		struct seer_wire_sample *d =
			(struct seer_wire_sample *)(trainer_wslot(t, (uint32_t)(w->c & (t->nslots - 1))) + 1);
		d[w->i].id = x;
		d[w->i].length = cs->length;
		d[w->i].label = cs->label;
		d[w->i].type = cs->type;
	}
	if (tk->to_cache) {
		/* s's cache slot now carries x's bytes for these batches only */
		e->cstate[tk->ckey] = CS_ABSENT;
		tk->to_cache = false;
		if (tk->fill)
			e->fill_inflight--;
		tk->fill = false;
	}
	if (tk->to_nvme) {
		/* s will never get an NVMe copy: whoever followed this load reads
		 * (and substitutes) on its own */
		e->cstate[s] = CS_ABSENT;
		nvme_release_followers(e, tk, false);
	}
	tk->to_nvme = false;
	tk->sample = x;
	tk->len = cs->length;
	tk->err[0] = '\0';
	stats_epoch(e, e->epochs_done)->skipped++;
	return true;
}

/* The task loading RAM key `key` (sample s) for global batch g (0: now):
 * the one loading it already, made at least that urgent, or a new PFS read
 * into the slot. fill: a load ahead of need, counted in fill's budget. The
 * one way a RAM-cache load starts (prepare, fill, a peer's request). */
struct etask *pf_ram_load(struct engine *e, uint32_t key, uint32_t s, uint64_t g, bool fill)
{
	uint32_t st = e->cstate[key];
	struct etask *tk;
	if (st >= CS_TASK0) {
		tk = task_get(e, st - CS_TASK0);
		task_need(e, tk, g);
		return tk;
	}
	tk = task_new(e);
	tk->sample = s;
	tk->to_cache = true;
	tk->ckey = key;
	tk->fill = fill;
	tk->dst_off = arena_key_off(e, key);
	tk->len = e->cat->samples[s].length;
	e->cstate[key] = CS_TASK0 + tk->id;
	e->fill_left--;
	if (fill)
		e->fill_inflight++;
	task_submit(e, tk, g);
	return tk;
}

/* The samples of t's batch g (corrupt ones substituted) and where each is
 * served from, into the batch scratch; returns the staging bytes they need. */
static uint64_t batch_route(struct engine *e, const struct trainer *t, uint64_t g, uint32_t n)
{
	const struct smp_shape *sh = &e->sh;
	uint64_t epoch = g / sh->bpe, step = g % sh->bpe;
	const uint32_t *order = smp_cache_epoch(&e->smp, epoch);
	if (!order) {
		log_error("out of memory computing epoch %llu's order", (unsigned long long)epoch);
		abort();
	}
	struct route_view v = place_view(e);
	uint64_t need = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t s = smp_at(sh, order, smp_position(sh, t->rank, step, i));
		if (UNLIKELY(e->bad[s]))
			s = pf_substitute(e, s, UINT64_MAX);
		e->ids[i] = s;
		e->routes[i] = (uint8_t)route_sample(&v, t->rank, s, &e->keys[i]);
		if (e->routes[i] != ROUTE_RAM)
			need += arena_stage_bytes(e, e->cat->samples[s].length, e->routes[i] == ROUTE_NVME);
	}
	return need;
}

/* Slot idx's header for batch g of n samples; returns its descriptors. */
static struct seer_wire_sample *slot_begin(struct trainer *t, uint32_t idx, const struct smp_shape *sh,
					   uint64_t g, uint32_t n)
{
	struct seer_wire_slot *ws = trainer_wslot(t, idx);
	ws->global = g;
	ws->epoch = g / sh->bpe;
	ws->step = g % sh->bpe;
	ws->n = n;
	ws->flags = 0;
	ws->status = 0;
	ws->msg[0] = '\0';
	return (struct seer_wire_sample *)(ws + 1);
}

/* Sample i of t's batch g is in the RAM cache: point at its slot, and wait
 * for its load unless it is loaded. */
static void prep_ram(struct engine *e, struct trainer *t, struct tslot *sl, struct seer_wire_sample *d,
		     uint32_t key, uint32_t s, uint32_t i)
{
	d->offset = arena_key_off(e, key);
	if (e->cstate[key] == CS_READY) {
		struct epoch_stats *es = stats_epoch(e, sl->g / e->sh.bpe);
		es->ram_samples++;
		es->ram_bytes += d->length;
		return;
	}
	struct etask *tk = pf_ram_load(e, key, s, sl->g, false);
	task_wait(tk, t->rank, t->gen, sl->g, i);
	sl->pending++;
}

/* Sample i of t's batch comes through its staging at d->offset: the read
 * (from NVMe, a peer or the PFS) that puts it there. */
static void prep_staged(struct engine *e, struct trainer *t, struct tslot *sl,
			const struct seer_wire_sample *d, enum route_src src, uint32_t s, uint32_t i)
{
	struct etask *tk = task_new(e);
	tk->sample = s;
	tk->dst_off = d->offset;
	tk->len = d->length;
	tk->need_g = sl->g;
	tk->stage_rank = (int32_t)t->rank;
	task_wait(tk, t->rank, t->gen, sl->g, i);
	t->inflight++;
	sl->pending++;
	if (src == ROUTE_NVME) {
		struct etask *ld = nvme_claim(e, tk, s);
		if (ld) {
			/* being loaded for someone else: read its NVMe copy once
			 * written, rather than the PFS a second time */
			task_need(e, ld, sl->g);
			tk->kind = TK_NVME_READ;
			tk->next_follower = ld->followers;
			ld->followers = tk;
			return;
		}
	} else if (src == ROUTE_PEER) {
		tk->kind = TK_PEER;
		net_fetch(e->net, e->plan.owner[s], s, e->abase + tk->dst_off, tk->len, tk);
		return;
	}
	task_submit(e, tk, sl->g);
}

/* Prepare batch next_prep of t; false when staging is full. */
static bool pf_prepare(struct engine *e, struct trainer *t)
{
	uint64_t g = t->next_prep;
	uint32_t n = smp_batch_len(&e->sh, g % e->sh.bpe);
	uint64_t off;
	if (stg_alloc(&t->stg, batch_route(e, t, g, n), &off) != 0)
		return false;
	uint32_t idx = (uint32_t)(g & (t->nslots - 1));
	struct tslot *sl = &t->slots[idx];
	*sl = (struct tslot){ .st = SL_PREP, .g = g, .vend = stg_mark(&t->stg) };
	struct seer_wire_sample *d = slot_begin(t, idx, &e->sh, g, n);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t s = e->ids[i];
		const struct cat_sample *cs = &e->cat->samples[s];
		d[i] = (struct seer_wire_sample){
			.id = s, .length = cs->length, .label = cs->label, .type = cs->type,
		};
		enum route_src src = e->routes[i];
		if (src == ROUTE_RAM) {
			prep_ram(e, t, sl, &d[i], e->keys[i], s, i);
			continue;
		}
		/* staging: NVMe transfers at the tier's alignment */
		uint64_t align = src == ROUTE_NVME ? e->nvme_align : PLAN_RAM_ALIGN;
		d[i].offset = ALIGN_UP(off, align);
		off = d[i].offset + ALIGN_UP((uint64_t)cs->length, align);
		prep_staged(e, t, sl, &d[i], src, s, i);
	}
	if (sl->pending == 0)
		sl->st = SL_READY;
	t->next_prep++;
	return true;
}

static void pf_publish(struct engine *e, struct trainer *t)
{
	bool any = false;
	while (t->next_pub < t->next_prep) {
		uint32_t idx = (uint32_t)(t->next_pub & (t->nslots - 1));
		struct tslot *sl = &t->slots[idx];
		if (sl->st != SL_READY)
			break;
		struct seer_wire_slot *ws = trainer_wslot(t, idx);
		ws->status = sl->status;
		if (ring_push(&t->out, idx) != 0)
			break; /* only a trainer that corrupts its consumer index gets here */
		sl->st = SL_PUB;
		t->next_pub++;
		t->batches++;
		t->samples += ws->n;
		uint64_t bytes = 0;
		const struct seer_wire_sample *d = (const void *)(ws + 1);
		for (uint32_t i = 0; i < ws->n; i++)
			bytes += d[i].length;
		t->bytes += bytes;
		stats_delivered(e, ws->epoch, bytes, ws->n);
		if (sl->status)
			stats_epoch(e, ws->epoch)->failed++;
		any = true;
	}
	if (any)
		sess_doorbell(t);
}
/* A RAM-cache load ended: the slot is READY (the release store publishes
 * the bytes to the network thread's lookup), or ABSENT again for the next
 * need to retry. */
void pf_ram_loaded(struct engine *e, struct etask *tk, int status)
{
	if (status == 0) {
		atomic_store_explicit(&e->cstate[tk->ckey], CS_READY, memory_order_release);
		e->cache_loaded++;
		e->cache_loaded_bytes += tk->len;
	} else {
		e->cstate[tk->ckey] = CS_ABSENT;
		e->fill_left++;
	}
	if (tk->fill)
		e->fill_inflight--;
}

/* A read that trainer batch w waits for ended: the batch is ready once its
 * last sample is; the first error is the batch's. */
void pf_sample_done(struct engine *e, const struct waiter *w, int status, const char *err)
{
	struct trainer *t = &e->tr[w->a];
	if (t->gen != w->b || !t->attached)
		return;
	uint32_t idx = (uint32_t)(w->c & (t->nslots - 1));
	struct tslot *sl = &t->slots[idx];
	if (sl->st != SL_PREP || sl->g != w->c)
		return;
	if (status != 0 && sl->status == 0) {
		sl->status = status == -ECANCELED ? SEER_ESHUTDOWN : status;
		str_copy(trainer_wslot(t, idx)->msg, SEER_ERRMSG_MAX, err[0] ? err : seer_strerror(status));
	}
	if (--sl->pending == 0)
		sl->st = SL_READY;
}

/* Load cached samples ahead of need when the I/O threads have room: the
 * first epoch's PFS reads then run at full speed even when the trainers
 * are slower, and later epochs find them in RAM. */
static void pf_fill(struct engine *e)
{
	if (!e->plan_ready || e->fill_left == 0 || atomic_load(&e->stopping) || e->nlocal == 0)
		return;
	uint64_t min_prep = UINT64_MAX;
	for (uint32_t i = 0; i < e->nlocal; i++) {
		const struct trainer *t = &e->tr[e->local_ranks[i]];
		if (t->attached)
			min_prep = MIN(min_prep, t->next_prep);
	}
	if (min_prep == UINT64_MAX)
		return; /* nobody to fill for yet */
	if (e->fill_g < min_prep) {
		e->fill_g = min_prep;
		e->fill_r = 0;
	}
	uint32_t budget = (uint32_t)e->cfg->io_threads;
	const struct smp_shape *sh = &e->sh;
	struct route_view v = place_view(e);
	while (e->fill_inflight < budget && e->fill_g < e->end && e->fill_left > 0) {
		uint64_t g = e->fill_g, epoch = g / sh->bpe, step = g % sh->bpe;
		uint32_t rank = e->local_ranks[e->fill_r];
		if (++e->fill_r == e->nlocal) {
			e->fill_r = 0;
			e->fill_g++;
		}
		const struct trainer *t = &e->tr[rank];
		if (t->attached && g < t->next_prep)
			continue; /* prepare has seen this batch */
		const uint32_t *order = smp_cache_epoch(&e->smp, epoch);
		if (!order)
			return;
		uint32_t n = smp_batch_len(sh, step);
		for (uint32_t i = 0; i < n; i++) {
			uint32_t s = smp_at(sh, order, smp_position(sh, rank, step, i));
			uint32_t key = route_ram_key(&v, rank, s);
			if (key != ROUTE_NOKEY && e->cstate[key] == CS_ABSENT)
				pf_ram_load(e, key, s, g, true);
		}
	}
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
