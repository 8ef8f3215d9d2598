/* seer-apitest: misuse of the C API, one scenario per run, for
 * test_client_api.py. Links the public library only (include/seer.h).
 *
 *   seer-apitest MODE [--socket PATH] [--daemon-pid PID] [--marker FILE]
 *                     [--timeout-ms MS]
 *
 * Modes: null (no daemon), live, stale, two-threads, close-waiting,
 * close-seeking, seek-timeout, connect-timeout, fork, connect, warm. Each check prints "ok ..." or
 * "FAIL ..."; the exit code is the number of failed checks (a crash is a
 * signal). Modes with --daemon-pid stop the daemon (SIGSTOP) to hold the
 * stream still, and always let it go on (SIGCONT) before they return. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "seer.h"

static int failures;
static const char *sock_path;
static pid_t daemon_pid;
static const char *marker;
static int timeout_ms = 1000;
static int rank = 0, world = 1;

#define CHECK(cond, ...)                                                                    \
	do {                                                                                \
		if (cond) {                                                                 \
			printf("ok   ");                                                        \
		} else {                                                                    \
			printf("FAIL ");                                                        \
			failures++;                                                         \
		}                                                                           \
		printf(__VA_ARGS__);                                                        \
		printf("  [%s]\n", seer_errmsg());                                          \
		fflush(stdout);                                                             \
	} while (0)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static seer_client_t *connect_or_die(int tmo)
{
	seer_options_t o = { .socket_path = sock_path, .rank = rank, .world_size = world,
			     .connect_timeout_ms = tmo };
	seer_client_t *c = NULL;
	double t0 = now();
	int rc;
	/* a reconnect may reach the daemon before it saw our last session end */
	while ((rc = seer_connect(&o, &c)) == SEER_EREFUSED && strstr(seer_errmsg(), "already") &&
	       now() - t0 < 10)
		usleep(10000);
	if (rc != 0) {
		printf("FAIL connect: %d %s\n", rc, seer_errmsg());
		exit(100);
	}
	return c;
}

static void daemon_signal(int sig)
{
	if (daemon_pid <= 0 || kill(daemon_pid, sig) != 0) {
		printf("FAIL cannot signal the daemon (pid %d): %s\n", (int)daemon_pid,
		       strerror(errno));
		exit(100);
	}
}

/* Stop the daemon and take what it published before: the next seer_next
 * then has to wait. Returns the global index of the last batch taken. */
static long long stop_and_drain(seer_client_t *c)
{
	uint64_t bpe = seer_batches_per_epoch(c);
	/* one batch first: a session may resume anywhere, and the daemon may
	 * not have published anything yet */
	seer_batch_t *first;
	int rc0;
	while ((rc0 = seer_next(c, 10000, &first)) == SEER_EEPOCH) {
	}
	if (rc0 != 0) {
		printf("FAIL the first batch: %d %s\n", rc0, seer_errmsg());
		exit(100);
	}
	long long last = (long long)(seer_batch_epoch(first) * bpe + seer_batch_step(first));
	seer_release(c, first);
	daemon_signal(SIGSTOP);
	for (;;) {
		seer_batch_t *b;
		int rc = seer_next(c, 100, &b);
		if (rc == SEER_EEPOCH)
			continue;
		if (rc == -ETIMEDOUT)
			return last;
		if (rc != 0) {
			printf("FAIL draining: %d %s\n", rc, seer_errmsg());
			daemon_signal(SIGCONT);
			exit(100);
		}
		last = (long long)(seer_batch_epoch(b) * bpe + seer_batch_step(b));
		seer_release(c, b);
	}
}

/* ---- no daemon ---------------------------------------------------------------- */

static void mode_null(void)
{
	seer_batch_t *b = (seer_batch_t *)(uintptr_t)0x1;
	CHECK(seer_next(NULL, 0, &b) == -EINVAL && b == NULL, "seer_next(NULL, 0, &b) is -EINVAL");
	CHECK(seer_next(NULL, 0, NULL) == -EINVAL, "seer_next(NULL, 0, NULL) is -EINVAL");
	CHECK(seer_seek(NULL, 0, 0) == -EINVAL, "seer_seek(NULL) is -EINVAL");
	CHECK(seer_release(NULL, NULL) == -EINVAL, "seer_release(NULL, NULL) is -EINVAL");
	seer_options_t o = { .socket_path = "/nonexistent/seer.sock", .connect_timeout_ms = 1 };
	CHECK(seer_connect(&o, NULL) == -EINVAL, "seer_connect(&o, NULL) is -EINVAL");
	CHECK(seer_batch_len(NULL) == 0, "seer_batch_len(NULL) is 0");
	const char *e = seer_batch_error(NULL);
	CHECK(e && strstr(e, "not a valid batch"), "seer_batch_error(NULL) says it is not a batch");
	CHECK(seer_sample_data(NULL, 0) == NULL && seer_sample_size(NULL, 0) == 0 &&
	      seer_sample_label(NULL, 0) == -1 && seer_sample_id(NULL, 0) == UINT64_MAX,
	      "sample accessors on NULL give nothing");
	uint64_t dims[8];
	CHECK(seer_sample_shape(NULL, 0, dims, 8) < 0 && seer_batch_export(NULL, NULL, NULL, NULL,
									   NULL, NULL) < 0,
	      "shape/export on NULL fail");
	CHECK(seer_rank(NULL) == -EBADF && seer_epochs(NULL) == 0 && seer_arena_base(NULL) == NULL &&
	      seer_type_info(NULL, 0, NULL, NULL, 0) < 0 && seer_arena_fd(NULL) < 0,
	      "client facts on NULL give nothing");
	seer_close(NULL);
	CHECK(1, "seer_close(NULL) returns");
	/* not handles at all: a stack address, a heap pointer, small integers */
	int local;
	void *heap = malloc(64);
	memset(heap, 0xff, 64);
	void *fakes[] = { &local, heap, (void *)(uintptr_t)1, (void *)(uintptr_t)3,
			  (void *)(uintptr_t)0xdeadbeef, (void *)(uintptr_t)UINT64_MAX };
	for (size_t i = 0; i < sizeof(fakes) / sizeof(fakes[0]); i++) {
		seer_client_t *fc = fakes[i];
		seer_batch_t *fb = fakes[i];
		int r1 = seer_next(fc, 0, &b), r2 = seer_release(fc, fb), r3 = seer_seek(fc, 0, 0);
		seer_close(fc);
		CHECK(r1 < 0 && r2 < 0 && r3 < 0 && seer_batch_len(fb) == 0 &&
		      seer_sample_data(fb, 0) == NULL,
		      "forged handle %p: next %d, release %d, seek %d", fakes[i], r1, r2, r3);
	}
	free(heap);
	o.world_size = -1;
	seer_client_t *c = (seer_client_t *)(uintptr_t)0x1;
	CHECK(seer_connect(&o, &c) == -EINVAL && c == NULL, "negative world size is -EINVAL");
	o.world_size = 2;
	o.rank = 2;
	CHECK(seer_connect(&o, &c) == -EINVAL, "rank 2 of world 2 is -EINVAL");
	o.rank = 0;
	o.flags = 0x80;
	CHECK(seer_connect(&o, &c) == -EINVAL, "unknown flags are -EINVAL");
	o.flags = 0;
	char longjob[100];
	memset(longjob, 'j', sizeof(longjob) - 1);
	longjob[sizeof(longjob) - 1] = '\0';
	o.job_id = longjob;
	CHECK(seer_connect(&o, &c) == -EINVAL, "a 99-character job id is -EINVAL (not cut)");
}

/* ---- a live client ---------------------------------------------------------------- */

static void mode_live(void)
{
	seer_client_t *c = connect_or_die(timeout_ms);
	CHECK(seer_next(c, 1000, NULL) == -EINVAL, "seer_next(c, t, NULL) is -EINVAL");
	seer_batch_t *b = NULL;
	int rc;
	while ((rc = seer_next(c, 5000, &b)) == SEER_EEPOCH) {
	}
	CHECK(rc == 0 && b, "a batch: %d", rc);
	uint32_t n = seer_batch_len(b);
	CHECK(n > 0 && seer_sample_data(b, 0) && seer_sample_data(b, n) == NULL &&
	      seer_sample_size(b, n) == 0 && seer_batch_error(b) == NULL,
	      "accessors on a held batch (%u samples), index n out of range", n);
	CHECK(seer_sample_shape(b, 0, NULL, 4) == -EINVAL, "seer_sample_shape(dims NULL, 4) is -EINVAL");
	CHECK(seer_release((seer_client_t *)b, b) == -EINVAL, "a batch passed as the client is -EINVAL");
	CHECK(seer_release(c, (seer_batch_t *)c) == -EINVAL, "a client passed as the batch is -EINVAL");
	CHECK(seer_release(c, b) == 0, "release");
	CHECK(seer_release(c, b) == SEER_ENOTHELD, "release twice is SEER_ENOTHELD");
	CHECK(seer_batch_len(b) == 0 && seer_sample_data(b, 0) == NULL,
	      "accessors on a released batch give nothing");
	while ((rc = seer_next(c, 5000, &b)) == SEER_EEPOCH) {
	}
	CHECK(rc == 0, "another batch, held across close");
	seer_close(c);
	CHECK(1, "seer_close with a batch held");
	seer_close(c);
	CHECK(1, "seer_close twice");
	CHECK(seer_next(c, 0, &b) == -EBADF && b == NULL, "seer_next after close is -EBADF");
	CHECK(seer_release(c, b) == -EBADF, "seer_release after close is -EBADF");
	CHECK(seer_seek(c, 0, 0) == -EBADF, "seer_seek after close is -EBADF");
	CHECK(seer_rank(c) == -EBADF && seer_epochs(c) == 0 && seer_arena_base(c) == NULL,
	      "facts after close give nothing");
	CHECK(seer_batch_len(b) == 0 && seer_batch_error(b) != NULL,
	      "the batch held across close is stale");
	/* a new client may reuse the closed one's table entry: the old handle
	 * must still be closed, not an alias of the new client */
	seer_client_t *c3 = connect_or_die(timeout_ms);
	CHECK(seer_next(c, 0, &b) == -EBADF, "the closed handle stays closed after a new connect");
	CHECK(seer_rank(c3) == 0, "the new client works");
	seer_close(c3);
}

/* ---- stale batch handle ------------------------------------------------------------ */

static uint32_t batch_crc(const seer_batch_t *b)
{
	uint32_t crc = 0;
	for (uint32_t i = 0; i < seer_batch_len(b); i++)
		crc = (uint32_t)crc32(crc, seer_sample_data(b, i), (uInt)seer_sample_size(b, i));
	return crc;
}

static void mode_stale(void)
{
	seer_client_t *c = connect_or_die(timeout_ms);
	seer_batch_t *old = NULL, *b = NULL;
	int rc;
	while ((rc = seer_next(c, 5000, &old)) == SEER_EEPOCH) {
	}
	CHECK(rc == 0, "first batch");
	uint64_t e0 = seer_batch_epoch(old), s0 = seer_batch_step(old);
	CHECK(seer_release(c, old) == 0, "release it");
	/* take batches one at a time until the slot of `old` is reused: the old
	 * handle then names a slot that holds someone else's batch */
	int reused = 0;
	for (int k = 0; k < 256 && !reused; k++) {
		while ((rc = seer_next(c, 5000, &b)) == SEER_EEPOCH) {
		}
		if (rc != 0)
			break;
		uint32_t before = batch_crc(b);
		int r = seer_release(c, old);
		if (r == -ESTALE) {
			reused = 1;
			CHECK(seer_batch_len(b) > 0 && batch_crc(b) == before,
			      "the new batch is still held and unchanged after the stale release");
			CHECK(seer_release(c, b) == 0, "its real owner releases it");
		} else {
			CHECK(r == SEER_ENOTHELD, "stale release before reuse is SEER_ENOTHELD (%d)", r);
			seer_release(c, b);
		}
	}
	CHECK(reused, "releasing the handle of batch %llu:%llu after its slot was reused is -ESTALE",
	      (unsigned long long)e0, (unsigned long long)s0);
	seer_close(c);
}

/* ---- threads ---------------------------------------------------------------- */

struct waiter {
	seer_client_t *c;
	int tmo;
	int rc;
	seer_batch_t *b;
	char msg[256];
	_Atomic int done;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	do /* the main thread's probes may hold the stream for a moment */
		w->rc = seer_next(w->c, w->tmo, &w->b);
	while (w->rc == -EBUSY);
	snprintf(w->msg, sizeof(w->msg), "%s", seer_errmsg());
	atomic_store(&w->done, 1);
	return NULL;
}

/* Probe with seer_next(c, 0) until it reports that another thread is in it. */
static int probe_busy(seer_client_t *c)
{
	double t0 = now();
	int rc;
	seer_batch_t *b;
	do {
		rc = seer_next(c, 0, &b);
		if (rc == 0 || rc == SEER_EBATCH)
			seer_release(c, b);
	} while (rc != -EBUSY && rc != -EBADF && now() - t0 < 10);
	return rc;
}

static void mode_two_threads(void)
{
	seer_client_t *c = connect_or_die(timeout_ms);
	uint64_t bpe = seer_batches_per_epoch(c);
	long long last = stop_and_drain(c);
	struct waiter w = { .c = c, .tmo = 20000 };
	pthread_t t;
	pthread_create(&t, NULL, waiter_main, &w);
	int rc = probe_busy(c);
	CHECK(rc == -EBUSY && strstr(seer_errmsg(), "another thread"),
	      "a second thread in seer_next gets -EBUSY at once (%d)", rc);
	rc = seer_alive(c);
	CHECK(rc == -EBUSY && strstr(seer_errmsg(), "seer_alive: another thread"),
	      "seer_alive from a second thread while one waits in seer_next gets -EBUSY (%d: %s)",
	      rc, seer_errmsg());
	daemon_signal(SIGCONT);
	pthread_join(t, NULL);
	long long g = w.rc == 0 ? (long long)(seer_batch_epoch(w.b) * bpe + seer_batch_step(w.b)) : -2;
	CHECK(w.rc == 0 && g == last + 1, "the first thread got the next batch, %lld after %lld (%d)",
	      g, last, w.rc);
	if (w.rc == 0)
		seer_release(c, w.b);
	int bad = 0;
	for (int i = 0; i < 40; i++) {
		seer_batch_t *b;
		rc = seer_next(c, 5000, &b);
		if (rc == SEER_EEPOCH)
			continue;
		if (rc != 0) {
			bad = rc;
			break;
		}
		seer_release(c, b);
	}
	CHECK(bad == 0, "the stream goes on undisturbed (%d)", bad);
	seer_close(c);
}

static void mode_close_waiting(void)
{
	seer_client_t *c = connect_or_die(timeout_ms);
	stop_and_drain(c);
	struct waiter w = { .c = c, .tmo = -1 };
	pthread_t t;
	pthread_create(&t, NULL, waiter_main, &w);
	int rc = probe_busy(c);
	CHECK(rc == -EBUSY, "a thread waits in seer_next (forever) (%d)", rc);
	double t0 = now();
	seer_close(c);
	double dt = now() - t0;
	for (int i = 0; i < 1000 && !atomic_load(&w.done); i++)
		usleep(5000);
	CHECK(atomic_load(&w.done) && w.rc == -EBADF,
	      "seer_close from another thread makes the waiter return -EBADF (%d: %s)", w.rc, w.msg);
	CHECK(dt < 2.0, "seer_close returned in %.3f s", dt);
	pthread_join(t, NULL);
	seer_batch_t *b;
	CHECK(seer_next(c, 0, &b) == -EBADF, "seer_next after that close is -EBADF");
	seer_close(c);
	daemon_signal(SIGCONT);
}

struct seeker {
	seer_client_t *c;
	int rc;
	_Atomic int done;
};

static void *seeker_main(void *arg)
{
	struct seeker *sk = arg;
	do
		sk->rc = seer_seek(sk->c, 0, 1);
	while (sk->rc == -EBUSY);
	atomic_store(&sk->done, 1);
	return NULL;
}

/* seer_close while another thread waits for a seek's answer from a stopped
 * daemon (a long connect timeout): close must not wait for that timeout. */
static void mode_close_seeking(void)
{
	seer_client_t *c = connect_or_die(timeout_ms);
	stop_and_drain(c);
	struct seeker sk = { .c = c };
	pthread_t t;
	pthread_create(&t, NULL, seeker_main, &sk);
	int rc = probe_busy(c);
	CHECK(rc == -EBUSY, "a thread waits for the seek's answer (%d)", rc);
	double t0 = now();
	seer_close(c);
	double dt = now() - t0;
	pthread_join(t, NULL);
	CHECK(sk.rc == -EBADF, "the seeking thread returns -EBADF (%d)", sk.rc);
	CHECK(dt < 2.0, "seer_close returned in %.3f s (connect timeout %d ms)", dt, timeout_ms);
	daemon_signal(SIGCONT);
}

/* ---- a stopped daemon ----------------------------------------------------------- */

static void mode_seek_timeout(void)
{
	seer_client_t *c = connect_or_die(timeout_ms);
	seer_batch_t *b;
	int rc;
	while ((rc = seer_next(c, 5000, &b)) == SEER_EEPOCH) {
	}
	if (rc == 0)
		seer_release(c, b);
	daemon_signal(SIGSTOP);
	double t0 = now();
	rc = seer_seek(c, 0, 1);
	double dt = now() - t0;
	CHECK(rc == -ETIMEDOUT && dt < timeout_ms / 1000.0 + 2,
	      "seek against a stopped daemon: %d after %.2f s (connect timeout %d ms)", rc, dt,
	      timeout_ms);
	rc = seer_next(c, 0, &b);
	CHECK(rc == -EPIPE, "after the lost seek the client says so (%d)", rc);
	daemon_signal(SIGCONT);
	seer_close(c);
}

static void mode_connect_timeout(void)
{
	daemon_signal(SIGSTOP);
	seer_options_t o = { .socket_path = sock_path, .rank = 0, .world_size = 1,
			     .connect_timeout_ms = timeout_ms };
	seer_client_t *c = NULL;
	double t0 = now();
	int rc = seer_connect(&o, &c);
	double dt = now() - t0;
	daemon_signal(SIGCONT);
	CHECK(rc == -ETIMEDOUT && c == NULL && dt < timeout_ms / 1000.0 + 2,
	      "connect to a stopped daemon: %d after %.2f s (timeout %d ms)", rc, dt, timeout_ms);
}

/* ---- fork --------------------------------------------------------------------- */

static void mode_fork(void)
{
	seer_client_t *c = connect_or_die(timeout_ms);
	seer_batch_t *b;
	int rc;
	while ((rc = seer_next(c, 5000, &b)) == SEER_EEPOCH) {
	}
	CHECK(rc == 0, "a batch before fork");
	fflush(stdout);
	pid_t child = fork();
	if (child == 0) {
		/* a DataLoader-like worker: it must not be able to use the
		 * parent's connection, and must not keep it alive */
		seer_batch_t *b2;
		int r1 = seer_next(c, 0, &b2), r2 = seer_release(c, b), r3 = seer_seek(c, 0, 0);
		seer_close(c);
		FILE *f = fopen(marker, "w");
		fprintf(f, "%s child: next %d release %d seek %d\n",
			r1 == -EBADF && r2 == -EBADF && r3 == -EBADF ? "ok" : "FAIL", r1, r2, r3);
		fclose(f);
		for (;;)
			pause(); /* lives on until the test kills it */
	}
	struct stat st;
	while (stat(marker, &st) != 0 || st.st_size == 0)
		usleep(2000);
	printf("ready %d\n", (int)child);
	fflush(stdout);
	for (;;)
		pause(); /* the test SIGKILLs us, holding the batch */
}

static void mode_connect(void)
{
	seer_options_t o = { .socket_path = sock_path, .rank = 0, .world_size = 1,
			     .connect_timeout_ms = timeout_ms };
	seer_client_t *c = NULL;
	int rc = seer_connect(&o, &c);
	printf("connect %d %s\n", rc, rc ? seer_errmsg() : "");
	if (rc == 0)
		seer_close(c);
	exit(rc == 0 ? 0 : 3);
}

/* Pages of the arena the daemon has filled (its data extents) that this
 * process has no page-table entry for (/proc/self/pagemap's present bit),
 * or -1 when that cannot be read. */
static long unmapped_filled(seer_client_t *c)
{
	int fd = seer_arena_fd(c), pm = open("/proc/self/pagemap", O_RDONLY);
	const uint8_t *base = seer_arena_base(c);
	uint64_t size = seer_arena_size(c), pos = 0;
	long n = 0;
	while (fd >= 0 && pm >= 0 && n >= 0 && pos < size) {
		off_t d = lseek(fd, (off_t)pos, SEEK_DATA);
		off_t h = d < 0 ? -1 : lseek(fd, d, SEEK_HOLE);
		if (d < 0 || h < 0) {
			n = errno == ENXIO ? n : -1;
			break;
		}
		for (uint64_t o = (uint64_t)d & ~4095ull; o < (uint64_t)h && o < size; o += 4096) {
			uint64_t ent;
			off_t at = (off_t)(((uintptr_t)base + o) / 4096 * 8);
			if (pread(pm, &ent, sizeof(ent), at) != (ssize_t)sizeof(ent)) {
				n = -1;
				break;
			}
			n += !(ent >> 63 & 1);
		}
		pos = (uint64_t)h;
	}
	if (fd >= 0)
		close(fd);
	if (pm >= 0)
		close(pm);
	return n;
}

/* The next batch of the job's first two epochs into *b (*e: the epochs
 * ended so far): true; false once both are read, the job ended, or
 * seer_next failed (a failed check). */
static bool next_in_two_epochs(seer_client_t *c, uint64_t *e, seer_batch_t **b)
{
	while (*e < 2) {
		int rc = seer_next(c, timeout_ms, b);
		if (rc == SEER_EEND)
			return false;
		if (rc == SEER_EEPOCH) {
			(*e)++;
			continue;
		}
		CHECK(rc == 0, "seer_next: %d", rc);
		return rc == 0;
	}
	return false;
}

/* warm (world 1, the dataset inside the RAM cache): take epoch 1 without
 * reading a byte, then read every byte of epoch 2. libseer mapped the cache
 * the daemon filled at the epoch boundary, so epoch 2's reads take no page
 * fault; it mapped only what was filled, so the arena's memory is what the
 * daemon wrote, not its size. The last batch of epoch 1 already finds every
 * filled page mapped: the epoch's final pass runs in the seer_next that
 * hands it out, not after it. Prints "crcsum S samples N bytes B faults F
 * allocated A size Z unmapped_at_last U" for the test to judge. */
static void mode_warm(void)
{
	static uint8_t warmup[1 << 16];
	volatile uLong w = crc32(0, warmup, sizeof(warmup)); /* zlib's tables: faulted now */
	(void)w;
	seer_client_t *c = connect_or_die(timeout_ms);
	CHECK(seer_arena_reader(c, warmup) == -EINVAL, "seer_arena_reader(other memory): -EINVAL");
	CHECK(seer_arena_reader(c, (const uint8_t *)seer_arena_base(c) + 4096) == -EINVAL,
	      "seer_arena_reader(inside the arena): -EINVAL");
	CHECK(seer_arena_reader(c, NULL) == 0, "seer_arena_reader(NULL): back to libseer's own");
	uint64_t crcsum = 0, bytes = 0, samples = 0, e = 0;
	long faults = 0, unmapped = -2; /* -2: epoch 1's last batch never came */
	uint64_t steps = seer_batches_per_epoch(c);
	seer_batch_t *b;
	while (next_in_two_epochs(c, &e, &b)) {
		uint32_t n = seer_batch_len(b);
		if (e == 0 && seer_batch_step(b) + 1 == steps)
			unmapped = unmapped_filled(c);
		if (e == 1) {
			struct rusage r0, r1;
			getrusage(RUSAGE_SELF, &r0);
			for (uint32_t i = 0; i < n; i++) {
				uint64_t len = seer_sample_size(b, i);
				crcsum += crc32(0, seer_sample_data(b, i), (uInt)len);
				bytes += len;
			}
			getrusage(RUSAGE_SELF, &r1);
			faults += r1.ru_minflt - r0.ru_minflt;
			samples += n;
		}
		seer_release(c, b);
	}
	int fd = seer_arena_fd(c);
	struct stat st;
	CHECK(fd >= 0 && fstat(fd, &st) == 0, "fstat of the arena");
	printf("crcsum %llu samples %llu bytes %llu faults %ld allocated %llu size %llu "
	       "unmapped_at_last %ld\n",
	       (unsigned long long)crcsum, (unsigned long long)samples, (unsigned long long)bytes,
	       faults, (unsigned long long)st.st_blocks * 512ull,
	       (unsigned long long)seer_arena_size(c), unmapped);
	if (fd >= 0)
		close(fd);
	seer_close(c);
}

/* Pages of this process's arena mapping that are present (pagemap), or -1. */
static long mapped_pages(seer_client_t *c)
{
	int pm = open("/proc/self/pagemap", O_RDONLY);
	const uint8_t *base = seer_arena_base(c);
	uint64_t size = seer_arena_size(c);
	long n = pm < 0 ? -1 : 0;
	for (uint64_t o = 0; n >= 0 && o < size; o += 4096) {
		uint64_t ent;
		off_t at = (off_t)(((uintptr_t)base + o) / 4096 * 8);
		if (pread(pm, &ent, sizeof(ent), at) != (ssize_t)sizeof(ent))
			n = -1;
		else
			n += (long)(ent >> 63 & 1);
	}
	if (pm >= 0)
		close(pm);
	return n;
}

/* shares (--rank r --world w, one process per rank, staging in use): every
 * byte of two epochs read, then the arena pages this trainer has mapped:
 * its prefault maps its own share of staging and the RAM cache, not the
 * other trainers' shares (which the daemon populated at start). Prints
 * "crcsum S samples N faults2 F mapped M" (faults2: page faults while
 * reading epoch 2). */
static void mode_shares(void)
{
	seer_client_t *c = connect_or_die(timeout_ms);
	uint64_t crcsum = 0, samples = 0, e = 0;
	long faults = 0;
	seer_batch_t *b;
	while (next_in_two_epochs(c, &e, &b)) {
		struct rusage r0, r1;
		getrusage(RUSAGE_SELF, &r0);
		for (uint32_t i = 0; i < seer_batch_len(b); i++)
			crcsum += crc32(0, seer_sample_data(b, i), (uInt)seer_sample_size(b, i));
		getrusage(RUSAGE_SELF, &r1);
		if (e == 1)
			faults += r1.ru_minflt - r0.ru_minflt;
		samples += seer_batch_len(b);
		seer_release(c, b);
	}
	printf("crcsum %llu samples %llu faults2 %ld mapped %ld\n", (unsigned long long)crcsum,
	       (unsigned long long)samples, faults, mapped_pages(c));
	seer_close(c);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "daemon-pid", required_argument, NULL, 'p' },
		{ "marker", required_argument, NULL, 'm' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "rank", required_argument, NULL, 'r' },
		{ "world", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 's': sock_path = optarg; break;
		case 'p': daemon_pid = (pid_t)atoi(optarg); break;
		case 'm': marker = optarg; break;
		case 't': timeout_ms = atoi(optarg); break;
		case 'r': rank = atoi(optarg); break;
		case 'w': world = atoi(optarg); break;
		default: return 100;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "usage: seer-apitest MODE [--socket S] [--daemon-pid P] ...\n");
		return 100;
	}
	static const struct { const char *name; void (*fn)(void); } modes[] = {
		{ "null", mode_null }, { "live", mode_live }, { "stale", mode_stale },
		{ "two-threads", mode_two_threads }, { "close-waiting", mode_close_waiting },
		{ "close-seeking", mode_close_seeking },
		{ "seek-timeout", mode_seek_timeout }, { "connect-timeout", mode_connect_timeout },
		{ "fork", mode_fork }, { "connect", mode_connect }, { "warm", mode_warm },
		{ "shares", mode_shares },
	};
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		if (strcmp(argv[optind], modes[i].name) == 0) {
			modes[i].fn();
			printf("%d failed\n", failures);
			return failures;
		}
	}
	fprintf(stderr, "seer-apitest: unknown mode %s\n", argv[optind]);
	return 100;
}
