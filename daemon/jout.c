/* JSON out (jout.h): out of memory aborts, reals rounded. */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <stdlib.h>

#include "../src/util/util.h"
#include "jout.h"

_Noreturn void jout_oom(void)
{
	log_error("out of memory writing the statistics as JSON");
	abort();
}

json_t *jout_must(json_t *j)
{
	if (!j)
		jout_oom();
	return j;
}

/* x rounded to `decimals` places (how far its clock is worth reading). */
json_t *jout_real(double x, int decimals)
{
	if (!isfinite(x))
		return json_null();
	double scale = pow(10.0, decimals);
	return json_real(round(x * scale) / scale);
}
