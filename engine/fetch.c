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
	struct rft_wq_item w;	/* on fetcher.wq */
	struct eng *e;
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

/* A fetch thread's item; @stopping: fetch_stop began, answer -ESHUTDOWN. */
static void job_fn(struct rft_wq_item *w, bool stopping)
{
	struct fetch_job *job = (struct fetch_job *)w;

	job_run(job->e, job, stopping);
}

/*
 * Hold @job->in and queue @job, on the read-ahead list with @ahead.  0, or
 * -ESHUTDOWN when the threads are stopping (the job freed, nothing held).
 */
static int enqueue(struct eng *e, struct fetch_job *job, bool ahead)
{
	struct fetcher *fe = &e->fetcher;

	job->w.fn = job_fn;
	job->e = e;
	rft_deadline_ts(&job->deadline, e->cfg.fetch_timeout_ms);
	/* The caller's open handle keeps the inode alive until this hold. */
	pthread_rwlock_wrlock(&e->ns.lock);
	job->in->holds++;
	pthread_rwlock_unlock(&e->ns.lock);
	if (!fe->wq || rft_wq_queue(fe->wq, &job->w,
				    ahead ? RFT_WQ_LOW : RFT_WQ_HIGH) < 0) {
		ns_unhold(e, job->in);
		free(job);
		return -ESHUTDOWN;
	}
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

	full = !fe->wq || !fe->nthreads ||
	       rft_wq_pending(fe->wq, RFT_WQ_LOW) >= 2 * fe->nthreads;
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
	rc = rft_wq_new("rft-fetch", n, &fe->wq);
	if (rc == 0)
		rc = rft_wq_start(fe->wq);
	if (rc < 0) {
		fetch_fini(e);
		return rc;
	}
	fe->nthreads = n;
	return 0;
}

/*
 * Answer what is queued with -ESHUTDOWN and stop the threads.  Called
 * before the FUSE session goes away, so every queued read is answered
 * while its request can still be.
 */
void fetch_stop(struct eng *e)
{
	struct fetcher *fe = &e->fetcher;

	if (!fe->wq)
		return;
	rft_wq_stop(fe->wq, RFT_WQ_CANCEL);
	fe->nthreads = 0;
}

void fetch_fini(struct eng *e)
{
	struct fetcher *fe = &e->fetcher;

	fetch_stop(e);
	rft_wq_free(fe->wq);
	fe->wq = NULL;
}
