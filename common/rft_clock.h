/*
 * rft_clock.h - the one clock of reftfs (CLOCK_MONOTONIC) and deadlines on it.
 *
 * Every deadline in reftfs is on CLOCK_MONOTONIC, so that a step of the
 * wall clock neither cuts a wait short nor stretches it.  Two forms are in
 * use, and both are here: a deadline in milliseconds (a uint64_t from
 * rft_deadline_ms(), compared with rft_now_ms()), and an absolute struct
 * timespec for pthread_cond_timedwait() on a condition variable that
 * rft_cond_init() set up.
 *
 * The common layer includes nothing from the project.
 */
#ifndef RFT_CLOCK_H
#define RFT_CLOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define RFT_NS_PER_MS 1000000L
#define RFT_NS_PER_S 1000000000L

/* Milliseconds on CLOCK_MONOTONIC. */
static inline uint64_t rft_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Nanoseconds on CLOCK_MONOTONIC. */
static inline uint64_t rft_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A deadline @timeout_ms from now, in CLOCK_MONOTONIC ms. */
static inline uint64_t rft_deadline_ms(uint64_t timeout_ms)
{
	return rft_now_ms() + timeout_ms;
}

/* Milliseconds left until @deadline_ms; 0 once it has passed. */
static inline uint64_t rft_ms_left(uint64_t deadline_ms)
{
	uint64_t now = rft_now_ms();

	return deadline_ms > now ? deadline_ms - now : 0;
}

/* Has @deadline_ms passed? */
static inline bool rft_expired_ms(uint64_t deadline_ms)
{
	return rft_now_ms() >= deadline_ms;
}

/* CLOCK_MONOTONIC ms @ms as an absolute timespec, into @ts. */
static inline void rft_ts_at(struct timespec *ts, uint64_t ms)
{
	ts->tv_sec = (time_t)(ms / 1000);
	ts->tv_nsec = (long)(ms % 1000) * RFT_NS_PER_MS;
}

/* @ts as CLOCK_MONOTONIC milliseconds. */
static inline uint64_t rft_ts_ms(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * 1000 + (uint64_t)ts->tv_nsec / 1000000;
}

/* @ts as CLOCK_MONOTONIC nanoseconds. */
static inline uint64_t rft_ts_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * 1000000000u + (uint64_t)ts->tv_nsec;
}

/* An absolute CLOCK_MONOTONIC timespec @ms from now, into @ts. */
static inline void rft_deadline_ts(struct timespec *ts, uint64_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(ms / 1000);
	ts->tv_nsec += (long)(ms % 1000) * RFT_NS_PER_MS;
	if (ts->tv_nsec >= RFT_NS_PER_S) {
		ts->tv_sec++;
		ts->tv_nsec -= RFT_NS_PER_S;
	}
}

/* Has the CLOCK_MONOTONIC timespec @deadline passed? */
static inline bool rft_expired_ts(const struct timespec *deadline)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > deadline->tv_sec ||
	       (now.tv_sec == deadline->tv_sec &&
		now.tv_nsec >= deadline->tv_nsec);
}

/*
 * Initialize @cv for pthread_cond_timedwait() deadlines on CLOCK_MONOTONIC.
 * Every condition variable that waits with a deadline is made here.
 */
void rft_cond_init(pthread_cond_t *cv);

/*
 * Wait on @cv (made by rft_cond_init) with @m held until woken or the
 * CLOCK_MONOTONIC ms @until_ms.  0, or ETIMEDOUT (pthread's positive code).
 */
static inline int rft_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *m,
				      uint64_t until_ms)
{
	struct timespec ts;

	rft_ts_at(&ts, until_ms);
	return pthread_cond_timedwait(cv, m, &ts);
}

#endif /* RFT_CLOCK_H */
