/* A keyed priority queue: smallest key first, FIFO among equal keys (a
 * binary heap of pointers). The I/O pool's read tasks (iopool.c) and the
 * transform stage's jobs (daemon/transform.c) wait in one.
 *
 * Intrusive: a record embeds a struct pqueue_node and the queue holds pointers
 * to those nodes; the record stays its owner's. No lock: the caller holds
 * the lock that guards the queue. Failure: out of memory growing the heap
 * aborts (xrealloc). */
#ifndef SEER_PQUEUE_H
#define SEER_PQUEUE_H

#include <stdbool.h>
#include <stdint.h>

struct pqueue_node {
	uint64_t key;   /* priority: smaller comes out first */
	uint64_t seq;   /* FIFO tie-break, set by pqueue_push */
	int32_t idx;    /* position while queued, -1 otherwise */
};

struct pqueue {
	struct pqueue_node **heap;
	uint32_t n, cap;
	uint64_t seq;   /* the next node's seq */
};

/* Queue x (its key set by the caller). */
void pqueue_push(struct pqueue *q, struct pqueue_node *x);
/* The first node, taken out of the queue (the queue must not be empty). */
struct pqueue_node *pqueue_pop(struct pqueue *q);
/* Is x in q now? */
bool pqueue_queued(const struct pqueue *q, const struct pqueue_node *x);
/* Lower x's key to `key` if that is earlier: a queued node moves up, any
 * other simply keeps the key. */
void pqueue_lower(struct pqueue *q, struct pqueue_node *x, uint64_t key);
/* Take x out if it is queued: true; false when it is not in q. */
bool pqueue_remove(struct pqueue *q, struct pqueue_node *x);
/* Release the heap (the nodes are their owners'); q is empty afterwards. */
void pqueue_free(struct pqueue *q);

#endif /* SEER_PQUEUE_H */
