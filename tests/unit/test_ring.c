/* ring: SPSC semantics, 32-bit index wrap-around, and stress between two
 * threads and between two processes over a memfd segment (the consumer
 * sleeping on a futex doorbell, as trainers do). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../src/common/base.h"
#include "../../src/common/ring.h"
#include "../../src/common/shm.h"


/* Sanitizers slow everything down (TSan ~10x): fewer items, same coverage
 * of the interleavings that matter (full, empty, wrap). */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define STRESS_SCALE 4
#else
#define STRESS_SCALE 1
#endif

#define CACHELINE 64

/* Back off while the other side has nothing for us: spin a little, then let
 * it run (this machine may have fewer cores than busy threads). */
static inline void backoff(unsigned *spins)
{
	if (++*spins < 64)
		cpu_relax();
	else
		sched_yield();
}

/* The fence of the doorbell protocol. GCC warns that TSan does not model
 * fences; the other side of each one is another process, which TSan does
 * not see either, so the warning is silenced here and nowhere else. */
static inline void full_fence(void)
{
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wtsan"
	atomic_thread_fence(memory_order_seq_cst);
#pragma GCC diagnostic pop
}

/* prod, cons and entries on their own cache lines, as in the shared layout */
struct ring_mem {
	_Alignas(CACHELINE) _Atomic uint32_t prod;
	_Alignas(CACHELINE) _Atomic uint32_t cons;
	_Alignas(CACHELINE) uint32_t entries[];
};

static struct ring_mem *ring_mem_new(uint32_t cap, uint32_t start, struct ring *r)
{
	size_t size = (sizeof(struct ring_mem) + cap * sizeof(uint32_t) + CACHELINE - 1) / CACHELINE * CACHELINE;
	struct ring_mem *m = aligned_alloc(CACHELINE, size);
	cr_assert_not_null(m);
	memset(m, 0xee, sizeof(*m) + cap * sizeof(uint32_t));
	atomic_init(&m->prod, start);
	atomic_init(&m->cons, start);
	*r = (struct ring){ .prod = &m->prod, .cons = &m->cons, .entries = m->entries,
			    .mask = cap - 1 };
	return m;
}

/* ---- one thread ------------------------------------------------------------ */

struct st_case {
	uint32_t cap;
	uint32_t start;     /* initial value of both indices */
};

ParameterizedTestParameters(ring, single_thread)
{
	static struct st_case cases[] = {
		{ 1, 0 }, { 1, UINT32_MAX }, { 2, 0 }, { 2, UINT32_MAX - 1 }, { 2, UINT32_MAX },
		{ 8, 0 }, { 8, UINT32_MAX - 3 }, { 8, 0x7ffffffd }, { 64, UINT32_MAX - 63 },
		{ 64, UINT32_MAX - 10 }, { 1024, UINT32_MAX - 1000 },
	};
	return cr_make_param_array(struct st_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct st_case *c, ring, single_thread)
{
	struct ring r;
	struct ring_mem *m = ring_mem_new(c->cap, c->start, &r);
	cr_assert_eq(ring_capacity(&r), c->cap);
	uint32_t v = 12345;
	cr_assert_eq(ring_count(&r), 0);
	cr_assert_eq(ring_pop(&r, &v), -EAGAIN, "pop from an empty ring");
	cr_assert_eq(v, 12345, "failed pop wrote *v");

	/* fill, overfill, drain: twice, so the second round crosses the wrap
	 * for starts near UINT32_MAX */
	uint32_t next_in = 0, next_out = 0;
	for (int round = 0; round < 3; round++) {
		for (uint32_t i = 0; i < c->cap; i++) {
			cr_assert_eq(ring_push(&r, next_in), 0, "push %u of %u", i, c->cap);
			next_in++;
			cr_assert_eq(ring_count(&r), i + 1);
		}
		cr_assert_eq(ring_push(&r, 0xdead), -ENOBUFS, "push into a full ring");
		cr_assert_eq(ring_count(&r), c->cap);
		for (uint32_t i = 0; i < c->cap; i++) {
			cr_assert_eq(ring_pop(&r, &v), 0);
			cr_assert_eq(v, next_out, "popped %u, want %u", v, next_out);
			next_out++;
		}
		cr_assert_eq(ring_pop(&r, &v), -EAGAIN);
		cr_assert_eq(ring_count(&r), 0);
	}

	/* uneven bursts through many wraps of the entry array */
	uint64_t x = 88172645463325252ull;
	for (int k = 0; k < 2000; k++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		uint32_t burst = (uint32_t)(x % (c->cap + 1));
		uint32_t before = ring_count(&r);
		for (uint32_t i = 0; i < burst; i++) {
			int rc = ring_push(&r, next_in);
			if (before + i < c->cap) {
				cr_assert_eq(rc, 0);
				next_in++;
			} else {
				cr_assert_eq(rc, -ENOBUFS, "push %u beyond capacity %u", before + i, c->cap);
			}
		}
		uint32_t take = (uint32_t)((x >> 20) % (c->cap + 1));
		for (uint32_t i = 0; i < take; i++) {
			int rc = ring_pop(&r, &v);
			if (next_out == next_in) {
				cr_assert_eq(rc, -EAGAIN);
				break;
			}
			cr_assert_eq(rc, 0);
			cr_assert_eq(v, next_out);
			next_out++;
		}
		cr_assert_eq(ring_count(&r), next_in - next_out);
	}
	/* the indices kept running: they moved by exactly the items passed */
	cr_assert_eq(atomic_load(&m->prod), c->start + next_in);
	cr_assert_eq(atomic_load(&m->cons), c->start + next_out);
	free(m);
}

/* ---- two threads ------------------------------------------------------------- */

/* A stress run passes `max_items`, or stops early once it has passed
 * `min_items` and used its time budget: a loaded 2-core machine then still
 * finishes in seconds (tiny rings cost a context switch per item when the
 * two sides do not run at once) without the test ever passing vacuously. */
#define STRESS_BUDGET_NS 2000000000ull

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct mt_case {
	uint32_t cap;
	uint32_t start;
	uint32_t max_items;
	uint32_t min_items;
};

ParameterizedTestParameters(ring, two_threads)
{
	static struct mt_case cases[] = {
		{ 1, UINT32_MAX - 100, 1000000 / STRESS_SCALE, 100000 / STRESS_SCALE },
		{ 2, 0, 2000000 / STRESS_SCALE, 100000 / STRESS_SCALE },
		{ 2, UINT32_MAX - 1000, 2000000 / STRESS_SCALE, 100000 / STRESS_SCALE },
		{ 64, UINT32_MAX - 500000 / STRESS_SCALE, 4000000 / STRESS_SCALE,
		  1000000 / STRESS_SCALE },
		{ 1024, 0, 4000000 / STRESS_SCALE, 1000000 / STRESS_SCALE },
		{ 1024, UINT32_MAX - 777, 4000000 / STRESS_SCALE, 1000000 / STRESS_SCALE },
	};
	return cr_make_param_array(struct mt_case, cases, sizeof(cases) / sizeof(cases[0]));
}

struct producer_arg {
	struct ring *r;
	const struct mt_case *c;
	uint32_t total;        /* items pushed; valid once done */
	_Atomic bool done;
	uint64_t full;         /* times the ring was found full */
};

static void *producer(void *arg)
{
	struct producer_arg *a = arg;
	uint64_t deadline = mono_ns() + STRESS_BUDGET_NS;
	uint32_t i;
	for (i = 0; i < a->c->max_items; i++) {
		if (i >= a->c->min_items && (i & 1023) == 0 && mono_ns() > deadline)
			break;
		unsigned spins = 0;
		while (ring_push(a->r, i) != 0) {
			a->full++;
			backoff(&spins);
		}
	}
	a->total = i;
	atomic_store_explicit(&a->done, true, memory_order_release);
	return NULL;
}

ParameterizedTest(struct mt_case *c, ring, two_threads, .timeout = 120)
{
	struct ring r;
	struct ring_mem *m = ring_mem_new(c->cap, c->start, &r);
	struct producer_arg a = { .r = &r, .c = c };
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, producer, &a), 0);
	uint64_t empty = 0;
	uint32_t want = 0;
	for (;;) {
		uint32_t v;
		unsigned spins = 0;
		bool finished = false;
		while (ring_pop(&r, &v) != 0) {
			/* done is stored after the last push: an empty ring seen
			 * after it means everything was taken */
			if (atomic_load_explicit(&a.done, memory_order_acquire)) {
				finished = ring_pop(&r, &v) != 0;
				break;
			}
			empty++;
			backoff(&spins);
		}
		if (finished)
			break;
		/* lost -> v > want, duplicated or reordered -> v < want */
		if (v != want)
			cr_assert_fail("cap %u: item %u arrived as %u", c->cap, want, v);
		want++;
		cr_assert_leq(ring_count(&r), c->cap);
	}
	pthread_join(t, NULL);
	cr_assert_eq(want, a.total, "took %u of %u items", want, a.total);
	cr_assert_geq(a.total, c->min_items);
	cr_assert_eq(atomic_load(&m->prod), c->start + a.total);
	cr_assert_eq(atomic_load(&m->cons), c->start + a.total);
	cr_log_info("cap %u: %u items, producer found it full %llu times, consumer empty %llu",
		    c->cap, a.total, (unsigned long long)a.full, (unsigned long long)empty);
	free(m);
}

/* ---- two processes over shared memory, with a futex doorbell ---------------- */

struct xproc_hdr {
	_Alignas(CACHELINE) _Atomic uint32_t prod;
	_Alignas(CACHELINE) _Atomic uint32_t cons;
	/* producer -> consumer wake-ups: the producer bumps `doorbell` after
	 * pushing and wakes it if `waiting` says the consumer may sleep */
	_Alignas(CACHELINE) _Atomic uint32_t doorbell;
	_Atomic uint32_t waiting;
	_Atomic uint32_t done;          /* the producer pushed its last item */
	uint32_t total;                 /* how many: valid once done */
	_Atomic uint32_t wakes;         /* futex_wake_all calls by the producer */
	_Alignas(CACHELINE) uint32_t entries[];
};

struct xp_case {
	uint32_t cap;
	uint32_t start;
	uint32_t max_items;
	uint32_t min_items;
	uint32_t pause_every;   /* producer naps after this many items (power of 2) */
};

ParameterizedTestParameters(ring, two_processes)
{
	static struct xp_case cases[] = {
		{ 2, UINT32_MAX - 3, 2000000 / STRESS_SCALE, 100000 / STRESS_SCALE, 1u << 14 },
		{ 64, 0, 8000000 / STRESS_SCALE, 500000 / STRESS_SCALE, 1u << 16 },
		{ 1024, UINT32_MAX - 100000, 8000000 / STRESS_SCALE, 1000000 / STRESS_SCALE,
		  1u << 16 },
	};
	return cr_make_param_array(struct xp_case, cases, sizeof(cases) / sizeof(cases[0]));
}

static void xp_ring_bell(struct xproc_hdr *h)
{
	atomic_fetch_add_explicit(&h->doorbell, 1, memory_order_release);
	/* pairs with the consumer's fence between setting `waiting` and
	 * re-checking the ring: one of the two sees the other */
	full_fence();
	if (atomic_load_explicit(&h->waiting, memory_order_relaxed)) {
		futex_wake_all(&h->doorbell);
		atomic_fetch_add_explicit(&h->wakes, 1, memory_order_relaxed);
	}
}

static void xp_producer(struct xproc_hdr *h, const struct xp_case *c)
{
	struct ring r = { &h->prod, &h->cons, h->entries, c->cap - 1 };
	uint64_t deadline = mono_ns() + STRESS_BUDGET_NS;
	uint32_t i = 0, burst = 1;
	while (i < c->max_items) {
		if (i >= c->min_items && mono_ns() > deadline)
			break;
		uint32_t pushed = 0;
		while (i < c->max_items && pushed < burst && ring_push(&r, i) == 0)
			i++, pushed++;
		/* ring the bell for everything pushed before waiting for space:
		 * a sleeping consumer would otherwise never free any */
		if (pushed > 0)
			xp_ring_bell(h);
		else
			sched_yield(); /* full */
		burst = burst % 61 + 1; /* bursts of 1..61 */
		if (pushed > 0 && (i & (c->pause_every - 1)) < pushed) {
			struct timespec ts = { 0, 200000 }; /* the consumer runs dry and sleeps */
			nanosleep(&ts, NULL);
		}
	}
	h->total = i;
	atomic_store_explicit(&h->done, 1, memory_order_release);
	xp_ring_bell(h);
}

ParameterizedTest(struct xp_case *c, ring, two_processes, .timeout = 120)
{
	struct shm_seg seg;
	size_t size = sizeof(struct xproc_hdr) + c->cap * sizeof(uint32_t);
	cr_assert_eq(shm_create(&seg, "seer-test-ring", size), 0);
	struct xproc_hdr *h = seg.base;
	atomic_store(&h->prod, c->start);
	atomic_store(&h->cons, c->start);

	pid_t parent = getpid();
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(3);
		/* the child maps the segment afresh from the fd, as a trainer would */
		void *base;
		if (shm_map(seg.fd, size, 1, &base) != 0)
			_exit(2);
		xp_producer(base, c);
		_exit(0);
	}

	struct ring r = { &h->prod, &h->cons, h->entries, c->cap - 1 };
	uint64_t sleeps = 0, timeouts = 0, lost = 0;
	uint32_t want = 0;
	for (;;) {
		uint32_t v;
		for (;;) {
			for (unsigned spins = 0; spins < 200; spins++) {
				if (ring_pop(&r, &v) == 0)
					goto got;
				cpu_relax();
			}
			uint32_t bell = atomic_load_explicit(&h->doorbell, memory_order_acquire);
			atomic_store_explicit(&h->waiting, 1, memory_order_relaxed);
			/* pairs with the producer's fence after its doorbell bump */
			full_fence();
			if (ring_pop(&r, &v) == 0) {
				atomic_store_explicit(&h->waiting, 0, memory_order_relaxed);
				goto got;
			}
			if (atomic_load_explicit(&h->done, memory_order_acquire)) {
				atomic_store_explicit(&h->waiting, 0, memory_order_relaxed);
				if (ring_pop(&r, &v) == 0)
					goto got;
				goto finished; /* empty after the last push */
			}
			int rc = futex_wait(&h->doorbell, bell, 5000000000ll);
			atomic_store_explicit(&h->waiting, 0, memory_order_relaxed);
			sleeps++;
			if (rc == -ETIMEDOUT) {
				timeouts++;
				/* entries waiting while we slept 5 s: a lost wake-up */
				if (ring_count(&r) > 0)
					lost++;
				int st;
				if (waitpid(pid, &st, WNOHANG) == pid)
					cr_assert_fail("producer exited (status %#x) at item %u", st,
						       want);
			} else {
				cr_assert_eq(rc, 0, "futex_wait: %s", strerror(-rc));
			}
		}
got:
		if (v != want) {
			kill(pid, SIGKILL);
			cr_assert_fail("cap %u: item %u arrived as %u", c->cap, want, v);
		}
		want++;
	}
finished:;
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "producer status %#x", st);
	cr_assert_eq(want, h->total, "took %u of %u items", want, h->total);
	cr_assert_geq(h->total, c->min_items);
	cr_assert_eq(atomic_load(&h->prod), c->start + h->total);
	cr_assert_eq(lost, 0, "%llu lost wake-ups", (unsigned long long)lost);
	/* the producer naps every pause_every items, so the consumer did sleep
	 * on the futex and was woken through the protocol */
	cr_assert_gt(sleeps, 0, "the consumer never slept: the futex path is untested");
	cr_assert_gt(atomic_load(&h->wakes), 0);
	cr_log_info("cap %u: %u items, consumer slept %llu times (%llu timeouts), %u wakes",
		    c->cap, h->total, (unsigned long long)sleeps, (unsigned long long)timeouts,
		    atomic_load(&h->wakes));
	shm_destroy(&seg);
}

/* futex_wait returns at once when the word already differs, times out when
 * nobody wakes it, and returns when woken from another process. */
Test(ring, futex_basics, .timeout = 30)
{
	struct shm_seg seg;
	cr_assert_eq(shm_create(&seg, "seer-test-futex", 4096), 0);
	_Atomic uint32_t *w = seg.base;
	atomic_store(w, 5);
	cr_assert_eq(futex_wait(w, 4, 1000000000ll), 0, "value differs: no sleep");
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	cr_assert_eq(futex_wait(w, 5, 20000000ll), -ETIMEDOUT);
	clock_gettime(CLOCK_MONOTONIC, &b);
	double el = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	cr_assert_geq(el, 0.015, "timed out after %.3f s, asked 0.020", el);

	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		struct timespec ts = { 0, 50000000 };
		nanosleep(&ts, NULL);
		atomic_store(w, 6);
		futex_wake_all(w);
		_exit(0);
	}
	while (atomic_load(w) == 5)
		cr_assert_eq(futex_wait(w, 5, 10000000000ll), 0);
	cr_assert_eq(atomic_load(w), 6);
	int st;
	waitpid(pid, &st, 0);
	shm_destroy(&seg);
}
