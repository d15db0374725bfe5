/*
 * lock_bench.c - what the lock-order check (engine_i.h, RFT_LOCK_CHECK)
 * costs: the engine's lock wrappers, checked and plain, side by side in
 * one run.  Each thread takes locks of its own (no contention: the cost
 * of the bookkeeping, not of waiting); rounds alternate plain, checked,
 * ... and the median of each counts.  Prints ns per lock/unlock pair.
 *
 * Usage: lock_bench [threads [million_rounds [rounds]]] (default 1 4 5).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine_i.h"

#define PAIRS_PER_ROUND 5 /* lock_pairs.c */

void lock_pairs_plain(struct eng *e, struct file *f, pthread_mutex_t *pass,
		      uint64_t rounds);
void lock_pairs_checked(struct eng *e, struct file *f, pthread_mutex_t *pass,
			uint64_t rounds);

struct worker {
	pthread_t t;
	struct eng *e;
	struct file f;
	pthread_mutex_t pass;	/* pass.c's lock's stand-in */
	bool checked;
	uint64_t rounds;
};

static uint64_t n_rounds;
static pthread_barrier_t start;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	pthread_barrier_wait(&start);
	if (w->checked)
		lock_pairs_checked(w->e, &w->f, &w->pass, n_rounds);
	else
		lock_pairs_plain(w->e, &w->f, &w->pass, n_rounds);
	return NULL;
}

/* One timed run of @n threads; ns per pair, per thread. */
static double run(struct worker *w, unsigned n, bool checked)
{
	double t0;

	pthread_barrier_init(&start, NULL, n + 1);
	for (unsigned i = 0; i < n; i++) {
		w[i].checked = checked;
		if (pthread_create(&w[i].t, NULL, worker_main, &w[i]) != 0) {
			perror("pthread_create");
			exit(1);
		}
	}
	t0 = now();
	pthread_barrier_wait(&start);
	for (unsigned i = 0; i < n; i++)
		pthread_join(w[i].t, NULL);
	pthread_barrier_destroy(&start);
	return (now() - t0) * 1e9 / ((double)n_rounds * PAIRS_PER_ROUND);
}

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 1;
	unsigned rounds = argc > 3 ? (unsigned)atoi(argv[3]) : 5;
	struct worker *w;
	double *plain, *checked;

	n_rounds = (argc > 2 ? strtoull(argv[2], NULL, 10) : 4) * 1000000;
	if (n < 1 || rounds < 1 || !n_rounds) {
		fprintf(stderr, "usage: lock_bench [threads [million_rounds "
				"[rounds]]]\n");
		return 2;
	}
	w = calloc(n, sizeof(*w));
	plain = calloc(rounds, sizeof(*plain));
	checked = calloc(rounds, sizeof(*checked));
	if (!w || !plain || !checked)
		return 1;
	for (unsigned i = 0; i < n; i++) {
		w[i].e = calloc(1, sizeof(*w[i].e));
		if (!w[i].e)
			return 1;
		pthread_rwlock_init(&w[i].e->ns.lock, NULL);
		pthread_mutex_init(&w[i].pass, NULL);
		pthread_mutex_init(&w[i].e->store.lock, NULL);
		pthread_rwlock_init(&w[i].f.lock, NULL);
	}
	run(w, n, false); /* warm up */
	for (unsigned r = 0; r < rounds; r++) {
		plain[r] = run(w, n, false);
		checked[r] = run(w, n, true);
	}
	qsort(plain, rounds, sizeof(*plain), cmp_double);
	qsort(checked, rounds, sizeof(*checked), cmp_double);
	printf("lock_bench: %u thread(s), %u rounds of %llu x %d pairs\n", n,
	       rounds, (unsigned long long)n_rounds, PAIRS_PER_ROUND);
	printf("  plain    %6.2f ns per lock/unlock pair (median)\n",
	       plain[rounds / 2]);
	printf("  checked  %6.2f ns per lock/unlock pair (median)\n",
	       checked[rounds / 2]);
	printf("  checked - plain: %+.2f ns per pair\n",
	       checked[rounds / 2] - plain[rounds / 2]);
	for (unsigned i = 0; i < n; i++)
		free(w[i].e);
	free(w);
	free(plain);
	free(checked);
	return 0;
}
