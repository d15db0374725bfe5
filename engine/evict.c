/*
 * evict.c - eviction: giving back the memory of file data that is safe
 * elsewhere, so that new checkpoints fit.
 *
 * Only clean pieces (same bytes as the persisted copy) of PERSISTED files
 * in checkpoints outside the newest --keep are evicted, oldest checkpoint
 * first; they become PIECE_PERSIST and are read through again on demand.
 * Files are taken with trywrlock: eviction never waits for a reader or a
 * writer (a writer may itself be waiting for eviction).  The group
 * (issue 8) adds pieces safe on peers as a second kind of "safe".
 */
#include <errno.h>
#include <stdatomic.h>

#include "engine_i.h"


struct evict {
	struct eng *e;
	uint32_t target;	/* free chunks to reach */
	uint32_t freed;		/* pieces evicted */
	uint64_t evictable; /* counting only */
	bool count_only;
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

static void evict_tree(struct evict *ev, struct inode *dir)
{
	for (struct dentry *de = dir->dir.first; de; de = de->next) {
		struct inode *in = de->inode;
		uint32_t n;
		bool tell;

		if (enough(ev))
			return;
		if (S_ISDIR(in->mode)) {
			evict_tree(ev, in);
			continue;
		}
		if (!S_ISREG(in->mode))
			continue;
		if (ev->count_only) {
			struct file *f = &in->file;

			pthread_rwlock_rdlock(&f->lock);
			if (f->copy != COPY_NONE && file_sealed(f) &&
			    file_data_persisted(f))
				for (uint32_t i = 0; i < f->nslots; i++)
					if (slot_in_ram(&f->slots[i]) &&
					    (f->slots[i].flags & SLOT_CLEAN))
						ev->evictable++;
			pthread_rwlock_unlock(&f->lock);
			continue;
		}
		/* Never wait on a file someone is reading or writing. */
		if (pthread_rwlock_trywrlock(&in->file.lock) != 0)
			continue;
		n = file_evict_locked(ev->e, &in->file);
		/* Parity (xor, rs) keeps its own pieces pinned until told. */
		tell = n && in->file.scheme && in->file.owner == ev->e->node;
		pthread_rwlock_unlock(&in->file.lock);
		ev->freed += n;
		if (tell) {
			struct eng_ev e = { .kind = EV_EVICTED, .in = in };

			eng_post(ev->e, &e);
		}
	}
}

/* Checkpoints outside the keep window, oldest first; ns->lock held. */
static void evict_walk(struct evict *ev)
{
	struct eng *e = ev->e;
	uint64_t done = 0;

	for (;;) {
		struct inode *next = NULL;

		for (struct dentry *de = e->ns.root->dir.first; de;
		     de = de->next) {
			struct inode *c = de->inode;

			if (S_ISDIR(c->mode) && c->ckpt_seq > done &&
			    (!next || c->ckpt_seq < next->ckpt_seq))
				next = c;
		}
		if (!next || ns_in_keep_window(e, next->ckpt_seq))
			return;
		evict_tree(ev, next);
		if (enough(ev))
			return;
		done = next->ckpt_seq;
	}
}

void evict_run(struct eng *e, bool pressure)
{
	uint32_t nfree = store_free_count(&e->store);
	uint32_t low = e->store.nchunks / 8, high = e->store.nchunks / 4;
	struct evict ev = { .e = e };

	if (!pressure && nfree >= low)
		return;
	/* Copies kept for passthrough are the cheapest memory to give. */
	pass_shed(e, high > nfree ? high - nfree : 1);
	nfree = store_free_count(&e->store);
	if (!pressure && nfree >= low)
		return;
	ev.target = high > nfree ? high : nfree + 1;
	pthread_rwlock_rdlock(&e->ns.lock);
	evict_walk(&ev);
	pthread_rwlock_unlock(&e->ns.lock);
	/*
	 * A piece written in place frees no chunk when evicted: its memory
	 * is its backing file's page, which the copy kept for readers holds.
	 * Those copies, their pieces just put back, are given up now.
	 */
	if (ev.freed && store_free_count(&e->store) < ev.target)
		pass_shed(e, ev.target - store_free_count(&e->store));
	if (ev.freed) {
		atomic_fetch_add(&e->cnt.evicted_chunks, ev.freed);
		rft_info("evicted %u persisted pieces", ev.freed);
	}
}

uint64_t evict_count(struct eng *e)
{
	struct evict ev = { .e = e, .count_only = true };

	pthread_rwlock_rdlock(&e->ns.lock);
	evict_walk(&ev);
	pthread_rwlock_unlock(&e->ns.lock);
	return ev.evictable;
}

void evict_pressure(void *ctx)
{
	evict_run(ctx, true);
}
