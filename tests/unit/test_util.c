/* util: the number, size and boolean parsers every config key goes through,
 * and the page priming of the arena. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../src/util/util.h"


/* ---- parse_size ------------------------------------------------------------ */

struct size_case {
	char in[48];        /* inline: parameters are copied to the test process */
	int rc;            /* 0, -EINVAL or -ERANGE */
	uint64_t want;     /* when rc == 0 */
};

ParameterizedTestParameters(util, parse_size)
{
	static struct size_case cases[] = {
		/* bare numbers and spaces */
		{ "0", 0, 0 },
		{ "1", 0, 1 },
		{ "4096", 0, 4096 },
		{ "  4096  ", 0, 4096 },
		{ "4 KiB", 0, 4096 },
		{ " 4 KiB ", 0, 4096 },
		{ "\t7\tB\n", 0, 7 },
		/* binary: Ki/Mi/Gi/Ti, KiB..., and bare K/M/G/T; any case */
		{ "4k", 0, 4096 },
		{ "4K", 0, 4096 },
		{ "4Ki", 0, 4096 },
		{ "4KiB", 0, 4096 },
		{ "4kib", 0, 4096 },
		{ "512MiB", 0, 512ull << 20 },
		{ "512M", 0, 512ull << 20 },
		{ "64GiB", 0, 64ull << 30 },
		{ "64g", 0, 64ull << 30 },
		{ "3TiB", 0, 3ull << 40 },
		{ "3T", 0, 3ull << 40 },
		/* decimal: kB/MB/GB/TB */
		{ "4kB", 0, 4000 },
		{ "4KB", 0, 4000 },
		{ "512MB", 0, 512000000 },
		{ "2GB", 0, 2000000000 },
		{ "5TB", 0, 5000000000000ull },
		/* fractions that come to whole bytes, exactly */
		{ "1.5G", 0, 3ull << 29 },
		{ "0.5K", 0, 512 },
		{ "1.25KiB", 0, 1280 },
		{ "1.001kB", 0, 1001 },
		{ "2.3MB", 0, 2300000 },
		{ "0.7GB", 0, 700000000 },
		{ "12.345678kB", -EINVAL, 0 },
		{ "1.000000000001TB", 0, 1000000000001ull },
		{ "7.0", 0, 7 },
		{ "7.", 0, 7 },
		{ ".5K", 0, 512 },
		/* fractions of a byte */
		{ "1.5", -EINVAL, 0 },
		{ "0.1", -EINVAL, 0 },
		{ "1.3KiB", -EINVAL, 0 },
		{ "1.0001kB", -EINVAL, 0 },
		/* integers are exact beyond 2^53 and up to 2^64 - 1 */
		{ "9007199254740993", 0, 9007199254740993ull },
		{ "18446744073709551615", 0, UINT64_MAX },
		{ "18446744073709551615B", 0, UINT64_MAX },
		{ "17179869183GiB", 0, 17179869183ull << 30 },
		{ "16777215.75TiB", 0, (16777215ull << 40) + (3ull << 38) },
		/* overflow */
		{ "18446744073709551616", -ERANGE, 0 },
		{ "17179869184GiB", -ERANGE, 0 },
		{ "16777216TiB", -ERANGE, 0 },
		{ "99999999999999999999999999", -ERANGE, 0 },
		/* malformed */
		{ "", -EINVAL, 0 },
		{ "   ", -EINVAL, 0 },
		{ "-1", -EINVAL, 0 },
		{ " -1K", -EINVAL, 0 },
		{ "-0", -EINVAL, 0 },
		{ "K", -EINVAL, 0 },
		{ "GiB", -EINVAL, 0 },
		{ "4 parsecs", -EINVAL, 0 },
		{ "4 K iB", -EINVAL, 0 },
		{ "4 k b", -EINVAL, 0 },
		{ "4KiBB", -EINVAL, 0 },
		{ "4Kib x", -EINVAL, 0 },
		{ "1,5K", -EINVAL, 0 },
		{ "1..5K", -EINVAL, 0 },
		{ ".", -EINVAL, 0 },
		{ "inf", -EINVAL, 0 },
		{ "nan", -EINVAL, 0 },
		{ "4 4", -EINVAL, 0 },
	};
	return cr_make_param_array(struct size_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct size_case *c, util, parse_size)
{
	uint64_t v = 0xdeadbeefdeadbeefull;
	int rc = parse_size(c->in, &v);
	cr_assert_eq(rc, c->rc, "parse_size(\"%s\") = %d, want %d", c->in, rc, c->rc);
	if (c->rc == 0)
		cr_assert_eq(v, c->want, "parse_size(\"%s\") gave %llu, want %llu", c->in,
			     (unsigned long long)v, (unsigned long long)c->want);
	else
		cr_assert_eq(v, 0xdeadbeefdeadbeefull, "parse_size(\"%s\") wrote *out on failure",
			     c->in);
}

/* Every power of two and its neighbours survive the trip through text, with
 * and without a binary unit. */
Test(util, parse_size_round_trip)
{
	for (unsigned sh = 0; sh < 64; sh++) {
		for (int d = -1; d <= 1; d++) {
			uint64_t x = (1ull << sh) + (uint64_t)(int64_t)d;
			char buf[64];
			snprintf(buf, sizeof(buf), "%llu", (unsigned long long)x);
			uint64_t v = 0;
			cr_assert_eq(parse_size(buf, &v), 0, "parse_size(%s)", buf);
			cr_assert_eq(v, x, "parse_size(%s) = %llu", buf, (unsigned long long)v);
		}
		if (sh >= 10 && sh < 64) {
			char buf[64];
			snprintf(buf, sizeof(buf), "%lluKiB", (unsigned long long)(1ull << (sh - 10)));
			uint64_t v = 0;
			cr_assert_eq(parse_size(buf, &v), 0, "parse_size(%s)", buf);
			cr_assert_eq(v, 1ull << sh, "parse_size(%s)", buf);
		}
	}
}

/* ---- parse_u64 / parse_i64 ----------------------------------------------- */

struct u64_case {
	char in[48];        /* inline: parameters are copied to the test process */
	int rc;
	uint64_t want;
};

ParameterizedTestParameters(util, parse_u64)
{
	static struct u64_case cases[] = {
		{ "0", 0, 0 },
		{ "42", 0, 42 },
		{ "  42  ", 0, 42 },
		{ "+42", 0, 42 },
		{ "18446744073709551615", 0, UINT64_MAX },
		{ "0x10", 0, 16 },
		{ "0XfF", 0, 255 },
		/* a leading zero is decimal, not octal */
		{ "010", 0, 10 },
		{ "08", 0, 8 },
		{ "0009", 0, 9 },
		{ "18446744073709551616", -ERANGE, 0 },
		{ "99999999999999999999999", -ERANGE, 0 },
		{ "-1", -EINVAL, 0 },
		{ " -1", -EINVAL, 0 },
		{ "-0", -EINVAL, 0 },
		{ "", -EINVAL, 0 },
		{ "  ", -EINVAL, 0 },
		{ "4 2", -EINVAL, 0 },
		{ "42x", -EINVAL, 0 },
		{ "4k", -EINVAL, 0 },
		{ "1.0", -EINVAL, 0 },
		{ "1e3", -EINVAL, 0 },
		{ "0x", -EINVAL, 0 },
		{ "x10", -EINVAL, 0 },
	};
	return cr_make_param_array(struct u64_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct u64_case *c, util, parse_u64)
{
	uint64_t v = 12345;
	int rc = parse_u64(c->in, &v);
	cr_assert_eq(rc, c->rc, "parse_u64(\"%s\") = %d, want %d", c->in, rc, c->rc);
	if (c->rc == 0)
		cr_assert_eq(v, c->want, "parse_u64(\"%s\") = %llu, want %llu", c->in,
			     (unsigned long long)v, (unsigned long long)c->want);
	else
		cr_assert_eq(v, 12345, "parse_u64(\"%s\") wrote *out on failure", c->in);
}

Test(util, parse_i64)
{
	int64_t v = 0;
	cr_assert_eq(parse_i64("-5", &v), 0);
	cr_assert_eq(v, -5);
	cr_assert_eq(parse_i64(" 9223372036854775807 ", &v), 0);
	cr_assert_eq(v, INT64_MAX);
	cr_assert_eq(parse_i64("-9223372036854775808", &v), 0);
	cr_assert_eq(v, INT64_MIN);
	cr_assert_eq(parse_i64("010", &v), 0);
	cr_assert_eq(v, 10, "leading zero read as octal: %lld", (long long)v);
	cr_assert_eq(parse_i64("9223372036854775808", &v), -ERANGE);
	cr_assert_eq(parse_i64("-9223372036854775809", &v), -ERANGE);
	cr_assert_eq(parse_i64("", &v), -EINVAL);
	cr_assert_eq(parse_i64("3 4", &v), -EINVAL);
	cr_assert_eq(parse_i64("--3", &v), -EINVAL);
}

Test(util, parse_double)
{
	double d = 0;
	cr_assert_eq(parse_double(" 2.5 ", &d), 0);
	cr_assert_float_eq(d, 2.5, 0);
	cr_assert_eq(parse_double("-1e3", &d), 0);
	cr_assert_float_eq(d, -1000.0, 0);
	cr_assert_eq(parse_double("inf", &d), -ERANGE);
	cr_assert_eq(parse_double("nan", &d), -ERANGE);
	cr_assert_eq(parse_double("1e400", &d), -ERANGE);
	cr_assert_eq(parse_double("", &d), -EINVAL);
	cr_assert_eq(parse_double("2.5ms", &d), -EINVAL);
}

/* ---- parse_bool -------------------------------------------------------------- */

struct bool_case {
	char in[48];        /* inline: parameters are copied to the test process */
	int rc;
	bool want;
};

ParameterizedTestParameters(util, parse_bool)
{
	static struct bool_case cases[] = {
		{ "1", 0, true }, { "true", 0, true }, { "TRUE", 0, true }, { "yes", 0, true },
		{ "Yes", 0, true }, { "on", 0, true }, { "ON", 0, true }, { "  true\t", 0, true },
		{ "0", 0, false }, { "false", 0, false }, { "False", 0, false }, { "no", 0, false },
		{ "off", 0, false }, { " off ", 0, false },
		{ "", -EINVAL, false }, { " ", -EINVAL, false }, { "2", -EINVAL, false },
		{ "-1", -EINVAL, false }, { "truex", -EINVAL, false }, { "t", -EINVAL, false },
		{ "y", -EINVAL, false }, { "true false", -EINVAL, false },
		{ "falsefalse", -EINVAL, false }, { "offfffff", -EINVAL, false },
		{ "yes please", -EINVAL, false }, { "01", -EINVAL, false },
	};
	return cr_make_param_array(struct bool_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct bool_case *c, util, parse_bool)
{
	/* start from the opposite value so a parse that writes nothing fails */
	bool v = !c->want;
	int rc = parse_bool(c->in, &v);
	cr_assert_eq(rc, c->rc, "parse_bool(\"%s\") = %d, want %d", c->in, rc, c->rc);
	if (c->rc == 0)
		cr_assert_eq(v, c->want, "parse_bool(\"%s\") = %d", c->in, v);
	else
		cr_assert_eq(v, !c->want, "parse_bool(\"%s\") wrote *out on failure", c->in);
}

/* ---- small helpers ------------------------------------------------------- */

Test(util, fmt_size)
{
	char buf[32];
	cr_assert_str_eq(fmt_size(buf, sizeof(buf), 0), "0 B");
	cr_assert_str_eq(fmt_size(buf, sizeof(buf), 1023), "1023 B");
	cr_assert_str_eq(fmt_size(buf, sizeof(buf), 1024), "1.00 KiB");
	cr_assert_str_eq(fmt_size(buf, sizeof(buf), 3ull << 29), "1.50 GiB");
	cr_assert_str_eq(fmt_size(buf, sizeof(buf), 5ull << 40), "5.00 TiB");
}

Test(util, str_copy_truncates_and_terminates)
{
	char buf[5];
	memset(buf, 'x', sizeof(buf));
	cr_assert_str_eq(str_copy(buf, sizeof(buf), "abcdefgh"), "abcd");
	cr_assert_str_eq(str_copy(buf, sizeof(buf), "ab"), "ab");
	char one[1] = { 'x' };
	cr_assert_str_eq(str_copy(one, 1, "abc"), "");
}

Test(util, log_parse_level)
{
	enum log_level l = LOG_ERROR;
	cr_assert_eq(log_parse_level("DEBUG", &l), 0);
	cr_assert_eq(l, LOG_DEBUG);
	cr_assert_eq(log_parse_level("warn", &l), 0);
	cr_assert_eq(l, LOG_WARN);
	cr_assert_eq(log_parse_level("verbose", &l), -EINVAL);
	cr_assert_eq(l, LOG_WARN);
}

/* ---- mem_prime_pages ------------------------------------------------------- */

static int open_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	cr_assert_not_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* Priming touches every page from user mode and from the kernel but changes
 * no byte of a shared file mapping (what the arena is), whatever the length
 * (more pages than one pwritev takes, a partial last page, none), and leaves
 * no descriptor behind. */
Test(util, mem_prime_pages_keeps_every_byte)
{
	const size_t lens[] = { 0, 1, 4096, 3 * 4096 + 100, 1024 * 4096, 2500 * 4096 + 7 };
	size_t cap = 2501 * 4096;
	int fd = memfd_create("prime-test", MFD_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)cap), 0);
	uint8_t *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert_neq(p, MAP_FAILED);
	uint8_t *want = malloc(cap);
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < cap; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		want[i] = p[i] = (uint8_t)x;
	}
	int fds = open_fds();
	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
		mem_prime_pages(p, lens[k]);
		cr_assert_eq(memcmp(p, want, cap), 0, "priming %zu bytes changed the mapping", lens[k]);
		cr_assert_eq(open_fds(), fds, "priming %zu bytes left a descriptor open", lens[k]);
	}
	uint8_t *back = malloc(cap);
	cr_assert_eq(pread(fd, back, cap, 0), (ssize_t)cap);
	cr_assert_eq(memcmp(back, want, cap), 0, "the file under the mapping changed");
	free(back);
	free(want);
	munmap(p, cap);
	close(fd);
}
