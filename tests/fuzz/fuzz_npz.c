/* libFuzzer: an .npz file end to end. The input is written as the one file
 * of a dataset, catalogued (zip structures, NPY headers, labels) and every
 * sample read back (member decoding, inflate, gathering, transposing, the
 * decoded-member cache): any bytes give samples or errors, never a crash, a
 * read outside a buffer or a hang. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/catalog/catalog.h"
#include "../../src/fmt/fmt.h"
#include "../../src/util/util.h"

static char dir[64];

static void cleanup(void)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/a.npz", dir);
	unlink(path);
	rmdir(dir);
}

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/seer-fuzz-npz-XXXXXX");
	if (!mkdtemp(dir))
		abort();
	atexit(cleanup);
	log_set_level(LOG_ERROR);
	fmt_set_memory(256 << 10); /* ranges and streaming both reachable */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dir[0])
		setup();
	char path[128];
	snprintf(path, sizeof(path), "%s/a.npz", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || write_full(fd, data, size) != 0)
		abort();
	close(fd);
	struct catalog_opts o = { .root = dir, .format = "npz" };
	struct catalog *c = NULL;
	char err[1024];
	if (catalog_open(&o, &c, err, sizeof(err)) != 0)
		return 0;
	/* a deflated member may claim a large decoded size: read small ones only */
	if (c->max_len <= (1u << 20)) {
		struct catalog_reader rd;
		catalog_reader_init(&rd, c);
		uint8_t *buf = malloc(c->max_len ? c->max_len : 1);
		for (uint64_t id = 0; id < c->nsamples && id < 256; id++)
			catalog_read(&rd, id, buf);
		free(buf);
		catalog_reader_fini(&rd);
	}
	catalog_free(c);
	return 0;
}
