/*
 * parity.c - erasure-coded protection across the group: --protect xor and
 * rs:K+M (issue 9).
 *
 * Stripes.  When a file's SEAL is applied, its pieces take the next chunk
 * numbers of its owner in its checkpoint's stripe space (file.c,
 * take_chunks: every node numbers alike, from the log order).  Piece i is
 * the owner's chunk number chunk_base + i, and ers_layout_locate() names
 * its stripe and data slot; the stripe's parity rows sit on the nodes
 * ers_layout_node() gives, rotating from stripe to stripe.  The owner
 * keeps its data whole and local.
 *
 * Folding.  The owner sends each piece to the parity holders of its
 * stripe (PAR_T_FOLD).  A holder keeps one row per stripe it holds parity
 * for (an arena chunk, counted against its --mem) and folds each piece in
 * as it comes, in any order (ers_stripe_fold: XOR, or ISA-L's update for
 * one row); a repeat is a no-op.  PAR_T_DONE then asks whether every piece
 * of that seal in the holder's stripes is folded in.  When every holder
 * says so, the owner appends PROTECT (protect.c).  A seal that is
 * replaced (a rewrite) or unlinked is taken out again by the same bytes
 * (PAR_T_UNFOLD), which the owner keeps pinned until then.
 *
 * Orphans.  An owner that loses its memory (a LOST: a restart, a
 * replacement) loses the bytes it kept to take its members out again.
 * Its members in the rows here become orphans (parity_node_lost): one
 * whose seal is no longer its file's (rewritten or unlinked while its
 * owner was down, or later by a node that never had its bytes) would
 * count bytes nobody has, and a decode of any other member of its stripe
 * would fail for good.  The holder takes it out itself: its row encoded
 * anew from the other members (fetched from their owners, checked)
 * replaces the old one (parity_drop_orphans, on protect.c's sender).  An
 * orphan its owner asks about again (the DONE after its rebuild) is its
 * owner's again.
 *
 * Reconstructing reads.  A piece whose owner is gone is rebuilt from its
 * stripe: the holders' rows (PAR_T_GET gives a row and the members folded
 * into it) and the other members' pieces from their owners, decoded
 * (ers_decode), then checked against the piece's CRC32C: never wrong bytes.
 *
 * Frames (docs/protocol.md, "Parity frames"), meta little-endian:
 *   PAR_T_FOLD, PAR_T_UNFOLD
 *       u64 ckpt, u64 stripe, u64 ino, u64 gseal, u32 scheme, u32 slot,
 *       u32 piece, u32 len, u32 crc, u32 0; bulk: the piece (len bytes, 0
 *       for a hole).  No answer: the DONE that follows tells.
 *   PAR_T_DONE
 *       u64 ino, u64 gseal, u64 ckpt, u64 chunk_base, u32 npieces, u32
 *       scheme, u32 flags (PAR_DONE_GONE: are they all out again?), u32 0.
 *       Answered as gns_i.h says (PROT_MAP_BITS): status 0 when every
 *       piece this node holds a row for is folded (or out), else why
 *       not, and a bit per piece still to send: the owner sends only
 *       those, so a retry does not send again what the holder folded.
 *   PAR_T_GET
 *       u64 ckpt, u64 stripe, u32 scheme, u32 0.  Answered with u32 k, u32
 *       row, then per data slot u64 ino, u64 gseal, u32 piece, u32 len,
 *       u32 crc, u32 in (0/1); bulk: the row.  -ENOENT: no member here.
 *
 * Locks: par->lock guards the stripe table and the decodes in flight;
 * it is taken with no engine lock held, and only store->lock is taken
 * under it (a row's chunk).  Folds and copies of a row happen under it,
 * never a wait (decode_begin waits on par->decoded, which lets it go).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"
#include "erasure.h"
#include "group.h"
#include "group_i.h"
#include "gns_i.h"

#define PAR_BUCKETS 16384
#define PAR_DONE_GONE 0x1
#define PAR_FOLD_META 56
#define PAR_DONE_META 48
#define PAR_GET_META 24
#define PAR_MEMBER_META 32
#define PAR_DECODING_MAX 64

/* One stripe this node holds a parity row of. */
struct pstripe {
	struct pstripe *next;
	uint64_t ckpt, stripe;
	uint32_t chunk;		/* the row: a block as long as the longest
				   member, or a chunk (st.len its bytes) */
	struct ers_stripe st;	/* id of a member: its gseal */
	struct {
		uint64_t ino;
		uint32_t piece;
		bool orphan;	/* its owner lost its bytes */
	} who[ERS_MAX_K];
};

struct parity {
	struct eng *e;
	struct store *st;	/* the engine's arena: rows live in it */
	struct peer_xport *x;
	struct memb *memb;
	int self, nodes;
	struct ers_scheme s;
	struct ers_layout l;
	struct ers_codec *c;
	uint32_t code;

	pthread_mutex_t lock;
	struct pstripe **tab;	/* lock */
	uint64_t rows;		/* lock */
	uint64_t row_bytes;	/* lock: the bytes of every row */
	uint64_t orphans;	/* lock: members with who[].orphan */
	/*
	 * Decode and scrub buffers, (1 + k + m) chunks each, kept for the
	 * next one: a fresh one costs page faults worth more than the
	 * decode (lock).
	 */
	struct scratch {
		struct scratch *next;
	} *scratch;
	/*
	 * Buffers a fold's bytes are received into, a chunk each, kept for
	 * the next fold (lock): from the heap, not the arena, so that the
	 * last free chunk can still become a new row.
	 */
	struct scratch *rxbufs;
	/*
	 * Stripes being decoded now: a second reader of the same stripe
	 * (another piece lost with the first) waits for that decode, which
	 * keeps every lost member it rebuilt, instead of decoding again.
	 */
	struct { uint64_t ckpt, stripe; } decoding[PAR_DECODING_MAX]; /* lock */
	unsigned ndecoding;	/* lock */
	pthread_cond_t decoded;	/* a decode ended */
	/*
	 * Per owner node, the last seal a fold of which was refused here,
	 * and why (-ENOSPC, -ENOMEM: no memory; -EBADMSG: it came wrong):
	 * the DONE that follows says so (lock).
	 */
	struct par_refusal {
		uint64_t ino, gseal;
		bool unfold;
		int err;
	} refused_by[GRP_MAX_NODES];

	_Atomic uint64_t folds, unfolds, refused, rebuilt, rebuilt_bytes;
	_Atomic uint64_t rebuild_failed, orphans_dropped;
};

/* A receive buffer of one chunk: a kept one, or a new one. */
static uint8_t *rxbuf_get(struct parity *par)
{
	struct scratch *sc;

	leaf_lock(&par->lock, ENG_RANK_PAR);
	sc = par->rxbufs;
	if (sc)
		par->rxbufs = sc->next;
	leaf_unlock(&par->lock, ENG_RANK_PAR);
	return sc ? (uint8_t *)sc : malloc(par->st->chunk_size);
}

static void rxbuf_put(struct parity *par, void *buf)
{
	struct scratch *sc = buf;

	if (!buf)
		return;
	leaf_lock(&par->lock, ENG_RANK_PAR);
	sc->next = par->rxbufs;
	par->rxbufs = sc;
	leaf_unlock(&par->lock, ENG_RANK_PAR);
}

/* A decode buffer of (1 + k + m) chunks: a kept one, or a new one. */
static uint8_t *scratch_get(struct parity *par)
{
	struct scratch *sc;

	leaf_lock(&par->lock, ENG_RANK_PAR);
	sc = par->scratch;
	if (sc)
		par->scratch = sc->next;
	leaf_unlock(&par->lock, ENG_RANK_PAR);
	if (sc)
		return (uint8_t *)sc;
	return malloc((size_t)(1 + par->l.k + par->l.m) *
		      par->st->chunk_size);
}

static void scratch_put(struct parity *par, uint8_t *buf)
{
	struct scratch *sc = (struct scratch *)buf;

	if (!buf)
		return;
	leaf_lock(&par->lock, ENG_RANK_PAR);
	sc->next = par->scratch;
	par->scratch = sc;
	leaf_unlock(&par->lock, ENG_RANK_PAR);
}

/*
 * Register a decode of @stripe: 0 once it is ours (decode_end after), 1
 * after waiting for another thread's decode of it (the caller looks for
 * what that one kept), -ETIMEDOUT past @deadline.
 */
static int decode_begin(struct parity *par, uint64_t ckpt, uint64_t stripe,
			const struct timespec *deadline)
{
	bool waited = false;

	leaf_lock(&par->lock, ENG_RANK_PAR);
	for (;;) {
		bool busy = false;

		for (unsigned i = 0; i < par->ndecoding && !busy; i++)
			busy = par->decoding[i].ckpt == ckpt &&
			       par->decoding[i].stripe == stripe;
		if (!busy)
			break;
		if (pthread_cond_timedwait(&par->decoded, &par->lock,
					   deadline) == ETIMEDOUT) {
			leaf_unlock(&par->lock, ENG_RANK_PAR);
			return -ETIMEDOUT;
		}
		waited = true;
	}
	if (!waited && par->ndecoding < PAR_DECODING_MAX) {
		par->decoding[par->ndecoding].ckpt = ckpt;
		par->decoding[par->ndecoding++].stripe = stripe;
	}
	leaf_unlock(&par->lock, ENG_RANK_PAR);
	return waited ? 1 : 0;
}

static void decode_end(struct parity *par, uint64_t ckpt, uint64_t stripe)
{
	leaf_lock(&par->lock, ENG_RANK_PAR);
	for (unsigned i = 0; i < par->ndecoding; i++)
		if (par->decoding[i].ckpt == ckpt &&
		    par->decoding[i].stripe == stripe) {
			par->decoding[i] = par->decoding[--par->ndecoding];
			break;
		}
	pthread_cond_broadcast(&par->decoded);
	leaf_unlock(&par->lock, ENG_RANK_PAR);
}

/* --- the stripe table ------------------------------------------------------ */

static size_t bucket(uint64_t ckpt, uint64_t stripe)
{
	uint64_t h = ckpt * 0x9E3779B97F4A7C15ULL ^ stripe * 0xC2B2AE3D27D4EB4FULL;

	return (size_t)(h >> 32) % PAR_BUCKETS;
}

static struct pstripe *find(struct parity *par, uint64_t ckpt,
			    uint64_t stripe)
{
	struct pstripe *ps = par->tab[bucket(ckpt, stripe)];

	while (ps && (ps->ckpt != ckpt || ps->stripe != stripe))
		ps = ps->next;
	return ps;
}

/*
 * Make @ps's row at least @len bytes long: members are zeros past their
 * length, and the parity of zeros is zeros, so the row grows by zeros
 * into a bigger block.  par->lock held.  -ENOSPC when memory is short.
 */
static int row_fit(struct parity *par, struct pstripe *ps, uint32_t len)
{
	struct store *st = par->st;
	uint32_t id, cap;

	if (len <= ps->st.len)
		return 0;
	if (store_try_alloc_len(st, len, &id) < 0)
		return -ENOSPC;
	cap = store_cap(st, id);
	memcpy(store_ptr(st, id), ps->st.parity, ps->st.len);
	memset(store_ptr(st, id) + ps->st.len, 0, cap - ps->st.len);
	par->row_bytes += cap - ps->st.len;
	store_put(st, ps->chunk);
	ps->chunk = id;
	ps->st.parity = store_ptr(st, id);
	ps->st.len = cap;
	return 0;
}

/* The row of @ps into @buf, a chunk long: zeros past the row; lock held. */
static void row_copy(struct parity *par, const struct pstripe *ps,
		     uint8_t *buf)
{
	memcpy(buf, ps->st.parity, ps->st.len);
	memset(buf + ps->st.len, 0, par->st->chunk_size - ps->st.len);
}

/*
 * par->lock held.  NULL when memory for the row is short.  A new row is
 * as long as @len, the member about to be folded in (4 KiB at least).
 */
static struct pstripe *find_or_make(struct parity *par, uint64_t ckpt,
				    uint64_t stripe, int row, uint32_t len)
{
	struct pstripe *ps = find(par, ckpt, stripe);
	size_t b;

	if (ps)
		return ps;
	ps = calloc(1, sizeof(*ps));
	if (!ps)
		return NULL;
	if (store_try_alloc_len(par->st, len, &ps->chunk) < 0) {
		free(ps);
		return NULL;
	}
	ers_stripe_init(&ps->st, par->c, row,
			store_cap(par->st, ps->chunk),
			store_ptr(par->st, ps->chunk));
	par->row_bytes += ps->st.len;
	ps->ckpt = ckpt;
	ps->stripe = stripe;
	b = bucket(ckpt, stripe);
	ps->next = par->tab[b];
	par->tab[b] = ps;
	par->rows++;
	return ps;
}

/* par->lock held: a stripe with no member left gives its row back. */
static void drop_if_empty(struct parity *par, struct pstripe *ps)
{
	struct pstripe **pp = &par->tab[bucket(ps->ckpt, ps->stripe)];

	if (ps->st.members)
		return;
	while (*pp != ps)
		pp = &(*pp)->next;
	*pp = ps->next;
	par->row_bytes -= ps->st.len;
	store_put(par->st, ps->chunk);
	free(ps);
	par->rows--;
}

/* This node's parity row in @stripe, or -1 when it holds none there. */
static int my_row(const struct parity *par, uint64_t stripe)
{
	int mi = ers_layout_member(&par->l, stripe, par->self);

	return mi >= par->l.k ? mi - par->l.k : -1;
}

/* --- a holder: receiving ---------------------------------------------------- */

/* Is @f a well-formed fold of a piece @node owns, for a row held here? */
static bool fold_ok(struct parity *par, int node, const struct peer_frame *f,
		    int *row)
{
	const uint8_t *m = f->meta;
	uint64_t stripe, chunk;
	int owner;

	if (f->meta_len != PAR_FOLD_META || rft_get_le32(m + 32) != par->code ||
	    rft_get_le32(m + 52) || f->bulk_len != rft_get_le32(m + 44) ||
	    f->bulk_len > par->st->chunk_size ||
	    (f->bulk_len && f->bulk_crc != rft_get_le32(m + 48)))
		return false;
	stripe = rft_get_le64(m + 8);
	if (rft_get_le32(m + 36) >= (uint32_t)par->l.k ||
	    ers_layout_chunk(&par->l, stripe, (int)rft_get_le32(m + 36), &owner,
			     &chunk) < 0 ||
	    owner != node)
		return false;
	*row = my_row(par, stripe);
	return *row >= 0;
}

/*
 * A fold of @node's (@f) was refused here for @err: noted for the DONE
 * that follows, and logged once per seal.  Takes par->lock.
 */
static void refused(struct parity *par, int node, const struct peer_frame *f,
		    int err)
{
	const uint8_t *m = f->meta;
	uint64_t ino = rft_get_le64(m + 16), gseal = rft_get_le64(m + 24);
	bool unfold = f->type == PAR_T_UNFOLD, news;
	struct par_refusal *r;

	if (node < 0 || node >= GRP_MAX_NODES)
		return;
	leaf_lock(&par->lock, ENG_RANK_PAR);
	r = &par->refused_by[node];
	news = r->ino != ino || r->gseal != gseal || r->unfold != unfold ||
	       r->err != err;
	*r = (struct par_refusal){ ino, gseal, unfold, err };
	leaf_unlock(&par->lock, ENG_RANK_PAR);
	if (news)
		rft_warn("parity: %s of node %d's inode %llu refused here: "
			 "%s%s (it sends what is missing again)",
			 unfold ? "an unfold" : "a fold", node,
			 (unsigned long long)ino, strerror(-err),
			 err == -ENOSPC || err == -ENOMEM
				 ? ", no memory for its row"
				 : "");
}

void *parity_rx_dest(struct parity *par, int node, const struct peer_frame *f,
		     void **cookie)
{
	int row;

	if (!fold_ok(par, node, f, &row))
		return NULL;
	*cookie = rxbuf_get(par);
	return *cookie;
}

int parity_rx_fold(struct parity *par, int node, const struct peer_frame *f,
		   void *cookie, int bulk_rc)
{
	const uint8_t *m = f->meta;
	static const uint8_t none[1];
	const uint8_t *data = cookie ? f->bulk : none;
	struct pstripe *ps;
	int row, slot, rc = 0;

	if (!fold_ok(par, node, f, &row)) {
		rxbuf_put(par, cookie);
		return f->meta_len == PAR_FOLD_META ? 0 : -EPROTO;
	}
	if ((f->bulk_len && !cookie) || bulk_rc) {
		/* No room to receive it, or it came wrong: DONE tells. */
		atomic_fetch_add(&par->refused, 1);
		if (!bulk_rc || bulk_rc == -EBADMSG)
			refused(par, node, f, bulk_rc ? -EBADMSG : -ENOMEM);
		rxbuf_put(par, cookie);
		return 0;
	}
	slot = (int)rft_get_le32(m + 36);
	leaf_lock(&par->lock, ENG_RANK_PAR);
	if (f->type == PAR_T_FOLD) {
		ps = find_or_make(par, rft_get_le64(m), rft_get_le64(m + 8),
				  row, f->bulk_len);
		rc = ps ? row_fit(par, ps, f->bulk_len) : -ENOSPC;
		if (rc == 0)
			rc = ers_stripe_fold(
			    &ps->st, slot, rft_get_le64(m + 24),
			    rft_get_le32(m + 48), data, f->bulk_len);
		if (rc == 0) {
			ps->who[slot].ino = rft_get_le64(m + 16);
			ps->who[slot].piece = rft_get_le32(m + 40);
			ps->who[slot].orphan = false;
			atomic_fetch_add(&par->folds, 1);
		}
	} else {
		ps = find(par, rft_get_le64(m), rft_get_le64(m + 8));
		/* Out only with the bytes it went in with: its CRC too. */
		rc = ps && ps->st.member[slot].crc == rft_get_le32(m + 48)
			     ? ers_stripe_unfold(&ps->st, slot,
						 rft_get_le64(m + 24), data,
						 f->bulk_len)
			     : -ENOENT;
		if (rc == 0) {
			atomic_fetch_add(&par->unfolds, 1);
			if (ps->who[slot].orphan)
				par->orphans--;
			ps->who[slot].orphan = false;
			drop_if_empty(par, ps);
		}
	}
	leaf_unlock(&par->lock, ENG_RANK_PAR);
	if (rc < 0 && rc != -ENOENT) {
		atomic_fetch_add(&par->refused, 1);
		rft_dbg("%s of piece %u of inode %llu into stripe %llu: %s",
			f->type == PAR_T_FOLD ? "fold" : "unfold",
			rft_get_le32(m + 40),
			(unsigned long long)rft_get_le64(m + 16),
			(unsigned long long)rft_get_le64(m + 8), strerror(-rc));
		if (rc == -ENOSPC || rc == -ENOMEM)
			refused(par, node, f, rc);
		/*
		 * Caches give way to rows: evict now, with no lock held,
		 * so that the owner's next try (it asks what is missing)
		 * finds room.
		 */
		if (rc == -ENOSPC)
			store_make_room(par->st);
	}
	rxbuf_put(par, cookie);
	return 0;
}

int parity_rx_done(struct parity *par, int node, const struct peer_frame *f,
		   uint8_t **meta, uint32_t *meta_len)
{
	const uint8_t *m = f->meta;
	uint64_t ino = rft_get_le64(m), gseal = rft_get_le64(m + 8),
		 ckpt = rft_get_le64(m + 16);
	uint64_t base = rft_get_le64(m + 24);
	uint32_t n = rft_get_le32(m + 32), flags = rft_get_le32(m + 40), nbits,
		 missing = 0;
	bool gone = flags & PAR_DONE_GONE;
	uint8_t *a;
	int rc = 0, why = 0;

	if (f->meta_len != PAR_DONE_META || rft_get_le32(m + 36) != par->code ||
	    flags & ~(uint32_t)PAR_DONE_GONE || rft_get_le32(m + 44) ||
	    f->bulk_len)
		return -EINVAL;
	/* No seal has more pieces than the largest file. */
	if (n > (RFT_MAX_FILE_SIZE >> par->st->chunk_shift) + 1)
		return -EINVAL;
	nbits = n < PROT_MAP_BITS ? n : PROT_MAP_BITS;
	a = calloc(1, 8 + (nbits + 7) / 8);
	if (!a)
		return -ENOMEM;
	leaf_lock(&par->lock, ENG_RANK_PAR);
	for (uint32_t i = 0; i < n; i++) {
		struct pstripe *ps;
		uint64_t stripe;
		int slot;
		bool in;

		if (ers_layout_locate(&par->l, node, base + i, &stripe,
				      &slot) < 0) {
			rc = -EINVAL;
			break;
		}
		if (my_row(par, stripe) < 0)
			continue;
		ps = find(par, ckpt, stripe);
		in = ps && ps->st.member[slot].in &&
		     ps->st.member[slot].id == gseal &&
		     ps->who[slot].ino == ino;
		if (in && !gone && ps->who[slot].orphan) {
			/* Its owner has its bytes again (a rebuild). */
			ps->who[slot].orphan = false;
			par->orphans--;
		}
		if (in != gone)
			continue;
		missing++;
		if (i < nbits)
			a[8 + i / 8] |= (uint8_t)(1u << (i % 8));
	}
	if (missing && node >= 0 && node < GRP_MAX_NODES &&
	    par->refused_by[node].ino == ino &&
	    par->refused_by[node].gseal == gseal &&
	    par->refused_by[node].unfold == gone)
		why = par->refused_by[node].err;
	leaf_unlock(&par->lock, ENG_RANK_PAR);
	if (rc < 0) {
		free(a);
		return rc;
	}
	rft_put_le32(a, missing ? (uint32_t)(why ? -why : EAGAIN) : 0);
	rft_put_le32(a + 4, missing ? nbits : 0);
	*meta = a;
	*meta_len = 8 + (missing ? (nbits + 7) / 8 : 0);
	return 0;
}

int parity_rx_get(struct parity *par, int node, const struct peer_frame *f,
		  uint8_t **meta, uint32_t *meta_len, uint8_t **bulk,
		  uint32_t *bulk_len)
{
	const uint8_t *m = f->meta;
	size_t mlen = 8 + (size_t)par->l.k * PAR_MEMBER_META;
	uint32_t len = par->st->chunk_size;
	struct pstripe *ps;
	uint8_t *a, *b;

	(void)node;
	if (f->meta_len != PAR_GET_META || rft_get_le32(m + 16) != par->code ||
	    rft_get_le32(m + 20) || f->bulk_len)
		return -EINVAL;
	a = malloc(mlen);
	b = malloc(len);
	if (!a || !b) {
		free(a);
		free(b);
		return -ENOMEM;
	}
	leaf_lock(&par->lock, ENG_RANK_PAR);
	ps = find(par, rft_get_le64(m), rft_get_le64(m + 8));
	if (ps) {
		rft_put_le32(a, (uint32_t)par->l.k);
		rft_put_le32(a + 4, (uint32_t)ps->st.row);
		for (int s = 0; s < par->l.k; s++) {
			uint8_t *w = a + 8 + (size_t)s * PAR_MEMBER_META;
			const struct ers_stripe_member *mb = &ps->st.member[s];

			rft_put_le64(w, mb->in ? ps->who[s].ino : 0);
			rft_put_le64(w + 8, mb->in ? mb->id : 0);
			rft_put_le32(w + 16, mb->in ? ps->who[s].piece : 0);
			rft_put_le32(w + 20, mb->in ? mb->len : 0);
			rft_put_le32(w + 24, mb->in ? mb->crc : 0);
			rft_put_le32(w + 28, mb->in);
		}
		/* Only the row's bytes: the asker reads zeros past them. */
		len = (uint32_t)ps->st.len;
		memcpy(b, ps->st.parity, len);
	}
	leaf_unlock(&par->lock, ENG_RANK_PAR);
	if (!ps) {
		free(a);
		free(b);
		return -ENOENT;
	}
	*meta = a;
	*meta_len = (uint32_t)mlen;
	*bulk = b;
	*bulk_len = len;
	return 0;
}

/* --- the owner: sending ------------------------------------------------------ */

uint32_t parity_seal_code(const struct parity *par)
{
	return par ? par->code : 0;
}

uint64_t parity_holders_of(const struct parity *par, int owner, uint64_t base,
			   uint32_t n)
{
	uint64_t mask = 0, all = par->nodes >= 64 ? ~0ULL
						  : (1ULL << par->nodes) - 1;

	for (uint32_t i = 0; i < n && mask != (all & ~(1ULL << owner)); i++) {
		uint64_t stripe;
		int slot;

		if (ers_layout_locate(&par->l, owner, base + i, &stripe,
				      &slot) < 0)
			break;
		for (int r = 0; r < par->l.m; r++) {
			int h = ers_layout_node(&par->l, stripe, par->l.k + r);

			if (h >= 0)
				mask |= 1ULL << h;
		}
	}
	return mask;
}

int parity_send(struct parity *par, int h, const struct par_seal *ps,
		const struct file_snap *fs, bool unfold, const uint8_t *need,
		uint8_t *bounce, bool (*pace)(void *ctx, uint64_t len),
		void *pace_ctx, uint64_t *pieces, uint64_t *bytes)
{
	struct eng *e = par->e;
	uint8_t meta[PAR_FOLD_META];

	for (uint32_t i = 0; i < ps->npieces; i++) {
		struct snap_piece sp;
		int where = file_snap_piece(e, fs, i, &sp);
		uint32_t len = sp.len;
		struct peer_frame f = { .type = unfold ? PAR_T_UNFOLD
						       : PAR_T_FOLD,
					.meta = meta, .meta_len = sizeof(meta) };
		uint64_t stripe;
		int slot, rc;

		if (ers_layout_locate(&par->l, par->self, ps->base + i,
				      &stripe, &slot) < 0)
			return -EINVAL;
		if (ers_layout_member(&par->l, stripe, h) < par->l.k)
			continue; /* @h holds no row of this stripe */
		if (!prot_map_has(need, i))
			continue; /* @h has it folded (or out) already */
		if (where == 1) {
			f.bulk = sp.bytes;
			if (sp.fill < len) {
				/* Past fill the piece reads as zeros. */
				memcpy(bounce, f.bulk, sp.fill);
				memset(bounce + sp.fill, 0, len - sp.fill);
				f.bulk = bounce;
			}
			f.bulk_len = len;
			f.bulk_crc = sp.crc;
		} else if (where < 0) {
			return -EAGAIN; /* not all here: a rebuild brings it */
		}
		/* A hole folds as zeros: in its slot, adding nothing. */
		rft_put_le64(meta, ps->ckpt);
		rft_put_le64(meta + 8, stripe);
		rft_put_le64(meta + 16, ps->ino);
		rft_put_le64(meta + 24, ps->gseal);
		rft_put_le32(meta + 32, par->code);
		rft_put_le32(meta + 36, (uint32_t)slot);
		rft_put_le32(meta + 40, i);
		rft_put_le32(meta + 44, f.bulk_len);
		rft_put_le32(meta + 48, f.bulk_len ? sp.crc : 0);
		rft_put_le32(meta + 52, 0);
		if (pace && !pace(pace_ctx, f.bulk_len))
			return -ECANCELED;
		rc = peer_send(par->x, h, &f, PAR_SEND_MS);
		if (rc < 0)
			return rc;
		(*pieces)++;
		*bytes += f.bulk_len;
	}
	return 0;
}

int parity_ask(struct parity *par, int h, const struct par_seal *ps,
	       bool gone, uint8_t *need)
{
	uint8_t meta[PAR_DONE_META], *ans = malloc(PROT_MAP_ANSWER_MAX);
	struct peer_frame f = { .type = PAR_T_DONE, .meta = meta,
				.meta_len = sizeof(meta) };
	struct peer_reply rep = { .meta = ans,
				  .meta_cap = PROT_MAP_ANSWER_MAX };
	int rc;

	if (!ans)
		return -ENOMEM;
	rft_put_le64(meta, ps->ino);
	rft_put_le64(meta + 8, ps->gseal);
	rft_put_le64(meta + 16, ps->ckpt);
	rft_put_le64(meta + 24, ps->base);
	rft_put_le32(meta + 32, ps->npieces);
	rft_put_le32(meta + 36, par->code);
	rft_put_le32(meta + 40, gone ? PAR_DONE_GONE : 0);
	rft_put_le32(meta + 44, 0);
	rc = peer_call(par->x, h, &f, &rep, PAR_SEND_MS);
	if (rc == 0)
		rc = prot_map_read(ans, rep.meta_len, ps->npieces, need);
	free(ans);
	return rc;
}

/* --- reconstructing reads ----------------------------------------------------- */

struct member_info {
	uint64_t ino, gseal;
	uint32_t piece, len, crc;
	bool in;
};

static int left_ms(const struct timespec *deadline)
{
	return (int)rft_ms_left(rft_ts_ms(deadline));
}

/* Row @r of @stripe from its holder @h, and the members folded into it. */
static int get_row(struct parity *par, int h, uint64_t ckpt, uint64_t stripe,
		   int r, uint8_t *row, struct member_info *mi,
		   const struct timespec *deadline)
{
	size_t alen = 8 + (size_t)par->l.k * PAR_MEMBER_META;
	uint8_t meta[PAR_GET_META], *ans = malloc(alen);
	struct peer_frame f = { .type = PAR_T_GET, .meta = meta,
				.meta_len = sizeof(meta) };
	struct peer_reply rep = { .meta = ans, .meta_cap = (uint32_t)alen,
				  .bulk = row,
				  .bulk_cap = par->st->chunk_size };
	int left = left_ms(deadline), rc;

	if (!ans)
		return -ENOMEM;
	if (left <= 0) {
		free(ans);
		return -ETIMEDOUT;
	}
	rft_put_le64(meta, ckpt);
	rft_put_le64(meta + 8, stripe);
	rft_put_le32(meta + 16, par->code);
	rft_put_le32(meta + 20, 0);
	rc = peer_call(par->x, h, &f, &rep, left);
	if (rc == 0 &&
	    (rep.meta_len != alen || rft_get_le32(ans) != (uint32_t)par->l.k ||
	     rft_get_le32(ans + 4) != (uint32_t)r ||
	     rep.bulk_len > par->st->chunk_size))
		rc = -EPROTO;
	/* A row as long as its longest member: zeros past it. */
	if (rc == 0)
		memset(row + rep.bulk_len, 0,
		       par->st->chunk_size - rep.bulk_len);
	for (int s = 0; rc == 0 && s < par->l.k; s++) {
		const uint8_t *w = ans + 8 + (size_t)s * PAR_MEMBER_META;

		mi[s] = (struct member_info){ rft_get_le64(w),
					      rft_get_le64(w + 8),
					      rft_get_le32(w + 16),
					      rft_get_le32(w + 20),
					      rft_get_le32(w + 24),
					      rft_get_le32(w + 28) };
		/* A member is at most a chunk: its length sizes reads. */
		if (mi[s].len > par->st->chunk_size ||
		    rft_get_le32(w + 28) > 1)
			rc = -EPROTO;
	}
	free(ans);
	return rc;
}

/* @ps's members as a row's answer names them; par->lock held. */
static void members_of(const struct parity *par, const struct pstripe *ps,
		       struct member_info *mi)
{
	for (int x = 0; x < par->l.k; x++)
		mi[x] = (struct member_info){ ps->who[x].ino,
					      ps->st.member[x].id,
					      ps->who[x].piece,
					      ps->st.member[x].len,
					      ps->st.member[x].crc,
					      ps->st.member[x].in };
}

static bool same_members(const struct member_info *a,
			 const struct member_info *b, int k)
{
	for (int s = 0; s < k; s++)
		if (a[s].in != b[s].in ||
		    (a[s].in && (a[s].ino != b[s].ino ||
				 a[s].gseal != b[s].gseal ||
				 a[s].piece != b[s].piece ||
				 a[s].len != b[s].len || a[s].crc != b[s].crc)))
			return false;
	return true;
}

/*
 * The m rows of @stripe encoded anew into @enc from the members @mi names,
 * each fetched from its owner (checked against its CRC32C) into @data (k
 * chunks); the slots in @skip, and empty ones, read as zeros.  0 or
 * -errno.  No lock held; sleeps.
 */
static int encode_members(struct parity *par, uint64_t stripe,
			  const struct member_info *mi, uint32_t skip,
			  uint8_t **data, uint8_t **enc,
			  const struct timespec *deadline, parity_get_fn *get,
			  void *get_ctx)
{
	uint32_t clen = par->st->chunk_size;
	int rc = 0;

	for (int x = 0; x < par->l.k && rc == 0; x++) {
		uint64_t chunk;
		int node;

		if (skip & (1u << x) || !mi[x].in || !mi[x].len) {
			memset(data[x], 0, clen);
			continue;
		}
		rc = ers_layout_chunk(&par->l, stripe, x, &node, &chunk);
		if (rc == 0)
			rc = get(get_ctx, node, mi[x].ino, mi[x].gseal,
				 mi[x].piece, mi[x].len, mi[x].crc, data[x],
				 deadline);
		if (rc == 0)
			memset(data[x] + mi[x].len, 0, clen - mi[x].len);
	}
	if (rc == 0 &&
	    ers_encode(par->c, clen, (const uint8_t *const *)data, enc) < 0)
		rc = -EIO;
	return rc;
}

static int decode_piece(struct parity *par, const struct eng_piece *pc,
			uint8_t *buf, const struct timespec *deadline,
			parity_get_fn *get, void *get_ctx)
{
	struct eng *e = par->e;
	int k = par->l.k, m = par->l.m, lost[ERS_MAX_K + ERS_MAX_M];
	int order[ERS_MAX_M];
	uint32_t clen = par->st->chunk_size;
	struct member_info mi[ERS_MAX_K], other[ERS_MAX_K];
	uint8_t *chunks[ERS_MAX_K + ERS_MAX_M] = { 0 }, *mem;
	bool have[ERS_MAX_K + ERS_MAX_M] = { 0 }, known = false;
	struct memb_view v;
	uint64_t stripe;
	int slot, nlost = 0, lost_data = 0, rows = 0, rc;

	if (pc->scheme != par->code || pc->len > clen)
		return -EIO;
	rc = ers_layout_locate(&par->l, pc->owner, pc->chunk_base + pc->idx,
			       &stripe, &slot);
	if (rc < 0)
		return -EIO;
	mem = scratch_get(par);
	if (!mem)
		return -ENOMEM;
	for (int i = 0; i < k + m; i++)
		chunks[i] = mem + (size_t)i * clen;
	memb_get_view(par->memb, &v);
	for (int r = 0, n = 0, mine = -1; r < m; r++) {
		if (ers_layout_node(&par->l, stripe, k + r) == par->self)
			mine = r;
		else
			order[n++] = r;
		if (r == m - 1 && mine >= 0)
			order[n] = mine;
	}

	/*
	 * The rows, as many as it takes: one, and one more per member lost.
	 * A row that does not hold the target as sealed is passed over (a
	 * replacement's rows are being folded again, and lack what only a
	 * dead node could send), and every row used must name the same
	 * members.  This node's own row goes last: it is the one most
	 * likely a replacement's.
	 */
	for (int i = 0; i < m; i++) {
		int r = order[i], h = ers_layout_node(&par->l, stripe, k + r);

		if (h < 0 || h == pc->owner || v.node[h].state == MEMB_DEAD)
			continue;
		if (h == par->self) {
			struct pstripe *ps;

			leaf_lock(&par->lock, ENG_RANK_PAR);
			ps = find(par, pc->stripe_ckpt, stripe);
			if (ps) {
				row_copy(par, ps, chunks[k + r]);
				members_of(par, ps, other);
			}
			leaf_unlock(&par->lock, ENG_RANK_PAR);
			rc = ps ? 0 : -ENOENT;
		} else {
			rc = get_row(par, h, pc->stripe_ckpt, stripe, r,
				     chunks[k + r], other, deadline);
		}
		if (rc < 0) {
			rft_dbg("stripe %llu: row %d from node %d: %s",
				(unsigned long long)stripe, r, h,
				strerror(-rc));
			if (rc == -ETIMEDOUT)
				goto out;
			continue;
		}
		if (!other[slot].in || other[slot].ino != pc->ino ||
		    other[slot].gseal != pc->gseal ||
		    other[slot].piece != pc->idx || other[slot].crc != pc->crc) {
			rft_dbg("stripe %llu: row %d on node %d does not hold "
				"piece %u of inode %llu",
				(unsigned long long)stripe, r, h, pc->idx,
				(unsigned long long)pc->ino);
			continue;
		}
		if (known && !same_members(mi, other, k))
			continue;
		have[k + r] = true;
		rows++;
		if (!known) {
			memcpy(mi, other, sizeof(mi));
			known = true;
			/* The other members, from their owners. */
			for (int s = 0; s < k; s++) {
				int node;
				uint64_t chunk;

				if (s == slot)
					continue;
				if (!mi[s].in || !mi[s].len) {
					memset(chunks[s], 0, clen);
					have[s] = true;
					continue;
				}
				if (ers_layout_chunk(&par->l, stripe, s, &node,
						     &chunk) < 0 ||
				    v.node[node].state == MEMB_DEAD) {
					lost_data++;
					continue;
				}
				rc = get(get_ctx, node, mi[s].ino, mi[s].gseal,
					 mi[s].piece, mi[s].len, mi[s].crc,
					 chunks[s], deadline);
				if (rc == -ETIMEDOUT)
					goto out;
				if (rc < 0) {
					lost_data++;
					continue;
				}
				memset(chunks[s] + mi[s].len, 0,
				       clen - mi[s].len);
				have[s] = true;
			}
		}
		if (rows > lost_data)
			break; /* enough: one row per lost data member */
	}
	rc = -EIO;
	if (!known || rows <= lost_data)
		goto out;
	for (int i = 0; i < k + m; i++)
		if (!have[i])
			lost[nlost++] = i;
	if (nlost > m)
		goto out;
	rc = ers_decode(par->c, clen, lost, nlost, chunks);
	if (rc < 0)
		goto out;
	if (ers_crc32c(0, chunks[slot], pc->len) != pc->crc) {
		rft_warn("piece %u of inode %llu rebuilt from stripe %llu "
			 "failed its checksum",
			 pc->idx, (unsigned long long)pc->ino,
			 (unsigned long long)stripe);
		eng_count_crc_error(e);
		rc = -EIO;
		goto out;
	}
	memcpy(buf, chunks[slot], pc->len);
	atomic_fetch_add(&par->rebuilt, 1);
	atomic_fetch_add(&par->rebuilt_bytes, pc->len);
	/*
	 * The other data members it rebuilt (lost too): kept as fetched
	 * copies of their files, checked, for their readers.
	 */
	for (int i = 0; i < nlost; i++) {
		int x = lost[i];

		if (x == slot || x >= k || !mi[x].in || !mi[x].len ||
		    ers_crc32c(0, chunks[x], mi[x].len) != mi[x].crc)
			continue;
		if (file_piece_keep(e, mi[x].ino, mi[x].gseal, mi[x].piece,
				    chunks[x], mi[x].len, mi[x].crc) == 0) {
			atomic_fetch_add(&par->rebuilt, 1);
			atomic_fetch_add(&par->rebuilt_bytes, mi[x].len);
		}
	}
	rc = 0;
out:
	if (rc < 0)
		atomic_fetch_add(&par->rebuild_failed, 1);
	scratch_put(par, mem);
	return rc;
}

/*
 * Scrub one stripe: every live holder's row against the row encoded anew
 * from the members it names (fetched from their owners, checked), and
 * the row must name piece @pc->idx of @pc's seal.
 */
static void scrub_stripe(struct parity *par, const struct eng_piece *pc,
			 uint64_t stripe, int slot, uint8_t *mem,
			 const struct memb_view *v,
			 const struct timespec *deadline, parity_get_fn *get,
			 void *get_ctx, struct eng_verify_info *vi)
{
	int k = par->l.k, m = par->l.m;
	uint32_t clen = par->st->chunk_size;
	uint8_t *data[ERS_MAX_K], *enc[ERS_MAX_M], *row = mem;
	struct member_info mi[ERS_MAX_K], first[ERS_MAX_K];
	bool encoded = false;

	for (int s = 0; s < k; s++)
		data[s] = mem + (size_t)(1 + s) * clen;
	for (int r = 0; r < m; r++)
		enc[r] = mem + (size_t)(1 + k + r) * clen;
	for (int r = 0; r < m; r++) {
		int h = ers_layout_node(&par->l, stripe, k + r), rc;

		if (h < 0)
			continue;
		if (v->node[h].state == MEMB_DEAD) {
			vi->rows_unchecked++;
			continue;
		}
		if (h == par->self) {
			struct pstripe *ps;

			leaf_lock(&par->lock, ENG_RANK_PAR);
			ps = find(par, pc->stripe_ckpt, stripe);
			if (ps) {
				row_copy(par, ps, row);
				members_of(par, ps, mi);
			}
			leaf_unlock(&par->lock, ENG_RANK_PAR);
			rc = ps ? 0 : -ENOENT;
		} else {
			rc = get_row(par, h, pc->stripe_ckpt, stripe, r, row, mi,
				     deadline);
		}
		if (rc == -ENOENT || (rc == 0 && (!mi[slot].in ||
						  mi[slot].gseal != pc->gseal ||
						  mi[slot].ino != pc->ino))) {
			/* The row does not hold this piece as sealed. */
			if (!vi->rows_bad++)
				vi->first_bad_stripe = stripe;
			rft_warn("scrub: stripe %llu row %d on node %d lacks "
				 "piece %u of inode %llu",
				 (unsigned long long)stripe, r, h, pc->idx,
				 (unsigned long long)pc->ino);
			continue;
		}
		if (rc < 0) {
			vi->rows_unchecked++;
			continue;
		}
		if (encoded && !same_members(first, mi, k)) {
			vi->rows_unchecked++; /* changing under us */
			continue;
		}
		if (!encoded) {
			if (encode_members(par, stripe, mi, 0, data, enc,
					   deadline, get, get_ctx) < 0) {
				vi->rows_unchecked++;
				continue;
			}
			memcpy(first, mi, sizeof(first));
			encoded = true;
		}
		vi->rows_checked++;
		if (memcmp(enc[r], row, clen)) {
			if (!vi->rows_bad++)
				vi->first_bad_stripe = stripe;
			eng_count_crc_error(par->e);
			rft_warn("scrub: stripe %llu row %d on node %d does not "
				 "match its members",
				 (unsigned long long)stripe, r, h);
		}
	}
}

void parity_scrub(struct parity *par, const struct eng_piece *pc,
		  uint32_t npieces, parity_get_fn *get, void *get_ctx,
		  struct eng_verify_info *vi)
{
	uint8_t *mem;
	struct memb_view v;
	struct timespec deadline;

	vi->striped = true;
	if (pc->scheme != par->code) {
		vi->rows_unchecked += npieces;
		return;
	}
	mem = scratch_get(par);
	if (!mem) {
		vi->rows_unchecked += npieces;
		return;
	}
	memb_get_view(par->memb, &v);
	for (uint32_t i = 0; i < npieces; i++) {
		struct eng_piece p = *pc;
		uint64_t stripe;
		int slot;

		p.idx = i;
		rft_deadline_ts(&deadline, 30000);
		if (ers_layout_locate(&par->l, pc->owner, pc->chunk_base + i,
				      &stripe, &slot) < 0) {
			vi->rows_unchecked++;
			continue;
		}
		scrub_stripe(par, &p, stripe, slot, mem, &v, &deadline, get,
			     get_ctx, vi);
	}
	scratch_put(par, mem);
}

int parity_rebuild_piece(struct parity *par, const struct eng_piece *pc,
			 uint8_t *buf, const struct timespec *deadline,
			 parity_get_fn *get, void *get_ctx)
{
	uint64_t stripe;
	int slot, rc;

	if (pc->scheme != par->code ||
	    ers_layout_locate(&par->l, pc->owner, pc->chunk_base + pc->idx,
			      &stripe, &slot) < 0)
		return -EIO;
	/* Another reader decoding this stripe keeps what it rebuilt. */
	while ((rc = decode_begin(par, pc->stripe_ckpt, stripe, deadline)) ==
	       1)
		if (file_piece_copy(par->e, pc->ino, pc->gseal, pc->idx,
				    pc->len, pc->crc, buf) == 0)
			return 0;
	if (rc < 0)
		return rc;
	rc = decode_piece(par, pc, buf, deadline, get, get_ctx);
	decode_end(par, pc->stripe_ckpt, stripe);
	return rc;
}

/* --- orphans ----------------------------------------------------------------- */

void parity_node_lost(struct parity *par, int node)
{
	uint64_t n = 0;

	leaf_lock(&par->lock, ENG_RANK_PAR);
	for (size_t b = 0; b < PAR_BUCKETS; b++)
		for (struct pstripe *ps = par->tab[b]; ps; ps = ps->next)
			for (int x = 0; x < par->l.k; x++) {
				uint64_t chunk;
				int owner;

				if (!ps->st.member[x].in || ps->who[x].orphan ||
				    ers_layout_chunk(&par->l, ps->stripe, x,
						     &owner, &chunk) < 0 ||
				    owner != node)
					continue;
				ps->who[x].orphan = true;
				par->orphans++;
				n++;
			}
	leaf_unlock(&par->lock, ENG_RANK_PAR);
	if (n)
		rft_info("parity: node %d lost its memory: %llu of its pieces "
			 "in the rows here can no longer be taken out by it; "
			 "those of seals no longer current are taken out here",
			 node, (unsigned long long)n);
}

long parity_orphans(struct parity *par, struct par_orphan **out)
{
	struct par_orphan *v = NULL;
	long n = 0;

	*out = NULL;
	leaf_lock(&par->lock, ENG_RANK_PAR);
	if (par->orphans) {
		v = calloc(par->orphans, sizeof(*v));
		if (!v)
			n = -ENOMEM;
	}
	for (size_t b = 0; v && b < PAR_BUCKETS; b++)
		for (struct pstripe *ps = par->tab[b]; ps; ps = ps->next)
			for (int x = 0; x < par->l.k; x++)
				if (ps->who[x].orphan &&
				    n < (long)par->orphans)
					v[n++] = (struct par_orphan){
						ps->ckpt, ps->stripe,
						ps->who[x].ino,
						ps->st.member[x].id, x,
						false };
	leaf_unlock(&par->lock, ENG_RANK_PAR);
	if (n > 0)
		*out = v;
	else
		free(v);
	return n;
}

/*
 * Take the stale orphans @o[0..n) of one stripe out of its row here: the
 * row encoded anew from the other members.  0 (or out already), -EAGAIN
 * when the row changed meanwhile, -errno from a member's fetch.
 */
static int drop_stripe(struct parity *par, const struct par_orphan *o,
		       size_t n, parity_get_fn *get, void *get_ctx,
		       uint64_t *dropped)
{
	int k = par->l.k, r = my_row(par, o->stripe), rc = 0;
	uint32_t clen = par->st->chunk_size, drop = 0;
	struct member_info mi[ERS_MAX_K], now[ERS_MAX_K];
	uint8_t *mem, *data[ERS_MAX_K], *enc[ERS_MAX_M];
	struct timespec deadline;
	struct pstripe *ps;

	if (r < 0)
		return 0;
	mem = scratch_get(par);
	if (!mem)
		return -ENOMEM;
	for (int x = 0; x < k; x++)
		data[x] = mem + (size_t)(1 + x) * clen;
	for (int y = 0; y < par->l.m; y++)
		enc[y] = mem + (size_t)(1 + k + y) * clen;
	leaf_lock(&par->lock, ENG_RANK_PAR);
	ps = find(par, o->ckpt, o->stripe);
	if (ps)
		members_of(par, ps, mi);
	leaf_unlock(&par->lock, ENG_RANK_PAR);
	for (size_t i = 0; ps && i < n; i++)
		if (o[i].stale && mi[o[i].slot].in &&
		    mi[o[i].slot].ino == o[i].ino &&
		    mi[o[i].slot].gseal == o[i].gseal)
			drop |= 1u << o[i].slot;
	if (!drop) {
		scratch_put(par, mem);
		return 0;
	}
	rft_deadline_ts(&deadline, PAR_SEND_MS);
	rc = encode_members(par, o->stripe, mi, drop, data, enc, &deadline,
			    get, get_ctx);
	if (rc < 0) {
		scratch_put(par, mem);
		return rc;
	}
	leaf_lock(&par->lock, ENG_RANK_PAR);
	ps = find(par, o->ckpt, o->stripe);
	if (ps)
		members_of(par, ps, now);
	/*
	 * A fold or an unfold meanwhile, or an orphan its owner took back
	 * (its DONE): look again.
	 */
	rc = ps && same_members(mi, now, k) ? 0 : -EAGAIN;
	for (int x = 0; x < k && rc == 0; x++)
		if (drop & (1u << x) && !ps->who[x].orphan)
			rc = -EAGAIN;
	for (int x = 0; x < k && rc == 0; x++) {
		if (!(drop & (1u << x)))
			continue;
		rc = ers_stripe_drop(&ps->st, x, mi[x].gseal, enc[r],
				     ps->st.len < clen ? ps->st.len : clen);
		if (rc < 0)
			break;
		ps->who[x].ino = 0;
		ps->who[x].piece = 0;
		ps->who[x].orphan = false;
		par->orphans--;
		(*dropped)++;
		atomic_fetch_add(&par->orphans_dropped, 1);
	}
	if (ps && rc == 0)
		drop_if_empty(par, ps);
	leaf_unlock(&par->lock, ENG_RANK_PAR);
	scratch_put(par, mem);
	return rc;
}

int parity_drop_orphans(struct parity *par, const struct par_orphan *o,
			size_t n, parity_get_fn *get, void *get_ctx,
			uint64_t *dropped)
{
	int first_err = 0;

	*dropped = 0;
	for (size_t i = 0, j; i < n; i = j) {
		int rc;

		for (j = i + 1; j < n && o[j].ckpt == o[i].ckpt &&
				o[j].stripe == o[i].stripe;
		     j++)
			;
		rc = drop_stripe(par, o + i, j - i, get, get_ctx, dropped);
		if (rc < 0 && !first_err)
			first_err = rc;
	}
	return first_err;
}

/* --- the module ---------------------------------------------------------------- */

int parity_new(struct eng *e, struct peer_xport *x, struct memb *memb,
	       int self, int nodes, const struct ers_scheme *s, int backend,
	       struct parity **out)
{
	struct ers_codec_opts opts = { .backend = backend };
	struct parity *par;
	char name[32];
	int rc;

	*out = NULL;
	par = calloc(1, sizeof(*par));
	if (!par)
		return -ENOMEM;
	par->tab = calloc(PAR_BUCKETS, sizeof(*par->tab));
	if (!par->tab) {
		free(par);
		return -ENOMEM;
	}
	par->e = e;
	par->st = eng_store(e);
	par->x = x;
	par->memb = memb;
	par->self = self;
	par->nodes = nodes;
	par->s = *s;
	rc = ers_scheme_fit(&par->s, nodes);
	if (rc == 0)
		rc = ers_layout_init(&par->l, &par->s, nodes);
	if (rc == 0)
		rc = ers_codec_new(&par->s, &opts, &par->c);
	if (rc < 0) {
		rft_err("--protect: %s", ers_last_error());
		free(par->tab);
		free(par);
		return rc;
	}
	par->code = stripe_code(&par->s, nodes);
	rft_cond_init(&par->decoded);
	ers_scheme_format(&par->s, name, sizeof(name));
	rft_info("protection %s across %d nodes: parity rows folded with the "
		 "%s codec",
		 name, nodes, ers_codec_backend_name(par->c));
	pthread_mutex_init(&par->lock, NULL);
	*out = par;
	return 0;
}

void parity_free(struct parity *par)
{
	if (!par)
		return;
	for (size_t b = 0; b < PAR_BUCKETS; b++)
		while (par->tab[b]) {
			struct pstripe *ps = par->tab[b];

			par->tab[b] = ps->next;
			store_put(par->st, ps->chunk);
			free(ps);
		}
	free(par->tab);
	while (par->scratch) {
		struct scratch *sc = par->scratch;

		par->scratch = sc->next;
		free(sc);
	}
	while (par->rxbufs) {
		struct scratch *sc = par->rxbufs;

		par->rxbufs = sc->next;
		free(sc);
	}
	ers_codec_free(par->c);
	pthread_cond_destroy(&par->decoded);
	pthread_mutex_destroy(&par->lock);
	free(par);
}

void parity_get_stats(struct parity *par, struct eng_protect_stats *s)
{
	if (!par)
		return;
	leaf_lock(&par->lock, ENG_RANK_PAR);
	s->parity_rows = par->rows;
	s->parity_bytes = par->row_bytes;
	leaf_unlock(&par->lock, ENG_RANK_PAR);
	s->parity_folds = atomic_load(&par->folds);
	s->parity_unfolds = atomic_load(&par->unfolds);
	s->parity_refused = atomic_load(&par->refused);
	s->pieces_rebuilt = atomic_load(&par->rebuilt);
	s->bytes_rebuilt = atomic_load(&par->rebuilt_bytes);
	s->rebuilds_failed = atomic_load(&par->rebuild_failed);
	s->parity_orphans_dropped = atomic_load(&par->orphans_dropped);
}
