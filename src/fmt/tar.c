/* The tar format: WebDataset shards, one sample per key.
 *
 * A shard is a tar archive; a sample is the consecutive members sharing a
 * key (WebDataset's rule: the member path up to the first dot of its base
 * name; members whose base name has no dot, and top-level "__*__" members,
 * belong to none). seer delivers the member whose extension comes first in
 * dataset.tar_extensions (default jpg,jpeg,png,webp; compared without case,
 * the whole extension after that first dot) as BYTES, and the label from the
 * member of extension dataset.tar_label (default cls: an ASCII integer, read
 * at scan); a sample without one takes its shard's class directory
 * (root/<class>/<shard>.tar, numbered as the files format numbers them), or -1 for
 * shards at the root. The member wins over the directory.
 *
 * Why a parser of our own and not libarchive (Debian's libarchive13): seer
 * reads samples by byte ranges it plans itself (coalesced extents, NVMe and
 * RAM tiers filled from them), so the catalog needs each member's data
 * offset in the shard file. libarchive hands out member data through its
 * read callbacks and does not say where in the file it lies (only
 * archive_read_header_position, the header's offset, whose distance to the
 * data depends on pax/long-name headers libarchive consumed), and it would
 * read every data byte at scan. The tar header is a 512-byte block with a
 * checksum; ustar, GNU long names and pax records are ~300 lines here,
 * bounds-checked, with unit tests on every branch (tests/unit/test_tar.c).
 *
 * Offsets come from the headers at scan (read through a window of 4 KiB to 1
 * MiB that adapts to the members' sizes: data larger than it is passed over,
 * not read); per sample the catalog keeps the
 * data member's offset and length, and per file aux[0] = 1 when some data
 * member's size came from a pax record (the header field then differs). A
 * read takes the member's header block with its data (one range: the span is
 * [offset - 512, offset + length)) and checks that the header still parses
 * and still gives that size, so a shard rewritten in place is an error, not
 * wrong bytes.
 *
 * Damage found at scan (a bad header checksum, a shard cut short, a sample
 * without a data member, a label that is not an integer) fails the catalog
 * build naming the shard, the member and what to do; with dataset.on_corrupt
 * = skip the sample (or for damaged headers, the rest of the shard) is left
 * out with a warning. Scan: the catalog's scanning threads, one shard each;
 * read/cut: any reader's thread. */
#define _GNU_SOURCE
#include "fmt.h"
#include "tar.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "seer.h"
#include "../util/util.h"

#define fail fmt_fail

/* ---- the header block -------------------------------------------------------- */

/* A NUL- or end-terminated field into out (n + 1 bytes). */
static void tar_field_str(char *out, const uint8_t *f, size_t n)
{
	size_t k = strnlen((const char *)f, n);
	memcpy(out, f, k);
	out[k] = '\0';
}

/* A numeric field: octal digits (up to the first NUL, spaces around them;
 * empty is 0), or GNU's base-256 (first byte 0x80, big-endian). As Python's
 * tarfile.nti, negative values refused. */
static int tar_num(const uint8_t *f, size_t n, uint64_t *v)
{
	if (f[0] & 0x80) {
		if (f[0] != 0x80)
			return -1;
		uint64_t x = 0;
		for (size_t i = 1; i < n; i++) {
			if (x >> 56)
				return -1;
			x = x << 8 | f[i];
		}
		*v = x;
		return 0;
	}
	size_t end = strnlen((const char *)f, n), i = 0;
	while (i < end && f[i] == ' ')
		i++;
	while (end > i && f[end - 1] == ' ')
		end--;
	uint64_t x = 0;
	for (; i < end; i++) {
		if (f[i] < '0' || f[i] > '7' || (x >> 61))
			return -1;
		x = x << 3 | (uint64_t)(f[i] - '0');
	}
	*v = x;
	return 0;
}

int tar_parse_header(const void *buf, size_t len, struct tar_header *h, char *err, size_t errlen)
{
	const uint8_t *p = buf;
	memset(h, 0, sizeof(*h));
	if (len < TAR_BLOCK)
		return fail(err, errlen, "header truncated (%zu of %u bytes)", len, TAR_BLOCK);
	bool zero = true;
	for (size_t i = 0; i < TAR_BLOCK && zero; i++)
		zero = p[i] == 0;
	if (zero) {
		h->zero = true;
		return 0;
	}
	uint64_t stored;
	if (tar_num(p + 148, 8, &stored) != 0)
		return fail(err, errlen, "checksum field is not an octal number: not a tar header");
	uint64_t usum = 0;
	int64_t ssum = 0;
	for (size_t i = 0; i < TAR_BLOCK; i++) {
		uint8_t c = i >= 148 && i < 156 ? ' ' : p[i];
		usum += c;
		ssum += (int8_t)c;
	}
	if (stored != usum && (int64_t)stored != ssum)
		return fail(err, errlen, "bad header checksum (stored %llu, computed %llu): not a tar "
				 "header, or damaged", (unsigned long long)stored,
			    (unsigned long long)usum);
	if (tar_num(p + 124, 12, &h->size) != 0)
		return fail(err, errlen, "size field is not a number");
	h->type = p[156] ? (char)p[156] : '0';
	char name[101], prefix[156];
	tar_field_str(name, p, 100);
	tar_field_str(prefix, p + 345, 155);
	/* the prefix field is POSIX ustar's; GNU headers keep other things there */
	if (memcmp(p + 257, "ustar\0", 6) == 0 && prefix[0])
		snprintf(h->name, sizeof(h->name), "%s/%s", prefix, name);
	else
		memcpy(h->name, name, sizeof(name));
	return 0;
}

/* ---- pax records ----------------------------------------------------------------- */

int tar_parse_pax(const void *buf, size_t len, struct tar_pax *p, char *err, size_t errlen)
{
	const char *s = buf, *end = s + len;
	uint64_t rec = 0;
	while (s < end) {
		/* a block's zero padding after the last record */
		if (*s == '\0')
			break;
		rec++;
		const char *r = s;
		uint64_t n = 0;
		while (s < end && *s >= '0' && *s <= '9' && n < (1ull << 40))
			n = n * 10 + (uint64_t)(*s++ - '0');
		if (s == r || s >= end || *s != ' ' || n > (uint64_t)(end - r) || n < 5 ||
		    r[n - 1] != '\n')
			return fail(err, errlen, "pax record %llu does not parse as \"<length> "
					 "<key>=<value>\\n\"", (unsigned long long)rec);
		const char *key = s + 1, *rend = r + n - 1; /* at the '\n' */
		const char *eq = memchr(key, '=', (size_t)(rend - key));
		if (!eq || eq == key)
			return fail(err, errlen, "pax record %llu has no \"key=\"", (unsigned long long)rec);
		size_t klen = (size_t)(eq - key), vlen = (size_t)(rend - eq - 1);
		const char *val = eq + 1;
		if (klen == 4 && memcmp(key, "path", 4) == 0) {
			if (vlen >= sizeof(p->path) || memchr(val, '\0', vlen))
				return fail(err, errlen, "pax path of %zu bytes: longer than %u or holding a "
						 "NUL", vlen, TAR_NAME_MAX - 1);
			memcpy(p->path, val, vlen);
			p->path[vlen] = '\0';
			p->has_path = true;
		} else if (klen == 4 && memcmp(key, "size", 4) == 0) {
			uint64_t v = 0;
			size_t i = 0;
			for (; i < vlen && val[i] >= '0' && val[i] <= '9' && v < (1ull << 58); i++)
				v = v * 10 + (uint64_t)(val[i] - '0');
			if (i == 0 || i != vlen)
				return fail(err, errlen, "pax size '%.*s' is not a decimal number",
					    (int)MIN(vlen, (size_t)32), val);
			p->size = v;
			p->has_size = true;
		} else if (klen > 11 && memcmp(key, "GNU.sparse.", 11) == 0) {
			return fail(err, errlen, "a GNU sparse member (pax %.*s): its data is not its "
					 "bytes in the shard; write the shard without --sparse",
				    (int)klen, key);
		}
		s = r + n;
	}
	return 0;
}

/* ---- names and labels -------------------------------------------------------------- */

bool tar_split_name(const char *name, size_t *keylen, const char **ext)
{
	const char *slash = strrchr(name, '/');
	const char *base = slash ? slash + 1 : name;
	const char *dot = strchr(base, '.');
	if (!dot || dot == base)
		return false;
	*keylen = (size_t)(dot - name);
	*ext = dot + 1;
	return true;
}

int tar_parse_label(const void *buf, size_t len, int64_t *label)
{
	const char *s = buf, *end = s + len;
	while (s < end && isspace((unsigned char)*s))
		s++;
	while (end > s && (isspace((unsigned char)end[-1]) || end[-1] == '\0'))
		end--;
	bool neg = false;
	if (s < end && (*s == '-' || *s == '+'))
		neg = *s++ == '-';
	if (s == end)
		return SEER_EDATASET;
	uint64_t v = 0;
	for (; s < end; s++) {
		if (*s < '0' || *s > '9' || v > (uint64_t)INT64_MAX / 10)
			return SEER_EDATASET;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	if (v > (uint64_t)INT64_MAX)
		return SEER_EDATASET;
	*label = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

/* ---- the walk ------------------------------------------------------------------------ */

/* A window read takes `chunk` bytes, from TAR_READ_MIN to TAR_WIN: shards of
 * small members are read in large windows (few requests: the window doubles
 * while headers lie within TAR_SKIP of its end), shards of large members
 * (images of ~100 KiB) 4 KiB at each header, so the scan reads a few percent
 * of the shard instead of most of it. */
#define TAR_READ_MIN (4u << 10)
#define TAR_READ_START (64u << 10)
#define TAR_SKIP (16u << 10) /* a header this far past the window: read little at the next */

int tar_walk_init(struct tar_walk *w, tar_read_fn read, void *ctx, uint64_t size)
{
	memset(w, 0, sizeof(*w));
	w->read = read;
	w->ctx = ctx;
	w->size = size;
	w->chunk = TAR_READ_START;
	w->win = malloc(TAR_WIN);
	return w->win ? 0 : -ENOMEM;
}

void tar_walk_fini(struct tar_walk *w)
{
	free(w->win);
	w->win = NULL;
}

int tar_bytes(struct tar_walk *w, uint64_t off, size_t len, const uint8_t **p, char *err,
	      size_t errlen)
{
	if (len > TAR_WIN || off > w->size || len > w->size - off)
		return fail(err, errlen, "bytes %llu..%llu lie past the end of the shard (%llu bytes)",
			    (unsigned long long)off, (unsigned long long)(off + len),
			    (unsigned long long)w->size);
	if (off < w->wpos || off + len > w->wpos + w->wlen) {
		uint64_t wend = w->wpos + w->wlen;
		if (w->wlen && off >= wend + TAR_SKIP)
			w->chunk = TAR_READ_MIN; /* a large member passed over */
		else if (w->wlen && off >= w->wpos)
			w->chunk = MIN(w->chunk * 2, (uint64_t)TAR_WIN); /* dense headers */
		uint64_t n = MIN(w->size - off, MAX((uint64_t)len, w->chunk));
		int rc = w->read(w->ctx, w->win, (size_t)n, off);
		if (rc == -ENODATA)
			return fail(err, errlen, "the shard shrank while being read");
		if (rc)
			return rc;
		w->wpos = off;
		w->wlen = n;
	}
	*p = w->win + (off - w->wpos);
	return 0;
}

static uint64_t tar_round(uint64_t n)
{
	return (n + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
}

int tar_next(struct tar_walk *w, struct tar_member *m, char *err, size_t errlen)
{
	struct tar_pax pax = { 0 }, glob;
	bool have_long = false;
	char why[256];
	int rc;
	for (;;) {
		uint64_t hdr = w->pos;
		if (hdr == w->size)
			return 0;
		if (w->size - hdr < TAR_BLOCK)
			return fail(err, errlen, "truncated: %llu bytes at offset %llu after the last "
					 "member, too short for a header (the shard was cut short)",
				    (unsigned long long)(w->size - hdr), (unsigned long long)hdr);
		const uint8_t *blk;
		if ((rc = tar_bytes(w, hdr, TAR_BLOCK, &blk, err, errlen)) != 0)
			return rc;
		struct tar_header h;
		if (tar_parse_header(blk, TAR_BLOCK, &h, why, sizeof(why)) != 0)
			return fail(err, errlen, "header at offset %llu: %s", (unsigned long long)hdr,
				    why);
		w->headers++;
		if (h.zero)
			return 0;
		bool ext = h.type == 'x' || h.type == 'g' || h.type == 'L' || h.type == 'K';
		uint64_t data = hdr + TAR_BLOCK, size = !ext && pax.has_size ? pax.size : h.size;
		const char *name = pax.has_path ? pax.path : have_long ? m->name : h.name;
		if (size > w->size - data || tar_round(size) > w->size - data)
			return fail(err, errlen, "member '%.300s' (header at offset %llu) holds %llu "
					 "bytes, past the end of the shard (%llu bytes): the shard is "
					 "truncated", ext ? h.name : name, (unsigned long long)hdr,
				    (unsigned long long)size, (unsigned long long)w->size);
		w->pos = data + tar_round(size);
		const uint8_t *d;
		switch (h.type) {
		case 'L':
			if (size > TAR_NAME_MAX)
				return fail(err, errlen, "GNU long name at offset %llu of %llu bytes: "
						 "longer than %u", (unsigned long long)hdr,
					    (unsigned long long)size, TAR_NAME_MAX - 1);
			if ((rc = tar_bytes(w, data, (size_t)size, &d, err, errlen)) != 0)
				return rc;
			tar_field_str(m->name, d, (size_t)size);
			have_long = true;
			continue;
		case 'x':
		case 'g':
			if (size > TAR_WIN)
				return fail(err, errlen, "pax header at offset %llu of %llu bytes: larger "
						 "than %u", (unsigned long long)hdr,
					    (unsigned long long)size, TAR_WIN);
			if ((rc = tar_bytes(w, data, (size_t)size, &d, err, errlen)) != 0)
				return rc;
			/* global records (a writer's defaults) are checked, not applied */
			glob = (struct tar_pax){ 0 };
			if (tar_parse_pax(d, (size_t)size, h.type == 'x' ? &pax : &glob, why,
					  sizeof(why)) != 0)
				return fail(err, errlen, "pax header at offset %llu: %s",
					    (unsigned long long)hdr, why);
			continue;
		case 'K':
			continue;
		case 'S':
		case 'M':
			return fail(err, errlen, "member '%.300s' at offset %llu is a GNU %s member: its "
					 "data is not its bytes in the shard; write the shard without %s",
				    name, (unsigned long long)hdr,
				    h.type == 'S' ? "sparse" : "multi-volume",
				    h.type == 'S' ? "--sparse" : "--multi-volume");
		case '1': case '2': case '3': case '4': case '5': case '6':
			w->pos = data; /* no data (as Python's tarfile reads them) */
			pax = (struct tar_pax){ 0 };
			have_long = false;
			continue;
		case '0':
		case '7':
			if (name[0] && name[strlen(name) - 1] == '/') { /* old tars' directories */
				pax = (struct tar_pax){ 0 };
				have_long = false;
				continue;
			}
			if (name != m->name)
				snprintf(m->name, sizeof(m->name), "%s", name);
			m->hdr_off = hdr;
			m->data_off = data;
			m->size = size;
			m->pax_size = pax.has_size && pax.size != h.size;
			return 1;
		default: /* other types: their data passed over, as Python's tarfile does */
			pax = (struct tar_pax){ 0 };
			have_long = false;
			continue;
		}
	}
}

/* ---- the catalog scan ------------------------------------------------------------ */

#define TAR_EXT_DEFAULT "jpg,jpeg,png,webp"
#define TAR_LABEL_DEFAULT "cls"
#define TAR_EXTS 32
#define TAR_EXT_LEN 64

struct tar_exts {
	unsigned n;
	char e[TAR_EXTS][TAR_EXT_LEN];
};

static int tar_exts_parse(const char *list, struct tar_exts *x, char *err, size_t errlen)
{
	x->n = 0;
	for (const char *s = list; *s;) {
		const char *comma = strchr(s, ',');
		size_t n = comma ? (size_t)(comma - s) : strlen(s);
		while (n && *s == ' ')
			s++, n--;
		while (n && s[n - 1] == ' ')
			n--;
		if (*s == '.')
			s++, n -= n > 0;
		if (n) {
			if (x->n == TAR_EXTS || n >= TAR_EXT_LEN)
				return fail(err, errlen, "dataset.tar_extensions = %.200s: at most %d "
						 "extensions of at most %d characters", list, TAR_EXTS,
					    TAR_EXT_LEN - 1);
			memcpy(x->e[x->n], s, n);
			x->e[x->n++][n] = '\0';
		}
		if (!comma)
			break;
		s = comma + 1;
	}
	if (x->n == 0)
		return fail(err, errlen, "dataset.tar_extensions is empty: list the extensions of "
				 "the member to deliver (e.g. jpg,png)");
	return 0;
}

/* The sample being gathered: consecutive members of one key. */
struct tar_group {
	bool open;
	char key[TAR_NAME_MAX];
	size_t keylen;
	uint64_t first_off;       /* its first member's header */
	unsigned best;            /* index in the extension list of the data member (n: none) */
	uint64_t seen;            /* extensions found (bit per list index) */
	uint64_t off, size;       /* the data member */
	bool pax_size;
	bool has_label, label_bad;
	int64_t label;
	char label_text[24];      /* for the message */
	char others[160];         /* extensions met, for the message */
};

struct tar_scan {
	struct catalog_builder *b;
	uint32_t file;
	uint32_t type;
	struct tar_exts exts;
	const char *exts_text;
	const char *label_ext;    /* "" = none */
	int64_t dir_label;
	bool skip;
	uint64_t skipped;         /* samples left out (on_corrupt = skip) */
	char first_skip[700];
	bool any_pax_size;
	struct tar_group g;
};

/* A sample the scan cannot take: an error, or with on_corrupt = skip a count
 * (and the first reason, for the warning). Returns 0 to go on. */
static int tar_reject(struct tar_scan *sc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int tar_reject(struct tar_scan *sc, const char *fmt, ...)
{
	char msg[700];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!sc->skip) {
		catalog_builder_error(sc->b, "%s, or set dataset.on_corrupt = skip to leave such "
				      "samples out", msg);
		return SEER_EDATASET;
	}
	if (sc->skipped++ == 0)
		snprintf(sc->first_skip, sizeof(sc->first_skip), "%s", msg);
	return 0;
}

static int tar_flush(struct tar_scan *sc)
{
	struct tar_group *g = &sc->g;
	if (!g->open)
		return 0;
	g->open = false;
	if (g->best == sc->exts.n)
		return tar_reject(sc, "sample '%.*s' (members from offset %llu: %s) has no member "
				  "with an extension of dataset.tar_extensions = %.200s: add one, or "
				  "list its extension there", (int)MIN(g->keylen, (size_t)300), g->key,
				  (unsigned long long)g->first_off, g->others[0] ? g->others : "none",
				  sc->exts_text);
	if (g->label_bad)
		return tar_reject(sc, "sample '%.*s': member '%.*s.%s' holds '%s', not an integer "
				  "label: write the class index as ASCII digits, or set "
				  "dataset.tar_label to the extension of the member holding it (\"\" "
				  "for none)", (int)MIN(g->keylen, (size_t)300), g->key,
				  (int)MIN(g->keylen, (size_t)300), g->key, sc->label_ext, g->label_text);
	sc->any_pax_size |= g->pax_size;
	return catalog_add_sample(sc->b, sc->file, g->off, g->size,
				  g->has_label ? g->label : sc->dir_label, sc->type);
}

static void tar_note_ext(struct tar_group *g, const char *ext)
{
	size_t used = strlen(g->others);
	if (used + strlen(ext) + 4 < sizeof(g->others))
		snprintf(g->others + used, sizeof(g->others) - used, "%s.%s", used ? ", " : "", ext);
}

static int tar_member_add(struct tar_scan *sc, struct tar_walk *w, const struct tar_member *m)
{
	const char *name = m->name;
	size_t keylen;
	const char *ext;
	if (!strchr(name, '/') && strncmp(name, "__", 2) == 0 &&
	    strlen(name) >= 4 && strcmp(name + strlen(name) - 2, "__") == 0)
		return 0; /* WebDataset's meta members */
	if (!tar_split_name(name, &keylen, &ext))
		return 0;
	struct tar_group *g = &sc->g;
	if (!g->open || keylen != g->keylen || memcmp(name, g->key, keylen) != 0) {
		int rc = tar_flush(sc);
		if (rc)
			return rc;
		memset(g, 0, offsetof(struct tar_group, others) + 1);
		g->open = true;
		memcpy(g->key, name, keylen);
		g->key[keylen] = '\0';
		g->keylen = keylen;
		g->first_off = m->hdr_off;
		g->best = sc->exts.n;
	}
	tar_note_ext(g, ext);
	for (unsigned i = 0; i < sc->exts.n; i++) {
		if (strcasecmp(ext, sc->exts.e[i]) != 0)
			continue;
		if (g->seen >> i & 1)
			goto dup;
		g->seen |= 1ull << i;
		if (i < g->best) {
			g->best = i;
			g->off = m->data_off;
			g->size = m->size;
			g->pax_size = m->pax_size;
		}
		return 0;
	}
	if (*sc->label_ext && strcasecmp(ext, sc->label_ext) == 0) {
		if (g->has_label || g->label_bad)
			goto dup;
		const uint8_t *p = NULL;
		char err[256];
		if (m->size <= TAR_LABEL_MAX) {
			int rc = tar_bytes(w, m->data_off, (size_t)m->size, &p, err, sizeof(err));
			if (rc) {
				catalog_builder_error(sc->b, "label member '%.300s' at offset %llu: %s",
						      name, (unsigned long long)m->hdr_off, err);
				return rc;
			}
		}
		if (p && tar_parse_label(p, (size_t)m->size, &g->label) == 0) {
			g->has_label = true;
		} else {
			g->label_bad = true;
			if (p) {
				size_t k = 0;
				for (size_t i = 0; i < m->size && k + 5 < sizeof(g->label_text); i++)
					k += (size_t)snprintf(g->label_text + k, sizeof(g->label_text) - k,
							      isprint(p[i]) ? "%c" : "\\x%02x", p[i]);
			} else {
				snprintf(g->label_text, sizeof(g->label_text), "%llu bytes",
					 (unsigned long long)m->size);
			}
		}
	}
	return 0;
dup:
	catalog_builder_error(sc->b, "member '%.300s' (offset %llu) repeats extension '%s' of sample "
			      "'%.300s': a sample holds each extension once (WebDataset refuses it "
			      "too); rewrite the shard", name, (unsigned long long)m->hdr_off, ext,
			      g->key);
	return SEER_EDATASET;
}

static int tar_read_fd(void *ctx, void *buf, size_t len, uint64_t off)
{
	return fmt_pread(*(int *)ctx, buf, len, off);
}

static bool tar_accept(const struct catalog_params *p, const char *relpath)
{
	(void)p;
	return fmt_has_suffix(relpath, ".tar");
}

static int tar_scan(struct catalog_builder *b, uint32_t file, int fd, uint64_t size)
{
	const struct catalog_params *p = catalog_builder_params(b);
	const char *rel = catalog_builder_path(b, file);
	struct tar_scan *sc = calloc(1, sizeof(*sc));
	if (!sc)
		return -ENOMEM;
	sc->b = b;
	sc->file = file;
	sc->skip = p->skip_corrupt;
	sc->exts_text = p->tar_extensions ? p->tar_extensions : TAR_EXT_DEFAULT;
	sc->label_ext = p->tar_label ? p->tar_label : TAR_LABEL_DEFAULT;
	if (*sc->label_ext == '.')
		sc->label_ext++;
	sc->dir_label = strchr(rel, '/') ? catalog_builder_class(b, rel) : -1;
	static const struct seer_wire_type bytes = { .dtype = SEER_DT_BYTES };
	char err[700];
	struct tar_walk w;
	int rc = tar_exts_parse(sc->exts_text, &sc->exts, err, sizeof(err));
	if (rc) {
		catalog_builder_error(b, "%s", err);
		free(sc);
		return rc;
	}
	if ((rc = catalog_intern_type(b, &bytes, &sc->type)) != 0 ||
	    (rc = tar_walk_init(&w, tar_read_fd, &fd, size)) != 0) {
		free(sc);
		return rc;
	}
	struct tar_member *m = malloc(sizeof(*m));
	if (!m)
		rc = -ENOMEM;
	char last[320] = "";
	while (rc == 0) {
		int k = tar_next(&w, m, err, sizeof(err));
		if (k == 1) {
			rc = tar_member_add(sc, &w, m);
			snprintf(last, sizeof(last), "%.300s", m->name);
			continue;
		}
		if (k == 0) {
			rc = tar_flush(sc);
			break;
		}
		if (k != SEER_EDATASET) {
			rc = k;
			break;
		}
		char where[400] = "";
		if (last[0])
			snprintf(where, sizeof(where), " (after member '%s')", last);
		if (!sc->skip) {
			catalog_builder_error(b, "%s%s: rewrite the shard, or set dataset.on_corrupt = "
					      "skip to keep the samples before the damage", err, where);
			rc = SEER_EDATASET;
			break;
		}
		/* skip: the samples complete before the damage are kept; the one being
		 * gathered may miss members, so it goes with the rest */
		log_warn("tar shard %s: %s%s: its samples before the damage are kept, the rest left "
			 "out (dataset.on_corrupt = skip)", rel, err, where);
		if (sc->g.open)
			sc->skipped++;
		break;
	}
	if (rc == 0 && sc->skipped)
		log_warn("tar shard %s: %llu samples left out (dataset.on_corrupt = skip)%s%s", rel,
			 (unsigned long long)sc->skipped, sc->first_skip[0] ? "; the first: " : "",
			 sc->first_skip);
	if (rc == 0)
		catalog_builder_aux(b, file)[0] = sc->any_pax_size;
	free(m);
	tar_walk_fini(&w);
	free(sc);
	return rc;
}

/* ---- reading: the member's header block, then its data --------------------------- */

static int tar_check(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s,
		     const uint8_t *hdr)
{
	struct tar_header h;
	char err[256];
	uint64_t at = s->offset - TAR_BLOCK;
	if (tar_parse_header(hdr, TAR_BLOCK, &h, err, sizeof(err)) != 0)
		return catalog_read_error(rd, id, SEER_EDATASET, "tar header at offset %llu: %s: the "
					  "shard was damaged or rewritten since the scan; restart "
					  "seerd to rescan", (unsigned long long)at, err);
	if (h.zero || (h.type != '0' && h.type != '7'))
		return catalog_read_error(rd, id, SEER_EDATASET, "the tar header at offset %llu is no "
					  "longer a regular file's: the shard was rewritten since the "
					  "scan; restart seerd to rescan", (unsigned long long)at);
	if (!rd->cat->files[s->file].aux[0] && h.size != s->length)
		return catalog_read_error(rd, id, SEER_EDATASET, "tar member '%.200s' at offset %llu "
					  "holds %llu bytes, the catalog says %llu: restart seerd to "
					  "rescan", h.name, (unsigned long long)at,
					  (unsigned long long)h.size, (unsigned long long)s->length);
	return 0;
}

static int tar_read(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s, void *dst)
{
	int fd = catalog_reader_fd(rd, s->file);
	if (fd < 0)
		return fd;
	uint8_t hdr[TAR_BLOCK];
	struct iovec iov[2] = { { hdr, sizeof(hdr) }, { dst, (size_t)s->length } };
	int rc = fmt_preadv(fd, iov, 2, s->offset - TAR_BLOCK);
	if (rc == -ENODATA)
		return catalog_read_error(rd, id, SEER_EDATASET, "shard shorter than its catalogued "
					  "members: restart seerd to rescan");
	if (rc)
		return rc;
	return tar_check(rd, id, s, hdr);
}

static bool tar_span(const struct catalog *c, uint64_t id, const struct catalog_sample *s, uint64_t *lo,
		     uint64_t *hi)
{
	(void)c;
	(void)id;
	*lo = s->offset - TAR_BLOCK;
	*hi = s->offset + s->length;
	return true;
}

static int tar_cut(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s,
		   const uint8_t *buf, uint64_t off, uint64_t len, void *dst)
{
	uint64_t lo = s->offset - TAR_BLOCK, need = TAR_BLOCK + s->length;
	if (lo < off || lo - off > len || len - (lo - off) < need)
		return catalog_read_error(rd, id, -ERANGE, "member at offset %llu is not inside the "
					  "bytes read (%llu..%llu)", (unsigned long long)lo,
					  (unsigned long long)off, (unsigned long long)(off + len));
	const uint8_t *p = buf + (lo - off);
	int rc = tar_check(rd, id, s, p);
	if (rc)
		return rc;
	memcpy(dst, p + TAR_BLOCK, (size_t)s->length);
	return 0;
}

const struct fmt_ops fmt_tar = {
	.name = "tar",
	.accept = tar_accept,
	.dir_labels = true,
	.scan = tar_scan,
	.read = tar_read,
	.span = tar_span,
	.cut = tar_cut,
};
