/*
 * ctl.h - reftfsd's control socket: how reftfs-admin sees into the daemon.
 *
 * A front end of the daemon beside the FUSE operations: it knows the
 * engine only through engine.h (eng_get_config, eng_get_stats,
 * eng_list_checkpoints, eng_list_path, eng_flush_request,
 * eng_flush_progress) and nothing of FUSE, so the unit tests run it
 * against a fake engine.  reftfs-admin talks to it over a Unix stream
 * socket, one request line per connection; the daemon renders every answer
 * (text, JSON, Prometheus) so the client stays thin.  The wire format is
 * written down in docs/protocol.md, "Control socket".
 *
 * Threads: rfs_ctl_start() starts one acceptor and RFS_CTL_MAX_CLIENTS
 * workers (an rft_wq).  The acceptor never blocks on a client: it reads request lines
 * as they come in, from every connection at once, and queues complete
 * ones; a worker runs one request at a time.  So idle connections cost
 * neither a worker nor the acceptor's time.  Workers call only the
 * engine's reporting functions, hold no lock of their own across those
 * calls and never write to the socket from inside an engine callback.
 */
#ifndef RFT_CTL_H
#define RFT_CTL_H

#include <stdatomic.h>
#include <stdbool.h>

#include "engine.h"

#define RFS_CTL_PROTOCOL 1	/* bumped when the wire format changes */
#define RFS_CTL_MAX_LINE 4096	/* request line, '\n' included */
#define RFS_CTL_MAX_CLIENTS 16	/* requests served at once: workers */

struct rfs_ctl;

/*
 * Bind and listen on a Unix stream socket at @path (mode 0600; a missing
 * parent directory is created 0700).  A socket already at @path that a
 * live server answers is -EADDRINUSE (one line logged); a stale one is
 * replaced.  The parent directory must belong to us or root and must not
 * be writable by others unless sticky (else -EPERM).  Nothing is served
 * until rfs_ctl_start(), so this may run before the engine starts.  @path
 * is copied.  Returns 0 or -errno, with one line logged saying what failed.
 */
int rfs_ctl_new(struct eng *e, const char *path, struct rfs_ctl **out);

/*
 * What the FUSE session reports ("fuse" in "status" and "metrics"), filled
 * by fs/ops.c as the session starts and read by the server without a lock.
 */
struct rfs_fuse_info {
	const char *libfuse;	/* the library's version */
	_Atomic unsigned proto;	/* kernel FUSE protocol, major << 16 | minor;
				   0 until INIT */
	_Atomic bool io_uring;	/* a request has come over an io_uring */
};

/* Report on @f too.  Before rfs_ctl_start(); @f must outlive the server. */
void rfs_ctl_set_fuse(struct rfs_ctl *c, struct rfs_fuse_info *f);

struct grp;

/*
 * Report on @g too ("group", and the group in "status" and "metrics").
 * Before rfs_ctl_start(); @g must outlive the server.
 */
void rfs_ctl_set_group(struct rfs_ctl *c, struct grp *g);

/*
 * Start serving: call once the engine is started.  The server's threads
 * block every signal.  Returns 0 or -errno.  The engine must stay usable
 * until rfs_ctl_free() returns.
 */
int rfs_ctl_start(struct rfs_ctl *c);

/*
 * Stop the acceptor, wake and join every connection thread (a client in
 * the middle of "flush --wait" gets an error line; the flush itself goes
 * on), close the socket and unlink its path if it is still ours.
 * rfs_ctl_free(NULL) is a no-op.  Call before eng_stop().
 */
void rfs_ctl_free(struct rfs_ctl *c);

#endif /* RFT_CTL_H */
