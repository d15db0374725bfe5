/*
 * ctl_path.h - where a mount's control socket is: what reftfsd binds and
 * reftfs-admin connects to.
 *
 * Pure and on its own, without the engine, so that reftfs-admin links this
 * and nothing of the daemon (no ISA-L, no CUDA).
 */
#ifndef RFT_CTL_PATH_H
#define RFT_CTL_PATH_H

#include <stddef.h>

/*
 * Default control socket path for a mount point: a directory for sockets
 * (/run/reftfs when root, else $XDG_RUNTIME_DIR/reftfs or /tmp/reftfs-UID)
 * plus a hash of the absolute mount point.  Writes at most @size bytes to
 * @buf.  Returns 0 or -ENAMETOOLONG.  Used by reftfsd and reftfs-admin.
 */
int rfs_ctl_default_path(const char *mountpoint, char *buf, size_t size);

#endif
