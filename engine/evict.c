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
	_Atomic uint32_t log_cached, log_persisted;
	_Atomic uint64_t log_uncached;
};

int evict_new(struct eng *e)
{
	e->evictor = calloc(1, sizeof(*e->evictor));
	return e->evictor ? 0 : -ENOMEM;
}

void evict_free(struct eng *e)
{
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

struct evict {
	struct eng *e;
	uint32_t target;	/* free chunks to reach */
	uint32_t cached;	/* fetched copies evicted */
	uint32_t persisted;	/* persisted pieces evicted */
	uint32_t spared;	/* fresh pieces skipped by this walk */
	uint32_t busy;		/* files skipped: locked by someone */
	uint64_t evictable;	/* counting only */
	bool count_only;
	bool caches;		/* this walk: fetched copies, else persisted */
};

/*
 * Free chunks are what writers wait for, and a small piece evicted frees a
 * block, not a chunk, until its slab empties: count the store's, not ours.
 */
static bool enough(struct evict *ev)
{
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

	if (ev->caches)
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
		if (!ev->caches && ns_in_keep_window(e, next->ckpt_seq))
			return;
		evict_tree(ev, next);
		done = next->ckpt_seq;
	}
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
	uint32_t c, p, u;

	if (now < next ||
	    !atomic_compare_exchange_strong(&v->log_next, &next,
					    now + EVICT_LOG_MS))
		return;
	c = atomic_exchange(&v->log_cached, 0);
	p = atomic_exchange(&v->log_persisted, 0);
	u = (uint32_t)(uncached - atomic_exchange(&v->log_uncached, uncached));
	if (c || p)
		rft_info("evicted %u fetched copies and %u persisted pieces",
			 c, p);
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
	freed = ev.cached + ev.persisted;
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
	if (ev.persisted && store_free_count(&e->store) < ev.target)
		pass_shed(e, ev.target - store_free_count(&e->store));
	if (freed) {
		atomic_fetch_add(&e->cnt.evicted_chunks, freed);
		atomic_fetch_add(&e->evictor->log_cached, ev.cached);
		atomic_fetch_add(&e->evictor->log_persisted, ev.persisted);
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
