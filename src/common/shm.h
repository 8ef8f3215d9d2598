/* Shared-memory segments: memfds passed to trainers with SCM_RIGHTS, plus the
 * futex and socket helpers both sides use. */
#ifndef SEER_SHM_H
#define SEER_SHM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct shm_seg {
	int fd;
	void *base;
	size_t size;
};

/* Create and map (read-write) a memfd of `size` bytes, zero-filled.
 * 0 or -errno; seg->fd = -1 on failure. */
int shm_create(struct shm_seg *seg, const char *name, size_t size);
/* The same in hugetlbfs pages of `huge` bytes (the default huge page size;
 * 0: ordinary pages), the size rounded up to a multiple of it (seg->size):
 * mappings and unmappings of such a file must cover whole huge pages.
 * -ENOMEM when the pool has too few free pages, -EINVAL without one. */
int shm_create_huge(struct shm_seg *seg, const char *name, size_t size, size_t huge);
/* Forbid any further writable mapping (the creator's mapping stays
 * writable): trainers can then only map it read-only. 0 or -errno. */
int shm_seal_readonly(struct shm_seg *seg);
/* Forbid resizing (a writable segment the peer may write but never
 * truncate: a shrunk memfd would fault in the creator). 0 or -errno. */
int shm_seal_size(struct shm_seg *seg);
void shm_destroy(struct shm_seg *seg);
/* Map a received segment. 0 or -errno. */
int shm_map(int fd, size_t size, int writable, void **out);

/* futex on a 32-bit word in shared memory (process-shared, not PRIVATE). */
int futex_wait(_Atomic uint32_t *addr, uint32_t expected, int64_t timeout_ns);
void futex_wake_all(_Atomic uint32_t *addr);

/* SOCK_SEQPACKET helpers: one message per call, optional fds. Return bytes,
 * 0 on EOF, or -errno. recv_msg truncation gives -EMSGSIZE. */
ssize_t sock_send(int fd, const void *buf, size_t len, const int *fds, int nfds);
ssize_t sock_recv(int fd, void *buf, size_t len, int *fds, int *nfds, int maxfds);

#endif /* SEER_SHM_H */
