/*
 * test_seal.c - the engine's side of the group's seal rule (docs/design.md,
 * "Several writers"), against a model: a file's content is its last SEAL
 * in the log, whoever sealed it; what this node's writers change is its
 * draft until their last close seals it; another node's seal replaces
 * what this node shows unless it has a draft; a draft that cannot be
 * sealed (its base's pieces gone) gives way to the group's version; and
 * what a node shows is checked against the log's record of the seal.
 *
 * One real engine is "this node" (node 1); the group is a stub: SEALs of
 * "node 2" are applied through ns_apply as the log would, and fetches are
 * served from the versions sealed so far, an older one's pieces gone once
 * a newer one is sealed (its holders took the newer one).  Random events
 * (another node's seal, also while a write's fetch is in flight, writes,
 * closes, reads, a recorded checksum flipped and verify --repair) are
 * checked against a model after each;
 * the seed is printed, SEAL_SEED replays it, SEAL_STEPS sets the length.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "eng_fixture.h"
#include "erasure.h"

#define SELF 1
#define OTHER 2
#define MAX_SIZE (3 * MiB + 12345)

/* --- the stub group -------------------------------------------------------- */

/*
 * The versions sealed so far: only the newest is anywhere (its holders
 * dropped the older ones when they took it).
 */
struct stub {
	uint64_t index;
	uint8_t *data;
	uint64_t size;
	unsigned seals; /* EV_SEALED for the group: a close with something to
			   seal */
	unsigned *race; /* set: the next fetch draws another node's seal made
			   while it is in flight (ev_seal_there) */
};

static struct stub S;

static void ev_seal_there(unsigned *rng);

/* The group hears of a RELEASE's seal as gns.c does: by the event. */
static void stub_on_event(struct eng *e, const struct eng_ev *ev, void *ctx)
{
	(void)e;
	(void)ctx;
	if (ev->kind == EV_SEALED && ev->tell)
		S.seals++; /* the test seals by hand */
}

static int stub_fetch(void *ctx, const struct eng_piece *p, uint8_t *buf,
		      const struct timespec *deadline)
{
	uint64_t off = (uint64_t)p->idx * MiB, have;

	(void)ctx;
	(void)deadline;
	if (S.race) {
		/* Its holders take the newer seal before they answer. */
		unsigned *rng = S.race;

		S.race = NULL;
		ev_seal_there(rng);
	}
	if (p->gseal != S.index)
		return -EIO;
	have = S.size > off ? S.size - off : 0;
	have = have < p->len ? have : p->len;
	memcpy(buf, S.data + off, have);
	memset(buf + have, 0, p->len - have);
	return ers_crc32c(0, buf, p->len) == p->crc ? 0 : -EIO;
}

static int stub_start(void *ctx)
{
	(void)ctx;
	return 0;
}

static void stub_nothing(void *ctx)
{
	(void)ctx;
}

static const struct eng_group_ops stub_ops = {
	.fetch = stub_fetch,
	.start = stub_start,
	.stop = stub_nothing,
	.free = stub_nothing,
};

/* --- the model -------------------------------------------------------------- */

struct model {
	uint8_t *group;	  /* the last seal's bytes */
	uint64_t gsize;
	uint8_t *view;	  /* what this node shows */
	uint64_t vsize;
	bool draft;	  /* this node changed it since it showed the group's */
	bool base_gone;	  /* ... and another node sealed since */
	uint64_t index;	  /* the log's last index */
};

static struct fixture fx;
static struct eng *E;
static uint64_t INO;
static struct model M;
static struct eng_file *W; /* an open writer, or NULL */

static void remember(uint64_t index, const uint8_t *data, uint64_t size)
{
	S.index = index;
	S.size = size;
	S.data = realloc(S.data, size ? size : 1);
	assert_non_null(S.data);
	memcpy(S.data, data, size);
}

static uint32_t piece_crc(const uint8_t *data, uint64_t size, uint32_t i)
{
	uint64_t off = (uint64_t)i * MiB;
	uint32_t len = file_piece_len(E, size, i);
	uint32_t crc = ers_crc32c(0, data + off, len);

	return crc;
}

static struct inode *IN(void)
{
	struct inode *in;

	pthread_rwlock_rdlock(&E->ns.lock);
	in = ns_find(&E->ns, INO);
	pthread_rwlock_unlock(&E->ns.lock);
	assert_non_null(in);
	return in;
}

static struct file *F(void)
{
	return &IN()->file;
}

/* Apply @op as the log's entry M.index + 1. */
static int apply(struct nsop *op)
{
	int rc = ns_apply(E, op, ++M.index, NULL);

	nsop_clear(op);
	return rc;
}

/* Another node seals @size bytes of @data. */
static void seal_there(const uint8_t *data, uint64_t size)
{
	struct nsop op;
	uint32_t n = (uint32_t)((size + MiB - 1) / MiB);

	nsop_init(&op, NSOP_SEAL);
	op.node = OTHER;
	op.inc = 77;
	op.ino = INO;
	op.version = 1;
	op.size = size;
	op.chunk_size = E->store.chunk_size;
	op.npieces = n;
	op.pieces = calloc(n ? n : 1, sizeof(*op.pieces));
	assert_non_null(op.pieces);
	for (uint32_t i = 0; i < n; i++)
		op.pieces[i].crc = piece_crc(data, size, i);
	remember(M.index + 1, data, size);
	assert_int_equal(apply(&op), 0);
}

/*
 * This node's seal of what it has, as gns.c's seal_build and the log's
 * apply make it: 0, or the load's -errno (then the caller reverts).
 */
static int seal_here(void)
{
	struct inode *in = IN();
	struct file *f = &in->file;
	struct nsop op;
	uint32_t n;
	int rc;

	pthread_rwlock_rdlock(&f->lock);
	n = (uint32_t)((f->size + MiB - 1) / MiB);
	pthread_rwlock_unlock(&f->lock);
	if (n && (rc = file_load(E, in, 0, n - 1, NULL)) < 0)
		return rc;
	nsop_init(&op, NSOP_SEAL);
	pthread_rwlock_wrlock(&f->lock);
	assert_true(file_to_seal(E, f));
	file_seal_locked(E, f);
	op.node = SELF;
	op.inc = E->inc;
	op.ino = INO;
	op.version = f->version;
	op.size = f->size;
	op.chunk_size = E->store.chunk_size;
	op.npieces = n;
	op.pieces = calloc(n ? n : 1, sizeof(*op.pieces));
	assert_non_null(op.pieces);
	for (uint32_t i = 0; i < n; i++) {
		const struct slot *s = i < f->nslots ? &f->slots[i] : NULL;

		op.pieces[i].hole = !s || s->where == PIECE_HOLE;
		op.pieces[i].crc = s ? s->crc
				     : crc_zeros(0, file_piece_len(E, f->size,
								    i));
	}
	f->seal_sent = f->version;
	pthread_rwlock_unlock(&f->lock);
	remember(M.index + 1, M.view, M.vsize);
	assert_int_equal(apply(&op), 0);
	return 0;
}

/* What this node shows must be the model's view; a read may fail (EIO)
 * only where the draft's base is gone. */
static void check_view(const char *after)
{
	struct eng_file *fp;
	uint8_t *buf = malloc(MAX_SIZE + MiB);
	ssize_t got;

	assert_non_null(buf);
	assert_int_equal(eng_open(E, INO, O_RDONLY, &fp, NULL), 0);
	got = fx_read(E, fp, buf, MAX_SIZE + MiB, 0);
	eng_release(E, fp);
	if (got == -EIO && M.base_gone) {
		free(buf);
		return;
	}
	if (got != (ssize_t)M.vsize || memcmp(buf, M.view, M.vsize)) {
		print_error("after %s: read %zd bytes, the model shows %llu "
			    "(draft %d, base gone %d)\n",
			    after, got, (unsigned long long)M.vsize, M.draft,
			    M.base_gone);
		fail();
	}
	free(buf);
}

/* Records: no draft here means what it shows is the log's seal. */
static void check_records(const char *after)
{
	struct file *f = F();
	uint32_t off;

	pthread_rwlock_rdlock(&f->lock);
	assert_int_equal(file_draft(E, f), M.draft);
	off = file_seal_off_locked(E, f, "model");
	if (!M.draft) {
		assert_non_null(f->sealed);
		assert_int_equal(f->sealed->index, f->gseal);
		assert_int_equal(f->size, M.gsize);
	}
	pthread_rwlock_unlock(&f->lock);
	if (off) {
		print_error("after %s: %u records off the seal\n", after, off);
		fail();
	}
}

static void set_view(const uint8_t *data, uint64_t size)
{
	M.view = realloc(M.view, size ? size : 1);
	memcpy(M.view, data, size);
	M.vsize = size;
}

static void ev_seal_there(unsigned *rng)
{
	uint64_t size = (uint64_t)rand_r(rng) % MAX_SIZE;
	uint8_t *data = malloc(size ? size : 1);

	fx_fill(data, size, (unsigned)rand_r(rng));
	seal_there(data, size);
	M.group = realloc(M.group, size ? size : 1);
	memcpy(M.group, data, size);
	M.gsize = size;
	if (M.draft)
		M.base_gone = true;
	else
		set_view(data, size);
	free(data);
}

static void ev_write(unsigned *rng)
{
	uint64_t off = (uint64_t)rand_r(rng) % (M.vsize + MiB);
	size_t len = 1 + (size_t)rand_r(rng) % (MiB + 4096);
	uint8_t *data;
	ssize_t got;

	if (off + len > MAX_SIZE)
		return;
	if (!W)
		assert_int_equal(eng_open(E, INO, O_WRONLY, &W, NULL), 0);
	data = malloc(len);
	fx_fill(data, len, (unsigned)rand_r(rng));
	/*
	 * Now and then another node seals while a piece this write needs is
	 * being fetched: with no draft here the write goes on the newer
	 * seal, never EIO.
	 */
	if (rand_r(rng) % 3 == 0)
		S.race = rng;
	got = eng_write(E, W, data, len, (off_t)off);
	S.race = NULL;
	if (got == -EIO && M.base_gone) {
		free(data); /* a piece of the base it needs is gone */
		return;
	}
	assert_int_equal(got, (ssize_t)len);
	if (off + len > M.vsize) {
		M.view = realloc(M.view, off + len);
		memset(M.view + M.vsize, 0, off + len - M.vsize);
		M.vsize = off + len;
	}
	memcpy(M.view + off, data, len);
	M.draft = true;
	free(data);
}

static void ev_close(void)
{
	unsigned before = S.seals;
	int rc;

	if (!W)
		return;
	eng_release(E, W);
	W = NULL;
	/* The last writer's close asks for a seal when there is a draft. */
	assert_int_equal(S.seals - before, M.draft ? 1 : 0);
	if (!M.draft)
		return;
	rc = seal_here();
	if (rc == 0) {
		/* Sealed, later in the log than any other: it wins. */
		M.group = realloc(M.group, M.vsize ? M.vsize : 1);
		memcpy(M.group, M.view, M.vsize);
		M.gsize = M.vsize;
		M.draft = false;
		M.base_gone = false;
		return;
	}
	/* It could not be sealed: only because another node sealed since. */
	assert_true(M.base_gone);
	assert_int_equal(file_revert(E, IN(), rc), 0);
	set_view(M.group, M.gsize);
	M.draft = false;
	M.base_gone = false;
}

/* verify: a flipped record is off the seal; --repair shows it again. */
static void ev_flip(unsigned *rng)
{
	struct file *f = F();
	uint32_t off;

	if (M.draft || W)
		return;
	pthread_rwlock_wrlock(&f->lock);
	if (!f->nslots || f->slots[0].crc_len != file_piece_len(E, f->size, 0)) {
		pthread_rwlock_unlock(&f->lock);
		return;
	}
	f->slots[(unsigned)rand_r(rng) % f->nslots].crc ^= 0x5a;
	pthread_rwlock_unlock(&f->lock);
	pthread_rwlock_rdlock(&f->lock);
	off = file_seal_off_locked(E, f, "flipped");
	pthread_rwlock_unlock(&f->lock);
	assert_int_equal(off, 1);
	assert_int_equal(file_resync(E, IN()), 0);
}

static void test_model(void **state)
{
	const char *env = getenv("SEAL_SEED");
	unsigned seed = env ? (unsigned)strtoul(env, NULL, 0)
			    : (unsigned)time(NULL);
	unsigned steps = getenv("SEAL_STEPS")
				 ? (unsigned)atoi(getenv("SEAL_STEPS"))
				 : 300;
	unsigned rng = seed;
	uint8_t first[100];

	(void)state;
	printf("test_seal: seed %u (SEAL_SEED=%u replays it), %u steps\n",
	       seed, seed, steps);
	fx_dirs(&fx);
	assert_int_equal(fx_start(&fx, 96 * MiB, false, 2), 0);
	E = fx.e;
	INO = fx_put(E, 1, "f", "", 0);
	assert_true(INO != 0);
	/* From here on the engine is node 1 of a group. */
	E->node = SELF;
	E->inc = 5;
	E->gctx = &S;
	E->gops = &stub_ops;
	atomic_store(&E->caught_up, true); /* joined: nothing to wait for */
	assert_int_equal(eng_listen(E, stub_on_event, NULL), 0);
	/* What it shows now is the group's (empty) version: no draft. */
	F()->synced = F()->version;
	fx_fill(first, sizeof(first), seed);
	seal_there(first, sizeof(first));
	M.group = malloc(sizeof(first));
	memcpy(M.group, first, sizeof(first));
	M.gsize = sizeof(first);
	set_view(first, sizeof(first));
	check_view("the first seal");
	for (unsigned step = 0; step < steps; step++) {
		unsigned r = (unsigned)rand_r(&rng) % 100;
		const char *what;

		if (r < 25) {
			what = "another node's seal";
			ev_seal_there(&rng);
		} else if (r < 60) {
			what = "a write";
			ev_write(&rng);
		} else if (r < 80) {
			what = "a close";
			ev_close();
		} else if (r < 90) {
			what = "a flipped record and verify --repair";
			ev_flip(&rng);
		} else {
			what = "nothing";
		}
		if (!W)
			check_records(what);
		/* A read brings pieces in: part of what is tested. */
		if (rand_r(&rng) % 3 == 0)
			check_view(what);
	}
	if (W) {
		ev_close();
		check_records("the last close");
	}
	check_view("the end");
	E->gops = NULL; /* its stop and free are the stub's no-ops anyway */
	fx_cleanup(&fx);
	free(S.data);
	free(M.group);
	free(M.view);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
