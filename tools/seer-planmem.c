/* seer-planmem: what one daemon's plan costs at scale. Builds, for node
 * --node of a job, what its seerd builds at start: the catalog (synthetic,
 * laid out like the `files` format: one file per sample under class
 * directories), the global owner map (plan_build) and the node's replica set
 * (plan_node_build), and prints the time each took, the bytes each holds and
 * the process's peak resident memory; then the node's forecast as seerd
 * makes it (forecast_tally_node on its own thread, forecast_node_forecast per request).
 * docs/planner.md ("Memory at scale") has the figures. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../src/catalog/catalog.h"
#include "../src/plan/forecast.h"
#include "../src/plan/plan.h"
#include "../src/sampler/sampler.h"
#include "../src/util/util.h"

static long peak_kib(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

/* A catalog as the files format would build it for n one-sample files in
 * 1000 class directories, paths like ImageNet's. */
static struct catalog *synthetic_catalog(uint64_t n, uint64_t size, uint64_t *bytes)
{
	struct catalog *c = xcalloc(1, sizeof(*c));
	c->root = xstrdup("/pfs/imagenet/train");
	c->nfiles = (uint32_t)n;
	c->nsamples = n;
	c->files = xcalloc(n, sizeof(*c->files));
	c->samples = xcalloc(n, sizeof(*c->samples));
	c->ndirs = 1001;
	c->dirs = xcalloc(c->ndirs, sizeof(*c->dirs));
	c->ntypes = 1;
	c->types = xcalloc(1, sizeof(*c->types));
	/* "nCCCCCCCC/nCCCCCCCC_IIIIIII.JPEG" and its NUL: 26 + the index's digits
	 * (at least 7) + 1 bytes */
	size_t digits = 7;
	for (uint64_t x = n / 10000000; x; x /= 10)
		digits++;
	size_t cap = n * (27 + digits) + 1001 * 16, used = 0;
	c->strpool = xmalloc(cap);
	for (uint64_t i = 0; i < n; i++) {
		uint32_t cls = (uint32_t)(i % 1000);
		c->files[i] = (struct catalog_file){ .size = size, .path_off = (uint32_t)used,
						 .nsamples = 1, .first = i };
		used += (size_t)snprintf(c->strpool + used, cap - used, "n%08u/n%08u_%07llu.JPEG",
					 cls, cls, (unsigned long long)i) + 1;
		c->samples[i] = (struct catalog_sample){ .offset = 0, .length = size, .file = (uint32_t)i,
						     .type = 0, .label = cls };
		c->total_bytes += size;
	}
	c->strpool_len = used;
	c->max_len = size;
	*bytes = n * (sizeof(struct catalog_file) + sizeof(struct catalog_sample)) + cap +
		 c->ndirs * sizeof(struct catalog_dir);
	return c;
}

/* Prints what one daemon holds and how long it took; t: catalog, owner map,
 * replicas build times; rss: peak KiB at start, after the catalog, after the
 * owner map. */
static void report(uint64_t n, uint64_t size, uint64_t nodes, uint64_t tpn, uint64_t epochs,
		   uint64_t batch, uint64_t node, uint64_t ram, uint64_t nvme, bool replicas,
		   uint64_t cat_bytes, const struct plan *p, const struct plan_node *nv,
		   const double t[3], const long rss[3])
{
	long peak = peak_kib();
	uint64_t plan_bytes = n * (sizeof(*p->tier) + sizeof(*p->owner) + sizeof(*p->off)) +
			      nodes * 2 * sizeof(uint64_t);
	uint64_t node_bytes = n * sizeof(*nv->idx) +
			      nv->nrepl * (sizeof(*nv->smp) + sizeof(*nv->tier) + sizeof(*nv->off) +
					   sizeof(*nv->due) + sizeof(*nv->ready));
	char a[32], b[32], d[32], e[32];
	printf("job      %llu samples x %s, %llu nodes x %llu trainers, %llu epochs, batch %llu; "
	       "node %llu: RAM %s, NVMe %s, replicas %s\n", (unsigned long long)n,
	       fmt_size(a, 32, size), (unsigned long long)nodes, (unsigned long long)tpn,
	       (unsigned long long)epochs, (unsigned long long)batch, (unsigned long long)node,
	       fmt_size(b, 32, ram), fmt_size(d, 32, nvme), replicas ? "on" : "off");
	printf("catalog  %s (synthetic, files layout)   built in %.2f s\n", fmt_size(a, 32, cat_bytes),
	       t[0]);
	printf("plan     %s (owner map: tier, owner, offset per sample)   built in %.2f s\n",
	       fmt_size(a, 32, plan_bytes), t[1]);
	printf("replicas %s (%llu replicas, %s of samples)   built in %.2f s\n",
	       fmt_size(a, 32, node_bytes), (unsigned long long)nv->nrepl,
	       fmt_size(b, 32, nv->repl_bytes), t[2]);
	printf("held     %s = catalog + plan + replicas; plan + replicas computed in %.2f s\n",
	       fmt_size(a, 32, cat_bytes + plan_bytes + node_bytes), t[1] + t[2]);
	printf("peak RSS %s (at start %s, after the catalog %s, after the owner map %s)\n",
	       fmt_size(a, 32, (uint64_t)peak * 1024), fmt_size(b, 32, (uint64_t)rss[0] * 1024),
	       fmt_size(d, 32, (uint64_t)rss[1] * 1024), fmt_size(e, 32, (uint64_t)rss[2] * 1024));
}

/* The node's forecast as seerd makes it: the tally (once, on a thread of its
 * own) and the forecast with rates (per `seerctl forecast`). */
static int report_forecast(const struct plan *p, const struct plan_node *nv,
			   const struct catalog *cat, const struct sampler_shape *sh, uint64_t epochs,
			   const uint32_t *rank_node, uint32_t node, const struct plan_cap *cap)
{
	long before = peak_kib();
	double t0 = now_s();
	struct forecast_tally ta;
	int rc = forecast_tally_node(&ta, p, nv, cat, NULL, sh, 0, epochs, rank_node, node, cap);
	double t_tally = now_s() - t0;
	if (rc) {
		fprintf(stderr, "seer-planmem: forecast_tally_node: %s\n", strerror(-rc));
		return 1;
	}
	struct forecast_node_epoch *f = xcalloc(epochs, sizeof(*f));
	struct forecast_rates r = { .compute_s = 0.05, .pfs_bw = 5.0 * (1ull << 30), .net_bw = 12.5e9 };
	t0 = now_s();
	rc = forecast_node_forecast(&ta, &r, f);
	double t_fc = now_s() - t0;
	long after = peak_kib();
	char a[32], b[32], c[32], d[32];
	printf("forecast %s held (%llu epochs tallied) + %s while counting (one epoch order); "
	       "counted in %.2f s, forecast with rates in %.2f ms; peak RSS %s (%s more)\n",
	       fmt_size(a, 32, epochs * (sizeof(*ta.ep) + sizeof(*f))), (unsigned long long)epochs,
	       fmt_size(b, 32, sh->n * sizeof(uint32_t)), t_tally, t_fc * 1e3,
	       fmt_size(c, 32, (uint64_t)after * 1024),
	       fmt_size(d, 32, (uint64_t)(after - before) * 1024));
	free(f);
	forecast_tally_free(&ta);
	return rc ? 1 : 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: seer-planmem --samples N --sample-size BYTES --nodes K\n"
		   "         [--trainers-per-node T] [--epochs E] [--batch B] [--seed S]\n"
		   "         [--ram BYTES] [--nvme BYTES] [--node k] [--replicas on|off]\n");
}

struct args {
	uint64_t n, size, nodes, tpn, epochs, batch, seed, ram, nvme, node;
	bool replicas;
};

/* 0, or an exit code (the message printed). */
static int parse_args(int argc, char **argv, struct args *a)
{
	*a = (struct args){ .tpn = 1, .epochs = 90, .batch = 32, .replicas = true };
	static const struct option lo[] = {
		{ "samples", 1, NULL, 'n' }, { "sample-size", 1, NULL, 's' }, { "nodes", 1, NULL, 'k' },
		{ "trainers-per-node", 1, NULL, 't' }, { "epochs", 1, NULL, 'e' },
		{ "batch", 1, NULL, 'b' }, { "seed", 1, NULL, 'S' }, { "ram", 1, NULL, 'r' },
		{ "nvme", 1, NULL, 'v' }, { "node", 1, NULL, 'N' }, { "replicas", 1, NULL, 'R' },
		{ "help", 0, NULL, 'h' }, { 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		int rc = 0;
		switch (c) {
		case 'n': rc = parse_u64(optarg, &a->n); break;
		case 's': rc = parse_size(optarg, &a->size); break;
		case 'k': rc = parse_u64(optarg, &a->nodes); break;
		case 't': rc = parse_u64(optarg, &a->tpn); break;
		case 'e': rc = parse_u64(optarg, &a->epochs); break;
		case 'b': rc = parse_u64(optarg, &a->batch); break;
		case 'S': rc = parse_u64(optarg, &a->seed); break;
		case 'r': rc = parse_size(optarg, &a->ram); break;
		case 'v': rc = parse_size(optarg, &a->nvme); break;
		case 'N': rc = parse_u64(optarg, &a->node); break;
		case 'R': rc = parse_bool(optarg, &a->replicas); break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return 2;
		}
		if (rc) {
			const char *name = "";
			for (const struct option *q = lo; q->name; q++)
				if (q->val == c)
					name = q->name;
			fprintf(stderr, "seer-planmem: invalid value '%s' for --%s\n", optarg, name);
			return 2;
		}
	}
	if (!a->n || !a->size || !a->nodes || !a->tpn || !a->epochs || !a->batch ||
	    a->node >= a->nodes || a->nodes > UINT16_MAX || a->nodes * a->tpn > UINT32_MAX) {
		usage(stderr);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	log_set_prog("seer-planmem");
	struct args A;
	int prc = parse_args(argc, argv, &A);
	if (prc)
		return prc;
	uint64_t n = A.n, size = A.size, nodes = A.nodes, tpn = A.tpn, epochs = A.epochs;
	uint64_t batch = A.batch, seed = A.seed, ram = A.ram, nvme = A.nvme, node = A.node;
	bool replicas = A.replicas;
	long base = peak_kib();
	double t0 = now_s();
	uint64_t cat_bytes;
	struct catalog *cat = synthetic_catalog(n, size, &cat_bytes);
	double t_cat = now_s() - t0;
	long after_cat = peak_kib();

	struct sampler_shape sh;
	uint32_t world = (uint32_t)(nodes * tpn);
	if (sampler_shape_init(&sh, n, seed, world, (uint32_t)batch, false, true)) {
		fprintf(stderr, "seer-planmem: no trainer gets a batch\n");
		return 2;
	}
	uint32_t *rank_node = xmalloc(world * sizeof(uint32_t));
	for (uint32_t r = 0; r < world; r++)
		rank_node[r] = r / (uint32_t)tpn;
	struct plan_cap *cap = xcalloc(nodes, sizeof(*cap));
	for (uint64_t k = 0; k < nodes; k++)
		cap[k] = (struct plan_cap){ .ram = ram, .nvme = nvme };

	t0 = now_s();
	struct plan p;
	int rc = plan_build(&p, cat, &sh, 0, rank_node, (uint32_t)nodes, cap);
	double t_plan = now_s() - t0;
	if (rc) {
		fprintf(stderr, "seer-planmem: plan_build: %s\n", strerror(-rc));
		return 1;
	}
	long after_plan = peak_kib();
	t0 = now_s();
	struct plan_node nv;
	struct plan_repl_opts o = { .on = replicas };
	rc = plan_node_build(&nv, &p, cat, NULL, &sh, 0, epochs, rank_node, (uint32_t)node,
			     &cap[node], &o, NULL);
	double t_node = now_s() - t0;
	if (rc) {
		fprintf(stderr, "seer-planmem: plan_node_build: %s\n", strerror(-rc));
		return 1;
	}
	report(n, size, nodes, tpn, epochs, batch, node, ram, nvme, replicas, cat_bytes, &p, &nv,
	       (double[3]){ t_cat, t_plan, t_node }, (long[3]){ base, after_cat, after_plan });
	if ((rc = report_forecast(&p, &nv, cat, &sh, epochs, rank_node, (uint32_t)node, cap)) != 0)
		return rc;
	plan_node_free(&nv);
	plan_free(&p);
	catalog_free(cat);
	free(cap);
	free(rank_node);
	return 0;
}
