/*
 * handle.c - the calls on an open file that reach the tiers: release (the
 * last writer's close seals the file and posts EV_SEALED, which
 * passthrough's copier, the write-back and the group hear) and fallocate
 * (a writer passing through has its bytes taken back from its backing
 * file first).  Opens, flushes and fsyncs are calls (nscall.c), reads and
 * writes core's (read.c, write.c).
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
	if (!fp->writer && --in->readers == 0)
		in->read_to_ms = rft_now_ms();
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

int eng_fallocate(struct eng *e, struct eng_file *fp, unsigned flags,
		  off_t off, off_t len)
{
	/* Passing through: the backing file is the file until taken. */
	if (fp->pass)
		return pass_fallocate(e, fp, flags, off, len);
	return file_fallocate(e, fp, flags, off, len);
}
