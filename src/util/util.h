/* Helpers for the daemon and the tools: logging, parsing, strings, files and
 * the allocators that abort on out of memory. Everything here is
 * thread-safe. libseer does not link this file: what the client needs too
 * (time, error text, paths) is in base.h and paths.h, included here. */
#ifndef SEER_UTIL_H
#define SEER_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/base.h"
#include "../common/paths.h"

/* ---- logging -----------------------------------------------------------
 * Lines look like "2026-11-21 05:10:00.123 seerd[0] INFO  message" and go to
 * stderr. The node rank is -1 until log_set_node(). */
enum log_level { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

void log_set_level(enum log_level lvl);
enum log_level log_get_level(void);
void log_set_node(int node);
void log_set_prog(const char *prog);
int log_parse_level(const char *s, enum log_level *out);
void log_msg(enum log_level lvl, const char *fmt, ...) PRINTF_LIKE(2, 3);

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) do { if (log_get_level() >= LOG_DEBUG) log_msg(LOG_DEBUG, __VA_ARGS__); } while (0)

/* ---- parsing ------------------------------------------------------------
 * All return 0 or -EINVAL (malformed) / -ERANGE (out of range), and leave
 * *out alone on failure. Integers are decimal (a leading 0 is not octal) or
 * 0x hex. parse_u64, parse_i64 and parse_double are in base.h. */
/* "64GiB", "512MB", "4k", "1.5G", "0": binary for Ki/Mi/Gi/Ti and for bare
 * K/M/G/T, decimal for kB/MB/GB/TB. The number is decimal digits with an
 * optional fraction, computed exactly; a result that is not a whole number
 * of bytes is -EINVAL. */
int parse_size(const char *s, uint64_t *out);
int parse_bool(const char *s, bool *out);
/* Human-readable size into buf ("1.50 GiB"); returns buf. */
const char *fmt_size(char *buf, size_t len, uint64_t bytes);

/* ---- strings and memory -------------------------------------------------
 * The x* functions abort on out of memory (the daemon may; the client library
 * never links them). */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t sz);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xasprintf(const char *fmt, ...) PRINTF_LIKE(1, 2);
/* Copy src into dst[len], truncating; always terminated. Returns dst. */
char *str_copy(char *dst, size_t len, const char *src);
/* snprintf that never overflows and always terminates; returns dst. */
char *sfmt(char *dst, size_t len, const char *fmt, ...) PRINTF_LIKE(3, 4);
/* Prime each 4 KiB page of [p, p + len) for both of the ways it will be
 * accessed: one byte rewritten with its own value from user mode, then read
 * by the kernel (copied into a scratch file). Under a hypervisor that
 * shadows the guest's page tables (the development VM), a populated page
 * still traps on the process's first user-mode write to it and, separately,
 * on the kernel's first access through this mapping (a pread, recv or send
 * of its bytes) -- ~5 us each; primed, neither traps (daemon/arena.c,
 * arena_populate, has the figures). Nothing else may write these pages
 * meanwhile. Failure: none visible (unprimed pages trap at first use). */
void mem_prime_pages(void *p, uint64_t len);

/* ---- files ---------------------------------------------------------------- */
/* Read/write exactly n bytes at off, retrying on EINTR and short transfers.
 * Return 0, -errno, or -ENODATA when the file ends first (pread). */
int pread_full(int fd, void *buf, size_t n, uint64_t off);
int pwrite_full(int fd, const void *buf, size_t n, uint64_t off);
int write_full(int fd, const void *buf, size_t n);
/* mkdir -p with the given mode; 0 or -errno. */
int mkdir_p(const char *path, unsigned mode);
/* Write a file atomically (temp file + rename); 0 or -errno. */
int write_file_atomic(const char *path, const void *buf, size_t n);
/* Add fd to the epoll set epfd for input, its events carrying tag. A failure
 * is logged (the fd then never wakes the loop). */
void epoll_watch(int epfd, int fd, uint64_t tag);

#endif /* SEER_UTIL_H */
