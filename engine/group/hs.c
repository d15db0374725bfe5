/*
 * hs.c - the link handshake of the group's TCP transports (group_i.h).
 *
 * The peer links (peer_tcp.c) and raft's links (nslog.c) authenticate
 * every connection with this one challenge-response; docs/protocol.md
 * ("Handshake") is its specification.  Pure: no socket, no clock, no
 * allocation; the transports move the bytes and keep the time limit.
 *
 * Frames (the peer header, group_i.h), seq 1 and 2 each way, no flags,
 * rid 0, no bulk.  Metas, little-endian:
 *
 *   HELLO      0 magic "RFTH" u32 | 4 version u16 | 6 link u8 |
 *              7 group_len u8 | 8 client node u32 | 12 server node u32 |
 *              16 client id u64 | 24 server id u64 (0: any) |
 *              32 client nonce[32] | 64 group[group_len]
 *   CHALLENGE  0 magic u32 | 4 version u16 | 6 link u8 | 7 zero u8 |
 *              8 server id u64 | 16 server nonce[32] | 48 server MAC[32]
 *   AUTH       0 client MAC[32]
 *   WELCOME    (empty)
 *
 * Each MAC is grp_mac() over: the role's label, the link kind (u8), the
 * group, the ids (client node u32, server node u32, client id u64,
 * server id u64) and both nonces.  Each side checks a MAC over a nonce
 * it has just drawn, so nothing recorded from another connection is
 * accepted; the roles' labels differ, so a server's MAC cannot be
 * reflected as a client's.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "erasure.h"
#include "group_i.h"
#include "rft_le.h"

#define HS_MAGIC 0x48544652u	/* "RFTH" read as little-endian u32 */
#define HS_VERSION 2		/* 1: the two handshakes before this one */
#define HS_AUTH_LEN GRP_MAC_LEN
#define HS_LOG_EVERY_MS 60000

static const char label_server[] = "reftfs link server v2";
static const char label_client[] = "reftfs link client v2";

/* Where the handshake stands: what the next bytes read are. */
enum {
	STEP_FAILED,
	STEP_C_CHALLENGE,	/* client: CHALLENGE's header */
	STEP_C_WELCOME,		/* client: WELCOME's header */
	STEP_S_HELLO,		/* server: HELLO's header */
	STEP_S_AUTH,		/* server: AUTH's header */
	STEP_META,		/* the meta of the frame in hs->h */
	STEP_DONE,
};

static bool cfg_ok(const struct grp_hs_cfg *c)
{
	return c && c->secret && c->group && c->group_len >= 1 &&
	       c->group_len <= GRP_GROUP_MAX &&
	       (c->link == GRP_HS_PEER || c->link == GRP_HS_RAFT) &&
	       c->nodes <= GRP_MAX_NODES && c->self < c->nodes;
}

static const char *link_name(const struct grp_hs_cfg *c)
{
	return c->link == GRP_HS_RAFT ? "raft" : "peer";
}

/* The MAC of role @label for this connection's ids and nonces. */
static void hs_mac(const struct grp_hs *hs, const char *label, uint32_t cnode,
		   uint32_t snode, uint64_t cid, uint64_t sid,
		   uint8_t mac[GRP_MAC_LEN])
{
	const struct grp_hs_cfg *c = hs->cfg;
	uint8_t ids[24];
	struct grp_part parts[] = {
		{ label, strlen(label) },
		{ &c->link, 1 },
		{ c->group, c->group_len },
		{ ids, sizeof(ids) },
		{ hs->cnonce, GRP_NONCE_LEN },
		{ hs->snonce, GRP_NONCE_LEN },
	};

	rft_put_le32(ids, cnode);
	rft_put_le32(ids + 4, snode);
	rft_put_le64(ids + 8, cid);
	rft_put_le64(ids + 16, sid);
	grp_mac(c->secret, parts, (int)(sizeof(parts) / sizeof(parts[0])),
		mac);
}

/* Queue one frame of @type and @seq with @len bytes of meta at @meta. */
static void put_frame(struct grp_hs *hs, uint16_t type, uint64_t seq,
		      const uint8_t *meta, uint32_t len)
{
	struct wire_hdr h = {
		.version = WIRE_VERSION,
		.type = type,
		.seq = seq,
		.meta_len = len,
		.meta_crc = len ? ers_crc32c(0, meta, len) : 0,
	};

	if (len) /* WELCOME has no meta (@meta NULL) */
		memmove(hs->out + WIRE_HDR_LEN, meta, len);
	wire_hdr_encode(&h, hs->out);
	hs->out_len = WIRE_HDR_LEN + len;
}

static int fail(struct grp_hs *hs, int rc, const char *why)
{
	hs->step = STEP_FAILED;
	hs->why = why;
	return rc;
}

__attribute__((format(printf, 3, 4))) static int
refuse(struct grp_hs *hs, const char *why, const char *fmt, ...);

static int refuse(struct grp_hs *hs, const char *why, const char *fmt, ...)
{
	va_list ap;

	if (!fmt)
		return fail(hs, -EACCES, why);
	va_start(ap, fmt);
	vsnprintf(hs->whybuf, sizeof(hs->whybuf), fmt, ap);
	va_end(ap);
	return fail(hs, -EACCES, hs->whybuf);
}

static void expect_hdr(struct grp_hs *hs, int step)
{
	hs->step = step;
	hs->want = WIRE_HDR_LEN;
}

int grp_hs_client(struct grp_hs *hs, const struct grp_hs_cfg *cfg,
		  uint32_t node, uint64_t id)
{
	uint8_t m[GRP_HS_HELLO_LEN + GRP_GROUP_MAX];
	int rc;

	memset(hs, 0, offsetof(struct grp_hs, in));
	hs->cfg = cfg;
	hs->peer_node = -1;
	hs->step = STEP_FAILED;
	if (!cfg_ok(cfg) || node >= cfg->nodes || node == cfg->self)
		return -EINVAL;
	rc = grp_random(hs->cnonce, GRP_NONCE_LEN);
	if (rc < 0)
		return rc;
	hs->peer_node = (int)node;
	hs->want_id = id;
	rft_put_le32(m, HS_MAGIC);
	rft_put_le16(m + 4, HS_VERSION);
	m[6] = cfg->link;
	m[7] = (uint8_t)cfg->group_len;
	rft_put_le32(m + 8, cfg->self);
	rft_put_le32(m + 12, node);
	rft_put_le64(m + 16, cfg->self_id);
	rft_put_le64(m + 24, id);
	memcpy(m + 32, hs->cnonce, GRP_NONCE_LEN);
	memcpy(m + GRP_HS_HELLO_LEN, cfg->group, cfg->group_len);
	put_frame(hs, PEER_T_HELLO, 1, m,
		  (uint32_t)(GRP_HS_HELLO_LEN + cfg->group_len));
	expect_hdr(hs, STEP_C_CHALLENGE);
	return 0;
}

int grp_hs_server(struct grp_hs *hs, const struct grp_hs_cfg *cfg)
{
	memset(hs, 0, offsetof(struct grp_hs, in));
	hs->cfg = cfg;
	hs->server = true;
	hs->peer_node = -1;
	hs->step = STEP_FAILED;
	if (!cfg_ok(cfg))
		return -EINVAL;
	expect_hdr(hs, STEP_S_HELLO);
	return 0;
}

uint32_t grp_hs_out(struct grp_hs *hs, const uint8_t **p)
{
	uint32_t n = hs->out_len;

	*p = hs->out;
	hs->out_len = 0;
	return n;
}

uint32_t grp_hs_want(struct grp_hs *hs, uint8_t **dst)
{
	bool live = hs->step != STEP_FAILED && hs->step != STEP_DONE;

	*dst = hs->step == STEP_META ? hs->in + WIRE_HDR_LEN : hs->in;
	return live ? hs->want : 0;
}

/* Server: HELLO is in hs->in + WIRE_HDR_LEN; answer CHALLENGE. */
static int on_hello(struct grp_hs *hs)
{
	const struct grp_hs_cfg *c = hs->cfg;
	const uint8_t *m = hs->in + WIRE_HDR_LEN;
	uint8_t ch[GRP_HS_CHALLENGE_LEN];
	uint32_t cnode, snode;
	uint64_t sid;
	const char *why;
	int rc;

	if (rft_get_le32(m) != HS_MAGIC || rft_get_le16(m + 4) != HS_VERSION)
		return fail(hs, -EPROTO, "not a handshake of this version");
	if (m[6] != c->link) {
		snprintf(hs->whybuf, sizeof(hs->whybuf),
			 "link kind %u on the %s port", m[6], link_name(c));
		return fail(hs, -EPROTO, hs->whybuf);
	}
	if (m[7] == 0 || hs->h.meta_len != GRP_HS_HELLO_LEN + (uint32_t)m[7])
		return fail(hs, -EPROTO, "malformed HELLO");
	cnode = rft_get_le32(m + 8);
	snode = rft_get_le32(m + 12);
	hs->peer_id = rft_get_le64(m + 16);
	sid = rft_get_le64(m + 24);
	if (cnode >= c->nodes || cnode == c->self)
		return refuse(hs, NULL, "node id %u is no peer in this group",
			      cnode);
	hs->peer_node = (int)cnode;
	memcpy(hs->cnonce, m + 32, GRP_NONCE_LEN);
	if (m[7] != c->group_len ||
	    memcmp(m + GRP_HS_HELLO_LEN, c->group, c->group_len) != 0)
		return refuse(hs, "another group", NULL);
	if (snode != c->self)
		return refuse(hs, NULL, "dialled node %u, this is node %u",
			      snode, c->self);
	if (sid != 0 && sid != c->self_id)
		return refuse(hs, NULL, "asks for id %llu, this node is %llu",
			      (unsigned long long)sid,
			      (unsigned long long)c->self_id);
	if (c->check) {
		why = c->check(c->ctx, cnode, hs->peer_id);
		if (why)
			return refuse(hs, why, NULL);
	}
	rc = grp_random(hs->snonce, GRP_NONCE_LEN);
	if (rc < 0)
		return fail(hs, rc, "no random bytes");
	rft_put_le32(ch, HS_MAGIC);
	rft_put_le16(ch + 4, HS_VERSION);
	ch[6] = c->link;
	ch[7] = 0;
	rft_put_le64(ch + 8, c->self_id);
	memcpy(ch + 16, hs->snonce, GRP_NONCE_LEN);
	hs_mac(hs, label_server, cnode, c->self, hs->peer_id, c->self_id,
	       ch + 48);
	put_frame(hs, PEER_T_CHALLENGE, 1, ch, sizeof(ch));
	expect_hdr(hs, STEP_S_AUTH);
	return GRP_HS_MORE;
}

/* Client: CHALLENGE is in; check the server's MAC and answer AUTH. */
static int on_challenge(struct grp_hs *hs)
{
	const struct grp_hs_cfg *c = hs->cfg;
	const uint8_t *m = hs->in + WIRE_HDR_LEN;
	uint32_t snode = (uint32_t)hs->peer_node;
	uint8_t mac[GRP_MAC_LEN];
	uint64_t sid;

	if (rft_get_le32(m) != HS_MAGIC || rft_get_le16(m + 4) != HS_VERSION ||
	    m[6] != c->link || m[7] != 0)
		return fail(hs, -EPROTO, "malformed CHALLENGE");
	sid = rft_get_le64(m + 8);
	memcpy(hs->snonce, m + 16, GRP_NONCE_LEN);
	if (hs->want_id && sid != hs->want_id)
		return refuse(hs, NULL, "answers as id %llu, not %llu",
			      (unsigned long long)sid,
			      (unsigned long long)hs->want_id);
	hs_mac(hs, label_server, c->self, snode, c->self_id, sid, mac);
	if (!grp_mac_equal(mac, m + 48))
		return refuse(hs, "wrong secret (the server's MAC)", NULL);
	hs->peer_id = sid;
	hs_mac(hs, label_client, c->self, snode, c->self_id, sid, mac);
	put_frame(hs, PEER_T_AUTH, 2, mac, sizeof(mac));
	expect_hdr(hs, STEP_C_WELCOME);
	return GRP_HS_MORE;
}

/* Server: AUTH is in; check the client's MAC and answer WELCOME. */
static int on_auth(struct grp_hs *hs)
{
	const struct grp_hs_cfg *c = hs->cfg;
	uint8_t mac[GRP_MAC_LEN];

	hs_mac(hs, label_client, (uint32_t)hs->peer_node, c->self,
	       hs->peer_id, c->self_id, mac);
	if (!grp_mac_equal(mac, hs->in + WIRE_HDR_LEN))
		return refuse(hs, "wrong secret (the client's MAC)", NULL);
	put_frame(hs, PEER_T_WELCOME, 2, NULL, 0);
	hs->step = STEP_DONE;
	return GRP_HS_DONE;
}

/* A header is in: is it the frame this step waits for? */
static int on_hdr(struct grp_hs *hs)
{
	static const struct {
		uint16_t type;
		uint64_t seq;
		uint32_t min, max;
	} want[] = {
		[STEP_C_CHALLENGE] = { PEER_T_CHALLENGE, 1,
				       GRP_HS_CHALLENGE_LEN,
				       GRP_HS_CHALLENGE_LEN },
		[STEP_C_WELCOME] = { PEER_T_WELCOME, 2, 0, 0 },
		[STEP_S_HELLO] = { PEER_T_HELLO, 1, GRP_HS_HELLO_LEN + 1,
				   GRP_HS_HELLO_LEN + GRP_GROUP_MAX },
		[STEP_S_AUTH] = { PEER_T_AUTH, 2, HS_AUTH_LEN, HS_AUTH_LEN },
	};
	struct wire_hdr *h = &hs->h;
	int step = hs->step;

	if (wire_hdr_decode(hs->in, h) < 0)
		return fail(hs, -EPROTO, "not a handshake frame");
	if (h->type != want[step].type || h->seq != want[step].seq ||
	    h->flags != 0 || h->rid != 0 || h->bulk_len != 0 ||
	    h->meta_len < want[step].min || h->meta_len > want[step].max)
		return fail(hs, -EPROTO, "a frame out of the handshake");
	if (step == STEP_C_WELCOME) {
		hs->step = STEP_DONE;
		return GRP_HS_DONE;
	}
	/* Remember which message the meta belongs to in the header. */
	hs->step = STEP_META;
	hs->want = h->meta_len;
	return GRP_HS_MORE;
}

int grp_hs_feed(struct grp_hs *hs)
{
	const uint8_t *meta = hs->in + WIRE_HDR_LEN;

	switch (hs->step) {
	case STEP_C_CHALLENGE:
	case STEP_C_WELCOME:
	case STEP_S_HELLO:
	case STEP_S_AUTH:
		return on_hdr(hs);
	case STEP_META:
		break;
	default:
		return fail(hs, -EPROTO, "no handshake in progress");
	}
	if (ers_crc32c(0, meta, hs->h.meta_len) != hs->h.meta_crc)
		return fail(hs, -EBADMSG, "a handshake frame failed its CRC");
	switch (hs->h.type) {
	case PEER_T_HELLO:
		return on_hello(hs);
	case PEER_T_CHALLENGE:
		return on_challenge(hs);
	default:
		return on_auth(hs);
	}
}

const char *grp_hs_why(const struct grp_hs *hs, int rc)
{
	if (hs->why)
		return hs->why;
	if (rc == -ECONNRESET || rc == -EPIPE)
		return hs->server ? "the client hung up"
				  : "closed by the server: refused (wrong secret, group or node?)";
	if (rc == -ETIMEDOUT)
		return "handshake too slow";
	return strerror(-rc);
}

void grp_hs_log(struct grp_hs_log *lg, const struct grp_hs *hs, int rc)
{
	int node = hs->peer_node, slot = node >= 0 && node < GRP_MAX_NODES
						 ? node
						 : GRP_MAX_NODES;
	int64_t now = (int64_t)rft_now_ms(),
		last = atomic_load(&lg->last_ms[slot]);

	if (last && now - last < HS_LOG_EVERY_MS)
		return;
	if (!atomic_compare_exchange_strong(&lg->last_ms[slot], &last, now))
		return; /* another thread logs this one */
	if (node >= 0)
		rft_warn("%s link %s node %d: handshake failed: %s (logged once a minute per peer)",
			 link_name(hs->cfg), hs->server ? "from" : "to", node,
			 grp_hs_why(hs, rc));
	else
		rft_warn("%s link from an unidentified peer: handshake failed: %s (logged once a minute)",
			 link_name(hs->cfg), grp_hs_why(hs, rc));
}
