/*
 * test_gpu.c - the CUDA backend gives the same bytes as ISA-L: encode,
 * incremental update and decode, for xor, replicate and rs, on lengths that
 * span several device slices and end in odd tails, from pageable and from
 * pinned (registered) host memory.
 *
 * Exits 77 (skip) with the reason when the build has no CUDA or no device
 * is usable.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "erasure.h"
#include "test_erasure_util.h"

static const struct ers_scheme schemes[] = {
	{ ERS_XOR, 1, 1 },  { ERS_XOR, 3, 1 },	  { ERS_XOR, 7, 1 },
	{ ERS_RS, 2, 1 },   { ERS_RS, 4, 2 },	  { ERS_RS, 8, 2 },
	{ ERS_RS, 10, 4 },  { ERS_RS, 12, 4 },	  { ERS_RS, 32, 8 },
	{ ERS_REPLICATE, 1, 2 },
};
#define NSCHEMES (sizeof(schemes) / sizeof(schemes[0]))

/* A small slice makes the longer lengths cross several slices. */
#define SLICE 4096
static const size_t lens[] = { 1, 17, 4095, SLICE, 3 * SLICE + 5, 65537 };
#define NLENS (sizeof(lens) / sizeof(lens[0]))

static void codecs_for(const struct ers_scheme *s, struct ers_codec **gpu,
		       struct ers_codec **cpu)
{
	struct ers_codec_opts o = { .backend = ERS_BACKEND_GPU,
				    .gpu_slice = SLICE };

	if (ers_codec_new(s, &o, gpu))
		fail_msg("gpu codec: %s", ers_last_error());
	assert_int_equal(ers_codec_backend(*gpu), ERS_BACKEND_GPU);
	assert_string_equal(ers_codec_backend_name(*gpu), "gpu");
	assert_int_equal(ers_codec_new(s, NULL, cpu), 0);
}

static void test_encode_update_equal_isal(void **state)
{
	uint64_t st = 11;

	(void)state;
	for (size_t si = 0; si < NSCHEMES; si++) {
		const struct ers_scheme *s = &schemes[si];
		struct ers_codec *g, *c;

		codecs_for(s, &g, &c);
		for (size_t li = 0; li < NLENS; li++) {
			size_t len = lens[li];
			struct t_stripe *t =
				t_stripe_new(s->k, s->m, len, li & 1);
			uint8_t *cpu[ERS_MAX_M], *inc[ERS_MAX_M];

			for (int j = 0; j < s->k; j++)
				t_fill(&st, t->chunk[j], len);
			for (int r = 0; r < s->m; r++) {
				cpu[r] = malloc(len);
				inc[r] = calloc(1, len);
				assert_non_null(cpu[r]);
				assert_non_null(inc[r]);
				memset(t->chunk[s->k + r], 0x77, len);
			}
			assert_int_equal(ers_encode(g, len, t_data(t),
						    t_parity(t)),
					 0);
			assert_int_equal(ers_encode(c, len, t_data(t), cpu), 0);
			for (int r = 0; r < s->m; r++)
				assert_memory_equal(t->chunk[s->k + r], cpu[r],
						    len);
			/* Parity grown chunk by chunk on the GPU, backwards. */
			for (int j = s->k - 1; j >= 0; j--)
				assert_int_equal(ers_update(g, len, j,
							    t->chunk[j], inc),
						 0);
			for (int r = 0; r < s->m; r++) {
				assert_memory_equal(inc[r], cpu[r], len);
				free(cpu[r]);
				free(inc[r]);
			}
			t_stripe_free(t);
		}
		ers_codec_free(g);
		ers_codec_free(c);
	}
}

/* Every pattern up to m for the small codes; random ones for 32+8. */
static void test_decode_equal_original(void **state)
{
	uint64_t st = 12;

	(void)state;
	for (size_t si = 0; si < NSCHEMES; si++) {
		const struct ers_scheme *s = &schemes[si];
		int n = s->k + s->m;
		size_t len = 3 * SLICE + 5;
		struct ers_codec *g, *c;
		struct t_stripe *t = t_stripe_new(s->k, s->m, len, 0);
		int tried = 0;

		codecs_for(s, &g, &c);
		for (int j = 0; j < s->k; j++)
			t_fill(&st, t->chunk[j], len);
		assert_int_equal(ers_encode(c, len, t_data(t), t_parity(t)), 0);
		t_stripe_save(t);
		for (uint64_t trial = 1; tried < 400; trial++) {
			int lost[ERS_MAX_K + ERS_MAX_M], nlost = 0;
			uint64_t mask;

			if (n <= 16) {
				if (trial >= (1u << n))
					break;
				mask = trial;
			} else {
				mask = 0;
				for (int i = 0; i < 1 + (int)(trial % 8); i++)
					mask |= 1ull << (t_rand(&st) % n);
			}
			if (__builtin_popcountll(mask) > s->m)
				continue;
			for (int i = 0; i < n; i++) {
				if (mask & (1ull << i)) {
					lost[nlost++] = i;
					memset(t->chunk[i], 0xC3, len);
				}
			}
			assert_int_equal(ers_decode(g, len, lost, nlost,
						    t->chunk),
					 0);
			assert_int_equal(t_stripe_diff(t), -1);
			tried++;
		}
		t_stripe_free(t);
		ers_codec_free(g);
		ers_codec_free(c);
	}
}

/* Pinned host buffers take the same path and give the same bytes. */
static void test_registered_memory(void **state)
{
	const struct ers_scheme s = { ERS_RS, 4, 2 };
	size_t len = (1 << 20) + 3;
	struct ers_codec *g, *c;
	struct t_stripe *t = t_stripe_new(4, 2, len, 0);
	uint8_t *cpu[2];
	uint64_t st = 13;

	(void)state;
	codecs_for(&s, &g, &c);
	for (int i = 0; i < 6; i++)
		assert_int_equal(ers_codec_register(g, t->mem[i], len), 0);
	/* Pinning twice is reported, not ignored. */
	assert_int_equal(ers_codec_register(g, t->mem[0], len), -EEXIST);
	for (int j = 0; j < 4; j++)
		t_fill(&st, t->chunk[j], len);
	for (int r = 0; r < 2; r++) {
		cpu[r] = malloc(len);
		assert_non_null(cpu[r]);
	}
	assert_int_equal(ers_encode(g, len, t_data(t), t_parity(t)), 0);
	assert_int_equal(ers_encode(c, len, t_data(t), cpu), 0);
	for (int r = 0; r < 2; r++) {
		assert_memory_equal(t->chunk[4 + r], cpu[r], len);
		free(cpu[r]);
	}
	for (int i = 0; i < 6; i++)
		assert_int_equal(ers_codec_unregister(g, t->mem[i]), 0);
	assert_int_equal(ers_codec_unregister(g, t->mem[0]), -ENOENT);
	t_stripe_free(t);
	ers_codec_free(g);
	ers_codec_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_encode_update_equal_isal),
		cmocka_unit_test(test_decode_equal_original),
		cmocka_unit_test(test_registered_memory),
	};
	struct ers_codec_opts o = { .backend = ERS_BACKEND_AUTO };
	struct ers_scheme s = { ERS_RS, 4, 2 };
	struct ers_codec *c = NULL;

	if (ers_backend_probe(ERS_BACKEND_GPU)) {
		printf("SKIP: GPU backend not usable: %s\n", ers_last_error());
		/* auto must still give a working (ISA-L) codec. */
		if (ers_codec_new(&s, &o, &c) ||
		    ers_codec_backend(c) != ERS_BACKEND_ISAL) {
			printf("FAIL: auto did not fall back to ISA-L\n");
			ers_codec_free(c);
			return 1;
		}
		ers_codec_free(c);
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
