/*
 * rft_wq.c - named work queues (rft_wq.h).
 *
 * As sheepdog's lib/work.c, less what reftfs has no use for: no "done"
 * callback on a main event loop (an item's fn answers for itself, through
 * its own reply path), and a fixed number of workers.  Added: a second,
 * lower list (read-ahead behind reads), a stop that either drains or
 * cancels, so that every accepted item reaches its fn exactly once, a
 * bound per list (the control socket's and nslog's), and taking back what
 * waited too long (the control socket's "busy").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rft_clock.h"
#include "rft_wq.h"

struct rft_wq {
	char name[16];
	pthread_mutex_t lock;
	pthread_cond_t cv;	/* an item was queued, or stop */
	struct rft_wq_item *head[RFT_WQ_NPRIO]; /* lock */
	struct rft_wq_item *tail[RFT_WQ_NPRIO]; /* lock */
	unsigned pending[RFT_WQ_NPRIO]; /* lock */
	unsigned max[RFT_WQ_NPRIO]; /* 0: no bound; lock */
	unsigned running;	/* items inside their fn; lock */
	bool closed;		/* stop began: nothing accepted; lock */
	bool stop;		/* workers leave once the lists are empty; lock */
	bool cancel;		/* items taken from now on are cancelled; lock */
	void (*idle_fn)(void *arg);
	void *idle_arg;
	unsigned nthreads;
	unsigned nstarted;	/* workers running; only the owner's thread */
	unsigned nnamed;	/* workers that named themselves; lock */
	pthread_t threads[];
};

/* The first item to run, HIGH before LOW; q->lock held. */
static struct rft_wq_item *take(struct rft_wq *q)
{
	for (int p = 0; p < RFT_WQ_NPRIO; p++) {
		struct rft_wq_item *w = q->head[p];

		if (!w)
			continue;
		q->head[p] = w->next;
		if (!q->head[p])
			q->tail[p] = NULL;
		q->pending[p]--;
		w->next = NULL;
		return w;
	}
	return NULL;
}

static bool nothing_pending(const struct rft_wq *q)
{
	for (int p = 0; p < RFT_WQ_NPRIO; p++)
		if (q->head[p])
			return false;
	return true;
}

/*
 * "NAME" for a queue of one worker, else "NAME/i": what ps, top and gdb
 * show.  Set by the worker itself, before its first item.
 */
static void name_self(struct rft_wq *q, unsigned i)
{
	char name[16];

	if (q->nthreads == 1)
		snprintf(name, sizeof(name), "%s", q->name);
	else
		snprintf(name, sizeof(name), "%.11s/%u", q->name, i);
	/* A name is for people only: its failure is no error. */
	pthread_setname_np(pthread_self(), name);
}

static void *worker_main(void *arg)
{
	struct rft_wq *q = arg;

	pthread_mutex_lock(&q->lock);
	name_self(q, q->nnamed++);
	for (;;) {
		struct rft_wq_item *w = take(q);
		bool cancel;

		if (!w) {
			if (q->stop)
				break;
			pthread_cond_wait(&q->cv, &q->lock);
			continue;
		}
		cancel = q->cancel;
		q->running++;
		pthread_mutex_unlock(&q->lock);
		w->fn(w, cancel);
		pthread_mutex_lock(&q->lock);
		q->running--;
		if (q->idle_fn && !q->running && nothing_pending(q)) {
			pthread_mutex_unlock(&q->lock);
			q->idle_fn(q->idle_arg);
			pthread_mutex_lock(&q->lock);
		}
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int rft_wq_new(const char *name, unsigned nthreads, struct rft_wq **out)
{
	struct rft_wq *q;

	*out = NULL;
	if (!name || nthreads == 0 || nthreads > RFT_WQ_THREADS_MAX)
		return -EINVAL;
	q = calloc(1, sizeof(*q) + nthreads * sizeof(q->threads[0]));
	if (!q)
		return -ENOMEM;
	snprintf(q->name, sizeof(q->name), "%s", name);
	q->nthreads = nthreads;
	pthread_mutex_init(&q->lock, NULL);
	rft_cond_init(&q->cv);
	*out = q;
	return 0;
}

void rft_wq_on_idle(struct rft_wq *q, void (*fn)(void *arg), void *arg)
{
	q->idle_fn = fn;
	q->idle_arg = arg;
}

void rft_wq_set_max(struct rft_wq *q, enum rft_wq_prio prio, unsigned max)
{
	pthread_mutex_lock(&q->lock);
	q->max[prio] = max;
	pthread_mutex_unlock(&q->lock);
}

int rft_wq_start(struct rft_wq *q)
{
	int rc = 0;

	pthread_mutex_lock(&q->lock);
	rc = q->closed ? -ESHUTDOWN : 0;
	pthread_mutex_unlock(&q->lock);
	while (rc == 0 && q->nstarted < q->nthreads) {
		rc = -pthread_create(&q->threads[q->nstarted], NULL,
				     worker_main, q);
		if (rc == 0)
			q->nstarted++;
	}
	if (rc < 0)
		rft_wq_stop(q, RFT_WQ_CANCEL);
	return rc;
}

int rft_wq_queue(struct rft_wq *q, struct rft_wq_item *w,
		 enum rft_wq_prio prio)
{
	int rc = 0;

	pthread_mutex_lock(&q->lock);
	if (q->closed)
		rc = -ESHUTDOWN;
	else if (q->max[prio] && q->pending[prio] >= q->max[prio])
		rc = -EAGAIN;
	if (rc < 0) {
		pthread_mutex_unlock(&q->lock);
		return rc;
	}
	w->next = NULL;
	/* Under the lock: each list stays in the order of its stamps. */
	w->queued_ms = rft_now_ms();
	if (q->tail[prio])
		q->tail[prio]->next = w;
	else
		q->head[prio] = w;
	q->tail[prio] = w;
	q->pending[prio]++;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->lock);
	return 0;
}

unsigned rft_wq_pending(struct rft_wq *q, enum rft_wq_prio prio)
{
	unsigned n;

	pthread_mutex_lock(&q->lock);
	n = q->pending[prio];
	pthread_mutex_unlock(&q->lock);
	return n;
}

uint64_t rft_wq_oldest_ms(struct rft_wq *q, enum rft_wq_prio prio)
{
	uint64_t t;

	pthread_mutex_lock(&q->lock);
	t = q->head[prio] ? q->head[prio]->queued_ms : UINT64_MAX;
	pthread_mutex_unlock(&q->lock);
	return t;
}

struct rft_wq_item *rft_wq_take_back(struct rft_wq *q, enum rft_wq_prio prio,
				     uint64_t until_ms)
{
	struct rft_wq_item *first, *last = NULL, *w;

	pthread_mutex_lock(&q->lock);
	first = q->head[prio];
	for (w = first; w && w->queued_ms <= until_ms; w = w->next) {
		last = w;
		q->pending[prio]--;
	}
	if (!last) {
		pthread_mutex_unlock(&q->lock);
		return NULL;
	}
	q->head[prio] = last->next;
	if (!q->head[prio])
		q->tail[prio] = NULL;
	last->next = NULL;
	pthread_mutex_unlock(&q->lock);
	return first;
}

bool rft_wq_idle(struct rft_wq *q)
{
	bool idle;

	pthread_mutex_lock(&q->lock);
	idle = !q->running && nothing_pending(q);
	pthread_mutex_unlock(&q->lock);
	return idle;
}

unsigned rft_wq_threads(const struct rft_wq *q)
{
	return q->nthreads;
}

void rft_wq_stop(struct rft_wq *q, enum rft_wq_stop how)
{
	pthread_mutex_lock(&q->lock);
	q->closed = true;
	if (q->nstarted) {
		q->stop = true;
		q->cancel = how == RFT_WQ_CANCEL;
		pthread_cond_broadcast(&q->cv);
	}
	pthread_mutex_unlock(&q->lock);
	while (q->nstarted > 0)
		pthread_join(q->threads[--q->nstarted], NULL);
}

void rft_wq_free(struct rft_wq *q)
{
	struct rft_wq_item *w;

	if (!q)
		return;
	rft_wq_stop(q, RFT_WQ_CANCEL);
	/* Never started, or never stopped: what is left is cancelled here. */
	while ((w = take(q)))
		w->fn(w, true);
	pthread_cond_destroy(&q->cv);
	pthread_mutex_destroy(&q->lock);
	free(q);
}
