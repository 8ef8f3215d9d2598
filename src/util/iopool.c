#define _GNU_SOURCE
#include "iopool.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "util.h"

static struct io_task *task_of(struct pqueue_node *n)
{
	return (struct io_task *)((char *)n - offsetof(struct io_task, pq));
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
		while (!p->stop && p->queue.n == 0)
			pthread_cond_wait(&p->cv, &p->mu);
		if (p->stop)
			break;
		struct io_task *t = task_of(pqueue_pop(&p->queue));
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
		tasks[i]->pq.idx = -1;
		tasks[i]->t_submit = t;
		pqueue_push(&p->queue, &tasks[i]->pq);
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
	pqueue_lower(&p->queue, &t->pq, key);
	pthread_mutex_unlock(&p->mu);
}

bool iopool_cancel(struct iopool *p, struct io_task *t)
{
	pthread_mutex_lock(&p->mu);
	bool queued = pqueue_remove(&p->queue, &t->pq);
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
	uint32_t n = p->queue.n + p->running;
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
	while (p->queue.n > 0) {
		struct io_task *t = task_of(pqueue_pop(&p->queue));
		t->status = -ECANCELED;
		push_done(p, t);
	}
	pthread_mutex_unlock(&p->mu);
	free(p->threads);
	p->threads = NULL;
	pqueue_free(&p->queue);
}

void iopool_destroy(struct iopool *p)
{
	if (p->done_efd >= 0)
		close(p->done_efd);
	p->done_efd = -1;
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
}
