/* seer-plan: how many bytes each cache policy reads from the PFS, from peers
 * and locally, per epoch, for a job described on the command line; and the
 * lower bound on each epoch's time. The model is src/sim/plansim.h's; the
 * assumptions and measured tables are in docs/planner.md. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/plan/forecast.h"
#include "../src/plan/plan.h"
#include "../src/sim/plansim.h"
#include "../src/sampler/sampler.h"
#include "../src/util/util.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: seer-plan --samples N --sample-size BYTES [options]\n"
		"\n"
		"Bytes read from the PFS, from peers and locally per epoch by seer's plan,\n"
		"NoPFS-style per-rank caches, a per-node LRU and the optimum.\n"
		"\n"
		"dataset\n"
		"  --samples N               samples in the dataset\n"
		"  --sample-size BYTES       size of every sample (units: 110KiB, 1.5MB)\n"
		"  --size-dist fixed|lognormal   lognormal: sizes drawn with --size-mean and\n"
		"                            --size-sd (default mean: --sample-size)\n"
		"  --size-mean BYTES, --size-sd BYTES, --size-seed S (default: --seed)\n"
		"job\n"
		"  --nodes K (1)  --trainers-per-node T (1)  --placement block|cyclic (block)\n"
		"  --epochs E (10)  --batch B (32, per trainer)  --drop-last  --seed S (0)\n"
		"  --ram BYTES, --nvme BYTES  cache capacity per node (0)\n"
		"epoch-time bound\n"
		"  --pfs-bw BYTES      aggregate PFS bandwidth per second (0: ignore)\n"
		"  --net-bw BYTES      network bandwidth per node per second (0: ignore)\n"
		"  --compute-s SEC     compute time per step (0)\n"
		"forecast (seer's plan with replicas, per node, src/plan/forecast.h)\n"
		"  --forecast          print the forecast instead of the policy comparison\n"
		"                      (with --policies: both)\n"
		"  --replicas on|off|both   spare RAM/NVMe holds replicas (on)\n"
		"  --fill peer|pfs|auto     where replicas are loaded from (peer)\n"
		"  --pfs-curve LIST    aggregate PFS bandwidth by clients, e.g.\n"
		"                      1:66MB,2:86MB,4:146MB (overrides --pfs-bw)\n"
		"  --nvme-bw BYTES     NVMe read bandwidth per node (0: ignore)\n"
		"  --decode-s SEC      decode/transform time per sample on one core (0)\n"
		"  --cores N           cores per node for decoding (1)\n"
		"  --search            smallest RAM and NVMe per node with no I/O-bound\n"
		"                      epoch after the first\n"
		"  --search-tol BYTES  resolution of --search (dataset / 512)\n"
		"output\n"
		"  --policies LIST     seer,nopfs,lru,optimum (all)\n"
		"  --nopfs-fill read|prefetch  when NoPFS caches fill: on the rank's first\n"
		"                      read (default) or all before the first step\n"
		"  --threads N         policies simulated at once (2)\n"
		"  --totals            job totals only, no per-epoch rows\n"
		"  --json              machine-readable output\n");
}

struct opts {
	uint64_t samples, sample_size, size_mean, size_sd, size_seed;
	bool lognormal, size_seed_set, drop_last, json, totals;
	uint64_t nodes, tpn, epochs, seed, batch, ram, nvme, threads;
	bool cyclic;
	double pfs_bw, net_bw, compute_s;
	unsigned policies;
	bool policies_set;
	enum plansim_nopfs_fill fill;
	/* forecast */
	bool forecast, search;
	int replicas;            /* 0 off, 1 on, 2 both */
	enum plan_fill repl_fill;
	double nvme_bw, decode_s;
	uint64_t cores, search_tol;
	double curve_x[32], curve_y[32];
	uint32_t ncurve;
};

static int parse_count(const char *s, uint64_t *out);

/* "1:66MB,2:86MB,4:146MB": clients ascending, bandwidth per second. */
static int parse_curve(const char *s, struct opts *o)
{
	char buf[512];
	if (strlen(s) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, s);
	o->ncurve = 0;
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(tok, ':');
		uint64_t n, bw;
		if (!colon || o->ncurve == ARRAY_SIZE(o->curve_x))
			return -EINVAL;
		*colon = 0;
		if (parse_count(tok, &n) || n == 0 || parse_size(colon + 1, &bw) || bw == 0)
			return -EINVAL;
		if (o->ncurve && (double)n <= o->curve_x[o->ncurve - 1])
			return -EINVAL;
		o->curve_x[o->ncurve] = (double)n;
		o->curve_y[o->ncurve++] = (double)bw;
	}
	return o->ncurve ? 0 : -EINVAL;
}

static int bad(const char *opt, const char *val)
{
	fprintf(stderr, "seer-plan: invalid value '%s' for --%s\n", val, opt);
	return 2;
}

/* A count: an integer, or a number such as 1.28e6 that is one. */
static int parse_count(const char *s, uint64_t *out)
{
	if (parse_u64(s, out) == 0)
		return 0;
	double d;
	if (parse_double(s, &d) != 0 || d < 0 || d >= 1.8e19 || d != (double)(uint64_t)d)
		return -EINVAL;
	*out = (uint64_t)d;
	return 0;
}

enum {
	O_SAMPLES = 256, O_SIZE, O_DIST, O_MEAN, O_SD, O_SSEED, O_NODES, O_TPN, O_EPOCHS,
	O_SEED, O_BATCH, O_DROP, O_RAM, O_NVME, O_PLACE, O_PFSBW, O_NETBW, O_COMPUTE,
	O_JSON, O_POL, O_FILL, O_THREADS, O_TOTALS, O_FORECAST, O_REPL, O_RFILL, O_CURVE,
	O_NVMEBW, O_DECODE, O_CORES, O_SEARCH, O_STOL,
};

/* The forecast's options (parse_args' enum values). 0 or -EINVAL. */
static int forecast_opt(struct opts *o, int c, const char *v)
{
	uint64_t n;
	bool b;
	switch (c) {
	case O_FORECAST: o->forecast = true; return 0;
	case O_SEARCH: o->search = o->forecast = true; return 0;
	case O_REPL:
		if (strcmp(v, "both") == 0) {
			o->replicas = 2;
			return 0;
		}
		if (parse_bool(v, &b))
			return -EINVAL;
		o->replicas = b;
		return 0;
	case O_RFILL:
		if (strcmp(v, "peer") == 0)
			o->repl_fill = PLAN_FILL_PEER;
		else if (strcmp(v, "pfs") == 0)
			o->repl_fill = PLAN_FILL_PFS;
		else if (strcmp(v, "auto") == 0)
			o->repl_fill = PLAN_FILL_AUTO;
		else
			return -EINVAL;
		return 0;
	case O_CURVE: return parse_curve(v, o);
	case O_NVMEBW:
		if (parse_size(v, &n))
			return -EINVAL;
		o->nvme_bw = (double)n;
		return 0;
	case O_DECODE: return parse_double(v, &o->decode_s) || o->decode_s < 0 ? -EINVAL : 0;
	case O_CORES:
		if (parse_count(v, &o->cores) || o->cores == 0 || o->cores > UINT32_MAX)
			return -EINVAL;
		return 0;
	case O_STOL: return parse_size(v, &o->search_tol);
	}
	return -EINVAL;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "samples", required_argument, NULL, O_SAMPLES },
		{ "sample-size", required_argument, NULL, O_SIZE },
		{ "size-dist", required_argument, NULL, O_DIST },
		{ "size-mean", required_argument, NULL, O_MEAN },
		{ "size-sd", required_argument, NULL, O_SD },
		{ "size-seed", required_argument, NULL, O_SSEED },
		{ "nodes", required_argument, NULL, O_NODES },
		{ "trainers-per-node", required_argument, NULL, O_TPN },
		{ "epochs", required_argument, NULL, O_EPOCHS },
		{ "seed", required_argument, NULL, O_SEED },
		{ "batch", required_argument, NULL, O_BATCH },
		{ "drop-last", no_argument, NULL, O_DROP },
		{ "ram", required_argument, NULL, O_RAM },
		{ "nvme", required_argument, NULL, O_NVME },
		{ "placement", required_argument, NULL, O_PLACE },
		{ "pfs-bw", required_argument, NULL, O_PFSBW },
		{ "net-bw", required_argument, NULL, O_NETBW },
		{ "compute-s", required_argument, NULL, O_COMPUTE },
		{ "json", no_argument, NULL, O_JSON },
		{ "policies", required_argument, NULL, O_POL },
		{ "nopfs-fill", required_argument, NULL, O_FILL },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "totals", no_argument, NULL, O_TOTALS },
		{ "forecast", no_argument, NULL, O_FORECAST },
		{ "replicas", required_argument, NULL, O_REPL },
		{ "fill", required_argument, NULL, O_RFILL },
		{ "pfs-curve", required_argument, NULL, O_CURVE },
		{ "nvme-bw", required_argument, NULL, O_NVMEBW },
		{ "decode-s", required_argument, NULL, O_DECODE },
		{ "cores", required_argument, NULL, O_CORES },
		{ "search", no_argument, NULL, O_SEARCH },
		{ "search-tol", required_argument, NULL, O_STOL },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	memset(o, 0, sizeof(*o));
	o->nodes = o->tpn = 1;
	o->epochs = 10;
	o->batch = 32;
	o->threads = 2;
	o->policies = PLANSIM_ALL;
	o->replicas = 1;
	o->cores = 1;
	int c;
	uint64_t v;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		const char *name = "";
		for (const struct option *p = lo; p->name; p++)
			if (p->val == c)
				name = p->name;
		switch (c) {
		case O_SAMPLES:
			if (parse_count(optarg, &o->samples) || o->samples == 0)
				return bad(name, optarg);
			break;
		case O_SIZE:
			if (parse_size(optarg, &o->sample_size) || o->sample_size == 0)
				return bad(name, optarg);
			break;
		case O_DIST:
			if (strcmp(optarg, "lognormal") == 0)
				o->lognormal = true;
			else if (strcmp(optarg, "fixed") == 0)
				o->lognormal = false;
			else
				return bad(name, optarg);
			break;
		case O_MEAN:
			if (parse_size(optarg, &o->size_mean) || o->size_mean == 0)
				return bad(name, optarg);
			break;
		case O_SD:
			if (parse_size(optarg, &o->size_sd))
				return bad(name, optarg);
			break;
		case O_SSEED:
			if (parse_u64(optarg, &o->size_seed))
				return bad(name, optarg);
			o->size_seed_set = true;
			break;
		case O_NODES:
		case O_TPN:
		case O_EPOCHS:
		case O_BATCH:
		case O_THREADS:
			if (parse_count(optarg, &v) || v == 0 || v > UINT32_MAX)
				return bad(name, optarg);
			*(c == O_NODES ? &o->nodes : c == O_TPN ? &o->tpn : c == O_EPOCHS ? &o->epochs
			  : c == O_BATCH ? &o->batch : &o->threads) = v;
			break;
		case O_SEED:
			if (parse_u64(optarg, &o->seed))
				return bad(name, optarg);
			break;
		case O_DROP: o->drop_last = true; break;
		case O_RAM:
			if (parse_size(optarg, &o->ram))
				return bad(name, optarg);
			break;
		case O_NVME:
			if (parse_size(optarg, &o->nvme))
				return bad(name, optarg);
			break;
		case O_PLACE:
			if (strcmp(optarg, "block") == 0)
				o->cyclic = false;
			else if (strcmp(optarg, "cyclic") == 0)
				o->cyclic = true;
			else
				return bad(name, optarg);
			break;
		case O_PFSBW:
		case O_NETBW:
			if (parse_size(optarg, &v))
				return bad(name, optarg);
			*(c == O_PFSBW ? &o->pfs_bw : &o->net_bw) = (double)v;
			break;
		case O_COMPUTE:
			if (parse_double(optarg, &o->compute_s) || o->compute_s < 0)
				return bad(name, optarg);
			break;
		case O_JSON: o->json = true; break;
		case O_TOTALS: o->totals = true; break;
		case O_POL:
			if (plansim_parse_policies(optarg, &o->policies))
				return bad(name, optarg);
			o->policies_set = true;
			break;
		case O_FORECAST: case O_SEARCH: case O_REPL: case O_RFILL: case O_CURVE:
		case O_NVMEBW: case O_DECODE: case O_CORES: case O_STOL:
			if (forecast_opt(o, c, optarg))
				return bad(name, optarg ? optarg : "");
			break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "seer-plan: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (!o->samples || (!o->sample_size && !o->size_mean)) {
		fprintf(stderr, "seer-plan: --samples and --sample-size (or --size-mean) are required\n");
		return 2;
	}
	if (!o->size_mean)
		o->size_mean = o->sample_size;
	if (!o->lognormal && !o->sample_size)
		o->sample_size = o->size_mean;
	if (!o->size_seed_set)
		o->size_seed = o->seed;
	if (o->forecast && o->policies_set && o->json) {
		fprintf(stderr, "seer-plan: --json prints either the forecast or the policies: drop "
			"--forecast or --policies\n");
		return 2;
	}
	if (o->nodes > UINT16_MAX || o->nodes * o->tpn > UINT16_MAX) {
		fprintf(stderr, "seer-plan: at most 65535 nodes and 65535 trainers\n");
		return 2;
	}
	return 0;
}

/* ---- running the policies, two at a time on two cores -------------------- */

struct work {
	const struct plansim_job *job;
	enum plansim_policy todo[PLANSIM_NPOLICIES];
	unsigned ntodo;
	atomic_uint next;
	struct plansim_result res[PLANSIM_NPOLICIES];
	int rc[PLANSIM_NPOLICIES];
	double secs[PLANSIM_NPOLICIES];
};

static void *worker(void *arg)
{
	struct work *w = arg;
	for (;;) {
		unsigned i = atomic_fetch_add(&w->next, 1);
		if (i >= w->ntodo)
			return NULL;
		enum plansim_policy p = w->todo[i];
		double t0 = now_s();
		w->rc[p] = plansim_run(w->job, p, &w->res[p]);
		w->secs[p] = now_s() - t0;
	}
}

/* ---- output ---------------------------------------------------------------- */

static const char *sz(char *buf, uint64_t b)
{
	return fmt_size(buf, 32, b);
}

static void print_table(const struct opts *o, const struct sampler_shape *sh, const struct work *w,
			uint64_t dataset, uint64_t capacity, double wall)
{
	char a[32], b[32], c[32], d[32], e[32];
	const struct plansim_result *opt = (o->policies & PLANSIM_BIT(PLANSIM_OPTIMUM)) ?
		&w->res[PLANSIM_OPTIMUM] : NULL;
	printf("dataset   %llu samples, %s (%s per sample%s)\n", (unsigned long long)o->samples,
	       sz(a, dataset), sz(b, dataset / o->samples), o->lognormal ? " on average, lognormal" : "");
	printf("job       %llu nodes x %llu trainers (%s), batch %llu, %llu epochs of %llu steps%s, seed %llu\n",
	       (unsigned long long)o->nodes, (unsigned long long)o->tpn, o->cyclic ? "cyclic" : "block",
	       (unsigned long long)o->batch, (unsigned long long)o->epochs,
	       (unsigned long long)sh->bpe, o->drop_last ? " (drop_last)" : "",
	       (unsigned long long)o->seed);
	printf("cache     per node RAM %s + NVMe %s; aggregate %s = %.3f x dataset\n", sz(a, o->ram),
	       sz(b, o->nvme), sz(c, capacity), (double)capacity / (double)dataset);
	printf("bounds    PFS %s/s aggregate, network %s/s per node, compute %g s/step\n",
	       o->pfs_bw > 0 ? sz(a, (uint64_t)o->pfs_bw) : "-", o->net_bw > 0 ? sz(b, (uint64_t)o->net_bw) : "-",
	       o->compute_s);
	for (unsigned i = 0; i < PLANSIM_NPOLICIES; i++) {
		if (!(o->policies & PLANSIM_BIT(i)))
			continue;
		const struct plansim_result *r = &w->res[i];
		printf("\n== %s", plansim_policy_name(i));
		if (i == PLANSIM_SEER)
			printf(": plan holds %s, %llu samples spilled", sz(a, r->held),
			       (unsigned long long)r->spilled);
		else if (i == PLANSIM_NOPFS)
			printf(": rank caches hold %s, %s distinct (fill: %s)", sz(a, r->held),
			       sz(b, r->distinct), o->fill == PLANSIM_FILL_READ ? "on first read" : "prefetch");
		else if (i == PLANSIM_LRU)
			printf(": caches hold %s at the end, %s distinct", sz(a, r->held), sz(b, r->distinct));
		else
			printf(": C = min(D, aggregate) = %s", sz(a, r->held));
		printf("  [%.1f s]\n", w->secs[i]);
		printf("%6s %13s %13s %13s %13s %13s %7s %10s %s\n", "epoch", "PFS", "peer", "local RAM",
		       "local NVMe", "peer max/node", "PFS/D", "t_lb (s)", "bound");
		bool opt_row = i == PLANSIM_OPTIMUM;
		double tsum = 0;
		for (uint64_t ep = 0; ep <= r->epochs; ep++) {
			bool tot = ep == r->epochs;
			const struct plansim_epoch *x = tot ? &r->total : &r->ep[ep];
			const char *bound = "";
			double t = 0;
			if (!tot) {
				struct plansim_epoch y = *x;
				t = plansim_epoch_time(&y, sh->bpe, o->compute_s, o->pfs_bw, o->net_bw, &bound);
				tsum += t;
			}
			if (!tot && o->totals)
				continue;
			char lbl[24];
			snprintf(lbl, sizeof(lbl), tot ? "job" : "%llu", (unsigned long long)ep);
			printf("%6s %13s %13s %13s %13s %13s %7.3f %10.1f %s\n", lbl, sz(a, x->pfs),
			       opt_row ? "-" : sz(b, x->peer), opt_row ? "-" : sz(c, x->ram),
			       opt_row ? "-" : sz(d, x->nvme), opt_row ? "-" : sz(e, x->peer_max),
			       (double)x->pfs / (double)dataset, tot ? tsum : t, tot ? "(sum)" : bound);
		}
		if (opt && i != PLANSIM_OPTIMUM)
			printf("%6s PFS %.4f x optimum (%+.3f x dataset)\n", "", (double)r->total.pfs /
			       (double)opt->total.pfs, ((double)r->total.pfs - (double)opt->total.pfs) /
			       (double)dataset);
	}
	printf("\n%-8s %13s %9s %9s %13s %13s %12s\n", "summary", "PFS", "PFS/D", "x opt", "peer",
	       "local", "time lb (s)");
	for (unsigned i = 0; i < PLANSIM_NPOLICIES; i++) {
		if (!(o->policies & PLANSIM_BIT(i)))
			continue;
		const struct plansim_result *r = &w->res[i];
		double t = 0;
		for (uint64_t ep = 0; ep < r->epochs; ep++)
			t += plansim_epoch_time(&r->ep[ep], sh->bpe, o->compute_s, o->pfs_bw, o->net_bw, NULL);
		char xo[16] = "-";
		if (opt)
			snprintf(xo, sizeof(xo), "%.4f", (double)r->total.pfs / (double)opt->total.pfs);
		bool opt_row = i == PLANSIM_OPTIMUM;
		printf("%-8s %13s %9.3f %9s %13s %13s %12.1f\n", plansim_policy_name(i), sz(a, r->total.pfs),
		       (double)r->total.pfs / (double)dataset, xo, opt_row ? "-" : sz(b, r->total.peer),
		       opt_row ? "-" : sz(c, r->total.ram + r->total.nvme), t);
	}
	printf("\nsimulated in %.1f s\n", wall);
}

static void json_epoch(const struct plansim_epoch *x, uint64_t dataset)
{
	printf("{\"pfs\": %llu, \"fill\": %llu, \"peer\": %llu, \"ram\": %llu, \"nvme\": %llu, "
	       "\"peer_max_node\": %llu, \"demand\": %llu, \"pfs_over_dataset\": %.6f",
	       (unsigned long long)x->pfs, (unsigned long long)x->fill, (unsigned long long)x->peer,
	       (unsigned long long)x->ram, (unsigned long long)x->nvme,
	       (unsigned long long)x->peer_max, (unsigned long long)x->demand,
	       (double)x->pfs / (double)dataset);
}

static void print_json(const struct opts *o, const struct sampler_shape *sh, const struct work *w,
		       uint64_t dataset, uint64_t capacity, double wall)
{
	const struct plansim_result *opt = (o->policies & PLANSIM_BIT(PLANSIM_OPTIMUM)) ?
		&w->res[PLANSIM_OPTIMUM] : NULL;
	printf("{\n  \"config\": {\"samples\": %llu, \"dataset_bytes\": %llu, \"size_dist\": \"%s\", "
	       "\"size_mean\": %llu, \"size_sd\": %llu, \"nodes\": %llu, \"trainers_per_node\": %llu, "
	       "\"placement\": \"%s\", \"epochs\": %llu, \"batch\": %llu, \"drop_last\": %s, "
	       "\"seed\": %llu, \"steps_per_epoch\": %llu, \"ram_per_node\": %llu, "
	       "\"nvme_per_node\": %llu, \"aggregate_capacity\": %llu, \"pfs_bw\": %.0f, "
	       "\"net_bw\": %.0f, \"compute_s\": %g, \"nopfs_fill\": \"%s\"},\n",
	       (unsigned long long)o->samples, (unsigned long long)dataset,
	       o->lognormal ? "lognormal" : "fixed", (unsigned long long)o->size_mean,
	       (unsigned long long)(o->lognormal ? o->size_sd : 0), (unsigned long long)o->nodes,
	       (unsigned long long)o->tpn, o->cyclic ? "cyclic" : "block",
	       (unsigned long long)o->epochs, (unsigned long long)o->batch,
	       o->drop_last ? "true" : "false", (unsigned long long)o->seed,
	       (unsigned long long)sh->bpe, (unsigned long long)o->ram, (unsigned long long)o->nvme,
	       (unsigned long long)capacity, o->pfs_bw, o->net_bw, o->compute_s,
	       o->fill == PLANSIM_FILL_READ ? "read" : "prefetch");
	printf("  \"policies\": [");
	bool first = true;
	for (unsigned i = 0; i < PLANSIM_NPOLICIES; i++) {
		if (!(o->policies & PLANSIM_BIT(i)))
			continue;
		const struct plansim_result *r = &w->res[i];
		printf("%s\n    {\"name\": \"%s\", \"seconds\": %.3f, \"held\": %llu, \"distinct\": %llu, "
		       "\"spilled\": %llu,\n     \"epochs\": [", first ? "" : ",", plansim_policy_name(i),
		       w->secs[i], (unsigned long long)r->held, (unsigned long long)r->distinct,
		       (unsigned long long)r->spilled);
		first = false;
		double tsum = 0;
		for (uint64_t ep = 0; ep < r->epochs; ep++) {
			const char *bound;
			double t = plansim_epoch_time(&r->ep[ep], sh->bpe, o->compute_s, o->pfs_bw,
						   o->net_bw, &bound);
			tsum += t;
			printf("%s\n       ", ep ? "," : "");
			json_epoch(&r->ep[ep], dataset);
			printf(", \"epoch\": %llu, \"time_lb_s\": %.6f, \"bound\": \"%s\"}",
			       (unsigned long long)ep, t, bound);
		}
		printf("],\n     \"total\": ");
		json_epoch(&r->total, dataset);
		printf(", \"time_lb_s\": %.6f", tsum);
		if (opt)
			printf(", \"ratio_to_optimum\": %.6f", (double)r->total.pfs / (double)opt->total.pfs);
		printf("}}");
	}
	printf("\n  ],\n  \"seconds\": %.3f\n}\n", wall);
}


/* ---- the forecast ---------------------------------------------------------- */

struct fcrun {
	bool on;
	struct forecast_result res;
	double secs;
};

static void fc_rates_of(const struct opts *o, struct forecast_rates *r)
{
	*r = (struct forecast_rates){ .compute_s = o->compute_s, .pfs_bw = o->pfs_bw,
				.pfs_clients = o->curve_x, .pfs_curve = o->curve_y,
				.npfs = o->ncurve, .net_bw = o->net_bw, .nvme_bw = o->nvme_bw,
				.decode_s = o->decode_s, .cores = (uint32_t)o->cores };
}

static uint64_t net_of(const struct forecast_bytes *b)
{
	return b->peer_in + b->fill_in;
}

static void print_forecast(const struct opts *o, const struct fcrun *f)
{
	const struct forecast_result *r = &f->res;
	char a[32], b[32], c[32], d[32], e[32], g[32], h[32];
	double K = r->nnodes;
	printf("\n== forecast: seer, replicas %s", f->on ? "on" : "off");
	if (f->on)
		printf(" (filled from %s)", plan_fill_choose(o->repl_fill, o->pfs_bw, o->net_bw,
							     r->nnodes) == PLAN_FILL_PFS ? "the PFS" :
		       "peers");
	printf(": owned %s (%llu spilled), replicas %s in all, %s - %s per node  [%.1f s]\n",
	       sz(a, r->owned), (unsigned long long)r->spilled, sz(b, r->repl_bytes),
	       sz(c, r->repl_min), sz(d, r->repl_max), f->secs);
	printf("%6s %11s %11s %11s %11s %11s %11s %11s %10s %-7s %10s\n", "epoch", "RAM/node",
	       "NVMe/node", "peer/node", "fill/node", "net max", "PFS/node", "PFS total",
	       "time (s)", "bound", "lb (s)");
	for (uint64_t ep = 0; ep <= r->epochs; ep++) {
		bool tot = ep == r->epochs;
		if (!tot && o->totals)
			continue;
		const struct forecast_bytes *x = tot ? &r->total : &r->ep[ep].sum;
		char lbl[24];
		snprintf(lbl, sizeof(lbl), tot ? "job" : "%llu", (unsigned long long)ep);
		printf("%6s %11s %11s %11s %11s %11s %11s %11s %10.2f %-7s %10.2f\n", lbl,
		       sz(a, (uint64_t)(x->ram / K)), sz(b, (uint64_t)(x->nvme / K)),
		       sz(c, (uint64_t)(x->peer_in / K)), sz(d, (uint64_t)(x->fill_in / K)),
		       tot ? "-" : sz(e, r->ep[ep].net_max),
		       sz(g, (uint64_t)((x->pfs + x->pfs_load) / K)), sz(h, x->pfs + x->pfs_load),
		       tot ? r->time : r->ep[ep].time,
		       tot ? "(sum)" : forecast_term_name(r->ep[ep].bound), tot ? r->lb : r->ep[ep].lb);
	}
	uint64_t after1 = 0, after2 = 0;
	for (uint64_t ep = 1; ep < r->epochs; ep++) {
		after1 += net_of(&r->ep[ep].sum);
		if (ep >= 2)
			after2 += net_of(&r->ep[ep].sum);
	}
	printf("%6s network per node: %s over the job, %s after the first epoch, %s after the "
	       "second; PFS %.4f x dataset; time %.4f x its lower bound\n", "",
	       sz(a, (uint64_t)((r->total.peer_in + r->total.fill_in) / K)),
	       sz(b, (uint64_t)(after1 / K)), sz(c, (uint64_t)(after2 / K)),
	       (double)(r->total.pfs + r->total.pfs_load) / (double)r->dataset,
	       r->lb > 0 ? r->time / r->lb : 0.0);
}

static void json_bytes(const char *name, const struct forecast_bytes *x)
{
	printf("\"%s\": {\"reads\": %llu, \"demand\": %llu, \"ram\": %llu, \"nvme\": %llu, "
	       "\"replica\": %llu, \"peer_in\": %llu, \"pfs\": %llu, \"peer_out\": %llu, "
	       "\"pfs_load\": %llu, \"fill_in\": %llu, \"fill_out\": %llu, \"nvme_read\": %llu}",
	       name, (unsigned long long)x->reads, (unsigned long long)x->demand,
	       (unsigned long long)x->ram, (unsigned long long)x->nvme,
	       (unsigned long long)x->repl, (unsigned long long)x->peer_in,
	       (unsigned long long)x->pfs, (unsigned long long)x->peer_out,
	       (unsigned long long)x->pfs_load, (unsigned long long)x->fill_in,
	       (unsigned long long)x->fill_out, (unsigned long long)x->nvme_read);
}

static void print_forecast_json(const struct fcrun *f, bool first)
{
	const struct forecast_result *r = &f->res;
	printf("%s\n    {\"replicas\": %s, \"seconds\": %.3f, \"dataset\": %llu, \"owned\": %llu, "
	       "\"spilled\": %llu, \"replica_bytes\": %llu, \"replica_min_node\": %llu, "
	       "\"replica_max_node\": %llu, \"time_s\": %.6f, \"lb_s\": %.6f,\n     ",
	       first ? "" : ",", f->on ? "true" : "false", f->secs,
	       (unsigned long long)r->dataset, (unsigned long long)r->owned,
	       (unsigned long long)r->spilled, (unsigned long long)r->repl_bytes,
	       (unsigned long long)r->repl_min, (unsigned long long)r->repl_max, r->time, r->lb);
	json_bytes("total", &r->total);
	printf(",\n     \"epochs\": [");
	for (uint64_t e = 0; e < r->epochs; e++) {
		const struct forecast_epoch *x = &r->ep[e];
		printf("%s\n       {\"epoch\": %llu, ", e ? "," : "", (unsigned long long)e);
		json_bytes("sum", &x->sum);
		printf(", ");
		json_bytes("max", &x->max);
		printf(", \"net_max\": %llu, \"pfs_opt\": %llu, \"t\": {", (unsigned long long)x->net_max,
		       (unsigned long long)x->pfs_opt);
		for (int t = 0; t < FORECAST_NTERMS; t++)
			printf("%s\"%s\": %.6f", t ? ", " : "", forecast_term_name(t), x->t[t]);
		printf("}, \"time_s\": %.6f, \"bound\": \"%s\", \"lb_s\": %.6f}", x->time,
		       forecast_term_name(x->bound), x->lb);
	}
	printf("]}");
}

/* --search: the smallest RAM, then NVMe, per node with no I/O-bound epoch
 * after the first. 0 or a negative errno (reported). */
static int search(const struct opts *o, const struct plansim_job *pj, struct forecast_job *job,
		  const struct forecast_rates *rates)
{
	int rc = 0;
	uint64_t tol = o->search_tol;
	if (!tol) {
		for (uint64_t s = 0; s < pj->sh->n; s++)
			tol += pj->len[s];
		tol /= 512;
	}
	job->repl.on = o->replicas != 0;
	const char *what[2] = { "RAM (NVMe as given)", "NVMe (RAM as given)" };
	char a[32];
	if (o->json)
		printf(",\n  \"search\": {\"replicas\": %s", job->repl.on ? "true" : "false");
	else
		printf("\nsmallest capacity per node with no I/O-bound epoch after the first "
		       "(replicas %s, resolution %s):\n", job->repl.on ? "on" : "off", sz(a, tol));
	for (int w = 0; w < 2 && rc == 0; w++) {
		uint64_t bytes;
		bool found;
		double t0 = now_s();
		rc = forecast_min_capacity(job, rates, w == 1, tol, &bytes, &found);
		if (rc)
			fprintf(stderr, "seer-plan: search: %s\n", strerror(-rc));
		else if (o->json)
			printf(", \"%s\": %s%llu%s", w ? "nvme" : "ram", found ? "" : "{\"none_up_to\": ",
			       (unsigned long long)bytes, found ? "" : "}");
		else if (found)
			printf("  %-22s %s  [%.1f s]\n", what[w], sz(a, bytes), now_s() - t0);
		else
			printf("  %-22s none up to %s (always I/O-bound)  [%.1f s]\n", what[w],
			       sz(a, bytes), now_s() - t0);
	}
	if (o->json)
		printf("}");
	return rc;
}

/* Runs the forecast(s) and the capacity search; prints. 0 or an exit code. */
static int forecast(const struct opts *o, const struct plansim_job *pj)
{
	struct forecast_rates rates;
	fc_rates_of(o, &rates);
	struct forecast_orders orders;
	if (forecast_orders_init(&orders, pj->sh, 0, pj->epochs))
		return 1;
	struct forecast_job job = {
		.len = pj->len, .sh = pj->sh, .epochs = pj->epochs, .nnodes = pj->nnodes,
		.rank_node = pj->rank_node, .cap = pj->cap, .orders = &orders,
		.repl = { .fill = o->repl_fill, .pfs_bw = forecast_pfs_bw(&rates, pj->nnodes),
			  .net_bw = o->net_bw },
	};
	struct fcrun runs[2];
	unsigned nrun = 0;
	for (int on = 1; on >= 0; on--) {
		if (o->replicas != 2 && o->replicas != on)
			continue;
		struct fcrun *f = &runs[nrun];
		job.repl.on = on;
		f->on = on;
		double t0 = now_s();
		int rc = forecast_run(&job, &rates, &f->res);
		f->secs = now_s() - t0;
		if (rc) {
			fprintf(stderr, "seer-plan: forecast: %s%s\n", strerror(-rc), rc == -EOVERFLOW ?
				" (a node reads more than 2^32 samples over the job)" : "");
			forecast_orders_free(&orders);
			return 1;
		}
		nrun++;
	}
	if (o->json) {
		printf("{\n  \"forecast\": [");
		for (unsigned i = 0; i < nrun; i++)
			print_forecast_json(&runs[i], i == 0);
		printf("\n  ]");
	} else {
		for (unsigned i = 0; i < nrun; i++)
			print_forecast(o, &runs[i]);
	}
	if (nrun == 2 && !o->json) {
		const struct forecast_result *on = &runs[0].res, *off = &runs[1].res;
		double n_on = (double)(on->total.peer_in + on->total.fill_in);
		double n_off = (double)(off->total.peer_in + off->total.fill_in);
		printf("\nreplicas on vs off: network bytes %.4f x (%+.1f%%), PFS bytes %.4f x, "
		       "time %.4f x\n", n_off > 0 ? n_on / n_off : 0.0,
		       n_off > 0 ? 100.0 * (n_on - n_off) / n_off : 0.0,
		       (double)(on->total.pfs + on->total.pfs_load) /
			       (double)(off->total.pfs + off->total.pfs_load),
		       off->time > 0 ? on->time / off->time : 0.0);
	}
	for (unsigned i = 0; i < nrun; i++)
		forecast_result_free(&runs[i].res);
	int rc = o->search ? search(o, pj, &job, &rates) : 0;
	if (o->json)
		printf("\n}\n");
	forecast_orders_free(&orders);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	log_set_prog("seer-plan");
	/* per-node plans come and go by the thousand: keep their memory in the
	 * heap (no mmap/munmap and page faults for every node) */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
	struct opts o;
	int rc = parse_args(argc, argv, &o);
	if (rc)
		return rc;
	double t0 = now_s();
	struct sampler_shape sh;
	uint32_t world = (uint32_t)(o.nodes * o.tpn);
	rc = sampler_shape_init(&sh, o.samples, o.seed, world, (uint32_t)o.batch, o.drop_last, true);
	if (rc) {
		fprintf(stderr, "seer-plan: %s\n", rc == -ERANGE ?
			"no trainer gets a full batch (too few samples for nodes x trainers x batch)" :
			"samples must be below 2^32");
		return 2;
	}
	uint64_t *len = xmalloc(o.samples * sizeof(uint64_t));
	if (o.lognormal) {
		plansim_lognormal_sizes(len, o.samples, (double)o.size_mean, (double)o.size_sd, o.size_seed);
	} else {
		for (uint64_t s = 0; s < o.samples; s++)
			len[s] = o.sample_size;
	}
	uint32_t *rank_node = xmalloc(world * sizeof(uint32_t));
	for (uint32_t r = 0; r < world; r++)
		rank_node[r] = o.cyclic ? r % (uint32_t)o.nodes : r / (uint32_t)o.tpn;
	struct plan_cap *cap = xmalloc(o.nodes * sizeof(*cap));
	for (uint64_t k = 0; k < o.nodes; k++)
		cap[k] = (struct plan_cap){ .ram = o.ram, .nvme = o.nvme };
	struct plansim_job job = {
		.len = len, .sh = &sh, .epochs = o.epochs, .nnodes = (uint32_t)o.nodes,
		.rank_node = rank_node, .cap = cap, .nopfs_fill = o.fill,
	};
	uint64_t dataset = 0;
	for (uint64_t s = 0; s < o.samples; s++)
		dataset += len[s];
	uint64_t capacity = (o.ram + o.nvme) * o.nodes;

	if (o.forecast) {
		rc = forecast(&o, &job);
		if (rc || !o.policies_set) {
			free(cap);
			free(rank_node);
			free(len);
			return rc;
		}
	}

	/* the expensive ones first, so two threads finish together */
	static struct work w;
	static const enum plansim_policy by_cost[] = { PLANSIM_NOPFS, PLANSIM_LRU, PLANSIM_SEER, PLANSIM_OPTIMUM };
	w.job = &job;
	for (unsigned i = 0; i < ARRAY_SIZE(by_cost); i++)
		if (o.policies & PLANSIM_BIT(by_cost[i]))
			w.todo[w.ntodo++] = by_cost[i];
	atomic_init(&w.next, 0);
	unsigned nthr = (unsigned)MIN(o.threads, (uint64_t)w.ntodo);
	pthread_t thr[PLANSIM_NPOLICIES];
	unsigned started = 0;
	for (unsigned i = 1; i < nthr; i++)
		if (pthread_create(&thr[started], NULL, worker, &w) == 0)
			started++;
	worker(&w);
	for (unsigned i = 0; i < started; i++)
		pthread_join(thr[i], NULL);
	double wall = now_s() - t0;

	for (unsigned i = 0; i < PLANSIM_NPOLICIES; i++) {
		if ((o.policies & PLANSIM_BIT(i)) && w.rc[i]) {
			const char *why = "";
			if (i == PLANSIM_NOPFS && w.rc[i] == -EINVAL)
				why = " (the NoPFS model takes < 65536 trainers and epochs and < 2^32"
				      " reads per trainer)";
			if (i == PLANSIM_LRU && w.rc[i] == -EOVERFLOW)
				why = " (the LRU model takes < 2^31 reads per node)";
			fprintf(stderr, "seer-plan: %s: %s%s\n", plansim_policy_name(i), strerror(-w.rc[i]),
				why);
			return 1;
		}
	}
	if (o.json)
		print_json(&o, &sh, &w, dataset, capacity, wall);
	else
		print_table(&o, &sh, &w, dataset, capacity, wall);
	for (unsigned i = 0; i < PLANSIM_NPOLICIES; i++)
		plansim_result_free(&w.res[i]);
	free(cap);
	free(rank_node);
	free(len);
	return 0;
}
