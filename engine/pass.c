/*
 * pass.c - FUSE passthrough to backing files (docs/design.md, "Caching and
 * mmap" and "Passthrough").
 *
 * The kernel reads and maps a file that passes through straight from a
 * backing file, at that file's own speed.  Here a backing file is a copy
 * of a sealed file's bytes in a tmpfs of the engine's own (huge pages,
 * mounted with the new mount API and never attached anywhere, so no path
 * leads to it and it goes with the daemon), made at the first read-only
 * open of a file that nothing else has open, and dropped at the last
 * RELEASE.  Its memory counts in the budget: the copy holds as many of
 * the arena's chunks, with their pages given back, as it has pieces.
 *
 * The kernel refuses a direct open beside a passthrough one, so while a
 * copy exists every open of the file passes through, writers included.
 * A writer passing through writes the backing file, which is then the
 * file: GETATTR answers its size and times, a truncate or fallocate
 * changes it too, and at the writer's FLUSH, FSYNC and RELEASE (which
 * comes after its last munmap) the engine takes the bytes from it, as if
 * written anew.
 *
 * A file sealed by its last writer is also copied at once, by a thread
 * of its own at low priority, so that its first reader finds the copy
 * made (pass_sealed); an open that comes during that copy goes direct
 * (a writer's then drops the copy, stale), unless it is a reader and the
 * copy is written over a spare's pages, fast enough to wait for.  While
 * a large file is still written, that thread copies its full pieces
 * early, over a spare of about its size, so that the copy at seal has
 * only what changed since to do (struct early).  In place (--in-place)
 * there is no copy to make early: a large file's new pieces are written
 * straight into the pages of the spare its name's last copy left (its
 * home: pass_place, struct pass_home), and the copy at seal copies only
 * the rest.
 *
 * The copy outlives its last RELEASE while the budget has room for it,
 * so that the next read-only open of the unchanged file passes through
 * with no copy (pass_shed gives such copies up first when memory runs
 * short; a change to the file, or a writer's open, drops it).  A dropped
 * copy's backing file is kept as a spare, and the next copy is made over
 * its pages (pass_free_locked, make_copy).
 *
 * States of a file's pass, all under pass.lock:
 *   COPYING      the first opener copies the bytes (no lock held); other
 *                opens wait for it
 *   REGISTERING  the first opener's caller registers the backing file
 *                with the kernel (eng_pass_registered); others wait
 *   READY        every open joins it
 *   KEPT         no open holds it (the kernel has no id for it): the
 *                next lone read-only open of the same version registers
 *                it again
 * A copy that fails, or a file changed meanwhile, ends it; the waiters
 * look again and open direct.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "engine_i.h"
#include "pass.h"

#define PASS_RUN_MAX 8 /* pieces per pwritev */
#define PASS_SPARES 8	/* backing files kept for reuse, at most */
#define PASS_MAP_MIN (64u << 20) /* copies stored through a mapping */
#define PASS_QUIET_BYTES (1u << 20) /* written in quiet_ms: not quiet */

enum pass_state { PASS_COPYING, PASS_REGISTERING, PASS_READY, PASS_KEPT };

/*
 * The tier's state, one per engine (e->pass), seen by this file alone.
 */
struct pass_ctl {
	/* The backing tmpfs, -1: passthrough off.  Set at FUSE INIT,
	   after everything below it is ready, and read by any
	   thread (the control socket's, the workers'): atomic. */
	_Atomic int mnt;
	uint64_t min_size; /* files above this size pass through */
	pthread_mutex_t lock; /* every file's pass; see the order */
	pthread_cond_t cond;  /* a pass changed state */
	_Atomic uint64_t opens, files, bytes; /* counted since start */
	_Atomic uint64_t reused; /* copies made in a spare */
	_Atomic uint64_t held; /* budget bytes backing files hold now */
	_Atomic uint64_t early_bytes; /* copied while written */
	_Atomic uint64_t early_used; /* of them, a seal's copy used */
	/* Files written are copied early (min_size set before). */
	_Atomic bool early_on;
	/* Large files are written into backing files (pass_place;
	   min_size set before). */
	_Atomic bool in_place;
	_Atomic uint64_t placed_bytes; /* pieces written in place */
	_Atomic uint64_t placed_used;  /* of them, a seal used */
	_Atomic uint64_t no_spare; /* copies not made, in place: no
				      spare of the name, no room */
	struct pass *homes; /* backing files chunks still point
			       into, no file's pass nor home; lock */
	struct pass *all; /* every pass, for pass_fini; lock */
	struct early *early; /* every early copy; lock */
	struct pass *dead; /* retired, for reap() to free; lock */
	struct pass_home *unmaps; /* closed homes, for reap() to
				     unmap; lock */
	struct pass *spare; /* backing files to reuse; lock */
	unsigned nspare;    /* lock */
	/* Files to copy in the background (held): sealed since,
	   or written (early rounds). */
	struct pass_job {
		struct inode *in;
		bool early;
	} *queue;	/* lock */
	unsigned nqueue, capqueue; /* lock */
	pthread_cond_t work; /* queued, or stopping; lock */
	/* Copies at seal start once the writes stopped for
	   quiet_ms (writes_quiet): write_bytes when they last
	   went on, and since when. */
	unsigned quiet_ms;
	uint64_t quiet_bytes;	    /* copier only */
	struct timespec quiet_since; /* copier only */
	bool stop;	  /* lock */
	pthread_t copier;
	bool copier_on; /* set before mnt, read after it */
};

static inline void pass_lock_at(struct eng *e, const char *at, int ln)
{
	eng_mutex_lock_at(&e->pass->lock, ENG_RANK_PASS, at, ln);
}

static inline void pass_unlock_at(struct eng *e, const char *at, int ln)
{
	eng_mutex_unlock_at(&e->pass->lock, ENG_RANK_PASS, at, ln);
}

#define pass_lock(e) pass_lock_at((e), ENG_AT)
#define pass_unlock(e) pass_unlock_at((e), ENG_AT)

/*
 * A copy made early: while a file over min_size is written, the copier
 * thread copies each piece it finds full into a spare of about the file's
 * size (early_round), and the copy at seal starts from it (make_copy).
 * A piece copied keeps its chunk pinned (store_get) until the seal, and a
 * chunk with more than one reference is never written in place (a write
 * or a punch copies it first): so a piece whose slot still has the chunk
 * and fill it was copied from holds the bytes that were copied.  A piece
 * found changed is unpinned and left to the seal, so that a writer going
 * back over its pieces pays one copy on write each at most.
 */
#define EARLY_NONE UINT32_MAX	     /* not copied early */
#define EARLY_GONE (UINT32_MAX - 1) /* copied, changed since: the seal's */
#define EARLY_ROUND 64		     /* pieces copied per round, at most */

struct early {
	struct pass *sp;     /* the spare copied over (its fd and chunks) */
	struct file *file;   /* whose (f->early is this); NULL: dropped */
	uint32_t *ids;	     /* per piece: the chunk copied, or EARLY_* */
	uint32_t *fills;     /* per piece: the bytes copied */
	uint32_t cap;	     /* entries of ids and fills */
	bool busy;	     /* a round copies into it, with no lock held */
	struct early *next;  /* e->pass->early */
};

/*
 * A backing file whose pages a file's pieces are written into (in place):
 * its mapping, and the store's record of the chunks lent to its pages.  It
 * goes with its pass from spare to the file written (f->home) to the copy
 * at seal (f->pass), and is closed (home_close) only once no chunk points
 * into it; till then a pass that no file has keeps it on e->pass->homes.
 */
struct pass_home {
	struct store_home sh;
	size_t len; /* of the mapping */
	struct pass_home *next; /* closed: e->pass->unmaps */
};

struct pass {
	enum pass_state state;
	int fd;		  /* the backing file */
	int id;		  /* the kernel's id for it, 0: not yet */
	unsigned opens;	  /* handles passing through */
	unsigned writers; /* of them, may write */
	bool taking;	  /* a writer's bytes are being taken */
	bool dirty;	  /* a take failed: the bytes are only here */
	bool holds_writer; /* keeps a gone writer's place (pass_release) */
	bool sealed_copy; /* made by the copier thread at seal */
	bool over_pages;  /* COPYING over a spare's pages, mapped; lock */
	uint32_t *held;	  /* chunks standing for its memory */
	uint32_t nheld;
	uint64_t version; /* the file's version the copy holds */
	uint64_t spare_size; /* a spare's backing file's size */
	uint64_t name;	  /* the hash of its file's name (a spare: the last) */
	struct pass_home *home; /* pages chunks are lent to; NULL: none */
	struct file *file; /* whose (f->pass is this) */
	struct pass *next; /* every pass, for pass_fini */
};

static void pass_forget(struct eng *e, struct file *f);
static uint32_t pass_place(struct eng *e, struct file *f, uint32_t idx,
			   uint64_t end);
static void pass_wrote(struct eng *e, struct inode *in, uint64_t size);
static void queue_early(struct eng *e, struct inode *in);

/* Large files written in place, and copied early (eng_pass_enable). */
static const struct placement pass_placement = {
	.place = pass_place,
	.wrote = pass_wrote,
};

/* What core tells passthrough: a file freed takes its kept copies. */
static void pass_sealed(struct eng *e, struct inode *in);

static void pass_on_event(struct eng *e, const struct eng_ev *ev, void *ctx)
{
	(void)ctx;
	if (ev->kind == EV_FREED && S_ISREG(ev->in->mode))
		pass_forget(e, &ev->in->file);
	else if (ev->kind == EV_SEALED && !ev->persisted)
		pass_sealed(e, ev->in);
}

int pass_init(struct eng *e)
{
	e->pass = calloc(1, sizeof(*e->pass));
	if (!e->pass)
		return -ENOMEM;
	e->pass->mnt = -1;
	pthread_mutex_init(&e->pass->lock, NULL);
	pthread_cond_init(&e->pass->cond, NULL);
	rft_cond_init(&e->pass->work); /* timed waits: copier_main */
	eng_placement(e, &pass_placement);
	return eng_listen(e, pass_on_event, NULL);
}

/* At the end: the backing files files were written into go with them. */
static int forget_home(void *ctx, struct inode *in)
{
	if (S_ISREG(in->mode))
		pass_forget(ctx, &in->file);
	return 0;
}

/*
 * The backing file's memory in the budget: @n more chunks held, their
 * pages given back.  -ENOSPC when the store has fewer free (those taken
 * stay).
 */
static int hold(struct eng *e, struct pass *p, uint32_t n)
{
	uint32_t *ids = realloc(p->held, ((size_t)p->nheld + n + 1) *
					     sizeof(*ids));
	uint32_t got;

	if (!ids)
		return -ENOMEM;
	p->held = ids;
	got = store_take_cold(&e->store, p->held + p->nheld, n);
	p->nheld += got;
	atomic_fetch_add(&e->pass->held, (uint64_t)got << e->store.chunk_shift);
	return got < n ? -ENOSPC : 0;
}

/* Give all but @keep of the held chunks back to the store. */
static void unhold_to(struct eng *e, struct pass *p, uint32_t keep)
{
	if (p->nheld <= keep)
		return;
	store_put_cold(&e->store, p->held + keep, p->nheld - keep);
	atomic_fetch_sub(&e->pass->held,
			 (uint64_t)(p->nheld - keep) << e->store.chunk_shift);
	p->nheld = keep;
}

static void unhold(struct eng *e, struct pass *p)
{
	unhold_to(e, p, 0);
}

/* @p to be freed by reap(); pass.lock held. */
static void retire_locked(struct eng *e, struct pass *p)
{
	p->next = e->pass->dead;
	e->pass->dead = p;
	pthread_cond_signal(&e->pass->work);
}

/* @p off the list of every pass, and its file's no more; pass.lock held. */
static void unlink_locked(struct eng *e, struct pass *p)
{
	for (struct pass **pp = &e->pass->all; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	p->file = NULL;
}

/*
 * A pass nobody uses any more, off the list of every pass: a spare, or
 * retired (pass_spare_locked).  pass.lock held, unlinked from its file.
 */
static void pass_spare_locked(struct eng *e, struct pass *p);

static void pass_free_locked(struct eng *e, struct pass *p)
{
	unlink_locked(e, p);
	pass_spare_locked(e, p);
}

/* The spare at *@pp, taken off the list; pass.lock held. */
static struct pass *spare_off_locked(struct eng *e, struct pass **pp)
{
	struct pass *p = *pp;

	*pp = p->next;
	e->pass->nspare--;
	return p;
}

/*
 * Where the smallest spare at least @size long is on the list, NULL: none;
 * *@shorter: the longest shorter one.  pass.lock held.
 */
static struct pass **spare_fit_locked(struct eng *e, uint64_t size,
				      struct pass ***shorter)
{
	struct pass **fit = NULL;

	*shorter = NULL;
	for (struct pass **pp = &e->pass->spare; *pp; pp = &(*pp)->next) {
		uint64_t have = (*pp)->spare_size;

		if (have >= size) {
			if (!fit || have < (*fit)->spare_size)
				fit = pp;
		} else if (!*shorter || have > (**shorter)->spare_size) {
			*shorter = pp;
		}
	}
	return fit;
}

/*
 * The spare to make a copy of @size bytes (@n chunks) over, taken off the
 * list; NULL: none, make it in fresh memory, or, with *@none set, make no
 * copy.  pass.lock held.
 *
 * A spare is kept for its pages, and a copy cuts it to size: the pages
 * past the end are freed, and the next file that long faults them in
 * again (on these guests in the host too).  So the first choice is the
 * smallest spare at least as long, if at most half as long again.  Else,
 * when the arena has room to hold the copy and still stay clear of
 * eviction (the high mark, a quarter free), a longer spare is kept for a
 * file that fits it: the copy grows the longest shorter spare, or goes
 * to fresh memory.  Checkpoints save files of the same sizes again and
 * again, so the spares come to match them.  Only short of room is a
 * longer spare cut (the smallest), or the longest taken.
 */
static struct pass *take_named_spare_locked(struct eng *e, uint64_t name);

static struct pass *take_spare_locked(struct eng *e, uint64_t size,
				      uint32_t n, uint64_t name, bool *none)
{
	struct pass **shorter, **fit, *sp;
	uint32_t nfree;

	*none = false;
	/*
	 * In place, a name's spare is its next file's home: its own.  With
	 * none, fresh memory while the store has it, else no copy: another
	 * name's spare taken here leaves that name's next file no home,
	 * which then takes a third's at its seal, and so on at every save
	 * (measured: two 4 GiB files that swapped spares at every round
	 * were never written in place, and every save paid a copy).  A
	 * budget too small for every name's spare so keeps those it has,
	 * and their files in place; the others are read direct.  Memory
	 * pressure still sheds spares (pass_shed).
	 */
	if (atomic_load_explicit(&e->pass->in_place, memory_order_relaxed)) {
		if (name && (sp = take_named_spare_locked(e, name)))
			return sp;
		*none = store_free_count(&e->store) < n;
		return NULL;
	}
	fit = spare_fit_locked(e, size, &shorter);

	if (fit && (*fit)->spare_size - size <= size / 2)
		return spare_off_locked(e, fit);
	nfree = store_free_count(&e->store);
	if (nfree >= n && nfree - n >= e->store.nchunks / 4)
		return shorter ? spare_off_locked(e, shorter) : NULL;
	if (fit)
		return spare_off_locked(e, fit);
	return shorter ? spare_off_locked(e, shorter) : NULL;
}

/* The oldest spare retired, for reap(); its chunks.  pass.lock held. */
static uint32_t drop_oldest_spare_locked(struct eng *e)
{
	struct pass **pp = &e->pass->spare, *p;

	while ((*pp)->next)
		pp = &(*pp)->next;
	p = spare_off_locked(e, pp);
	retire_locked(e, p);
	return p->nheld;
}

/*
 * The spare for an early copy of a file @size long so far: the smallest
 * at least as long, if at most half as long again.  The file's final size
 * is not known yet, and a longer spare is kept for a file of its size.
 * NULL: none (no early copy: fresh memory is too slow to be worth it).
 * pass.lock held.
 */
static struct pass *take_early_spare_locked(struct eng *e, uint64_t size)
{
	struct pass **shorter, **fit = spare_fit_locked(e, size, &shorter);

	if (fit && (*fit)->spare_size - size <= size / 2)
		return spare_off_locked(e, fit);
	return NULL;
}

/* The spare @sp, taken off the list, put back (or retired when the list is
 * full or the engine stops).  pass.lock held. */
static void spare_back_locked(struct eng *e, struct pass *sp)
{
	if (e->pass->stop || e->pass->nspare >= PASS_SPARES) {
		retire_locked(e, sp);
		return;
	}
	sp->next = e->pass->spare;
	e->pass->spare = sp;
	e->pass->nspare++;
}

uint64_t pass_name_hash(const char *name)
{
	uint64_t h = 14695981039346656037ULL; /* FNV-1a */

	for (; *name; name++) {
		h ^= (uint8_t)*name;
		h *= 1099511628211ULL;
	}
	return h ? h : 1;
}

/*
 * @p's chunks back from its home's pages, held again.  Called before each
 * lend, so that the chunks lent and back never outnumber the pages (the
 * room the store keeps for those back).  pass.lock held.
 */
static void home_collect_locked(struct eng *e, struct pass *p)
{
	uint32_t ids[64], got;

	while ((got = store_home_collect(&e->store, &p->home->sh, ids, 64))) {
		uint32_t *held = realloc(p->held, ((size_t)p->nheld + got + 1) *
							  sizeof(*held));

		if (!held) {
			/* Free chunks then: the budget counts these pages
			 * short until the backing file goes. */
			store_put_cold(&e->store, ids, got);
			continue;
		}
		p->held = held;
		memcpy(p->held + p->nheld, ids, got * sizeof(*ids));
		p->nheld += got;
		atomic_fetch_add(&e->pass->held,
				 (uint64_t)got << e->store.chunk_shift);
	}
}

/*
 * @p's home closed, if no chunk points into it any more: its chunks held
 * again, its mapping left to reap() (unmapping a GiB takes milliseconds,
 * and callers hold the file's lock: nothing reaches the mapping once the
 * home is closed).  False: some still do (or no memory to take them
 * back).  Nothing lends while pass.lock is held: a count of 0 stays 0.
 * pass.lock held.
 */
static bool home_close_locked(struct eng *e, struct pass *p)
{
	struct pass_home *h = p->home;

	if (!h)
		return true;
	if (store_home_live(&e->store, &h->sh))
		return false;
	home_collect_locked(e, p);
	store_home_fini(&h->sh);
	h->next = e->pass->unmaps;
	e->pass->unmaps = h;
	pthread_cond_signal(&e->pass->work);
	p->home = NULL;
	return true;
}

/*
 * @p, on no list and no file's: a spare for the next copy (up to
 * PASS_SPARES), else retired.  While chunks still point into its home it
 * waits on e->pass->homes instead (homes_settle_locked).  pass.lock held.
 *
 * A spare keeps its pages and the chunks that stand for them: writing
 * over pages a file already has is a plain copy, where fresh ones cost a
 * fault each, and on a guest that hands freed memory back to its host
 * (free page reporting) a fault in the host too, which made copies at
 * seal run at 1-10 GB/s (docs/benchmarks.md).  pass_shed gives spares up
 * first when memory runs short.
 *
 * Retired, reap() frees it: closing a backing file frees the copy's
 * pages, milliseconds for a GiB, and callers hold the namespace or file
 * locks, so that is done with no lock held, on the copier thread (or by
 * whoever needs the memory now: pass_shed).
 */
static void pass_spare_locked(struct eng *e, struct pass *p)
{
	struct stat st;

	p->file = NULL;
	if (!home_close_locked(e, p)) {
		p->next = e->pass->homes;
		e->pass->homes = p;
		return;
	}
	if (!p->dirty && !e->pass->stop && e->pass->nspare < PASS_SPARES &&
	    p->fd >= 0 && p->nheld && fstat(p->fd, &st) == 0 &&
	    st.st_size > 0) {
		p->spare_size = (uint64_t)st.st_size;
		p->next = e->pass->spare;
		e->pass->spare = p;
		e->pass->nspare++;
		return;
	}
	retire_locked(e, p);
}

/*
 * The passes waiting on e->pass->homes whose home no chunk points into any
 * more: spares again, or with @retire retired (their memory is wanted).
 * Returns the chunks retired.  pass.lock held.
 */
static uint32_t homes_settle_locked(struct eng *e, bool retire)
{
	uint32_t freed = 0;

	for (struct pass **pp = &e->pass->homes; *pp;) {
		struct pass *p = *pp;

		if (!home_close_locked(e, p)) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		if (retire) {
			freed += p->nheld;
			retire_locked(e, p);
		} else {
			pass_spare_locked(e, p);
		}
	}
	return freed;
}

/* The spare a copy of a file named @name left, taken off the list; NULL:
 * none.  pass.lock held. */
static struct pass *take_named_spare_locked(struct eng *e, uint64_t name)
{
	homes_settle_locked(e, false);
	for (struct pass **pp = &e->pass->spare; *pp; pp = &(*pp)->next)
		if ((*pp)->name == name)
			return spare_off_locked(e, pp);
	return NULL;
}

/*
 * @sp, a spare, mapped as a home for a file's pieces: its pages from 0 up
 * to its first hole, pages the tmpfs has, so that a store there neither
 * faults memory in nor can fail (SIGBUS).  pass.lock held.
 */
static int home_open_locked(struct eng *e, struct pass *sp)
{
	off_t full = lseek(sp->fd, 0, SEEK_HOLE);
	struct pass_home *h;
	uint32_t pages;
	void *map;

	if (full < 0)
		return -errno;
	if ((uint64_t)full > sp->spare_size)
		full = (off_t)sp->spare_size;
	pages = (uint32_t)((uint64_t)full >> e->store.chunk_shift);
	if (pages == 0)
		return -ENODATA;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->len = (size_t)pages << e->store.chunk_shift;
	map = mmap(NULL, h->len, PROT_READ | PROT_WRITE, MAP_SHARED, sp->fd,
		   0);
	if (map == MAP_FAILED) {
		int rc = -errno;

		free(h);
		return rc;
	}
	if (store_home_init(&h->sh, map, pages) < 0) {
		munmap(map, h->len);
		free(h);
		return -ENOMEM;
	}
	sp->home = h;
	return 0;
}

/* @f's home, if it has one, given up (a spare again once nothing points
 * into it).  pass.lock held. */
static void home_drop_locked(struct eng *e, struct file *f)
{
	struct pass *hp = f->home;

	if (!hp)
		return;
	f->home = NULL;
	pass_spare_locked(e, hp);
}

/*
 * In place (eng_pass_in_place): piece @idx of @f, a file over min_size
 * being written (up to @end), is new; the chunk for it, lent to the page
 * at its offset of the backing file the last copy of a file of the same
 * name left (refs 1, counted as used), or RFT_NO_CHUNK: take one from the
 * store.  f->lock held for writing.
 */
static uint32_t pass_place(struct eng *e, struct file *f, uint32_t idx,
			   uint64_t end)
{
	uint32_t id = RFT_NO_CHUNK;
	struct pass *hp;

	if (!atomic_load_explicit(&e->pass->in_place, memory_order_acquire) ||
	    end <= e->pass->min_size || !f->name_hash)
		return RFT_NO_CHUNK;
	pass_lock(e);
	hp = f->home;
	if (!hp && !f->pass && !e->pass->stop) {
		hp = take_named_spare_locked(e, f->name_hash);
		if (hp && home_open_locked(e, hp) < 0) {
			spare_back_locked(e, hp);
			hp = NULL;
		}
		f->home = hp;
	}
	if (hp && !f->pass && idx < hp->home->sh.pages &&
	    !atomic_load_explicit(&hp->home->sh.frozen,
				  memory_order_relaxed)) {
		home_collect_locked(e, hp);
		if (hp->nheld &&
		    !store_page_lent(&e->store, &hp->home->sh, idx)) {
			id = hp->held[--hp->nheld];
			atomic_fetch_sub(&e->pass->held, e->store.chunk_size);
			store_lend(&e->store, &hp->home->sh, id, idx);
			atomic_fetch_add(&e->pass->placed_bytes,
					 e->store.chunk_size);
		}
	}
	pass_unlock(e);
	return id;
}

/* @ea's pins from piece @from on given back, those pieces the seal's. */
static void early_unpin_from(struct eng *e, struct early *ea, uint32_t from)
{
	for (uint32_t i = from; i < ea->cap; i++) {
		if (ea->ids[i] < EARLY_GONE)
			store_put(&e->store, ea->ids[i]);
		ea->ids[i] = EARLY_GONE;
	}
}

/* Free @ea, off its file and the list: its pins given back, its spare a
 * spare again.  pass.lock held. */
static void early_free_locked(struct eng *e, struct early *ea)
{
	early_unpin_from(e, ea, 0);
	if (ea->sp)
		spare_back_locked(e, ea->sp);
	free(ea->ids);
	free(ea->fills);
	free(ea);
}

/* @ea off its file and off the list.  pass.lock held. */
static void early_detach_locked(struct eng *e, struct early *ea)
{
	for (struct early **pp = &e->pass->early; *pp; pp = &(*pp)->next)
		if (*pp == ea) {
			*pp = ea->next;
			break;
		}
	ea->file->early = NULL;
	ea->file = NULL;
}

/* @ea detached, and freed now or by the round copying into it (busy) when
 * that ends.  pass.lock held. */
static void early_drop_locked(struct eng *e, struct early *ea)
{
	early_detach_locked(e, ea);
	if (!ea->busy)
		early_free_locked(e, ea);
}

/*
 * Unmap the closed homes and free the retired passes: their pages first,
 * then their budget (a retired pass's home was closed before it was
 * retired, so its mapping goes before its file is closed).  No lock held.
 */
static void reap(struct eng *e)
{
	struct pass_home *h;
	struct pass *p;

	pass_lock(e);
	h = e->pass->unmaps;
	e->pass->unmaps = NULL;
	p = e->pass->dead;
	e->pass->dead = NULL;
	pass_unlock(e);
	while (h) {
		struct pass_home *next = h->next;

		munmap(h->sh.map, h->len);
		free(h);
		h = next;
	}
	while (p) {
		struct pass *next = p->next;

		if (p->fd >= 0)
			close(p->fd);
		unhold(e, p);
		free(p->held);
		free(p);
		p = next;
	}
}

bool pass_on(const struct eng *e)
{
	return e->pass && atomic_load(&e->pass->mnt) >= 0;
}

void pass_get_stats(struct eng *e, struct eng_stats *s)
{
	struct pass_ctl *pc = e->pass;

	s->pass_enabled = pass_on(e);
	s->pass_opens = atomic_load(&pc->opens);
	s->pass_files = atomic_load(&pc->files);
	s->pass_bytes = atomic_load(&pc->bytes);
	s->pass_reused = atomic_load(&pc->reused);
	s->pass_early_bytes = atomic_load(&pc->early_bytes);
	s->pass_early_used = atomic_load(&pc->early_used);
	s->pass_placed_bytes = atomic_load(&pc->placed_bytes);
	s->pass_placed_used = atomic_load(&pc->placed_used);
	s->pass_no_spare = atomic_load(&pc->no_spare);
	s->pass_in_place = atomic_load(&pc->in_place);
	s->pass_held_bytes = atomic_load(&pc->held);
}

void pass_fini(struct eng *e)
{
	if (!e->pass)
		return;
	if (e->pass->copier_on) {
		pass_lock(e);
		e->pass->stop = true;
		pthread_cond_broadcast(&e->pass->work);
		pass_unlock(e);
		pthread_join(e->pass->copier, NULL);
		e->pass->copier_on = false;
	}
	atomic_store(&e->pass->early_on, false);
	while (e->pass->nqueue)
		ns_unhold(e, e->pass->queue[--e->pass->nqueue].in);
	free(e->pass->queue);
	e->pass->queue = NULL;
	pass_lock(e);
	e->pass->stop = true; /* no more spares */
	while (e->pass->early)
		early_drop_locked(e, e->pass->early);
	while (e->pass->spare)
		drop_oldest_spare_locked(e);
	while (e->pass->all) {
		struct pass *p = e->pass->all;

		if (p->dirty)
			rft_err("passthrough: a file's last writes were never "
				"taken from its backing file (out of memory "
				"at its close): lost at this unmount");
		if (p->file)
			p->file->pass = NULL;
		pass_free_locked(e, p);
	}
	pass_unlock(e);
	if (e->ns.table)
		ns_walk(&e->ns, forget_home, e);
	reap(e);
	if (e->pass->mnt >= 0)
		close(e->pass->mnt);
	e->pass->mnt = -1;
}

void pass_homes_fini(struct eng *e)
{
	if (!e->pass)
		return;
	pass_lock(e);
	homes_settle_locked(e, true);
	if (e->pass->homes)
		rft_err("passthrough: backing files that chunks still point "
			"into at the end: left mapped");
	pass_unlock(e);
	reap(e);
	pthread_mutex_destroy(&e->pass->lock);
	pthread_cond_destroy(&e->pass->cond);
	pthread_cond_destroy(&e->pass->work);
	free(e->pass);
	e->pass = NULL;
}

/* @f goes (its inode is freed): a kept backing file with it.  ns->lock
 * held for writing, or the end. */
static void pass_forget(struct eng *e, struct file *f)
{
	pass_lock(e);
	if (f->early)
		early_drop_locked(e, f->early);
	home_drop_locked(e, f);
	if (f->pass) {
		if (f->pass->dirty)
			rft_info("passthrough: an unlinked file's last writes, "
				 "never taken, go with it");
		pass_free_locked(e, f->pass);
		f->pass = NULL;
	}
	pass_unlock(e);
}

void pass_shed(struct eng *e, uint32_t want)
{
	uint32_t freed = 0;
	struct pass *sp;

	pass_lock(e);
	/*
	 * Backing files no file points into any more (those eviction just
	 * put every piece of back, when called after it), spares, the oldest
	 * first, then early copies, then copies kept for readers.
	 */
	freed += homes_settle_locked(e, true);
	while (freed < want && e->pass->spare)
		freed += drop_oldest_spare_locked(e);
	for (struct early *ea = e->pass->early, *next; ea && freed < want;
	     ea = next) {
		next = ea->next;
		if (ea->busy)
			continue;
		/* Not a spare again: the memory is what is wanted. */
		sp = ea->sp;
		ea->sp = NULL;
		freed += sp->nheld;
		early_drop_locked(e, ea);
		retire_locked(e, sp);
	}
	for (struct pass *p = e->pass->all, *next; p && freed < want;
	     p = next) {
		next = p->next;
		if (p->state != PASS_KEPT || p->dirty)
			continue;
		/* Its file's pieces are its pages: nothing to free. */
		if (p->home && store_home_live(&e->store, &p->home->sh))
			continue;
		if (!home_close_locked(e, p))
			continue;
		freed += p->nheld;
		p->file->pass = NULL;
		/* Not a spare: the memory is what is wanted. */
		unlink_locked(e, p);
		retire_locked(e, p);
	}
	pass_unlock(e);
	/* Wanted now, not when the copier gets to it. */
	reap(e);
	if (freed)
		rft_dbg("passthrough: %" PRIu64 " bytes of spare and kept "
			"copies given up for memory",
			(uint64_t)freed << e->store.chunk_shift);
}

static bool copyable(struct eng *e, const struct file *f);
static struct pass *pass_new_locked(struct eng *e, struct file *f);
static int make_copy(struct eng *e, struct inode *in, struct pass *p,
		     bool at_open);
static void abandon_locked(struct eng *e, struct file *f, struct pass *p);
static bool early_round(struct eng *e, struct inode *in);

/* Copy the sealed file @in into a new backing file, kept for its first
 * reader.  No lock held; @in held. */
static void copy_sealed(struct eng *e, struct inode *in)
{
	struct file *f = &in->file;
	struct pass *p = NULL;
	int rc;

	ns_rdlock(e);
	file_rdlock(f);
	pass_lock(e);
	if (!f->pass && in->nlink > 0 && copyable(e, f)) {
		p = pass_new_locked(e, f);
		if (p)
			p->sealed_copy = true;
	}
	/* An early copy or a home with no copy at seal to finish it: of no
	 * use. */
	if (!p && f->early && f->writers == 0)
		early_drop_locked(e, f->early);
	if (!p && f->writers == 0)
		home_drop_locked(e, f);
	pass_unlock(e);
	file_unlock(f);
	ns_unlock(e);
	if (!p)
		return;
	rc = make_copy(e, in, p, false);
	pass_lock(e);
	if (rc < 0)
		abandon_locked(e, f, p);
	/* (Else make_copy made it PASS_KEPT.) */
	pass_unlock(e);
}

/*
 * Have the writes stopped: less than PASS_QUIET_BYTES written in the last
 * quiet_ms?  Else *@until is when to look again (every quarter of it, so
 * a copy starts within 1.25 quiet_ms of the last write).  Writes to any
 * file count: the files of a save are written one after the other, and a
 * copy made beside the next one's writes costs them memory bandwidth, not
 * CPU time (docs/benchmarks.md, "Passthrough's copies against the
 * writes").  A trickle (a log written now and then) does not hold the
 * copies back.  The copier thread only.
 */
static bool writes_quiet(struct eng *e, struct timespec *until)
{
	uint64_t bytes = atomic_load_explicit(&e->cnt.write_bytes,
					      memory_order_relaxed);
	uint64_t quiet = (uint64_t)e->pass->quiet_ms * 1000000u;
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (bytes - e->pass->quiet_bytes >= PASS_QUIET_BYTES) {
		e->pass->quiet_bytes = bytes;
		e->pass->quiet_since = now;
	}
	if (rft_ts_ns(&e->pass->quiet_since) + quiet <= rft_ts_ns(&now))
		return true;
	rft_deadline_ts(until, e->pass->quiet_ms / 4 ? e->pass->quiet_ms / 4 : 1);
	return false;
}

/*
 * The next job to run, taken off the queue; false: none yet, look again
 * at *@until.  Early rounds run as they come (they are there to overlap
 * the writes); copies at seal in order, once the writes are quiet.
 * pass.lock held; the copier thread only.
 */
static bool next_job_locked(struct eng *e, struct pass_job *job,
			    struct timespec *until)
{
	unsigned k = 0;

	while (k < e->pass->nqueue && !e->pass->queue[k].early)
		k++;
	if (k == e->pass->nqueue) {
		/* Copies at seal only: the first, once the writes stop. */
		if (e->pass->quiet_ms && !writes_quiet(e, until))
			return false;
		k = 0;
	}
	*job = e->pass->queue[k];
	memmove(e->pass->queue + k, e->pass->queue + k + 1,
		(--e->pass->nqueue - k) * sizeof(*e->pass->queue));
	return true;
}

/*
 * The pass copier: a due-time loop, not an rft_wq (issue 26), because
 *  - a copy at seal waits for a time, not for a worker: it is taken only
 *    once the writes have been quiet for quiet_ms (writes_quiet, looked
 *    at again every quiet_ms / 4), and an rft_wq never waits on a time.
 *    An item that slept until then would hold the one worker while the
 *    early rounds, which must run meanwhile, waited behind it;
 *  - its queue is searched and cut by inode (seal_queued_locked, and
 *    pass_unlinked under ns->lock, dropping an unlinked file's jobs and
 *    their holds; pass_waiting counts the copies at seal), where an
 *    rft_wq gives back only by age, from the head;
 *  - the queue is guarded by pass.lock with every pass's state, and the
 *    same wake also reaps (closed homes, retired passes);
 *  - only its early rounds would fit (RFT_WQ_HIGH, as they come), but on
 *    a queue of their own they would copy beside the copies at seal: one
 *    copier at nice 19 is what keeps the copies off the writers' memory
 *    bandwidth (docs/benchmarks.md).
 */
static void *copier_main(void *arg)
{
	struct eng *e = arg;

	/*
	 * Below the job's threads: the copy is for a later reader.  (Linux
	 * sets a thread's own nice value: 0 names the caller.)
	 */
	setpriority(PRIO_PROCESS, 0, 19);
	pass_lock(e);
	for (;;) {
		struct timespec until;
		struct pass_job job;

		while (!e->pass->stop && !e->pass->nqueue && !e->pass->dead &&
		       !e->pass->unmaps)
			pthread_cond_wait(&e->pass->work, &e->pass->lock);
		if (e->pass->stop)
			break;
		if (e->pass->dead || e->pass->unmaps) {
			pass_unlock(e);
			reap(e);
			pass_lock(e);
			continue;
		}
		if (!next_job_locked(e, &job, &until)) {
			/* Writes going on: a new job, or the quiet, wakes. */
			pthread_cond_timedwait(&e->pass->work, &e->pass->lock,
					       &until);
			continue;
		}
		pass_unlock(e);
		if (!job.early)
			copy_sealed(e, job.in);
		else if (early_round(e, job.in))
			queue_early(e, job.in); /* more: after the others */
		ns_unhold(e, job.in);
		pass_lock(e);
	}
	pass_unlock(e);
	return NULL;
}

/* Queue @in, held here, for the copier thread.  False: no memory. */
static bool queue_job(struct eng *e, struct inode *in, bool early)
{
	ns_wrlock(e);
	in->holds++;
	ns_unlock(e);
	pass_lock(e);
	if (e->pass->nqueue == e->pass->capqueue) {
		unsigned cap = e->pass->capqueue ? 2 * e->pass->capqueue : 16;
		struct pass_job *q = realloc(e->pass->queue, cap * sizeof(*q));

		if (!q) {
			pass_unlock(e);
			ns_unhold(e, in);
			return false;
		}
		e->pass->queue = q;
		e->pass->capqueue = cap;
	}
	e->pass->queue[e->pass->nqueue++] = (struct pass_job){ in, early };
	pthread_cond_signal(&e->pass->work);
	pass_unlock(e);
	return true;
}

/* Is a copy at seal of @in queued?  pass.lock held. */
static bool seal_queued_locked(struct eng *e, const struct inode *in)
{
	for (unsigned k = 0; k < e->pass->nqueue; k++)
		if (e->pass->queue[k].in == in && !e->pass->queue[k].early)
			return true;
	return false;
}

void pass_unlinked(struct eng *e, struct inode *in)
{
	unsigned n = 0;
	struct pass *p;

	if (e->pass->mnt < 0)
		return;
	pass_lock(e);
	for (unsigned k = 0; k < e->pass->nqueue; k++) {
		struct pass_job job = e->pass->queue[k];

		if (job.in != in) {
			e->pass->queue[n++] = job;
			continue;
		}
		in->holds--; /* ns->lock held: the caller frees it */
		if (job.early)
			atomic_store(&in->file.early_queued, false);
	}
	e->pass->nqueue = n;
	/*
	 * A copy kept for the next reader: none comes without a name.  A
	 * spare now, not once the kernel forgets the inode (seconds later,
	 * measured): the next checkpoint's file of the same name, written
	 * at once, takes it as its home (in place) or copies over it.
	 */
	p = in->file.pass;
	if (p && p->state == PASS_KEPT && !p->dirty) {
		in->file.pass = NULL;
		pass_free_locked(e, p);
	}
	pass_unlock(e);
}

uint32_t pass_waiting(struct eng *e)
{
	uint32_t n = 0;

	pass_lock(e);
	for (unsigned k = 0; k < e->pass->nqueue; k++)
		n += !e->pass->queue[k].early;
	pass_unlock(e);
	return n;
}

static void pass_sealed(struct eng *e, struct inode *in)
{
	struct file *f = &in->file;
	bool want, gone;

	if (e->pass->mnt < 0 || e->gops || !e->pass->copier_on)
		return;
	file_rdlock(f);
	want = f->size > e->pass->min_size && f->writers == 0;
	gone = !want && f->writers == 0;
	if (gone) {
		/* Cut short before its seal: an early copy or a home is of
		 * no use. */
		pass_lock(e);
		if (f->early)
			early_drop_locked(e, f->early);
		home_drop_locked(e, f);
		pass_unlock(e);
	}
	file_unlock(f);
	if (want)
		queue_job(e, in, false);
}

/*
 * A write filled a piece of @in, @size bytes long now (no lock held): a
 * file over min_size has its full pieces copied early, in the background.
 */
/* Queue an early round for @in, unless one is queued already. */
static void queue_early(struct eng *e, struct inode *in)
{
	if (atomic_exchange(&in->file.early_queued, true))
		return; /* a round is queued, and will see this piece */
	if (!queue_job(e, in, true))
		atomic_store(&in->file.early_queued, false);
}

static void pass_wrote(struct eng *e, struct inode *in, uint64_t size)
{
	if (atomic_load_explicit(&e->pass->early_on, memory_order_acquire) &&
	    size > e->pass->min_size)
		queue_early(e, in);
}

int eng_pass_enable(struct eng *e, uint64_t min_size, bool early,
		    unsigned quiet_ms)
{
	char size[32];
	int fs, mnt;

	if (e->pass->mnt >= 0)
		return 0;
	if (e->gops) {
		rft_info("passthrough: off in a group (another node's write "
			 "changes a file without this kernel seeing it)");
		return -EOPNOTSUPP;
	}
	fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
	if (fs < 0) {
		int rc = -errno;

		rft_info("passthrough: off: no backing tmpfs (%s%s)",
			 strerror(-rc),
			 rc == -EPERM ? ": mounting one, and registering "
					"backing files, need root" : "");
		return rc;
	}
	/* --lock-memory: the copies stay in RAM as the arena does. */
	if (e->cfg.lock_memory &&
	    fsconfig(fs, FSCONFIG_SET_FLAG, "noswap", NULL, 0) < 0) {
		int rc = -errno;

		rft_info("passthrough: off: --lock-memory needs a backing "
			 "tmpfs that never swaps (noswap, Linux 6.4+): %s",
			 strerror(-rc));
		close(fs);
		return rc;
	}
	/* The budget caps what writers passing through can add. */
	snprintf(size, sizeof(size), "%" PRIu64, e->cfg.mem_bytes);
	if (fsconfig(fs, FSCONFIG_SET_STRING, "huge", "always", 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "size", size, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0700", 0) < 0 ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
		int rc = -errno;

		rft_info("passthrough: off: backing tmpfs: %s", strerror(-rc));
		close(fs);
		return rc;
	}
	mnt = fsmount(fs, FSMOUNT_CLOEXEC,
		      MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
	close(fs);
	if (mnt < 0) {
		int rc = -errno;

		rft_info("passthrough: off: backing tmpfs: %s", strerror(-rc));
		return rc;
	}
	e->pass->min_size = min_size;
	e->pass->quiet_ms = quiet_ms;
	if (pthread_create(&e->pass->copier, NULL, copier_main, e) == 0) {
		e->pass->copier_on = true;
		atomic_store_explicit(&e->pass->early_on, early,
				      memory_order_release);
	} else
		rft_info("passthrough: no copier thread: files are copied "
			 "at their first open instead");
	/* On, last: whoever sees it sees what is set above (the control
	 * socket's thread asks at any time, INIT comes on a worker). */
	atomic_store(&e->pass->mnt, mnt);
	rft_info("passthrough: on, for sealed files over %" PRIu64
		 " bytes opened when nothing else has them open (backing "
		 "tmpfs huge=always%s, size %s); copied once the writes "
		 "stop for %u ms%s",
		 min_size, e->cfg.lock_memory ? ", noswap" : "", size,
		 quiet_ms,
		 early && e->pass->copier_on
			 ? "; files also copied while written (--early-copy)"
			 : "");
	return 0;
}

void eng_pass_in_place(struct eng *e, bool on)
{
	if (e->pass->mnt < 0)
		return;
	atomic_store_explicit(&e->pass->in_place, on, memory_order_release);
	if (on && atomic_exchange(&e->pass->early_on, false))
		rft_info("passthrough: no early copies in place (nothing to "
			 "copy early)");
	if (on)
		rft_info("passthrough: large files written in place, into the "
			 "backing file their name's last copy left");
}

/*
 * May a new pass start for @in, opened by @fp and nothing else?  A sealed
 * regular file over min_size, every piece here or a hole.  ns->lock and
 * the file's lock held.
 */
static bool all_here(const struct file *f)
{
	for (uint32_t i = 0; i < f->nslots; i++)
		if (f->slots[i].where != PIECE_HOLE &&
		    f->slots[i].where != PIECE_RAM)
			return false;
	return true;
}

/* A sealed file over min_size with no writer, all of it here. */
static bool copyable(struct eng *e, const struct file *f)
{
	return f->writers == 0 && f->size > e->pass->min_size &&
	       file_sealed(f) && all_here(f);
}

static bool may_start(struct eng *e, struct inode *in, struct eng_file *fp)
{
	return !fp->writer && in->opens == 1 && copyable(e, &in->file);
}

/* A new pass of @f, in COPYING; pass.lock held.  NULL: no memory. */
static struct pass *pass_new_locked(struct eng *e, struct file *f)
{
	struct pass *p = calloc(1, sizeof(*p));

	if (p) {
		p->state = PASS_COPYING;
		p->fd = -1;
		p->name = f->name_hash;
		p->file = f;
		p->next = e->pass->all;
		e->pass->all = p;
		f->pass = p;
	}
	return p;
}

/* Join the ready pass @p with @fp; pass.lock held. */
static void join_locked(struct eng *e, struct pass *p, struct eng_file *fp,
			struct eng_open_info *info)
{
	p->opens++;
	if (fp->writer)
		p->writers++;
	fp->pass = true;
	info->pass_fd = p->fd;
	info->pass_id = p->id;
	atomic_fetch_add(&e->pass->opens, 1);
}

/* End pass @p of @f that never became ready; pass.lock held. */
static void abandon_locked(struct eng *e, struct file *f, struct pass *p)
{
	f->pass = NULL;
	pass_free_locked(e, p);
	pthread_cond_broadcast(&e->pass->cond);
}

/* Write @iov whole at @at, short writes continued.  0 or -errno. */
static int pwrite_all(int fd, struct iovec *iov, int n, off_t at)
{
	while (n > 0) {
		ssize_t w = pwritev(fd, iov, n, at);

		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		at += w;
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

/* A copy to make: @in's pieces in memory, pinned (store_get) meanwhile. */
struct copy_job {
	uint32_t n;		     /* pieces to copy */
	uint32_t *ids, *fills, *idx; /* chunk, bytes, piece index */
	uint64_t version, size;	     /* the file's, when the job was made */
	uint64_t spare, mapped;	     /* bytes: the spare's, copied mapped */
	/* Chunks lent to a backing file's page that hold no byte of the
	 * file (fill 0): nothing to copy, but pinned too, so that every
	 * chunk of the file that points into its home is known. */
	uint32_t *zero, nzero;
};

/* Copy pieces [@from, @to) of @j into @fd: 0 or -errno. */
static int copy_pieces(struct eng *e, const struct copy_job *j, int fd,
		       uint32_t from, uint32_t to)
{
	for (uint32_t k = from; k < to;) {
		struct iovec iov[PASS_RUN_MAX];
		uint32_t m = 0;
		off_t at = (off_t)j->idx[k] << e->store.chunk_shift;
		int rc;

		/*
		 * Runs of whole pieces in one pwritev: a write that covers a
		 * new huge page of the tmpfs whole spares zeroing it first.
		 */
		do {
			iov[m].iov_base = store_ptr(&e->store, j->ids[k + m]);
			iov[m].iov_len = j->fills[k + m];
			m++;
		} while (k + m < to && m < PASS_RUN_MAX &&
			 j->fills[k + m - 1] == e->store.chunk_size &&
			 j->idx[k + m] == j->idx[k + m - 1] + 1);
		rc = pwrite_all(fd, iov, (int)m, at);
		if (rc < 0)
			return rc;
		k += m;
	}
	return 0;
}

/*
 * Pieces [from, to) of a job stored through a mapping of its file.  On a
 * thread of its own for the one copy (copy_over): a fork and join around
 * 64 MiB or more of stores, where the thread's start is lost in the noise,
 * and no pool of idle threads or wait for an item's end (rft_wq has none).
 */
struct map_part {
	struct eng *e;
	const struct copy_job *j;
	uint8_t *map;
	uint32_t from, to;
};

static void *map_copy(void *arg)
{
	const struct map_part *mp = arg;
	const struct copy_job *j = mp->j;

	for (uint32_t k = mp->from; k < mp->to; k++)
		memcpy(mp->map + ((size_t)j->idx[k] << mp->e->store.chunk_shift),
		       store_ptr(&mp->e->store, j->ids[k]), j->fills[k]);
	return NULL;
}

/*
 * Copy @j into @fd, a spare backing file: the pieces that lie in its
 * first bytes with no hole among them are stored through a mapping, on
 * two threads (this one and one more), the rest written.  A store to a
 * page the file has allocates nothing, so it cannot fail (no SIGBUS),
 * and takes no inode lock, where pwrite(2) holds the file's for each
 * write: two threads writing one file run one at a time (measured:
 * docs/benchmarks.md).
 */
static int copy_over(struct eng *e, struct copy_job *j, struct pass *p)
{
	int fd = p->fd;
	off_t full = lseek(fd, 0, SEEK_HOLE); /* no hole before; or EOF */
	struct map_part parts[2];
	pthread_t helper;
	uint32_t m = 0;
	size_t len;
	bool two;
	void *map;

	while (full > 0 && m < j->n &&
	       ((off_t)j->idx[m] << e->store.chunk_shift) + j->fills[m] <=
		       full)
		m++;
	len = m ? ((size_t)j->idx[m - 1] << e->store.chunk_shift) +
			  j->fills[m - 1]
		: 0;
	if (len < PASS_MAP_MIN)
		return copy_pieces(e, j, fd, 0, j->n);
	map = mmap(NULL, len, PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return copy_pieces(e, j, fd, 0, j->n);
	/* Fast (most of it over pages that exist): readers may wait. */
	if (len >= j->size / 4 * 3) {
		pass_lock(e);
		p->over_pages = true;
		pass_unlock(e);
	}
	parts[0] = (struct map_part){ e, j, map, 0, m / 2 };
	parts[1] = (struct map_part){ e, j, map, m / 2, m };
	two = pthread_create(&helper, NULL, map_copy, &parts[1]) == 0;
	map_copy(&parts[0]);
	if (two)
		pthread_join(helper, NULL);
	else
		map_copy(&parts[1]);
	munmap(map, len);
	j->mapped = len;
	return copy_pieces(e, j, fd, m, j->n);
}

/*
 * A reused backing file still has its last file's bytes wherever this
 * copy wrote none: holes punched there (between the pieces copied, and
 * after them up to @j->size) so that they read as zeroes.
 */
static int punch_gaps(struct eng *e, const struct copy_job *j, int fd)
{
	uint64_t pos = 0;

	for (uint32_t k = 0; k <= j->n; k++) {
		uint64_t at = k < j->n ? (uint64_t)j->idx[k]
						 << e->store.chunk_shift
				       : j->size;

		if (at > pos &&
		    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			      (off_t)pos, (off_t)(at - pos)) < 0)
			return -errno;
		if (k < j->n)
			pos = at + j->fills[k];
	}
	return 0;
}

static void job_free(struct eng *e, struct copy_job *j)
{
	if (!j)
		return;
	for (uint32_t k = 0; k < j->n; k++)
		store_put(&e->store, j->ids[k]);
	for (uint32_t k = 0; k < j->nzero; k++)
		store_put(&e->store, j->zero[k]);
	free(j->zero);
	free(j->ids);
	free(j->fills);
	free(j->idx);
	free(j);
}

/* @in's pieces in memory, pinned, as a job; NULL: no memory. */
static struct copy_job *job_new(struct eng *e, struct inode *in)
{
	struct file *f = &in->file;
	struct copy_job *j = calloc(1, sizeof(*j));
	size_t cap;

	if (!j)
		return NULL;
	file_rdlock(f);
	cap = (size_t)f->nslots + 1;
	j->ids = malloc(cap * sizeof(*j->ids));
	j->fills = malloc(cap * sizeof(*j->fills));
	j->idx = malloc(cap * sizeof(*j->idx));
	j->zero = malloc(cap * sizeof(*j->zero));
	j->version = f->version;
	j->size = f->size;
	if (j->ids && j->fills && j->idx && j->zero)
		for (uint32_t i = 0; i < f->nslots; i++) {
			const struct slot *s = &f->slots[i];
			uint32_t len = file_piece_len(e, j->size, i);
			uint32_t fill = s->fill < len ? s->fill : len;

			if (s->where != PIECE_RAM)
				continue;
			/* Nothing in it: a hole to the copy (punch_gaps), where
			 * an empty pwritev would end it with EIO. */
			if (fill == 0) {
				if (store_lent_home(&e->store, s->chunk)) {
					store_get(&e->store, s->chunk);
					j->zero[j->nzero++] = s->chunk;
				}
				continue;
			}
			store_get(&e->store, s->chunk);
			j->ids[j->n] = s->chunk;
			j->fills[j->n] = fill;
			j->idx[j->n++] = i;
		}
	file_unlock(f);
	if (!j->ids || !j->fills || !j->idx || !j->zero) {
		job_free(e, j);
		return NULL;
	}
	return j;
}

/* @ea with room for @n pieces; false: no memory.  pass.lock held. */
static bool early_grow_locked(struct early *ea, uint32_t n)
{
	uint32_t *ids, *fills;

	if (n <= ea->cap)
		return true;
	ids = realloc(ea->ids, n * sizeof(*ids));
	if (ids)
		ea->ids = ids;
	fills = ids ? realloc(ea->fills, n * sizeof(*fills)) : NULL;
	if (!fills)
		return false;
	ea->fills = fills;
	for (uint32_t i = ea->cap; i < n; i++)
		ea->ids[i] = EARLY_NONE;
	ea->cap = n;
	return true;
}

/*
 * @in's early copy, made now if it has none and a spare fits it; NULL:
 * none to make (the file is not being written, is small, passes through,
 * is gone).  One outgrown moves to a spare that fits, from the start.
 * ns->lock and the file's lock (read), and pass.lock held.
 */
static struct early *early_get_locked(struct eng *e, struct inode *in)
{
	struct file *f = &in->file;
	struct early *ea = f->early;
	struct pass *sp;

	if (e->pass->stop || f->pass || in->nlink == 0) {
		if (ea)
			early_drop_locked(e, ea);
		return NULL;
	}
	if (f->writers == 0 || f->size <= e->pass->min_size)
		return NULL;
	if (ea && ea->sp->spare_size < f->size &&
	    (sp = take_early_spare_locked(e, f->size))) {
		early_unpin_from(e, ea, 0);
		for (uint32_t i = 0; i < ea->cap; i++)
			ea->ids[i] = EARLY_NONE;
		spare_back_locked(e, ea->sp);
		ea->sp = sp;
	}
	if (ea || !(sp = take_early_spare_locked(e, f->size)))
		return ea;
	ea = calloc(1, sizeof(*ea));
	if (!ea) {
		spare_back_locked(e, sp);
		return NULL;
	}
	ea->sp = sp;
	ea->file = f;
	ea->next = e->pass->early;
	e->pass->early = ea;
	f->early = ea;
	return ea;
}

/*
 * The pieces of @f to copy into @ea this round, pinned, into @j (room for
 * EARLY_ROUND): full ones not copied yet that lie within the spare's
 * pages, with no write to them still queued.  Pieces copied before and
 * changed since are unpinned.  True when some were left for a next round.
 * The file's lock (read) and pass.lock held.
 */
static bool early_pick_locked(struct eng *e, struct file *f, struct early *ea,
			      struct copy_job *j)
{
	uint32_t cs = e->store.chunk_size, shift = e->store.chunk_shift;
	uint64_t room = ea->sp->spare_size >> shift;
	bool queued = atomic_load(&f->pending) != 0, more = false;

	if (!early_grow_locked(ea, f->nslots))
		return false;
	early_unpin_from(e, ea, f->nslots); /* cut off by a truncate */
	for (uint32_t i = 0; i < f->nslots; i++) {
		const struct slot *s = &f->slots[i];
		uint32_t had = ea->ids[i];

		if (had < EARLY_GONE) {
			if (!slot_in_ram(s) || s->chunk != had ||
			    s->fill != ea->fills[i]) {
				store_put(&e->store, had);
				ea->ids[i] = EARLY_GONE;
			}
			continue;
		}
		if (had == EARLY_GONE || !slot_in_ram(s) || s->fill != cs ||
		    i >= room)
			continue;
		if (j->n == EARLY_ROUND) {
			more = true;
			continue;
		}
		if (queued && file_range_queued(e, f, (uint64_t)i << shift,
						((uint64_t)i + 1) << shift))
			continue;
		store_get(&e->store, s->chunk);
		j->ids[j->n] = s->chunk;
		j->fills[j->n] = cs;
		j->idx[j->n++] = i;
	}
	return more;
}

/*
 * One round of @in's early copy (the copier thread, no lock held, @in
 * held): its full pieces not copied yet, EARLY_ROUND at most.  True when
 * some were left for the next round.
 */
static bool early_round(struct eng *e, struct inode *in)
{
	struct file *f = &in->file;
	uint32_t ids[EARLY_ROUND], fills[EARLY_ROUND], idx[EARLY_ROUND];
	struct copy_job j = { .ids = ids, .fills = fills, .idx = idx };
	struct early *ea;
	bool more = false;
	int rc;

	atomic_store(&f->early_queued, false); /* writes from now queue again */
	ns_rdlock(e);
	file_rdlock(f);
	pass_lock(e);
	ea = early_get_locked(e, in);
	if (ea)
		more = early_pick_locked(e, f, ea, &j);
	if (j.n)
		ea->busy = true;
	pass_unlock(e);
	file_unlock(f);
	ns_unlock(e);
	if (!j.n)
		return false;

	/* The chunks are pinned, so nothing writes them meanwhile. */
	rc = copy_pieces(e, &j, ea->sp->fd, 0, j.n);

	pass_lock(e);
	ea->busy = false;
	for (uint32_t k = 0; k < j.n; k++)
		if (rc == 0 && ea->file) {
			ea->ids[idx[k]] = ids[k]; /* the pin is its now */
			ea->fills[idx[k]] = fills[k];
		} else {
			store_put(&e->store, ids[k]);
		}
	if (!ea->file) /* dropped while it copied */
		early_free_locked(e, ea);
	pthread_cond_broadcast(&e->pass->cond);
	pass_unlock(e);
	if (rc < 0) {
		rft_dbg("passthrough: inode %" PRIu64 ": early copy: %s",
			in->ino, strerror(-rc));
		return false;
	}
	atomic_fetch_add(&e->pass->early_bytes, (uint64_t)j.n * fills[0]);
	return more;
}

/*
 * @f's early copy, taken off it for the copy at seal to finish, once no
 * round is copying into it; NULL: none.  pass.lock held.
 */
static struct early *early_take_locked(struct eng *e, struct file *f)
{
	struct early *ea;

	while ((ea = f->early) && ea->busy)
		pthread_cond_wait(&e->pass->cond, &e->pass->lock);
	if (ea)
		early_detach_locked(e, ea);
	return ea;
}

/*
 * What is left of @j to copy over @ea, into @todo (arrays of @j's room):
 * the pieces not copied early from the same chunk and fill.  Returns the
 * bytes copied early already.
 */
static uint64_t early_left(const struct early *ea, const struct copy_job *j,
			   struct copy_job *todo)
{
	uint64_t done = 0;

	todo->n = 0;
	todo->version = j->version;
	todo->size = j->size;
	for (uint32_t k = 0; k < j->n; k++) {
		uint32_t i = j->idx[k];

		if (i < ea->cap && ea->ids[i] == j->ids[k] &&
		    ea->fills[i] == j->fills[k]) {
			done += j->fills[k];
			continue;
		}
		todo->ids[todo->n] = j->ids[k];
		todo->fills[todo->n] = j->fills[k];
		todo->idx[todo->n++] = i;
	}
	return done;
}

/*
 * What is left of @j to copy into @h's backing file, into @todo (arrays
 * of @j's room): the pieces whose chunk is not lent to their own page of
 * it.  *@placed: the bytes of those that are, *@nplaced their count.
 * -EBUSY when a chunk that is no piece of @j (nor one of @j->zero) points
 * into it (an old one that a reader or the write-back still pins): its
 * page is neither the copy's to write nor to cut, and the bytes a pin
 * reads never change.
 * @j's pins keep its own chunks lent meanwhile.
 */
static int home_left(struct eng *e, struct pass_home *h,
		     const struct copy_job *j, struct copy_job *todo,
		     uint64_t *placed, uint32_t *nplaced)
{
	uint32_t mine;

	*placed = 0;
	*nplaced = 0;
	todo->n = 0;
	todo->version = j->version;
	todo->size = j->size;
	for (uint32_t k = 0; k < j->n; k++) {
		uint32_t id = j->ids[k];

		if (store_lent_home(&e->store, id) == &h->sh &&
		    e->store.lent[id].page == j->idx[k]) {
			*placed += j->fills[k];
			(*nplaced)++;
			continue;
		}
		todo->ids[todo->n] = id;
		todo->fills[todo->n] = j->fills[k];
		todo->idx[todo->n++] = j->idx[k];
	}
	/* Pieces in place holding no byte (cut or punched to nothing). */
	mine = *nplaced;
	for (uint32_t k = 0; k < j->nzero; k++)
		mine += store_lent_home(&e->store, j->zero[k]) == &h->sh;
	return store_home_live(&e->store, &h->sh) == mine ? 0 : -EBUSY;
}

/*
 * @p's backing file, a spare or a new one, filled with @in's bytes, with
 * no lock held.  0, or -errno / -ESTALE (the file changed meanwhile) /
 * -EAGAIN (@at_open: better made in the background) / -EBUSY (its home
 * has a page an old chunk still points into).
 *
 * A file written in place (f->home) has its copy mostly made: the home
 * is frozen first (a write from then on copies a lent chunk before it
 * changes it, so that the bytes a passthrough reader sees never change
 * behind the kernel), and only the pieces not in their page are copied.
 */
static int make_copy(struct eng *e, struct inode *in, struct pass *p,
		     bool at_open)
{
	struct file *f = &in->file;
	struct copy_job *j, left = { 0 };
	uint64_t t0, t1;
	struct early *ea = NULL;
	uint64_t early = 0, placed = 0;
	uint32_t nplaced = 0;
	struct pass *sp = NULL;
	bool homed = false;
	int rc = 0;

	pass_lock(e);
	if (f->home)
		atomic_store_explicit(&f->home->home->sh.frozen, true,
				      memory_order_release);
	pass_unlock(e);
	j = job_new(e, in);
	if (!j)
		return -ENOMEM;
	t0 = rft_now_ns();
	pass_lock(e);
	if (f->home && atomic_load(&f->home->home->sh.frozen)) {
		sp = f->home;
		f->home = NULL;
		homed = true;
	} else {
		ea = early_take_locked(e, f);
	}
	if (homed || ea) {
		left.ids = malloc(((size_t)j->n + 1) * sizeof(*left.ids));
		left.fills = malloc(((size_t)j->n + 1) * sizeof(*left.fills));
		left.idx = malloc(((size_t)j->n + 1) * sizeof(*left.idx));
	}
	if ((homed || ea) && !(left.ids && left.fills && left.idx)) {
		rc = -ENOMEM;
	} else if (homed) {
		rc = home_left(e, sp->home, j, &left, &placed, &nplaced);
		/* Little left to copy: fast, readers may wait for it. */
		if (!rc && j->size - placed <= j->size / 4)
			p->over_pages = true;
	} else if (ea) {
		/* Its spare, and what it holds already. */
		sp = ea->sp;
		ea->sp = NULL;
		early = early_left(ea, j, &left);
		/* Little left to copy: fast, readers may wait for it. */
		if (j->size - early <= j->size / 4)
			p->over_pages = true;
	} else {
		bool none;

		sp = take_spare_locked(e, j->size, j->n, f->name_hash, &none);
		if (none) {
			pass_unlock(e);
			atomic_fetch_add(&e->pass->no_spare, 1);
			rft_dbg("passthrough: inode %" PRIu64 ": no copy: no "
				"spare of its name, no room for one", in->ino);
			job_free(e, j);
			return -ENOSPC;
		}
		/*
		 * An opener waits for its copy.  Into fresh memory a large
		 * one runs at about 1 GB/s on these guests, where a direct
		 * read runs at 6-10: the open goes direct, and the copier
		 * makes the copy in the background (pass_open).
		 */
		if (at_open && e->pass->copier_on && j->size > PASS_MAP_MIN &&
		    (!sp || sp->spare_size < j->size / 4 * 3)) {
			if (sp)
				spare_back_locked(e, sp);
			pass_unlock(e);
			job_free(e, j);
			return -EAGAIN;
		}
	}
	if (sp) {
		/* Its chunks stand for its pages: ours now. */
		p->fd = sp->fd;
		j->spare = sp->spare_size;
		p->held = sp->held;
		p->nheld = sp->nheld;
		p->home = sp->home;
		free(sp);
		/* Those its pieces gave back since, too. */
		if (p->home)
			home_collect_locked(e, p);
	}
	pass_unlock(e);
	if (sp) {
		/* Pieces in place count as their file's, not the copy's. */
		uint32_t want = j->n - nplaced;

		if (p->nheld > want)
			unhold_to(e, p, want);
		else if (!rc)
			rc = hold(e, p, want - p->nheld);
	} else {
		p->fd = openat(e->pass->mnt, ".", O_TMPFILE | O_RDWR | O_CLOEXEC,
			       0600);
		rc = p->fd < 0 ? -errno : hold(e, p, j->n);
	}
	if (!rc && (ea || homed))
		rc = copy_over(e, &left, p);
	else if (!rc)
		rc = sp ? copy_over(e, j, p) : copy_pieces(e, j, p->fd, 0, j->n);
	if (!rc && sp)
		rc = punch_gaps(e, j, p->fd);
	if (!rc && ftruncate(p->fd, (off_t)j->size) < 0)
		rc = -errno;
	if (!rc) {
		file_rdlock(f);
		if (f->version != j->version || f->size != j->size)
			rc = -ESTALE;
		file_unlock(f);
	}
	if (!rc) {
		p->version = j->version;
		/*
		 * Ready (kept, or the opener's to register) before it is
		 * counted: whoever waits for the count finds it so.
		 */
		pass_lock(e);
		p->state = at_open ? PASS_REGISTERING : PASS_KEPT;
		pthread_cond_broadcast(&e->pass->cond);
		pass_unlock(e);
		atomic_fetch_add(&e->pass->files, 1);
		atomic_fetch_add(&e->pass->bytes, j->size);
		if (sp)
			atomic_fetch_add(&e->pass->reused, 1);
		atomic_fetch_add(&e->pass->early_used, early);
		atomic_fetch_add(&e->pass->placed_used, placed);
	}
	t1 = rft_now_ns();
	rft_dbg("passthrough: inode %" PRIu64 ": %" PRIu64 " bytes copied "
		"in %.1f ms, over a spare of %" PRIu64 ", %" PRIu64
		" of them early, %" PRIu64 " written in place, %" PRIu64
		" mapped: %s",
		in->ino, j->size, (double)(t1 - t0) / 1e6, j->spare, early,
		placed, ea || homed ? left.mapped : j->mapped,
		rc < 0 ? strerror(-rc) : "done");
	if (ea) {
		pass_lock(e);
		early_free_locked(e, ea); /* its pins; its spare is @p's */
		pass_unlock(e);
	}
	free(left.ids);
	free(left.fills);
	free(left.idx);
	job_free(e, j);
	return rc;
}

#define DETACH_BATCH 2 /* pieces copied out per hold of the file's lock */

/*
 * Before anything but the engine writes or cuts @p's backing file (a
 * writer joining the pass writes it through the kernel; a truncate by path
 * cuts it), the pieces of @in that are its pages (in place) move to arena
 * chunks: copied with the file's lock held, a few at a time, and the old
 * chunks put.  Then the pins others hold on the old chunks (a reader's,
 * the write-back's) are waited for, with no lock held, so that the bytes
 * they read never change.  0, or -ENOSPC (no memory to copy to).  No lock
 * held; @in held.
 */
static int detach(struct eng *e, struct inode *in, struct pass *p)
{
	struct file *f = &in->file;
	struct store_home *sh;
	unsigned waited = 0;

	pass_lock(e);
	sh = f->pass == p && p->home ? &p->home->sh : NULL;
	pass_unlock(e);
	if (!sh)
		return 0;
	for (;;) {
		uint32_t ids[DETACH_BATCH], want = 0, got = 0, used = 0;

		file_rdlock(f);
		for (uint32_t i = 0; i < f->nslots && want < DETACH_BATCH; i++)
			want += slot_in_ram(&f->slots[i]) &&
				store_lent_home(&e->store,
						f->slots[i].chunk) == sh;
		file_unlock(f);
		if (!want)
			break;
		while (got < want && store_alloc(&e->store,
						 e->cfg.enospc_wait_ms,
						 &ids[got]) == 0)
			got++;
		if (!got)
			return -ENOSPC;
		while (!file_wrlock_drained(e, f))
			file_wait_writes(e, f);
		for (uint32_t i = 0; i < f->nslots && used < got; i++) {
			struct slot *s = &f->slots[i];

			if (!slot_in_ram(s) ||
			    store_lent_home(&e->store, s->chunk) != sh)
				continue;
			memcpy(store_ptr(&e->store, ids[used]),
			       store_ptr(&e->store, s->chunk), s->fill);
			store_put(&e->store, s->chunk);
			s->chunk = ids[used++];
		}
		file_unlock(f);
		while (used < got)
			store_put(&e->store, ids[used++]);
	}
	/* Still the file's pass (which keeps @sh): its old pins. */
	pass_lock(e);
	while (f->pass == p && p->home && store_home_live(&e->store, sh)) {
		pass_unlock(e);
		if (++waited == 5000)
			rft_info("passthrough: inode %" PRIu64 ": waiting for "
				 "the old pieces in its backing file to be "
				 "let go (a write-back reading them)",
				 in->ino);
		usleep(1000);
		pass_lock(e);
	}
	pass_unlock(e);
	return 0;
}

/* Do chunks point into @p's backing file?  pass.lock held. */
static bool home_live_locked(struct eng *e, struct pass *p)
{
	return p->home && store_home_live(&e->store, &p->home->sh);
}

void pass_open(struct eng *e, struct eng_file *fp, struct eng_open_info *info)
{
	struct inode *in = fp->inode;
	struct file *f = &in->file;
	struct pass *p;
	bool start;
	int rc;

	if (e->pass->mnt < 0 || e->gops || !S_ISREG(in->mode))
		return;
	if (!e->pass->copier_on)
		reap(e); /* nobody else frees retired passes */
	for (;;) {
		/* ns->lock keeps in->opens still while we look. */
		ns_rdlock(e);
		file_rdlock(f);
		pass_lock(e);
		p = f->pass;
		if (p && p->state == PASS_KEPT) {
			/*
			 * Bytes not taken yet (dirty) live only in a kept copy:
			 * every open goes to it.  Else the next lone reader of
			 * the same version takes it, with no copy.  Either way
			 * registered again.
			 */
			if (p->dirty ||
			    (!fp->writer && f->version == p->version &&
			     may_start(e, in, fp))) {
				p->state = PASS_REGISTERING;
				join_locked(e, p, fp, info);
				file_unlock(f);
				ns_unlock(e);
				pass_unlock(e);
				return;
			}
			if (fp->writer || f->version != p->version) {
				/* Stale, or about to be: a direct open now. */
				f->pass = NULL;
				pass_free_locked(e, p);
			}
			p = NULL; /* else other opens: direct, copy kept */
		}
		start = !p && may_start(e, in, fp);
		if (start)
			p = pass_new_locked(e, f);
		file_unlock(f);
		ns_unlock(e);
		if (p && !start && p->state == PASS_READY && fp->writer &&
		    home_live_locked(e, p)) {
			/* It will write the backing file: the engine's
			 * pieces out of it first. */
			pass_unlock(e);
			if (detach(e, in, p) < 0) {
				rft_info("passthrough: inode %" PRIu64 ": no "
					 "memory to move its pieces out of its "
					 "backing file for a writer: it opens "
					 "direct", in->ino);
				return;
			}
			continue;
		}
		if (!p || start || p->state == PASS_READY)
			break;
		/*
		 * A copy made at seal: a writer does not wait for it (direct,
		 * and the copy, stale, is then dropped), nor a reader unless
		 * it is written over pages the backing file has (copy_over):
		 * into fresh memory it ran at 1 GB/s here, and a direct read
		 * is faster; over pages at 13-21 GB/s, and waiting for it and
		 * reading at the backing file's speed beats a direct read.
		 */
		if (p->sealed_copy && p->state == PASS_COPYING &&
		    (fp->writer || !p->over_pages)) {
			p = NULL;
			break;
		}
		/* Another open is making it: wait, no other lock held. */
		while (f->pass == p && (p->state == PASS_COPYING ||
					p->state == PASS_REGISTERING))
			pthread_cond_wait(&e->pass->cond, &e->pass->lock);
		pass_unlock(e);
	}
	if (!p) {
		pass_unlock(e);
		return;
	}
	if (!start) {
		join_locked(e, p, fp, info);
		pass_unlock(e);
		/* O_TRUNC emptied the engine's file at the open: this too. */
		if (fp->writer && (fp->flags & O_TRUNC))
			pass_truncate(e, in, 0);
		return;
	}
	pass_unlock(e);

	rc = make_copy(e, in, p, true);
	pass_lock(e);
	if (rc < 0) {
		bool later;

		if (rc != -ESTALE && rc != -ENOSPC && rc != -EAGAIN)
			rft_info("passthrough: inode %" PRIu64
				 " opens direct: %s",
				 in->ino, strerror(-rc));
		abandon_locked(e, f, p);
		/* The copier's to make (if the copy at seal went). */
		later = rc == -EAGAIN && !seal_queued_locked(e, in);
		pass_unlock(e);
		if (later)
			queue_job(e, in, false);
		return;
	}
	/* make_copy made it PASS_REGISTERING: the others wait for us. */
	join_locked(e, p, fp, info);
	pass_unlock(e);
}

int eng_pass_registered(struct eng *e, struct eng_file *fp, int id)
{
	struct file *f = &fp->inode->file;
	struct pass *p;
	int use = 0;

	pass_lock(e);
	p = f->pass;
	if (!fp->pass || !p) {
		pass_unlock(e);
		return 0;
	}
	if (p->state == PASS_READY) {
		use = p->id;
	} else if (id > 0) {
		p->id = id;
		p->state = PASS_READY;
		use = id;
		pthread_cond_broadcast(&e->pass->cond);
	} else {
		/* Not registered: this open, the only one, goes direct. */
		fp->pass = false;
		atomic_fetch_sub(&e->pass->opens, 1);
		p->opens--;
		if (fp->writer)
			p->writers--;
		if (p->dirty) {
			rft_err("passthrough: inode %" PRIu64 ": its backing "
				"file could not be registered; bytes not taken "
				"yet stay there, this open goes direct",
				fp->inode->ino);
			p->state = PASS_KEPT;
			pthread_cond_broadcast(&e->pass->cond);
		} else {
			abandon_locked(e, f, p);
		}
	}
	pass_unlock(e);
	return use;
}

/* Bytes [@from, @to) of @fd, taken into the engine's file through @fp. */
static int take_range(struct eng *e, struct eng_file *fp, int fd, off_t from,
		      off_t to, uint8_t *buf, size_t bufsize)
{
	while (from < to) {
		size_t want = (size_t)(to - from) < bufsize
				      ? (size_t)(to - from)
				      : bufsize;
		ssize_t r = pread(fd, buf, want, from);
		ssize_t w;

		if (r < 0)
			return -errno;
		if (r == 0)
			break; /* truncated meanwhile: the next take sees it */
		w = file_write_at(e, fp, buf, (size_t)r, from);
		if (w < 0)
			return (int)w;
		from += r;
	}
	return 0;
}

/*
 * The engine's file becomes the backing file's bytes: emptied, then each
 * range of data written (holes stay holes), then sized.  No lock held.
 */
static int take_bytes(struct eng *e, struct eng_file *fp, int fd, off_t size)
{
	struct inode *in = fp->inode;
	struct file *f = &in->file;
	size_t bufsize = e->store.chunk_size;
	uint8_t *buf = malloc(bufsize);
	off_t at = 0;
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	while (!file_wrlock_drained(e, f))
		file_wait_writes(e, f);
	file_truncate_locked(e, f, 0);
	file_unlock(f);
	while (!rc && at < size) {
		off_t data = lseek(fd, at, SEEK_DATA), hole;

		if (data < 0) {
			if (errno != ENXIO)
				rc = -errno;
			break;
		}
		hole = lseek(fd, data, SEEK_HOLE);
		if (hole < 0) {
			rc = -errno;
			break;
		}
		if (hole > size)
			hole = size;
		rc = take_range(e, fp, fd, data, hole, buf, bufsize);
		at = hole;
	}
	free(buf);
	if (rc)
		return rc;
	/* A hole at the end: the size still counts. */
	while (!file_wrlock_drained(e, f))
		file_wait_writes(e, f);
	if (f->size < (uint64_t)size)
		rc = file_truncate_locked(e, f, (uint64_t)size);
	file_unlock(f);
	return rc;
}

int pass_take(struct eng *e, struct eng_file *fp)
{
	struct file *f = &fp->inode->file;
	struct pass *p;
	struct stat st;
	bool drop = false;
	uint64_t need, have;
	uint32_t held;
	int rc = 0;

	if (!fp->pass || !fp->writer)
		return 0;
	pass_lock(e);
	while ((p = f->pass) && (p->taking || f->pass_cuts))
		pthread_cond_wait(&e->pass->cond, &e->pass->lock);
	/*
	 * Taken every time: stores through a shared mapping of a tmpfs file
	 * change neither its size nor its times (found by pass_fuzz, seed
	 * 1529225774), so nothing short of the bytes tells whether they
	 * changed.
	 */
	if (!p || fstat(p->fd, &st) < 0) {
		pass_unlock(e);
		return 0;
	}
	p->taking = true;
	pass_unlock(e);

	/*
	 * The engine's copy is emptied first: see that the memory for the
	 * new one is there before (the chunks held for the backing file, the
	 * file's own, the free ones), so that a take short of memory fails
	 * with the engine's copy as it was.
	 */
	need = (uint64_t)(st.st_blocks * 512 + e->store.chunk_size - 1) >>
	       e->store.chunk_shift;
	file_rdlock(f);
	have = (uint64_t)p->nheld + f->resident + store_free_count(&e->store);
	file_unlock(f);
	if (need > have) {
		rc = -ENOSPC;
	} else {
		held = p->nheld;
		unhold(e, p);
		rc = take_bytes(e, fp, p->fd, st.st_size);
		/* The backing file's memory is counted again, where it can. */
		if (hold(e, p, held) < 0)
			rft_dbg("passthrough: inode %" PRIu64 ": %u of %u "
				"chunks held for its backing file",
				fp->inode->ino, p->nheld, held);
	}

	pass_lock(e);
	p->taking = false;
	p->dirty = rc < 0;
	if (rc == 0) {
		drop = p->holds_writer;
		p->holds_writer = false;
	}
	pthread_cond_broadcast(&e->pass->cond);
	pass_unlock(e);
	/* Taken at last: the writer the pass kept goes (and may seal). */
	if (drop)
		file_drop_writer(e, fp->inode);
	if (rc < 0)
		rft_err("passthrough: taking inode %" PRIu64
			"'s bytes from its backing file: %s (kept there, "
			"taken at its next close)",
			fp->inode->ino, strerror(-rc));
	return rc;
}

/* May @p be kept past its last RELEASE?  pass.lock held. */
static bool keepable(struct eng *e, struct file *f, struct pass *p)
{
	bool same;

	/* f->lock comes before pass.lock: a try, as a miss only costs a copy. */
	if (!file_tryrdlock(f))
		return false;
	same = f->version == p->version;
	file_unlock(f);
	return same;
}

int pass_release(struct eng *e, struct eng_file *fp, bool *keep_writer)
{
	struct file *f = &fp->inode->file;
	struct pass *p;
	int id = 0;

	if (!fp->pass)
		return 0;
	pass_take(e, fp);
	pass_lock(e);
	p = f->pass;
	if (p) {
		p->opens--;
		if (fp->writer)
			p->writers--;
		/* Not taken: the file must not seal short of these bytes. */
		if (fp->writer && p->dirty && !p->holds_writer) {
			p->holds_writer = true;
			*keep_writer = true;
		}
		if (p->state != PASS_READY && p->dirty) {
			/* Not registered (interrupted): kept for its bytes. */
			p->state = PASS_KEPT;
		} else if (p->state != PASS_READY) {
			/* Its open never got to register it (interrupted). */
			abandon_locked(e, f, p);
		} else if (p->opens == 0) {
			id = p->id;
			p->id = 0;
			p->state = PASS_KEPT;
			/* Kept only as the file is now, and not past a write. */
			if (!p->dirty && !keepable(e, f, p)) {
				f->pass = NULL;
				pass_free_locked(e, p);
			}
		}
	}
	fp->pass = false;
	pass_unlock(e);
	return id;
}

void pass_stat(struct eng *e, struct file *f, struct stat *st)
{
	struct stat bs;

	pass_lock(e);
	if (f->pass &&
	    ((f->pass->state == PASS_READY && f->pass->writers) ||
	     f->pass->dirty) &&
	    fstat(f->pass->fd, &bs) == 0) {
		st->st_size = bs.st_size;
		st->st_blocks = bs.st_blocks;
		st->st_mtim = bs.st_mtim;
		st->st_ctim = bs.st_ctim;
	}
	pass_unlock(e);
}

/* @f's backing file with a reference, or -1; pass.lock not held. */
static int backing_dup(struct eng *e, struct file *f)
{
	int fd = -1;

	pass_lock(e);
	if (f->pass && f->pass->fd >= 0)
		fd = fcntl(f->pass->fd, F_DUPFD_CLOEXEC, 0);
	pass_unlock(e);
	return fd;
}

void pass_truncate(struct eng *e, struct inode *in, uint64_t size)
{
	int fd = backing_dup(e, &in->file);

	if (fd < 0)
		return;
	if (ftruncate(fd, (off_t)size) < 0)
		rft_err("passthrough: truncating inode %" PRIu64
			"'s backing file: %s",
			in->ino, strerror(errno));
	close(fd);
}

struct inode *pass_cut_begin(struct eng *e, uint64_t ino)
{
	struct inode *in;
	struct file *f;

	ns_wrlock(e);
	in = ns_find(&e->ns, ino);
	if (in && S_ISREG(in->mode))
		in->holds++;
	else
		in = NULL; /* refused by the caller */
	ns_unlock(e);
	if (!in)
		return NULL;
	f = &in->file;
	pass_lock(e);
	for (;;) {
		struct pass *p;

		while (f->pass && f->pass->taking)
			pthread_cond_wait(&e->pass->cond, &e->pass->lock);
		p = f->pass;
		if (!p || !home_live_locked(e, p))
			break;
		/* The cut reaches the backing file: the pieces out first. */
		pass_unlock(e);
		if (detach(e, in, p) < 0) {
			struct timespec later;

			/* The memory comes back as others free it. */
			rft_deadline_ts(&later, e->cfg.enospc_wait_ms);
			store_wait_free(&e->store, DETACH_BATCH, &later);
		}
		pass_lock(e);
	}
	f->pass_cuts++;
	pass_unlock(e);
	return in;
}

void pass_cut_end(struct eng *e, struct inode *in)
{
	pass_lock(e);
	in->file.pass_cuts--;
	pthread_cond_broadcast(&e->pass->cond);
	pass_unlock(e);
	ns_unhold(e, in);
}

int pass_fallocate(struct eng *e, struct eng_file *fp, unsigned flags,
		   off_t off, off_t len)
{
	int mode = 0, fd = backing_dup(e, &fp->inode->file), rc = 0;

	if (fd < 0)
		return -EIO;
	if (flags & ENG_FALLOC_KEEP_SIZE)
		mode |= FALLOC_FL_KEEP_SIZE;
	if (flags & ENG_FALLOC_PUNCH_HOLE)
		mode |= FALLOC_FL_PUNCH_HOLE;
	if (fallocate(fd, mode, off, len) < 0)
		rc = -errno;
	close(fd);
	return rc;
}
