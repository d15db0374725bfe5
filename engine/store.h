/*
 * store.h - the chunk arena and the memory budget (store.c): chunks named
 * by index, small blocks, lent pages, the balancer.  Below everything in
 * the engine that keeps bytes; public to every layer of it, the group's
 * parity rows included.
 */
#ifndef RFT_STORE_H
#define RFT_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "engine.h"

#define RFT_NO_CHUNK UINT32_MAX

/*
 * Small blocks.  A piece of at most chunk_size / 2 bytes can live in a
 * block of a shared chunk (a slab): blocks of 4 KiB << cls, every block of
 * one slab of the same class, so a piece costs at most twice its bytes.
 * A block's id has STORE_SMALL set and names its first 4 KiB unit of the
 * arena; it is held, got and put like a chunk's.  A slab's chunk is in
 * use (refs 1) from its first block taken to its last one put back.
 */
#define STORE_SMALL (1u << 31)
#define STORE_UNIT_SHIFT 12
#define STORE_CLASSES (22 - STORE_UNIT_SHIFT) /* 4 KiB .. RFT_CHUNK_MAX/2 */

struct slab {
	struct slab *prev, *next; /* the class's slabs with free blocks */
	uint32_t chunk;
	uint8_t cls;		/* blocks of 4 KiB << cls */
	uint32_t nblocks, nfree;
	uint64_t *freemap;	/* bit set: block free */
	_Atomic uint32_t refs[]; /* per block; 0 = free */
};

/*
 * The arena: nchunks chunks of chunk_size bytes in one mapping.  Chunks are
 * named by index, never by pointer, so that the arena can later live in a
 * named shared-memory object and be re-attached at another address.
 */
/*
 * A home: the pages of a backing file that a large file's pieces are
 * written into in place (pass.c, "in place").  A chunk lent to one of its
 * pages (store_lend) reads and writes that page, not its arena memory, so
 * that what the engine writes, checksums, protects and writes back is
 * what passthrough later reads, with no copy.  The chunk was one held
 * cold for the backing file's memory: lent, it counts as used; its last
 * put gives it back to the home (cold again, on h->back), not to the free
 * stack, so the page's memory is counted once either way.
 */
struct store_home {
	uint8_t *map;	     /* the backing file, mapped shared */
	uint32_t pages;	     /* chunk-sized pages mapped */
	uint32_t live;	     /* chunks lent and not back; store lock */
	uint32_t *back;	     /* [pages]: chunks back, cold; store lock */
	uint32_t nback;	     /* store lock */
	uint32_t *page_id;   /* [pages]: the chunk lent there, or
				STORE_NO_PAGE; store lock */
	_Atomic bool frozen; /* sealed: a write copies a lent chunk first */
};

#define STORE_NO_PAGE UINT32_MAX

struct store_lent {
	struct store_home *home; /* NULL: the chunk is the arena's */
	uint32_t page;
};

struct store {
	uint8_t *base;
	uint64_t bytes;
	bool locked;		/* STORE_LOCK: pages locked as faulted */
	uint32_t chunk_size;
	unsigned chunk_shift;
	uint32_t nchunks;
	_Atomic uint32_t *refs; /* per chunk; 0 = free */

	pthread_mutex_t lock;
	pthread_cond_t freed;	/* signalled when chunks are freed */
	uint32_t *free_stack;	/* protected by lock */
	uint32_t nfree;		/* protected by lock */
	unsigned waiters;	/* protected by lock */

	/* Called (without store->lock) when an allocation finds no chunk. */
	void (*pressure)(void *ctx);
	void *pressure_ctx;

	/*
	 * Memory the arena holds: a chunk is "faulted" once handed out or
	 * faulted in ahead of use, until the balancer gives its pages back.
	 * The balancer keeps about target(ctx) bytes of free chunks faulted
	 * in for the next checkpoint and gives the rest of the free ones back.
	 */
	uint8_t *faulted;	  /* per chunk; protected by lock */
	uint32_t nfaulted;	  /* protected by lock */
	uint32_t nfaulted_free;	  /* free ones among them; lock */
	uint32_t ncold;		  /* taken by store_take_cold; lock */
	uint64_t (*target)(void *ctx); /* called with no store lock */
	void *target_ctx;
	pthread_t balancer;
	bool balancing;
	bool balance_stop;	  /* protected by lock */
	pthread_cond_t balance_wake; /* stop; protected by lock */
	_Atomic uint64_t trimmed; /* bytes given back since start */

	/* Chunks lent to a home's page (store_lend); per chunk, lock. */
	struct store_lent *lent;

	/* Small blocks: none when small_max is 0. */
	uint32_t small_max;	/* the largest piece a block holds */
	struct slab **slabs;	/* per chunk; NULL unless a slab */
	struct slab *partial[STORE_CLASSES]; /* protected by lock */
	uint32_t nslabs;	/* protected by lock */
};

/* store_init's flags. */
enum {
	STORE_PREFAULT = 1 << 0, /* fault the whole arena in now */
	STORE_LOCK = 1 << 1,	 /* lock its pages in RAM as they are faulted
				    (mlock2 MLOCK_ONFAULT): never swapped */
};

/*
 * An arena of @bytes in chunks of @chunk_size.  0, -EINVAL (sizes),
 * -ENOMEM, or with STORE_LOCK what mlock2 said (-ENOMEM past
 * RLIMIT_MEMLOCK without CAP_IPC_LOCK, -EPERM, -EAGAIN).
 */
int store_init(struct store *s, uint64_t bytes, uint32_t chunk_size,
	       unsigned flags);
void store_fini(struct store *s);
/*
 * Start the balancer, a low-priority thread that every STORE_BALANCE_MS
 * faults free chunks in up to s->target() bytes and gives free chunks'
 * memory back beyond that (with some slack).  Stopped by store_fini.
 */
int store_balance_start(struct store *s);
void store_balance_stop(struct store *s);
/* Bytes of the arena faulted in (in use or ready for use). */
uint64_t store_faulted_bytes(struct store *s);
/* Bytes of the locked arena in RAM (smaps' Locked) with STORE_LOCK, else 0. */
uint64_t store_locked_bytes(const struct store *s);
/*
 * Take a free chunk (refs = 1), waiting up to @wait_ms; -ENOSPC if none.
 * Sleeps: call it with no namespace or file lock held.
 */
int store_alloc(struct store *s, unsigned wait_ms, uint32_t *id);
/* Take a free chunk without waiting; -ENOSPC if none.  Any lock may be held. */
int store_try_alloc(struct store *s, uint32_t *id);
int store_try_alloc_len(struct store *s, uint32_t len, uint32_t *id);
/*
 * One round of eviction now (the pressure callback), for a caller that was
 * refused memory under a lock of its own and must not wait: what it frees
 * is there for the next try (a holder's row, asked again by its owner).
 * Hold no namespace, file or leaf lock.
 */
void store_make_room(struct store *s);
/*
 * Ask for eviction and wait until @want chunks are free (at least one, at
 * most the arena) or @deadline passes (-ENOSPC, also when it has passed
 * already).  Free chunks are not reserved: the caller retries its
 * store_try_alloc.  Sleeps: hold no namespace or file lock.
 */
int store_wait_free(struct store *s, uint32_t want,
		    const struct timespec *deadline);
/*
 * Take one more reference to a chunk or block held already; drop one (it is
 * free again when the last one goes).  Either on one that is free stops the
 * process (abort): its memory may be another owner's by then.
 */
/*
 * Up to @n free chunks (refs = 1) that stand for memory held elsewhere,
 * taken from the bottom of the free stack, where chunks without pages
 * wait, and their pages given back if they had any; returns how many.
 * store_put_cold gives such chunks back, without pages, to the bottom:
 * writers take them last (they would fault them in again), the next
 * store_take_cold first, so memory moves between the arena and what
 * holds chunks only when it must.  Any lock may be held.
 */
uint32_t store_take_cold(struct store *s, uint32_t *ids, uint32_t n);
void store_put_cold(struct store *s, const uint32_t *ids, uint32_t n);
void store_get(struct store *s, uint32_t id);
void store_put(struct store *s, uint32_t id);
uint32_t store_free_count(struct store *s);
/* Free chunks and those taken cold (statfs: memory held elsewhere for a
 * second copy of bytes the files hold, given up when wanted). */
uint32_t store_free_or_cold(struct store *s);

/* Chunks taken whole or as slabs, and the bytes small blocks hold. */
void store_usage(struct store *s, uint32_t *slabs, uint64_t *small_bytes);

/*
 * Homes.  store_home_init maps nothing: @map is the caller's, @pages long.
 * store_lend lends @id, a chunk taken cold (store_take_cold, refs 1), to
 * page @page of @h; a chunk is lent to one page at most, a page has one
 * chunk at most (the caller's rules).  store_home_collect takes up to
 * @max chunks back from their pages (cold, refs 1, the caller's again).
 * A home is freed (store_home_fini) only with nothing live and nothing
 * back.  Any lock may be held.
 */
int store_home_init(struct store_home *h, uint8_t *map, uint32_t pages);
void store_home_fini(struct store_home *h);
uint8_t *store_lend(struct store *s, struct store_home *h, uint32_t id,
		    uint32_t page);
uint32_t store_home_collect(struct store *s, struct store_home *h,
			    uint32_t *ids, uint32_t max);
uint32_t store_home_live(struct store *s, struct store_home *h);
/* Is page @page of @h lent to a chunk now? */
bool store_page_lent(struct store *s, struct store_home *h, uint32_t page);
/* The home @id is lent to, or NULL (a holder of a reference may ask). */
static inline struct store_home *store_lent_home(const struct store *s,
						 uint32_t id)
{
	return (id & STORE_SMALL) ? NULL : s->lent[id].home;
}

/* The arena's memory of chunk @id, wherever it points: for madvise. */
static inline uint8_t *store_arena_ptr(const struct store *s, uint32_t id)
{
	return s->base + ((uint64_t)id << s->chunk_shift);
}

/*
 * The bytes of chunk or block @id (a holder of a reference may ask): a
 * chunk lent to a home is its page there.  The lend happens before the
 * chunk is handed to anyone, and the loan ends at its last put.
 */
static inline uint8_t *store_ptr(const struct store *s, uint32_t id)
{
	const struct store_lent *l;

	if (id & STORE_SMALL)
		return s->base + ((uint64_t)(id & ~STORE_SMALL)
				  << STORE_UNIT_SHIFT);
	l = &s->lent[id];
	if (l->home)
		return l->home->map + ((uint64_t)l->page << s->chunk_shift);
	return store_arena_ptr(s, id);
}

/* Is @id lent to a frozen home: must a write copy it first? */
static inline bool store_frozen(const struct store *s, uint32_t id)
{
	const struct store_home *h;

	if (id & STORE_SMALL)
		return false;
	h = s->lent[id].home;
	return h && atomic_load_explicit(&h->frozen, memory_order_acquire);
}

/* The slab of small block @id, and the block's index in it. */
static inline struct slab *store_slab(const struct store *s, uint32_t id,
				      uint32_t *block)
{
	uint32_t unit = id & ~STORE_SMALL;
	unsigned sub = s->chunk_shift - STORE_UNIT_SHIFT;
	struct slab *sl = s->slabs[unit >> sub];

	*block = (unit & ((1u << sub) - 1)) >> sl->cls;
	return sl;
}

/* Bytes @id can hold (a holder of a reference may ask). */
static inline uint32_t store_cap(const struct store *s, uint32_t id)
{
	uint32_t b;

	if (!(id & STORE_SMALL))
		return s->chunk_size;
	return (uint32_t)1 << (STORE_UNIT_SHIFT + store_slab(s, id, &b)->cls);
}

static inline _Atomic uint32_t *store_refp(const struct store *s,
					   uint32_t id)
{
	uint32_t b;

	if (!(id & STORE_SMALL))
		return &s->refs[id];
	return &store_slab(s, id, &b)->refs[b];
}

static inline uint32_t store_refs(const struct store *s, uint32_t id)
{
	return atomic_load_explicit(store_refp(s, id), memory_order_acquire);
}

#endif
