/*
 * spill.h - the spill tier (spill.c): local disk below RAM, --spill
 * DIR[:SIZE].  Eviction (evict.c) writes sealed pieces there when memory
 * runs short; core reads them back through struct spill_source
 * (engine_i.h).  struct spill is spill.c's own.
 */
#ifndef RFT_SPILL_H
#define RFT_SPILL_H

#include <stdint.h>

#include "engine.h"

struct eng;
struct spill_pick;

/* Open cfg->spill_dir as e->spill (what an earlier daemon left stays until
 * struct spill_source's found looks); 0 at once without one, -errno. */
int spill_new(struct eng *e);
void spill_free(struct eng *e);
/* Is there room for @bytes more?  (The files of files gone go first.) */
bool spill_room(struct eng *e, uint64_t bytes);
/*
 * Write pieces @p[0..n) of file @file_id (their chunks pinned by the
 * caller) into its spill file, and make them durable there: how many of
 * the first are in (0..n), or -errno.  No lock held; one caller at a time
 * (eviction's spill step, under its own mutex).
 */
int spill_write(struct eng *e, uint64_t file_id, const struct spill_pick *p,
		uint32_t n);
/* File @file_id is gone: its spill file goes with the next write.  A
 * leaf lock only. */
void spill_forget(struct eng *e, uint64_t file_id);
void spill_get_stats(struct eng *e, struct eng_stats *s);

#endif
