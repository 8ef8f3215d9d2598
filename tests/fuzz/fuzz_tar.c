/* libFuzzer: tar headers walked over a buffer as the tar scan walks a shard
 * (ustar, GNU long names, pax records, truncation), plus the pax record, name
 * split and label parsers on the raw input. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/fmt/fmt.h"
#include "../../src/fmt/tar.h"
#include "seer.h"

struct buf {
	const uint8_t *p;
	size_t n;
};

static int buf_read(void *ctx, void *out, size_t len, uint64_t off)
{
	const struct buf *b = ctx;
	if (off > b->n || len > b->n - off)
		return -ENODATA;
	memcpy(out, b->p + off, len);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	struct buf b = { data, size };
	struct tar_walk w;
	static struct tar_member m;
	if (tar_walk_init(&w, buf_read, &b, size) != 0)
		return 0;
	int rc;
	uint64_t last = 0;
	while ((rc = tar_next(&w, &m, err, sizeof(err))) == 1) {
		/* every member lies inside the input, after the previous one */
		if (m.data_off != m.hdr_off + TAR_BLOCK || m.data_off > size || m.size > size - m.data_off ||
		    m.hdr_off < last || strlen(m.name) >= sizeof(m.name))
			abort();
		last = m.data_off;
		size_t keylen;
		const char *ext;
		if (tar_split_name(m.name, &keylen, &ext) && (keylen >= strlen(m.name) || ext[-1] != '.'))
			abort();
		int64_t label;
		(void)tar_parse_label(data + m.data_off, (size_t)(m.size < 64 ? m.size : 64), &label);
	}
	if (rc == SEER_EDATASET && !memchr(err, '\0', sizeof(err)))
		abort();
	tar_walk_fini(&w);
	static struct tar_pax p;
	(void)tar_parse_pax(data, size, &p, err, sizeof(err));
	return 0;
}
