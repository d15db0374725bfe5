/*
 * write.c - the write path: one memcpy into the arena plus CRC32C;
 * sequential writes extend each piece's checksum as they go, so sealing is
 * free for them.  The pieces a write needs are reserved all at once before
 * any slot changes; a chunk shared with a write-back in flight (refs > 1)
 * is copied before it is changed, so the write-back always sees the bytes
 * it started with.  Large writes are copied into the arena by the copier
 * thread, their FUSE buffer handed over; FUSE waits for them at FLUSH,
 * FSYNC and before reads of the range.  Also fallocate's holes and
 * reservations.  A large file's new pieces may come from core's placement
 * (passthrough's backing files).
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_i.h"
#include "erasure.h"

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

static void copy_fn(struct rft_wq_item *w, bool cancel);

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
	unsigned loads = 0;
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
			file_wrlock(f);
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
			file_unlock(f);
			if (nowait) {
				free(job);
				return -EAGAIN;
			}
			rc = file_load_write(e, in, idx, &loads);
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
		file_unlock(f);
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
		*job = (struct wjob){ .w.fn = copy_fn, .e = e, .fp = fp,
				      .src = buf, .size = reserved, .pos = pos,
				      .done = done, .ctx = ctx };
		/* The worker copies under f->lock, held here till the job is
		 * on the file's list too. */
		if (rft_wq_queue(e->io->copier.wq, &job->w, RFT_WQ_HIGH) == 0) {
			if (f->wjobs_tail)
				f->wjobs_tail->file_next = job;
			else
				f->wjobs = job;
			f->wjobs_tail = job;
			atomic_fetch_add_explicit(&f->pending, 1,
						  memory_order_release);
			job = NULL;
			*queued = true;
		}
	}
	if (!done || !*queued) {
		/*
		 * Or the copier is stopping (eng_stop, after the FUSE
		 * loop): copied here, nothing queued.
		 */
		copy_range(e, f, buf, reserved, pos);
	}
out:
	file_unlock(f);
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
	if (!e->io->copier.running)
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
			file_drop_slot(e, f, s); /* a hole: reads zeros, costs none */
		else if (slot_in_ram(s))
			zero_piece(e, f, i, a, b);
	}
}

int file_fallocate(struct eng *e, struct eng_file *fp, unsigned flags,
		   off_t off, off_t len)
{
	struct inode *in = fp->inode;
	struct file *f = &in->file;
	bool punch = flags & ENG_FALLOC_PUNCH_HOLE;
	struct timespec deadline;
	bool waited = false, timed_out = false;
	uint32_t load, need = 0;
	uint64_t end;
	unsigned loads = 0;
	int rc;

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
			file_unlock(f);
			rc = file_load_write(e, in, load, &loads);
			if (rc < 0)
				return rc;
			continue;
		}
		if (rc != -ENOSPC || timed_out)
			break;
		/* Out of memory: wait as a writer does, no lock held. */
		file_unlock(f);
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
	file_unlock(f);
	if (rc == -ENOSPC)
		atomic_fetch_add(&e->cnt.enospc, 1);
	return rc;
}

/*
 * The copier's item: one queued write's copy, in the order queued.  Never
 * dropped, at a cancel either: its write was replied to.  The buffer is
 * given back before waiters on the file go on.
 */
static void copy_fn(struct rft_wq_item *w, bool cancel)
{
	struct wjob *job = (struct wjob *)w;
	struct eng *e = job->e;
	struct copier *c = &e->io->copier;
	struct file *f = &job->fp->inode->file;

	(void)cancel;
	file_wrlock(f);
	copy_range(e, f, job->src, job->size, job->pos);
	/* One worker: a file's copies run in the order they were queued. */
	assert(f->wjobs == job);
	f->wjobs = job->file_next;
	if (!f->wjobs)
		f->wjobs_tail = NULL;
	file_unlock(f);

	job->done(job->ctx);
	free(job);
	leaf_lock(&c->lock, ENG_RANK_COPIER);
	if (atomic_fetch_sub_explicit(&f->pending, 1, memory_order_acq_rel) ==
	    1)
		pthread_cond_broadcast(&c->drained);
	leaf_unlock(&c->lock, ENG_RANK_COPIER);
}

int copier_start(struct eng *e)
{
	struct copier *c = &e->io->copier;
	sigset_t all, old;
	int rc;

	/* One worker: copies land in the order their writes were replied. */
	rc = rft_wq_new("rft-copier", 1, &c->wq);
	if (rc < 0)
		return rc;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->drained, NULL);
	/* Signals belong to the FUSE loop: the worker inherits a full mask. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = rft_wq_start(c->wq);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc < 0) {
		rft_wq_free(c->wq);
		c->wq = NULL;
		pthread_cond_destroy(&c->drained);
		pthread_mutex_destroy(&c->lock);
		return rc;
	}
	c->running = true;
	return 0;
}

/* Apply what is queued, then stop the worker. */
void copier_stop(struct eng *e)
{
	struct copier *c;

	if (!e->io)
		return;
	c = &e->io->copier;
	if (!c->running)
		return;
	rft_wq_stop(c->wq, RFT_WQ_DRAIN);
	rft_wq_free(c->wq);
	c->wq = NULL;
	c->running = false;
	pthread_cond_destroy(&c->drained);
	pthread_mutex_destroy(&c->lock);
}
