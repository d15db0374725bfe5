/*
 * test_crc.c - CRC32C: published vectors, ISA-L against the bitwise
 * reference, chaining in pieces, and ers_crc32c_combine().
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "erasure.h"
#include "test_erasure_util.h"

/* RFC 3720 B.4 and the common check value. */
static void test_known_answers(void **state)
{
	uint8_t buf[48];

	(void)state;
	memset(buf, 0, 32);
	assert_int_equal(ers_crc32c(0, buf, 32), 0x8A9136AA);
	assert_int_equal(ers_crc32c_ref(0, buf, 32), 0x8A9136AA);
	memset(buf, 0xFF, 32);
	assert_int_equal(ers_crc32c(0, buf, 32), 0x62A8AB43);
	assert_int_equal(ers_crc32c_ref(0, buf, 32), 0x62A8AB43);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)i;
	assert_int_equal(ers_crc32c(0, buf, 32), 0x46DD794E);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)(31 - i);
	assert_int_equal(ers_crc32c(0, buf, 32), 0x113FDB5C);
	assert_int_equal(ers_crc32c(0, "123456789", 9), 0xE3069283);
	assert_int_equal(ers_crc32c_ref(0, "123456789", 9), 0xE3069283);
	assert_int_equal(ers_crc32c(0, buf, 0), 0);
}

/* Fast path equals the reference for many lengths and alignments. */
static void test_matches_reference(void **state)
{
	uint64_t st = 0x1234567;
	size_t max = 70000;
	uint8_t *buf = malloc(max + 64);

	(void)state;
	assert_non_null(buf);
	t_fill(&st, buf, max + 64);
	for (size_t len = 0; len < 300; len++)
		for (size_t off = 0; off < 9; off += 4)
			assert_int_equal(ers_crc32c(0, buf + off, len),
					 ers_crc32c_ref(0, buf + off, len));
	for (size_t len = 1000; len <= max; len = len * 3 + 17)
		assert_int_equal(ers_crc32c(7, buf + 3, len),
				 ers_crc32c_ref(7, buf + 3, len));
	free(buf);
}

/* A checksum fed in pieces equals one over the whole buffer. */
static void test_chaining(void **state)
{
	uint64_t st = 42;
	uint8_t buf[4096];
	uint32_t whole, crc;

	(void)state;
	t_fill(&st, buf, sizeof(buf));
	whole = ers_crc32c(0, buf, sizeof(buf));
	for (int trial = 0; trial < 50; trial++) {
		size_t pos = 0;

		crc = 0;
		while (pos < sizeof(buf)) {
			size_t n = t_rand(&st) % 700;

			if (n > sizeof(buf) - pos)
				n = sizeof(buf) - pos;
			crc = ers_crc32c(crc, buf + pos, n);
			pos += n;
		}
		assert_int_equal(crc, whole);
	}
}

static void test_combine(void **state)
{
	uint64_t st = 99;
	size_t max = 3 << 20;
	uint8_t *buf = malloc(max);

	(void)state;
	assert_non_null(buf);
	t_fill(&st, buf, max);
	for (int trial = 0; trial < 200; trial++) {
		size_t len = t_rand(&st) % 5000;
		size_t split = len ? t_rand(&st) % (len + 1) : 0;
		uint32_t a = ers_crc32c(0, buf, split);
		uint32_t b = ers_crc32c(0, buf + split, len - split);

		assert_int_equal(ers_crc32c_combine(a, b, len - split),
				 ers_crc32c(0, buf, len));
	}
	/* Edges: empty second part, empty first part, megabyte pieces. */
	assert_int_equal(ers_crc32c_combine(0x12345678, 0, 0), 0x12345678);
	assert_int_equal(ers_crc32c_combine(0, ers_crc32c(0, buf, 100), 100),
			 ers_crc32c(0, buf, 100));
	assert_int_equal(ers_crc32c_combine(ers_crc32c(0, buf, 1 << 20),
					    ers_crc32c(0, buf + (1 << 20),
						       max - (1 << 20)),
					    max - (1 << 20)),
			 ers_crc32c(0, buf, max));
	/* Rolling up many chunk checksums into a file checksum. */
	{
		uint32_t file = 0;
		size_t chunk = 65537;

		for (size_t off = 0; off < max; off += chunk) {
			size_t n = max - off < chunk ? max - off : chunk;

			file = ers_crc32c_combine(file,
						  ers_crc32c(0, buf + off, n),
						  n);
		}
		assert_int_equal(file, ers_crc32c(0, buf, max));
	}
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_answers),
		cmocka_unit_test(test_matches_reference),
		cmocka_unit_test(test_chaining),
		cmocka_unit_test(test_combine),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
