/*
 * evict.h - eviction (evict.c): what the engine and the persist tier call.
 * What it remembers between runs (struct evictor) is evict.c's own.
 */
#ifndef RFT_EVICT_H
#define RFT_EVICT_H

#include <stdbool.h>
#include <stdint.h>

struct eng;

/* Its state; -ENOMEM.  evict_free lets it go (NULL-safe). */
int evict_new(struct eng *e);
void evict_free(struct eng *e);
/*
 * Evict when free chunks fall under 1/8 of the arena, or now (@pressure:
 * a writer waits, or a reader found no free memory), until a quarter is
 * free: fetched copies first (any checkpoint, oldest first), then clean
 * persisted pieces outside the keep window (oldest first).  Takes ns->lock
 * (read) and file locks with trywrlock; sleeps on nothing.
 */
void evict_run(struct eng *e, bool pressure);
/* Chunks eviction could free now. */
uint64_t evict_count(struct eng *e);
/*
 * The store's pressure callback (@ctx: the engine): a thread waiting for
 * memory, holding no lock, evicts for itself rather than waiting for the
 * persist worker to finish what it is writing.
 */
void evict_pressure(void *ctx);

#endif
