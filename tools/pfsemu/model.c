/* The PFS emulator's timing model (see model.h for what it owns, its threads
 * and its failure behaviour; docs/pfsemu.md for the model as users see it).
 *
 * Every admission happens under m->lock at a time `now` that never decreases
 * from one call to the next: callers pass the clock they read on arrival, and
 * one that read it just before another took the lock first is moved up to the
 * latest arrival seen (m->clock; microseconds). Starts in one queue therefore
 * never decrease, which is what makes "the earliest-ending slot" the slot
 * that frees first. */
#define _GNU_SOURCE
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/util/util.h"

/* ---- queues: N servers, FIFO ------------------------------------------------ */

static void heap_push(struct pfsm_queue *q, struct pfsm_slot s)
{
	if (q->n == q->cap) {
		q->cap = q->cap ? 2 * q->cap : 16;
		q->h = xrealloc(q->h, q->cap * sizeof(*q->h));
	}
	size_t i = q->n++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (q->h[p].end <= s.end)
			break;
		q->h[i] = q->h[p];
		i = p;
	}
	q->h[i] = s;
}

static void heap_pop(struct pfsm_queue *q)
{
	struct pfsm_slot last = q->h[--q->n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= q->n)
			break;
		if (c + 1 < q->n && q->h[c + 1].end < q->h[c].end)
			c++;
		if (last.end <= q->h[c].end)
			break;
		q->h[i] = q->h[c];
		i = c;
	}
	if (q->n)
		q->h[i] = last;
}

/* Requests that ended by now are idle for every later admission. */
static void q_expire(struct pfsm_queue *q, uint64_t now)
{
	while (q->n && q->h[0].end <= now)
		heap_pop(q);
}

/* The earliest time a request arriving at now may start in q. */
static uint64_t q_avail(const struct pfsm_queue *q, uint64_t now)
{
	if (!q->limit || q->n < q->limit)
		return now;
	return MAX(now, q->h[0].end);
}

/* Requests in flight at t (no earlier than the last arrival): those running
 * at t, and the servers whose next request waits for the one running at t
 * (a request that starts later than t took over a server busy until then). */
static uint64_t q_inflight_at(const struct pfsm_queue *q, uint64_t t)
{
	uint64_t k = 0;
	for (size_t i = 0; i < q->n; i++) {
		const struct pfsm_slot *s = &q->h[i];
		k += s->start <= t ? t < s->end : s->prev_end > t;
	}
	return k;
}

/* Admit [start, end) (start >= q_avail): a full queue gives up its
 * earliest-ending slot, which has ended by start. */
static void q_admit(struct pfsm_queue *q, uint64_t arrival, uint64_t start, uint64_t end)
{
	uint64_t prev_end = 0;
	if (q->limit && q->n >= q->limit) {
		prev_end = q->h[0].end;
		heap_pop(q);
	}
	heap_push(q, (struct pfsm_slot){ start, end, prev_end });
	q->requests++;
	q->wait_ns += start - arrival;
	uint64_t k = q_inflight_at(q, start);
	if (k > q->hwm)
		q->hwm = k;
}

static void q_init(struct pfsm_queue *q, const char *name, uint64_t limit)
{
	memset(q, 0, sizeof(*q));
	str_copy(q->name, sizeof(q->name), name);
	q->limit = limit;
}

/* ---- busy time: union of every request's [start, end) ------------------------ */

static void busy_add(struct pfsm *m, uint64_t now, uint64_t a, uint64_t b)
{
	if (b <= a)
		return;
	size_t k = 0;
	for (size_t i = 0; i < m->nseg; i++) {
		struct pfsm_slot s = m->seg[i];
		if (s.end <= now) {          /* over: nothing later starts before now */
			m->busy_done += s.end - s.start;
			continue;
		}
		if (s.end < a || s.start > b) {
			m->seg[k++] = s;
			continue;
		}
		a = MIN(a, s.start);          /* overlaps: merged into the new one */
		b = MAX(b, s.end);
	}
	m->nseg = k;
	if (m->nseg == m->capseg) {
		m->capseg = m->capseg ? 2 * m->capseg : 8;
		m->seg = xrealloc(m->seg, m->capseg * sizeof(*m->seg));
	}
	m->seg[m->nseg++] = (struct pfsm_slot){ a, b, 0 };
}

static uint64_t busy_at(const struct pfsm *m, uint64_t now)
{
	uint64_t t = m->busy_done;
	for (size_t i = 0; i < m->nseg; i++)
		if (m->seg[i].start < now)
			t += MIN(m->seg[i].end, now) - m->seg[i].start;
	return t;
}

/* ---- bandwidth ----------------------------------------------------------------- */

/* Grant `bytes` to an RPC that reaches the link at `eligible`: the time its
 * last byte has passed. Charged in call order (FIFO-fair per RPC). */
static uint64_t bucket_grant(struct pfsm *m, uint64_t bytes, uint64_t eligible)
{
	if (!m->c.bandwidth || !bytes)
		return eligible;
	uint64_t cost = (uint64_t)((unsigned __int128)bytes * 1000000000u / m->c.bandwidth);
	uint64_t start = MAX(m->tat, eligible);
	m->tat = start + cost;
	uint64_t due = m->tat > m->burst_ns ? m->tat - m->burst_ns : 0;
	return MAX(due, eligible);
}

/* One request through the mount queue and q2: its completion time. */
static uint64_t reserve(struct pfsm *m, struct pfsm_queue *q2, uint64_t now, uint64_t lat,
			uint64_t bytes)
{
	q_expire(&m->mount, now);
	q_expire(q2, now);
	uint64_t start = MAX(q_avail(&m->mount, now), q_avail(q2, now));
	uint64_t end = bucket_grant(m, bytes, start + lat);
	q_admit(&m->mount, now, start, end);
	q_admit(q2, now, start, end);
	busy_add(m, now, start, end);
	return end;
}

/* ---- public ----------------------------------------------------------------------- */

void pfsm_init(struct pfsm *m, const struct pfsm_config *c, uint64_t now)
{
	memset(m, 0, sizeof(*m));
	m->c = *c;
	m->clock = now;
	pthread_mutex_init(&m->lock, NULL);
	if (c->bandwidth)
		m->burst_ns = (uint64_t)((unsigned __int128)c->burst * 1000000000u / c->bandwidth);
	q_init(&m->mount, "mount", c->mount_limit);
	q_init(&m->mdt, "mdt", c->meta_limit);
	m->ost = xcalloc(c->osts, sizeof(*m->ost));
	for (unsigned i = 0; i < c->osts; i++) {
		char name[16];
		snprintf(name, sizeof(name), "ost%u", i);
		q_init(&m->ost[i], name, c->ost_limit);
	}
}

void pfsm_destroy(struct pfsm *m)
{
	free(m->mount.h);
	free(m->mdt.h);
	for (unsigned i = 0; i < m->c.osts; i++)
		free(m->ost[i].h);
	free(m->ost);
	free(m->seg);
	pthread_mutex_destroy(&m->lock);
}

uint64_t pfsm_charge(struct pfsm *m, uint64_t now, uint64_t bytes)
{
	pthread_mutex_lock(&m->lock);
	now = m->clock = MAX(m->clock, now);
	uint64_t end = bucket_grant(m, bytes, now);
	busy_add(m, now, now, end);
	pthread_mutex_unlock(&m->lock);
	return end;
}

uint64_t pfsm_meta(struct pfsm *m, uint64_t now)
{
	pthread_mutex_lock(&m->lock);
	now = m->clock = MAX(m->clock, now);
	uint64_t end = reserve(m, &m->mdt, now, m->c.meta_lat_ns, 0);
	m->k.meta_ops++;
	pthread_mutex_unlock(&m->lock);
	return end;
}

unsigned pfsm_ost_of(const struct pfsm *m, const char *path)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (const char *s = path; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return (unsigned)(h % m->c.osts);
}

void pfsm_file_init(struct pfsm_file *f, unsigned ost)
{
	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->lock, NULL);
	f->ost = ost;
	f->next = UINT64_MAX;
}

/* Drop every readahead piece; returns the bytes nobody read (beyond f->next). */
static uint64_t ra_drop(struct pfsm_file *f)
{
	uint64_t unused = 0;
	for (size_t i = 0; i < f->np; i++) {
		uint64_t from = f->next == UINT64_MAX ? 0 : f->next;
		uint64_t a = MAX(f->p[i].off, from), b = f->p[i].off + f->p[i].len;
		if (b > a)
			unused += b - a;
	}
	f->np = 0;
	f->win = 0;
	return unused;
}

static void ra_push(struct pfsm_file *f, uint64_t off, uint64_t len, uint64_t end)
{
	if (f->np == f->cap) {
		f->cap = f->cap ? 2 * f->cap : 8;
		f->p = xrealloc(f->p, f->cap * sizeof(*f->p));
	}
	f->p[f->np++] = (struct pfsm_piece){ off, len, end };
}

void pfsm_file_close(struct pfsm *m, struct pfsm_file *f)
{
	pthread_mutex_lock(&f->lock);
	uint64_t unused = ra_drop(f);
	pthread_mutex_unlock(&f->lock);
	if (unused) {
		pthread_mutex_lock(&m->lock);
		m->k.ra_unused_bytes += unused;
		pthread_mutex_unlock(&m->lock);
	}
	free(f->p);
	f->p = NULL;
	pthread_mutex_destroy(&f->lock);
}

/* Readahead bookkeeping for a read of [off, end): updates the sequence state,
 * finds the pieces that cover the read (*covered = the first byte not
 * covered, *wait = when the covering pieces arrive) and returns the end of
 * the extent to fetch now (> end when readahead is due). *unused gets the
 * bytes of a dropped window. */
static uint64_t ra_plan(const struct pfsm_config *c, struct pfsm_file *f, uint64_t off,
			uint64_t end, uint64_t fsize, uint64_t *covered, uint64_t *wait,
			uint64_t *unused)
{
	f->nreads++;
	if (f->next == off) {
		f->seq++;
	} else {
		*unused += ra_drop(f);
		f->seq = 1;
	}
	size_t first = 0;                      /* pieces read past: consumed */
	while (first < f->np && f->p[first].off + f->p[first].len <= off)
		first++;
	if (first) {
		memmove(f->p, f->p + first, (f->np - first) * sizeof(*f->p));
		f->np -= first;
	}

	*covered = off;
	size_t i = 0;
	for (; i < f->np && *covered < end && f->p[i].off <= *covered; i++) {
		*covered = MIN(end, MAX(*covered, f->p[i].off + f->p[i].len));
		*wait = MAX(*wait, f->p[i].end);
	}
	if (*covered < end && i < f->np) /* a hole in the window: start it again */
		*unused += ra_drop(f);
	if (f->seq < 2)
		return end;
	f->win = MIN(f->win + c->rpc_size, c->ra_max);
	/* the window ends on an RPC boundary (Lustre aligns it the same way) */
	uint64_t target = (end + f->win + c->rpc_size - 1) / c->rpc_size * c->rpc_size;
	return MAX(MIN(target, fsize), end);
}

/* Where the RPC holding byte pos ends: readahead extents are cut on RPC
 * boundaries, a plain read in RPC-sized pieces from its first byte. */
static uint64_t rpc_cut(const struct pfsm_config *c, uint64_t pos, uint64_t upto,
			uint64_t end)
{
	uint64_t cut = upto > end ? pos / c->rpc_size * c->rpc_size + c->rpc_size
				  : pos + c->rpc_size;
	return MIN(cut, upto);
}

void pfsm_read(struct pfsm *m, struct pfsm_file *f, uint64_t now, uint64_t off, uint64_t n,
	       uint64_t fsize, struct pfsm_read *r)
{
	const struct pfsm_config *c = &m->c;
	uint64_t end = off + n, wait = 0, covered = off, unused = 0, upto = end;
	memset(r, 0, sizeof(*r));

	pthread_mutex_lock(&f->lock);
	if (c->ra_max)
		upto = ra_plan(c, f, off, end, MAX(fsize, end), &covered, &wait, &unused);
	/* fetch from the first byte neither read nor in flight */
	uint64_t from = covered;
	if (covered >= end && f->np)
		from = MAX(end, f->p[f->np - 1].off + f->p[f->np - 1].len);

	pthread_mutex_lock(&m->lock);
	now = m->clock = MAX(m->clock, now);
	for (uint64_t pos = from; pos < upto;) {
		uint64_t len = rpc_cut(c, pos, upto, end) - pos;
		uint64_t t = reserve(m, &m->ost[f->ost], now, c->lat_ns, len);
		r->rpcs++;
		r->rpc_bytes += len;
		if (pos < end)
			wait = MAX(wait, t);
		if (pos + len > end) {
			m->k.ra_bytes += pos + len - MAX(pos, end);
			m->k.ra_rpcs += pos >= end;
			ra_push(f, pos, len, t);
		}
		pos += len;
	}
	r->hit_bytes = covered - off;
	m->k.rpcs += r->rpcs;
	m->k.rpc_bytes += r->rpc_bytes;
	m->k.ra_hit_bytes += r->hit_bytes;
	m->k.ra_unused_bytes += unused;
	pthread_mutex_unlock(&m->lock);
	f->next = end;
	pthread_mutex_unlock(&f->lock);
	r->done = MAX(wait, now);
}

void pfsm_rpc(struct pfsm *m, struct pfsm_file *f, uint64_t now, uint64_t bytes,
	      struct pfsm_read *r)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_lock(&m->lock);
	now = m->clock = MAX(m->clock, now);
	r->done = reserve(m, &m->ost[f->ost], now, m->c.lat_ns, bytes);
	r->rpcs = 1;
	r->rpc_bytes = bytes;
	m->k.rpcs++;
	m->k.rpc_bytes += bytes;
	pthread_mutex_unlock(&m->lock);
}

static void q_reset(struct pfsm_queue *q, uint64_t now)
{
	q->requests = 0;
	q->wait_ns = 0;
	q->hwm = q_inflight_at(q, now);
}

void pfsm_reset(struct pfsm *m, uint64_t now)
{
	pthread_mutex_lock(&m->lock);
	now = MAX(m->clock, now);
	memset(&m->k, 0, sizeof(m->k));
	q_reset(&m->mount, now);
	q_reset(&m->mdt, now);
	for (unsigned i = 0; i < m->c.osts; i++)
		q_reset(&m->ost[i], now);
	m->busy_done = 0;
	size_t k = 0;
	for (size_t i = 0; i < m->nseg; i++) {
		struct pfsm_slot s = m->seg[i];
		s.start = MAX(s.start, now);
		if (s.start < s.end)
			m->seg[k++] = s;
	}
	m->nseg = k;
	pthread_mutex_unlock(&m->lock);
}

static void q_snap(const struct pfsm_queue *q, uint64_t now, struct pfsm_queue_snap *s)
{
	memcpy(s->name, q->name, sizeof(s->name));
	s->limit = q->limit;
	s->requests = q->requests;
	s->wait_ns = q->wait_ns;
	s->hwm = q->hwm;
	s->inflight = q_inflight_at(q, now);
}

void pfsm_snapshot(struct pfsm *m, uint64_t now, struct pfsm_snap *s)
{
	pthread_mutex_lock(&m->lock);
	s->k = m->k;
	s->busy_ns = busy_at(m, now);
	s->nq = 2 + m->c.osts;
	s->q = xcalloc(s->nq, sizeof(*s->q));
	q_snap(&m->mount, now, &s->q[0]);
	q_snap(&m->mdt, now, &s->q[1]);
	for (unsigned i = 0; i < m->c.osts; i++)
		q_snap(&m->ost[i], now, &s->q[2 + i]);
	pthread_mutex_unlock(&m->lock);
}

void pfsm_snap_free(struct pfsm_snap *s)
{
	free(s->q);
	s->q = NULL;
}
