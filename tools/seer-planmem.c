/* seer-planmem: what one daemon's plan costs at scale. Builds, for node
 * --node of a job, what its seerd builds at start: the catalog (synthetic,
 * laid out like the `files` format: one file per sample under class
 * directories), the global owner map (plan_build) and the node's replica set
 * (plan_node_build), and prints the time each took, the bytes each holds and
 * the process's peak resident memory. docs/planner.md ("Memory at scale")
 * has the figures. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../src/catalog.h"
#include "../src/plan.h"
#include "../src/sampler.h"
#include "../src/util.h"

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
	size_t cap = n * 32 + 1001 * 16, used = 0;
	c->strpool = xmalloc(cap);
	for (uint64_t i = 0; i < n; i++) {
		uint32_t cls = (uint32_t)(i % 1000);
		c->files[i] = (struct cat_file){ .size = size, .path_off = (uint32_t)used,
						 .nsamples = 1, .first = i };
		used += (size_t)snprintf(c->strpool + used, cap - used, "n%08u/n%08u_%07llu.JPEG",
					 cls, cls, (unsigned long long)i) + 1;
		c->samples[i] = (struct cat_sample){ .offset = 0, .length = size, .file = (uint32_t)i,
						     .type = 0, .label = cls };
		c->total_bytes += size;
	}
	c->strpool_len = used;
	c->max_len = size;
	*bytes = n * (sizeof(struct cat_file) + sizeof(struct cat_sample)) + cap +
		 c->ndirs * sizeof(struct cat_dir);
	return c;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: seer-planmem --samples N --sample-size BYTES --nodes K\n"
		   "         [--trainers-per-node T] [--epochs E] [--batch B] [--seed S]\n"
		   "         [--ram BYTES] [--nvme BYTES] [--node k] [--replicas on|off]\n");
}

int main(int argc, char **argv)
{
	log_set_prog("seer-planmem");
	uint64_t n = 0, size = 0, nodes = 0, tpn = 1, epochs = 90, batch = 32, seed = 0;
	uint64_t ram = 0, nvme = 0, node = 0;
	bool replicas = true;
	static const struct option lo[] = {
		{ "samples", required_argument, NULL, 'n' }, { "sample-size", required_argument, NULL, 's' },
		{ "nodes", required_argument, NULL, 'k' }, { "trainers-per-node", required_argument, NULL, 't' },
		{ "epochs", required_argument, NULL, 'e' }, { "batch", required_argument, NULL, 'b' },
		{ "seed", required_argument, NULL, 'S' }, { "ram", required_argument, NULL, 'r' },
		{ "nvme", required_argument, NULL, 'v' }, { "node", required_argument, NULL, 'N' },
		{ "replicas", required_argument, NULL, 'R' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		int rc = 0;
		switch (c) {
		case 'n': rc = parse_u64(optarg, &n); break;
		case 's': rc = parse_size(optarg, &size); break;
		case 'k': rc = parse_u64(optarg, &nodes); break;
		case 't': rc = parse_u64(optarg, &tpn); break;
		case 'e': rc = parse_u64(optarg, &epochs); break;
		case 'b': rc = parse_u64(optarg, &batch); break;
		case 'S': rc = parse_u64(optarg, &seed); break;
		case 'r': rc = parse_size(optarg, &ram); break;
		case 'v': rc = parse_size(optarg, &nvme); break;
		case 'N': rc = parse_u64(optarg, &node); break;
		case 'R': rc = parse_bool(optarg, &replicas); break;
		case 'h': usage(stdout); return 0;
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
	if (!n || !size || !nodes || !tpn || !epochs || !batch || node >= nodes ||
	    nodes > UINT16_MAX || nodes * tpn > UINT32_MAX) {
		usage(stderr);
		return 2;
	}
	long base = peak_kib();
	double t0 = now_s();
	uint64_t cat_bytes;
	struct catalog *cat = synthetic_catalog(n, size, &cat_bytes);
	double t_cat = now_s() - t0;
	long after_cat = peak_kib();

	struct smp_shape sh;
	uint32_t world = (uint32_t)(nodes * tpn);
	if (smp_shape_init(&sh, n, seed, world, (uint32_t)batch, false, true)) {
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
	long peak = peak_kib();
	uint64_t plan_bytes = n * (sizeof(*p.tier) + sizeof(*p.owner) + sizeof(*p.off)) +
			      nodes * 2 * sizeof(uint64_t);
	uint64_t node_bytes = n * sizeof(*nv.idx) +
			      nv.nrepl * (sizeof(*nv.smp) + sizeof(*nv.tier) + sizeof(*nv.off) +
					  sizeof(*nv.due) + sizeof(*nv.ready));
	char a[32], b[32], d[32], e[32];
	printf("job      %llu samples x %s, %llu nodes x %llu trainers, %llu epochs, batch %llu; "
	       "node %llu: RAM %s, NVMe %s, replicas %s\n", (unsigned long long)n,
	       fmt_size(a, 32, size), (unsigned long long)nodes, (unsigned long long)tpn,
	       (unsigned long long)epochs, (unsigned long long)batch, (unsigned long long)node,
	       fmt_size(b, 32, ram), fmt_size(d, 32, nvme), replicas ? "on" : "off");
	printf("catalog  %s (synthetic, files layout)   built in %.2f s\n", fmt_size(a, 32, cat_bytes),
	       t_cat);
	printf("plan     %s (owner map: tier, owner, offset per sample)   built in %.2f s\n",
	       fmt_size(a, 32, plan_bytes), t_plan);
	printf("replicas %s (%llu replicas, %s of samples)   built in %.2f s\n",
	       fmt_size(a, 32, node_bytes), (unsigned long long)nv.nrepl,
	       fmt_size(b, 32, nv.repl_bytes), t_node);
	printf("held     %s = catalog + plan + replicas; plan + replicas computed in %.2f s\n",
	       fmt_size(a, 32, cat_bytes + plan_bytes + node_bytes), t_plan + t_node);
	printf("peak RSS %s (at start %s, after the catalog %s, after the owner map %s)\n",
	       fmt_size(a, 32, (uint64_t)peak * 1024), fmt_size(b, 32, (uint64_t)base * 1024),
	       fmt_size(d, 32, (uint64_t)after_cat * 1024), fmt_size(e, 32, (uint64_t)after_plan * 1024));
	plan_node_free(&nv);
	plan_free(&p);
	free(cap);
	free(rank_node);
	return 0;
}
