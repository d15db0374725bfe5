/*
 * eng_fixture.h - a real engine in a temp dir for the unit tests: no FUSE,
 * the calls fs/ would make, made directly.  Namespace changes, opens and
 * flushes go through eng_call() as fs/ops.c sends them, then wait for the
 * answer (eng_mkdir() and the rest below: test helpers, not engine API).
 */
#ifndef RFT_ENG_FIXTURE_H
#define RFT_ENG_FIXTURE_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_i.h"

#define MiB (1u << 20)

/*
 * The engine's calls as fs/ops.c makes them, then a wait for the answer:
 * synchronous helpers for the tests (eng_fixture.c), not engine API.
 * Each is eng_call() with one ENG_CALL_* kind; @st, @fp and @info get the
 * call's outputs when it returns 0.
 */
int eng_setattr(struct eng *e, uint64_t ino, struct eng_file *fp,
		const struct eng_setattr *sa, struct stat *st);
int eng_mknod(struct eng *e, uint64_t parent, const char *name, mode_t mode,
	      dev_t rdev, uid_t uid, gid_t gid, struct stat *st);
int eng_mkdir(struct eng *e, uint64_t parent, const char *name, mode_t mode,
	      uid_t uid, gid_t gid, struct stat *st);
int eng_symlink(struct eng *e, uint64_t parent, const char *name,
		const char *target, uid_t uid, gid_t gid, struct stat *st);
int eng_link(struct eng *e, uint64_t ino, uint64_t newparent,
	     const char *newname, struct stat *st);
int eng_unlink(struct eng *e, uint64_t parent, const char *name);
int eng_rmdir(struct eng *e, uint64_t parent, const char *name);
int eng_rename(struct eng *e, uint64_t parent, const char *name,
	       uint64_t newparent, const char *newname, unsigned flags);
int eng_open(struct eng *e, uint64_t ino, int flags, struct eng_file **fp,
	     struct eng_open_info *info);
int eng_create(struct eng *e, uint64_t parent, const char *name, mode_t mode,
	       uid_t uid, gid_t gid, int flags, struct stat *st,
	       struct eng_file **fp, struct eng_open_info *info);
int eng_flush(struct eng *e, struct eng_file *fp);
int eng_fsync(struct eng *e, struct eng_file *fp);

struct fixture {
	char tmp[PATH_MAX];
	char persist[PATH_MAX + 16];
	char spill[PATH_MAX + 16];
	uint64_t spill_bytes;	/* a spill dir (fx->spill) of this budget;
				   0: none */
	bool no_policy;	/* --persist-every 0: write back only when asked */
	enum eng_sync sync;	/* --sync (ENG_SYNC_NONE: the default alone) */
	unsigned fetch_threads;	/* 0: the default */
	struct eng *e;
};

static inline void fx_dirs(struct fixture *fx)
{
	snprintf(fx->tmp, sizeof(fx->tmp), "%s/rftunit.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(fx->tmp))
		abort();
	snprintf(fx->persist, sizeof(fx->persist), "%s/persist", fx->tmp);
	mkdir(fx->persist, 0755);
	snprintf(fx->spill, sizeof(fx->spill), "%s/spill", fx->tmp);
	mkdir(fx->spill, 0755);
}

/* Start an engine; @persist: use fx->persist as the persist dir. */
static inline int fx_start(struct fixture *fx, uint64_t mem, bool persist,
			   unsigned keep)
{
	struct eng_config cfg;
	int rc;

	eng_config_defaults(&cfg);
	cfg.mountpoint = fx->tmp;
	cfg.mem_bytes = mem;
	cfg.persist_dir = persist ? fx->persist : NULL;
	cfg.keep = keep;
	cfg.enospc_wait_ms = 100;
	cfg.retry_ms = 100;
	cfg.prefault = ENG_PREFAULT_NONE; /* small arenas; keep tests quick */
	if (fx->no_policy)
		cfg.persist_every = 0;
	cfg.sync = fx->sync;
	if (fx->spill_bytes) {
		cfg.spill_dir = fx->spill;
		cfg.spill_bytes = fx->spill_bytes;
	}
	if (fx->fetch_threads)
		cfg.fetch_threads = fx->fetch_threads;
	rc = eng_new(&cfg, &fx->e);
	if (rc == 0)
		rc = eng_start(fx->e);
	return rc;
}

static inline void fx_stop(struct fixture *fx)
{
	if (fx->e) {
		eng_stop(fx->e);
		eng_free(fx->e);
	}
	fx->e = NULL;
}

static inline void fx_cleanup(struct fixture *fx)
{
	char cmd[PATH_MAX + 32];

	fx_stop(fx);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", fx->tmp);
}

/* A read's answer, which may come from another thread (a fetch). */
struct rbuf {
	uint8_t *p;
	size_t len;
	int err;
	bool done;
	pthread_mutex_t lock;
	pthread_cond_t cond;
};

static inline int fx_copy_reply(void *ctx, const struct iovec *iov, int cnt,
				int err)
{
	struct rbuf *b = ctx;

	pthread_mutex_lock(&b->lock);
	b->len = 0;
	b->err = err;
	for (int i = 0; i < cnt; i++) {
		memcpy(b->p + b->len, iov[i].iov_base, iov[i].iov_len);
		b->len += iov[i].iov_len;
	}
	b->done = true;
	pthread_cond_signal(&b->cond);
	pthread_mutex_unlock(&b->lock);
	return 0;
}

/* Read into @buf; returns the byte count or -errno. */
static inline ssize_t fx_read(struct eng *e, struct eng_file *fp, void *buf,
			      size_t size, off_t off)
{
	struct rbuf b = { .p = buf };
	int rc;

	pthread_mutex_init(&b.lock, NULL);
	pthread_cond_init(&b.cond, NULL);
	rc = eng_read(e, fp, size, off, fx_copy_reply, &b);
	pthread_mutex_lock(&b.lock);
	while (rc == 0 && !b.done)
		pthread_cond_wait(&b.cond, &b.lock);
	pthread_mutex_unlock(&b.lock);
	pthread_cond_destroy(&b.cond);
	pthread_mutex_destroy(&b.lock);
	if (rc == 0 && b.err < 0)
		rc = b.err;
	return rc < 0 ? rc : (ssize_t)b.len;
}

/* Create @name under @parent, write @len bytes of @data, close. */
static inline uint64_t fx_put(struct eng *e, uint64_t parent,
			      const char *name, const void *data, size_t len)
{
	struct eng_file *fp;
	struct stat st;

	if (eng_create(e, parent, name, 0644, getuid(), getgid(),
		       O_CREAT | O_WRONLY | O_TRUNC, &st, &fp, NULL) < 0)
		return 0;
	if (len && eng_write(e, fp, data, len, 0) != (ssize_t)len)
		st.st_ino = 0;
	eng_release(e, fp);
	return st.st_ino;
}

static inline void fx_fill(uint8_t *p, size_t len, unsigned seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

#endif /* RFT_ENG_FIXTURE_H */
