/* The decoded-member cache: bytes a format had to decode (inflate, gather,
 * transpose) kept for the next samples of the same file, shared by every
 * reader thread of one catalog and bounded by one byte budget.
 *
 * An entry is one range of samples of one file, (file, first sample), in
 * sample-major order. Every byte of an entry is counted against the budget
 * from the moment it is reserved until it is freed, so the cache never holds
 * more than `limit` bytes, loading entries included. A reader wanting an
 * entry another thread is loading waits for it (a file is decoded once, not
 * once per thread); a reader needing room while every byte is pinned or being
 * loaded waits for one to be released.
 *
 * Threads: any; one mutex and one condition variable per cache. Nothing here
 * blocks while holding a pinned entry, so waiting cannot deadlock. Buffers of
 * 256 KiB and more are mmap'd, so freeing an entry returns its pages to the
 * kernel (resident memory follows the budget, not malloc's arenas). */
#ifndef SEER_FMT_MCACHE_H
#define SEER_FMT_MCACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "fmt.h"

struct mcache;

struct mcache_entry {
	uint32_t file;
	uint32_t first;      /* first sample index in the file */
	uint32_t count;      /* samples held */
	uint64_t len;        /* bytes of buf */
	uint8_t *buf;        /* count samples, one after the other */
	/* owned by the cache, under its lock */
	uint8_t state;
	bool dead;           /* dropped while pinned: freed by the last release */
	uint32_t refs;
	struct mcache_entry *prev, *next, *hnext;
};

struct mcache *mcache_new(uint64_t limit);
void mcache_free(struct mcache *m);
uint64_t mcache_limit(const struct mcache *m);

enum { MC_HIT, MC_LOAD, MC_NOFIT };
/* The entry for (file, first) of len bytes, pinned:
 *  MC_HIT:   ready; read it, then mcache_release().
 *  MC_LOAD:  the caller must fill e->buf (len bytes) and call mcache_ready(), or
 *            mcache_abort() when it cannot.
 *  MC_NOFIT: len exceeds the whole budget (or the buffer cannot be
 *            allocated): nothing is pinned, the caller decodes without it.
 * May wait for another thread's load or for budget. */
int mcache_acquire(struct mcache *m, uint32_t file, uint32_t first, uint32_t count, uint64_t len,
	       struct mcache_entry **e);
void mcache_ready(struct mcache *m, struct mcache_entry *e);  /* still pinned after */
void mcache_abort(struct mcache *m, struct mcache_entry *e);  /* unpins and drops it */
void mcache_release(struct mcache *m, struct mcache_entry *e);

/* Counts for tests, tools and logs. */
void mcache_stats(struct mcache *m, struct fmt_mem_stats *st);
/* Count a sample decoded without the cache (too large for the budget). */
void mcache_note_streamed(struct mcache *m);

/* Page-backed buffers for large sizes (see above); malloc below 256 KiB. */
void *fmt_buf_alloc(uint64_t len);
void fmt_buf_free(void *p, uint64_t len);

#endif /* SEER_FMT_MCACHE_H */
