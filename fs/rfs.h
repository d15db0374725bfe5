/*
 * rfs.h - fs/: the FUSE face of reftfs.  The only folder that includes
 * fuse_lowlevel.h; every operation becomes one engine call.
 */
#ifndef RFT_RFS_H
#define RFT_RFS_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include "ctl.h"
#include "engine.h"
#include "rft_wq.h"

/* Seconds the kernel may keep attributes and names, alone (not in a group). */
#define RFS_ATTR_TIMEOUT 30.0

/* The largest sealed file a read-only open reads through the page cache. */
#define RFS_CACHE_SMALL (1ULL << 20)

/*
 * With --passthrough, how long the writes must have stopped before the
 * files sealed meanwhile are copied to backing files: a save's files are
 * written back to back, and a copy beside the next file's writes costs
 * them memory bandwidth (docs/benchmarks.md).
 */
#define RFS_PASS_QUIET_MS 250

/* What the FUSE operations need besides the engine. */
struct rfs {
	struct eng *eng;
	struct fuse_session *se;	/* for notifications to the kernel */
	bool direct_read;	/* read-only opens use direct I/O too */
	bool mmap_direct;	/* the kernel allows mmap of direct I/O files:
				   every open can use direct I/O */
	double attr_timeout;	/* seconds the kernel may cache attributes */
	uint64_t cache_small;	/* with mmap_direct, sealed files up to this
				   size opened read-only use the page cache */
	unsigned max_write;	/* bytes per WRITE request */
	bool io_uring;		/* ask for FUSE over io_uring (--io-uring, and
				   the kernel's fuse module has it on) */
	struct rfs_fuse_info info; /* what "status" says of the session */
	struct rfs_lane *lane;	/* with io_uring: lane.c; else NULL */
	bool passthrough;	/* --passthrough, alone, no io_uring */
	bool early_copy;	/* --early-copy */
	bool in_place;		/* --in-place */
	/* Backing ids whose open was never answered (interrupted): closed
	   with the next request that can (libfuse needs one). */
	pthread_mutex_t stale_lock;
	int stale_ids[16];
	unsigned nstale;
};

extern const struct fuse_lowlevel_ops rfs_oper;

/*
 * With io_uring (lane.c): rfs_lane_start() before the session loop,
 * rfs_lane_stop() after it; it also takes over SIGHUP, SIGINT and SIGTERM
 * from fuse_set_signal_handlers().  rfs_lane_push() runs @j->run(@j) on a
 * lane thread (@j is embedded in the caller's job, which stays the
 * caller's); run answers its request and calls rfs_defer_end().
 * -ESHUTDOWN: stopping, answer now.  A handler whose request may be
 * answered from another thread calls rfs_defer_begin() first (false:
 * stopping, answer now) and rfs_defer_end() once it is answered.  Without
 * a lane, all of these cost nothing.
 */
struct rfs_lane;
struct rfs_lane_job {
	struct rft_wq_item w;		/* the lane's */
	void (*run)(struct rfs_lane_job *j);
};
int rfs_lane_start(struct rfs *r);
void rfs_lane_stop(struct rfs *r);
int rfs_lane_push(struct rfs *r, struct rfs_lane_job *j);
bool rfs_defer_begin(struct rfs *r);
void rfs_defer_end(struct rfs *r);

/*
 * Names another node of the group removed or moved, dropped from the
 * kernel's cache (inval.c).  rfs_inval_new registers with @e (before
 * eng_start); rfs_inval_start after fuse_daemonize; rfs_inval_free after
 * the session is unmounted and the engine stopped.
 */
struct rfs_inval;
int rfs_inval_new(struct eng *e, struct fuse_session *se,
		  struct rfs_inval **out);
int rfs_inval_start(struct rfs_inval *q);
void rfs_inval_stop(struct rfs_inval *q);
void rfs_inval_free(struct rfs_inval *q);

/*
 * Serve @se with @nthreads workers until it ends; 0, a signal number
 * (stopped by a signal), or -errno.  @max_write is the max_write the init
 * handler sets: receive buffers are sized for it (rfs_loop_bufsize()), so
 * it must not be raised after this is called.  Returns once every receive
 * buffer is back, so no queued write still points into one.
 */
int rfs_loop_run(struct fuse_session *se, unsigned nthreads,
		 unsigned max_write);

/*
 * Bytes a receive buffer needs to hold any request the kernel sends on a
 * connection whose max_write is @max_write: the WRITE data, its headers,
 * and at least the kernel's smallest accepted read.
 */
size_t rfs_loop_bufsize(unsigned max_write);

/*
 * In a handler run by rfs_loop_run(): the receive buffer that holds
 * [@p, @p + @len), or NULL (another loop, or not in the buffer).  A handler
 * that keeps it past its return calls rfs_loop_keep() and later hands it
 * to rfs_loop_give_back(), from any thread.
 */
void *rfs_loop_buffer(const void *p, size_t len);
void rfs_loop_keep(void);
void rfs_loop_give_back(void *rbuf);

#endif /* RFT_RFS_H */
