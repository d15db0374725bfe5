/*
 * gns_i.h - the engine's modules that build on the group (library rftgns):
 * gns.c (the group's namespace on this node) and protect.c (copies of
 * sealed files on peers).  Private to them; the engine core reaches them
 * only through struct eng_group_ops (engine_i.h).
 */
#ifndef RFT_GNS_I_H
#define RFT_GNS_I_H

#include <stdint.h>

struct eng;
struct grp;
struct inode;
struct protect;
struct eng_protect_stats;

/*
 * Protection of this node's sealed files on peers (protect.c), as --protect
 * asks: NULL for none.  Registers its frame types on the group's transport,
 * so call before grp_start().  0 or -errno.
 */
int protect_new(struct eng *e, struct grp *g, struct protect **out);
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
 * Node @node (another) started with empty memory (its LOST applied here):
 * send it again the copies it held of this node's files.  No lock held.
 */
void protect_node_lost(struct protect *p, int node);
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

#endif /* RFT_GNS_I_H */
