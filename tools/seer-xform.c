/* seer-xform: seerd's image transform on files, outside the daemon.
 *
 *   seer-xform apply [-s SPEC] [-S SEED] [-e EPOCH] [-t THREADS] [-o OUT] [-x] [-T] [-b]
 *                    FILE... | -
 *       Transforms each FILE as sample id = its position (or "ID PATH" lines
 *       from stdin with "-") and writes the batch, one contiguous
 *       [B, 3, H, W] / [B, H, W, 3] block, to OUT; prints one line per sample:
 *       "index id width height top left crop_h crop_w flip tries dct_num
 *        region_w region_h" or "index id ERROR reason".
 *       -x: exact (no DCT scaling), -T: TurboJPEG whole-image decode,
 *       -b: through a decoded blob (cache = decoded), -t: worker threads
 *       (samples dealt round-robin; the output must not depend on it),
 *       -D MASK: the JPEG DCT scales allowed (bit M: M/8).
 *
 *   seer-xform bench [-s SPEC] [-d SECONDS] FILE...
 *       Per-core images/s of decode + crop + resize + normalise on one thread
 *       (all files in memory), for each decode path, against decode alone
 *       (libjpeg-turbo full size, as djpeg does). Prints numbers; never fails
 *       on a timing. tools/xform_bench.py runs it beside PIL+torchvision
 *       and djpeg.
 *
 * Exit status: 0, 1 when a sample failed (apply), 2 on usage errors. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jpeglib.h>
#include <turbojpeg.h>

#include "../src/util/util.h"
#include "../src/xform/xform.h"

struct input {
	char *path;
	uint64_t id;
	uint8_t *data;
	size_t len;
};

struct opts {
	struct xf_params p;
	uint64_t seed, epoch;
	unsigned threads;
	const char *out;
	bool blob;
	double seconds;
};

static void usage(void)
{
	fprintf(stderr,
		"usage: seer-xform apply [-s spec] [-S seed] [-e epoch] [-t threads] [-o out] "
		"[-x] [-T] [-b] [-D mask] FILE...|-\n"
		"       seer-xform bench [-s spec] [-d seconds] FILE...\n");
	exit(2);
}

static int load(struct input *in)
{
	FILE *f = fopen(in->path, "rb");
	if (!f)
		return -errno;
	size_t cap = 1 << 16, n = 0;
	uint8_t *b = xmalloc(cap);
	size_t got;
	while ((got = fread(b + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap)
			b = xrealloc(b, cap *= 2);
	}
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		free(b);
		return -EIO;
	}
	in->data = b;
	in->len = n;
	return 0;
}

static struct input *read_inputs(int argc, char **argv, size_t *n)
{
	struct input *v = NULL;
	size_t cap = 0;
	*n = 0;
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "-") != 0) {
			if (*n == cap)
				v = xrealloc(v, (cap = cap * 2 + 16) * sizeof(*v));
			v[*n] = (struct input){ .path = xstrdup(argv[i]), .id = *n };
			(*n)++;
			continue;
		}
		char line[4200];
		while (fgets(line, sizeof(line), stdin)) {
			char *sp = strchr(line, ' ');
			line[strcspn(line, "\n")] = '\0';
			if (!sp)
				continue;
			*sp = '\0';
			if (*n == cap)
				v = xrealloc(v, (cap = cap * 2 + 16) * sizeof(*v));
			v[*n] = (struct input){ .path = xstrdup(sp + 1) };
			if (parse_u64(line, &v[*n].id) != 0) {
				fprintf(stderr, "seer-xform: bad id line '%s'\n", line);
				exit(2);
			}
			(*n)++;
		}
	}
	for (size_t i = 0; i < *n; i++) {
		int rc = load(&v[i]);
		if (rc) {
			fprintf(stderr, "seer-xform: %s: %s\n", v[i].path, strerror(-rc));
			exit(2);
		}
	}
	return v;
}

/* ---- apply ----------------------------------------------------------------------- */

struct apply_job {
	const struct opts *o;
	struct input *in;
	size_t n;
	unsigned t, nt;
	uint8_t *batch;
	struct xf_info *info;
	char (*err)[512];
	int *rc;
};

/* One sample through a decoded blob, as seerd's decoded cache would. */
static int via_blob(const struct opts *o, struct xf_scratch *s, const struct input *in,
		    uint8_t *batch, uint32_t idx, struct xf_info *info, char *err, size_t errlen)
{
	enum xf_format f;
	uint32_t w, h;
	int rc = xf_probe(s, in->data, in->len, &f, &w, &h, err, errlen);
	if (rc)
		return rc;
	size_t cap = xf_blob_bytes(&o->p, w, h), used;
	void *blob = xmalloc(cap);
	rc = xf_decode_blob(&o->p, s, in->data, in->len, blob, cap, &used, err, errlen);
	if (rc == 0)
		rc = xf_batch_write(&o->p, s, o->seed, o->epoch, in->id, blob, used, batch, idx,
				    info, err, errlen);
	free(blob);
	return rc;
}

static void *apply_worker(void *arg)
{
	struct apply_job *j = arg;
	struct xf_scratch *s = xf_scratch_new(0);
	if (!s) {
		fprintf(stderr, "seer-xform: out of memory\n");
		exit(2);
	}
	for (size_t i = j->t; i < j->n; i += j->nt) {
		const struct input *in = &j->in[i];
		if (j->o->blob)
			j->rc[i] = via_blob(j->o, s, in, j->batch, (uint32_t)i, &j->info[i], j->err[i],
					    sizeof(j->err[i]));
		else
			j->rc[i] = xf_batch_write(&j->o->p, s, j->o->seed, j->o->epoch, in->id,
						  in->data, in->len, j->batch, (uint32_t)i,
						  &j->info[i], j->err[i], sizeof(j->err[i]));
	}
	xf_scratch_free(s);
	return NULL;
}

static int cmd_apply(const struct opts *o, struct input *in, size_t n)
{
	size_t one = xf_sample_bytes(&o->p);
	uint8_t *batch = xcalloc(n ? n : 1, one);
	struct xf_info *info = xcalloc(n + 1, sizeof(*info));
	char (*err)[512] = xcalloc(n + 1, sizeof(*err));
	int *rc = xcalloc(n + 1, sizeof(int));
	unsigned nt = o->threads ? o->threads : 1;
	pthread_t *th = xcalloc(nt, sizeof(*th));
	struct apply_job *jobs = xcalloc(nt, sizeof(*jobs));
	for (unsigned t = 0; t < nt; t++) {
		jobs[t] = (struct apply_job){ o, in, n, t, nt, batch, info, err, rc };
		if (pthread_create(&th[t], NULL, apply_worker, &jobs[t]) != 0) {
			fprintf(stderr, "seer-xform: pthread_create failed\n");
			return 2;
		}
	}
	for (unsigned t = 0; t < nt; t++)
		pthread_join(th[t], NULL);
	int status = 0;
	for (size_t i = 0; i < n; i++) {
		const struct xf_info *f = &info[i];
		if (rc[i]) {
			printf("%zu %llu ERROR %s: %s\n", i, (unsigned long long)in[i].id, in[i].path,
			       err[i]);
			status = 1;
			continue;
		}
		printf("%zu %llu %u %u %d %d %d %d %d %d %u %u %u\n", i,
		       (unsigned long long)in[i].id, f->width, f->height, f->box.top, f->box.left,
		       f->box.height, f->box.width, f->box.flip, f->box.tries, f->dct_num,
		       f->region_w, f->region_h);
	}
	if (o->out) {
		FILE *f = fopen(o->out, "wb");
		if (!f || fwrite(batch, one, n, f) != n || fclose(f) != 0) {
			fprintf(stderr, "seer-xform: writing %s: %s\n", o->out, strerror(errno));
			return 2;
		}
	}
	free(th);
	free(jobs);
	free(rc);
	free(err);
	free(info);
	free(batch);
	return status;
}

/* ---- bench ----------------------------------------------------------------------
 * Rates are images per CPU second of this thread: the per-core rate, and
 * steadier than wall time on a shared machine. */

static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- bench------------------------------------------------------------------- */

struct rate {
	double per_s;
	double decode_frac;
	uint64_t n;
};

static struct rate bench_xform(const struct xf_params *p, struct input *in, size_t n,
			       double seconds)
{
	struct xf_scratch *s = xf_scratch_new(0);
	uint8_t *dst = xmalloc(xf_sample_bytes(p));
	uint64_t done = 0, dec = 0, res = 0;
	char err[512];
	double t0 = cpu_s(), t = t0;
	for (uint64_t epoch = 0; t - t0 < seconds; epoch++) {
		for (size_t i = 0; i < n; i++) {
			struct xf_info info;
			if (xf_transform(p, s, 42, epoch, i, in[i].data, in[i].len, dst, &info, err,
					 sizeof(err)) != 0) {
				fprintf(stderr, "seer-xform: %s: %s\n", in[i].path, err);
				exit(1);
			}
			dec += info.decode_ns;
			res += info.resize_ns;
			done++;
		}
		t = cpu_s();
	}
	xf_scratch_free(s);
	free(dst);
	return (struct rate){ done / (t - t0), (double)dec / (double)(dec + res + 1), done };
}

/* Decode alone, whole image at full size, RGB, through the libjpeg API (the
 * work djpeg does, without its process start and file output). */
static struct rate bench_libjpeg(struct input *in, size_t n, double seconds)
{
	struct jpeg_decompress_struct ci;
	struct jpeg_error_mgr em;
	ci.err = jpeg_std_error(&em);
	jpeg_create_decompress(&ci);
	uint8_t *buf = NULL;
	size_t cap = 0;
	uint64_t done = 0;
	double t0 = cpu_s(), t = t0;
	while (t - t0 < seconds) {
		for (size_t i = 0; i < n; i++) {
			jpeg_mem_src(&ci, in[i].data, (unsigned long)in[i].len);
			jpeg_read_header(&ci, TRUE);
			ci.out_color_space = JCS_RGB;
			jpeg_start_decompress(&ci);
			size_t row = (size_t)ci.output_width * ci.output_components;
			if (row * ci.output_height > cap)
				buf = xrealloc(buf, cap = row * ci.output_height);
			while (ci.output_scanline < ci.output_height) {
				JSAMPROW r = buf + row * ci.output_scanline;
				jpeg_read_scanlines(&ci, &r, 1);
			}
			jpeg_finish_decompress(&ci);
			done++;
		}
		t = cpu_s();
	}
	jpeg_destroy_decompress(&ci);
	free(buf);
	return (struct rate){ done / (t - t0), 1.0, done };
}

static int cmd_bench(const struct opts *o, struct input *in, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (xf_sniff(in[i].data, in[i].len) != XF_FMT_JPEG) {
			fprintf(stderr, "seer-xform bench: %s is not a JPEG\n", in[i].path);
			return 2;
		}
	char spec[512];
	xf_params_format(&o->p, spec, sizeof(spec));
	printf("# %zu JPEG files, %.1f CPU s per line, one thread, images per CPU second; "
	       "spec: %s\n", n, o->seconds, spec);
	struct rate dj = bench_libjpeg(in, n, o->seconds);
	printf("%-44s %9.1f images/s\n", "decode only (libjpeg-turbo, full size)", dj.per_s);
	static const struct {
		const char *name;
		bool exact;
		enum xf_jpeg_path path;
		uint32_t scales;
	} v[] = {
		{ "seer: partial decode, DCT scales 1/8,1/4,1/2", false, XF_JPEG_PARTIAL, 0 },
		{ "seer: partial decode, any DCT scale 1/8..8/8", false, XF_JPEG_PARTIAL,
		  XF_DCT_SCALES_ALL },
		{ "seer: TurboJPEG whole image, default scales", false, XF_JPEG_TURBO_FULL, 0 },
		{ "seer: exact (partial decode, full size)", true, XF_JPEG_PARTIAL, 0 },
		{ "seer: exact, TurboJPEG whole image", true, XF_JPEG_TURBO_FULL, 0 },
	};
	for (size_t k = 0; k < ARRAY_SIZE(v); k++) {
		struct xf_params p = o->p;
		p.exact = v[k].exact;
		p.jpeg_path = v[k].path;
		p.dct_scales = v[k].scales;
		struct rate r = bench_xform(&p, in, n, o->seconds);
		printf("%-44s %9.1f images/s  %.2fx decode-only  (decode %2.0f%% of its time)\n",
		       v[k].name, r.per_s, r.per_s / dj.per_s, 100 * r.decode_frac);
	}
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		usage();
	const char *cmd = argv[1];
	struct opts o = { .threads = 1, .seconds = 3 };
	xf_params_default(&o.p);
	o.p.decode = XF_DECODE_IMAGE;
	char err[512];
	int opt;
	optind = 2;
	while ((opt = getopt(argc, argv, "s:S:e:t:o:xTbd:D:h")) != -1) {
		uint64_t v;
		switch (opt) {
		case 's':
			if (xf_params_parse(&o.p, optarg, err, sizeof(err)) != 0) {
				fprintf(stderr, "seer-xform: -s: %s\n", err);
				return 2;
			}
			break;
		case 'S': if (parse_u64(optarg, &o.seed)) usage(); break;
		case 'e': if (parse_u64(optarg, &o.epoch)) usage(); break;
		case 't': if (parse_u64(optarg, &v) || v < 1 || v > 256) usage(); o.threads = (unsigned)v; break;
		case 'o': o.out = optarg; break;
		case 'x': o.p.exact = true; break;
		case 'T': o.p.jpeg_path = XF_JPEG_TURBO_FULL; break;
		case 'b': o.blob = true; break;
		case 'd': if (parse_double(optarg, &o.seconds) || o.seconds <= 0) usage(); break;
		case 'D': if (parse_u64(optarg, &v) || v > XF_DCT_SCALES_ALL) usage(); o.p.dct_scales = (uint32_t)v; break;
		default: usage();
		}
	}
	o.p.decode = XF_DECODE_IMAGE;
	if (xf_params_check(&o.p, err, sizeof(err)) != 0) {
		fprintf(stderr, "seer-xform: %s\n", err);
		return 2;
	}
	size_t n;
	struct input *in = read_inputs(argc - optind, argv + optind, &n);
	int rc;
	if (strcmp(cmd, "apply") == 0)
		rc = cmd_apply(&o, in, n);
	else if (strcmp(cmd, "bench") == 0 && n > 0)
		rc = cmd_bench(&o, in, n);
	else
		usage();
	for (size_t i = 0; i < n; i++) {
		free(in[i].path);
		free(in[i].data);
	}
	free(in);
	return rc;
}
