/*
 * rft_lockrank.h - a lock order, checked per thread.
 *
 * A layer numbers its locks (ranks, at most RFT_RANKS_MAX) and says, for
 * each, which ranks a thread may hold while it waits for it (@under).
 * Its lock wrappers call rft_rank_wait() before a blocking acquisition,
 * rft_rank_got() once they hold the lock (a try-lock only when it
 * succeeded: it never waits, so it is allowed anywhere) and rft_rank_put()
 * before they let go.  A thread keeps a count per rank (a rwlock
 * read-held twice counts twice) and where it last took each.
 *
 * A wait for a rank while holding one not in its @under, or a release of
 * a rank the thread does not hold, is reported (which lock, where, what
 * the thread holds and where it took it) and the process aborts: it is a
 * bug of the code, like a chunk freed twice, and a test that meets it
 * fails with the reason.  The report goes to the hook set by
 * rft_rank_on_report(), or to stderr.
 *
 * The bookkeeping costs a thread-local load, a mask test and a store per
 * acquisition; which builds call it is the layer's choice (engine_i.h).
 * The common layer includes nothing from the project.
 */
#ifndef RFT_LOCKRANK_H
#define RFT_LOCKRANK_H

#include <stdbool.h>
#include <stdint.h>

#define RFT_RANKS_MAX 16

struct rft_rank {
	const char *name;	/* as the report shows it */
	uint32_t under;		/* bit r: rank r may be held while waiting */
};

/* This thread's locks; only rft_rank_* touch it. */
struct rft_held {
	uint32_t mask;			/* bit r: n[r] > 0 */
	uint16_t n[RFT_RANKS_MAX];	/* acquisitions not yet released */
	const char *file[RFT_RANKS_MAX]; /* where rank r was last taken */
	int line[RFT_RANKS_MAX];
};

extern _Thread_local struct rft_held rft_held;

/* Report a wait (@waiting) or a release of rank @r, then abort(). */
_Noreturn void rft_rank_fail(const struct rft_rank *ranks, unsigned nranks,
			     unsigned r, bool waiting, const char *file,
			     int line);

/*
 * Where reports go instead of stderr (a daemon's log, syslog once it has
 * detached); @fn gets one line, no newline, and must take no checked
 * lock.  NULL: stderr again.
 */
void rft_rank_on_report(void (*fn)(const char *line));

/* A blocking acquisition of rank @r of @ranks is about to wait. */
static inline void rft_rank_wait(const struct rft_rank *ranks,
				 unsigned nranks, unsigned r, const char *file,
				 int line)
{
	if (rft_held.mask & ~ranks[r].under)
		rft_rank_fail(ranks, nranks, r, true, file, line);
}

/* Rank @r is held now (a blocking acquisition, or a try that worked). */
static inline void rft_rank_got(unsigned r, const char *file, int line)
{
	rft_held.n[r]++;
	rft_held.mask |= 1u << r;
	rft_held.file[r] = file;
	rft_held.line[r] = line;
}

/* Rank @r is about to be let go. */
static inline void rft_rank_put(const struct rft_rank *ranks, unsigned nranks,
				unsigned r, const char *file, int line)
{
	if (rft_held.n[r] == 0)
		rft_rank_fail(ranks, nranks, r, false, file, line);
	if (--rft_held.n[r] == 0)
		rft_held.mask &= ~(1u << r);
}

#endif
