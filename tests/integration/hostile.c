/* seer-hostile: a client that speaks seer's wire protocol itself (it does not
 * use libseer) so that it can break every rule of it. Used by
 * tests/integration/test_faults.py to check that seerd survives, says why,
 * and keeps serving everyone else.
 *
 *   seer-hostile --socket PATH --mode MODE [--rank R --world W] [--job ID]
 *                [--seconds S] [--count N] [--seed N]
 *
 * Handshake modes (no session is opened):
 *   version      HELLO with a protocol version this daemon does not speak
 *   short-hello  a truncated HELLO (fewer bytes than the struct)
 *   bad-magic    a full-size HELLO whose magic is garbage
 *   bad-kind     a HELLO with a valid magic and an unknown message kind
 *   dup-rank     a correct HELLO for a rank that is already connected
 *   rank-range   a HELLO with rank >= world
 *   world-huge   a HELLO with world = 2^31 (the first one fixes the job's shape)
 *   silent       connect and never send a HELLO: how long until the daemon
 *                closes the connection (must be within --seconds)
 *   flood        open --count connections at once, send nothing, hold them
 *                for --seconds; reports how many the daemon dropped
 *   ctl-slow     ask for `status` like seerctl (printing "SENT" once asked),
 *                read nothing for --seconds, then the whole reply must arrive
 *                (the daemon serves others meanwhile)
 * Session modes (attach properly as --rank, then misbehave):
 *   rel-garbage  random entries in the release ring, producer index advanced
 *   rel-ahead    release producer index far ahead of anything held
 *   rel-unheld   release a slot index that was never published
 *   rel-double   release a taken batch twice
 *   cons-ahead   out-ring consumer index far ahead of the producer, then
 *   cons-behind  ... far behind; for --seconds, then the real value is put
 *                back and --count batches must arrive
 *   sock-garbage a few random bytes on the socket after the handshake
 *   seek-range   a SEEK past the job's end (must be refused, session kept)
 *   seek-abandon a SEEK to epoch 0 step 1, then leave without its answer (the
 *                reads in flight delay it): the rank must stay usable
 *   mmap-rw      map the arena and ctrl_out writable, mprotect, write(),
 *                ftruncate, remove seals: every attempt must fail
 *   write-arena  write through the read-only arena mapping: must SIGSEGV
 *   write-ctrl   write through the read-only ctrl_out mapping: must SIGSEGV
 *   truncate-in  ftruncate the trainer-writable ctrl_in to 0, wake the daemon
 *                (a daemon reading a truncated mapping gets SIGBUS); passes
 *                only if the truncation is refused
 *   efd-flood    write the wake-up eventfd as fast as possible for --seconds
 *
 * Prints one "RESULT ..." line on stdout. Exit status: 0 when the daemon did
 * what it must (refused, evicted, kept serving, ...), 1 when it did not,
 * 2 on a usage error; write-* modes are expected to die by SIGSEGV. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../proto/seer_proto.h"
#include "../../src/common/ring.h"
#include "../../src/common/shm.h"
#include "../../src/util/util.h"
#include "seer.h"

/* How long to wait for the daemon's answer before calling it missing: only a
 * failure waits this long, so it is generous for a loaded machine. */
#define DEADLINE_S 60.0

struct opts {
	const char *sock, *job, *mode;
	uint32_t rank, world;
	double seconds;
	unsigned count;
	uint64_t seed;
};

/* One attached session: the segments of a WELCOME, mapped like libseer. */
struct sess {
	int fd;
	int fds[SEER_WELCOME_NFDS]; /* arena, ctrl_out, ctrl_in, eventfd: kept open */
	struct seer_msg_welcome w;
	const uint8_t *arena;
	const struct seer_ctrl_out *co;
	struct seer_ctrl_in *ci;
	const uint32_t *out_ring;
	uint32_t *rel_ring;
	uint32_t mask;
};

static uint64_t rng_state;

static uint64_t rnd(void)
{
	/* xorshift64*: a fixed --seed gives the same garbage on every run */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static int connect_to(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

static void hello_init(struct seer_msg_hello *h, const struct opts *o)
{
	memset(h, 0, sizeof(*h));
	h->magic = SEER_MAGIC_HELLO;
	h->kind = SEER_MSG_HELLO;
	h->version = SEER_PROTO_VERSION;
	h->rank = o->rank;
	h->world = o->world;
	h->epoch = SEER_POS_RESUME;
	snprintf(h->job_id, sizeof(h->job_id), "%s", o->job);
}

/* Wait up to timeout_s for fd to be readable (or hung up): 1, 0 on timeout. */
static int wait_readable(int fd, double timeout_s)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r;
	do {
		r = poll(&p, 1, (int)(timeout_s * 1000));
	} while (r < 0 && errno == EINTR);
	return r > 0;
}

/* Read the daemon's answer to a handshake and print it. Returns 0 when it is
 * an ERROR with status want_status (any status when 0) whose text contains
 * want_text. */
static int expect_refusal(int fd, int want_status, const char *want_text, double timeout_s)
{
	if (!wait_readable(fd, timeout_s)) {
		printf("RESULT no-answer within %.1f s\n", timeout_s);
		return 1;
	}
	struct seer_msg_welcome w;
	memset(&w, 0, sizeof(w));
	int fds[SEER_WELCOME_NFDS], nfds = 0;
	ssize_t n = sock_recv(fd, &w, sizeof(w), fds, &nfds, SEER_WELCOME_NFDS);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (n <= 0) {
		printf("RESULT closed-without-message (%s)\n", n == 0 ? "EOF" : strerror((int)-n));
		return 1;
	}
	w.msg[sizeof(w.msg) - 1] = '\0';
	if (n < (ssize_t)offsetof(struct seer_msg_welcome, nsamples)) {
		printf("RESULT short-answer %zd bytes\n", n);
		return 1;
	}
	if (w.kind != SEER_MSG_ERROR) {
		printf("RESULT accepted kind=%u status=%d\n", w.kind, w.status);
		return 1;
	}
	printf("RESULT refused status=%d msg=%s\n", w.status, w.msg);
	if (want_status != 0 && w.status != want_status)
		return 1;
	return want_text && !strstr(w.msg, want_text) ? 1 : 0;
}

static int send_hello_expect(const struct opts *o, const struct seer_msg_hello *h, size_t len,
			     int want_status, const char *want_text)
{
	int fd = connect_to(o->sock);
	if (fd < 0) {
		printf("RESULT connect-failed %s\n", strerror(-fd));
		return 1;
	}
	ssize_t n = sock_send(fd, h, len, NULL, 0);
	if (n != (ssize_t)len) {
		printf("RESULT send-failed %s\n", n < 0 ? strerror((int)-n) : "short");
		close(fd);
		return 1;
	}
	int rc = expect_refusal(fd, want_status, want_text, DEADLINE_S);
	close(fd);
	return rc;
}

/* ---- handshake abuse ------------------------------------------------------ */

static int mode_silent(const struct opts *o)
{
	int fd = connect_to(o->sock);
	if (fd < 0) {
		printf("RESULT connect-failed %s\n", strerror(-fd));
		return 1;
	}
	uint64_t t0 = now_ns();
	if (!wait_readable(fd, o->seconds)) {
		printf("RESULT still-open after %.1f s\n", o->seconds);
		close(fd);
		return 1;
	}
	char b[512];
	ssize_t n = recv(fd, b, sizeof(b), 0);
	double dt = (double)(now_ns() - t0) / 1e9;
	close(fd);
	printf("RESULT closed-by-daemon after_s=%.3f bytes=%zd\n", dt, n);
	return n <= 0 ? 0 : 1;
}

static int mode_ctl_slow(const struct opts *o, struct seer_msg_hello *h)
{
	h->kind = SEER_MSG_CTL;
	snprintf(h->ctl, sizeof(h->ctl), "status");
	int fd = connect_to(o->sock);
	if (fd < 0) {
		printf("RESULT connect-failed %s\n", strerror(-fd));
		return 1;
	}
	if (sock_send(fd, h, sizeof(*h), NULL, 0) != (ssize_t)sizeof(*h)) {
		printf("RESULT send-failed\n");
		close(fd);
		return 1;
	}
	printf("SENT\n"); /* the test asks the daemon for more only after this */
	fflush(stdout);
	sleep_ns((uint64_t)(o->seconds * 1e9));
	static char buf[sizeof(struct seer_msg_ctl_reply) + SEER_CTL_CHUNK];
	size_t total = 0;
	char first = 0, last = 0;
	for (unsigned packets = 0;; packets++) {
		if (!wait_readable(fd, DEADLINE_S)) {
			printf("RESULT stalled after %zu bytes\n", total);
			close(fd);
			return 1;
		}
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		struct seer_msg_ctl_reply r;
		if (n < (ssize_t)sizeof(r)) {
			printf("RESULT cut after %zu bytes in %u packets (recv %zd)\n", total, packets, n);
			close(fd);
			return 1;
		}
		memcpy(&r, buf, sizeof(r));
		if (r.kind != SEER_MSG_CTL_REPLY || r.status != 0 || r.len != n - (ssize_t)sizeof(r)) {
			printf("RESULT bad packet kind %u status %d len %u\n", r.kind, r.status, r.len);
			close(fd);
			return 1;
		}
		if (r.len) {
			if (!total)
				first = buf[sizeof(r)];
			last = buf[sizeof(r) + r.len - 1];
		}
		total += r.len;
		if (!r.more)
			break;
	}
	close(fd);
	printf("RESULT ctl-reply bytes=%zu\n", total);
	return first == '{' && last == '}' ? 0 : 1;
}

static int mode_flood(const struct opts *o)
{
	int *fds = calloc(o->count, sizeof(int));
	if (!fds)
		return 1;
	unsigned ok = 0, refused = 0;
	for (unsigned i = 0; i < o->count; i++) {
		fds[i] = connect_to(o->sock);
		if (fds[i] >= 0)
			ok++;
		else
			refused++;
	}
	printf("FLOOD connected=%u refused=%u\n", ok, refused);
	fflush(stdout);
	/* hold them; count the ones the daemon closed on its own */
	uint64_t until = now_ns() + (uint64_t)(o->seconds * 1e9);
	while (now_ns() < until)
		sleep_ns(50 * 1000000ull);
	unsigned dropped = 0;
	for (unsigned i = 0; i < o->count; i++) {
		if (fds[i] < 0)
			continue;
		char b;
		ssize_t n = recv(fds[i], &b, 1, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
			dropped++;
		close(fds[i]);
	}
	free(fds);
	printf("RESULT connected=%u refused=%u closed_by_daemon=%u\n", ok, refused, dropped);
	return 0;
}

/* ---- sessions -------------------------------------------------------------- */

static int attach(const struct opts *o, struct sess *s)
{
	memset(s, 0, sizeof(*s));
	for (int i = 0; i < SEER_WELCOME_NFDS; i++)
		s->fds[i] = -1;
	s->fd = connect_to(o->sock);
	if (s->fd < 0) {
		printf("RESULT connect-failed %s\n", strerror(-s->fd));
		return -1;
	}
	struct seer_msg_hello h;
	hello_init(&h, o);
	if (sock_send(s->fd, &h, sizeof(h), NULL, 0) != (ssize_t)sizeof(h)) {
		printf("RESULT hello-send-failed\n");
		return -1;
	}
	int nfds = 0;
	ssize_t n = sock_recv(s->fd, &s->w, sizeof(s->w), s->fds, &nfds, SEER_WELCOME_NFDS);
	if (n != (ssize_t)sizeof(s->w) || s->w.kind != SEER_MSG_WELCOME || nfds != SEER_WELCOME_NFDS) {
		s->w.msg[sizeof(s->w.msg) - 1] = '\0';
		printf("RESULT attach-refused n=%zd kind=%u msg=%s\n", n, s->w.kind, s->w.msg);
		return -1;
	}
	void *p;
	int rc;
	if ((rc = shm_map(s->fds[0], s->w.arena_size, 0, &p)) != 0)
		goto map_fail;
	s->arena = p;
	if ((rc = shm_map(s->fds[1], s->w.ctrl_out_size, 0, &p)) != 0)
		goto map_fail;
	s->co = p;
	if ((rc = shm_map(s->fds[2], s->w.ctrl_in_size, 1, &p)) != 0)
		goto map_fail;
	s->ci = p;
	s->out_ring = (const uint32_t *)((const uint8_t *)s->co + s->co->ring_off);
	s->rel_ring = (uint32_t *)((uint8_t *)s->ci + s->ci->ring_off);
	s->mask = s->w.nslots - 1;
	fprintf(stderr, "seer-hostile: attached rank %u/%u, nslots %u, start %llu\n", o->rank,
		o->world, s->w.nslots, (unsigned long long)s->w.start);
	return 0;
map_fail:
	printf("RESULT cannot map the daemon's segments: %s\n", strerror(-rc));
	return -1;
}

static void wake_daemon(const struct sess *s)
{
	uint64_t one = 1;
	ssize_t r UNUSED = write(s->fds[3], &one, sizeof(one));
}

static uint32_t prod_now(const struct sess *s)
{
	return atomic_load_explicit(&s->co->prod, memory_order_acquire);
}

/* Wait until the daemon has published at least n batches in this session. */
static int wait_published(const struct sess *s, uint32_t n, double timeout_s)
{
	uint64_t until = now_ns() + (uint64_t)(timeout_s * 1e9);
	while (prod_now(s) < n) {
		if (now_ns() > until)
			return -1;
		sleep_ns(1000000);
	}
	return 0;
}

/* Take the next published batch (like seer_next), or -1 after timeout_s. */
static int take(struct sess *s, uint32_t *idx, double timeout_s)
{
	struct ring out = { .prod = (_Atomic uint32_t *)&s->co->prod, .cons = &s->ci->cons,
			    .entries = (uint32_t *)s->out_ring, .mask = s->mask };
	uint64_t until = now_ns() + (uint64_t)(timeout_s * 1e9);
	while (ring_pop(&out, idx) != 0) {
		if (now_ns() > until)
			return -1;
		wake_daemon(s);
		sleep_ns(1000000);
	}
	wake_daemon(s);
	return 0;
}

static void release(struct sess *s, uint32_t idx)
{
	struct ring rel = { .prod = &s->ci->rel_prod, .cons = (_Atomic uint32_t *)&s->co->rel_cons,
			    .entries = s->rel_ring, .mask = s->mask };
	if (ring_push(&rel, idx) != 0)
		fprintf(stderr, "seer-hostile: release ring full\n");
	wake_daemon(s);
}

/* Wait until the daemon evicts us (state EVICTED) or closes the socket.
 * Returns the seconds it took, or -1 on timeout. */
static double wait_evicted(const struct sess *s, double timeout_s, const char **how)
{
	uint64_t t0 = now_ns(), until = t0 + (uint64_t)(timeout_s * 1e9);
	for (;;) {
		uint32_t st = atomic_load_explicit(&s->co->state, memory_order_acquire);
		if (st == SEER_STATE_EVICTED) {
			*how = "state=EVICTED";
			return (double)(now_ns() - t0) / 1e9;
		}
		char b;
		ssize_t n = recv(s->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
		if (n == 0) {
			*how = "socket-closed";
			return (double)(now_ns() - t0) / 1e9;
		}
		if (now_ns() > until)
			return -1;
		wake_daemon(s);
		sleep_ns(1000000);
	}
}

static int report_eviction(const struct sess *s, double timeout_s)
{
	const char *how = "";
	double dt = wait_evicted(s, timeout_s, &how);
	if (dt < 0) {
		printf("RESULT not-evicted within %.1f s\n", timeout_s);
		return 1;
	}
	printf("RESULT evicted %s after_s=%.4f\n", how, dt);
	return 0;
}

static int mode_rel(const struct opts *o, struct sess *s)
{
	if (wait_published(s, 1, DEADLINE_S) != 0) {
		printf("RESULT no-batch-published\n");
		return 1;
	}
	uint32_t rp = atomic_load_explicit(&s->ci->rel_prod, memory_order_relaxed);
	if (strcmp(o->mode, "rel-garbage") == 0) {
		uint32_t k = s->w.nslots / 2;
		for (uint32_t i = 0; i < k; i++)
			s->rel_ring[(rp + i) & s->mask] = (uint32_t)rnd() | 0x80000000u;
		atomic_store_explicit(&s->ci->rel_prod, rp + k, memory_order_release);
	} else if (strcmp(o->mode, "rel-ahead") == 0) {
		atomic_store_explicit(&s->ci->rel_prod, rp + 1000000u, memory_order_release);
	} else if (strcmp(o->mode, "rel-unheld") == 0) {
		/* batch g lives in slot g % nslots; taking nothing, we are sent
		 * at most lookahead batches from w.start on, and nslots >=
		 * lookahead + max_held + 2: the slot of batch start + nslots - 1
		 * is never published, whatever lookahead is */
		uint32_t idx = (uint32_t)(s->w.start + s->w.nslots - 1) & s->mask;
		s->rel_ring[rp & s->mask] = idx;
		atomic_store_explicit(&s->ci->rel_prod, rp + 1, memory_order_release);
	} else { /* rel-double */
		uint32_t idx;
		if (take(s, &idx, DEADLINE_S) != 0) {
			printf("RESULT no-batch\n");
			return 1;
		}
		release(s, idx);
		/* the daemon consumed the first release before we repeat it */
		uint64_t until = now_ns() + 5000000000ull;
		while (atomic_load_explicit(&s->co->rel_cons, memory_order_acquire) != rp + 1 &&
		       now_ns() < until)
			sleep_ns(1000000);
		release(s, idx);
	}
	wake_daemon(s);
	return report_eviction(s, DEADLINE_S);
}

static int mode_cons(const struct opts *o, struct sess *s)
{
	if (wait_published(s, 1, DEADLINE_S) != 0) {
		printf("RESULT no-batch-published\n");
		return 1;
	}
	uint32_t real = atomic_load_explicit(&s->ci->cons, memory_order_relaxed);
	uint32_t bad = strcmp(o->mode, "cons-ahead") == 0 ? real + 100000u : real - 100000u;
	atomic_store_explicit(&s->ci->cons, bad, memory_order_release);
	uint64_t until = now_ns() + (uint64_t)(o->seconds * 1e9);
	while (now_ns() < until) {
		wake_daemon(s);
		sleep_ns(5000000);
	}
	if (atomic_load_explicit(&s->co->state, memory_order_acquire) == SEER_STATE_EVICTED)
		printf("EVICTED for a consumer hint\n");
	atomic_store_explicit(&s->ci->cons, real, memory_order_release);
	/* the hint is back: the stream must flow again */
	uint64_t g = UINT64_MAX;
	for (unsigned i = 0; i < o->count; i++) {
		uint32_t idx;
		if (take(s, &idx, DEADLINE_S) != 0) {
			printf("RESULT stalled after %u batches once the consumer index was restored\n", i);
			return 1;
		}
		const struct seer_wire_slot *sl = (const void *)((const uint8_t *)s->co +
				s->co->slots_off + s->co->slot_stride * idx);
		if (g != UINT64_MAX && sl->global != g + 1) {
			printf("RESULT batch %llu after %llu\n", (unsigned long long)sl->global,
			       (unsigned long long)g);
			return 1;
		}
		g = sl->global;
		release(s, idx);
	}
	printf("RESULT recovered batches=%u last_global=%llu\n", o->count, (unsigned long long)g);
	return 0;
}

static int mode_sock_garbage(struct sess *s)
{
	char junk[7];
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)rnd();
	if (sock_send(s->fd, junk, sizeof(junk), NULL, 0) != (ssize_t)sizeof(junk)) {
		printf("RESULT send-failed\n");
		return 1;
	}
	return report_eviction(s, DEADLINE_S);
}

static int mode_seek_range(const struct opts *o, struct sess *s)
{
	(void)o;
	struct seer_msg_seek m = { .kind = SEER_MSG_SEEK, .epoch = 1ull << 60, .step = 0 };
	if (sock_send(s->fd, &m, sizeof(m), NULL, 0) != (ssize_t)sizeof(m))
		return 1;
	if (!wait_readable(s->fd, DEADLINE_S)) {
		printf("RESULT no-seek-answer\n");
		return 1;
	}
	struct seer_msg_seek r;
	ssize_t n = sock_recv(s->fd, &r, sizeof(r), NULL, NULL, 0);
	if (n != (ssize_t)sizeof(r) || r.kind != SEER_MSG_SEEK_OK || r.status != -ERANGE) {
		printf("RESULT bad-seek-answer n=%zd kind=%u status=%d\n", n, n > 0 ? r.kind : 0,
		       n > 0 ? r.status : 0);
		return 1;
	}
	uint32_t idx;
	if (take(s, &idx, DEADLINE_S) != 0) {
		printf("RESULT refused-seek but no batch afterwards\n");
		return 1;
	}
	release(s, idx);
	printf("RESULT seek-refused status=%d session-kept\n", r.status);
	return 0;
}

static int mode_seek_abandon(struct sess *s)
{
	struct seer_msg_seek m = { .kind = SEER_MSG_SEEK, .epoch = 0, .step = 1 };
	if (sock_send(s->fd, &m, sizeof(m), NULL, 0) != (ssize_t)sizeof(m)) {
		printf("RESULT send-failed\n");
		return 1;
	}
	close(s->fd); /* gone before the answer */
	printf("RESULT seek-sent-and-left\n");
	return 0;
}

static const char *outcome(int rc, int err)
{
	static char buf[64];
	if (rc == 0)
		return "ALLOWED";
	snprintf(buf, sizeof(buf), "refused(%s)", strerrorname_np(err) ? strerrorname_np(err) : "?");
	return buf;
}

static int mode_mmap_rw(struct sess *s)
{
	int bad = 0;
	const struct { const char *name; int fd; size_t size; const void *ro; } segs[] = {
		{ "arena", s->fds[0], s->w.arena_size, s->arena },
		{ "ctrl_out", s->fds[1], s->w.ctrl_out_size, s->co },
	};
	for (size_t i = 0; i < ARRAY_SIZE(segs); i++) {
		void *p = mmap(NULL, segs[i].size, PROT_READ | PROT_WRITE, MAP_SHARED, segs[i].fd, 0);
		int e = errno;
		printf("CHECK %s mmap(PROT_WRITE, MAP_SHARED): %s\n", segs[i].name,
		       outcome(p == MAP_FAILED ? -1 : 0, e));
		if (p != MAP_FAILED) {
			bad++;
			munmap(p, segs[i].size);
		}
		int r = mprotect((void *)segs[i].ro, 4096, PROT_READ | PROT_WRITE);
		e = errno;
		printf("CHECK %s mprotect(PROT_WRITE) of the read-only mapping: %s\n", segs[i].name,
		       outcome(r, e));
		bad += r == 0;
		char junk[16] = "hostile-bytes!!";
		ssize_t w = pwrite(segs[i].fd, junk, sizeof(junk), 4096);
		e = errno;
		printf("CHECK %s pwrite(fd): %s\n", segs[i].name, outcome(w < 0 ? -1 : 0, e));
		bad += w >= 0;
		r = ftruncate(segs[i].fd, 0);
		e = errno;
		printf("CHECK %s ftruncate(0): %s\n", segs[i].name, outcome(r, e));
		bad += r == 0;
		r = fcntl(segs[i].fd, F_ADD_SEALS, F_SEAL_WRITE);
		e = errno;
		printf("CHECK %s F_ADD_SEALS (seals are sealed): %s\n", segs[i].name, outcome(r, e));
		bad += r == 0;
		/* a private writable copy is allowed: it must not reach the daemon */
		uint8_t *q = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, segs[i].fd, 0);
		if (q != MAP_FAILED) {
			uint8_t before = ((const uint8_t *)segs[i].ro)[8];
			q[8] = (uint8_t)(before ^ 0xff);
			uint8_t after = ((const uint8_t *)segs[i].ro)[8];
			printf("CHECK %s MAP_PRIVATE write reaches the shared bytes: %s\n", segs[i].name,
			       after != before ? "YES" : "no");
			bad += after != before;
			munmap(q, 4096);
		}
	}
	int seals = fcntl(s->fds[2], F_GET_SEALS);
	printf("CHECK ctrl_in seals: 0x%x (shrink %s)\n", seals < 0 ? 0 : seals,
	       seals > 0 && (seals & F_SEAL_SHRINK) ? "sealed" : "NOT sealed");
	printf("RESULT %s writable=%d\n",
	       bad ? "arena-or-ctrl-out-writable" : "all-write-attempts-refused", bad);
	return bad ? 1 : 0;
}

static int mode_write(const struct opts *o, struct sess *s)
{
	volatile uint8_t *p = strcmp(o->mode, "write-arena") == 0
		? (volatile uint8_t *)s->arena + s->w.arena_size / 2
		: (volatile uint8_t *)&s->co->prod;
	printf("WRITING %s\n", o->mode);
	fflush(stdout);
	*p = 0xa5; /* must fault: the mapping is read-only */
	printf("RESULT write-succeeded\n");
	return 1;
}

static int mode_truncate_in(const struct opts *o, struct sess *s)
{
	if (wait_published(s, 1, DEADLINE_S) != 0) {
		printf("RESULT no-batch-published\n");
		return 1;
	}
	int r = ftruncate(s->fds[2], 0);
	int e = errno;
	printf("TRUNCATE ctrl_in: %s\n", outcome(r, e));
	fflush(stdout);
	/* make the daemon read its ctrl_in mapping now */
	uint64_t until = now_ns() + (uint64_t)(o->seconds * 1e9);
	while (now_ns() < until) {
		wake_daemon(s);
		sleep_ns(10000000);
	}
	printf("RESULT ctrl_in-truncate-%s\n", r == 0 ? "ALLOWED" : "refused");
	return r == 0 ? 1 : 0;
}

static int mode_efd_flood(const struct opts *o, struct sess *s)
{
	uint64_t until = now_ns() + (uint64_t)(o->seconds * 1e9), n = 0;
	while (now_ns() < until) {
		for (int i = 0; i < 1000; i++) {
			uint64_t one = 1;
			if (write(s->fds[3], &one, sizeof(one)) == (ssize_t)sizeof(one))
				n++;
		}
	}
	printf("RESULT eventfd-writes=%llu in %.1f s\n", (unsigned long long)n, o->seconds);
	return 0;
}

static int run_session(const struct opts *o)
{
	struct sess s;
	if (attach(o, &s) != 0)
		return 1;
	const char *m = o->mode;
	if (strncmp(m, "rel-", 4) == 0)
		return mode_rel(o, &s);
	if (strncmp(m, "cons-", 5) == 0)
		return mode_cons(o, &s);
	if (strcmp(m, "sock-garbage") == 0)
		return mode_sock_garbage(&s);
	if (strcmp(m, "seek-range") == 0)
		return mode_seek_range(o, &s);
	if (strcmp(m, "seek-abandon") == 0)
		return mode_seek_abandon(&s);
	if (strcmp(m, "mmap-rw") == 0)
		return mode_mmap_rw(&s);
	if (strncmp(m, "write-", 6) == 0)
		return mode_write(o, &s);
	if (strcmp(m, "truncate-in") == 0)
		return mode_truncate_in(o, &s);
	return mode_efd_flood(o, &s);
}

static int run(const struct opts *o)
{
	struct seer_msg_hello h;
	hello_init(&h, o);
	const char *m = o->mode;
	if (strcmp(m, "version") == 0) {
		h.version = SEER_PROTO_VERSION + 41;
		return send_hello_expect(o, &h, sizeof(h), SEER_EPROTO, "protocol version");
	}
	if (strcmp(m, "short-hello") == 0)
		return send_hello_expect(o, &h, sizeof(h) / 2, SEER_EPROTO, "malformed handshake");
	if (strcmp(m, "bad-magic") == 0) {
		h.magic = rnd();
		return send_hello_expect(o, &h, sizeof(h), SEER_EPROTO, "malformed handshake");
	}
	if (strcmp(m, "bad-kind") == 0) {
		h.kind = 0x7fff0000u | (uint32_t)(rnd() & 0xff);
		return send_hello_expect(o, &h, sizeof(h), 0, NULL);
	}
	if (strcmp(m, "dup-rank") == 0)
		return send_hello_expect(o, &h, sizeof(h), SEER_EREFUSED, "already connected");
	if (strcmp(m, "rank-range") == 0) {
		h.rank = h.world + (uint32_t)(rnd() % 1000);
		return send_hello_expect(o, &h, sizeof(h), -EINVAL, "is not in [0, world size");
	}
	if (strcmp(m, "world-huge") == 0) {
		h.world = 1u << 31;
		h.rank = 0;
		return send_hello_expect(o, &h, sizeof(h), 0, NULL);
	}
	if (strcmp(m, "silent") == 0)
		return mode_silent(o);
	if (strcmp(m, "flood") == 0)
		return mode_flood(o);
	if (strcmp(m, "ctl-slow") == 0)
		return mode_ctl_slow(o, &h);
	static const char *const session_modes[] = {
		"rel-garbage", "rel-ahead", "rel-unheld", "rel-double", "cons-ahead", "cons-behind",
		"sock-garbage", "seek-range", "seek-abandon", "mmap-rw", "write-arena", "write-ctrl", "truncate-in",
		"efd-flood",
	};
	for (size_t i = 0; i < ARRAY_SIZE(session_modes); i++)
		if (strcmp(m, session_modes[i]) == 0)
			return run_session(o);
	fprintf(stderr, "seer-hostile: unknown mode '%s'\n", m);
	return 2;
}

int main(int argc, char **argv)
{
	struct opts o = { .job = seer_env_job_id(), .world = 1, .seconds = 2, .count = 8,
			  .seed = 1 };
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 'S' },
		{ "mode", required_argument, NULL, 'm' },
		{ "rank", required_argument, NULL, 'r' },
		{ "world", required_argument, NULL, 'w' },
		{ "job", required_argument, NULL, 'j' },
		{ "seconds", required_argument, NULL, 's' },
		{ "count", required_argument, NULL, 'n' },
		{ "seed", required_argument, NULL, 'x' },
		{ 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'S': o.sock = optarg; break;
		case 'm': o.mode = optarg; break;
		case 'r': o.rank = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'w': o.world = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'j': o.job = optarg; break;
		case 's': o.seconds = atof(optarg); break;
		case 'n': o.count = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'x': o.seed = strtoull(optarg, NULL, 10); break;
		default:
			fprintf(stderr, "usage: seer-hostile --socket PATH --mode MODE [--rank R "
					"--world W] [--job ID] [--seconds S] [--count N] [--seed N]\n");
			return 2;
		}
	}
	if (!o.sock || !o.mode) {
		fprintf(stderr, "seer-hostile: --socket and --mode are required\n");
		return 2;
	}
	rng_state = o.seed * 0x9e3779b97f4a7c15ull + 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	return run(&o);
}
