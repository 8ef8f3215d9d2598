/* The extent planner (see extent.h): pure functions, any thread. */
#include "extent.h"

#include <string.h>

#include "util.h"

/* The farthest wanted candidate right of p->last whose joining (with every
 * wanted one between) keeps the extent within the bounds; it and those
 * between join. true when the extent grew. */
static bool grow_right(const struct ext_cand *c, uint32_t n, const struct ext_opts *o,
		       struct ext_plan *p, bool *take)
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
		if (ext_amp_ok(hi - lo, u, o->max_amp)) {
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

static bool grow_left(const struct ext_cand *c, const struct ext_opts *o, struct ext_plan *p,
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
		if (ext_amp_ok(hi - lo, u, o->max_amp)) {
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

struct ext_plan ext_plan(const struct ext_cand *c, uint32_t n, uint32_t t,
			 const struct ext_opts *o, bool *take)
{
	memset(take, 0, n * sizeof(*take));
	take[t] = true;
	struct ext_plan p = { .lo = c[t].lo, .hi = c[t].hi, .useful = c[t].useful, .taken = 1,
			      .first = t, .last = t };
	if (c[t].hi < c[t].lo || c[t].hi - c[t].lo > o->max_bytes)
		return p; /* longer than an extent: read alone */
	/* each side to its farthest feasible point in turn, until neither moves:
	 * a side that joined brings useful bytes that may let the other bridge
	 * more */
	bool grew = true;
	while (grew) {
		grew = grow_right(c, n, o, &p, take);
		grew = grow_left(c, o, &p, take) || grew;
	}
	return p;
}
