/*
 * rft_wq.h - a named work queue: the one thread loop of the daemon's pools
 * (after sheepdog's lib/work.c).
 *
 * A queue has a name, N worker threads (named "NAME" or "NAME/i", as ps,
 * top and gdb show them), one lock, one condition and two FIFO lists of
 * items: RFT_WQ_HIGH, and RFT_WQ_LOW that a worker takes only when no
 * HIGH item waits.  The caller embeds a struct rft_wq_item in its own job
 * and sets ->fn; a worker calls fn exactly once per queued item, with no
 * lock of the queue held, and fn owns the item from then on (frees it).
 *
 *	rft_wq_new()  -> rft_wq_queue()... (items wait) -> rft_wq_start()
 *	  -> rft_wq_stop(DRAIN or CANCEL) -> rft_wq_free()
 *
 * Stopping: once rft_wq_stop() is called no item is accepted
 * (rft_wq_queue returns -ESHUTDOWN and the item stays the caller's); the
 * items still queued are run, with @cancel false (RFT_WQ_DRAIN) or true
 * (RFT_WQ_CANCEL: fn answers or drops its job without doing it), then the
 * workers are joined.  rft_wq_free() cancels what a queue that never ran
 * still holds.  So every accepted item reaches its fn exactly once, unless
 * its owner takes it back first (rft_wq_take_back).
 *
 * A list may be bounded (rft_wq_set_max: more is refused with -EAGAIN),
 * and items that waited too long may be taken back by another thread that
 * answers them itself (ctl.c's "busy"): the queue keeps when each was
 * queued, but never waits on a time itself.
 *
 * Within one worker items run in the order they were taken; with one
 * worker that is the order they were queued (per list).
 *
 * Locks: the queue's lock is a leaf, held only inside these calls.
 * The common layer includes nothing from the project.
 */
#ifndef RFT_WQ_H
#define RFT_WQ_H

#include <stdbool.h>
#include <stdint.h>

struct rft_wq;

struct rft_wq_item {
	struct rft_wq_item *next; /* the queue's */
	uint64_t queued_ms;	/* rft_now_ms() when queued; the queue's */
	/* Runs the item (or with @cancel, drops it); owns it from here. */
	void (*fn)(struct rft_wq_item *w, bool cancel);
};

enum rft_wq_prio {
	RFT_WQ_HIGH,
	RFT_WQ_LOW,	/* taken only when no RFT_WQ_HIGH item waits */
	RFT_WQ_NPRIO,
};

enum rft_wq_stop {
	RFT_WQ_DRAIN,	/* run what is queued, then stop */
	RFT_WQ_CANCEL,	/* hand what is queued to fn with cancel set */
};

#define RFT_WQ_THREADS_MAX 64

/*
 * A queue named @name (at most 15 bytes are shown as the thread name) of
 * @nthreads (1..RFT_WQ_THREADS_MAX) workers, not started: items may be
 * queued before rft_wq_start().  0 or -EINVAL / -ENOMEM; free with
 * rft_wq_free().
 */
int rft_wq_new(const char *name, unsigned nthreads, struct rft_wq **out);

/*
 * Call @fn(@arg) on a worker, with no lock held, each time it finishes an
 * item and nothing is left queued or running (inval.c's "delivered"
 * signal).  Set before rft_wq_start().
 */
void rft_wq_on_idle(struct rft_wq *q, void (*fn)(void *arg), void *arg);

/*
 * At most @max items wait on list @prio (0, the default: no bound); more
 * are refused by rft_wq_queue with -EAGAIN, also when several threads
 * queue at once.
 */
void rft_wq_set_max(struct rft_wq *q, enum rft_wq_prio prio, unsigned max);

/* Start the workers.  0, or -errno (none left running). */
int rft_wq_start(struct rft_wq *q);

/*
 * Queue @w (its ->fn set) at the tail of list @prio and wake a worker.
 * 0; -EAGAIN when @prio holds its bound (rft_wq_set_max); -ESHUTDOWN
 * once rft_wq_stop() has begun.  On an error @w is not queued: the
 * caller's still.
 */
int rft_wq_queue(struct rft_wq *q, struct rft_wq_item *w,
		 enum rft_wq_prio prio);

/* Items waiting on list @prio (not those running). */
unsigned rft_wq_pending(struct rft_wq *q, enum rft_wq_prio prio);

/*
 * When the oldest item waiting on list @prio was queued (rft_now_ms()),
 * or UINT64_MAX when none waits.
 */
uint64_t rft_wq_oldest_ms(struct rft_wq *q, enum rft_wq_prio prio);

/*
 * Take back the items waiting on list @prio that were queued at or before
 * @until_ms (rft_now_ms(); UINT64_MAX: every one), oldest first, as a list
 * linked by ->next; NULL when there is none.  They are the caller's again:
 * their fn is not called, nor the idle hook.  Items already taken by a
 * worker are not among them.
 */
struct rft_wq_item *rft_wq_take_back(struct rft_wq *q, enum rft_wq_prio prio,
				     uint64_t until_ms);

/* Nothing queued and nothing running? */
bool rft_wq_idle(struct rft_wq *q);

/* The number of workers (as given to rft_wq_new). */
unsigned rft_wq_threads(const struct rft_wq *q);

/*
 * Refuse new items, run or cancel (@how) those queued, and join the
 * workers.  Idempotent; a queue never started is only closed to new items
 * (rft_wq_free cancels what it holds).  Not from one of its own workers.
 */
void rft_wq_stop(struct rft_wq *q, enum rft_wq_stop how);

/* Stop (cancelling) and free @q.  rft_wq_free(NULL) is a no-op. */
void rft_wq_free(struct rft_wq *q);

#endif /* RFT_WQ_H */
