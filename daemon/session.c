/* Trainer sessions: attach, detach, seek, and the reset between sessions.
 *
 * Owns each trainer's session: its socket, eventfd and control segments
 * (ctrl_out sealed read-only for the trainer, ctrl_in the trainer's to
 * write), the handshake (checks, start position, WELCOME with the fds), the
 * reset of its stream when it leaves or seeks (after the reads still landing
 * in its staging), and a reconnect waiting for that reset. Dispatcher thread
 * only. Failure: a refused trainer gets the reason on its socket (and the
 * log) and nothing of the engine changes; a trainer that breaks the
 * protocol (bad control data, unknown message) is evicted: told EVICTED,
 * disconnected, its batches reclaimed, its position kept for a reconnect. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "../src/util/ctrl.h"
#include "../src/util/topo.h"
#include "../src/util/util.h"
#include "engine_int.h"
#include "seer.h"

void sess_close(struct engine *e, struct trainer *t)
{
	if (t->sock >= 0) {
		engine_ep_del(e, t->sock);
		close(t->sock);
		t->sock = -1;
	}
	if (t->efd >= 0) {
		engine_ep_del(e, t->efd);
		close(t->efd);
		t->efd = -1;
	}
	shm_destroy(&t->out_seg);
	shm_destroy(&t->in_seg);
	t->co = NULL;
	t->ci = NULL;
	free(t->slots);
	t->slots = NULL;
}

static void send_refusal(int sock, int status, const char *fmt, ...) PRINTF_LIKE(3, 4);

static void send_refusal(int sock, int status, const char *fmt, ...)
{
	struct seer_msg_welcome w = { .kind = SEER_MSG_ERROR, .status = status };
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w.msg, sizeof(w.msg), fmt, ap);
	va_end(ap);
	log_warn("refused a trainer: %s", w.msg);
	sock_send(sock, &w, sizeof(w), NULL, 0);
}

static void reset_stream(struct engine *e, struct trainer *t, uint64_t start)
{
	for (uint32_t i = 0; t->slots && i < t->nslots; i++)
		t->slots[i] = (struct tslot){ 0 };
	stg_reset(&t->stg);
	t->next_prep = t->next_pub = t->tail_g = start;
	t->resetting = false;
	t->blocked = false;
	t->ring_skipping = false;
	resume_note(e, t);
}

/* Sizes of a session's control segments (proto/seer_proto.h lays them out). */
struct ctrl_layout {
	uint64_t stride, ring_off, slots_off, out_size, in_ring, in_size;
};

static struct ctrl_layout ctrl_layout(const struct engine *e)
{
	struct ctrl_layout l = { .stride = seer_slot_stride(e->sh.batch),
				 .ring_off = sizeof(struct seer_ctrl_out),
				 .in_ring = sizeof(struct seer_ctrl_in) };
	l.slots_off = ALIGN_UP(l.ring_off + 4ull * e->nslots, (uint64_t)SEER_CACHELINE);
	l.out_size = ALIGN_UP(l.slots_off + l.stride * e->nslots, 4096ull);
	l.in_size = ALIGN_UP(l.in_ring + 4ull * e->nslots, 4096ull);
	return l;
}

/* t's control segments (sealed), eventfd, rings and batch slots. On
 * failure the trainer on sock is told why; the caller closes what exists. */
static int make_ctrl(struct engine *e, struct trainer *t, int sock, const struct ctrl_layout *l)
{
	uint32_t ns = e->nslots;
	int rc = shm_create(&t->out_seg, "seer-ctrl-out", l->out_size);
	if (rc == 0)
		rc = shm_create(&t->in_seg, "seer-ctrl-in", l->in_size);
	if (rc != 0) {
		send_refusal(sock, rc, "daemon cannot create shared memory: %s", strerror(-rc));
		return rc;
	}
	t->co = t->out_seg.base;
	t->ci = t->in_seg.base;
	/* every page of the batch slots written now (zeros), so the trainer
	 * maps them all at connect (client/connect.c): a slot first used in a
	 * warm epoch would otherwise cost its reader a page fault there */
	memset((uint8_t *)t->co + l->slots_off, 0, l->out_size - l->slots_off);
	t->co->magic = SEER_MAGIC_CTOUT;
	t->co->version = SEER_PROTO_VERSION;
	t->co->creator_pid = (uint32_t)getpid();
	t->co->size = l->out_size;
	t->co->nslots = ns;
	t->co->batch_size = e->sh.batch;
	t->co->slot_stride = l->stride;
	t->co->ring_off = l->ring_off;
	t->co->slots_off = l->slots_off;
	t->co->max_held = t->held;
	arena_publish_share(e, t);
	t->ci->magic = SEER_MAGIC_CTIN;
	t->ci->version = SEER_PROTO_VERSION;
	t->ci->nslots = ns;
	t->ci->ring_off = l->in_ring;
	if ((rc = shm_seal_readonly(&t->out_seg)) != 0 || (rc = shm_seal_size(&t->in_seg)) != 0) {
		send_refusal(sock, rc, "daemon cannot seal shared memory: %s", strerror(-rc));
		return rc;
	}
	t->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (t->efd < 0) {
		rc = -errno;
		send_refusal(sock, rc, "daemon cannot create an eventfd: %s", strerror(errno));
		return rc;
	}
	t->out = (struct ring){ .prod = &t->co->prod, .cons = &t->ci->cons,
				.entries = (uint32_t *)((uint8_t *)t->co + l->ring_off), .mask = ns - 1 };
	t->rel = (struct ring){ .prod = &t->ci->rel_prod, .cons = &t->co->rel_cons,
				.entries = (uint32_t *)((uint8_t *)t->ci + l->in_ring), .mask = ns - 1 };
	t->nslots = ns;
	t->slots = xcalloc(ns, sizeof(*t->slots));
	return 0;
}

/* The job plan's record after the WELCOME, in packets. The trainer is
 * reading its handshake: a full socket is waited for, briefly. */
static ssize_t send_plan_record(const struct engine *e, int sock)
{
	static struct {
		struct seer_msg_record h;
		uint8_t data[SEER_RECORD_CHUNK];
	} m; /* dispatcher only */
	for (size_t off = 0; off < e->plan_rec_len;) {
		size_t n = MIN(e->plan_rec_len - off, (size_t)SEER_RECORD_CHUNK);
		m.h = (struct seer_msg_record){ .kind = SEER_MSG_RECORD, .len = (uint32_t)n,
						.offset = off, .total = e->plan_rec_len };
		memcpy(m.data, e->plan_rec + off, n);
		ssize_t r = sock_send(sock, &m, sizeof(m.h) + n, NULL, 0);
		if (r == -EAGAIN) {
			struct pollfd pf = { .fd = sock, .events = POLLOUT };
			if (poll(&pf, 1, 2000) <= 0)
				return -ETIMEDOUT;
			continue;
		}
		if (r != (ssize_t)(sizeof(m.h) + n))
			return r < 0 ? r : -EPIPE;
		off += n;
	}
	return 0;
}

/* A session for t on sock (pid) starting at global batch `start`: control
 * segments, then the WELCOME carrying their fds and the plan's record. On
 * failure the caller still owns sock. */
static int open_session(struct engine *e, struct trainer *t, int sock, pid_t pid, uint64_t start,
			uint32_t held)
{
	struct ctrl_layout l = ctrl_layout(e);
	t->held = held;
	arena_trainer_ring(e, t);
	int rc = make_ctrl(e, t, sock, &l);
	if (rc != 0)
		goto fail;
	struct seer_msg_welcome w = {
		.kind = SEER_MSG_WELCOME, .nsamples = e->cat->nsamples, .epochs = e->cfg->job.epochs,
		.batches_per_epoch = e->sh.bpe, .start = start, .arena_size = e->ar.seg.size,
		.ctrl_out_size = l.out_size, .ctrl_in_size = l.in_size, .batch_size = e->sh.batch,
		.nslots = e->nslots, .node = e->node, .nodes = e->nnodes, .seed = e->cfg->job.seed,
		.drop_last = e->cfg->job.drop_last, .shuffle = e->cfg->job.shuffle,
		.dataset_hash = e->cat->hash, .record_len = (uint32_t)e->plan_rec_len,
		.resume_epoch = e->tl.epoch, .resume_batches = e->tl.nb,
	};
	int fds[SEER_WELCOME_NFDS] = { e->ar.seg.fd, t->out_seg.fd, t->in_seg.fd, t->efd };
	ssize_t n = sock_send(sock, &w, sizeof(w), fds, SEER_WELCOME_NFDS);
	if (n == (ssize_t)sizeof(w))
		n = send_plan_record(e, sock) == 0 ? n : -EPIPE;
	if (n != (ssize_t)sizeof(w)) {
		rc = n < 0 ? (int)n : -EPIPE;
		log_warn("trainer rank %u (pid %d) vanished during the handshake", t->rank, (int)pid);
		goto fail;
	}
	t->sock = sock;
	t->pid = pid;
	t->attached = true;
	t->known = true;
	t->done = false;
	t->gen++;
	t->attach_ns = now_ns();
	reset_stream(e, t, start);
	engine_ep_add(e, sock, EP_TAG(EP_TSOCK, t->rank));
	engine_ep_add(e, t->efd, EP_TAG(EP_TEFD, t->rank));
	if (e->topo && topo_add_trainer(e->topo, pid))
		e->self.repin_due = true; /* engine_work places the threads again */
	uint64_t ep, st;
	jobrec_pos(e, start, &ep, &st);
	log_info("trainer rank %u/%u (pid %d) attached at epoch %llu step %llu", t->rank, e->world,
		 (int)pid, (unsigned long long)ep, (unsigned long long)st);
	return 0;
fail:
	sess_close(e, t); /* sock is still the caller's: t->sock is -1 */
	return rc;
}

/* The hello itself: protocol, job, whether the daemon takes trainers, rank
 * range. 0, or the refusal sent. */
static int check_hello(struct engine *e, int sock, const struct seer_msg_hello *h)
{
	if (h->magic != SEER_MAGIC_HELLO || h->version != SEER_PROTO_VERSION) {
		send_refusal(sock, SEER_EPROTO,
			     "protocol version %u, this seerd speaks %u: use the libseer of the "
			     "same seer build", h->version, SEER_PROTO_VERSION);
		return SEER_EPROTO;
	}
	char job[SEER_JOBID_MAX];
	memcpy(job, h->job_id, sizeof(job));
	job[sizeof(job) - 1] = '\0';
	if (strcmp(job, e->cfg->job.id) != 0) {
		send_refusal(sock, SEER_EREFUSED, "job id '%s' does not match this seerd's '%s'", job,
			     e->cfg->job.id);
		return SEER_EREFUSED;
	}
	if (e->draining || atomic_load(&e->stopping)) {
		send_refusal(sock, SEER_ESHUTDOWN, "seerd is shutting down");
		return SEER_ESHUTDOWN;
	}
	if (h->world == 0 || h->rank >= h->world) {
		send_refusal(sock, -EINVAL, "rank %u is not in [0, world size %u)", h->rank, h->world);
		return -EINVAL;
	}
	return 0;
}

/* The hello's world size: the first trainer's sets the job's shape, and its
 * record (or NULL) the resume plan; another world size replaces the shape
 * once nothing of the old one is left (place_can_reshape), so a stray
 * trainer with a wrong world size does not lock the job out. 0, or the
 * refusal sent. */
static int check_world(struct engine *e, int sock, const struct seer_msg_hello *h,
		       const struct sampler_record *rec)
{
	char err[SEER_ERRMSG_MAX];
	if (e->shape_ready && h->world != e->world) {
		char why[160];
		if (place_can_reshape(e, why, sizeof(why)) != 0) {
			send_refusal(sock, -EINVAL, "world size %u, but this job's trainers have world "
				     "size %u (%s)", h->world, e->world, why);
			return -EINVAL;
		}
		place_drop_shape(e);
	}
	if (!e->shape_ready) {
		/* checked before anything is sized by it; only this trainer is
		 * refused when it is wrong */
		int rc = place_shape_init(e, h->world, rec, false, err, sizeof(err));
		if (rc != 0) {
			place_shape_free(e);
			send_refusal(sock, rc, "%s", err);
			return rc;
		}
	}
	return 0;
}

/* Where a stream asked to start at (epoch, step) starts: 0, or -ERANGE for
 * a position past the job. */
static int explicit_start(const struct engine *e, uint64_t epoch, uint64_t step, uint64_t *g)
{
	if (epoch >= e->cfg->job.epochs || step >= sampler_tl_batches(&e->tl, epoch))
		return -ERANGE;
	*g = sampler_tl_g(&e->tl, epoch, step);
	return 0;
}

/* Whether rank h->rank may attach here now, and where its stream starts
 * (UINT64_MAX: where its last session left off, known once that session's
 * reset is done). 0, or the refusal sent. */
static int check_rank(struct engine *e, int sock, const struct seer_msg_hello *h,
		      const struct sampler_record *rec, uint64_t *start)
{
	const struct trainer *t = &e->tr[h->rank];
	if (e->plan_ready && e->rank_node[h->rank] != e->node) {
		send_refusal(sock, SEER_EREFUSED, "rank %u belongs to node %u in this job's plan, "
			     "not to node %u: start it where it first ran", h->rank,
			     e->rank_node[h->rank], e->node);
		return SEER_EREFUSED;
	}
	if (t->attached) {
		send_refusal(sock, SEER_EREFUSED,
			     "rank %u is already connected (pid %d): each rank connects once",
			     h->rank, (int)t->pid);
		return SEER_EREFUSED;
	}
	if (rec) {
		/* the checkpoint record is the truth: right after what it consumed */
		char msg[SEER_ERRMSG_MAX];
		int rc = jobrec_start(e, rec, start, msg, sizeof(msg));
		if (rc != 0) {
			send_refusal(sock, rc, "rank %u: %s", h->rank, msg);
			return rc;
		}
	} else if (h->epoch == SEER_POS_RESUME) {
		*start = UINT64_MAX; /* [job] resume, the saved position, or where it left */
	} else if (explicit_start(e, h->epoch, h->step, start) != 0) {
		send_refusal(sock, -ERANGE, "start epoch %llu step %llu is past the job "
			     "(%llu epochs of %llu steps)", (unsigned long long)h->epoch,
			     (unsigned long long)h->step, (unsigned long long)e->cfg->job.epochs,
			     (unsigned long long)sampler_tl_batches(&e->tl, h->epoch));
		return -ERANGE;
	}
	return 0;
}

int engine_attach(struct engine *e, int sock, const struct seer_msg_hello *h, const uint8_t *rec,
		  size_t rec_len, pid_t pid)
{
	uint64_t start;
	struct sampler_record r;
	char msg[SEER_ERRMSG_MAX];
	int rc = check_hello(e, sock, h);
	if (rc == 0 && (rc = jobdef_take(e, h, pid, msg, sizeof(msg))) != 0)
		send_refusal(sock, rc, "%s", msg);
	if (rc == 0 && rec_len > 0 && (rc = jobrec_decode(e, rec, rec_len, &r, msg, sizeof(msg))))
		send_refusal(sock, rc, "rank %u's checkpoint record: %s", h->rank, msg);
	bool have = rc == 0 && rec_len > 0;
	if (rc == 0)
		rc = check_world(e, sock, h, have ? &r : NULL);
	if (rc == 0)
		rc = check_rank(e, sock, h, have ? &r : NULL, &start);
	if (have)
		sampler_record_free(&r);
	uint32_t held = (uint32_t)MAX((uint64_t)h->held, e->cfg->job.max_held);
	if (rc == 0 && held > e->cfg->job.max_held &&
	    (rc = arena_check_held(e, held, msg, sizeof(msg))) != 0) {
		send_refusal(sock, SEER_EREFUSED, "rank %u: %s", h->rank, msg);
		rc = SEER_EREFUSED;
	}
	if (rc != 0)
		return rc;
	struct trainer *t = &e->tr[h->rank];
	if (t->resetting) {
		/* the previous session's reads are still landing in its staging */
		if (t->pending_sock >= 0) {
			send_refusal(sock, SEER_EREFUSED, "rank %u is already reconnecting", h->rank);
			return SEER_EREFUSED;
		}
		t->pending_sock = sock;
		t->pending_hello = *h;
		t->pending_start = start;
		t->pending_pid = pid;
		return 0;
	}
	rc = open_session(e, t, sock, pid, start == UINT64_MAX ? t->resume_g : start, held);
	if (rc == 0 && !e->plan_ready)
		e->roll_dirty = true;
	return rc;
}

uint32_t engine_trainers(const struct engine *e)
{
	uint32_t n = 0;
	for (uint32_t r = 0; e->shape_ready && r < e->world; r++)
		n += e->tr[r].attached || e->tr[r].resetting || e->tr[r].pending_sock >= 0;
	return n;
}

void sess_detach(struct engine *e, struct trainer *t, bool evicted, const char *why)
{
	/* a seek it asked for and left before the answer: it resumes where it
	 * asked to go, and the next session starts with no seek pending */
	uint64_t resume = t->seek_pending ? t->restart_g : sess_first_unreleased(t);
	t->seek_pending = false;
	t->resume_g = resume;
	if (evicted && t->co) {
		atomic_store_explicit(&t->co->state, SEER_STATE_EVICTED, memory_order_release);
		sess_doorbell(t);
	}
	uint64_t ep, st;
	jobrec_pos(e, resume, &ep, &st);
	if (!t->done || evicted)
		log_info("trainer rank %u (pid %d) %s: %s; it resumes at epoch %llu step %llu",
			 t->rank, (int)t->pid, evicted ? "evicted" : "detached", why,
			 (unsigned long long)ep, (unsigned long long)st);
	resume_note(e, t);
	sess_close(e, t);
	t->attached = false;
	t->gen++;
	t->restart_g = resume;
	t->resetting = true;
	if (t->inflight == 0)
		sess_finish_reset(e, t);
}

void sess_finish_reset(struct engine *e, struct trainer *t)
{
	reset_stream(e, t, t->restart_g);
	if (t->seek_pending && t->attached) {
		t->seek_pending = false;
		struct seer_msg_seek r = {
			.kind = SEER_MSG_SEEK_OK, .start = t->restart_g,
			.prod = atomic_load_explicit(&t->co->prod, memory_order_relaxed),
		};
		/* the trainer skips to r.prod: what is before it is not unread */
		t->ring_skip = (uint32_t)r.prod;
		t->ring_skipping = true;
		if (sock_send(t->sock, &r, sizeof(r), NULL, 0) != (ssize_t)sizeof(r))
			sess_detach(e, t, false, "connection lost during seek");
		return;
	}
	if (t->pending_sock >= 0) {
		int sock = t->pending_sock;
		t->pending_sock = -1;
		uint64_t start = t->pending_start == UINT64_MAX ? t->resume_g : t->pending_start;
		uint32_t held = (uint32_t)MAX((uint64_t)t->pending_hello.held, e->cfg->job.max_held);
		if (open_session(e, t, sock, t->pending_pid, start, held) != 0)
			close(sock);
	}
}

void sess_evict(struct engine *e, struct trainer *t, const char *why)
{
	log_warn("trainer rank %u (pid %d) sent invalid control data (%s): disconnecting it",
		 t->rank, (int)t->pid, why);
	sess_detach(e, t, true, why);
}

static void handle_seek(struct engine *e, struct trainer *t, const struct seer_msg_seek *m)
{
	const char *bad = pf_releases(e, t); /* the client released everything before asking */
	if (bad)
		sess_evict(e, t, bad);
	if (!t->attached)
		return;
	struct seer_msg_seek r = { .kind = SEER_MSG_SEEK_OK };
	uint64_t g;
	if (t->seek_pending || explicit_start(e, m->epoch, m->step, &g) != 0) {
		r.status = t->seek_pending ? -EBUSY : -ERANGE; /* busy: a seek not yet answered */
		sock_send(t->sock, &r, sizeof(r), NULL, 0);
		return;
	}
	/* batches published after the client emptied its ring are dropped */
	for (uint32_t i = 0; i < t->nslots; i++)
		if (t->slots[i].st == SL_PUB)
			t->slots[i].st = SL_REL;
	t->gen++;
	t->restart_g = g;
	t->seek_pending = true;
	t->resetting = true;
	log_info("trainer rank %u seeks to epoch %llu step %llu (%u reads still landing in its "
		 "staging)", t->rank, (unsigned long long)m->epoch, (unsigned long long)m->step,
		 t->inflight);
	if (t->inflight == 0)
		sess_finish_reset(e, t);
}

void sess_on_sock(struct engine *e, struct trainer *t)
{
	union {
		struct seer_msg_seek seek;
		char raw[512];
	} m;
	ssize_t n = sock_recv(t->sock, &m, sizeof(m), NULL, NULL, 0);
	if (n == 0 || n == -ECONNRESET) {
		const char *bad = pf_releases(e, t); /* what it released before leaving counts */
		if (bad)
			sess_evict(e, t, bad);
		if (t->attached)
			sess_detach(e, t, false, t->done ? "job finished" : "connection closed");
		return;
	}
	if (n < 0) {
		if (n != -EAGAIN)
			sess_detach(e, t, false, strerror((int)-n));
		return;
	}
	if (n == (ssize_t)sizeof(m.seek) && m.seek.kind == SEER_MSG_SEEK) {
		handle_seek(e, t, &m.seek);
		return;
	}
	sess_evict(e, t, "unknown message on the socket");
}
