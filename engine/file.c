/*
 * file.c - file data: slots of arena chunks, the write and read paths,
 * checksums, sealing, truncation and eviction.
 *
 * A file is an array of slots, one per chunk-sized piece.  A slot holds an
 * arena chunk, a hole, or a pointer into the persisted copy.  The write
 * path is one memcpy into the arena plus CRC32C; sequential writes extend
 * each piece's checksum as they go, so sealing is free for them.  A chunk
 * shared with a write-back in flight (refs > 1) is copied before it is
 * changed, so the write-back always sees the bytes it started with.
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

#include "engine_i.h"
#include "erasure.h"

/* Bound on re-tries when an evicted piece is evicted again before use. */
#define LOAD_TRIES 8

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

static void drop_slot(struct eng *e, struct file *f, struct slot *s)
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
		drop_slot(e, f, &f->slots[i]);
	free(f->slots);
	free(f->away_rel);
	free(f->sealed);
	pthread_rwlock_destroy(&f->lock);
}

/* Make room for slot @idx; new slots are holes. */
static int ensure_slots(struct file *f, uint32_t idx)
{
	if (idx >= f->cap) {
		uint32_t cap = f->cap ? f->cap : 4;
		struct slot *s;

		while (cap <= idx)
			cap *= 2;
		s = realloc(f->slots, (size_t)cap * sizeof(*s));
		if (!s)
			return -ENOMEM;
		f->slots = s;
		f->cap = cap;
	}
	for (; f->nslots <= idx; f->nslots++)
		f->slots[f->nslots] = SLOT_HOLE_INIT;
	return 0;
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
		case PIECE_RAM: {
			uint32_t n = s->fill < len ? s->fill : len;

			s->crc = ers_crc32c(0, store_ptr(&e->store, s->chunk), n);
			s->crc = crc_zeros(s->crc, len - n);
			break;
		}
		}
		s->crc_len = len;
	}
	f->dur.sealed = f->version;
}

int file_truncate_locked(struct eng *e, struct file *f, uint64_t size)
{
	if (size > RFT_MAX_FILE_SIZE)
		return -EFBIG;
	if (size < f->size) {
		uint64_t keep = (size + e->store.chunk_size - 1) >>
				e->store.chunk_shift;

		for (uint32_t i = (uint32_t)keep; i < f->nslots; i++)
			drop_slot(e, f, &f->slots[i]);
		if (f->nslots > keep)
			f->nslots = (uint32_t)keep;
		if (keep > 0 && keep <= f->nslots) {
			struct slot *s = &f->slots[keep - 1];
			uint32_t len = file_piece_len(e, size, (uint32_t)keep - 1);

			/* Bytes past the new end must read as zeros later. */
			if (s->fill > len)
				s->fill = len;
			/*
			 * A piece on peers keeps the checksum of the bytes
			 * they hold: a fetch checks them, then keeps fill.
			 */
			if (s->crc_len > len && s->where != PIECE_PEER)
				s->crc_len = SLOT_CRC_UNKNOWN;
			s->flags &= ~SLOT_CLEAN;
		}
	}
	f->size = size;
	f->version++;
	return 0;
}

/*
 * Piece @s of @f, in memory, goes back to its holders (PIECE_PEER): its
 * chunk is let go; fill, CRC and its length stay, what the next fetch
 * checks.  f->lock held for writing.
 */
static void slot_to_peer(struct eng *e, struct file *f, struct slot *s)
{
	store_put(&e->store, s->chunk);
	s->chunk = 0;
	s->where = PIECE_PEER;
	s->flags = 0;
	f->resident--;
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
		slot_to_peer(e, f, s);
		freed++;
	}
	return freed;
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
				  file_sealed(f), f->nslots, NULL };
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

bool file_snap_persisted_locked(struct file *f, const struct file_snap *fs)
{
	f->dur.persisted_data = fs->version;
	f->dur.persisted_meta = fs->meta_version;
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

/*
 * Piece @i of @in's seal @gseal, which is on other nodes, into @buf as the
 * file has it now (@len bytes): the holders' piece is @crc_len bytes with
 * CRC32C @crc, of which the first @fill are the file's (a truncate since
 * the seal keeps fewer; past them, and past @crc_len, zeros).  From its
 * holders, else from the persist dir the group shares when it was written
 * back there.  Checked either way.  @buf holds fetch_room() bytes: the
 * holders' whole piece comes into it, longer than @len after a truncate.
 * No lock held; sleeps.
 */
static uint32_t fetch_room(uint32_t len, uint32_t crc_len)
{
	return crc_len != SLOT_CRC_UNKNOWN && crc_len > len ? crc_len : len;
}

static int fetch_piece(struct eng *e, struct inode *in, struct eng_piece *pc,
		       uint32_t fill, uint32_t len, uint32_t crc,
		       uint32_t crc_len, uint8_t *buf,
		       const struct timespec *deadline)
{
	struct file *f = &in->file;
	uint32_t have = crc_len != SLOT_CRC_UNKNOWN ? crc_len : len;
	uint32_t keep = fill < len ? fill : len;
	uint64_t gseal = pc->gseal;
	uint32_t i = pc->idx;
	struct piece_loc loc;
	int rc, prc;

	pc->len = have;
	pc->crc = crc;
	rc = e->gops ? e->gops->fetch(e->gctx, pc, buf, deadline) : -EIO;
	if (rc == 0) {
		keep = keep < have ? keep : have;
		memset(buf + keep, 0, len - keep);
		return 0;
	}
	if (!e->src)
		return rc;
	pthread_rwlock_rdlock(&e->ns.lock);
	pthread_rwlock_rdlock(&f->lock);
	prc = f->gseal == gseal && file_data_persisted(f)
		      ? e->src->locate(e, in, &loc)
		      : -ENOENT;
	pthread_rwlock_unlock(&f->lock);
	pthread_rwlock_unlock(&e->ns.lock);
	if (prc < 0)
		return rc;
	prc = e->src->read(e, &loc, (uint64_t)i << e->store.chunk_shift, keep,
			   len, crc, crc_len == len ? len : 0, buf);
	if (prc == 0)
		atomic_fetch_add(&e->cnt.readthrough_chunks, 1);
	return prc == 0 ? 0 : rc;
}

/*
 * Load one piece from where it is (the persist dir, or the group's holders
 * of the file's sealed version); no lock held.  1 if it was not elsewhere.
 */
/*
 * Piece @i of @in is about to be loaded by this thread: 0 when it is now
 * registered as ours (loads_end() after), 1 when another thread was
 * loading it (read-ahead: at once; otherwise once that load ended: the
 * caller looks again), -ETIMEDOUT past @deadline.  No lock held.
 */
static int loads_begin(struct eng *e, const struct inode *in, uint32_t i,
		       const struct timespec *deadline, bool ahead)
{
	struct loads *l = &e->loads;
	bool waited = false;

	pthread_mutex_lock(&l->lock);
	for (;;) {
		bool busy = false;

		for (unsigned k = 0; k < l->n && !busy; k++)
			busy = l->k[k].in == in && l->k[k].idx == i;
		if (!busy)
			break;
		if (ahead) {
			pthread_mutex_unlock(&l->lock);
			return 1;
		}
		if (deadline && rft_expired_ts(deadline)) {
			pthread_mutex_unlock(&l->lock);
			return -ETIMEDOUT;
		}
		if (deadline)
			pthread_cond_timedwait(&l->done, &l->lock, deadline);
		else
			pthread_cond_wait(&l->done, &l->lock);
		waited = true;
	}
	if (waited) {
		pthread_mutex_unlock(&l->lock);
		return 1;
	}
	/* A full table only costs a duplicate fetch. */
	if (l->n < ENG_LOADS_MAX)
		l->k[l->n++] = (struct load_key){ in, i };
	pthread_mutex_unlock(&l->lock);
	return 0;
}

static void loads_end(struct eng *e, const struct inode *in, uint32_t i)
{
	struct loads *l = &e->loads;

	pthread_mutex_lock(&l->lock);
	for (unsigned k = 0; k < l->n; k++)
		if (l->k[k].in == in && l->k[k].idx == i) {
			l->k[k] = l->k[--l->n];
			break;
		}
	pthread_cond_broadcast(&l->done);
	pthread_mutex_unlock(&l->lock);
}

/*
 * Piece @i of @in could not be fetched from the nodes holding it (@rc):
 * said once per seal, so that the EIO a reader or writer gets has its
 * reason in the log.  @theirs: the node that sealed a newer version since
 * this node's draft began, or -1.  No lock held.
 */
static void say_fetch_failed(struct eng *e, struct inode *in, uint32_t i,
			     int rc, int theirs)
{
	char path[PATH_MAX];

	pthread_rwlock_rdlock(&e->ns.lock);
	if (ns_path(&e->ns, in, path, sizeof(path)) < 0)
		snprintf(path, sizeof(path), "inode %llu",
			 (unsigned long long)in->ino);
	pthread_rwlock_unlock(&e->ns.lock);
	if (theirs >= 0)
		rft_warn("%s: piece %u of the version this node's writers "
			 "changed cannot be read (%s): node %d sealed another "
			 "version since and its holders dropped this one; "
			 "this node's changes to the file will not be sealed",
			 path, i, strerror(-rc), theirs);
	else
		rft_warn("%s: piece %u cannot be read from the nodes holding "
			 "it (%s)",
			 path, i, strerror(-rc));
}

/*
 * How a load takes memory: read-ahead only what is free; a reader what
 * eviction frees for it at once, never waiting (with none, the read is
 * served without keeping a copy); writers and the rebuild wait up to
 * --enospc-wait, as writes do.
 */
enum load_how { LOAD_WAIT, LOAD_READ, LOAD_AHEAD };

static int load_piece(struct eng *e, struct inode *in,
		      const struct piece_loc *loc, uint32_t i,
		      const struct timespec *deadline, enum load_how how)
{
	bool ahead = how == LOAD_AHEAD;
	struct file *f = &in->file;
	struct eng_piece pc;
	struct slot want;
	uint64_t gseal;
	uint32_t len, room, id;
	bool say = false;
	int theirs = -1;
	int rc;

	pthread_rwlock_rdlock(&f->lock);
	if (i >= f->nslots || !slot_remote(&f->slots[i]) ||
	    (f->slots[i].where == PIECE_PERSIST && !loc)) {
		pthread_rwlock_unlock(&f->lock);
		return 1;
	}
	pthread_rwlock_unlock(&f->lock);
	rc = loads_begin(e, in, i, deadline, ahead);
	if (rc != 0)
		return rc;
	pthread_rwlock_rdlock(&f->lock);
	if (i >= f->nslots || !slot_remote(&f->slots[i]) ||
	    (f->slots[i].where == PIECE_PERSIST && !loc)) {
		pthread_rwlock_unlock(&f->lock);
		loads_end(e, in, i);
		return 1; /* the load before ours brought it */
	}
	if (f->slots[i].where == PIECE_PEER && file_lost(f)) {
		/* No holder is left to ask (file_apply_lost): EIO now. */
		pthread_rwlock_unlock(&f->lock);
		loads_end(e, in, i);
		return -EIO;
	}
	want = f->slots[i];
	len = file_piece_len(e, f->size, i);
	gseal = f->gseal;
	pc = (struct eng_piece){ .ino = in->ino, .gseal = f->gseal,
				 .holders = f->holders, .idx = i,
				 .owner = f->owner, .scheme = f->scheme,
				 .stripe_ckpt = f->stripe_ckpt,
				 .chunk_base = f->chunk_base };
	pthread_rwlock_unlock(&f->lock);

	/*
	 * Allocate and read without the file's lock: the evictor may need
	 * it to free this very file's older pieces, and other readers need
	 * not wait for the persist dir or a peer.
	 */
	/*
	 * Read-ahead takes free memory only: it never waits for it.  A block
	 * of the file's length would be too small for what a fetch receives
	 * when the file was truncated since its seal.
	 */
	room = want.where == PIECE_PEER ? fetch_room(len, want.crc_len) : len;
	rc = store_try_alloc_len(&e->store, room, &id);
	if (rc < 0 && !ahead) {
		/* Memory full: counted, whatever comes of it. */
		atomic_fetch_add(&e->cnt.fetch_stalls, 1);
		rc = how == LOAD_READ
			     ? store_alloc_evict(&e->store, room, &id)
			     : store_alloc_len(&e->store, e->cfg.enospc_wait_ms,
					       room, &id);
	}
	if (rc < 0) {
		loads_end(e, in, i);
		return rc;
	}
	if (want.where == PIECE_PEER)
		rc = fetch_piece(e, in, &pc, want.fill, len, want.crc,
				 want.crc_len, store_ptr(&e->store, id),
				 deadline);
	else
		rc = e->src->read(e, loc, (uint64_t)i << e->store.chunk_shift,
				  want.fill, len, want.crc, want.crc_len,
				  store_ptr(&e->store, id));
	pthread_rwlock_wrlock(&f->lock);
	if (rc == -EIO && want.where == PIECE_PERSIST) {
		f->crc_bad = true;
		atomic_fetch_add(&e->cnt.crc_errors, 1);
	}
	if (rc < 0 && want.where == PIECE_PEER && !ahead && !f->fetch_said &&
	    f->gseal == gseal) {
		f->fetch_said = true;
		say = true;
		theirs = f->sealed && f->sealed->index != f->gseal
				 ? f->sealed->node
				 : -1;
	}
	if (rc == 0 && i < f->nslots && f->slots[i].where == want.where &&
	    f->slots[i].fill == want.fill && f->slots[i].crc == want.crc &&
	    f->slots[i].crc_len == want.crc_len &&
	    file_piece_len(e, f->size, i) == len &&
	    (want.where != PIECE_PEER || f->gseal == gseal)) {
		struct slot *s = &f->slots[i];

		s->chunk = id;
		s->where = PIECE_RAM;
		s->fill = len;
		/* A truncate since the seal: its checksum is made again. */
		if (want.where == PIECE_PEER &&
		    (want.fill < len || want.crc_len != len))
			s->crc_len = SLOT_CRC_UNKNOWN;
		s->flags |= SLOT_FRESH |
			    (want.where == PIECE_PEER ? SLOT_FETCHED
						      : SLOT_CLEAN);
		f->resident++;
		id = RFT_NO_CHUNK;
		atomic_fetch_add(want.where == PIECE_PEER
					 ? &e->cnt.peer_chunks
					 : &e->cnt.readthrough_chunks,
				 1);
		atomic_fetch_add(want.where == PIECE_PEER
					 ? &e->cnt.peer_bytes
					 : &e->cnt.readthrough_bytes,
				 len);
	}
	pthread_rwlock_unlock(&f->lock);
	loads_end(e, in, i);
	if (id != RFT_NO_CHUNK)
		store_put(&e->store, id); /* failed, or changed meanwhile */
	if (say)
		say_fetch_failed(e, in, i, rc, theirs);
	return rc;
}

/* Does any of pieces [@first, @last] of @f live in the persist dir? */
static bool any_persisted(struct file *f, uint32_t first, uint32_t last)
{
	bool any = false;

	pthread_rwlock_rdlock(&f->lock);
	for (uint32_t i = first; i <= last && i < f->nslots && !any; i++)
		any = f->slots[i].where == PIECE_PERSIST;
	pthread_rwlock_unlock(&f->lock);
	return any;
}

static int load_range(struct eng *e, struct inode *in, uint32_t first,
		      uint32_t last, const struct timespec *deadline,
		      enum load_how how)
{
	struct piece_loc loc;
	bool persisted = e->src && any_persisted(&in->file, first, last);
	int rc = -ENOENT;

	/*
	 * A rename may move the copy between the look-up and the read: the
	 * namespace shows the new name before the persist dir has it.  Wait
	 * for the name change in flight (no lock of ours held), then look
	 * again.
	 */
	for (int tries = 0; tries < 3 && rc == -ENOENT; tries++) {
		if (tries) {
			eng_names_lock(e);
			eng_names_unlock(e);
		}
		if (persisted) {
			pthread_rwlock_rdlock(&e->ns.lock);
			pthread_rwlock_rdlock(&in->file.lock);
			rc = e->src->locate(e, in, &loc);
			pthread_rwlock_unlock(&in->file.lock);
			pthread_rwlock_unlock(&e->ns.lock);
			if (rc < 0) {
				rft_err("no persisted copy for inode %llu: %s",
					(unsigned long long)in->ino,
					strerror(-rc));
				return -EIO;
			}
		}
		for (uint32_t i = first; i <= last; i++) {
			rc = load_piece(e, in, persisted ? &loc : NULL, i,
					deadline, how);
			if (rc < 0)
				break;
		}
		if (rc > 0)
			rc = 0;
	}
	return rc;
}

int file_load(struct eng *e, struct inode *in, uint32_t first, uint32_t last,
	      const struct timespec *deadline)
{
	return load_range(e, in, first, last, deadline, LOAD_WAIT);
}

int file_load_ahead(struct eng *e, struct inode *in, uint32_t i,
		    const struct timespec *deadline)
{
	return load_range(e, in, i, i, deadline, LOAD_AHEAD);
}

void file_ahead(struct eng *e, struct inode *in, uint32_t last)
{
	struct file *f = &in->file;
	uint32_t want[ENG_FETCH_THREADS_MAX], n = 0;
	uint32_t k = e->fetcher.nthreads, from, to, cur;

	if (!k)
		return;
	to = last + 1 + k; /* the window: [last + 1, to) */
	cur = atomic_load(&f->ahead_next);
	if (cur >= to && cur <= to + k)
		return; /* queued up to the window already */
	/* Far behind or far ahead of the reader: start again at it. */
	from = cur > last && cur < to ? cur : last + 1;
	if (!atomic_compare_exchange_strong(&f->ahead_next, &cur, to))
		return; /* another reader of the file queued it */
	pthread_rwlock_rdlock(&f->lock);
	for (uint32_t i = from; i < to && i < f->nslots; i++)
		if (slot_remote(&f->slots[i]))
			want[n++] = i;
	pthread_rwlock_unlock(&f->lock);
	for (uint32_t i = 0; i < n; i++)
		fetch_queue_ahead(e, in, want[i]);
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

static void handle_free(struct eng *e, struct eng_file *h)
{
	pthread_mutex_lock(&e->handles_lock);
	if (h->hprev)
		h->hprev->hnext = h->hnext;
	else
		e->handles = h->hnext;
	if (h->hnext)
		h->hnext->hprev = h->hprev;
	pthread_mutex_unlock(&e->handles_lock);
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
	pthread_mutex_lock(&e->handles_lock);
	h->hnext = e->handles;
	if (e->handles)
		e->handles->hprev = h;
	e->handles = h;
	pthread_mutex_unlock(&e->handles_lock);

	if (trunc) {
		/* A truncate must not race a copy queued before it. */
		if (!file_wrlock_drained(e, f)) {
			handle_free(e, h);
			return -EAGAIN;
		}
	} else {
		pthread_rwlock_wrlock(&f->lock);
	}
	if (writer)
		f->writers++;
	if (trunc && (f->size > 0 || f->dur.sealed == f->version)) {
		file_truncate_locked(e, f, 0);
		in->mtime = *now;
		in->ctime = *now;
	}
	open_info(f, info);
	pthread_rwlock_unlock(&f->lock);
	in->opens++;
	*fp = h;
	return 0;
}

/* Wait for @in's queued copies with no lock held; ns->lock held on entry,
 * released on return. */
static void wait_unlocked(struct eng *e, struct inode *in)
{
	in->holds++;
	pthread_rwlock_unlock(&e->ns.lock);
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
		pthread_rwlock_wrlock(&e->ns.lock);
	}
	if (rc == 0 && entry) {
		in->nlookup++;
		ns_fill_stat(e, in, &out->st);
	}
	pthread_rwlock_unlock(&e->ns.lock);
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
	pthread_rwlock_wrlock(&e->ns.lock);
	if (create) {
		dir = ns_find(&e->ns, c->parent);
		if (!dir || !S_ISDIR(dir->mode) ||
		    (dir != e->ns.root && dir->nlink == 0)) {
			pthread_rwlock_unlock(&e->ns.lock);
			*rc = dir && !S_ISDIR(dir->mode) ? -ENOTDIR : -ENOENT;
			return 1;
		}
		de = ns_dir_find(&dir->dir, c->name);
		if (!de) {
			/* A new name: the log decides who makes it. */
			pthread_rwlock_unlock(&e->ns.lock);
			return 0;
		}
		if (c->flags & O_EXCL) {
			pthread_rwlock_unlock(&e->ns.lock);
			*rc = -EEXIST;
			return 1;
		}
		in = de->inode;
	} else {
		in = ns_find(&e->ns, c->ino);
		if (!in) {
			pthread_rwlock_unlock(&e->ns.lock);
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

	pthread_rwlock_wrlock(&e->ns.lock);
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
	/*
	 * On the proposer: its open (an O_TRUNC truncates its own draft).
	 * Elsewhere nothing changes but that the file is being written
	 * there until that node's seal: only a SEAL changes what a node
	 * shows (an OPEN of an old log, with O_TRUNC too, is the same).
	 */
	if (out)
		return open_here(e, in, (int)op->flags, create, &op->now, out);
	if (writer && op->node >= 0 && op->node < 64) {
		pthread_rwlock_wrlock(&f->lock);
		f->remote_writers |= 1ULL << op->node;
		pthread_rwlock_unlock(&f->lock);
	}
	rc = 0;
out:
	pthread_rwlock_unlock(&e->ns.lock);
	(void)index;
	return rc;
}

bool file_draft(const struct eng *e, const struct file *f)
{
	return e->gops && f->version != f->synced;
}

bool file_to_seal(const struct eng *e, const struct file *f)
{
	return e->gops && f->seal_sent != f->version &&
	       (file_draft(e, f) || f->owner == e->node);
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
		drop_slot(e, f, &f->slots[i]);
	free(f->slots);
	f->slots = slots;
	f->nslots = f->cap = n;
	f->size = size;
	f->version++;
	f->dur.sealed = f->version;
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
		.ckpt = ckpt, .base = base, .holders = 1ULL << op->node,
		.npieces = op->npieces,
	};
	if (op->npieces)
		memcpy(t->pieces, op->pieces,
		       (size_t)op->npieces * sizeof(t->pieces[0]));
	free(f->sealed);
	f->sealed = t;
	return 0;
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

int file_apply_seal(struct eng *e, const struct nsop *op, uint64_t index)
{
	bool own = op->node == e->node && op->inc == e->inc;
	struct inode *in;
	struct file *f;
	uint64_t ckpt = 0, base = 0;
	bool kick = false;
	int rc = 0;

	pthread_rwlock_wrlock(&e->ns.lock);
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
	pthread_rwlock_wrlock(&f->lock);
	/*
	 * An erasure-coded seal takes the next chunk numbers of its node in
	 * its checkpoint's stripe space, whatever this node does with it
	 * below: every node numbers alike.
	 */
	if (op->flags && take_chunks(e, in, op->flags, op->node, op->npieces,
				     &ckpt, &base) < 0) {
		pthread_rwlock_unlock(&f->lock);
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
		rc = take_remote_seal(e, f, op->size, op->npieces, op->pieces);
		if (rc == 0) {
			f->gseal = index;
			f->holders = op->node == e->node ? 0
							 : 1ULL << op->node;
			f->scheme = op->flags;
			f->stripe_ckpt = ckpt;
			f->chunk_base = base;
			f->parity_holders = 0;
			in->mtime = op->mtime;
			in->ctime = op->now;
			kick = true;
		}
	}
	if (rc < 0)
		rft_err("seal of inode %llu by node %d (entry %llu): %s: this "
			"node's view of it differs from the group's",
			(unsigned long long)op->ino, op->node,
			(unsigned long long)index, strerror(-rc));
	pthread_rwlock_unlock(&f->lock);
out:
	pthread_rwlock_unlock(&e->ns.lock);
	if (kick)
		eng_post_dirty(e, in);
	return rc;
}

/*
 * Show the group's version of @f (f->sealed) in place of what this node
 * has: its pieces from their holders, its protection and persisted copy
 * as the log recorded them.  ns->lock and f->lock held for writing.
 */
static int take_sealed(struct eng *e, struct inode *in)
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
	/* Parity holders hold rows, not bytes (file_apply_protect). */
	f->holders = (t->scheme ? 1ULL << t->node : t->holders) &
		     ~(1ULL << e->node);
	f->parity_holders = t->scheme ? t->parity_holders : 0;
	f->seal_sent = f->version;
	in->mtime = t->mtime;
	in->ctime = t->ctime;
	if (t->protected)
		f->dur.protected_data = f->version;
	if (t->persisted) {
		if (f->copy == COPY_NONE) {
			f->copy = COPY_HOME;
			f->copy_id = (struct copy_id){ 0, 0 };
		}
		f->dur.persisted_data = f->version;
		f->dur.persisted_meta = f->meta_version;
	}
	return 0;
}

int file_revert(struct eng *e, struct inode *in, int why)
{
	struct file *f = &in->file;
	char path[PATH_MAX];
	int node = -1, rc = -EAGAIN;

	/* f->copy changes under the names lock too (struct file). */
	eng_names_lock(e);
	pthread_rwlock_wrlock(&e->ns.lock);
	pthread_rwlock_wrlock(&f->lock);
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
	pthread_rwlock_unlock(&f->lock);
	pthread_rwlock_unlock(&e->ns.lock);
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

	pthread_rwlock_rdlock(&e->ns.lock);
	in = ns_find(&e->ns, ino);
	if (!in || !S_ISREG(in->mode))
		return NULL;
	f = &in->file;
	pthread_rwlock_wrlock(&f->lock);
	*fp = f;
	if (f->gseal != gseal || idx >= f->nslots)
		return NULL;
	return &f->slots[idx];
}

static void replica_unlock(struct eng *e, struct file *f)
{
	if (f)
		pthread_rwlock_unlock(&f->lock);
	pthread_rwlock_unlock(&e->ns.lock);
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

int file_piece_copy(struct eng *e, uint64_t ino, uint64_t gseal, uint32_t idx,
		    uint32_t len, uint32_t crc, uint8_t *buf)
{
	uint32_t chunk = RFT_NO_CHUNK, fill = 0;
	struct inode *in;

	pthread_rwlock_rdlock(&e->ns.lock);
	in = ns_find(&e->ns, ino);
	if (in && S_ISREG(in->mode)) {
		struct file *f = &in->file;

		pthread_rwlock_rdlock(&f->lock);
		if (f->gseal == gseal && f->dur.sealed == f->version &&
		    idx < f->nslots && slot_in_ram(&f->slots[idx]) &&
		    f->slots[idx].crc == crc &&
		    len == file_piece_len(e, f->size, idx)) {
			chunk = f->slots[idx].chunk;
			fill = f->slots[idx].fill < len ? f->slots[idx].fill
							: len;
			store_get(&e->store, chunk);
		}
		pthread_rwlock_unlock(&f->lock);
	}
	pthread_rwlock_unlock(&e->ns.lock);
	if (chunk == RFT_NO_CHUNK)
		return -ENOENT;
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

	pthread_rwlock_wrlock(&f->lock);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t i = idx[k];
		struct slot *s = i < f->nslots ? &f->slots[i] : NULL;

		/* Only what verify saw: not rewritten, not moved since. */
		if (!s || i >= fs->nslots || !slot_in_ram(s) ||
		    s->chunk != fs->slots[i].chunk ||
		    s->crc != fs->slots[i].crc || f->version != fs->version ||
		    (cache_only && !(s->flags & SLOT_FETCHED)))
			continue;
		slot_to_peer(e, f, s);
		dropped++;
	}
	pthread_rwlock_unlock(&f->lock);
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
	pthread_rwlock_wrlock(&e->ns.lock);
	pthread_rwlock_wrlock(&f->lock);
	if (f->sealed && !file_draft(e, f) && f->writers == 0) {
		node = f->sealed->node;
		rc = node == e->node ? resync_records(e, f)
				     : take_sealed(e, in);
	}
	if (rc == 0 && ns_path(&e->ns, in, path, sizeof(path)) < 0)
		snprintf(path, sizeof(path), "inode %llu",
			 (unsigned long long)in->ino);
	pthread_rwlock_unlock(&f->lock);
	pthread_rwlock_unlock(&e->ns.lock);
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
	pthread_rwlock_rdlock(&e->ns.lock);
	in = ns_find(&e->ns, ino);
	if (in && S_ISREG(in->mode)) {
		pthread_rwlock_rdlock(&in->file.lock);
		if (file_sealed(&in->file))
			*off = file_seal_off_locked(e, &in->file, what);
		pthread_rwlock_unlock(&in->file.lock);
	}
	pthread_rwlock_unlock(&e->ns.lock);
	return *off != 0;
}

/* file_resync() of @ino, held meanwhile. */
static int file_resync_ino(struct eng *e, uint64_t ino)
{
	struct inode *in;
	int rc = -ENOENT;

	pthread_rwlock_wrlock(&e->ns.lock);
	in = ns_find(&e->ns, ino);
	if (in)
		in->holds++;
	pthread_rwlock_unlock(&e->ns.lock);
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
	pthread_rwlock_wrlock(&e->ns.lock);
	in = ns_find(&e->ns, ino);
	if (in && S_ISREG(in->mode)) {
		struct file *f = &in->file;

		pthread_rwlock_rdlock(&f->lock);
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
		pthread_rwlock_unlock(&f->lock);
		if (rc == 0)
			in->holds++;
	}
	pthread_rwlock_unlock(&e->ns.lock);
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

	pthread_rwlock_rdlock(&e->ns.lock);
	in = ns_find(&e->ns, op->ino);
	if (in && S_ISREG(in->mode)) {
		f = &in->file;
		pthread_rwlock_wrlock(&f->lock);
		/* Copies of an older seal protect nothing now. */
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
				f->dur.protected_data = f->version;
			rc = 0;
		} else if (!(f->sealed && f->sealed->index == op->gseal)) {
			rc = -ESTALE;
		} else {
			rc = 0; /* this node has a draft; noted below */
		}
		if (f->sealed && f->sealed->index == op->gseal) {
			f->sealed->holders |= op->holders;
			f->sealed->parity_holders |= op->holders;
			f->sealed->protected = true;
		}
		pthread_rwlock_unlock(&f->lock);
	}
	pthread_rwlock_unlock(&e->ns.lock);
	return rc;
}

int file_apply_persist(struct eng *e, const struct nsop *op)
{
	struct inode *in;
	struct file *f;
	int rc = -ENOENT;

	/* f->copy changes under the names lock too (see struct file). */
	eng_names_lock(e);
	pthread_rwlock_rdlock(&e->ns.lock);
	in = ns_find(&e->ns, op->ino);
	if (in && S_ISREG(in->mode)) {
		f = &in->file;
		pthread_rwlock_wrlock(&f->lock);
		rc = -ESTALE;
		if (f->gseal == op->gseal && f->dur.sealed == f->version &&
		    !file_draft(e, f) &&
		    !(op->node == e->node && op->inc == e->inc)) {
			/* Its copy is home: it can come back from there. */
			f->lost_seal = 0;
			/* Its copy is home: under its name, found by path. */
			if (f->copy == COPY_NONE) {
				f->copy = COPY_HOME;
				f->copy_id = (struct copy_id){ 0, 0 };
			}
			f->dur.persisted_data = f->version;
			f->dur.persisted_meta = f->meta_version;
			/* What is here of it may go when memory is short. */
			for (uint32_t i = 0; i < f->nslots; i++)
				if (slot_in_ram(&f->slots[i]))
					f->slots[i].flags |= SLOT_CLEAN;
			rc = 0;
		} else if (f->gseal == op->gseal) {
			rc = 0; /* the owner's own: recorded at write-back */
		} else if (f->sealed && f->sealed->index == op->gseal) {
			rc = 0; /* this node has a draft; noted below */
		}
		if (f->sealed && f->sealed->index == op->gseal)
			f->sealed->persisted = true;
		pthread_rwlock_unlock(&f->lock);
	}
	pthread_rwlock_unlock(&e->ns.lock);
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
	pthread_rwlock_rdlock(&f->lock);
	if (f->owner == w->e->node && f->dur.sealed == f->version &&
	    f->dur.protected_data != f->version && !file_lost(f))
		w->n++;
	pthread_rwlock_unlock(&f->lock);
	return 0;
}

uint64_t file_count_unprotected(struct eng *e)
{
	struct count_walk w = { e, 0 };

	pthread_rwlock_rdlock(&e->ns.lock);
	ns_walk(&e->ns, count_unprotected, &w);
	pthread_rwlock_unlock(&e->ns.lock);
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
 * is @node's (the owner), no other node holds a copy (holders, @node's
 * bit already taken out) or a parity row (parity_holders) of it, its
 * persisted copy is not that seal's, and it has bytes (holes come back
 * as holes).  Only what the log applied counts, so every node decides
 * alike.  f->lock held.
 */
static bool seal_only_on(const struct file *f, int node)
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
	pthread_rwlock_wrlock(&f->lock);
	/* Whatever it was writing went with it. */
	f->remote_writers &= ~w->bit;
	if (f->sealed &&
	    (f->sealed->holders | f->sealed->parity_holders) & w->bit) {
		f->sealed->holders &= ~w->bit;
		f->sealed->parity_holders &= ~w->bit;
		f->sealed->protected = false;
	}
	if ((f->holders | f->parity_holders) & w->bit) {
		f->holders &= ~w->bit;
		f->parity_holders &= ~w->bit;
		/*
		 * Its copies (or parity rows) are fewer now: protected again
		 * once re-sent.
		 */
		f->dur.protected_data = 0;
	}
	if (!file_lost(f) && seal_only_on(f, w->node)) {
		f->lost_seal = f->gseal;
		f->dur.protected_data = 0;
		lost = true;
	}
	pthread_rwlock_unlock(&f->lock);
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
	pthread_rwlock_rdlock(&e->ns.lock);
	ns_walk(&e->ns, lost_one, &w);
	pthread_rwlock_unlock(&e->ns.lock);
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

/*
 * A writer of @f is gone: the last one seals it.  *sealed: it goes to the
 * tiers; *tell: the group hears of the seal.  No lock held.
 */
static void writer_gone(struct eng *e, struct file *f, bool *sealed,
			bool *tell)
{
	/* Seal what the writer's queued copies leave, not less. */
	while (!file_wrlock_drained(e, f))
		file_wait_writes(e, f);
	if (--f->writers == 0 && f->dur.sealed != f->version)
		file_seal_locked(e, f);
	/*
	 * Closed by its last writer: to the tiers, also when a group's FLUSH
	 * sealed it already.
	 */
	*sealed = f->writers == 0 && !file_persisted(f);
	/*
	 * In a group this node's version goes to the others, unless a FLUSH
	 * sent this very version already.
	 */
	*tell = f->writers == 0 && file_to_seal(e, f);
	pthread_rwlock_unlock(&f->lock);
}

void file_drop_writer(struct eng *e, struct inode *in)
{
	bool sealed, tell;

	writer_gone(e, &in->file, &sealed, &tell);
	if (tell)
		e->gops->seal(e->gctx, in, NULL);
	if (sealed)
		eng_post_dirty(e, in);
}

int eng_release(struct eng *e, struct eng_file *fp)
{
	struct inode *in = fp->inode;
	bool sealed = false, tell = false, keep_writer = false;
	/* A writer passing through: its bytes are taken before it seals. */
	int backing_id = pass_release(e, fp, &keep_writer);

	if (fp->writer && !keep_writer) {
		writer_gone(e, &in->file, &sealed, &tell);
		if (sealed)
			pass_sealed(e, in);
	}
	pthread_rwlock_wrlock(&e->ns.lock);
	in->opens--;
	in->holds++;
	pthread_rwlock_unlock(&e->ns.lock);
	if (tell)
		e->gops->seal(e->gctx, in, NULL);
	if (sealed)
		eng_post_dirty(e, in);
	ns_unhold(e, in);
	handle_free(e, fp);
	return backing_id;
}

void eng_free_handles(struct eng *e)
{
	while (e->handles)
		handle_free(e, e->handles);
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
	pthread_rwlock_rdlock(&f->lock);
	tell = f->writers == 1 && file_to_seal(e, f);
	pthread_rwlock_unlock(&f->lock);
	return tell ? e->gops->seal(e->gctx, fp->inode, c) : 0;
}

int eng_fsync(struct eng *e, struct eng_file *fp, bool datasync)
{
	int rc = pass_take(e, fp); /* a writer passing through */

	if (rc < 0)
		return rc;
	file_wait_writes(e, &fp->inode->file);
	/*
	 * The data is in the arena already, which is as durable as this
	 * tier gets; write-back to the persist dir is asynchronous by design
	 * (reftfs-admin flush --wait is the barrier for that).
	 */
	return 0;
}

/* --- write -------------------------------------------------------------- */

/*
 * Must chunk @id be copied before it is changed: a write-back (or another
 * pin) holds it, or it is a page of a backing file a passthrough reader
 * may see (pass.c)?
 */
static bool copy_first(struct eng *e, uint32_t id)
{
	return store_refs(&e->store, id) > 1 || store_frozen(&e->store, id);
}

/*
 * Does piece @idx need new memory before a write up to byte @end of it?
 * f->lock held.
 */
static bool needs_chunk(struct eng *e, const struct file *f, uint32_t idx,
			uint32_t end)
{
	const struct slot *s = idx < f->nslots ? &f->slots[idx] : NULL;

	/* Not in memory, to be copied first (copy_first), or a small block
	 * the write outgrows. */
	return !s || !slot_in_ram(s) || copy_first(e, s->chunk) ||
	       store_cap(&e->store, s->chunk) < end;
}

/*
 * The memory to take for piece @idx written up to byte @end: a file that
 * is all in its first piece so far takes a small block that fits (it grows
 * into a bigger one, copied, as it is written on), any other piece a whole
 * chunk (a large file's pieces are never copied to grow).
 */
static uint32_t piece_want(struct eng *e, const struct file *f, uint32_t idx,
			   uint32_t end)
{
	uint32_t fill = idx < f->nslots && slot_in_ram(&f->slots[idx])
				? f->slots[idx].fill
				: 0;

	if (idx > 0 || f->nslots > 1 || f->size > e->store.small_max)
		return e->store.chunk_size;
	return end > fill ? end : fill;
}

/* The end of the range [@pos, @pos + @size) within piece @idx. */
static uint32_t piece_end(struct eng *e, uint32_t idx, uint64_t pos,
			  size_t size)
{
	uint64_t ps = (uint64_t)idx << e->store.chunk_shift;
	uint64_t end = pos + size - ps;

	return end < e->store.chunk_size ? (uint32_t)end : e->store.chunk_size;
}

/*
 * Reserve the pieces of [@pos, @pos + @size) for a write, all at once: the
 * chunks needed are taken first, and only then are slots changed, so no
 * piece is ever left emptied when memory runs out (a piece overwritten
 * whole used to get an empty chunk while the writer waited, and kept it
 * if the write then failed).  With fewer chunks than needed and @partial,
 * the pieces that have one are reserved from the start: a short write.
 * Returns the bytes reserved, or -ENOSPC / -ENOMEM; *@needed is the count
 * of chunks the whole range needs (what to wait for).  f->lock held for
 * writing; never waits.
 */
static ssize_t reserve_range(struct eng *e, struct file *f, uint64_t pos,
			     size_t size, bool partial, bool place,
			     uint32_t *needed)
{
	uint32_t cs = e->store.chunk_size, shift = e->store.chunk_shift;
	uint32_t first = (uint32_t)(pos >> shift);
	uint32_t last = (uint32_t)((pos + size - 1) >> shift);
	uint32_t stack[8], *ids = stack, need = 0, got = 0, used = 0;
	size_t reserved = 0;
	int rc = 0;

	for (uint32_t i = first; i <= last; i++)
		need += needs_chunk(e, f, i, piece_end(e, i, pos, size));
	*needed = need;
	if (need > sizeof(stack) / sizeof(stack[0]) &&
	    !(ids = malloc(need * sizeof(*ids))))
		return -ENOMEM;
	/* In piece order, so that only the first can be a small block. */
	for (uint32_t i = first; i <= last && got < need; i++) {
		uint32_t end = piece_end(e, i, pos, size);

		if (!needs_chunk(e, f, i, end))
			continue;
		/* A new piece of a large file: in its backing file's page? */
		if (place && (i >= f->nslots || !slot_in_ram(&f->slots[i])) &&
		    piece_want(e, f, i, end) == cs &&
		    (ids[got] = e->placement->place(e, f, i, pos + size)) !=
			    RFT_NO_CHUNK) {
			got++;
			continue;
		}
		if (store_try_alloc_len(&e->store, piece_want(e, f, i, end),
					&ids[got]) < 0)
			break;
		got++;
	}
	if (got < need && (!partial || got == 0)) {
		rc = -ENOSPC;
		goto out;
	}
	while (reserved < size) {
		uint64_t p = pos + reserved;
		uint32_t idx = (uint32_t)(p >> shift), a = (uint32_t)(p & (cs - 1));
		uint32_t n = size - reserved < cs - a ? (uint32_t)(size - reserved)
						      : cs - a;
		struct slot *s;

		if (needs_chunk(e, f, idx, a + n)) {
			if (used == got)
				break; /* out of chunks: a short write */
			rc = ensure_slots(f, idx);
			if (rc < 0)
				break;
			s = &f->slots[idx];
			if (!slot_in_ram(s)) {
				/* Hole, or persisted-only and overwritten
				 * whole (needs_load loaded the others). */
				*s = (struct slot){ ids[used++], 0, 0, 0,
						    PIECE_RAM, 0 };
				f->resident++;
			} else {
				uint32_t id = ids[used++];

				memcpy(store_ptr(&e->store, id),
				       store_ptr(&e->store, s->chunk), s->fill);
				store_put(&e->store, s->chunk);
				s->chunk = id;
			}
		}
		reserved += n;
	}
	if (reserved > 0)
		rc = 0;
out:
	/* Chunks not needed after all (a pin went away meanwhile). */
	while (used < got)
		store_put(&e->store, ids[used++]);
	if (ids != stack)
		free(ids);
	return rc < 0 ? rc : (ssize_t)reserved;
}

/* Copy one reserved piece in at [a, b); f->lock held for writing. */
static void copy_piece(struct eng *e, struct file *f, uint32_t idx,
		       uint32_t a, uint32_t b, const uint8_t *src)
{
	struct slot *s = &f->slots[idx];
	uint8_t *p = store_ptr(&e->store, s->chunk);

	if (a > s->fill)
		memset(p + s->fill, 0, a - s->fill);
	memcpy(p + a, src, b - a);

	/* Keep the checksum running while the writes are sequential. */
	if (s->crc_len != SLOT_CRC_UNKNOWN && a >= s->crc_len &&
	    s->crc_len >= s->fill) {
		s->crc = crc_zeros(s->crc, a - s->crc_len);
		s->crc = ers_crc32c(s->crc, p + a, b - a);
		s->crc_len = b;
	} else if (s->crc_len != SLOT_CRC_UNKNOWN && b > 0) {
		s->crc_len = SLOT_CRC_UNKNOWN;
	}
	if (b > s->fill)
		s->fill = b;
	/* Changed here: no longer the persisted copy, nor the holders'. */
	s->flags &= ~(SLOT_CLEAN | SLOT_FETCHED);
}

/* Copy [pos, pos + size) of reserved pieces in; f->lock held for writing. */
static void copy_range(struct eng *e, struct file *f, const uint8_t *src,
		       size_t size, uint64_t pos)
{
	uint32_t cs = e->store.chunk_size;

	for (size_t done = 0; done < size;) {
		uint64_t p = pos + done;
		uint32_t a = (uint32_t)(p & (cs - 1));
		uint32_t b = size - done < cs - a ? a + (uint32_t)(size - done)
						  : cs;

		copy_piece(e, f, (uint32_t)(p >> e->store.chunk_shift), a, b,
			   src + done);
		done += b - a;
	}
}

/* First persisted-only slot in [first, last] that a write must load. */
static bool needs_load(struct eng *e, struct file *f, uint64_t off,
		       size_t size, uint32_t *idx)
{
	uint32_t cs = e->store.chunk_size;
	uint32_t first = (uint32_t)(off >> e->store.chunk_shift);
	uint32_t last = (uint32_t)((off + size - 1) >> e->store.chunk_shift);

	for (uint32_t i = first; i <= last && i < f->nslots; i++) {
		uint64_t start = (uint64_t)i << e->store.chunk_shift;
		bool whole = off <= start && off + size >= start + cs;

		/* A piece overwritten whole needs no old bytes. */
		if (slot_remote(&f->slots[i]) && !whole) {
			*idx = i;
			return true;
		}
	}
	return false;
}

bool file_wrlock_drained(struct eng *e, struct file *f)
{
	pthread_rwlock_wrlock(&f->lock);
	/* Copies are queued under f->lock: none can be added while held. */
	if (atomic_load_explicit(&f->pending, memory_order_acquire) == 0)
		return true;
	pthread_rwlock_unlock(&f->lock);
	return false;
}

static bool wjob_hits(const struct wjob *w, const struct file *f,
		      uint64_t off, uint64_t end)
{
	return w && &w->fp->inode->file == f && w->pos < end &&
	       w->pos + w->size > off;
}

bool file_range_queued(struct eng *e, const struct file *f, uint64_t off,
		       uint64_t end)
{
	struct copier *c = &e->copier;
	bool hit;

	pthread_mutex_lock(&c->lock);
	hit = wjob_hits(c->cur, f, off, end);
	for (const struct wjob *w = c->head; w && !hit; w = w->next)
		hit = wjob_hits(w, f, off, end);
	pthread_mutex_unlock(&c->lock);
	return hit;
}

void file_wait_writes(struct eng *e, struct file *f)
{
	struct copier *c = &e->copier;

	if (atomic_load_explicit(&f->pending, memory_order_acquire) == 0)
		return;
	pthread_mutex_lock(&c->lock);
	while (atomic_load_explicit(&f->pending, memory_order_acquire))
		pthread_cond_wait(&c->drained, &c->lock);
	pthread_mutex_unlock(&c->lock);
}

/*
 * The write path.  With @done, the copy is queued for the copier and
 * *@queued set; without, it is done here.  Either way memory is reserved,
 * and the size and state updated, before this returns.  With @nowait,
 * -EAGAIN (nothing changed) where it would wait: for queued copies, for a
 * read-in from the persist dir, for memory.
 */
static ssize_t write_common(struct eng *e, struct eng_file *fp,
			    const void *buf, size_t size, off_t off,
			    void (*done)(void *ctx), void *ctx, bool *queued,
			    bool nowait)
{
	struct inode *in = fp->inode;
	struct file *f = &in->file;
	struct wjob *job = NULL;
	uint32_t idx;
	ssize_t got;
	struct timespec deadline;
	bool waited = false, timed_out = false;
	size_t reserved = 0;
	uint32_t need = 0;
	int loads = 0;
	uint64_t pos, size_now = 0;
	bool filled = false;
	int rc = 0;

	if (queued)
		*queued = false;
	if (off < 0)
		return -EINVAL;
	if (size == 0)
		return 0;
	if (done && !(job = malloc(sizeof(*job))))
		return -ENOMEM;
	for (;;) {
		/*
		 * A copy done here must not overtake a queued one: take the
		 * lock only when nothing is queued (queueing needs the lock).
		 */
		if (done) {
			pthread_rwlock_wrlock(&f->lock);
		} else if (!file_wrlock_drained(e, f)) {
			if (nowait)
				return -EAGAIN;
			file_wait_writes(e, f);
			continue;
		}
		pos = (fp->flags & O_APPEND) ? f->size : (uint64_t)off;
		if (pos + size > RFT_MAX_FILE_SIZE || pos + size < pos) {
			rc = -EFBIG;
			goto out;
		}
		if (needs_load(e, f, pos, size, &idx)) {
			pthread_rwlock_unlock(&f->lock);
			if (nowait) {
				free(job);
				return -EAGAIN;
			}
			if (loads++ == LOAD_TRIES) {
				free(job);
				return -EIO;
			}
			rc = file_load(e, in, idx, idx, NULL);
			if (rc < 0) {
				free(job);
				return rc;
			}
			continue;
		}
		/* Past the deadline, what memory there is: a short write.
		 * Placed: not a take from a backing file (it passes
		 * through). */
		got = reserve_range(e, f, pos, size, timed_out,
				    !fp->pass && e->placement, &need);
		if (got >= 0) {
			reserved = (size_t)got;
			break;
		}
		rc = (int)got;
		if (rc != -ENOSPC || timed_out)
			break;
		if (nowait) {
			rc = -EAGAIN;
			break;
		}
		/*
		 * Out of memory: wait for eviction without the file lock
		 * (readers, the evictor and the persist worker need it),
		 * then look at the file again.  Nothing was changed.
		 */
		pthread_rwlock_unlock(&f->lock);
		if (!waited) {
			rft_deadline_ts(&deadline, e->cfg.enospc_wait_ms);
			waited = true;
		}
		timed_out = store_wait_free(&e->store, need, &deadline) < 0;
		rc = 0;
	}

	if (reserved == 0)
		goto out;
	if (pos + reserved > f->size)
		f->size = pos + reserved;
	f->version++;
	/* A piece filled, told to the placement (a copy made early); not
	 * by a take from a backing file (its file passes through). */
	filled = e->placement && !fp->pass &&
		 (pos + reserved) >> e->store.chunk_shift !=
			 pos >> e->store.chunk_shift;
	size_now = f->size;
	eng_now(&in->mtime);
	in->ctime = in->mtime;
	if (done) {
		struct copier *c = &e->copier;

		*job = (struct wjob){ NULL, fp, buf, reserved, pos, done, ctx };
		pthread_mutex_lock(&c->lock);
		atomic_fetch_add_explicit(&f->pending, 1, memory_order_release);
		if (c->tail)
			c->tail->next = job;
		else
			c->head = job;
		c->tail = job;
		pthread_cond_signal(&c->work);
		pthread_mutex_unlock(&c->lock);
		job = NULL;
		*queued = true;
	} else {
		copy_range(e, f, buf, reserved, pos);
	}
out:
	pthread_rwlock_unlock(&f->lock);
	free(job);
	if (filled)
		e->placement->wrote(e, in, size_now);
	if (rc == -ENOSPC)
		atomic_fetch_add(&e->cnt.enospc, 1);
	if (reserved == 0)
		return rc;
	atomic_fetch_add_explicit(&e->cnt.write_ops, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&e->cnt.write_bytes, reserved,
				  memory_order_relaxed);
	return (ssize_t)reserved;
}

ssize_t eng_write(struct eng *e, struct eng_file *fp, const void *buf,
		  size_t size, off_t off)
{
	return write_common(e, fp, buf, size, off, NULL, NULL, NULL, false);
}

ssize_t file_write_at(struct eng *e, struct eng_file *fp, const void *buf,
		      size_t size, off_t off)
{
	/* Not in the handle list (whose links others change): written only. */
	struct eng_file h = { .inode = fp->inode,
			      .flags = fp->flags & ~O_APPEND,
			      .writer = fp->writer,
			      .pass = fp->pass };

	return write_common(e, &h, buf, size, off, NULL, NULL, NULL, false);
}

ssize_t eng_write_nowait(struct eng *e, struct eng_file *fp, const void *buf,
			 size_t size, off_t off)
{
	return write_common(e, fp, buf, size, off, NULL, NULL, NULL, true);
}

ssize_t eng_write_async(struct eng *e, struct eng_file *fp, const void *buf,
			size_t size, off_t off, void (*done)(void *ctx),
			void *ctx, bool *queued)
{
	if (!e->copier.running)
		return write_common(e, fp, buf, size, off, NULL, NULL, queued,
				    false);
	return write_common(e, fp, buf, size, off, done, ctx, queued, false);
}

/* --- fallocate ----------------------------------------------------------- */

/* First piece among [first, last] not here, or UINT32_MAX. */
static uint32_t first_persisted(const struct file *f, uint32_t first,
				uint32_t last)
{
	for (uint32_t i = first; i <= last && i < f->nslots; i++)
		if (slot_remote(&f->slots[i]))
			return i;
	return UINT32_MAX;
}

/*
 * Zero bytes [a, b) of piece @idx, which is in memory and not shared with a
 * snapshot; f->lock held for writing.  Bytes from fill on read as zeros, so
 * a range reaching fill only lowers it.
 */
static void zero_piece(struct eng *e, struct file *f, uint32_t idx,
		       uint32_t a, uint32_t b)
{
	struct slot *s = &f->slots[idx];

	if (a >= s->fill)
		return;
	if (b >= s->fill)
		s->fill = a;
	else
		memset(store_ptr(&e->store, s->chunk) + a, 0, b - a);
	if (s->crc_len != SLOT_CRC_UNKNOWN && a < s->crc_len)
		s->crc_len = SLOT_CRC_UNKNOWN;
	s->flags &= ~(SLOT_CLEAN | SLOT_FETCHED);
}

/*
 * What a punch of [@off, @end) needs before it can change anything: an edge
 * piece only in the persist dir must be read in (*@load), one shared with a
 * snapshot needs a private copy (reserved here; -ENOSPC when none is free).
 * Pieces covered whole need nothing: they become holes.  f->lock held for
 * writing; never waits.
 */
static int punch_prepare(struct eng *e, struct file *f, uint64_t off,
			 uint64_t end, uint32_t *load, uint32_t *need)
{
	uint32_t cs = e->store.chunk_size, shift = e->store.chunk_shift;
	uint64_t edges[2] = { off, end - 1 };

	*load = UINT32_MAX;
	*need = 0;
	for (int k = 0; k < 2; k++) {
		uint32_t idx = (uint32_t)(edges[k] >> shift);
		uint64_t ps = (uint64_t)idx << shift;
		uint64_t a = off > ps ? off : ps;
		uint64_t b = end < ps + cs ? end : ps + cs;
		const struct slot *s;
		uint32_t n;
		ssize_t got;

		if (idx >= f->nslots || (a == ps && b == ps + cs))
			continue;
		s = &f->slots[idx];
		if (slot_remote(s)) {
			*load = idx;
			return 0;
		}
		if (!slot_in_ram(s) || !copy_first(e, s->chunk))
			continue;
		/* A private copy of what the piece holds, no bigger. */
		got = reserve_range(e, f, ps, s->fill ? s->fill : 1, false,
				    false, &n);
		if (got < 0) {
			*need = n;
			return (int)got;
		}
	}
	return 0;
}

/* Punch [@off, @end) once punch_prepare() succeeded; f->lock held. */
static void punch_locked(struct eng *e, struct file *f, uint64_t off,
			 uint64_t end)
{
	uint32_t cs = e->store.chunk_size, shift = e->store.chunk_shift;
	uint32_t first = (uint32_t)(off >> shift);
	uint32_t last = (uint32_t)((end - 1) >> shift);

	for (uint32_t i = first; i <= last && i < f->nslots; i++) {
		uint64_t ps = (uint64_t)i << shift;
		uint32_t a = off > ps ? (uint32_t)(off - ps) : 0;
		uint32_t b = end < ps + cs ? (uint32_t)(end - ps) : cs;
		struct slot *s = &f->slots[i];

		if (a == 0 && b == cs)
			drop_slot(e, f, s); /* a hole: reads zeros, costs none */
		else if (slot_in_ram(s))
			zero_piece(e, f, i, a, b);
	}
}

int eng_fallocate(struct eng *e, struct eng_file *fp, unsigned flags,
		  off_t off, off_t len)
{
	struct inode *in = fp->inode;
	struct file *f = &in->file;
	bool punch = flags & ENG_FALLOC_PUNCH_HOLE;
	struct timespec deadline;
	bool waited = false, timed_out = false;
	uint32_t load, need = 0;
	uint64_t end;
	int loads = 0;
	int rc;

	/* Passing through: the backing file is the file until taken. */
	if (fp->pass)
		return pass_fallocate(e, fp, flags, off, len);

	if (flags & ~(ENG_FALLOC_KEEP_SIZE | ENG_FALLOC_PUNCH_HOLE))
		return -EOPNOTSUPP;
	if (punch && !(flags & ENG_FALLOC_KEEP_SIZE))
		return -EOPNOTSUPP; /* fallocate(2): punching keeps the size */
	if (off < 0 || len <= 0)
		return -EINVAL;
	if ((fp->flags & O_ACCMODE) == O_RDONLY)
		return -EBADF;
	if (!S_ISREG(in->mode))
		return -ENODEV;
	end = (uint64_t)off + (uint64_t)len;
	if (end > RFT_MAX_FILE_SIZE)
		return -EFBIG;
	if (!punch && ((end - 1) >> e->store.chunk_shift) -
			      ((uint64_t)off >> e->store.chunk_shift) >=
		      e->store.nchunks)
		return -ENOSPC; /* more than the whole budget */

	for (;;) {
		/* Like a truncate, after the copies queued before it. */
		if (!file_wrlock_drained(e, f)) {
			file_wait_writes(e, f);
			continue;
		}
		if (punch) {
			rc = punch_prepare(e, f, (uint64_t)off, end, &load,
					   &need);
		} else {
			load = first_persisted(
				f, (uint32_t)((uint64_t)off >>
					      e->store.chunk_shift),
				(uint32_t)((end - 1) >> e->store.chunk_shift));
			rc = 0;
			if (load == UINT32_MAX) {
				ssize_t got = reserve_range(e, f, (uint64_t)off,
							    (size_t)len, false,
							    false, &need);

				rc = got < 0 ? (int)got : 0;
			}
		}
		if (rc == 0 && load != UINT32_MAX) {
			/* Read the piece in with no lock held, then again. */
			pthread_rwlock_unlock(&f->lock);
			if (loads++ == LOAD_TRIES)
				return -EIO;
			rc = file_load(e, in, load, load, NULL);
			if (rc < 0)
				return rc;
			continue;
		}
		if (rc != -ENOSPC || timed_out)
			break;
		/* Out of memory: wait as a writer does, no lock held. */
		pthread_rwlock_unlock(&f->lock);
		if (!waited) {
			rft_deadline_ts(&deadline, e->cfg.enospc_wait_ms);
			waited = true;
		}
		timed_out = store_wait_free(&e->store, need, &deadline) < 0;
	}
	if (rc == 0) {
		bool grows = !(flags & ENG_FALLOC_KEEP_SIZE) && end > f->size;

		if (punch)
			punch_locked(e, f, (uint64_t)off, end);
		if (grows)
			f->size = end;
		if (punch || grows) {
			f->version++;
			eng_now(&in->mtime);
		}
		eng_now(&in->ctime);
	}
	pthread_rwlock_unlock(&f->lock);
	if (rc == -ENOSPC)
		atomic_fetch_add(&e->cnt.enospc, 1);
	return rc;
}

static void *copier_main(void *arg)
{
	struct eng *e = arg;
	struct copier *c = &e->copier;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct wjob *job = c->head;
		struct file *f;

		if (!job) {
			if (c->stop)
				break;
			pthread_cond_wait(&c->work, &c->lock);
			continue;
		}
		c->head = job->next;
		if (!c->head)
			c->tail = NULL;
		c->cur = job; /* file_range_queued */
		pthread_mutex_unlock(&c->lock);

		f = &job->fp->inode->file;
		pthread_rwlock_wrlock(&f->lock);
		copy_range(e, f, job->src, job->size, job->pos);
		pthread_mutex_lock(&c->lock);
		c->cur = NULL;
		pthread_mutex_unlock(&c->lock);
		pthread_rwlock_unlock(&f->lock);

		/* Give the buffer back before waiters on the file go on. */
		job->done(job->ctx);
		free(job);
		pthread_mutex_lock(&c->lock);
		if (atomic_fetch_sub_explicit(&f->pending, 1,
					      memory_order_acq_rel) == 1)
			pthread_cond_broadcast(&c->drained);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int copier_start(struct eng *e)
{
	struct copier *c = &e->copier;
	int rc;

	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->work, NULL);
	pthread_cond_init(&c->drained, NULL);
	rc = -pthread_create(&c->thread, NULL, copier_main, e);
	if (rc == 0)
		c->running = true;
	return rc;
}

/* Apply what is queued, then stop the thread. */
void copier_stop(struct eng *e)
{
	struct copier *c = &e->copier;

	if (!c->running)
		return;
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_cond_signal(&c->work);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL);
	c->running = false;
	pthread_cond_destroy(&c->drained);
	pthread_cond_destroy(&c->work);
	pthread_mutex_destroy(&c->lock);
}

/* --- read --------------------------------------------------------------- */

#define READ_IOV_STACK 16

/*
 * Serve a read without caching: pieces in memory are copied out under the
 * lock, pieces only in the persist dir are read (and checked) into the same
 * bounce buffer afterwards, without the lock.  The bounce buffer is the
 * read's own (at most the request plus a piece), not the arena's.
 */
static int read_direct(struct eng *e, struct inode *in, uint64_t pos,
		       size_t size, eng_reply_fn reply, void *ctx,
		       const struct timespec *deadline)
{
	struct file *f = &in->file;
	uint32_t cs = e->store.chunk_size, shift = e->store.chunk_shift;
	struct eng_piece pc = { 0 };
	struct piece_loc loc;
	bool located;
	struct slot *want = NULL;
	uint32_t first, last, n, nalloc = 0;
	uint64_t end, base;
	uint8_t *buf = NULL;
	struct iovec iov;
	int rc = 0, tries;

	for (tries = 0; tries < 3; tries++) {
		pthread_rwlock_rdlock(&e->ns.lock);
		pthread_rwlock_rdlock(&f->lock);
		if (pos >= f->size) {
			pthread_rwlock_unlock(&f->lock);
			pthread_rwlock_unlock(&e->ns.lock);
			free(buf);
			free(want);
			reply(ctx, NULL, 0, 0);
			return 0;
		}
		end = pos + size < f->size ? pos + size : f->size;
		first = (uint32_t)(pos >> shift);
		last = (uint32_t)((end - 1) >> shift);
		n = last - first + 1;
		base = (uint64_t)first << shift;
		/* A retry may find the file grown since: more pieces. */
		if (n > nalloc) {
			free(buf);
			free(want);
			buf = malloc((size_t)n * cs);
			want = calloc(n, sizeof(*want));
			nalloc = n;
		}
		pc = (struct eng_piece){ .ino = in->ino, .gseal = f->gseal,
					 .holders = f->holders,
					 .owner = f->owner,
					 .scheme = f->scheme,
					 .stripe_ckpt = f->stripe_ckpt,
					 .chunk_base = f->chunk_base };
		located = false;
		if (!buf || !want) {
			rc = -ENOMEM;
		} else if (e->src && f->copy != COPY_NONE) {
			rc = e->src->locate(e, in, &loc);
			located = true;
		}
		for (uint32_t i = 0; rc >= 0 && i < n; i++) {
			uint32_t k = first + i, len = file_piece_len(e, f->size, k);
			const struct slot *s = k < f->nslots ? &f->slots[k] : NULL;
			uint8_t *dst = buf + (size_t)i * cs;

			want[i] = s ? *s : SLOT_HOLE_INIT;
			if (s && slot_in_ram(s)) {
				uint32_t m = s->fill < len ? s->fill : len;

				memcpy(dst, store_ptr(&e->store, s->chunk), m);
				memset(dst + m, 0, len - m);
			} else if (!s || s->where == PIECE_HOLE) {
				memset(dst, 0, len);
			}
			/* Reused for the piece's length as the file has it. */
			want[i].chunk = len;
		}
		pthread_rwlock_unlock(&f->lock);
		pthread_rwlock_unlock(&e->ns.lock);
		for (uint32_t i = 0; rc >= 0 && i < n; i++)
			if (want[i].where == PIECE_PERSIST)
				rc = located ? e->src->read(
						      e, &loc,
						      (uint64_t)(first + i)
							      << shift,
						      want[i].fill,
						      want[i].chunk,
						      want[i].crc,
						      want[i].crc_len,
						      buf + (size_t)i * cs)
					    : -EIO;
			else if (want[i].where == PIECE_PEER) {
				pc.idx = first + i;
				rc = fetch_piece(e, in, &pc, want[i].fill,
						 want[i].chunk, want[i].crc,
						 want[i].crc_len,
						 buf + (size_t)i * cs,
						 deadline);
			}
		if (rc != -ENOENT)
			break;
		/* The copy moved meanwhile: let the name change finish. */
		eng_names_lock(e);
		eng_names_unlock(e);
	}
	if (rc == 0) {
		iov.iov_base = buf + (pos - base);
		iov.iov_len = end - pos;
		reply(ctx, &iov, 1, 0);
		atomic_fetch_add_explicit(&e->cnt.read_ops, 1,
					  memory_order_relaxed);
		atomic_fetch_add_explicit(&e->cnt.read_bytes, end - pos,
					  memory_order_relaxed);
	} else if (rc == -ENOENT) {
		rc = -EIO;
	}
	if (rc == -EIO)
		atomic_fetch_add(&e->cnt.crc_errors, 1);
	free(buf);
	free(want);
	return rc;
}

/*
 * A read, on a FUSE thread (@deadline NULL: data not in RAM is left to a
 * fetch thread) or on a fetch thread (fetch it, until @deadline).  Returns
 * 0 once @reply was called or the read was queued, else -errno.
 */
static int read_at(struct eng *e, struct inode *in, uint64_t pos,
		   size_t size, eng_reply_fn reply, void *ctx,
		   const struct timespec *deadline)
{
	struct file *f = &in->file;
	struct iovec stack_iov[READ_IOV_STACK], *iov = stack_iov;
	uint32_t *pins, npins = 0;
	uint32_t cs = e->store.chunk_size;
	uint64_t end;
	uint32_t first, last;
	bool ahead = false;
	int cnt = 0, rc;

	file_wait_writes(e, f); /* replied writes are visible to reads */
	for (int tries = 0;; tries++) {
		bool missing = false;

		pthread_rwlock_rdlock(&f->lock);
		/*
		 * A copy queued since: let it land first.  With none queued
		 * while the chunks are pinned, a later write copies on write
		 * and never writes into what this reply points at.
		 */
		if (atomic_load_explicit(&f->pending, memory_order_acquire)) {
			pthread_rwlock_unlock(&f->lock);
			file_wait_writes(e, f);
			tries--;
			continue;
		}
		if (pos >= f->size || size == 0) {
			pthread_rwlock_unlock(&f->lock);
			reply(ctx, NULL, 0, 0);
			return 0;
		}
		end = pos + size < f->size ? pos + size : f->size;
		first = (uint32_t)(pos >> e->store.chunk_shift);
		last = (uint32_t)((end - 1) >> e->store.chunk_shift);
		for (uint32_t i = first; i <= last && i < f->nslots; i++)
			if (slot_remote(&f->slots[i]))
				missing = true;
		/* Some pieces are elsewhere (or holes): read ahead. */
		ahead = f->resident < f->nslots;
		if (!missing)
			break;
		pthread_rwlock_unlock(&f->lock);
		file_ahead(e, in, last);
		if (!deadline)
			return fetch_queue(e, in, pos, size, reply, ctx);
		if (rft_expired_ts(deadline))
			return -ETIMEDOUT;
		rc = tries == LOAD_TRIES ? -EAGAIN
					 : load_range(e, in, first, last,
						      deadline, LOAD_READ);
		/*
		 * No memory to cache it in, even after evicting what may be,
		 * or what was loaded keeps being evicted before this reader
		 * gets to it: read it straight from where it is (the persist
		 * dir, peers), at once.  A read never fails, nor waits, for
		 * lack of cache.
		 */
		if (rc == -ENOSPC || rc == -EAGAIN || rc == -ENOENT) {
			if (rc != -ENOENT)
				atomic_fetch_add(&e->cnt.reads_uncached, 1);
			return read_direct(e, in, pos, size, reply, ctx,
					   deadline);
		}
		if (rc < 0)
			return rc;
	}

	if ((size_t)(last - first + 1) * 3 > READ_IOV_STACK) {
		iov = malloc((size_t)(last - first + 1) * 3 * sizeof(*iov));
		if (!iov) {
			pthread_rwlock_unlock(&f->lock);
			return -ENOMEM;
		}
	}
	/* Chunk ids pinned for the reply go after the (at most 2n) iovecs. */
	pins = (uint32_t *)(iov + (size_t)(last - first + 1) * 2);
	for (uint64_t p = pos; p < end;) {
		uint32_t i = (uint32_t)(p >> e->store.chunk_shift);
		uint32_t a = (uint32_t)(p & (cs - 1));
		uint32_t b = end - p < cs - a ? a + (uint32_t)(end - p) : cs;
		const struct slot *s = i < f->nslots ? &f->slots[i] : NULL;
		uint32_t data = 0;

		if (s && slot_in_ram(s) && s->fill > a) {
			data = (s->fill < b ? s->fill : b) - a;
			iov[cnt].iov_base = store_ptr(&e->store, s->chunk) + a;
			iov[cnt++].iov_len = data;
			store_get(&e->store, s->chunk);
			pins[npins++] = s->chunk;
		}
		if (a + data < b) {
			iov[cnt].iov_base = (void *)e->zeros;
			iov[cnt++].iov_len = b - a - data;
		}
		p += b - a;
	}
	/*
	 * Reply without the file lock: the pins keep the chunks (a writer
	 * copies on write), and once the reply is out the file may be closed,
	 * unlinked and freed by another thread before this one goes on.
	 */
	pthread_rwlock_unlock(&f->lock);
	/* Before the reply: after it the file may be gone. */
	if (ahead)
		file_ahead(e, in, last);
	reply(ctx, iov, cnt, 0);
	for (uint32_t k = 0; k < npins; k++)
		store_put(&e->store, pins[k]);
	if (iov != stack_iov)
		free(iov);
	atomic_fetch_add_explicit(&e->cnt.read_ops, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&e->cnt.read_bytes, end - pos,
				  memory_order_relaxed);
	return 0;
}

int eng_read(struct eng *e, struct eng_file *fp, size_t size, off_t off,
	     eng_reply_fn reply, void *ctx)
{
	int rc = eng_fresh(e);

	if (rc < 0)
		return rc;
	return read_at(e, fp->inode, off < 0 ? 0 : (uint64_t)off, size,
		       reply, ctx, NULL);
}

int file_read_fetch(struct eng *e, struct inode *in, uint64_t pos,
		    size_t size, eng_reply_fn reply, void *ctx,
		    const struct timespec *deadline)
{
	return read_at(e, in, pos, size, reply, ctx, deadline);
}
