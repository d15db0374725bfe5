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
 * the piece's length; beside it its index, DIR/<file id>.sums, record i at
 * i * SUMS_REC: the seal the piece is of, its length and its CRC32C,
 * written and made durable after the bytes and before any slot says
 * PIECE_SPILL.  A piece spilled again (its file rewritten, sealed and
 * evicted anew) goes over the old bytes and record at the same offsets, so
 * a spill file never outgrows its file; a file freed takes both with it.
 * The budget counts the blocks they take on disk.
 *
 * A restart on the same dir takes back what it holds (spill_found): once
 * the namespace is known (alone, from the persist dir's scan; in a group,
 * from the log, after the LOST and before the rebuild), each piece of this
 * node's files that is not in memory and whose seal, length and final
 * checksum are its record's becomes PIECE_SPILL again.  A record written
 * but whose bytes were spilled over after (a crash between the two) only
 * fails the read's check, and the read goes to the holders' copy or the
 * persisted one (file_spill_failed_locked).  Files no inode has any more
 * go.  Alone without a persist dir nothing can be found again: the dir is
 * emptied at start and at stop.
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
#include "rft_le.h"
#include "erasure.h"
#include "spill.h"

#define SPILL_SUFFIX ".spill"
#define SUMS_SUFFIX ".sums"
#define SPILL_NAME_LEN 16	/* the file id, in hex, before the suffix */

/* One record of a .sums file: le64 seal, le32 length, le32 CRC32C of
 * the piece, le32 SUMS_MAGIC, le32 CRC32C of the 20 bytes before. */
#define SUMS_REC 24
#define SUMS_MAGIC 0x31505352u /* "RSP1" */
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
	_Atomic uint64_t written, read, crc_errors, errors, found;
};

static void spill_name(uint64_t file_id, char *buf, size_t size)
{
	snprintf(buf, size, "%016" PRIx64 SPILL_SUFFIX, file_id);
}

static void sums_name(uint64_t file_id, char *buf, size_t size)
{
	snprintf(buf, size, "%016" PRIx64 SUMS_SUFFIX, file_id);
}

static uint64_t disk_bytes(const struct stat *st)
{
	return (uint64_t)st->st_blocks * 512;
}

/* Remove @name, taking its blocks off the budget. */
static void remove_one(struct spill *sp, const char *name)
{
	struct stat st;

	if (fstatat(sp->dirfd, name, &st, 0) < 0 ||
	    unlinkat(sp->dirfd, name, 0) < 0)
		return; /* never spilled */
	leaf_lock(&sp->lock, ENG_RANK_SPILL);
	sp->used -= disk_bytes(&st) < sp->used ? disk_bytes(&st) : sp->used;
	leaf_unlock(&sp->lock, ENG_RANK_SPILL);
}

/* Remove file @file_id's spill file and index. */
static void remove_files(struct spill *sp, uint64_t file_id)
{
	char name[32];

	spill_name(file_id, name, sizeof(name));
	remove_one(sp, name);
	sums_name(file_id, name, sizeof(name));
	remove_one(sp, name);
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
		for (uint32_t i = 0; i < n; i++)
			remove_files(sp, ids[i]);
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

/* Record @p in the index open at @fd. */
static int write_sum(int fd, const struct spill_pick *p)
{
	uint8_t rec[SUMS_REC];
	struct iovec iov[2] = { { rec, sizeof(rec) }, { NULL, 0 } };

	rft_put_le64(rec, p->gseal);
	rft_put_le32(rec + 8, p->len);
	rft_put_le32(rec + 12, p->crc);
	rft_put_le32(rec + 16, SUMS_MAGIC);
	rft_put_le32(rec + 20, ers_crc32c(0, rec, 20));
	return write_iov(fd, iov, (off_t)p->idx * SUMS_REC);
}

/* Open @name in the dir for writing, its size before in *@st. */
static int open_rw(struct spill *sp, const char *name, struct stat *st)
{
	int fd = openat(sp->dirfd, name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

	if (fd >= 0 && fstat(fd, st) < 0) {
		close(fd);
		fd = -1;
	}
	return fd < 0 ? -errno : fd;
}

/* Count @fd's growth since @before on the budget, and close it. */
static void close_counted(struct spill *sp, int fd, const struct stat *before)
{
	struct stat after;

	if (fstat(fd, &after) == 0) {
		leaf_lock(&sp->lock, ENG_RANK_SPILL);
		sp->used += disk_bytes(&after) - disk_bytes(before);
		leaf_unlock(&sp->lock, ENG_RANK_SPILL);
	}
	close(fd);
}

int spill_write(struct eng *e, uint64_t file_id, const struct spill_pick *p,
		uint32_t n)
{
	struct spill *sp = e->spill;
	uint32_t done = 0;
	struct stat before, sums_before;
	char name[32], sname[32];
	int fd, sfd = -1, rc = 0, wrc = 0;

	spill_name(file_id, name, sizeof(name));
	sums_name(file_id, sname, sizeof(sname));
	fd = rc = open_rw(sp, name, &before);
	if (rc >= 0)
		sfd = rc = open_rw(sp, sname, &sums_before);
	if (rc < 0)
		goto out;
	rc = 0;
	for (uint64_t more = 0; done < n; done++) {
		/* The piece as the file shows it: its bytes, then zeros. */
		struct iovec iov[2] = {
			{ store_ptr(&e->store, p[done].chunk), p[done].fill },
			{ (void *)e->zeros, p[done].len - p[done].fill },
		};

		/* The budget, as if every piece took new blocks. */
		more += p[done].len + SUMS_REC;
		if (!has_room(sp, more))
			break;
		wrc = write_iov(fd, iov,
				(off_t)p[done].idx << e->store.chunk_shift);
		if (wrc < 0)
			break;
	}
	/*
	 * The bytes durable, then their records (a restart takes back only
	 * what a record names), all before any slot points here.
	 */
	if (done && fdatasync(fd) < 0)
		rc = -errno;
	for (uint32_t i = 0; rc >= 0 && i < done; i++)
		rc = write_sum(sfd, &p[i]);
	if (done && rc >= 0 && fdatasync(sfd) < 0)
		rc = -errno;
	if (rc < 0)
		done = 0;
	else
		rc = wrc; /* those before it are in */
out:
	if (fd >= 0)
		close_counted(sp, fd, &before);
	if (sfd >= 0)
		close_counted(sp, sfd, &sums_before);
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
	rft_err("spill: %s/%s: piece %u %s (read from the holders or the "
		"persist dir instead, where they have it; else EIO)",
		e->cfg.spill_dir, name, idx,
		got == have ? "fails its checksum" : "is short");
	return -EIO;
}

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

/* Is @name one of the tier's, and whose?  *@sums: an index. */
static bool tier_name(const char *name, uint64_t *file_id, bool *sums)
{
	size_t len = strlen(name);
	char *end;

	if (len <= SPILL_NAME_LEN)
		return false;
	*sums = !strcmp(name + SPILL_NAME_LEN, SUMS_SUFFIX);
	if (!*sums && strcmp(name + SPILL_NAME_LEN, SPILL_SUFFIX))
		return false;
	errno = 0;
	*file_id = strtoull(name, &end, 16);
	return !errno && end == name + SPILL_NAME_LEN;
}

/*
 * The ids of the files the dir holds spilled pieces of, into *@ids (the
 * caller frees), and the blocks all of the tier's files take into *@used.
 * How many, or -errno.
 */
static long list_dir(struct spill *sp, uint64_t **ids, uint64_t *used)
{
	int fd = dup(sp->dirfd);
	size_t n = 0, cap = 0;
	struct dirent *d;
	DIR *dir;

	*ids = NULL;
	*used = 0;
	if (fd < 0)
		return -errno;
	dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return -errno;
	}
	rewinddir(dir); /* the offset is dirfd's, shared */
	while ((d = readdir(dir))) {
		uint64_t id;
		struct stat st;
		bool sums;

		if (!tier_name(d->d_name, &id, &sums) ||
		    fstatat(sp->dirfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		*used += disk_bytes(&st);
		if (sums)
			continue;
		if (n == cap) {
			uint64_t *v = realloc(*ids, (cap = cap ? 2 * cap : 64) *
							    sizeof(*v));

			if (!v) {
				closedir(dir);
				free(*ids);
				*ids = NULL;
				return -ENOMEM;
			}
			*ids = v;
		}
		(*ids)[n++] = id;
	}
	closedir(dir);
	return (long)n;
}

/* Remove every file of the tier in the dir (@why: whose, for the log). */
static void empty_dir(struct eng *e, struct spill *sp, const char *why)
{
	uint64_t *ids, used;
	long n = list_dir(sp, &ids, &used);

	for (long i = 0; i < n; i++)
		remove_files(sp, ids[i]);
	free(ids);
	if (n > 0)
		rft_info("spill dir %s: %ld files %s removed", e->cfg.spill_dir,
			 n, why);
}

/* --- a restart: what the dir holds, taken back ---------------------------- */

/* A file the dir holds spilled pieces of, and its index. */
struct held {
	uint64_t id;
	struct spill_found *v;	/* record i for piece i */
	uint32_t n;
	bool kept;		/* an inode has that id */
};

struct found_walk {
	struct eng *e;
	struct held *h;		/* sorted by id */
	size_t n;
	uint64_t pieces, files;
};

static int held_cmp(const void *a, const void *b)
{
	const struct held *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

/* File @h->id's index, read whole (bad records left 0: no piece). */
static int read_sums(struct spill *sp, struct held *h)
{
	char name[32];
	uint8_t *buf = NULL;
	struct stat st;
	size_t got = 0;
	int fd, rc = 0;

	sums_name(h->id, name, sizeof(name));
	fd = openat(sp->dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno; /* none: nothing in */
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out;
	}
	h->n = (uint32_t)((uint64_t)st.st_size / SUMS_REC);
	buf = malloc((size_t)h->n * SUMS_REC + 1);
	h->v = calloc(h->n ? h->n : 1, sizeof(*h->v));
	if (!buf || !h->v) {
		rc = -ENOMEM;
		goto out;
	}
	while (got < (size_t)h->n * SUMS_REC) {
		ssize_t r = pread(fd, buf + got, (size_t)h->n * SUMS_REC - got,
				  (off_t)got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	h->n = (uint32_t)(got / SUMS_REC);
	for (uint32_t i = 0; i < h->n; i++) {
		const uint8_t *r = buf + (size_t)i * SUMS_REC;

		/* A hole (a piece never spilled) or a torn record: none. */
		if (rft_get_le32(r + 16) != SUMS_MAGIC ||
		    rft_get_le32(r + 20) != ers_crc32c(0, r, 20))
			continue;
		h->v[i] = (struct spill_found){ rft_get_le64(r),
						rft_get_le32(r + 8),
						rft_get_le32(r + 12) };
	}
out:
	free(buf);
	close(fd);
	return rc;
}

/* One inode; ns->lock held (read). */
static int found_one(void *ctx, struct inode *in)
{
	struct found_walk *w = ctx;
	struct held key = { .id = in->file.id }, *h;
	uint32_t n;

	if (!S_ISREG(in->mode))
		return 0;
	h = bsearch(&key, w->h, w->n, sizeof(*w->h), held_cmp);
	if (!h)
		return 0;
	/*
	 * Its spill file stays, whatever is taken back: a piece spilled this
	 * run may be there already, and what is stale is written over.
	 */
	h->kept = true;
	file_wrlock(&in->file);
	n = file_spill_found_locked(w->e, &in->file, h->v, h->n);
	file_unlock(&in->file);
	w->pieces += n;
	w->files += n != 0;
	return 0;
}

static long spill_found(struct eng *e)
{
	struct spill *sp = e->spill;
	struct found_walk w = { e, NULL, 0, 0, 0 };
	uint64_t *ids, used;
	long n = list_dir(sp, &ids, &used);
	size_t kept = 0;
	int rc = 0;

	if (n < 0)
		rc = (int)n;
	else if (n && !(w.h = calloc((size_t)n, sizeof(*w.h))))
		rc = -ENOMEM;
	for (long i = 0; rc == 0 && i < n; i++) {
		w.h[w.n] = (struct held){ .id = ids[i] };
		rc = read_sums(sp, &w.h[w.n]);
		if (rc < 0) {
			rft_warn("spill dir %s: the index of %016" PRIx64
				 ": %s (its pieces are not taken back)",
				 e->cfg.spill_dir, ids[i], strerror(-rc));
			free(w.h[w.n].v);
			rc = 0;
			continue;
		}
		w.n++;
	}
	if (rc == 0) {
		if (w.n) {
			qsort(w.h, w.n, sizeof(*w.h), held_cmp);
			ns_rdlock(e);
			ns_walk(&e->ns, found_one, &w);
			ns_unlock(e);
		}
		/*
		 * No inode has the id: nothing can spill into it again (ids
		 * are never reused), so it goes with no race with eviction.
		 */
		for (size_t i = 0; i < w.n; i++)
			if (!w.h[i].kept)
				remove_files(sp, w.h[i].id);
			else
				kept++;
		atomic_fetch_add(&sp->found, w.pieces);
		if (n)
			rft_info("spill dir %s: %llu pieces of %llu files "
				 "taken back; %zu files of an earlier daemon "
				 "removed (their files are gone)",
				 e->cfg.spill_dir,
				 (unsigned long long)w.pieces,
				 (unsigned long long)w.files, (size_t)n - kept);
	} else {
		rft_warn("spill dir %s: %s: nothing of it is taken back",
			 e->cfg.spill_dir, strerror(-rc));
	}
	for (size_t i = 0; i < w.n; i++)
		free(w.h[i].v);
	free(w.h);
	free(ids);
	return rc < 0 ? rc : (long)w.pieces;
}

static const struct spill_source spill_src = { .read = spill_read,
					       .found = spill_found };

int spill_new(struct eng *e)
{
	struct spill *sp;
	uint64_t *ids;
	long n;
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
	/* What an earlier daemon left stays until spill_found looks. */
	n = list_dir(sp, &ids, &sp->used);
	free(ids);
	rc = n < 0 ? (int)n : eng_listen(e, spill_on_event, sp);
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
	/*
	 * What it holds is found again by a restart that knows the files: a
	 * group's (its log) or one with a persist dir (its scan).  Alone
	 * without one, nothing could be.
	 */
	if (e->cfg.node < 0 && !e->persist_dir)
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
	s->spill_found = atomic_load(&sp->found);
}
