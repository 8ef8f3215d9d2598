/* base.c: time, the per-thread error text and error names (see base.h).
 * Linked into libseer: allocates nothing, never logs, aborts or exits. */
#define _GNU_SOURCE
#include "base.h"

#include <errno.h>
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
	default: break;
	}
	if (err < 0 && err > -4096)
		return strerror(-err);
	return "unknown error";
}
