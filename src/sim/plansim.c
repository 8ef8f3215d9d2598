/* The plan simulator's common parts (see plansim_int.h for the file map):
 * the job check, the access walk and the replay the policies share; seer's
 * policy (src/plan/plan.c's static plan replayed over the job) and the optimum;
 * policy names, the epoch-time bound and lognormal sample sizes.
 *
 * Threads: any; runs are reentrant. Failure: -EINVAL / -ENOMEM, and the
 * result is left empty (plansim.h). */
#define _GNU_SOURCE /* madvise */
#include "plansim_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../util/util.h"

#define HUGE_PAGE (2u << 20)

/* ---- helpers ------------------------------------------------------------ */

/* Large arrays are touched at random: ask for transparent huge pages so the
 * TLB does not dominate. */
void *plansim_big_alloc(size_t bytes)
{
	if (bytes < 4 * (size_t)HUGE_PAGE)
		return malloc(bytes ? bytes : 1);
	size_t sz = ALIGN_UP(bytes, (size_t)HUGE_PAGE);
	void *p = aligned_alloc(HUGE_PAGE, sz);
	if (p)
		madvise(p, sz, MADV_HUGEPAGE); /* advice only: failure is harmless */
	return p;
}

static int job_check(const struct plansim_job *job)
{
	if (!job || !job->len || !job->sh || !job->rank_node || !job->cap || job->epochs == 0 ||
	    job->sh->n == 0 || job->sh->world == 0 || job->sh->per_rank == 0)
		return -EINVAL;
	return plan_check_nodes(job->sh, job->rank_node, job->nnodes);
}

static int result_init(struct plansim_result *r, enum plansim_policy p, const struct plansim_job *job)
{
	memset(r, 0, sizeof(*r));
	r->policy = p;
	r->epochs = job->epochs;
	r->ep = calloc(job->epochs, sizeof(*r->ep));
	if (!r->ep)
		return -ENOMEM;
	for (uint64_t s = 0; s < job->sh->n; s++)
		r->dataset += job->len[s];
	for (uint32_t k = 0; k < job->nnodes; k++)
		r->capacity += job->cap[k].ram + job->cap[k].nvme;
	return 0;
}

void plansim_result_free(struct plansim_result *r)
{
	free(r->ep);
	memset(r, 0, sizeof(*r));
}

int plansim_result_start(const struct plansim_job *job, enum plansim_policy p, struct plansim_result *out)
{
	memset(out, 0, sizeof(*out));
	int rc = job_check(job);
	return rc ? rc : result_init(out, p, job);
}

/* Per-node bytes received from peers: the epoch's maximum goes to ep, the
 * job's per-node sums to tot; recv is cleared for the next epoch. */
static void epoch_close(struct plansim_epoch *ep, uint64_t *recv, uint64_t *tot, uint32_t nnodes)
{
	for (uint32_t k = 0; k < nnodes; k++) {
		ep->peer_max = MAX(ep->peer_max, recv[k]);
		tot[k] += recv[k];
		recv[k] = 0;
	}
}

void plansim_result_finish(struct plansim_result *r, const uint64_t *tot, uint32_t nnodes)
{
	struct plansim_epoch *t = &r->total;
	memset(t, 0, sizeof(*t));
	for (uint64_t e = 0; e < r->epochs; e++) {
		t->demand += r->ep[e].demand;
		t->pfs += r->ep[e].pfs;
		t->fill += r->ep[e].fill;
		t->peer += r->ep[e].peer;
		t->ram += r->ep[e].ram;
		t->nvme += r->ep[e].nvme;
	}
	for (uint32_t k = 0; tot && k < nnodes; k++)
		t->peer_max = MAX(t->peer_max, tot[k]);
}

/* ---- the access sequence in order of need -------------------------------- */
void plansim_walk_free(struct plansim_walk *w)
{
	free(w->order);
	free(w->smp);
	free(w->rank);
	memset(w, 0, sizeof(*w));
}

int plansim_walk_init(struct plansim_walk *w, const struct sampler_shape *sh, bool reads)
{
	memset(w, 0, sizeof(*w));
	w->sh = sh;
	w->nacc = sh->per_rank * sh->world;
	w->order = malloc(sh->n * sizeof(uint32_t));
	if (reads) {
		w->smp = malloc(w->nacc * sizeof(uint32_t));
		w->rank = malloc(w->nacc * sizeof(uint32_t));
	}
	if (!w->order || (reads && (!w->smp || !w->rank))) {
		plansim_walk_free(w);
		return -ENOMEM;
	}
	return 0;
}

void plansim_walk_order(struct plansim_walk *w, uint64_t epoch)
{
	sampler_epoch_order(w->sh, epoch, w->order);
}

void plansim_walk_epoch(struct plansim_walk *w, uint64_t epoch)
{
	const struct sampler_shape *sh = w->sh;
	plansim_walk_order(w, epoch);
	uint64_t t = 0;
	for (uint64_t step = 0; step < sh->bpe; step++) {
		uint32_t blen = sampler_batch_len(sh, step);
		for (uint32_t r = 0; r < sh->world; r++) {
			for (uint32_t i = 0; i < blen; i++, t++) {
				w->smp[t] = plansim_walk_at(w, sampler_position(sh, r, step, i));
				w->rank[t] = r;
			}
		}
	}
}

/* ---- the replay ------------------------------------------------------------ */
int plansim_replay_init(struct plansim_replay *rp, const struct plansim_job *job, enum plansim_policy p,
		   struct plansim_result *out)
{
	memset(rp, 0, sizeof(*rp));
	int rc = plansim_result_start(job, p, out);
	if (rc)
		return rc;
	rp->job = job;
	rp->out = out;
	rp->recv = calloc(job->nnodes, sizeof(uint64_t));
	rp->tot = calloc(job->nnodes, sizeof(uint64_t));
	if (!rp->recv || !rp->tot || plansim_walk_init(&rp->w, job->sh, true) != 0)
		return plansim_replay_end(rp, -ENOMEM);
	return 0;
}

struct plansim_epoch *plansim_replay_epoch(struct plansim_replay *rp, uint64_t e)
{
	plansim_walk_epoch(&rp->w, e);
	return &rp->out->ep[e];
}

void plansim_replay_close(struct plansim_replay *rp, struct plansim_epoch *ep)
{
	epoch_close(ep, rp->recv, rp->tot, rp->job->nnodes);
}

int plansim_replay_end(struct plansim_replay *rp, int rc)
{
	if (rc == 0)
		plansim_result_finish(rp->out, rp->tot, rp->job->nnodes);
	else
		plansim_result_free(rp->out);
	plansim_walk_free(&rp->w);
	free(rp->tot);
	free(rp->recv);
	return rc;
}

/* ---- seer ------------------------------------------------------------------ */

/* Epoch e of seer's plan p; seen: samples read before (epoch 0 only). */
static void seer_epoch(struct plansim_replay *rp, const struct plan *p, uint8_t *seen, uint64_t e)
{
	const struct plansim_job *job = rp->job;
	struct plansim_epoch *ep = plansim_replay_epoch(rp, e);
	for (uint64_t t = 0; t < rp->w.nacc; t++) {
		uint32_t s = rp->w.smp[t];
		uint32_t k = job->rank_node[rp->w.rank[t]];
		uint64_t len = job->len[s];
		ep->demand += len;
		if (e == 0 && !seen[s]) {
			/* first read of the job: from the PFS, filling the owner
			 * if it is this node; another owner loads it too */
			seen[s] = 1;
			ep->pfs += len;
			if (p->tier[s] != PLAN_NONE && p->owner[s] != k) {
				ep->pfs += len;
				ep->fill += len;
			}
			continue;
		}
		if (p->tier[s] == PLAN_NONE) {
			ep->pfs += len;
		} else if (p->owner[s] == k) {
			if (p->tier[s] == PLAN_RAM)
				ep->ram += len;
			else
				ep->nvme += len;
		} else {
			plansim_replay_peer(rp, ep, k, len);
		}
	}
	if (e == 0) {
		/* planned samples nobody read in epoch 0 (drop_last tails):
		 * their owners load them from the PFS */
		for (uint64_t s = 0; s < job->sh->n; s++) {
			if (!seen[s] && p->tier[s] != PLAN_NONE) {
				ep->pfs += job->len[s];
				ep->fill += job->len[s];
			}
		}
	}
	plansim_replay_close(rp, ep);
}

int plansim_seer(const struct plansim_job *job, struct plansim_result *out)
{
	struct plansim_replay rp;
	int rc = plansim_replay_init(&rp, job, PLANSIM_SEER, out);
	if (rc)
		return rc;
	const uint64_t n = job->sh->n;
	struct plan p;
	rc = plan_build_lengths(&p, job->len, n, job->sh, 0, job->rank_node, job->nnodes, job->cap);
	if (rc)
		return plansim_replay_end(&rp, rc);
	uint8_t *seen = calloc(n, 1);
	if (!seen)
		rc = -ENOMEM;
	for (uint64_t e = 0; rc == 0 && e < job->epochs; e++)
		seer_epoch(&rp, &p, seen, e);
	out->held = out->distinct = p.cached_bytes;
	out->spilled = p.spilled;
	free(seen);
	plan_free(&p);
	return plansim_replay_end(&rp, rc);
}

/* ---- the optimum -------------------------------------------------------------- */

int plansim_optimum(const struct plansim_job *job, struct plansim_result *out)
{
	int rc = plansim_result_start(job, PLANSIM_OPTIMUM, out);
	if (rc)
		return rc;
	const struct sampler_shape *sh = job->sh;
	const uint64_t c = MIN(out->dataset, out->capacity);
	const uint64_t nread = sh->per_rank * sh->world;
	struct plansim_walk w = { 0 };
	if (nread != sh->n && plansim_walk_init(&w, sh, false) != 0) {
		plansim_result_free(out);
		return -ENOMEM;
	}
	for (uint64_t e = 0; e < job->epochs; e++) {
		struct plansim_epoch *ep = &out->ep[e];
		uint64_t de = out->dataset; /* bytes of distinct samples read */
		ep->demand = de;
		if (nread != sh->n) {
			plansim_walk_order(&w, e);
			de = 0;
			for (uint64_t p = 0; p < MIN(nread, sh->n); p++)
				de += job->len[w.order[p]];
			ep->demand = de;
			for (uint64_t p = sh->n; p < nread; p++)
				ep->demand += job->len[plansim_walk_at(&w, p)];
		}
		ep->pfs = e == 0 ? de : de > c ? de - c : 0;
	}
	plansim_walk_free(&w);
	out->held = out->distinct = c;
	plansim_result_finish(out, NULL, 0);
	return 0;
}

int plansim_run(const struct plansim_job *job, enum plansim_policy p, struct plansim_result *out)
{
	switch (p) {
	case PLANSIM_SEER: return plansim_seer(job, out);
	case PLANSIM_NOPFS: return plansim_nopfs(job, out);
	case PLANSIM_LRU: return plansim_lru(job, out);
	case PLANSIM_OPTIMUM: return plansim_optimum(job, out);
	default: memset(out, 0, sizeof(*out)); return -EINVAL;
	}
}

/* ---- small things ----------------------------------------------------------------- */

static const char *const policy_names[PLANSIM_NPOLICIES] = { "seer", "nopfs", "lru", "optimum" };

const char *plansim_policy_name(enum plansim_policy p)
{
	return (unsigned)p < PLANSIM_NPOLICIES ? policy_names[p] : "?";
}

int plansim_parse_policies(const char *list, unsigned *mask)
{
	unsigned m = 0;
	const char *s = list;
	while (*s) {
		size_t l = strcspn(s, ",");
		bool ok = false;
		if (l == 3 && strncmp(s, "all", 3) == 0) {
			m |= PLANSIM_ALL;
			ok = true;
		}
		for (unsigned p = 0; p < PLANSIM_NPOLICIES && !ok; p++) {
			if (strlen(policy_names[p]) == l && strncmp(s, policy_names[p], l) == 0) {
				m |= PLANSIM_BIT(p);
				ok = true;
			}
		}
		if (!ok)
			return -EINVAL;
		s += l;
		if (*s == ',')
			s++;
	}
	if (!m)
		return -EINVAL;
	*mask = m;
	return 0;
}

double plansim_epoch_time(const struct plansim_epoch *e, uint64_t steps, double compute_s,
		       double pfs_bw, double net_bw, const char **bound)
{
	double t = compute_s * (double)steps;
	const char *b = "compute";
	if (pfs_bw > 0 && (double)e->pfs / pfs_bw > t) {
		t = (double)e->pfs / pfs_bw;
		b = "pfs";
	}
	if (net_bw > 0 && (double)e->peer_max / net_bw > t) {
		t = (double)e->peer_max / net_bw;
		b = "net";
	}
	if (bound)
		*bound = b;
	return t;
}

static inline uint64_t splitmix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in (0, 1). */
static inline double unit_open(uint64_t x)
{
	return ((double)(x >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

void plansim_lognormal_sizes(uint64_t *len, uint64_t n, double mean, double sd, uint64_t seed)
{
	const double two_pi = 6.283185307179586476925286766559;
	double s2 = log1p((sd / mean) * (sd / mean));
	double mu = log(mean) - s2 / 2, sigma = sqrt(s2);
	uint64_t key = splitmix(seed ^ 0x51a3e5d1f7c2b9a1ull);
	for (uint64_t i = 0; i < n; i++) {
		double u1 = unit_open(splitmix(key + (2 * i + 1) * 0x9e3779b97f4a7c15ull));
		double u2 = unit_open(splitmix(key + (2 * i + 2) * 0x9e3779b97f4a7c15ull));
		double z = sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
		double v = exp(mu + sigma * z);
		len[i] = v < 1.0 ? 1 : v > 1e18 ? (uint64_t)1e18 : (uint64_t)llround(v);
	}
}
