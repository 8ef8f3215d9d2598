/* The checkpoint stage's store of the copies this node holds for node - 1
 * ([checkpoint] peers = 1, several nodes; docs/checkpoint.md "Peer
 * copies"): the receiving end of checkpoint_peer.c's copies.
 *
 * Owns: the held copies (struct ck_held_list, ck->held: <dir>/peer-<origin>/
 * <id>.data + .meta, or memfds without an NVMe tier), their share of the
 * budgets (ck->held.nvme_used; memfds count in ck->mem_used), their
 * retention ([checkpoint] keep per origin, the highest ids kept and served,
 * whatever order they arrived in), their start-up recovery, and the reading
 * of one copy from the rx link into the store (ckpt_held_receive).
 *
 * Threads: the peer receiver (checkpoint_peer.c) receives, one copy at a
 * time, taking ck->mu only for the budgets and the list; the service
 * thread's OPEN (ckpt_held_open) and the dispatcher's seerctl list run
 * under ck->mu; recovery runs at start before the threads, teardown after
 * they were joined.
 *
 * Failure: nothing partial is held. A copy that is cut short, fails its
 * crc32c, finds no room, or cannot be fsync'd and recorded is deleted, and
 * the answer says why; a copy sent again replaces the held one of the same
 * id only once it is complete. A damaged record found at start is removed
 * (ckpt_store_walk). Out of memory aborts (the daemon's rule). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "../src/fmt/crc32c.h"
#include "../src/net/net_link.h"
#include "../src/util/util.h"
#include "checkpoint_int.h"

/* messages (why, paths in them) are cut to their fixed buffers on purpose */
#pragma GCC diagnostic ignored "-Wformat-truncation"

static void held_file(const struct ckpt *ck, uint32_t origin, uint64_t id, const char *ext,
		      char *buf, size_t len)
{
	snprintf(buf, len, "%s/peer-%u/%016" PRIx64 ".%s", ck->dir, origin, id, ext);
}

static void held_drop(struct ckpt *ck, struct ck_held *h)
{
	for (struct ck_held **pp = &ck->held.copies; *pp; pp = &(*pp)->next)
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
		ck->held.nvme_used -= h->size;
	}
	log_info("copy of node %u's checkpoint %s (%016" PRIx64 ") removed (keep %" PRIu64 ")",
		 h->origin, h->path, h->id, ck->cfg->checkpoint.keep);
	free(h->path);
	free(h);
}

/* A copy of (origin, id) sent again replaces the one held: the old entry
 * goes (its memfd closed; its files are the new copy's names, not removed).
 * Called once the new copy is complete and recorded. */
static void held_forget(struct ckpt *ck, uint32_t origin, uint64_t id)
{
	pthread_mutex_lock(&ck->mu);
	for (struct ck_held **pp = &ck->held.copies; *pp; pp = &(*pp)->next) {
		struct ck_held *h = *pp;
		if (h->origin != origin || h->id != id)
			continue;
		*pp = h->next;
		if (h->memfd >= 0) {
			close(h->memfd);
			ck->mem_used -= h->size;
		} else {
			ck->held.nvme_used -= h->size;
		}
		log_info("copy of node %u's checkpoint %s (%016" PRIx64 ") sent again: the new "
			 "copy replaces it", origin, h->path, id);
		free(h->path);
		free(h);
		break;
	}
	pthread_mutex_unlock(&ck->mu);
}

/* Into the held list, which is ordered by id, oldest first: an origin's
 * ids grow (its seerd restores its last id at start), whatever order its
 * copies arrive in (a retried copy may come after a newer one). Under mu. */
static void held_insert(struct ckpt *ck, struct ck_held *hd)
{
	struct ck_held **pp = &ck->held.copies;
	while (*pp && (*pp)->id <= hd->id)
		pp = &(*pp)->next;
	hd->next = *pp;
	*pp = hd;
}

/* Retention for held copies: at most `keep` of `origin`'s, the highest ids
 * kept (the list is ordered by id). Under mu. */
static void held_prune(struct ckpt *ck, uint32_t origin, uint64_t keep)
{
	size_t n = 0;
	for (struct ck_held *h = ck->held.copies; h; h = h->next)
		n += h->origin == origin;
	for (struct ck_held *h = ck->held.copies, *nx; h && n > keep; h = nx) {
		nx = h->next;
		if (h->origin == origin) {
			held_drop(ck, h);
			n--;
		}
	}
}

/* The next message of copy `seq` (DATA or END) into *m, within the peer
 * timeout: 0; -EAGAIN with m->have when a new copy began (its HDR in *m);
 * -ETIMEDOUT; -ECANCELED when seerd stops. Other copies' messages go. */
static int rx_next(struct ckpt *ck, uint32_t seq, struct ck_msg *m)
{
	double end = now_s() + ckpt_peer_timeout_s(ck);
	for (;;) {
		int rc = net_link_recv(ck->peer.rx, &m->b, &m->n, &m->tag, 0.2);
		pthread_mutex_lock(&ck->mu);
		bool stop = ck->stop;
		pthread_mutex_unlock(&ck->mu);
		if (stop)
			return -ECANCELED;
		if (rc == -ETIMEDOUT && now_s() < end)
			continue;
		if (rc != 0)
			return rc;
		if (CKT_TYPE(m->tag) == CKT_HDR) {
			m->have = true;
			return -EAGAIN;
		}
		if (CKT_SEQ(m->tag) == seq)
			return 0;
	}
}

/* Bytes of the copy of (origin, id) held in memory (mem) or on NVMe: one
 * sent again replaces it. Under mu. */
static uint64_t held_same(const struct ckpt *ck, uint32_t origin, uint64_t id, bool mem)
{
	for (const struct ck_held *h = ck->held.copies; h; h = h->next)
		if (h->origin == origin && h->id == id && (h->memfd >= 0) == mem)
			return h->size;
	return 0;
}

/* One copy from node - 1, its HDR in *m: room reserved, bytes received and
 * checked, fsync'd, recorded; or nothing kept. 0, or -errno with why; *src
 * (with *answer) where to send the answer. A new copy's HDR read meanwhile
 * is left in *m (m->have). */
int ckpt_held_receive(struct ckpt *ck, struct ck_msg *m, uint64_t *src, bool *answer,
		      char *why, size_t wlen)
{
	struct ck_peer_hdr h;
	uint32_t seq = CKT_SEQ(m->tag), alen = 0;
	m->have = false;
	*answer = false;
	if (m->n < sizeof(h) + sizeof(alen)) {
		snprintf(why, wlen, "refused: a header of %zu bytes", m->n);
		return -EPROTO;
	}
	memcpy(&h, m->b, sizeof(h));
	memcpy(&alen, (const uint8_t *)m->b + sizeof(h), sizeof(alen));
	h.path[sizeof(h.path) - 1] = '\0';
	uint32_t from = (ck->node + ck->nnodes - 1) % ck->nnodes;
	char lerr[SEER_ERRMSG_MAX];
	if (h.magic != CK_PEER_MAGIC || alen == 0 || alen > CK_PEER_ADDR_MAX ||
	    m->n != sizeof(h) + sizeof(alen) + alen) {
		snprintf(why, wlen, "refused: not a checkpoint copy of this seer version");
		return -EPROTO;
	}
	/* only this job's node - 1 is answered (its address enters the AV) */
	if (memcmp(h.secret, ck->peer.secret, sizeof(h.secret)) != 0 || h.origin != from) {
		snprintf(why, wlen, "refused: not a copy from this job's node %u (wrong secret or "
			 "origin; not answered)", from);
		return -EPERM;
	}
	int rc = net_link_peer(ck->peer.rx, (const uint8_t *)m->b + sizeof(h) + sizeof(alen), alen,
			       src, lerr, sizeof(lerr));
	if (rc != 0) {
		snprintf(why, wlen, "%s", lerr);
		return rc;
	}
	*answer = true;
	if (h.size == 0 || h.path[0] != '/') {
		snprintf(why, wlen, "refused: not a copy from this job's node %u (wrong magic, "
			 "secret or origin)", from);
		return -EPERM;
	}
	char sz[32], a[32], b[32], f[4200] = "", dir[4200];
	bool nvme = *ck->dir;
	uint64_t keep = ck->cfg->checkpoint.keep;
	pthread_mutex_lock(&ck->mu);
	uint64_t same = held_same(ck, h.origin, h.id, !nvme);
	if (nvme) {
		struct statvfs vs;
		uint64_t avail = statvfs(ck->dir, &vs) == 0 ? (uint64_t)vs.f_bavail * vs.f_frsize
							   : UINT64_MAX;
		/* the new copy will be one of `keep`: older ones beyond make room
		 * first, but the last one held stays until the new one is checked
		 * (the same id sent again is replaced: its bytes do not count) */
		if (ck->nvme_used + ck->held.nvme_used - same + h.size > ck->cfg->checkpoint.nvme ||
		    h.size > avail)
			held_prune(ck, h.origin, MAX(keep, 2) - 1);
		same = held_same(ck, h.origin, h.id, false);
		if (ck->nvme_used + ck->held.nvme_used - same + h.size > ck->cfg->checkpoint.nvme ||
		    h.size > avail) {
			snprintf(why, wlen, "no room on node %u's NVMe for a copy of %s (%s) beside "
				 "the copies it holds (the last one stays until a new one is "
				 "complete): [checkpoint] nvme %s, %s in use, %s free on the disk; "
				 "raise [checkpoint] nvme", ck->node,
				 h.path, fmt_size(sz, sizeof(sz), h.size),
				 fmt_size(a, sizeof(a), ck->cfg->checkpoint.nvme),
				 fmt_size(b, sizeof(b), ck->nvme_used + ck->held.nvme_used),
				 fmt_size((char[32]){ 0 }, 32, avail));
			pthread_mutex_unlock(&ck->mu);
			return -ENOSPC;
		}
		ck->held.nvme_used += h.size;
	} else {
		if (ck->mem_used - same + h.size > ck->cfg->checkpoint.memory)
			held_prune(ck, h.origin, MAX(keep, 2) - 1);
		same = held_same(ck, h.origin, h.id, true);
		if (ck->mem_used - same + h.size > ck->cfg->checkpoint.memory) {
			snprintf(why, wlen, "no room in node %u's memory for a copy of %s (%s) beside "
				 "the copies it holds (the last one stays until a new one is "
				 "complete): [checkpoint] memory %s, %s in use (it has no NVMe tier); "
				 "raise [checkpoint] memory", ck->node,
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
	if (nvme) {
		snprintf(dir, sizeof(dir), "%s/peer-%u", ck->dir, h.origin);
		rc = mkdir_p(dir, 0700);
		/* peer-<origin> itself is durable in ck->dir */
		if (rc == 0)
			rc = ckpt_store_fsync_dir(dir);
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
	uint32_t crc = 0, want = 0, idx = 0;
	uint64_t synced = 0;
	for (uint64_t off = 0; off < h.size; off += CK_PEER_MSG, idx++) {
		size_t n = (size_t)MIN((uint64_t)CK_PEER_MSG, h.size - off);
		rc = rx_next(ck, seq, m);
		if (rc == 0 && (CKT_TYPE(m->tag) != CKT_DATA || CKT_IDX(m->tag) != idx || m->n != n))
			rc = -EPROTO;
		if (rc != 0) {
			snprintf(why, wlen, "node %u's copy of %s ended at byte %" PRIu64 " of %" PRIu64
				 ": %s", h.origin, h.path, off, h.size,
				 rc == -EAGAIN ? "a new copy began" : strerror(-rc));
			goto fail;
		}
		crc = crc32c(crc, m->b, n);
		rc = ckpt_store_write_all(out, m->b, n, (off_t)off);
		if (rc != 0) {
			snprintf(why, wlen, "writing %s: %s", nvme ? f : "a memfd", strerror(-rc));
			goto fail;
		}
		/* started now, so that the fsync after END has little left
		 * (an error shows again in that fsync) */
		if (nvme && off + n - synced >= CK_PEER_WRITEBACK) {
			sync_file_range(out, (off_t)synced, (off_t)(off + n - synced),
					SYNC_FILE_RANGE_WRITE);
			synced = off + n;
		}
	}
	rc = rx_next(ck, seq, m);
	if (rc == 0 && (CKT_TYPE(m->tag) != CKT_END || m->n != sizeof(want)))
		rc = -EPROTO;
	if (rc == 0)
		memcpy(&want, m->b, sizeof(want));
	if (rc == 0 && want != crc) {
		rc = -EBADMSG;
		snprintf(why, wlen, "the copy of %s does not match its checksum (crc32c %08x, sent "
			 "%08x): not kept", h.path, crc, want);
		goto fail;
	}
	if (rc != 0) {
		snprintf(why, wlen, "reading the checksum: %s",
			 rc == -EAGAIN ? "a new copy began" : strerror(-rc));
		goto fail;
	}
	if (nvme) {
		if (fsync(out) != 0) {
			rc = -errno;
			snprintf(why, wlen, "fsync %s: %s", f, strerror(errno));
			goto fail;
		}
		char data[4200], meta[4200], *text = NULL;
		held_file(ck, h.origin, h.id, "data", data, sizeof(data));
		held_file(ck, h.origin, h.id, "meta", meta, sizeof(meta));
		if (rename(f, data) != 0) {
			/* a held copy of the same id is untouched */
			rc = -errno;
			snprintf(why, wlen, "rename %s to %s: %s", f, data, strerror(-rc));
			goto fail;
		}
		if (asprintf(&text, "seer-ckpt-peer 1\norigin %u\nid %016" PRIx64 "\nsize %" PRIu64
			     "\ncrc32c %08x\npath %s\n", h.origin, h.id, h.size, crc, h.path) < 0)
			abort();
		rc = ckpt_store_fsync_dir(data);
		const char *what = "fsync the directory of", *wf = data;
		if (rc == 0) {
			what = "cannot record";
			wf = meta;
			rc = ckpt_store_record_write(meta, text);
		}
		free(text);
		if (rc != 0) {
			/* the rename replaced the .data of a held copy of the same id,
			 * if any: neither is kept, nor its record */
			snprintf(why, wlen, "%s %s: %s", what, wf, strerror(-rc));
			unlink(data);
			unlink(meta);
			held_forget(ck, h.origin, h.id);
			f[0] = '\0';
			goto fail;
		}
		str_copy(f, sizeof(f), data);
		close(out);
		out = -1;
	}
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
	held_insert(ck, hd);
	held_prune(ck, h.origin, MAX(keep, 1));
	pthread_mutex_unlock(&ck->mu);
	log_info("copy of node %u's checkpoint %s (%s) held %s", h.origin, h.path,
		 fmt_size(sz, sizeof(sz), h.size), nvme ? f : "in memory (no NVMe tier)");
	return 0;
fail:
	if (out >= 0)
		close(out);
	if (nvme && *f)
		unlink(f);
	pthread_mutex_lock(&ck->mu);
	if (nvme)
		ck->held.nvme_used -= h.size;
	else
		ck->mem_used -= h.size;
	pthread_mutex_unlock(&ck->mu);
	return rc;
}

/* A held copy's record found at start (ckpt_store_walk of <dir>/peer-<origin>/). */
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
	held_insert(ck, h); /* by id, not by arrival */
	ck->held.nvme_used += r->size;
	log_info("copy of node %u's checkpoint %s found on NVMe at %s", origin, r->path, r->data);
}

void ckpt_held_recover(struct ckpt *ck)
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
		ckpt_store_walk(ck, sub, "seer-ckpt-peer", "held copy", held_found, &origin);
	}
	closedir(d);
	/* retention per origin (held_prune frees: start over after each) */
	uint64_t keep = MAX(ck->cfg->checkpoint.keep, 1);
	for (bool again = true; again;) {
		again = false;
		for (struct ck_held *h = ck->held.copies; h && !again; h = h->next) {
			size_t n = 0;
			for (struct ck_held *g = ck->held.copies; g; g = g->next)
				n += g->origin == h->origin;
			if (n > keep) {
				held_prune(ck, h->origin, keep);
				again = true;
			}
		}
	}
}

int ckpt_held_open(struct ckpt *ck, const char *path, struct ck_item *hit)
{
	struct ck_held *hb = NULL;
	for (struct ck_held *h = ck->held.copies; h; h = h->next)
		if (strncmp(h->path, path, SEER_CKPT_PATH_MAX) == 0 && !(hb && hb->id > h->id))
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

void ckpt_held_list_json(struct ckpt *ck, void *json_root)
{
	json_t *root = json_root, *held = json_array();
	if (!held)
		abort();
	uint64_t held_mem = 0;
	for (struct ck_held *h = ck->held.copies; h; h = h->next) {
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
	json_object_set_new(root, "held_nvme", json_integer((json_int_t)ck->held.nvme_used));
	json_object_set_new(root, "held_memory", json_integer((json_int_t)held_mem));
}

void ckpt_held_destroy(struct ckpt *ck)
{
	bool on_nvme = false;
	for (struct ck_held *h = ck->held.copies; h; h = h->next)
		on_nvme |= h->memfd < 0;
	if (*ck->dir && !on_nvme) {
		/* nothing held here: the receiver id goes with the copies it
		 * vouched for (a later seerd makes a new one; node - 1 then sends
		 * again what it recorded as confirmed), and the empty folders */
		char f[4200];
		DIR *d = opendir(ck->dir);
		struct dirent *de;
		uint32_t origin;
		char end;
		while (d && (de = readdir(d)))
			if (sscanf(de->d_name, "peer-%" SCNu32 "%c", &origin, &end) == 1) {
				snprintf(f, sizeof(f), "%s/%s", ck->dir, de->d_name);
				rmdir(f);
			}
		if (d)
			closedir(d);
		snprintf(f, sizeof(f), "%s/peer-id", ck->dir);
		unlink(f);
	}
	while (ck->held.copies) {
		/* NVMe copies stay for a later seerd; memory copies go */
		struct ck_held *h = ck->held.copies;
		ck->held.copies = h->next;
		if (h->memfd >= 0)
			close(h->memfd);
		free(h->path);
		free(h);
	}
}
