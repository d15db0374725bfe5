/*
 * nsop.h - one change to the namespace as the group's log carries it
 * (nsop.c: struct nsop, its encoding), and what applying it gives back.
 * Applied by nscall.c (ns_apply); proposed by gns.c and protect.c.
 */
#ifndef RFT_NSOP_H
#define RFT_NSOP_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "engine.h"

/*
 * One change to the namespace.  A single node applies it at once; a group
 * appends it to its log and every node applies it in log order (gns.c).
 * Inodes are named by number: in a group every node gives each new inode
 * the same number, since numbers are handed out in log order.
 */
enum nsop_kind {
	NSOP_MKNOD = 1,	/* regular files (not opened), FIFOs, sockets, devices */
	NSOP_MKDIR,
	NSOP_SYMLINK,
	NSOP_CREATE,	/* a regular file, opened by its proposer */
	NSOP_LINK,
	NSOP_UNLINK,
	NSOP_RMDIR,
	NSOP_RENAME,
	NSOP_SETATTR,
	NSOP_OPEN,	/* (old logs) an open for writing by another node
			   than the owner: marks it written elsewhere */
	NSOP_SEAL,	/* a file's content: size and checksums, from the
			   node that has it; the last one wins */
	NSOP_PROTECT,	/* a seal's copies are acknowledged by its holders */
	NSOP_LOST,	/* the proposer is a new daemon: what its node held
			   before is gone */
	NSOP_PERSIST,	/* a seal is in the persist dir the group shares */
};

#define NSOP_VERSION 1

/*
 * LOST's flags: the proposer is a daemon that stops (a graceful stop that
 * leaves files unprotected), not one that started: its node is down, so
 * the owners send it nothing until it starts again (and says LOST then).
 */
#define NSOP_LOST_STOP 0x1u

/* SEAL: one piece of the sealed file. */
struct nsop_piece {
	uint32_t crc;	/* CRC32C of the whole piece as the file shows it */
	uint8_t hole;	/* reads as zeros: nothing to fetch */
};

/*
 * A file's version as the group's log says it (struct file's sealed):
 * the last SEAL applied, as it was (what came of it since is in struct
 * file's log, engine_i.h's struct file_log).  Every node keeps it, the
 * same everywhere: verify checks what a node shows against it and
 * against the other nodes' records, and a draft that cannot be sealed
 * gives way to it (file_revert).
 */
struct seal_rec {
	uint64_t index;		/* its log index */
	int node;		/* the node that sealed it */
	uint64_t size;
	struct timespec mtime, ctime;
	uint32_t scheme;	/* as struct file's */
	uint64_t ckpt, base;
	/* The SEAL's proposer: its incarnation and the data version it
	   sealed (a restore tells its own seal by them). */
	uint64_t inc, version;
	uint32_t npieces;
	struct nsop_piece pieces[];
};

struct nsop {
	enum nsop_kind kind;
	int node;		/* proposer's node id (e->node) */
	uint64_t inc;		/* proposer's incarnation (0 on a single node) */
	uint64_t tag;		/* proposer's request, for its own apply */
	struct timespec now;	/* proposer's clock: times the change sets */
	uint32_t flags;		/* CREATE, OPEN: open(2) flags; RENAME:
				   ENG_RENAME_*; SETATTR: sa.valid */
	uint64_t ino;		/* LINK, SETATTR, OPEN, SEAL */
	uint64_t parent, newparent;
	char name[NAME_MAX + 1], newname[NAME_MAX + 1];
	char *target;		/* SYMLINK; malloc()ed */
	mode_t mode;		/* with the type bits */
	uid_t uid;
	gid_t gid;
	dev_t rdev;
	uint64_t file_id;	/* MKNOD, CREATE of a regular file */
	struct eng_setattr sa;	/* SETATTR */
	/* SEAL */
	uint64_t version;	/* the owner's data version it seals */
	uint64_t size;
	struct timespec mtime;
	uint32_t chunk_size;
	uint32_t npieces;
	struct nsop_piece *pieces; /* malloc()ed */
	/* PROTECT: the seal (its log index), who holds it; flags: copies */
	uint64_t gseal;
	uint64_t holders;
};

/* What applying an op gives back on its proposer's node. */
struct nsop_out {
	struct stat st;		/* entry ops, SETATTR, CREATE, OPEN */
	struct eng_file *fp;	/* CREATE, OPEN: the handle opened */
	struct eng_open_info info;
	uint64_t index;		/* the op's log index (0 on a single node) */
};

const char *nsop_kind_name(enum nsop_kind k);
/* Zero @op, set its kind, no proposer, and now. */
void nsop_init(struct nsop *op, enum nsop_kind kind);
/* Free what @op owns (target, pieces). */
void nsop_clear(struct nsop *op);
/* Encode into a malloc()ed buffer.  0 or -ENOMEM. */
int nsop_encode(const struct nsop *op, void **buf, size_t *len);
/* Decode; nsop_clear() the result.  0, -EPROTO, -ENOMEM. */
int nsop_decode(const void *buf, size_t len, struct nsop *op);

#endif
