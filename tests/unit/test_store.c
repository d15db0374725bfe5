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

#include <stdlib.h>
#include <sys/mman.h>

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

	assert_int_equal(store_init(&s, 8 * MiB, 3 * MiB, false), -EINVAL);
	assert_int_equal(store_init(&s, 8 * MiB, 512 * 1024, false), -EINVAL);
	assert_int_equal(store_init(&s, 8 * MiB, 8 * MiB + 1, false), -EINVAL);
	assert_int_equal(store_init(&s, MiB - 1, MiB, false), -EINVAL);
}

static void test_alloc_all_then_enospc(void **state)
{
	struct store s;
	uint32_t ids[8], extra;
	double t0;

	assert_int_equal(store_init(&s, 8 * MiB + 123, MiB, true), 0);
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

	assert_int_equal(store_init(&s, 2 * MiB, MiB, false), 0);
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

	assert_int_equal(store_init(&s, MiB, MiB, false), 0);
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

	assert_int_equal(store_init(&s, 256 * MiB, MiB, false), 0);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_sizes),
		cmocka_unit_test(test_alloc_all_then_enospc),
		cmocka_unit_test(test_refs),
		cmocka_unit_test(test_waiter_is_woken),
		cmocka_unit_test(test_balancer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
