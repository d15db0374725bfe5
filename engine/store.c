/*
 * store.c - the chunk arena and the memory budget.
 *
 * One anonymous mapping of the whole budget, advised to use transparent
 * huge pages: copying into never-touched 4 KiB pages runs at a third of the
 * speed of huge pages (../docs/benchmarks.md).  Free chunks sit on a LIFO
 * stack, so the chunks reused first are the ones already faulted in.
 *
 * With STORE_LOCK (--lock-memory) the mapping is locked on fault
 * (mlock2 MLOCK_ONFAULT): each page is locked in RAM when first touched,
 * so checkpoints never go to swap, and a budget larger than what is used
 * costs only what is used.  Pages given back are unlocked for the
 * MADV_DONTNEED and locked again, on fault.
 *
 * Small pieces (a 4 KiB file, the tail of a checkpoint's metadata) take a
 * block of a slab rather than a whole chunk: per class (4 KiB << cls) a
 * list of slabs with free blocks; a slab's chunk goes back to the stack
 * when its last block is put.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core_i.h"

_Static_assert((1u << (STORE_UNIT_SHIFT + STORE_CLASSES)) == RFT_CHUNK_MAX,
	       "a class for every block up to half the largest chunk");

int store_init(struct store *s, uint64_t bytes, uint32_t chunk_size,
	       unsigned flags)
{
	uint64_t n;
	int rc;

	memset(s, 0, sizeof(*s));
	if (chunk_size < RFT_CHUNK_MIN || chunk_size > RFT_CHUNK_MAX ||
	    (chunk_size & (chunk_size - 1)))
		return -EINVAL;
	n = bytes / chunk_size;
	if (n == 0 || n >= UINT32_MAX)
		return -EINVAL;

	s->chunk_size = chunk_size;
	s->chunk_shift = (unsigned)__builtin_ctz(chunk_size);
	s->nchunks = (uint32_t)n;
	s->bytes = n * chunk_size;

	s->base = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (s->base == MAP_FAILED) {
		rc = -errno;
		s->base = NULL;
		return rc;
	}
	/*
	 * Locked as it is faulted in: what the arena holds never goes to
	 * swap, and what it has not touched costs nothing.  The kernel
	 * counts the whole range against RLIMIT_MEMLOCK at once.
	 */
	if ((flags & STORE_LOCK) &&
	    mlock2(s->base, s->bytes, MLOCK_ONFAULT) < 0) {
		rc = -errno;
		goto fail;
	}
	s->locked = flags & STORE_LOCK;
	/* Best effort: without THP the arena still works, only slower. */
	if (madvise(s->base, s->bytes, MADV_HUGEPAGE) < 0)
		rft_info("no transparent huge pages for the arena: %s",
			 strerror(errno));

	s->refs = calloc(n, sizeof(*s->refs));
	s->free_stack = malloc(n * sizeof(*s->free_stack));
	s->faulted = calloc(n, 1);
	s->slabs = calloc(n, sizeof(*s->slabs));
	s->lent = calloc(n, sizeof(*s->lent));
	if (!s->refs || !s->free_stack || !s->faulted || !s->slabs ||
	    !s->lent) {
		rc = -ENOMEM;
		goto fail;
	}
	/* Low indices on top: first use fills the arena from its start. */
	for (uint32_t i = 0; i < n; i++)
		s->free_stack[i] = (uint32_t)(n - 1 - i);
	s->nfree = (uint32_t)n;
	/* A block id names a 4 KiB unit in 31 bits: arenas up to 8 TiB. */
	if ((n << (s->chunk_shift - STORE_UNIT_SHIFT)) < STORE_SMALL)
		s->small_max = chunk_size / 2;
	if (flags & STORE_PREFAULT) {
		if (madvise(s->base, s->bytes, MADV_POPULATE_WRITE) < 0) {
			rft_warn("prefault of %llu bytes failed: %s",
				 (unsigned long long)s->bytes, strerror(errno));
		} else {
			memset(s->faulted, 1, n);
			s->nfaulted = s->nfaulted_free = (uint32_t)n;
		}
	}

	pthread_mutex_init(&s->lock, NULL);
	rft_cond_init(&s->freed);
	rft_cond_init(&s->balance_wake);
	return 0;

fail:
	free((void *)s->refs);
	free(s->free_stack);
	free(s->faulted);
	free(s->slabs);
	free(s->lent);
	munmap(s->base, s->bytes);
	memset(s, 0, sizeof(*s));
	return rc;
}

#define BALANCE_MS 500
#define BALANCE_STEP (64ULL << 20) /* bytes per step, either way */

uint64_t store_faulted_bytes(struct store *s)
{
	uint64_t n;

	store_lock(s);
	n = s->nfaulted;
	store_unlock(s);
	return n << s->chunk_shift;
}

uint64_t store_locked_bytes(const struct store *s)
{
	char line[128];
	unsigned long long kib = 0;
	FILE *f;

	/*
	 * Not VmLck: that counts the whole locked range, touched or not.
	 * smaps' Locked is what is in RAM of it.
	 */
	if (!s->locked || !(f = fopen("/proc/self/smaps_rollup", "re")))
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Locked: %llu kB", &kib) == 1)
			break;
	fclose(f);
	return (uint64_t)kib << 10;
}

/*
 * Give back the pages of free chunk @id.  The kernel refuses
 * MADV_DONTNEED on locked pages: a locked arena unlocks the chunk first
 * and locks it again, on fault, after.
 */
static void drop_pages(struct store *s, uint32_t id)
{
	uint8_t *p = store_arena_ptr(s, id);

	/* The system call itself: the sanitizers make munlock() a no-op. */
	if (s->locked)
		syscall(SYS_munlock, p, s->chunk_size);
	madvise(p, s->chunk_size, MADV_DONTNEED);
	if (s->locked && mlock2(p, s->chunk_size, MLOCK_ONFAULT) < 0)
		rft_warn("store: chunk %#x is no longer locked in RAM: %s", id,
			 strerror(errno));
}

/* Fault in up to @max free chunks, those handed out next first. */
static uint32_t fault_in(struct store *s, uint32_t max)
{
	uint32_t *ids = malloc(max * sizeof(*ids)), n = 0;

	if (!ids)
		return 0;
	store_lock(s);
	for (uint32_t i = s->nfree; i-- > 0 && n < max;) {
		uint32_t id = s->free_stack[i];

		if (!s->faulted[id]) {
			s->faulted[id] = 1;
			s->nfaulted++;
			s->nfaulted_free++;
			ids[n++] = id;
		}
	}
	store_unlock(s);
	/*
	 * No lock: a writer may take one of these meanwhile, which is fine:
	 * populating writes nothing, it only faults pages in.
	 */
	for (uint32_t i = 0; i < n; i++)
		if (madvise(store_arena_ptr(s, ids[i]), s->chunk_size,
			    MADV_POPULATE_WRITE) < 0) {
			rft_info("prefault stopped: %s", strerror(errno));
			break;
		}
	free(ids);
	return n;
}

/*
 * Give back the memory of up to @max free chunks, coldest first (the
 * bottom of the stack).  They leave the stack while their pages go, so no
 * writer can take one in the middle, and come back at the bottom.
 */
static uint32_t give_back(struct store *s, uint32_t max)
{
	uint32_t *ids = malloc(max * sizeof(*ids)), n = 0, k = 0;

	if (!ids)
		return 0;
	store_lock(s);
	for (uint32_t i = 0; i < s->nfree; i++) {
		uint32_t id = s->free_stack[i];

		if (s->faulted[id] && n < max)
			ids[n++] = id;
		else
			s->free_stack[k++] = id;
	}
	s->nfree = k;
	store_unlock(s);
	for (uint32_t i = 0; i < n; i++)
		drop_pages(s, ids[i]);
	store_lock(s);
	memmove(s->free_stack + n, s->free_stack,
		(size_t)s->nfree * sizeof(*s->free_stack));
	for (uint32_t i = 0; i < n; i++) {
		s->faulted[ids[i]] = 0;
		s->free_stack[i] = ids[i];
	}
	s->nfree += n;
	s->nfaulted -= n;
	s->nfaulted_free -= n;
	if (s->waiters)
		pthread_cond_broadcast(&s->freed);
	store_unlock(s);
	free(ids);
	atomic_fetch_add(&s->trimmed, (uint64_t)n << s->chunk_shift);
	return n;
}

int64_t store_balance(struct store *s)
{
	uint64_t want = s->target ? s->target(s->target_ctx) : 0;
	uint32_t target, slack, have, step;

	step = (uint32_t)(BALANCE_STEP >> s->chunk_shift);
	target = want >> s->chunk_shift > s->nchunks
			 ? s->nchunks
			 : (uint32_t)(want >> s->chunk_shift);
	/* Hysteresis: a checkpoint's size wobbles; do not chase it. */
	slack = target / 8 > step ? target / 8 : step;
	store_lock(s);
	have = s->nfaulted_free;
	store_unlock(s);
	if (have < target)
		return (int64_t)fault_in(s, target - have < step ? target - have
								 : step)
		       << s->chunk_shift;
	if (have > target + slack)
		return -((int64_t)give_back(s, have - target - slack < step
						       ? have - target - slack
						       : step)
			 << s->chunk_shift);
	return 0;
}

static void *balance_main(void *arg)
{
	struct store *s = arg;
	struct timespec ts;
	sigset_t sigs;

	sigfillset(&sigs);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	/* Let writers and the FUSE threads go first. */
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
	store_lock(s);
	while (!s->balance_stop) {
		int64_t moved;

		store_unlock(s);
		moved = store_balance(s);
		store_lock(s);
		if (moved != 0)
			continue; /* more to do: go on at once */
		rft_deadline_ts(&ts, BALANCE_MS);
		pthread_cond_timedwait(&s->balance_wake, &s->lock, &ts);
	}
	store_unlock(s);
	return NULL;
}

int store_balance_start(struct store *s)
{
	int rc;

	s->balance_stop = false;
	rc = -pthread_create(&s->balancer, NULL, balance_main, s);
	s->balancing = rc == 0;
	return rc;
}

void store_balance_stop(struct store *s)
{
	if (!s->balancing)
		return;
	store_lock(s);
	s->balance_stop = true;
	pthread_cond_signal(&s->balance_wake);
	store_unlock(s);
	pthread_join(s->balancer, NULL);
	s->balancing = false;
}

void store_fini(struct store *s)
{
	if (!s->base)
		return;
	store_balance_stop(s);
	pthread_cond_destroy(&s->balance_wake);
	pthread_cond_destroy(&s->freed);
	pthread_mutex_destroy(&s->lock);
	free((void *)s->refs);
	free(s->free_stack);
	free(s->faulted);
	for (uint32_t i = 0; i < s->nchunks; i++)
		free(s->slabs[i]);
	free(s->slabs);
	free(s->lent);
	munmap(s->base, s->bytes);
	memset(s, 0, sizeof(*s));
}

static bool pop_locked(struct store *s, uint32_t *id)
{
	if (s->nfree == 0)
		return false;
	*id = s->free_stack[--s->nfree];
	atomic_store_explicit(&s->refs[*id], 1, memory_order_release);
	if (s->faulted[*id]) {
		s->nfaulted_free--;
	} else {
		s->faulted[*id] = 1; /* its writer faults it in */
		s->nfaulted++;
	}
	return true;
}

int store_try_alloc(struct store *s, uint32_t *id)
{
	bool ok;

	store_lock(s);
	ok = pop_locked(s, id);
	store_unlock(s);
	return ok ? 0 : -ENOSPC;
}

/* Chunk @id (refs 0) back on the free stack; s->lock held. */
static void push_free_locked(struct store *s, uint32_t id)
{
	s->free_stack[s->nfree++] = id;
	if (s->faulted[id])
		s->nfaulted_free++;
	if (s->waiters)
		pthread_cond_broadcast(&s->freed);
}

/* The class of a block for @len bytes: the smallest 4 KiB << cls >= len. */
static unsigned small_class(uint32_t len)
{
	unsigned cls = 0;

	while (((uint32_t)1 << (STORE_UNIT_SHIFT + cls)) < len)
		cls++;
	return cls;
}

static void partial_unlink(struct store *s, struct slab *sl)
{
	if (sl->prev)
		sl->prev->next = sl->next;
	else
		s->partial[sl->cls] = sl->next;
	if (sl->next)
		sl->next->prev = sl->prev;
	sl->prev = sl->next = NULL;
}

static void partial_push(struct store *s, struct slab *sl)
{
	sl->prev = NULL;
	sl->next = s->partial[sl->cls];
	if (sl->next)
		sl->next->prev = sl;
	s->partial[sl->cls] = sl;
}

/* A new slab of class @cls on a free chunk; s->lock held. */
static struct slab *slab_new_locked(struct store *s, unsigned cls)
{
	uint32_t nblocks = s->chunk_size >> (STORE_UNIT_SHIFT + cls);
	size_t words = (nblocks + 63) / 64;
	struct slab *sl;
	uint32_t chunk;

	if (s->nfree == 0)
		return NULL;
	sl = calloc(1, sizeof(*sl) + nblocks * sizeof(sl->refs[0]) +
			       words * sizeof(uint64_t));
	if (!sl)
		return NULL;
	pop_locked(s, &chunk);
	sl->chunk = chunk;
	sl->cls = (uint8_t)cls;
	sl->nblocks = sl->nfree = nblocks;
	sl->freemap = (uint64_t *)(void *)&sl->refs[nblocks];
	for (uint32_t b = 0; b < nblocks; b++)
		sl->freemap[b / 64] |= 1ULL << (b % 64);
	s->slabs[chunk] = sl;
	s->nslabs++;
	partial_push(s, sl);
	return sl;
}

int store_try_alloc_len(struct store *s, uint32_t len, uint32_t *id)
{
	unsigned cls, sub = s->chunk_shift - STORE_UNIT_SHIFT;
	struct slab *sl;
	uint32_t b = 0;

	if (len > s->small_max)
		return store_try_alloc(s, id);
	cls = small_class(len);
	store_lock(s);
	sl = s->partial[cls];
	if (!sl && !(sl = slab_new_locked(s, cls))) {
		store_unlock(s);
		return -ENOSPC;
	}
	while (!sl->freemap[b / 64])
		b += 64;
	b += (uint32_t)__builtin_ctzll(sl->freemap[b / 64]);
	sl->freemap[b / 64] &= ~(1ULL << (b % 64));
	atomic_store_explicit(&sl->refs[b], 1, memory_order_release);
	if (--sl->nfree == 0)
		partial_unlink(s, sl);
	store_unlock(s);
	*id = STORE_SMALL | (sl->chunk << sub) | (b << cls);
	return 0;
}

/* The last reference to small block @id went; s->lock taken here. */
static void small_free(struct store *s, uint32_t id)
{
	uint32_t b;
	struct slab *sl = store_slab(s, id, &b);

	store_lock(s);
	sl->freemap[b / 64] |= 1ULL << (b % 64);
	if (sl->nfree++ == 0)
		partial_push(s, sl);
	if (sl->nfree == sl->nblocks) {
		/* Empty: its chunk goes back to the stack. */
		partial_unlink(s, sl);
		s->slabs[sl->chunk] = NULL;
		s->nslabs--;
		atomic_store_explicit(&s->refs[sl->chunk], 0,
				      memory_order_release);
		push_free_locked(s, sl->chunk);
		free(sl);
	}
	store_unlock(s);
}

void store_usage(struct store *s, uint32_t *slabs, uint64_t *small_bytes)
{
	uint64_t free_bytes = 0;

	store_lock(s);
	*slabs = s->nslabs;
	for (unsigned c = 0; c < STORE_CLASSES; c++)
		for (struct slab *sl = s->partial[c]; sl; sl = sl->next)
			free_bytes += (uint64_t)sl->nfree
				      << (STORE_UNIT_SHIFT + c);
	store_unlock(s);
	*small_bytes = ((uint64_t)*slabs << s->chunk_shift) - free_bytes;
}

int store_wait_free(struct store *s, uint32_t want,
		    const struct timespec *deadline)
{
	int rc = 0;

	/*
	 * A writer that needs two chunks while one is free must wait for
	 * the second, not come back at once and spin: @want, not "any".
	 * And a caller that keeps being woken for chunks others take still
	 * stops at its deadline.
	 */
	if (want == 0)
		want = 1;
	if (want > s->nchunks)
		want = s->nchunks;
	if (rft_expired_ts(deadline))
		return -ENOSPC;
	store_lock(s);
	s->waiters++;
	while (s->nfree < want) {
		/* Ask for eviction, then wait for chunks to be put back. */
		if (s->pressure) {
			store_unlock(s);
			s->pressure(s->pressure_ctx);
			store_lock(s);
			if (s->nfree >= want)
				break;
		}
		if (pthread_cond_timedwait(&s->freed, &s->lock, deadline) ==
		    ETIMEDOUT) {
			if (s->nfree < want)
				rc = -ENOSPC;
			break;
		}
	}
	s->waiters--;
	store_unlock(s);
	return rc;
}

int store_alloc_len(struct store *s, unsigned wait_ms, uint32_t len,
		    uint32_t *id)
{
	struct timespec deadline;

	if (store_try_alloc_len(s, len, id) == 0)
		return 0;
	rft_deadline_ts(&deadline, wait_ms);
	/* Another waiter may take the chunk we were woken for: go again. */
	while (store_wait_free(s, 1, &deadline) == 0)
		if (store_try_alloc_len(s, len, id) == 0)
			return 0;
	return store_try_alloc_len(s, len, id);
}

int store_alloc_evict(struct store *s, uint32_t len, uint32_t *id)
{
	if (store_try_alloc_len(s, len, id) == 0)
		return 0;
	if (!s->pressure)
		return -ENOSPC;
	/* Others may take what this frees: then the caller goes without. */
	s->pressure(s->pressure_ctx);
	return store_try_alloc_len(s, len, id);
}

void store_make_room(struct store *s)
{
	if (s->pressure)
		s->pressure(s->pressure_ctx);
}

int store_alloc(struct store *s, unsigned wait_ms, uint32_t *id)
{
	return store_alloc_len(s, wait_ms, s->chunk_size, id);
}

uint32_t store_take_cold(struct store *s, uint32_t *ids, uint32_t n)
{
	uint32_t ndrop = 0;

	store_lock(s);
	if (n > s->nfree)
		n = s->nfree;
	memcpy(ids, s->free_stack, (size_t)n * sizeof(*ids));
	s->nfree -= n;
	s->ncold += n;
	memmove(s->free_stack, s->free_stack + n,
		(size_t)s->nfree * sizeof(*s->free_stack));
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = ids[i];

		atomic_store_explicit(&s->refs[id], 1, memory_order_release);
		if (s->faulted[id]) {
			/* Those with pages first, for the madvise below. */
			s->faulted[id] = 0;
			s->nfaulted--;
			s->nfaulted_free--;
			ids[i] = ids[ndrop];
			ids[ndrop++] = id;
		}
	}
	store_unlock(s);
	/* Ours now: no one else touches their pages. */
	for (uint32_t i = 0; i < ndrop; i++)
		drop_pages(s, ids[i]);
	return n;
}

void store_put_cold(struct store *s, const uint32_t *ids, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t was = atomic_exchange_explicit(&s->refs[ids[i]], 0,
							memory_order_acq_rel);

		if (was != 1) {
			rft_err("store: chunk %#x given back cold with %u "
				"references", ids[i], was);
			abort();
		}
	}
	store_lock(s);
	memmove(s->free_stack + n, s->free_stack,
		(size_t)s->nfree * sizeof(*s->free_stack));
	memcpy(s->free_stack, ids, (size_t)n * sizeof(*ids));
	s->nfree += n;
	s->ncold -= n;
	for (uint32_t i = 0; i < n; i++)
		if (s->faulted[ids[i]])
			s->nfaulted_free++;
	if (s->waiters)
		pthread_cond_broadcast(&s->freed);
	store_unlock(s);
}

void store_get(struct store *s, uint32_t id)
{
	uint32_t was = atomic_fetch_add_explicit(store_refp(s, id), 1,
						 memory_order_relaxed);

	if (was == 0) {
		rft_err("store: chunk %#x taken while free", id);
		abort();
	}
}

void store_put(struct store *s, uint32_t id)
{
	uint32_t was = atomic_fetch_sub_explicit(store_refp(s, id), 1,
						 memory_order_acq_rel);

	if (was == 0) {
		rft_err("store: chunk %#x freed twice", id);
		abort();
	}
	if (was != 1)
		return;
	if (id & STORE_SMALL) {
		small_free(s, id);
		return;
	}
	store_lock(s);
	if (s->lent[id].home) {
		/* Its memory is the home's page: back to the home, cold. */
		struct store_home *h = s->lent[id].home;

		s->lent[id].home = NULL;
		atomic_store_explicit(&s->refs[id], 1, memory_order_relaxed);
		s->ncold++;
		h->live--;
		h->back[h->nback++] = id;
		h->page_id[s->lent[id].page] = STORE_NO_PAGE;
	} else {
		push_free_locked(s, id);
	}
	store_unlock(s);
}

int store_home_init(struct store_home *h, uint8_t *map, uint32_t pages)
{
	memset(h, 0, sizeof(*h));
	h->back = malloc(((size_t)pages + 1) * sizeof(*h->back));
	h->page_id = malloc(((size_t)pages + 1) * sizeof(*h->page_id));
	if (!h->back || !h->page_id) {
		free(h->back);
		free(h->page_id);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < pages; i++)
		h->page_id[i] = STORE_NO_PAGE;
	h->map = map;
	h->pages = pages;
	return 0;
}

void store_home_fini(struct store_home *h)
{
	if (h->live || h->nback) {
		rft_err("store: a home freed with %u chunks lent and %u back",
			h->live, h->nback);
		abort();
	}
	free(h->back);
	free(h->page_id);
	h->back = h->page_id = NULL;
}

uint8_t *store_lend(struct store *s, struct store_home *h, uint32_t id,
		    uint32_t page)
{
	if ((id & STORE_SMALL) || page >= h->pages ||
	    store_refs(s, id) != 1 || s->lent[id].home) {
		rft_err("store: chunk %#x lent to page %u of %u", id, page,
			h->pages);
		abort();
	}
	store_lock(s);
	/* h->back has room for every chunk lent at once, one a page. */
	if (h->live + h->nback >= h->pages ||
	    h->page_id[page] != STORE_NO_PAGE) {
		rft_err("store: page %u of a home of %u pages lent twice "
			"(%u chunks lent, %u back)",
			page, h->pages, h->live, h->nback);
		abort();
	}
	s->lent[id] = (struct store_lent){ h, page };
	h->page_id[page] = id;
	h->live++;
	s->ncold--; /* the file's now: used */
	store_unlock(s);
	return store_ptr(s, id);
}

uint32_t store_home_collect(struct store *s, struct store_home *h,
			    uint32_t *ids, uint32_t max)
{
	uint32_t n;

	store_lock(s);
	n = h->nback < max ? h->nback : max;
	h->nback -= n;
	memcpy(ids, h->back + h->nback, (size_t)n * sizeof(*ids));
	store_unlock(s);
	return n;
}

bool store_page_lent(struct store *s, struct store_home *h, uint32_t page)
{
	bool lent;

	store_lock(s);
	lent = page < h->pages && h->page_id[page] != STORE_NO_PAGE;
	store_unlock(s);
	return lent;
}

uint32_t store_home_live(struct store *s, struct store_home *h)
{
	uint32_t n;

	store_lock(s);
	n = h->live;
	store_unlock(s);
	return n;
}

uint32_t store_free_count(struct store *s)
{
	uint32_t n;

	store_lock(s);
	n = s->nfree;
	store_unlock(s);
	return n;
}

uint32_t store_free_or_cold(struct store *s)
{
	uint32_t n;

	store_lock(s);
	n = s->nfree + s->ncold;
	store_unlock(s);
	return n;
}
