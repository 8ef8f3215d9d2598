/* base.c: time, the per-thread error text and error names (see base.h).
 * Linked into libseer: allocates nothing, never logs, aborts or exits. */
#define _GNU_SOURCE
#include "base.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "seer.h"

uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double now_s(void) { return (double)now_ns() / 1e9; }

void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

static _Thread_local char err_buf[1024];

void err_set(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err_buf, sizeof(err_buf), fmt, ap);
	va_end(ap);
}

const char *err_get(void) { return err_buf; }

void err_clear(void) { err_buf[0] = '\0'; }

int err_fmt(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

SEER_API const char *seer_errmsg(void) { return err_buf; }

SEER_API const char *seer_strerror(int err)
{
	switch (err) {
	case 0: return "success";
	case SEER_EEPOCH: return "end of epoch";
	case SEER_EEND: return "end of job: the last batch was delivered";
	case SEER_ESHUTDOWN: return "the daemon is shutting down";
	case SEER_EPROTO: return "protocol error (client and daemon versions differ?)";
	case SEER_EREFUSED: return "connection refused by the daemon";
	case SEER_EBATCH: return "the batch could not be loaded";
	case SEER_ECONFIG: return "invalid configuration";
	case SEER_EDATASET: return "dataset missing, empty, changed or corrupt";
	case SEER_ENOTHELD: return "batch not held by this client";
	case SEER_EEVICTED: return "the daemon disconnected this trainer";
	case SEER_EDAEMON: return "the daemon went away without stopping the job (crashed or killed)";
	default: break;
	}
	if (err < 0 && err > -4096)
		return strerror(-err);
	return "unknown error";
}

/* ---- numbers (util.h documents them; here so libseer can parse too) ---- */

const char *str_skip_ws(const char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	return s;
}

bool str_only_ws(const char *s) { return *str_skip_ws(s) == '\0'; }

/* Integers are decimal, or hex with 0x; a leading zero is not octal
 * ("010" is ten, as a user writing a config file means). */
static int int_base(const char *s)
{
	if (*s == '+' || *s == '-')
		s++;
	return s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && isxdigit((unsigned char)s[2]) ? 16 : 10;
}

int parse_u64(const char *s, uint64_t *out)
{
	s = str_skip_ws(s);
	if (*s == '\0' || *s == '-')
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, int_base(s));
	if (errno == ERANGE)
		return -ERANGE;
	if (end == s || !str_only_ws(end))
		return -EINVAL;
	*out = v;
	return 0;
}

int parse_i64(const char *s, int64_t *out)
{
	s = str_skip_ws(s);
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, int_base(s));
	if (errno == ERANGE)
		return -ERANGE;
	if (end == s || !str_only_ws(end))
		return -EINVAL;
	*out = v;
	return 0;
}

int parse_double(const char *s, double *out)
{
	s = str_skip_ws(s);
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno == ERANGE || !isfinite(v))
		return -ERANGE;
	if (end == s || !str_only_ws(end))
		return -EINVAL;
	*out = v;
	return 0;
}
