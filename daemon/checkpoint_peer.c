/* The checkpoint stage's peer level ([checkpoint] peers = 1, several
 * nodes; docs/checkpoint.md "Peer copies"): each committed checkpoint of
 * this node goes to node (node + 1) % nodes; this node receives the copies
 * of node - 1 and keeps them in checkpoint_held.c's store.
 *
 * Owns: the two libfabric links (src/net/net_link.h) and the two threads
 * (struct ck_peers in checkpoint_int.h, with the wire format they speak),
 * the address exchange at start and this node's receiver id
 * (<dir>/peer-id). The items' peer state (st[SEER_CKL_PEER], peer_why,
 * peer_busy, the retries) is written here, except where a checkpoint
 * begins, is committed (checkpoint_svc.c) or is recovered at start
 * (checkpoint.c), which set its first state.
 *
 * Threads: the sender (peer_tx_main: one copy at a time, the bytes read
 * from NVMe or memory with peer_busy set; it alone uses the tx link) and
 * the receiver (peer_rx_main: one copy at a time, handed to
 * ckpt_held_receive; it alone uses the rx link); both take ck->mu only
 * between copies and for the budgets. ckpt_peer_listen / ckpt_peer_start
 * run on the dispatcher at start; the others on the caller named in
 * checkpoint_int.h.
 *
 * Failure: a peer that does not answer within [net] peer_timeout_ms, that
 * refuses (secret, origin, no room) or whose copy fails its crc32c makes
 * the copy "failed" with why (wait("peer") returns it) and it is sent again
 * after a backoff (1 s doubling to 10 s) while this node has its bytes and
 * the peer has not confirmed a newer checkpoint of its path; the local and
 * PFS levels go on. The peer's confirmation is recorded in the
 * copy's NVMe record, and a copy found on NVMe at start without it is sent
 * again. An answer the receiver cannot deliver is logged: the sender sends
 * the copy again. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../src/fmt/crc32c.h"
#include "../src/net/net_link.h"
#include "../src/util/util.h"
#include "checkpoint_int.h"

/* messages (why, paths in them) are cut to their fixed buffers on purpose */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define CK_PEER_RETRY_MIN_S 1.0 /* the first retry of a failed copy; doubles to CK_RETRY_S */

void ckpt_peer_list_json(struct ckpt *ck, void *json_root)
{
	json_object_set_new(json_root, "peer", *ck->peer.addr ? json_integer(ck->peer.node) : json_null());
}

void ckpt_peer_destroy(struct ckpt *ck)
{
	if (ck->peer.started_tx)
		pthread_join(ck->peer.th_tx, NULL);
	if (ck->peer.started_rx)
		pthread_join(ck->peer.th_rx, NULL);
	net_link_close(ck->peer.tx);
	net_link_close(ck->peer.rx);
}

/* The receiver: node - 1's copies, one at a time; anything but a HDR
 * between copies (the rest of a refused or abandoned copy) is dropped. */
static void *peer_rx_main(void *arg)
{
	struct ckpt *ck = arg;
	struct ck_msg m = { 0 };
	uint32_t from = (ck->node + ck->nnodes - 1) % ck->nnodes;
	for (;;) {
		pthread_mutex_lock(&ck->mu);
		bool stop = ck->stop;
		pthread_mutex_unlock(&ck->mu);
		if (stop)
			break;
		if (!m.have) {
			int rc = net_link_recv(ck->peer.rx, &m.b, &m.n, &m.tag, 0.2);
			if (rc != 0) {
				if (rc != -ETIMEDOUT)
					log_debug("checkpoints: peer receive: %s", strerror(-rc));
				continue;
			}
			if (CKT_TYPE(m.tag) != CKT_HDR)
				continue;
		}
		uint32_t seq = CKT_SEQ(m.tag);
		struct ck_peer_ack ack = { 0 };
		memcpy(ack.disk, ck->peer.disk, sizeof(ack.disk));
		uint64_t src = 0;
		bool answer = false;
		ack.status = ckpt_held_receive(ck, &m, &src, &answer, ack.msg, sizeof(ack.msg));
		if (ack.status == -ECANCELED)
			break;
		if (ack.status != 0)
			log_warn("checkpoint copy from node %u not kept: %s", from, ack.msg);
		if (!answer)
			continue;
		/* the answer goes from the send buffer: the receive buffer may hold
		 * the next copy's HDR (m.have) */
		int rc = net_link_send_ready(ck->peer.rx, ckpt_peer_timeout_s(ck));
		if (rc == 0) {
			memcpy(net_link_send_buf(ck->peer.rx), &ack, sizeof(ack));
			rc = net_link_send(ck->peer.rx, src, CKT(CKT_ACK, seq, 0), sizeof(ack),
					   ckpt_peer_timeout_s(ck));
		}
		if (rc != 0)
			log_info("checkpoints: the answer to node %u's copy was not delivered (%s): "
				 "it sends the copy again", from, strerror(-rc));
	}
	return NULL;
}

/* The answer to copy `seq` (waiting until `end`, now_s() clock; 0: only
 * what arrived): 1 with *ack, 0 none yet, -errno. */
static int tx_answer(struct ckpt *ck, uint32_t seq, double end, struct ck_peer_ack *ack)
{
	for (;;) {
		const void *b;
		size_t n;
		uint64_t tag;
		int rc = net_link_recv(ck->peer.tx, &b, &n, &tag, MAX(end - now_s(), 0.0));
		if (rc == -ETIMEDOUT)
			return 0;
		if (rc != 0)
			return rc;
		if (CKT_TYPE(tag) == CKT_ACK && CKT_SEQ(tag) == seq && n == sizeof(*ack)) {
			memcpy(ack, b, sizeof(*ack));
			ack->msg[sizeof(ack->msg) - 1] = '\0';
			return 1;
		}
		/* an answer to an earlier try: dropped */
	}
}

/* Send it to the peer node and wait for its answer: 0 once the peer has a
 * complete, fsync'd copy whose checksum it checked (its receiver id in
 * disk); -errno with why. */
static int peer_send(struct ckpt *ck, struct ck_item *it, uint8_t disk[16], char *why,
		     size_t wlen)
{
	struct net_link *l = ck->peer.tx;
	uint8_t *sb = net_link_send_buf(l);
	double tmo = ckpt_peer_timeout_s(ck);
	uint32_t seq = ++ck->peer.seq & 0x0fffffffu;
	int in = -1, rc = 0;
	char src[4200] = "";
	const char *step = "the header";
	if (!it->mem) {
		ckpt_store_file(ck, it->id, "data", src, sizeof(src));
		in = open(src, O_RDONLY | O_CLOEXEC);
		if (in < 0) {
			rc = -errno;
			snprintf(why, wlen, "cannot read its NVMe copy %s: %s", src, strerror(errno));
			return rc;
		}
	}
	struct ck_peer_hdr h = { .magic = CK_PEER_MAGIC, .origin = ck->node, .id = it->id,
				 .size = it->size };
	memcpy(h.secret, ck->peer.dest_secret, sizeof(h.secret));
	str_copy(h.path, sizeof(h.path), it->path);
	uint32_t alen = (uint32_t)ck->peer.tx_addr_len;
	/* an earlier try's send the provider could not cancel owns the buffer */
	step = "an earlier try's bytes, still in flight";
	rc = net_link_send_ready(l, tmo);
	if (rc != 0)
		goto fail;
	step = "the header";
	memcpy(sb, &h, sizeof(h));
	memcpy(sb + sizeof(h), &alen, sizeof(alen));
	memcpy(sb + sizeof(h) + sizeof(alen), ck->peer.tx_addr, alen);
	rc = net_link_send(l, ck->peer.to, CKT(CKT_HDR, seq, 0), sizeof(h) + sizeof(alen) + alen,
			   tmo);
	uint32_t crc = 0, idx = 0;
	struct ck_peer_ack ack = { 0 };
	int got = 0;
	for (uint64_t off = 0; rc == 0 && !got && off < it->size; off += CK_PEER_MSG, idx++) {
		size_t n = (size_t)MIN((uint64_t)CK_PEER_MSG, it->size - off);
		if (it->mem) {
			memcpy(sb, it->mem + off, n);
		} else if (pread(in, sb, n, (off_t)off) != (ssize_t)n) {
			rc = -EIO;
			snprintf(why, wlen, "reading its NVMe copy %s: short read", src);
			goto out;
		}
		crc = crc32c(crc, sb, n);
		step = "the bytes";
		rc = net_link_send(l, ck->peer.to, CKT(CKT_DATA, seq, idx), n, tmo);
		pthread_mutex_lock(&ck->mu);
		if (ck->stop)
			rc = -ECANCELED;
		pthread_mutex_unlock(&ck->mu);
		/* a refusal comes early: the rest is not sent */
		if (rc == 0)
			got = tx_answer(ck, seq, 0, &ack);
	}
	if (rc == 0 && !got) {
		step = "the checksum";
		memcpy(sb, &crc, sizeof(crc));
		rc = net_link_send(l, ck->peer.to, CKT(CKT_END, seq, 0), sizeof(crc), tmo);
	}
	if (rc == 0 && !got) {
		/* the peer fsyncs the copy before it answers: it is written back
		 * as it comes, but a slow disk may still hold some of it */
		step = "its answer (received, checked, fsync'd)";
		got = tx_answer(ck, seq, now_s() + tmo + (double)it->size / CK_PEER_FSYNC_RATE, &ack);
	}
	if (rc == 0 && got == 0)
		rc = -ETIMEDOUT;
	else if (rc == 0 && got < 0)
		rc = got;
fail:
	if (rc != 0 && rc != -ECANCELED) {
		snprintf(why, wlen, "node %u's seerd (libfabric %s), %s: %s", ck->peer.node,
			 ck->peer.addr, step, strerror(-rc));
	} else if (rc == 0 && ack.status != 0) {
		rc = ack.status < 0 ? ack.status : -EIO;
		snprintf(why, wlen, "node %u refused the copy: %s", ck->peer.node, ack.msg);
	}
	memcpy(disk, ack.disk, sizeof(ack.disk));
out:
	if (in >= 0)
		close(in);
	return rc;
}

/* A failed try's why without its "; seerd tries again ..." (the copy is no
 * longer retried: a waiter that waits through retries stops on it). */
static void last_try(char *why)
{
	char *cut = strstr(why, "; seerd tries again");
	if (cut)
		*cut = '\0';
}

/* Whether the peer confirmed a newer committed checkpoint of its path: its
 * failed copy is then not sent again (the peer would serve the newer one
 * anyway); said in its why and the log. Under mu. */
static bool peer_superseded(struct ckpt *ck, struct ck_item *it)
{
	for (const struct ck_item *o = ck->items; o; o = o->next) {
		if (!o->committed || o->id <= it->id || o->st[SEER_CKL_PEER] != SEER_CKS_DONE ||
		    strcmp(o->path, it->path) != 0)
			continue;
		it->peer_retry = false;
		char last[SEER_ERRMSG_MAX];
		str_copy(last, sizeof(last), it->peer_why);
		last_try(last);
		snprintf(it->peer_why, sizeof(it->peer_why), "not sent again: node %u holds a newer "
			 "checkpoint of %s (%016" PRIx64 "); the last try: %s", ck->peer.node,
			 it->path, o->id, last);
		log_info("checkpoint %s (%016" PRIx64 "): its copy to node %u is not sent again: "
			 "that node confirmed a newer checkpoint of the path (%016" PRIx64 ")",
			 it->path, it->id, ck->peer.node, o->id);
		ckpt_svc_wake(ck);
		return true;
	}
	return false;
}

/* The next copy to send: a pending one, or a failed one whose retry is
 * due, unless superseded; *next_retry: the earliest retry not yet due (0: none). */
static struct ck_item *next_peer(struct ckpt *ck, double t, double *next_retry)
{
	*next_retry = 0;
	for (struct ck_item *it = ck->items; it; it = it->next) {
		if (!it->committed || it->peer_busy || it->st[SEER_CKL_LOCAL] == SEER_CKS_PENDING)
			continue;
		if (it->st[SEER_CKL_PEER] == SEER_CKS_PENDING)
			return it;
		if (it->st[SEER_CKL_PEER] == SEER_CKS_FAILED && it->peer_retry &&
		    peer_superseded(ck, it))
			continue;
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
	ckpt_cond_wait_s(&ck->cv, &ck->mu, MAX(until - now_s(), 0.0) + 0.001);
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
			last_try(last);
			snprintf(it->peer_why, sizeof(it->peer_why), "no copy of %s is left to send to "
				 "node %u%s%s", it->path, ck->peer.node, retry ? " (retention removed it "
				 "while retrying; the last try: " : "", retry ? last : "");
			if (retry)
				str_copy(it->peer_why + strlen(it->peer_why),
					 sizeof(it->peer_why) - strlen(it->peer_why), ")");
			log_warn("checkpoint %s: no peer copy: %s", it->path, it->peer_why);
			ckpt_svc_wake(ck);
			continue;
		}
		it->peer_busy = true;
		uint32_t tries = it->peer_fails + 1;
		pthread_mutex_unlock(&ck->mu);
		char why[SEER_ERRMSG_MAX] = "", sz[32];
		double t0 = now_s();
		uint8_t disk[16];
		int rc = peer_send(ck, it, disk, why, sizeof(why));
		double dt = now_s() - t0;
		if (rc == 0) {
			/* recorded before "done": a restarted seerd does not send it again */
			pthread_mutex_lock(&ck->mu);
			it->rec_peer = ck->peer.node;
			memcpy(it->rec_peer_disk, disk, sizeof(it->rec_peer_disk));
			bool nvme = it->on_nvme;
			pthread_mutex_unlock(&ck->mu);
			if (nvme && ckpt_store_meta_write(ck, it) != 0)
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
				 "(%u failed); the local and PFS copies go on", why, back, tries);
			if (tries == 1 || tries % 30 == 0)
				log_warn("checkpoint %s: no peer copy yet: %s", it->path, it->peer_why);
		} else {
			break;
		}
		if (!it->on_nvme && it->mem && !ckpt_store_in_use(it) && it->st[SEER_CKL_PFS] == SEER_CKS_DONE)
			ckpt_store_free_mem(ck, it);
		ckpt_svc_changed(ck);
	}
	pthread_mutex_unlock(&ck->mu);
	return NULL;
}

static void hex_put(char *out, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", p[i]);
	out[2 * n] = '\0';
}

static size_t hex_get(uint8_t *out, size_t cap, const char *hex)
{
	size_t n = strlen(hex) / 2;
	if (n > cap || strlen(hex) % 2)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (sscanf(hex + 2 * i, "%2hhx", &out[i]) != 1)
			return 0;
	return n;
}

/* This node's receiver id into ck->peer.disk: <dir>/peer-id, made once
 * (random, written atomically), so that a node replaced by one with an
 * empty disk announces another; without NVMe a new one per seerd (its held
 * copies die with it). 0, or -errno with err. */
static int disk_id(struct ckpt *ck, char *err, size_t elen)
{
	char f[4200], text[64] = "";
	if (*ck->dir) {
		snprintf(f, sizeof(f), "%s/peer-id", ck->dir);
		FILE *fp = fopen(f, "re");
		if (fp) {
			if (!fgets(text, sizeof(text), fp))
				text[0] = '\0';
			fclose(fp);
			text[strcspn(text, "\n")] = '\0';
			if (hex_get(ck->peer.disk, sizeof(ck->peer.disk), text) ==
			    sizeof(ck->peer.disk))
				return 0;
			log_warn("checkpoints: %s is not a receiver id (32 hex digits): a new one "
				 "is made; node - 1 sends its copies again", f);
		}
	}
	if (getrandom(ck->peer.disk, sizeof(ck->peer.disk), 0) != (ssize_t)sizeof(ck->peer.disk)) {
		snprintf(err, elen, "getrandom: %s", strerror(errno));
		return -EIO;
	}
	if (!*ck->dir)
		return 0;
	hex_put(text, ck->peer.disk, sizeof(ck->peer.disk));
	str_copy(text + strlen(text), sizeof(text) - strlen(text), "\n");
	int rc = mkdir_p(ck->dir, 0700);
	if (rc == 0)
		rc = ckpt_store_fsync_dir(ck->dir);
	if (rc == 0)
		rc = ckpt_store_record_write(f, text);
	if (rc != 0)
		snprintf(err, elen, "cannot write the receiver id %s: %s (check [cache] nvme_dir)",
			 f, strerror(-rc));
	return rc;
}

int ckpt_peer_listen(struct ckpt *ck, uint32_t nnodes, char *addr, size_t len)
{
	addr[0] = '\0';
	if (!ck || !ck->cfg->checkpoint.peers || nnodes < 2)
		return 0;
	ck->nnodes = nnodes; /* before the receiver starts: it checks the origin */
	char err[SEER_ERRMSG_MAX] = "";
	const char *prov = ck->cfg->net.provider;
	/* two links: the receiver's (node - 1's copies) and the sender's
	 * (its address goes in each HDR, for the answer) */
	ck->peer.rx = net_link_open(prov, 4096, CK_PEER_MSG, err, sizeof(err));
	if (ck->peer.rx)
		ck->peer.tx = net_link_open(prov, CK_PEER_MSG, 4096, err, sizeof(err));
	uint8_t a[CK_PEER_ADDR_MAX];
	size_t alen = 0;
	int rc = ck->peer.tx ? net_link_addr(ck->peer.rx, a, sizeof(a), &alen) : -EIO;
	if (rc == 0)
		rc = net_link_addr(ck->peer.tx, ck->peer.tx_addr, sizeof(ck->peer.tx_addr),
				   &ck->peer.tx_addr_len);
	if (rc == 0 && getrandom(ck->peer.secret, sizeof(ck->peer.secret), 0) !=
			       (ssize_t)sizeof(ck->peer.secret))
		rc = -errno;
	if (rc == 0)
		rc = disk_id(ck, err, sizeof(err));
	if (rc == 0 && pthread_create(&ck->peer.th_rx, NULL, peer_rx_main, ck) != 0)
		rc = -EAGAIN;
	if (rc != 0) {
		log_warn("checkpoints: no peer copies: %s", err[0] ? err : rc == -ENOSPC
			 ? "the provider's address is too long" : strerror(-rc));
		net_link_close(ck->peer.tx);
		net_link_close(ck->peer.rx);
		ck->peer.tx = ck->peer.rx = NULL;
		return rc;
	}
	ck->peer.started_rx = true;
	uint32_t r;
	if (getrandom(&r, sizeof(r), 0) == (ssize_t)sizeof(r))
		ck->peer.seq = r; /* a new seerd's copies never look like an old one's */
	/* the receiver's address, then the secret and its id, hex */
	char ah[2 * CK_PEER_ADDR_MAX + 1], sh[33], dh[33];
	hex_put(ah, a, alen);
	hex_put(sh, ck->peer.secret, sizeof(ck->peer.secret));
	hex_put(dh, ck->peer.disk, sizeof(ck->peer.disk));
	if (snprintf(addr, len, "%s %s %s", ah, sh, dh) >= (int)len)
		addr[0] = '\0';
	return 0;
}

void ckpt_peer_start(struct ckpt *ck, uint32_t node, uint32_t nnodes, const char *addrs,
		     size_t stride)
{
	if (!ck || ck->node != node || (ck->peer.rx && ck->nnodes != nnodes))
		return;
	if (!ck->cfg->checkpoint.peers || nnodes < 2)
		return;
	uint32_t to = (node + 1) % nnodes;
	const char *a = addrs + stride * to;
	char ah[2 * CK_PEER_ADDR_MAX + 2] = "", sh[64] = "", dh[64] = "", err[SEER_ERRMSG_MAX] = "";
	uint8_t addr[CK_PEER_ADDR_MAX];
	size_t alen = 0;
	bool ok = ck->peer.tx && strnlen(a, stride) < stride &&
		  sscanf(a, "%201s %63s %63s", ah, sh, dh) == 3 && strlen(sh) == 32 &&
		  (alen = hex_get(addr, sizeof(addr), ah)) > 0 &&
		  hex_get(ck->peer.dest_secret, sizeof(ck->peer.dest_secret), sh) == 16 &&
		  hex_get(ck->peer.dest_disk, sizeof(ck->peer.dest_disk), dh) == 16;
	if (ok && net_link_peer(ck->peer.tx, addr, alen, &ck->peer.to, err, sizeof(err)) != 0) {
		log_warn("checkpoints: no peer copies to node %u: %s", to, err);
		ok = false;
	}
	pthread_mutex_lock(&ck->mu);
	ck->peer.node = to;
	if (ok)
		str_copy(ck->peer.addr, sizeof(ck->peer.addr), net_link_provider(ck->peer.tx));
	pthread_mutex_unlock(&ck->mu);
	if (!ok) {
		if (ck->peer.tx)
			log_warn("checkpoints: node %u takes no peer copies: checkpoints have no "
				 "\"peer\" level", to);
		else
			log_warn("checkpoints: this node's libfabric links did not open (logged "
				 "above): checkpoints have no \"peer\" level");
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
	 * this peer confirmed them (seerd stopped before the peer answered),
	 * this peer being the same node index with the same receiver id (a
	 * node replaced by one with an empty disk announces another) */
	unsigned again = 0, held = 0, other = 0;
	pthread_mutex_lock(&ck->mu);
	for (struct ck_item *it = ck->items; it; it = it->next) {
		if (!it->recovered || !it->on_nvme || it->st[SEER_CKL_PEER] != SEER_CKS_OFF)
			continue;
		bool same = it->rec_peer == (int64_t)ck->peer.node;
		bool done = same && memcmp(it->rec_peer_disk, ck->peer.dest_disk,
					   sizeof(ck->peer.dest_disk)) == 0;
		it->st[SEER_CKL_PEER] = done ? SEER_CKS_DONE : SEER_CKS_PENDING;
		again += !done;
		held += done;
		other += same && !done;
	}
	pthread_cond_broadcast(&ck->cv);
	pthread_mutex_unlock(&ck->mu);
	log_info("checkpoints: a copy of each goes to node %u over libfabric (provider %s)",
		 ck->peer.node, ck->peer.addr);
	if (again || held)
		log_info("checkpoints: of the copies found on NVMe, %u are held by node %u, %u not "
			 "confirmed by it: sending them again", held, ck->peer.node, again);
	if (other)
		log_info("checkpoints: %u of them were confirmed by node %u with another receiver id "
			 "(its disk was replaced or emptied): sent again", other, ck->peer.node);
}
