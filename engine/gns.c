/*
 * gns.c - the group's one namespace, as this node runs it.
 *
 * Every node of a group shows the whole group's tree.  A namespace change
 * (create, mkdir, rename, unlink, setattr, and the seal of a file at its
 * last close) is a struct nsop (nsop.c) appended to the group's log
 * (engine/group/nslog.c, on libraft) and applied by every node in log
 * order through the same function a single node uses (ns_apply), so every
 * node ends with the same names, attributes and inode numbers.  File data
 * does not go through the log: a file's owner keeps it, the log carries its
 * size and checksums (SEAL), and other nodes fetch pieces from the nodes
 * that hold them (GNS_T_GET).
 *
 * A change finishes, and the FUSE request that made it is answered, once
 * it has been applied on every live node: a name made on node A is there
 * when node B looks right after, and a file closed on A opens on B with its
 * final size and bytes (close-to-open).  Live means not declared dead by
 * membership; a node that does not confirm within --dead-after is given up
 * on (it is about to be declared dead, and catches up before it serves
 * again).
 *
 *   FUSE worker            submit thread              loop thread (nslog)
 *   eng_call() -> queue -> nslog_submit() ----------> apply: ns_apply(),
 *   (returns ENG_LATER)    ... waits ...              fills the proposer's
 *                          GNS_T_WAIT to peers        outputs (lookup ref,
 *                          done(): FUSE reply         open handle)
 *
 * Frames (docs/protocol.md, "Namespace frames"), meta little-endian:
 *   GNS_T_WAIT  u64 index.  Answered once this node applied @index, or
 *               after GNS_WAIT_MAX_MS: u64 applied index.
 *   GNS_T_GET   u64 ino, u64 gseal, u32 piece, u32 len.  Answered with the
 *               piece's bytes as bulk (bulk_crc its CRC32C) when this node
 *               holds that sealed version's piece whole, else -ESTALE.
 *   GNS_T_VERIFY u64 ino, u64 gseal, u32 flags (GNS_VERIFY_REPAIR), u32
 *               digest of the asker's record of the group's seal.  This
 *               node recomputes the CRC32C of each piece of that seal it
 *               holds in memory (reftfs-admin verify), and compares what
 *               it shows with the group's seal and its record of that
 *               seal with the asker's: u32 checked, u32 bad, u32 first
 *               bad, u32 absent, u64 bytes, u32 dropped, u32 flags
 *               (DIFFERS: its record differs; SYNCED: it shows the seal
 *               again), u32 off (what it shows that differs from the
 *               seal), u32 its digest; -ESTALE (another seal), -EBUSY
 *               (being written), -ENOENT.  With REPAIR from the file's
 *               owner, the bad pieces are dropped here (dropped: how
 *               many), for the owner to send again; with REPAIR from any
 *               node, what is off the seal is given up for it.
 * Requests are served on GNS_SERVERS threads: transport threads only
 * queue them.
 *
 * Locks.  g->lock (a leaf) protects the queues, the pending proposals and
 * the parked waits; it is never held across an engine call, the log or the
 * network.  Applies run on nslog's loop thread and take engine locks the
 * way FUSE calls do; they never wait for the network.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"
#include "erasure.h"
#include "group.h"
#include "group_i.h"
#include "gns_i.h"
#include "rft_wq.h"

enum {
	GNS_T_WAIT = PEER_T_GNS_FIRST,
	GNS_T_GET,
	GNS_T_VERIFY,
	GNS_T_LAST = GNS_T_VERIFY,
};

#define GNS_SUBMITTERS 8	/* namespace changes in flight at once */
#define GNS_SERVERS 4		/* peers' waits and piece reads at once */
#define GNS_LOG_TIMEOUT_MS 10000 /* a change not committed by then: EIO */
#define GNS_WAIT_MAX_MS 10000	/* a peer's wait parked at most this long */
#define GNS_INVAL_WAIT_MS 500	/* ... for the kernel's names at most this */
#define GNS_SEAL_RETRY_MS 1000	/* a seal that did not commit goes again */
#define GNS_SEND_MS 5000	/* answers handed to the transport */
#define GNS_VERIFY_MS 60000	/* a peer's check of one file */
#define GNS_VERIFY_REPAIR 0x1	/* request: repair what is off */
#define GNS_VERIFY_DIFFERS 0x1	/* answer: its record of the seal differs */
#define GNS_VERIFY_SYNCED 0x2	/* answer: it shows the seal again */
#define GNS_TICK_MS 100		/* the ticker's period */
#define GNS_STALE_MIN_MS 250	/* a gap in the ticks at least this long
				   (and half of --dead-after) is a freeze */
#define GNS_SYNC_MS 30000	/* an fsync's data not protected by then:
				   EIO */

/*
 * An fsync under --sync protect (gns_sync), waiting for its file's data
 * (as the fsync found it: @version) to be protected or persisted.  On
 * g->syncs while it waits; an event about its file (EV_PROTECTED,
 * EV_PERSISTED, EV_LOST) takes it off and queues it on the submitters to
 * look again (sync_check_fn), so that no listener finishes a FUSE
 * request under the engine's locks; the ticker fails it at @until_ms.
 * Whoever takes it off the list finishes it, or puts it back.
 */
struct gns_sync {
	struct rft_wq_item w;	/* the submitters' (first: cast from it) */
	struct gns *g;
	struct gns_sync *next;	/* on g->syncs; lock */
	struct eng_call *call;
	struct inode *in;	/* held */
	uint64_t version;
	uint64_t until_ms;
};

/* One of this node's proposals. */
struct gns_req {
	struct rft_wq_item w;	/* the submitters' (first: cast from it) */
	struct gns *g;
	struct gns_req *next;	/* on g->pending or g->retry */
	struct nsop op;		/* tag set when submitted */
	struct eng_call *call;	/* finished from the apply; NULL for a seal
				   nobody waits for */
	struct inode *in;	/* a seal: the file, held (in->holds) */
	struct gns_sync *sync;	/* a seal for an fsync: it waits for the
				   seal's protection once finished */
	/* Set by the apply on this node, under g->lock. */
	bool listed;		/* on g->pending: the apply may find it */
	bool applying;		/* the apply is filling out */
	bool applied;
	int rc;
	struct nsop_out out;
	struct nsop_out reply;	/* has_reply: what the call gets, not out */
	bool has_reply;
	bool built;		/* a seal: op holds it, built (seal_build) */
	uint64_t retry_at_ms;	/* a seal waiting to go again */
};

/* A peer's request, queued for a server thread. */
struct gns_job {
	struct gns_job *next;
	int node;
	struct peer_frame f;	/* meta points at meta[] */
	uint8_t meta[32];
	uint64_t until_ms;	/* a WAIT: answer by then whatever happens */
	uint64_t inval_ms;	/* ... and once applied, by then even if the
				   kernel's names are not all updated */
};

struct gns {
	struct eng *e;
	struct grp *grp;
	struct nslog *log;
	struct peer_xport *x;
	struct memb *memb;
	int self, nodes;	/* nodes: the data nodes */
	int members;		/* and the witnesses: the log's voters */
	uint64_t inc;
	unsigned dead_ms;

	pthread_mutex_t lock;
	pthread_cond_t jobs;	/* servers: a job queued, an apply, stop */
	pthread_cond_t applied_cv; /* an apply finished */
	struct rft_wq *subq;	/* the submitters: requests to submit */
	struct gns_req *retry;	/* seals waiting to go again; lock */
	struct gns_req *pending; /* submitted, apply may fill; lock */
	uint64_t next_tag;	/* lock */
	struct gns_job *j_head, *j_tail; /* peers' requests; lock */
	struct gns_job *waits;	/* parked GNS_T_WAITs; lock */
	struct gns_sync *syncs;	/* fsyncs waiting for protection; lock */
	bool stop;		/* lock */
	_Atomic uint64_t applied; /* last index applied here */

	struct protect *prot;	/* NULL: --protect none */
	bool lost_told;		/* this daemon's LOST is in the log */

	/*
	 * Freshness (gns_fresh): the ticker notes the time every
	 * GNS_TICK_MS.  A gap of stale_ms or more means this daemon did
	 * not run (SIGSTOP, a VM pause, starvation) and may have been
	 * declared dead meanwhile: the group changed names without waiting
	 * for it, so it confirms with the log (a barrier) before it serves
	 * again.  One barrier at a time; the others wait for its result.
	 */
	unsigned stale_ms;
	_Atomic uint64_t tick_ms;
	_Atomic bool stale;
	pthread_cond_t tick_cv;	/* the ticker: stop */
	pthread_cond_t synced;	/* a barrier of gns_fresh ended */
	bool syncing;		/* lock */
	int sync_rc;		/* lock */
	uint64_t sync_gen;	/* lock */

	bool started;
	pthread_t servers[GNS_SERVERS];
	pthread_t ticker;

	/* Counters for reports (struct eng_log_stats). */
	_Atomic uint64_t proposed, failed, gets_served, gets_refused;
	_Atomic uint64_t waits_answered, waits_capped;
};

/* --- copying ops ----------------------------------------------------------- */

/* Deep copy of @src (target, pieces).  0 or -ENOMEM. */
static int op_copy(struct nsop *dst, const struct nsop *src)
{
	*dst = *src;
	dst->target = NULL;
	dst->pieces = NULL;
	if (src->target && !(dst->target = strdup(src->target)))
		return -ENOMEM;
	if (src->npieces) {
		dst->pieces = malloc((size_t)src->npieces * sizeof(*dst->pieces));
		if (!dst->pieces) {
			free(dst->target);
			dst->target = NULL;
			return -ENOMEM;
		}
		memcpy(dst->pieces, src->pieces,
		       (size_t)src->npieces * sizeof(*dst->pieces));
	}
	return 0;
}

static void req_free(struct eng *e, struct gns_req *r)
{
	if (r->in)
		ns_unhold(e, r->in);
	nsop_clear(&r->op);
	free(r);
}

static void finish(struct gns *g, struct gns_req *r, int rc);

static void submit_fn(struct rft_wq_item *w, bool cancel);

static void sync_park(struct gns *g, struct gns_sync *s);
static void sync_done(struct gns *g, struct gns_sync *s, int rc,
		      const char *why);

/*
 * Hand @r to the submitters.  After gns_stop none is left to take it (the
 * last write-back at unmount still tells of what it persisted): it fails
 * here, as the submitters fail what they find queued at the stop.  Queued
 * under g->lock, which gns_stop sets g->stop under before it stops the
 * queue.
 */
static void enqueue(struct gns *g, struct gns_req *r)
{
	r->g = g;
	r->w.fn = submit_fn;
	leaf_lock(&g->lock, ENG_RANK_GNS);
	if (g->stop || rft_wq_queue(g->subq, &r->w, RFT_WQ_HIGH) < 0) {
		leaf_unlock(&g->lock, ENG_RANK_GNS);
		finish(g, r, -ESHUTDOWN);
		req_free(g->e, r);
		return;
	}
	leaf_unlock(&g->lock, ENG_RANK_GNS);
}

/* --- proposing ------------------------------------------------------------ */

static int gns_propose(void *ctx, const struct nsop *op, struct eng_call *c)
{
	struct gns *g = ctx;
	struct gns_req *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	if (op_copy(&r->op, op) < 0) {
		free(r);
		return -ENOMEM;
	}
	r->call = c;
	enqueue(g, r);
	return ENG_LATER;
}

static int gns_seal(void *ctx, struct inode *in, struct eng_call *c)
{
	struct gns *g = ctx;
	struct gns_req *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	nsop_init(&r->op, NSOP_SEAL);
	r->op.ino = eng_inode_ino(in);
	r->call = c;
	eng_hold(g->e, in);
	r->in = in;
	enqueue(g, r);
	return c ? ENG_LATER : 0;
}

/* --- fsync: protected before it returns -------------------------------- */

/* Finish @s with @rc (@why: the reason, logged, when it is an error). */
static void sync_done(struct gns *g, struct gns_sync *s, int rc,
		      const char *why)
{
	char name[PATH_MAX];

	if (rc < 0) {
		eng_inode_name(g->e, s->in, name, sizeof(name));
		rft_warn("fsync of %s: %s; EIO (the data is kept here as it "
			 "is)", name, why);
		rc = -EIO;
	}
	s->call->done(s->call, rc);
	ns_unhold(g->e, s->in);
	free(s);
}

/* Take @s off g->syncs: true when it was there.  g->lock held. */
static bool sync_claim_locked(struct gns *g, struct gns_sync *s)
{
	for (struct gns_sync **pp = &g->syncs; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			return true;
		}
	return false;
}

/*
 * Wait for @s's data to be protected: on g->syncs first, then a look, so
 * that an event between the two finds it.  No lock held.
 */
static void sync_park(struct gns *g, struct gns_sync *s)
{
	bool mine;
	int st;

	leaf_lock(&g->lock, ENG_RANK_GNS);
	if (g->stop) {
		leaf_unlock(&g->lock, ENG_RANK_GNS);
		sync_done(g, s, -EIO, "reftfsd is stopping");
		return;
	}
	s->next = g->syncs;
	g->syncs = s;
	leaf_unlock(&g->lock, ENG_RANK_GNS);
	st = file_sync_state(g->e, s->in, &s->version);
	if (st == FILE_SYNC_WAIT || st == FILE_SYNC_SEAL)
		return;
	leaf_lock(&g->lock, ENG_RANK_GNS);
	mine = sync_claim_locked(g, s);
	leaf_unlock(&g->lock, ENG_RANK_GNS);
	if (mine)
		sync_done(g, s, st, "the file is lost");
}

/* An event about its file took @s off the list: look again. */
static void sync_check_fn(struct rft_wq_item *w, bool cancel)
{
	struct gns_sync *s = (struct gns_sync *)w;

	if (cancel)
		sync_done(s->g, s, -EIO, "reftfsd is stopping");
	else
		sync_park(s->g, s);
}

/* Every fsync waiting on @in looks again (from a listener: leaf locks). */
static void sync_wake(struct gns *g, const struct inode *in)
{
	leaf_lock(&g->lock, ENG_RANK_GNS);
	for (struct gns_sync **pp = &g->syncs; *pp;) {
		struct gns_sync *s = *pp;

		if (s->in == in &&
		    rft_wq_queue(g->subq, &s->w, RFT_WQ_HIGH) == 0)
			*pp = s->next;
		else
			pp = &s->next;
	}
	leaf_unlock(&g->lock, ENG_RANK_GNS);
}

/*
 * fsync of a writer's handle under --sync protect: seal what this node
 * has (as a last close does, the writer kept) unless the group has it,
 * and finish @c once that version is protected or persisted; EIO at
 * GNS_SYNC_MS, or when the seal cannot reach the log, or the file is
 * lost.  ENG_LATER, 0 (nothing to wait for) or -errno.
 */
static int gns_sync(void *ctx, struct inode *in, struct eng_call *c)
{
	struct gns *g = ctx;
	struct gns_sync *s;
	struct gns_req *r;
	uint64_t version = 0;
	int st;

	if (!g->prot)
		return 0; /* --protect none: nothing will protect it */
	st = file_sync_state(g->e, in, &version);
	if (st == FILE_SYNC_DONE)
		return 0;
	if (st < 0) {
		char name[PATH_MAX];

		eng_inode_name(g->e, in, name, sizeof(name));
		rft_warn("fsync of %s: the file is lost; EIO", name);
		return st;
	}
	s = calloc(1, sizeof(*s));
	r = st == FILE_SYNC_SEAL ? calloc(1, sizeof(*r)) : NULL;
	if (!s || (st == FILE_SYNC_SEAL && !r)) {
		free(s);
		free(r);
		return -ENOMEM;
	}
	s->w.fn = sync_check_fn;
	s->g = g;
	s->call = c;
	s->in = in;
	eng_hold(g->e, in);
	s->version = version;
	s->until_ms = rft_now_ms() + GNS_SYNC_MS;
	if (!r) {
		sync_park(g, s);
		return ENG_LATER;
	}
	nsop_init(&r->op, NSOP_SEAL);
	r->op.ino = eng_inode_ino(in);
	eng_hold(g->e, in);
	r->in = in;
	r->sync = s;
	enqueue(g, r);
	return ENG_LATER;
}

/*
 * A file this node sealed at its last writer's close (EV_SEALED); a
 * file's protection, persistence or loss for the fsyncs waiting on it.
 */
static void gns_on_event(struct eng *e, const struct eng_ev *ev, void *ctx)
{
	(void)e;
	if (ev->kind == EV_SEALED && ev->tell)
		gns_seal(ctx, ev->in, NULL);
	else if (ev->kind == EV_PROTECTED || ev->kind == EV_PERSISTED ||
		 ev->kind == EV_LOST)
		sync_wake(ctx, ev->in);
}

static void gns_persisted(void *ctx, struct inode *in, uint64_t gseal)
{
	struct gns *g = ctx;
	struct gns_req *r = calloc(1, sizeof(*r));

	if (!r)
		return; /* the others read it from peers meanwhile */
	nsop_init(&r->op, NSOP_PERSIST);
	r->op.ino = eng_inode_ino(in);
	r->op.gseal = gseal;
	eng_hold(g->e, in);
	r->in = in;
	enqueue(g, r);
}

/*
 * Build the seal of @r->in (file_seal_build), in the scheme its pieces
 * take chunk numbers in (xor, rs: in its stripes).
 */
static int seal_build(struct gns *g, struct gns_req *r)
{
	int rc = file_seal_build(g->e, r->in, &r->op);

	if (rc == 0)
		r->op.flags = protect_seal_code(g->prot);
	return rc;
}

/*
 * Wait until every live peer has applied @index, so that what this node's
 * change did is there wherever the caller looks next.  A peer that does
 * not answer within --dead-after is given up on.
 */
static void wait_visible(struct gns *g, uint64_t index)
{
	struct memb_view v;
	uint8_t meta[8], ans[8];

	memb_get_view(g->memb, &v);
	rft_put_le64(meta, index);
	for (int n = 0; n < g->nodes; n++) {
		struct peer_frame f = { .type = GNS_T_WAIT, .meta = meta,
					.meta_len = sizeof(meta) };
		struct peer_reply rep = { .meta = ans, .meta_cap = sizeof(ans) };
		uint64_t until = rft_now_ms() + g->dead_ms;
		int rc;

		if (n == g->self || (v.node[n].state != MEMB_UP &&
				     v.node[n].state != MEMB_SUSPECT))
			continue;
		/* A peer answers early after GNS_WAIT_MAX_MS: ask again. */
		do {
			rc = peer_call(g->x, n, &f, &rep, (int)g->dead_ms);
		} while (rc == 0 && rep.meta_len == 8 &&
			 rft_get_le64(ans) < index && rft_now_ms() < until);
		if (rc < 0 && rc != -ESHUTDOWN)
			rft_dbg("node %d did not confirm index %llu: %s", n,
				(unsigned long long)index, strerror(-rc));
	}
}

/* Submit @r and wait for its apply here.  Returns the result for the caller. */
static int submit(struct gns *g, struct gns_req *r, uint64_t *index)
{
	void *buf = NULL;
	size_t len = 0;
	int rc, result = 0;

	leaf_lock(&g->lock, ENG_RANK_GNS);
	r->op.tag = ++g->next_tag;
	r->op.node = g->self;
	r->op.inc = g->inc;
	r->listed = true;
	r->next = g->pending;
	g->pending = r;
	leaf_unlock(&g->lock, ENG_RANK_GNS);

	rc = nsop_encode(&r->op, &buf, &len);
	if (rc == 0)
		rc = nslog_submit(g->log, buf, len, GNS_LOG_TIMEOUT_MS, &result);
	free(buf);

	leaf_lock(&g->lock, ENG_RANK_GNS);
	for (struct gns_req **pp = &g->pending; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	r->listed = false;
	/* An apply that found it before it left the list finishes first. */
	while (r->applying)
		pthread_cond_wait(&g->applied_cv, &g->lock);
	leaf_unlock(&g->lock, ENG_RANK_GNS);
	atomic_fetch_add(&g->proposed, 1);
	if (r->applied) {
		*index = r->out.index;
		return r->rc;
	}
	*index = 0;
	if (rc == 0)
		return result;
	atomic_fetch_add(&g->failed, 1);
	rft_warn("namespace change (%s) not in the group's log: %s",
		 nsop_kind_name(r->op.kind), strerror(-rc));
	return rc == -ESHUTDOWN ? -ESHUTDOWN : -EIO;
}

static void finish(struct gns *g, struct gns_req *r, int rc)
{
	struct eng_call *c = r->call;

	/* An fsync's seal: now the wait for its protection. */
	if (r->sync) {
		struct gns_sync *s = r->sync;

		r->sync = NULL;
		if (rc == 0)
			sync_park(g, s);
		else
			sync_done(g, s, -EIO,
				  "its seal did not reach the group's log");
	}

	if (c) {
		if (rc == 0)
			eng_call_take(c, r->has_reply ? &r->reply : &r->out);
		r->call = NULL;
		c->done(c, rc);
	}
}

/*
 * Hand the waiting seals to the submitters: those of inode @ino, or with
 * @ino 0 those due by @now.  Each leaves the list before it is queued:
 * once queued, a submitter may run it and free it at once (reading its
 * next after that was a SIGSEGV in 242-group-hung).  One not taken (the
 * queue stopping) stays.  g->lock held.
 */
static void retry_now(struct gns *g, uint64_t now, uint64_t ino)
{
	for (struct gns_req **pp = &g->retry; *pp;) {
		struct gns_req *r = *pp;

		if (ino ? r->op.kind != NSOP_SEAL || r->op.ino != ino
			: r->retry_at_ms > now) {
			pp = &r->next;
			continue;
		}
		*pp = r->next;
		if (rft_wq_queue(g->subq, &r->w, RFT_WQ_HIGH) < 0) {
			r->next = *pp;
			*pp = r;
			pp = &r->next;
		}
	}
}

/*
 * A seal or a persist record that could not commit goes again later
 * (until it does, or its apply finds it moot).
 */
static void seal_retry(struct gns *g, struct gns_req *r)
{
	leaf_lock(&g->lock, ENG_RANK_GNS);
	r->retry_at_ms = rft_now_ms() + GNS_SEAL_RETRY_MS;
	r->next = g->retry;
	g->retry = r;
	leaf_unlock(&g->lock, ENG_RANK_GNS);
}

/*
 * After this node's truncate of a closed file (SETATTR with a size): the
 * others kept the old seal's pieces (apply_setattr), so seal the result
 * now, and finish the truncate's call once that seal is everywhere, as a
 * last close does.  A file still open for writing here is sealed at its
 * last close.  true when the seal took the call over.
 */
static bool reseal(struct gns *g, struct gns_req *r)
{
	struct inode *in = file_reseal_hold(g->e, r->op.ino);
	struct gns_req *s;

	if (!in)
		return false;
	s = calloc(1, sizeof(*s));
	if (!s) {
		ns_unhold(g->e, in);
		return false;
	}
	nsop_init(&s->op, NSOP_SEAL);
	s->op.ino = r->op.ino;
	s->in = in;
	s->call = r->call;
	s->reply = r->out;
	s->has_reply = true;
	r->call = NULL;
	enqueue(g, s);
	return true;
}

static void run_req(struct gns *g, struct gns_req *r)
{
	uint64_t index = 0;
	int rc = 0;

	if (r->op.kind == NSOP_SEAL) {
		/*
		 * A seal built already goes again as it was built: building
		 * it again would find its version sent (seal_sent is set at
		 * the build) and drop it, though the log never took it.
		 */
		rc = r->built ? file_seal_again(g->e, r->in, &r->op)
			      : seal_build(g, r);
		r->built = r->built || rc == 0;
		if (rc == 1) {
			finish(g, r, 0);
			return req_free(g->e, r);
		}
		/*
		 * Pieces of the version this node's changes were made on
		 * could not be brought in: when another node sealed since,
		 * they never will (its holders took the new one), and the
		 * group's version shows here again.  Else try again later.
		 */
		if (rc < 0 && rc != -EAGAIN && file_revert(g->e, r->in, rc) == 0) {
			finish(g, r, -EIO);
			return req_free(g->e, r);
		}
		if (rc < 0 && !r->retry_at_ms)
			rft_warn("seal of inode %llu: %s; trying again",
				 (unsigned long long)r->op.ino, strerror(-rc));
	}
	if (rc == 0)
		rc = submit(g, r, &index);
	if ((r->op.kind == NSOP_SEAL || r->op.kind == NSOP_PERSIST) &&
	    (rc == -EIO || rc == -EAGAIN)) {
		/* The data is safe here; the others learn of it later. */
		finish(g, r, rc == -EAGAIN ? -EIO : rc);
		return seal_retry(g, r);
	}
	if (index)
		wait_visible(g, index);
	if (rc < 0)
		rft_dbg("%s of inode %llu: %s", nsop_kind_name(r->op.kind),
			(unsigned long long)r->op.ino, strerror(-rc));
	if (r->op.kind == NSOP_SETATTR && (r->op.flags & ENG_SET_SIZE) &&
	    rc == 0 && index && reseal(g, r))
		return req_free(g->e, r); /* the seal finishes the call */
	/* Every live node knows the seal: its copies may go out. */
	if (r->op.kind == NSOP_SEAL && rc == 0 && index)
		protect_file(g->prot, r->in, index);
	finish(g, r, rc);
	req_free(g->e, r);
}

/*
 * A submitter's item (GNS_SUBMITTERS workers): one request, run; at the
 * stop, failed.  A seal that could not commit waits on g->retry, and the
 * ticker queues it again when its time comes.
 */
static void submit_fn(struct rft_wq_item *w, bool cancel)
{
	struct gns_req *r = (struct gns_req *)w;
	struct gns *g = r->g;

	if (cancel) {
		finish(g, r, -ESHUTDOWN);
		req_free(g->e, r);
	} else {
		run_req(g, r);
	}
}

/* Nothing queued or running: drain() looks again. */
static void submitters_idle(void *arg)
{
	struct gns *g = arg;

	leaf_lock(&g->lock, ENG_RANK_GNS);
	pthread_cond_broadcast(&g->applied_cv);
	leaf_unlock(&g->lock, ENG_RANK_GNS);
}

/* --- applying ------------------------------------------------------------- */

/*
 * The log's state machine: apply entry @index on this node.  On the loop
 * thread of nslog; no lock held.
 */
static int fsm_apply(void *ctx, uint64_t index, const void *buf, size_t len)
{
	struct gns *g = ctx;
	struct gns_req *r = NULL;
	struct nsop op;
	int rc;

	rc = nsop_decode(buf, len, &op);
	if (rc < 0) {
		/* Every node refuses the same bytes alike. */
		rft_err("namespace log: entry %llu (%zu bytes) does not decode: "
			"%s",
			(unsigned long long)index, len, strerror(-rc));
		atomic_store(&g->applied, index);
		return rc;
	}
	if (op.node == g->self && op.inc == g->inc) {
		leaf_lock(&g->lock, ENG_RANK_GNS);
		for (r = g->pending; r && r->op.tag != op.tag; r = r->next)
			;
		if (r)
			r->applying = true;
		leaf_unlock(&g->lock, ENG_RANK_GNS);
	}
	if (r)
		memset(&r->out, 0, sizeof(r->out));
	rc = ns_apply(g->e, &op, index, r && r->call ? &r->out : NULL);
	leaf_lock(&g->lock, ENG_RANK_GNS);
	if (r) {
		r->applying = false;
		r->applied = true;
		r->rc = rc;
		r->out.index = index;
	}
	atomic_store(&g->applied, index);
	/* Waiting proposers and parked peers' waits look again. */
	pthread_cond_broadcast(&g->applied_cv);
	if (g->waits)
		pthread_cond_broadcast(&g->jobs);
	/*
	 * Another node's seal of a file whose seal here waits to go again:
	 * it goes now.  A seal whose base this one replaced cannot be built
	 * any more, and its changes give way at once (file_revert), not a
	 * retry later, while reads here meet a base nobody holds.
	 */
	if (op.kind == NSOP_SEAL && !(op.node == g->self && op.inc == g->inc))
		retry_now(g, 0, op.ino);
	leaf_unlock(&g->lock, ENG_RANK_GNS);
	/*
	 * A node back with empty memory gets its copies again; one that
	 * stopped can no longer take its members out of the rows here.
	 */
	if (op.kind == NSOP_LOST && rc == 0 &&
	    !(op.node == g->self && op.inc == g->inc))
		protect_node_lost(g->prot, op.node,
				  op.flags & NSOP_LOST_STOP);
	/* A file sealed or taken over by another node: its old parity goes. */
	if ((op.kind == NSOP_SEAL || op.kind == NSOP_OPEN) &&
	    !(op.node == g->self && op.inc == g->inc))
		protect_changed(g->prot, op.ino);
	if (rc < 0)
		rft_dbg("entry %llu (%s by node %d): %s",
			(unsigned long long)index, nsop_kind_name(op.kind),
			op.node, strerror(-rc));
	nsop_clear(&op);
	return rc;
}

/*
 * The log's snapshots (nslog.c takes one every snapshot_every entries):
 * the namespace as every node derives it from the entries (ns_snap_*).
 * On the loop thread, like the applies: nothing else changes the
 * replicated state meanwhile.
 */
static int fsm_snapshot(void *ctx, void **buf, size_t *len)
{
	struct gns *g = ctx;

	return ns_snap_encode(g->e, buf, len);
}

/* A file another node sealed meanwhile: its old parity goes (fsm_apply). */
static void restored_changed(void *ctx, uint64_t ino)
{
	struct gns *g = ctx;

	protect_changed(g->prot, ino);
}

/*
 * At a start (empty namespace) or on a follower the leader sent its
 * snapshot (its namespace behind).  Another node's LOST in the entries
 * the snapshot stands for sent that node its copies again at its apply
 * (protect_node_lost) on the nodes that were there; a node restoring
 * instead has its own LOST to come, or had none to act on.
 */
static int fsm_restore(void *ctx, uint64_t index, const void *buf,
		       size_t len)
{
	struct gns *g = ctx;
	uint64_t t0 = rft_now_ms();
	int rc;

	if (len == 0)
		return 0; /* a snapshot of nslog's tables only */
	rc = ns_snap_restore(g->e, buf, len, restored_changed, g);
	if (rc == 0) {
		uint64_t n = eng_ns_count(g->e);

		rft_info("namespace: the log's snapshot at entry %llu restored "
			 "(%zu bytes, %llu inodes, %llu ms); the entries after "
			 "it follow",
			 (unsigned long long)index, len, (unsigned long long)n,
			 (unsigned long long)(rft_now_ms() - t0));
		/* Peers' waits for what it stands for are answered. */
		leaf_lock(&g->lock, ENG_RANK_GNS);
		if (index > atomic_load(&g->applied))
			atomic_store(&g->applied, index);
		pthread_cond_broadcast(&g->applied_cv);
		if (g->waits)
			pthread_cond_broadcast(&g->jobs);
		leaf_unlock(&g->lock, ENG_RANK_GNS);
	}
	return rc;
}

/* --- serving peers ------------------------------------------------------- */

static int rx_deliver(void *ctx, int node, const struct peer_frame *f,
		      void *cookie, int bulk_rc)
{
	struct gns *g = ctx;
	struct gns_job *j;
	uint32_t want = f->type == GNS_T_WAIT ? 8 : 24;

	if (f->flags & PEER_F_REPLY)
		return -EPROTO;
	if (f->type < GNS_T_WAIT || f->type > GNS_T_LAST ||
	    f->meta_len != want || f->bulk_len)
		return -EPROTO;
	j = calloc(1, sizeof(*j));
	if (!j)
		return 0; /* the asker times out */
	j->node = node;
	j->f = *f;
	memcpy(j->meta, f->meta, f->meta_len);
	j->f.meta = j->meta;
	j->until_ms = rft_now_ms() + GNS_WAIT_MAX_MS;
	j->inval_ms = rft_now_ms() + GNS_INVAL_WAIT_MS;
	leaf_lock(&g->lock, ENG_RANK_GNS);
	if (g->stop) {
		leaf_unlock(&g->lock, ENG_RANK_GNS);
		free(j);
		return 0;
	}
	if (g->j_tail)
		g->j_tail->next = j;
	else
		g->j_head = j;
	g->j_tail = j;
	pthread_cond_signal(&g->jobs);
	leaf_unlock(&g->lock, ENG_RANK_GNS);
	return 0;
}

static void answer_wait(struct gns *g, struct gns_job *j)
{
	uint8_t meta[8];
	struct peer_frame rep = { .meta = meta, .meta_len = sizeof(meta) };
	uint64_t applied = atomic_load(&g->applied);

	if (applied >= rft_get_le64(j->meta))
		atomic_fetch_add(&g->waits_answered, 1);
	rft_put_le64(meta, applied);
	peer_reply(g->x, j->node, &j->f, &rep, GNS_SEND_MS);
}

/*
 * GNS_T_GET: send piece @idx of the file's sealed version @gseal if this
 * node holds it whole and unchanged, straight from the arena (the chunk
 * pinned while it goes out).
 */
static void serve_get(struct gns *g, struct gns_job *j)
{
	struct store *st = eng_store(g->e);
	uint64_t ino = rft_get_le64(j->meta), gseal = rft_get_le64(j->meta + 8);
	uint32_t idx = rft_get_le32(j->meta + 16),
		 len = rft_get_le32(j->meta + 20);
	uint32_t chunk = RFT_NO_CHUNK, crc = 0, fill = 0;
	struct peer_frame rep = { 0 };
	uint8_t *bounce = NULL;
	int rc;

	rc = file_piece_pin(g->e, ino, gseal, idx, len, &chunk, &crc, &fill);
	if (rc < 0) {
		rft_dbg("GET of piece %u (%u bytes) of inode %llu at seal %llu "
			"from node %d: not here",
			idx, len, (unsigned long long)ino,
			(unsigned long long)gseal, j->node);
		atomic_fetch_add(&g->gets_refused, 1);
		peer_reply_err(g->x, j->node, &j->f, rc, GNS_SEND_MS);
		return;
	}
	rep.bulk = store_ptr(st, chunk);
	if (fill < len) {
		/* Past fill the piece reads as zeros, whatever the chunk has. */
		bounce = malloc(len);
		if (!bounce) {
			store_put(st, chunk);
			peer_reply_err(g->x, j->node, &j->f, -ENOMEM,
				       GNS_SEND_MS);
			return;
		}
		memcpy(bounce, rep.bulk, fill);
		memset(bounce + fill, 0, len - fill);
		rep.bulk = bounce;
	}
	rep.bulk_len = len;
	rep.bulk_crc = crc;
	peer_reply(g->x, j->node, &j->f, &rep, GNS_SEND_MS);
	store_put(st, chunk);
	free(bounce);
	atomic_fetch_add(&g->gets_served, 1);
}

/* GNS_T_VERIFY: check this node's copy of a file where it is. */
static void serve_verify(struct gns *g, struct gns_job *j)
{
	struct eng_verify_copy vc = { .node = g->self };
	uint8_t meta[40];
	struct peer_frame rep = { .meta = meta, .meta_len = sizeof(meta) };
	uint32_t digest, flags = 0;
	int rc;

	if (rft_get_le32(j->meta + 16) & ~(uint32_t)GNS_VERIFY_REPAIR) {
		peer_reply_err(g->x, j->node, &j->f, -EINVAL, GNS_SEND_MS);
		return;
	}
	rc = file_verify_ino(
	    g->e, rft_get_le64(j->meta), rft_get_le64(j->meta + 8), j->node,
	    rft_get_le32(j->meta + 16) & GNS_VERIFY_REPAIR, &vc, &digest);
	if (rc < 0) {
		peer_reply_err(g->x, j->node, &j->f, rc, GNS_SEND_MS);
		return;
	}
	if (digest != rft_get_le32(j->meta + 20))
		flags |= GNS_VERIFY_DIFFERS;
	if (vc.synced)
		flags |= GNS_VERIFY_SYNCED;
	rft_put_le32(meta, vc.checked);
	rft_put_le32(meta + 4, vc.bad);
	rft_put_le32(meta + 8, vc.first_bad);
	rft_put_le32(meta + 12, vc.absent);
	rft_put_le64(meta + 16, vc.bytes);
	rft_put_le32(meta + 24, vc.repaired);
	rft_put_le32(meta + 28, flags);
	rft_put_le32(meta + 32, vc.off);
	rft_put_le32(meta + 36, digest);
	peer_reply(g->x, j->node, &j->f, &rep, GNS_SEND_MS);
}

static void *server_main(void *arg)
{
	struct gns *g = arg;

	leaf_lock(&g->lock, ENG_RANK_GNS);
	for (;;) {
		uint64_t now = rft_now_ms(), next = now + 1000;
		uint64_t applied = atomic_load(&g->applied);
		bool inval_idle = eng_inval_idle(g->e);
		struct gns_job *j = NULL, **pp;

		/*
		 * A parked wait that is due: applied, and the kernel's names
		 * updated (or long enough waited for that), or out of time.
		 */
		for (pp = &g->waits; *pp; pp = &(*pp)->next) {
			bool done = rft_get_le64((*pp)->meta) <= applied;

			if ((done && ((*pp)->inval_ms <= now || inval_idle)) ||
			    (*pp)->until_ms <= now || g->stop) {
				j = *pp;
				*pp = j->next;
				if (done && !inval_idle)
					atomic_fetch_add(&g->waits_capped, 1);
				break;
			}
			if ((*pp)->until_ms < next)
				next = (*pp)->until_ms;
			if (done && (*pp)->inval_ms < next)
				next = (*pp)->inval_ms;
		}
		if (!j && g->j_head) {
			j = g->j_head;
			g->j_head = j->next;
			if (!g->j_head)
				g->j_tail = NULL;
			if (j->f.type == GNS_T_WAIT &&
			    (rft_get_le64(j->meta) > applied || !inval_idle) &&
			    !g->stop) {
				j->next = g->waits;
				g->waits = j;
				continue;
			}
		}
		if (j) {
			leaf_unlock(&g->lock, ENG_RANK_GNS);
			if (!g->stop) {
				if (j->f.type == GNS_T_WAIT)
					answer_wait(g, j);
				else if (j->f.type == GNS_T_GET)
					serve_get(g, j);
				else
					serve_verify(g, j);
			}
			free(j);
			leaf_lock(&g->lock, ENG_RANK_GNS);
			continue;
		}
		if (g->stop)
			break;
		rft_cond_wait_until(&g->jobs, &g->lock, next);
	}
	leaf_unlock(&g->lock, ENG_RANK_GNS);
	return NULL;
}

/* --- fetching pieces ------------------------------------------------------ */

/*
 * Read piece @idx of @ino's seal @gseal from a holder: those heard from
 * first (the one that wrote it before the others), then those not heard
 * from since this daemon started (a daemon that just started has not yet
 * heard every peer's heartbeat; asking one costs at most the failure
 * detector's timeout).  Every byte checked against @crc.
 */
static int fetch_from(struct gns *g, uint64_t ino, uint64_t gseal,
		      uint64_t holders, uint32_t idx, uint32_t len,
		      uint32_t crc, uint8_t *buf, uint64_t until)
{
	struct memb_view v;
	uint8_t meta[24];
	int rc = -EIO;

	rft_put_le64(meta, ino);
	rft_put_le64(meta + 8, gseal);
	rft_put_le32(meta + 16, idx);
	rft_put_le32(meta + 20, len);
	memb_get_view(g->memb, &v);
	for (int pass = 0; pass < 2; pass++) {
		for (int n = 0; n < g->nodes; n++) {
			struct peer_frame f = { .type = GNS_T_GET,
						.meta = meta,
						.meta_len = sizeof(meta) };
			struct peer_reply rep = { .bulk = buf,
						  .bulk_cap = len };
			enum memb_state st = v.node[n].state;
			uint64_t now = rft_now_ms();
			int left, r;

			if (!(holders & (1ULL << n)) || n == g->self ||
			    st == MEMB_DEAD ||
			    (st == MEMB_UNKNOWN) != (pass == 1))
				continue;
			if (now >= until)
				return -ETIMEDOUT;
			left = (int)(until - now);
			r = peer_call(g->x, n, &f, &rep,
				      left < (int)g->dead_ms ? left
							     : (int)g->dead_ms);
			if (r == 0 && rep.bulk_len == len &&
			    ers_crc32c(0, buf, len) == crc)
				return 0;
			/*
			 * Wrong bytes: the transport's check against the
			 * CRC the holder sent (-EBADMSG), or ours.
			 */
			if (r == 0 || r == -EBADMSG) {
				rft_warn("piece %u of inode %llu from node %d "
					 "failed its checksum",
					 idx, (unsigned long long)ino, n);
				eng_count_crc_error(g->e);
				r = -EIO;
			}
			rc = r == -ETIMEDOUT ? r : rc;
		}
	}
	return rc == -ETIMEDOUT ? rc : -EIO;
}

/* A stripe member's piece, for a reconstructing read (parity_get_fn). */
static int get_member(void *ctx, int node, uint64_t ino, uint64_t gseal,
		      uint32_t idx, uint32_t len, uint32_t crc, uint8_t *buf,
		      const struct timespec *deadline)
{
	struct gns *g = ctx;

	if (file_piece_copy(g->e, ino, gseal, idx, len, crc, buf) == 0)
		return 0;
	if (node == g->self)
		return -EIO;
	return fetch_from(g, ino, gseal, 1ULL << node, idx, len, crc, buf,
			  (uint64_t)deadline->tv_sec * 1000 +
				  (uint64_t)deadline->tv_nsec / 1000000);
}

/*
 * A piece of a sealed file: from its holders; when none has it and the
 * seal is erasure-coded, rebuilt from the rest of its stripe.
 */
static int gns_fetch(void *ctx, const struct eng_piece *pc, uint8_t *buf,
		     const struct timespec *deadline)
{
	struct gns *g = ctx;
	struct timespec d;
	uint64_t until;
	int rc, prc;

	if (deadline) {
		until = (uint64_t)deadline->tv_sec * 1000 +
			(uint64_t)deadline->tv_nsec / 1000000;
	} else {
		until = rft_now_ms() + eng_get_config(g->e)->fetch_timeout_ms;
	}
	rc = fetch_from(g, pc->ino, pc->gseal, pc->holders, pc->idx, pc->len,
			pc->crc, buf, until);
	if (rc != -EIO || !pc->scheme)
		return rc;
	d.tv_sec = (time_t)(until / 1000);
	d.tv_nsec = (long)(until % 1000) * 1000000L;
	prc = protect_reconstruct(g->prot, pc, buf, &d);
	return prc == 0 || prc == -ETIMEDOUT ? prc : rc;
}

static void gns_scrub(void *ctx, const struct eng_piece *pc, uint32_t npieces,
		      struct eng_verify_info *vi)
{
	struct gns *g = ctx;

	protect_scrub(g->prot, pc, npieces, vi);
}

/*
 * eng_verify: ask @node to check its copy.  A node that is down is not
 * asked; one that does not answer in GNS_VERIFY_MS is reported so.
 */
static void gns_verify(void *ctx, int node, uint64_t ino, uint64_t gseal,
		       uint32_t digest, bool repair,
		       struct eng_verify_copy *vc)
{
	struct gns *g = ctx;
	struct memb_view v;
	uint8_t meta[24], ans[40];
	struct peer_frame f = { .type = GNS_T_VERIFY, .meta = meta,
				.meta_len = sizeof(meta) };
	struct peer_reply rep = { .meta = ans, .meta_cap = sizeof(ans) };

	memset(vc, 0, sizeof(*vc));
	vc->node = node;
	memb_get_view(g->memb, &v);
	if (node < 0 || node >= g->nodes || v.node[node].state == MEMB_DEAD) {
		vc->rc = -EHOSTDOWN;
		return;
	}
	rft_put_le64(meta, ino);
	rft_put_le64(meta + 8, gseal);
	rft_put_le32(meta + 16, repair ? GNS_VERIFY_REPAIR : 0);
	rft_put_le32(meta + 20, digest);
	vc->rc = peer_call(g->x, node, &f, &rep, GNS_VERIFY_MS);
	if (vc->rc == 0 && rep.meta_len != sizeof(ans))
		vc->rc = -EPROTO;
	if (vc->rc < 0)
		return;
	vc->checked = rft_get_le32(ans);
	vc->bad = rft_get_le32(ans + 4);
	vc->first_bad = rft_get_le32(ans + 8);
	vc->absent = rft_get_le32(ans + 12);
	vc->bytes = rft_get_le64(ans + 16);
	/* dropped there, to send again */
	vc->repaired = rft_get_le32(ans + 24);
	vc->seal_differs = rft_get_le32(ans + 28) & GNS_VERIFY_DIFFERS;
	vc->synced = rft_get_le32(ans + 28) & GNS_VERIFY_SYNCED;
	vc->off = rft_get_le32(ans + 32);
}

/* --- readiness, life ------------------------------------------------------ */

/*
 * Caught up with the log, then: this daemon started with empty memory, so
 * the group must stop counting on what its node held before (LOST), and
 * the files it owns come back from their copies (the rebuild).
 */
static int gns_ready(void *ctx, int timeout_ms)
{
	struct gns *g = ctx;
	struct nsop op;
	void *buf = NULL;
	size_t len = 0;
	int rc, result = 0;

	rc = nslog_barrier(g->log, timeout_ms);
	if (rc < 0 || g->lost_told)
		return rc;
	nsop_init(&op, NSOP_LOST);
	op.node = g->self;
	op.inc = g->inc;
	rc = nsop_encode(&op, &buf, &len);
	if (rc == 0)
		rc = nslog_submit(g->log, buf, len, timeout_ms, &result);
	free(buf);
	if (rc < 0)
		return rc;
	g->lost_told = true;
	/*
	 * Its pieces on this node's disk, of seals that the LOST left whole
	 * (a lost file stays lost, alike on every node): taken back, so the
	 * rebuild fetches only the rest.
	 */
	eng_spill_found(g->e);
	return protect_rebuild(g->prot);
}

/* --- a graceful stop ------------------------------------------------------ */

#define GNS_LEAVE_NAMED 100	/* files named in the log at a stop */
#define GNS_LEAVE_LOST_MS 5000	/* the log takes this node's LOST by then */
#define GNS_LEAVE_POLL_MS 50

/*
 * Until nothing this node proposed is queued, running, in the log without
 * its apply here, or waiting to go again (a seal, a persist record), or
 * @until_ms.  true when drained.
 */
static bool drain(struct gns *g, uint64_t until_ms)
{
	bool done;

	leaf_lock(&g->lock, ENG_RANK_GNS);
	for (;;) {
		uint64_t now = rft_now_ms();

		done = !g->retry && !g->pending && rft_wq_idle(g->subq);
		if (done || now >= until_ms)
			break;
		rft_cond_wait_until(&g->applied_cv, &g->lock,
				    now + GNS_LEAVE_POLL_MS < until_ms
					? now + GNS_LEAVE_POLL_MS
					: until_ms);
	}
	leaf_unlock(&g->lock, ENG_RANK_GNS);
	return done;
}

/*
 * Would a file's bytes go with this daemon?  A file of this node with
 * bytes in memory here whose current version is neither protected nor
 * persisted, and, once sealed (its seal applied: drain()), held by no
 * other node either (copies or rows left by an earlier protection, the
 * rebuild's source).  One open for writing: its bytes are here only.
 */
static bool leave_want(void *ctx, const struct seal_view *v)
{
	const struct gns *g = ctx;

	return v->owner == g->self && !v->lost && !v->protected &&
	       !v->persisted && (!v->sealed || !v->held_elsewhere) &&
	       v->any_here;
}

/*
 * Until the write-back of ticket @ticket (eng_flush_request) is finished
 * or @until_ms.  Its persist records are then queued here (drain()).
 */
static void wait_flush(struct gns *g, uint64_t ticket, uint64_t until_ms)
{
	struct eng_flush_progress fp;

	while (eng_flush_progress(g->e, ticket, &fp) == 0 && !fp.finished &&
	       rft_now_ms() < until_ms) {
		leaf_lock(&g->lock, ENG_RANK_GNS);
		rft_cond_wait_until(&g->tick_cv, &g->lock,
				    rft_now_ms() + GNS_LEAVE_POLL_MS);
		leaf_unlock(&g->lock, ENG_RANK_GNS);
	}
}

/* Are enough nodes up for the log to take an entry (a majority)? */
static bool majority_up(struct gns *g)
{
	struct memb_view v;
	int up = 1;

	memb_get_view(g->memb, &v);
	for (int n = 0; n < g->members; n++)
		up += n != g->self && v.node[n].state == MEMB_UP;
	return up > g->members / 2;
}

/*
 * A graceful stop (eng_group_leave): write back what unmount would, and
 * protect what can be, within @wait_ms; then name each file whose bytes
 * go with this daemon and tell the group (LOST, flag NSOP_LOST_STOP), so
 * that the others show those files lost at once, not when this node
 * starts again.  Returns the number of such files when --protect asks
 * for protection, else 0, or -ENOMEM.  No lock held; sleeps.
 */
static int gns_leave(void *ctx, unsigned wait_ms)
{
	struct gns *g = ctx;
	struct eng *e = g->e;
	uint64_t until = rft_now_ms() + wait_ms, ticket = 0, n;
	struct inode **left = NULL;
	long nl;
	bool flushing, protecting = g->prot != NULL;
	struct nsop op;
	void *buf = NULL;
	size_t len = 0;
	int prc, rc, result = 0;

	/*
	 * What unmount would write back to a persist dir goes now, while
	 * the log can still take its PERSIST records: the others then read
	 * it from there, and it is not lost.
	 */
	flushing = eng_get_config(e)->unmount_flush == ENG_UNMOUNT_FLUSH_ALL &&
		   eng_flush_request(e, &ticket) == 0;
	prc = protect_leave(g->prot, until);
	if (flushing)
		wait_flush(g, ticket, until);
	/*
	 * No protection ends after the files are named below: a PROTECT
	 * committed after LOST would make them come back on the others.
	 */
	protect_stop(g->prot);
	/* Seals, protections and persist records: in the log first. */
	if (!drain(g, until > rft_now_ms() + GNS_LEAVE_POLL_MS
			  ? until
			  : rft_now_ms() + GNS_LEAVE_POLL_MS))
		rft_warn("stop: namespace changes of this node are not all in "
			 "the group's log yet");
	nl = eng_files_where(e, leave_want, g, &left);
	if (nl < 0)
		return (int)nl;
	n = (uint64_t)nl;
	/* Named once the locks are let go (the log may block). */
	for (uint64_t i = 0; i < n; i++) {
		struct seal_view v;
		const char *open = "";
		char path[PATH_MAX];

		if (i < GNS_LEAVE_NAMED) {
			eng_inode_name(e, left[i], path, sizeof(path));
			if (file_seal_view(e, left[i], &v) == 0 && !v.sealed)
				open = " (still open for writing)";
			if (protecting)
				rft_err("stop: left unprotected: %s%s", path,
					open);
			else
				rft_warn("stop: not kept by the group "
					 "(--protect none): %s%s",
					 path, open);
		}
		ns_unhold(e, left[i]);
	}
	free(left);
	if (n == 0)
		return 0;
	if (n > GNS_LEAVE_NAMED)
		rft_err("stop: ... and %llu more files",
			(unsigned long long)(n - GNS_LEAVE_NAMED));
	if (protecting)
		rft_err("stop: %llu files of this node left unprotected (%s): "
			"their bytes go with this daemon",
			(unsigned long long)n,
			prc == -EHOSTDOWN  ? "a holder is dead"
			: prc == -ETIMEDOUT ? "--stop-wait ran out"
					   : "open for writing");
	if (!majority_up(g)) {
		rft_err("stop: too few nodes up for the group's log to take "
			"this node's LOST: the others show those files lost "
			"only once this node starts again");
		return protecting ? (int)(n > INT_MAX ? INT_MAX : n) : 0;
	}
	nsop_init(&op, NSOP_LOST);
	op.node = g->self;
	op.inc = g->inc;
	op.flags = NSOP_LOST_STOP;
	rc = nsop_encode(&op, &buf, &len);
	if (rc == 0)
		rc = nslog_submit(g->log, buf, len, GNS_LEAVE_LOST_MS,
				  &result);
	free(buf);
	if (rc < 0)
		rft_err("stop: the group's log did not take this node's LOST "
			"(%s): the others show those files lost only once "
			"this node starts again",
			strerror(-rc));
	else
		rft_info("stop: the group knows: those files show as lost on "
			 "every node");
	if (!protecting)
		return 0;
	return n > INT_MAX ? INT_MAX : (int)n;
}

static int gns_repair(void *ctx, struct inode *in)
{
	struct gns *g = ctx;

	return protect_repair(g->prot, in);
}

static void gns_protect_stats(void *ctx, struct eng_protect_stats *st)
{
	struct gns *g = ctx;

	protect_get_stats(g->prot, st);
}

static void gns_log_stats(void *ctx, struct eng_log_stats *st)
{
	struct gns *g = ctx;

	st->proposed = atomic_load(&g->proposed);
	st->failed = atomic_load(&g->failed);
	st->waits = atomic_load(&g->waits_answered);
	st->waits_capped = atomic_load(&g->waits_capped);
	st->gets_served = atomic_load(&g->gets_served);
	st->gets_refused = atomic_load(&g->gets_refused);
}

/* --- freshness ------------------------------------------------------------ */

static void *ticker_main(void *arg)
{
	struct gns *g = arg;

	leaf_lock(&g->lock, ENG_RANK_GNS);
	while (!g->stop) {
		uint64_t now = rft_now_ms(), prev = atomic_load(&g->tick_ms);

		/* Stale first, then the tick: gns_fresh reads them so. */
		if (now - prev >= g->stale_ms &&
		    !atomic_exchange(&g->stale, true)) {
			rft_warn("this daemon did not run for %llu ms (stopped "
				 "or starved) and may have been declared dead: "
				 "it confirms its namespace with the group's "
				 "log before it serves again",
				 (unsigned long long)(now - prev));
		}
		atomic_store(&g->tick_ms, now);
		/* fsyncs past their deadline fail (outside the lock). */
		for (struct gns_sync **pp = &g->syncs; *pp;) {
			struct gns_sync *s = *pp;

			if (s->until_ms > now) {
				pp = &s->next;
				continue;
			}
			*pp = s->next;
			leaf_unlock(&g->lock, ENG_RANK_GNS);
			sync_done(g, s, -ETIMEDOUT,
				  "not protected within 30 s (a holder "
				  "down? reftfs-admin protect says)");
			leaf_lock(&g->lock, ENG_RANK_GNS);
			pp = &g->syncs; /* it may have changed meanwhile */
		}
		/* Seals due for another try go to the submitters. */
		retry_now(g, now, 0);
		rft_cond_wait_until(&g->tick_cv, &g->lock, now + GNS_TICK_MS);
	}
	leaf_unlock(&g->lock, ENG_RANK_GNS);
	return NULL;
}

static void gns_kick(void *ctx)
{
	struct gns *g = ctx;

	leaf_lock(&g->lock, ENG_RANK_GNS);
	pthread_cond_broadcast(&g->jobs);
	leaf_unlock(&g->lock, ENG_RANK_GNS);
}

static int gns_fresh(void *ctx)
{
	struct gns *g = ctx;
	uint64_t tick = atomic_load(&g->tick_ms), gen;
	int rc;

	if (rft_now_ms() - tick < g->stale_ms && !atomic_load(&g->stale))
		return 0;
	atomic_store(&g->stale, true);
	leaf_lock(&g->lock, ENG_RANK_GNS);
	if (g->syncing) {
		/* Another caller's barrier: its result is ours. */
		gen = g->sync_gen;
		while (g->syncing && gen == g->sync_gen)
			pthread_cond_wait(&g->synced, &g->lock);
		rc = g->sync_rc;
		leaf_unlock(&g->lock, ENG_RANK_GNS);
		return rc;
	}
	g->syncing = true;
	leaf_unlock(&g->lock, ENG_RANK_GNS);
	rc = nslog_barrier(g->log, GNS_LOG_TIMEOUT_MS);
	if (rc < 0) {
		rft_warn("cannot confirm this node's namespace with the "
			 "group's log: %s; answering EIO",
			 strerror(-rc));
		rc = -EIO;
	} else {
		atomic_store(&g->tick_ms, rft_now_ms());
		atomic_store(&g->stale, false);
		rft_info("namespace confirmed with the group's log: serving "
			 "again");
	}
	leaf_lock(&g->lock, ENG_RANK_GNS);
	g->sync_rc = rc;
	g->syncing = false;
	g->sync_gen++;
	pthread_cond_broadcast(&g->synced);
	leaf_unlock(&g->lock, ENG_RANK_GNS);
	return rc;
}

static int gns_start(void *ctx);
static void gns_stop(void *ctx);
static void gns_free(void *ctx);

static const struct eng_group_ops gns_ops = {
	.propose = gns_propose,
	.seal = gns_seal,
	.sync = gns_sync,
	.fetch = gns_fetch,
	.persisted = gns_persisted,
	.fresh = gns_fresh,
	.kick = gns_kick,
	.protect_stats = gns_protect_stats,
	.log_stats = gns_log_stats,
	.ready = gns_ready,
	.leave = gns_leave,
	.verify = gns_verify,
	.scrub = gns_scrub,
	.repair = gns_repair,
	.start = gns_start,
	.stop = gns_stop,
	.free = gns_free,
};

static int gns_start(void *ctx)
{
	struct gns *g = ctx;
	int rc = rft_wq_start(g->subq);

	for (int k = 0; k < GNS_SERVERS && rc == 0; k++)
		rc = -pthread_create(&g->servers[k], NULL, server_main, g);
	atomic_store(&g->tick_ms, rft_now_ms());
	if (rc == 0)
		rc = -pthread_create(&g->ticker, NULL, ticker_main, g);
	if (rc < 0) {
		rft_err("cannot start the group namespace threads: %s",
			strerror(-rc));
		return rc;
	}
	g->started = true;
	return protect_start(g->prot);
}

static void gns_stop(void *ctx)
{
	struct gns *g = ctx;

	if (!g->started)
		return;
	protect_stop(g->prot);
	leaf_lock(&g->lock, ENG_RANK_GNS);
	g->stop = true;
	pthread_cond_broadcast(&g->jobs);
	pthread_cond_broadcast(&g->tick_cv);
	leaf_unlock(&g->lock, ENG_RANK_GNS);
	/* What is queued fails; what runs finishes. */
	rft_wq_stop(g->subq, RFT_WQ_CANCEL);
	for (int i = 0; i < GNS_SERVERS; i++)
		pthread_join(g->servers[i], NULL);
	pthread_join(g->ticker, NULL);
	/* fsyncs still waiting fail. */
	while (g->syncs) {
		struct gns_sync *s = g->syncs;

		g->syncs = s->next;
		sync_done(g, s, -ESHUTDOWN, "reftfsd is stopping");
	}
	/* Seals waiting to go again fail as at the stop. */
	while (g->retry) {
		struct gns_req *r = g->retry;

		g->retry = r->next;
		finish(g, r, -ESHUTDOWN);
		req_free(g->e, r);
	}
	g->started = false;
}

static void gns_free(void *ctx)
{
	struct gns *g = ctx;

	protect_free(g->prot);
	/* A queue that never ran fails what it holds. */
	rft_wq_free(g->subq);
	while (g->j_head) {
		struct gns_job *j = g->j_head;

		g->j_head = j->next;
		free(j);
	}
	while (g->waits) {
		struct gns_job *j = g->waits;

		g->waits = j->next;
		free(j);
	}
	pthread_mutex_destroy(&g->lock);
	pthread_cond_destroy(&g->jobs);
	pthread_cond_destroy(&g->applied_cv);
	pthread_cond_destroy(&g->tick_cv);
	pthread_cond_destroy(&g->synced);
	free(g);
}

int eng_join_group(struct eng *e, struct grp *grp)
{
	const struct peer_rx rx = { .deliver = rx_deliver };
	const struct nslog_fsm fsm = {
		.apply = fsm_apply,
		.snapshot = fsm_snapshot,
		.restore = fsm_restore,
	};
	struct nslog_fsm f = fsm;
	struct peer_rx r = rx;
	struct gns *g;
	int rc;

	if (eng_in_group(e))
		return -EBUSY;
	/*
	 * Every node numbers inodes in log order, from an empty namespace:
	 * one that holds names already (a persist dir's) would not agree.
	 */
	if (eng_ns_count(e) > 1) {
		rft_err("a node of a group starts with an empty namespace, and "
			"the persist dir holds files already");
		return -EEXIST;
	}
	if (!grp_log(grp)) {
		rft_err("this group has no namespace log (a --registry group): "
			"it cannot share one namespace yet");
		return -EOPNOTSUPP;
	}
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->e = e;
	g->grp = grp;
	g->log = grp_log(grp);
	g->x = grp_xport(grp);
	g->memb = grp_memb(grp);
	g->self = grp_self(grp);
	g->nodes = grp_nodes(grp);
	g->members = grp_members(grp);
	g->inc = grp_incarnation(grp);
	g->dead_ms = grp_dead_after_ms(grp);
	g->stale_ms = g->dead_ms / 2 > GNS_STALE_MIN_MS ? g->dead_ms / 2
							 : GNS_STALE_MIN_MS;
	pthread_mutex_init(&g->lock, NULL);
	/* Deadlines are CLOCK_MONOTONIC (rft_cond_wait_until). */
	rft_cond_init(&g->jobs);
	rft_cond_init(&g->applied_cv);
	rft_cond_init(&g->tick_cv);
	rft_cond_init(&g->synced);
	f.ctx = g;
	r.ctx = g;
	rc = rft_wq_new("rft-gns-sub", GNS_SUBMITTERS, &g->subq);
	if (rc == 0) {
		rft_wq_on_idle(g->subq, submitters_idle, g);
		rc = grp_set_fsm(grp, &f);
	}
	if (rc == 0)
		rc = peer_register(g->x, PEER_T_GNS_FIRST, PEER_T_GNS_LAST, &r);
	if (rc == 0)
		rc = protect_new(e, grp, get_member, g, &g->prot);
	if (rc == 0)
		rc = eng_listen(e, gns_on_event, g);
	if (rc < 0) {
		gns_free(g);
		return rc;
	}
	return eng_group_attach(e, &gns_ops, g, g->self, g->inc);
}
