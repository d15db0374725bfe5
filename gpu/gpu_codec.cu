/*
 * gpu_codec.cu - CUDA XOR and GF(2^8) kernels behind struct ers_backend_ops.
 *
 * erasure/ hands over host buffers and the coefficient matrix; this file
 * stages the buffers through preallocated device memory one slice at a
 * time (H2D copies, one kernel, D2H copies, all on one stream), so the
 * data path never allocates and any chunk length works. Every CUDA call is
 * checked; a failure is -EIO (or -ENOMEM/-ENODEV) with the CUDA error text
 * in gpu_last_error(), never silently wrong bytes.
 *
 * The kernels and the arithmetic they do per word are in gpu_kernels.h,
 * where the host test can run them too. The GF(2^8) field is ISA-L's
 * (polynomial 0x11D); products go through log/exp tables held in shared
 * memory.
 */
#include <cuda_runtime.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "gpu_kernels.h"

static thread_local char gpu_err[256];

static void gpu_set_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static void gpu_set_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(gpu_err, sizeof(gpu_err), fmt, ap);
	va_end(ap);
}

extern "C" const char *gpu_last_error(void)
{
	return gpu_err;
}

/* Record a failed CUDA call and map it to an errno. */
static int cuda_fail(cudaError_t e, const char *what)
{
	gpu_set_error("%s: %s (%s)", what, cudaGetErrorName(e),
		      cudaGetErrorString(e));
	switch (e) {
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
	case cudaErrorDevicesUnavailable:
		return -ENODEV;
	case cudaErrorHostMemoryAlreadyRegistered:
		return -EEXIST;
	case cudaErrorHostMemoryNotRegistered:
		return -ENOENT;
	default:
		return -EIO;
	}
}

#define CK(call)                                                              \
	do {                                                                  \
		cudaError_t ck_e = (call);                                    \
		if (ck_e != cudaSuccess) {                                    \
			rc = cuda_fail(ck_e, #call);                          \
			goto out;                                             \
		}                                                             \
	} while (0)

/* ------------------------------------------------------------------------
 * Host side
 */

struct gpu_backend {
	struct ers_backend be; /* first: ops dispatch casts back */
	int device;
	size_t slice;
	int max_src;
	int max_dst;
	cudaStream_t stream;
	uint8_t *dmem;	 /* one allocation: sources, outputs, tables */
	uint8_t *dsrc;	 /* max_src slices */
	uint8_t *ddst;	 /* max_dst slices */
	uint8_t *dtables; /* GF_TABLES bytes */
	/* One set of staging buffers: calls on one backend take turns. */
	pthread_mutex_t lock;
	uint8_t log_tbl[256];
	uint8_t exp_tbl[512];
};

static struct gpu_backend *to_gpu(struct ers_backend *be)
{
	return reinterpret_cast<struct gpu_backend *>(be);
}

static size_t min_sz(size_t a, size_t b)
{
	return a < b ? a : b;
}

static int gpu_xor_gen(struct ers_backend *be, size_t len, int nsrc,
		       const uint8_t *const *src, uint8_t *dst)
{
	struct gpu_backend *g = to_gpu(be);
	struct xor_args a;
	int rc = 0;

	if (nsrc < 1 || nsrc > g->max_src || !src || !dst) {
		gpu_set_error("xor_gen: %d sources, backend takes 1..%d", nsrc,
			      g->max_src);
		return -EINVAL;
	}
	pthread_mutex_lock(&g->lock);
	CK(cudaSetDevice(g->device));
	for (size_t off = 0; off < len; off += g->slice) {
		size_t n = min_sz(g->slice, len - off);

		memset(&a, 0, sizeof(a));
		for (int j = 0; j < nsrc; j++) {
			a.src[j] = g->dsrc + (size_t)j * g->slice;
			CK(cudaMemcpyAsync((void *)a.src[j], src[j] + off, n,
					   cudaMemcpyHostToDevice, g->stream));
		}
		a.dst = g->ddst;
		a.len = n;
		a.nsrc = nsrc;
		xor_kernel<<<gpu_grid_for(xor_words(n)), GPU_THREADS, 0,
			     g->stream>>>(a);
		CK(cudaGetLastError());
		CK(cudaMemcpyAsync(dst + off, g->ddst, n,
				   cudaMemcpyDeviceToHost, g->stream));
		CK(cudaStreamSynchronize(g->stream));
	}
out:
	pthread_mutex_unlock(&g->lock);
	return rc;
}

/*
 * Shared by gf_gen (accumulate = 0, nsrc sources) and gf_update
 * (accumulate = 1, one source, outputs read back first).
 */
static int gpu_gf_run(struct gpu_backend *g, size_t len, int nsrc, int rows,
		      const uint8_t *coef, const uint8_t *const *src,
		      uint8_t *const *dst, int accumulate)
{
	struct gf_args a;
	int rc = 0;

	if (nsrc < 1 || nsrc > g->max_src || rows < 1 || rows > g->max_dst ||
	    !coef || !src || !dst) {
		gpu_set_error("gf: %d sources x %d rows, backend takes %d x %d",
			      nsrc, rows, g->max_src, g->max_dst);
		return -EINVAL;
	}
	memset(&a, 0, sizeof(a));
	a.nsrc = nsrc;
	a.rows = rows;
	gf_args_set_coef(&a, g->log_tbl, coef);
	a.tables = g->dtables;
	a.accumulate = accumulate;
	for (int j = 0; j < nsrc; j++)
		a.src[j] = g->dsrc + (size_t)j * g->slice;
	for (int r = 0; r < rows; r++)
		a.dst[r] = g->ddst + (size_t)r * g->slice;

	pthread_mutex_lock(&g->lock);
	CK(cudaSetDevice(g->device));
	for (size_t off = 0; off < len; off += g->slice) {
		size_t n = min_sz(g->slice, len - off);

		for (int j = 0; j < nsrc; j++)
			CK(cudaMemcpyAsync((void *)a.src[j], src[j] + off, n,
					   cudaMemcpyHostToDevice, g->stream));
		for (int r = 0; accumulate && r < rows; r++)
			CK(cudaMemcpyAsync(a.dst[r], dst[r] + off, n,
					   cudaMemcpyHostToDevice, g->stream));
		a.len = n;
		gf_kernel<<<gpu_grid_for(gf_words(n)), GPU_THREADS, 0,
			    g->stream>>>(a);
		CK(cudaGetLastError());
		for (int r = 0; r < rows; r++)
			CK(cudaMemcpyAsync(dst[r] + off, a.dst[r], n,
					   cudaMemcpyDeviceToHost, g->stream));
		CK(cudaStreamSynchronize(g->stream));
	}
out:
	pthread_mutex_unlock(&g->lock);
	return rc;
}

static int gpu_gf_gen(struct ers_backend *be, size_t len, int nsrc, int rows,
		      const uint8_t *coef, const uint8_t *const *src,
		      uint8_t *const *dst)
{
	return gpu_gf_run(to_gpu(be), len, nsrc, rows, coef, src, dst, 0);
}

static int gpu_gf_update(struct ers_backend *be, size_t len, int rows,
			 const uint8_t *coef, const uint8_t *src,
			 uint8_t *const *dst)
{
	return gpu_gf_run(to_gpu(be), len, 1, rows, coef, &src, dst, 1);
}

extern "C" int gpu_host_register(void *buf, size_t len)
{
	int rc = 0;

	if (!buf || !len) {
		gpu_set_error("host_register: empty buffer");
		return -EINVAL;
	}
	CK(cudaHostRegister(buf, len, cudaHostRegisterPortable));
out:
	return rc;
}

extern "C" int gpu_host_unregister(void *buf)
{
	int rc = 0;

	if (!buf) {
		gpu_set_error("host_unregister: NULL buffer");
		return -EINVAL;
	}
	CK(cudaHostUnregister(buf));
out:
	return rc;
}

static int gpu_be_register(struct ers_backend *be, void *buf, size_t len)
{
	struct gpu_backend *g = to_gpu(be);
	int rc = 0;

	CK(cudaSetDevice(g->device));
	rc = gpu_host_register(buf, len);
out:
	return rc;
}

static int gpu_be_unregister(struct ers_backend *be, void *buf)
{
	struct gpu_backend *g = to_gpu(be);
	int rc = 0;

	CK(cudaSetDevice(g->device));
	rc = gpu_host_unregister(buf);
out:
	return rc;
}

/*
 * Release in reverse order of gpu_backend_new. Errors cannot be returned
 * from a free; they are still checked and left in gpu_last_error().
 */
static void gpu_be_free(struct ers_backend *be)
{
	struct gpu_backend *g = to_gpu(be);
	cudaError_t e;

	if (!g)
		return;
	e = cudaSetDevice(g->device);
	if (e != cudaSuccess)
		cuda_fail(e, "free: cudaSetDevice");
	if (g->stream) {
		e = cudaStreamDestroy(g->stream);
		if (e != cudaSuccess)
			cuda_fail(e, "free: cudaStreamDestroy");
	}
	if (g->dmem) {
		e = cudaFree(g->dmem);
		if (e != cudaSuccess)
			cuda_fail(e, "free: cudaFree");
	}
	pthread_mutex_destroy(&g->lock);
	free(g);
}

static const struct ers_backend_ops gpu_ops = {
	"gpu",
	gpu_xor_gen,
	gpu_gf_gen,
	gpu_gf_update,
	gpu_be_register,
	gpu_be_unregister,
	gpu_last_error,
	gpu_be_free,
};

extern "C" int gpu_probe(int device)
{
	int count = 0;
	int rc = 0;

	CK(cudaGetDeviceCount(&count));
	if (device < 0 || device >= count) {
		gpu_set_error("no CUDA device %d (%d present)", device, count);
		return -ENODEV;
	}
	CK(cudaSetDevice(device));
	/* Creates the context: fails on a prohibited or broken device. */
	CK(cudaFree(0));
out:
	if (rc) {
		char why[sizeof(gpu_err)];

		memcpy(why, gpu_err, sizeof(why));
		gpu_set_error("no usable CUDA device: %s", why);
		rc = -ENODEV;
	}
	return rc;
}

extern "C" int gpu_backend_new(int device, size_t slice, int max_src,
			       int max_dst, struct ers_backend **out)
{
	struct gpu_backend *g;
	size_t bytes;
	int rc;

	if (!out || max_src < 1 || max_src > ERS_MAX_K || max_dst < 1 ||
	    max_dst > ERS_MAX_M) {
		gpu_set_error("gpu_backend_new: bad arguments");
		return -EINVAL;
	}
	rc = gpu_probe(device);
	if (rc)
		return rc;
	if (slice == 0)
		slice = GPU_DEFAULT_SLICE;
	if (slice > ((size_t)1 << 30)) {
		gpu_set_error("gpu_backend_new: slice %zu over 1 GiB", slice);
		return -EINVAL;
	}
	slice = (slice + 255) & ~(size_t)255;

	g = (struct gpu_backend *)calloc(1, sizeof(*g));
	if (!g) {
		gpu_set_error("gpu_backend_new: out of memory");
		return -ENOMEM;
	}
	if (pthread_mutex_init(&g->lock, NULL)) {
		free(g);
		gpu_set_error("gpu_backend_new: mutex init failed");
		return -ENOMEM;
	}
	g->be.ops = &gpu_ops;
	g->device = device;
	g->slice = slice;
	g->max_src = max_src;
	g->max_dst = max_dst;
	gf_build_tables(g->log_tbl, g->exp_tbl);

	bytes = (size_t)(max_src + max_dst) * slice + GF_TABLES;
	CK(cudaSetDevice(device));
	CK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
	CK(cudaMalloc((void **)&g->dmem, bytes));
	g->dsrc = g->dmem;
	g->ddst = g->dmem + (size_t)max_src * slice;
	g->dtables = g->ddst + (size_t)max_dst * slice;
	CK(cudaMemcpy(g->dtables, g->log_tbl, 256, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(g->dtables + 256, g->exp_tbl, 512,
		      cudaMemcpyHostToDevice));
	*out = &g->be;
	return 0;

out:
	{
		/* Keep the first failure's text, not the cleanup's. */
		char why[sizeof(gpu_err)];

		memcpy(why, gpu_err, sizeof(why));
		gpu_be_free(&g->be);
		memcpy(gpu_err, why, sizeof(why));
	}
	return rc;
}
