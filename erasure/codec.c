/*
 * codec.c - XOR, replica and Reed-Solomon codec on ISA-L, with dispatch to
 * an optional backend (gpu/) for the same operations.
 *
 * All three kinds are one linear code over GF(2^8): a (k + m) x k generator
 * matrix, identity on top, with parity rows that are all ones (xor,
 * replicate) or Cauchy (rs). The xor family takes xor_gen/memcpy fast
 * paths; rs goes through ec_encode_data with tables expanded once here.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <isa-l/erasure_code.h>
#include <isa-l/raid.h>

#include "erasure_i.h"
#ifdef RFT_HAVE_CUDA
#include "gpu.h"
#endif

#define MAX_N (ERS_MAX_K + ERS_MAX_M)
/* ISA-L lengths are int: hand it at most this much per call. */
#define ISAL_PIECE ((size_t)1 << 30)
/* Portable XOR works block by block so the output stays in L1. */
#define XOR_BLOCK 4096

struct ers_codec {
	/*
	 * ISA-L tables for the m parity rows: 32 * k * m bytes used. First
	 * and cache-line aligned: the SIMD kernels load them 32 bytes at a
	 * time, and a split line costs a few percent on every encode.
	 */
	uint8_t tbls[32 * ERS_MAX_K * ERS_MAX_M] __attribute__((aligned(64)));
	/* (k + m) x k generator matrix, row-major, identity on top. */
	uint8_t matrix[MAX_N * ERS_MAX_K];
	struct ers_scheme s;
	enum ers_backend_kind backend;
	struct ers_backend *be; /* NULL: ISA-L on the CPU */
};

/* dst = a ^ b; dst may alias a. Unaligned 8-byte words via memcpy. */
static void xor2(size_t len, uint8_t *dst, const uint8_t *a, const uint8_t *b)
{
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t x, y;

		memcpy(&x, a + i, 8);
		memcpy(&y, b + i, 8);
		x ^= y;
		memcpy(dst + i, &x, 8);
	}
	for (; i < len; i++)
		dst[i] = a[i] ^ b[i];
}

static void xor_portable(size_t len, int nsrc, const uint8_t *const *src,
			 uint8_t *dst)
{
	for (size_t off = 0; off < len; off += XOR_BLOCK) {
		size_t n = len - off < XOR_BLOCK ? len - off : XOR_BLOCK;

		xor2(n, dst + off, src[0] + off, src[1] + off);
		for (int j = 2; j < nsrc; j++)
			xor2(n, dst + off, dst + off, src[j] + off);
	}
}

/*
 * dst = XOR of nsrc sources (a copy for nsrc == 1); dst may alias src[0].
 * xor_gen needs at least two sources and, per its contract, 32-byte aligned
 * pointers; anything else takes the portable loop.
 */
static void cpu_xor_gen(size_t len, int nsrc, const uint8_t *const *src,
			uint8_t *dst)
{
	void *v[ERS_MAX_K + 1];
	uintptr_t align = (uintptr_t)dst;

	if (nsrc == 1) {
		if (dst != src[0])
			memcpy(dst, src[0], len);
		return;
	}
	for (int j = 0; j < nsrc; j++)
		align |= (uintptr_t)src[j];
	if (align & 31) {
		xor_portable(len, nsrc, src, dst);
		return;
	}
	for (size_t off = 0; off < len; off += ISAL_PIECE) {
		size_t n = len - off < ISAL_PIECE ? len - off : ISAL_PIECE;

		for (int j = 0; j < nsrc; j++)
			v[j] = (uint8_t *)src[j] + off;
		v[nsrc] = dst + off;
		/* Fails only on arguments checked above; stay correct. */
		if (xor_gen(nsrc + 1, (int)n, v))
			xor_portable(n, nsrc, (const uint8_t *const *)v,
				     dst + off);
	}
}

void ers_xor_into(size_t len, uint8_t *dst, const uint8_t *src)
{
	const uint8_t *s[2] = { dst, src };

	cpu_xor_gen(len, 2, s, dst);
}

static void isal_gen(size_t len, int nsrc, int rows, const uint8_t *tbls,
		     const uint8_t *const *src, uint8_t *const *dst)
{
	unsigned char *s[ERS_MAX_K], *d[ERS_MAX_M];

	for (size_t off = 0; off < len; off += ISAL_PIECE) {
		size_t n = len - off < ISAL_PIECE ? len - off : ISAL_PIECE;

		for (int j = 0; j < nsrc; j++)
			s[j] = (unsigned char *)src[j] + off;
		for (int r = 0; r < rows; r++)
			d[r] = dst[r] + off;
		ec_encode_data((int)n, nsrc, rows, (unsigned char *)tbls, s, d);
	}
}

static int backend_failed(const struct ers_codec *c, int rc)
{
	ers_set_error("%s backend: %s", c->be->ops->name,
		      c->be->ops->last_error());
	return rc;
}

static int do_xor(const struct ers_codec *c, size_t len, int nsrc,
		  const uint8_t *const *src, uint8_t *dst)
{
	int rc;

	if (!c->be) {
		cpu_xor_gen(len, nsrc, src, dst);
		return 0;
	}
	rc = c->be->ops->xor_gen(c->be, len, nsrc, src, dst);
	return rc ? backend_failed(c, rc) : 0;
}

static int do_gf_gen(const struct ers_codec *c, size_t len, int rows,
		     const uint8_t *coef, const uint8_t *tbls,
		     const uint8_t *const *src, uint8_t *const *dst)
{
	int rc;

	if (!c->be) {
		isal_gen(len, c->s.k, rows, tbls, src, dst);
		return 0;
	}
	rc = c->be->ops->gf_gen(c->be, len, c->s.k, rows, coef, src, dst);
	return rc ? backend_failed(c, rc) : 0;
}

static int ptrs_ok(const void *const *p, int n)
{
	if (!p)
		return 0;
	for (int i = 0; i < n; i++)
		if (!p[i])
			return 0;
	return 1;
}

int ers_encode(const struct ers_codec *c, size_t len,
	       const uint8_t *const *data, uint8_t *const *parity)
{
	int rc = 0;

	if (!c || !ptrs_ok((const void *const *)data, c->s.k) ||
	    !ptrs_ok((const void *const *)parity, c->s.m)) {
		ers_set_error("encode: NULL codec or buffer");
		return -EINVAL;
	}
	if (len == 0)
		return 0;
	if (c->s.kind == ERS_RS)
		return do_gf_gen(c, len, c->s.m, &c->matrix[c->s.k * c->s.k],
				 c->tbls, data, parity);
	/* xor: m = 1; replicate: k = 1, so each row is a copy. */
	for (int r = 0; r < c->s.m && !rc; r++)
		rc = do_xor(c, len, c->s.k, data, parity[r]);
	return rc;
}

int ers_update(const struct ers_codec *c, size_t len, int data_index,
	       const uint8_t *delta, uint8_t *const *parity)
{
	uint8_t coef[ERS_MAX_M];
	unsigned char *d[ERS_MAX_M];
	int k, m, rc = 0;

	if (!c || !delta || !ptrs_ok((const void *const *)parity, c->s.m)) {
		ers_set_error("update: NULL codec or buffer");
		return -EINVAL;
	}
	k = c->s.k;
	m = c->s.m;
	if (data_index < 0 || data_index >= k) {
		ers_set_error("update: data index %d outside 0..%d",
			      data_index, k - 1);
		return -EINVAL;
	}
	if (len == 0)
		return 0;
	if (c->s.kind != ERS_RS) {
		/* Every parity row is a plain XOR of the data. */
		for (int r = 0; r < m && !rc; r++) {
			const uint8_t *s[2] = { parity[r], delta };

			rc = do_xor(c, len, 2, s, parity[r]);
		}
		return rc;
	}
	if (c->be) {
		for (int r = 0; r < m; r++)
			coef[r] = c->matrix[(k + r) * k + data_index];
		rc = c->be->ops->gf_update(c->be, len, m, coef, delta, parity);
		return rc ? backend_failed(c, rc) : 0;
	}
	for (size_t off = 0; off < len; off += ISAL_PIECE) {
		size_t n = len - off < ISAL_PIECE ? len - off : ISAL_PIECE;

		for (int r = 0; r < m; r++)
			d[r] = parity[r] + off;
		ec_encode_data_update((int)n, k, m, data_index,
				      (unsigned char *)c->tbls,
				      (unsigned char *)delta + off, d);
	}
	return 0;
}

int ers_update_row(const struct ers_codec *c, size_t len, int data_index,
		   int row, const uint8_t *delta, uint8_t *parity_row)
{
	unsigned char *d[1];
	uint8_t coef[1];
	int k, rc;

	if (!c || !delta || !parity_row) {
		ers_set_error("update_row: NULL codec or buffer");
		return -EINVAL;
	}
	k = c->s.k;
	if (data_index < 0 || data_index >= k || row < 0 || row >= c->s.m) {
		ers_set_error("update_row: data index %d (0..%d) or row %d "
			      "(0..%d) out of range",
			      data_index, k - 1, row, c->s.m - 1);
		return -EINVAL;
	}
	if (len == 0)
		return 0;
	if (c->s.kind != ERS_RS) {
		const uint8_t *s[2] = { parity_row, delta };

		return do_xor(c, len, 2, s, parity_row);
	}
	if (c->be) {
		uint8_t *p[1] = { parity_row };

		coef[0] = c->matrix[(k + row) * k + data_index];
		rc = c->be->ops->gf_update(c->be, len, 1, coef, delta, p);
		return rc ? backend_failed(c, rc) : 0;
	}
	/* ISA-L's tables are k * 32 bytes per parity row, rows in order. */
	for (size_t off = 0; off < len; off += ISAL_PIECE) {
		size_t n = len - off < ISAL_PIECE ? len - off : ISAL_PIECE;

		d[0] = parity_row + off;
		ec_encode_data_update((int)n, k, 1, data_index,
				      (unsigned char *)c->tbls +
					      (size_t)row * (size_t)k * 32,
				      (unsigned char *)delta + off, d);
	}
	return 0;
}

/*
 * Rows that rebuild the lost members from the k intact members in @surv:
 * invert the generator rows of the survivors (which maps survivors back to
 * data); a lost data slot d takes row d of the inverse, a lost parity row p
 * takes (generator row p) x inverse.
 */
static int rs_decode_matrix(const struct ers_codec *c, const int *surv,
			    const int *lost, int nlost, uint8_t *dm)
{
	uint8_t sub[ERS_MAX_K * ERS_MAX_K], inv[ERS_MAX_K * ERS_MAX_K];
	int k = c->s.k;

	for (int i = 0; i < k; i++)
		memcpy(&sub[i * k], &c->matrix[surv[i] * k], (size_t)k);
	if (gf_invert_matrix(sub, inv, k)) {
		/* Any k rows of [I; Cauchy] are independent: cannot happen. */
		ers_set_error("decode: singular survivor matrix");
		return -EIO;
	}
	for (int i = 0; i < nlost; i++) {
		uint8_t *row = &dm[i * k];
		int l = lost[i];

		if (l < k) {
			memcpy(row, &inv[l * k], (size_t)k);
			continue;
		}
		for (int j = 0; j < k; j++) {
			uint8_t acc = 0;

			for (int t = 0; t < k; t++)
				acc ^= gf_mul(c->matrix[l * k + t],
					      inv[t * k + j]);
			row[j] = acc;
		}
	}
	return 0;
}

int ers_decode(const struct ers_codec *c, size_t len, const int *lost,
	       int nlost, uint8_t *const *chunks)
{
	uint8_t lostmask[MAX_N];
	uint8_t tbls[32 * ERS_MAX_K * ERS_MAX_M] __attribute__((aligned(64)));
	uint8_t dm[ERS_MAX_M * ERS_MAX_K];
	const uint8_t *sp[ERS_MAX_K];
	uint8_t *out[ERS_MAX_M];
	int surv[ERS_MAX_K];
	int k, n, rc;

	if (!c || !ptrs_ok((const void *const *)chunks, c->s.k + c->s.m)) {
		ers_set_error("decode: NULL codec or buffer");
		return -EINVAL;
	}
	k = c->s.k;
	rc = ers_check_lost(k, c->s.m, lost, nlost, lostmask);
	if (rc || nlost == 0 || len == 0)
		return rc;
	n = 0;
	for (int i = 0; i < k + c->s.m && n < k; i++) {
		if (!lostmask[i]) {
			surv[n] = i;
			sp[n++] = chunks[i];
		}
	}
	for (int i = 0; i < nlost; i++)
		out[i] = chunks[lost[i]];

	if (c->s.kind != ERS_RS) {
		/*
		 * replicate (k = 1): every member is a copy of any other.
		 * xor (m = 1, one loss): the lost member is the XOR of the k
		 * others, parity included.
		 */
		for (int i = 0; i < nlost && !rc; i++)
			rc = do_xor(c, len, k, sp, out[i]);
		return rc;
	}
	rc = rs_decode_matrix(c, surv, lost, nlost, dm);
	if (rc)
		return rc;
	if (!c->be)
		ec_init_tables(k, nlost, dm, tbls);
	return do_gf_gen(c, len, nlost, dm, tbls, sp, out);
}

int ers_codec_register(struct ers_codec *c, void *buf, size_t len)
{
	int rc;

	if (!c || !buf) {
		ers_set_error("register: NULL codec or buffer");
		return -EINVAL;
	}
	if (!c->be)
		return 0;
	rc = c->be->ops->host_register(c->be, buf, len);
	return rc ? backend_failed(c, rc) : 0;
}

int ers_codec_unregister(struct ers_codec *c, void *buf)
{
	int rc;

	if (!c || !buf) {
		ers_set_error("unregister: NULL codec or buffer");
		return -EINVAL;
	}
	if (!c->be)
		return 0;
	rc = c->be->ops->host_unregister(c->be, buf);
	return rc ? backend_failed(c, rc) : 0;
}

int ers_backend_probe(enum ers_backend_kind kind)
{
	switch (kind) {
	case ERS_BACKEND_ISAL:
	case ERS_BACKEND_AUTO:
		return 0;
	case ERS_BACKEND_GPU:
#ifdef RFT_HAVE_CUDA
		if (gpu_probe(0)) {
			ers_set_error("%s", gpu_last_error());
			return -ENODEV;
		}
		return 0;
#else
		ers_set_error("GPU backend not built in (no CUDA at build "
			      "time)");
		return -ENODEV;
#endif
	}
	ers_set_error("unknown backend %d", (int)kind);
	return -EINVAL;
}

/*
 * Open the GPU backend for @c. Returns 0, or -ENODEV/-ENOMEM/-EIO with the
 * reason recorded.
 */
static int open_gpu(struct ers_codec *c, const struct ers_codec_opts *o)
{
#ifdef RFT_HAVE_CUDA
	int max_src = c->s.k < 2 ? 2 : c->s.k;
	int rc;

	rc = gpu_backend_new(o->gpu_device, o->gpu_slice, max_src, c->s.m,
			     &c->be);
	if (rc)
		ers_set_error("%s", gpu_last_error());
	return rc;
#else
	ers_set_error("GPU backend not built in (no CUDA at build time)");
	return -ENODEV;
#endif
}

int ers_codec_new(const struct ers_scheme *s, const struct ers_codec_opts *opts,
		  struct ers_codec **out)
{
	static const struct ers_codec_opts defaults = { 0 };
	struct ers_codec *c;
	int k, m, rc;

	if (!out) {
		ers_set_error("codec_new: NULL output");
		return -EINVAL;
	}
	rc = ers_scheme_check(s);
	if (rc)
		return rc;
	if (!opts)
		opts = &defaults;
	if (opts->backend != ERS_BACKEND_ISAL &&
	    opts->backend != ERS_BACKEND_GPU &&
	    opts->backend != ERS_BACKEND_AUTO) {
		ers_set_error("unknown backend %d", (int)opts->backend);
		return -EINVAL;
	}
	/* 64-byte aligned so the tables sit on cache lines. */
	if (posix_memalign((void **)&c, 64, sizeof(*c))) {
		ers_set_error("codec_new: out of memory");
		return -ENOMEM;
	}
	memset(c, 0, sizeof(*c));
	c->s = *s;
	k = s->k;
	m = s->m;
	if (s->kind == ERS_RS) {
		gf_gen_cauchy1_matrix(c->matrix, k + m, k);
		ec_init_tables(k, m, &c->matrix[k * k], c->tbls);
	} else {
		for (int i = 0; i < k; i++)
			c->matrix[i * k + i] = 1;
		memset(&c->matrix[k * k], 1, (size_t)m * k);
	}

	c->backend = ERS_BACKEND_ISAL;
	if (opts->backend != ERS_BACKEND_ISAL) {
		rc = open_gpu(c, opts);
		if (!rc)
			c->backend = ERS_BACKEND_GPU;
		else if (opts->backend == ERS_BACKEND_GPU)
			goto err_free;
		/* auto: ISA-L it is; the reason stays in ers_last_error(). */
	}
	*out = c;
	return 0;

err_free:
	free(c);
	return rc;
}

void ers_codec_free(struct ers_codec *c)
{
	if (!c)
		return;
	if (c->be)
		c->be->ops->free(c->be);
	free(c);
}

const struct ers_scheme *ers_codec_scheme(const struct ers_codec *c)
{
	return &c->s;
}

enum ers_backend_kind ers_codec_backend(const struct ers_codec *c)
{
	return c->backend;
}

const char *ers_codec_backend_name(const struct ers_codec *c)
{
	return c->be ? c->be->ops->name : "isal";
}
