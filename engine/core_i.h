/*
 * core_i.h - core's private header: what core's files (file.c, ns.c,
 * read.c, write.c, record.c, store.c, core.c) share and no other file
 * may call.  The `layers` test fails on an include of it outside core.
 * Everything else of core is in engine_i.h, for the tiers and calls above
 * it.
 */
#ifndef RFT_CORE_I_H
#define RFT_CORE_I_H

#include "engine_i.h"

/* --- the copier: asynchronous write copies ----------------------------- */

struct wjob {
	struct rft_wq_item w;	/* on copier.wq; first */
	struct eng *e;
	struct wjob *file_next;	/* the file's queued copies (f->wjobs) */
	struct eng_file *fp;
	const uint8_t *src;
	size_t size;
	uint64_t pos;
	void (*done)(void *ctx);
	void *ctx;
};

/*
 * One worker (an rft_wq, "rft-copier") applies queued writes in arrival
 * order, so overlapping writes land in the order they were replied to.
 * A copy is queued under its file's lock and leaves the file's list
 * (f->wjobs) under it once its bytes are in: file_range_queued needs no
 * lock of the queue.  copier.lock is a leaf lock: files' pending counts
 * dropping, and the waits for them.
 */
struct copier {
	pthread_mutex_t lock;
	pthread_cond_t drained;	/* some file's pending dropped to 0 */
	struct rft_wq *wq;
	bool running;		/* set before the first write, read anywhere */
};

/*
 * Reads that must fetch data (read.c's fetch threads).  A leaf lock;
 * ns->lock is taken before it, never under it.
 */
#define ENG_FETCH_THREADS_MAX 16

struct fetcher {
	/*
	 * "rft-fetch": reads on RFT_WQ_HIGH; read-ahead on RFT_WQ_LOW,
	 * taken only when no read waits, at most 2 * nthreads queued.
	 * NULL before fetch_start and after fetch_fini.
	 */
	struct rft_wq *wq;
	unsigned nthreads;	/* 0 when stopped */
};

/*
 * Pieces being brought into memory now (load_piece in read.c), so that a
 * second reader of the same piece waits for the first instead of fetching
 * it again (read-ahead and its reader often meet on a piece).  A leaf
 * lock; nobody holds a namespace or file lock while waiting on @done.
 */
#define ENG_LOADS_MAX 64
struct loads {
	pthread_mutex_t lock;
	pthread_cond_t done;	/* a load ended */
	struct load_key {
		const struct inode *in;
		uint32_t idx;
	} k[ENG_LOADS_MAX];	/* lock */
	unsigned n;		/* lock */
};

struct core_io {
	struct copier copier;
	struct fetcher fetcher;
	struct loads loads;
};

/* One balancing step now; returns bytes faulted in minus given back. */
int64_t store_balance(struct store *s);
/*
 * The same for a piece of @len bytes: a small block when @len is at most
 * s->small_max, else a whole chunk.  store_cap() says what it holds.
 */
int store_alloc_len(struct store *s, unsigned wait_ms, uint32_t len,
		    uint32_t *id);
/*
 * store_try_alloc_len, and when nothing is free one round of eviction (the
 * pressure callback) and one more try: never waits for memory to be freed
 * by others.  0, or -ENOSPC.  Hold no namespace or file lock.
 */
int store_alloc_evict(struct store *s, uint32_t len, uint32_t *id);
/*
 * Queue a read of [@pos, @pos + @size) of @in (open by the caller) to the
 * fetch threads; @reply is called once, from one of them.  0 or -errno
 * (then @reply is not called).
 */
int fetch_queue(struct eng *e, struct inode *in, uint64_t pos, size_t size,
		eng_reply_fn reply, void *ctx);
/*
 * Queue read-ahead of piece @idx of @in (file_load_ahead) behind every
 * read; dropped when enough read-ahead is queued already.  No lock held.
 */
void fetch_queue_ahead(struct eng *e, struct inode *in, uint32_t idx);
/*
 * On a fetch thread: bring what the read needs into RAM (or read it
 * straight from where it is) and call @reply.  Returns 0 once @reply was
 * called, or -errno (then @reply was not called).
 */
int file_read_fetch(struct eng *e, struct inode *in, uint64_t pos,
		    size_t size, eng_reply_fn reply, void *ctx,
		    const struct timespec *deadline);
int file_init(struct file *f);
void file_fini(struct eng *e, struct file *f);
/* Slot @s of @f becomes a hole, its chunk let go.  f->lock held for
 * writing. */
void file_drop_slot(struct eng *e, struct file *f, struct slot *s);
/*
 * Piece @s of @f, in memory, goes back to its holders (PIECE_PEER): its
 * chunk is let go; fill, CRC and its length stay, what the next fetch
 * checks.  f->lock held for writing.
 */
void file_slot_to_peer(struct eng *e, struct file *f, struct slot *s);
/*
 * Read-ahead: queue the pieces after [.., @last] that a sequential reader
 * will want next and that are elsewhere (a window of one piece per fetch
 * thread, each queued once).  No lock held.
 */
void file_ahead(struct eng *e, struct inode *in, uint32_t last);
/*
 * Bring piece @i of @in into memory for read-ahead: like file_load, but
 * only into a free chunk (never waits for memory).  No lock held; sleeps.
 */
int file_load_ahead(struct eng *e, struct inode *in, uint32_t i,
		    const struct timespec *deadline);
/* Bound on re-tries when an evicted piece is evicted again before use. */
#define LOAD_TRIES 8
/*
 * A writer's read-in of piece @i of @in, whose old bytes it changes in
 * part: file_load, counted in *@tries; past LOAD_TRIES (the piece keeps
 * changing under it) -EIO, logged.  No lock held; sleeps.
 */
int file_load_write(struct eng *e, struct inode *in, uint32_t i,
		    unsigned *tries);

#endif
