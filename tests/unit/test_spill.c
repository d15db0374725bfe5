/*
 * test_spill.c - the spill tier (engine/spill.c, eviction's third kind):
 * checkpoints that do not fit the arena go to the spill dir instead of
 * ENOSPC and read back byte-identical, checked (a corrupt spilled piece is
 * EIO, never other bytes), a removed file's spill file goes; and a random
 * test against a model: checkpoints written, rewritten in part (a spilled
 * piece read back in first), cut, extended and removed in a small arena,
 * every file read back against the model.  SPILL_SEED replays a run, SPILL_OPS
 * sets its length.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#include "eng_fixture.h"

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

static uint64_t lookup(struct eng *e, uint64_t parent, const char *name)
{
	struct stat st;

	assert_int_equal(eng_lookup(e, parent, name, &st), 0);
	return st.st_ino;
}

/* Read all @len bytes of @ino into @buf: 0 or the first -errno. */
static int read_all(struct eng *e, uint64_t ino, uint8_t *buf, size_t len)
{
	struct eng_file *fp;
	int rc = eng_open(e, ino, O_RDONLY, &fp, NULL);

	for (size_t off = 0; rc == 0 && off < len; off += MiB) {
		size_t n = len - off < MiB ? len - off : MiB;
		ssize_t got = fx_read(e, fp, buf + off, n, (off_t)off);

		if (got < 0)
			rc = (int)got;
		else if ((size_t)got != n)
			rc = -EIO;
	}
	if (fp)
		eng_release(e, fp);
	return rc;
}

struct one_entry {
	char tier[16];
	uint64_t file_id;
	uint32_t resident;
};

static int entry_cb(void *ctx, const struct eng_entry_info *ei)
{
	struct one_entry *o = ctx;

	snprintf(o->tier, sizeof(o->tier), "%s", ei->tier);
	o->file_id = ei->file_id;
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

/* The first piece that is in the spill dir only, into *@ctx. */
static int spilled_cb(void *ctx, const struct eng_piece_info *pi)
{
	uint32_t *first = ctx;

	if (*first == UINT32_MAX && !strcmp(pi->here, "spill"))
		*first = pi->index;
	return 0;
}

#define NCKPT 6
#define CKPT_BASE (3 * MiB)

/* Checkpoint @c's file @k: its length. */
static size_t ckpt_len(int c, int k)
{
	return CKPT_BASE + (size_t)c * 4096 + (size_t)k;
}

/*
 * Write checkpoints step_1..step_6 of files f0 and f1 (ckpt_len bytes,
 * pattern @seed + 2c + k) into @data and the engine; their inodes into
 * @ino.
 */
static void write_ckpts(struct eng *e, uint8_t *data[NCKPT][2],
			uint64_t ino[NCKPT][2], unsigned seed)
{
	char name[32];
	struct stat st;

	for (int c = 0; c < NCKPT; c++) {
		snprintf(name, sizeof(name), "step_%d", c + 1);
		assert_int_equal(eng_mkdir(e, RFT_ROOT_INO, name, 0755, 0, 0,
					   &st), 0);
		for (int k = 0; k < 2; k++) {
			size_t len = ckpt_len(c, k);

			data[c][k] = malloc(len);
			fx_fill(data[c][k], len, seed + (unsigned)(c * 2 + k));
			snprintf(name, sizeof(name), "f%d", k);
			ino[c][k] = fx_put(e, st.st_ino, name, data[c][k], len);
			if (!ino[c][k])
				fail_msg("step_%d/f%d not written: the arena "
					 "is full and nothing spilled", c + 1,
					 k);
		}
	}
}

/*
 * Six checkpoints of 2 files of about 3 MiB in a 16 MiB arena, --keep 1,
 * no persist dir: without the spill dir the fourth cannot be written
 * (ENOSPC); with it, the older ones go there and every file reads back.
 */
static void test_spill_instead_of_enospc(void **state)
{
	struct fixture *fx = *state;
	uint8_t *data[NCKPT][2], *buf = malloc(ckpt_len(NCKPT, 2));
	uint64_t ino[NCKPT][2];
	char name[32], path[PATH_MAX + 64];
	struct one_entry old;
	struct eng_file *fp;
	struct eng_stats s;
	uint32_t bad = UINT32_MAX;
	struct stat st;
	FILE *f;

	fx->spill_bytes = 256ull * MiB;
	assert_int_equal(fx_start(fx, 16 * MiB, false, 1), 0);
	write_ckpts(fx->e, data, ino, 1);
	for (int c = 0; c < NCKPT; c++)
		for (int k = 0; k < 2; k++) {
			size_t len = ckpt_len(c, k);

			assert_int_equal(read_all(fx->e, ino[c][k], buf, len),
					 0);
			assert_memory_equal(buf, data[c][k], len);
		}
	eng_get_stats(fx->e, &s);
	assert_true(s.spill_enabled);
	assert_true(s.spill_written > 0);
	assert_true(s.spill_used > 0 && s.spill_used <= s.spill_budget);
	assert_int_equal(s.enospc, 0);
	old = entry(fx->e, "step_1/f1");
	if (strcmp(old.tier, "spill") && strcmp(old.tier, "ram+spill")) {
		/* Read back in just now: evict it again with new data. */
		assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "step_7", 0755,
					   0, 0, &st), 0);
		assert_int_not_equal(fx_put(fx->e, st.st_ino, "f0", data[5][0],
					    CKPT_BASE), 0);
		assert_int_not_equal(fx_put(fx->e, st.st_ino, "f1", data[5][1],
					    CKPT_BASE), 0);
		old = entry(fx->e, "step_1/f1");
	}
	assert_true(!strcmp(old.tier, "spill") ||
		    !strcmp(old.tier, "ram+spill"));
	eng_get_stats(fx->e, &s);
	assert_true(s.spill_pieces > 0);

	/* A byte of a spilled piece of step_1/f1 goes bad on disk: EIO. */
	assert_int_equal(eng_list_pieces(fx->e, "step_1/f1", spilled_cb,
					 &bad), 0);
	assert_true(bad != UINT32_MAX);
	snprintf(path, sizeof(path), "%s/%016llx.spill", fx->spill,
		 (unsigned long long)old.file_id);
	f = fopen(path, "r+b");
	assert_non_null(f);
	fseek(f, (long)bad * MiB + 100, SEEK_SET);
	fputc(data[0][1][(size_t)bad * MiB + 100] ^ 0x5a, f);
	fclose(f);
	assert_int_equal(eng_open(fx->e, ino[0][1], O_RDONLY, &fp, NULL), 0);
	assert_int_equal(fx_read(fx->e, fp, buf, 4096, (off_t)bad * MiB),
			 -EIO);
	eng_release(fx->e, fp);
	eng_get_stats(fx->e, &s);
	assert_true(s.spill_crc_errors >= 1);

	/* Removed: its spill file goes with the next write there. */
	assert_int_equal(eng_unlink(fx->e, lookup(fx->e, RFT_ROOT_INO,
						  "step_1"), "f1"), 0);
	assert_int_equal(eng_mkdir(fx->e, RFT_ROOT_INO, "step_8", 0755, 0, 0,
				   &st), 0);
	for (int k = 0; k < 3; k++) {
		snprintf(name, sizeof(name), "f%d", k);
		assert_int_not_equal(fx_put(fx->e, st.st_ino, name,
					    data[4][k % 2], CKPT_BASE), 0);
	}
	assert_int_not_equal(access(path, F_OK), 0);
	for (int c = 0; c < NCKPT; c++)
		for (int k = 0; k < 2; k++)
			free(data[c][k]);
	free(buf);
	fx_stop(fx);
	/* Nothing of it outlives the engine. */
	snprintf(path, sizeof(path), "rmdir '%.2000s'", fx->spill);
	assert_int_equal(system(path), 0);
	mkdir(fx->spill, 0755);
}

/* Pieces of a file: those in the spill dir, in the persist dir, in all. */
struct where_count {
	uint32_t spill, persist, all;
	int32_t first_spill;
};

static int where_cb(void *ctx, const struct eng_piece_info *pi)
{
	struct where_count *w = ctx;

	w->all++;
	if (!strcmp(pi->here, "spill")) {
		if (!w->spill++)
			w->first_spill = (int32_t)pi->index;
	}
	w->persist += !strcmp(pi->here, "persist");
	return 0;
}

static struct where_count where(struct eng *e, const char *path)
{
	struct where_count w = { 0, 0, 0, -1 };

	assert_int_equal(eng_list_pieces(e, path, where_cb, &w), 0);
	return w;
}

static void spill_path(struct fixture *fx, uint64_t file_id,
		       const char *suffix, char *buf, size_t size)
{
	snprintf(buf, size, "%s/%016llx%s", fx->spill,
		 (unsigned long long)file_id, suffix);
}

/*
 * A restart finds what the spill dir holds: six checkpoints spill with no
 * write-back until the stop (whose last pass reads them from the spill
 * dir); the next engine, whose persist scan knows the files again, takes
 * the spilled pieces back instead of reading the persist dir.  Meanwhile a
 * file was removed from the persist dir (its spill files go), a record of
 * the index was torn (that piece is the persist dir's), and a spilled
 * piece went bad on disk (its read fails its check and goes to the
 * persist dir: the right bytes, no EIO).
 */
static void test_spill_restart(void **state)
{
	struct fixture *fx = *state;
	uint8_t *data[NCKPT][2], *buf = malloc(ckpt_len(NCKPT, 2));
	uint64_t ino[NCKPT][2], id_gone, id_torn, id_bad;
	char name[32], path[PATH_MAX + 64];
	struct where_count torn, bad;
	struct eng_stats s;
	FILE *f;

	fx->spill_bytes = 256ull * MiB;
	fx->no_policy = true; /* nothing written back before the stop */
	assert_int_equal(fx_start(fx, 16 * MiB, true, 1), 0);
	write_ckpts(fx->e, data, ino, 7);
	eng_get_stats(fx->e, &s);
	assert_true(s.spill_written > 0);
	id_gone = entry(fx->e, "step_2/f0").file_id;
	id_torn = entry(fx->e, "step_1/f1").file_id;
	id_bad = entry(fx->e, "step_1/f0").file_id;
	torn = where(fx->e, "step_1/f1");
	bad = where(fx->e, "step_1/f0");
	assert_true(where(fx->e, "step_2/f0").spill > 0);
	assert_true(torn.spill > 0 && bad.spill > 1);
	fx_stop(fx);

	/* Kept at the stop: the persist dir's scan knows the files again. */
	spill_path(fx, id_bad, ".spill", path, sizeof(path));
	assert_int_equal(access(path, F_OK), 0);
	/* step_2/f0 is removed while no daemon runs. */
	snprintf(path, sizeof(path), "%s/step_2/f0", fx->persist);
	assert_int_equal(unlink(path), 0);
	snprintf(path, sizeof(path), "%s/step_2/.f0.rftsum", fx->persist);
	unlink(path);
	/* The record of step_1/f1's first spilled piece is torn. */
	spill_path(fx, id_torn, ".sums", path, sizeof(path));
	f = fopen(path, "r+b");
	assert_non_null(f);
	fseek(f, (long)torn.first_spill * 24 + 21, SEEK_SET);
	fputc(0x5a, f);
	fclose(f);
	/* A byte of step_1/f0's first spilled piece goes bad. */
	spill_path(fx, id_bad, ".spill", path, sizeof(path));
	f = fopen(path, "r+b");
	assert_non_null(f);
	fseek(f, (long)bad.first_spill * MiB + 100, SEEK_SET);
	fputc(data[0][0][(size_t)bad.first_spill * MiB + 100] ^ 0x5a, f);
	fclose(f);

	fx->no_policy = false;
	assert_int_equal(fx_start(fx, 16 * MiB, true, 1), 0);
	eng_get_stats(fx->e, &s);
	assert_true(s.spill_found > 0);
	assert_int_equal(s.spill_pieces, s.spill_found);
	spill_path(fx, id_gone, ".spill", path, sizeof(path));
	assert_int_not_equal(access(path, F_OK), 0);
	spill_path(fx, id_gone, ".sums", path, sizeof(path));
	assert_int_not_equal(access(path, F_OK), 0);
	assert_int_equal(where(fx->e, "step_1/f0").spill, bad.spill);
	assert_int_equal(where(fx->e, "step_1/f1").spill, torn.spill - 1);

	/* By name: the scan made new inodes. */
	for (int c = 0; c < NCKPT; c++)
		for (int k = 0; k < 2; k++) {
			size_t len = ckpt_len(c, k);

			if (c == 1 && k == 0)
				continue; /* removed */
			snprintf(path, sizeof(path), "step_%d", c + 1);
			snprintf(name, sizeof(name), "f%d", k);
			ino[c][k] = lookup(fx->e, lookup(fx->e, RFT_ROOT_INO,
							 path),
					   name);
			assert_int_equal(read_all(fx->e, ino[c][k], buf, len),
					 0);
			assert_memory_equal(buf, data[c][k], len);
		}
	eng_get_stats(fx->e, &s);
	/* Each found piece read from the spill dir but the bad one. */
	assert_int_equal(s.spill_read, s.spill_found - 1);
	assert_int_equal(s.spill_crc_errors, 1);
	assert_int_equal(s.crc_errors, 0);
	for (int c = 0; c < NCKPT; c++)
		for (int k = 0; k < 2; k++)
			free(data[c][k]);
	free(buf);
}

/* --- against a model ----------------------------------------------------- */

#define MAX_FILES 64

struct mfile {
	bool live;
	uint64_t ino;
	uint8_t *data;
	size_t len;
	char path[32];
};

struct model {
	struct eng *e;
	uint64_t seed, x;
	struct mfile f[MAX_FILES];
	int nf, nckpt;
};

static uint64_t rnd(struct model *m, uint64_t n)
{
	m->x ^= m->x << 13;
	m->x ^= m->x >> 7;
	m->x ^= m->x << 17;
	return n ? m->x % n : 0;
}

static void check_file(struct model *m, struct mfile *f, const char *when)
{
	uint8_t *buf = malloc(f->len ? f->len : 1);
	int rc = read_all(m->e, f->ino, buf, f->len);

	if (rc < 0 || (f->len && memcmp(buf, f->data, f->len)))
		fail_msg("%s: %s (%zu bytes) %s (SPILL_SEED=%llu)", when,
			 f->path, f->len,
			 rc < 0 ? strerror(-rc) : "differs from the model",
			 (unsigned long long)m->seed);
	free(buf);
}

static struct mfile *pick(struct model *m)
{
	int n = 0, k;

	for (int i = 0; i < m->nf; i++)
		n += m->f[i].live;
	if (!n)
		return NULL;
	k = (int)rnd(m, (uint64_t)n);
	for (int i = 0; i < m->nf; i++)
		if (m->f[i].live && k-- == 0)
			return &m->f[i];
	return NULL;
}

static int dump_cb(void *ctx, const struct eng_piece_info *pi)
{
	(void)ctx;
	if (strcmp(pi->here, "spill"))
		fprintf(stderr, "    piece %u len %u %s crc %s\n", pi->index,
			pi->len, pi->here, pi->crc_known ? "known" : "unknown");
	return 0;
}

/* Where every file's pieces are (on a failure). */
static void dump(struct model *m)
{
	for (int i = 0; i < m->nf; i++) {
		struct one_entry o;

		if (!m->f[i].live)
			continue;
		memset(&o, 0, sizeof(o));
		eng_list_path(m->e, m->f[i].path, entry_cb, &o);
		fprintf(stderr, "  %s, %zu bytes: %s, %u pieces in RAM\n",
			m->f[i].path, m->f[i].len, o.tier, o.resident);
		eng_list_pieces(m->e, m->f[i].path, dump_cb, NULL);
	}
}

/* A new checkpoint of one or two files of up to 3 MiB. */
static void op_checkpoint(struct model *m)
{
	char name[16];
	struct stat st;
	int nfiles = 1 + (int)rnd(m, 2);

	snprintf(name, sizeof(name), "c%d", ++m->nckpt);
	assert_int_equal(eng_mkdir(m->e, RFT_ROOT_INO, name, 0755, 0, 0, &st),
			 0);
	for (int k = 0; k < nfiles; k++) {
		struct mfile *f = NULL;

		/* A removed file's entry, or a new one. */
		for (int i = 0; i < m->nf && !f; i++)
			if (!m->f[i].live)
				f = &m->f[i];
		if (!f && m->nf == MAX_FILES)
			return;
		if (!f)
			f = &m->f[m->nf++];

		f->len = (size_t)rnd(m, 3 * MiB + 1);
		f->data = malloc(f->len ? f->len : 1);
		fx_fill(f->data, f->len, (unsigned)rnd(m, 1u << 30));
		snprintf(f->path, sizeof(f->path), "%s/f%d", name, k);
		f->ino = fx_put(m->e, st.st_ino, f->path + strlen(name) + 1,
				f->data, f->len);
		if (!f->ino) {
			struct eng_stats s;

			dump(m);
			eng_get_stats(m->e, &s);
			fail_msg("%s not written (SPILL_SEED=%llu): %llu of %llu "
				 "chunks used, %u slabs (%llu bytes), %llu "
				 "pieces spilled",
				 f->path, (unsigned long long)m->seed,
				 (unsigned long long)s.chunks_used,
				 (unsigned long long)s.chunks_total,
				 s.small_slabs,
				 (unsigned long long)s.small_bytes,
				 (unsigned long long)s.spill_pieces);
		}
		f->live = true;
	}
}

/* Rewrite part of a file (it may be spilled: the piece comes back). */
static void op_rewrite(struct model *m, struct mfile *f)
{
	size_t off = (size_t)rnd(m, f->len + 1), n = (size_t)rnd(m, MiB + MiB / 2);
	struct eng_file *fp;
	uint8_t *b = malloc(n ? n : 1);

	fx_fill(b, n, (unsigned)rnd(m, 1u << 30));
	assert_int_equal(eng_open(m->e, f->ino, O_WRONLY, &fp, NULL), 0);
	if (n) {
		ssize_t w = eng_write(m->e, fp, b, n, (off_t)off);

		if (w != (ssize_t)n) {
			dump(m);
			fail_msg("rewrite of %s, %zu bytes at %zu: %s "
				 "(SPILL_SEED=%llu)", f->path, n, off,
				 w < 0 ? strerror((int)-w) : "short",
				 (unsigned long long)m->seed);
		}
	}
	assert_int_equal(eng_flush(m->e, fp), 0);
	eng_release(m->e, fp);
	if (off + n > f->len) {
		f->data = realloc(f->data, off + n);
		f->len = off + n;
	}
	memcpy(f->data + off, b, n);
	free(b);
}

static void op_truncate(struct model *m, struct mfile *f)
{
	struct eng_setattr sa = { .valid = ENG_SET_SIZE };
	struct stat st;

	/* Cut, or now and then extended (zeros, past bytes cut before). */
	sa.size = rnd(m, 4) ? rnd(m, f->len + 1) : f->len + rnd(m, 2 * MiB);
	assert_int_equal(eng_setattr(m->e, f->ino, NULL, &sa, &st), 0);
	if (sa.size > f->len) {
		f->data = realloc(f->data, (size_t)sa.size);
		memset(f->data + f->len, 0, (size_t)sa.size - f->len);
	}
	f->len = (size_t)sa.size;
}

static void op_unlink(struct model *m, struct mfile *f)
{
	char dir[32];

	snprintf(dir, sizeof(dir), "%s", f->path);
	*strchr(dir, '/') = '\0';
	assert_int_equal(eng_unlink(m->e, lookup(m->e, RFT_ROOT_INO, dir),
				    strchr(f->path, '/') + 1), 0);
	/* The create's lookup, as the kernel forgets it: the inode goes. */
	eng_forget(m->e, f->ino, 1);
	f->live = false;
	free(f->data);
	f->data = NULL;
}

static void test_spill_model(void **state)
{
	struct fixture *fx = *state;
	struct model m = { 0 };
	const char *env = getenv("SPILL_SEED");
	unsigned ops = getenv("SPILL_OPS") ? (unsigned)atoi(getenv("SPILL_OPS"))
					   : 150;
	struct eng_stats s;

	m.seed = env && *env ? strtoull(env, NULL, 10)
		     : (uint64_t)time(NULL) * 2654435761u + (uint64_t)getpid();
	m.x = m.seed | 1;
	fprintf(stderr, "spill model: SPILL_SEED=%llu, %u operations\n",
		(unsigned long long)m.seed, ops);
	fx->spill_bytes = 512ull * MiB;
	assert_int_equal(fx_start(fx, 16 * MiB, false, 1), 0);
	m.e = fx->e;
	for (unsigned i = 0; i < ops; i++) {
		struct mfile *f = pick(&m);
		uint64_t r = rnd(&m, 10);

		if (!f || r < 3 || m.nf < 4) {
			op_checkpoint(&m);
		} else if (r < 5) {
			op_rewrite(&m, f);
		} else if (r < 6) {
			op_truncate(&m, f);
		} else if (r < 7) {
			op_unlink(&m, f);
		} else {
			check_file(&m, f, "a read");
		}
	}
	for (int i = 0; i < m.nf; i++)
		if (m.f[i].live)
			check_file(&m, &m.f[i], "at the end");
	eng_get_stats(fx->e, &s);
	fprintf(stderr, "spill model: %llu pieces written to the spill dir, "
		"%llu read back, %llu there now\n",
		(unsigned long long)s.spill_written,
		(unsigned long long)s.spill_read,
		(unsigned long long)s.spill_pieces);
	assert_true(s.spill_written > 0);
	assert_int_equal(s.spill_crc_errors, 0);
	for (int i = 0; i < m.nf; i++)
		free(m.f[i].data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_spill_instead_of_enospc,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_spill_restart, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_spill_model, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
