/* The checkpoint stage's store of this node's own checkpoints: the item
 * list (struct ck_item, oldest first), their memory (memfds, counted in
 * ck->mem_used) and NVMe copies (<dir>/<id>.data with its record <id>.meta,
 * counted in ck->nvme_used), retention ([checkpoint] keep, the NVMe budget,
 * CK_KEEP_ITEMS), and the durable-file helpers every level uses for its
 * files (pwrite of all bytes, fsync of a directory, a record written
 * through a temporary name, the start-up walk of a folder of records).
 *
 * Threads: no thread of its own; called by every thread of the stage, under
 * ck->mu except the file helpers and ckpt_store_meta_write (which take
 * meta_mu, then mu) and the start-up walk (before the threads start).
 * Locking: checkpoint_int.h. It calls no other file of the stage.
 *
 * Failure: the file helpers return -errno and leave no temporary file
 * behind; a record found damaged at start (or a .data without its record)
 * is removed with a warning naming it; retention never removes a copy not
 * yet on the PFS. Out of memory aborts (the daemon's rule). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/util/util.h"
#include "checkpoint_int.h"

void ckpt_store_free_mem(struct ckpt *ck, struct ck_item *it)
{
	if (it->mem) {
		munmap(it->mem, it->alloc);
		it->mem = NULL;
	}
	if (it->memfd >= 0) {
		close(it->memfd);
		it->memfd = -1;
		ck->mem_used -= it->alloc;
	}
}

void ckpt_store_file(const struct ckpt *ck, uint64_t id, const char *ext, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%016" PRIx64 ".%s", ck->dir, id, ext);
}

static void item_unlink_nvme(struct ckpt *ck, struct ck_item *it)
{
	char f[4200];
	ckpt_store_file(ck, it->id, "meta", f, sizeof(f));
	unlink(f);
	ckpt_store_file(ck, it->id, "data", f, sizeof(f));
	unlink(f);
	if (it->on_nvme)
		ck->nvme_used -= it->size;
	it->on_nvme = false;
}

void ckpt_store_drop(struct ckpt *ck, struct ck_item *it)
{
	for (struct ck_item **pp = &ck->items; *pp; pp = &(*pp)->next)
		if (*pp == it) {
			*pp = it->next;
			break;
		}
	ckpt_store_free_mem(ck, it);
	free(it->path);
	free(it);
}

/* Whether the writers are done with it: every level reached, off or pruned
 * (a failed PFS drain is pending work: it is retried). */
static bool item_settled(const struct ck_item *it)
{
	return it->committed && it->st[SEER_CKL_LOCAL] != SEER_CKS_PENDING &&
	       it->st[SEER_CKL_PFS] == SEER_CKS_DONE && it->st[SEER_CKL_PEER] != SEER_CKS_PENDING;
}

/* Whether a thread still needs its bytes (the peer copy is not made yet). */
bool ckpt_store_in_use(const struct ck_item *it)
{
	return it->busy || it->peer_busy || it->st[SEER_CKL_PEER] == SEER_CKS_PENDING;
}

/* Retention: drained copies beyond [checkpoint] keep leave the NVMe, oldest
 * first; with `need` bytes to make room for, drained copies inside keep go
 * too. Never an undrained copy. Finished items beyond CK_KEEP_ITEMS are
 * forgotten. */
void ckpt_store_prune(struct ckpt *ck, uint64_t need)
{
	size_t n = 0;
	for (struct ck_item *it = ck->items; it; it = it->next)
		n += it->on_nvme && it->st[SEER_CKL_PFS] == SEER_CKS_DONE;
	for (struct ck_item *it = ck->items; it; it = it->next) {
		if (!it->on_nvme || ckpt_store_in_use(it) || it->st[SEER_CKL_PFS] != SEER_CKS_DONE)
			continue;
		bool room = ck->nvme_used + need <= ck->cfg->checkpoint.nvme;
		if (n <= ck->cfg->checkpoint.keep && room)
			break;
		log_info("checkpoint %s (%016" PRIx64 "): NVMe copy removed (keep %" PRIu64 "%s)",
			 it->path, it->id, ck->cfg->checkpoint.keep, room ? "" : ", room for a new one");
		item_unlink_nvme(ck, it);
		it->st[SEER_CKL_LOCAL] = SEER_CKS_PRUNED;
		n--;
	}
	size_t total = 0;
	for (struct ck_item *it = ck->items; it; it = it->next)
		total++;
	for (struct ck_item *it = ck->items, *nx; it && total > CK_KEEP_ITEMS; it = nx) {
		nx = it->next;
		if (item_settled(it) && !it->on_nvme && !ckpt_store_in_use(it)) {
			ckpt_store_drop(ck, it);
			total--;
		}
	}
}

/* ---- files ------------------------------------------------------------- */

int ckpt_store_write_all(int fd, const uint8_t *p, size_t n, off_t off)
{
	while (n > 0) {
		ssize_t w = pwrite(fd, p, n, off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (w == 0)
			return -EIO;
		p += w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

int ckpt_store_fsync_dir(const char *file)
{
	char d[4200];
	str_copy(d, sizeof(d), file);
	char *slash = strrchr(d, '/');
	if (!slash)
		return 0;
	if (slash == d)
		slash[1] = '\0';
	else
		*slash = '\0';
	int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) == 0 || errno == EINVAL ? 0 : -errno;
	close(fd);
	return rc;
}

int ckpt_store_record_write(const char *f, const char *text)
{
	char tmp[4300];
	snprintf(tmp, sizeof(tmp), "%s.tmp", f);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int rc = ckpt_store_write_all(fd, (const uint8_t *)text, strlen(text), 0);
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	close(fd);
	if (rc == 0 && rename(tmp, f) != 0)
		rc = -errno;
	if (rc == 0)
		rc = ckpt_store_fsync_dir(f);
	if (rc != 0)
		unlink(tmp);
	return rc;
}

/* The .meta of an item: written to a temporary name, fsync'd, renamed. */
int ckpt_store_meta_write(struct ckpt *ck, const struct ck_item *it)
{
	char f[4200];
	ckpt_store_file(ck, it->id, "meta", f, sizeof(f));
	pthread_mutex_lock(&ck->meta_mu);
	/* the fields as they are now: a writer that set them before us has its
	 * change in our file, one after us writes after us */
	pthread_mutex_lock(&ck->mu);
	char *text = NULL, disk[33];
	for (size_t i = 0; i < sizeof(it->rec_peer_disk); i++)
		snprintf(disk + 2 * i, 3, "%02x", it->rec_peer_disk[i]);
	int len = it->rec_peer >= 0
		? asprintf(&text, "seer-ckpt 1\nid %016" PRIx64 "\nsize %" PRIu64 "\ndrained %d\n"
			   "peer %" PRId64 "\npeer_disk %s\npath %s\n", it->id, it->size,
			   it->rec_drained ? 1 : 0, it->rec_peer, disk, it->path)
		: asprintf(&text, "seer-ckpt 1\nid %016" PRIx64 "\nsize %" PRIu64 "\ndrained %d\n"
			   "path %s\n", it->id, it->size, it->rec_drained ? 1 : 0, it->path);
	pthread_mutex_unlock(&ck->mu);
	if (len < 0)
		abort();
	int rc = ckpt_store_record_write(f, text);
	pthread_mutex_unlock(&ck->meta_mu);
	free(text);
	return rc;
}

/* Reads the "key value" lines of a record; false if it is not `magic` 1
 * with an id (or an origin), a path and a .data of its size. */
static bool record_read(const char *dir, const char *name, const char *magic,
			struct ckpt_rec *r)
{
	FILE *fp = fopen(r->meta, "re");
	if (!fp)
		return false;
	char line[SEER_CKPT_PATH_MAX + 16], key[32];
	size_t mlen = strlen(magic);
	bool first = true;
	while (fgets(line, sizeof(line), fp)) {
		line[strcspn(line, "\n")] = '\0';
		if (first) {
			first = false;
			if (strncmp(line, magic, mlen) != 0 || line[mlen] != ' ' ||
			    sscanf(line + mlen, "%d", &r->version) != 1)
				break;
			continue;
		}
		if (strncmp(line, "path ", 5) == 0) {
			str_copy(r->path, sizeof(r->path), line + 5);
			continue;
		}
		const char *v = line + strcspn(line, " ");
		if (!*v || (size_t)(v - line) >= sizeof(key))
			continue;
		snprintf(key, sizeof(key), "%.*s", (int)(v - line), line);
		if (strcmp(key, "id") == 0)
			sscanf(v, "%" SCNx64, &r->id);
		else if (strcmp(key, "size") == 0)
			sscanf(v, "%" SCNu64, &r->size);
		else if (strcmp(key, "drained") == 0)
			sscanf(v, "%d", &r->drained);
		else if (strcmp(key, "origin") == 0)
			sscanf(v, "%" SCNu32, &r->origin);
		else if (strcmp(key, "peer") == 0)
			sscanf(v, "%" SCNd64, &r->peer);
		else if (strcmp(key, "peer_disk") == 0 && strlen(v + 1) == 2 * sizeof(r->peer_disk))
			for (size_t i = 0; i < sizeof(r->peer_disk); i++)
				if (sscanf(v + 1 + 2 * i, "%2hhx", &r->peer_disk[i]) != 1)
					memset(r->peer_disk, 0, sizeof(r->peer_disk));
	}
	fclose(fp);
	snprintf(r->data, sizeof(r->data), "%s/%.*s.data", dir, (int)(strlen(name) - 5), name);
	return r->version == 1 && r->id && r->path[0] && stat(r->data, &r->sb) == 0 &&
	       (uint64_t)r->sb.st_size == r->size;
}

void ckpt_store_walk(struct ckpt *ck, const char *dir, const char *magic, const char *what,
	       void (*fn)(struct ckpt *ck, const struct ckpt_rec *r, void *arg), void *arg)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	char f[4400];
	while ((de = readdir(d))) {
		const char *dot = strrchr(de->d_name, '.');
		if (!dot || de->d_name[0] == '.')
			continue;
		snprintf(f, sizeof(f), "%s/%s", dir, de->d_name);
		if (strcmp(dot, ".tmp") == 0) {
			unlink(f);
			continue;
		}
		if (strcmp(dot, ".data") == 0) {
			char m[4400];
			snprintf(m, sizeof(m), "%.*s.meta", (int)(strlen(f) - 5), f);
			if (access(m, F_OK) != 0) {
				log_warn("%s %s has no record (seerd stopped while writing it): removed",
					 what, f);
				unlink(f);
			}
			continue;
		}
		if (strcmp(dot, ".meta") != 0)
			continue;
		struct ckpt_rec r = { .meta = f, .peer = -1 };
		if (!record_read(dir, de->d_name, magic, &r)) {
			log_warn("%s record %s is damaged or its copy is missing: removed", what, f);
			unlink(f);
			unlink(r.data);
			continue;
		}
		fn(ck, &r, arg);
	}
	closedir(d);
}