/*
 * peer_tcp.c - the TCP transport of the group layer (group_i.h).
 *
 * Two TCP connections per pair of nodes, one per direction.  Everything
 * this node sends to node N (requests and replies alike) goes on the one
 * connection this node made to N ("outgoing", made on demand by send());
 * everything it receives from N arrives on the connection N made to it
 * ("incoming", accepted here).  So there is no tie-breaking between two
 * nodes that connect to each other at once, and a connection only ever
 * carries data one way after its handshake.
 *
 *   node A                                   node B
 *   send() --- A's outgoing == B's incoming --> B's receive thread
 *   A's receive thread <-- B's outgoing == A's incoming --- send()
 *
 * Threads:
 *   - callers of send() write straight from their buffers (writev of
 *     header, meta, bulk; no copy), one at a time per peer (the peer's
 *     "slot"), and make the connection and its handshake when there is
 *     none;
 *   - one receive thread per incoming connection: the server side of the
 *     handshake, then frames, read straight into the buffer bulk_dest
 *     gives (CRC32C computed while the bytes are hot);
 *   - one monitor thread: accepts (and closes connections past
 *     TCP_HS_MAX handshakes at a time), watches the outgoing connections
 *     for EOF, joins finished receive threads, closes retired sockets, and
 *     makes every link callback (peer_base_link), so that no callback is
 *     ever made on a caller's thread, with a caller's lock held.
 *
 * "Link up" for node N means this node's outgoing connection to N is
 * authenticated; "down" when it breaks.  The brief proposed also dropping
 * the outgoing connection when the incoming one from N ends.  Not done:
 * a peer_drop() on one side would then bounce between the two nodes for
 * as long as both keep sending (A drops A->B, B sees EOF and drops B->A,
 * A sees EOF and drops the A->B it has just made again, ...).  Instead
 * the monitor polls every outgoing connection: after WELCOME a server
 * never sends on it, so anything readable there is the peer closing it
 * (or a protocol violation), seen at once, on the connection concerned.
 * A peer that restarts (new incarnation) closes its sockets, so our link
 * goes down and the next send makes a new one.
 *
 * A second authenticated incoming connection claiming node N replaces
 * the first: only a holder of the secret gets that far, and a peer only
 * connects again once it has given up its old connection (or restarted).
 * With the same incarnation, the new connection's first frame waits for
 * the old connection to drain (at most idle_ms, then it is shut), so
 * frames from one incarnation are delivered in the order they were sent;
 * with another incarnation the old connection is shut at once.
 *
 * Locks: t->lock (short; never held across I/O or a callback) protects
 * the tables below; the slot of a peer (busy) is held across a whole send.
 * An outgoing socket is closed only by the monitor (or stop()), after it
 * has been retired from its peer, so no thread ever polls or writes a
 * descriptor number that has been reused.  An incoming socket is closed
 * after its thread has been joined.
 *
 * Drops that cannot be charged to a node (before a valid HELLO names one)
 * are counted under this node's own id: peer_stats(x, x->self, ...).
 */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "engine.h"
#include "erasure.h"
#include "group_i.h"

#define TCP_ADDR_MAX 256	/* "host:port" */
#define TCP_HS_MAX 8		/* incoming connections in handshake at once */
#define TCP_KEEP_BUF (1u << 20) /* receive buffer kept between frames */
#define TCP_BACKLOG 64
/*
 * Socket buffers: 0 leaves them to the kernel's autotuning, which
 * measured as fast as fixed sizes on loopback (tests/bench/peer_bench.c;
 * setting them turns autotuning off).
 */
#define TCP_SOCKBUF 0

/* A connection this node made to a peer (the only way it sends). */
struct tcp_out {
	struct tcp_out *next;	/* t->graveyard, protected by t->lock */
	int fd;
	uint64_t gen;		/* which link this is, for the callbacks */
	uint64_t inc;		/* the peer's incarnation */
	uint64_t seq;		/* last seq sent: only the slot's holder */
	bool dead;		/* shut down; protected by t->lock */
};

struct tcp_peer {
	char addr[TCP_ADDR_MAX]; /* "" while unknown; protected by t->lock */
	/*
	 * Protected by t->lock; replaced only by the slot's holder, or by
	 * the monitor while nobody holds the slot.
	 */
	struct tcp_out *conn;
	bool busy;		/* the slot: protected by t->lock */
	int pending_fd;		/* being connected, -1; protected by t->lock */
	uint64_t dead_gen;	/* newest link that died; t->lock */
	/* What the modules were last told: the monitor thread only. */
	bool ann_up;
	uint64_t ann_gen, ann_inc;
	uint64_t ann_dead;	/* calls failed up to this link */
};

/* A connection a peer made to this node, with its receive thread. */
struct tcp_in {
	struct tcp_in *next;	/* t->ins, protected by t->lock */
	struct peer_tcp *t;
	pthread_t thread;
	int fd;
	int node;		/* -1 until authenticated */
	uint64_t inc;
	bool done;		/* thread finished: protected by t->lock */
	int waiters;		/* connections replacing it; t->lock */
	int64_t accepted_ms;
	uint64_t rx_seq;	/* last seq received */
	uint8_t *meta;		/* grown up to PEER_META_MAX */
	uint32_t meta_cap;
	uint8_t *buf;		/* bulk nobody gave a buffer for */
	size_t buf_cap;
};

struct peer_tcp {
	struct peer_xport x;	/* first: peer.c's part */
	struct grp_secret secret;
	char group[GRP_GROUP_MAX + 1];
	size_t group_len;
	struct grp_hs_cfg hs_cfg; /* the handshake's view of the above */
	struct grp_hs_log hs_log;
	char listen[TCP_ADDR_MAX];
	int handshake_ms, idle_ms;
	int lfd, efd;
	pthread_t monitor;
	bool monitor_running;

	pthread_mutex_t lock;
	pthread_cond_t cond;	/* slots, drained connections */
	bool stopping;		/* protected by lock */
	struct tcp_peer *peer;	/* [nodes] */
	struct tcp_in *ins;	/* every incoming connection; protected by
				 * lock, changed only by the monitor */
	struct tcp_in **in_by_node; /* [nodes] the current authenticated
				     * one; protected by lock */
	struct tcp_out *graveyard; /* retired, not closed yet; lock */
	int hs_count;		/* incoming in handshake; protected by lock */
	uint64_t next_gen;	/* protected by lock */

	_Atomic int64_t log_window_ms;
	_Atomic int log_count;
};

static const struct peer_xport_ops tcp_ops;

/* --- small helpers -------------------------------------------------------- */

/*
 * At most 20 log lines a second per transport: a flood of bad frames
 * must not become a flood of log lines (the counters have the numbers).
 */
static bool log_ok(struct peer_tcp *t)
{
	int64_t now = rft_now_ms(), w = atomic_load(&t->log_window_ms);

	if (now - w >= 1000 &&
	    atomic_compare_exchange_strong(&t->log_window_ms, &w, now))
		atomic_store(&t->log_count, 0);
	return atomic_fetch_add(&t->log_count, 1) < 20;
}

static void wake_monitor(struct peer_tcp *t)
{
	uint64_t one = 1;

	/* A full counter already wakes it: nothing to do on EAGAIN. */
	if (write(t->efd, &one, sizeof(one)) < 0) {
	}
}

/* Set t->cond's clock and the deadline arithmetic for timed waits. */
/*
 * Wait until @fd is ready for @events or @deadline (CLOCK_MONOTONIC ms;
 * -1: no deadline).  0 (ready, or an error the next read/write reports),
 * -ETIMEDOUT, or -errno.
 */
static int wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd p = { .fd = fd, .events = events };
	int n, ms;

	for (;;) {
		ms = -1;
		if (deadline >= 0) {
			int64_t left = deadline - rft_now_ms();

			if (left <= 0)
				return -ETIMEDOUT;
			ms = left > INT_MAX ? INT_MAX : (int)left;
		}
		n = poll(&p, 1, ms);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/*
 * Read exactly @len bytes from non-blocking @fd by @deadline, folding
 * them into *@crc when it is given (while they are in the cache).
 * 0, -ECONNRESET at EOF, -ETIMEDOUT, -errno.
 */
static int read_full(int fd, void *buf, size_t len, int64_t deadline,
		     uint32_t *crc)
{
	uint8_t *p = buf;
	ssize_t n;
	int rc;

	while (len > 0) {
		n = read(fd, p, len);
		if (n > 0) {
			if (crc)
				*crc = ers_crc32c(*crc, p, (size_t)n);
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		rc = wait_fd(fd, POLLIN, deadline);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/*
 * Wait, without a deadline, for at least one byte and read up to @len.
 * The count, 0 at EOF, or -errno.
 */
static ssize_t read_some(int fd, void *buf, size_t len)
{
	ssize_t n;
	int rc;

	for (;;) {
		n = read(fd, buf, len);
		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		rc = wait_fd(fd, POLLIN, -1);
		if (rc < 0)
			return rc;
	}
}

/*
 * Write @iov (modified) to non-blocking @fd by @deadline.  *@sent counts
 * the bytes written, so the caller knows whether the stream is still
 * framed after a failure.  0, -ETIMEDOUT, -errno.
 */
static int write_iov(int fd, struct iovec *iov, int cnt, int64_t deadline,
		     size_t *sent)
{
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)cnt };
	ssize_t n;
	int rc;

	*sent = 0;
	while (msg.msg_iovlen > 0) {
		/* MSG_NOSIGNAL: a closed peer is an error here, not SIGPIPE. */
		n = sendmsg(fd, &msg, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				return -errno;
			rc = wait_fd(fd, POLLOUT, deadline);
			if (rc < 0)
				return rc;
			continue;
		}
		*sent += (size_t)n;
		while (msg.msg_iovlen > 0 &&
		       (size_t)n >= msg.msg_iov->iov_len) {
			n -= (ssize_t)msg.msg_iov->iov_len;
			msg.msg_iov++;
			msg.msg_iovlen--;
		}
		if (msg.msg_iovlen > 0) {
			struct iovec *v = msg.msg_iov;

			v->iov_base = (uint8_t *)v->iov_base + n;
			v->iov_len -= (size_t)n;
		}
	}
	return 0;
}

static void sock_opts(int fd)
{
	int one = 1;

	/* Small frames (heartbeats, replies) must not wait for Nagle. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (TCP_SOCKBUF > 0) {
		int b = TCP_SOCKBUF;

		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
	}
}

/*
 * Split "host:port" or "[v6]:port" into @host and @port.  An empty host
 * ("":port) is allowed only when @empty_ok (listening on every address).
 * 0 or -EINVAL.
 */
static int split_addr(const char *addr, bool empty_ok, char *host,
		      size_t hcap, char *port, size_t pcap)
{
	const char *colon = strrchr(addr, ':');
	const char *h = addr;
	size_t hlen, plen, i;
	long pv;

	if (!colon)
		return -EINVAL;
	hlen = (size_t)(colon - addr);
	if (hlen > 0 && addr[0] == '[') {
		if (hlen < 2 || addr[hlen - 1] != ']')
			return -EINVAL;
		h = addr + 1;
		hlen -= 2;
	} else if (memchr(addr, ':', hlen)) {
		return -EINVAL; /* an IPv6 address needs its brackets */
	}
	plen = strlen(colon + 1);
	if ((hlen == 0 && !empty_ok) || hlen >= hcap || plen == 0 ||
	    plen > 5 || plen >= pcap)
		return -EINVAL;
	for (i = 0; i < plen; i++)
		if (colon[1 + i] < '0' || colon[1 + i] > '9')
			return -EINVAL;
	pv = strtol(colon + 1, NULL, 10);
	if (pv > 65535)
		return -EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	memcpy(port, colon + 1, plen + 1);
	return 0;
}

/* --- frames -------------------------------------------------------------- */

static void frame_hdr(uint8_t *hb, uint16_t type, uint16_t flags,
		      uint64_t rid, uint64_t seq, const void *meta,
		      uint32_t meta_len, uint32_t bulk_len, uint32_t bulk_crc)
{
	struct wire_hdr h = {
		.version = WIRE_VERSION,
		.type = type,
		.flags = flags,
		.meta_len = meta_len,
		.bulk_len = bulk_len,
		.bulk_crc = bulk_len ? bulk_crc : 0,
		.rid = rid,
		.seq = seq,
		.meta_crc = meta_len ? ers_crc32c(0, meta, meta_len) : 0,
	};

	wire_hdr_encode(&h, hb);
}

/*
 * Run handshake @hs (hs.c) on @fd by @deadline: send what it has, read
 * exactly what it wants.  0 once authenticated, or what failed: hs.c's
 * -EPROTO, -EBADMSG, -EACCES; -ECONNRESET, -EPIPE, -ETIMEDOUT, -errno.
 */
static int hs_run(int fd, struct grp_hs *hs, int64_t deadline)
{
	const uint8_t *out;
	struct iovec iov;
	uint8_t *dst;
	uint32_t n;
	size_t sent;
	int rc = GRP_HS_MORE, wrc;

	for (;;) {
		n = grp_hs_out(hs, &out);
		if (n) {
			iov.iov_base = (void *)out;
			iov.iov_len = n;
			wrc = write_iov(fd, &iov, 1, deadline, &sent);
			if (wrc < 0)
				return wrc;
		}
		if (rc == GRP_HS_DONE)
			return 0;
		n = grp_hs_want(hs, &dst);
		rc = read_full(fd, dst, n, deadline, NULL);
		if (rc == 0)
			rc = grp_hs_feed(hs);
		if (rc < 0)
			return rc;
	}
}

/* Count a failed handshake step against @node: what the error says. */
static void count_fail(struct peer_tcp *t, int node, int rc)
{
	struct peer_counters *c = &t->x.cnt[node];

	if (rc == -EPROTO)
		atomic_fetch_add(&c->bad_frames, 1);
	else if (rc == -EBADMSG)
		atomic_fetch_add(&c->crc_errors, 1);
	else
		atomic_fetch_add(&c->auth_failed, 1);
}

/* --- the client side: connecting and sending ----------------------------- */

/*
 * The client's handshake on connected @fd to @node.  On success *@inc is
 * the peer's incarnation.  0; -EACCES (refused, counted), -EPROTO,
 * -EBADMSG (counted); -ETIMEDOUT (counted only when handshake_ms ran out,
 * not the caller's own time); -errno.
 */
static int cli_handshake(struct peer_tcp *t, int fd, int node,
			 int64_t deadline, uint64_t *inc)
{
	int64_t hs_end = rft_now_ms() + t->handshake_ms;
	int64_t end = deadline < hs_end ? deadline : hs_end;
	struct grp_hs hs;
	int rc;

	rc = grp_hs_client(&hs, &t->hs_cfg, (uint32_t)node, 0);
	if (rc < 0)
		return rc;
	rc = hs_run(fd, &hs, end);
	if (rc == 0) {
		*inc = hs.peer_id;
		return 0;
	}
	if (rc != -ETIMEDOUT || end == hs_end) {
		grp_hs_log(&t->hs_log, &hs, rc);
		/* The server hung up mid-handshake: it refused us. */
		if (rc == -ECONNRESET || rc == -EPIPE)
			rc = -EACCES;
		count_fail(t, node, rc);
	}
	return rc;
}

/*
 * Make an authenticated connection to @node by @deadline.  Called with
 * @node's slot held.  0 and *@out; -ENOTCONN (no address, refused,
 * handshake failed), -ETIMEDOUT, -ESHUTDOWN.
 */
static int out_connect(struct peer_tcp *t, int node, int64_t deadline,
		       struct tcp_out **out)
{
	struct tcp_peer *p = &t->peer[node];
	char addr[TCP_ADDR_MAX], host[TCP_ADDR_MAX], port[8];
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
		.ai_flags = AI_NUMERICSERV,
	};
	struct addrinfo *res = NULL, *ai;
	struct tcp_out *c;
	uint64_t inc = 0;
	int fd = -1, rc, err;
	bool stop;
	socklen_t elen;

	pthread_mutex_lock(&t->lock);
	memcpy(addr, p->addr, sizeof(addr));
	rc = t->stopping ? -ESHUTDOWN : 0;
	pthread_mutex_unlock(&t->lock);
	if (rc < 0)
		return rc;
	if (!addr[0] || split_addr(addr, false, host, sizeof(host), port,
				   sizeof(port)) < 0)
		return -ENOTCONN;
	/* A host name may take a resolver round trip: not bounded here. */
	err = getaddrinfo(host, port, &hints, &res);
	if (err) {
		if (log_ok(t))
			rft_warn("peer %d: cannot resolve %s: %s", node, addr,
				 gai_strerror(err));
		return -ENOTCONN;
	}
	rc = -ENOTCONN;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family,
			    ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			    ai->ai_protocol);
		if (fd < 0) {
			rc = -ENOTCONN;
			continue;
		}
		sock_opts(fd);
		pthread_mutex_lock(&t->lock);
		/* So that stop() can cut a connect or handshake short. */
		stop = t->stopping;
		if (!stop)
			p->pending_fd = fd;
		pthread_mutex_unlock(&t->lock);
		if (stop) {
			close(fd);
			rc = -ESHUTDOWN;
			break;
		}
		rc = 0;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
			rc = errno == EINPROGRESS ? 0 : -errno;
			if (rc == 0)
				rc = wait_fd(fd, POLLOUT, deadline);
			elen = sizeof(err);
			if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR,
						  &err, &elen) < 0)
				rc = -errno;
			else if (rc == 0 && err)
				rc = -err;
		}
		if (rc == 0) {
			rc = cli_handshake(t, fd, node, deadline, &inc);
			if (rc == 0)
				break;
			if (rc != -ETIMEDOUT)
				rc = -ENOTCONN;
		} else if (rc != -ETIMEDOUT) {
			rc = -ENOTCONN;
		}
		pthread_mutex_lock(&t->lock);
		p->pending_fd = -1;
		pthread_mutex_unlock(&t->lock);
		close(fd);
		fd = -1;
		if (rc == -ETIMEDOUT)
			break;
	}
	freeaddrinfo(res);
	if (fd < 0)
		/* handshake_ms ran out, not the caller's time: no link */
		return rc == -ETIMEDOUT && (int64_t)rft_now_ms() < deadline
			   ? -ENOTCONN
			   : rc;

	c = calloc(1, sizeof(*c));
	pthread_mutex_lock(&t->lock);
	p->pending_fd = -1;
	if (!c || t->stopping) {
		rc = c ? -ESHUTDOWN : -ENOMEM;
		pthread_mutex_unlock(&t->lock);
		free(c);
		close(fd);
		return rc == -ENOMEM ? -ENOTCONN : rc;
	}
	c->fd = fd;
	c->inc = inc;
	c->seq = 2; /* HELLO and AUTH */
	c->gen = ++t->next_gen;
	p->conn = c;
	pthread_mutex_unlock(&t->lock);
	/* The monitor watches it from now on and says "link up". */
	wake_monitor(t);
	*out = c;
	return 0;
}

/* Take @c out of service.  Under t->lock; the monitor closes it. */
/* Mark @c dead and shut it (the monitor closes it); t->lock held. */
static void out_kill(struct peer_tcp *t, int node, struct tcp_out *c)
{
	struct tcp_peer *p = &t->peer[node];

	if (c->dead)
		return;
	c->dead = true;
	shutdown(c->fd, SHUT_RDWR);
	if (c->gen > p->dead_gen)
		p->dead_gen = c->gen;
}

static void out_retire(struct peer_tcp *t, int node, struct tcp_out *c)
{
	out_kill(t, node, c);
	if (t->peer[node].conn == c)
		t->peer[node].conn = NULL;
	c->next = t->graveyard;
	t->graveyard = c;
}

/*
 * Write frame @f on @c.  *@partial tells whether some of it went out
 * (then the stream is no longer framed).  0 or -errno.
 */
static int out_write(struct tcp_out *c, const struct peer_frame *f,
		     int64_t deadline, bool *partial)
{
	uint8_t hb[WIRE_HDR_LEN];
	struct iovec iov[3];
	size_t sent = 0;
	int cnt = 0, rc;

	frame_hdr(hb, f->type, f->flags, f->rid, c->seq + 1, f->meta,
		  f->meta_len, f->bulk_len, f->bulk_crc);
	iov[cnt].iov_base = hb;
	iov[cnt++].iov_len = sizeof(hb);
	if (f->meta_len) {
		iov[cnt].iov_base = (void *)f->meta;
		iov[cnt++].iov_len = f->meta_len;
	}
	if (f->bulk_len) {
		iov[cnt].iov_base = (void *)f->bulk;
		iov[cnt++].iov_len = f->bulk_len;
	}
	rc = write_iov(c->fd, iov, cnt, deadline, &sent);
	*partial = sent > 0 && rc < 0;
	if (sent > 0)
		c->seq++;
	return rc;
}

static int tcp_send(struct peer_xport *x, int node, const struct peer_frame *f,
		    int timeout_ms, uint64_t *gen)
{
	struct peer_tcp *t = (struct peer_tcp *)x;
	struct tcp_peer *p = &t->peer[node];
	int64_t deadline = rft_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	struct tcp_out *c;
	struct timespec ts;
	bool fresh, partial;
	int rc = 0, attempt;

	rft_ts_at(&ts, deadline);
	pthread_mutex_lock(&t->lock);
	while (p->busy && !t->stopping && rc == 0)
		if (pthread_cond_timedwait(&t->cond, &t->lock, &ts) ==
		    ETIMEDOUT)
			rc = p->busy ? -ETIMEDOUT : 0;
	if (rc == 0 && t->stopping)
		rc = -ESHUTDOWN;
	if (rc < 0) {
		pthread_mutex_unlock(&t->lock);
		return rc;
	}
	p->busy = true;
	c = p->conn;
	if (c && c->dead) {
		out_retire(t, node, c);
		c = NULL;
	}
	pthread_mutex_unlock(&t->lock);

	for (attempt = 0;; attempt++) {
		fresh = false;
		if (!c) {
			rc = out_connect(t, node, deadline, &c);
			if (rc < 0)
				break;
			fresh = true;
		}
		rc = out_write(c, f, deadline, &partial);
		if (rc == 0)
			*gen = c->gen;
		if (rc == 0 || (rc == -ETIMEDOUT && !partial))
			break; /* sent, or not begun: the stream is intact */
		pthread_mutex_lock(&t->lock);
		out_retire(t, node, c);
		pthread_mutex_unlock(&t->lock);
		wake_monitor(t);
		c = NULL;
		if (rc == -ETIMEDOUT)
			break;
		rc = -ENOTCONN;
		/*
		 * A frame is delivered only whole, so one that broke off was
		 * not: send it once more on a new connection, if the one that
		 * broke was an old one (the peer may have restarted).
		 */
		if (fresh || attempt > 0)
			break;
	}

	pthread_mutex_lock(&t->lock);
	p->busy = false;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
	return rc;
}

/* --- the server side: handshake and receiving ---------------------------- */

/*
 * The server's handshake on incoming @c, by handshake_ms after accept.
 * On success c->node and c->inc are set.  0 or -errno (counted, against
 * this node's own id until a HELLO named a peer).
 */
static int srv_handshake(struct peer_tcp *t, struct tcp_in *c)
{
	struct grp_hs hs;
	int rc;

	rc = grp_hs_server(&hs, &t->hs_cfg);
	if (rc == 0)
		rc = hs_run(c->fd, &hs, c->accepted_ms + t->handshake_ms);
	if (rc < 0) {
		count_fail(t, hs.peer_node >= 0 ? hs.peer_node : t->x.self,
			   rc);
		grp_hs_log(&t->hs_log, &hs, rc);
		return rc;
	}
	c->node = hs.peer_node;
	c->inc = hs.peer_id;
	c->rx_seq = 2;
	return 0;
}

/*
 * Make @c the connection node c->node's frames come on; wait for the one
 * it replaces to drain (same incarnation) or shut it (another one).
 * false when the transport is stopping.
 */
static bool in_take_over(struct peer_tcp *t, struct tcp_in *c)
{
	struct tcp_in *old;
	struct timespec ts;
	bool ok;

	pthread_mutex_lock(&t->lock);
	old = t->in_by_node[c->node];
	t->in_by_node[c->node] = c;
	if (old) {
		old->waiters++;
		if (old->inc != c->inc)
			shutdown(old->fd, SHUT_RDWR);
		rft_ts_at(&ts, rft_now_ms() + t->idle_ms);
		while (!old->done && !t->stopping)
			if (pthread_cond_timedwait(&t->cond, &t->lock, &ts) ==
			    ETIMEDOUT) {
				shutdown(old->fd, SHUT_RDWR);
				rft_ts_at(&ts, rft_now_ms() + 3600 * 1000);
			}
		old->waiters--;
	}
	ok = !t->stopping;
	pthread_mutex_unlock(&t->lock);
	if (old)
		wake_monitor(t); /* it may be joined now */
	return ok;
}

/*
 * Receive frames on authenticated @c until it ends or breaks.  A frame
 * once begun must be whole within idle_ms.
 */
static void in_loop(struct peer_tcp *t, struct tcp_in *c)
{
	struct peer_xport *x = &t->x;
	struct peer_counters *cnt = &x->cnt[c->node];
	uint8_t hb[WIRE_HDR_LEN];
	struct peer_frame f;
	struct wire_hdr h;
	int64_t end;
	void *dst, *cookie;
	uint32_t crc;
	bool stopping;
	ssize_t n;
	int rc;

	for (;;) {
		/* Idle between frames as long as it likes. */
		n = read_some(c->fd, hb, sizeof(hb));
		if (n <= 0)
			return; /* closed, or stop() */
		end = rft_now_ms() + t->idle_ms;
		rc = read_full(c->fd, hb + n, sizeof(hb) - (size_t)n, end,
			       NULL);
		if (rc < 0)
			goto bad;
		rc = wire_hdr_decode(hb, &h);
		if (rc < 0)
			goto bad;
		if (h.seq != c->rx_seq + 1 || h.type < PEER_T_MEMB_FIRST ||
		    h.type > PEER_T_MAX) {
			rc = -EPROTO; /* lost frames, or a handshake again */
			goto bad;
		}
		c->rx_seq = h.seq;
		if (h.meta_len > c->meta_cap) {
			uint8_t *m = realloc(c->meta, h.meta_len);

			if (!m) {
				rc = -ENOMEM;
				goto out;
			}
			c->meta = m;
			c->meta_cap = h.meta_len;
		}
		rc = read_full(c->fd, c->meta, h.meta_len, end, NULL);
		if (rc < 0)
			goto bad;
		if (h.meta_len && ers_crc32c(0, c->meta, h.meta_len) !=
					  h.meta_crc) {
			atomic_fetch_add(&cnt->crc_errors, 1);
			rc = -EBADMSG;
			goto out;
		}
		f = (struct peer_frame){
			.type = h.type,
			.flags = h.flags,
			.rid = h.rid,
			.meta = h.meta_len ? c->meta : NULL,
			.meta_len = h.meta_len,
			.bulk_len = h.bulk_len,
			.bulk_crc = h.bulk_crc,
		};
		cookie = NULL;
		rc = 0;
		if (h.bulk_len) {
			dst = peer_base_bulk_dest(x, c->node, &f, &cookie);
			if (!dst) {
				if (h.bulk_len > c->buf_cap) {
					free(c->buf);
					c->buf_cap = 0;
					c->buf = malloc(h.bulk_len);
					if (!c->buf) {
						rc = -ENOMEM;
						goto out;
					}
					c->buf_cap = h.bulk_len;
				}
				crc = 0;
				rc = read_full(c->fd, c->buf, h.bulk_len, end,
					       &crc);
				f.bulk = c->buf;
			} else {
				crc = 0;
				rc = read_full(c->fd, dst, h.bulk_len, end,
					       &crc);
				f.bulk = dst;
				if (rc < 0) {
					/* Its owner must hear of it. */
					peer_base_deliver(x, c->node, &f,
							  cookie, -ECONNRESET);
					goto bad;
				}
			}
			if (rc < 0)
				goto bad;
			rc = crc == h.bulk_crc ? 0 : -EBADMSG;
		}
		rc = peer_base_deliver(x, c->node, &f, cookie, rc);
		if (rc < 0) {
			rc = -EPROTO;
			goto bad;
		}
		if (c->buf_cap > TCP_KEEP_BUF) {
			free(c->buf);
			c->buf = NULL;
			c->buf_cap = 0;
		}
	}
bad:
	/* Cut off, malformed, too slow, or refused: the stream is lost. */
	pthread_mutex_lock(&t->lock);
	stopping = t->stopping;
	pthread_mutex_unlock(&t->lock);
	if (stopping)
		return; /* cut off by stop(): not the peer's fault */
	atomic_fetch_add(&cnt->bad_frames, 1);
out:
	if (log_ok(t))
		rft_warn("peer %d: closing its connection: %s", c->node,
			 strerror(-rc));
}

static void *in_main(void *arg)
{
	struct tcp_in *c = arg;
	struct peer_tcp *t = c->t;
	int rc;

	rc = srv_handshake(t, c);
	pthread_mutex_lock(&t->lock);
	t->hs_count--;
	pthread_mutex_unlock(&t->lock);
	if (rc == 0 && in_take_over(t, c))
		in_loop(t, c);
	shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_lock(&t->lock);
	if (c->node >= 0 && t->in_by_node[c->node] == c)
		t->in_by_node[c->node] = NULL;
	c->done = true;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
	wake_monitor(t);
	return NULL;
}

static void in_free(struct tcp_in *c)
{
	close(c->fd);
	free(c->meta);
	free(c->buf);
	free(c);
}

/* --- the monitor --------------------------------------------------------- */

static void accept_all(struct peer_tcp *t)
{
	struct tcp_in *c;
	int fd;
	bool full;

	for (;;) {
		fd = accept4(t->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && log_ok(t))
				rft_warn("accept: %s", strerror(errno));
			return;
		}
		pthread_mutex_lock(&t->lock);
		full = t->hs_count >= TCP_HS_MAX || t->stopping;
		pthread_mutex_unlock(&t->lock);
		c = full ? NULL : calloc(1, sizeof(*c));
		if (!c) {
			/* Too many strangers at once: the newest waits out. */
			atomic_fetch_add(&t->x.cnt[t->x.self].auth_failed, 1);
			close(fd);
			continue;
		}
		sock_opts(fd);
		c->t = t;
		c->fd = fd;
		c->node = -1;
		c->accepted_ms = rft_now_ms();
		pthread_mutex_lock(&t->lock);
		t->hs_count++;
		if (pthread_create(&c->thread, NULL, in_main, c) != 0) {
			t->hs_count--;
			pthread_mutex_unlock(&t->lock);
			in_free(c);
			continue;
		}
		c->next = t->ins;
		t->ins = c;
		pthread_mutex_unlock(&t->lock);
	}
}

/* Tell the modules what changed on @node's link since the last time. */
static void announce(struct peer_tcp *t, int node)
{
	struct tcp_peer *p = &t->peer[node];
	struct tcp_out *c;
	uint64_t gen = 0, inc = 0, dead;
	bool up;

	pthread_mutex_lock(&t->lock);
	c = p->conn;
	up = c && !c->dead;
	if (up) {
		gen = c->gen;
		inc = c->inc;
	}
	dead = p->dead_gen;
	pthread_mutex_unlock(&t->lock);
	if (p->ann_up && (!up || gen != p->ann_gen)) {
		p->ann_up = false;
		if (dead < p->ann_gen)
			dead = p->ann_gen;
		peer_base_link(&t->x, node, p->ann_inc, dead, false);
		p->ann_dead = dead;
	}
	/* A link that died before it was announced: its calls fail too. */
	if (dead > p->ann_dead) {
		peer_base_calls_lost(&t->x, node, dead);
		p->ann_dead = dead;
	}
	if (up && !p->ann_up) {
		p->ann_up = true;
		p->ann_gen = gen;
		p->ann_inc = inc;
		peer_base_link(&t->x, node, inc, gen, true);
	}
}

/* Something is readable on outgoing @c: the peer closed it, or broke the
 * protocol (a server never sends after WELCOME). */
static void out_event(struct peer_tcp *t, int node, struct tcp_out *c)
{
	uint8_t b[64];
	ssize_t n = recv(c->fd, b, sizeof(b), MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n > 0)
		atomic_fetch_add(&t->x.cnt[node].bad_frames, 1);
	pthread_mutex_lock(&t->lock);
	out_kill(t, node, c);
	if (!t->peer[node].busy && t->peer[node].conn == c)
		out_retire(t, node, c);
	pthread_mutex_unlock(&t->lock);
}

static void *monitor_main(void *arg)
{
	struct peer_tcp *t = arg;
	struct peer_xport *x = &t->x;
	struct pollfd *pfd;
	struct tcp_out **watch, *dead, *c;
	struct tcp_in *reap, **pp, *in;
	int *wnode, n, i, node;
	uint64_t v;

	pfd = calloc((size_t)x->nodes + 2, sizeof(*pfd));
	watch = calloc((size_t)x->nodes, sizeof(*watch));
	wnode = calloc((size_t)x->nodes, sizeof(*wnode));
	if (!pfd || !watch || !wnode) {
		rft_err("peer transport: out of memory: no monitor");
		goto out;
	}
	for (;;) {
		pthread_mutex_lock(&t->lock);
		if (t->stopping) {
			pthread_mutex_unlock(&t->lock);
			break;
		}
		/* Collect what is finished, and what to watch. */
		reap = NULL;
		for (pp = &t->ins; *pp;) {
			in = *pp;
			if (in->done && in->waiters == 0) {
				*pp = in->next;
				in->next = reap;
				reap = in;
			} else {
				pp = &in->next;
			}
		}
		n = 0;
		pfd[n++] = (struct pollfd){ .fd = t->efd, .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = t->lfd, .events = POLLIN };
		for (node = 0; node < x->nodes; node++) {
			c = t->peer[node].conn;
			if (c && c->dead && !t->peer[node].busy)
				out_retire(t, node, c);
			else if (c && !c->dead) {
				watch[n - 2] = c;
				wnode[n - 2] = node;
				pfd[n++] = (struct pollfd){
					.fd = c->fd,
					.events = POLLIN | POLLRDHUP,
				};
			}
		}
		dead = t->graveyard;
		t->graveyard = NULL;
		pthread_mutex_unlock(&t->lock);

		while (reap) {
			in = reap;
			reap = in->next;
			pthread_join(in->thread, NULL);
			in_free(in);
		}
		while (dead) {
			c = dead;
			dead = c->next;
			close(c->fd);
			free(c);
		}
		for (node = 0; node < x->nodes; node++)
			if (node != x->self)
				announce(t, node);

		if (poll(pfd, (nfds_t)n, -1) < 0) {
			if (errno == EINTR)
				continue;
			rft_err("peer transport: poll: %s", strerror(errno));
			break;
		}
		if (pfd[0].revents && read(t->efd, &v, sizeof(v)) < 0) {
		}
		if (pfd[1].revents)
			accept_all(t);
		for (i = 2; i < n; i++)
			if (pfd[i].revents)
				out_event(t, wnode[i - 2], watch[i - 2]);
	}
out:
	free(pfd);
	free(watch);
	free(wnode);
	return NULL;
}

/* --- the ops -------------------------------------------------------------- */

static int open_listener(struct peer_tcp *t)
{
	char host[TCP_ADDR_MAX], port[8];
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
		.ai_flags = AI_PASSIVE | AI_NUMERICSERV,
	};
	struct addrinfo *res = NULL, *ai;
	int fd, one = 1, rc, err;

	if (split_addr(t->listen, true, host, sizeof(host), port,
		       sizeof(port)) < 0)
		return -EINVAL;
	err = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (err) {
		rft_err("peer transport: cannot resolve %s: %s", t->listen,
			gai_strerror(err));
		return -EINVAL;
	}
	rc = -EADDRNOTAVAIL;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family,
			    ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			    ai->ai_protocol);
		if (fd < 0) {
			rc = -errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (TCP_SOCKBUF > 0) {
			/* Accepted sockets inherit it; set before listen(). */
			int b = TCP_SOCKBUF;

			setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
		}
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    listen(fd, TCP_BACKLOG) == 0) {
			t->lfd = fd;
			rc = 0;
			break;
		}
		rc = -errno;
		close(fd);
	}
	freeaddrinfo(res);
	if (rc < 0)
		rft_err("peer transport: cannot listen on %s: %s", t->listen,
			strerror(-rc));
	return rc;
}

static int tcp_start(struct peer_xport *x)
{
	struct peer_tcp *t = (struct peer_tcp *)x;
	sigset_t all, old;
	int rc;

	/* Bound by peer_tcp_new(); again after a stop. */
	if (t->lfd < 0) {
		rc = open_listener(t);
		if (rc < 0)
			return rc;
	}
	t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (t->efd < 0) {
		rc = -errno;
		goto fail;
	}
	/*
	 * The transport's threads take no signals: the daemon's handling
	 * stays on its own threads.  Receive threads inherit the mask.
	 */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = -pthread_create(&t->monitor, NULL, monitor_main, t);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc < 0)
		goto fail;
	t->monitor_running = true;
	return 0;
fail:
	if (t->efd >= 0)
		close(t->efd);
	close(t->lfd);
	t->efd = t->lfd = -1;
	return rc;
}

static int tcp_set_addr(struct peer_xport *x, int node, const char *addr)
{
	struct peer_tcp *t = (struct peer_tcp *)x;
	char host[TCP_ADDR_MAX], port[8];
	struct tcp_peer *p = &t->peer[node];

	if (strlen(addr) >= TCP_ADDR_MAX ||
	    split_addr(addr, false, host, sizeof(host), port,
		       sizeof(port)) < 0)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	if (strcmp(p->addr, addr) != 0) {
		/* A link to the old address goes to whoever was there. */
		if (p->conn)
			out_kill(t, node, p->conn);
		snprintf(p->addr, sizeof(p->addr), "%s", addr);
	}
	pthread_mutex_unlock(&t->lock);
	if (t->efd >= 0)
		wake_monitor(t);
	return 0;
}

static void tcp_drop(struct peer_xport *x, int node)
{
	struct peer_tcp *t = (struct peer_tcp *)x;
	struct tcp_out *c;

	pthread_mutex_lock(&t->lock);
	c = t->peer[node].conn;
	if (c && !c->dead && !t->stopping) {
		c->dead = true;
		shutdown(c->fd, SHUT_RDWR);
	}
	pthread_mutex_unlock(&t->lock);
	wake_monitor(t);
}

static void tcp_stop(struct peer_xport *x)
{
	struct peer_tcp *t = (struct peer_tcp *)x;
	struct tcp_in *in;
	struct tcp_out *c;
	int node;

	pthread_mutex_lock(&t->lock);
	t->stopping = true;
	for (in = t->ins; in; in = in->next)
		shutdown(in->fd, SHUT_RDWR);
	for (node = 0; node < x->nodes; node++) {
		c = t->peer[node].conn;
		if (c && !c->dead) {
			c->dead = true;
			shutdown(c->fd, SHUT_RDWR);
		}
		if (t->peer[node].pending_fd >= 0)
			shutdown(t->peer[node].pending_fd, SHUT_RDWR);
	}
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);

	if (t->monitor_running) {
		wake_monitor(t);
		pthread_join(t->monitor, NULL);
		t->monitor_running = false;
	}
	/* Senders see their sockets shut and give their slots back. */
	pthread_mutex_lock(&t->lock);
	for (node = 0; node < x->nodes; node++)
		while (t->peer[node].busy)
			pthread_cond_wait(&t->cond, &t->lock);
	for (node = 0; node < x->nodes; node++)
		if (t->peer[node].conn)
			out_retire(t, node, t->peer[node].conn);
	pthread_mutex_unlock(&t->lock);

	/* Only stop() touches these lists now: the monitor is gone. */
	while ((in = t->ins)) {
		t->ins = in->next;
		pthread_join(in->thread, NULL);
		in_free(in);
	}
	while ((c = t->graveyard)) {
		t->graveyard = c->next;
		close(c->fd);
		free(c);
	}
	if (t->lfd >= 0)
		close(t->lfd);
	if (t->efd >= 0)
		close(t->efd);
	t->lfd = t->efd = -1;
	for (node = 0; node < x->nodes; node++)
		atomic_store(&x->cnt[node].up, false);
}

static void tcp_free(struct peer_xport *x)
{
	struct peer_tcp *t = (struct peer_tcp *)x;

	if (t->lfd >= 0 || t->efd >= 0 || t->monitor_running)
		tcp_stop(x);
	free(t->peer);
	free(t->in_by_node);
	pthread_cond_destroy(&t->cond);
	pthread_mutex_destroy(&t->lock);
	peer_base_fini(x);
	OPENSSL_cleanse(&t->secret, sizeof(t->secret));
	free(t);
}

static const struct peer_xport_ops tcp_ops = {
	.start = tcp_start,
	.send = tcp_send,
	.set_addr = tcp_set_addr,
	.drop = tcp_drop,
	.stop = tcp_stop,
	.free = tcp_free,
};

int peer_tcp_new(const struct peer_tcp_opts *o, struct peer_xport **out)
{
	struct peer_tcp *t;
	const char *listen_addr;
	int i, rc;

	*out = NULL;
	if (!o->group || !o->group[0] || strlen(o->group) > GRP_GROUP_MAX ||
	    !o->secret ||
	    o->secret->len < GRP_SECRET_MIN ||
	    o->secret->len > GRP_SECRET_MAX || o->handshake_ms <= 0 ||
	    o->idle_ms <= 0)
		return -EINVAL;
	listen_addr = o->listen;
	if (!listen_addr && o->addrs && o->self >= 0 && o->self < o->nodes)
		listen_addr = o->addrs[o->self];
	if (!listen_addr || strlen(listen_addr) >= TCP_ADDR_MAX)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	rc = peer_base_init(&t->x, &tcp_ops, o->self, o->nodes,
			    o->incarnation);
	if (rc < 0) {
		free(t);
		return rc;
	}
	t->lfd = t->efd = -1;
	t->secret = *o->secret;
	t->group_len = strlen(o->group);
	memcpy(t->group, o->group, t->group_len);
	snprintf(t->listen, sizeof(t->listen), "%s", listen_addr);
	t->hs_cfg = (struct grp_hs_cfg){
		.secret = &t->secret,
		.group = t->group,
		.group_len = t->group_len,
		.link = GRP_HS_PEER,
		.self = (uint32_t)o->self,
		.nodes = (uint32_t)o->nodes,
		.self_id = o->incarnation,
	};
	t->handshake_ms = o->handshake_ms;
	t->idle_ms = o->idle_ms;
	pthread_mutex_init(&t->lock, NULL);
	rft_cond_init(&t->cond);
	t->peer = calloc((size_t)o->nodes, sizeof(*t->peer));
	t->in_by_node = calloc((size_t)o->nodes, sizeof(*t->in_by_node));
	if (!t->peer || !t->in_by_node) {
		rc = -ENOMEM;
		goto fail;
	}
	for (i = 0; i < o->nodes; i++)
		t->peer[i].pending_fd = -1;
	for (i = 0; o->addrs && i < o->nodes; i++) {
		if (i == o->self || !o->addrs[i])
			continue;
		rc = tcp_set_addr(&t->x, i, o->addrs[i]);
		if (rc < 0) {
			rft_err("peer transport: bad address for node %d: %s",
				i, o->addrs[i]);
			goto fail;
		}
	}
	{
		char host[TCP_ADDR_MAX], port[8];

		rc = split_addr(t->listen, true, host, sizeof(host), port,
				sizeof(port));
		if (rc < 0) {
			rft_err("peer transport: bad listen address %s",
				t->listen);
			goto fail;
		}
	}
	/*
	 * Bound now, not at start: a daemon learns that its port is taken
	 * before it mounts (and before it goes to the background).
	 */
	rc = open_listener(t);
	if (rc < 0)
		goto fail;
	*out = &t->x;
	return 0;
fail:
	tcp_free(&t->x);
	return rc;
}

int peer_tcp_port(struct peer_xport *x)
{
	struct peer_tcp *t = (struct peer_tcp *)x;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (!x || x->ops != &tcp_ops)
		return -EINVAL;
	if (t->lfd < 0)
		return -ENOTCONN;
	if (getsockname(t->lfd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return -EAFNOSUPPORT;
}
