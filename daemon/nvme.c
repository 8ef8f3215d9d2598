/* The NVMe tier: the file, its checksums and counts (nvme.h says what it
 * owns, its threads and its failures). Knows nothing of tasks or the
 * engine: what a load does with the tier is nvme_load.c's. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <xxhash.h>

#include "../src/util/util.h"
#include "nvme.h"
#include "../src/config/config.h"
#include "../src/plan/plan.h"
#include "node_path.h"
#include "seer.h"

struct nvme_tier {
	int fd;                  /* -1: none; open until nvme_destroy */
	bool direct;             /* O_DIRECT */
	uint32_t align;          /* slot and transfer alignment (O_DIRECT's, or 64) */
	uint64_t cap;            /* [cache] nvme, rounded down */
	bool ok;                 /* false once disabled: its samples come from the PFS */
	uint64_t *sum;           /* per sample, valid once written */
	uint64_t nsamples;
	uint64_t loaded, loaded_bytes, planned;
	uint64_t size;           /* the file's reserved size (nvme_fit) */
};

uint64_t nvme_io_len(const struct nvme_tier *nv, uint64_t len)
{
	return nv->direct ? ALIGN_UP(len, (uint64_t)nv->align) : len;
}

bool nvme_on(const struct nvme_tier *nv)
{
	return nv->ok;
}

uint64_t nvme_cap(const struct nvme_tier *nv)
{
	return nv->ok ? nv->cap : 0;
}

uint32_t nvme_align(const struct nvme_tier *nv)
{
	return nv->align;
}

void nvme_disable(struct nvme_tier *nv, const char *why)
{
	if (!nv->ok)
		return;
	nv->ok = false; /* its samples are read from the PFS from now on */
	log_warn("NVMe tier disabled (%s): serving from RAM, peers and the PFS", why);
}

/* Open this node's NVMe cache file, reserve its space and unlink it at once:
 * it disappears with the daemon whatever way the daemon ends. A tier that
 * cannot be set up is reported once and left out. */
struct nvme_tier *nvme_create(const struct seer_config *cfg, uint32_t node, uint64_t nsamples)
{
	struct nvme_tier *nv = xcalloc(1, sizeof(*nv));
	nv->fd = -1;
	nv->nsamples = nsamples;
	if (cfg->cache.nvme == 0 || !cfg->cache.nvme_dir || !*cfg->cache.nvme_dir)
		return nv;
	char dir[4096], path[4200], why[512];
	nv->ok = true; /* so nvme_disable reports */
	int rc = node_path(dir, sizeof(dir), cfg->cache.nvme_dir, node);
	if (rc != 0) {
		snprintf(why, sizeof(why), "[cache] nvme_dir %.300s is too long", cfg->cache.nvme_dir);
		nvme_disable(nv, why);
		return nv;
	}
	rc = mkdir_p(dir, 0700);
	if (rc != 0) {
		snprintf(why, sizeof(why), "cannot create %.300s: %s", dir, strerror(-rc));
		nvme_disable(nv, why);
		return nv;
	}
	snprintf(path, sizeof(path), "%s/.seer-%s-n%u-%d.cache", dir, cfg->job.id, node,
		 (int)getpid());
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		snprintf(why, sizeof(why), "cannot create %.300s: %s", path, strerror(errno));
		nvme_disable(nv, why);
		return nv;
	}
	unlink(path);
	uint64_t cap = cfg->cache.nvme & ~(NVME_ALIGN - 1);
	rc = posix_fallocate(fd, 0, (off_t)cap);
	if (rc == EOPNOTSUPP || rc == EINVAL) {
		rc = ftruncate(fd, (off_t)cap) == 0 ? 0 : errno;
	}
	if (rc != 0) {
		char a[32];
		snprintf(why, sizeof(why), "%.300s has no room for %s: %s; lower [cache] nvme", dir,
			 fmt_size(a, sizeof(a), cap), strerror(rc));
		close(fd);
		nvme_disable(nv, why);
		return nv;
	}
	/* O_DIRECT when the file system has it, at the alignment it asks for
	 * (statx STATX_DIOALIGN, Linux 6.1+; 4 KiB when it does not say) */
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	nv->align = PLAN_RAM_ALIGN;
	int dfd = open(self, O_RDWR | O_DIRECT | O_CLOEXEC);
	if (dfd >= 0) {
		uint32_t align = (uint32_t)NVME_ALIGN;
		struct statx sx;
		if (syscall(SYS_statx, dfd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
		    (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align > 0)
			align = MAX(MAX(sx.stx_dio_offset_align, sx.stx_dio_mem_align), 64u);
		void *probe = NULL;
		if (align <= NVME_ALIGN && posix_memalign(&probe, NVME_ALIGN, NVME_ALIGN) == 0 &&
		    pread(dfd, probe, align, 0) == (ssize_t)align) {
			close(fd);
			fd = dfd;
			nv->direct = true;
			nv->align = align;
		} else {
			close(dfd);
		}
		free(probe);
	}
	nv->fd = fd;
	nv->cap = cap;
	nv->size = cap;
	nv->sum = xcalloc(nsamples, sizeof(uint64_t));
	char a[32];
	log_info("NVMe tier: %s in %s (%s, %u-byte slots)", fmt_size(a, sizeof(a), cap), dir,
		 nv->direct ? "O_DIRECT" : "buffered: the file system has no O_DIRECT", nv->align);
	return nv;
}

void nvme_destroy(struct nvme_tier *nv)
{
	if (!nv)
		return;
	free(nv->sum);
	if (nv->fd >= 0)
		close(nv->fd);
	free(nv);
}

/* The plan uses `used` bytes of the file (owned samples and replicas, at
 * their offsets): the file keeps that much reserved and gives the rest of
 * [cache] nvme back to the file system; a later, larger plan (a re-plan)
 * reserves again, and a file system without room then disables the tier. */
void nvme_fit(struct nvme_tier *nv, uint64_t used)
{
	if (nv->fd < 0 || !nv->ok)
		return;
	uint64_t want = MIN(ALIGN_UP(used, NVME_ALIGN), nv->cap);
	if (want == nv->size)
		return;
	int rc = 0;
	if (want < nv->size)
		rc = ftruncate(nv->fd, (off_t)want) == 0 ? 0 : errno;
	else if ((rc = posix_fallocate(nv->fd, 0, (off_t)want)) == EOPNOTSUPP || rc == EINVAL)
		rc = ftruncate(nv->fd, (off_t)want) == 0 ? 0 : errno;
	if (rc != 0) {
		char why[256], a[32];
		snprintf(why, sizeof(why), "cannot size the cache file to %s: %s",
			 fmt_size(a, sizeof(a), want), strerror(rc));
		nvme_disable(nv, why);
		return;
	}
	char a[32], b[32];
	log_info("NVMe tier: the plan uses %s of %s; the file keeps that much",
		 fmt_size(a, sizeof(a), want), fmt_size(b, sizeof(b), nv->cap));
	nv->size = want;
}

void nvme_planned_add(struct nvme_tier *nv, uint64_t n)
{
	nv->planned += n;
}

void nvme_plan_reset(struct nvme_tier *nv)
{
	nv->planned = 0;
}

void nvme_forget(struct nvme_tier *nv)
{
	nv->loaded = nv->loaded_bytes = nv->planned = 0;
}

void nvme_mark_written(struct nvme_tier *nv, uint32_t s, uint64_t sum, uint64_t len)
{
	nv->sum[s] = sum;
	nv->loaded++;
	nv->loaded_bytes += len;
}

uint64_t nvme_sum(const struct nvme_tier *nv, uint32_t s)
{
	return nv->sum[s];
}

struct nvme_summary nvme_summary(const struct nvme_tier *nv)
{
	return (struct nvme_summary){ .enabled = nv->ok, .capacity = nv->cap,
				      .planned = nv->planned, .loaded = nv->loaded,
				      .loaded_bytes = nv->loaded_bytes };
}

/* TK_NVME_READ: the copy, checked against the checksum of what was written. */
int nvme_pread(const struct nvme_tier *nv, uint32_t s, uint8_t *dst, uint64_t len, uint64_t off,
	       uint64_t sum, char *err, size_t errlen)
{
	int rc = pread_full(nv->fd, dst, nvme_io_len(nv, len), off);
	if (rc == -ENODATA)
		rc = -EIO;
	if (rc == 0 && XXH64(dst, len, 0) != sum) {
		rc = SEER_EDATASET;
		snprintf(err, errlen, "NVMe copy of sample %u failed its checksum", s);
	} else if (rc != 0) {
		snprintf(err, errlen, "NVMe read of sample %u: %s", s, strerror(-rc));
	}
	return rc;
}

/* TK_NVME_WRITE: bytes already in the arena to the tier, with their checksum. */
int nvme_pwrite(const struct nvme_tier *nv, uint32_t s, const uint8_t *src, uint64_t len,
		uint64_t off, uint64_t *sum, char *err, size_t errlen)
{
	*sum = XXH64(src, len, 0);
	int rc = pwrite_full(nv->fd, src, nvme_io_len(nv, len), off);
	if (rc != 0)
		snprintf(err, errlen, "NVMe write of sample %u: %s", s, strerror(-rc));
	return rc;
}
