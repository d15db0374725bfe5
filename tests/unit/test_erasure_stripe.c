/*
 * test_erasure_stripe.c - the parity holder's stripe (erasure/stripe.c)
 * against a model: random folds, repeats, unfolds, drops, replacements
 * and refused moves on the m rows of a stripe held apart, each row compared
 * after every step with a full encode of the model's members, and the
 * stripe decoded from the rows after losing up to m members.  The seed is
 * printed; STRIPE_SEED=N replays it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "erasure.h"

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

struct model {
	int k, m;
	size_t len;
	bool in[ERS_MAX_K];
	uint64_t id[ERS_MAX_K];
	uint32_t crc[ERS_MAX_K];
	size_t dlen[ERS_MAX_K];
	uint8_t *data[ERS_MAX_K]; /* len bytes, zeros past dlen */
};

/* Every row equals that row of a full encode of the model's members. */
static void check_rows(const struct ers_codec *c, const struct model *md,
		       struct ers_stripe *st, uint8_t **scratch)
{
	const uint8_t *d[ERS_MAX_K];

	for (int j = 0; j < md->k; j++)
		d[j] = md->data[j];
	assert_int_equal(ers_encode(c, md->len, d, scratch), 0);
	for (int r = 0; r < md->m; r++) {
		assert_memory_equal(st[r].parity, scratch[r], md->len);
		for (int j = 0; j < md->k; j++)
			assert_int_equal(ers_stripe_holds(&st[r], j, md->id[j],
							  md->crc[j]),
					 md->in[j]);
	}
}

/* Lose up to m data members; the rows and the rest give them back. */
static void check_decode(const struct ers_codec *c, const struct model *md,
			 struct ers_stripe *st, uint64_t *seed)
{
	uint8_t *chunks[ERS_MAX_K + ERS_MAX_M];
	int lost[ERS_MAX_M], nlost = 1 + (int)(rnd(seed) % (uint64_t)md->m);

	for (int j = 0; j < md->k + md->m; j++) {
		chunks[j] = malloc(md->len);
		assert_non_null(chunks[j]);
		memcpy(chunks[j], j < md->k ? md->data[j] : st[j - md->k].parity,
		       md->len);
	}
	for (int i = 0; i < nlost; i++) {
		bool dup;

		do {
			lost[i] = (int)(rnd(seed) % (uint64_t)md->k);
			dup = false;
			for (int x = 0; x < i; x++)
				dup = dup || lost[x] == lost[i];
		} while (dup);
		memset(chunks[lost[i]], 0xa5, md->len);
	}
	if (nlost > md->k)
		nlost = md->k;
	assert_int_equal(ers_decode(c, md->len, lost, nlost, chunks), 0);
	for (int j = 0; j < md->k; j++)
		assert_memory_equal(chunks[j], md->data[j], md->len);
	for (int j = 0; j < md->k + md->m; j++)
		free(chunks[j]);
}

static void run_scheme(const char *name, uint64_t seed, int steps)
{
	struct ers_scheme s;
	struct ers_codec *c;
	struct model md = { 0 };
	struct ers_stripe st[ERS_MAX_M];
	uint8_t *rows[ERS_MAX_M], *scratch[ERS_MAX_M];
	uint8_t *buf, *delta;
	uint64_t next_id = 1;

	assert_int_equal(ers_scheme_parse(name, &s), 0);
	if (s.kind == ERS_XOR && s.k == 0)
		s.k = 3;
	assert_int_equal(ers_codec_new(&s, NULL, &c), 0);
	md.k = s.k;
	md.m = s.m;
	md.len = 1 + rnd(&seed) % 9000;
	buf = malloc(md.len);
	delta = malloc(md.len);
	assert_non_null(buf);
	assert_non_null(delta);
	for (int j = 0; j < md.k; j++) {
		md.data[j] = calloc(1, md.len);
		assert_non_null(md.data[j]);
	}
	for (int r = 0; r < md.m; r++) {
		rows[r] = malloc(md.len);
		scratch[r] = malloc(md.len);
		assert_non_null(rows[r]);
		assert_non_null(scratch[r]);
		assert_int_equal(ers_stripe_init(&st[r], c, r, md.len, rows[r]),
				 0);
	}
	for (int step = 0; step < steps; step++) {
		int op = (int)(rnd(&seed) % 100);
		int j = (int)(rnd(&seed) % (uint64_t)md.k);
		size_t dlen = 1 + rnd(&seed) % md.len;
		uint64_t id = next_id++;
		uint32_t crc = (uint32_t)rnd(&seed);

		for (size_t b = 0; b < dlen; b++)
			buf[b] = (uint8_t)rnd(&seed);
		if (op < 40) {
			/* Fold: into an empty slot, refused over another. */
			for (int r = 0; r < md.m; r++)
				assert_int_equal(ers_stripe_fold(&st[r], j, id,
								 crc, buf,
								 dlen),
						 md.in[j] ? -EEXIST : 0);
			if (!md.in[j]) {
				md.in[j] = true;
				md.id[j] = id;
				md.crc[j] = crc;
				md.dlen[j] = dlen;
				memset(md.data[j], 0, md.len);
				memcpy(md.data[j], buf, dlen);
			}
		} else if (op < 55) {
			/* The same chunk again (a resend): nothing changes. */
			if (!md.in[j])
				continue;
			for (int r = 0; r < md.m; r++)
				assert_int_equal(
					ers_stripe_fold(&st[r], j, md.id[j],
							md.crc[j], md.data[j],
							md.dlen[j]),
					1);
		} else if (op < 75) {
			/* Unfold: the member goes, its slot reads zeros. */
			if (md.in[j]) {
				for (int r = 0; r < md.m; r++)
					assert_int_equal(
						ers_stripe_unfold(&st[r], j, id,
								  md.data[j],
								  md.dlen[j]),
						-ENOENT);
				for (int r = 0; r < md.m; r++)
					assert_int_equal(
						ers_stripe_unfold(&st[r], j,
								  md.id[j],
								  md.data[j],
								  md.dlen[j]),
						0);
				md.in[j] = false;
				memset(md.data[j], 0, md.len);
			} else {
				for (int r = 0; r < md.m; r++)
					assert_int_equal(
						ers_stripe_unfold(&st[r], j, id,
								  buf, dlen),
						-ENOENT);
			}
		} else if (op < 85) {
			/* Drop: the member's bytes are gone; the row comes
			 * encoded anew from the others. */
			const uint8_t *d[ERS_MAX_K];

			if (!md.in[j]) {
				for (int r = 0; r < md.m; r++)
					assert_int_equal(
						ers_stripe_drop(&st[r], j, id,
								buf, md.len),
						-ENOENT);
				continue;
			}
			memset(md.data[j], 0, md.len);
			for (int x = 0; x < md.k; x++)
				d[x] = md.data[x];
			assert_int_equal(ers_encode(c, md.len, d, scratch), 0);
			for (int r = 0; r < md.m; r++) {
				assert_int_equal(ers_stripe_drop(&st[r], j,
								 id, scratch[r],
								 md.len),
						 -ENOENT);
				assert_int_equal(ers_stripe_drop(&st[r], j,
								 md.id[j],
								 scratch[r],
								 md.len),
						 0);
			}
			md.in[j] = false;
		} else {
			/* Replace: one fold of old XOR new. */
			if (!md.in[j])
				continue;
			if (dlen < md.dlen[j])
				dlen = md.dlen[j];
			memcpy(delta, md.data[j], md.len);
			for (size_t b = 0; b < dlen; b++)
				delta[b] ^= buf[b];
			for (int r = 0; r < md.m; r++)
				assert_int_equal(ers_stripe_replace(&st[r], j,
								    md.id[j],
								    id, crc,
								    delta,
								    dlen),
						 0);
			md.id[j] = id;
			md.crc[j] = crc;
			md.dlen[j] = dlen;
			memset(md.data[j], 0, md.len);
			memcpy(md.data[j], buf, dlen);
		}
		check_rows(c, &md, st, scratch);
		if (step % 16 == 15)
			check_decode(c, &md, st, &seed);
	}
	for (int r = 0; r < md.m; r++) {
		free(rows[r]);
		free(scratch[r]);
	}
	for (int j = 0; j < md.k; j++)
		free(md.data[j]);
	free(buf);
	free(delta);
	ers_codec_free(c);
}

static void test_random_against_model(void **state)
{
	const char *env = getenv("STRIPE_SEED");
	uint64_t seed = env && *env ? strtoull(env, NULL, 0)
				    : (uint64_t)time(NULL) ^
					      ((uint64_t)getpid() << 20);
	static const char *const schemes[] = { "xor", "xor:5", "rs:2+1",
					       "rs:2+2", "rs:4+2", "rs:6+3" };

	(void)state;
	printf("test_random_against_model: STRIPE_SEED=%" PRIu64 "\n", seed);
	fflush(stdout);
	seed |= 1;
	for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
		run_scheme(schemes[i], seed + i * 0x9e3779b97f4a7c15ULL, 2000);
}

static void test_bad_arguments(void **state)
{
	struct ers_scheme s;
	struct ers_codec *c;
	struct ers_stripe st;
	uint8_t row[64], data[64] = { 1 };

	(void)state;
	assert_int_equal(ers_scheme_parse("rs:4+2", &s), 0);
	assert_int_equal(ers_codec_new(&s, NULL, &c), 0);
	assert_int_equal(ers_stripe_init(&st, c, 2, sizeof(row), row), -EINVAL);
	assert_int_equal(ers_stripe_init(&st, c, -1, sizeof(row), row),
			 -EINVAL);
	assert_int_equal(ers_stripe_init(&st, NULL, 0, sizeof(row), row),
			 -EINVAL);
	assert_int_equal(ers_stripe_init(&st, c, 1, sizeof(row), row), 0);
	assert_int_equal(ers_stripe_fold(&st, 4, 1, 0, data, 8), -EINVAL);
	assert_int_equal(ers_stripe_fold(&st, -1, 1, 0, data, 8), -EINVAL);
	assert_int_equal(ers_stripe_fold(&st, 0, 1, 0, data, 65), -EINVAL);
	assert_int_equal(ers_stripe_fold(&st, 0, 1, 0, NULL, 8), -EINVAL);
	assert_int_equal(ers_stripe_fold(&st, 0, 1, 7, data, 8), 0);
	/* The same member with other bytes is another member. */
	assert_int_equal(ers_stripe_fold(&st, 0, 1, 8, data, 8), -EEXIST);
	assert_int_equal(ers_stripe_fold(&st, 0, 1, 7, data, 9), -EEXIST);
	/* A replacement's delta must cover the old bytes. */
	assert_int_equal(ers_stripe_replace(&st, 0, 1, 2, 9, data, 4), -EINVAL);
	assert_int_equal(ers_stripe_unfold(&st, 0, 1, data, 9), -ENOENT);
	/* A dropped member's new row is no longer than the row. */
	assert_int_equal(ers_stripe_drop(&st, 0, 1, data, 65), -EINVAL);
	assert_int_equal(ers_stripe_drop(&st, 0, 1, NULL, 8), -EINVAL);
	assert_int_equal(ers_stripe_unfold(&st, 0, 1, data, 8), 0);
	assert_int_equal(st.members, 0);
	for (size_t b = 0; b < sizeof(row); b++)
		assert_int_equal(row[b], 0);
	ers_codec_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_against_model),
		cmocka_unit_test(test_bad_arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
