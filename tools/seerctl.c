/* seerctl: ask a running seerd.
 *
 *   seerctl [--socket PATH | --job ID] [--json] status|config|drain|stop
 *
 * Exit 0 on success, 1 when the daemon is unreachable or refuses. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../proto/seer_proto.h"
#include "../src/shm.h"
#include "../src/util.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: seerctl [--socket PATH | --job ID] [--json] COMMAND\n"
		"\n"
		"  status   trainers, epoch/step, prefetch lead, cache fill, bytes by source\n"
		"  config   the daemon's effective configuration\n"
		"  drain    accept no new trainers; exit when the attached ones finish\n"
		"  stop     stop now: trainers get SEER_ESHUTDOWN, the daemon cleans up\n"
		"\n"
		"The socket defaults to $SEER_SOCKET, else the one derived from --job,\n"
		"$SEER_JOB_ID or $SLURM_JOB_ID (as seerd and libseer derive it).\n");
}

/* ---- a small JSON reader for rendering `status` ----------------------- */

enum jt { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
	enum jt t;
	double num;
	bool b;
	char *str;              /* J_STR; also the key of an object member */
	struct jv *kids;        /* J_ARR / J_OBJ */
	size_t n;
	char *key;
};

static void jskip(const char **p)
{
	while (**p == ' ' || **p == '\n' || **p == '\t' || **p == '\r')
		(*p)++;
}

static char *jstr(const char **p)
{
	size_t cap = 32, n = 0;
	char *out = xmalloc(cap);
	(*p)++; /* opening quote */
	while (**p && **p != '"') {
		char c = *(*p)++;
		if (c == '\\' && **p) {
			c = *(*p)++;
			c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
		}
		if (n + 2 > cap)
			out = xrealloc(out, cap *= 2);
		out[n++] = c;
	}
	if (**p == '"')
		(*p)++;
	out[n] = '\0';
	return out;
}

static bool jparse(const char **p, struct jv *v, int depth)
{
	memset(v, 0, sizeof(*v));
	jskip(p);
	if (depth > 32)
		return false;
	char c = **p;
	if (c == '{' || c == '[') {
		v->t = c == '{' ? J_OBJ : J_ARR;
		(*p)++;
		size_t cap = 0;
		for (;;) {
			jskip(p);
			if (**p == (v->t == J_OBJ ? '}' : ']')) {
				(*p)++;
				return true;
			}
			if (v->n == cap)
				v->kids = xrealloc(v->kids, (cap = cap ? cap * 2 : 8) * sizeof(*v->kids));
			char *key = NULL;
			if (v->t == J_OBJ) {
				if (**p != '"')
					return false;
				key = jstr(p);
				jskip(p);
				if (**p != ':')
					return false;
				(*p)++;
			}
			if (!jparse(p, &v->kids[v->n], depth + 1))
				return false;
			v->kids[v->n++].key = key;
			jskip(p);
			if (**p == ',')
				(*p)++;
		}
	}
	if (c == '"') {
		v->t = J_STR;
		v->str = jstr(p);
		return true;
	}
	if (!strncmp(*p, "true", 4) || !strncmp(*p, "false", 5)) {
		v->t = J_BOOL;
		v->b = **p == 't';
		*p += v->b ? 4 : 5;
		return true;
	}
	if (!strncmp(*p, "null", 4)) {
		*p += 4;
		return true;
	}
	char *end;
	v->t = J_NUM;
	v->num = strtod(*p, &end);
	if (end == *p)
		return false;
	*p = end;
	return true;
}

static void jfree(struct jv *v)
{
	for (size_t i = 0; i < v->n; i++) {
		free(v->kids[i].key);
		jfree(&v->kids[i]);
	}
	free(v->kids);
	free(v->str);
}

static const struct jv *jget(const struct jv *o, const char *key)
{
	static const struct jv none;
	for (size_t i = 0; o && o->t == J_OBJ && i < o->n; i++)
		if (!strcmp(o->kids[i].key, key))
			return &o->kids[i];
	return &none;
}

static double jnum(const struct jv *o, const char *key) { return jget(o, key)->num; }
static const char *jtext(const struct jv *o, const char *key)
{
	const struct jv *v = jget(o, key);
	return v->t == J_STR ? v->str : "";
}

static const char *sz(char *buf, double bytes)
{
	return fmt_size(buf, 32, (uint64_t)(bytes < 0 ? 0 : bytes));
}

/* `seerctl status` for people */
static int render_status(const char *text, FILE *out)
{
	struct jv root;
	const char *p = text;
	if (!jparse(&p, &root, 0) || root.t != J_OBJ) {
		jfree(&root);
		return -1;
	}
	char a[32], b[32], c[32];
	const struct jv *ds = jget(&root, "dataset"), *ca = jget(&root, "cache");
	const struct jv *io = jget(&root, "io"), *src = jget(&root, "sources");
	fprintf(out, "seerd node %g of %g  pid %g  job %s  %s  up %.1f s  (%g trainers, %g epochs of "
		"%g steps)\n", jnum(&root, "node"), jnum(&root, "nodes"), jnum(&root, "pid"),
		jtext(&root, "job_id"), jtext(&root, "state"), jnum(&root, "uptime_s"),
		jnum(&root, "world"), jnum(&root, "job_epochs"), jnum(&root, "batches_per_epoch"));
	fprintf(out, "dataset   %g samples, %s, %g files, format %s\n", jnum(ds, "samples"),
		sz(a, jnum(ds, "bytes")), jnum(ds, "files"), jtext(ds, "format"));
	fprintf(out, "RAM       %g of %g planned samples loaded (%s, capacity %s); staging %s\n",
		jnum(ca, "ram_loaded_samples"), jnum(ca, "ram_planned_samples"),
		sz(a, jnum(ca, "ram_loaded_bytes")), sz(b, jnum(ca, "ram_capacity")),
		sz(c, jnum(ca, "staging_capacity")));
	if (jget(ca, "nvme_enabled")->b)
		fprintf(out, "NVMe      %g of %g planned samples written (%s, capacity %s)\n",
			jnum(ca, "nvme_loaded_samples"), jnum(ca, "nvme_planned_samples"),
			sz(a, jnum(ca, "nvme_loaded_bytes")), sz(b, jnum(ca, "nvme_capacity")));
	else
		fprintf(out, "NVMe      off\n");
	fprintf(out, "I/O       %g threads, %g reads pending; %s\n", jnum(io, "threads"),
		jnum(io, "pending"), jtext(io, "placement"));
	fprintf(out, "topology  %s\n", jtext(&root, "topology"));
	fprintf(out, "sources  ");
	for (size_t i = 0; i < src->n; i++) {
		const struct jv *x = &src->kids[i];
		if (jnum(x, "reads") > 0)
			fprintf(out, " %s: %g reads, %.2f ms, %.0f MB/s;", x->key, jnum(x, "reads"),
				jnum(x, "latency_ms"), jnum(x, "mb_per_s"));
		else
			fprintf(out, " %s: -;", x->key);
	}
	fprintf(out, "  step %.2f ms\n", jnum(&root, "step_ms"));
	const struct jv *tr = jget(&root, "trainers");
	fprintf(out, "\n%-5s %-8s %-9s %-11s %-5s %-5s %-21s %s\n", "rank", "pid", "state",
		"epoch:step", "lead", "held", "staging", "stall (count)");
	for (size_t i = 0; i < tr->n; i++) {
		const struct jv *t = &tr->kids[i];
		char pos[32], stg[64];
		snprintf(pos, sizeof(pos), "%g:%g", jnum(t, "epoch"), jnum(t, "step"));
		snprintf(stg, sizeof(stg), "%s / %s", sz(a, jnum(t, "staging_used")),
			 sz(b, jnum(t, "staging_capacity")));
		fprintf(out, "%-5g %-8g %-9s %-11s %-5g %-5g %-21s %.3f s (%g)\n", jnum(t, "rank"),
			jnum(t, "pid"), jget(t, "done")->b ? "done" : jget(t, "attached")->b ? "attached"
			: "gone", pos, jnum(t, "prefetch_lead"), jnum(t, "held"), stg,
			jnum(t, "stall_s"), jnum(t, "stalls"));
	}
	const struct jv *ep = jget(&root, "epochs");
	if (jnum(&root, "epochs_omitted") > 0)
		fprintf(out, "\n(%g earlier epochs not shown: every epoch is in the stats file)",
			jnum(&root, "epochs_omitted"));
	fprintf(out, "\n%-6s %-9s %-9s %-7s %-11s %-11s %-11s %s\n", "epoch", "samples", "seconds",
		"RAM %", "NVMe", "peers", "PFS", "failed");
	for (size_t i = 0; i < ep->n; i++) {
		const struct jv *e = &ep->kids[i];
		char nv[32], pe[32], pf[32];
		double secs = jnum(e, "seconds");
		char sec[32];
		if (secs >= 0)
			snprintf(sec, sizeof(sec), "%.3f", secs);
		else
			snprintf(sec, sizeof(sec), "running");
		fprintf(out, "%-6g %-9g %-9s %-7.1f %-11s %-11s %-11s %g\n", jnum(e, "epoch"),
			jnum(e, "samples"), sec,
			100.0 * jnum(e, "ram_samples") / (jnum(e, "samples") > 0 ? jnum(e, "samples") : 1),
			sz(nv, jnum(e, "nvme_bytes")), sz(pe, jnum(e, "peer_bytes")),
			sz(pf, jnum(e, "pfs_bytes")), jnum(e, "failed_batches"));
	}
	jfree(&root);
	return 0;
}

int main(int argc, char **argv)
{
	const char *sock = getenv("SEER_SOCKET");
	const char *job = NULL;
	bool json = false;
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "job", required_argument, NULL, 'j' },
		{ "json", no_argument, NULL, 'J' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "s:j:h", opts, NULL)) != -1) {
		switch (c) {
		case 's': sock = optarg; break;
		case 'j': job = optarg; break;
		case 'J': json = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[optind];
	if (strlen(cmd) >= sizeof(((struct seer_msg_hello *)0)->ctl)) {
		fprintf(stderr, "seerctl: command too long\n");
		return 2;
	}
	char path[4096];
	if (job || !sock || !*sock) {
		if (seer_default_socket(path, sizeof(path), job ? job : seer_env_job_id()) != 0) {
			fprintf(stderr, "seerctl: socket path too long\n");
			return 2;
		}
		sock = path;
	}
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(sock) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "seerctl: socket path %s too long\n", sock);
		return 2;
	}
	strcpy(sa.sun_path, sock);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		fprintf(stderr, "seerctl: no seerd at %s: %s\n", sock, strerror(errno));
		return 1;
	}
	struct seer_msg_hello h = { .magic = SEER_MAGIC_HELLO, .kind = SEER_MSG_CTL,
				    .version = SEER_PROTO_VERSION };
	snprintf(h.ctl, sizeof(h.ctl), "%s", cmd);
	if (sock_send(fd, &h, sizeof(h), NULL, 0) != (ssize_t)sizeof(h)) {
		fprintf(stderr, "seerctl: sending to %s failed\n", sock);
		return 1;
	}
	size_t cap = 1 << 16, len = 0;
	char *text = xmalloc(cap);
	char *pkt = xmalloc(sizeof(struct seer_msg_ctl_reply) + SEER_CTL_CHUNK);
	int status = 0;
	for (;;) {
		ssize_t n = sock_recv(fd, pkt, sizeof(struct seer_msg_ctl_reply) + SEER_CTL_CHUNK,
				      NULL, NULL, 0);
		struct seer_msg_ctl_reply r;
		if (n < (ssize_t)sizeof(r)) {
			fprintf(stderr, "seerctl: the daemon closed the connection without an answer\n");
			return 1;
		}
		memcpy(&r, pkt, sizeof(r));
		if (r.kind != SEER_MSG_CTL_REPLY || r.len > (size_t)n - sizeof(r)) {
			fprintf(stderr, "seerctl: malformed reply (daemon of another version?)\n");
			return 1;
		}
		if (len + r.len + 1 > cap) {
			cap = (len + r.len + 1) * 2;
			text = xrealloc(text, cap);
		}
		memcpy(text + len, pkt + sizeof(r), r.len);
		len += r.len;
		status = r.status;
		if (!r.more)
			break;
	}
	text[len] = '\0';
	close(fd);
	if (status != 0) {
		fprintf(stderr, "seerctl: %s\n", text);
		return 1;
	}
	if (!json && strcmp(cmd, "status") == 0 && render_status(text, stdout) == 0) {
		/* rendered */
	} else {
		fputs(text, stdout);
		fputs(len && text[len - 1] == '\n' ? "" : "\n", stdout);
	}
	free(text);
	free(pkt);
	return 0;
}
