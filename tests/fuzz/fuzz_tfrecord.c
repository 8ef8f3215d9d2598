/* libFuzzer: TFRecord framing (length + masked CRC32C headers) walked over
 * a buffer as the scanner does, and the DALI index parser. */
#include <stdint.h>
#include <stdlib.h>

#include "../../src/fmt/fmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	uint64_t pos = 0;
	while (pos + TFR_HDR_LEN <= size) {
		uint64_t len;
		if (tfrecord_parse_header(data + pos, size - pos, &len, err, sizeof(err)) != 0)
			break;
		if (len > size - pos - TFR_HDR_LEN || size - pos - TFR_HDR_LEN - len < TFR_FOOTER_LEN)
			break; /* truncated record: the scanner reports it */
		const uint8_t *payload = data + pos + TFR_HDR_LEN;
		uint32_t want = fmt_le32(payload + len);
		(void)(tfrecord_mask_crc(crc32c(0, payload, len)) == want);
		pos += TFR_HDR_LEN + len + TFR_FOOTER_LEN;
	}
	struct tfrecord_extent *ext = NULL;
	uint64_t n = 0;
	if (tfrecord_parse_index((const char *)data, size, &ext, &n, err, sizeof(err)) == 0 && n && !ext)
		abort();
	free(ext);
	return 0;
}
