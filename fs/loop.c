/*
 * loop.c - the FUSE session loop: worker threads reading requests into
 * receive buffers from a pool.
 *
 * Why not fuse_session_loop_mt(): its buffers belong to its threads and
 * are reused as soon as a handler returns, so a WRITE must be copied into
 * the arena before it is answered, and the writer waits for that copy.
 * With buffers of our own, the WRITE handler reserves memory, queues the
 * copy (eng_write_async) and answers at once; the buffer comes back to the
 * pool when the engine's copier is done with it.  The writer's next
 * request then overlaps the copy of this one.
 *
 * Shutdown follows libfuse's loop: a worker that sees the session end
 * posts a semaphore, the main thread cancels the others, which allow
 * cancellation only while they wait for a request.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rfs.h"

/* libfuse 3.14 reads with a count of 256 pages + 4 KiB (se->bufsize). */
#define RBUF_PAGES 256
#define RBUF_HEADER 4096
/* Buffers that may be out with the copier at once. */
#define RBUF_SPARE 16

struct rfs_rbuf {
	struct rfs_loop *loop;
	uint8_t *mem;
	size_t size;
};

struct rfs_loop {
	struct fuse_session *se;
	pthread_mutex_t lock;
	pthread_cond_t avail;
	struct rfs_rbuf *bufs;		/* all of them */
	struct rfs_rbuf **free;		/* protected by lock */
	unsigned nbufs, nfree;		/* nfree: protected by lock */
	sem_t finished;
	int error;			/* first receive error, or 0 */
};

static __thread struct rfs_rbuf *cur_buf; /* the request being handled */
static __thread bool cur_kept;

static struct rfs_rbuf *pool_get(struct rfs_loop *l)
{
	struct rfs_rbuf *b;

	pthread_mutex_lock(&l->lock);
	while (l->nfree == 0)
		pthread_cond_wait(&l->avail, &l->lock);
	b = l->free[--l->nfree];
	pthread_mutex_unlock(&l->lock);
	return b;
}

static void pool_put(struct rfs_rbuf *b)
{
	struct rfs_loop *l = b->loop;

	pthread_mutex_lock(&l->lock);
	l->free[l->nfree++] = b;
	pthread_cond_signal(&l->avail);
	pthread_mutex_unlock(&l->lock);
}

void *rfs_loop_buffer(const void *p, size_t len)
{
	struct rfs_rbuf *b = cur_buf;
	const uint8_t *q = p;

	if (!b || q < b->mem || q + len > b->mem + b->size)
		return NULL;
	return b;
}

void rfs_loop_keep(void)
{
	cur_kept = true;
}

void rfs_loop_give_back(void *rbuf)
{
	pool_put(rbuf);
}

static void cleanup_put(void *b)
{
	pool_put(b);
}

static void *worker(void *arg)
{
	struct rfs_loop *l = arg;
	int old;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
	while (!fuse_session_exited(l->se)) {
		struct rfs_rbuf *b = pool_get(l);
		struct fuse_buf fbuf = { .mem = b->mem, .size = b->size };
		int res;

		/* Cancelled while waiting for a request: the buffer goes back. */
		pthread_cleanup_push(cleanup_put, b);
		pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
		res = fuse_session_receive_buf(l->se, &fbuf);
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
		pthread_cleanup_pop(0);
		if (res == -EINTR || res == -EAGAIN) {
			pool_put(b);
			continue;
		}
		/*
		 * A lazy unmount ends the connection this way once the last
		 * open file is closed: the session is over, not broken.
		 */
		if (res == -ECONNABORTED) {
			fuse_session_exit(l->se);
			res = 0;
		}
		if (res <= 0) {
			pool_put(b);
			if (res < 0) {
				pthread_mutex_lock(&l->lock);
				if (!l->error)
					l->error = res;
				pthread_mutex_unlock(&l->lock);
				fuse_session_exit(l->se);
			}
			break;
		}
		cur_buf = b;
		cur_kept = false;
		fuse_session_process_buf(l->se, &fbuf);
		cur_buf = NULL;
		if (!cur_kept)
			pool_put(b);
	}
	sem_post(&l->finished);
	return NULL;
}

int rfs_loop_run(struct fuse_session *se, unsigned nthreads)
{
	size_t size = RBUF_PAGES * (size_t)sysconf(_SC_PAGESIZE) + RBUF_HEADER;
	pthread_t *threads = calloc(nthreads, sizeof(*threads));
	struct rfs_loop l;
	unsigned started = 0;
	int rc = 0;

	memset(&l, 0, sizeof(l));
	l.se = se;
	l.nbufs = nthreads + RBUF_SPARE;
	l.bufs = calloc(l.nbufs, sizeof(*l.bufs));
	l.free = calloc(l.nbufs, sizeof(*l.free));
	if (!threads || !l.bufs || !l.free) {
		rc = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < l.nbufs; i++) {
		if (posix_memalign((void **)&l.bufs[i].mem, 4096, size)) {
			rc = -ENOMEM;
			goto out;
		}
		l.bufs[i].loop = &l;
		l.bufs[i].size = size;
		l.free[l.nfree++] = &l.bufs[i];
	}
	pthread_mutex_init(&l.lock, NULL);
	pthread_cond_init(&l.avail, NULL);
	sem_init(&l.finished, 0, 0);

	for (; started < nthreads; started++) {
		rc = -pthread_create(&threads[started], NULL, worker, &l);
		if (rc < 0) {
			rft_err("cannot start a FUSE worker: %s", strerror(-rc));
			fuse_session_exit(se);
			break;
		}
	}
	/* A signal handler ends the session and interrupts this wait. */
	while (!fuse_session_exited(se) && started == nthreads)
		sem_wait(&l.finished);
	for (unsigned i = 0; i < started; i++)
		pthread_cancel(threads[i]);
	for (unsigned i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	if (rc == 0)
		rc = l.error;
	/* Writes of files left open may still be queued: let them land. */
	pthread_mutex_lock(&l.lock);
	while (l.nfree < l.nbufs)
		pthread_cond_wait(&l.avail, &l.lock);
	pthread_mutex_unlock(&l.lock);
	sem_destroy(&l.finished);
	pthread_cond_destroy(&l.avail);
	pthread_mutex_destroy(&l.lock);
out:
	for (unsigned i = 0; l.bufs && i < l.nbufs; i++)
		free(l.bufs[i].mem);
	free(l.bufs);
	free(l.free);
	free(threads);
	return rc;
}
