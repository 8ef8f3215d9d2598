/* The keyed priority queue (pqueue.h): a binary heap of node pointers, each
 * node knowing its position so that it can move up or leave the queue. */
#include "pqueue.h"

#include <stdlib.h>

#include "util.h"

static bool before(const struct pqueue_node *a, const struct pqueue_node *b)
{
	return a->key < b->key || (a->key == b->key && a->seq < b->seq);
}

static void heap_set(struct pqueue *q, uint32_t i, struct pqueue_node *x)
{
	q->heap[i] = x;
	x->idx = (int32_t)i;
}

static void sift_up(struct pqueue *q, uint32_t i, struct pqueue_node *x)
{
	while (i > 0) {
		uint32_t up = (i - 1) / 2;
		if (!before(x, q->heap[up]))
			break;
		heap_set(q, i, q->heap[up]);
		i = up;
	}
	heap_set(q, i, x);
}

void pqueue_push(struct pqueue *q, struct pqueue_node *x)
{
	if (q->n == q->cap) {
		q->cap = MAX(q->cap * 2, 256u);
		q->heap = xrealloc(q->heap, q->cap * sizeof(*q->heap));
	}
	x->seq = q->seq++;
	sift_up(q, q->n++, x);
}

struct pqueue_node *pqueue_pop(struct pqueue *q)
{
	struct pqueue_node *top = q->heap[0];
	struct pqueue_node *last = q->heap[--q->n];
	uint32_t i = 0;
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, m = i;
		const struct pqueue_node *best = last;
		if (l < q->n && before(q->heap[l], best))
			m = l, best = q->heap[l];
		if (r < q->n && before(q->heap[r], best))
			m = r;
		if (m == i)
			break;
		heap_set(q, i, q->heap[m]);
		i = m;
	}
	if (q->n > 0)
		heap_set(q, i, last);
	top->idx = -1;
	return top;
}

bool pqueue_queued(const struct pqueue *q, const struct pqueue_node *x)
{
	return x->idx >= 0 && (uint32_t)x->idx < q->n && q->heap[x->idx] == x;
}

void pqueue_lower(struct pqueue *q, struct pqueue_node *x, uint64_t key)
{
	if (key >= x->key)
		return;
	x->key = key;
	if (pqueue_queued(q, x))
		sift_up(q, (uint32_t)x->idx, x);
}

bool pqueue_remove(struct pqueue *q, struct pqueue_node *x)
{
	if (!pqueue_queued(q, x))
		return false;
	uint32_t i = (uint32_t)x->idx;
	struct pqueue_node *last = q->heap[--q->n];
	if (i < q->n) {
		/* the last one takes x's place, then moves up or down */
		sift_up(q, i, last);
		uint32_t at = (uint32_t)last->idx;
		for (;;) {
			uint32_t l = 2 * at + 1, r = l + 1, m = at;
			if (l < q->n && before(q->heap[l], q->heap[m]))
				m = l;
			if (r < q->n && before(q->heap[r], q->heap[m]))
				m = r;
			if (m == at)
				break;
			struct pqueue_node *y = q->heap[m];
			heap_set(q, m, last);
			heap_set(q, at, y);
			at = m;
		}
	}
	x->idx = -1;
	return true;
}

void pqueue_free(struct pqueue *q)
{
	free(q->heap);
	*q = (struct pqueue){ 0 };
}
