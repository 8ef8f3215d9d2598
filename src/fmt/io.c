/* How formats read dataset files (counted, per thread) and the process-wide
 * memory setting of the formats.
 *
 * The byte count is thread-local: each reader thread counts its own reads;
 * nothing is shared. fmt_set_memory is meant for start-up (seerd's main
 * thread, before the catalog is opened); catalogs read it when opened. */
#define _GNU_SOURCE
#include "fmt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Thread_local uint64_t thread_bytes;
static _Thread_local uint64_t proc_bytes; /* read from /proc by the accounting itself */
static _Atomic uint64_t memory_limit = FMT_MEMORY_DEFAULT;

uint64_t fmt_thread_bytes(void)
{
	return thread_bytes;
}

void fmt_count_bytes(uint64_t n)
{
	thread_bytes += n;
}

int fmt_preadv(int fd, struct iovec *iov, int cnt, uint64_t off)
{
	for (;;) {
		while (cnt > 0 && iov->iov_len == 0) { /* an empty sample reads nothing */
			iov++;
			cnt--;
		}
		if (cnt == 0)
			break;
		ssize_t n = preadv(fd, iov, cnt, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ENODATA;
		thread_bytes += (uint64_t)n;
		off += (uint64_t)n;
		while (cnt > 0 && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

int fmt_pread(int fd, void *buf, size_t len, uint64_t off)
{
	struct iovec iov = { buf, len };
	return fmt_preadv(fd, &iov, 1, off);
}

/* This thread's rchar, -1 when not available. The kernel adds the bytes of
 * this read after producing the value: they are counted in proc_bytes. */
static int64_t thread_rchar(void)
{
	char buf[512];
	int fd = open("/proc/thread-self/io", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	proc_bytes += (uint64_t)n;
	buf[n] = '\0';
	const char *r = strstr(buf, "rchar:");
	return r ? strtoll(r + 6, NULL, 10) : -1;
}

void fmt_lib_io_begin(struct fmt_lib_io *io)
{
	io->self = proc_bytes;
	io->start = thread_rchar();
}

uint64_t fmt_lib_io_end(struct fmt_lib_io *io)
{
	uint64_t self = proc_bytes - io->self; /* /proc reads since begin, nested ones too */
	int64_t now = io->start < 0 ? -1 : thread_rchar();
	if (now < 0 || (uint64_t)(now - io->start) < self)
		return UINT64_MAX;
	uint64_t n = (uint64_t)(now - io->start) - self;
	thread_bytes += n;
	return n;
}

void fmt_set_memory(uint64_t bytes)
{
	atomic_store_explicit(&memory_limit, bytes, memory_order_relaxed);
}

uint64_t fmt_memory(void)
{
	return atomic_load_explicit(&memory_limit, memory_order_relaxed);
}

void fmt_memory_stats(const struct catalog *c, struct fmt_mem_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (c->fmt && c->fmt->mem_stats && c->fmt_shared)
		c->fmt->mem_stats(c->fmt_shared, st);
}
