#define _GNU_SOURCE
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int shm_create(struct shm_seg *seg, const char *name, size_t size)
{
	return shm_create_huge(seg, name, size, 0);
}

int shm_create_huge(struct shm_seg *seg, const char *name, size_t size, size_t huge)
{
	seg->fd = -1;
	seg->base = NULL;
	seg->size = 0;
	if (huge && (huge & (huge - 1)))
		return -EINVAL;
	if (huge)
		size = (size + huge - 1) & ~(huge - 1);
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? MFD_HUGETLB : 0));
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) != 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	/* hugetlbfs reserves the whole shared mapping's pages here: ENOMEM when
	 * the pool has too few free, never a SIGBUS later */
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int e = -errno;
		close(fd);
		return e;
	}
	seg->fd = fd;
	seg->base = p;
	seg->size = size;
	return 0;
}

int shm_seal_readonly(struct shm_seg *seg)
{
	if (fcntl(seg->fd, F_ADD_SEALS,
		  F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		return -errno;
	return 0;
}

int shm_seal_size(struct shm_seg *seg)
{
	if (fcntl(seg->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		return -errno;
	return 0;
}

void shm_destroy(struct shm_seg *seg)
{
	if (seg->base)
		munmap(seg->base, seg->size);
	if (seg->fd >= 0)
		close(seg->fd);
	seg->base = NULL;
	seg->fd = -1;
	seg->size = 0;
}

int shm_map(int fd, size_t size, int writable, void **out)
{
	void *p = mmap(NULL, size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*out = p;
	return 0;
}

int futex_wait(_Atomic uint32_t *addr, uint32_t expected, int64_t timeout_ns)
{
	struct timespec ts, *tp = NULL;
	if (timeout_ns >= 0) {
		ts.tv_sec = (time_t)(timeout_ns / 1000000000);
		ts.tv_nsec = (long)(timeout_ns % 1000000000);
		tp = &ts;
	}
	long r = syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, expected, tp, NULL, 0);
	if (r == 0)
		return 0;
	return errno == EAGAIN || errno == EINTR ? 0 : -errno;
}

void futex_wake_all(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

ssize_t sock_send(int fd, const void *buf, size_t len, const int *fds, int nfds)
{
	struct iovec iov = { (void *)buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	char ctl[CMSG_SPACE(sizeof(int) * 8)];
	if (nfds > 0) {
		if (nfds > 8)
			return -EINVAL;
		memset(ctl, 0, sizeof(ctl));
		mh.msg_control = ctl;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	for (;;) {
		ssize_t r = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (r >= 0)
			return r;
		if (errno != EINTR)
			return -errno;
	}
}

ssize_t sock_recv(int fd, void *buf, size_t len, int *fds, int *nfds, int maxfds)
{
	struct iovec iov = { buf, len };
	char ctl[CMSG_SPACE(sizeof(int) * 8)];
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (maxfds > 0) {
		mh.msg_control = ctl;
		mh.msg_controllen = sizeof(ctl);
	}
	if (nfds)
		*nfds = 0;
	ssize_t r;
	do {
		r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	int got = 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		int n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		int *in = (int *)CMSG_DATA(cm);
		for (int i = 0; i < n; i++) {
			if (got < maxfds && fds)
				fds[got++] = in[i];
			else
				close(in[i]); /* unexpected fds are not kept open */
		}
	}
	if (nfds)
		*nfds = got;
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		for (int i = 0; i < got; i++)
			close(fds[i]);
		if (nfds)
			*nfds = 0;
		return -EMSGSIZE;
	}
	return r;
}
