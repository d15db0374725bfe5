/*
 * test_durability.c - what the persist dir holds across crashes, renames,
 * unlinks of open files and failures of the persist dir itself (issue 7).
 *
 * A crash is an engine stopped with --unmount-flush none: nothing is
 * written back at the end, and a new engine mounts the same persist dir.
 * Failures of the persist dir are made with the immutable attribute on one
 * of its directories (renames and unlinks in it fail with EPERM, even for
 * root); where the filesystem under TMPDIR has no such attribute, those
 * cases are skipped and say so.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <linux/fs.h>

#include <cmocka.h>

#include "eng_fixture.h"

#define SIZE (3 * MiB + 5)

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	fx_dirs(fx);
	fx->no_policy = true; /* write back only when a test asks */
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	fx_cleanup(fx);
	free(fx);
	return 0;
}

static uint64_t start_ticket(struct eng *e)
{
	uint64_t t;

	assert_int_equal(eng_flush_request(e, &t), 0);
	return t;
}

static int wait_ticket(struct eng *e, uint64_t t)
{
	struct eng_flush_progress p;

	for (int i = 0; i < 1000; i++) {
		assert_int_equal(eng_flush_progress(e, t, &p), 0);
		if (p.finished)
			return p.error;
		usleep(10 * 1000);
	}
	fail_msg("flush %llu did not finish in 10 s", (unsigned long long)t);
	return -ETIMEDOUT;
}

static int flush_wait(struct eng *e)
{
	return wait_ticket(e, start_ticket(e));
}

/* Stop as a crash would: nothing more is written back. */
static void crash(struct fixture *fx)
{
	fx->e->cfg.unmount_flush = ENG_UNMOUNT_FLUSH_NONE;
	fx_stop(fx);
}

static uint64_t mkdir_at(struct eng *e, uint64_t parent, const char *name)
{
	struct stat st;

	assert_int_equal(eng_mkdir(e, parent, name, 0755, 0, 0, &st), 0);
	return st.st_ino;
}

static int lookup(struct eng *e, uint64_t parent, const char *name,
		  uint64_t *ino)
{
	struct stat st;
	int rc = eng_lookup(e, parent, name, &st);

	if (rc == 0)
		*ino = st.st_ino;
	return rc;
}

/* Contents of @dir/@name in the mount must be @want (@len bytes). */
static void expect_file(struct eng *e, uint64_t dir, const char *name,
			const uint8_t *want, size_t len)
{
	uint8_t *got = malloc(len + 1);
	struct eng_file *fp;
	uint64_t ino = 0;

	assert_int_equal(lookup(e, dir, name, &ino), 0);
	assert_int_equal(eng_open(e, ino, O_RDONLY, &fp, NULL), 0);
	assert_int_equal(fx_read(e, fp, got, len + 1, 0), (ssize_t)len);
	assert_memory_equal(got, want, len);
	eng_release(e, fp);
	eng_forget(e, ino, 1);
	free(got);
}

static bool host_exists(struct fixture *fx, const char *rel)
{
	char path[PATH_MAX * 2];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", fx->persist, rel);
	return lstat(path, &st) == 0;
}

/* Set or clear the immutable attribute of persist/@rel; false if unsupported. */
static bool immutable(struct fixture *fx, const char *rel, bool on)
{
	char path[PATH_MAX * 2];
	int fd, flags = 0;
	bool ok;

	snprintf(path, sizeof(path), "%s/%s", fx->persist, rel);
	fd = open(path, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return false;
	ok = ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
	if (on)
		flags |= FS_IMMUTABLE_FL;
	else
		flags &= ~FS_IMMUTABLE_FL;
	ok = ok && ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
	close(fd);
	return ok;
}

/*
 * Defect 9: the atomic-replace pattern (write NAME.tmp, rename over NAME)
 * must keep the written-back NAME in the persist dir until the new file is
 * written back: a crash in between used to leave no NAME at all.
 */
static void test_rename_over_keeps_old_copy(void **state)
{
	struct fixture *fx = *state;
	uint8_t *v1 = malloc(SIZE), *v2 = malloc(SIZE);
	uint64_t d;

	fx_fill(v1, SIZE, 1);
	fx_fill(v2, SIZE, 2);
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	d = mkdir_at(fx->e, RFT_ROOT_INO, "ck");
	assert_int_not_equal(fx_put(fx->e, d, "model.pt", v1, SIZE), 0);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_int_not_equal(fx_put(fx->e, d, "model.pt.tmp", v2, SIZE), 0);
	assert_int_equal(eng_rename(fx->e, d, "model.pt.tmp", d, "model.pt", 0),
			 0);
	crash(fx);

	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	assert_int_equal(lookup(fx->e, RFT_ROOT_INO, "ck", &d), 0);
	expect_file(fx->e, d, "model.pt", v1, SIZE);

	/* Once written back, the new version replaces it. */
	assert_int_not_equal(fx_put(fx->e, d, "model.pt.tmp", v2, SIZE), 0);
	assert_int_equal(eng_rename(fx->e, d, "model.pt.tmp", d, "model.pt", 0),
			 0);
	assert_int_equal(flush_wait(fx->e), 0);
	crash(fx);
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	assert_int_equal(lookup(fx->e, RFT_ROOT_INO, "ck", &d), 0);
	expect_file(fx->e, d, "model.pt", v2, SIZE);
	assert_false(host_exists(fx, "ck/model.pt.tmp"));
	free(v1);
	free(v2);
}

/*
 * Defect 11: a file open for reading whose bytes are only in the persist
 * dir reads on after it is unlinked, or replaced by a rename, as on tmpfs.
 */
static void test_open_unlinked_reads(void **state)
{
	struct fixture *fx = *state;
	uint8_t *v1 = malloc(SIZE), *v2 = malloc(SIZE), *got = malloc(SIZE);
	struct eng_file *a, *b;
	uint64_t d, ia = 0, ib = 0;

	fx_fill(v1, SIZE, 3);
	fx_fill(v2, SIZE, 4);
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	d = mkdir_at(fx->e, RFT_ROOT_INO, "ck");
	assert_int_not_equal(fx_put(fx->e, d, "a", v1, SIZE), 0);
	assert_int_not_equal(fx_put(fx->e, d, "b", v1, SIZE), 0);
	assert_int_equal(flush_wait(fx->e), 0);
	fx_stop(fx);

	/* Mounted again: nothing is in memory, all reads go to the dir. */
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	assert_int_equal(lookup(fx->e, RFT_ROOT_INO, "ck", &d), 0);
	assert_int_equal(lookup(fx->e, d, "a", &ia), 0);
	assert_int_equal(lookup(fx->e, d, "b", &ib), 0);
	assert_int_equal(eng_open(fx->e, ia, O_RDONLY, &a, NULL), 0);
	assert_int_equal(eng_open(fx->e, ib, O_RDONLY, &b, NULL), 0);
	assert_int_equal(eng_unlink(fx->e, d, "a"), 0);
	assert_int_not_equal(fx_put(fx->e, d, "b.tmp", v2, SIZE), 0);
	assert_int_equal(eng_rename(fx->e, d, "b.tmp", d, "b", 0), 0);

	assert_int_equal(fx_read(fx->e, a, got, SIZE, 0), SIZE);
	assert_memory_equal(got, v1, SIZE);
	assert_int_equal(fx_read(fx->e, b, got, SIZE, 0), SIZE);
	assert_memory_equal(got, v1, SIZE);
	eng_release(fx->e, a);
	eng_release(fx->e, b);
	eng_forget(fx->e, ia, 1);
	eng_forget(fx->e, ib, 1);
	assert_int_equal(flush_wait(fx->e), 0);
	expect_file(fx->e, d, "b", v2, SIZE);
	fx_stop(fx);
	assert_false(host_exists(fx, "ck/a"));

	/* Nothing parked is left behind once the readers are gone. */
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	assert_int_equal(lookup(fx->e, RFT_ROOT_INO, "ck", &d), 0);
	expect_file(fx->e, d, "b", v2, SIZE);
	assert_int_equal(lookup(fx->e, d, "a", &ia), -ENOENT);
	free(v1);
	free(v2);
	free(got);
}

/*
 * Reads that must fetch data (here from the persist dir) are answered from
 * a fetch thread, never on the caller's: while the only fetch thread is
 * stuck (its reply blocks), a read of data in RAM is answered at once and
 * a second read of data not in RAM is queued without blocking its caller.
 * A fetch past its deadline fails ETIMEDOUT and is counted.
 */
struct slow_reply {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool hold;		/* the reply waits while this is set */
	int answered;
	pthread_t thread;	/* who answered last */
	int err;
	size_t len;
	uint8_t *buf;
};

static int slow_reply_fn(void *ctx, const struct iovec *iov, int cnt, int err)
{
	struct slow_reply *r = ctx;

	pthread_mutex_lock(&r->lock);
	r->len = 0;
	for (int i = 0; i < cnt; i++) {
		memcpy(r->buf + r->len, iov[i].iov_base, iov[i].iov_len);
		r->len += iov[i].iov_len;
	}
	r->err = err;
	r->thread = pthread_self();
	while (r->hold)
		pthread_cond_wait(&r->cond, &r->lock);
	r->answered++;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	return 0;
}

static void wait_answers(struct slow_reply *r, int n)
{
	pthread_mutex_lock(&r->lock);
	while (r->answered < n)
		pthread_cond_wait(&r->cond, &r->lock);
	pthread_mutex_unlock(&r->lock);
}

static void test_reads_fetch_off_caller(void **state)
{
	struct fixture *fx = *state;
	uint8_t *v = malloc(SIZE), *got = malloc(SIZE), *got2 = malloc(SIZE);
	struct slow_reply r1 = { .buf = got }, r2 = { .buf = got2 };
	struct eng_file *a, *b, *c;
	struct eng_stats st;
	uint64_t d, ia = 0, ib = 0, ic;
	int answered;

	pthread_mutex_init(&r1.lock, NULL);
	pthread_cond_init(&r1.cond, NULL);
	pthread_mutex_init(&r2.lock, NULL);
	pthread_cond_init(&r2.cond, NULL);
	fx_fill(v, SIZE, 6);
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	d = mkdir_at(fx->e, RFT_ROOT_INO, "ck");
	assert_int_not_equal(fx_put(fx->e, d, "a", v, SIZE), 0);
	assert_int_not_equal(fx_put(fx->e, d, "b", v, SIZE), 0);
	assert_int_equal(flush_wait(fx->e), 0);
	fx_stop(fx);

	/* Mounted again with one fetch thread: a and b are only on disk. */
	fx->fetch_threads = 1;
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	assert_int_equal(lookup(fx->e, RFT_ROOT_INO, "ck", &d), 0);
	assert_int_equal(lookup(fx->e, d, "a", &ia), 0);
	assert_int_equal(lookup(fx->e, d, "b", &ib), 0);
	ic = fx_put(fx->e, d, "c", v, SIZE); /* in RAM */
	assert_int_not_equal(ic, 0);
	assert_int_equal(eng_open(fx->e, ia, O_RDONLY, &a, NULL), 0);
	assert_int_equal(eng_open(fx->e, ib, O_RDONLY, &b, NULL), 0);
	assert_int_equal(eng_open(fx->e, ic, O_RDONLY, &c, NULL), 0);

	r1.hold = true;
	assert_int_equal(eng_read(fx->e, a, SIZE, 0, slow_reply_fn, &r1), 0);
	/* The fetch thread is stuck in r1's reply (or about to be). */
	assert_int_equal(eng_read(fx->e, b, SIZE, 0, slow_reply_fn, &r2), 0);
	pthread_mutex_lock(&r2.lock);
	answered = r2.answered;
	pthread_mutex_unlock(&r2.lock);
	assert_int_equal(answered, 0); /* queued behind a, not answered */
	assert_int_equal(fx_read(fx->e, c, got2, SIZE, 0), SIZE);
	assert_memory_equal(got2, v, SIZE);

	pthread_mutex_lock(&r1.lock);
	r1.hold = false;
	pthread_cond_broadcast(&r1.cond);
	pthread_mutex_unlock(&r1.lock);
	wait_answers(&r1, 1);
	wait_answers(&r2, 1);
	assert_int_equal(r1.err, 0);
	assert_int_equal(r1.len, SIZE);
	assert_memory_equal(got, v, SIZE);
	assert_false(pthread_equal(r1.thread, pthread_self()));
	assert_int_equal(r2.err, 0);
	assert_int_equal(r2.len, SIZE);
	assert_memory_equal(got2, v, SIZE);
	eng_get_stats(fx->e, &st);
	assert_true(st.fetch_reads >= 2);
	assert_int_equal(st.fetch_timeouts, 0);
	eng_release(fx->e, a);
	eng_release(fx->e, b);
	eng_release(fx->e, c);
	eng_forget(fx->e, ia, 1);
	eng_forget(fx->e, ib, 1);
	eng_forget(fx->e, ic, 1);
	fx_stop(fx);

	/* A deadline already passed: ETIMEDOUT, counted; RAM reads unhurt. */
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	fx->e->cfg.fetch_timeout_ms = 0;
	assert_int_equal(lookup(fx->e, RFT_ROOT_INO, "ck", &d), 0);
	assert_int_equal(lookup(fx->e, d, "a", &ia), 0);
	assert_int_equal(eng_open(fx->e, ia, O_RDONLY, &a, NULL), 0);
	assert_int_equal(fx_read(fx->e, a, got, SIZE, 0), -ETIMEDOUT);
	eng_get_stats(fx->e, &st);
	assert_int_equal(st.fetch_timeouts, 1);
	eng_release(fx->e, a);
	eng_forget(fx->e, ia, 1);
	ic = fx_put(fx->e, d, "d", v, SIZE);
	assert_int_equal(eng_open(fx->e, ic, O_RDONLY, &c, NULL), 0);
	assert_int_equal(fx_read(fx->e, c, got, SIZE, 0), SIZE);
	assert_memory_equal(got, v, SIZE);
	eng_release(fx->e, c);
	eng_forget(fx->e, ic, 1);
	free(v);
	free(got);
	free(got2);
}

/*
 * Defects 2 and 4: one file that cannot be written back (a directory sits
 * at its name in the persist dir) fails alone: the others are written
 * back, the flush that met it reports its error, and a later flush that
 * succeeds does not overwrite that report.
 */
static void test_one_failure_fails_alone(void **state)
{
	struct fixture *fx = *state;
	uint8_t data[4096];
	char name[32], path[PATH_MAX * 2];
	uint64_t d, t1, t2;

	fx_fill(data, sizeof(data), 5);
	assert_int_equal(fx_start(fx, 64 * MiB, true, 2), 0);
	d = mkdir_at(fx->e, RFT_ROOT_INO, "ck");
	/* persist/ck/bad is a directory: "ck/bad" cannot be renamed there. */
	snprintf(path, sizeof(path), "%s/ck", fx->persist);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/ck/bad", fx->persist);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/ck/bad/x", fx->persist);
	assert_int_equal(mkdir(path, 0755), 0);
	assert_int_not_equal(fx_put(fx->e, d, "bad", data, sizeof(data)), 0);
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "good%02d", i);
		assert_int_not_equal(fx_put(fx->e, d, name, data,
					    sizeof(data)), 0);
	}
	t1 = start_ticket(fx->e);
	assert_int_not_equal(wait_ticket(fx->e, t1), 0);
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "ck/good%02d", i);
		assert_true(host_exists(fx, name));
	}

	/* Clear the obstacle: the next flush writes the file back. */
	snprintf(path, sizeof(path), "%s/ck/bad/x", fx->persist);
	assert_int_equal(rmdir(path), 0);
	snprintf(path, sizeof(path), "%s/ck/bad", fx->persist);
	assert_int_equal(rmdir(path), 0);
	t2 = start_ticket(fx->e);
	assert_int_equal(wait_ticket(fx->e, t2), 0);
	assert_true(host_exists(fx, "ck/bad"));
	/* Each ticket keeps its own outcome. */
	assert_int_not_equal(wait_ticket(fx->e, t1), 0);
	assert_int_equal(wait_ticket(fx->e, t2), 0);
}

/* Defect 2: a name whose sidecar the persist dir cannot hold is refused. */
static void test_long_names(void **state)
{
	struct fixture *fx = *state;
	char name[NAME_MAX + 1];
	struct eng_file *fp;
	struct stat st;

	assert_int_equal(fx_start(fx, 16 * MiB, true, 2), 0);
	memset(name, 'n', 250);
	name[250] = '\0';
	assert_int_equal(eng_create(fx->e, RFT_ROOT_INO, name, 0644, 0, 0,
				    O_CREAT | O_WRONLY, &st, &fp, NULL),
			 -ENAMETOOLONG);
	/* A directory has no sidecar: the name is fine for it. */
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, name, 0755, 0, 0, &st),
			 0);
	name[NAME_MAX - 8] = '\0'; /* 247 bytes: ".NAME.rftsum" fits */
	assert_int_not_equal(fx_put(fx->e, RFT_ROOT_INO, name, "x", 1), 0);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_true(host_exists(fx, name));
}

/* Defect 13: names the persist dir uses for itself are reserved. */
static void test_reserved_names(void **state)
{
	struct fixture *fx = *state;
	const char *names[] = { ".reftfs-lock", ".reftfs-tmp", ".reftfs-x" };
	struct eng_file *fp;
	struct stat st;
	uint64_t d;

	assert_int_equal(fx_start(fx, 16 * MiB, true, 2), 0);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		assert_int_equal(eng_create(fx->e, RFT_ROOT_INO, names[i], 0644,
					    0, 0, O_CREAT | O_WRONLY, &st, &fp,
					    NULL),
				 -EINVAL);
		assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, names[i], 0755,
					   0, 0, &st),
				 -EINVAL);
	}
	/* Below the root they are ordinary names. */
	d = mkdir_at(fx->e, RFT_ROOT_INO, "ck");
	assert_int_not_equal(fx_put(fx->e, d, ".reftfs-lock", "x", 1), 0);
	assert_int_not_equal(fx_put(fx->e, RFT_ROOT_INO, "f", "x", 1), 0);
	assert_int_equal(eng_rename(fx->e, RFT_ROOT_INO, "f", RFT_ROOT_INO,
				    ".reftfs-lock", 0),
			 -EINVAL);
}

/*
 * Defect 3: a file still open for writing when the engine stops is
 * written back as it is, not dropped.
 */
static void test_open_writer_written_back_at_stop(void **state)
{
	struct fixture *fx = *state;
	uint8_t *v = malloc(SIZE);
	struct eng_file *fp;
	struct stat st;
	uint64_t d;

	fx_fill(v, SIZE, 6);
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	d = mkdir_at(fx->e, RFT_ROOT_INO, "ck");
	assert_int_equal(eng_create(fx->e, d, "open.pt", 0644, 0, 0,
				    O_CREAT | O_WRONLY, &st, &fp, NULL), 0);
	assert_int_equal(eng_write(fx->e, fp, v, SIZE, 0), SIZE);
	assert_int_equal(eng_stop(fx->e), 0);
	eng_release(fx->e, fp);
	eng_free(fx->e);
	fx->e = NULL;

	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	assert_int_equal(lookup(fx->e, RFT_ROOT_INO, "ck", &d), 0);
	expect_file(fx->e, d, "open.pt", v, SIZE);
	free(v);
}

/*
 * Defect 6: a chmod while the file is being written back is not lost: the
 * write-back that copied the old mode does not count.
 */
static void test_chmod_during_writeback(void **state)
{
	struct fixture *fx = *state;
	uint8_t *v = malloc(SIZE);
	struct eng_setattr sa = { .valid = ENG_SET_MODE, .mode = 0600 };
	char path[PATH_MAX * 2];
	struct stat st;
	uint64_t d, ino, t;

	fx_fill(v, SIZE, 7);
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	d = mkdir_at(fx->e, RFT_ROOT_INO, "ck");
	ino = fx_put(fx->e, d, "m.pt", v, SIZE);
	assert_int_not_equal(ino, 0);
	/* Hold the write-back at its rename into place. */
	eng_names_lock(fx->e);
	t = start_ticket(fx->e);
	usleep(300 * 1000);
	assert_int_equal(eng_setattr(fx->e, ino, NULL, &sa, &st), 0);
	eng_names_unlock(fx->e);
	assert_int_equal(wait_ticket(fx->e, t), 0);
	assert_int_equal(flush_wait(fx->e), 0);
	snprintf(path, sizeof(path), "%s/ck/m.pt", fx->persist);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	free(v);
}

/*
 * The same for a directory: a chmod while its metadata is being written
 * back must not be marked persisted with the older mode.  A thread keeps
 * changing the mode while another keeps asking for write-backs; once both
 * stop, one more flush must leave the last mode in the persist dir.
 */
struct dir_churn {
	struct eng *e;
	uint64_t ino;
	_Atomic bool stop;
	_Atomic unsigned chmods;	/* made so far */
	mode_t last;
};

static void *dir_chmodder(void *arg)
{
	struct dir_churn *c = arg;
	struct stat st;

	for (unsigned i = 0; !atomic_load(&c->stop); i++) {
		struct eng_setattr sa = { .valid = ENG_SET_MODE,
					  .mode = 0700 | (i % 64) };

		assert_int_equal(eng_setattr(c->e, c->ino, NULL, &sa, &st),
				 0);
		c->last = sa.mode;
		atomic_fetch_add(&c->chmods, 1);
	}
	return NULL;
}

static void *flusher(void *arg)
{
	struct dir_churn *c = arg;
	uint64_t t;

	while (!atomic_load(&c->stop))
		assert_int_equal(eng_flush_request(c->e, &t), 0);
	return NULL;
}

static void test_dir_chmod_during_writeback(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX * 2];
	struct stat st;

	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	for (int trial = 0; trial < 40; trial++) {
		struct dir_churn c = { .e = fx->e };
		pthread_t a, b;
		char name[16];

		snprintf(name, sizeof(name), "d%d", trial);
		c.ino = mkdir_at(fx->e, RFT_ROOT_INO, name);
		assert_int_equal(pthread_create(&a, NULL, dir_chmodder, &c), 0);
		assert_int_equal(pthread_create(&b, NULL, flusher, &c), 0);
		usleep(20 * 1000);
		/* A loaded machine may not have run the chmods yet. */
		while (atomic_load(&c.chmods) < 8)
			usleep(1000);
		atomic_store(&c.stop, true);
		pthread_join(a, NULL);
		pthread_join(b, NULL);
		assert_int_equal(flush_wait(fx->e), 0);
		snprintf(path, sizeof(path), "%s/%s", fx->persist, name);
		assert_int_equal(stat(path, &st), 0);
		if ((st.st_mode & 07777) != c.last)
			fail_msg("trial %d: %s has mode %04o in the persist "
				 "dir, %04o in the engine", trial, name,
				 st.st_mode & 07777, c.last);
	}
}

/*
 * Defects 7 and 12: a removal or rename the persist dir refused is
 * retried; a file whose copy could not follow its new name reads on from
 * the old place, is written again under the new one, and the old name
 * does not come back after a remount.
 */
static void test_failed_mirror_repaired(void **state)
{
	struct fixture *fx = *state;
	uint8_t *v = malloc(SIZE);
	uint64_t d;

	fx_fill(v, SIZE, 8);
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	d = mkdir_at(fx->e, RFT_ROOT_INO, "ck");
	assert_int_not_equal(fx_put(fx->e, d, "gone", v, SIZE), 0);
	assert_int_not_equal(fx_put(fx->e, d, "a", v, SIZE), 0);
	assert_int_equal(flush_wait(fx->e), 0);
	fx_stop(fx);
	if (!immutable(fx, "ck", true)) {
		immutable(fx, "ck", false);
		skip(); /* no immutable attribute under TMPDIR */
	}
	immutable(fx, "ck", false);

	/* Mounted again, so "a" is read from the persist dir only. */
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	assert_int_equal(lookup(fx->e, RFT_ROOT_INO, "ck", &d), 0);
	assert_true(immutable(fx, "ck", true));
	assert_int_equal(eng_unlink(fx->e, d, "gone"), 0);
	assert_int_equal(eng_rename(fx->e, d, "a", d, "b", 0), 0);
	expect_file(fx->e, d, "b", v, SIZE);
	assert_true(host_exists(fx, "ck/gone"));
	assert_true(host_exists(fx, "ck/a"));
	assert_true(immutable(fx, "ck", false));

	assert_int_equal(flush_wait(fx->e), 0);
	assert_int_equal(flush_wait(fx->e), 0); /* the retries ran */
	assert_false(host_exists(fx, "ck/gone"));
	assert_false(host_exists(fx, "ck/a"));
	assert_true(host_exists(fx, "ck/b"));
	crash(fx);
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	assert_int_equal(lookup(fx->e, RFT_ROOT_INO, "ck", &d), 0);
	expect_file(fx->e, d, "b", v, SIZE);
	assert_int_equal(lookup(fx->e, d, "a", &d), -ENOENT);
	free(v);
}

/* Defect 7: an exchange leaves each name with its own file's bytes. */
static void test_exchange(void **state)
{
	struct fixture *fx = *state;
	uint8_t *v1 = malloc(SIZE), *v2 = malloc(SIZE);
	uint64_t d;

	fx_fill(v1, SIZE, 9);
	fx_fill(v2, SIZE, 10);
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	d = mkdir_at(fx->e, RFT_ROOT_INO, "ck");
	assert_int_not_equal(fx_put(fx->e, d, "a", v1, SIZE), 0);
	assert_int_not_equal(fx_put(fx->e, d, "b", v2, SIZE), 0);
	assert_int_equal(flush_wait(fx->e), 0);
	fx_stop(fx);
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	assert_int_equal(lookup(fx->e, RFT_ROOT_INO, "ck", &d), 0);
	assert_int_equal(eng_rename(fx->e, d, "a", d, "b",
				    ENG_RENAME_EXCHANGE), 0);
	expect_file(fx->e, d, "a", v2, SIZE);
	expect_file(fx->e, d, "b", v1, SIZE);
	crash(fx);
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	assert_int_equal(lookup(fx->e, RFT_ROOT_INO, "ck", &d), 0);
	expect_file(fx->e, d, "a", v2, SIZE);
	expect_file(fx->e, d, "b", v1, SIZE);
	free(v1);
	free(v2);
}

/*
 * Defect 16: holes stay holes across the persist dir: reading a mostly
 * sparse file after a remount needs no memory for its holes.
 */
static void test_sparse_file_after_remount(void **state)
{
	struct fixture *fx = *state;
	struct eng_setattr sa = { .valid = ENG_SET_SIZE, .size = 1ULL << 30 };
	uint8_t *got = malloc(MiB);
	struct eng_file *fp;
	struct eng_stats es;
	struct stat st;
	uint64_t d, ino = 0;

	assert_int_equal(fx_start(fx, 64 * MiB, true, 2), 0);
	d = mkdir_at(fx->e, RFT_ROOT_INO, "ck");
	assert_int_equal(eng_create(fx->e, d, "sparse", 0644, 0, 0,
				    O_CREAT | O_WRONLY, &st, &fp, NULL), 0);
	assert_int_equal(eng_setattr(fx->e, st.st_ino, fp, &sa, &st), 0);
	assert_int_equal(eng_write(fx->e, fp, "hi", 2, 1ULL << 30), 2);
	eng_release(fx->e, fp);
	assert_int_equal(flush_wait(fx->e), 0);
	fx_stop(fx);

	/* 8 MiB of memory for a 1 GiB file that is one hole and "hi". */
	assert_int_equal(fx_start(fx, 8 * MiB, true, 2), 0);
	assert_int_equal(lookup(fx->e, RFT_ROOT_INO, "ck", &d), 0);
	assert_int_equal(lookup(fx->e, d, "sparse", &ino), 0);
	assert_int_equal(eng_open(fx->e, ino, O_RDONLY, &fp, NULL), 0);
	for (uint64_t off = 0; off < (1ULL << 30); off += MiB) {
		assert_int_equal(fx_read(fx->e, fp, got, MiB, (off_t)off), MiB);
		assert_true(got[0] == 0 && got[MiB - 1] == 0 &&
			    !memcmp(got, got + 1, MiB - 1));
	}
	assert_int_equal(fx_read(fx->e, fp, got, MiB, 1LL << 30), 2);
	assert_memory_equal(got, "hi", 2);
	eng_release(fx->e, fp);
	eng_get_stats(fx->e, &es);
	assert_int_equal(es.enospc, 0);
	assert_true(es.chunks_used <= 1);
	free(got);
}

static void expect_stat(struct eng *e, uint64_t dir, const char *name,
			struct stat *st)
{
	assert_int_equal(eng_lookup(e, dir, name, st), 0);
	eng_forget(e, st->st_ino, 1);
}

static void host_stat(struct fixture *fx, const char *rel, struct stat *st)
{
	char path[PATH_MAX * 2];

	snprintf(path, sizeof(path), "%s/%s", fx->persist, rel);
	assert_int_equal(lstat(path, st), 0);
}

/*
 * Defect 18: hard links, FIFOs, device nodes and links of symlinks live in
 * memory and across the persist dir as on tmpfs: a write through one name
 * shows through the others, every name survives a remount, and removing
 * the first name keeps the rest.
 */
static void test_links_and_nodes(void **state)
{
	struct fixture *fx = *state;
	uint8_t *v = malloc(SIZE);
	struct stat st, a, b;
	struct eng_file *fp;
	uint64_t d, ino = 0;

	fx_fill(v, SIZE, 11);
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	d = mkdir_at(fx->e, RFT_ROOT_INO, "ck");
	ino = fx_put(fx->e, d, "a", v, SIZE);
	assert_int_equal(eng_link(fx->e, ino, d, "b", &st), 0);
	assert_int_equal(eng_link(fx->e, ino, RFT_ROOT_INO, "c", &st), 0);
	assert_int_equal(st.st_nlink, 3);
	assert_int_equal(eng_mknod(fx->e, d, "fifo", S_IFIFO | 0640, 0, 0, 0,
				   &st), 0);
	assert_int_equal(eng_mknod(fx->e, d, "null", S_IFCHR | 0666,
				   makedev(1, 3), 0, 0, &st), 0);
	assert_int_equal(eng_symlink(fx->e, d, "sl", "a", 0, 0, &st), 0);
	assert_int_equal(eng_link(fx->e, st.st_ino, d, "sl2", &st), 0);
	assert_int_equal(flush_wait(fx->e), 0);
	host_stat(fx, "ck/a", &a);
	host_stat(fx, "c", &b);
	assert_int_equal(a.st_ino, b.st_ino);

	/* A write through "b" is what "a" and "c" show, there too. */
	memcpy(v, "XYZ", 3);
	assert_int_equal(eng_open(fx->e, ino, O_WRONLY, &fp, NULL), 0);
	assert_int_equal(eng_write(fx->e, fp, "XYZ", 3, 0), 3);
	eng_release(fx->e, fp);
	assert_int_equal(flush_wait(fx->e), 0);
	host_stat(fx, "ck/a", &a);
	host_stat(fx, "ck/b", &b);
	assert_int_equal(a.st_ino, b.st_ino);
	assert_int_equal(eng_unlink(fx->e, d, "a"), 0);
	crash(fx);

	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	assert_int_equal(lookup(fx->e, RFT_ROOT_INO, "ck", &d), 0);
	expect_file(fx->e, d, "b", v, SIZE);
	expect_file(fx->e, RFT_ROOT_INO, "c", v, SIZE);
	expect_stat(fx->e, d, "b", &a);
	expect_stat(fx->e, RFT_ROOT_INO, "c", &b);
	assert_int_equal(a.st_ino, b.st_ino);
	assert_int_equal(a.st_nlink, 2);
	assert_int_equal(lookup(fx->e, d, "a", &ino), -ENOENT);
	expect_stat(fx->e, d, "fifo", &st);
	assert_true(S_ISFIFO(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0640);
	expect_stat(fx->e, d, "null", &st);
	assert_true(S_ISCHR(st.st_mode));
	assert_int_equal(st.st_rdev, makedev(1, 3));
	expect_stat(fx->e, d, "sl", &a);
	expect_stat(fx->e, d, "sl2", &b);
	assert_true(S_ISLNK(b.st_mode));
	assert_int_equal(a.st_ino, b.st_ino);

	/* Renaming one name moves only that one. */
	assert_int_equal(eng_rename(fx->e, d, "b", d, "b2", 0), 0);
	crash(fx);
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	assert_int_equal(lookup(fx->e, RFT_ROOT_INO, "ck", &d), 0);
	expect_file(fx->e, d, "b2", v, SIZE);
	expect_file(fx->e, RFT_ROOT_INO, "c", v, SIZE);
	assert_int_equal(lookup(fx->e, d, "b", &ino), -ENOENT);
	free(v);
}

static int id_cb(void *ctx, const struct eng_entry_info *ei)
{
	*(uint64_t *)ctx = ei->file_id;
	return 0;
}

static uint64_t file_id(struct eng *e, const char *path)
{
	uint64_t id = 0;

	assert_int_equal(eng_list_path(e, path, id_cb, &id), 0);
	return id;
}

/*
 * A file's id is stable across remounts (inode numbers are not), and the
 * durability record's properties are independent: a chmod makes a
 * persisted file's metadata stale without making its data unsafe.
 */
static uint64_t persisted_versions(struct eng *e)
{
	struct eng_stats st;

	eng_get_stats(e, &st);
	return st.persisted_versions;
}

static void test_file_id_and_durability(void **state)
{
	struct fixture *fx = *state;
	struct eng_setattr sa = { .valid = ENG_SET_MODE, .mode = 0600 };
	uint64_t d, ia, a, b;
	struct stat st;
	struct file *f;

	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	d = mkdir_at(fx->e, RFT_ROOT_INO, "ck");
	ia = fx_put(fx->e, d, "a", "aaaa", 4);
	assert_int_not_equal(fx_put(fx->e, d, "b", "bbbb", 4), 0);
	a = file_id(fx->e, "ck/a");
	b = file_id(fx->e, "ck/b");
	assert_true(a != 0 && b != 0 && a != b);
	assert_int_equal(flush_wait(fx->e), 0);
	/* The record's writer told of each (EV_PERSISTED), once. */
	assert_int_equal(persisted_versions(fx->e), 2);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_int_equal(persisted_versions(fx->e), 2);

	f = &ns_find(&fx->e->ns, ia)->file;
	assert_true(file_sealed(f) && file_persisted(f));
	assert_int_equal(eng_setattr(fx->e, ia, NULL, &sa, &st), 0);
	assert_true(file_sealed(f) && file_data_persisted(f));
	assert_false(file_persisted(f));
	assert_int_equal(file_state(f), ENG_STATE_SEALED);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_true(file_persisted(f));
	/* Its metadata's copy made it whole again: news again. */
	assert_int_equal(persisted_versions(fx->e), 3);
	fx_stop(fx);

	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	assert_int_equal(file_id(fx->e, "ck/a"), a);
	assert_int_equal(file_id(fx->e, "ck/b"), b);
	/* Found persisted at the scan: how they were, no news. */
	assert_int_equal(persisted_versions(fx->e), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_file_id_and_durability,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_links_and_nodes, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_sparse_file_after_remount,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_rename_over_keeps_old_copy,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_reads_fetch_off_caller,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_unlinked_reads, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_one_failure_fails_alone,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_long_names, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_reserved_names, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_open_writer_written_back_at_stop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_chmod_during_writeback,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_chmod_during_writeback,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_failed_mirror_repaired,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_exchange, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
