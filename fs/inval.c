/*
 * inval.c - the kernel's cached names, kept right when another node of the
 * group removes or moves a name (struct eng_invalidator, engine.h).
 *
 * The engine hands over (directory, name) pairs from the log's apply
 * thread; one thread here tells the kernel with
 * fuse_lowlevel_notify_inval_entry().  Never from the apply thread itself:
 * the kernel takes the directory's lock to drop the entry, and a FUSE
 * request that holds that lock may be waiting for the log, whose next
 * apply would then wait for us.
 *
 * The group's answers to "have you applied index N" wait (briefly) until
 * every directory's old name queued is delivered, so a directory moved on
 * one node can be moved again on another as soon as the change returns
 * (eng_invalidator).  Other names are dropped as they come, unwaited: the
 * kernel revalidates them at their next use anyway.  Waiting for them
 * made two nodes renaming files in one directory wait for each other: each
 * invalidation queued behind the other's rename, which holds the
 * directory's lock in its kernel while it waits for the group.
 *
 * Locks: the queue's (rft_wq) is a leaf; the engine is called
 * (eng_invalidated, when the last directory's name queued is delivered)
 * with no lock held.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "rfs.h"
#include "rft_wq.h"

struct inval_item {
	struct rft_wq_item w;	/* on q->wq */
	struct rfs_inval *q;
	uint64_t parent;
	bool dir;		/* a directory's old name: counted in q->dirs */
	char name[];
};

/* One worker, "rft-inval", drains at stop. */
struct rfs_inval {
	struct eng *e;
	struct fuse_session *se;
	struct rft_wq *wq;
	_Atomic uint64_t dirs;	/* dir items queued, not yet delivered */
	bool started;
};

/* The worker's item: tell the kernel, unless cancelled (never started). */
static void inval_deliver(struct rft_wq_item *w, bool cancel)
{
	struct inval_item *it = (struct inval_item *)w;

	/*
	 * -ENOENT: not cached here; -ENOSYS/-ENOTCONN: before INIT or after
	 * unmount.  Either way nothing is left to drop.
	 */
	if (!cancel)
		fuse_lowlevel_notify_inval_entry(it->q->se,
						 (fuse_ino_t)it->parent,
						 it->name, strlen(it->name));
	/* The last directory's name out: the engine's waiters look again. */
	if (it->dir && atomic_fetch_sub(&it->q->dirs, 1) == 1 && !cancel)
		eng_invalidated(it->q->e);
	free(it);
}

static void inval_entry(void *ctx, uint64_t parent, const char *name,
			bool dir)
{
	struct rfs_inval *q = ctx;
	size_t len = strlen(name);
	struct inval_item *it = malloc(sizeof(*it) + len + 1);

	/* No memory: the entry stays until the kernel revalidates it. */
	if (!it)
		return;
	it->w.fn = inval_deliver;
	it->q = q;
	it->parent = parent;
	it->dir = dir;
	memcpy(it->name, name, len + 1);
	if (dir)
		atomic_fetch_add(&q->dirs, 1);
	if (rft_wq_queue(q->wq, &it->w, RFT_WQ_HIGH) < 0) {
		/* stopped: nobody is left to tell */
		if (dir)
			atomic_fetch_sub(&q->dirs, 1);
		free(it);
	}
}

static bool inval_idle(void *ctx)
{
	struct rfs_inval *q = ctx;

	return atomic_load(&q->dirs) == 0;
}

int rfs_inval_new(struct eng *e, struct fuse_session *se,
		  struct rfs_inval **out)
{
	struct rfs_inval *q = calloc(1, sizeof(*q));
	struct eng_invalidator inv = { .entry = inval_entry,
				       .idle = inval_idle };
	int rc;

	*out = NULL;
	if (!q)
		return -ENOMEM;
	q->e = e;
	q->se = se;
	rc = rft_wq_new("rft-inval", 1, &q->wq);
	if (rc < 0) {
		free(q);
		return rc;
	}
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
	rc = rft_wq_start(q->wq);
	if (rc < 0) {
		rft_err("cannot start the name invalidation thread: %s",
			strerror(-rc));
		return rc;
	}
	q->started = true;
	return 0;
}

/* What is queued is delivered first. */
void rfs_inval_stop(struct rfs_inval *q)
{
	if (!q || !q->started)
		return;
	rft_wq_stop(q->wq, RFT_WQ_DRAIN);
	q->started = false;
}

void rfs_inval_free(struct rfs_inval *q)
{
	const struct eng_invalidator none = { 0 };

	if (!q)
		return;
	rfs_inval_stop(q);
	eng_set_invalidator(q->e, &none);
	rft_wq_free(q->wq); /* never started: what waits is dropped */
	free(q);
}
