/* libFuzzer: the NPY header parser (numpy .npy files and .npz members). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../src/fmt/fmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct npy_header h;
	uint64_t need = 0;
	char err[512];
	int rc = npy_parse_header(data, size, &h, &need, err, sizeof(err));
	if (rc == 0) {
		if (h.ndim > NPY_MAX_DIMS || h.itemsize == 0 || h.data_off > size)
			abort();
		uint64_t n = 1;
		for (uint32_t i = 0; i < h.ndim; i++)
			if (__builtin_mul_overflow(n, h.shape[i], &n))
				abort(); /* the parser promised no overflow */
		if (n != h.nelem || h.nelem * h.itemsize != h.nbytes)
			abort();
	} else if (rc == -EAGAIN && need <= size) {
		abort(); /* asked for more bytes than it had, yet it had them */
	}
	return 0;
}
