/*
 * handle.c - the calls on an open file that reach the tiers: release (the
 * last writer's close seals the file and posts EV_SEALED, which
 * passthrough's copier, the write-back and the group hear), fsync (in a
 * group with --sync protect it waits for the data's protection: gns.c)
 * and fallocate (a writer passing through has its bytes taken back from
 * its backing file first).  Opens
 * are namespace calls (nscall.c), reads and writes core's (read.c,
 * write.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_i.h"
#include "pass.h"
#include "erasure.h"

int eng_release(struct eng *e, struct eng_file *fp)
{
	struct inode *in = fp->inode;
	bool sealed = false, keep_writer = false;
	/* A writer passing through: its bytes are taken before it seals. */
	int backing_id = pass_release(e, fp, &keep_writer);
	struct eng_ev ev;

	if (fp->writer && !keep_writer)
		sealed = file_writer_gone(e, in, &ev);
	ns_wrlock(e);
	in->opens--;
	in->holds++;
	ns_unlock(e);
	if (sealed)
		eng_post(e, &ev);
	ns_unhold(e, in);
	eng_handle_free(e, fp);
	return backing_id;
}

void eng_free_handles(struct eng *e)
{
	while (e->handles)
		eng_handle_free(e, e->handles);
}

int file_fsync(struct eng *e, struct eng_file *fp, struct eng_call *c)
{
	int rc = pass_take(e, fp); /* a writer passing through */

	if (rc < 0)
		return rc;
	file_wait_writes(e, &fp->inode->file);
	/*
	 * The data is in the arena now.  Alone, or with --sync none, that is
	 * as durable as this tier gets: write-back to the persist dir is
	 * asynchronous by design (reftfs-admin flush --wait, or wait
	 * --persisted, is the barrier for that).  In a group with --sync
	 * protect, a writer's fsync waits for its data to be protected.
	 */
	if (!fp->writer || !e->gops || e->cfg.sync != ENG_SYNC_PROTECT)
		return 0;
	return e->gops->sync(e->gctx, fp->inode, c);
}

int eng_fallocate(struct eng *e, struct eng_file *fp, unsigned flags,
		  off_t off, off_t len)
{
	/* Passing through: the backing file is the file until taken. */
	if (fp->pass)
		return pass_fallocate(e, fp, flags, off, len);
	return file_fallocate(e, fp, flags, off, len);
}
