/*
 * lock_pairs.c - the engine's lock wrappers (engine_i.h) in a loop, for
 * lock_bench.c: built twice, with LOCK_PAIRS_CHECKED (the rank checks
 * compiled in, RFT_LOCK_CHECK 1) and without (0: the plain pthread
 * calls), whatever the build says.
 */
#ifdef LOCK_PAIRS_CHECKED
#define RFT_LOCK_CHECK 1
#define LOCK_PAIRS lock_pairs_checked
#else
#define RFT_LOCK_CHECK 0
#define LOCK_PAIRS lock_pairs_plain
#endif

#include "engine_i.h"

void LOCK_PAIRS(struct eng *e, struct file *f, pthread_mutex_t *pass,
		uint64_t rounds);

/*
 * @rounds times what a write and a read take, nested as they nest:
 * ns (read) > file (read); file (write) > pass > store.  Five
 * acquisitions and releases a round.  pass.lock is pass.c's own: @pass
 * stands in for it, taken at its rank as pass_lock takes it.
 */
void LOCK_PAIRS(struct eng *e, struct file *f, pthread_mutex_t *pass,
		uint64_t rounds)
{
	for (uint64_t i = 0; i < rounds; i++) {
		ns_rdlock(e);
		file_rdlock(f);
		file_unlock(f);
		ns_unlock(e);
		file_wrlock(f);
		eng_mutex_lock_at(pass, ENG_RANK_PASS, ENG_AT);
		store_lock(&e->store);
		store_unlock(&e->store);
		eng_mutex_unlock_at(pass, ENG_RANK_PASS, ENG_AT);
		file_unlock(f);
	}
}
