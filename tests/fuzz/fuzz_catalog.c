/* libFuzzer: the catalog cache loader. A cache file is never trusted: any
 * bytes either give a consistent catalog or an error. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "../../src/catalog/catalog.h"

static void load(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	load(data, size);
	/* again with the trailing checksum repaired, so mutations reach the
	 * structural checks behind it */
	if (size >= 16) {
		uint8_t *copy = malloc(size);
		memcpy(copy, data, size);
		uint64_t sum = XXH64(copy, size - 8, 0);
		memcpy(copy + size - 8, &sum, 8);
		load(copy, size);
		free(copy);
	}
	return 0;
}

static void load(const uint8_t *data, size_t size)
{
	struct catalog *c = NULL;
	char err[512];
	if (catalog_deserialize(data, size, &c, err, sizeof(err)) == 0) {
		/* what the daemon relies on afterwards */
		for (uint64_t i = 0; i < c->nsamples; i++) {
			const struct catalog_sample *s = &c->samples[i];
			if (s->file >= c->nfiles || s->type >= c->ntypes)
				abort();
			(void)catalog_path(c, s->file)[0];
		}
		void *img;
		size_t len;
		if (catalog_serialize(c, &img, &len) == 0)
			free(img);
		catalog_free(c);
	}
}
