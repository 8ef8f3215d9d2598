/* The access sequence (sampler.h) and the public sampler and checkpoint
 * record API of libseer (seer.h). A seer_sampler_t is used by one thread at
 * a time; failures return a negative code with err_set(), never abort. */
#include "sampler.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sampler_elastic.h"
#include "seer.h"
#include "../common/base.h"

#define GOLDEN 0x9e3779b97f4a7c15ull

/* SplitMix64's output function (Steele, Lea, Flood 2014). */
static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Counter-based stream: value i of the stream keyed by k is mix64(k + i*GOLDEN). */
struct ctr_rng {
	uint64_t key;
	uint64_t ctr;
};

static inline uint64_t rng_next(struct ctr_rng *r)
{
	return mix64(r->key + (++r->ctr) * GOLDEN);
}

/* Uniform in [0, range), unbiased (Lemire 2019, "Fast random integer
 * generation in an interval"). */
static inline uint64_t rng_below(struct ctr_rng *r, uint64_t range)
{
	unsigned __int128 m = (unsigned __int128)rng_next(r) * range;
	uint64_t lo = (uint64_t)m;
	if (lo < range) {
		uint64_t t = -range % range;
		while (lo < t) {
			m = (unsigned __int128)rng_next(r) * range;
			lo = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}

void sampler_permute(uint64_t seed, uint64_t epoch, uint64_t n, uint32_t *out)
{
	struct ctr_rng r = { mix64(mix64(seed ^ 0x5eed5eed5eed5eedull) + (epoch + 1) * GOLDEN), 0 };
	for (uint64_t i = 0; i < n; i++)
		out[i] = (uint32_t)i;
	for (uint64_t i = n; i > 1; i--) {
		uint64_t j = rng_below(&r, i);
		uint32_t t = out[i - 1];
		out[i - 1] = out[j];
		out[j] = t;
	}
}

void sampler_epoch_order(const struct sampler_shape *sh, uint64_t epoch, uint32_t *out)
{
	if (sh->shuffle) {
		sampler_permute(sh->seed, epoch, sh->n, out);
	} else {
		for (uint64_t i = 0; i < sh->n; i++)
			out[i] = (uint32_t)i;
	}
}

int sampler_shape_init(struct sampler_shape *sh, uint64_t n, uint64_t seed, uint32_t world,
		   uint32_t batch, bool drop_last, bool shuffle)
{
	memset(sh, 0, sizeof(*sh));
	if (n == 0 || world == 0 || batch == 0 || n > UINT32_MAX)
		return -EINVAL;
	sh->n = n;
	sh->seed = seed;
	sh->world = world;
	sh->batch = batch;
	sh->drop_last = drop_last;
	sh->shuffle = shuffle;
	/* DistributedSampler: num_samples = floor(n / world) when dropping,
	 * ceil(n / world) when padding. */
	sh->per_rank = drop_last ? n / world : (n + world - 1) / world;
	/* DataLoader batching of each rank's share. */
	sh->bpe = drop_last ? sh->per_rank / batch : (sh->per_rank + batch - 1) / batch;
	if (drop_last)
		sh->per_rank = sh->bpe * batch; /* the dropped partial batch is not read */
	return sh->bpe == 0 ? -ERANGE : 0;
}

int sampler_cache_init(struct sampler_cache *c, const struct sampler_shape *sh)
{
	memset(c, 0, sizeof(*c));
	c->sh = *sh;
	for (int i = 0; i < SMP_CACHE_WAYS; i++) {
		c->perm[i] = malloc(sh->n * sizeof(uint32_t));
		if (!c->perm[i]) {
			sampler_cache_free(c);
			return -ENOMEM;
		}
		c->epoch[i] = UINT64_MAX;
	}
	return 0;
}

void sampler_cache_free(struct sampler_cache *c)
{
	for (int i = 0; i < SMP_CACHE_WAYS; i++) {
		free(c->perm[i]);
		c->perm[i] = NULL;
	}
}

const uint32_t *sampler_cache_epoch(struct sampler_cache *c, uint64_t epoch)
{
	int victim = 0;
	for (int i = 0; i < SMP_CACHE_WAYS; i++) {
		/* used == 0: never filled (its epoch field is only a placeholder) */
		if (c->used[i] != 0 && c->epoch[i] == epoch) {
			c->used[i] = ++c->tick;
			return c->perm[i];
		}
		if (c->used[i] < c->used[victim])
			victim = i;
	}
	if (!c->perm[victim])
		return NULL;
	sampler_epoch_order(&c->sh, epoch, c->perm[victim]);
	c->epoch[victim] = epoch;
	c->used[victim] = ++c->tick;
	return c->perm[victim];
}

int sampler_batch(struct sampler_cache *c, uint64_t epoch, uint32_t rank, uint64_t step, uint32_t *ids)
{
	const struct sampler_shape *sh = &c->sh;
	if (rank >= sh->world || step >= sh->bpe)
		return -ERANGE;
	const uint32_t *order = sampler_cache_epoch(c, epoch);
	if (!order)
		return -ENOMEM;
	uint32_t len = sampler_batch_len(sh, step);
	for (uint32_t i = 0; i < len; i++)
		ids[i] = sampler_at(sh, order, sampler_position(sh, rank, step, i));
	return (int)len;
}

/* ---- public API -------------------------------------------------------- */

/* A sampler is the new job's plain order (cache) plus its resume plan (a
 * fresh sampler's plan starts at 0:0 and has no re-sharded epoch). */
struct seer_sampler {
	struct sampler_cache cache;
	struct sampler_resume rs;
	uint32_t *tmp;
};

struct seer_record {
	struct sampler_record r;
};

static int sampler_make(const struct sampler_job *job, const struct sampler_record *rec,
			seer_sampler_t **out)
{
	*out = NULL;
	struct sampler_shape sh;
	int rc = sampler_shape_init(&sh, job->n, job->seed, job->world, job->batch, job->drop_last,
				job->shuffle);
	if (rc == -EINVAL) {
		err_set("sampler: nsamples, world and batch must be > 0 and nsamples < 2^32");
		return rc;
	}
	if (rc == -ERANGE) {
		err_set("sampler: %llu samples over %u trainers give no full batch of %u",
			(unsigned long long)job->n, job->world, job->batch);
		return rc;
	}
	seer_sampler_t *s = calloc(1, sizeof(*s));
	if (!s)
		goto oom;
	s->tmp = malloc(sizeof(uint32_t) * job->batch);
	if (!s->tmp)
		goto oom_s;
	if (sampler_cache_init(&s->cache, &sh) != 0)
		goto oom_tmp;
	rc = sampler_resume_init(&s->rs, job, rec);
	if (rc < 0) {
		seer_sampler_free(s);
		return rc;
	}
	*out = s;
	return 0;
oom_tmp:
	free(s->tmp);
oom_s:
	free(s);
oom:
	err_set("sampler: out of memory for %llu samples", (unsigned long long)job->n);
	return -ENOMEM;
}

static struct sampler_job job_of(uint64_t nsamples, uint64_t seed, uint32_t world, uint32_t batch,
			     unsigned flags, uint64_t dataset_hash)
{
	return (struct sampler_job){ .n = nsamples, .seed = seed, .dataset_hash = dataset_hash,
				 .world = world, .batch = batch,
				 .drop_last = flags & SEER_SAMPLER_DROP_LAST,
				 .shuffle = !(flags & SEER_SAMPLER_NO_SHUFFLE) };
}

SEER_API seer_sampler_t *seer_sampler_new(uint64_t nsamples, uint64_t seed, uint32_t world,
					  uint32_t batch, unsigned flags)
{
	struct sampler_job job = job_of(nsamples, seed, world, batch, flags, 0);
	seer_sampler_t *s;
	return sampler_make(&job, NULL, &s) == 0 ? s : NULL;
}

SEER_API void seer_sampler_free(seer_sampler_t *s)
{
	if (!s)
		return;
	sampler_resume_free(&s->rs);
	sampler_cache_free(&s->cache);
	free(s->tmp);
	free(s);
}

SEER_API uint64_t seer_sampler_batches_per_epoch(const seer_sampler_t *s)
{
	return s ? s->cache.sh.bpe : 0;
}

SEER_API int seer_sampler_batch(seer_sampler_t *s, uint64_t epoch, uint32_t rank, uint64_t step,
				uint64_t *ids)
{
	if (!s || !ids) {
		err_set("seer_sampler_batch: %s is NULL", s ? "ids" : "the sampler");
		return -EINVAL;
	}
	int n;
	if (epoch < s->rs.epoch) {
		err_set("sampler: epoch %llu ran before this job's resume point (epoch %llu)",
			(unsigned long long)epoch, (unsigned long long)s->rs.epoch);
		return -ERANGE;
	}
	if (s->rs.elastic && epoch == s->rs.epoch) {
		const uint32_t *order = sampler_cache_epoch(&s->cache, epoch);
		if (!order)
			return -ENOMEM;
		n = sampler_resume_batch(&s->rs, order, rank, step, s->tmp);
	} else {
		n = sampler_batch(&s->cache, epoch, rank, step, s->tmp);
	}
	if (n < 0)
		err_set("sampler: no batch %llu of rank %u in epoch %llu (%llu batches per epoch, "
			"world size %u)", (unsigned long long)step, rank, (unsigned long long)epoch,
			(unsigned long long)seer_sampler_epoch_batches(s, epoch), s->cache.sh.world);
	for (int i = 0; i < n; i++)
		ids[i] = s->tmp[i];
	return n;
}

/* ==== checkpoint records and elastic resume ================================ */

SEER_API int seer_sampler_resume(uint64_t nsamples, uint64_t seed, uint32_t world, uint32_t batch,
				 unsigned flags, uint64_t dataset_hash, const seer_record_t *rec,
				 seer_sampler_t **out)
{
	struct sampler_job job = job_of(nsamples, seed, world, batch, flags, dataset_hash);
	return sampler_make(&job, rec ? &rec->r : NULL, out);
}

SEER_API void seer_sampler_start(const seer_sampler_t *s, uint64_t *epoch, uint64_t *step)
{
	*epoch = s->rs.epoch;
	*step = s->rs.step;
}

SEER_API uint64_t seer_sampler_epoch_batches(const seer_sampler_t *s, uint64_t epoch)
{
	return sampler_resume_batches(&s->rs, &s->cache.sh, epoch);
}

static int record_out(struct sampler_record *r, seer_record_t **out)
{
	*out = malloc(sizeof(**out));
	if (!*out) {
		sampler_record_free(r);
		err_set("checkpoint record: out of memory");
		return -ENOMEM;
	}
	(*out)->r = *r;
	return 0;
}

SEER_API int seer_sampler_record(const seer_sampler_t *s, uint32_t rank, uint64_t epoch,
				 uint64_t steps, seer_record_t **out)
{
	struct sampler_record r;
	*out = NULL;
	int rc = sampler_resume_record(&s->rs, &s->cache.sh, rank, epoch, steps, &r);
	return rc < 0 ? rc : record_out(&r, out);
}

SEER_API int seer_record_check(const seer_record_t *rec, const seer_sampler_t *s)
{
	int rc = sampler_record_check_job(&rec->r, &s->rs.job);
	return rc < 0 ? rc : sampler_record_validate(&rec->r, NULL);
}

SEER_API int64_t seer_record_encode(const seer_record_t *rec, void *buf, size_t cap)
{
	size_t n = sampler_record_size(&rec->r);
	if (buf && cap >= n)
		sampler_record_encode(&rec->r, buf);
	return (int64_t)n;
}

SEER_API int seer_record_decode(const void *buf, size_t len, seer_record_t **out)
{
	struct sampler_record r;
	*out = NULL;
	if (!buf) {
		err_set("checkpoint record: no bytes");
		return -EINVAL;
	}
	int rc = sampler_record_decode(buf, len, &r);
	if (rc == 0 && (rc = sampler_record_validate(&r, NULL)) < 0)
		sampler_record_free(&r);
	return rc < 0 ? rc : record_out(&r, out);
}

SEER_API int seer_record_merge(const seer_record_t *const *recs, size_t n, seer_record_t **out)
{
	*out = NULL;
	const struct sampler_record **in = calloc(n ? n : 1, sizeof(*in));
	if (!in) {
		err_set("checkpoint records: out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		in[i] = &recs[i]->r;
	struct sampler_record r;
	int rc = sampler_record_merge(in, n, &r);
	free(in);
	return rc < 0 ? rc : record_out(&r, out);
}

SEER_API uint64_t seer_record_epoch(const seer_record_t *rec)
{
	return rec->r.epoch;
}

SEER_API void seer_record_describe(const seer_record_t *rec, char *buf, size_t len)
{
	sampler_record_describe(&rec->r, buf, len);
}

SEER_API void seer_record_free(seer_record_t *rec)
{
	if (!rec)
		return;
	sampler_record_free(&rec->r);
	free(rec);
}
