/* A keyed priority queue: smallest key first, FIFO among equal keys (a
 * binary heap of pointers). The I/O pool's read tasks (iopool.c) and the
 * transform stage's jobs (daemon/transform.c) wait in one.
 *
 * Intrusive: a record embeds a struct pq_node and the queue holds pointers
 * to those nodes; the record stays its owner's. No lock: the caller holds
 * the lock that guards the queue. Failure: out of memory growing the heap
 * aborts (xrealloc). */
#ifndef SEER_PQUEUE_H
#define SEER_PQUEUE_H

#include <stdbool.h>
#include <stdint.h>

struct pq_node {
	uint64_t key;   /* priority: smaller comes out first */
	uint64_t seq;   /* FIFO tie-break, set by pq_push */
	int32_t idx;    /* position while queued, -1 otherwise */
};

struct pqueue {
	struct pq_node **heap;
	uint32_t n, cap;
	uint64_t seq;   /* the next node's seq */
};

/* Queue x (its key set by the caller). */
void pq_push(struct pqueue *q, struct pq_node *x);
/* The first node, taken out of the queue (the queue must not be empty). */
struct pq_node *pq_pop(struct pqueue *q);
/* Is x in q now? */
bool pq_queued(const struct pqueue *q, const struct pq_node *x);
/* Lower x's key to `key` if that is earlier: a queued node moves up, any
 * other simply keeps the key. */
void pq_lower(struct pqueue *q, struct pq_node *x, uint64_t key);
/* Take x out if it is queued: true; false when it is not in q. */
bool pq_remove(struct pqueue *q, struct pq_node *x);
/* Release the heap (the nodes are their owners'); q is empty afterwards. */
void pq_free(struct pqueue *q);

#endif /* SEER_PQUEUE_H */
