/* libFuzzer: the INI configuration parser, --set assignments and ${VAR}
 * expansion. Never crashes, never leaks; errors are messages. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../src/config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd = -1;
	if (fd < 0)
		fd = memfd_create("fuzz-ini", 0);
	if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
		return 0;
	char path[64], err[1024];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	struct seer_config c;
	if (config_init(&c, err, sizeof(err)) == 0) {
		if (config_load_file(&c, path, err, sizeof(err)) == 0 &&
		    config_finish(&c, err, sizeof(err)) == 0) {
			char *d = config_dump(&c);
			free(d);
		}
	}
	config_free(&c);
	/* the same bytes as a --set assignment and as a value to expand */
	char *s = malloc(size + 1);
	memcpy(s, data, size);
	s[size] = '\0';
	if (config_init(&c, err, sizeof(err)) == 0)
		config_set(&c, s, err, sizeof(err));
	config_free(&c);
	free(config_expand(s, err, sizeof(err)));
	free(s);
	return 0;
}
