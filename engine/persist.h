/*
 * persist.h - the persist tier (persist.c): write-back to the persist dir,
 * its mirror of the namespace, the scan at start and the sidecar.  What
 * the engine's calls use; struct persist is persist.c's own.  Core reaches
 * the tier only by its events and its piece source (engine_i.h).
 */
#ifndef RFT_PERSIST_H
#define RFT_PERSIST_H

#include <stdint.h>

#include "engine.h"

struct persist;

int persist_new(struct eng *e, struct persist **out);
/* Put what the persist dir holds into the namespace, not resident. */
int persist_scan(struct eng *e);
int persist_start(struct eng *e);
/* Write back per @mode and stop the worker; returns the last error. */
int persist_stop(struct eng *e, enum eng_unmount_flush mode);
void persist_free(struct persist *p);
void persist_get_stats(struct eng *e, struct eng_stats *s);
int persist_flush_request(struct eng *e, uint64_t *ticket);
int persist_flush_progress(struct eng *e, uint64_t ticket,
			   struct eng_flush_progress *p);
/*
 * fsync under --sync persist: finish @c (ENG_LATER) once @version of
 * @in's data, or a later one, is in the persist dir, written back now
 * whatever --persist-every says, its writer open or not (in a group once
 * this node's seal of it applied); EIO when its write-back fails, the
 * file is lost, or it cannot be written back within 30 s.  0 when it is
 * there already (or there is no persist dir), -errno.
 */
int persist_sync(struct eng *e, struct inode *in, uint64_t version,
		 struct eng_call *c);

#endif
