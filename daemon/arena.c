/* The arena: the one shared-memory segment per daemon that every local
 * trainer maps read-only, and how it is cut up.
 *
 *   header | sample type table | RAM cache | staging | bounce slots
 *
 * The RAM cache holds the planned samples at the plan's offsets (keys, see
 * route.h), this node's owned share then its replicas (src/plan/plan.h: both
 * within the capacity the plan was given; the segment is a memfd, so only
 * the bytes the plan uses, nv.ram_used, ever take memory -- and, from the
 * start, this node's share of the dataset, arena_prefill_cache); staging is
 * split evenly among the node's trainers (each share a staging.c ring,
 * 4 KiB-aligned for O_DIRECT); bounce slots carry NVMe
 * samples on their way to peers (several nodes with an NVMe tier only).
 * Set up on the dispatcher before any other thread exists; afterwards its
 * bytes are written by the I/O threads (each into the span its task names)
 * and the network thread (peer fetches into staging), and read by trainers
 * and the network thread. Staging, when it will be used, is allocated and
 * mapped at plan time (arena_fill_staging). The segment is in the node's
 * reserved 2 MiB huge pages when [cache] huge_pages allows and enough are
 * free (arena_create; docs/design.md "Huge pages"): its size is then
 * rounded up to whole huge pages (memory reserved for it at creation, not
 * at first use). Failure: an arena that cannot be
 * created or sealed stops the daemon with the reason (huge_pages = on
 * without enough free huge pages: the numbers to reserve), and so does one larger
 * than the node's RAM and swap (larger than 90 % of its RAM: a warning);
 * staging too small for [job] max_held batches of the largest samples is
 * refused with the size to set. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "../src/util/topo.h"
#include "../src/util/util.h"
#include "engine_int.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* One node whose RAM cache holds every sample (NVMe copies are staged). */
static bool all_in_ram(const struct engine *e)
{
	return e->plan_ready && e->plan.nnodes == 1 && e->plan.cached_samples == e->cat->nsamples &&
	       e->plan.nvme_used[0] == 0;
}

/* Every sample lives in this node's RAM cache and no batch tensor is made:
 * staging stays unused. */
static bool staging_unused(const struct engine *e)
{
	return all_in_ram(e) && xfs_tensor_bytes(e, e->sh.batch) == 0;
}

/* What a trainer's staging must and should hold: `need`, [job] max_held
 * batches of the largest samples (what it may hold at once, the one it
 * waits for included; 0 when staging stays unused); `mean`, an average
 * batch (`one` the largest sample staged, 0 when only batch tensors are,
 * `max` its size in the dataset, `tensor` the batch tensor). */
struct stage_need {
	uint64_t need, mean, one, max, tensor;
};

static struct stage_need stage_need(const struct engine *e)
{
	const struct catalog *cat = e->cat;
	struct stage_need n = { .max = MAX(cat->max_len, xfs_cached_max(e)) };
	/* staged bytes: files, or decoded images from NVMe and peers */
	n.one = arena_stage_bytes(e, n.max, nvme_on(e->nvme));
	n.tensor = xfs_tensor_bytes(e, e->sh.batch); /* the batch tensor, if any */
	uint64_t held = e->cfg->job.max_held;
	unsigned __int128 need128 = ((unsigned __int128)e->sh.batch * n.one + n.tensor) * held;
	n.mean = arena_stage_bytes(e, cat->total_bytes / MAX(cat->nsamples, 1ull), nvme_on(e->nvme)) *
			 e->sh.batch + n.tensor;
	if (all_in_ram(e)) {
		need128 = (unsigned __int128)n.tensor * held; /* only the batch tensors are staged */
		n.one = 0;
		n.mean = n.tensor;
	}
	n.need = need128 > UINT64_MAX / 4 ? UINT64_MAX / 4 : (uint64_t)need128;
	return n;
}

/* Staging a trainer must have: stage_need's need. That is the refusal. The
 * ring never splits a batch (a batch that does not fit before its end
 * starts over at its base, the skipped tail staying taken until reclaimed),
 * so a trainer holding max_held batches is only sure to get the next one
 * with one more batch of room; below lookahead + max_held average batches a
 * warning says so (batches are then also prepared less far ahead). */
int arena_check_staging(struct engine *e, char *err, size_t errlen)
{
	uint64_t per = e->ar.stage_cap / MAX(e->pl.nlocal, 1u);
	per &= ~(NVME_ALIGN - 1);
	struct stage_need sn = stage_need(e);
	if (sn.need == 0)
		return 0; /* every sample lives in the RAM cache: staging stays unused */
	uint64_t held = e->cfg->job.max_held;
	char a[32], b[32], c[32], d[32];
	if (per < sn.need) {
		char what[96];
		if (sn.one == 0)
			snprintf(what, sizeof(what), "the batch tensor, %s",
				 fmt_size(c, sizeof(c), sn.tensor));
		else
			snprintf(what, sizeof(what), "%u x %s%s", e->sh.batch,
				 fmt_size(c, sizeof(c), sn.max), sn.tensor ? " and the batch tensor" : "");
		unsigned __int128 all = (unsigned __int128)sn.need * MAX(e->pl.nlocal, 1u);
		snprintf(err, errlen,
			 "[cache] staging = %s gives each of the node's %u trainers %s, less than "
			 "[job] max_held = %llu batch%s of the largest samples (%s): set staging "
			 "to at least %s (or lower [job] max_held)",
			 fmt_size(a, sizeof(a), e->ar.stage_cap), e->pl.nlocal, fmt_size(b, sizeof(b), per),
			 (unsigned long long)held, held > 1 ? "es" : "", what,
			 fmt_size(d, sizeof(d), all > UINT64_MAX ? UINT64_MAX : (uint64_t)all));
		return -ENOSPC;
	}
	uint64_t want = e->cfg->prefetch.lookahead + held, mean = sn.mean;
	if (mean > 0 && per / mean < want)
		log_warn("[cache] staging = %s gives each of the node's %u trainers %s, room for "
			 "about %llu average batches, fewer than [prefetch] lookahead + [job] max_held "
			 "= %llu: batches are prepared less far ahead, and a trainer holding max_held "
			 "may be told to release one first (staging = %s would fit them)",
			 fmt_size(a, sizeof(a), e->ar.stage_cap), e->pl.nlocal, fmt_size(b, sizeof(b), per),
			 (unsigned long long)(per / mean), (unsigned long long)want,
			 fmt_size(c, sizeof(c), (unsigned __int128)mean * want * MAX(e->pl.nlocal, 1u) >
				UINT64_MAX ? UINT64_MAX : mean * want * MAX(e->pl.nlocal, 1u)));
	return 0;
}

/* How many trainers of this node share its staging: the rank map's count;
 * before several nodes agree on it, an even spread of the job's ranks (what
 * srun and mpirun give), so a trainer is checked at connect against the
 * share it will get rather than the whole staging. */
static uint32_t staging_ways(const struct engine *e)
{
	if (e->pl.nlocal)
		return e->pl.nlocal;
	if (e->nnodes > 1 && e->world)
		return (e->world + e->nnodes - 1) / e->nnodes;
	return 1;
}

int arena_check_held(struct engine *e, uint32_t held, char *err, size_t errlen)
{
	char a[32], b[32], c[32];
	uint32_t ways = staging_ways(e);
	/* the batches it holds, the one it waits for, two in reclaim */
	if ((uint64_t)held + 3 > e->nslots) {
		snprintf(err, errlen, "this trainer may hold %u batches at once (workers x "
			 "prefetch + kept), more than seerd's %u batch slots per trainer serve: set "
			 "[job] max_held to at least %u", held, e->nslots, held);
		return -ENOSPC;
	}
	struct stage_need sn = stage_need(e);
	if (sn.need == 0 || sn.mean == 0)
		return 0; /* every sample lives in the RAM cache: staging stays unused */
	uint64_t per = (e->ar.stage_cap / ways) & ~(NVME_ALIGN - 1);
	unsigned __int128 avg = (unsigned __int128)sn.mean * ((uint64_t)held + 1);
	unsigned __int128 big = (unsigned __int128)sn.need / MAX(e->cfg->job.max_held, 1ull) *
				((uint64_t)held + 1);
	uint64_t all = avg * ways > UINT64_MAX ? UINT64_MAX : (uint64_t)(avg * ways);
	if (avg > per) {
		snprintf(err, errlen, "this trainer may hold %u batches at once (workers x "
			 "prefetch + kept); [cache] staging = %s gives each of %u trainers %s, %llu "
			 "average batches: set [cache] staging to at least %s", held,
			 fmt_size(a, sizeof(a), e->ar.stage_cap), ways, fmt_size(b, sizeof(b), per),
			 (unsigned long long)(per / sn.mean), fmt_size(c, sizeof(c), all));
		return -ENOSPC;
	}
	if (big > per)
		log_warn("a trainer may hold %u batches at once: its %s share of [cache] staging "
			 "holds them when they are of average size, not %u batches of the largest "
			 "samples (%s): a run of large samples would make it release one first "
			 "(-EDEADLK)", held, fmt_size(a, sizeof(a), per), held + 1,
			 fmt_size(b, sizeof(b), (uint64_t)(big > UINT64_MAX ? UINT64_MAX : big)));
	return 0;
}

/* The ring a trainer cycles through in its share of `per` bytes: all of it,
 * or, when the share is far larger than what the trainer's batches in
 * flight take, twice that -- twice the larger of stage_need's need and
 * lookahead + max_held average batches -- so that the ring's pages are the
 * same few every epoch. Why: a trainer maps every page of its ring before
 * the warm epochs (client/prefault.c), each a trap on the test VM (~5 us):
 * a 16 MiB share is 4,096 of them in the cold epoch of the lustre
 * scenarios, whose batches in flight take ~1 MiB; a 4 MiB staging ran
 * bert-lustre's cold epoch 1.11x faster than 32 MiB (4 alternated pairs,
 * medians 40,500 and 36,300 samples/s). The rest of the share stays unused. */
static uint64_t stage_ring(const struct engine *e, uint64_t per, uint64_t held)
{
	struct stage_need sn = stage_need(e);
	if (sn.need == 0)
		return per; /* staging unused */
	held = MAX(held, e->cfg->job.max_held); /* a trainer may declare more (its HELLO) */
	unsigned __int128 batches = (unsigned __int128)sn.mean * (e->cfg->prefetch.lookahead + held);
	unsigned __int128 need = (unsigned __int128)sn.need / MAX(e->cfg->job.max_held, 1ull) * held;
	unsigned __int128 ring = 2 * (batches > need ? batches : need);
	if (ring >= per)
		return per;
	return MIN(ALIGN_UP((uint64_t)ring, (uint64_t)NVME_ALIGN), per);
}

/* Capacities and offsets of the arena's parts (after nvme_create: bounce
 * slots exist only with a working NVMe tier on several nodes). Returns the
 * arena's size. */
uint64_t arena_layout(struct engine *e)
{
	const struct catalog *cat = e->cat;
	/* no point reserving more cache than the dataset (with alignment) */
	uint64_t ds = xfs_cached_total(e) + cat->nsamples * PLAN_RAM_ALIGN;
	e->ar.cache_cap = ALIGN_UP(MIN(e->cfg->cache.ram, ds), 4096ull);
	e->ar.stage_cap = ALIGN_UP(e->cfg->cache.staging, 4096ull);
	if (nvme_on(e->nvme) && e->nnodes > 1) {
		e->peers.nslots = (uint32_t)MIN(e->cfg->prefetch.io_threads, 16ull);
		e->peers.size = ALIGN_UP(xfs_cached_max(e), (uint64_t)nvme_align(e->nvme));
	}
	uint64_t types_off = ALIGN_UP(sizeof(struct seer_arena_hdr), 64ull);
	uint64_t ntypes = (uint64_t)cat->ntypes + xfs_ntypes(e); /* + the tensor's */
	e->ar.cache_base = ALIGN_UP(types_off + ntypes * sizeof(struct seer_wire_type), 4096ull);
	e->ar.stage_base = e->ar.cache_base + e->ar.cache_cap;
	e->peers.base = e->ar.stage_base + e->ar.stage_cap;
	return e->peers.base + (uint64_t)e->peers.nslots * e->peers.size;
}

/* This node's memory: RAM (or a smaller cgroup v2 limit) and swap. */
static void node_memory(uint64_t *ram, uint64_t *swap, bool *cgroup)
{
	struct sysinfo si;
	*ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGE_SIZE);
	*swap = sysinfo(&si) == 0 ? (uint64_t)si.totalswap * si.mem_unit : 0;
	*cgroup = false;
	FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
	unsigned long long lim;
	if (f && fscanf(f, "%llu", &lim) == 1 && lim < *ram) {
		*ram = lim;
		*cgroup = true;
	}
	if (f)
		fclose(f);
}

int arena_check_memory(const struct engine *e, uint64_t size, char *err, size_t errlen)
{
	uint64_t ram, swap;
	bool cg;
	node_memory(&ram, &swap, &cg);
	if (ram == 0)
		return 0;
	char a[32], b[32], c[32], d[32], f[32];
	char what[200];
	snprintf(what, sizeof(what), "the arena, %s ([cache] ram %s, of which the dataset fills %s, "
		 "+ [cache] staging %s)", fmt_size(a, sizeof(a), size),
		 fmt_size(b, sizeof(b), e->cfg->cache.ram), fmt_size(c, sizeof(c), e->ar.cache_cap),
		 fmt_size(d, sizeof(d), e->ar.stage_cap));
	if (size > ram && size - ram > swap) {
		snprintf(err, errlen, "%s is more than this node's memory (%s %s + swap %s): it could "
			 "never be backed; lower [cache] ram or [cache] staging", what,
			 cg ? "cgroup limit" : "RAM", fmt_size(a, sizeof(a), ram),
			 fmt_size(f, sizeof(f), swap));
		return -ENOMEM;
	}
	if (size > ram / 10 * 9)
		log_warn("%s is more than 90%% of this node's %s (%s): the trainers and the system "
			 "need memory too; lower [cache] ram or [cache] staging", what,
			 cg ? "cgroup limit" : "RAM", fmt_size(a, sizeof(a), ram));
	return 0;
}

/* The node's default huge page size and its pool (/proc/meminfo): 0s when
 * the kernel has none. */
static void huge_pool(uint64_t *size, uint64_t *nfree, uint64_t *total)
{
	*size = *nfree = *total = 0;
	FILE *f = fopen("/proc/meminfo", "r");
	if (!f)
		return;
	char line[128];
	unsigned long long v;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "HugePages_Total: %llu", &v) == 1)
			*total = v;
		else if (sscanf(line, "HugePages_Free: %llu", &v) == 1)
			*nfree = v;
		else if (sscanf(line, "Hugepagesize: %llu kB", &v) == 1)
			*size = v << 10;
	}
	fclose(f);
}

/* The memfd: in huge pages when [cache] huge_pages allows and the pool has
 * enough free (another daemon may take them first: the creation reserves
 * them or fails, and auto then falls back), else in ordinary pages. Why:
 * under a hypervisor that shadows page tables (the development VM), every
 * 4 KiB page costs the daemon and each trainer a trap at its first access;
 * a 256 MiB segment there: 836 ms to write at first, 97 ms for a second
 * process to map and read a byte per page -- 46 ms and 5.7 ms in huge
 * pages (docs/results.md, "Huge pages"). */
static int arena_segment(struct engine *e, uint64_t size, char *err, size_t errlen)
{
	enum config_coalesce want = config_huge_pages(e->cfg);
	uint64_t hsz, hfree, htot;
	huge_pool(&hsz, &hfree, &htot);
	int rc = -ENOMEM;
	uint64_t need = hsz ? (size + hsz - 1) / hsz : 0;
	if (want != CFG_COALESCE_OFF && hsz && hfree >= need)
		rc = shm_create_huge(&e->ar.seg, "seer-arena", size, hsz);
	char a[32], b[32], why[160];
	if (!hsz)
		snprintf(why, sizeof(why), "this kernel offers no huge pages (no Hugepagesize in "
			 "/proc/meminfo)");
	else if (rc != -ENOMEM || hfree >= need) /* enough free, yet refused */
		snprintf(why, sizeof(why), "creating it in %s huge pages failed: %s",
			 fmt_size(b, sizeof(b), hsz), strerror(-rc));
	else
		snprintf(why, sizeof(why), "it needs %llu huge pages of %s, this node has %llu free "
			 "of %llu reserved", (unsigned long long)need, fmt_size(b, sizeof(b), hsz),
			 (unsigned long long)hfree, (unsigned long long)htot);
	if (rc != 0 && want == CFG_COALESCE_ON) {
		snprintf(err, errlen, "[cache] huge_pages = on: the %s arena: %s; reserve more "
			 "(sysctl vm.nr_hugepages, as root) or set [cache] huge_pages = auto",
			 fmt_size(a, sizeof(a), size), why);
		return rc;
	}
	if (rc == 0) {
		log_info("arena in %s huge pages: %llu of the node's %llu free", fmt_size(a, sizeof(a),
			 hsz), (unsigned long long)need, (unsigned long long)hfree);
		return 0;
	}
	if (want == CFG_COALESCE_AUTO && hsz)
		log_info("arena in 4 KiB pages: %s (sysctl vm.nr_hugepages; [cache] huge_pages)",
			 why);
	if ((rc = shm_create(&e->ar.seg, "seer-arena", size)) != 0)
		snprintf(err, errlen, "cannot create the %llu-byte arena: %s",
			 (unsigned long long)size, strerror(-rc));
	return rc;
}

/* The segment itself: created, bound to the NIC's NUMA node when known,
 * header and type table written, then sealed read-only for trainers. */
int arena_create(struct engine *e, uint64_t size, char *err, size_t errlen)
{
	const struct catalog *cat = e->cat;
	int rc = arena_segment(e, size, err, errlen);
	if (rc != 0)
		return rc;
	size = e->ar.seg.size; /* (rounded up to whole huge pages) */
	e->ar.base = e->ar.seg.base;
	if (e->topo) {
		int numa = topo_bind_memory(e->topo, e->ar.base, size);
		if (numa >= 0)
			log_info("arena bound to NUMA node %d (the NIC's)", numa);
	}
	uint64_t types_off = ALIGN_UP(sizeof(struct seer_arena_hdr), 64ull);
	struct seer_arena_hdr *h = (void *)e->ar.base;
	*h = (struct seer_arena_hdr){
		.magic = SEER_MAGIC_ARENA, .version = SEER_PROTO_VERSION,
		.creator_pid = (uint32_t)getpid(), .size = size, .types_off = types_off,
		.ntypes = cat->ntypes + xfs_ntypes(e), .data_off = e->ar.cache_base,
	};
	memcpy(e->ar.base + types_off, cat->types, cat->ntypes * sizeof(struct seer_wire_type));
	if (xfs_ntypes(e)) /* one sample's tensor, after the dataset's types */
		xfs_type(e, (struct seer_wire_type *)(e->ar.base + types_off) + cat->ntypes);
	if ((rc = shm_seal_readonly(&e->ar.seg)) != 0) {
		snprintf(err, errlen, "cannot seal the arena read-only for trainers: %s",
			 strerror(-rc));
		return rc;
	}
	return 0;
}

/* Pages [off, off + len) of the arena allocated and mapped now (what = the
 * part, for the messages), then primed (mem_prime_pages): a byte per page
 * rewritten with its own value from user mode, then read by the kernel
 * (nothing else uses these pages yet). Why: under a hypervisor that shadows
 * the guest's page tables (the development VM), a page the kernel populated
 * still traps on the process's first user-mode write to it -- 10-13 us a
 * page, measured (2 MiB of uint8 samples transposed into 512 random arena
 * pages: 6.5 ms, 0.5 ms once the pages had been written) -- and, apart from
 * that, on the kernel's first access to it through this mapping: a recv of
 * a peer's sample into staging, a send of a cached sample to a peer, a pread
 * into the cache. Loopback TCP from and into such pages ran at ~450 MB/s
 * against 3-4 GB/s once touched; in the ResNet-50 scenario's warm epochs the
 * network threads took 24% of the machine's CPU, 9-11% with the kernel's
 * pass (docs/results.md, "The kernel's own first touch"). So the I/O and
 * network threads paid it inside the epochs; here it is paid at start
 * (about 5 us a page for each pass on that VM, 2.6 s per GiB for both; a
 * few ms per GiB on bare metal or hardware-assisted paging, where nothing
 * traps). */
static void arena_populate(struct engine *e, uint64_t off, uint64_t len, const char *what)
{
	uint64_t t0 = now_ns();
	int rc = madvise(e->ar.base + off, len, MADV_POPULATE_WRITE);
	if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) /* before Linux 5.14 */
		rc = fallocate(e->ar.seg.fd, 0, (off_t)off, (off_t)len);
	if (rc != 0) {
		log_warn("could not allocate the %s ahead (%s): its pages appear at first use", what,
			 strerror(errno));
		return;
	}
	uint64_t t1 = now_ns();
	mem_prime_pages(e->ar.base + off, len);
	log_debug("%s: %llu MiB allocated and mapped in %.1f ms, primed in %.1f ms", what,
		  (unsigned long long)(len >> 20), (double)(t1 - t0) / 1e6,
		  (double)(now_ns() - t1) / 1e6);
}

/* Staging's pages, allocated and mapped here before the first sample lands
 * in them. Trainers map only the arena pages that exist (client/prefault.c:
 * a read of a hole would allocate one), so staging made now is mapped by each
 * trainer while it waits for the cold epoch; made by its first use, it was
 * faulted in by the warm epochs that first carried peers' samples or samples
 * outside the cache (issue 17: ~900 faults per trainer in epoch 2 of the
 * ResNet-50 scenario). The daemon's own mapping is populated too, so the I/O
 * and network threads take no fault on it. Costs zeroing the staging bytes
 * once, at plan time. Failure: logged; pages then appear at first use. */
static void arena_fill_staging(struct engine *e, uint64_t len)
{
	if (staging_unused(e) || len <= e->ar.stage_filled)
		return;
	arena_populate(e, e->ar.stage_base, len, "staging");
	e->ar.stage_filled = len;
}

/* Staging made at start, before any trainer attaches, when it will surely
 * be used (several nodes: peers' samples land in it; or a dataset larger
 * than this node's RAM cache): arena_split_staging's fill then finds the
 * pages and the cold epoch does not wait for the zeroing (15-41 ms for 32
 * MiB between the trainers' attach and the rank map here, issue 13). */
void arena_prefill_staging(struct engine *e)
{
	if (e->nnodes > 1 || e->cat->total_bytes > e->ar.cache_cap)
		arena_fill_staging(e, e->ar.stage_cap);
}

/* The RAM cache's first pages, allocated and mapped at start: as many as
 * this node's share of the dataset needs (the plan puts its owned samples
 * first, replicas after them), at most PREFILL_CACHE_MAX. Filled by its
 * first write instead, each 4 KiB page cost a page fault in the I/O thread
 * that cut a sample into it -- 12.7 us per fault on the test VM against
 * 1 us per page populated at once (issue 13: ~2,300 faults per node in a
 * 0.2 s cold epoch of 19 MB on 2 nodes) -- and, on that VM, populated but
 * not yet written from user mode, a trap of about the same cost (see
 * arena_populate). Costs the zeroing and that write at start, and memory
 * the plan would take anyway once the cache fills. Failure: logged; pages
 * then appear at first use. */
#define PREFILL_CACHE_MAX (1ull << 30)
void arena_prefill_cache(struct engine *e)
{
	uint64_t share = e->cat->total_bytes / MAX(e->nnodes, 1u) + 1;
	uint64_t len = ALIGN_UP(MIN(MIN(share, e->ar.cache_cap), PREFILL_CACHE_MAX), 4096ull);
	if (len > 0)
		arena_populate(e, e->ar.cache_base, len, "RAM cache");
}

void arena_trainer_ring(struct engine *e, struct trainer *t)
{
	if (!e->ar.stage_split)
		return; /* arena_split_staging sizes it from t->held */
	uint64_t per = (e->ar.stage_cap / MAX(e->pl.nlocal, 1u)) & ~(NVME_ALIGN - 1);
	uint64_t ring = stage_ring(e, per, t->held);
	if (ring != t->stg.cap) {
		char a[32];
		stg_init(&t->stg, t->stg.base, ring);
		log_info("staging: trainer rank %u may hold %u batches: its ring is %s",
			 t->rank, t->held, fmt_size(a, sizeof(a), ring));
	}
}

/* Trainer t's share of staging, and the whole of it, into its control
 * region (once split; a session made later gets it at its creation). */
void arena_publish_share(const struct engine *e, struct trainer *t)
{
	if (!t->co || !e->ar.stage_split)
		return;
	t->co->stage_lo = e->ar.stage_base;
	t->co->stage_hi = e->ar.stage_base + e->ar.stage_cap;
	t->co->own_lo = t->stg.base;
	t->co->own_hi = t->stg.base + t->stg.cap;
	atomic_store_explicit(&t->co->stage_set, 1, memory_order_release);
}

/* Each local trainer's share of staging (once the local ranks are known),
 * published in its control region for its prefault: a trainer maps its own
 * share and the RAM cache, not the other trainers' shares (half of staging
 * with 2 trainers a node: 16 MiB each in the lustre scenarios, 128 MiB in
 * ResNet-50's, every page of it a trap on the test VM in the cold epoch). */
void arena_split_staging(struct engine *e)
{
	uint64_t per = (e->ar.stage_cap / MAX(e->pl.nlocal, 1u)) & ~(NVME_ALIGN - 1);
	uint64_t ring = stage_ring(e, per, e->cfg->job.max_held);
	e->ar.stage_split = true;
	for (uint32_t i = 0; i < e->pl.nlocal; i++) {
		struct trainer *t = &e->tr[e->pl.local_ranks[i]];
		stg_init(&t->stg, e->ar.stage_base + per * i, stage_ring(e, per, t->held));
		arena_publish_share(e, t);
	}
	if (ring < per) {
		char a[32], b[32];
		log_info("staging: each trainer's ring is %s of its %s share (twice what its batches "
			 "in flight take)", fmt_size(a, sizeof(a), ring), fmt_size(b, sizeof(b), per));
	}
	arena_fill_staging(e, per * e->pl.nlocal);
}

