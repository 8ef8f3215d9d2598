/* The decoded-member cache (see mcache.h): a hash on (file, first sample), an
 * LRU list of ready entries, and a byte budget that counts reservations. */
#define _GNU_SOURCE
#include "mcache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "../util/util.h"

#define MC_PAGES_MIN (256u << 10)

enum { MC_LOADING = 1, MC_READY = 2 };

struct mcache {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t limit, held, peak;
	struct mcache_entry **tab;   /* chained through hnext; cap is a power of two */
	uint32_t cap, count;
	struct mcache_entry lru;     /* ready entries, most recently used first */
	uint32_t waiters;
	uint64_t loads, hits, waits, streamed, evictions, loaded_bytes;
};

void *fmt_buf_alloc(uint64_t len)
{
	if (len < MC_PAGES_MIN)
		return malloc(MAX(len, (uint64_t)1));
	void *p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void fmt_buf_free(void *p, uint64_t len)
{
	if (!p)
		return;
	if (len < MC_PAGES_MIN)
		free(p);
	else
		munmap(p, (size_t)len);
}

struct mcache *mcache_new(uint64_t limit)
{
	struct mcache *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	m->limit = limit;
	m->lru.next = m->lru.prev = &m->lru;
	return m;
}

static void entry_free(struct mcache_entry *e)
{
	fmt_buf_free(e->buf, e->len);
	free(e);
}

void mcache_free(struct mcache *m)
{
	if (!m)
		return;
	for (uint32_t i = 0; i < m->cap; i++)
		for (struct mcache_entry *e = m->tab[i], *n; e; e = n) {
			n = e->hnext;
			entry_free(e);
		}
	free(m->tab);
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->mu);
	free(m);
}

uint64_t mcache_limit(const struct mcache *m)
{
	return m->limit;
}

static uint32_t slot(const struct mcache *m, uint32_t file, uint32_t first)
{
	uint64_t h = ((uint64_t)file << 32 | first) * 0x9e3779b97f4a7c15ull;
	return (uint32_t)(h >> 32) & (m->cap - 1);
}

static struct mcache_entry *find(const struct mcache *m, uint32_t file, uint32_t first)
{
	if (m->cap == 0)
		return NULL;
	for (struct mcache_entry *e = m->tab[slot(m, file, first)]; e; e = e->hnext)
		if (e->file == file && e->first == first)
			return e;
	return NULL;
}

static int insert(struct mcache *m, struct mcache_entry *e)
{
	if (m->count + 1 > m->cap) {
		uint32_t old = m->cap, cap = old ? old * 2 : 64;
		struct mcache_entry **tab = calloc(cap, sizeof(*tab));
		if (!tab)
			return -ENOMEM;
		struct mcache_entry **otab = m->tab;
		m->tab = tab;
		m->cap = cap;
		for (uint32_t i = 0; i < old; i++)
			for (struct mcache_entry *x = otab[i], *n; x; x = n) {
				n = x->hnext;
				uint32_t s = slot(m, x->file, x->first);
				x->hnext = tab[s];
				tab[s] = x;
			}
		free(otab);
	}
	uint32_t s = slot(m, e->file, e->first);
	e->hnext = m->tab[s];
	m->tab[s] = e;
	m->count++;
	return 0;
}

static void unhash(struct mcache *m, struct mcache_entry *e)
{
	struct mcache_entry **p = &m->tab[slot(m, e->file, e->first)];
	while (*p != e)
		p = &(*p)->hnext;
	*p = e->hnext;
	m->count--;
}

static void lru_unlink(struct mcache_entry *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
}

static void lru_front(struct mcache *m, struct mcache_entry *e)
{
	e->next = m->lru.next;
	e->prev = &m->lru;
	m->lru.next->prev = e;
	m->lru.next = e;
}

/* Drop unpinned ready entries, least recently used first, until len more
 * bytes fit; the victims are chained on *dead for freeing outside the lock. */
static void evict_for(struct mcache *m, uint64_t len, struct mcache_entry **dead)
{
	for (struct mcache_entry *e = m->lru.prev, *p; e != &m->lru && m->held + len > m->limit;
	     e = p) {
		p = e->prev;
		if (e->refs)
			continue;
		lru_unlink(e);
		unhash(m, e);
		m->held -= e->len;
		m->evictions++;
		e->hnext = *dead;
		*dead = e;
	}
}

static void wait_locked(struct mcache *m)
{
	m->waits++;
	m->waiters++;
	pthread_cond_wait(&m->cv, &m->mu);
	m->waiters--;
}

static void free_chain(struct mcache_entry *e)
{
	for (struct mcache_entry *n; e; e = n) {
		n = e->hnext;
		entry_free(e);
	}
}

int mcache_acquire(struct mcache *m, uint32_t file, uint32_t first, uint32_t count, uint64_t len,
	       struct mcache_entry **out)
{
	if (len > m->limit || len == 0)
		return MC_NOFIT;
	struct mcache_entry *dead = NULL, *e;
	pthread_mutex_lock(&m->mu);
	for (;;) {
		e = find(m, file, first);
		if (e && e->state == MC_READY) {
			e->refs++;
			lru_unlink(e);
			lru_front(m, e);
			m->hits++;
			pthread_mutex_unlock(&m->mu);
			free_chain(dead);
			*out = e;
			return MC_HIT;
		}
		if (!e) {
			evict_for(m, len, &dead);
			if (m->held + len <= m->limit)
				break;
		}
		wait_locked(m); /* its load, or room, comes from another thread */
	}
	e = malloc(sizeof(*e));
	if (e)
		*e = (struct mcache_entry){ .file = file, .first = first, .count = count, .len = len,
					.state = MC_LOADING, .refs = 1 };
	if (!e || insert(m, e) != 0) {
		pthread_mutex_unlock(&m->mu);
		free(e);
		free_chain(dead);
		return MC_NOFIT;
	}
	m->held += len;
	m->peak = MAX(m->peak, m->held);
	m->loads++;
	m->loaded_bytes += len;
	pthread_mutex_unlock(&m->mu);
	free_chain(dead);
	e->buf = fmt_buf_alloc(len);
	if (!e->buf) {
		mcache_abort(m, e);
		return MC_NOFIT;
	}
	*out = e;
	return MC_LOAD;
}

void mcache_ready(struct mcache *m, struct mcache_entry *e)
{
	pthread_mutex_lock(&m->mu);
	e->state = MC_READY;
	lru_front(m, e);
	if (m->waiters)
		pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
}

void mcache_abort(struct mcache *m, struct mcache_entry *e)
{
	pthread_mutex_lock(&m->mu);
	unhash(m, e);
	m->held -= e->len;
	if (m->waiters)
		pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
	entry_free(e);
}

void mcache_release(struct mcache *m, struct mcache_entry *e)
{
	pthread_mutex_lock(&m->mu);
	if (--e->refs == 0 && m->waiters)
		pthread_cond_broadcast(&m->cv); /* evictable now */
	pthread_mutex_unlock(&m->mu);
}

void mcache_note_streamed(struct mcache *m)
{
	pthread_mutex_lock(&m->mu);
	m->streamed++;
	pthread_mutex_unlock(&m->mu);
}

void mcache_stats(struct mcache *m, struct fmt_mem_stats *st)
{
	pthread_mutex_lock(&m->mu);
	*st = (struct fmt_mem_stats){
		.limit = m->limit, .held = m->held, .peak = m->peak, .loads = m->loads,
		.hits = m->hits, .waits = m->waits, .streamed = m->streamed,
		.evictions = m->evictions, .loaded_bytes = m->loaded_bytes,
	};
	pthread_mutex_unlock(&m->mu);
}
