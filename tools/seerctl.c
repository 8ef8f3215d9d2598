/* seerctl: ask a running seerd.
 *
 *   seerctl [--socket PATH | --job ID] [--json] status|config|forecast|drain|stop
 *
 * Exit 0 on success, 1 when the daemon is unreachable or refuses. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../proto/seer_proto.h"
#include "../src/common/shm.h"
#include "../src/util/util.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: seerctl [--socket PATH | --job ID] [--json] COMMAND\n"
		"\n"
		"  status   trainers, epoch/step, prefetch lead, cache fill, bytes by source\n"
		"  config   the daemon's effective configuration\n"
		"  forecast this node's bytes by source and time per epoch with the rates\n"
		"           the daemon measured, the binding term, each epoch's actual\n"
		"  checkpoints  each checkpoint: bytes, state per level, drain rate and ETA\n"
		"  drain    accept no new trainers; exit when the attached ones finish\n"
		"  stop     stop now: trainers get SEER_ESHUTDOWN, the daemon cleans up\n"
		"\n"
		"The socket defaults to $SEER_SOCKET, else the one derived from --job,\n"
		"$SEER_JOB_ID or $SLURM_JOB_ID (as seerd and libseer derive it).\n");
}

/* ---- reading the replies (JSON, libjansson) ------------------------------------ */

static double jnum(const json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_number(v) ? json_number_value(v) : 0;
}

static const char *jtext(const json_t *o, const char *key)
{
	const char *t = json_string_value(json_object_get(o, key));
	return t ? t : "";
}

static bool jbool(const json_t *o, const char *key)
{
	return json_is_true(json_object_get(o, key));
}

static const char *sz(char *buf, double bytes)
{
	return fmt_size(buf, 32, (uint64_t)(bytes < 0 ? 0 : bytes));
}

/* `seerctl status` for people: the daemon, its caches and sources */
static void render_head(const json_t *root, FILE *out)
{
	char a[32], b[32], c[32], d[32], f[32];
	const json_t *ds = json_object_get(root, "dataset"), *ca = json_object_get(root, "cache");
	const json_t *io = json_object_get(root, "io"), *src = json_object_get(root, "sources");
	fprintf(out, "seerd node %.0f of %.0f  pid %.0f  job %s  %s  up %.1f s  (%.0f trainers, %.0f epochs of "
		"%.0f steps)\n", jnum(root, "node"), jnum(root, "nodes"), jnum(root, "pid"),
		jtext(root, "job_id"), jtext(root, "state"), jnum(root, "uptime_s"),
		jnum(root, "world"), jnum(root, "job_epochs"), jnum(root, "batches_per_epoch"));
	fprintf(out, "dataset   %.0f samples, %s, %.0f files, format %s\n", jnum(ds, "samples"),
		sz(a, jnum(ds, "bytes")), jnum(ds, "files"), jtext(ds, "format"));
	fprintf(out, "RAM       %.0f of %.0f planned samples loaded (%s, capacity %s); staging %s\n",
		jnum(ca, "ram_loaded_samples"), jnum(ca, "ram_planned_samples"),
		sz(a, jnum(ca, "ram_loaded_bytes")), sz(b, jnum(ca, "ram_capacity")),
		sz(c, jnum(ca, "staging_capacity")));
	const json_t *rp = json_object_get(ca, "replicas");
	if (jbool(rp, "enabled"))
		fprintf(out, "replicas  %g of %g loaded (%s; %g in RAM, %g on NVMe), filled from %s; "
			"%s filled, %s of it from the PFS, %g failed, %g in flight\n",
			jnum(rp, "loaded_samples"), jnum(rp, "samples"), sz(a, jnum(rp, "bytes")),
			jnum(rp, "ram_samples"), jnum(rp, "nvme_samples"),
			strcmp(jtext(rp, "fill_source"), "pfs") == 0 ? "the PFS" : "their owners",
			sz(b, jnum(rp, "filled_bytes")), sz(c, jnum(rp, "filled_from_pfs_bytes")),
			jnum(rp, "fills_failed"), jnum(rp, "fills_inflight"));
	else
		fprintf(out, "replicas  off\n");
	if (jbool(ca, "nvme_enabled"))
		fprintf(out, "NVMe      %.0f of %.0f planned samples written (%s, capacity %s)\n",
			jnum(ca, "nvme_loaded_samples"), jnum(ca, "nvme_planned_samples"),
			sz(a, jnum(ca, "nvme_loaded_bytes")), sz(b, jnum(ca, "nvme_capacity")));
	else
		fprintf(out, "NVMe      off\n");
	fprintf(out, "I/O       %.0f threads, %.0f reads pending; %s\n", jnum(io, "threads"),
		jnum(io, "pending"), jtext(io, "placement"));
	const json_t *xf = json_object_get(root, "transform");
	if (xf && strcmp(jtext(xf, "decode"), "image") == 0) {
		const json_t *tot = json_object_get(xf, "total");
		const json_t *sh = json_object_get(xf, "shape");
		fprintf(out, "transform %g threads (%g running), tensors %gx%gx%g; %g made: %g decoded "
			"(%.2f s) + %g from decoded images, resize %.2f s, %g failed, %g skipped\n",
			jnum(xf, "threads"), jnum(xf, "active_threads"),
			json_number_value(json_array_get(sh, 0)), json_number_value(json_array_get(sh, 1)),
			json_number_value(json_array_get(sh, 2)), jnum(tot, "samples"),
			jnum(tot, "decoded"), jnum(tot, "decode_s"), jnum(tot, "from_decoded_cache"),
			jnum(tot, "resize_s"), jnum(tot, "failed"), jnum(tot, "skipped"));
		fprintf(out, "          cache: %s; %g images decoded into the caches (%.2f s)\n",
			jtext(xf, "cache_why"), jnum(tot, "cache_decodes"), jnum(tot, "cache_decode_s"));
	}
	const json_t *co = json_object_get(root, "coalescing");
	if (co && jbool(co, "on"))
		fprintf(out, "extents   %g coalesced reads, %s for %g samples (%s): amplification "
			"%.3f, bound %.2f; %g PFS reads in all; memory peak %s of %s, extents up "
			"to %s\n", jnum(co, "extents"), sz(a, jnum(co, "bytes")), jnum(co, "samples"),
			sz(b, jnum(co, "useful_bytes")), jnum(co, "amplification"),
			jnum(co, "max_amplification"), jnum(co, "pfs_reads"),
			sz(c, jnum(co, "memory_peak")), sz(d, jnum(co, "extent_memory")),
			sz(f, jnum(co, "extent_max")));
	else if (co)
		fprintf(out, "extents   off: one PFS read per sample\n");
	const json_t *pr = co ? json_object_get(co, "probe") : NULL;
	if (pr && json_is_object(pr))
		fprintf(out, "          prefetch.coalesce = %s, PFS probe: %s\n", jtext(co, "mode"),
			jtext(pr, "why"));
	fprintf(out, "topology  %s\n", jtext(root, "topology"));
	fprintf(out, "sources  ");
	const char *name;
	const json_t *x;
	json_object_foreach((json_t *)src, name, x) {
		if (jnum(x, "reads") > 0)
			fprintf(out, " %s: %.0f reads, %.2f ms, %.0f MB/s;", name, jnum(x, "reads"),
				jnum(x, "latency_ms"), jnum(x, "mb_per_s"));
		else
			fprintf(out, " %s: -;", name);
	}
	fprintf(out, "  step %.2f ms\n", jnum(root, "step_ms"));
}

static void render_trainers(const json_t *root, FILE *out)
{
	char a[32], b[32];
	const json_t *tr = json_object_get(root, "trainers");
	fprintf(out, "\n%-5s %-8s %-9s %-11s %-5s %-5s %-21s %s\n", "rank", "pid", "state",
		"epoch:step", "lead", "held", "staging", "stall (count)");
	size_t i;
	const json_t *t;
	json_array_foreach(tr, i, t) {
		char pos[32], stg[64];
		snprintf(pos, sizeof(pos), "%.0f:%.0f", jnum(t, "epoch"), jnum(t, "step"));
		snprintf(stg, sizeof(stg), "%s / %s", sz(a, jnum(t, "staging_used")),
			 sz(b, jnum(t, "staging_capacity")));
		fprintf(out, "%-5.0f %-8.0f %-9s %-11s %-5.0f %-5.0f %-21s %.3f s (%.0f)\n", jnum(t, "rank"),
			jnum(t, "pid"), jbool(t, "done") ? "done" : jbool(t, "attached") ? "attached"
			: "gone", pos, jnum(t, "prefetch_lead"), jnum(t, "held"), stg,
			jnum(t, "stall_s"), jnum(t, "stalls"));
	}
}

static void render_epochs(const json_t *root, FILE *out)
{
	const json_t *ep = json_object_get(root, "epochs");
	if (jnum(root, "epochs_omitted") > 0)
		fprintf(out, "\n(%.0f earlier epochs not shown: every epoch is in the stats file)",
			jnum(root, "epochs_omitted"));
	fprintf(out, "\n%-6s %-9s %-9s %-7s %-11s %-11s %-11s %s\n", "epoch", "samples", "seconds",
		"RAM %", "NVMe", "peers", "PFS", "failed");
	size_t i;
	const json_t *e;
	json_array_foreach(ep, i, e) {
		char nv[32], pe[32], pf[32];
		double secs = jnum(e, "seconds");
		char sec[32];
		if (secs >= 0)
			snprintf(sec, sizeof(sec), "%.3f", secs);
		else
			snprintf(sec, sizeof(sec), "running");
		fprintf(out, "%-6.0f %-9.0f %-9s %-7.1f %-11s %-11s %-11s %.0f\n", jnum(e, "epoch"),
			jnum(e, "samples"), sec,
			100.0 * jnum(e, "ram_samples") / (jnum(e, "samples") > 0 ? jnum(e, "samples") : 1),
			sz(nv, jnum(e, "nvme_bytes")), sz(pe, jnum(e, "peer_bytes")),
			sz(pf, jnum(e, "pfs_bytes")), jnum(e, "failed_batches"));
	}
}

/* `seerctl status` for people; -1 when the reply is not a JSON object. */
static int render_status(const char *text, FILE *out)
{
	json_t *root = json_loads(text, 0, NULL);
	if (!json_is_object(root)) {
		json_decref(root);
		return -1;
	}
	if (json_object_get(root, "scanning")) {
		/* seerd still starting (daemon/startup.c): its progress only */
		fprintf(out, "seerd node %.0f of %.0f  pid %.0f  job %s  %s  up %.1f s\n%s\n",
			jnum(root, "node"), jnum(root, "nodes"), jnum(root, "pid"),
			jtext(root, "job_id"), jtext(root, "state"), jnum(root, "uptime_s"),
			jtext(root, "scanning"));
		json_decref(root);
		return 0;
	}
	render_head(root, out);
	render_trainers(root, out);
	render_epochs(root, out);
	json_decref(root);
	return 0;
}

/* A time with its measurement: "-" when unknown. */
static const char *secs(char *buf, const json_t *v)
{
	if (!json_is_number(v))
		return "-";
	snprintf(buf, 32, "%.3f", json_number_value(v));
	return buf;
}

/* A measured bandwidth, "-" when there is none yet. */
static const char *rate(char *buf, double bps)
{
	if (bps <= 0)
		return "-";
	fmt_size(buf, 32, (uint64_t)bps);
	strcat(buf, "/s");
	return buf;
}

static void render_forecast_rates(const json_t *root, FILE *out)
{
	char a[40], b[40], c[40];
	const json_t *r = json_object_get(root, "rates"), *rp = json_object_get(root, "replicas");
	fprintf(out, "forecast of node %g of %g from epoch %g; rates measured so far:\n",
		jnum(root, "node"), jnum(root, "nodes"), jnum(root, "first_epoch"));
	fprintf(out, "  compute %.3f ms/step (%g steps), PFS %s aggregate (%g reads), network "
		"%s (%g fetches), NVMe %s (%g reads)\n  (bandwidths: %g I/O threads x one read's "
		"rate; -: not measured yet, its term left out)\n",
		jnum(r, "compute_s") * 1e3, jnum(r, "steps"), rate(a, jnum(r, "pfs_bytes_per_s")),
		jnum(r, "pfs_reads"), rate(b, jnum(r, "net_bytes_per_s")), jnum(r, "peer_reads"),
		rate(c, jnum(r, "nvme_bytes_per_s")), jnum(r, "nvme_reads"), jnum(r, "io_threads"));
	fprintf(out, "  replicas %s", jbool(rp, "enabled") ? "on" : "off");
	if (jbool(rp, "enabled"))
		fprintf(out, ": %s, filled from %s", sz(a, jnum(rp, "bytes")),
			strcmp(jtext(rp, "fill_source"), "pfs") == 0 ? "the PFS" : "their owners");
	fprintf(out, "\n");
}

/* `seerctl checkpoints` for people; -1 when the reply is not a JSON object. */
static int render_checkpoints(const char *text, FILE *out)
{
	json_t *root = json_loads(text, 0, NULL);
	json_t *arr = json_object_get(root, "checkpoints");
	if (!json_is_object(root) || !json_is_array(arr)) {
		json_decref(root);
		return -1;
	}
	char a[32], b[32], c[32], d[32];
	const char *dir = jtext(root, "nvme_dir");
	fprintf(out, "checkpoints: memory %s of %s; NVMe %s of %s (%s); drain %s, cap %s, "
		"%s to go, ETA %.0f s\n", fmt_size(a, sizeof(a), (uint64_t)jnum(root, "memory_used")),
		fmt_size(b, sizeof(b), (uint64_t)jnum(root, "memory")),
		fmt_size(c, sizeof(c), (uint64_t)jnum(root, "nvme_used")),
		fmt_size(d, sizeof(d), (uint64_t)jnum(root, "nvme")), *dir ? dir : "no NVMe tier",
		rate((char[32]){ 0 }, jnum(root, "drain_rate")),
		jnum(root, "drain_rate_cap") > 0 ? rate((char[32]){ 0 }, jnum(root, "drain_rate_cap"))
						 : "none",
		fmt_size(a, sizeof(a), (uint64_t)jnum(root, "bytes_to_drain")), jnum(root, "eta_s"));
	json_t *po = json_object_get(root, "pfs_outlook");
	fprintf(out, "drain pace: %s now; seerd's own PFS reads: %.0f queued, %.0f (%s) in the "
		"next %.0f s of the plan (a drain there: %s)\n", jtext(root, "drain_mode"),
		jnum(po, "queued"), jnum(po, "soon_reads"),
		fmt_size(a, sizeof(a), (uint64_t)jnum(po, "soon_bytes")), jnum(po, "window_s"),
		jtext(po, "mode"));
	fprintf(out, "%-16s %10s %-8s %-8s %-8s %-8s %10s %12s %6s  %s\n", "id", "bytes", "memory",
		"local", "peer", "pfs", "drained", "rate", "eta", "path");
	size_t i;
	json_t *e;
	json_array_foreach(arr, i, e) {
		json_t *lv = json_object_get(e, "levels");
		fprintf(out, "%-16s %10s %-8s %-8s %-8s %-8s %10s %12s %6.0f  %s\n", jtext(e, "id"),
			fmt_size(a, sizeof(a), (uint64_t)jnum(e, "bytes")), jtext(lv, "memory"),
			jtext(lv, "local"), jtext(lv, "peer"), jtext(lv, "pfs"),
			fmt_size(b, sizeof(b), (uint64_t)jnum(e, "drained")),
			rate(c, jnum(e, "drain_rate")), jnum(e, "eta_s"), jtext(e, "path"));
		json_t *mb = json_object_get(e, "drain_modes");
		if (jnum(mb, "full") + jnum(mb, "plan") + jnum(mb, "yield") > 0)
			fprintf(out, "    drained at full rate %s, in the gaps between the plan's "
				"reads %s, yielding to queued reads %s\n",
				fmt_size(a, sizeof(a), (uint64_t)jnum(mb, "full")),
				fmt_size(b, sizeof(b), (uint64_t)jnum(mb, "plan")),
				fmt_size(c, sizeof(c), (uint64_t)jnum(mb, "yield")));
		if (*jtext(e, "why"))
			fprintf(out, "    why: %s\n", jtext(e, "why"));
		if (*jtext(e, "peer_why"))
			fprintf(out, "    peer: %s\n", jtext(e, "peer_why"));
	}
	json_t *peer = json_object_get(root, "peer");
	fprintf(out, "peer copies: %s", json_is_integer(peer) ? "sent to node " : "none sent");
	if (json_is_integer(peer))
		fprintf(out, "%" JSON_INTEGER_FORMAT, json_integer_value(peer));
	json_t *held = json_object_get(root, "held");
	fprintf(out, "; held here for other nodes: %zu (%s on NVMe, %s in memory)\n",
		json_array_size(held), fmt_size(a, sizeof(a), (uint64_t)jnum(root, "held_nvme")),
		fmt_size(b, sizeof(b), (uint64_t)jnum(root, "held_memory")));
	json_array_foreach(held, i, e)
		fprintf(out, "  node %.0f's %-16s %10s %-6s  %s\n", jnum(e, "origin"), jtext(e, "id"),
			fmt_size(c, sizeof(c), (uint64_t)jnum(e, "bytes")), jtext(e, "where"),
			jtext(e, "path"));
	json_decref(root);
	return 0;
}

/* `seerctl forecast` for people; -1 when the reply is not a JSON object. */
static int render_forecast(const char *text, FILE *out)
{
	json_t *root = json_loads(text, 0, NULL);
	if (!json_is_object(root)) {
		json_decref(root);
		return -1;
	}
	if (!jbool(root, "ready")) {
		fprintf(out, "no forecast yet: %s\n", jtext(root, "why"));
		json_decref(root);
		return 0;
	}
	render_forecast_rates(root, out);
	fprintf(out, "\n%-6s %-10s %-10s %-10s %-10s %-10s %-9s %-8s %-9s| %-9s %-10s %-10s\n",
		"epoch", "RAM", "NVMe", "peers", "fills", "PFS", "time (s)", "bound", "bound lb",
		"actual s", "peers", "PFS");
	size_t i;
	const json_t *e;
	json_array_foreach(json_object_get(root, "epochs"), i, e) {
		char r[32], n[32], p[32], f[32], q[32], t[32], l[32], at[32], ap[32], aq[32];
		const json_t *a = json_object_get(e, "actual");
		fprintf(out, "%-6g %-10s %-10s %-10s %-10s %-10s %-9s %-8s %-9s| %-9s %-10s %-10s\n",
			jnum(e, "epoch"), sz(r, jnum(e, "ram_bytes")), sz(n, jnum(e, "nvme_bytes")),
			sz(p, jnum(e, "peer_bytes")), sz(f, jnum(e, "fill_bytes")),
			sz(q, jnum(e, "pfs_bytes")), secs(t, json_object_get(e, "seconds")),
			jtext(e, "bound"), secs(l, json_object_get(e, "lower_bound")),
			a ? secs(at, json_object_get(a, "seconds")) : "-",
			json_is_object(a) ? sz(ap, jnum(a, "peer_bytes")) : "-",
			json_is_object(a) ? sz(aq, jnum(a, "pfs_bytes")) : "-");
	}
	fprintf(out, "job    %-54s %-9.3f %-8s %-9.3f|\n", "", jnum(root, "seconds"), "",
		jnum(root, "lower_bound"));
	fprintf(out, "\n(forecast peers: reads other nodes serve, replica fills apart; actual "
		"peers: both; PFS: this node's reads)\nsmallest RAM and NVMe per node with no "
		"I/O-bound epoch after the first, with these rates:\n  %s\n",
		jtext(root, "seer_plan"));
	json_decref(root);
	return 0;
}

/* `seerctl config` for people: the INI text of the reply. */
static int render_config(const char *text, FILE *out)
{
	json_t *root = json_loads(text, 0, NULL);
	const char *ini = json_string_value(json_object_get(root, "ini"));
	if (ini)
		fputs(ini, out);
	json_decref(root);
	return ini ? 0 : -1;
}

/* Send cmd to the seerd at sock and read its reply: *text (malloc'd) and
 * *status. 0, or the exit code after saying why on stderr. */
static int ask(const char *sock, const char *cmd, char **out, int *status)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(sock) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "seerctl: socket path %s too long\n", sock);
		return 2;
	}
	strcpy(sa.sun_path, sock);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		fprintf(stderr, "seerctl: no seerd at %s: %s\n", sock, strerror(errno));
		if (fd >= 0)
			close(fd);
		return 1;
	}
	struct seer_msg_hello h = { .magic = SEER_MAGIC_HELLO, .kind = SEER_MSG_CTL,
				    .version = SEER_PROTO_VERSION };
	snprintf(h.ctl, sizeof(h.ctl), "%s", cmd);
	if (sock_send(fd, &h, sizeof(h), NULL, 0) != (ssize_t)sizeof(h)) {
		fprintf(stderr, "seerctl: sending to %s failed\n", sock);
		close(fd);
		return 1;
	}
	size_t cap = 1 << 16, len = 0;
	char *text = xmalloc(cap);
	char *pkt = xmalloc(sizeof(struct seer_msg_ctl_reply) + SEER_CTL_CHUNK);
	*status = 0;
	int rc = 0;
	for (;;) {
		ssize_t n = sock_recv(fd, pkt, sizeof(struct seer_msg_ctl_reply) + SEER_CTL_CHUNK,
				      NULL, NULL, 0);
		struct seer_msg_ctl_reply r;
		if (n < (ssize_t)sizeof(r)) {
			fprintf(stderr, "seerctl: the daemon closed the connection without an answer\n");
			rc = 1;
			break;
		}
		memcpy(&r, pkt, sizeof(r));
		if (r.kind == SEER_MSG_ERROR &&
		    n >= (ssize_t)offsetof(struct seer_msg_welcome, nsamples)) {
			/* refused before the command was read (a flood, no fds) */
			struct seer_msg_welcome w;
			memcpy(&w, pkt, (size_t)n < sizeof(w) ? (size_t)n : sizeof(w));
			w.msg[sizeof(w.msg) - 1] = '\0';
			fprintf(stderr, "seerctl: seerd refused: %s\n", w.msg);
			rc = 1;
			break;
		}
		if (r.kind != SEER_MSG_CTL_REPLY || r.len > (size_t)n - sizeof(r)) {
			fprintf(stderr, "seerctl: malformed reply (daemon of another version?)\n");
			rc = 1;
			break;
		}
		if (len + r.len + 1 > cap) {
			cap = (len + r.len + 1) * 2;
			text = xrealloc(text, cap);
		}
		memcpy(text + len, pkt + sizeof(r), r.len);
		len += r.len;
		*status = r.status;
		if (!r.more)
			break;
	}
	text[len] = '\0';
	close(fd);
	free(pkt);
	if (rc != 0) {
		free(text);
		return rc;
	}
	*out = text;
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
	char *text;
	int status, rc = ask(sock, cmd, &text, &status);
	if (rc != 0)
		return rc;
	if (status != 0) {
		fprintf(stderr, "seerctl: %s\n", text);
		free(text);
		return 1;
	}
	size_t len = strlen(text);
	if (!json && strcmp(cmd, "status") == 0 && render_status(text, stdout) == 0) {
		/* rendered */
	} else if (!json && strcmp(cmd, "config") == 0 && render_config(text, stdout) == 0) {
		/* rendered */
	} else if (!json && strcmp(cmd, "forecast") == 0 && render_forecast(text, stdout) == 0) {
		/* rendered */
	} else if (!json && strcmp(cmd, "checkpoints") == 0 &&
		   render_checkpoints(text, stdout) == 0) {
		/* rendered */
	} else {
		fputs(text, stdout);
		fputs(len && text[len - 1] == '\n' ? "" : "\n", stdout);
	}
	free(text);
	return 0;
}
