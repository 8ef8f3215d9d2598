/* The PFS emulator's per-file counter table and its stats document, built
 * with libjansson (escaping, numbers and layout are the library's;
 * docs/pfsemu.md "Counters" lists the fields).
 *
 * Threads: any FUSE worker (an open of .pfsemu/stats) and the main thread at
 * unmount; reads relaxed atomics, takes the per-file table's lock and the
 * model's lock (through pfsm_snapshot) one after the other, never nested.
 * Failure: jansson allocation failures abort like the x* helpers. */
#define _GNU_SOURCE
#include "emu.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/util/util.h"

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)

/* ---- per-file table ---------------------------------------------------------- */

static uint64_t hash_str(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

/* The entry for rel, created on first use. Never NULL (aborts on OOM). */
struct pf_file *pf_get(struct pf_table *t, const char *rel)
{
	uint64_t h = hash_str(rel);
	pthread_mutex_lock(&t->lock);
	if (t->nslots == 0) {
		t->nslots = 1024;
		t->slots = xcalloc(t->nslots, sizeof(*t->slots));
	}
	struct pf_file *f = t->slots[h & (t->nslots - 1)];
	for (; f; f = f->next)
		if (f->hash == h && strcmp(f->path, rel) == 0)
			goto out;
	if (t->count >= t->nslots) {
		size_t n = t->nslots * 2;
		struct pf_file **slots = xcalloc(n, sizeof(*slots));
		for (size_t i = 0; i < t->nslots; i++) {
			while (t->slots[i]) {
				struct pf_file *e = t->slots[i];
				t->slots[i] = e->next;
				e->next = slots[e->hash & (n - 1)];
				slots[e->hash & (n - 1)] = e;
			}
		}
		free(t->slots);
		t->slots = slots;
		t->nslots = n;
	}
	size_t len = strlen(rel);
	f = xcalloc(1, sizeof(*f) + len + 1);
	memcpy(f->path, rel, len + 1);
	f->hash = h;
	f->next = t->slots[h & (t->nslots - 1)];
	t->slots[h & (t->nslots - 1)] = f;
	t->count++;
out:
	pthread_mutex_unlock(&t->lock);
	return f;
}

void pf_free_all(struct pf_table *t)
{
	for (size_t i = 0; i < t->nslots; i++) {
		while (t->slots[i]) {
			struct pf_file *e = t->slots[i];
			t->slots[i] = e->next;
			free(e);
		}
	}
	free(t->slots);
	t->slots = NULL;
	t->nslots = t->count = 0;
}


static json_t *must(json_t *v)
{
	if (!v) {
		log_error("out of memory building the stats document");
		abort();
	}
	return v;
}

static json_t *jint(uint64_t v)
{
	return must(json_integer(v > INT64_MAX ? INT64_MAX : (json_int_t)v));
}

static json_t *jreal(double v)
{
	return must(json_real(v));
}

/* A JSON string of s. Names are bytes: one that is not valid UTF-8 is shown
 * with every byte >= 0x80 written as the four characters \xNN. */
static json_t *jstr(const char *s)
{
	json_t *v = json_string(s ? s : "");
	if (v)
		return v;
	size_t n = strlen(s);
	char *e = xmalloc(4 * n + 1), *p = e;
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c < 0x80)
			*p++ = (char)*c;
		else
			p += sprintf(p, "\\x%02x", *c);
	}
	*p = '\0';
	v = must(json_string(e));
	free(e);
	return v;
}

static void put(json_t *obj, const char *key, json_t *v)
{
	if (json_object_set_new(obj, key, v) != 0) {
		log_error("out of memory building the stats document");
		abort();
	}
}

static json_t *config_json(void)
{
	const struct emu_opts *o = &emu.o;
	const struct pfsm_config *c = &emu.model.c;
	json_t *j = must(json_object());
	put(j, "preset", o->preset ? jstr(o->preset) : json_null());
	put(j, "bandwidth_Bps", jint(o->bandwidth));
	put(j, "burst_bytes", jint(o->burst));
	put(j, "latency_ms", jreal(o->latency_ms));
	put(j, "meta_latency_ms", jreal(o->meta_latency_ms));
	put(j, "max_inflight", jint(o->max_inflight));
	put(j, "ost_inflight", jint(o->ost_inflight));
	put(j, "meta_inflight", jint(o->meta_inflight));
	put(j, "osts", jint(o->osts));
	put(j, "rpc_size", jint(c->rpc_size));
	put(j, "readahead_bytes", jint(o->readahead));
	put(j, "max_read", jint(o->max_read));
	put(j, "threads", jint(o->threads));
	put(j, "attr_timeout_s", jreal(o->attr_timeout));
	put(j, "fault_rate", jreal(o->fault_rate));
	json_t *kinds = must(json_array());
	for (unsigned i = 0; i < emu.nkinds; i++)
		json_array_append_new(kinds, jstr(fault_names[emu.kinds[i]]));
	put(j, "fault_kinds", kinds);
	put(j, "fault_seed", jint(o->fault_seed));
	put(j, "fault_path", jstr(o->fault_path));
	put(j, "stats_per_file", json_boolean(o->stats_per_file));
	return j;
}

static json_t *totals_json(const struct pfsm_snap *s)
{
	const struct emu_totals *t = &emu.t;
	const struct pfsm_queue_snap *mount = &s->q[0];
	json_t *j = must(json_object());
	uint64_t nfaults = 0;
	json_t *faults = must(json_object());
	for (int k = 0; k < FAULT_NKINDS; k++) {
		nfaults += LD(t->faults[k]);
		put(faults, fault_names[k], jint(LD(t->faults[k])));
	}
	put(j, "reads", jint(LD(t->reads)));
	put(j, "bytes", jint(LD(t->bytes)));
	put(j, "eof_reads", jint(LD(t->eof_reads)));
	put(j, "rpcs", jint(s->k.rpcs));
	put(j, "rpc_bytes", jint(s->k.rpc_bytes));
	json_t *ra = must(json_object());
	put(ra, "rpcs", jint(s->k.ra_rpcs));
	put(ra, "bytes", jint(s->k.ra_bytes));
	put(ra, "hit_bytes", jint(s->k.ra_hit_bytes));
	put(ra, "unused_bytes", jint(s->k.ra_unused_bytes));
	put(j, "readahead", ra);
	put(j, "opens", jint(LD(t->opens)));
	put(j, "getattrs", jint(LD(t->getattrs)));
	put(j, "opendirs", jint(LD(t->opendirs)));
	put(j, "readlinks", jint(LD(t->readlinks)));
	put(j, "meta_ops", jint(s->k.meta_ops));
	put(j, "errors_injected", jint(nfaults));
	put(j, "faults", faults);
	put(j, "io_errors", jint(LD(t->io_errors)));
	json_t *w = must(json_object());
	put(w, "writes", jint(LD(t->writes)));
	put(w, "bytes", jint(LD(t->write_bytes)));
	put(w, "write_time_s", jreal((double)LD(t->write_ns) / 1e9));
	put(w, "eio", jint(LD(t->write_eio)));
	put(w, "enospc", jint(LD(t->write_enospc)));
	put(w, "fsyncs", jint(LD(t->fsyncs)));
	put(w, "renames", jint(LD(t->renames)));
	put(w, "unlinks", jint(LD(t->unlinks)));
	put(w, "creates", jint(LD(t->creates)));
	put(j, "write", w);
	put(j, "busy_s", jreal((double)s->busy_ns / 1e9));
	put(j, "read_time_s", jreal((double)LD(t->read_ns) / 1e9));
	put(j, "queue_wait_s", jreal((double)mount->wait_ns / 1e9));
	put(j, "inflight", jint(mount->inflight));
	put(j, "max_inflight_seen", jint(mount->hwm));
	return j;
}

static json_t *queues_json(const struct pfsm_snap *s)
{
	json_t *a = must(json_array());
	for (size_t i = 0; i < s->nq; i++) {
		const struct pfsm_queue_snap *q = &s->q[i];
		json_t *j = must(json_object());
		put(j, "name", jstr(q->name));
		put(j, "limit", jint(q->limit));
		put(j, "requests", jint(q->requests));
		put(j, "wait_s", jreal((double)q->wait_ns / 1e9));
		put(j, "inflight", jint(q->inflight));
		put(j, "max_inflight_seen", jint(q->hwm));
		json_array_append_new(a, j);
	}
	return a;
}

static int pf_cmp(const void *a, const void *b)
{
	return strcmp((*(struct pf_file *const *)a)->path, (*(struct pf_file *const *)b)->path);
}

/* Files opened, read or faulted since the reset, sorted by path. */
static json_t *files_json(size_t *count)
{
	json_t *a = must(json_array());
	pthread_mutex_lock(&emu.files.lock);
	struct pf_file **list = xcalloc(emu.files.count + 1, sizeof(*list));
	size_t n = 0;
	for (size_t i = 0; i < emu.files.nslots; i++)
		for (struct pf_file *f = emu.files.slots[i]; f; f = f->next)
			if (LD(f->opens) || LD(f->reads) || LD(f->faults))
				list[n++] = f;
	qsort(list, n, sizeof(*list), pf_cmp);
	for (size_t i = 0; i < n; i++) {
		struct pf_file *f = list[i];
		json_t *j = must(json_object());
		put(j, "path", jstr(f->path));
		put(j, "opens", jint(LD(f->opens)));
		put(j, "reads", jint(LD(f->reads)));
		put(j, "bytes", jint(LD(f->bytes)));
		put(j, "rpcs", jint(LD(f->rpcs)));
		put(j, "rpc_bytes", jint(LD(f->rpc_bytes)));
		put(j, "errors_injected", jint(LD(f->faults)));
		json_array_append_new(a, j);
	}
	pthread_mutex_unlock(&emu.files.lock);
	free(list);
	*count = n;
	return a;
}

char *stats_render(size_t *len)
{
	uint64_t now = now_ns();
	struct pfsm_snap s;
	pfsm_snapshot(&emu.model, now, &s);
	json_t *root = must(json_object());
	put(root, "format", jint(STATS_FORMAT));
	put(root, "pid", jint((uint64_t)getpid()));
	put(root, "source", jstr(emu.src));
	put(root, "mountpoint", jstr(emu.mnt));
	put(root, "label", jstr(emu.o.label));
	put(root, "uptime_s", jreal((double)(now - emu.start_ns) / 1e9));
	uint64_t reset = LD(emu.reset_ns);
	put(root, "since_reset_s", jreal(now > reset ? (double)(now - reset) / 1e9 : 0.0));
	put(root, "config", config_json());
	json_t *totals = totals_json(&s);
	put(root, "totals", totals);
	put(root, "queues", queues_json(&s));
	if (emu.o.stats_per_file) {
		size_t n = 0;
		put(root, "files", files_json(&n));
		put(totals, "files", jint(n));
	}
	pfsm_snap_free(&s);
	char *doc = json_dumps(root, JSON_INDENT(1) | JSON_REAL_PRECISION(9));
	json_decref(root);
	if (!doc) {
		log_error("out of memory rendering the stats document");
		abort();
	}
	size_t n = strlen(doc);
	char *out = xmalloc(n + 2);
	memcpy(out, doc, n);
	out[n] = '\n';
	out[n + 1] = '\0';
	free(doc);
	*len = n + 1;
	return out;
}
