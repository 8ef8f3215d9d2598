/* seer-sim: discrete-event simulation of seer's data path at scale
 * (src/sim/dessim.h), next to the forecast (src/plan/forecast.h) of the same job.
 * Scenarios with their parameters and sources are in docs/simulation.md. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/sim/dessim.h"
#include "../src/plan/forecast.h"
#include "../src/sim/plansim.h"
#include "../src/util/util.h"

struct opts {
	uint64_t samples, size, size_mean, size_sd, size_seed;
	int dist;                  /* 0 fixed, 1 normal, 2 lognormal */
	uint64_t nodes[8];
	unsigned nnodes;
	uint64_t tpn, batch, epochs, sim_epochs, seed, ram, nvme, lookahead;
	int replicas;              /* 0 off, 1 on, 2 both */
	unsigned policies;         /* bit per enum dessim_policy */
	enum plan_fill fill;
	struct dessim_params dp;      /* rates; job fields filled per run */
	double curve_x[32], curve_y[32];
	bool json, forecast;
};

static int bad(const char *opt, const char *val)
{
	fprintf(stderr, "seer-sim: invalid value '%s' for --%s\n", val, opt);
	return 2;
}

static int parse_rate(const char *s, double *out)
{
	uint64_t v;
	if (parse_size(s, &v))
		return -EINVAL;
	*out = (double)v;
	return 0;
}

static int parse_curve(const char *s, struct opts *o)
{
	char buf[512];
	if (strlen(s) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, s);
	uint32_t m = 0;
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		char *c = strchr(t, ':');
		uint64_t n, bw;
		if (!c || m == 32)
			return -EINVAL;
		*c = 0;
		if (parse_u64(t, &n) || !n || parse_size(c + 1, &bw) || !bw ||
		    (m && (double)n <= o->curve_x[m - 1]))
			return -EINVAL;
		o->curve_x[m] = (double)n;
		o->curve_y[m++] = (double)bw;
	}
	o->dp.npfs = m;
	return m ? 0 : -EINVAL;
}

static int parse_nodes(const char *s, struct opts *o)
{
	char buf[256];
	if (strlen(s) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, s);
	o->nnodes = 0;
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (o->nnodes == 8 || parse_u64(t, &o->nodes[o->nnodes]) || !o->nodes[o->nnodes] ||
		    o->nodes[o->nnodes] > UINT16_MAX)
			return -EINVAL;
		o->nnodes++;
	}
	return o->nnodes ? 0 : -EINVAL;
}

/* The NoPFS thesis' simulated cluster, scenario 3 (Böhringer 2021, 5.2.1;
 * the simulator's code for what the text leaves open): 4 nodes, 300,000
 * samples ~ N(2 MB, 0.2 MB), global batch 100, 5 epochs, compute 100 MB/s,
 * preprocessing 200 MB/s per staging thread (2), network 10,000 MB/s, PFS
 * link 2,000 MB/s, t(1..4) = 66, 86, 129, 146 MB/s per read stream's share,
 * RAM 50 GB at 21,164 MB/s, SSD 100 GB at 86 MB/s. MB = 10^6 bytes. */
static void scenario_nopfs3(struct opts *o)
{
	static const double x[] = { 1, 2, 3, 4 }, y[] = { 66e6, 86e6, 129e6, 146e6 };
	o->samples = 300000;
	o->dist = 1;
	o->size_mean = 2000000;
	o->size_sd = 200000;
	o->size_seed = 42;
	o->nodes[0] = 4;
	o->nnodes = 1;
	o->tpn = 1;
	o->batch = 25;
	o->epochs = o->sim_epochs = 5;
	o->ram = 51200000000ull;
	o->nvme = 102400000000ull;
	o->dp.compute_bw = 100e6;
	o->dp.decode_bw = 200e6;
	o->dp.cores = 2;
	o->dp.net_bw = 10000e6;
	o->dp.pfs_link_bw = 2000e6;
	o->dp.pfs_model = DESSIM_PFS_PER_STREAM;
	o->dp.pfs_streams = 6;
	memcpy(o->curve_x, x, sizeof(x));
	memcpy(o->curve_y, y, sizeof(y));
	o->dp.npfs = 4;
	o->dp.ram_bw = 21164e6;
	o->dp.nvme_bw = 86e6;
}

/* ImageNet-1k at scale, rates from the NoPFS SC21 simulation script
 * (compute 64 MB/s per node, t(1..32) = 338 .. 5266 MB/s, 24,000 MB/s
 * links, RAM 123,700 MB/s and SSD 4,425 MB/s at 16 threads, preprocessing
 * 200 MB/s per thread, 8 threads), 4 trainers per node, batch 32,
 * 1,281,167 samples of 110 KiB, 90 epochs planned, 4 simulated. */
static void scenario_imagenet(struct opts *o)
{
	static const double x[] = { 1, 2, 4, 8, 16, 32 },
			    y[] = { 338e6, 727e6, 1540e6, 2871e6, 4787e6, 5266e6 };
	o->samples = 1281167;
	o->dist = 0;
	o->size = 110 * 1024;
	o->nodes[0] = 64;
	o->nodes[1] = 256;
	o->nodes[2] = 1024;
	o->nnodes = 3;
	o->tpn = 4;
	o->batch = 32;
	o->epochs = 90;
	o->sim_epochs = 4;
	o->ram = 512ull << 30;
	o->dp.compute_bw = 16e6;
	o->dp.decode_bw = 200e6;
	o->dp.cores = 8;
	o->dp.net_bw = 24000e6;
	o->dp.pfs_link_bw = 24000e6;
	o->dp.pfs_model = DESSIM_PFS_AGGREGATE;
	memcpy(o->curve_x, x, sizeof(x));
	memcpy(o->curve_y, y, sizeof(y));
	o->dp.npfs = 6;
	o->dp.ram_bw = 123700e6;
	o->dp.nvme_bw = 4425e6;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: seer-sim [--scenario nopfs3|imagenet] [options]\n"
		"dataset  --samples N --sample-size B | --size-dist normal|lognormal --size-mean B\n"
		"         --size-sd B [--size-seed S]\n"
		"job      --nodes K[,K...] --trainers-per-node T --batch B --epochs E (planned)\n"
		"         --sim-epochs S (simulated, default E) --seed S --ram B --nvme B (per node)\n"
		"policy   --policies seer,naive --replicas on|off|both --fill peer|pfs|auto\n"
		"         --lookahead L (8)\n"
		"compute  --compute-s SEC (per step) --compute-bw B (per trainer, bytes/s)\n"
		"decode   --decode-s SEC (per sample) --decode-bw B (per core) --cores N\n"
		"PFS      --pfs-model aggregate|per-stream --pfs-bw B | --pfs-curve 1:66MB,2:86MB,...\n"
		"         --pfs-link-bw B --pfs-streams N --pfs-lat SEC\n"
		"network  --net-bw B --net-lat SEC; tiers --ram-bw B --nvme-bw B (per node)\n"
		"output   --forecast (the forecast of the same job next to it) --json\n");
}

enum {
	O_SCEN = 256, O_SAMPLES, O_SIZE, O_DIST, O_MEAN, O_SD, O_SSEED, O_NODES, O_TPN, O_BATCH,
	O_EPOCHS, O_SIMEP, O_SEED, O_RAM, O_NVME, O_POL, O_REPL, O_FILL, O_LOOK, O_CS, O_CBW,
	O_DS, O_DBW, O_CORES, O_PMODEL, O_PBW, O_PCURVE, O_PLINK, O_PSTREAMS, O_PLAT, O_NBW,
	O_NLAT, O_RBW, O_VBW, O_FC, O_JSON,
};

static const struct option longopts[] = {
	{ "scenario", 1, NULL, O_SCEN }, { "samples", 1, NULL, O_SAMPLES },
	{ "sample-size", 1, NULL, O_SIZE }, { "size-dist", 1, NULL, O_DIST },
	{ "size-mean", 1, NULL, O_MEAN }, { "size-sd", 1, NULL, O_SD },
	{ "size-seed", 1, NULL, O_SSEED }, { "nodes", 1, NULL, O_NODES },
	{ "trainers-per-node", 1, NULL, O_TPN }, { "batch", 1, NULL, O_BATCH },
	{ "epochs", 1, NULL, O_EPOCHS }, { "sim-epochs", 1, NULL, O_SIMEP },
	{ "seed", 1, NULL, O_SEED }, { "ram", 1, NULL, O_RAM }, { "nvme", 1, NULL, O_NVME },
	{ "policies", 1, NULL, O_POL }, { "replicas", 1, NULL, O_REPL }, { "fill", 1, NULL, O_FILL },
	{ "lookahead", 1, NULL, O_LOOK }, { "compute-s", 1, NULL, O_CS },
	{ "compute-bw", 1, NULL, O_CBW }, { "decode-s", 1, NULL, O_DS },
	{ "decode-bw", 1, NULL, O_DBW }, { "cores", 1, NULL, O_CORES },
	{ "pfs-model", 1, NULL, O_PMODEL }, { "pfs-bw", 1, NULL, O_PBW },
	{ "pfs-curve", 1, NULL, O_PCURVE }, { "pfs-link-bw", 1, NULL, O_PLINK },
	{ "pfs-streams", 1, NULL, O_PSTREAMS }, { "pfs-lat", 1, NULL, O_PLAT },
	{ "net-bw", 1, NULL, O_NBW }, { "net-lat", 1, NULL, O_NLAT }, { "ram-bw", 1, NULL, O_RBW },
	{ "nvme-bw", 1, NULL, O_VBW }, { "forecast", 0, NULL, O_FC }, { "json", 0, NULL, O_JSON },
	{ "help", 0, NULL, 'h' }, { 0 },
};

static int set_u64(const char *v, uint64_t *out, bool size)
{
	return size ? parse_size(v, out) : parse_u64(v, out);
}

static int parse_policies(const char *s, unsigned *mask)
{
	char buf[128];
	if (strlen(s) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, s);
	*mask = 0;
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		unsigned i;
		for (i = 0; i < DESSIM_NPOLICIES; i++)
			if (strcmp(t, dessim_policy_name(i)) == 0)
				break;
		if (i == DESSIM_NPOLICIES)
			return -EINVAL;
		*mask |= 1u << i;
	}
	return *mask ? 0 : -EINVAL;
}

static int opt_one(struct opts *o, int c, const char *v)
{
	struct dessim_params *d = &o->dp;
	switch (c) {
	case O_SCEN:
		if (strcmp(v, "nopfs3") == 0)
			scenario_nopfs3(o);
		else if (strcmp(v, "imagenet") == 0)
			scenario_imagenet(o);
		else
			return -EINVAL;
		return 0;
	case O_SAMPLES: return set_u64(v, &o->samples, false);
	case O_SIZE: o->dist = 0; return set_u64(v, &o->size, true);
	case O_DIST:
		o->dist = strcmp(v, "normal") == 0 ? 1 : strcmp(v, "lognormal") == 0 ? 2 :
			  strcmp(v, "fixed") == 0 ? 0 : -1;
		return o->dist < 0 ? -EINVAL : 0;
	case O_MEAN: return set_u64(v, &o->size_mean, true);
	case O_SD: return set_u64(v, &o->size_sd, true);
	case O_SSEED: return set_u64(v, &o->size_seed, false);
	case O_NODES: return parse_nodes(v, o);
	case O_TPN: return set_u64(v, &o->tpn, false);
	case O_BATCH: return set_u64(v, &o->batch, false);
	case O_EPOCHS: return set_u64(v, &o->epochs, false);
	case O_SIMEP: return set_u64(v, &o->sim_epochs, false);
	case O_SEED: return set_u64(v, &o->seed, false);
	case O_RAM: return set_u64(v, &o->ram, true);
	case O_NVME: return set_u64(v, &o->nvme, true);
	case O_LOOK: return set_u64(v, &o->lookahead, false);
	case O_POL: return parse_policies(v, &o->policies);
	case O_REPL: {
		bool b;
		if (strcmp(v, "both") == 0) {
			o->replicas = 2;
			return 0;
		}
		if (parse_bool(v, &b))
			return -EINVAL;
		o->replicas = b;
		return 0;
	}
	case O_FILL:
		o->fill = strcmp(v, "pfs") == 0 ? PLAN_FILL_PFS : strcmp(v, "auto") == 0 ? PLAN_FILL_AUTO :
			  PLAN_FILL_PEER;
		return strcmp(v, "pfs") && strcmp(v, "auto") && strcmp(v, "peer") ? -EINVAL : 0;
	case O_CS: return parse_double(v, &d->compute_s);
	case O_CBW: return parse_rate(v, &d->compute_bw);
	case O_DS: return parse_double(v, &d->decode_s);
	case O_DBW: return parse_rate(v, &d->decode_bw);
	case O_CORES: {
		uint64_t n;
		if (parse_u64(v, &n) || !n || n > 4096)
			return -EINVAL;
		d->cores = (uint32_t)n;
		return 0;
	}
	case O_PMODEL:
		if (strcmp(v, "aggregate") && strcmp(v, "per-stream"))
			return -EINVAL;
		d->pfs_model = strcmp(v, "aggregate") ? DESSIM_PFS_PER_STREAM : DESSIM_PFS_AGGREGATE;
		return 0;
	case O_PBW: d->npfs = 0; return parse_rate(v, &d->pfs_bw);
	case O_PCURVE: return parse_curve(v, o);
	case O_PLINK: return parse_rate(v, &d->pfs_link_bw);
	case O_PSTREAMS: {
		uint64_t n;
		if (parse_u64(v, &n) || !n || n > 4096)
			return -EINVAL;
		d->pfs_streams = (uint32_t)n;
		return 0;
	}
	case O_PLAT: return parse_double(v, &d->pfs_lat);
	case O_NBW: return parse_rate(v, &d->net_bw);
	case O_NLAT: return parse_double(v, &d->net_lat);
	case O_RBW: return parse_rate(v, &d->ram_bw);
	case O_VBW: return parse_rate(v, &d->nvme_bw);
	case O_FC: o->forecast = true; return 0;
	case O_JSON: o->json = true; return 0;
	}
	return -EINVAL;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	memset(o, 0, sizeof(*o));
	o->tpn = o->batch = 1;
	o->epochs = 1;
	o->lookahead = 8;
	o->replicas = 1;
	o->policies = 1u << DESSIM_SEER;
	o->dp.cores = 1;
	o->dp.pfs_streams = 1;
	int c;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			exit(0);
		}
		const char *name = "?";
		for (const struct option *q = longopts; q->name; q++)
			if (q->val == c)
				name = q->name;
		if (c == '?' || opt_one(o, c, optarg))
			return c == '?' ? (usage(stderr), 2) : bad(name, optarg ? optarg : "");
	}
	if (optind < argc || !o->samples || !o->nnodes || (o->dist == 0 && !o->size) ||
	    (o->dist && !o->size_mean)) {
		usage(stderr);
		return 2;
	}
	if (o->sim_epochs == 0 || o->sim_epochs > o->epochs)
		o->sim_epochs = o->epochs;
	return 0;
}

/* ---- runs and output ---------------------------------------------------------- */

struct job {
	struct sampler_shape sh;
	uint64_t *len;
	uint32_t *rank_node;
	struct plan_cap *cap;
	uint32_t nodes;
	double mean;
};

static const char *sz(char *b, uint64_t v)
{
	return fmt_size(b, 32, v);
}

static void opts_rates(const struct opts *o, const struct job *j, struct forecast_rates *r)
{
	const struct dessim_params *d = &o->dp;
	*r = (struct forecast_rates){
		.compute_s = d->compute_s + (d->compute_bw > 0 ? j->sh.batch * j->mean / d->compute_bw : 0),
		.pfs_bw = d->pfs_bw, .pfs_clients = o->curve_x, .pfs_curve = o->curve_y,
		.npfs = d->npfs, .net_bw = d->net_bw, .nvme_bw = d->nvme_bw,
		.decode_s = d->decode_s + (d->decode_bw > 0 ? j->mean / d->decode_bw : 0),
		.cores = d->cores,
	};
	if (d->pfs_model == DESSIM_PFS_PER_STREAM && d->npfs) {
		/* the per-stream model's aggregate: every stream of every node at
		 * t(nodes) / nodes, capped by the links */
		static double y[32];
		uint32_t ns = d->pfs_streams ? d->pfs_streams : 1;
		for (uint32_t i = 0; i < d->npfs; i++) {
			double per = o->curve_y[i] / o->curve_x[i];
			if (d->pfs_link_bw > 0)
				per = MIN(per, d->pfs_link_bw / ns);
			y[i] = per * ns * o->curve_x[i];
		}
		r->pfs_curve = y;
	}
}

static void print_run(const struct opts *o, const struct job *j, const char *label,
		      const struct dessim_result *r, double secs, const struct forecast_result *f)
{
	char a[32], b[32], c[32], d[32], e[32], g[32];
	double K = j->nodes;
	printf("\n== %s, %u nodes x %llu trainers: %.3f x lower bound over %llu epochs  "
	       "[simulated in %.1f s, %s]\n", label, j->nodes, (unsigned long long)o->tpn,
	       r->lb > 0 ? r->time / r->lb : 0.0, (unsigned long long)r->epochs, secs,
	       sz(a, r->mem_bytes));
	printf("%6s %10s %10s %9s %10s %7s %11s %11s %11s %11s %11s%s\n", "epoch", "time (s)",
	       "compute", "stall", "lb (s)", "x lb", "net/node", "net max", "PFS total", "local/node",
	       "fill/node", f ? "   forecast (s) bound" : "");
	for (uint64_t ep = 0; ep < r->epochs; ep++) {
		const struct dessim_epoch *x = &r->ep[ep];
		printf("%6llu %10.2f %10.2f %9.2f %10.2f %7.3f %11s %11s %11s %11s %11s",
		       (unsigned long long)ep, x->time, x->compute, x->stall, x->lb,
		       x->lb > 0 ? x->time / x->lb : 0.0,
		       sz(a, (uint64_t)((x->sum.peer_in + x->sum.fill_in) / K)), sz(b, x->net_max),
		       sz(c, x->sum.pfs + x->sum.pfs_load), sz(d, (uint64_t)((x->sum.ram + x->sum.nvme) / K)),
		       sz(e, (uint64_t)(x->sum.fill_in / K)));
		if (f)
			printf("   %12.2f %s", f->ep[ep].time, forecast_term_name(f->ep[ep].bound));
		printf("\n");
	}
	printf("%6s %10.2f %10.2f %9.2f %10.2f %7.3f   replica reads that filled their replica: "
	       "%llu of %llu (%s)\n", "all", r->time, r->compute, r->time - r->compute, r->lb,
	       r->lb > 0 ? r->time / r->lb : 0.0, (unsigned long long)r->forced,
	       (unsigned long long)r->reads, sz(g, (uint64_t)((double)r->reads * j->mean)));
}

static void print_json(const struct opts *o, const struct job *j, const char *policy, int repl,
		       const struct dessim_result *r, double secs, bool first)
{
	printf("%s\n  {\"policy\": \"%s\", \"replicas\": %s, \"nodes\": %u, \"trainers_per_node\": %llu, "
	       "\"seconds\": %.3f, \"time_s\": %.6f, \"compute_s\": %.6f, \"lb_s\": %.6f, "
	       "\"forced\": %llu, \"epochs\": [", first ? "" : ",", policy,
	       repl ? "true" : "false", j->nodes, (unsigned long long)o->tpn, secs, r->time,
	       r->compute, r->lb, (unsigned long long)r->forced);
	for (uint64_t e = 0; e < r->epochs; e++) {
		const struct dessim_epoch *x = &r->ep[e];
		printf("%s\n    {\"epoch\": %llu, \"time_s\": %.6f, \"compute_s\": %.6f, \"stall_s\": %.6f, "
		       "\"lb_s\": %.6f, \"pfs\": %llu, \"pfs_opt\": %llu, \"peer_in\": %llu, \"fill_in\": %llu, "
		       "\"ram\": %llu, \"nvme\": %llu, \"net_max_node\": %llu, \"demand\": %llu}",
		       e ? "," : "", (unsigned long long)e, x->time, x->compute, x->stall, x->lb,
		       (unsigned long long)(x->sum.pfs + x->sum.pfs_load), (unsigned long long)x->pfs_opt,
		       (unsigned long long)x->sum.peer_in, (unsigned long long)x->sum.fill_in,
		       (unsigned long long)x->sum.ram, (unsigned long long)x->sum.nvme,
		       (unsigned long long)x->net_max, (unsigned long long)x->sum.demand);
	}
	printf("]}");
}

static int job_init(struct job *j, const struct opts *o, uint32_t nodes, const uint64_t *len)
{
	memset(j, 0, sizeof(*j));
	j->nodes = nodes;
	uint64_t world = nodes * o->tpn;
	if (world > UINT32_MAX || sampler_shape_init(&j->sh, o->samples, o->seed, (uint32_t)world,
						 (uint32_t)o->batch, false, true)) {
		fprintf(stderr, "seer-sim: %u nodes x %llu trainers x batch %llu: no trainer gets a "
			"batch of %llu samples\n", nodes, (unsigned long long)o->tpn,
			(unsigned long long)o->batch, (unsigned long long)o->samples);
		return -EINVAL;
	}
	j->len = (uint64_t *)len;
	j->rank_node = xmalloc(world * sizeof(uint32_t));
	for (uint32_t r = 0; r < world; r++)
		j->rank_node[r] = r / (uint32_t)o->tpn;
	j->cap = xcalloc(nodes, sizeof(*j->cap));
	for (uint32_t k = 0; k < nodes; k++)
		j->cap[k] = (struct plan_cap){ .ram = o->ram, .nvme = o->nvme };
	double sum = 0;
	for (uint64_t s = 0; s < o->samples; s++)
		sum += (double)len[s];
	j->mean = sum / (double)o->samples;
	return 0;
}

static int run_one(const struct opts *o, const struct job *j, enum dessim_policy pol, int repl,
		   bool *first)
{
	struct dessim_params p = o->dp;
	p.len = j->len;
	p.sh = &j->sh;
	p.nnodes = j->nodes;
	p.rank_node = j->rank_node;
	p.cap = j->cap;
	p.epochs = o->epochs;
	p.sim_epochs = o->sim_epochs;
	p.policy = pol;
	p.lookahead = (uint32_t)o->lookahead;
	if (pol == DESSIM_NAIVE) {
		/* the NoPFS simulator's baseline: each read issued when the trainer
		 * needs it, one at a time */
		p.lookahead = 0;
		p.pfs_streams = 1;
	}
	p.pfs_clients = o->curve_x;
	p.pfs_curve = o->curve_y;
	struct forecast_rates rates;
	opts_rates(o, j, &rates);
	p.repl = (struct plan_repl_opts){ .on = repl, .fill = o->fill,
					  .pfs_bw = forecast_pfs_bw(&rates, j->nodes), .net_bw = p.net_bw };
	struct dessim_result r;
	double t0 = now_s();
	int rc = dessim_run(&p, &r);
	double secs = now_s() - t0;
	if (rc) {
		fprintf(stderr, "seer-sim: %s: %s\n", dessim_policy_name(pol), strerror(-rc));
		return rc;
	}
	struct forecast_result f;
	bool have_f = false;
	if (o->forecast && pol == DESSIM_SEER && !o->json) {
		struct forecast_job fj = { .len = j->len, .sh = &j->sh, .epochs = o->sim_epochs,
				     .nnodes = j->nodes, .rank_node = j->rank_node, .cap = j->cap,
				     .repl = p.repl };
		/* the plan's horizon is the job's: forecast the whole job, show
		 * the simulated epochs */
		fj.epochs = o->epochs;
		rc = forecast_run(&fj, &rates, &f);
		have_f = rc == 0;
	}
	char label[64];
	snprintf(label, sizeof(label), "%s%s", dessim_policy_name(pol),
		 pol != DESSIM_SEER ? "" : repl ? ", replicas on" : ", replicas off");
	if (o->json)
		print_json(o, j, dessim_policy_name(pol), repl, &r, secs, *first);
	else
		print_run(o, j, label, &r, secs, have_f ? &f : NULL);
	*first = false;
	if (have_f)
		forecast_result_free(&f);
	dessim_result_free(&r);
	return 0;
}

int main(int argc, char **argv)
{
	log_set_prog("seer-sim");
	/* per-node plans come and go by the thousand: keep their memory in the
	 * heap (no mmap/munmap and page faults for every node) */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
	struct opts o;
	int rc = parse_args(argc, argv, &o);
	if (rc)
		return rc;
	uint64_t *len = xmalloc(o.samples * sizeof(uint64_t));
	if (o.dist == 1)
		dessim_normal_sizes(len, o.samples, (double)o.size_mean, (double)o.size_sd, o.size_seed);
	else if (o.dist == 2)
		plansim_lognormal_sizes(len, o.samples, (double)o.size_mean, (double)o.size_sd, o.size_seed);
	else
		for (uint64_t s = 0; s < o.samples; s++)
			len[s] = o.size;
	bool first = true;
	if (o.json)
		printf("{\"runs\": [");
	for (unsigned i = 0; i < o.nnodes && rc == 0; i++) {
		struct job j;
		if (job_init(&j, &o, (uint32_t)o.nodes[i], len)) {
			rc = 2;
			break;
		}
		if (!o.json) {
			char a[32], b[32], c[32];
			printf("\n%u nodes x %llu trainers, batch %llu, %llu steps per epoch; dataset %s; "
			       "per node RAM %s NVMe %s; %llu epochs planned, %llu simulated\n", j.nodes,
			       (unsigned long long)o.tpn, (unsigned long long)o.batch,
			       (unsigned long long)j.sh.bpe, sz(a, (uint64_t)(j.mean * (double)o.samples)),
			       sz(b, o.ram), sz(c, o.nvme), (unsigned long long)o.epochs,
			       (unsigned long long)o.sim_epochs);
		}
		for (unsigned p = 0; p < DESSIM_NPOLICIES && rc == 0; p++) {
			if (!(o.policies & (1u << p)))
				continue;
			for (int repl = 1; repl >= 0 && rc == 0; repl--) {
				if (p == DESSIM_SEER && o.replicas != 2 && o.replicas != repl)
					continue;
				if (p != DESSIM_SEER && repl)
					continue;
				rc = run_one(&o, &j, p, repl, &first);
			}
		}
		free(j.rank_node);
		free(j.cap);
	}
	if (o.json)
		printf("\n]}\n");
	free(len);
	return rc ? 1 : 0;
}
