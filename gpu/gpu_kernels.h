/*
 * gpu_kernels.h - what the CUDA codec kernels compute, one output word at a
 * time, in code that both nvcc (for the device) and a plain C compiler (for
 * the host) build.
 *
 * The kernels in gpu_codec.cu are grid-stride loops over the word functions
 * below; tests/unit/test_gpu_kernels.c runs the very same functions on the
 * CPU over every word and tail byte and compares them with the reference
 * codec, so the field tables, the coefficient logs, the word packing and
 * the tail split are checked on every build, with or without a device.
 * What only a device can check (launches, copies, alignment of device
 * loads) is left to tests/unit/test_gpu.c.
 *
 * Each output is split the same way: words of GPU_XOR_WORD (xor) or
 * GPU_GF_WORD (GF) bytes from offset 0, then len % word tail bytes one by
 * one. Device buffers are cudaMalloc'd and slices are multiples of 256
 * bytes, so device word loads are aligned; the host build goes through
 * memcpy and takes any alignment.
 */
#ifndef RFT_GPU_KERNELS_H
#define RFT_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "erasure.h"

#ifdef __CUDACC__
#define GPU_HD __host__ __device__ __forceinline__
typedef uint4 gpu_word128;
#else
#define GPU_HD inline
typedef struct {
	uint32_t x, y, z, w;
} gpu_word128;
#endif

#define GPU_XOR_WORD 16 /* bytes per xor word */
#define GPU_GF_WORD 4	/* bytes per GF word */
#define GF_TABLES 768	/* log[256] then exp[512], as the kernels load them */

/* dst = src[0] ^ ... ^ src[nsrc - 1] */
struct xor_args {
	const uint8_t *src[ERS_MAX_K];
	uint8_t *dst;
	size_t len;
	int nsrc;
};

/* dst[r] (^)= sum over j of coef[r * nsrc + j] * src[j], r < rows */
struct gf_args {
	const uint8_t *src[ERS_MAX_K];
	uint8_t *dst[ERS_MAX_M];
	/* log of coef[r * nsrc + j], -1 for a zero coefficient */
	int16_t logc[ERS_MAX_M * ERS_MAX_K];
	const uint8_t *tables; /* GF_TABLES bytes, device memory */
	size_t len;
	int nsrc;
	int rows;
	int accumulate; /* dst ^= product instead of dst = product */
};

/*
 * The 0x11D field by its generator 2, as ISA-L builds it: @lg[256] (lg[0]
 * unused) and @ex[512], where ex[i] = 2^i and the upper half repeats the
 * lower so that ex[lg[a] + lg[b]] needs no modulo.
 */
static inline void gf_build_tables(uint8_t *lg, uint8_t *ex)
{
	unsigned x = 1;

	memset(lg, 0, 256);
	for (int i = 0; i < 255; i++) {
		ex[i] = (uint8_t)x;
		ex[i + 255] = (uint8_t)x;
		lg[x] = (uint8_t)i;
		x <<= 1;
		if (x & 0x100)
			x ^= 0x11D;
	}
	ex[510] = ex[0];
	ex[511] = ex[1];
}

/* Fill a->logc from the rows x nsrc matrix @coef. */
static inline void gf_args_set_coef(struct gf_args *a, const uint8_t *lg,
				    const uint8_t *coef)
{
	for (int i = 0; i < a->rows * a->nsrc; i++)
		a->logc[i] = coef[i] ? (int16_t)lg[coef[i]] : (int16_t)-1;
}

static GPU_HD uint32_t gpu_load32(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
	return *(const uint32_t *)p;
#else
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
#endif
}

static GPU_HD void gpu_store32(uint8_t *p, uint32_t v)
{
#ifdef __CUDA_ARCH__
	*(uint32_t *)p = v;
#else
	memcpy(p, &v, sizeof(v));
#endif
}

static GPU_HD gpu_word128 gpu_load128(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
	return *(const gpu_word128 *)p;
#else
	gpu_word128 v;

	memcpy(&v, p, sizeof(v));
	return v;
#endif
}

static GPU_HD void gpu_store128(uint8_t *p, gpu_word128 v)
{
#ifdef __CUDA_ARCH__
	*(gpu_word128 *)p = v;
#else
	memcpy(p, &v, sizeof(v));
#endif
}

/* x * c in GF(2^8), c given by its log (-1: c = 0). */
static GPU_HD uint8_t gf_mul_log(const uint8_t *lg, const uint8_t *ex,
				 uint8_t x, int logc)
{
	return (x == 0 || logc < 0) ? 0 : ex[lg[x] + logc];
}

/* Four bytes at once, each times the same coefficient. */
static GPU_HD uint32_t gf_mul_word(const uint8_t *lg, const uint8_t *ex,
				   uint32_t x, int logc)
{
	uint32_t r = 0;

	if (logc < 0)
		return 0;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
	for (int b = 0; b < 4; b++)
		r |= (uint32_t)gf_mul_log(lg, ex, (uint8_t)(x >> (8 * b)), logc)
		     << (8 * b);
	return r;
}

/* Full xor words, then tail bytes from xor_words(len) * GPU_XOR_WORD. */
static GPU_HD size_t xor_words(size_t len)
{
	return len / GPU_XOR_WORD;
}

static GPU_HD void xor_word(const struct xor_args *a, size_t w)
{
	size_t off = w * GPU_XOR_WORD;
	gpu_word128 acc = gpu_load128(a->src[0] + off);

	for (int j = 1; j < a->nsrc; j++) {
		gpu_word128 x = gpu_load128(a->src[j] + off);

		acc.x ^= x.x;
		acc.y ^= x.y;
		acc.z ^= x.z;
		acc.w ^= x.w;
	}
	gpu_store128(a->dst + off, acc);
}

static GPU_HD void xor_byte(const struct xor_args *a, size_t i)
{
	uint8_t b = a->src[0][i];

	for (int j = 1; j < a->nsrc; j++)
		b ^= a->src[j][i];
	a->dst[i] = b;
}

/* Full GF words, then tail bytes from gf_words(len) * GPU_GF_WORD. */
static GPU_HD size_t gf_words(size_t len)
{
	return len / GPU_GF_WORD;
}

/*
 * Word @w of every output row. Each source word is read once and feeds all
 * rows, so the sources are read once per call whatever m is.
 */
static GPU_HD void gf_word(const struct gf_args *a, const uint8_t *lg,
			   const uint8_t *ex, size_t w)
{
	size_t off = w * GPU_GF_WORD;
	uint32_t acc[ERS_MAX_M];

#ifdef __CUDA_ARCH__
#pragma unroll
#endif
	for (int r = 0; r < ERS_MAX_M; r++)
		acc[r] = 0;
	for (int j = 0; j < a->nsrc; j++) {
		uint32_t x = gpu_load32(a->src[j] + off);

#ifdef __CUDA_ARCH__
#pragma unroll
#endif
		for (int r = 0; r < ERS_MAX_M; r++)
			if (r < a->rows)
				acc[r] ^= gf_mul_word(lg, ex, x,
						      a->logc[r * a->nsrc + j]);
	}
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
	for (int r = 0; r < ERS_MAX_M; r++) {
		if (r < a->rows) {
			uint8_t *d = a->dst[r] + off;

			gpu_store32(d, a->accumulate ? gpu_load32(d) ^ acc[r]
						     : acc[r]);
		}
	}
}

static GPU_HD void gf_byte(const struct gf_args *a, const uint8_t *lg,
			   const uint8_t *ex, size_t i)
{
	for (int r = 0; r < a->rows; r++) {
		uint8_t acc = 0;

		for (int j = 0; j < a->nsrc; j++)
			acc ^= gf_mul_log(lg, ex, a->src[j][i],
					  a->logc[r * a->nsrc + j]);
		a->dst[r][i] = a->accumulate ? a->dst[r][i] ^ acc : acc;
	}
}

#ifdef __CUDACC__
#define GPU_THREADS 256	  /* threads per block */
#define GPU_MAX_BLOCKS 4096 /* beyond this, threads loop (grid stride) */

/* Blocks for @words words: one word per thread up to GPU_MAX_BLOCKS. */
static inline unsigned gpu_grid_for(size_t words)
{
	size_t b = (words + GPU_THREADS - 1) / GPU_THREADS;

	if (b < 1)
		b = 1;
	if (b > GPU_MAX_BLOCKS)
		b = GPU_MAX_BLOCKS;
	return (unsigned)b;
}

/*
 * The kernels: grid-stride loops over the words, then over the tail bytes.
 * Arguments travel by value in the kernel's parameter space (under 1 KiB).
 */
static __global__ void xor_kernel(struct xor_args a)
{
	size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t nw = xor_words(a.len);

	for (size_t w = id; w < nw; w += stride)
		xor_word(&a, w);
	for (size_t i = nw * GPU_XOR_WORD + id; i < a.len; i += stride)
		xor_byte(&a, i);
}

/* The field tables go to shared memory first: every product is two loads. */
static __global__ void gf_kernel(struct gf_args a)
{
	__shared__ uint8_t lg[256];
	__shared__ uint8_t ex[512];
	size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t nw = gf_words(a.len);

	for (int i = threadIdx.x; i < GF_TABLES; i += blockDim.x) {
		if (i < 256)
			lg[i] = a.tables[i];
		else
			ex[i - 256] = a.tables[i];
	}
	__syncthreads();

	for (size_t w = id; w < nw; w += stride)
		gf_word(&a, lg, ex, w);
	for (size_t i = nw * GPU_GF_WORD + id; i < a.len; i += stride)
		gf_byte(&a, lg, ex, i);
}
#endif /* __CUDACC__ */

#endif /* RFT_GPU_KERNELS_H */
