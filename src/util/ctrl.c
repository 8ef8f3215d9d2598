#include "ctrl.h"

#include <errno.h>

int ctrl_take_releases(uint32_t prod, uint32_t *cons, const uint32_t *entries, uint32_t nslots,
		       const struct ctrl_slots *slots, const char **why)
{
	uint32_t c = *cons;
	if (prod - c > nslots) {
		*why = "release ring index out of range";
		return -EPROTO;
	}
	int n = 0;
	while (c != prod) {
		/* one read of the entry: the trainer may rewrite it meanwhile */
		uint32_t idx = *(const volatile uint32_t *)&entries[c % nslots];
		c++;
		if (idx >= nslots || !slots->held(slots->ctx, idx)) {
			*cons = c;
			*why = "released a batch slot it does not hold";
			return -EPROTO;
		}
		slots->release(slots->ctx, idx);
		n++;
	}
	*cons = c;
	return n;
}
