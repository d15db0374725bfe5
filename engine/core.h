/*
 * core.h - what the group's layer (gns.c, protect.c, parity.c) may ask of
 * core without struct file or struct inode's insides: pieces named by
 * (inode, seal, index), copied out or kept; a file's seal as one look
 * under its lock (struct seal_view) and its pieces pinned (struct
 * file_snap); inodes as handles, held and let go; the events; the store
 * the pieces live in, the counters they bump; the lock order's ranks and
 * leaf_lock(), which the group's own locks are taken with; and the group
 * plugged in: the calls the engine makes of it (struct eng_group_ops),
 * the namespace log's apply and snapshots, a seal built for the log.
 * The group (gns.c, protect.c, parity.c) includes no other header of
 * engine/.
 */
#ifndef RFT_CORE_H
#define RFT_CORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "store.h"
#include "nsop.h"

struct eng;
struct inode;
struct slot;

/*
 * An erasure-coded seal's scheme as SEAL and PROTECT entries carry it (their
 * flags) and files keep it: nodes << 24 | kind << 16 | k << 8 | m, so that
 * a seal's stripe layout follows from it alone; 0 for none or replicas.
 * stripe_layout(): the layout of @code, 0 or -EINVAL.
 */
struct ers_scheme;
struct ers_layout;
uint32_t stripe_code(const struct ers_scheme *s, int nodes);
int stripe_layout(uint32_t code, struct ers_layout *l);

/* One piece of a sealed file as the group names it (the fetch gop). */
struct eng_piece {
	uint64_t ino, gseal, holders;
	uint32_t idx, len, crc;
	int owner;
	uint32_t scheme;	/* 0, or the seal's stripe_code() */
	uint64_t stripe_ckpt, chunk_base;
};

/* Length of piece @idx of a file of @size bytes (0 past the end). */
uint32_t file_piece_len(const struct eng *e, uint64_t size, uint32_t idx);
/*
 * Piece @idx of @ino's seal @gseal, @len bytes with CRC32C @crc, copied
 * into @buf from this node's memory (its owner's data, a copy held or
 * fetched): 0, -ENOENT when not here whole, -EIO when it fails its check.
 * Takes ns->lock and the file's lock (read) briefly.
 */
int file_piece_copy(struct eng *e, uint64_t ino, uint64_t gseal, uint32_t idx,
		    uint32_t len, uint32_t crc, uint8_t *buf);
/*
 * Keep @data (@len bytes, checked against @crc by the caller) as piece
 * @idx of @ino's seal @gseal, when this node has that piece elsewhere
 * (PIECE_PEER): a fetched copy, evictable.  What a decode of a stripe
 * gives besides the piece it was for.  0, -ESTALE (not wanted here),
 * -ENOSPC (no free chunk: never waits).  Takes ns->lock and the file's.
 */
int file_piece_keep(struct eng *e, uint64_t ino, uint64_t gseal, uint32_t idx,
		    const uint8_t *data, uint32_t len, uint32_t crc);

/* The engine's arena. */
struct store *eng_store(struct eng *e);
/* A piece failed its checksum (counted in status' crc_errors). */
void eng_count_crc_error(struct eng *e);

/* Piece of a snapshot, as file_snap_piece gives it. */
struct snap_piece {
	const uint8_t *bytes;	/* in memory: its first @fill bytes */
	uint32_t fill;		/* past it the piece reads as zeros */
	uint32_t len;		/* the piece's length in the file */
	uint32_t crc;		/* CRC32C of its @len bytes */
};

/*
 * Piece @idx of a file as a snapshot saw it (file_snap_take_locked in
 * engine_i.h; the snapshot pins what it shows): 1 in memory, 0 a hole
 * (zeros, or past the end), -EAGAIN elsewhere (the persist dir, the
 * holders); *@p filled for each.
 */
struct file_snap;
int file_snap_piece(const struct eng *e, const struct file_snap *fs,
		    uint32_t idx, struct snap_piece *p);
/*
 * As file_snap_piece, and a piece in this node's spill dir is read into
 * @buf (a chunk's size; checked: -EIO when it fails) and given as in
 * memory.  No lock held; may read the disk.
 */
int file_snap_piece_read(struct eng *e, const struct file_snap *fs,
			 uint32_t idx, uint8_t *buf, struct snap_piece *p);
/*
 * The pieces of this node's files that its spill dir held when it
 * started, taken back (docs/design.md, the spill tier): once the
 * namespace is known, before the rebuild, so that what is on the local
 * disk is not fetched.  Pieces found, 0 without a spill dir, or -errno.
 * No lock held; reads the disk.
 */
long eng_spill_found(struct eng *e);

/* --- inodes as handles ---------------------------------------------------- */

uint64_t eng_inode_ino(const struct inode *in);
/* A regular file (a type never changes). */
bool eng_inode_is_file(const struct inode *in);
/* One more hold on @in, which the caller holds or found under ns->lock:
 * it is not freed until ns_unhold.  Takes ns->lock. */
void eng_hold(struct eng *e, struct inode *in);
/* Let a hold go; the inode is freed if nothing else keeps it. */
void ns_unhold(struct eng *e, struct inode *in);
/* Inode @ino, held, or NULL when there is none. */
struct inode *eng_find_hold(struct eng *e, uint64_t ino);
/* @in's path for a message, or "inode N" when it has no name. */
void eng_inode_name(struct eng *e, const struct inode *in, char *buf,
		    size_t size);
/* This daemon's incarnation (the group's log entries carry it). */
uint64_t eng_incarnation(const struct eng *e);

/* --- events ------------------------------------------------------------- */

/*
 * What the namespace and the files tell the tiers that keep copies of them
 * (the listeners: persist.c, pass.c, and protect.c in a group).  Core
 * reaches the tiers only so, and through the hooks above (the piece
 * source, the placement); the calls above the tiers (nscall.c,
 * handle.c) call them by name, and the group is e->gops.
 * Listeners run in the poster's thread, so:
 *   EV_DIRTY     something needs writing again (a file sealed or changed,
 *                a directory or node new or changed); posted with no lock
 *                or under ns->lock: listeners take leaf locks only.
 *   EV_LINKED, EV_UNLINKED, EV_RENAMED
 *                a name changed; posted under eng->names_lock and no other
 *                lock, the inodes held: listeners may do I/O.
 *   EV_FREED     an inode is being freed; under ns->lock for writing:
 *                listeners take leaf locks only.
 *   EV_EVICTED   pieces of a file this node owns were evicted (they are
 *                in the persist dir); under ns->lock (read): listeners
 *                take leaf locks only.  A tier that keeps them pinned
 *                lets them go.
 *   EV_SEALED    a file's last writer closed it: its version is sealed
 *                here, its checksums final.  The one way a seal reaches
 *                the tiers (write-back, passthrough's copy) and the
 *                group (@tell), posted by the release with no lock
 *                held, the inode held: listeners may take locks.  (A
 *                FLUSH's seal in a group is a call the group answers,
 *                eng_group_ops.seal, not an event.)
 *   EV_PROTECTED the file's current version is protected now (its
 *                scheme's copies or parity rows are held: a PROTECT);
 *   EV_PERSISTED its persisted copy holds the current data and metadata
 *                now (a write-back, or a PERSIST of the group's);
 *   EV_LOST      the group's log found its last seal nowhere (a LOST).
 *                These three come from the durability record's one
 *                writer (file.c, file_dur_unlock), once the file's lock
 *                is let go, possibly under ns->lock and the names lock:
 *                listeners take leaf locks only.  Each says a change
 *                once; what became untrue again is no event.
 */
enum eng_ev_kind {
	EV_DIRTY,
	EV_LINKED,
	EV_UNLINKED,
	EV_RENAMED,
	EV_FREED,
	EV_EVICTED,
	EV_SEALED,
	EV_PROTECTED,
	EV_PERSISTED,
	EV_LOST,
};

struct eng_ev {
	enum eng_ev_kind kind;
	struct inode *in;	/* the one it is about (rename: the source) */
	const char *from, *to;	/* LINKED: primary, new; UNLINKED: from;
				   RENAMED: both */
	struct inode *dst;	/* RENAMED: what @to named before, or NULL */
	bool dir;		/* UNLINKED: a directory */
	bool open;		/* UNLINKED: may still be read; RENAMED: dst */
	bool last;		/* UNLINKED: no name left */
	bool exchange;		/* RENAMED: RENAME_EXCHANGE */
	bool remote;		/* LINKED, UNLINKED, RENAMED: another node of
				   the group made the change; it mirrors it
				   into the persist dir they share */
	bool persisted;		/* SEALED: this version is in the persist
				   dir already (no write-back, no copy) */
	bool tell;		/* SEALED: the group has not seen this
				   node's version: seal it round the log */
};

typedef void (*eng_listener_fn)(struct eng *e, const struct eng_ev *ev,
				void *ctx);
#define ENG_MAX_LISTENERS 6

/* Register a listener; before eng_start.  -ENOSPC past ENG_MAX_LISTENERS. */
int eng_listen(struct eng *e, eng_listener_fn fn, void *ctx);
void eng_post(struct eng *e, const struct eng_ev *ev);

static inline void eng_post_dirty(struct eng *e, struct inode *in)
{
	struct eng_ev ev = { .kind = EV_DIRTY, .in = in };

	eng_post(e, &ev);
}

/* --- a file's seal, and its pieces pinned --------------------------------- */

/* A file's seal as this node holds it, seen in one look under its lock. */
struct seal_view {
	uint64_t gseal;		/* the group's seal it shows; 0: none yet */
	uint64_t size;
	uint64_t stripe_ckpt, chunk_base; /* where its stripes sit */
	uint32_t scheme;	/* the seal's stripe_code(); 0: none, replicas */
	uint32_t npieces;	/* pieces of @size bytes */
	int owner;		/* the node whose data it is */
	bool linked;		/* it has a name */
	bool sealed;		/* no writer; its checksums final */
	bool unchanged;		/* its data is still its last seal's */
	bool protected;		/* peers hold this version, as its scheme says */
	bool persisted;		/* this version is in the persist dir */
	bool lost;		/* the log says no copy of its seal is left */
	bool all_here;		/* every piece in memory (or this node's
				   spill dir), or a hole */
	bool any_at_holders;	/* some piece only at its holders */
	bool any_here;		/* some piece in memory here */
	bool held_elsewhere;	/* a node other than its owner holds copies
				   or parity rows of it */
	uint64_t bytes_away;	/* of the pieces that are not here */
};
/* @in's seal view; -EINVAL when @in is no regular file.  Takes its lock. */
int file_seal_view(struct eng *e, struct inode *in, struct seal_view *v);

/*
 * A file's pieces as they are at one version, their chunks pinned (a
 * reference each), so that write-back and protection (protect.c) can
 * read them without the file's lock while writers copy on write.
 */
struct file_snap {	/* read its pieces through file_snap_piece */
	uint64_t version, meta_version, size;
	bool sealed;
	uint32_t nslots;
	struct slot *slots;
	uint64_t file_id;	/* where its spilled pieces are */
};
/*
 * Pin @in's pieces if its seal is still @gseal, @owner's, unchanged, and
 * it has a name (and, @scheme nonzero, that scheme): 0, with *@v as it was
 * then; -ESTALE when not (a newer seal has work of its own); -EAGAIN when
 * some piece is not here, in memory or in this node's spill dir (a
 * rebuild brings it); -ENOMEM.
 */
int file_seal_snap(struct eng *e, struct inode *in, uint64_t gseal,
		   int owner, uint32_t scheme, struct seal_view *v,
		   struct file_snap *fs);
/* How many pieces the snapshot's file has (its size in pieces). */
uint32_t file_snap_npieces(const struct eng *e, const struct file_snap *fs);
/* Unpin and free; a zeroed snapshot is fine. */
void file_snap_drop(struct eng *e, struct file_snap *fs);
/*
 * Walk every regular file with a name, its seal view taken: with @held,
 * those @want says yes to are held and put in a malloc()ed array *@held
 * (ns_unhold each, free the array); without, only counted.  Returns how
 * many, or -ENOMEM.  Takes ns->lock and each file's lock in turn.
 */
long eng_files_where(struct eng *e,
		     bool (*want)(void *ctx, const struct seal_view *v),
		     void *ctx, struct inode ***held);
/*
 * Bring pieces [@first, @last] of @in into memory from where they are:
 * the persist dir, or peers (until @deadline; NULL: cfg->fetch_timeout_ms
 * from now).  Called without any lock; sleeps.
 */
int file_load(struct eng *e, struct inode *in, uint32_t first,
	      uint32_t last, const struct timespec *deadline);
/* As file_load, but what is in this node's spill dir stays there: it is
 * here already (a rebuild's load). */
int file_load_missing(struct eng *e, struct inode *in, uint32_t first,
		      uint32_t last, const struct timespec *deadline);
/* The pieces of @in this node fetched are its own data now (a rebuild of
 * its owner's): kept, not a cache eviction may drop. */
void file_keep_fetched(struct eng *e, struct inode *in);
/*
 * Replicas on a holder (protect.c), called on a transport thread: never
 * sleep.  file_replica_dest() takes an arena chunk (without waiting for
 * others; when none is free, evicting caches itself) for piece @idx of
 * @ino's seal @gseal, if this node has that seal and not the piece: 0,
 * -ESTALE (another seal, or no such piece), -EEXIST (here already),
 * -ENOSPC.  file_replica_install() makes it the piece once its
 * bytes arrived checked (@ok), else gives the chunk back.
 * file_replica_complete(): 0 when every piece of that seal is here,
 * -EAGAIN when some are missing (their bits set in @map, zeroed by the
 * caller, those below @map_bits), -ESTALE; *@npieces: the seal's pieces.
 */
int file_replica_dest(struct eng *e, uint64_t ino, uint64_t gseal,
		      uint32_t idx, uint32_t len, uint32_t crc,
		      uint32_t *chunk);
void file_replica_install(struct eng *e, uint64_t ino, uint64_t gseal,
			  uint32_t idx, uint32_t chunk, uint32_t crc, bool ok);
int file_replica_complete(struct eng *e, uint64_t ino, uint64_t gseal,
			  uint8_t *map, uint32_t map_bits, uint32_t *npieces);

/* --- the group, plugged in ----------------------------------------------- */

/*
 * Apply @op to this node's namespace (ns.c), with no engine lock held.
 * Deterministic: the same op on the same state gives the same result and
 * state on every node.  @out is NULL except on the proposer's node, where
 * entry ops also take a kernel lookup reference and CREATE/OPEN open the
 * handle.  @index is the op's log index (0 on a single node).  May wait
 * for the copier (no lock held then), never for the network.
 */
int ns_apply(struct eng *e, const struct nsop *op, uint64_t index,
	     struct nsop_out *out);
/*
 * The same, saying whether @op is another node's (@remote: its name
 * changes are not mirrored here).  ns_apply() tells that from @out in a
 * group; a test may apply an op as another node's on a single engine.
 */
int ns_apply_as(struct eng *e, const struct nsop *op, uint64_t index,
		struct nsop_out *out, bool remote);

/*
 * nssnap.c: the namespace's state in the log (what every node derives
 * alike from its entries; docs/protocol.md "Namespace snapshots"), for
 * the log's snapshots.  ns_snap_encode: into a malloc()ed buffer the
 * caller frees; 0 or -ENOMEM.  Takes ns->lock (read) and each file's
 * lock.
 */
#define NS_SNAP_VERSION 2
int ns_snap_encode(struct eng *e, void **buf, size_t *len);
/*
 * Make this node's namespace that of @buf (an empty one at a start, or
 * one behind the group's), as applying the entries it stands for would
 * have: inodes kept by number, names gone handled as another node's
 * unlink or rename, files whose seal changed as at another node's SEAL.
 * @changed (may be NULL) is called for each of those files, with no lock
 * held.  The buffer is checked whole first: nothing changes on -EPROTO
 * (malformed, or not the group's chunk size), -EPROTONOSUPPORT (a format
 * this daemon does not know) or -ENOMEM.  No engine lock held.
 */
int ns_snap_restore(struct eng *e, const void *buf, size_t len,
		    void (*changed)(void *ctx, uint64_t ino), void *ctx);


/*
 * What a group adds to the engine (set by eng_join_group, gns.c).  The
 * engine's own files call it through these pointers only, so that the
 * engine library does not depend on the group's.
 */
struct eng_group_ops {
	/*
	 * Append @op to the group's log and finish @c from its apply (its
	 * done() called exactly once, from another thread).  @op is copied.
	 * ENG_LATER, or -errno (then done() is never called).
	 */
	int (*propose)(void *ctx, const struct nsop *op, struct eng_call *c);
	/*
	 * Seal @in (its owner is this node) and send the seal round the log,
	 * on a group thread: make its checksums final, propose SEAL for the
	 * version it has then, and finish @c (a FLUSH) once every live node
	 * applied it.  ENG_LATER, or -errno when it could not even be
	 * queued.  (A RELEASE's seal, which nobody waits for, reaches the
	 * group as EV_SEALED.)
	 */
	int (*seal)(void *ctx, struct inode *in, struct eng_call *c);
	/*
	 * fsync of a writer's handle of @in under --sync protect: seal
	 * what this node has if the group has not seen it, and finish @c
	 * once that version is protected or persisted (EIO at a deadline,
	 * or when it cannot be).  ENG_LATER, 0 or -errno.
	 */
	int (*sync)(void *ctx, struct inode *in, struct eng_call *c);
	/*
	 * Read piece @p->idx (@p->len bytes, CRC32C @p->crc) of a file's
	 * sealed version @p->gseal from one of @p->holders into @buf,
	 * checked; when none has it and the seal is erasure-coded, rebuilt
	 * from its stripe.  0, -EIO when no holder gave the right bytes,
	 * -ETIMEDOUT past @deadline.  No lock held; sleeps.
	 */
	int (*fetch)(void *ctx, const struct eng_piece *p, uint8_t *buf,
		     const struct timespec *deadline);
	/*
	 * @in (owned here) is in the persist dir the group shares at its
	 * seal @gseal: tell the others (PERSIST through the log, in the
	 * background).  No lock held.
	 */
	void (*persisted)(void *ctx, struct inode *in, uint64_t gseal);
	/*
	 * Before a namespace or data read is answered: 0 when this node's
	 * namespace may be served as it is, else first confirm it with the
	 * group's log (a daemon that did not run for a while, stopped or
	 * starved, may have been declared dead and left behind).  -EIO when
	 * it cannot be confirmed.  No lock held; may sleep.
	 */
	int (*fresh)(void *ctx);
	/* fs/ delivered its invalidations: waits for them may end. */
	void (*kick)(void *ctx);
	/* Protection and rebuild figures (see engine.h). */
	void (*protect_stats)(void *ctx, struct eng_protect_stats *st);
	/* The log's and peers' requests' figures (see engine.h). */
	void (*log_stats)(void *ctx, struct eng_log_stats *st);
	/* Wait until the namespace caught up with the group (see engine.h). */
	int (*ready)(void *ctx, int timeout_ms);
	/* A graceful stop, before the group stops (eng_group_leave). */
	int (*leave)(void *ctx, unsigned wait_ms);
	/*
	 * Ask @node to check its copy of @ino's seal @gseal (eng_verify),
	 * and what it shows against the group's seal, whose record here has
	 * @digest (file_seal_digest_locked): fills @vc (node and rc too).
	 * No lock held; sleeps.
	 */
	void (*verify)(void *ctx, int node, uint64_t ino, uint64_t gseal,
		       uint32_t digest, bool repair,
		       struct eng_verify_copy *vc);
	/*
	 * verify's scrub of @pc's seal (erasure-coded): the parity rows of
	 * the stripes of its @npieces pieces, into @vi's rows_* counts.  No
	 * lock held; sleeps.
	 */
	void (*scrub)(void *ctx, const struct eng_piece *pc, uint32_t npieces,
		      struct eng_verify_info *vi);
	/*
	 * verify --repair: bring back the pieces of @in (owned here) that are
	 * not in memory (dropped as bad) from its holders, checked, and send
	 * its copies again (holders that dropped bad pieces get them anew).
	 * 0 or -errno (-EOPNOTSUPP without protection).  No lock held.
	 */
	int (*repair)(void *ctx, struct inode *in);
	/* Threads: started by eng_start, stopped by eng_stop (and eng_free). */
	int (*start)(void *ctx);
	void (*stop)(void *ctx);
	void (*free)(void *ctx);
};

/*
 * Plug the group in: its calls @ops with @ctx, this node's id @node and
 * this daemon's incarnation @inc (the log's entries carry them).  Before
 * eng_start.  -EBUSY when a group is plugged in already, -EEXIST when the
 * namespace holds names already (a persist dir's): every node numbers
 * inodes in log order from an empty one.  Nothing changes on an error.
 */
int eng_group_attach(struct eng *e, const struct eng_group_ops *ops,
		     void *ctx, int node, uint64_t inc);
/* How many inodes the namespace has (the root included).  Takes ns->lock. */
uint64_t eng_ns_count(struct eng *e);
/* Copy an apply's outputs into the call. */
void eng_call_take(struct eng_call *c, const struct nsop_out *out);
/*
 * Every directory's name queued for the kernel delivered (or nobody to
 * deliver it): a peer's wait for this node's names may be answered.
 */
bool eng_inval_idle(struct eng *e);

/*
 * A seal of @in as this node has it now, into @op (a SEAL: its pieces'
 * checksums and holes, version, size, chunk size, mtime; not its flags):
 * pieces that are elsewhere are brought in first (the node that seals a
 * file keeps it whole), checksums made final, and the version is marked
 * sent.  0; 1 when there is nothing to seal (this version's seal went
 * already, or the group's version shows here); -EAGAIN when a piece went
 * again meanwhile; -errno.  No lock held; sleeps.
 */
int file_seal_build(struct eng *e, struct inode *in, struct nsop *op);
/*
 * fsync under --sync protect (gns.c): where @in stands for a writer of
 * this node that wants its data as fsync found it (*@version; 0: the
 * current version, and *@version set to it) safe from a node's loss.
 * FILE_SYNC_SEAL: this node has changes the group has not seen: seal
 * them; FILE_SYNC_WAIT: not yet protected nor persisted; FILE_SYNC_DONE:
 * that version or a later one is protected or persisted; -EIO: the file
 * is lost.  Takes the file's lock.
 */
enum { FILE_SYNC_DONE, FILE_SYNC_WAIT, FILE_SYNC_SEAL };
int file_sync_state(struct eng *e, struct inode *in, uint64_t *version);
/*
 * A seal built (file_seal_build) whose entry the log did not take, to go
 * again as it is: 0 when @in is still at @op's version and no seal of
 * that version from this daemon is in the log; 1 when it is moot (the
 * entry went in after all, or a newer version has a seal of its own to
 * come).  Takes the file's lock.
 */
int file_seal_again(struct eng *e, struct inode *in, const struct nsop *op);
/*
 * After this node's truncate of closed file @ino: the file, held
 * (ns_unhold), when it has a version to seal and no writer here, else
 * NULL.  Takes ns->lock and the file's lock.
 */
struct inode *file_reseal_hold(struct eng *e, uint64_t ino);
/*
 * @in's draft here cannot be sealed (pieces of the version it was based
 * on are gone) and the group sealed another version since: drop the
 * draft and show the group's version.  Logs why.  0, or -EAGAIN when
 * the group's version is the draft's own base (try the seal again).
 * Takes ns->lock and the file's lock; no lock held on entry.
 */
int file_revert(struct eng *e, struct inode *in, int why);
/*
 * Piece @idx (@len bytes) of @ino's seal @gseal, in memory here whole and
 * unchanged since that seal: its chunk pinned (store_put when done) into
 * *@chunk, with its CRC32C and how many of its bytes the chunk holds
 * (past @fill it reads as zeros).  0, or -ESTALE (not here so).  Takes
 * ns->lock and the file's lock (read) briefly.
 */
int file_piece_pin(struct eng *e, uint64_t ino, uint64_t gseal, uint32_t idx,
		   uint32_t len, uint32_t *chunk, uint32_t *crc,
		   uint32_t *fill);
/*
 * verify's check of this node's copy of @ino at @gseal for node @from
 * that asks (see file_verify_take_locked in engine_i.h): into @vc, and
 * its record of that seal into *@digest; -ENOENT, -EBUSY, -ESTALE.
 */
int file_verify_ino(struct eng *e, uint64_t ino, uint64_t gseal, int from,
		    bool repair, struct eng_verify_copy *vc,
		    uint32_t *digest);

/*
 * --- locks ---------------------------------------------------------------
 *
 * The lock order of engine_i.h's opening comment as the checker holds it
 * (see "Checked" there): a rank per lock, and what a thread may hold
 * while it waits for each (eng_ranks[]).  Here, not in engine_i.h, so
 * that the group's leaves (protect.c's, parity.c's locks) are taken
 * through leaf_lock() too; the ranked locks' wrappers are engine_i.h's.
 */
enum eng_rank {
	ENG_RANK_NAMES,		/* eng->names_lock */
	ENG_RANK_NS,		/* eng->ns.lock */
	ENG_RANK_FILE,		/* file->lock */
	ENG_RANK_PASS,		/* pass.c's lock */
	ENG_RANK_STORE,		/* store->lock */
	/* The leaves. */
	ENG_RANK_PERSIST,	/* persist->lock */
	ENG_RANK_COPIER,	/* core's copier.lock (core_i.h) */
	ENG_RANK_LOADS,		/* core's loads.lock (core_i.h) */
	ENG_RANK_HANDLES,	/* eng->handles_lock */
	ENG_RANK_JOINED,	/* eng->joined_lock */
	ENG_RANK_PROTECT,	/* struct protect's lock (protect.c) */
	ENG_RANK_GNS,		/* struct gns's lock (gns.c) */
	ENG_RANK_PAR,		/* struct parity's lock (parity.c) */
	ENG_RANK_SPILL,		/* struct spill's lock (spill.c) */
	ENG_RANKS
};

#ifndef RFT_LOCK_CHECK
#ifdef NDEBUG
#define RFT_LOCK_CHECK 0
#else
#define RFT_LOCK_CHECK 1
#endif
#endif

#if RFT_LOCK_CHECK
#include "rft_lockrank.h"

#define ENG_R(r) (1u << ENG_RANK_##r)
/* What may be held while one waits for a ranked lock, and for a leaf. */
#define ENG_UNDER_LEAF                                                        \
	(ENG_R(NAMES) | ENG_R(NS) | ENG_R(FILE) | ENG_R(PASS) | ENG_R(STORE))

static const struct rft_rank eng_ranks[ENG_RANKS] = {
	[ENG_RANK_NAMES] = { "names_lock", 0 },
	[ENG_RANK_NS] = { "ns->lock", ENG_R(NAMES) },
	[ENG_RANK_FILE] = { "file->lock", ENG_R(NAMES) | ENG_R(NS) },
	[ENG_RANK_PASS] = { "pass.lock",
			    ENG_R(NAMES) | ENG_R(NS) | ENG_R(FILE) },
	[ENG_RANK_STORE] = { "store->lock", ENG_R(NAMES) | ENG_R(NS) |
			     ENG_R(FILE) | ENG_R(PASS) | ENG_R(PAR) },
	[ENG_RANK_PERSIST] = { "persist->lock", ENG_UNDER_LEAF },
	[ENG_RANK_COPIER] = { "copier.lock", ENG_UNDER_LEAF },
	[ENG_RANK_LOADS] = { "loads.lock", ENG_UNDER_LEAF },
	[ENG_RANK_HANDLES] = { "handles_lock", ENG_UNDER_LEAF },
	[ENG_RANK_JOINED] = { "joined_lock", ENG_UNDER_LEAF },
	[ENG_RANK_PROTECT] = { "protect->lock", ENG_UNDER_LEAF },
	[ENG_RANK_GNS] = { "gns->lock", ENG_UNDER_LEAF },
	[ENG_RANK_PAR] = { "par->lock", 0 },
	[ENG_RANK_SPILL] = { "spill->lock", ENG_UNDER_LEAF },
};
#undef ENG_R
#undef ENG_UNDER_LEAF

#define ENG_WAIT(r, at, ln) rft_rank_wait(eng_ranks, ENG_RANKS, r, at, ln)
#define ENG_GOT(r, at, ln) rft_rank_got(r, at, ln)
#define ENG_PUT(r, at, ln) rft_rank_put(eng_ranks, ENG_RANKS, r, at, ln)
#else
#define ENG_WAIT(r, at, ln) ((void)(r), (void)(at), (void)(ln))
#define ENG_GOT(r, at, ln) ((void)(r), (void)(at), (void)(ln))
#define ENG_PUT(r, at, ln) ((void)(r), (void)(at), (void)(ln))
#endif

static inline void eng_mutex_lock_at(pthread_mutex_t *m, enum eng_rank r,
				     const char *at, int ln)
{
	ENG_WAIT(r, at, ln);
	pthread_mutex_lock(m);
	ENG_GOT(r, at, ln);
}

static inline void eng_mutex_unlock_at(pthread_mutex_t *m, enum eng_rank r,
				       const char *at, int ln)
{
	ENG_PUT(r, at, ln);
	pthread_mutex_unlock(m);
}

static inline void eng_rdlock_at(pthread_rwlock_t *l, enum eng_rank r,
				 const char *at, int ln)
{
	ENG_WAIT(r, at, ln);
	pthread_rwlock_rdlock(l);
	ENG_GOT(r, at, ln);
}

static inline void eng_wrlock_at(pthread_rwlock_t *l, enum eng_rank r,
				 const char *at, int ln)
{
	ENG_WAIT(r, at, ln);
	pthread_rwlock_wrlock(l);
	ENG_GOT(r, at, ln);
}

/* A try: true if taken. */
static inline bool eng_tryrdlock_at(pthread_rwlock_t *l, enum eng_rank r,
				    const char *at, int ln)
{
	if (pthread_rwlock_tryrdlock(l) != 0)
		return false;
	ENG_GOT(r, at, ln);
	return true;
}

static inline bool eng_trywrlock_at(pthread_rwlock_t *l, enum eng_rank r,
				    const char *at, int ln)
{
	if (pthread_rwlock_trywrlock(l) != 0)
		return false;
	ENG_GOT(r, at, ln);
	return true;
}

static inline void eng_rwunlock_at(pthread_rwlock_t *l, enum eng_rank r,
				   const char *at, int ln)
{
	ENG_PUT(r, at, ln);
	pthread_rwlock_unlock(l);
}

#undef ENG_WAIT
#undef ENG_GOT
#undef ENG_PUT

#define ENG_AT __FILE__, __LINE__

/* A leaf (@r one of the leaves' ranks), its mutex @m. */
#define leaf_lock(m, r) eng_mutex_lock_at((m), (r), ENG_AT)
#define leaf_unlock(m, r) eng_mutex_unlock_at((m), (r), ENG_AT)

#endif
