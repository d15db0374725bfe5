/*
 * read.c - the read path.
 *
 * A read whose pieces are all in RAM is answered on the caller's thread,
 * the reply pointing into the arena under the file's lock.  One that
 * needs a piece from elsewhere (the persist dir, through core's piece
 * source, or in a group the peers that hold it, through gops->fetch) is
 * queued to a small pool of fetch threads (an rft_wq) and answered when
 * the data is in, or when its deadline passes: a FUSE worker never waits
 * for storage or a network, and a slow source holds up only the threads
 * that read from it.  The queued read holds its inode, not its handle, so
 * it outlives neither more nor less than the file it reads.
 *
 * Read-ahead.  A reader that goes through a file from peers or the persist
 * dir would otherwise wait one round trip per piece, one piece at a time.
 * file_ahead() queues the next pieces (one per fetch thread) as the reader
 * reaches them; they are fetched in parallel into free memory, and the
 * reader then finds them here.  Read-ahead jobs wait behind every read
 * (a thread takes one only when no read is queued) and are dropped, not
 * queued, beyond two per thread: they never delay a reader, and never
 * wait for memory.
 *
 * A reader that finds memory full of what may not be evicted is served
 * without keeping a copy (read_direct), at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core_i.h"
#include "erasure.h"

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
	ns_rdlock(e);
	file_rdlock(f);
	prc = f->gseal == gseal && file_data_persisted(f)
		      ? e->src->locate(e, in, &loc)
		      : -ENOENT;
	file_unlock(f);
	ns_unlock(e);
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
	struct loads *l = &e->io->loads;
	bool waited = false;

	leaf_lock(&l->lock, ENG_RANK_LOADS);
	for (;;) {
		bool busy = false;

		for (unsigned k = 0; k < l->n && !busy; k++)
			busy = l->k[k].in == in && l->k[k].idx == i;
		if (!busy)
			break;
		if (ahead) {
			leaf_unlock(&l->lock, ENG_RANK_LOADS);
			return 1;
		}
		if (deadline && rft_expired_ts(deadline)) {
			leaf_unlock(&l->lock, ENG_RANK_LOADS);
			return -ETIMEDOUT;
		}
		if (deadline)
			pthread_cond_timedwait(&l->done, &l->lock, deadline);
		else
			pthread_cond_wait(&l->done, &l->lock);
		waited = true;
	}
	if (waited) {
		leaf_unlock(&l->lock, ENG_RANK_LOADS);
		return 1;
	}
	/* A full table only costs a duplicate fetch. */
	if (l->n < ENG_LOADS_MAX)
		l->k[l->n++] = (struct load_key){ in, i };
	leaf_unlock(&l->lock, ENG_RANK_LOADS);
	return 0;
}

static void loads_end(struct eng *e, const struct inode *in, uint32_t i)
{
	struct loads *l = &e->io->loads;

	leaf_lock(&l->lock, ENG_RANK_LOADS);
	for (unsigned k = 0; k < l->n; k++)
		if (l->k[k].in == in && l->k[k].idx == i) {
			l->k[k] = l->k[--l->n];
			break;
		}
	pthread_cond_broadcast(&l->done);
	leaf_unlock(&l->lock, ENG_RANK_LOADS);
}

/*
 * Piece @i of @in could not be fetched from the nodes holding it (@rc):
 * said once per seal, so that the EIO a reader or writer gets has its
 * reason in the log.  @theirs: the node that sealed a newer version since
 * this node's draft began, or -1; with @lost, the node whose memory alone
 * held the seal, gone.  No lock held.
 */
static void say_fetch_failed(struct eng *e, struct inode *in, uint32_t i,
			     int rc, int theirs, bool lost)
{
	char path[PATH_MAX];

	eng_inode_name(e, in, path, sizeof(path));
	if (lost)
		rft_warn("%s: piece %u cannot be read: the seal it belongs to "
			 "was only in the memory of node %d, which is gone",
			 path, i, theirs);
	else if (theirs >= 0)
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
 * --enospc-wait, as writes do (the rebuild leaves spilled pieces where
 * they are: LOAD_MISSING).
 */
enum load_how { LOAD_WAIT, LOAD_MISSING, LOAD_READ, LOAD_AHEAD };

/*
 * Spilled piece @i of @f, read with checksum @crc, could not be read
 * (spill_source's read fails only -EIO: unreadable or failing its check):
 * true when the reader is to look again, the slot having changed meanwhile
 * (spilled again, written) or saying now where else its bytes are (its
 * holders' copy, the persisted one: file_spill_failed_locked); false: EIO.
 * f->lock held for writing.
 */
static bool spill_look_again_locked(struct eng *e, struct file *f,
				    uint32_t i, uint32_t crc)
{
	return i >= f->nslots || f->slots[i].where != PIECE_SPILL ||
	       f->slots[i].crc != crc || file_spill_failed_locked(e, f, i);
}

static int load_piece(struct eng *e, struct inode *in,
		      const struct piece_loc *loc, uint32_t i,
		      const struct timespec *deadline, enum load_how how)
{
	bool ahead = how == LOAD_AHEAD;
	struct file *f = &in->file;
	struct eng_piece pc;
	struct slot want;
	uint64_t gseal, fid;
	uint32_t len, room, id, new_crc = 0;
	bool say = false;
	int theirs = -1;
	int rc;

	file_rdlock(f);
	if (i >= f->nslots || !slot_remote(&f->slots[i]) ||
	    (f->slots[i].where == PIECE_PERSIST && !loc) ||
	    (f->slots[i].where == PIECE_SPILL && how == LOAD_MISSING)) {
		file_unlock(f);
		return 1;
	}
	file_unlock(f);
	rc = loads_begin(e, in, i, deadline, ahead);
	if (rc != 0)
		return rc;
	file_rdlock(f);
	if (i >= f->nslots || !slot_remote(&f->slots[i]) ||
	    (f->slots[i].where == PIECE_PERSIST && !loc) ||
	    (f->slots[i].where == PIECE_SPILL && how == LOAD_MISSING)) {
		file_unlock(f);
		loads_end(e, in, i);
		return 1; /* the load before ours brought it */
	}
	if (f->slots[i].where == PIECE_PEER && file_lost(f)) {
		/*
		 * No holder is left to ask (file_apply_lost): EIO now, said
		 * once per seal as a failed fetch is (the LOST's apply names
		 * a lost seal of the group's, not a draft's lost base).  The
		 * mark wants the lock for writing: taken on this rare path
		 * only.
		 */
		file_unlock(f);
		file_wrlock(f);
		if (!file_lost(f)) {
			/* Written again meanwhile: look again. */
			file_unlock(f);
			loads_end(e, in, i);
			return 1;
		}
		say = !ahead && !f->fetch_said;
		f->fetch_said = true;
		theirs = f->owner;
		file_unlock(f);
		loads_end(e, in, i);
		if (say)
			say_fetch_failed(e, in, i, -EIO, theirs, true);
		return -EIO;
	}
	want = f->slots[i];
	len = file_piece_len(e, f->size, i);
	gseal = f->gseal;
	fid = f->id;
	pc = (struct eng_piece){ .ino = in->ino, .gseal = f->gseal,
				 .holders = f->holders, .idx = i,
				 .owner = f->owner, .scheme = f->scheme,
				 .stripe_ckpt = f->stripe_ckpt,
				 .chunk_base = f->chunk_base };
	file_unlock(f);

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
	room = want.where == PIECE_PEER || want.where == PIECE_SPILL
		       ? fetch_room(len, want.crc_len)
		       : len;
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
	else if (want.where == PIECE_SPILL)
		rc = e->spill_src->read(e, fid, i, want.fill, len, want.crc,
					want.crc_len, store_ptr(&e->store, id));
	else
		rc = e->src->read(e, loc, (uint64_t)i << e->store.chunk_shift,
				  want.fill, len, want.crc, want.crc_len,
				  store_ptr(&e->store, id));
	/*
	 * A spilled piece cut or extended since (its bytes checked against
	 * the CRC they were spilled with): its checksum as the file shows it
	 * now, so that it stays final (a sealed file's piece may be spilled
	 * again).
	 */
	if (rc == 0 && want.where == PIECE_SPILL &&
	    (want.fill < len || want.crc_len != len))
		new_crc = ers_crc32c(0, store_ptr(&e->store, id), len);
	file_wrlock(f);
	if (rc < 0 && want.where == PIECE_SPILL &&
	    spill_look_again_locked(e, f, i, want.crc))
		rc = 1;
	if (rc == -EIO && (want.where == PIECE_PERSIST ||
			   want.where == PIECE_SPILL)) {
		f->crc_bad = true;
		atomic_fetch_add(&e->cnt.crc_errors, 1);
	}
	/*
	 * The seal this fetch was for is no longer the file's (its holders
	 * may well have dropped it): not an error, the caller looks again.
	 */
	if (rc < 0 && want.where == PIECE_PEER && f->gseal != gseal)
		rc = 1;
	if (rc < 0 && want.where == PIECE_PEER && !ahead && !f->fetch_said) {
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
		if (want.where == PIECE_SPILL &&
		    (want.fill < len || want.crc_len != len)) {
			s->crc = new_crc;
			s->crc_len = len;
		}
		/* From the spill dir, of a version the persist dir has:
		 * the persisted copy's bytes too (evicted with no write). */
		s->flags |= SLOT_FRESH |
			    (want.where == PIECE_PEER ? SLOT_FETCHED
			     : want.where == PIECE_PERSIST ||
					     (f->copy != COPY_NONE &&
					      file_data_persisted(f))
				     ? SLOT_CLEAN
				     : 0);
		f->resident++;
		id = RFT_NO_CHUNK;
		if (want.where != PIECE_SPILL) { /* spill.c counts its own */
			atomic_fetch_add(want.where == PIECE_PEER
						 ? &e->cnt.peer_chunks
						 : &e->cnt.readthrough_chunks,
					 1);
			atomic_fetch_add(want.where == PIECE_PEER
						 ? &e->cnt.peer_bytes
						 : &e->cnt.readthrough_bytes,
					 len);
		}
	}
	file_unlock(f);
	loads_end(e, in, i);
	if (id != RFT_NO_CHUNK)
		store_put(&e->store, id); /* failed, or changed meanwhile */
	if (say)
		say_fetch_failed(e, in, i, rc, theirs, false);
	return rc;
}

/* Does any of pieces [@first, @last] of @f live in the persist dir? */
static bool any_persisted(struct file *f, uint32_t first, uint32_t last)
{
	bool any = false;

	file_rdlock(f);
	for (uint32_t i = first; i <= last && i < f->nslots && !any; i++)
		any = f->slots[i].where == PIECE_PERSIST;
	file_unlock(f);
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
			ns_rdlock(e);
			file_rdlock(&in->file);
			rc = e->src->locate(e, in, &loc);
			file_unlock(&in->file);
			ns_unlock(e);
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

int file_load_missing(struct eng *e, struct inode *in, uint32_t first,
		      uint32_t last, const struct timespec *deadline)
{
	return load_range(e, in, first, last, deadline, LOAD_MISSING);
}

int file_load_write(struct eng *e, struct inode *in, uint32_t i,
		    unsigned *tries)
{
	char path[PATH_MAX];

	if ((*tries)++ < LOAD_TRIES)
		return file_load(e, in, i, i, NULL);
	eng_inode_name(e, in, path, sizeof(path));
	rft_warn("%s: piece %u changed %u times in a row while this node's "
		 "writer read it in: the write fails (EIO)",
		 path, i, LOAD_TRIES);
	return -EIO;
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
	uint32_t k = e->io->fetcher.nthreads, from, to, cur;

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
	file_rdlock(f);
	for (uint32_t i = from; i < to && i < f->nslots; i++)
		if (slot_remote(&f->slots[i]))
			want[n++] = i;
	file_unlock(f);
	for (uint32_t i = 0; i < n; i++)
		fetch_queue_ahead(e, in, want[i]);
}

/* --- read --------------------------------------------------------------- */

/* spill_look_again_locked, taking @f's lock. */
static bool spill_fell_back(struct eng *e, struct file *f, uint32_t i,
			    uint32_t crc)
{
	bool again;

	file_wrlock(f);
	again = spill_look_again_locked(e, f, i, crc);
	file_unlock(f);
	return again;
}

#define READ_IOV_STACK 16

/*
 * Serve a read without caching: pieces in memory are copied out under the
 * lock, pieces only in the persist dir, the spill dir or on peers are read
 * (and checked) into the same bounce buffer afterwards, without the lock.
 * The bounce buffer is the read's own (at most the request plus a piece),
 * not the arena's.
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
	uint64_t end, base, fid = 0;
	uint8_t *buf = NULL;
	struct iovec iov;
	int rc = 0, tries;

	for (tries = 0; tries < 3; tries++) {
		ns_rdlock(e);
		file_rdlock(f);
		if (pos >= f->size) {
			file_unlock(f);
			ns_unlock(e);
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
		fid = f->id;
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
		file_unlock(f);
		ns_unlock(e);
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
			} else if (want[i].where == PIECE_SPILL) {
				rc = e->spill_src->read(e, fid, first + i,
							want[i].fill,
							want[i].chunk,
							want[i].crc,
							want[i].crc_len,
							buf + (size_t)i * cs);
				if (rc == -EIO &&
				    spill_fell_back(e, f, first + i,
						    want[i].crc))
					rc = -ENOENT; /* look again */
			}
		if (rc != -ENOENT)
			break;
		/*
		 * The copy moved meanwhile (or a spilled piece is to be read
		 * elsewhere): let the name change finish.
		 */
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

		file_rdlock(f);
		/*
		 * A copy queued since: let it land first.  With none queued
		 * while the chunks are pinned, a later write copies on write
		 * and never writes into what this reply points at.
		 */
		if (atomic_load_explicit(&f->pending, memory_order_acquire)) {
			file_unlock(f);
			file_wait_writes(e, f);
			tries--;
			continue;
		}
		if (pos >= f->size || size == 0) {
			file_unlock(f);
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
		file_unlock(f);
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
			file_unlock(f);
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
	file_unlock(f);
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

/* --- the fetch threads -------------------------------------------------- */

struct fetch_job {
	struct rft_wq_item w;	/* on fetcher.wq */
	struct eng *e;
	struct inode *in;	/* held (in->holds) until the job is done */
	uint64_t pos;
	size_t size;
	eng_reply_fn reply;	/* NULL: read-ahead of piece pos */
	void *ctx;
	struct timespec deadline; /* CLOCK_MONOTONIC */
};

static void job_run(struct eng *e, struct fetch_job *job, bool stopping)
{
	int rc;

	if (!job->reply) {
		if (!stopping)
			file_load_ahead(e, job->in, (uint32_t)job->pos,
					&job->deadline);
		ns_unhold(e, job->in);
		free(job);
		return;
	}
	if (stopping)
		rc = -ESHUTDOWN;
	else if (rft_expired_ts(&job->deadline))
		rc = -ETIMEDOUT;
	else
		rc = file_read_fetch(e, job->in, job->pos, job->size,
				     job->reply, job->ctx, &job->deadline);
	if (rc == -ETIMEDOUT)
		atomic_fetch_add(&e->cnt.fetch_timeouts, 1);
	if (rc < 0)
		job->reply(job->ctx, NULL, 0, rc);
	ns_unhold(e, job->in);
	free(job);
}

/* A fetch thread's item; @stopping: fetch_stop began, answer -ESHUTDOWN. */
static void job_fn(struct rft_wq_item *w, bool stopping)
{
	struct fetch_job *job = (struct fetch_job *)w;

	job_run(job->e, job, stopping);
}

/*
 * Hold @job->in and queue @job, on the read-ahead list with @ahead.  0, or
 * -ESHUTDOWN when the threads are stopping (the job freed, nothing held).
 */
static int enqueue(struct eng *e, struct fetch_job *job, bool ahead)
{
	struct fetcher *fe = &e->io->fetcher;

	job->w.fn = job_fn;
	job->e = e;
	rft_deadline_ts(&job->deadline, e->cfg.fetch_timeout_ms);
	/* The caller's open handle keeps the inode alive until this hold. */
	ns_wrlock(e);
	job->in->holds++;
	ns_unlock(e);
	if (!fe->wq || rft_wq_queue(fe->wq, &job->w,
				    ahead ? RFT_WQ_LOW : RFT_WQ_HIGH) < 0) {
		ns_unhold(e, job->in);
		free(job);
		return -ESHUTDOWN;
	}
	return 0;
}

int fetch_queue(struct eng *e, struct inode *in, uint64_t pos, size_t size,
		eng_reply_fn reply, void *ctx)
{
	struct fetch_job *job = calloc(1, sizeof(*job));
	int rc;

	if (!job)
		return -ENOMEM;
	job->in = in;
	job->pos = pos;
	job->size = size;
	job->reply = reply;
	job->ctx = ctx;
	rc = enqueue(e, job, false);
	if (rc == 0)
		atomic_fetch_add(&e->cnt.fetch_reads, 1);
	return rc;
}

void fetch_queue_ahead(struct eng *e, struct inode *in, uint32_t idx)
{
	struct fetcher *fe = &e->io->fetcher;
	struct fetch_job *job;
	bool full;

	full = !fe->wq || !fe->nthreads ||
	       rft_wq_pending(fe->wq, RFT_WQ_LOW) >= 2 * fe->nthreads;
	if (full || !(job = calloc(1, sizeof(*job))))
		return;
	job->in = in;
	job->pos = idx;
	enqueue(e, job, true);
}

int fetch_start(struct eng *e)
{
	struct fetcher *fe = &e->io->fetcher;
	unsigned n = e->cfg.fetch_threads ? e->cfg.fetch_threads : 1;
	int rc = 0;

	if (n > ENG_FETCH_THREADS_MAX)
		n = ENG_FETCH_THREADS_MAX;
	rc = rft_wq_new("rft-fetch", n, &fe->wq);
	if (rc == 0)
		rc = rft_wq_start(fe->wq);
	if (rc < 0) {
		fetch_fini(e);
		return rc;
	}
	fe->nthreads = n;
	return 0;
}

/*
 * Answer what is queued with -ESHUTDOWN and stop the threads.  Called
 * before the FUSE session goes away, so every queued read is answered
 * while its request can still be.
 */
void fetch_stop(struct eng *e)
{
	struct fetcher *fe;

	if (!e->io)
		return;
	fe = &e->io->fetcher;
	if (!fe->wq)
		return;
	rft_wq_stop(fe->wq, RFT_WQ_CANCEL);
	fe->nthreads = 0;
}

void fetch_fini(struct eng *e)
{
	struct fetcher *fe;

	if (!e->io)
		return;
	fe = &e->io->fetcher;
	fetch_stop(e);
	rft_wq_free(fe->wq);
	fe->wq = NULL;
}
