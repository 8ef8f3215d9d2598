/* Staging ring allocator (see staging.h). Dispatcher thread only; failures
 * are returned (-E2BIG, -ENOSPC, -EINVAL) and change nothing. */
#include "staging.h"

#include <errno.h>

void stg_init(struct stg *s, uint64_t base, uint64_t cap)
{
	*s = (struct stg){ .base = base, .cap = cap };
}

void stg_reset(struct stg *s)
{
	s->vhead = s->vtail = 0;
}

int stg_alloc(struct stg *s, uint64_t need, uint64_t *off)
{
	if (need == 0) {
		*off = s->base;
		return 0;
	}
	if (need > s->cap)
		return -E2BIG;
	uint64_t phys = s->vhead % s->cap;
	uint64_t pad = phys + need > s->cap ? s->cap - phys : 0;
	if (pad && s->vhead == s->vtail) {
		/* empty: start over at the base, skipping nothing (else a batch
		 * bigger than the rest of the ring and than what precedes it
		 * would never fit, with nothing left to reclaim) */
		s->vhead = s->vtail = s->vhead + pad;
		pad = 0;
	}
	if (s->vhead + pad + need - s->vtail > s->cap)
		return -ENOSPC;
	*off = s->base + (s->vhead + pad) % s->cap;
	s->vhead += pad + need;
	return 0;
}

int stg_reclaim(struct stg *s, uint64_t mark)
{
	if (mark < s->vtail || mark > s->vhead)
		return -EINVAL;
	s->vtail = mark;
	return 0;
}
