/*
 * lane.c - with --io-uring: requests that may wait run off the ring
 * threads, and the session ends only once every reply owed is sent.
 *
 * libfuse 3.18 serves each CPU's ring with one thread.  A handler that
 * waited there (a WRITE waiting for memory or for a read-in from the
 * persist dir, a fallocate) would hold up every request of the callers on
 * that CPU: a lookup would wait seconds behind a writer out of memory.  So
 * those requests go to the lane's threads, which answer them when done.
 * The ring entry, and a WRITE's data in it, stay ours until the answer.
 * The lane is an rft_wq, "rft-lane" (rft-lane/0..3 in ps), one FIFO list;
 * its stop drains: every job queued answers its request.
 *
 * A request answered from another thread (the lane, or an engine thread
 * finishing a read from the persist dir or a group call) lives in its ring
 * entry, which libfuse frees when the session ends: fuse_session_loop_mt()
 * stops the rings as soon as fuse_session_exit() is called.  So in this
 * mode the signals that stop the daemon do not end the session at once: a
 * stopper thread first makes rfs_defer_begin() refuse (such a request is
 * answered at once, EIO or done in place), waits until every reply owed
 * is sent, then calls fuse_session_exit().  The wait is bounded by the
 * engine's own limits (--enospc-wait, its fetch timeout).
 *
 * The stopper is a thread of its own, not an item of the lane's queue: it
 * waits on a signal, and then on the count of replies owed, most of which
 * are not the lane's (reads answered by the engine's threads).
 *
 * Not covered: a connection aborted through /sys/fs/fuse/connections while
 * a reply is owed (the kernel ends the session under us).
 *
 * Locks: l->lock (the stopper's) and the queue's are leaves.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rfs.h"
#include "rft_wq.h"

#define LANE_THREADS 4

struct rfs_lane {
	struct rfs *r;
	struct rft_wq *wq;		/* the lane's threads and jobs */
	pthread_mutex_t lock;		/* the stopper's */
	pthread_cond_t idle;		/* deferred reached 0 while stopping */
	bool quit;			/* ends the stopper; lock */
	atomic_uint deferred;		/* replies owed from other threads */
	atomic_bool stopping;		/* no new deferral */
	pthread_t stopper;
	bool stopper_started;
};

/* The signal handler's only way out: async-signal-safe. */
static sem_t stop_sem;
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
	sem_post(&stop_sem);
}

bool rfs_defer_begin(struct rfs *r)
{
	struct rfs_lane *l = r->lane;

	if (!l)
		return true;
	/* Dekker with the stopper: both sides seq_cst. */
	atomic_fetch_add(&l->deferred, 1);
	if (!atomic_load(&l->stopping))
		return true;
	rfs_defer_end(r);
	return false;
}

/*
 * The lane is not touched after the count drops: once it reaches 0 the
 * stopper may end the session, and the lane is freed.  While stopping,
 * the count drops under the stopper's lock, which it reads under; before,
 * a stop that begins meanwhile sees the drop in its timed wait.
 */
void rfs_defer_end(struct rfs *r)
{
	struct rfs_lane *l = r->lane;

	if (!l)
		return;
	if (!atomic_load(&l->stopping)) {
		atomic_fetch_sub(&l->deferred, 1);
		return;
	}
	pthread_mutex_lock(&l->lock);
	if (atomic_fetch_sub(&l->deferred, 1) == 1)
		pthread_cond_broadcast(&l->idle);
	pthread_mutex_unlock(&l->lock);
}

/* A lane thread's item.  Never cancelled: the lane drains at its stop. */
static void lane_run(struct rft_wq_item *w, bool cancel)
{
	struct rfs_lane_job *j = (struct rfs_lane_job *)w;

	(void)cancel;
	/* The job answers its request, ends its deferral, and may free
	 * itself. */
	j->run(j);
}

int rfs_lane_push(struct rfs *r, struct rfs_lane_job *j)
{
	struct rfs_lane *l = r->lane;

	if (!rfs_defer_begin(r))
		return -ESHUTDOWN;
	j->w.fn = lane_run;
	if (rft_wq_queue(l->wq, &j->w, RFT_WQ_HIGH) < 0) {
		rfs_defer_end(r);
		return -ESHUTDOWN;
	}
	return 0;
}

static void *stopper_thread(void *arg)
{
	struct rfs_lane *l = arg;
	struct timespec ts;
	unsigned owed;

	while (sem_wait(&stop_sem) < 0 && errno == EINTR)
		;
	pthread_mutex_lock(&l->lock);
	if (l->quit) {
		pthread_mutex_unlock(&l->lock);
		return NULL;
	}
	owed = atomic_load(&l->deferred);
	rft_info("signal %d: the session ends once %u owed answer%s out",
		 (int)stop_signal, owed, owed == 1 ? " is" : "s are");
	atomic_store(&l->stopping, true);
	/* A timed wait: a deferral may end between the load and the wait. */
	while (atomic_load(&l->deferred) != 0) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&l->idle, &l->lock, &ts);
	}
	pthread_mutex_unlock(&l->lock);
	fuse_session_exit(l->r->se);
	return NULL;
}

int rfs_lane_start(struct rfs *r)
{
	static const int sigs[] = { SIGHUP, SIGINT, SIGTERM };
	struct rfs_lane *l = calloc(1, sizeof(*l));
	struct sigaction sa;
	int rc;

	if (!l)
		return -ENOMEM;
	l->r = r;
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->idle, NULL);
	sem_init(&stop_sem, 0, 0);
	r->lane = l;
	rc = rft_wq_new("rft-lane", LANE_THREADS, &l->wq);
	if (rc < 0)
		goto fail;
	rc = rft_wq_start(l->wq);
	if (rc < 0)
		goto fail;
	rc = -pthread_create(&l->stopper, NULL, stopper_thread, l);
	if (rc < 0)
		goto fail;
	l->stopper_started = true;

	/* What fuse_set_signal_handlers() does, with the stopper's ending. */
	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_signal;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (sigaction(sigs[i], &sa, NULL) < 0) {
			rc = -errno;
			goto fail;
		}
	sa.sa_handler = SIG_IGN;
	if (sigaction(SIGPIPE, &sa, NULL) < 0) {
		rc = -errno;
		goto fail;
	}
	return 0;
fail:
	rft_err("cannot start the io_uring lane: %s", strerror(-rc));
	rfs_lane_stop(r);
	return rc;
}

void rfs_lane_stop(struct rfs *r)
{
	static const int sigs[] = { SIGHUP, SIGINT, SIGTERM };
	struct rfs_lane *l = r->lane;
	struct sigaction sa;

	if (!l)
		return;
	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = SIG_DFL;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
	pthread_mutex_lock(&l->lock);
	l->quit = true;
	pthread_mutex_unlock(&l->lock);
	if (l->stopper_started) {
		sem_post(&stop_sem);
		pthread_join(l->stopper, NULL);
	}
	/* The queue runs dry first: every job answers its request. */
	if (l->wq)
		rft_wq_stop(l->wq, RFT_WQ_DRAIN);
	rft_wq_free(l->wq);
	sem_destroy(&stop_sem);
	pthread_cond_destroy(&l->idle);
	pthread_mutex_destroy(&l->lock);
	r->lane = NULL;
	free(l);
}
