/*
 * nssnap.c - the namespace as one record, for the group log's snapshots.
 *
 * The log (engine/group/nslog.c, on libraft) compacts itself: every so
 * many entries it asks the state machine for its state, keeps that as a
 * snapshot and drops the entries before it.  A node that starts again
 * restores the snapshot and applies only the entries after it; a follower
 * too far behind is sent the leader's snapshot.  The state is what every
 * node derives alike from the entries (ns_apply), and only that: inodes
 * with their numbers and attributes, names, each file's owner, its last
 * seal as the SEAL said it (struct seal_rec) and the log's record of
 * what came of it (struct file_log: the nodes writing it, holders,
 * PROTECT, PERSIST and LOST, times), the stripe spaces, each node's last
 * LOST and the counters that number new inodes and checkpoints.  So the
 * snapshot of one index is the same bytes on every node, whatever each
 * has of its own: its pieces, drafts, open handles, kernel references,
 * persist copies and the verdicts it keeps on them (f->dur) are not in
 * it.  A restore derives those as the entries' applies would have.
 *
 * The encoding (docs/protocol.md, "Namespace snapshots"), little-endian:
 *
 *    0 magic       u32  "RFNS"
 *    4 version     u16  NS_SNAP_VERSION; another is refused
 *    6 zero        u16
 *    8 chunk_size  u32  the group's (seals' pieces line up with it)
 *   12 nspaces     u32
 *   16 next_ino    u64
 *   24 next_ckpt   u64  the last checkpoint sequence handed out
 *   32 ninodes     u64
 *   40 ndentries   u64
 *   48 lost_inc    64 x u64: each node's last LOST's incarnation
 *  560 spaces, inodes (ascending numbers, the root first), then names
 *      (directory by directory, each in its readdir order).
 *
 * Restoring makes this node's namespace the snapshot's, keeping the
 * inodes it has (numbers are never used twice, so one number is one
 * inode everywhere): what it shows of a file whose seal changed is
 * handled as a SEAL from another node is, a name gone as another node's
 * unlink or rename is (the kernel's entry dropped, the tiers told), an
 * inode with no name left goes once nothing holds it.
 *
 * Its layer: with the calls (beside nscall.c, whose ns_apply it stands in
 * for over the entries a snapshot covers), not in core: it reads the tree
 * (ns.c), gives each file to record.c's file_restore and tells
 * passthrough of a name gone (pass_unlinked), as an unlink's apply does.
 * Only gns.c calls it; it calls nothing of the group's.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine_i.h"
#include "pass.h"

#define SNAP_MAGIC 0x534e4652u	/* "RFNS" */
#define SNAP_HDR_LEN (48 + 64 * 8)
/* A file's flags: struct file_log's, and whether a seal follows. */
#define SNAP_SEALED 0x1u
#define SNAP_SEALED_AS_IS 0x2u
#define SNAP_PROTECTED 0x4u
#define SNAP_META_CHANGED 0x8u
#define SNAP_LOST 0x10u
#define SNAP_FLAGS 0x1fu
#define SNAP_NO_OWNER 0xffffffffu

/* Least bytes of one inode and one name: bounds what a count may claim. */
#define SNAP_INODE_MIN 76
#define SNAP_DENTRY_MIN 23

/* --- writing ------------------------------------------------------------ */

struct wbuf {
	uint8_t *p;
	size_t len, cap;
	bool oom;
};

static uint8_t *w_room(struct wbuf *w, size_t n)
{
	if (w->oom)
		return NULL;
	if (w->len + n > w->cap) {
		size_t cap = w->cap ? w->cap : 4096;
		uint8_t *p;

		while (cap < w->len + n)
			cap *= 2;
		p = realloc(w->p, cap);
		if (!p) {
			w->oom = true;
			return NULL;
		}
		w->p = p;
		w->cap = cap;
	}
	w->len += n;
	return w->p + w->len - n;
}

static void w_le(struct wbuf *w, uint64_t v, int n)
{
	uint8_t *p = w_room(w, (size_t)n);

	for (int i = 0; p && i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void w_u8(struct wbuf *w, uint8_t v)
{
	w_le(w, v, 1);
}

static void w_u16(struct wbuf *w, uint16_t v)
{
	w_le(w, v, 2);
}

static void w_u32(struct wbuf *w, uint32_t v)
{
	w_le(w, v, 4);
}

static void w_u64(struct wbuf *w, uint64_t v)
{
	w_le(w, v, 8);
}

static void w_str(struct wbuf *w, const char *s)
{
	size_t n = s ? strlen(s) : 0;
	uint8_t *p;

	w_u16(w, (uint16_t)n);
	p = w_room(w, n);
	if (p && n)
		memcpy(p, s, n);
}

static void w_time(struct wbuf *w, const struct timespec *ts)
{
	w_u64(w, (uint64_t)ts->tv_sec);
	w_u32(w, (uint32_t)ts->tv_nsec);
}

static int cmp_ino(const void *a, const void *b)
{
	const struct inode *x = *(struct inode *const *)a;
	const struct inode *y = *(struct inode *const *)b;

	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

struct collect {
	struct inode **v;
	size_t n;
	uint64_t ndentries;
};

static int collect_one(void *ctx, struct inode *in)
{
	struct collect *c = ctx;

	/* Unlinked but open here: this node's alone. */
	if (in->nlink == 0 && in->parent == NULL && in->ino != RFT_ROOT_INO)
		return 0;
	c->v[c->n++] = in;
	if (S_ISDIR(in->mode))
		c->ndentries += in->dir.count;
	return 0;
}

static void w_seal(struct wbuf *w, const struct seal_rec *t)
{
	w_u64(w, t->index);
	w_u32(w, (uint32_t)t->node);
	w_u64(w, t->size);
	w_time(w, &t->mtime);
	w_time(w, &t->ctime);
	w_u32(w, t->scheme);
	w_u32(w, t->npieces);
	w_u64(w, t->ckpt);
	w_u64(w, t->base);
	w_u64(w, t->inc);
	w_u64(w, t->version);
	for (uint32_t i = 0; i < t->npieces; i++) {
		w_u32(w, t->pieces[i].crc);
		w_u8(w, t->pieces[i].hole);
	}
}

/*
 * One inode; ns->lock held.  Of a file only the log's record: its times
 * as a node that shows the group's version has them (a draft's here are
 * its own), never what this node keeps of its own.
 */
static void w_inode(struct wbuf *w, struct inode *in)
{
	struct file *f = S_ISREG(in->mode) ? &in->file : NULL;

	if (f)
		file_rdlock(f);
	w_u64(w, in->ino);
	w_u32(w, (uint32_t)in->mode);
	w_u32(w, (uint32_t)in->uid);
	w_u32(w, (uint32_t)in->gid);
	w_u32(w, in->nlink);
	w_u64(w, (uint64_t)in->rdev);
	w_time(w, &in->atime);
	w_time(w, f ? &f->log.mtime : &in->mtime);
	w_time(w, f ? &f->log.ctime : &in->ctime);
	w_u64(w, in->ckpt_seq);
	if (S_ISLNK(in->mode)) {
		w_str(w, in->target);
	} else if (f) {
		const struct file_log *l = &f->log;

		w_u64(w, f->id);
		w_u64(w, f->name_hash);
		w_u32(w, f->owner < 0 ? SNAP_NO_OWNER : (uint32_t)f->owner);
		w_u32(w, (f->sealed ? SNAP_SEALED : 0) |
			 (l->sealed_as_is ? SNAP_SEALED_AS_IS : 0) |
			 (l->protected ? SNAP_PROTECTED : 0) |
			 (l->meta_changed ? SNAP_META_CHANGED : 0) |
			 (l->lost ? SNAP_LOST : 0));
		w_u64(w, l->writers);
		w_u64(w, l->holders);
		w_u64(w, l->named);
		w_u64(w, l->persisted);
		if (f->sealed)
			w_seal(w, f->sealed);
	}
	if (f)
		file_unlock(f);
}

/* Position of @de among its inode's names (the primary one is 0). */
static uint32_t name_rank(const struct dentry *de)
{
	uint32_t r = 0;

	for (const struct dentry *d = de->inode->dentry; d && d != de;
	     d = d->lnext)
		r++;
	return r;
}

int ns_snap_encode(struct eng *e, void **buf, size_t *len)
{
	struct ns *ns = &e->ns;
	struct collect c = { 0 };
	struct wbuf w = { 0 };
	uint32_t nspaces = 0;

	ns_rdlock(e);
	c.v = malloc((ns->count ? ns->count : 1) * sizeof(*c.v));
	if (!c.v) {
		ns_unlock(e);
		return -ENOMEM;
	}
	ns_walk(ns, collect_one, &c);
	qsort(c.v, c.n, sizeof(*c.v), cmp_ino);
	for (struct stripe_space *sp = ns->spaces; sp; sp = sp->next)
		nspaces++;
	w_u32(&w, SNAP_MAGIC);
	w_u16(&w, NS_SNAP_VERSION);
	w_u16(&w, 0);
	w_u32(&w, e->store.chunk_size);
	w_u32(&w, nspaces);
	w_u64(&w, ns->next_ino);
	w_u64(&w, ns->next_ckpt_seq);
	w_u64(&w, c.n);
	w_u64(&w, c.ndentries);
	for (int k = 0; k < 64; k++)
		w_u64(&w, ns->lost_inc[k]);
	for (struct stripe_space *sp = ns->spaces; sp; sp = sp->next) {
		uint32_t top = 64;

		while (top && !sp->next_chunk[top - 1])
			top--;
		w_u64(&w, sp->ckpt);
		w_u32(&w, sp->scheme);
		w_u32(&w, top);
		for (uint32_t k = 0; k < top; k++)
			w_u64(&w, sp->next_chunk[k]);
	}
	for (size_t i = 0; i < c.n; i++)
		w_inode(&w, c.v[i]);
	for (size_t i = 0; i < c.n; i++) {
		if (!S_ISDIR(c.v[i]->mode))
			continue;
		for (struct dentry *de = c.v[i]->dir.first; de; de = de->next) {
			w_u64(&w, c.v[i]->ino);
			w_u64(&w, de->inode->ino);
			w_u32(&w, name_rank(de));
			w_str(&w, de->name);
		}
	}
	ns_unlock(e);
	free(c.v);
	if (w.oom) {
		free(w.p);
		return -ENOMEM;
	}
	*buf = w.p;
	*len = w.len;
	return 0;
}

/* --- reading ------------------------------------------------------------ */

struct rbuf {
	const uint8_t *p;
	size_t len, off;
	bool bad;
};

static uint64_t r_le(struct rbuf *r, int n)
{
	uint64_t v = 0;

	if (r->bad || (size_t)n > r->len - r->off) {
		r->bad = true;
		return 0;
	}
	for (int i = 0; i < n; i++)
		v |= (uint64_t)r->p[r->off + i] << (8 * i);
	r->off += (size_t)n;
	return v;
}

static uint32_t r_u32(struct rbuf *r)
{
	return (uint32_t)r_le(r, 4);
}

static uint64_t r_u64(struct rbuf *r)
{
	return r_le(r, 8);
}

static void r_time(struct rbuf *r, struct timespec *ts)
{
	ts->tv_sec = (time_t)r_u64(r);
	ts->tv_nsec = (long)r_u32(r);
	if (ts->tv_nsec >= 1000000000L)
		r->bad = true;
}

/* A string of @max bytes at most, as a pointer into the buffer. */
static const char *r_str(struct rbuf *r, size_t max, uint16_t *n)
{
	const char *s;

	*n = (uint16_t)r_le(r, 2);
	if (r->bad || *n > max || *n > r->len - r->off) {
		r->bad = true;
		return NULL;
	}
	s = (const char *)r->p + r->off;
	r->off += *n;
	return s;
}

struct s_inode {
	uint64_t ino;
	mode_t mode;
	uid_t uid;
	gid_t gid;
	uint32_t nlink, names;
	dev_t rdev;
	struct timespec atime, mtime, ctime;
	uint64_t ckpt_seq;
	const char *target;
	uint16_t tlen;
	uint64_t file_id, name_hash;
	int owner;
	struct file_log log;
	struct seal_rec *seal;	/* malloc()ed; handed to file_restore */
};

struct s_dentry {
	uint64_t dir, child;
	uint32_t rank;
	const char *name;
	uint16_t nlen;
	struct dentry *de;	/* the one made for it */
};

struct s_space {
	uint64_t ckpt;
	uint32_t scheme, top;
	const uint8_t *chunks;	/* top u64s */
};

struct snap {
	uint64_t next_ino, next_ckpt;
	uint64_t lost_inc[64];
	uint32_t nspaces;
	uint64_t ninodes, ndentries;
	struct s_space *spaces;
	struct s_inode *in;
	struct s_dentry *de;
};

static void snap_free(struct snap *s)
{
	for (uint64_t i = 0; s->in && i < s->ninodes; i++)
		free(s->in[i].seal);
	free(s->spaces);
	free(s->in);
	free(s->de);
}

static struct s_inode *s_find(const struct snap *s, uint64_t ino)
{
	uint64_t lo = 0, hi = s->ninodes;

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (s->in[mid].ino == ino)
			return &s->in[mid];
		if (s->in[mid].ino < ino)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static bool type_ok(mode_t m)
{
	return S_ISREG(m) || S_ISDIR(m) || S_ISLNK(m) || S_ISFIFO(m) ||
	       S_ISSOCK(m) || S_ISCHR(m) || S_ISBLK(m);
}

static struct seal_rec *r_seal(struct rbuf *r)
{
	struct seal_rec h = { 0 }, *t;

	h.index = r_u64(r);
	h.node = (int)r_u32(r);
	h.size = r_u64(r);
	r_time(r, &h.mtime);
	r_time(r, &h.ctime);
	h.scheme = r_u32(r);
	h.npieces = r_u32(r);
	h.ckpt = r_u64(r);
	h.base = r_u64(r);
	h.inc = r_u64(r);
	h.version = r_u64(r);
	if (r->bad || h.node < 0 || h.node >= 64 || h.size > RFT_MAX_FILE_SIZE ||
	    (uint64_t)h.npieces * 5 > r->len - r->off) {
		r->bad = true;
		return NULL;
	}
	t = malloc(sizeof(*t) + (size_t)h.npieces * sizeof(t->pieces[0]));
	if (!t)
		return NULL;
	*t = h;
	for (uint32_t i = 0; i < h.npieces; i++) {
		t->pieces[i].crc = r_u32(r);
		t->pieces[i].hole = (uint8_t)r_le(r, 1);
		if (t->pieces[i].hole > 1)
			r->bad = true;
	}
	return t;
}

static int r_inode(struct rbuf *r, struct s_inode *si)
{
	si->ino = r_u64(r);
	si->mode = (mode_t)r_u32(r);
	si->uid = (uid_t)r_u32(r);
	si->gid = (gid_t)r_u32(r);
	si->nlink = r_u32(r);
	si->rdev = (dev_t)r_u64(r);
	r_time(r, &si->atime);
	r_time(r, &si->mtime);
	r_time(r, &si->ctime);
	si->ckpt_seq = r_u64(r);
	if (!type_ok(si->mode) || (si->mode & ~(S_IFMT | 07777)))
		r->bad = true;
	if (S_ISLNK(si->mode)) {
		si->target = r_str(r, PATH_MAX - 1, &si->tlen);
	} else if (S_ISREG(si->mode)) {
		struct file_log *l = &si->log;
		uint32_t owner, flags;

		si->file_id = r_u64(r);
		si->name_hash = r_u64(r);
		owner = r_u32(r);
		flags = r_u32(r);
		l->writers = r_u64(r);
		l->holders = r_u64(r);
		l->named = r_u64(r);
		l->persisted = r_u64(r);
		l->mtime = si->mtime;
		l->ctime = si->ctime;
		l->sealed_as_is = flags & SNAP_SEALED_AS_IS;
		l->protected = flags & SNAP_PROTECTED;
		l->meta_changed = flags & SNAP_META_CHANGED;
		l->lost = flags & SNAP_LOST;
		si->owner = owner == SNAP_NO_OWNER ? -1 : (int)owner;
		if ((owner != SNAP_NO_OWNER && owner >= 64) ||
		    (flags & ~SNAP_FLAGS) ||
		    ((flags & SNAP_SEALED) && (flags & SNAP_SEALED_AS_IS)) ||
		    ((flags & SNAP_LOST) && !(flags & SNAP_SEALED)))
			r->bad = true;
		if (!r->bad && (flags & SNAP_SEALED)) {
			si->seal = r_seal(r);
			if (!si->seal && !r->bad)
				return -ENOMEM;
		}
	}
	return 0;
}

static bool name_ok(const char *name, uint16_t n)
{
	if (n == 0 || n > NAME_MAX || memchr(name, '/', n) ||
	    memchr(name, '\0', n))
		return false;
	return !(n == 1 && name[0] == '.') &&
	       !(n == 2 && name[0] == '.' && name[1] == '.');
}

/*
 * Decode and check @buf whole, before anything changes: -EPROTO (not a
 * snapshot of ours, or malformed), -EPROTONOSUPPORT (a format this daemon
 * does not know), -ENOMEM.
 */
static int snap_decode(struct eng *e, const void *buf, size_t len,
		       struct snap *s)
{
	struct rbuf r = { buf, len, 0, false };
	uint32_t magic, version, chunk;
	int rc = 0;

	memset(s, 0, sizeof(*s));
	magic = r_u32(&r);
	version = (uint32_t)r_le(&r, 2);
	r_le(&r, 2);
	if (r.bad || magic != SNAP_MAGIC) {
		rft_err("namespace snapshot (%zu bytes): not one of ours", len);
		return -EPROTO;
	}
	if (version != NS_SNAP_VERSION) {
		rft_err("namespace snapshot format %u: this daemon reads "
			"format %u only (another version of reftfsd wrote it)",
			version, NS_SNAP_VERSION);
		return -EPROTONOSUPPORT;
	}
	chunk = r_u32(&r);
	s->nspaces = r_u32(&r);
	s->next_ino = r_u64(&r);
	s->next_ckpt = r_u64(&r);
	s->ninodes = r_u64(&r);
	s->ndentries = r_u64(&r);
	for (int k = 0; k < 64; k++)
		s->lost_inc[k] = r_u64(&r);
	if (r.bad || s->ninodes == 0 || s->ninodes > len / SNAP_INODE_MIN ||
	    s->ndentries > len / SNAP_DENTRY_MIN ||
	    s->nspaces > len / 16)
		goto bad;
	if (chunk != e->store.chunk_size) {
		rft_err("namespace snapshot: chunk size %u KiB, this node's is "
			"%u KiB (every node of a group must use one)",
			chunk >> 10, e->store.chunk_size >> 10);
		return -EPROTO;
	}
	s->spaces = calloc(s->nspaces ? s->nspaces : 1, sizeof(*s->spaces));
	s->in = calloc(s->ninodes, sizeof(*s->in));
	s->de = calloc(s->ndentries ? s->ndentries : 1, sizeof(*s->de));
	if (!s->spaces || !s->in || !s->de) {
		rc = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < s->nspaces && !r.bad; i++) {
		struct s_space *sp = &s->spaces[i];

		sp->ckpt = r_u64(&r);
		sp->scheme = r_u32(&r);
		sp->top = r_u32(&r);
		if (sp->top > 64 || (size_t)sp->top * 8 > len - r.off) {
			r.bad = true;
			break;
		}
		sp->chunks = r.p + r.off;
		r.off += (size_t)sp->top * 8;
	}
	for (uint64_t i = 0; i < s->ninodes && !r.bad; i++) {
		struct s_inode *si = &s->in[i];

		rc = r_inode(&r, si);
		if (rc < 0)
			goto fail;
		/* Ascending, the root first, below the next number. */
		if (i == 0 ? si->ino != RFT_ROOT_INO || !S_ISDIR(si->mode)
			   : si->ino <= s->in[i - 1].ino ||
				     si->ino >= s->next_ino)
			r.bad = true;
	}
	for (uint64_t i = 0; i < s->ndentries && !r.bad; i++) {
		struct s_dentry *sd = &s->de[i];
		struct s_inode *dir, *child;

		sd->dir = r_u64(&r);
		sd->child = r_u64(&r);
		sd->rank = r_u32(&r);
		sd->name = r_str(&r, NAME_MAX, &sd->nlen);
		if (r.bad)
			break;
		dir = s_find(s, sd->dir);
		child = s_find(s, sd->child);
		if (!dir || !child || !S_ISDIR(dir->mode) ||
		    child->ino == RFT_ROOT_INO ||
		    !name_ok(sd->name, sd->nlen) || sd->rank >= child->nlink ||
		    ++child->names > child->nlink ||
		    (S_ISDIR(child->mode) && child->nlink != 1))
			r.bad = true;
	}
	/* Every inode but the root has all its names, and nothing is left. */
	for (uint64_t i = 1; i < s->ninodes && !r.bad; i++)
		if (s->in[i].names != s->in[i].nlink || !s->in[i].nlink)
			r.bad = true;
	if (r.bad || r.off != len)
		goto bad;
	return 0;
bad:
	rft_err("namespace snapshot (%zu bytes): malformed", len);
	rc = -EPROTO;
fail:
	snap_free(s);
	return rc;
}

/* --- restoring ---------------------------------------------------------- */

/* A name this node had before the restore. */
struct old_name {
	uint64_t dir;
	struct inode *child;	/* held */
	char *name;
	char *path;		/* for the persist tier; NULL without one */
	bool gone;		/* not there after the restore */
};

struct restore {
	struct old_name *old;
	size_t nold;
	struct inode **kick;	/* made or changed: the tiers look again */
	size_t nkick;
	uint64_t *changed;	/* files whose seal changed */
	size_t nchanged;
};

/*
 * Take every name out of the tree, keeping the old ones to compare with
 * after; the inodes stay (held).  ns->lock held for writing.
 */
static int detach_all(struct eng *e, struct restore *rs)
{
	struct ns *ns = &e->ns;
	size_t n = 0;

	for (uint32_t b = 0; b < ns->nbuckets; b++)
		for (struct inode *in = ns->table[b]; in; in = in->hnext)
			if (S_ISDIR(in->mode))
				n += in->dir.count;
	rs->old = calloc(n ? n : 1, sizeof(*rs->old));
	if (!rs->old)
		return -ENOMEM;
	for (uint32_t b = 0; b < ns->nbuckets; b++)
		for (struct inode *in = ns->table[b]; in; in = in->hnext) {
			struct dentry *de;
			char path[PATH_MAX];

			if (!S_ISDIR(in->mode))
				continue;
			for (de = in->dir.first; de; de = de->next) {
				struct old_name *o = &rs->old[rs->nold++];

				o->dir = in->ino;
				o->child = de->inode;
				o->child->holds++;
				o->name = de->name;
				if (e->persist &&
				    ns_dentry_path(ns, de, path,
						   sizeof(path)) == 0)
					o->path = strdup(path);
			}
		}
	for (uint32_t b = 0; b < ns->nbuckets; b++)
		for (struct inode *in = ns->table[b]; in; in = in->hnext) {
			if (S_ISDIR(in->mode)) {
				struct dir *d = &in->dir;

				for (struct dentry *de = d->first, *next; de;
				     de = next) {
					next = de->next;
					free(de); /* its name is in rs->old */
				}
				memset(d->table, 0,
				       d->nbuckets * sizeof(*d->table));
				d->count = d->nsubdirs = 0;
				d->first = d->last = NULL;
			}
			in->nlink = 0;
			in->dentry = NULL;
			in->parent = NULL;
		}
	return 0;
}

static bool ts_eq(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/*
 * Make or update the inode of @si; ns->lock held for writing.  NULL on
 * -ENOMEM (the namespace then lacks it: logged).
 */
static struct inode *restore_inode(struct eng *e, struct restore *rs,
				   struct s_inode *si)
{
	struct ns *ns = &e->ns;
	struct inode *in = ns_find(ns, si->ino);
	bool made = false, meta;

	if (!in) {
		uint64_t next = ns->next_ino;

		/* Its number as the log gave it (numbers only grow). */
		ns->next_ino = si->ino;
		in = ns_new_inode_at(e, si->mode, si->uid, si->gid, &si->mtime,
				     si->file_id);
		ns->next_ino = next > si->ino ? next : si->ino + 1;
		if (!in)
			return NULL;
		made = true;
	}
	/* Of a file, the log's times: a draft's own are no change. */
	meta = in->mode != si->mode || in->uid != si->uid ||
	       in->gid != si->gid || !ts_eq(&in->atime, &si->atime) ||
	       !ts_eq(S_ISREG(si->mode) ? &in->file.log.mtime : &in->mtime,
		      &si->mtime) ||
	       !ts_eq(S_ISREG(si->mode) ? &in->file.log.ctime : &in->ctime,
		      &si->ctime);
	ns_set_mode(in, si->mode);
	in->uid = si->uid;
	in->gid = si->gid;
	in->rdev = si->rdev;
	in->ckpt_seq = si->ckpt_seq;
	if (S_ISLNK(si->mode) &&
	    (!in->target || strlen(in->target) != si->tlen ||
	     memcmp(in->target, si->target, si->tlen) != 0)) {
		char *t = malloc((size_t)si->tlen + 1);

		if (t) {
			memcpy(t, si->target, si->tlen);
			t[si->tlen] = '\0';
			free(in->target);
			in->target = t;
		}
	}
	if (S_ISREG(si->mode)) {
		struct file *f = &in->file;

		f->id = si->file_id;
		f->name_hash = si->name_hash;
		if (file_restore(e, in, si->owner, &si->log, si->seal,
				 meta && !made))
			rs->changed[rs->nchanged++] = in->ino;
		si->seal = NULL; /* file_restore's now */
	} else if (meta && !made) {
		in->node_version++;
		in->node_persisted = false;
	}
	/* A file's mtime and ctime are file_restore's (a draft's its own). */
	in->atime = si->atime;
	if (!S_ISREG(si->mode)) {
		in->mtime = si->mtime;
		in->ctime = si->ctime;
	}
	if (made || meta)
		rs->kick[rs->nkick++] = in;
	return in;
}

static int cmp_rank(const void *a, const void *b)
{
	const struct s_dentry *x = *(struct s_dentry *const *)a;
	const struct s_dentry *y = *(struct s_dentry *const *)b;

	if (x->child != y->child)
		return x->child < y->child ? -1 : 1;
	return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/*
 * Link the snapshot's names, each directory's in its order, then put
 * each hard-linked inode's names in the snapshot's order (the first is
 * the primary one, where its persisted copy lives).  ns->lock held for
 * writing.
 */
static void relink(struct eng *e, struct snap *s)
{
	struct ns *ns = &e->ns;
	struct s_dentry **multi;
	size_t nm = 0;
	char name[NAME_MAX + 1];

	for (uint64_t i = 0; i < s->ndentries; i++) {
		struct s_dentry *sd = &s->de[i];
		struct inode *dir = ns_find(ns, sd->dir);
		struct inode *child = ns_find(ns, sd->child);

		memcpy(name, sd->name, sd->nlen);
		name[sd->nlen] = '\0';
		if (!dir || !child || !S_ISDIR(dir->mode) ||
		    ns_dir_find(&dir->dir, name) ||
		    ns_link_child(e, dir, name, child, false) < 0) {
			rft_err("namespace snapshot: %s in directory %llu "
				"cannot be made here: this node's namespace "
				"differs from the group's",
				name, (unsigned long long)sd->dir);
			continue;
		}
		sd->de = dir->dir.last;
	}
	multi = malloc((s->ndentries ? s->ndentries : 1) * sizeof(*multi));
	if (!multi)
		return; /* names stay in directory order: the same names */
	for (uint64_t i = 0; i < s->ndentries; i++)
		if (s->de[i].de && s->de[i].de->inode->nlink > 1)
			multi[nm++] = &s->de[i];
	qsort(multi, nm, sizeof(*multi), cmp_rank);
	for (size_t i = 0; i < nm;) {
		struct inode *child = multi[i]->de->inode;
		struct dentry **pp = &child->dentry;

		for (; i < nm && multi[i]->de->inode == child; i++) {
			*pp = multi[i]->de;
			pp = &multi[i]->de->lnext;
		}
		*pp = NULL;
		child->parent = child->dentry->dir;
	}
	free(multi);
}

static void replace_spaces(struct eng *e, const struct snap *s)
{
	struct ns *ns = &e->ns;
	struct stripe_space *keep = NULL;

	while (ns->spaces) {
		struct stripe_space *sp = ns->spaces;

		ns->spaces = sp->next;
		free(sp);
	}
	for (uint32_t i = s->nspaces; i-- > 0;) {
		const struct s_space *ss = &s->spaces[i];
		struct stripe_space *sp = calloc(1, sizeof(*sp));

		if (!sp) {
			rft_err("namespace snapshot: no memory for a stripe "
				"space; erasure-coded seals will not line up");
			continue;
		}
		sp->ckpt = ss->ckpt;
		sp->scheme = ss->scheme;
		for (uint32_t k = 0; k < ss->top; k++) {
			uint64_t v = 0;

			for (int b = 0; b < 8; b++)
				v |= (uint64_t)ss->chunks[8 * k + b] << (8 * b);
			sp->next_chunk[k] = v;
		}
		sp->next = keep;
		keep = sp;
	}
	ns->spaces = keep;
}

int ns_snap_restore(struct eng *e, const void *buf, size_t len,
		    void (*changed)(void *ctx, uint64_t ino), void *ctx)
{
	struct ns *ns = &e->ns;
	struct restore rs = { 0 };
	struct snap s;
	int rc;

	rc = snap_decode(e, buf, len, &s);
	if (rc < 0)
		return rc;
	rs.kick = malloc(s.ninodes * sizeof(*rs.kick));
	rs.changed = malloc(s.ninodes * sizeof(*rs.changed));
	if (!rs.kick || !rs.changed) {
		rc = -ENOMEM;
		goto out;
	}
	/* f->copy changes under the names lock too (struct file). */
	eng_names_lock(e);
	ns_wrlock(e);
	/* One number is one inode everywhere: of one type. */
	for (uint64_t i = 0; i < s.ninodes; i++) {
		struct inode *in = ns_find(ns, s.in[i].ino);

		if (in && (in->mode & S_IFMT) != (s.in[i].mode & S_IFMT)) {
			rft_err("namespace snapshot: inode %llu is of another "
				"type here: this node's namespace is not the "
				"group's",
				(unsigned long long)in->ino);
			rc = -EPROTO;
			break;
		}
	}
	if (rc == 0)
		rc = detach_all(e, &rs);
	if (rc < 0) {
		ns_unlock(e);
		eng_names_unlock(e);
		goto out;
	}
	/* Before the files: whose writers are this daemon's (file_restore). */
	memcpy(ns->lost_inc, s.lost_inc, sizeof(ns->lost_inc));
	for (uint64_t i = 0; i < s.ninodes; i++)
		if (!restore_inode(e, &rs, &s.in[i]))
			rft_err("namespace snapshot: no memory for inode %llu",
				(unsigned long long)s.in[i].ino);
	relink(e, &s);
	ns->next_ino = s.next_ino;
	ns->next_ckpt_seq = s.next_ckpt;
	replace_spaces(e, &s);
	/* The names this node had that the group no longer has. */
	for (size_t i = 0; i < rs.nold; i++) {
		struct old_name *o = &rs.old[i];
		struct inode *dir = ns_find(ns, o->dir);
		struct dentry *de = dir && S_ISDIR(dir->mode)
					    ? ns_dir_find(&dir->dir, o->name)
					    : NULL;

		o->gone = !de || de->inode != o->child;
		if (o->gone && o->child->nlink == 0 &&
		    S_ISREG(o->child->mode))
			pass_unlinked(e, o->child); /* no copy to wait for */
	}
	ns_unlock(e);
	/*
	 * As another node's unlink or rename: the tiers learn of it (the
	 * owner checks its persisted copy went along, parity of a file gone
	 * is taken back), the kernel forgets the name.
	 */
	for (size_t i = 0; i < rs.nold; i++) {
		struct old_name *o = &rs.old[i];
		struct eng_ev ev = { .in = o->child, .from = o->path,
				     .remote = true };

		if (!o->gone)
			continue;
		if (o->path && o->child->nlink > 0) {
			ev.kind = EV_RENAMED;
			eng_post(e, &ev);
		} else if (o->child->nlink == 0) {
			ev.kind = EV_UNLINKED;
			ev.from = o->path ? o->path : "";
			ev.dir = S_ISDIR(o->child->mode);
			ev.last = true;
			ev.open = o->child->opens > 0;
			eng_post(e, &ev);
		}
	}
	eng_names_unlock(e);
	for (size_t i = 0; i < rs.nold; i++) {
		struct old_name *o = &rs.old[i];

		if (o->gone && e->inval.entry)
			e->inval.entry(e->inval.ctx, o->dir, o->name,
				       S_ISDIR(o->child->mode) &&
				       o->child->nlink > 0);
		ns_unhold(e, o->child);
		free(o->name);
		free(o->path);
	}
	for (size_t i = 0; i < rs.nkick; i++)
		eng_post_dirty(e, rs.kick[i]);
	for (size_t i = 0; changed && i < rs.nchanged; i++)
		changed(ctx, rs.changed[i]);
out:
	free(rs.old);
	free(rs.kick);
	free(rs.changed);
	snap_free(&s);
	return rc;
}
