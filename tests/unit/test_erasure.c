/*
 * test_erasure.c - the codec against its reference twins: encode, every
 * erasure pattern up to m, refusal beyond m, incremental add / remove /
 * overwrite, argument errors and backend selection.
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
#include <isa-l/erasure_code.h>

#include "erasure.h"
#include "test_erasure_util.h"

static const struct ers_scheme schemes[] = {
	{ ERS_XOR, 1, 1 },  { ERS_XOR, 2, 1 },	{ ERS_XOR, 3, 1 },
	{ ERS_XOR, 7, 1 },  { ERS_XOR, 12, 1 }, { ERS_RS, 2, 1 },
	{ ERS_RS, 3, 2 },   { ERS_RS, 4, 2 },	{ ERS_RS, 6, 3 },
	{ ERS_RS, 8, 2 },   { ERS_RS, 10, 4 },	{ ERS_RS, 12, 4 },
	{ ERS_RS, 32, 8 },  { ERS_REPLICATE, 1, 1 },
	{ ERS_REPLICATE, 1, 3 },
};
#define NSCHEMES (sizeof(schemes) / sizeof(schemes[0]))

static const size_t lens[] = { 1, 17, 4095, 65537 };
#define NLENS (sizeof(lens) / sizeof(lens[0]))

static struct ers_codec *codec_for(const struct ers_scheme *s)
{
	struct ers_codec *c = NULL;

	assert_int_equal(ers_codec_new(s, NULL, &c), 0);
	assert_non_null(c);
	return c;
}

/* The field itself: ISA-L's gf_mul and the reference agree everywhere. */
static void test_gf_mul_matches_isal(void **state)
{
	(void)state;
	for (int a = 0; a < 256; a++)
		for (int b = 0; b < 256; b++)
			assert_int_equal(ers_gf_mul_ref((uint8_t)a, (uint8_t)b),
					 gf_mul((unsigned char)a,
						(unsigned char)b));
}

static void test_encode_matches_reference(void **state)
{
	uint64_t st = 1;

	(void)state;
	for (size_t si = 0; si < NSCHEMES; si++) {
		const struct ers_scheme *s = &schemes[si];
		struct ers_codec *c = codec_for(s);

		for (size_t li = 0; li < NLENS; li++) {
			for (size_t off = 0; off <= 3; off += 3) {
				struct t_stripe *t =
					t_stripe_new(s->k, s->m, lens[li], off);
				uint8_t *ref[ERS_MAX_M];

				for (int j = 0; j < s->k; j++)
					t_fill(&st, t->chunk[j], t->len);
				for (int r = 0; r < s->m; r++) {
					ref[r] = malloc(t->len);
					assert_non_null(ref[r]);
					/* Stale bytes must be overwritten. */
					memset(t_parity(t)[r], 0x5A, t->len);
				}
				assert_int_equal(
					ers_encode(c, t->len, t_data(t),
						   t_parity(t)),
					0);
				assert_int_equal(ers_encode_ref(s, t->len,
								t_data(t), ref),
						 0);
				for (int r = 0; r < s->m; r++) {
					assert_memory_equal(t->chunk[s->k + r],
							    ref[r], t->len);
					free(ref[r]);
				}
				t_stripe_free(t);
			}
		}
		ers_codec_free(c);
	}
}

/* xor parity is the plain XOR and replicas are plain copies. */
static void test_xor_and_replicate_semantics(void **state)
{
	struct ers_scheme x = { ERS_XOR, 3, 1 }, rp = { ERS_REPLICATE, 1, 2 };
	struct ers_codec *c = codec_for(&x);
	struct t_stripe *t = t_stripe_new(3, 1, 999, 0);
	uint64_t st = 5;

	(void)state;
	for (int j = 0; j < 3; j++)
		t_fill(&st, t->chunk[j], t->len);
	assert_int_equal(ers_encode(c, t->len, t_data(t), t_parity(t)), 0);
	for (size_t i = 0; i < t->len; i++)
		assert_int_equal(t->chunk[3][i], t->chunk[0][i] ^
							 t->chunk[1][i] ^
							 t->chunk[2][i]);
	ers_codec_free(c);
	t_stripe_free(t);

	c = codec_for(&rp);
	t = t_stripe_new(1, 2, 999, 1);
	t_fill(&st, t->chunk[0], t->len);
	assert_int_equal(ers_encode(c, t->len, t_data(t), t_parity(t)), 0);
	assert_memory_equal(t->chunk[1], t->chunk[0], t->len);
	assert_memory_equal(t->chunk[2], t->chunk[0], t->len);
	ers_codec_free(c);
	t_stripe_free(t);
}

/*
 * Every set of at most m lost members, data and parity mixed, decodes back
 * to the original bytes; the reference decoder is checked the same way on
 * the shorter lengths (it is bytewise and slow).
 */
static void check_all_patterns(const struct ers_scheme *s, size_t len,
			       size_t off, uint64_t *st)
{
	struct ers_codec *c = codec_for(s);
	struct t_stripe *t = t_stripe_new(s->k, s->m, len, off);
	int n = s->k + s->m;
	int patterns = 0;

	for (int j = 0; j < s->k; j++)
		t_fill(st, t->chunk[j], len);
	assert_int_equal(ers_encode(c, len, t_data(t), t_parity(t)), 0);
	t_stripe_save(t);

	for (uint32_t mask = 1; mask < (1u << n); mask++) {
		int lost[ERS_MAX_K + ERS_MAX_M];
		int nlost = 0;

		if (__builtin_popcount(mask) > s->m)
			continue;
		for (int i = 0; i < n; i++) {
			if (mask & (1u << i)) {
				lost[nlost++] = i;
				memset(t->chunk[i], 0xA5, len);
			}
		}
		/* Lost lists come in any order: reverse every other one. */
		if (patterns & 1) {
			for (int i = 0; i < nlost / 2; i++) {
				int tmp = lost[i];

				lost[i] = lost[nlost - 1 - i];
				lost[nlost - 1 - i] = tmp;
			}
		}
		assert_int_equal(ers_decode(c, len, lost, nlost, t->chunk), 0);
		if (t_stripe_diff(t) != -1)
			fail_msg("%d+%d len %zu mask %#x: chunk %d wrong", s->k,
				 s->m, len, mask, t_stripe_diff(t));
		if (len <= 4095) {
			for (int i = 0; i < nlost; i++)
				memset(t->chunk[lost[i]], 0x3C, len);
			assert_int_equal(ers_decode_ref(s, len, lost, nlost,
							t->chunk),
					 0);
			if (t_stripe_diff(t) != -1)
				fail_msg("ref %d+%d len %zu mask %#x", s->k,
					 s->m, len, mask);
		}
		patterns++;
	}
	assert_true(patterns > 0);
	t_stripe_free(t);
	ers_codec_free(c);
}

static void test_decode_every_pattern(void **state)
{
	uint64_t st = 2;

	(void)state;
	for (size_t si = 0; si < NSCHEMES; si++) {
		/* 2^40 masks is too many; 32+8 gets the sampled test below. */
		if (schemes[si].k + schemes[si].m > 16)
			continue;
		for (size_t li = 0; li < NLENS; li++)
			check_all_patterns(&schemes[si], lens[li], li & 1, &st);
	}
}

/* The widest code: random patterns of every size up to m. */
static void test_decode_wide_sampled(void **state)
{
	const struct ers_scheme s = { ERS_RS, 32, 8 };
	struct ers_codec *c = codec_for(&s);
	struct t_stripe *t = t_stripe_new(32, 8, 4095, 0);
	uint64_t st = 3;

	(void)state;
	for (int j = 0; j < 32; j++)
		t_fill(&st, t->chunk[j], t->len);
	assert_int_equal(ers_encode(c, t->len, t_data(t), t_parity(t)), 0);
	t_stripe_save(t);
	for (int trial = 0; trial < 300; trial++) {
		int lost[ERS_MAX_M], nlost = 1 + trial % 8;
		uint8_t used[40] = { 0 };

		for (int i = 0; i < nlost; i++) {
			int x;

			do {
				x = (int)(t_rand(&st) % 40);
			} while (used[x]);
			used[x] = 1;
			lost[i] = x;
			memset(t->chunk[x], 0, t->len);
		}
		assert_int_equal(ers_decode(c, t->len, lost, nlost, t->chunk),
				 0);
		assert_int_equal(t_stripe_diff(t), -1);
	}
	t_stripe_free(t);
	ers_codec_free(c);
}

/* More than m losses, and malformed requests, are refused untouched. */
static void test_decode_refuses(void **state)
{
	uint64_t st = 4;

	(void)state;
	for (size_t si = 0; si < NSCHEMES; si++) {
		const struct ers_scheme *s = &schemes[si];
		struct ers_codec *c = codec_for(s);
		struct t_stripe *t = t_stripe_new(s->k, s->m, 17, 0);
		int lost[ERS_MAX_K + ERS_MAX_M];
		int n = s->k + s->m;

		for (int j = 0; j < s->k; j++)
			t_fill(&st, t->chunk[j], t->len);
		assert_int_equal(ers_encode(c, t->len, t_data(t), t_parity(t)),
				 0);
		for (int i = 0; i < n; i++)
			lost[i] = (i + 1) % n;
		for (int i = 0; i < n; i++)
			memset(t->chunk[i], 0xEE, t->len);
		t_stripe_save(t);
		for (int nl = s->m + 1; nl <= n; nl++) {
			assert_int_equal(ers_decode(c, t->len, lost, nl,
						    t->chunk),
					 -ERANGE);
			assert_int_equal(ers_decode_ref(s, t->len, lost, nl,
							t->chunk),
					 -ERANGE);
			assert_true(strlen(ers_last_error()) > 0);
		}
		/* Nothing was written by a refused call. */
		assert_int_equal(t_stripe_diff(t), -1);

		lost[0] = n;
		assert_int_equal(ers_decode(c, t->len, lost, 1, t->chunk),
				 -EINVAL);
		lost[0] = -1;
		assert_int_equal(ers_decode(c, t->len, lost, 1, t->chunk),
				 -EINVAL);
		assert_int_equal(ers_decode(c, t->len, lost, -1, t->chunk),
				 -EINVAL);
		assert_int_equal(ers_decode(c, t->len, NULL, 1, t->chunk),
				 -EINVAL);
		if (s->m >= 2) {
			lost[0] = 0;
			lost[1] = 0;
			assert_int_equal(ers_decode(c, t->len, lost, 2,
						    t->chunk),
					 -EINVAL);
		}
		{
			uint8_t *saved = t->chunk[n - 1];

			t->chunk[n - 1] = NULL;
			lost[0] = 0;
			assert_int_equal(ers_decode(c, t->len, lost, 1,
						    t->chunk),
					 -EINVAL);
			t->chunk[n - 1] = saved;
		}
		assert_int_equal(ers_decode(c, t->len, lost, 0, t->chunk), 0);
		assert_int_equal(ers_decode(NULL, t->len, lost, 0, t->chunk),
				 -EINVAL);
		assert_int_equal(t_stripe_diff(t), -1);
		t_stripe_free(t);
		ers_codec_free(c);
	}
}

/* @order[0..n) = 0..n-1 in a random order. */
static void shuffle(uint64_t *st, int *order, int n)
{
	for (int j = 0; j < n; j++)
		order[j] = j;
	for (int j = n - 1; j > 0; j--) {
		int x = (int)(t_rand(st) % (uint64_t)(j + 1));
		int tmp = order[j];

		order[j] = order[x];
		order[x] = tmp;
	}
}

/*
 * Parity built by ers_update from zero, chunks arriving in random order,
 * equals ers_encode; an overwrite (delta = old ^ new) and an unlink
 * (delta = old, slot back to zeros) keep it equal to a full re-encode.
 * The reference update is held to the same standard.
 */
static void test_incremental(void **state)
{
	uint64_t st = 6;

	(void)state;
	for (size_t si = 0; si < NSCHEMES; si++) {
		const struct ers_scheme *s = &schemes[si];
		struct ers_codec *c = codec_for(s);

		for (size_t li = 0; li < NLENS; li++) {
			size_t len = lens[li];
			struct t_stripe *t =
				t_stripe_new(s->k, s->m, len, li & 1);
			uint8_t *inc[ERS_MAX_M], *ref[ERS_MAX_M];
			uint8_t *delta = malloc(len), *fresh = malloc(len);
			int order[ERS_MAX_K];
			int j;

			assert_non_null(delta);
			assert_non_null(fresh);
			for (int r = 0; r < s->m; r++) {
				inc[r] = calloc(1, len);
				ref[r] = calloc(1, len);
				assert_non_null(inc[r]);
				assert_non_null(ref[r]);
			}
			for (j = 0; j < s->k; j++)
				t_fill(&st, t->chunk[j], len);
			shuffle(&st, order, s->k);
			/* Arrival in any order. */
			for (j = 0; j < s->k; j++) {
				int d = order[j];

				assert_int_equal(ers_update(c, len, d,
							    t->chunk[d], inc),
						 0);
				assert_int_equal(ers_update_ref(s, len, d,
								t->chunk[d],
								ref),
						 0);
			}
			assert_int_equal(ers_encode(c, len, t_data(t),
						    t_parity(t)),
					 0);
			for (int r = 0; r < s->m; r++) {
				assert_memory_equal(inc[r], t->chunk[s->k + r],
						    len);
				assert_memory_equal(ref[r], t->chunk[s->k + r],
						    len);
			}

			/* Overwrite slot d: delta = old ^ new. */
			j = (int)(t_rand(&st) % (uint64_t)s->k);
			t_fill(&st, fresh, len);
			memcpy(delta, t->chunk[j], len);
			ers_xor_into(len, delta, fresh);
			memcpy(t->chunk[j], fresh, len);
			assert_int_equal(ers_update(c, len, j, delta, inc), 0);
			assert_int_equal(ers_update_ref(s, len, j, delta, ref),
					 0);
			assert_int_equal(ers_encode(c, len, t_data(t),
						    t_parity(t)),
					 0);
			for (int r = 0; r < s->m; r++) {
				assert_memory_equal(inc[r], t->chunk[s->k + r],
						    len);
				assert_memory_equal(ref[r], t->chunk[s->k + r],
						    len);
			}

			/* Unlink slot j: remove its bytes, slot reads zero. */
			assert_int_equal(ers_update(c, len, j, t->chunk[j],
						    inc),
					 0);
			memset(t->chunk[j], 0, len);
			assert_int_equal(ers_encode(c, len, t_data(t),
						    t_parity(t)),
					 0);
			for (int r = 0; r < s->m; r++)
				assert_memory_equal(inc[r], t->chunk[s->k + r],
						    len);

			/* Removing everything leaves all-zero parity. */
			for (j = 0; j < s->k; j++)
				assert_int_equal(ers_update(c, len, j,
							    t->chunk[j], inc),
						 0);
			memset(fresh, 0, len);
			for (int r = 0; r < s->m; r++) {
				assert_memory_equal(inc[r], fresh, len);
				free(inc[r]);
				free(ref[r]);
			}
			free(delta);
			free(fresh);
			t_stripe_free(t);
		}
		ers_codec_free(c);
	}
}

/*
 * A node that holds one parity row folds each data chunk into it as it
 * arrives (ers_update_row), in any order, each row on its own: every row
 * equals that row of ers_encode; an overwrite's delta and an unlink keep
 * it so.  Bad rows and slots are refused.
 */
static void test_update_row(void **state)
{
	uint64_t st = 11;

	(void)state;
	for (size_t si = 0; si < NSCHEMES; si++) {
		const struct ers_scheme *s = &schemes[si];
		struct ers_codec *c = codec_for(s);

		for (size_t li = 0; li < NLENS; li++) {
			size_t len = lens[li];
			struct t_stripe *t =
				t_stripe_new(s->k, s->m, len, li & 1);
			uint8_t *row = malloc(len ? len : 1);
			uint8_t *delta = malloc(len ? len : 1);
			int order[ERS_MAX_K];

			assert_non_null(row);
			assert_non_null(delta);
			for (int j = 0; j < s->k; j++)
				t_fill(&st, t->chunk[j], len);
			assert_int_equal(ers_encode(c, len, t_data(t),
						    t_parity(t)),
					 0);
			for (int r = 0; r < s->m; r++) {
				shuffle(&st, order, s->k);
				memset(row, 0, len);
				for (int j = 0; j < s->k; j++)
					assert_int_equal(
						ers_update_row(c, len, order[j],
							       r,
							       t->chunk[order[j]],
							       row),
						0);
				assert_memory_equal(row, t->chunk[s->k + r],
						    len);
				/* Overwrite of slot 0: old ^ new. */
				memcpy(delta, t->chunk[0], len);
				ers_xor_into(len, delta, t->chunk[s->k - 1]);
				assert_int_equal(ers_update_row(c, len, 0, r,
								delta, row),
						 0);
				/* ... is a full encode with slot 0 = k-1's. */
				{
					struct t_stripe *u = t_stripe_new(
						s->k, s->m, len, li & 1);

					for (int j = 0; j < s->k; j++)
						memcpy(u->chunk[j],
						       t->chunk[j ? j : s->k - 1],
						       len);
					assert_int_equal(
						ers_encode(c, len, t_data(u),
							   t_parity(u)),
						0);
					assert_memory_equal(
						row, u->chunk[s->k + r], len);
					t_stripe_free(u);
				}
			}
			assert_int_equal(ers_update_row(c, 64, 0, s->m,
							delta, row),
					 -EINVAL);
			assert_int_equal(ers_update_row(c, 64, s->k, 0,
							delta, row),
					 -EINVAL);
			assert_int_equal(ers_update_row(c, 64, 0, -1, delta,
							row),
					 -EINVAL);
			assert_int_equal(ers_update_row(c, 64, 0, 0, NULL,
							row),
					 -EINVAL);
			free(row);
			free(delta);
			t_stripe_free(t);
		}
		ers_codec_free(c);
	}
}

static void test_bad_arguments(void **state)
{
	struct ers_scheme rs = { ERS_RS, 4, 2 };
	struct ers_codec *c = codec_for(&rs);
	struct t_stripe *t = t_stripe_new(4, 2, 64, 0);
	uint8_t *nullpar[ERS_MAX_M] = { NULL };

	(void)state;
	assert_int_equal(ers_update(c, 64, -1, t->chunk[0], t_parity(t)),
			 -EINVAL);
	assert_int_equal(ers_update(c, 64, 4, t->chunk[0], t_parity(t)),
			 -EINVAL);
	assert_int_equal(ers_update(c, 64, 0, NULL, t_parity(t)), -EINVAL);
	assert_int_equal(ers_update(NULL, 64, 0, t->chunk[0], t_parity(t)),
			 -EINVAL);
	assert_int_equal(ers_encode(c, 64, t_data(t), nullpar), -EINVAL);
	assert_int_equal(ers_encode(c, 64, NULL, t_parity(t)), -EINVAL);
	assert_int_equal(ers_encode(NULL, 64, t_data(t), t_parity(t)),
			 -EINVAL);
	assert_int_equal(ers_encode_ref(NULL, 64, t_data(t), t_parity(t)),
			 -EINVAL);
	/* Zero length is a valid no-op. */
	assert_int_equal(ers_encode(c, 0, t_data(t), t_parity(t)), 0);
	ers_codec_free(c);
	t_stripe_free(t);
}

static void test_codec_new(void **state)
{
	struct ers_scheme s;
	struct ers_codec_opts o = { 0 };
	struct ers_codec *c = NULL;

	(void)state;
	ers_codec_free(NULL);

	/* xor must be sized to a group first. */
	assert_int_equal(ers_scheme_parse("xor", &s), 0);
	assert_int_equal(ers_codec_new(&s, NULL, &c), -EINVAL);
	assert_non_null(strstr(ers_last_error(), "ers_scheme_fit"));
	assert_int_equal(ers_scheme_fit(&s, 5), 0);
	assert_int_equal(ers_codec_new(&s, NULL, &c), 0);
	assert_int_equal(ers_codec_scheme(c)->k, 4);
	assert_int_equal(ers_codec_backend(c), ERS_BACKEND_ISAL);
	assert_string_equal(ers_codec_backend_name(c), "isal");
	ers_codec_free(c);

	s = (struct ers_scheme){ ERS_RS, 33, 2 };
	assert_int_equal(ers_codec_new(&s, NULL, &c), -EINVAL);
	s = (struct ers_scheme){ ERS_RS, 4, 9 };
	assert_int_equal(ers_codec_new(&s, NULL, &c), -EINVAL);
	s = (struct ers_scheme){ ERS_RS, 4, 0 };
	assert_int_equal(ers_codec_new(&s, NULL, &c), -EINVAL);
	s = (struct ers_scheme){ (enum ers_kind)77, 4, 2 };
	assert_int_equal(ers_codec_new(&s, NULL, &c), -EINVAL);
	s = (struct ers_scheme){ ERS_RS, 4, 2 };
	assert_int_equal(ers_codec_new(&s, NULL, NULL), -EINVAL);
	o.backend = (enum ers_backend_kind)9;
	assert_int_equal(ers_codec_new(&s, &o, &c), -EINVAL);

	/*
	 * auto always yields a codec; gpu yields one exactly when the probe
	 * says a device is usable, else -ENODEV with a reason.
	 */
	o.backend = ERS_BACKEND_AUTO;
	assert_int_equal(ers_codec_new(&s, &o, &c), 0);
	if (ers_backend_probe(ERS_BACKEND_GPU) == 0) {
		assert_int_equal(ers_codec_backend(c), ERS_BACKEND_GPU);
	} else {
		assert_int_equal(ers_codec_backend(c), ERS_BACKEND_ISAL);
		ers_codec_free(c);
		c = NULL;
		o.backend = ERS_BACKEND_GPU;
		assert_int_equal(ers_codec_new(&s, &o, &c), -ENODEV);
		assert_null(c);
		assert_true(strlen(ers_last_error()) > 0);
		print_message("gpu backend unavailable: %s\n",
			      ers_last_error());
	}
	ers_codec_free(c);
	assert_int_equal(ers_backend_probe(ERS_BACKEND_ISAL), 0);
	assert_int_equal(ers_backend_probe(ERS_BACKEND_AUTO), 0);

	/* Registering memory is a no-op for ISA-L, but checks arguments. */
	assert_int_equal(ers_codec_new(&s, NULL, &c), 0);
	assert_int_equal(ers_codec_register(c, &o, sizeof(o)), 0);
	assert_int_equal(ers_codec_unregister(c, &o), 0);
	assert_int_equal(ers_codec_register(c, NULL, 8), -EINVAL);
	ers_codec_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gf_mul_matches_isal),
		cmocka_unit_test(test_encode_matches_reference),
		cmocka_unit_test(test_xor_and_replicate_semantics),
		cmocka_unit_test(test_decode_every_pattern),
		cmocka_unit_test(test_decode_wide_sampled),
		cmocka_unit_test(test_decode_refuses),
		cmocka_unit_test(test_incremental),
		cmocka_unit_test(test_update_row),
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_codec_new),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
