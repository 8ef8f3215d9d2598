/* seer-trainer: a trainer that uses only the public API (include/seer.h).
 *
 * It takes every batch of the job, reads every byte of every sample (CRC32),
 * optionally sleeps an emulated compute time per step, and can log each
 * delivered sample for an independent check:
 *
 *   seer-trainer [--rank R --world W] [--socket PATH] [--log FILE]
 *                [--compute-ms MS] [--kill-after N] [--seek E:S] [--quiet]
 *                [--sync DIR --pause-at E:S [--pause-at E:S ...]]
 *                [--state-in FILE] [--reconnect MS]
 *
 * --state-in connects with the checkpoint record in FILE (seer_state's
 * bytes); at every pause the trainer writes its record (the batch it holds
 * counts as consumed) to DIR/state-R-E-S before announcing the pause.
 * --reconnect MS continues with a restarted seerd (SEER_OPT_RECONNECT).
 *
 * Log lines: "<epoch> <step> <index> <id> <label> <length> <crc32 hex>".
 * --tensor-log FILE (with a libseer that has seer_batch_tensor): one line per
 * batch that is one tensor, "<epoch> <step> <ndim> <d0> <d1> <d2> <d3>
 * <dtype> <layout> <crc32 hex of the whole block>", the block read through
 * the one pointer and the shape seer_batch_tensor gives.
 * Exit 0 after the job's last batch; 1 on any error (message on stderr).
 *
 * Pauses hold the job open for a test that must act while it runs (never a
 * sleep as synchronisation): on taking the first batch at or after E:S the
 * trainer keeps it unread and unreleased, creates DIR/paused-R-E-S (atomically;
 * it holds "epoch step" of the batch held) and waits until DIR/go-E-S or
 * DIR/go-R-E-S exists, then goes on. It gives up with exit 1 if DIR is removed
 * (the test ended) or after --pause-timeout seconds (default 900). */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "seer.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(double ms)
{
	if (ms <= 0)
		return;
	struct timespec ts = { (time_t)(ms / 1000), (long)(((uint64_t)(ms * 1e6)) % 1000000000ull) };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

#define MAX_PAUSES 16

struct pauses {
	const char *dir;
	double timeout_s;
	unsigned n, done; /* pauses are sorted; the first `done` have been taken */
	unsigned long long at[MAX_PAUSES][2];
};

static int pause_add(struct pauses *p, const char *arg)
{
	unsigned long long e, s;
	if (p->n == MAX_PAUSES || sscanf(arg, "%llu:%llu", &e, &s) != 2)
		return -1;
	unsigned i = p->n++;
	for (; i > 0 && (p->at[i - 1][0] > e || (p->at[i - 1][0] == e && p->at[i - 1][1] > s)); i--) {
		p->at[i][0] = p->at[i - 1][0];
		p->at[i][1] = p->at[i - 1][1];
	}
	p->at[i][0] = e;
	p->at[i][1] = s;
	return 0;
}

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* The client's checkpoint record into path (atomically). 0 or -1. */
static int save_state(seer_client_t *cl, const char *path)
{
	int64_t n = seer_state(cl, NULL, 0);
	if (n < 0) {
		fprintf(stderr, "seer-trainer: seer_state: %s\n", seer_errmsg());
		return -1;
	}
	char *buf = malloc((size_t)n), tmp[4200];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = buf && seer_state(cl, buf, (size_t)n) == n ? fopen(tmp, "wb") : NULL;
	int rc = f && fwrite(buf, 1, (size_t)n, f) == (size_t)n ? 0 : -1;
	if (f && fclose(f) != 0)
		rc = -1;
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -1;
	if (rc != 0)
		fprintf(stderr, "seer-trainer: cannot save the state to %s: %s\n", path, strerror(errno));
	free(buf);
	return rc;
}

/* Holding batch (e, s): announce every pause point it reached (after saving
 * the client's record next to it) and wait for the test's go on each. 0, or
 * -1 (message printed) when nobody said go. */
static int pause_maybe(struct pauses *p, seer_client_t *cl, int rank, unsigned long long e,
		       unsigned long long s)
{
	while (p->done < p->n && (p->at[p->done][0] < e ||
				  (p->at[p->done][0] == e && p->at[p->done][1] <= s))) {
		unsigned long long pe = p->at[p->done][0], ps = p->at[p->done][1];
		char name[4096], tmp[4200], go[4096], go_r[4096], st[4096];
		snprintf(st, sizeof(st), "%s/state-%d-%llu-%llu", p->dir, rank, pe, ps);
		if (save_state(cl, st) != 0)
			return -1;
		snprintf(name, sizeof(name), "%s/paused-%d-%llu-%llu", p->dir, rank, pe, ps);
		snprintf(tmp, sizeof(tmp), "%s.tmp", name);
		snprintf(go, sizeof(go), "%s/go-%llu-%llu", p->dir, pe, ps);
		snprintf(go_r, sizeof(go_r), "%s/go-%d-%llu-%llu", p->dir, rank, pe, ps);
		FILE *f = fopen(tmp, "w");
		if (!f || fprintf(f, "%llu %llu\n", e, s) < 0 || fclose(f) != 0 ||
		    rename(tmp, name) != 0) {
			fprintf(stderr, "seer-trainer %d: cannot announce the pause at %llu:%llu "
				"in %s: %s\n", rank, pe, ps, p->dir, strerror(errno));
			return -1;
		}
		double t0 = now();
		while (!exists(go) && !exists(go_r)) {
			if (!exists(p->dir)) {
				fprintf(stderr, "seer-trainer %d: %s was removed while paused at "
					"%llu:%llu (the test ended)\n", rank, p->dir, pe, ps);
				return -1;
			}
			if (now() - t0 > p->timeout_s) {
				fprintf(stderr, "seer-trainer %d: no go for the pause at %llu:%llu "
					"within %.0f s (%s)\n", rank, pe, ps, p->timeout_s, go);
				return -1;
			}
			sleep_ms(2);
		}
		p->done++;
	}
	return 0;
}

/* The batch as one tensor (seerd's image transform): a line of its shape
 * and the CRC of the whole block, read from the one pointer. */
static void log_tensor(FILE *f, seer_batch_t *b)
{
#ifdef SEER_LAYOUT_NCHW
	const void *data;
	int dtype, layout;
	uint64_t d[4] = { 0 };
	int nd = seer_batch_tensor(b, &data, &dtype, &layout, d, 4);
	if (nd != 4)
		return;
	uint64_t elsize = dtype == SEER_DTYPE_F32 ? 4 : dtype == SEER_DTYPE_F16 ? 2 : 1;
	uint32_t crc = (uint32_t)crc32_z(0, data, d[0] * d[1] * d[2] * d[3] * elsize);
	fprintf(f, "%llu %llu %d %llu %llu %llu %llu %d %d %08x\n",
		(unsigned long long)seer_batch_epoch(b), (unsigned long long)seer_batch_step(b), nd,
		(unsigned long long)d[0], (unsigned long long)d[1], (unsigned long long)d[2],
		(unsigned long long)d[3], dtype, layout, crc);
#else
	(void)f;
	(void)b;
#endif
}

int main(int argc, char **argv)
{
	struct pauses pauses = { .timeout_s = 900 };
	seer_options_t o = { 0 };
	const char *log_path = NULL, *state_in = NULL, *tensor_log_path = NULL;
	char *record = NULL;
	double compute_ms = 0;
	long kill_after = -1;
	int quiet = 0, have_seek = 0, show = 0;
	unsigned long long seek_e = 0, seek_s = 0;
	static const struct option opts[] = {
		{ "rank", required_argument, NULL, 'r' },
		{ "world", required_argument, NULL, 'w' },
		{ "socket", required_argument, NULL, 'S' },
		{ "log", required_argument, NULL, 'l' },
		{ "compute-ms", required_argument, NULL, 'c' },
		{ "kill-after", required_argument, NULL, 'k' },
		{ "seek", required_argument, NULL, 'e' },
		{ "start", required_argument, NULL, 't' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "show", required_argument, NULL, 'w' + 256 },
		{ "sync", required_argument, NULL, 'y' + 256 },
		{ "pause-at", required_argument, NULL, 'p' + 256 },
		{ "pause-timeout", required_argument, NULL, 'T' + 256 },
		{ "state-in", required_argument, NULL, 'i' + 256 },
		{ "reconnect", required_argument, NULL, 'R' + 256 },
		{ "tensor-log", required_argument, NULL, 'L' + 256 },
		{ 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "r:w:S:l:c:k:e:t:q", opts, NULL)) != -1) {
		switch (c) {
		case 'r': o.rank = atoi(optarg); break;
		case 'w': o.world_size = atoi(optarg); break;
		case 'S': o.socket_path = optarg; break;
		case 'l': log_path = optarg; break;
		case 'L' + 256: tensor_log_path = optarg; break;
		case 'c': compute_ms = atof(optarg); break;
		case 'k': kill_after = atol(optarg); break;
		case 'e':
			if (sscanf(optarg, "%llu:%llu", &seek_e, &seek_s) != 2) {
				fprintf(stderr, "seer-trainer: --seek takes EPOCH:STEP\n");
				return 2;
			}
			have_seek = 1;
			break;
		case 't':
			if (sscanf(optarg, "%llu:%llu", &seek_e, &seek_s) != 2) {
				fprintf(stderr, "seer-trainer: --start takes EPOCH:STEP\n");
				return 2;
			}
			o.flags |= SEER_OPT_START_AT;
			o.start_epoch = seek_e;
			o.start_step = seek_s;
			break;
		case 'q': quiet = 1; break;
		case 'w' + 256: show = atoi(optarg); break;
		case 'y' + 256: pauses.dir = optarg; break;
		case 'p' + 256:
			if (pause_add(&pauses, optarg) != 0) {
				fprintf(stderr, "seer-trainer: --pause-at takes EPOCH:STEP (at most %d)\n",
					MAX_PAUSES);
				return 2;
			}
			break;
		case 'T' + 256: pauses.timeout_s = atof(optarg); break;
		case 'i' + 256: state_in = optarg; break;
		case 'R' + 256:
			o.flags |= SEER_OPT_RECONNECT;
			o.reconnect_ms = atoi(optarg);
			break;
		default:
			fprintf(stderr, "usage: seer-trainer [--rank R --world W] [--socket PATH] "
					"[--log FILE] [--compute-ms MS] [--kill-after N] [--seek E:S] "
					"[--start E:S] [--show N] [--quiet] "
					"[--sync DIR --pause-at E:S ... [--pause-timeout S]] "
					"[--state-in FILE] [--reconnect MS] [--tensor-log FILE]\n");
			return 2;
		}
	}
	if (pauses.n && !pauses.dir) {
		fprintf(stderr, "seer-trainer: --pause-at needs --sync DIR\n");
		return 2;
	}
	FILE *log = NULL, *tlog = NULL;
	if (log_path && !(log = fopen(log_path, "w"))) {
		fprintf(stderr, "seer-trainer: %s: %s\n", log_path, strerror(errno));
		return 1;
	}
	if (tensor_log_path && !(tlog = fopen(tensor_log_path, "w"))) {
		fprintf(stderr, "seer-trainer: %s: %s\n", tensor_log_path, strerror(errno));
		return 1;
	}
	if (state_in) {
		FILE *f = fopen(state_in, "rb");
		long n = -1;
		if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
		    (record = malloc((size_t)n)) && fread(record, 1, (size_t)n, f) == (size_t)n) {
			o.record = record;
			o.record_len = (size_t)n;
		} else {
			fprintf(stderr, "seer-trainer: cannot read the state %s\n", state_in);
			return 2;
		}
		fclose(f);
	}
	seer_client_t *cl;
	int rc = seer_connect(&o, &cl);
	free(record);
	if (rc < 0) {
		fprintf(stderr, "seer-trainer: connect: %s\n", seer_errmsg());
		return 1;
	}
	int rank = seer_rank(cl);
	if (have_seek && (rc = seer_seek(cl, seek_e, seek_s)) < 0) {
		fprintf(stderr, "seer-trainer %d: seek: %s\n", rank, seer_errmsg());
		return 1;
	}
	double t0 = now(), stall = 0, max_stall = 0;
	unsigned long long batches = 0, samples = 0, bytes = 0, failed = 0;
	uint32_t acc = 0;
	for (;;) {
		seer_batch_t *b;
		double tw = now();
		rc = seer_next(cl, 60000, &b);
		double waited = now() - tw;
		if (rc == SEER_EEPOCH)
			continue;
		if (rc == SEER_EEND)
			break;
		if (rc == SEER_EBATCH) {
			fprintf(stderr, "seer-trainer %d: batch %llu:%llu failed: %s\n", rank,
				(unsigned long long)seer_batch_epoch(b),
				(unsigned long long)seer_batch_step(b), seer_batch_error(b));
			if (log)
				fprintf(log, "%llu %llu FAILED %s\n", (unsigned long long)seer_batch_epoch(b),
					(unsigned long long)seer_batch_step(b), seer_batch_error(b));
			failed++;
			seer_release(cl, b);
			continue;
		}
		if (rc < 0) {
			fprintf(stderr, "seer-trainer %d: %s: %s\n", rank, seer_strerror(rc), seer_errmsg());
			seer_close(cl);
			return 1;
		}
		if (log && pauses.done < pauses.n)
			fflush(log); /* a trainer killed while paused leaves what it released */
		if (pause_maybe(&pauses, cl, rank, (unsigned long long)seer_batch_epoch(b),
				(unsigned long long)seer_batch_step(b)) != 0) {
			seer_close(cl);
			return 1;
		}
		stall += waited;
		if (waited > max_stall)
			max_stall = waited;
		uint32_t n = seer_batch_len(b);
		if ((long)batches < show) {
			printf("trainer %d: epoch %llu step %llu: %u samples, ids", rank,
			       (unsigned long long)seer_batch_epoch(b),
			       (unsigned long long)seer_batch_step(b), n);
			for (uint32_t i = 0; i < n && i < 4; i++)
				printf(" %llu", (unsigned long long)seer_sample_id(b, i));
			printf("..., labels");
			for (uint32_t i = 0; i < n && i < 4; i++)
				printf(" %lld", (long long)seer_sample_label(b, i));
			printf("..., first sample %llu bytes\n", (unsigned long long)seer_sample_size(b, 0));
		}
		for (uint32_t i = 0; i < n; i++) {
			const unsigned char *p = seer_sample_data(b, i);
			uint64_t len = seer_sample_size(b, i);
			uint32_t crc = (uint32_t)crc32_z(0, p, len);
			acc ^= crc;
			if (log)
				fprintf(log, "%llu %llu %u %llu %lld %llu %08x\n",
					(unsigned long long)seer_batch_epoch(b),
					(unsigned long long)seer_batch_step(b), i,
					(unsigned long long)seer_sample_id(b, i),
					(long long)seer_sample_label(b, i), (unsigned long long)len, crc);
			bytes += len;
		}
		if (tlog)
			log_tensor(tlog, b);
		samples += n;
		batches++;
		if (kill_after >= 0 && (long)batches >= kill_after) {
			if (log)
				fflush(log);
			raise(SIGKILL); /* die holding this batch, as a crashed trainer does */
		}
		sleep_ms(compute_ms);
		seer_release(cl, b);
	}
	double dt = now() - t0;
	seer_close(cl);
	if (log)
		fclose(log);
	if (tlog)
		fclose(tlog);
	if (!quiet)
		printf("trainer %d: %llu batches, %llu samples, %.1f MB in %.2f s: %.0f samples/s, "
		       "%.3f GB/s, stall %.3f s (max %.1f ms)%s [crc %08x]\n",
		       rank, batches, samples, (double)bytes / 1e6, dt, (double)samples / dt,
		       (double)bytes / dt / 1e9, stall, max_stall * 1e3,
		       failed ? " SOME BATCHES FAILED" : "", acc);
	return failed ? 1 : 0;
}
