/*
 * rfs.h - fs/: the FUSE face of reftfs.  The only folder that includes
 * fuse_lowlevel.h; every operation becomes one engine call.
 */
#ifndef RFT_RFS_H
#define RFT_RFS_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include "engine.h"

/* What the FUSE operations need besides the engine. */
struct rfs {
	struct eng *eng;
	bool direct_read;	/* read-only opens use direct I/O too */
	double attr_timeout;	/* seconds the kernel may cache attributes */
	unsigned max_write;	/* bytes per WRITE request */
};

extern const struct fuse_lowlevel_ops rfs_oper;

#endif /* RFT_RFS_H */
