/* The checkpoint drain's pacing (see drain_pace.h): pure functions. */
#include "drain_pace.h"

const char *drain_mode_name(enum drain_mode m)
{
	static const char *const names[DRAIN_NMODES] = { "idle", "full", "plan", "yield" };
	return m < DRAIN_NMODES ? names[m] : "?";
}

enum drain_mode drain_pace_mode(const struct pfs_outlook *o)
{
	if (o->queued > 0)
		return DRAIN_YIELD;
	if (o->soon_reads > 0)
		return DRAIN_PLAN;
	return DRAIN_FULL;
}

double drain_pace_sleep(enum drain_mode m, uint64_t done, double elapsed, double piece_s,
			uint64_t rate, double share)
{
	double s = 0;
	if (rate) /* never ahead of rate bytes/s since the start */
		s = (double)done / (double)rate - elapsed;
	/* plan: the link is free now (no read queued), so the drain fills the
	 * gap; the next piece's mode says whether a read came meanwhile */
	if (m == DRAIN_YIELD && share > 0 && share < 1 && piece_s > 0) {
		double y = piece_s * (1.0 - share) / share;
		if (y > s)
			s = y;
	}
	return s > 0 ? s : 0;
}
