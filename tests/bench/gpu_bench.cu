/*
 * gpu_bench.cu - the codec's CUDA kernels on buffers already on the device,
 * against the device's own memory bandwidth, in one run.
 *
 * For xor k=3,7 and rs 4+2, 8+2, 10+4, encode (k chunks in, m out) and a
 * one-chunk parity update (1 + m in, m out) run back to back on one stream
 * over enough stripes that the working set is far larger than the L2
 * cache, timed by CUDA events. The baseline, measured in the same run just
 * before each scheme, is cudaMemcpyAsync device to device over the same
 * footprint. Both are reported as bytes moved (read + written) per second
 * and their ratio: how close the kernel comes to the memory bound.
 * Before any figure is printed, one stripe's parity is copied back and
 * compared with ISA-L's, so a fast wrong kernel fails the run.
 *
 * The kernels are the ones in gpu/gpu_kernels.h, launched with the same
 * grid shape as gpu_codec.cu. Host-to-host throughput (copies included,
 * pinned memory) against CPU ISA-L is codec_bench's `gpu` column.
 *
 * Usage: gpu_bench [seconds_per_line [chunk_bytes]]. Without chunk_bytes
 * it runs 1 MiB chunks (the codec's unit, one launch per stripe: launch
 * overhead shows) and 64 MiB chunks (what batching stripes into one launch
 * would reach). Exits 77 with the reason when no CUDA device is usable.
 */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <isa-l/erasure_code.h>

#include "erasure.h"
#include "gpu_kernels.h"

#define FOOTPRINT ((size_t)1 << 30) /* bytes of stripes per scheme */
#define ROUNDS 5		    /* timed rounds; the median counts */

static void check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "gpu_bench: %s: %s (%s)\n", what,
			cudaGetErrorName(e), cudaGetErrorString(e));
		exit(1);
	}
}
#define CK(call) check((call), #call)

struct scheme {
	const char *name;
	int k, m;
	int rs;
};

struct dev {
	cudaStream_t stream;
	cudaEvent_t ev0, ev1;
	uint8_t *tables;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Milliseconds for @iters launches back to back on the stream. */
template <typename F>
static float round_ms(struct dev *d, int iters, F &launch)
{
	float ms = 0;

	CK(cudaEventRecord(d->ev0, d->stream));
	for (int i = 0; i < iters; i++)
		launch(i);
	CK(cudaGetLastError());
	CK(cudaEventRecord(d->ev1, d->stream));
	CK(cudaEventSynchronize(d->ev1));
	CK(cudaEventElapsedTime(&ms, d->ev0, d->ev1));
	return ms;
}

/*
 * Run @launch(i) for i = 0, 1, ... until one round lasts about @secs /
 * ROUNDS; return the median seconds per launch over ROUNDS rounds.
 */
template <typename F>
static double time_launches(struct dev *d, double secs, F launch)
{
	double per[ROUNDS];
	int iters = 1;

	/* Warm up and size a round. */
	while (round_ms(d, iters, launch) < 1000.0 * secs / ROUNDS &&
	       iters < (1 << 24))
		iters *= 2;
	for (int r = 0; r < ROUNDS; r++)
		per[r] = round_ms(d, iters, launch) / 1000.0 / iters;
	qsort(per, ROUNDS, sizeof(per[0]), cmp_double);
	return per[ROUNDS / 2];
}

/* Encode stripe 0 on the device, copy it back, compare with ISA-L. */
static int verify(struct dev *d, const struct scheme *s, size_t chunk,
		  uint8_t *const *dchunk, const uint8_t *coef,
		  const struct gf_args *ga, const struct xor_args *xa)
{
	int n = s->k + s->m;
	uint8_t *host[ERS_MAX_K + ERS_MAX_M], *want[ERS_MAX_M];
	uint8_t tbls[32 * ERS_MAX_K * ERS_MAX_M];
	int bad = 0;

	for (int i = 0; i < n; i++) {
		host[i] = (uint8_t *)malloc(chunk);
		if (!host[i])
			return -1;
	}
	for (int r = 0; r < s->m; r++) {
		want[r] = (uint8_t *)malloc(chunk);
		if (!want[r])
			return -1;
	}
	if (s->rs)
		gf_kernel<<<gpu_grid_for(gf_words(chunk)), GPU_THREADS, 0,
			    d->stream>>>(*ga);
	else
		xor_kernel<<<gpu_grid_for(xor_words(chunk)), GPU_THREADS, 0,
			     d->stream>>>(*xa);
	CK(cudaGetLastError());
	for (int i = 0; i < n; i++)
		CK(cudaMemcpyAsync(host[i], dchunk[i], chunk,
				   cudaMemcpyDeviceToHost, d->stream));
	CK(cudaStreamSynchronize(d->stream));
	if (s->rs) {
		ec_init_tables(s->k, s->m, (unsigned char *)coef, tbls);
		ec_encode_data((int)chunk, s->k, s->m, tbls, host, want);
	} else {
		memcpy(want[0], host[0], chunk);
		for (int j = 1; j < s->k; j++)
			for (size_t i = 0; i < chunk; i++)
				want[0][i] ^= host[j][i];
	}
	for (int r = 0; r < s->m; r++)
		bad |= memcmp(want[r], host[s->k + r], chunk) != 0;
	for (int i = 0; i < n; i++)
		free(host[i]);
	for (int r = 0; r < s->m; r++)
		free(want[r]);
	return bad ? -1 : 0;
}

static int bench_scheme(struct dev *d, const struct scheme *s, size_t chunk,
			double secs)
{
	int n = s->k + s->m;
	size_t stripe_bytes = (size_t)n * chunk;
	int nstripes = (int)(FOOTPRINT / stripe_bytes);
	uint8_t matrix[(ERS_MAX_K + ERS_MAX_M) * ERS_MAX_K];
	uint8_t lg[256], ex[512], col[ERS_MAX_M];
	uint8_t *mem, *copy_dst;
	uint8_t *dchunk[ERS_MAX_K + ERS_MAX_M];
	struct gf_args *ga;
	struct xor_args *xa;
	double t_copy, t_enc, t_upd;
	double moved_enc, moved_upd, moved_copy;

	if (nstripes < 1)
		nstripes = 1;
	CK(cudaMalloc((void **)&mem, (size_t)nstripes * stripe_bytes));
	CK(cudaMalloc((void **)&copy_dst, (size_t)nstripes * stripe_bytes));
	CK(cudaMemsetAsync(mem, 0x5A, (size_t)nstripes * stripe_bytes,
			   d->stream));
	/* Distinct data in stripe 0 so the check means something. */
	{
		uint8_t *h = (uint8_t *)malloc((size_t)s->k * chunk);
		uint64_t st = 0x9E3779B97F4A7C15ull;

		if (!h)
			return -1;
		for (size_t i = 0; i < (size_t)s->k * chunk; i++) {
			st ^= st << 13;
			st ^= st >> 7;
			st ^= st << 17;
			h[i] = (uint8_t)st;
		}
		CK(cudaMemcpyAsync(mem, h, (size_t)s->k * chunk,
				   cudaMemcpyHostToDevice, d->stream));
		CK(cudaStreamSynchronize(d->stream));
		free(h);
	}

	/* One argument block per stripe, built before any timing. */
	ga = (struct gf_args *)calloc((size_t)nstripes, sizeof(*ga));
	xa = (struct xor_args *)calloc((size_t)nstripes, sizeof(*xa));
	if (!ga || !xa)
		return -1;
	gf_build_tables(lg, ex);
	if (s->rs)
		gf_gen_cauchy1_matrix(matrix, n, s->k);
	for (int t = 0; t < nstripes; t++) {
		uint8_t *base = mem + (size_t)t * stripe_bytes;

		ga[t].nsrc = s->k;
		ga[t].rows = s->m;
		ga[t].len = chunk;
		ga[t].tables = d->tables;
		if (s->rs)
			gf_args_set_coef(&ga[t], lg, &matrix[s->k * s->k]);
		xa[t].nsrc = s->k;
		xa[t].len = chunk;
		xa[t].dst = base + (size_t)s->k * chunk;
		for (int j = 0; j < s->k; j++) {
			ga[t].src[j] = base + (size_t)j * chunk;
			xa[t].src[j] = ga[t].src[j];
		}
		for (int r = 0; r < s->m; r++)
			ga[t].dst[r] = base + (size_t)(s->k + r) * chunk;
	}
	for (int i = 0; i < n; i++)
		dchunk[i] = mem + (size_t)i * chunk;
	if (verify(d, s, chunk, dchunk, &matrix[s->k * s->k], &ga[0], &xa[0])) {
		fprintf(stderr, "gpu_bench: %s: device parity differs from "
				"ISA-L\n", s->name);
		return -1;
	}

	t_copy = time_launches(d, secs, [&](int i) {
		(void)i;
		CK(cudaMemcpyAsync(copy_dst, mem, (size_t)nstripes * stripe_bytes,
				   cudaMemcpyDeviceToDevice, d->stream));
	});
	moved_copy = 2.0 * (double)nstripes * (double)stripe_bytes;

	t_enc = time_launches(d, secs, [&](int i) {
		int t = i % nstripes;

		if (s->rs)
			gf_kernel<<<gpu_grid_for(gf_words(chunk)),
				    GPU_THREADS, 0, d->stream>>>(ga[t]);
		else
			xor_kernel<<<gpu_grid_for(xor_words(chunk)),
				     GPU_THREADS, 0, d->stream>>>(xa[t]);
	});
	moved_enc = (double)n * (double)chunk;

	/* Update: data chunk 0's column into the m parity rows. */
	for (int t = 0; t < nstripes; t++) {
		ga[t].nsrc = 1;
		ga[t].accumulate = 1;
		for (int r = 0; r < s->m; r++)
			col[r] = s->rs ? matrix[(s->k + r) * s->k] : 1;
		gf_args_set_coef(&ga[t], lg, col);
	}
	t_upd = time_launches(d, secs, [&](int i) {
		int t = i % nstripes;

		if (s->rs) {
			gf_kernel<<<gpu_grid_for(gf_words(chunk)),
				    GPU_THREADS, 0, d->stream>>>(ga[t]);
		} else {
			struct xor_args u = xa[t];

			/* parity ^= delta: dst aliases src[0] */
			u.nsrc = 2;
			u.src[0] = u.dst;
			u.src[1] = ga[t].src[0];
			xor_kernel<<<gpu_grid_for(xor_words(chunk)),
				     GPU_THREADS, 0, d->stream>>>(u);
		}
	});
	moved_upd = (double)(1 + 2 * s->m) * (double)chunk;

	printf("%-8s %-7s %10.1f %10.1f %7.3f %10.1f\n", s->name, "encode",
	       moved_enc / t_enc / 1e9, moved_copy / t_copy / 1e9,
	       (moved_enc / t_enc) / (moved_copy / t_copy),
	       (double)s->k * (double)chunk / t_enc / 1e9);
	printf("%-8s %-7s %10.1f %10.1f %7.3f %10.1f\n", s->name, "update",
	       moved_upd / t_upd / 1e9, moved_copy / t_copy / 1e9,
	       (moved_upd / t_upd) / (moved_copy / t_copy),
	       (double)chunk / t_upd / 1e9);

	free(ga);
	free(xa);
	CK(cudaFree(copy_dst));
	CK(cudaFree(mem));
	return 0;
}

int main(int argc, char **argv)
{
	static const struct scheme schemes[] = {
		{ "xor:3", 3, 1, 0 },	 { "xor:7", 7, 1, 0 },
		{ "rs:4+2", 4, 2, 1 },	 { "rs:8+2", 8, 2, 1 },
		{ "rs:10+4", 10, 4, 1 },
	};
	double secs = argc > 1 ? atof(argv[1]) : 1.0;
	size_t chunks[2] = { (size_t)1 << 20, (size_t)64 << 20 };
	int nchunks = 2;
	uint8_t tables[GF_TABLES];
	struct cudaDeviceProp prop;
	struct dev d;
	int count = 0;
	cudaError_t e;

	if (secs <= 0)
		secs = 1.0;
	if (argc > 2) {
		chunks[0] = strtoull(argv[2], NULL, 0);
		nchunks = 1;
		if (chunks[0] < 256 || chunks[0] % 256 ||
		    chunks[0] > FOOTPRINT / 2) {
			fprintf(stderr, "gpu_bench: chunk_bytes must be a "
					"multiple of 256 up to 512 MiB\n");
			return 2;
		}
	}
	e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count < 1) {
		printf("gpu_bench: not measured: %s\n",
		       e != cudaSuccess ? cudaGetErrorString(e)
					: "no CUDA device");
		return 77;
	}
	CK(cudaSetDevice(0));
	CK(cudaGetDeviceProperties(&prop, 0));
	CK(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking));
	CK(cudaEventCreate(&d.ev0));
	CK(cudaEventCreate(&d.ev1));
	CK(cudaMalloc((void **)&d.tables, GF_TABLES));
	gf_build_tables(tables, tables + 256);
	CK(cudaMemcpy(d.tables, tables, GF_TABLES, cudaMemcpyHostToDevice));

	printf("gpu_bench: %s, %d SMs, L2 %d MiB; %d MiB of stripes per "
	       "scheme; GB/s = 1e9 B/s moved (read + written), median of %d "
	       "rounds\n",
	       prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20,
	       (int)(FOOTPRINT >> 20), ROUNDS);
	for (int c = 0; c < nchunks; c++) {
		printf("\n%zu-byte chunks\n%-8s %-7s %10s %10s %7s %10s\n",
		       chunks[c], "scheme", "op", "kernel", "d2d copy", "ratio",
		       "src GB/s");
		for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]);
		     i++)
			if (bench_scheme(&d, &schemes[i], chunks[c], secs))
				return 1;
	}
	CK(cudaFree(d.tables));
	CK(cudaEventDestroy(d.ev0));
	CK(cudaEventDestroy(d.ev1));
	CK(cudaStreamDestroy(d.stream));
	return 0;
}
