/*
 * store.c - the chunk arena and the memory budget.
 *
 * One anonymous mapping of the whole budget, advised to use transparent
 * huge pages: copying into never-touched 4 KiB pages runs at a third of the
 * speed of huge pages (../docs/benchmarks.md).  Free chunks sit on a LIFO
 * stack, so the chunks reused first are the ones already faulted in.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "engine_i.h"

int store_init(struct store *s, uint64_t bytes, uint32_t chunk_size,
	       bool prefault)
{
	uint64_t n;
	int rc;

	memset(s, 0, sizeof(*s));
	if (chunk_size < RFT_CHUNK_MIN || chunk_size > RFT_CHUNK_MAX ||
	    (chunk_size & (chunk_size - 1)))
		return -EINVAL;
	n = bytes / chunk_size;
	if (n == 0 || n >= SLOT_PERSIST)
		return -EINVAL;

	s->chunk_size = chunk_size;
	s->chunk_shift = (unsigned)__builtin_ctz(chunk_size);
	s->nchunks = (uint32_t)n;
	s->bytes = n * chunk_size;

	s->base = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (s->base == MAP_FAILED) {
		rc = -errno;
		s->base = NULL;
		return rc;
	}
	/* Best effort: without THP the arena still works, only slower. */
	if (madvise(s->base, s->bytes, MADV_HUGEPAGE) < 0)
		rft_info("no transparent huge pages for the arena: %s",
			 strerror(errno));
	if (prefault) {
		if (madvise(s->base, s->bytes, MADV_POPULATE_WRITE) < 0)
			rft_warn("prefault of %llu bytes failed: %s",
				 (unsigned long long)s->bytes, strerror(errno));
		else
			s->prefaulted = s->bytes;
	}

	s->refs = calloc(n, sizeof(*s->refs));
	s->free_stack = malloc(n * sizeof(*s->free_stack));
	if (!s->refs || !s->free_stack) {
		rc = -ENOMEM;
		goto fail;
	}
	/* Low indices on top: first use fills the arena from its start. */
	for (uint32_t i = 0; i < n; i++)
		s->free_stack[i] = (uint32_t)(n - 1 - i);
	s->nfree = (uint32_t)n;

	pthread_mutex_init(&s->lock, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&s->freed, &ca);
		pthread_condattr_destroy(&ca);
	}
	return 0;

fail:
	free((void *)s->refs);
	free(s->free_stack);
	munmap(s->base, s->bytes);
	memset(s, 0, sizeof(*s));
	return rc;
}

#define PREFAULT_STEP (64ULL << 20)

static void *prefault_main(void *arg)
{
	struct store *s = arg;
	sigset_t sigs;

	sigfillset(&sigs);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	/* Let writers and the FUSE threads go first. */
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
	/* Low chunk indices are handed out first: fault those first. */
	while (!atomic_load(&s->prefault_stop) && s->prefaulted < s->bytes) {
		uint64_t off = s->prefaulted;
		uint64_t n = s->bytes - off < PREFAULT_STEP ? s->bytes - off
							    : PREFAULT_STEP;

		/* Pages already present (in use) are left as they are. */
		if (madvise(s->base + off, n, MADV_POPULATE_WRITE) < 0) {
			rft_info("background prefault stopped at %llu bytes: %s",
				 (unsigned long long)off, strerror(errno));
			break;
		}
		atomic_store(&s->prefaulted, off + n);
	}
	return NULL;
}

int store_prefault_start(struct store *s)
{
	int rc;

	if (s->prefaulted >= s->bytes)
		return 0;
	atomic_store(&s->prefault_stop, false);
	rc = -pthread_create(&s->prefaulter, NULL, prefault_main, s);
	s->prefaulting = rc == 0;
	return rc;
}

void store_prefault_stop(struct store *s)
{
	if (!s->prefaulting)
		return;
	atomic_store(&s->prefault_stop, true);
	pthread_join(s->prefaulter, NULL);
	s->prefaulting = false;
}

void store_fini(struct store *s)
{
	if (!s->base)
		return;
	store_prefault_stop(s);
	pthread_cond_destroy(&s->freed);
	pthread_mutex_destroy(&s->lock);
	free((void *)s->refs);
	free(s->free_stack);
	munmap(s->base, s->bytes);
	memset(s, 0, sizeof(*s));
}

static bool pop_locked(struct store *s, uint32_t *id)
{
	if (s->nfree == 0)
		return false;
	*id = s->free_stack[--s->nfree];
	atomic_store_explicit(&s->refs[*id], 1, memory_order_release);
	return true;
}

int store_try_alloc(struct store *s, uint32_t *id)
{
	bool ok;

	pthread_mutex_lock(&s->lock);
	ok = pop_locked(s, id);
	pthread_mutex_unlock(&s->lock);
	return ok ? 0 : -ENOSPC;
}

void store_deadline(unsigned wait_ms, struct timespec *deadline)
{
	clock_gettime(CLOCK_MONOTONIC, deadline);
	deadline->tv_sec += wait_ms / 1000;
	deadline->tv_nsec += (long)(wait_ms % 1000) * 1000000L;
	if (deadline->tv_nsec >= 1000000000L) {
		deadline->tv_sec++;
		deadline->tv_nsec -= 1000000000L;
	}
}

int store_wait_free(struct store *s, const struct timespec *deadline)
{
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	s->waiters++;
	while (s->nfree == 0) {
		/* Ask for eviction, then wait for a chunk to be put back. */
		if (s->pressure) {
			pthread_mutex_unlock(&s->lock);
			s->pressure(s->pressure_ctx);
			pthread_mutex_lock(&s->lock);
			if (s->nfree)
				break;
		}
		if (pthread_cond_timedwait(&s->freed, &s->lock, deadline) ==
		    ETIMEDOUT) {
			if (s->nfree == 0)
				rc = -ENOSPC;
			break;
		}
	}
	s->waiters--;
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int store_alloc(struct store *s, unsigned wait_ms, uint32_t *id)
{
	struct timespec deadline;

	if (store_try_alloc(s, id) == 0)
		return 0;
	store_deadline(wait_ms, &deadline);
	/* Another waiter may take the chunk we were woken for: go again. */
	while (store_wait_free(s, &deadline) == 0)
		if (store_try_alloc(s, id) == 0)
			return 0;
	return store_try_alloc(s, id);
}

void store_get(struct store *s, uint32_t id)
{
	atomic_fetch_add_explicit(&s->refs[id], 1, memory_order_relaxed);
}

void store_put(struct store *s, uint32_t id)
{
	if (atomic_fetch_sub_explicit(&s->refs[id], 1, memory_order_acq_rel) !=
	    1)
		return;
	pthread_mutex_lock(&s->lock);
	s->free_stack[s->nfree++] = id;
	if (s->waiters)
		pthread_cond_broadcast(&s->freed);
	pthread_mutex_unlock(&s->lock);
}

uint32_t store_free_count(struct store *s)
{
	uint32_t n;

	pthread_mutex_lock(&s->lock);
	n = s->nfree;
	pthread_mutex_unlock(&s->lock);
	return n;
}
