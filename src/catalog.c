#define _GNU_SOURCE
#include "catalog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "seer.h"
#include "util.h"

/* ---- format registry ----------------------------------------------------- */

extern const struct fmt_ops fmt_files;
/* Formats living in their own files (src/fmt_*.c). Not weak: a weak reference
 * does not pull an object out of a static archive (libcore.a), so every one of
 * them would silently be missing from the daemon and the tools. */
#define FMT_WEAK
extern const struct fmt_ops fmt_npz FMT_WEAK;
extern const struct fmt_ops fmt_npy FMT_WEAK;
extern const struct fmt_ops fmt_hdf5 FMT_WEAK;
extern const struct fmt_ops fmt_tfrecord FMT_WEAK;
extern const struct fmt_ops fmt_indexed FMT_WEAK;

static const struct fmt_ops *const *registry(size_t *n)
{
	static const struct fmt_ops *all[8];
	static size_t count;
	if (count == 0) {
		const struct fmt_ops *cand[] = { &fmt_files, &fmt_npz, &fmt_npy, &fmt_hdf5,
						 &fmt_tfrecord, &fmt_indexed };
		size_t k = 0;
		for (size_t i = 0; i < ARRAY_SIZE(cand); i++)
			if (cand[i])
				all[k++] = cand[i];
		count = k;
	}
	*n = count;
	return all;
}

const struct fmt_ops *cat_find_format(const char *name)
{
	size_t n;
	const struct fmt_ops *const *all = registry(&n);
	for (size_t i = 0; i < n; i++)
		if (strcmp(all[i]->name, name) == 0)
			return all[i];
	return NULL;
}

const char *cat_format_names(void)
{
	static char names[128];
	if (names[0] == '\0') {
		size_t n, used = 0;
		const struct fmt_ops *const *all = registry(&n);
		for (size_t i = 0; i < n; i++)
			used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s",
						 i ? ", " : "", all[i]->name);
	}
	return names;
}

/* ---- string pool and builder ------------------------------------------- */

struct strpool {
	char *buf;
	uint64_t len, cap;
};

static uint32_t pool_add(struct strpool *p, const char *s)
{
	size_t n = strlen(s) + 1;
	if (p->len + n > p->cap) {
		p->cap = MAX(p->cap * 2, p->len + n + 4096);
		p->buf = xrealloc(p->buf, p->cap);
	}
	memcpy(p->buf + p->len, s, n);
	uint64_t off = p->len;
	p->len += n;
	if (off > UINT32_MAX) {
		log_error("catalog string pool exceeds 4 GiB");
		abort();
	}
	return (uint32_t)off;
}

struct cat_builder {
	struct catalog *c;
	const struct cat_opts *o;
	struct strpool pool;
	uint32_t *type_hash;   /* open addressing: type index + 1, 0 = empty */
	uint32_t type_hash_cap;
	uint64_t cap_samples;
	uint32_t cap_types;
	char **classes;      /* sorted class directory names */
	uint32_t nclasses;
	bool flat_files;     /* some files sit directly in the root */
	char err[512];
};

int cat_add_sample(struct cat_builder *b, uint32_t file, uint64_t offset, uint64_t length,
		   int64_t label, uint32_t type)
{
	struct catalog *c = b->c;
	if (c->nsamples >= UINT32_MAX) {
		cat_builder_error(b, "more than 2^32-1 samples are not supported");
		return -EOVERFLOW;
	}
	if (c->nsamples == b->cap_samples) {
		b->cap_samples = MAX(b->cap_samples * 2, 1024);
		c->samples = xrealloc(c->samples, b->cap_samples * sizeof(*c->samples));
	}
	c->samples[c->nsamples++] = (struct cat_sample){
		.offset = offset, .length = length, .file = file, .type = type, .label = label,
	};
	c->files[file].nsamples++;
	return 0;
}

/* Datasets whose files each have their own shape (DLIO's varying sizes) make
 * as many types as files: a hash table keeps interning O(1). */
int cat_intern_type(struct cat_builder *b, const struct seer_wire_type *t, uint32_t *idx)
{
	struct catalog *c = b->c;
	if ((uint64_t)(c->ntypes + 1) * 2 > b->type_hash_cap) {
		uint32_t cap = MAX(b->type_hash_cap * 2, 64u);
		uint32_t *h = xcalloc(cap, sizeof(uint32_t));
		for (uint32_t i = 0; i < c->ntypes; i++) {
			uint64_t k = XXH64(&c->types[i], sizeof(*t), 0) & (cap - 1);
			while (h[k])
				k = (k + 1) & (cap - 1);
			h[k] = i + 1;
		}
		free(b->type_hash);
		b->type_hash = h;
		b->type_hash_cap = cap;
	}
	uint64_t k = XXH64(t, sizeof(*t), 0) & (b->type_hash_cap - 1);
	for (; b->type_hash[k]; k = (k + 1) & (b->type_hash_cap - 1)) {
		uint32_t i = b->type_hash[k] - 1;
		if (memcmp(&c->types[i], t, sizeof(*t)) == 0) {
			*idx = i;
			return 0;
		}
	}
	if (c->ntypes == b->cap_types) {
		b->cap_types = MAX(b->cap_types * 2, 8);
		c->types = xrealloc(c->types, b->cap_types * sizeof(*c->types));
	}
	c->types[c->ntypes] = *t;
	b->type_hash[k] = c->ntypes + 1;
	*idx = c->ntypes++;
	return 0;
}

uint64_t *cat_builder_aux(struct cat_builder *b, uint32_t file) { return b->c->files[file].aux; }
const struct cat_params *cat_builder_params(const struct cat_builder *b) { return &b->o->params; }
const char *cat_builder_root(const struct cat_builder *b) { return b->c->root; }

const char *cat_builder_path(const struct cat_builder *b, uint32_t file)
{
	return b->pool.buf + b->c->files[file].path_off;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int64_t cat_builder_class(const struct cat_builder *b, const char *relpath)
{
	const char *slash = strchr(relpath, '/');
	if (!slash)
		return b->nclasses == 0 ? 0 : -1;
	char name[NAME_MAX + 1];
	size_t n = MIN((size_t)(slash - relpath), sizeof(name) - 1);
	memcpy(name, relpath, n);
	name[n] = '\0';
	const char *key = name;
	char **hit = bsearch(&key, b->classes, b->nclasses, sizeof(char *), cmp_str);
	return hit ? (int64_t)(hit - b->classes) : -1;
}

void cat_builder_error(struct cat_builder *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(b->err, sizeof(b->err), fmt, ap);
	va_end(ap);
}

/* ---- directory walk ------------------------------------------------------- */

struct walk {
	char **paths;
	size_t n, cap;
	struct cat_dir *dirs;
	size_t ndirs, capdirs;
	struct strpool *pool;
	const struct fmt_ops *fmt;
	const struct cat_params *params;
	bool progress;
	uint64_t last_report;
	char err[512];
};

static int walk_dir(struct walk *w, int parent_fd, const char *name, const char *rel)
{
	int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(w->err, sizeof(w->err), "cannot open directory %s: %s", *rel ? rel : ".",
			 strerror(errno));
		return -errno;
	}
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	if (w->ndirs == w->capdirs) {
		w->capdirs = MAX(w->capdirs * 2, 64);
		w->dirs = xrealloc(w->dirs, w->capdirs * sizeof(*w->dirs));
	}
	w->dirs[w->ndirs++] = (struct cat_dir){
		.path_off = pool_add(w->pool, rel),
		.mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
	};
	DIR *d = fdopendir(fd);
	if (!d) {
		int e = -errno;
		close(fd);
		return e;
	}
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue; /* ".", "..", hidden files and seer's own temp files */
		unsigned char type = de->d_type;
		if (type == DT_UNKNOWN || type == DT_LNK) {
			struct stat es;
			if (fstatat(dirfd(d), de->d_name, &es, 0) != 0)
				continue; /* dangling link */
			type = S_ISDIR(es.st_mode) ? DT_DIR : S_ISREG(es.st_mode) ? DT_REG : DT_UNKNOWN;
		}
		char *child = *rel ? xasprintf("%s/%s", rel, de->d_name) : xstrdup(de->d_name);
		if (type == DT_DIR) {
			rc = walk_dir(w, dirfd(d), de->d_name, child);
			free(child);
			if (rc != 0)
				break;
		} else if (type == DT_REG && (!w->fmt->accept || w->fmt->accept(w->params, child))) {
			if (w->n == w->cap) {
				w->cap = MAX(w->cap * 2, 1024);
				w->paths = xrealloc(w->paths, w->cap * sizeof(char *));
			}
			w->paths[w->n++] = child;
			if (w->progress && w->n % 100000 == 0) {
				log_info("catalog: %zu files found so far", w->n);
			}
		} else {
			free(child);
		}
	}
	closedir(d);
	return rc;
}

/* ---- build ---------------------------------------------------------------- */

static uint64_t hash_params(const struct cat_opts *o)
{
	XXH64_state_t *st = XXH64_createState();
	XXH64_reset(st, 0x5ee2ca7a);
	const char *parts[] = { o->format, o->params.hdf5_data, o->params.hdf5_labels,
				o->params.npz_data, o->params.npz_labels, o->params.npz_sample_axis,
				o->params.extensions };
	for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
		const char *s = parts[i] ? parts[i] : "\x01(default)";
		XXH64_update(st, s, strlen(s) + 1);
	}
	uint64_t h = XXH64_digest(st);
	XXH64_freeState(st);
	return h;
}

static uint64_t hash_content(const struct catalog *c)
{
	XXH64_state_t *st = XXH64_createState();
	XXH64_reset(st, 0xca7a1065);
	XXH64_update(st, c->fmt->name, strlen(c->fmt->name) + 1);
	XXH64_update(st, &c->params_hash, sizeof(c->params_hash));
	for (uint32_t i = 0; i < c->nfiles; i++) {
		const char *p = cat_path(c, i);
		XXH64_update(st, p, strlen(p) + 1);
		XXH64_update(st, &c->files[i].size, sizeof(c->files[i].size));
	}
	XXH64_update(st, c->samples, c->nsamples * sizeof(*c->samples));
	XXH64_update(st, c->types, c->ntypes * sizeof(*c->types));
	uint64_t h = XXH64_digest(st);
	XXH64_freeState(st);
	return h;
}

static void finish_totals(struct catalog *c)
{
	c->total_bytes = 0;
	c->max_len = 0;
	for (uint64_t i = 0; i < c->nsamples; i++) {
		c->total_bytes += c->samples[i].length;
		c->max_len = MAX(c->max_len, c->samples[i].length);
	}
}

static int cat_build(const struct cat_opts *o, const struct fmt_ops *fmt, const char *root,
		     struct catalog **out, char *err, size_t errlen)
{
	struct catalog *c = xcalloc(1, sizeof(*c));
	c->root = xstrdup(root);
	c->fmt = fmt;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	c->scan_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
	c->params_hash = hash_params(o);
	struct cat_builder b = { .c = c, .o = o };
	struct walk w = { .pool = &b.pool, .fmt = fmt, .params = &o->params, .progress = o->progress };
	uint64_t t0 = now_ns();
	int rc = walk_dir(&w, AT_FDCWD, root, "");
	if (rc != 0) {
		snprintf(err, errlen, "dataset %s: %s", root, w.err[0] ? w.err : strerror(-rc));
		rc = SEER_EDATASET;
		goto fail;
	}
	if (w.n == 0) {
		snprintf(err, errlen,
			 "dataset %s holds no %s sample files: point dataset.path at the data "
			 "directory or set dataset.format (one of %s)",
			 root, fmt->name, cat_format_names());
		rc = SEER_EDATASET;
		goto fail;
	}
	qsort(w.paths, w.n, sizeof(char *), cmp_str);

	/* class directories: distinct first path components, sorted */
	b.classes = xcalloc(w.n, sizeof(char *));
	for (size_t i = 0; i < w.n; i++) {
		const char *slash = strchr(w.paths[i], '/');
		if (!slash) {
			b.flat_files = true;
			continue;
		}
		size_t len = (size_t)(slash - w.paths[i]);
		if (b.nclasses > 0 && strlen(b.classes[b.nclasses - 1]) == len &&
		    memcmp(b.classes[b.nclasses - 1], w.paths[i], len) == 0)
			continue;
		b.classes[b.nclasses++] = strndup(w.paths[i], len);
	}
	/* sorted paths put "a/x" before "a0/x" ('/' < '0') so classes come out sorted
	 * except for names that are prefixes of each other; sort to be sure */
	qsort(b.classes, b.nclasses, sizeof(char *), cmp_str);
	c->nclasses = b.nclasses;

	if (w.n > UINT32_MAX) {
		snprintf(err, errlen, "dataset %s: more than 2^32-1 files", root);
		rc = SEER_EDATASET;
		goto fail;
	}
	c->nfiles = (uint32_t)w.n;
	c->files = xcalloc(w.n, sizeof(*c->files));
	for (size_t i = 0; i < w.n; i++)
		c->files[i].path_off = pool_add(&b.pool, w.paths[i]);
	if (o->progress || w.n >= 100000)
		log_info("catalog: %zu files under %s listed in %.1f s", w.n, root,
			 (double)(now_ns() - t0) / 1e9);

	int dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		snprintf(err, errlen, "dataset %s: %s", root, strerror(errno));
		rc = SEER_EDATASET;
		goto fail;
	}
	for (uint32_t i = 0; i < c->nfiles; i++) {
		const char *rel = w.paths[i];
		int fd = openat(dfd, rel, O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) != 0) {
			snprintf(err, errlen, "dataset file %s/%s: %s", root, rel, strerror(errno));
			if (fd >= 0)
				close(fd);
			close(dfd);
			rc = SEER_EDATASET;
			goto fail;
		}
		c->files[i].size = (uint64_t)st.st_size;
		c->files[i].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
		c->files[i].first = c->nsamples;
		b.err[0] = '\0';
		rc = fmt->scan(&b, i, fd, (uint64_t)st.st_size);
		close(fd);
		if (rc != 0) {
			snprintf(err, errlen, "dataset file %s/%s: %s", root, rel,
				 b.err[0] ? b.err : seer_strerror(rc));
			close(dfd);
			rc = rc == -ENOMEM ? rc : SEER_EDATASET;
			goto fail;
		}
		if (o->progress && (i + 1) % 100000 == 0)
			log_info("catalog: scanned %u of %u files", i + 1, c->nfiles);
	}
	close(dfd);
	if (c->nsamples == 0) {
		snprintf(err, errlen, "dataset %s: its %u %s files hold no samples", root, c->nfiles,
			 fmt->name);
		rc = SEER_EDATASET;
		goto fail;
	}
	c->ndirs = (uint32_t)w.ndirs;
	c->dirs = w.dirs;
	w.dirs = NULL;
	c->strpool = b.pool.buf;
	c->strpool_len = b.pool.len;
	b.pool.buf = NULL;
	finish_totals(c);
	c->hash = hash_content(c);
	rc = 0;
	*out = c;
	c = NULL;
fail:
	for (size_t i = 0; i < w.n; i++)
		free(w.paths[i]);
	free(w.paths);
	free(w.dirs);
	for (uint32_t i = 0; i < b.nclasses; i++)
		free(b.classes[i]);
	free(b.classes);
	free(b.type_hash);
	if (c) {
		c->strpool = b.pool.buf; /* freed by cat_free */
		b.pool.buf = NULL;
		cat_free(c);
	}
	free(b.pool.buf);
	return rc;
}

void cat_free(struct catalog *c)
{
	if (!c)
		return;
	free(c->root);
	free(c->files);
	free(c->samples);
	free(c->types);
	free(c->dirs);
	free(c->strpool);
	free(c->cache_path);
	free(c);
}

/* ---- serialization -------------------------------------------------------- */

#define CAT_IMG_MAGIC "SEERCAT"
#define CAT_IMG_VERSION 2u
/* A directory changed within this much of the scan's start may have changed
 * again within its timestamp's granularity (1 s on Lustre/GPFS): its mtime
 * proves nothing, so the cache is rebuilt (git's "racy clean" rule). */
#define CAT_RACY_NS 2000000000ll

struct cat_img_hdr {
	char magic[8];
	uint32_t version;
	uint32_t hdr_size;
	uint64_t params_hash;
	uint64_t hash;
	uint64_t nsamples;
	uint64_t strpool_len;
	uint32_t nfiles;
	uint32_t ntypes;
	uint32_t ndirs;
	uint32_t nclasses;
	uint32_t root_off;
	uint32_t pad_;
	char format[16];
	int64_t scan_ns;      /* wall-clock start of the scan */
};
_Static_assert(sizeof(struct cat_img_hdr) == 96, "catalog image header");

static int img_size(uint64_t nfiles, uint64_t nsamples, uint64_t ntypes, uint64_t ndirs,
		    uint64_t pool, uint64_t *out)
{
	/* every count is bounded by the header's field widths, so no overflow in u64 */
	uint64_t n = sizeof(struct cat_img_hdr);
	n += nfiles * sizeof(struct cat_file);
	n += nsamples * sizeof(struct cat_sample);
	n += ntypes * sizeof(struct seer_wire_type);
	n += ndirs * sizeof(struct cat_dir);
	n += ALIGN_UP(pool, 8);
	n += sizeof(uint64_t); /* checksum */
	*out = n;
	return 0;
}

int cat_serialize(const struct catalog *c, void **buf, size_t *len)
{
	/* the root goes into a copy of the pool so the image is self-contained */
	uint64_t root_len = strlen(c->root) + 1;
	uint64_t pool = c->strpool_len + root_len;
	uint64_t n;
	img_size(c->nfiles, c->nsamples, c->ntypes, c->ndirs, pool, &n);
	char *p = calloc(1, n);
	if (!p)
		return -ENOMEM;
	struct cat_img_hdr h = {
		.magic = CAT_IMG_MAGIC, .version = CAT_IMG_VERSION, .hdr_size = sizeof(h),
		.params_hash = c->params_hash, .hash = c->hash, .nsamples = c->nsamples,
		.strpool_len = pool, .nfiles = c->nfiles, .ntypes = c->ntypes, .ndirs = c->ndirs,
		.nclasses = c->nclasses, .root_off = (uint32_t)c->strpool_len, .scan_ns = c->scan_ns,
	};
	snprintf(h.format, sizeof(h.format), "%s", c->fmt->name);
	char *q = p;
	memcpy(q, &h, sizeof(h));
	q += sizeof(h);
	memcpy(q, c->files, c->nfiles * sizeof(*c->files));
	q += c->nfiles * sizeof(*c->files);
	memcpy(q, c->samples, c->nsamples * sizeof(*c->samples));
	q += c->nsamples * sizeof(*c->samples);
	memcpy(q, c->types, c->ntypes * sizeof(*c->types));
	q += c->ntypes * sizeof(*c->types);
	memcpy(q, c->dirs, c->ndirs * sizeof(*c->dirs));
	q += c->ndirs * sizeof(*c->dirs);
	memcpy(q, c->strpool, c->strpool_len);
	memcpy(q + c->strpool_len, c->root, root_len);
	q += ALIGN_UP(pool, 8);
	uint64_t sum = XXH64(p, (size_t)(q - p), 0);
	memcpy(q, &sum, sizeof(sum));
	*buf = p;
	*len = n;
	return 0;
}

#define BAD(...) do { snprintf(err, errlen, __VA_ARGS__); goto bad; } while (0)

int cat_deserialize(const void *buf, size_t len, struct catalog **out, char *err, size_t errlen)
{
	const char *p = buf;
	struct cat_img_hdr h;
	struct catalog *c = NULL;
	if (len < sizeof(h) + sizeof(uint64_t))
		BAD("catalog cache truncated (%zu bytes)", len);
	memcpy(&h, p, sizeof(h));
	if (memcmp(h.magic, CAT_IMG_MAGIC, sizeof(h.magic)) != 0)
		BAD("not a seer catalog cache (bad magic)");
	if (h.version != CAT_IMG_VERSION || h.hdr_size != sizeof(h))
		BAD("catalog cache version %u, expected %u", h.version, CAT_IMG_VERSION);
	if (h.nsamples > UINT32_MAX || h.strpool_len > UINT32_MAX || h.strpool_len == 0)
		BAD("catalog cache counts out of range");
	uint64_t need;
	img_size(h.nfiles, h.nsamples, h.ntypes, h.ndirs, h.strpool_len, &need);
	if (need != len)
		BAD("catalog cache size %zu, header implies %llu", len, (unsigned long long)need);
	uint64_t sum;
	memcpy(&sum, p + len - sizeof(sum), sizeof(sum));
	if (XXH64(p, len - sizeof(sum), 0) != sum)
		BAD("catalog cache checksum mismatch (file damaged)");
	h.format[sizeof(h.format) - 1] = '\0';
	const struct fmt_ops *fmt = cat_find_format(h.format);
	if (!fmt)
		BAD("catalog cache names unknown format '%s'", h.format);

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fmt = fmt;
	c->params_hash = h.params_hash;
	c->nfiles = h.nfiles;
	c->nsamples = h.nsamples;
	c->ntypes = h.ntypes;
	c->ndirs = h.ndirs;
	c->nclasses = h.nclasses;
	c->strpool_len = h.strpool_len;
	c->files = malloc(MAX(1, (size_t)h.nfiles * sizeof(*c->files)));
	c->samples = malloc(MAX(1, (size_t)h.nsamples * sizeof(*c->samples)));
	c->types = malloc(MAX(1, (size_t)h.ntypes * sizeof(*c->types)));
	c->dirs = malloc(MAX(1, (size_t)h.ndirs * sizeof(*c->dirs)));
	c->strpool = malloc((size_t)h.strpool_len);
	if (!c->files || !c->samples || !c->types || !c->dirs || !c->strpool) {
		cat_free(c);
		return -ENOMEM;
	}
	const char *q = p + sizeof(h);
	memcpy(c->files, q, h.nfiles * sizeof(*c->files));
	q += h.nfiles * sizeof(*c->files);
	memcpy(c->samples, q, h.nsamples * sizeof(*c->samples));
	q += h.nsamples * sizeof(*c->samples);
	memcpy(c->types, q, h.ntypes * sizeof(*c->types));
	q += h.ntypes * sizeof(*c->types);
	memcpy(c->dirs, q, h.ndirs * sizeof(*c->dirs));
	q += h.ndirs * sizeof(*c->dirs);
	memcpy(c->strpool, q, h.strpool_len);

	if (c->strpool[c->strpool_len - 1] != '\0')
		BAD("catalog cache string pool not terminated");
	if (h.root_off >= h.strpool_len)
		BAD("catalog cache root out of range");
	c->root = strdup(c->strpool + h.root_off);
	if (!c->root) {
		cat_free(c);
		return -ENOMEM;
	}
	uint64_t expect_first = 0;
	for (uint32_t i = 0; i < c->nfiles; i++) {
		const struct cat_file *f = &c->files[i];
		if (f->path_off >= h.root_off)
			BAD("catalog cache file %u path out of range", i);
		if (f->first != expect_first || f->nsamples > c->nsamples - f->first)
			BAD("catalog cache file %u sample range inconsistent", i);
		expect_first += f->nsamples;
	}
	if (expect_first != c->nsamples)
		BAD("catalog cache sample count inconsistent");
	for (uint32_t i = 0; i < c->ndirs; i++)
		if (c->dirs[i].path_off >= h.root_off)
			BAD("catalog cache directory %u path out of range", i);
	for (uint32_t i = 0; i < c->ntypes; i++)
		if (c->types[i].dtype >= SEER_DT_COUNT_ || c->types[i].ndim > SEER_MAX_DIMS)
			BAD("catalog cache type %u invalid", i);
	for (uint64_t i = 0; i < c->nsamples; i++) {
		const struct cat_sample *s = &c->samples[i];
		if (s->file >= c->nfiles || s->type >= c->ntypes)
			BAD("catalog cache sample %llu refers out of range", (unsigned long long)i);
		const struct cat_file *f = &c->files[s->file];
		if (i < f->first || i - f->first >= f->nsamples)
			BAD("catalog cache sample %llu not inside its file's range",
			    (unsigned long long)i);
	}
	if (c->nsamples == 0)
		BAD("catalog cache holds no samples");
	finish_totals(c);
	c->hash = h.hash;
	if (hash_content(c) != h.hash)
		BAD("catalog cache content hash mismatch");
	c->from_cache = true;
	c->scan_ns = h.scan_ns;
	*out = c;
	return 0;
bad:
	cat_free(c);
	return SEER_EDATASET;
}

char *cat_cache_path(const struct cat_opts *o)
{
	XXH64_state_t *st = XXH64_createState();
	XXH64_reset(st, 0);
	XXH64_update(st, o->root, strlen(o->root));
	uint64_t ph = hash_params(o);
	XXH64_update(st, &ph, sizeof(ph));
	uint64_t h = XXH64_digest(st);
	XXH64_freeState(st);
	return xasprintf("%s/catalog-%016llx.bin", o->cache_dir, (unsigned long long)h);
}

/* The directories still look as when the catalog was built? */
static bool cat_is_current(const struct catalog *c)
{
	for (uint32_t i = 0; i < c->ndirs; i++) {
		const char *rel = c->strpool + c->dirs[i].path_off;
		char *path = *rel ? xasprintf("%s/%s", c->root, rel) : xstrdup(c->root);
		struct stat st;
		int rc = stat(path, &st);
		free(path);
		if (rc != 0)
			return false;
		int64_t m = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
		if (m != c->dirs[i].mtime_ns || m >= c->scan_ns - CAT_RACY_NS)
			return false;
	}
	return true;
}

static struct catalog *cat_try_load(const struct cat_opts *o, const char *root, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	struct stat st;
	struct catalog *c = NULL;
	char why[512];
	if (path_check_owned_file(fd, path, why, sizeof(why)) != 0) {
		log_warn("catalog cache not trusted (%s); rescanning", why);
		close(fd);
		return NULL;
	}
	if (fstat(fd, &st) == 0 && st.st_size > 0) {
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m != MAP_FAILED) {
			char err[256];
			if (cat_deserialize(m, (size_t)st.st_size, &c, err, sizeof(err)) != 0)
				log_warn("catalog cache %s unusable (%s); rescanning", path, err);
			munmap(m, (size_t)st.st_size);
		}
	}
	close(fd);
	if (!c)
		return NULL;
	if (strcmp(c->root, root) != 0 || c->params_hash != hash_params(o) ||
	    strcmp(c->fmt->name, o->format) != 0) {
		log_info("catalog cache %s was built for other settings; rescanning", path);
	} else if (!cat_is_current(c)) {
		log_info("dataset %s changed since its catalog was saved; rescanning", root);
	} else {
		return c;
	}
	cat_free(c);
	return NULL;
}

int cat_open(const struct cat_opts *o, struct catalog **out, char *err, size_t errlen)
{
	const struct fmt_ops *fmt = cat_find_format(o->format);
	if (!fmt) {
		snprintf(err, errlen, "unknown dataset format '%s' (known: %s)", o->format,
			 cat_format_names());
		return SEER_ECONFIG;
	}
	char root[PATH_MAX];
	if (!o->root || !realpath(o->root, root)) {
		snprintf(err, errlen,
			 "dataset path %s: %s: set dataset.path to the directory holding the samples",
			 o->root ? o->root : "(unset)", o->root ? strerror(errno) : "not set");
		return SEER_EDATASET;
	}
	struct stat st;
	if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "dataset path %s is not a directory", root);
		return SEER_EDATASET;
	}
	struct cat_opts ro = *o;
	ro.root = root;
	char *cpath = o->cache_dir ? cat_cache_path(&ro) : NULL;
	if (cpath && !o->rebuild) {
		struct catalog *c = cat_try_load(&ro, root, cpath);
		if (c) {
			log_info("catalog: %llu samples in %u files loaded from %s",
				 (unsigned long long)c->nsamples, c->nfiles, cpath);
			c->cache_path = cpath;
			*out = c;
			return 0;
		}
	}
	struct catalog *c = NULL;
	uint64_t t0 = now_ns();
	int rc = cat_build(&ro, fmt, root, &c, err, errlen);
	if (rc != 0) {
		free(cpath);
		return rc;
	}
	char sz[32];
	log_info("catalog: %llu samples (%s) in %u files scanned in %.2f s",
		 (unsigned long long)c->nsamples, fmt_size(sz, sizeof(sz), c->total_bytes), c->nfiles,
		 (double)(now_ns() - t0) / 1e9);
	if (cpath) {
		void *img;
		size_t len;
		int mk = mkdir_p(o->cache_dir, 0700);
		if (mk == 0 && cat_serialize(c, &img, &len) == 0) {
			mk = write_file_atomic(cpath, img, len);
			free(img);
		}
		if (mk != 0)
			log_warn("cannot save the catalog to %s: %s (the next start rescans)", cpath,
				 strerror(-mk));
	}
	c->cache_path = cpath;
	*out = c;
	return 0;
}

/* ---- reading ---------------------------------------------------------------- */

int cat_reader_init(struct cat_reader *rd, const struct catalog *c)
{
	memset(rd, 0, sizeof(*rd));
	rd->cat = c;
	for (int i = 0; i < CAT_FD_CACHE; i++)
		rd->fd[i] = -1;
	return 0;
}

void cat_reader_fini(struct cat_reader *rd)
{
	for (int i = 0; i < CAT_FD_CACHE; i++)
		if (rd->fd[i] >= 0)
			close(rd->fd[i]);
	if (rd->cat && rd->cat->fmt->reader_fini)
		rd->cat->fmt->reader_fini(rd);
	rd->fmt_state = NULL;
}

int cat_reader_fd(struct cat_reader *rd, uint32_t file)
{
	int victim = -1;
	for (int i = 0; i < CAT_FD_CACHE; i++) {
		if (rd->fd[i] >= 0 && rd->fd_file[i] == file) {
			rd->fd_used[i] = ++rd->tick;
			return rd->fd[i];
		}
		if (rd->fd[i] < 0 && victim < 0)
			victim = i;
	}
	if (victim < 0) {
		victim = 0;
		for (int i = 1; i < CAT_FD_CACHE; i++)
			if (rd->fd_used[i] < rd->fd_used[victim])
				victim = i;
	}
	char path[PATH_MAX];
	const struct catalog *c = rd->cat;
	if (snprintf(path, sizeof(path), "%s/%s", c->root, cat_path(c, file)) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	if ((uint64_t)st.st_size != c->files[file].size || mtime != c->files[file].mtime_ns) {
		close(fd);
		return -ESTALE; /* the file changed since the catalog was built */
	}
	if (rd->fd[victim] >= 0)
		close(rd->fd[victim]);
	rd->fd[victim] = fd;
	rd->fd_file[victim] = file;
	rd->fd_used[victim] = ++rd->tick;
	return fd;
}

void cat_reader_forget(struct cat_reader *rd, uint32_t file)
{
	for (int i = 0; i < CAT_FD_CACHE; i++) {
		if (rd->fd[i] >= 0 && rd->fd_file[i] == file) {
			close(rd->fd[i]);
			rd->fd[i] = -1;
		}
	}
}

int cat_read_error(struct cat_reader *rd, uint64_t id, int code, const char *fmt, ...)
{
	const struct catalog *c = rd->cat;
	const struct cat_sample *s = &c->samples[id];
	int n = snprintf(rd->err, sizeof(rd->err), "sample %llu (%s/%s): ", (unsigned long long)id,
			 c->root, cat_path(c, s->file));
	if (n < 0 || n >= (int)sizeof(rd->err))
		return code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rd->err + n, sizeof(rd->err) - (size_t)n, fmt, ap);
	va_end(ap);
	return code;
}

int cat_read(struct cat_reader *rd, uint64_t id, void *dst)
{
	const struct catalog *c = rd->cat;
	if (id >= c->nsamples)
		return -ERANGE;
	rd->err[0] = '\0';
	const struct cat_sample *s = &c->samples[id];
	int rc = c->fmt->read(rd, id, s, dst);
	if (rc != 0) {
		if (rc == -ESTALE && c->cache_path) {
			/* the cache describes files that are gone: the next start
			 * must rescan (unlink is idempotent across threads) */
			unlink(c->cache_path);
		}
		if (rd->err[0] == '\0')
			cat_read_error(rd, id, rc, "%s", rc == -ESTALE
				       ? "file changed (size or mtime) since the catalog was built: "
					 "restart seerd to rescan"
				       : seer_strerror(rc));
		cat_reader_forget(rd, s->file);
	}
	return rc;
}

/* ---- the files format: one sample per file ------------------------------ */

static bool files_accept(const struct cat_params *p, const char *relpath)
{
	if (!p->extensions || !*p->extensions)
		return true;
	const char *dot = strrchr(relpath, '.');
	if (!dot)
		return false;
	size_t el = strlen(dot + 1);
	for (const char *e = p->extensions; *e;) {
		const char *comma = strchr(e, ',');
		size_t n = comma ? (size_t)(comma - e) : strlen(e);
		while (n && *e == ' ')
			e++, n--;
		if (n == el && strncasecmp(e, dot + 1, n) == 0)
			return true;
		if (!comma)
			break;
		e = comma + 1;
	}
	return false;
}

static int files_scan(struct cat_builder *b, uint32_t file, int fd, uint64_t size)
{
	(void)fd;
	const char *rel = cat_builder_path(b, file);
	int64_t label = cat_builder_class(b, rel);
	if (label < 0) {
		cat_builder_error(b, "file sits beside class directories: move it into a class "
				     "directory, or point dataset.path at a flat directory");
		return SEER_EDATASET;
	}
	static const struct seer_wire_type bytes = { .dtype = SEER_DT_BYTES };
	uint32_t type;
	cat_intern_type(b, &bytes, &type);
	return cat_add_sample(b, file, 0, size, label, type);
}

static int files_read(struct cat_reader *rd, uint64_t id, const struct cat_sample *s, void *dst)
{
	int fd = cat_reader_fd(rd, s->file);
	if (fd < 0)
		return fd;
	int rc = pread_full(fd, dst, s->length, s->offset);
	if (rc == -ENODATA)
		return cat_read_error(rd, id, SEER_EDATASET,
				      "file shorter than its catalogued %llu bytes: restart seerd "
				      "to rescan", (unsigned long long)s->length);
	return rc;
}

const struct fmt_ops fmt_files = {
	.name = "files",
	.accept = files_accept,
	.scan = files_scan,
	.read = files_read,
};
