/* seer-pfsemu: a read-only pass-through FUSE file system that models a shared
 * parallel file system (PFS) in front of a local directory, as one client
 * node of it sees it.
 *
 * Every read reaches this process (direct_io, no page cache) and pays the
 * modelled cost before it is answered: the timing model (tools/pfsemu/model.c)
 * turns it into read RPCs of at most --rpc-size bytes (plus readahead RPCs
 * for sequential readers, --readahead), each holding a slot of the mount-wide
 * queue (--max-inflight) and of its file's OST queue (--ost-inflight) from its
 * start to its end, paying --latency-ms and a share of the --bandwidth token
 * bucket; the worker thread reads the bytes from SRC and sleeps until the
 * model's completion time. Metadata operations (getattr/lookup, open,
 * opendir, readlink) hold the mount queue and the metadata queue
 * (--meta-inflight) for --meta-latency-ms. --preset lustre sets the numbers of
 * a Lustre client. Counters are exposed while mounted as JSON
 * (tools/pfsemu/stats.c, libjansson; also the per-file table) in
 * MOUNTPOINT/.pfsemu/stats; opening MOUNTPOINT/.pfsemu/reset zeroes them.
 * Options: tools/pfsemu/opts.c; start-up checks and daemonizing:
 * tools/pfsemu/startup.c. This file: the FUSE callbacks, signals and main.
 * docs/pfsemu.md describes the model, the preset's sources, the counters and
 * the limits.
 *
 * Threading: libfuse's multithreaded loop runs the callbacks on up to
 * --threads worker threads. Shared state: the timing model (its mutex; an
 * open file's readahead state has its own, taken first), the per-file table
 * (mutex, taken at open and when the stats are rendered) and relaxed atomic
 * counters. Waits sleep in ppoll() on an eventfd that the SIGINT/SIGTERM/
 * SIGHUP handler signals, so a shutdown never waits for a throttled backlog.
 * Failure: start-up problems are reported with what to do and exit 1 (bad
 * options: 2); a real I/O error of the source is returned to the client and
 * counted; allocation failures abort. */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312

#include <fuse.h>
#include <fuse_lowlevel.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
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

#include "../src/util/util.h"
#include "pfsemu/emu.h"

#define CTL_PATH "/" CTL_DIR

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
	struct pfsm_file mf;    /* FH_SRC: OST and readahead state */
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

struct emu emu = {
	.src_fd = -1,
	.stop_fd = -1,
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

/* Next draw of the fault generator: the sequence is a function of the seed
 * and of the order in which reads of matching files draw. */
static uint64_t fault_draw(void)
{
	uint64_t i = atomic_fetch_add_explicit(&emu.fault_ctr, 1, memory_order_relaxed);
	return emu_splitmix64(emu.o.fault_seed + i * 0x9e3779b97f4a7c15ull);
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
/* ---- counters: reset ------------------------------------------------------------ */

static void counters_reset(void)
{
	struct emu_totals *t = &emu.t;
	_Atomic uint64_t *all[] = { &t->reads, &t->bytes, &t->eof_reads, &t->opens, &t->getattrs,
				    &t->opendirs, &t->readlinks, &t->faults[0], &t->faults[1],
				    &t->faults[2], &t->io_errors, &t->read_ns, &t->writes,
				    &t->write_bytes, &t->write_ns, &t->write_eio, &t->write_enospc,
				    &t->fsyncs, &t->renames, &t->unlinks, &t->creates };
	_Static_assert(FAULT_NKINDS == 3, "list every fault counter above");
	for (size_t i = 0; i < ARRAY_SIZE(all); i++)
		atomic_store_explicit(all[i], 0, memory_order_relaxed);
	uint64_t now = now_ns();
	pfsm_reset(&emu.model, now);
	atomic_store_explicit(&emu.reset_ns, now, memory_order_relaxed);

	pthread_mutex_lock(&emu.files.lock);
	for (size_t i = 0; i < emu.files.nslots; i++) {
		for (struct pf_file *f = emu.files.slots[i]; f; f = f->next) {
			_Atomic uint64_t *pf[] = { &f->opens, &f->reads, &f->bytes, &f->faults,
						   &f->rpcs, &f->rpc_bytes };
			for (size_t k = 0; k < ARRAY_SIZE(pf); k++)
				atomic_store_explicit(pf[k], 0, memory_order_relaxed);
		}
	}
	pthread_mutex_unlock(&emu.files.lock);
}

#define LD(x) ((unsigned long long)atomic_load_explicit(&(x), memory_order_relaxed))

/* ---- metadata operations ---------------------------------------------------------- */

/* A metadata operation arriving now: when the model completes it. */
static uint64_t meta_begin(void)
{
	thread_tune();
	return pfsm_meta(&emu.model, now_ns());
}

static void meta_end(uint64_t done)
{
	sleep_until(done);
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
	bool writes = (fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC);
	if (writes && !emu.o.writable)
		return -EROFS;
	enum ctl_node which = ctl_path(path);
	if (writes && which != CTL_NONE)
		return -EACCES;
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
	h->fd = openat(emu.src_fd, rel, (writes ? fi->flags & (O_ACCMODE | O_TRUNC | O_APPEND)
					   : O_RDONLY) | O_CLOEXEC);
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
	pfsm_file_init(&h->mf, pfsm_ost_of(&emu.model, rel));
	h->fault_match = (emu.o.fault_rate > 0 || emu.o.write_fault_rate > 0) &&
			 strstr(rel, emu.o.fault_path) != NULL;
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
	if (h->kind == FH_SRC)
		pfsm_file_close(&emu.model, &h->mf);
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

/* The fault (enum fault_kind) drawn for a read of a matching file, or -1;
 * *short_len gets the length of a short read of n bytes. */
static int fault_pick(const struct emu_fh *h, uint64_t n, uint64_t *short_len)
{
	if (!h->fault_match)
		return -1;
	uint64_t r = fault_draw();
	if ((double)(r >> 11) * 0x1.0p-53 >= emu.o.fault_rate)
		return -1;
	int fault = emu.kinds[(r & 0xff) % emu.nkinds];
	if (fault == FAULT_SHORT) {
		if (n < 2)
			return -1; /* nothing to shorten */
		*short_len = 1 + (fault_draw() >> 1) % (n - 1);
	}
	return fault;
}

static void count_read(struct emu_fh *h, uint64_t arrival, ssize_t n, int fault,
		       const struct pfsm_read *r)
{
	struct emu_totals *t = &emu.t;
	atomic_fetch_add_explicit(&t->read_ns, now_ns() - arrival, memory_order_relaxed);
	atomic_fetch_add_explicit(&t->reads, 1, memory_order_relaxed);
	if (n > 0)
		atomic_fetch_add_explicit(&t->bytes, (uint64_t)n, memory_order_relaxed);
	if (fault >= 0)
		atomic_fetch_add_explicit(&t->faults[fault], 1, memory_order_relaxed);
	if (h->pf) {
		atomic_fetch_add_explicit(&h->pf->reads, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&h->pf->rpcs, r->rpcs, memory_order_relaxed);
		atomic_fetch_add_explicit(&h->pf->rpc_bytes, r->rpc_bytes, memory_order_relaxed);
		if (n > 0)
			atomic_fetch_add_explicit(&h->pf->bytes, (uint64_t)n, memory_order_relaxed);
		if (fault >= 0)
			atomic_fetch_add_explicit(&h->pf->faults, 1, memory_order_relaxed);
	}
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
	uint64_t fsize = atomic_load_explicit(&h->size, memory_order_relaxed);
	if ((uint64_t)off >= fsize) {
		struct stat st;
		if (fstat(h->fd, &st) == 0)
			atomic_store_explicit(&h->size, (uint64_t)st.st_size, memory_order_relaxed);
		fsize = atomic_load_explicit(&h->size, memory_order_relaxed);
		if ((uint64_t)off >= fsize) {
			atomic_fetch_add_explicit(&emu.t.eof_reads, 1, memory_order_relaxed);
			return 0;
		}
	}

	thread_tune();
	uint64_t arrival = now_ns();
	uint64_t want = MIN((uint64_t)size, fsize - (uint64_t)off), short_len = 0;
	int fault = fault_pick(h, want, &short_len);
	struct pfsm_read r;
	ssize_t n;
	if (fault == FAULT_EIO || fault == FAULT_ENOENT) {
		/* fails after the latency: nothing transferred or charged */
		pfsm_rpc(&emu.model, &h->mf, arrival, 0, &r);
		n = fault == FAULT_EIO ? -EIO : -ENOENT;
	} else if (fault == FAULT_SHORT) {
		pfsm_rpc(&emu.model, &h->mf, arrival, short_len, &r);
		n = read_src(h->fd, buf, short_len, off);
	} else {
		pfsm_read(&emu.model, &h->mf, arrival, (uint64_t)off, want, fsize, &r);
		n = read_src(h->fd, buf, want, off);
	}
	if (n < 0 && fault < 0)
		atomic_fetch_add_explicit(&emu.t.io_errors, 1, memory_order_relaxed);
	sleep_until(r.done);
	count_read(h, arrival, n, fault, &r);
	return (int)n;
}

/* ---- write mode (--writable and the --write-* options) ------------------------------ */

/* When a write of n bytes arriving at `now` completes: the writes share
 * --write-bandwidth in arrival order (a virtual schedule, as the read
 * bucket), each pays --write-latency-ms. */
static uint64_t write_done(uint64_t now, uint64_t n)
{
	uint64_t lat = (uint64_t)(emu.o.write_latency_ms * 1e6);
	uint64_t shared = emu.o.write_shares && n ? pfsm_charge(&emu.model, now, n) : now;
	if (!emu.o.write_bandwidth)
		return MAX(shared, now + lat);
	pthread_mutex_lock(&emu.wlock);
	uint64_t start = MAX(now, emu.wtat);
	emu.wtat = start + (uint64_t)((double)n * 1e9 / (double)emu.o.write_bandwidth);
	uint64_t end = emu.wtat;
	pthread_mutex_unlock(&emu.wlock);
	return MAX(end + lat, shared);
}

static int emu_write(const char *path, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	(void)path;
	struct emu_fh *h = (struct emu_fh *)(uintptr_t)fi->fh;
	if (h->kind != FH_SRC)
		return -EACCES;
	thread_tune();
	uint64_t arrival = now_ns();
	struct emu_totals *t = &emu.t;
	if (emu.o.write_capacity) {
		uint64_t was = atomic_fetch_add_explicit(&emu.written, size, memory_order_relaxed);
		if (was + size > emu.o.write_capacity) {
			atomic_fetch_sub_explicit(&emu.written, size, memory_order_relaxed);
			atomic_fetch_add_explicit(&t->write_enospc, 1, memory_order_relaxed);
			sleep_until(write_done(arrival, 0));
			return -ENOSPC;
		}
	}
	if (emu.o.write_fault_rate > 0 && h->fault_match &&
	    (double)(fault_draw() >> 11) * 0x1.0p-53 < emu.o.write_fault_rate) {
		if (emu.o.write_capacity)
			atomic_fetch_sub_explicit(&emu.written, size, memory_order_relaxed);
		atomic_fetch_add_explicit(&t->write_eio, 1, memory_order_relaxed);
		sleep_until(write_done(arrival, 0));
		return -EIO;
	}
	size_t done = 0;
	while (done < size) {
		ssize_t w = pwrite(h->fd, buf + done, size - done, off + (off_t)done);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			atomic_fetch_add_explicit(&t->io_errors, 1, memory_order_relaxed);
			return -errno;
		}
		done += (size_t)w;
	}
	sleep_until(write_done(arrival, size));
	atomic_fetch_add_explicit(&t->writes, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&t->write_bytes, size, memory_order_relaxed);
	atomic_fetch_add_explicit(&t->write_ns, now_ns() - arrival, memory_order_relaxed);
	return (int)size;
}

static int emu_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	if (ctl_path(path) != CTL_NONE)
		return -EACCES;
	const char *rel = rel_path(path);
	struct emu_fh *h = xcalloc(1, sizeof(*h));
	uint64_t t0 = meta_begin();
	h->fd = openat(emu.src_fd, rel, (fi->flags & (O_ACCMODE | O_TRUNC | O_APPEND | O_EXCL)) |
		       O_CREAT | O_CLOEXEC, mode);
	int rc = h->fd < 0 ? -errno : 0;
	meta_end(t0);
	if (rc != 0) {
		free(h);
		return rc;
	}
	h->kind = FH_SRC;
	pfsm_file_init(&h->mf, pfsm_ost_of(&emu.model, rel));
	h->fault_match = strstr(rel, emu.o.fault_path) != NULL;
	fi->direct_io = 1;
	fi->noflush = 1;
	atomic_fetch_add_explicit(&emu.t.creates, 1, memory_order_relaxed);
	fi->fh = (uint64_t)(uintptr_t)h;
	return 0;
}

static int emu_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
	(void)path;
	struct emu_fh *h = (struct emu_fh *)(uintptr_t)fi->fh;
	if (h->kind != FH_SRC)
		return 0;
	uint64_t t0 = meta_begin();
	int rc = (datasync ? fdatasync(h->fd) : fsync(h->fd)) ? -errno : 0;
	atomic_fetch_add_explicit(&emu.t.fsyncs, 1, memory_order_relaxed);
	meta_end(t0);
	return rc;
}

/* A metadata call on the source: the model's metadata cost, then `rc`. */
static int meta_op(int rc, _Atomic uint64_t *ctr, uint64_t t0)
{
	if (ctr)
		atomic_fetch_add_explicit(ctr, 1, memory_order_relaxed);
	meta_end(t0);
	return rc;
}

static int emu_rename(const char *from, const char *to, unsigned flags)
{
	if (ctl_path(from) != CTL_NONE || ctl_path(to) != CTL_NONE)
		return -EACCES;
	uint64_t t0 = meta_begin();
	int rc = renameat2(emu.src_fd, rel_path(from), emu.src_fd, rel_path(to), flags) ? -errno : 0;
	return meta_op(rc, &emu.t.renames, t0);
}

static int emu_unlink(const char *path)
{
	if (ctl_path(path) != CTL_NONE)
		return -EACCES;
	uint64_t t0 = meta_begin();
	int rc = unlinkat(emu.src_fd, rel_path(path), 0) ? -errno : 0;
	return meta_op(rc, &emu.t.unlinks, t0);
}

static int emu_mkdir(const char *path, mode_t mode)
{
	if (ctl_path(path) != CTL_NONE)
		return -EACCES;
	uint64_t t0 = meta_begin();
	int rc = mkdirat(emu.src_fd, rel_path(path), mode) ? -errno : 0;
	return meta_op(rc, NULL, t0);
}

static int emu_rmdir(const char *path)
{
	if (ctl_path(path) != CTL_NONE)
		return -EACCES;
	uint64_t t0 = meta_begin();
	int rc = unlinkat(emu.src_fd, rel_path(path), AT_REMOVEDIR) ? -errno : 0;
	return meta_op(rc, NULL, t0);
}

static int emu_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
	struct emu_fh *h = fi ? (struct emu_fh *)(uintptr_t)fi->fh : NULL;
	if (!h && ctl_path(path) != CTL_NONE)
		return -EACCES;
	uint64_t t0 = meta_begin();
	int rc;
	if (h && h->kind == FH_SRC) {
		rc = ftruncate(h->fd, size) ? -errno : 0;
	} else {
		int fd = openat(emu.src_fd, rel_path(path), O_WRONLY | O_CLOEXEC);
		rc = fd < 0 ? -errno : ftruncate(fd, size) ? -errno : 0;
		if (fd >= 0)
			close(fd);
	}
	return meta_op(rc, NULL, t0);
}

static int emu_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	struct emu_fh *h = fi ? (struct emu_fh *)(uintptr_t)fi->fh : NULL;
	if (!h && ctl_path(path) != CTL_NONE)
		return -EACCES;
	uint64_t t0 = meta_begin();
	int rc = (h && h->kind == FH_SRC ? fchmod(h->fd, mode)
					 : fchmodat(emu.src_fd, rel_path(path), mode, 0)) ? -errno : 0;
	return meta_op(rc, NULL, t0);
}

static int emu_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi)
{
	struct emu_fh *h = fi ? (struct emu_fh *)(uintptr_t)fi->fh : NULL;
	if (!h && ctl_path(path) != CTL_NONE)
		return -EACCES;
	uint64_t t0 = meta_begin();
	int rc = (h && h->kind == FH_SRC ? futimens(h->fd, tv)
					 : utimensat(emu.src_fd, rel_path(path), tv,
						     AT_SYMLINK_NOFOLLOW)) ? -errno : 0;
	return meta_op(rc, NULL, t0);
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
	/* write mode only: mount_fs mounts read-only without --writable, where
	 * the kernel refuses these before they reach us */
	.write = emu_write,
	.create = emu_create,
	.fsync = emu_fsync,
	.rename = emu_rename,
	.unlink = emu_unlink,
	.mkdir = emu_mkdir,
	.rmdir = emu_rmdir,
	.truncate = emu_truncate,
	.chmod = emu_chmod,
	.utimens = emu_utimens,
};
/* ---- signals ------------------------------------------------------------------------ */

static const int stop_signals[] = { SIGINT, SIGTERM, SIGHUP };
static struct sigaction prev_sa[ARRAY_SIZE(stop_signals)];
static bool chained[ARRAY_SIZE(stop_signals)];
static struct fuse_session *stop_session;

/* Wakes every throttled request and ends the FUSE loop (what libfuse's own
 * handler does; it is not chained to, because libfuse installs it only over
 * SIG_DFL and a library loaded before may own the signal: libinfinipath's
 * SIGTERM handler calls exit()). Async-signal-safe: an atomic store, write(2)
 * and fuse_session_exit(), which libfuse calls from its handler too. */
static void on_stop_signal(int sig)
{
	(void)sig;
	int saved = errno;
	atomic_store(&emu.stopping, true);
	uint64_t one = 1;
	ssize_t w UNUSED = write(emu.stop_fd, &one, sizeof(one));
	if (stop_session)
		fuse_session_exit(stop_session);
	errno = saved;
}

/* Take SIGINT, SIGTERM and SIGHUP for on_stop_signal, whoever had them. A
 * signal ignored at start-up (SIGINT of a background job) stays ignored. */
static void chain_signals(struct fuse_session *se)
{
	stop_session = se;
	for (size_t i = 0; i < ARRAY_SIZE(stop_signals); i++) {
		struct sigaction cur;
		if (sigaction(stop_signals[i], NULL, &cur) != 0)
			continue;
		if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN)
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
	struct pfsm_snap s;
	pfsm_snapshot(&emu.model, now_ns(), &s);
	char b[32];
	log_info("unmounted %s: %llu reads, %s, %llu RPCs, %llu opens, %llu faults injected, "
		 "busy %.3f s", emu.mnt, LD(emu.t.reads), fmt_size(b, sizeof(b), LD(emu.t.bytes)),
		 (unsigned long long)s.k.rpcs, LD(emu.t.opens),
		 LD(emu.t.faults[0]) + LD(emu.t.faults[1]) + LD(emu.t.faults[2]),
		 (double)s.busy_ns / 1e9);
	pfsm_snap_free(&s);
	return rc;
}

/* Options that depend on each other, then the timing model. 0 or 2 (usage). */
static int setup_model(struct emu_opts *o)
{
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
	struct pfsm_config mc = {
		.bandwidth = o->bandwidth, .burst = o->burst,
		.lat_ns = ms_to_ns(o->latency_ms), .meta_lat_ns = ms_to_ns(o->meta_latency_ms),
		.mount_limit = o->max_inflight, .ost_limit = o->ost_inflight,
		.meta_limit = o->meta_inflight, .osts = (unsigned)o->osts,
		.rpc_size = o->rpc_size ? o->rpc_size : o->max_read, .ra_max = o->readahead,
	};
	pfsm_init(&emu.model, &mc, now_ns());
	return 0;
}

/* A FUSE instance mounted on emu.mnt, or NULL (reason logged). */
static struct fuse *mount_fs(const char *argv0, struct fuse_args *args)
{
	const struct emu_opts *o = &emu.o;
	/* the options are a comma list: keep commas out of the fsname */
	char *fsname = xasprintf("pfsemu:%s", emu.src);
	for (char *p = fsname; *p; p++)
		if (*p == ',')
			*p = '_';
	char *mopts = xasprintf("%s,default_permissions,fsname=%s,subtype=pfsemu,max_read=%llu%s",
				o->writable ? "rw" : "ro", fsname, (unsigned long long)o->max_read,
				o->allow_other ? ",allow_other" : "");
	free(fsname);
	int bad = fuse_opt_add_arg(args, argv0) || fuse_opt_add_arg(args, "-o") ||
		  fuse_opt_add_arg(args, mopts) || (o->debug && fuse_opt_add_arg(args, "-d"));
	free(mopts);
	if (bad) {
		log_error("out of memory");
		return NULL;
	}
	struct fuse *f = fuse_new(args, &emu_ops, sizeof(emu_ops), NULL);
	if (!f) {
		log_error("fuse_new failed (see the libfuse message above)");
		return NULL;
	}
	if (fuse_mount(f, emu.mnt) != 0) {
		log_error("cannot mount on %s (see the libfuse message above)", emu.mnt);
		fuse_destroy(f);
		return NULL;
	}
	return f;
}

/* Serve until unmounted or signalled, then write the stats: the exit status. */
static int serve(struct fuse *f)
{
	struct fuse_session *se = fuse_get_session(f);
	if (fuse_set_signal_handlers(se) != 0) {
		log_error("cannot install signal handlers");
		return 1;
	}
	chain_signals(se);
	int rc = 1;
	struct fuse_loop_config *lc = fuse_loop_cfg_create();
	if (!lc) {
		log_error("out of memory");
	} else {
		fuse_loop_cfg_set_max_threads(lc, (unsigned)emu.o.threads);
		fuse_loop_cfg_set_idle_threads(lc, (unsigned)emu.o.threads);
		int lrc = fuse_loop_mt(f, lc);
		atomic_store(&emu.stopping, true);
		if (lrc < 0)
			log_error("FUSE loop failed: %s", strerror(-lrc));
		rc = write_final_stats() != 0 || lrc < 0 ? 1 : 0;
		fuse_loop_cfg_destroy(lc);
	}
	unchain_signals();
	fuse_remove_signal_handlers(se);
	return rc;
}

/* The heap the read buffers come from, touched before the first read: a
 * page's first write from user mode and its first write by the kernel (a
 * read into it) each cost a fault -- under this VM's shadow paging a trap
 * per 4 KiB page -- that the first reads of a job paid otherwise (in a
 * profile of a cold epoch reading 8 files at once, ~30% of the emulator's
 * CPU). PRIME_BUFS buffers of max_read: the concurrent reads of a few
 * clients; more simply fault as before. */
#define PRIME_BUFS 16u
static void heap_prime(uint64_t n, uint64_t len)
{
	char **b = xcalloc(n, sizeof(*b));
	int z = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	for (uint64_t i = 0; i < n; i++) {
		b[i] = xmalloc(len);
		memset(b[i], 1, len);
		if (z >= 0 && read(z, b[i], len) < 0)
			log_debug("priming the read buffers: %s", strerror(errno));
	}
	for (uint64_t i = 0; i < n; i++)
		free(b[i]);
	free(b);
	if (z >= 0)
		close(z);
}

int main(int argc, char **argv)
{
	log_set_prog(PROG);
	/* libfuse mallocs each read's buffer (up to max_read) and frees it after
	 * the reply: keep those in one heap, mapped, rather than a fresh mmap
	 * (and page faults) per request (heap_prime) */
	mallopt(M_MMAP_THRESHOLD, 64 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	mallopt(M_ARENA_MAX, 1);
	struct emu_opts *o = &emu.o;
	const char *src = NULL, *mnt = NULL;
	int rc = emu_parse_args(argc, argv, o, &src, &mnt);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	log_set_level((enum log_level)o->log_level);
	if (o->write_bandwidth || o->write_latency_ms > 0 || o->write_capacity ||
	    o->write_fault_rate > 0 || o->write_shares)
		o->writable = true;
	pthread_mutex_init(&emu.wlock, NULL);
	if (setup_model(o) != 0)
		return 2;

	int log_fd = -1;
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	rc = 1;
	if (emu_check_fuse_dev() || emu_check_source(src) || emu_check_mountpoint(mnt) ||
	    emu_check_stats_path())
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
	emu.start_ns = now_ns();
	atomic_store(&emu.reset_ns, emu.start_ns);
	emu.start_wall = time(NULL);
	struct fuse *f = mount_fs(argv[0], &args);
	if (!f)
		goto out;
	emu_print_limits();
	int drc = o->foreground ? 0 : emu_daemonize(log_fd);
	if (drc != 0) {
		log_error("cannot daemonize: %s", strerror(-drc));
	} else {
		/* in the process that serves (pages touched before a fork would
		 * fault again at the child's first write) */
		heap_prime(MIN(o->threads, (uint64_t)PRIME_BUFS), o->max_read);
		rc = serve(f);
	}
	fuse_unmount(f);
	fuse_destroy(f);
out:
	fuse_opt_free_args(&args);
	pf_free_all(&emu.files);
	pfsm_destroy(&emu.model);
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
