/*
 * test_store.c - the chunk arena and the memory budget.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "engine_i.h"

#define MiB (1u << 20)

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_bad_sizes(void **state)
{
	struct store s;

	assert_int_equal(store_init(&s, 8 * MiB, 3 * MiB, 0), -EINVAL);
	assert_int_equal(store_init(&s, 8 * MiB, 512 * 1024, 0), -EINVAL);
	assert_int_equal(store_init(&s, 8 * MiB, 8 * MiB + 1, 0), -EINVAL);
	assert_int_equal(store_init(&s, MiB - 1, MiB, 0), -EINVAL);
}

static void test_alloc_all_then_enospc(void **state)
{
	struct store s;
	uint32_t ids[8], extra;
	double t0;

	assert_int_equal(store_init(&s, 8 * MiB + 123, MiB, STORE_PREFAULT), 0);
	assert_int_equal(s.nchunks, 8);
	assert_int_equal(s.bytes, 8 * MiB);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(store_alloc(&s, 0, &ids[i]), 0);
		assert_true(ids[i] < 8);
		for (int j = 0; j < i; j++)
			assert_int_not_equal(ids[i], ids[j]);
		/* Every chunk is usable memory of its full size. */
		memset(store_ptr(&s, ids[i]), i, MiB);
	}
	assert_int_equal(store_free_count(&s), 0);

	t0 = now_ms();
	assert_int_equal(store_alloc(&s, 200, &extra), -ENOSPC);
	assert_true(now_ms() - t0 >= 190); /* it did wait */

	for (int i = 0; i < 8; i++)
		assert_int_equal(store_ptr(&s, ids[i])[MiB - 1], i);
	store_put(&s, ids[3]);
	assert_int_equal(store_free_count(&s), 1);
	assert_int_equal(store_alloc(&s, 0, &extra), 0);
	assert_int_equal(extra, ids[3]); /* LIFO: the warm chunk first */
	store_fini(&s);
}

static void test_refs(void **state)
{
	struct store s;
	uint32_t id;

	assert_int_equal(store_init(&s, 2 * MiB, MiB, 0), 0);
	assert_int_equal(store_alloc(&s, 0, &id), 0);
	assert_int_equal(store_refs(&s, id), 1);
	store_get(&s, id);
	assert_int_equal(store_refs(&s, id), 2);
	store_put(&s, id);
	assert_int_equal(store_free_count(&s), 1); /* still held once */
	store_put(&s, id);
	assert_int_equal(store_free_count(&s), 2);
	store_fini(&s);
}

/*
 * In a child: a put of a chunk or small block already free, or a get of
 * one, must stop the process (SIGABRT), never hand the memory to two
 * owners.  @what picks the misuse.
 */
static void misuse(int what)
{
	struct store s;
	uint32_t id, other;

	if (freopen("/dev/null", "w", stderr) == NULL)
		_exit(3);
	if (store_init(&s, 4 * MiB, MiB, 0) < 0)
		_exit(3);
	switch (what) {
	case 0: /* a chunk put twice */
		if (store_alloc(&s, 0, &id) < 0)
			_exit(3);
		store_put(&s, id);
		store_put(&s, id);
		break;
	case 1: /* a chunk taken while free */
		if (store_alloc(&s, 0, &id) < 0)
			_exit(3);
		store_put(&s, id);
		store_get(&s, id);
		break;
	case 2: /* a small block put twice, its slab kept by another */
		if (store_try_alloc_len(&s, 4096, &id) < 0 ||
		    store_try_alloc_len(&s, 4096, &other) < 0)
			_exit(3);
		store_put(&s, id);
		store_put(&s, id);
		break;
	}
	_exit(0);
}

/*
 * Chunks held for memory elsewhere (a passthrough copy's) come from the
 * bottom of the free stack, where those without pages wait, and go back
 * there: writers take chunks with pages first, and the next hold takes
 * the same page-less chunks again, so no memory moves either way.
 */
static void test_cold(void **state)
{
	struct store s;
	uint32_t ids[8], again[3], id;

	(void)state;
	assert_int_equal(store_init(&s, 8 * MiB, MiB, STORE_PREFAULT), 0);
	assert_int_equal(store_faulted_bytes(&s), 8 * MiB);
	assert_int_equal(store_take_cold(&s, ids, 3), 3);
	assert_int_equal(store_faulted_bytes(&s), 5 * MiB); /* pages gone */
	assert_int_equal(store_free_count(&s), 5);
	assert_int_equal(store_free_or_cold(&s), 8); /* statfs: still free */
	store_put_cold(&s, ids, 3);
	assert_int_equal(store_free_count(&s), 8);
	assert_int_equal(store_free_or_cold(&s), 8);
	assert_int_equal(store_faulted_bytes(&s), 5 * MiB);

	/* A writer gets a chunk with its pages, not one of the three. */
	assert_int_equal(store_try_alloc(&s, &id), 0);
	for (int i = 0; i < 3; i++)
		assert_true(id != ids[i]);
	assert_int_equal(store_free_or_cold(&s), 7); /* a writer's: used */
	assert_int_equal(store_faulted_bytes(&s), 5 * MiB);

	/* The next hold takes the three again, freeing nothing more. */
	assert_int_equal(store_take_cold(&s, again, 3), 3);
	assert_int_equal(store_faulted_bytes(&s), 5 * MiB);
	for (int i = 0; i < 3; i++)
		assert_true(again[i] == ids[0] || again[i] == ids[1] ||
			    again[i] == ids[2]);
	/* Fewer free than asked: what there is. */
	assert_int_equal(store_take_cold(&s, ids, 5), 4);
	assert_int_equal(store_free_count(&s), 0);
	store_put_cold(&s, ids, 4);
	store_put_cold(&s, again, 3);
	store_put(&s, id);
	assert_int_equal(store_free_count(&s), 8);
	store_fini(&s);
}

/*
 * STORE_LOCK: pages are locked as they are touched (VmLck grows with
 * use, not with the budget), given back when the chunk goes cold (the
 * kernel refuses MADV_DONTNEED on locked pages: the store unlocks them
 * first), and locked again when touched again.
 */
static void test_locked(void **state)
{
	struct store s;
	uint32_t ids[16], id;
	uint64_t before, used, cold;
	int rc;

	(void)state;
	rc = store_init(&s, 16 * MiB, MiB, STORE_LOCK);
	if (rc == -ENOMEM || rc == -EPERM) {
		printf("test_locked: skipped: mlock2 of 16 MiB: %s (needs "
		       "RLIMIT_MEMLOCK of 16 MiB or CAP_IPC_LOCK)\n",
		       strerror(-rc));
		skip();
	}
	assert_int_equal(rc, 0);
	before = store_locked_bytes(&s);
	assert_true(before < 4 * MiB); /* nothing touched yet */
	for (int i = 0; i < 8; i++) {
		assert_int_equal(store_try_alloc(&s, &ids[i]), 0);
		memset(store_ptr(&s, ids[i]), 0xa5, MiB);
	}
	used = store_locked_bytes(&s);
	assert_true(used >= before + 8 * MiB);
	for (int i = 0; i < 8; i++)
		store_put(&s, ids[i]);
	/* Every free chunk cold: the eight give their pages back. */
	assert_int_equal(store_take_cold(&s, ids, 16), 16);
	cold = store_locked_bytes(&s);
	assert_true(cold + 8 * MiB <= used);
	store_put_cold(&s, ids, 16);
	/* Touched again: locked again. */
	assert_int_equal(store_try_alloc(&s, &id), 0);
	memset(store_ptr(&s, id), 0x5a, MiB);
	assert_true(store_locked_bytes(&s) >= cold + MiB);
	store_put(&s, id);
	store_fini(&s);
	/* Without STORE_LOCK nothing is said locked. */
	assert_int_equal(store_init(&s, 2 * MiB, MiB, STORE_PREFAULT), 0);
	assert_int_equal(store_locked_bytes(&s), 0);
	store_fini(&s);
}

static void test_refs_misuse_stops(void **state)
{
	for (int what = 0; what < 3; what++) {
		int st = 0;
		pid_t pid = fork();

		assert_true(pid >= 0);
		if (pid == 0)
			misuse(what);
		assert_int_equal(waitpid(pid, &st, 0), pid);
		if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT)
			fail_msg("misuse %d: status %#x, want SIGABRT", what,
				 st);
	}
}

struct waker {
	struct store *s;
	uint32_t id;
	int pressure_calls;
};

static void *put_later(void *arg)
{
	struct waker *w = arg;

	usleep(100 * 1000);
	store_put(w->s, w->id);
	return NULL;
}

static void on_pressure(void *ctx)
{
	struct waker *w = ctx;

	w->pressure_calls++;
}

static void test_waiter_is_woken(void **state)
{
	struct store s;
	struct waker w = { .s = &s };
	pthread_t t;
	uint32_t got;
	double t0;

	assert_int_equal(store_init(&s, MiB, MiB, 0), 0);
	s.pressure = on_pressure;
	s.pressure_ctx = &w;
	assert_int_equal(store_alloc(&s, 0, &w.id), 0);
	assert_int_equal(pthread_create(&t, NULL, put_later, &w), 0);
	t0 = now_ms();
	assert_int_equal(store_alloc(&s, 5000, &got), 0);
	assert_true(now_ms() - t0 < 4000); /* woken by the put, not timed out */
	assert_int_equal(got, w.id);
	assert_true(w.pressure_calls >= 1); /* eviction was asked for */
	pthread_join(t, NULL);
	store_fini(&s);
}

static uint64_t target_of(void *ctx)
{
	return atomic_load((_Atomic uint64_t *)ctx);
}

/* Resident pages of chunk @id, by mincore(): the kernel's word, not ours. */
static size_t resident_pages(struct store *s, uint32_t id)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = s->chunk_size / pg, r = 0;
	unsigned char *v = malloc(n);

	assert_int_equal(mincore(store_ptr(s, id), s->chunk_size, v), 0);
	for (size_t i = 0; i < n; i++)
		r += v[i] & 1;
	free(v);
	return r;
}

static size_t resident_chunks(struct store *s)
{
	size_t n = 0;

	for (uint32_t id = 0; id < s->nchunks; id++)
		n += resident_pages(s, id) > 0;
	return n;
}

static uint64_t wait_faulted(struct store *s, uint64_t lo, uint64_t hi)
{
	uint64_t b = 0;

	for (int i = 0; i < 500; i++) {
		b = store_faulted_bytes(s);
		if (b >= lo && b <= hi)
			break;
		usleep(10 * 1000);
	}
	return b;
}

/*
 * The balancer faults in what the next checkpoint needs and gives the
 * memory of free chunks back beyond that, never touching chunks in use.
 */
static void test_balancer(void **state)
{
	_Atomic uint64_t target = 64 * MiB;
	struct store s;
	uint32_t id;
	uint64_t b;

	assert_int_equal(store_init(&s, 256 * MiB, MiB, 0), 0);
	s.target = target_of;
	s.target_ctx = (void *)&target;
	assert_int_equal(store_faulted_bytes(&s), 0);
	assert_int_equal(resident_chunks(&s), 0);
	assert_int_equal(store_balance_start(&s), 0);
	/* Chunks stay usable while it runs. */
	assert_int_equal(store_alloc(&s, 0, &id), 0);
	memset(store_ptr(&s, id), 0x5a, MiB);
	b = wait_faulted(&s, 65 * MiB, 65 * MiB);
	assert_int_equal(b, 65 * MiB); /* in use + target free */
	/* Counted first, then populated: give the madvise calls time. */
	for (int i = 0; i < 500 && resident_chunks(&s) < 65; i++)
		usleep(10 * 1000);
	assert_true(resident_chunks(&s) >= 65);
	assert_true(resident_chunks(&s) <= 66);

	/* All of it, then nothing: free memory goes back, data stays. */
	atomic_store(&target, 256 * MiB);
	assert_int_equal(wait_faulted(&s, 256 * MiB, 256 * MiB), 256 * MiB);
	atomic_store(&target, 0);
	b = wait_faulted(&s, 0, 65 * MiB);
	assert_true(b <= 65 * MiB); /* the slack is one 64 MiB step */
	assert_true(resident_chunks(&s) <= 66);
	assert_int_equal(store_ptr(&s, id)[MiB - 1], 0x5a);
	assert_true(resident_pages(&s, id) > 0);
	assert_true(atomic_load(&s.trimmed) >= 190 * MiB);
	store_balance_stop(&s);
	store_balance_stop(&s); /* twice is fine */
	store_put(&s, id);
	store_fini(&s);
}

/* --- small blocks ---------------------------------------------------- */

static unsigned long seed_from_env(const char *name)
{
	const char *v = getenv(name);
	unsigned long seed = v && *v ? strtoul(v, NULL, 0)
				     : (unsigned long)time(NULL) ^
					       (unsigned long)getpid();

	printf("# %s=%lu\n", name, seed);
	return seed;
}

struct held {
	uint32_t id, len, refs;
	uint8_t tag;
};

/* Every byte of the block's capacity still holds its tag. */
static void check_block(struct store *s, const struct held *h)
{
	const uint8_t *p = store_ptr(s, h->id);
	uint32_t cap = store_cap(s, h->id);

	for (uint32_t i = 0; i < cap; i += 509)
		assert_int_equal(p[i], h->tag);
	assert_int_equal(p[cap - 1], h->tag);
}

/*
 * Random takes, gets and puts of pieces of random sizes against a model of
 * what is held: no two blocks overlap (each is filled with its own tag and
 * checked), a block holds its length and at most twice it (4 KiB at
 * least), the store runs out exactly when no chunk and no fitting block is
 * left, and once everything is put back every chunk is free again.
 */
static void test_small_random(void **state)
{
	unsigned long seed = seed_from_env("STORE_SEED");
	const uint32_t nchunks = 16;
	struct held h[4096];
	uint32_t n = 0, slabs;
	uint64_t small;
	struct store s;

	srandom((unsigned)seed);
	assert_int_equal(store_init(&s, nchunks * MiB, MiB, 0), 0);
	assert_int_equal(s.small_max, MiB / 2);
	for (int op = 0; op < 20000; op++) {
		int what = (int)(random() % 10);

		if (what < 5 && n < 4096) {
			/* Mostly small, sometimes a whole chunk. */
			uint32_t len = random() % 8 == 0
					       ? 1 + (uint32_t)(random() % MiB)
					       : 1 + (uint32_t)(random() %
								(64 * 1024));
			struct held *x = &h[n];
			int rc = store_try_alloc_len(&s, len, &x->id);
			uint32_t cap, lo = len < 4096 ? 4096 : len;

			if (rc == -ENOSPC) {
				/* Only when no chunk is free. */
				assert_int_equal(store_free_count(&s), 0);
				continue;
			}
			assert_int_equal(rc, 0);
			cap = store_cap(&s, x->id);
			assert_true(cap >= len);
			if (len <= s.small_max) {
				assert_true(x->id & STORE_SMALL);
				assert_true(cap < 2 * lo);
			} else {
				assert_false(x->id & STORE_SMALL);
				assert_int_equal(cap, MiB);
			}
			assert_int_equal(store_refs(&s, x->id), 1);
			x->len = len;
			x->refs = 1;
			x->tag = (uint8_t)(1 + random() % 255);
			memset(store_ptr(&s, x->id), x->tag, cap);
			n++;
		} else if (what < 7 && n > 0) {
			struct held *x = &h[random() % n];

			store_get(&s, x->id);
			x->refs++;
			assert_int_equal(store_refs(&s, x->id), x->refs);
		} else if (n > 0) {
			uint32_t i = (uint32_t)(random() % n);

			check_block(&s, &h[i]);
			store_put(&s, h[i].id);
			if (--h[i].refs == 0)
				h[i] = h[--n];
		}
	}
	for (uint32_t i = 0; i < n; i++)
		check_block(&s, &h[i]);
	store_usage(&s, &slabs, &small);
	{
		uint64_t want = 0;

		for (uint32_t i = 0; i < n; i++)
			if (h[i].id & STORE_SMALL)
				want += store_cap(&s, h[i].id);
		assert_int_equal(small, want);
	}
	while (n > 0) {
		struct held *x = &h[--n];

		while (x->refs--)
			store_put(&s, x->id);
	}
	assert_int_equal(store_free_count(&s), nchunks);
	store_usage(&s, &slabs, &small);
	assert_int_equal(slabs, 0);
	assert_int_equal(small, 0);
	store_fini(&s);
}

/* 4 KiB pieces cost 4 KiB: 256 of them in one chunk, the budget's worth. */
static void test_small_budget(void **state)
{
	static uint32_t ids[8 * 256];
	uint32_t slabs, extra;
	uint64_t small;
	struct store s;

	assert_int_equal(store_init(&s, 8 * MiB, MiB, 0), 0);
	for (uint32_t i = 0; i < 8 * 256; i++)
		assert_int_equal(store_try_alloc_len(&s, 4096, &ids[i]), 0);
	assert_int_equal(store_free_count(&s), 0);
	assert_int_equal(store_try_alloc_len(&s, 4096, &extra), -ENOSPC);
	assert_int_equal(store_try_alloc_len(&s, 8192, &extra), -ENOSPC);
	store_usage(&s, &slabs, &small);
	assert_int_equal(slabs, 8);
	assert_int_equal(small, 8 * MiB);
	/* One block back: a 4 KiB piece fits again, an 8 KiB one does not. */
	store_put(&s, ids[77]);
	assert_int_equal(store_try_alloc_len(&s, 8192, &extra), -ENOSPC);
	assert_int_equal(store_try_alloc_len(&s, 100, &extra), 0);
	assert_int_equal(extra, ids[77]);
	for (uint32_t i = 0; i < 8 * 256; i++)
		store_put(&s, ids[i]);
	assert_int_equal(store_free_count(&s), 8);
	store_fini(&s);
}

struct churn {
	struct store *s;
	unsigned seed;
	int fails;
};

/* Threads taking and putting blocks of one chunk's slabs at once. */
static void *churn_main(void *arg)
{
	struct churn *c = arg;
	uint32_t ids[64];
	uint8_t tag = (uint8_t)c->seed;

	for (int round = 0; round < 2000; round++) {
		int n = 0;

		for (int i = 0; i < 64; i++) {
			uint32_t len = 1 + (uint32_t)(rand_r(&c->seed) % 16384);

			if (store_try_alloc_len(c->s, len, &ids[n]) == 0) {
				memset(store_ptr(c->s, ids[n]), tag, len);
				n++;
			}
		}
		for (int i = 0; i < n; i++) {
			if (store_ptr(c->s, ids[i])[0] != tag)
				c->fails++;
			store_get(c->s, ids[i]);
			store_put(c->s, ids[i]);
			store_put(c->s, ids[i]);
		}
	}
	return NULL;
}

static void test_small_threads(void **state)
{
	struct churn c[4];
	pthread_t t[4];
	struct store s;

	assert_int_equal(store_init(&s, 8 * MiB, MiB, 0), 0);
	for (int i = 0; i < 4; i++) {
		c[i] = (struct churn){ &s, (unsigned)(i + 1) * 7919u, 0 };
		assert_int_equal(pthread_create(&t[i], NULL, churn_main, &c[i]),
				 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(c[i].fails, 0);
	}
	assert_int_equal(store_free_count(&s), 8);
	store_fini(&s);
}

/* --- homes: chunks lent to a backing file's pages ----------------------- */

#define HOME_PAGES 8
#define HOME_NONE UINT32_MAX

/* A backing file's stand-in: @pages MiB of a memfd, mapped shared. */
static uint8_t *home_map(uint32_t pages)
{
	int fd = memfd_create("home", 0);
	void *m;

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)pages * MiB), 0);
	m = mmap(NULL, (size_t)pages * MiB, PROT_READ | PROT_WRITE,
		 MAP_SHARED, fd, 0);
	close(fd);
	assert_true(m != MAP_FAILED);
	return m;
}

struct home_model {
	uint32_t held[HOME_PAGES], nheld;  /* cold, ours to lend */
	uint32_t page_id[HOME_PAGES];	   /* lent there, or HOME_NONE */
	uint32_t page_refs[HOME_PAGES];
	uint8_t page_tag[HOME_PAGES];	   /* what the page holds */
	uint32_t nback, live;
	uint32_t arena[32], arena_refs[32], narena;
	uint8_t arena_tag[32];
	bool frozen;
};

static void home_check(struct store *s, struct store_home *h,
		       const struct home_model *m, uint32_t nchunks)
{
	uint32_t cold = m->nheld + m->nback;
	uint32_t used = m->live + m->narena;

	assert_int_equal(store_home_live(s, h), m->live);
	assert_int_equal(store_free_count(s), nchunks - cold - used);
	/* statfs: the cold ones count as free, lent ones as used. */
	assert_int_equal(store_free_or_cold(s), nchunks - used);
	for (uint32_t p = 0; p < HOME_PAGES; p++) {
		uint32_t id = m->page_id[p];

		if (id == HOME_NONE)
			continue;
		assert_ptr_equal(store_ptr(s, id), h->map + (size_t)p * MiB);
		assert_ptr_equal(store_lent_home(s, id), h);
		assert_true(store_page_lent(s, h, p));
		assert_int_equal(store_refs(s, id), m->page_refs[p]);
		assert_int_equal(store_frozen(s, id), m->frozen);
		assert_int_equal(store_ptr(s, id)[p * 4099 % MiB],
				 m->page_tag[p]);
	}
	for (uint32_t i = 0; i < m->narena; i++) {
		assert_ptr_equal(store_ptr(s, m->arena[i]),
				 store_arena_ptr(s, m->arena[i]));
		assert_false(store_frozen(s, m->arena[i]));
		assert_int_equal(store_ptr(s, m->arena[i])[i * 8191 % MiB],
				 m->arena_tag[i]);
	}
}

/*
 * Random holds, lends, pins, puts, collects and freezes of one home beside
 * ordinary chunks, checked after each against a model: where each chunk
 * points, what the page holds, refs, live, and the budget as the store and
 * statfs count it.  HOME_SEED replays.
 */
static void test_home_random(void **state)
{
	unsigned long seed = seed_from_env("HOME_SEED");
	const uint32_t nchunks = 24;
	struct home_model m = { .nheld = 0 };
	struct store_home h;
	uint8_t *map = home_map(HOME_PAGES);
	struct store s;

	(void)state;
	srandom((unsigned)seed);
	for (uint32_t p = 0; p < HOME_PAGES; p++)
		m.page_id[p] = HOME_NONE;
	assert_int_equal(store_init(&s, nchunks * MiB, MiB, 0), 0);
	assert_int_equal(store_home_init(&h, map, HOME_PAGES), 0);
	for (int op = 0; op < 20000; op++) {
		uint32_t p = (uint32_t)random() % HOME_PAGES, id, k;

		switch (random() % 9) {
		case 0: /* hold one more page's memory */
			if (m.nheld + m.live + m.nback < HOME_PAGES &&
			    store_take_cold(&s, &id, 1) == 1)
				m.held[m.nheld++] = id;
			break;
		case 1: /* give one back */
			if (m.nheld) {
				store_put_cold(&s, &m.held[--m.nheld], 1);
			}
			break;
		case 2: /* lend a held chunk to a free page, write it */
			if (!m.nheld || m.page_id[p] != HOME_NONE)
				break;
			id = m.held[--m.nheld];
			assert_ptr_equal(store_lend(&s, &h, id, p),
					 map + (size_t)p * MiB);
			m.page_id[p] = id;
			m.page_refs[p] = 1;
			m.page_tag[p] = (uint8_t)(1 + random() % 255);
			m.live++;
			memset(store_ptr(&s, id), m.page_tag[p], MiB);
			break;
		case 3: /* a reader pins it */
			if (m.page_id[p] == HOME_NONE)
				break;
			store_get(&s, m.page_id[p]);
			m.page_refs[p]++;
			break;
		case 4: /* a put; the last one gives it back to the home */
			if (m.page_id[p] == HOME_NONE)
				break;
			id = m.page_id[p];
			store_put(&s, id);
			if (--m.page_refs[p] == 0) {
				m.page_id[p] = HOME_NONE;
				m.live--;
				m.nback++;
				/* The page keeps its bytes; the chunk is the
				 * arena's again. */
				assert_int_equal(map[(size_t)p * MiB + 77],
						 m.page_tag[p]);
				assert_ptr_equal(store_ptr(&s, id),
						 store_arena_ptr(&s, id));
				assert_null(store_lent_home(&s, id));
				assert_false(store_page_lent(&s, &h, p));
				assert_int_equal(store_refs(&s, id), 1);
			}
			break;
		case 5: { /* collect some back: ours (held) again */
			uint32_t ids[HOME_PAGES];

			k = store_home_collect(&s, &h, ids,
					       1 + (uint32_t)random() % 3);
			assert_int_equal(k, m.nback < 1 ? 0 : k);
			assert_true(k <= m.nback);
			for (uint32_t i = 0; i < k; i++) {
				assert_int_equal(store_refs(&s, ids[i]), 1);
				m.held[m.nheld++] = ids[i];
			}
			m.nback -= k;
			break;
		}
		case 6: /* an ordinary chunk, written */
			if (m.narena < 32 && store_try_alloc(&s, &id) == 0) {
				m.arena[m.narena] = id;
				m.arena_refs[m.narena] = 1;
				m.arena_tag[m.narena] =
					(uint8_t)(1 + random() % 255);
				memset(store_ptr(&s, id), m.arena_tag[m.narena],
				       MiB);
				m.narena++;
			}
			break;
		case 7: /* one dropped */
			if (m.narena) {
				k = (uint32_t)random() % m.narena;
				store_put(&s, m.arena[k]);
				m.narena--;
				m.arena[k] = m.arena[m.narena];
				m.arena_tag[k] = m.arena_tag[m.narena];
			}
			break;
		case 8: /* sealed, or open again */
			m.frozen = !m.frozen;
			atomic_store(&h.frozen, m.frozen);
			break;
		}
		home_check(&s, &h, &m, nchunks);
	}
	for (uint32_t p = 0; p < HOME_PAGES; p++)
		while (m.page_id[p] != HOME_NONE && m.page_refs[p]--)
			store_put(&s, m.page_id[p]);
	m.nheld += store_home_collect(&s, &h, m.held + m.nheld, HOME_PAGES);
	store_put_cold(&s, m.held, m.nheld);
	for (uint32_t i = 0; i < m.narena; i++)
		store_put(&s, m.arena[i]);
	assert_int_equal(store_free_count(&s), nchunks);
	assert_int_equal(store_free_or_cold(&s), nchunks);
	store_home_fini(&h);
	munmap(map, HOME_PAGES * MiB);
	store_fini(&s);
}

struct lender {
	struct store *s;
	struct store_home *h;
	uint32_t page; /* this thread's */
	int fails;
};

/*
 * Threads lending, pinning and putting chunks of one home, each on its own
 * page, beside allocations: the loans and the home's counts under the
 * store lock (TSan).
 */
static void *lender_main(void *arg)
{
	struct lender *l = arg;
	uint8_t tag = (uint8_t)(l->page + 1);

	for (int round = 0; round < 2000; round++) {
		uint32_t id, other;
		uint8_t *p;

		if (store_take_cold(l->s, &id, 1) != 1)
			continue;
		p = store_lend(l->s, l->h, id, l->page);
		p[round % MiB] = tag;
		store_get(l->s, id);
		if (store_try_alloc(l->s, &other) == 0) {
			store_ptr(l->s, other)[0] = tag;
			store_put(l->s, other);
		}
		store_put(l->s, id);
		if (store_ptr(l->s, id)[round % MiB] != tag)
			l->fails++;
		store_put(l->s, id); /* back to the home */
	}
	return NULL;
}

static void test_home_threads(void **state)
{
	struct lender l[4];
	struct store_home h;
	uint8_t *map = home_map(4);
	uint32_t ids[4 * 2000], n;
	pthread_t t[4];
	struct store s;

	(void)state;
	assert_int_equal(store_init(&s, 16 * MiB, MiB, 0), 0);
	/* Room on back for every round's chunk: collected at the end. */
	assert_int_equal(store_home_init(&h, map, 4 * 2000), 0);
	for (uint32_t i = 0; i < 4; i++) {
		l[i] = (struct lender){ &s, &h, i, 0 };
		assert_int_equal(pthread_create(&t[i], NULL, lender_main,
						&l[i]),
				 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(l[i].fails, 0);
	}
	assert_int_equal(store_home_live(&s, &h), 0);
	n = store_home_collect(&s, &h, ids, 4 * 2000);
	assert_true(n > 0 && n <= 16);
	store_put_cold(&s, ids, n);
	assert_int_equal(store_free_count(&s), 16);
	store_home_fini(&h);
	munmap(map, 4 * MiB);
	store_fini(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_sizes),
		cmocka_unit_test(test_alloc_all_then_enospc),
		cmocka_unit_test(test_refs),
		cmocka_unit_test(test_cold),
		cmocka_unit_test(test_locked),
		cmocka_unit_test(test_refs_misuse_stops),
		cmocka_unit_test(test_waiter_is_woken),
		cmocka_unit_test(test_balancer),
		cmocka_unit_test(test_small_random),
		cmocka_unit_test(test_small_budget),
		cmocka_unit_test(test_small_threads),
		cmocka_unit_test(test_home_random),
		cmocka_unit_test(test_home_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
