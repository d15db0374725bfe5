/*
 * crc.c - CRC32C on ISA-L, its combine helper and a bitwise reference.
 *
 * ISA-L's crc32_iscsi() takes and returns the raw (non-inverted) register,
 * so the standard pre- and post-inversion is done here; that makes results
 * chain across calls and match the published check value.
 */
#include <isa-l/crc.h>

#include "erasure.h"

/* Reflected Castagnoli polynomial: bit 31 - i holds the coefficient of x^i. */
#define CRC32C_POLY 0x82F63B78u

uint32_t ers_crc32c(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	crc = ~crc;
	/* crc32_iscsi() takes an int length; feed it in bounded pieces. */
	while (len > 0) {
		size_t n = len > (1u << 30) ? (1u << 30) : len;

		crc = crc32_iscsi((unsigned char *)p, (int)n, crc);
		p += n;
		len -= n;
	}
	return ~crc;
}

uint32_t ers_crc32c_ref(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	crc = ~crc;
	while (len--) {
		crc ^= *p++;
		for (int b = 0; b < 8; b++)
			crc = (crc >> 1) ^ (crc & 1 ? CRC32C_POLY : 0);
	}
	return ~crc;
}

/*
 * a * b mod P for polynomials in the reflected representation (x^0 is the
 * top bit), as in zlib's multmodp().
 */
static uint32_t crc32c_mulmod(uint32_t a, uint32_t b)
{
	uint32_t m = 1u << 31;
	uint32_t p = 0;

	while (m && a) {
		if (a & m) {
			p ^= b;
			a &= ~m;
		}
		m >>= 1;
		b = (b >> 1) ^ (b & 1 ? CRC32C_POLY : 0);
	}
	return p;
}

/*
 * CRC is linear: crc(A || B) = crc(A) * x^(8|B|) + crc(B) mod P once the
 * pre- and post-inversions are accounted for, and with both results
 * inverted they cancel out (zlib's crc32_combine argument). x^(8 len) is
 * built by square-and-multiply over the bits of len.
 */
uint32_t ers_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
	uint32_t xpow = 1u << 31; /* x^0 */
	uint32_t sq = 1u << 23;	  /* x^8: the shift for one byte */

	while (len2) {
		if (len2 & 1)
			xpow = crc32c_mulmod(sq, xpow);
		sq = crc32c_mulmod(sq, sq);
		len2 >>= 1;
	}
	return crc32c_mulmod(xpow, crc1) ^ crc2;
}
