/*
 * test_erasure_util.h - helpers shared by the codec tests: a seeded RNG and
 * stripes of caller-owned chunk buffers.
 */
#ifndef RFT_TEST_ERASURE_UTIL_H
#define RFT_TEST_ERASURE_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "erasure.h"

/* xorshift64*: fixed seeds make every failure reproducible. */
static inline uint64_t t_rand(uint64_t *st)
{
	*st ^= *st >> 12;
	*st ^= *st << 25;
	*st ^= *st >> 27;
	return *st * 0x2545F4914F6CDD1DULL;
}

static inline void t_fill(uint64_t *st, uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(t_rand(st) >> 56);
}

/*
 * k + m chunks of len bytes. @off shifts every buffer off its 64-byte
 * alignment so both the aligned and the unaligned XOR paths get exercised.
 * orig[] keeps a copy of the encoded stripe to compare against.
 */
struct t_stripe {
	int k, m;
	size_t len;
	uint8_t *mem[ERS_MAX_K + ERS_MAX_M];
	uint8_t *chunk[ERS_MAX_K + ERS_MAX_M];
	uint8_t *orig[ERS_MAX_K + ERS_MAX_M];
};

static inline struct t_stripe *t_stripe_new(int k, int m, size_t len,
					     size_t off)
{
	struct t_stripe *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->k = k;
	t->m = m;
	t->len = len;
	for (int i = 0; i < k + m; i++) {
		size_t sz = (len + off + 63) / 64 * 64;

		t->mem[i] = aligned_alloc(64, sz);
		t->orig[i] = malloc(len);
		if (!t->mem[i] || !t->orig[i])
			abort();
		t->chunk[i] = t->mem[i] + off;
	}
	return t;
}

static inline void t_stripe_free(struct t_stripe *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->k + t->m; i++) {
		free(t->mem[i]);
		free(t->orig[i]);
	}
	free(t);
}

static inline const uint8_t *const *t_data(const struct t_stripe *t)
{
	return (const uint8_t *const *)t->chunk;
}

static inline uint8_t *const *t_parity(const struct t_stripe *t)
{
	return &t->chunk[t->k];
}

/* Remember the current contents of every chunk as the expected stripe. */
static inline void t_stripe_save(struct t_stripe *t)
{
	for (int i = 0; i < t->k + t->m; i++)
		memcpy(t->orig[i], t->chunk[i], t->len);
}

/* Index of the first chunk differing from orig[], or -1. */
static inline int t_stripe_diff(const struct t_stripe *t)
{
	for (int i = 0; i < t->k + t->m; i++)
		if (memcmp(t->orig[i], t->chunk[i], t->len))
			return i;
	return -1;
}

#endif /* RFT_TEST_ERASURE_UTIL_H */
