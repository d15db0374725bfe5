/*
 * pass.h - the passthrough tier (pass.c): what the calls above it
 * (engine.c, nscall.c, handle.c, nssnap.c) and eviction use.  Its state,
 * struct pass_ctl, and its lock are pass.c's own; core reaches it only by
 * its events and its placement hook (core.h, engine_i.h), never by name.
 */
#ifndef RFT_PASS_H
#define RFT_PASS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct eng;
struct eng_file;
struct eng_open_info;
struct eng_stats;
struct file;
struct inode;
struct stat;

/*
 * Its state, its placement and its listener (EV_FREED, EV_SEALED, ...);
 * off until FUSE INIT gives it a mount (eng_pass_enable).  -errno.
 */
int pass_init(struct eng *e);
/* Its copier stopped, every copy and backing file let go (the files'
 * too: before ns_fini). */
void pass_fini(struct eng *e);
/* After the files are gone (ns_fini): the backing files they pointed
 * into, freed; then its state. */
void pass_homes_fini(struct eng *e);
/* Is passthrough on (FUSE INIT gave it its backing mount)?  Any thread. */
bool pass_on(const struct eng *e);
/* Its counters, into @s (status). */
void pass_get_stats(struct eng *e, struct eng_stats *s);
/* Files whose copy at seal waits for the writes to stop (status). */
uint32_t pass_waiting(struct eng *e);

/* After a local open succeeded (no lock held): maybe pass @fp through. */
void pass_open(struct eng *e, struct eng_file *fp, struct eng_open_info *info);
/* A writer passing through: the engine takes the backing file's bytes
 * (FLUSH, FSYNC, its RELEASE).  0 or -errno.  No lock held. */
int pass_take(struct eng *e, struct eng_file *fp);
/*
 * At RELEASE, before the handle goes: the backing id to close, or 0.
 * *keep_writer: the writer's bytes could not be taken (out of memory);
 * the pass keeps its place as a writer, so that the file is not sealed
 * (nor written back) short of them, until a later take succeeds.
 */
int pass_release(struct eng *e, struct eng_file *fp, bool *keep_writer);
/* fallocate on a handle passing through: on its backing file. */
int pass_fallocate(struct eng *e, struct eng_file *fp, unsigned flags,
		   off_t off, off_t len);
/* GETATTR of a file whose writers pass through: the backing file's size
 * and times.  ns->lock and the file's lock held (pass.lock is under
 * them). */
void pass_stat(struct eng *e, struct file *f, struct stat *st);
/* A truncate of a file passing through: its backing file too.  No lock. */
void pass_truncate(struct eng *e, struct inode *in, uint64_t size);
/*
 * A truncate by SETATTR is about to change inode @ino, its backing file
 * too: no take of a writer's bytes runs until pass_cut_end (a take in
 * progress is waited for), lest it put back bytes or a size the truncate
 * changed.  The inode, held, or NULL if there is none.  No lock held.
 */
struct inode *pass_cut_begin(struct eng *e, uint64_t ino);
void pass_cut_end(struct eng *e, struct inode *in);
/*
 * @in's last name went: the copies queued for it are dropped with their
 * holds, so that its memory is freed now and not when the copier, waiting
 * for the writes to stop, gets to them.  ns->lock held for writing.
 */
void pass_unlinked(struct eng *e, struct inode *in);
/* Memory is short: spare backing files, early copies, then kept ones
 * nothing has open, go until @want chunks are free again (evict.c); and
 * backing files whose pieces eviction just put back. */
void pass_shed(struct eng *e, uint32_t want);
/* The hash of base name @name, for a file's home (never 0). */
uint64_t pass_name_hash(const char *name);

#endif
