/* libFuzzer: the zip end-of-directory, zip64 record, central directory and
 * local header parsers of the NPZ reader. */
#include <stdint.h>
#include <stdlib.h>

#include "../../src/fmt/fmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	struct zip_dir d;
	/* the input as a whole small zip file */
	if (zip_find_eocd(data, size, size, &d, err, sizeof(err)) == 0) {
		if (d.eocd64_off != UINT64_MAX && d.eocd64_off < size)
			zip_parse_eocd64(data + d.eocd64_off, size - d.eocd64_off, size, &d, err,
					 sizeof(err));
	}
	/* the input as a central directory */
	size_t pos = 0;
	struct zip_entry e;
	for (int i = 0; i < 1000 && pos < size; i++) {
		size_t before = pos;
		if (zip_next_entry(data, size, &pos, &e, err, sizeof(err)) != 0)
			break;
		if (pos <= before || pos > size || e.name + e.name_len > (const char *)data + size)
			abort();
		uint64_t off;
		zip_local_data_off(data, size, &e, &off, err, sizeof(err));
	}
	return 0;
}
