/* The extent planner (see extent.h): pure functions, any thread. */
#include "extent_plan.h"

#include <string.h>

#include "../util/util.h"

/* The farthest wanted candidate right of p->last whose joining (with every
 * wanted one between) keeps the extent within the bounds; it and those
 * between join. true when the extent grew. */
static bool grow_right(const struct extent_cand *c, uint32_t n, const struct extent_opts *o,
		       struct extent_plan *p, bool *take)
{
	uint64_t lo = p->lo, hi = p->hi, u = p->useful;
	uint32_t best = p->last;
	uint64_t best_hi = hi, best_lo = lo, best_u = u;
	for (uint32_t j = p->last + 1; j < n; j++) {
		if (c[j].lo >= lo && c[j].lo - lo >= o->max_bytes)
			break; /* sorted by lo: every later one makes it too long */
		if (!c[j].want)
			continue;
		uint64_t gap = c[j].lo > hi ? c[j].lo - hi : 0;
		if (gap > o->gap_max)
			break;
		hi = MAX(hi, c[j].hi);
		lo = MIN(lo, c[j].lo);
		u += c[j].useful;
		if (hi - lo > o->max_bytes)
			break;
		if (extent_amp_ok(hi - lo, u, o->max_amp)) {
			best = j;
			best_lo = lo;
			best_hi = hi;
			best_u = u;
		}
	}
	if (best == p->last)
		return false;
	for (uint32_t j = p->last + 1; j <= best; j++)
		if (c[j].want) {
			take[j] = true;
			p->taken++;
		}
	p->last = best;
	p->lo = best_lo;
	p->hi = best_hi;
	p->useful = best_u;
	return true;
}

static bool grow_left(const struct extent_cand *c, const struct extent_opts *o, struct extent_plan *p,
		      bool *take)
{
	uint64_t lo = p->lo, hi = p->hi, u = p->useful;
	uint32_t best = p->first;
	uint64_t best_hi = hi, best_lo = lo, best_u = u;
	for (uint32_t i = p->first; i-- > 0;) {
		if (hi > c[i].lo && hi - c[i].lo > o->max_bytes)
			break; /* sorted by lo: every earlier one makes it too long */
		if (!c[i].want)
			continue;
		uint64_t gap = lo > c[i].hi ? lo - c[i].hi : 0;
		if (gap > o->gap_max)
			break;
		hi = MAX(hi, c[i].hi);
		lo = MIN(lo, c[i].lo);
		u += c[i].useful;
		if (hi - lo > o->max_bytes)
			break;
		if (extent_amp_ok(hi - lo, u, o->max_amp)) {
			best = i;
			best_lo = lo;
			best_hi = hi;
			best_u = u;
		}
	}
	if (best == p->first)
		return false;
	for (uint32_t i = best; i < p->first; i++)
		if (c[i].want) {
			take[i] = true;
			p->taken++;
		}
	p->first = best;
	p->lo = best_lo;
	p->hi = best_hi;
	p->useful = best_u;
	return true;
}

/* The next wanted candidate from i in direction d (+1, -1) that can still
 * join p's range within max_bytes and gap_max; -1 when none (candidates are
 * sorted by lo: past the first that cannot, none can). */
static int64_t next_joinable(const struct extent_cand *c, uint32_t n, int64_t i, int d,
			     const struct extent_opts *o, const struct extent_plan *p)
{
	for (; i >= 0 && i < (int64_t)n; i += d) {
		uint64_t lo = MIN(p->lo, c[i].lo), hi = MAX(p->hi, c[i].hi);
		uint64_t gap = d > 0 ? (c[i].lo > p->hi ? c[i].lo - p->hi : 0)
				     : (p->lo > c[i].hi ? p->lo - c[i].hi : 0);
		if (hi - lo > o->max_bytes || gap > o->gap_max)
			return -1;
		if (c[i].want)
			return i;
	}
	return -1;
}

/* Both sides at once, nearest wanted candidate first (the one adding fewer
 * bytes; the right one on a tie), through ranges that break the
 * amplification bound: the best range that meets it on the way. Finds what
 * neither side reaches alone: samples of an npz member read whole, wanted
 * on both sides of the trigger. */
static struct extent_plan grow_joint(const struct extent_cand *c, uint32_t n, const struct extent_opts *o,
				  struct extent_plan p)
{
	struct extent_plan best = p;
	for (;;) {
		int64_t r = next_joinable(c, n, (int64_t)p.last + 1, 1, o, &p);
		int64_t l = next_joinable(c, n, (int64_t)p.first - 1, -1, o, &p);
		if (r < 0 && l < 0)
			break;
		uint64_t add_r = r < 0 ? UINT64_MAX : MAX(p.hi, c[r].hi) - MIN(p.lo, c[r].lo);
		uint64_t add_l = l < 0 ? UINT64_MAX : MAX(p.hi, c[l].hi) - MIN(p.lo, c[l].lo);
		int64_t i = add_r <= add_l ? r : l;
		p.lo = MIN(p.lo, c[i].lo);
		p.hi = MAX(p.hi, c[i].hi);
		p.useful += c[i].useful;
		p.taken++;
		if (i > (int64_t)p.last)
			p.last = (uint32_t)i;
		else
			p.first = (uint32_t)i;
		if (extent_amp_ok(p.hi - p.lo, p.useful, o->max_amp) && p.useful > best.useful)
			best = p;
	}
	return best;
}

struct extent_plan extent_plan(const struct extent_cand *c, uint32_t n, uint32_t t,
			 const struct extent_opts *o, bool *take)
{
	memset(take, 0, n * sizeof(*take));
	take[t] = true;
	struct extent_plan p = { .lo = c[t].lo, .hi = c[t].hi, .useful = c[t].useful, .taken = 1,
			      .first = t, .last = t };
	if (c[t].hi < c[t].lo || c[t].hi - c[t].lo > o->max_bytes)
		return p; /* longer than an extent: read alone */
	const struct extent_plan alone = p;
	/* each side to its farthest feasible point in turn, until neither moves:
	 * a side that joined brings useful bytes that may let the other bridge
	 * more */
	bool grew = true;
	while (grew) {
		grew = grow_right(c, n, o, &p, take);
		grew = grow_left(c, o, &p, take) || grew;
	}
	/* both sides at once when that serves more (ties: the forward one) */
	struct extent_plan q = grow_joint(c, n, o, alone);
	if (q.useful > p.useful) {
		p = q;
		memset(take, 0, n * sizeof(*take));
		for (uint32_t i = p.first; i <= p.last; i++)
			take[i] = c[i].want || i == t;
	}
	return p;
}
