/* libFuzzer: what a trainer may write into its control region. Whatever the
 * release ring holds, the daemon only takes back slots the trainer holds,
 * each once, and never reads outside the ring. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/util/ctrl.h"

struct model {
	bool held[64];
	uint32_t released;
};

static bool held(void *ctx, uint32_t slot)
{
	struct model *m = ctx;
	if (slot >= 64)
		abort(); /* asked about a slot outside the ring */
	return m->held[slot];
}

static void release(void *ctx, uint32_t slot)
{
	struct model *m = ctx;
	if (slot >= 64 || !m->held[slot])
		abort(); /* took back a slot the trainer did not hold */
	m->held[slot] = false;
	m->released++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 17)
		return 0;
	uint32_t nslots = 1u << (data[0] % 7); /* 1..64 */
	uint64_t heldbits;
	uint32_t prod, cons;
	memcpy(&heldbits, data + 1, 8);
	memcpy(&prod, data + 9, 4);
	memcpy(&cons, data + 13, 4);
	uint32_t *ring = calloc(nslots, sizeof(uint32_t)); /* exactly nslots: ASan guards */
	memcpy(ring, data + 17, (size - 17 < nslots * 4) ? size - 17 : nslots * 4);
	struct model m = { 0 };
	for (uint32_t i = 0; i < nslots; i++)
		m.held[i] = heldbits >> i & 1;
	const struct ctrl_slots ops = { held, release, &m };
	const char *why = NULL;
	uint32_t c = cons;
	int n = ctrl_take_releases(prod, &c, ring, nslots, &ops, &why);
	if (n >= 0 && ((uint32_t)n != m.released || c != prod || n > (int)nslots))
		abort();
	if (n < 0 && (!why || m.released > nslots))
		abort();
	(void)ctrl_unread(prod, cons, nslots);
	free(ring);
	return 0;
}
