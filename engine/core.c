/*
 * core.c - what every part of the engine shares: the event bus by which
 * core tells the tiers and the group what happened, and file ids.  Core's
 * own; the tiers reach it, never the other way round.  And core's
 * workers' state (struct core_io), set up and let go with the engine, and
 * the group's join as the namespace calls wait for it (eng_wait_joined).
 * The names lock is taken through engine_i.h's eng_names_lock().
 */
#include <errno.h>
#include <stdlib.h>

#include "core_i.h"

uint64_t eng_new_file_id(struct eng *e)
{
	/* splitmix64 of seed + counter: distinct, spread, never 0. */
	uint64_t z = e->id_seed +
		     atomic_fetch_add(&e->id_count, 1) * 0x9e3779b97f4a7c15ULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return z ? z : 1;
}

int eng_listen(struct eng *e, eng_listener_fn fn, void *ctx)
{
	if (e->nlisteners == ENG_MAX_LISTENERS)
		return -ENOSPC;
	e->listeners[e->nlisteners].fn = fn;
	e->listeners[e->nlisteners].ctx = ctx;
	e->nlisteners++;
	return 0;
}

void eng_post(struct eng *e, const struct eng_ev *ev)
{
	for (unsigned i = 0; i < e->nlisteners; i++)
		e->listeners[i].fn(e, ev, e->listeners[i].ctx);
}

void eng_piece_source(struct eng *e, const struct piece_source *src)
{
	e->src = src;
}

void eng_spill_source(struct eng *e, const struct spill_source *src)
{
	e->spill_src = src;
}

long eng_spill_found(struct eng *e)
{
	return e->spill_src ? e->spill_src->found(e) : 0;
}

void eng_placement(struct eng *e, const struct placement *pl)
{
	e->placement = pl;
}

struct store *eng_store(struct eng *e)
{
	return &e->store;
}

void eng_count_crc_error(struct eng *e)
{
	atomic_fetch_add(&e->cnt.crc_errors, 1);
}

uint64_t eng_incarnation(const struct eng *e)
{
	return e->inc;
}

bool eng_inval_idle(struct eng *e)
{
	return !e->inval.idle || e->inval.idle(e->inval.ctx);
}

uint64_t eng_ns_count(struct eng *e)
{
	uint64_t n;

	ns_rdlock(e);
	n = e->ns.count;
	ns_unlock(e);
	return n;
}

int eng_group_attach(struct eng *e, const struct eng_group_ops *ops,
		     void *ctx, int node, uint64_t inc)
{
	if (e->gops)
		return -EBUSY;
	if (eng_ns_count(e) > 1)
		return -EEXIST;
	e->node = node;
	e->inc = inc;
	e->gops = ops;
	e->gctx = ctx;
	return 0;
}

int core_io_new(struct eng *e)
{
	e->io = calloc(1, sizeof(*e->io));
	if (!e->io)
		return -ENOMEM;
	pthread_mutex_init(&e->io->loads.lock, NULL);
	/* Waits end at fetch deadlines, which are CLOCK_MONOTONIC. */
	rft_cond_init(&e->io->loads.done);
	return 0;
}

void core_io_free(struct eng *e)
{
	if (!e->io)
		return;
	pthread_mutex_destroy(&e->io->loads.lock);
	pthread_cond_destroy(&e->io->loads.done);
	free(e->io);
	e->io = NULL;
}

bool eng_group_caught_up(struct eng *e)
{
	return !e->gops || atomic_load(&e->caught_up);
}

void eng_joined(struct eng *e)
{
	if (atomic_load(&e->caught_up))
		return;
	leaf_lock(&e->joined_lock, ENG_RANK_JOINED);
	atomic_store(&e->caught_up, true);
	pthread_cond_broadcast(&e->joined);
	leaf_unlock(&e->joined_lock, ENG_RANK_JOINED);
}

int eng_wait_joined(struct eng *e)
{
	uint64_t until = rft_now_ms() + ENG_JOIN_WAIT_MS;

	leaf_lock(&e->joined_lock, ENG_RANK_JOINED);
	while (!atomic_load(&e->caught_up) && rft_now_ms() < until)
		rft_cond_wait_until(&e->joined, &e->joined_lock, until);
	leaf_unlock(&e->joined_lock, ENG_RANK_JOINED);
	return atomic_load(&e->caught_up) ? eng_fresh(e) : -EAGAIN;
}
