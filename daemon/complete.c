/* Completions: what a finished task did, handed to the stages that own it.
 * The engine installs complete_task as the task pool's handler
 * (e->tasks.done); task_finish (task.c) calls it for every task the I/O
 * pool, the network thread or an extent is done with, so task.c calls no
 * stage above it. In order: a failed read tried again elsewhere (a corrupt
 * sample's substitute, a bad NVMe copy from the PFS), the caches it loads
 * (RAM slot, NVMe copy, replica: complete_landed), then each
 * waiter (a peer's request, a sample's tensor, a trainer's batch); an NVMe
 * write gives the memory it pinned back to its owner (the batch's staging,
 * a bounce slot); a read into a trainer's staging that was the last one a
 * reset waited for lets the reset finish.
 *
 * Dispatcher thread only. Failure: a read that fails and cannot be tried
 * elsewhere gives its error to every waiter (a trainer's batch carries the
 * first error of its samples); the retries its worker absorbed are counted
 * and warned about by the engine's tick. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "../src/util/util.h"
#include "engine_int.h"
#include "seer.h"

/* Retries that a failed read's worker absorbed (or not), for the stats and
 * the periodic warning. */
static void complete_note_retries(struct engine *e, struct etask *tk)
{
	if (tk->attempts <= 1)
		return;
	stats_epoch(e, e->st.epochs_done)->retries += tk->attempts - 1;
	e->self.retries_unreported += tk->attempts - 1;
	str_copy(e->self.last_retry, sizeof(e->self.last_retry), tk->err);
	tk->attempts = 1;
}

/* A failed read that is tried again elsewhere: a corrupt sample replaced by
 * its substitute (on_corrupt = skip), a bad NVMe copy read from the PFS.
 * True when tk went back to the pool. */
static bool complete_retry(struct engine *e, struct etask *tk, int status)
{
	/* (a background replica fill nobody waits for is not substituted: it
	 * fails, and the read that needs the replica substitutes) */
	if (status == SEER_EDATASET && e->skip_corrupt && tk->kind == TK_PFS &&
	    !(tk->repl_bg && tk->nw == 0) && pf_retarget_corrupt(e, tk)) {
		task_submit(e, tk, tk->need_g);
		return true;
	}
	if (tk->kind == TK_NVME_READ && status != 0) {
		nvme_load_read_failed(e, tk, status);
		task_submit(e, tk, tk->need_g);
		return true;
	}
	return false;
}

/* The read's bytes are in place at dst_off (status 0), or will not be: the
 * RAM slot or NVMe copy it was loading learns it. This is the dispatcher's
 * first look at the bytes before any batch or peer sees them. */
static void complete_landed(struct engine *e, struct etask *tk, int status)
{
	if (status == 0) {
		int src = tk->kind == TK_PEER ? SRC_PEER : tk->kind == TK_NVME_READ ? SRC_NVME : SRC_PFS;
		if (!tk->cut) /* a cut sample's time and bytes are its extent's */
			stats_observe(e, src, tk->io.t_end > tk->io.t_start
						      ? (double)(tk->io.t_end - tk->io.t_start) / 1e9
						      : 0.0, tk->len);
		/* PFS: what the format read, not the sample's length */
		stats_read(e, src, src == SRC_PFS ? tk->pfs_read : tk->len);
		if (src == SRC_NVME && place_is_replica(e, tk->sample)) {
			struct epoch_stats *es = stats_epoch(e, e->st.epochs_done);
			es->repl_samples++;
			es->repl_bytes += tk->len;
		}
		if (src == SRC_PFS && !tk->cut)
			stats_epoch(e, e->st.epochs_done)->pfs_reads++;
	} else if (status != -ECANCELED) {
		log_warn("%s", tk->err[0] ? tk->err : seer_strerror(status));
	}
	if (tk->to_nvme)
		nvme_load_done(e, tk, status);
	if (tk->to_cache)
		ram_load_done(e, tk, status);
	if (tk->repl) {
		repl_landed(e, tk, status);
		if (tk->repl_bg && tk->bounce >= 0) {
			/* the NVMe write, queued by now, holds the slot on its own */
			peer_bounce_unref(e, tk->bounce);
			tk->bounce = -1;
		}
	}
}

/* tk no longer reads into its trainer's staging: a reset waiting for the
 * last such read can go on. */
static void complete_unstage(struct engine *e, struct etask *tk)
{
	if (tk->stage_rank < 0)
		return;
	complete_unstaged(e, &e->tr[tk->stage_rank]);
}

/* A read or transform job no longer writes into t's staging: a reset
 * waiting for the last one goes on (the transform stage's `unstaged`). */
void complete_unstaged(struct engine *e, struct trainer *t)
{
	t->inflight--;
	if (t->resetting && t->inflight == 0)
		sess_finish_reset(e, t);
}

/* An NVMe write no longer reads the memory it pinned: the batch whose
 * staging it wrote from (its owner, prefetch.c, may reclaim it), or the
 * bounce slot (peer.c). */
static void complete_unpin(struct engine *e, struct etask *tk)
{
	if (!tk->pin.peer && tk->stage_rank >= 0) {
		struct trainer *t = &e->tr[tk->pin.a];
		if (t->gen == tk->pin.b && t->slots) {
			struct tslot *sl = &t->slots[tk->pin.c & (t->nslots - 1)];
			if (sl->g == tk->pin.c && sl->pins > 0) {
				sl->pins--;
				pf_reclaim(t);
			}
		}
	}
	if (tk->bounce >= 0)
		peer_bounce_unref(e, tk->bounce);
}

/* The pool (or the network thread) is done with tk: status 0 or why not
 * (installed as e->tasks.done; task_finish calls it). */
void complete_task(struct engine *e, struct etask *tk, int status)
{
	if (tk->kind == TK_PFS && e->ext.pfs_q && e->ext.pfs_q[tk->sample] == tk->id + 1)
		e->ext.pfs_q[tk->sample] = 0;
	if (tk->kind == TK_EXTENT) {
		complete_note_retries(e, tk);
		ext_done(e, tk, status);
		return;
	}
	if (tk->kind == TK_NVME_WRITE) {
		nvme_load_written(e, tk, status);
		complete_unpin(e, tk);
		complete_unstage(e, tk);
		task_free(e, tk);
		return;
	}
	complete_note_retries(e, tk);
	if (complete_retry(e, tk, status))
		return;
	complete_landed(e, tk, status);
	for (uint32_t i = 0; i < tk->nw; i++) {
		const struct waiter *w = &tk->w[i];
		if (w->peer)
			peer_answer(e, tk, w, status);
		else if (e->xf && status == 0)
			xfs_after_read(e, tk, w); /* the bytes are in place: its tensor next */
		else
			pf_sample_done(e, w, status, tk->err);
	}
	complete_unstage(e, tk);
	task_free(e, tk);
}
