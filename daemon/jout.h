/* JSON out: what every JSON writer of the daemon needs (libjansson):
 * out-of-memory handling and reals rounded to what their clocks are worth.
 * Owns nothing; any thread. Failure: out of memory is logged and aborts
 * (the daemon's rule). */
#ifndef SEERD_JOUT_H
#define SEERD_JOUT_H

struct json_t;

struct json_t *jout_must(struct json_t *j);         /* j, or (NULL) logged and abort */
struct json_t *jout_real(double x, int decimals);   /* rounded; null when not finite */
_Noreturn void jout_oom(void);                      /* logged, abort */

#endif /* SEERD_JOUT_H */
