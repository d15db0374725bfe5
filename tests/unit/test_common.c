/*
 * test_common.c - the common layer: clock and deadline arithmetic,
 * little-endian round trips, the work queue under concurrency, and the
 * lock-order bookkeeping (its report in a forked child), and the service
 * manager's messages (to a socket of the test's own, as systemd binds).
 *
 * The work-queue tests are randomized (thread counts, items, delays, the
 * moment of a stop): the seed is printed, and WQ_SEED=N replays it.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "rft_clock.h"
#include "rft_le.h"
#include "rft_lockrank.h"
#include "rft_notify.h"
#include "rft_wq.h"

static uint64_t seed;

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static unsigned below(uint64_t *s, unsigned n)
{
	return (unsigned)(splitmix(s) % n);
}

/* --- clock and deadlines ------------------------------------------------ */

static void test_clock(void **state)
{
	uint64_t a = rft_now_ms(), an = rft_now_ns(), b, bn;
	struct timespec ts, d;

	(void)state;
	b = rft_now_ms();
	bn = rft_now_ns();
	assert_true(b >= a);
	assert_true(bn >= an);
	/* The two clocks are one: ms and ns agree within a few ms. */
	assert_true(bn / 1000000 + 1 >= b && bn / 1000000 <= b + 50);

	/* timespec <-> ms <-> ns. */
	rft_ts_at(&ts, 12345678901ull);
	assert_int_equal(ts.tv_sec, 12345678);
	assert_int_equal(ts.tv_nsec, 901000000L);
	assert_int_equal(rft_ts_ms(&ts), 12345678901ull);
	assert_int_equal(rft_ts_ns(&ts), 12345678901000000ull);

	/* A deadline is normalized for every carry of the nanoseconds. */
	for (uint64_t ms = 0; ms < 3000; ms += 7) {
		uint64_t before = rft_now_ns();

		rft_deadline_ts(&d, ms);
		assert_true(d.tv_nsec >= 0 && d.tv_nsec < RFT_NS_PER_S);
		assert_true(rft_ts_ns(&d) >= before + ms * 1000000u);
		assert_true(rft_ts_ns(&d) <= rft_now_ns() + ms * 1000000u);
	}
	rft_deadline_ts(&d, 0);
	assert_true(rft_expired_ts(&d));
	rft_deadline_ts(&d, 60000);
	assert_false(rft_expired_ts(&d));

	/* Millisecond deadlines. */
	b = rft_deadline_ms(60000);
	assert_false(rft_expired_ms(b));
	assert_true(rft_ms_left(b) > 59000 && rft_ms_left(b) <= 60000);
	assert_true(rft_expired_ms(rft_now_ms()));
	assert_int_equal(rft_ms_left(0), 0);
	assert_int_equal(rft_ms_left(rft_now_ms() - 5), 0);
}

/* A timed wait on rft_cond_init's clock ends near its deadline. */
static void test_cond_wait_until(void **state)
{
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cv;
	uint64_t t0, until;
	int rc;

	(void)state;
	rft_cond_init(&cv);
	pthread_mutex_lock(&m);
	t0 = rft_now_ms();
	until = t0 + 60;
	do
		rc = rft_cond_wait_until(&cv, &m, until);
	while (rc == 0 && !rft_expired_ms(until));
	pthread_mutex_unlock(&m);
	assert_int_equal(rc, ETIMEDOUT);
	assert_true(rft_now_ms() >= until);
	assert_true(rft_now_ms() - t0 < 5000);
	/* A deadline already past does not wait. */
	pthread_mutex_lock(&m);
	assert_int_equal(rft_cond_wait_until(&cv, &m, t0), ETIMEDOUT);
	pthread_mutex_unlock(&m);
	pthread_cond_destroy(&cv);
}

/* --- little-endian ------------------------------------------------------ */

static void test_le(void **state)
{
	uint64_t s = seed ^ 0x1e;
	uint8_t buf[9 + 8];

	(void)state;
	/* The byte order, spelled out once. */
	rft_put_le64(buf, 0x0807060504030201ull);
	for (int i = 0; i < 8; i++)
		assert_int_equal(buf[i], i + 1);
	assert_int_equal(rft_get_le16(buf), 0x0201);
	assert_int_equal(rft_get_le32(buf), 0x04030201u);
	assert_int_equal(rft_get_le64(buf), 0x0807060504030201ull);

	/* Round trips at every alignment, against a byte-at-a-time twin. */
	for (int n = 0; n < 100000; n++) {
		uint64_t v = splitmix(&s);
		unsigned off = below(&s, 9);
		uint8_t *p = buf + off;

		rft_put_le16(p, (uint16_t)v);
		assert_int_equal(rft_get_le16(p), (uint16_t)v);
		rft_put_le32(p, (uint32_t)v);
		assert_int_equal(rft_get_le32(p), (uint32_t)v);
		rft_put_le64(p, v);
		assert_int_equal(rft_get_le64(p), v);
		for (int i = 0; i < 8; i++)
			assert_int_equal(p[i], (uint8_t)(v >> (8 * i)));
	}
}

/* --- work queue ---------------------------------------------------------- */

struct job {
	struct rft_wq_item w;
	struct world *wd;
	unsigned producer, seq;
	unsigned delay_us;
	enum rft_wq_prio prio;
};

struct world {
	struct rft_wq *q;
	unsigned nthreads;
	unsigned producers, per_producer;
	atomic_uint accepted, refused, full, ran, cancelled, taken, idle_calls;
	atomic_uint inside;	/* items running now */
	atomic_uint max_inside;
	atomic_bool bad_name;
	atomic_uint *runs;	/* [producer * per_producer + seq] */
	/* One worker: the last seq run of each producer, per list. */
	unsigned last[2][64];
	bool check_order;
	bool order_broken;
	bool low_before_high; /* a LOW ran while a HIGH was queued */
	unsigned high_left;	/* HIGH items queued, not yet run */
	pthread_mutex_t lock;
};

static void job_fn(struct rft_wq_item *w, bool cancel)
{
	struct job *j = (struct job *)((char *)w - offsetof(struct job, w));
	struct world *wd = j->wd;
	unsigned in = atomic_fetch_add(&wd->inside, 1) + 1, max;
	char name[16];

	max = atomic_load(&wd->max_inside);
	while (in > max && !atomic_compare_exchange_weak(&wd->max_inside,
							  &max, in))
		;
	/* Cancelled by rft_wq_free, an item runs on the caller's thread. */
	if (!cancel &&
	    (pthread_getname_np(pthread_self(), name, sizeof(name)) != 0 ||
	     strncmp(name, "wqtest", 6) != 0))
		atomic_store(&wd->bad_name, true);
	if (!cancel && j->delay_us)
		usleep(j->delay_us);
	atomic_fetch_add(&wd->runs[j->producer * wd->per_producer + j->seq],
			 1);
	if (wd->check_order) {
		pthread_mutex_lock(&wd->lock);
		if (j->seq && wd->last[j->prio][j->producer] + 1 != j->seq)
			wd->order_broken = true;
		wd->last[j->prio][j->producer] = j->seq;
		if (j->prio == RFT_WQ_HIGH)
			wd->high_left--;
		else if (wd->high_left)
			wd->low_before_high = true;
		pthread_mutex_unlock(&wd->lock);
	}
	atomic_fetch_add(cancel ? &wd->cancelled : &wd->ran, 1);
	atomic_fetch_sub(&wd->inside, 1);
	free(j);
}

static void on_idle(void *arg)
{
	struct world *wd = arg;

	atomic_fetch_add(&wd->idle_calls, 1);
}

static void world_init(struct world *wd, unsigned nthreads,
		       unsigned producers, unsigned per)
{
	memset(wd, 0, sizeof(*wd));
	wd->nthreads = nthreads;
	wd->producers = producers;
	wd->per_producer = per;
	wd->runs = calloc((size_t)producers * per, sizeof(*wd->runs));
	assert_non_null(wd->runs);
	pthread_mutex_init(&wd->lock, NULL);
	assert_int_equal(rft_wq_new("wqtest", nthreads, &wd->q), 0);
	rft_wq_on_idle(wd->q, on_idle, wd);
}

static void world_free(struct world *wd)
{
	rft_wq_free(wd->q);
	pthread_mutex_destroy(&wd->lock);
	free(wd->runs);
}

static int queue_one(struct world *wd, unsigned producer, unsigned seq,
		     enum rft_wq_prio prio, unsigned delay_us)
{
	struct job *j = calloc(1, sizeof(*j));
	int rc;

	assert_non_null(j);
	j->w.fn = job_fn;
	j->wd = wd;
	j->producer = producer;
	j->seq = seq;
	j->prio = prio;
	j->delay_us = delay_us;
	if (prio == RFT_WQ_HIGH && wd->check_order) {
		pthread_mutex_lock(&wd->lock);
		wd->high_left++;
		pthread_mutex_unlock(&wd->lock);
	}
	rc = rft_wq_queue(wd->q, &j->w, prio);
	if (rc == 0) {
		atomic_fetch_add(&wd->accepted, 1);
	} else {
		assert_true(rc == -ESHUTDOWN || rc == -EAGAIN);
		atomic_fetch_add(rc == -EAGAIN ? &wd->full : &wd->refused, 1);
		if (prio == RFT_WQ_HIGH && wd->check_order) {
			pthread_mutex_lock(&wd->lock);
			wd->high_left--;
			pthread_mutex_unlock(&wd->lock);
		}
		free(j);
	}
	return rc;
}

/* @w, taken back from the queue: counted as its own way out. */
static void job_taken(struct world *wd, struct rft_wq_item *w)
{
	struct job *j = (struct job *)((char *)w - offsetof(struct job, w));

	atomic_fetch_add(&wd->runs[j->producer * wd->per_producer + j->seq],
			 1);
	atomic_fetch_add(&wd->taken, 1);
	free(j);
}

/* Every accepted item ran, was cancelled or was taken back, once. */
static void check_once(struct world *wd)
{
	unsigned total = 0;

	for (unsigned i = 0; i < wd->producers * wd->per_producer; i++) {
		unsigned r = atomic_load(&wd->runs[i]);

		if (r > 1)
			fail_msg("item %u ran %u times (WQ_SEED=%" PRIu64 ")",
				 i, r, seed);
		total += r;
	}
	assert_int_equal(total, atomic_load(&wd->accepted));
	assert_int_equal(atomic_load(&wd->ran) + atomic_load(&wd->cancelled) +
				 atomic_load(&wd->taken),
			 atomic_load(&wd->accepted));
	assert_false(atomic_load(&wd->bad_name));
	assert_true(atomic_load(&wd->max_inside) <= wd->nthreads);
}

/*
 * One worker: the order of each list is kept, and a LOW item waits while
 * a HIGH one is queued.  Items queued before the start wait for it.
 */
static void test_wq_order(void **state)
{
	uint64_t s = seed ^ 0x0d;
	struct world wd;
	unsigned n = 200 + below(&s, 800), high = 0, low = 0;

	(void)state;
	world_init(&wd, 1, 2, n);
	wd.check_order = true;
	for (unsigned i = 0; i < n; i++) {
		if (below(&s, 2))
			assert_int_equal(queue_one(&wd, 0, high++,
						   RFT_WQ_HIGH, 0), 0);
		else
			assert_int_equal(queue_one(&wd, 1, low++,
						   RFT_WQ_LOW, 0), 0);
	}
	assert_int_equal(rft_wq_pending(wd.q, RFT_WQ_HIGH), high);
	assert_int_equal(rft_wq_pending(wd.q, RFT_WQ_LOW), low);
	assert_false(rft_wq_idle(wd.q));
	assert_int_equal(rft_wq_start(wd.q), 0);
	rft_wq_stop(wd.q, RFT_WQ_DRAIN);
	assert_int_equal(atomic_load(&wd.ran), n);
	assert_int_equal(atomic_load(&wd.cancelled), 0);
	assert_false(wd.order_broken);
	assert_false(wd.low_before_high);
	assert_true(rft_wq_idle(wd.q));
	assert_true(atomic_load(&wd.idle_calls) >= 1);
	/* Stopped: nothing more is taken. */
	assert_int_equal(queue_one(&wd, 0, 0, RFT_WQ_HIGH, 0), -ESHUTDOWN);
	check_once(&wd);
	world_free(&wd);
}

struct producer {
	struct world *wd;
	unsigned id;
	uint64_t rng;
	atomic_bool *go;
};

static void *producer_main(void *arg)
{
	struct producer *p = arg;
	struct world *wd = p->wd;

	while (!atomic_load(p->go))
		;
	for (unsigned i = 0; i < wd->per_producer; i++) {
		enum rft_wq_prio prio = below(&p->rng, 4) ? RFT_WQ_HIGH
							  : RFT_WQ_LOW;
		unsigned delay = below(&p->rng, 8) ? 0 : below(&p->rng, 200);

		queue_one(wd, p->id, i, prio, delay);
		if (!below(&p->rng, 16))
			usleep(below(&p->rng, 100));
	}
	return NULL;
}

/*
 * Many producers and workers; with @stop_early the queue is stopped
 * (draining or cancelling at random) while the producers still queue.
 */
static void run_many(uint64_t s, bool stop_early)
{
	unsigned threads = 1 + below(&s, 8), producers = 2 + below(&s, 6);
	unsigned per = 100 + below(&s, 900);
	enum rft_wq_stop how = below(&s, 2) ? RFT_WQ_CANCEL : RFT_WQ_DRAIN;
	struct producer p[8];
	pthread_t pt[8];
	atomic_bool go = false;
	struct world wd;

	world_init(&wd, threads, producers, per);
	assert_int_equal(rft_wq_start(wd.q), 0);
	for (unsigned i = 0; i < producers; i++) {
		p[i] = (struct producer){ &wd, i, splitmix(&s), &go };
		assert_int_equal(pthread_create(&pt[i], NULL, producer_main,
						&p[i]),
				 0);
	}
	atomic_store(&go, true);
	if (stop_early) {
		usleep(below(&s, 20000));
		rft_wq_stop(wd.q, how);
		/* Joined: nothing runs, nothing is left. */
		assert_int_equal(atomic_load(&wd.inside), 0);
		assert_int_equal(rft_wq_pending(wd.q, RFT_WQ_HIGH), 0);
		assert_int_equal(rft_wq_pending(wd.q, RFT_WQ_LOW), 0);
		if (how == RFT_WQ_DRAIN)
			assert_int_equal(atomic_load(&wd.cancelled), 0);
	}
	for (unsigned i = 0; i < producers; i++)
		pthread_join(pt[i], NULL);
	if (!stop_early) {
		rft_wq_stop(wd.q, RFT_WQ_DRAIN);
		assert_int_equal(atomic_load(&wd.refused), 0);
		assert_int_equal(atomic_load(&wd.accepted), producers * per);
		assert_int_equal(atomic_load(&wd.cancelled), 0);
	}
	assert_int_equal(atomic_load(&wd.accepted) + atomic_load(&wd.refused),
			 producers * per);
	check_once(&wd);
	world_free(&wd);
}

static void test_wq_many_producers(void **state)
{
	uint64_t s = seed ^ 0x9a;

	(void)state;
	for (int round = 0; round < 20; round++)
		run_many(splitmix(&s), false);
}

static void test_wq_stop_while_busy(void **state)
{
	uint64_t s = seed ^ 0x57;

	(void)state;
	for (int round = 0; round < 30; round++)
		run_many(splitmix(&s), true);
}

/* A queue that never started cancels what it holds when freed. */
static void test_wq_never_started(void **state)
{
	struct world wd;
	struct rft_wq *q;

	(void)state;
	world_init(&wd, 3, 1, 10);
	for (unsigned i = 0; i < 10; i++)
		assert_int_equal(queue_one(&wd, 0, i, RFT_WQ_LOW, 0), 0);
	rft_wq_stop(wd.q, RFT_WQ_DRAIN);
	assert_int_equal(queue_one(&wd, 0, 0, RFT_WQ_LOW, 0), -ESHUTDOWN);
	assert_int_equal(rft_wq_start(wd.q), -ESHUTDOWN);
	rft_wq_free(wd.q);
	wd.q = NULL;
	assert_int_equal(atomic_load(&wd.cancelled), 10);
	assert_int_equal(atomic_load(&wd.ran), 0);
	check_once(&wd);
	world_free(&wd);

	assert_int_equal(rft_wq_new("x", 0, &q), -EINVAL);
	assert_null(q);
	assert_int_equal(rft_wq_new("x", RFT_WQ_THREADS_MAX + 1, &q), -EINVAL);
	rft_wq_free(NULL);
}

/*
 * A bounded list refuses the item beyond its bound with -EAGAIN, also
 * when producers race for the last places; the other list is not bound.
 */
static void test_wq_bound(void **state)
{
	uint64_t s = seed ^ 0xb0;
	unsigned max = 1 + below(&s, 50), producers = 2 + below(&s, 6);
	struct producer p[8];
	pthread_t pt[8];
	atomic_bool go = false;
	struct world wd;

	(void)state;
	world_init(&wd, 2, 2, 200);
	rft_wq_set_max(wd.q, RFT_WQ_HIGH, 3);
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(queue_one(&wd, 0, i, RFT_WQ_HIGH, 0), 0);
	assert_int_equal(queue_one(&wd, 0, 3, RFT_WQ_HIGH, 0), -EAGAIN);
	for (unsigned i = 0; i < 10; i++)
		assert_int_equal(queue_one(&wd, 1, i, RFT_WQ_LOW, 0), 0);
	assert_int_equal(rft_wq_pending(wd.q, RFT_WQ_HIGH), 3);
	/* Room again once the workers took what waited. */
	assert_int_equal(rft_wq_start(wd.q), 0);
	while (!rft_wq_idle(wd.q))
		usleep(1000);
	assert_int_equal(queue_one(&wd, 0, 4, RFT_WQ_HIGH, 0), 0);
	/* 0: no bound. */
	rft_wq_set_max(wd.q, RFT_WQ_LOW, 1);
	rft_wq_set_max(wd.q, RFT_WQ_LOW, 0);
	rft_wq_stop(wd.q, RFT_WQ_DRAIN);
	assert_int_equal(atomic_load(&wd.full), 1);
	check_once(&wd);
	world_free(&wd);

	/* Racing producers on a queue not started: exactly @max get in. */
	world_init(&wd, 1, producers, 100);
	rft_wq_set_max(wd.q, RFT_WQ_HIGH, max);
	rft_wq_set_max(wd.q, RFT_WQ_LOW, max);
	for (unsigned i = 0; i < producers; i++) {
		p[i] = (struct producer){ &wd, i, splitmix(&s), &go };
		assert_int_equal(pthread_create(&pt[i], NULL, producer_main,
						&p[i]),
				 0);
	}
	atomic_store(&go, true);
	for (unsigned i = 0; i < producers; i++)
		pthread_join(pt[i], NULL);
	if (rft_wq_pending(wd.q, RFT_WQ_HIGH) != max ||
	    rft_wq_pending(wd.q, RFT_WQ_LOW) > max)
		fail_msg("bound %u: %u HIGH and %u LOW wait (WQ_SEED=%" PRIu64
			 ")", max, rft_wq_pending(wd.q, RFT_WQ_HIGH),
			 rft_wq_pending(wd.q, RFT_WQ_LOW), seed);
	assert_int_equal(atomic_load(&wd.accepted) + atomic_load(&wd.full),
			 producers * 100);
	assert_int_equal(rft_wq_start(wd.q), 0);
	rft_wq_stop(wd.q, RFT_WQ_DRAIN);
	assert_int_equal(atomic_load(&wd.cancelled), 0);
	check_once(&wd);
	world_free(&wd);
}

/*
 * Items taken back: those queued by a time, oldest first, their fn never
 * called; the list keeps the rest in order.
 */
static void test_wq_take_back(void **state)
{
	struct rft_wq_item *w, *back;
	uint64_t t0, t1, cut;
	struct world wd;
	unsigned n;

	(void)state;
	world_init(&wd, 1, 2, 10);
	wd.check_order = true;
	assert_int_equal(rft_wq_oldest_ms(wd.q, RFT_WQ_HIGH), UINT64_MAX);
	assert_null(rft_wq_take_back(wd.q, RFT_WQ_HIGH, UINT64_MAX));
	t0 = rft_now_ms();
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(queue_one(&wd, 0, i, RFT_WQ_HIGH, 0), 0);
	assert_int_equal(queue_one(&wd, 1, 0, RFT_WQ_LOW, 0), 0);
	cut = rft_now_ms();
	t1 = rft_wq_oldest_ms(wd.q, RFT_WQ_HIGH);
	assert_true(t1 >= t0 && t1 <= cut);
	while (rft_now_ms() <= cut)
		usleep(1000);
	for (unsigned i = 4; i < 7; i++)
		assert_int_equal(queue_one(&wd, 0, i, RFT_WQ_HIGH, 0), 0);
	assert_true(rft_wq_oldest_ms(wd.q, RFT_WQ_HIGH) <= cut);

	/* Nothing queued that early. */
	assert_null(rft_wq_take_back(wd.q, RFT_WQ_HIGH, t0 - 1));
	back = rft_wq_take_back(wd.q, RFT_WQ_HIGH, cut);
	for (n = 0, w = back; w; w = w->next, n++) {
		struct job *j = (struct job *)w;

		assert_int_equal(j->seq, n);
		assert_true(w->queued_ms <= cut);
	}
	assert_int_equal(n, 4);
	while ((w = back)) {
		back = w->next;
		job_taken(&wd, w);
	}
	assert_int_equal(rft_wq_pending(wd.q, RFT_WQ_HIGH), 3);
	assert_int_equal(rft_wq_pending(wd.q, RFT_WQ_LOW), 1);
	assert_true(rft_wq_oldest_ms(wd.q, RFT_WQ_HIGH) > cut);
	/* The rest run in order (seq 4 follows 3, taken back). */
	pthread_mutex_lock(&wd.lock);
	wd.last[RFT_WQ_HIGH][0] = 3;
	wd.high_left -= 4;
	pthread_mutex_unlock(&wd.lock);
	assert_int_equal(rft_wq_start(wd.q), 0);
	rft_wq_stop(wd.q, RFT_WQ_DRAIN);
	assert_false(wd.order_broken);
	assert_int_equal(atomic_load(&wd.ran), 4);
	assert_null(rft_wq_take_back(wd.q, RFT_WQ_HIGH, UINT64_MAX));
	check_once(&wd);
	world_free(&wd);
}

struct taker {
	struct world *wd;
	uint64_t rng;
	atomic_bool *done;
};

/* Take back, now and then, what waited longer than a few ms. */
static void *taker_main(void *arg)
{
	struct taker *t = arg;
	struct rft_wq_item *w, *back;

	while (!atomic_load(t->done)) {
		uint64_t now = rft_now_ms(), age = below(&t->rng, 4);
		enum rft_wq_prio prio = below(&t->rng, 2) ? RFT_WQ_HIGH
							  : RFT_WQ_LOW;

		back = rft_wq_take_back(t->wd->q, prio, now - age);
		while ((w = back)) {
			back = w->next;
			job_taken(t->wd, w);
		}
		usleep(below(&t->rng, 500));
	}
	return NULL;
}

/*
 * Taking back while workers take and producers queue: every item leaves
 * the queue one way, once.
 */
static void test_wq_take_back_race(void **state)
{
	uint64_t s = seed ^ 0x7b;

	(void)state;
	for (int round = 0; round < 10; round++) {
		unsigned threads = 1 + below(&s, 4);
		unsigned producers = 2 + below(&s, 4);
		struct producer p[8];
		pthread_t pt[8], tt;
		atomic_bool go = false, done = false;
		struct taker t = { NULL, splitmix(&s), &done };
		struct world wd;

		world_init(&wd, threads, producers, 300);
		t.wd = &wd;
		assert_int_equal(rft_wq_start(wd.q), 0);
		assert_int_equal(pthread_create(&tt, NULL, taker_main, &t), 0);
		for (unsigned i = 0; i < producers; i++) {
			p[i] = (struct producer){ &wd, i, splitmix(&s), &go };
			assert_int_equal(pthread_create(&pt[i], NULL,
							producer_main, &p[i]),
					 0);
		}
		atomic_store(&go, true);
		for (unsigned i = 0; i < producers; i++)
			pthread_join(pt[i], NULL);
		atomic_store(&done, true);
		pthread_join(tt, NULL);
		rft_wq_stop(wd.q, RFT_WQ_DRAIN);
		assert_int_equal(atomic_load(&wd.accepted), producers * 300);
		assert_int_equal(atomic_load(&wd.cancelled), 0);
		check_once(&wd);
		world_free(&wd);
	}
}

/* --- lock order --------------------------------------------------------- */

/* outer > inner; "leaf" under either, nothing under it. */
enum { R_OUTER, R_INNER, R_LEAF, R_N };
static const struct rft_rank ranks[R_N] = {
	[R_OUTER] = { "outer", 0 },
	[R_INNER] = { "inner", 1u << R_OUTER },
	[R_LEAF] = { "leaf", 1u << R_OUTER | 1u << R_INNER },
};
static int report_fd = -1;

static void to_pipe(const char *line)
{
	ssize_t k = write(report_fd, line, strlen(line));

	(void)k;
}

static void take(unsigned r)
{
	rft_rank_wait(ranks, R_N, r, "here.c", 10 + (int)r);
	rft_rank_got(r, "here.c", 10 + (int)r);
}

static void put(unsigned r)
{
	rft_rank_put(ranks, R_N, r, "here.c", 20 + (int)r);
}

/*
 * Run case @c in a child reporting to a pipe; its status, and the report
 * in @out.  0: in order (tries too); 1: outer under inner; 2: inner under
 * leaf; 3: a release of what is not held; 4: a rank taken twice.
 */
static int rank_case(int c, char *out, size_t size)
{
	int fds[2], st = 0;
	size_t n = 0;
	ssize_t k;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit no_core = { 0, 0 };

		setrlimit(RLIMIT_CORE, &no_core);
		close(fds[0]);
		report_fd = fds[1];
		rft_rank_on_report(to_pipe);
		switch (c) {
		case 0:
			take(R_OUTER);
			take(R_INNER);
			take(R_LEAF);
			put(R_OUTER); /* any order */
			put(R_LEAF);
			rft_rank_got(R_OUTER, "here.c", 1); /* a try */
			put(R_OUTER);
			put(R_INNER);
			take(R_OUTER);
			put(R_OUTER);
			break;
		case 1:
			take(R_INNER);
			take(R_OUTER);
			break;
		case 2:
			take(R_OUTER);
			take(R_LEAF);
			take(R_INNER);
			break;
		case 3:
			take(R_INNER);
			put(R_INNER);
			put(R_INNER);
			break;
		case 4:
			take(R_INNER);
			take(R_INNER);
			break;
		}
		_exit(0);
	}
	close(fds[1]);
	while (n + 1 < size && (k = read(fds[0], out + n, size - 1 - n)) > 0)
		n += (size_t)k;
	out[n] = '\0';
	close(fds[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return st;
}

static void test_lockrank(void **state)
{
	static const char *const want[] = {
		NULL,
		"lock order: outer waited for at here.c:10, holding inner "
		"(x1, last taken at here.c:11); outer may be waited for "
		"holding no lock",
		"lock order: inner waited for at here.c:11, holding outer "
		"(x1, last taken at here.c:10), leaf (x1, last taken at "
		"here.c:12); inner may be waited for holding outer",
		"lock order: inner released, not held, at here.c:21, "
		"holding nothing",
		"lock order: inner waited for at here.c:11, holding inner "
		"(x1, last taken at here.c:11)",
	};
	char out[2048];

	(void)state;
	for (int c = 0; c < 5; c++) {
		int st = rank_case(c, out, sizeof(out));

		if (!want[c]) {
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || *out)
				fail_msg("case %d: status %#x, report \"%s\"",
					 c, st, out);
			continue;
		}
		if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT)
			fail_msg("case %d: status %#x, want SIGABRT", c, st);
		if (strncmp(out, want[c], strlen(want[c])) != 0)
			fail_msg("case %d: report \"%s\", want \"%s...\"", c,
				 out, want[c]);
	}
}

/* A datagram socket at @path ("@..." abstract), as systemd binds one. */
static int notify_listen(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t plen = strlen(path);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_true(plen < sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, plen);
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	assert_int_equal(bind(fd, (struct sockaddr *)&sa,
			      (socklen_t)(offsetof(struct sockaddr_un,
						   sun_path) + plen)), 0);
	return fd;
}

static void notify_expect(int fd, const char *want)
{
	char buf[2048];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);

	assert_true(n >= 0);
	buf[n] = '\0';
	assert_string_equal(buf, want);
}

static void test_notify(void **state)
{
	char dir[] = "/tmp/rft-notify.XXXXXX", path[64], abs[64], big[1100];
	int fd;

	(void)state;
	/* No socket named: nothing to send, and no error. */
	unsetenv("NOTIFY_SOCKET");
	assert_int_equal(rft_notify("READY=1"), 0);
	setenv("NOTIFY_SOCKET", "", 1);
	assert_int_equal(rft_notify("READY=1"), 0);

	/* A path: each call one datagram, the message whole. */
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/notify", dir);
	fd = notify_listen(path);
	setenv("NOTIFY_SOCKET", path, 1);
	assert_int_equal(rft_notify("READY=1\nSTATUS=mounted %s", "/ckpt"), 0);
	assert_int_equal(rft_notify("STOPPING=1"), 0);
	notify_expect(fd, "READY=1\nSTATUS=mounted /ckpt");
	notify_expect(fd, "STOPPING=1");
	close(fd);

	/* Nobody bound there any more: the error, not a hang. */
	assert_int_equal(rft_notify("READY=1"), -ECONNREFUSED);
	unlink(path);
	assert_int_equal(rft_notify("READY=1"), -ENOENT);
	rmdir(dir);

	/* The abstract namespace: "@name". */
	snprintf(abs, sizeof(abs), "@rft-notify-test-%d", (int)getpid());
	fd = notify_listen(abs);
	setenv("NOTIFY_SOCKET", abs, 1);
	assert_int_equal(rft_notify("STATUS=%d%%", 50), 0);
	notify_expect(fd, "STATUS=50%");
	close(fd);

	/* Neither a path nor "@", and a message cut short: refused. */
	setenv("NOTIFY_SOCKET", "notify", 1);
	assert_int_equal(rft_notify("READY=1"), -EAFNOSUPPORT);
	setenv("NOTIFY_SOCKET", abs, 1);
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(rft_notify("STATUS=%s", big), -EMSGSIZE);
	unsetenv("NOTIFY_SOCKET");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clock),
		cmocka_unit_test(test_cond_wait_until),
		cmocka_unit_test(test_le),
		cmocka_unit_test(test_wq_order),
		cmocka_unit_test(test_wq_many_producers),
		cmocka_unit_test(test_wq_stop_while_busy),
		cmocka_unit_test(test_wq_never_started),
		cmocka_unit_test(test_wq_bound),
		cmocka_unit_test(test_wq_take_back),
		cmocka_unit_test(test_wq_take_back_race),
		cmocka_unit_test(test_lockrank),
		cmocka_unit_test(test_notify),
	};
	const char *env = getenv("WQ_SEED");

	seed = env && *env ? strtoull(env, NULL, 0)
			   : (uint64_t)time(NULL) ^ (uint64_t)getpid() << 16;
	printf("test_common: seed %" PRIu64 " (replay: WQ_SEED=%" PRIu64
	       ")\n", seed, seed);
	fflush(stdout);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
