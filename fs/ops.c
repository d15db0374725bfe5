/*
 * ops.c - FUSE low-level operations, each translated into one engine call.
 *
 * Errors come back from the engine as -errno and are turned into a reply
 * here, once.  File handles carry the engine's struct eng_file in fi->fh.
 *
 * Caching and mmap: built against libfuse 3.16 or later (the system's, or
 * Debian's source built into the tree: tools/fetch-libfuse.sh) and mounted
 * on a kernel that offers FUSE_DIRECT_IO_ALLOW_MMAP (6.6 and later), every
 * open is direct I/O (one copy, straight into or out of the arena) and the
 * kernel still maps files shared, keeping the mapping coherent with direct
 * reads and writes.  Otherwise (libfuse 3.14 cannot ask for it) shared
 * mmap of a direct I/O file fails with ENODEV, so every open goes through
 * the page cache, one per inode and so coherent across descriptors,
 * mappings and processes; the cache is kept across opens while the engine
 * says the data has not changed.  --direct-read makes read-only opens
 * direct even then, for jobs that never map a file.
 *
 * With --io-uring (libfuse 3.18+), each CPU's requests come over a ring
 * served by one thread: nothing may wait there, so a WRITE or fallocate
 * that would wait goes to lane.c's threads, and every request answered
 * from another thread is counted there (rfs_defer_begin/end) so that the
 * session does not end, and its rings go, before the answer is out.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rfs.h"

static struct rfs *rfs_of(fuse_req_t req)
{
	struct rfs *r = fuse_req_userdata(req);

#ifdef FUSE_CAP_OVER_IO_URING
	/*
	 * libfuse starts the rings after INIT is answered, or says why not in
	 * a line of its own: the first request that comes over one is the
	 * proof, for the log and "status" (whoever asked libfuse for them).
	 * One relaxed load once it is set.
	 */
	if (!atomic_load_explicit(&r->info.io_uring, memory_order_relaxed) &&
	    fuse_req_is_uring(req) &&
	    !atomic_exchange(&r->info.io_uring, true))
		rft_info("fuse: requests arrive over io_uring");
#endif
	return r;
}

static struct eng_file *fh_of(const struct fuse_file_info *fi)
{
	return (struct eng_file *)(uintptr_t)fi->fh;
}

static void reply_entry(fuse_req_t req, int rc, const struct stat *st)
{
	struct fuse_entry_param ep;

	if (rc < 0)
		return (void)fuse_reply_err(req, -rc);
	memset(&ep, 0, sizeof(ep));
	ep.ino = st->st_ino;
	ep.generation = 1;
	ep.attr = *st;
	ep.attr_timeout = rfs_of(req)->attr_timeout;
	ep.entry_timeout = rfs_of(req)->attr_timeout;
	fuse_reply_entry(req, &ep);
}

static void rfs_init(void *userdata, struct fuse_conn_info *conn)
{
	struct rfs *r = userdata;
	const char *mmap_how, *uring_how = "";

	conn->max_write = r->max_write;
	conn->max_readahead = r->max_write;
	if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
		conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	if (conn->capable & FUSE_CAP_ASYNC_DIO)
		conn->want |= FUSE_CAP_ASYNC_DIO;
#ifdef FUSE_CAP_DIRECT_IO_ALLOW_MMAP
	if (conn->capable & FUSE_CAP_DIRECT_IO_ALLOW_MMAP) {
		conn->want |= FUSE_CAP_DIRECT_IO_ALLOW_MMAP;
		r->mmap_direct = true;
		mmap_how = r->cache_small
				   ? "every open direct I/O, mmap allowed (FUSE_DIRECT_IO_ALLOW_MMAP), but sealed files up to 1 MiB read through the page cache"
				   : "every open direct I/O, mmap allowed (FUSE_DIRECT_IO_ALLOW_MMAP)";
	} else {
		mmap_how = "opens through the page cache: the kernel does not offer FUSE_DIRECT_IO_ALLOW_MMAP (6.6 and later do)";
	}
#else
	mmap_how = "opens through the page cache: this libfuse cannot ask for FUSE_DIRECT_IO_ALLOW_MMAP (3.16 and later can)";
#endif
	/* Measured slower or without effect here (docs/benchmarks.md). */
	conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE |
			FUSE_CAP_SPLICE_MOVE | FUSE_CAP_WRITEBACK_CACHE);
#ifdef FUSE_CAP_OVER_IO_URING
	/*
	 * Only when main.c chose the loop that stops the rings (libfuse's:
	 * nothing else in its API does), whatever -o or FUSE_URING_ENABLE
	 * asked of libfuse.
	 */
	if (r->io_uring && (conn->capable & FUSE_CAP_OVER_IO_URING))
		conn->want |= FUSE_CAP_OVER_IO_URING;
	else
		conn->want &= ~FUSE_CAP_OVER_IO_URING;
	uring_how = !r->io_uring ? "" :
		    conn->want & FUSE_CAP_OVER_IO_URING ?
		    "; io_uring asked for (--io-uring)" :
		    "; io_uring NOT offered by the kernel: requests over /dev/fuse";
#endif
#ifdef FUSE_CAP_PASSTHROUGH
	/* The engine's backing tmpfs decides whether it is used at all. */
	if (r->passthrough) {
		if (!(conn->capable & FUSE_CAP_PASSTHROUGH))
			rft_info("passthrough: off: the kernel does not offer "
				 "it (6.9 and later do)");
		else if (eng_pass_enable(r->eng, r->cache_small,
					 r->early_copy, RFS_PASS_QUIET_MS) == 0) {
			conn->want |= FUSE_CAP_PASSTHROUGH;
			eng_pass_in_place(r->eng, r->in_place);
		}
	}
#else
	if (r->passthrough)
		rft_info("passthrough: off: this libfuse cannot ask for it "
			 "(3.16 and later can)");
#endif
	atomic_store(&r->info.proto,
		     (unsigned)conn->proto_major << 16 | conn->proto_minor);
	rft_info("fuse: libfuse %s, kernel FUSE %u.%u; %s%s; atomic O_TRUNC %s, parallel dirops %s, async direct I/O %s%s",
		 fuse_pkgversion(), conn->proto_major, conn->proto_minor,
		 mmap_how,
		 !r->mmap_direct && r->direct_read ?
			 ", read-only opens direct I/O (--direct-read)" : "",
		 conn->want & FUSE_CAP_ATOMIC_O_TRUNC ? "yes" : "no",
		 conn->want & FUSE_CAP_PARALLEL_DIROPS ? "yes" : "no",
		 conn->want & FUSE_CAP_ASYNC_DIO ? "yes" : "no", uring_how);
}

static void rfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct stat st;
	int rc = eng_lookup(rfs_of(req)->eng, parent, name, &st);

	if (rc == -ENOENT) {
		/* A negative entry the kernel may cache like a positive one. */
		struct fuse_entry_param ep;

		memset(&ep, 0, sizeof(ep));
		ep.entry_timeout = rfs_of(req)->attr_timeout;
		return (void)fuse_reply_entry(req, &ep);
	}
	reply_entry(req, rc, &st);
}

static void rfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	eng_forget(rfs_of(req)->eng, ino, nlookup);
	fuse_reply_none(req);
}

static void rfs_forget_multi(fuse_req_t req, size_t count,
			     struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		eng_forget(rfs_of(req)->eng, forgets[i].ino,
			   forgets[i].nlookup);
	fuse_reply_none(req);
}

static void rfs_getattr(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct stat st;
	int rc = eng_getattr(rfs_of(req)->eng, ino, &st);

	if (rc < 0)
		return (void)fuse_reply_err(req, -rc);
	fuse_reply_attr(req, &st, rfs_of(req)->attr_timeout);
}

/*
 * A request that becomes an eng_call(): answered now on a single node, or
 * later from an engine thread in a group (the change goes round the
 * group's log), so that no FUSE worker waits for the network.  What the
 * reply needs (the file info of an open) is copied here: the kernel's
 * request buffers are gone once the handler returns.
 */
struct rfs_call {
	struct eng_call c;
	fuse_req_t req;
	struct fuse_file_info fi;
};

static void set_caching(fuse_req_t req, struct fuse_file_info *fi,
			const struct eng_open_info *info);
static void release(struct rfs *r, fuse_req_t req, struct eng_file *fp);

static void call_finish(struct eng_call *c, int rc)
{
	struct rfs_call *rc_ = (struct rfs_call *)c;
	fuse_req_t req = rc_->req;
	struct rfs *r = rfs_of(req);
	struct fuse_entry_param ep;

	switch (c->kind) {
	case ENG_CALL_MKNOD:
	case ENG_CALL_MKDIR:
	case ENG_CALL_SYMLINK:
	case ENG_CALL_LINK:
		reply_entry(req, rc, &c->st);
		break;
	case ENG_CALL_UNLINK:
	case ENG_CALL_RMDIR:
	case ENG_CALL_RENAME:
	case ENG_CALL_FLUSH:
	case ENG_CALL_FSYNC:
		fuse_reply_err(req, -rc);
		break;
	case ENG_CALL_SETATTR:
		if (rc < 0)
			fuse_reply_err(req, -rc);
		else
			fuse_reply_attr(req, &c->st, r->attr_timeout);
		break;
	case ENG_CALL_OPEN:
		if (rc < 0) {
			fuse_reply_err(req, -rc);
			break;
		}
		rc_->fi.fh = (uintptr_t)c->newfp;
		set_caching(req, &rc_->fi, &c->info);
		if (fuse_reply_open(req, &rc_->fi) == -ENOENT)
			release(r, NULL, c->newfp); /* interrupted */
		break;
	case ENG_CALL_CREATE:
		if (rc < 0) {
			fuse_reply_err(req, -rc);
			break;
		}
		memset(&ep, 0, sizeof(ep));
		ep.attr = c->st;
		ep.ino = c->st.st_ino;
		ep.generation = 1;
		ep.attr_timeout = r->attr_timeout;
		ep.entry_timeout = r->attr_timeout;
		rc_->fi.fh = (uintptr_t)c->newfp;
		set_caching(req, &rc_->fi, &c->info);
		if (fuse_reply_create(req, &ep, &rc_->fi) == -ENOENT) {
			release(r, NULL, c->newfp);
			eng_forget(r->eng, ep.ino, 1);
		}
		break;
	}
	free(rc_);
	rfs_defer_end(r);
}

/* Start @rc's call; it is answered and freed by call_finish, now or later. */
static void call_start(struct rfs_call *rc_)
{
	struct rfs *r = rfs_of(rc_->req);
	int rc;

	if (!rfs_defer_begin(r)) {
		fuse_reply_err(rc_->req, EIO);
		free(rc_);
		return;
	}
	rc_->c.done = call_finish;
	rc = eng_call(r->eng, &rc_->c);
	if (rc != ENG_LATER)
		call_finish(&rc_->c, rc);
}

/* A zeroed call for @req, or NULL (the request is answered ENOMEM). */
static struct rfs_call *call_new(fuse_req_t req, enum eng_call_kind kind)
{
	struct rfs_call *rc_ = calloc(1, sizeof(*rc_));

	if (!rc_) {
		fuse_reply_err(req, ENOMEM);
		return NULL;
	}
	rc_->req = req;
	rc_->c.kind = kind;
	return rc_;
}

static void rfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
			int to_set, struct fuse_file_info *fi)
{
	static const struct {
		int fuse;
		unsigned eng;
	} map[] = {
		{ FUSE_SET_ATTR_MODE, ENG_SET_MODE },
		{ FUSE_SET_ATTR_UID, ENG_SET_UID },
		{ FUSE_SET_ATTR_GID, ENG_SET_GID },
		{ FUSE_SET_ATTR_SIZE, ENG_SET_SIZE },
		{ FUSE_SET_ATTR_ATIME, ENG_SET_ATIME },
		{ FUSE_SET_ATTR_MTIME, ENG_SET_MTIME },
		{ FUSE_SET_ATTR_ATIME_NOW, ENG_SET_ATIME_NOW },
		{ FUSE_SET_ATTR_MTIME_NOW, ENG_SET_MTIME_NOW },
		{ FUSE_SET_ATTR_CTIME, ENG_SET_CTIME },
	};
	struct eng_setattr sa = {
		.mode = attr->st_mode,
		.uid = attr->st_uid,
		.gid = attr->st_gid,
		.size = attr->st_size < 0 ? 0 : (uint64_t)attr->st_size,
		.atime = attr->st_atim,
		.mtime = attr->st_mtim,
		.ctime = attr->st_ctim,
	};
	struct rfs_call *c;

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (to_set & map[i].fuse)
			sa.valid |= map[i].eng;
	if ((to_set & FUSE_SET_ATTR_SIZE) && attr->st_size < 0)
		return (void)fuse_reply_err(req, EINVAL);
	/* FUSE_CAP_HANDLE_KILLPRIV: clearing set-ID bits is ours to do. */
	if ((to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) ||
	    ((to_set & FUSE_SET_ATTR_SIZE) && fuse_req_ctx(req)->uid != 0)) {
		sa.valid |= ENG_SET_KILL_SETID;
		/* Root keeps set-group-ID on chown where group execute is off. */
		sa.kill_gid = fuse_req_ctx(req)->uid ? fuse_req_ctx(req)->gid
						     : ENG_KILL_PRIVILEGED;
	}
	c = call_new(req, ENG_CALL_SETATTR);
	if (!c)
		return;
	c->c.ino = ino;
	c->c.fp = fi ? fh_of(fi) : NULL;
	c->c.sa = sa;
	call_start(c);
}

static void rfs_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char buf[PATH_MAX + 1];
	int rc = eng_readlink(rfs_of(req)->eng, ino, buf, sizeof(buf) - 1);

	if (rc < 0)
		return (void)fuse_reply_err(req, -rc);
	buf[rc] = '\0';
	fuse_reply_readlink(req, buf);
}

static void rfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, dev_t rdev)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct rfs_call *c = call_new(req, ENG_CALL_MKNOD);

	if (!c)
		return;
	c->c.parent = parent;
	c->c.name = name;
	c->c.mode = mode;
	c->c.rdev = rdev;
	c->c.uid = ctx->uid;
	c->c.gid = ctx->gid;
	call_start(c);
}

static void rfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct rfs_call *c = call_new(req, ENG_CALL_MKDIR);

	if (!c)
		return;
	c->c.parent = parent;
	c->c.name = name;
	c->c.mode = mode;
	c->c.uid = ctx->uid;
	c->c.gid = ctx->gid;
	call_start(c);
}

static void rfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
			const char *name)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct rfs_call *c = call_new(req, ENG_CALL_SYMLINK);

	if (!c)
		return;
	c->c.parent = parent;
	c->c.name = name;
	c->c.target = link;
	c->c.uid = ctx->uid;
	c->c.gid = ctx->gid;
	call_start(c);
}

static void rfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		     const char *newname)
{
	struct rfs_call *c = call_new(req, ENG_CALL_LINK);

	if (!c)
		return;
	c->c.ino = ino;
	c->c.newparent = newparent;
	c->c.newname = newname;
	call_start(c);
}

static void rfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct rfs_call *c = call_new(req, ENG_CALL_UNLINK);

	if (!c)
		return;
	c->c.parent = parent;
	c->c.name = name;
	call_start(c);
}

static void rfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct rfs_call *c = call_new(req, ENG_CALL_RMDIR);

	if (!c)
		return;
	c->c.parent = parent;
	c->c.name = name;
	call_start(c);
}

static void rfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		       fuse_ino_t newparent, const char *newname,
		       unsigned int flags)
{
	struct rfs_call *c;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return (void)fuse_reply_err(req, EINVAL);
	c = call_new(req, ENG_CALL_RENAME);
	if (!c)
		return;
	if (flags & RENAME_NOREPLACE)
		c->c.flags |= ENG_RENAME_NOREPLACE;
	if (flags & RENAME_EXCHANGE)
		c->c.flags |= ENG_RENAME_EXCHANGE;
	c->c.parent = parent;
	c->c.name = name;
	c->c.newparent = newparent;
	c->c.newname = newname;
	call_start(c);
}

#ifdef FUSE_CAP_PASSTHROUGH
/* Close the backing ids of opens that were never answered; @req alive. */
static void close_stale_ids(fuse_req_t req)
{
	struct rfs *r = rfs_of(req);

	if (!r->passthrough)
		return;
	pthread_mutex_lock(&r->stale_lock);
	while (r->nstale)
		fuse_passthrough_close(req, r->stale_ids[--r->nstale]);
	pthread_mutex_unlock(&r->stale_lock);
}
#endif

/* Release @fp; a backing id that goes with it is closed (with @req if it
 * is still alive, else with the next request that is), and so are those
 * of opens that were never answered. */
static void release(struct rfs *r, fuse_req_t req, struct eng_file *fp)
{
	int id = eng_release(r->eng, fp);

#ifdef FUSE_CAP_PASSTHROUGH
	if (req)
		close_stale_ids(req);
	if (id <= 0)
		return;
	if (req) {
		fuse_passthrough_close(req, id);
		return;
	}
	pthread_mutex_lock(&r->stale_lock);
	if (r->nstale < sizeof(r->stale_ids) / sizeof(r->stale_ids[0]))
		r->stale_ids[r->nstale++] = id;
	else
		rft_err("passthrough: backing id %d left registered until "
			"unmount", id);
	pthread_mutex_unlock(&r->stale_lock);
#else
	(void)r;
	(void)req;
	(void)id;
#endif
}

/*
 * An open the engine passes through: the backing file registered with
 * the kernel by the first open of it, its id shared by all.  False: this
 * one goes direct after all.
 */
static bool set_passthrough(fuse_req_t req, struct fuse_file_info *fi,
			    const struct eng_open_info *info)
{
#ifdef FUSE_CAP_PASSTHROUGH
	struct rfs *r = rfs_of(req);
	struct eng_file *fp = (struct eng_file *)(uintptr_t)fi->fh;
	int id = info->pass_id;

	if (info->pass_fd < 0)
		return false;
	if (id <= 0) {
		int mine = fuse_passthrough_open(req, info->pass_fd);

		id = eng_pass_registered(r->eng, fp, mine);
		if (mine > 0 && id != mine)
			fuse_passthrough_close(req, mine);
	}
	if (id <= 0)
		return false;
	close_stale_ids(req);
	fi->backing_id = id;
	/* The kernel fails a passthrough open with keep_cache. */
	fi->keep_cache = 0;
	fi->direct_io = 0;
	fi->noflush = (fi->flags & O_ACCMODE) == O_RDONLY;
	return true;
#else
	return false;
#endif
}

static void set_caching(fuse_req_t req, struct fuse_file_info *fi,
			const struct eng_open_info *info)
{
	struct rfs *r = rfs_of(req);
	bool rdonly = (fi->flags & O_ACCMODE) == O_RDONLY;
	bool small = rdonly && info->sealed && info->size <= r->cache_small;

	if (set_passthrough(req, fi, info))
		return;
	/* Writers' FLUSH seals the file; a reader's has nothing to do. */
	fi->noflush = rdonly;
	/*
	 * Direct where the kernel allows mmap of direct files, except for
	 * small sealed files opened to be read: those the kernel answers
	 * from its page cache the next time, with no READ at all.
	 */
	if ((r->mmap_direct && !small) || (rdonly && r->direct_read)) {
		fi->direct_io = 1;
		return;
	}
	fi->keep_cache = info->cache_valid;
}

static void rfs_open(fuse_req_t req, fuse_ino_t ino,
		     struct fuse_file_info *fi)
{
	struct rfs_call *c = call_new(req, ENG_CALL_OPEN);

	if (!c)
		return;
	c->fi = *fi;
	c->c.ino = ino;
	c->c.flags = fi->flags;
	call_start(c);
}

static void rfs_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		       mode_t mode, struct fuse_file_info *fi)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct rfs_call *c = call_new(req, ENG_CALL_CREATE);

	if (!c)
		return;
	c->fi = *fi;
	c->c.parent = parent;
	c->c.name = name;
	c->c.mode = mode;
	c->c.uid = ctx->uid;
	c->c.gid = ctx->gid;
	c->c.flags = fi->flags;
	call_start(c);
}

/* The engine's reply to a read: now, or later from a fetch thread. */
static int reply_read(void *ctx, const struct iovec *iov, int cnt, int err)
{
	fuse_req_t req = ctx;
	struct rfs *r = rfs_of(req);
	int rc;

	if (err < 0)
		rc = fuse_reply_err(req, -err);
	else if (cnt == 0)
		rc = fuse_reply_buf(req, NULL, 0);
	else
		rc = fuse_reply_iov(req, iov, cnt);
	rfs_defer_end(r);
	return rc;
}

/* Answered now, or later from an engine thread (a read from the persist
 * dir or a peer). */
static void rfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct rfs *r = rfs_of(req);
	int rc;

	if (!rfs_defer_begin(r))
		return (void)fuse_reply_err(req, EIO);
	rc = eng_read(r->eng, fh_of(fi), size, off, reply_read, req);
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		rfs_defer_end(r);
	}
}

/* A WRITE or fallocate that may wait, on a lane thread (io_uring). */
struct lane_write {
	struct rfs_lane_job job;	/* first: run() gets it */
	fuse_req_t req;
	struct eng_file *fp;
	const char *buf;	/* a WRITE's data, in the request's ring entry:
				   ours until the reply; NULL: fallocate */
	off_t off, len;		/* the range */
	unsigned falloc;	/* ENG_FALLOC_* */
};

static void lane_write_run(struct rfs_lane_job *j)
{
	struct lane_write *w = (struct lane_write *)j;
	struct rfs *r = rfs_of(w->req);
	ssize_t n;

	if (!w->buf) {
		fuse_reply_err(w->req, -eng_fallocate(r->eng, w->fp, w->falloc,
						      w->off, w->len));
	} else {
		n = eng_write(r->eng, w->fp, w->buf, (size_t)w->len, w->off);
		if (n < 0)
			fuse_reply_err(w->req, (int)-n);
		else
			fuse_reply_write(w->req, (size_t)n);
	}
	free(w);
	rfs_defer_end(r);
}

/*
 * Hand a WRITE (@buf) or a fallocate (@buf NULL, @falloc) of [@off, @off +
 * @len) to the lane: 0, or -errno when it must be answered now.
 */
static int lane_write_push(fuse_req_t req, struct eng_file *fp,
			   const char *buf, off_t off, off_t len,
			   unsigned falloc)
{
	struct lane_write *w = malloc(sizeof(*w));
	int rc;

	if (!w)
		return -ENOMEM;
	*w = (struct lane_write){ .job.run = lane_write_run, .req = req,
				  .fp = fp, .buf = buf, .off = off, .len = len,
				  .falloc = falloc };
	rc = rfs_lane_push(rfs_of(req), &w->job);
	if (rc < 0)
		free(w);
	return rc;
}

static void rfs_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		      size_t size, off_t off, struct fuse_file_info *fi)
{
	void *rbuf = rfs_loop_buffer(buf, size);
	bool queued = false;
	ssize_t n;

	/*
	 * Direct I/O writes leave clearing set-ID bits to us; libfuse 3.14
	 * drops the kernel's FUSE_WRITE_KILL_SUIDGID, so decide as the kernel
	 * does, with root standing for CAP_FSETID.
	 */
	if (fuse_req_ctx(req)->uid != 0) {
		int rc = eng_write_kill_setid(rfs_of(req)->eng, fh_of(fi),
					      fuse_req_ctx(req)->gid);

		if (rc < 0)
			return (void)fuse_reply_err(req, -rc);
		/* The kernel's cached mode is stale now (never blocks here:
		 * no writeback cache). */
		if (rc > 0)
			fuse_lowlevel_notify_inval_inode(rfs_of(req)->se, ino,
							 -1, 0);
	}
	if (rfs_of(req)->lane) {
		/*
		 * A ring thread serves every caller on its CPU: what would
		 * wait (memory, a read-in, queued copies) goes to the lane.
		 * Stopping: done here, waits and all.
		 */
		n = eng_write_nowait(rfs_of(req)->eng, fh_of(fi), buf, size,
				     off);
		if (n == -EAGAIN) {
			if (lane_write_push(req, fh_of(fi), buf, off,
					    (off_t)size, 0) == 0)
				return;
			n = eng_write(rfs_of(req)->eng, fh_of(fi), buf, size,
				      off);
		}
	} else if (rbuf) {
		/* Answer before the copy: it overlaps the writer's next
		 * request. */
		n = eng_write_async(rfs_of(req)->eng, fh_of(fi), buf, size, off,
				    rfs_loop_give_back, rbuf, &queued);
		if (queued)
			rfs_loop_keep();
	} else {
		n = eng_write(rfs_of(req)->eng, fh_of(fi), buf, size, off);
	}

	if (n < 0)
		return (void)fuse_reply_err(req, (int)-n);
	fuse_reply_write(req, (size_t)n);
}

static void rfs_flush(fuse_req_t req, fuse_ino_t ino,
		      struct fuse_file_info *fi)
{
	struct rfs_call *c = call_new(req, ENG_CALL_FLUSH);

	if (!c)
		return;
	c->c.fp = fh_of(fi);
	call_start(c);
}

static void rfs_release(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	release(rfs_of(req), req, fh_of(fi));
	fuse_reply_err(req, 0);
}

static void rfs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode,
			  off_t off, off_t len, struct fuse_file_info *fi)
{
	unsigned flags = 0;

	if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE))
		return (void)fuse_reply_err(req, EOPNOTSUPP);
	if (mode & FALLOC_FL_KEEP_SIZE)
		flags |= ENG_FALLOC_KEEP_SIZE;
	if (mode & FALLOC_FL_PUNCH_HOLE)
		flags |= ENG_FALLOC_PUNCH_HOLE;
	/* It may wait for memory: never on a ring thread. */
	if (rfs_of(req)->lane &&
	    lane_write_push(req, fh_of(fi), NULL, off, len, flags) == 0)
		return;
	fuse_reply_err(req, -eng_fallocate(rfs_of(req)->eng, fh_of(fi), flags,
					   off, len));
}

static void rfs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		      struct fuse_file_info *fi)
{
	struct rfs_call *c = call_new(req, ENG_CALL_FSYNC);

	(void)datasync; /* the same: size and data go together */
	if (!c)
		return;
	c->c.fp = fh_of(fi);
	call_start(c);
}

static void rfs_opendir(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct eng_dir *d;
	int rc = eng_opendir(rfs_of(req)->eng, ino, &d);

	if (rc < 0)
		return (void)fuse_reply_err(req, -rc);
	fi->fh = (uintptr_t)d;
	if (fuse_reply_open(req, fi) == -ENOENT)
		eng_releasedir(rfs_of(req)->eng, d);
}

struct dir_ctx {
	fuse_req_t req;
	char *buf;
	size_t size, used;
};

static int add_dirent(void *arg, const char *name, const struct stat *st,
		      off_t next_off)
{
	struct dir_ctx *c = arg;
	size_t n = fuse_add_direntry(c->req, c->buf + c->used,
				     c->size - c->used, name, st, next_off);

	if (n > c->size - c->used)
		return 1;
	c->used += n;
	return 0;
}

static void rfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
			off_t off, struct fuse_file_info *fi)
{
	struct dir_ctx c = { req, malloc(size), size, 0 };
	int rc;

	if (!c.buf)
		return (void)fuse_reply_err(req, ENOMEM);
	rc = eng_readdir(rfs_of(req)->eng,
			 (struct eng_dir *)(uintptr_t)fi->fh, off, add_dirent,
			 &c);
	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_buf(req, c.buf, c.used);
	free(c.buf);
}

static void rfs_releasedir(fuse_req_t req, fuse_ino_t ino,
			   struct fuse_file_info *fi)
{
	eng_releasedir(rfs_of(req)->eng, (struct eng_dir *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void rfs_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
			 struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

static void rfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;
	int rc = eng_statfs(rfs_of(req)->eng, &sv);

	if (rc < 0)
		return (void)fuse_reply_err(req, -rc);
	fuse_reply_statfs(req, &sv);
}

/*
 * The one extended attribute: user.reftfs.state, on files and directories,
 * what reftfs-admin checkpoints says of them as JSON, so that a loader can
 * check a checkpoint with getxattr alone.  Nothing can be set.
 *
 * Only where every open is direct I/O (mmap_direct): a write through the
 * page cache makes the kernel ask for security.capability first, a
 * GETXATTR round trip per write(2) (measured: 1064 for 1064 writes with
 * libfuse 3.14), unless the first answer is ENOSYS, which ends the
 * kernel's asking for the mount.  There the mount has no extended
 * attributes.
 */
#define RFS_XATTR_STATE "user.reftfs.state"

static void rfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			 size_t size)
{
	struct eng_ckpt_info ci;
	const char *st;
	char buf[512];
	int rc, n;

	if (!rfs_of(req)->mmap_direct)
		return (void)fuse_reply_err(req, ENOSYS);
	if (strcmp(name, RFS_XATTR_STATE))
		return (void)fuse_reply_err(req, ENODATA);
	rc = eng_ino_state(rfs_of(req)->eng, ino, &ci);
	if (rc < 0)
		return (void)fuse_reply_err(req, -rc);
	st = ci.state == ENG_STATE_LOST && ci.seq ? "incomplete"
						  : eng_state_name(ci.state);
	n = snprintf(buf, sizeof(buf),
		     "{\"state\":\"%s\",\"files\":%llu,\"bytes\":%llu,"
		     "\"writing\":%llu,\"sealed\":%llu,\"protected\":%llu,"
		     "\"persisted\":%llu,\"lost\":%llu}",
		     st ? st : "unknown", (unsigned long long)ci.files,
		     (unsigned long long)ci.bytes,
		     (unsigned long long)ci.files_writing,
		     (unsigned long long)ci.files_sealed,
		     (unsigned long long)ci.files_protected,
		     (unsigned long long)ci.files_persisted,
		     (unsigned long long)ci.files_lost);
	if (size == 0)
		fuse_reply_xattr(req, (size_t)n);
	else if ((size_t)n > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, buf, (size_t)n);
}

static void rfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct eng_ckpt_info ci;
	int rc = rfs_of(req)->mmap_direct
			 ? eng_ino_state(rfs_of(req)->eng, ino, &ci)
			 : -ENOSYS;
	size_t n = rc == 0 ? sizeof(RFS_XATTR_STATE) : 0;

	if (rc < 0 && rc != -ENODATA)
		fuse_reply_err(req, -rc);
	else if (size == 0)
		fuse_reply_xattr(req, n);
	else if (n > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, RFS_XATTR_STATE, n);
}

const struct fuse_lowlevel_ops rfs_oper = {
	.init = rfs_init,
	.lookup = rfs_lookup,
	.forget = rfs_forget,
	.forget_multi = rfs_forget_multi,
	.getattr = rfs_getattr,
	.setattr = rfs_setattr,
	.readlink = rfs_readlink,
	.mknod = rfs_mknod,
	.mkdir = rfs_mkdir,
	.symlink = rfs_symlink,
	.link = rfs_link,
	.unlink = rfs_unlink,
	.rmdir = rfs_rmdir,
	.rename = rfs_rename,
	.open = rfs_open,
	.create = rfs_create,
	.read = rfs_read,
	.write = rfs_write,
	.flush = rfs_flush,
	.release = rfs_release,
	.fsync = rfs_fsync,
	.fallocate = rfs_fallocate,
	.opendir = rfs_opendir,
	.readdir = rfs_readdir,
	.releasedir = rfs_releasedir,
	.fsyncdir = rfs_fsyncdir,
	.statfs = rfs_statfs,
	.getxattr = rfs_getxattr,
	.listxattr = rfs_listxattr,
};
