/*
 * core.h - what the group's layer (gns.c, protect.c, parity.c) may ask of
 * core without struct file: pieces named by (inode, seal, index), copied
 * out or kept, the store they live in, the counters they bump.  Issue 26
 * moves the group onto it; parity.c is on it (it includes no
 * engine_i.h), gns.c and protect.c not yet.
 */
#ifndef RFT_CORE_H
#define RFT_CORE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "store.h"

struct eng;

/*
 * An erasure-coded seal's scheme as SEAL and PROTECT entries carry it (their
 * flags) and files keep it: nodes << 24 | kind << 16 | k << 8 | m, so that
 * a seal's stripe layout follows from it alone; 0 for none or replicas.
 * stripe_layout(): the layout of @code, 0 or -EINVAL.
 */
struct ers_scheme;
struct ers_layout;
uint32_t stripe_code(const struct ers_scheme *s, int nodes);
int stripe_layout(uint32_t code, struct ers_layout *l);

/* One piece of a sealed file as the group names it (the fetch gop). */
struct eng_piece {
	uint64_t ino, gseal, holders;
	uint32_t idx, len, crc;
	int owner;
	uint32_t scheme;	/* 0, or the seal's stripe_code() */
	uint64_t stripe_ckpt, chunk_base;
};

/* Length of piece @idx of a file of @size bytes (0 past the end). */
uint32_t file_piece_len(const struct eng *e, uint64_t size, uint32_t idx);
/*
 * Piece @idx of @ino's seal @gseal, @len bytes with CRC32C @crc, copied
 * into @buf from this node's memory (its owner's data, a copy held or
 * fetched): 0, -ENOENT when not here whole, -EIO when it fails its check.
 * Takes ns->lock and the file's lock (read) briefly.
 */
int file_piece_copy(struct eng *e, uint64_t ino, uint64_t gseal, uint32_t idx,
		    uint32_t len, uint32_t crc, uint8_t *buf);
/*
 * Keep @data (@len bytes, checked against @crc by the caller) as piece
 * @idx of @ino's seal @gseal, when this node has that piece elsewhere
 * (PIECE_PEER): a fetched copy, evictable.  What a decode of a stripe
 * gives besides the piece it was for.  0, -ESTALE (not wanted here),
 * -ENOSPC (no free chunk: never waits).  Takes ns->lock and the file's.
 */
int file_piece_keep(struct eng *e, uint64_t ino, uint64_t gseal, uint32_t idx,
		    const uint8_t *data, uint32_t len, uint32_t crc);

/* The engine's arena. */
struct store *eng_store(struct eng *e);
/* A piece failed its checksum (counted in status' crc_errors). */
void eng_count_crc_error(struct eng *e);

/* Piece of a snapshot, as file_snap_piece gives it. */
struct snap_piece {
	const uint8_t *bytes;	/* in memory: its first @fill bytes */
	uint32_t fill;		/* past it the piece reads as zeros */
	uint32_t len;		/* the piece's length in the file */
	uint32_t crc;		/* CRC32C of its @len bytes */
};

/*
 * Piece @idx of a file as a snapshot saw it (file_snap_take_locked in
 * engine_i.h; the snapshot pins what it shows): 1 in memory, 0 a hole
 * (zeros, or past the end), -EAGAIN elsewhere (the persist dir, the
 * holders); *@p filled for each.
 */
struct file_snap;
int file_snap_piece(const struct eng *e, const struct file_snap *fs,
		    uint32_t idx, struct snap_piece *p);

#endif
