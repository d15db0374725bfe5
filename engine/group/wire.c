/*
 * wire.c - the peer frame header: encode and decode (group_i.h has the
 * layout).
 *
 * Pure functions on caller-owned buffers.  Every field is packed byte by
 * byte, little-endian, so the layout does not depend on the compiler's
 * struct padding or the host's byte order.  The header carries its own
 * CRC32C (hdr_crc), so a header damaged in transit or forged by a broken
 * peer is refused before any of its lengths is believed.
 */
#include <errno.h>
#include <string.h>

#include "erasure.h"
#include "group_i.h"
#include "rft_le.h"

/* Byte offsets of the fields (group_i.h). */
enum {
	OFF_MAGIC = 0,
	OFF_VERSION = 4,
	OFF_TYPE = 6,
	OFF_FLAGS = 8,
	OFF_RESERVED = 10,
	OFF_META_LEN = 12,
	OFF_BULK_LEN = 16,
	OFF_BULK_CRC = 20,
	OFF_RID = 24,
	OFF_SEQ = 32,
	OFF_META_CRC = 40,
	OFF_HDR_CRC = 44,
};

#define WIRE_KNOWN_FLAGS (PEER_F_REPLY | PEER_F_ERROR)

void wire_hdr_encode(const struct wire_hdr *h, uint8_t out[WIRE_HDR_LEN])
{
	rft_put_le32(out + OFF_MAGIC, WIRE_MAGIC);
	rft_put_le16(out + OFF_VERSION, h->version);
	rft_put_le16(out + OFF_TYPE, h->type);
	rft_put_le16(out + OFF_FLAGS, h->flags);
	rft_put_le16(out + OFF_RESERVED, 0);
	rft_put_le32(out + OFF_META_LEN, h->meta_len);
	rft_put_le32(out + OFF_BULK_LEN, h->bulk_len);
	rft_put_le32(out + OFF_BULK_CRC, h->bulk_crc);
	rft_put_le64(out + OFF_RID, h->rid);
	rft_put_le64(out + OFF_SEQ, h->seq);
	rft_put_le32(out + OFF_META_CRC, h->meta_crc);
	rft_put_le32(out + OFF_HDR_CRC, ers_crc32c(0, out, OFF_HDR_CRC));
}

int wire_hdr_decode(const uint8_t in[WIRE_HDR_LEN], struct wire_hdr *h)
{
	uint16_t flags;

	/*
	 * The CRC before any length is believed: a single flipped bit
	 * anywhere in the header, lengths included, fails here, so
	 * -EMSGSIZE below means the sender really asked for that much.
	 */
	if (rft_get_le32(in + OFF_MAGIC) != WIRE_MAGIC ||
	    rft_get_le16(in + OFF_VERSION) != WIRE_VERSION)
		return -EPROTO;
	if (rft_get_le32(in + OFF_HDR_CRC) != ers_crc32c(0, in, OFF_HDR_CRC))
		return -EPROTO;
	flags = rft_get_le16(in + OFF_FLAGS);
	if (rft_get_le16(in + OFF_RESERVED) != 0 || (flags & ~WIRE_KNOWN_FLAGS))
		return -EPROTO;
	/* An error is only ever a reply (peer_reply_err). */
	if ((flags & PEER_F_ERROR) && !(flags & PEER_F_REPLY))
		return -EPROTO;
	memset(h, 0, sizeof(*h));
	h->version = WIRE_VERSION;
	h->type = rft_get_le16(in + OFF_TYPE);
	h->flags = flags;
	h->meta_len = rft_get_le32(in + OFF_META_LEN);
	h->bulk_len = rft_get_le32(in + OFF_BULK_LEN);
	h->bulk_crc = rft_get_le32(in + OFF_BULK_CRC);
	h->rid = rft_get_le64(in + OFF_RID);
	h->seq = rft_get_le64(in + OFF_SEQ);
	h->meta_crc = rft_get_le32(in + OFF_META_CRC);
	/* @h stays filled in, for the caller's log line. */
	if (h->meta_len > PEER_META_MAX || h->bulk_len > PEER_BULK_MAX)
		return -EMSGSIZE;
	/* CRC32C of nothing is 0: any other value is a lie. */
	if (h->bulk_len == 0 && h->bulk_crc != 0)
		return -EPROTO;
	if (h->meta_len == 0 && h->meta_crc != 0)
		return -EPROTO;
	return 0;
}
