/*
 * engine.h - the reftfs storage engine: namespace, chunk store and memory
 * budget, file and checkpoint states, persist tier, and the reporting
 * calls that reftfsd's control socket (fs/ctl*.c) is built on.
 *
 * The engine knows nothing of FUSE.  fs/ translates each kernel request into
 * one call here; every call returns 0 (or a byte count) or -errno.
 *
 * Inode numbers are the engine's own; the root directory is RFT_ROOT_INO.
 * Calls that hand an entry to the kernel (lookup, create, mknod, mkdir,
 * symlink, link) take one lookup reference on it; eng_forget() drops them.
 * An unlinked inode lives on while it has lookup references or open handles.
 */
#ifndef RFT_ENGINE_H
#define RFT_ENGINE_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "rft_clock.h"

#define RFT_ROOT_INO 1ULL

#define RFT_CHUNK_MIN (1u << 20)
#define RFT_CHUNK_MAX (4u << 20)
#define RFT_CHUNK_DEFAULT (1u << 20)

/* Largest file size; a write or truncate past it is -EFBIG. */
#define RFT_MAX_FILE_SIZE (1ULL << 40)

/* Suffix of the checksum sidecar kept beside each file in the persist dir. */
#define RFT_SUM_SUFFIX ".rftsum"

struct eng;		/* one per mount */
struct eng_file;	/* an open file */
struct eng_dir;		/* an open directory: a snapshot of its entries */

/* --- logging ----------------------------------------------------------- */

/* Syslog levels.  Messages go to stderr, or syslog once rft_log_syslog(). */
enum rft_log_level {
	RFT_LOG_ERR = 3,
	RFT_LOG_WARN = 4,
	RFT_LOG_INFO = 6,
	RFT_LOG_DBG = 7,
};

extern int rft_log_max; /* messages above this level are dropped */

void rft_log_syslog(const char *ident);
void rft_logv(int level, const char *func, int line, const char *fmt,
	      va_list ap) __attribute__((format(printf, 4, 0)));
void rft_log(int level, const char *func, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Arguments are not evaluated when the level is off. */
#define rft_log_at(lvl, ...)                                                   \
	do {                                                                   \
		if ((lvl) <= rft_log_max)                                      \
			rft_log((lvl), __func__, __LINE__, __VA_ARGS__);        \
	} while (0)
#define rft_err(...) rft_log_at(RFT_LOG_ERR, __VA_ARGS__)
#define rft_warn(...) rft_log_at(RFT_LOG_WARN, __VA_ARGS__)
#define rft_info(...) rft_log_at(RFT_LOG_INFO, __VA_ARGS__)
#define rft_dbg(...) rft_log_at(RFT_LOG_DBG, __VA_ARGS__)

/* --- configuration and lifetime ---------------------------------------- */

enum eng_unmount_flush {
	ENG_UNMOUNT_FLUSH_ALL,	  /* write back every sealed file */
	ENG_UNMOUNT_FLUSH_POLICY, /* only what --persist-every selects */
	ENG_UNMOUNT_FLUSH_NONE,
};

/*
 * Faulting the arena in costs the writer of the first checkpoint dearly
 * (docs/benchmarks.md): by default a low-priority thread does it after
 * mounting, in the order chunks are handed out.
 */
/*
 * What fsync and fdatasync of a writer's handle wait for: its data
 * written (none: the arena is the tier), protected across the group as
 * --protect says (protect: sealed, as a close would, and protected or
 * persisted; EIO when it cannot be, within 30 s), or written back to the
 * persist dir (persist: in a group sealed first; EIO when the write-back
 * fails).
 */
enum eng_sync {
	ENG_SYNC_NONE,
	ENG_SYNC_PROTECT,
	ENG_SYNC_PERSIST,
};

enum eng_prefault {
	ENG_PREFAULT_BACKGROUND,
	ENG_PREFAULT_START,	/* all of it before eng_new returns */
	ENG_PREFAULT_NONE,
};

struct eng_config {
	const char *mountpoint;	 /* absolute path, for status and logs */
	const char *persist_dir; /* NULL: no persist tier */
	const char *spill_dir;	 /* NULL: no spill tier (local disk below
				    RAM: engine/spill.c) */
	uint64_t spill_bytes;	 /* its budget */
	uint64_t mem_bytes;	 /* memory budget for file data */
	uint32_t chunk_size;	 /* power of two, RFT_CHUNK_MIN..RFT_CHUNK_MAX */
	unsigned keep;		 /* newest checkpoints that always stay in RAM */
	unsigned persist_every;	 /* write back every Nth checkpoint; 0: never
				    by policy, only on flush and unmount */
	enum eng_unmount_flush unmount_flush;
	unsigned enospc_wait_ms; /* how long a writer waits for free space */
	unsigned retry_ms;	 /* write-back retry period after an error */
	enum eng_prefault prefault; /* when the arena is faulted in */
	bool lock_memory;	 /* lock the arena, and passthrough's backing
				    tmpfs, in RAM: never swapped */
	enum eng_sync sync;	 /* what fsync waits for */
	unsigned fetch_threads;	 /* threads for reads that fetch data */
	unsigned fetch_timeout_ms; /* such a read fails ETIMEDOUT after this */
	int node;		 /* in a group, this node's id (its own lock
				    and staging in a shared persist dir, and
				    a namespace from the group's log, not
				    from the persist dir); -1: no group */
};

/* Fill @cfg with the defaults documented in docs/operations.md. */
void eng_config_defaults(struct eng_config *cfg);

/*
 * Create an engine: the arena and the namespace (with what cfg->persist_dir
 * already holds, as not-yet-resident files).  Errors are -errno with one
 * line logged saying what failed (e.g. -EBUSY: persist dir in use by
 * another daemon, -EACCES: persist dir unwritable).
 */
int eng_new(const struct eng_config *cfg, struct eng **out);

/* Start the background threads: copier, balancer, write-back. */
int eng_start(struct eng *e);

/*
 * Stop: write back what cfg->unmount_flush says (waiting for it), stop the
 * threads.  Returns 0, or the write-back error.  A front end that reports
 * on the engine (the control socket) stops before this.
 */
int eng_stop(struct eng *e);

/* Free everything; eng_free(NULL) is a no-op.  Call after eng_stop(). */
void eng_free(struct eng *e);

/*
 * The configuration @e runs with: eng_new's @cfg, its strings (mountpoint,
 * persist_dir) copied.  Valid until eng_free(); never changes, so any
 * thread may read it without a lock.
 */
const struct eng_config *eng_get_config(struct eng *e);

/* --- namespace ---------------------------------------------------------- */

int eng_lookup(struct eng *e, uint64_t parent, const char *name,
	       struct stat *st);
void eng_forget(struct eng *e, uint64_t ino, uint64_t nlookup);
int eng_getattr(struct eng *e, uint64_t ino, struct stat *st);

#define ENG_SET_MODE (1u << 0)
#define ENG_SET_UID (1u << 1)
#define ENG_SET_GID (1u << 2)
#define ENG_SET_SIZE (1u << 3)
#define ENG_SET_ATIME (1u << 4)
#define ENG_SET_MTIME (1u << 5)
#define ENG_SET_ATIME_NOW (1u << 6)
#define ENG_SET_MTIME_NOW (1u << 7)
#define ENG_SET_CTIME (1u << 8)
/*
 * Clear set-user-ID of a regular file, and set-group-ID where group execute
 * is set or the caller (kill_gid) is not of the file's group, unless
 * ENG_SET_MODE sets the mode: the kernel's setattr_should_drop_suidgid.
 * fs/ asks for it when an unprivileged caller writes or truncates, and on
 * every chown, since with FUSE_CAP_HANDLE_KILLPRIV the filesystem does it.
 */
#define ENG_SET_KILL_SETID (1u << 9)

struct eng_setattr {
	unsigned valid; /* ENG_SET_* */
	mode_t mode;
	uid_t uid;
	gid_t gid;
	uint64_t size;
	struct timespec atime, mtime, ctime;
	gid_t kill_gid; /* ENG_SET_KILL_SETID: the caller's group */
};
/* kill_gid of a caller with CAP_FSETID: set-group-ID needs group execute. */
#define ENG_KILL_PRIVILEGED ((gid_t)-1)

/*
 * Namespace changes (mknod, mkdir, symlink, link, unlink, rmdir, rename,
 * setattr) are eng_call()s, below.  New entries belong to @uid/@gid; @mode
 * carries the file type bits.  MKNOD makes regular files, FIFOs, sockets
 * and device nodes (@rdev).  SETATTR: @fp, when not NULL, is the handle a
 * truncate came by.
 */

/* Copy the target (not NUL-terminated) into @buf; returns its length. */
int eng_readlink(struct eng *e, uint64_t ino, char *buf, size_t size);
/* Hard links, of anything but directories; at most RFT_LINK_MAX names. */
#define RFT_LINK_MAX 65000

/* eng_call's flags for ENG_CALL_RENAME. */
#define ENG_RENAME_NOREPLACE (1u << 0)
#define ENG_RENAME_EXCHANGE (1u << 1)

/* f_blocks/f_bfree report the memory budget, in f_frsize units. */
int eng_statfs(struct eng *e, struct statvfs *sv);

/* --- directories -------------------------------------------------------- */

int eng_opendir(struct eng *e, uint64_t ino, struct eng_dir **dp);

/*
 * Called for each entry; @next_off is the offset to resume after it.
 * Return nonzero to stop (the entry was not consumed).
 */
typedef int (*eng_dirent_fn)(void *ctx, const char *name,
			     const struct stat *st, off_t next_off);

/* Walk the snapshot from @off (0: the start, "." and ".." included). */
int eng_readdir(struct eng *e, struct eng_dir *d, off_t off,
		eng_dirent_fn fn, void *ctx);
void eng_releasedir(struct eng *e, struct eng_dir *d);

/* --- files -------------------------------------------------------------- */

struct eng_open_info {
	bool cache_valid; /* data unchanged since the last open that allowed
			     caching: a reader may reuse what it cached */
	bool sealed;	  /* the file is closed by all writers */
	uint64_t size;	  /* its size at the open */
	/*
	 * FUSE passthrough (eng_pass_enable): pass_fd >= 0 when this open
	 * passes through to that backing file, with the id every open of it
	 * uses, or pass_id 0 when this open is the first and the caller
	 * registers it (eng_pass_registered).  -1 otherwise.
	 */
	int pass_fd;
	int pass_id;
};

/*
 * FUSE passthrough (docs/design.md, "Passthrough"): mount the engine's own
 * backing tmpfs, so that sealed files larger than @min_size opened on this
 * node alone may pass through to a copy of their bytes there.  A sealed
 * file is copied in the background once the writes to the engine have
 * stopped for @quiet_ms (less than 1 MiB in that time; 0: at once), so
 * that the copies do not slow a save down ("A copy at seal, once the
 * writes stop").  @early: such files are also copied while they are
 * written ("Early copies"), at a cost to the writes.  Needs CAP_SYS_ADMIN.
 * 0 or -errno (logged).
 */
int eng_pass_enable(struct eng *e, uint64_t min_size, bool early,
		    unsigned quiet_ms);
/*
 * After eng_pass_enable: a large file is written into the backing file
 * that the last copy of a file of the same base name left (in place), so
 * that its copy at seal has (nearly) nothing to copy.  Early copies are
 * then off (this replaces them).  docs/design.md, "Writing large files
 * into their backing files".
 */
void eng_pass_in_place(struct eng *e, bool on);
/*
 * The caller registered @fp's backing file with the kernel as @id (<= 0:
 * it could not).  Returns the id to open @fp with, or 0: it does not pass
 * through (open it direct).  The caller closes its own @id when the
 * returned one differs.
 */
int eng_pass_registered(struct eng *e, struct eng_file *fp, int id);

/*
 * Open and create are eng_call()s (ENG_CALL_OPEN, ENG_CALL_CREATE), below:
 * @flags are open(2) flags (O_TRUNC, O_APPEND, access mode); create makes
 * @name and opens it in one step (O_EXCL honoured).
 */

/*
 * Write @size bytes at @off (at the end of file for O_APPEND handles).
 * Blocks up to cfg->enospc_wait_ms for memory, then -ENOSPC.
 * Returns the byte count written.
 */
ssize_t eng_write(struct eng *e, struct eng_file *fp, const void *buf,
		  size_t size, off_t off);
/*
 * eng_write for a caller that must not wait (an io_uring thread): -EAGAIN,
 * with nothing changed, where eng_write would wait for memory, for a
 * read-in from the persist dir or for queued copies.
 */
ssize_t eng_write_nowait(struct eng *e, struct eng_file *fp, const void *buf,
			 size_t size, off_t off);

/*
 * fallocate(2) on an open file, within the memory budget.  With no flag:
 * every piece of [@off, @off + @len) gets memory now (holes read as zeros
 * still; persisted-only pieces are read in), so later writes there do not
 * wait for memory, and the size grows to @off + @len; ENG_FALLOC_KEEP_SIZE:
 * the same without the size.  All or nothing: -ENOSPC after
 * --enospc-wait with nothing changed.  ENG_FALLOC_PUNCH_HOLE (with
 * KEEP_SIZE, as fallocate(2) requires): the range reads as zeros
 * afterwards, pieces inside it whole become holes and give their memory
 * back, the pieces at its edges are zeroed in place.  Other flags:
 * -EOPNOTSUPP.
 */
#define ENG_FALLOC_KEEP_SIZE (1u << 0)
#define ENG_FALLOC_PUNCH_HOLE (1u << 1)
int eng_fallocate(struct eng *e, struct eng_file *fp, unsigned flags,
		  off_t off, off_t len);

/*
 * Like eng_write, but the copy into memory may happen later, in the
 * engine's copier thread: memory is reserved (or -ENOSPC returned) before
 * this returns, and the file's size is final.  When *@queued is set on
 * return, @buf must stay valid until @done(@ctx) is called (from another
 * thread); otherwise the copy is complete and @done is not called.  Reads,
 * truncates, fsync and close of the file wait for its queued copies.
 */
ssize_t eng_write_async(struct eng *e, struct eng_file *fp, const void *buf,
			size_t size, off_t off, void (*done)(void *ctx),
			void *ctx, bool *queued);

/*
 * Read up to @size bytes at @off and pass them to @reply as an iovec that
 * points into engine memory (holes point at zeros), valid only during the
 * call; or pass a -errno as @err (iov NULL, cnt 0).  A read whose data is
 * all in RAM is answered before eng_read returns; one that must fetch data
 * (the persist dir) is answered later from an engine thread, at most
 * cfg->fetch_timeout_ms later (-ETIMEDOUT).  A chunk that fails its
 * checksum gives -EIO, never its bytes.  Returns 0 when @reply has been or
 * will be called exactly once, or -errno when it will not be.
 */
typedef int (*eng_reply_fn)(void *ctx, const struct iovec *iov, int cnt,
			    int err);
int eng_read(struct eng *e, struct eng_file *fp, size_t size, off_t off,
	     eng_reply_fn reply, void *ctx);

/*
 * A write by an unprivileged caller of group @gid: clear the file's set-ID
 * bits as ENG_SET_KILL_SETID does.  Cheap when the file has none.  Returns
 * 1 when the mode changed (the kernel's cached attributes are stale), 0 or
 * -errno.
 */
int eng_write_kill_setid(struct eng *e, struct eng_file *fp, gid_t gid);

/* Flush (a close(2)) and fsync are eng_call()s, ENG_CALL_FLUSH and
 * ENG_CALL_FSYNC, below. */
/*
 * Close; the last writer's close seals the file.  Returns a backing id
 * the caller closes (passthrough: the last open of it), or 0.
 */
int eng_release(struct eng *e, struct eng_file *fp);

/* --- calls that may finish later ---------------------------------------- */

/*
 * A namespace change, or an open or close that changes what other nodes
 * see.  On a single node every call finishes at once.  In a group the
 * change goes through the group's log and finishes when it has been
 * applied on every live node: eng_call() returns ENG_LATER and @done is
 * called once, from an engine thread, so that a FUSE worker never waits
 * for the network.  fs/ops.c makes every one of these calls this way, and
 * so do the unit tests (tests/unit/eng_fixture.h, a wait on @done).
 */
enum eng_call_kind {
	ENG_CALL_MKNOD,		/* parent, name, mode, rdev, uid, gid -> st */
	ENG_CALL_MKDIR,		/* parent, name, mode, uid, gid -> st */
	ENG_CALL_SYMLINK,	/* parent, name, target, uid, gid -> st */
	ENG_CALL_LINK,		/* ino, newparent, newname -> st */
	ENG_CALL_UNLINK,	/* parent, name */
	ENG_CALL_RMDIR,		/* parent, name */
	ENG_CALL_RENAME,	/* parent, name, newparent, newname, flags */
	ENG_CALL_SETATTR,	/* ino, fp (or NULL), sa -> st */
	ENG_CALL_CREATE,	/* parent, name, mode, uid, gid, flags
				   -> st, fp, info */
	ENG_CALL_OPEN,		/* ino, flags -> fp, info */
	ENG_CALL_FLUSH,		/* fp: a writer's close seals the file */
	ENG_CALL_FSYNC,		/* fp: fsync, fdatasync (cfg->sync) */
};

struct eng_call {
	enum eng_call_kind kind;
	/* In.  Strings are copied before eng_call() returns. */
	uint64_t ino, parent, newparent;
	const char *name, *newname, *target;
	mode_t mode;
	dev_t rdev;
	uid_t uid;
	gid_t gid;
	int flags;		/* open(2) flags, or ENG_RENAME_* */
	struct eng_setattr sa;
	struct eng_file *fp;	/* SETATTR (may be NULL), FLUSH, FSYNC */
	/* Out, valid when the call succeeded. */
	struct stat st;
	struct eng_file *newfp;	/* CREATE, OPEN */
	struct eng_open_info info;
	/* Called once when eng_call() returned ENG_LATER; @rc 0 or -errno. */
	void (*done)(struct eng_call *c, int rc);
	void *ctx;
};

#define ENG_LATER 1

/*
 * Make the call.  0 or -errno: finished, done() is not called.
 * ENG_LATER: @c must stay valid until done(c, rc) is called.
 */
int eng_call(struct eng *e, struct eng_call *c);

/* --- the sharding group ------------------------------------------------- */

struct grp;

/*
 * Make @e node @g's share of the group's one namespace (engine/gns.c):
 * every namespace change goes through the group's log from now on.  Call
 * after eng_new() and grp_new(), before eng_start() and grp_start().  0 or
 * -errno.  Without it (no group) the engine is a single node.
 */
int eng_join_group(struct eng *e, struct grp *g);

/*
 * Wait until this node's namespace has caught up with the group's log
 * (after grp_start): a node must not show a namespace older than what the
 * group had when it started.  0, -ETIMEDOUT (nothing to serve yet: the
 * group has no leader), or 0 at once without a group.
 */
int eng_group_ready(struct eng *e, int timeout_ms);

/*
 * true once eng_group_ready() succeeded (this node's namespace is the
 * group's), or without a group.
 */
bool eng_group_caught_up(struct eng *e);

/*
 * A graceful stop of a node of a group, after the FUSE session ended and
 * before grp_stop(): wait up to @wait_ms for this node's sealed files to
 * be protected (its rebuild stops), then log by path each file whose
 * bytes go with this daemon (neither protected nor persisted) and append
 * LOST for this node, so that the others show those files lost at once
 * (when the log can take it: a majority up).  Returns how many such
 * files were left when --protect asks for protection (the daemon exits
 * non-zero then), else 0; 0 at once without a group.  Sleeps.
 */
int eng_group_leave(struct eng *e, unsigned wait_ms);

/* true when @e is a node of a group (eng_join_group succeeded). */
bool eng_in_group(const struct eng *e);

/*
 * The kernel's cache of names, kept right when another node of the group
 * removes or moves a name (fs/ delivers FUSE entry invalidations).  In a
 * group the kernel revalidates every cached name at its next use (entry
 * timeout 0), so a stale name is never followed; what it cannot do is
 * keep a directory under two names: a directory renamed on another node
 * and still cached here under its old name cannot be renamed here under
 * its new one (ESTALE) until that entry is gone.
 */
struct eng_invalidator {
	void *ctx;
	/*
	 * @name in directory @parent changed on another node; @dir when it
	 * named a directory that lives on under another name (its one
	 * alias).  Called from the log's apply thread: queue it, never block
	 * (delivering it may wait for a FUSE request that waits for the log).
	 */
	void (*entry)(void *ctx, uint64_t parent, const char *name, bool dir);
	/* true when no @dir entry queued is still to be delivered. */
	bool (*idle)(void *ctx);
};
/* Before eng_start; @inv is copied. */
void eng_set_invalidator(struct eng *e, const struct eng_invalidator *inv);
/* The invalidator has delivered everything it had (from its thread). */
void eng_invalidated(struct eng *e);

/* Protection of this node's files on peers, and its rebuild. */
struct eng_protect_stats {
	unsigned copies;	  /* R of replicate:R; 0: none, xor, rs */
	uint64_t bw;		  /* --protect-bw, bytes/s; 0: no limit */
	uint64_t files_pending;	  /* queued or waiting for a retry */
	uint64_t files_unprotected; /* owned here, sealed, no current
				       copies on peers */
	uint64_t files_protected; /* since this daemon started */
	uint64_t pieces_sent, bytes_sent;
	uint64_t pieces_held, bytes_held; /* copies held for peers */
	uint64_t pieces_refused;	  /* peers' pieces not taken */
	uint64_t retries;
	bool rebuilding;		  /* the rebuild runs */
	uint64_t rebuild_files, rebuild_done; /* files of this node */
	uint64_t rebuild_bytes;		  /* fetched: not in memory nor the
					     spill dir */
	uint64_t rebuild_failed;	  /* not back yet: tried again */
	int holder_dead;		  /* a holder of this node's copies
					     that is dead; -1: none */
	uint64_t files_lost;		  /* owned here, lost: never to be
					     protected (eng_list_lost) */
	uint64_t rebuild_lost;		  /* the rebuild found lost */
	/*
	 * Protections a live holder refused (no memory for the copy or the
	 * row there): tried again, and only what it lacks is sent again.
	 */
	uint64_t files_stalled;
	int stalled_holder;		  /* one that refused; -1: none */
	int stalled_err;		  /* its reason, -errno */
	char scheme[32];		  /* "replicate:2", "xor:2", "rs:4+2";
					     "" for none */
	/* xor, rs:K+M: */
	uint64_t parity_rows, parity_bytes; /* rows held for the group */
	uint64_t parity_folds, parity_unfolds, parity_refused;
	uint64_t pieces_rebuilt, bytes_rebuilt; /* reconstructed reads */
	uint64_t rebuilds_failed;
	/*
	 * Pieces of a node that lost its memory, in rows here, whose seal is
	 * no longer current: the row counts bytes nobody has until they are
	 * taken out here (encoded anew from the other members).
	 */
	uint64_t parity_stale, parity_orphans_dropped;
};

/* Fill @st; zeros (copies 0) without a group or protection. */
void eng_protect_stats(struct eng *e, struct eng_protect_stats *st);

/* The group's namespace log as this node uses it, and peers' requests. */
struct eng_log_stats {
	uint64_t proposed;	/* changes this node put to the log */
	uint64_t failed;	/* ... that the log did not take */
	uint64_t waits;		/* peers' "applied N yet?" answered yes */
	/*
	 * ... before a directory's old name was out of this kernel's cache:
	 * the invalidation waited longer than GNS_INVAL_WAIT_MS (behind a
	 * FUSE request that holds the directory's lock here).
	 */
	uint64_t waits_capped;
	uint64_t gets_served, gets_refused; /* peers' piece reads */
};

/* Fill @st; zeros without a group. */
void eng_log_stats(struct eng *e, struct eng_log_stats *st);

/*
 * The files in state lost (enum eng_state), only those this node owns
 * when @mine: @fn gets the path (relative to the mount root) of each of
 * the first @max, with no lock held (a nonzero return: no more calls).
 * Returns the number of such files in all, or -errno; 0 without a
 * group.
 */
typedef int (*eng_path_fn)(void *ctx, const char *path);
long eng_list_lost(struct eng *e, bool mine, unsigned max, eng_path_fn fn,
		   void *ctx);

/*
 * Copies in a group as this node's namespace has them now, per node id:
 * @there[n], bytes of this node's files that node n holds copies of;
 * @here[n], bytes of node n's files whose copies this node holds in
 * memory (what readers fetched here is a cache, not counted).  Zeros
 * without a group.  Walks every file: for reftfs-admin group.
 */
void eng_copy_bytes(struct eng *e, uint64_t there[64], uint64_t here[64]);

/* --- state for reftfs-admin (used by the control socket, fs/ctl*.c) ---- */

/*
 * Weakest first: a checkpoint reports the weakest state of its files.
 * Lost: sealed, and its bytes are gone for good (in a group: they were
 * only in the memory of its owner, which lost it, with no copy, parity
 * row or persisted copy left); reads give EIO until it is written again
 * or removed.
 */
enum eng_state {
	ENG_STATE_LOST,
	ENG_STATE_WRITING,
	ENG_STATE_SEALED,
	ENG_STATE_PROTECTED,
	ENG_STATE_PERSISTED,
};
const char *eng_state_name(enum eng_state s);

/* How far a file's chunk checksums can be trusted. */
enum eng_crc_state {
	ENG_CRC_PENDING,    /* still being written */
	ENG_CRC_FINAL,	    /* every chunk has its final CRC32C */
	ENG_CRC_UNVERIFIED, /* from the persist dir without a sidecar */
	ENG_CRC_BAD,	    /* a chunk failed its check: reads give EIO */
};
const char *eng_crc_state_name(enum eng_crc_state s);

struct eng_stats {
	uint64_t mem_budget, mem_used; /* bytes of arena */
	uint64_t mem_prefaulted;       /* bytes faulted in ahead of use */
	uint64_t mem_locked;	       /* bytes locked in RAM (lock_memory) */
	/* What the used chunks hold (their sum may be below mem_used:
	   pieces pinned by write-back or protection, chunks in flight). */
	uint64_t mem_own;	/* this node's files */
	uint64_t mem_copies;	/* copies held for other nodes' files */
	uint64_t mem_cached;	/* other nodes' pieces fetched by readers */
	uint64_t mem_parity;	/* parity rows held for the group */
	/* Small pieces share chunks (slabs): the chunks so used, and the
	   bytes of the blocks taken in them (the rest is free blocks). */
	uint32_t small_slabs;
	uint64_t small_bytes;
	uint64_t chunk_size, chunks_total, chunks_used, chunks_evictable;
	uint64_t files, dirs, bytes_logical, bytes_resident;
	uint64_t files_lost;	/* state lost (file_lost): gone for good */
	uint64_t checkpoints;
	uint64_t write_ops, write_bytes, read_ops, read_bytes;
	uint64_t enospc, crc_errors, evicted_chunks;
	uint64_t readthrough_chunks, readthrough_bytes;
	uint64_t peer_bytes;	/* brought in from peers (copies, decodes) */
	uint64_t fetch_reads, fetch_timeouts; /* reads answered off FUSE threads */
	/* Pieces brought in (from peers, the persist dir) while memory was
	   full; reads served without keeping their copy, none evictable. */
	uint64_t fetch_stalls, reads_uncached;
	/* Files' versions that became protected, persisted, or lost (the
	   group's log found their seal nowhere) on this node, since start. */
	uint64_t protected_versions, persisted_versions, lost_versions;
	/* FUSE passthrough: on, opens that passed through, files copied to a
	   backing file and their bytes, of them copies made over a spare
	   backing file's pages, bytes copied while their files were
	   written (early) and of them bytes a copy at seal found unchanged
	   (not copied again), since start; bytes held now */
	bool pass_enabled;
	uint64_t pass_opens, pass_files, pass_bytes, pass_reused;
	uint64_t pass_early_bytes, pass_early_used;
	uint64_t pass_placed_bytes, pass_placed_used;
	uint64_t pass_no_spare; /* in place: copies not made (no room) */
	bool pass_in_place;
	uint64_t pass_held_bytes;
	uint32_t pass_waiting; /* sealed files waiting for the writes to stop */
	/* spill tier: its budget and the bytes its files take on disk;
	   pieces there now; since start, pieces written there, read back,
	   failed their check when read, and failed writes; pieces found
	   there at start (an earlier daemon's) and taken back */
	bool spill_enabled;
	uint64_t spill_budget, spill_used, spill_pieces;
	uint64_t spill_written, spill_read, spill_crc_errors, spill_errors;
	uint64_t spill_found;
	/* persist tier */
	bool persist_enabled, persist_healthy;
	/* written back since start */
	uint64_t persist_files, persist_bytes, persist_errors;
	uint64_t persist_pending_files, persist_pending_bytes;
	char persist_last_error[256]; /* "" when none */
	time_t persist_last_error_time, persist_last_ok_time;
	time_t start_time;
};
void eng_get_stats(struct eng *e, struct eng_stats *s);

/*
 * A checkpoint, or any file or tree (eng_path_state).  The file counts go
 * up the states, each counting the files at that state or a stronger one:
 * protected counts the files that survive the loss of a node (protected
 * by the group, or persisted), persisted those in the persist dir.
 */
struct eng_ckpt_info {
	const char *name; /* top-level directory name; eng_path_state: the
			     path as given */
	uint64_t seq;	  /* creation order, from 1; 0: not a checkpoint */
	enum eng_state state; /* weakest state of its files (persisted with
				 none) */
	uint64_t files, bytes, bytes_resident;
	uint64_t files_lost;	  /* of them, in state lost */
	uint64_t files_writing;	  /* ... writing */
	uint64_t files_sealed;	  /* ... sealed or stronger */
	uint64_t files_protected; /* ... protected or persisted */
	uint64_t files_persisted; /* ... persisted */
	bool in_keep_window;	/* among the newest cfg->keep */
	bool persist_selected;	/* chosen by --persist-every */
	/*
	 * When it was made a checkpoint, and when the last of its files was
	 * sealed, protected and persisted (rft_now_ms, on this node); 0 while
	 * a file is not, or not known (a daemon that found it at start).
	 */
	uint64_t born_ms, sealed_ms, protected_ms, persisted_ms;
	/*
	 * Its load here: of its files read on this node since their last
	 * seal, the first opened for reading to the last closed, and their
	 * bytes; 0 when none was, or one is open for reading now.
	 */
	uint64_t load_from_ms, load_to_ms, load_bytes;
};
typedef int (*eng_ckpt_fn)(void *ctx, const struct eng_ckpt_info *ci);
/* Report every checkpoint, oldest first; stops when @fn returns nonzero. */
int eng_list_checkpoints(struct eng *e, eng_ckpt_fn fn, void *ctx);
/*
 * The same of @path (relative to the mount root, "" or "/" for the root):
 * a file alone, a directory every file below it.  @ci->name is @path.
 * 0, or -ENOENT, -ENOTDIR as a lookup gives.
 */
int eng_path_state(struct eng *e, const char *path,
		   struct eng_ckpt_info *ci);
/*
 * The same of inode @ino (the FUSE getxattr of user.reftfs.state; name
 * NULL).  0, -ENOENT, -ENODATA (neither a file nor a directory), or
 * eng_fresh's -EIO.
 */
int eng_ino_state(struct eng *e, uint64_t ino, struct eng_ckpt_info *ci);

struct eng_entry_info {
	const char *path; /* relative to the mount root, "" for the root */
	uint64_t ino;
	uint64_t file_id; /* files: stable across remounts; 0 otherwise */
	mode_t mode;
	uint64_t size;
	struct timespec mtime;
	enum eng_state state;	  /* files only */
	enum eng_crc_state crc;	  /* files only */
	uint32_t chunks, chunks_resident;
	bool in_persist;	  /* a current copy is in the persist dir */
	int owner;		  /* files in a group: the node that owns
				     the data; -1 otherwise */
	uint64_t holders;	  /* ... and the nodes that hold its data
				     (a bit per node; the owner's included) */
	const char *tier;	  /* "ram", "ram+persist", "persist", "partial" */
};
typedef int (*eng_entry_fn)(void *ctx, const struct eng_entry_info *ei);
/*
 * Report @path (relative to the mount root, "" or "/" for the root): a file
 * reports itself, a directory each of its entries.  -ENOENT if absent.
 */
int eng_list_path(struct eng *e, const char *path, eng_entry_fn fn,
		  void *ctx);

/* One piece (chunk-sized part) of a file, for reftfs-admin placement. */
struct eng_piece_info {
	uint32_t index;
	uint32_t len;		/* bytes of the file in it */
	uint32_t crc;		/* CRC32C of those bytes, when crc_known */
	bool crc_known;
	const char *here;	/* this node: "ram", "ram (fetched)", "peers",
				   "persist", "spill", "hole" */
	int owner;		/* in a group, the file's owner; else -1 */
	uint64_t holders;	/* nodes with the sealed bytes (owner's bit
				   included); 0 without a group */
	uint64_t seal;		/* the log index of that seal; 0: none */
	/* xor, rs: the piece's stripe in its checkpoint, its data slot,
	   the nodes of the stripe's data slots and of its parity rows. */
	bool striped;
	uint64_t stripe;
	int slot;
	uint64_t data_nodes, parity_nodes;
};
typedef int (*eng_piece_fn)(void *ctx, const struct eng_piece_info *pi);
/*
 * Report every piece of the regular file @path (relative to the mount
 * root).  -ENOENT if absent, -EISDIR / -EINVAL for other types.
 */
int eng_list_pieces(struct eng *e, const char *path, eng_piece_fn fn,
		    void *ctx);

/*
 * One copy of a file as reftfs-admin verify found it: the CRC32C of each
 * piece held in memory there recomputed and compared with the sum the
 * file's seal recorded.
 */
struct eng_verify_copy {
	int node;		/* the node that holds it; -1 without a group */
	int rc;			/* 0: checked; else why not: -EHOSTDOWN
				   (down), -ESTALE (holds another seal),
				   -ENOENT, -ETIMEDOUT, ... */
	uint32_t checked;	/* pieces recomputed */
	uint32_t bad;		/* ... that did not match */
	uint32_t first_bad;	/* the index of the first of those */
	uint32_t absent;	/* pieces not in memory there (in the
				   persist dir, the spill dir, or on
				   peers) */
	uint64_t bytes;		/* bytes recomputed */
	/*
	 * With repair: bad pieces put right (this node's: dropped and read
	 * back checked from a good copy; a holder's: dropped there and sent
	 * again by this node, the owner, in the background: protect --wait
	 * follows it), and the repair's -errno (0: none needed, or done).
	 */
	uint32_t repaired;
	int repair_rc;
	/*
	 * In a group: what that node shows of the file against the group's
	 * seal (the log's SEAL): off, how many of its recorded checksums
	 * (its size counted as one) differ, whatever its bytes; and
	 * seal_differs when its record of the seal itself differs from this
	 * node's.  Either is bad (the nodes disagree); with repair a node
	 * that is off shows the group's seal again (synced: it did).
	 */
	uint32_t off;
	bool seal_differs;
	bool synced;
};

#define ENG_VERIFY_MAX_COPIES 64

struct eng_verify_info {
	const char *path;	/* relative to the mount root */
	uint64_t size;
	uint32_t pieces;
	bool sealed;		/* false: being written, nothing checked */
	int owner;		/* in a group; -1 otherwise */
	unsigned ncopies;	/* this node's first (when it holds one) */
	struct eng_verify_copy copy[ENG_VERIFY_MAX_COPIES];
	/*
	 * xor, rs (scrub): the parity rows of the stripes its pieces are in,
	 * each encoded anew from the stripe's members and compared; bad: a
	 * row that does not match, or lacks the file's piece; unchecked: its
	 * holder down, a member not readable.
	 */
	bool striped;
	uint32_t rows_checked, rows_bad, rows_unchecked;
	uint64_t first_bad_stripe;
};
typedef int (*eng_verify_fn)(void *ctx, const struct eng_verify_info *vi);
/*
 * Check every regular file at or under @path (relative to the mount root):
 * this node's copy and, in a group, the copy of each node that holds the
 * file's sealed bytes (asked over the peer link; the pieces are checked
 * where they are, not sent).  @fn is called once per file, in no
 * particular order, with no lock held.  -ENOENT if @path is absent.
 * With @repair, bad pieces are put right where a good copy allows (see
 * eng_verify_copy.repaired): on this node for the files it owns, and for
 * copies a reader fetched.  Sleeps (the CRCs, the peers).
 */
int eng_verify(struct eng *e, const char *path, bool repair, eng_verify_fn fn,
	       void *ctx);

struct eng_flush_progress {
	uint64_t files_total, files_done;
	uint64_t bytes_total, bytes_done;
	bool finished; /* everything asked for is written back, or failed */
	int error;     /* -errno of the last failure, 0 if none */
};
/* Ask for everything sealed now to be written back; returns a ticket. */
int eng_flush_request(struct eng *e, uint64_t *ticket);
int eng_flush_progress(struct eng *e, uint64_t ticket,
		       struct eng_flush_progress *p);

#endif /* RFT_ENGINE_H */
