/* Hand-off lists: records that worker threads append and one consumer (the
 * dispatcher) takes whole, with an eventfd that turns readable when the list
 * goes from empty to non-empty. The I/O pool's finished tasks and the
 * network thread's events travel this way.
 *
 * A record starts with a struct handoff_node, in an anonymous union with its
 * own typed `next`, so that consumers walk the taken list with their own
 * type (the two are the same pointer: the node is the record's first member).
 *
 * Threads: any, under the lock that guards the list (handoff_push: held by
 * the caller; handoff_take: taken here). Nothing fails: a read of an eventfd
 * nobody rang returns EAGAIN (it is non-blocking), and a write cannot fail
 * (the counter would have to reach 2^64 - 1). */
#ifndef SEER_HANDOFF_H
#define SEER_HANDOFF_H

#include <pthread.h>
#include <stddef.h>
#include <sys/eventfd.h>

struct handoff_node {
	struct handoff_node *next;
};

struct handoff {
	struct handoff_node *head, *tail;
};

/* Append `node`; ring efd when the list was empty. The caller holds the
 * list's lock. */
static inline void handoff_push(struct handoff *h, struct handoff_node *node, int efd)
{
	node->next = NULL;
	int was_empty = h->head == NULL;
	if (h->tail)
		h->tail->next = node;
	else
		h->head = node;
	h->tail = node;
	if (was_empty)
		(void)eventfd_write(efd, 1);
}

/* Take the whole list (NULL when empty), in push order. efd is cleared
 * first, so a push that lands after it rings it again. */
static inline struct handoff_node *handoff_take(struct handoff *h, pthread_mutex_t *mu, int efd)
{
	eventfd_t v;
	(void)eventfd_read(efd, &v);
	pthread_mutex_lock(mu);
	struct handoff_node *head = h->head;
	h->head = h->tail = NULL;
	pthread_mutex_unlock(mu);
	return head;
}

#endif /* SEER_HANDOFF_H */
