/*
 * test_wire.c - the peer frame header (engine/group/wire.c): byte layout,
 * round trips, and refusal of every damaged or out-of-limit header.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "erasure.h"
#include "group_i.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
	/* splitmix64: a fixed seed, so a failure replays */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

/* Make the header's CRC right again after a test changed a field. */
static void recrc(uint8_t *b)
{
	put32(b + 44, ers_crc32c(0, b, 44));
}

static struct wire_hdr sample(void)
{
	struct wire_hdr h = {
		.version = WIRE_VERSION,
		.type = 0x1234,
		.flags = PEER_F_REPLY,
		.meta_len = 0x00010000, /* PEER_META_MAX */
		.bulk_len = 0x01020304,
		.bulk_crc = 0xa1b2c3d4,
		.rid = 0x1122334455667788ull,
		.seq = 0x99aabbccddeeff01ull,
		.meta_crc = 0xcafef00d,
	};
	return h;
}

/* The exact bytes of group_i.h's table, field by field. */
static void test_layout(void **state)
{
	static const uint8_t want[44] = {
		'R', 'F', 'T', 'P',			/* magic */
		0x01, 0x00,				/* version */
		0x34, 0x12,				/* type */
		0x01, 0x00,				/* flags */
		0x00, 0x00,				/* reserved */
		0x00, 0x00, 0x01, 0x00,			/* meta_len */
		0x04, 0x03, 0x02, 0x01,			/* bulk_len */
		0xd4, 0xc3, 0xb2, 0xa1,			/* bulk_crc */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* rid */
		0x01, 0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, /* seq */
		0x0d, 0xf0, 0xfe, 0xca,			/* meta_crc */
	};
	struct wire_hdr h = sample();
	uint8_t b[WIRE_HDR_LEN];
	uint32_t crc;

	(void)state;
	assert_int_equal(WIRE_HDR_LEN, 48);
	wire_hdr_encode(&h, b);
	assert_memory_equal(b, want, sizeof(want));
	crc = ers_crc32c(0, want, sizeof(want));
	assert_int_equal(b[44], crc & 0xff);
	assert_int_equal(b[45], (crc >> 8) & 0xff);
	assert_int_equal(b[46], (crc >> 16) & 0xff);
	assert_int_equal(b[47], crc >> 24);
}

static void check_equal(const struct wire_hdr *a, const struct wire_hdr *b)
{
	assert_int_equal(a->version, b->version);
	assert_int_equal(a->type, b->type);
	assert_int_equal(a->flags, b->flags);
	assert_int_equal(a->meta_len, b->meta_len);
	assert_int_equal(a->bulk_len, b->bulk_len);
	assert_int_equal(a->bulk_crc, b->bulk_crc);
	assert_true(a->rid == b->rid);
	assert_true(a->seq == b->seq);
	assert_int_equal(a->meta_crc, b->meta_crc);
}

/* Random valid headers, and every field at its extremes, come back. */
static void test_round_trip(void **state)
{
	static const uint16_t flag_sets[] = { 0, PEER_F_REPLY,
					      PEER_F_REPLY | PEER_F_ERROR };
	struct wire_hdr h, d;
	uint8_t b[WIRE_HDR_LEN];
	int i;

	(void)state;
	rng_state = 8;
	for (i = 0; i < 100000; i++) {
		memset(&h, 0, sizeof(h));
		h.version = WIRE_VERSION;
		h.type = (uint16_t)rnd();
		h.flags = flag_sets[rnd() % 3];
		h.meta_len = (uint32_t)(rnd() % (PEER_META_MAX + 1));
		h.bulk_len = (uint32_t)(rnd() % (PEER_BULK_MAX + 1));
		h.bulk_crc = h.bulk_len ? (uint32_t)rnd() : 0;
		h.meta_crc = h.meta_len ? (uint32_t)rnd() : 0;
		h.rid = rnd();
		h.seq = rnd();
		if (i == 0) { /* every field at its top */
			h.type = UINT16_MAX;
			h.meta_len = PEER_META_MAX;
			h.bulk_len = PEER_BULK_MAX;
			h.bulk_crc = h.meta_crc = UINT32_MAX;
			h.rid = h.seq = UINT64_MAX;
		} else if (i == 1) { /* and at its bottom */
			h.type = 0;
			h.flags = 0;
			h.meta_len = h.bulk_len = h.bulk_crc = h.meta_crc = 0;
			h.rid = h.seq = 0;
		}
		wire_hdr_encode(&h, b);
		memset(&d, 0xa5, sizeof(d));
		assert_int_equal(wire_hdr_decode(b, &d), 0);
		check_equal(&h, &d);
	}
}

/* No single flipped bit gets through: CRC32C sees every one. */
static void test_bit_flips(void **state)
{
	struct wire_hdr h = sample(), d;
	uint8_t b[WIRE_HDR_LEN], m[WIRE_HDR_LEN];
	int bit, rounds;

	(void)state;
	rng_state = 9;
	for (rounds = 0; rounds < 64; rounds++) {
		if (rounds > 0) {
			h.type = (uint16_t)rnd();
			h.meta_len = (uint32_t)(rnd() % (PEER_META_MAX + 1));
			h.bulk_len = (uint32_t)(rnd() % (PEER_BULK_MAX + 1));
			h.bulk_crc = h.bulk_len ? (uint32_t)rnd() : 0;
			h.meta_crc = h.meta_len ? (uint32_t)rnd() : 0;
			h.rid = rnd();
			h.seq = rnd();
		}
		wire_hdr_encode(&h, b);
		assert_int_equal(wire_hdr_decode(b, &d), 0);
		for (bit = 0; bit < WIRE_HDR_LEN * 8; bit++) {
			memcpy(m, b, sizeof(m));
			m[bit / 8] ^= (uint8_t)(1u << (bit % 8));
			assert_int_equal(wire_hdr_decode(m, &d), -EPROTO);
		}
	}
}

/* Lengths up to the limits pass; one byte more is -EMSGSIZE. */
static void test_limits(void **state)
{
	struct wire_hdr h = sample(), d;
	uint8_t b[WIRE_HDR_LEN];

	(void)state;
	h.meta_len = PEER_META_MAX;
	h.bulk_len = PEER_BULK_MAX;
	wire_hdr_encode(&h, b);
	assert_int_equal(wire_hdr_decode(b, &d), 0);

	h.meta_len = PEER_META_MAX + 1;
	wire_hdr_encode(&h, b);
	assert_int_equal(wire_hdr_decode(b, &d), -EMSGSIZE);
	assert_int_equal(d.meta_len, PEER_META_MAX + 1); /* for the log */

	h.meta_len = UINT32_MAX;
	wire_hdr_encode(&h, b);
	assert_int_equal(wire_hdr_decode(b, &d), -EMSGSIZE);

	h.meta_len = 0;
	h.meta_crc = 0;
	h.bulk_len = PEER_BULK_MAX + 1;
	wire_hdr_encode(&h, b);
	assert_int_equal(wire_hdr_decode(b, &d), -EMSGSIZE);

	h.bulk_len = UINT32_MAX;
	wire_hdr_encode(&h, b);
	assert_int_equal(wire_hdr_decode(b, &d), -EMSGSIZE);
}

/*
 * Headers with a right CRC but a wrong magic, version, reserved field or
 * flag: what a broken or foreign peer sends, not line noise.
 */
static void test_wrong_fields(void **state)
{
	struct wire_hdr h = sample(), d;
	uint8_t b[WIRE_HDR_LEN];
	int i;

	(void)state;
	wire_hdr_encode(&h, b);
	b[0] = 'X';
	recrc(b);
	assert_int_equal(wire_hdr_decode(b, &d), -EPROTO);

	/* The magic in the other byte order. */
	wire_hdr_encode(&h, b);
	b[0] = 'P';
	b[1] = 'T';
	b[2] = 'F';
	b[3] = 'R';
	recrc(b);
	assert_int_equal(wire_hdr_decode(b, &d), -EPROTO);

	h.version = 0;
	wire_hdr_encode(&h, b);
	assert_int_equal(wire_hdr_decode(b, &d), -EPROTO);
	h.version = WIRE_VERSION + 1;
	wire_hdr_encode(&h, b);
	assert_int_equal(wire_hdr_decode(b, &d), -EPROTO);
	h.version = WIRE_VERSION;

	for (i = 0; i < 16; i++) {
		wire_hdr_encode(&h, b);
		b[10 + i / 8] = (uint8_t)(1u << (i % 8));
		recrc(b);
		assert_int_equal(wire_hdr_decode(b, &d), -EPROTO);
	}

	for (i = 2; i < 16; i++) {
		h.flags = (uint16_t)(PEER_F_REPLY | 1u << i);
		wire_hdr_encode(&h, b);
		assert_int_equal(wire_hdr_decode(b, &d), -EPROTO);
	}
	/* An error that is not a reply means nothing. */
	h.flags = PEER_F_ERROR;
	wire_hdr_encode(&h, b);
	assert_int_equal(wire_hdr_decode(b, &d), -EPROTO);
	h.flags = PEER_F_REPLY | PEER_F_ERROR;
	wire_hdr_encode(&h, b);
	assert_int_equal(wire_hdr_decode(b, &d), 0);
	h.flags = 0;

	/* CRC32C of zero bytes is 0: a CRC for an empty part is a lie. */
	h.bulk_len = 0;
	h.bulk_crc = 1;
	wire_hdr_encode(&h, b);
	assert_int_equal(wire_hdr_decode(b, &d), -EPROTO);
	h.bulk_crc = 0;
	h.meta_len = 0;
	h.meta_crc = 1;
	wire_hdr_encode(&h, b);
	assert_int_equal(wire_hdr_decode(b, &d), -EPROTO);
	h.meta_crc = 0;
	wire_hdr_encode(&h, b);
	assert_int_equal(wire_hdr_decode(b, &d), 0);

	/* All zeros and all ones are no header either. */
	memset(b, 0, sizeof(b));
	assert_int_equal(wire_hdr_decode(b, &d), -EPROTO);
	memset(b, 0xff, sizeof(b));
	assert_int_equal(wire_hdr_decode(b, &d), -EPROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layout),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_bit_flips),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_wrong_fields),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
