/* CRC32C (Castagnoli), as TFRecord frames records with it.
 *
 * Pure functions of their arguments; the lookup tables are built once on
 * first use (pthread_once), so any thread may call them. */
#ifndef SEER_FMT_CRC32C_H
#define SEER_FMT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC32C of buf continuing crc (0 to start). Uses SSE4.2 when the CPU has it,
 * slicing-by-8 tables otherwise. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

/* TFRecord's masking of a CRC32C. */
static inline uint32_t tfrecord_mask_crc(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif /* SEER_FMT_CRC32C_H */
