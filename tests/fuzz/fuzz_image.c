/* libFuzzer: the image decoders and the transform (src/xform). The first
 * byte picks the parameters (crop mode, exact or DCT-scaled, decode path,
 * output layout, blob round trip); the rest is the file. One scratch lives
 * across inputs, as in a transform worker, with a 4 Mpx limit so a hostile
 * header cannot ask for more than the fuzzer's memory. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/xform/xform.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct xf_scratch *s;
	static uint8_t *out, *blob;
	if (!s) {
		s = xf_scratch_new(1u << 22);
		out = malloc(3 * 64 * 48 * 4);
		blob = malloc(XF_BLOB_HEADER + (3u << 22));
		if (!s || !out || !blob)
			abort();
	}
	if (size < 1)
		return 0;
	uint8_t sel = data[0];
	data++, size--;
	struct xf_params p;
	xf_params_default(&p);
	p.decode = XF_DECODE_IMAGE;
	p.out_h = 48, p.out_w = 64;
	p.crop = (enum xf_crop)(sel % 3);
	p.exact = sel & 4;
	p.jpeg_path = sel & 8 ? XF_JPEG_TURBO_FULL : XF_JPEG_PARTIAL;
	p.output = (enum xf_output)((sel >> 4) % 3);
	p.normalize = p.output != XF_OUT_UINT8_HWC;
	p.cache_size = sel & 64 ? 40 : 0;
	char err[512] = "";
	const void *src = data;
	size_t len = size;
	if (sel & 128) { /* through a decoded blob, as cache = decoded */
		enum xf_format f;
		uint32_t w, h;
		if (xf_probe(s, data, size, &f, &w, &h, err, sizeof(err)) != 0)
			return err[0] ? 0 : (abort(), 0);
		uint64_t need = xf_blob_bytes(&p, w, h);
		if (f == XF_FMT_BLOB || need > XF_BLOB_HEADER + (3u << 22))
			return 0;
		size_t used = 0;
		if (xf_decode_blob(&p, s, data, size, blob, need, &used, err, sizeof(err)) != 0)
			return err[0] ? 0 : (abort(), 0);
		if (used != need)
			abort();
		src = blob, len = used;
	}
	int rc = xf_transform(&p, s, 1, sel, size, src, len, out, NULL, err, sizeof(err));
	if (rc != 0 && (rc > 0 || err[0] == '\0'))
		abort(); /* a failure must say why */
	return 0;
}
