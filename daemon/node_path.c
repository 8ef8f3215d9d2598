/* "%n" expansion of configured paths (see node_path.h). Pure; no failure but
 * -ENAMETOOLONG. */
#include "node_path.h"

#include <errno.h>
#include <stdio.h>

int node_path(char *out, size_t len, const char *pattern, uint32_t node)
{
	size_t n = 0;
	if (len == 0)
		return -ENAMETOOLONG;
	for (const char *p = pattern; *p; p++) {
		int k = 1;
		if (p[0] == '%' && p[1] == 'n') {
			k = snprintf(out + n, len - n, "%u", node);
			p++;
		} else if (n + 1 < len) {
			out[n] = *p;
		}
		if (k < 0 || n + (size_t)k >= len) {
			if (len)
				out[0] = '\0';
			return -ENAMETOOLONG;
		}
		n += (size_t)k;
	}
	out[n] = '\0';
	return 0;
}
