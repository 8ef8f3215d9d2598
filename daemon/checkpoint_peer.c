/* The checkpoint stage's peer level ([checkpoint] peers = 1, several
 * nodes; docs/checkpoint.md "Peer copies"): each committed checkpoint of
 * this node goes to node (node + 1) % nodes, and this node holds the copies
 * of node - 1.
 *
 * Owns: the TCP listener and the two threads (struct ck_peers in
 * checkpoint_int.h), the wire format below, the copies held for node - 1
 * (<dir>/peer-<origin>/<id>.data + .meta, or memfds without an NVMe tier;
 * their retention, [checkpoint] keep per origin) and their start-up
 * recovery. The items' peer state (st[SEER_CKL_PEER], peer_why, peer_busy)
 * is written here only.
 *
 * Threads: the sender (peer_tx_main: one copy at a time, the bytes read
 * from NVMe or memory with peer_busy set) and the receiver (peer_rx_main:
 * one connection at a time); both take ck->mu only between copies and for
 * the budgets. ckpt_peer_listen / ckpt_peer_start run on the dispatcher at
 * start; the others on the caller named in checkpoint_int.h.
 *
 * Failure: a peer that does not answer within [net] peer_timeout_ms, that
 * refuses (secret, origin, no room) or whose copy fails its crc32c makes
 * the copy "failed" with why (wait("peer") returns it) and it is sent again
 * after a backoff (1 s doubling to 10 s) while this node has its bytes; the
 * local and PFS levels go on. The peer's confirmation is recorded in the
 * copy's NVMe record, and a copy found on NVMe at start without it is sent
 * again. The receiver keeps nothing partial: a copy is held once its
 * checksum matched and it was fsync'd and recorded; one sent again replaces
 * the held copy of the same id. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "../src/fmt/crc32c.h"
#include "../src/util/util.h"
#include "checkpoint_int.h"

/* messages (why, paths in them) are cut to their fixed buffers on purpose */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define CK_PEER_RETRY_MIN_S 1.0 /* the first retry of a failed copy; doubles to CK_RETRY_S */

/* Sent by the peer sender before the bytes; the bytes are followed by their
 * crc32c (uint32_t), and the receiver answers with a struct ck_peer_ack. */
#define CK_PEER_MAGIC 0x53434b50u /* "SCKP", version 1 */
struct ck_peer_hdr {
	uint32_t magic;
	uint32_t origin;
	uint64_t id, size;
	uint8_t secret[16];
	char path[SEER_CKPT_PATH_MAX];
};
struct ck_peer_ack {
	int32_t status;            /* 0: complete, fsync'd and its checksum right */
	char msg[SEER_ERRMSG_MAX];
};

static void held_file(const struct ckpt *ck, uint32_t origin, uint64_t id, const char *ext,
		      char *buf, size_t len)
{
	snprintf(buf, len, "%s/peer-%u/%016" PRIx64 ".%s", ck->dir, origin, id, ext);
}

static void held_drop(struct ckpt *ck, struct ck_held *h)
{
	for (struct ck_held **pp = &ck->peer.held; *pp; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	if (h->memfd >= 0) {
		close(h->memfd);
		ck->mem_used -= h->size;
	} else {
		char f[4200];
		held_file(ck, h->origin, h->id, "meta", f, sizeof(f));
		unlink(f);
		held_file(ck, h->origin, h->id, "data", f, sizeof(f));
		unlink(f);
		ck->peer.held_used -= h->size;
	}
	log_info("copy of node %u's checkpoint %s (%016" PRIx64 ") removed (keep %" PRIu64 ")",
		 h->origin, h->path, h->id, ck->cfg->checkpoint.keep);
	free(h->path);
	free(h);
}

/* A copy of (origin, id) sent again replaces the one held: the old entry
 * goes (its memfd closed; its files are the new copy's names, not removed). */
static void held_forget(struct ckpt *ck, uint32_t origin, uint64_t id)
{
	pthread_mutex_lock(&ck->mu);
	for (struct ck_held **pp = &ck->peer.held; *pp; pp = &(*pp)->next) {
		struct ck_held *h = *pp;
		if (h->origin != origin || h->id != id)
			continue;
		*pp = h->next;
		if (h->memfd >= 0) {
			close(h->memfd);
			ck->mem_used -= h->size;
		} else {
			ck->peer.held_used -= h->size;
		}
		log_info("copy of node %u's checkpoint %s (%016" PRIx64 ") sent again: the new "
			 "copy replaces it", origin, h->path, id);
		free(h->path);
		free(h);
		break;
	}
	pthread_mutex_unlock(&ck->mu);
}

/* Retention for held copies: at most `keep` of `origin`'s, newest kept. */
static void held_prune(struct ckpt *ck, uint32_t origin, uint64_t keep)
{
	size_t n = 0;
	for (struct ck_held *h = ck->peer.held; h; h = h->next)
		n += h->origin == origin;
	for (struct ck_held *h = ck->peer.held, *nx; h && n > keep; h = nx) {
		nx = h->next;
		if (h->origin == origin) {
			held_drop(ck, h);
			n--;
		}
	}
}

static int io_all(int fd, void *buf, size_t n, bool out)
{
	uint8_t *p = buf;
	while (n > 0) {
		ssize_t r = out ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		if (r == 0)
			return -ECONNRESET;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static void sock_timeouts(int fd, double s)
{
	struct timeval tv = { .tv_sec = (time_t)s, .tv_usec = (long)((s - (double)(time_t)s) * 1e6) };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static double peer_timeout_s(const struct ckpt *ck)
{
	return MAX(ck->cfg->net.peer_timeout_ms / 1000.0, 1.0);
}

/* One copy from node - 1: room reserved, bytes received and checked,
 * fsync'd, recorded; or nothing kept. 0, or -errno with why. */
static int held_receive(struct ckpt *ck, int fd, char *why, size_t wlen)
{
	struct ck_peer_hdr h;
	int rc = io_all(fd, &h, sizeof(h), false);
	if (rc != 0) {
		snprintf(why, wlen, "reading the header: %s", strerror(-rc));
		return rc;
	}
	h.path[sizeof(h.path) - 1] = '\0';
	uint32_t from = (ck->node + ck->nnodes - 1) % ck->nnodes;
	if (h.magic != CK_PEER_MAGIC || memcmp(h.secret, ck->peer.secret, sizeof(h.secret)) != 0 ||
	    h.origin != from || h.size == 0 || h.path[0] != '/') {
		snprintf(why, wlen, "refused: not a copy from this job's node %u (wrong magic, "
			 "secret or origin)", from);
		return -EPERM;
	}
	char sz[32], a[32], b[32], f[4200] = "", dir[4200];
	bool nvme = *ck->dir;
	pthread_mutex_lock(&ck->mu);
	if (nvme) {
		struct statvfs vs;
		uint64_t avail = statvfs(ck->dir, &vs) == 0 ? (uint64_t)vs.f_bavail * vs.f_frsize
							   : UINT64_MAX;
		/* the new copy will be one of `keep`: older ones beyond make room first */
		if (ck->nvme_used + ck->peer.held_used + h.size > ck->cfg->checkpoint.nvme || h.size > avail)
			held_prune(ck, h.origin, ck->cfg->checkpoint.keep ? ck->cfg->checkpoint.keep - 1 : 0);
		if (ck->nvme_used + ck->peer.held_used + h.size > ck->cfg->checkpoint.nvme ||
		    h.size > avail) {
			snprintf(why, wlen, "no room on node %u's NVMe for a copy of %s (%s): "
				 "[checkpoint] nvme %s, %s in use, %s free on the disk", ck->node,
				 h.path, fmt_size(sz, sizeof(sz), h.size),
				 fmt_size(a, sizeof(a), ck->cfg->checkpoint.nvme),
				 fmt_size(b, sizeof(b), ck->nvme_used + ck->peer.held_used),
				 fmt_size((char[32]){ 0 }, 32, avail));
			pthread_mutex_unlock(&ck->mu);
			return -ENOSPC;
		}
		ck->peer.held_used += h.size;
	} else {
		if (ck->mem_used + h.size > ck->cfg->checkpoint.memory)
			held_prune(ck, h.origin, ck->cfg->checkpoint.keep ? ck->cfg->checkpoint.keep - 1 : 0);
		if (ck->mem_used + h.size > ck->cfg->checkpoint.memory) {
			snprintf(why, wlen, "no room in node %u's memory for a copy of %s (%s): "
				 "[checkpoint] memory %s, %s in use (it has no NVMe tier)", ck->node,
				 h.path, fmt_size(sz, sizeof(sz), h.size),
				 fmt_size(a, sizeof(a), ck->cfg->checkpoint.memory),
				 fmt_size(b, sizeof(b), ck->mem_used));
			pthread_mutex_unlock(&ck->mu);
			return -ENOSPC;
		}
		ck->mem_used += h.size;
	}
	pthread_mutex_unlock(&ck->mu);

	int out = -1;
	uint8_t *buf = malloc(CK_CHUNK);
	if (!buf)
		abort();
	if (nvme) {
		snprintf(dir, sizeof(dir), "%s/peer-%u", ck->dir, h.origin);
		rc = mkdir_p(dir, 0700);
		/* a temporary name: a copy sent again replaces the held one whole */
		held_file(ck, h.origin, h.id, "data.tmp", f, sizeof(f));
		out = rc == 0 ? open(f, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
		if (out < 0 && rc == 0)
			rc = -errno;
	} else {
		out = memfd_create("seer-ckpt-peer", MFD_CLOEXEC);
		rc = out < 0 ? -errno : 0;
	}
	if (rc != 0) {
		snprintf(why, wlen, "cannot create %s: %s", nvme ? f : "a memfd", strerror(-rc));
		goto fail;
	}
	uint32_t crc = 0, want = 0;
	for (uint64_t off = 0; off < h.size; off += CK_CHUNK) {
		size_t n = (size_t)MIN((uint64_t)CK_CHUNK, h.size - off);
		rc = io_all(fd, buf, n, false);
		if (rc != 0) {
			snprintf(why, wlen, "node %u's copy of %s ended at byte %" PRIu64 " of %" PRIu64
				 ": %s", h.origin, h.path, off, h.size, strerror(-rc));
			goto fail;
		}
		crc = crc32c(crc, buf, n);
		rc = ckpt_write_all(out, buf, n, (off_t)off);
		if (rc != 0) {
			snprintf(why, wlen, "writing %s: %s", nvme ? f : "a memfd", strerror(-rc));
			goto fail;
		}
	}
	rc = io_all(fd, &want, sizeof(want), false);
	if (rc == 0 && want != crc) {
		rc = -EBADMSG;
		snprintf(why, wlen, "the copy of %s does not match its checksum (crc32c %08x, sent "
			 "%08x): not kept", h.path, crc, want);
		goto fail;
	}
	if (rc != 0) {
		snprintf(why, wlen, "reading the checksum: %s", strerror(-rc));
		goto fail;
	}
	if (nvme) {
		if (fsync(out) != 0) {
			rc = -errno;
			snprintf(why, wlen, "fsync %s: %s", f, strerror(errno));
			goto fail;
		}
		held_forget(ck, h.origin, h.id);
		char data[4200], meta[4200], *text = NULL;
		held_file(ck, h.origin, h.id, "data", data, sizeof(data));
		if (rename(f, data) != 0 || (rc = ckpt_fsync_dir(data)) != 0) {
			rc = rc ? rc : -errno;
			snprintf(why, wlen, "rename %s to %s: %s", f, data, strerror(-rc));
			goto fail;
		}
		str_copy(f, sizeof(f), data);
		held_file(ck, h.origin, h.id, "meta", meta, sizeof(meta));
		if (asprintf(&text, "seer-ckpt-peer 1\norigin %u\nid %016" PRIx64 "\nsize %" PRIu64
			     "\ncrc32c %08x\npath %s\n", h.origin, h.id, h.size, crc, h.path) < 0)
			abort();
		rc = ckpt_record_write(meta, text);
		free(text);
		if (rc != 0) {
			snprintf(why, wlen, "cannot record %s: %s", meta, strerror(-rc));
			goto fail;
		}
		close(out);
		out = -1;
	}
	free(buf);
	if (!nvme)
		held_forget(ck, h.origin, h.id);
	struct ck_held *hd = calloc(1, sizeof(*hd));
	if (!hd)
		abort();
	hd->origin = h.origin;
	hd->id = h.id;
	hd->size = h.size;
	hd->path = xstrdup(h.path);
	hd->memfd = nvme ? -1 : out;
	hd->wall = time(NULL);
	pthread_mutex_lock(&ck->mu);
	struct ck_held **pp = &ck->peer.held;
	while (*pp)
		pp = &(*pp)->next;
	*pp = hd;
	held_prune(ck, h.origin, MAX(ck->cfg->checkpoint.keep, 1));
	pthread_mutex_unlock(&ck->mu);
	log_info("copy of node %u's checkpoint %s (%s) held %s", h.origin, h.path,
		 fmt_size(sz, sizeof(sz), h.size), nvme ? f : "in memory (no NVMe tier)");
	return 0;
fail:
	free(buf);
	if (out >= 0)
		close(out);
	if (nvme && *f)
		unlink(f);
	pthread_mutex_lock(&ck->mu);
	if (nvme)
		ck->peer.held_used -= h.size;
	else
		ck->mem_used -= h.size;
	pthread_mutex_unlock(&ck->mu);
	return rc;
}

/* A held copy's record found at start (ckpt_walk of <dir>/peer-<origin>/). */
static void held_found(struct ckpt *ck, const struct ckpt_rec *r, void *arg)
{
	uint32_t origin = *(const uint32_t *)arg;
	struct ck_held *h = calloc(1, sizeof(*h));
	if (!h)
		abort();
	h->origin = origin;
	h->id = r->id;
	h->size = r->size;
	h->path = xstrdup(r->path);
	h->memfd = -1;
	h->wall = r->sb.st_mtime;
	/* oldest first, by arrival */
	struct ck_held **pp = &ck->peer.held;
	while (*pp && (*pp)->wall <= h->wall)
		pp = &(*pp)->next;
	h->next = *pp;
	*pp = h;
	ck->peer.held_used += r->size;
	log_info("copy of node %u's checkpoint %s found on NVMe at %s", origin, r->path, r->data);
}

void ckpt_peer_recover(struct ckpt *ck)
{
	DIR *d = opendir(ck->dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		uint32_t origin;
		char end;
		if (sscanf(de->d_name, "peer-%" SCNu32 "%c", &origin, &end) != 1)
			continue;
		char sub[4200];
		snprintf(sub, sizeof(sub), "%s/%s", ck->dir, de->d_name);
		ckpt_walk(ck, sub, "seer-ckpt-peer", "held copy", held_found, &origin);
	}
	closedir(d);
	/* retention per origin (held_prune frees: start over after each) */
	uint64_t keep = MAX(ck->cfg->checkpoint.keep, 1);
	for (bool again = true; again;) {
		again = false;
		for (struct ck_held *h = ck->peer.held; h && !again; h = h->next) {
			size_t n = 0;
			for (struct ck_held *g = ck->peer.held; g; g = g->next)
				n += g->origin == h->origin;
			if (n > keep) {
				held_prune(ck, h->origin, keep);
				again = true;
			}
		}
	}
}

int ckpt_peer_open_held(struct ckpt *ck, const char *path, struct ck_item *hit)
{
	struct ck_held *hb = NULL;
	for (struct ck_held *h = ck->peer.held; h; h = h->next)
		if (strncmp(h->path, path, SEER_CKPT_PATH_MAX) == 0 && !(hb && hb->wall > h->wall))
			hb = h;
	struct stat sb;
	/* as for our own copies: a PFS file written after the copy is newer */
	if (!hb || (stat(hb->path, &sb) == 0 && sb.st_mtime > hb->wall + 1))
		return -1;
	char f[4200];
	if (hb->memfd >= 0)
		snprintf(f, sizeof(f), "/proc/self/fd/%d", hb->memfd);
	else
		held_file(ck, hb->origin, hb->id, "data", f, sizeof(f));
	int fd = open(f, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		hit->id = hb->id;
		hit->size = hb->size;
		hit->path = hb->path;
	}
	return fd;
}

void ckpt_peer_list_json(struct ckpt *ck, void *json_root)
{
	json_t *root = json_root, *held = json_array();
	if (!held)
		abort();
	uint64_t held_mem = 0;
	for (struct ck_held *h = ck->peer.held; h; h = h->next) {
		json_t *o = json_object();
		if (!o)
			abort();
		char id[32];
		snprintf(id, sizeof(id), "%016" PRIx64, h->id);
		json_object_set_new(o, "origin", json_integer(h->origin));
		json_object_set_new(o, "id", json_string(id));
		json_object_set_new(o, "path", json_string(h->path));
		json_object_set_new(o, "bytes", json_integer((json_int_t)h->size));
		json_object_set_new(o, "where", json_string(h->memfd >= 0 ? "memory" : "nvme"));
		json_array_append_new(held, o);
		if (h->memfd >= 0)
			held_mem += h->size;
	}
	json_object_set_new(root, "held", held);
	json_object_set_new(root, "held_nvme", json_integer((json_int_t)ck->peer.held_used));
	json_object_set_new(root, "held_memory", json_integer((json_int_t)held_mem));
	json_object_set_new(root, "peer", *ck->peer.addr ? json_integer(ck->peer.node) : json_null());
}

void ckpt_peer_destroy(struct ckpt *ck)
{
	if (ck->peer.started_tx)
		pthread_join(ck->peer.th_tx, NULL);
	if (ck->peer.started_rx)
		pthread_join(ck->peer.th_rx, NULL);
	if (ck->peer.lfd >= 0)
		close(ck->peer.lfd);
	while (ck->peer.held) {
		/* NVMe copies stay for a later seerd; memory copies go */
		struct ck_held *h = ck->peer.held;
		ck->peer.held = h->next;
		if (h->memfd >= 0)
			close(h->memfd);
		free(h->path);
		free(h);
	}
}

/* The receiver: one connection at a time from node - 1. */
static void *peer_rx_main(void *arg)
{
	struct ckpt *ck = arg;
	for (;;) {
		pthread_mutex_lock(&ck->mu);
		bool stop = ck->stop;
		pthread_mutex_unlock(&ck->mu);
		if (stop)
			break;
		struct pollfd pf = { .fd = ck->peer.lfd, .events = POLLIN };
		if (poll(&pf, 1, 200) <= 0)
			continue;
		int fd = accept4(ck->peer.lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		sock_timeouts(fd, peer_timeout_s(ck));
		struct ck_peer_ack ack = { 0 };
		ack.status = held_receive(ck, fd, ack.msg, sizeof(ack.msg));
		if (ack.status != 0)
			log_warn("checkpoint copy from node %u not kept: %s",
				 (ck->node + ck->nnodes - 1) % ck->nnodes, ack.msg);
		int rc UNUSED = io_all(fd, &ack, sizeof(ack), true);
		if (ack.status != 0) {
			/* refused early: read what the sender still sends, so that it
			 * reads the answer instead of a reset connection */
			shutdown(fd, SHUT_WR);
			char sink[65536];
			while (recv(fd, sink, sizeof(sink), 0) > 0)
				;
		}
		close(fd);
	}
	return NULL;
}

static int peer_connect(const struct ckpt *ck, char *why, size_t wlen)
{
	char host[256];
	str_copy(host, sizeof(host), ck->peer.addr);
	char *port = strrchr(host, ' ');
	if (!port)
		return -EINVAL;
	*port++ = '\0';
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai = NULL;
	int g = getaddrinfo(host, port, &hints, &ai);
	if (g != 0) {
		snprintf(why, wlen, "node %u (%s): cannot resolve %s: %s", ck->peer.node,
			 ck->peer.addr, host, gai_strerror(g));
		return -EHOSTUNREACH;
	}
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int rc = fd < 0 ? -errno : 0;
	if (rc == 0) {
		sock_timeouts(fd, peer_timeout_s(ck));
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
			rc = -errno;
	}
	freeaddrinfo(ai);
	if (rc != 0) {
		snprintf(why, wlen, "node %u's seerd (%s) does not answer: %s", ck->peer.node,
			 ck->peer.addr, strerror(-rc));
		if (fd >= 0)
			close(fd);
		return rc;
	}
	return fd;
}

/* Send it to the peer node and wait for its answer: 0 once the peer has a
 * complete, fsync'd copy whose checksum it checked; -errno with why. */
static int peer_send(struct ckpt *ck, struct ck_item *it, char *why, size_t wlen)
{
	int fd = peer_connect(ck, why, wlen);
	if (fd < 0)
		return fd;
	int in = -1, rc = 0;
	uint8_t *buf = NULL;
	char src[4200] = "";
	if (!it->mem) {
		ckpt_nvme_file(ck, it->id, "data", src, sizeof(src));
		in = open(src, O_RDONLY | O_CLOEXEC);
		if (in < 0) {
			rc = -errno;
			snprintf(why, wlen, "cannot read its NVMe copy %s: %s", src, strerror(errno));
			goto out;
		}
		buf = malloc(CK_CHUNK);
		if (!buf)
			abort();
	}
	struct ck_peer_hdr h = { .magic = CK_PEER_MAGIC, .origin = ck->node, .id = it->id,
				 .size = it->size };
	memcpy(h.secret, ck->peer.dest_secret, sizeof(h.secret));
	str_copy(h.path, sizeof(h.path), it->path);
	rc = io_all(fd, &h, sizeof(h), true);
	uint32_t crc = 0;
	for (uint64_t off = 0; rc == 0 && off < it->size; off += CK_CHUNK) {
		size_t n = (size_t)MIN((uint64_t)CK_CHUNK, it->size - off);
		const uint8_t *p = it->mem ? it->mem + off : buf;
		if (!it->mem && pread(in, buf, n, (off_t)off) != (ssize_t)n) {
			rc = -EIO;
			snprintf(why, wlen, "reading its NVMe copy %s: short read", src);
			goto out;
		}
		crc = crc32c(crc, p, n);
		rc = io_all(fd, (void *)p, n, true);
		pthread_mutex_lock(&ck->mu);
		if (ck->stop)
			rc = -ECANCELED;
		pthread_mutex_unlock(&ck->mu);
	}
	if (rc == 0)
		rc = io_all(fd, &crc, sizeof(crc), true);
	struct ck_peer_ack ack = { 0 };
	/* after a failed send too: the peer may have refused (and said why) */
	int rc2 = rc == -ECANCELED ? rc : io_all(fd, &ack, sizeof(ack), false);
	if (rc2 == 0 && ack.status != 0)
		rc = 0;
	else if (rc == 0)
		rc = rc2;
	if (rc != 0) {
		snprintf(why, wlen, "sending to node %u's seerd (%s): %s", ck->peer.node,
			 ck->peer.addr, strerror(-rc));
	} else if (ack.status != 0) {
		ack.msg[sizeof(ack.msg) - 1] = '\0';
		rc = ack.status < 0 ? ack.status : -EIO;
		snprintf(why, wlen, "node %u refused the copy: %s", ck->peer.node, ack.msg);
	}
out:
	close(fd);
	if (in >= 0)
		close(in);
	free(buf);
	return rc;
}

/* The next copy to send: a pending one, or a failed one whose retry is
 * due; *next_retry: the earliest retry not yet due (0: none). */
static struct ck_item *next_peer(struct ckpt *ck, double t, double *next_retry)
{
	*next_retry = 0;
	for (struct ck_item *it = ck->items; it; it = it->next) {
		if (!it->committed || it->peer_busy || it->st[SEER_CKL_LOCAL] == SEER_CKS_PENDING)
			continue;
		if (it->st[SEER_CKL_PEER] == SEER_CKS_PENDING)
			return it;
		if (it->st[SEER_CKL_PEER] == SEER_CKS_FAILED && it->peer_retry) {
			if (t >= it->peer_retry_at)
				return it;
			if (!*next_retry || it->peer_retry_at < *next_retry)
				*next_retry = it->peer_retry_at;
		}
	}
	return NULL;
}

/* Waits on ck->cv until `until` (now_s() clock; 0: until signalled). */
static void tx_wait(struct ckpt *ck, double until)
{
	if (!until) {
		pthread_cond_wait(&ck->cv, &ck->mu);
		return;
	}
	double w = MAX(until - now_s(), 0.0) + 0.001;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)w;
	ts.tv_nsec += (long)((w - (double)(time_t)w) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&ck->cv, &ck->mu, &ts);
}

/* The sender: each committed checkpoint to node + 1, one at a time; a
 * failed copy is tried again after CK_PEER_RETRY_MIN_S, doubling up to
 * CK_RETRY_S, while seerd has its bytes (NVMe or memory). */
static void *peer_tx_main(void *arg)
{
	struct ckpt *ck = arg;
	pthread_mutex_lock(&ck->mu);
	while (!ck->stop) {
		double next_retry;
		struct ck_item *it = next_peer(ck, now_s(), &next_retry);
		if (!it) {
			tx_wait(ck, next_retry);
			continue;
		}
		if (!it->mem && !it->on_nvme) {
			/* retention removed the NVMe copy, or the memory went after the drain */
			bool retry = it->st[SEER_CKL_PEER] == SEER_CKS_FAILED;
			it->st[SEER_CKL_PEER] = SEER_CKS_FAILED;
			it->peer_retry = false;
			char last[SEER_ERRMSG_MAX];
			str_copy(last, sizeof(last), it->peer_why);
			snprintf(it->peer_why, sizeof(it->peer_why), "no copy of %s is left to send to "
				 "node %u%s%s", it->path, ck->peer.node, retry ? " (retention removed it "
				 "while retrying; the last try: " : "", retry ? last : "");
			if (retry)
				str_copy(it->peer_why + strlen(it->peer_why),
					 sizeof(it->peer_why) - strlen(it->peer_why), ")");
			log_warn("checkpoint %s: no peer copy: %s", it->path, it->peer_why);
			ckpt_wake_svc(ck);
			continue;
		}
		it->peer_busy = true;
		uint32_t tries = it->peer_fails + 1;
		pthread_mutex_unlock(&ck->mu);
		char why[SEER_ERRMSG_MAX] = "", sz[32];
		double t0 = now_s();
		int rc = peer_send(ck, it, why, sizeof(why));
		double dt = now_s() - t0;
		if (rc == 0) {
			/* recorded before "done": a restarted seerd does not send it again */
			pthread_mutex_lock(&ck->mu);
			it->rec_peer = ck->peer.node;
			bool nvme = it->on_nvme;
			pthread_mutex_unlock(&ck->mu);
			if (nvme && ckpt_meta_write(ck, it) != 0)
				log_warn("checkpoint %s: cannot record its peer copy on NVMe (a restarted "
					 "seerd sends it again)", it->path);
		}
		pthread_mutex_lock(&ck->mu);
		it->peer_busy = false;
		if (rc == 0) {
			it->st[SEER_CKL_PEER] = SEER_CKS_DONE;
			it->peer_retry = false;
			it->peer_why[0] = '\0';
			log_info("checkpoint %s (%s) copied to node %u in %.2f s%s", it->path,
				 fmt_size(sz, sizeof(sz), it->size), ck->peer.node, dt,
				 tries > 1 ? " (after failed tries)" : "");
		} else if (rc != -ECANCELED) {
			it->st[SEER_CKL_PEER] = SEER_CKS_FAILED;
			it->peer_fails = tries;
			double back = MIN(CK_PEER_RETRY_MIN_S * (double)(1u << MIN(tries - 1, 10u)),
					  CK_RETRY_S);
			it->peer_retry = true;
			it->peer_retry_at = now_s() + back;
			snprintf(it->peer_why, sizeof(it->peer_why), "%s; seerd tries again in %.0f s "
				 "(failed %u time(s)); the local and PFS copies go on", why, back, tries);
			if (tries == 1 || tries % 30 == 0)
				log_warn("checkpoint %s: no peer copy yet: %s", it->path, it->peer_why);
		} else {
			break;
		}
		if (!it->on_nvme && it->mem && !ckpt_item_held(it) && it->st[SEER_CKL_PFS] == SEER_CKS_DONE)
			ckpt_item_free_mem(ck, it);
		ckpt_prune(ck, 0);
		pthread_cond_broadcast(&ck->cv);
		pthread_cond_broadcast(&ck->idle);
		ckpt_wake_svc(ck);
	}
	pthread_mutex_unlock(&ck->mu);
	return NULL;
}

int ckpt_peer_listen(struct ckpt *ck, uint32_t nnodes, char *addr, size_t len)
{
	addr[0] = '\0';
	if (!ck || !ck->cfg->checkpoint.peers || nnodes < 2)
		return 0;
	ck->nnodes = nnodes; /* before the receiver starts: it checks the origin */
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	socklen_t sl = sizeof(sa);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 4) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl) != 0 ||
	    getrandom(ck->peer.secret, sizeof(ck->peer.secret), 0) != (ssize_t)sizeof(ck->peer.secret)) {
		log_warn("checkpoints: cannot listen for peer copies (%s): this node keeps no copy "
			 "of another node's checkpoints", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -EIO;
	}
	char host[200];
	if (gethostname(host, sizeof(host)) != 0)
		str_copy(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = '\0';
	ck->peer.lfd = fd;
	if (pthread_create(&ck->peer.th_rx, NULL, peer_rx_main, ck) != 0) {
		log_warn("checkpoints: cannot start the peer receiver thread");
		close(fd);
		ck->peer.lfd = -1;
		return -EAGAIN;
	}
	ck->peer.started_rx = true;
	/* "host port" then the secret, hex */
	int n = snprintf(addr, len, "%s %u ", host, (unsigned)ntohs(sa.sin_port));
	for (size_t i = 0; i < sizeof(ck->peer.secret) && n + 3 < (int)len; i++)
		n += snprintf(addr + n, len - (size_t)n, "%02x", ck->peer.secret[i]);
	return 0;
}

void ckpt_peer_start(struct ckpt *ck, uint32_t node, uint32_t nnodes, const char *addrs,
		    size_t stride)
{
	if (!ck || ck->node != node || (ck->peer.lfd >= 0 && ck->nnodes != nnodes))
		return;
	pthread_mutex_lock(&ck->mu);
	ck->peer.node = (node + 1) % nnodes;
	const char *a = addrs + stride * ck->peer.node;
	char host[256] = "", hex[64] = "";
	unsigned port = 0;
	if (ck->cfg->checkpoint.peers && nnodes > 1 && strnlen(a, stride) < stride &&
	    sscanf(a, "%255s %u %63s", host, &port, hex) == 3 && strlen(hex) == 32) {
		for (size_t i = 0; i < sizeof(ck->peer.dest_secret); i++)
			sscanf(hex + 2 * i, "%2hhx", &ck->peer.dest_secret[i]);
		snprintf(ck->peer.addr, sizeof(ck->peer.addr), "%s %u", host, port);
	}
	pthread_mutex_unlock(&ck->mu);
	if (!ck->cfg->checkpoint.peers || nnodes < 2)
		return;
	if (!*ck->peer.addr) {
		log_warn("checkpoints: node %u takes no peer copies: checkpoints have no \"peer\" "
			 "level", ck->peer.node);
		return;
	}
	if (pthread_create(&ck->peer.th_tx, NULL, peer_tx_main, ck) != 0) {
		log_warn("checkpoints: cannot start the peer sender thread: no \"peer\" level");
		pthread_mutex_lock(&ck->mu);
		ck->peer.addr[0] = '\0';
		pthread_mutex_unlock(&ck->mu);
		return;
	}
	ck->peer.started_tx = true;
	/* copies found on NVMe at start: sent again unless their record says
	 * this peer confirmed them (seerd stopped before the peer answered) */
	unsigned again = 0, held = 0;
	pthread_mutex_lock(&ck->mu);
	for (struct ck_item *it = ck->items; it; it = it->next) {
		if (!it->recovered || !it->on_nvme || it->st[SEER_CKL_PEER] != SEER_CKS_OFF)
			continue;
		bool done = it->rec_peer == (int64_t)ck->peer.node;
		it->st[SEER_CKL_PEER] = done ? SEER_CKS_DONE : SEER_CKS_PENDING;
		again += !done;
		held += done;
	}
	pthread_cond_broadcast(&ck->cv);
	pthread_mutex_unlock(&ck->mu);
	log_info("checkpoints: a copy of each goes to node %u (%s)", ck->peer.node, ck->peer.addr);
	if (again || held)
		log_info("checkpoints: of the copies found on NVMe, %u are held by node %u, %u not "
			 "confirmed by it: sending them again", held, ck->peer.node, again);
}
