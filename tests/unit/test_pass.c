/*
 * test_pass.c - FUSE passthrough's engine half (engine/pass.c) without
 * FUSE: opens that pass through to a backing copy, the one id they share,
 * writers whose bytes the engine takes at FLUSH and RELEASE, the copy kept
 * for the next reader, the budget, and opens racing each other.  The
 * kernel's part is played here: ids are made up, and a writer passing
 * through writes the backing file itself.  Needs root (the backing tmpfs
 * is mounted with fsopen); skipped otherwise.
 */
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/mman.h>
#include <syslog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#include <cmocka.h>

#include "eng_fixture.h"
#include "erasure.h"
#include "pass.h"

#define FSIZE (3 * MiB + 4097)

struct tfx {
	struct fixture fx;
	uint8_t *data;
	uint64_t ino;
};

/* Copies at seal wait for the writes to stop this long, in most tests. */
#define QUIET_MS 10

static int setup_with(void **state, uint64_t mem, bool early,
		      unsigned quiet_ms)
{
	struct tfx *t = calloc(1, sizeof(*t));

	fx_dirs(&t->fx);
	assert_int_equal(fx_start(&t->fx, mem, false, 2), 0);
	*state = t;
	if (eng_pass_enable(t->fx.e, MiB, early, quiet_ms) < 0) {
		fx_cleanup(&t->fx);
		free(t);
		*state = NULL;
		return 0;
	}
	t->data = malloc(FSIZE);
	fx_fill(t->data, FSIZE, 7);
	t->ino = fx_put(t->fx.e, 1, "f", t->data, FSIZE);
	assert_true(t->ino != 0);
	return 0;
}

static int setup_mem(void **state, uint64_t mem)
{
	return setup_with(state, mem, true, QUIET_MS);
}

static int setup_copied(void **state, uint64_t mem);

static int setup(void **state)
{
	return setup_copied(state, 64 * MiB);
}

static int setup_big(void **state)
{
	return setup_copied(state, 256 * MiB);
}

static int setup_small(void **state)
{
	return setup_mem(state, 6 * MiB);
}

static int teardown(void **state)
{
	struct tfx *t = *state;

	if (t) {
		fx_cleanup(&t->fx);
		free(t->data);
		free(t);
	}
	return 0;
}

#define NEED_PASS(t)                                                         \
	do {                                                                 \
		if (!(t))                                                    \
			skip(); /* not root: no backing tmpfs */             \
	} while (0)

static struct eng_file *open_as(struct tfx *t, int flags,
				struct eng_open_info *info)
{
	struct eng_file *fp;

	assert_int_equal(eng_open(t->fx.e, t->ino, flags, &fp, info), 0);
	return fp;
}

static void stats(struct tfx *t, struct eng_stats *st)
{
	eng_get_stats(t->fx.e, st);
}

/* Until the counter at @off in eng_stats is at least @n (10 s at most). */
static void wait_count(struct tfx *t, size_t off, uint64_t n)
{
	struct eng_stats st;
	uint64_t got = 0;

	for (int i = 0; i < 1000; i++) {
		stats(t, &st);
		memcpy(&got, (const char *)&st + off, sizeof(got));
		if (got >= n)
			return;
		usleep(10 * 1000);
	}
	assert_true(got >= n);
}

/* At least @n files copied to backing files so far. */
static void wait_files(struct tfx *t, uint64_t n)
{
	wait_count(t, offsetof(struct eng_stats, pass_files), n);
}

/*
 * The file "f" as setup_mem left it, once the copier has copied it: an
 * open that comes during a copy made at seal goes direct.
 */
static int setup_copied(void **state, uint64_t mem)
{
	setup_mem(state, mem);
	if (*state)
		wait_files(*state, 1);
	return 0;
}

/*
 * A dropped copy is freed by the copier thread, not by whoever dropped
 * it (pass.c, reap): its memory must be back within a few seconds.
 */
static void assert_held_soon(struct tfx *t, uint64_t want)
{
	struct eng_stats st;

	for (int i = 0; i < 5000; i++) {
		stats(t, &st);
		if (st.pass_held_bytes == want)
			return;
		usleep(1000);
	}
	assert_int_equal(st.pass_held_bytes, want);
}

/* The backing file holds @want, @len bytes, and is that long. */
static void assert_backing(int fd, const uint8_t *want, size_t len)
{
	uint8_t *got = malloc(len + 1);
	struct stat st;

	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, len);
	assert_int_equal(pread(fd, got, len + 1, 0), (ssize_t)len);
	assert_memory_equal(got, want, len);
	free(got);
}

/* A lone reader passes through; others join with its id; the last
 * release gives the id back, and the copy is kept for the next reader. */
static void test_readers_share_one_copy(void **state)
{
	struct tfx *t = *state;
	struct eng_open_info a, b, c;
	struct eng_file *fa, *fb, *fc;
	struct eng_stats st;
	struct statvfs sv;

	NEED_PASS(t);
	/* The copy made at seal holds 4 chunks; statfs counts only the
	 * file's as used, while the copy is kept and while it is open. */
	assert_int_equal(eng_statfs(t->fx.e, &sv), 0);
	assert_int_equal(sv.f_bfree, sv.f_blocks - 4);
	fa = open_as(t, O_RDONLY, &a);
	assert_true(a.pass_fd >= 0);
	assert_int_equal(a.pass_id, 0); /* the first: its caller registers */
	assert_int_equal(eng_statfs(t->fx.e, &sv), 0);
	assert_int_equal(sv.f_bfree, sv.f_blocks - 4);
	assert_int_equal(eng_pass_registered(t->fx.e, fa, 41), 41);
	assert_backing(a.pass_fd, t->data, FSIZE);

	fb = open_as(t, O_RDONLY, &b);
	assert_int_equal(b.pass_fd, a.pass_fd);
	assert_int_equal(b.pass_id, 41);
	stats(t, &st);
	assert_int_equal(st.pass_files, 1);
	assert_int_equal(st.pass_opens, 2);
	/* Its memory counts: a chunk per piece. */
	assert_int_equal(st.pass_held_bytes, 4 * MiB);

	assert_int_equal(eng_release(t->fx.e, fb), 0);
	assert_int_equal(eng_release(t->fx.e, fa), 41);

	/* Kept: the next lone reader registers it again, with no copy. */
	fc = open_as(t, O_RDONLY, &c);
	assert_true(c.pass_fd >= 0);
	assert_int_equal(c.pass_id, 0);
	assert_int_equal(eng_pass_registered(t->fx.e, fc, 42), 42);
	stats(t, &st);
	assert_int_equal(st.pass_files, 1);
	assert_int_equal(eng_release(t->fx.e, fc), 42);

	/* A writer's open drops the kept copy and goes direct (the copy's
	 * backing file stays, a spare for the next copy, pass_reused). */
	fc = open_as(t, O_RDWR, &c);
	assert_int_equal(c.pass_fd, -1);
	/* (Its close seals the file again, which is copied again.) */
	assert_int_equal(eng_release(t->fx.e, fc), 0);
}

/* A writer joins a reader; what it writes to the backing file is the
 * file's from its FLUSH on, and sealed at its release. */
static void test_writer_taken(void **state)
{
	struct tfx *t = *state;
	struct eng_open_info r, w, d;
	struct eng_file *fr, *fw, *fd;
	static const char more[] = "written through the backing file";
	size_t len = FSIZE + MiB + sizeof(more);
	uint8_t *want = calloc(1, len), *got = malloc(len + 1), *m;
	struct stat st;

	NEED_PASS(t);
	memcpy(want, t->data, FSIZE);
	memcpy(want + 100, "XYZ", 3);
	memcpy(want + FSIZE + MiB, more, sizeof(more));

	fr = open_as(t, O_RDONLY, &r);
	assert_int_equal(eng_pass_registered(t->fx.e, fr, 5), 5);
	fw = open_as(t, O_RDWR, &w);
	assert_int_equal(w.pass_fd, r.pass_fd);
	assert_int_equal(w.pass_id, 5);

	/* The kernel's part: the writer's bytes go to the backing file. */
	assert_int_equal(pwrite(w.pass_fd, "XYZ", 3, 100), 3);
	assert_int_equal(pwrite(w.pass_fd, more, sizeof(more), FSIZE + MiB),
			 (ssize_t)sizeof(more));
	/* While it writes, the backing file's size is the file's. */
	assert_int_equal(eng_getattr(t->fx.e, t->ino, &st), 0);
	assert_int_equal(st.st_size, len);

	/*
	 * A shared mapping written before the FLUSH and again after it: the
	 * second store faults nothing, so the backing file's size and times
	 * stay as the take saw them, and the release must take it anyway.
	 */
	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, w.pass_fd,
		 8192);
	assert_true(m != MAP_FAILED);
	memcpy(m, "before", 6);
	memcpy(want + 8192, "before", 6);
	assert_int_equal(eng_flush(t->fx.e, fw), 0);
	memcpy(m + 5, "mapped", 6);
	memcpy(want + 8192 + 5, "mapped", 6);
	munmap(m, 4096);
	assert_int_equal(eng_release(t->fx.e, fw), 0);
	assert_int_equal(eng_release(t->fx.e, fr), 5);

	/* A direct open reads the engine's own bytes. */
	fd = open_as(t, O_RDWR, &d);
	assert_int_equal(d.pass_fd, -1);
	assert_int_equal(fx_read(t->fx.e, fd, got, len + 1, 0), (ssize_t)len);
	assert_memory_equal(got, want, len);
	eng_release(t->fx.e, fd);
	free(want);
	free(got);
}

/* A file sealed by its last writer is copied in the background: its first
 * reader finds the copy made; a writer's open drops it again. */
static void test_copied_at_seal(void **state)
{
	struct tfx *t = *state;
	struct eng_open_info r;
	struct eng_file *fr;
	struct eng_stats st;

	NEED_PASS(t);
	wait_files(t, 1);
	stats(t, &st);
	assert_int_equal(st.pass_files, 1);
	assert_int_equal(st.pass_held_bytes, 4 * MiB);
	fr = open_as(t, O_RDONLY, &r);
	assert_true(r.pass_fd >= 0);
	assert_int_equal(r.pass_id, 0);
	assert_int_equal(eng_pass_registered(t->fx.e, fr, 3), 3);
	assert_backing(r.pass_fd, t->data, FSIZE);
	stats(t, &st);
	assert_int_equal(st.pass_files, 1); /* no copy at the open */
	assert_int_equal(eng_release(t->fx.e, fr), 3);

	/* Written again and sealed: copied again. */
	fx_put(t->fx.e, 1, "f", t->data + 1, FSIZE - 1);
	wait_files(t, 2);
	stats(t, &st);
	assert_int_equal(st.pass_files, 2);
	fr = open_as(t, O_RDONLY, &r);
	assert_int_equal(eng_pass_registered(t->fx.e, fr, 4), 4);
	assert_backing(r.pass_fd, t->data + 1, FSIZE - 1);
	assert_int_equal(eng_release(t->fx.e, fr), 4);
}

/*
 * A dropped copy's backing file is a spare: the next copy is made over its
 * pages, and what that copy does not write (holes, the rest of a piece)
 * reads as zeroes, not as the last file's bytes.  (The new file is long
 * enough for the spare to fit it: test_spare_kept_for_its_size.)
 */
static void test_spare_reused(void **state)
{
	struct tfx *t = *state;
	const uint64_t at = 2 * MiB + MiB / 2 + 10;
	struct eng_open_info r;
	struct eng_file *fr, *fw;
	struct eng_stats st;
	struct statvfs sv0, sv1;
	struct stat sb;
	uint8_t *want = calloc(1, at + 1);

	NEED_PASS(t);
	wait_files(t, 1);
	stats(t, &st);
	assert_int_equal(st.pass_files, 1);
	assert_int_equal(st.pass_reused, 0);

	/* O_TRUNC drops the copy (a spare now, its memory still held, but
	 * free to statfs, as the copy was: given up when wanted), then one
	 * byte past two pieces of nothing. */
	assert_int_equal(eng_statfs(t->fx.e, &sv0), 0);
	assert_int_equal(eng_create(t->fx.e, 1, "f", 0644, getuid(), getgid(),
				    O_CREAT | O_WRONLY | O_TRUNC, &sb, &fw,
				    NULL),
			 0);
	stats(t, &st);
	assert_int_equal(st.pass_held_bytes, 4 * MiB);
	assert_int_equal(eng_statfs(t->fx.e, &sv1), 0);
	assert_int_equal(sv1.f_bfree, sv0.f_bfree + 4); /* the file's */
	want[at] = 0x5a;
	assert_int_equal(eng_write(t->fx.e, fw, want + at, 1, at), 1);
	assert_int_equal(eng_release(t->fx.e, fw), 0);

	wait_files(t, 2);
	stats(t, &st);
	assert_int_equal(st.pass_files, 2);
	assert_int_equal(st.pass_reused, 1);
	/* One piece held now, the spare's other three given back. */
	assert_held_soon(t, MiB);
	fr = open_as(t, O_RDONLY, &r);
	assert_true(r.pass_fd >= 0);
	assert_int_equal(eng_pass_registered(t->fx.e, fr, 6), 6);
	assert_backing(r.pass_fd, want, at + 1);
	assert_int_equal(eng_release(t->fx.e, fr), 6);
	free(want);
}

/*
 * "f" cut and written again 1.5 MiB long, less than half its spare (3 MiB
 * and more).  With room in the arena the copy goes to fresh memory and
 * the spare stays for a file of its size, which "g" then is; without
 * room the spare is cut to the new file (its pages past 2 MiB freed).
 */
static void spare_kept_or_cut(struct tfx *t, bool room)
{
	const size_t len = MiB + MiB / 2;
	struct eng_open_info r;
	struct eng_file *fr, *fw;
	struct eng_stats st;
	struct stat sb;
	uint64_t g;

	NEED_PASS(t);
	wait_files(t, 1);
	assert_int_equal(eng_create(t->fx.e, 1, "f", 0644, getuid(), getgid(),
				    O_CREAT | O_WRONLY | O_TRUNC, &sb, &fw,
				    NULL),
			 0);
	assert_int_equal(eng_write(t->fx.e, fw, t->data, len, 0), len);
	assert_int_equal(eng_release(t->fx.e, fw), 0);
	wait_files(t, 2);
	stats(t, &st);
	assert_int_equal(st.pass_reused, room ? 0 : 1);
	/* The spare's 4 chunks and the new copy's 2, or the cut spare's 2. */
	assert_held_soon(t, room ? 6 * MiB : 2 * MiB);
	fr = open_as(t, O_RDONLY, &r);
	assert_true(r.pass_fd >= 0);
	assert_int_equal(eng_pass_registered(t->fx.e, fr, 7), 7);
	assert_backing(r.pass_fd, t->data, len);
	assert_int_equal(eng_release(t->fx.e, fr), 7);
	if (!room)
		return;

	/* A file of the spare's size: made over it. */
	g = fx_put(t->fx.e, 1, "g", t->data + 3, FSIZE - 3);
	assert_true(g != 0);
	wait_files(t, 3);
	stats(t, &st);
	assert_int_equal(st.pass_reused, 1);
	assert_held_soon(t, 6 * MiB);
	assert_int_equal(eng_open(t->fx.e, g, O_RDONLY, &fr, &r), 0);
	assert_true(r.pass_fd >= 0);
	assert_int_equal(eng_pass_registered(t->fx.e, fr, 8), 8);
	assert_backing(r.pass_fd, t->data + 3, FSIZE - 3);
	assert_int_equal(eng_release(t->fx.e, fr), 8);
}

static void test_spare_kept_for_its_size(void **state)
{
	spare_kept_or_cut(*state, true);
}

/*
 * 9 MiB: "f" and its copy take 8 chunks; cut, written 2 chunks long and
 * copied, 3 would be left free, under the high mark of eviction (a
 * quarter, 2 chunks) once the copy took 2 more: no room.
 */
static int setup_tight(void **state)
{
	return setup_copied(state, 9 * MiB);
}

static void test_spare_cut_without_room(void **state)
{
	spare_kept_or_cut(*state, false);
}

/*
 * A large copy over a spare goes through a mapping on two threads
 * (copy_over): every byte lands, and a hole of the new file (two pieces
 * never written) reads as zeroes where the spare had bytes.
 */
static void test_spare_mapped(void **state)
{
	struct tfx *t = *state;
	const size_t big = 70 * MiB + 123, hole = 10 * MiB, hole_end = 12 * MiB;
	uint8_t *a = malloc(big), *b = malloc(big);
	struct eng_open_info r;
	struct eng_file *fr, *fw;
	struct eng_stats st;
	struct stat sb;
	uint64_t ino;

	NEED_PASS(t);
	wait_files(t, 1);
	fx_fill(a, big, 11);
	fx_fill(b, big, 12);
	ino = fx_put(t->fx.e, 1, "big", a, big);
	assert_true(ino != 0);
	wait_files(t, 2);
	assert_int_equal(eng_create(t->fx.e, 1, "big", 0644, getuid(),
				    getgid(), O_CREAT | O_WRONLY | O_TRUNC,
				    &sb, &fw, NULL),
			 0);
	assert_int_equal(eng_write(t->fx.e, fw, b, hole, 0), (ssize_t)hole);
	assert_int_equal(eng_write(t->fx.e, fw, b + hole_end, big - hole_end,
				   hole_end),
			 (ssize_t)(big - hole_end));
	assert_int_equal(eng_release(t->fx.e, fw), 0);
	wait_files(t, 3);
	stats(t, &st);
	assert_int_equal(st.pass_reused, 1);

	memset(b + hole, 0, hole_end - hole);
	assert_int_equal(eng_open(t->fx.e, ino, O_RDONLY, &fr, &r), 0);
	assert_true(r.pass_fd >= 0);
	assert_int_equal(eng_pass_registered(t->fx.e, fr, 8), 8);
	assert_backing(r.pass_fd, b, big);
	assert_int_equal(eng_release(t->fx.e, fr), 8);
	free(a);
	free(b);
}

/* A truncate by path while a reader passes through reaches its copy. */
static void test_truncate_reaches_copy(void **state)
{
	struct tfx *t = *state;
	struct eng_setattr sa = { .valid = ENG_SET_SIZE, .size = 1000 };
	struct eng_open_info r;
	struct eng_file *fr;
	struct stat st;

	NEED_PASS(t);
	fr = open_as(t, O_RDONLY, &r);
	assert_int_equal(eng_pass_registered(t->fx.e, fr, 9), 9);
	assert_int_equal(eng_setattr(t->fx.e, t->ino, NULL, &sa, &st), 0);
	assert_int_equal(st.st_size, 1000);
	assert_backing(r.pass_fd, t->data, 1000);
	assert_int_equal(eng_release(t->fx.e, fr), 9);
}

/* A writer's take and a truncate by path, racing (test_take_vs_truncate). */
struct cut_race {
	struct tfx *t;
	struct eng_file *fw;
	uint64_t size;
	pthread_barrier_t *go;
};

static void *release_writer(void *arg)
{
	struct cut_race *c = arg;

	pthread_barrier_wait(c->go);
	assert_int_equal(eng_release(c->t->fx.e, c->fw), 0);
	return NULL;
}

static uint64_t rnd(uint64_t *r, uint64_t n);

/*
 * A writer passing through closes (its bytes are taken from the backing
 * file) while a truncate by path cuts or grows the file: whichever goes
 * first, the engine's bytes must end as the writer's, then truncated.  A
 * take that read the backing file before the truncate, and wrote the
 * engine after it, put the old size back (pass_fuzz, seed 615364887).
 * PASS_SEED=n replays the sizes (not the threads' timing).
 */
static void test_take_vs_truncate(void **state)
{
	struct tfx *t = *state;
	const char *env = getenv("PASS_SEED");
	uint64_t seed = env && *env ? strtoull(env, NULL, 0)
				    : (uint64_t)time(NULL);
	uint64_t r = seed | 1, len = FSIZE + MiB;
	uint8_t *model = malloc(len), *got = malloc(len + 1);

	NEED_PASS(t);
	print_message("test_take_vs_truncate: PASS_SEED=%" PRIu64 "\n", seed);
	for (int round = 0; round < 40; round++) {
		struct eng_setattr sa = { .valid = ENG_SET_SIZE };
		struct eng_open_info ri, wi, di;
		struct eng_file *fr, *fd;
		struct cut_race c = { .t = t };
		pthread_barrier_t go;
		uint64_t size;
		int id = 7;
		pthread_t th;
		struct stat st;

		/* Opened during the last round's copy at seal: direct. */
		for (int i = 0;; i++) {
			fr = open_as(t, O_RDONLY, &ri);
			if (ri.pass_fd >= 0)
				break;
			eng_release(t->fx.e, fr);
			assert_true(i < 1000);
			usleep(10 * 1000);
		}
		if (ri.pass_id)
			id = ri.pass_id;
		else
			assert_int_equal(eng_pass_registered(t->fx.e, fr, id),
					 id);
		c.fw = open_as(t, O_RDWR, &wi);
		assert_int_equal(wi.pass_fd, ri.pass_fd);
		/* The kernel's part: the writer writes the backing file. */
		size = FSIZE - rnd(&r, MiB);
		fx_fill(model, size, (int)(seed + (uint64_t)round));
		assert_int_equal(ftruncate(wi.pass_fd, 0), 0);
		assert_int_equal(pwrite(wi.pass_fd, model, size, 0),
				 (ssize_t)size);
		/* Cut or grown, while the writer's bytes are taken. */
		sa.size = rnd(&r, 2) ? MiB + 1 + rnd(&r, size - MiB)
				     : size + rnd(&r, MiB);
		if (sa.size > size)
			memset(model + size, 0, sa.size - size);
		pthread_barrier_init(&go, NULL, 2);
		c.go = &go;
		pthread_create(&th, NULL, release_writer, &c);
		pthread_barrier_wait(&go);
		assert_int_equal(eng_setattr(t->fx.e, t->ino, NULL, &sa, &st),
				 0);
		pthread_join(th, NULL);
		pthread_barrier_destroy(&go);
		assert_int_equal(eng_release(t->fx.e, fr), id);

		/* Direct: the engine's own bytes. */
		fd = open_as(t, O_RDWR, &di);
		assert_int_equal(di.pass_fd, -1);
		assert_int_equal(eng_getattr(t->fx.e, t->ino, &st), 0);
		if ((uint64_t)st.st_size != sa.size)
			fail_msg("round %d: size %jd after a truncate to %" PRIu64
				 " racing a take of %" PRIu64 " bytes",
				 round, (intmax_t)st.st_size, sa.size, size);
		assert_int_equal(fx_read(t->fx.e, fd, got, len + 1, 0),
				 (ssize_t)sa.size);
		assert_memory_equal(got, model, sa.size);
		eng_release(t->fx.e, fd);
	}
	free(model);
	free(got);
}

/* No room in the budget for the copy: the open goes direct. */
static void test_no_room_direct(void **state)
{
	struct tfx *t = *state;
	struct eng_open_info r;
	struct eng_file *fr;
	struct eng_stats st;
	uint8_t *got = malloc(FSIZE);

	NEED_PASS(t);
	fr = open_as(t, O_RDONLY, &r);
	assert_int_equal(r.pass_fd, -1);
	assert_int_equal(fx_read(t->fx.e, fr, got, FSIZE, 0), FSIZE);
	assert_memory_equal(got, t->data, FSIZE);
	eng_release(t->fx.e, fr);
	stats(t, &st);
	assert_int_equal(st.pass_files, 0);
	assert_held_soon(t, 0);
	free(got);
}

/* Opens racing: all that pass through share one id, whoever registers. */
#define RACERS 6
struct racer {
	struct tfx *t;
	int n;
	int id;	/* the id its open ended with, 0: direct */
	int closed; /* what its release returned */
	pthread_barrier_t *go, *opened;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	struct eng_open_info info;
	struct eng_file *fp;

	pthread_barrier_wait(r->go);
	if (eng_open(r->t->fx.e, r->t->ino, r->n == 0 ? O_RDWR : O_RDONLY,
		     &fp, &info) != 0)
		return NULL;
	if (info.pass_fd >= 0)
		r->id = info.pass_id ? info.pass_id
				     : eng_pass_registered(r->t->fx.e, fp,
							   100 + r->n);
	pthread_barrier_wait(r->opened);
	r->closed = eng_release(r->t->fx.e, fp);
	return NULL;
}

static void test_racing_opens(void **state)
{
	struct tfx *t = *state;

	NEED_PASS(t);
	for (int round = 0; round < 50; round++) {
		pthread_barrier_t go, opened;
		struct racer r[RACERS];
		pthread_t th[RACERS];
		int id = 0, passed = 0, direct = 0, closes = 0;

		pthread_barrier_init(&go, NULL, RACERS);
		pthread_barrier_init(&opened, NULL, RACERS);
		for (int i = 0; i < RACERS; i++) {
			/* Round by round a writer among them, or not. */
			r[i] = (struct racer){ t, (round & 1) ? i + 1 : i, 0, 0,
					       &go, &opened };
			pthread_create(&th[i], NULL, race, &r[i]);
		}
		for (int i = 0; i < RACERS; i++)
			pthread_join(th[i], NULL);
		pthread_barrier_destroy(&go);
		pthread_barrier_destroy(&opened);
		for (int i = 0; i < RACERS; i++) {
			if (r[i].id) {
				assert_true(!id || r[i].id == id);
				id = r[i].id;
				passed++;
			} else {
				direct++;
			}
			if (r[i].closed) {
				assert_int_equal(r[i].closed, id);
				closes++;
			}
		}
		/*
		 * All or none pass through (a direct open beside a
		 * passthrough one would fail in the kernel), and the id goes
		 * back once.
		 */
		assert_true(passed == 0 || direct == 0);
		assert_int_equal(closes, passed ? 1 : 0);
	}
}

/* At least @want bytes copied early so far. */
static void wait_early(struct tfx *t, uint64_t want)
{
	wait_count(t, offsetof(struct eng_stats, pass_early_bytes), want);
}

static struct eng_file *create_trunc(struct tfx *t)
{
	struct eng_file *fw;
	struct stat sb;

	assert_int_equal(eng_create(t->fx.e, 1, "f", 0644, getuid(), getgid(),
				    O_CREAT | O_WRONLY | O_TRUNC, &sb, &fw,
				    NULL),
			 0);
	return fw;
}

/* A reader of "f" passes through to a copy that holds @want, @len bytes. */
static void assert_reads(struct tfx *t, const uint8_t *want, size_t len,
			 int id)
{
	struct eng_open_info r;
	struct eng_file *fr = open_as(t, O_RDONLY, &r);

	assert_true(r.pass_fd >= 0);
	assert_int_equal(eng_pass_registered(t->fx.e, fr, id), id);
	assert_backing(r.pass_fd, want, len);
	assert_int_equal(eng_release(t->fx.e, fr), id);
}

/* Pieces [@from, @to) of "f" written whole from @want. */
static void write_pieces(struct tfx *t, struct eng_file *fw,
			 const uint8_t *want, int from, int to)
{
	for (int i = from; i < to; i++)
		assert_int_equal(eng_write(t->fx.e, fw, want + i * MiB, MiB,
					   i * MiB),
				 MiB);
}

/*
 * The rest of "f" (FSIZE) written, closed and copied at seal over the
 * spare its last copy left: @early bytes were copied while it was
 * written, @used of them kept by the copy at seal, and a reader sees
 * @want.
 */
static void seal_and_check(struct tfx *t, struct eng_file *fw,
			   const uint8_t *want, uint64_t early, uint64_t used)
{
	struct eng_stats st;

	assert_int_equal(eng_write(t->fx.e, fw, want + 3 * MiB, FSIZE - 3 * MiB,
				   3 * MiB),
			 FSIZE - 3 * MiB);
	assert_int_equal(eng_release(t->fx.e, fw), 0);
	wait_files(t, 2);
	stats(t, &st);
	assert_int_equal(st.pass_early_bytes, early);
	assert_int_equal(st.pass_early_used, used);
	assert_int_equal(st.pass_reused, 1);
	assert_reads(t, want, FSIZE, 5);
}

/*
 * "f" written again, the spare its last copy left waiting: its full
 * pieces are copied as they fill, once the file is long enough for the
 * spare to fit it.  The copy at seal copies only what is not there as it
 * is now: a piece written again after its early copy, and the last.
 */
static void test_early_copy(void **state)
{
	struct tfx *t = *state;
	struct eng_file *fw;
	uint8_t *want = malloc(FSIZE);

	NEED_PASS(t);
	fx_fill(want, FSIZE, 11);
	fw = create_trunc(t); /* the copy of "f" a spare of FSIZE now */
	write_pieces(t, fw, want, 0, 3);
	/* 3 MiB long: the spare fits, and pieces 0-2 are full. */
	wait_early(t, 3 * MiB);
	want[MiB + 5] ^= 0xff;
	assert_int_equal(eng_write(t->fx.e, fw, want + MiB + 5, 1, MiB + 5),
			 1);
	seal_and_check(t, fw, want, 3 * MiB, 2 * MiB); /* not piece 1 */
	free(want);
}

static int setup_no_early(void **state)
{
	setup_with(state, 64 * MiB, false, QUIET_MS);
	if (*state)
		wait_files(*state, 1);
	return 0;
}

/* Without early copies (reftfsd without --early-copy), the same writes:
 * nothing is copied while "f" is written, all of it at its seal. */
static void test_no_early_copy(void **state)
{
	struct tfx *t = *state;
	struct eng_file *fw;
	uint8_t *want = malloc(FSIZE);

	NEED_PASS(t);
	fx_fill(want, FSIZE, 12);
	fw = create_trunc(t);
	write_pieces(t, fw, want, 0, 3);
	/* As long as test_early_copy waits for its rounds (at most). */
	usleep(200 * 1000);
	seal_and_check(t, fw, want, 0, 0);
	free(want);
}

/* Copies at seal wait this long for the writes to stop, in the tests of
 * that wait: long enough that the test's own pauses never reach it. */
#define LONG_QUIET_MS 1500

static int setup_quiet(void **state)
{
	return setup_with(state, 64 * MiB, false, LONG_QUIET_MS);
}

static int setup_quiet_big(void **state)
{
	return setup_with(state, 256 * MiB, false, LONG_QUIET_MS);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/*
 * "f", sealed by setup, is not copied while another file is written (256
 * KiB every 20 ms for a second: a save's next file), but once those
 * writes have stopped for LONG_QUIET_MS, though a trickle (4 KiB every 20
 * ms: a log) goes on.  (Stopped: less than 1 MiB in that time, so the
 * copy may start up to 80 ms early here.)
 */
static void test_copy_waits_for_quiet(void **state)
{
	struct tfx *t = *state;
	struct eng_file *fw;
	struct eng_stats st;
	struct stat sb;
	double last, copied;
	int i;

	NEED_PASS(t);
	assert_int_equal(eng_create(t->fx.e, 1, "g", 0644, getuid(), getgid(),
				    O_CREAT | O_WRONLY, &sb, &fw, NULL),
			 0);
	/* Over and over at 0: "g" stays small, with no copy of its own. */
	for (i = 0; i < 50; i++) {
		assert_int_equal(eng_write(t->fx.e, fw, t->data, 256 * 1024,
					   0),
				 256 * 1024);
		usleep(20 * 1000);
	}
	last = now_ms();
	stats(t, &st);
	assert_int_equal(st.pass_files, 0);
	assert_int_equal(st.pass_waiting, 1); /* what status shows */
	for (i = 0; i < 500 && st.pass_files == 0; i++) {
		assert_int_equal(eng_write(t->fx.e, fw, t->data, 4096, 0), 4096);
		usleep(20 * 1000);
		stats(t, &st);
	}
	copied = now_ms();
	assert_int_equal(eng_release(t->fx.e, fw), 0);
	print_message("test_copy_waits_for_quiet: copied %.0f ms after the "
		      "last large write, %d small writes since\n",
		      copied - last, i);
	assert_int_equal(st.pass_files, 1);
	assert_int_equal(st.pass_waiting, 0);
	assert_true(copied - last >= LONG_QUIET_MS - 200);
	assert_reads(t, t->data, FSIZE, 3);
}

/*
 * A file unlinked while its copy at seal waits for the writes to stop: its
 * memory comes back at once, not when the copier gets to it (CI: statfs in
 * 010-basic-posix saw an earlier file's chunks freed 250 ms late).
 */
static void test_unlinked_while_waiting(void **state)
{
	struct tfx *t = *state;
	struct statvfs sv0, sv1;
	struct eng_stats st;
	uint64_t g;

	NEED_PASS(t);
	assert_int_equal(eng_statfs(t->fx.e, &sv0), 0);
	g = fx_put(t->fx.e, 1, "g", t->data, FSIZE);
	assert_true(g != 0);
	stats(t, &st);
	assert_int_equal(st.pass_waiting, 2); /* "f" (setup) and "g" */
	assert_int_equal(eng_unlink(t->fx.e, 1, "g"), 0);
	eng_forget(t->fx.e, g, 1); /* the kernel's last reference */
	assert_int_equal(eng_statfs(t->fx.e, &sv1), 0);
	assert_int_equal(sv1.f_bfree, sv0.f_bfree);
	stats(t, &st);
	assert_int_equal(st.pass_waiting, 1);
	assert_int_equal(st.pass_files, 0);
}

/*
 * A large file opened while its copy at seal waits for the writes to stop:
 * with no spare to make the copy over, the open goes direct (a copy into
 * fresh memory is slower than a direct read) and the copier makes it
 * later, for the next reader.  Written again, its copy's backing file is a
 * spare that fits: the next open right after makes the copy over it and
 * passes through.
 */
static void test_open_direct_until_copied(void **state)
{
	struct tfx *t = *state;
	const size_t big = 70 * MiB + 5;
	uint8_t *a = malloc(big), *got = malloc(big);
	struct eng_open_info r;
	struct eng_file *fr;
	struct eng_stats st;
	uint64_t ino;

	NEED_PASS(t);
	fx_fill(a, big, 21);
	ino = fx_put(t->fx.e, 1, "big", a, big);
	assert_true(ino != 0);
	assert_int_equal(eng_open(t->fx.e, ino, O_RDONLY, &fr, &r), 0);
	assert_int_equal(r.pass_fd, -1);
	assert_int_equal(fx_read(t->fx.e, fr, got, big, 0), (ssize_t)big);
	assert_memory_equal(got, a, big);
	assert_int_equal(eng_release(t->fx.e, fr), 0);
	/* Not copied at the open ("f" may be by now, on a slow machine:
	 * the quiet it waits for may have passed). */
	stats(t, &st);
	assert_true(st.pass_bytes < big);

	wait_files(t, 2); /* "f" and "big", in the background */
	assert_int_equal(eng_open(t->fx.e, ino, O_RDONLY, &fr, &r), 0);
	assert_true(r.pass_fd >= 0);
	assert_int_equal(eng_pass_registered(t->fx.e, fr, 12), 12);
	assert_backing(r.pass_fd, a, big);
	assert_int_equal(eng_release(t->fx.e, fr), 12);

	/* Written again (its copy a spare now), and read at once. */
	fx_fill(a, big, 22);
	assert_int_equal(fx_put(t->fx.e, 1, "big", a, big), ino);
	assert_int_equal(eng_open(t->fx.e, ino, O_RDONLY, &fr, &r), 0);
	assert_true(r.pass_fd >= 0);
	assert_int_equal(eng_pass_registered(t->fx.e, fr, 13), 13);
	assert_backing(r.pass_fd, a, big);
	assert_int_equal(eng_release(t->fx.e, fr), 13);
	stats(t, &st);
	assert_int_equal(st.pass_files, 3);
	assert_int_equal(st.pass_reused, 1);
	free(a);
	free(got);
}

static uint64_t rnd(uint64_t *r, uint64_t n)
{
	*r ^= *r << 13;
	*r ^= *r >> 7;
	*r ^= *r << 17;
	return n ? *r % n : 0;
}

/*
 * Early copies against a model: "f" written again and again, 6-8 MiB,
 * mostly appended to (the copier copies pieces as they fill) but also
 * written over, cut and punched, with pauses that let rounds run between.
 * Each time, once sealed and copied, a reader must see the model's bytes.
 * PASS_SEED=n replays the operations (not the copier's timing).
 */
static void test_early_fuzz(void **state)
{
	struct tfx *t = *state;
	const char *env = getenv("PASS_SEED");
	uint64_t seed = env && *env ? strtoull(env, NULL, 0)
				    : (uint64_t)time(NULL) | 1;
	uint64_t r = seed, files = 1;
	const size_t max = 10 * MiB; /* past the longest append */
	uint8_t *model = malloc(max), *buf = malloc(2 * MiB);
	struct eng_stats st;

	NEED_PASS(t);
	print_message("test_early_fuzz: PASS_SEED=%" PRIu64 "\n", seed);
	wait_files(t, 1);
	for (int round = 0; round < 12; round++) {
		struct eng_file *fw = create_trunc(t);
		uint64_t size = 0, target = 6 * MiB + rnd(&r, 2 * MiB);

		while (size < target) {
			uint64_t op = rnd(&r, 10), at, n;

			if (op < 6) { /* append */
				n = MiB / 2 + rnd(&r, MiB);
				fx_fill(buf, n, (unsigned)rnd(&r, 1000));
				assert_int_equal(eng_write(t->fx.e, fw, buf, n,
							   (off_t)size),
						 (ssize_t)n);
				memcpy(model + size, buf, n);
				size += n;
			} else if (op < 8 && size) { /* write over */
				at = rnd(&r, size);
				n = 1 + rnd(&r, 64 * 1024);
				if (at + n > max)
					n = max - at;
				fx_fill(buf, n, (unsigned)rnd(&r, 1000));
				assert_int_equal(eng_write(t->fx.e, fw, buf, n,
							   (off_t)at),
						 (ssize_t)n);
				memcpy(model + at, buf, n);
				if (at + n > size)
					size = at + n;
			} else if (op == 8) { /* cut */
				struct eng_setattr sa = { .valid = ENG_SET_SIZE,
							  .size = rnd(&r,
								      size + 1) };
				struct stat sb;

				assert_int_equal(eng_setattr(t->fx.e, t->ino, fw,
							     &sa, &sb),
						 0);
				size = sa.size;
			} else if (size) { /* punch */
				at = rnd(&r, size);
				n = 1 + rnd(&r, 2 * MiB);
				assert_int_equal(
					eng_fallocate(t->fx.e, fw,
						      ENG_FALLOC_PUNCH_HOLE |
							      ENG_FALLOC_KEEP_SIZE,
						      (off_t)at, (off_t)n),
					0);
				memset(model + at, 0,
				       at + n < size ? n : size - at);
			}
			/* Bytes past the size read as zeroes if it grows. */
			memset(model + size, 0, max - size);
			if (rnd(&r, 3) == 0)
				usleep((useconds_t)rnd(&r, 3000));
		}
		assert_int_equal(eng_release(t->fx.e, fw), 0);
		wait_files(t, ++files);
		assert_reads(t, model, size, 10 + round);
	}
	stats(t, &st);
	print_message("test_early_fuzz: %" PRIu64 " bytes copied early, %" PRIu64
		      " of them used at seal\n",
		      st.pass_early_bytes, st.pass_early_used);
	assert_true(st.pass_early_bytes > 0);
	assert_true(st.pass_early_used > 0);
	free(model);
	free(buf);
}

/* --- in place (eng_pass_in_place) ---------------------------------------- */

/* "f" as setup_mem left it, copied at seal, with in place on from now. */
static int setup_in_place_mem(void **state, uint64_t mem)
{
	setup_with(state, mem, false, QUIET_MS);
	if (*state) {
		struct tfx *t = *state;

		eng_pass_in_place(t->fx.e, true);
		wait_files(t, 1);
	}
	return 0;
}

static int setup_in_place(void **state)
{
	return setup_in_place_mem(state, 64 * MiB);
}

static int setup_in_place_big(void **state)
{
	return setup_in_place_mem(state, 256 * MiB);
}

/* The engine's own bytes of "f" (read from the engine even by an open
 * that passes through: the kernel would not ask). */
static void assert_engine(struct tfx *t, const uint8_t *want, size_t len)
{
	struct eng_open_info d;
	struct eng_file *fd = open_as(t, O_RDONLY, &d);
	uint8_t *got = malloc(len + 1);

	if (d.pass_fd >= 0 && d.pass_id == 0)
		eng_pass_registered(t->fx.e, fd, 99);
	assert_int_equal(fx_read(t->fx.e, fd, got, len + 1, 0), (ssize_t)len);
	assert_memory_equal(got, want, len);
	eng_release(t->fx.e, fd);
	free(got);
}

/* Chunks of "f" lent to a backing file's pages now. */
static uint32_t lent_pieces(struct tfx *t)
{
	struct inode *in;
	struct file *f;
	uint32_t n = 0;

	pthread_rwlock_rdlock(&t->fx.e->ns.lock);
	in = ns_find(&t->fx.e->ns, t->ino);
	assert_non_null(in);
	f = &in->file;
	pthread_rwlock_rdlock(&f->lock);
	for (uint32_t i = 0; i < f->nslots; i++)
		n += slot_in_ram(&f->slots[i]) &&
		     store_lent_home(&t->fx.e->store, f->slots[i].chunk);
	pthread_rwlock_unlock(&f->lock);
	pthread_rwlock_unlock(&t->fx.e->ns.lock);
	return n;
}

/* Piece @idx of "f"'s chunk, pinned (a write-back's reference). */
static uint32_t pin_piece(struct tfx *t, uint32_t idx)
{
	struct inode *in;
	struct file *f;
	uint32_t id;

	pthread_rwlock_rdlock(&t->fx.e->ns.lock);
	in = ns_find(&t->fx.e->ns, t->ino);
	f = &in->file;
	pthread_rwlock_rdlock(&f->lock);
	assert_true(idx < f->nslots && slot_in_ram(&f->slots[idx]));
	id = f->slots[idx].chunk;
	store_get(&t->fx.e->store, id);
	pthread_rwlock_unlock(&f->lock);
	pthread_rwlock_unlock(&t->fx.e->ns.lock);
	return id;
}

/*
 * "f" written again in place: the spare its last copy left is its home,
 * and its pieces past min_size are written into their pages (not piece 0,
 * written before the file passed min_size, nor the last, past the spare's
 * whole pages).  The copy at seal copies only those two, and a placed page
 * counts once in the budget: as the file's chunk, not also the copy's.
 */
static void test_written_in_place(void **state)
{
	struct tfx *t = *state;
	uint8_t *want = malloc(FSIZE);
	struct eng_file *fw;
	struct eng_stats st;
	struct statvfs sv;

	NEED_PASS(t);
	fx_fill(want, FSIZE, 21);
	fw = create_trunc(t); /* the copy of "f" a spare of FSIZE now */
	write_pieces(t, fw, want, 0, 3);
	stats(t, &st);
	assert_int_equal(st.pass_placed_bytes, 2 * MiB);
	assert_int_equal(lent_pieces(t), 2);
	assert_engine(t, want, 3 * MiB);
	seal_and_check(t, fw, want, 0, 0);
	stats(t, &st);
	assert_int_equal(st.pass_placed_used, 2 * MiB);
	/* The file's 4 chunks used (2 of them pages of the copy), and the
	 * copy holds 2 more for the pages it copied, counted free. */
	assert_int_equal(st.pass_held_bytes, 2 * MiB);
	assert_int_equal(eng_statfs(t->fx.e, &sv), 0);
	assert_int_equal(sv.f_bfree, sv.f_blocks - 4);
	assert_int_equal(store_free_count(&t->fx.e->store),
			 t->fx.e->store.nchunks - 4 - 2);

	/* Written again in place after the seal: the piece is copied first,
	 * so the copy (now a spare's pages) never changes under a reader. */
	fw = open_as(t, O_RDWR, NULL);
	want[MiB + 5] ^= 0xff;
	assert_int_equal(eng_write(t->fx.e, fw, want + MiB + 5, 1, MiB + 5),
			 1);
	assert_int_equal(lent_pieces(t), 1);
	assert_engine(t, want, FSIZE);
	assert_int_equal(eng_release(t->fx.e, fw), 0);
	wait_files(t, 3);
	assert_reads(t, want, FSIZE, 6);
	free(want);
}

/*
 * A writer that joins readers passing through writes the backing file
 * itself (the kernel's part, played here): the engine's pieces in its
 * pages move out first, so the engine keeps its own bytes until the take.
 */
static void test_writer_detaches(void **state)
{
	struct tfx *t = *state;
	uint8_t *want = malloc(FSIZE);
	struct eng_open_info r, w;
	struct eng_file *fr, *fw;

	NEED_PASS(t);
	fx_fill(want, FSIZE, 22);
	fw = create_trunc(t);
	write_pieces(t, fw, want, 0, 3);
	seal_and_check(t, fw, want, 0, 0);
	assert_int_equal(lent_pieces(t), 2);

	fr = open_as(t, O_RDONLY, &r);
	assert_int_equal(eng_pass_registered(t->fx.e, fr, 7), 7);
	fw = open_as(t, O_RDWR, &w);
	assert_int_equal(w.pass_fd, r.pass_fd); /* joined */
	assert_int_equal(lent_pieces(t), 0);	/* after moving out */
	assert_int_equal(pwrite(w.pass_fd, "new", 3, 2 * MiB), 3);
	/* Not taken yet: the engine's bytes are the old ones. */
	{
		uint8_t got[3];

		assert_int_equal(fx_read(t->fx.e, fr, got, 3, 2 * MiB), 3);
		assert_memory_equal(got, want + 2 * MiB, 3);
	}
	memcpy(want + 2 * MiB, "new", 3);
	assert_int_equal(eng_release(t->fx.e, fw), 0);
	assert_int_equal(eng_release(t->fx.e, fr), 7);
	assert_engine(t, want, FSIZE);
	free(want);
}

/* A truncate by path of a file written in place, a reader passing
 * through: the pieces move out before its backing file is cut. */
static void test_cut_detaches(void **state)
{
	struct tfx *t = *state;
	struct eng_setattr sa = { .valid = ENG_SET_SIZE, .size = MiB + 10 };
	uint8_t *want = malloc(FSIZE);
	struct eng_open_info r;
	struct eng_file *fr, *fw;
	struct stat st;

	NEED_PASS(t);
	fx_fill(want, FSIZE, 23);
	fw = create_trunc(t);
	write_pieces(t, fw, want, 0, 3);
	seal_and_check(t, fw, want, 0, 0);
	fr = open_as(t, O_RDONLY, &r);
	assert_int_equal(eng_pass_registered(t->fx.e, fr, 8), 8);
	assert_int_equal(eng_setattr(t->fx.e, t->ino, NULL, &sa, &st), 0);
	assert_int_equal(lent_pieces(t), 0);
	assert_backing(r.pass_fd, want, MiB + 10);
	assert_int_equal(eng_release(t->fx.e, fr), 8);
	assert_engine(t, want, MiB + 10);
	free(want);
}

/*
 * A piece written in place and pinned (the write-back reads it), then
 * written again before the seal: the write goes to a new chunk, and the
 * seal must not copy it into the page the pinned one still is (-EBUSY:
 * no pass; opens go direct).  The pinned bytes never change.
 */
static void test_pinned_piece_kept(void **state)
{
	struct tfx *t = *state;
	uint8_t *want = malloc(FSIZE), *old = malloc(MiB);
	struct eng_open_info r;
	struct eng_file *fw, *fr;
	struct eng_stats st;
	uint32_t pinned;

	NEED_PASS(t);
	fx_fill(want, FSIZE, 24);
	fw = create_trunc(t);
	write_pieces(t, fw, want, 0, 3);
	memcpy(old, want + MiB, MiB);
	pinned = pin_piece(t, 1);
	assert_ptr_not_equal(store_lent_home(&t->fx.e->store, pinned), NULL);
	fx_fill(want + MiB, MiB, 25);
	write_pieces(t, fw, want, 1, 2);
	assert_int_equal(eng_write(t->fx.e, fw, want + 3 * MiB,
				   FSIZE - 3 * MiB, 3 * MiB),
			 FSIZE - 3 * MiB);
	assert_int_equal(eng_release(t->fx.e, fw), 0);
	/* The copy at seal gives up: wait for it to have run. */
	for (int i = 0; i < 1000 && pass_waiting(t->fx.e); i++)
		usleep(10 * 1000);
	usleep(100 * 1000);
	stats(t, &st);
	assert_int_equal(st.pass_files, 1);
	assert_memory_equal(store_ptr(&t->fx.e->store, pinned), old, MiB);
	/* The first reader makes a copy of its own, in fresh memory. */
	fr = open_as(t, O_RDONLY, &r);
	assert_true(r.pass_fd >= 0);
	assert_int_equal(eng_pass_registered(t->fx.e, fr, 9), 9);
	assert_backing(r.pass_fd, want, FSIZE);
	eng_release(t->fx.e, fr);
	stats(t, &st);
	assert_int_equal(st.pass_files, 2);
	assert_int_equal(st.pass_reused, 0);
	assert_memory_equal(store_ptr(&t->fx.e->store, pinned), old, MiB);
	assert_engine(t, want, FSIZE);
	store_put(&t->fx.e->store, pinned);
	free(want);
	free(old);
}

/*
 * In place against a model: "f" written again and again, 4-8 MiB, appended
 * to, written over, cut and punched, with pins that a write-back would hold
 * taken and let go between (a pinned chunk's bytes must never change), the
 * engine's bytes checked after every operation and, once sealed and copied,
 * what a reader passing through sees.  PASS_SEED=n replays the operations.
 */
static void test_in_place_fuzz(void **state)
{
	struct tfx *t = *state;
	const char *env = getenv("PASS_SEED");
	uint64_t seed = env && *env ? strtoull(env, NULL, 0)
				    : (uint64_t)time(NULL) | 1;
	uint64_t r = seed, files = 1;
	const size_t max = 10 * MiB;
	uint8_t *model = malloc(max), *buf = malloc(2 * MiB);
	struct pin {
		uint32_t id, fill, crc;
	} pins[8];
	unsigned npins = 0;
	struct eng_stats st;

	NEED_PASS(t);
	print_message("test_in_place_fuzz: PASS_SEED=%" PRIu64 "\n", seed);
	for (int round = 0; round < 10; round++) {
		struct eng_file *fw = create_trunc(t);
		uint64_t size = 0, target = 4 * MiB + rnd(&r, 4 * MiB);

		memset(model, 0, max);
		while (size < target) {
			uint64_t op = rnd(&r, 12), at, n;

			if (op < 5) { /* append */
				n = MiB / 2 + rnd(&r, MiB);
				fx_fill(buf, n, (unsigned)rnd(&r, 1000));
				assert_int_equal(eng_write(t->fx.e, fw, buf, n,
							   (off_t)size),
						 (ssize_t)n);
				memcpy(model + size, buf, n);
				size += n;
			} else if (op < 7 && size) { /* write over */
				at = rnd(&r, size);
				n = 1 + rnd(&r, 64 * 1024);
				fx_fill(buf, n, (unsigned)rnd(&r, 1000));
				assert_int_equal(eng_write(t->fx.e, fw, buf, n,
							   (off_t)at),
						 (ssize_t)n);
				memcpy(model + at, buf, n);
				if (at + n > size)
					size = at + n;
			} else if (op == 7) { /* cut */
				struct eng_setattr sa = { .valid = ENG_SET_SIZE,
							  .size = rnd(&r,
								      size + 1) };
				struct stat sb;

				assert_int_equal(eng_setattr(t->fx.e, t->ino, fw,
							     &sa, &sb),
						 0);
				size = sa.size;
			} else if (op == 8 && size) { /* punch */
				at = rnd(&r, size);
				n = 1 + rnd(&r, 2 * MiB);
				assert_int_equal(
					eng_fallocate(t->fx.e, fw,
						      ENG_FALLOC_PUNCH_HOLE |
							      ENG_FALLOC_KEEP_SIZE,
						      (off_t)at, (off_t)n),
					0);
				memset(model + at, 0,
				       at + n < size ? n : size - at);
			} else if (op == 9 && npins < 8 && size > MiB) {
				/* A write-back pins a piece. */
				struct inode *in;
				struct file *f;
				uint32_t i = (uint32_t)rnd(&r, size / MiB);

				pthread_rwlock_rdlock(&t->fx.e->ns.lock);
				in = ns_find(&t->fx.e->ns, t->ino);
				f = &in->file;
				pthread_rwlock_rdlock(&f->lock);
				if (i < f->nslots && slot_in_ram(&f->slots[i])) {
					struct pin *p = &pins[npins++];

					p->id = f->slots[i].chunk;
					p->fill = f->slots[i].fill;
					store_get(&t->fx.e->store, p->id);
					p->crc = ers_crc32c(
						0,
						store_ptr(&t->fx.e->store,
							  p->id),
						p->fill);
				}
				pthread_rwlock_unlock(&f->lock);
				pthread_rwlock_unlock(&t->fx.e->ns.lock);
			} else if (op >= 10 && npins) { /* and lets it go */
				struct pin *p = &pins[rnd(&r, npins)];

				assert_int_equal(
					ers_crc32c(0,
						   store_ptr(&t->fx.e->store,
							     p->id),
						   p->fill),
					p->crc);
				store_put(&t->fx.e->store, p->id);
				*p = pins[--npins];
			}
			if (rnd(&r, 4) == 0)
				assert_engine(t, model, size);
		}
		assert_engine(t, model, size);
		/* Pins gone before the seal: else it makes no pass
		 * (test_pinned_piece_kept). */
		while (npins) {
			struct pin *p = &pins[--npins];

			assert_int_equal(ers_crc32c(0,
						    store_ptr(&t->fx.e->store,
							      p->id),
						    p->fill),
					 p->crc);
			store_put(&t->fx.e->store, p->id);
		}
		assert_int_equal(eng_release(t->fx.e, fw), 0);
		wait_files(t, ++files);
		assert_reads(t, model, size, 10 + round);
	}
	stats(t, &st);
	print_message("test_in_place_fuzz: %" PRIu64 " bytes written in place, "
		      "%" PRIu64 " of them used at seal\n",
		      st.pass_placed_bytes, st.pass_placed_used);
	assert_true(st.pass_placed_bytes > 0);
	assert_true(st.pass_placed_used > 0);
	free(model);
	free(buf);
}

/* A persist dir and 32 MiB, in place, no "f". */
static int setup_in_place_persist(void **state)
{
	struct tfx *t = calloc(1, sizeof(*t));

	fx_dirs(&t->fx);
	assert_int_equal(fx_start(&t->fx, 32 * MiB, true, 1), 0);
	*state = t;
	if (eng_pass_enable(t->fx.e, MiB, false, QUIET_MS) < 0) {
		fx_cleanup(&t->fx);
		free(t);
		*state = NULL;
		return 0;
	}
	eng_pass_in_place(t->fx.e, true);
	t->data = malloc(28 * MiB);
	fx_fill(t->data, 28 * MiB, 31);
	return 0;
}

static void flush_all(struct eng *e)
{
	struct eng_flush_progress p;
	uint64_t ticket;

	assert_int_equal(eng_flush_request(e, &ticket), 0);
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(eng_flush_progress(e, ticket, &p), 0);
		if (p.finished) {
			assert_int_equal(p.error, 0);
			return;
		}
		usleep(10 * 1000);
	}
	fail_msg("flush did not finish in 10 s");
}

/*
 * An older checkpoint written in place, persisted, and a new one that needs
 * its memory: evicting a piece in place frees no chunk (its memory is the
 * page its copy keeps for readers), so the copy kept for the old file goes
 * with it once its pieces are evicted, and the new write gets all of its
 * memory.
 */
static void test_pressure_sheds_placed_copy(void **state)
{
	struct tfx *t = *state;
	uint64_t c1, c2, c3, m1;
	struct eng_stats st;
	struct stat sb;

	NEED_PASS(t);
	assert_int_equal(eng_mkdir(t->fx.e, 1, "c1", 0755, 0, 0, &sb), 0);
	c1 = sb.st_ino;
	assert_int_equal(eng_mkdir(t->fx.e, 1, "c2", 0755, 0, 0, &sb), 0);
	c2 = sb.st_ino;
	/* c1/m's copy, once m is gone, is the spare m's next file takes. */
	m1 = fx_put(t->fx.e, c1, "m", t->data, 6 * MiB);
	assert_true(m1 != 0);
	wait_files(t, 1);
	flush_all(t->fx.e); /* no write-back pins m's chunks any more */
	assert_int_equal(eng_unlink(t->fx.e, c1, "m"), 0);
	eng_forget(t->fx.e, m1, 1); /* the kernel's lookup */
	assert_true(fx_put(t->fx.e, c2, "m", t->data, 6 * MiB) != 0);
	wait_files(t, 2);
	flush_all(t->fx.e);
	stats(t, &st);
	/* One write took it past min_size: all of it in place (6 chunks,
	 * its copy's pages; the copy holds none more), 26 free.  c3 puts
	 * c2 out of the keep window, and its 28 MiB need c2/m's 6, which
	 * evicting it does not free: its copy must go too. */
	assert_int_equal(st.pass_placed_used, 6 * MiB);
	assert_int_equal(store_free_count(&t->fx.e->store), 26);
	assert_int_equal(eng_mkdir(t->fx.e, 1, "c3", 0755, 0, 0, &sb), 0);
	c3 = sb.st_ino;
	assert_int_equal(fx_put(t->fx.e, c3, "big", t->data, 28 * MiB) != 0,
			 true);
	stats(t, &st);
	(void)c2;
	assert_int_equal(st.enospc, 0);
}

/*
 * "f" written again from @want, the @files'th file copied: over its name's
 * spare, and in one write, past min_size at once, so every whole page in
 * place; a reader then passes through with id @id.
 */
static void put_f_in_place(struct tfx *t, const uint8_t *want,
			   uint64_t files, int id)
{
	struct eng_stats st;

	t->ino = fx_put(t->fx.e, 1, "f", want, FSIZE);
	assert_true(t->ino != 0);
	wait_files(t, files);
	stats(t, &st);
	assert_int_equal(st.pass_reused, 1);
	assert_int_equal(st.pass_placed_used, 3 * MiB);
	assert_reads(t, want, FSIZE, id);
}

/*
 * In place, a name's spare waits for that name: a file of another name
 * with no spare of its own is copied into fresh memory while the budget
 * has it, not over it (two files that took each other's spares at every
 * save were never written in place).  And a kept copy becomes a spare
 * when its file's last name goes, not once the kernel forgets the inode
 * (this fixture never does): the next file of the name, written at once,
 * finds it.
 */
static void test_spare_kept_for_its_name(void **state)
{
	struct tfx *t = *state;
	uint8_t *want = malloc(FSIZE);
	struct eng_stats st;
	uint64_t c;

	NEED_PASS(t);
	fx_fill(want, FSIZE, 26);
	/* "f"'s copy (setup) a spare once "f" is gone. */
	assert_int_equal(eng_unlink(t->fx.e, 1, "f"), 0);
	c = fx_put(t->fx.e, 1, "c", want, FSIZE);
	assert_true(c != 0);
	wait_files(t, 2);
	stats(t, &st);
	assert_int_equal(st.pass_reused, 0); /* not over "f"'s */
	put_f_in_place(t, want, 3, 11);
	free(want);
}

/*
 * The engine ends while a file is written in place, its writer open: the
 * backing file its pieces were written into goes with it (LeakSanitizer
 * finds the pass, its home and its held chunks otherwise: ns_fini freed
 * the file and forgot its home).
 */
static void test_home_at_the_end(void **state)
{
	struct tfx *t = *state;
	uint8_t *want = malloc(FSIZE);
	struct eng_file *fw;

	NEED_PASS(t);
	fx_fill(want, FSIZE, 28);
	fw = create_trunc(t);
	write_pieces(t, fw, want, 0, 3);
	assert_int_equal(lent_pieces(t), 2);
	assert_engine(t, want, 3 * MiB);
	(void)fw; /* still open: the teardown frees the engine with it */
	free(want);
}

static int setup_in_place_tight(void **state)
{
	return setup_in_place_mem(state, 11 * MiB);
}

/*
 * A budget too small for every name's spare: the copy at seal of a file
 * whose name has none, with no room for a fresh one, is not made, rather
 * than made over another name's spare (which would leave that name's next
 * file no home, and so on at every save: none ever in place).  "f"'s
 * spare stays "f"'s, and "f" written again goes in place; "c" reads
 * direct.
 */
static void test_no_room_no_copy(void **state)
{
	struct tfx *t = *state;
	uint8_t *want = malloc(FSIZE), *got = malloc(FSIZE);
	struct eng_open_info r;
	struct eng_file *fr;
	struct eng_stats st;
	uint64_t c;

	NEED_PASS(t);
	fx_fill(want, FSIZE, 27);
	/* "f"'s copy a spare (4 chunks); "c" 4 more, and 3 left free. */
	assert_int_equal(eng_unlink(t->fx.e, 1, "f"), 0);
	eng_forget(t->fx.e, t->ino, 1);
	c = fx_put(t->fx.e, 1, "c", want, FSIZE);
	assert_true(c != 0);
	wait_count(t, offsetof(struct eng_stats, pass_no_spare), 1);
	stats(t, &st);
	assert_int_equal(st.pass_files, 1);
	assert_int_equal(st.pass_reused, 0);
	assert_int_equal(st.pass_held_bytes, 4 * MiB); /* "f"'s spare */

	/* "c" opened to read: no copy either, and its bytes direct. */
	assert_int_equal(eng_open(t->fx.e, c, O_RDONLY, &fr, &r), 0);
	assert_int_equal(r.pass_fd, -1);
	assert_int_equal(fx_read(t->fx.e, fr, got, FSIZE, 0), FSIZE);
	assert_memory_equal(got, want, FSIZE);
	eng_release(t->fx.e, fr);

	put_f_in_place(t, want, 2, 12);
	free(got);
	free(want);
}

/*
 * A piece in place cut and punched down to no byte (fill 0) is still the
 * file's chunk in its page: the copy at seal must count it as such, not
 * as an old chunk someone pins (-EBUSY, no pass).  Found by
 * test_in_place_fuzz, PASS_SEED=1795812753.
 */
static void test_emptied_piece_in_place(void **state)
{
	struct tfx *t = *state;
	struct eng_setattr sa = { .valid = ENG_SET_SIZE, .size = MiB + 1 };
	uint8_t *want = calloc(1, FSIZE);
	struct eng_file *fw;
	struct stat sb;

	NEED_PASS(t);
	fx_fill(want, FSIZE, 27);
	fw = create_trunc(t);
	write_pieces(t, fw, want, 0, 3);
	assert_int_equal(eng_setattr(t->fx.e, t->ino, fw, &sa, &sb), 0);
	assert_int_equal(eng_fallocate(t->fx.e, fw,
				       ENG_FALLOC_PUNCH_HOLE |
					       ENG_FALLOC_KEEP_SIZE,
				       MiB, 1),
			 0);
	memset(want + MiB, 0, FSIZE - MiB);
	assert_int_equal(lent_pieces(t), 1); /* piece 1, holding nothing */
	fx_fill(want + 2 * MiB, FSIZE - 2 * MiB, 28);
	assert_int_equal(eng_write(t->fx.e, fw, want + 2 * MiB,
				   FSIZE - 2 * MiB, 2 * MiB),
			 FSIZE - 2 * MiB);
	assert_int_equal(eng_release(t->fx.e, fw), 0);
	wait_files(t, 2);
	assert_reads(t, want, FSIZE, 12);
	free(want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_readers_share_one_copy,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_writer_taken, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_copied_at_seal, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_spare_reused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_spare_kept_for_its_size,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_spare_cut_without_room,
						setup_tight, teardown),
		cmocka_unit_test_setup_teardown(test_spare_mapped, setup_big,
						teardown),
		cmocka_unit_test_setup_teardown(test_truncate_reaches_copy,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_take_vs_truncate, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_no_room_direct,
						setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_racing_opens, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_early_copy, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_no_early_copy,
						setup_no_early, teardown),
		cmocka_unit_test_setup_teardown(test_early_fuzz, setup_big,
						teardown),
		cmocka_unit_test_setup_teardown(test_copy_waits_for_quiet,
						setup_quiet, teardown),
		cmocka_unit_test_setup_teardown(test_open_direct_until_copied,
						setup_quiet_big, teardown),
		cmocka_unit_test_setup_teardown(test_unlinked_while_waiting,
						setup_quiet, teardown),
		cmocka_unit_test_setup_teardown(test_written_in_place,
						setup_in_place, teardown),
		cmocka_unit_test_setup_teardown(test_writer_detaches,
						setup_in_place, teardown),
		cmocka_unit_test_setup_teardown(test_cut_detaches,
						setup_in_place, teardown),
		cmocka_unit_test_setup_teardown(test_pinned_piece_kept,
						setup_in_place, teardown),
		cmocka_unit_test_setup_teardown(test_spare_kept_for_its_name,
						setup_in_place, teardown),
		cmocka_unit_test_setup_teardown(test_no_room_no_copy,
						setup_in_place_tight, teardown),
		cmocka_unit_test_setup_teardown(test_home_at_the_end,
						setup_in_place, teardown),
		cmocka_unit_test_setup_teardown(test_emptied_piece_in_place,
						setup_in_place, teardown),
		cmocka_unit_test_setup_teardown(test_in_place_fuzz,
						setup_in_place_big, teardown),
		cmocka_unit_test_setup_teardown(test_pressure_sheds_placed_copy,
						setup_in_place_persist,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
