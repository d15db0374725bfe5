/*
 * ctl_i.h - the control socket server inside reftfsd (engine-private).
 *
 * reftfs-admin talks to the daemon over a Unix stream socket, one request
 * line per connection; the daemon renders every answer (text, JSON,
 * Prometheus) so the client stays thin.  The wire format is written down in
 * docs/protocol.md, "Control socket".
 *
 * Threads: ctl_start() starts one acceptor thread; each connection is served
 * by a thread of its own (at most CTL_MAX_CLIENTS at once).  Those threads
 * call only the eng_* reporting functions (eng_get_stats,
 * eng_list_checkpoints, eng_list_path, eng_flush_request,
 * eng_flush_progress, eng_state_name, eng_crc_state_name) and read the
 * engine's immutable configuration (mountpoint, persist_dir, cfg); they
 * hold no lock of their own across those calls and never write to the
 * socket from inside an engine callback.
 */
#ifndef RFT_CTL_I_H
#define RFT_CTL_I_H

#include "engine.h"

#define CTL_PROTOCOL 1		/* bumped when the wire format changes */
#define CTL_MAX_LINE 4096	/* request line, '\n' included */
#define CTL_MAX_CLIENTS 16	/* connections served at once */

struct ctl;

/*
 * Bind and listen on a Unix stream socket at @path (mode 0600; a missing
 * parent directory is created 0700).  A socket already at @path that a
 * live server answers is -EADDRINUSE (one line logged); a stale one is
 * replaced.  The parent directory must belong to us or root and must not
 * be writable by others unless sticky (else -EPERM).  Nothing is served
 * until ctl_start().  @path is copied.  Returns 0 or -errno, with one line
 * logged saying what failed.
 */
int ctl_new(struct eng *e, const char *path, struct ctl **out);

/*
 * Start serving.  The server's threads block every signal.  Returns 0 or
 * -errno.  The engine must stay usable until ctl_free() returns.
 */
int ctl_start(struct ctl *c);

/*
 * Stop the acceptor, wake and join every connection thread (a client in
 * the middle of "flush --wait" gets an error line; the flush itself goes
 * on), close the socket and unlink @path if it is still ours.
 * ctl_free(NULL) is a no-op.  Call before the engine state it reports on
 * is torn down.
 */
void ctl_free(struct ctl *c);

#endif /* RFT_CTL_I_H */
