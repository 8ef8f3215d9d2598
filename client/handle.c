/* handle.c: the process-wide table behind client and batch tokens, and the
 * fork child handler (see client.h for the contract).
 *
 * Any thread. The table's free list and the fork handler take `table_lock`;
 * lookups are lock-free: a caller bumps the entry's `users`, then checks its
 * generation (both seq_cst), and seer_close bumps the generation, then waits
 * for `users` to drain (seq_cst): whichever comes second sees the other. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../src/common/base.h"
#include "../src/common/shm.h"
#include "client.h"

/* token bits: [1:0] tag, [11:2] table index, then client: [63:32]
 * generation; batch: [23:12] slot, [63:24] delivery number (40 bits) */
#define TAG_CLIENT 1u
#define TAG_BATCH 3u
#define IDX_BITS 10
#define SLOT_BITS 12
#define DELIVERY_BITS 40
_Static_assert((1u << IDX_BITS) == HANDLE_MAX, "index bits");
_Static_assert((1u << SLOT_BITS) == HANDLE_MAX_SLOTS, "slot bits");

struct entry {
	_Atomic uint32_t gen;   /* odd: live; even: free or closing */
	_Atomic uint32_t users; /* calls holding a reference */
	struct seer_client *_Atomic c;
	uint32_t next_free;
};

static struct entry table[HANDLE_MAX];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t nused;           /* entries ever handed out (then the free list) */
static uint32_t free_head = UINT32_MAX;
static _Atomic uint64_t deliveries;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void) { pthread_mutex_lock(&table_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&table_lock); }

/* In the child: the connection belongs to the parent. Close our copies of
 * its socket and eventfd so that when the parent dies the daemon sees the
 * rank gone, whatever this child does; leave the mappings (views into the
 * arena stay readable) and never touch the shared rings. */
static void fork_child(void)
{
	for (uint32_t i = 0; i < nused; i++) {
		struct seer_client *c = atomic_load(&table[i].c);
		if (!c || !(atomic_load(&table[i].gen) & 1))
			continue;
		atomic_store(&c->forked, true);
		int fds[3] = { c->sock, c->efd, c->shm.arena_fd };
		c->sock = c->efd = c->shm.arena_fd = -1;
		for (int k = 0; k < 3; k++)
			if (fds[k] >= 0)
				close(fds[k]);
	}
	pthread_mutex_unlock(&table_lock);
}

static void atfork_register(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

uint64_t handle_next_delivery(void)
{
	uint64_t d = (atomic_fetch_add(&deliveries, 1) + 1) & ((1ull << DELIVERY_BITS) - 1);
	return d ? d : handle_next_delivery();
}

int handle_register(struct seer_client *c, seer_client_t **token)
{
	pthread_once(&atfork_once, atfork_register);
	pthread_mutex_lock(&table_lock);
	uint32_t i;
	if (free_head != UINT32_MAX) {
		i = free_head;
		free_head = table[i].next_free;
	} else if (nused < HANDLE_MAX) {
		i = nused++;
	} else {
		pthread_mutex_unlock(&table_lock);
		err_set("too many seer clients open in this process (%u): close some", HANDLE_MAX);
		return -EMFILE;
	}
	c->hidx = i;
	atomic_store(&table[i].c, c);
	uint32_t gen = atomic_fetch_add(&table[i].gen, 1) + 1; /* odd: live */
	pthread_mutex_unlock(&table_lock);
	*token = (seer_client_t *)(uintptr_t)((uint64_t)gen << 32 | (uint64_t)i << 2 | TAG_CLIENT);
	return 0;
}

/* Reference entry i if it is live (and of generation `gen`, unless 0). */
static struct seer_client *entry_get(uint32_t i, uint32_t gen)
{
	struct entry *e = &table[i];
	atomic_fetch_add(&e->users, 1);
	uint32_t g = atomic_load(&e->gen);
	if ((g & 1) && (gen == 0 || g == gen))
		return atomic_load(&e->c);
	atomic_fetch_sub(&e->users, 1);
	return NULL;
}

void handle_release(struct seer_client *c) { atomic_fetch_sub(&table[c->hidx].users, 1); }

int handle_acquire(const seer_client_t *token, const char *fn, struct seer_client **out)
{
	uint64_t t = (uint64_t)(uintptr_t)token;
	*out = NULL;
	if (!token) {
		err_set("%s: the client is NULL (seer_connect failed or was not called)", fn);
		return -EINVAL;
	}
	uint32_t gen = (uint32_t)(t >> 32), i = (uint32_t)(t >> 2) & (HANDLE_MAX - 1);
	if ((t & 3) != TAG_CLIENT || (t & 0xfffff000u) != 0 || !(gen & 1)) {
		err_set("%s: %p is not a seer client (a batch, or a corrupted pointer?)", fn,
			(const void *)token);
		return -EINVAL;
	}
	struct seer_client *c = entry_get(i, gen);
	if (!c) {
		err_set("%s: the client was closed (seer_close): connect again", fn);
		return -EBADF;
	}
	if (atomic_load(&c->closing)) {
		handle_release(c);
		err_set("%s: the client is being closed by another thread", fn);
		return -EBADF;
	}
	*out = c;
	return 0;
}

int handle_batch_decode(const seer_batch_t *b, const char *fn, uint32_t *hidx, uint32_t *slot,
			uint64_t *delivery)
{
	uint64_t t = (uint64_t)(uintptr_t)b;
	if (!b || (t & 3) != TAG_BATCH) {
		err_set("%s: %p is not a seer batch%s", fn, (const void *)b,
			b ? " (a client, or a corrupted pointer?)" : " (NULL)");
		return -EINVAL;
	}
	*hidx = (uint32_t)(t >> 2) & (HANDLE_MAX - 1);
	*slot = (uint32_t)(t >> 12) & (HANDLE_MAX_SLOTS - 1);
	*delivery = t >> 24;
	return 0;
}

int handle_acquire_batch(const seer_batch_t *b, const char *fn, struct seer_client **out,
			 struct slot **s)
{
	uint32_t i, k;
	uint64_t d;
	*out = NULL;
	int rc = handle_batch_decode(b, fn, &i, &k, &d);
	if (rc != 0)
		return rc;
	struct seer_client *c = entry_get(i, 0);
	if (!c) {
		err_set("%s: the batch's client was closed", fn);
		return -EBADF;
	}
	/* the lock orders this against a reconnect replacing the slots (the
	 * old ones stay allocated until close) */
	pthread_mutex_lock(&c->lock);
	struct slot *sl = k < c->nslots ? &c->slots[k] : NULL;
	pthread_mutex_unlock(&c->lock);
	if (!sl || atomic_load(&sl->delivery) != d || !atomic_load(&sl->held)) {
		handle_release(c);
		err_set("%s: stale batch handle: that batch was released (its slot may hold "
			"another batch now, or it was taken before a reconnect)", fn);
		return -ESTALE;
	}
	*out = c;
	*s = sl;
	return 0;
}

seer_batch_t *handle_batch_token(const struct seer_client *c, uint32_t idx, uint64_t d)
{
	return (seer_batch_t *)(uintptr_t)(d << 24 | (uint64_t)idx << 12 |
					   (uint64_t)c->hidx << 2 | TAG_BATCH);
}

bool handle_close_begin(struct seer_client *c)
{
	if (atomic_exchange(&c->closing, true))
		return false;
	struct entry *e = &table[c->hidx];
	atomic_fetch_add(&e->gen, 1); /* even: every new lookup fails from here */
	/* a thread waiting in seer_next re-checks `closing` when woken; one
	 * waiting for a seek's answer is woken by the end of our reading side
	 * (the daemon notices nothing until the socket is closed) */
	if (c->shm.co)
		futex_wake_all((_Atomic uint32_t *)&c->shm.co->doorbell);
	if (atomic_load(&c->busy) && c->sock >= 0)
		shutdown(c->sock, SHUT_RD);
	atomic_fetch_sub(&e->users, 1); /* our own reference */
	while (atomic_load(&e->users) != 0)
		sleep_ns(100000);
	return true;
}

void handle_close_end(uint32_t hidx)
{
	pthread_mutex_lock(&table_lock);
	atomic_store(&table[hidx].c, NULL);
	table[hidx].next_free = free_head;
	free_head = hidx;
	pthread_mutex_unlock(&table_lock);
}
