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

static void test_background_prefault(void **state)
{
	struct store s;
	uint32_t id;

	assert_int_equal(store_init(&s, 256 * MiB, MiB, false), 0);
	assert_int_equal(s.prefaulted, 0);
	assert_int_equal(store_prefault_start(&s), 0);
	/* Chunks stay usable while it runs. */
	assert_int_equal(store_alloc(&s, 0, &id), 0);
	memset(store_ptr(&s, id), 0x5a, MiB);
	for (int i = 0; i < 500 && atomic_load(&s.prefaulted) < s.bytes; i++)
		usleep(10 * 1000);
	assert_int_equal(atomic_load(&s.prefaulted), s.bytes);
	/* Populating did not touch data already there. */
	assert_int_equal(store_ptr(&s, id)[MiB - 1], 0x5a);
	store_prefault_stop(&s);
	store_prefault_stop(&s); /* twice is fine */
	store_fini(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_sizes),
		cmocka_unit_test(test_alloc_all_then_enospc),
		cmocka_unit_test(test_refs),
		cmocka_unit_test(test_waiter_is_woken),
		cmocka_unit_test(test_background_prefault),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
