/*
 * stripe.c - a parity holder's stripe: its parity row and the members
 * folded into it (issue 9, docs/design.md "Erasure codes across the group").
 *
 * A node that holds parity row @row of a stripe folds each data chunk into
 * it as the chunk arrives, in any order (ers_update_row: the code is linear,
 * so the row is the same whatever the order).  Which member sits in which
 * data slot is kept beside the row, so that a chunk that arrives twice is
 * folded once, a slot taken by another member is refused until that one is
 * unfolded, and an overwrite folds one delta (old XOR new).  A member
 * whose bytes are gone leaves with the row its holder encoded anew from
 * the others (ers_stripe_drop).  A slot with no member reads as zeros.
 * Pure bookkeeping over the caller's buffers: no locks, no allocation, no
 * I/O.
 */
#include <errno.h>
#include <string.h>

#include "erasure.h"
#include "erasure_i.h"

int ers_stripe_init(struct ers_stripe *st, const struct ers_codec *c, int row,
		    size_t len, uint8_t *parity)
{
	const struct ers_scheme *s = c ? ers_codec_scheme(c) : NULL;

	if (!st || !s || !parity || row < 0 || row >= s->m) {
		ers_set_error("stripe: NULL codec, row buffer, or row outside "
			      "0..m-1");
		return -EINVAL;
	}
	memset(st, 0, sizeof(*st));
	st->c = c;
	st->k = s->k;
	st->row = row;
	st->len = len;
	st->parity = parity;
	memset(parity, 0, len);
	return 0;
}

static int check(const struct ers_stripe *st, int slot, const uint8_t *data,
		 size_t dlen)
{
	if (!st || !st->c || slot < 0 || slot >= st->k || !data ||
	    dlen > st->len) {
		ers_set_error("stripe: bad slot %d or data of %zu bytes", slot,
			      dlen);
		return -EINVAL;
	}
	return 0;
}

int ers_stripe_fold(struct ers_stripe *st, int slot, uint64_t id,
		    uint32_t crc, const uint8_t *data, size_t dlen)
{
	struct ers_stripe_member *mb;
	int rc = check(st, slot, data, dlen);

	if (rc)
		return rc;
	mb = &st->member[slot];
	if (mb->in) {
		if (mb->id == id && mb->crc == crc && mb->len == dlen)
			return 1; /* here already: a repeat */
		ers_set_error("stripe: slot %d holds another member", slot);
		return -EEXIST;
	}
	/* Bytes past @dlen are zeros: they add nothing to the row. */
	rc = ers_update_row(st->c, dlen, slot, st->row, data, st->parity);
	if (rc)
		return rc;
	*mb = (struct ers_stripe_member){ id, crc, (uint32_t)dlen, true };
	st->members++;
	return 0;
}

int ers_stripe_unfold(struct ers_stripe *st, int slot, uint64_t id,
		      const uint8_t *data, size_t dlen)
{
	struct ers_stripe_member *mb;
	int rc = check(st, slot, data, dlen);

	if (rc)
		return rc;
	mb = &st->member[slot];
	if (!mb->in || mb->id != id || mb->len != dlen) {
		ers_set_error("stripe: slot %d does not hold that member", slot);
		return -ENOENT;
	}
	/* In GF(2^8) x + x = 0: folding the same bytes again takes them out. */
	rc = ers_update_row(st->c, dlen, slot, st->row, data, st->parity);
	if (rc)
		return rc;
	memset(mb, 0, sizeof(*mb));
	st->members--;
	return 0;
}

int ers_stripe_replace(struct ers_stripe *st, int slot, uint64_t old_id,
		       uint64_t id, uint32_t crc, const uint8_t *delta,
		       size_t dlen)
{
	struct ers_stripe_member *mb;
	int rc = check(st, slot, delta, dlen);

	if (rc)
		return rc;
	mb = &st->member[slot];
	if (!mb->in || mb->id != old_id) {
		ers_set_error("stripe: slot %d does not hold that member", slot);
		return -ENOENT;
	}
	if (dlen < mb->len) {
		/* The delta must cover the old bytes to take them out. */
		ers_set_error("stripe: delta of %zu bytes, the member has %u",
			      dlen, mb->len);
		return -EINVAL;
	}
	rc = ers_update_row(st->c, dlen, slot, st->row, delta, st->parity);
	if (rc)
		return rc;
	*mb = (struct ers_stripe_member){ id, crc, (uint32_t)dlen, true };
	return 0;
}

int ers_stripe_drop(struct ers_stripe *st, int slot, uint64_t id,
		    const uint8_t *row, size_t rlen)
{
	struct ers_stripe_member *mb;
	int rc = check(st, slot, row, rlen);

	if (rc)
		return rc;
	mb = &st->member[slot];
	if (!mb->in || mb->id != id) {
		ers_set_error("stripe: slot %d does not hold that member", slot);
		return -ENOENT;
	}
	memcpy(st->parity, row, rlen);
	memset(st->parity + rlen, 0, st->len - rlen);
	memset(mb, 0, sizeof(*mb));
	st->members--;
	return 0;
}

bool ers_stripe_holds(const struct ers_stripe *st, int slot, uint64_t id,
		      uint32_t crc)
{
	return st && slot >= 0 && slot < st->k && st->member[slot].in &&
	       st->member[slot].id == id && st->member[slot].crc == crc;
}
