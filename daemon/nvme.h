/* The NVMe tier: one cache file per node on node-local flash, each planned
 * sample written once (after its first PFS read) and read back checked.
 *
 * Owns (struct nvme_tier, opaque; nvme.c; what loads do with it:
 * nvme_load.c): the file (unlinked as soon as it is
 * open), its capacity, alignment and reserved size, whether the tier still
 * works, the written copies' checksums, and the counts status reports
 * (planned, loaded). Where a sample's copy lives is the plan's
 * (place_local_off); whether it is written is the sample's cstate (the
 * engine's, shared with the network thread).
 *
 * Threads: the dispatcher owns the tier. The I/O threads call only
 * nvme_io_len, nvme_pread and nvme_pwrite, which read the fields fixed when
 * the tier is made (file, O_DIRECT, alignment); the file stays open, even
 * once the tier is disabled, until nvme_destroy (after the I/O threads
 * stopped).
 *
 * Failure: a tier that cannot be set up is left out (logged once: nvme_on
 * is false); a write or read error disables it for the rest of the job (its
 * samples then come from the PFS); a copy failing its checksum is never
 * delivered (SEER_EDATASET from nvme_pread: read from the PFS and written
 * again). Out of memory aborts. */
#ifndef SEERD_NVME_H
#define SEERD_NVME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NVME_ALIGN 4096ull /* the file's reservations; O_DIRECT's largest alignment */

struct seer_config;
struct nvme_tier;

/* What status reports of the tier. */
struct nvme_summary {
	bool enabled;
	uint64_t capacity;       /* [cache] nvme, rounded down to 4 KiB (0: none) */
	uint64_t planned;        /* samples the plan keeps here (owned + replicas) */
	uint64_t loaded, loaded_bytes; /* copies written */
};

/* Open this node's cache file for `nsamples` samples ([cache] nvme and
 * nvme_dir, "%n" = node). Never NULL: a tier that cannot be set up is
 * reported once and made disabled. */
struct nvme_tier *nvme_create(const struct seer_config *cfg, uint32_t node, uint64_t nsamples);
/* Close the file and free the tier (after the I/O threads stopped). NULL: no-op. */
void nvme_destroy(struct nvme_tier *nv);

bool nvme_on(const struct nvme_tier *nv);          /* still serving */
uint64_t nvme_cap(const struct nvme_tier *nv);     /* usable bytes, 0 when off */
uint32_t nvme_align(const struct nvme_tier *nv);   /* slot and transfer alignment */
/* Disable the tier for the rest of the job (logged once, with why). */
void nvme_disable(struct nvme_tier *nv, const char *why);
/* The plan uses `used` bytes of the file: keep that much reserved. */
void nvme_fit(struct nvme_tier *nv, uint64_t used);

/* The plan keeps n more samples here; nvme_plan_reset forgets the plan's. */
void nvme_planned_add(struct nvme_tier *nv, uint64_t n);
void nvme_plan_reset(struct nvme_tier *nv);
/* The copies are forgotten (a dropped shape): counts start over. */
void nvme_forget(struct nvme_tier *nv);
/* Sample s's copy of len bytes was written with checksum sum. */
void nvme_mark_written(struct nvme_tier *nv, uint32_t s, uint64_t sum, uint64_t len);
uint64_t nvme_sum(const struct nvme_tier *nv, uint32_t s); /* valid once written */
struct nvme_summary nvme_summary(const struct nvme_tier *nv);

/* Any thread: bytes a transfer of len bytes moves (O_DIRECT rounds up). */
uint64_t nvme_io_len(const struct nvme_tier *nv, uint64_t len);
/* I/O threads: sample s's copy at off into dst, checked against sum. 0;
 * SEER_EDATASET when it fails the checksum; -errno. err says which. */
int nvme_pread(const struct nvme_tier *nv, uint32_t s, uint8_t *dst, uint64_t len, uint64_t off,
	       uint64_t sum, char *err, size_t errlen);
/* I/O threads: len bytes at src to off; *sum their checksum. 0 or -errno. */
int nvme_pwrite(const struct nvme_tier *nv, uint32_t s, const uint8_t *src, uint64_t len,
		uint64_t off, uint64_t *sum, char *err, size_t errlen);

#endif /* SEERD_NVME_H */
