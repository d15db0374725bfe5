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
 * With --io-uring, main.c runs fuse_session_loop_mt() instead: requests
 * then come over the rings, answered from the rings' own buffers, and only
 * libfuse's loop stops the rings when the session ends.
 *
 * Shutdown follows libfuse's loop: a worker that sees the session end
 * posts a semaphore, the main thread cancels the others, which allow
 * cancellation only while they wait for a request.
 *
 * Why read(2) the device here rather than fuse_session_receive_buf():
 * that call reads with a count of the session's private se->bufsize and
 * ignores the size of a buffer it is handed.  libfuse 3.10-3.16 start it
 * at 256 pages + 4 KiB; 3.17 starts it at the kernel's max_pages_limit
 * sysctl (up to 65535 pages) and afterwards sets it from the max_write
 * agreed in INIT.  A worker already blocked in a read when INIT is
 * answered, or a library that raises the figure, would let the kernel
 * write past our buffer: a batch of FORGETs fills whatever count it is
 * given.  So the count of every read is the size of the buffer it reads
 * into, and that size comes from the max_write this daemon sets.  The
 * kernel never writes more than the count: a request that does not fit
 * fails with EIO, and a read shorter than max_write + headers fails with
 * EINVAL, which ends the loop with an error rather than corrupting memory.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rfs.h"

/*
 * Room for the headers in front of a WRITE's data: struct fuse_in_header
 * and struct fuse_write_in take 80 bytes; libfuse reserves a page
 * (FUSE_BUFFER_HEADER_SIZE), and so do we, so the data stays 4 KiB aligned.
 */
#define RBUF_HEADER 4096
/* The kernel refuses a read of /dev/fuse shorter than this
 * (FUSE_MIN_READ_BUFFER). */
#define RBUF_MIN 8192
/* struct fuse_in_header: anything shorter is not a request. */
#define RBUF_IN_HEADER 40
/* Buffers that may be out with the copier at once. */
#define RBUF_SPARE 16

struct rfs_rbuf {
	struct rfs_loop *loop;
	uint8_t *mem;
	size_t size;
};

struct rfs_loop {
	struct fuse_session *se;
	int fd;				/* the session's /dev/fuse */
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

size_t rfs_loop_bufsize(unsigned max_write)
{
	size_t size = (size_t)max_write + RBUF_HEADER;

	return size < RBUF_MIN ? RBUF_MIN : size;
}

/*
 * Read one request into @b, asking for no more than it holds: its length,
 * 0 when the session has ended, or -errno (-EINTR, -EAGAIN: try again).
 * Errors are handled as fuse_session_receive_buf() handles them.
 */
static ssize_t receive(struct rfs_loop *l, struct rfs_rbuf *b)
{
	ssize_t n;
	int err;

	do {
		n = read(l->fd, b->mem, b->size);
		err = errno;
		/* ENOENT: the request was interrupted before we got it. */
	} while (n < 0 && err == ENOENT && !fuse_session_exited(l->se));
	if (fuse_session_exited(l->se))
		return 0;
	/*
	 * ENODEV: unmounted, or aborted through /sys/fs/fuse/connections.
	 * ECONNABORTED: a lazy unmount ended the connection when the last
	 * open file was closed.  Either way the session is over, not broken.
	 */
	if (n < 0 && (err == ENODEV || err == ECONNABORTED)) {
		fuse_session_exit(l->se);
		return 0;
	}
	if (n < 0) {
		if (err != EINTR && err != EAGAIN)
			rft_err("reading /dev/fuse: %s", strerror(err));
		return -err;
	}
	if (n < RBUF_IN_HEADER) {
		rft_err("short read on /dev/fuse: %zd bytes", n);
		return -EIO;
	}
	return n;
}

static void *worker(void *arg)
{
	struct rfs_loop *l = arg;
	int old;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
	while (!fuse_session_exited(l->se)) {
		struct rfs_rbuf *b = pool_get(l);
		struct fuse_buf fbuf = { .mem = b->mem };
		ssize_t res;

		/* Cancelled while waiting for a request: the buffer goes back. */
		pthread_cleanup_push(cleanup_put, b);
		pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
		res = receive(l, b);
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
		pthread_cleanup_pop(0);
		if (res == -EINTR || res == -EAGAIN) {
			pool_put(b);
			continue;
		}
		if (res <= 0) {
			pool_put(b);
			if (res < 0) {
				pthread_mutex_lock(&l->lock);
				if (!l->error)
					l->error = (int)res;
				pthread_mutex_unlock(&l->lock);
				fuse_session_exit(l->se);
			}
			break;
		}
		fbuf.size = (size_t)res;
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

int rfs_loop_run(struct fuse_session *se, unsigned nthreads,
		 unsigned max_write)
{
	size_t size = rfs_loop_bufsize(max_write);
	pthread_t *threads = calloc(nthreads, sizeof(*threads));
	struct rfs_loop l;
	unsigned started = 0;
	int rc = 0;

	memset(&l, 0, sizeof(l));
	l.se = se;
	l.fd = fuse_session_fd(se);
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
