/* Saved positions: [job] resume = auto restarts a job where it stopped, after
 * a clean stop or a crash, every rank on any node, with the same or another
 * number of trainers (docs/resume.md, "resume = auto").
 *
 * One directory per job in daemon.state_dir, seer-pos-<job id>/, holds
 *   plan           this run's resume plan: the job's fingerprint, world size
 *                  and epochs, the record the plan was made from, and every
 *                  rank's start (written whole, atomically, when the run's
 *                  plan is made; a crash never leaves half of it);
 *   <run>-r<rank>  per rank, its first batch not released: a 64-byte file
 *                  the node serving the rank maps and updates in place at
 *                  every release it takes in (one aligned 8-byte store:
 *                  whatever instant seerd is killed at, the value is whole;
 *                  an idle seerd may take releases in up to ~1 s late,
 *                  engine_arm's ring_below). A rank whose file
 *                  is missing or of another run is at its start;
 *   lock           held by node 0 for its life: one seerd per job id and
 *                  state directory (joblock.h).
 * Rank-keyed and per job, so a rank restarted on another node finds its
 * position, and a restart with another world size re-shards from all of them.
 * The state directory must be one every node sees for that (the default, in
 * $HOME, is on HPC systems). What survives: seerd's death, any signal (the
 * page cache holds the stores; the kernel writes them back); a node crash
 * loses what was not written back yet (Linux: at most dirty_expire_centisecs,
 * 30 s by default, on a local file system; a network file system writes back
 * on close, so a crashed client's last stores may be lost).
 *
 * Dispatcher thread only. Failure: a missing, damaged or foreign plan starts
 * the job at the beginning (said in the log); saved positions that cannot be
 * re-sharded over the new world size refuse the trainers with why; a file
 * that cannot be written is logged and the job goes on without it. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/common/base.h"
#include "../src/common/paths.h"
#include "../src/util/util.h"
#include "engine_int.h"
#include "joblock.h"
#include "resume_file.h"
#include "seer.h"

#define PLAN_HDR 96u /* the smallest plan file holds its header and CRC */

struct resume_files {
	char *dir;
	bool written;      /* this run's plan and rank files exist */
	bool reported;
};

static char *pos_dir(const struct engine *e)
{
	return joblock_dir(e->cfg); /* node 0 holds its lock: joblock.h */
}


/* ---- the plan file ------------------------------------------------------------ */

/* path written whole: a temporary file named for this host and process (the
 * nodes of a job share the directory), then rename. 0 or -errno. */
static int write_atomic(const char *path, const void *buf, size_t n, bool sync)
{
	char host[64] = "";
	gethostname(host, sizeof(host) - 1);
	char *tmp = xasprintf("%s.tmp.%s.%d", path, host, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int rc = fd < 0 ? -errno : write_full(fd, buf, n);
	if (rc == 0 && sync && fsync(fd) != 0)
		rc = -errno;
	if (fd >= 0 && close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -errno;
	if (rc != 0)
		unlink(tmp);
	free(tmp);
	return rc;
}

/* This run's plan: the job, the record, every rank's start (layout:
 * resume_file.h). */
static void write_plan(struct engine *e, const char *path)
{
	struct resume_plan p = {
		.run = e->resume.run_id,
		.job = { .n = e->sh.n, .seed = e->sh.seed, .dataset_hash = e->cat->hash,
			 .batch = e->sh.batch, .world = e->world, .drop_last = e->sh.drop_last,
			 .shuffle = e->sh.shuffle },
		.epochs = e->cfg->job.epochs, .bpe = e->sh.bpe,
		.rec = e->plan_rec, .rec_len = (uint32_t)e->plan_rec_len,
	};
	uint64_t *starts = xcalloc(e->world, sizeof(uint64_t));
	for (uint32_t r = 0; r < e->world; r++) {
		const struct trainer *t = &e->tr[r];
		starts[r] = t->attached ? t->next_prep : t->resume_g;
	}
	size_t n;
	uint8_t *b = resume_file_plan_encode(&p, starts, &n);
	free(starts);
	int rc = write_atomic(path, b, n, true);
	if (rc != 0)
		log_warn("cannot save the resume plan to %s: %s (resume = auto will not find this "
			 "run)", path, strerror(-rc));
	free(b);
}

/* The plan file's bytes into *buf (checked: owner, magic, sizes, CRC). 0,
 * -ENOENT, or -EBADMSG with why. */
static int read_plan(const char *path, uint8_t **buf, size_t *len, char *why, size_t whylen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int rc = path_check_owned_file(fd, path, why, whylen);
	if (rc == 0 && fstat(fd, &st) != 0)
		rc = -errno;
	if (rc == 0 && (st.st_size < (off_t)PLAN_HDR + 4 || st.st_size > (64 << 20))) {
		snprintf(why, whylen, "%s has %lld bytes", path, (long long)st.st_size);
		rc = -EBADMSG;
	}
	uint8_t *b = NULL;
	if (rc == 0) {
		b = xmalloc((size_t)st.st_size);
		rc = pread_full(fd, b, (size_t)st.st_size, 0);
	}
	close(fd);
	size_t n = rc == 0 ? (size_t)st.st_size : 0;
	struct resume_plan p;
	if (rc == 0 && resume_file_plan_decode(b, n, &p) != 0) {
		snprintf(why, whylen, "%s is damaged (magic, version, size or checksum)", path);
		rc = -EBADMSG;
	}
	if (rc == -EPERM) {
		char tmp[512];
		snprintf(tmp, sizeof(tmp), "%.400s", why);
		snprintf(why, whylen, "position record not trusted (%.400s)", tmp);
	} else if (rc != 0 && rc != -ENOENT && rc != -EBADMSG) {
		snprintf(why, whylen, "%s: %s", path, strerror(-rc));
	}
	if (rc != 0) {
		free(b);
		return rc == -ENOENT ? rc : -EBADMSG;
	}
	*buf = b;
	*len = n;
	return 0;
}

/* ---- rank files --------------------------------------------------------------- */

static char *rank_path(const char *dir, uint32_t run, uint32_t rank)
{
	return xasprintf("%s/%08x-r%u", dir, run, rank);
}

/* Rank r's file of run `run` into *s: 0, or -ENOENT (none, not trusted,
 * short; whether it is this run's: resume_file_slot_check). */
static int read_rank(const char *dir, uint32_t run, uint32_t rank, struct resume_slot *s)
{
	char *path = rank_path(dir, run, rank);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	free(path);
	if (fd < 0)
		return -ENOENT;
	char why[256];
	int rc = path_check_owned_file(fd, "rank file", why, sizeof(why));
	if (rc == 0)
		rc = pread_full(fd, s, sizeof(*s), 0);
	close(fd);
	return rc == 0 ? 0 : -ENOENT;
}

/* Rank t's file for this run, created holding its start and mapped. */
static void open_rank(struct engine *e, const char *dir, struct trainer *t)
{
	struct resume_slot s;
	resume_file_slot_init(&s, e->resume.run_id, t->rank, e->world,
			      t->attached ? t->next_prep : t->resume_g);
	char *path = rank_path(dir, e->resume.run_id, t->rank);
	int rc = write_atomic(path, &s, sizeof(s), false), fd = -1;
	void *m = MAP_FAILED;
	if (rc == 0 && (fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
		rc = -errno;
	if (rc == 0) {
		m = mmap(NULL, sizeof(s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED)
			rc = -errno;
	}
	if (fd >= 0)
		close(fd);
	if (rc != 0)
		log_warn("cannot keep rank %u's position in %s: %s (resume = auto will restart it "
			 "at its start)", t->rank, path, strerror(-rc));
	else
		t->pos = m;
	free(path);
}

/* Other runs' files of the ranks this node serves (node 0: also of ranks
 * past the job's world size): stale once this run's plan is saved. Another
 * node's ranks are its own business, so a crash between two nodes' starts
 * leaves every rank a file of one run or the other. */
static void remove_stale(const struct engine *e, const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		unsigned x, r;
		char tail;
		if (sscanf(de->d_name, "%8x-r%u%c", &x, &r, &tail) != 2 || x == e->resume.run_id)
			continue;
		if (r < e->world ? e->rank_node[r] == e->node || e->nnodes == 1 : e->node == 0)
			unlinkat(dirfd(d), de->d_name, 0);
	}
	closedir(d);
}

void resume_begin(struct engine *e)
{
	if (!e->resume.files)
		e->resume.files = xcalloc(1, sizeof(*e->resume.files));
	struct resume_files *rf = e->resume.files;
	if (rf->written)
		return;
	if (e->resume.run_id == 0) {
		uint32_t v = 0;
		if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
			v = (uint32_t)(now_ns() ^ ((uint64_t)getpid() << 16));
		e->resume.run_id = v | 1u;
	}
	rf->dir = pos_dir(e);
	int rc = mkdir_p(rf->dir, 0700);
	if (rc != 0) {
		log_warn("cannot create %s for the resume positions: %s", rf->dir, strerror(-rc));
		return;
	}
	char *plan = xasprintf("%s/plan", rf->dir);
	write_plan(e, plan);
	free(plan);
	remove_stale(e, rf->dir);
	for (uint32_t i = 0; i < e->pl.nlocal; i++)
		open_rank(e, rf->dir, &e->tr[e->pl.local_ranks[i]]);
	rf->written = true;
}

void resume_note(struct engine *e, struct trainer *t)
{
	if (!t->pos)
		return;
	uint64_t g = t->attached && !t->resetting && t->slots ? sess_first_unreleased(t) : t->resume_g;
	/* one whole store: a reader after any crash sees the old or the new value */
	__atomic_store_n(&t->pos->g, MIN(g, e->pl.end), __ATOMIC_RELAXED);
}

/* SIGUSR1/SIGUSR2 (Slurm's --signal warning before the time limit): this
 * node's rank files to the disk now (msync of each mapping, fsync of their
 * directory), so that a node lost after the warning keeps the positions of
 * the releases taken in so far. Logs what it did; a failure is logged and
 * the job goes on. */
void resume_sync(struct engine *e)
{
	struct resume_files *rf = e->resume.files;
	if (!rf || !rf->written) {
		log_info("no resume positions to save yet (no trainer's plan made)");
		return;
	}
	uint32_t n = 0;
	int err = 0;
	for (uint32_t i = 0; e->tr && i < e->pl.nlocal; i++) {
		struct trainer *t = &e->tr[e->pl.local_ranks[i]];
		resume_note(e, t);
		if (!t->pos)
			continue;
		if (msync(t->pos, sizeof(*t->pos), MS_SYNC) != 0 && !err)
			err = errno;
		else
			n++;
	}
	int dfd = open(rf->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) != 0) {
		if (!err)
			err = errno;
	}
	if (dfd >= 0)
		close(dfd);
	if (err)
		log_warn("resume positions in %s: writing them to disk failed: %s (they stay in the "
			 "page cache)", rf->dir, strerror(err));
	else
		log_info("resume positions of %u rank(s) written to disk in %s", n, rf->dir);
}

/* "epoch 1 step 3" .. "epoch 2 step 0" over the local ranks' positions. */
static void local_span(const struct engine *e, char *buf, size_t len)
{
	uint64_t lo = UINT64_MAX, hi = 0, a, b, c, d;
	for (uint32_t i = 0; i < e->pl.nlocal; i++) {
		const struct trainer *t = &e->tr[e->pl.local_ranks[i]];
		uint64_t g = t->pos ? t->pos->g : t->resume_g;
		lo = MIN(lo, g);
		hi = MAX(hi, g);
	}
	jobrec_pos(e, lo, &a, &b);
	jobrec_pos(e, hi, &c, &d);
	if (lo == hi)
		snprintf(buf, len, "epoch %llu step %llu", (unsigned long long)a, (unsigned long long)b);
	else
		snprintf(buf, len, "epoch %llu step %llu to epoch %llu step %llu",
			 (unsigned long long)a, (unsigned long long)b, (unsigned long long)c,
			 (unsigned long long)d);
}

void resume_end(struct engine *e, bool complete)
{
	struct resume_files *rf = e->resume.files;
	if (!rf)
		return;
	bool done = complete;
	for (uint32_t i = 0; e->tr && i < e->pl.nlocal; i++)
		done &= e->tr[e->pl.local_ranks[i]].done;
	if (rf->written && done) {
		for (uint32_t i = 0; i < e->pl.nlocal; i++) {
			char *p = rank_path(rf->dir, e->resume.run_id, e->pl.local_ranks[i]);
			unlink(p);
			free(p);
		}
		char *plan = xasprintf("%s/plan", rf->dir);
		unlink(plan);
		free(plan);
		rmdir(rf->dir); /* when the last node is done with it (node 0: joblock_drop) */
		log_info("job complete: its resume positions are removed");
	} else if (rf->written && e->pl.nlocal > 0 && !rf->reported) {
		char span[128];
		local_span(e, span, sizeof(span));
		log_info("resume positions saved in %s (%u ranks here at %s): restart with [job] "
			 "resume = auto", rf->dir, e->pl.nlocal, span);
	}
	rf->reported = true;
	for (uint32_t r = 0; e->tr && r < e->world; r++) {
		if (e->tr[r].pos)
			munmap(e->tr[r].pos, sizeof(struct resume_slot));
		e->tr[r].pos = NULL;
	}
	free(rf->dir);
	free(rf);
	e->resume.files = NULL;
}

/* ---- loading -------------------------------------------------------------------- */

/* The saved run, decoded: its job, plan and every rank's position. */
struct saved {
	struct sampler_job job;
	uint64_t epochs, bpe;
	uint32_t run;
	struct sampler_record rec;   /* valid when have_rec */
	bool have_rec;
	struct sampler_shape sh;
	struct sampler_resume p;
	struct sampler_timeline tl;
	uint64_t *g;             /* per rank */
	uint32_t from_files;
};

static void saved_free(struct saved *s)
{
	if (s->have_rec)
		sampler_record_free(&s->rec);
	sampler_resume_free(&s->p);
	free(s->g);
}

/* The plan's bytes into s; 0, or 1 (another job / damaged: why says) */
static int saved_parse(struct engine *e, const uint8_t *b, size_t n, struct saved *s, char *why,
		       size_t whylen)
{
	struct resume_plan p;
	if (resume_file_plan_decode(b, n, &p) != 0) { /* (read_plan checked it) */
		snprintf(why, whylen, "their plan is damaged");
		return 1;
	}
	uint32_t rec_len = p.rec_len;
	s->job = p.job;
	s->run = p.run;
	s->epochs = p.epochs;
	s->bpe = p.bpe;
	struct sampler_job mine = jobrec_job(e, s->job.world);
	struct sampler_record probe;
	sampler_record_init(&probe, &s->job, 0, SMP_REC_ALL);
	if (sampler_record_check_job(&probe, &mine) != 0) {
		snprintf(why, whylen, "they are for another job: %s", seer_errmsg());
		return 1;
	}
	if (rec_len && (sampler_record_decode(p.rec, rec_len, &s->rec) != 0 ||
			sampler_record_validate(&s->rec, NULL) != 0)) {
		snprintf(why, whylen, "their plan's record is damaged: %s", seer_errmsg());
		return 1;
	}
	s->have_rec = rec_len > 0;
	if (sampler_shape_init(&s->sh, s->job.n, s->job.seed, s->job.world, s->job.batch,
			   s->job.drop_last, s->job.shuffle) != 0 || s->sh.bpe != s->bpe ||
	    sampler_resume_init(&s->p, &s->job, s->have_rec ? &s->rec : NULL) != 0) {
		snprintf(why, whylen, "their plan does not fit their job");
		return 1;
	}
	sampler_timeline_init(&s->tl, s->bpe, s->epochs, &s->p);
	s->g = xcalloc(s->job.world, sizeof(uint64_t));
	for (uint32_t r = 0; r < s->job.world; r++) {
		struct resume_slot slot;
		char *dir = pos_dir(e);
		bool have = read_rank(dir, s->run, r, &slot) == 0;
		free(dir);
		if (resume_file_rank_start(&p, r, have ? &slot : NULL, sampler_tl_end(&s->tl),
					   &s->g[r]))
			s->from_files++;
	}
	return 0;
}

/* Another world size: one record of every rank's position, merged. */
static int saved_merge(struct saved *s, struct sampler_record **out, char *err, size_t errlen)
{
	uint32_t w = s->job.world;
	struct sampler_record *recs = xcalloc(w, sizeof(*recs));
	const struct sampler_record **in = xcalloc(w, sizeof(*in));
	int rc = 0;
	uint32_t made = 0;
	for (uint32_t r = 0; r < w && rc == 0; r++) {
		uint64_t ep, st;
		sampler_tl_pos(&s->tl, s->g[r], &ep, &st);
		rc = sampler_resume_record(&s->p, &s->sh, r, ep, st, &recs[r]);
		if (rc == 0)
			in[made++] = &recs[r];
	}
	struct sampler_record *m = xcalloc(1, sizeof(*m));
	if (rc == 0)
		rc = sampler_record_merge(in, made, m);
	if (rc != 0) {
		snprintf(err, errlen, "resume = auto: the saved positions of the last run's %u ranks "
			 "cannot be re-sharded over this job's trainers (%s): restart with %u trainers, "
			 "or from a checkpoint record", w, seer_errmsg(), w);
		free(m);
		m = NULL;
		rc = SEER_ECONFIG;
	}
	for (uint32_t r = 0; r < made; r++)
		sampler_record_free(&recs[r]);
	free(recs);
	free(in);
	*out = m;
	return rc;
}

int resume_load(struct engine *e, struct sampler_record **rec, uint64_t **starts, char *msg,
		size_t msglen)
{
	*rec = NULL;
	*starts = NULL;
	char *dir = pos_dir(e), *path = xasprintf("%s/plan", dir), why[512];
	uint8_t *b = NULL;
	size_t n = 0;
	struct saved s = { 0 };
	int found = 0, rc = read_plan(path, &b, &n, why, sizeof(why));
	if (rc == -ENOENT)
		log_info("resume = auto: no saved positions in %s; starting at the beginning", dir);
	else if (rc != 0)
		log_warn("resume = auto: %s; starting at the beginning", why);
	else if (saved_parse(e, b, n, &s, why, sizeof(why)) != 0)
		log_warn("resume = auto: the saved positions in %s are not used, %s; starting at the "
			 "beginning", dir, why);
	else
		found = 1;
	rc = 0;
	if (found && s.job.world == e->world) {
		/* the same plan, every rank exactly where it stopped */
		*starts = s.g;
		s.g = NULL;
		if (s.have_rec) {
			*rec = xcalloc(1, sizeof(**rec));
			**rec = s.rec;
			s.have_rec = false;
		}
		log_info("resume = auto: the last run's %u ranks continue where they stopped (%u "
			 "from their position files, the others at their start) from %s",
			 e->world, s.from_files, dir);
	} else if (found) {
		rc = saved_merge(&s, rec, msg, msglen);
		if (rc == 0) {
			char d[200];
			sampler_record_describe(*rec, d, sizeof(d));
			log_info("resume = auto: the last run's %u ranks (%s) re-sharded over %u "
				 "trainers (%s)", s.job.world, d, e->world, dir);
		}
	}
	saved_free(&s);
	free(b);
	free(path);
	free(dir);
	return rc < 0 ? rc : found;
}
