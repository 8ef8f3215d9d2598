/* iopool: priority order, FIFO among equals, the done list and its eventfd,
 * cancellation at stop, per-worker state, and a multi-worker stress run. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../src/util/iopool.h"



struct task {
	struct io_task io;      /* io.user points back here */
	uint32_t id;
	bool block;             /* wait for the gate before returning */
	_Atomic int execs;
	int returned;           /* times seen in a done list (main thread only) */
	void *ran_tls;          /* tls of the worker that ran it */
	pthread_t ran_on;
};

struct worker_tls {
	unsigned idx;
	pthread_t self;
	int finis;
};

/* What the workers record; the main thread asserts on it. */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool gate_open;
	unsigned blocked;        /* blocking tasks that have started */
	uint32_t *order;         /* ids in execution order */
	size_t norder, caporder;
	struct worker_tls tls[16];
	_Atomic unsigned tls_inits;
	_Atomic unsigned tls_finis;
	bool tls_bad;            /* a task ran with another worker's tls */
} X;

static struct iopool pool;
static bool pool_started;

static void *tls_init(void *ctx, unsigned worker)
{
	(void)ctx;
	struct worker_tls *t = &X.tls[worker % 16];
	t->idx = worker;
	t->self = pthread_self();
	atomic_fetch_add(&X.tls_inits, 1);
	return t;
}

static void tls_fini(void *tls, void *ctx)
{
	(void)ctx;
	((struct worker_tls *)tls)->finis++;
	atomic_fetch_add(&X.tls_finis, 1);
}

static void exec_task(struct io_task *io, void *tls, void *ctx)
{
	(void)ctx;
	struct task *t = io->user;
	atomic_fetch_add(&t->execs, 1);
	t->ran_tls = tls;
	t->ran_on = pthread_self();
	pthread_mutex_lock(&X.mu);
	if (tls && !pthread_equal(((struct worker_tls *)tls)->self, pthread_self()))
		X.tls_bad = true;
	if (t->block) {
		X.blocked++;
		pthread_cond_broadcast(&X.cv);
		while (!X.gate_open)
			pthread_cond_wait(&X.cv, &X.mu);
	}
	if (X.norder == X.caporder) {
		X.caporder = X.caporder ? X.caporder * 2 : 1024;
		X.order = realloc(X.order, X.caporder * sizeof(*X.order));
	}
	X.order[X.norder++] = t->id;
	pthread_mutex_unlock(&X.mu);
	io->status = (int)t->id;
}

static void setup(void)
{
	memset(&X, 0, sizeof(X));
	pthread_mutex_init(&X.mu, NULL);
	pthread_cond_init(&X.cv, NULL);
	pool_started = false;
}

static void open_gate(void)
{
	pthread_mutex_lock(&X.mu);
	X.gate_open = true;
	pthread_cond_broadcast(&X.cv);
	pthread_mutex_unlock(&X.mu);
}

static void teardown(void)
{
	if (pool_started) {
		open_gate();
		iopool_stop(&pool);
		iopool_take_done(&pool);
		iopool_destroy(&pool);
	}
	free(X.order);
	pthread_mutex_destroy(&X.mu);
	pthread_cond_destroy(&X.cv);
}

TestSuite(iopool, .init = setup, .fini = teardown, .timeout = 60);

static void start(unsigned workers)
{
	cr_assert_eq(iopool_start(&pool, workers, exec_task, tls_init, tls_fini, NULL), 0);
	pool_started = true;
}

static struct task *tasks_new(size_t n)
{
	struct task *t = calloc(n, sizeof(*t));
	cr_assert_not_null(t);
	for (size_t i = 0; i < n; i++) {
		t[i].id = (uint32_t)i;
		t[i].io.user = &t[i];
	}
	return t;
}

static void submit_one(struct task *t, uint64_t key)
{
	t->io.pq.key = key;
	struct io_task *p = &t->io;
	iopool_submit(&pool, &p, 1);
}

/* Wait until the first `n` blocking tasks are running. */
static void wait_blocked(unsigned n)
{
	pthread_mutex_lock(&X.mu);
	while (X.blocked < n)
		pthread_cond_wait(&X.cv, &X.mu);
	pthread_mutex_unlock(&X.mu);
}

static bool efd_readable(int timeout_ms)
{
	struct pollfd pfd = { .fd = pool.done_efd, .events = POLLIN };
	int rc = poll(&pfd, 1, timeout_ms);
	cr_assert_geq(rc, 0);
	return rc == 1 && (pfd.revents & POLLIN);
}

/* Take done tasks until `n` came back, waiting on the eventfd in between;
 * appends them to done[] in the order received. */
static void collect(size_t n, struct task **done)
{
	size_t got = 0;
	while (got < n) {
		cr_assert(efd_readable(10000), "done eventfd not readable with %zu of %zu back", got,
			  n);
		for (struct io_task *t = iopool_take_done(&pool); t; t = t->next) {
			struct task *mine = t->user;
			mine->returned++;
			cr_assert_lt(got, n, "more tasks came back than were submitted");
			if (done)
				done[got] = mine;
			got++;
		}
	}
}

/* ---- ordering ---------------------------------------------------------------- */

Test(iopool, priority_order_one_at_a_time)
{
	start(1);
	struct task *t = tasks_new(5);
	t[0].block = true;
	submit_one(&t[0], 0);
	wait_blocked(1);
	static const uint64_t keys[] = { 5, 3, 9, 1 };
	for (int i = 0; i < 4; i++)
		submit_one(&t[i + 1], keys[i]);
	cr_assert_eq(iopool_pending(&pool), 5);
	open_gate();
	struct task *done[5];
	collect(5, done);
	/* execution and completion order: the blocker, then by key */
	static const uint32_t want[] = { 0, 4, 2, 1, 3 }; /* keys 0, 1, 3, 5, 9 */
	cr_assert_eq(X.norder, 5);
	for (int i = 0; i < 5; i++) {
		cr_assert_eq(X.order[i], want[i], "ran #%d: task %u (key %llu), want task %u", i,
			     X.order[i], (unsigned long long)t[X.order[i]].io.pq.key, want[i]);
		cr_assert_eq(done[i]->id, want[i], "completion order");
		cr_assert_eq(done[i]->io.status, (int)done[i]->id);
	}
	cr_assert_eq(iopool_pending(&pool), 0);
	free(t);
}

Test(iopool, priority_order_one_array)
{
	start(1);
	struct task *t = tasks_new(5);
	t[0].block = true;
	submit_one(&t[0], 0);
	wait_blocked(1);
	static const uint64_t keys[] = { 5, 3, 9, 1 };
	struct io_task *arr[4];
	for (int i = 0; i < 4; i++) {
		t[i + 1].io.pq.key = keys[i];
		arr[i] = &t[i + 1].io;
	}
	iopool_submit(&pool, arr, 4);
	open_gate();
	collect(5, NULL);
	static const uint32_t want[] = { 0, 4, 2, 1, 3 };
	cr_assert_arr_eq(X.order, want, sizeof(want));
	free(t);
}

/* A more urgent need joining a queued task moves it ahead (decrease-key);
 * boosting a task to a later key, or a running one, changes no order. */
Test(iopool, boost_moves_a_queued_task_up)
{
	start(1);
	struct task *t = tasks_new(6);
	t[0].block = true;
	submit_one(&t[0], 0);
	wait_blocked(1);
	static const uint64_t keys[] = { 10, 20, 30, 40, 50 };
	for (int i = 0; i < 5; i++)
		submit_one(&t[i + 1], keys[i]);
	iopool_boost(&pool, &t[4].io, 5);   /* key 40 -> 5: first */
	iopool_boost(&pool, &t[2].io, 25);  /* 20 -> 25 is later: ignored */
	iopool_boost(&pool, &t[5].io, 15);  /* 50 -> 15: after 10 */
	iopool_boost(&pool, &t[0].io, 1);   /* running: nothing to reorder */
	cr_assert_eq(t[4].io.pq.key, 5);
	cr_assert_eq(t[2].io.pq.key, 20);
	open_gate();
	collect(6, NULL);
	static const uint32_t want[] = { 0, 4, 1, 5, 2, 3 }; /* keys 0, 5, 10, 15, 20, 30 */
	cr_assert_arr_eq(X.order, want, sizeof(want));
	free(t);
}

/* A queued task taken back is never run; a running one cannot be; the rest
 * keep their order (cancellations from the middle, the end and the top of
 * a heap of 400). */
Test(iopool, cancel_takes_back_a_queued_task)
{
	start(1);
	enum { N = 401 };
	struct task *t = tasks_new(N);
	t[0].block = true;
	submit_one(&t[0], 0);
	wait_blocked(1);
	for (uint32_t i = 1; i < N; i++)
		submit_one(&t[i], (i * 7919u) % 97u);
	cr_assert(!iopool_cancel(&pool, &t[0].io), "a running task is not taken back");
	bool gone[N] = { false };
	for (uint32_t i = 1; i < N; i += 3) {
		cr_assert(iopool_cancel(&pool, &t[i].io), "task %u is queued", i);
		cr_assert(!iopool_cancel(&pool, &t[i].io), "task %u taken back twice", i);
		gone[i] = true;
	}
	cr_assert_eq(iopool_pending(&pool), 1 + (N - 1) - (N + 1) / 3);
	open_gate();
	collect(N - (N + 1) / 3, NULL);
	for (uint32_t i = 0; i < N; i++)
		cr_assert_eq(atomic_load(&t[i].execs), gone[i] ? 0 : 1, "task %u", i);
	for (size_t k = 2; k < X.norder; k++) {
		const struct task *a = &t[X.order[k - 1]], *b = &t[X.order[k]];
		cr_assert(a->io.pq.key < b->io.pq.key || (a->io.pq.key == b->io.pq.key && a->id < b->id),
			  "ran task %u (key %llu) before task %u (key %llu)", a->id,
			  (unsigned long long)a->io.pq.key, b->id, (unsigned long long)b->io.pq.key);
	}
	free(t);
}

/* Equal keys run in submission order, across separate submits and arrays. */
Test(iopool, fifo_among_equal_keys)
{
	start(1);
	enum { N = 61 };
	struct task *t = tasks_new(N);
	t[0].block = true;
	submit_one(&t[0], 0);
	wait_blocked(1);
	/* keys 7 and 2 interleaved; half submitted one by one, half as arrays */
	struct io_task *arr[N];
	size_t na = 0;
	for (uint32_t i = 1; i < N; i++) {
		t[i].io.pq.key = i % 3 == 0 ? 2 : 7;
		if (i < N / 2) {
			submit_one(&t[i], t[i].io.pq.key);
		} else {
			arr[na++] = &t[i].io;
			if (na == 7 || i == N - 1) {
				iopool_submit(&pool, arr, (uint32_t)na);
				na = 0;
			}
		}
	}
	open_gate();
	collect(N, NULL);
	cr_assert_eq(X.norder, N);
	size_t k = 0;
	cr_assert_eq(X.order[k++], 0);
	for (uint64_t key = 2; key <= 7; key += 5)
		for (uint32_t i = 1; i < N; i++)
			if (t[i].io.pq.key == key) {
				cr_assert_eq(X.order[k], i, "position %zu: task %u, want %u (key %llu)",
					     k, X.order[k], i, (unsigned long long)key);
				k++;
			}
	free(t);
}

/* Many queued tasks with random keys (the heap grows past its first
 * allocation): they run sorted by (key, submission). */
Test(iopool, heap_order_many)
{
	start(1);
	enum { N = 3001 };
	struct task *t = tasks_new(N);
	t[0].block = true;
	submit_one(&t[0], 0);
	wait_blocked(1);
	uint64_t x = 0x2545f4914f6cdd1dull;
	for (uint32_t i = 1; i < N; i++) {
		x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
		submit_one(&t[i], (x * 0x2545f4914f6cdd1dull) >> 58); /* keys 0..63 */
	}
	open_gate();
	collect(N, NULL);
	cr_assert_eq(X.norder, N);
	for (size_t k = 2; k < N; k++) {
		const struct task *a = &t[X.order[k - 1]], *b = &t[X.order[k]];
		cr_assert(a->io.pq.key < b->io.pq.key || (a->io.pq.key == b->io.pq.key && a->id < b->id),
			  "ran task %u (key %llu) before task %u (key %llu)", a->id,
			  (unsigned long long)a->io.pq.key, b->id, (unsigned long long)b->io.pq.key);
	}
	for (uint32_t i = 0; i < N; i++)
		cr_assert_eq(t[i].returned, 1);
	free(t);
}

/* ---- the done list and its eventfd ------------------------------------------- */

Test(iopool, done_eventfd)
{
	start(2);
	cr_assert(!efd_readable(0), "readable before anything ran");
	cr_assert_null(iopool_take_done(&pool));
	enum { N = 10 };
	struct task *t = tasks_new(N);
	for (int i = 0; i < N; i++)
		submit_one(&t[i], (uint64_t)i);
	collect(N, NULL);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(t[i].returned, 1, "task %d came back %d times", i, t[i].returned);
		cr_assert_eq(atomic_load(&t[i].execs), 1);
		cr_assert_eq(t[i].io.status, i);
		cr_assert_geq(t[i].io.t_start, t[i].io.t_submit);
		cr_assert_geq(t[i].io.t_end, t[i].io.t_start);
	}
	/* nothing left: one more take (which clears a late signal) finds
	 * nothing, and the eventfd stays quiet */
	cr_assert_null(iopool_take_done(&pool));
	cr_assert(!efd_readable(0), "readable with nothing done");
	cr_assert_eq(iopool_pending(&pool), 0);
	/* and it signals again for the next task */
	t[0].returned = 0;
	submit_one(&t[0], 0);
	collect(1, NULL);
	cr_assert_eq(t[0].returned, 1);
	free(t);
}

/* ---- stop ----------------------------------------------------------------------- */

static void *stopper(void *arg)
{
	(void)arg;
	iopool_stop(&pool);
	return NULL;
}

Test(iopool, stop_cancels_queued_tasks)
{
	start(1);
	enum { N = 11 };
	struct task *t = tasks_new(N);
	t[0].block = true;
	submit_one(&t[0], 0);
	wait_blocked(1);
	for (int i = 1; i < N; i++)
		submit_one(&t[i], (uint64_t)(100 - i));
	/* stop while the blocker runs; let it finish only once stop is set */
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, stopper, NULL), 0);
	for (;;) {
		pthread_mutex_lock(&pool.mu);
		bool stopping = pool.stop;
		pthread_mutex_unlock(&pool.mu);
		if (stopping)
			break;
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	open_gate();
	pthread_join(th, NULL);
	struct io_task *list = iopool_take_done(&pool);
	int n = 0;
	for (struct io_task *io = list; io; io = io->next) {
		struct task *mine = io->user;
		mine->returned++;
		n++;
	}
	cr_assert_eq(n, N, "%d of %d tasks came back after stop", n, N);
	cr_assert_eq(t[0].io.status, 0, "the running task completes normally");
	cr_assert_eq(atomic_load(&t[0].execs), 1);
	for (int i = 1; i < N; i++) {
		cr_assert_eq(t[i].returned, 1);
		cr_assert_eq(t[i].io.status, -ECANCELED, "task %d status %d", i, t[i].io.status);
		cr_assert_eq(atomic_load(&t[i].execs), 0, "a cancelled task ran");
	}
	cr_assert_eq(X.tls_finis, 1, "worker state not released at stop");
	iopool_stop(&pool); /* a second stop is harmless */
	free(t);
}

Test(iopool, stop_idle)
{
	start(3);
	iopool_stop(&pool);
	cr_assert_null(iopool_take_done(&pool));
	cr_assert_eq(X.tls_inits, 3);
	cr_assert_eq(X.tls_finis, 3);
}

/* ---- per-worker state -------------------------------------------------------- */

Test(iopool, worker_state)
{
	enum { W = 4, N = 2000 };
	start(W);
	struct task *t = tasks_new(N);
	for (int i = 0; i < N; i++)
		submit_one(&t[i], (uint64_t)i);
	collect(N, NULL);
	iopool_stop(&pool);
	cr_assert_eq(X.tls_inits, W);
	cr_assert_eq(X.tls_finis, W);
	bool seen[W] = { false };
	for (int w = 0; w < W; w++) {
		cr_assert_lt(X.tls[w].idx, W);
		cr_assert(!seen[X.tls[w].idx], "worker index %u given twice", X.tls[w].idx);
		seen[X.tls[w].idx] = true;
		cr_assert_eq(X.tls[w].finis, 1);
	}
	cr_assert(!X.tls_bad, "a task ran with another worker's state");
	for (int i = 0; i < N; i++) {
		struct worker_tls *tls = t[i].ran_tls;
		cr_assert(tls >= &X.tls[0] && tls < &X.tls[W], "task %d ran with tls %p", i,
			  (void *)tls);
		cr_assert(pthread_equal(tls->self, t[i].ran_on));
	}
	free(t);
}

/* ---- stress -------------------------------------------------------------------- */

Test(iopool, stress_many_workers, .timeout = 120)
{
	enum { W = 4 };
	const uint32_t n = 100000;
	start(W);
	struct task *t = tasks_new(n);
	struct io_task *arr[64];
	uint32_t sent = 0;
	size_t back = 0;
	uint64_t x = 12345;
	while (sent < n) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t chunk = (uint32_t)(x >> 58) + 1; /* 1..64 */
		if (chunk > n - sent)
			chunk = n - sent;
		for (uint32_t i = 0; i < chunk; i++) {
			t[sent + i].io.pq.key = (x >> (i % 40)) & 1023;
			arr[i] = &t[sent + i].io;
		}
		iopool_submit(&pool, arr, chunk);
		sent += chunk;
		/* take what is done meanwhile, as the dispatcher does */
		if (efd_readable(0)) {
			for (struct io_task *io = iopool_take_done(&pool); io; io = io->next) {
				((struct task *)io->user)->returned++;
				back++;
			}
		}
		cr_assert_leq(iopool_pending(&pool), sent - back);
	}
	while (back < n) {
		cr_assert(efd_readable(20000), "stuck with %zu of %u back", back, n);
		for (struct io_task *io = iopool_take_done(&pool); io; io = io->next) {
			((struct task *)io->user)->returned++;
			back++;
		}
	}
	cr_assert_eq(back, n);
	cr_assert_eq(iopool_pending(&pool), 0);
	for (uint32_t i = 0; i < n; i++) {
		cr_assert_eq(t[i].returned, 1, "task %u came back %d times", i, t[i].returned);
		cr_assert_eq(atomic_load(&t[i].execs), 1, "task %u ran %d times", i,
			     atomic_load(&t[i].execs));
		cr_assert_eq(t[i].io.status, (int)i);
	}
	cr_assert_eq(X.norder, n);
	free(t);
}
