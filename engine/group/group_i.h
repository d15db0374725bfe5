/*
 * group_i.h - the sharding group's internal modules (issue 8).
 *
 * The group layer lets the daemons of a sharding group talk to each other.
 * It is built from parts that each have one job and a unit test of its
 * own; the daemon and the engine see only engine/group/group.h.
 *
 *   auth.c       the shared secret (--secret-file) and HMAC-SHA256
 *   hs.c         the link handshake both TCP transports run (peer links
 *                and raft links): pure, on caller-owned buffers
 *   wire.c       the frame header: encode/decode, limits (pure functions)
 *   peer.c       what every transport shares: handler table, dispatch,
 *                request/reply calls with timeouts
 *   peer_tcp.c   the TCP transport: authenticated connections per peer
 *   memb.c       membership: heartbeats, failure detector, view + epoch,
 *                static --peers or a memcached registry
 *   nslog.c      the group's namespace log on canonical's C Raft (libraft)
 *
 * Dependency direction: nslog and memb use a transport only through
 * struct peer_xport; nothing here includes the engine's private headers.
 * The unit tests' fake transport and raft cut are not built here
 * (tests/unit/group_test.h).
 *
 * Threads: a transport delivers frames on its own receive threads.  A
 * handler (struct peer_rx) must not sleep: it copies what it needs or hands
 * the work to a queue, and returns.  No callback of this layer is ever made
 * with a lock of the caller held, and no function here may be called with
 * an engine namespace or file lock held (it may wait for the network).
 */
#ifndef RFT_GROUP_I_H
#define RFT_GROUP_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GRP_MAX_NODES 64

/* --- the shared secret (auth.c) ----------------------------------------- */

#define GRP_SECRET_MIN 16	/* bytes; shorter secrets are refused */
#define GRP_SECRET_MAX 1024
#define GRP_MAC_LEN 32		/* HMAC-SHA256 */
#define GRP_NONCE_LEN 32

struct grp_secret {
	size_t len;
	uint8_t key[GRP_SECRET_MAX];
};

/*
 * Read the secret from @path: the whole file, one trailing newline dropped.
 * The file must be a regular file owned by the daemon's uid (or root) that
 * neither group nor others may read or write (mode 0600 or 0400): -EPERM
 * otherwise.  -EINVAL if it holds fewer than GRP_SECRET_MIN or more than
 * GRP_SECRET_MAX bytes; -errno if it cannot be read.
 */
int grp_secret_load(const char *path, struct grp_secret *out);

/* HMAC-SHA256 of the concatenation of @n parts under @s (OpenSSL). */
struct grp_part {
	const void *p;
	size_t len;
};
void grp_mac(const struct grp_secret *s, const struct grp_part *parts, int n,
	     uint8_t out[GRP_MAC_LEN]);

/* Constant-time comparison of two MACs: true when equal. */
bool grp_mac_equal(const uint8_t a[GRP_MAC_LEN], const uint8_t b[GRP_MAC_LEN]);

/* Fill @buf with @len bytes from getrandom(2).  0 or -errno. */
int grp_random(void *buf, size_t len);

/* --- frames -------------------------------------------------------------- */

/*
 * Message types.  The transport owns 1..15 (the handshake); the other ranges
 * belong to one module each, which registers for its range.
 */
enum peer_type {
	PEER_T_HELLO = 1,	/* client -> server: who I am + nonce */
	PEER_T_CHALLENGE = 2,	/* server -> client: nonce + server's MAC */
	PEER_T_AUTH = 3,	/* client -> server: client's MAC */
	PEER_T_WELCOME = 4,	/* server -> client: accepted */

	PEER_T_MEMB_FIRST = 16,	/* memb.c: 16..31 */
	PEER_T_MEMB_LAST = 31,
	PEER_T_NSLOG_FIRST = 32, /* nslog.c: 32..63 */
	PEER_T_NSLOG_LAST = 63,
	PEER_T_GNS_FIRST = 64,	/* engine/gns.c: namespace waits, piece
				   reads: 64..79 */
	PEER_T_GNS_LAST = 79,
	PEER_T_DATA_FIRST = 80,	/* protection: 80..127 */
	PEER_T_DATA_LAST = 127,
	PEER_T_TEST_FIRST = 128, /* unit tests: 128..255 */
	PEER_T_TEST_LAST = 255,
	PEER_T_MAX = 255,
};

#define PEER_F_REPLY 0x1	/* an answer to the request with this rid */
#define PEER_F_ERROR 0x2	/* reply: meta is an int32 -errno */

#define PEER_META_MAX (64u << 10)	/* bytes of meta in one frame */
#define PEER_BULK_MAX (64u << 20)	/* bytes of bulk in one frame */

/*
 * A frame: a small typed record (meta) and optional bulk bytes (a chunk).
 * Bulk is sent from where it lies (the arena) and received where the
 * receiver says (the arena), never through a staging copy; its CRC32C is
 * given by the sender (chunks carry theirs) and checked by the receiver.
 */
struct peer_frame {
	uint16_t type;
	uint16_t flags;		/* PEER_F_* */
	uint64_t rid;		/* request id; a reply carries its request's */
	const void *meta;
	uint32_t meta_len;	/* <= PEER_META_MAX */
	const void *bulk;
	uint32_t bulk_len;	/* <= PEER_BULK_MAX */
	uint32_t bulk_crc;	/* CRC32C of bulk (0 when bulk_len is 0) */
};

/*
 * The header on the wire (wire.c), little-endian, WIRE_HDR_LEN bytes:
 *
 *   0  magic     u32  "RFTP"
 *   4  version   u16  WIRE_VERSION
 *   6  type      u16
 *   8  flags     u16
 *  10  reserved  u16  0
 *  12  meta_len  u32
 *  16  bulk_len  u32
 *  20  bulk_crc  u32
 *  24  rid       u64
 *  32  seq       u64  per connection and direction: 1, 2, 3, ...
 *  40  meta_crc  u32  CRC32C of the meta bytes
 *  44  hdr_crc   u32  CRC32C of bytes 0..43
 *
 * followed by meta_len bytes of meta and bulk_len bytes of bulk.
 */
#define WIRE_MAGIC 0x50544652u /* "RFTP" read as little-endian u32 */
#define WIRE_VERSION 1
#define WIRE_HDR_LEN 48

struct wire_hdr {
	uint16_t version;
	uint16_t type;
	uint16_t flags;
	uint32_t meta_len;
	uint32_t bulk_len;
	uint32_t bulk_crc;
	uint64_t rid;
	uint64_t seq;
	uint32_t meta_crc;
};

/* Encode @h into @out (hdr_crc computed here). */
void wire_hdr_encode(const struct wire_hdr *h, uint8_t out[WIRE_HDR_LEN]);

/*
 * Decode and check a header: -EPROTO for a wrong magic, version or
 * hdr_crc, a nonzero reserved field or an unknown flag; -EMSGSIZE for a
 * length over the limits.  Checks nothing that needs the payload.
 */
int wire_hdr_decode(const uint8_t in[WIRE_HDR_LEN], struct wire_hdr *h);

/* --- the link handshake (hs.c) ------------------------------------------ */

/*
 * One handshake for both TCP transports (docs/protocol.md, "Handshake"):
 * the peer links (peer_tcp.c) and raft's links (nslog.c).  Four frames
 * with the header above, HELLO and AUTH from the client, CHALLENGE and
 * WELCOME from the server; each side proves the secret with an
 * HMAC-SHA256 over both nonces, both ids, the group and the link kind.
 *
 * hs.c does no I/O: the transport moves the bytes (blocking reads with a
 * deadline in peer_tcp.c, libuv callbacks in nslog.c) and owns the time
 * limit (GRP_HS_MS).  The loop is the same on both sides:
 *
 *	grp_hs_client() or grp_hs_server();
 *	for (;;) {
 *		send grp_hs_out()'s bytes, if any;
 *		if the last grp_hs_feed() said GRP_HS_DONE: done;
 *		read exactly grp_hs_want() bytes into its buffer;
 *		rc = grp_hs_feed();  (< 0: close the connection)
 *	}
 *
 * Exactly the bytes of each message are asked for, so whatever follows
 * the handshake on the stream (raft's own protocol) is left unread.
 * A refused peer is told nothing: the connection is closed.
 */
#define GRP_GROUP_MAX 255	/* bytes of group name */
#define GRP_HS_MS 2000		/* a handshake not done in this time fails */

enum grp_hs_link {
	GRP_HS_PEER = 1,	/* peer_tcp.c: ids are node incarnations */
	GRP_HS_RAFT = 2,	/* nslog.c: ids are raft ids */
};

/* What one side knows before a handshake.  Read-only while one runs. */
struct grp_hs_cfg {
	const struct grp_secret *secret;
	const char *group;
	size_t group_len;	/* 1..GRP_GROUP_MAX */
	uint8_t link;		/* enum grp_hs_link */
	uint32_t self;		/* this node */
	uint32_t nodes;		/* node ids are below this */
	uint64_t self_id;	/* GRP_HS_PEER: incarnation; RAFT: raft id */
	/*
	 * Server, optional: may @node, which says its id is @id, connect?
	 * NULL to accept, else why not (refused with -EACCES).  Called on
	 * the transport's thread; must not sleep.
	 */
	const char *(*check)(void *ctx, uint32_t node, uint64_t id);
	void *ctx;
};

#define GRP_HS_HELLO_LEN 64	/* HELLO's meta before the group name */
#define GRP_HS_CHALLENGE_LEN 80
#define GRP_HS_MSG_MAX (WIRE_HDR_LEN + GRP_HS_HELLO_LEN + GRP_GROUP_MAX)

/* One side of one handshake.  Caller-owned; no resources to free. */
struct grp_hs {
	const struct grp_hs_cfg *cfg;
	bool server;
	int step;		/* hs.c's own */
	int peer_node;		/* the other side; -1 until known */
	uint64_t peer_id;	/* its id, once proved or (server) claimed */
	uint64_t want_id;	/* client: the server id it dialled, 0 any */
	const char *why;	/* after a failure: what to log */
	uint8_t cnonce[GRP_NONCE_LEN], snonce[GRP_NONCE_LEN];
	struct wire_hdr h;	/* the frame being read */
	uint32_t want;		/* bytes the current read needs */
	uint32_t out_len;	/* bytes in out not taken yet */
	uint8_t in[GRP_HS_MSG_MAX];
	uint8_t out[GRP_HS_MSG_MAX];
	char whybuf[96];
};

#define GRP_HS_MORE 0		/* grp_hs_feed(): go on */
#define GRP_HS_DONE 1		/* authenticated once out is sent */

/*
 * Start the client side towards @node, which should answer with id @id
 * (0: any).  HELLO is then waiting in grp_hs_out().  0, -EINVAL for a bad
 * @cfg or @node, -errno from getrandom(2).
 */
int grp_hs_client(struct grp_hs *hs, const struct grp_hs_cfg *cfg,
		  uint32_t node, uint64_t id);
/* Start the server side: it waits for HELLO.  0 or -EINVAL (@cfg). */
int grp_hs_server(struct grp_hs *hs, const struct grp_hs_cfg *cfg);
/*
 * The bytes to send now (inside @hs, valid until the next call on it),
 * taken: a second call gives 0 until grp_hs_feed() makes more.
 */
uint32_t grp_hs_out(struct grp_hs *hs, const uint8_t **p);
/* Where the next bytes go (*@dst, inside @hs) and exactly how many. */
uint32_t grp_hs_want(struct grp_hs *hs, uint8_t **dst);
/*
 * grp_hs_want()'s bytes are in.  GRP_HS_MORE, GRP_HS_DONE (send the
 * last grp_hs_out() first), or a failure with hs->why set: -EPROTO (not
 * a handshake of this link kind: a bad header, type, sequence, length or
 * layout), -EBADMSG (a meta CRC mismatch), -EACCES (refused: another
 * group, a node or id not expected, a wrong MAC), -errno (getrandom).
 * Nothing is allocated; no length is believed before it is checked.
 */
int grp_hs_feed(struct grp_hs *hs);
/*
 * What to log for a handshake that ended in @rc: hs->why, or the
 * transport's own errors (-ECONNRESET and -EPIPE: the other side hung up;
 * -ETIMEDOUT: the time limit).
 */
const char *grp_hs_why(const struct grp_hs *hs, int rc);

/*
 * Handshake failures are logged through one of these per transport: at
 * most one line a minute per peer (unknown peers share one slot), since
 * the counters have the numbers.  Zeroed memory is ready to use.
 */
struct grp_hs_log {
	_Atomic int64_t last_ms[GRP_MAX_NODES + 1];
};
/* Log the failure @rc of @hs, if @lg allows it now.  Any thread. */
void grp_hs_log(struct grp_hs_log *lg, const struct grp_hs *hs, int rc);

/* --- transports (peer.c, peer_tcp.c; tests: peer_fake.c) ---------------- */

struct peer_xport;

/*
 * What a module gives the transport for its range of types.  All three
 * run on a transport thread and must not sleep.
 */
struct peer_rx {
	void *ctx;
	/*
	 * @f's meta has arrived from @node (f->bulk is NULL).  Return where
	 * its f->bulk_len bytes go (at least that many bytes, owned by the
	 * module), or NULL to let the transport receive them into its own
	 * buffer.  Whatever is stored in *cookie comes back in deliver().
	 * Optional: NULL means always the transport's buffer.
	 */
	void *(*bulk_dest)(void *ctx, int node, const struct peer_frame *f,
			   void **cookie);
	/*
	 * The whole frame.  f->meta and f->bulk are valid during the call
	 * only (f->bulk is at the bulk_dest buffer if one was given).
	 * bulk_rc is 0, -EBADMSG when the bulk's CRC32C does not match, or
	 * -ECONNRESET when the link died during the bulk (then only the
	 * cookie is meaningful).  Once bulk_dest returned a buffer, deliver
	 * is called exactly once for that frame.  Return 0, or -EPROTO for a
	 * frame this module does not accept: it is counted and the link to
	 * @node is closed.
	 */
	int (*deliver)(void *ctx, int node, const struct peer_frame *f,
		       void *cookie, int bulk_rc);
	/*
	 * The link to @node came up (authenticated; @incarnation is the
	 * peer daemon's) or went down.  Optional.
	 */
	void (*link)(void *ctx, int node, uint64_t incarnation, bool up);
};

/* Per-peer counters (monotonic).  Read with peer_stats(). */
struct peer_stats {
	uint64_t frames_out, bytes_out;
	uint64_t frames_in, bytes_in;
	uint64_t connects;	/* links established (either side) */
	uint64_t auth_failed;	/* handshakes refused (wrong secret, ...) */
	uint64_t bad_frames;	/* malformed, oversized, out of protocol */
	uint64_t crc_errors;	/* meta or bulk CRC mismatches */
	uint64_t unknown_type;	/* frames no module registered for */
	uint64_t call_timeouts;	/* peer_call() that ran out of time */
	bool up;		/* a link is established now */
	uint64_t incarnation;	/* of the peer, as of the last handshake */
};

/* What a transport implements.  Called only through the peer_* wrappers. */
struct peer_xport_ops {
	int (*start)(struct peer_xport *x);
	/*
	 * Send @f.  On success *@gen names the link it went on: a number that grows with every new link to @node, the
	 * one peer_base_link() later gives when that link goes down.
	 */
	int (*send)(struct peer_xport *x, int node, const struct peer_frame *f,
		    int timeout_ms, uint64_t *gen);
	int (*set_addr)(struct peer_xport *x, int node, const char *addr);
	void (*drop)(struct peer_xport *x, int node);
	void (*stop)(struct peer_xport *x);
	void (*free)(struct peer_xport *x);
};

#define PEER_MAX_HANDLERS 8

struct peer_call;

/*
 * The part every transport shares (peer.c).  An implementation embeds it
 * first in its own struct and calls peer_base_init/_fini.
 */
struct peer_xport {
	const struct peer_xport_ops *ops;
	int self;
	int nodes;
	uint64_t incarnation;	/* of this daemon */

	struct {
		uint16_t lo, hi;
		struct peer_rx rx;
	} handler[PEER_MAX_HANDLERS];
	int nhandlers;		/* fixed once started */
	bool started;

	pthread_mutex_t calls_lock;
	struct peer_call *calls;	/* protected by calls_lock */
	uint64_t next_rid;		/* protected by calls_lock */
	uint64_t *down_gen;	/* [nodes]: newest link announced down;
				   calls_lock */

	/* Counters, per peer; the transport updates them with atomics. */
	struct peer_counters {
		_Atomic uint64_t frames_out, bytes_out, frames_in, bytes_in;
		_Atomic uint64_t connects, auth_failed, bad_frames, crc_errors;
		_Atomic uint64_t unknown_type, call_timeouts;
		_Atomic bool up;
		_Atomic uint64_t incarnation;
	} *cnt;			/* [nodes] */
};

/*
 * Register @rx for frame types lo..hi (inclusive, within one module's
 * range).  Only before peer_start().  0, -EBUSY once started, -EEXIST if
 * the range overlaps another, -ENOSPC past PEER_MAX_HANDLERS.
 */
int peer_register(struct peer_xport *x, uint16_t lo, uint16_t hi,
		  const struct peer_rx *rx);

/* Start listening and connecting.  0 or -errno (-EADDRINUSE, ...). */
int peer_start(struct peer_xport *x);

/*
 * Send @f to @node, in order with every other frame to that node.  Blocks
 * until the frame is handed to the link (not until it is received), at
 * most @timeout_ms (a link being set up is waited for within that time).
 * 0; -ENOTCONN when no link could be made; -ETIMEDOUT; -EINVAL for a frame
 * over the limits or a node out of range or @node == self.
 */
int peer_send(struct peer_xport *x, int node, const struct peer_frame *f,
	      int timeout_ms);

/* Where @node listens, when the registry learns it.  0 or -errno. */
int peer_set_addr(struct peer_xport *x, int node, const char *addr);

/* Close the link to @node (it is made again at the next send). */
void peer_drop(struct peer_xport *x, int node);

/*
 * Stop all threads and close every link; pending calls fail -ESHUTDOWN.
 * After this no rx callback runs.  Then peer_free().
 */
void peer_stop(struct peer_xport *x);
void peer_free(struct peer_xport *x);

/* Copy @node's counters into @out. */
void peer_stats(struct peer_xport *x, int node, struct peer_stats *out);

/*
 * A request/reply exchange.  The caller owns every buffer in @rep; the
 * reply's meta is copied into rep->meta (at most meta_cap bytes, -EMSGSIZE
 * if longer) and its bulk is received straight into rep->bulk (at most
 * bulk_cap bytes).
 */
struct peer_reply {
	void *meta;
	uint32_t meta_cap;
	uint32_t meta_len;	/* out */
	void *bulk;
	uint32_t bulk_cap;
	uint32_t bulk_len;	/* out */
	uint32_t bulk_crc;	/* out: as the sender gave it */
	uint16_t type;		/* out */
};

/*
 * Send request @req (its rid is set here) to @node and wait for the reply
 * at most @timeout_ms.  0; the peer's -errno for a PEER_F_ERROR reply;
 * -ETIMEDOUT; -ECONNRESET if the link to @node went down first;
 * -EBADMSG if the reply's bulk failed its CRC; -EMSGSIZE if it did not
 * fit; -ESHUTDOWN once peer_stop() has begun.  Must not be called from a
 * transport thread.
 */
int peer_call(struct peer_xport *x, int node, struct peer_frame *req,
	      struct peer_reply *rep, int timeout_ms);

/* Answer request @req from @node with @rep (its type, rid and PEER_F_REPLY
 * set here: a reply carries its request's type). */
int peer_reply(struct peer_xport *x, int node, const struct peer_frame *req,
	       struct peer_frame *rep, int timeout_ms);

/* Answer request @req from @node with the error @err (a -errno). */
int peer_reply_err(struct peer_xport *x, int node,
		   const struct peer_frame *req, int err, int timeout_ms);

/* For implementations: set up and tear down the shared part. */
int peer_base_init(struct peer_xport *x, const struct peer_xport_ops *ops,
		   int self, int nodes, uint64_t incarnation);
void peer_base_fini(struct peer_xport *x);

/*
 * For implementations, on their receive threads: route a frame's
 * bulk_dest/deliver to a pending call (replies) or to the module
 * registered for its type, and tell every module about links.  A frame no
 * one takes is counted; deliver then returns -EPROTO and the
 * implementation closes the link.
 */
void *peer_base_bulk_dest(struct peer_xport *x, int node,
			  const struct peer_frame *f, void **cookie);
int peer_base_deliver(struct peer_xport *x, int node,
		      const struct peer_frame *f, void *cookie, int bulk_rc);
void peer_base_link(struct peer_xport *x, int node, uint64_t incarnation,
		    uint64_t gen, bool up);
/*
 * Links to @node up to @gen are gone: calls whose requests went on them
 * fail with -ECONNRESET (peer_base_link does this for a link announced
 * down; a transport calls it for one that died before it was announced).
 */
void peer_base_calls_lost(struct peer_xport *x, int node, uint64_t gen);

/* The TCP transport. */
struct peer_tcp_opts {
	int self;
	int nodes;
	uint64_t incarnation;	/* of this daemon, sent in the handshake */
	const char *group;	/* group name, checked in the handshake */
	const char *const *addrs; /* [nodes] "host:port"; NULL = unknown yet */
	const char *listen;	/* NULL: addrs[self] */
	const struct grp_secret *secret;
	int handshake_ms;	/* a handshake not done in this time fails */
	int idle_ms;		/* a frame started but not finished in this
				 * time closes the link (slow senders) */
};
/*
 * The TCP transport, its listening socket already bound (-EADDRINUSE and
 * friends are known here, before peer_start()).  0 or -errno.
 */
int peer_tcp_new(const struct peer_tcp_opts *o, struct peer_xport **out);
/*
 * The TCP port @x listens on, once started (so tests can listen on
 * "host:0" and peer_set_addr() what they got).  The port, -ENOTCONN
 * before peer_start(), -EINVAL if @x is not a TCP transport.
 */
int peer_tcp_port(struct peer_xport *x);

/* --- membership (memb.c) ------------------------------------------------- */

/*
 * Each daemon keeps its own view of the group: every node's state and
 * incarnation (a daemon's incarnation is new at every start, so a
 * replacement with the same id is told apart from the node it replaces).
 * Heartbeats go to every peer every heartbeat_ms and carry the sender's
 * view, so a node that was hung (SIGSTOP) learns on waking that the others
 * declared it dead.  The view's epoch counts its changes.
 */
enum memb_state {
	MEMB_UNKNOWN,	/* never heard from since this daemon started */
	MEMB_UP,
	MEMB_SUSPECT,	/* no heartbeat for suspect_ms */
	MEMB_DEAD,	/* no heartbeat for dead_ms; a new incarnation or the
			 * same one heard again (after it learns it was dead
			 * and rejoins) brings it back */
};

struct memb_node {
	int id;
	char addr[128];		/* "host:port", "" while unknown */
	enum memb_state state;
	uint64_t incarnation;	/* 0 while unknown */
	uint64_t last_heard_ms;	/* CLOCK_MONOTONIC ms of the last heartbeat */
	uint64_t since_ms;	/* when it entered this state */
	bool rebuilding;	/* its last heartbeat said so (this node: set
				   by memb_set_rebuilding) */
};

struct memb_view {
	uint64_t epoch;		/* +1 at every change of any node's state */
	int self;
	int nodes;
	/*
	 * Not 0: the registry holds this node's entry from a daemon started
	 * later (that incarnation), which took this one's place; this
	 * daemon no longer registers.
	 */
	uint64_t taken_over_by;
	struct memb_node node[GRP_MAX_NODES];
};

struct memb_opts {
	int self;
	int nodes;
	uint64_t incarnation;
	const char *const *addrs; /* [nodes], the static --peers list; NULL
				   * with a registry */
	int heartbeat_ms;
	int suspect_ms;
	int dead_ms;		/* --dead-after */
	/* The memcached registry (NULL: static list only). */
	const char *registry;	/* "host:port[,host:port...]" */
	const char *group;	/* key prefix */
	const char *listen_addr; /* what this node publishes */
};

struct memb;

/*
 * Create membership over @x; registers the PEER_T_MEMB_* range, so call
 * before peer_start().  0 or -errno (-EINVAL for bad options, with a
 * logged reason).
 */
int memb_new(const struct memb_opts *o, struct peer_xport *x,
	     struct memb **out);
/* Start heartbeats (after peer_start()).  0 or -errno. */
int memb_start(struct memb *m);
/* Stop the membership threads; no callback runs after it returns. */
void memb_stop(struct memb *m);
/*
 * Free @m (NULL is fine).  The transport keeps calling memb's handler
 * until it is stopped: free only after peer_stop() or peer_free() of x.
 */
void memb_free(struct memb *m);

/* A copy of the current view. */
void memb_get_view(struct memb *m, struct memb_view *out);

/*
 * This daemon brings its node's files back (it started with empty memory)
 * or is done: said in its heartbeats from the next one on, and shown by
 * the others as the state "rebuilding".
 */
void memb_set_rebuilding(struct memb *m, bool on);

/*
 * Called on the membership thread after each change, with no lock held:
 * @node changed from @was (incarnation @was_inc) to what @v says.  When
 * @node is the caller's own node and its state is MEMB_DEAD, the others
 * declared this daemon dead (it must stop serving what it holds as
 * current until it has caught up).  Must not sleep for long.
 */
typedef void memb_change_fn(void *ctx, const struct memb_view *v, int node,
			    enum memb_state was, uint64_t was_inc);
/* Set the one listener (replacing any; NULL for none).  Returns 0. */
int memb_listen(struct memb *m, memb_change_fn *fn, void *ctx);

/*
 * Called on the registry thread when it learns where @node listens (its
 * first address, or a new one: a daemon restarted elsewhere, a
 * replacement), after the view and the transport have it.  Never for this
 * node, never with a lock of memb's held; one call at a time.  It may
 * block a little (a name lookup): that delays the registry's next round,
 * never a heartbeat.  Only a registry group learns addresses: with a
 * static list it is never called.
 */
typedef void memb_addr_fn(void *ctx, int node, const char *addr);
/* Set the one address listener (replacing any; NULL for none).  0. */
int memb_listen_addrs(struct memb *m, memb_addr_fn *fn, void *ctx);

const char *memb_state_name(enum memb_state s);

/* --- the namespace log (nslog.c) ----------------------------------------- */

/*
 * The group's namespace changes are entries of one replicated log, run by
 * the group's own daemons with canonical's C Raft (libraft, raft_uv for
 * its disk log and its TCP links, with our authenticated handshake in
 * front of raft's).  Entries are opaque here; the state machine (@fsm)
 * applies them, in log order, on every node.  nslog.c's head comment has
 * the design: raft ids, first start and replacement, what survives what.
 */
struct nslog;

#define NSLOG_ENTRY_MAX (1u << 20)	/* bytes of one entry */
/*
 * Entries between two snapshots of the group's log (half of them kept
 * after one, for followers a little behind).  A snapshot is taken on
 * raft's loop thread, which waits meanwhile: 2 ms for 4700 inodes
 * (test_nssnap), so some 50 ms for 100000 files once per 8192 entries
 * (a few thousand files made, sealed and protected).  The log's disk
 * stays under 30 MB (raft_uv's segments and two snapshots).
 */
#define GRP_SNAPSHOT_EVERY 8192

struct nslog_fsm {
	void *ctx;
	/*
	 * Apply entry @index (on every node, in order, exactly once per
	 * state).  The result goes back to the proposer's nslog_submit().
	 * Runs on the nslog's loop thread with no lock held; it must not
	 * call nslog_submit() or nslog_barrier() (it would wait for itself).
	 */
	int (*apply)(void *ctx, uint64_t index, const void *buf, size_t len);
	/* The whole state, serialised into a malloc()ed buffer. */
	int (*snapshot)(void *ctx, void **buf, size_t *len);
	/*
	 * Replace the whole state with a snapshot's, that of the entries up
	 * to @index (0 when a snapshot of an older format does not say).
	 */
	int (*restore)(void *ctx, uint64_t index, const void *buf,
		       size_t len);
};

#define NSLOG_ADDR_MAX 128	/* bytes of a "host:port", its NUL included */

struct nslog_opts {
	int self;
	int nodes;
	uint64_t incarnation;	/* nonzero, new at every start of the daemon */
	/*
	 * [nodes] where each node's raft listens; NULL for a node whose
	 * address is not known yet (a registry group), which
	 * nslog_set_addr() gives later.  addrs[self] may be NULL when
	 * listen is given.
	 */
	const char *const *addrs;
	const char *listen;	/* where this node's raft binds; NULL:
				 * addrs[self] (a wildcard such as 0.0.0.0) */
	const char *dir;	/* this node's raft data dir (created) */
	const struct grp_secret *secret;
	const char *group;
	struct peer_xport *x;	/* proposals forwarded to the leader, joins */
	int election_ms;	/* 0: 1000 */
	int heartbeat_ms;	/* 0: 100; less than election_ms */
	unsigned snapshot_every; /* entries between snapshots (0: default) */
};

struct nslog_status {
	uint64_t term;
	uint64_t last_index;
	uint64_t commit_index;
	uint64_t applied_index;
	int leader;		/* node id, -1 when none is known */
	bool is_leader;
	int voters;		/* members with a vote in the configuration */
	uint64_t raft_id;	/* this node's raft server id, 0 before start */
	bool self_voter;	/* this node votes in its configuration */
	uint64_t auth_failed;	/* raft links refused: secret, group, target */
	uint64_t bad_handshakes; /* raft links malformed, slow, over limits */
	int addrs_unknown;	/* other nodes whose raft address is not
				 * known yet (nslog_set_addr) */
};

/*
 * Registers the PEER_T_NSLOG_* range on o->x: call before peer_start().
 * Copies everything in @o and @fsm.  0 or -errno (-EINVAL, with a logged
 * reason, for bad options or an address that does not resolve).
 */
int nslog_new(const struct nslog_opts *o, const struct nslog_fsm *fsm,
	      struct nslog **out);
/*
 * Check o->dir without starting anything: make it (mode 0700) when it is
 * missing, lock it (its .reftfs-lock flock()ed, held until nslog_free(),
 * or by the kernel until the process dies), and refuse (-EINVAL, with a
 * logged reason) a dir whose nslog.state names another group, node or
 * group size, or that holds a raft log of unknown origin, or whose raft
 * files are gone.  -EBUSY at once, never waiting, when another nslog (of
 * any process) holds the dir: logged with the holder's pid where it can
 * be told.  The daemon calls it before it mounts, so that a wrong or busy
 * --state-dir stops it there; nslog_start() checks the same again.  0 or
 * -errno.
 */
int nslog_check(struct nslog *l);
/*
 * Start the loop thread (after peer_start()).  Returns at once: joining
 * or founding the group goes on in the background (see nslog.c).  0 or
 * -errno (the data dir cannot be made, is locked by another nslog,
 * -EBUSY, or holds another group's state).  Takes the dir's lock when
 * nslog_check() has not.
 */
int nslog_start(struct nslog *l);
/*
 * Stop raft and every thread of this nslog; submits and barriers still
 * waiting fail -ESHUTDOWN.  No fsm callback runs after it returns.
 */
void nslog_stop(struct nslog *l);
/*
 * Free @l, letting go of its dir's lock.  A transport cannot unregister a
 * module, so o->x must be stopped (peer_stop) before this; NULL is a
 * no-op.
 */
void nslog_free(struct nslog *l);

/*
 * Append @buf to the log (forwarded to the leader when this node is not
 * it) and wait until it is committed and applied on this node, at most
 * @timeout_ms.  0 with *result set to apply()'s result; -ETIMEDOUT: the
 * entry may still commit (and then is applied once, everywhere, but its
 * result is lost); -ENOTCONN when it was never handed to a leader (none
 * could be reached, or too many submits were already waiting here): it
 * never commits; -EMSGSIZE over NSLOG_ENTRY_MAX; -ESHUTDOWN once
 * nslog_stop() began.  Blocks: never with an engine lock held.  A
 * follower's submit returns about one round trip after the leader's
 * commit, and every node applies the entry about as soon: the leader
 * tells the followers each new commit index at once ("Commit push" in
 * nslog.c), not at its next heartbeat.
 */
int nslog_submit(struct nslog *l, const void *buf, size_t len,
		 int timeout_ms, int *result);

/*
 * Wait until this node has applied every entry committed group-wide when
 * the call was made (a read barrier through the leader).  0 or -errno.
 */
int nslog_barrier(struct nslog *l, int timeout_ms);

void nslog_get_status(struct nslog *l, struct nslog_status *out);

/*
 * @node's raft now listens at @addr ("host:port", resolved here, so it
 * may block on a name lookup): its first address, or a new one.  Raft
 * links to @node are made there from now on, and those made to its old
 * address are closed (whoever is there now is not that node).  Any
 * thread, any time between nslog_new() and nslog_free(), before or after
 * nslog_start(); never with an engine lock held.  0 (also when @addr is
 * the one known), -EINVAL for @node out of range or this node, or an
 * address that is not host:port or does not resolve, -ENAMETOOLONG.
 *
 * Raft never sees these addresses: its configuration names each raft id
 * by a label of its own ("raft-ID"), so a node that moves needs no
 * configuration change, and a replacement at an address another id once
 * used is still added (nslog.c, "Addresses").
 */
int nslog_set_addr(struct nslog *l, int node, const char *addr);

/*
 * Forced recovery of a log whose majority is lost for good (nslog.c,
 * "Forced recovery"): nodes @gone[0..@ngone) are dead for good, @up[n]
 * says whether node n is up now.  Refused while a majority of the voters
 * lives, while a named node is up, while a voter is neither named nor up,
 * or when another survivor's log is further along (run it there).  Else
 * raft restarts here with this node as its only voter (raft_recover), the
 * named nodes' raft ids are retired (a generation each), and every other
 * survivor is told to join again under a new id.  0 with what was done in
 * @msg, or -errno with why not.  Any thread but the loop's; sleeps.
 */
int nslog_force_remove(struct nslog *l, const int *gone, int ngone,
		       const bool *up, char *msg, size_t len);

/* --- the group as the engine's group modules see it (group.c) ---------- */

/*
 * The engine's modules that build on the group (engine/gns.c) use the
 * parts of a struct grp directly; fs/ sees only group.h.
 */
struct grp;
struct peer_xport *grp_xport(struct grp *g);
struct memb *grp_memb(struct grp *g);
/* The namespace log; NULL in a group that has none. */
struct nslog *grp_log(struct grp *g);
int grp_self(const struct grp *g);
int grp_nodes(const struct grp *g);	/* data nodes: ids 0 to N - 1 */
int grp_members(const struct grp *g);	/* and witnesses after them */
uint64_t grp_incarnation(const struct grp *g);
unsigned grp_dead_after_ms(const struct grp *g);
struct ers_scheme;
/* --protect: 0 for none, 1 with the scheme in @s. */
int grp_protect(const struct grp *g, struct ers_scheme *s);
/* --protect-bw in bytes/s; 0: unlimited. */
uint64_t grp_protect_bw(const struct grp *g);
/* --codec: an enum ers_backend_kind (AUTO without the option). */
int grp_codec(const struct grp *g);
/*
 * The state machine the namespace log applies its entries to (copied);
 * before grp_start().  0 or -EBUSY.
 */
int grp_set_fsm(struct grp *g, const struct nslog_fsm *fsm);

#endif /* RFT_GROUP_I_H */
