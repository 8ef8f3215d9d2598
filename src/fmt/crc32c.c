/* CRC32C (Castagnoli, reflected polynomial 0x82f63b78): slicing-by-8 tables,
 * and the SSE4.2 crc32 instruction when the CPU has it, run as three
 * interleaved streams merged with precomputed "append zeros" operators.
 *
 * Tables are built once (pthread_once); afterwards every function is a pure
 * function of its arguments, callable from any thread. */
#define _GNU_SOURCE
#include "crc32c.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "fmt.h"
#include "../util/util.h"

#define CRC32C_POLY 0x82f63b78u /* Castagnoli, reflected */

static uint32_t crc_tab[8][256];
static bool crc_hw;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

/* The hardware path runs three streams of CRC_STRIDE bytes at once (the crc32
 * instruction has a latency of 3 and a throughput of 1) and merges them with
 * the linear operators "append CRC_STRIDE (2 * CRC_STRIDE) zero bytes", as
 * four byte tables each. */
#define CRC_STRIDE 2048
static uint32_t crc_zeros1[4][256], crc_zeros2[4][256];

/* Slicing-by-8 over little-endian words, on the raw (not inverted) state. */
static uint32_t crc32c_raw_sw(uint32_t crc, const uint8_t *p, size_t n)
{
	while (n && ((uintptr_t)p & 7)) {
		crc = crc_tab[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
		n--;
	}
	for (; n >= 8; p += 8, n -= 8) {
		uint64_t w = fmt_le64(p) ^ crc;
		crc = crc_tab[7][w & 0xff] ^ crc_tab[6][(w >> 8) & 0xff] ^
		      crc_tab[5][(w >> 16) & 0xff] ^ crc_tab[4][(w >> 24) & 0xff] ^
		      crc_tab[3][(w >> 32) & 0xff] ^ crc_tab[2][(w >> 40) & 0xff] ^
		      crc_tab[1][(w >> 48) & 0xff] ^ crc_tab[0][w >> 56];
	}
	while (n--)
		crc = crc_tab[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return crc;
}

static void zeros_op(uint32_t op[4][256], size_t len)
{
	static const uint8_t zero[CRC_STRIDE];
	uint32_t col[32];
	for (int b = 0; b < 32; b++) {
		uint32_t c = 1u << b;
		for (size_t done = 0; done < len; done += sizeof(zero))
			c = crc32c_raw_sw(c, zero, MIN(sizeof(zero), len - done));
		col[b] = c;
	}
	for (int j = 0; j < 4; j++)
		for (uint32_t v = 0; v < 256; v++) {
			uint32_t r = 0;
			for (int b = 0; b < 8; b++)
				if (v & (1u << b))
					r ^= col[8 * j + b];
			op[j][v] = r;
		}
}

static inline uint32_t crc_apply(const uint32_t op[4][256], uint32_t c)
{
	return op[0][c & 0xff] ^ op[1][(c >> 8) & 0xff] ^ op[2][(c >> 16) & 0xff] ^ op[3][c >> 24];
}

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1)));
		crc_tab[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
	zeros_op(crc_zeros1, CRC_STRIDE);
	zeros_op(crc_zeros2, 2 * CRC_STRIDE);
#if defined(__x86_64__)
	crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc32c_raw_hw(uint32_t crc, const uint8_t *p, size_t n)
{
	uint64_t c = crc;
	while (n && ((uintptr_t)p & 7)) {
		c = _mm_crc32_u8((uint32_t)c, *p++);
		n--;
	}
	for (; n >= 3 * CRC_STRIDE; p += 3 * CRC_STRIDE, n -= 3 * CRC_STRIDE) {
		uint64_t c1 = 0, c2 = 0;
		for (size_t i = 0; i < CRC_STRIDE; i += 8) {
			uint64_t w0, w1, w2;
			memcpy(&w0, p + i, 8);
			memcpy(&w1, p + CRC_STRIDE + i, 8);
			memcpy(&w2, p + 2 * CRC_STRIDE + i, 8);
			c = _mm_crc32_u64(c, w0);
			c1 = _mm_crc32_u64(c1, w1);
			c2 = _mm_crc32_u64(c2, w2);
		}
		c = crc_apply(crc_zeros2, (uint32_t)c) ^ crc_apply(crc_zeros1, (uint32_t)c1) ^
		    (uint32_t)c2;
	}
	for (; n >= 8; p += 8, n -= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		c = _mm_crc32_u64(c, w);
	}
	while (n--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return (uint32_t)c;
}
#endif

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&crc_once, crc_init);
#if defined(__x86_64__)
	if (crc_hw)
		return ~crc32c_raw_hw(~crc, buf, len);
#endif
	return ~crc32c_raw_sw(~crc, buf, len);
}
