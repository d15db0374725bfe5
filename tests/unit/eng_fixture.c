/*
 * eng_fixture.c - the synchronous calls of eng_fixture.h: eng_call() as
 * fs/ops.c makes it, then a wait on done() when the answer comes later (a
 * group).  Test code only: the engine itself has no synchronous namespace
 * calls.
 */
#include <pthread.h>

#include "eng_fixture.h"

struct fx_call_wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int rc;
};

static void fx_call_woken(struct eng_call *c, int rc)
{
	struct fx_call_wait *w = c->ctx;

	pthread_mutex_lock(&w->lock);
	w->rc = rc;
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* eng_call(), then wait for done() when it is ENG_LATER.  Sleeps. */
static int fx_call_wait(struct eng *e, struct eng_call *c)
{
	struct fx_call_wait w = { PTHREAD_MUTEX_INITIALIZER,
				  PTHREAD_COND_INITIALIZER, false, 0 };
	int rc;

	c->done = fx_call_woken;
	c->ctx = &w;
	rc = eng_call(e, c);
	if (rc != ENG_LATER)
		return rc;
	pthread_mutex_lock(&w.lock);
	while (!w.done)
		pthread_cond_wait(&w.cond, &w.lock);
	pthread_mutex_unlock(&w.lock);
	return w.rc;
}

/* The call's stat on success. */
static int fx_call_st(struct eng *e, struct eng_call *c, struct stat *st)
{
	int rc = fx_call_wait(e, c);

	if (rc == 0)
		*st = c->st;
	return rc;
}

int eng_setattr(struct eng *e, uint64_t ino, struct eng_file *fp,
		const struct eng_setattr *sa, struct stat *st)
{
	struct eng_call c = { .kind = ENG_CALL_SETATTR, .ino = ino, .fp = fp,
			      .sa = *sa };

	return fx_call_st(e, &c, st);
}

int eng_mknod(struct eng *e, uint64_t parent, const char *name, mode_t mode,
	      dev_t rdev, uid_t uid, gid_t gid, struct stat *st)
{
	struct eng_call c = { .kind = ENG_CALL_MKNOD, .parent = parent,
			      .name = name, .mode = mode, .rdev = rdev,
			      .uid = uid, .gid = gid };

	return fx_call_st(e, &c, st);
}

int eng_mkdir(struct eng *e, uint64_t parent, const char *name, mode_t mode,
	      uid_t uid, gid_t gid, struct stat *st)
{
	struct eng_call c = { .kind = ENG_CALL_MKDIR, .parent = parent,
			      .name = name, .mode = mode, .uid = uid,
			      .gid = gid };

	return fx_call_st(e, &c, st);
}

int eng_symlink(struct eng *e, uint64_t parent, const char *name,
		const char *target, uid_t uid, gid_t gid, struct stat *st)
{
	struct eng_call c = { .kind = ENG_CALL_SYMLINK, .parent = parent,
			      .name = name, .target = target, .uid = uid,
			      .gid = gid };

	return fx_call_st(e, &c, st);
}

int eng_link(struct eng *e, uint64_t ino, uint64_t newparent,
	     const char *newname, struct stat *st)
{
	struct eng_call c = { .kind = ENG_CALL_LINK, .ino = ino,
			      .newparent = newparent, .newname = newname };

	return fx_call_st(e, &c, st);
}

int eng_unlink(struct eng *e, uint64_t parent, const char *name)
{
	struct eng_call c = { .kind = ENG_CALL_UNLINK, .parent = parent,
			      .name = name };

	return fx_call_wait(e, &c);
}

int eng_rmdir(struct eng *e, uint64_t parent, const char *name)
{
	struct eng_call c = { .kind = ENG_CALL_RMDIR, .parent = parent,
			      .name = name };

	return fx_call_wait(e, &c);
}

int eng_rename(struct eng *e, uint64_t parent, const char *name,
	       uint64_t newparent, const char *newname, unsigned flags)
{
	struct eng_call c = { .kind = ENG_CALL_RENAME, .parent = parent,
			      .name = name, .newparent = newparent,
			      .newname = newname, .flags = (int)flags };

	return fx_call_wait(e, &c);
}

int eng_open(struct eng *e, uint64_t ino, int flags, struct eng_file **fp,
	     struct eng_open_info *info)
{
	struct eng_call c = { .kind = ENG_CALL_OPEN, .ino = ino,
			      .flags = flags };
	int rc = fx_call_wait(e, &c);

	if (rc == 0) {
		*fp = c.newfp;
		if (info)
			*info = c.info;
	}
	return rc;
}

int eng_create(struct eng *e, uint64_t parent, const char *name, mode_t mode,
	       uid_t uid, gid_t gid, int flags, struct stat *st,
	       struct eng_file **fp, struct eng_open_info *info)
{
	struct eng_call c = { .kind = ENG_CALL_CREATE, .parent = parent,
			      .name = name, .mode = mode, .uid = uid,
			      .gid = gid, .flags = flags };
	int rc = fx_call_wait(e, &c);

	if (rc == 0) {
		*st = c.st;
		*fp = c.newfp;
		if (info)
			*info = c.info;
	}
	return rc;
}

int eng_flush(struct eng *e, struct eng_file *fp)
{
	struct eng_call c = { .kind = ENG_CALL_FLUSH, .fp = fp };

	return fx_call_wait(e, &c);
}

int eng_fsync(struct eng *e, struct eng_file *fp)
{
	struct eng_call c = { .kind = ENG_CALL_FSYNC, .fp = fp };

	return fx_call_wait(e, &c);
}
