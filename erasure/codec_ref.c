/*
 * codec_ref.c - reference twins of the codec fast paths.
 *
 * Written to be checked by eye, not to be fast: GF(2^8) multiply by shift
 * and add, inverse by search, matrices built from their definitions, one
 * byte at a time. Nothing here calls ISA-L, so agreement with the fast
 * paths is evidence about both.
 */
#include <errno.h>
#include <string.h>

#include "erasure_i.h"

#define REF_MAX_N (ERS_MAX_K + ERS_MAX_M)

/* x^8 = x^4 + x^3 + x^2 + 1: the field ISA-L uses (polynomial 0x11D). */
uint8_t ers_gf_mul_ref(uint8_t a, uint8_t b)
{
	uint8_t p = 0;

	while (b) {
		if (b & 1)
			p ^= a;
		a = (uint8_t)((a << 1) ^ (a & 0x80 ? 0x1D : 0));
		b >>= 1;
	}
	return p;
}

static uint8_t ref_gf_inv(uint8_t a)
{
	for (int b = 1; b < 256; b++)
		if (ers_gf_mul_ref(a, (uint8_t)b) == 1)
			return (uint8_t)b;
	return 0; /* 0 has no inverse; callers never ask */
}

/*
 * The (k + m) x k generator matrix, row-major: identity on top; below it
 * the Cauchy rows 1 / (i XOR j) for rs (ISA-L's gf_gen_cauchy1_matrix
 * convention), all-ones rows for xor and replicate (each parity is the XOR
 * of the data; with k = 1 that is a copy).
 */
static void ref_matrix(const struct ers_scheme *s, uint8_t *a)
{
	int k = s->k;

	memset(a, 0, (size_t)(k + s->m) * k);
	for (int i = 0; i < k; i++)
		a[i * k + i] = 1;
	for (int i = k; i < k + s->m; i++)
		for (int j = 0; j < k; j++)
			a[i * k + j] = s->kind == ERS_RS ?
					       ref_gf_inv((uint8_t)(i ^ j)) :
					       1;
}

/* out ^= c * in, one byte at a time through a 256-entry product table. */
static void ref_mul_acc(size_t len, uint8_t c, const uint8_t *in, uint8_t *out)
{
	uint8_t t[256];

	for (int x = 0; x < 256; x++)
		t[x] = ers_gf_mul_ref(c, (uint8_t)x);
	for (size_t i = 0; i < len; i++)
		out[i] ^= t[in[i]];
}

/* Gauss-Jordan inversion of the n x n matrix @a (destroyed) into @inv. */
static int ref_invert(uint8_t *a, uint8_t *inv, int n)
{
	memset(inv, 0, (size_t)n * n);
	for (int i = 0; i < n; i++)
		inv[i * n + i] = 1;
	for (int col = 0; col < n; col++) {
		int piv = col;
		uint8_t f;

		while (piv < n && !a[piv * n + col])
			piv++;
		if (piv == n)
			return -EINVAL;
		for (int j = 0; j < n; j++) {
			uint8_t t = a[col * n + j];

			a[col * n + j] = a[piv * n + j];
			a[piv * n + j] = t;
			t = inv[col * n + j];
			inv[col * n + j] = inv[piv * n + j];
			inv[piv * n + j] = t;
		}
		f = ref_gf_inv(a[col * n + col]);
		for (int j = 0; j < n; j++) {
			a[col * n + j] = ers_gf_mul_ref(f, a[col * n + j]);
			inv[col * n + j] = ers_gf_mul_ref(f, inv[col * n + j]);
		}
		for (int r = 0; r < n; r++) {
			if (r == col || !a[r * n + col])
				continue;
			f = a[r * n + col];
			for (int j = 0; j < n; j++) {
				a[r * n + j] ^=
					ers_gf_mul_ref(f, a[col * n + j]);
				inv[r * n + j] ^=
					ers_gf_mul_ref(f, inv[col * n + j]);
			}
		}
	}
	return 0;
}

int ers_encode_ref(const struct ers_scheme *s, size_t len,
		   const uint8_t *const *data, uint8_t *const *parity)
{
	uint8_t a[REF_MAX_N * ERS_MAX_K];
	int rc = ers_scheme_check(s);

	if (rc)
		return rc;
	if (!data || !parity)
		return -EINVAL;
	ref_matrix(s, a);
	for (int r = 0; r < s->m; r++) {
		memset(parity[r], 0, len);
		for (int j = 0; j < s->k; j++)
			ref_mul_acc(len, a[(s->k + r) * s->k + j], data[j],
				    parity[r]);
	}
	return 0;
}

int ers_update_ref(const struct ers_scheme *s, size_t len, int data_index,
		   const uint8_t *delta, uint8_t *const *parity)
{
	uint8_t a[REF_MAX_N * ERS_MAX_K];
	int rc = ers_scheme_check(s);

	if (rc)
		return rc;
	if (data_index < 0 || data_index >= s->k || !delta || !parity)
		return -EINVAL;
	ref_matrix(s, a);
	for (int r = 0; r < s->m; r++)
		ref_mul_acc(len, a[(s->k + r) * s->k + data_index], delta,
			    parity[r]);
	return 0;
}

/*
 * Solve for the data from the first k intact members, write the lost data
 * slots, then re-encode the lost parity rows from the now complete data.
 */
int ers_decode_ref(const struct ers_scheme *s, size_t len, const int *lost,
		   int nlost, uint8_t *const *chunks)
{
	uint8_t a[REF_MAX_N * ERS_MAX_K];
	uint8_t sub[ERS_MAX_K * ERS_MAX_K], inv[ERS_MAX_K * ERS_MAX_K];
	uint8_t lostmask[REF_MAX_N];
	int surv[ERS_MAX_K];
	int k, n, rc;

	rc = ers_scheme_check(s);
	if (rc)
		return rc;
	k = s->k;
	rc = ers_check_lost(k, s->m, lost, nlost, lostmask);
	if (rc)
		return rc;
	if (!chunks)
		return -EINVAL;
	ref_matrix(s, a);
	n = 0;
	for (int i = 0; i < k + s->m && n < k; i++)
		if (!lostmask[i])
			surv[n++] = i;
	for (int i = 0; i < k; i++)
		memcpy(&sub[i * k], &a[surv[i] * k], (size_t)k);
	rc = ref_invert(sub, inv, k);
	if (rc)
		return rc;
	for (int d = 0; d < k; d++) {
		if (!lostmask[d])
			continue;
		memset(chunks[d], 0, len);
		for (int j = 0; j < k; j++)
			ref_mul_acc(len, inv[d * k + j], chunks[surv[j]],
				    chunks[d]);
	}
	for (int p = k; p < k + s->m; p++) {
		if (!lostmask[p])
			continue;
		memset(chunks[p], 0, len);
		for (int j = 0; j < k; j++)
			ref_mul_acc(len, a[p * k + j], chunks[j], chunks[p]);
	}
	return 0;
}
