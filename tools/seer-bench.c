/* seer-bench: a DLIO-style trainer emulation, one MPI rank per trainer.
 *
 * Per step: take a batch, touch every byte, sleep the compute time, barrier
 * across trainers (as DDP's allreduce does; a futex when all ranks share a
 * node, so waiting trainers sleep: see step_barrier; --barrier epoch: only at
 * each epoch's end, to measure delivery without the steps' lockstep). Per
 * epoch, rank 0 prints samples/s, MB/s, accelerator utilisation AU = compute
 * / wall, and the stall per step (median, p99) over all ranks.
 *
 *   mpirun -np 4 seer-bench --source seer [--socket PATH] [--compute-ms 5]
 *   mpirun -np 4 seer-bench --source files --data DIR --seed S --batch B --epochs E
 *                           [--threads 8] [--prefetch 2]
 *   seer-bench --membw[=MiB]   one core's read bandwidth with the same loop (the bound)
 *
 * --source files is the baseline: the same files in the same order (seer's
 * sampler), read by a pool of threads a few batches ahead into private
 * buffers, as a PyTorch DataLoader with num_workers and prefetch_factor does. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../src/catalog/catalog.h"
#include "../src/sampler/sampler.h"
#include "../src/common/shm.h"
#include "../src/util/util.h"
#include "seer.h"

struct opts {
	const char *source, *socket, *data, *format, *json;
	uint64_t seed, epochs;
	uint32_t batch;
	bool drop_last;
	unsigned threads, prefetch;
	double compute_ms, compute_sd;
	bool quiet;
	uint64_t membw_mib;
	const char *barrier;
};

/* ---- touching every byte ------------------------------------------------ */

static uint64_t touch(const void *p, uint64_t n)
{
	const uint64_t *w = p;
	uint64_t a = 0, b = 0, c = 0, d = 0, i = 0, words = n / 8;
	for (; i + 4 <= words; i += 4) {
		a ^= w[i];
		b ^= w[i + 1];
		c ^= w[i + 2];
		d ^= w[i + 3];
	}
	for (; i < words; i++)
		a ^= w[i];
	const uint8_t *t = (const uint8_t *)p + words * 8;
	for (uint64_t k = 0; k < n % 8; k++)
		b ^= (uint64_t)t[k] << (8 * k);
	return a ^ b ^ c ^ d;
}

/* The bound: one core reading memory with touch() (XOR over 8-byte words)
 * over a buffer well beyond the caches, pages faulted in first; the best of
 * `passes` passes (the machine's capability, not its load). Bytes/s. */
static double membw(uint64_t mib, int passes, uint64_t *sink)
{
	uint64_t n = mib << 20;
	uint8_t *buf = xmalloc(n);
	memset(buf, 0x5a, n);
	double best = 0;
	for (int i = 0; i < passes; i++) {
		buf[(uint64_t)i * 4096 % n] ^= 1; /* no pass is the same as the last */
		double t0 = now_s();
		*sink ^= touch(buf, n);
		double dt = now_s() - t0;
		best = MAX(best, (double)n / dt);
	}
	free(buf);
	return best;
}

/* ---- the step barrier ----------------------------------------------------- */
/* Every step ends in a barrier across trainers, as DDP's allreduce ends a
 * step. Open MPI's MPI_Barrier polls, with sched_yield when oversubscribed:
 * on a machine with fewer cores than trainers + seerd's threads, trainers
 * waiting for the slowest take CPU from it and from seerd (a trainer waiting
 * for its GPU's allreduce would not). With --barrier futex (the default when
 * every rank is on one node) waiting trainers sleep on a futex in memory the
 * node's ranks share; --barrier mpi keeps MPI_Barrier. */
struct shm_barrier {
	_Atomic uint32_t count, gen;
};
static struct shm_barrier *g_bar; /* NULL: MPI_Barrier (or none) */
static bool g_nobar;                /* --barrier epoch: none between steps */
static uint32_t g_nbar;
static MPI_Win g_win;

static void barrier_init(const char *mode, int world)
{
	if (mode && strcmp(mode, "mpi") == 0)
		return;
	g_nobar = mode && strcmp(mode, "epoch") == 0;
	MPI_Comm local;
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
	int lsize, lrank, one_node, all;
	MPI_Comm_size(local, &lsize);
	MPI_Comm_rank(local, &lrank);
	one_node = lsize == world;
	MPI_Allreduce(&one_node, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	void *base = NULL;
	if (all)
		MPI_Win_allocate_shared(lrank == 0 ? (MPI_Aint)sizeof(struct shm_barrier) : 0, 1,
					MPI_INFO_NULL, local, &base, &g_win);
	if (all) {
		MPI_Aint sz;
		int du;
		MPI_Win_shared_query(g_win, 0, &sz, &du, &base);
		if (lrank == 0)
			memset(base, 0, sizeof(struct shm_barrier));
		g_bar = base;
		g_nbar = (uint32_t)lsize;
	}
	MPI_Comm_free(&local);
	MPI_Barrier(MPI_COMM_WORLD);
}

static void barrier_wait(void)
{
	if (!g_bar) {
		MPI_Barrier(MPI_COMM_WORLD);
		return;
	}
	uint32_t gen = atomic_load(&g_bar->gen);
	if (atomic_fetch_add(&g_bar->count, 1) == g_nbar - 1) {
		atomic_store(&g_bar->count, 0);
		atomic_fetch_add(&g_bar->gen, 1);
		futex_wake_all(&g_bar->gen);
		return;
	}
	while (atomic_load(&g_bar->gen) == gen)
		futex_wait(&g_bar->gen, gen, -1);
}

static void step_barrier(void)
{
	if (!g_nobar)
		barrier_wait();
}

static void epoch_barrier(void)
{
	if (g_nobar)
		barrier_wait();
}

static void barrier_fini(void)
{
	if (g_bar)
		MPI_Win_free(&g_win);
	g_bar = NULL;
}

/* ---- compute time ------------------------------------------------------- */

static uint64_t rng_state = 88172645463325252ull;
static double rnd_normal(void)
{
	/* xorshift + Box-Muller: reproducible per rank */
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	double u1 = ((double)(rng_state >> 11) + 1.0) / 9007199254740993.0;
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	double u2 = (double)(rng_state >> 11) / 9007199254740992.0;
	return sqrt(-2.0 * log(u1)) * cos(2 * M_PI * u2);
}

static double compute_s(const struct opts *o)
{
	double ms = o->compute_ms;
	if (o->compute_sd > 0)
		ms = MAX(0.0, ms + o->compute_sd * rnd_normal());
	return ms / 1000.0;
}

static void busy_sleep(double s)
{
	if (s > 0)
		sleep_ns((uint64_t)(s * 1e9));
}

/* ---- per-epoch accounting ---------------------------------------------- */

/* What the kernel counted for this process over one epoch (getrusage
 * deltas): page faults, context switches, CPU time. Load-independent
 * evidence where wall-clock time is not. Then where the trainer's steps
 * went (seconds summed over the epoch): waiting for the batch, reading its
 * bytes, sleeping past the compute time (the scheduler's wake-up delay),
 * waiting in the step barrier for the other trainers, giving the batch back,
 * and the call that reports the epoch's end. */
enum { RU_MINFLT, RU_MAJFLT, RU_NVCSW, RU_NIVCSW, RU_UTIME, RU_STIME, RU_KN,
       PH_WAIT = RU_KN, PH_TOUCH, PH_OVERSLEEP, PH_BARRIER, PH_RELEASE, PH_EPOCH_END, RU_N };
static const char *const ru_name[RU_N] = { "minflt", "majflt", "nvcsw", "nivcsw", "utime_s",
					     "stime_s", "wait_s", "touch_s", "oversleep_s",
					     "barrier_s", "release_s", "epoch_end_s" };

struct ep {
	double t0, t1;
	double compute;
	uint64_t samples, bytes;
	double *stall;
	uint64_t nstall, capstall;
	double ru[RU_N];
};

static void ru_now(double v[RU_KN])
{
	struct rusage r;
	getrusage(RUSAGE_SELF, &r);
	v[RU_MINFLT] = (double)r.ru_minflt;
	v[RU_MAJFLT] = (double)r.ru_majflt;
	v[RU_NVCSW] = (double)r.ru_nvcsw;
	v[RU_NIVCSW] = (double)r.ru_nivcsw;
	v[RU_UTIME] = (double)r.ru_utime.tv_sec + (double)r.ru_utime.tv_usec * 1e-6;
	v[RU_STIME] = (double)r.ru_stime.tv_sec + (double)r.ru_stime.tv_usec * 1e-6;
}

/* Close epoch e's counters: e gets what was counted since `last`. */
static void ru_close(struct ep *e, double last[RU_KN])
{
	double v[RU_KN];
	ru_now(v);
	for (int i = 0; i < RU_KN; i++) {
		e->ru[i] = v[i] - last[i];
		last[i] = v[i];
	}
}

/* The step's compute (a sleep), then, after `between` (may be NULL), its
 * barrier; both timed into e. */
static void step_end(const struct opts *o, struct ep *e, void (*between)(void *), void *arg)
{
	double cs = compute_s(o), a = now_s();
	busy_sleep(cs);
	double b = now_s();
	e->compute += cs;
	e->ru[PH_OVERSLEEP] += MAX(0.0, b - a - cs);
	if (between)
		between(arg);
	a = now_s();
	e->ru[PH_RELEASE] += a - b;
	b = a;
	step_barrier();
	e->ru[PH_BARRIER] += now_s() - b;
}

static void ep_stall(struct ep *e, double s)
{
	e->ru[PH_WAIT] += s;
	if (e->nstall == e->capstall) {
		e->capstall = MAX(e->capstall * 2, 1024);
		e->stall = xrealloc(e->stall, e->capstall * sizeof(double));
	}
	e->stall[e->nstall++] = s;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void report(const struct opts *o, struct ep *eps, uint64_t nep, int rank, int world,
		   uint64_t sink)
{
	FILE *js = NULL;
	if (rank == 0 && o->json && !(js = fopen(o->json, "w")))
		fprintf(stderr, "seer-bench: %s: %s\n", o->json, strerror(errno));
	if (js)
		fprintf(js, "{\"source\":\"%s\",\"world\":%d,\"compute_ms\":%g,\"barrier\":\"%s\","
			"\"epochs\":[", o->source, world, o->compute_ms,
			g_nobar ? "epoch" : g_bar ? "futex" : "mpi");
	if (rank == 0 && !o->quiet)
		printf("%-6s %6s %10s %10s %9s %7s %11s %11s %9s %9s %7s %7s %8s %8s\n", "source",
		       "epoch", "wall_s", "samples/s", "MB/s", "AU_%", "stall_med_ms", "stall_p99_ms",
		       "flt/tr", "flt_max", "usr_s", "sys_s", "vcsw", "ivcsw");
	for (uint64_t e = 0; e < nep; e++) {
		struct ep *x = &eps[e];
		double t0 = x->t0, t1 = x->t1, mint0, maxt0, maxt1, comp;
		unsigned long long s = x->samples, b = x->bytes, S, Bt;
		MPI_Reduce(&t0, &mint0, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
		MPI_Reduce(&t0, &maxt0, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		MPI_Reduce(&t1, &maxt1, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		MPI_Reduce(&x->compute, &comp, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
		MPI_Reduce(&s, &S, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		MPI_Reduce(&b, &Bt, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		double *ru = rank == 0 ? xcalloc((size_t)world * RU_N, sizeof(double)) : NULL;
		MPI_Gather(x->ru, RU_N, MPI_DOUBLE, ru, RU_N, MPI_DOUBLE, 0, MPI_COMM_WORLD);
		int n = (int)x->nstall;
		int *counts = rank == 0 ? xcalloc((size_t)world, sizeof(int)) : NULL;
		MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
		int *displs = NULL;
		double *all = NULL;
		int total = 0;
		if (rank == 0) {
			displs = xcalloc((size_t)world, sizeof(int));
			for (int r = 0; r < world; r++) {
				displs[r] = total;
				total += counts[r];
			}
			all = xcalloc((size_t)MAX(total, 1), sizeof(double));
		}
		MPI_Gatherv(x->stall, n, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0,
			    MPI_COMM_WORLD);
		if (rank == 0) {
			qsort(all, (size_t)total, sizeof(double), cmp_d);
			double med = total ? all[total / 2] : 0;
			double p99 = total ? all[MIN(total - 1, (int)ceil(0.99 * total) - 1)] : 0;
			/* the first trainer's start to the last one's end; t0_spread_s
			 * says how far apart they started (an early starter waits in
			 * its first step's barrier, and that wait is in this epoch) */
			double wall = maxt1 - mint0;
			double au = comp / world / wall * 100.0;
			double sum[RU_N] = { 0 }, fmax = 0;
			for (int r = 0; r < world; r++) {
				for (int i = 0; i < RU_N; i++)
					sum[i] += ru[r * RU_N + i];
				fmax = MAX(fmax, ru[r * RU_N + RU_MINFLT]);
			}
			if (!o->quiet)
				printf("%-6s %6llu %10.3f %10.0f %9.1f %7.1f %11.3f %11.3f %9.0f %9.0f "
				       "%7.3f %7.3f %8.0f %8.0f\n", o->source, (unsigned long long)e, wall,
				       (double)S / wall, (double)Bt / wall / 1e6, au, med * 1e3, p99 * 1e3,
				       sum[RU_MINFLT] / world, fmax, sum[RU_UTIME], sum[RU_STIME],
				       sum[RU_NVCSW], sum[RU_NIVCSW]);
			if (js)
				fprintf(js, "%s{\"epoch\":%llu,\"wall_s\":%.6f,\"samples\":%llu,"
					"\"bytes\":%llu,\"samples_per_s\":%.3f,\"mb_per_s\":%.3f,"
					"\"au\":%.5f,\"stall_median_s\":%.6f,\"stall_p99_s\":%.6f,"
					"\"compute_s\":%.6f,\"t_start\":%.6f,\"t0_spread_s\":%.6f",
					e ? "," : "", (unsigned long long)e, wall, S, Bt, (double)S / wall,
					(double)Bt / wall / 1e6, au / 100.0, med, p99, comp / world, mint0,
					maxt0 - mint0);
			for (int i = 0; js && i < RU_N; i++) {
				fprintf(js, ",\"%s\":[", ru_name[i]); /* one value per trainer */
				for (int r = 0; r < world; r++)
					fprintf(js, "%s%.6g", r ? "," : "", ru[r * RU_N + i]);
				fprintf(js, "]");
			}
			if (js)
				fprintf(js, "}");
			free(counts);
			free(ru);
			free(displs);
			free(all);
		}
	}
	if (js) {
		fprintf(js, "],\"sink\":%llu}\n", (unsigned long long)sink);
		fclose(js);
	}
}

/* ---- source: seer --------------------------------------------------------- */

struct rel {
	seer_client_t *c;
	seer_batch_t *b;
};

static void release_batch(void *arg)
{
	struct rel *r = arg;
	seer_release(r->c, r->b);
}

static int run_seer(const struct opts *o, int rank, int world, struct ep **out, uint64_t *nep,
		    uint64_t *sink)
{
	seer_options_t so = { .socket_path = o->socket, .rank = rank, .world_size = world };
	seer_client_t *c;
	if (seer_connect(&so, &c) < 0) {
		fprintf(stderr, "seer-bench %d: %s\n", rank, seer_errmsg());
		return 1;
	}
	uint64_t E = seer_epochs(c);
	struct ep *eps = xcalloc(E, sizeof(*eps));
	uint64_t e = 0;
	bool started = false;
	double ru_last[RU_KN];
	ru_now(ru_last);
	for (;;) {
		seer_batch_t *b;
		double tw = now_s();
		int rc = seer_next(c, 600000, &b);
		double t = now_s();
		if (rc == SEER_EEPOCH) {
			eps[e].t1 = t;
			eps[e].ru[PH_EPOCH_END] += t - tw;
			epoch_barrier();
			ru_close(&eps[e], ru_last);
			e++;
			started = false;
			continue;
		}
		if (rc == SEER_EEND)
			break;
		if (rc < 0) {
			fprintf(stderr, "seer-bench %d: %s\n", rank, seer_errmsg());
			return 1;
		}
		e = seer_batch_epoch(b);
		if (!started) {
			eps[e].t0 = tw;
			started = true;
		}
		ep_stall(&eps[e], t - tw);
		uint32_t n = seer_batch_len(b);
		double ta = now_s();
		for (uint32_t i = 0; i < n; i++) {
			uint64_t len = seer_sample_size(b, i);
			*sink ^= touch(seer_sample_data(b, i), len);
			eps[e].bytes += len;
		}
		eps[e].ru[PH_TOUCH] += now_s() - ta;
		eps[e].samples += n;
		struct rel r = { c, b };
		step_end(o, &eps[e], release_batch, &r);
	}
	seer_close(c);
	*out = eps;
	*nep = E;
	return 0;
}

/* ---- source: files (the threaded baseline) ------------------------------- */

struct fjob {
	uint64_t g;         /* global batch this buffer holds */
	uint32_t n;
	uint32_t ids[1024];
	void *buf[1024];
	_Atomic uint32_t left;
};

struct fpool {
	const struct catalog *cat;
	pthread_mutex_t mu;
	pthread_cond_t cv, done_cv;
	/* work: (job, sample index) in order of need */
	struct { struct fjob *j; uint32_t i; } *q;
	uint64_t qh, qt, qcap;
	bool stop;
	int err;
};

static void *fworker(void *arg)
{
	struct fpool *p = arg;
	struct catalog_reader rd;
	catalog_reader_init(&rd, p->cat);
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && p->qh == p->qt)
			pthread_cond_wait(&p->cv, &p->mu);
		if (p->stop)
			break;
		struct fjob *j = p->q[p->qh % p->qcap].j;
		uint32_t i = p->q[p->qh % p->qcap].i;
		p->qh++;
		pthread_mutex_unlock(&p->mu);
		int rc = catalog_read(&rd, j->ids[i], j->buf[i]);
		pthread_mutex_lock(&p->mu);
		if (rc != 0 && !p->err) {
			p->err = rc;
			fprintf(stderr, "seer-bench: %s\n", rd.err);
		}
		if (atomic_fetch_sub(&j->left, 1) == 1)
			pthread_cond_broadcast(&p->done_cv);
	}
	pthread_mutex_unlock(&p->mu);
	catalog_reader_fini(&rd);
	return NULL;
}

static int run_files(const struct opts *o, int rank, int world, struct ep **out, uint64_t *nep,
		     uint64_t *sink)
{
	struct catalog_opts co = { .root = o->data, .format = o->format };
	struct catalog *cat;
	char err[1024];
	if (catalog_open(&co, &cat, err, sizeof(err)) != 0) {
		fprintf(stderr, "seer-bench: %s\n", err);
		return 1;
	}
	struct sampler_shape sh;
	if (sampler_shape_init(&sh, cat->nsamples, o->seed, (uint32_t)world, o->batch, o->drop_last,
			   true) != 0 || o->batch > 1024) {
		fprintf(stderr, "seer-bench: bad batch size for the dataset (max 1024)\n");
		return 1;
	}
	struct sampler_cache sc;
	sampler_cache_init(&sc, &sh);
	uint64_t total = o->epochs * sh.bpe;
	unsigned depth = MAX(1u, o->prefetch);
	struct fjob *jobs = xcalloc(depth, sizeof(*jobs));
	for (unsigned k = 0; k < depth; k++)
		for (uint32_t i = 0; i < o->batch; i++)
			jobs[k].buf[i] = xmalloc(MAX(cat->max_len, 1));
	struct fpool p = { .cat = cat, .qcap = (uint64_t)depth * o->batch + 1 };
	p.q = xcalloc(p.qcap, sizeof(*p.q));
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.cv, NULL);
	pthread_cond_init(&p.done_cv, NULL);
	pthread_t *th = xcalloc(o->threads, sizeof(pthread_t));
	for (unsigned t = 0; t < o->threads; t++)
		pthread_create(&th[t], NULL, fworker, &p);
	uint64_t issued = 0;
	struct ep *eps = xcalloc(o->epochs, sizeof(*eps));
	uint32_t ids[1024];
	double ru_last[RU_KN];
	ru_now(ru_last);
	for (uint64_t g = 0; g < total; g++) {
		/* keep `depth` batches in flight, as DataLoader's prefetch_factor */
		pthread_mutex_lock(&p.mu);
		while (issued < total && issued < g + depth) {
			struct fjob *j = &jobs[issued % depth];
			int n = sampler_batch(&sc, issued / sh.bpe, (uint32_t)rank, issued % sh.bpe, ids);
			j->g = issued;
			j->n = (uint32_t)n;
			memcpy(j->ids, ids, sizeof(uint32_t) * (size_t)n);
			atomic_store(&j->left, (uint32_t)n);
			for (int i = 0; i < n; i++) {
				p.q[p.qt % p.qcap].j = j;
				p.q[p.qt % p.qcap].i = (uint32_t)i;
				p.qt++;
			}
			issued++;
		}
		pthread_cond_broadcast(&p.cv);
		uint64_t e = g / sh.bpe;
		double tw = now_s();
		if (g % sh.bpe == 0)
			eps[e].t0 = tw;
		struct fjob *j = &jobs[g % depth];
		while (atomic_load(&j->left) != 0 && !p.err)
			pthread_cond_wait(&p.done_cv, &p.mu);
		pthread_mutex_unlock(&p.mu);
		if (p.err)
			return 1;
		ep_stall(&eps[e], now_s() - tw);
		double ta = now_s();
		for (uint32_t i = 0; i < j->n; i++) {
			uint64_t len = cat->samples[j->ids[i]].length;
			*sink ^= touch(j->buf[i], len);
			eps[e].bytes += len;
		}
		eps[e].ru[PH_TOUCH] += now_s() - ta;
		eps[e].samples += j->n;
		step_end(o, &eps[e], NULL, NULL);
		if (g % sh.bpe == sh.bpe - 1) {
			eps[e].t1 = now_s();
			epoch_barrier();
			ru_close(&eps[e], ru_last);
		}
	}
	pthread_mutex_lock(&p.mu);
	p.stop = true;
	pthread_cond_broadcast(&p.cv);
	pthread_mutex_unlock(&p.mu);
	for (unsigned t = 0; t < o->threads; t++)
		pthread_join(th[t], NULL);
	*out = eps;
	*nep = o->epochs;
	sampler_cache_free(&sc);
	catalog_free(cat);
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = { .source = "seer", .format = "files", .epochs = 1, .batch = 32,
			  .threads = 8, .prefetch = 2 };
	static const struct option lo[] = {
		{ "source", required_argument, NULL, 's' },
		{ "socket", required_argument, NULL, 'S' },
		{ "data", required_argument, NULL, 'd' },
		{ "format", required_argument, NULL, 'f' },
		{ "seed", required_argument, NULL, 'r' },
		{ "epochs", required_argument, NULL, 'e' },
		{ "batch", required_argument, NULL, 'b' },
		{ "drop-last", no_argument, NULL, 'D' },
		{ "threads", required_argument, NULL, 't' },
		{ "prefetch", required_argument, NULL, 'p' },
		{ "compute-ms", required_argument, NULL, 'c' },
		{ "compute-sd-ms", required_argument, NULL, 'v' },
		{ "json", required_argument, NULL, 'j' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "membw", optional_argument, NULL, 'm' },
		{ "barrier", required_argument, NULL, 'B' },
		{ 0 },
	};
	int ch;
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (ch) {
		case 's': o.source = optarg; break;
		case 'S': o.socket = optarg; break;
		case 'd': o.data = optarg; break;
		case 'f': o.format = optarg; break;
		case 'r': o.seed = strtoull(optarg, NULL, 0); break;
		case 'e': o.epochs = strtoull(optarg, NULL, 0); break;
		case 'b': o.batch = (uint32_t)atoi(optarg); break;
		case 'D': o.drop_last = true; break;
		case 't': o.threads = (unsigned)atoi(optarg); break;
		case 'p': o.prefetch = (unsigned)atoi(optarg); break;
		case 'c': o.compute_ms = atof(optarg); break;
		case 'v': o.compute_sd = atof(optarg); break;
		case 'j': o.json = optarg; break;
		case 'q': o.quiet = true; break;
		case 'B': o.barrier = optarg; break;
		case 'm': o.membw_mib = optarg ? strtoull(optarg, NULL, 0) : 512; break;
		default:
			fprintf(stderr, "usage: seer-bench --source seer|files [--socket P] [--data DIR "
					"--format F --seed S --epochs E --batch B --drop-last --threads N "
					"--prefetch P] [--compute-ms MS --compute-sd-ms SD] [--json FILE] "
					"[--barrier futex|mpi|epoch]\n"
					"       seer-bench --membw[=MiB] [--json FILE]   (one core's "
					"read bandwidth, no MPI)\n");
			return 2;
		}
	}
	if (o.membw_mib) {
		uint64_t sink = 0;
		double bps = membw(MAX(o.membw_mib, 64ull), 8, &sink);
		printf("single-core read bandwidth: %.2f GB/s (XOR over 8-byte words, %llu MiB, best "
		       "of 8 passes)\n", bps / 1e9, (unsigned long long)MAX(o.membw_mib, 64ull));
		FILE *js = o.json ? fopen(o.json, "w") : NULL;
		if (js) {
			fprintf(js, "{\"membw_bps\":%.0f,\"mib\":%llu,\"sink\":%llu}\n", bps,
				(unsigned long long)MAX(o.membw_mib, 64ull), (unsigned long long)sink);
			fclose(js);
		}
		return 0;
	}
	MPI_Init(&argc, &argv);
	int rank, world;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	rng_state ^= (uint64_t)(rank + 1) * 0x9e3779b97f4a7c15ull;
	if (o.barrier && strcmp(o.barrier, "mpi") != 0 && strcmp(o.barrier, "futex") != 0 &&
	    strcmp(o.barrier, "epoch") != 0) {
		if (rank == 0)
			fprintf(stderr, "seer-bench: --barrier futex, mpi or epoch, not '%s'\n",
				o.barrier);
		MPI_Finalize();
		return 2;
	}
	barrier_init(o.barrier, world);
	struct ep *eps = NULL;
	uint64_t nep = 0, sink = 0;
	int rc;
	if (strcmp(o.source, "seer") == 0) {
		rc = run_seer(&o, rank, world, &eps, &nep, &sink);
	} else if (strcmp(o.source, "files") == 0 && o.data) {
		rc = run_files(&o, rank, world, &eps, &nep, &sink);
	} else {
		fprintf(stderr, "seer-bench: --source seer, or --source files with --data DIR\n");
		rc = 2;
	}
	int any;
	MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (any == 0)
		report(&o, eps, nep, rank, world, sink);
	barrier_fini();
	MPI_Finalize();
	return any;
}
