/* util.c: logging, parsing, strings, files and the aborting allocators for
 * seerd and the tools (see util.h). Not linked into libseer. */
#define _GNU_SOURCE
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static _Atomic int log_level_ = LOG_INFO;
static _Atomic int log_node_ = -1;
static const char *log_prog_ = "seer";

void log_set_level(enum log_level lvl) { atomic_store(&log_level_, (int)lvl); }
enum log_level log_get_level(void) { return (enum log_level)atomic_load(&log_level_); }
void log_set_node(int node) { atomic_store(&log_node_, node); }
void log_set_prog(const char *prog) { log_prog_ = prog; }

int log_parse_level(const char *s, enum log_level *out)
{
	static const char *names[] = { "error", "warn", "info", "debug" };
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		if (strcasecmp(s, names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	static const char *tags[] = { "ERROR", "WARN ", "INFO ", "DEBUG" };
	if ((int)lvl > atomic_load(&log_level_))
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	localtime_r(&ts.tv_sec, &tm);
	char line[2048];
	int n = (int)strftime(line, sizeof(line), "%Y-%m-%d %H:%M:%S", &tm);
	int node = atomic_load(&log_node_);
	if (node >= 0)
		n += snprintf(line + n, sizeof(line) - (size_t)n, ".%03ld %s[%d] %s ",
			      ts.tv_nsec / 1000000, log_prog_, node, tags[lvl]);
	else
		n += snprintf(line + n, sizeof(line) - (size_t)n, ".%03ld %s %s ",
			      ts.tv_nsec / 1000000, log_prog_, tags[lvl]);
	va_list ap;
	va_start(ap, fmt);
	if (n < (int)sizeof(line))
		n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* one write(2) per line keeps lines from several threads whole */
	ssize_t w UNUSED = write(STDERR_FILENO, line, (size_t)n);
}

int parse_size(const char *s, uint64_t *out)
{
	/* Exact decimal arithmetic, no floating point: every count up to
	 * 2^64 - 1 reads back exactly and "1.001kB" is 1001 bytes. */
	enum { FRAC_DIGITS = 24 }; /* 10^24 * 2^40 still fits 128 bits */
	s = str_skip_ws(s);
	if (*s == '+')
		s++;
	unsigned __int128 ip = 0, fp = 0, fscale = 1;
	bool any = false;
	for (; isdigit((unsigned char)*s); s++, any = true)
		if (ip <= UINT64_MAX) /* past that it only has to stay too big */
			ip = ip * 10 + (unsigned)(*s - '0');
	if (*s == '.') {
		int nfrac = 0;
		for (s++; isdigit((unsigned char)*s); s++, any = true) {
			if (nfrac < FRAC_DIGITS) {
				fp = fp * 10 + (unsigned)(*s - '0');
				fscale *= 10;
				nfrac++;
			} else if (*s != '0') {
				return -EINVAL; /* finer than any whole number of bytes */
			}
		}
	}
	if (!any)
		return -EINVAL;
	const char *u = str_skip_ws(s);
	static const struct { const char *sfx; uint64_t mul; } units[] = {
		{ "", 1 }, { "b", 1 },
		{ "k", 1ull << 10 }, { "ki", 1ull << 10 }, { "kib", 1ull << 10 }, { "kb", 1000ull },
		{ "m", 1ull << 20 }, { "mi", 1ull << 20 }, { "mib", 1ull << 20 }, { "mb", 1000000ull },
		{ "g", 1ull << 30 }, { "gi", 1ull << 30 }, { "gib", 1ull << 30 }, { "gb", 1000000000ull },
		{ "t", 1ull << 40 }, { "ti", 1ull << 40 }, { "tib", 1ull << 40 },
		{ "tb", 1000000000000ull },
	};
	char unit[8];
	size_t n = 0;
	while (*u && !isspace((unsigned char)*u) && n < sizeof(unit) - 1)
		unit[n++] = (char)tolower((unsigned char)*u++);
	unit[n] = '\0';
	if (!str_only_ws(u))
		return -EINVAL;
	for (size_t i = 0; i < ARRAY_SIZE(units); i++) {
		if (strcmp(unit, units[i].sfx) == 0) {
			unsigned __int128 frac = fp * units[i].mul;
			if (frac % fscale != 0)
				return -EINVAL; /* a fraction of a byte */
			unsigned __int128 bytes = ip * units[i].mul + frac / fscale;
			if (bytes > UINT64_MAX)
				return -ERANGE;
			*out = (uint64_t)bytes;
			return 0;
		}
	}
	return -EINVAL;
}

int parse_bool(const char *s, bool *out)
{
	static const char *yes[] = { "1", "true", "yes", "on" };
	static const char *no[] = { "0", "false", "no", "off" };
	s = str_skip_ws(s);
	char w[8];
	size_t n = 0;
	while (*s && !isspace((unsigned char)*s) && n < sizeof(w) - 1)
		w[n++] = *s++;
	w[n] = '\0';
	if (!str_only_ws(s))
		return -EINVAL;
	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		if (strcasecmp(w, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(w, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

const char *fmt_size(char *buf, size_t len, uint64_t bytes)
{
	static const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	size_t i = 0;
	while (v >= 1024.0 && i + 1 < ARRAY_SIZE(u)) {
		v /= 1024.0;
		i++;
	}
	if (i == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.2f %s", v, u[i]);
	return buf;
}

static void oom(size_t n)
{
	log_error("out of memory allocating %zu bytes", n);
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom(n);
	return p;
}

void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz ? sz : 1);
	if (!p)
		oom(n * sz);
	return p;
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		oom(n);
	return q;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s);
	if (!p)
		oom(strlen(s));
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *p = NULL;
	int n = vasprintf(&p, fmt, ap);
	va_end(ap);
	if (n < 0)
		oom(0);
	return p;
}

char *str_copy(char *dst, size_t len, const char *src)
{
	if (len == 0)
		return dst;
	size_t n = strnlen(src, len - 1);
	memcpy(dst, src, n);
	dst[n] = '\0';
	return dst;
}

void mem_prime_pages(void *p, uint64_t len)
{
	for (uint64_t o = 0; o < len; o += 4096) {
		volatile uint8_t *q = (uint8_t *)p + o;
		*q = *q;
	}
	/* the kernel's access: one byte of each page copied into a scratch
	 * file, IOV_MAX pages to a call (the bytes land at offsets 0..1023) */
	int fd = memfd_create("seer-prime", MFD_CLOEXEC);
	if (fd < 0)
		return; /* the kernel's first copies trap instead */
	struct iovec v[1024];
	int n = 0;
	for (uint64_t o = 0; o < len; o += 4096) {
		v[n++] = (struct iovec){ .iov_base = (uint8_t *)p + o, .iov_len = 1 };
		if (n == 1024 || o + 4096 >= len) {
			if (pwritev(fd, v, n, 0) < 0)
				break;
			n = 0;
		}
	}
	close(fd);
}

char *sfmt(char *dst, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(dst, len, fmt, ap);
	va_end(ap);
	return dst;
}

int pread_full(int fd, void *buf, size_t n, uint64_t off)
{
	char *p = buf;
	while (n > 0) {
		ssize_t r = pread(fd, p, n, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -ENODATA;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int pwrite_full(int fd, const void *buf, size_t n, uint64_t off)
{
	const char *p = buf;
	while (n > 0) {
		ssize_t r = pwrite(fd, p, n, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int write_full(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n > 0) {
		ssize_t r = write(fd, p, n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int mkdir_p(const char *path, unsigned mode)
{
	char tmp[4096];
	size_t len = strlen(path);
	if (len == 0 || len >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, len + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, mode) != 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, mode) != 0 && errno != EEXIST)
		return -errno;
	struct stat st;
	if (stat(tmp, &st) != 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int write_file_atomic(const char *path, const void *buf, size_t n)
{
	char tmp[4096];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int rc = write_full(fd, buf, n);
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -errno;
	if (rc != 0)
		unlink(tmp);
	return rc;
}

void epoll_watch(int epfd, int fd, uint64_t tag)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = tag };
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
		log_error("epoll_ctl add: %s", strerror(errno));
}
