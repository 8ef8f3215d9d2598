/* Prefetch: each trainer's stream of batches, from sampling to release.
 *
 * Owns the batch slots (FREE -> PREP -> READY -> PUB -> REL -> FREE): which
 * batch comes next (lookahead), its samples (corrupt ones substituted under
 * on_corrupt = skip), where each is served from (route.c), its staging
 * span (staging.c), its descriptors in the trainer's control region, the
 * reads it starts or joins, publication in order, the trainer's releases
 * and in-order reclaim. Also fill: loading planned RAM-cache samples ahead
 * of need while the I/O threads have room; and the outlook: the PFS reads
 * the plan makes in the trainers' next drain_window_s, published for the
 * checkpoint drain (pf_outlook). The data flow of one batch:
 *
 *   pf_prepare -> task.c (reads) -> worker.c (I/O threads: bytes land in
 *   staging or a RAM slot) -> task_finish -> pf_sample_done -> pf_publish
 *   -> the trainer -> pf_releases -> pf_reclaim
 *
 * Dispatcher thread only; the trainer's side of the control region is read
 * once per value and range-checked (src/util/ctrl.c). Failure: a batch whose
 * sample failed is published with the first error (the trainer sees it in
 * the batch); full staging waits for releases (prepare returns false), and a
 * trainer whose own held batches fill it is told so (pf_check_held); a
 * trainer sending bad releases is evicted. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../src/util/ctrl.h"
#include "../src/util/util.h"
#include "engine_int.h"
#include "seer.h"

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
	if (!t->done && t->next_pub == e->pl.end && sess_first_unreleased(t) == e->pl.end) {
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
		x->e->st.step_s = x->e->st.step_s > 0 ? x->e->st.step_s + 0.05 * (dt - x->e->st.step_s) : dt;
	}
	t->last_release_ns = now;
}

const char *pf_releases(struct engine *e, struct trainer *t)
{
	if (!t->attached || t->resetting)
		return NULL;
	struct rel_ctx x = { e, t };
	const struct ctrl_slots ops = { slot_held, slot_release, &x };
	uint32_t prod = atomic_load_explicit(t->rel.prod, memory_order_acquire);
	uint32_t cons = atomic_load_explicit(t->rel.cons, memory_order_relaxed);
	const char *why;
	int n = ctrl_take_releases(prod, &cons, t->rel.entries, t->nslots, &ops, &why);
	atomic_store_explicit(t->rel.cons, cons, memory_order_release);
	/* its consumer index reached what a seek skipped to: counted as is again */
	if (t->ring_skipping &&
	    t->ring_skip - atomic_load_explicit(&t->ci->cons, memory_order_relaxed) - 1u >= t->nslots)
		t->ring_skipping = false;
	if (n < 0)
		return why; /* the caller evicts it (sess_evict) */
	if (n > 0) {
		pf_reclaim(t);
		check_done(e, t);
		resume_note(e, t); /* in place: exact after SIGKILL too */
	}
	return NULL;
}

/* Whether t's next batch is prepared now: its slot free, lookahead and
 * pacing (route_next); a paced prepare sets e->pf.pace_wake_ns for the
 * dispatcher's sleep and counts in e->pf.paced once per take. */
bool pf_can_prepare(struct engine *e, struct trainer *t)
{
	if (!t->attached || t->resetting || t->next_prep >= e->pl.end || atomic_load(&e->stopping))
		return false;
	if (t->slots[t->next_prep & (t->nslots - 1)].st != SL_FREE)
		return false;
	/* stay `lookahead` batches ahead of what the trainer took; its consumer
	 * index is a hint: clamp it to what is possible */
	uint64_t taken = t->next_pub - sess_unread(t);
	if (taken != t->pace_taken) {
		t->pace_taken = taken;
		t->pace_ns = now_ns();
		t->pace_counted = false;
	}
	struct route_next n = { .next_prep = t->next_prep, .next_pub = t->next_pub, .taken = taken,
				.lookahead = e->cfg->prefetch.lookahead, .pace = e->cfg->prefetch.pace,
				.step_s = e->st.step_s, .taken_ns = t->pace_ns, .now_ns = now_ns() };
	uint64_t until = 0;
	enum route_go go = route_next(&n, &until);
	if (go == ROUTE_PACED) { /* the dispatcher sleeps until the first such end */
		if (!e->pf.pace_wake_ns || until < e->pf.pace_wake_ns)
			e->pf.pace_wake_ns = until;
		if (!t->pace_counted) {
			t->pace_counted = true;
			e->pf.paced++;
		}
	}
	return go == ROUTE_PREPARE;
}

/* Bytes a read of x puts in place: its decoded-cache entry (blob) or the file. */
static uint64_t read_len(const struct engine *e, uint32_t x, bool blob)
{
	return blob && xfs_blob(e, x) ? xfs_src_len(e, x) : e->cat->samples[x].length;
}

/* Whether t's own held batches are all that keeps its next batch from being
 * prepared: it took every batch published, none is being prepared, and the
 * oldest batch not yet reclaimed is one it holds (staging and slots are
 * reclaimed in order, so nothing frees until it releases that one). Told to
 * the trainer through ctrl_out's held_block/held_rel (seer_proto.h): its
 * seer_next then fails at once with -EDEADLK instead of waiting for ever. */
void pf_check_held(struct engine *e, struct trainer *t)
{
	if (!t->attached || !t->co)
		return;
	bool stuck = false;
	if (!t->resetting && t->next_prep < e->pl.end && t->next_pub == t->next_prep &&
	    t->tail_g < t->next_pub && !atomic_load(&e->stopping)) {
		uint32_t mask = t->nslots - 1;
		stuck = sess_unread(t) == 0 && t->slots[t->tail_g & mask].st == SL_PUB &&
			(t->blocked || t->slots[t->next_prep & mask].st != SL_FREE);
	}
	uint32_t rel = atomic_load_explicit(t->rel.cons, memory_order_relaxed);
	bool was = atomic_load_explicit(&t->co->held_block, memory_order_relaxed);
	if (!stuck) {
		if (was)
			atomic_store_explicit(&t->co->held_block, 0, memory_order_release);
		return;
	}
	if (was && atomic_load_explicit(&t->co->held_rel, memory_order_relaxed) == rel)
		return; /* told already, and it released nothing since */
	atomic_store_explicit(&t->co->held_rel, rel, memory_order_relaxed);
	atomic_store_explicit(&t->co->held_block, 1, memory_order_release);
	sess_doorbell(t); /* a seer_next already waiting must see it */
	uint32_t held = 0;
	for (uint64_t g = t->tail_g; g < t->next_pub; g++)
		held += t->slots[g & (t->nslots - 1)].st == SL_PUB;
	uint64_t epoch, step;
	jobrec_pos(e, t->tail_g, &epoch, &step);
	log_info("trainer rank %u holds %u batches (from epoch %llu step %llu; it may hold %u) "
		 "and its staging or batch slots are full: its next batch waits for a release",
		 t->rank, held, (unsigned long long)epoch, (unsigned long long)step, t->held);
}

/* on_corrupt = skip: the first sample after s (cyclically) not known to be
 * corrupt and at most `room` bytes long (as read for a blob or not); s
 * itself when there is none. */
static uint32_t substitute(const struct engine *e, uint32_t s, uint64_t room, bool blob)
{
	uint64_t n = e->cat->nsamples;
	for (uint64_t k = 1; k < n; k++) {
		uint32_t x = (uint32_t)((s + k) % n);
		if (!e->pl.bad[x] && read_len(e, x, blob) <= room)
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
	if (!e->pl.bad[s]) {
		e->pl.bad[s] = 1;
		log_warn("%s: skipped (on_corrupt = skip)", tk->err);
	}
	uint64_t room = tk->to_cache ? ALIGN_UP(tk->len, (uint64_t)PLAN_RAM_ALIGN) : tk->len;
	if (tk->stage_rank >= 0)
		room = arena_stage_bytes(e, read_len(e, s, tk->blob), place_local_nvme(e, s));
	uint32_t x = substitute(e, s, UINT64_MAX, tk->blob);
	uint64_t xlen = read_len(e, x, tk->blob);
	if (x != s && xlen > room) {
		/* the next valid sample is bigger: give it fresh staging when the
		 * read's batch is a trainer's (the span is freed in order, after a
		 * later batch), else take the next one that fits */
		uint64_t off;
		struct trainer *t = tk->stage_rank >= 0 ? &e->tr[tk->stage_rank] : NULL;
		if (t && tk->nw == 1 && !tk->w[0].peer && t->gen == tk->w[0].b &&
		    stg_alloc(&t->stg, ALIGN_UP(xlen, (uint64_t)PLAN_RAM_ALIGN), &off) == 0) {
			tk->dst_off = off;
			struct seer_wire_sample *d = (struct seer_wire_sample *)(
				trainer_wslot(t, (uint32_t)(tk->w[0].c & (t->nslots - 1))) + 1);
			if (!e->xf) /* with a transform it describes the tensor */
				d[tk->w[0].i].offset = off;
		} else {
			x = substitute(e, s, room, tk->blob);
		}
	}
	if (x == s)
		return false;
	const struct catalog_sample *cs = &e->cat->samples[x];
	for (uint32_t k = 0; k < tk->nw; k++) {
		const struct waiter *w = &tk->w[k];
		if (w->peer)
			return false; /* a peer asked for s itself: it gets the error */
		struct trainer *t = &e->tr[w->a];
		if (t->gen != w->b || !t->attached)
			continue;
		uint64_t epoch, step;
		jobrec_pos(e, w->c, &epoch, &step);
		stats_epoch(e, epoch)->skipped++; /* a substitute delivered */
		struct seer_wire_sample *d =
			(struct seer_wire_sample *)(trainer_wslot(t, (uint32_t)(w->c & (t->nslots - 1))) + 1);
		d[w->i].id = x;
		d[w->i].label = cs->label;
		if (!e->xf) { /* with a transform they describe the tensor */
			d[w->i].length = cs->length;
			d[w->i].type = cs->type;
		}
	}
	if (tk->to_cache) {
		/* s's cache slot now carries x's bytes for these batches only */
		e->cstate[tk->ckey] = CS_ABSENT;
		tk->to_cache = false;
		if (tk->fill)
			e->pf.fill_inflight--;
		tk->fill = false;
	}
	if (tk->to_nvme) {
		/* s will never get an NVMe copy: whoever followed this load reads
		 * (and substitutes) on its own */
		e->cstate[s] = CS_ABSENT;
		nvme_load_release(e, tk, false);
	}
	tk->to_nvme = false;
	tk->sample = x;
	tk->len = read_len(e, x, tk->blob);
	tk->blob = tk->blob && xfs_blob(e, x);
	tk->err[0] = '\0';
	return true;
}

/* Bytes of s staged from `src`: NVMe copies and peers hold its decoded
 * image under transform.cache = decoded; the PFS the file. */
static uint64_t staged_len(const struct engine *e, uint32_t s, enum route_src src)
{
	return src == ROUTE_NVME || src == ROUTE_PEER ? xfs_src_len(e, s) : e->cat->samples[s].length;
}

/* The samples of t's batch g (corrupt ones substituted: *subs of them) and
 * where each is served from, into the batch scratch (*n of them); returns
 * the staging bytes they need. */
static uint64_t batch_route(struct engine *e, const struct trainer *t, uint64_t g, uint32_t *n,
			    uint32_t *subs)
{
	*n = jobrec_batch(e, t->rank, g, e->pl.ids);
	struct route_view v = place_view(e);
	uint64_t need = 0;
	for (uint32_t i = 0; i < *n; i++) {
		uint32_t s = e->pl.ids[i];
		if (UNLIKELY(e->pl.bad[s])) {
			/* known corrupt: substituted in every epoch (counted by the
			 * caller once the batch is prepared) */
			s = substitute(e, s, UINT64_MAX, false);
			(*subs)++;
		}
		e->pl.ids[i] = s;
		e->pl.routes[i] = (uint8_t)route_sample(&v, t->rank, s, &e->pl.keys[i]);
		if (e->pl.routes[i] != ROUTE_RAM)
			need += arena_stage_bytes(e, staged_len(e, s, e->pl.routes[i]),
						  e->pl.routes[i] == ROUTE_NVME);
	}
	return need;
}

/* Slot idx's header for batch g of n samples; returns its descriptors. */
static struct seer_wire_sample *slot_begin(const struct engine *e, struct trainer *t, uint32_t idx,
					   uint64_t g, uint32_t n)
{
	struct seer_wire_slot *ws = trainer_wslot(t, idx);
	ws->global = g;
	jobrec_pos(e, g, &ws->epoch, &ws->step);
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
		uint64_t epoch, step;
		jobrec_pos(e, sl->g, &epoch, &step);
		struct epoch_stats *es = stats_epoch(e, epoch);
		es->ram_samples++;
		es->ram_bytes += d->length;
		if (place_is_replica(e, key)) {
			es->repl_samples++;
			es->repl_bytes += d->length;
		}
		if (e->xf) /* its tensor from the slot, read in place */
			xfs_ram_ready(e, t, sl, i, key, s);
		return;
	}
	struct etask *tk = ram_load(e, key, s, sl->g, false);
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
	tk->blob = (src == ROUTE_NVME || src == ROUTE_PEER) && xfs_blob(e, s);
	tk->need_g = sl->g;
	tk->stage_rank = (int32_t)t->rank;
	task_wait(tk, t->rank, t->gen, sl->g, i);
	t->inflight++;
	sl->pending++;
	if (src == ROUTE_NVME) {
		struct etask *ld = nvme_load_claim(e, tk, s);
		if (ld) {
			/* being loaded for someone else: read its NVMe copy once
			 * written, rather than the PFS a second time */
			task_need(e, ld, sl->g);
			tk->kind = TK_NVME_READ;
			tk->next_follower = ld->followers;
			ld->followers = tk;
			return;
		}
		if (tk->to_nvme && repl_fetch(e, tk))
			return; /* a replica not filled yet: this read fills it */
	} else if (src == ROUTE_PEER) {
		tk->kind = TK_PEER;
		net_fetch(e->peers.net, e->plan.owner[s], s, e->ar.base + tk->dst_off, tk->len, tk);
		return;
	}
	task_submit(e, tk, sl->g);
}

/* Prepare batch next_prep of t; false when staging is full. */
bool pf_prepare(struct engine *e, struct trainer *t)
{
	uint64_t g = t->next_prep;
	uint32_t n, subs = 0;
	bool pfs = false;
	uint64_t off, need = batch_route(e, t, g, &n, &subs);
	uint64_t tensor = xfs_tensor_bytes(e, n); /* the batch tensor, first */
	if (stg_alloc(&t->stg, need + tensor, &off) != 0)
		return false; /* routed again when staging frees */
	if (subs) {
		uint64_t epoch, step;
		jobrec_pos(e, g, &epoch, &step);
		stats_epoch(e, epoch)->skipped += subs;
	}
	uint32_t idx = (uint32_t)(g & (t->nslots - 1));
	struct tslot *sl = &t->slots[idx];
	*sl = (struct tslot){ .st = SL_PREP, .g = g, .vend = stg_mark(&t->stg) };
	struct seer_wire_sample *d = slot_begin(e, t, idx, g, n);
	if (tensor)
		off = xfs_slot_begin(e, trainer_wslot(t, idx), n, off) + tensor - 64;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t s = e->pl.ids[i];
		const struct catalog_sample *cs = &e->cat->samples[s];
		d[i] = (struct seer_wire_sample){
			.id = s, .length = cs->length, .label = cs->label, .type = cs->type,
		};
		enum route_src src = e->pl.routes[i];
		pfs |= src == ROUTE_PFS;
		if (src == ROUTE_RAM) {
			prep_ram(e, t, sl, &d[i], e->pl.keys[i], s, i);
		} else {
			/* staging: NVMe transfers at the tier's alignment */
			uint64_t align = src == ROUTE_NVME ? nvme_align(e->nvme) : PLAN_RAM_ALIGN;
			d[i].length = staged_len(e, s, src);
			d[i].offset = ALIGN_UP(off, align);
			off = d[i].offset + ALIGN_UP(d[i].length, align);
			prep_staged(e, t, sl, &d[i], src, s, i);
		}
		if (tensor) /* the sample's place in the batch tensor */
			xfs_describe(e, trainer_wslot(t, idx), &d[i], i);
	}
	if (sl->pending == 0)
		sl->st = SL_READY;
	t->no_pfs_run = pfs ? 0 : t->no_pfs_run + (t->no_pfs_run < UINT32_MAX);
	t->next_prep++;
	return true;
}

void pf_publish(struct engine *e, struct trainer *t)
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
void pf_fill(struct engine *e)
{
	if (!e->plan_ready || e->pf.fill_left == 0 || atomic_load(&e->stopping) || e->pl.nlocal == 0)
		return;
	uint64_t min_prep = UINT64_MAX;
	for (uint32_t i = 0; i < e->pl.nlocal; i++) {
		const struct trainer *t = &e->tr[e->pl.local_ranks[i]];
		if (t->attached)
			min_prep = MIN(min_prep, t->next_prep);
	}
	if (min_prep == UINT64_MAX)
		return; /* nobody to fill for yet */
	if (e->pf.fill_g < min_prep) {
		e->pf.fill_g = min_prep;
		e->pf.fill_r = 0;
	}
	uint32_t budget = (uint32_t)e->cfg->prefetch.io_threads;
	struct route_view v = place_view(e);
	while (e->pf.fill_inflight < budget && e->pf.fill_g < e->pl.end && e->pf.fill_left > 0) {
		uint64_t g = e->pf.fill_g;
		uint32_t rank = e->pl.local_ranks[e->pf.fill_r];
		if (++e->pf.fill_r == e->pl.nlocal) {
			e->pf.fill_r = 0;
			e->pf.fill_g++;
		}
		const struct trainer *t = &e->tr[rank];
		if (t->attached && g < t->next_prep)
			continue; /* prepare has seen this batch */
		/* the batch scratch is free: prepare is done for this round */
		uint32_t n = jobrec_batch(e, rank, g, e->pl.ids);
		for (uint32_t i = 0; i < n; i++) {
			uint32_t s = e->pl.ids[i];
			uint32_t key = route_ram_key(&v, rank, s);
			/* (replicas have fills of their own: replica.c) */
			if (key != ROUTE_NOKEY && e->cstate[key] == CS_ABSENT &&
			    !place_is_replica(e, key))
				ram_load(e, key, s, g, true);
		}
	}
}

/* Samples pf_outlook looks at per call at most (about a millisecond): a
 * window it cuts short still counts the reads nearest to the trainers. */
#define PF_OUTLOOK_MAX (1u << 16)

void pf_outlook(struct engine *e)
{
	uint64_t reads = 0, bytes = 0;
	double win = e->cfg->checkpoint.drain_window_s;
	if (!e->plan_ready || win <= 0 || e->pl.nlocal == 0 || atomic_load(&e->stopping))
		goto out;
	/* the window in batches: drain_window_s of a trainer's steps; before a
	 * step time is known, the lookahead's */
	uint64_t nb = e->cfg->prefetch.lookahead;
	if (e->st.step_s > 0)
		nb = MAX(nb, (uint64_t)(win / e->st.step_s) + 1);
	struct route_view v = place_view(e);
	uint32_t seen = 0;
	for (uint32_t i = 0; i < e->pl.nlocal && seen < PF_OUTLOOK_MAX; i++) {
		const struct trainer *t = &e->tr[e->pl.local_ranks[i]];
		if (!t->attached || t->resetting)
			continue;
		/* batches before next_prep have their reads queued (pfs_queued) or done */
		uint64_t end = MIN(e->pl.end, t->next_prep + nb);
		for (uint64_t g = t->next_prep; g < end && seen < PF_OUTLOOK_MAX; g++) {
			uint32_t n = jobrec_batch(e, t->rank, g, e->pl.ids);
			seen += n;
			for (uint32_t k = 0; k < n; k++) {
				uint32_t s = e->pl.ids[k], key;
				enum route_src src = route_sample(&v, t->rank, s, &key);
				uint32_t st = src == ROUTE_RAM ? e->cstate[key]
					      : src == ROUTE_NVME ? e->cstate[s] : CS_ABSENT;
				if (route_reads_pfs(&v, src, key, s, st, e->repl.from_pfs)) {
					reads++;
					bytes += e->cat->samples[s].length;
				}
			}
		}
	}
out:
	atomic_store_explicit(&e->pf.outlook.soon_reads, reads, memory_order_relaxed);
	atomic_store_explicit(&e->pf.outlook.soon_bytes, bytes, memory_order_relaxed);
}
