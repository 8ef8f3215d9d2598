/* The PFS probe (pfs_probe.h): q reads of a sample's size at once against
 * q reads of k times that size at once, over distinct byte ranges of the
 * dataset's files.
 *
 * Calling thread (node 0's main thread, before the job) and q reader threads
 * that live for the probe; a pthread barrier starts each phase so the q
 * reads are in flight together. Failure: no verdict (coalescing stays on),
 * the reason in p->why; nothing is left open or running. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/base.h"
#include "pfs_probe.h"
#include "util.h"

enum { PROBE_K = 4, PROBE_QMIN = 4, PROBE_QMAX = 16, PROBE_ROUNDS = 3 };
#define PROBE_MAX_S 2.0 /* no further round after this long */

struct slot {
	int fd;
	uint64_t off;
};

struct probe_run {
	pthread_mutex_t mu;      /* the gate: readers wait for `open` */
	pthread_cond_t cv;
	bool open;
	pthread_barrier_t go, done; /* q + 1 parties, set before the gate opens */
	uint32_t q;
	uint64_t len;            /* this phase's read size */
	const struct slot *slots; /* this phase's q slots */
	bool stop;
	int err;                 /* first failure, -errno */
	double end[PROBE_QMAX];
	char *buf[PROBE_QMAX];
};

struct reader {
	struct probe_run *r;
	uint32_t i;
};

static void *reader_main(void *arg)
{
	struct reader *rd = arg;
	struct probe_run *r = rd->r;
	pthread_mutex_lock(&r->mu);
	while (!r->open)
		pthread_cond_wait(&r->cv, &r->mu);
	bool stop = r->stop; /* set before the gate opened, or only between phases */
	pthread_mutex_unlock(&r->mu);
	while (!stop) {
		pthread_barrier_wait(&r->go);
		if (r->stop)
			return NULL;
		const struct slot *s = &r->slots[rd->i];
		int rc = pread_full(s->fd, r->buf[rd->i], r->len, s->off);
		/* the next run (a restart) must find these bytes on the PFS,
		 * not in this client's page cache */
		posix_fadvise(s->fd, (off_t)s->off, (off_t)r->len, POSIX_FADV_DONTNEED);
		r->end[rd->i] = now_s();
		if (rc != 0)
			__atomic_store_n(&r->err, rc, __ATOMIC_RELAXED);
		pthread_barrier_wait(&r->done);
	}
	return NULL;
}

/* One phase: the q reads at once; seconds from the start to the last end. */
static double phase(struct probe_run *r, const struct slot *slots, uint64_t len)
{
	r->slots = slots;
	r->len = len;
	double t0 = now_s();
	pthread_barrier_wait(&r->go);
	pthread_barrier_wait(&r->done);
	double t = 0;
	for (uint32_t i = 0; i < r->q; i++)
		t = MAX(t, r->end[i] - t0);
	return t;
}

bool pfs_probe_decide(double t_small, double t_big, uint32_t k)
{
	return !(t_big >= t_small * (double)k / 1.5 && t_big - t_small >= 1e-3);
}

/* Distinct regions of `region` bytes, files taken in turn: up to n slots;
 * the files' descriptors open in fds (-1 unused). Returns slots placed. */
static uint32_t place(const struct catalog *cat, uint64_t region, struct slot *slots, uint32_t n,
		      int *fds, char *why, size_t whylen)
{
	uint32_t got = 0;
	for (uint64_t reg = 0; got < n; reg++) {
		bool any = false;
		for (uint32_t f = 0; f < cat->nfiles && got < n; f++) {
			if ((reg + 1) * region > cat->files[f].size)
				continue;
			any = true;
			if (fds[f] < 0) {
				char path[4096];
				snprintf(path, sizeof(path), "%s/%s", cat->root, catalog_path(cat, f));
				fds[f] = open(path, O_RDONLY | O_CLOEXEC);
				if (fds[f] < 0) {
					snprintf(why, whylen, "cannot open %.200s: %s", path,
						 strerror(errno));
					return 0;
				}
			}
			slots[got++] = (struct slot){ fds[f], reg * region };
		}
		if (!any)
			break;
	}
	return got;
}

/* p->coalesce holds the rounds' verdict; say it with the best times. */
static void verdict(struct pfs_probe *p)
{
	char a[32], b[32];
	snprintf(p->why, sizeof(p->why),
		 "%u reads of %s at once took %.1f ms, of %s %.1f ms (%.1fx for %ux the bytes, "
		 "best of %u): %s", p->q, fmt_size(a, sizeof(a), p->small), p->t_small * 1e3,
		 fmt_size(b, sizeof(b), p->big), p->t_big * 1e3, p->t_big / MAX(p->t_small, 1e-9),
		 p->k, p->rounds, p->coalesce ? "the PFS is bound by requests: coalesced reads"
		 : "the PFS is bound by bandwidth: one read per sample, in the order of need");
}

static void gate_open(struct probe_run *r)
{
	pthread_mutex_lock(&r->mu);
	r->open = true;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

/* The rounds with the readers at their barriers; stops early after a round
 * once PROBE_MAX_S have passed (a slow PFS, large samples). */
static void rounds(struct probe_run *r, const struct slot *slots, struct pfs_probe *p)
{
	double t0 = now_s();
	uint32_t done = 0;
	p->t_small = p->t_big = 1e30;
	p->coalesce = false;
	while (done < p->rounds && !__atomic_load_n(&r->err, __ATOMIC_RELAXED)) {
		const struct slot *s = slots + (size_t)done * 2 * r->q;
		double ts = phase(r, s, p->small), tb = phase(r, s + r->q, p->big);
		p->t_small = MIN(p->t_small, ts); /* (MIN evaluates twice) */
		p->t_big = MIN(p->t_big, tb);
		/* bound by bandwidth only if every round says so: a reader
		 * descheduled in one round must not switch coalescing off */
		p->coalesce = p->coalesce || pfs_probe_decide(ts, tb, p->k);
		p->bytes += (uint64_t)r->q * (p->small + p->big);
		p->reads += 2ull * r->q;
		done++;
		if (now_s() - t0 > PROBE_MAX_S)
			break;
	}
	p->rounds = done;
	r->stop = true;
	pthread_barrier_wait(&r->go);
	int err = __atomic_load_n(&r->err, __ATOMIC_RELAXED);
	if (err)
		snprintf(p->why, sizeof(p->why), "a probe read failed: %s", strerror(-err));
	else
		p->measured = true;
}

/* Start the readers (as many as can start, at least PROBE_QMIN), run the
 * rounds, stop them. */
static void measure(struct probe_run *r, const struct slot *slots, struct pfs_probe *p)
{
	pthread_t th[PROBE_QMAX];
	struct reader rd[PROBE_QMAX];
	uint32_t started = 0;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	for (uint32_t i = 0; i < r->q; i++) {
		rd[i] = (struct reader){ r, i };
		if (pthread_create(&th[i], NULL, reader_main, &rd[i]) != 0)
			break;
		started++;
	}
	bool barriers = false;
	if (started >= PROBE_QMIN) {
		r->q = p->q = started;
		if (pthread_barrier_init(&r->go, NULL, r->q + 1) == 0) {
			if (pthread_barrier_init(&r->done, NULL, r->q + 1) == 0)
				barriers = true;
			else
				pthread_barrier_destroy(&r->go);
		}
		if (!barriers)
			snprintf(p->why, sizeof(p->why), "cannot make the probe's barriers");
	} else {
		snprintf(p->why, sizeof(p->why), "cannot start %u reader threads", PROBE_QMIN);
	}
	r->stop = !barriers; /* before the gate opens: the readers then just leave */
	gate_open(r);
	if (barriers)
		rounds(r, slots, p);
	for (uint32_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	if (barriers) { /* only once no reader is inside a wait */
		pthread_barrier_destroy(&r->go);
		pthread_barrier_destroy(&r->done);
	}
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
}

void pfs_probe_run(const struct catalog *cat, uint32_t q, struct pfs_probe *p)
{
	*p = (struct pfs_probe){ .coalesce = true, .k = PROBE_K };
	if (cat->nsamples == 0) {
		snprintf(p->why, sizeof(p->why), "no samples");
		return;
	}
	uint64_t s = MAX(cat->total_bytes / cat->nsamples, 512ull);
	uint64_t budget = cat->total_bytes >> PFS_PROBE_BUDGET_SHIFT;
	p->small = s;
	p->big = s * PROBE_K;
	uint32_t qmax = (uint32_t)MIN(MAX(q, 1u), (uint32_t)PROBE_QMAX);
	p->q = qmax;
	/* what fits the budget: two rounds (the best of two is steadier on a
	 * busy node) with readers down to 8, else one round with down to 4; a
	 * third round when it fits. As many readers as the engine runs, up to
	 * 16, keep the probe's reads as concurrent as the job's will be. */
	uint64_t per = (uint64_t)p->small + p->big;
	p->rounds = 2;
	while (p->q > 2 * PROBE_QMIN && p->rounds * p->q * per > budget)
		p->q--;
	if (p->rounds * p->q * per > budget) {
		p->rounds = 1;
		p->q = qmax;
	}
	while (p->q > PROBE_QMIN && p->rounds * p->q * per > budget)
		p->q--;
	if (PROBE_ROUNDS * p->q * per <= budget)
		p->rounds = PROBE_ROUNDS;
	char a[32];
	if (p->q < PROBE_QMIN) {
		snprintf(p->why, sizeof(p->why), "prefetch.io_threads = %u: the probe needs %u reads "
			 "at once: coalesced reads", q, PROBE_QMIN);
		return;
	}
	if (p->rounds * p->q * per > budget) {
		snprintf(p->why, sizeof(p->why), "the dataset (%s) is too small to measure within "
			 "1/64 of its bytes: coalesced reads",
			 fmt_size(a, sizeof(a), cat->total_bytes));
		return;
	}
	uint32_t n = 2 * p->q * p->rounds;
	struct slot *slots = xcalloc(n, sizeof(*slots));
	int *fds = xmalloc(cat->nfiles * sizeof(int));
	for (uint32_t f = 0; f < cat->nfiles; f++)
		fds[f] = -1;
	struct probe_run r = { .q = p->q };
	uint32_t got = place(cat, p->big, slots, n, fds, p->why, sizeof(p->why));
	if (got == n) {
		uint32_t nbuf = r.q; /* measure may start fewer readers */
		for (uint32_t i = 0; i < nbuf; i++) {
			r.buf[i] = xmalloc(p->big);
			memset(r.buf[i], 0, p->big); /* no page faults in the timed reads */
		}
		measure(&r, slots, p);
		for (uint32_t i = 0; i < nbuf; i++)
			free(r.buf[i]);
		if (p->measured)
			verdict(p);
	} else if (!p->why[0]) {
		snprintf(p->why, sizeof(p->why), "the files hold fewer than %u distinct ranges of "
			 "%s: coalesced reads", n, fmt_size(a, sizeof(a), p->big));
	}
	if (!p->measured)
		p->coalesce = true;
	for (uint32_t f = 0; f < cat->nfiles; f++)
		if (fds[f] >= 0)
			close(fds[f]);
	free(fds);
	free(slots);
}
