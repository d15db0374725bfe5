/*
 * engine.c - engine lifetime and the reporting calls behind reftfs-admin.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "engine_i.h"
#include "evict.h"
#include "pass.h"
#include "persist.h"
#include "spill.h"
#include "erasure.h"

void eng_config_defaults(struct eng_config *cfg)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

	memset(cfg, 0, sizeof(*cfg));
	/* Half of RAM: the other half is the training job's. */
	cfg->mem_bytes = pages > 0 && psz > 0
				 ? (uint64_t)pages * (uint64_t)psz / 2
				 : (1ULL << 30);
	cfg->chunk_size = RFT_CHUNK_DEFAULT;
	cfg->keep = 2;
	cfg->persist_every = 1;
	cfg->unmount_flush = ENG_UNMOUNT_FLUSH_ALL;
	cfg->enospc_wait_ms = 2000;
	cfg->retry_ms = 5000;
	cfg->fetch_threads = 4;
	cfg->fetch_timeout_ms = 60000;
	cfg->node = -1;
}

/* Bytes of the files below @dir; ns->lock held. */
static uint64_t tree_bytes(struct inode *dir)
{
	uint64_t n = 0;

	for (struct dentry *de = dir->dir.first; de; de = de->next) {
		struct inode *in = de->inode;

		if (S_ISDIR(in->mode)) {
			n += tree_bytes(in);
		} else if (S_ISREG(in->mode)) {
			file_rdlock(&in->file);
			n += in->file.size;
			file_unlock(&in->file);
		}
	}
	return n;
}

/*
 * What the next checkpoint will likely need, for the store's balancer:
 * the larger of the two newest checkpoints (one may be half written),
 * remembered when they are deleted.  --no-prefault: nothing ahead of use.
 */
static uint64_t next_checkpoint_bytes(void *ctx)
{
	struct eng *e = ctx;
	struct inode *newest[2] = { NULL, NULL };
	uint64_t bytes = 0;

	if (e->cfg.prefault == ENG_PREFAULT_NONE)
		return 0;
	ns_rdlock(e);
	for (struct dentry *de = e->ns.root->dir.first; de; de = de->next) {
		struct inode *c = de->inode;

		if (!S_ISDIR(c->mode))
			continue;
		if (!newest[0] || c->ckpt_seq > newest[0]->ckpt_seq) {
			newest[1] = newest[0];
			newest[0] = c;
		} else if (!newest[1] || c->ckpt_seq > newest[1]->ckpt_seq) {
			newest[1] = c;
		}
	}
	for (int i = 0; i < 2; i++)
		if (newest[i]) {
			uint64_t n = tree_bytes(newest[i]);

			bytes = n > bytes ? n : bytes;
		}
	ns_unlock(e);
	if (bytes)
		atomic_store(&e->learned_ckpt_bytes, bytes);
	return atomic_load(&e->learned_ckpt_bytes);
}

const char *eng_state_name(enum eng_state s)
{
	switch (s) {
	case ENG_STATE_LOST:
		return "lost";
	case ENG_STATE_WRITING:
		return "writing";
	case ENG_STATE_SEALED:
		return "sealed";
	case ENG_STATE_PROTECTED:
		return "protected";
	case ENG_STATE_PERSISTED:
		return "persisted";
	}
	return "unknown";
}

const char *eng_crc_state_name(enum eng_crc_state s)
{
	switch (s) {
	case ENG_CRC_PENDING:
		return "pending";
	case ENG_CRC_FINAL:
		return "ok";
	case ENG_CRC_UNVERIFIED:
		return "unverified";
	case ENG_CRC_BAD:
		return "bad";
	}
	return "unknown";
}

/*
 * What the durability record's writer says became true, counted: the
 * rate at which files' versions reach each state (status, metrics).
 * Posted with no file lock held, maybe under ns->lock: atomics only.
 */
static void count_news(struct eng *e, const struct eng_ev *ev, void *ctx)
{
	(void)ctx;
	switch (ev->kind) {
	case EV_PROTECTED:
		atomic_fetch_add(&e->cnt.protected_versions, 1);
		break;
	case EV_PERSISTED:
		atomic_fetch_add(&e->cnt.persisted_versions, 1);
		break;
	case EV_LOST:
		atomic_fetch_add(&e->cnt.lost_versions, 1);
		break;
	default:
		break;
	}
}

int eng_new(const struct eng_config *cfg, struct eng **out)
{
	struct eng *e;
	void *zeros;
	int rc;

	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->cfg = *cfg;
	e->start_time = time(NULL);
	pthread_mutex_init(&e->names_lock, NULL);
	pthread_mutex_init(&e->handles_lock, NULL);
	pthread_mutex_init(&e->joined_lock, NULL);
	rft_cond_init(&e->joined); /* timed waits: eng_wait_joined */
	rc = core_io_new(e);
	if (rc == 0)
		rc = eng_listen(e, count_news, NULL);
	if (rc == 0)
		rc = evict_new(e);
	if (rc == 0)
		rc = pass_init(e);
	if (rc < 0)
		goto fail;
	if (getrandom(&e->id_seed, sizeof(e->id_seed), 0) !=
	    (ssize_t)sizeof(e->id_seed))
		e->id_seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	e->mountpoint = strdup(cfg->mountpoint ? cfg->mountpoint : "");
	e->persist_dir = cfg->persist_dir ? strdup(cfg->persist_dir) : NULL;
	e->spill_dir = cfg->spill_dir ? strdup(cfg->spill_dir) : NULL;
	if (!e->mountpoint || (cfg->persist_dir && !e->persist_dir) ||
	    (cfg->spill_dir && !e->spill_dir)) {
		rc = -ENOMEM;
		goto fail;
	}
	e->cfg.mountpoint = e->mountpoint;
	e->cfg.persist_dir = e->persist_dir;
	e->cfg.spill_dir = e->spill_dir;

	rc = store_init(&e->store, cfg->mem_bytes, cfg->chunk_size,
			(cfg->prefault == ENG_PREFAULT_START ? STORE_PREFAULT
							     : 0) |
				(cfg->lock_memory ? STORE_LOCK : 0));
	if (rc < 0) {
		rft_err("cannot set up a %llu-byte arena%s: %s%s",
			(unsigned long long)cfg->mem_bytes,
			cfg->lock_memory ? " locked in RAM" : "",
			strerror(-rc),
			cfg->lock_memory && (rc == -ENOMEM || rc == -EPERM)
				? " (RLIMIT_MEMLOCK, ulimit -l, must allow "
				  "the whole budget, or the daemon needs "
				  "CAP_IPC_LOCK)"
				: "");
		goto fail;
	}
	e->store.pressure = evict_pressure;
	e->store.pressure_ctx = e;
	e->store.target = next_checkpoint_bytes;
	e->store.target_ctx = e;
	/* Holes are read from here: zero pages, shared, never written. */
	zeros = mmap(NULL, e->store.chunk_size, PROT_READ,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (zeros == MAP_FAILED) {
		rc = -errno;
		goto fail;
	}
	e->zeros = zeros;

	rc = ns_init(&e->ns);
	if (rc < 0)
		goto fail;
	e->ns.root = ns_new_inode(e, S_IFDIR | 0755, getuid(), getgid());
	if (!e->ns.root) {
		rc = -ENOMEM;
		goto fail;
	}

	rc = spill_new(e);
	if (rc < 0)
		goto fail;
	if (e->persist_dir) {
		rc = persist_new(e, &e->persist);
		if (rc < 0)
			goto fail;
		/* A group's namespace comes from its log. */
		rc = cfg->node < 0 ? persist_scan(e) : 0;
		if (rc < 0)
			goto fail;
	}
	/*
	 * Alone, the namespace is known now: what the spill dir holds of it
	 * is taken back (a group's, once it caught up with its log: its
	 * ready step).  A failure only leaves the pieces where else they are.
	 */
	if (cfg->node < 0)
		eng_spill_found(e);
	*out = e;
	return 0;
fail:
	eng_free(e);
	return rc;
}

int eng_start(struct eng *e)
{
	int rc = copier_start(e);

	if (rc == 0)
		rc = fetch_start(e);
	if (rc == 0 && e->gops)
		rc = e->gops->start(e->gctx);
	/* --prefault faulted all of it in and keeps it. */
	if (rc == 0 && e->cfg.prefault != ENG_PREFAULT_START)
		rc = store_balance_start(&e->store);
	if (rc == 0)
		rc = persist_start(e);
	return rc;
}

int eng_stop(struct eng *e)
{
	if (e->gops)
		e->gops->stop(e->gctx); /* changes in flight: -ESHUTDOWN */
	fetch_stop(e); /* every queued read answered while it can be */
	store_balance_stop(&e->store);
	copier_stop(e); /* queued writes land before the last write-back */
	return persist_stop(e, e->cfg.unmount_flush);
}

void eng_free(struct eng *e)
{
	if (!e)
		return;
	if (e->gops) {
		e->gops->stop(e->gctx);
		e->gops->free(e->gctx);
	}
	fetch_fini(e);
	copier_stop(e);
	pass_fini(e);
	eng_free_handles(e);
	persist_free(e->persist);
	if (e->ns.table)
		ns_fini(e);
	spill_free(e);
	pass_homes_fini(e); /* the files pointed into them */
	if (e->zeros)
		munmap((void *)e->zeros, e->store.chunk_size);
	store_fini(&e->store);
	evict_free(e);
	core_io_free(e);
	free(e->persist_dir);
	free(e->spill_dir);
	free(e->mountpoint);
	pthread_mutex_destroy(&e->names_lock);
	pthread_mutex_destroy(&e->handles_lock);
	pthread_mutex_destroy(&e->joined_lock);
	pthread_cond_destroy(&e->joined);
	free(e);
}

bool eng_in_group(const struct eng *e)
{
	return e->gops != NULL;
}

void eng_protect_stats(struct eng *e, struct eng_protect_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->holder_dead = -1;
	st->stalled_holder = -1;
	if (e->gops && e->gops->protect_stats) {
		e->gops->protect_stats(e->gctx, st);
		if (st->scheme[0])
			st->files_unprotected = file_count_unprotected(e);
		st->files_lost = (uint64_t)eng_list_lost(e, true, 0, NULL,
							 NULL);
	}
}

void eng_log_stats(struct eng *e, struct eng_log_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (e->gops && e->gops->log_stats)
		e->gops->log_stats(e->gctx, st);
}

int eng_group_ready(struct eng *e, int timeout_ms)
{
	int rc = e->gops ? e->gops->ready(e->gctx, timeout_ms) : 0;

	if (rc == 0)
		eng_joined(e);
	return rc;
}

void eng_set_invalidator(struct eng *e, const struct eng_invalidator *inv)
{
	e->inval = *inv;
}

void eng_invalidated(struct eng *e)
{
	if (e->gops && e->gops->kick)
		e->gops->kick(e->gctx);
}

int eng_group_leave(struct eng *e, unsigned wait_ms)
{
	return e->gops && e->gops->leave ? e->gops->leave(e->gctx, wait_ms)
					 : 0;
}

const struct eng_config *eng_get_config(struct eng *e)
{
	return &e->cfg;
}

/* --- reporting ---------------------------------------------------------- */

struct count {
	struct eng *e;
	uint64_t logical;
	uint64_t own, copies, cached; /* arena bytes */
	uint64_t lost;		/* files (named) in state lost */
	uint64_t spilled;	/* pieces in the spill dir */
};

static int count_bytes(void *ctx, struct inode *in)
{
	struct count *c = ctx;
	struct file *f = &in->file;

	if (!S_ISREG(in->mode))
		return 0;
	file_rdlock(f);
	if (in->nlink > 0)
		c->logical += f->size;
	if (in->nlink > 0 && file_state(f) == ENG_STATE_LOST)
		c->lost++;
	for (uint32_t i = 0; i < f->nslots; i++) {
		const struct slot *sl = &f->slots[i];

		uint64_t n;

		c->spilled += sl->where == PIECE_SPILL;
		if (!slot_in_ram(sl))
			continue;
		n = store_cap(&c->e->store, sl->chunk);
		if (f->owner == c->e->node)
			c->own += n;
		else if (sl->flags & SLOT_FETCHED)
			c->cached += n;
		else
			c->copies += n;
	}
	file_unlock(f);
	return 0;
}

void eng_get_stats(struct eng *e, struct eng_stats *s)
{
	struct count c = { .e = e };
	struct eng_protect_stats ps;
	uint32_t nfree = store_free_count(&e->store);

	memset(s, 0, sizeof(*s));
	s->chunk_size = e->store.chunk_size;
	s->chunks_total = e->store.nchunks;
	s->chunks_used = e->store.nchunks - nfree;
	s->mem_budget = e->store.bytes;
	s->mem_used = s->chunks_used * s->chunk_size;
	s->mem_prefaulted = store_faulted_bytes(&e->store);
	s->mem_locked = store_locked_bytes(&e->store);
	s->bytes_resident = s->mem_used;
	ns_rdlock(e);
	s->files = e->ns.nfiles;
	s->dirs = e->ns.ndirs;
	for (struct dentry *de = e->ns.root->dir.first; de; de = de->next)
		if (S_ISDIR(de->inode->mode))
			s->checkpoints++;
	ns_walk(&e->ns, count_bytes, &c);
	ns_unlock(e);
	s->bytes_logical = c.logical;
	s->files_lost = c.lost;
	s->mem_own = c.own;
	s->mem_copies = c.copies;
	s->mem_cached = c.cached;
	s->spill_pieces = c.spilled;
	store_usage(&e->store, &s->small_slabs, &s->small_bytes);
	eng_protect_stats(e, &ps);
	s->mem_parity = ps.parity_bytes;

	s->write_ops = atomic_load(&e->cnt.write_ops);
	s->write_bytes = atomic_load(&e->cnt.write_bytes);
	s->read_ops = atomic_load(&e->cnt.read_ops);
	s->read_bytes = atomic_load(&e->cnt.read_bytes);
	s->enospc = atomic_load(&e->cnt.enospc);
	s->crc_errors = atomic_load(&e->cnt.crc_errors);
	s->evicted_chunks = atomic_load(&e->cnt.evicted_chunks);
	s->readthrough_chunks = atomic_load(&e->cnt.readthrough_chunks);
	s->fetch_reads = atomic_load(&e->cnt.fetch_reads);
	s->fetch_timeouts = atomic_load(&e->cnt.fetch_timeouts);
	s->fetch_stalls = atomic_load(&e->cnt.fetch_stalls);
	s->reads_uncached = atomic_load(&e->cnt.reads_uncached);
	s->protected_versions = atomic_load(&e->cnt.protected_versions);
	s->persisted_versions = atomic_load(&e->cnt.persisted_versions);
	s->lost_versions = atomic_load(&e->cnt.lost_versions);
	/* Caches count with or without a persist dir. */
	s->chunks_evictable = evict_count(e);
	s->readthrough_bytes = atomic_load(&e->cnt.readthrough_bytes);
	s->peer_bytes = atomic_load(&e->cnt.peer_bytes);
	pass_get_stats(e, s);
	s->pass_waiting = pass_waiting(e);
	s->start_time = e->start_time;
	persist_get_stats(e, s);
	spill_get_stats(e, s);
}

/* The latest of @ms into *@acc: UINT64_MAX once one is 0 (not known). */
static void latest(uint64_t *acc, bool there, uint64_t ms)
{
	if (!there || !ms)
		*acc = UINT64_MAX;
	else if (*acc != UINT64_MAX && ms > *acc)
		*acc = ms;
}

/* Count regular file @in in @ci; ns->lock held. */
static void ckpt_file(struct eng *e, struct inode *in,
		      struct eng_ckpt_info *ci)
{
	struct file *f = &in->file;
	enum eng_state st;

	file_rdlock(f);
	st = file_state(f);
	ci->bytes += f->size;
	ci->bytes_resident += file_ram_bytes(e, f);
	latest(&ci->sealed_ms, st >= ENG_STATE_SEALED, f->dur.sealed_ms);
	latest(&ci->protected_ms, st >= ENG_STATE_PROTECTED,
	       f->dur.protected_ms);
	latest(&ci->persisted_ms, st == ENG_STATE_PERSISTED,
	       f->dur.persisted_ms);
	/* Read here since its last seal, and closed: part of a load. */
	if (in->readers) {
		ci->load_to_ms = UINT64_MAX; /* being read: ended later */
	} else if (in->read_to_ms && in->read_from_ms >= f->dur.sealed_ms &&
		   ci->load_to_ms != UINT64_MAX) {
		if (!ci->load_from_ms || in->read_from_ms < ci->load_from_ms)
			ci->load_from_ms = in->read_from_ms;
		if (in->read_to_ms > ci->load_to_ms)
			ci->load_to_ms = in->read_to_ms;
		ci->load_bytes += f->size;
	}
	file_unlock(f);
	if (st < ci->state)
		ci->state = st;
	ci->files++;
	ci->files_lost += st == ENG_STATE_LOST;
	ci->files_writing += st == ENG_STATE_WRITING;
	ci->files_sealed += st >= ENG_STATE_SEALED;
	ci->files_protected += st >= ENG_STATE_PROTECTED;
	ci->files_persisted += st == ENG_STATE_PERSISTED;
}

/* Weakest state and totals of the files below @dir; ns->lock held. */
static void ckpt_walk(struct eng *e, struct inode *dir,
		      struct eng_ckpt_info *ci)
{
	for (struct dentry *de = dir->dir.first; de; de = de->next) {
		struct inode *in = de->inode;

		if (S_ISDIR(in->mode))
			ckpt_walk(e, in, ci);
		else if (S_ISREG(in->mode))
			ckpt_file(e, in, ci);
	}
}

/* @ci's times 0 where not every file has one. */
static void ckpt_times_end(struct eng_ckpt_info *ci)
{
	if (ci->sealed_ms == UINT64_MAX || !ci->files)
		ci->sealed_ms = 0;
	if (ci->protected_ms == UINT64_MAX || !ci->files)
		ci->protected_ms = 0;
	if (ci->persisted_ms == UINT64_MAX || !ci->files)
		ci->persisted_ms = 0;
	if (ci->load_to_ms == UINT64_MAX)
		ci->load_from_ms = ci->load_to_ms = ci->load_bytes = 0;
}

/* The same as ckpt_walk, its times ended. */
static void ckpt_tree(struct eng *e, struct inode *dir,
		      struct eng_ckpt_info *ci)
{
	ckpt_walk(e, dir, ci);
	ckpt_times_end(ci);
}

int eng_list_checkpoints(struct eng *e, eng_ckpt_fn fn, void *ctx)
{
	struct eng_ckpt_info *v = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;

	/* Copy out under the lock; @fn runs without it. */
	ns_rdlock(e);
	for (struct dentry *de = e->ns.root->dir.first; de; de = de->next) {
		struct inode *c = de->inode;
		struct eng_ckpt_info ci = { 0 };

		if (!S_ISDIR(c->mode))
			continue;
		if (n == cap) {
			struct eng_ckpt_info *nv;

			cap = cap ? cap * 2 : 16;
			nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				rc = -ENOMEM;
				break;
			}
			v = nv;
		}
		ci.name = strdup(de->name);
		if (!ci.name) {
			rc = -ENOMEM;
			break;
		}
		ci.seq = c->ckpt_seq;
		ci.state = ENG_STATE_PERSISTED;
		ci.born_ms = c->ckpt_born_ms;
		ckpt_tree(e, c, &ci);
		ci.in_keep_window = ns_in_keep_window(e, c->ckpt_seq);
		ci.persist_selected = e->cfg.persist_every > 0 &&
				      c->ckpt_seq % e->cfg.persist_every == 0;
		v[n++] = ci;
	}
	ns_unlock(e);

	/* Oldest first. */
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && v[j - 1].seq > v[j].seq; j--) {
			struct eng_ckpt_info t = v[j];

			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = fn(ctx, &v[i]);
	for (size_t i = 0; i < n; i++)
		free((char *)v[i].name);
	free(v);
	return rc;
}

struct entry_copy {
	struct eng_entry_info ei;
	char *path;
};

static int fill_entry(struct eng *e, struct inode *in, const char *path,
		      struct entry_copy *c)
{
	memset(c, 0, sizeof(*c));
	c->path = strdup(path);
	if (!c->path)
		return -ENOMEM;
	c->ei.ino = in->ino;
	c->ei.mode = in->mode;
	/* A regular file's mtime changes under its file lock: read below. */
	if (!S_ISREG(in->mode))
		c->ei.mtime = in->mtime;
	c->ei.tier = "ram";
	c->ei.owner = -1;
	if (S_ISREG(in->mode)) {
		struct file *f = &in->file;

		file_rdlock(f);
		c->ei.size = f->size;
		c->ei.mtime = in->mtime;
		c->ei.state = file_state(f);
		c->ei.file_id = f->id;
		c->ei.crc = file_crc_state_locked(f);
		c->ei.chunks = (uint32_t)((f->size + e->store.chunk_size - 1) >>
					  e->store.chunk_shift);
		c->ei.chunks_resident = f->resident;
		c->ei.owner = e->gops ? f->owner : -1;
		if (e->gops && f->owner >= 0 && f->owner < 64)
			c->ei.holders = f->holders | 1ULL << f->owner;
		c->ei.in_persist = f->copy == COPY_HOME && file_persisted(f);
		uint32_t away = 0, spilled = 0;

		for (uint32_t i = 0; i < f->nslots; i++) {
			away += f->slots[i].where == PIECE_PERSIST;
			spilled += f->slots[i].where == PIECE_SPILL;
		}
		if (spilled)
			c->ei.tier = spilled == f->nslots ? "spill"
							   : "ram+spill";
		else if (f->copy != COPY_NONE && file_data_persisted(f))
			c->ei.tier = away == 0	       ? "ram+persist"
				     : away == f->nslots ? "persist"
							 : "partial";
		file_unlock(f);
	} else if (S_ISLNK(in->mode)) {
		c->ei.size = strlen(in->target);
		c->ei.state = in->node_persisted ? ENG_STATE_PERSISTED
						: ENG_STATE_SEALED;
		c->ei.crc = ENG_CRC_FINAL;
		c->ei.in_persist = in->node_persisted;
	} else {
		c->ei.state = ENG_STATE_SEALED;
		c->ei.crc = ENG_CRC_FINAL;
	}
	return 0;
}

/* The inode at @path (relative to the root); ns->lock held.  0 or -errno. */
static int find_path(struct eng *e, const char *path, struct inode **out)
{
	char buf[PATH_MAX], *save = NULL, *part;
	struct inode *in = e->ns.root;

	if (snprintf(buf, sizeof(buf), "%s", path ? path : "") >=
	    (int)sizeof(buf))
		return -ENAMETOOLONG;
	for (part = strtok_r(buf, "/", &save); part;
	     part = strtok_r(NULL, "/", &save)) {
		struct dentry *de;

		if (!S_ISDIR(in->mode) || !(de = ns_dir_find(&in->dir, part)))
			return -ENOENT;
		in = de->inode;
	}
	*out = in;
	return 0;
}

/* @in's files counted into @ci (a file alone, a directory's tree). */
static void tree_state(struct eng *e, struct inode *in,
		       struct eng_ckpt_info *ci)
{
	if (S_ISDIR(in->mode)) {
		ckpt_tree(e, in, ci);
		if (in->parent == e->ns.root && in != e->ns.root) {
			ci->seq = in->ckpt_seq;
			ci->in_keep_window = ns_in_keep_window(e, in->ckpt_seq);
			ci->persist_selected =
				e->cfg.persist_every > 0 &&
				in->ckpt_seq % e->cfg.persist_every == 0;
		}
	} else if (S_ISREG(in->mode)) {
		ckpt_file(e, in, ci);
		ckpt_times_end(ci);
	}
}

int eng_path_state(struct eng *e, const char *path,
		   struct eng_ckpt_info *ci)
{
	struct inode *in;
	int rc;

	*ci = (struct eng_ckpt_info){ .name = path,
				      .state = ENG_STATE_PERSISTED };
	ns_rdlock(e);
	rc = find_path(e, path, &in);
	if (rc == 0)
		tree_state(e, in, ci);
	ns_unlock(e);
	return rc;
}

int eng_ino_state(struct eng *e, uint64_t ino, struct eng_ckpt_info *ci)
{
	struct inode *in;
	int rc = eng_fresh(e);

	*ci = (struct eng_ckpt_info){ .state = ENG_STATE_PERSISTED };
	if (rc < 0)
		return rc;
	ns_rdlock(e);
	in = ns_find(&e->ns, ino);
	if (!in)
		rc = -ENOENT;
	else if (!S_ISDIR(in->mode) && !S_ISREG(in->mode))
		rc = -ENODATA;
	else
		tree_state(e, in, ci);
	ns_unlock(e);
	return rc;
}

int eng_list_path(struct eng *e, const char *path, eng_entry_fn fn, void *ctx)
{
	char buf[PATH_MAX], child[PATH_MAX];
	struct entry_copy *v = NULL;
	struct inode *in;
	size_t n = 0;
	int rc;

	ns_rdlock(e);
	rc = find_path(e, path, &in);
	if (rc < 0)
		goto out;
	if (ns_path(&e->ns, in, buf, sizeof(buf)) < 0) {
		rc = -ENOENT;
		goto out;
	}
	if (!S_ISDIR(in->mode)) {
		v = malloc(sizeof(*v));
		rc = v ? fill_entry(e, in, buf, &v[0]) : -ENOMEM;
		n = rc == 0;
		goto out;
	}
	v = malloc((in->dir.count + 1) * sizeof(*v));
	if (!v) {
		rc = -ENOMEM;
		goto out;
	}
	for (struct dentry *de = in->dir.first; de && rc == 0; de = de->next) {
		if (snprintf(child, sizeof(child), "%s%s%s", buf,
			     *buf ? "/" : "", de->name) >= (int)sizeof(child)) {
			rc = -ENAMETOOLONG;
			break;
		}
		rc = fill_entry(e, de->inode, child, &v[n]);
		n += rc == 0;
	}
out:
	ns_unlock(e);
	for (size_t i = 0; i < n; i++) {
		v[i].ei.path = v[i].path;
		if (rc == 0)
			rc = fn(ctx, &v[i].ei);
		free(v[i].path);
	}
	free(v);
	return rc;
}

/* xor, rs: piece @i's stripe, data slot and the nodes of its members. */
static void stripe_of(const struct file *f, uint32_t i,
		      struct eng_piece_info *pi)
{
	struct ers_layout l;
	uint64_t stripe;
	int slot;

	if (!f->scheme || stripe_layout(f->scheme, &l) < 0 ||
	    ers_layout_locate(&l, f->owner, f->chunk_base + i, &stripe,
			      &slot) < 0)
		return;
	pi->striped = true;
	pi->stripe = stripe;
	pi->slot = slot;
	for (int x = 0; x < l.k + l.m; x++) {
		int n = ers_layout_node(&l, stripe, x);

		if (n >= 0 && x < l.k)
			pi->data_nodes |= 1ULL << n;
		else if (n >= 0)
			pi->parity_nodes |= 1ULL << n;
	}
}

int eng_list_pieces(struct eng *e, const char *path, eng_piece_fn fn,
		    void *ctx)
{
	struct eng_piece_info *v = NULL;
	struct inode *in;
	uint32_t n = 0;
	int rc;

	ns_rdlock(e);
	rc = find_path(e, path, &in);
	if (rc == 0 && !S_ISREG(in->mode))
		rc = S_ISDIR(in->mode) ? -EISDIR : -EINVAL;
	if (rc == 0) {
		struct file *f = &in->file;

		file_rdlock(f);
		n = (uint32_t)((f->size + e->store.chunk_size - 1) >>
			       e->store.chunk_shift);
		v = calloc(n ? n : 1, sizeof(*v));
		for (uint32_t i = 0; v && i < n; i++) {
			const struct slot *s = i < f->nslots ? &f->slots[i]
							     : NULL;
			uint32_t len = file_piece_len(e, f->size, i);

			v[i].index = i;
			v[i].len = len;
			v[i].crc_known = s && s->crc_len == len;
			v[i].crc = v[i].crc_known ? s->crc : 0;
			v[i].here = !s || s->where == PIECE_HOLE ? "hole"
				    : s->where == PIECE_PEER	  ? "peers"
				    : s->where == PIECE_PERSIST	  ? "persist"
				    : s->where == PIECE_SPILL	  ? "spill"
				    : (s->flags & SLOT_FETCHED)
					? "ram (fetched)"
					: "ram";
			v[i].owner = e->gops ? f->owner : -1;
			v[i].holders =
				e->gops && f->owner >= 0 && f->owner < 64
					? f->holders | 1ULL << f->owner
					: 0;
			v[i].seal = e->gops ? f->gseal : 0;
			stripe_of(f, i, &v[i]);
		}
		file_unlock(f);
		if (!v)
			rc = -ENOMEM;
	}
	ns_unlock(e);
	for (uint32_t i = 0; rc == 0 && i < n; i++)
		rc = fn(ctx, &v[i]);
	free(v);
	return rc;
}

struct copy_bytes {
	struct eng *e;
	uint64_t *there, *here;
};

static int copy_bytes_of(void *ctx, struct inode *in)
{
	struct copy_bytes *cb = ctx;
	struct eng *e = cb->e;
	struct file *f = &in->file;

	if (!S_ISREG(in->mode) || in->nlink == 0)
		return 0;
	file_rdlock(f);
	if (f->owner == e->node) {
		for (int n = 0; n < 64; n++)
			if (n != e->node && (f->holders & (1ULL << n)))
				cb->there[n] += f->size;
	} else if (f->owner >= 0 && f->owner < 64) {
		for (uint32_t i = 0; i < f->nslots; i++)
			if (slot_in_ram(&f->slots[i]) &&
			    !(f->slots[i].flags & SLOT_FETCHED))
				cb->here[f->owner] +=
					file_piece_len(e, f->size, i);
	}
	file_unlock(f);
	return 0;
}

void eng_copy_bytes(struct eng *e, uint64_t there[64], uint64_t here[64])
{
	struct copy_bytes cb = { e, there, here };

	memset(there, 0, 64 * sizeof(*there));
	memset(here, 0, 64 * sizeof(*here));
	if (!e->gops)
		return;
	ns_rdlock(e);
	ns_walk(&e->ns, copy_bytes_of, &cb);
	ns_unlock(e);
}

struct lost_list {
	struct eng *e;
	bool mine;
	unsigned max;
	char **path;		/* the first @max, strdup()ed */
	size_t n;		/* named */
	uint64_t total;
	int rc;
};

/* ns->lock held (read). */
static int lost_of(void *ctx, struct inode *in)
{
	struct lost_list *l = ctx;
	struct file *f = &in->file;
	char rel[PATH_MAX];
	bool lost;

	if (!S_ISREG(in->mode) || in->nlink == 0)
		return 0;
	file_rdlock(f);
	lost = file_state(f) == ENG_STATE_LOST &&
	       (!l->mine || f->owner == l->e->node);
	file_unlock(f);
	if (!lost)
		return 0;
	if (l->total++ >= l->max)
		return 0;
	if (ns_path(&l->e->ns, in, rel, sizeof(rel)) < 0)
		snprintf(rel, sizeof(rel), "inode %llu",
			 (unsigned long long)in->ino);
	l->path[l->n] = strdup(rel);
	if (!l->path[l->n])
		l->rc = -ENOMEM;
	else
		l->n++;
	return 0;
}

long eng_list_lost(struct eng *e, bool mine, unsigned max, eng_path_fn fn,
		   void *ctx)
{
	struct lost_list l = { e, mine, fn ? max : 0, NULL, 0, 0, 0 };
	int rc = 0;

	if (!e->gops)
		return 0;
	if (l.max && !(l.path = calloc(l.max, sizeof(*l.path))))
		return -ENOMEM;
	ns_rdlock(e);
	ns_walk(&e->ns, lost_of, &l);
	ns_unlock(e);
	for (size_t i = 0; i < l.n; i++) {
		if (rc == 0)
			rc = fn(ctx, l.path[i]);
		free(l.path[i]);
	}
	free(l.path);
	return l.rc < 0 ? l.rc : (long)l.total;
}

/* The regular files eng_verify checks: held, with their paths. */
struct verify_list {
	struct inode **in;
	char **path;
	size_t n, cap;
};

/* Collect @in (at @path) and what is under it; ns->lock held for writing. */
static int verify_collect(struct verify_list *l, struct inode *in,
			  char *path, size_t len, size_t size)
{
	if (S_ISDIR(in->mode)) {
		int rc = 0;

		for (struct dentry *de = in->dir.first; de && rc == 0;
		     de = de->next) {
			size_t n = strlen(de->name) + (len ? 1 : 0);

			if (len + n >= size)
				return -ENAMETOOLONG;
			snprintf(path + len, size - len, "%s%s",
				 len ? "/" : "", de->name);
			rc = verify_collect(l, de->inode, path, len + n, size);
			path[len] = 0;
		}
		return rc;
	}
	if (!S_ISREG(in->mode))
		return 0;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		struct inode **v = realloc(l->in, cap * sizeof(*v));
		char **p;

		if (!v)
			return -ENOMEM;
		l->in = v;
		p = realloc(l->path, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->path = p;
		l->cap = cap;
	}
	l->path[l->n] = strdup(path);
	if (!l->path[l->n])
		return -ENOMEM;
	in->holds++;
	l->in[l->n++] = in;
	return 0;
}

/*
 * verify --repair of this node's copy (@vc, its bad pieces @bad from
 * snapshot @fs): a file this node owns gets its bad pieces back from a
 * holder whose copy is good (@good_copy); of another node's file only the
 * copies a reader fetched are dropped (the next read fetches them again,
 * checked); a holder's copy is put right by the owner's verify --repair.
 */
static void repair_here(struct eng *e, struct inode *in, bool owner,
			bool good_copy, const struct file_snap *fs,
			const uint32_t *bad, struct eng_verify_copy *vc)
{
	if (owner && !good_copy) {
		vc->repair_rc = -ENODATA; /* no good copy to repair from */
		return;
	}
	vc->repaired = file_drop_pieces(e, in, fs, bad, vc->bad, !owner);
	if (!owner) {
		vc->repair_rc = vc->repaired == vc->bad ? 0 : -EOPNOTSUPP;
		return;
	}
	vc->repair_rc = e->gops->repair(e->gctx, in);
	if (vc->repair_rc < 0)
		vc->repaired = 0;
}

/* This node's copy, then each other node with the sealed bytes. */
static void verify_file(struct eng *e, struct inode *in, const char *path,
			bool repair, struct eng_verify_info *vi)
{
	struct file *f = &in->file;
	struct file_snap fs = { 0 };
	struct eng_verify_copy *here = NULL;
	struct eng_piece pc = { 0 };
	uint64_t gseal = 0, holders = 0;
	uint32_t *bad = NULL, digest = 0, off = 0;
	bool owner = false, good_copy = false, resend = false;
	bool is_protected = false, synced = false;
	int rc;

	memset(vi, 0, sizeof(*vi));
	vi->path = path;
	vi->owner = -1;
	/*
	 * What this node shows is off the log's seal: with repair, show the
	 * seal (or, on its sealer, its records) first, then check the bytes.
	 */
	if (e->gops && repair) {
		file_rdlock(f);
		if (file_sealed(f))
			off = file_seal_off_locked(e, f, path);
		file_unlock(f);
		synced = off && file_resync(e, in) == 0;
	}
	file_rdlock(f);
	vi->size = f->size;
	vi->pieces = (uint32_t)((f->size + e->store.chunk_size - 1) >>
				e->store.chunk_shift);
	vi->sealed = file_sealed(f);
	if (e->gops) {
		vi->owner = f->owner;
		owner = f->owner == e->node;
		gseal = f->gseal;
		holders = f->holders;
		if (f->owner >= 0 && f->owner < 64)
			holders |= 1ULL << f->owner;
		pc = (struct eng_piece){ .ino = in->ino, .gseal = f->gseal,
					 .owner = f->owner,
					 .scheme = f->scheme,
					 .stripe_ckpt = f->stripe_ckpt,
					 .chunk_base = f->chunk_base };
		is_protected = f->dur.protected_data == f->version;
		/* The others are asked about the group's seal, as logged. */
		if (f->sealed)
			gseal = f->sealed->index;
		digest = file_seal_digest_locked(f);
	}
	rc = vi->sealed ? file_verify_take_locked(e, f, 0, &fs) : -EBUSY;
	if (rc == 0 && !synced)
		off = file_seal_off_locked(e, f, path);
	file_unlock(f);
	if (!vi->sealed)
		return;
	/* Repair needs the group (a good copy elsewhere) and protection. */
	repair = repair && e->gops && rc == 0;
	if (repair)
		bad = malloc((fs.nslots ? fs.nslots : 1) * sizeof(*bad));
	/* This node's copy, or pieces of another's that a reader fetched. */
	for (uint32_t i = 0; rc == 0 && i < fs.nslots; i++)
		if (slot_in_ram(&fs.slots[i]))
			holders |= 1ULL << e->node;
	if (!e->gops || (holders & (1ULL << e->node)) || rc < 0 || off) {
		here = &vi->copy[vi->ncopies++];
		here->node = e->gops ? e->node : -1;
		here->rc = rc;
		here->off = off;
		here->synced = synced;
		if (rc == 0)
			file_verify_snap(e, &fs, path, here, bad);
	}
	/*
	 * Each node with the sealed bytes checks them where they are; every
	 * other live node compares what it shows, and its record of the
	 * seal, with the group's (listed only when they differ).
	 */
	for (int n = 0; gseal && n < 64 && vi->ncopies < ENG_VERIFY_MAX_COPIES;
	     n++) {
		bool holder = holders & (1ULL << n);
		struct eng_verify_copy *vc;

		if (n == e->node)
			continue;
		vc = &vi->copy[vi->ncopies++];
		/*
		 * A holder drops its bad pieces when the owner asks (to send
		 * them again); any node has another give up a view off the
		 * seal.
		 */
		e->gops->verify(e->gctx, n, in->ino, gseal, digest, repair, vc);
		if (!holder && (vc->rc < 0 || (!vc->off && !vc->seal_differs))) {
			vi->ncopies--;
			continue;
		}
		if (vc->rc == 0 && !vc->bad && !vc->off && !vc->seal_differs)
			good_copy = true;
		/* Its bad pieces dropped there: send them again. */
		if (vc->rc == 0 && vc->repaired)
			resend = true;
	}
	if (here && bad && here->bad) {
		repair_here(e, in, owner, good_copy, &fs, bad, here);
		/* A repair here protects the file again, holders included. */
		if (owner && here->repair_rc == 0)
			resend = false;
	}
	/* Only the holders' copies were bad: send them again. */
	if (resend) {
		rc = e->gops->repair(e->gctx, in);
		for (unsigned k = 0; rc < 0 && k < vi->ncopies; k++)
			if (vi->copy[k].repaired && &vi->copy[k] != here) {
				vi->copy[k].repaired = 0;
				vi->copy[k].repair_rc = rc;
			}
	}
	free(bad);
	file_snap_drop(e, &fs);
	/* Its stripes' parity against their members (a sealed seal's). */
	if (pc.scheme && gseal && e->gops->scrub && is_protected)
		e->gops->scrub(e->gctx, &pc, vi->pieces, vi);
	vi->striped = pc.scheme != 0;
}

int eng_verify(struct eng *e, const char *path, bool repair, eng_verify_fn fn,
	       void *ctx)
{
	struct verify_list l = { 0 };
	struct eng_verify_info *vi;
	char buf[PATH_MAX];
	struct inode *in;
	int rc;

	vi = malloc(sizeof(*vi));
	if (!vi)
		return -ENOMEM;
	ns_wrlock(e);
	rc = find_path(e, path, &in);
	if (rc == 0 && ns_path(&e->ns, in, buf, sizeof(buf)) < 0)
		rc = -ENOENT;
	if (rc == 0)
		rc = verify_collect(&l, in, buf, strlen(buf), sizeof(buf));
	ns_unlock(e);
	for (size_t i = 0; i < l.n; i++) {
		if (rc == 0) {
			verify_file(e, l.in[i], l.path[i], repair, vi);
			rc = fn(ctx, vi);
		}
		ns_unhold(e, l.in[i]);
		free(l.path[i]);
	}
	free(l.in);
	free(l.path);
	free(vi);
	return rc;
}

int eng_flush_request(struct eng *e, uint64_t *ticket)
{
	return persist_flush_request(e, ticket);
}

int eng_flush_progress(struct eng *e, uint64_t ticket,
		       struct eng_flush_progress *p)
{
	return persist_flush_progress(e, ticket, p);
}
