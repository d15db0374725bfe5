/*
 * record.c - a file's seal, and what the group's log records of it.
 *
 * The last writer's close seals a file (writer_gone); in a group the seal
 * goes round the log, and every node applies every SEAL (file_apply_seal):
 * the last one in the log is the file's content on every node, a node's
 * own changes since being its draft until they are sealed in turn.  Each
 * node keeps the log's record of the seal (f->sealed, as the SEAL said
 * it) and of what came of it (f->log: PROTECT, PERSIST, LOST, writers,
 * times; written through file.c's file_log_*), and derives what it shows
 * of the group's version from that record in one place (log_holders,
 * log_records): the SEAL's apply, file_revert, file_resync and a
 * restore from the log's snapshot (file_restore).  Replicas received
 * are installed here, and verify and resync compare what a node shows
 * with that record.  Looks files up by number (ns_find): above ns.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_i.h"
#include "erasure.h"

bool file_to_seal(const struct eng *e, const struct file *f)
{
	return e->gops && f->seal_sent != f->version &&
	       (file_draft(e, f) || f->owner == e->node);
}

int file_seal_build(struct eng *e, struct inode *in, struct nsop *op)
{
	struct file *f = &in->file;
	uint32_t n;
	int rc;

	file_rdlock(f);
	n = (uint32_t)((f->size + e->store.chunk_size - 1) >>
		       e->store.chunk_shift);
	file_unlock(f);
	if (n) {
		rc = file_load(e, in, 0, n - 1, NULL);
		if (rc < 0)
			return rc;
	}
	while (!file_wrlock_drained(e, f))
		file_wait_writes(e, f);
	if (!file_to_seal(e, f)) {
		/* Sealed already, or another node's version shows here. */
		file_unlock(f);
		return 1;
	}
	n = (uint32_t)((f->size + e->store.chunk_size - 1) >>
		       e->store.chunk_shift);
	for (uint32_t i = 0; i < n && i < f->nslots; i++)
		if (slot_remote(&f->slots[i])) {
			/* Evicted again meanwhile: try again. */
			file_unlock(f);
			return -EAGAIN;
		}
	/*
	 * Also when sealed already: a truncate here sealed the file while
	 * some pieces were on peers, and their checksums are made only now
	 * that they are here (file_seal_locked redoes only those).
	 */
	file_seal_locked(e, f);
	free(op->pieces);
	op->pieces = calloc(n ? n : 1, sizeof(*op->pieces));
	if (!op->pieces) {
		file_unlock(f);
		return -ENOMEM;
	}
	op->npieces = n;
	for (uint32_t i = 0; i < n; i++) {
		const struct slot *s = i < f->nslots ? &f->slots[i] : NULL;
		uint32_t len = file_piece_len(e, f->size, i);

		if (!s || s->where == PIECE_HOLE) {
			op->pieces[i].hole = 1;
			op->pieces[i].crc = s ? s->crc : crc_zeros(0, len);
		} else {
			op->pieces[i].crc = s->crc;
		}
	}
	op->version = f->version;
	op->size = f->size;
	op->chunk_size = e->store.chunk_size;
	op->mtime = in->mtime;
	f->seal_sent = f->version;
	file_unlock(f);
	return 0;
}

int file_sync_state(struct eng *e, struct inode *in, uint64_t *version)
{
	struct file *f = &in->file;
	int st;

	file_rdlock(f);
	if (!*version)
		*version = f->version;
	if (file_lost(f))
		st = -EIO;
	else if (f->dur.protected_data >= *version ||
		 f->dur.persisted_data >= *version)
		st = FILE_SYNC_DONE;
	else if (file_to_seal(e, f) && f->seal_sent < *version)
		st = FILE_SYNC_SEAL;
	else
		st = FILE_SYNC_WAIT;
	file_unlock(f);
	return st;
}

int file_seal_again(struct eng *e, struct inode *in, const struct nsop *op)
{
	struct file *f = &in->file;
	int rc = 0;

	file_rdlock(f);
	if (f->version != op->version || f->seal_sent != op->version)
		rc = 1;
	else if (f->sealed && f->sealed->node == e->node &&
		 f->sealed->inc == e->inc && f->sealed->version == op->version)
		rc = 1;
	file_unlock(f);
	return rc;
}

struct inode *file_reseal_hold(struct eng *e, uint64_t ino)
{
	struct inode *in;
	bool go = false;

	ns_wrlock(e);
	in = ns_find(&e->ns, ino);
	if (in && S_ISREG(in->mode)) {
		file_rdlock(&in->file);
		go = in->file.writers == 0 && file_to_seal(e, &in->file);
		file_unlock(&in->file);
	}
	if (go)
		in->holds++;
	ns_unlock(e);
	return go ? in : NULL;
}

/*
 * Make @f's pieces those of a seal by another node (@size bytes, @n
 * pieces): holes stay holes, the rest are on the seal's holders
 * (PIECE_PEER).  The slots are the group's version from then on.  f->lock
 * held for writing; the old pieces' chunks go (readers hold their own
 * pins).
 */
static int take_remote_seal(struct eng *e, struct file *f, uint64_t size,
			    uint32_t n, const struct nsop_piece *pcs)
{
	struct slot *slots = NULL;

	if (n) {
		slots = malloc((size_t)n * sizeof(*slots));
		if (!slots)
			return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t len = file_piece_len(e, size, i);

		slots[i] = (struct slot){ 0, pcs[i].hole ? 0 : len,
					  pcs[i].crc, len,
					  pcs[i].hole ? PIECE_HOLE
						      : PIECE_PEER,
					  0 };
	}
	for (uint32_t i = 0; i < f->nslots; i++)
		file_drop_slot(e, f, &f->slots[i]);
	free(f->slots);
	f->slots = slots;
	f->nslots = f->cap = n;
	f->size = size;
	f->version++;
	file_dur_sealed(f);
	f->synced = f->version;
	f->crc_unverified = false;
	f->crc_bad = false;
	f->fetch_said = false;
	return 0;
}

/*
 * Record @op (at @index, its pieces at @ckpt/@base of its stripes) as the
 * group's version of @f.  f->lock held for writing.  0 or -ENOMEM.
 */
static int note_sealed(struct file *f, const struct nsop *op,
		       uint64_t index, uint64_t ckpt, uint64_t base)
{
	struct seal_rec *t;

	t = malloc(sizeof(*t) + (size_t)op->npieces * sizeof(t->pieces[0]));
	if (!t)
		return -ENOMEM;
	*t = (struct seal_rec){
		.index = index, .node = op->node, .size = op->size,
		.mtime = op->mtime, .ctime = op->now, .scheme = op->flags,
		.ckpt = ckpt, .base = base,
		.inc = op->inc, .version = op->version,
		.npieces = op->npieces,
	};
	if (op->npieces)
		memcpy(t->pieces, op->pieces,
		       (size_t)op->npieces * sizeof(t->pieces[0]));
	free(f->sealed);
	f->sealed = t;
	/* What comes of it: its node holds it, nothing else yet. */
	file_log_seal(f, op->node, &op->mtime, &op->now);
	return 0;
}

/*
 * Does this node show the group's version of @f (f->sealed, or the file
 * as made before its first seal): no draft, its slots that version's?
 * f->lock held.
 */
static bool shows_log(const struct eng *e, const struct file *f)
{
	return !file_draft(e, f) &&
	       f->gseal == (f->sealed ? f->sealed->index : 0);
}

/*
 * @f's holders as this node counts them, from the log's record: the
 * sealer's node holds the seal's bytes, but not when this is that node
 * and they went with an earlier daemon (@mine false: the apply found
 * them gone), unless a PROTECT named it since (a rebuild brought them
 * back).  Of an erasure-coded seal only the owner holds bytes; the nodes
 * PROTECT named hold parity rows.  Exactly what the SEAL's, PROTECTs' and
 * LOSTs' applies leave (file_apply_seal, file_apply_protect, lost_one).
 * f->lock held for writing.
 */
static void log_holders(const struct eng *e, struct file *f, bool mine)
{
	const struct seal_rec *t = f->sealed;
	uint64_t self = e->node >= 0 && e->node < 64 ? 1ULL << e->node : 0;
	uint64_t h = f->log.holders;

	if (t && t->node == e->node && !mine)
		h = (h & ~self) | (f->log.named & self);
	if (t && t->scheme) {
		f->holders = h & 1ULL << t->node;
		f->parity_holders = f->log.named;
	} else {
		f->holders = h;
		f->parity_holders = 0;
	}
}

/*
 * The persisted copy a PERSIST records, on a node that shows its seal:
 * its data, and its metadata unless @meta_changed (a SETATTR of it came
 * since).  f->lock held for writing, and the names lock (f->copy).
 */
static void take_persisted(struct file *f, bool meta_changed)
{
	if (f->copy == COPY_NONE) {
		f->copy = COPY_HOME;
		f->copy_id = (struct copy_id){ 0, 0 };
	}
	file_dur_persisted(f, f->version, meta_changed ? 0 : f->meta_version);
	/* What is here of it may go when memory is short. */
	for (uint32_t i = 0; i < f->nslots; i++)
		if (slot_in_ram(&f->slots[i]))
			f->slots[i].flags |= SLOT_CLEAN;
}

/*
 * The records of a node that shows the group's version, from the log's
 * record (@mine: its own seal of its slots): holders, protected, lost;
 * with @persist, also the persisted copy the record has (a PERSIST that
 * this node has not applied: one of the entries a snapshot stands for).
 * f->lock held for writing (and the names lock with @persist).
 */
static void log_records(const struct eng *e, struct file *f, bool mine,
			bool persist)
{
	log_holders(e, f, mine);
	file_dur_protected(f, f->log.protected &&
					      f->dur.sealed == f->version
				      ? f->version
				      : 0);
	f->lost_seal = f->log.lost ? f->gseal : 0;
	if (persist && f->log.persisted && f->dur.sealed == f->version)
		take_persisted(f, f->log.meta_changed);
}

uint32_t stripe_code(const struct ers_scheme *s, int nodes)
{
	if ((s->kind != ERS_XOR && s->kind != ERS_RS) || nodes < 1 ||
	    nodes > 64)
		return 0;
	return (uint32_t)nodes << 24 | (uint32_t)s->kind << 16 |
	       (uint32_t)s->k << 8 | (uint32_t)s->m;
}

int stripe_layout(uint32_t code, struct ers_layout *l)
{
	struct ers_scheme s = { (enum ers_kind)(code >> 16 & 0xff),
				(int)(code >> 8 & 0xff), (int)(code & 0xff) };

	if ((s.kind != ERS_XOR && s.kind != ERS_RS) ||
	    ers_scheme_check(&s) < 0)
		return -EINVAL;
	return ers_layout_init(l, &s, (int)(code >> 24));
}

/*
 * The first of @n chunk numbers of node @node in @in's checkpoint under
 * scheme @scheme, taken now (ns->lock held for writing).  Stripes never
 * span checkpoints: files at the top level share the root's space.
 * -ENOMEM when a new space cannot be made (the seal then fails here).
 */
static int take_chunks(struct eng *e, struct inode *in, uint32_t scheme,
		       int node, uint32_t n, uint64_t *ckpt, uint64_t *base)
{
	struct inode *c = ns_checkpoint_of(&e->ns, in);
	struct stripe_space *sp;

	*ckpt = c ? c->ino : e->ns.root->ino;
	for (sp = e->ns.spaces; sp; sp = sp->next)
		if (sp->ckpt == *ckpt && sp->scheme == scheme)
			break;
	if (!sp) {
		sp = calloc(1, sizeof(*sp));
		if (!sp)
			return -ENOMEM;
		sp->ckpt = *ckpt;
		sp->scheme = scheme;
		sp->next = e->ns.spaces;
		e->ns.spaces = sp;
	}
	*base = sp->next_chunk[node];
	sp->next_chunk[node] += n;
	return 0;
}

/*
 * Show the group's version of @in (f->sealed) in place of what this node
 * has, as the SEAL's apply does for another node's seal: its pieces from
 * their holders, its records and times as the log's record says, with
 * @persist the persisted copy it records too.  ns->lock and f->lock held
 * for writing, and with @persist the names lock.
 */
static int show_sealed(struct eng *e, struct inode *in, bool persist)
{
	struct file *f = &in->file;
	const struct seal_rec *t = f->sealed;
	int rc;

	rc = take_remote_seal(e, f, t->size, t->npieces, t->pieces);
	if (rc < 0)
		return rc;
	f->gseal = t->index;
	f->scheme = t->scheme;
	f->stripe_ckpt = t->ckpt;
	f->chunk_base = t->base;
	log_records(e, f, false, persist);
	in->mtime = f->log.mtime;
	in->ctime = f->log.ctime;
	return 0;
}

/*
 * The group's version in place of this node's draft or of what it showed
 * off the seal (file_revert, file_resync): not to be sealed again here.
 * ns->lock and f->lock held for writing, and the names lock.
 */
static int take_sealed(struct eng *e, struct inode *in)
{
	int rc = show_sealed(e, in, true);

	if (rc == 0)
		in->file.seal_sent = in->file.version;
	return rc;
}

int file_apply_seal(struct eng *e, const struct nsop *op, uint64_t index)
{
	bool own = op->node == e->node && op->inc == e->inc;
	struct inode *in;
	struct file *f;
	uint64_t ckpt = 0, base = 0;
	bool kick = false;
	int rc = 0;

	ns_wrlock(e);
	in = ns_find(&e->ns, op->ino);
	if (!in || !S_ISREG(in->mode)) {
		rc = -ENOENT;
		goto out;
	}
	if (op->chunk_size != e->store.chunk_size) {
		/* Pieces would not line up: every node must use one size. */
		rft_err("seal of inode %llu from node %d: chunk size %u KiB, "
			"this node's is %u KiB",
			(unsigned long long)op->ino, op->node,
			op->chunk_size >> 10, e->store.chunk_size >> 10);
		rc = -EPROTO;
		goto out;
	}
	if (op->node < 0 || op->node >= 64) {
		rc = -EINVAL;
		goto out;
	}
	f = &in->file;
	file_wrlock(f);
	/*
	 * An erasure-coded seal takes the next chunk numbers of its node in
	 * its checkpoint's stripe space, whatever this node does with it
	 * below: every node numbers alike.
	 */
	if (op->flags && take_chunks(e, in, op->flags, op->node, op->npieces,
				     &ckpt, &base) < 0) {
		file_unlock(f);
		rc = -ENOMEM;
		goto out;
	}
	/*
	 * Whoever sealed it, this is the file's content now (the last seal
	 * in the log wins), and its node holds its bytes.  A node that was
	 * writing it elsewhere has sealed or will seal its own.
	 */
	f->owner = op->node;
	f->remote_writers = 0;
	file_log_writers(f, 0, ~0ULL);
	rc = note_sealed(f, op, index, ckpt, base);
	if (rc < 0) {
		/* What this node shows stays as it was. */
	} else if (own && f->version == op->version) {
		/* This node's draft as sealed: its slots are the group's. */
		f->gseal = index;
		f->holders = 1ULL << e->node;
		f->scheme = op->flags;
		f->stripe_ckpt = ckpt;
		f->chunk_base = base;
		f->parity_holders = 0;
		f->synced = f->version;
		f->fetch_said = false;
		f->lost_seal = 0;
	} else if (file_draft(e, f)) {
		/*
		 * This node changed the file since its slots were the group's
		 * version: its writers go on with their own, sealed at their
		 * last close (later in the log, so it wins), or given up
		 * (file_revert) when it cannot be.
		 */
	} else {
		/*
		 * Another node's seal, or this node's from an earlier daemon
		 * (a restart replaying the log): the bytes are elsewhere, or
		 * nowhere when that daemon took them with it.
		 */
		rc = show_sealed(e, in, false); /* nothing since the SEAL */
		kick = rc == 0;
	}
	if (rc < 0)
		rft_err("seal of inode %llu by node %d (entry %llu): %s: this "
			"node's view of it differs from the group's",
			(unsigned long long)op->ino, op->node,
			(unsigned long long)index, strerror(-rc));
	file_dur_unlock(e, in);
out:
	ns_unlock(e);
	if (kick)
		eng_post_dirty(e, in);
	return rc;
}

int file_revert(struct eng *e, struct inode *in, int why)
{
	struct file *f = &in->file;
	char path[PATH_MAX];
	int node = -1, rc = -EAGAIN;

	/* f->copy changes under the names lock too (struct file). */
	eng_names_lock(e);
	ns_wrlock(e);
	file_wrlock(f);
	/*
	 * Only when another node sealed since the draft's base: this node's
	 * own seal's bytes are the draft's (changed since), and the base,
	 * while still the group's, may come back (a holder up again).
	 */
	if (f->sealed && f->sealed->index != f->gseal &&
	    f->sealed->node != e->node && file_draft(e, f)) {
		node = f->sealed->node;
		rc = take_sealed(e, in);
	}
	if (rc == 0 && ns_path(&e->ns, in, path, sizeof(path)) < 0)
		snprintf(path, sizeof(path), "inode %llu",
			 (unsigned long long)in->ino);
	file_dur_unlock(e, in);
	ns_unlock(e);
	eng_names_unlock(e);
	if (rc < 0)
		return rc;
	rft_warn("%s: this node's changes could not be sealed (%s) and node "
		 "%d sealed another version since: they are dropped, the "
		 "file reads as node %d's version here too",
		 path, strerror(-why), node, node);
	eng_post_dirty(e, in);
	return 0;
}

static bool ts_same(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

int file_restore(struct eng *e, struct inode *in, int owner,
		 const struct file_log *log, struct seal_rec *t, bool attrs)
{
	uint64_t self = e->node >= 0 && e->node < 64 ? 1ULL << e->node : 0;
	struct file *f = &in->file;
	struct file_log old;
	bool same, mine, showed;
	int changed = 0, rc;

	file_wrlock(f);
	old = f->log;
	/* Before: did it show the group's version, of the same seal? */
	showed = shows_log(e, f);
	same = t ? f->sealed && f->sealed->index == t->index : !f->sealed;
	/*
	 * A SETATTR of its metadata among the entries: a write-back in
	 * flight copied the old attributes (apply_setattr).  Not a name's
	 * change, which moves ctime only.
	 */
	if (log->meta_changed &&
	    (!old.meta_changed || old.persisted != log->persisted || attrs))
		f->meta_version++;
	f->owner = owner;
	file_log_restore(f, log);
	/*
	 * Writers: as their CREATEs left them, but not this daemon's own
	 * (its apply opened them here).  A node's bits before its LOST are
	 * its earlier daemons', the ones after it this daemon's.
	 */
	f->remote_writers = log->writers;
	if (self && e->gops && e->inc && e->ns.lost_inc[e->node] == e->inc)
		f->remote_writers &= ~self;
	if (!t) {
		/* Never sealed: made by MKNOD, or a SETATTR sealed it. */
		if (log->sealed_as_is && !file_draft(e, f) && !f->writers)
			file_dur_sealed(f);
	} else if (same) {
		/* Applied here already. */
		free(f->sealed);
		f->sealed = t;
	} else {
		free(f->sealed);
		f->sealed = t;
		if (e->gops && t->node == e->node && t->inc == e->inc &&
		    f->version == t->version) {
			/* This daemon's own seal of its slots. */
			f->gseal = t->index;
			f->holders = self;
			f->parity_holders = 0;
			f->scheme = t->scheme;
			f->stripe_ckpt = t->ckpt;
			f->chunk_base = t->base;
			f->synced = f->version;
			f->fetch_said = false;
		} else if (file_draft(e, f)) {
			/* Its writers go on with their own version. */
		} else {
			/* Another node's seal, or an earlier daemon's. */
			rc = show_sealed(e, in, true);
			if (rc < 0)
				rft_err("inode %llu: the snapshot's seal "
					"(entry %llu) cannot be shown here: %s",
					(unsigned long long)in->ino,
					(unsigned long long)t->index,
					strerror(-rc));
			else
				changed = 1;
		}
	}
	/* Its slots are this daemon's seal (not one it could not show). */
	mine = t && e->gops && t->node == e->node && t->inc == e->inc &&
	       !changed;
	if (shows_log(e, f)) {
		/*
		 * A PERSIST not applied here yet records the copy as its apply
		 * would; one applied here stays as this node keeps it (its
		 * persist tier may have found it gone since).  The owner's
		 * own copy is its write-back's to record.
		 */
		bool persist = !mine && log->persisted &&
			       (!showed || !same ||
				old.persisted != log->persisted);

		log_records(e, f, mine, persist);
	} else if (t && f->gseal == t->index) {
		/* A draft of the log's seal: its holders as they went. */
		log_holders(e, f, mine);
		f->lost_seal = log->lost ? t->index : 0;
	}
	/*
	 * Times: what showing the group's version gives (show_sealed), or
	 * each one an entry set since (a draft keeps its own otherwise).
	 */
	if (!changed && (!shows_log(e, f) || mine)) {
		if (!ts_same(&old.mtime, &log->mtime))
			in->mtime = log->mtime;
		if (!ts_same(&old.ctime, &log->ctime))
			in->ctime = log->ctime;
	} else if (!changed) {
		in->mtime = log->mtime;
		in->ctime = log->ctime;
	}
	file_dur_unlock(e, in);
	return changed;
}

/*
 * Find piece @idx of @ino's seal @gseal: ns->lock taken (read) and, when
 * the file is found, its lock (write) with *@fp set; release both with
 * replica_unlock().  NULL when the file is not at that seal or has no such
 * piece.
 */
static struct slot *replica_slot(struct eng *e, uint64_t ino, uint64_t gseal,
				 uint32_t idx, struct file **fp)
{
	struct inode *in;
	struct file *f;

	ns_rdlock(e);
	in = ns_find(&e->ns, ino);
	if (!in || !S_ISREG(in->mode))
		return NULL;
	f = &in->file;
	file_wrlock(f);
	*fp = f;
	if (f->gseal != gseal || idx >= f->nslots)
		return NULL;
	return &f->slots[idx];
}

static void replica_unlock(struct eng *e, struct file *f)
{
	if (f)
		file_unlock(f);
	ns_unlock(e);
}

int file_replica_dest(struct eng *e, uint64_t ino, uint64_t gseal,
		      uint32_t idx, uint32_t len, uint32_t crc, uint32_t *chunk)
{
	struct file *f = NULL;
	struct slot *s = replica_slot(e, ino, gseal, idx, &f);
	int rc = -ESTALE;

	if (s && s->where == PIECE_PEER && s->crc == crc &&
	    len == file_piece_len(e, f->size, idx))
		rc = 0;
	else if (s && slot_in_ram(s))
		rc = -EEXIST;
	replica_unlock(e, f);
	/*
	 * A copy held for its owner comes before caches: when memory is
	 * full, eviction runs now, with no lock held (it never waits: it
	 * takes files with trywrlock).  The slot is looked at again when
	 * the bytes are in (file_replica_install).
	 */
	if (rc == 0)
		rc = store_alloc_evict(&e->store, len, chunk);
	return rc;
}

void file_replica_install(struct eng *e, uint64_t ino, uint64_t gseal,
			  uint32_t idx, uint32_t chunk, uint32_t crc, bool ok)
{
	struct file *f = NULL;
	struct slot *s = ok ? replica_slot(e, ino, gseal, idx, &f) : NULL;

	/* replica_slot() locked only when asked (@ok). */
	if (s && s->where == PIECE_PEER && s->crc == crc) {
		uint32_t len = file_piece_len(e, f->size, idx);

		s->chunk = chunk;
		s->where = PIECE_RAM;
		/*
		 * The sealed bytes, as many as the file keeps: a truncate
		 * here since file_replica_dest() lowered fill (down) or left
		 * it (up: zeros past it), and the block holds no more than
		 * the seal's piece.  Its checksum is then made again.
		 */
		s->fill = s->fill < len ? s->fill : len;
		if (s->fill != s->crc_len || s->crc_len != len)
			s->crc_len = SLOT_CRC_UNKNOWN;
		s->flags = 0; /* held for the owner: not a cache */
		f->resident++;
		chunk = RFT_NO_CHUNK;
	}
	if (ok)
		replica_unlock(e, f);
	if (chunk != RFT_NO_CHUNK)
		store_put(&e->store, chunk);
}

int file_replica_complete(struct eng *e, uint64_t ino, uint64_t gseal,
			  uint8_t *map, uint32_t map_bits, uint32_t *npieces)
{
	struct file *f = NULL;
	int rc = 0;

	*npieces = 0;
	/* Piece 0 only finds the file; every piece is looked at below. */
	replica_slot(e, ino, gseal, 0, &f);
	if (!f || f->gseal != gseal) {
		rc = -ESTALE;
	} else {
		*npieces = f->nslots;
		for (uint32_t i = 0; i < f->nslots; i++) {
			struct slot *s = &f->slots[i];

			if (s->where == PIECE_PEER ||
			    s->where == PIECE_PERSIST) {
				rc = -EAGAIN;
				if (map && i < map_bits)
					map[i / 8] |= (uint8_t)(1u << (i % 8));
			}
			/* A copy a reader fetched is kept as the replica. */
			s->flags &= (uint8_t)~SLOT_FETCHED;
		}
	}
	replica_unlock(e, f);
	return rc;
}

int file_piece_keep(struct eng *e, uint64_t ino, uint64_t gseal, uint32_t idx,
		    const uint8_t *data, uint32_t len, uint32_t crc)
{
	struct file *f = NULL;
	struct slot *sl;
	uint32_t chunk;
	int rc = -ESTALE;

	if (store_try_alloc_len(&e->store, len, &chunk) < 0)
		return -ENOSPC;
	memcpy(store_ptr(&e->store, chunk), data, len);
	sl = replica_slot(e, ino, gseal, idx, &f);
	/* Not after a truncate here since the seal (fill lowered). */
	if (sl && sl->where == PIECE_PEER && sl->crc == crc &&
	    sl->crc_len == len && sl->fill == len &&
	    len == file_piece_len(e, f->size, idx)) {
		sl->chunk = chunk;
		sl->where = PIECE_RAM;
		sl->fill = len;
		sl->flags |= SLOT_FRESH | SLOT_FETCHED;
		f->resident++;
		chunk = RFT_NO_CHUNK;
		rc = 0;
	}
	replica_unlock(e, f);
	if (chunk != RFT_NO_CHUNK)
		store_put(&e->store, chunk);
	return rc;
}

/*
 * Piece @idx (@len bytes) of @ino's seal @gseal, here whole and unchanged
 * since that seal, with CRC32C *@crc (NULL: its checksum made for @len
 * bytes, whatever it is): its slot into *@out and 0, its chunk pinned
 * (store_put when done); or, with @spilled, 1 when it is in this node's
 * spill dir, the file's id into *@spilled.  -ESTALE when not here.  Takes
 * ns->lock and the file's lock (read) briefly.
 */
static int sealed_piece_pin(struct eng *e, uint64_t ino, uint64_t gseal,
			    uint32_t idx, uint32_t len, const uint32_t *crc,
			    struct slot *out, uint64_t *spilled)
{
	struct inode *in;
	int rc = -ESTALE;

	ns_rdlock(e);
	in = ns_find(&e->ns, ino);
	if (in && S_ISREG(in->mode)) {
		struct file *f = &in->file;
		const struct slot *sl;

		file_rdlock(f);
		sl = idx < f->nslots ? &f->slots[idx] : NULL;
		if (f->gseal == gseal && f->dur.sealed == f->version && sl &&
		    (slot_in_ram(sl) ||
		     (spilled && sl->where == PIECE_SPILL)) &&
		    (crc ? sl->crc == *crc : sl->crc_len == len) &&
		    len == file_piece_len(e, f->size, idx)) {
			*out = *sl;
			if (slot_in_ram(sl)) {
				store_get(&e->store, sl->chunk);
				rc = 0;
			} else {
				*spilled = f->id;
				rc = 1;
			}
		}
		file_unlock(f);
	}
	ns_unlock(e);
	return rc;
}

int file_piece_pin(struct eng *e, uint64_t ino, uint64_t gseal, uint32_t idx,
		   uint32_t len, uint32_t *chunk, uint32_t *crc,
		   uint32_t *fill)
{
	struct slot s;
	int rc = sealed_piece_pin(e, ino, gseal, idx, len, NULL, &s, NULL);

	if (rc == 0) {
		*chunk = s.chunk;
		*crc = s.crc;
		*fill = s.fill;
	}
	return rc;
}

int file_piece_copy(struct eng *e, uint64_t ino, uint64_t gseal, uint32_t idx,
		    uint32_t len, uint32_t crc, uint8_t *buf)
{
	uint32_t chunk, fill;
	uint64_t spilled = 0;
	struct slot s;
	int rc = sealed_piece_pin(e, ino, gseal, idx, len, &crc, &s, &spilled);

	if (rc < 0)
		return -ENOENT;
	/* In the spill dir: read there (checked), no lock held. */
	if (rc == 1)
		return s.crc_len == len
			       ? e->spill_src->read(e, spilled, idx, s.fill,
						    len, crc, s.crc_len, buf)
			       : -ENOENT;
	chunk = s.chunk;
	fill = s.fill < len ? s.fill : len;
	memcpy(buf, store_ptr(&e->store, chunk), fill);
	memset(buf + fill, 0, len - fill);
	store_put(&e->store, chunk);
	return ers_crc32c(0, buf, len) == crc ? 0 : -EIO;
}

int file_verify_take_locked(struct eng *e, struct file *f, uint64_t gseal,
			    struct file_snap *fs)
{
	if (!file_sealed(f))
		return -EBUSY;
	if (gseal && f->gseal != gseal)
		return -ESTALE;
	return file_snap_take_locked(e, f, fs);
}

void file_verify_snap(struct eng *e, const struct file_snap *fs,
		      const char *what, struct eng_verify_copy *vc,
		      uint32_t *bad)
{
	uint32_t n = (uint32_t)((fs->size + e->store.chunk_size - 1) >>
				e->store.chunk_shift);

	for (uint32_t i = 0; i < n; i++) {
		const struct slot *s = i < fs->nslots ? &fs->slots[i] : NULL;
		uint32_t len = file_piece_len(e, fs->size, i), have, crc;

		if (!s || s->where == PIECE_HOLE)
			continue; /* zeros: no bytes to go bad */
		if (!slot_in_ram(s) || s->crc_len != len) {
			vc->absent++;
			continue;
		}
		/* Past fill the piece reads as zeros, not the chunk. */
		have = s->fill < len ? s->fill : len;
		crc = ers_crc32c(0, store_ptr(&e->store, s->chunk), have);
		crc = crc_zeros(crc, len - have);
		vc->checked++;
		vc->bytes += len;
		if (crc == s->crc)
			continue;
		if (bad)
			bad[vc->bad] = i;
		if (!vc->bad++)
			vc->first_bad = i;
		atomic_fetch_add(&e->cnt.crc_errors, 1);
		rft_warn("verify: %s: piece %u (%u bytes) has CRC32C %08x, "
			 "its seal says %08x",
			 what, i, len, crc, s->crc);
	}
}

uint32_t file_drop_pieces(struct eng *e, struct inode *in,
			  const struct file_snap *fs, const uint32_t *idx,
			  uint32_t n, bool cache_only)
{
	struct file *f = &in->file;
	uint32_t dropped = 0;

	file_wrlock(f);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t i = idx[k];
		struct slot *s = i < f->nslots ? &f->slots[i] : NULL;

		/* Only what verify saw: not rewritten, not moved since. */
		if (!s || i >= fs->nslots || !slot_in_ram(s) ||
		    s->chunk != fs->slots[i].chunk ||
		    s->crc != fs->slots[i].crc || f->version != fs->version ||
		    (cache_only && !(s->flags & SLOT_FETCHED)))
			continue;
		file_slot_to_peer(e, f, s);
		dropped++;
	}
	file_unlock(f);
	return dropped;
}

uint32_t file_seal_off_locked(struct eng *e, const struct file *f,
			      const char *what)
{
	const struct seal_rec *t = f->sealed;
	uint32_t off = 0;

	if (!e->gops || !t || file_draft(e, f))
		return 0;
	if (f->gseal != t->index) {
		rft_warn("verify: %s: this node shows the seal of entry %llu, "
			 "the group's is entry %llu (node %d)",
			 what, (unsigned long long)f->gseal,
			 (unsigned long long)t->index, t->node);
		off++;
	}
	if (f->size != t->size) {
		rft_warn("verify: %s: %llu bytes here, the group's seal says "
			 "%llu",
			 what, (unsigned long long)f->size,
			 (unsigned long long)t->size);
		off++;
	}
	for (uint32_t i = 0; i < t->npieces; i++) {
		const struct slot *s = i < f->nslots ? &f->slots[i] : NULL;
		uint32_t len = file_piece_len(e, t->size, i);
		uint32_t crc = s ? s->crc : crc_zeros(0, len);

		if (s && s->crc_len != len)
			continue; /* a size that differs is counted above */
		if (crc == t->pieces[i].crc)
			continue;
		if (off++ < 8)
			rft_warn("verify: %s: piece %u is recorded here with "
				 "CRC32C %08x, the group's seal (entry %llu, "
				 "node %d) says %08x",
				 what, i, crc, (unsigned long long)t->index,
				 t->node, t->pieces[i].crc);
	}
	return off;
}

uint32_t file_seal_digest_locked(const struct file *f)
{
	const struct seal_rec *t = f->sealed;
	uint8_t b[24];
	uint32_t crc;

	if (!t)
		return 0;
	for (int k = 0; k < 8; k++) {
		b[k] = (uint8_t)(t->index >> (8 * k));
		b[8 + k] = (uint8_t)(t->size >> (8 * k));
	}
	for (int k = 0; k < 4; k++) {
		b[16 + k] = (uint8_t)((uint32_t)t->node >> (8 * k));
		b[20 + k] = (uint8_t)(t->npieces >> (8 * k));
	}
	crc = ers_crc32c(0, b, sizeof(b));
	for (uint32_t i = 0; i < t->npieces; i++) {
		for (int k = 0; k < 4; k++)
			b[k] = (uint8_t)(t->pieces[i].crc >> (8 * k));
		b[4] = t->pieces[i].hole;
		crc = ers_crc32c(crc, b, 5);
	}
	/* Never 0: that is "no record". */
	return crc ? crc : 1;
}

/*
 * On the node that sealed @f's version, with no draft: its bytes are the
 * seal's, so only its records can be off; put the log's back (a piece
 * whose bytes differ then fails verify's byte check, and is repaired from
 * a good copy).  -EOPNOTSUPP when more than checksums differ.  f->lock
 * held for writing.
 */
static int resync_records(struct eng *e, struct file *f)
{
	const struct seal_rec *t = f->sealed;

	if (f->gseal != t->index || f->size != t->size ||
	    f->nslots > t->npieces)
		return -EOPNOTSUPP;
	for (uint32_t i = 0; i < f->nslots; i++) {
		struct slot *s = &f->slots[i];

		if (s->crc_len == file_piece_len(e, t->size, i))
			s->crc = t->pieces[i].crc;
	}
	return 0;
}

int file_resync(struct eng *e, struct inode *in)
{
	struct file *f = &in->file;
	char path[PATH_MAX];
	int rc = -EAGAIN, node = -1;

	eng_names_lock(e);
	ns_wrlock(e);
	file_wrlock(f);
	if (f->sealed && !file_draft(e, f) && f->writers == 0) {
		node = f->sealed->node;
		rc = node == e->node ? resync_records(e, f)
				     : take_sealed(e, in);
	}
	if (rc == 0 && ns_path(&e->ns, in, path, sizeof(path)) < 0)
		snprintf(path, sizeof(path), "inode %llu",
			 (unsigned long long)in->ino);
	file_dur_unlock(e, in);
	ns_unlock(e);
	eng_names_unlock(e);
	if (rc < 0)
		return rc;
	if (node == e->node)
		rft_warn("verify --repair: %s: this node's records of its own "
			 "seal were off: the log's checksums are back",
			 path);
	else
		rft_warn("verify --repair: %s: what this node showed was off "
			 "the group's seal: it shows node %d's sealed version "
			 "again",
			 path, node);
	if (node != e->node)
		eng_post_dirty(e, in);
	return 0;
}

/* file_seal_off_locked() of @ino, into *@off; true when something is. */
static bool file_off_ino(struct eng *e, uint64_t ino, const char *what,
			 uint32_t *off)
{
	struct inode *in;

	*off = 0;
	ns_rdlock(e);
	in = ns_find(&e->ns, ino);
	if (in && S_ISREG(in->mode)) {
		file_rdlock(&in->file);
		if (file_sealed(&in->file))
			*off = file_seal_off_locked(e, &in->file, what);
		file_unlock(&in->file);
	}
	ns_unlock(e);
	return *off != 0;
}

/* file_resync() of @ino, held meanwhile. */
static int file_resync_ino(struct eng *e, uint64_t ino)
{
	struct inode *in;
	int rc = -ENOENT;

	ns_wrlock(e);
	in = ns_find(&e->ns, ino);
	if (in)
		in->holds++;
	ns_unlock(e);
	if (in) {
		rc = file_resync(e, in);
		ns_unhold(e, in);
	}
	return rc;
}

int file_verify_ino(struct eng *e, uint64_t ino, uint64_t gseal, int from,
		    bool repair, struct eng_verify_copy *vc,
		    uint32_t *digest)
{
	struct file_snap fs = { 0 };
	struct inode *in;
	uint32_t *bad = NULL;
	bool repair_bad = false;
	char what[48];
	int rc = -ENOENT;

	*digest = 0;
	snprintf(what, sizeof(what), "inode %llu", (unsigned long long)ino);
	/* The log's seal is every node's to follow: asked by any node. */
	if (repair && file_off_ino(e, ino, what, &vc->off) &&
	    file_resync_ino(e, ino) == 0)
		vc->synced = true;
	ns_wrlock(e);
	in = ns_find(&e->ns, ino);
	if (in && S_ISREG(in->mode)) {
		struct file *f = &in->file;

		file_rdlock(f);
		/* The asker's record of the group's seal, or this one's. */
		if (gseal && (!f->sealed || f->sealed->index != gseal))
			rc = -ESTALE;
		else
			rc = file_verify_take_locked(e, f, 0, &fs);
		if (rc == 0) {
			*digest = file_seal_digest_locked(f);
			if (!vc->synced)
				vc->off = file_seal_off_locked(e, f, what);
		}
		/* Only the owner has a holder's copy dropped to send it again. */
		repair_bad = repair && f->owner == from && from != e->node;
		file_unlock(f);
		if (rc == 0)
			in->holds++;
	}
	ns_unlock(e);
	vc->rc = rc;
	if (rc < 0)
		return rc;
	if (repair_bad)
		bad = malloc((fs.nslots ? fs.nslots : 1) * sizeof(*bad));
	file_verify_snap(e, &fs, what, vc, bad);
	if (bad && vc->bad)
		vc->repaired = file_drop_pieces(e, in, &fs, bad, vc->bad,
						false);
	free(bad);
	file_snap_drop(e, &fs);
	ns_unhold(e, in);
	return 0;
}

int file_apply_protect(struct eng *e, const struct nsop *op)
{
	struct inode *in;
	struct file *f;
	int rc = -ENOENT;

	ns_rdlock(e);
	in = ns_find(&e->ns, op->ino);
	if (in && S_ISREG(in->mode)) {
		f = &in->file;
		file_wrlock(f);
		/*
		 * The log's record, of its last seal only (before the first,
		 * of the file as it stands, when that is sealed); copies of
		 * an older seal protect nothing now.  The result is the
		 * record's, the same on every node (nslog keeps it).
		 */
		rc = -ESTALE;
		if (op->gseal == (f->sealed ? f->sealed->index : 0)) {
			file_log_protect(f, op->holders);
			rc = 0;
		}
		/*
		 * What this node shows of that seal (a draft here: of the
		 * seal it started from).
		 */
		if (f->gseal == op->gseal) {
			/* Copies after all (committed after a LOST). */
			f->lost_seal = 0;
			/*
			 * Parity holders hold rows, not the file's bytes: of
			 * them only the owner (its bit is there: it has its
			 * data again after a rebuild) is a holder of bytes.
			 */
			if (f->scheme) {
				f->parity_holders |= op->holders;
				if (f->owner >= 0 && f->owner < 64)
					f->holders |= op->holders &
						      1ULL << f->owner;
			} else {
				f->holders |= op->holders;
			}
			/* This node's data is that seal's unless rewritten. */
			if (f->dur.sealed == f->version && !file_draft(e, f))
				file_dur_protected(f, f->version);
		}
		file_dur_unlock(e, in);
	}
	ns_unlock(e);
	return rc;
}

int file_apply_persist(struct eng *e, const struct nsop *op, uint64_t index)
{
	struct inode *in;
	struct file *f;
	int rc = -ENOENT;

	/* f->copy changes under the names lock too (see struct file). */
	eng_names_lock(e);
	ns_rdlock(e);
	in = ns_find(&e->ns, op->ino);
	if (in && S_ISREG(in->mode)) {
		f = &in->file;
		file_wrlock(f);
		/* The log's record and the result, as at PROTECT. */
		rc = -ESTALE;
		if (op->gseal == (f->sealed ? f->sealed->index : 0)) {
			file_log_persist(f, index);
			rc = 0;
		}
		/* Its copy is home: it can come back from there. */
		if (f->gseal == op->gseal)
			f->lost_seal = 0;
		/*
		 * Its copy is home, under its name, found by path.  The
		 * owner's own was recorded at its write-back.
		 */
		if (f->gseal == op->gseal && f->dur.sealed == f->version &&
		    !file_draft(e, f) &&
		    !(op->node == e->node && op->inc == e->inc))
			take_persisted(f, false);
		file_dur_unlock(e, in);
	}
	ns_unlock(e);
	eng_names_unlock(e);
	return rc;
}

struct count_walk {
	struct eng *e;
	uint64_t n;
};

static int count_unprotected(void *ctx, struct inode *in)
{
	struct count_walk *w = ctx;
	struct file *f = &in->file;

	if (!S_ISREG(in->mode) || in->nlink == 0)
		return 0;
	file_rdlock(f);
	if (f->owner == w->e->node && f->dur.sealed == f->version &&
	    f->dur.protected_data != f->version && !file_lost(f))
		w->n++;
	file_unlock(f);
	return 0;
}

uint64_t file_count_unprotected(struct eng *e)
{
	struct count_walk w = { e, 0 };

	ns_rdlock(e);
	ns_walk(&e->ns, count_unprotected, &w);
	ns_unlock(e);
	return w.n;
}

/* Files named one by one in the log at a LOST; past this, a count. */
#define LOST_NAMED_MAX 20

struct lost_walk {
	struct eng *e;
	int node;
	uint64_t bit;
	uint64_t lost;		/* files found lost */
	char *named[LOST_NAMED_MAX]; /* the first ones' paths, strdup()ed */
};

/*
 * Were @f's sealed bytes nowhere but in node @node's memory?  Its seal
 * is @node's (the owner), no other node holds a copy or a parity row of
 * it (the log's holders, @node's bit already taken out), no PERSIST
 * recorded a copy of it, and it has bytes (holes come back as holes).
 * Only the log's record counts, so every node decides alike.  f->lock
 * held.
 */
static bool seal_only_on(const struct file *f, int node)
{
	const struct seal_rec *t = f->sealed;

	if (!t || f->owner != node || f->log.holders || f->log.named ||
	    f->log.persisted)
		return false;
	for (uint32_t i = 0; i < t->npieces; i++)
		if (!t->pieces[i].hole)
			return true;
	return false;
}

/*
 * The same of the seal a draft here started from (f->gseal), from this
 * node's records of it: what the draft still needs of it is gone.
 * f->lock held.
 */
static bool base_only_on(const struct file *f, int node)
{
	if (!f->gseal || f->owner != node || f->holders ||
	    f->parity_holders || file_data_persisted(f))
		return false;
	for (uint32_t i = 0; i < f->nslots; i++)
		if (f->slots[i].where != PIECE_HOLE)
			return true;
	return false;
}

/* ns->lock held (read). */
static int lost_one(void *ctx, struct inode *in)
{
	struct lost_walk *w = ctx;
	struct file *f = &in->file;
	char rel[PATH_MAX];
	bool lost = false;

	if (!S_ISREG(in->mode))
		return 0;
	file_wrlock(f);
	/* Whatever it was writing went with it. */
	f->remote_writers &= ~w->bit;
	/* The log's record: its copies (or parity rows) are fewer now. */
	file_log_lose_node(f, w->bit);
	if (!f->log.lost && seal_only_on(f, w->node)) {
		file_log_lost(f);
		lost = true;
	}
	f->holders &= ~w->bit;
	f->parity_holders &= ~w->bit;
	if (shows_log(w->e, f)) {
		/* Protected again once re-sent. */
		if (!f->log.protected)
			file_dur_protected(f, 0);
		if (f->log.lost)
			f->lost_seal = f->gseal;
	} else if (!file_lost(f) && base_only_on(f, w->node)) {
		/* A draft here: the seal it started from is lost. */
		f->lost_seal = f->gseal;
	}
	file_dur_unlock(w->e, in);
	if (!lost || in->nlink == 0)
		return 0;
	/* Named once the locks are let go (the log may block). */
	if (w->lost < LOST_NAMED_MAX) {
		if (ns_path(&w->e->ns, in, rel, sizeof(rel)) < 0)
			snprintf(rel, sizeof(rel), "inode %llu",
				 (unsigned long long)in->ino);
		w->named[w->lost] = strdup(rel);
	}
	w->lost++;
	return 0;
}

int file_apply_lost(struct eng *e, const struct nsop *op)
{
	struct lost_walk w = { e, op->node, 0, 0, { NULL } };

	if (op->node < 0 || op->node >= 64)
		return -EINVAL;
	w.bit = 1ULL << op->node;
	e->ns.lost_inc[op->node] = op->inc;
	ns_rdlock(e);
	ns_walk(&e->ns, lost_one, &w);
	ns_unlock(e);
	for (uint64_t i = 0; i < w.lost && i < LOST_NAMED_MAX; i++) {
		rft_err("lost: %s: its bytes were only in the memory of node "
			"%d, which is gone (no copy, parity or persisted "
			"copy of that seal); reads give EIO until it is "
			"written again or removed",
			w.named[i] ? w.named[i] : "(a file)", w.node);
		free(w.named[i]);
	}
	if (w.lost > LOST_NAMED_MAX)
		rft_err("lost: %llu files in all with node %d's memory",
			(unsigned long long)w.lost, op->node);
	return 0;
}

bool file_writer_gone(struct eng *e, struct inode *in, struct eng_ev *ev)
{
	struct file *f = &in->file;
	bool last;

	/* Seal what the writer's queued copies leave, not less. */
	while (!file_wrlock_drained(e, f))
		file_wait_writes(e, f);
	last = --f->writers == 0;
	if (last && f->dur.sealed != f->version)
		file_seal_locked(e, f);
	/*
	 * Closed by its last writer: to the tiers, also when a group's FLUSH
	 * sealed it already; in a group this node's version goes to the
	 * others, unless a FLUSH sent this very version already.
	 */
	*ev = (struct eng_ev){
		.kind = EV_SEALED,
		.in = in,
		.persisted = file_persisted(f),
		.tell = file_to_seal(e, f),
	};
	file_unlock(f);
	return last && (!ev->persisted || ev->tell);
}

void file_drop_writer(struct eng *e, struct inode *in)
{
	struct eng_ev ev;

	if (file_writer_gone(e, in, &ev))
		eng_post(e, &ev);
}

/* --- the group's view of a seal (core.h) --------------------------------- */

/* @in's seal view; ns->lock and its file's lock held (read is enough). */
static void view_locked(const struct eng *e, const struct inode *in,
			struct seal_view *v)
{
	const struct file *f = &in->file;

	*v = (struct seal_view){
		.gseal = f->gseal,
		.size = f->size,
		.stripe_ckpt = f->stripe_ckpt,
		.chunk_base = f->chunk_base,
		.scheme = f->scheme,
		.npieces = (uint32_t)((f->size + e->store.chunk_size - 1) >>
				      e->store.chunk_shift),
		.owner = f->owner,
		.linked = in->nlink > 0,
		.sealed = file_sealed(f),
		.unchanged = f->dur.sealed == f->version,
		.protected = f->dur.protected_data == f->version,
		.persisted = file_data_persisted(f),
		.lost = file_lost(f),
		.all_here = true,
	};
	for (uint32_t i = 0; i < f->nslots; i++) {
		/* In this node's spill dir: here, on its disk. */
		if (slot_remote(&f->slots[i]) &&
		    f->slots[i].where != PIECE_SPILL) {
			v->all_here = false;
			v->bytes_away += file_piece_len(e, f->size, i);
		}
		if (f->slots[i].where == PIECE_PEER)
			v->any_at_holders = true;
		if (slot_in_ram(&f->slots[i]))
			v->any_here = true;
	}
	v->held_elsewhere =
	    (f->owner >= 0 && f->owner < 64
		 ? (f->holders & ~(1ULL << f->owner)) != 0
		 : f->holders != 0) ||
	    f->parity_holders;
}

int file_seal_view(struct eng *e, struct inode *in, struct seal_view *v)
{
	if (!S_ISREG(in->type))
		return -EINVAL;
	ns_rdlock(e);
	file_rdlock(&in->file);
	view_locked(e, in, v);
	file_unlock(&in->file);
	ns_unlock(e);
	return 0;
}

int file_seal_snap(struct eng *e, struct inode *in, uint64_t gseal,
		   int owner, uint32_t scheme, struct seal_view *v,
		   struct file_snap *fs)
{
	int rc;

	if (!S_ISREG(in->type))
		return -ESTALE;
	ns_rdlock(e);
	file_rdlock(&in->file);
	view_locked(e, in, v);
	if (v->owner != owner || !v->gseal || v->gseal != gseal ||
	    !v->unchanged || !v->linked || (scheme && v->scheme != scheme))
		rc = -ESTALE;
	else if (!v->all_here)
		rc = -EAGAIN;
	else
		rc = file_snap_take_locked(e, &in->file, fs);
	file_unlock(&in->file);
	ns_unlock(e);
	return rc;
}

struct where_walk {
	struct eng *e;
	bool (*want)(void *ctx, const struct seal_view *v);
	void *ctx;
	bool hold;
	struct inode **v;
	size_t n, cap;
	long count;
};

static int where_one(void *ctx, struct inode *in)
{
	struct where_walk *w = ctx;
	struct seal_view v;
	bool want;

	if (!S_ISREG(in->type) || in->nlink == 0)
		return 0;
	file_rdlock(&in->file);
	view_locked(w->e, in, &v);
	file_unlock(&in->file);
	want = w->want(w->ctx, &v);
	if (!want)
		return 0;
	w->count++;
	if (!w->hold)
		return 0;
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 64;
		struct inode **nv = realloc(w->v, cap * sizeof(*nv));

		if (!nv)
			return 1;
		w->v = nv;
		w->cap = cap;
	}
	/* ns->lock is held for writing: the hold is safe to take. */
	in->holds++;
	w->v[w->n++] = in;
	return 0;
}

long eng_files_where(struct eng *e,
		     bool (*want)(void *ctx, const struct seal_view *v),
		     void *ctx, struct inode ***held)
{
	struct where_walk w = { e, want, ctx, held != NULL, NULL, 0, 0, 0 };
	int rc;

	if (held)
		ns_wrlock(e);
	else
		ns_rdlock(e);
	rc = ns_walk(&e->ns, where_one, &w);
	ns_unlock(e);
	if (rc) {
		for (size_t i = 0; i < w.n; i++)
			ns_unhold(e, w.v[i]);
		free(w.v);
		return -ENOMEM;
	}
	if (held)
		*held = w.v;
	return w.count;
}

void file_keep_fetched(struct eng *e, struct inode *in)
{
	struct file *f = &in->file;

	file_wrlock(f);
	for (uint32_t k = 0; k < f->nslots; k++)
		f->slots[k].flags &= (uint8_t)~SLOT_FETCHED;
	file_unlock(f);
}
