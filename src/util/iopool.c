#define _GNU_SOURCE
#include "iopool.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "util.h"

static bool before(const struct io_task *a, const struct io_task *b)
{
	return a->key < b->key || (a->key == b->key && a->seq < b->seq);
}

static void heap_set(struct iopool *p, uint32_t i, struct io_task *t)
{
	p->heap[i] = t;
	t->heap_idx = (int32_t)i;
}

static void sift_up(struct iopool *p, uint32_t i, struct io_task *t)
{
	while (i > 0) {
		uint32_t up = (i - 1) / 2;
		if (!before(t, p->heap[up]))
			break;
		heap_set(p, i, p->heap[up]);
		i = up;
	}
	heap_set(p, i, t);
}

static void heap_push(struct iopool *p, struct io_task *t)
{
	if (p->nheap == p->capheap) {
		p->capheap = MAX(p->capheap * 2, 256);
		p->heap = xrealloc(p->heap, p->capheap * sizeof(*p->heap));
	}
	sift_up(p, p->nheap++, t);
}

static struct io_task *heap_pop(struct iopool *p)
{
	struct io_task *top = p->heap[0];
	struct io_task *last = p->heap[--p->nheap];
	uint32_t i = 0;
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, m = i;
		const struct io_task *best = last;
		if (l < p->nheap && before(p->heap[l], best))
			m = l, best = p->heap[l];
		if (r < p->nheap && before(p->heap[r], best))
			m = r;
		if (m == i)
			break;
		heap_set(p, i, p->heap[m]);
		i = m;
	}
	if (p->nheap > 0)
		heap_set(p, i, last);
	top->heap_idx = -1;
	return top;
}

_Static_assert(offsetof(struct io_task, link) == 0, "a done task is its hand-off node");

static void push_done(struct iopool *p, struct io_task *t)
{
	/* caller holds p->mu */
	handoff_push(&p->done, &t->link, p->done_efd);
}

struct worker_arg {
	struct iopool *p;
	unsigned idx;
};

static void *worker_main(void *arg)
{
	struct worker_arg wa = *(struct worker_arg *)arg;
	free(arg);
	struct iopool *p = wa.p;
	void *tls = p->tls_init ? p->tls_init(p->ctx, wa.idx) : NULL;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && p->nheap == 0)
			pthread_cond_wait(&p->cv, &p->mu);
		if (p->stop)
			break;
		struct io_task *t = heap_pop(p);
		p->running++;
		pthread_mutex_unlock(&p->mu);
		t->t_start = now_ns();
		p->exec(t, tls, p->ctx);
		t->t_end = now_ns();
		pthread_mutex_lock(&p->mu);
		p->running--;
		push_done(p, t);
	}
	pthread_mutex_unlock(&p->mu);
	if (p->tls_fini)
		p->tls_fini(tls, p->ctx);
	return NULL;
}

int iopool_start(struct iopool *p, unsigned n, io_exec_fn exec, io_tls_init_fn tls_init,
		 io_tls_fini_fn tls_fini, void *ctx)
{
	memset(p, 0, sizeof(*p));
	p->done_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->done_efd < 0)
		return -errno;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->exec = exec;
	p->tls_init = tls_init;
	p->tls_fini = tls_fini;
	p->ctx = ctx;
	p->threads = xcalloc(n, sizeof(pthread_t));
	for (unsigned i = 0; i < n; i++) {
		struct worker_arg *wa = xmalloc(sizeof(*wa));
		*wa = (struct worker_arg){ p, i };
		int rc = pthread_create(&p->threads[i], NULL, worker_main, wa);
		if (rc != 0) {
			free(wa);
			p->nthreads = i;
			iopool_stop(p);
			return -rc;
		}
		char name[16];
		snprintf(name, sizeof(name), "seer-io%u", i % 10000u);
		pthread_setname_np(p->threads[i], name);
		p->nthreads = i + 1;
	}
	return 0;
}

void iopool_submit(struct iopool *p, struct io_task **tasks, uint32_t n)
{
	if (n == 0)
		return;
	uint64_t t = now_ns();
	pthread_mutex_lock(&p->mu);
	for (uint32_t i = 0; i < n; i++) {
		tasks[i]->heap_idx = -1;
		tasks[i]->seq = p->seq++;
		tasks[i]->t_submit = t;
		heap_push(p, tasks[i]);
	}
	if (n == 1)
		pthread_cond_signal(&p->cv);
	else
		pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

void iopool_boost(struct iopool *p, struct io_task *t, uint64_t key)
{
	pthread_mutex_lock(&p->mu);
	if (key < t->key) {
		t->key = key;
		/* a queued task moves up; otherwise the key is simply kept */
		if (t->heap_idx >= 0 && (uint32_t)t->heap_idx < p->nheap && p->heap[t->heap_idx] == t)
			sift_up(p, (uint32_t)t->heap_idx, t);
	}
	pthread_mutex_unlock(&p->mu);
}

bool iopool_cancel(struct iopool *p, struct io_task *t)
{
	pthread_mutex_lock(&p->mu);
	bool queued = t->heap_idx >= 0 && (uint32_t)t->heap_idx < p->nheap &&
		      p->heap[t->heap_idx] == t;
	if (queued) {
		uint32_t i = (uint32_t)t->heap_idx;
		struct io_task *last = p->heap[--p->nheap];
		if (i < p->nheap) {
			/* the last one takes t's place, then moves up or down */
			sift_up(p, i, last);
			uint32_t at = (uint32_t)last->heap_idx;
			for (;;) {
				uint32_t l = 2 * at + 1, r = l + 1, m = at;
				if (l < p->nheap && before(p->heap[l], p->heap[m]))
					m = l;
				if (r < p->nheap && before(p->heap[r], p->heap[m]))
					m = r;
				if (m == at)
					break;
				struct io_task *x = p->heap[m];
				heap_set(p, m, last);
				heap_set(p, at, x);
				at = m;
			}
		}
		t->heap_idx = -1;
	}
	pthread_mutex_unlock(&p->mu);
	return queued;
}

struct io_task *iopool_take_done(struct iopool *p)
{
	return (struct io_task *)handoff_take(&p->done, &p->mu, p->done_efd);
}

uint32_t iopool_pending(struct iopool *p)
{
	pthread_mutex_lock(&p->mu);
	uint32_t n = p->nheap + p->running;
	pthread_mutex_unlock(&p->mu);
	return n;
}

void iopool_stop(struct iopool *p)
{
	if (!p->threads)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (unsigned i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	pthread_mutex_lock(&p->mu);
	while (p->nheap > 0) {
		struct io_task *t = heap_pop(p);
		t->status = -ECANCELED;
		push_done(p, t);
	}
	pthread_mutex_unlock(&p->mu);
	free(p->threads);
	p->threads = NULL;
	free(p->heap);
	p->heap = NULL;
	p->capheap = 0;
}

void iopool_destroy(struct iopool *p)
{
	if (p->done_efd >= 0)
		close(p->done_efd);
	p->done_efd = -1;
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
}
