/*
 * codec_bench.c - throughput of the erasure/ API against raw ISA-L on the
 * same buffers, in one run: encode, one-chunk parity update and decode for
 * xor k=3,7 and rs 4+2, 8+2, 10+4 with 1 MiB chunks. Prints GB/s (1e9 B/s)
 * and the ratio ours/raw; the target is >= 0.95.
 *
 * Bytes counted: encode and decode, the k source chunks read; update, the
 * one delta chunk. Raw decode does what a direct ISA-L user must per call:
 * invert the survivor matrix, expand tables, ec_encode_data (xor: xor_gen).
 * Ours and raw run interleaved call by call and the median call of each
 * counts, so drift and foreign load on a shared machine hit both alike.
 *
 * Usage: codec_bench [seconds_per_line] (default 1). With a usable CUDA
 * device the GPU backend is measured too, host to host: the same buffers,
 * pinned with ers_codec_register(), copies to and from the device
 * included, interleaved call by call with our ISA-L codec; `gpu/cpu` is
 * its speed over ours on the CPU. Kernels on device-resident buffers are
 * gpu_bench's.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <isa-l/erasure_code.h>
#include <isa-l/raid.h>

#include "erasure.h"

#define CHUNK ((size_t)1 << 20)
#define MIN_SAMPLES 21
#define MAX_SAMPLES 100000

enum op { OP_ENCODE, OP_UPDATE, OP_DECODE1, OP_DECODEM, NOPS };
static const char *const op_names[NOPS] = { "encode", "update", "decode-1",
					    "decode-m" };

struct bench {
	/* Aligned like the codec's own copy, so raw is not handicapped. */
	uint8_t tbls[32 * ERS_MAX_K * ERS_MAX_M] __attribute__((aligned(64)));
	uint8_t matrix[(ERS_MAX_K + ERS_MAX_M) * ERS_MAX_K];
	struct ers_scheme s;
	int k, m;
	uint8_t *chunk[ERS_MAX_K + ERS_MAX_M];
	uint8_t *delta;
	struct ers_codec *codec;
	int lost[ERS_MAX_M];
	int nlost;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Raw ISA-L decode, as ec_simple_example does it. */
static void raw_decode(struct bench *b)
{
	uint8_t sub[ERS_MAX_K * ERS_MAX_K], inv[ERS_MAX_K * ERS_MAX_K];
	uint8_t tb[32 * ERS_MAX_K * ERS_MAX_M] __attribute__((aligned(64)));
	uint8_t dm[ERS_MAX_M * ERS_MAX_K];
	unsigned char *src[ERS_MAX_K], *out[ERS_MAX_M];
	uint8_t lostmask[ERS_MAX_K + ERS_MAX_M] = { 0 };
	int k = b->k, n = 0;

	for (int i = 0; i < b->nlost; i++) {
		lostmask[b->lost[i]] = 1;
		out[i] = b->chunk[b->lost[i]];
	}
	if (b->s.kind == ERS_XOR) {
		void *v[ERS_MAX_K + 1];

		for (int i = 0; i < k + 1; i++)
			if (!lostmask[i])
				v[n++] = b->chunk[i];
		v[n] = out[0];
		xor_gen(k + 1, (int)CHUNK, v);
		return;
	}
	for (int i = 0; i < k + b->m && n < k; i++) {
		if (lostmask[i])
			continue;
		memcpy(&sub[n * k], &b->matrix[i * k], (size_t)k);
		src[n++] = b->chunk[i];
	}
	if (gf_invert_matrix(sub, inv, k))
		abort();
	for (int i = 0; i < b->nlost; i++) {
		int l = b->lost[i];

		if (l < k) {
			memcpy(&dm[i * k], &inv[l * k], (size_t)k);
			continue;
		}
		for (int j = 0; j < k; j++) {
			uint8_t acc = 0;

			for (int t = 0; t < k; t++)
				acc ^= gf_mul(b->matrix[l * k + t],
					      inv[t * k + j]);
			dm[i * k + j] = acc;
		}
	}
	ec_init_tables(k, b->nlost, dm, tb);
	ec_encode_data((int)CHUNK, k, b->nlost, tb, src, out);
}

static void raw_op(struct bench *b, enum op op)
{
	void *v[ERS_MAX_K + 1];

	switch (op) {
	case OP_ENCODE:
		if (b->s.kind == ERS_XOR) {
			for (int i = 0; i <= b->k; i++)
				v[i] = b->chunk[i];
			xor_gen(b->k + 1, (int)CHUNK, v);
		} else {
			ec_encode_data((int)CHUNK, b->k, b->m, b->tbls,
				       b->chunk, &b->chunk[b->k]);
		}
		break;
	case OP_UPDATE:
		if (b->s.kind == ERS_XOR) {
			v[0] = b->chunk[b->k];
			v[1] = b->delta;
			v[2] = b->chunk[b->k];
			xor_gen(3, (int)CHUNK, v);
		} else {
			ec_encode_data_update((int)CHUNK, b->k, b->m, 1,
					      b->tbls, b->delta,
					      &b->chunk[b->k]);
		}
		break;
	case OP_DECODE1:
	case OP_DECODEM:
		raw_decode(b);
		break;
	case NOPS:
		break;
	}
}

static int our_op(struct bench *b, struct ers_codec *c, enum op op)
{
	switch (op) {
	case OP_ENCODE:
		return ers_encode(c, CHUNK, (const uint8_t *const *)b->chunk,
				  &b->chunk[b->k]);
	case OP_UPDATE:
		return ers_update(c, CHUNK, 1, b->delta, &b->chunk[b->k]);
	case OP_DECODE1:
	case OP_DECODEM:
		return ers_decode(c, CHUNK, b->lost, b->nlost, b->chunk);
	case NOPS:
		break;
	}
	return -EINVAL;
}

static void run_op(struct bench *b, struct ers_codec *c, enum op op)
{
	if (!c) {
		raw_op(b, op);
	} else if (our_op(b, c, op)) {
		fprintf(stderr, "codec failed: %s\n", ers_last_error());
		exit(1);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n & 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * Median seconds per call of @a and of @b (NULL = raw ISA-L), timed call
 * by call and interleaved, the order flipping every pair, for about @secs:
 * on a shared machine a burst of foreign load then hits single calls of
 * both sides instead of whole rounds of one, and the median drops it.
 */
static void measure(struct bench *bn, struct ers_codec *a, struct ers_codec *b,
		    enum op op, double secs, double *ta, double *tb)
{
	static double va[MAX_SAMPLES], vb[MAX_SAMPLES];
	double end = now() + secs;
	int n = 0;

	for (int i = 0; i < 4; i++) {
		run_op(bn, a, op);
		run_op(bn, b, op);
	}
	while (n < MAX_SAMPLES && (n < MIN_SAMPLES || now() < end)) {
		double t0, t1, t2;

		t0 = now();
		run_op(bn, n & 1 ? b : a, op);
		t1 = now();
		run_op(bn, n & 1 ? a : b, op);
		t2 = now();
		va[n] = n & 1 ? t2 - t1 : t1 - t0;
		vb[n] = n & 1 ? t1 - t0 : t2 - t1;
		n++;
	}
	*ta = median(va, n);
	*tb = median(vb, n);
}

static double gbps(const struct bench *b, enum op op, double sec_per_call)
{
	size_t bytes = op == OP_UPDATE ? CHUNK : (size_t)b->k * CHUNK;

	return (double)bytes / sec_per_call / 1e9;
}

static void set_lost(struct bench *b, enum op op)
{
	b->nlost = op == OP_DECODEM ? b->m : 1;
	for (int i = 0; i < b->nlost; i++)
		b->lost[i] = i; /* data chunks: the expensive case */
}

static int bench_setup(struct bench *b, const char *scheme)
{
	uint64_t st = 0x9E3779B97F4A7C15ull;

	memset(b, 0, sizeof(*b));
	if (ers_scheme_parse(scheme, &b->s) ||
	    ers_codec_new(&b->s, NULL, &b->codec)) {
		fprintf(stderr, "%s: %s\n", scheme, ers_last_error());
		return -1;
	}
	b->k = b->s.k;
	b->m = b->s.m;
	for (int i = 0; i <= b->k + b->m; i++) {
		uint8_t *p = aligned_alloc(64, CHUNK);

		if (!p)
			return -1;
		for (size_t j = 0; j < CHUNK; j += 8) {
			st ^= st << 13;
			st ^= st >> 7;
			st ^= st << 17;
			memcpy(p + j, &st, 8);
		}
		if (i < b->k + b->m)
			b->chunk[i] = p;
		else
			b->delta = p;
	}
	if (b->s.kind == ERS_RS) {
		gf_gen_cauchy1_matrix(b->matrix, b->k + b->m, b->k);
		ec_init_tables(b->k, b->m, &b->matrix[b->k * b->k], b->tbls);
	}
	return 0;
}

static void bench_free(struct bench *b)
{
	for (int i = 0; i < b->k + b->m; i++)
		free(b->chunk[i]);
	free(b->delta);
	ers_codec_free(b->codec);
}

/* The GPU codec for @b's scheme, with every bench buffer pinned for it. */
static int gpu_open(struct bench *b, const struct ers_codec_opts *o,
		    struct ers_codec **g)
{
	if (ers_codec_new(&b->s, o, g)) {
		fprintf(stderr, "gpu codec: %s\n", ers_last_error());
		return -1;
	}
	for (int i = 0; i <= b->k + b->m; i++) {
		uint8_t *p = i < b->k + b->m ? b->chunk[i] : b->delta;

		if (ers_codec_register(*g, p, CHUNK)) {
			fprintf(stderr, "gpu pin: %s\n", ers_last_error());
			while (--i >= 0)
				ers_codec_unregister(*g, i < b->k + b->m
								 ? b->chunk[i]
								 : b->delta);
			ers_codec_free(*g);
			*g = NULL;
			return -1;
		}
	}
	return 0;
}

static void gpu_close(struct bench *b, struct ers_codec *g)
{
	if (!g)
		return;
	for (int i = 0; i < b->k + b->m; i++)
		ers_codec_unregister(g, b->chunk[i]);
	ers_codec_unregister(g, b->delta);
	ers_codec_free(g);
}

int main(int argc, char **argv)
{
	static const char *const schemes[] = { "xor:3", "xor:7", "rs:4+2",
					       "rs:8+2", "rs:10+4" };
	struct ers_codec_opts gopt = { .backend = ERS_BACKEND_GPU };
	double secs = argc > 1 ? atof(argv[1]) : 1.0;
	int have_gpu = ers_backend_probe(ERS_BACKEND_GPU) == 0;
	double worst = 1e9;

	if (secs <= 0)
		secs = 1.0;
	printf("codec_bench: 1 MiB chunks, GB/s = 1e9 B/s from the median "
	       "call, ours and raw ISA-L interleaved call by call for %.2f s "
	       "per line\n",
	       secs);
	if (!have_gpu)
		printf("gpu: not measured: %s\n", ers_last_error());
	printf("%-8s %-9s %10s %10s %7s %10s %7s\n", "scheme", "op", "ours",
	       "isa-l raw", "ratio", "gpu", "gpu/cpu");
	for (size_t si = 0; si < sizeof(schemes) / sizeof(schemes[0]); si++) {
		struct bench b;
		struct ers_codec *g = NULL;

		if (bench_setup(&b, schemes[si]))
			return 1;
		if (have_gpu && gpu_open(&b, &gopt, &g))
			g = NULL;
		for (int op = 0; op < NOPS; op++) {
			double ours, raw, gpu;
			char gcol[16] = "-", gratio[16] = "-";

			/* xor has m = 1: decode-m is decode-1 again. */
			if (op == OP_DECODEM && b.m == 1)
				continue;
			set_lost(&b, (enum op)op);
			measure(&b, b.codec, NULL, (enum op)op, secs, &ours,
				&raw);
			if (g) {
				double cpu;

				measure(&b, g, b.codec, (enum op)op, secs / 2,
					&gpu, &cpu);
				snprintf(gcol, sizeof(gcol), "%.2f",
					 gbps(&b, (enum op)op, gpu));
				snprintf(gratio, sizeof(gratio), "%.3f",
					 cpu / gpu);
			}
			printf("%-8s %-9s %10.2f %10.2f %7.3f %10s %7s\n",
			       schemes[si], op_names[op],
			       gbps(&b, (enum op)op, ours),
			       gbps(&b, (enum op)op, raw), raw / ours, gcol,
			       gratio);
			if (raw / ours < worst)
				worst = raw / ours;
		}
		gpu_close(&b, g);
		bench_free(&b);
	}
	printf("lowest ratio ours/raw: %.3f (target >= 0.95)\n", worst);
	return 0;
}
