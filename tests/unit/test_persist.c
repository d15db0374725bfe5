/*
 * test_persist.c - write-back, re-mount over a persist dir, read-through
 * with checksums, name mirroring, errors and retry, eviction.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#include "eng_fixture.h"

#define FILE_SIZE (3 * MiB + 17)
/* persist.c's CHECK_DELAY_MS: a rename's mirror is looked for after it. */
#define CHECK_DELAY_TEST_MS 2000

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	fx_dirs(fx);
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

/* Flush and wait; returns the flush's error. */
static int flush_wait(struct eng *e)
{
	struct eng_flush_progress p;
	uint64_t ticket;

	assert_int_equal(eng_flush_request(e, &ticket), 0);
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(eng_flush_progress(e, ticket, &p), 0);
		if (p.finished)
			return p.error;
		usleep(10 * 1000);
	}
	fail_msg("flush did not finish in 10 s");
	return -ETIMEDOUT;
}

static uint8_t *read_host_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	*len = fread(buf, 1, (size_t)n, f);
	fclose(f);
	return buf;
}

static uint64_t lookup(struct eng *e, uint64_t parent, const char *name)
{
	struct stat st;

	assert_int_equal(eng_lookup(e, parent, name, &st), 0);
	return st.st_ino;
}

struct one_entry {
	char tier[16];
	char crc[16];
	enum eng_state state;
	uint32_t resident;
};

static int entry_cb(void *ctx, const struct eng_entry_info *ei)
{
	struct one_entry *o = ctx;

	snprintf(o->tier, sizeof(o->tier), "%s", ei->tier);
	snprintf(o->crc, sizeof(o->crc), "%s", eng_crc_state_name(ei->crc));
	o->state = ei->state;
	o->resident = ei->chunks_resident;
	return 0;
}

static struct one_entry entry(struct eng *e, const char *path)
{
	struct one_entry o;

	memset(&o, 0, sizeof(o));
	assert_int_equal(eng_list_path(e, path, entry_cb, &o), 0);
	return o;
}

/* Write step_1/model.pt and a "latest" symlink, flush, stop. */
static uint8_t *write_checkpoint(struct fixture *fx)
{
	uint8_t *data = malloc(FILE_SIZE);
	struct stat st;
	uint64_t d;

	fx_fill(data, FILE_SIZE, 42);
	assert_int_equal(fx_start(fx, 16 * MiB, true, 2), 0);
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "step_1", 0755, 0, 0,
				   &st), 0);
	d = st.st_ino;
	assert_int_not_equal(fx_put(fx->e, d, "model.pt", data, FILE_SIZE), 0);
	assert_int_equal(eng_symlink(fx->e, RFT_ROOT_INO, "latest", "step_1",
				     0, 0, &st), 0);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_int_equal(entry(fx->e, "step_1/model.pt").state,
			 ENG_STATE_PERSISTED);
	fx_stop(fx);
	return data;
}

static void test_writeback_and_remount(void **state)
{
	struct fixture *fx = *state;
	uint8_t *data = write_checkpoint(fx), *host, *got = malloc(FILE_SIZE);
	char path[PATH_MAX + 64], link[64];
	struct eng_file *fp;
	struct eng_stats s;
	struct one_entry o;
	size_t len;
	ssize_t n;

	/* The persist dir holds a plain copy, its sums, no temporaries. */
	snprintf(path, sizeof(path), "%s/step_1/model.pt", fx->persist);
	host = read_host_file(path, &len);
	assert_non_null(host);
	assert_int_equal(len, FILE_SIZE);
	assert_memory_equal(host, data, FILE_SIZE);
	free(host);
	snprintf(path, sizeof(path), "%s/step_1/.model.pt.rftsum",
		 fx->persist);
	assert_int_equal(access(path, R_OK), 0);
	snprintf(path, sizeof(path), "%s/latest", fx->persist);
	n = readlink(path, link, sizeof(link));
	assert_int_equal(n, 6);
	snprintf(path, sizeof(path), "rmdir '%s/.reftfs-tmp' 2>/dev/null",
		 fx->persist);
	assert_int_equal(system(path), 0); /* empty */

	/* Mount again: it is there, not resident, read through on demand. */
	assert_int_equal(fx_start(fx, 16 * MiB, true, 2), 0);
	o = entry(fx->e, "step_1/model.pt");
	assert_string_equal(o.tier, "persist");
	assert_string_equal(o.crc, "ok");
	assert_int_equal(o.resident, 0);
	assert_int_equal(eng_open(fx->e,
				  lookup(fx->e, lookup(fx->e, RFT_ROOT_INO,
						       "step_1"),
					 "model.pt"),
				  O_RDONLY, &fp, NULL), 0);
	assert_int_equal(fx_read(fx->e, fp, got, FILE_SIZE, 0), FILE_SIZE);
	assert_memory_equal(got, data, FILE_SIZE);
	eng_release(fx->e, fp);
	eng_get_stats(fx->e, &s);
	assert_int_equal(s.readthrough_chunks, 4);
	assert_int_equal(s.crc_errors, 0);
	assert_string_equal(entry(fx->e, "step_1/model.pt").tier,
			    "ram+persist");
	n = eng_readlink(fx->e, lookup(fx->e, RFT_ROOT_INO, "latest"), link,
			 sizeof(link));
	assert_int_equal(n, 6);
	assert_memory_equal(link, "step_1", 6);
	free(data);
	free(got);
}

static void test_corrupt_copy_gives_eio(void **state)
{
	struct fixture *fx = *state;
	uint8_t *data = write_checkpoint(fx), *got = malloc(FILE_SIZE);
	char path[PATH_MAX + 64];
	struct stat before;
	struct eng_file *fp;
	struct eng_stats s;
	FILE *f;

	/* Flip one byte in the second piece; keep size and mtime. */
	snprintf(path, sizeof(path), "%s/step_1/model.pt", fx->persist);
	assert_int_equal(stat(path, &before), 0);
	f = fopen(path, "r+b");
	fseek(f, MiB + 5, SEEK_SET);
	fputc(data[MiB + 5] ^ 0x01, f);
	fclose(f);
	{
		struct timespec t[2] = { before.st_atim, before.st_mtim };

		assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
	}

	assert_int_equal(fx_start(fx, 16 * MiB, true, 2), 0);
	assert_int_equal(eng_open(fx->e,
				  lookup(fx->e, lookup(fx->e, RFT_ROOT_INO,
						       "step_1"),
					 "model.pt"),
				  O_RDONLY, &fp, NULL), 0);
	/* The first piece is fine; the second is refused, never returned. */
	assert_int_equal(fx_read(fx->e, fp, got, 4096, 0), 4096);
	assert_memory_equal(got, data, 4096);
	assert_int_equal(fx_read(fx->e, fp, got, 4096, MiB), -EIO);
	assert_int_equal(fx_read(fx->e, fp, got, FILE_SIZE, 0), -EIO);
	eng_release(fx->e, fp);
	eng_get_stats(fx->e, &s);
	assert_true(s.crc_errors >= 1);
	assert_string_equal(entry(fx->e, "step_1/model.pt").crc, "bad");
	free(data);
	free(got);
}

static void test_foreign_file_unverified(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX + 64], got[16];
	struct eng_file *fp;
	FILE *f;

	snprintf(path, sizeof(path), "%s/plain.txt", fx->persist);
	f = fopen(path, "w");
	fputs("hello world", f);
	fclose(f);
	assert_int_equal(fx_start(fx, 16 * MiB, true, 2), 0);
	assert_string_equal(entry(fx->e, "plain.txt").crc, "unverified");
	assert_int_equal(eng_open(fx->e, lookup(fx->e, RFT_ROOT_INO,
						"plain.txt"),
				  O_RDONLY, &fp, NULL), 0);
	assert_int_equal(fx_read(fx->e, fp, got, sizeof(got), 0), 11);
	assert_memory_equal(got, "hello world", 11);
	eng_release(fx->e, fp);
}

static void test_names_are_mirrored(void **state)
{
	struct fixture *fx = *state;
	uint8_t *data = write_checkpoint(fx);
	char path[PATH_MAX + 64];
	uint64_t d;

	assert_int_equal(fx_start(fx, 16 * MiB, true, 2), 0);
	d = lookup(fx->e, RFT_ROOT_INO, "step_1");
	assert_int_equal(eng_rename(fx->e, d, "model.pt", d, "renamed.pt", 0),
			 0);
	snprintf(path, sizeof(path), "%s/step_1/renamed.pt", fx->persist);
	assert_int_equal(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "%s/step_1/.renamed.pt.rftsum",
		 fx->persist);
	assert_int_equal(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "%s/step_1/model.pt", fx->persist);
	assert_int_equal(access(path, F_OK), -1);

	/* A whole checkpoint renamed (HF's tmp-checkpoint-N -> checkpoint-N). */
	assert_int_equal(eng_rename(fx->e, RFT_ROOT_INO, "step_1", RFT_ROOT_INO,
				    "step_2", 0), 0);
	snprintf(path, sizeof(path), "%s/step_2/renamed.pt", fx->persist);
	assert_int_equal(access(path, F_OK), 0);

	assert_int_equal(eng_unlink(fx->e, d, "renamed.pt"), 0);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(eng_rmdir(fx->e, RFT_ROOT_INO, "step_2"), 0);
	snprintf(path, sizeof(path), "%s/step_2", fx->persist);
	assert_int_equal(access(path, F_OK), -1);
	free(data);
}

/*
 * Start the engine (write-back only when asked) with a file named @name in
 * the persist dir where the directory @name of the namespace, made here
 * with @mode, must go; *@st is the directory's.  @path gets the file's.
 */
static void start_blocked(struct fixture *fx, const char *name, mode_t mode,
			  char *path, size_t size, struct stat *st)
{
	FILE *f;

	snprintf(path, size, "%s/%s", fx->persist, name);
	f = fopen(path, "w");
	fclose(f);
	fx->no_policy = true;
	assert_int_equal(fx_start(fx, 16 * MiB, true, 2), 0);
	assert_int_equal(eng_unlink(fx->e, RFT_ROOT_INO, name), 0);
	/* The mirror removed it; put it back behind the engine's back. */
	f = fopen(path, "w");
	fclose(f);
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, name, mode, 0, 0, st),
			 0);
}

static void test_error_then_retry(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX + 64];
	struct eng_stats s;
	struct stat st;

	/* A file where the checkpoint's directory must go. */
	start_blocked(fx, "blocked", 0755, path, sizeof(path), &st);
	fx_put(fx->e, st.st_ino, "w.pt", "weights", 7);
	assert_int_not_equal(flush_wait(fx->e), 0);
	eng_get_stats(fx->e, &s);
	assert_false(s.persist_healthy);
	assert_true(s.persist_errors >= 1);
	assert_true(strlen(s.persist_last_error) > 0);
	assert_int_equal(s.persist_pending_files, 0); /* policy selects none */
	assert_string_equal(entry(fx->e, "blocked/w.pt").tier, "ram");

	assert_int_equal(unlink(path), 0);
	assert_int_equal(flush_wait(fx->e), 0);
	eng_get_stats(fx->e, &s);
	assert_true(s.persist_healthy);
	snprintf(path, sizeof(path), "%s/blocked/w.pt", fx->persist);
	assert_int_equal(access(path, F_OK), 0);
}

/* @path's bytes are @len of @data. */
static void assert_host_file(const char *path, const uint8_t *data, size_t len)
{
	size_t got = 0;
	uint8_t *buf = read_host_file(path, &got);

	assert_non_null(buf);
	assert_int_equal(got, len);
	assert_memory_equal(buf, data, len);
	free(buf);
}

/*
 * --sync persist: a writer's fsync returns once the file is in the persist
 * dir as it was then (with --persist-every 0 nothing else writes it back),
 * the writer still open; a write-back that fails is the fsync's EIO, and
 * the next fsync writes it back again.
 */
static void test_fsync_persists(void **state)
{
	struct fixture *fx = *state;
	const size_t more = MiB + 3;
	uint8_t *data = malloc(FILE_SIZE + 2 * more);
	char path[PATH_MAX + 64], sum[PATH_MAX + 64], tmp[PATH_MAX + 64],
	    aside[PATH_MAX + 64];
	struct eng_file *fp, *rd;
	struct stat st;
	time_t t0;
	FILE *f;

	fx_fill(data, FILE_SIZE + 2 * more, 7);
	fx->no_policy = true;
	fx->sync = ENG_SYNC_PERSIST;
	assert_int_equal(fx_start(fx, 32 * MiB, true, 2), 0);
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "step_1", 0755, 0, 0,
				   &st), 0);
	assert_int_equal(eng_create(fx->e, st.st_ino, "model.pt", 0644,
				    getuid(), getgid(),
				    O_CREAT | O_WRONLY | O_TRUNC, &st, &fp,
				    NULL), 0);
	snprintf(path, sizeof(path), "%s/step_1/model.pt", fx->persist);
	snprintf(sum, sizeof(sum), "%s/step_1/.model.pt.rftsum", fx->persist);
	assert_int_equal(eng_write(fx->e, fp, data, FILE_SIZE, 0), FILE_SIZE);
	assert_int_not_equal(access(path, F_OK), 0);
	assert_int_equal(eng_fsync(fx->e, fp), 0);
	assert_host_file(path, data, FILE_SIZE);
	assert_int_equal(access(sum, F_OK), 0);
	/* Still open: writing, for all that it is in the persist dir. */
	assert_int_equal(entry(fx->e, "step_1/model.pt").state,
			 ENG_STATE_WRITING);

	/* More, and fsync again: the copy is the new version. */
	assert_int_equal(eng_write(fx->e, fp, data + FILE_SIZE, more,
				   FILE_SIZE), (ssize_t)more);
	assert_int_equal(eng_fsync(fx->e, fp), 0);
	assert_host_file(path, data, FILE_SIZE + more);

	/* The persist dir fails (its staging dir a file): EIO, kept here. */
	snprintf(tmp, sizeof(tmp), "%s/.reftfs-tmp", fx->persist);
	snprintf(aside, sizeof(aside), "%s/tmp.aside", fx->persist);
	assert_int_equal(rename(tmp, aside), 0);
	f = fopen(tmp, "w");
	assert_non_null(f);
	fclose(f);
	assert_int_equal(eng_write(fx->e, fp, data + FILE_SIZE + more, more,
				   FILE_SIZE + more), (ssize_t)more);
	t0 = time(NULL);
	assert_int_equal(eng_fsync(fx->e, fp), -EIO);
	/* At the failure, not at the deadline (30 s) for one never tried. */
	assert_true(time(NULL) - t0 < 15);
	assert_host_file(path, data, FILE_SIZE + more);
	/* Back: the next fsync writes it back (no backoff for an fsync). */
	assert_int_equal(unlink(tmp), 0);
	assert_int_equal(rename(aside, tmp), 0);
	assert_int_equal(eng_fsync(fx->e, fp), 0);
	assert_host_file(path, data, FILE_SIZE + 2 * more);

	/* A reader's fsync waits for nothing. */
	assert_int_equal(eng_open(fx->e, st.st_ino, O_RDONLY, &rd, NULL), 0);
	assert_int_equal(eng_fsync(fx->e, rd), 0);
	eng_release(fx->e, rd);
	eng_release(fx->e, fp);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_int_equal(entry(fx->e, "step_1/model.pt").state,
			 ENG_STATE_PERSISTED);
	free(data);
}

/*
 * A directory whose name a file holds in the persist dir is not written
 * back over it: that flush fails and the tier says unhealthy, whatever
 * order the pass takes (it used to count the directory as persisted once
 * mkdir said EEXIST, and a pass that wrote it last reported healthy).
 */
static void test_dir_over_a_file(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX + 64];
	struct eng_stats s;
	struct stat st;

	start_blocked(fx, "d", 0750, path, sizeof(path), &st);
	assert_int_not_equal(flush_wait(fx->e), 0);
	eng_get_stats(fx->e, &s);
	assert_false(s.persist_healthy);
	assert_non_null(strstr(s.persist_last_error, "Not a directory"));
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISREG(st.st_mode)); /* left as it was */

	assert_int_equal(unlink(path), 0);
	assert_int_equal(flush_wait(fx->e), 0);
	eng_get_stats(fx->e, &s);
	assert_true(s.persist_healthy);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0750);
}

/*
 * In an engine of 8 MiB keeping one checkpoint: a/m.pt holding 3 MiB of
 * @a, written back, then c/m.pt with 6 MiB of @b; 3 + 6 > 8 chunks, so a,
 * persisted and out of the window, must go.  *@da and *@dc: the
 * directories; returns c/m.pt's inode.
 */
static uint64_t evicted_by_newer(struct fixture *fx, const uint8_t *a,
				 const uint8_t *b, uint64_t *da, uint64_t *dc)
{
	struct stat st;
	uint64_t ic;

	assert_int_equal(fx_start(fx, 8 * MiB, true, 1), 0);
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "a", 0755, 0, 0, &st),
			 0);
	*da = st.st_ino;
	assert_int_not_equal(fx_put(fx->e, *da, "m.pt", a, 3 * MiB), 0);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "c", 0755, 0, 0, &st),
			 0);
	*dc = st.st_ino;
	ic = fx_put(fx->e, *dc, "m.pt", b, 6 * MiB);
	assert_int_not_equal(ic, 0);
	return ic;
}

static void test_eviction_of_old_checkpoints(void **state)
{
	struct fixture *fx = *state;
	uint8_t *a = malloc(3 * MiB), *b = malloc(6 * MiB), *got = malloc(3 * MiB);
	uint64_t da, dc, ic;
	struct eng_file *fp;
	struct eng_stats s;

	fx_fill(a, 3 * MiB, 1);
	fx_fill(b, 6 * MiB, 2);
	ic = evicted_by_newer(fx, a, b, &da, &dc);
	eng_get_stats(fx->e, &s);
	assert_true(s.evicted_chunks >= 1);
	assert_string_not_equal(entry(fx->e, "a/m.pt").tier, "ram+persist");
	/* c is in the window and not persisted: never evicted. */
	assert_int_equal(entry(fx->e, "c/m.pt").resident, 6);

	/* a still reads right, from the persist dir, once room is made. */
	assert_int_equal(eng_unlink(fx->e, dc, "m.pt"), 0);
	eng_forget(fx->e, ic, 1);
	assert_int_equal(eng_open(fx->e, lookup(fx->e, da, "m.pt"), O_RDONLY,
				  &fp, NULL), 0);
	assert_int_equal(fx_read(fx->e, fp, got, 3 * MiB, 0), 3 * MiB);
	assert_memory_equal(got, a, 3 * MiB);
	eng_release(fx->e, fp);
	free(a);
	free(b);
	free(got);
}

/*
 * Read back an evicted checkpoint larger than the free memory: its own
 * older pieces must be evicted while the read streams through it.
 */
static void test_readthrough_under_pressure(void **state)
{
	struct fixture *fx = *state;
	uint8_t *a = malloc(6 * MiB), *c = malloc(4 * MiB), *got = malloc(MiB);
	struct eng_file *fp;
	struct stat st;
	uint64_t da;

	fx_fill(a, 6 * MiB, 5);
	fx_fill(c, 4 * MiB, 6);
	assert_int_equal(fx_start(fx, 8 * MiB, true, 1), 0);
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "a", 0755, 0, 0, &st),
			 0);
	da = st.st_ino;
	fx_put(fx->e, da, "m.pt", a, 6 * MiB);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "c", 0755, 0, 0, &st),
			 0);
	assert_int_not_equal(fx_put(fx->e, st.st_ino, "m.pt", c, 4 * MiB), 0);
	/* c fills the keep window: only a's own pieces can make room. */
	assert_int_equal(eng_open(fx->e, lookup(fx->e, da, "m.pt"), O_RDONLY,
				  &fp, NULL), 0);
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t i = 0; i < 6; i++) {
			assert_int_equal(fx_read(fx->e, fp, got, MiB,
						 (off_t)i * MiB), MiB);
			assert_memory_equal(got, a + (size_t)i * MiB, MiB);
		}
	eng_release(fx->e, fp);
	free(a);
	free(c);
	free(got);
}

static double seconds_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) +
	       (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/*
 * The same with one chunk free and a writer's long --enospc-wait (issue
 * 30): each piece read in must make room for the next at once, by
 * evicting the one before it, fresh or not, at the persist dir's speed.
 * It took a second a piece: a reader waited for the persist worker's
 * next eviction (the first run only cleared the fresh mark).  The loads
 * that found memory full are counted.
 */
static void test_readthrough_when_full(void **state)
{
	struct fixture *fx = *state;
	uint8_t *a = malloc(4 * MiB), *c = malloc(7 * MiB), *got = malloc(MiB);
	struct eng_stats s0, s1;
	struct timespec t0;
	struct eng_file *fp;
	struct stat st;
	uint64_t da;
	double secs;

	fx_fill(a, 4 * MiB, 7);
	fx_fill(c, 7 * MiB, 8);
	assert_int_equal(fx_start(fx, 8 * MiB, true, 1), 0);
	fx->e->cfg.enospc_wait_ms = 5000;
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "a", 0755, 0, 0, &st),
			 0);
	da = st.st_ino;
	fx_put(fx->e, da, "m.pt", a, 4 * MiB);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "c", 0755, 0, 0, &st),
			 0);
	assert_int_not_equal(fx_put(fx->e, st.st_ino, "m.pt", c, 7 * MiB), 0);
	assert_int_equal(entry(fx->e, "a/m.pt").resident, 0);
	eng_get_stats(fx->e, &s0);
	assert_int_equal(s0.chunks_total - s0.chunks_used, 1);
	assert_int_equal(s0.chunks_evictable, 0);

	assert_int_equal(eng_open(fx->e, lookup(fx->e, da, "m.pt"), O_RDONLY,
				  &fp, NULL), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t i = 0; i < 4; i++) {
			assert_int_equal(fx_read(fx->e, fp, got, MiB,
						 (off_t)i * MiB), MiB);
			assert_memory_equal(got, a + (size_t)i * MiB, MiB);
		}
	secs = seconds_since(&t0);
	eng_get_stats(fx->e, &s1);
	printf("8 pieces read in %.3f s: %llu loads found memory full, "
	       "%llu pieces evicted, %llu reads served uncached\n",
	       secs, (unsigned long long)s1.fetch_stalls,
	       (unsigned long long)(s1.evicted_chunks - s0.evicted_chunks),
	       (unsigned long long)s1.reads_uncached);
	/* A second a piece before: 7 s. */
	assert_true(secs < 2.0);
	assert_true(s1.fetch_stalls >= 1);
	assert_true(s1.evicted_chunks > s0.evicted_chunks);
	/*
	 * What was read in last is a cache now, counted as one.  Unless that
	 * read found nothing to evict, read-ahead holding the one cache there
	 * was, and was served uncached (seen under TSan's load): then a read
	 * once read-ahead is done keeps its copy.
	 */
	for (int i = 0; i < 50 && s1.chunks_evictable == 0; i++) {
		usleep(20 * 1000);
		assert_int_equal(fx_read(fx->e, fp, got, MiB, 3 * MiB), MiB);
		eng_get_stats(fx->e, &s1);
	}
	eng_release(fx->e, fp);
	assert_true(s1.chunks_evictable >= 1);
	free(a);
	free(c);
	free(got);
}

static void test_unmount_writes_back(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX + 64];
	struct stat st;

	fx->no_policy = true;
	assert_int_equal(fx_start(fx, 16 * MiB, true, 2), 0);
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "s", 0755, 0, 0, &st),
			 0);
	fx_put(fx->e, st.st_ino, "x.pt", "data", 4);
	usleep(300 * 1000); /* the worker must not write it: policy is 0 */
	snprintf(path, sizeof(path), "%s/s/x.pt", fx->persist);
	assert_int_equal(access(path, F_OK), -1);
	fx_stop(fx); /* --unmount-flush all, the default */
	assert_int_equal(access(path, F_OK), 0);
}

/* --- a rename by another node (one engine posing as a group's node) --- */

/* Apply @op as the log would bring another node's (remote). */
static void remote_apply(struct eng *e, struct nsop *op)
{
	op->node = 1;
	assert_int_equal(ns_apply_as(e, op, 1, NULL, true), 0);
}

static void remote_rename(struct eng *e, uint64_t parent, const char *name,
			  uint64_t newparent, const char *newname,
			  uint32_t flags)
{
	struct nsop op;

	nsop_init(&op, NSOP_RENAME);
	op.flags = flags;
	op.parent = parent;
	op.newparent = newparent;
	snprintf(op.name, sizeof(op.name), "%s", name);
	snprintf(op.newname, sizeof(op.newname), "%s", newname);
	remote_apply(e, &op);
}

static void remote_remove(struct eng *e, enum nsop_kind kind, uint64_t parent,
			  const char *name)
{
	struct nsop op;

	nsop_init(&op, kind);
	op.parent = parent;
	snprintf(op.name, sizeof(op.name), "%s", name);
	remote_apply(e, &op);
}

static bool host_exists(struct fixture *fx, const char *rel)
{
	char path[2 * PATH_MAX + 32];

	snprintf(path, sizeof(path), "%s/%s", fx->persist, rel);
	return access(path, F_OK) == 0;
}

/* @rel in the persist dir holds @len bytes of @data, with its sidecar. */
static void assert_copy(struct fixture *fx, const char *rel,
			const uint8_t *data, size_t want)
{
	char path[2 * PATH_MAX + 32], sum[PATH_MAX + 16];
	const char *slash = strrchr(rel, '/');
	uint8_t *host;
	size_t len = 0;

	snprintf(path, sizeof(path), "%s/%s", fx->persist, rel);
	host = read_host_file(path, &len);
	if (!host || len != want || memcmp(host, data, want))
		fail_msg("%s: %zu bytes%s, want %zu bytes", rel, len,
			 host ? (len == want ? " that differ" : "") : " (absent)",
			 want);
	free(host);
	/* The sidecar: DIR/.NAME.rftsum */
	snprintf(sum, sizeof(sum), "%.*s.%s.rftsum",
		 slash ? (int)(slash + 1 - rel) : 0, rel,
		 slash ? slash + 1 : rel);
	if (!host_exists(fx, sum))
		fail_msg("%s has no sidecar %s", rel, sum);
}

static uint64_t files_written(struct eng *e)
{
	struct eng_stats s;

	eng_get_stats(e, &s);
	return s.persist_files;
}

/*
 * Wait up to 10 s for @rel (unless NULL) to appear in the persist dir and
 * @gone to go.
 */
static void wait_moved(struct fixture *fx, const char *rel, const char *gone)
{
	for (int i = 0; i < 1000; i++) {
		if ((!rel || host_exists(fx, rel)) && !host_exists(fx, gone))
			return;
		usleep(10 * 1000);
	}
	fail_msg("%s did not go (to %s) in 10 s", gone, rel ? rel : "nowhere");
}

/*
 * In a group the node that renames a file mirrors the rename into the
 * shared persist dir; the file's owner may write its copy back under the
 * old name after that mirror and before it applies the rename.  The owner
 * then finds the copy left behind and writes it again under the file's
 * name, and leaves a copy the mirror carried along alone.
 */
static void test_copy_left_behind_by_a_rename(void **state)
{
	struct fixture *fx = *state;
	uint8_t *data = write_checkpoint(fx);
	char from[PATH_MAX + 64], to[PATH_MAX + 64];
	uint64_t d, before;
	struct stat st;

	assert_int_equal(fx_start(fx, 16 * MiB, true, 2), 0);
	d = lookup(fx->e, RFT_ROOT_INO, "step_1");

	/* The copy under the old name: written again under the new one. */
	remote_rename(fx->e, d, "model.pt", d, "moved.pt", 0);
	assert_true(host_exists(fx, "step_1/model.pt")); /* not mirrored */
	wait_moved(fx, "step_1/moved.pt", "step_1/model.pt");
	assert_copy(fx, "step_1/moved.pt", data, FILE_SIZE);
	assert_false(host_exists(fx, "step_1/.model.pt.rftsum"));

	/*
	 * A directory whose rename was mirrored before the copy went in:
	 * the copy sits in a directory of the old name, made again.
	 */
	snprintf(to, sizeof(to), "%s/step_2", fx->persist);
	assert_int_equal(mkdir(to, 0755), 0);
	remote_rename(fx->e, RFT_ROOT_INO, "step_1", RFT_ROOT_INO, "step_2", 0);
	wait_moved(fx, "step_2/moved.pt", "step_1/moved.pt");
	assert_copy(fx, "step_2/moved.pt", data, FILE_SIZE);
	/* The directory of the old name goes with the copy. */
	for (int i = 0; i < 100 && host_exists(fx, "step_1"); i++)
		usleep(10 * 1000);
	assert_false(host_exists(fx, "step_1"));

	/* Carried along by the renamer's mirror: not written again. */
	assert_int_equal(flush_wait(fx->e), 0);
	before = files_written(fx->e);
	snprintf(from, sizeof(from), "%s/step_2/moved.pt", fx->persist);
	snprintf(to, sizeof(to), "%s/step_2/final.pt", fx->persist);
	assert_int_equal(rename(from, to), 0);
	snprintf(from, sizeof(from), "%s/step_2/.moved.pt.rftsum", fx->persist);
	snprintf(to, sizeof(to), "%s/step_2/.final.pt.rftsum", fx->persist);
	assert_int_equal(rename(from, to), 0);
	remote_rename(fx->e, lookup(fx->e, RFT_ROOT_INO, "step_2"), "moved.pt",
		      lookup(fx->e, RFT_ROOT_INO, "step_2"), "final.pt", 0);
	usleep((CHECK_DELAY_TEST_MS + 1500) * 1000);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_int_equal(files_written(fx->e), before);
	assert_copy(fx, "step_2/final.pt", data, FILE_SIZE);
	assert_false(host_exists(fx, "step_2/moved.pt"));

	/* A directory made again under the old name, empty: it goes. */
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "empty_a", 0755, 0, 0,
				   &st), 0);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_true(host_exists(fx, "empty_a"));
	snprintf(from, sizeof(from), "%s/empty_a", fx->persist);
	snprintf(to, sizeof(to), "%s/empty_b", fx->persist);
	assert_int_equal(rename(from, to), 0);
	assert_int_equal(mkdir(from, 0700), 0);
	remote_rename(fx->e, RFT_ROOT_INO, "empty_a", RFT_ROOT_INO, "empty_b",
		      0);
	wait_moved(fx, "empty_b", "empty_a");

	/*
	 * Exchanged with another file of ours, neither copy moved by the
	 * mirror: each is written again under its file's new name.
	 */
	d = lookup(fx->e, RFT_ROOT_INO, "step_2");
	assert_int_not_equal(fx_put(fx->e, d, "other.pt", data + 1,
				    FILE_SIZE - 1), 0);
	assert_int_equal(flush_wait(fx->e), 0);
	remote_rename(fx->e, d, "final.pt", d, "other.pt", ENG_RENAME_EXCHANGE);
	snprintf(to, sizeof(to), "%s/step_2/final.pt", fx->persist);
	for (int i = 0; i < 1000; i++) {
		if (stat(to, &st) == 0 && st.st_size == FILE_SIZE - 1)
			break;
		usleep(10 * 1000);
	}
	assert_int_equal(flush_wait(fx->e), 0);
	assert_copy(fx, "step_2/final.pt", data + 1, FILE_SIZE - 1);
	assert_copy(fx, "step_2/other.pt", data, FILE_SIZE);
	remote_remove(fx->e, NSOP_UNLINK, d, "other.pt");

	/*
	 * Removed by another node whose mirror came before the copy went
	 * in: the copy, its sidecar and its directory (removed as well,
	 * and made again by the copy) go.
	 */
	d = lookup(fx->e, RFT_ROOT_INO, "step_2");
	remote_remove(fx->e, NSOP_UNLINK, d, "final.pt");
	remote_remove(fx->e, NSOP_RMDIR, RFT_ROOT_INO, "step_2");
	assert_true(host_exists(fx, "step_2/final.pt"));
	wait_moved(fx, NULL, "step_2");
	/* A directory made again after the mirror of its removal goes too. */
	remote_remove(fx->e, NSOP_RMDIR, RFT_ROOT_INO, "empty_b");
	assert_true(host_exists(fx, "empty_b"));
	wait_moved(fx, NULL, "empty_b");
	free(data);
}

/* Rename @from to @to in the persist dir, as another node's mirror does. */
static void host_rename(struct fixture *fx, const char *from, const char *to)
{
	char a[2 * PATH_MAX + 32], b[2 * PATH_MAX + 32];

	snprintf(a, sizeof(a), "%s/%s", fx->persist, from);
	snprintf(b, sizeof(b), "%s/%s", fx->persist, to);
	assert_int_equal(rename(a, b), 0);
}

/*
 * Another node's mirror may move or remove a copy between the two renames
 * that put the copy and then its sidecar in: the sidecar lands under the
 * old name, beside no data.  The owner carries it to the copy, or removes
 * it with the directory it kept from going; another file's sidecar there
 * stays.
 */
static void test_sidecar_left_behind(void **state)
{
	struct fixture *fx = *state;
	uint8_t *data = write_checkpoint(fx);
	char path[PATH_MAX + 64];
	struct stat st;
	uint64_t d;

	assert_int_equal(fx_start(fx, 16 * MiB, true, 2), 0);
	d = lookup(fx->e, RFT_ROOT_INO, "step_1");

	/* Moved without its sidecar: the sidecar follows. */
	host_rename(fx, "step_1/model.pt", "step_1/moved.pt");
	remote_rename(fx->e, d, "model.pt", d, "moved.pt", 0);
	wait_moved(fx, "step_1/.moved.pt.rftsum", "step_1/.model.pt.rftsum");
	assert_copy(fx, "step_1/moved.pt", data, FILE_SIZE);

	/*
	 * Removed without its sidecar, with its directory (whose mirror
	 * found the sidecar there): the sidecar goes, then the directory.
	 */
	snprintf(path, sizeof(path), "%s/step_1/moved.pt", fx->persist);
	assert_int_equal(unlink(path), 0);
	remote_remove(fx->e, NSOP_UNLINK, d, "moved.pt");
	remote_remove(fx->e, NSOP_RMDIR, RFT_ROOT_INO, "step_1");
	wait_moved(fx, NULL, "step_1");

	/* Another file's sidecar under a removed file's name stays. */
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "step_2", 0755, 0, 0,
				   &st), 0);
	d = st.st_ino;
	assert_int_not_equal(fx_put(fx->e, d, "a.pt", data, FILE_SIZE), 0);
	assert_int_not_equal(fx_put(fx->e, d, "b.pt", data, FILE_SIZE), 0);
	assert_int_equal(flush_wait(fx->e), 0);
	snprintf(path, sizeof(path), "%s/step_2/a.pt", fx->persist);
	assert_int_equal(unlink(path), 0);
	host_rename(fx, "step_2/.b.pt.rftsum", "step_2/.a.pt.rftsum");
	remote_remove(fx->e, NSOP_UNLINK, d, "a.pt");
	usleep((CHECK_DELAY_TEST_MS + 1500) * 1000);
	assert_true(host_exists(fx, "step_2/.a.pt.rftsum"));
	free(data);
}

/*
 * The copy of file @ino waits in the staging dir (parked) with @len bytes
 * of @data.
 */
static void assert_parked(struct fixture *fx, uint64_t ino,
			  const uint8_t *data, size_t len)
{
	char rel[64];

	snprintf(rel, sizeof(rel), ".reftfs-tmp/park.%llu",
		 (unsigned long long)ino);
	assert_copy(fx, rel, data, len);
}

/* @rel in the persist dir is absent or other than @len bytes of @data. */
static void assert_not_version(struct fixture *fx, const char *rel,
			       const uint8_t *data, size_t len)
{
	char path[2 * PATH_MAX + 32];
	uint8_t *host;
	size_t got = 0;

	snprintf(path, sizeof(path), "%s/%s", fx->persist, rel);
	host = read_host_file(path, &got);
	if (host && got == len && !memcmp(host, data, len))
		fail_msg("%s holds the old version", rel);
	free(host);
}

/*
 * Open file @ino (with @flags), named @name in directory @d, and replace
 * it there with @len bytes of @data by a rename from NAME.tmp, as
 * torch.save over a checkpoint being read would.
 */
static void replace_while_open(struct fixture *fx, uint64_t d,
			       const char *name, uint64_t ino, int flags,
			       const uint8_t *data, size_t len,
			       struct eng_file **fp)
{
	char tmp[NAME_MAX + 1];

	snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	assert_int_equal(eng_open(fx->e, ino, flags, fp, NULL), 0);
	assert_int_not_equal(fx_put(fx->e, d, tmp, data, len), 0);
	assert_int_equal(eng_rename(fx->e, d, tmp, d, name, 0), 0);
}

/*
 * A file replaced while open keeps its copy under the name, as the name's
 * last written-back version, until the new file's copy takes the name.
 * Once the name itself goes (renamed away, unlinked) the old copy leaves
 * it for the staging dir, where the open file reads on: left under the
 * name, a crash brought the name back with that old version after a flush
 * had seen it gone (100-differential, seed 2104696421, trial 80).  A copy
 * waiting under a name whose directory moves follows the directory.
 */
static void test_old_copy_of_a_name_given_up(void **state)
{
	struct fixture *fx = *state;
	const uint8_t *a = (const uint8_t *)"version a",
		      *b = (const uint8_t *)"version b, longer",
		      *c = (const uint8_t *)"version c";
	struct eng_file *fa, *fb;
	uint64_t d, d2, ia, ib;
	uint8_t got[32];
	struct stat st;

	fx->no_policy = true;
	assert_int_equal(fx_start(fx, 16 * MiB, true, 2), 0);
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "ck", 0755, 0, 0, &st),
			 0);
	d = st.st_ino;

	/* Replaced while open, then renamed away before the new one went. */
	ia = fx_put(fx->e, d, "latest", a, 9);
	assert_int_equal(flush_wait(fx->e), 0);
	replace_while_open(fx, d, "latest", ia, O_RDWR, b, 17, &fa);
	assert_copy(fx, "ck/latest", a, 9); /* the name's old version */
	assert_int_equal(eng_rename(fx->e, d, "latest", d, "other", 0), 0);
	assert_false(host_exists(fx, "ck/latest"));
	assert_parked(fx, ia, a, 9);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_false(host_exists(fx, "ck/latest"));
	assert_copy(fx, "ck/other", b, 17);
	assert_int_equal(fx_read(fx->e, fa, got, sizeof(got), 0), 9);
	assert_memory_equal(got, a, 9);
	eng_release(fx->e, fa);

	/* Replaced while open, then unlinked. */
	ib = lookup(fx->e, d, "other");
	replace_while_open(fx, d, "other", ib, O_RDWR, c, 9, &fb);
	assert_copy(fx, "ck/other", b, 17);
	assert_int_equal(eng_unlink(fx->e, d, "other"), 0);
	assert_false(host_exists(fx, "ck/other"));
	assert_parked(fx, ib, b, 17);
	eng_release(fx->e, fb);

	/*
	 * Replaced while open, then its directory renamed: the old version
	 * stays the name's, under the directory's new name, until the new
	 * file's write-back parks it.
	 */
	ia = fx_put(fx->e, d, "w.pt", a, 9);
	assert_int_equal(flush_wait(fx->e), 0);
	replace_while_open(fx, d, "w.pt", ia, O_RDONLY, b, 17, &fa);
	assert_int_equal(eng_rename(fx->e, RFT_ROOT_INO, "ck", RFT_ROOT_INO,
				    "ck2", 0), 0);
	d2 = lookup(fx->e, RFT_ROOT_INO, "ck2");
	assert_int_equal(d2, d);
	assert_copy(fx, "ck2/w.pt", a, 9);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_copy(fx, "ck2/w.pt", b, 17);
	assert_parked(fx, ia, a, 9);
	eng_release(fx->e, fa);

	/* The same in two directories exchanged: each copy goes along. */
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "e1", 0755, 0, 0, &st),
			 0);
	d = st.st_ino;
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "e2", 0755, 0, 0, &st),
			 0);
	d2 = st.st_ino;
	ia = fx_put(fx->e, d, "w.pt", a, 9);
	ib = fx_put(fx->e, d2, "w.pt", c, 9);
	assert_int_equal(flush_wait(fx->e), 0);
	replace_while_open(fx, d, "w.pt", ia, O_RDONLY, b, 17, &fa);
	replace_while_open(fx, d2, "w.pt", ib, O_RDONLY, a, 9, &fb);
	assert_int_equal(eng_rename(fx->e, RFT_ROOT_INO, "e1", RFT_ROOT_INO,
				    "e2", ENG_RENAME_EXCHANGE), 0);
	assert_copy(fx, "e2/w.pt", a, 9);
	assert_copy(fx, "e1/w.pt", c, 9);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_copy(fx, "e2/w.pt", b, 17);
	assert_copy(fx, "e1/w.pt", a, 9);
	assert_parked(fx, ia, a, 9);
	assert_parked(fx, ib, c, 9);
	eng_release(fx->e, fa);
	eng_release(fx->e, fb);

	/*
	 * Exchanged with a directory: the old version of the file's name
	 * must not take the directory's name.  At the root the file is
	 * beside the checkpoints, which the policy writes back at once: the
	 * name may already hold the new version, never the old.
	 */
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "f", 0755, 0, 0, &st),
			 0);
	ia = fx_put(fx->e, st.st_ino, "x", a, 9);
	assert_int_equal(flush_wait(fx->e), 0);
	replace_while_open(fx, st.st_ino, "x", ia, O_RDONLY, b, 17,
			   &fa);
	assert_int_equal(eng_rename(fx->e, st.st_ino, "x", RFT_ROOT_INO, "e1",
				    ENG_RENAME_EXCHANGE), 0);
	assert_parked(fx, ia, a, 9);
	assert_not_version(fx, "e1", a, 9);
	assert_copy(fx, "f/x/w.pt", a, 9);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_copy(fx, "e1", b, 17);
	eng_release(fx->e, fa);
}

/*
 * A file whose copy is older than its data and still holds pieces only
 * it has (evicted), renamed: the copy must not stay under the old name,
 * which a flush sees gone; the file reads on from the staging dir.
 */
static void test_stale_copy_of_a_renamed_file(void **state)
{
	struct fixture *fx = *state;
	uint8_t *a = malloc(3 * MiB), *b = malloc(6 * MiB), *got = malloc(3 * MiB);
	uint64_t da, dc, ia, ic;
	struct eng_file *fp;

	fx_fill(a, 3 * MiB, 11);
	fx_fill(b, 6 * MiB, 12);
	ic = evicted_by_newer(fx, a, b, &da, &dc);
	ia = lookup(fx->e, da, "m.pt");
	assert_int_equal(entry(fx->e, "a/m.pt").resident, 0);
	assert_int_equal(eng_unlink(fx->e, dc, "m.pt"), 0);
	eng_forget(fx->e, ic, 1);

	assert_int_equal(eng_open(fx->e, ia, O_RDWR, &fp, NULL), 0);
	a[0] ^= 0xff;
	assert_int_equal(eng_write(fx->e, fp, a, 1, 0), 1);
	assert_int_equal(eng_rename(fx->e, da, "m.pt", da, "n.pt", 0), 0);
	assert_false(host_exists(fx, "a/m.pt"));
	assert_int_equal(flush_wait(fx->e), 0); /* open: not written back */
	assert_false(host_exists(fx, "a/m.pt"));
	assert_int_equal(fx_read(fx->e, fp, got, 3 * MiB, 0), 3 * MiB);
	assert_memory_equal(got, a, 3 * MiB);
	eng_release(fx->e, fp);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_copy(fx, "a/n.pt", a, 3 * MiB);
	assert_false(host_exists(fx, "a/m.pt"));
	free(a);
	free(b);
	free(got);
}

/*
 * In a group: a copy waiting under a name (its file replaced while open
 * here) whose directory another node renames.  The renamer's mirror
 * carries the copy along; the owner finds it there when it checks, so
 * the new file's write-back still parks it rather than replacing it.
 */
static void test_away_copy_below_a_remote_rename(void **state)
{
	struct fixture *fx = *state;
	const uint8_t *a = (const uint8_t *)"version a",
		      *b = (const uint8_t *)"version b, longer";
	char from[PATH_MAX + 64], to[PATH_MAX + 64];
	struct eng_file *fa;
	struct stat st;
	uint64_t ia;

	fx->no_policy = true;
	assert_int_equal(fx_start(fx, 16 * MiB, true, 2), 0);
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "r1", 0755, 0, 0, &st),
			 0);
	ia = fx_put(fx->e, st.st_ino, "w.pt", a, 9);
	assert_int_equal(flush_wait(fx->e), 0);
	replace_while_open(fx, st.st_ino, "w.pt", ia, O_RDONLY, b, 17,
			   &fa);
	/* The renamer's mirror, then the rename as the log brings it. */
	snprintf(from, sizeof(from), "%s/r1", fx->persist);
	snprintf(to, sizeof(to), "%s/r2", fx->persist);
	assert_int_equal(rename(from, to), 0);
	remote_rename(fx->e, RFT_ROOT_INO, "r1", RFT_ROOT_INO, "r2", 0);
	usleep((CHECK_DELAY_TEST_MS + 500) * 1000);
	assert_int_equal(flush_wait(fx->e), 0);
	assert_copy(fx, "r2/w.pt", b, 17);
	assert_parked(fx, ia, a, 9);
	eng_release(fx->e, fa);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_writeback_and_remount,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_copy_gives_eio,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_foreign_file_unverified,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_names_are_mirrored, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_copy_left_behind_by_a_rename, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_sidecar_left_behind, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_over_a_file, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_fsync_persists, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_error_then_retry, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_eviction_of_old_checkpoints, setup, teardown),
		cmocka_unit_test_setup_teardown(test_readthrough_under_pressure,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_readthrough_when_full,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_old_copy_of_a_name_given_up, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_stale_copy_of_a_renamed_file, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_away_copy_below_a_remote_rename, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unmount_writes_back, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
