/*
 * gns_i.h - the engine's modules that build on the group (library rftgns):
 * gns.c (the group's namespace on this node), protect.c (copies of sealed
 * files on peers) and parity.c (xor and rs:K+M rows held for peers).
 * Private to them; the engine core reaches them only through struct
 * eng_group_ops (engine_i.h), and fs/main.c calls eng_join_group().  The
 * other way is narrowing: parity.c and protect.c ask core only through
 * core.h (pieces by number, seal views, pinned pieces, inodes as
 * handles); gns.c still includes engine_i.h and works on struct file and
 * the namespace directly (issue 26).
 */
#ifndef RFT_GNS_I_H
#define RFT_GNS_I_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "rft_le.h"

/*
 * The answer to a DONE (PROT_T_DONE, PAR_T_DONE: has the holder every
 * piece?): u32 status (0: yes; else a positive errno: EAGAIN not yet,
 * ENOSPC or ENOMEM it refused one for want of memory, EBADMSG one came
 * wrong), u32 nbits, then nbits bits, LSB first: bit i set, piece i is
 * still to send.  The map covers at most PROT_MAP_BITS pieces; those
 * past it are sent again.  So a retry sends only what the holder lacks.
 */
#define PROT_MAP_BITS (256u << 10)
#define PROT_MAP_ANSWER_MAX (8 + PROT_MAP_BITS / 8)

/*
 * Read DONE answer @a (@len bytes) about @npieces pieces: the holder's
 * -status (0: it has them all), with @need ((npieces + 7) / 8 bytes, may
 * be NULL) set to the pieces to send; -EPROTO when it is malformed.
 */
static inline int prot_map_read(const uint8_t *a, uint32_t len,
				uint32_t npieces, uint8_t *need)
{
	uint32_t status, nbits;

	if (len < 8)
		return -EPROTO;
	status = rft_get_le32(a);
	nbits = rft_get_le32(a + 4);
	if (nbits > npieces || nbits > PROT_MAP_BITS ||
	    len != 8 + (nbits + 7) / 8 || status > 4095 ||
	    (status && !nbits && npieces) || (!status && nbits))
		return -EPROTO;
	if (need && status) {
		/* Past the map, everything. */
		memset(need, 0xff, (npieces + 7) / 8);
		memcpy(need, a + 8, (nbits + 7) / 8);
		for (uint32_t i = nbits; i < ((nbits + 7) & ~7u); i++)
			need[i / 8] |= (uint8_t)(1u << (i % 8));
	}
	return -(int)status;
}

/* Is piece @i to be sent by @need (NULL: all)? */
static inline bool prot_map_has(const uint8_t *need, uint32_t i)
{
	return !need || (need[i / 8] & (1u << (i % 8)));
}

struct eng;
struct grp;
struct inode;
struct protect;
struct eng_protect_stats;
struct eng_piece;

/*
 * A stripe member's piece from @node (this node too), checked against
 * @crc: for reconstructing reads, verify's scrub, and rows encoded anew
 * (parity.c).  0, -EIO, -ETIMEDOUT past @deadline.
 */
struct timespec;
typedef int parity_get_fn(void *ctx, int node, uint64_t ino, uint64_t gseal,
			  uint32_t idx, uint32_t len, uint32_t crc,
			  uint8_t *buf, const struct timespec *deadline);

/*
 * Protection of this node's sealed files on peers (protect.c), as --protect
 * asks: NULL for none.  Registers its frame types on the group's transport,
 * so call before grp_start().  Stripe members come from @get.  0 or
 * -errno.
 */
int protect_new(struct eng *e, struct grp *g, parity_get_fn *get,
		void *get_ctx, struct protect **out);
int protect_start(struct protect *p);
void protect_stop(struct protect *p);
/* After protect_stop() and once the transport is stopped; NULL is fine. */
void protect_free(struct protect *p);

/*
 * Protect @in (owned here) at seal @gseal, whose apply every live node has
 * seen: queued, sent in the background.  Holds @in meanwhile.  A no-op
 * without protection.  No lock held.
 */
void protect_file(struct protect *p, struct inode *in, uint64_t gseal);

/*
 * A graceful stop of this daemon: wait until @until_ms (CLOCK_MONOTONIC)
 * for the sealed files of this node whose bytes are all here to be
 * protected, retrying soon and stopping the rebuild meanwhile.  0 once
 * none is left, -ETIMEDOUT, or -EHOSTDOWN at once when a holder they
 * need is not up.  No lock held; sleeps.  0 without protection.
 */
int protect_leave(struct protect *p, uint64_t until_ms);

/*
 * Node @node (another) started with empty memory (its LOST applied here):
 * send it again the copies it held of this node's files; xor, rs: its
 * members in the rows here are orphans (parity.c), those no longer
 * current taken out.  @stopped: it stopped and took its memory with it
 * (LOST_STOP): its members are orphans from now on, and the copies wait
 * for its start.  No lock held.
 */
void protect_node_lost(struct protect *p, int node, bool stopped);
/*
 * This daemon started with empty memory: bring back the files this node
 * owns from their copies, in the background.  0 or -errno.
 */
int protect_rebuild(struct protect *p);

/*
 * reftfs-admin verify --repair of @in (owned here): its pieces that are not
 * in memory come back from their holders, checked, and its copies are sent
 * again.  0, -ESTALE (not this node's any more), -EOPNOTSUPP without
 * protection, -errno.  No lock held; sleeps.
 */
int protect_repair(struct protect *p, struct inode *in);

/* Fill @s (engine.h); nothing without protection. */
void protect_get_stats(struct protect *p, struct eng_protect_stats *s);

/*
 * A piece the group lost (its owner and its copies gone): rebuilt from its
 * stripe when the seal is erasure-coded (parity.c), into @buf, checked.
 * 0, -EIO, -ETIMEDOUT; -EOPNOTSUPP when there is no parity to use.
 */
int protect_reconstruct(struct protect *p, const struct eng_piece *pc,
			uint8_t *buf, const struct timespec *deadline);
/* verify's scrub of an erasure-coded seal's stripes (parity_scrub). */
struct eng_verify_info;
void protect_scrub(struct protect *p, const struct eng_piece *pc,
		   uint32_t npieces, struct eng_verify_info *vi);
/* The scheme a SEAL proposed here carries (nsop flags): 0 for none. */
uint32_t protect_seal_code(const struct protect *p);
/*
 * A file changed hands or seals in the log (its apply here): a seal of it
 * folded by this node that is no longer its own is taken out of the rows.
 * No lock held.
 */
void protect_changed(struct protect *p, uint64_t ino);

/* --- erasure-coded protection (parity.c), used by protect.c ------------ */

struct parity;
struct peer_xport;
struct peer_frame;
struct memb;
struct file_snap;
struct ers_scheme;

/* Frame types of the data range (PEER_T_DATA_FIRST on). */
enum {
	PROT_T_PUT = 80,	/* protect.c: a replica's piece */
	PROT_T_DONE,		/* protect.c: has a holder every piece? */
	PAR_T_FOLD,		/* parity.c: fold a piece into a row */
	PAR_T_UNFOLD,		/* parity.c: take it out again */
	PAR_T_DONE,		/* parity.c: are a seal's pieces folded? */
	PAR_T_GET,		/* parity.c: a row and its members */
	PROT_T_LAST = PAR_T_GET,
};

#define PAR_SEND_MS 10000	/* one piece handed to the link, one answer */

/* A seal as the stripes know it. */
struct par_seal {
	uint64_t ino, gseal, ckpt, base;
	uint32_t npieces;
};


/*
 * xor or rs:K+M over @nodes nodes (sized here), folding with codec
 * @backend (enum ers_backend_kind).  0 or -errno.
 */
int parity_new(struct eng *e, struct peer_xport *x, struct memb *memb,
	       int self, int nodes, const struct ers_scheme *s, int backend,
	       struct parity **out);
/* Gives every row back to the store. */
void parity_free(struct parity *par);
uint32_t parity_seal_code(const struct parity *par);

/* A holder, on a transport thread (never sleeps). */
void *parity_rx_dest(struct parity *par, int node, const struct peer_frame *f,
		     void **cookie);
int parity_rx_fold(struct parity *par, int node, const struct peer_frame *f,
		   void *cookie, int bulk_rc);
/*
 * PAR_T_DONE's answer: malloc()ed meta (status, the pieces still to send:
 * parity.c's header), or -errno.
 */
int parity_rx_done(struct parity *par, int node, const struct peer_frame *f,
		   uint8_t **meta, uint32_t *meta_len);
/* PAR_T_GET's answer: malloc()ed meta and bulk, or -errno. */
int parity_rx_get(struct parity *par, int node, const struct peer_frame *f,
		  uint8_t **meta, uint32_t *meta_len, uint8_t **bulk,
		  uint32_t *bulk_len);

/* The owner: the nodes holding rows of @n pieces from chunk @base on. */
uint64_t parity_holders_of(const struct parity *par, int owner, uint64_t base,
			   uint32_t n);
/*
 * Fold (or unfold) the pieces of @ps (their bytes in @fs) that @h holds a
 * row for, only those whose bit is set in @need when not NULL (as
 * parity_ask filled it); @pace (may be NULL) before each.  0 or -errno.
 */
int parity_send(struct parity *par, int h, const struct par_seal *ps,
		const struct file_snap *fs, bool unfold, const uint8_t *need,
		uint8_t *bounce, bool (*pace)(void *ctx, uint64_t len),
		void *pace_ctx, uint64_t *pieces, uint64_t *bytes);
/*
 * Has @h folded every piece of @ps it holds a row for (@gone: taken every
 * one out)?  0; else @h's reason, -EAGAIN (not yet), -ENOSPC or -ENOMEM
 * (it refused a fold for want of memory), -EBADMSG (one came wrong),
 * with @need (when not NULL, (npieces + 7) / 8 bytes) set to the pieces
 * to send again; or -errno from the link (@need untouched).
 */
int parity_ask(struct parity *par, int h, const struct par_seal *ps,
	       bool gone, uint8_t *need);

/* parity_get_fn: read a member's piece from @node (this node too), checked. */
int parity_rebuild_piece(struct parity *par, const struct eng_piece *pc,
			 uint8_t *buf, const struct timespec *deadline,
			 parity_get_fn *get, void *get_ctx);
void parity_get_stats(struct parity *par, struct eng_protect_stats *s);
/*
 * verify's scrub of the stripes of @npieces pieces of @pc's seal: each
 * live holder's row against the row encoded anew from its members; counts
 * into @vi's rows_* fields.  Sleeps (the members, the rows).
 */
struct eng_verify_info;
void parity_scrub(struct parity *par, const struct eng_piece *pc,
		  uint32_t npieces, parity_get_fn *get, void *get_ctx,
		  struct eng_verify_info *vi);

/*
 * Node @node lost its memory: its members in the rows here become
 * orphans.  Never sleeps.
 */
void parity_node_lost(struct parity *par, int node);
/* An orphan member: @stale when its seal is no longer current. */
struct par_orphan {
	uint64_t ckpt, stripe, ino, gseal;
	int slot;
	bool stale;
};
/*
 * The orphans here, into *@out (malloc()ed, a stripe's together): how
 * many, or -ENOMEM.
 */
long parity_orphans(struct parity *par, struct par_orphan **out);
/*
 * Take the stale ones of @o[0..n) out of their rows, each row encoded
 * anew from its other members (@get); *@dropped counts them.  0 or the
 * first -errno (a member not fetched, a row changed meanwhile: try
 * again).  Sleeps (the members).
 */
int parity_drop_orphans(struct parity *par, const struct par_orphan *o,
			size_t n, parity_get_fn *get, void *get_ctx,
			uint64_t *dropped);

#endif /* RFT_GNS_I_H */
