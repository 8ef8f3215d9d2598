/* Checks on what a trainer writes into its control region (ctrl_in).
 *
 * Everything there is hostile input: the trainer may be buggy or malicious
 * and may change the bytes while the daemon reads them. Each value is read
 * once, then checked; a violation names what was wrong and leaves the
 * daemon's own state consistent (the caller then disconnects the trainer). */
#ifndef SEER_CTRL_H
#define SEER_CTRL_H

#include <stdbool.h>
#include <stdint.h>

/* The daemon's truth about its batch slots. */
struct ctrl_slots {
	bool (*held)(void *ctx, uint32_t slot);     /* published, not yet released */
	void (*release)(void *ctx, uint32_t slot);  /* the trainer gave it back */
	void *ctx;
};

/* Take the releases between *cons and prod (the trainer's producer index,
 * read once by the caller) from entries[nslots] (the release ring, untrusted
 * memory). Returns the number taken and advances *cons; or -EPROTO with *why
 * set when prod is out of range or an entry names a slot the trainer does not
 * hold (*cons then stops after the bad entry; the entries before it count). */
int ctrl_take_releases(uint32_t prod, uint32_t *cons, const uint32_t *entries, uint32_t nslots,
		       const struct ctrl_slots *slots, const char **why);

/* Batches published but not yet taken, from the out-ring producer index
 * (ours) and the trainer's consumer hint (untrusted), clamped to [0, nslots]. */
static inline uint32_t ctrl_unread(uint32_t prod, uint32_t cons_hint, uint32_t nslots)
{
	uint32_t unread = prod - cons_hint;
	return unread > nslots ? nslots : unread;
}

#endif /* SEER_CTRL_H */
