/* libseer: the trainer side of the seer protocol (see proto/seer_proto.h) —
 * taking, releasing and seeking the batch stream, and closing.
 *
 * Threads: seer_next and seer_seek are the stream's single consumer (a second
 * thread inside them at once gets -EBUSY); seer_release and seer_close may be
 * called from any thread (client.h). Never aborts or exits: every failure is
 * a return code plus seer_errmsg(). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../src/common/base.h"
#include "../src/common/shm.h"
#include "client.h"

#define SPIN_ITERS 2000
#define DEATH_CHECK_NS 200000000ull /* wake at least this often to notice a dead daemon */

int client_unusable(struct seer_client *c, const char *fn)
{
	if (atomic_load(&c->forked)) {
		err_set("%s: this client was opened by process %d; after fork() the connection "
			"stays with the parent: connect anew in the child", fn, (int)c->owner);
		return -EBADF;
	}
	if (atomic_load(&c->broken)) {
		err_set("%s: an earlier seek got no answer in time, so this client's stream "
			"position is unknown: close it and connect again", fn);
		return -EPIPE;
	}
	return 0;
}

/* Wake a sleeping daemon after our consumer or release index moved, unless
 * it asked to be woken only once our ring runs low (ring_below) and fewer
 * than that many releases wait for it: seerd records our position when it
 * takes them, so a trainer that releases without taking (the batches a
 * TorchLoader took ahead, at an epoch's end) still has at most ring_below
 * of them unrecorded should seerd die (docs/resume.md, SIGKILL). */
static void notify_daemon(struct seer_client *c)
{
	/* pairs with the daemon's fence between setting need_wakeup and its last
	 * look at our indices before it sleeps */
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(&c->shm.co->need_wakeup, memory_order_acquire))
		return;
	uint32_t below = atomic_load_explicit(&c->shm.co->ring_below, memory_order_relaxed);
	if (below == 0 || ring_count(&c->out) < below || ring_count(&c->rel) >= below) {
		uint64_t one = 1;
		ssize_t r UNUSED = write(c->efd, &one, sizeof(one));
	}
}

/* Hand slot k back to the daemon; c->lock held. */
static int push_release(struct seer_client *c, uint32_t k)
{
	atomic_store(&c->slots[k].held, false);
	c->nheld--;
	/* cannot be full: every slot is in the ring at most once */
	if (ring_push(&c->rel, k) != 0) {
		err_set("release ring full (daemon stopped consuming?)");
		return SEER_EPROTO;
	}
	return 0;
}

static void release_all(struct seer_client *c)
{
	pthread_mutex_lock(&c->lock);
	for (uint32_t i = 0; i < c->nslots && c->nheld; i++)
		if (atomic_load(&c->slots[i].held))
			push_release(c, i);
	pthread_mutex_unlock(&c->lock);
	notify_daemon(c);
}

void client_destroy(struct seer_client *c, bool tell_daemon)
{
	/* Batches still held are not done (the trainer stops before finishing
	 * them: seerd resumes the rank at the first one, docs/resume.md),
	 * unless the user was handed the job's last batch: then the rank
	 * finished, and seerd must see every batch released. */
	if (tell_daemon && c->slots && c->shm.co && !c->rc.lost_deadline && c->handed_next >= c->plan.total)
		release_all(c);
	prefault_free(c); /* the helper thread stops before the arena goes */
	while (c->rc.old) {
		struct old_session *o = c->rc.old;
		c->rc.old = o->next;
		if (o->arena) {
			munmap((void *)o->arena, o->arena_size);
			munmap((void *)o->co, o->co_size);
			munmap(o->ci, o->ci_size);
		}
		free(o->held);
		free(o->slots);
		free(o->wslots);
		free(o);
	}
	free(c->plan.plan_rec);
	if (c->plan.sampler)
		seer_sampler_free(c->plan.sampler);
	if (c->shm.arena)
		munmap((void *)c->shm.arena, c->shm.arena_size);
	if (c->shm.co)
		munmap((void *)c->shm.co, c->shm.co_size);
	if (c->shm.ci)
		munmap(c->shm.ci, c->shm.ci_size);
	int fds[3] = { c->shm.arena_fd, c->efd, c->sock };
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(c->slots);
	free(c->wslots);
	if (!atomic_load(&c->forked)) /* a fork child may have copied it locked */
		pthread_mutex_destroy(&c->lock);
	free(c);
}

static int state_error(struct seer_client *c)
{
	uint32_t st = atomic_load_explicit(&c->shm.co->state, memory_order_acquire);
	if (st == SEER_STATE_STOPPING) {
		err_set("seerd is shutting down");
		return SEER_ESHUTDOWN;
	}
	if (st == SEER_STATE_EVICTED) {
		err_set("seerd disconnected this trainer (it sent invalid control data or was "
			"replaced)");
		return SEER_EEVICTED;
	}
	return 0;
}

/* The daemon found that it cannot prepare our next batch until we release
 * one, and we released nothing since (seer_proto.h, held_block): waiting
 * would be for ever. */
static int held_error(struct seer_client *c)
{
	if (!atomic_load_explicit(&c->shm.co->held_block, memory_order_acquire) ||
	    atomic_load_explicit(&c->shm.co->held_rel, memory_order_relaxed) !=
	    atomic_load_explicit(&c->shm.ci->rel_prod, memory_order_relaxed))
		return 0;
	uint32_t held = 0;
	uint64_t oldest = UINT64_MAX, oe = 0, os = 0;
	pthread_mutex_lock(&c->lock);
	for (uint32_t i = 0; i < c->nslots; i++) {
		if (!atomic_load(&c->slots[i].held))
			continue;
		held++;
		if (c->slots[i].global < oldest) {
			oldest = c->slots[i].global;
			oe = c->slots[i].epoch;
			os = c->slots[i].step;
		}
	}
	pthread_mutex_unlock(&c->lock);
	uint32_t max = c->shm.co->max_held;
	char what[320];
	if (held >= max)
		snprintf(what, sizeof(what), "release a batch before asking for more, or declare "
			 "more (seer_options_t.max_held) or raise [job] max_held (%u) and [cache] "
			 "staging in seerd's config", max);
	else if (oldest != UINT64_MAX && c->next_global - oldest > held)
		snprintf(what, sizeof(what), "seerd frees batch slots and staging in stream order, "
			 "so the batch held since %llu batches ago keeps every later batch's room "
			 "taken: release it (copy what you keep)",
			 (unsigned long long)(c->next_global - oldest));
	else
		snprintf(what, sizeof(what), "raise [cache] staging in seerd's config (its log warns "
			 "when staging is short of lookahead + max_held batches)");
	err_set("seer_next: this trainer holds %u batch%s (the oldest: epoch %llu step %llu) and "
		"seerd cannot prepare the next one until it releases one (staging and batch slots "
		"are freed in order, and are full): %s", held, held == 1 ? "" : "es",
		(unsigned long long)oe, (unsigned long long)os, what);
	return -EDEADLK;
}

static int closed_while_waiting(void)
{
	err_set("seer_next: the client was closed by another thread while waiting");
	return -EBADF;
}

/* Whether the daemon's end of the socket is still open (EOF or an error:
 * it exited or was killed). */
static bool daemon_alive(struct seer_client *c)
{
	char b;
	ssize_t r = recv(c->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) ||
	       atomic_load(&c->closing);
}

/* The daemon's socket closed under us: a clean stop told us first (the
 * STOPPING state), anything else is a daemon that died. */
static int daemon_gone(struct seer_client *c)
{
	if (atomic_load_explicit(&c->shm.co->state, memory_order_acquire) == SEER_STATE_STOPPING) {
		err_set("seerd is shutting down (it stopped the job and exited)");
		return SEER_ESHUTDOWN;
	}
	err_set("seerd at %s went away without stopping the job (it crashed or was killed); "
		"restart it: the job resumes from its saved positions (resume = auto) or from "
		"your checkpoint record", c->sock_path);
	return SEER_EDAEMON;
}

/* Sleep on the doorbell until a slot index arrives, the deadline passes, the
 * daemon stops or goes away, or the client is closed. A stop is seen before
 * any batch still in the ring: after it, not one more batch is taken. */
static int wait_batch(struct seer_client *c, int timeout_ms, uint32_t *idx)
{
	uint64_t t0 = now_ns();
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : t0 + (uint64_t)timeout_ms * 1000000ull;
	for (;;) {
		uint32_t bell = atomic_load_explicit(&c->shm.co->doorbell, memory_order_acquire);
		atomic_store_explicit(&c->shm.ci->waiting, 1, memory_order_relaxed);
		/* pairs with the daemon's fence between bumping the doorbell and
		 * reading `waiting` */
		atomic_thread_fence(memory_order_seq_cst);
		int rc = 0;
		if (atomic_load(&c->closing)) {
			rc = closed_while_waiting();
		} else if ((rc = state_error(c)) != 0) {
			/* stopping or evicted */
		} else if (ring_pop(&c->out, idx) == 0) {
			atomic_fetch_add_explicit(&c->shm.ci->stall_ns, now_ns() - t0, memory_order_relaxed);
			atomic_fetch_add_explicit(&c->shm.ci->stalls, 1, memory_order_relaxed);
		} else if ((rc = held_error(c)) != 0) {
			/* its own held batches keep its next batch from being made */
		} else if (now_ns() >= deadline) {
			err_set("no batch within %d ms", timeout_ms);
			rc = -ETIMEDOUT;
		} else {
			futex_wait(&((struct seer_ctrl_out *)c->shm.co)->doorbell, bell,
				   (int64_t)MIN(deadline - now_ns(), DEATH_CHECK_NS));
			atomic_store_explicit(&c->shm.ci->waiting, 0, memory_order_relaxed);
			if (ring_count(&c->out) != 0 || atomic_load(&c->closing))
				continue;
			if (!daemon_alive(c)) /* a close shuts our reading side: not gone */
				return daemon_gone(c);
			continue;
		}
		atomic_store_explicit(&c->shm.ci->waiting, 0, memory_order_relaxed);
		return rc;
	}
}

static uint64_t dtype_size(uint32_t dt)
{
	switch (dt) {
	case SEER_DT_U8: return 1;
	case SEER_DT_F16: return 2;
	case SEER_DT_F32: return 4;
	default: return 0;
	}
}

/* A batch tensor the daemon described: n samples of a whole, consistent
 * shape inside the arena, of a dtype and layout we know. */
static bool tensor_ok(const struct seer_client *c, const struct seer_wire_tensor *t, uint32_t n)
{
	uint64_t es = dtype_size(t->dtype);
	if (!es || t->ndim != 4 || t->dims[0] != n || t->offset % 64 != 0 ||
	    (t->layout != SEER_LY_NCHW && t->layout != SEER_LY_NHWC) ||
	    t->type >= c->shm.ntypes || t->offset > c->shm.arena_size)
		return false;
	uint64_t one = es;
	for (int k = 1; k < 4; k++) {
		if (t->dims[k] == 0 || t->dims[k] > (1u << 16))
			return false;
		one *= t->dims[k];
	}
	return one == t->sample_bytes && (n == 0 || one <= (c->shm.arena_size - t->offset) / n);
}

/* Take slot idx as the next batch: checked, copied to private state. */
static int deliver(struct seer_client *c, uint32_t idx, seer_batch_t **out)
{
	if (idx >= c->nslots) {
		err_set("daemon published slot %u of %u", idx, c->nslots);
		return SEER_EPROTO;
	}
	struct seer_wire_slot ws; /* one read of what the daemon wrote */
	memcpy(&ws, c->wslots[idx], sizeof(ws));
	struct slot *s = &c->slots[idx];
	pthread_mutex_lock(&c->lock);
	bool held = atomic_load(&s->held);
	bool tensor = (ws.flags & SEER_SLOT_TENSOR) != 0;
	if (tensor && !tensor_ok(c, &ws.tensor, ws.n)) {
		pthread_mutex_unlock(&c->lock);
		err_set("daemon published batch %llu with a malformed tensor descriptor",
			(unsigned long long)ws.global);
		return SEER_EPROTO;
	}
	if (held || ws.global != c->next_global || ws.n > c->w.batch_size) {
		pthread_mutex_unlock(&c->lock);
		err_set("daemon published batch %llu (slot %u%s, %u samples), expected %llu",
			(unsigned long long)ws.global, idx, held ? ", already held" : "", ws.n,
			(unsigned long long)c->next_global);
		return SEER_EPROTO;
	}
	uint64_t d = handle_next_delivery();
	s->ws = c->wslots[idx];
	s->global = ws.global;
	s->n = ws.n;
	s->epoch = ws.epoch;
	s->step = ws.step;
	s->status = ws.status;
	s->has_tensor = tensor;
	s->tensor = ws.tensor;
	if (ws.status)
		snprintf(s->msg, sizeof(s->msg), "%.*s", (int)sizeof(ws.msg) - 1, ws.msg);
	atomic_store(&s->delivery, d);
	atomic_store(&s->held, true);
	c->nheld++;
	pthread_mutex_unlock(&c->lock);
	c->next_global++;
	if (!c->take_ahead)
		c->handed_next = c->next_global;
	uint64_t epoch, step;
	sampler_tl_pos(&c->plan.tl, c->next_global, &epoch, &step);
	if (step == 0)
		c->epoch_marker = true;
	*out = handle_batch_token(c, idx, d);
	return ws.status ? SEER_EBATCH : 0;
}

/* The daemon is gone (rc: SEER_EDAEMON, or SEER_ESHUTDOWN for a stop) and
 * c reconnects: drop the old connection (a stopping daemon waits for its
 * trainers to leave) and try the socket until c's deadline or the caller's.
 * 0 once the stream goes on, -ETIMEDOUT when the caller's deadline came
 * first (the next call goes on trying), or the final error. */
static int try_reconnect(struct seer_client *c, int rc, uint64_t call_deadline)
{
	if (!c->rc.lost_deadline) {
		char why[SEER_ERRMSG_MAX];
		snprintf(why, sizeof(why), "%s", seer_errmsg());
		shutdown(c->sock, SHUT_RDWR);
		c->rc.lost_deadline = now_ns() + (uint64_t)c->rc.reconnect_ms * 1000000ull;
		c->rc.lost_code = rc;
		err_set("%s", why);
	}
	char why[SEER_ERRMSG_MAX];
	snprintf(why, sizeof(why), "%s", seer_errmsg());
	for (;;) {
		if (atomic_load(&c->closing))
			return closed_while_waiting();
		uint64_t now = now_ns();
		if (now >= c->rc.lost_deadline) {
			err_set("%s; no seerd took this rank back within %d ms (SEER_OPT_RECONNECT)",
				why, c->rc.reconnect_ms);
			return c->rc.lost_code;
		}
		if (now >= call_deadline) {
			err_set("no batch: waiting for a restarted seerd at %s", c->sock_path);
			return -ETIMEDOUT;
		}
		rc = client_reconnect(c, MIN(c->rc.lost_deadline, call_deadline));
		if (rc == 0) {
			c->rc.lost_deadline = 0;
			return 0;
		}
		/* nobody listening yet, or the old daemon still draining: again */
		if (rc != -ETIMEDOUT && rc != -ENOENT && rc != -ECONNREFUSED &&
		    rc != SEER_ESHUTDOWN && rc != -EPIPE && rc != -ECONNRESET &&
		    rc != SEER_EPROTO) {
			c->rc.lost_deadline = 0;
			return rc;
		}
		sleep_ns(20 * 1000000ull);
	}
}

static int next_batch(struct seer_client *c, int timeout_ms, seer_batch_t **out)
{
	int rc;
	/* A binding that takes ahead asks past an epoch's end or the job's
	 * while batches it took wait for its user: the daemon's state comes
	 * first (a stop, or a reconnect that takes the stream back to the
	 * first batch not handed), not a marker it has already seen. */
	if (c->take_ahead && c->handed_next < c->next_global &&
	    (c->epoch_marker || c->next_global >= c->plan.total)) {
		uint64_t dl = timeout_ms < 0 ? UINT64_MAX : now_ns() + (uint64_t)timeout_ms * 1000000ull;
		if (c->rc.lost_deadline)
			rc = try_reconnect(c, c->rc.lost_code, dl);
		else if ((rc = daemon_alive(c) ? state_error(c) : daemon_gone(c)) != 0 &&
			 (rc == SEER_ESHUTDOWN || rc == SEER_EDAEMON) && c->rc.reconnect_ms)
			rc = try_reconnect(c, rc, dl);
		if (rc != 0)
			return rc;
	}
	if (c->epoch_marker) {
		c->epoch_marker = false;
		/* every page the daemon has filled by now, mapped before the next
		 * epoch's reads: after the cold epoch, the whole cache (none
		 * after the last epoch) */
		prefault_epoch_end(c, c->next_global < c->plan.total);
		return SEER_EEPOCH;
	}
	if (c->next_global >= c->plan.total)
		return SEER_EEND;
	uint64_t ep, st;
	sampler_tl_pos(&c->plan.tl, c->next_global, &ep, &st); /* (an elastic epoch too) */
	if (ep + 1 < c->w.epochs)
		prefault_start(c); /* the cold epoch's background prefault, for epochs to come */
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : now_ns() + (uint64_t)timeout_ms * 1000000ull;
	if (c->rc.lost_deadline && (rc = try_reconnect(c, c->rc.lost_code, deadline)) != 0)
		return rc;
	/* a stop began, or the daemon died: not one more batch, even one already
	 * published (the daemon records this rank's position as what it took;
	 * a dead one would never learn of the release). One syscall a batch. */
	rc = daemon_alive(c) ? state_error(c) : daemon_gone(c);
	if ((rc == SEER_ESHUTDOWN || rc == SEER_EDAEMON) && c->rc.reconnect_ms) {
		if ((rc = try_reconnect(c, rc, deadline)) != 0)
			return rc;
		rc = state_error(c);
	}
	if (rc != 0)
		return rc;
	uint32_t idx = 0; /* (set by the pop that succeeds; gcc -O1 cannot tell) */
	rc = -EAGAIN;
	for (int i = 0; i < SPIN_ITERS && rc != 0; i++) {
		if ((rc = ring_pop(&c->out, &idx)) != 0)
			cpu_relax();
	}
	if (rc != 0 && atomic_load(&c->closing))
		return closed_while_waiting();
	while (rc != 0 && (rc = wait_batch(c, timeout_ms, &idx)) != 0) {
		if ((rc != SEER_EDAEMON && rc != SEER_ESHUTDOWN) || !c->rc.reconnect_ms)
			return rc;
		/* the daemon went away: continue with a restarted one */
		if ((rc = try_reconnect(c, rc, deadline)) != 0)
			return rc;
		if (timeout_ms >= 0) {
			uint64_t now = now_ns();
			timeout_ms = now >= deadline ? 0 : (int)((deadline - now) / 1000000);
		}
		rc = -EAGAIN;
	}
	notify_daemon(c); /* our consumer index moved: the daemon may prepare more */
	rc = deliver(c, idx, out);
	/* the epoch's last batch (another epoch follows): the big prefault
	 * pass now, before the trainer's step ends (in a collective, often),
	 * not after it at the boundary, where a trainer with less left to map
	 * would begin the next epoch and wait in its first step's collective
	 * for the others; the helper maps the later fills meanwhile, and the
	 * boundary's pass only what is left */
	if (c->epoch_marker && c->next_global < c->plan.total && (rc == 0 || rc == SEER_EBATCH))
		prefault_last_batch(c);
	return rc;
}

/* Enter the stream's consumer side (seer_next, seer_seek): one thread. */
static int consumer_enter(struct seer_client *c, const char *fn)
{
	int rc = client_unusable(c, fn);
	if (rc != 0)
		return rc;
	if (atomic_exchange(&c->busy, 1)) {
		err_set("%s: another thread is in seer_next or seer_seek on this client; a client "
			"has one stream and one consumer thread (use one client per thread, or "
			"serialise the calls)", fn);
		return -EBUSY;
	}
	return 0;
}

SEER_API int seer_next(seer_client_t *h, int timeout_ms, seer_batch_t **out)
{
	if (out)
		*out = NULL;
	struct seer_client *c;
	int rc = handle_acquire(h, "seer_next", &c);
	if (rc != 0)
		return rc;
	if (!out) {
		err_set("seer_next: out is NULL (pass the address of a seer_batch_t *)");
		rc = -EINVAL;
	} else if ((rc = consumer_enter(c, "seer_next")) == 0) {
		rc = next_batch(c, timeout_ms, out);
		atomic_store(&c->busy, 0);
	}
	handle_release(c);
	return rc;
}

SEER_API int seer_arena_reader(seer_client_t *h, const void *base)
{
	struct seer_client *c;
	int rc = handle_acquire(h, "seer_arena_reader", &c);
	if (rc != 0)
		return rc;
	if ((rc = consumer_enter(c, "seer_arena_reader")) != 0)
		goto out;
	/* mapped in full (msync says ENOMEM otherwise) and showing our header */
	if (base && base != c->shm.arena &&
	    (msync((void *)base, c->shm.arena_size, MS_ASYNC) != 0 ||
	     memcmp(base, c->shm.arena, sizeof(struct seer_arena_hdr)) != 0)) {
		err_set("seer_arena_reader: %p is not a mapping of this client's arena (map all "
			"seer_arena_size() bytes of seer_arena_fd(), page-aligned)", base);
		rc = -EINVAL;
	} else {
		prefault_retarget(c, base ? base : c->shm.arena);
	}
	atomic_store(&c->busy, 0);
out:
	handle_release(c);
	return rc;
}

SEER_API int seer_release(seer_client_t *h, seer_batch_t *b)
{
	struct seer_client *c;
	uint32_t hidx, k;
	uint64_t d;
	int rc = handle_acquire(h, "seer_release", &c);
	if (rc != 0)
		return rc;
	if ((rc = handle_batch_decode(b, "seer_release", &hidx, &k, &d)) != 0 ||
	    (rc = client_unusable(c, "seer_release")) != 0)
		goto out;
	if (hidx != c->hidx) {
		err_set("seer_release: the batch belongs to another client");
		rc = SEER_ENOTHELD;
		goto out;
	}
	pthread_mutex_lock(&c->lock);
	if (d < c->rc.first_delivery) {
		/* taken before a reconnect: released with the old session (whose
		 * memory goes with the last of its batches the user held) */
		client_old_release(c, d);
		pthread_mutex_unlock(&c->lock);
		goto out;
	}
	if (k >= c->nslots || atomic_load(&c->slots[k].delivery) != d) {
		err_set("seer_release: stale batch handle: released before, and its slot now holds "
			"another batch (which stays held)");
		rc = -ESTALE;
	} else if (!atomic_load(&c->slots[k].held)) {
		err_set("seer_release: that batch was already released");
		rc = SEER_ENOTHELD;
	} else {
		rc = push_release(c, k);
	}
	pthread_mutex_unlock(&c->lock);
	if (rc == 0)
		notify_daemon(c);
out:
	handle_release(c);
	return rc;
}

/* SEEK -> SEEK_OK, each step bounded by the connect timeout. */
static int seek_exchange(struct seer_client *c, uint64_t epoch, uint64_t step,
			 struct seer_msg_seek *r)
{
	uint64_t deadline = now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
	struct seer_msg_seek m = { .kind = SEER_MSG_SEEK, .epoch = epoch, .step = step };
	bool sent = false;
	for (;;) {
		if (atomic_load(&c->closing)) {
			err_set("seer_seek: the client was closed by another thread");
			return -EBADF;
		}
		ssize_t n = sent ? sock_recv(c->sock, r, sizeof(*r), NULL, NULL, 0)
				 : sock_send(c->sock, &m, sizeof(m), NULL, 0);
		if (n == -EAGAIN) {
			uint64_t now = now_ns();
			struct pollfd pf = { .fd = c->sock, .events = sent ? POLLIN : POLLOUT };
			if (now < deadline &&
			    (poll(&pf, 1, (int)MIN((deadline - now) / 1000000 + 1, 1000000ull)) >= 0 ||
			     errno == EINTR))
				continue;
			/* asked and not answered: the daemon may still restart the stream */
			atomic_store(&c->broken, sent);
			err_set("seek: seerd did not %s within the connect timeout (%d ms): is it "
				"stopped (SIGSTOP) or overloaded?", sent ? "answer" : "take the request",
				c->timeout_ms);
			return -ETIMEDOUT;
		}
		if (!sent && n == (ssize_t)sizeof(m)) {
			sent = true;
			continue;
		}
		if (!sent) {
			err_set("seek: daemon connection lost");
			return SEER_ESHUTDOWN;
		}
		if (n != (ssize_t)sizeof(*r) || r->kind != SEER_MSG_SEEK_OK) {
			err_set("seek: no answer from the daemon");
			return n == 0 ? SEER_ESHUTDOWN : SEER_EPROTO;
		}
		return 0;
	}
}

SEER_API int seer_seek(seer_client_t *h, uint64_t epoch, uint64_t step)
{
	struct seer_client *c;
	int rc = handle_acquire(h, "seer_seek", &c);
	if (rc != 0)
		return rc;
	if ((rc = consumer_enter(c, "seer_seek")) != 0)
		goto out;
	if (epoch >= c->w.epochs || step >= sampler_tl_batches(&c->plan.tl, epoch)) {
		err_set("seek to epoch %llu step %llu: the job has %llu epochs of %llu steps%s",
			(unsigned long long)epoch, (unsigned long long)step,
			(unsigned long long)c->w.epochs,
			(unsigned long long)sampler_tl_batches(&c->plan.tl, epoch),
			epoch == c->plan.tl.epoch && c->plan.tl.nb != c->plan.tl.bpe ? " (re-sharded on resume)" : "");
		rc = -ERANGE;
		goto done;
	}
	release_all(c);
	struct seer_msg_seek r;
	if ((rc = seek_exchange(c, epoch, step, &r)) != 0)
		goto done;
	if (r.status != 0) {
		err_set("seek refused by the daemon: %s", seer_strerror(r.status));
		rc = r.status < 0 ? r.status : SEER_EPROTO;
		goto done;
	}
	/* entries published before the restart were reclaimed by the daemon */
	atomic_store_explicit(&c->shm.ci->cons, (uint32_t)r.prod, memory_order_release);
	c->next_global = c->handed_next = r.start;
	c->epoch_marker = false;
done:
	atomic_store(&c->busy, 0);
out:
	handle_release(c);
	return rc;
}

SEER_API void seer_close(seer_client_t *h)
{
	struct seer_client *c;
	if (!h || handle_acquire(h, "seer_close", &c) != 0)
		return; /* NULL, or closed already: nothing to do */
	if (!handle_close_begin(c)) {
		handle_release(c); /* another thread is closing it */
		return;
	}
	uint32_t hidx = c->hidx;
	client_destroy(c, !atomic_load(&c->forked));
	handle_close_end(hidx);
}

SEER_API int seer_handed(seer_client_t *h, seer_batch_t *b)
{
	struct seer_client *c;
	struct slot *s;
	int rc = handle_acquire(h, "seer_handed", &c);
	if (rc != 0)
		return rc;
	if (!c->take_ahead)
		goto out; /* seer_next handed it */
	uint32_t hidx, k;
	uint64_t d;
	if ((rc = handle_batch_decode(b, "seer_handed", &hidx, &k, &d)) != 0)
		goto out;
	if (hidx != c->hidx) {
		err_set("seer_handed: the batch belongs to another client");
		rc = -EINVAL;
		goto out;
	}
	if ((rc = consumer_enter(c, "seer_handed")) != 0)
		goto out;
	pthread_mutex_lock(&c->lock);
	s = k < c->nslots ? &c->slots[k] : NULL;
	if (d < c->rc.first_delivery || !s || atomic_load(&s->delivery) != d ||
	    !atomic_load(&s->held)) {
		err_set("seer_handed: stale batch handle (released, or taken before a reconnect: "
			"the new session delivers it again)");
		rc = -ESTALE;
	} else if (s->global != c->handed_next) {
		uint64_t e0, s0;
		sampler_tl_pos(&c->plan.tl, c->handed_next, &e0, &s0);
		err_set("seer_handed: batch %llu:%llu handed out of order: the next batch to hand "
			"is %llu:%llu", (unsigned long long)s->epoch, (unsigned long long)s->step,
			(unsigned long long)e0, (unsigned long long)s0);
		rc = -EINVAL;
	} else {
		c->handed_next++;
	}
	pthread_mutex_unlock(&c->lock);
	atomic_store(&c->busy, 0);
out:
	handle_release(c);
	return rc;
}

SEER_API int seer_alive(seer_client_t *h)
{
	struct seer_client *c;
	int rc = handle_acquire(h, "seer_alive", &c);
	if (rc != 0)
		return rc;
	/* the consumer's own call: a reconnect in seer_next replaces the socket
	 * and the mapping this reads, so another thread in it gets -EBUSY */
	if ((rc = consumer_enter(c, "seer_alive")) == 0) {
		if (c->rc.lost_deadline)
			rc = c->rc.lost_code;
		else
			rc = daemon_alive(c) ? state_error(c) : daemon_gone(c);
		atomic_store(&c->busy, 0);
	}
	handle_release(c);
	return rc;
}

/* ---- checkpoint records ----------------------------------------------------------- */

int client_state(struct seer_client *c, uint8_t **buf, size_t *len)
{
	int rc = 0;
	if (!c->plan.sampler) {
		seer_record_t *plan = NULL;
		if (c->plan.plan_rec && (rc = seer_record_decode(c->plan.plan_rec, c->plan.plan_rec_len, &plan)) < 0)
			return rc;
		unsigned flags = (c->w.drop_last ? SEER_SAMPLER_DROP_LAST : 0) |
				 (c->w.shuffle ? 0 : SEER_SAMPLER_NO_SHUFFLE);
		rc = seer_sampler_resume(c->w.nsamples, c->w.seed, (uint32_t)c->world, c->w.batch_size,
					 flags, c->w.dataset_hash, plan, &c->plan.sampler);
		seer_record_free(plan);
		if (rc < 0)
			return rc;
	}
	uint64_t epoch, step;
	sampler_tl_pos(&c->plan.tl, c->handed_next, &epoch, &step);
	seer_record_t *r;
	if ((rc = seer_sampler_record(c->plan.sampler, (uint32_t)c->rank, epoch, step, &r)) < 0)
		return rc;
	int64_t n = seer_record_encode(r, NULL, 0);
	*buf = malloc((size_t)n);
	if (!*buf) {
		seer_record_free(r);
		err_set("out of memory for a %lld-byte record", (long long)n);
		return -ENOMEM;
	}
	seer_record_encode(r, *buf, (size_t)n);
	*len = (size_t)n;
	seer_record_free(r);
	return 0;
}

SEER_API int64_t seer_state(seer_client_t *h, void *buf, size_t cap)
{
	struct seer_client *c;
	int rc = handle_acquire(h, "seer_state", &c);
	if (rc != 0)
		return rc;
	int64_t out;
	if ((rc = consumer_enter(c, "seer_state")) != 0) {
		out = rc;
	} else {
		uint8_t *rec;
		size_t len;
		rc = client_state(c, &rec, &len);
		atomic_store(&c->busy, 0);
		out = rc;
		if (rc == 0) {
			if (buf && cap >= len)
				memcpy(buf, rec, len);
			out = (int64_t)len;
			free(rec);
		}
	}
	handle_release(c);
	return out;
}
