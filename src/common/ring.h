/* Single-producer single-consumer ring of 32-bit entries over shared memory.
 *
 * Indices are free-running uint32_t counters masked on access (capacity is a
 * power of two); each index has exactly one writer. The producer writes the
 * entry, then store-releases its index; the consumer load-acquires the
 * producer index before reading the entry, then store-releases its own index
 * so the producer may reuse the entry (DPDK rte_ring SP/SC, io_uring CQ).
 *
 * The indices may live anywhere (different cache lines, different segments,
 * private memory): a ring is just the four pointers below. One producer
 * thread and one consumer thread (possibly in different processes); neither
 * call blocks or allocates. */
#ifndef SEER_RING_H
#define SEER_RING_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct ring {
	_Atomic uint32_t *prod;
	_Atomic uint32_t *cons;
	uint32_t *entries;
	uint32_t mask;        /* capacity - 1 */
};

static inline uint32_t ring_capacity(const struct ring *r) { return r->mask + 1; }

/* Producer: 0, or -ENOBUFS when full. */
static inline int ring_push(struct ring *r, uint32_t v)
{
	uint32_t p = atomic_load_explicit(r->prod, memory_order_relaxed); /* we are its only writer */
	/* pairs with the consumer's store-release of cons: the entry at p is free */
	uint32_t c = atomic_load_explicit(r->cons, memory_order_acquire);
	if (p - c > r->mask)
		return -ENOBUFS;
	r->entries[p & r->mask] = v;
	/* the consumer sees the entry once it sees the new prod */
	atomic_store_explicit(r->prod, p + 1, memory_order_release);
	return 0;
}

/* Consumer: 0 with *v, or -EAGAIN when empty (*v untouched). */
static inline int ring_pop(struct ring *r, uint32_t *v)
{
	uint32_t c = atomic_load_explicit(r->cons, memory_order_relaxed); /* we are its only writer */
	/* pairs with the producer's store-release of prod: the entry is written */
	uint32_t p = atomic_load_explicit(r->prod, memory_order_acquire);
	if (c == p)
		return -EAGAIN;
	*v = r->entries[c & r->mask];
	/* the producer may overwrite the entry once it sees the new cons */
	atomic_store_explicit(r->cons, c + 1, memory_order_release);
	return 0;
}

/* Entries ready for the consumer. */
static inline uint32_t ring_count(const struct ring *r)
{
	return atomic_load_explicit(r->prod, memory_order_acquire) -
	       atomic_load_explicit(r->cons, memory_order_relaxed);
}

#endif /* SEER_RING_H */
