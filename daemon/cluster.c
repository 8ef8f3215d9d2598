/* The control plane over MPI (see cluster.h for the messages): start-up
 * collectives, then non-blocking roll/map/abort/stop messages and the
 * completion barrier, all on the dispatcher thread. Failure: start-up
 * disagreements are one message on every node; a fatal message from any
 * node stops them all with its text. */
#define _GNU_SOURCE
#include "cluster.h"

#include <errno.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "../src/util/util.h"
#include "seer.h"

enum { TAG_ROLL = 101, TAG_MAP = 102, TAG_ABORT = 103, TAG_CFG = 104, TAG_STOP = 105 };

#define ABORT_MAX 512

struct pending_send {
	struct pending_send *next;
	MPI_Request req;
	void *buf;
};

struct cluster {
	bool mpi;
	uint32_t node, nnodes;
	/* node 0: what each rank's node is, as reported, and the plan */
	uint32_t world;
	int32_t *rank_node;
	uint32_t known;
	struct cluster_plan plan; /* node 0: the first roll's (key checked against the
				     others'); elsewhere: the map's */
	uint32_t plan_node;       /* node 0: whose plan that is */
	bool have_plan;
	bool map_sent;
	bool map_received;
	double rolled_at;         /* when this node's trainers had all attached (0: not yet) */
	struct pending_send *sends;
	/* done barrier */
	bool in_barrier, barrier_done;
	MPI_Request barrier;
	bool stop;
	char fatal[ABORT_MAX];
};

static bool launched_by_mpi(void)
{
	static const char *vars[] = { "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",
				      "PMI_SIZE" };
	for (size_t i = 0; i < ARRAY_SIZE(vars); i++)
		if (getenv(vars[i]))
			return true;
	return false;
}

int cluster_init(struct cluster **out, int *argc, char ***argv, uint32_t *node, uint32_t *nnodes)
{
	struct cluster *cl = xcalloc(1, sizeof(*cl));
	cl->nnodes = 1;
	if (launched_by_mpi()) {
		int provided, rank, size;
		if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
			free(cl);
			return -EIO;
		}
		MPI_Comm_rank(MPI_COMM_WORLD, &rank);
		MPI_Comm_size(MPI_COMM_WORLD, &size);
		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
		cl->mpi = true;
		cl->node = (uint32_t)rank;
		cl->nnodes = (uint32_t)size;
	}
	*node = cl->node;
	*nnodes = cl->nnodes;
	*out = cl;
	return 0;
}

bool cluster_is_mpi(const struct cluster *cl) { return cl->mpi; }

static void reap_sends(struct cluster *cl, bool wait)
{
	struct pending_send **pp = &cl->sends;
	while (*pp) {
		struct pending_send *s = *pp;
		int done = 0;
		if (wait)
			MPI_Wait(&s->req, MPI_STATUS_IGNORE), done = 1;
		else
			MPI_Test(&s->req, &done, MPI_STATUS_IGNORE);
		if (done) {
			*pp = s->next;
			free(s->buf);
			free(s);
		} else {
			pp = &s->next;
		}
	}
}

void cluster_fini(struct cluster *cl, int code)
{
	if (!cl)
		return;
	if (cl->mpi) {
		if (code != 0 && cl->nnodes > 1) {
			/* a peer may be blocked waiting for us: do not let it hang */
			MPI_Abort(MPI_COMM_WORLD, code);
		}
		reap_sends(cl, true);
		MPI_Finalize();
	}
	free(cl->rank_node);
	free(cl->plan.rec);
	free(cl);
}

/* ---- start-up collectives ------------------------------------------------ */

int cluster_allgather(struct cluster *cl, const void *mine, size_t len, void *all)
{
	if (!cl->mpi) {
		memcpy(all, mine, len);
		return 0;
	}
	if (len > INT32_MAX)
		return -EOVERFLOW;
	return MPI_Allgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, MPI_COMM_WORLD) ==
			       MPI_SUCCESS ? 0 : -EIO;
}

/* Waits by polling with 1 ms sleeps, not in a blocking MPI call: Open MPI
 * spins a core there, and node 0 may be timing the PFS meanwhile. */
int cluster_bcast(struct cluster *cl, void *buf, size_t len)
{
	if (!cl->mpi || cl->nnodes == 1)
		return 0;
	if (len > INT32_MAX)
		return -EOVERFLOW;
	MPI_Request rq;
	if (MPI_Ibcast(buf, (int)len, MPI_BYTE, 0, MPI_COMM_WORLD, &rq) != MPI_SUCCESS)
		return -EIO;
	for (;;) {
		int done = 0;
		if (MPI_Test(&rq, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
			return -EIO;
		if (done)
			return 0;
		sleep_ns(1000000);
	}
}

static int bcast_big(void *buf, uint64_t len)
{
	const uint64_t chunk = 1ull << 30;
	for (uint64_t off = 0; off < len; off += chunk) {
		int n = (int)MIN(chunk, len - off);
		if (MPI_Bcast((char *)buf + off, n, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
			return -EIO;
	}
	return 0;
}

/* The value of `key` ("section.key") in a config_dump_job text, or "(unset)". */
static void dump_value(const char *dump, const char *key, char *out, size_t outlen)
{
	size_t kl = strlen(key);
	for (const char *p = dump; *p;) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		if (len > kl + 3 && strncmp(p, key, kl) == 0 && strncmp(p + kl, " = ", 3) == 0) {
			snprintf(out, outlen, "%.*s", (int)(len - kl - 3), p + kl + 3);
			return;
		}
		p += len + (eol ? 1 : 0);
	}
	snprintf(out, outlen, "(unset)");
}

/* "key is 'x' there, 'y' on node 0" for every job key that differs */
static void diff_dumps(const char *mine, const char *theirs, char *out, size_t outlen)
{
	size_t n = 0;
	out[0] = '\0';
	for (const char *p = theirs; *p && n < outlen;) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		char key[160], there[512], here[512];
		size_t kl = strcspn(p, " ");
		snprintf(key, sizeof(key), "%.*s", (int)MIN(kl, sizeof(key) - 1), p);
		dump_value(theirs, key, there, sizeof(there));
		dump_value(mine, key, here, sizeof(here));
		if (strcmp(here, there) != 0)
			n += (size_t)snprintf(out + n, outlen - n, "%s%s is '%s' there, '%s' on node 0",
					      n ? "; " : "", key, there, here);
		p += len + (eol ? 1 : 0);
	}
}

int cluster_agree_config(struct cluster *cl, const struct seer_config *cfg, char *err,
			 size_t errlen)
{
	if (!cl->mpi || cl->nnodes == 1)
		return 0;
	uint64_t h = config_job_hash(cfg);
	uint64_t *all = xcalloc(cl->nnodes, sizeof(uint64_t));
	MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
	int bad = -1;
	for (uint32_t k = 1; k < cl->nnodes; k++)
		if (all[k] != all[0]) {
			bad = (int)k;
			break;
		}
	free(all);
	if (bad < 0)
		return 0;
	char msg[1024] = "";
	char *dump = config_dump_job(cfg);
	if ((int)cl->node == bad) {
		MPI_Send(dump, (int)strlen(dump) + 1, MPI_CHAR, 0, TAG_CFG, MPI_COMM_WORLD);
	} else if (cl->node == 0) {
		MPI_Status st;
		MPI_Probe(bad, TAG_CFG, MPI_COMM_WORLD, &st);
		int n;
		MPI_Get_count(&st, MPI_CHAR, &n);
		char *theirs = xcalloc((size_t)n + 1, 1);
		MPI_Recv(theirs, n, MPI_CHAR, bad, TAG_CFG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		char diff[900];
		diff_dumps(dump, theirs, diff, sizeof(diff));
		snprintf(msg, sizeof(msg), "node %d's job configuration differs from node 0's: %.850s; "
			 "every seerd of a job needs the same [dataset] and [job] settings", bad, diff);
		free(theirs);
	}
	free(dump);
	MPI_Bcast(msg, sizeof(msg), MPI_CHAR, 0, MPI_COMM_WORLD);
	snprintf(err, errlen, "%s", msg);
	return -EINVAL;
}

int cluster_share_catalog(struct cluster *cl, const struct catalog_opts *o, struct catalog **out,
			  char *err, size_t errlen)
{
	if (!cl->mpi || cl->nnodes == 1)
		return catalog_open(o, out, err, errlen);
	struct {
		int64_t rc;
		uint64_t len;
		char msg[1024];
	} hdr = { 0 };
	void *img = NULL;
	struct catalog *cat = NULL;
	if (cl->node == 0) {
		int rc = catalog_open(o, &cat, hdr.msg, sizeof(hdr.msg));
		if (rc == 0) {
			size_t len;
			rc = catalog_serialize(cat, &img, &len);
			hdr.len = len;
			if (rc != 0)
				snprintf(hdr.msg, sizeof(hdr.msg), "out of memory serializing the catalog");
		}
		hdr.rc = rc;
	}
	/* polled: the other nodes wait out node 0's scan without spinning a
	 * core (their start-up threads answer meanwhile) */
	if (cluster_bcast(cl, &hdr, sizeof(hdr)) != 0 && hdr.rc == 0) {
		hdr.rc = -EIO;
		snprintf(hdr.msg, sizeof(hdr.msg), "broadcasting the catalog's header failed (MPI)");
	}
	if (hdr.rc != 0) {
		snprintf(err, errlen, "%s%s", cl->node ? "node 0: " : "", hdr.msg);
		free(img);
		return (int)hdr.rc;
	}
	if (cl->node != 0) {
		img = malloc(hdr.len);
		if (!img) {
			log_error("out of memory for the %llu-byte catalog", (unsigned long long)hdr.len);
			abort();
		}
	}
	if (bcast_big(img, hdr.len) != 0) {
		snprintf(err, errlen, "broadcasting the catalog failed");
		free(img);
		catalog_free(cat);
		return -EIO;
	}
	int rc = 0;
	if (cl->node != 0)
		rc = catalog_deserialize(img, hdr.len, &cat, err, errlen);
	free(img);
	/* every node must see the same dataset: check a spread of files */
	char local[256] = "";
	if (rc == 0) {
		uint32_t step = MAX(1u, cat->nfiles / 16);
		for (uint32_t f = 0; f < cat->nfiles; f += step) {
			char path[4096];
			struct stat st;
			snprintf(path, sizeof(path), "%s/%s", cat->root, catalog_path(cat, f));
			if (stat(path, &st) != 0 || (uint64_t)st.st_size != cat->files[f].size) {
				snprintf(local, sizeof(local), "node %u sees %.180s %s", cl->node, path,
					 stat(path, &st) != 0 ? "missing" : "with another size");
				break;
			}
		}
	} else {
		snprintf(local, sizeof(local), "node %u cannot read the catalog: %.180s", cl->node, err);
	}
	char *all = xcalloc(cl->nnodes, sizeof(local));
	MPI_Allgather(local, sizeof(local), MPI_CHAR, all, sizeof(local), MPI_CHAR, MPI_COMM_WORLD);
	for (uint32_t k = 0; k < cl->nnodes; k++) {
		if (all[k * sizeof(local)]) {
			snprintf(err, errlen, "the dataset differs between nodes: %s (node 0 built the "
				 "catalog; every node must see the same dataset.path)",
				 all + k * sizeof(local));
			free(all);
			catalog_free(cat);
			return SEER_EDATASET;
		}
	}
	free(all);
	*out = cat;
	return 0;
}

/* ---- event-loop messages -------------------------------------------------- */

static void isend(struct cluster *cl, void *buf, int len, int dest, int tag)
{
	struct pending_send *s = xcalloc(1, sizeof(*s));
	s->buf = buf;
	MPI_Isend(buf, len, MPI_BYTE, dest, tag, MPI_COMM_WORLD, &s->req);
	s->next = cl->sends;
	cl->sends = s;
}

static void set_fatal(struct cluster *cl, const char *fmt, ...) PRINTF_LIKE(2, 3);
static void set_fatal(struct cluster *cl, const char *fmt, ...)
{
	if (cl->fatal[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cl->fatal, sizeof(cl->fatal), fmt, ap);
	va_end(ap);
}

void cluster_abort_all(struct cluster *cl, const char *msg)
{
	if (!cl->mpi)
		return;
	for (uint32_t k = 0; k < cl->nnodes; k++) {
		if (k == cl->node)
			continue;
		char *b = xcalloc(1, ABORT_MAX);
		snprintf(b, ABORT_MAX, "node %u: %s", cl->node, msg);
		isend(cl, b, ABORT_MAX, (int)k, TAG_ABORT);
	}
}

/* A run id (names this run's position files): random, never 0. */
static uint32_t new_run_id(void)
{
	uint32_t v = 0;
	if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
		v = (uint32_t)(now_ns() ^ ((uint64_t)getpid() << 16));
	return v | 1u;
}

/* node 0: a roll's plan must be the first roll's; the earliest start wins */
static bool roll_plan(struct cluster *cl, uint32_t from, const struct cluster_plan *p)
{
	if (!cl->have_plan) {
		cl->plan = *p;
		cl->plan.rec = p->rec_len ? xmalloc(p->rec_len) : NULL;
		if (p->rec_len)
			memcpy(cl->plan.rec, p->rec, p->rec_len);
		cl->plan_node = from;
		cl->have_plan = true;
		return true;
	}
	if (p->key != cl->plan.key) {
		set_fatal(cl, "the trainers on node %u resume from another plan than those on node "
			  "%u (plan %08x vs %08x: their checkpoint records differ, or one node resumes "
			  "from saved positions): give every rank the same checkpoint record",
			  from, cl->plan_node, p->key, cl->plan.key);
		return false;
	}
	cl->plan.start = MIN(cl->plan.start, p->start);
	return true;
}

/* node 0: the map message (world, run, key, start, record, rank_node) */
static void send_map(struct cluster *cl)
{
	const struct cluster_plan *p = &cl->plan;
	size_t len = (6 + (size_t)cl->world) * sizeof(uint32_t) + p->rec_len;
	for (uint32_t k = 1; k < cl->nnodes; k++) {
		uint32_t *b = xmalloc(len);
		b[0] = cl->world;
		b[1] = p->run;
		b[2] = p->key;
		b[3] = (uint32_t)p->start;
		b[4] = (uint32_t)(p->start >> 32);
		b[5] = p->rec_len;
		for (uint32_t r = 0; r < cl->world; r++)
			b[6 + r] = (uint32_t)cl->rank_node[r];
		if (p->rec_len)
			memcpy(b + 6 + cl->world, p->rec, p->rec_len);
		isend(cl, b, (int)len, (int)k, TAG_MAP);
	}
}

/* node 0: fold a roll call into the map; send the map once complete */
static void apply_roll(struct cluster *cl, uint32_t from, const struct cluster_plan *p,
		       const uint32_t *ranks, uint32_t n)
{
	if (cl->map_sent)
		return;
	uint32_t world = p->world;
	if (cl->world == 0) {
		cl->world = world;
		cl->rank_node = xmalloc(world * sizeof(int32_t));
		for (uint32_t r = 0; r < world; r++)
			cl->rank_node[r] = -1;
	}
	if (world != cl->world) {
		set_fatal(cl, "trainers on node %u have world size %u, those on another node %u",
			  from, world, cl->world);
		return;
	}
	if (!roll_plan(cl, from, p))
		return;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t r = ranks[i];
		if (r >= world) {
			set_fatal(cl, "node %u reported trainer rank %u of world %u", from, r, world);
			return;
		}
		if (cl->rank_node[r] >= 0 && (uint32_t)cl->rank_node[r] != from) {
			set_fatal(cl, "trainer rank %u connected to node %d and node %u: each rank "
				  "belongs to one node", r, cl->rank_node[r], from);
			return;
		}
		if (cl->rank_node[r] < 0) {
			cl->rank_node[r] = (int32_t)from;
			cl->known++;
		}
	}
	if (cl->known < world)
		return;
	/* everyone attached: publish the map, with this run's id */
	cl->plan.run = new_run_id();
	send_map(cl);
	cl->map_sent = true;
}

void cluster_roll(struct cluster *cl, const struct cluster_plan *plan, const uint32_t *ranks,
		  uint32_t n)
{
	if (cl->rolled_at == 0)
		cl->rolled_at = now_s();
	if (cl->node == 0) {
		apply_roll(cl, 0, plan, ranks, n);
		return;
	}
	size_t len = (7 + (size_t)n) * sizeof(uint32_t) + plan->rec_len;
	uint32_t *b = xmalloc(len);
	b[0] = cl->node;
	b[1] = plan->world;
	b[2] = n;
	b[3] = plan->key;
	b[4] = (uint32_t)plan->start;
	b[5] = (uint32_t)(plan->start >> 32);
	b[6] = plan->rec_len;
	memcpy(b + 7, ranks, n * sizeof(uint32_t));
	if (plan->rec_len)
		memcpy(b + 7 + n, plan->rec, plan->rec_len);
	isend(cl, b, (int)len, 0, TAG_ROLL);
}

/* A ROLL message, checked and applied (node 0). */
static void on_roll(struct cluster *cl, const uint8_t *buf, int n)
{
	const uint32_t *w = (const uint32_t *)buf;
	if (n < 28 || (size_t)n < (7 + (size_t)w[2]) * 4 ||
	    (size_t)n != (7 + (size_t)w[2]) * 4 + w[6]) {
		log_warn("ignoring a malformed roll message (%d bytes)", n);
		return;
	}
	struct cluster_plan p = { .world = w[1], .key = w[3], .rec_len = w[6],
				  .start = w[4] | (uint64_t)w[5] << 32,
				  .rec = (uint8_t *)(uintptr_t)(buf + (7 + (size_t)w[2]) * 4) };
	apply_roll(cl, w[0], &p, w + 7, w[2]);
}

/* A MAP message, checked and kept until cluster_poll hands it out. */
static bool on_map(struct cluster *cl, const uint8_t *buf, int n)
{
	const uint32_t *w = (const uint32_t *)buf;
	if (cl->map_received || n < 24 || (size_t)n < (6 + (size_t)w[0]) * 4 ||
	    (size_t)n != (6 + (size_t)w[0]) * 4 + w[5]) {
		log_warn("ignoring a malformed or second map message (%d bytes)", n);
		return false;
	}
	cl->world = w[0];
	free(cl->rank_node);
	cl->rank_node = xmalloc(cl->world * sizeof(int32_t));
	for (uint32_t r = 0; r < cl->world; r++)
		cl->rank_node[r] = (int32_t)w[6 + r];
	free(cl->plan.rec);
	cl->plan = (struct cluster_plan){ .world = w[0], .run = w[1], .key = w[2],
					  .start = w[3] | (uint64_t)w[4] << 32, .rec_len = w[5] };
	cl->plan.rec = w[5] ? xmalloc(w[5]) : NULL;
	if (w[5])
		memcpy(cl->plan.rec, buf + (6 + (size_t)w[0]) * 4, w[5]);
	return true;
}

bool cluster_poll(struct cluster *cl, struct cluster_plan *plan, uint32_t **rank_node,
		  const char **fatal)
{
	*fatal = NULL;
	bool got_map = false;
	if (cl->mpi) {
		reap_sends(cl, false);
		for (;;) {
			int flag = 0;
			MPI_Status st;
			if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st) !=
				    MPI_SUCCESS || !flag)
				break;
			int n;
			MPI_Get_count(&st, MPI_BYTE, &n);
			uint8_t *buf = xmalloc((size_t)MAX(n, 1));
			MPI_Recv(buf, n, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD,
				 MPI_STATUS_IGNORE);
			if (st.MPI_TAG == TAG_ROLL && cl->node == 0) {
				on_roll(cl, buf, n);
			} else if (st.MPI_TAG == TAG_MAP) {
				got_map |= on_map(cl, buf, n);
			} else if (st.MPI_TAG == TAG_STOP) {
				cl->stop = true;
			} else if (st.MPI_TAG == TAG_ABORT) {
				buf[MAX(n, 1) - 1] = '\0';
				set_fatal(cl, "%s", (const char *)buf);
			} else {
				log_warn("ignoring an unexpected control message (tag %d, %d bytes) from "
					 "node %d", st.MPI_TAG, n, st.MPI_SOURCE);
			}
			free(buf);
		}
	}
	/* node 0 (or a one-node job) applies its own map */
	if (cl->node == 0 && cl->map_sent && !cl->map_received)
		got_map = true;
	if (cl->fatal[0]) {
		*fatal = cl->fatal;
		return false;
	}
	if (got_map && !cl->map_received) {
		cl->map_received = true;
		*plan = cl->plan;
		plan->world = cl->world;
		plan->rec = cl->plan.rec_len ? xmalloc(cl->plan.rec_len) : NULL;
		if (cl->plan.rec_len)
			memcpy(plan->rec, cl->plan.rec, cl->plan.rec_len);
		*rank_node = xmalloc(cl->world * sizeof(uint32_t));
		for (uint32_t r = 0; r < cl->world; r++)
			(*rank_node)[r] = (uint32_t)cl->rank_node[r];
		return true;
	}
	if (cl->in_barrier && !cl->barrier_done) {
		int done = 0;
		MPI_Test(&cl->barrier, &done, MPI_STATUS_IGNORE);
		cl->barrier_done = done;
	}
	return false;
}

void cluster_stop_all(struct cluster *cl)
{
	if (!cl->mpi)
		return;
	for (uint32_t k = 0; k < cl->nnodes; k++)
		if (k != cl->node)
			isend(cl, xcalloc(1, 8), 8, (int)k, TAG_STOP);
}

bool cluster_stop_requested(struct cluster *cl)
{
	bool s = cl->stop;
	cl->stop = false;
	return s;
}

void cluster_local_done(struct cluster *cl)
{
	if (cl->in_barrier)
		return;
	cl->in_barrier = true;
	if (!cl->mpi) {
		cl->barrier_done = true;
		return;
	}
	MPI_Ibarrier(MPI_COMM_WORLD, &cl->barrier);
}

bool cluster_all_done(struct cluster *cl)
{
	if (cl->in_barrier && !cl->barrier_done && cl->mpi) {
		int done = 0;
		MPI_Test(&cl->barrier, &done, MPI_STATUS_IGNORE);
		cl->barrier_done = done;
	}
	return cl->barrier_done;
}

bool cluster_urgent(const struct cluster *cl)
{
	return cl->mpi && cl->rolled_at > 0 && !cl->map_received && now_s() - cl->rolled_at < 2.0;
}

bool cluster_busy(const struct cluster *cl)
{
	return cl->mpi && (!cl->map_received || (cl->in_barrier && !cl->barrier_done) || cl->sends);
}
