/*
 * test_erasure_placement.c - scheme strings, stripe layout and replica
 * placement, checked exhaustively over small groups.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "erasure.h"

static void test_scheme_strings(void **state)
{
	static const struct {
		const char *in;
		enum ers_kind kind;
		int k, m;
		const char *out;
	} good[] = {
		{ "xor", ERS_XOR, 0, 1, "xor" },
		{ "xor:3", ERS_XOR, 3, 1, "xor:3" },
		{ "rs:4+2", ERS_RS, 4, 2, "rs:4+2" },
		{ "rs:10+4", ERS_RS, 10, 4, "rs:10+4" },
		{ "rs:32+8", ERS_RS, 32, 8, "rs:32+8" },
		{ "replicate:2", ERS_REPLICATE, 1, 1, "replicate:2" },
		{ "replicate:9", ERS_REPLICATE, 1, 8, "replicate:9" },
	};
	static const char *const bad[] = {
		"",	     "x",	   "xor:",     "xor:0",	    "xor:33",
		"xor:3x",    "rs:4",	   "rs:4+",    "rs:4-2",    "rs:0+2",
		"rs:4+0",    "rs:33+1",	   "rs:4+9",   "rs:4+2 ",   "rs:+2",
		"replicate", "replicate:1", "replicate:10", "replicate:2:",
		"RS:4+2",    "rs:0004+2",  "rs:-1+2",
	};
	struct ers_scheme s;
	char buf[32];

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_int_equal(ers_scheme_parse(good[i].in, &s), 0);
		assert_int_equal(s.kind, good[i].kind);
		assert_int_equal(s.k, good[i].k);
		assert_int_equal(s.m, good[i].m);
		assert_int_equal(ers_scheme_format(&s, buf, sizeof(buf)),
				 (int)strlen(good[i].out));
		assert_string_equal(buf, good[i].out);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		s = (struct ers_scheme){ ERS_RS, 7, 7 };
		if (ers_scheme_parse(bad[i], &s) != -EINVAL)
			fail_msg("'%s' parsed", bad[i]);
		/* A failed parse leaves the output alone. */
		assert_int_equal(s.k, 7);
	}
	assert_int_equal(ers_scheme_parse(NULL, &s), -EINVAL);
	assert_int_equal(ers_scheme_parse("rs:4+2", &s), 0);
	assert_int_equal(ers_scheme_format(&s, buf, 6), -ENOSPC);
	assert_int_equal(ers_scheme_format(&s, buf, 7), 6);

	/* Fitting to a group. */
	assert_int_equal(ers_scheme_fit(&s, 6), 0);
	assert_int_equal(ers_scheme_fit(&s, 5), -EINVAL);
	/* A larger group: stripes of k + m rotate over it. */
	assert_int_equal(ers_scheme_fit(&s, 7), 0);
	assert_int_equal(s.k, 4);
	assert_int_equal(s.m, 2);
	assert_int_equal(ers_scheme_parse("xor", &s), 0);
	assert_int_equal(ers_scheme_fit(&s, 1), -EINVAL);
	assert_int_equal(ers_scheme_fit(&s, 4), 0);
	assert_int_equal(s.k, 3);
	/* Sized once: xor:3 then fits any group of 4 or more. */
	assert_int_equal(ers_scheme_fit(&s, 3), -EINVAL);
	assert_int_equal(ers_scheme_fit(&s, 5), 0);
	assert_int_equal(s.k, 3);
	assert_int_equal(ers_scheme_parse("replicate:3", &s), 0);
	assert_int_equal(ers_scheme_fit(&s, 2), -EINVAL);
	assert_int_equal(ers_scheme_fit(&s, 3), 0);
	assert_int_equal(ers_scheme_fit(&s, 12), 0);
}

/* The figure in erasure.h, cell by cell. */
static void test_layout_figure(void **state)
{
	/* member of node n in stripe s; 3 = parity for xor on 4 nodes */
	static const int xor4[5][4] = {
		{ 0, 1, 2, 3 }, { 1, 2, 3, 0 }, { 2, 3, 0, 1 },
		{ 3, 0, 1, 2 }, { 0, 1, 2, 3 },
	};
	/* chunk index shown in each data cell (-1: parity) */
	static const int xor4_chunk[5][4] = {
		{ 0, 0, 0, -1 }, { 1, 1, -1, 0 }, { 2, -1, 1, 1 },
		{ -1, 2, 2, 2 }, { 3, 3, 3, -1 },
	};
	static const int rs22_chunk[4][4] = {
		{ 0, 0, -1, -1 }, { 1, -1, -1, 0 },
		{ -1, -1, 0, 1 }, { -1, 1, 1, -1 },
	};
	struct ers_scheme s;
	struct ers_layout l;

	(void)state;
	assert_int_equal(ers_scheme_parse("xor", &s), 0);
	assert_int_equal(ers_layout_init(&l, &s, 4), 0);
	for (int st = 0; st < 5; st++) {
		for (int n = 0; n < 4; n++) {
			int node;
			uint64_t chunk;

			assert_int_equal(ers_layout_member(&l, st, n),
					 xor4[st][n]);
			if (xor4_chunk[st][n] < 0)
				continue;
			assert_int_equal(ers_layout_chunk(&l, st, xor4[st][n],
							  &node, &chunk),
					 0);
			assert_int_equal(node, n);
			assert_int_equal(chunk, xor4_chunk[st][n]);
		}
	}
	assert_int_equal(ers_scheme_parse("rs:2+2", &s), 0);
	assert_int_equal(ers_layout_init(&l, &s, 4), 0);
	for (int st = 0; st < 4; st++) {
		for (int n = 0; n < 4; n++) {
			int mem = ers_layout_member(&l, st, n);
			int node;
			uint64_t chunk;

			assert_int_equal(mem >= 2, rs22_chunk[st][n] < 0);
			if (mem >= 2)
				continue;
			assert_int_equal(ers_layout_chunk(&l, st, mem, &node,
							  &chunk),
					 0);
			assert_int_equal(chunk, rs22_chunk[st][n]);
		}
	}
	/* rs:2+2, stripe 1: P0 on node 1, P1 on node 2. */
	assert_int_equal(ers_layout_node(&l, 1, 2), 1);
	assert_int_equal(ers_layout_node(&l, 1, 3), 2);
}

/*
 * For every group size and every (k, m) filling it: chunk -> (stripe,
 * slot) -> chunk is the identity, stripes grow with the chunk number, every
 * data cell of the first periods is hit exactly once, each stripe has k
 * data and m parity holders on distinct nodes, and each node holds parity
 * in exactly m of every N consecutive stripes.
 */
static void test_layout_bijection_and_rotation(void **state)
{
	(void)state;
	for (int n = 2; n <= 16; n++) {
	    for (int m = 1; m <= 8 && m < n; m++) {
		/* Every k that fits: k + m = N, and smaller stripes. */
		for (int k = n - m; k >= 1; k -= k > 4 ? 3 : 1) {
			struct ers_scheme s = { ERS_RS, k, m };
			struct ers_layout l;
			int periods = 3;
			uint64_t nstripes = (uint64_t)periods * n;
			uint8_t *hit = calloc(nstripes * k, 1);

			if (m == 1 && k <= ERS_MAX_K)
				s.kind = n & 1 ? ERS_XOR : ERS_RS;
			assert_non_null(hit);
			assert_int_equal(ers_layout_init(&l, &s, n), 0);
			for (int node = 0; node < n; node++) {
				uint64_t prev = 0;
				uint64_t nch = (uint64_t)periods * k;

				for (uint64_t i = 0; i < nch; i++) {
					uint64_t st, back;
					int slot, bn;

					assert_int_equal(ers_layout_locate(
								 &l, node, i,
								 &st, &slot),
							 0);
					assert_true(st < nstripes);
					assert_true(slot >= 0 && slot < k);
					assert_true(i == 0 || st > prev);
					prev = st;
					assert_int_equal(ers_layout_member(
								 &l, st, node),
							 slot);
					assert_int_equal(ers_layout_node(
								 &l, st, slot),
							 node);
					assert_int_equal(ers_layout_chunk(
								 &l, st, slot,
								 &bn, &back),
							 0);
					assert_int_equal(bn, node);
					assert_int_equal(back, i);
					assert_int_equal(hit[st * k + slot], 0);
					hit[st * k + slot] = 1;
				}
				assert_int_equal(ers_layout_stripes(&l, node,
								    nch),
						 prev + 1);
				assert_int_equal(ers_layout_stripes(&l, node,
								    0),
						 0);
			}
			for (uint64_t c = 0; c < nstripes * k; c++)
				assert_int_equal(hit[c], 1);
			free(hit);

			/*
			 * Per node, in any N consecutive stripes: k data, m
			 * parity, and out of N - k - m of them.
			 */
			for (int node = 0; node < n; node++) {
				for (uint64_t base = 0; base < nstripes;
				     base += 1 + base % 3) {
					int par = 0, data = 0, out = 0;

					for (uint64_t st = base;
					     st < base + (uint64_t)n; st++) {
						int mem = ers_layout_member(
							&l, st, node);

						assert_true(mem == -ENOENT ||
							    (mem >= 0 &&
							     mem < k + m));
						par += mem >= k;
						data += mem >= 0 && mem < k;
						out += mem == -ENOENT;
					}
					assert_int_equal(par, m);
					assert_int_equal(data, k);
					assert_int_equal(out, n - k - m);
				}
			}
			/* Each stripe: k + m distinct nodes, the rest out. */
			for (uint64_t st = 0; st < nstripes; st++) {
				int seen[ERS_MAX_K + ERS_MAX_M + 16] = { 0 };
				int in = 0;

				for (int mem = 0; mem < k + m; mem++) {
					int nd = ers_layout_node(&l, st, mem);

					assert_true(nd >= 0 && nd < n);
					assert_int_equal(seen[nd], 0);
					seen[nd] = 1;
					assert_int_equal(ers_layout_member(
								 &l, st, nd),
							 mem);
				}
				assert_int_equal(ers_layout_node(&l, st, k + m),
						 -EINVAL);
				for (int nd = 0; nd < n; nd++)
					in += ers_layout_member(&l, st, nd) >= 0;
				assert_int_equal(in, k + m);
			}
		}
	    }
	}
}

static void test_layout_errors(void **state)
{
	struct ers_scheme s = { ERS_RS, 4, 2 };
	struct ers_layout l;
	uint64_t st;
	int slot, node;
	uint64_t chunk;

	(void)state;
	assert_int_equal(ers_layout_init(&l, &s, 5), -EINVAL);
	assert_int_equal(ers_layout_init(&l, &s, 7), 0);
	/* Node 6 of 7 sits stripe 0 out: members are (n + s) mod 7 < 6. */
	assert_int_equal(ers_layout_member(&l, 0, 6), -ENOENT);
	assert_int_equal(ers_layout_member(&l, 1, 6), 0);
	assert_int_equal(ers_layout_node(&l, 0, 6), -EINVAL);
	assert_int_equal(ers_layout_init(&l, &s, 6), 0);
	assert_int_equal(ers_layout_member(&l, 0, 6), -EINVAL);
	assert_int_equal(ers_layout_member(&l, 0, -1), -EINVAL);
	assert_int_equal(ers_layout_node(&l, 0, 6), -EINVAL);
	assert_int_equal(ers_layout_locate(&l, 6, 0, &st, &slot), -EINVAL);
	assert_int_equal(ers_layout_chunk(&l, 0, 4, &node, &chunk), -EINVAL);
	assert_int_equal(ers_layout_locate(&l, 0, UINT64_MAX, &st, &slot),
			 -ERANGE);
	/* Very large but representable positions still round-trip. */
	assert_int_equal(ers_layout_locate(&l, 5, UINT64_MAX / 8, &st, &slot),
			 0);
	assert_int_equal(ers_layout_chunk(&l, st, slot, &node, &chunk), 0);
	assert_int_equal(node, 5);
	assert_int_equal(chunk, UINT64_MAX / 8);
	s = (struct ers_scheme){ ERS_REPLICATE, 1, 1 };
	assert_int_equal(ers_layout_init(&l, &s, 2), -EINVAL);
	assert_int_equal(ers_layout_member(NULL, 0, 0), -EINVAL);
}

/*
 * Replica placement: holders are distinct peers; every node holds exactly
 * r - 1 foreign copies (even memory); sources invert holders; group
 * placement keeps copies inside blocks of r (the last block absorbing the
 * N mod r spare nodes).
 */
static void test_replicas(void **state)
{
	(void)state;
	for (int p = ERS_REPLICA_RING; p <= ERS_REPLICA_GROUP; p++) {
		for (int n = 1; n <= 13; n++) {
			for (int r = 1; r <= n && r <= ERS_MAX_M + 1; r++) {
				int load[16] = { 0 };

				for (int node = 0; node < n; node++) {
					int h[ERS_MAX_M], src[ERS_MAX_M];
					int blk = node / r;
					int nblk = n / r;

					assert_int_equal(
						ers_replica_holders(p, n, r,
								    node, h),
						0);
					assert_int_equal(
						ers_replica_sources(p, n, r,
								    node, src),
						0);
					if (blk >= nblk)
						blk = nblk - 1;
					for (int j = 0; j < r - 1; j++) {
						int x = h[j];
						int found = 0;
						int s2[ERS_MAX_M];

						assert_true(x >= 0 && x < n);
						assert_int_not_equal(x, node);
						for (int i = 0; i < j; i++)
							assert_int_not_equal(
								h[i], x);
						load[x]++;
						if (p == ERS_REPLICA_GROUP) {
							int xb = x / r;

							if (xb >= nblk)
								xb = nblk - 1;
							assert_int_equal(xb,
									 blk);
						}
						/* node is a source of x */
						assert_int_equal(
							ers_replica_sources(
								p, n, r, x, s2),
							0);
						for (int i = 0; i < r - 1; i++)
							found |= s2[i] == node;
						assert_true(found);
					}
					for (int j = 0; j < r - 1; j++)
						assert_int_not_equal(src[j],
								     node);
				}
				for (int node = 0; node < n; node++)
					assert_int_equal(load[node], r - 1);
			}
		}
	}
	/* Gemini's examples: pairs on 6 nodes, a ring of 3 at the end of 7. */
	{
		enum ers_replica_policy bad = (enum ers_replica_policy)5;
		int h[ERS_MAX_M];

		assert_int_equal(ers_replica_holders(ERS_REPLICA_GROUP, 6, 2, 3,
						     h),
				 0);
		assert_int_equal(h[0], 2);
		assert_int_equal(ers_replica_holders(ERS_REPLICA_GROUP, 7, 2, 6,
						     h),
				 0);
		assert_int_equal(h[0], 4);
		assert_int_equal(ers_replica_holders(ERS_REPLICA_RING, 7, 3, 6,
						     h),
				 0);
		assert_int_equal(h[0], 0);
		assert_int_equal(h[1], 1);
		assert_int_equal(ers_replica_holders(ERS_REPLICA_RING, 4, 5, 0,
						     h),
				 -EINVAL);
		assert_int_equal(ers_replica_holders(ERS_REPLICA_RING, 4, 2, 4,
						     h),
				 -EINVAL);
		assert_int_equal(ers_replica_holders(bad, 4, 2, 0, h), -EINVAL);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scheme_strings),
		cmocka_unit_test(test_layout_figure),
		cmocka_unit_test(test_layout_bijection_and_rotation),
		cmocka_unit_test(test_layout_errors),
		cmocka_unit_test(test_replicas),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
