/*
 * engine_i.h - what core lends the tiers and the calls of rftengine
 * (library rftengine): struct eng, struct file and struct inode, the lock
 * wrappers, core's hooks (the piece source, the placement) and core's
 * calls for the files above it.  Not for fs/, tools/ or the group (which
 * reach the engine through engine.h and core.h); the `layers` test fails
 * on an include of it outside rftengine.  Each tier's calls are in its own
 * header (pass.h, persist.h, evict.h), which core never includes, and its
 * state in its own file; core's own workers are in core_i.h.
 *
 * Locks, as the code takes them.  This is the one place the order is
 * written down (docs/design.md points here).  Outermost first: a thread
 * that holds a lock never waits for one above it in this list.
 *
 *   eng->names_lock (mutex)  name changes and what their listeners do
 *       (the persist dir's names follow the namespace); with file->lock,
 *       a file's copy, away_rel and copy_id.  Taken with no other lock
 *       held, and held across persist-dir I/O for a name change.  A read
 *       or write that found its copy moved takes and drops it, with no
 *       lock held, to wait out a rename (load_range, read_direct).
 *   ns->lock (rwlock)  namespace tree, inode table, holds, opens and
 *       lookups, non-data attributes, stripe spaces.  Under names_lock
 *       (apply_link, apply_remove, apply_rename, file_revert,
 *       file_resync and ns_snap_restore, persist.c's mirror and
 *       write-back).
 *   file->lock (rwlock, one per file)  slots, size, durability record,
 *       versions, writers, seal and owner fields.  Under ns->lock, or
 *       alone (the data path).  Never two files' locks at once, except
 *       eviction's file_trywrlock under ns->lock, which never waits.
 *   pass.lock (mutex, pass.c's)  every file's pass, homes, spares, early
 *       copies and the pass copier's queue.  Under file->lock (pass_place
 *       on the write path, pass_sealed, copy_sealed, early_round,
 *       pass_open) and under ns->lock alone (pass_stat from
 *       ns_fill_stat).  Under it a file's lock is only ever tried
 *       (keepable: file_tryrdlock).
 *   store->lock (mutex)  the free-chunk stack, faulted-in accounting,
 *       slabs, lent pages.  Under any of the above and under par->lock;
 *       it calls out (pressure, target) only after letting go.
 *
 * Leaves: taken under any of the locks above, or alone; while one is
 * held no other lock is taken (but store->lock under par->lock):
 *   persist->lock     write-back queue, flush tickets, pending removals,
 *                     files whose copy is away, error state (under
 *                     names_lock, ns->lock or file->lock: set_copy)
 *   copier.lock       files' pending counts dropping to 0, and the
 *                     waits for it (copy_fn, file_wait_writes)
 *   copier queue lock write copies queued for the copier (rft_wq's;
 *                     under file->lock: write_common)
 *   fetch queue lock  reads queued for the fetch threads (rft_wq's;
 *                     enqueue takes ns->lock for the hold first, and
 *                     lets it go)
 *   loads.lock        pieces being loaded (waited on with no namespace
 *                     or file lock held)
 *   eng->handles_lock the list of open handles (under ns->lock: open)
 *   eng->joined_lock  calls waiting for the group's join (eng_wait_joined,
 *                     no other lock held; eng_group_ready wakes them)
 *   p->lock           struct protect (protect.c): jobs, folded seals,
 *                     answers; as a listener under names_lock
 *                     (EV_UNLINKED, EV_RENAMED) or ns->lock
 *                     (EV_EVICTED), else alone
 *   g->lock           struct gns (gns.c): queues, pending proposals,
 *                     parked waits; never held across an engine call,
 *                     the log or the network
 *   par->lock         struct parity (parity.c): the stripe table and
 *                     decodes in flight; taken with no engine lock held,
 *                     and store->lock is taken under it (a row's chunk),
 *                     never waiting
 *
 * Outside this order: the group's own locks (nslog, memb, peer_tcp, the
 * calls of peer.c, group.c), each private to its module and let go before
 * it calls out; no engine lock is held across a call into engine/group/
 * (it may wait for the network).  nslog's loop thread applies entries
 * (ns_apply) holding none of its own locks, taking engine locks as a FUSE
 * call does.  fs/'s locks (control socket, invalidation queue, lane, loop,
 * stale backing ids) are never held across an engine call.
 *
 * The data path takes more than file->lock.  eng_write: file->lock (write),
 * under it pass.lock (pass_place, in place), store->lock (to allocate) and the
 * copier queue's lock (to queue a copy); after letting go, ns->lock (write,
 * briefly, for a hold: queue_job via pass_wrote, with early copies on) and
 * pass.lock.  eng_read: copier.lock when copies are queued (to wait for them),
 * file->lock (read), store->lock when a pin is the last one put; a read that
 * must fetch takes ns->lock (write, for the hold) and then the fetch queue's
 * lock.  eng_release: pass.lock (pass_take, pass_release), file->lock (the
 * seal), ns->lock (write), the listeners' leaves (EV_DIRTY), gns.c's g->lock
 * (the seal to the group) and handles_lock.  What is held across the copy of a
 * write's bytes is the file's own lock only: no global lock.
 *
 * Checked.  Every acquisition and release of these locks, leaves included (not
 * the fetch and copier queues', which rft_wq takes inside its own calls), goes
 * through wrappers: eng_names_lock, ns_rdlock, file_wrlock, file_trywrlock,
 * pass_lock, store_lock and their unlocks (after struct eng), and leaf_lock
 * (core.h, with the ranks, enum eng_rank and eng_ranks[]: the group's leaves
 * are taken with it too).  They keep per thread which of these locks it holds
 * (common/rft_lockrank.h).  A thread that waits for a lock while holding what
 * this comment does not allow (the same lock or one below it in the list, any
 * leaf but par->lock for store->lock, and for par->lock any lock at all), or
 * lets go of a lock it does not hold, prints that lock and where, what it holds
 * and where it took each, and aborts: a test that meets it fails with the
 * reason (lib.sh looks for the report in daemons' logs too).  A try never
 * waits: allowed anywhere, counted when it succeeds.
 *
 * The check is on wherever assert() is (NDEBUG unset): meson's debug and
 * debugoptimized buildtypes, so build/, which ships and which the quick
 * tier tests, build-asan and build-tsan; off with NDEBUG (buildtype
 * release), where the wrappers are the plain pthread calls.  Its cost:
 * about 1 ns on a lock/unlock pair of 28 ns (tests/bench/lock_bench: a
 * thread-local mask test and count, no call), and a FUSE request takes
 * about ten locks of any kind (counted over small_bench's operations) and
 * costs tens of microseconds: under 0.1%, not measurable in small_bench.
 * Worth paying in the build that ships: a wrong order is a deadlock
 * waiting for its interleaving, better found by every test run, and
 * stopped with its name, than a hung mount.
 */
#ifndef RFT_ENGINE_I_H
#define RFT_ENGINE_I_H

#include <limits.h>
#include <pthread.h>
#include <assert.h>
#include <stdatomic.h>

#include "engine.h"
#include "rft_wq.h"
#include "store.h"
#include "nsop.h"
#include "core.h"

struct persist;

/* --- files -------------------------------------------------------------- */

#define SLOT_CRC_UNKNOWN UINT32_MAX

#define SLOT_CLEAN (1u << 0) /* same bytes as the persisted copy */
#define SLOT_FRESH (1u << 1) /* just read through: eviction skips it once,
				so its reader gets to use it */
#define SLOT_FETCHED (1u << 2) /* a copy of the holders' bytes, fetched by
				  a reader on another node than the owner:
				  evictable back to PIECE_PEER */

/*
 * Where the bytes of one piece of a file are.  Every place that asks goes
 * through slot_in_ram() or a switch on this type.
 */
enum piece_where {
	PIECE_HOLE,	/* nowhere: reads as zeros */
	PIECE_RAM,	/* in arena chunk slot->chunk */
	PIECE_PERSIST,	/* only in the file's persisted copy */
	PIECE_PEER,	/* on other nodes of the group: file->holders */
	PIECE_SPILL,	/* only in the spill dir (spill.c), by file id and
			   index; crc final */
};

/*
 * One chunk-sized piece of a file.  Bytes [0, fill) of the chunk hold data;
 * bytes from fill up to end of file read as zeros.  crc covers the first
 * crc_len bytes of the piece as the file shows them (zeros past fill).
 */
struct slot {
	uint32_t chunk;	/* PIECE_RAM: the arena chunk */
	uint32_t fill;
	uint32_t crc;
	uint32_t crc_len;
	uint8_t where;	/* enum piece_where */
	uint8_t flags;	/* SLOT_CLEAN */
};

static inline bool slot_in_ram(const struct slot *s)
{
	return s->where == PIECE_RAM;
}

/* Elsewhere: read into memory (file_load) before use. */
static inline bool slot_remote(const struct slot *s)
{
	return s->where == PIECE_PERSIST || s->where == PIECE_PEER ||
	       s->where == PIECE_SPILL;
}

#define SLOT_HOLE_INIT ((struct slot){ 0, 0, 0, 0, PIECE_HOLE, 0 })

/*
 * Where a file's copy in the persist dir is.  It follows the file's name
 * (renames are mirrored at once); when it cannot, the file keeps reading
 * from where the copy is and is written back again under its name.
 */
enum copy_where {
	COPY_NONE,   /* no copy */
	COPY_HOME,   /* at the file's current path */
	COPY_PARKED, /* in the staging dir: unlinked while open */
	COPY_AWAY,   /* at away_rel: its name moved and the copy did not */
};

/*
 * What of a file is final, and what is safe where, as versions of its
 * data and metadata: independent properties, not points on one scale.
 * Sealed: its last writer closed at the current data version.  Persisted:
 * the persisted copy holds the current data and metadata versions.
 * Protected (the group, issue 8): peers hold the current data version, as
 * the file's scheme says.  A checkpoint's state is derived from these.
 */
struct durability {
	uint64_t sealed;	  /* data version at the last seal */
	uint64_t persisted_data;  /* versions in the persisted copy; 0: none */
	uint64_t persisted_meta;
	uint64_t protected_data;  /* data version peers hold; 0: none */
	/* When each became true of the version it names (rft_now_ms, on
	 * this node); 0: not known (found in the persist dir at start). */
	uint64_t sealed_ms, persisted_ms, protected_ms;
};

struct file;

/*
 * The durability record's one writer (file.c; the `layers` test holds
 * every other file to reading it): f->lock held for writing, or the file
 * not yet reachable.  What becomes true of the file's current version
 * (protected, persisted; lost, file_log_lost) is news, kept in the file
 * (f->dur_news) and posted as EV_PROTECTED, EV_PERSISTED, EV_LOST by
 * file_dur_unlock once the file's lock is let go.  A plain file_unlock
 * with news kept is a bug, stopped where assert() is on.
 */
/* Its last writer closed (or it was made sealed) at the current version. */
void file_dur_sealed(struct file *f);
/* Peers hold @version of its data, as its scheme says; 0: no longer
 * (a holder lost, the file lost). */
void file_dur_protected(struct file *f, uint64_t version);
/* The persisted copy under its name holds @data and @meta; 0, 0: none
 * there (its copy moved away, or is gone). */
void file_dur_persisted(struct file *f, uint64_t data, uint64_t meta);
/* Found so in the persist dir at start (persist_scan), the file not yet
 * reachable: sealed and persisted as it stands.  No news. */
void file_dur_found(struct file *f);
/* The news of the record and the log's record (a file's bits). */
#define DUR_NEWS_PROTECTED 1u
#define DUR_NEWS_PERSISTED 2u
#define DUR_NEWS_LOST	   4u
/*
 * Let go of @in's file lock, held for writing, and post its news: what
 * the writers above made true (EV_PROTECTED, EV_PERSISTED, EV_LOST).
 * Whatever other locks the caller holds (ns->lock, the names lock) stay
 * held, so listeners take leaf locks only.  @in held by the caller.
 */
void file_dur_unlock(struct eng *e, struct inode *in);

struct seal_rec;

/*
 * What the log says of a file beyond its last seal's content, the same
 * on every node whatever that node has of its own (a draft, open
 * handles, its own write-back): what a snapshot of the log carries
 * (nssnap.c), and what a node that shows the group's version derives
 * its records from (holders, protected, persisted, lost: record.c's
 * log_holders, log_records).  Of the last seal (struct file's sealed)
 * or, before the first, of the file as made.  Changed only by the
 * applies of the log's entries and a restore, through its one writer
 * below; f->lock for writing (times of a name change: ns->lock for
 * writing as well), read with either.
 */
struct file_log {
	uint64_t writers;	/* nodes that made or opened it for writing
				   (CREATE, OPEN) since the seal, not lost */
	uint64_t holders;	/* the sealer (until a LOST of its node) and
				   the nodes PROTECTs named */
	uint64_t named;		/* the nodes PROTECTs named, copies or parity
				   rows, not lost since */
	uint64_t persisted;	/* index of the last PERSIST of it; 0: none */
	struct timespec mtime, ctime; /* as a node showing it has them */
	bool sealed_as_is;	/* no SEAL yet, yet sealed as it stands: made
				   by MKNOD, or a SETATTR came (a closed
				   file's change seals it, apply_setattr) */
	bool protected;		/* a PROTECT, and no LOST of a holder since */
	bool meta_changed;	/* a SETATTR of its metadata since PERSIST */
	bool lost;		/* a LOST found it nowhere but on its owner */
};

/*
 * The log's record's one writer (file.c; the `layers` test holds every
 * other file to reading it), called by the applies of the log's entries
 * (ns.c, nscall.c, record.c) and by a restore (record.c's file_restore).
 * f->lock held for writing, or the file not yet reachable.
 */
/* Its times: @mtime, @ctime (either NULL: unchanged).  A name's change
 * (ctime only) holds ns->lock for writing instead. */
void file_log_times(struct file *f, const struct timespec *mtime,
		    const struct timespec *ctime);
/* Sealed as it stands, before any SEAL: MKNOD made it, or a SETATTR
 * came (nothing once a SEAL was applied). */
void file_log_sealed_as_is(struct file *f);
/* A SETATTR of its metadata (not of its times alone). */
void file_log_meta_changed(struct file *f);
/* The nodes writing it: @clear out, then @set in. */
void file_log_writers(struct file *f, uint64_t set, uint64_t clear);
/* A SEAL by node @node (@mtime, its entry's @ctime): what came of the
 * seal before is gone; its node holds it, nothing else yet. */
void file_log_seal(struct file *f, int node, const struct timespec *mtime,
		   const struct timespec *ctime);
/* A PROTECT of its last seal (or of the file as it stands, before the
 * first) naming @holders: protected when that is sealed. */
void file_log_protect(struct file *f, uint64_t holders);
/* A PERSIST of it, entry @index: recorded when it is sealed. */
void file_log_persist(struct file *f, uint64_t index);
/* A LOST of node @bit's node: it writes nothing, holds nothing now. */
void file_log_lose_node(struct file *f, uint64_t bit);
/* A LOST found it nowhere but on its owner's lost memory. */
void file_log_lost(struct file *f);
/* A restore (file_restore): the snapshot's record, whole. */
void file_log_restore(struct file *f, const struct file_log *log);

struct file {
	pthread_rwlock_t lock;
	uint64_t id;		/* stable across remounts: in the sidecar */
	uint64_t size;		/* protected by lock */
	struct slot *slots;	/* protected by lock; nslots may be < size */
	uint32_t nslots, cap;	/* protected by lock */
	struct durability dur;	/* protected by lock */
	uint8_t dur_news;	/* DUR_NEWS_*, to post (file_dur_unlock);
				   lock */
	unsigned writers;	/* open handles that may write; lock */
	uint64_t version;	/* bumped by every data change; from 1; lock */
	uint64_t meta_version;	/* bumped by chmod, chown, utimens; lock */
	uint64_t cached_version; /* version a cached open last saw; lock */
	/* Changed under lock and eng->names_lock; read under either. */
	enum copy_where copy;
	char *away_rel;		/* COPY_AWAY: the copy's path */
	struct copy_id {	/* the copy's host inode: renames keep it */
		dev_t dev;
		ino_t ino;	/* 0: not known */
	} copy_id;
	/* Write-back of this file failed: retried alone, with backoff. */
	uint32_t wb_failures;	/* lock */
	uint64_t wb_next_ms;	/* not before this CLOCK_MONOTONIC ms; lock */
	int wb_error;		/* last failure, -errno, 0 if none; lock */
	uint64_t wb_sync;	/* an fsync under --sync persist waits for
				   this version in the persist dir; lock */
	bool crc_unverified;	/* came from persist without sums; lock */
	bool crc_bad;		/* a chunk failed its check; lock */
	uint32_t resident;	/* slots holding an arena chunk; lock */
	_Atomic unsigned pending; /* queued copies (eng_write_async); added
				     to under lock, dropped under
				     copier.lock, read anywhere */
	/* The copies queued for it, oldest first, until their bytes are in
	 * (file_range_queued); lock. */
	struct wjob *wjobs, *wjobs_tail;
	struct pass *pass;	/* its backing file while opens pass through
				   to it (pass.c); eng->pass.lock */
	struct early *early;	/* its copy made while it is written
				   (pass.c); eng->pass.lock */
	_Atomic bool early_queued; /* for the copier's next early round */
	struct pass *home;	/* the backing file its pieces are written
				   into while it is written (pass_place);
				   eng->pass.lock */
	uint64_t name_hash;	/* of its name at create (pass_name_hash),
				   0: none; set once, before it is shared */
	unsigned pass_cuts;	/* truncates in progress while passthrough
				   is on (pass_cut_begin); eng->pass.lock */
	/*
	 * The group.  A file's content is that of its last SEAL in the log
	 * (docs/design.md, "Several writers"); the owner is the node that
	 * sealed it (or made it, before its first seal) and keeps its data
	 * whole; the others learn its size and checksums from the SEAL, at
	 * log index gseal, and fetch pieces (PIECE_PEER) from the nodes in
	 * @holders.  On a single node: owner 0, the rest 0.
	 */
	int owner;		/* node id; lock */
	uint64_t gseal;		/* log index of the seal the pieces are of;
				   lock */
	uint64_t holders;	/* nodes holding gseal's bytes (bit per id);
				   lock */
	uint64_t remote_writers; /* nodes that made it and have not
				    sealed it since, nor been lost (bit per
				    id): not sealed here; lock */
	uint64_t seal_sent;	/* last version whose SEAL this node
				   proposed; lock */
	/*
	 * The seal (its gseal) that a LOST found nowhere but in the memory
	 * of its owner, gone: the file is lost while it is at that seal
	 * (file_lost); a new seal (a write, a truncate) ends it.  0: not
	 * lost.  From the log, alike on every node.  lock.
	 */
	uint64_t lost_seal;
	/*
	 * The group's version: what the last SEAL applied says (NULL before
	 * the first).  The slots show it, unless this node has a version of
	 * its own (a draft): the data changed here since the slots were
	 * last the group's (synced: f->version then), to be sealed at its
	 * last writer's close.  Until then the slots stay this node's,
	 * whatever other nodes seal meanwhile.  lock.
	 */
	struct seal_rec *sealed;
	struct file_log log;	/* the log's record of it: lock */
	uint64_t synced;
	bool fetch_said;	/* a piece of gseal could not be fetched:
				   logged once per seal; lock */
	/*
	 * Erasure-coded protection (parity.c): gseal's scheme (a
	 * stripe_code(), 0 for none or replicas), and where its pieces sit
	 * in the stripe space: piece i is the owner's chunk number
	 * chunk_base + i of checkpoint stripe_ckpt.  Set by the SEAL's
	 * apply, the same on every node.  parity_holders: the nodes whose
	 * parity rows hold gseal's pieces (from PROTECT).  lock.
	 */
	uint32_t scheme;
	uint64_t stripe_ckpt;
	uint64_t chunk_base;
	uint64_t parity_holders;
	/* Read-ahead: pieces below this were queued already (file_ahead). */
	_Atomic uint32_t ahead_next;
};

/* The derived properties; f->lock held (read is enough). */
static inline bool file_sealed(const struct file *f)
{
	return f->writers == 0 && !f->remote_writers &&
	       f->dur.sealed == f->version;
}

static inline bool file_data_persisted(const struct file *f)
{
	return f->dur.persisted_data == f->version;
}

static inline bool file_persisted(const struct file *f)
{
	return file_data_persisted(f) && f->dur.persisted_meta == f->meta_version;
}

/* Its sealed bytes are gone with its owner's memory (file_apply_lost). */
static inline bool file_lost(const struct file *f)
{
	return f->lost_seal && f->lost_seal == f->gseal;
}

/* One word for reports: writing, lost, sealed, protected or persisted. */
static inline enum eng_state file_state(const struct file *f)
{
	if (!file_sealed(f))
		return ENG_STATE_WRITING;
	if (file_lost(f))
		return ENG_STATE_LOST;
	if (file_persisted(f))
		return ENG_STATE_PERSISTED;
	if (f->dur.protected_data == f->version)
		return ENG_STATE_PROTECTED;
	return ENG_STATE_SEALED;
}


/* --- namespace ---------------------------------------------------------- */

struct dentry {
	char *name;
	struct inode *inode;
	struct inode *dir;		/* the directory it is in */
	struct dentry *lnext;		/* the inode's next name (hard links) */
	struct dentry *hnext;		/* hash chain in the parent */
	struct dentry *prev, *next;	/* insertion order, for readdir */
};

struct dir {
	struct dentry **table;
	uint32_t nbuckets;
	uint32_t count;
	uint32_t nsubdirs;
	struct dentry *first, *last;
};

struct inode {
	uint64_t ino;
	mode_t mode;		/* protected by ns->lock */
	mode_t type;		/* mode's S_IFMT bits: set when made, never
				   changed, read with no lock */
	uid_t uid;		/* protected by ns->lock */
	gid_t gid;		/* protected by ns->lock */
	uint32_t nlink;		/* protected by ns->lock */
	struct timespec atime;	/* protected by ns->lock */
	struct timespec mtime;	/* ns->lock; for files: file->lock */
	struct timespec ctime;	/* ns->lock; for files: file->lock */
	_Atomic bool setid;	/* regular file with bits a write clears;
				   changed under ns->lock, read anywhere */
	uint64_t nlookup;	/* kernel references; ns->lock */
	unsigned opens;		/* open handles; ns->lock */
	unsigned holds;		/* engine-internal references; ns->lock */
	/*
	 * Regular files: handles open for reading alone, and when the last
	 * run of them began (its first open) and ended (its last release; 0
	 * while one is open): what a load of it took here (rft_now_ms;
	 * eng_ckpt_info's load_*).  ns->lock.
	 */
	unsigned readers;
	uint64_t read_from_ms, read_to_ms;

	/*
	 * Its names: dentry is the primary one (the path persist and admin
	 * use, where a file's copy lives), the others follow on lnext; parent
	 * is the primary's directory.  ns->lock; NULL once unlinked.
	 */
	struct inode *parent;
	struct dentry *dentry;

	uint64_t ckpt_seq;	/* top-level directories: creation order */
	uint64_t ckpt_born_ms;	/* ... and when this node made it one
				   (rft_now_ms); 0: restored, not known */
	dev_t rdev;		/* device nodes */
	bool node_persisted;	/* symlinks, FIFOs, sockets, devices: in the
				   persist dir under every name; ns->lock */
	uint32_t node_version;	/* directories and nodes: +1 at each change
				   of their metadata, so that a write-back
				   that copied older metadata does not count;
				   ns->lock */

	struct inode *hnext;	/* inode hash chain; ns->lock */
	/* The persist tier's queue of things to write back; persist->lock. */
	struct inode *wb_next, *wb_prev;
	bool wb_queued;
	union {
		struct dir dir;
		struct file file;
		char *target;	/* symlink */
	};
};

/*
 * A checkpoint's stripe space under one scheme: the next chunk number of
 * each node in it.  Advanced by SEAL applies only, so every node numbers
 * every piece alike (ns->lock).
 */
struct stripe_space {
	struct stripe_space *next;
	uint64_t ckpt;		/* the top-level directory's inode number */
	uint32_t scheme;
	uint64_t next_chunk[64];
};

struct ns {
	pthread_rwlock_t lock;
	struct inode **table;	/* by inode number */
	uint32_t nbuckets;
	uint64_t count;
	uint64_t next_ino;
	uint64_t next_ckpt_seq;
	uint64_t nfiles, ndirs;
	struct inode *root;
	struct stripe_space *spaces; /* lock */
	/*
	 * The incarnation of each node's last LOST (0: none): a restore
	 * tells by it whether this daemon's own LOST is behind it
	 * (file_restore).  Changed and read by the log's applies only.
	 */
	uint64_t lost_inc[64];
};

/*
 * Core's workers, private to core (core_i.h): the copier of write copies,
 * the fetch threads and the pieces being loaded.  core_io_new sets them up
 * at eng_new (-ENOMEM); core_io_free, after fetch_fini and copier_stop,
 * lets them go (NULL-safe).
 */
struct core_io;
int core_io_new(struct eng *e);
void core_io_free(struct eng *e);

int fetch_start(struct eng *e);
void fetch_stop(struct eng *e);
/* Stop the fetch threads if need be and free their queue. */
void fetch_fini(struct eng *e);

/* --- piece sources ------------------------------------------------------ */

/*
 * Where a copy of a file's sealed bytes lives outside RAM and outside the
 * group, as its source found it (struct piece_source's locate); core only
 * hands it back to the source's read.
 */
struct piece_loc {
	struct copy_id id;	/* the copy's host inode; ino 0: not known */
	char rel[PATH_MAX];	/* its path below the persist dir */
};

/*
 * A tier that keeps copies of files (the persist dir) lends them to core's
 * read path: a piece whose slot says PIECE_PERSIST is read through here,
 * and a group's piece (PIECE_PEER) too when its holders cannot give it and
 * the copy is of the same seal.  One at most, registered before eng_start
 * (eng_piece_source); core never calls the tier by name.
 */
struct piece_source {
	/*
	 * Where @in's copy is now, into @loc: 0, or -ENOENT (none, or no
	 * name).  ns->lock and @in's file lock held (read is enough).
	 */
	int (*locate)(struct eng *e, const struct inode *in,
		      struct piece_loc *loc);
	/*
	 * Read @fill bytes at @off of the copy at @loc, then zeros up to
	 * @len, into @buf; checked against @crc when @crc_len == @len (-EIO
	 * on a mismatch, never wrong bytes).  -ENOENT when a rename since
	 * the look-up put another file there: the caller looks again.  No
	 * lock held.
	 */
	int (*read)(struct eng *e, const struct piece_loc *loc, uint64_t off,
		    uint32_t fill, uint32_t len, uint32_t crc,
		    uint32_t crc_len, uint8_t *buf);
};

void eng_piece_source(struct eng *e, const struct piece_source *src);

/*
 * The spill tier (spill.c) lends core's read path its pieces: a slot that
 * says PIECE_SPILL is read through here.  Registered before eng_start
 * (eng_spill_source); core never calls the tier by name.
 */
struct spill_source {
	/*
	 * Read piece @idx of file @file_id into @buf as its slot says: the
	 * @crc_len bytes spilled, checked against @crc, then zeros from
	 * @fill up to @len (a truncate since the spill keeps its checksum,
	 * as a piece on peers does; @buf holds the larger of @len and
	 * @crc_len).  0, or -EIO when it cannot be read or fails its check
	 * (never wrong bytes).  No lock held.
	 */
	int (*read)(struct eng *e, uint64_t file_id, uint32_t idx,
		    uint32_t fill, uint32_t len, uint32_t crc,
		    uint32_t crc_len, uint8_t *buf);
	/*
	 * Take back what the dir holds from before this start, once the
	 * namespace is known (eng_spill_found): the count of pieces, or
	 * -errno.  No lock held.
	 */
	long (*found)(struct eng *e);
};

void eng_spill_source(struct eng *e, const struct spill_source *src);

/*
 * Where a large file's new pieces go while it is written: a tier that
 * backs files (passthrough) lends the write path a page of a backing file
 * for each, and hears of each piece a write fills.  One at most,
 * registered before eng_start (eng_placement); core never calls the tier
 * by name.
 */
struct placement {
	/*
	 * Piece @idx of @f is new, for a write up to offset @end: the chunk
	 * for it (refs 1, counted as used), or RFT_NO_CHUNK: the write path
	 * takes one from the store.  f->lock held for writing.
	 */
	uint32_t (*place)(struct eng *e, struct file *f, uint32_t idx,
			  uint64_t end);
	/* A write filled a piece of @in, @size bytes long now.  No lock
	 * held. */
	void (*wrote)(struct eng *e, struct inode *in, uint64_t size);
};

void eng_placement(struct eng *e, const struct placement *pl);

/* --- the engine --------------------------------------------------------- */

struct eng_counters {
	_Atomic uint64_t write_ops, write_bytes, read_ops, read_bytes;
	_Atomic uint64_t enospc, crc_errors, evicted_chunks;
	_Atomic uint64_t fetch_reads, fetch_timeouts;
	_Atomic uint64_t readthrough_chunks, readthrough_bytes;
	_Atomic uint64_t peer_chunks, peer_bytes; /* fetched from peers */
	/* Pieces brought in while memory was full; reads served without
	   keeping their copy (read_direct). */
	_Atomic uint64_t fetch_stalls, reads_uncached;
	/* Files' versions that became protected, persisted, lost here
	   (EV_PROTECTED, EV_PERSISTED, EV_LOST: engine.c's listener). */
	_Atomic uint64_t protected_versions, persisted_versions;
	_Atomic uint64_t lost_versions;
};

struct eng {
	struct eng_config cfg;
	char *mountpoint;
	char *persist_dir;
	char *spill_dir;
	time_t start_time;
	struct store store;
	struct ns ns;
	struct persist *persist; /* NULL without a persist dir */
	const struct piece_source *src; /* the persist dir's, or NULL */
	struct spill *spill;	/* the spill tier's (spill.c), or NULL */
	const struct spill_source *spill_src; /* its reads, or NULL */
	const struct placement *placement; /* passthrough's, or NULL */
	struct eng_counters cnt;
	struct evictor *evictor; /* eviction's (evict.c) */
	struct core_io *io;	/* core's workers (core_i.h) */
	pthread_mutex_t names_lock; /* see the lock order above */
	pthread_mutex_t handles_lock; /* a leaf */
	struct eng_file *handles;	/* open handles; handles_lock */
	struct {
		eng_listener_fn fn;
		void *ctx;
	} listeners[ENG_MAX_LISTENERS];
	unsigned nlisteners;
	const uint8_t *zeros; /* chunk_size bytes of zeros, for holes */
	_Atomic uint64_t learned_ckpt_bytes; /* see next_checkpoint_bytes */
	uint64_t id_seed;		/* random, for file ids */
	_Atomic uint64_t id_count;
	/* The group (gns.c); a single node: node 0, no gops. */
	int node;			/* this node's id in the group */
	uint64_t inc;			/* this daemon's incarnation */
	const struct eng_group_ops *gops; /* NULL: a single node */
	void *gctx;
	_Atomic bool caught_up;	/* eng_group_ready() succeeded once */
	/* A leaf: calls waiting for caught_up (eng_wait_joined). */
	pthread_mutex_t joined_lock;
	pthread_cond_t joined;	/* caught_up became true */
	struct eng_invalidator inval; /* fs/'s, or all NULL */
	struct pass_ctl *pass;	/* passthrough's (pass.c), or NULL */
};

/*
 * The wrappers of the ranked locks, one per lock and way of taking it;
 * each passes its caller's file and line to the check (core.h: the ranks,
 * the leaves' leaf_lock).  The names lock: name changes and what follows
 * them, one at a time.
 */
static inline void eng_names_lock_at(struct eng *e, const char *at, int ln)
{
	eng_mutex_lock_at(&e->names_lock, ENG_RANK_NAMES, at, ln);
}

static inline void eng_names_unlock_at(struct eng *e, const char *at, int ln)
{
	eng_mutex_unlock_at(&e->names_lock, ENG_RANK_NAMES, at, ln);
}

#define eng_names_lock(e) eng_names_lock_at((e), ENG_AT)
#define eng_names_unlock(e) eng_names_unlock_at((e), ENG_AT)

static inline void ns_rdlock_at(struct eng *e, const char *at, int ln)
{
	eng_rdlock_at(&e->ns.lock, ENG_RANK_NS, at, ln);
}

static inline void ns_wrlock_at(struct eng *e, const char *at, int ln)
{
	eng_wrlock_at(&e->ns.lock, ENG_RANK_NS, at, ln);
}

static inline void ns_unlock_at(struct eng *e, const char *at, int ln)
{
	eng_rwunlock_at(&e->ns.lock, ENG_RANK_NS, at, ln);
}

#define ns_rdlock(e) ns_rdlock_at((e), ENG_AT)
#define ns_wrlock(e) ns_wrlock_at((e), ENG_AT)
#define ns_unlock(e) ns_unlock_at((e), ENG_AT)

static inline void file_rdlock_at(struct file *f, const char *at, int ln)
{
	eng_rdlock_at(&f->lock, ENG_RANK_FILE, at, ln);
}

static inline void file_wrlock_at(struct file *f, const char *at, int ln)
{
	eng_wrlock_at(&f->lock, ENG_RANK_FILE, at, ln);
}

static inline bool file_tryrdlock_at(struct file *f, const char *at, int ln)
{
	return eng_tryrdlock_at(&f->lock, ENG_RANK_FILE, at, ln);
}

static inline bool file_trywrlock_at(struct file *f, const char *at, int ln)
{
	return eng_trywrlock_at(&f->lock, ENG_RANK_FILE, at, ln);
}

static inline void file_unlock_at(struct file *f, const char *at, int ln)
{
	/* News of its durability goes out with file_dur_unlock. */
	assert(!f->dur_news);
	eng_rwunlock_at(&f->lock, ENG_RANK_FILE, at, ln);
}

#define file_rdlock(f) file_rdlock_at((f), ENG_AT)
#define file_wrlock(f) file_wrlock_at((f), ENG_AT)
/* True if taken; never waits. */
#define file_tryrdlock(f) file_tryrdlock_at((f), ENG_AT)
#define file_trywrlock(f) file_trywrlock_at((f), ENG_AT)
#define file_unlock(f) file_unlock_at((f), ENG_AT)

static inline void store_lock_at(struct store *s, const char *at, int ln)
{
	eng_mutex_lock_at(&s->lock, ENG_RANK_STORE, at, ln);
}

static inline void store_unlock_at(struct store *s, const char *at, int ln)
{
	eng_mutex_unlock_at(&s->lock, ENG_RANK_STORE, at, ln);
}

#define store_lock(s) store_lock_at((s), ENG_AT)
#define store_unlock(s) store_unlock_at((s), ENG_AT)

/*
 * Until a node has joined its group's namespace (eng_group_ready), what
 * it has is not the group's: a call waits for the join up to
 * ENG_JOIN_WAIT_MS and then fails -EAGAIN.  No lock held.
 */
#define ENG_JOIN_WAIT_MS 10000
int eng_wait_joined(struct eng *e);
/* The node has joined (eng_group_ready): wake the calls waiting. */
void eng_joined(struct eng *e);

/*
 * Before any call that reads or changes the namespace or reads data: the
 * join above, then eng_group_ops.fresh.  0 at once on a single node.
 */
static inline int eng_fresh(struct eng *e)
{
	if (!e->gops)
		return 0;
	if (!atomic_load(&e->caught_up))
		return eng_wait_joined(e);
	return e->gops->fresh ? e->gops->fresh(e->gctx) : 0;
}

struct eng_file {
	struct inode *inode;
	int flags;	/* open(2) flags */
	bool writer;
	bool pass;	/* passes through to the file's backing file (pass.c);
			   set before the handle is handed out */
	/* All open handles, so that eng_free can free what the kernel never
	 * released (a lazy unmount); protected by eng->handles_lock. */
	struct eng_file *hnext, *hprev;
};

static inline void eng_now(struct timespec *ts)
{
	clock_gettime(CLOCK_REALTIME, ts);
}

/* A new file id: random-looking, never 0, unique with all odds. */
uint64_t eng_new_file_id(struct eng *e);

/* ns.c: the tree of inodes and names */
int ns_init(struct ns *ns);
void ns_fini(struct eng *e);
/* Find a live inode; caller holds ns->lock. */
struct inode *ns_find(struct ns *ns, uint64_t ino);
struct inode *ns_new_inode(struct eng *e, mode_t mode, uid_t uid, gid_t gid);
/* The same, with its times set to @now and file id @file_id (0: a new one). */
struct inode *ns_new_inode_at(struct eng *e, mode_t mode, uid_t uid,
			      gid_t gid, const struct timespec *now,
			      uint64_t file_id);
/*
 * Take name @de out of @dir: its inode loses a link (and its primary name
 * moves to another, if any); not freed here.  ns->lock held for writing.
 */
void ns_unlink_child(struct inode *dir, struct dentry *de);
/* Free @in once nothing refers to it; ns->lock held for writing. */
void ns_maybe_free(struct eng *e, struct inode *in);
/*
 * Give @child the name @name in @dir: as its primary name if @primary (or
 * it has none), else as one more (a hard link).  ns->lock held.
 */
int ns_link_child(struct eng *e, struct inode *dir, const char *name,
		  struct inode *child, bool primary);
/* Path of @de relative to the root into @buf; ns->lock held. */
int ns_dentry_path(struct ns *ns, const struct dentry *de, char *buf,
		   size_t size);
struct dentry *ns_dir_find(struct dir *d, const char *name);
/* Drop an engine-internal hold taken with ns->lock held (holds++). */
void ns_unhold(struct eng *e, struct inode *in);
/* Path of @in relative to the root into @buf; ns->lock held. */
int ns_path(struct ns *ns, const struct inode *in, char *buf, size_t size);
/* The entry at @rel (relative to the root), or NULL; ns->lock held. */
struct inode *ns_resolve(struct ns *ns, const char *rel);
/* Top-level directory above @in, or NULL; ns->lock held. */
struct inode *ns_checkpoint_of(struct ns *ns, const struct inode *in);
/* Set @in's mode (type bits included); ns->lock held for writing. */
void ns_set_mode(struct inode *in, mode_t mode);
/* Root names starting with this belong to the persist dir (lock, staging). */
#define RFT_RESERVED_PREFIX ".reftfs-"
bool ns_name_reserved(const struct inode *parent, const char *name);
/*
 * May @name be given to an entry of type @type (S_IFMT bits) in @dir?
 * -ENAMETOOLONG, -EINVAL for reserved names, else 0.  ns->lock held.
 */
int ns_name_check(const struct eng *e, const struct inode *dir,
		  const char *name, mode_t type);
/* Walk every inode; ns->lock held.  Stops when @fn returns nonzero. */
int ns_walk(struct ns *ns, int (*fn)(void *ctx, struct inode *in),
	    void *ctx);
/* Is checkpoint @seq among the newest cfg->keep?  ns->lock held. */
bool ns_in_keep_window(struct eng *e, uint64_t seq);

/* file.c: file data (and core_i.h) */
int file_truncate_locked(struct eng *e, struct file *f, uint64_t size);
/* Make slots' CRCs final and seal this version; file->lock held for writing. */
void file_seal_locked(struct eng *e, struct file *f);
enum eng_crc_state file_crc_state_locked(const struct file *f);
/*
 * Drop resident clean slots of a persisted file; returns pieces freed.
 * Pieces just read in (SLOT_FRESH) are skipped this once, their mark
 * cleared, and counted in *@spared.  f->lock held for writing.
 */
uint32_t file_evict_locked(struct eng *e, struct file *f, uint32_t *spared);
/*
 * Drop the copies this node fetched or decoded of another node's sealed
 * file (SLOT_FETCHED) while its bytes are still elsewhere (holders, parity
 * rows, the persist dir): they go back to PIECE_PEER, checksums kept, and
 * the next read fetches them again.  Fresh ones as file_evict_locked.
 * Returns pieces freed; f->lock held for writing.
 */
uint32_t file_evict_cache_locked(struct eng *e, struct file *f,
				 uint32_t *spared);
/*
 * Pieces of @f those two would drop now (fresh ones too): its fetched
 * copies with @caches, else its clean persisted pieces that are not such
 * copies.  f->lock held (read is enough).
 */
uint32_t file_evictable_locked(const struct eng *e, const struct file *f,
			       bool caches);
/* A piece the spill tier takes out of RAM (file_spill_pick_locked). */
struct spill_pick {
	uint64_t version;	/* the file's data version when picked */
	uint64_t gseal;		/* the group's seal it is of (0 alone) */
	uint32_t idx, chunk, len, crc;
	uint32_t fill;		/* bytes of the chunk that are the piece's;
				   zeros from there up to len */
};
/*
 * Pieces of @f the spill tier may take (spill.c, eviction's third kind):
 * of this node's own sealed file that is not erasure-coded (the owner
 * keeps those pinned for the rows), in RAM, checksum final, and not the
 * persisted copy's (evicted as PIECE_PERSIST with no write).  Up to @max
 * into @v, each chunk pinned (store_get: the caller puts it); fresh ones
 * as file_evict_locked.  f->lock held for writing.
 */
uint32_t file_spill_pick_locked(struct eng *e, struct file *f,
				struct spill_pick *v, uint32_t max,
				uint32_t *spared);
/*
 * Piece @p is in the spill dir now: its slot becomes PIECE_SPILL and its
 * chunk goes, while the slot is still what was picked.  true if so.
 * f->lock held for writing.
 */
bool file_spilled_locked(struct eng *e, struct file *f,
			 const struct spill_pick *p);
/* A piece the spill dir held at this start (spill.c's index). */
struct spill_found {
	uint64_t gseal;		/* the seal it was of (0 alone) */
	uint32_t len, crc;	/* 0, 0: none at that index */
};
/*
 * Take back pieces of @f that the spill dir holds from before this
 * start, @v[i] for piece i: of this node's own file, not lost, not
 * erasure-coded, each piece not in memory whose seal, length and final
 * checksum are @v[i]'s becomes PIECE_SPILL.  How many.  f->lock held for
 * writing.
 */
uint32_t file_spill_found_locked(struct eng *e, struct file *f,
				 const struct spill_found *v, uint32_t n);
/*
 * Spilled piece @idx failed its read (its check): if its bytes are also
 * on peers (the seal's holders) or in the persist dir, the slot says so
 * and true (the caller loads again), else false (EIO).  f->lock held for
 * writing.
 */
bool file_spill_failed_locked(struct eng *e, struct file *f, uint32_t idx);
/* Take a snapshot; f->lock held (read is enough).  0 or -ENOMEM. */
int file_snap_take_locked(struct eng *e, struct file *f,
			  struct file_snap *fs);
/*
 * The snapshot's bytes are safe in the persisted copy: record its versions
 * as persisted, and if the file's data is still that version, mark pieces
 * still holding the same chunks clean (evictable).  Returns whether the
 * file is persisted now.  f->lock held for writing.
 */
bool file_snap_persisted_locked(struct file *f, const struct file_snap *fs);
/* In a group: does this node show a draft of its own of @f?  f->lock. */
bool file_draft(const struct eng *e, const struct file *f);
/* Wait until no queued copy targets @f.  Sleeps: hold no lock at all. */
void file_wait_writes(struct eng *e, struct file *f);
/*
 * Take f->lock for writing if no copy is queued for @f (true); else take
 * nothing (false), and the caller drops its locks, file_wait_writes() and
 * tries again.  Truncates and synchronous writes use it so that they never
 * overtake a copy replied to before them.
 */
bool file_wrlock_drained(struct eng *e, struct file *f);
/* CRC32C of @len zero bytes continuing from @crc. */
uint32_t crc_zeros(uint32_t crc, uint64_t len);
/* Arena bytes the pieces of @f in memory take (blocks or chunks); lock. */
uint64_t file_ram_bytes(const struct eng *e, const struct file *f);

/* read.c: the read path and its fetch threads (and core_i.h) */

/* write.c: the write path, fallocate, the copier */
int copier_start(struct eng *e);
void copier_stop(struct eng *e);
/* eng_fallocate of a file that does not pass through (write.c). */
int file_fallocate(struct eng *e, struct eng_file *fp, unsigned flags,
		   off_t off, off_t len);

/* record.c: seals and the group's record of them */
/*
 * A writer of @in is gone (record.c): the last one seals it.  True when
 * that is news for the tiers or the group: *@ev is then the EV_SEALED to
 * post once no lock is held.  No lock held.
 */
bool file_writer_gone(struct eng *e, struct inode *in, struct eng_ev *ev);
/*
 * Apply SEAL (see ns_apply): the file's content from now on, whoever
 * sealed it (the last seal wins); a node with a draft of its own keeps
 * showing it until its own seal (or file_revert).
 */
int file_apply_seal(struct eng *e, const struct nsop *op, uint64_t index);
/*
 * In a group: has this node a version of @f to seal?  A draft (changes
 * since its slots were the group's version), or, on the owner, a version
 * whose seal it has not proposed (a new file).  f->lock held.
 */
bool file_to_seal(const struct eng *e, const struct file *f);
/*
 * Make what this node has of @in what applying the entries a snapshot
 * stands for would have made it (ns_snap_restore): @owner, the log's
 * record @log and last seal @t (NULL: none; taken over, freed here in any
 * case).  A seal it had applied already updates the records only;
 * another one is taken as another node's SEAL is, unless this node has a
 * draft, or it is this daemon's own seal of what its slots hold.  What it
 * shows of the group's version then follows the record as at those
 * entries' applies: holders, protected, lost, a persisted copy that a
 * PERSIST among them recorded, times; @attrs: its attributes differ
 * from the ones it had (with the record, a SETATTR among them).  The
 * names lock and ns->lock held for writing, f->lock not.  Returns 1 when
 * the seal it shows changed (its old parity goes, the tiers look again),
 * else 0.
 */
int file_restore(struct eng *e, struct inode *in, int owner,
		 const struct file_log *log, struct seal_rec *t, bool attrs);
/*
 * reftfs-admin verify of this node's copy of a file: the sealed pieces
 * it holds in memory, their CRC32C recomputed.  file_verify_take_locked()
 * pins them (f->lock held, read is enough): -EBUSY while the file is
 * written, -ESTALE when @gseal (0: any) is not its seal here.
 * file_verify_snap() checks them with no lock held (then file_snap_drop),
 * the indexes of bad ones into @bad (room for every piece) unless NULL.
 * file_verify_ino() (core.h): both, for node @from that asks (@ino at @gseal, the
 * asker's record of the group's seal; -ENOENT), and what this node shows
 * against the group's seal (vc->off, file_seal_off_locked) and its record
 * of that seal (*@digest, file_seal_digest_locked); with @repair, and
 * @from the file's owner, the bad pieces of this node's copy are dropped
 * for the owner to send again, and from any node, what this node shows
 * off the group's seal is given up for it (file_resync).
 */
int file_verify_take_locked(struct eng *e, struct file *f, uint64_t gseal,
			    struct file_snap *fs);
void file_verify_snap(struct eng *e, const struct file_snap *fs,
		      const char *what, struct eng_verify_copy *vc,
		      uint32_t *bad);
/*
 * In a group, of a sealed file with no draft here: how many of what this
 * node shows of @f differ from the group's seal (f->sealed): pieces whose
 * recorded CRC32C is another, its size, the seal its slots are of, each
 * counted once and logged (@what names the file).  0 before any seal.
 * f->lock held (read is enough).
 */
uint32_t file_seal_off_locked(struct eng *e, const struct file *f,
			      const char *what);
/*
 * A CRC32C of this node's record of @f's group seal (its log index, node,
 * size and piece checksums): the same on every node that applied the
 * same log.  0 before any seal.  f->lock held.
 */
uint32_t file_seal_digest_locked(const struct file *f);
/*
 * verify --repair: what this node shows of @in (no draft here) is off the
 * group's seal: show that seal again (pieces fetched from its holders).
 * Not on the node that sealed it (its bytes are the seal's).  0, -EAGAIN
 * (nothing to do), -errno.  No lock held on entry.
 */
int file_resync(struct eng *e, struct inode *in);
/*
 * verify --repair: drop pieces @idx[0..@n) of @in that verify found bad in
 * snapshot @fs, where they still hold what it saw (with @cache_only, only
 * copies a reader fetched): they read as elsewhere from now on, fetched
 * checked from the holders.  Returns how many went.  No lock held.
 */
uint32_t file_drop_pieces(struct eng *e, struct inode *in,
			  const struct file_snap *fs, const uint32_t *idx,
			  uint32_t n, bool cache_only);
/* Apply PROTECT (see ns_apply). */
int file_apply_protect(struct eng *e, const struct nsop *op);
/*
 * Files this node owns that are sealed (a close, or a FLUSH, sealed their
 * current version) and not protected at it (for reftfs-admin protect
 * --wait).  No lock held.
 */
uint64_t file_count_unprotected(struct eng *e);
/* Apply PERSIST (see ns_apply), entry @index. */
int file_apply_persist(struct eng *e, const struct nsop *op, uint64_t index);
/* Apply LOST (see ns_apply): node op->node holds none of its old pieces. */
int file_apply_lost(struct eng *e, const struct nsop *op);

/* nscall.c: namespace calls, opens, flush and fsync, ns_apply */
/*
 * Make the entry op->parent/op->name of type @mode (op's owner, uid, gid
 * and time) and return it in *@out; ns->lock held for writing.
 */
int ns_make_entry(struct eng *e, const struct nsop *op, mode_t mode,
		  struct inode **out);
/*
 * In a group: does @op surely fail on this node's namespace as it is
 * (a missing parent, a name that exists already for a mkdir, one that
 * does not for an unlink)?  Then true, with the error in *@rc, and it
 * need not go round the log.  Takes ns->lock.
 */
bool ns_check_local(struct eng *e, const struct nsop *op, int *rc);
void ns_fill_stat(struct eng *e, struct inode *in, struct stat *st);
/*
 * CREATE and OPEN calls (nscall.c): an open of an existing file is this
 * node's alone (a writer's changes are its draft until its seal); a new
 * name goes round the log (CREATE).  Returns like prepare(): 0 to
 * apply @op, 1 when finished (result in *@rc).
 */
int file_prepare_open(struct eng *e, struct eng_call *c, struct nsop *op,
		      int *rc);
/* Apply CREATE or OPEN (see ns_apply). */
int file_apply_open(struct eng *e, const struct nsop *op, uint64_t index,
		    struct nsop_out *out);
/*
 * FLUSH of handle @fp (every close(2)).  In a group the last writer's
 * close seals the file and finishes @c once every live node has the seal:
 * ENG_LATER.  Else 0 or -errno at once.
 */
int file_flush(struct eng *e, struct eng_file *fp, struct eng_call *c);
/*
 * fsync (and fdatasync) of handle @fp: its queued copies land; in a group
 * with --sync protect a writer's data is then protected (eng_group_ops
 * .sync) before @c finishes.  0, ENG_LATER or -errno.  Sleeps.
 */
int file_fsync(struct eng *e, struct eng_file *fp, struct eng_call *c);
/* Off the list of open handles, and freed (nscall.c). */
void eng_handle_free(struct eng *e, struct eng_file *h);

/* handle.c: release, fallocate */
/* Free handles the kernel never released; at eng_free, threads stopped. */
void eng_free_handles(struct eng *e);

/* A writer of @in that a pass kept is gone: the last one seals.  No lock
 * held; @in held. */
void file_drop_writer(struct eng *e, struct inode *in);
/* Is a write to [@off, @end) of @f queued, its bytes not in yet?  f->lock
 * held (no copy is queued while it is). */
bool file_range_queued(struct eng *e, const struct file *f, uint64_t off,
		       uint64_t end);
/* Write @size bytes at @off whatever the handle's O_APPEND (pass.c). */
ssize_t file_write_at(struct eng *e, struct eng_file *fp, const void *buf,
		      size_t size, off_t off);

#endif /* RFT_ENGINE_I_H */
