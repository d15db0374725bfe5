/*
 * file.c - file data: slots of arena chunks, checksums, sealing,
 * truncation, eviction and snapshots.  The bottom of core with the store:
 * nothing here looks a file up by number or name (ns.c, above it, holds
 * the inodes these files live in).  The paths over it: read.c, write.c,
 * record.c (seals and the group's record of them), handle.c (open files).
 * It is the one writer of a file's two records: the durability record
 * (file_dur_*) and the log's record (file_log_*).
 *
 * A file is an array of slots, one per chunk-sized piece.  A slot holds an
 * arena chunk, a hole, or says where the piece is (the persisted copy, the
 * group's holders).
 *
 * Everything here is protected by file->lock; inode mtime/ctime of regular
 * files too.  Reads hold the lock for reading while the reply is sent, so a
 * chunk cannot be freed under a reader.
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

#define ZERO_RUN (64 * 1024)
#define ZERO_POW 64

static const uint8_t zero_run[ZERO_RUN];
static uint32_t zero_crc[ZERO_POW]; /* CRC32C of 2^k zero bytes */
static pthread_once_t zero_once = PTHREAD_ONCE_INIT;

static void zero_crc_init(void)
{
	zero_crc[0] = ers_crc32c(0, zero_run, 1);
	for (int k = 1; k < ZERO_POW; k++)
		zero_crc[k] = ers_crc32c_combine(zero_crc[k - 1],
						 zero_crc[k - 1], 1ULL << (k - 1));
}

/*
 * Sparse files are mostly zeros: extend by powers of two with CRC combine,
 * O(log^2 len) instead of O(len) (a 1 TiB hole used to take 18 s).
 */
uint32_t crc_zeros(uint32_t crc, uint64_t len)
{
	if (len <= ZERO_RUN)
		return ers_crc32c(crc, zero_run, (size_t)len);
	pthread_once(&zero_once, zero_crc_init);
	for (int k = 0; len; k++, len >>= 1)
		if (len & 1)
			crc = ers_crc32c_combine(crc, zero_crc[k], 1ULL << k);
	return crc;
}

uint32_t file_piece_len(const struct eng *e, uint64_t size, uint32_t idx)
{
	uint64_t start = (uint64_t)idx << e->store.chunk_shift;

	if (start >= size)
		return 0;
	return size - start < e->store.chunk_size ? (uint32_t)(size - start)
						   : e->store.chunk_size;
}

uint64_t file_ram_bytes(const struct eng *e, const struct file *f)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < f->nslots; i++)
		if (slot_in_ram(&f->slots[i]))
			n += store_cap(&e->store, f->slots[i].chunk);
	return n;
}

int file_init(struct file *f)
{
	memset(f, 0, sizeof(*f));
	/* Version 0 stands for "none" in the durability record. */
	f->version = 1;
	f->meta_version = 1;
	f->synced = 1;
	return pthread_rwlock_init(&f->lock, NULL) ? -ENOMEM : 0;
}

void file_drop_slot(struct eng *e, struct file *f, struct slot *s)
{
	if (slot_in_ram(s)) {
		store_put(&e->store, s->chunk);
		f->resident--;
	}
	*s = SLOT_HOLE_INIT;
}

void file_fini(struct eng *e, struct file *f)
{
	for (uint32_t i = 0; i < f->nslots; i++)
		file_drop_slot(e, f, &f->slots[i]);
	free(f->slots);
	free(f->away_rel);
	free(f->sealed);
	pthread_rwlock_destroy(&f->lock);
}

bool file_draft(const struct eng *e, const struct file *f)
{
	return e->gops && f->version != f->synced;
}

enum eng_crc_state file_crc_state_locked(const struct file *f)
{
	if (f->crc_bad)
		return ENG_CRC_BAD;
	if (!file_sealed(f))
		return ENG_CRC_PENDING;
	if (f->crc_unverified)
		return ENG_CRC_UNVERIFIED;
	return ENG_CRC_FINAL;
}

/* --- the durability record ---------------------------------------------- */

void file_dur_sealed(struct file *f)
{
	f->dur.sealed = f->version;
	f->dur.sealed_ms = rft_now_ms();
}

void file_dur_protected(struct file *f, uint64_t version)
{
	if (version && version == f->version &&
	    f->dur.protected_data != version) {
		f->dur_news |= DUR_NEWS_PROTECTED;
		f->dur.protected_ms = rft_now_ms();
	}
	f->dur.protected_data = version;
}

void file_dur_persisted(struct file *f, uint64_t data, uint64_t meta)
{
	bool was = file_persisted(f);

	f->dur.persisted_data = data;
	f->dur.persisted_meta = meta;
	if (!was && file_persisted(f)) {
		f->dur_news |= DUR_NEWS_PERSISTED;
		f->dur.persisted_ms = rft_now_ms();
	}
}

void file_dur_found(struct file *f)
{
	f->dur.sealed = f->version;
	f->dur.persisted_data = f->version;
	f->dur.persisted_meta = f->meta_version;
	f->dur.sealed_ms = f->dur.persisted_ms = 0; /* not known */
}

void file_dur_unlock(struct eng *e, struct inode *in)
{
	static const struct {
		unsigned bit;
		enum eng_ev_kind kind;
	} news[] = {
		{ DUR_NEWS_PROTECTED, EV_PROTECTED },
		{ DUR_NEWS_PERSISTED, EV_PERSISTED },
		{ DUR_NEWS_LOST, EV_LOST },
	};
	unsigned got = in->file.dur_news;

	in->file.dur_news = 0;
	file_unlock(&in->file);
	for (size_t i = 0; i < sizeof(news) / sizeof(news[0]); i++) {
		struct eng_ev ev = { .kind = news[i].kind, .in = in };

		if (got & news[i].bit)
			eng_post(e, &ev);
	}
}

/* --- the log's record ---------------------------------------------------- */

void file_log_times(struct file *f, const struct timespec *mtime,
		    const struct timespec *ctime)
{
	if (mtime)
		f->log.mtime = *mtime;
	if (ctime)
		f->log.ctime = *ctime;
}

void file_log_sealed_as_is(struct file *f)
{
	if (!f->sealed)
		f->log.sealed_as_is = true;
}

void file_log_meta_changed(struct file *f)
{
	f->log.meta_changed = true;
}

void file_log_writers(struct file *f, uint64_t set, uint64_t clear)
{
	f->log.writers = (f->log.writers & ~clear) | set;
}

void file_log_seal(struct file *f, int node, const struct timespec *mtime,
		   const struct timespec *ctime)
{
	f->log = (struct file_log){
		.holders = 1ULL << node,
		.mtime = *mtime,
		.ctime = *ctime,
	};
}

/*
 * Is the group's version of @f sealed: a SEAL, or before the first one
 * what sealed it as it stands?  f->lock held.
 */
static bool log_sealed(const struct file *f)
{
	return f->sealed || f->log.sealed_as_is;
}

void file_log_protect(struct file *f, uint64_t holders)
{
	f->log.holders |= holders;
	f->log.named |= holders;
	f->log.protected = log_sealed(f);
	f->log.lost = false;
}

void file_log_persist(struct file *f, uint64_t index)
{
	if (log_sealed(f)) {
		f->log.persisted = index ? index : 1;
		f->log.meta_changed = false;
	}
	f->log.lost = false;
}

void file_log_lose_node(struct file *f, uint64_t bit)
{
	f->log.writers &= ~bit;
	/* Its copies (or parity rows) are fewer now. */
	if ((f->log.holders | f->log.named) & bit) {
		f->log.holders &= ~bit;
		f->log.named &= ~bit;
		f->log.protected = false;
	}
}

void file_log_lost(struct file *f)
{
	if (!f->log.lost)
		f->dur_news |= DUR_NEWS_LOST;
	f->log.lost = true;
	f->log.protected = false;
}

void file_log_restore(struct file *f, const struct file_log *log)
{
	f->log = *log;
}

void file_seal_locked(struct eng *e, struct file *f)
{
	for (uint32_t i = 0; i < f->nslots; i++) {
		struct slot *s = &f->slots[i];
		uint32_t len = file_piece_len(e, f->size, i);

		if (s->crc_len == len)
			continue;
		switch ((enum piece_where)s->where) {
		case PIECE_HOLE:
			s->crc = crc_zeros(0, len);
			break;
		case PIECE_PERSIST:
			continue; /* stays unverified: not in memory */
		case PIECE_PEER:
			continue; /* its holders' bytes: the CRC is theirs */
		case PIECE_SPILL:
			continue; /* the bytes spilled: the CRC is theirs */
		case PIECE_RAM: {
			uint32_t n = s->fill < len ? s->fill : len;

			s->crc = ers_crc32c(0, store_ptr(&e->store, s->chunk), n);
			s->crc = crc_zeros(s->crc, len - n);
			break;
		}
		}
		s->crc_len = len;
	}
	file_dur_sealed(f);
}

int file_truncate_locked(struct eng *e, struct file *f, uint64_t size)
{
	if (size > RFT_MAX_FILE_SIZE)
		return -EFBIG;
	if (size < f->size) {
		uint64_t keep = (size + e->store.chunk_size - 1) >>
				e->store.chunk_shift;

		for (uint32_t i = (uint32_t)keep; i < f->nslots; i++)
			file_drop_slot(e, f, &f->slots[i]);
		if (f->nslots > keep)
			f->nslots = (uint32_t)keep;
		if (keep > 0 && keep <= f->nslots) {
			struct slot *s = &f->slots[keep - 1];
			uint32_t len = file_piece_len(e, size, (uint32_t)keep - 1);

			/* Bytes past the new end must read as zeros later. */
			if (s->fill > len)
				s->fill = len;
			/*
			 * A piece on peers, or in the spill dir, keeps the
			 * checksum of the bytes there: a read checks them,
			 * then keeps fill.
			 */
			if (s->crc_len > len && s->where != PIECE_PEER &&
			    s->where != PIECE_SPILL)
				s->crc_len = SLOT_CRC_UNKNOWN;
			s->flags &= ~SLOT_CLEAN;
		}
	}
	f->size = size;
	f->version++;
	return 0;
}

/* @s's bytes are now only @where: its chunk goes.  f->lock held. */
static void slot_leave_ram(struct eng *e, struct file *f, struct slot *s,
			   enum piece_where where)
{
	store_put(&e->store, s->chunk);
	s->chunk = 0;
	s->where = where;
	s->flags = 0;
	f->resident--;
}

void file_slot_to_peer(struct eng *e, struct file *f, struct slot *s)
{
	slot_leave_ram(e, f, s, PIECE_PEER);
}

/*
 * Is @f a file whose fetched copies this node may drop: another node's,
 * sealed (nobody writes it, here or there, and no draft of this node's is
 * waiting for its seal: its base may be gone by the time it needs the
 * pieces again), and its seal's bytes still somewhere to fetch again (a
 * holder but this node, parity rows to decode from, or the persist dir)?
 * f->lock held.
 */
static bool cache_file(const struct eng *e, const struct file *f)
{
	uint64_t self = e->node >= 0 && e->node < 64 ? 1ULL << e->node : 0;

	return f->owner != e->node && f->gseal && file_sealed(f) &&
	       !file_draft(e, f) &&
	       ((f->holders & ~self) || (f->scheme && f->parity_holders) ||
		(f->copy != COPY_NONE && file_data_persisted(f)));
}

/*
 * Is piece @i of such a file a copy of its holders' piece as they have
 * it: fetched or decoded (SLOT_FETCHED, which a write clears), whole, its
 * checksum the seal's (not made again after a truncate)?  f->lock held.
 */
static bool cache_piece(const struct eng *e, const struct file *f,
			uint32_t i)
{
	const struct slot *s = &f->slots[i];
	uint32_t len = file_piece_len(e, f->size, i);

	return slot_in_ram(s) && (s->flags & SLOT_FETCHED) &&
	       s->crc_len == len && s->fill == len;
}

/* A persisted piece: same bytes as the persist dir's.  f->lock held. */
static bool persisted_piece(const struct file *f, uint32_t i)
{
	return slot_in_ram(&f->slots[i]) && (f->slots[i].flags & SLOT_CLEAN);
}

static bool persisted_file(const struct file *f)
{
	return f->copy != COPY_NONE && file_sealed(f) &&
	       file_data_persisted(f);
}

/* A fresh piece is spared once (its reader gets to it); f->lock held. */
static bool spare_fresh(struct slot *s, uint32_t *spared)
{
	if (!(s->flags & SLOT_FRESH))
		return false;
	s->flags &= (uint8_t)~SLOT_FRESH; /* next time */
	(*spared)++;
	return true;
}

uint32_t file_evict_locked(struct eng *e, struct file *f, uint32_t *spared)
{
	uint32_t freed = 0;

	if (!persisted_file(f))
		return 0;
	for (uint32_t i = 0; i < f->nslots; i++) {
		struct slot *s = &f->slots[i];

		if (!persisted_piece(f, i) || spare_fresh(s, spared))
			continue;
		store_put(&e->store, s->chunk);
		s->where = PIECE_PERSIST;
		f->resident--;
		freed++;
	}
	return freed;
}

uint32_t file_evict_cache_locked(struct eng *e, struct file *f,
				 uint32_t *spared)
{
	uint32_t freed = 0;

	if (!cache_file(e, f))
		return 0;
	for (uint32_t i = 0; i < f->nslots; i++) {
		struct slot *s = &f->slots[i];

		if (!cache_piece(e, f, i) || spare_fresh(s, spared))
			continue;
		file_slot_to_peer(e, f, s);
		freed++;
	}
	return freed;
}

uint32_t file_spill_pick_locked(struct eng *e, struct file *f,
				struct spill_pick *v, uint32_t max,
				uint32_t *spared)
{
	bool persisted = persisted_file(f);
	uint32_t n = 0;

	if (!file_sealed(f) || file_lost(f) || f->owner != e->node ||
	    f->scheme)
		return 0;
	for (uint32_t i = 0; i < f->nslots && n < max; i++) {
		struct slot *s = &f->slots[i];
		uint32_t len = file_piece_len(e, f->size, i);

		if (!slot_in_ram(s) || s->crc_len != len ||
		    (s->flags & SLOT_FETCHED) ||
		    (persisted && persisted_piece(f, i)) ||
		    spare_fresh(s, spared))
			continue;
		store_get(&e->store, s->chunk);
		v[n++] = (struct spill_pick){ f->version, f->gseal, i,
					      s->chunk, len, s->crc,
					      s->fill < len ? s->fill : len };
	}
	return n;
}

bool file_spilled_locked(struct eng *e, struct file *f,
			 const struct spill_pick *p)
{
	struct slot *s = p->idx < f->nslots ? &f->slots[p->idx] : NULL;

	if (f->version != p->version || !s || !slot_in_ram(s) ||
	    s->chunk != p->chunk || s->crc != p->crc || s->crc_len != p->len)
		return false;
	slot_leave_ram(e, f, s, PIECE_SPILL);
	s->fill = p->len;
	return true;
}

uint32_t file_spill_found_locked(struct eng *e, struct file *f,
				 const struct spill_found *v, uint32_t n)
{
	uint32_t found = 0;

	if (f->owner != e->node || file_lost(f) || f->scheme)
		return 0;
	for (uint32_t i = 0; i < f->nslots && i < n; i++) {
		struct slot *s = &f->slots[i];
		uint32_t len = file_piece_len(e, f->size, i);

		/*
		 * Its holders' piece or the persisted copy's, which the log
		 * or the persist dir's sums say: the same bytes, when the
		 * seal and the final checksum are.  The read checks them
		 * still (a piece spilled over after its index was written
		 * fails, and is fetched: file_spill_failed_locked).
		 */
		if ((s->where != PIECE_PEER && s->where != PIECE_PERSIST) ||
		    s->crc_len != len || v[i].len != len ||
		    v[i].crc != s->crc || v[i].gseal != f->gseal)
			continue;
		s->where = PIECE_SPILL;
		found++;
	}
	return found;
}

bool file_spill_failed_locked(struct eng *e, struct file *f, uint32_t idx)
{
	uint64_t self = e->node >= 0 && e->node < 64 ? 1ULL << e->node : 0;
	struct slot *s = idx < f->nslots ? &f->slots[idx] : NULL;

	if (!s || s->where != PIECE_SPILL)
		return false;
	/* Spilled files are not erasure-coded: holders hold copies. */
	if (f->gseal && (f->holders & ~self))
		s->where = PIECE_PEER;
	else if (f->copy != COPY_NONE && file_data_persisted(f))
		s->where = PIECE_PERSIST;
	else
		return false;
	return true;
}

uint32_t file_evictable_locked(const struct eng *e, const struct file *f,
			       bool caches)
{
	bool cache = cache_file(e, f), persisted = persisted_file(f);
	uint32_t n = 0;

	for (uint32_t i = 0; i < f->nslots; i++) {
		bool c = cache && cache_piece(e, f, i);

		if (caches ? c : (!c && persisted && persisted_piece(f, i)))
			n++;
	}
	return n;
}

/* --- snapshots ------------------------------------------------------------ */

int file_snap_take_locked(struct eng *e, struct file *f,
			  struct file_snap *fs)
{
	*fs = (struct file_snap){ f->version, f->meta_version, f->size,
				  file_sealed(f), f->nslots, NULL, f->id };
	fs->slots = malloc((size_t)(f->nslots ? f->nslots : 1) *
			   sizeof(*fs->slots));
	if (!fs->slots)
		return -ENOMEM;
	if (f->nslots)
		memcpy(fs->slots, f->slots,
		       (size_t)f->nslots * sizeof(*fs->slots));
	for (uint32_t i = 0; i < fs->nslots; i++)
		if (slot_in_ram(&fs->slots[i]))
			store_get(&e->store, fs->slots[i].chunk);
	return 0;
}

void file_snap_drop(struct eng *e, struct file_snap *fs)
{
	for (uint32_t i = 0; fs->slots && i < fs->nslots; i++)
		if (slot_in_ram(&fs->slots[i]))
			store_put(&e->store, fs->slots[i].chunk);
	free(fs->slots);
	fs->slots = NULL;
}

int file_snap_piece_read(struct eng *e, const struct file_snap *fs,
			 uint32_t idx, uint8_t *buf, struct snap_piece *p)
{
	const struct slot *s = idx < fs->nslots ? &fs->slots[idx] : NULL;
	int rc = file_snap_piece(e, fs, idx, p);

	if (rc != -EAGAIN || s->where != PIECE_SPILL)
		return rc;
	rc = e->spill_src->read(e, fs->file_id, idx, s->fill, p->len, s->crc,
				s->crc_len, buf);
	if (rc < 0)
		return rc;
	p->bytes = buf;
	p->fill = p->len;
	return 1;
}

uint32_t file_snap_npieces(const struct eng *e, const struct file_snap *fs)
{
	return (uint32_t)((fs->size + e->store.chunk_size - 1) >>
			  e->store.chunk_shift);
}

int file_snap_piece(const struct eng *e, const struct file_snap *fs,
		    uint32_t idx, struct snap_piece *p)
{
	const struct slot *s = idx < fs->nslots ? &fs->slots[idx] : NULL;

	p->len = file_piece_len(e, fs->size, idx);
	p->bytes = NULL;
	p->fill = 0;
	p->crc = s ? s->crc : 0;
	if (s && slot_in_ram(s)) {
		p->bytes = store_ptr(&e->store, s->chunk);
		p->fill = s->fill < p->len ? s->fill : p->len;
		return 1;
	}
	return s && s->where != PIECE_HOLE ? -EAGAIN : 0;
}

bool file_snap_persisted_locked(struct file *f, const struct file_snap *fs)
{
	file_dur_persisted(f, fs->version, fs->meta_version);
	if (f->version == fs->version) {
		for (uint32_t i = 0; i < f->nslots && i < fs->nslots; i++)
			if (slot_in_ram(&f->slots[i]) &&
			    slot_in_ram(&fs->slots[i]) &&
			    f->slots[i].chunk == fs->slots[i].chunk)
				f->slots[i].flags |= SLOT_CLEAN;
		/* Its sums were written beside it: trusted from now on. */
		if (fs->sealed)
			f->crc_unverified = false;
	}
	return file_persisted(f);
}

/* --- writes in flight ---------------------------------------------------- */

bool file_wrlock_drained(struct eng *e, struct file *f)
{
	file_wrlock(f);
	/* Copies are queued under f->lock: none can be added while held. */
	if (atomic_load_explicit(&f->pending, memory_order_acquire) == 0)
		return true;
	file_unlock(f);
	return false;
}

bool file_range_queued(struct eng *e, const struct file *f, uint64_t off,
		       uint64_t end)
{
	/* The file's list, not the copier's queue: a copy stays on it,
	 * under f->lock, from its queueing until its bytes are in. */
	for (const struct wjob *w = f->wjobs; w; w = w->file_next)
		if (w->pos < end && w->pos + w->size > off)
			return true;
	return false;
}

void file_wait_writes(struct eng *e, struct file *f)
{
	struct copier *c = &e->io->copier;

	if (atomic_load_explicit(&f->pending, memory_order_acquire) == 0)
		return;
	leaf_lock(&c->lock, ENG_RANK_COPIER);
	while (atomic_load_explicit(&f->pending, memory_order_acquire))
		pthread_cond_wait(&c->drained, &c->lock);
	leaf_unlock(&c->lock, ENG_RANK_COPIER);
}
