/* LD_PRELOAD shim for test_hostile_daemon.py: a gate in front of the dataset.
 * While the file named by $SEER_GATE_FILE exists, pread/preadv on any file
 * whose path starts with $SEER_GATE_DIR wait (polling every millisecond);
 * the first read that waits creates $SEER_GATE_FILE.held, so a test knows
 * reads are in flight without guessing how long they take. Removing the
 * gate file lets every waiting read go on.
 * Built by the test itself: cc -shared -fPIC -o read_gate.so read_gate.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static void gate(int fd)
{
	const char *dir = getenv("SEER_GATE_DIR"), *file = getenv("SEER_GATE_FILE");
	if (!dir || !*dir || !file || !*file || access(file, F_OK) != 0)
		return;
	char link[64], path[4096];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0)
		return;
	path[n] = '\0';
	if (strncmp(path, dir, strlen(dir)) != 0)
		return;
	char held[4200];
	snprintf(held, sizeof(held), "%s.held", file);
	int h = open(held, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (h >= 0)
		close(h);
	struct timespec ms = { 0, 1000000 };
	while (access(file, F_OK) == 0)
		nanosleep(&ms, NULL);
}

#define SHIM(name, bufqual)                                                        \
	ssize_t name(int fd, bufqual void *buf, size_t n, off_t off)               \
	{                                                                          \
		static ssize_t (*real)(int, bufqual void *, size_t, off_t);        \
		if (!real)                                                         \
			real = (ssize_t(*)(int, bufqual void *, size_t, off_t))    \
				dlsym(RTLD_NEXT, #name);                           \
		gate(fd);                                                          \
		return real(fd, buf, n, off);                                      \
	}

#define SHIMV(name)                                                                \
	ssize_t name(int fd, const struct iovec *iov, int cnt, off_t off)          \
	{                                                                          \
		static ssize_t (*real)(int, const struct iovec *, int, off_t);     \
		if (!real)                                                         \
			real = (ssize_t(*)(int, const struct iovec *, int, off_t))  \
				dlsym(RTLD_NEXT, #name);                           \
		gate(fd);                                                          \
		return real(fd, iov, cnt, off);                                    \
	}

SHIM(pread, )
SHIM(pread64, )
SHIMV(preadv)
SHIMV(preadv64)
