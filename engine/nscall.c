/*
 * nscall.c - the namespace calls: lookup, getattr, setattr, the makes,
 * open and create, link, unlink, rmdir, rename, readlink, statfs,
 * readdir, and ns_apply, which applies one namespace operation (struct
 * nsop) in the order a single node or the group's log gives it.  Above the tree (ns.c) and the
 * files; the tiers hear of what changed through core's events (names
 * changed under eng->names_lock), passthrough through its own calls.
 *
 * Changes to names (unlink, rmdir, rename) are mirrored into the persist
 * dir under eng->names_lock, so a copy written back earlier moves
 * with its name and never reappears under an old one after a remount.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_i.h"
#include "pass.h"
#include "persist.h"

/* Remove @de from @dir; the inode is freed if nothing else holds it. */
static void unlink_dentry(struct eng *e, struct inode *dir, struct dentry *de,
			  bool free_inode)
{
	struct inode *child = de->inode;

	ns_unlink_child(dir, de);
	if (child->nlink == 0 && S_ISREG(child->mode))
		pass_unlinked(e, child); /* no copy of it to wait for */
	if (free_inode)
		ns_maybe_free(e, child);
}

void ns_fill_stat(struct eng *e, struct inode *in, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = in->ino;
	st->st_mode = in->mode;
	st->st_uid = in->uid;
	st->st_gid = in->gid;
	st->st_atim = in->atime;
	st->st_blksize = e->store.chunk_size;
	if (S_ISDIR(in->mode)) {
		st->st_nlink = 2 + in->dir.nsubdirs;
		st->st_size = 4096;
		st->st_mtim = in->mtime;
		st->st_ctim = in->ctime;
	} else if (S_ISREG(in->mode)) {
		struct file *f = &in->file;

		st->st_nlink = in->nlink;
		file_rdlock(f);
		st->st_size = (off_t)f->size;
		st->st_blocks = (blkcnt_t)(file_ram_bytes(e, f) / 512);
		st->st_mtim = in->mtime;
		st->st_ctim = in->ctime;
		/*
		 * Writers passing through: the backing file is the file.
		 * Looked at under the file's lock: a writer's take rebuilds
		 * the engine's bytes under it piece by piece, and its last
		 * writer is counted until the take is done, so no size read
		 * here is one a take left half made (pass_fuzz found a stat
		 * that read 2 MiB of a 3 MiB file after its writer closed).
		 */
		if (pass_on(e))
			pass_stat(e, f, st);
		file_unlock(f);
	} else {
		st->st_nlink = in->nlink;
		st->st_rdev = in->rdev;
		st->st_size = S_ISLNK(in->mode) ? (off_t)strlen(in->target) : 0;
		st->st_mtim = in->mtime;
		st->st_ctim = in->ctime;
	}
}

/* Look @parent up and check it is a live directory; ns->lock held. */
static int get_dir(struct eng *e, uint64_t ino, struct inode **out)
{
	struct inode *in = ns_find(&e->ns, ino);

	if (!in)
		return -ENOENT;
	if (!S_ISDIR(in->mode))
		return -ENOTDIR;
	if (in != e->ns.root && in->nlink == 0)
		return -ENOENT;
	*out = in;
	return 0;
}

static void touch_dir(struct inode *dir, const struct timespec *now)
{
	dir->mtime = *now;
	dir->ctime = *now;
}

/* --- namespace calls ---------------------------------------------------- */

int eng_lookup(struct eng *e, uint64_t parent, const char *name,
	       struct stat *st)
{
	struct inode *dir;
	struct dentry *de;
	int rc = eng_fresh(e);

	if (rc < 0)
		return rc;

	/* nlookup changes under the read lock would race: take it for write. */
	ns_wrlock(e);
	rc = get_dir(e, parent, &dir);
	if (rc < 0)
		goto out;
	if (strlen(name) > NAME_MAX) {
		rc = -ENAMETOOLONG;
		goto out;
	}
	de = ns_dir_find(&dir->dir, name);
	if (!de) {
		rc = -ENOENT;
		goto out;
	}
	de->inode->nlookup++;
	ns_fill_stat(e, de->inode, st);
out:
	ns_unlock(e);
	return rc;
}

void eng_forget(struct eng *e, uint64_t ino, uint64_t nlookup)
{
	struct inode *in;

	ns_wrlock(e);
	in = ns_find(&e->ns, ino);
	if (in && in != e->ns.root) {
		in->nlookup = in->nlookup > nlookup ? in->nlookup - nlookup : 0;
		ns_maybe_free(e, in);
	}
	ns_unlock(e);
}

int eng_getattr(struct eng *e, uint64_t ino, struct stat *st)
{
	struct inode *in;
	/*
	 * The root's own attributes are answered before the join too, so
	 * that stat(2) of a mount point (mountpoint(1), df, monitoring)
	 * never waits for the group.
	 */
	int rc = ino == RFT_ROOT_INO && !eng_group_caught_up(e) ? 0
							       : eng_fresh(e);

	if (rc < 0)
		return rc;

	ns_rdlock(e);
	in = ns_find(&e->ns, ino);
	if (in)
		ns_fill_stat(e, in, st);
	else
		rc = -ENOENT;
	ns_unlock(e);
	return rc;
}

/* The time changes of @sa at @now on @mtime and @ctime. */
static void set_mc(struct timespec *mtime, struct timespec *ctime,
		   const struct eng_setattr *sa, const struct timespec *now)
{
	if (sa->valid & ENG_SET_MTIME)
		*mtime = sa->mtime;
	if (sa->valid & ENG_SET_MTIME_NOW)
		*mtime = *now;
	*ctime = (sa->valid & ENG_SET_CTIME) ? sa->ctime : *now;
}

/*
 * Apply the time changes of @sa at @now; any change sets ctime.  A file's
 * times in the log's record change alike (struct file_log): those of a
 * draft here are its own.  A file's lock held for writing.
 */
static void set_times(struct inode *in, const struct eng_setattr *sa,
		      const struct timespec *now)
{
	if (sa->valid & ENG_SET_ATIME)
		in->atime = sa->atime;
	if (sa->valid & ENG_SET_ATIME_NOW)
		in->atime = *now;
	set_mc(&in->mtime, &in->ctime, sa, now);
	if (S_ISREG(in->mode)) {
		struct timespec m = in->file.log.mtime, c = in->file.log.ctime;

		set_mc(&m, &c, sa, now);
		file_log_times(&in->file, &m, &c);
	}
}

/* A name of @in changed at @now (a link, an unlink, a rename). */
static void name_changed(struct inode *in, const struct timespec *now)
{
	in->ctime = *now;
	if (S_ISREG(in->mode))
		file_log_times(&in->file, NULL, now);
}

static int apply_setattr(struct eng *e, const struct nsop *op,
			 struct nsop_out *out)
{
	const struct eng_setattr *sa = &op->sa;
	const unsigned meta = ENG_SET_MODE | ENG_SET_UID | ENG_SET_GID |
			      ENG_SET_ATIME | ENG_SET_MTIME |
			      ENG_SET_ATIME_NOW | ENG_SET_MTIME_NOW |
			      ENG_SET_CTIME | ENG_SET_KILL_SETID;
	struct file *f = NULL;
	struct inode *in, *cut = NULL;
	bool kick = false, pass_trunc = false;
	int rc = 0;

	/* Its bytes and its backing file's change with no take between. */
	if ((sa->valid & ENG_SET_SIZE) && pass_on(e))
		cut = pass_cut_begin(e, op->ino);
again:
	ns_wrlock(e);
	in = ns_find(&e->ns, op->ino);
	if (!in) {
		rc = -ENOENT;
		goto out;
	}
	if ((sa->valid & ENG_SET_SIZE) && !S_ISREG(in->mode)) {
		rc = S_ISDIR(in->mode) ? -EISDIR : -EINVAL;
		goto out;
	}
	if ((sa->valid & ENG_SET_SIZE) && sa->size > RFT_MAX_FILE_SIZE) {
		rc = -EFBIG;
		goto out;
	}
	if (S_ISREG(in->mode)) {
		f = &in->file;
		if (!(sa->valid & ENG_SET_SIZE)) {
			file_wrlock(f);
		} else if (!file_wrlock_drained(e, f)) {
			/*
			 * A truncate must follow the copies queued before
			 * it; wait for them with no lock held.
			 */
			in->holds++;
			ns_unlock(e);
			file_wait_writes(e, f);
			ns_unhold(e, in);
			goto again;
		}
	}
	if (sa->valid & ENG_SET_MODE)
		ns_set_mode(in, (in->mode & S_IFMT) | (sa->mode & 07777));
	else if ((sa->valid & ENG_SET_KILL_SETID) && S_ISREG(in->mode))
		ns_set_mode(in, in->mode & ~(mode_t)(
			S_ISUID | ((in->mode & S_IXGRP) ||
					   (sa->kill_gid != ENG_KILL_PRIVILEGED &&
					    sa->kill_gid != in->gid)
				   ? S_ISGID
				   : 0)));
	if (sa->valid & ENG_SET_UID)
		in->uid = sa->uid;
	if (sa->valid & ENG_SET_GID)
		in->gid = sa->gid;

	if (f) {
		if ((sa->valid & ENG_SET_SIZE) && e->gops &&
		    !(op->node == e->node && op->inc == e->inc)) {
			/*
			 * Another node's truncate (or this node's from an
			 * earlier daemon, replayed): the proposer seals the
			 * result (its draft); until its SEAL this node shows
			 * the group's version, whose pieces the proposer may
			 * need to fetch.  Not marked written there: a draft
			 * that gives way (file_revert) seals nothing that
			 * would end the mark.
			 */
		} else if (sa->valid & ENG_SET_SIZE) {
			/* In a group, a draft here until its seal. */
			rc = file_truncate_locked(e, f, sa->size);
			if (rc == 0)
				in->mtime = op->now;
			/* Opens passing through see its backing file. */
			pass_trunc = rc == 0 && pass_on(e);
		}
		if (rc == 0) {
			set_times(in, sa, &op->now);
			/*
			 * A write-back in flight copied the old attributes:
			 * the new metadata version keeps it from counting.
			 */
			if (sa->valid & meta) {
				f->meta_version++;
				file_log_meta_changed(f);
			}
			/* The log's record of it: a closed file's change. */
			file_log_sealed_as_is(f);
			/* Reseal after a truncate of a closed file. */
			if (f->writers == 0 && f->dur.sealed != f->version)
				file_seal_locked(e, f);
			/* A closed file's change goes to the tiers again. */
			kick = f->writers == 0 && !file_persisted(f);
		}
		file_unlock(f);
	} else {
		set_times(in, sa, &op->now);
		/* Directories and nodes: their metadata goes again. */
		in->node_version++;
		if (in->node_persisted) {
			in->node_persisted = false;
			kick = true;
		}
	}
	/* pass_trunc: @cut is @in, held, so it stays ours past the lock. */
	if (rc == 0 && out && !pass_trunc)
		ns_fill_stat(e, in, &out->st);
out:
	ns_unlock(e);
	if (pass_trunc) {
		/* The backing file's I/O with no lock of ours held. */
		pass_truncate(e, in, sa->size);
		if (out) {
			ns_rdlock(e);
			ns_fill_stat(e, in, &out->st);
			ns_unlock(e);
		}
	}
	if (kick)
		eng_post_dirty(e, in);
	if (cut)
		pass_cut_end(e, cut);
	return rc;
}

static void call_free(struct eng_call *c, int rc)
{
	free(c);
}

int eng_write_kill_setid(struct eng *e, struct eng_file *fp, gid_t gid)
{
	struct eng_call *c;
	int rc;

	if (!atomic_load(&fp->inode->setid))
		return 0;
	/*
	 * In a group the change goes round the log: the write goes on
	 * without waiting for it (the caller is a FUSE worker).
	 */
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->kind = ENG_CALL_SETATTR;
	c->ino = fp->inode->ino;
	c->fp = fp;
	c->sa.valid = ENG_SET_KILL_SETID;
	c->sa.kill_gid = gid;
	c->done = call_free;
	rc = eng_call(e, c);
	if (rc != ENG_LATER)
		free(c);
	return rc < 0 ? rc : 1;
}

int ns_make_entry(struct eng *e, const struct nsop *op, mode_t mode,
		  struct inode **out)
{
	struct inode *dir, *in;
	int rc;

	rc = get_dir(e, op->parent, &dir);
	if (rc < 0)
		return rc;
	rc = ns_name_check(e, dir, op->name, mode);
	if (rc < 0)
		return rc;
	if (ns_dir_find(&dir->dir, op->name))
		return -EEXIST;
	in = ns_new_inode_at(e, mode, op->uid, op->gid, &op->now,
			     op->file_id);
	if (!in)
		return -ENOMEM;
	/* New entries in a set-group-ID directory take its group. */
	if (dir->mode & S_ISGID) {
		in->gid = dir->gid;
		if (S_ISDIR(mode))
			in->mode |= S_ISGID;
	}
	if (S_ISREG(mode)) {
		in->file.owner = op->node;
		in->file.name_hash = pass_name_hash(op->name);
	}
	rc = ns_link_child(e, dir, op->name, in, true);
	if (rc < 0) {
		in->nlink = 0;
		ns_maybe_free(e, in);
		return rc;
	}
	touch_dir(dir, &op->now);
	*out = in;
	return 0;
}

/* MKNOD, MKDIR, SYMLINK. */
static int apply_make(struct eng *e, const struct nsop *op,
		      struct nsop_out *out)
{
	mode_t mode = op->mode;
	struct inode *in;
	char *t = NULL;
	int rc;

	if (op->kind == NSOP_MKDIR) {
		mode = S_IFDIR | (mode & 07777);
	} else if (op->kind == NSOP_SYMLINK) {
		mode = S_IFLNK | 0777;
		if (!op->target || strlen(op->target) >= PATH_MAX)
			return -ENAMETOOLONG;
		t = strdup(op->target);
		if (!t)
			return -ENOMEM;
	} else if (!S_ISREG(mode) && !S_ISFIFO(mode) && !S_ISSOCK(mode) &&
		   !S_ISCHR(mode) && !S_ISBLK(mode)) {
		/* As tmpfs: files, FIFOs, sockets and device nodes. */
		return -EINVAL;
	}
	ns_wrlock(e);
	rc = ns_make_entry(e, op, mode, &in);
	if (rc == 0) {
		if (S_ISREG(mode)) {
			file_dur_sealed(&in->file);
			file_log_sealed_as_is(&in->file);
		} else if (S_ISCHR(mode) || S_ISBLK(mode)) {
			in->rdev = op->rdev;
		} else if (S_ISLNK(mode)) {
			in->target = t, t = NULL;
		}
		if (out) {
			in->nlookup++;
			ns_fill_stat(e, in, &out->st);
		}
	}
	ns_unlock(e);
	free(t);
	/* Empty directories and nodes are kept in the persist dir too. */
	if (rc == 0)
		eng_post_dirty(e, in);
	return rc;
}

/* Path of @parent/@name relative to the root; ns->lock held. */
static int child_path(struct eng *e, struct inode *parent, const char *name,
		      char *buf, size_t size)
{
	size_t len;
	int rc = ns_path(&e->ns, parent, buf, size);

	if (rc < 0)
		return rc;
	len = strlen(buf);
	if (len + strlen(name) + 2 > size)
		return -ENAMETOOLONG;
	if (len)
		buf[len++] = '/';
	strcpy(buf + len, name);
	return 0;
}

static int apply_link(struct eng *e, const struct nsop *op,
		      struct nsop_out *out, bool remote)
{
	char from[PATH_MAX], to[PATH_MAX];
	struct inode *in, *dir;
	bool mirror = false;
	int rc;

	eng_names_lock(e);
	ns_wrlock(e);
	in = ns_find(&e->ns, op->ino);
	if (in && S_ISDIR(in->mode)) {
		rc = -EPERM;
		goto out;
	}
	if (!in || in->nlink == 0) {
		rc = -ENOENT;
		goto out;
	}
	if (in->nlink >= RFT_LINK_MAX) {
		rc = -EMLINK;
		goto out;
	}
	rc = get_dir(e, op->newparent, &dir);
	if (rc == 0)
		rc = ns_name_check(e, dir, op->newname, in->mode);
	if (rc == 0 && ns_dir_find(&dir->dir, op->newname))
		rc = -EEXIST;
	if (rc < 0)
		goto out;
	mirror = ns_path(&e->ns, in, from, sizeof(from)) == 0 &&
		 child_path(e, dir, op->newname, to, sizeof(to)) == 0;
	/* One more name; the primary one, where its copy lives, stays. */
	rc = ns_link_child(e, dir, op->newname, in, false);
	if (rc < 0)
		goto out;
	touch_dir(dir, &op->now);
	name_changed(in, &op->now);
	if (out) {
		in->nlookup++;
		ns_fill_stat(e, in, &out->st);
	}
	in->holds++;
out:
	ns_unlock(e);
	if (rc == 0) {
		if (mirror) {
			struct eng_ev ev = { .kind = EV_LINKED, .in = in,
					     .from = from, .to = to,
					     .remote = remote };

			eng_post(e, &ev);
		}
		ns_unhold(e, in);
	}
	eng_names_unlock(e);
	return rc;
}

/* UNLINK, RMDIR. */
static int apply_remove(struct eng *e, const struct nsop *op, bool remote)
{
	bool want_dir = op->kind == NSOP_RMDIR;
	char rel[PATH_MAX];
	struct inode *dir, *in = NULL;
	struct dentry *de;
	bool open = false, last = true;
	int rc;

	eng_names_lock(e);
	ns_wrlock(e);
	rc = get_dir(e, op->parent, &dir);
	if (rc < 0)
		goto out;
	de = ns_dir_find(&dir->dir, op->name);
	if (!de) {
		rc = -ENOENT;
		goto out;
	}
	in = de->inode;
	if (want_dir && !S_ISDIR(in->mode)) {
		rc = -ENOTDIR;
		goto out;
	}
	if (!want_dir && S_ISDIR(in->mode)) {
		rc = -EISDIR;
		goto out;
	}
	if (want_dir && in->dir.count) {
		rc = -ENOTEMPTY;
		goto out;
	}
	if (child_path(e, dir, op->name, rel, sizeof(rel)) < 0)
		rel[0] = '\0';
	/* Kept alive for the mirror, which decides what its copy needs. */
	in->holds++;
	open = in->opens > 0;
	unlink_dentry(e, dir, de, true);
	last = in->nlink == 0;
	if (!last)
		name_changed(in, &op->now);
	touch_dir(dir, &op->now);
out:
	ns_unlock(e);
	if (rc == 0) {
		if (rel[0]) {
			struct eng_ev ev = { .kind = EV_UNLINKED, .in = in,
					     .from = rel, .dir = want_dir,
					     .open = open || !last,
					     .last = last, .remote = remote };

			eng_post(e, &ev);
		}
		ns_unhold(e, in);
	}
	eng_names_unlock(e);
	return rc;
}

/* Is @a an ancestor of (or equal to) @b?  ns->lock held. */
static bool is_ancestor(const struct inode *a, const struct inode *b)
{
	for (; b; b = b->parent)
		if (a == b)
			return true;
	return false;
}

/*
 * RENAME.  @moved_dir: set when a directory moved (the source, or the
 * target of an exchange), whose old name another node's kernel must drop.
 */
static int apply_rename(struct eng *e, const struct nsop *op, bool remote,
			bool *moved_dir)
{
	const char *name = op->name, *newname = op->newname;
	unsigned flags = op->flags;
	char from[PATH_MAX], to[PATH_MAX];
	struct inode *sdir, *ddir, *src = NULL, *dst = NULL;
	struct dentry *sde, *dde;
	bool mirror = false, dst_open = false, held = false;
	int rc;

	if ((flags & ENG_RENAME_NOREPLACE) && (flags & ENG_RENAME_EXCHANGE))
		return -EINVAL;
	if (flags & ~(ENG_RENAME_NOREPLACE | ENG_RENAME_EXCHANGE))
		return -EINVAL;

	eng_names_lock(e);
	ns_wrlock(e);
	rc = get_dir(e, op->parent, &sdir);
	if (rc == 0)
		rc = get_dir(e, op->newparent, &ddir);
	if (rc < 0)
		goto out;
	sde = ns_dir_find(&sdir->dir, name);
	if (!sde) {
		rc = -ENOENT;
		goto out;
	}
	src = sde->inode;
	rc = ns_name_check(e, ddir, newname, src->mode);
	if (rc < 0)
		goto out;
	dde = ns_dir_find(&ddir->dir, newname);
	if (dde)
		dst = dde->inode;
	if (dst && (flags & ENG_RENAME_EXCHANGE)) {
		rc = ns_name_check(e, sdir, name, dst->mode);
		if (rc < 0)
			goto out;
	}
	if (src == dst)
		goto out; /* same entry, or two names of one inode */
	/* A directory cannot move below itself. */
	if (S_ISDIR(src->mode) && is_ancestor(src, ddir)) {
		rc = -EINVAL;
		goto out;
	}
	if (dst && S_ISDIR(dst->mode) && is_ancestor(dst, sdir)) {
		rc = (flags & ENG_RENAME_EXCHANGE) ? -EINVAL : -ENOTEMPTY;
		goto out;
	}
	if (flags & ENG_RENAME_EXCHANGE) {
		if (!dst) {
			rc = -ENOENT;
			goto out;
		}
	} else if (dst) {
		if (flags & ENG_RENAME_NOREPLACE) {
			rc = -EEXIST;
			goto out;
		}
		if (S_ISDIR(src->mode) && !S_ISDIR(dst->mode)) {
			rc = -ENOTDIR;
			goto out;
		}
		if (!S_ISDIR(src->mode) && S_ISDIR(dst->mode)) {
			rc = -EISDIR;
			goto out;
		}
		if (S_ISDIR(dst->mode) && dst->dir.count) {
			rc = -ENOTEMPTY;
			goto out;
		}
	}
	mirror = child_path(e, sdir, name, from, sizeof(from)) == 0 &&
		 child_path(e, ddir, newname, to, sizeof(to)) == 0;
	/* Both stay alive until the persist dir follows. */
	held = true;
	src->holds++;
	if (dst) {
		dst->holds++;
		dst_open = dst->opens > 0;
	}

	if (flags & ENG_RENAME_EXCHANGE) {
		/* Swap what the two dentries point at, in each name list. */
		struct dentry **sp = &src->dentry, **dp = &dst->dentry;
		struct dentry *sn = sde->lnext, *dn = dde->lnext;

		while (*sp != sde)
			sp = &(*sp)->lnext;
		while (*dp != dde)
			dp = &(*dp)->lnext;
		*sp = dde;
		dde->lnext = sn;
		*dp = sde;
		sde->lnext = dn;
		sde->inode = dst;
		dde->inode = src;
		src->parent = src->dentry->dir;
		dst->parent = dst->dentry->dir;
		if (S_ISDIR(src->mode) != S_ISDIR(dst->mode)) {
			if (S_ISDIR(src->mode)) {
				sdir->dir.nsubdirs--;
				ddir->dir.nsubdirs++;
			} else {
				sdir->dir.nsubdirs++;
				ddir->dir.nsubdirs--;
			}
		}
	} else {
		/* Link the new name first: failing that, nothing changed. */
		if (dde)
			unlink_dentry(e, ddir, dde, true);
		rc = ns_link_child(e, ddir, newname, src, sde == src->dentry);
		if (rc < 0) {
			mirror = false;
			goto out;
		}
		/* The new name took the old one's place among src's names. */
		unlink_dentry(e, sdir, sde, false);
	}
	if (ddir == e->ns.root && S_ISDIR(src->mode) && src->ckpt_seq == 0) {
		src->ckpt_seq = ++e->ns.next_ckpt_seq;
		src->ckpt_born_ms = rft_now_ms();
	}
	if (sdir == e->ns.root && dst && S_ISDIR(dst->mode) &&
	    dst->ckpt_seq == 0) {
		dst->ckpt_seq = ++e->ns.next_ckpt_seq;
		dst->ckpt_born_ms = rft_now_ms();
	}
	touch_dir(sdir, &op->now);
	touch_dir(ddir, &op->now);
	name_changed(src, &op->now);
	/*
	 * The inode replaced lost a link (still seen by its other names or
	 * open handles), or, exchanged, was moved: its ctime changes too, as
	 * on tmpfs.
	 */
	if (dst)
		name_changed(dst, &op->now);
	*moved_dir = S_ISDIR(src->mode) ||
		     (dst && (flags & ENG_RENAME_EXCHANGE) && S_ISDIR(dst->mode));
out:
	ns_unlock(e);
	if (rc == 0 && mirror) {
		struct eng_ev ev = { .kind = EV_RENAMED, .in = src,
				     .from = from, .to = to, .dst = dst,
				     .open = dst_open,
				     .exchange = flags & ENG_RENAME_EXCHANGE,
				     .remote = remote };

		eng_post(e, &ev);
	}
	if (held) {
		ns_unhold(e, src);
		if (dst)
			ns_unhold(e, dst);
	}
	eng_names_unlock(e);
	return rc;
}

static int apply_one(struct eng *e, const struct nsop *op, uint64_t index,
		     struct nsop_out *out, bool remote, bool *moved_dir);

int ns_apply(struct eng *e, const struct nsop *op, uint64_t index,
	     struct nsop_out *out)
{
	/*
	 * Only the node that made a name change mirrors it into the persist
	 * dir the group shares (its proposal's apply has @out).
	 */
	return ns_apply_as(e, op, index, out, e->gops && !out);
}

int ns_apply_as(struct eng *e, const struct nsop *op, uint64_t index,
		struct nsop_out *out, bool remote)
{
	bool moved_dir = false;
	int rc;

	if (out)
		out->index = index;
	rc = apply_one(e, op, index, out, remote, &moved_dir);
	/*
	 * Another node removed or moved a name: the kernel here may have it
	 * cached (a directory's one alias, above all: eng_invalidator).
	 */
	if (rc == 0 && remote && e->inval.entry) {
		switch (op->kind) {
		case NSOP_RENAME:
			e->inval.entry(e->inval.ctx, op->newparent,
				       op->newname, moved_dir);
			e->inval.entry(e->inval.ctx, op->parent, op->name,
				       moved_dir);
			break;
		case NSOP_UNLINK:
		case NSOP_RMDIR:
			e->inval.entry(e->inval.ctx, op->parent, op->name,
				       false);
			break;
		default:
			break;
		}
	}
	return rc;
}

static int apply_one(struct eng *e, const struct nsop *op, uint64_t index,
		     struct nsop_out *out, bool remote, bool *moved_dir)
{
	switch (op->kind) {
	case NSOP_MKNOD:
	case NSOP_MKDIR:
	case NSOP_SYMLINK:
		return apply_make(e, op, out);
	case NSOP_LINK:
		return apply_link(e, op, out, remote);
	case NSOP_UNLINK:
	case NSOP_RMDIR:
		return apply_remove(e, op, remote);
	case NSOP_RENAME:
		return apply_rename(e, op, remote, moved_dir);
	case NSOP_SETATTR:
		return apply_setattr(e, op, out);
	case NSOP_CREATE:
	case NSOP_OPEN:
		return file_apply_open(e, op, index, out);
	case NSOP_SEAL:
		return file_apply_seal(e, op, index);
	case NSOP_PROTECT:
		return file_apply_protect(e, op);
	case NSOP_LOST:
		return file_apply_lost(e, op);
	case NSOP_PERSIST:
		return file_apply_persist(e, op, index);
	}
	return -EINVAL;
}

/* --- the calls ---------------------------------------------------------- */

bool ns_check_local(struct eng *e, const struct nsop *op, int *rc)
{
	struct inode *dir;
	struct dentry *de = NULL;

	*rc = 0;
	switch (op->kind) {
	case NSOP_MKNOD:
	case NSOP_MKDIR:
	case NSOP_SYMLINK:
	case NSOP_UNLINK:
	case NSOP_RMDIR:
		break;
	default:
		return false;
	}
	ns_rdlock(e);
	*rc = get_dir(e, op->parent, &dir);
	if (*rc == 0 && op->kind != NSOP_UNLINK && op->kind != NSOP_RMDIR)
		*rc = ns_name_check(e, dir, op->name,
				    op->kind == NSOP_MKDIR     ? S_IFDIR
				    : op->kind == NSOP_SYMLINK ? S_IFLNK
							       : op->mode);
	if (*rc == 0)
		de = ns_dir_find(&dir->dir, op->name);
	ns_unlock(e);
	if (*rc == 0) {
		if (de && (op->kind == NSOP_MKNOD || op->kind == NSOP_MKDIR ||
			   op->kind == NSOP_SYMLINK))
			*rc = -EEXIST;
		else if (!de && (op->kind == NSOP_UNLINK ||
				 op->kind == NSOP_RMDIR))
			*rc = -ENOENT;
	}
	return *rc < 0;
}


/* Copy @src into a name buffer; -ENAMETOOLONG past NAME_MAX. */
static int copy_name(char dst[NAME_MAX + 1], const char *src)
{
	size_t n = strlen(src);

	if (n > NAME_MAX)
		return -ENAMETOOLONG;
	memcpy(dst, src, n + 1);
	return 0;
}

/*
 * Turn @c into an op.  0: @op is to be applied (or proposed); 1: @c
 * finished here (its outputs set, its result in *@rc).
 */
static int prepare(struct eng *e, struct eng_call *c, struct nsop *op,
		   int *rc)
{
	static const enum nsop_kind kinds[] = {
		[ENG_CALL_MKNOD] = NSOP_MKNOD,
		[ENG_CALL_MKDIR] = NSOP_MKDIR,
		[ENG_CALL_SYMLINK] = NSOP_SYMLINK,
		[ENG_CALL_LINK] = NSOP_LINK,
		[ENG_CALL_UNLINK] = NSOP_UNLINK,
		[ENG_CALL_RMDIR] = NSOP_RMDIR,
		[ENG_CALL_RENAME] = NSOP_RENAME,
		[ENG_CALL_SETATTR] = NSOP_SETATTR,
		[ENG_CALL_CREATE] = NSOP_CREATE,
		[ENG_CALL_OPEN] = NSOP_OPEN,
	};

	/* FLUSH and FSYNC are no ops of their own (a group's seal is
	 * proposed by gns.c). */
	nsop_init(op, (size_t)c->kind < sizeof(kinds) / sizeof(kinds[0])
			      ? kinds[c->kind]
			      : 0);
	op->node = e->node;
	op->inc = e->inc;
	op->parent = c->parent;
	op->newparent = c->newparent;
	op->ino = c->ino;
	op->mode = c->mode;
	op->uid = c->uid;
	op->gid = c->gid;
	op->rdev = c->rdev;
	op->flags = (uint32_t)c->flags;
	*rc = 0;
	switch (c->kind) {
	case ENG_CALL_MKNOD:
	case ENG_CALL_MKDIR:
	case ENG_CALL_SYMLINK:
		*rc = copy_name(op->name, c->name);
		if (*rc == 0 && c->kind == ENG_CALL_SYMLINK) {
			if (strlen(c->target) >= PATH_MAX)
				*rc = -ENAMETOOLONG;
			else if (!(op->target = strdup(c->target)))
				*rc = -ENOMEM;
		}
		if (*rc == 0 && c->kind == ENG_CALL_MKNOD && S_ISREG(c->mode))
			op->file_id = eng_new_file_id(e);
		break;
	case ENG_CALL_LINK:
		*rc = copy_name(op->newname, c->newname);
		break;
	case ENG_CALL_UNLINK:
	case ENG_CALL_RMDIR:
		*rc = copy_name(op->name, c->name);
		break;
	case ENG_CALL_RENAME:
		*rc = copy_name(op->name, c->name);
		if (*rc == 0)
			*rc = copy_name(op->newname, c->newname);
		break;
	case ENG_CALL_SETATTR:
		op->sa = c->sa;
		op->flags = c->sa.valid;
		if (c->fp)
			op->ino = c->fp->inode->ino;
		break;
	case ENG_CALL_CREATE:
	case ENG_CALL_OPEN:
		return file_prepare_open(e, c, op, rc);
	case ENG_CALL_FLUSH:
		/* A writer passing through: its bytes first. */
		*rc = pass_take(e, c->fp);
		if (*rc == 0)
			*rc = file_flush(e, c->fp, c);
		return 1;
	case ENG_CALL_FSYNC:
		*rc = file_fsync(e, c->fp, c);
		return 1;
	}
	if (*rc < 0)
		return 1;
	/* In a group, one that surely fails here need not go round the log. */
	if (e->gops && ns_check_local(e, op, rc))
		return 1;
	return 0;
}

int eng_call(struct eng *e, struct eng_call *c)
{
	struct nsop_out out;
	struct nsop op;
	int rc = eng_fresh(e);

	if (rc < 0)
		return rc;
	if (prepare(e, c, &op, &rc) == 0) {
		if (e->gops) {
			rc = e->gops->propose(e->gctx, &op, c);
		} else {
			memset(&out, 0, sizeof(out));
			rc = ns_apply(e, &op, 0, &out);
			if (rc == 0)
				eng_call_take(c, &out);
		}
	}
	nsop_clear(&op);
	/* A node alone: an open may pass through (no lock held here). */
	if (rc == 0 && !e->gops && c->newfp &&
	    (c->kind == ENG_CALL_OPEN || c->kind == ENG_CALL_CREATE))
		pass_open(e, c->newfp, &c->info);
	return rc;
}

void eng_call_take(struct eng_call *c, const struct nsop_out *out)
{
	c->st = out->st;
	c->newfp = out->fp;
	c->info = out->info;
}

int eng_readlink(struct eng *e, uint64_t ino, char *buf, size_t size)
{
	struct inode *in;
	int rc = eng_fresh(e);

	if (rc < 0)
		return rc;

	ns_rdlock(e);
	in = ns_find(&e->ns, ino);
	if (!in) {
		rc = -ENOENT;
	} else if (!S_ISLNK(in->mode)) {
		rc = -EINVAL;
	} else {
		size_t n = strlen(in->target);

		if (n > size)
			n = size;
		memcpy(buf, in->target, n);
		rc = (int)n;
	}
	ns_unlock(e);
	return rc;
}

int eng_statfs(struct eng *e, struct statvfs *sv)
{
	/*
	 * Chunks held for passthrough's backing files count as free: a
	 * second copy of bytes the files hold, given up when memory is
	 * wanted (spares and kept copies at once, a copy readers have open
	 * when they close it).  Read with the free ones under one lock, so
	 * that a copy taking its chunks never shows as used.
	 */
	uint32_t nfree = store_free_or_cold(&e->store);

	memset(sv, 0, sizeof(*sv));
	sv->f_bsize = e->store.chunk_size;
	sv->f_frsize = e->store.chunk_size;
	sv->f_blocks = e->store.nchunks;
	sv->f_bfree = nfree;
	sv->f_bavail = nfree;
	ns_rdlock(e);
	sv->f_files = e->ns.count + nfree;
	sv->f_ffree = nfree;
	ns_unlock(e);
	sv->f_favail = sv->f_ffree;
	sv->f_namemax = NAME_MAX;
	return 0;
}

/* --- readdir ------------------------------------------------------------ */

struct eng_dir_entry {
	char *name;
	uint64_t ino;
	mode_t mode;
};

struct eng_dir {
	size_t count;
	struct eng_dir_entry ent[];
};

int eng_opendir(struct eng *e, uint64_t ino, struct eng_dir **dp)
{
	struct inode *in;
	struct eng_dir *d = NULL;
	size_t i = 0;
	int rc = eng_fresh(e);

	if (rc < 0)
		return rc;
	ns_rdlock(e);
	rc = get_dir(e, ino, &in);
	if (rc < 0)
		goto out;
	d = malloc(sizeof(*d) + (in->dir.count + 2) * sizeof(d->ent[0]));
	if (!d) {
		rc = -ENOMEM;
		goto out;
	}
	d->ent[i++] = (struct eng_dir_entry){ NULL, in->ino, S_IFDIR };
	d->ent[i++] = (struct eng_dir_entry){
		NULL, in->parent ? in->parent->ino : in->ino, S_IFDIR };
	for (struct dentry *de = in->dir.first; de; de = de->next) {
		char *name = strdup(de->name);

		if (!name) {
			rc = -ENOMEM;
			break;
		}
		d->ent[i++] = (struct eng_dir_entry){ name, de->inode->ino,
						      de->inode->mode };
	}
	d->count = i;
out:
	ns_unlock(e);
	if (rc < 0 && d) {
		eng_releasedir(e, d);
		d = NULL;
	}
	*dp = d;
	return rc;
}

int eng_readdir(struct eng *e, struct eng_dir *d, off_t off,
		eng_dirent_fn fn, void *ctx)
{
	struct stat st;

	memset(&st, 0, sizeof(st));
	for (size_t i = off < 0 ? 0 : (size_t)off; i < d->count; i++) {
		const char *name = i == 0 ? "." : i == 1 ? ".." : d->ent[i].name;

		st.st_ino = d->ent[i].ino;
		st.st_mode = d->ent[i].mode;
		if (fn(ctx, name, &st, (off_t)(i + 1)))
			break;
	}
	return 0;
}

void eng_releasedir(struct eng *e, struct eng_dir *d)
{
	if (!d)
		return;
	for (size_t i = 2; i < d->count; i++)
		free(d->ent[i].name);
	free(d);
}

/* --- open and close ----------------------------------------------------- */

static void open_info(struct file *f, struct eng_open_info *info)
{
	if (!info)
		return;
	info->cache_valid = f->cached_version == f->version;
	info->pass_fd = -1;
	info->pass_id = 0;
	info->sealed = f->writers == 0;
	info->size = f->size;
	f->cached_version = f->version;
}

void eng_handle_free(struct eng *e, struct eng_file *h)
{
	leaf_lock(&e->handles_lock, ENG_RANK_HANDLES);
	if (h->hprev)
		h->hprev->hnext = h->hnext;
	else
		e->handles = h->hnext;
	if (h->hnext)
		h->hnext->hprev = h->hprev;
	leaf_unlock(&e->handles_lock, ENG_RANK_HANDLES);
	free(h);
}

/*
 * Open @in, which the caller found under ns->lock held for writing.
 * -EAGAIN: an O_TRUNC open found copies queued for the file; the caller
 * drops ns->lock, waits for them (file_wait_writes) and tries again, so
 * that no thread sleeps holding the namespace lock.
 */
static int open_locked(struct eng *e, struct inode *in, int flags,
		       const struct timespec *now, struct eng_file **fp,
		       struct eng_open_info *info)
{
	bool writer = (flags & O_ACCMODE) != O_RDONLY;
	bool trunc = (flags & O_TRUNC) && writer;
	struct file *f = &in->file;
	struct eng_file *h;

	if (S_ISDIR(in->mode))
		return -EISDIR;
	if (!S_ISREG(in->mode))
		return -EINVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->inode = in;
	h->flags = flags;
	h->writer = writer;
	leaf_lock(&e->handles_lock, ENG_RANK_HANDLES);
	h->hnext = e->handles;
	if (e->handles)
		e->handles->hprev = h;
	e->handles = h;
	leaf_unlock(&e->handles_lock, ENG_RANK_HANDLES);

	if (trunc) {
		/* A truncate must not race a copy queued before it. */
		if (!file_wrlock_drained(e, f)) {
			eng_handle_free(e, h);
			return -EAGAIN;
		}
	} else {
		file_wrlock(f);
	}
	if (writer)
		f->writers++;
	if (trunc && (f->size > 0 || f->dur.sealed == f->version)) {
		file_truncate_locked(e, f, 0);
		in->mtime = *now;
		in->ctime = *now;
	}
	open_info(f, info);
	file_unlock(f);
	in->opens++;
	if (!writer && in->readers++ == 0) {
		in->read_from_ms = rft_now_ms();
		in->read_to_ms = 0;
	}
	*fp = h;
	return 0;
}

/* Wait for @in's queued copies with no lock held; ns->lock held on entry,
 * released on return. */
static void wait_unlocked(struct eng *e, struct inode *in)
{
	in->holds++;
	ns_unlock(e);
	file_wait_writes(e, &in->file);
	ns_unhold(e, in);
}

/*
 * Open the regular file @in with @flags on this node (the caller's handle),
 * and for CREATE take the kernel's lookup reference too.  ns->lock held
 * for writing on entry, released on return.
 */
static int open_here(struct eng *e, struct inode *in, int flags, bool entry,
		     const struct timespec *now, struct nsop_out *out)
{
	int rc;

	for (;;) {
		rc = open_locked(e, in, flags, now, &out->fp, &out->info);
		if (rc != -EAGAIN)
			break;
		wait_unlocked(e, in);
		ns_wrlock(e);
	}
	if (rc == 0 && entry) {
		in->nlookup++;
		ns_fill_stat(e, in, &out->st);
	}
	ns_unlock(e);
	return rc;
}

int file_prepare_open(struct eng *e, struct eng_call *c, struct nsop *op,
		      int *rc)
{
	struct nsop_out out;
	struct inode *in = NULL, *dir;
	struct dentry *de;
	bool create = c->kind == ENG_CALL_CREATE;

	*rc = 0;
	if (create) {
		if (strlen(c->name) > NAME_MAX) {
			*rc = -ENAMETOOLONG;
			return 1;
		}
		strcpy(op->name, c->name);
		op->mode = S_IFREG | (c->mode & 07777);
		op->file_id = eng_new_file_id(e);
		if (!e->gops)
			return 0;
	}
	memset(&out, 0, sizeof(out));
	ns_wrlock(e);
	if (create) {
		dir = ns_find(&e->ns, c->parent);
		if (!dir || !S_ISDIR(dir->mode) ||
		    (dir != e->ns.root && dir->nlink == 0)) {
			ns_unlock(e);
			*rc = dir && !S_ISDIR(dir->mode) ? -ENOTDIR : -ENOENT;
			return 1;
		}
		de = ns_dir_find(&dir->dir, c->name);
		if (!de) {
			/* A new name: the log decides who makes it. */
			ns_unlock(e);
			return 0;
		}
		if (c->flags & O_EXCL) {
			ns_unlock(e);
			*rc = -EEXIST;
			return 1;
		}
		in = de->inode;
	} else {
		in = ns_find(&e->ns, c->ino);
		if (!in) {
			ns_unlock(e);
			*rc = -ENOENT;
			return 1;
		}
	}
	/*
	 * An existing file opens here alone, for writing too: what a writer
	 * changes is this node's draft, which goes round the log as a SEAL
	 * at its last close (docs/design.md, "Several writers").
	 */
	*rc = open_here(e, in, c->flags, create, &op->now, &out);
	if (*rc == 0)
		eng_call_take(c, &out);
	return 1;
}

int file_apply_open(struct eng *e, const struct nsop *op, uint64_t index,
		    struct nsop_out *out)
{
	bool writer = (op->flags & O_ACCMODE) != O_RDONLY;
	bool create = op->kind == NSOP_CREATE;
	struct inode *in, *dir;
	struct dentry *de;
	struct file *f;
	int rc;

	ns_wrlock(e);
	if (create) {
		dir = ns_find(&e->ns, op->parent);
		rc = !dir || (dir != e->ns.root && dir->nlink == 0) ? -ENOENT
		     : !S_ISDIR(dir->mode)			      ? -ENOTDIR
								      : 0;
		if (rc < 0)
			goto out;
		de = ns_dir_find(&dir->dir, op->name);
		if (de && (op->flags & O_EXCL)) {
			rc = -EEXIST;
			goto out;
		}
		if (de) {
			in = de->inode;
		} else {
			/* Its maker owns it (ns_make_entry). */
			rc = ns_make_entry(e, op, S_IFREG | (op->mode & 07777),
					   &in);
			if (rc < 0)
				goto out;
		}
	} else {
		in = ns_find(&e->ns, op->ino);
		if (!in) {
			rc = -ENOENT;
			goto out;
		}
	}
	if (S_ISDIR(in->mode)) {
		rc = -EISDIR;
		goto out;
	}
	if (!S_ISREG(in->mode)) {
		rc = -EINVAL;
		goto out;
	}
	f = &in->file;
	/* The log's record: written there until that node's seal. */
	if (writer && op->node >= 0 && op->node < 64) {
		file_wrlock(f);
		file_log_writers(f, 1ULL << op->node, 0);
		file_unlock(f);
	}
	/*
	 * On the proposer: its open (an O_TRUNC truncates its own draft).
	 * Elsewhere nothing changes but that the file is being written
	 * there until that node's seal: only a SEAL changes what a node
	 * shows (an OPEN of an old log, with O_TRUNC too, is the same).
	 */
	if (out)
		return open_here(e, in, (int)op->flags, create, &op->now, out);
	if (writer && op->node >= 0 && op->node < 64) {
		file_wrlock(f);
		f->remote_writers |= 1ULL << op->node;
		file_unlock(f);
	}
	rc = 0;
out:
	ns_unlock(e);
	(void)index;
	return rc;
}

int file_flush(struct eng *e, struct eng_file *fp, struct eng_call *c)
{
	struct file *f = &fp->inode->file;
	bool tell;

	if (!fp->writer)
		return 0;
	/* close(2) returns with the data in place. */
	file_wait_writes(e, f);
	if (!e->gops)
		return 0;
	/*
	 * The last writer's close: the other nodes must see the file's new
	 * size and contents when close(2) returns (close-to-open), so the
	 * seal goes round the log now, not at RELEASE (which the kernel
	 * sends after close has returned).
	 */
	file_rdlock(f);
	tell = f->writers == 1 && file_to_seal(e, f);
	file_unlock(f);
	return tell ? e->gops->seal(e->gctx, fp->inode, c) : 0;
}

/*
 * fsync under --sync persist in a group: this node's changes go round the
 * log first (the seal a last close sends, the writer kept), then the wait
 * for the version sealed to be written back (persist_sync).
 */
struct sync_seal {
	struct eng_call seal;	/* first: cast from it */
	struct eng *e;
	struct inode *in;	/* held */
	uint64_t version;
	struct eng_call *fsync;
};

static void sync_sealed(struct eng_call *sc, int rc)
{
	struct sync_seal *s = (struct sync_seal *)sc;
	struct eng_call *c = s->fsync;

	if (rc == 0) {
		rc = persist_sync(s->e, s->in, s->version, c);
	} else {
		char name[PATH_MAX];

		eng_inode_name(s->e, s->in, name, sizeof(name));
		rft_warn("fsync of %s: its seal did not reach the group's log "
			 "(%s); EIO (the data is kept here as it is)", name,
			 strerror(-rc));
		rc = -EIO;
	}
	ns_unhold(s->e, s->in);
	free(s);
	if (rc != ENG_LATER)
		c->done(c, rc);
}

static int sync_persist(struct eng *e, struct inode *in, struct eng_call *c)
{
	struct file *f = &in->file;
	struct sync_seal *s;
	uint64_t version;
	bool seal;
	int rc;

	file_rdlock(f);
	version = f->version;
	seal = file_to_seal(e, f);
	file_unlock(f);
	if (!seal)
		return persist_sync(e, in, version, c);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->seal.kind = ENG_CALL_FLUSH;
	s->seal.done = sync_sealed;
	s->e = e;
	s->in = in;
	s->version = version;
	s->fsync = c;
	eng_hold(e, in);
	rc = e->gops->seal(e->gctx, in, &s->seal);
	if (rc != ENG_LATER) {
		ns_unhold(e, in);
		free(s);
	}
	return rc == ENG_LATER || rc < 0 ? rc : -EIO;
}

int file_fsync(struct eng *e, struct eng_file *fp, struct eng_call *c)
{
	int rc = pass_take(e, fp); /* a writer passing through */

	if (rc < 0)
		return rc;
	file_wait_writes(e, &fp->inode->file);
	/*
	 * The data is in the arena now.  With --sync none, that is as
	 * durable as this tier gets: write-back to the persist dir is
	 * asynchronous by design (reftfs-admin flush --wait, or wait
	 * --persisted, is the barrier for that).  A writer's fsync waits for
	 * its data to be protected (--sync protect, a group) or written back
	 * (--sync persist).
	 */
	if (!fp->writer || e->cfg.sync == ENG_SYNC_NONE)
		return 0;
	if (e->cfg.sync == ENG_SYNC_PERSIST)
		return sync_persist(e, fp->inode, c);
	return e->gops ? e->gops->sync(e->gctx, fp->inode, c) : 0;
}
