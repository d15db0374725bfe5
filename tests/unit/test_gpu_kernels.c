/*
 * test_gpu_kernels.c - the CUDA kernels' arithmetic, run on the CPU.
 *
 * gpu/gpu_kernels.h holds what the kernels compute per output word and per
 * tail byte; the kernels are grid-stride loops over those functions. Here
 * the same functions run over every word and tail byte of an output, as
 * the kernels split it, and the bytes must equal the reference codec's
 * (plain bytewise GF(2^8)) and ISA-L's. This needs no CUDA and no device:
 * it runs on every build. Launches, copies and device alignment are
 * test_gpu.c's, which runs only where a device is usable.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <isa-l/erasure_code.h>

#include "erasure.h"
#include "gpu_kernels.h"
#include "test_erasure_util.h"

static uint8_t lg[256], ex[512];

/* Lengths around the word sizes and across several words and tails. */
static const size_t lens[] = { 1, 3, 4, 5, 15, 16, 17, 33, 255, 4096 + 13 };
#define NLENS (sizeof(lens) / sizeof(lens[0]))

/* What xor_kernel does over the whole grid: words, then the tail. */
static void run_xor(const struct xor_args *a)
{
	size_t nw = xor_words(a->len);

	for (size_t w = 0; w < nw; w++)
		xor_word(a, w);
	for (size_t i = nw * GPU_XOR_WORD; i < a->len; i++)
		xor_byte(a, i);
}

/* What gf_kernel does over the whole grid. */
static void run_gf(const struct gf_args *a)
{
	size_t nw = gf_words(a->len);

	for (size_t w = 0; w < nw; w++)
		gf_word(a, lg, ex, w);
	for (size_t i = nw * GPU_GF_WORD; i < a->len; i++)
		gf_byte(a, lg, ex, i);
}

/*
 * len + 1 random bytes: callers also start one byte in, off alignment (the
 * host build of the word loads takes any alignment).
 */
static uint8_t *t_buf(uint64_t *st, size_t len)
{
	uint8_t *p = malloc(len + 1);

	if (!p)
		abort();
	t_fill(st, p, len + 1);
	return p;
}

/* Every product of the kernels' tables equals the reference and ISA-L. */
static void test_field_tables(void **state)
{
	uint64_t st = 21;

	(void)state;
	for (int a = 0; a < 256; a++) {
		for (int b = 0; b < 256; b++) {
			int logc = b ? lg[b] : -1;
			uint8_t want = ers_gf_mul_ref((uint8_t)a, (uint8_t)b);

			assert_int_equal(gf_mul_log(lg, ex, (uint8_t)a, logc),
					 want);
			assert_int_equal(gf_mul((unsigned char)a,
						(unsigned char)b),
					 want);
		}
	}
	/* Word packing: each of the four bytes is multiplied in place. */
	for (int i = 0; i < 10000; i++) {
		uint32_t x = (uint32_t)t_rand(&st);
		uint8_t c = (uint8_t)(t_rand(&st) >> 56);
		uint32_t got = gf_mul_word(lg, ex, x, c ? lg[c] : -1);

		for (int byte = 0; byte < 4; byte++)
			assert_int_equal((uint8_t)(got >> (8 * byte)),
					 ers_gf_mul_ref((uint8_t)(x >> (8 * byte)),
							c));
	}
}

static void test_xor_body(void **state)
{
	static const int nsrcs[] = { 1, 2, 3, 7, ERS_MAX_K };
	uint64_t st = 22;

	(void)state;
	for (size_t ni = 0; ni < sizeof(nsrcs) / sizeof(nsrcs[0]); ni++) {
		for (size_t li = 0; li < NLENS; li++) {
			size_t len = lens[li];
			struct xor_args a;
			uint8_t *src[ERS_MAX_K] = { NULL };
			uint8_t *dst = t_buf(&st, len), *want = t_buf(&st, len);

			memset(&a, 0, sizeof(a));
			a.nsrc = nsrcs[ni];
			a.len = len;
			for (int j = 0; j < a.nsrc; j++) {
				src[j] = t_buf(&st, len);
				a.src[j] = src[j] + (j & 1);
			}
			a.dst = dst + (li & 1);
			for (size_t i = 0; i < len; i++) {
				want[i] = 0;
				for (int j = 0; j < a.nsrc; j++)
					want[i] ^= a.src[j][i];
			}
			run_xor(&a);
			assert_memory_equal(a.dst, want, len);

			/* dst may alias src[0], as ers_backend_ops allows. */
			a.dst = src[0] + 0;
			a.src[0] = src[0];
			for (size_t i = 0; i < len; i++) {
				want[i] = 0;
				for (int j = 0; j < a.nsrc; j++)
					want[i] ^= a.src[j][i];
			}
			run_xor(&a);
			assert_memory_equal(src[0], want, len);

			for (int j = 0; j < a.nsrc; j++)
				free(src[j]);
			free(dst);
			free(want);
		}
	}
}

/* Any matrix, zeros included, with and without accumulation. */
static void test_gf_body(void **state)
{
	static const int shapes[][2] = { { 1, 1 },  { 2, 1 },  { 4, 2 },
					 { 8, 2 },  { 10, 4 }, { 12, 4 },
					 { 32, 8 }, { 1, 8 } };
	uint64_t st = 23;

	(void)state;
	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		int nsrc = shapes[si][0], rows = shapes[si][1];
		uint8_t coef[ERS_MAX_M * ERS_MAX_K];

		for (int i = 0; i < rows * nsrc; i++)
			coef[i] = (i % 5 == 3) ? 0 : (uint8_t)(t_rand(&st) >> 56);
		for (size_t li = 0; li < NLENS; li++) {
			size_t len = lens[li];
			struct gf_args a;
			uint8_t *src[ERS_MAX_K] = { NULL };
			uint8_t *dst[ERS_MAX_M] = { NULL };
			uint8_t *want[ERS_MAX_M] = { NULL };

			for (int acc = 0; acc <= 1; acc++) {
				memset(&a, 0, sizeof(a));
				a.nsrc = nsrc;
				a.rows = rows;
				a.len = len;
				a.accumulate = acc;
				gf_args_set_coef(&a, lg, coef);
				for (int j = 0; j < nsrc; j++) {
					src[j] = t_buf(&st, len);
					a.src[j] = src[j] + (li & 1);
				}
				for (int r = 0; r < rows; r++) {
					dst[r] = t_buf(&st, len);
					a.dst[r] = dst[r] + (r & 1);
					want[r] = t_buf(&st, len);
					for (size_t i = 0; i < len; i++) {
						uint8_t v = acc ? a.dst[r][i]
								: 0;

						for (int j = 0; j < nsrc; j++)
							v ^= ers_gf_mul_ref(
								coef[r * nsrc +
								     j],
								a.src[j][i]);
						want[r][i] = v;
					}
				}
				run_gf(&a);
				for (int r = 0; r < rows; r++) {
					assert_memory_equal(a.dst[r], want[r],
							    len);
					free(dst[r]);
					free(want[r]);
				}
				for (int j = 0; j < nsrc; j++)
					free(src[j]);
			}
		}
	}
}

/*
 * With the codec's own matrices: the Cauchy parity rows ISA-L and erasure/
 * use give the reference encoding, and one column with accumulate is the
 * incremental update, for rs k+m from 2+1 to 32+8.
 */
static void test_rs_matrices(void **state)
{
	static const int km[][2] = { { 2, 1 },	{ 4, 2 },  { 8, 2 },
				     { 10, 4 }, { 12, 4 }, { 32, 8 } };
	uint64_t st = 24;

	(void)state;
	for (size_t si = 0; si < sizeof(km) / sizeof(km[0]); si++) {
		struct ers_scheme s = { ERS_RS, km[si][0], km[si][1] };
		uint8_t mat[(ERS_MAX_K + ERS_MAX_M) * ERS_MAX_K];
		uint8_t col[ERS_MAX_M];
		size_t len = 4096 + 13;
		struct t_stripe *t = t_stripe_new(s.k, s.m, len, 0);
		uint8_t *ref[ERS_MAX_M];
		struct gf_args a;

		assert_non_null(t);
		gf_gen_cauchy1_matrix(mat, s.k + s.m, s.k);
		for (int j = 0; j < s.k; j++)
			t_fill(&st, t->chunk[j], len);
		for (int r = 0; r < s.m; r++) {
			ref[r] = malloc(len);
			assert_non_null(ref[r]);
		}
		assert_int_equal(ers_encode_ref(&s, len, t_data(t), ref), 0);

		memset(&a, 0, sizeof(a));
		a.nsrc = s.k;
		a.rows = s.m;
		a.len = len;
		gf_args_set_coef(&a, lg, &mat[s.k * s.k]);
		for (int j = 0; j < s.k; j++)
			a.src[j] = t->chunk[j];
		for (int r = 0; r < s.m; r++)
			a.dst[r] = t->chunk[s.k + r];
		run_gf(&a);
		for (int r = 0; r < s.m; r++)
			assert_memory_equal(t->chunk[s.k + r], ref[r], len);

		/* Parity grown one data chunk at a time, last chunk first. */
		for (int r = 0; r < s.m; r++)
			memset(t->chunk[s.k + r], 0, len);
		for (int j = s.k - 1; j >= 0; j--) {
			for (int r = 0; r < s.m; r++)
				col[r] = mat[(s.k + r) * s.k + j];
			memset(&a, 0, sizeof(a));
			a.nsrc = 1;
			a.rows = s.m;
			a.len = len;
			a.accumulate = 1;
			gf_args_set_coef(&a, lg, col);
			a.src[0] = t->chunk[j];
			for (int r = 0; r < s.m; r++)
				a.dst[r] = t->chunk[s.k + r];
			run_gf(&a);
		}
		for (int r = 0; r < s.m; r++) {
			assert_memory_equal(t->chunk[s.k + r], ref[r], len);
			free(ref[r]);
		}
		t_stripe_free(t);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_field_tables),
		cmocka_unit_test(test_xor_body),
		cmocka_unit_test(test_gf_body),
		cmocka_unit_test(test_rs_matrices),
	};

	gf_build_tables(lg, ex);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
