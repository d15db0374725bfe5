/*
 * nslog.c - the group's namespace log: one replicated log run by the
 * group's own daemons with canonical's C Raft (libraft 0.15, raft_uv).
 *
 * Why libraft.  The namespace must be ordered group-wide and survive leader
 * crashes and partitions without ever letting two nodes apply different
 * entries at one index.  That is consensus, and consensus written here would
 * be the riskiest code of the project.  libraft is a proven implementation
 * (the engine of dqlite and LXD clusters, fuzzed and Jepsen-tested there),
 * packaged in Debian (libraft-dev), with its own crash-safe disk log
 * (raft_uv: segments, snapshots, CRCs).  It runs inside the daemons: a group
 * needs no extra service.  We add only what it leaves to its user: how the
 * links are authenticated, how ids are chosen, how a node first starts or
 * is replaced, and how a follower's proposal reaches the leader.
 *
 * Failure model.  Raft commits an entry once a majority of the voters have
 * it on disk.  So a group of N survives the loss of (N - 1) / 2 nodes: a
 * group of 3 survives one, 5 survive two.  A group of 2 has two voters and
 * a majority of 2: with one of them down (crashed, hung, cut off) nothing
 * commits, the namespace cannot change, and the dead node cannot even be
 * replaced (removing its id is itself a change that needs the majority);
 * it only resumes when that node comes back with its disk.  A minority
 * partition (or a hung node, SIGSTOP) cannot commit: its submits fail
 * (-ETIMEDOUT, or -ENOTCONN when no leader was reachable at all) and its
 * state machine stays as it was; local reads still see that state, which
 * may be stale (nslog_barrier() fails there, so a reader who needs the
 * latest state gets an error, not a stale answer).  When the partition
 * heals, raft brings the minority up to date (entries, or a snapshot).  A
 * crash loses nothing acknowledged: an entry is acknowledged only once
 * committed, that is on the disks of a majority.
 *
 * Raft ids.  A node's raft server id is node + 1 + GRP_MAX_NODES * gen; gen
 * is 0 at the group's first start and grows each time the node is replaced
 * with an empty disk.  An id is never reused: a server that lost its disk
 * has forgotten its votes and which entries it acknowledged, and coming
 * back under the same id could let it vote twice in a term or let a
 * committed entry vanish.  A raft link from an id older than its node's
 * generation in the log (a node replaced or removed since, restarted on
 * its old disk) is refused at the handshake (tr_check_peer).
 *
 * Voters.  Every member of the group votes: the data nodes and the
 * witnesses (group.h), nodes 0 to o->nodes - 1 here alike.
 *
 * First start and replacement.  The data dir holds raft's files and our
 * own small file, nslog.state (written atomically before raft may use an
 * id).  At start:
 *  - nslog.state says "active": a restart on the same disk; raft starts
 *    with the id and the log it has.  (If a founding member's raft files
 *    are gone while nslog.state stayed, it is refused: its votes would be
 *    forgotten.  Emptying the directory makes it a replacement.)
 *  - otherwise this disk has never run raft.  We write nslog.state as
 *    "unknown" (with this daemon's incarnation) and ask every peer over
 *    o->x (PEER_T_NSLOG_PROBE): "do you have the group's log?".  A peer
 *    without one answers "empty" (and we remember that we saw it empty, in
 *    that incarnation: "seen empty").  Then:
 *      . every peer answered "empty": this is the group's first start; we
 *        bootstrap raft with the static configuration (ids 1..N, all
 *        voters), identical on every node, and become "active";
 *      . a peer with a log says it saw us empty in one of the
 *        incarnations this disk has run as "unknown": we are a node of the
 *        first start that was slow (or restarted before it began), whose
 *        generation-0 id has never been used: we bootstrap the same way;
 *      . a peer has a log and none saw us empty (after every peer answered,
 *        or after a grace period with some unreachable): this node ran
 *        before on a disk it lost, so it is a replacement.  It asks the
 *        leader for a new generation (an entry in the log, so every node
 *        agrees on it and it is never handed out twice), becomes "active"
 *        under the new id, starts raft with an empty log and asks the
 *        leader to remove its node's old ids and to add the new one, first
 *        as a spare, then as a voter; raft catches it up (snapshot install
 *        plus entries) before it gets its vote.  The old id is removed
 *        first: that never needs more live nodes than the old id's
 *        presence did, while adding first would (N+1 voters, one dead).
 *      . no peer has a log and some did not answer: keep asking.  A group's
 *        first start needs every node up once.
 *    A wrong decision for "replacement" costs a generation and is safe; the
 *    "seen empty" rule keeps the unsafe one (reusing a used id) from happening
 *    as long as daemons use a new incarnation at every start.
 *
 * Forced recovery (nslog_force_remove, the operator's step when a majority
 * of the voters is lost for good: no change can commit, no replacement can
 * join).  libraft's raft_recover appends a configuration to a closed
 * server's log; its contract is that it runs once, on the survivor with
 * the highest term and the longest log, and that the other survivors get
 * that log.  Here the daemons and their mounts stay up:
 *  - the operator names the lost nodes on a survivor.  Refused while a
 *    majority of the voters lives, while a named node is up, while a
 *    voter is neither named nor up, and on any survivor but the one whose
 *    (term, last index) is highest (ties: the lowest node id): every
 *    survivor is asked (NSLOG_T_STATE), and the refusal names the one;
 *  - that one closes raft, reopens its log with raft_recover(itself the
 *    only voter), starts, and leads at once; it appends a generation for
 *    each lost node, so that their old ids are refused from then on: a
 *    lost node restarted on its old disk never joins, and never forms a
 *    second group with the others' old ids;
 *  - it tells every other survivor (NSLOG_T_REJOIN), which asks it for a
 *    new generation, closes raft, empties its dir but nslog.state, and
 *    joins as a replacement does (rejoin_main).  That is the "copy of the
 *    log": raft sends it the chosen log (snapshot and entries).
 * A survivor's state machine is not emptied: the entries it applied are
 * committed, so the chosen log holds them at the same indices (a leader's
 * log holds every committed entry, and the chosen log, highest in term and
 * length, agrees with the last leader's up to its end).  Raft applies its
 * log again from its last snapshot after the restart; l->floor, the index
 * applied before, makes apply and restore skip what the state machine
 * holds, and no snapshot is taken below it.  Entries the chosen log held
 * uncommitted are committed by the new configuration: a call that timed
 * out waiting for one may have happened after all, as after any leader
 * change.  The lost ids are then free for replacements on new machines.
 *
 * One daemon per data dir.  Two raft instances with one id on one set of
 * files (a second daemon started for a node whose daemon still runs)
 * would each vote and append as that id, and could lose votes or
 * committed entries.  So the dir is flock()ed (LOCK_FILE) before anything
 * in it is read, from nslog_check() or nslog_start() to nslog_free(), and
 * a second nslog on it is refused at once (-EBUSY) rather than waited
 * for: the holder is a live daemon of the same node, and only stopping it
 * can help (docs/operations.md says why a restart does not need a wait).
 * The kernel lets go of the lock when its process dies, so a node
 * restarted after SIGKILL finds it free.  The lock file holds the
 * holder's pid, for the refusal's message only.
 *
 * Addresses.  Raft links go to where each node's raft listens now
 * (l->where): given at nslog_new() for a static --peers list, or learned
 * later from the registry through nslog_set_addr(), as nodes register, move
 * (a daemon restarted at another address on its state dir) or are replaced
 * (a new daemon, a new raft id, at another address).  A change closes the
 * links this node made to the old address: whoever answers there is not that
 * node any more, and a link to a machine that vanished would otherwise look
 * alive until TCP gives up.  Links the node made to us stay: they come from
 * where it is and carry its answers (closing them loses answers, which
 * libraft 0.15 does not always get over: a follower that compacted its log
 * past what the leader heard from it is sent the same entries for ever).
 *
 * Raft itself never sees these addresses.  Its configuration names a raft id
 * by a label ("raft-ID", raft_label()) that tr_connect() ignores, for two
 * reasons: libraft cannot change a member's address short of removing and
 * adding it again, which would change the voters; and it refuses to add an
 * id whose address string another member has (a replacement listening where
 * another node listened before it moved).  An id's label must be the same on
 * every path, or raft_uv remakes its link to that id each time the string it
 * is handed changes: an inbound link is handed the name of its id in this
 * node's configuration (in a log bootstrapped before labels, the address it
 * had then).
 *
 * A first start founds the log only once every node's address is known
 * ("waiting for the registry to name every node"); a node that has a log
 * starts raft at once and links to each peer as its address arrives, so a
 * node restarted while another is dead (its registry entry expired) still
 * takes part.
 *
 * Proposals.  An entry carries (node, incarnation, request id).  The leader
 * appends it with raft_apply(); a follower forwards it to the leader over
 * o->x (PEER_T_NSLOG_SUBMIT), the leader answers once it is committed, and
 * the proposer waits until it has applied the entry itself.  A retry after
 * a leader change may append the same entry twice: apply skips the copies.
 * Each node keeps, for the last DEDUPE_SLOTS incarnations of every node,
 * the highest request id applied and a window of DEDUPE_WINDOW ids below it
 * with their results; a request id older than the window is refused (the
 * proposer, still waiting, retries it under a new request id, which is safe
 * since the old one can never apply any more).  The table is part of every
 * snapshot, and changes only in apply, so it is the same on every node.
 * At most MAX_INFLIGHT submits of one node wait at once (see there why).
 *
 * Commit push.  Raft tells a follower the commit index only in
 * AppendEntries, and libraft 0.15 sends one with no new entry only as a
 * heartbeat: at a tick (every heartbeat_ms) once heartbeat_ms have passed
 * since its last message to that follower, so 1 to 2 heartbeats after the
 * entry went out.  Until then followers hold a committed entry without
 * applying it, and a follower's submit waits.  So once every entry it
 * appended is committed and applied, the leader appends one barrier
 * (commit_push()): raft sends it at once with the new commit index, and
 * the followers apply about one round trip (and one disk append of theirs)
 * after the leader's commit.  The push's own commit reaches the followers
 * with the next heartbeat: it changes no state, and pushing it too would
 * chain pushes forever.  A burst of entries costs one barrier more in the
 * log, and a follower's commit index trails the leader's by that barrier
 * for up to two heartbeats.
 *
 * The caller's state machine is empty at every nslog_start(): raft restores
 * the last snapshot (fsm->restore) and applies the entries after it again.
 * Snapshots are taken every snapshot_every entries on the loop thread (the
 * caller's fsm->snapshot must be quick: raft waits meanwhile), keeping the
 * last snapshot_every / 2 entries so that a follower a little behind gets
 * entries, not the whole snapshot.  A follower further behind is sent the
 * leader's snapshot, and the leader sends it nothing else until the
 * follower acknowledges it or the install times out.  libraft loses that
 * snapshot without a word when the follower is busy with a snapshot of its
 * own at that moment (it drops the message) or died after the leader's
 * write; its default timeout of 30 s would then leave the follower behind
 * for 30 s.  install_ms() makes it 4 election timeouts (2 to 10 s): a resend
 * that comes while the first is still being installed is dropped the same
 * way and costs one transfer.
 *
 * The raft links (docs/protocol.md, "Namespace log links").  raft_uv
 * talks to its peers over TCP at o->addrs[node].  Before raft sees a
 * connection, we run the group's link handshake on it (hs.c, the same as
 * the peer links', link kind GRP_HS_RAFT, ids = raft ids): the client
 * names the raft id it wants, and the server refuses one that is not its
 * current id (a replaced node's old one) and a client id of no other
 * node (tr_check_peer).  hs.c asks for exactly the bytes of each message,
 * so nothing of raft's stream is consumed; after WELCOME the stream is
 * raft's own (its protocol is unchanged).  Refusals (-EACCES) count as
 * auth_failed, malformed, slow or excess handshakes as bad_hs; both are
 * logged at most once a minute per peer (grp_hs_log).  A handshake has
 * GRP_HS_MS, and at most HS_MAX_INBOUND inbound ones run at once (more
 * are closed at accept).  The links are authenticated, not encrypted: an
 * attacker on the path could still read or hijack a connection, as with
 * the peer links.
 *
 * Frames over o->x (docs/protocol.md), all requests answered with
 * peer_reply(), or peer_reply_err() with a -errno (-EAGAIN: not the leader
 * or not started, try again; -ECANCELED: appended, then leadership was
 * lost; -EBUSY: too much held, or another replacement in progress).
 * Integers little-endian; an entry header is 24 bytes: version u8 (1),
 * kind u8 (1 the caller's entry, 2 a generation), node u16, pad u32 (the
 * 0 to 7 zero bytes after the payload that make the entry a multiple of 8
 * bytes long, as raft_uv's segments need), incarnation u64, request id
 * u64.
 *
 *   NSLOG_T_PROBE    meta: the incarnations this disk ran as "unknown"
 *                    (u64 each, 1..MAX_INCS).  Answer, 24 bytes: active
 *                    u8, seen empty u8 (active and saw the asker empty in
 *                    one of them), leader node i16 (-1), zero u32, raft id
 *                    u64 (0 before "active"), incarnation u64 (the
 *                    answerer's; what an asker remembers as seen empty).
 *   NSLOG_T_SUBMIT   meta: entry header (kind 1, node = the sender); bulk:
 *                    the entry (at most NSLOG_ENTRY_MAX).  Answered once
 *                    committed: u64 index.
 *   NSLOG_T_BARRIER  no meta.  Answered once committed: u64 index.
 *   NSLOG_T_GEN      meta: entry header (kind 2, node = the sender).
 *                    Answered once committed: u64 the new raft id.
 *   NSLOG_T_JOIN     meta: u64 raft id.  Answered at once: u8 1 when that
 *                    id is its node's only one and a voter, else 0 (the
 *                    leader works on it; the node asks again).
 *   NSLOG_T_STATE    no meta.  Answer, 24 bytes: term u64, last index
 *                    u64, applied index u64 (forced recovery's choice).
 *   NSLOG_T_REJOIN   no meta.  The sender forced the log to itself alone:
 *                    join it again under a new id.  Taken only while this
 *                    node knows no leader or knows the sender as one,
 *                    once per daemon; answered at once (0, -EBUSY, ...).
 *
 * A frame that breaks these rules (sizes, a header in another node's name,
 * flags) is refused with -EPROTO: the transport counts it and closes the
 * link.
 *
 * Threads.  One libuv loop thread per nslog runs raft_uv and raft: every
 * libraft call and every fsm callback is made there.  Other threads hand
 * it work through l->ops, woken by uv_async (submits, barriers, joins,
 * start, stop, test cuts).  A worker, an rft_wq ("rft-nslog-ans", one
 * FIFO list of at most JOBS_MAX answers), sends what the loop and the
 * transport's receive callbacks must not wait for (answers to peers);
 * answers not yet sent at the stop are dropped.  A control thread runs
 * the first start or the replacement (it waits on peers) and ends; a
 * rejoin thread the same after a forced recovery (rx_rejoin).
 * Callers of nslog_submit/nslog_barrier wait on l->cond.
 * The loop thread blocks SIGPIPE: a raft link closed under a write fails
 * that write (EPIPE) instead of killing the daemon.
 *
 * Locks.  l->lock protects the ops queue, the waiting proposals, the status
 * copy, the nodes' addresses and nslog.state's contents.  It is never held
 * while calling the fsm, libraft or the transport, nor across disk I/O,
 * and nothing else is taken under it (uv_async_send, which only writes to
 * an eventfd, is called under it so that the loop cannot close the handle
 * meanwhile).  The answers' queue has its own lock, a leaf.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <raft.h>
#include <raft/uv.h>
#include <uv.h>

#include "engine.h"
#include "erasure.h"
#include "group_i.h"
#include "rft_le.h"
#include "rft_wq.h"

/* Frame types of this module (PEER_T_NSLOG_FIRST..LAST). */
enum {
	NSLOG_T_PROBE = PEER_T_NSLOG_FIRST,	/* do you have the log? */
	NSLOG_T_SUBMIT,		/* append this entry (to the leader) */
	NSLOG_T_BARRIER,	/* append a barrier, tell me its index */
	NSLOG_T_GEN,		/* a new generation for my node */
	NSLOG_T_JOIN,		/* make my new raft id a voter */
	NSLOG_T_STATE,		/* your term, last and applied index? */
	NSLOG_T_REJOIN,		/* the log was forced: join it again */
	NSLOG_T_LAST = NSLOG_T_REJOIN,
};

/* The header of every entry we append (little-endian). */
#define ENT_HDR_LEN 24
#define ENT_VERSION 1
enum ent_kind {
	ENT_USER = 1,	/* the caller's entry, payload after the header */
	ENT_GEN = 2,	/* a new generation (raft id) for a node */
};

struct ent {
	int kind;
	int node;
	uint64_t inc;
	uint64_t rid;
	const uint8_t *payload;
	size_t len;
};

#define DEDUPE_WINDOW 64	/* request ids remembered below the highest */
#define DEDUPE_SLOTS 4		/* incarnations remembered per node */
/*
 * Submits of one nslog waiting at once.  Fewer than DEDUPE_WINDOW: a
 * proposal still waiting has fewer than that many later ids of its node
 * between it and the window's top, so a snapshot restored in the meantime
 * still says whether it applied (pending_after_restore).
 */
#define MAX_INFLIGHT (DEDUPE_WINDOW / 2)
/* Peers' requests held at once (more are refused -EBUSY), and answers. */
#define FWD_MAX 1024
#define FWD_BYTES_MAX (64u << 20)
#define JOBS_MAX 4096
#define MAX_INCS 8		/* incarnations of an "unknown" disk */
#define HS_MAX_INBOUND 16	/* raft handshakes accepted at once */
#define LINK_TRACK_MAX 256	/* raft links remembered (tr_close_links) */
#define STATE_FILE "nslog.state"
#define STATE_TMP "nslog.state.new"
#define LOCK_FILE ".reftfs-lock"	/* held while a daemon uses the dir */


/* One incarnation of one node in the dedupe table. */
struct dd_slot {
	uint64_t inc;		/* 0: free */
	uint64_t max_rid;	/* highest request id applied */
	uint64_t bits;		/* bit d: max_rid - d applied */
	uint64_t last_index;	/* of the last entry that used the slot */
	int32_t res[DEDUPE_WINDOW]; /* results, by rid % DEDUPE_WINDOW */
};

#define DD_REC_LEN (40 + 4 * DEDUPE_WINDOW)
#define GEN_REC_LEN 24
#define SNAP_HDR_LEN 32	/* version 1: 24, no index */
#define SNAP_HDR_LEN_V1 24
#define SNAP_MAGIC 0x534c534eu	/* "NSLS" */
#define SNAP_VERSION 2

/* The last generation handed out to a node, and the request that did. */
struct gen_rec {
	uint32_t gen;
	uint64_t inc;
	uint64_t rid;
};

enum dd_verdict { DD_NEW, DD_DUP, DD_STALE };

/* What apply tells the raft_apply() callback of the entry's proposer. */
struct apply_out {
	int rc;
	uint64_t value;		/* ENT_GEN: the new raft id */
};

/* nslog.state: what this disk has done (protected by l->lock). */
enum ps_state { PS_UNKNOWN, PS_ACTIVE };

struct pstate {
	enum ps_state state;
	uint64_t raft_id;
	bool bootstrap;		/* bootstrap the static configuration */
	bool joined;		/* the leader made raft_id a voter */
	bool started;		/* raft ran on this disk under raft_id */
	int nincs;
	uint64_t incs[MAX_INCS]; /* incarnations that ran while "unknown" */
	uint64_t seen_empty[GRP_MAX_NODES]; /* seen empty in this incarnation
					     ("witness" in the file) */
};

/* Work for the loop thread. */
enum op_kind {
	OP_START,	/* init raft with id (bootstrap when flag, or
			   recover: id the only voter) and start */
	OP_CLOSE,	/* close raft (and wipe its files when flag) */
	OP_APPLY,	/* raft_apply(buf) */
	OP_BARRIER,	/* raft_barrier() */
	OP_JOIN,	/* a replacement asks: make id a voter */
#ifdef RFT_TEST_HOOKS
	OP_CUT,		/* nslog_test_cut(node, flag) */
#endif
	OP_MOVED,	/* node's address changed: close our links to it */
};

struct nslog;

struct op {
	struct op *next;
	enum op_kind kind;
	struct nslog *l;
	/* A local thread waits on it (done, rc, value under l->lock). */
	bool local;
	bool done;
	bool abandoned;		/* the waiter left: the loop frees it */
	int rc;
	uint64_t value;
	/* Or a peer's request, answered when done (counted in l->fwd). */
	size_t fwd_bytes;
	int from;
	uint16_t ftype;
	uint64_t frid;
	/* Arguments. */
	struct raft_buffer buf;	/* OP_APPLY, raft_malloc()ed, ours until
				 * raft_apply() takes it */
	uint64_t id;
	int node;
	bool flag;
	bool recover;
	union {
		struct raft_apply apply;
		struct raft_barrier barrier;
	} req;
};

/* An answer to a peer, sent by the worker thread. */
struct job {
	struct rft_wq_item w;	/* on l->answers; first */
	struct nslog *l;
	int node;
	uint16_t type;
	uint64_t rid;
	int rc;			/* 0, or the -errno to answer */
	bool probe;		/* compose a probe answer (incs[]) */
	bool state;		/* compose a state answer (NSLOG_T_STATE) */
	int nincs;
	uint64_t incs[MAX_INCS];
	uint32_t meta_len;
	uint8_t meta[16];
};

/* A proposal of this node waiting to be applied here (its rid). */
struct pending {
	struct pending *next;
	uint64_t rid;
	bool done;
	bool stale;		/* refused as too old: resubmit */
	int result;
};

/* A raft connection being authenticated. */
struct hs {
	struct hs *next;
	struct hs **pprev;
	struct tr *t;
	bool inbound;
	bool listed;		/* in t->hs, not failed or handed over */
	bool handed;		/* raft owns tcp now */
	bool reading;
	bool connecting;	/* outbound: TCP connect not done yet */
	int open_handles;	/* closes still to come before free */
	uv_tcp_t *tcp;		/* raft_malloc()ed: raft frees it */
	uv_timer_t timer;
	uv_connect_t creq;
	uint8_t *dst;		/* where the message being read goes */
	uint32_t want, got;	/* its length, and what has come */
	raft_id peer_id;
	int peer_node;
	struct grp_hs g;	/* the handshake itself (hs.c) */
	struct raft_uv_connect *req; /* outbound: raft's request */
	int status;		/* for req->cb when it fails */
};

/* A raft link handed to raft, remembered to close it (a cut, a move). */
struct tr_link {
	int fd;
	int node;
	bool inbound;		/* made by the peer, to us */
	struct sockaddr_storage a, b;
	socklen_t alen, blen;
};

/* Our struct raft_uv_transport: TCP with the handshake above. */
struct tr {
	struct raft_uv_transport iface;
	struct nslog *l;
	raft_id id;
	uv_tcp_t listener;
	bool listener_init;
	bool listener_closed;
	raft_uv_accept_cb accept_cb;
	struct hs *hs;		/* in progress */
	int n_inbound;
	int n_alive;		/* hs objects not yet freed */
	bool closing;
	raft_uv_transport_close_cb close_cb;
	struct tr_link links[LINK_TRACK_MAX];
	int nlinks;
	struct grp_hs_cfg hs_cfg; /* set by tr_init (our raft id) */
	struct grp_hs_log hs_log;
};

/* The leader's work for one replacement (loop thread). */
struct join {
	bool active;
	int node;
	uint64_t id;
	struct raft_change change;
};

struct nslog {
	/* Set by nslog_new, read-only after. */
	int self, nodes;
	uint64_t inc;
	struct sockaddr_storage listen_sa; /* where our raft binds */
	socklen_t listen_salen;
	char *listen;
	char *dir;
	int lockfd;		/* dir's LOCK_FILE, flock()ed (dir_lock); -1
				 * before nslog_check or nslog_start */
	char *group;
	size_t group_len;
	struct grp_secret secret;
	struct peer_xport *x;
	struct nslog_fsm fsm;
	unsigned election_ms, heartbeat_ms, snapshot_every;

	pthread_mutex_t lock;
	pthread_cond_t cond;	/* broadcast at every change below */
	/* Where each node's raft listens now ("Addresses" above). */
	struct nslog_where {
		char addr[NSLOG_ADDR_MAX]; /* "" while unknown */
		struct sockaddr_storage sa;
		socklen_t salen;
	} *where;		/* [nodes], protected by lock */
	int unknown;		/* other nodes at "", protected by lock */
	struct pstate ps;	/* protected by lock */
	struct op *ops, **ops_tail; /* protected by lock */
	struct pending *pending; /* protected by lock */
	struct nslog_status st;	/* protected by lock */
	uint64_t next_rid;	/* protected by lock */
	int inflight;		/* submits waiting, protected by lock */
	int fwd;		/* peers' requests held, protected by lock */
	size_t fwd_bytes;	/* their entries' bytes, protected by lock */
	int callers;		/* in submit/barrier, protected by lock */
	bool stopping;		/* protected by lock */
	bool loop_closed;	/* no more ops, protected by lock */
	bool stop_req;		/* the loop must stop, protected by lock */
	bool running;		/* between start and stop (caller's thread) */
	bool start_failed;	/* raft could not start, protected by lock */
	_Atomic uint64_t auth_failed, bad_hs;

	pthread_t loop_thread, ctl_thread;
	bool loop_made, ctl_made;
	/* A survivor told to join a forced log again (rejoin_main). */
	pthread_t rejoin_thread;
	bool rejoin_made;	/* protected by lock */
	int rejoin_hint;	/* the node that forced it, protected by lock */
	/* The voters of the configuration (refresh_status). */
	raft_id voter_ids[GRP_MAX_NODES]; /* protected by lock */
	int nvoter_ids;		/* protected by lock */
	struct rft_wq *answers;	/* the worker: jobs, answers to peers */

	/* Loop thread only. */
	uv_loop_t loop;
	uv_async_t wake;
	uv_check_t check;
	bool loop_init;
	bool raft_up;		/* raft_init done, raft_close not called */
	bool raft_closing;
	bool stop_seen;
	/*
	 * A restart of raft in this process (forced recovery): the OP_CLOSE
	 * waiting for raft_closed, and the index the state machine had
	 * applied then.  Raft applies its log again from its last snapshot
	 * after a restart; what this state machine holds already (the same
	 * entries: "Forced recovery" above) is skipped, not applied twice.
	 */
	struct op *closing_op;
	bool restarting;
	uint64_t floor;
	struct raft raft;
	struct raft_io io;
	struct raft_fsm rfsm;
	struct tr tr;
	struct join join;
	/* A new leader's barrier (on_check); in flight while busy. */
	struct raft_barrier lead_barrier;
	bool lead_barrier_busy;
	uint64_t lead_barrier_term;	/* the term it was made in */
	/* The last commit push (commit_push); in flight while busy. */
	struct raft_barrier push;
	bool push_busy;
	uint64_t push_term, push_index;	/* where it was appended */
	struct apply_out out;
#ifdef RFT_TEST_HOOKS
	bool cut[GRP_MAX_NODES]; /* nslog_test_cut() */
#endif
	struct dd_slot (*dd)[DEDUPE_SLOTS]; /* [GRP_MAX_NODES] */
	struct gen_rec gen[GRP_MAX_NODES];
};

/*
 * Has a unit test cut raft's links with @node (nslog_test_cut)?  Never in
 * the daemon: the cut is built only with RFT_TEST_HOOKS.
 */
static inline bool tr_is_cut(const struct nslog *l, int node)
{
#ifdef RFT_TEST_HOOKS
	return l->cut[node];
#else
	(void)l;
	(void)node;
	return false;
#endif
}

/* --- small helpers -------------------------------------------------------- */

/* Wait on @c under l->lock until woken or CLOCK_MONOTONIC ms @until. */
static void wait_until(struct nslog *l, pthread_cond_t *c, uint64_t until)
{
	rft_cond_wait_until(c, &l->lock, until);
}

/* The node a raft id belongs to, or -1 when it is no node of this group. */
static int node_of(const struct nslog *l, raft_id id)
{
	int node;

	if (id == 0)
		return -1;
	node = (int)((id - 1) % GRP_MAX_NODES);
	return node < l->nodes ? node : -1;
}

static uint64_t gen_of(raft_id id)
{
	return (id - 1) / GRP_MAX_NODES;
}

static raft_id make_id(int node, uint64_t gen)
{
	return (raft_id)node + 1 + (raft_id)GRP_MAX_NODES * gen;
}

#define LABEL_MAX 32

/*
 * What raft's configuration calls raft id @id: a name of its own, never
 * where to connect ("Addresses" in the head comment).  @len >= LABEL_MAX.
 */
static void raft_label(raft_id id, char *buf, size_t len)
{
	snprintf(buf, len, "raft-%llu", (unsigned long long)id);
}

/*
 * Zero bytes after a payload of @len bytes.  raft_uv writes entries to its
 * segments as if each were a multiple of 8 bytes long (it asserts so, and
 * Debian builds it without asserts): one that is not shifts every entry
 * after it in the segment, which then no longer loads after a restart.
 */
static uint32_t ent_pad(size_t len)
{
	return (uint32_t)((8 - len % 8) % 8);
}

/* Encode an entry's header at @p, for a payload of @len bytes. */
static void ent_hdr(uint8_t *p, int kind, int node, uint64_t inc,
		    uint64_t rid, size_t len)
{
	p[0] = ENT_VERSION;
	p[1] = (uint8_t)kind;
	rft_put_le16(p + 2, (uint16_t)node);
	rft_put_le32(p + 4, ent_pad(len));
	rft_put_le64(p + 8, inc);
	rft_put_le64(p + 16, rid);
}

/* Decode an entry (header and payload).  0 or -EPROTO. */
static int ent_decode(const struct nslog *l, const void *buf, size_t len,
		      struct ent *e)
{
	const uint8_t *p = buf;
	uint32_t pad;

	if (len < ENT_HDR_LEN || p[0] != ENT_VERSION)
		return -EPROTO;
	/* Padded to a multiple of 8 with 0 to 7 zero bytes. */
	pad = rft_get_le32(p + 4);
	if (pad > 7 || pad > len - ENT_HDR_LEN ||
	    pad != ent_pad(len - ENT_HDR_LEN - pad))
		return -EPROTO;
	for (uint32_t i = 0; i < pad; i++)
		if (p[len - 1 - i])
			return -EPROTO;
	e->kind = p[1];
	e->node = rft_get_le16(p + 2);
	e->inc = rft_get_le64(p + 8);
	e->rid = rft_get_le64(p + 16);
	e->payload = p + ENT_HDR_LEN;
	e->len = len - ENT_HDR_LEN - pad;
	if (e->node >= l->nodes || e->inc == 0 || e->rid == 0)
		return -EPROTO;
	if (e->kind == ENT_GEN && e->len != 0)
		return -EPROTO;
	if (e->kind != ENT_USER && e->kind != ENT_GEN)
		return -EPROTO;
	return 0;
}

/* Parse "host:port" or "[v6]:port" and resolve it (blocking). */
static int resolve(const char *addr, struct sockaddr_storage *ss,
		   socklen_t *len)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
	struct addrinfo *res = NULL;
	char host[256];
	const char *colon, *port;
	size_t hl;
	int rc;

	colon = strrchr(addr, ':');
	if (!colon || colon == addr || !colon[1])
		return -EINVAL;
	port = colon + 1;
	if (addr[0] == '[') {
		if (colon[-1] != ']')
			return -EINVAL;
		addr++;
		hl = (size_t)(colon - 1 - addr);
	} else {
		hl = (size_t)(colon - addr);
	}
	if (hl == 0 || hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, addr, hl);
	host[hl] = '\0';
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0 || !res)
		return -EINVAL;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static int raft_errno(int rv)
{
	switch (rv) {
	case 0:
		return 0;
	case RAFT_NOMEM:
		return -ENOMEM;
	case RAFT_NOTLEADER:
		return -EAGAIN;
	case RAFT_LEADERSHIPLOST:
		return -ECANCELED;
	case RAFT_SHUTDOWN:
	case RAFT_CANCELED:
		return -ESHUTDOWN;
	case RAFT_CANTCHANGE:
	case RAFT_BUSY:
		return -EBUSY;
	case RAFT_NOCONNECTION:
		return -ENOTCONN;
	case RAFT_NOSPACE:
		return -ENOSPC;
	case RAFT_TOOBIG:
		return -EMSGSIZE;
	default:
		return -EIO;
	}
}

/* --- nslog.state ---------------------------------------------------------- */

static int path_in_dir(const struct nslog *l, const char *name, char *out,
		       size_t len)
{
	int n = snprintf(out, len, "%s/%s", l->dir, name);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

/*
 * Write @ps to nslog.state: a new file, synced, renamed over the old one,
 * the directory synced.  Only nslog_start() and then the control thread
 * write it, never under l->lock (it waits for the disk).
 */
static int ps_save(struct nslog *l, const struct pstate *ps)
{
	char path[4096], tmp[4096];
	FILE *f;
	int fd, i, rc = 0;

	if (path_in_dir(l, STATE_FILE, path, sizeof(path)) < 0 ||
	    path_in_dir(l, STATE_TMP, tmp, sizeof(tmp)) < 0)
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	f = fdopen(fd, "w");
	if (!f) {
		rc = -errno;
		close(fd);
		goto out;
	}
	fprintf(f, "reftfs-nslog 1\ngroup %s\nnode %d\nnodes %d\n", l->group,
		l->self, l->nodes);
	fprintf(f, "state %s\nid %llu\nbootstrap %d\njoined %d\nstarted %d\n"
		"incs",
		ps->state == PS_ACTIVE ? "active" : "unknown",
		(unsigned long long)ps->raft_id, ps->bootstrap, ps->joined,
		ps->started);
	for (i = 0; i < ps->nincs; i++)
		fprintf(f, " %llx", (unsigned long long)ps->incs[i]);
	fprintf(f, "\nwitness");
	for (i = 0; i < l->nodes; i++)
		if (ps->seen_empty[i])
			fprintf(f, " %d:%llx", i,
				(unsigned long long)ps->seen_empty[i]);
	fprintf(f, "\n");
	if (fflush(f) != 0 || fsync(fileno(f)) < 0)
		rc = -errno;
	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc == 0)
		rc = fsync_dir(l->dir);
out:
	if (rc < 0) {
		unlink(tmp);
		rft_err("cannot write %s: %s", path, strerror(-rc));
	}
	return rc;
}

/* Parse one "key rest" line of nslog.state into @ps.  0 or -EINVAL. */
static int ps_line(struct nslog *l, struct pstate *ps, char *line)
{
	char *key = line, *rest = strchr(line, ' ');
	unsigned long long v;
	char *tok, *save = NULL;
	int n, d;

	if (rest)
		*rest++ = '\0';
	else
		rest = line + strlen(line);
	if (strcmp(key, "reftfs-nslog") == 0)
		return strcmp(rest, "1") == 0 ? 0 : -EINVAL;
	if (strcmp(key, "group") == 0)
		return strcmp(rest, l->group) == 0 ? 0 : -EINVAL;
	if (strcmp(key, "node") == 0)
		return sscanf(rest, "%d", &d) == 1 && d == l->self ? 0 :
								      -EINVAL;
	if (strcmp(key, "nodes") == 0)
		return sscanf(rest, "%d", &d) == 1 && d == l->nodes ? 0 :
								       -EINVAL;
	if (strcmp(key, "state") == 0) {
		if (strcmp(rest, "active") == 0)
			ps->state = PS_ACTIVE;
		else if (strcmp(rest, "unknown") == 0)
			ps->state = PS_UNKNOWN;
		else
			return -EINVAL;
		return 0;
	}
	if (strcmp(key, "id") == 0) {
		if (sscanf(rest, "%llu", &v) != 1)
			return -EINVAL;
		ps->raft_id = v;
		return 0;
	}
	if (strcmp(key, "bootstrap") == 0 || strcmp(key, "joined") == 0 ||
	    strcmp(key, "started") == 0) {
		if (sscanf(rest, "%d", &d) != 1 || (d != 0 && d != 1))
			return -EINVAL;
		if (key[0] == 'b')
			ps->bootstrap = d;
		else if (key[0] == 'j')
			ps->joined = d;
		else
			ps->started = d;
		return 0;
	}
	if (strcmp(key, "incs") == 0) {
		for (tok = strtok_r(rest, " ", &save); tok;
		     tok = strtok_r(NULL, " ", &save)) {
			if (sscanf(tok, "%llx", &v) != 1 ||
			    ps->nincs == MAX_INCS)
				return -EINVAL;
			ps->incs[ps->nincs++] = v;
		}
		return 0;
	}
	if (strcmp(key, "witness") == 0) {
		for (tok = strtok_r(rest, " ", &save); tok;
		     tok = strtok_r(NULL, " ", &save)) {
			if (sscanf(tok, "%d:%llx%n", &d, &v, &n) != 2 ||
			    tok[n] || d < 0 || d >= l->nodes)
				return -EINVAL;
			ps->seen_empty[d] = v;
		}
		return 0;
	}
	return -EINVAL;
}

/*
 * Load nslog.state into @ps: 0, -ENOENT when there is none, -EINVAL when
 * it is damaged or belongs to another group, node or group size.
 */
static int ps_load(struct nslog *l, struct pstate *ps)
{
	char path[4096], line[4096], shown[4096];
	FILE *f;
	int rc = 0;

	memset(ps, 0, sizeof(*ps));
	if (path_in_dir(l, STATE_FILE, path, sizeof(path)) < 0)
		return -ENAMETOOLONG;
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (rc == 0 && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		memcpy(shown, line, sizeof(shown)); /* ps_line splits it */
		rc = ps_line(l, ps, line);
		if (rc < 0)
			rft_err("%s: cannot use line \"%s\" (this node is %d "
				"of %d in group %s)",
				path, shown, l->self, l->nodes, l->group);
	}
	fclose(f);
	if (rc == 0 && ps->state == PS_ACTIVE && node_of(l, ps->raft_id) !=
							 l->self) {
		rft_err("%s: raft id %llu is not node %d's", path,
			(unsigned long long)ps->raft_id, l->self);
		rc = -EINVAL;
	}
	return rc;
}

/* True when @dir holds files of raft's (a log without nslog.state). */
static bool dir_has_raft_files(const char *dir)
{
	static const char *const names[] = { "metadata1", "metadata2" };
	char path[4096];
	struct stat st;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (stat(path, &st) == 0)
			return true;
	}
	return false;
}

/*
 * Remove raft's files from the data dir (a survivor that joins a forced
 * log again under a new id): everything but nslog.state and the lock.
 * Loop thread, raft closed.  0 or -errno.
 */
static int wipe_raft_files(struct nslog *l)
{
	DIR *d = opendir(l->dir);
	struct dirent *de;
	int rc = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		const char *n = de->d_name;

		if (!strcmp(n, ".") || !strcmp(n, "..") ||
		    !strcmp(n, STATE_FILE) || !strcmp(n, STATE_TMP) ||
		    !strcmp(n, LOCK_FILE))
			continue;
		if (unlinkat(dirfd(d), n, 0) < 0 && errno != ENOENT && !rc)
			rc = -errno;
	}
	closedir(d);
	if (rc == 0)
		rc = fsync_dir(l->dir);
	if (rc < 0)
		rft_err("node %d: cannot empty %s of raft's files: %s",
			l->self, l->dir, strerror(-rc));
	return rc;
}

static int mkdir_p(const char *dir)
{
	char path[4096];
	size_t len = strlen(dir);

	if (len == 0 || len >= sizeof(path))
		return -EINVAL;
	memcpy(path, dir, len + 1);
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/*
 * Write this process's pid into the lock file held on @fd, for the message
 * of a daemon refused the dir.  A daemon that goes to the background
 * after taking the lock (fuse_daemonize forks) writes it again from the
 * child at nslog_start().  Nothing depends on it: a failure is only
 * logged at debug level.
 */
static void lock_note_pid(int fd)
{
	char buf[24];
	int n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());

	if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, (size_t)n, 0) != n)
		rft_dbg("cannot note the pid in the state dir's lock file: %s",
			strerror(errno));
}

/*
 * The pid noted in the lock file on @fd (held by someone else), or 0 when
 * none is there or no such process runs (it was noted before a fork and
 * its process has exited since).
 */
static long lock_holder(int fd)
{
	char buf[24];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	long pid;

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	if (sscanf(buf, "%ld", &pid) != 1 || pid <= 0 ||
	    (kill((pid_t)pid, 0) < 0 && errno != EPERM))
		return 0;
	return pid;
}

/*
 * Take the data dir's lock (the dir exists): from now until nslog_free()
 * no other nslog, in this process or another, may use it.  0 (also when
 * already held), -EBUSY when another holds it, or -errno; logs why.
 * Never waits.
 */
static int dir_lock(struct nslog *l)
{
	char path[4096];
	long pid;
	int fd, rc;

	if (l->lockfd >= 0)
		return 0;
	if (path_in_dir(l, LOCK_FILE, path, sizeof(path)) < 0)
		return -ENAMETOOLONG;
	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		rft_err("node %d: cannot open %s: %s", l->self, path,
			strerror(-rc));
		return rc;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
		lock_note_pid(fd);
		l->lockfd = fd;
		return 0;
	}
	rc = -errno;
	if (rc != -EWOULDBLOCK) {
		rft_err("node %d: cannot lock %s: %s", l->self, path,
			strerror(-rc));
		close(fd);
		return rc;
	}
	pid = lock_holder(fd);
	close(fd);
	if (pid > 0)
		rft_err("node %d: state dir %s is in use by another reftfsd "
			"(pid %ld): one daemon per node's state dir; stop that "
			"one first",
			l->self, l->dir, pid);
	else
		rft_err("node %d: state dir %s is in use by another reftfsd: "
			"one daemon per node's state dir; stop that one first",
			l->self, l->dir);
	return -EBUSY;
}

/* --- the raft transport: TCP with our handshake --------------------------- */

static void tr_maybe_closed(struct tr *t);

struct hs_write {
	uv_write_t w;
	size_t len;
	uint8_t data[];
};

static void hs_write_done(uv_write_t *w, int status)
{
	/* A failed write shows as a failed read or the handshake's timer. */
	(void)status;
	free(w->data);
}

static int hs_write(struct hs *hs, const void *buf, size_t len)
{
	struct hs_write *wr = malloc(sizeof(*wr) + len);
	uv_buf_t b;
	int rc;

	if (!wr)
		return -ENOMEM;
	wr->len = len;
	memcpy(wr->data, buf, len);
	wr->w.data = wr;
	b = uv_buf_init((char *)wr->data, (unsigned)len);
	rc = uv_write(&wr->w, (uv_stream_t *)hs->tcp, &b, 1, hs_write_done);
	if (rc < 0)
		free(wr);
	return rc;
}

static void hs_unlist(struct hs *hs)
{
	if (!hs->listed)
		return;
	*hs->pprev = hs->next;
	if (hs->next)
		hs->next->pprev = hs->pprev;
	hs->listed = false;
	if (hs->inbound)
		hs->t->n_inbound--;
}

static void hs_free(struct hs *hs)
{
	struct tr *t = hs->t;

	if (!hs->handed) {
		if (hs->tcp)
			raft_free(hs->tcp);
		if (!hs->inbound && hs->req)
			hs->req->cb(hs->req, NULL, hs->status);
	}
	free(hs);
	t->n_alive--;
	tr_maybe_closed(t);
}

static void hs_closed(uv_handle_t *h)
{
	struct hs *hs = h->data;

	if (--hs->open_handles == 0)
		hs_free(hs);
}

/* Give up on @hs: close its handles; raft hears @status (outbound). */
static void hs_fail(struct hs *hs, int status)
{
	if (!hs->listed)
		return;
	hs_unlist(hs);
	hs->status = status;
	if (hs->reading)
		uv_read_stop((uv_stream_t *)hs->tcp);
	hs->reading = false;
	uv_close((uv_handle_t *)hs->tcp, hs_closed);
	uv_close((uv_handle_t *)&hs->timer, hs_closed);
}

static void tr_track(struct tr *t, int node, bool inbound, uv_tcp_t *tcp)
{
	struct tr_link k = { .node = node, .inbound = inbound };
	uv_os_fd_t fd;

	if (uv_fileno((uv_handle_t *)tcp, &fd) < 0)
		return;
	k.fd = fd;
	k.alen = sizeof(k.a);
	k.blen = sizeof(k.b);
	if (getsockname(fd, (struct sockaddr *)&k.a, &k.alen) < 0 ||
	    getpeername(fd, (struct sockaddr *)&k.b, &k.blen) < 0)
		return;
	if (t->nlinks == LINK_TRACK_MAX) {
		/* The oldest are the likeliest to be closed already. */
		memmove(&t->links[0], &t->links[1],
			sizeof(t->links[0]) * (LINK_TRACK_MAX - 1));
		t->nlinks--;
	}
	t->links[t->nlinks++] = k;
}

/*
 * The name raft knows raft id @id by: the one in this node's
 * configuration, else its label.  raft_uv remakes its link to an id
 * whenever the name it is handed for it changes, so an inbound link must
 * carry the same name as raft's own sends to that id.  Loop thread.
 */
static void label_of(struct nslog *l, raft_id id, char *buf, size_t len)
{
	const struct raft_configuration *c = &l->raft.configuration;

	for (unsigned i = 0; i < c->n; i++) {
		if (c->servers[i].id == id) {
			snprintf(buf, len, "%s", c->servers[i].address);
			return;
		}
	}
	raft_label(id, buf, len);
}

/* The handshake succeeded: the stream is raft's from now on. */
static void hs_done(struct hs *hs)
{
	struct tr *t = hs->t;
	struct nslog *l = t->l;

	hs_unlist(hs);
	uv_read_stop((uv_stream_t *)hs->tcp);
	hs->reading = false;
	hs->handed = true;
	hs->open_handles = 1; /* the timer; tcp is raft's */
	uv_close((uv_handle_t *)&hs->timer, hs_closed);
	tr_track(t, hs->peer_node, hs->inbound, hs->tcp);
	if (hs->inbound) {
		char label[NSLOG_ADDR_MAX];

		label_of(l, hs->peer_id, label, sizeof(label));
		t->accept_cb(&t->iface, hs->peer_id, label,
			     (uv_stream_t *)hs->tcp);
	} else {
		hs->req->cb(hs->req, (uv_stream_t *)hs->tcp, 0);
	}
}

static void hs_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void hs_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

/*
 * The handshake failed with @rc (hs.c's -EACCES: a refusal; anything
 * else: malformed or slow): count it, log it, close.
 */
static void hs_refuse(struct hs *hs, int rc)
{
	struct tr *t = hs->t;

	atomic_fetch_add(rc == -EACCES ? &t->l->auth_failed : &t->l->bad_hs,
			 1);
	grp_hs_log(&t->hs_log, &hs->g, rc);
	hs_fail(hs, RAFT_NOCONNECTION);
}

/*
 * Send what the handshake has to send, then read what it wants next, or
 * hand the stream to raft when it is done (@rc GRP_HS_DONE).
 */
static void hs_next(struct hs *hs, int rc)
{
	const uint8_t *out;
	uint32_t n;

	hs->peer_node = hs->g.peer_node;
	hs->peer_id = hs->g.peer_id ? hs->g.peer_id : hs->peer_id;
	if (hs->peer_node >= 0 && tr_is_cut(hs->t->l, hs->peer_node))
		return hs_fail(hs, RAFT_NOCONNECTION); /* a test's cut */
	n = grp_hs_out(&hs->g, &out);
	if (n && hs_write(hs, out, n) < 0)
		return hs_fail(hs, RAFT_NOCONNECTION);
	if (rc == GRP_HS_DONE)
		return hs_done(hs);
	hs->want = grp_hs_want(&hs->g, &hs->dst);
	hs->got = 0;
	if (!hs->reading) {
		if (uv_read_start((uv_stream_t *)hs->tcp, hs_alloc, hs_read) <
		    0)
			return hs_fail(hs, RAFT_NOCONNECTION);
		hs->reading = true;
	}
}

/* Exactly the bytes still missing from the current message. */
static void hs_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct hs *hs = h->data;

	(void)suggested;
	*buf = uv_buf_init((char *)hs->dst + hs->got,
			   (unsigned)(hs->want - hs->got));
}

static void hs_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct hs *hs = s->data;
	int rc;

	(void)buf;
	if (!hs->listed || n == 0)
		return;
	if (n < 0)
		return hs_fail(hs, RAFT_NOCONNECTION);
	hs->got += (uint32_t)n;
	if (hs->got < hs->want)
		return;
	rc = grp_hs_feed(&hs->g);
	if (rc < 0)
		return hs_refuse(hs, rc);
	hs_next(hs, rc);
}

static void hs_timeout(uv_timer_t *timer)
{
	struct hs *hs = timer->data;

	if (hs->connecting) {
		hs_fail(hs, RAFT_NOCONNECTION); /* nobody answers: no log */
		return;
	}
	hs_refuse(hs, -ETIMEDOUT);
}

/* A new handshake object with its timer started; listed in t->hs. */
static struct hs *hs_new(struct tr *t, bool inbound)
{
	struct hs *hs = calloc(1, sizeof(*hs));

	if (!hs)
		return NULL;
	hs->t = t;
	hs->inbound = inbound;
	hs->peer_node = -1;
	hs->tcp = raft_malloc(sizeof(*hs->tcp));
	if (!hs->tcp) {
		free(hs);
		return NULL;
	}
	uv_tcp_init(&t->l->loop, hs->tcp);
	hs->tcp->data = hs;
	uv_timer_init(&t->l->loop, &hs->timer);
	hs->timer.data = hs;
	uv_timer_start(&hs->timer, hs_timeout, GRP_HS_MS, 0);
	hs->open_handles = 2;
	hs->listed = true;
	hs->next = t->hs;
	if (t->hs)
		t->hs->pprev = &hs->next;
	hs->pprev = &t->hs;
	t->hs = hs;
	if (inbound)
		t->n_inbound++;
	t->n_alive++;
	return hs;
}

static void tr_on_conn(uv_stream_t *srv, int status)
{
	struct tr *t = srv->data;
	struct hs *hs;

	if (status < 0 || t->closing)
		return;
	hs = hs_new(t, true);
	if (!hs)
		return;
	grp_hs_server(&hs->g, &t->hs_cfg); /* the cfg was checked */
	if (uv_accept(srv, (uv_stream_t *)hs->tcp) < 0) {
		hs_fail(hs, RAFT_NOCONNECTION);
		return;
	}
	if (t->n_inbound > HS_MAX_INBOUND) {
		hs->g.why = "too many handshakes at once";
		return hs_refuse(hs, -EBUSY);
	}
	hs_next(hs, GRP_HS_MORE);
}

static void hs_connected(uv_connect_t *req, int status)
{
	struct hs *hs = req->data;
	struct tr *t = hs->t;

	if (!hs->listed)
		return; /* failed or closing: the handles are being closed */
	hs->connecting = false;
	if (status < 0)
		return hs_fail(hs, RAFT_NOCONNECTION);
	if (grp_hs_client(&hs->g, &t->hs_cfg, (uint32_t)hs->peer_node,
			  hs->peer_id) < 0)
		return hs_fail(hs, RAFT_NOCONNECTION);
	hs_next(hs, GRP_HS_MORE);
}

/* The handshake's server check: is @id a raft id of node @node? */
static const char *tr_check_peer(void *ctx, uint32_t node, uint64_t id)
{
	struct nslog *l = ctx;

	if (node_of(l, id) != (int)node)
		return "a raft id of another node";
	/* Loop thread: l->gen is the log's, applied here. */
	if (gen_of(id) < l->gen[node].gen)
		return "an old raft id of a node replaced or removed since "
		       "(its state dir must be emptied to join again)";
	return NULL;
}

/* raft_uv_transport->init: called by raft_init() through raft_uv. */
static int tr_init(struct raft_uv_transport *iface, raft_id id,
		   const char *address)
{
	struct tr *t = iface->impl;
	struct nslog *l = t->l;

	(void)address;
	t->id = id;
	t->hs_cfg = (struct grp_hs_cfg){
		.secret = &l->secret,
		.group = l->group,
		.group_len = l->group_len,
		.link = GRP_HS_RAFT,
		.self = (uint32_t)l->self,
		.nodes = (uint32_t)l->nodes,
		.self_id = id,
		.check = tr_check_peer,
		.ctx = l,
	};
	uv_tcp_init(&t->l->loop, &t->listener);
	t->listener.data = t;
	t->listener_init = true;
	return 0;
}

static int tr_listen(struct raft_uv_transport *iface, raft_uv_accept_cb cb)
{
	struct tr *t = iface->impl;
	struct nslog *l = t->l;
	int rc;

	t->accept_cb = cb;
	rc = uv_tcp_bind(&t->listener,
			 (const struct sockaddr *)&l->listen_sa, 0);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&t->listener, 64, tr_on_conn);
	if (rc < 0) {
		snprintf(iface->errmsg, sizeof(iface->errmsg),
			 "listen on %s: %s", l->listen, uv_strerror(rc));
		rft_err("node %d: raft cannot listen on %s: %s", l->self,
			l->listen, uv_strerror(rc));
		return RAFT_IOERR;
	}
	return 0;
}

static int tr_connect(struct raft_uv_transport *iface,
		      struct raft_uv_connect *req, raft_id id,
		      const char *address, raft_uv_connect_cb cb)
{
	struct tr *t = iface->impl;
	struct nslog *l = t->l;
	int node = node_of(l, id);
	struct sockaddr_storage sa;
	bool known;
	struct hs *hs;

	(void)address; /* a label: we go where the node listens now */
	if (t->closing)
		return RAFT_CANCELED;
	if (node < 0 || node == l->self || tr_is_cut(l, node))
		return RAFT_NOCONNECTION;
	pthread_mutex_lock(&l->lock);
	known = l->where[node].addr[0] != '\0';
	sa = l->where[node].sa;
	pthread_mutex_unlock(&l->lock);
	if (!known)
		return RAFT_NOCONNECTION; /* not named yet: raft retries */
	hs = hs_new(t, false);
	if (!hs)
		return RAFT_NOMEM;
	req->cb = cb;
	hs->req = req;
	hs->peer_id = id;
	hs->peer_node = node;
	hs->connecting = true;
	hs->creq.data = hs;
	if (uv_tcp_connect(&hs->creq, hs->tcp, (const struct sockaddr *)&sa,
			   hs_connected) < 0) {
		hs->req = NULL; /* failed here: raft retries on its timer */
		hs_fail(hs, RAFT_NOCONNECTION);
		return RAFT_NOCONNECTION;
	}
	return 0;
}

static void tr_listener_closed(uv_handle_t *h)
{
	struct tr *t = h->data;

	t->listener_closed = true;
	tr_maybe_closed(t);
}

static void tr_maybe_closed(struct tr *t)
{
	raft_uv_transport_close_cb cb = t->close_cb;

	if (!t->closing || !t->listener_closed || t->n_alive > 0 || !cb)
		return;
	t->close_cb = NULL;
	cb(&t->iface);
}

/* Close the listener and fail every handshake in progress. */
static void tr_shutdown(struct tr *t)
{
	t->closing = true;
	while (t->hs)
		hs_fail(t->hs, RAFT_CANCELED);
	if (t->listener_init && !uv_is_closing((uv_handle_t *)&t->listener))
		uv_close((uv_handle_t *)&t->listener, tr_listener_closed);
	else if (!t->listener_init)
		t->listener_closed = true;
}

static void tr_close(struct raft_uv_transport *iface,
		     raft_uv_transport_close_cb cb)
{
	struct tr *t = iface->impl;

	t->close_cb = cb;
	tr_shutdown(t);
	tr_maybe_closed(t);
}

static void tr_setup(struct nslog *l)
{
	struct tr *t = &l->tr;

	memset(t, 0, sizeof(*t));
	t->l = l;
	t->iface.impl = t;
	t->iface.init = tr_init;
	t->iface.listen = tr_listen;
	t->iface.connect = tr_connect;
	t->iface.close = tr_close;
}

static bool same_addr(const struct sockaddr_storage *a, socklen_t alen,
		      const struct sockaddr_storage *b, socklen_t blen)
{
	return alen == blen && memcmp(a, b, alen) == 0;
}

/*
 * Close the raft links with @node (-1: none), only those this node made
 * when @outbound, and forget those already closed.
 */
static void tr_close_links(struct nslog *l, int node, bool outbound)
{
	struct tr *t = &l->tr; /* all zero before raft's first start */
	struct sockaddr_storage a, b;
	socklen_t alen, blen;
	int i, j = 0;

	for (i = 0; i < t->nlinks; i++) {
		struct tr_link *k = &t->links[i];
		bool alive;

		alen = sizeof(a);
		blen = sizeof(b);
		/* Still the same connection (the fd may have been reused)? */
		alive = getsockname(k->fd, (struct sockaddr *)&a, &alen) == 0 &&
			getpeername(k->fd, (struct sockaddr *)&b, &blen) == 0 &&
			same_addr(&a, alen, &k->a, k->alen) &&
			same_addr(&b, blen, &k->b, k->blen);
		if (alive && k->node == node && !(outbound && k->inbound)) {
			shutdown(k->fd, SHUT_RDWR);
			alive = false;
		}
		if (alive)
			t->links[j++] = *k;
	}
	t->nlinks = j;
}

#ifdef RFT_TEST_HOOKS
/* Test hook: refuse raft links with @node, and cut those made. */
static void tr_cut(struct nslog *l, int node, bool cut)
{
	l->cut[node] = cut;
	tr_close_links(l, cut ? node : -1, false);
}
#endif

/* --- the state machine around the caller's: dedupe, generations ---------- */

/* The slot of (node, inc), taken over from the least recently used. */
static struct dd_slot *dd_slot_for(struct nslog *l, int node, uint64_t inc,
				   uint64_t index)
{
	struct dd_slot *s = l->dd[node], *victim = &s[0];
	int i;

	for (i = 0; i < DEDUPE_SLOTS; i++)
		if (s[i].inc == inc)
			return &s[i];
	/* Deterministic on every node: the same entries at the same index. */
	for (i = 0; i < DEDUPE_SLOTS; i++) {
		if (s[i].inc == 0) {
			victim = &s[i];
			break;
		}
		if (s[i].last_index < victim->last_index)
			victim = &s[i];
	}
	memset(victim, 0, sizeof(*victim));
	victim->inc = inc;
	victim->last_index = index;
	return victim;
}

/* What apply must do with request @rid; DD_NEW marks it applied. */
static enum dd_verdict dd_check(struct dd_slot *s, uint64_t rid, int *res,
				bool mark)
{
	uint64_t d;

	if (rid > s->max_rid) {
		if (!mark)
			return DD_NEW;
		d = rid - s->max_rid;
		s->bits = d >= DEDUPE_WINDOW ? 0 : s->bits << d;
		s->bits |= 1;
		s->max_rid = rid;
		return DD_NEW;
	}
	d = s->max_rid - rid;
	if (d >= DEDUPE_WINDOW)
		return DD_STALE;
	if (s->bits & (1ull << d)) {
		*res = s->res[rid % DEDUPE_WINDOW];
		return DD_DUP;
	}
	if (mark)
		s->bits |= 1ull << d;
	return DD_NEW;
}

/* Wake this node's proposal @rid, if one still waits. */
static void pending_done(struct nslog *l, uint64_t rid, enum dd_verdict v,
			 int res)
{
	struct pending *p;

	pthread_mutex_lock(&l->lock);
	for (p = l->pending; p; p = p->next) {
		if (p->rid != rid || p->done)
			continue;
		p->done = true;
		p->stale = v == DD_STALE;
		p->result = res;
		pthread_cond_broadcast(&l->cond);
	}
	pthread_mutex_unlock(&l->lock);
}

static void apply_user(struct nslog *l, uint64_t index, const struct ent *e,
		       struct apply_out *o)
{
	struct dd_slot *s = dd_slot_for(l, e->node, e->inc, index);
	enum dd_verdict v;
	int res = 0;

	s->last_index = index;
	v = dd_check(s, e->rid, &res, true);
	if (v == DD_NEW) {
		res = l->fsm.apply(l->fsm.ctx, index, e->payload, e->len);
		s->res[e->rid % DEDUPE_WINDOW] = res;
	}
	o->rc = res;
	if (e->node == l->self && e->inc == l->inc)
		pending_done(l, e->rid, v, res);
}

static void apply_gen(struct nslog *l, const struct ent *e,
		      struct apply_out *o)
{
	struct gen_rec *g = &l->gen[e->node];

	/* A retry of the same request gets the same generation. */
	if (g->inc != e->inc || g->rid != e->rid) {
		g->gen++;
		g->inc = e->inc;
		g->rid = e->rid;
		if (raft_state(&l->raft) == RAFT_LEADER)
			rft_info("node %d: generation %u (raft id %llu) "
				 "handed to node %d",
				 l->self, g->gen,
				 (unsigned long long)make_id(e->node, g->gen),
				 e->node);
	}
	o->value = make_id(e->node, g->gen);
}

static int rfsm_apply(struct raft_fsm *f, const struct raft_buffer *buf,
		      void **result)
{
	struct nslog *l = f->data;
	/* raft 0.15 sets last_applied after each apply: this is our index. */
	uint64_t index = raft_last_applied(&l->raft) + 1;
	struct apply_out *o = &l->out;
	struct ent e;

	memset(o, 0, sizeof(*o));
	*result = o;
	if (index <= l->floor)
		return 0; /* applied before raft restarted */
	if (ent_decode(l, buf->base, buf->len, &e) < 0) {
		/* Only this file appends entries: nothing to apply. */
		rft_err("node %d: entry %llu is malformed, skipped", l->self,
			(unsigned long long)index);
		o->rc = -EPROTO;
		return 0;
	}
	if (e.kind == ENT_GEN)
		apply_gen(l, &e, o);
	else
		apply_user(l, index, &e, o);
	/*
	 * Never an error to raft: it would stop applying (and retry the same
	 * entry forever).  The caller's result travels in o->rc.
	 */
	return 0;
}

/*
 * The term of the entry at @index of raft's log in memory (log.c's
 * logTermOf, on struct raft_log of raft.h 0.15), 0 when it is not there.
 */
static raft_term term_at(const struct raft_log *lg, raft_index index)
{
	size_t n;

	if (index && index == lg->snapshot.last_index)
		return lg->snapshot.last_term;
	if (!lg->size)
		return 0;
	n = lg->front <= lg->back ? lg->back - lg->front
				  : lg->size - lg->front + lg->back;
	if (index <= lg->offset || index > lg->offset + n)
		return 0;
	return lg->entries[(lg->front + (size_t)(index - 1 - lg->offset)) %
			   lg->size]
	    .term;
}

/*
 * Snapshot: our tables, then the caller's state.  Version 2 with
 * snapshot_finalize: the buffers are ours, freed in rfsm_finalize.
 */
static int rfsm_snapshot(struct raft_fsm *f, struct raft_buffer *bufs[],
			 unsigned *n_bufs)
{
	struct nslog *l = f->data;
	void *ubuf = NULL;
	size_t ulen = 0, hlen;
	struct raft_buffer *b;
	uint32_t nd = 0, ng = 0;
	uint8_t *h, *p;
	int node, i, rc;
	raft_index at = raft_last_applied(&l->raft);
	raft_term term = term_at(&l->raft.log, at);

	/*
	 * Raft restarted and is applying again what this state machine
	 * holds already (l->floor): a snapshot now would be of a later state
	 * than its index says.  And raft_uv takes the snapshot of the highest
	 * term for the newest: the entry raft_recover appends has term 1, so
	 * a snapshot at it would pass for older than the one before it,
	 * whose entries the log then no longer has (a follower sent it waits
	 * for them for ever).  Either way raft takes one at a later entry.
	 */
	if (at < l->floor || (term && term < l->raft.log.snapshot.last_term))
		return RAFT_BUSY;
	rc = l->fsm.snapshot(l->fsm.ctx, &ubuf, &ulen);
	if (rc < 0) {
		rft_err("node %d: state machine snapshot failed: %s", l->self,
			strerror(-rc));
		return RAFT_IOERR;
	}
	for (node = 0; node < l->nodes; node++) {
		for (i = 0; i < DEDUPE_SLOTS; i++)
			nd += l->dd[node][i].inc != 0;
		ng += l->gen[node].gen != 0 || l->gen[node].inc != 0;
	}
	hlen = SNAP_HDR_LEN + (size_t)nd * DD_REC_LEN +
	       (size_t)ng * GEN_REC_LEN;
	h = malloc(hlen);
	b = calloc(2, sizeof(*b));
	if (!h || !b) {
		free(h);
		free(b);
		free(ubuf);
		return RAFT_NOMEM;
	}
	rft_put_le32(h, SNAP_MAGIC);
	rft_put_le32(h + 4, SNAP_VERSION);
	rft_put_le32(h + 8, nd);
	rft_put_le32(h + 12, ng);
	rft_put_le64(h + 16, ulen);
	/* raft takes a snapshot at its last applied entry. */
	rft_put_le64(h + 24, raft_last_applied(&l->raft));
	p = h + SNAP_HDR_LEN;
	for (node = 0; node < l->nodes; node++) {
		for (i = 0; i < DEDUPE_SLOTS; i++) {
			const struct dd_slot *s = &l->dd[node][i];

			if (!s->inc)
				continue;
			rft_put_le32(p, (uint32_t)node);
			rft_put_le32(p + 4, 0);
			rft_put_le64(p + 8, s->inc);
			rft_put_le64(p + 16, s->max_rid);
			rft_put_le64(p + 24, s->bits);
			rft_put_le64(p + 32, s->last_index);
			for (int k = 0; k < DEDUPE_WINDOW; k++)
				rft_put_le32(p + 40 + 4 * k,
					     (uint32_t)s->res[k]);
			p += DD_REC_LEN;
		}
	}
	for (node = 0; node < l->nodes; node++) {
		const struct gen_rec *g = &l->gen[node];

		if (!g->gen && !g->inc)
			continue;
		rft_put_le32(p, (uint32_t)node);
		rft_put_le32(p + 4, g->gen);
		rft_put_le64(p + 8, g->inc);
		rft_put_le64(p + 16, g->rid);
		p += GEN_REC_LEN;
	}
	b[0].base = h;
	b[0].len = hlen;
	*bufs = b;
	*n_bufs = 1;
	if (ulen) {
		b[1].base = ubuf;
		b[1].len = ulen;
		*n_bufs = 2;
	} else {
		free(ubuf);
	}
	return 0;
}

static int rfsm_finalize(struct raft_fsm *f, struct raft_buffer *bufs[],
			 unsigned *n_bufs)
{
	(void)f;
	if (*bufs) {
		for (unsigned i = 0; i < *n_bufs; i++)
			free((*bufs)[i].base);
		free(*bufs);
	}
	*bufs = NULL;
	*n_bufs = 0;
	return 0;
}

/* After a restore, wake this node's proposals the snapshot settled. */
static void pending_after_restore(struct nslog *l)
{
	struct dd_slot *s = NULL;
	struct pending *p;
	int i;

	for (i = 0; i < DEDUPE_SLOTS; i++)
		if (l->dd[l->self][i].inc == l->inc)
			s = &l->dd[l->self][i];
	if (!s)
		return;
	pthread_mutex_lock(&l->lock);
	for (p = l->pending; p; p = p->next) {
		int res = 0;
		enum dd_verdict v;

		if (p->done)
			continue;
		v = dd_check(s, p->rid, &res, false);
		if (v == DD_NEW)
			continue; /* not applied yet: its entry will come */
		p->done = true;
		p->stale = v == DD_STALE;
		p->result = res;
		pthread_cond_broadcast(&l->cond);
	}
	pthread_mutex_unlock(&l->lock);
}

/* Restore: raft hands us the buffer (ours to raft_free on success). */
static int rfsm_restore(struct raft_fsm *f, struct raft_buffer *buf)
{
	struct nslog *l = f->data;
	const uint8_t *h = buf->base, *p;
	uint32_t nd, ng, i;
	uint8_t per_node[GRP_MAX_NODES];
	uint64_t ulen, index = 0;
	size_t need, hlen = SNAP_HDR_LEN;
	int rc;

	if (buf->len < SNAP_HDR_LEN_V1 || rft_get_le32(h) != SNAP_MAGIC)
		goto bad;
	if (rft_get_le32(h + 4) == 1) {
		hlen = SNAP_HDR_LEN_V1; /* before the index was in it */
	} else if (rft_get_le32(h + 4) != SNAP_VERSION) {
		rft_err("node %d: a snapshot of format %u: this daemon reads "
			"formats 1 and %u only (a newer daemon wrote it?)",
			l->self, rft_get_le32(h + 4), SNAP_VERSION);
		return RAFT_MALFORMED;
	} else if (buf->len < SNAP_HDR_LEN) {
		goto bad;
	} else {
		index = rft_get_le64(h + 24);
	}
	nd = rft_get_le32(h + 8);
	ng = rft_get_le32(h + 12);
	ulen = rft_get_le64(h + 16);
	if (nd > (uint32_t)l->nodes * DEDUPE_SLOTS || ng > (uint32_t)l->nodes)
		goto bad;
	need = hlen + (size_t)nd * DD_REC_LEN +
	       (size_t)ng * GEN_REC_LEN;
	if (buf->len < need || buf->len - need != ulen)
		goto bad;
	memset(per_node, 0, sizeof(per_node));
	for (i = 0, p = h + hlen; i < nd; i++, p += DD_REC_LEN)
		if (rft_get_le32(p) >= (uint32_t)l->nodes ||
		    rft_get_le64(p + 8) == 0 ||
		    ++per_node[rft_get_le32(p)] > DEDUPE_SLOTS)
			goto bad;
	for (i = 0; i < ng; i++, p += GEN_REC_LEN)
		if (rft_get_le32(p) >= (uint32_t)l->nodes)
			goto bad;
	if (index && index <= l->floor) {
		/* Raft restarted: this state machine is past it already. */
		raft_free(buf->base);
		return 0;
	}
	rc = l->fsm.restore(l->fsm.ctx, index, h + need, ulen);
	if (rc < 0) {
		rft_err("node %d: state machine restore failed: %s", l->self,
			strerror(-rc));
		return RAFT_IOERR;
	}
	memset(l->dd, 0, sizeof(*l->dd) * GRP_MAX_NODES);
	memset(l->gen, 0, sizeof(l->gen));
	for (i = 0, p = h + hlen; i < nd; i++, p += DD_REC_LEN) {
		struct dd_slot *row = l->dd[rft_get_le32(p)], *s = NULL;

		/* Counted above: a free slot is there. */
		for (int k = 0; k < DEDUPE_SLOTS && !s; k++)
			if (!row[k].inc)
				s = &row[k];
		s->inc = rft_get_le64(p + 8);
		s->max_rid = rft_get_le64(p + 16);
		s->bits = rft_get_le64(p + 24);
		s->last_index = rft_get_le64(p + 32);
		for (int k = 0; k < DEDUPE_WINDOW; k++)
			s->res[k] = (int32_t)rft_get_le32(p + 40 + 4 * k);
	}
	for (i = 0; i < ng; i++, p += GEN_REC_LEN) {
		struct gen_rec *g = &l->gen[rft_get_le32(p)];

		g->gen = rft_get_le32(p + 4);
		g->inc = rft_get_le64(p + 8);
		g->rid = rft_get_le64(p + 16);
	}
	raft_free(buf->base);
	pending_after_restore(l);
	return 0;
bad:
	rft_err("node %d: snapshot of %zu bytes is malformed", l->self,
		buf->len);
	return RAFT_MALFORMED;
}

/* --- the loop thread: operations, raft's life ----------------------------- */

static void job_fn(struct rft_wq_item *w, bool cancel);

/*
 * Hand @j to the worker: dropped once it stopped, or when JOBS_MAX
 * answers wait.  Not under l->lock.
 */
static void queue_job(struct nslog *l, struct job *j)
{
	j->w.fn = job_fn;
	j->l = l;
	if (rft_wq_queue(l->answers, &j->w, RFT_WQ_HIGH) < 0)
		free(j); /* its asker times out and asks again */
}

/* A job answering request (@type, @rid) of @node; NULL without memory. */
static struct job *job_new(int node, uint16_t type, uint64_t rid)
{
	struct job *j = calloc(1, sizeof(*j));

	if (j) {
		j->node = node;
		j->type = type;
		j->rid = rid;
	}
	return j;
}

/* Answer request (@type, @rid) of @node: @rc, or 0 with @meta. */
static void answer(struct nslog *l, int node, uint16_t type, uint64_t rid,
		   int rc, const void *meta, uint32_t len)
{
	struct job *j = job_new(node, type, rid);

	if (!j)
		return; /* the peer times out and asks again */
	j->rc = rc;
	if (rc == 0 && len) {
		memcpy(j->meta, meta, len);
		j->meta_len = len;
	}
	queue_job(l, j);
}

static struct op *op_new(enum op_kind kind, bool local)
{
	struct op *op = calloc(1, sizeof(*op));

	if (op) {
		op->kind = kind;
		op->local = local;
		op->from = -1;
	}
	return op;
}

static void op_free(struct op *op)
{
	if (op->buf.base)
		raft_free(op->buf.base);
	free(op);
}

/* A peer's request is no longer held. */
static void fwd_release(struct nslog *l, struct op *op)
{
	pthread_mutex_lock(&l->lock);
	l->fwd--;
	l->fwd_bytes -= op->fwd_bytes;
	pthread_mutex_unlock(&l->lock);
}

/* @op is done: wake its waiter or answer its peer.  @op may be gone. */
static void op_finish(struct nslog *l, struct op *op, int rc, uint64_t value)
{
	uint8_t meta[8];
	uint32_t len = 0;

	if (op->local) {
		pthread_mutex_lock(&l->lock);
		op->rc = rc;
		op->value = value;
		op->done = true;
		if (op->abandoned) {
			pthread_mutex_unlock(&l->lock);
			op_free(op);
			return;
		}
		pthread_cond_broadcast(&l->cond);
		pthread_mutex_unlock(&l->lock);
		return;
	}
	if (op->from >= 0) {
		fwd_release(l, op);
		if (rc == 0 && op->ftype == NSLOG_T_JOIN) {
			meta[0] = (uint8_t)value;
			len = 1;
		} else if (rc == 0) {
			rft_put_le64(meta, value);
			len = 8;
		}
		answer(l, op->from, op->ftype, op->frid, rc, meta, len);
	}
	op_free(op);
}

/* Queue @op for the loop.  0, or -ESHUTDOWN (then @op is still ours). */
static int post_op(struct nslog *l, struct op *op)
{
	pthread_mutex_lock(&l->lock);
	if (l->loop_closed || !l->loop_made) {
		pthread_mutex_unlock(&l->lock);
		return -ESHUTDOWN;
	}
	op->next = NULL;
	*l->ops_tail = op;
	l->ops_tail = &op->next;
	uv_async_send(&l->wake);
	pthread_mutex_unlock(&l->lock);
	return 0;
}

/*
 * Post local @op and wait for it until @until (0: no limit) or the stop.
 * Its rc (and *value), or -ETIMEDOUT / -ESHUTDOWN: then the loop frees it.
 */
static int run_local(struct nslog *l, struct op *op, uint64_t until,
		     uint64_t *value)
{
	int rc = post_op(l, op);

	if (rc < 0) {
		op_free(op);
		return rc;
	}
	pthread_mutex_lock(&l->lock);
	while (!op->done && !l->stopping && (!until || rft_now_ms() < until)) {
		if (until)
			wait_until(l, &l->cond, until);
		else
			pthread_cond_wait(&l->cond, &l->lock);
	}
	if (!op->done) {
		op->abandoned = true;
		rc = l->stopping ? -ESHUTDOWN : -ETIMEDOUT;
		pthread_mutex_unlock(&l->lock);
		return rc;
	}
	rc = op->rc;
	if (value)
		*value = op->value;
	pthread_mutex_unlock(&l->lock);
	op_free(op);
	return rc;
}

static bool raft_ready(const struct nslog *l)
{
	return l->raft_up && !l->raft_closing;
}

static bool status_equal(const struct nslog_status *a,
			 const struct nslog_status *b)
{
	return a->term == b->term && a->last_index == b->last_index &&
	       a->commit_index == b->commit_index &&
	       a->applied_index == b->applied_index &&
	       a->leader == b->leader && a->is_leader == b->is_leader &&
	       a->voters == b->voters && a->raft_id == b->raft_id &&
	       a->self_voter == b->self_voter;
}

/* Copy raft's state into l->st (for other threads); wake waiters. */
static void refresh_status(struct nslog *l)
{
	struct nslog_status s;
	raft_id lid = 0, ids[GRP_MAX_NODES];
	const char *addr = NULL;
	int nids = 0;

	memset(&s, 0, sizeof(s));
	s.leader = -1;
	if (raft_ready(l)) {
		s.term = l->raft.current_term;
		s.last_index = raft_last_index(&l->raft);
		s.commit_index = l->raft.commit_index;
		s.applied_index = raft_last_applied(&l->raft);
		raft_leader(&l->raft, &lid, &addr);
		s.leader = node_of(l, lid);
		s.is_leader = raft_state(&l->raft) == RAFT_LEADER;
		s.raft_id = l->raft.id;
		for (unsigned i = 0; i < l->raft.configuration.n; i++) {
			const struct raft_server *sv =
				&l->raft.configuration.servers[i];

			if (sv->role != RAFT_VOTER)
				continue;
			s.voters++;
			if (nids < GRP_MAX_NODES)
				ids[nids++] = sv->id;
			if (sv->id == l->raft.id)
				s.self_voter = true;
		}
	}
	pthread_mutex_lock(&l->lock);
	memcpy(l->voter_ids, ids, sizeof(ids[0]) * (size_t)nids);
	l->nvoter_ids = nids;
	if (!status_equal(&s, &l->st)) {
		l->st = s;
		pthread_cond_broadcast(&l->cond);
	}
	pthread_mutex_unlock(&l->lock);
}

static void lead_barrier_cb(struct raft_barrier *req, int status)
{
	struct nslog *l = req->data;

	l->lead_barrier_busy = false;
	if (status != 0 && status != RAFT_LEADERSHIPLOST &&
	    status != RAFT_CANCELED && status != RAFT_SHUTDOWN)
		rft_warn("node %d: the barrier of term %llu failed: %s",
			 l->self, (unsigned long long)l->lead_barrier_term,
			 raft_strerror(status));
}

/*
 * A leader elected in a term appends one barrier in it.  Raft commits an
 * entry of an older term only together with one of the leader's own
 * (Raft paper, 5.4.2), so until then the new leader cannot tell what is
 * committed; with it, every node soon knows the commit index even when
 * nothing is submitted (what reftfs-admin group shows), and a node that
 * was down catches up to it.
 */
static void lead_barrier(struct nslog *l)
{
	int rv;

	if (!raft_ready(l) || l->lead_barrier_busy ||
	    raft_state(&l->raft) != RAFT_LEADER ||
	    l->lead_barrier_term == l->raft.current_term)
		return;
	l->lead_barrier.data = l;
	rv = raft_barrier(&l->raft, &l->lead_barrier, lead_barrier_cb);
	if (rv != 0)
		return; /* tried again at the next check */
	l->lead_barrier_busy = true;
	l->lead_barrier_term = l->raft.current_term;
}

static void commit_push_cb(struct raft_barrier *req, int status)
{
	struct nslog *l = req->data;

	l->push_busy = false;
	if (status != 0 && status != RAFT_LEADERSHIPLOST &&
	    status != RAFT_CANCELED && status != RAFT_SHUTDOWN)
		rft_dbg("node %d: commit push at %llu: %s", l->self,
			(unsigned long long)l->push_index,
			raft_strerror(status));
}

/*
 * Tell the followers the leader's new commit index now, not at the next
 * heartbeat (the head comment's "Commit push").  Only when everything
 * appended is committed and applied here: an entry still in flight
 * carries the commit index when raft sends it, and its own commit pushes
 * later.  At most one push at a time, and none when the last entry is
 * this term's push, already committed, else pushes would chain.  None
 * until this term's lead barrier is done (it goes first; its commit is
 * then pushed like any other), and none without another server to tell.
 */
static void commit_push(struct nslog *l)
{
	raft_index last;
	int rv;

	if (!raft_ready(l) || l->push_busy ||
	    raft_state(&l->raft) != RAFT_LEADER || l->lead_barrier_busy ||
	    l->lead_barrier_term != l->raft.current_term ||
	    l->raft.configuration.n < 2)
		return;
	last = raft_last_index(&l->raft);
	if (l->raft.commit_index != last || raft_last_applied(&l->raft) != last)
		return;
	/* A leader never rewrites its own term's entries: it is the push. */
	if (l->push_term == l->raft.current_term && l->push_index == last)
		return;
	l->push.data = l;
	rv = raft_barrier(&l->raft, &l->push, commit_push_cb);
	if (rv != 0)
		return; /* a transfer under way (or no memory): next check */
	l->push_busy = true;
	l->push_term = l->raft.current_term;
	l->push_index = l->push.index;
}

/*
 * After every loop iteration: raft commits and applies in I/O callbacks,
 * which run before the check handles of the same iteration.
 */
static void on_check(uv_check_t *c)
{
	lead_barrier(c->data);
	commit_push(c->data);
	refresh_status(c->data);
}

static void loop_close_handles(struct nslog *l)
{
	uv_check_stop(&l->check);
	uv_close((uv_handle_t *)&l->check, NULL);
	uv_close((uv_handle_t *)&l->wake, NULL);
}

static int wipe_raft_files(struct nslog *l);

static void raft_closed(struct raft *r)
{
	struct nslog *l = r->data;
	struct op *op = l->closing_op;

	raft_uv_close(&l->io);
	l->raft_up = false;
	l->raft_closing = false;
	l->closing_op = NULL;
	refresh_status(l);
	if (op)
		op_finish(l, op,
			  l->stop_seen ? -ESHUTDOWN
			  : op->flag   ? wipe_raft_files(l)
				       : 0,
			  0);
	if (l->stop_seen)
		loop_close_handles(l);
}

/* Close raft (after a failed start, or at the stop). */
static void raft_shut(struct nslog *l)
{
	if (!l->raft_up || l->raft_closing)
		return;
	l->raft_closing = true;
	raft_close(&l->raft, raft_closed);
}

static unsigned clampu(unsigned v, unsigned lo, unsigned hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* How long the leader waits for a follower to acknowledge its snapshot. */
static unsigned install_ms(const struct nslog *l)
{
	return clampu(4 * l->election_ms, 2000, 10000);
}

/*
 * raft_init with @id, bootstrap the static configuration if asked (or,
 * @recover, force a configuration of @id alone: nslog_force_remove),
 * start.
 */
static int raft_go(struct nslog *l, raft_id id, bool bootstrap, bool recover)
{
	struct raft_configuration conf;
	unsigned trailing = l->snapshot_every / 2;
	char label[LABEL_MAX];
	int rv, i;

	if (l->raft_up)
		return -EALREADY;
	tr_setup(l);
	rv = raft_uv_init(&l->io, &l->loop, l->dir, &l->tr.iface);
	if (rv != 0) {
		rft_err("node %d: raft_uv_init(%s): %s", l->self, l->dir,
			l->io.errmsg);
		return -EIO;
	}
	/* Retry a dead peer about every heartbeat, not every second. */
	raft_uv_set_connect_retry_delay(&l->io, l->heartbeat_ms);
	l->rfsm = (struct raft_fsm){
		.version = 2,
		.data = l,
		.apply = rfsm_apply,
		.snapshot = rfsm_snapshot,
		.restore = rfsm_restore,
		.snapshot_finalize = rfsm_finalize,
	};
	raft_label(id, label, sizeof(label));
	rv = raft_init(&l->raft, &l->io, &l->rfsm, id, label);
	if (rv != 0) {
		rft_err("node %d: raft_init: %s", l->self,
			raft_errmsg(&l->raft));
		raft_uv_close(&l->io);
		tr_shutdown(&l->tr);
		return -EIO;
	}
	l->raft.data = l;
	l->raft_up = true;
	raft_set_election_timeout(&l->raft, l->election_ms);
	raft_set_heartbeat_timeout(&l->raft, l->heartbeat_ms);
	raft_set_snapshot_threshold(&l->raft, l->snapshot_every);
	raft_set_snapshot_trailing(&l->raft, trailing ? trailing : 1);
	raft_set_install_snapshot_timeout(&l->raft, install_ms(l));
	/* A node back from a partition does not depose a working leader. */
	raft_set_pre_vote(&l->raft, true);
	if (bootstrap) {
		raft_configuration_init(&conf);
		for (i = 0, rv = 0; i < l->nodes && rv == 0; i++) {
			raft_label(make_id(i, 0), label, sizeof(label));
			rv = raft_configuration_add(&conf, make_id(i, 0),
						    label, RAFT_VOTER);
		}
		if (rv == 0)
			rv = raft_bootstrap(&l->raft, &conf);
		raft_configuration_close(&conf);
		/* Already bootstrapped (a restart): nothing to do. */
		if (rv != 0 && rv != RAFT_CANTBOOTSTRAP) {
			rft_err("node %d: raft_bootstrap: %s", l->self,
				raft_strerror(rv));
			raft_shut(l);
			return -EIO;
		}
	}
	if (recover) {
		raft_configuration_init(&conf);
		raft_label(id, label, sizeof(label));
		rv = raft_configuration_add(&conf, id, label, RAFT_VOTER);
		if (rv == 0)
			rv = raft_recover(&l->raft, &conf);
		raft_configuration_close(&conf);
		if (rv != 0) {
			rft_err("node %d: raft_recover: %s", l->self,
				raft_strerror(rv));
			raft_shut(l);
			return -EIO;
		}
	}
	rv = raft_start(&l->raft);
	if (rv != 0) {
		rft_err("node %d: raft_start: %s", l->self,
			raft_errmsg(&l->raft));
		raft_shut(l);
		return -EIO;
	}
	/* A restarted raft leads anew: its barrier is due again. */
	l->restarting = false;
	l->join.active = false;
	l->lead_barrier_term = 0;
	rft_info("node %d: raft started as id %llu%s", l->self,
		 (unsigned long long)id,
		 bootstrap ? " (bootstrapped)"
		 : recover ? " (recovered: the only voter)"
			   : "");
	return 0;
}

/* A request raft dropped because it restarts: asked again, not failed. */
static int restart_errno(const struct nslog *l, int status)
{
	if (l->restarting &&
	    (status == RAFT_SHUTDOWN || status == RAFT_CANCELED))
		return -EAGAIN;
	return raft_errno(status);
}

static void apply_cb(struct raft_apply *req, int status, void *result)
{
	struct op *op = req->data;
	const struct apply_out *o = result;

	if (status != 0)
		op_finish(op->l, op, restart_errno(op->l, status), 0);
	else
		op_finish(op->l, op, 0, o && o->value ? o->value : req->index);
}

static void barrier_cb(struct raft_barrier *req, int status)
{
	struct op *op = req->data;

	op_finish(op->l, op, restart_errno(op->l, status),
		  status ? 0 : req->index);
}

/* True when @id is node's only id in the configuration, and a voter. */
static bool join_done(struct nslog *l, int node, raft_id id)
{
	const struct raft_configuration *c = &l->raft.configuration;
	bool voter = false;

	for (unsigned i = 0; i < c->n; i++) {
		if (node_of(l, c->servers[i].id) != node)
			continue;
		if (c->servers[i].id != id)
			return false;
		voter = c->servers[i].role == RAFT_VOTER;
	}
	return voter;
}

static void join_step(struct nslog *l);

static void join_cb(struct raft_change *c, int status)
{
	struct nslog *l = c->data;

	if (status != 0) {
		rft_warn("node %d: replacing node %d by raft id %llu: %s "
			 "(it asks again)",
			 l->self, l->join.node,
			 (unsigned long long)l->join.id,
			 raft_strerror(status));
		l->join.active = false;
		return;
	}
	join_step(l);
}

/*
 * The next configuration change of a replacement: remove the node's old
 * ids, add the new one as a spare, promote it to voter (raft catches it
 * up first).  One change at a time; join_cb moves on.
 */
static void join_step(struct nslog *l)
{
	const struct raft_configuration *c = &l->raft.configuration;
	const struct raft_server *me = NULL;
	int node = l->join.node;
	raft_id id = l->join.id;
	char label[LABEL_MAX];
	int rv;

	if (!raft_ready(l) || raft_state(&l->raft) != RAFT_LEADER) {
		l->join.active = false;
		return;
	}
	l->join.change.data = l;
	for (unsigned i = 0; i < c->n; i++) {
		raft_id old = c->servers[i].id;

		if (node_of(l, old) != node)
			continue;
		if (old == id) {
			me = &c->servers[i];
			continue;
		}
		rft_info("node %d: removing raft id %llu: node %d is "
			 "replaced by raft id %llu",
			 l->self, (unsigned long long)old, node,
			 (unsigned long long)id);
		rv = raft_remove(&l->raft, &l->join.change, old, join_cb);
		goto check;
	}
	if (!me) {
		rft_info("node %d: adding raft id %llu for node %d", l->self,
			 (unsigned long long)id, node);
		raft_label(id, label, sizeof(label));
		rv = raft_add(&l->raft, &l->join.change, id, label, join_cb);
	} else if (me->role != RAFT_VOTER) {
		rv = raft_assign(&l->raft, &l->join.change, id, RAFT_VOTER,
				 join_cb);
	} else {
		rft_info("node %d: node %d votes again, as raft id %llu",
			 l->self, node, (unsigned long long)id);
		l->join.active = false;
		return;
	}
check:
	if (rv != 0) {
		rft_warn("node %d: replacing node %d: %s (it asks again)",
			 l->self, node, raft_strerror(rv));
		l->join.active = false;
	}
}

/* A replacement asks (again) to be made a voter; answers 1 when it is. */
static void join_poll(struct nslog *l, struct op *op)
{
	int node = op->from;
	raft_id id = op->id;

	if (!raft_ready(l) || raft_state(&l->raft) != RAFT_LEADER)
		return op_finish(l, op, -EAGAIN, 0);
	if (node_of(l, id) != node || gen_of(id) == 0)
		return op_finish(l, op, -EINVAL, 0);
	/* Its generation is committed; this new leader may not have it. */
	if (gen_of(id) > l->gen[node].gen)
		return op_finish(l, op, -EAGAIN, 0);
	if (join_done(l, node, id))
		return op_finish(l, op, 0, 1);
	if (l->join.active && (l->join.node != node || l->join.id != id))
		return op_finish(l, op, -EBUSY, 0);
	if (!l->join.active) {
		l->join.active = true;
		l->join.node = node;
		l->join.id = id;
		join_step(l);
	}
	op_finish(l, op, 0, join_done(l, node, id));
}

static void loop_stop(struct nslog *l)
{
	struct op *ops, *op;

	l->stop_seen = true;
	pthread_mutex_lock(&l->lock);
	l->loop_closed = true;
	ops = l->ops;
	l->ops = NULL;
	l->ops_tail = &l->ops;
	pthread_mutex_unlock(&l->lock);
	while ((op = ops)) {
		ops = op->next;
		op_finish(l, op, -ESHUTDOWN, 0);
	}
	/* raft fails its pending requests (their callbacks run here). */
	if (l->raft_up)
		raft_shut(l);
	else
		loop_close_handles(l);
}

static void run_op(struct nslog *l, struct op *op)
{
	int rv;

	op->l = l;
	if (l->stop_seen)
		return op_finish(l, op, -ESHUTDOWN, 0);
	switch (op->kind) {
	case OP_START:
		op_finish(l, op, raft_go(l, op->id, op->flag, op->recover), 0);
		break;
	case OP_CLOSE:
		if (l->raft_closing || l->closing_op)
			return op_finish(l, op, -EBUSY, 0);
		if (!l->raft_up)
			return op_finish(l, op, op->flag ? wipe_raft_files(l) : 0,
					 0);
		if (raft_last_applied(&l->raft) > l->floor)
			l->floor = raft_last_applied(&l->raft);
		l->restarting = true;
		l->closing_op = op;
		raft_shut(l);
		break;
	case OP_APPLY:
		if (!raft_ready(l))
			return op_finish(l, op, -EAGAIN, 0);
		op->req.apply.data = op;
		rv = raft_apply(&l->raft, &op->req.apply, &op->buf, 1,
				apply_cb);
		if (rv != 0)
			return op_finish(l, op, raft_errno(rv), 0);
		op->buf.base = NULL; /* raft's now */
		break;
	case OP_BARRIER:
		if (!raft_ready(l))
			return op_finish(l, op, -EAGAIN, 0);
		op->req.barrier.data = op;
		rv = raft_barrier(&l->raft, &op->req.barrier, barrier_cb);
		if (rv != 0)
			return op_finish(l, op, raft_errno(rv), 0);
		break;
	case OP_JOIN:
		join_poll(l, op);
		break;
#ifdef RFT_TEST_HOOKS
	case OP_CUT:
		tr_cut(l, op->node, op->flag);
		op_finish(l, op, 0, 0);
		break;
#endif
	case OP_MOVED:
		/*
		 * Only links made to the old address: one the node made to
		 * us comes from where it is, and may carry its answers.
		 */
		tr_close_links(l, op->node, true);
		op_finish(l, op, 0, 0);
		break;
	}
}

static void on_wake(uv_async_t *a)
{
	struct nslog *l = a->data;
	struct op *ops, *op;
	bool stop;

	pthread_mutex_lock(&l->lock);
	stop = l->stop_req;
	ops = l->ops;
	l->ops = NULL;
	l->ops_tail = &l->ops;
	pthread_mutex_unlock(&l->lock);
	if (stop && !l->stop_seen)
		loop_stop(l); /* from here on, run_op fails every op */
	while ((op = ops)) {
		ops = op->next;
		run_op(l, op);
	}
	if (!l->stop_seen)
		refresh_status(l);
}

static void *loop_main(void *arg)
{
	struct nslog *l = arg;
	sigset_t set;

	/*
	 * libuv writes with write(2): a raft link closed by its peer would
	 * raise SIGPIPE and kill the daemon.  Blocked here, the write fails
	 * with EPIPE and raft reconnects.
	 */
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	uv_run(&l->loop, UV_RUN_DEFAULT);
	return NULL;
}

/* --- requests from peers (transport threads) and answers (worker) --------- */

/* How long one answer may wait for its link. */
static int answer_ms(const struct nslog *l)
{
	return (int)clampu(l->election_ms, 200, 1000);
}

static int rx_probe(struct nslog *l, int node, const struct peer_frame *f)
{
	const uint8_t *m = f->meta;
	struct job *j;

	if (f->bulk_len || f->meta_len == 0 || f->meta_len % 8 ||
	    f->meta_len / 8 > MAX_INCS)
		return -EPROTO;
	j = job_new(node, f->type, f->rid);
	if (!j)
		return 0; /* it asks again */
	j->probe = true;
	j->nincs = (int)(f->meta_len / 8);
	for (int i = 0; i < j->nincs; i++)
		j->incs[i] = rft_get_le64(m + 8 * i);
	queue_job(l, j);
	return 0;
}

static int rx_state(struct nslog *l, int node, const struct peer_frame *f)
{
	struct job *j;

	if (f->bulk_len || f->meta_len)
		return -EPROTO;
	j = job_new(node, f->type, f->rid);
	if (!j)
		return 0; /* it asks again */
	j->state = true;
	queue_job(l, j);
	return 0;
}

static void *rejoin_main(void *arg);

/*
 * @node forced the log to itself alone (nslog_force_remove) and tells
 * this survivor to join it again.  Taken only while this node knows no
 * leader (its log has no majority), once.
 */
static int rx_rejoin(struct nslog *l, int node, const struct peer_frame *f)
{
	int rc = 0;

	if (f->bulk_len || f->meta_len)
		return -EPROTO;
	pthread_mutex_lock(&l->lock);
	if (l->stopping || l->ps.state != PS_ACTIVE)
		rc = -EAGAIN;
	else if (l->rejoin_made)
		rc = -EALREADY;
	else if (l->st.leader >= 0 && l->st.leader != node)
		rc = -EBUSY; /* this log has a leader: not ours to leave */
	if (rc == 0) {
		l->rejoin_hint = node;
		rc = -pthread_create(&l->rejoin_thread, NULL, rejoin_main, l);
		l->rejoin_made = rc == 0;
	}
	pthread_mutex_unlock(&l->lock);
	if (rc == 0)
		rft_warn("node %d: node %d forced the namespace log after a "
			 "lost majority: joining it again as a new raft id",
			 l->self, node);
	answer(l, node, f->type, f->rid, rc, NULL, 0);
	return 0;
}

/*
 * A request from @node (transport thread: no waiting here).  Proposals,
 * barriers and joins go to the loop, which answers through the worker.
 */
static int rx_deliver(void *ctx, int node, const struct peer_frame *f,
		      void *cookie, int bulk_rc)
{
	struct nslog *l = ctx;
	enum op_kind kind;
	struct op *op;
	struct ent e;

	(void)cookie;
	if (bulk_rc != 0 || f->flags != 0)
		return -EPROTO;
	switch (f->type) {
	case NSLOG_T_PROBE:
		return rx_probe(l, node, f);
	case NSLOG_T_STATE:
		return rx_state(l, node, f);
	case NSLOG_T_REJOIN:
		return rx_rejoin(l, node, f);
	case NSLOG_T_SUBMIT:
		if (f->meta_len != ENT_HDR_LEN || f->bulk_len > NSLOG_ENTRY_MAX)
			return -EPROTO;
		kind = OP_APPLY;
		break;
	case NSLOG_T_GEN:
		if (f->meta_len != ENT_HDR_LEN || f->bulk_len)
			return -EPROTO;
		kind = OP_APPLY;
		break;
	case NSLOG_T_BARRIER:
		if (f->meta_len || f->bulk_len)
			return -EPROTO;
		kind = OP_BARRIER;
		break;
	case NSLOG_T_JOIN:
		if (f->meta_len != 8 || f->bulk_len)
			return -EPROTO;
		kind = OP_JOIN;
		break;
	default:
		return -EPROTO;
	}
	/* An authenticated peer still cannot make this node hold unbounded
	 * work: past the limits its requests are refused, it retries. */
	pthread_mutex_lock(&l->lock);
	if (l->fwd >= FWD_MAX || l->fwd_bytes + f->bulk_len > FWD_BYTES_MAX) {
		pthread_mutex_unlock(&l->lock);
		answer(l, node, f->type, f->rid, -EBUSY, NULL, 0);
		return 0;
	}
	l->fwd++;
	l->fwd_bytes += f->bulk_len;
	pthread_mutex_unlock(&l->lock);
	op = op_new(kind, false);
	if (!op) {
		pthread_mutex_lock(&l->lock);
		l->fwd--;
		l->fwd_bytes -= f->bulk_len;
		pthread_mutex_unlock(&l->lock);
		return 0; /* it asks again */
	}
	op->from = node;
	op->ftype = f->type;
	op->frid = f->rid;
	op->fwd_bytes = f->bulk_len;
	if (kind == OP_APPLY) {
		op->buf.len = ENT_HDR_LEN + f->bulk_len + ent_pad(f->bulk_len);
		op->buf.base = raft_malloc(op->buf.len);
		if (!op->buf.base) {
			fwd_release(l, op);
			free(op);
			return 0;
		}
		memcpy(op->buf.base, f->meta, ENT_HDR_LEN);
		if (f->bulk_len)
			memcpy((uint8_t *)op->buf.base + ENT_HDR_LEN, f->bulk,
			       f->bulk_len);
		memset((uint8_t *)op->buf.base + ENT_HDR_LEN + f->bulk_len, 0,
		       ent_pad(f->bulk_len));
		/* A node proposes only in its own name. */
		if (ent_decode(l, op->buf.base, op->buf.len, &e) < 0 ||
		    e.node != node ||
		    e.kind != (f->type == NSLOG_T_GEN ? ENT_GEN : ENT_USER)) {
			fwd_release(l, op);
			op_free(op);
			return -EPROTO;
		}
	} else if (kind == OP_JOIN) {
		op->id = rft_get_le64(f->meta);
	}
	if (post_op(l, op) < 0)
		op_finish(l, op, -EAGAIN, 0);
	return 0;
}

static void probe_answer(struct nslog *l, const struct job *j,
			 uint8_t meta[24])
{
	enum ps_state state;
	uint64_t w, id;
	bool saw_empty = false;
	int leader;

	pthread_mutex_lock(&l->lock);
	state = l->ps.state;
	w = l->ps.seen_empty[j->node];
	id = l->ps.raft_id;
	leader = l->st.leader;
	pthread_mutex_unlock(&l->lock);
	for (int i = 0; w && i < j->nincs; i++)
		saw_empty |= j->incs[i] == w;
	meta[0] = state == PS_ACTIVE;
	meta[1] = state == PS_ACTIVE && saw_empty;
	rft_put_le16(meta + 2, (uint16_t)(int16_t)leader);
	rft_put_le32(meta + 4, 0);
	rft_put_le64(meta + 8, id);
	rft_put_le64(meta + 16, l->inc);
}

static void run_job(struct nslog *l, struct job *j)
{
	struct peer_frame req = { .type = j->type, .rid = j->rid };
	struct peer_frame rep = { .type = j->type };
	uint8_t meta[24];

	if (j->probe) {
		probe_answer(l, j, meta);
		rep.meta = meta;
		rep.meta_len = sizeof(meta);
	} else if (j->state) {
		pthread_mutex_lock(&l->lock);
		rft_put_le64(meta, l->st.term);
		rft_put_le64(meta + 8, l->st.last_index);
		rft_put_le64(meta + 16, l->st.applied_index);
		pthread_mutex_unlock(&l->lock);
		rep.meta = meta;
		rep.meta_len = sizeof(meta);
	} else if (j->rc) {
		peer_reply_err(l->x, j->node, &req, j->rc, answer_ms(l));
		return;
	} else if (j->meta_len) {
		rep.meta = j->meta;
		rep.meta_len = j->meta_len;
	}
	/* A lost answer: the asker times out and asks again. */
	peer_reply(l->x, j->node, &req, &rep, answer_ms(l));
}

/* The worker's item: send answer @w, or with @cancel (stopping) drop it. */
static void job_fn(struct rft_wq_item *w, bool cancel)
{
	struct job *j = (struct job *)w;

	if (!cancel)
		run_job(j->l, j);
	free(j);
}

/* --- first start and replacement (control thread) ------------------------- */

/* Sleep @ms, or less if the nslog stops.  False once it stops. */
static bool ctl_sleep(struct nslog *l, unsigned ms)
{
	uint64_t until = rft_now_ms() + ms;
	bool stop;

	pthread_mutex_lock(&l->lock);
	while (!l->stopping && rft_now_ms() < until)
		wait_until(l, &l->cond, until);
	stop = l->stopping;
	pthread_mutex_unlock(&l->lock);
	return !stop;
}

static bool stopping(struct nslog *l)
{
	bool s;

	pthread_mutex_lock(&l->lock);
	s = l->stopping;
	pthread_mutex_unlock(&l->lock);
	return s;
}

struct probe_round {
	int answered, active;
	bool saw_us_empty;	/* an active peer saw this disk empty */
	int hint;		/* a leader named by an active peer */
	int some_active;
	uint64_t empty[GRP_MAX_NODES]; /* incarnations seen empty */
};

static unsigned probe_ms(const struct nslog *l)
{
	return clampu(l->election_ms, 200, 1000);
}

static unsigned retry_ms(const struct nslog *l)
{
	return clampu(l->heartbeat_ms, 20, 500);
}

/* Ask every peer whether it has the log. */
static void probe_all(struct nslog *l, struct probe_round *r)
{
	uint8_t meta[8 * MAX_INCS], rm[24];
	int n, p;

	memset(r, 0, sizeof(*r));
	r->hint = r->some_active = -1;
	pthread_mutex_lock(&l->lock);
	n = l->ps.nincs;
	for (int i = 0; i < n; i++)
		rft_put_le64(meta + 8 * i, l->ps.incs[i]);
	pthread_mutex_unlock(&l->lock);
	if (n == 0) {
		/* No incarnation ran "unknown" here: say who we are now. */
		rft_put_le64(meta, l->inc);
		n = 1;
	}
	for (p = 0; p < l->nodes && !stopping(l); p++) {
		struct peer_frame req = {
			.type = NSLOG_T_PROBE,
			.meta = meta,
			.meta_len = (uint32_t)(8 * n),
		};
		struct peer_reply rep = { .meta = rm, .meta_cap = sizeof(rm) };
		int leader;

		if (p == l->self)
			continue;
		if (peer_call(l->x, p, &req, &rep, (int)probe_ms(l)) < 0 ||
		    rep.meta_len != sizeof(rm) || rm[0] > 1 || rm[1] > 1)
			continue;
		r->answered++;
		if (!rm[0]) {
			r->empty[p] = rft_get_le64(rm + 16);
			continue;
		}
		r->active++;
		r->saw_us_empty |= rm[1];
		if (r->some_active < 0)
			r->some_active = p;
		leader = (int16_t)rft_get_le16(rm + 2);
		if (leader >= 0 && leader < l->nodes && leader != l->self &&
		    r->hint < 0)
			r->hint = leader;
	}
}

/* Become "active" under @id (nslog.state first, then raft may use it). */
static int ctl_activate(struct nslog *l, raft_id id, bool bootstrap,
			const uint64_t *empty)
{
	struct pstate ps;
	int rc;

	/* This thread is the only writer of l->ps once started. */
	pthread_mutex_lock(&l->lock);
	ps = l->ps;
	pthread_mutex_unlock(&l->lock);
	ps.state = PS_ACTIVE;
	ps.raft_id = id;
	ps.bootstrap = bootstrap;
	ps.joined = bootstrap;
	for (int i = 0; empty && i < l->nodes; i++)
		if (empty[i])
			ps.seen_empty[i] = empty[i];
	rc = ps_save(l, &ps);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&l->lock);
	l->ps = ps;
	pthread_mutex_unlock(&l->lock);
	return 0;
}

/* Ask the leader for a new generation; the new raft id, 0 on stop. */
static raft_id ctl_new_gen(struct nslog *l, struct probe_round *r)
{
	uint8_t hdr[ENT_HDR_LEN], rm[8];
	uint64_t rid;
	raft_id id;
	int target;

	pthread_mutex_lock(&l->lock);
	rid = ++l->next_rid;
	pthread_mutex_unlock(&l->lock);
	ent_hdr(hdr, ENT_GEN, l->self, l->inc, rid, 0);
	for (;;) {
		struct peer_frame req = {
			.type = NSLOG_T_GEN,
			.meta = hdr,
			.meta_len = sizeof(hdr),
		};
		struct peer_reply rep = { .meta = rm, .meta_cap = sizeof(rm) };

		target = r->hint >= 0 ? r->hint : r->some_active;
		if (target >= 0 &&
		    peer_call(l->x, target, &req, &rep,
			      (int)(4 * probe_ms(l))) == 0 &&
		    rep.meta_len == 8) {
			id = rft_get_le64(rm);
			if (node_of(l, id) == l->self && gen_of(id) > 0)
				return id;
		}
		if (!ctl_sleep(l, retry_ms(l)))
			return 0;
		probe_all(l, r);
	}
}

/* Ask the leader until our raft id is node self's only one, a voter. */
static void ctl_join(struct nslog *l, raft_id id)
{
	struct probe_round r = { .hint = -1, .some_active = -1 };
	uint8_t m[8], rm[1];
	int target;

	rft_put_le64(m, id);
	while (!stopping(l)) {
		struct peer_frame req = {
			.type = NSLOG_T_JOIN,
			.meta = m,
			.meta_len = sizeof(m),
		};
		struct peer_reply rep = { .meta = rm, .meta_cap = sizeof(rm) };

		pthread_mutex_lock(&l->lock);
		target = l->st.leader;
		pthread_mutex_unlock(&l->lock);
		if (target < 0 || target == l->self)
			target = r.hint >= 0 ? r.hint : r.some_active;
		if (target >= 0 && target != l->self &&
		    peer_call(l->x, target, &req, &rep,
			      (int)probe_ms(l)) == 0 &&
		    rep.meta_len == 1 && rm[0] == 1) {
			struct pstate ps;

			pthread_mutex_lock(&l->lock);
			l->ps.joined = true;
			ps = l->ps;
			pthread_mutex_unlock(&l->lock);
			ps_save(l, &ps); /* if not: asked again at restart */
			rft_info("node %d: joined the group as raft id %llu",
				 l->self, (unsigned long long)id);
			return;
		}
		if (!ctl_sleep(l, retry_ms(l)))
			return;
		probe_all(l, &r);
	}
}

/*
 * Decide between the group's first start and a replacement (see the head
 * comment), and become "active".  0, or -ESHUTDOWN, or -errno.
 */
static int ctl_first_start(struct nslog *l)
{
	struct probe_round r;
	uint64_t first_active = 0, seen[GRP_MAX_NODES] = { 0 };
	unsigned grace = l->election_ms * 4 > 3000 ? l->election_ms * 4 : 3000;
	bool found, said = false;
	int unknown;
	raft_id id;

	for (;;) {
		if (l->nodes == 1)
			return ctl_activate(l, make_id(l->self, 0), true, NULL);
		probe_all(l, &r);
		if (stopping(l))
			return -ESHUTDOWN;
		/* The last incarnation each peer was seen empty in. */
		for (int p = 0; p < l->nodes; p++)
			if (r.empty[p])
				seen[p] = r.empty[p];
		found = (r.answered == l->nodes - 1 && r.active == 0) ||
			r.saw_us_empty;
		pthread_mutex_lock(&l->lock);
		unknown = l->unknown;
		pthread_mutex_unlock(&l->lock);
		/* A log founded with every address (nslog_set_addr). */
		if (found && unknown == 0) {
			rft_info("node %d: %s: founding the group's log",
				 l->self,
				 r.saw_us_empty ? "seen empty by a peer" :
					       "every peer is empty");
			return ctl_activate(l, make_id(l->self, 0), true,
					    seen);
		}
		if (found && !said)
			rft_info("node %d: waiting for the address of %d "
				 "node(s) before founding the group's log",
				 l->self, unknown);
		said |= found;
		if (!found && r.active > 0) {
			if (!first_active)
				first_active = rft_now_ms();
			if (r.answered == l->nodes - 1 ||
			    rft_now_ms() - first_active >= grace)
				break;
		}
		if (!ctl_sleep(l, retry_ms(l)))
			return -ESHUTDOWN;
	}
	rft_info("node %d: the group has a log and this disk is new: "
		 "joining as a replacement",
		 l->self);
	id = ctl_new_gen(l, &r);
	if (!id)
		return -ESHUTDOWN;
	return ctl_activate(l, id, false, NULL);
}

static void *ctl_main(void *arg)
{
	struct nslog *l = arg;
	struct op *op;
	struct pstate ps;
	int rc = 0;

	pthread_mutex_lock(&l->lock);
	ps = l->ps;
	pthread_mutex_unlock(&l->lock);
	if (ps.state != PS_ACTIVE) {
		rc = ctl_first_start(l);
		pthread_mutex_lock(&l->lock);
		ps = l->ps;
		pthread_mutex_unlock(&l->lock);
	}
	if (rc == 0) {
		op = op_new(OP_START, true);
		if (!op) {
			rc = -ENOMEM;
		} else {
			op->id = ps.raft_id;
			op->flag = ps.bootstrap;
			rc = run_local(l, op, 0, NULL);
		}
	}
	if (rc < 0) {
		if (rc != -ESHUTDOWN)
			rft_err("node %d: the namespace log cannot start: %s",
				l->self, strerror(-rc));
		pthread_mutex_lock(&l->lock);
		l->start_failed = rc != -ESHUTDOWN;
		pthread_cond_broadcast(&l->cond);
		pthread_mutex_unlock(&l->lock);
		return NULL;
	}
	if (!ps.started) {
		ps.started = true;
		if (ps_save(l, &ps) == 0) {
			pthread_mutex_lock(&l->lock);
			l->ps.started = true;
			pthread_mutex_unlock(&l->lock);
		}
	}
	if (!ps.joined)
		ctl_join(l, ps.raft_id);
	return NULL;
}

/*
 * A survivor of a forced log (rx_rejoin): ask its new leader for a new
 * generation, close raft, empty its dir, become "active" under the new
 * id, start raft with an empty log and join as a replacement would.  The
 * state machine keeps what it holds: raft brings the entries after it
 * (l->floor).  The daemon and its mount stay up meanwhile; calls that
 * need the log wait or fail as without a majority.
 */
static void *rejoin_main(void *arg)
{
	struct nslog *l = arg;
	struct probe_round r;
	struct op *op;
	raft_id id;
	int rc;

	memset(&r, 0, sizeof(r));
	r.some_active = -1;
	pthread_mutex_lock(&l->lock);
	r.hint = l->rejoin_hint;
	pthread_mutex_unlock(&l->lock);
	id = ctl_new_gen(l, &r);
	if (!id)
		return NULL; /* stopping */
	op = op_new(OP_CLOSE, true);
	if (!op)
		return NULL;
	op->flag = true; /* wipe */
	rc = run_local(l, op, 0, NULL);
	if (rc == 0)
		rc = ctl_activate(l, id, false, NULL);
	if (rc == 0) {
		op = op_new(OP_START, true);
		if (!op)
			return NULL;
		op->id = id;
		rc = run_local(l, op, 0, NULL);
	}
	if (rc < 0) {
		if (rc != -ESHUTDOWN)
			rft_err("node %d: cannot join the forced namespace log "
				"again: %s (restart this daemon on an emptied "
				"state dir)",
				l->self, strerror(-rc));
		return NULL;
	}
	ctl_join(l, id);
	return NULL;
}

/* --- the API ------------------------------------------------------------ */

static bool group_name_ok(const char *g)
{
	size_t n = strlen(g);

	if (n == 0 || n > GRP_GROUP_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (g[i] <= ' ' || g[i] == 0x7f)
			return false;
	return true;
}

static void nslog_release(struct nslog *l)
{
	if (l->lockfd >= 0)
		close(l->lockfd); /* lets go of the dir */
	free(l->where);
	free(l->listen);
	free(l->dir);
	free(l->group);
	free(l->dd);
	explicit_bzero(&l->secret, sizeof(l->secret));
	rft_wq_free(l->answers); /* what still waits is dropped */
	pthread_cond_destroy(&l->cond);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

int nslog_new(const struct nslog_opts *o, const struct nslog_fsm *fsm,
	      struct nslog **out)
{
	struct peer_rx rx = { 0 };
	struct nslog *l;
	int i, rc;

	*out = NULL;
	if (!o || !fsm || !fsm->apply || !fsm->snapshot || !fsm->restore ||
	    o->nodes < 1 || o->nodes > GRP_MAX_NODES || o->self < 0 ||
	    o->self >= o->nodes || !o->incarnation || !o->addrs || !o->dir ||
	    !o->dir[0] || !o->secret || o->secret->len < GRP_SECRET_MIN ||
	    o->secret->len > GRP_SECRET_MAX || !o->group || !o->x ||
	    o->x->self != o->self || o->x->nodes != o->nodes ||
	    o->election_ms < 0 || o->heartbeat_ms < 0) {
		rft_err("namespace log: bad options");
		return -EINVAL;
	}
	if (!group_name_ok(o->group)) {
		rft_err("namespace log: group name \"%s\" must be 1 to %d "
			"printable characters without spaces",
			o->group, GRP_GROUP_MAX);
		return -EINVAL;
	}
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->lockfd = -1;
	pthread_mutex_init(&l->lock, NULL);
	rft_cond_init(&l->cond);
	l->self = o->self;
	l->nodes = o->nodes;
	l->inc = o->incarnation;
	l->x = o->x;
	l->fsm = *fsm;
	l->secret = *o->secret;
	l->election_ms = o->election_ms ? (unsigned)o->election_ms : 1000;
	l->heartbeat_ms = o->heartbeat_ms ? (unsigned)o->heartbeat_ms : 100;
	l->snapshot_every = o->snapshot_every ? o->snapshot_every : 1024;
	l->ops_tail = &l->ops;
	l->st.leader = -1;
	rc = rft_wq_new("rft-nslog-ans", 1, &l->answers);
	if (rc < 0)
		goto err;
	rft_wq_set_max(l->answers, RFT_WQ_HIGH, JOBS_MAX);
	rc = -ENOMEM;
	l->dir = strdup(o->dir);
	l->group = strdup(o->group);
	l->where = calloc((size_t)l->nodes, sizeof(*l->where));
	l->dd = calloc(GRP_MAX_NODES, sizeof(*l->dd));
	if (!l->dir || !l->group || !l->where || !l->dd)
		goto err;
	l->group_len = strlen(l->group);
	if (l->heartbeat_ms >= l->election_ms) {
		rft_err("namespace log: heartbeat %u ms must be shorter than "
			"the election timeout %u ms",
			l->heartbeat_ms, l->election_ms);
		rc = -EINVAL;
		goto err;
	}
	for (i = 0; i < l->nodes; i++) {
		struct nslog_where *wh = &l->where[i];

		if (!o->addrs[i]) {
			l->unknown += i != l->self; /* nslog_set_addr */
			continue;
		}
		if (strlen(o->addrs[i]) >= sizeof(wh->addr) ||
		    resolve(o->addrs[i], &wh->sa, &wh->salen) < 0) {
			rft_err("namespace log: node %d's address \"%s\" is "
				"not host:port or does not resolve",
				i, o->addrs[i]);
			rc = -EINVAL;
			goto err;
		}
		strcpy(wh->addr, o->addrs[i]);
	}
	if (!o->listen && !o->addrs[l->self]) {
		rft_err("namespace log: no address for this node (%d)",
			l->self);
		rc = -EINVAL;
		goto err;
	}
	l->listen = strdup(o->listen ? o->listen : o->addrs[l->self]);
	if (!l->listen) {
		rc = -ENOMEM;
		goto err;
	}
	if (resolve(l->listen, &l->listen_sa, &l->listen_salen) < 0) {
		rft_err("namespace log: listen address \"%s\" is not "
			"host:port or does not resolve", l->listen);
		rc = -EINVAL;
		goto err;
	}
	rx.ctx = l;
	rx.deliver = rx_deliver;
	rc = peer_register(l->x, PEER_T_NSLOG_FIRST, PEER_T_NSLOG_LAST, &rx);
	if (rc < 0)
		goto err;
	*out = l;
	return 0;
err:
	nslog_release(l);
	return rc;
}

/*
 * Load nslog.state into @ps (PS_UNKNOWN when there is none) and refuse a
 * dir this node must not use.  Reads only.
 */
static int load_checked(struct nslog *l, struct pstate *ps)
{
	int rc = ps_load(l, ps);

	if (rc == -ENOENT) {
		if (dir_has_raft_files(l->dir)) {
			rft_err("node %d: %s holds a raft log but no %s: not "
				"ours, refusing to use it",
				l->self, l->dir, STATE_FILE);
			return -EINVAL;
		}
		memset(ps, 0, sizeof(*ps));
		ps->state = PS_UNKNOWN;
		return 0;
	}
	if (rc == -EINVAL) {
		rft_err("node %d: %s holds the namespace log of another node, "
			"group or group size: give each node its own state "
			"directory",
			l->self, l->dir);
		return rc;
	}
	if (rc < 0) {
		rft_err("node %d: cannot read %s/%s: %s", l->self, l->dir,
			STATE_FILE, strerror(-rc));
		return rc;
	}
	/*
	 * A founding member bootstraps (raft writes its metadata) before it
	 * may vote.  If that metadata is gone, its votes are forgotten: the
	 * disk must be emptied, and the node comes back as a replacement.  (A
	 * replacement persists nothing before it hears a term: without
	 * metadata it has not taken part yet, and may start.)
	 */
	if (ps->state == PS_ACTIVE && ps->bootstrap && ps->started &&
	    !dir_has_raft_files(l->dir)) {
		rft_err("node %d: %s lost raft's files of raft id %llu: empty "
			"the directory to rejoin as a replacement",
			l->self, l->dir, (unsigned long long)ps->raft_id);
		return -EINVAL;
	}
	return 0;
}

int nslog_check(struct nslog *l)
{
	struct pstate ps;
	int rc = mkdir_p(l->dir);

	if (rc < 0) {
		rft_err("node %d: cannot make %s: %s", l->self, l->dir,
			strerror(-rc));
		return rc;
	}
	/* Before reading: another daemon may be rewriting nslog.state. */
	rc = dir_lock(l);
	if (rc < 0)
		return rc;
	return load_checked(l, &ps);
}

/* nslog.state at start: what this disk has done. */
static int start_state(struct nslog *l)
{
	struct pstate ps;
	int rc, i;

	rc = load_checked(l, &ps);
	if (rc < 0)
		return rc;
	if (ps.state == PS_UNKNOWN) {
		for (i = 0; i < ps.nincs && ps.incs[i] != l->inc; i++)
			;
		if (i == ps.nincs) {
			if (ps.nincs == MAX_INCS) {
				memmove(&ps.incs[0], &ps.incs[1],
					sizeof(ps.incs[0]) * (MAX_INCS - 1));
				ps.nincs--;
			}
			ps.incs[ps.nincs++] = l->inc;
		}
	}
	rc = ps.state == PS_UNKNOWN ? ps_save(l, &ps) : 0;
	if (rc == 0)
		l->ps = ps; /* no other thread yet */
	return rc;
}

int nslog_start(struct nslog *l)
{
	int rc;

	if (l->running || l->loop_init || l->stopping)
		return -EBUSY; /* one start per nslog */
	rc = mkdir_p(l->dir);
	if (rc < 0) {
		rft_err("node %d: cannot make %s: %s", l->self, l->dir,
			strerror(-rc));
		return rc;
	}
	/* Taken at nslog_check(), maybe before the daemon forked. */
	if (l->lockfd >= 0)
		lock_note_pid(l->lockfd);
	else if ((rc = dir_lock(l)) < 0)
		return rc;
	rc = start_state(l);
	if (rc < 0)
		return rc;
	rc = uv_loop_init(&l->loop);
	if (rc < 0)
		return -ENOMEM;
	uv_async_init(&l->loop, &l->wake, on_wake);
	l->wake.data = l;
	uv_check_init(&l->loop, &l->check);
	l->check.data = l;
	uv_check_start(&l->check, on_check);
	l->loop_init = true;
	l->running = true;

	/* The worker first: the loop answers through it. */
	rc = rft_wq_start(l->answers);
	if (rc == 0) {
		pthread_mutex_lock(&l->lock);
		rc = -pthread_create(&l->loop_thread, NULL, loop_main, l);
		l->loop_made = rc == 0;
		pthread_mutex_unlock(&l->lock);
	}
	if (rc == 0) {
		rc = -pthread_create(&l->ctl_thread, NULL, ctl_main, l);
		l->ctl_made = rc == 0;
	}
	if (rc < 0) {
		nslog_stop(l);
		return rc;
	}
	return 0;
}

void nslog_stop(struct nslog *l)
{
	int rc;

	if (!l || !l->running)
		return;
	pthread_mutex_lock(&l->lock);
	l->stopping = true;
	pthread_cond_broadcast(&l->cond);
	while (l->callers > 0)
		pthread_cond_wait(&l->cond, &l->lock);
	pthread_mutex_unlock(&l->lock);
	if (l->ctl_made) {
		pthread_join(l->ctl_thread, NULL);
		l->ctl_made = false;
	}
	/* No new one: rx_rejoin refuses once stopping. */
	if (l->rejoin_made) {
		pthread_join(l->rejoin_thread, NULL);
		l->rejoin_made = false;
	}
	if (l->loop_made) {
		pthread_mutex_lock(&l->lock);
		l->stop_req = true;
		uv_async_send(&l->wake);
		pthread_mutex_unlock(&l->lock);
		pthread_join(l->loop_thread, NULL);
		pthread_mutex_lock(&l->lock);
		l->loop_made = false;
		pthread_mutex_unlock(&l->lock);
	} else if (l->loop_init) {
		loop_close_handles(l);
		uv_run(&l->loop, UV_RUN_DEFAULT);
	}
	if (l->loop_init) {
		rc = uv_loop_close(&l->loop);
		if (rc < 0)
			rft_err("node %d: loop still busy at close: %s",
				l->self, uv_strerror(rc));
		l->loop_init = false;
	}
	/* Answers not yet sent are dropped: their askers ask again. */
	rft_wq_stop(l->answers, RFT_WQ_CANCEL);
	l->running = false;
}

void nslog_free(struct nslog *l)
{
	if (!l)
		return;
	nslog_stop(l);
	nslog_release(l);
}

/* Count a caller in: -ESHUTDOWN once stopping, -ENOTCONN before start. */
static int enter(struct nslog *l)
{
	int rc = 0;

	pthread_mutex_lock(&l->lock);
	if (l->stopping)
		rc = -ESHUTDOWN;
	else if (!l->loop_made)
		rc = -ENOTCONN; /* not started */
	else
		l->callers++;
	pthread_mutex_unlock(&l->lock);
	return rc;
}

static void leave(struct nslog *l)
{
	pthread_mutex_lock(&l->lock);
	l->callers--;
	pthread_cond_broadcast(&l->cond);
	pthread_mutex_unlock(&l->lock);
}

/* Longest single wait on a peer, so that a stop is not held up long. */
static uint64_t call_ms(const struct nslog *l, uint64_t until)
{
	uint64_t now = rft_now_ms(),
		 cap = clampu(4 * l->election_ms, 2000, 10000);

	if (until <= now)
		return 1;
	return until - now < cap ? until - now : cap;
}

/* An attempt that failed with @rc may have reached a leader anyway. */
static bool maybe_reached(int rc)
{
	return rc != -EAGAIN && rc != -ENOTCONN && rc != -ESHUTDOWN &&
	       rc != -ENOMEM && rc != -EBUSY;
}

/* Under l->lock: sleep @ms (at most to @until) unless @p is done. */
static void nap(struct nslog *l, unsigned ms, uint64_t until,
		const bool *done)
{
	uint64_t end = rft_now_ms() + ms;

	if (end > until)
		end = until;
	while (!*done && !l->stopping && rft_now_ms() < end)
		wait_until(l, &l->cond, end);
}

/* Under l->lock: wait until a leader is known, at most to @until. */
static void wait_leader(struct nslog *l, uint64_t until, const bool *done)
{
	while (l->st.leader < 0 && !*done && !l->stopping && !l->start_failed &&
	       rft_now_ms() < until)
		wait_until(l, &l->cond, until);
}

static int submit_local(struct nslog *l, uint64_t rid, const void *buf,
			size_t len, uint64_t until)
{
	struct op *op = op_new(OP_APPLY, true);

	if (!op)
		return -ENOMEM;
	op->buf.len = ENT_HDR_LEN + len + ent_pad(len);
	op->buf.base = raft_malloc(op->buf.len);
	if (!op->buf.base) {
		free(op);
		return -ENOMEM;
	}
	ent_hdr(op->buf.base, ENT_USER, l->self, l->inc, rid, len);
	if (len)
		memcpy((uint8_t *)op->buf.base + ENT_HDR_LEN, buf, len);
	memset((uint8_t *)op->buf.base + ENT_HDR_LEN + len, 0, ent_pad(len));
	return run_local(l, op, until, NULL);
}

static int submit_forward(struct nslog *l, int leader, uint64_t rid,
			  const void *buf, size_t len, uint64_t until)
{
	uint8_t hdr[ENT_HDR_LEN], rm[8];
	struct peer_frame req = {
		.type = NSLOG_T_SUBMIT,
		.meta = hdr,
		.meta_len = ENT_HDR_LEN,
		.bulk = len ? buf : NULL,
		.bulk_len = (uint32_t)len,
		.bulk_crc = len ? ers_crc32c(0, buf, len) : 0,
	};
	struct peer_reply rep = { .meta = rm, .meta_cap = sizeof(rm) };

	ent_hdr(hdr, ENT_USER, l->self, l->inc, rid, len);
	return peer_call(l->x, leader, &req, &rep, (int)call_ms(l, until));
}

int nslog_submit(struct nslog *l, const void *buf, size_t len,
		 int timeout_ms, int *result)
{
	struct pending p = { 0 };
	uint64_t until =
	    rft_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
	struct pending **pp;
	bool reached = false, is_leader;
	int rc, leader;

	if (len > NSLOG_ENTRY_MAX)
		return -EMSGSIZE;
	if ((len && !buf) || !result)
		return -EINVAL;
	rc = enter(l);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&l->lock);
	while (l->inflight >= MAX_INFLIGHT && !l->stopping &&
	       rft_now_ms() < until)
		wait_until(l, &l->cond, until);
	if (l->inflight >= MAX_INFLIGHT) {
		pthread_mutex_unlock(&l->lock);
		leave(l);
		return l->stopping ? -ESHUTDOWN : -ENOTCONN;
	}
	l->inflight++;
	p.rid = ++l->next_rid;
	p.next = l->pending;
	l->pending = &p;
	for (;;) {
		if (p.done && !p.stale) {
			*result = p.result;
			rc = 0;
			break;
		}
		if (p.done) {
			/* Too old to dedupe: never applies; a new id. */
			p.done = p.stale = false;
			p.rid = ++l->next_rid;
		}
		if (l->stopping) {
			rc = -ESHUTDOWN;
			break;
		}
		if (l->start_failed) {
			rc = -EIO;
			break;
		}
		if (rft_now_ms() >= until) {
			rc = reached ? -ETIMEDOUT : -ENOTCONN;
			break;
		}
		if (l->st.leader < 0) {
			wait_leader(l, until, &p.done);
			continue;
		}
		leader = l->st.leader;
		is_leader = l->st.is_leader;
		pthread_mutex_unlock(&l->lock);
		if (is_leader)
			rc = submit_local(l, p.rid, buf, len, until);
		else
			rc = submit_forward(l, leader, p.rid, buf, len, until);
		pthread_mutex_lock(&l->lock);
		reached |= maybe_reached(rc);
		if (rc == 0) {
			/* Committed: wait until this node applied it too. */
			while (!p.done && !l->stopping && rft_now_ms() < until)
				wait_until(l, &l->cond, until);
			continue;
		}
		nap(l, retry_ms(l), until, &p.done);
	}
	for (pp = &l->pending; *pp; pp = &(*pp)->next)
		if (*pp == &p) {
			*pp = p.next;
			break;
		}
	l->inflight--;
	pthread_mutex_unlock(&l->lock);
	leave(l); /* broadcasts: a submit waiting for a slot goes on */
	return rc;
}

int nslog_barrier(struct nslog *l, int timeout_ms)
{
	uint64_t until =
	    rft_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
	uint64_t index = 0;
	bool reached = false, never = false, is_leader;
	uint8_t rm[8];
	int rc, leader;

	rc = enter(l);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&l->lock);
	for (;;) {
		if (l->stopping) {
			rc = -ESHUTDOWN;
			break;
		}
		if (l->start_failed) {
			rc = -EIO;
			break;
		}
		if (rft_now_ms() >= until) {
			rc = reached ? -ETIMEDOUT : -ENOTCONN;
			break;
		}
		if (l->st.leader < 0) {
			wait_leader(l, until, &never);
			continue;
		}
		leader = l->st.leader;
		is_leader = l->st.is_leader;
		pthread_mutex_unlock(&l->lock);
		if (is_leader) {
			struct op *op = op_new(OP_BARRIER, true);

			rc = op ? run_local(l, op, until, &index) : -ENOMEM;
		} else {
			struct peer_frame req = { .type = NSLOG_T_BARRIER };
			struct peer_reply rep = { .meta = rm,
						  .meta_cap = sizeof(rm) };

			rc = peer_call(l->x, leader, &req, &rep,
				       (int)call_ms(l, until));
			if (rc == 0 && rep.meta_len != 8)
				rc = -EPROTO;
			if (rc == 0)
				index = rft_get_le64(rm);
		}
		pthread_mutex_lock(&l->lock);
		reached |= maybe_reached(rc);
		if (rc == 0) {
			while (l->st.applied_index < index && !l->stopping &&
			       rft_now_ms() < until)
				wait_until(l, &l->cond, until);
			if (l->st.applied_index >= index)
				break;
			continue;
		}
		nap(l, retry_ms(l), until, &never);
	}
	pthread_mutex_unlock(&l->lock);
	leave(l);
	return rc;
}

void nslog_get_status(struct nslog *l, struct nslog_status *out)
{
	pthread_mutex_lock(&l->lock);
	*out = l->st;
	out->addrs_unknown = l->unknown;
	pthread_mutex_unlock(&l->lock);
	out->auth_failed = atomic_load(&l->auth_failed);
	out->bad_handshakes = atomic_load(&l->bad_hs);
}

#ifdef RFT_TEST_HOOKS
/* Declared in tests/unit/group_test.h: the unit tests' build only. */
void nslog_test_cut(struct nslog *l, int node, bool cut);

void nslog_test_cut(struct nslog *l, int node, bool cut)
{
	struct op *op;

	if (node < 0 || node >= l->nodes || node == l->self)
		return;
	op = op_new(OP_CUT, true);
	if (!op)
		return;
	op->node = node;
	op->flag = cut;
	run_local(l, op, rft_now_ms() + 10000, NULL);
}
#endif

int nslog_set_addr(struct nslog *l, int node, const char *addr)
{
	struct sockaddr_storage sa;
	struct nslog_where *wh;
	char was[NSLOG_ADDR_MAX];
	socklen_t salen;
	struct op *op;

	if (node < 0 || node >= l->nodes || node == l->self || !addr)
		return -EINVAL;
	if (strlen(addr) >= sizeof(wh->addr))
		return -ENAMETOOLONG;
	if (resolve(addr, &sa, &salen) < 0)
		return -EINVAL;
	pthread_mutex_lock(&l->lock);
	wh = &l->where[node];
	if (strcmp(wh->addr, addr) == 0) {
		pthread_mutex_unlock(&l->lock);
		return 0;
	}
	memcpy(was, wh->addr, sizeof(was));
	if (!was[0])
		l->unknown--;
	strcpy(wh->addr, addr);
	wh->sa = sa;
	wh->salen = salen;
	/* The control thread may wait for the last address to found. */
	pthread_cond_broadcast(&l->cond);
	pthread_mutex_unlock(&l->lock);
	if (!was[0])
		return 0;
	rft_info("node %d: raft links to node %d go to %s now (was %s)",
		 l->self, node, addr, was);
	/*
	 * Links made to the old address: closed on the loop thread.  If this
	 * cannot be queued (no memory, not started or stopping), raft finds
	 * them dead at its next write that fails, or never had any.
	 */
	op = op_new(OP_MOVED, false);
	if (!op)
		return 0;
	op->node = node;
	if (post_op(l, op) < 0)
		op_free(op);
	return 0;
}

/* --- forced recovery ------------------------------------------------------ */

static int say(char *msg, size_t len, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int say(char *msg, size_t len, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, len, fmt, ap);
	va_end(ap);
	return rc;
}

/* Append a generation entry for @node (nslog_force_remove): its old raft
 * ids are refused from then on (tr_check_peer). */
static int bump_gen(struct nslog *l, int node, uint64_t until)
{
	struct op *op = op_new(OP_APPLY, true);
	uint64_t rid;

	if (!op)
		return -ENOMEM;
	op->buf.len = ENT_HDR_LEN;
	op->buf.base = raft_malloc(op->buf.len);
	if (!op->buf.base) {
		free(op);
		return -ENOMEM;
	}
	pthread_mutex_lock(&l->lock);
	rid = ++l->next_rid;
	pthread_mutex_unlock(&l->lock);
	ent_hdr(op->buf.base, ENT_GEN, node, l->inc, rid, 0);
	return run_local(l, op, until, NULL);
}

int nslog_force_remove(struct nslog *l, const int *gone, int ngone,
		       const bool *up, char *msg, size_t len)
{
	struct nslog_status me;
	raft_id ids[GRP_MAX_NODES];
	int nids, survivors[GRP_MAX_NODES], ns = 0, i, k, rc;
	bool named[GRP_MAX_NODES] = { false };
	uint64_t until;
	struct op *op;
	char told[256] = "";
	size_t tl = 0;

	rc = enter(l);
	if (rc < 0)
		return say(msg, len, rc, "the namespace log is not running");
	pthread_mutex_lock(&l->lock);
	me = l->st;
	nids = l->nvoter_ids;
	memcpy(ids, l->voter_ids, sizeof(ids[0]) * (size_t)nids);
	pthread_mutex_unlock(&l->lock);
	if (!me.raft_id || !me.self_voter) {
		rc = say(msg, len, -EAGAIN,
			 "this node is no voter of the namespace log (yet): "
			 "run it on a survivor that is");
		goto out;
	}
	for (i = 0; i < ngone; i++) {
		int n = gone[i];
		bool voter = false;

		for (k = 0; k < nids; k++)
			voter |= node_of(l, ids[k]) == n;
		if (n == l->self) {
			rc = say(msg, len, -EINVAL,
				 "node %d is this node: run it on a survivor",
				 n);
			goto out;
		}
		if (!voter) {
			rc = say(msg, len, -EINVAL,
				 "node %d has no vote in the namespace log",
				 n);
			goto out;
		}
		if (up[n]) {
			rc = say(msg, len, -EBUSY,
				 "node %d is up: force-remove is for nodes "
				 "lost for good (stop it first)",
				 n);
			goto out;
		}
		named[n] = true;
	}
	for (k = 0; k < nids; k++) {
		int n = node_of(l, ids[k]);

		if (n < 0 || named[n])
			continue;
		if (n != l->self && !up[n]) {
			rc = say(msg, len, -EINVAL,
				 "node %d has a vote and is neither named nor "
				 "up: name it too, or start it",
				 n);
			goto out;
		}
		survivors[ns++] = n;
	}
	if (2 * ns <= nids && me.leader >= 0) {
		rc = say(msg, len, -EAGAIN,
			 "node %d still leads the namespace log (it has not "
			 "seen its majority go yet): try again in a few "
			 "seconds",
			 me.leader);
		goto out;
	}
	if (2 * ns > nids) {
		rc = say(msg, len, -EEXIST,
			 "a majority of the namespace log's voters is alive "
			 "(%d of %d): nothing to force; a lost node's "
			 "replacement, started on an empty state dir, joins "
			 "by itself",
			 ns, nids);
		goto out;
	}
	/*
	 * raft_recover's contract (raft.h): run once, on the survivor with
	 * the highest term and the longest log.  Entries a survivor applied
	 * are committed, so they are in that log at the same index.
	 */
	for (i = 0; i < ns; i++) {
		struct peer_frame req = { .type = NSLOG_T_STATE };
		uint8_t rm[24];
		struct peer_reply rep = { .meta = rm, .meta_cap = sizeof(rm) };
		uint64_t term, last, applied;
		int n = survivors[i];

		if (n == l->self)
			continue;
		rc = peer_call(l->x, n, &req, &rep, (int)probe_ms(l) * 4);
		if (rc == 0 && rep.meta_len != sizeof(rm))
			rc = -EPROTO;
		if (rc < 0) {
			rc = say(msg, len, rc,
				 "survivor node %d does not say where its log "
				 "is (%s): every survivor must answer",
				 n, strerror(-rc));
			goto out;
		}
		term = rft_get_le64(rm);
		last = rft_get_le64(rm + 8);
		applied = rft_get_le64(rm + 16);
		/* One survivor is chosen: on a tie, the lowest node id. */
		if (term > me.term ||
		    (term == me.term && (last > me.last_index ||
					 (last == me.last_index &&
					  n < l->self)))) {
			rc = say(msg, len, -EAGAIN,
				 "node %d's log is at least as far along (term "
				 "%llu, last index %llu; here %llu, %llu): run "
				 "force-remove on node %d",
				 n, (unsigned long long)term,
				 (unsigned long long)last,
				 (unsigned long long)me.term,
				 (unsigned long long)me.last_index, n);
			goto out;
		}
		if (applied > me.last_index) {
			rc = say(msg, len, -EIO,
				 "node %d applied index %llu, past this log's "
				 "last %llu: not forced",
				 n, (unsigned long long)applied,
				 (unsigned long long)me.last_index);
			goto out;
		}
	}
	rft_warn("node %d: forcing the namespace log after a lost majority: "
		 "this node the only voter (term %llu, last index %llu)",
		 l->self, (unsigned long long)me.term,
		 (unsigned long long)me.last_index);
	op = op_new(OP_CLOSE, true);
	rc = op ? run_local(l, op, 0, NULL) : -ENOMEM;
	if (rc == 0) {
		op = op_new(OP_START, true);
		if (op) {
			op->id = me.raft_id;
			op->recover = true;
		}
		rc = op ? run_local(l, op, 0, NULL) : -ENOMEM;
	}
	if (rc < 0) {
		rc = say(msg, len, rc,
			 "raft could not restart with the forced "
			 "configuration (%s): see the daemon's log",
			 strerror(-rc));
		goto out;
	}
	/* Alone, it leads at its first election. */
	until = rft_now_ms() + 10000;
	pthread_mutex_lock(&l->lock);
	while (!l->st.is_leader && !l->stopping && rft_now_ms() < until)
		wait_until(l, &l->cond, until);
	rc = l->st.is_leader ? 0 : -ETIMEDOUT;
	pthread_mutex_unlock(&l->lock);
	for (i = 0; i < ngone && rc == 0; i++)
		rc = bump_gen(l, gone[i], until);
	if (rc < 0) {
		rc = say(msg, len, rc,
			 "the forced log did not take its first entries (%s)",
			 strerror(-rc));
		goto out;
	}
	for (i = 0; i < ns; i++) {
		struct peer_frame req = { .type = NSLOG_T_REJOIN };
		struct peer_reply rep = { 0 };
		int n = survivors[i], r;

		if (n == l->self)
			continue;
		r = peer_call(l->x, n, &req, &rep, (int)probe_ms(l) * 4);
		if (tl < sizeof(told))
			tl += (size_t)snprintf(told + tl, sizeof(told) - tl,
					       "; node %d %s", n,
					       r == 0 ? "joins it again"
						      : strerror(-r));
	}
	rc = say(msg, len, 0,
		 "the namespace log now has node %d as its only voter; "
		 "removed: the lost nodes' old ids (their replacements join "
		 "on empty state dirs)%s",
		 l->self, told);
	rft_warn("node %d: %s", l->self, msg);
out:
	leave(l);
	return rc;
}
