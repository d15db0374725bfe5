/*
 * memb.c - membership: heartbeats, the failure detector and this daemon's
 * view of the group (issue 8).
 *
 * Every heartbeat_ms each node sends every peer a heartbeat carrying its
 * own identity and its whole view.  A peer not heard for suspect_ms is
 * SUSPECT, for dead_ms DEAD.  Liveness comes only from heartbeats heard
 * directly; what a heartbeat says about third nodes is used for one thing
 * only: a node learns from it that the sender holds it dead.
 *
 * Heartbeat (frame type PEER_T_MEMB_HB, meta only, little-endian):
 *
 *   0  version   u16  MEMB_HB_VERSION
 *   2  nodes     u16  group size; must equal ours
 *   4  sender    u32  node id; must be the node the link belongs to
 *   8  inc       u64  the sender's incarnation (nonzero)
 *  16  epoch     u64  the sender's view epoch
 *  24  life      u32  how many times the sender learned it was declared
 *                     dead (see "Rejoining" below)
 *  28  flags     u32  HB_F_REBUILDING: the sender's daemon started with
 *                     empty memory and is bringing its node's files back
 *  32  nodes entries of 16 bytes, one per node id, the sender's view:
 *       0  inc    u64  0 while unknown
 *       8  life   u32  that node's life as the sender last heard it
 *      12  state  u8   enum memb_state
 *      13  flags  u8   HB_F_DEMAND: the sender declared this node (this
 *                      incarnation, this life) dead and waits for it to
 *                      rejoin
 *      14  resv   u16  0
 *
 * Anything else (another length, version, size, sender, a flag or state we
 * do not know, bulk, a reply, another type of our range) is refused with
 * -EPROTO: the transport counts it and closes the link.
 *
 * Identity.  Incarnations are opaque (a new one at every daemon start): a
 * heartbeat with another incarnation than the one in the view is a
 * replacement (reported with was_inc), except from the incarnation it
 * replaced, whose late frames are ignored.
 *
 * Rejoining.  A hung daemon that wakes up must never be taken back as a
 * healthy member that kept its state.  So when a node declares a peer
 * DEAD while it hears at least half of the group (itself included, peers
 * heard within suspect_ms), it *demands* a rejoin: its heartbeats mark
 * that peer's entry HB_F_DEMAND with the peer's incarnation and life, and
 * it does not take that peer back while the peer's heartbeats carry the
 * same life.  The peer, on reading a demand for its own incarnation and
 * life, increments its life, reports itself DEAD (node == self) and goes
 * on announcing itself with the new life; that is its rejoin, and the
 * demanding nodes take it back UP.  It reports itself UP again once some
 * peer's heartbeat shows it UP with its new life.  A node that declares
 * peers dead while it hears less than half of the group (the small side
 * of a partition, an isolated or frozen node) demands nothing: the
 * majority need not rejoin because a cut-off node lost sight of it, and
 * such peers come back UP at their next heartbeat.  When both sides hold
 * half (2|2, or 1|1 in a group of 2), both demand and both rejoin.
 *
 * A membership thread that did not run for suspect_ms (the daemon itself
 * was stopped) does not judge its peers on that silence: it gives each one
 * a fresh dead_ms.
 *
 * Threads and locks.  One membership thread sends heartbeats, runs the
 * detector, applies what was heard and calls the change callback (with no
 * lock held).  The transport's receive threads only check a heartbeat and
 * park it in its sender's slot (the latest one wins).  m->lock protects
 * the view, the per-node state and the slots; it is never held across
 * peer_send(), peer_set_addr() or a callback.  The registry thread (see
 * below) takes m->lock only to read and update addresses.
 *
 * The registry (o->registry set): a memcached server, or several, through
 * libmemcached, on a thread of its own so that a dead or black-holed
 * memcached never delays a heartbeat.  Each node stores
 *
 *   key   reftfs/<group>/node/<id>
 *   value "<listen address> <incarnation in decimal>"
 *   TTL   ceil(dead_ms / 1000) s, at least 2 s
 *
 * every heartbeat_ms, and reads every node's key in one multi-get; an
 * address that changed goes to the view, to peer_set_addr() and to the
 * address listener (memb_listen_addrs: the namespace log's raft links),
 * unless the entry is that of an incarnation already replaced.  Before each
 * write it reads its own key: an entry with a larger incarnation (a
 * daemon started later took this node's place, while this one was hung)
 * stops it registering for good, logged once and shown in the view
 * (taken_over_by).  The
 * registry is soft state: liveness still comes only from heartbeats, so
 * losing memcached changes no node's state.  When it fails the thread
 * logs once, keeps the last known addresses, drops its connection and
 * tries again with a doubling backoff (heartbeat_ms .. 1 s); the next
 * success registers the node again and is logged.  Every libmemcached
 * call has a short timeout (REG_TIMEOUT_MS).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libmemcached/memcached.h>

#include "engine.h"
#include "group_i.h"
#include "rft_le.h"

#define PEER_T_MEMB_HB PEER_T_MEMB_FIRST

#define MEMB_HB_VERSION 1
#define HB_HDR_LEN 32
#define HB_ENT_LEN 16
#define HB_F_DEMAND 0x1
#define HB_F_REBUILDING 0x1	/* in the header's flags */
#define HB_MAX_LEN (HB_HDR_LEN + HB_ENT_LEN * GRP_MAX_NODES)

#define ADDR_MAX sizeof(((struct memb_node *)0)->addr)
#define GROUP_MAX 64		/* bytes of a group name */
#define REG_TIMEOUT_MS 200	/* connect, poll, send, receive */
#define REG_BACKOFF_MAX_MS 1000
#define REG_KEY_MAX (sizeof("reftfs//node/") + GROUP_MAX + 12)
#define REG_VAL_MAX (ADDR_MAX + 24)

struct hb_entry {
	uint64_t inc;
	uint32_t life;
	uint8_t state;
	uint8_t flags;
};

/* A decoded heartbeat. */
struct hb {
	int sender;
	uint64_t inc;
	uint64_t epoch;
	uint32_t life;
	uint32_t flags;
	struct hb_entry e[GRP_MAX_NODES];
};

/* What this node keeps per node, beside the view.  Under m->lock. */
struct memb_peer {
	uint32_t life;		/* as last heard */
	bool demand;		/* DEAD and we wait for a higher life */
	uint64_t prev_inc;	/* the incarnation it replaced */
	int backoff;		/* ticks to skip after a failed send ... */
	int skip;		/* ... and how many are left */
	bool fresh;		/* slot holds a heartbeat not yet applied */
	uint64_t arrival;	/* ms, of the slot's heartbeat */
	struct hb slot;
};

struct memb {
	struct peer_xport *x;
	int self, nodes;
	uint64_t inc;
	int hb_ms, suspect_ms, dead_ms;

	pthread_mutex_t lock;
	pthread_cond_t cond;		/* wakes the membership thread */
	pthread_t thread;
	bool thread_made;
	bool stop;			/* protected by lock */

	struct memb_view view;		/* protected by lock */
	uint32_t life;			/* ours; protected by lock */
	struct memb_peer *p;		/* [nodes]; protected by lock */
	memb_change_fn *fn;		/* protected by lock */
	void *fn_ctx;
	memb_addr_fn *addr_fn;		/* protected by lock */
	void *addr_ctx;
	uint64_t last_tick;		/* membership thread only */

	/* Owned by the membership thread. */
	struct memb_view cbview;
	struct hb work;
	uint8_t tx[HB_MAX_LEN];

	_Atomic uint64_t bad_frames;

	/* The registry; the strings are set once in memb_new(). */
	char *registry;			/* NULL: static list only */
	char group[GROUP_MAX + 1];
	char listen[ADDR_MAX];
	int ttl_s;
	pthread_cond_t reg_cond;	/* wakes the registry thread */
	pthread_t reg_thread;
	bool reg_made;
	bool reg_down;			/* registry thread only */
	bool reg_replaced;		/* registry thread only */
	bool reg_once;			/* registry thread only */
	bool reg_bad_logged[GRP_MAX_NODES]; /* registry thread only */
	char reg_keys[GRP_MAX_NODES][REG_KEY_MAX]; /* registry thread only */
};

const char *memb_state_name(enum memb_state s)
{
	switch (s) {
	case MEMB_UNKNOWN:
		return "unknown";
	case MEMB_UP:
		return "up";
	case MEMB_SUSPECT:
		return "suspect";
	case MEMB_DEAD:
		return "dead";
	}
	return "?";
}

/* --- encoding ------------------------------------------------------------ */

/* Our heartbeat into m->tx.  Under lock.  Returns its length. */
static uint32_t hb_encode(struct memb *m)
{
	uint8_t *b = m->tx, *e;
	const struct memb_node *n;
	int i;

	memset(b, 0, HB_HDR_LEN + (size_t)HB_ENT_LEN * (size_t)m->nodes);
	rft_put_le16(b, MEMB_HB_VERSION);
	rft_put_le16(b + 2, (uint16_t)m->nodes);
	rft_put_le32(b + 4, (uint32_t)m->self);
	rft_put_le64(b + 8, m->inc);
	rft_put_le64(b + 16, m->view.epoch);
	rft_put_le32(b + 24, m->life);
	rft_put_le32(b + 28,
		     m->view.node[m->self].rebuilding ? HB_F_REBUILDING : 0);
	for (i = 0; i < m->nodes; i++) {
		n = &m->view.node[i];
		e = b + HB_HDR_LEN + HB_ENT_LEN * i;
		rft_put_le64(e, n->incarnation);
		rft_put_le32(e + 8, i == m->self ? m->life : m->p[i].life);
		e[12] = (uint8_t)n->state;
		e[13] = i != m->self && m->p[i].demand ? HB_F_DEMAND : 0;
	}
	return HB_HDR_LEN + HB_ENT_LEN * (uint32_t)m->nodes;
}

/* Check and decode a heartbeat from @node.  0 or -EPROTO. */
static int hb_decode(const struct memb *m, int node, const struct peer_frame *f,
		     struct hb *hb)
{
	const uint8_t *b = f->meta, *e;
	int i;

	if (f->type != PEER_T_MEMB_HB || f->flags || f->bulk_len ||
	    f->meta_len != HB_HDR_LEN + HB_ENT_LEN * (uint32_t)m->nodes)
		return -EPROTO;
	if (rft_get_le16(b) != MEMB_HB_VERSION ||
	    rft_get_le16(b + 2) != m->nodes ||
	    rft_get_le32(b + 4) != (uint32_t)node ||
	    (rft_get_le32(b + 28) & ~(uint32_t)HB_F_REBUILDING))
		return -EPROTO;
	hb->flags = rft_get_le32(b + 28);
	hb->sender = node;
	hb->inc = rft_get_le64(b + 8);
	hb->epoch = rft_get_le64(b + 16);
	hb->life = rft_get_le32(b + 24);
	if (hb->inc == 0)
		return -EPROTO;
	for (i = 0; i < m->nodes; i++) {
		e = b + HB_HDR_LEN + HB_ENT_LEN * i;
		hb->e[i].inc = rft_get_le64(e);
		hb->e[i].life = rft_get_le32(e + 8);
		hb->e[i].state = e[12];
		hb->e[i].flags = e[13];
		if (e[12] > MEMB_DEAD || (e[13] & ~HB_F_DEMAND) ||
		    rft_get_le16(e + 14))
			return -EPROTO;
	}
	return 0;
}

/* --- receive side (transport threads) ------------------------------------ */

static int memb_deliver(void *ctx, int node, const struct peer_frame *f,
			void *cookie, int bulk_rc)
{
	struct memb *m = ctx;
	struct memb_peer *p;
	struct hb hb;
	uint64_t n;

	(void)cookie;
	if (bulk_rc < 0 || node < 0 || node >= m->nodes || node == m->self ||
	    hb_decode(m, node, f, &hb) < 0) {
		n = atomic_fetch_add(&m->bad_frames, 1) + 1;
		/* Logged at 1, 2, 4, 8, ...: a flood cannot flood the log. */
		if ((n & (n - 1)) == 0)
			rft_warn("membership of %d: refused a frame of type "
				 "%u from node %d (%" PRIu64 " so far)",
				 m->self, f->type, node, n);
		return -EPROTO;
	}
	pthread_mutex_lock(&m->lock);
	p = &m->p[node];
	p->slot.sender = hb.sender;
	p->slot.inc = hb.inc;
	p->slot.epoch = hb.epoch;
	p->slot.life = hb.life;
	p->slot.flags = hb.flags;
	memcpy(p->slot.e, hb.e, sizeof(hb.e[0]) * (size_t)m->nodes);
	p->arrival = rft_now_ms();
	p->fresh = true;
	pthread_cond_signal(&m->cond);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

/* --- the membership thread ----------------------------------------------- */

/*
 * Record that @node went from @was/@was_inc to what the view now says:
 * a new epoch, a log line, and the callback with the lock dropped.  Only
 * the membership thread changes states, so nothing moves meanwhile but
 * the slots.  Under lock (dropped and taken again).
 */
static void changed(struct memb *m, int node, enum memb_state was,
		    uint64_t was_inc, const char *why)
{
	struct memb_node *n = &m->view.node[node];
	memb_change_fn *fn = m->fn;
	void *ctx = m->fn_ctx;

	m->view.epoch++;
	n->since_ms = rft_now_ms();
	if (n->state == MEMB_UP)
		rft_info("membership of %d: node %d %s -> %s, incarnation "
			 "%" PRIx64 ", epoch %" PRIu64 " (%s)",
			 m->self, node, memb_state_name(was),
			 memb_state_name(n->state),
			 n->incarnation, m->view.epoch, why);
	else
		rft_warn("membership of %d: node %d %s -> %s, incarnation "
			 "%" PRIx64 ", epoch %" PRIu64 " (%s)",
			 m->self, node, memb_state_name(was),
			 memb_state_name(n->state),
			 n->incarnation, m->view.epoch, why);
	if (!fn)
		return;
	m->cbview = m->view;
	pthread_mutex_unlock(&m->lock);
	fn(ctx, &m->cbview, node, was, was_inc);
	pthread_mutex_lock(&m->lock);
}

/* Apply heartbeat @hb from its sender, heard at @arrival.  Under lock. */
static void apply_hb(struct memb *m, const struct hb *hb, uint64_t arrival)
{
	int s = hb->sender;
	struct memb_node *n = &m->view.node[s], *me;
	struct memb_peer *p = &m->p[s];
	const struct hb_entry *mine = &hb->e[m->self];
	enum memb_state was = n->state;
	uint64_t was_inc = n->incarnation;
	char why[96];

	if (hb->inc == p->prev_inc)
		return;	/* a late frame of a daemon already replaced */
	n->rebuilding = hb->flags & HB_F_REBUILDING;
	if (n->incarnation != hb->inc) {
		if (n->incarnation) {
			p->prev_inc = n->incarnation;
			snprintf(why, sizeof(why),
				 "replaced: incarnation %" PRIx64 " before",
				 n->incarnation);
		} else {
			snprintf(why, sizeof(why), "first heartbeat");
		}
		n->incarnation = hb->inc;
		n->state = MEMB_UP;
		n->last_heard_ms = arrival;
		p->life = hb->life;
		p->demand = false;
		changed(m, s, was, was_inc, why);
	} else if (n->state == MEMB_DEAD) {
		if (p->demand && hb->life <= p->life)
			goto self; /* not rejoined yet: still dead to us */
		snprintf(why, sizeof(why),
			 p->demand ? "rejoined, life %" PRIu32
				   : "heard again, life %" PRIu32,
			 hb->life);
		n->state = MEMB_UP;
		n->last_heard_ms = arrival;
		p->life = hb->life;
		p->demand = false;
		changed(m, s, was, was_inc, why);
	} else {
		if (arrival > n->last_heard_ms)
			n->last_heard_ms = arrival;
		if (hb->life > p->life)
			p->life = hb->life;
		if (n->state == MEMB_SUSPECT) {
			n->state = MEMB_UP;
			changed(m, s, was, was_inc, "heard again");
		}
	}
self:
	/* What the sender says about us. */
	me = &m->view.node[m->self];
	if (mine->inc != m->inc || mine->life != m->life)
		return;	/* about another daemon, or an older life of ours */
	if (mine->state == MEMB_DEAD && (mine->flags & HB_F_DEMAND)) {
		was = me->state;
		m->life++;
		me->state = MEMB_DEAD;
		snprintf(why, sizeof(why),
			 "node %d declared this daemon dead; rejoining with "
			 "life %" PRIu32, s, m->life);
		changed(m, m->self, was, m->inc, why);
	} else if (mine->state == MEMB_UP && me->state == MEMB_DEAD) {
		me->state = MEMB_UP;
		snprintf(why, sizeof(why), "taken back by node %d", s);
		changed(m, m->self, MEMB_DEAD, m->inc, why);
	}
}

void memb_set_rebuilding(struct memb *m, bool on)
{
	pthread_mutex_lock(&m->lock);
	m->view.node[m->self].rebuilding = on;
	pthread_mutex_unlock(&m->lock);
}

/* Apply every parked heartbeat.  Under lock. */
static void apply_slots(struct memb *m)
{
	uint64_t arrival;
	int i;

	for (i = 0; i < m->nodes; i++) {
		if (!m->p[i].fresh)
			continue;
		m->p[i].fresh = false;
		arrival = m->p[i].arrival;
		m->work.sender = m->p[i].slot.sender;
		m->work.inc = m->p[i].slot.inc;
		m->work.epoch = m->p[i].slot.epoch;
		m->work.life = m->p[i].slot.life;
		m->work.flags = m->p[i].slot.flags;
		memcpy(m->work.e, m->p[i].slot.e,
		       sizeof(m->work.e[0]) * (size_t)m->nodes);
		apply_hb(m, &m->work, arrival);
		if (m->stop)
			return;
	}
}

/* Do we hear at least half of the group (ourselves included)?  Under lock. */
static bool hear_half(const struct memb *m)
{
	int i, heard = 1;

	for (i = 0; i < m->nodes; i++)
		if (i != m->self && m->view.node[i].state == MEMB_UP)
			heard++;
	return 2 * heard >= m->nodes;
}

/* The failure detector.  Under lock. */
static void detect(struct memb *m, uint64_t now)
{
	struct memb_node *n;
	enum memb_state was;
	uint64_t silent;
	char why[64];
	int i;

	if (now - m->last_tick > (uint64_t)m->suspect_ms) {
		/* We did not run: the silence is ours, not theirs. */
		rft_warn("membership of %d: this thread did not run for "
			 "%" PRIu64 " ms; giving every peer a fresh %d ms",
			 m->self, now - m->last_tick, m->dead_ms);
		for (i = 0; i < m->nodes; i++)
			if (i != m->self &&
			    (m->view.node[i].state == MEMB_UP ||
			     m->view.node[i].state == MEMB_SUSPECT))
				m->view.node[i].last_heard_ms = now;
	}
	m->last_tick = now;
	for (i = 0; i < m->nodes && !m->stop; i++) {
		n = &m->view.node[i];
		if (i == m->self ||
		    (n->state != MEMB_UP && n->state != MEMB_SUSPECT))
			continue;
		silent = now - n->last_heard_ms;
		if (silent >= (uint64_t)m->dead_ms) {
			was = n->state;
			m->p[i].demand = hear_half(m);
			n->state = MEMB_DEAD;
			snprintf(why, sizeof(why), "silent %" PRIu64 " ms%s",
				 silent,
				 m->p[i].demand ? "; must rejoin" : "");
			changed(m, i, was, n->incarnation, why);
		} else if (silent >= (uint64_t)m->suspect_ms &&
			   n->state == MEMB_UP) {
			n->state = MEMB_SUSPECT;
			snprintf(why, sizeof(why), "silent %" PRIu64 " ms",
				 silent);
			changed(m, i, MEMB_UP, n->incarnation, why);
		}
	}
}

/*
 * Send our heartbeat to every peer, at most heartbeat_ms in all: peers
 * with a link up first (a send there does not wait), then the others,
 * each given what is left of the round (a link being made may take it
 * all; a black-holed peer then costs one round, not one per peer).  A
 * peer whose send failed is skipped for a few rounds (doubling, at most
 * a quarter of suspect_ms).  The lock is dropped for the sends.  Under
 * lock (dropped and taken again).
 */
static void send_all(struct memb *m)
{
	struct peer_frame f = { .type = PEER_T_MEMB_HB, .meta = m->tx };
	int i, pass, rc, timeout, cap = m->suspect_ms / m->hb_ms / 4;
	bool to[GRP_MAX_NODES], up[GRP_MAX_NODES];
	struct peer_stats st;
	struct memb_peer *p;
	uint64_t end, now;

	f.meta_len = hb_encode(m);
	for (i = 0; i < m->nodes; i++) {
		p = &m->p[i];
		to[i] = i != m->self && p->skip == 0;
		if (i != m->self && p->skip > 0)
			p->skip--;
	}
	pthread_mutex_unlock(&m->lock);
	for (i = 0; i < m->nodes; i++) {
		peer_stats(m->x, i, &st);
		up[i] = st.up;
	}
	end = rft_now_ms() + (uint64_t)m->hb_ms;
	for (pass = 0; pass < 2; pass++) {
		for (i = 0; i < m->nodes; i++) {
			if (!to[i] || up[i] != (pass == 0))
				continue;
			now = rft_now_ms();
			timeout = now < end ? (int)(end - now) : 0;
			rc = peer_send(m->x, i, &f, timeout);
			pthread_mutex_lock(&m->lock);
			p = &m->p[i];
			if (rc < 0) {
				p->backoff = p->backoff ? 2 * p->backoff : 1;
				if (p->backoff > cap)
					p->backoff = cap;
				p->skip = p->backoff;
			} else {
				p->backoff = 0;
			}
			pthread_mutex_unlock(&m->lock);
		}
	}
	pthread_mutex_lock(&m->lock);
}

static void *memb_thread(void *arg)
{
	struct memb *m = arg;
	struct timespec ts;
	uint64_t now, next;

	pthread_mutex_lock(&m->lock);
	m->last_tick = rft_now_ms();
	next = m->last_tick;
	while (!m->stop) {
		apply_slots(m);
		now = rft_now_ms();
		if (!m->stop && now >= next) {
			detect(m, now);
			if (!m->stop)
				send_all(m);
			next += (uint64_t)m->hb_ms;
			if (next <= now)
				next = now + (uint64_t)m->hb_ms;
			continue;
		}
		if (m->stop)
			break;
		ts.tv_sec = (time_t)(next / 1000);
		ts.tv_nsec = (long)(next % 1000) * 1000000L;
		pthread_cond_timedwait(&m->cond, &m->lock, &ts);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* --- the registry -------------------------------------------------------- */

/* Split "host:port" (host may be "[v6]") into @host and @port.  0/-EINVAL. */
static int split_hostport(const char *s, size_t len, char *host, size_t cap,
			  unsigned *port)
{
	const char *colon = NULL, *h = s;
	size_t hlen, i;
	unsigned long v = 0;

	for (i = 0; i < len; i++)
		if (s[i] == ':')
			colon = s + i;
	if (!colon || colon == s || colon + 1 == s + len)
		return -EINVAL;
	hlen = (size_t)(colon - s);
	if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
		h++;
		hlen -= 2;
	}
	if (hlen == 0 || hlen >= cap)
		return -EINVAL;
	for (i = (size_t)(colon - s) + 1; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (unsigned long)(s[i] - '0');
		if (v > 65535)
			return -EINVAL;
	}
	if (v == 0)
		return -EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = 0;
	*port = (unsigned)v;
	return 0;
}

/* Add every server of "host:port[,host:port...]" to @mc (or only check
 * them when @mc is NULL).  0 or -EINVAL. */
static int add_servers(memcached_st *mc, const char *list)
{
	char host[256];
	const char *p = list, *end;
	unsigned port;
	memcached_return_t mrc;
	int n = 0;

	for (;;) {
		end = strchr(p, ',');
		if (!end)
			end = p + strlen(p);
		if (split_hostport(p, (size_t)(end - p), host, sizeof(host),
				   &port) < 0)
			return -EINVAL;
		if (mc) {
			mrc = memcached_server_add(mc, host, (in_port_t)port);
			if (memcached_failed(mrc)) {
				rft_err("registry: cannot add %s:%u: %s", host,
					port, memcached_strerror(mc, mrc));
				return -EINVAL;
			}
		}
		n++;
		if (!*end)
			break;
		p = end + 1;
	}
	return n ? 0 : -EINVAL;
}

/* A client for the registry, every timeout short.  NULL on failure. */
static memcached_st *reg_connect(struct memb *m)
{
	static const struct {
		memcached_behavior_t b;
		uint64_t v;
	} beh[] = {
		{ MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, REG_TIMEOUT_MS },
		{ MEMCACHED_BEHAVIOR_POLL_TIMEOUT, REG_TIMEOUT_MS },
		{ MEMCACHED_BEHAVIOR_SND_TIMEOUT, REG_TIMEOUT_MS * 1000 },
		{ MEMCACHED_BEHAVIOR_RCV_TIMEOUT, REG_TIMEOUT_MS * 1000 },
		{ MEMCACHED_BEHAVIOR_TCP_NODELAY, 1 },
	};
	memcached_return_t mrc;
	memcached_st *mc;
	size_t i;

	mc = memcached_create(NULL);
	if (!mc) {
		rft_err("registry: no memory for a memcached client");
		return NULL;
	}
	for (i = 0; i < sizeof(beh) / sizeof(beh[0]); i++) {
		mrc = memcached_behavior_set(mc, beh[i].b, beh[i].v);
		if (memcached_failed(mrc)) {
			rft_err("registry: memcached behavior %d: %s",
				(int)beh[i].b, memcached_strerror(mc, mrc));
			memcached_free(mc);
			return NULL;
		}
	}
	if (add_servers(mc, m->registry) < 0) {
		memcached_free(mc);
		return NULL;
	}
	return mc;
}

static int reg_key(const struct memb *m, int id, char *buf, size_t cap)
{
	return snprintf(buf, cap, "reftfs/%s/node/%d", m->group, id);
}

/*
 * One registry value, "<addr> <incarnation>", from node @id.  0, or
 * -EINVAL for anything else (logged once per node).
 */
static int reg_parse(struct memb *m, int id, const char *v, size_t len,
		     char *addr, uint64_t *inc)
{
	size_t i, alen;
	uint64_t n = 0;

	for (alen = 0; alen < len && v[alen] != ' '; alen++)
		if ((unsigned char)v[alen] <= ' ' || v[alen] == 0x7f)
			goto bad;
	if (alen == 0 || alen >= ADDR_MAX || alen + 1 >= len)
		goto bad;
	for (i = alen + 1; i < len; i++) {
		if (v[i] < '0' || v[i] > '9' ||
		    n > (UINT64_MAX - (uint64_t)(v[i] - '0')) / 10)
			goto bad;
		n = n * 10 + (uint64_t)(v[i] - '0');
	}
	memcpy(addr, v, alen);
	addr[alen] = 0;
	*inc = n;
	m->reg_bad_logged[id] = false;
	return 0;
bad:
	if (!m->reg_bad_logged[id])
		rft_warn("registry: the entry of node %d is malformed; "
			 "ignored", id);
	m->reg_bad_logged[id] = true;
	return -EINVAL;
}

/*
 * Node @id is at @addr: into the view and the transport, if new.  Not an
 * entry of a daemon already replaced (a hung one that woke up and
 * publishes again would make the address flap).
 */
static void reg_learn(struct memb *m, int id, const char *addr, uint64_t inc)
{
	struct memb_node *n = &m->view.node[id];
	memb_addr_fn *fn;
	void *ctx;
	bool changed;
	int rc;

	pthread_mutex_lock(&m->lock);
	changed = strcmp(n->addr, addr) != 0 && inc != m->p[id].prev_inc;
	if (changed)
		strcpy(n->addr, addr);
	fn = m->addr_fn;
	ctx = m->addr_ctx;
	pthread_mutex_unlock(&m->lock);
	if (!changed)
		return;
	rft_info("registry of %d: node %d is at %s (incarnation %" PRIx64
		 ")", m->self, id, addr, inc);
	rc = peer_set_addr(m->x, id, addr);
	if (rc < 0)
		rft_warn("registry of %d: the transport refused %s for node "
			 "%d: %s", m->self, addr, id, strerror(-rc));
	/* The namespace log's raft links follow (group.c). */
	if (fn)
		fn(ctx, id, addr);
}

/*
 * Has a daemon started after this one taken this node's place?  Its entry
 * holds a larger incarnation (wall-clock nanoseconds at start): a hung
 * daemon that wakes up after its replacement registered must not write
 * its old address over the new one's.  1 when taken over, 0 when not,
 * -EIO.
 */
static int reg_taken_over(struct memb *m, memcached_st *mc)
{
	char key[REG_KEY_MAX], addr[ADDR_MAX];
	memcached_return_t mrc;
	uint32_t flags;
	size_t len;
	uint64_t inc;
	char *v;
	int klen, rc = 0;

	klen = reg_key(m, m->self, key, sizeof(key));
	v = memcached_get(mc, key, (size_t)klen, &len, &flags, &mrc);
	if (!v)
		return mrc == MEMCACHED_NOTFOUND ? 0 : -EIO;
	if (reg_parse(m, m->self, v, len, addr, &inc) == 0 && inc > m->inc) {
		rc = 1;
		if (!m->reg_replaced)
			rft_err("registry: node %d was taken over by a daemon "
				"started later (incarnation %" PRIx64 ", at "
				"%s); this one (incarnation %" PRIx64 ") no "
				"longer registers: stop it",
				m->self, inc, addr, m->inc);
		m->reg_replaced = true;
		pthread_mutex_lock(&m->lock);
		m->view.taken_over_by = inc;
		pthread_mutex_unlock(&m->lock);
	}
	free(v);
	return rc;
}

/* Publish our entry, unless another daemon took our place.  0 or -EIO. */
static int reg_publish(struct memb *m, memcached_st *mc)
{
	char key[REG_KEY_MAX], val[REG_VAL_MAX];
	memcached_return_t mrc;
	int klen, vlen, rc;

	rc = reg_taken_over(m, mc);
	if (rc != 0)
		return rc < 0 ? rc : 0;
	klen = reg_key(m, m->self, key, sizeof(key));
	vlen = snprintf(val, sizeof(val), "%s %" PRIu64, m->listen, m->inc);
	mrc = memcached_set(mc, key, (size_t)klen, val, (size_t)vlen,
			    (time_t)m->ttl_s, 0);
	if (memcached_failed(mrc)) {
		rft_dbg("registry: set %s: %s", key,
			memcached_last_error_message(mc));
		return -EIO;
	}
	return 0;
}

/* Read every other node's entry.  0 or -EIO. */
static int reg_read(struct memb *m, memcached_st *mc)
{
	const char *kp[GRP_MAX_NODES];
	size_t kl[GRP_MAX_NODES];
	char key[REG_KEY_MAX], addr[ADDR_MAX];
	memcached_result_st result, *res;
	memcached_return_t mrc;
	const char *k;
	size_t n = 0, len;
	uint64_t inc;
	int i, id;

	for (i = 0; i < m->nodes; i++) {
		if (i == m->self)
			continue;
		kp[n] = m->reg_keys[i];
		kl[n] = (size_t)reg_key(m, i, m->reg_keys[i],
					sizeof(m->reg_keys[i]));
		n++;
	}
	if (n == 0)
		return 0;
	mrc = memcached_mget(mc, kp, kl, n);
	if (memcached_failed(mrc)) {
		rft_dbg("registry: mget: %s", memcached_last_error_message(mc));
		return -EIO;
	}
	if (!memcached_result_create(mc, &result))
		return -ENOMEM;
	while ((res = memcached_fetch_result(mc, &result, &mrc))) {
		k = memcached_result_key_value(res);
		len = memcached_result_key_length(res);
		for (id = 0; id < m->nodes; id++) {
			if (id == m->self)
				continue;
			i = reg_key(m, id, key, sizeof(key));
			if ((size_t)i == len && memcmp(key, k, len) == 0)
				break;
		}
		if (id == m->nodes)
			continue;	/* not a key we asked for */
		if (reg_parse(m, id, memcached_result_value(res),
			      memcached_result_length(res), addr, &inc) == 0)
			reg_learn(m, id, addr, inc);
	}
	memcached_result_free(&result);
	if (mrc != MEMCACHED_END && mrc != MEMCACHED_NOTFOUND &&
	    memcached_failed(mrc)) {
		rft_dbg("registry: fetch: %s",
			memcached_last_error_message(mc));
		return -EIO;
	}
	return 0;
}

static void *reg_thread(void *arg)
{
	struct memb *m = arg;
	memcached_st *mc = NULL;
	struct timespec ts;
	uint64_t wait, backoff = 0, when;
	int rc;

	pthread_mutex_lock(&m->lock);
	while (!m->stop) {
		pthread_mutex_unlock(&m->lock);
		if (!mc)
			mc = reg_connect(m);
		rc = mc ? reg_publish(m, mc) : -ENOMEM;
		if (rc == 0)
			rc = reg_read(m, mc);
		if (rc < 0) {
			if (!m->reg_down)
				rft_warn("registry %s unreachable (%s): "
					 "keeping the last known addresses, "
					 "retrying",
					 m->registry,
					 mc ? memcached_last_error_message(mc)
					    : "no client");
			m->reg_down = true;
			/* A fresh client next time: no state of a dead
			 * server's connection is kept. */
			if (mc)
				memcached_free(mc);
			mc = NULL;
			backoff = backoff ? 2 * backoff : (uint64_t)m->hb_ms;
			if (backoff > REG_BACKOFF_MAX_MS)
				backoff = REG_BACKOFF_MAX_MS;
			wait = backoff;
		} else {
			/* A daemon taken over said so once, and no more. */
			if (!m->reg_replaced && !m->reg_once)
				rft_info("registry %s: node %d registered as "
					 "%s", m->registry, m->self, m->listen);
			else if (!m->reg_replaced && m->reg_down)
				rft_info("registry %s is back: node %d "
					 "registered again", m->registry,
					 m->self);
			m->reg_down = false;
			m->reg_once = true;
			backoff = 0;
			wait = (uint64_t)m->hb_ms;
		}
		when = rft_now_ms() + wait;
		ts.tv_sec = (time_t)(when / 1000);
		ts.tv_nsec = (long)(when % 1000) * 1000000L;
		pthread_mutex_lock(&m->lock);
		while (!m->stop && rft_now_ms() < when)
			pthread_cond_timedwait(&m->reg_cond, &m->lock, &ts);
	}
	pthread_mutex_unlock(&m->lock);
	if (mc)
		memcached_free(mc);
	return NULL;
}

/* Check the registry options.  0 or -EINVAL (logged). */
static int check_registry(const struct memb_opts *o)
{
	size_t i, len;

	if (add_servers(NULL, o->registry) < 0) {
		rft_err("registry: \"%s\" is not host:port[,host:port...]",
			o->registry);
		return -EINVAL;
	}
	len = o->group ? strlen(o->group) : 0;
	if (len == 0 || len > GROUP_MAX) {
		rft_err("registry: a group name of 1 to %d characters is "
			"needed", GROUP_MAX);
		return -EINVAL;
	}
	for (i = 0; i < len; i++) {
		char c = o->group[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-')) {
			rft_err("registry: group name \"%s\": only letters, "
				"digits, '.', '_' and '-'", o->group);
			return -EINVAL;
		}
	}
	len = o->listen_addr ? strlen(o->listen_addr) : 0;
	if (len == 0 || len >= ADDR_MAX) {
		rft_err("registry: a listen address (host:port) is needed");
		return -EINVAL;
	}
	for (i = 0; i < len; i++)
		if ((unsigned char)o->listen_addr[i] <= ' ' ||
		    o->listen_addr[i] == 0x7f) {
			rft_err("registry: listen address \"%s\" has a "
				"space or a control character",
				o->listen_addr);
			return -EINVAL;
		}
	return 0;
}

/* --- life cycle ---------------------------------------------------------- */

static int check_opts(const struct memb_opts *o, const struct peer_xport *x)
{
	if (o->nodes < 1 || o->nodes > GRP_MAX_NODES || o->self < 0 ||
	    o->self >= o->nodes) {
		rft_err("membership: node %d of %d is out of range", o->self,
			o->nodes);
		return -EINVAL;
	}
	if (x->nodes != o->nodes || x->self != o->self) {
		rft_err("membership: the transport is node %d of %d, not %d "
			"of %d", x->self, x->nodes, o->self, o->nodes);
		return -EINVAL;
	}
	if (o->incarnation == 0) {
		rft_err("membership: the incarnation must not be 0");
		return -EINVAL;
	}
	if (o->heartbeat_ms < 1 || o->suspect_ms <= o->heartbeat_ms ||
	    o->dead_ms <= o->suspect_ms) {
		rft_err("membership: need 0 < heartbeat (%d ms) < suspect "
			"(%d ms) < dead (%d ms)",
			o->heartbeat_ms, o->suspect_ms, o->dead_ms);
		return -EINVAL;
	}
	return 0;
}

int memb_new(const struct memb_opts *o, struct peer_xport *x,
	     struct memb **out)
{
	struct peer_rx rx = { .deliver = memb_deliver };
	struct memb *m;
	uint64_t now = rft_now_ms();
	int i, rc;

	*out = NULL;
	rc = check_opts(o, x);
	if (rc < 0)
		return rc;
	if (o->registry) {
		rc = check_registry(o);
		if (rc < 0)
			return rc;
	}
	if (o->addrs)
		for (i = 0; i < o->nodes; i++)
			if (o->addrs[i] &&
			    strlen(o->addrs[i]) >=
				    sizeof(((struct memb_node *)0)->addr)) {
				rft_err("membership: address of node %d is too "
					"long", i);
				return -EINVAL;
			}
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->p = calloc((size_t)o->nodes, sizeof(*m->p));
	if (!m->p) {
		free(m);
		return -ENOMEM;
	}
	m->x = x;
	m->self = o->self;
	m->nodes = o->nodes;
	m->inc = o->incarnation;
	m->hb_ms = o->heartbeat_ms;
	m->suspect_ms = o->suspect_ms;
	m->dead_ms = o->dead_ms;
	m->view.self = o->self;
	m->view.nodes = o->nodes;
	for (i = 0; i < o->nodes; i++) {
		m->view.node[i].id = i;
		m->view.node[i].since_ms = now;
		if (o->addrs && o->addrs[i])
			strcpy(m->view.node[i].addr, o->addrs[i]);
	}
	m->view.node[o->self].state = MEMB_UP;
	m->view.node[o->self].incarnation = o->incarnation;
	m->view.node[o->self].last_heard_ms = now;
	pthread_mutex_init(&m->lock, NULL);
	rft_cond_init(&m->cond);
	rft_cond_init(&m->reg_cond);
	if (o->registry) {
		m->registry = strdup(o->registry);
		if (!m->registry) {
			memb_free(m);
			return -ENOMEM;
		}
		strcpy(m->group, o->group);
		strcpy(m->listen, o->listen_addr);
		strcpy(m->view.node[o->self].addr, o->listen_addr);
		/* An entry outlives a missed refresh or two, not a death. */
		m->ttl_s = (o->dead_ms + 999) / 1000;
		if (m->ttl_s < 2)
			m->ttl_s = 2;
	}

	rx.ctx = m;
	rc = peer_register(x, PEER_T_MEMB_FIRST, PEER_T_MEMB_LAST, &rx);
	if (rc < 0) {
		rft_err("membership: cannot register with the transport: %s",
			strerror(-rc));
		memb_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

int memb_start(struct memb *m)
{
	int rc;

	pthread_mutex_lock(&m->lock);
	if (m->thread_made) {
		pthread_mutex_unlock(&m->lock);
		return -EBUSY;
	}
	m->stop = false;
	rc = -pthread_create(&m->thread, NULL, memb_thread, m);
	m->thread_made = rc == 0;
	if (rc == 0 && m->registry) {
		rc = -pthread_create(&m->reg_thread, NULL, reg_thread, m);
		m->reg_made = rc == 0;
	}
	pthread_mutex_unlock(&m->lock);
	if (rc < 0)
		memb_stop(m);
	return rc;
}

void memb_stop(struct memb *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	m->stop = true;
	pthread_cond_broadcast(&m->cond);
	pthread_cond_broadcast(&m->reg_cond);
	pthread_mutex_unlock(&m->lock);
	if (m->thread_made) {
		pthread_join(m->thread, NULL);
		m->thread_made = false;
	}
	if (m->reg_made) {
		pthread_join(m->reg_thread, NULL);
		m->reg_made = false;
	}
}

void memb_free(struct memb *m)
{
	if (!m)
		return;
	memb_stop(m);
	pthread_cond_destroy(&m->reg_cond);
	pthread_cond_destroy(&m->cond);
	pthread_mutex_destroy(&m->lock);
	free(m->registry);
	free(m->p);
	free(m);
}

void memb_get_view(struct memb *m, struct memb_view *out)
{
	pthread_mutex_lock(&m->lock);
	*out = m->view;
	pthread_mutex_unlock(&m->lock);
}

int memb_listen(struct memb *m, memb_change_fn *fn, void *ctx)
{
	pthread_mutex_lock(&m->lock);
	m->fn = fn;
	m->fn_ctx = ctx;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

int memb_listen_addrs(struct memb *m, memb_addr_fn *fn, void *ctx)
{
	pthread_mutex_lock(&m->lock);
	m->addr_fn = fn;
	m->addr_ctx = ctx;
	pthread_mutex_unlock(&m->lock);
	return 0;
}
