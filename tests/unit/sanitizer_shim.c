/* Linked into every unit-test binary (see the Makefile), not a test itself.
 *
 * Under ThreadSanitizer, Criterion's runner (BoxFort) maps its shared arena at
 * rand_r()-drawn addresses in [0x2000'0000'0000, 0x6000'0000'0000) and gives up
 * after three tries; nearly all of that range is TSan's own reserved memory, so
 * the runner aborts with "Could not initialize inheritable arena" (Criterion
 * issue #274). The rand_r below steers the draws into TSan's application range
 * [0x5500'0000'0000, 0x5680'0000'0000). Tests that call rand_r themselves get
 * numbers from a narrower range under TSan only.
 *
 * And a race report must fail the test, not only print: stop at the first. */
#if defined(__SANITIZE_THREAD__)
__attribute__((visibility("default"))) int rand_r(unsigned *seed);
__attribute__((visibility("default"))) int rand_r(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return 0x350000 + (int)((*seed >> 8) % 0x18000u);
}

__attribute__((visibility("default"))) const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
	return "halt_on_error=1";
}
#else
/* ISO C forbids an empty translation unit */
typedef int seer_sanitizer_shim_unused;
#endif
