/* The NVMe tier alone (daemon/nvme.c), on a file in a temporary directory,
 * with no daemon, task or thread: bytes written come back checked; a copy
 * that does not match its checksum is refused (SEER_EDATASET, never
 * delivered); a tier that cannot be set up, or is disabled, serves nothing
 * and offers no capacity; the counts status reports follow the writes. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../daemon/nvme.h"
#include "../../src/config/config.h"
#include "seer.h"

static char dir[64];

static void setup(void)
{
	strcpy(dir, "/tmp/seer-nvme-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	/* the cache file is unlinked as soon as it is open: only the folders */
	char sub[128];
	snprintf(sub, sizeof(sub), "%s/n3", dir);
	rmdir(sub);
	rmdir(dir);
}

static struct nvme_tier *tier(uint64_t bytes, const char *where)
{
	static struct seer_config cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.cache.nvme = bytes;
	cfg.cache.nvme_dir = (char *)where;
	cfg.job.id = (char *)"unit";
	return nvme_create(&cfg, 3, 16);
}

/* A buffer the tier may use with O_DIRECT: aligned, and as long as the
 * transfer it makes. */
static uint8_t *buf(const struct nvme_tier *nv, uint64_t len)
{
	void *p = NULL;
	cr_assert_eq(posix_memalign(&p, 4096, nvme_io_len(nv, len) + 4096), 0);
	memset(p, 0, nvme_io_len(nv, len) + 4096);
	return p;
}

Test(nvme_tier, bytes_come_back_checked, .init = setup, .fini = teardown)
{
	char where[128];
	snprintf(where, sizeof(where), "%s/n%%n", dir);
	struct nvme_tier *nv = tier(1 << 20, where);
	cr_assert(nvme_on(nv));
	cr_assert_eq(nvme_cap(nv), 1 << 20);
	uint32_t align = nvme_align(nv);
	cr_assert(align >= 64 && align <= 4096 && (align & (align - 1)) == 0, "align %u", align);
	cr_assert_geq(nvme_io_len(nv, 1000), 1000);

	uint8_t *src = buf(nv, 1000), *dst = buf(nv, 1000);
	for (int i = 0; i < 1000; i++)
		src[i] = (uint8_t)(i * 7 + 1);
	char err[256] = "";
	uint64_t sum = 0, off = 2 * 4096;
	cr_assert_eq(nvme_pwrite(nv, 5, src, 1000, off, &sum, err, sizeof(err)), 0, "%s", err);
	cr_assert_neq(sum, 0);
	nvme_mark_written(nv, 5, sum, 1000);
	cr_assert_eq(nvme_sum(nv, 5), sum);
	cr_assert_eq(nvme_pread(nv, 5, dst, 1000, off, nvme_sum(nv, 5), err, sizeof(err)), 0,
		     "%s", err);
	cr_assert_arr_eq(dst, src, 1000);

	struct nvme_summary s = nvme_summary(nv);
	cr_assert(s.enabled);
	cr_assert_eq(s.capacity, 1 << 20);
	cr_assert_eq(s.loaded, 1);
	cr_assert_eq(s.loaded_bytes, 1000);
	nvme_planned_add(nv, 4);
	nvme_planned_add(nv, 2);
	cr_assert_eq(nvme_summary(nv).planned, 6);
	nvme_plan_reset(nv);
	cr_assert_eq(nvme_summary(nv).planned, 0);
	nvme_forget(nv);
	cr_assert_eq(nvme_summary(nv).loaded, 0);
	cr_assert_eq(nvme_summary(nv).loaded_bytes, 0);
	free(src);
	free(dst);
	nvme_destroy(nv);
}

Test(nvme_tier, a_bad_copy_is_never_delivered, .init = setup, .fini = teardown)
{
	char where[128];
	snprintf(where, sizeof(where), "%s/n%%n", dir);
	struct nvme_tier *nv = tier(1 << 20, where);
	cr_assert(nvme_on(nv));
	uint8_t *src = buf(nv, 300), *dst = buf(nv, 300);
	memset(src, 0xab, 300);
	char err[256] = "";
	uint64_t sum;
	cr_assert_eq(nvme_pwrite(nv, 9, src, 300, 0, &sum, err, sizeof(err)), 0);
	cr_assert_eq(nvme_pread(nv, 9, dst, 300, 0, sum ^ 1, err, sizeof(err)), SEER_EDATASET);
	cr_assert_str_eq(err, "NVMe copy of sample 9 failed its checksum");
	/* another sample's slot (never written: zeros) fails too */
	cr_assert_eq(nvme_pread(nv, 10, dst, 300, 4096, sum, err, sizeof(err)), SEER_EDATASET);
	free(src);
	free(dst);
	nvme_destroy(nv);
}

Test(nvme_tier, disabled_serves_nothing, .init = setup, .fini = teardown)
{
	char where[128];
	snprintf(where, sizeof(where), "%s/n%%n", dir);
	struct nvme_tier *nv = tier(1 << 20, where);
	cr_assert(nvme_on(nv));
	nvme_disable(nv, "unit test");
	cr_assert(!nvme_on(nv));
	cr_assert_eq(nvme_cap(nv), 0, "the plan gets no NVMe capacity");
	cr_assert(!nvme_summary(nv).enabled);
	cr_assert_eq(nvme_summary(nv).capacity, 1 << 20, "status still says what was configured");
	nvme_disable(nv, "twice is harmless");
	nvme_destroy(nv);
}

Test(nvme_tier, left_out_when_it_cannot_be_set_up, .init = setup, .fini = teardown)
{
	struct nvme_tier *nv = tier(0, dir);
	cr_assert(!nvme_on(nv), "[cache] nvme = 0");
	cr_assert_eq(nvme_cap(nv), 0);
	nvme_destroy(nv);

	nv = tier(1 << 20, "");
	cr_assert(!nvme_on(nv), "no nvme_dir");
	nvme_destroy(nv);

	char where[128];
	snprintf(where, sizeof(where), "/proc/self/status/n%%n"); /* under a file */
	nv = tier(1 << 20, where);
	cr_assert(!nvme_on(nv), "a folder that cannot be made");
	cr_assert_eq(nvme_cap(nv), 0);
	nvme_destroy(nv);
	nvme_destroy(NULL);
}
