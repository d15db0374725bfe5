/*
 * persist.c - the persist tier (shared storage, e.g. NFS): write-back,
 * read-through, name mirroring and eviction.
 *
 * Layout of the persist dir: the same tree as the mount, plain files that
 * any tool can read, plus
 *   .reftfs-lock          flock()ed by the daemon that owns the dir
 *   .reftfs-tmp/          write-back staging; emptied at mount
 *   DIR/.NAME.rftsum      checksum sidecar of DIR/NAME (format below)
 *
 * A file is written back as a temporary in .reftfs-tmp, fsync()ed, then
 * renamed over its name, so the tree never holds a torn file.  Its sidecar
 * is renamed in just before it; a sidecar is trusted only when its own
 * CRC, and the size and mtime it records, match the file beside it.
 *
 * One worker thread does all write-back and eviction.  Name changes in the
 * namespace are mirrored here under mirror_lock, which the worker also
 * holds while it renames a finished file into place: a copy is never put
 * under a name the namespace has just given up.
 */
#include <dirent.h>
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
#include "erasure.h"

#define TMP_DIR ".reftfs-tmp"
#define LOCK_FILE ".reftfs-lock"
#define SUM_MAGIC "RFTSUM1"
#define LOCK_WAIT_MS 60000
#define UNMOUNT_TRIES 3
#define FLUSH_GRACE_MS 500

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
};

struct flush_ticket {
	uint64_t ticket;
	uint64_t files_total, bytes_total;
	uint64_t files_base, bytes_base;
	int error;
};

struct persist {
	struct eng *e;
	int dirfd;
	int lockfd;
	pthread_mutex_t mirror_lock;

	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t thread;
	bool running;		/* protected by lock */
	bool stopping;		/* protected by lock */
	bool kicked;		/* protected by lock */
	bool pressure;		/* protected by lock */
	uint64_t flush_req;	/* protected by lock */
	uint64_t flush_done;	/* protected by lock */
	struct flush_ticket fl; /* protected by lock */

	/* protected by lock */
	uint64_t files_written, bytes_written, errors;
	char last_error[256];
	time_t last_error_time, last_ok_time;
	bool healthy;
};

static void set_error(struct persist *p, int rc, const char *what,
		      const char *rel)
{
	pthread_mutex_lock(&p->lock);
	p->errors++;
	p->healthy = false;
	p->last_error_time = time(NULL);
	snprintf(p->last_error, sizeof(p->last_error), "%s %s: %s", what,
		 rel, strerror(-rc));
	pthread_mutex_unlock(&p->lock);
	rft_warn("persist: %s %s: %s", what, rel, strerror(-rc));
}

static void add_progress(struct persist *p, uint64_t files, uint64_t bytes)
{
	pthread_mutex_lock(&p->lock);
	p->files_written += files;
	p->bytes_written += bytes;
	if (files) {
		p->healthy = true;
		p->last_ok_time = time(NULL);
	}
	pthread_mutex_unlock(&p->lock);
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

/* --- read-through ------------------------------------------------------- */

int persist_read_piece(struct eng *e, const char *rel, uint64_t off,
		       uint32_t fill, uint32_t len, uint32_t crc,
		       uint32_t crc_len, uint8_t *buf)
{
	struct persist *p = e->persist;
	uint32_t want = fill < len ? fill : len, got = 0;
	int fd, rc = 0;

	if (!p)
		return -EIO;
	fd = openat(p->dirfd, rel, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ENOENT : -EIO;
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
	uint64_t ino, version, meta_version, size;
	mode_t mode;
	uid_t uid;
	gid_t gid;
	struct timespec mtime;
	uint32_t nslots;
	struct slot *slots;
	char rel[PATH_MAX];
};

/* Copy what write-back needs of @in and pin its chunks; 1 if nothing to do. */
static int take_snapshot(struct eng *e, struct inode *in, struct snap *s)
{
	struct file *f = &in->file;
	int rc = 0;

	pthread_rwlock_rdlock(&e->ns.lock);
	if (ns_path(&e->ns, in, s->rel, sizeof(s->rel)) < 0) {
		pthread_rwlock_unlock(&e->ns.lock);
		return 1; /* unlinked meanwhile */
	}
	s->ino = in->ino;
	s->mode = in->mode;
	s->uid = in->uid;
	s->gid = in->gid;
	pthread_rwlock_rdlock(&f->lock);
	if (f->state != ENG_STATE_SEALED) {
		rc = 1;
		goto out;
	}
	s->version = f->version;
	s->meta_version = f->meta_version;
	s->size = f->size;
	s->mtime = in->mtime;
	s->nslots = f->nslots;
	s->slots = malloc((size_t)(f->nslots ? f->nslots : 1) *
			  sizeof(*s->slots));
	if (!s->slots) {
		rc = -ENOMEM;
		goto out;
	}
	if (f->nslots) /* an empty file has no slot array to copy from */
		memcpy(s->slots, f->slots,
		       (size_t)f->nslots * sizeof(*s->slots));
	for (uint32_t i = 0; i < s->nslots; i++)
		if (s->slots[i].id < SLOT_PERSIST)
			store_get(&e->store, s->slots[i].id);
out:
	pthread_rwlock_unlock(&f->lock);
	pthread_rwlock_unlock(&e->ns.lock);
	return rc;
}

static void drop_snapshot(struct eng *e, struct snap *s)
{
	for (uint32_t i = 0; s->slots && i < s->nslots; i++)
		if (s->slots[i].id < SLOT_PERSIST)
			store_put(&e->store, s->slots[i].id);
	free(s->slots);
	s->slots = NULL;
}

/* Write the data of @s to @fd and the piece CRCs to @crcs. */
static int write_data(struct eng *e, struct snap *s, int fd, uint32_t *crcs,
		      uint8_t *bounce)
{
	struct persist *p = e->persist;
	uint32_t npieces = (uint32_t)((s->size + e->store.chunk_size - 1) >>
				      e->store.chunk_shift);
	int rc;

	for (uint32_t i = 0; i < npieces; i++) {
		uint32_t len = file_piece_len(e, s->size, i);
		uint64_t off = (uint64_t)i << e->store.chunk_shift;
		const struct slot *sl = i < s->nslots ? &s->slots[i] : NULL;
		const uint8_t *data = NULL;
		uint32_t n = 0;

		if (sl && sl->id < SLOT_PERSIST) {
			data = store_ptr(&e->store, sl->id);
			n = sl->fill < len ? sl->fill : len;
		} else if (sl && sl->id == SLOT_PERSIST) {
			/* Not in memory: carry it over from the old copy. */
			rc = persist_read_piece(e, s->rel, off, sl->fill, len,
						sl->crc, sl->crc_len, bounce);
			if (rc < 0)
				return rc;
			data = bounce;
			n = len;
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
		add_progress(p, 0, len);
	}
	if (ftruncate(fd, (off_t)s->size) < 0)
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
	h.size = s->size;
	h.mtime_sec = s->mtime.tv_sec;
	h.mtime_nsec = s->mtime.tv_nsec;
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

/* Move the finished temporaries into place under the file's current name. */
static int commit(struct eng *e, struct inode *in, struct snap *s,
		  const char *tmp, const char *tmpsum)
{
	struct persist *p = e->persist;
	char rel[PATH_MAX], sum[PATH_MAX + 16];
	int rc;

	persist_mirror_lock(e);
	pthread_rwlock_rdlock(&e->ns.lock);
	rc = ns_path(&e->ns, in, rel, sizeof(rel));
	pthread_rwlock_unlock(&e->ns.lock);
	if (rc < 0) {
		rc = 1; /* unlinked while written: drop the copy */
		goto out;
	}
	rc = sum_name(rel, sum, sizeof(sum));
	if (rc == 0)
		rc = make_parents(p->dirfd, rel);
	if (rc == 0 && tmpsum && renameat(p->dirfd, tmpsum, p->dirfd, sum) < 0)
		rc = -errno;
	if (rc == 0 && renameat(p->dirfd, tmp, p->dirfd, rel) < 0)
		rc = -errno;
	if (rc == 0)
		rc = fsync_parent(p->dirfd, rel);
	if (rc < 0)
		set_error(p, rc, "cannot rename into place", rel);
out:
	persist_mirror_unlock(e);
	return rc;
}

static int persist_file(struct eng *e, struct inode *in, uint8_t *bounce)
{
	struct persist *p = e->persist;
	struct file *f = &in->file;
	char tmp[64], tmpsum[80];
	uint32_t *crcs = NULL, npieces;
	struct snap s;
	int fd = -1, rc;

	memset(&s, 0, sizeof(s));
	rc = take_snapshot(e, in, &s);
	if (rc != 0)
		return rc < 0 ? rc : 0;
	npieces = (uint32_t)((s.size + e->store.chunk_size - 1) >>
			     e->store.chunk_shift);
	snprintf(tmp, sizeof(tmp), TMP_DIR "/%llu.%llu",
		 (unsigned long long)s.ino, (unsigned long long)s.version);
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

		if (fchmod(fd, s.mode & 07777) < 0 ||
		    futimens(fd, times) < 0)
			rc = -errno;
		/* Ownership is kept where we may set it (root, NFS no_root_squash). */
		if (rc == 0 && geteuid() == 0 && fchown(fd, s.uid, s.gid) < 0)
			rft_dbg("persist: cannot chown %s: %s", s.rel,
				strerror(errno));
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
	rc = commit(e, in, &s, tmp, tmpsum);
	if (rc != 0)
		goto out;

	pthread_rwlock_wrlock(&f->lock);
	f->in_persist = true;
	if (f->version == s.version && f->meta_version == s.meta_version &&
	    f->state == ENG_STATE_SEALED) {
		for (uint32_t i = 0; i < f->nslots && i < s.nslots; i++)
			if (f->slots[i].id == s.slots[i].id)
				f->slots[i].flags |= SLOT_CLEAN;
		f->crc_unverified = false;
		f->state = ENG_STATE_PERSISTED;
	}
	pthread_rwlock_unlock(&f->lock);
	add_progress(p, 1, 0);
	rft_dbg("persist: wrote back %s (%llu bytes)", s.rel,
		(unsigned long long)s.size);
out:
	if (rc != 0) {
		unlinkat(p->dirfd, tmp, 0);
		unlinkat(p->dirfd, tmpsum, 0);
	}
	drop_snapshot(e, &s);
	free(crcs);
	return rc < 0 ? rc : 0;
}

static int persist_symlink(struct eng *e, struct inode *in)
{
	struct persist *p = e->persist;
	char tmp[64], target[PATH_MAX];
	struct snap s;
	int rc;

	pthread_rwlock_rdlock(&e->ns.lock);
	rc = ns_path(&e->ns, in, s.rel, sizeof(s.rel));
	if (rc == 0)
		snprintf(target, sizeof(target), "%s", in->target);
	pthread_rwlock_unlock(&e->ns.lock);
	if (rc < 0)
		return 0;
	snprintf(tmp, sizeof(tmp), TMP_DIR "/%llu.lnk",
		 (unsigned long long)in->ino);
	unlinkat(p->dirfd, tmp, 0);
	if (symlinkat(target, p->dirfd, tmp) < 0) {
		rc = -errno;
		set_error(p, rc, "cannot write back", s.rel);
		return rc;
	}
	rc = commit(e, in, &s, tmp, NULL);
	if (rc != 0) {
		unlinkat(p->dirfd, tmp, 0);
		return rc < 0 ? rc : 0;
	}
	pthread_rwlock_wrlock(&e->ns.lock);
	in->sym_persisted = true;
	pthread_rwlock_unlock(&e->ns.lock);
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

static bool wants_writeback(struct eng *e, struct inode *in, bool all,
			    uint64_t *bytes)
{
	bool want = false;

	if (!in->parent || in->nlink == 0)
		return false;
	if (S_ISLNK(in->mode)) {
		want = !in->sym_persisted;
		*bytes = 0;
	} else if (S_ISREG(in->mode)) {
		pthread_rwlock_rdlock(&in->file.lock);
		want = in->file.state == ENG_STATE_SEALED;
		*bytes = in->file.size;
		pthread_rwlock_unlock(&in->file.lock);
	}
	return want && (all || policy_selects(e, in));
}

struct collect {
	struct eng *e;
	bool all;
	struct inode **v;
	size_t n, cap;
	uint64_t bytes;
	int rc;
};

static int collect_one(void *ctx, struct inode *in)
{
	struct collect *c = ctx;
	uint64_t bytes = 0;

	if (!wants_writeback(c->e, in, c->all, &bytes))
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

/* Write back what is due; returns the first error. */
static int writeback_pass(struct eng *e, bool all, uint8_t *bounce)
{
	struct collect c = { .e = e, .all = all };
	int rc = 0;

	c.v = malloc(64 * sizeof(*c.v));
	if (!c.v)
		return -ENOMEM;
	c.cap = 64;
	pthread_rwlock_wrlock(&e->ns.lock);
	ns_walk(&e->ns, collect_one, &c);
	pthread_rwlock_unlock(&e->ns.lock);

	for (size_t i = 0; i < c.n; i++) {
		struct inode *in = c.v[i];

		/* After one failure keep the rest for the retry. */
		if (rc == 0)
			rc = S_ISLNK(in->mode) ? persist_symlink(e, in)
					       : persist_file(e, in, bounce);
		ns_unhold(e, in);
	}
	free(c.v);
	return rc ? rc : c.rc;
}

/* --- eviction ----------------------------------------------------------- */

struct evict {
	struct eng *e;
	uint32_t want, freed;
	uint64_t evictable; /* counting only */
	bool count_only;
};

static void evict_tree(struct evict *ev, struct inode *dir)
{
	for (struct dentry *de = dir->dir.first; de; de = de->next) {
		struct inode *in = de->inode;

		if (!ev->count_only && ev->freed >= ev->want)
			return;
		if (S_ISDIR(in->mode)) {
			evict_tree(ev, in);
			continue;
		}
		if (!S_ISREG(in->mode))
			continue;
		if (ev->count_only) {
			struct file *f = &in->file;

			pthread_rwlock_rdlock(&f->lock);
			if (f->in_persist && f->state == ENG_STATE_PERSISTED)
				for (uint32_t i = 0; i < f->nslots; i++)
					if (f->slots[i].id < SLOT_PERSIST &&
					    (f->slots[i].flags & SLOT_CLEAN))
						ev->evictable++;
			pthread_rwlock_unlock(&f->lock);
			continue;
		}
		/* Never wait on a file someone is reading or writing. */
		if (pthread_rwlock_trywrlock(&in->file.lock) != 0)
			continue;
		ev->freed += file_evict_locked(ev->e, &in->file);
		pthread_rwlock_unlock(&in->file.lock);
	}
}

/* Checkpoints outside the keep window, oldest first; ns->lock held. */
static void evict_walk(struct evict *ev)
{
	struct eng *e = ev->e;
	uint64_t done = 0;

	for (;;) {
		struct inode *next = NULL;

		for (struct dentry *de = e->ns.root->dir.first; de;
		     de = de->next) {
			struct inode *c = de->inode;

			if (S_ISDIR(c->mode) && c->ckpt_seq > done &&
			    (!next || c->ckpt_seq < next->ckpt_seq))
				next = c;
		}
		if (!next || ns_in_keep_window(e, next->ckpt_seq))
			return;
		evict_tree(ev, next);
		if (!ev->count_only && ev->freed >= ev->want)
			return;
		done = next->ckpt_seq;
	}
}

static void evict_pass(struct eng *e, bool pressure)
{
	uint32_t nfree = store_free_count(&e->store);
	uint32_t low = e->store.nchunks / 8, high = e->store.nchunks / 4;
	struct evict ev = { .e = e };

	if (!pressure && nfree >= low)
		return;
	ev.want = high > nfree ? high - nfree : 1;
	pthread_rwlock_rdlock(&e->ns.lock);
	evict_walk(&ev);
	pthread_rwlock_unlock(&e->ns.lock);
	if (ev.freed) {
		atomic_fetch_add(&e->cnt.evicted_chunks, ev.freed);
		rft_info("evicted %u persisted chunks", ev.freed);
	}
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
	pthread_mutex_lock(&p->lock);
	while (!p->stopping) {
		uint64_t ticket = p->flush_req;
		bool all = ticket > p->flush_done, pressure = p->pressure;
		int rc;

		p->kicked = false;
		p->pressure = false;
		pthread_mutex_unlock(&p->lock);

		evict_pass(e, pressure);
		rc = bounce ? writeback_pass(e, all, bounce) : -ENOMEM;

		pthread_mutex_lock(&p->lock);
		if (all) {
			p->flush_done = ticket;
			if (p->fl.ticket == ticket)
				p->fl.error = rc;
		}
		if (!p->kicked && !p->pressure && !p->stopping &&
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
	pthread_mutex_unlock(&p->lock);
	free(bounce);
	return NULL;
}

void persist_kick(struct eng *e)
{
	struct persist *p = e->persist;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->kicked = true;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&p->lock);
}

void persist_pressure(void *ctx)
{
	struct eng *e = ctx;
	struct persist *p = e->persist;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	if (!p->pressure) {
		p->pressure = true;
		pthread_cond_signal(&p->wake);
	}
	pthread_mutex_unlock(&p->lock);
}

/* --- flush tickets ------------------------------------------------------ */

static int count_open_writers(void *ctx, struct inode *in)
{
	unsigned *n = ctx;

	if (S_ISREG(in->mode) && in->nlink > 0) {
		pthread_rwlock_rdlock(&in->file.lock);
		*n += in->file.writers > 0;
		pthread_rwlock_unlock(&in->file.lock);
	}
	return 0;
}

int persist_flush_request(struct eng *e, uint64_t *ticket)
{
	struct persist *p = e->persist;
	struct collect c = { .e = e, .all = true };

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

		pthread_rwlock_rdlock(&e->ns.lock);
		ns_walk(&e->ns, count_open_writers, &open_writers);
		pthread_rwlock_unlock(&e->ns.lock);
		if (open_writers == 0)
			break;
		usleep(10 * 1000);
	}
	pthread_rwlock_rdlock(&e->ns.lock);
	ns_walk(&e->ns, collect_one, &c); /* counts only: c.v is NULL */
	pthread_rwlock_unlock(&e->ns.lock);

	pthread_mutex_lock(&p->lock);
	*ticket = ++p->flush_req;
	p->fl = (struct flush_ticket){
		.ticket = *ticket,
		.files_total = c.n,
		.bytes_total = c.bytes,
		.files_base = p->files_written,
		.bytes_base = p->bytes_written,
	};
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int persist_flush_progress(struct eng *e, uint64_t ticket,
			   struct eng_flush_progress *fp)
{
	struct persist *p = e->persist;

	if (!p)
		return -ENOTSUP;
	memset(fp, 0, sizeof(*fp));
	pthread_mutex_lock(&p->lock);
	if (ticket == 0 || ticket > p->flush_req) {
		pthread_mutex_unlock(&p->lock);
		return -EINVAL;
	}
	fp->finished = p->flush_done >= ticket;
	if (p->fl.ticket == ticket) {
		uint64_t f = p->files_written - p->fl.files_base;
		uint64_t b = p->bytes_written - p->fl.bytes_base;

		fp->files_total = p->fl.files_total;
		fp->bytes_total = p->fl.bytes_total;
		fp->files_done = f < fp->files_total ? f : fp->files_total;
		fp->bytes_done = b < fp->bytes_total ? b : fp->bytes_total;
		if (fp->finished) {
			fp->error = p->fl.error;
			if (!fp->error) {
				fp->files_done = fp->files_total;
				fp->bytes_done = fp->bytes_total;
			}
		}
	}
	pthread_mutex_unlock(&p->lock);
	return 0;
}

/* --- stats -------------------------------------------------------------- */

void persist_get_stats(struct eng *e, struct eng_stats *s)
{
	struct persist *p = e->persist;
	struct collect c = { .e = e, .all = false };
	struct evict ev = { .e = e, .count_only = true };

	s->persist_enabled = p != NULL;
	if (!p)
		return;
	pthread_rwlock_rdlock(&e->ns.lock);
	ns_walk(&e->ns, collect_one, &c);
	evict_walk(&ev);
	pthread_rwlock_unlock(&e->ns.lock);
	s->persist_pending_files = c.n;
	s->persist_pending_bytes = c.bytes;
	s->chunks_evictable = ev.evictable;

	pthread_mutex_lock(&p->lock);
	s->persist_healthy = p->healthy;
	s->persist_files = p->files_written;
	s->persist_bytes = p->bytes_written;
	s->persist_errors = p->errors;
	snprintf(s->persist_last_error, sizeof(s->persist_last_error), "%s",
		 p->last_error);
	s->persist_last_error_time = p->last_error_time;
	s->persist_last_ok_time = p->last_ok_time;
	pthread_mutex_unlock(&p->lock);
}

/* --- mirroring of name changes ----------------------------------------- */

void persist_mirror_lock(struct eng *e)
{
	if (e->persist)
		pthread_mutex_lock(&e->persist->mirror_lock);
}

void persist_mirror_unlock(struct eng *e)
{
	if (e->persist)
		pthread_mutex_unlock(&e->persist->mirror_lock);
}

void persist_mirror_unlink(struct eng *e, const char *rel, bool dir)
{
	struct persist *p = e->persist;
	char sum[PATH_MAX + 16];

	if (!p)
		return;
	if (dir) {
		if (unlinkat(p->dirfd, rel, AT_REMOVEDIR) < 0 &&
		    errno != ENOENT)
			set_error(p, -errno, "cannot remove directory", rel);
		return;
	}
	if (sum_name(rel, sum, sizeof(sum)) == 0 &&
	    unlinkat(p->dirfd, sum, 0) < 0 && errno != ENOENT)
		set_error(p, -errno, "cannot remove", sum);
	if (unlinkat(p->dirfd, rel, 0) < 0 && errno != ENOENT)
		set_error(p, -errno, "cannot remove", rel);
}

/* Rename @from to @to in the persist dir, or drop a stale @to. */
static void mirror_move(struct persist *p, const char *from, const char *to,
			bool exchange)
{
	struct stat st;
	bool have_from = fstatat(p->dirfd, from, &st, AT_SYMLINK_NOFOLLOW) == 0;
	bool have_to = fstatat(p->dirfd, to, &st, AT_SYMLINK_NOFOLLOW) == 0;
	bool to_dir = have_to && S_ISDIR(st.st_mode);

	if (exchange && have_from && have_to) {
		if (renameat2(p->dirfd, from, p->dirfd, to,
			      RENAME_EXCHANGE) < 0)
			set_error(p, -errno, "cannot exchange", from);
		return;
	}
	if (have_from) {
		if (make_parents(p->dirfd, to) < 0 ||
		    renameat(p->dirfd, from, p->dirfd, to) < 0)
			set_error(p, -errno, "cannot rename", from);
		return;
	}
	if (exchange && have_to) {
		if (renameat(p->dirfd, to, p->dirfd, from) < 0)
			set_error(p, -errno, "cannot rename", to);
		return;
	}
	/* The namespace replaced @to with something never written back. */
	if (have_to && unlinkat(p->dirfd, to, to_dir ? AT_REMOVEDIR : 0) < 0)
		set_error(p, -errno, "cannot remove stale", to);
}

void persist_mirror_rename(struct eng *e, const char *from, const char *to,
			   bool exchange)
{
	struct persist *p = e->persist;
	char sfrom[PATH_MAX + 16], sto[PATH_MAX + 16];

	if (!p)
		return;
	if (sum_name(from, sfrom, sizeof(sfrom)) == 0 &&
	    sum_name(to, sto, sizeof(sto)) == 0)
		mirror_move(p, sfrom, sto, exchange);
	mirror_move(p, from, to, exchange);
	fsync_parent(p->dirfd, to);
}

/* --- mount-time scan ---------------------------------------------------- */

static void load_sums(struct eng *e, int dirfd, const char *name,
		      const struct stat *st, struct file *f)
{
	char sname[NAME_MAX + 16];
	struct sum_header h;
	uint32_t npieces = f->nslots, trailer, *crcs = NULL;
	int fd;
	bool ok = false;

	snprintf(sname, sizeof(sname), ".%s%s", name, RFT_SUM_SUFFIX);
	fd = openat(dirfd, sname, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		goto out;
	crcs = malloc(((size_t)npieces + 1) * sizeof(*crcs));
	if (!crcs || pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
		goto out;
	if (memcmp(h.magic, SUM_MAGIC, sizeof(SUM_MAGIC)) != 0 ||
	    h.chunk_size != e->store.chunk_size || h.npieces != npieces ||
	    h.size != (uint64_t)st->st_size ||
	    h.mtime_sec != st->st_mtim.tv_sec ||
	    h.mtime_nsec != st->st_mtim.tv_nsec)
		goto out;
	if (pread(fd, crcs, ((size_t)npieces + 1) * sizeof(*crcs),
		  sizeof(h)) != (ssize_t)(((size_t)npieces + 1) * sizeof(*crcs)))
		goto out;
	trailer = ers_crc32c(0, &h, sizeof(h));
	trailer = ers_crc32c(trailer, crcs, (size_t)npieces * sizeof(*crcs));
	if (trailer != crcs[npieces])
		goto out;
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

static int scan_dir(struct eng *e, int dirfd, struct inode *dir, int depth);

static int scan_entry(struct eng *e, int dirfd, struct inode *dir,
		      const char *name, const struct stat *st, int depth)
{
	struct inode *in;
	int rc;

	if (!S_ISDIR(st->st_mode) && !S_ISREG(st->st_mode) &&
	    !S_ISLNK(st->st_mode))
		return 0;
	if (ns_dir_find(&dir->dir, name))
		return 0;
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
				SLOT_PERSIST, file_piece_len(e, f->size, i), 0,
				SLOT_CRC_UNKNOWN, 0 };
		load_sums(e, dirfd, name, st, f);
		f->state = ENG_STATE_PERSISTED;
		f->in_persist = true;
	} else if (S_ISLNK(st->st_mode)) {
		char target[PATH_MAX];
		ssize_t n = readlinkat(dirfd, name, target, sizeof(target) - 1);

		if (n < 0 || !(in->target = strndup(target, (size_t)n)))
			in->target = strdup("");
		if (!in->target)
			return -ENOMEM;
		in->sym_persisted = true;
	}
	rc = ns_link_child(e, dir, name, in);
	if (rc < 0)
		return rc;
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
				   !strcmp(d->d_name, LOCK_FILE)))
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
	int fd = openat(p->dirfd, TMP_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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
		if (d->d_name[0] != '.')
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
	pthread_rwlock_wrlock(&e->ns.lock);
	rc = scan_dir(e, p->dirfd, e->ns.root, 0);
	pthread_rwlock_unlock(&e->ns.lock);
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

	p->lockfd = openat(p->dirfd, LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC,
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
	pthread_mutex_init(&p->mirror_lock, NULL);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->wake, NULL);
	p->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p->dirfd < 0) {
		rc = -errno;
		rft_err("persist dir %s: %s", dir, strerror(-rc));
		goto fail;
	}
	if (faccessat(p->dirfd, ".", W_OK | X_OK, AT_EACCESS) < 0 ||
	    (mkdirat(p->dirfd, TMP_DIR, 0700) < 0 && errno != EEXIST)) {
		rc = -errno;
		rft_err("persist dir %s is not writable: %s", dir,
			strerror(-rc));
		goto fail;
	}
	rc = take_dir_lock(p, dir);
	if (rc < 0) {
		rft_err("persist dir %s %s", dir,
			rc == -EBUSY ? "is in use by another reftfsd"
				     : strerror(-rc));
		goto fail;
	}
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
	uint8_t *bounce;
	int rc = 0;

	if (!p)
		return 0;
	if (p->running) {
		pthread_mutex_lock(&p->lock);
		p->stopping = true;
		pthread_cond_signal(&p->wake);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->thread, NULL);
		p->running = false;
	}
	if (mode == ENG_UNMOUNT_FLUSH_NONE)
		return 0;
	bounce = malloc(e->store.chunk_size);
	if (!bounce)
		return -ENOMEM;
	for (int i = 0; i < UNMOUNT_TRIES; i++) {
		rc = writeback_pass(e, mode == ENG_UNMOUNT_FLUSH_ALL, bounce);
		if (rc == 0)
			break;
		rft_warn("write-back at unmount failed (%s), try %d of %d",
			 strerror(-rc), i + 1, UNMOUNT_TRIES);
		usleep(e->cfg.retry_ms * 1000u);
	}
	free(bounce);
	if (rc < 0)
		rft_err("unmount: some data was not written back to %s: %s",
			e->persist_dir, strerror(-rc));
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
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->mirror_lock);
	free(p);
}
