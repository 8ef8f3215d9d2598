/* net (libfabric data plane): two daemons' nets in one process (node 0 owns,
 * node 1 fetches), for each provider: delivered bytes for 1 B .. 4 MiB, the
 * deferred and NAK paths, timeouts and the suspect period, 2000 fetches in
 * flight, malformed control messages from a raw third endpoint, and a peer
 * process that is SIGSTOPped mid-run (nothing hangs, destroy returns).
 *
 * On a busy machine (2 cores, load 8-15) nothing here may race what it
 * observes. The requester's timeout is long (LONG) wherever the timeout is
 * not what a test checks, so a slow fetch is only slow. Where it is checked,
 * the peer provably never answers (the owner defers forever, or is
 * SIGSTOPped); bounds on measured times are derived from what the test
 * observed, or have margins of seconds; and the tests wait for states
 * (events, counters, a stopped child), never for time. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "../../src/net/net.h"
#include "../../src/util/util.h"

/* sanitizer_shim.c makes Criterion work under TSan; timings scale here */
#if defined(__SANITIZE_THREAD__)
#define SLOW 4
#elif defined(__SANITIZE_ADDRESS__)
#define SLOW 2
#else
#define SLOW 1
#endif

/* The warnings these tests provoke on purpose (malformed messages, peers
 * going suspect) are expected: shown only with SEER_TEST_LOG=warn|debug. */
static void quiet(void)
{
	const char *lvl = getenv("SEER_TEST_LOG");
	enum log_level l = LOG_ERROR;
	if (lvl)
		log_parse_level(lvl, &l);
	log_set_level(l);
}

TestSuite(net, .init = quiet);

/* What the owner's lookup does, by sample range. */
#define S_SERVE 0u            /* answered from the lookup, zero-copy */
#define S_DEFER 1000000u      /* NET_REQUEST, the test replies from the pattern */
#define S_NAK 2000000u        /* lookup says -ENOENT */
#define S_HOLE 3000000u       /* deferred, never answered */
#define S_NAK_LATE 4000000u   /* deferred, then net_reply_error(-EIO) */
#define S_BADLEN 5000000u     /* deferred, then a reply one byte short */

#define PATTERN_LEN (8u << 20)
#define MAX_LEN (4u << 20)

/* The requester's timeout and suspect period (net_opts), before SLOW. */
struct timing {
	double timeout_s, suspect_s;
};
/* Not under test: longer than any wait below, so no fetch times out. */
static const struct timing LONG = { 300.0, 300.0 };
/* Longest wait for a state that normally takes milliseconds: a failure, not
 * a slow machine, when it runs out. */
#define STATE_LIMIT_S (60.0 * SLOW)

static uint8_t pattern_byte(size_t i)
{
	uint64_t x = i * UINT64_C(0x9E3779B97F4A7C15);
	return (uint8_t)(x >> 56);
}

/* Where the bytes of (sample, len) start in the owner's pattern. */
static size_t pattern_off(uint32_t sample, uint64_t len)
{
	return (size_t)(((uint64_t)sample * 4099u) % (PATTERN_LEN - len + 1));
}

/* pair_open: bit i set = node i asks for every sample in a message of its own */
static unsigned g_no_bundles;

struct owner {
	uint8_t *pattern;       /* node 0's region */
	atomic_uint lookups;
};

static int lookup(void *ctx, uint32_t peer, uint32_t sample, uint64_t len, const void **src)
{
	struct owner *o = ctx;
	(void)peer;
	atomic_fetch_add(&o->lookups, 1);
	if (len == 0 || len > MAX_LEN)
		return -EINVAL;
	if (sample >= S_NAK_LATE)
		return 0;
	if (sample >= S_HOLE)
		return 0;
	if (sample >= S_NAK)
		return -ENOENT;
	if (sample >= S_DEFER)
		return 0;
	*src = o->pattern + pattern_off(sample, len);
	return 1;
}

struct rec {
	int done;               /* FETCH_DONE events seen */
	int status;
	double seconds;
	double issued;          /* now_s() right before net_fetch */
	uint32_t sample;
	uint64_t len;
	uint8_t *dst;
};

struct pair {
	const char *prov;
	struct net *net[2];
	struct owner own;
	uint8_t *dst;           /* node 1's region */
	size_t dst_len;
	int replies_done, reply_errors;
	uint64_t hole_ids[64];
	double hole_seen[64];   /* now_s() when the dispatcher took that request */
	int nholes;
	int requests;
	struct net_event deferred[64]; /* solo owner: the requests it holds */
	uint8_t *addrs;         /* every node's address, node order */
	size_t alen;
};

static struct pair P;

static bool provider_missing(int rc, const char *err)
{
	return rc == -FI_ENODATA || strstr(err, "not available") != NULL;
}

/* Node 0 and node 1 (and extra raw nodes) in this process; node 1's
 * fetches time out as `t` says. */
static void pair_open(const char *prov, uint32_t nnodes, const void *extra_addr, size_t extra_len,
		      size_t dst_len, struct timing t)
{
	memset(&P, 0, sizeof(P));
	P.prov = prov;
	P.own.pattern = malloc(PATTERN_LEN);
	cr_assert_not_null(P.own.pattern);
	for (size_t i = 0; i < PATTERN_LEN; i++)
		P.own.pattern[i] = pattern_byte(i);
	P.dst_len = dst_len;
	P.dst = calloc(1, dst_len);
	cr_assert_not_null(P.dst);
	void *addr[2];
	size_t alen[2];
	for (uint32_t i = 0; i < 2; i++) {
		struct net_opts o = {
			.provider = prov,
			.node = i,
			.nnodes = nnodes,
			.region = i == 0 ? P.own.pattern : P.dst,
			.region_len = i == 0 ? PATTERN_LEN : dst_len,
			.lookup = lookup,
			.lookup_ctx = &P.own,
			.timeout_s = t.timeout_s * SLOW,
			.suspect_s = t.suspect_s * SLOW,
			.no_bundles = (g_no_bundles >> i) & 1u,
		};
		char err[512];
		int rc = net_create(&P.net[i], &o, &addr[i], &alen[i], err, sizeof(err));
		if (rc && i == 0 && provider_missing(rc, err))
			cr_skip_test("provider '%s' not available on this machine: %s", prov, err);
		cr_assert_eq(rc, 0, "net_create(%s): %s", prov, err);
	}
	cr_assert_eq(alen[0], alen[1]);
	cr_assert(nnodes == 2 || extra_len == alen[0], "raw endpoint address length %zu vs %zu",
		  extra_len, alen[0]);
	uint8_t *all = malloc(alen[0] * nnodes);
	memcpy(all, addr[0], alen[0]);
	memcpy(all + alen[0], addr[1], alen[0]);
	for (uint32_t i = 2; i < nnodes; i++)
		memcpy(all + i * alen[0], (const uint8_t *)extra_addr + (i - 2) * alen[0], alen[0]);
	for (uint32_t i = 0; i < 2; i++) {
		char err[512];
		int rc = net_start(P.net[i], all, alen[0], err, sizeof(err));
		cr_assert_eq(rc, 0, "net_start: %s", err);
		free(addr[i]);
	}
	P.addrs = all;
	P.alen = alen[0];
}

static void pair_close(void)
{
	for (int i = 0; i < 2; i++) {
		net_destroy(P.net[i]);
		P.net[i] = NULL;
	}
	free(P.own.pattern);
	free(P.dst);
	free(P.addrs);
}

/* The dispatcher of both nodes: take events until `until` says stop or the
 * wall-clock limit passes. */
static void handle(int node, struct net_event *e)
{
	if (node == 1) {
		cr_assert_eq(e->kind, NET_FETCH_DONE, "node 1 got event kind %d", e->kind);
		struct rec *r = e->user;
		r->done++;
		r->status = e->status;
		r->seconds = e->seconds;
		cr_assert_eq(e->sample, r->sample);
		cr_assert_eq(e->len, r->len);
		cr_assert_eq(e->peer, 0u);
		return;
	}
	if (e->kind == NET_REQUEST) {
		P.requests++;
		cr_assert_eq(e->peer, 1u);
		if (e->sample >= S_BADLEN) {
			net_reply(P.net[0], e->peer, e->req_id, P.own.pattern, e->len - 1, &P);
		} else if (e->sample >= S_NAK_LATE) {
			net_reply_error(P.net[0], e->peer, e->req_id, -EIO);
		} else if (e->sample >= S_HOLE) {
			if (P.nholes < 64) {
				P.hole_seen[P.nholes] = now_s();
				P.hole_ids[P.nholes++] = e->req_id;
			}
		} else {
			cr_assert(e->sample >= S_DEFER && e->sample < S_NAK, "deferred sample %u",
				  e->sample);
			net_reply(P.net[0], e->peer, e->req_id,
				  P.own.pattern + pattern_off(e->sample, e->len), e->len, &P);
		}
	} else if (e->kind == NET_REPLY_DONE) {
		cr_assert_eq(e->user, &P);
		P.replies_done++;
		if (e->status)
			P.reply_errors++;
	} else {
		cr_assert_fail("node 0 got event kind %d", e->kind);
	}
}

static void pump_once(int ms)
{
	struct pollfd pf[2] = { { net_event_fd(P.net[0]), POLLIN, 0 },
				{ net_event_fd(P.net[1]), POLLIN, 0 } };
	poll(pf, 2, ms);
	for (int i = 0; i < 2; i++) {
		struct net_event *e = net_take_events(P.net[i]);
		while (e) {
			struct net_event *next = e->next;
			handle(i, e);
			net_event_free(e);
			e = next;
		}
	}
}

static bool all_done(struct rec *r, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (r[i].done == 0)
			return false;
	return true;
}

/* Serve both nodes' events until `cond` holds; fail with the message after
 * STATE_LIMIT_S (what normally takes milliseconds). */
#define PUMP_UNTIL(cond, ...)                                                          \
	do {                                                                           \
		double t0_ = now_s();                                                  \
		while (!(cond)) {                                                      \
			cr_assert(now_s() - t0_ < STATE_LIMIT_S, __VA_ARGS__);         \
			pump_once(20);                                                 \
		}                                                                      \
	} while (0)

static void pump_until_done(struct rec *r, size_t n)
{
	PUMP_UNTIL(all_done(r, n), "fetches still pending after %.0f s", STATE_LIMIT_S);
}

static void fetch(struct rec *r, uint32_t sample, uint64_t len, uint8_t *dst)
{
	memset(r, 0, sizeof(*r));
	r->sample = sample;
	r->len = len;
	r->dst = dst;
	r->status = 1;
	r->issued = now_s();
	net_fetch(P.net[1], 0, sample, dst, len, r);
}

static void check_bytes(const struct rec *r)
{
	cr_assert_eq(r->done, 1, "sample %u: %d completions", r->sample, r->done);
	cr_assert_eq(r->status, 0, "sample %u (%llu bytes): %s", r->sample,
		     (unsigned long long)r->len, strerror(-r->status));
	const uint8_t *want = P.own.pattern + pattern_off(r->sample, r->len);
	if (memcmp(r->dst, want, r->len) != 0) {
		size_t i = 0;
		while (r->dst[i] == want[i])
			i++;
		cr_assert_fail("sample %u (%llu bytes): byte %zu differs", r->sample,
			       (unsigned long long)r->len, i);
	}
}

/* By value: Criterion's workers are fresh processes, a pointer into the
 * parent's .rodata would not survive. */
struct prov {
	char name[32];
	bool no_bundles;
};
static struct prov providers[] = { { "tcp;ofi_rxm", false }, { "sockets", false } };
/* The sizes test also runs with every sample in a message of its own. */
static struct prov modes[] = { { "tcp;ofi_rxm", false }, { "sockets", false },
			       { "tcp;ofi_rxm", true }, { "sockets", true } };

/* ---- sizes, zero-copy and deferred ------------------------------------------ */
ParameterizedTestParameters(net, sizes)
{
	return cr_make_param_array(struct prov, modes, ARRAY_SIZE(modes));
}

ParameterizedTest(struct prov *prov, net, sizes, .timeout = 300)
{
	static const uint64_t sizes[] = { 1, 2, 7, 40, 63, 64, 65, 255, 256, 4095, 4096, 4097,
					  16383, 16384, 16385, 65535, 65536, 131072, 131073,
					  1u << 20, (2u << 20) + 3, MAX_LEN - 1, MAX_LEN };
	enum { N = ARRAY_SIZE(sizes), ROUNDS = 3 };
	size_t total = 0;
	for (size_t i = 0; i < N; i++)
		total += sizes[i];
	g_no_bundles = prov->no_bundles ? 3u : 0u;
	pair_open(prov->name, 2, NULL, 0, total, LONG);
	struct rec rec[N];
	for (int round = 0; round < ROUNDS; round++) {
		memset(P.dst, 0xEE, P.dst_len);
		/* all in flight at once; round 1 deferred, round 2 mixed */
		size_t off = 0;
		for (size_t i = 0; i < N; i++) {
			uint32_t base = round == 1 || (round == 2 && (i & 1)) ? S_DEFER : S_SERVE;
			fetch(&rec[i], base + (uint32_t)(i * 31 + (size_t)round), sizes[i], P.dst + off);
			off += sizes[i];
		}
		pump_until_done(rec, N);
		for (size_t i = 0; i < N; i++)
			check_bytes(&rec[i]);
	}
	/* the owner may read its send completions after the data arrived */
	struct net_stats s0, s1;
	net_get_stats(P.net[0], &s0);
	PUMP_UNTIL((net_get_stats(P.net[0], &s0), P.replies_done >= P.requests &&
						  s0.served >= N * ROUNDS),
		   "owner: %d of %d replies reported, %llu sends completed", P.replies_done,
		   P.requests, (unsigned long long)s0.served);
	cr_assert_eq(P.replies_done, P.requests, "every net_reply reports once");
	cr_assert_eq(P.reply_errors, 0);
	net_get_stats(P.net[1], &s1);
	cr_assert_eq(s1.fetches, N * ROUNDS);
	cr_assert_eq(s1.fetch_failed, 0);
	cr_assert_eq(s1.fetch_bytes, total * ROUNDS);
	cr_assert_eq(s0.served, N * ROUNDS);
	cr_assert_eq(s0.served_bytes, total * ROUNDS);
	cr_assert_eq(s0.bad_msgs, 0);
	cr_assert(s1.fetch_seconds > 0);
	pair_close();
}

/* ---- NAKs --------------------------------------------------------------------- */
ParameterizedTestParameters(net, nak)
{
	return cr_make_param_array(struct prov, providers, ARRAY_SIZE(providers));
}

ParameterizedTest(struct prov *prov, net, nak, .timeout = 300)
{
	pair_open(prov->name, 2, NULL, 0, 4 * 65536, LONG);
	struct rec rec[4];
	fetch(&rec[0], S_NAK + 1, 65536, P.dst);                 /* lookup NAKs */
	fetch(&rec[1], S_NAK_LATE + 2, 65536, P.dst + 65536);    /* dispatcher NAKs */
	fetch(&rec[2], S_SERVE + 3, 65536, P.dst + 2 * 65536);   /* and one that works */
	fetch(&rec[3], S_BADLEN + 4, 65536, P.dst + 3 * 65536);  /* wrong-length reply */
	pump_until_done(rec, 4);
	cr_assert_eq(rec[0].status, -ENOENT, "%s", strerror(-rec[0].status));
	cr_assert_eq(rec[1].status, -EIO, "%s", strerror(-rec[1].status));
	check_bytes(&rec[2]);
	cr_assert_eq(rec[3].status, -EIO, "a reply of the wrong length is refused and NAKed: %s",
		     strerror(-rec[3].status));
	PUMP_UNTIL(P.replies_done >= 1, "the wrong-length reply reported nothing");
	cr_assert_eq(P.replies_done, 1);
	cr_assert_eq(P.reply_errors, 1);
	cr_assert_eq(net_peer_suspect(P.net[1], 0), 0, "a NAK does not make the peer suspect");
	struct net_stats s0, s1;
	net_get_stats(P.net[0], &s0);
	net_get_stats(P.net[1], &s1);
	cr_assert_eq(s0.naks, 3);
	cr_assert_eq(s1.fetch_timeouts, 0);
	pair_close();
}

/* ---- timeouts, suspect peers, late replies ------------------------------------------ */
/* The timeout where a test checks it. The provider connects two endpoints
 * on their first message, and beside stress-ng (load 12) that took 0.6-1.3 s
 * with tcp;ofi_rxm, so warm_up() connects first; fetches then took at most
 * 0.05 s, 20 x less than this. */
static const struct timing SHORT = { 1.0, 1.0 };
/* Margin on an upper bound that only scheduling decides. */
#define MARGIN_S (5.0 * SLOW)

static void pair_pump(struct net *n, int ms)
{
	(void)n;
	pump_once(ms);
}

/* Fetch from node 0 through n until one succeeds, so that the connection is
 * up before a short timeout is relied on. An attempt that times out while
 * the provider connects leaves node 0 suspect: that period is waited out. */
static void warm_up(struct net *n, void (*pump)(struct net *n, int ms))
{
	double t0 = now_s();
	for (uint32_t k = 0;; k++) {
		struct rec r;
		fetch(&r, S_SERVE + 900 + k, 1000, P.dst);
		while (!r.done) {
			cr_assert(now_s() - t0 < STATE_LIMIT_S, "warm-up fetch pending");
			pump(n, 20);
		}
		if (r.status == 0) {
			check_bytes(&r);
			return;
		}
		cr_assert(r.status == -ETIMEDOUT || r.status == -EHOSTDOWN, "warm-up fetch: %s",
			  strerror(-r.status));
		while (net_peer_suspect(n, 0)) {
			cr_assert(now_s() - t0 < STATE_LIMIT_S, "no connection to node 0");
			pump(n, 20);
		}
	}
}

ParameterizedTestParameters(net, timeout)
{
	return cr_make_param_array(struct prov, providers, ARRAY_SIZE(providers));
}

ParameterizedTest(struct prov *prov, net, timeout, .timeout = 300)
{
	pair_open(prov->name, 2, NULL, 0, 4u << 20, SHORT);
	const double to = SHORT.timeout_s * SLOW;
	warm_up(P.net[1], pair_pump);
	struct net_stats s1, base;
	net_get_stats(P.net[1], &base);
	struct rec r[3];

	/* the owner defers these and never answers: it said QUEUED, so the
	 * requester waits the granted window (10 x its budget) and then gives
	 * up -- without taking the owner, which is alive, for dead */
	fetch(&r[0], S_HOLE + 1, 2u << 20, P.dst);
	fetch(&r[1], S_HOLE + 2, 1000, P.dst + (2u << 20));
	pump_until_done(r, 2);
	PUMP_UNTIL(P.nholes == 2, "the owner's dispatcher saw %d of 2 requests", P.nholes);
	/* The grant is 10 x the budget the REQUEST carried: the timeout less the
	 * time before the REQUEST left, which is at most the time until the
	 * owner's dispatcher saw it (d). So the fetch waited at least
	 * d + 10 (to - d), less 10 ms for the budget's whole milliseconds. */
	double d = MAX(P.hole_seen[0], P.hole_seen[1]) - r[0].issued;
	double lo = 10 * to - 9 * d - 0.011;
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(r[i].status, -ETIMEDOUT, "%s", strerror(-r[i].status));
		cr_assert(r[i].seconds >= lo && r[i].seconds < 10 * to + MARGIN_S,
			  "a queued request timed out after %.3f s; granted %.3f s (request seen "
			  "after %.3f s)", r[i].seconds, 10 * to, d);
	}
	cr_assert_eq(net_peer_suspect(P.net[1], 0), 0, "an owner that answered QUEUED is alive");

	/* and the next fetch is served at once */
	fetch(&r[0], S_SERVE + 2, 1000, P.dst);
	pump_until_done(r, 1);
	check_bytes(&r[0]);

	/* The owner answers too late: nothing goes out, the reply reports it.
	 * Its deadline (0.9 x the grant after the request arrived) passed before
	 * the requester's (the grant after QUEUED arrived, later), which the
	 * timeouts above prove. */
	net_reply(P.net[0], 1, P.hole_ids[0], P.own.pattern, 2u << 20, &P);
	net_reply_error(P.net[0], 1, P.hole_ids[1], -EIO);
	PUMP_UNTIL(P.replies_done >= 1, "the late reply reported nothing");
	cr_assert_eq(P.replies_done, 1);
	cr_assert_eq(P.reply_errors, 1, "a reply after the requester's deadline is refused");

	fetch(&r[0], S_SERVE + 3, 100000, P.dst);
	fetch(&r[1], S_DEFER + 4, 100000, P.dst + 100000);
	pump_until_done(r, 2);
	check_bytes(&r[0]);
	check_bytes(&r[1]);

	net_get_stats(P.net[1], &s1);
	cr_assert_eq(s1.fetch_timeouts - base.fetch_timeouts, 2);
	cr_assert_eq(s1.fetch_failed - base.fetch_failed, 2);
	pair_close();
}

/* ---- many in flight ------------------------------------------------------------------- */
ParameterizedTestParameters(net, inflight)
{
	return cr_make_param_array(struct prov, providers, ARRAY_SIZE(providers));
}

ParameterizedTest(struct prov *prov, net, inflight, .timeout = 300)
{
	enum { N = 2000 };
	uint64_t lens[N];
	size_t offs[N], total = 0;
	uint64_t x = 88172645463325252ull;
	for (int i = 0; i < N; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		lens[i] = i % 97 == 0 ? 300000 + x % 300000 : 1 + x % 16384;
		offs[i] = total;
		total += lens[i];
	}
	pair_open(prov->name, 2, NULL, 0, total, LONG);
	static struct rec rec[N];
	for (int i = 0; i < N; i++) {
		uint32_t base = i % 10 == 3 ? S_NAK : i % 5 == 1 ? S_DEFER : S_SERVE;
		fetch(&rec[i], base + (uint32_t)i, lens[i], P.dst + offs[i]);
	}
	pump_until_done(rec, N);
	int naks = 0;
	for (int i = 0; i < N; i++) {
		if (i % 10 == 3) {
			cr_assert_eq(rec[i].done, 1);
			cr_assert_eq(rec[i].status, -ENOENT, "fetch %d: %s", i, strerror(-rec[i].status));
			naks++;
		} else {
			check_bytes(&rec[i]);
		}
	}
	/* nothing arrives twice, even later */
	for (int k = 0; k < 5; k++)
		pump_once(20);
	for (int i = 0; i < N; i++)
		cr_assert_eq(rec[i].done, 1, "fetch %d completed %d times", i, rec[i].done);
	struct net_stats s1;
	net_get_stats(P.net[1], &s1);
	cr_assert_eq(s1.fetches, N);
	cr_assert_eq(s1.fetch_failed, (uint64_t)naks);
	cr_assert_eq(s1.fetch_timeouts, 0);
	pair_close();
}

/* ---- garbage from a peer ------------------------------------------------------------------ */
/* A bare RDM endpoint on the same provider plays node 2 and sends whatever
 * it likes. */
struct raw {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_ep *ep;
	uint8_t addr[128];
	size_t addrlen;
};

static int raw_open(struct raw *r, const char *prov)
{
	memset(r, 0, sizeof(*r));
	struct fi_info *h = fi_allocinfo();
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_TAGGED;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
	h->fabric_attr->prov_name = strdup(prov);
	int rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, h, &r->info);
	fi_freeinfo(h);
	if (rc)
		return rc;
	cr_assert_eq(r->info->domain_attr->mr_mode & FI_MR_LOCAL, 0,
		     "the raw endpoint sends from unregistered memory");
	struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE };
	struct fi_av_attr ava = { .type = FI_AV_TABLE, .count = 4 };
	cr_assert_eq(fi_fabric(r->info->fabric_attr, &r->fabric, NULL), 0);
	cr_assert_eq(fi_domain(r->fabric, r->info, &r->domain, NULL), 0);
	cr_assert_eq(fi_cq_open(r->domain, &cqa, &r->cq, NULL), 0);
	cr_assert_eq(fi_av_open(r->domain, &ava, &r->av, NULL), 0);
	cr_assert_eq(fi_endpoint(r->domain, r->info, &r->ep, NULL), 0);
	cr_assert_eq(fi_ep_bind(r->ep, &r->av->fid, 0), 0);
	cr_assert_eq(fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	cr_assert_eq(fi_enable(r->ep), 0);
	r->addrlen = sizeof(r->addr);
	cr_assert_eq(fi_getname(&r->ep->fid, r->addr, &r->addrlen), 0);
	return 0;
}

static void raw_close(struct raw *r)
{
	fi_close(&r->ep->fid);
	fi_close(&r->av->fid);
	fi_close(&r->cq->fid);
	fi_close(&r->domain->fid);
	fi_close(&r->fabric->fid);
	fi_freeinfo(r->info);
}

/* Wait for the completion of `ctx` (the raw side progresses by polling),
 * serving the nets' events meanwhile. Returns the completion's error. */
static int raw_wait(struct raw *r, void *ctx, size_t *len)
{
	double t0 = now_s();
	for (;;) {
		struct fi_cq_tagged_entry c;
		ssize_t k = fi_cq_read(r->cq, &c, 1);
		if (k == 1 && c.op_context == ctx) {
			if (len)
				*len = c.len;
			return 0;
		}
		if (k == -FI_EAVAIL) {
			struct fi_cq_err_entry e = { 0 };
			fi_cq_readerr(r->cq, &e, 0);
			if (e.op_context == ctx)
				return e.err;
		}
		pump_once(0);
		cr_assert(now_s() - t0 < STATE_LIMIT_S, "raw endpoint: no completion");
	}
}

/* Send and wait for the send's completion; returns its error. */
static int raw_send_any(struct raw *r, fi_addr_t to, const void *buf, size_t len)
{
	struct fi_context2 ctx;
	ssize_t k;
	double t0 = now_s();
	while ((k = fi_send(r->ep, buf, len, NULL, to, &ctx)) == -FI_EAGAIN) {
		fi_cq_read(r->cq, NULL, 0);
		pump_once(0);
		cr_assert(now_s() - t0 < STATE_LIMIT_S, "raw endpoint: the send queue stays full");
	}
	if (k)
		return (int)-k;
	return raw_wait(r, &ctx, NULL);
}

static void raw_send(struct raw *r, fi_addr_t to, const void *buf, size_t len)
{
	int e = raw_send_any(r, to, buf, len);
	cr_assert_eq(e, 0, "raw fi_send: %s", fi_strerror(e));
}

/* The wire layout, as docs/net.md describes it. */
struct msg {
	uint32_t magic;
	uint16_t version, type;
	uint32_t from, budget_ms;
	uint64_t id, sample, arg;
};
#define MAGIC 0x4e524553u
#define WVER 3 /* the wire version */
#define ID(node, seq) ((UINT64_C(1) << 63) | ((uint64_t)(node) << 40) | (seq))

ParameterizedTestParameters(net, garbage)
{
	return cr_make_param_array(struct prov, providers, ARRAY_SIZE(providers));
}

ParameterizedTest(struct prov *prov, net, garbage, .timeout = 300)
{
	struct raw raw;
	if (raw_open(&raw, prov->name))
		cr_skip_test("provider '%s' not available on this machine", prov->name);
	pair_open(prov->name, 3, raw.addr, raw.addrlen, 1u << 20, LONG);
	fi_addr_t fa[3];
	cr_assert_eq(fi_av_insert(raw.av, P.addrs, 3, fa, 0, NULL), 3);

	/* the raw requester's budget is long too: the owner serves it whenever */
	const struct msg good = { MAGIC, WVER, 1, 2, 600000, ID(2, 7), 5, 1000 };
	struct msg m;
	int bad0 = 0, bad1 = 0;
	raw_send(&raw, fa[0], "abc", 3), bad0++;
	uint8_t junk[sizeof(struct msg)];
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = pattern_byte(i + 12345);
	raw_send(&raw, fa[0], junk, sizeof(junk)), bad0++;
	raw_send(&raw, fa[1], junk, sizeof(junk)), bad1++;
#define BAD(node, field, value)                                                        \
	do {                                                                           \
		m = good;                                                              \
		m.field = value;                                                       \
		raw_send(&raw, fa[node], &m, sizeof(m));                               \
		if (node == 0)                                                         \
			bad0++;                                                        \
		else                                                                   \
			bad1++;                                                        \
	} while (0)
	BAD(0, type, 99);
	BAD(0, version, WVER - 1);              /* the previous wire version */
	BAD(0, magic, 0x12345678u);
	BAD(0, id, ID(1, 7));                   /* claims another requester's id */
	BAD(0, id, ID(2, 7) & ~(UINT64_C(1) << 63));
	BAD(0, sample, UINT64_C(1) << 40);
	BAD(0, arg, 0);                         /* zero length */
	BAD(0, arg, UINT64_C(1) << 62);         /* absurd length */
	BAD(0, budget_ms, 0);
	BAD(0, from, 0);                        /* the receiver itself */
	BAD(0, from, 77);                       /* no such node */
	BAD(1, from, 1);
	/* NAKs: malformed, and well-formed for a request nobody made (ignored) */
	struct msg nak = { MAGIC, WVER, 2, 2, 0, ID(1, 99), 5, 5 };
	m = nak, m.arg = 0;
	raw_send(&raw, fa[1], &m, sizeof(m)), bad1++;
	m = nak, m.arg = 100000;
	raw_send(&raw, fa[1], &m, sizeof(m)), bad1++;
	m = nak, m.id = ID(0, 99);
	raw_send(&raw, fa[1], &m, sizeof(m)), bad1++;
	raw_send(&raw, fa[1], &nak, sizeof(nak));
	/* QUEUED: malformed, and well-formed for a request nobody made (ignored) */
	struct msg queued = { MAGIC, WVER, 3, 2, 5000, ID(1, 98), 5, 0 };
	m = queued, m.budget_ms = 0;
	raw_send(&raw, fa[1], &m, sizeof(m)), bad1++;
	m = queued, m.arg = 7;
	raw_send(&raw, fa[1], &m, sizeof(m)), bad1++;
	m = queued, m.id = ID(0, 98);
	raw_send(&raw, fa[1], &m, sizeof(m)), bad1++;
	raw_send(&raw, fa[1], &queued, sizeof(queued));
	/* data for a tag nobody posted: stays with the provider, harms nobody */
	ssize_t k = fi_tinject(raw.ep, junk, sizeof(junk), fa[1], ID(1, 4242));
	cr_assert(k == 0 || k == -FI_EAGAIN);

	double t0 = now_s();
	struct net_stats s0, s1;
	for (;;) {
		net_get_stats(P.net[0], &s0);
		net_get_stats(P.net[1], &s1);
		if (s0.bad_msgs >= (uint64_t)bad0 && s1.bad_msgs >= (uint64_t)bad1)
			break;
		cr_assert(now_s() - t0 < STATE_LIMIT_S,
			  "bad messages counted: node 0 %llu of %d, node 1 %llu of %d",
			  (unsigned long long)s0.bad_msgs, bad0, (unsigned long long)s1.bad_msgs, bad1);
		pump_once(20);
	}
	for (int i = 0; i < 5; i++)
		pump_once(10);
	net_get_stats(P.net[0], &s0);
	net_get_stats(P.net[1], &s1);
	cr_assert_eq(s0.bad_msgs, (uint64_t)bad0);
	cr_assert_eq(s1.bad_msgs, (uint64_t)bad1);
	cr_assert_eq(P.requests, 0, "no garbage reached the dispatcher");

	/* a well-formed request from the raw node is served, byte for byte */
	struct fi_context2 rctx;
	uint8_t *buf = calloc(1, 1000);
	cr_assert_eq(fi_trecv(raw.ep, buf, 1000, NULL, FI_ADDR_UNSPEC, good.id, 0, &rctx), 0);
	raw_send(&raw, fa[0], &good, sizeof(good));
	size_t got = 0;
	cr_assert_eq(raw_wait(&raw, &rctx, &got), 0);
	cr_assert_eq(got, 1000);
	cr_assert_eq(memcmp(buf, P.own.pattern + pattern_off(5, 1000), 1000), 0);

	/* Larger than any control message: the receiving provider may count it
	 * (sockets: a truncated receive) or drop the sender's connection
	 * (tcp;ofi_rxm), so the send itself may fail. Either way nothing breaks
	 * between the two nets. */
	uint8_t *big = calloc(1, 4096);
	memcpy(big, &good, sizeof(good));
	raw_send_any(&raw, fa[0], big, 4096);
	for (int i = 0; i < 10; i++)
		pump_once(10);
	struct rec r[2];
	fetch(&r[0], S_SERVE + 9, 70000, P.dst);
	fetch(&r[1], S_DEFER + 9, 70000, P.dst + 70000);
	pump_until_done(r, 2);
	check_bytes(&r[0]);
	check_bytes(&r[1]);
	net_get_stats(P.net[0], &s0);
	cr_assert_geq(s0.bad_msgs, (uint64_t)bad0);
	free(big);
	free(buf);
	pair_close();
	raw_close(&raw);
}

/* ---- bundles on the wire ------------------------------------------------------------------ */
/* A REQUEST_MANY's entries and a bundle's header and entries (docs/net.md). */
struct went {
	uint64_t id;
	uint32_t sample, len;
};
struct bhdr {
	uint32_t magic;
	uint16_t version, pad;
	uint32_t from, count;
};
struct bent {
	uint64_t id;
	uint32_t len;
	int32_t status;
};
#define BMAGIC 0x42524553u
#define BTAG UINT64_C(2)
#define MSG_MANY 4

/* A REQUEST_MANY from node `from` declaring `arg` entries, carrying n. */
static size_t many(uint8_t *buf, uint32_t from, const struct went *e, uint32_t n, uint64_t arg)
{
	struct msg m = { MAGIC, WVER, MSG_MANY, from, 600000, 0, 0, arg };
	memcpy(buf, &m, sizeof(m));
	memcpy(buf + sizeof(m), e, n * sizeof(*e));
	return sizeof(m) + n * sizeof(*e);
}

static void raw_tsend(struct raw *r, fi_addr_t to, const void *buf, size_t len, uint64_t tag)
{
	struct fi_context2 ctx;
	ssize_t k;
	double t0 = now_s();
	while ((k = fi_tsend(r->ep, buf, len, NULL, to, tag, &ctx)) == -FI_EAGAIN) {
		fi_cq_read(r->cq, NULL, 0);
		pump_once(0);
		cr_assert(now_s() - t0 < STATE_LIMIT_S, "raw endpoint: the send queue stays full");
	}
	cr_assert_eq(k, 0, "raw fi_tsend: %s", fi_strerror((int)-k));
	cr_assert_eq(raw_wait(r, &ctx, NULL), 0);
}

/* A bundle: header {from, count} then the given bytes. */
static size_t bundle(uint8_t *buf, uint32_t magic, uint32_t from, uint32_t count, const void *body,
		     size_t len)
{
	struct bhdr h = { magic, WVER, 0, from, count };
	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), body, len);
	return sizeof(h) + len;
}

static void wait_bad(uint64_t bad0, uint64_t bad1)
{
	struct net_stats s0, s1;
	PUMP_UNTIL((net_get_stats(P.net[0], &s0), net_get_stats(P.net[1], &s1),
		    s0.bad_msgs >= bad0 && s1.bad_msgs >= bad1),
		   "bad messages counted: node 0 %llu of %llu, node 1 %llu of %llu",
		   (unsigned long long)s0.bad_msgs, (unsigned long long)bad0,
		   (unsigned long long)s1.bad_msgs, (unsigned long long)bad1);
	for (int i = 0; i < 5; i++)
		pump_once(10);
	net_get_stats(P.net[0], &s0);
	net_get_stats(P.net[1], &s1);
	cr_assert_eq(s0.bad_msgs, bad0);
	cr_assert_eq(s1.bad_msgs, bad1);
}

ParameterizedTestParameters(net, bundles)
{
	return cr_make_param_array(struct prov, providers, ARRAY_SIZE(providers));
}

/* A raw node 2 asks node 0 for three samples in one REQUEST_MANY and reads
 * the bundle; then sends malformed REQUEST_MANYs to node 0 and malformed
 * bundles to node 1: each is counted, none answered or delivered, and the
 * pair still moves bundled samples afterwards. */
ParameterizedTest(struct prov *prov, net, bundles, .timeout = 300)
{
	struct raw raw;
	if (raw_open(&raw, prov->name))
		cr_skip_test("provider '%s' not available on this machine", prov->name);
	g_no_bundles = 0;
	pair_open(prov->name, 3, raw.addr, raw.addrlen, 1u << 20, LONG);
	fi_addr_t fa[3];
	cr_assert_eq(fi_av_insert(raw.av, P.addrs, 3, fa, 0, NULL), 3);

	/* served, served, NAKed: one bundle, in the order asked */
	const struct went ask[3] = { { ID(2, 1), S_SERVE + 1, 1000 },
				     { ID(2, 2), S_SERVE + 2, 77 },
				     { ID(2, 3), S_NAK + 1, 10 } };
	uint8_t req[2048];
	size_t cap = 256u << 10;
	uint8_t *bb = calloc(1, cap);
	struct fi_context2 rctx;
	cr_assert_eq(fi_trecv(raw.ep, bb, cap, NULL, FI_ADDR_UNSPEC, BTAG, 0, &rctx), 0);
	raw_send(&raw, fa[0], req, many(req, 2, ask, 3, 3));
	size_t got = 0;
	cr_assert_eq(raw_wait(&raw, &rctx, &got), 0);
	struct bhdr h;
	memcpy(&h, bb, sizeof(h));
	cr_assert_eq(h.magic, BMAGIC);
	cr_assert_eq(h.version, WVER);
	cr_assert_eq(h.from, 0u);
	cr_assert_eq(h.count, 3u);
	size_t off = sizeof(h);
	for (int i = 0; i < 3; i++) {
		struct bent e;
		memcpy(&e, bb + off, sizeof(e));
		off += sizeof(e);
		cr_assert_eq(e.id, ask[i].id, "entry %d", i);
		if (i == 2) {
			cr_assert_eq(e.status, -ENOENT);
			cr_assert_eq(e.len, 0u);
			continue;
		}
		cr_assert_eq(e.status, 0, "entry %d", i);
		cr_assert_eq(e.len, ask[i].len);
		cr_assert_eq(memcmp(bb + off, P.own.pattern + pattern_off(ask[i].sample, e.len), e.len),
			     0, "entry %d's bytes", i);
		off += (e.len + 7u) & ~7u;
	}
	cr_assert_eq(got, off, "bundle of %zu bytes, %zu parsed", got, off);

	/* malformed REQUEST_MANYs to node 0 */
	uint64_t bad0 = 0, bad1 = 0;
	raw_send(&raw, fa[0], req, many(req, 2, ask, 0, 0)), bad0++;    /* no entries */
	raw_send(&raw, fa[0], req, many(req, 2, ask, 2, 3)), bad0++;    /* 3 declared, 2 sent */
	raw_send(&raw, fa[0], req, many(req, 2, ask, 3, 65)), bad0++;   /* more than 64 */
	raw_send(&raw, fa[0], req, many(req, 0, ask, 3, 3)), bad0++;    /* from the receiver */
	const struct went wrong[3] = { { ID(1, 5), S_SERVE, 100 },      /* another node's id */
				       { ID(2, 6), S_SERVE, 40000 },    /* too large to bundle */
				       { ID(2, 7), S_SERVE, 0 } };      /* zero length */
	raw_send(&raw, fa[0], req, many(req, 2, wrong, 3, 3)), bad0 += 3;

	/* malformed bundles to node 1 */
	uint8_t bad[256];
	struct bent ent = { ID(1, 77), 100, 0 };
	raw_tsend(&raw, fa[1], "12345678", 8, BTAG), bad1++;                      /* short */
	raw_tsend(&raw, fa[1], bad, bundle(bad, 0x1234u, 0, 1, &ent, 16), BTAG), bad1++;
	raw_tsend(&raw, fa[1], bad, bundle(bad, BMAGIC, 1, 1, &ent, 16), BTAG), bad1++; /* itself */
	raw_tsend(&raw, fa[1], bad, bundle(bad, BMAGIC, 77, 1, &ent, 16), BTAG), bad1++;
	raw_tsend(&raw, fa[1], bad, bundle(bad, BMAGIC, 0, 2, &ent, 16), BTAG), bad1++; /* cut */
	/* 100 bytes announced, 16 follow */
	uint8_t body[32] = { 0 };
	memcpy(body, &ent, sizeof(ent));
	raw_tsend(&raw, fa[1], bad, bundle(bad, BMAGIC, 0, 1, body, 32), BTAG), bad1++;
	ent.len = 0, ent.status = -5000;
	raw_tsend(&raw, fa[1], bad, bundle(bad, BMAGIC, 0, 1, &ent, 16), BTAG), bad1++;
	/* well formed, for a fetch nobody made: a late answer, ignored */
	ent.status = -ENOENT;
	raw_tsend(&raw, fa[1], bad, bundle(bad, BMAGIC, 0, 1, &ent, 16), BTAG);
	wait_bad(bad0, bad1);
	cr_assert_eq(P.requests, 0, "no garbage reached the dispatcher");

	/* the pair still works, served and deferred, bundled */
	struct rec r[2];
	fetch(&r[0], S_SERVE + 11, 3000, P.dst);
	fetch(&r[1], S_DEFER + 11, 5000, P.dst + 3000);
	pump_until_done(r, 2);
	check_bytes(&r[0]);
	check_bytes(&r[1]);
	free(bb);
	pair_close();
	raw_close(&raw);
}

ParameterizedTestParameters(net, bundles_mixed)
{
	return cr_make_param_array(struct prov, providers, ARRAY_SIZE(providers));
}

/* The owner has net.bundles off, the requester on: the owner still answers
 * bundled requests (served and deferred), byte for byte. */
ParameterizedTest(struct prov *prov, net, bundles_mixed, .timeout = 300)
{
	enum { N = 64 };
	g_no_bundles = 1u;
	pair_open(prov->name, 2, NULL, 0, N * 4096, LONG);
	struct rec r[N];
	for (uint32_t i = 0; i < N; i++)
		fetch(&r[i], (i & 1 ? S_DEFER : S_SERVE) + 100 + i, 1000 + i * 47, P.dst + i * 4096);
	pump_until_done(r, N);
	for (uint32_t i = 0; i < N; i++)
		check_bytes(&r[i]);
	struct net_stats s0;
	net_get_stats(P.net[0], &s0);
	cr_assert_eq(s0.served, N);
	cr_assert_eq(s0.bad_msgs, 0);
	g_no_bundles = 0;
	pair_close();
}

/* ---- a peer process that stops answering ------------------------------------------------- */
/* The peer is this test binary again (fork + exec: TSan does not support
 * threads in a child forked from a threaded process), started in child mode
 * by the constructor below; it talks over two pipes and uses no Criterion
 * asserts. */
#define CHILD_ENV "SEER_NET_TEST_CHILD"

static bool pipe_write(int fd, const void *buf, size_t len)
{
	return write(fd, &len, sizeof(len)) == (ssize_t)sizeof(len) &&
	       write(fd, buf, len) == (ssize_t)len;
}

static bool pipe_read(int fd, void *buf, size_t *len)
{
	size_t l;
	if (read(fd, &l, sizeof(l)) != (ssize_t)sizeof(l) || l > *len)
		return false;
	size_t got = 0;
	while (got < l) {
		ssize_t k = read(fd, (char *)buf + got, l - got);
		if (k <= 0)
			return false;
		got += (size_t)k;
	}
	*len = l;
	return true;
}

/* One net in this process as `node`, the other node in the peer process.
 * Returns net_create's or net_start's error (message in err). */
static int solo_open(struct net **out, const char *prov, uint32_t node, struct timing t, int rfd,
		     int wfd, char *err, size_t errlen)
{
	struct net_opts o = {
		.provider = prov,
		.node = node,
		.nnodes = 2,
		.region = node == 0 ? P.own.pattern : P.dst,
		.region_len = node == 0 ? PATTERN_LEN : P.dst_len,
		.lookup = lookup,
		.lookup_ctx = &P.own,
		.timeout_s = t.timeout_s * SLOW,
		.suspect_s = t.suspect_s * SLOW,
	};
	void *addr;
	size_t alen;
	struct net *n;
	int rc = net_create(&n, &o, &addr, &alen, err, errlen);
	/* the peer learns of a failure from an empty address */
	if (!pipe_write(wfd, rc ? "" : addr, rc ? 0 : alen))
		rc = rc ? rc : -EPIPE;
	if (rc)
		return rc;
	uint8_t other[128];
	size_t olen = sizeof(other);
	if (!pipe_read(rfd, other, &olen) || olen != alen) {
		snprintf(err, errlen, "the peer process sent no address");
		net_destroy(n);
		free(addr);
		return -EPIPE;
	}
	uint8_t *all = malloc(2 * alen);
	memcpy(all + node * alen, addr, alen);
	memcpy(all + (1 - node) * alen, other, alen);
	rc = net_start(n, all, alen, err, errlen);
	free(all);
	free(addr);
	if (rc) {
		net_destroy(n);
		return rc;
	}
	*out = n;
	return 0;
}

static void solo_buffers(void)
{
	memset(&P, 0, sizeof(P));
	P.own.pattern = malloc(PATTERN_LEN);
	for (size_t i = 0; i < PATTERN_LEN; i++)
		P.own.pattern[i] = pattern_byte(i);
	P.dst_len = 64u << 20;
	P.dst = calloc(1, P.dst_len);
}

/* Take `node`'s events: FETCH_DONE go to their records, the owner's
 * NET_REQUESTs are kept in P.deferred, NET_REPLY_DONEs counted. */
static void solo_pump(struct net *n, int ms)
{
	struct pollfd pf = { net_event_fd(n), POLLIN, 0 };
	poll(&pf, 1, ms);
	struct net_event *e = net_take_events(n);
	while (e) {
		struct net_event *next = e->next;
		if (e->kind == NET_FETCH_DONE) {
			struct rec *r = e->user;
			r->done++;
			r->status = e->status;
			r->seconds = e->seconds;
		} else if (e->kind == NET_REQUEST && P.requests < (int)ARRAY_SIZE(P.deferred)) {
			P.deferred[P.requests++] = *e;
		} else if (e->kind == NET_REPLY_DONE) {
			P.replies_done++;
		}
		net_event_free(e);
		e = next;
	}
}

static void solo_wait(struct net *n, struct rec *r, size_t cnt)
{
	double t0 = now_s();
	while (!all_done(r, cnt)) {
		cr_assert(now_s() - t0 < STATE_LIMIT_S, "fetches pending after %.0f s", STATE_LIMIT_S);
		solo_pump(n, 20);
	}
}

/* Child mode: play `node` until killed. As requester, fetch `burst` samples
 * of 2 MiB the owner defers, once a first fetch succeeded. */
__attribute__((constructor)) static void child_main(void)
{
	const char *spec = getenv(CHILD_ENV);
	if (!spec)
		return;
	char prov[64];
	unsigned node, burst;
	int rfd, wfd;
	struct timing t;
	if (sscanf(spec, "%63[^|]|%u|%u|%d|%d|%lf|%lf", prov, &node, &burst, &rfd, &wfd,
		   &t.timeout_s, &t.suspect_s) != 7)
		_exit(2);
	log_set_level(LOG_ERROR);
	solo_buffers();
	struct net *n;
	char err[512];
	if (solo_open(&n, prov, node, t, rfd, wfd, err, sizeof(err)))
		_exit(3);
	if (burst) {
		static struct rec r[64];
		net_fetch(n, 0, S_SERVE + 1, P.dst, 4096, &r[0]);
		while (!r[0].done)
			solo_pump(n, 20);
		if (r[0].status)
			_exit(4);
		for (unsigned i = 1; i <= burst && i < ARRAY_SIZE(r); i++)
			net_fetch(n, 0, S_DEFER + i, P.dst + (size_t)i * MAX_LEN / 2, MAX_LEN / 2,
				  &r[i]);
	}
	for (;;)
		solo_pump(n, 100);
}

static pid_t spawn(const char *prov, uint32_t node, unsigned burst, struct timing t, int *rfd,
		   int *wfd)
{
	int a[2], b[2];
	cr_assert_eq(pipe(a), 0);
	cr_assert_eq(pipe(b), 0);
	/* everything the child needs is built before fork: it only execs */
	char spec[200], envv[240];
	snprintf(spec, sizeof(spec), "%s|%u|%u|%d|%d|%.17g|%.17g", prov, node, burst, b[0], a[1],
		 t.timeout_s, t.suspect_s);
	snprintf(envv, sizeof(envv), "%s=%s", CHILD_ENV, spec);
	char exe[4096];
	ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	cr_assert(k > 0);
	exe[k] = '\0';
	size_t nenv = 0;
	while (environ[nenv])
		nenv++;
	char **envp = calloc(nenv + 2, sizeof(*envp));
	memcpy(envp, environ, nenv * sizeof(*envp));
	envp[nenv] = envv;
	char *argv[] = { exe, NULL };
	fflush(NULL);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		close(a[0]);
		close(b[1]);
		execve(exe, argv, envp);
		_exit(127);
	}
	free(envp);
	close(a[1]);
	close(b[0]);
	*rfd = a[0];
	*wfd = b[1];
	return pid;
}

static void stop_and_reap(pid_t pid)
{
	kill(pid, SIGKILL);
	int st;
	waitpid(pid, &st, 0);
}

/* This side of a two-process pair; skips when the provider is missing. */
static struct net *solo_start(const char *prov, uint32_t node, struct timing t, pid_t pid, int rfd,
			      int wfd)
{
	char err[512];
	struct net *n = NULL;
	int rc = solo_open(&n, prov, node, t, rfd, wfd, err, sizeof(err));
	if (rc) {
		stop_and_reap(pid);
		if (provider_missing(rc, err))
			cr_skip_test("provider '%s' not available on this machine", prov);
		cr_assert_fail("%s", err);
	}
	return n;
}

/* SIGSTOP the child and wait until it is stopped. */
static void stop_child(pid_t pid)
{
	int st;
	cr_assert_eq(kill(pid, SIGSTOP), 0);
	cr_assert_eq(waitpid(pid, &st, WUNTRACED), pid);
	cr_assert(WIFSTOPPED(st), "the child ended (status %#x)", st);
}

/* net_destroy with the peer stopped: it never waits for peers. */
static void destroy_at_once(struct net *n)
{
	double t0 = now_s();
	net_destroy(n);
	double took = now_s() - t0;
	cr_assert(took < 2.0 * SLOW, "net_destroy took %.2f s with the peer stopped", took);
}

/* The stopped-owner test: each fetch to the stopped owner costs the timeout;
 * the suspect period is long next to the test's own steps between the mark
 * and its checks (which are guarded anyway). */
static const struct timing STOPPED = { 1.0, 3.0 };

ParameterizedTestParameters(net, owner_stopped)
{
	return cr_make_param_array(struct prov, providers, ARRAY_SIZE(providers));
}

/* The owner is SIGSTOPped: fetches time out (or fail fast while it is
 * suspect), and destroy returns at once. */
ParameterizedTest(struct prov *prov, net, owner_stopped, .timeout = 300)
{
	const double to = STOPPED.timeout_s * SLOW, sus = STOPPED.suspect_s * SLOW;
	int rfd, wfd;
	pid_t pid = spawn(prov->name, 0, 0, STOPPED, &rfd, &wfd);
	solo_buffers();
	struct net *n = solo_start(prov->name, 1, STOPPED, pid, rfd, wfd);
	P.net[1] = n; /* fetch() asks node 0 through P.net[1] */
	warm_up(n, solo_pump);
	static struct rec r[8];
	for (int i = 0; i < 4; i++)
		fetch(&r[i], S_SERVE + (uint32_t)i, 1u << 20, P.dst + ((size_t)i << 20));
	solo_wait(n, r, 4);
	for (int i = 0; i < 4; i++)
		check_bytes(&r[i]);

	stop_child(pid);
	for (int i = 0; i < 8; i++)
		fetch(&r[i], S_SERVE + 10 + (uint32_t)i, 2u << 20, P.dst + ((size_t)i << 21));
	solo_wait(n, r, 8);
	/* the first went out (nothing was suspect after the warm-up), the later
	 * ones may have found the owner suspect already */
	cr_assert_eq(r[0].status, -ETIMEDOUT, "fetch 0: %s", strerror(-r[0].status));
	for (int i = 1; i < 8; i++)
		cr_assert(r[i].status == -ETIMEDOUT || r[i].status == -EHOSTDOWN, "fetch %d: %s", i,
			  strerror(-r[i].status));
	/* The owner was marked at fetch 0's deadline or later, so it stays
	 * suspect at least until `due`; only a test thread kept off the CPU for
	 * the whole period can get past it (then the fetch goes out and times
	 * out, which is right too). */
	double due = r[0].issued + to + sus;
	int suspect = net_peer_suspect(n, 0);
	fetch(&r[0], S_SERVE + 30, 1000, P.dst);
	double asked = now_s();
	solo_wait(n, r, 1);
	if (asked < due) {
		cr_assert_eq(suspect, 1, "the owner is suspect after the timeouts");
		cr_assert_eq(r[0].status, -EHOSTDOWN, "a fetch while suspect fails at once: %s",
			     strerror(-r[0].status));
	} else {
		cr_assert(r[0].status == -ETIMEDOUT || r[0].status == -EHOSTDOWN, "%s",
			  strerror(-r[0].status));
	}

	/* it comes back: after the suspect period fetches work again */
	cr_assert_eq(kill(pid, SIGCONT), 0);
	double t_sus = now_s();
	while (net_peer_suspect(n, 0)) {
		cr_assert(now_s() - t_sus < sus + STATE_LIMIT_S, "still suspect");
		solo_pump(n, 20);
	}
	fetch(&r[0], S_SERVE + 31, 100000, P.dst);
	solo_wait(n, r, 1);
	check_bytes(&r[0]);
	stop_child(pid);

	destroy_at_once(n);
	P.net[1] = NULL;
	stop_and_reap(pid);
	close(rfd);
	close(wfd);
	free(P.own.pattern);
	free(P.dst);
}

ParameterizedTestParameters(net, requester_stopped)
{
	return cr_make_param_array(struct prov, providers, ARRAY_SIZE(providers));
}

/* The requester's burst: 24 x 2 MiB = 48 MiB, more than loopback TCP can
 * buffer towards a stopped process (tcp_rmem max 32 MiB + tcp_wmem max
 * 4 MiB here), and ofi_rxm's rendezvous sends need the receiver anyway. */
#define BURST 24

/* The owner stops the requester once all its requests arrived (deferred),
 * then answers them: the sends to the stopped process stay pending, and
 * destroy still returns at once. */
ParameterizedTest(struct prov *prov, net, requester_stopped, .timeout = 300)
{
	int rfd, wfd;
	pid_t pid = spawn(prov->name, 1, BURST, LONG, &rfd, &wfd);
	solo_buffers();
	struct net *n = solo_start(prov->name, 0, LONG, pid, rfd, wfd);
	double t0 = now_s();
	while (P.requests < BURST) {
		int st = 0;
		pid_t w = waitpid(pid, &st, WNOHANG);
		cr_assert_eq(w, 0, "the requester ended (status %#x)", st);
		cr_assert(now_s() - t0 < STATE_LIMIT_S, "%d of %d requests arrived", P.requests,
			  BURST);
		solo_pump(n, 20);
	}
	stop_child(pid);
	for (int i = 0; i < BURST; i++) {
		const struct net_event *q = &P.deferred[i];
		net_reply(n, q->peer, q->req_id, P.own.pattern + pattern_off(q->sample, q->len),
			  q->len, &P);
	}
	solo_pump(n, 20);
	cr_assert_eq(P.requests, BURST);
	cr_assert_lt(P.replies_done, BURST, "replies to a stopped requester cannot all finish");
	destroy_at_once(n);
	stop_and_reap(pid);
	close(rfd);
	close(wfd);
	free(P.own.pattern);
	free(P.dst);
}

/* ---- configuration errors ------------------------------------------------------------ */
Test(net, unknown_provider)
{
	static uint8_t region[4096];
	struct net_opts o = {
		.provider = "verbs;ofi_rxm",
		.node = 0,
		.nnodes = 2,
		.region = region,
		.region_len = sizeof(region),
		.lookup = lookup,
		.lookup_ctx = &P.own,
	};
	char err[512] = "";
	void *addr = (void *)1;
	size_t alen = 0;
	struct net *n = (void *)1;
	int rc = net_create(&n, &o, &addr, &alen, err, sizeof(err));
	cr_assert_lt(rc, 0);
	cr_assert_null(n);
	cr_assert_null(addr);
	cr_assert(strstr(err, "'verbs;ofi_rxm' not available") != NULL, "%s", err);
	cr_assert(strstr(err, "tcp;ofi_rxm") != NULL, "the message lists what works: %s", err);
	o.provider = "sockets";
	o.node = 2;
	rc = net_create(&n, &o, &addr, &alen, err, sizeof(err));
	cr_assert_eq(rc, -EINVAL, "node >= nnodes");
}
