/* The small helpers libseer links (and the daemon and tools with it): macros,
 * time, the thread's error text, error names and the CPU spin hint.
 *
 * Nothing here allocates, logs, aborts or exits: this is what the client
 * library may contain (the daemon-only helpers, logging and the allocators
 * that abort on out of memory, live in util.c). Thread-safe; the error text
 * is per thread. */
#ifndef SEER_BASE_H
#define SEER_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((__typeof__(x))(a) - 1))
#define UNUSED __attribute__((unused))
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- time ---------------------------------------------------------------- */
uint64_t now_ns(void);          /* CLOCK_MONOTONIC */
double now_s(void);
void sleep_ns(uint64_t ns);

/* ---- spinning -------------------------------------------------------------
 * A hint to the CPU that this thread busy-waits (x86 PAUSE, aarch64 ISB,
 * 32-bit Arm YIELD); a compiler barrier elsewhere. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	/* ISB rather than YIELD: YIELD is a no-op on most Arm server cores, ISB
	 * waits a few tens of cycles (what Rust's spin_loop hint does) */
	__asm__ __volatile__("isb sy" ::: "memory");
#elif defined(__arm__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

/* ---- error text ------------------------------------------------------------ */
/* Thread-local "last error" message (what seer_errmsg() returns). */
void err_set(const char *fmt, ...) PRINTF_LIKE(1, 2);
const char *err_get(void);
void err_clear(void);
/* Format a message into the caller's buffer err (when err and errlen are
 * given) and return rc: `return err_fmt(err, errlen, -EINVAL, "...")`. */
int err_fmt(char *err, size_t errlen, int rc, const char *fmt, ...) PRINTF_LIKE(4, 5);

/* Numbers from text: 0, or -EINVAL (malformed) / -ERANGE (out of range),
 * *out untouched on failure. Integers are decimal (a leading 0 is not octal)
 * or 0x hex; blanks around the number are allowed. */
int parse_u64(const char *s, uint64_t *out);
int parse_i64(const char *s, int64_t *out);
int parse_double(const char *s, double *out);
/* s past leading blanks; whether s is blanks only. */
const char *str_skip_ws(const char *s);
bool str_only_ws(const char *s);

#endif /* SEER_BASE_H */
