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

/* Indent JSON for people; strings are copied verbatim. */
static void pretty(const char *s, FILE *out)
{
	int depth = 0;
	bool in_str = false;
	for (const char *p = s; *p; p++) {
		char c = *p;
		if (in_str) {
			fputc(c, out);
			if (c == '\\' && p[1]) {
				fputc(*++p, out);
			} else if (c == '"') {
				in_str = false;
			}
			continue;
		}
		switch (c) {
		case '"':
			in_str = true;
			fputc(c, out);
			break;
		case '{':
		case '[':
			if ((c == '{' && p[1] == '}') || (c == '[' && p[1] == ']')) {
				fputc(c, out);
				fputc(*++p, out);
				break;
			}
			fputc(c, out);
			fprintf(out, "\n%*s", ++depth * 2, "");
			break;
		case '}':
		case ']':
			fprintf(out, "\n%*s%c", --depth * 2, "", c);
			break;
		case ',':
			fprintf(out, ",\n%*s", depth * 2, "");
			break;
		case ':':
			fputs(": ", out);
			break;
		default:
			fputc(c, out);
		}
	}
	fputc('\n', out);
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
	if (json || text[0] != '{')
		fputs(text, stdout), fputs(len && text[len - 1] == '\n' ? "" : "\n", stdout);
	else
		pretty(text, stdout);
	free(text);
	free(pkt);
	return 0;
}
