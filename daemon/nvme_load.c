/* The NVMe tier's part in loads: a task that needs a copy being written
 * follows that load instead of reading the PFS again (nvme_load_claim); a
 * PFS read the plan keeps on this node's NVMe is written there next
 * (nvme_load_done, nvme_load_write); a bad copy is read from the PFS and
 * written again (nvme_load_read_failed).
 *
 * Owns the followers of a load (each task's `followers` list) and the
 * NVMe states in cstate; the tier itself (file, checksums, counts) is
 * nvme.c's, the tasks task.c's. Dispatcher thread only. The engine hands
 * it the completions that concern it (task_finish); the memory an NVMe
 * write pinned is given back there too, not from here. Failure: a write or
 * read error disables the tier (nvme_disable) and the followers read the
 * PFS; a copy failing its checksum is never delivered. */
#define _GNU_SOURCE
#include <string.h>

#include "../src/util/util.h"
#include "engine_int.h"
#include "nvme.h"
#include "seer.h"

/* Point tk at the written NVMe copy of its sample (its one way to read it). */
void nvme_load_copy(struct engine *e, struct etask *tk)
{
	tk->kind = TK_NVME_READ;
	tk->nvme_off = place_local_off(e, tk->sample);
	tk->sum = nvme_sum(e->nvme, tk->sample);
}

/* tk reads s, which this node keeps on NVMe: from the copy when it is
 * written, else from the PFS writing the copy afterwards (tk then loads it).
 * When another task is loading the copy, returns that task and leaves tk
 * as it is. */
struct etask *nvme_load_claim(struct engine *e, struct etask *tk, uint32_t s)
{
	uint32_t st = e->cstate[s];
	if (st == CS_READY) {
		nvme_load_copy(e, tk);
	} else if (st == CS_ABSENT) {
		tk->to_nvme = true; /* this node's one PFS read of it, kept on NVMe */
		e->cstate[s] = CS_TASK0 + tk->id;
	} else {
		return task_get(e, st - CS_TASK0);
	}
	return NULL;
}

/* A load ended: its followers read the fresh NVMe copy (ok) or the PFS. */
void nvme_load_release(struct engine *e, struct etask *tk, bool ok)
{
	struct etask *f = tk->followers;
	tk->followers = NULL;
	while (f) {
		struct etask *next = f->next_follower;
		f->next_follower = NULL;
		if (ok) {
			nvme_load_copy(e, f);
		} else {
			f->kind = TK_PFS;
		}
		task_submit(e, f, f->need_g);
		f = next;
	}
}

/* An NVMe write finished: the copy is usable, or the tier is not; whoever
 * followed the load reads the copy or the PFS. */
void nvme_load_written(struct engine *e, struct etask *tk, int status)
{
	if (status == 0) {
		nvme_mark_written(e->nvme, tk->sample, tk->sum, tk->len);
		atomic_store_explicit(&e->cstate[tk->sample], CS_READY, memory_order_release);
		stats_epoch(e, e->st.epochs_done)->nvme_written++;
	} else {
		e->cstate[tk->sample] = CS_ABSENT;
		nvme_disable(e->nvme, tk->err[0] ? tk->err : strerror(-status));
	}
	nvme_load_release(e, tk, status == 0);
	/* the memory it read (a batch's staging, a bounce slot) is given back
	 * by the engine to its owner (task_finish) */
}

/* A PFS read that must also land on NVMe: queue the write, pinning the
 * memory it reads (the batch's staging, or a bounce slot). */
void nvme_load_write(struct engine *e, struct etask *tk)
{
	struct etask *w = task_new(e);
	w->kind = TK_NVME_WRITE;
	w->sample = tk->sample;
	w->dst_off = tk->dst_off;
	w->len = tk->len;
	w->nvme_off = place_local_off(e, tk->sample);
	w->bg_key = tk->bg_key; /* a background fill's write stays in the background */
	e->cstate[tk->sample] = CS_TASK0 + w->id;
	w->followers = tk->followers;
	tk->followers = NULL;
	if (tk->bounce >= 0) {
		w->bounce = tk->bounce;
		e->peers.refs[tk->bounce]++;
	} else {
		/* the one trainer waiter of a staging read */
		w->pin = tk->w[0];
		w->stage_rank = tk->stage_rank;
		struct trainer *t = &e->tr[w->pin.a];
		t->inflight++;
		struct tslot *sl = &t->slots[w->pin.c & (t->nslots - 1)];
		if (t->gen == w->pin.b && sl->g == w->pin.c)
			sl->pins++;
	}
	task_submit(e, w, tk->need_g);
}

/* A PFS read that was to give this node its NVMe copy ended: the copy is
 * written next, or (failed, or the tier is off) whoever followed the load
 * reads on its own. */
void nvme_load_done(struct engine *e, struct etask *tk, int status)
{
	if (status == 0 && nvme_on(e->nvme)) {
		nvme_load_write(e, tk);
	} else {
		e->cstate[tk->sample] = CS_ABSENT;
		nvme_load_release(e, tk, false);
	}
}

/* tk's NVMe copy was bad or unreadable: it is never delivered. tk reads the
 * PFS instead and, while the tier works, writes a fresh copy. */
void nvme_load_read_failed(struct engine *e, struct etask *tk, int status)
{
	if (status == SEER_EDATASET) {
		stats_epoch(e, e->st.epochs_done)->nvme_corrupt++;
		log_warn("%s: reading sample %u from the PFS instead", tk->err, tk->sample);
	} else {
		/* the device fails: said once, and no batch plans on it again */
		nvme_disable(e->nvme, tk->err[0] ? tk->err : strerror(-status));
	}
	tk->kind = TK_PFS;
	tk->err[0] = '\0';
	tk->to_nvme = nvme_on(e->nvme) && e->cstate[tk->sample] == CS_READY;
	if (tk->to_nvme)
		e->cstate[tk->sample] = CS_TASK0 + tk->id;
}
