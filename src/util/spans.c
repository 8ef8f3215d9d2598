/* First-fit allocation of byte ranges (spans.h). */
#include "spans.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void spans_init(struct spans *s, uint64_t cap)
{
	*s = (struct spans){ 0 };
	if (cap == 0)
		return;
	s->capn = 8;
	s->free = xrealloc(NULL, s->capn * sizeof(*s->free));
	s->free[0] = (struct span){ 0, cap };
	s->n = 1;
}

void spans_fini(struct spans *s)
{
	free(s->free);
	*s = (struct spans){ 0 };
}

int spans_alloc(struct spans *s, uint64_t len, uint64_t *off)
{
	for (uint32_t i = 0; len > 0 && i < s->n; i++) {
		if (s->free[i].len < len)
			continue;
		*off = s->free[i].off;
		s->free[i].off += len;
		s->free[i].len -= len;
		if (s->free[i].len == 0) {
			memmove(&s->free[i], &s->free[i + 1], (s->n - i - 1) * sizeof(*s->free));
			s->n--;
		}
		return 0;
	}
	return -ENOSPC;
}

void spans_free(struct spans *s, uint64_t off, uint64_t len)
{
	uint32_t i = 0; /* the first free range after off */
	while (i < s->n && s->free[i].off < off)
		i++;
	bool left = i > 0 && s->free[i - 1].off + s->free[i - 1].len == off;
	bool right = i < s->n && off + len == s->free[i].off;
	if (left && right) {
		s->free[i - 1].len += len + s->free[i].len;
		memmove(&s->free[i], &s->free[i + 1], (s->n - i - 1) * sizeof(*s->free));
		s->n--;
	} else if (left) {
		s->free[i - 1].len += len;
	} else if (right) {
		s->free[i].off = off;
		s->free[i].len += len;
	} else {
		if (s->n == s->capn) {
			s->capn = s->capn ? s->capn * 2 : 8;
			s->free = xrealloc(s->free, s->capn * sizeof(*s->free));
		}
		memmove(&s->free[i + 1], &s->free[i], (s->n - i) * sizeof(*s->free));
		s->free[i] = (struct span){ off, len };
		s->n++;
	}
}

uint64_t spans_free_bytes(const struct spans *s)
{
	uint64_t t = 0;
	for (uint32_t i = 0; i < s->n; i++)
		t += s->free[i].len;
	return t;
}
