/* prefault.c: mapping the arena pages the daemon has filled into this
 * process before the trainer reads them.
 *
 * Why: a trainer's first read of an arena page costs a page fault (the
 * kernel maps 16 pages per fault with fault-around) and, under a
 * shadow-paging hypervisor (PVM here: docs/results.md, "Warm delivery"), a
 * second, hidden fault taken by the host on the first access to every page
 * through a new PTE — ~2.3 us per 4 KiB page, counted as the trainer's user
 * time. A trainer reads a random quarter of the cache per epoch, so without
 * this the cost falls off only as the share of the cache it has touched grows
 * (25%, 44%, 58%, ... of the pages): warm epochs started slow and sped up
 * epoch after epoch. Mapping every filled page once, ahead, puts the whole
 * cost in the cold epoch and leaves every warm epoch at its floor.
 *
 * How: the arena's filled pages are the memfd's pages in memory (the daemon
 * never punches holes). Each run of them is mapped with MADV_POPULATE_READ
 * (one call instead of a fault per 16 pages) and then read one byte per page
 * (the hidden fault; a TLB miss elsewhere). Holes are never touched: a read
 * fault on a shmem hole would allocate a page the daemon may never fill.
 * Only this trainer's share of staging is mapped: the daemon publishes the
 * shares at the rank map (seer_ctrl_out.stage_*), and the other trainers'
 * pages are marked done before the helper's first pass (with 2 trainers a
 * node, half of staging: 16 MiB each in the lustre scenarios, 128 MiB in
 * ResNet-50's, each page a hidden fault here).
 * Every page mapped is marked done (a bit per page: 32 KiB per GiB of arena)
 * and skipped by later passes; where pages are not done, lseek SEEK_DATA
 * skips a hole in one call and mincore, over at most PF_STEP, says how far
 * the present pages go. Later passes thus cost what is new, not the arena:
 * 0.01-0.1 ms for a 395 MiB arena with nothing new. (The first version
 * marked 2 MiB chunks done only when present in full and found runs with
 * SEEK_HOLE, which walks a run's every page: the chunks with a hole, at the
 * cache's edges and through staging, were mapped again and the runs walked
 * again by every pass -- 2-12 ms per pass, two passes per warm epoch in each
 * trainer of the UNet3D scenario, about 1.5% of its accelerator
 * utilisation in the first warm epoch.)
 *
 * When: a helper thread, started by the first seer_next, makes a pass every
 * 10 ms while the cold epoch fills the cache, so a trainer that waits in its
 * own collective (a barrier, an allreduce) rather than in seer_next is
 * covered too. It runs at the trainer's priority: at SCHED_IDLE it got no CPU
 * on a busy machine and left the work to the boundary pass, which then
 * delayed the first warm step (docs/client.md). When seer_next hands out an
 * epoch's last batch, the consumer thread stops the helper and finishes the
 * pass itself, so every page filled by then is mapped, however busy the
 * machine was; then the helper goes on (first epoch only) with what the
 * other trainers' last batches fill while this trainer runs its last step,
 * and the boundary (SEER_EEPOCH) stops it for good and makes a last pass for
 * what is left; later epochs repeat both passes (cheap: done chunks are
 * skipped). The big pass runs at the last batch, inside the trainer's last
 * step, rather than at the boundary: trainers that end each step in a
 * collective then all leave epoch 1 together. At the boundary, the trainer
 * with the least left to map began the next epoch first and waited in its
 * first step's collective for the others' passes (issue 17: 10 ms against
 * 230-390 ms on a loaded machine; that wait was the first warm epoch's
 * shortfall, with 1 page fault per trainer in it). The helper's second
 * stint does the same for the last batches filled after a trainer's own
 * (2,255-5,839 pages, 10-46 ms at the boundary, in the ResNet-50 scenario).
 *
 * An arena in huge pages (hugetlbfs: [cache] huge_pages) is mapped whole,
 * without SEEK_DATA or mincore (which reports a huge page as absent until
 * this process maps it): its pages were reserved when the daemon created it,
 * so touching one the daemon has not filled takes no memory beyond that, and
 * a 2 MiB page costs one fault (256 MiB: 5.7 ms against 97 ms in 4 KiB
 * pages on the development VM).
 *
 * The mapping prefaulted is libseer's own, or the one a binding reads through
 * (seer_arena_reader: the Python shim maps the arena itself).
 *
 * Threads: the pass state belongs to the helper while it runs and to the
 * consumer thread otherwise (prefault_stop joins the helper first). Failure: none
 * visible — prefaulting is an optimisation; without MADV_POPULATE_READ the
 * byte reads fault instead, without a thread the boundary pass does it all,
 * and a file that cannot seek data (or SEER_PREFAULT=0 in the environment)
 * turns it off: the trainer then faults as it reads. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "../src/common/base.h"
#include "../src/common/shm.h"
#include "client.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

#define PF_PAGE 4096ull
#define PF_STEP (256ull << 10) /* work between two looks at the stop flag */
#define PF_POLL_NS 10000000ll  /* the helper's pause between passes */
#define PF_HUGETLBFS_MAGIC 0x958458f6 /* linux/magic.h */

void prefault_init(struct seer_client *c)
{
	struct prefault *pf = &c->pf;
	memset(pf, 0, sizeof(*pf));
	const char *env = getenv("SEER_PREFAULT");
	pf->npages = (c->shm.arena_size + PF_PAGE - 1) / PF_PAGE;
	pf->done = calloc((pf->npages + 63) / 64, sizeof(uint64_t));
	pf->off = !pf->done || (env && strcmp(env, "0") == 0);
	pf->pos = c->shm.arena_size; /* no pass open */
	pf->base = c->shm.arena;
	pf->huge = -1;
}


/* Stop and join the helper thread, if any: the pass state is ours after. */
static void prefault_stop(struct seer_client *c)
{
	struct prefault *pf = &c->pf;
	if (!pf->running)
		return;
	atomic_store(&pf->stop, 1);
	futex_wake_all(&pf->stop);
	pthread_join(pf->th, NULL);
	pf->running = false;
}

void prefault_free(struct seer_client *c)
{
	if (!atomic_load(&c->forked)) /* a fork child has no helper to join */
		prefault_stop(c);
	free(c->pf.done);
	c->pf.done = NULL;
}

void prefault_retarget(struct seer_client *c, const uint8_t *base)
{
	struct prefault *pf = &c->pf;
	prefault_stop(c); /* the next seer_next starts it again */
	pf->base = base;
	pf->pos = c->shm.arena_size;
	pf->stage_known = false;
	if (pf->done)
		memset(pf->done, 0, (pf->npages + 63) / 64 * sizeof(uint64_t));
}

/* The first page at or after page i whose done bit is `want`, at most n. */
static uint64_t next_page(const struct prefault *pf, uint64_t i, uint64_t n, bool want)
{
	while (i < n) {
		uint64_t w = pf->done[i / 64];
		w = (want ? w : ~w) >> (i % 64);
		if (w)
			return MIN(i + (uint64_t)__builtin_ctzll(w), n);
		i = (i / 64 + 1) * 64;
	}
	return n;
}

/* Mark pages [a, b) done. */
static void mark_done(struct prefault *pf, uint64_t a, uint64_t b)
{
	while (a < b) {
		if (a % 64 == 0 && b - a >= 64) {
			pf->done[a / 64] = ~0ull;
			a += 64;
		} else {
			pf->done[a / 64] |= 1ull << (a % 64);
			a++;
		}
	}
}

/* Map [a, b) (present pages, page-aligned) into this process. */
static void map_run(struct seer_client *c, uint64_t a, uint64_t b)
{
	struct prefault *pf = &c->pf;
	const uint8_t *p = pf->base + a;
	if (!pf->no_populate && madvise((void *)p, b - a, MADV_POPULATE_READ) != 0 &&
	    (errno == EINVAL || errno == ENOSYS))
		pf->no_populate = true; /* older kernel: the reads below fault instead */
	uint8_t x = 0;
	for (uint64_t o = 0; o < b - a; o += PF_PAGE)
		x ^= *(const volatile uint8_t *)(p + o);
	pf->sink ^= x;
	pf->pages += (b - a) / PF_PAGE;
}

/* Once the daemon has published the node's staging and this trainer's
 * share of it (seer_ctrl_out.stage_set), the other trainers' shares are
 * marked done: never mapped here (they hold only their batches). Offsets
 * that do not fit the arena are ignored. */
static void prefault_stage(struct seer_client *c)
{
	struct prefault *pf = &c->pf;
	const struct seer_ctrl_out *co = c->shm.co;
	if (pf->stage_known || !co || !atomic_load_explicit(&co->stage_set, memory_order_acquire))
		return;
	pf->stage_known = true;
	uint64_t lo = co->stage_lo, hi = co->stage_hi, olo = co->own_lo, ohi = co->own_hi;
	if (lo > olo || olo > ohi || ohi > hi || hi > c->shm.arena_size)
		return;
	mark_done(pf, (lo + PF_PAGE - 1) / PF_PAGE, olo / PF_PAGE);
	mark_done(pf, (ohi + PF_PAGE - 1) / PF_PAGE, hi / PF_PAGE);
}

/* Begin a pass at the arena's start (one left open by a stopped helper is
 * dropped: the new pass covers it). */
static void prefault_restart(struct seer_client *c)
{
	struct statfs sf;
	if (c->pf.huge < 0 && c->shm.arena_fd >= 0)
		c->pf.huge = fstatfs(c->shm.arena_fd, &sf) == 0 && sf.f_type == PF_HUGETLBFS_MAGIC;
	prefault_stage(c);
	c->pf.pos = 0;
	c->pf.passes++;
}

/* One step of the open pass: up to PF_STEP bytes mapped. false once the pass
 * has reached the end of the arena (nothing to do until prefault_restart). Pages
 * done are skipped in the bitmap; holes with SEEK_DATA (one call however
 * long the hole); how far the present pages go with mincore over at most
 * PF_STEP, not with SEEK_HOLE, which walks the whole run of present pages
 * however much of it is done (2-12 ms per pass over a 395 MiB arena). */
static bool prefault_step(struct seer_client *c)
{
	struct prefault *pf = &c->pf;
	uint64_t size = c->shm.arena_size, n = pf->npages;
	unsigned char vec[PF_STEP / PF_PAGE];
	if (pf->huge > 0 && pf->pos < size) {
		pf->pos = MIN(next_page(pf, pf->pos / PF_PAGE, n, false) * PF_PAGE, size);
		uint64_t lim = MIN(next_page(pf, pf->pos / PF_PAGE, n, true) * PF_PAGE, size);
		lim = MIN(lim, pf->pos + PF_STEP);
		if (pf->pos < lim) {
			map_run(c, pf->pos, lim);
			mark_done(pf, pf->pos / PF_PAGE, (lim + PF_PAGE - 1) / PF_PAGE);
			pf->pos = lim;
			return true;
		}
	}
	while (!pf->no_seek && pf->huge <= 0 && pf->pos < size) {
		pf->pos = MIN(next_page(pf, pf->pos / PF_PAGE, n, false) * PF_PAGE, size);
		if (pf->pos >= size)
			break;
		off_t d = lseek(c->shm.arena_fd, (off_t)pf->pos, SEEK_DATA);
		if (d < 0) {
			if (errno != ENXIO)
				pf->no_seek = true; /* this file cannot tell: fault as we read */
			break;
		}
		if ((uint64_t)d != pf->pos) {
			pf->pos = (uint64_t)d & ~(PF_PAGE - 1); /* past a hole */
			continue;
		}
		uint64_t lim = MIN(next_page(pf, pf->pos / PF_PAGE, n, true) * PF_PAGE, size);
		lim = MIN(lim, pf->pos + PF_STEP);
		if (mincore((void *)(uintptr_t)(pf->base + pf->pos), lim - pf->pos, vec) != 0) {
			pf->no_seek = true;
			break;
		}
		uint64_t k = 0, np = (lim - pf->pos + PF_PAGE - 1) / PF_PAGE;
		while (k < np && (vec[k] & 1))
			k++;
		if (k == 0) { /* data, but not in memory (swapped out): left to fault */
			pf->pos += PF_PAGE;
			continue;
		}
		uint64_t end = MIN(pf->pos + k * PF_PAGE, lim);
		map_run(c, pf->pos, end);
		mark_done(pf, pf->pos / PF_PAGE, (end + PF_PAGE - 1) / PF_PAGE);
		pf->pos = end;
		return true;
	}
	pf->pos = size;
	return false;
}

static void prefault_pass(struct seer_client *c)
{
	prefault_restart(c);
	while (prefault_step(c)) {
	}
}

static void *prefault_main(void *arg)
{
	struct seer_client *c = arg;
	while (!atomic_load(&c->pf.stop)) {
		/* no pass before the staging shares are known (at the rank
		 * map; never from an older daemon: the consumer's passes then
		 * do it all) */
		prefault_stage(c);
		if (!c->pf.stage_known) {
			futex_wait(&c->pf.stop, 0, PF_POLL_NS);
			continue;
		}
		prefault_restart(c);
		while (!atomic_load(&c->pf.stop) && prefault_step(c)) {
		}
		futex_wait(&c->pf.stop, 0, PF_POLL_NS);
	}
	return NULL;
}

void prefault_start(struct seer_client *c)
{
	struct prefault *pf = &c->pf;
	if (pf->off || pf->boundary || pf->running)
		return;
	atomic_store(&pf->stop, 0);
	sigset_t all, old; /* the helper takes none of the application's signals */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pf->running = pthread_create(&pf->th, NULL, prefault_main, c) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void prefault_last_batch(struct seer_client *c)
{
	prefault_stop(c);
	if (c->pf.off)
		return;
	prefault_pass(c);
	prefault_start(c); /* (before the first boundary) the others' last fills */
}

void prefault_epoch_end(struct seer_client *c, bool more)
{
	prefault_stop(c);
	c->pf.boundary = true;
	/* after the job's last epoch nothing reads the arena again: a pass
	 * would only lengthen that epoch (110 ms in the 1-epoch bert-lustre run) */
	if (!c->pf.off && more)
		prefault_pass(c);
}
