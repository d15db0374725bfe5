/*
 * inval.c - the kernel's cached names, kept right when another node of the
 * group removes or moves a name (struct eng_invalidator, engine.h).
 *
 * The engine hands over (directory, name) pairs from the log's apply
 * thread; one thread here tells the kernel with
 * fuse_lowlevel_notify_inval_entry().  Never from the apply thread itself:
 * the kernel takes the directory's lock to drop the entry, and a FUSE
 * request that holds that lock may be waiting for the log, whose next
 * apply would then wait for us.  The group's answers to "have you applied
 * index N" wait (briefly) until everything queued is delivered, so a name
 * moved on one node is not stale in another's kernel when the change
 * returns.
 *
 * Locks: q->lock is a leaf; the engine is called (eng_invalidated) with
 * no lock held.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rfs.h"

struct inval_item {
	struct inval_item *next;
	uint64_t parent;
	char name[];
};

struct rfs_inval {
	struct eng *e;
	struct fuse_session *se;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct inval_item *head, *tail; /* lock */
	bool busy;		/* lock: an item is being delivered */
	bool stop;		/* lock */
	bool started;
	pthread_t thread;
};

static void inval_entry(void *ctx, uint64_t parent, const char *name)
{
	struct rfs_inval *q = ctx;
	size_t len = strlen(name);
	struct inval_item *it = malloc(sizeof(*it) + len + 1);

	/* No memory: the entry stays until the kernel revalidates it. */
	if (!it)
		return;
	it->next = NULL;
	it->parent = parent;
	memcpy(it->name, name, len + 1);
	pthread_mutex_lock(&q->lock);
	if (q->tail)
		q->tail->next = it;
	else
		q->head = it;
	q->tail = it;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->lock);
}

static bool inval_idle(void *ctx)
{
	struct rfs_inval *q = ctx;
	bool idle;

	pthread_mutex_lock(&q->lock);
	idle = !q->head && !q->busy;
	pthread_mutex_unlock(&q->lock);
	return idle;
}

static void *inval_main(void *arg)
{
	struct rfs_inval *q = arg;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		struct inval_item *it = q->head;

		if (!it) {
			if (q->stop)
				break;
			pthread_cond_wait(&q->cv, &q->lock);
			continue;
		}
		q->head = it->next;
		if (!q->head)
			q->tail = NULL;
		q->busy = true;
		pthread_mutex_unlock(&q->lock);
		/*
		 * -ENOENT: not cached here; -ENOSYS/-ENOTCONN: before INIT or
		 * after unmount.  Either way nothing is left to drop.
		 */
		fuse_lowlevel_notify_inval_entry(q->se, (fuse_ino_t)it->parent,
						 it->name, strlen(it->name));
		free(it);
		pthread_mutex_lock(&q->lock);
		q->busy = false;
		if (!q->head) {
			pthread_mutex_unlock(&q->lock);
			eng_invalidated(q->e);
			pthread_mutex_lock(&q->lock);
		}
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int rfs_inval_new(struct eng *e, struct fuse_session *se,
		  struct rfs_inval **out)
{
	struct rfs_inval *q = calloc(1, sizeof(*q));
	struct eng_invalidator inv = { .entry = inval_entry,
				       .idle = inval_idle };

	*out = NULL;
	if (!q)
		return -ENOMEM;
	q->e = e;
	q->se = se;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cv, NULL);
	inv.ctx = q;
	eng_set_invalidator(e, &inv);
	*out = q;
	return 0;
}

int rfs_inval_start(struct rfs_inval *q)
{
	int rc;

	if (!q)
		return 0;
	rc = -pthread_create(&q->thread, NULL, inval_main, q);
	if (rc < 0) {
		rft_err("cannot start the name invalidation thread: %s",
			strerror(-rc));
		return rc;
	}
	q->started = true;
	return 0;
}

void rfs_inval_stop(struct rfs_inval *q)
{
	if (!q || !q->started)
		return;
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->thread, NULL);
	q->started = false;
}

void rfs_inval_free(struct rfs_inval *q)
{
	const struct eng_invalidator none = { 0 };

	if (!q)
		return;
	rfs_inval_stop(q);
	eng_set_invalidator(q->e, &none);
	while (q->head) {
		struct inval_item *it = q->head;

		q->head = it->next;
		free(it);
	}
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->cv);
	free(q);
}
