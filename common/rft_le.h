/*
 * rft_le.h - little-endian loads and stores of 16, 32 and 64 bits at any
 * alignment: the byte order of every on-wire and on-disk format of
 * reftfs (peer frames, the namespace log, membership records, gns ops).
 *
 * The common layer includes nothing from the project.
 */
#ifndef RFT_LE_H
#define RFT_LE_H

#include <stdint.h>

static inline void rft_put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void rft_put_le32(uint8_t *p, uint32_t v)
{
	rft_put_le16(p, (uint16_t)v);
	rft_put_le16(p + 2, (uint16_t)(v >> 16));
}

static inline void rft_put_le64(uint8_t *p, uint64_t v)
{
	rft_put_le32(p, (uint32_t)v);
	rft_put_le32(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t rft_get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t rft_get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline uint64_t rft_get_le64(const uint8_t *p)
{
	return (uint64_t)rft_get_le32(p) | (uint64_t)rft_get_le32(p + 4) << 32;
}

#endif /* RFT_LE_H */
