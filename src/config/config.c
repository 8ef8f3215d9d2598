#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <ini.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "../catalog/catalog.h"
#include "config_int.h"
#include "../fmt/registry.h"
#include "../util/util.h"
#include "../xform/xform.h"


static void *field(struct seer_config *c, const struct config_key *k) { return (char *)c + k->off; }

static const struct config_key *find_key(const char *section, const char *name)
{
	for (size_t i = 0; i < config_nkeys; i++)
		if (strcmp(config_keys[i].section, section) == 0 && strcmp(config_keys[i].name, name) == 0)
			return &config_keys[i];
	return NULL;
}

/* ---- ${VAR} expansion ------------------------------------------------------ */

static bool expand_into(const char *s, size_t len, char **out, size_t *olen, size_t *ocap,
			int depth, char *err, size_t errlen)
{
	if (depth > 8) {
		snprintf(err, errlen, "${...} nested too deeply");
		return false;
	}
	for (size_t i = 0; i < len; i++) {
		char ch = s[i];
		const char *piece = &s[i];
		size_t plen = 1;
		char *owned = NULL;
		if (ch == '$' && i + 1 < len && s[i + 1] == '$') {
			i++;
		} else if (ch == '$' && i + 1 < len && s[i + 1] == '{') {
			/* find the matching brace */
			size_t j = i + 2, lvl = 1;
			for (; j < len && lvl; j++) {
				if (s[j] == '{')
					lvl++;
				else if (s[j] == '}')
					lvl--;
			}
			if (lvl) {
				snprintf(err, errlen, "unterminated ${ in '%.*s'", (int)len, s);
				return false;
			}
			const char *body = s + i + 2;
			size_t blen = j - 1 - (i + 2);
			const char *sep = NULL;
			for (size_t k = 0; k + 1 < blen; k++)
				if (body[k] == ':' && body[k + 1] == '-') {
					sep = body + k;
					break;
				}
			size_t nlen = sep ? (size_t)(sep - body) : blen;
			char name[256];
			if (nlen == 0 || nlen >= sizeof(name)) {
				snprintf(err, errlen, "bad variable name in '%.*s'", (int)len, s);
				return false;
			}
			memcpy(name, body, nlen);
			name[nlen] = '\0';
			const char *v = getenv(name);
			if (v && *v) {
				piece = v;
				plen = strlen(v);
			} else if (sep) {
				char *sub = NULL;
				size_t sl = 0, sc = 0;
				if (!expand_into(sep + 2, blen - nlen - 2, &sub, &sl, &sc, depth + 1, err,
						 errlen)) {
					free(sub);
					return false;
				}
				owned = sub;
				piece = sub ? sub : "";
				plen = sl;
			} else {
				snprintf(err, errlen,
					 "environment variable %s is not set (use ${%s:-default})",
					 name, name);
				return false;
			}
			i = j - 1;
		}
		if (*olen + plen + 1 > *ocap) {
			*ocap = MAX(*ocap * 2, *olen + plen + 64);
			*out = xrealloc(*out, *ocap);
		}
		memcpy(*out + *olen, piece, plen);
		*olen += plen;
		(*out)[*olen] = '\0';
		free(owned);
	}
	return true;
}

char *config_expand(const char *s, char *err, size_t errlen)
{
	char *out = NULL;
	size_t olen = 0, ocap = 0;
	if (!expand_into(s, strlen(s), &out, &olen, &ocap, 0, err, errlen)) {
		free(out);
		return NULL;
	}
	return out ? out : xstrdup("");
}

/* ---- setting one key -------------------------------------------------------- */

/* An enum or a log level: 0 if v is one of the key's choices, else -EINVAL and why. */
static int check_choice(const struct config_key *k, const char *v, char *why, size_t whylen)
{
	if (k->type == CFG_LOGLEVEL) {
		enum log_level l;
		if (log_parse_level(v, &l) == 0)
			return 0;
		snprintf(why, whylen, "'%s' is not one of: error, warn, info, debug", v);
		return -EINVAL;
	}
	for (const char *const *ch = k->choices; *ch; ch++)
		if (strcmp(*ch, v) == 0)
			return 0;
	char list[256] = "";
	for (const char *const *ch = k->choices; *ch; ch++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
			 ch == k->choices ? "" : ", ", *ch);
	snprintf(why, whylen, "'%s' is not one of: %s", v, list);
	return -EINVAL;
}

/* A number-typed key (u64, size, bool, double): parsed, range-checked, stored in f. */
static int set_number(const struct config_key *k, void *f, const char *v, char *why, size_t whylen)
{
	int rc;
	switch (k->type) {
	case CFG_U64:
	case CFG_SIZE: {
		uint64_t n;
		rc = k->type == CFG_SIZE ? parse_size(v, &n) : parse_u64(v, &n);
		if (rc != 0) {
			snprintf(why, whylen, k->type == CFG_SIZE
				 ? "'%s' is not a size (use e.g. 512MiB, 64GiB, 0)"
				 : "'%s' is not a non-negative integer", v);
			return -EINVAL;
		}
		if (n < k->min || n > k->max) {
			snprintf(why, whylen, "%s is out of range [%llu, %llu]", v,
				 (unsigned long long)k->min, (unsigned long long)k->max);
			return -ERANGE;
		}
		*(uint64_t *)f = n;
		return 0;
	}
	case CFG_BOOL:
		rc = parse_bool(v, (bool *)f);
		if (rc != 0)
			snprintf(why, whylen, "'%s' is not a boolean (true/false, yes/no, 1/0)", v);
		return rc;
	case CFG_DOUBLE: {
		double d;
		rc = parse_double(v, &d);
		if (rc != 0 || d < (double)k->min || d > (double)k->max) {
			snprintf(why, whylen, "'%s' is not a number in [%llu, %llu]", v,
				 (unsigned long long)k->min, (unsigned long long)k->max);
			return -EINVAL;
		}
		*(double *)f = d;
		return 0;
	}
	default:
		snprintf(why, whylen, "internal: key type %d is not a number", (int)k->type);
		return -EINVAL;
	}
}

static int set_key(struct seer_config *c, const struct config_key *k, const char *raw,
		   const char *origin, char *why, size_t whylen)
{
	char *v = config_expand(raw, why, whylen);
	if (!v)
		return -EINVAL;
	int rc;
	void *f = field(c, k);
	if (k->type == CFG_STR || k->type == CFG_ENUM || k->type == CFG_LOGLEVEL) {
		rc = k->type == CFG_STR ? 0 : check_choice(k, v, why, whylen);
		if (rc == 0) {
			free(*(char **)f);
			*(char **)f = v;
			v = NULL;
		}
	} else {
		rc = set_number(k, f, v, why, whylen);
	}
	free(v);
	if (rc == 0) {
		size_t idx = (size_t)(k - config_keys);
		free(c->origin[idx]);
		c->origin[idx] = xstrdup(origin);
	}
	return rc ? -EINVAL : 0;
}

int config_init(struct seer_config *c, char *err, size_t errlen)
{
	memset(c, 0, sizeof(*c));
	c->origin = xcalloc(config_nkeys, sizeof(char *));
	for (size_t i = 0; i < config_nkeys; i++) {
		char why[256];
		if (set_key(c, &config_keys[i], config_keys[i].def, "default", why, sizeof(why)) != 0) {
			snprintf(err, errlen, "default of [%s] %s: %s", config_keys[i].section, config_keys[i].name, why);
			return -EINVAL;
		}
	}
	return 0;
}

void config_free(struct seer_config *c)
{
	for (size_t i = 0; i < config_nkeys; i++) {
		if (config_keys[i].type == CFG_STR || config_keys[i].type == CFG_ENUM || config_keys[i].type == CFG_LOGLEVEL)
			free(*(char **)field(c, &config_keys[i]));
		if (c->origin)
			free(c->origin[i]);
	}
	free(c->origin);
	memset(c, 0, sizeof(*c));
}

struct ini_ctx {
	struct seer_config *c;
	const char *path;
	FILE *f;
	char msg[512];
	int line;          /* lines read: the one inih is parsing */
	int fail_line;     /* line that msg is about */
	int max_line;      /* longest line inih can take */
	bool too_long;     /* line `line` did not fit inih's buffer */
	bool failed;
};

/* inih reads the file through this, so that the handler knows its line and
 * a line longer than inih's fixed buffer stops the parse (inih would cut it
 * in two and parse the halves as two lines). */
static char *config_ini_read_line(char *buf, int num, void *stream)
{
	struct ini_ctx *x = stream;
	if (x->too_long || !fgets(buf, num, x->f))
		return NULL;
	x->line++;
	size_t n = strlen(buf);
	if (n > 0 && buf[n - 1] != '\n') {
		int ch = getc(x->f);
		if (ch != EOF && ch != '\n') {
			x->too_long = true;
			x->max_line = num - 1;
			return NULL;
		}
	}
	return buf;
}

static int config_ini_handler(void *user, const char *section, const char *name, const char *value)
{
	struct ini_ctx *x = user;
	if (x->failed)
		return 0;
	if (!section || !*section) {
		snprintf(x->msg, sizeof(x->msg), "key '%s' outside a [section]", name);
		x->failed = true;
		x->fail_line = x->line;
		return 0;
	}
	const struct config_key *k = find_key(section, name);
	if (!k) {
		bool sec_known = false;
		for (size_t i = 0; i < config_nkeys; i++)
			sec_known |= strcmp(config_keys[i].section, section) == 0;
		if (sec_known)
			snprintf(x->msg, sizeof(x->msg),
				 "unknown key '%s' in [%s] (seerd --help lists the keys)", name, section);
		else
			snprintf(x->msg, sizeof(x->msg),
				 "key '%s' in unknown section [%s] (sections: dataset, job, cache, "
				 "prefetch, net, daemon, transform)", name, section);
		x->failed = true;
		x->fail_line = x->line;
		return 0;
	}
	char why[400];
	char origin[300];
	snprintf(origin, sizeof(origin), "%s:%d", x->path, x->line);
	if (set_key(x->c, k, value, origin, why, sizeof(why)) != 0) {
		snprintf(x->msg, sizeof(x->msg), "[%s] %s: %s", section, name, why);
		x->failed = true;
		x->fail_line = x->line;
		return 0;
	}
	return 1;
}

int config_load_file(struct seer_config *c, const char *path, char *err, size_t errlen)
{
	struct ini_ctx x = { .c = c, .path = path };
	x.f = fopen(path, "r");
	if (!x.f) {
		snprintf(err, errlen, "config file %s: %s", path, strerror(errno));
		return -EINVAL;
	}
	int line = ini_parse_stream(config_ini_read_line, &x, config_ini_handler, &x);
	bool io_error = ferror(x.f);
	fclose(x.f);
	if (line == -2) {
		snprintf(err, errlen, "config file %s: out of memory", path);
		return -ENOMEM;
	}
	/* inih reports the first bad line; the handler's message is about
	 * its own line, which may come after a syntax error */
	if (line > 0) {
		if (x.failed && x.fail_line == line)
			snprintf(err, errlen, "%s:%d: %s", path, line, x.msg);
		else
			snprintf(err, errlen, "%s:%d: syntax error (expected [section] or key = value)",
				 path, line);
		return -EINVAL;
	}
	if (x.too_long) {
		snprintf(err, errlen, "%s:%d: line longer than %d characters (give long values "
			 "with --set section.key=value)", path, x.line, x.max_line);
		return -EINVAL;
	}
	if (io_error) {
		snprintf(err, errlen, "config file %s: read error", path);
		return -EIO;
	}
	return 0;
}

/* "section.key" -> its table entry, or NULL. */
static const struct config_key *find_dotted(const char *key)
{
	const char *dot = strchr(key, '.');
	char section[64];
	size_t sl = dot ? (size_t)(dot - key) : 0;
	if (!dot || sl == 0 || sl >= sizeof(section))
		return NULL;
	memcpy(section, key, sl);
	section[sl] = '\0';
	return find_key(section, dot + 1);
}

const char *config_origin(const struct seer_config *c, const char *key)
{
	const struct config_key *k = find_dotted(key);
	return k ? c->origin[k - config_keys] : NULL;
}

int config_check_value(const char *key, const char *value, char *err, size_t errlen)
{
	const struct config_key *k = find_dotted(key);
	uint64_t scratch[2];
	char why[400];
	if (!k || k->type == CFG_STR || k->type == CFG_ENUM || k->type == CFG_LOGLEVEL) {
		snprintf(err, errlen, "%s: not a number-typed key", key);
		return -EINVAL;
	}
	if (set_number(k, scratch, value, why, sizeof(why)) != 0) {
		snprintf(err, errlen, "%s: %s", key, why);
		return -EINVAL;
	}
	return 0;
}

int config_set_from(struct seer_config *c, const char *key, const char *value, const char *origin,
		    char *err, size_t errlen)
{
	const struct config_key *k = find_dotted(key);
	if (!k) {
		snprintf(err, errlen, "unknown key %s", key);
		return -EINVAL;
	}
	char why[400];
	if (set_key(c, k, value, origin, why, sizeof(why)) != 0) {
		snprintf(err, errlen, "%s: %s", key, why);
		return -EINVAL;
	}
	return 0;
}

int config_set(struct seer_config *c, const char *assignment, char *err, size_t errlen)
{
	const char *eq = strchr(assignment, '=');
	const char *dot = strchr(assignment, '.');
	if (!eq || !dot || dot > eq) {
		snprintf(err, errlen, "--set %s: expected section.key=value", assignment);
		return -EINVAL;
	}
	char section[64], name[64];
	size_t sl = (size_t)(dot - assignment), nl = (size_t)(eq - dot - 1);
	if (sl == 0 || sl >= sizeof(section) || nl == 0 || nl >= sizeof(name)) {
		snprintf(err, errlen, "--set %s: expected section.key=value", assignment);
		return -EINVAL;
	}
	memcpy(section, assignment, sl);
	section[sl] = '\0';
	memcpy(name, dot + 1, nl);
	name[nl] = '\0';
	const struct config_key *k = find_key(section, name);
	if (!k) {
		snprintf(err, errlen, "--set %s: unknown key %s.%s (seerd --help lists the keys)",
			 assignment, section, name);
		return -EINVAL;
	}
	char why[400];
	if (set_key(c, k, eq + 1, "--set", why, sizeof(why)) != 0) {
		snprintf(err, errlen, "--set %s.%s: %s", section, name, why);
		return -EINVAL;
	}
	return 0;
}

static int parse_resume(const char *s, uint64_t *e, uint64_t *st)
{
	const char *colon = strchr(s, ':');
	if (!colon)
		return -EINVAL;
	char a[32];
	size_t n = (size_t)(colon - s);
	if (n == 0 || n >= sizeof(a))
		return -EINVAL;
	memcpy(a, s, n);
	a[n] = '\0';
	if (parse_u64(a, e) || parse_u64(colon + 1, st))
		return -EINVAL;
	return 0;
}

int config_finish(struct seer_config *c, char *err, size_t errlen)
{
	if (!c->dataset.path || !*c->dataset.path) {
		snprintf(err, errlen, "[dataset] path is not set: give the dataset directory in the "
				      "config file or with --set dataset.path=DIR");
		return -EINVAL;
	}
	if (c->checkpoint.drain_share <= 0) {
		/* the key table's bounds are integers: (0, 1] is checked here */
		snprintf(err, errlen, "[checkpoint] drain_share %g: give a share of time above 0 "
				      "(up to 1); 0 would stop the drain while seerd reads",
			 c->checkpoint.drain_share);
		return -EINVAL;
	}
	if (!*c->job.id || strlen(c->job.id) >= 64 || strchr(c->job.id, '/')) {
		snprintf(err, errlen, "[job] id '%s' must be 1-63 characters without '/'", c->job.id);
		return -EINVAL;
	}
	if (*c->job.resume && strcmp(c->job.resume, "auto") != 0) {
		uint64_t e, s;
		if (parse_resume(c->job.resume, &e, &s) != 0) {
			snprintf(err, errlen, "[job] resume '%s': expected epoch:step (e.g. 3:120) or auto",
				 c->job.resume);
			return -EINVAL;
		}
		if (e >= c->job.epochs) {
			snprintf(err, errlen, "[job] resume epoch %llu is past the job's %llu epochs",
				 (unsigned long long)e, (unsigned long long)c->job.epochs);
			return -EINVAL;
		}
	}
	if (c->prefetch.lookahead + c->job.max_held + 2 > 4096) {
		/* batch slots per trainer: a power of two >= lookahead + max_held + 2,
		 * at most the 4096 a client takes */
		snprintf(err, errlen, "[prefetch] lookahead %llu + [job] max_held %llu is more than "
			 "4094 batches per trainer: lower one of them",
			 (unsigned long long)c->prefetch.lookahead, (unsigned long long)c->job.max_held);
		return -EINVAL;
	}
	if (c->prefetch.extent_memory < c->prefetch.extent_max) {
		snprintf(err, errlen, "[prefetch] extent_memory (%llu bytes) is less than extent_max "
			 "(%llu bytes): raise extent_memory or lower extent_max",
			 (unsigned long long)c->prefetch.extent_memory, (unsigned long long)c->prefetch.extent_max);
		return -EINVAL;
	}
	if (c->cache.nvme > 0 && !*c->cache.nvme_dir) {
		snprintf(err, errlen, "[cache] nvme is %llu bytes but nvme_dir is not set",
			 (unsigned long long)c->cache.nvme);
		return -EINVAL;
	}
	struct xf_params xp;
	int xrc = config_transform(c, &xp, err, errlen);
	if (xrc)
		return xrc;
	if (!*c->daemon.socket) {
		char buf[4096], why[768];
		if (path_default_socket(buf, sizeof(buf), c->job.id, true, why, sizeof(why)) != 0) {
			snprintf(err, errlen, "default socket path: %s (or set [daemon] socket)", why);
			return -EINVAL;
		}
		free(c->daemon.socket);
		c->daemon.socket = xstrdup(buf);
	}
	char why[768], show[CAT_PATH_SHOW];
	if (path_check_private_dir(c->daemon.state_dir, why, sizeof(why)) != 0) {
		/* both paths abbreviated: the reason and the advice must survive */
		snprintf(err, errlen, "[daemon] state_dir %s cannot be trusted: %s. Another user "
			 "could plant a forged catalog or resume record there: set [daemon] "
			 "state_dir (or HOME / XDG_CACHE_HOME) to a directory only you can write",
			 catalog_path_abbrev(show, sizeof(show), c->daemon.state_dir), why);
		return -EINVAL;
	}
	return 0;
}

int config_transform(const struct seer_config *c, struct xf_params *p, char *err, size_t errlen)
{
	static const char *const names[] = { "decode", "crop", "size", "scale", "ratio",
					     "normalize", "output", "cache" };
	const char *vals[] = { c->transform.decode, c->transform.crop, c->transform.size, c->transform.scale, c->transform.ratio,
			       c->transform.normalize, c->transform.output, c->transform.cache };
	char why[300];
	xf_params_default(p);
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		if (xf_params_set(p, names[i], vals[i] ? vals[i] : "", why, sizeof(why)) != 0) {
			snprintf(err, errlen, "[transform] %s: %s", names[i], why);
			return -EINVAL;
		}
	}
	p->resize = (uint32_t)c->transform.resize;
	p->hflip = c->transform.hflip;
	p->threads = (uint32_t)c->transform.threads;
	p->cache_size = (uint32_t)c->transform.cache_size;
	if (xf_params_check(p, why, sizeof(why)) != 0) {
		snprintf(err, errlen, "[transform] %s", why);
		return -EINVAL;
	}
	return 0;
}

static enum config_coalesce auto_bool(const char *v)
{
	bool b;
	if (strcmp(v, "auto") == 0 || parse_bool(v, &b) != 0)
		return CFG_COALESCE_AUTO;
	return b ? CFG_COALESCE_ON : CFG_COALESCE_OFF;
}

enum config_coalesce config_coalesce(const struct seer_config *c)
{
	return auto_bool(c->prefetch.coalesce);
}

enum config_coalesce config_huge_pages(const struct seer_config *c)
{
	return auto_bool(c->cache.huge_pages);
}

int config_resume(const struct seer_config *c, uint64_t *epoch, uint64_t *step)
{
	if (!*c->job.resume || strcmp(c->job.resume, "auto") == 0)
		return -ENOENT;
	return parse_resume(c->job.resume, epoch, step);
}

static void value_str(const struct seer_config *c, const struct config_key *k, char *buf, size_t len)
{
	const void *f = (const char *)c + k->off;
	switch (k->type) {
	case CFG_STR:
	case CFG_ENUM:
	case CFG_LOGLEVEL:
		snprintf(buf, len, "%s", *(char *const *)f ? *(char *const *)f : "");
		break;
	case CFG_U64:
	case CFG_SIZE:
		snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)f);
		break;
	case CFG_BOOL:
		snprintf(buf, len, "%s", *(const bool *)f ? "true" : "false");
		break;
	case CFG_DOUBLE: {
		/* the shortest text that reads back as the same double */
		double d = *(const double *)f;
		for (int prec = 6; prec <= 17; prec++) {
			snprintf(buf, len, "%.*g", prec, d);
			if (strtod(buf, NULL) == d)
				break;
		}
		break;
	}
	}
}

/* Append line (NUL-terminated; a snprintf that truncated it counts only
 * what it wrote) to the growing text *out of *len bytes in *cap. */
static void text_append(char **out, size_t *len, size_t *cap, const char *line)
{
	size_t n = strlen(line);
	if (*len + n + 1 > *cap) {
		*cap = *cap * 2 + n;
		*out = xrealloc(*out, *cap);
	}
	memcpy(*out + *len, line, n + 1);
	*len += n;
}

char *config_dump(const struct seer_config *c)
{
	size_t cap = 8192, len = 0;
	char *out = xmalloc(cap);
	out[0] = '\0';
	const char *section = "";
	for (size_t i = 0; i < config_nkeys; i++) {
		char raw[1024], val[1024], line[1400];
		value_str(c, &config_keys[i], raw, sizeof(raw));
		/* '$' doubled, so that reading the dump back does not expand it */
		size_t v = 0;
		for (const char *r = raw; *r && v + 2 < sizeof(val); r++) {
			if (*r == '$')
				val[v++] = '$';
			val[v++] = *r;
		}
		val[v] = '\0';
		int n = 0;
		if (strcmp(section, config_keys[i].section) != 0) {
			section = config_keys[i].section;
			n = snprintf(line, sizeof(line), "%s[%s]\n", len ? "\n" : "", section);
		}
		snprintf(line + n, sizeof(line) - (size_t)n, "%s = %s    ; %s\n", config_keys[i].name, val,
			 c->origin && c->origin[i] ? c->origin[i] : "default");
		text_append(&out, &len, &cap, line);
	}
	return out;
}

void config_help(FILE *out)
{
	const char *section = "";
	for (size_t i = 0; i < config_nkeys; i++) {
		if (strcmp(section, config_keys[i].section) != 0) {
			section = config_keys[i].section;
			fprintf(out, "\n[%s]\n", section);
		}
		static const char *tn[] = { "string", "integer", "size", "bool", "number", "choice",
					    "level" };
		fprintf(out, "  %-18s %-8s default %-12s %s\n", config_keys[i].name, tn[config_keys[i].type],
			*config_keys[i].def ? config_keys[i].def : "\"\"", config_keys[i].help);
	}
}

uint64_t config_job_hash(const struct seer_config *c)
{
	XXH64_state_t *st = XXH64_createState();
	XXH64_reset(st, 0x10b5);
	for (size_t i = 0; i < config_nkeys; i++) {
		if (!config_keys[i].job)
			continue;
		char val[1024];
		value_str(c, &config_keys[i], val, sizeof(val));
		XXH64_update(st, config_keys[i].section, strlen(config_keys[i].section) + 1);
		XXH64_update(st, config_keys[i].name, strlen(config_keys[i].name) + 1);
		XXH64_update(st, val, strlen(val) + 1);
	}
	uint64_t h = XXH64_digest(st);
	XXH64_freeState(st);
	return h;
}


char *config_dump_job(const struct seer_config *c)
{
	size_t cap = 4096, len = 0;
	char *out = xmalloc(cap);
	out[0] = '\0';
	for (size_t i = 0; i < config_nkeys; i++) {
		if (!config_keys[i].job)
			continue;
		char val[1024], line[1200];
		value_str(c, &config_keys[i], val, sizeof(val));
		snprintf(line, sizeof(line), "%s.%s = %s\n", config_keys[i].section, config_keys[i].name,
			 val);
		text_append(&out, &len, &cap, line);
	}
	return out;
}

bool config_item(const struct seer_config *c, size_t i, struct config_item *out)
{
	if (i >= config_nkeys)
		return false;
	const struct config_key *k = &config_keys[i];
	static const char kinds[] = { [CFG_STR] = 's', [CFG_U64] = 'u', [CFG_SIZE] = 'u',
				      [CFG_BOOL] = 'b', [CFG_DOUBLE] = 'd', [CFG_ENUM] = 's',
				      [CFG_LOGLEVEL] = 's' };
	out->section = k->section;
	out->name = k->name;
	out->origin = c->origin && c->origin[i] ? c->origin[i] : "default";
	out->kind = kinds[k->type];
	value_str(c, k, out->value, sizeof(out->value));
	return true;
}
