/*
 * rft_clock.c - condition variables on the monotonic clock (rft_clock.h).
 */
#include "rft_clock.h"

void rft_cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
}
