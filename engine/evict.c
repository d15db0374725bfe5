/*
 * evict.c - eviction: giving back the memory of file data that is safe
 * elsewhere, so that new checkpoints fit and reads find room.
 *
 * Two kinds of pieces go, in this order:
 *
 *  1. Caches: the copies this node fetched or decoded of other nodes'
 *     sealed files (SLOT_FETCHED) while their bytes are still elsewhere
 *     (holders, parity rows, the persist dir), in any checkpoint, files at
 *     the root first, then checkpoints oldest first.  They go back to
 *     PIECE_PEER and are fetched again on demand.
 *  2. Clean pieces (same bytes as the persisted copy) of PERSISTED files
 *     in checkpoints outside the newest --keep, oldest checkpoint first;
 *     they become PIECE_PERSIST and are read through again on demand.
 *  3. With a spill dir (--spill, spill.c), and still short: sealed pieces
 *     of this node's files in checkpoints outside --keep, oldest first,
 *     written there; they become PIECE_SPILL.  In three steps, so that no
 *     lock is held across the disk: the walk picks them (their chunks
 *     pinned), spill_write writes them with no lock held, and each file
 *     (tried again) takes those that are still what was picked.
 *
 * A piece just read in (SLOT_FRESH) is skipped by one walk, which clears
 * the mark: a second chance, so its reader gets to it.  A run that someone
 * waits on (pressure) walks a second time when the first spared fresh
 * pieces and freed too little, so memory full of fresh pieces never makes
 * anyone wait for the persist worker's next run.
 *
 * Files are taken with trywrlock: eviction never waits for a reader or a
 * writer (a writer may itself be waiting for eviction).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "engine_i.h"
#include "evict.h"
#include "pass.h"
#include "spill.h"

/* Pieces a batch of the spill step takes at most, and its batches at most:
 * a bound on a waiting writer's wait. */
#define SPILL_BATCH 64
#define SPILL_ROUNDS 8

/*
 * What eviction remembers between runs (evict.c; its only writer): when a
 * run found nothing to evict and how many pieces core had loaded then
 * (runs for readers skip the walk until then, or until core loads
 * another: cnt.peer_chunks + cnt.readthrough_chunks), and what was evicted
 * since its last log line (one at most every EVICT_LOG_MS) and the count
 * of reads served uncached it last said.  Times in CLOCK_MONOTONIC ms.
 */
struct evictor {
	_Atomic uint64_t barren_until, barren_loads;
	_Atomic uint64_t log_next;
	/* Held by the one run that spills (tried: others go on without
	 * spilling, and wait for what it frees). */
	pthread_mutex_t spilling;
	_Atomic uint32_t log_cached, log_persisted, log_spilled;
	_Atomic uint64_t log_uncached;
};

int evict_new(struct eng *e)
{
	e->evictor = calloc(1, sizeof(*e->evictor));
	if (!e->evictor)
		return -ENOMEM;
	pthread_mutex_init(&e->evictor->spilling, NULL);
	return 0;
}

void evict_free(struct eng *e)
{
	if (e->evictor)
		pthread_mutex_destroy(&e->evictor->spilling);
	free(e->evictor);
	e->evictor = NULL;
}

/*
 * A run that found nothing: runs for readers skip the walk this long, or
 * until a load brings in a piece (evict_news).
 */
#define EVICT_BARREN_MS 50
/* One log line at most this often, with what happened since the last. */
#define EVICT_LOG_MS 10000

/* A piece picked for the spill dir, and whose file it is. */
struct spill_one {
	uint64_t ino, file_id;
	struct spill_pick p;
};

struct evict {
	struct eng *e;
	uint32_t target;	/* free chunks to reach */
	uint32_t cached;	/* fetched copies evicted */
	uint32_t persisted;	/* persisted pieces evicted */
	uint32_t spilled;	/* pieces written to the spill dir */
	uint32_t spared;	/* fresh pieces skipped by this walk */
	uint32_t busy;		/* files skipped: locked by someone */
	uint64_t evictable;	/* counting only */
	bool count_only;
	bool caches;		/* this walk: fetched copies, else persisted */
	/* The spill walk: pieces picked, their chunks pinned. */
	struct spill_one *picks;
	uint32_t npicks, want;
};

/*
 * Free chunks are what writers wait for, and a small piece evicted frees a
 * block, not a chunk, until its slab empties: count the store's, not ours.
 */
static bool enough(struct evict *ev)
{
	if (ev->picks)
		return ev->npicks >= ev->want;
	return !ev->count_only &&
	       store_free_count(&ev->e->store) >= ev->target;
}

/* One file, by this walk's kind; ns->lock held (read). */
static void evict_file(struct evict *ev, struct inode *in)
{
	struct eng *e = ev->e;
	struct file *f = &in->file;
	uint32_t n;
	bool tell;

	if (ev->count_only) {
		file_rdlock(f);
		ev->evictable += file_evictable_locked(e, f, ev->caches);
		file_unlock(f);
		return;
	}
	/* Never wait on a file someone is reading or writing. */
	if (!file_trywrlock(f)) {
		ev->busy++;
		return;
	}
	if (ev->picks) {
		struct spill_pick v[SPILL_BATCH];

		n = file_spill_pick_locked(e, f, v, ev->want - ev->npicks,
					   &ev->spared);
		for (uint32_t i = 0; i < n; i++)
			ev->picks[ev->npicks++] =
				(struct spill_one){ in->ino, f->id, v[i] };
		file_unlock(f);
		return;
	}
	if (ev->caches) {
		n = file_evict_cache_locked(e, f, &ev->spared);
		ev->cached += n;
		tell = false; /* another node's file: no rows of ours */
	} else {
		n = file_evict_locked(e, f, &ev->spared);
		ev->persisted += n;
		/* Parity (xor, rs) keeps its own pieces pinned until told. */
		tell = n && f->scheme && f->owner == e->node;
	}
	file_unlock(f);
	if (tell) {
		struct eng_ev x = { .kind = EV_EVICTED, .in = in };

		eng_post(e, &x);
	}
}

static void evict_tree(struct evict *ev, struct inode *dir)
{
	for (struct dentry *de = dir->dir.first; de; de = de->next) {
		struct inode *in = de->inode;

		if (enough(ev))
			return;
		if (S_ISDIR(in->mode))
			evict_tree(ev, in);
		else if (S_ISREG(in->mode))
			evict_file(ev, in);
	}
}

/*
 * One walk of this kind: for caches, the files at the root (they belong
 * to no checkpoint) and then every checkpoint; for persisted pieces, the
 * checkpoints outside the keep window.  Oldest checkpoint first: a
 * restore reads the newest, and older ones are read again least.
 * ns->lock held (read).
 */
static void evict_walk(struct evict *ev)
{
	struct eng *e = ev->e;
	uint64_t done = 0;

	if (ev->caches && !ev->picks)
		for (struct dentry *de = e->ns.root->dir.first;
		     de && !enough(ev); de = de->next)
			if (S_ISREG(de->inode->mode))
				evict_file(ev, de->inode);
	for (;;) {
		struct inode *next = NULL;

		for (struct dentry *de = e->ns.root->dir.first; de;
		     de = de->next) {
			struct inode *c = de->inode;

			if (S_ISDIR(c->mode) && c->ckpt_seq > done &&
			    (!next || c->ckpt_seq < next->ckpt_seq))
				next = c;
		}
		if (!next || enough(ev))
			return;
		if ((!ev->caches || ev->picks) &&
		    ns_in_keep_window(e, next->ckpt_seq))
			return;
		evict_tree(ev, next);
		done = next->ckpt_seq;
	}
}

/*
 * The third kind (above), one batch: pick up to SPILL_BATCH pieces
 * (ns->lock taken here), write them with no lock held, and let each file
 * take those that are still what was picked.  Returns the pieces that
 * became PIECE_SPILL (counted in ev->spilled too).  No lock held.
 */
static uint32_t spill_batch(struct evict *ev)
{
	struct eng *e = ev->e;
	struct spill_one picks[SPILL_BATCH];
	uint32_t nfree = store_free_count(&e->store), need, before;

	if (nfree >= ev->target || !spill_room(e, e->store.chunk_size))
		return 0;
	need = ev->target - nfree;
	before = ev->spilled;
	ev->picks = picks;
	ev->npicks = 0;
	ev->want = need < SPILL_BATCH ? need : SPILL_BATCH;
	ns_rdlock(e);
	evict_walk(ev);
	ns_unlock(e);
	ev->picks = NULL;
	for (uint32_t i = 0, j; i < ev->npicks; i = j) {
		struct spill_pick v[SPILL_BATCH];
		struct inode *in;
		int n;

		for (j = i; j < ev->npicks && picks[j].ino == picks[i].ino; j++)
			v[j - i] = picks[j].p;
		n = spill_write(e, picks[i].file_id, v, j - i);
		ns_rdlock(e);
		in = ns_find(&e->ns, picks[i].ino);
		if (!in || !S_ISREG(in->mode) ||
		    in->file.id != picks[i].file_id) {
			spill_forget(e, picks[i].file_id); /* freed meanwhile */
		} else if (n > 0 && file_trywrlock(&in->file)) {
			for (int k = 0; k < n; k++)
				ev->spilled +=
					file_spilled_locked(e, &in->file, &v[k]);
			file_unlock(&in->file);
		}
		ns_unlock(e);
	}
	for (uint32_t i = 0; i < ev->npicks; i++)
		store_put(&e->store, picks[i].p.chunk);
	return ev->spilled - before;
}

/*
 * Batches until enough chunks are free: small pieces share chunks, so a
 * batch may free fewer chunks than pieces.  At most SPILL_ROUNDS, each
 * of which must take something.
 */
static void spill_step(struct evict *ev)
{
	struct evictor *v = ev->e->evictor;

	/* Another run spills: its frees wake the waiters (and this run
	 * found something busy, not nothing: no barren mark). */
	if (pthread_mutex_trylock(&v->spilling) != 0) {
		ev->busy++;
		return;
	}
	for (int r = 0; r < SPILL_ROUNDS && !enough(ev); r++)
		if (!spill_batch(ev))
			break;
	pthread_mutex_unlock(&v->spilling);
}

/* Caches, then persisted pieces if still short; ns->lock held (read). */
static void evict_both(struct evict *ev)
{
	ev->caches = true;
	evict_walk(ev);
	if (ev->count_only || !enough(ev)) {
		ev->caches = false;
		evict_walk(ev);
	}
}

/*
 * At most one line every EVICT_LOG_MS, with what was evicted and what was
 * served uncached since the last one: a reader under memory pressure may
 * evict for every piece it reads.
 */
static void evict_log(struct eng *e)
{
	struct evictor *v = e->evictor;
	uint64_t now = rft_now_ms(), next = atomic_load(&v->log_next);
	uint64_t uncached = atomic_load(&e->cnt.reads_uncached);
	uint32_t c, p, sp, u;

	if (now < next ||
	    !atomic_compare_exchange_strong(&v->log_next, &next,
					    now + EVICT_LOG_MS))
		return;
	c = atomic_exchange(&v->log_cached, 0);
	p = atomic_exchange(&v->log_persisted, 0);
	sp = atomic_exchange(&v->log_spilled, 0);
	u = (uint32_t)(uncached - atomic_exchange(&v->log_uncached, uncached));
	if (c || p || sp)
		rft_info("evicted %u fetched copies and %u persisted pieces; "
			 "%u pieces written to the spill dir", c, p, sp);
	if (u)
		rft_warn("memory full of what may not be evicted: %u reads "
			 "served without keeping their copy (%u of %u chunks "
			 "free)",
			 u, store_free_count(&e->store), e->store.nchunks);
}

/* Pieces core brought in (from peers or the persist dir) since start. */
static uint64_t loads(struct eng *e)
{
	return atomic_load(&e->cnt.peer_chunks) +
	       atomic_load(&e->cnt.readthrough_chunks);
}

void evict_run(struct eng *e, bool pressure)
{
	uint32_t nfree = store_free_count(&e->store);
	uint32_t low = e->store.nchunks / 8, high = e->store.nchunks / 4;
	struct evict ev = { .e = e };
	uint64_t before;
	uint32_t freed;

	if (!pressure && nfree >= low)
		return;
	/* Copies kept for passthrough are the cheapest memory to give. */
	pass_shed(e, high > nfree ? high - nfree : 1);
	nfree = store_free_count(&e->store);
	if (!pressure && nfree >= low)
		return;
	/*
	 * A walk locks every file: readers that find memory full call here
	 * for each piece, and while nothing is evictable they go without.
	 */
	if (pressure && rft_now_ms() < atomic_load(&e->evictor->barren_until) &&
	    loads(e) == atomic_load(&e->evictor->barren_loads)) {
		evict_log(e);
		return;
	}
	ev.target = high > nfree ? high : nfree + 1;
	before = loads(e);
	ns_rdlock(e);
	evict_both(&ev);
	/* The second chance, taken at once for whoever waits. */
	if (pressure && ev.spared && !enough(&ev)) {
		ev.spared = 0;
		evict_both(&ev);
	}
	ns_unlock(e);
	if (e->spill && !enough(&ev))
		spill_step(&ev);
	freed = ev.cached + ev.persisted + ev.spilled;
	if (pressure && !freed && !ev.spared && !ev.busy) {
		atomic_store(&e->evictor->barren_loads, before);
		atomic_store(&e->evictor->barren_until,
			     rft_now_ms() + EVICT_BARREN_MS);
	}
	/*
	 * A piece written in place frees no chunk when evicted: its memory
	 * is its backing file's page, which the copy kept for readers holds.
	 * Those copies, their pieces just put back, are given up now.
	 */
	if ((ev.persisted || ev.spilled) &&
	    store_free_count(&e->store) < ev.target)
		pass_shed(e, ev.target - store_free_count(&e->store));
	if (freed) {
		atomic_fetch_add(&e->cnt.evicted_chunks, freed);
		atomic_fetch_add(&e->evictor->log_cached, ev.cached);
		atomic_fetch_add(&e->evictor->log_persisted, ev.persisted);
		atomic_fetch_add(&e->evictor->log_spilled, ev.spilled);
	}
	if (freed || pressure)
		evict_log(e);
}

uint64_t evict_count(struct eng *e)
{
	struct evict ev = { .e = e, .count_only = true };

	ns_rdlock(e);
	evict_both(&ev);
	ns_unlock(e);
	return ev.evictable;
}

void evict_pressure(void *ctx)
{
	evict_run(ctx, true);
}
