/*
 * core.h - what the group's layer (gns.c, protect.c, parity.c) may ask of
 * core without struct file or struct inode's insides: pieces named by
 * (inode, seal, index), copied out or kept; a file's seal as one look
 * under its lock (struct seal_view) and its pieces pinned (struct
 * file_snap); inodes as handles, held and let go; the events; the store
 * the pieces live in, the counters they bump; the lock order's ranks and
 * leaf_lock(), which the group's own locks are taken with.  Issue 26
 * moves the group onto it: parity.c and protect.c are on it (they include
 * no engine_i.h), gns.c not yet.
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
 */
enum eng_ev_kind {
	EV_DIRTY,
	EV_LINKED,
	EV_UNLINKED,
	EV_RENAMED,
	EV_FREED,
	EV_EVICTED,
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
};

typedef void (*eng_listener_fn)(struct eng *e, const struct eng_ev *ev,
				void *ctx);
#define ENG_MAX_LISTENERS 4

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
	bool all_here;		/* every piece in memory, or a hole */
	bool any_at_holders;	/* some piece only at its holders */
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
};
/*
 * Pin @in's pieces if its seal is still @gseal, @owner's, unchanged, and
 * it has a name (and, @scheme nonzero, that scheme): 0, with *@v as it was
 * then; -ESTALE when not (a newer seal has work of its own); -EAGAIN when
 * some piece is not in memory (a rebuild brings it); -ENOMEM.
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
	ENG_RANK_PASS,		/* eng->pass.lock */
	ENG_RANK_STORE,		/* store->lock */
	/* The leaves. */
	ENG_RANK_PERSIST,	/* persist->lock */
	ENG_RANK_COPIER,	/* eng->copier.lock */
	ENG_RANK_LOADS,		/* eng->loads.lock */
	ENG_RANK_HANDLES,	/* eng->handles_lock */
	ENG_RANK_PROTECT,	/* struct protect's lock (protect.c) */
	ENG_RANK_GNS,		/* struct gns's lock (gns.c) */
	ENG_RANK_PAR,		/* struct parity's lock (parity.c) */
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
	[ENG_RANK_PROTECT] = { "protect->lock", ENG_UNDER_LEAF },
	[ENG_RANK_GNS] = { "gns->lock", ENG_UNDER_LEAF },
	[ENG_RANK_PAR] = { "par->lock", 0 },
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
