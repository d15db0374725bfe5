/*
 * spill.c - the spill tier: local disk below RAM (--spill DIR[:SIZE]).
 *
 * When memory runs short and what eviction may drop for free (fetched
 * copies, pieces the persist dir has) is not enough, eviction writes
 * sealed pieces of this node's checkpoints outside --keep here (evict.c,
 * its third kind), and their slots become PIECE_SPILL: a full arena no
 * longer waits for the persist dir, nor turns writers away with ENOSPC
 * when there is none.  Core reads a spilled piece back through struct
 * spill_source (engine_i.h), checked against the slot's CRC32C, which is
 * final for every piece spilled: a piece that fails it is EIO, never other
 * bytes.
 *
 * Layout: one sparse file per file of the namespace, DIR/<file id>.spill
 * (16 hex digits), piece i at i * chunk size, its bytes then zeros up to
 * the piece's length.  A piece spilled again (its file rewritten, sealed
 * and evicted anew) goes over the old bytes at the same offset, so a spill
 * file never outgrows its file; a file freed takes its spill file with it.
 * The budget counts the blocks the spill files take on disk.
 *
 * What the directory holds is this daemon's alone: it is emptied at start
 * (a restart does not find its spilled pieces again yet; docs/design.md).
 *
 * Locks: spill->lock is a leaf (the budget, the files to remove, taken by
 * the EV_FREED listener under ns->lock); the disk is written by
 * eviction's spill step, one at a time (evict.c), and read by core's
 * loads, with no lock held.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "engine_i.h"
#include "erasure.h"
#include "spill.h"

#define SPILL_SUFFIX ".spill"
#define SPILL_GONE_MAX 4096	/* files to remove, queued; more: leaked
				   until the next start empties the dir */

struct spill {
	int dirfd;
	uint64_t budget;
	pthread_mutex_t lock;	/* a leaf: used, gone[] */
	uint64_t used;		/* bytes its files take on disk; lock */
	uint64_t gone[SPILL_GONE_MAX]; /* file ids freed: their spill files
					  go at the next write; lock */
	uint32_t ngone;		/* lock */
	_Atomic uint64_t written, read, crc_errors, errors;
};

static void spill_name(uint64_t file_id, char *buf, size_t size)
{
	snprintf(buf, size, "%016" PRIx64 SPILL_SUFFIX, file_id);
}

static uint64_t disk_bytes(const struct stat *st)
{
	return (uint64_t)st->st_blocks * 512;
}

/* Remove the spill files of the files freed since the last call. */
static void drop_gone(struct spill *sp)
{
	uint64_t ids[64];
	uint32_t n;

	do {
		leaf_lock(&sp->lock, ENG_RANK_SPILL);
		n = sp->ngone < 64 ? sp->ngone : 64;
		sp->ngone -= n;
		memcpy(ids, sp->gone + sp->ngone, n * sizeof(*ids));
		leaf_unlock(&sp->lock, ENG_RANK_SPILL);
		for (uint32_t i = 0; i < n; i++) {
			char name[32];
			struct stat st;

			spill_name(ids[i], name, sizeof(name));
			if (fstatat(sp->dirfd, name, &st, 0) < 0)
				continue; /* never spilled */
			if (unlinkat(sp->dirfd, name, 0) == 0) {
				leaf_lock(&sp->lock, ENG_RANK_SPILL);
				sp->used -= disk_bytes(&st) < sp->used
						    ? disk_bytes(&st)
						    : sp->used;
				leaf_unlock(&sp->lock, ENG_RANK_SPILL);
			}
		}
	} while (n == 64);
}

static bool has_room(struct spill *sp, uint64_t bytes)
{
	bool room;

	leaf_lock(&sp->lock, ENG_RANK_SPILL);
	room = sp->used + bytes <= sp->budget;
	leaf_unlock(&sp->lock, ENG_RANK_SPILL);
	return room;
}

bool spill_room(struct eng *e, uint64_t bytes)
{
	if (!e->spill)
		return false;
	drop_gone(e->spill);
	return has_room(e->spill, bytes);
}

/* Write both of @iov at @off, whole: 0 or -errno. */
static int write_iov(int fd, struct iovec iov[2], off_t off)
{
	int first = iov[0].iov_len ? 0 : 1;

	while (first < 2) {
		ssize_t w = pwritev(fd, iov + first, 2 - first, off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		off += w;
		for (; first < 2 && (size_t)w >= iov[first].iov_len; first++)
			w -= (ssize_t)iov[first].iov_len;
		if (first < 2) {
			iov[first].iov_base = (uint8_t *)iov[first].iov_base + w;
			iov[first].iov_len -= (size_t)w;
		}
		while (first < 2 && !iov[first].iov_len)
			first++;
	}
	return 0;
}

int spill_write(struct eng *e, uint64_t file_id, const struct spill_pick *p,
		uint32_t n)
{
	struct spill *sp = e->spill;
	uint32_t done = 0;
	struct stat before, after;
	char name[32];
	int fd, rc = 0;

	spill_name(file_id, name, sizeof(name));
	fd = openat(sp->dirfd, name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || fstat(fd, &before) < 0) {
		rc = -errno;
		goto out;
	}
	for (uint64_t more = 0; done < n; done++) {
		/* The piece as the file shows it: its bytes, then zeros. */
		struct iovec iov[2] = {
			{ store_ptr(&e->store, p[done].chunk), p[done].fill },
			{ (void *)e->zeros, p[done].len - p[done].fill },
		};

		/* The budget, as if every piece took new blocks. */
		more += p[done].len;
		if (!has_room(sp, more))
			break;
		rc = write_iov(fd, iov,
			       (off_t)p[done].idx << e->store.chunk_shift);
		if (rc < 0)
			break;
	}
	/* Durable before any slot points here. */
	if (done && fdatasync(fd) < 0) {
		rc = -errno;
		done = 0;
	}
	if (fstat(fd, &after) == 0) {
		leaf_lock(&sp->lock, ENG_RANK_SPILL);
		sp->used += disk_bytes(&after) - disk_bytes(&before);
		leaf_unlock(&sp->lock, ENG_RANK_SPILL);
	}
out:
	if (fd >= 0)
		close(fd);
	if (rc < 0) {
		atomic_fetch_add(&sp->errors, 1);
		rft_warn("spill: cannot write to %s/%s: %s (the pieces stay "
			 "in memory)", e->cfg.spill_dir, name, strerror(-rc));
	}
	atomic_fetch_add(&sp->written, done);
	return done ? (int)done : rc;
}

/* struct spill_source's read: piece @idx of @file_id, checked. */
static int spill_read(struct eng *e, uint64_t file_id, uint32_t idx,
		      uint32_t fill, uint32_t len, uint32_t crc,
		      uint32_t crc_len, uint8_t *buf)
{
	struct spill *sp = e->spill;
	off_t off = (off_t)idx << e->store.chunk_shift;
	uint32_t have = crc_len, keep = fill < len ? fill : len;
	size_t got = 0;
	char name[32];
	int fd;

	if (crc_len == SLOT_CRC_UNKNOWN)
		return -EIO; /* never spilled so */

	spill_name(file_id, name, sizeof(name));
	fd = openat(sp->dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rft_err("spill: %s/%s: %s", e->cfg.spill_dir, name,
			strerror(errno));
		return -EIO;
	}
	while (got < have) {
		ssize_t r = pread(fd, buf + got, have - got, off + (off_t)got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	if (got == have && ers_crc32c(0, buf, have) == crc) {
		if (keep < len)
			memset(buf + keep, 0, len - keep);
		atomic_fetch_add(&sp->read, 1);
		return 0;
	}
	atomic_fetch_add(&sp->crc_errors, 1);
	rft_err("spill: %s/%s: piece %u %s; EIO", e->cfg.spill_dir, name, idx,
		got == have ? "fails its checksum" : "is short");
	return -EIO;
}

static const struct spill_source spill_src = { .read = spill_read };

void spill_forget(struct eng *e, uint64_t file_id)
{
	struct spill *sp = e->spill;

	leaf_lock(&sp->lock, ENG_RANK_SPILL);
	if (sp->ngone < SPILL_GONE_MAX)
		sp->gone[sp->ngone++] = file_id;
	leaf_unlock(&sp->lock, ENG_RANK_SPILL);
}

/*
 * A file gone (its last name removed with nothing open, or the inode
 * freed): its spill file goes with the next write.  Leaf lock only.
 */
static void spill_on_event(struct eng *e, const struct eng_ev *ev, void *ctx)
{
	(void)ctx;
	if (!S_ISREG(ev->in->mode))
		return;
	if (ev->kind == EV_FREED ||
	    (ev->kind == EV_UNLINKED && ev->last && !ev->open))
		spill_forget(e, ev->in->file.id);
}

/* Remove the spill files in the directory (@why: whose, for the log). */
static int empty_dir(struct eng *e, struct spill *sp, const char *why)
{
	int fd = dup(sp->dirfd);
	unsigned n = 0;
	struct dirent *d;
	DIR *dir;

	if (fd < 0)
		return -errno;
	dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return -errno;
	}
	rewinddir(dir); /* the offset is dirfd's, shared */
	while ((d = readdir(dir))) {
		size_t len = strlen(d->d_name);

		if (len == 16 + strlen(SPILL_SUFFIX) &&
		    !strcmp(d->d_name + 16, SPILL_SUFFIX) &&
		    unlinkat(sp->dirfd, d->d_name, 0) == 0)
			n++;
	}
	closedir(dir);
	if (n)
		rft_info("spill dir %s: %u files %s removed", e->cfg.spill_dir,
			 n, why);
	return 0;
}

int spill_new(struct eng *e)
{
	struct spill *sp;
	int rc;

	if (!e->cfg.spill_dir)
		return 0;
	sp = calloc(1, sizeof(*sp));
	if (!sp)
		return -ENOMEM;
	pthread_mutex_init(&sp->lock, NULL);
	sp->budget = e->cfg.spill_bytes;
	sp->dirfd = open(e->cfg.spill_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sp->dirfd < 0) {
		rc = -errno;
		rft_err("spill dir %s: %s", e->cfg.spill_dir, strerror(-rc));
		goto fail;
	}
	rc = empty_dir(e, sp, "of an earlier daemon");
	if (rc == 0)
		rc = eng_listen(e, spill_on_event, sp);
	if (rc < 0)
		goto fail;
	e->spill = sp;
	eng_spill_source(e, &spill_src);
	return 0;
fail:
	if (sp->dirfd >= 0)
		close(sp->dirfd);
	pthread_mutex_destroy(&sp->lock);
	free(sp);
	return rc;
}

void spill_free(struct eng *e)
{
	struct spill *sp = e->spill;

	if (!sp)
		return;
	/* Nothing of it outlives this daemon (see above). */
	empty_dir(e, sp, "at the stop");
	close(sp->dirfd);
	pthread_mutex_destroy(&sp->lock);
	free(sp);
	e->spill = NULL;
}

void spill_get_stats(struct eng *e, struct eng_stats *s)
{
	struct spill *sp = e->spill;

	if (!sp)
		return;
	s->spill_enabled = true;
	s->spill_budget = sp->budget;
	leaf_lock(&sp->lock, ENG_RANK_SPILL);
	s->spill_used = sp->used;
	leaf_unlock(&sp->lock, ENG_RANK_SPILL);
	s->spill_written = atomic_load(&sp->written);
	s->spill_read = atomic_load(&sp->read);
	s->spill_crc_errors = atomic_load(&sp->crc_errors);
	s->spill_errors = atomic_load(&sp->errors);
}
