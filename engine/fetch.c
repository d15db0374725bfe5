/*
 * fetch.c - reads that must fetch data run here, not on FUSE threads.
 *
 * A read whose pieces are all in RAM is answered on the caller's thread.
 * One that needs a piece from elsewhere (the persist dir, or in a group
 * the peers that hold it) is queued to this small pool of threads and
 * answered when the data is in, or when its deadline passes: a FUSE
 * worker never waits for storage or a network, and a slow source holds up
 * only the threads that read from it.  The queued read holds its inode,
 * not its handle, so it outlives neither more nor less than the file it
 * reads.
 *
 * Read-ahead.  A reader that goes through a file from peers or the persist
 * dir would otherwise wait one round trip per piece, one piece at a time.
 * file_ahead() queues the next pieces (one per fetch thread) as the reader
 * reaches them; they are fetched in parallel into free memory, and the
 * reader then finds them here.  Read-ahead jobs wait behind every read
 * (a thread takes one only when no read is queued) and are dropped, not
 * queued, beyond two per thread: they never delay a reader, and never
 * wait for memory.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_i.h"

struct fetch_job {
	struct fetch_job *next;
	struct inode *in;	/* held (in->holds) until the job is done */
	uint64_t pos;
	size_t size;
	eng_reply_fn reply;	/* NULL: read-ahead of piece pos */
	void *ctx;
	struct timespec deadline; /* CLOCK_MONOTONIC */
};

static void job_run(struct eng *e, struct fetch_job *job, bool stopping)
{
	int rc;

	if (!job->reply) {
		if (!stopping)
			file_load_ahead(e, job->in, (uint32_t)job->pos,
					&job->deadline);
		ns_unhold(e, job->in);
		free(job);
		return;
	}
	if (stopping)
		rc = -ESHUTDOWN;
	else if (rft_expired_ts(&job->deadline))
		rc = -ETIMEDOUT;
	else
		rc = file_read_fetch(e, job->in, job->pos, job->size,
				     job->reply, job->ctx, &job->deadline);
	if (rc == -ETIMEDOUT)
		atomic_fetch_add(&e->cnt.fetch_timeouts, 1);
	if (rc < 0)
		job->reply(job->ctx, NULL, 0, rc);
	ns_unhold(e, job->in);
	free(job);
}

static void *fetch_main(void *arg)
{
	struct eng *e = arg;
	struct fetcher *fe = &e->fetcher;
	struct fetch_job *job;
	bool stopping;

	pthread_mutex_lock(&fe->lock);
	for (;;) {
		while (!fe->head && !fe->ahead_head && !fe->stop)
			pthread_cond_wait(&fe->work, &fe->lock);
		if (fe->head) {
			job = fe->head;
			fe->head = job->next;
			if (!fe->head)
				fe->tail = NULL;
			fe->queued--;
		} else if (fe->ahead_head) {
			job = fe->ahead_head;
			fe->ahead_head = job->next;
			if (!fe->ahead_head)
				fe->ahead_tail = NULL;
			fe->ahead_queued--;
		} else {
			break; /* stopping, and nothing left to answer */
		}
		stopping = fe->stop;
		pthread_mutex_unlock(&fe->lock);
		job_run(e, job, stopping);
		pthread_mutex_lock(&fe->lock);
	}
	pthread_mutex_unlock(&fe->lock);
	return NULL;
}

/*
 * Hold @job->in and queue @job, on the read-ahead list with @ahead.  0, or
 * -ESHUTDOWN when the threads are stopping (the job freed, nothing held).
 */
static int enqueue(struct eng *e, struct fetch_job *job, bool ahead)
{
	struct fetcher *fe = &e->fetcher;
	struct fetch_job **head = ahead ? &fe->ahead_head : &fe->head;
	struct fetch_job **tail = ahead ? &fe->ahead_tail : &fe->tail;

	job->next = NULL;
	rft_deadline_ts(&job->deadline, e->cfg.fetch_timeout_ms);
	/* The caller's open handle keeps the inode alive until this hold. */
	pthread_rwlock_wrlock(&e->ns.lock);
	job->in->holds++;
	pthread_rwlock_unlock(&e->ns.lock);
	pthread_mutex_lock(&fe->lock);
	if (!fe->running || fe->stop) {
		pthread_mutex_unlock(&fe->lock);
		ns_unhold(e, job->in);
		free(job);
		return -ESHUTDOWN;
	}
	if (*tail)
		(*tail)->next = job;
	else
		*head = job;
	*tail = job;
	if (ahead)
		fe->ahead_queued++;
	else
		fe->queued++;
	pthread_cond_signal(&fe->work);
	pthread_mutex_unlock(&fe->lock);
	return 0;
}

int fetch_queue(struct eng *e, struct inode *in, uint64_t pos, size_t size,
		eng_reply_fn reply, void *ctx)
{
	struct fetch_job *job = calloc(1, sizeof(*job));
	int rc;

	if (!job)
		return -ENOMEM;
	job->in = in;
	job->pos = pos;
	job->size = size;
	job->reply = reply;
	job->ctx = ctx;
	rc = enqueue(e, job, false);
	if (rc == 0)
		atomic_fetch_add(&e->cnt.fetch_reads, 1);
	return rc;
}

void fetch_queue_ahead(struct eng *e, struct inode *in, uint32_t idx)
{
	struct fetcher *fe = &e->fetcher;
	struct fetch_job *job;
	bool full;

	pthread_mutex_lock(&fe->lock);
	full = !fe->running || fe->stop ||
	       fe->ahead_queued >= 2 * fe->nthreads;
	pthread_mutex_unlock(&fe->lock);
	if (full || !(job = calloc(1, sizeof(*job))))
		return;
	job->in = in;
	job->pos = idx;
	enqueue(e, job, true);
}

int fetch_start(struct eng *e)
{
	struct fetcher *fe = &e->fetcher;
	unsigned n = e->cfg.fetch_threads ? e->cfg.fetch_threads : 1;
	int rc = 0;

	if (n > ENG_FETCH_THREADS_MAX)
		n = ENG_FETCH_THREADS_MAX;
	pthread_mutex_init(&fe->lock, NULL);
	pthread_cond_init(&fe->work, NULL);
	fe->running = true;
	for (fe->nthreads = 0; fe->nthreads < n; fe->nthreads++) {
		rc = -pthread_create(&fe->threads[fe->nthreads], NULL,
				     fetch_main, e);
		if (rc < 0)
			break;
	}
	if (rc < 0)
		fetch_stop(e);
	return rc;
}

/*
 * Answer what is queued with -ESHUTDOWN and stop the threads.  Called
 * before the FUSE session goes away, so every queued read is answered
 * while its request can still be.
 */
void fetch_stop(struct eng *e)
{
	struct fetcher *fe = &e->fetcher;

	if (!fe->running)
		return;
	pthread_mutex_lock(&fe->lock);
	fe->stop = true;
	pthread_cond_broadcast(&fe->work);
	pthread_mutex_unlock(&fe->lock);
	while (fe->nthreads > 0)
		pthread_join(fe->threads[--fe->nthreads], NULL);
	fe->running = false;
	pthread_cond_destroy(&fe->work);
	pthread_mutex_destroy(&fe->lock);
}
