/* seerd: the per-node seer daemon. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libgen.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/catalog/catalog.h"
#include "../src/config/config.h"
#include "../src/fmt/fmt.h"
#include "../src/util/pfs_probe.h"
#include "../src/util/util.h"
#include "seer.h"
#include "cluster.h"
#include "joblock.h"
#include "node_path.h"
#include "server.h"
#include "startup.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: seerd [-c FILE] [--set section.key=value]... [--check] [--print-config]\n"
		"\n"
		"Serve shuffled mini-batches of a dataset to the trainers of this node.\n"
		"\n"
		"  -c, --config FILE     INI configuration file (repeatable; later files win)\n"
		"  -s, --set K=V         set a key, e.g. --set cache.ram=64GiB (after the files)\n"
		"      --check           load config and catalog, print the plan inputs, exit\n"
		"      --print-config    print the effective configuration and exit\n"
		"  -h, --help            this text and every configuration key\n"
		"  -V, --version\n"
		"\n"
		"Configuration keys (value types: size takes units such as 512MiB, 64GiB):\n");
	config_help(out);
}

/* What the command line asked for. */
struct args {
	const char **files, **sets;
	int nfiles, nsets, check, print;
};

/* Options into a; -1 to go on, else the exit code (--help, --version, a
 * usage error). */
static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "set", required_argument, NULL, 's' },
		{ "check", no_argument, NULL, 'k' },
		{ "print-config", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "c:s:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'c': a->files[a->nfiles++] = optarg; break;
		case 's': a->sets[a->nsets++] = optarg; break;
		case 'k': a->check = 1; break;
		case 'p': a->print = 1; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("seerd %d.%d (protocol %u)\n", SEER_VERSION_MAJOR, SEER_VERSION_MINOR,
				  SEER_PROTO_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "seerd: unexpected argument '%s' (see seerd --help)\n", argv[optind]);
		return 2;
	}
	return -1;
}

/* Defaults, then the files, then --set, then the cross-key checks. 0, or
 * the error in err. */
static int load_config(struct seer_config *cfg, const struct args *a, char *err, size_t errlen)
{
	if (config_init(cfg, err, errlen) != 0)
		return -EINVAL;
	for (int i = 0; i < a->nfiles; i++)
		if (config_load_file(cfg, a->files[i], err, errlen) != 0)
			return -EINVAL;
	for (int i = 0; i < a->nsets; i++)
		if (config_set(cfg, a->sets[i], err, errlen) != 0)
			return -EINVAL;
	return config_finish(cfg, err, errlen);
}

/* Open files: the soft limit up to the hard one (often 1024 of 4096 or
 * more), so that I/O threads, trainers and connections fit; what is used
 * of it is sized from the result (engine.c: the readers' file caches). */
static void raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	rlim_t was = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0 && rl.rlim_max == RLIM_INFINITY) {
		rl.rlim_cur = 1u << 20; /* the kernel's usual fs.nr_open */
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			return;
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != was)
		log_info("open-file limit raised from %llu to %llu (the hard limit)",
			 (unsigned long long)was, (unsigned long long)rl.rlim_cur);
}

/* [daemon] stats_file is written at exit (write_file_atomic: a temporary
 * file beside it, renamed): its directory must exist and be writable now,
 * not be found missing when the job is over. 0, or the error in err naming
 * the key and the path. Every node checks its own path (%n). */
static int check_stats_file(const struct seer_config *cfg, uint32_t node, char *err,
			    size_t errlen)
{
	if (!cfg->daemon.stats_file || !*cfg->daemon.stats_file)
		return 0;
	char path[4096], dir[4096];
	if (node_path(path, sizeof(path), cfg->daemon.stats_file, node) != 0) {
		snprintf(err, errlen, "[daemon] stats_file %.200s is too long with the node rank: "
			 "set a shorter path", cfg->daemon.stats_file);
		return -ENAMETOOLONG;
	}
	struct stat st;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "[daemon] stats_file %.200s is a directory: name a file in it, "
			 "e.g. %.200s/seerd-stats.json", path, path);
		return -EISDIR;
	}
	snprintf(dir, sizeof(dir), "%s", path);
	char *d = dirname(dir);
	int e = stat(d, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
	if (e != 0) {
		snprintf(err, errlen, "[daemon] stats_file %.200s: its directory %.200s %s: create "
			 "it first, or set daemon.stats_file to a path in an existing directory", path,
			 d, e == ENOENT ? "does not exist" : strerror(e));
		return -e;
	}
	if (access(d, W_OK | X_OK) != 0) {
		e = errno;
		snprintf(err, errlen, "[daemon] stats_file %.200s: cannot write in its directory "
			 "%.200s (%s): choose a writable directory", path, d, strerror(e));
		return -e;
	}
	return 0;
}

/* Every node's check_stats_file: 0 when all passed, else 1 with the first
 * failing node's reason logged by node 0 and by the node itself. */
static int agree_stats_file(const struct seer_config *cfg, struct cluster *cl, uint32_t node,
			    uint32_t nnodes)
{
	struct {
		int32_t rc;
		char msg[1020];
	} me = { 0 }, *all = xcalloc(nnodes, sizeof(me));
	me.rc = check_stats_file(cfg, node, me.msg, sizeof(me.msg));
	int rc = 0;
	if (cluster_allgather(cl, &me, sizeof(me), all) != 0) {
		rc = me.rc != 0;
		if (rc)
			log_error("%s", me.msg);
	}
	for (uint32_t k = 0; k < nnodes && rc == 0; k++) {
		if (all[k].rc == 0)
			continue;
		if (k == node)
			log_error("%s", all[k].msg);
		else if (node == 0)
			log_error("node %u: %s", k, all[k].msg);
		rc = 1;
	}
	free(all);
	return rc;
}

/* prefetch.coalesce = auto on a dataset that coalesced reads could serve
 * (several samples per file, a format that cuts samples out of a byte
 * range, two samples fitting one extent): node 0 times the PFS
 * (src/util/pfs_probe.h) and every node plans with its verdict. 0 and *probed
 * false: no probe (the mode decides alone); -EIO: the verdict could not be
 * shared (fatal: nodes planning differently would disagree on owners). */
static int share_probe(const struct seer_config *cfg, const struct catalog *cat,
		       struct cluster *cl, uint32_t node, struct pfs_probe *p, bool *probed)
{
	const struct fmt_ops *f = cat->fmt;
	*probed = false;
	if (config_coalesce(cfg) != CFG_COALESCE_AUTO || cat->nsamples <= cat->nfiles ||
	    !f->span || !(f->cut || f->cut_many) ||
	    cat->total_bytes / cat->nsamples * 2 > cfg->prefetch.extent_max)
		return 0;
	if (node == 0)
		pfs_probe_run(cat, (uint32_t)cfg->prefetch.io_threads, p);
	if (cluster_bcast(cl, p, sizeof(*p)) != 0) {
		log_error("sharing the PFS probe's verdict (prefetch.coalesce = auto) with the "
			  "other nodes failed (MPI): set prefetch.coalesce = on or off");
		return -EIO;
	}
	if (node == 0)
		log_info("PFS probe (prefetch.coalesce = auto): %s", p->why);
	else
		p->bytes = p->reads = 0; /* node 0 read them */
	*probed = true;
	return 0;
}

/* The catalog (shared by node 0), then --check's summary or the job itself.
 * Returns the exit code; *fini the code for cluster_fini (the job's, which
 * makes MPI abort the others when it failed; 0 before it ran). */
static int serve(const struct seer_config *cfg, struct cluster *cl, uint32_t node,
		 uint32_t nnodes, bool check, int *fini)
{
	*fini = 0;
	char err[1024];
	fmt_set_memory(cfg->prefetch.format_memory); /* before the catalog: its readers share it */
	char cache_dir[4096];
	snprintf(cache_dir, sizeof(cache_dir), "%s", cfg->daemon.state_dir);
	struct catalog_opts co = {
		.root = cfg->dataset.path, .format = cfg->dataset.format,
		.params = { .hdf5_data = cfg->dataset.hdf5_data, .hdf5_labels = cfg->dataset.hdf5_labels,
			    .npz_data = cfg->dataset.npz_data, .npz_labels = cfg->dataset.npz_labels,
			    .npz_sample_axis = cfg->dataset.npz_sample_axis, .extensions = cfg->dataset.extensions,
			    .allow_empty_classes = cfg->dataset.allow_empty_classes,
			    .tar_extensions = cfg->dataset.tar_extensions, .tar_label = cfg->dataset.tar_label,
			    .skip_corrupt = strcmp(cfg->dataset.on_corrupt, "skip") == 0 },
		.cache_dir = cache_dir, .rebuild = cfg->dataset.rebuild_catalog, .progress = true,
		/* the decoded-image cache is planned with every image's size */
		.image_sizes = strcmp(cfg->transform.decode, "image") == 0 &&
			       strcmp(cfg->transform.cache, "decoded") == 0,
	};
	/* the job's saved positions are this daemon's before anything is written
	 * (the catalog cache included): node 0 locks them, every node learns */
	int lock = -1;
	if (!check) {
		struct {
			int32_t rc;
			char msg[2044];
		} v = { 0 };
		char sock[4096];
		if (node_path(sock, sizeof(sock), cfg->daemon.socket, 0) != 0)
			snprintf(sock, sizeof(sock), "%s", cfg->daemon.socket);
		if (node == 0)
			v.rc = joblock_take(cfg, sock, &lock, v.msg, sizeof(v.msg));
		if (cluster_bcast(cl, &v, sizeof(v)) != 0) {
			log_error("sharing node 0's job lock verdict failed (MPI)");
			v.rc = -EIO;
		} else if (v.rc != 0) {
			log_error("%s%s", node ? "node 0: " : "", v.msg);
		}
		if (v.rc != 0) {
			joblock_drop(cfg, lock);
			return 1;
		}
	}
	/* the socket answers from now on (startup.h): trainers and seerctl
	 * see the scan's progress, a stop signal stops the scan */
	struct catalog_progress prog = { 0 };
	struct startup *st = NULL;
	/* two scanning threads per I/O thread: a file's open and fstat are two
	 * metadata round trips (a stat is one), threads are what hides them */
	co.threads = (unsigned)MIN(cfg->prefetch.io_threads * 2, (uint64_t)256);
	co.prog = &prog;
	if (!check && startup_begin(&st, cfg, node, nnodes, &prog, err, sizeof(err)) != 0) {
		log_error("%s", err);
		*fini = 1; /* the other nodes are in the catalog's broadcast: abort them */
		joblock_drop(cfg, lock);
		return 1;
	}
	struct catalog *cat;
	int rc = cluster_share_catalog(cl, &co, &cat, err, sizeof(err));
	if (rc == -ECANCELED) {
		log_info("stopped during start-up (%s): exiting; no trainer was served, no positions "
			 "to save", err);
		startup_abort(st);
		joblock_drop(cfg, lock);
		return 0;
	}
	if (rc != 0) {
		log_error("%s", err);
		startup_abort(st);
		joblock_drop(cfg, lock);
		return 1;
	}
	startup_phase(st, STARTUP_SETUP);
	if (check) {
		char a[32];
		printf("dataset %s: %llu samples, %s, %u files, format %s, catalog hash %016llx\n",
		       cat->root, (unsigned long long)cat->nsamples,
		       fmt_size(a, sizeof(a), cat->total_bytes), cat->nfiles, cat->fmt->name,
		       (unsigned long long)cat->hash);
		rc = 0;
	} else {
		struct pfs_probe probe;
		bool probed;
		if (share_probe(cfg, cat, cl, node, &probe, &probed) != 0) {
			rc = *fini = 1;
			startup_abort(st);
		} else {
			rc = *fini = server_run(cfg, cat, cl, node, nnodes, probed ? &probe : NULL, st);
		}
	}
	catalog_free(cat);
	joblock_drop(cfg, lock);
	return rc;
}

int main(int argc, char **argv)
{
	log_set_prog("seerd");
	/* glibc gives each thread that allocates its own arena (up to 8 per
	 * core), and memory freed in one stays resident in it: with 16 I/O
	 * threads decoding HDF5 chunks and npz members the peak RSS varied by
	 * 10 MiB from run to run above the budgets (test_formats_e2e,
	 * test_memory_bounded_multi_sample). The daemon's hot paths do not
	 * allocate, so two arenas cost nothing measurable. Before any thread. */
	mallopt(M_ARENA_MAX, 2);
	/* before MPI_Init_thread: its threads (and every later one) inherit the
	 * mask, so SIGTERM from Slurm, mpirun or kill reaches the loop's
	 * signalfd and drains the job instead of killing the process */
	server_block_signals();
	struct cluster *cl = NULL;
	uint32_t node = 0, nnodes = 1;
	if (cluster_init(&cl, &argc, &argv, &node, &nnodes) != 0) {
		fprintf(stderr, "seerd: MPI initialisation failed (launched by mpirun/srun?)\n");
		return 1;
	}
	struct args a = { .files = xcalloc((size_t)argc + 1, sizeof(char *)),
			  .sets = xcalloc((size_t)argc + 1, sizeof(char *)) };
	struct seer_config cfg;
	char err[1024];
	int rc = parse_args(argc, argv, &a), fini = rc;
	if (rc < 0 && load_config(&cfg, &a, err, sizeof(err)) != 0) {
		fprintf(stderr, "seerd: %s\n", err);
		config_free(&cfg);
		rc = 2;
		fini = 0; /* every node reports it: no MPI abort */
	}
	free(a.files);
	free(a.sets);
	if (rc >= 0) {
		cluster_fini(cl, fini);
		return rc;
	}
	enum log_level lvl = LOG_INFO;
	log_parse_level(cfg.daemon.log_level, &lvl);
	log_set_level(lvl);
	log_set_node((int)node);
	fini = 0;
	if (a.print) {
		char *d = config_dump(&cfg);
		fputs(d, stdout);
		free(d);
		rc = 0;
	} else if (cluster_agree_config(cl, &cfg, err, sizeof(err)) != 0) {
		if (node == 0)
			log_error("%s", err);
		rc = 1;
	} else if (agree_stats_file(&cfg, cl, node, nnodes) != 0) {
		rc = 1;
	} else {
		raise_nofile();
		if (a.check) {
			/* --check serves nothing and saves nothing: Ctrl-C or SIGTERM
			 * during its scan ends it at once (the default action) */
			sigset_t mask;
			server_signals(&mask);
			pthread_sigmask(SIG_UNBLOCK, &mask, NULL);
		}
		rc = serve(&cfg, cl, node, nnodes, a.check, &fini);
	}
	config_free(&cfg);
	cluster_fini(cl, fini);
	return rc;
}
