/* Small pieces every format shares: error text, file-name filters.
 * Pure functions: any thread. */
#define _GNU_SOURCE
#include "fmt.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "seer.h"

int fmt_fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return SEER_EDATASET;
}

bool fmt_has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);
	return n > m && strcasecmp(s + n - m, suf) == 0;
}

bool fmt_not_index(const struct catalog_params *p, const char *relpath)
{
	(void)p;
	size_t n = strlen(relpath);
	return !(n >= 4 && strcmp(relpath + n - 4, ".idx") == 0);
}

void fmt_swap(uint8_t *p, uint64_t bytes, uint32_t isz)
{
	for (uint64_t i = 0; i + isz <= bytes; i += isz) {
		if (isz == 2) {
			uint16_t x;
			memcpy(&x, p + i, 2);
			x = __builtin_bswap16(x);
			memcpy(p + i, &x, 2);
		} else if (isz == 4) {
			uint32_t x;
			memcpy(&x, p + i, 4);
			x = __builtin_bswap32(x);
			memcpy(p + i, &x, 4);
		} else if (isz == 8) {
			uint64_t x;
			memcpy(&x, p + i, 8);
			x = __builtin_bswap64(x);
			memcpy(p + i, &x, 8);
		}
	}
}
