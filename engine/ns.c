/*
 * ns.c - the namespace: inodes, directories, names.
 *
 * Directories are hash tables of dentries plus a list in insertion order
 * for readdir.  Inodes are found by number through one hash table.  All of
 * it is protected by ns->lock; file data is not (see file.c).
 *
 * Changes to names (unlink, rmdir, rename) are mirrored into the persist
 * dir under eng->names_lock, so a copy written back earlier moves
 * with its name and never reappears under an old one after a remount.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_i.h"

#define NS_MIN_BUCKETS 64

static uint32_t name_hash(const char *name)
{
	uint32_t h = 2166136261u;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h;
}

/* --- inode table -------------------------------------------------------- */

static int table_grow(struct ns *ns)
{
	uint32_t n = ns->nbuckets ? ns->nbuckets * 2 : NS_MIN_BUCKETS * 16;
	struct inode **t = calloc(n, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (uint32_t b = 0; b < ns->nbuckets; b++) {
		struct inode *in = ns->table[b], *next;

		for (; in; in = next) {
			next = in->hnext;
			in->hnext = t[in->ino % n];
			t[in->ino % n] = in;
		}
	}
	free(ns->table);
	ns->table = t;
	ns->nbuckets = n;
	return 0;
}

struct inode *ns_find(struct ns *ns, uint64_t ino)
{
	struct inode *in = ns->table[ino % ns->nbuckets];

	while (in && in->ino != ino)
		in = in->hnext;
	return in;
}

void ns_set_mode(struct inode *in, mode_t mode)
{
	in->mode = mode;
	atomic_store(&in->setid,
		     S_ISREG(mode) && (mode & (S_ISUID | S_ISGID)));
}

static void table_remove(struct ns *ns, struct inode *in)
{
	struct inode **pp = &ns->table[in->ino % ns->nbuckets];

	while (*pp != in)
		pp = &(*pp)->hnext;
	*pp = in->hnext;
	ns->count--;
}

static int dir_init(struct dir *d)
{
	memset(d, 0, sizeof(*d));
	d->nbuckets = NS_MIN_BUCKETS;
	d->table = calloc(d->nbuckets, sizeof(*d->table));
	return d->table ? 0 : -ENOMEM;
}

struct inode *ns_new_inode(struct eng *e, mode_t mode, uid_t uid, gid_t gid)
{
	struct timespec now;

	eng_now(&now);
	return ns_new_inode_at(e, mode, uid, gid, &now, 0);
}

struct inode *ns_new_inode_at(struct eng *e, mode_t mode, uid_t uid,
			      gid_t gid, const struct timespec *now,
			      uint64_t file_id)
{
	struct ns *ns = &e->ns;
	struct inode *in;

	if (ns->count + 1 > (uint64_t)ns->nbuckets * 2 && table_grow(ns) < 0)
		return NULL;
	in = calloc(1, sizeof(*in));
	if (!in)
		return NULL;
	if ((S_ISDIR(mode) && dir_init(&in->dir) < 0) ||
	    (S_ISREG(mode) && file_init(&in->file) < 0)) {
		free(in);
		return NULL;
	}
	in->ino = ns->next_ino++;
	in->type = mode & S_IFMT;
	ns_set_mode(in, mode);
	if (S_ISREG(mode)) {
		in->file.id = file_id ? file_id : eng_new_file_id(e);
		in->file.owner = e->node;
	}
	in->uid = uid;
	in->gid = gid;
	in->mtime = *now;
	in->atime = in->ctime = in->mtime;
	if (S_ISREG(mode))
		file_log_times(&in->file, now, now);
	in->hnext = ns->table[in->ino % ns->nbuckets];
	ns->table[in->ino % ns->nbuckets] = in;
	ns->count++;
	if (S_ISDIR(mode))
		ns->ndirs++;
	else if (S_ISREG(mode))
		ns->nfiles++;
	return in;
}

static void inode_free(struct eng *e, struct inode *in)
{
	struct eng_ev ev = { .kind = EV_FREED, .in = in };

	eng_post(e, &ev);
	table_remove(&e->ns, in);
	if (S_ISDIR(in->mode)) {
		free(in->dir.table);
		e->ns.ndirs--;
	} else if (S_ISREG(in->mode)) {
		file_fini(e, &in->file);
		e->ns.nfiles--;
	} else if (S_ISLNK(in->mode)) {
		free(in->target);
	}
	free(in);
}

void ns_maybe_free(struct eng *e, struct inode *in)
{
	if (in->nlink == 0 && in->nlookup == 0 && in->opens == 0 &&
	    in->holds == 0 && in != e->ns.root)
		inode_free(e, in);
}

void ns_unhold(struct eng *e, struct inode *in)
{
	ns_wrlock(e);
	in->holds--;
	ns_maybe_free(e, in);
	ns_unlock(e);
}

/* --- directories -------------------------------------------------------- */

struct dentry *ns_dir_find(struct dir *d, const char *name)
{
	struct dentry *de = d->table[name_hash(name) % d->nbuckets];

	while (de && strcmp(de->name, name) != 0)
		de = de->hnext;
	return de;
}

static int dir_grow(struct dir *d)
{
	uint32_t n = d->nbuckets * 4;
	struct dentry **t = calloc(n, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (struct dentry *de = d->first; de; de = de->next) {
		uint32_t b = name_hash(de->name) % n;

		de->hnext = t[b];
		t[b] = de;
	}
	free(d->table);
	d->table = t;
	d->nbuckets = n;
	return 0;
}

int ns_link_child(struct eng *e, struct inode *dir, const char *name,
		  struct inode *child, bool primary)
{
	struct dir *d = &dir->dir;
	struct dentry *de;
	uint32_t b;

	if (d->count + 1 > d->nbuckets * 2 && dir_grow(d) < 0)
		return -ENOMEM;
	de = calloc(1, sizeof(*de));
	if (!de || !(de->name = strdup(name))) {
		free(de);
		return -ENOMEM;
	}
	de->inode = child;
	de->dir = dir;
	b = name_hash(name) % d->nbuckets;
	de->hnext = d->table[b];
	d->table[b] = de;
	de->prev = d->last;
	if (d->last)
		d->last->next = de;
	else
		d->first = de;
	d->last = de;
	d->count++;

	child->nlink++;
	if (primary || !child->dentry) {
		de->lnext = child->dentry;
		child->dentry = de;
		child->parent = dir;
	} else {
		struct dentry **pp = &child->dentry->lnext;

		while (*pp)
			pp = &(*pp)->lnext;
		*pp = de;
	}
	if (S_ISDIR(child->mode)) {
		d->nsubdirs++;
		if (dir == e->ns.root && child->ckpt_seq == 0) {
			child->ckpt_seq = ++e->ns.next_ckpt_seq;
			child->ckpt_born_ms = rft_now_ms();
		}
	}
	return 0;
}

void ns_unlink_child(struct inode *dir, struct dentry *de)
{
	struct dir *d = &dir->dir;
	struct dentry **pp = &d->table[name_hash(de->name) % d->nbuckets];
	struct inode *child = de->inode;

	while (*pp != de)
		pp = &(*pp)->hnext;
	*pp = de->hnext;
	if (de->prev)
		de->prev->next = de->next;
	else
		d->first = de->next;
	if (de->next)
		de->next->prev = de->prev;
	else
		d->last = de->prev;
	d->count--;
	if (S_ISDIR(child->mode))
		d->nsubdirs--;

	child->nlink--;
	for (struct dentry **lp = &child->dentry; *lp; lp = &(*lp)->lnext)
		if (*lp == de) {
			*lp = de->lnext;
			break;
		}
	/* Another name, if any, becomes the primary one. */
	child->parent = child->dentry ? child->dentry->dir : NULL;
	free(de->name);
	free(de);
}

bool ns_name_reserved(const struct inode *parent, const char *name)
{
	size_t n = strlen(name), s = strlen(RFT_SUM_SUFFIX);

	/* Names the persist dir uses for its own bookkeeping. */
	if (n > s && name[0] == '.' &&
	    strcmp(name + n - s, RFT_SUM_SUFFIX) == 0)
		return true;
	return parent->parent == NULL && parent->ino == RFT_ROOT_INO &&
	       strncmp(name, RFT_RESERVED_PREFIX,
		       strlen(RFT_RESERVED_PREFIX)) == 0;
}

int ns_name_check(const struct eng *e, const struct inode *dir,
		  const char *name, mode_t type)
{
	size_t n = strlen(name);

	if (n > NAME_MAX)
		return -ENAMETOOLONG;
	if (ns_name_reserved(dir, name))
		return -EINVAL;
	/*
	 * A regular file is written back with a sidecar ".NAME.rftsum"
	 * beside it: a name whose sidecar the persist dir cannot hold
	 * would never be written back, so it is refused here, where the
	 * program that chose it hears of it.
	 */
	if (e->persist && S_ISREG(type) &&
	    n + 1 + strlen(RFT_SUM_SUFFIX) > NAME_MAX)
		return -ENAMETOOLONG;
	return 0;
}

int ns_init(struct ns *ns)
{
	memset(ns, 0, sizeof(*ns));
	pthread_rwlock_init(&ns->lock, NULL);
	ns->next_ino = RFT_ROOT_INO;
	return table_grow(ns);
}

void ns_fini(struct eng *e)
{
	struct ns *ns = &e->ns;

	for (uint32_t b = 0; ns->table && b < ns->nbuckets; b++) {
		struct inode *in = ns->table[b], *next;

		for (; in; in = next) {
			next = in->hnext;
			if (S_ISDIR(in->mode)) {
				struct dentry *de = in->dir.first, *dn;

				for (; de; de = dn) {
					dn = de->next;
					free(de->name);
					free(de);
				}
				free(in->dir.table);
			} else if (S_ISREG(in->mode)) {
				/* pass_fini let go of its copies. */
				file_fini(e, &in->file);
			} else if (S_ISLNK(in->mode)) {
				free(in->target);
			}
			free(in);
		}
	}
	free(ns->table);
	ns->table = NULL;
	while (ns->spaces) {
		struct stripe_space *sp = ns->spaces;

		ns->spaces = sp->next;
		free(sp);
	}
	pthread_rwlock_destroy(&ns->lock);
}

int ns_dentry_path(struct ns *ns, const struct dentry *de, char *buf,
		   size_t size)
{
	size_t len;
	int rc = ns_path(ns, de->dir, buf, size);

	if (rc < 0)
		return rc;
	len = strlen(buf);
	if (len + strlen(de->name) + 2 > size)
		return -ENAMETOOLONG;
	if (len)
		buf[len++] = '/';
	strcpy(buf + len, de->name);
	return 0;
}

int ns_path(struct ns *ns, const struct inode *in, char *buf, size_t size)
{
	const struct inode *stack[PATH_MAX / 2];
	size_t depth = 0, len = 0;

	for (; in && in != ns->root; in = in->parent) {
		if (!in->dentry || depth == sizeof(stack) / sizeof(stack[0]))
			return -ENOENT;
		stack[depth++] = in;
	}
	if (!in)
		return -ENOENT;
	if (size == 0)
		return -ENAMETOOLONG;
	buf[0] = '\0';
	while (depth > 0) {
		const char *name = stack[--depth]->dentry->name;
		size_t n = strlen(name);

		if (len + n + 2 > size)
			return -ENAMETOOLONG;
		if (len)
			buf[len++] = '/';
		memcpy(buf + len, name, n + 1);
		len += n;
	}
	return 0;
}

struct inode *ns_resolve(struct ns *ns, const char *rel)
{
	struct inode *in = ns->root;
	char name[NAME_MAX + 1];

	while (*rel) {
		const char *slash = strchr(rel, '/');
		size_t n = slash ? (size_t)(slash - rel) : strlen(rel);
		struct dentry *de;

		if (n == 0 || n > NAME_MAX || !S_ISDIR(in->mode))
			return NULL;
		memcpy(name, rel, n);
		name[n] = '\0';
		de = ns_dir_find(&in->dir, name);
		if (!de)
			return NULL;
		in = de->inode;
		rel += n + (slash ? 1 : 0);
	}
	return in;
}

struct inode *ns_checkpoint_of(struct ns *ns, const struct inode *in)
{
	while (in && in->parent && in->parent != ns->root)
		in = in->parent;
	if (!in || in->parent != ns->root || !S_ISDIR(in->mode))
		return NULL;
	return (struct inode *)in;
}

bool ns_in_keep_window(struct eng *e, uint64_t seq)
{
	unsigned newer = 0;

	for (struct dentry *de = e->ns.root->dir.first; de; de = de->next) {
		struct inode *c = de->inode;

		if (S_ISDIR(c->mode) && c->ckpt_seq > seq &&
		    ++newer >= e->cfg.keep)
			return false;
	}
	return newer < e->cfg.keep;
}

int ns_walk(struct ns *ns, int (*fn)(void *ctx, struct inode *in), void *ctx)
{
	for (uint32_t b = 0; b < ns->nbuckets; b++)
		for (struct inode *in = ns->table[b]; in; in = in->hnext) {
			int rc = fn(ctx, in);

			if (rc)
				return rc;
		}
	return 0;
}

/* --- inodes as handles (core.h) ----------------------------------------- */

uint64_t eng_inode_ino(const struct inode *in)
{
	return in->ino;
}

bool eng_inode_is_file(const struct inode *in)
{
	return S_ISREG(in->type);
}

void eng_hold(struct eng *e, struct inode *in)
{
	ns_wrlock(e);
	in->holds++;
	ns_unlock(e);
}

struct inode *eng_find_hold(struct eng *e, uint64_t ino)
{
	struct inode *in;

	ns_wrlock(e);
	in = ns_find(&e->ns, ino);
	if (in)
		in->holds++;
	ns_unlock(e);
	return in;
}

void eng_inode_name(struct eng *e, const struct inode *in, char *buf,
		    size_t size)
{
	ns_rdlock(e);
	if (ns_path(&e->ns, in, buf, size) < 0)
		snprintf(buf, size, "inode %llu", (unsigned long long)in->ino);
	ns_unlock(e);
}
