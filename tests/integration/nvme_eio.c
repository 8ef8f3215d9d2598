/* LD_PRELOAD shim for test_nvme.py: a node-local disk that fails mid-job.
 * Once the file named by $SEER_EIO_TRIGGER exists, pread and pwrite on any
 * file whose path starts with $SEER_EIO_DIR (the daemon's NVMe file, found
 * through /proc/self/fd even after it was unlinked) fail with EIO.
 * While the file named by $SEER_EIO_WRITEBACK exists too, pread and pwrite
 * work and only the write-back fails: sync_file_range on such a file says
 * EIO, as the kernel reports a failed write-back once to an open file (a
 * later fsync on it returns 0: test_checkpoint.py's drain must not miss it).
 * Built by the test itself: cc -shared -fPIC -o nvme_eio.so nvme_eio.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failing(int fd)
{
	const char *dir = getenv("SEER_EIO_DIR"), *trigger = getenv("SEER_EIO_TRIGGER");
	if (!dir || !*dir || !trigger || access(trigger, F_OK) != 0)
		return 0;
	char link[64], path[4096];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0)
		return 0;
	path[n] = '\0';
	return strncmp(path, dir, strlen(dir)) == 0;
}

static int writeback_only(void)
{
	const char *wb = getenv("SEER_EIO_WRITEBACK");
	return wb && *wb && access(wb, F_OK) == 0;
}

#define SHIM(name, bufqual)                                                        \
	ssize_t name(int fd, bufqual void *buf, size_t n, off_t off)               \
	{                                                                          \
		static ssize_t (*real)(int, bufqual void *, size_t, off_t);        \
		if (!real)                                                         \
			real = (ssize_t(*)(int, bufqual void *, size_t, off_t))    \
				dlsym(RTLD_NEXT, #name);                           \
		if (failing(fd) && !writeback_only()) {                            \
			errno = EIO;                                               \
			return -1;                                                 \
		}                                                                  \
		return real(fd, buf, n, off);                                      \
	}

SHIM(pread, )
SHIM(pread64, )
SHIM(pwrite, const)
SHIM(pwrite64, const)

int sync_file_range(int fd, off_t off, off_t n, unsigned int flags)
{
	static int (*real)(int, off_t, off_t, unsigned int);
	if (!real)
		real = (int (*)(int, off_t, off_t, unsigned int))dlsym(RTLD_NEXT, "sync_file_range");
	if (failing(fd) && writeback_only()) {
		errno = EIO;
		return -1;
	}
	return real(fd, off, n, flags);
}
