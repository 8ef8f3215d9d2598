/* The NPY header parser: numpy's .npy files and the members of an .npz.
 *
 * The header dict is parsed as the Python literal it is ('descr', 'fortran_order',
 * 'shape'), bounds-checked against the buffer given. Pure functions: any
 * thread. */
#define _GNU_SOURCE
#include "npz.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "seer.h"
#include "../util/util.h"

#define fail fmt_fail

struct lex {
	const char *p, *end;
};

static void lex_ws(struct lex *l)
{
	while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\n' || *l->p == '\r'))
		l->p++;
}

static bool lex_eat(struct lex *l, char c)
{
	lex_ws(l);
	if (l->p < l->end && *l->p == c) {
		l->p++;
		return true;
	}
	return false;
}

static bool lex_peek(struct lex *l, char c)
{
	lex_ws(l);
	return l->p < l->end && *l->p == c;
}

/* A quoted string without escapes, as [*s, *s + *n). */
static bool lex_str(struct lex *l, const char **s, size_t *n)
{
	lex_ws(l);
	if (l->p >= l->end || (*l->p != '\'' && *l->p != '"'))
		return false;
	char q = *l->p++;
	const char *b = l->p;
	while (l->p < l->end && *l->p != q) {
		if (*l->p == '\\')
			return false;
		l->p++;
	}
	if (l->p >= l->end)
		return false;
	*s = b;
	*n = (size_t)(l->p - b);
	l->p++;
	return true;
}

static bool lex_word(struct lex *l, const char *w)
{
	lex_ws(l);
	size_t n = strlen(w);
	if ((size_t)(l->end - l->p) < n || memcmp(l->p, w, n) != 0)
		return false;
	if ((size_t)(l->end - l->p) > n && (isalnum((unsigned char)l->p[n]) || l->p[n] == '_'))
		return false;
	l->p += n;
	return true;
}

static bool lex_uint(struct lex *l, uint64_t *v)
{
	lex_ws(l);
	const char *b = l->p;
	uint64_t x = 0;
	while (l->p < l->end && *l->p >= '0' && *l->p <= '9') {
		if (x > (UINT64_MAX - 9) / 10)
			return false;
		x = x * 10 + (uint64_t)(*l->p - '0');
		l->p++;
	}
	if (l->p == b)
		return false;
	if (l->p < l->end && *l->p == 'L') /* written by Python 2 */
		l->p++;
	*v = x;
	return true;
}

static bool key_is(const char *k, size_t n, const char *want)
{
	return n == strlen(want) && memcmp(k, want, n) == 0;
}

/* numpy's array-protocol type string: byte order, kind, item size. */
static int npy_descr(const char *s, size_t n, struct npy_header *h, char *err, size_t errlen)
{
	const char *supported = "supported: bool, int8..int64, uint8..uint64, float16/32/64";
	int show = (int)MIN(n, 32);
	size_t i = 0;
	char order = '|';
	if (n > 0 && (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '='))
		order = s[i++];
	if (i >= n)
		return fail(err, errlen, "NPY header: dtype '%.*s' does not parse", show, s);
	char kind = s[i++];
	uint64_t size = 0;
	if (kind == 'O')
		return fail(err, errlen,
			    "NPY header: dtype '%.*s' is an object array (Python pickles, not raw "
			    "data); save a numeric array (%s)", show, s, supported);
	if (i == n)
		return fail(err, errlen, "NPY header: dtype '%.*s' has no item size", show, s);
	for (; i < n; i++) {
		if (s[i] < '0' || s[i] > '9' || size > 1000)
			return fail(err, errlen, "NPY header: dtype '%.*s' does not parse", show, s);
		size = size * 10 + (uint64_t)(s[i] - '0');
	}
	uint32_t dt = SEER_DT_COUNT_;
	switch (kind) {
	case 'b':
		dt = size == 1 ? SEER_DT_BOOL : dt;
		break;
	case 'i':
		dt = size == 1 ? SEER_DT_I8 : size == 2 ? SEER_DT_I16 : size == 4 ? SEER_DT_I32
		   : size == 8 ? SEER_DT_I64 : dt;
		break;
	case 'u':
		dt = size == 1 ? SEER_DT_U8 : size == 2 ? SEER_DT_U16 : size == 4 ? SEER_DT_U32
		   : size == 8 ? SEER_DT_U64 : dt;
		break;
	case 'f':
		dt = size == 2 ? SEER_DT_F16 : size == 4 ? SEER_DT_F32 : size == 8 ? SEER_DT_F64 : dt;
		break;
	default:
		break;
	}
	if (dt == SEER_DT_COUNT_)
		return fail(err, errlen, "NPY header: unsupported dtype '%.*s' (%s)", show, s, supported);
	h->dtype = dt;
	h->itemsize = (uint32_t)size;
	h->swap = order == '>' && size > 1;
	return 0;
}

/* 'shape': a tuple of non-negative integers. */
static int npy_shape(struct lex *l, struct npy_header *h, char *err, size_t errlen)
{
	if (!lex_eat(l, '('))
		return fail(err, errlen, "NPY header: 'shape' is not a tuple");
	if (lex_eat(l, ')'))
		return 0;
	for (;;) {
		uint64_t v;
		if (!lex_uint(l, &v))
			return fail(err, errlen, "NPY header: 'shape' entry is not a non-negative "
					 "integer");
		if (h->ndim == NPY_MAX_DIMS)
			return fail(err, errlen, "array has more than %d dimensions", NPY_MAX_DIMS);
		h->shape[h->ndim++] = v;
		if (lex_eat(l, ')'))
			return 0;
		if (!lex_eat(l, ','))
			return fail(err, errlen, "NPY header: 'shape' tuple does not parse");
		if (lex_eat(l, ')'))
			return 0;
	}
}

enum { HAVE_DESCR = 1, HAVE_ORDER = 2, HAVE_SHAPE = 4 };

/* One "key: value" of the dict. */
static int npy_item(struct lex *l, const char *k, size_t kn, unsigned *have,
		    struct npy_header *h, char *err, size_t errlen)
{
	int show = (int)MIN(kn, 32);
	unsigned bit = key_is(k, kn, "descr") ? HAVE_DESCR : key_is(k, kn, "fortran_order")
		     ? HAVE_ORDER : key_is(k, kn, "shape") ? HAVE_SHAPE : 0;
	if (!bit)
		return fail(err, errlen, "NPY header has unexpected key '%.*s'", show, k);
	if (*have & bit)
		return fail(err, errlen, "NPY header repeats '%.*s'", show, k);
	*have |= bit;
	if (bit == HAVE_SHAPE)
		return npy_shape(l, h, err, errlen);
	if (bit == HAVE_ORDER) {
		if (lex_word(l, "True"))
			h->fortran = true;
		else if (lex_word(l, "False"))
			h->fortran = false;
		else
			return fail(err, errlen, "NPY header: 'fortran_order' is not True/False");
		return 0;
	}
	if (lex_peek(l, '['))
		return fail(err, errlen, "NPY header: structured dtypes (record arrays) are not "
				 "supported; save one numeric array per member");
	const char *d;
	size_t dn;
	if (!lex_str(l, &d, &dn))
		return fail(err, errlen, "NPY header: 'descr' is not a string");
	return npy_descr(d, dn, h, err, errlen);
}

static int npy_dict(struct lex *l, struct npy_header *h, char *err, size_t errlen)
{
	unsigned have = 0;
	if (!lex_eat(l, '{'))
		return fail(err, errlen, "NPY header is not a dict");
	for (;;) {
		if (lex_eat(l, '}'))
			break;
		const char *k;
		size_t kn;
		if (!lex_str(l, &k, &kn) || !lex_eat(l, ':'))
			return fail(err, errlen, "NPY header dict does not parse (expected 'key':)");
		int rc = npy_item(l, k, kn, &have, h, err, errlen);
		if (rc)
			return rc;
		if (lex_eat(l, ','))
			continue;
		if (lex_eat(l, '}'))
			break;
		return fail(err, errlen, "NPY header dict does not parse after '%.*s'",
			    (int)MIN(kn, 32), k);
	}
	lex_ws(l);
	if (l->p != l->end)
		return fail(err, errlen, "NPY header has bytes after its dict");
	if (have != (HAVE_DESCR | HAVE_ORDER | HAVE_SHAPE))
		return fail(err, errlen, "NPY header lacks '%s'", !(have & HAVE_DESCR) ? "descr"
			    : !(have & HAVE_ORDER) ? "fortran_order" : "shape");
	return 0;
}

int npy_parse_header(const void *buf, size_t len, struct npy_header *h, uint64_t *need,
		     char *err, size_t errlen)
{
	static const uint8_t magic[6] = { 0x93, 'N', 'U', 'M', 'P', 'Y' };
	const uint8_t *p = buf;
	memset(h, 0, sizeof(*h));
	if (memcmp(p, magic, MIN(len, sizeof(magic))) != 0)
		return fail(err, errlen, "not an NPY array (bad magic)");
	if (len < 10) {
		*need = 10;
		return -EAGAIN;
	}
	unsigned major = p[6], minor = p[7];
	if (major < 1 || major > 3 || minor != 0)
		return fail(err, errlen, "unsupported NPY format version %u.%u (known: 1.0, 2.0, 3.0)",
			    major, minor);
	uint64_t hoff = major == 1 ? 10 : 12;
	if (len < hoff) {
		*need = hoff;
		return -EAGAIN;
	}
	uint64_t hlen = major == 1 ? fmt_le16(p + 8) : fmt_le32(p + 8);
	if (hlen > NPY_MAX_HEADER)
		return fail(err, errlen, "NPY header claims %llu bytes (more than %u: damaged)",
			    (unsigned long long)hlen, NPY_MAX_HEADER);
	h->data_off = hoff + hlen;
	if (len < h->data_off) {
		*need = h->data_off;
		return -EAGAIN;
	}
	struct lex l = { (const char *)p + hoff, (const char *)p + h->data_off };
	int rc = npy_dict(&l, h, err, errlen);
	if (rc)
		return rc;
	uint64_t n = 1;
	for (uint32_t i = 0; i < h->ndim; i++)
		if (__builtin_mul_overflow(n, h->shape[i], &n))
			return fail(err, errlen, "NPY shape overflows 64 bits");
	h->nelem = n;
	if (__builtin_mul_overflow(n, (uint64_t)h->itemsize, &h->nbytes) ||
	    h->nbytes > (uint64_t)INT64_MAX - h->data_off)
		return fail(err, errlen, "NPY array size overflows 64 bits");
	return 0;
}

const char *npy_shape_str(char *buf, size_t len, const uint64_t *dims, uint32_t nd)
{
	size_t used = (size_t)snprintf(buf, len, "(");
	for (uint32_t i = 0; i < nd && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%llu", i ? ", " : "",
					 (unsigned long long)dims[i]);
	if (used < len)
		snprintf(buf + used, len - used, nd == 1 ? ",)" : ")");
	return buf;
}

