/* seer-pfsemu: a read-only pass-through FUSE file system that models a shared
 * parallel file system (PFS) in front of a local directory.
 *
 * Every read reaches this process (direct_io, no page cache) and pays the
 * modelled cost before it is answered:
 *
 *   arrival -> [in-flight gate, FIFO] -> pread from SRC -> fault injection
 *           -> wait until arrival' + latency and until the shared token bucket
 *              has let the bytes through -> reply
 *
 * (arrival' = the time the gate admitted the request). Metadata operations
 * (getattr/lookup, open, opendir, readlink) go through the same gate and pay
 * --meta-latency-ms. Counters are exposed while mounted as JSON in
 * MOUNTPOINT/.pfsemu/stats; opening MOUNTPOINT/.pfsemu/reset zeroes them.
 * docs/pfsemu.md describes the model, the counters and the limits.
 *
 * Threading: libfuse's multithreaded loop runs the callbacks on up to
 * --threads worker threads. Shared state is the gate (mutex + condvar), the
 * token bucket (mutex), the per-file table (mutex, taken at open and when the
 * stats are rendered) and relaxed atomic counters. Waits sleep in ppoll() on an
 * eventfd that the SIGINT/SIGTERM/SIGHUP handler signals, so a shutdown never
 * waits for a throttled backlog. */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312

#include <fuse.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "../src/util.h"

#define PROG "seer-pfsemu"
#define CTL_DIR ".pfsemu"           /* virtual control directory under the root */
#define CTL_PATH "/" CTL_DIR
#define STATS_FORMAT 1              /* "format" field of the stats JSON */
#define KERNEL_MAX_READ (1u << 20)  /* libfuse 3.14 negotiates at most 256 pages */
#define MIN_MAX_READ 4096u

/* ---- options ------------------------------------------------------------ */

enum fault_kind { FAULT_EIO = 0, FAULT_ENOENT, FAULT_SHORT, FAULT_NKINDS };
static const char *const fault_names[FAULT_NKINDS] = { "eio", "enoent", "short" };

struct emu_opts {
	bool foreground;
	bool debug;
	bool stats_per_file;
	bool allow_other;
	uint64_t bandwidth;      /* bytes/s; 0 = unlimited */
	uint64_t burst;          /* token bucket depth, bytes */
	double latency_ms;       /* added to every read */
	double meta_latency_ms;  /* added to getattr/lookup, open, opendir, readlink */
	uint64_t max_inflight;   /* requests served at once; 0 = unlimited */
	uint64_t max_read;       /* largest FUSE read request, bytes */
	uint64_t blksize;        /* st_blksize reported; 0 = max_read */
	double attr_timeout;     /* kernel attr/entry/negative cache, seconds */
	uint64_t threads;        /* FUSE worker threads */
	const char *stats_path;  /* final JSON at unmount; NULL = none */
	double fault_rate;       /* probability per read */
	unsigned fault_kinds;    /* bit mask of enum fault_kind */
	uint64_t fault_seed;
	const char *fault_path;  /* substring; "" = every file */
	const char *log_file;
	int log_level;           /* enum log_level */
};

enum opt_type {
	OT_FLAG,   /* bool, no argument */
	OT_SIZE,   /* uint64_t bytes, parse_size units */
	OT_RATE,   /* uint64_t bytes/s: a size with optional "/s" */
	OT_MS,     /* double milliseconds >= 0 */
	OT_SEC,    /* double seconds >= 0 */
	OT_COUNT,  /* uint64_t */
	OT_PROB,   /* double in [0, 1] */
	OT_STR,    /* const char * */
	OT_KINDS,  /* unsigned bit mask from a comma list of fault_names */
	OT_SEED,   /* uint64_t, or "random" */
	OT_LEVEL,  /* int log level name */
};

/* One table drives parsing, defaults and --help. The min/max bounds apply to
 * numeric types (max 0 = no upper bound). */
struct opt_def {
	const char *name;
	int short_name;
	enum opt_type type;
	size_t off;
	const char *def;
	const char *arg;
	double min, max;
	const char *help;
};

#define O(f) offsetof(struct emu_opts, f)
static const struct opt_def opt_table[] = {
	{ "foreground", 'f', OT_FLAG, O(foreground), NULL, NULL, 0, 0,
	  "stay in the foreground (default: daemonize once mounted)" },
	{ "debug", 'd', OT_FLAG, O(debug), NULL, NULL, 0, 0,
	  "libfuse request trace on stderr (implies -f)" },
	{ "bandwidth", 'b', OT_RATE, O(bandwidth), "0", "RATE", 0, 0,
	  "aggregate bandwidth of all reads, e.g. 200MB/s (0 = unlimited)" },
	{ "burst", 0, OT_SIZE, O(burst), "0", "SIZE",  0, 0,
	  "bytes that may pass at once after idle time (bucket depth)" },
	{ "latency-ms", 'l', OT_MS, O(latency_ms), "0", "MS", 0, 600000,
	  "latency added to every read request" },
	{ "meta-latency-ms", 'm', OT_MS, O(meta_latency_ms), "0", "MS", 0, 600000,
	  "latency added to lookup/getattr, open, opendir, readlink" },
	{ "max-inflight", 'n', OT_COUNT, O(max_inflight), "0", "N", 0, 1000000,
	  "requests served at once, others queue in order (0 = unlimited)" },
	{ "max-read", 0, OT_SIZE, O(max_read), "1MiB", "SIZE", MIN_MAX_READ, KERNEL_MAX_READ,
	  "largest read request (4KiB..1MiB); larger reads are split" },
	{ "blksize", 0, OT_SIZE, O(blksize), "0", "SIZE", 0, 1 << 30,
	  "st_blksize shown to clients, a power of two (0 = max-read)" },
	{ "attr-timeout", 0, OT_SEC, O(attr_timeout), "1", "SEC", 0, 86400,
	  "kernel cache time of attributes and names" },
	{ "threads", 't', OT_COUNT, O(threads), "64", "N", 1, 4096,
	  "FUSE worker threads: most requests the emulator sees at once" },
	{ "stats", 's', OT_STR, O(stats_path), NULL, "FILE",  0, 0,
	  "write the final counters as JSON to FILE at unmount" },
	{ "stats-per-file", 'p', OT_FLAG, O(stats_per_file), NULL, NULL, 0, 0,
	  "also count and list per file (memory grows with files opened)" },
	{ "fault-rate", 0, OT_PROB, O(fault_rate), "0", "R", 0, 1,
	  "probability that a read fails (0..1)" },
	{ "fault-kinds", 0, OT_KINDS, O(fault_kinds), "eio", "LIST", 0, 0,
	  "comma list of eio, enoent, short; one is drawn per fault" },
	{ "fault-seed", 0, OT_SEED, O(fault_seed), "random", "N", 0, 0,
	  "seed of the fault generator, for reproducible runs" },
	{ "fault-path", 0, OT_STR, O(fault_path), "", "SUBSTR", 0, 0,
	  "only files whose path under SRC_DIR contains SUBSTR" },
	{ "allow-other", 0, OT_FLAG, O(allow_other), NULL, NULL, 0, 0,
	  "let other users access the mount (FUSE allow_other)" },
	{ "log-file", 0, OT_STR, O(log_file), NULL, "FILE", 0, 0,
	  "messages of the daemon (default: discarded)" },
	{ "log-level", 0, OT_LEVEL, O(log_level), "info", "LEVEL", 0, 0,
	  "error, warn, info or debug" },
};
#undef O

/* ---- emulator state ------------------------------------------------------- */

/* Totals since the last reset; relaxed atomics, summed at render time. */
struct emu_totals {
	_Atomic uint64_t reads;        /* read requests served (not EOF ones) */
	_Atomic uint64_t bytes;        /* bytes returned by those reads */
	_Atomic uint64_t eof_reads;    /* reads at or past EOF, answered at once */
	_Atomic uint64_t opens;        /* source files opened */
	_Atomic uint64_t getattrs;     /* getattr/lookup on source paths */
	_Atomic uint64_t opendirs;
	_Atomic uint64_t readlinks;
	_Atomic uint64_t faults[FAULT_NKINDS];
	_Atomic uint64_t io_errors;    /* real errors from the source file system */
	_Atomic uint64_t read_ns;      /* sum of read service times, arrival to reply */
	_Atomic uint64_t queue_ns;     /* sum of time spent waiting at the gate */
};

/* Per-file counters, keyed by the path relative to SRC_DIR. Entries live until
 * exit; a reset zeroes them. */
struct pf_file {
	struct pf_file *next;
	uint64_t hash;
	_Atomic uint64_t opens, reads, bytes, faults;
	char path[];
};

struct pf_table {
	pthread_mutex_t lock;
	struct pf_file **slots;
	size_t nslots, count;
};

/* FIFO admission: ticket t may run once t < done + limit. Also measures the
 * busy time (at least one request being served). */
struct emu_gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t limit;         /* 0 = unlimited */
	uint64_t next_ticket;
	uint64_t done;
	unsigned waiting;
	unsigned inflight, inflight_max;
	uint64_t busy_ns, busy_since;
};

/* Token bucket as a virtual schedule: tat is when the link would have sent
 * every byte granted so far at `rate`; a request may complete burst_ns before
 * its own share is sent. */
struct emu_bucket {
	pthread_mutex_t lock;
	uint64_t rate;          /* bytes/s, 0 = unlimited */
	uint64_t burst_ns;
	uint64_t tat;
};

/* fi->fh of files and directories points to one of these, owned by
 * open/release and opendir/releasedir; the kind comes first in both. */
enum fh_kind { FH_SRC = 1, FH_CTL, FH_DIR };

/* An open file. */
struct emu_fh {
	enum fh_kind kind;      /* FH_SRC or FH_CTL */
	int fd;                 /* FH_SRC */
	bool fault_match;
	_Atomic uint64_t size;  /* FH_SRC: size at open, refreshed at EOF */
	struct pf_file *pf;     /* NULL unless --stats-per-file */
	char *data;             /* FH_CTL: snapshot served by reads */
	size_t len;
};

/* An open directory. */
struct emu_dh {
	enum fh_kind kind;      /* FH_DIR */
	DIR *dp;                /* NULL for the virtual control directory */
	bool is_root;
	off_t off;
	struct dirent *pending; /* read from dp but not yet accepted by the filler */
};

struct emu {
	struct emu_opts o;
	char *src;              /* absolute */
	char *mnt;              /* absolute */
	char *stats_path;       /* absolute --stats, or NULL */
	int src_fd;
	int stop_fd;            /* eventfd, readable once shutdown starts */
	atomic_bool stopping;
	uint64_t lat_ns, meta_lat_ns;
	uint64_t start_ns, reset_ns;
	time_t start_wall;
	struct emu_totals t;
	struct emu_gate gate;
	struct emu_bucket bucket;
	struct pf_table files;
	_Atomic uint64_t fault_ctr;
	unsigned nkinds;
	enum fault_kind kinds[FAULT_NKINDS];
};

static struct emu emu = {
	.src_fd = -1,
	.stop_fd = -1,
	.gate = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER },
	.bucket = { .lock = PTHREAD_MUTEX_INITIALIZER },
	.files = { .lock = PTHREAD_MUTEX_INITIALIZER },
};

/* ---- small helpers -------------------------------------------------------- */

static uint64_t ms_to_ns(double ms) { return (uint64_t)(ms * 1e6 + 0.5); }

/* Finer timer slack than the 50 us default, so sub-millisecond latencies
 * are not inflated. Per thread; libfuse owns the threads, so done lazily. */
static void thread_tune(void)
{
	static _Thread_local bool done;
	if (!done) {
		prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
		done = true;
	}
}

/* Sleep until the CLOCK_MONOTONIC deadline, or less once shutdown starts.
 * Timed sleeps overshoot roughly in proportion to their length on virtual
 * machines (~5 % measured here), so a long wait first sleeps 15/16 of it and
 * then the rest: the error becomes that of a short sleep (tens of us). */
static void sleep_until(uint64_t deadline)
{
	for (;;) {
		uint64_t now = now_ns();
		if (now >= deadline || atomic_load_explicit(&emu.stopping, memory_order_relaxed))
			return;
		uint64_t d = deadline - now;
		if (d > 200000)
			d -= d / 16;
		struct timespec ts = { (time_t)(d / 1000000000u), (long)(d % 1000000000u) };
		struct pollfd p = { .fd = emu.stop_fd, .events = POLLIN };
		if (ppoll(&p, 1, &ts, NULL) > 0)
			return;
	}
}

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Next draw of the fault generator: the sequence is a function of the seed
 * and of the order in which reads of matching files draw. */
static uint64_t fault_draw(void)
{
	uint64_t i = atomic_fetch_add_explicit(&emu.fault_ctr, 1, memory_order_relaxed);
	return splitmix64(emu.o.fault_seed + i * 0x9e3779b97f4a7c15ull);
}

/* "/a/b" -> "a/b", "/" -> "." (paths for the *at() calls on src_fd). */
static const char *rel_path(const char *path)
{
	while (*path == '/')
		path++;
	return *path ? path : ".";
}

/* What a path names in the virtual control directory. */
enum ctl_node { CTL_UNKNOWN = -1, CTL_NONE = 0, CTL_ROOT, CTL_STATS, CTL_RESET };

static enum ctl_node ctl_path(const char *path)
{
	if (!path || strncmp(path, CTL_PATH, sizeof(CTL_PATH) - 1) != 0)
		return CTL_NONE;
	const char *rest = path + sizeof(CTL_PATH) - 1;
	if (*rest == '\0')
		return CTL_ROOT;
	if (*rest != '/')
		return CTL_NONE;  /* e.g. "/.pfsemu2": a source path */
	if (strcmp(rest, "/stats") == 0)
		return CTL_STATS;
	if (strcmp(rest, "/reset") == 0)
		return CTL_RESET;
	return CTL_UNKNOWN;
}

/* ---- growable text buffer ---------------------------------------------------- */

struct sbuf {
	char *p;
	size_t len, cap;
};

static void sb_reserve(struct sbuf *b, size_t extra)
{
	if (b->len + extra + 1 <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < b->len + extra + 1)
		cap *= 2;
	b->p = xrealloc(b->p, cap);
	b->cap = cap;
}

static void sb_printf(struct sbuf *b, const char *fmt, ...) PRINTF_LIKE(2, 3);
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	sb_reserve(b, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* A JSON string literal. Bytes >= 0x80 pass through unchanged (file names
 * are bytes; valid UTF-8 names give valid JSON). */
static void sb_json_str(struct sbuf *b, const char *s)
{
	sb_reserve(b, strlen(s) * 6 + 2);
	b->p[b->len++] = '"';
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c == '"' || *c == '\\') {
			b->p[b->len++] = '\\';
			b->p[b->len++] = (char)*c;
		} else if (*c < 0x20) {
			b->len += (size_t)snprintf(b->p + b->len, 7, "\\u%04x", *c);
		} else {
			b->p[b->len++] = (char)*c;
		}
	}
	b->p[b->len++] = '"';
	b->p[b->len] = '\0';
}

/* ---- per-file table ---------------------------------------------------------- */

static uint64_t hash_str(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

/* The entry for rel, created on first use. Never NULL (aborts on OOM). */
static struct pf_file *pf_get(struct pf_table *t, const char *rel)
{
	uint64_t h = hash_str(rel);
	pthread_mutex_lock(&t->lock);
	if (t->nslots == 0) {
		t->nslots = 1024;
		t->slots = xcalloc(t->nslots, sizeof(*t->slots));
	}
	struct pf_file *f = t->slots[h & (t->nslots - 1)];
	for (; f; f = f->next)
		if (f->hash == h && strcmp(f->path, rel) == 0)
			goto out;
	if (t->count >= t->nslots) {
		size_t n = t->nslots * 2;
		struct pf_file **slots = xcalloc(n, sizeof(*slots));
		for (size_t i = 0; i < t->nslots; i++) {
			while (t->slots[i]) {
				struct pf_file *e = t->slots[i];
				t->slots[i] = e->next;
				e->next = slots[e->hash & (n - 1)];
				slots[e->hash & (n - 1)] = e;
			}
		}
		free(t->slots);
		t->slots = slots;
		t->nslots = n;
	}
	size_t len = strlen(rel);
	f = xcalloc(1, sizeof(*f) + len + 1);
	memcpy(f->path, rel, len + 1);
	f->hash = h;
	f->next = t->slots[h & (t->nslots - 1)];
	t->slots[h & (t->nslots - 1)] = f;
	t->count++;
out:
	pthread_mutex_unlock(&t->lock);
	return f;
}

static void pf_free_all(struct pf_table *t)
{
	for (size_t i = 0; i < t->nslots; i++) {
		while (t->slots[i]) {
			struct pf_file *e = t->slots[i];
			t->slots[i] = e->next;
			free(e);
		}
	}
	free(t->slots);
	t->slots = NULL;
	t->nslots = t->count = 0;
}

/* ---- gate and bucket --------------------------------------------------------- */

/* Wait for an in-flight slot in arrival order; returns the admission time. */
static uint64_t gate_enter(struct emu_gate *g)
{
	uint64_t arrival = now_ns();
	pthread_mutex_lock(&g->lock);
	uint64_t ticket = g->next_ticket++;
	if (g->limit) {
		g->waiting++;
		while (ticket >= g->done + g->limit)
			pthread_cond_wait(&g->cond, &g->lock);
		g->waiting--;
	}
	uint64_t now = now_ns();
	if (g->inflight++ == 0)
		g->busy_since = now;
	if (g->inflight > g->inflight_max)
		g->inflight_max = g->inflight;
	pthread_mutex_unlock(&g->lock);
	atomic_fetch_add_explicit(&emu.t.queue_ns, now - arrival, memory_order_relaxed);
	return now;
}

static void gate_leave(struct emu_gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->done++;
	if (--g->inflight == 0)
		g->busy_ns += now_ns() - g->busy_since;
	/* pairs with the wait in gate_enter(): the next ticket may now run */
	if (g->waiting)
		pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

/* Grant `bytes` to a request that reaches the link at `eligible`; returns
 * the earliest time it may complete. Requests are charged in the order they
 * call this, which makes the bucket FIFO-fair. */
static uint64_t bucket_grant(struct emu_bucket *b, uint64_t bytes, uint64_t eligible)
{
	if (b->rate == 0 || bytes == 0)
		return eligible;
	uint64_t cost = (uint64_t)((unsigned __int128)bytes * 1000000000u / b->rate);
	pthread_mutex_lock(&b->lock);
	uint64_t start = MAX(b->tat, eligible);
	b->tat = start + cost;
	uint64_t due = b->tat > b->burst_ns ? b->tat - b->burst_ns : 0;
	pthread_mutex_unlock(&b->lock);
	return MAX(due, eligible);
}

/* ---- counters: reset and render ------------------------------------------------ */

static void counters_reset(void)
{
	struct emu_totals *t = &emu.t;
	_Atomic uint64_t *all[] = { &t->reads, &t->bytes, &t->eof_reads, &t->opens, &t->getattrs,
				    &t->opendirs, &t->readlinks, &t->faults[0], &t->faults[1],
				    &t->faults[2], &t->io_errors, &t->read_ns, &t->queue_ns };
	_Static_assert(FAULT_NKINDS == 3, "list every fault counter above");
	for (size_t i = 0; i < ARRAY_SIZE(all); i++)
		atomic_store_explicit(all[i], 0, memory_order_relaxed);

	pthread_mutex_lock(&emu.gate.lock);
	uint64_t now = now_ns();
	emu.gate.busy_ns = 0;
	emu.gate.busy_since = now;
	emu.gate.inflight_max = emu.gate.inflight;
	emu.reset_ns = now;
	pthread_mutex_unlock(&emu.gate.lock);

	pthread_mutex_lock(&emu.files.lock);
	for (size_t i = 0; i < emu.files.nslots; i++) {
		for (struct pf_file *f = emu.files.slots[i]; f; f = f->next) {
			atomic_store_explicit(&f->opens, 0, memory_order_relaxed);
			atomic_store_explicit(&f->reads, 0, memory_order_relaxed);
			atomic_store_explicit(&f->bytes, 0, memory_order_relaxed);
			atomic_store_explicit(&f->faults, 0, memory_order_relaxed);
		}
	}
	pthread_mutex_unlock(&emu.files.lock);
}

static int pf_cmp(const void *a, const void *b)
{
	return strcmp((*(struct pf_file *const *)a)->path, (*(struct pf_file *const *)b)->path);
}

#define LD(x) ((unsigned long long)atomic_load_explicit(&(x), memory_order_relaxed))

/* The stats document; the caller frees it. Counters are read one by one while
 * requests may run, so totals are exact only once the clients are quiet. */
static char *stats_render(size_t *len)
{
	struct sbuf b = { 0 };
	const struct emu_opts *o = &emu.o;

	pthread_mutex_lock(&emu.gate.lock);
	uint64_t now = now_ns(); /* under the lock: not before a concurrent reset */
	uint64_t busy = emu.gate.busy_ns;
	if (emu.gate.inflight)
		busy += now - emu.gate.busy_since;
	unsigned inflight = emu.gate.inflight, inflight_max = emu.gate.inflight_max;
	uint64_t since_reset = now - emu.reset_ns;
	pthread_mutex_unlock(&emu.gate.lock);

	sb_printf(&b, "{\n  \"format\": %d,\n  \"pid\": %d,\n  \"source\": ", STATS_FORMAT,
		  (int)getpid());
	sb_json_str(&b, emu.src);
	sb_printf(&b, ",\n  \"mountpoint\": ");
	sb_json_str(&b, emu.mnt);
	sb_printf(&b, ",\n  \"uptime_s\": %.6f,\n  \"since_reset_s\": %.6f,\n",
		  (double)(now - emu.start_ns) / 1e9, (double)since_reset / 1e9);

	sb_printf(&b, "  \"config\": {\"bandwidth_Bps\": %llu, \"burst_bytes\": %llu, "
		  "\"latency_ms\": %.3f, \"meta_latency_ms\": %.3f, \"max_inflight\": %llu, "
		  "\"max_read\": %llu, \"threads\": %llu, \"attr_timeout_s\": %.3f, "
		  "\"fault_rate\": %.6f, \"fault_kinds\": [",
		  (unsigned long long)o->bandwidth, (unsigned long long)o->burst, o->latency_ms,
		  o->meta_latency_ms, (unsigned long long)o->max_inflight,
		  (unsigned long long)o->max_read, (unsigned long long)o->threads, o->attr_timeout,
		  o->fault_rate);
	for (unsigned i = 0; i < emu.nkinds; i++)
		sb_printf(&b, "%s\"%s\"", i ? ", " : "", fault_names[emu.kinds[i]]);
	sb_printf(&b, "], \"fault_seed\": %llu, \"fault_path\": ",
		  (unsigned long long)o->fault_seed);
	sb_json_str(&b, o->fault_path);
	sb_printf(&b, ", \"stats_per_file\": %s},\n", o->stats_per_file ? "true" : "false");

	const struct emu_totals *t = &emu.t;
	uint64_t nfaults = 0;
	for (int k = 0; k < FAULT_NKINDS; k++)
		nfaults += LD(t->faults[k]);
	sb_printf(&b, "  \"totals\": {\"reads\": %llu, \"bytes\": %llu, \"eof_reads\": %llu, "
		  "\"opens\": %llu, \"getattrs\": %llu, \"opendirs\": %llu, \"readlinks\": %llu, "
		  "\"errors_injected\": %llu, \"faults\": {\"eio\": %llu, \"enoent\": %llu, "
		  "\"short\": %llu}, \"io_errors\": %llu, \"busy_s\": %.6f, \"read_time_s\": %.6f, "
		  "\"queue_wait_s\": %.6f, \"inflight\": %u, \"max_inflight_seen\": %u",
		  LD(t->reads), LD(t->bytes), LD(t->eof_reads), LD(t->opens), LD(t->getattrs),
		  LD(t->opendirs), LD(t->readlinks), (unsigned long long)nfaults,
		  LD(t->faults[FAULT_EIO]), LD(t->faults[FAULT_ENOENT]), LD(t->faults[FAULT_SHORT]),
		  LD(t->io_errors), (double)busy / 1e9, (double)LD(t->read_ns) / 1e9,
		  (double)LD(t->queue_ns) / 1e9, inflight, inflight_max);

	if (!o->stats_per_file) {
		sb_printf(&b, "}\n}\n");
		*len = b.len;
		return b.p;
	}

	pthread_mutex_lock(&emu.files.lock);
	struct pf_file **list = xcalloc(emu.files.count, sizeof(*list));
	size_t n = 0;
	for (size_t i = 0; i < emu.files.nslots; i++)
		for (struct pf_file *f = emu.files.slots[i]; f; f = f->next)
			if (LD(f->opens) || LD(f->reads) || LD(f->faults))
				list[n++] = f;
	qsort(list, n, sizeof(*list), pf_cmp);
	sb_printf(&b, ", \"files\": %zu},\n  \"files\": [", n);
	for (size_t i = 0; i < n; i++) {
		struct pf_file *f = list[i];
		sb_printf(&b, "%s\n    {\"path\": ", i ? "," : "");
		sb_json_str(&b, f->path);
		sb_printf(&b, ", \"opens\": %llu, \"reads\": %llu, \"bytes\": %llu, "
			  "\"errors_injected\": %llu}",
			  LD(f->opens), LD(f->reads), LD(f->bytes), LD(f->faults));
	}
	pthread_mutex_unlock(&emu.files.lock);
	free(list);
	sb_printf(&b, "%s]\n}\n", n ? "\n  " : "");
	*len = b.len;
	return b.p;
}

/* ---- metadata operations ---------------------------------------------------------- */

static uint64_t meta_begin(void)
{
	thread_tune();
	return gate_enter(&emu.gate);
}

static void meta_end(uint64_t t0)
{
	if (emu.meta_lat_ns)
		sleep_until(t0 + emu.meta_lat_ns);
	gate_leave(&emu.gate);
}

static void ctl_stat(enum ctl_node which, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_atime = st->st_mtime = st->st_ctime = emu.start_wall;
	st->st_blksize = 4096;
	if (which == CTL_ROOT) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		/* size 0 like /proc: content is produced at open, direct_io reads it */
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
	}
}

static int emu_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	/* the kernel passes a handle for regular files only; be strict anyway */
	struct emu_fh *h = fi && fi->fh ? (struct emu_fh *)(uintptr_t)fi->fh : NULL;
	if (h && h->kind != FH_SRC && h->kind != FH_CTL)
		h = NULL;
	if (!h && !path)
		return -ESTALE;
	enum ctl_node which = h ? (h->kind == FH_CTL ? CTL_STATS : CTL_NONE) : ctl_path(path);
	if (which == CTL_UNKNOWN)
		return -ENOENT;
	if (which != CTL_NONE) {
		ctl_stat(which, st);
		return 0;
	}
	uint64_t t0 = meta_begin();
	int rc = 0;
	if (h ? fstat(h->fd, st) : fstatat(emu.src_fd, rel_path(path), st, AT_SYMLINK_NOFOLLOW))
		rc = -errno;
	atomic_fetch_add_explicit(&emu.t.getattrs, 1, memory_order_relaxed);
	meta_end(t0);
	if (rc == 0)
		st->st_blksize = (blksize_t)emu.o.blksize;
	return rc;
}

static int emu_readlink(const char *path, char *buf, size_t size)
{
	if (ctl_path(path) != CTL_NONE)
		return -EINVAL;
	if (size == 0)
		return -EINVAL;
	uint64_t t0 = meta_begin();
	ssize_t n = readlinkat(emu.src_fd, rel_path(path), buf, size - 1);
	int rc = n < 0 ? -errno : 0;
	atomic_fetch_add_explicit(&emu.t.readlinks, 1, memory_order_relaxed);
	meta_end(t0);
	if (rc == 0)
		buf[n] = '\0';
	return rc;
}

static int emu_statfs(const char *path, struct statvfs *sv)
{
	(void)path;
	return fstatvfs(emu.src_fd, sv) ? -errno : 0;
}

static int emu_open(const char *path, struct fuse_file_info *fi)
{
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))
		return -EROFS;
	enum ctl_node which = ctl_path(path);
	if (which == CTL_ROOT)
		return -EISDIR;
	if (which == CTL_UNKNOWN)
		return -ENOENT;

	struct emu_fh *h = xcalloc(1, sizeof(*h));
	h->fd = -1;
	fi->direct_io = 1;   /* every read reaches us; no page cache */
	fi->keep_cache = 0;
	fi->noflush = 1;     /* close(2) needs no FLUSH round trip: nothing to write back */

	if (which != CTL_NONE) {
		h->kind = FH_CTL;
		if (which == CTL_RESET) {
			counters_reset();
			h->data = xstrdup("ok\n");
			h->len = 3;
		} else {
			h->data = stats_render(&h->len);
		}
		fi->fh = (uint64_t)(uintptr_t)h;
		return 0;
	}

	h->kind = FH_SRC;
	const char *rel = rel_path(path);
	uint64_t t0 = meta_begin();
	int rc = 0;
	h->fd = openat(emu.src_fd, rel, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (h->fd < 0 || fstat(h->fd, &st) != 0)
		rc = -errno;
	meta_end(t0);
	if (rc != 0) {
		if (h->fd >= 0)
			close(h->fd);
		free(h);
		return rc;
	}
	atomic_init(&h->size, (uint64_t)st.st_size);
	h->fault_match = emu.o.fault_rate > 0 && strstr(rel, emu.o.fault_path) != NULL;
	atomic_fetch_add_explicit(&emu.t.opens, 1, memory_order_relaxed);
	if (emu.o.stats_per_file) {
		h->pf = pf_get(&emu.files, rel);
		atomic_fetch_add_explicit(&h->pf->opens, 1, memory_order_relaxed);
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	return 0;
}

static int emu_release(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	struct emu_fh *h = (struct emu_fh *)(uintptr_t)fi->fh;
	if (h->fd >= 0)
		close(h->fd);
	free(h->data);
	free(h);
	return 0;
}

/* ---- read ------------------------------------------------------------------------ */

static int ctl_read(struct emu_fh *h, char *buf, size_t size, off_t off)
{
	if ((uint64_t)off >= h->len)
		return 0;
	size_t n = MIN(size, h->len - (size_t)off);
	memcpy(buf, h->data + off, n);
	return (int)n;
}

/* Read up to size bytes; short only at end of file. Bytes or -errno. */
static ssize_t read_src(int fd, char *buf, size_t size, off_t off)
{
	size_t got = 0;
	while (got < size) {
		ssize_t r = pread(fd, buf + got, size - got, off + (off_t)got);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static int emu_read(const char *path, char *buf, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	(void)path; /* NULL: nullpath_ok */
	struct emu_fh *h = (struct emu_fh *)(uintptr_t)fi->fh;
	if (h->kind == FH_CTL)
		return ctl_read(h, buf, size, off);
	if (size == 0)
		return 0;

	/* At or past EOF: a PFS client knows the size, no server round trip. */
	if ((uint64_t)off >= atomic_load_explicit(&h->size, memory_order_relaxed)) {
		struct stat st;
		if (fstat(h->fd, &st) == 0)
			atomic_store_explicit(&h->size, (uint64_t)st.st_size, memory_order_relaxed);
		if ((uint64_t)off >= atomic_load_explicit(&h->size, memory_order_relaxed)) {
			atomic_fetch_add_explicit(&emu.t.eof_reads, 1, memory_order_relaxed);
			return 0;
		}
	}

	thread_tune();
	uint64_t arrival = now_ns();
	uint64_t t0 = gate_enter(&emu.gate);
	uint64_t eligible = t0 + emu.lat_ns;

	int fault = -1;
	if (h->fault_match) {
		uint64_t r = fault_draw();
		if ((double)(r >> 11) * 0x1.0p-53 < emu.o.fault_rate)
			fault = emu.kinds[(r & 0xff) % emu.nkinds];
	}

	ssize_t n = 0;
	if (fault == FAULT_EIO || fault == FAULT_ENOENT) {
		sleep_until(eligible);
		n = fault == FAULT_EIO ? -EIO : -ENOENT;
	} else {
		n = read_src(h->fd, buf, size, off);
		if (n < 0) {
			atomic_fetch_add_explicit(&emu.t.io_errors, 1, memory_order_relaxed);
			fault = -1;
			sleep_until(eligible);
		} else {
			if (fault == FAULT_SHORT) {
				if (n >= 2)
					n = 1 + (ssize_t)((fault_draw() >> 1) % (uint64_t)(n - 1));
				else
					fault = -1; /* nothing to shorten */
			}
			sleep_until(bucket_grant(&emu.bucket, (uint64_t)n, eligible));
		}
	}
	gate_leave(&emu.gate);

	struct emu_totals *t = &emu.t;
	atomic_fetch_add_explicit(&t->read_ns, now_ns() - arrival, memory_order_relaxed);
	atomic_fetch_add_explicit(&t->reads, 1, memory_order_relaxed);
	if (n > 0)
		atomic_fetch_add_explicit(&t->bytes, (uint64_t)n, memory_order_relaxed);
	if (fault >= 0)
		atomic_fetch_add_explicit(&t->faults[fault], 1, memory_order_relaxed);
	if (h->pf) {
		atomic_fetch_add_explicit(&h->pf->reads, 1, memory_order_relaxed);
		if (n > 0)
			atomic_fetch_add_explicit(&h->pf->bytes, (uint64_t)n, memory_order_relaxed);
		if (fault >= 0)
			atomic_fetch_add_explicit(&h->pf->faults, 1, memory_order_relaxed);
	}
	return (int)n;
}

/* ---- directories --------------------------------------------------------------------- */

static int emu_opendir(const char *path, struct fuse_file_info *fi)
{
	enum ctl_node which = ctl_path(path);
	if (which == CTL_UNKNOWN)
		return -ENOENT;
	if (which == CTL_STATS || which == CTL_RESET)
		return -ENOTDIR;
	struct emu_dh *d = xcalloc(1, sizeof(*d));
	d->kind = FH_DIR;
	if (which == CTL_ROOT) {
		fi->fh = (uint64_t)(uintptr_t)d;
		return 0;
	}
	const char *rel = rel_path(path);
	d->is_root = strcmp(rel, ".") == 0;
	uint64_t t0 = meta_begin();
	int rc = 0;
	int fd = openat(emu.src_fd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
	} else if (!(d->dp = fdopendir(fd))) {
		rc = -errno;
		close(fd);
	}
	atomic_fetch_add_explicit(&emu.t.opendirs, 1, memory_order_relaxed);
	meta_end(t0);
	if (rc != 0) {
		free(d);
		return rc;
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	return 0;
}

static int emu_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
		       struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	(void)path;
	(void)flags;
	struct emu_dh *d = (struct emu_dh *)(uintptr_t)fi->fh;
	const enum fuse_fill_dir_flags none = (enum fuse_fill_dir_flags)0;
	if (!d->dp) {
		/* the control directory: small, listed in one call */
		static const char *const names[] = { ".", "..", "stats", "reset" };
		for (size_t i = 0; i < ARRAY_SIZE(names); i++)
			if (fill(buf, names[i], NULL, 0, none))
				break;
		return 0;
	}
	if (off != d->off) {
		seekdir(d->dp, off);
		d->pending = NULL;
		d->off = off;
	}
	for (;;) {
		if (!d->pending) {
			errno = 0;
			d->pending = readdir(d->dp);
			if (!d->pending)
				return errno ? -errno : 0;
		}
		struct dirent *e = d->pending;
		off_t next = telldir(d->dp);
		/* the control directory shadows a source entry of the same name and
		 * is never listed, so scans of the dataset do not see it */
		if (!(d->is_root && strcmp(e->d_name, CTL_DIR) == 0)) {
			struct stat st = { .st_ino = e->d_ino, .st_mode = (mode_t)DTTOIF(e->d_type) };
			if (fill(buf, e->d_name, &st, next, none))
				return 0; /* buffer full: e stays pending */
		}
		d->pending = NULL;
		d->off = next;
	}
}

static int emu_releasedir(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	struct emu_dh *d = (struct emu_dh *)(uintptr_t)fi->fh;
	if (d->dp)
		closedir(d->dp);
	free(d);
	return 0;
}

static void *emu_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	/* must equal the max_read mount option, or libfuse refuses the session */
	conn->max_read = (unsigned)emu.o.max_read;
	/* reads the kernel splits and sends at once (io_uring, libaio with
	 * O_DIRECT) are "background" requests, capped by max_background */
	conn->max_background = (unsigned)MIN(emu.o.threads, 65535u);
	conn->congestion_threshold = conn->max_background * 3 / 4;
	/* lookups and readdir in one directory run in parallel, as on a PFS;
	 * without this the kernel serializes them on the directory's lock.
	 * libfuse < 3.16 drops the flag from its INIT reply (docs/pfsemu.md). */
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	cfg->direct_io = 1;
	cfg->kernel_cache = 0;
	cfg->auto_cache = 0;
	cfg->attr_timeout = emu.o.attr_timeout;
	cfg->entry_timeout = emu.o.attr_timeout;
	cfg->negative_timeout = emu.o.attr_timeout;
	cfg->nullpath_ok = 1; /* read/release need no path lookup in libfuse */
	cfg->use_ino = 0;
	log_debug("kernel connection: proto %u.%u, max_read %u, max_write %u, capable 0x%x, "
		  "want 0x%x", conn->proto_major, conn->proto_minor, conn->max_read,
		  conn->max_write, conn->capable, conn->want);
	return NULL;
}

static const struct fuse_operations emu_ops = {
	.init = emu_init,
	.getattr = emu_getattr,
	.readlink = emu_readlink,
	.open = emu_open,
	.read = emu_read,
	.release = emu_release,
	.statfs = emu_statfs,
	.opendir = emu_opendir,
	.readdir = emu_readdir,
	.releasedir = emu_releasedir,
};

/* ---- option parsing ---------------------------------------------------------------- */

static int parse_kinds(const char *s, unsigned *out)
{
	unsigned mask = 0;
	char *dup = xstrdup(s), *save = NULL;
	int rc = 0;
	for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int k = -1;
		for (int i = 0; i < FAULT_NKINDS; i++)
			if (strcasecmp(tok, fault_names[i]) == 0)
				k = i;
		if (k < 0) {
			rc = -EINVAL;
			break;
		}
		mask |= 1u << k;
	}
	free(dup);
	if (rc == 0 && mask == 0)
		rc = -EINVAL;
	if (rc == 0)
		*out = mask;
	return rc;
}

/* Store value text s for option d into o; 0 or -EINVAL/-ERANGE. */
static int opt_set(struct emu_opts *o, const struct opt_def *d, const char *s)
{
	void *field = (char *)o + d->off;
	uint64_t u = 0;
	double v = 0;
	int rc = 0;
	switch (d->type) {
	case OT_FLAG:
		*(bool *)field = true;
		return 0;
	case OT_STR:
		*(const char **)field = s;
		return 0;
	case OT_KINDS:
		return parse_kinds(s, (unsigned *)field);
	case OT_LEVEL: {
		enum log_level lvl;
		rc = log_parse_level(s, &lvl);
		if (rc == 0)
			*(int *)field = (int)lvl;
		return rc;
	}
	case OT_SEED:
		if (strcmp(s, "random") == 0) {
			*(uint64_t *)field = splitmix64(now_ns() ^ ((uint64_t)getpid() << 32));
			return 0;
		}
		rc = parse_u64(s, &u);
		if (rc == 0)
			*(uint64_t *)field = u;
		return rc;
	case OT_RATE: {
		char tmp[64];
		size_t n = strlen(s);
		if (n >= sizeof(tmp))
			return -EINVAL;
		memcpy(tmp, s, n + 1);
		if (n > 2 && strcasecmp(tmp + n - 2, "/s") == 0)
			tmp[n - 2] = '\0';
		rc = parse_size(tmp, &u);
		v = (double)u;
		break;
	}
	case OT_SIZE:
		rc = parse_size(s, &u);
		v = (double)u;
		break;
	case OT_COUNT:
		rc = parse_u64(s, &u);
		v = (double)u;
		break;
	case OT_MS:
	case OT_SEC:
	case OT_PROB:
		rc = parse_double(s, &v);
		break;
	}
	if (rc != 0)
		return rc;
	if (v < d->min || (d->max > 0 && v > d->max) || v != v)
		return -ERANGE;
	if (d->type == OT_MS || d->type == OT_SEC || d->type == OT_PROB)
		*(double *)field = v;
	else
		*(uint64_t *)field = u;
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: " PROG " SRC_DIR MOUNTPOINT [options]\n"
		"\n"
		"Mount SRC_DIR read-only at MOUNTPOINT (an empty directory) through FUSE, with\n"
		"the bandwidth, latency, concurrency and faults of a shared parallel file system.\n"
		"Counters: MOUNTPOINT/" CTL_DIR "/stats (JSON); opening MOUNTPOINT/" CTL_DIR
		"/reset zeroes them.\n"
		"Unmount with `fusermount3 -u MOUNTPOINT`, SIGTERM or SIGINT (writes --stats).\n"
		"\n"
		"Sizes take units (4k, 1MiB, 200MB); rates are sizes per second (200MB/s).\n"
		"\n");
	for (size_t i = 0; i < ARRAY_SIZE(opt_table); i++) {
		const struct opt_def *d = &opt_table[i];
		char lhs[64];
		char sn[8] = "    ";
		if (d->short_name)
			snprintf(sn, sizeof(sn), "-%c, ", d->short_name);
		snprintf(lhs, sizeof(lhs), "%s--%s%s%s", sn, d->name, d->arg ? " " : "",
			 d->arg ? d->arg : "");
		fprintf(out, "  %-28s %s", lhs, d->help);
		if (d->def && *d->def && d->type != OT_FLAG)
			fprintf(out, " [%s]", d->def);
		fputc('\n', out);
	}
	fprintf(out, "  %-28s %s\n", "-h, --help", "this text");
}

/* Parse argv into o, src and mnt. 0 = run, 1 = exit 0 (help), -1 = usage error
 * (message printed). */
static int parse_args(int argc, char **argv, struct emu_opts *o, const char **src,
		      const char **mnt)
{
	enum { N = ARRAY_SIZE(opt_table) };
	struct option lopts[N + 2];
	char shorts[2 * N + 4];
	size_t ns = 0;
	shorts[ns++] = ':'; /* getopt reports a missing value as ':' */
	for (size_t i = 0; i < N; i++) {
		const struct opt_def *d = &opt_table[i];
		lopts[i] = (struct option){ d->name, d->type == OT_FLAG ? no_argument
							: required_argument, NULL, 256 + (int)i };
		if (d->short_name) {
			shorts[ns++] = (char)d->short_name;
			if (d->type != OT_FLAG)
				shorts[ns++] = ':';
		}
		if (d->def && opt_set(o, d, d->def) != 0) {
			fprintf(stderr, PROG ": internal error: bad default for --%s\n", d->name);
			return -1;
		}
	}
	shorts[ns++] = 'h';
	shorts[ns] = '\0';
	lopts[N] = (struct option){ "help", no_argument, NULL, 'h' };
	lopts[N + 1] = (struct option){ 0 };

	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, shorts, lopts, NULL)) != -1) {
		const struct opt_def *d = NULL;
		if (c == 'h') {
			usage(stdout);
			return 1;
		}
		if (c == '?' || c == ':') {
			const char *what = argv[optind - 1];
			if (c == ':')
				fprintf(stderr, PROG ": option %s needs a value\n", what);
			else
				fprintf(stderr, PROG ": unknown option %s\n", what);
			fprintf(stderr, "Try '" PROG " --help'.\n");
			return -1;
		}
		if (c >= 256 && c < 256 + (int)N) {
			d = &opt_table[c - 256];
		} else {
			for (size_t i = 0; i < N; i++)
				if (opt_table[i].short_name == c)
					d = &opt_table[i];
		}
		if (!d)
			return -1;
		int rc = opt_set(o, d, optarg);
		if (rc != 0) {
			fprintf(stderr, PROG ": bad value '%s' for --%s: %s", optarg, d->name,
				rc == -ERANGE ? "out of range" : "malformed");
			if (d->max > 0)
				fprintf(stderr, " (%.15g..%.15g)", d->min, d->max);
			if (d->type == OT_KINDS)
				fprintf(stderr, " (a comma list of eio, enoent, short)");
			if (d->type == OT_RATE)
				fprintf(stderr, " (e.g. 200MB/s, 1GiB/s, 0 = unlimited)");
			fputc('\n', stderr);
			return -1;
		}
	}
	if (argc - optind != 2) {
		fprintf(stderr, PROG ": expected SRC_DIR and MOUNTPOINT, got %d argument%s\n",
			argc - optind, argc - optind == 1 ? "" : "s");
		fprintf(stderr, "Try '" PROG " --help'.\n");
		return -1;
	}
	*src = argv[optind];
	*mnt = argv[optind + 1];
	return 0;
}

/* ---- start-up checks ------------------------------------------------------------------ */

static char *abs_path(const char *p)
{
	if (p[0] == '/')
		return xstrdup(p);
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd)))
		return xstrdup(p);
	return xasprintf("%s/%s", cwd, p);
}

static int check_fuse_dev(void)
{
	int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		log_error("cannot open /dev/fuse: %s (is the fuse module loaded and the device "
			  "available in this container? libfuse3/fuse3 installed?)", strerror(errno));
		return -1;
	}
	close(fd);
	return 0;
}

/* Opens emu.src_fd and fills emu.src (canonical). */
static int check_source(const char *src)
{
	struct stat st;
	if (stat(src, &st) != 0) {
		log_error("source directory %s: %s", src, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		log_error("source %s is not a directory", src);
		return -1;
	}
	emu.src_fd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (emu.src_fd < 0) {
		log_error("cannot open source directory %s: %s", src, strerror(errno));
		return -1;
	}
	emu.src = realpath(src, NULL);
	if (!emu.src) {
		log_error("source directory %s: %s", src, strerror(errno));
		return -1;
	}
	return 0;
}

/* The mount point must be an empty directory outside the source tree. */
static int check_mountpoint(const char *mnt)
{
	struct stat st;
	if (stat(mnt, &st) != 0) {
		if (errno == ENOTCONN)
			log_error("mountpoint %s is a dead FUSE mount (its emulator exited): run "
				  "`fusermount3 -u %s` first", mnt, mnt);
		else
			log_error("mountpoint %s: %s", mnt, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		log_error("mountpoint %s is not a directory", mnt);
		return -1;
	}
	DIR *dp = opendir(mnt);
	if (!dp) {
		log_error("mountpoint %s: %s", mnt, strerror(errno));
		return -1;
	}
	struct dirent *e;
	const char *found = NULL;
	while ((e = readdir(dp)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
			found = e->d_name;
			break;
		}
	if (found)
		log_error("mountpoint %s is not empty (it holds '%s'%s)", mnt, found,
			  strcmp(found, CTL_DIR) == 0 ? ": an emulator is already mounted there" : "");
	closedir(dp);
	if (found)
		return -1;
	emu.mnt = realpath(mnt, NULL);
	if (!emu.mnt) {
		log_error("mountpoint %s: %s", mnt, strerror(errno));
		return -1;
	}
	size_t n = strlen(emu.src);
	if (strcmp(emu.mnt, emu.src) == 0 ||
	    (strncmp(emu.mnt, emu.src, n) == 0 && (emu.mnt[n] == '/' || n == 1))) {
		log_error("mountpoint %s lies inside the source %s: the emulator would read "
			  "through itself", emu.mnt, emu.src);
		return -1;
	}
	return 0;
}

static int check_stats_path(void)
{
	if (!emu.o.stats_path)
		return 0;
	char *abs = abs_path(emu.o.stats_path);
	emu.stats_path = abs; /* the daemon changes to / */
	char *slash = strrchr(abs, '/');
	char *dir = xasprintf("%.*s", (int)(slash - abs), abs);
	int rc = 0;
	if (access(*dir ? dir : "/", W_OK) != 0) {
		log_error("--stats %s: directory %s is not writable: %s", emu.o.stats_path,
			  *dir ? dir : "/", strerror(errno));
		rc = -1;
	}
	free(dir);
	return rc;
}

static void print_limits(void)
{
	const struct emu_opts *o = &emu.o;
	char b1[32], b2[32], b3[32], b4[32], bw[64], inflight[32] = "unlimited";
	if (o->max_inflight)
		snprintf(inflight, sizeof(inflight), "%llu", (unsigned long long)o->max_inflight);
	if (o->bandwidth)
		snprintf(bw, sizeof(bw), "%.2f MB/s (%s/s)", (double)o->bandwidth / 1e6,
			 fmt_size(b1, sizeof(b1), o->bandwidth));
	else
		snprintf(bw, sizeof(bw), "unlimited");
	if (o->foreground)
		log_info("%s -> %s, pid %d, %llu threads", emu.src, emu.mnt, (int)getpid(),
			 (unsigned long long)o->threads);
	else
		log_info("%s -> %s, %llu threads", emu.src, emu.mnt,
			 (unsigned long long)o->threads);
	log_info("limits: bandwidth %s, burst %s; latency %.3f ms per read, %.3f ms per "
		 "metadata op; max-inflight %s%s", bw, fmt_size(b2, sizeof(b2), o->burst),
		 o->latency_ms, o->meta_latency_ms,
		 inflight,
		 o->max_inflight > o->threads ? " (capped by --threads)" : "");
	log_info("kernel: direct_io, max_read %s, st_blksize %s, attr/entry timeout %.3g s",
		 fmt_size(b3, sizeof(b3), o->max_read), fmt_size(b4, sizeof(b4), o->blksize),
		 o->attr_timeout);
	if (o->fault_rate > 0) {
		char kinds[64] = "";
		for (unsigned i = 0; i < emu.nkinds; i++)
			snprintf(kinds + strlen(kinds), sizeof(kinds) - strlen(kinds), "%s%s",
				 i ? "," : "", fault_names[emu.kinds[i]]);
		log_info("faults: rate %g per read, kinds %s, files matching \"%s\", seed %llu",
			 o->fault_rate, kinds, o->fault_path, (unsigned long long)o->fault_seed);
	} else {
		log_info("faults: off");
	}
	log_info("counters: %s/" CTL_DIR "/stats%s%s", emu.mnt,
		 emu.stats_path ? ", final JSON to " : "", emu.stats_path ? emu.stats_path : "");
}

/* ---- signals ------------------------------------------------------------------------ */

static const int stop_signals[] = { SIGINT, SIGTERM, SIGHUP };
static struct sigaction prev_sa[ARRAY_SIZE(stop_signals)];
static bool chained[ARRAY_SIZE(stop_signals)];

/* Wakes every throttled request, then runs libfuse's handler, which ends the
 * loop. Async-signal-safe: an atomic store and write(2). */
static void on_stop_signal(int sig)
{
	int saved = errno;
	atomic_store(&emu.stopping, true);
	uint64_t one = 1;
	ssize_t w UNUSED = write(emu.stop_fd, &one, sizeof(one));
	errno = saved;
	for (size_t i = 0; i < ARRAY_SIZE(stop_signals); i++) {
		if (stop_signals[i] != sig)
			continue;
		if (prev_sa[i].sa_flags & SA_SIGINFO)
			prev_sa[i].sa_sigaction(sig, NULL, NULL);
		else
			prev_sa[i].sa_handler(sig);
	}
}

/* Put on_stop_signal in front of the handlers libfuse installed. A signal
 * libfuse left alone (ignored, e.g. SIGINT of a background job) stays so. */
static void chain_signals(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(stop_signals); i++) {
		struct sigaction cur;
		if (sigaction(stop_signals[i], NULL, &cur) != 0)
			continue;
		void (*h)(int) = cur.sa_handler;
		if (!(cur.sa_flags & SA_SIGINFO) && (h == SIG_DFL || h == SIG_IGN))
			continue;
		prev_sa[i] = cur;
		struct sigaction sa = { .sa_handler = on_stop_signal };
		sigfillset(&sa.sa_mask);
		if (sigaction(stop_signals[i], &sa, NULL) == 0)
			chained[i] = true;
	}
}

static void unchain_signals(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(stop_signals); i++)
		if (chained[i])
			sigaction(stop_signals[i], &prev_sa[i], NULL);
}

/* ---- main ------------------------------------------------------------------------------ */

/* Detach from the terminal once mounted. The parent prints the daemon's pid
 * and exits 0 when the child is ready, 1 if it died first. stderr of the
 * daemon goes to log_fd, or /dev/null when log_fd < 0. Returns 0 in the
 * daemon, -errno on failure (in the original process). */
static int daemonize(int log_fd)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) != 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int err = errno;
		close(pfd[0]);
		close(pfd[1]);
		return -err;
	}
	if (pid > 0) {
		close(pfd[1]);
		char c = 1;
		ssize_t n;
		while ((n = read(pfd[0], &c, 1)) < 0 && errno == EINTR) {
		}
		if (n == 1 && c == 0) {
			log_info("running in the background as pid %d", (int)pid);
			_exit(0);
		}
		log_error("the daemon exited during start-up");
		_exit(1);
	}
	close(pfd[0]);
	setsid();
	if (chdir("/") != 0)
		log_warn("chdir /: %s", strerror(errno));
	int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (nul >= 0) {
		dup2(nul, STDIN_FILENO);
		dup2(nul, STDOUT_FILENO);
		dup2(log_fd >= 0 ? log_fd : nul, STDERR_FILENO);
		close(nul);
	}
	char ok = 0;
	ssize_t w UNUSED = write(pfd[1], &ok, 1);
	close(pfd[1]);
	return 0;
}

static int write_final_stats(void)
{
	size_t len = 0;
	char *doc = stats_render(&len);
	int rc = 0;
	if (emu.stats_path) {
		rc = write_file_atomic(emu.stats_path, doc, len);
		if (rc != 0)
			log_error("cannot write stats to %s: %s", emu.stats_path, strerror(-rc));
	}
	free(doc);
	pthread_mutex_lock(&emu.gate.lock);
	uint64_t busy = emu.gate.busy_ns;
	pthread_mutex_unlock(&emu.gate.lock);
	char b[32];
	log_info("unmounted %s: %llu reads, %s, %llu opens, %llu faults injected, busy %.3f s",
		 emu.mnt, LD(emu.t.reads), fmt_size(b, sizeof(b), LD(emu.t.bytes)),
		 LD(emu.t.opens),
		 LD(emu.t.faults[0]) + LD(emu.t.faults[1]) + LD(emu.t.faults[2]),
		 (double)busy / 1e9);
	return rc;
}

int main(int argc, char **argv)
{
	log_set_prog(PROG);
	struct emu_opts *o = &emu.o;
	const char *src = NULL, *mnt = NULL;
	int rc = parse_args(argc, argv, o, &src, &mnt);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	log_set_level((enum log_level)o->log_level);
	if (o->debug)
		o->foreground = true;
	if (o->blksize == 0)
		o->blksize = o->max_read;
	if (o->blksize < 512 || (o->blksize & (o->blksize - 1)) != 0) {
		log_error("--blksize must be a power of two >= 512");
		return 2;
	}
	for (int k = 0; k < FAULT_NKINDS; k++)
		if (o->fault_kinds & (1u << k))
			emu.kinds[emu.nkinds++] = (enum fault_kind)k;
	emu.lat_ns = ms_to_ns(o->latency_ms);
	emu.meta_lat_ns = ms_to_ns(o->meta_latency_ms);
	emu.gate.limit = o->max_inflight;
	emu.bucket.rate = o->bandwidth;
	if (o->bandwidth)
		emu.bucket.burst_ns = (uint64_t)((unsigned __int128)o->burst * 1000000000u /
						 o->bandwidth);

	int log_fd = -1;
	struct fuse *f = NULL;
	struct fuse_loop_config *lc = NULL;
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	rc = 1;
	if (check_fuse_dev() || check_source(src) || check_mountpoint(mnt) || check_stats_path())
		goto out;
	if (o->log_file && !o->foreground) {
		log_fd = open(o->log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (log_fd < 0) {
			log_error("--log-file %s: %s", o->log_file, strerror(errno));
			goto out;
		}
	}
	emu.stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (emu.stop_fd < 0) {
		log_error("eventfd: %s", strerror(errno));
		goto out;
	}
	emu.start_ns = emu.reset_ns = now_ns();
	emu.start_wall = time(NULL);

	/* the options are a comma list: keep commas out of the fsname */
	char *fsname = xasprintf("pfsemu:%s", emu.src);
	for (char *p = fsname; *p; p++)
		if (*p == ',')
			*p = '_';
	char *mopts = xasprintf("ro,default_permissions,fsname=%s,subtype=pfsemu,max_read=%llu%s",
				fsname, (unsigned long long)o->max_read,
				o->allow_other ? ",allow_other" : "");
	free(fsname);
	if (fuse_opt_add_arg(&args, argv[0]) || fuse_opt_add_arg(&args, "-o") ||
	    fuse_opt_add_arg(&args, mopts) || (o->debug && fuse_opt_add_arg(&args, "-d"))) {
		free(mopts);
		log_error("out of memory");
		goto out;
	}
	free(mopts);
	f = fuse_new(&args, &emu_ops, sizeof(emu_ops), NULL);
	if (!f) {
		log_error("fuse_new failed (see the libfuse message above)");
		goto out;
	}
	if (fuse_mount(f, emu.mnt) != 0) {
		log_error("cannot mount on %s (see the libfuse message above)", emu.mnt);
		fuse_destroy(f);
		f = NULL;
		goto out;
	}
	print_limits();
	if (!o->foreground && (rc = daemonize(log_fd)) != 0) {
		log_error("cannot daemonize: %s", strerror(-rc));
		rc = 1;
		goto unmount;
	}
	rc = 1;

	struct fuse_session *se = fuse_get_session(f);
	if (fuse_set_signal_handlers(se) != 0) {
		log_error("cannot install signal handlers");
		goto unmount;
	}
	chain_signals();
	lc = fuse_loop_cfg_create();
	if (!lc) {
		log_error("out of memory");
		goto signals;
	}
	fuse_loop_cfg_set_max_threads(lc, (unsigned)o->threads);
	fuse_loop_cfg_set_idle_threads(lc, (unsigned)o->threads);
	int lrc = fuse_loop_mt(f, lc);
	atomic_store(&emu.stopping, true);
	if (lrc < 0)
		log_error("FUSE loop failed: %s", strerror(-lrc));
	rc = write_final_stats() != 0 || lrc < 0 ? 1 : 0;
signals:
	unchain_signals();
	fuse_remove_signal_handlers(se);
unmount:
	fuse_unmount(f);
	fuse_destroy(f);
out:
	if (lc)
		fuse_loop_cfg_destroy(lc);
	fuse_opt_free_args(&args);
	pf_free_all(&emu.files);
	if (emu.stop_fd >= 0)
		close(emu.stop_fd);
	if (emu.src_fd >= 0)
		close(emu.src_fd);
	if (log_fd >= 0)
		close(log_fd);
	free(emu.stats_path);
	free(emu.src);
	free(emu.mnt);
	return rc;
}
