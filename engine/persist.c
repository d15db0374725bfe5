/*
 * persist.c - the persist tier (shared storage, e.g. NFS): write-back,
 * read-through and name mirroring.  Eviction (evict.c) frees what it has
 * made safe.
 *
 * Layout of the persist dir: the same tree as the mount, plain files that
 * any tool can read, plus
 *   .reftfs-lock          flock()ed by the daemon that owns the dir
 *   .reftfs-tmp/          write-back staging; emptied at mount
 *   DIR/.NAME.rftsum      checksum sidecar of DIR/NAME (format below)
 *
 * A file is written back as a temporary in .reftfs-tmp, fsync()ed, then
 * renamed over its name, so the tree never holds a torn file.  Its sidecar
 * is renamed in just after it; a sidecar is trusted only when its own
 * CRC, and the size and mtime it records, match the file beside it.
 *
 * One worker thread does all write-back, and runs eviction.  Name changes in the
 * namespace are mirrored here under mirror_lock, which the worker also
 * holds while it renames a finished file into place: a copy is never put
 * under a name the namespace has just given up.
 */
#include <dirent.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "engine_i.h"
#include "evict.h"
#include "persist.h"
#include "erasure.h"

#define TMP_DIR ".reftfs-tmp"
#define LOCK_FILE ".reftfs-lock"
#define SUM_MAGIC "RFTSUM2"
#define SUM_MAGIC_V1 "RFTSUM1"
#define LOCK_WAIT_MS 60000
#define UNMOUNT_TRIES 3
#define FLUSH_GRACE_MS 500
#define PARK_PREFIX "park."
#define FLUSH_TICKETS 64	/* recent flush tickets whose outcome is kept */
#define BACKOFF_MAX_MS (5 * 60 * 1000)
/* A rename by another node: how long its own mirror may take (below). */
#define CHECK_DELAY_MS 2000
/* Tries of a step whose parent another node's mirror may move away. */
#define PARENT_TRIES 3
/* An fsync under --sync persist that a whole pass after it could not
 * write back (in a group: changed here since its seal) fails then. */
#define SYNC_MS 30000

/*
 * Sidecar: little-endian, as the daemon that wrote it (x86-64 and arm64
 * both are).  crc[i] is the CRC32C of piece i; trailer is the CRC32C of
 * everything before it.
 */
struct sum_header {
	char magic[8];
	uint32_t chunk_size;
	uint32_t npieces;
	uint64_t size;
	int64_t mtime_sec;
	int64_t mtime_nsec;
	uint64_t file_id;	/* RFTSUM2 on; RFTSUM1 stops before it */
};

#define SUM_HEADER_V1 offsetof(struct sum_header, file_id)

struct flush_ticket {
	uint64_t ticket;
	uint64_t files_total, bytes_total;
	uint64_t files_base, bytes_base;
	int error;	/* first failure of the pass that answered it */
};

/*
 * A change to the persist dir that failed and is tried again by the
 * worker: removing a name the namespace gave up.  Before it is retried
 * the namespace is asked whether the name is in use again.
 */
struct pending_op {
	struct pending_op *next;
	bool dir;
	char rel[];
};

/*
 * In a group, the node that renames or removes a file mirrors that into
 * the persist dir the group shares when it applies it.  The file's owner
 * may have written a copy under the old name after that mirror and before
 * it applied the change itself: the copy then sits under a name the file
 * no longer has (or, removed, as an orphan).  So the owner, once the
 * change is applied here, looks again after CHECK_DELAY_MS (the other
 * node's mirror has landed by then) at where its copy is: a copy left
 * behind is written again under the file's name, an orphan removed.
 */
struct copy_check {
	struct copy_check *next;
	struct inode *in;	/* held */
	uint64_t due_ms;	/* CLOCK_MONOTONIC */
	char from[];		/* the copy's path before the change */
};

/*
 * An fsync under --sync persist (persist_sync), waiting for its file's
 * @version, or a later one, to be in the persist dir.  On p->syncs; the
 * worker finishes it after a pass (finish_syncs), so that no FUSE reply
 * is sent under a lock: 0 once that version is written back, -EIO when a
 * write-back of the file failed meanwhile (@rc, set by note_outcome), the
 * file is lost, or SYNC_MS went by and a pass begun after it came did not
 * write it back.
 */
struct persist_sync {
	struct persist_sync *next;
	struct eng_call *call;
	struct inode *in;	/* held */
	uint64_t version;
	uint64_t pass;		/* p->passes when it came */
	uint64_t until_ms;	/* CLOCK_MONOTONIC */
	int rc;			/* a write-back of its file failed: -errno */
};

struct persist {
	struct eng *e;
	int dirfd;
	int lockfd;
	/*
	 * Its staging dir and lock file: TMP_DIR and LOCK_FILE, or in a
	 * group, whose nodes share one persist dir, TMP_DIR/nodeN and
	 * LOCK_FILE.nodeN: each node writes back what it owns, under a lock
	 * of its own.
	 */
	char tmp[32];
	char lockname[40];

	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t thread;
	bool running;		/* protected by lock */
	bool stopping;		/* protected by lock */
	bool kicked;		/* protected by lock */
	uint64_t flush_req;	/* protected by lock */
	uint64_t flush_done;	/* protected by lock */
	/* Ticket t lives in fl[t % FLUSH_TICKETS]; protected by lock. */
	struct flush_ticket fl[FLUSH_TICKETS];

	struct pending_op *ops;	/* failed removals to retry; lock */
	struct persist_sync *syncs; /* fsyncs waiting; lock (the worker's
				       own while it finishes them) */
	uint64_t passes;	/* write-back passes begun; lock */
	struct copy_check *checks; /* copies to look for; lock */
	struct inode *wb_head, *wb_tail; /* write-back queue; lock */
	size_t wb_len;		/* protected by lock */
	struct inode **away;	/* files whose copy is COPY_AWAY; lock */
	size_t naway, away_cap;	/* protected by lock */

	/* protected by lock */
	uint64_t files_written, bytes_written, errors;
	char last_error[256];
	time_t last_error_time, last_ok_time;
	bool healthy;
};

static void set_error(struct persist *p, int rc, const char *what,
		      const char *rel)
{
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	p->errors++;
	p->healthy = false;
	p->last_error_time = time(NULL);
	snprintf(p->last_error, sizeof(p->last_error), "%s %s: %s", what,
		 rel, strerror(-rc));
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	rft_warn("persist: %s %s: %s", what, rel, strerror(-rc));
}

static void add_progress(struct persist *p, uint64_t files, uint64_t bytes)
{
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	p->files_written += files;
	p->bytes_written += bytes;
	if (files) {
		p->healthy = true;
		p->last_ok_time = time(NULL);
	}
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
}

/* Name of the sidecar of @rel ("a/b" -> "a/.b.rftsum") into @buf. */
static int sum_name(const char *rel, char *buf, size_t size)
{
	const char *slash = strrchr(rel, '/');
	int dir = slash ? (int)(slash - rel + 1) : 0;
	int n = snprintf(buf, size, "%.*s.%s%s", dir, rel, rel + dir,
			 RFT_SUM_SUFFIX);

	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

static int write_all(int fd, const void *buf, size_t len, off_t off)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = pwrite(fd, p, len, off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO; /* no progress: would spin */
		p += n;
		off += n;
		len -= (size_t)n;
	}
	return 0;
}

/* mkdir -p of the directories above @rel. */
static int make_parents(int dirfd, const char *rel)
{
	char path[PATH_MAX];
	size_t n = strlen(rel);

	if (n >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, rel, n + 1);
	for (char *s = strchr(path, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		if (mkdirat(dirfd, path, 0755) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	return 0;
}

static int fsync_parent(int dirfd, const char *rel)
{
	const char *slash = strrchr(rel, '/');
	char dir[PATH_MAX];
	int fd, rc = 0;

	if (slash) {
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - rel), rel);
		fd = openat(dirfd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	} else {
		fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

/* --- the write-back queue ------------------------------------------------- */

/*
 * What needs writing back: files sealed or changed, directories and nodes
 * new or changed (EV_DIRTY), and what failed and waits for a retry.  A
 * pass takes the whole queue; what it cannot finish goes back in.  The
 * unmount pass alone walks the namespace (files still open for writing).
 */
static void queue_locked(struct persist *p, struct inode *in)
{
	if (in->wb_queued)
		return;
	in->wb_queued = true;
	in->wb_next = NULL;
	in->wb_prev = p->wb_tail;
	if (p->wb_tail)
		p->wb_tail->wb_next = in;
	else
		p->wb_head = in;
	p->wb_tail = in;
	p->wb_len++;
}

static void unqueue_locked(struct persist *p, struct inode *in)
{
	if (!in->wb_queued)
		return;
	if (in->wb_prev)
		in->wb_prev->wb_next = in->wb_next;
	else
		p->wb_head = in->wb_next;
	if (in->wb_next)
		in->wb_next->wb_prev = in->wb_prev;
	else
		p->wb_tail = in->wb_prev;
	in->wb_queued = false;
	p->wb_len--;
}

/* Queue @in (alive: the caller holds it); @wake: the worker, now. */
static void queue_inode(struct persist *p, struct inode *in, bool wake)
{
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	queue_locked(p, in);
	if (wake) {
		p->kicked = true;
		pthread_cond_signal(&p->wake);
	}
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
}

/* --- where copies are ---------------------------------------------------- */

static void park_path(const struct persist *p, uint64_t ino, char *buf,
		      size_t size)
{
	snprintf(buf, size, "%s/" PARK_PREFIX "%llu", p->tmp,
		 (unsigned long long)ino);
}

/*
 * Path of @in's copy relative to the persist dir into @buf: -ENOENT if it
 * has none.  ns->lock and @in's file lock held (read is enough).
 */
static int persist_copy_path(struct eng *e, const struct inode *in,
			     char *buf, size_t size)
{
	const struct file *f = &in->file;

	switch (f->copy) {
	case COPY_HOME:
		return ns_path(&e->ns, in, buf, size);
	case COPY_PARKED:
		park_path(e->persist, in->ino, buf, size);
		return 0;
	case COPY_AWAY:
		return snprintf(buf, size, "%s", f->away_rel) < (int)size
			       ? 0
			       : -ENAMETOOLONG;
	case COPY_NONE:
		break;
	}
	return -ENOENT;
}

/* Record where @in's copy now is; names lock held, no file lock. */
static void set_copy(struct eng *e, struct inode *in, enum copy_where w,
		     const char *away)
{
	struct persist *p = e->persist;
	struct file *f = &in->file;
	char *dup = away ? strdup(away) : NULL;

	if (w == COPY_AWAY && !dup)
		w = COPY_NONE; /* no memory: forget the copy, rewrite it */
	file_wrlock(f);
	free(f->away_rel);
	f->away_rel = dup;
	/* Not at home: the copy under its name is stale or missing. */
	if (w != COPY_HOME)
		file_dur_persisted(f, 0, 0);
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	if (f->copy == COPY_AWAY && w != COPY_AWAY) {
		for (size_t i = 0; i < p->naway; i++)
			if (p->away[i] == in) {
				p->away[i] = p->away[--p->naway];
				break;
			}
	} else if (f->copy != COPY_AWAY && w == COPY_AWAY) {
		if (p->naway == p->away_cap) {
			size_t cap = p->away_cap ? p->away_cap * 2 : 8;
			struct inode **v = realloc(p->away, cap * sizeof(*v));

			if (!v) {
				free(f->away_rel);
				f->away_rel = NULL;
				w = COPY_NONE;
				goto out;
			}
			p->away = v;
			p->away_cap = cap;
		}
		p->away[p->naway++] = in;
	}
out:
	f->copy = w;
	/* Not at home: it is written again under its name. */
	if (w != COPY_HOME)
		queue_locked(p, in);
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	file_unlock(f);
}

/* The file whose copy sits away at @rel, with a hold taken; or NULL. */
static struct inode *away_owner(struct eng *e, const char *rel)
{
	struct persist *p = e->persist;
	struct inode *owner = NULL;

	ns_wrlock(e);
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	for (size_t i = 0; i < p->naway && !owner; i++)
		if (!strcmp(p->away[i]->file.away_rel, rel))
			owner = p->away[i];
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	if (owner)
		owner->holds++;
	ns_unlock(e);
	return owner;
}

static void queue_op(struct persist *p, const char *rel, bool dir)
{
	size_t n = strlen(rel) + 1;
	struct pending_op *op = malloc(sizeof(*op) + n);

	if (!op) {
		rft_err("persist: no memory to retry the removal of %s", rel);
		return;
	}
	op->dir = dir;
	memcpy(op->rel, rel, n);
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	op->next = p->ops;
	p->ops = op;
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
}

/* Remove @rel (a file, with its sidecar) from the persist dir. */
static int remove_copy(struct persist *p, const char *rel)
{
	char sum[PATH_MAX + 16];
	int rc = 0;

	if (sum_name(rel, sum, sizeof(sum)) == 0 &&
	    unlinkat(p->dirfd, sum, 0) < 0 && errno != ENOENT)
		rc = -errno;
	if (unlinkat(p->dirfd, rel, 0) < 0 && errno != ENOENT && errno != EISDIR)
		rc = -errno;
	return rc;
}

/* Move a file's copy (and its sidecar) from @from to @to. */
static int move_copy(struct persist *p, const char *from, const char *to)
{
	char sfrom[PATH_MAX + 16], sto[PATH_MAX + 16];
	int rc;

	rc = make_parents(p->dirfd, to);
	if (rc < 0)
		return rc;
	if (renameat(p->dirfd, from, p->dirfd, to) < 0)
		return -errno;
	if (sum_name(from, sfrom, sizeof(sfrom)) == 0 &&
	    sum_name(to, sto, sizeof(sto)) == 0 &&
	    renameat(p->dirfd, sfrom, p->dirfd, sto) < 0 && errno != ENOENT) {
		/* Data moved, sums did not: drop both sidecars, not the data. */
		unlinkat(p->dirfd, sfrom, 0);
		unlinkat(p->dirfd, sto, 0);
	}
	return 0;
}

/*
 * Move @in's copy from @rel into the staging dir, where it is read from
 * until the file is written again or freed, and where a crash leaves it
 * under no name (the mount-time scan removes the staging dir's files).
 * Mirror lock held.
 */
static int park_copy(struct eng *e, struct inode *in, const char *rel)
{
	struct persist *p = e->persist;
	char park[64];
	int rc;

	park_path(p, in->ino, park, sizeof(park));
	rc = move_copy(p, rel, park);
	if (rc == 0) {
		set_copy(e, in, COPY_PARKED, NULL);
	} else if (rc == -ENOENT) {
		/* Gone already: nothing to park; the file goes again. */
		rft_warn("persist: the copy at %s is gone; writing it again",
			 rel);
		set_copy(e, in, COPY_NONE, NULL);
		rc = 0;
	} else {
		set_error(p, rc, "cannot park the copy at", rel);
	}
	return rc;
}

/*
 * Move the copy of a file whose copy sits away at @rel into the staging
 * dir, so that @rel can take another file's copy.  Mirror lock held.
 */
static int park_away_owner(struct eng *e, const char *rel)
{
	struct inode *owner = away_owner(e, rel);
	int rc;

	if (!owner)
		return 0;
	rc = park_copy(e, owner, rel);
	ns_unhold(e, owner);
	return rc;
}

/*
 * A name the namespace gave up: remove what the persist dir still holds
 * under it, unless the namespace uses the name again for a file (then
 * the copy there is that file's, or its older version, which a write-back
 * replaces).  The copy of a file that still reads from it (replaced while
 * open, then the name went) is parked: left there, a crash would bring
 * the name back with that old version after a flush had seen it gone.
 * Mirror lock held.  0 when done or not needed.
 */
static int drop_name(struct eng *e, const char *rel, bool dir)
{
	struct persist *p = e->persist;
	struct inode *in, *owner;
	bool keep;
	int rc;

	ns_rdlock(e);
	in = ns_resolve(&e->ns, rel);
	keep = in && (dir ? S_ISDIR(in->type)
			  : S_ISREG(in->type) || S_ISLNK(in->type));
	ns_unlock(e);
	if (keep)
		return 0;
	if (dir) {
		if (unlinkat(p->dirfd, rel, AT_REMOVEDIR) < 0 &&
		    errno != ENOENT && errno != ENOTDIR)
			return -errno;
		return 0;
	}
	owner = away_owner(e, rel);
	if (owner) {
		rc = park_copy(e, owner, rel);
		ns_unhold(e, owner);
		return rc;
	}
	return remove_copy(p, rel);
}

/* Try the queued removals again; names lock held. */
static void retry_ops(struct eng *e)
{
	struct persist *p = e->persist;
	struct pending_op *ops, *op, *left = NULL;

	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	ops = p->ops;
	p->ops = NULL;
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	while ((op = ops)) {
		int rc = drop_name(e, op->rel, op->dir);

		ops = op->next;
		if (rc < 0) {
			set_error(p, rc, "cannot remove", op->rel);
			op->next = left;
			left = op;
		} else {
			rft_info("persist: removed %s after an earlier failure",
				 op->rel);
			free(op);
		}
	}
	if (left) {
		leaf_lock(&p->lock, ENG_RANK_PERSIST);
		for (op = left; op->next; op = op->next)
			;
		op->next = p->ops;
		p->ops = left;
		leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	}
}

static void retry_ops_locked(struct eng *e)
{
	struct persist *p = e->persist;
	bool any;

	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	any = p->ops != NULL;
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	if (!any)
		return;
	eng_names_lock(e);
	retry_ops(e);
	eng_names_unlock(e);
}

static size_t pending_ops(struct persist *p)
{
	size_t n = 0;

	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	for (struct pending_op *op = p->ops; op; op = op->next)
		n++;
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	return n;
}

/* --- read-through ------------------------------------------------------- */

/*
 * Read one piece of a file from its persisted copy at @rel (relative to
 * the persist dir): @fill bytes at @off, then zeros up to @len, into @buf.
 * When @crc_len == @len the bytes are checked against @crc: -EIO on a
 * mismatch, never wrong bytes.  Takes no engine lock: a rename since @rel
 * was looked up may have put another file there, so the file opened must
 * be @id (when known), else -ENOENT and the caller looks the path up again.
 */
static int persist_read_piece(struct eng *e, const char *rel,
			      const struct copy_id *id, uint64_t off,
			      uint32_t fill, uint32_t len, uint32_t crc,
			      uint32_t crc_len, uint8_t *buf)
{
	struct persist *p = e->persist;
	uint32_t want = fill < len ? fill : len, got = 0;
	struct stat st;
	int fd, rc = 0;

	if (!p)
		return -EIO;
	fd = openat(p->dirfd, rel, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ENOENT : -EIO;
	/* Another file under that name now (a rename raced us): look again. */
	if (id && id->ino &&
	    (fstat(fd, &st) < 0 || st.st_ino != id->ino || st.st_dev != id->dev)) {
		close(fd);
		return -ENOENT;
	}
	while (got < want) {
		ssize_t n = pread(fd, buf + got, want - got, (off_t)(off + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* Shorter than the namespace says: not our bytes. */
			rft_err("persist: %s: short read at %llu: %s", rel,
				(unsigned long long)(off + got),
				n < 0 ? strerror(errno) : "end of file");
			rc = -EIO;
			break;
		}
		got += (uint32_t)n;
	}
	close(fd);
	if (rc < 0)
		return rc;
	memset(buf + want, 0, len - want);
	if (crc_len == len && ers_crc32c(0, buf, len) != crc) {
		rft_err("persist: %s: checksum mismatch in the piece at %llu",
			rel, (unsigned long long)off);
		return -EIO;
	}
	return 0;
}

/* --- write-back of one file -------------------------------------------- */

struct snap {
	uint64_t ino, file_id;
	mode_t mode;
	uid_t uid;
	gid_t gid;
	struct timespec mtime;
	struct file_snap fs;
	char rel[PATH_MAX];
	char copy_rel[PATH_MAX]; /* where pieces not in memory are read */
	struct copy_id copy_id;
};

/*
 * Does an fsync wait for @f's version in the persist dir, and may that
 * version be written back now, its writer open or not?  Alone, yes; in a
 * group, once this node's seal of it applied (so that the copy is the
 * group's version, gseal's).  f->lock held.
 */
static bool sync_wants(const struct eng *e, const struct file *f)
{
	return f->wb_sync > f->dur.persisted_data && f->wb_sync <= f->version &&
	       (!e->gops ||
		(f->dur.sealed == f->version && !file_draft(e, f)));
}

/*
 * Copy what write-back needs of @in and pin its chunks; 1 if there is
 * nothing to do.  @final (the last pass at unmount) takes files still open
 * for writing too, as they are now, and so does an fsync's (sync_wants)
 * while no copy is queued for the file (its bytes all in).
 */
static int take_snapshot(struct eng *e, struct inode *in, struct snap *s,
			 bool final)
{
	struct file *f = &in->file;
	int rc;

	ns_rdlock(e);
	rc = ns_path(&e->ns, in, s->rel, sizeof(s->rel));
	if (rc < 0) {
		ns_unlock(e);
		/* Unlinked meanwhile: nothing to keep.  Too long: a failure. */
		return rc == -ENOENT ? 1 : rc;
	}
	s->ino = in->ino;
	s->mode = in->mode;
	s->uid = in->uid;
	s->gid = in->gid;
	file_rdlock(f);
	if ((file_sealed(f) && !file_persisted(f)) || final ||
	    (sync_wants(e, f) &&
	     atomic_load_explicit(&f->pending, memory_order_acquire) == 0)) {
		if (persist_copy_path(e, in, s->copy_rel,
				      sizeof(s->copy_rel)) < 0)
			s->copy_rel[0] = '\0';
		s->mtime = in->mtime;
		s->file_id = f->id;
		s->copy_id = f->copy_id;
		rc = file_snap_take_locked(e, f, &s->fs);
	} else {
		rc = 1;
	}
	file_unlock(f);
	ns_unlock(e);
	return rc;
}

/* Write the data of @s to @fd and the piece CRCs to @crcs. */
static int write_data(struct eng *e, struct snap *s, int fd, uint32_t *crcs,
		      uint8_t *bounce)
{
	uint32_t npieces = (uint32_t)((s->fs.size + e->store.chunk_size - 1) >>
				      e->store.chunk_shift);
	int rc;

	for (uint32_t i = 0; i < npieces; i++) {
		uint32_t len = file_piece_len(e, s->fs.size, i);
		uint64_t off = (uint64_t)i << e->store.chunk_shift;
		const struct slot *sl = i < s->fs.nslots ? &s->fs.slots[i] : NULL;
		const uint8_t *data = NULL;
		uint32_t n = 0;

		if (sl && slot_in_ram(sl)) {
			data = store_ptr(&e->store, sl->chunk);
			n = sl->fill < len ? sl->fill : len;
		} else if (sl && sl->where == PIECE_PERSIST) {
			/* Not in memory: carry it over from the old copy. */
			rc = s->copy_rel[0]
				     ? persist_read_piece(e, s->copy_rel,
							  &s->copy_id, off,
							  sl->fill, len,
							  sl->crc, sl->crc_len,
							  bounce)
				     : -EIO;
			if (rc < 0)
				return rc;
			data = bounce;
			n = len;
		} else if (sl && sl->where == PIECE_SPILL) {
			/* Checked against its CRC there, as a read is. */
			rc = e->spill_src->read(e, s->file_id, i, sl->fill, len,
						sl->crc, sl->crc_len, bounce);
			if (rc < 0)
				return rc;
			data = bounce;
			n = len;
		} else if (sl && sl->where == PIECE_PEER) {
			/*
			 * Only the owner writes a file back, and it keeps the
			 * file whole: a piece on peers here is a bug.
			 */
			rft_err("write-back of a file with a piece on peers");
			return -EIO;
		}
		if (n > 0) {
			rc = write_all(fd, data, n, (off_t)off);
			if (rc < 0)
				return rc;
		}
		/* Holes stay holes: the temporary file is new, so sparse. */
		if (sl && sl->crc_len == len) {
			crcs[i] = sl->crc;
		} else {
			crcs[i] = n ? ers_crc32c(0, data, n) : 0;
			crcs[i] = crc_zeros(crcs[i], len - n);
		}
	}
	if (ftruncate(fd, (off_t)s->fs.size) < 0)
		return -errno;
	return 0;
}

static int write_sum(struct eng *e, struct snap *s, const char *tmp,
		     uint32_t *crcs, uint32_t npieces)
{
	struct persist *p = e->persist;
	struct sum_header h;
	uint32_t trailer;
	int fd, rc;

	memset(&h, 0, sizeof(h));
	memcpy(h.magic, SUM_MAGIC, sizeof(SUM_MAGIC));
	h.chunk_size = e->store.chunk_size;
	h.npieces = npieces;
	h.size = s->fs.size;
	h.mtime_sec = s->mtime.tv_sec;
	h.mtime_nsec = s->mtime.tv_nsec;
	h.file_id = s->file_id;
	trailer = ers_crc32c(0, &h, sizeof(h));
	trailer = ers_crc32c(trailer, crcs, (size_t)npieces * sizeof(*crcs));

	fd = openat(p->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
		    0644);
	if (fd < 0)
		return -errno;
	rc = write_all(fd, &h, sizeof(h), 0);
	if (rc == 0)
		rc = write_all(fd, crcs, (size_t)npieces * sizeof(*crcs),
			       sizeof(h));
	if (rc == 0)
		rc = write_all(fd, &trailer, sizeof(trailer),
			       (off_t)(sizeof(h) +
				       (size_t)npieces * sizeof(*crcs)));
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

/*
 * Make @to a hard link of @from in the persist dir (and the sidecars, for
 * files), replacing what was there; names lock held.
 */
static int link_name(struct eng *e, struct inode *in, const char *from,
		     const char *to)
{
	struct persist *p = e->persist;
	char tmp[64], sfrom[PATH_MAX + 16], sto[PATH_MAX + 16];
	struct stat a, b;
	int rc;

	/* Already one file: rename() would do nothing and leave tmp. */
	if (fstatat(p->dirfd, from, &a, AT_SYMLINK_NOFOLLOW) == 0 &&
	    fstatat(p->dirfd, to, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
	    a.st_ino == b.st_ino && a.st_dev == b.st_dev)
		return 0;
	rc = park_away_owner(e, to);
	if (rc == 0)
		rc = make_parents(p->dirfd, to);
	if (rc < 0)
		return rc;
	snprintf(tmp, sizeof(tmp), "%s/%llu.link", p->tmp,
		 (unsigned long long)in->ino);
	unlinkat(p->dirfd, tmp, 0);
	if (linkat(p->dirfd, from, p->dirfd, tmp, 0) < 0)
		return -errno;
	if (renameat(p->dirfd, tmp, p->dirfd, to) < 0) {
		rc = -errno;
		unlinkat(p->dirfd, tmp, 0);
		return rc;
	}
	if (S_ISREG(in->type) && sum_name(from, sfrom, sizeof(sfrom)) == 0 &&
	    sum_name(to, sto, sizeof(sto)) == 0) {
		unlinkat(p->dirfd, sto, 0);
		/* No sidecar to link is no error: it stays unverified. */
		if (linkat(p->dirfd, sfrom, p->dirfd, sto, 0) < 0 &&
		    errno != ENOENT)
			rft_dbg("persist: cannot link %s: %s", sto,
				strerror(errno));
	}
	return 0;
}

/* Give @in's other names (hard links) what is now at @rel. */
static int relink_aliases(struct eng *e, struct inode *in, const char *rel)
{
	char **paths = NULL;
	size_t n = 0, i = 0;
	int rc = 0;

	ns_rdlock(e);
	for (struct dentry *de = in->dentry ? in->dentry->lnext : NULL; de;
	     de = de->lnext)
		n++;
	if (n)
		paths = calloc(n, sizeof(*paths));
	for (struct dentry *de = in->dentry ? in->dentry->lnext : NULL;
	     de && paths; de = de->lnext) {
		char buf[PATH_MAX];

		if (ns_dentry_path(&e->ns, de, buf, sizeof(buf)) == 0)
			paths[i++] = strdup(buf);
	}
	ns_unlock(e);
	if (n && !paths)
		return -ENOMEM;
	for (size_t k = 0; k < i; k++) {
		int r = paths[k] ? link_name(e, in, rel, paths[k]) : -ENOMEM;

		if (r < 0 && !rc) {
			rc = r;
			set_error(e->persist, r, "cannot link",
				  paths[k] ? paths[k] : rel);
		}
		free(paths[k]);
	}
	free(paths);
	return rc;
}

/*
 * Remove the directories above @rel that are empty and have no name in
 * the namespace (left by a copy that was away there).  Mirror lock held.
 */
static void drop_empty_parents(struct eng *e, const char *rel)
{
	struct persist *p = e->persist;
	char dir[PATH_MAX];
	char *slash;

	if (snprintf(dir, sizeof(dir), "%s", rel) >= (int)sizeof(dir))
		return;
	while ((slash = strrchr(dir, '/'))) {
		bool named;

		*slash = '\0';
		ns_rdlock(e);
		named = ns_resolve(&e->ns, dir) != NULL;
		ns_unlock(e);
		if (named || unlinkat(p->dirfd, dir, AT_REMOVEDIR) < 0)
			return;
	}
}

/*
 * Rename the finished temporary @tmp to @rel, making its parents.  In a
 * group another node's rename may move a parent away in between (its
 * mirror), even between a copy and its sidecar: made again.  What then
 * sits under a name this node has not seen change yet, check_copy finds
 * once it has.
 */
static int rename_in(struct persist *p, const char *tmp, const char *rel)
{
	int rc;

	for (int t = 0;; t++) {
		rc = make_parents(p->dirfd, rel);
		if (rc == 0 && renameat(p->dirfd, tmp, p->dirfd, rel) < 0)
			rc = -errno;
		if (rc != -ENOENT || t == PARENT_TRIES - 1)
			return rc;
	}
}

/*
 * Move the finished temporaries into place under the file's current name:
 * data first, then its sums (a sidecar is trusted only beside the data it
 * describes, so a crash between the two loses checksums, never data).
 * 1 if the file was unlinked meanwhile.
 */
static int commit(struct eng *e, struct inode *in, const struct snap *s,
		  const char *tmp, const char *tmpsum, uint32_t node_ver)
{
	struct persist *p = e->persist;
	char rel[PATH_MAX], sum[PATH_MAX + 16], old[PATH_MAX];
	bool reg = S_ISREG(in->type), moved = false, away = false;
	uint64_t tell = 0;
	struct stat st;
	int rc;

	eng_names_lock(e);
	ns_rdlock(e);
	rc = ns_path(&e->ns, in, rel, sizeof(rel));
	old[0] = '\0';
	if (rc == 0 && reg) {
		file_rdlock(&in->file);
		away = in->file.copy == COPY_AWAY;
		if (away || in->file.copy == COPY_PARKED)
			persist_copy_path(e, in, old, sizeof(old));
		/*
		 * Renamed while written, and changed since: what was written
		 * is a version the new name never had.  Drop it; the change
		 * queued the file again.
		 */
		moved = s && strcmp(rel, s->rel) != 0 &&
			in->file.version != s->fs.version;
		file_unlock(&in->file);
	}
	ns_unlock(e);
	if (rc < 0 || moved) {
		/* Unlinked while written: drop the copy.  Too long: fail. */
		rc = rc == -ENOENT || moved ? 1 : rc;
		goto out;
	}
	/* The name may hold a copy another file still reads from. */
	if (strcmp(old, rel) != 0)
		rc = park_away_owner(e, rel);
	if (rc == 0)
		rc = sum_name(rel, sum, sizeof(sum));
	if (rc == 0 && fstatat(p->dirfd, tmp, &st, AT_SYMLINK_NOFOLLOW) < 0)
		rc = -errno;
	if (rc == 0)
		rc = rename_in(p, tmp, rel);
	if (rc == 0 && tmpsum && (rc = rename_in(p, tmpsum, sum)) < 0)
		unlinkat(p->dirfd, sum, 0); /* an older one must not stay */
	if (rc == 0)
		rc = fsync_parent(p->dirfd, rel);
	if (rc < 0) {
		set_error(p, rc, "cannot rename into place", rel);
		goto out;
	}
	if (reg) {
		/* The copy it read from until now is not needed any more. */
		if (old[0] && strcmp(old, rel) != 0) {
			if (remove_copy(p, old) < 0)
				queue_op(p, old, false);
			else if (away)
				drop_empty_parents(e, old);
		}
		set_copy(e, in, COPY_HOME, NULL);
		file_wrlock(&in->file);
		in->file.copy_id = (struct copy_id){ st.st_dev, st.st_ino };
		/*
		 * Persisted, still under the names lock: a rename in between
		 * would see a copy at home but older than the file's data,
		 * park it, and the file would then count as persisted with
		 * its copy parked (and deleted at unmount).
		 */
		if (s && file_snap_persisted_locked(&in->file, &s->fs) &&
		    e->gops && in->file.owner == e->node)
			tell = in->file.gseal;
		file_dur_unlock(e, in);
	} else {
		/*
		 * Likewise for symlinks and nodes, unless their metadata
		 * changed since it was copied (then it goes again).
		 */
		ns_wrlock(e);
		in->node_persisted = in->node_version == node_ver;
		ns_unlock(e);
	}
	rc = relink_aliases(e, in, rel);
out:
	eng_names_unlock(e);
	/* The other nodes may read it from the persist dir now. */
	if (tell)
		e->gops->persisted(e->gctx, in, tell);
	return rc;
}

static int persist_file(struct eng *e, struct inode *in, uint8_t *bounce,
			bool final)
{
	struct persist *p = e->persist;
	char tmp[64], tmpsum[80];
	uint32_t *crcs = NULL, npieces;
	struct snap s;
	int fd = -1, rc;

	memset(&s, 0, sizeof(s));
	/* An fsync's file may be open for writing: its copies in first. */
	file_wait_writes(e, &in->file);
	rc = take_snapshot(e, in, &s, final);
	if (rc < 0)
		set_error(p, rc, "cannot write back", s.rel[0] ? s.rel : "a file");
	if (rc != 0)
		return rc < 0 ? rc : 0;
	npieces = (uint32_t)((s.fs.size + e->store.chunk_size - 1) >>
			     e->store.chunk_shift);
	snprintf(tmp, sizeof(tmp), "%s/%llu.%llu", p->tmp,
		 (unsigned long long)s.ino, (unsigned long long)s.fs.version);
	snprintf(tmpsum, sizeof(tmpsum), "%s.sum", tmp);
	crcs = malloc((size_t)(npieces ? npieces : 1) * sizeof(*crcs));
	if (!crcs) {
		rc = -ENOMEM;
		goto out;
	}

	fd = openat(p->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
		    0600);
	if (fd < 0) {
		rc = -errno;
		set_error(p, rc, "cannot create a temporary for", s.rel);
		goto out;
	}
	rc = write_data(e, &s, fd, crcs, bounce);
	if (rc == 0) {
		struct timespec times[2] = { s.mtime, s.mtime };

		/*
		 * Ownership is kept where we may set it (root, NFS
		 * no_root_squash); before the mode, since a chown clears
		 * set-ID bits.
		 */
		if (geteuid() == 0 && fchown(fd, s.uid, s.gid) < 0)
			rft_dbg("persist: cannot chown %s: %s", s.rel,
				strerror(errno));
		if (fchmod(fd, s.mode & 07777) < 0 ||
		    futimens(fd, times) < 0)
			rc = -errno;
	}
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	fd = -1;
	if (rc < 0) {
		set_error(p, rc, "cannot write back", s.rel);
		goto out;
	}
	rc = write_sum(e, &s, tmpsum, crcs, npieces);
	if (rc < 0) {
		set_error(p, rc, "cannot write the checksums of", s.rel);
		goto out;
	}
	rc = commit(e, in, &s, tmp, tmpsum, 0);
	if (rc != 0)
		goto out;

	add_progress(p, 1, s.fs.size);
	rft_dbg("persist: wrote back %s (%llu bytes)", s.rel,
		(unsigned long long)s.fs.size);
out:
	if (rc != 0) {
		unlinkat(p->dirfd, tmp, 0);
		unlinkat(p->dirfd, tmpsum, 0);
	}
	file_snap_drop(e, &s.fs);
	free(crcs);
	return rc < 0 ? rc : 0;
}

/* Mode, owner and times of @rel as the namespace has them (chown first). */
static int set_meta(struct persist *p, const char *rel, mode_t mode, uid_t uid,
		    gid_t gid, const struct timespec *times)
{
	if (geteuid() == 0 &&
	    fchownat(p->dirfd, rel, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!S_ISLNK(mode) && fchmodat(p->dirfd, rel, mode & 07777, 0) < 0)
		return -errno;
	if (utimensat(p->dirfd, rel, times, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return 0;
}

/*
 * A directory's mode, owner and times, empty or not (the persist dir's
 * own times move as entries come and go: they are set when its metadata
 * changes, and are the persist dir's otherwise).
 */
static int persist_dir_meta(struct eng *e, struct inode *in)
{
	struct persist *p = e->persist;
	struct timespec times[2];
	char rel[PATH_MAX];
	uint32_t ver;
	mode_t mode;
	uid_t uid;
	gid_t gid;
	int rc;

	/* The path is taken under the names lock: a rename may not slip in. */
	eng_names_lock(e);
	ns_rdlock(e);
	rc = ns_path(&e->ns, in, rel, sizeof(rel));
	ver = in->node_version;
	mode = in->mode;
	uid = in->uid;
	gid = in->gid;
	times[0] = in->atime;
	times[1] = in->mtime;
	ns_unlock(e);
	if (rc == -ENOENT) {
		eng_names_unlock(e);
		return 0;
	}
	/*
	 * A rename by another node may move it away in between (see
	 * commit()): again.  What is made then under the old name goes once
	 * this node has seen the rename (check_later).
	 */
	for (int t = 0; rc == 0; t++) {
		rc = make_parents(p->dirfd, rel);
		if (rc == 0 && mkdirat(p->dirfd, rel, 0700) < 0) {
			struct stat st;

			/*
			 * There already: as a directory.  A file put in its
			 * way (by hand, or left over) is not written back
			 * over, and the directory is not persisted while it
			 * is there.
			 */
			if (errno != EEXIST)
				rc = -errno;
			else if (fstatat(p->dirfd, rel, &st,
					 AT_SYMLINK_NOFOLLOW) < 0)
				rc = -errno;
			else if (!S_ISDIR(st.st_mode))
				rc = -ENOTDIR;
		}
		if (rc == 0)
			rc = set_meta(p, rel, mode, uid, gid, times);
		if (rc != -ENOENT || t == PARENT_TRIES - 1)
			break;
		rc = 0;
	}
	if (rc == 0) {
		/* A chmod meanwhile: it goes again (writeback_pass sees it). */
		ns_wrlock(e);
		in->node_persisted = in->node_version == ver;
		ns_unlock(e);
	}
	eng_names_unlock(e);
	if (rc < 0) {
		set_error(p, rc, "cannot write back directory", rel);
		return rc;
	}
	add_progress(p, 1, 0);
	return 0;
}

/* Write back a symlink, FIFO, socket or device node, under all its names. */
static int persist_node(struct eng *e, struct inode *in)
{
	struct persist *p = e->persist;
	char tmp[64], rel[PATH_MAX], target[PATH_MAX];
	struct timespec times[2];
	mode_t mode;
	uid_t uid;
	gid_t gid;
	dev_t rdev;
	uint32_t ver;
	int rc;

	ns_rdlock(e);
	rc = ns_path(&e->ns, in, rel, sizeof(rel));
	if (rc == 0 && S_ISLNK(in->type))
		snprintf(target, sizeof(target), "%s", in->target);
	ver = in->node_version;
	mode = in->mode;
	uid = in->uid;
	gid = in->gid;
	rdev = in->rdev;
	times[0] = in->atime;
	times[1] = in->mtime;
	ns_unlock(e);
	if (rc == -ENOENT)
		return 0; /* unlinked meanwhile */
	if (rc < 0) {
		set_error(p, rc, "cannot write back", "a node");
		return rc;
	}
	snprintf(tmp, sizeof(tmp), "%s/%llu.node", p->tmp,
		 (unsigned long long)in->ino);
	unlinkat(p->dirfd, tmp, 0);
	if (S_ISLNK(mode))
		rc = symlinkat(target, p->dirfd, tmp);
	else
		rc = mknodat(p->dirfd, tmp, mode, rdev);
	rc = rc < 0 ? -errno : set_meta(p, tmp, mode, uid, gid, times);
	if (rc < 0) {
		set_error(p, rc, "cannot write back", rel);
		unlinkat(p->dirfd, tmp, 0);
		return rc;
	}
	rc = commit(e, in, NULL, tmp, NULL, ver);
	if (rc != 0) {
		unlinkat(p->dirfd, tmp, 0);
		return rc < 0 ? rc : 0;
	}
	add_progress(p, 1, 0);
	return 0;
}

/* --- choosing what to write back --------------------------------------- */

/* Does --persist-every select the checkpoint @in belongs to? */
static bool policy_selects(struct eng *e, struct inode *in)
{
	struct inode *ck = ns_checkpoint_of(&e->ns, in);

	/* Files beside the checkpoints ("latest") are small and vital. */
	if (!ck)
		return true;
	return e->cfg.persist_every > 0 &&
	       ck->ckpt_seq % e->cfg.persist_every == 0;
}

/* Which files a write-back pass takes. */
struct wb_pass {
	bool all;	/* every file, not only what --persist-every selects */
	bool now;	/* also files waiting out a backoff (flush, unmount) */
	bool final;	/* the last pass at unmount: open files too */
};

enum due { DUE_NOTHING, DUE_NOW, DUE_LATER };

/*
 * Is @in to be written back by a pass like @ps: now, later (a backoff, or
 * --persist-every does not select it yet), or not at all?  ns->lock held.
 */
static enum due writeback_due(struct eng *e, struct inode *in,
			      const struct wb_pass *ps, uint64_t *bytes)
{
	bool need, wait = false, sync = false, synced = false;

	*bytes = 0;
	if (!in->parent || in->nlink == 0)
		return DUE_NOTHING;
	if (!S_ISREG(in->type)) {
		need = !in->node_persisted;
	} else {
		struct file *f = &in->file;

		file_rdlock(f);
		/*
		 * An fsync waits for it: now, whatever --persist-every and a
		 * backoff say; in a group a seal not yet applied here comes
		 * first, so it waits (sync_wants).
		 */
		sync = sync_wants(e, f);
		synced = f->wb_sync > f->dur.persisted_data &&
			 f->owner == e->node;
		/* In a group each node writes back the files it owns. */
		need = !file_persisted(f) &&
		       (file_sealed(f) || ps->final || sync) &&
		       f->owner == e->node;
		wait = !ps->now && !sync && f->wb_failures &&
		       rft_now_ms() < f->wb_next_ms;
		*bytes = f->size;
		file_unlock(f);
	}
	if (!need)
		return synced ? DUE_LATER : DUE_NOTHING;
	if (wait || !(ps->all || sync || policy_selects(e, in)))
		return DUE_LATER;
	return DUE_NOW;
}

static bool wants_writeback(struct eng *e, struct inode *in,
			    const struct wb_pass *ps, uint64_t *bytes)
{
	return writeback_due(e, in, ps, bytes) == DUE_NOW;
}

struct collect {
	struct eng *e;
	struct wb_pass ps;
	struct inode **v;
	size_t n, cap;
	uint64_t bytes;
	int rc;
};

static int collect_one(void *ctx, struct inode *in)
{
	struct collect *c = ctx;
	uint64_t bytes = 0;

	if (!wants_writeback(c->e, in, &c->ps, &bytes))
		return 0;
	c->bytes += bytes;
	if (!c->v) {
		c->n++;
		return 0;
	}
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		struct inode **v = realloc(c->v, cap * sizeof(*v));

		if (!v) {
			c->rc = -ENOMEM;
			return 1;
		}
		c->v = v;
		c->cap = cap;
	}
	in->holds++;
	c->v[c->n++] = in;
	return 0;
}

/* Note the outcome of one file's write-back: failures back off, alone. */
static void note_outcome(struct eng *e, struct inode *in, int rc)
{
	struct file *f = &in->file;
	uint64_t delay;

	if (!S_ISREG(in->type))
		return;
	file_wrlock(f);
	f->wb_error = rc;
	if (rc == 0) {
		f->wb_failures = 0;
	} else {
		f->wb_failures++;
		delay = (uint64_t)e->cfg.retry_ms
			<< (f->wb_failures < 10 ? f->wb_failures - 1 : 9);
		f->wb_next_ms =
		    rft_now_ms() +
		    (delay < BACKOFF_MAX_MS ? delay : BACKOFF_MAX_MS);
	}
	file_unlock(f);
	if (rc < 0) {
		struct persist *p = e->persist;

		leaf_lock(&p->lock, ENG_RANK_PERSIST);
		for (struct persist_sync *s = p->syncs; s; s = s->next)
			if (s->in == in)
				s->rc = rc;
		leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	}
}

/* Count what a pass like @ps would write back of the queue now. */
static void count_queue(struct eng *e, struct collect *c)
{
	struct persist *p = e->persist;
	struct inode **v;
	size_t n = 0;

	/* ns->lock (read) keeps them all alive: freeing needs it for write. */
	ns_rdlock(e);
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	v = malloc((p->wb_len ? p->wb_len : 1) * sizeof(*v));
	for (struct inode *in = p->wb_head; v && in; in = in->wb_next)
		v[n++] = in;
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	for (size_t i = 0; i < n; i++) {
		uint64_t bytes;

		if (writeback_due(e, v[i], &c->ps, &bytes) == DUE_NOW) {
			c->n++;
			c->bytes += bytes;
		}
	}
	ns_unlock(e);
	if (!v)
		c->rc = -ENOMEM;
	free(v);
}

/*
 * Take the whole write-back queue, each inode held, into @c; what is not
 * due now goes back in, what needs nothing any more is dropped.
 */
static void take_queue(struct eng *e, struct collect *c)
{
	struct persist *p = e->persist;
	struct inode **all;
	size_t n = 0;

	ns_wrlock(e);
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	all = malloc((p->wb_len ? p->wb_len : 1) * sizeof(*all));
	while (all && p->wb_head) {
		struct inode *in = p->wb_head;

		unqueue_locked(p, in);
		in->holds++;
		all[n++] = in;
	}
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	ns_unlock(e);
	if (!all) {
		c->rc = -ENOMEM;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct inode *in = all[i];
		uint64_t bytes;
		enum due d;

		ns_rdlock(e);
		d = writeback_due(e, in, &c->ps, &bytes);
		ns_unlock(e);
		if (d == DUE_NOW && c->n < c->cap) {
			c->v[c->n++] = in; /* keeps the hold */
			c->bytes += bytes;
			continue;
		}
		if (d != DUE_NOTHING)
			queue_inode(p, in, false); /* its time comes */
		ns_unhold(e, in);
	}
	free(all);
}

/*
 * Call @fn for every name below directory @dir, with the path it had
 * under @from (names whose path is too long are skipped), a directory's
 * after those below it.  ns->lock held.
 */
typedef void (*below_fn)(struct inode *in, const struct dentry *de,
			 const char *rel, void *ctx);

static void walk_below(struct inode *dir, const char *from, below_fn fn,
		       void *ctx)
{
	for (struct dentry *de = dir->dir.first; de; de = de->next) {
		char rel[PATH_MAX];

		if (snprintf(rel, sizeof(rel), "%s/%s", from, de->name) >=
		    (int)sizeof(rel))
			continue;
		if (S_ISDIR(de->inode->type))
			walk_below(de->inode, rel, fn, ctx);
		fn(de->inode, de, rel, ctx);
	}
}

/* --- copies left behind by a rename (struct copy_check) ------------------ */

static bool is_copy(const struct stat *st, const struct copy_id *id)
{
	return st->st_ino == id->ino && st->st_dev == id->dev;
}

/* @rel lies below the directory @dir (of length @len). */
static bool below(const char *rel, const char *dir, size_t len)
{
	return !strncmp(rel, dir, len) && rel[len] == '/';
}

/*
 * The directory @a moved to @b in the persist dir (and @b to @a, for an
 * exchange): the copies that sat away below it (old versions of names
 * there, read by files replaced while open until the names' new files are
 * written back) moved with it.  @check: another node moved it; a copy
 * follows only if it is found there.  Mirror lock held.
 */
static void away_follows(struct eng *e, const char *a, const char *b,
			 bool exchange, bool check)
{
	struct persist *p = e->persist;
	size_t alen = strlen(a), blen = strlen(b), n = 0;
	struct inode **v = NULL;
	bool nomem;

	ns_wrlock(e); /* for the holds */
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	if (p->naway)
		v = calloc(p->naway, sizeof(*v));
	for (size_t i = 0; v && i < p->naway; i++) {
		const char *rel = p->away[i]->file.away_rel;

		if (below(rel, a, alen) || (exchange && below(rel, b, blen))) {
			p->away[i]->holds++;
			v[n++] = p->away[i];
		}
	}
	nomem = p->naway && !v;
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	ns_unlock(e);
	if (nomem)
		set_error(p, -ENOMEM, "cannot follow the copies below", a);
	for (size_t i = 0; i < n; i++) {
		const char *old = v[i]->file.away_rel;
		bool from_a = below(old, a, alen);
		char rel[PATH_MAX];
		struct stat st;

		if (snprintf(rel, sizeof(rel), "%s%s", from_a ? b : a,
			     old + (from_a ? alen : blen)) < (int)sizeof(rel) &&
		    (!check ||
		     (fstatat(p->dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		      is_copy(&st, &v[i]->file.copy_id))))
			set_copy(e, v[i], COPY_AWAY, rel);
		ns_unhold(e, v[i]);
	}
	free(v);
}

/* The file id the sidecar @sum records; 0 if none can be read. */
static uint64_t sum_file_id(struct persist *p, const char *sum)
{
	struct sum_header h;
	int fd = openat(p->dirfd, sum, O_RDONLY | O_CLOEXEC);
	bool ok;

	if (fd < 0)
		return 0;
	ok = pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
	     memcmp(h.magic, SUM_MAGIC, sizeof(SUM_MAGIC)) == 0;
	close(fd);
	return ok ? h.file_id : 0;
}

/*
 * @in's sidecar left at @from without the data it describes: another
 * node's mirror moved the data away (or removed it) between commit()'s
 * two renames, and the sidecar came in after.  It goes along to @to, where
 * @in's copy now is, unless @to has one (@to NULL: it goes), and the
 * directories it kept from going are removed.  Another file's sidecar
 * (by the file id it records) is left alone.  Mirror lock held.
 */
static void stray_sum(struct eng *e, struct inode *in, const char *from,
		      const char *to)
{
	struct persist *p = e->persist;
	char sfrom[PATH_MAX + 16], sto[PATH_MAX + 16];
	uint64_t id;

	file_rdlock(&in->file);
	id = in->file.id;
	file_unlock(&in->file);
	if (sum_name(from, sfrom, sizeof(sfrom)) < 0 ||
	    sum_file_id(p, sfrom) != id)
		return;
	if (to && sum_name(to, sto, sizeof(sto)) == 0 &&
	    faccessat(p->dirfd, sto, F_OK, AT_SYMLINK_NOFOLLOW) < 0 &&
	    renameat(p->dirfd, sfrom, p->dirfd, sto) == 0) {
		rft_warn("persist: the sums of %s were left under its old "
			 "name %s by another node's rename; moved along", to,
			 from);
	} else if (unlinkat(p->dirfd, sfrom, 0) < 0) {
		if (errno != ENOENT)
			queue_op(p, sfrom, false);
		return;
	} else {
		rft_warn("persist: the sums of %s were left behind by another "
			 "node's %s; removed", from, to ? "rename" : "removal");
	}
	drop_empty_parents(e, from);
}

/*
 * Where is @in's copy, now that its name is no longer @from?  (A regular
 * file; a directory is below.)  Under its name: done.  Still under @from:
 * it was written there after the rename's mirror, so it is read from
 * there and written again under the name (the write-back removes it from
 * @from).  The file has no name any more (an unlink, here or by another
 * node, overtook the write-back): the copy under @from goes, or stays
 * for the readers that still have the file open here, read from there
 * and removed when the file is freed.  Nothing at @from: the renamer's
 * mirror moved it along, or a later rename did, and that rename's own
 * check looks for it.  The sidecar may be left behind all the same
 * (stray_sum).  Mirror lock held.
 */
static void check_copy(struct eng *e, struct inode *in, const char *from)
{
	struct persist *p = e->persist;
	char rel[PATH_MAX];
	struct copy_id id;
	struct stat st;
	bool home, open;
	int rc;

	ns_rdlock(e);
	rc = ns_path(&e->ns, in, rel, sizeof(rel));
	home = S_ISREG(in->type) && in->file.copy == COPY_HOME;
	open = in->opens > 0;
	ns_unlock(e);
	/*
	 * A directory made again under @from (its metadata written back
	 * after the mirror): removed when empty, with empty parents.  One
	 * that still holds copies left behind goes with the last of them.
	 */
	if (S_ISDIR(in->type)) {
		/* Copies that sat away below it, carried along by the mirror. */
		if (rc == 0 && strcmp(rel, from) != 0)
			away_follows(e, from, rel, false, true);
		if (drop_name(e, from, true) == 0)
			drop_empty_parents(e, from);
		return;
	}
	/* copy and copy_id change only under the names lock, held here. */
	id = in->file.copy_id;
	if (!home || !id.ino || (rc < 0 && rc != -ENOENT) ||
	    (rc == 0 && strcmp(rel, from) == 0))
		return;
	if (rc == 0 && fstatat(p->dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    is_copy(&st, &id)) {
		stray_sum(e, in, from, rel);
		return;
	}
	if (fstatat(p->dirfd, from, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
	    !is_copy(&st, &id)) {
		if (rc == -ENOENT) {
			stray_sum(e, in, from, NULL);
			return;
		}
		/*
		 * At neither name: a later rename's mirror may still move it
		 * to the name, or another file's copy went over it (its
		 * write-back, after a check like this one, took the name).
		 * Written again: the first costs one copy, the second would
		 * lose the file's only copy.
		 */
		rft_warn("persist: the copy of %s is under neither that name "
			 "nor its old name %s; writing it again", rel, from);
		set_copy(e, in, COPY_NONE, NULL);
		return;
	}
	if (rc == 0) {
		rft_warn("persist: %s was written back under its old name %s, "
			 "after another node's rename; writing it again", rel,
			 from);
		set_copy(e, in, COPY_AWAY, from);
		return;
	}
	if (open) {
		set_copy(e, in, COPY_AWAY, from);
		return;
	}
	rft_warn("persist: %s was written back after another node removed "
		 "it; removing it", from);
	if (remove_copy(p, from) < 0)
		queue_op(p, from, false);
	else
		drop_empty_parents(e, from);
	set_copy(e, in, COPY_NONE, NULL);
}

static void add_check(struct eng *e, struct copy_check **list,
		      struct inode *in, const char *from, uint64_t due)
{
	size_t n = strlen(from) + 1;
	struct copy_check *c = malloc(sizeof(*c) + n);

	if (!c) {
		rft_err("persist: no memory to check the copy of %s", from);
		return;
	}
	in->holds++;
	c->in = in;
	c->due_ms = due;
	memcpy(c->from, from, n);
	c->next = *list;
	*list = c;
}

struct check_walk {
	struct eng *e;
	uint64_t due;
	struct copy_check **list;
};

/* What below a renamed directory to check (walk_below). */
static void check_below(struct inode *in, const struct dentry *de,
			const char *rel, void *ctx)
{
	struct check_walk *w = ctx;

	if (S_ISDIR(in->type) ||
	    (S_ISREG(in->type) && in->dentry == de &&
	     in->file.owner == w->e->node && in->file.copy == COPY_HOME))
		add_check(w->e, w->list, in, rel, w->due);
}

/*
 * Another node renamed @in (and what is below it) from @from, or removed
 * its last name @from: check the copies of the files this node owns later.
 * Mirror lock held.
 */
static void check_later(struct eng *e, struct inode *in, const char *from,
			uint64_t due)
{
	struct persist *p = e->persist;
	struct copy_check *list = NULL, *last;

	ns_wrlock(e); /* for the holds */
	if (S_ISDIR(in->type)) {
		struct check_walk w = { e, due, &list };

		walk_below(in, from, check_below, &w);
		add_check(e, &list, in, from, due);
	} else if (S_ISREG(in->type) && in->file.owner == e->node &&
		   in->file.copy == COPY_HOME) {
		add_check(e, &list, in, from, due);
	}
	ns_unlock(e);
	if (!list)
		return;
	for (last = list; last->next; last = last->next)
		;
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	last->next = p->checks;
	p->checks = list;
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
}

/* Forget the checks not run yet (with @e, giving their holds back). */
static void drop_checks(struct persist *p, struct eng *e)
{
	struct copy_check *c;

	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	c = p->checks;
	p->checks = NULL;
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	while (c) {
		struct copy_check *next = c->next;

		if (e)
			ns_unhold(e, c->in);
		free(c);
		c = next;
	}
}

/* Run the checks that are due (@all: every one, as at unmount). */
static void run_checks(struct eng *e, bool all)
{
	struct persist *p = e->persist;
	struct copy_check *due = NULL, **pp, *c;
	uint64_t now = rft_now_ms();

	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	for (pp = &p->checks; (c = *pp);) {
		if (all || c->due_ms <= now) {
			*pp = c->next;
			c->next = due;
			due = c;
		} else {
			pp = &c->next;
		}
	}
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	if (!due)
		return;
	eng_names_lock(e);
	for (c = due; c; c = c->next)
		check_copy(e, c->in, c->from);
	eng_names_unlock(e);
	while ((c = due)) {
		due = c->next;
		ns_unhold(e, c->in);
		free(c);
	}
}

/*
 * Write back what @ps selects.  Each file fails alone: the others are
 * still written, and the failed one is retried later with backoff.
 * Returns the first error (0 if none) and counts failures in *@failed;
 * with @names, each file that failed is logged by name.  The last pass at
 * unmount walks the namespace for files still open for writing; the
 * others take the queue.
 */
static int writeback_pass(struct eng *e, const struct wb_pass *ps,
			  uint8_t *bounce, unsigned *failed, bool names)
{
	struct persist *p = e->persist;
	struct collect c = { .e = e, .ps = *ps };
	int first = 0;

	*failed = 0;
	retry_ops_locked(e);
	run_checks(e, ps->final);
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	c.cap = p->wb_len + 64;
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	c.v = malloc(c.cap * sizeof(*c.v));
	if (!c.v)
		return -ENOMEM;
	if (ps->final) {
		ns_wrlock(e);
		ns_walk(&e->ns, collect_one, &c);
		ns_unlock(e);
	} else {
		take_queue(e, &c);
	}

	for (size_t i = 0; i < c.n; i++) {
		struct inode *in = c.v[i];
		int rc = S_ISREG(in->type)   ? persist_file(e, in, bounce,
								ps->final)
			 : S_ISDIR(in->type) ? persist_dir_meta(e, in)
					     : persist_node(e, in);

		note_outcome(e, in, rc);
		if (rc == 0 && !ps->final) {
			uint64_t bytes;
			enum due d;

			/* Changed while it was written: once more. */
			ns_rdlock(e);
			d = writeback_due(e, in, ps, &bytes);
			ns_unlock(e);
			if (d != DUE_NOTHING)
				queue_inode(p, in, d == DUE_NOW);
		}
		if (rc < 0) {
			char rel[PATH_MAX];

			queue_inode(p, in, false); /* after its backoff */
			(*failed)++;
			if (!first)
				first = rc;
			ns_rdlock(e);
			if (ns_path(&e->ns, in, rel, sizeof(rel)) < 0)
				snprintf(rel, sizeof(rel), "inode %llu",
					 (unsigned long long)in->ino);
			ns_unlock(e);
			if (names)
				rft_err("not written back: %s: %s", rel,
					strerror(-rc));
		}
		ns_unhold(e, in);
	}
	free(c.v);
	if (c.rc < 0 && !first)
		first = c.rc;
	return first;
}

/* --- fsync under --sync persist ----------------------------------------- */

int persist_sync(struct eng *e, struct inode *in, uint64_t version,
		 struct eng_call *c)
{
	struct persist *p = e->persist;
	struct file *f = &in->file;
	struct persist_sync *s;
	bool lost, done;

	if (!p)
		return 0;
	file_wrlock(f);
	lost = file_lost(f);
	done = f->dur.persisted_data >= version;
	if (!lost && !done && f->wb_sync < version)
		f->wb_sync = version;
	file_unlock(f);
	if (lost || done)
		return lost ? -EIO : 0;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->call = c;
	s->in = in;
	s->version = version;
	s->until_ms = rft_now_ms() + SYNC_MS;
	eng_hold(e, in);
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	if (p->stopping) {
		leaf_unlock(&p->lock, ENG_RANK_PERSIST);
		ns_unhold(e, in);
		free(s);
		return -EIO;
	}
	s->pass = p->passes;
	s->next = p->syncs;
	p->syncs = s;
	queue_locked(p, in);
	p->kicked = true;
	pthread_cond_signal(&p->wake);
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	return ENG_LATER;
}

/*
 * Finish the fsyncs whose file is written back, or cannot be (above);
 * @stopping: all of them, the rest with EIO.  The worker's (or, stopped,
 * persist_stop's): no lock held.
 */
static void finish_syncs(struct eng *e, bool stopping)
{
	struct persist *p = e->persist;
	struct persist_sync *all, *keep = NULL;
	uint64_t passes, now = rft_now_ms();

	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	all = p->syncs;
	p->syncs = NULL;
	passes = p->passes;
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	while (all) {
		struct persist_sync *s = all;
		struct file *f = &s->in->file;
		char name[PATH_MAX], why[96];
		bool done, lost;

		all = s->next;
		file_rdlock(f);
		done = f->dur.persisted_data >= s->version;
		lost = file_lost(f);
		file_unlock(f);
		why[0] = '\0';
		if (done)
			;
		else if (lost)
			snprintf(why, sizeof(why), "the file is lost");
		else if (s->rc < 0)
			snprintf(why, sizeof(why), "its write-back failed (%s)",
				 strerror(-s->rc));
		else if (stopping)
			snprintf(why, sizeof(why), "reftfsd is stopping");
		else if (passes > s->pass && now >= s->until_ms)
			snprintf(why, sizeof(why),
				 "not written back within %d s", SYNC_MS / 1000);
		else {
			s->next = keep;
			keep = s;
			continue;
		}
		if (!done) {
			eng_inode_name(e, s->in, name, sizeof(name));
			rft_warn("fsync of %s: %s; EIO (the data is kept here "
				 "as it is)", name, why);
		}
		s->call->done(s->call, done ? 0 : -EIO);
		ns_unhold(e, s->in);
		free(s);
	}
	if (!keep)
		return;
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	while (keep) {
		struct persist_sync *s = keep;

		keep = s->next;
		s->next = p->syncs;
		p->syncs = s;
	}
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
}

/* --- the worker --------------------------------------------------------- */

static void *worker(void *arg)
{
	struct eng *e = arg;
	struct persist *p = e->persist;
	uint8_t *bounce = malloc(e->store.chunk_size);
	sigset_t sigs;

	/* Signals are for the FUSE loop, which ends the session on them. */
	sigfillset(&sigs);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	while (!p->stopping) {
		uint64_t ticket = p->flush_req;
		bool all = ticket > p->flush_done;
		struct wb_pass ps = { .all = all, .now = all };
		unsigned failed = 0;
		int rc;

		p->kicked = false;
		p->passes++;
		leaf_unlock(&p->lock, ENG_RANK_PERSIST);

		evict_run(e, false);
		rc = bounce ? writeback_pass(e, &ps, bounce, &failed, false)
			    : -ENOMEM;
		finish_syncs(e, false);

		leaf_lock(&p->lock, ENG_RANK_PERSIST);
		if (all) {
			/* Every ticket asked for before this pass began. */
			for (uint64_t t = p->flush_done + 1; t <= ticket; t++)
				if (p->fl[t % FLUSH_TICKETS].ticket == t)
					p->fl[t % FLUSH_TICKETS].error = rc;
			p->flush_done = ticket;
		}
		if (!p->kicked && !p->stopping &&
		    p->flush_req == p->flush_done) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			/* Retry failures, and look at memory, now and then. */
			ts.tv_sec += rc ? e->cfg.retry_ms / 1000 : 1;
			ts.tv_nsec += rc ? (long)(e->cfg.retry_ms % 1000) * 1000000L
					 : 0;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&p->wake, &p->lock, &ts);
		}
	}
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	free(bounce);
	return NULL;
}

static void persist_kick(struct eng *e)
{
	struct persist *p = e->persist;

	if (!p)
		return;
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	p->kicked = true;
	pthread_cond_signal(&p->wake);
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
}

/* --- flush tickets ------------------------------------------------------ */

static int count_open_writers(void *ctx, struct inode *in)
{
	unsigned *n = ctx;

	if (S_ISREG(in->type) && in->nlink > 0) {
		file_rdlock(&in->file);
		*n += in->file.writers > 0;
		file_unlock(&in->file);
	}
	return 0;
}

int persist_flush_request(struct eng *e, uint64_t *ticket)
{
	struct persist *p = e->persist;
	struct collect c = { .e = e, .ps = { .all = true, .now = true } };
	struct flush_ticket *fl;

	if (!p)
		return -ENOTSUP;
	/*
	 * A file is sealed by its last RELEASE, which the kernel sends after
	 * close(2) has returned.  "close; reftfs-admin flush" must include
	 * it: give releases in flight a moment.  Files still open for writing
	 * after that are not part of this flush.
	 */
	for (int i = 0; i < FLUSH_GRACE_MS / 10; i++) {
		unsigned open_writers = 0;

		ns_rdlock(e);
		ns_walk(&e->ns, count_open_writers, &open_writers);
		ns_unlock(e);
		if (open_writers == 0)
			break;
		usleep(10 * 1000);
	}
	count_queue(e, &c);

	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	*ticket = ++p->flush_req;
	fl = &p->fl[*ticket % FLUSH_TICKETS];
	*fl = (struct flush_ticket){
		.ticket = *ticket,
		.files_total = c.n,
		.bytes_total = c.bytes,
		.files_base = p->files_written,
		.bytes_base = p->bytes_written,
	};
	pthread_cond_signal(&p->wake);
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	return 0;
}

int persist_flush_progress(struct eng *e, uint64_t ticket,
			   struct eng_flush_progress *fp)
{
	struct persist *p = e->persist;
	const struct flush_ticket *fl;
	uint64_t f, b;

	if (!p)
		return -ENOTSUP;
	memset(fp, 0, sizeof(*fp));
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	fl = &p->fl[ticket % FLUSH_TICKETS];
	if (ticket == 0 || ticket > p->flush_req) {
		leaf_unlock(&p->lock, ENG_RANK_PERSIST);
		return -EINVAL;
	}
	/* Each ticket keeps its own outcome, until FLUSH_TICKETS newer. */
	if (fl->ticket != ticket) {
		leaf_unlock(&p->lock, ENG_RANK_PERSIST);
		return -ESTALE;
	}
	fp->finished = p->flush_done >= ticket;
	f = p->files_written - fl->files_base;
	b = p->bytes_written - fl->bytes_base;
	fp->files_total = fl->files_total;
	fp->bytes_total = fl->bytes_total;
	fp->files_done = f < fp->files_total ? f : fp->files_total;
	fp->bytes_done = b < fp->bytes_total ? b : fp->bytes_total;
	if (fp->finished) {
		fp->error = fl->error;
		if (!fp->error) {
			fp->files_done = fp->files_total;
			fp->bytes_done = fp->bytes_total;
		}
	}
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	return 0;
}

/* --- stats -------------------------------------------------------------- */

void persist_get_stats(struct eng *e, struct eng_stats *s)
{
	struct persist *p = e->persist;
	struct collect c = { .e = e, .ps = { .now = true } };

	s->persist_enabled = p != NULL;
	if (!p)
		return;
	count_queue(e, &c);
	s->persist_pending_files = c.n;
	s->persist_pending_bytes = c.bytes;

	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	s->persist_healthy = p->healthy;
	s->persist_files = p->files_written;
	s->persist_bytes = p->bytes_written;
	s->persist_errors = p->errors;
	snprintf(s->persist_last_error, sizeof(s->persist_last_error), "%s",
		 p->last_error);
	s->persist_last_error_time = p->last_error_time;
	s->persist_last_ok_time = p->last_ok_time;
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
}

/* --- mirroring of name changes ----------------------------------------- */


/* Remove @rel from the persist dir now, or later if that fails. */
static void drop_or_queue(struct eng *e, const char *rel, bool dir)
{
	int rc = drop_name(e, rel, dir);

	if (rc < 0) {
		set_error(e->persist, rc, "cannot remove", rel);
		queue_op(e->persist, rel, dir);
	}
}

static void persist_mirror_unlink(struct eng *e, struct inode *in, const char *rel,
			   bool dir, bool open, bool last)
{
	if (!e->persist)
		return;
	/* Other names hold the same bytes (hard links): drop only this one. */
	if (!last) {
		drop_or_queue(e, rel, false);
		return;
	}
	if (S_ISREG(in->type) && in->file.copy == COPY_HOME) {
		if (!open) {
			set_copy(e, in, COPY_NONE, NULL);
		} else {
			/* Its readers may still need the bytes: park them. */
			if (park_copy(e, in, rel) < 0)
				/* Read on from there; removed when freed. */
				set_copy(e, in, COPY_AWAY, rel);
			return;
		}
	}
	drop_or_queue(e, rel, dir);
}

/* The copy must be written again (it stays where it is meanwhile). */
static void mark_stale(struct eng *e, struct inode *in)
{
	if (S_ISREG(in->type)) {
		file_wrlock(&in->file);
		file_dur_persisted(&in->file, 0, 0);
		file_unlock(&in->file);
	} else {
		ns_wrlock(e);
		in->node_persisted = false;
		ns_unlock(e);
	}
	queue_inode(e->persist, in, true);
}

static void persist_mirror_link(struct eng *e, struct inode *in, const char *from,
			 const char *to)
{
	struct persist *p = e->persist;
	bool has;
	int rc;

	if (!p)
		return;
	ns_rdlock(e);
	has = S_ISREG(in->type) ? in->file.copy == COPY_HOME
				: in->node_persisted;
	ns_unlock(e);
	if (!has)
		return; /* written back later, under all its names */
	rc = link_name(e, in, from, to);
	if (rc == 0)
		return;
	set_error(p, rc, "cannot link", to);
	/* Keep reading where the copy is; write it again, names and all. */
	if (S_ISREG(in->type))
		set_copy(e, in, COPY_AWAY, from);
	mark_stale(e, in);
}

/* Below a directory, files whose copy was at home read from under @from. */
static void away_below(struct inode *in, const struct dentry *de,
		       const char *rel, void *ctx)
{
	struct eng *e = ctx;

	if (S_ISREG(in->type) && in->file.copy == COPY_HOME)
		set_copy(e, in, COPY_AWAY, rel);
	else if (S_ISLNK(in->type))
		in->node_persisted = false;
	if (!S_ISDIR(in->type) && !S_ISREG(in->type)) {
		leaf_lock(&e->persist->lock, ENG_RANK_PERSIST);
		queue_locked(e->persist, in);
		leaf_unlock(&e->persist->lock, ENG_RANK_PERSIST);
	}
}

static void subtree_away(struct eng *e, struct inode *dir, const char *from)
{
	walk_below(dir, from, away_below, e);
}

struct stale {
	struct inode *in;
	char *rel;
};

struct stale_walk {
	struct stale *v;
	size_t n, cap;
	bool nomem;
};

/* Below a directory, files whose copy is older than their data. */
static void stale_below(struct inode *in, const struct dentry *de,
			const char *rel, void *ctx)
{
	struct stale_walk *w = ctx;
	bool stale;

	if (w->nomem || !S_ISREG(in->type) || in->file.copy != COPY_HOME ||
	    in->dentry != de)
		return;
	file_rdlock(&in->file);
	stale = !file_data_persisted(&in->file);
	file_unlock(&in->file);
	if (!stale)
		return;
	if (w->n == w->cap) {
		size_t c = w->cap ? w->cap * 2 : 16;
		struct stale *nv = realloc(w->v, c * sizeof(*nv));

		if (!nv) {
			w->nomem = true;
			return;
		}
		w->v = nv;
		w->cap = c;
	}
	in->holds++;
	w->v[w->n].in = in;
	w->v[w->n++].rel = strdup(rel);
}

/*
 * Before a directory moves: files below whose copy is older than their
 * data park it, so that no older version appears under the new path.
 */
static void park_stale_below(struct eng *e, struct inode *dir,
			     const char *from)
{
	struct stale_walk w = { 0 };
	struct stale *v;

	ns_wrlock(e); /* for the holds */
	walk_below(dir, from, stale_below, &w);
	ns_unlock(e);
	v = w.v;
	for (size_t i = 0; i < w.n; i++) {
		if (v[i].rel)
			park_copy(e, v[i].in, v[i].rel);
		free(v[i].rel);
		ns_unhold(e, v[i].in);
	}
	free(v);
}

/* Move a whole directory of the persist dir along with the namespace. */
static void mirror_dir(struct eng *e, struct inode *src, const char *from,
		       const char *to)
{
	struct persist *p = e->persist;
	struct stat st;
	int rc = 0;

	if (fstatat(p->dirfd, from, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return; /* never written back */
	park_stale_below(e, src, from);
	/* What it replaces was empty in the namespace. */
	if (unlinkat(p->dirfd, to, AT_REMOVEDIR) < 0 && errno != ENOENT)
		rc = -errno;
	if (rc == 0)
		rc = make_parents(p->dirfd, to);
	if (rc == 0 && renameat(p->dirfd, from, p->dirfd, to) < 0)
		rc = -errno;
	if (rc == 0) {
		away_follows(e, from, to, false, false);
		return;
	}
	set_error(p, rc, "cannot rename directory", from);
	/* Files below read from their old place and are written again. */
	ns_rdlock(e);
	subtree_away(e, src, from);
	ns_unlock(e);
	queue_op(p, from, true);
	persist_kick(e);
}

/* Move @in's copy from @from to its new name @to; names lock held. */
static void follow_name(struct eng *e, struct inode *in, const char *from,
			const char *to)
{
	struct persist *p = e->persist;
	int rc = park_away_owner(e, to);

	if (rc == 0)
		rc = move_copy(p, from, to);
	if (rc == 0)
		return;
	set_error(p, rc, "cannot rename", from);
	set_copy(e, in, COPY_AWAY, from);
	persist_kick(e);
}

/*
 * Exchange of two regular files: each copy goes to the staging dir, then
 * to its file's new name, so no step puts one file's bytes under the
 * other's name for good.  A copy stuck in between is read from there and
 * written again.
 */
static void exchange_files(struct eng *e, struct inode *a, const char *from,
			   struct inode *b, const char *to)
{
	struct persist *p = e->persist;
	struct inode *side[2] = { a, b };
	const char *oldp[2] = { from, to }, *newp[2] = { to, from };
	char park[2][64];

	for (int i = 0; i < 2; i++) {
		if (side[i]->file.copy != COPY_HOME)
			continue;
		park_path(p, side[i]->ino, park[i], sizeof(park[i]));
		if (move_copy(p, oldp[i], park[i]) == 0) {
			set_copy(e, side[i], COPY_PARKED, NULL);
		} else {
			set_error(p, -errno, "cannot park", oldp[i]);
			set_copy(e, side[i], COPY_AWAY, oldp[i]);
		}
	}
	for (int i = 0; i < 2; i++) {
		if (side[i]->file.copy != COPY_PARKED)
			continue;
		if (park_away_owner(e, newp[i]) == 0 &&
		    move_copy(p, park[i], newp[i]) == 0)
			set_copy(e, side[i], COPY_HOME, NULL);
		else
			set_error(p, -EIO, "cannot move back", newp[i]);
	}
	persist_kick(e);
}

/* Exchange of anything else: swap the two paths of the persist dir. */
static void exchange_paths(struct eng *e, struct inode *a, const char *from,
			   struct inode *b, const char *to)
{
	struct persist *p = e->persist;
	struct inode *side[2] = { a, b };
	bool have_from, have_to;
	struct stat st;
	char park[64];
	int rc = 0;

	/* An old version of either name must not take the other name. */
	park_away_owner(e, from);
	park_away_owner(e, to);
	have_from = fstatat(p->dirfd, from, &st, AT_SYMLINK_NOFOLLOW) == 0;
	have_to = fstatat(p->dirfd, to, &st, AT_SYMLINK_NOFOLLOW) == 0;
	if (have_from && have_to) {
		if (renameat2(p->dirfd, from, p->dirfd, to, RENAME_EXCHANGE) < 0) {
			/* NFS has no RENAME_EXCHANGE: three renames. */
			park_path(p, a->ino, park, sizeof(park));
			if (renameat(p->dirfd, from, p->dirfd, park) < 0 ||
			    renameat(p->dirfd, to, p->dirfd, from) < 0 ||
			    renameat(p->dirfd, park, p->dirfd, to) < 0)
				rc = -errno;
		}
	} else if (have_from) {
		if (renameat(p->dirfd, from, p->dirfd, to) < 0)
			rc = -errno;
	} else if (have_to) {
		if (renameat(p->dirfd, to, p->dirfd, from) < 0)
			rc = -errno;
	}
	if (rc < 0)
		set_error(p, rc, "cannot exchange", from);
	else if (have_from || have_to)
		away_follows(e, have_from ? from : to, have_from ? to : from,
			     have_from && have_to, false);
	/* A file among them lost its sidecar's name: write it again. */
	for (int i = 0; i < 2; i++) {
		if (S_ISREG(side[i]->type) && side[i]->file.copy == COPY_HOME)
			set_copy(e, side[i], COPY_NONE, NULL);
		if (rc < 0 && S_ISDIR(side[i]->type)) {
			ns_rdlock(e);
			subtree_away(e, side[i], i ? to : from);
			ns_unlock(e);
		}
	}
	persist_kick(e);
}

static void persist_mirror_rename(struct eng *e, struct inode *src, const char *from,
			   struct inode *dst, const char *to, bool exchange,
			   bool dst_open)
{
	struct persist *p = e->persist;

	if (!p)
		return;
	if (exchange) {
		if (S_ISREG(src->type) && S_ISREG(dst->type))
			exchange_files(e, src, from, dst, to);
		else
			exchange_paths(e, src, from, dst, to);
		fsync_parent(p->dirfd, to);
		return;
	}
	/*
	 * What @to named is gone.  Its copy stays there as the name's old
	 * version until @src's copy replaces it; if it is still open it is
	 * also where its readers read from.
	 */
	if (dst && S_ISREG(dst->type) && dst->file.copy == COPY_HOME)
		set_copy(e, dst, dst_open ? COPY_AWAY : COPY_NONE,
			 dst_open ? to : NULL);
	if (S_ISDIR(src->type)) {
		mirror_dir(e, src, from, to);
	} else if (S_ISREG(src->type) && src->file.copy == COPY_HOME) {
		bool current, needed = false;

		file_rdlock(&src->file);
		current = file_data_persisted(&src->file);
		for (uint32_t i = 0; i < src->file.nslots && !needed; i++)
			needed = src->file.slots[i].where == PIECE_PERSIST;
		file_unlock(&src->file);
		/*
		 * An older version than the file's must not appear under a
		 * name that never had it, nor stay under the name given up:
		 * a stale copy is parked, and read from there, if pieces
		 * live only in it, else it goes with the old name; the file
		 * is written again under its new name.
		 */
		if (current) {
			follow_name(e, src, from, to);
		} else if (needed) {
			if (park_copy(e, src, from) < 0)
				set_copy(e, src, COPY_AWAY, from);
		} else {
			set_copy(e, src, COPY_NONE, NULL);
			drop_or_queue(e, from, false);
		}
	} else if (S_ISLNK(src->type) && src->node_persisted) {
		if (make_parents(p->dirfd, to) < 0 ||
		    renameat(p->dirfd, from, p->dirfd, to) < 0) {
			set_error(p, -errno, "cannot rename", from);
			mark_stale(e, src);
			drop_or_queue(e, from, false);
		}
	} else {
		/* Not written back under @from: what is there is stale. */
		drop_or_queue(e, from, false);
	}
	fsync_parent(p->dirfd, to);
}

static void persist_forget(struct eng *e, struct inode *in)
{
	struct persist *p = e->persist;
	struct file *f = &in->file;
	char park[64];

	if (!p)
		return;
	leaf_lock(&p->lock, ENG_RANK_PERSIST);
	unqueue_locked(p, in);
	leaf_unlock(&p->lock, ENG_RANK_PERSIST);
	if (!S_ISREG(in->type))
		return;
	if (f->copy == COPY_PARKED) {
		park_path(p, in->ino, park, sizeof(park));
		queue_op(p, park, false);
	} else if (f->copy == COPY_AWAY) {
		leaf_lock(&p->lock, ENG_RANK_PERSIST);
		for (size_t i = 0; i < p->naway; i++)
			if (p->away[i] == in) {
				p->away[i] = p->away[--p->naway];
				break;
			}
		leaf_unlock(&p->lock, ENG_RANK_PERSIST);
		/* Kept while the namespace has a file under that name. */
		queue_op(p, f->away_rel, false);
	}
	f->copy = COPY_NONE;
	persist_kick(e);
}

/* What the namespace tells the persist tier (see struct eng_ev). */
static void persist_on_event(struct eng *e, const struct eng_ev *ev,
			     void *ctx)
{
	struct persist *p = ctx;

	/*
	 * In a group the node that made a name change mirrors it; the owner
	 * of a file renamed or removed elsewhere checks later that its copy
	 * went along (or went).
	 */
	if (ev->remote) {
		/* One change, one time: an exchange's two sides are judged
		 * together, before either is written again. */
		uint64_t due = rft_now_ms() + CHECK_DELAY_MS;

		if (ev->kind == EV_RENAMED ||
		    (ev->kind == EV_UNLINKED && (ev->last || ev->dir)))
			check_later(e, ev->in, ev->from, due);
		/* An exchange moved the other one from @to. */
		if (ev->kind == EV_RENAMED && ev->exchange && ev->dst)
			check_later(e, ev->dst, ev->to, due);
		return;
	}
	switch (ev->kind) {
	case EV_DIRTY:
		queue_inode(p, ev->in, true);
		break;
	case EV_SEALED:
		if (!ev->persisted)
			queue_inode(p, ev->in, true);
		break;
	case EV_LINKED:
		persist_mirror_link(e, ev->in, ev->from, ev->to);
		break;
	case EV_UNLINKED:
		persist_mirror_unlink(e, ev->in, ev->from, ev->dir, ev->open,
				      ev->last);
		break;
	case EV_RENAMED:
		persist_mirror_rename(e, ev->in, ev->from, ev->dst, ev->to,
				      ev->exchange, ev->open);
		break;
	case EV_FREED:
		persist_forget(e, ev->in);
		break;
	case EV_PERSISTED:
	case EV_LOST:
		/* Its fsyncs (another node's write-back, in a group). */
		leaf_lock(&p->lock, ENG_RANK_PERSIST);
		for (struct persist_sync *s = p->syncs; s; s = s->next)
			if (s->in == ev->in) {
				p->kicked = true;
				pthread_cond_signal(&p->wake);
				break;
			}
		leaf_unlock(&p->lock, ENG_RANK_PERSIST);
		break;
	case EV_EVICTED:
	case EV_PROTECTED:
		break;
	}
}

/* --- mount-time scan ---------------------------------------------------- */

static void load_sums(struct eng *e, int dirfd, const char *name,
		      const struct stat *st, struct file *f)
{
	char sname[NAME_MAX + 16];
	struct sum_header h;
	uint32_t npieces = f->nslots, trailer, *crcs = NULL;
	size_t hlen = sizeof(h);
	int fd;
	bool ok = false;

	snprintf(sname, sizeof(sname), ".%s%s", name, RFT_SUM_SUFFIX);
	fd = openat(dirfd, sname, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		goto out;
	crcs = malloc(((size_t)npieces + 1) * sizeof(*crcs));
	memset(&h, 0, sizeof(h));
	if (!crcs || pread(fd, &h, SUM_HEADER_V1, 0) != (ssize_t)SUM_HEADER_V1)
		goto out;
	/* Written by an older reftfs: no file id, a fresh one is kept. */
	if (memcmp(h.magic, SUM_MAGIC_V1, sizeof(SUM_MAGIC_V1)) == 0)
		hlen = SUM_HEADER_V1;
	else if (memcmp(h.magic, SUM_MAGIC, sizeof(SUM_MAGIC)) != 0 ||
		 pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
		goto out;
	if (h.chunk_size != e->store.chunk_size || h.npieces != npieces ||
	    h.size != (uint64_t)st->st_size ||
	    h.mtime_sec != st->st_mtim.tv_sec ||
	    h.mtime_nsec != st->st_mtim.tv_nsec)
		goto out;
	if (pread(fd, crcs, ((size_t)npieces + 1) * sizeof(*crcs),
		  (off_t)hlen) != (ssize_t)(((size_t)npieces + 1) * sizeof(*crcs)))
		goto out;
	trailer = ers_crc32c(0, &h, hlen);
	trailer = ers_crc32c(trailer, crcs, (size_t)npieces * sizeof(*crcs));
	if (trailer != crcs[npieces])
		goto out;
	if (hlen == sizeof(h) && h.file_id)
		f->id = h.file_id;
	for (uint32_t i = 0; i < npieces; i++) {
		f->slots[i].crc = crcs[i];
		f->slots[i].crc_len = file_piece_len(e, f->size, i);
	}
	ok = true;
out:
	if (fd >= 0)
		close(fd);
	free(crcs);
	f->crc_unverified = !ok;
}

/*
 * Pieces that are one hole in the persisted copy stay holes: reading them
 * costs neither memory nor I/O (SEEK_DATA; a filesystem without it reports
 * all data, which is only slower).
 */
static void mark_holes(struct eng *e, int dirfd, const char *name,
		       struct file *f)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	uint64_t off = 0;

	if (fd < 0)
		return;
	while (off < f->size) {
		off_t data = lseek(fd, (off_t)off, SEEK_DATA);
		uint64_t end = data < 0 ? f->size : (uint64_t)data, first;
		off_t hole;

		/* Pieces wholly inside [off, end) are holes. */
		first = (off + e->store.chunk_size - 1) >> e->store.chunk_shift;
		for (uint64_t i = first; i < f->nslots; i++) {
			uint64_t start = i << e->store.chunk_shift;

			if (start + file_piece_len(e, f->size, (uint32_t)i) > end)
				break;
			f->slots[i] = (struct slot){ 0, 0, 0,
						     SLOT_CRC_UNKNOWN,
						     PIECE_HOLE, 0 };
		}
		if (data < 0)
			break;
		hole = lseek(fd, data, SEEK_HOLE);
		if (hole <= data)
			break;
		off = (uint64_t)hole;
	}
	close(fd);
}

static int scan_dir(struct eng *e, int dirfd, struct inode *dir, int depth);

/* Hard links met during the scan: host (dev, ino) to our inode. */
#define SCAN_LINK_BUCKETS 1024

struct scan_link {
	struct scan_link *next;
	dev_t dev;
	ino_t ino;
	struct inode *in;
};

static struct scan_link *scan_links[SCAN_LINK_BUCKETS]; /* under ns->lock */

static struct scan_link **scan_link_slot(const struct stat *st)
{
	struct scan_link **pp =
		&scan_links[(st->st_ino ^ st->st_dev) % SCAN_LINK_BUCKETS];

	while (*pp && ((*pp)->ino != st->st_ino || (*pp)->dev != st->st_dev))
		pp = &(*pp)->next;
	return pp;
}

static void scan_links_free(void)
{
	for (size_t b = 0; b < SCAN_LINK_BUCKETS; b++)
		while (scan_links[b]) {
			struct scan_link *l = scan_links[b];

			scan_links[b] = l->next;
			free(l);
		}
}

static int scan_entry(struct eng *e, int dirfd, struct inode *dir,
		      const char *name, const struct stat *st, int depth)
{
	struct scan_link **slot = NULL;
	struct inode *in;
	int rc;

	if (ns_dir_find(&dir->dir, name))
		return 0;
	/* A further name of something met already: a hard link. */
	if (!S_ISDIR(st->st_mode) && st->st_nlink > 1) {
		slot = scan_link_slot(st);
		if (*slot)
			return ns_link_child(e, dir, name, (*slot)->in, false);
	}
	if (S_ISREG(st->st_mode) &&
	    (uint64_t)st->st_size > RFT_MAX_FILE_SIZE) {
		rft_warn("persist: skipping %s: larger than %llu bytes", name,
			 (unsigned long long)RFT_MAX_FILE_SIZE);
		return 0;
	}
	in = ns_new_inode(e, st->st_mode, st->st_uid, st->st_gid);
	if (!in)
		return -ENOMEM;
	in->atime = st->st_atim;
	in->mtime = st->st_mtim;
	in->ctime = st->st_ctim;
	if (S_ISREG(st->st_mode)) {
		struct file *f = &in->file;
		uint64_t n = ((uint64_t)st->st_size + e->store.chunk_size - 1) >>
			     e->store.chunk_shift;

		f->size = (uint64_t)st->st_size;
		if (n) {
			f->slots = calloc(n, sizeof(*f->slots));
			if (!f->slots)
				return -ENOMEM;
			f->cap = f->nslots = (uint32_t)n;
		}
		for (uint32_t i = 0; i < f->nslots; i++)
			f->slots[i] = (struct slot){
				0, file_piece_len(e, f->size, i), 0,
				SLOT_CRC_UNKNOWN, PIECE_PERSIST, 0 };
		mark_holes(e, dirfd, name, f);
		load_sums(e, dirfd, name, st, f);
		file_dur_found(f);
		f->copy = COPY_HOME;
		f->copy_id = (struct copy_id){ st->st_dev, st->st_ino };
	} else if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode) ||
		   S_ISFIFO(st->st_mode) || S_ISSOCK(st->st_mode)) {
		in->rdev = st->st_rdev;
		in->node_persisted = true;
	} else if (S_ISDIR(st->st_mode)) {
		in->node_persisted = true;
	} else if (S_ISLNK(st->st_mode)) {
		char target[PATH_MAX];
		ssize_t n = readlinkat(dirfd, name, target, sizeof(target) - 1);

		if (n < 0 || !(in->target = strndup(target, (size_t)n)))
			in->target = strdup("");
		if (!in->target)
			return -ENOMEM;
		in->node_persisted = true;
	}
	rc = ns_link_child(e, dir, name, in, true);
	if (rc < 0)
		return rc;
	if (slot) {
		struct scan_link *l = malloc(sizeof(*l));

		if (!l)
			return -ENOMEM;
		*l = (struct scan_link){ NULL, st->st_dev, st->st_ino, in };
		*slot = l;
	}
	if (S_ISDIR(st->st_mode)) {
		int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY |
					     O_CLOEXEC | O_NOFOLLOW);

		if (fd < 0)
			return -errno;
		rc = scan_dir(e, fd, in, depth + 1);
		close(fd);
		/* Listing a directory must not change its times. */
		in->mtime = st->st_mtim;
		in->ctime = st->st_ctim;
	}
	return rc;
}

struct scan_item {
	char *name;
	struct stat st;
};

static int by_mtime(const void *a, const void *b)
{
	const struct scan_item *x = a, *y = b;

	if (x->st.st_mtim.tv_sec != y->st.st_mtim.tv_sec)
		return x->st.st_mtim.tv_sec < y->st.st_mtim.tv_sec ? -1 : 1;
	if (x->st.st_mtim.tv_nsec != y->st.st_mtim.tv_nsec)
		return x->st.st_mtim.tv_nsec < y->st.st_mtim.tv_nsec ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int scan_dir(struct eng *e, int dirfd, struct inode *dir, int depth)
{
	struct scan_item *items = NULL;
	size_t n = 0, cap = 0;
	struct dirent *d;
	DIR *dp;
	int fd, rc = 0;

	if (depth > PATH_MAX / 2)
		return -ELOOP;
	fd = dup(dirfd);
	if (fd < 0)
		return -errno;
	dp = fdopendir(fd);
	if (!dp) {
		close(fd);
		return -errno;
	}
	while ((d = readdir(dp))) {
		struct scan_item it;

		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		if (depth == 0 && (!strcmp(d->d_name, TMP_DIR) ||
				   !strncmp(d->d_name, LOCK_FILE,
					    strlen(LOCK_FILE))))
			continue;
		if (ns_name_reserved(dir, d->d_name))
			continue;
		if (fstatat(dirfd, d->d_name, &it.st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* removed meanwhile */
		if (n == cap) {
			struct scan_item *v;

			cap = cap ? cap * 2 : 32;
			v = realloc(items, cap * sizeof(*v));
			if (!v) {
				rc = -ENOMEM;
				break;
			}
			items = v;
		}
		it.name = strdup(d->d_name);
		if (!it.name) {
			rc = -ENOMEM;
			break;
		}
		items[n++] = it;
	}
	closedir(dp);
	/* Oldest first, so checkpoints get their sequence numbers in order. */
	if (n)
		qsort(items, n, sizeof(*items), by_mtime);
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = scan_entry(e, dirfd, dir, items[i].name, &items[i].st,
				depth);
	for (size_t i = 0; i < n; i++)
		free(items[i].name);
	free(items);
	return rc;
}

static void clean_tmp(struct persist *p)
{
	int fd = openat(p->dirfd, p->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *d;
	DIR *dp;

	if (fd < 0)
		return;
	dp = fdopendir(fd);
	if (!dp) {
		close(fd);
		return;
	}
	while ((d = readdir(dp)))
		if (strcmp(d->d_name, ".") && strcmp(d->d_name, ".."))
			unlinkat(fd, d->d_name, 0);
	closedir(dp);
}

int persist_scan(struct eng *e)
{
	struct persist *p = e->persist;
	int rc;

	if (!p)
		return 0;
	clean_tmp(p);
	ns_wrlock(e);
	rc = scan_dir(e, p->dirfd, e->ns.root, 0);
	scan_links_free();
	ns_unlock(e);
	if (rc < 0)
		rft_err("cannot read persist dir %s: %s", e->persist_dir,
			strerror(-rc));
	else
		rft_info("persist dir %s: %llu files, %llu directories",
			 e->persist_dir, (unsigned long long)e->ns.nfiles,
			 (unsigned long long)e->ns.ndirs - 1);
	return rc;
}

/* --- lifetime ----------------------------------------------------------- */

/* Own the persist dir: one daemon at a time may write back into it. */
static int take_dir_lock(struct persist *p, const char *dir)
{
	int waited = 0;

	/* Read-only: a lock needs no write access, and an fd open for
	 * writing would keep the persist dir from being remounted. */
	p->lockfd = openat(p->dirfd, p->lockname, O_RDONLY | O_CREAT | O_CLOEXEC,
			   0600);
	if (p->lockfd < 0)
		return -errno;
	while (flock(p->lockfd, LOCK_EX | LOCK_NB) < 0) {
		if (errno != EWOULDBLOCK)
			return -errno;
		/* A daemon unmounted just now may still be writing back. */
		if (waited == 0)
			rft_info("waiting for the reftfsd that holds %s", dir);
		if (waited >= LOCK_WAIT_MS)
			return -EBUSY;
		usleep(100 * 1000);
		waited += 100;
	}
	return 0;
}

/* The persist dir as core's piece source (struct piece_source). */
static int source_locate(struct eng *e, const struct inode *in,
			 struct piece_loc *loc)
{
	loc->id = in->file.copy_id;
	return persist_copy_path(e, in, loc->rel, sizeof(loc->rel));
}

static int source_read(struct eng *e, const struct piece_loc *loc,
		       uint64_t off, uint32_t fill, uint32_t len, uint32_t crc,
		       uint32_t crc_len, uint8_t *buf)
{
	return persist_read_piece(e, loc->rel, &loc->id, off, fill, len, crc,
				  crc_len, buf);
}

static const struct piece_source persist_source = {
	.locate = source_locate,
	.read = source_read,
};

int persist_new(struct eng *e, struct persist **out)
{
	const char *dir = e->persist_dir;
	struct persist *p;
	int rc;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->e = e;
	p->lockfd = -1;
	p->healthy = true;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->wake, NULL);
	p->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p->dirfd < 0) {
		rc = -errno;
		rft_err("persist dir %s: %s", dir, strerror(-rc));
		goto fail;
	}
	if (e->cfg.node < 0) {
		snprintf(p->tmp, sizeof(p->tmp), TMP_DIR);
		snprintf(p->lockname, sizeof(p->lockname), LOCK_FILE);
	} else {
		snprintf(p->tmp, sizeof(p->tmp), TMP_DIR "/node%d",
			 e->cfg.node);
		snprintf(p->lockname, sizeof(p->lockname),
			 LOCK_FILE ".node%d", e->cfg.node);
	}
	if (faccessat(p->dirfd, ".", W_OK | X_OK, AT_EACCESS) < 0 ||
	    (mkdirat(p->dirfd, TMP_DIR, 0700) < 0 && errno != EEXIST) ||
	    (mkdirat(p->dirfd, p->tmp, 0700) < 0 && errno != EEXIST)) {
		rc = -errno;
		rft_err("persist dir %s is not writable: %s", dir,
			strerror(-rc));
		goto fail;
	}
	rc = eng_listen(e, persist_on_event, p);
	if (rc == 0)
		rc = take_dir_lock(p, dir);
	if (rc < 0) {
		rft_err("persist dir %s %s", dir,
			rc == -EBUSY ? "is in use by another reftfsd"
				     : strerror(-rc));
		goto fail;
	}
	eng_piece_source(e, &persist_source);
	*out = p;
	return 0;
fail:
	persist_free(p);
	return rc;
}

int persist_start(struct eng *e)
{
	struct persist *p = e->persist;
	int rc;

	if (!p)
		return 0;
	rc = -pthread_create(&p->thread, NULL, worker, e);
	if (rc == 0)
		p->running = true;
	return rc;
}

int persist_stop(struct eng *e, enum eng_unmount_flush mode)
{
	struct persist *p = e->persist;
	struct wb_pass ps = { .all = mode == ENG_UNMOUNT_FLUSH_ALL, .now = true,
			   .final = true };
	unsigned failed = 0;
	uint8_t *bounce;
	size_t left;
	int rc = 0;

	if (!p)
		return 0;
	if (p->running) {
		leaf_lock(&p->lock, ENG_RANK_PERSIST);
		p->stopping = true;
		pthread_cond_signal(&p->wake);
		leaf_unlock(&p->lock, ENG_RANK_PERSIST);
		pthread_join(p->thread, NULL);
		p->running = false;
	}
	if (mode == ENG_UNMOUNT_FLUSH_NONE) {
		/* Nothing is written: a copy left behind stays there. */
		drop_checks(p, e);
		finish_syncs(e, true);
		return 0;
	}
	bounce = malloc(e->store.chunk_size);
	if (!bounce) {
		finish_syncs(e, true);
		return -ENOMEM;
	}
	/*
	 * Files still open for writing count too, as they are now: the
	 * kernel may not have sent their last RELEASE before the unmount.
	 */
	for (int i = 0; i < UNMOUNT_TRIES; i++) {
		bool last = i == UNMOUNT_TRIES - 1;

		rc = writeback_pass(e, &ps, bounce, &failed, last);
		if (rc == 0)
			break;
		if (!last) {
			rft_warn("write-back at unmount: %u files failed (%s), "
				 "try %d of %d", failed, strerror(-rc), i + 1,
				 UNMOUNT_TRIES);
			usleep(e->cfg.retry_ms * 1000u);
		}
	}
	free(bounce);
	finish_syncs(e, true);
	/* No file is open any more: parked copies and temporaries go. */
	retry_ops_locked(e);
	clean_tmp(p);
	left = pending_ops(p);
	if (left)
		rft_warn("persist dir %s: %zu stale names could not be "
			 "removed", e->persist_dir, left);
	if (rc < 0)
		rft_err("unmount: %u files were not written back to %s (%s)",
			failed, e->persist_dir, strerror(-rc));
	return rc;
}

void persist_free(struct persist *p)
{
	if (!p)
		return;
	if (p->lockfd >= 0)
		close(p->lockfd);
	if (p->dirfd >= 0)
		close(p->dirfd);
	while (p->ops) {
		struct pending_op *op = p->ops;

		p->ops = op->next;
		free(op);
	}
	/* Never stopped (a failed start): the namespace goes next. */
	drop_checks(p, NULL);
	free(p->away);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
