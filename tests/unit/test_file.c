/*
 * test_file.c - the data path: writes and reads against a reference
 * buffer, holes, truncation, checksums at seal, copy-on-write, the budget.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <time.h>

#include <cmocka.h>

#include "core_i.h" /* core's copier: a test of core */
#include "erasure.h"
#include "eng_fixture.h"
#include "watchdog.h"

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	fx_dirs(fx);
	if (fx_start(fx, 8 * MiB, false, 2) < 0)
		return -1;
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

static struct eng_file *create(struct eng *e, const char *name, int flags)
{
	struct eng_file *fp;
	struct stat st;

	assert_int_equal(eng_create(e, RFT_ROOT_INO, name, 0644, 0, 0,
				    O_CREAT | flags, &st, &fp, NULL), 0);
	return fp;
}

/* Every piece's CRC after sealing equals the CRC of the bytes it shows. */
static void check_sealed_crcs(struct eng *e, struct eng_file *fp,
			      const uint8_t *ref, uint64_t size)
{
	struct file *f = &fp->inode->file;

	assert_int_equal(file_state(f), ENG_STATE_SEALED);
	assert_int_equal(f->size, size);
	for (uint32_t i = 0; i < f->nslots; i++) {
		uint32_t len = file_piece_len(e, size, i);

		assert_int_equal(f->slots[i].crc_len, len);
		assert_int_equal(f->slots[i].crc,
				 ers_crc32c(0, ref + (uint64_t)i * MiB, len));
	}
}

static void test_random_writes_match_reference(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	const size_t size = 5 * MiB + 333;
	uint8_t *ref = calloc(1, size), *buf = malloc(size), *got = malloc(size);
	struct eng_file *fp = create(e, "rand", O_RDWR);
	uint64_t ino;
	uint32_t x = 7;

	fx_fill(buf, size, 3);
	/* Scattered writes, some crossing chunk edges, leaving holes. */
	for (int i = 0; i < 200; i++) {
		size_t off, len;

		x = x * 1103515245u + 12345u;
		off = (x >> 4) % size;
		x = x * 1103515245u + 12345u;
		len = 1 + (x >> 8) % 300000;
		if (off + len > size)
			len = size - off;
		assert_int_equal(eng_write(e, fp, buf + off, len, (off_t)off),
				 (ssize_t)len);
		memcpy(ref + off, buf + off, len);
	}
	/* Make the size exact and the tail a hole. */
	assert_int_equal(eng_write(e, fp, "", 0, 0), 0);
	{
		struct eng_setattr sa = { .valid = ENG_SET_SIZE, .size = size };
		struct stat st;

		assert_int_equal(eng_setattr(e, 0, fp, &sa, &st), 0);
		assert_int_equal(st.st_size, size);
	}
	assert_int_equal(fx_read(e, fp, got, size, 0), (ssize_t)size);
	assert_memory_equal(got, ref, size);
	/* Odd offsets and lengths, and past the end. */
	assert_int_equal(fx_read(e, fp, got, 1000, MiB - 10), 1000);
	assert_memory_equal(got, ref + MiB - 10, 1000);
	assert_int_equal(fx_read(e, fp, got, 1000, (off_t)size - 10), 10);
	assert_int_equal(fx_read(e, fp, got, 1000, (off_t)size + 10), 0);

	ino = fp->inode->ino;
	eng_release(e, fp);
	assert_int_equal(eng_open(e, ino, O_RDONLY, &fp, NULL), 0);
	check_sealed_crcs(e, fp, ref, size);
	eng_release(e, fp);
	free(ref);
	free(buf);
	free(got);
}

static void test_sequential_crc_is_incremental(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	const size_t size = 3 * MiB + 5;
	uint8_t *ref = malloc(size);
	struct eng_file *fp = create(e, "seq", O_WRONLY);
	struct file *f = &fp->inode->file;
	uint64_t ino = fp->inode->ino;

	fx_fill(ref, size, 9);
	for (size_t off = 0; off < size; off += 4096) {
		size_t n = size - off < 4096 ? size - off : 4096;

		assert_int_equal(eng_write(e, fp, ref + off, n, (off_t)off),
				 (ssize_t)n);
	}
	/* Before the seal the running CRCs already cover everything. */
	for (uint32_t i = 0; i < f->nslots; i++)
		assert_int_equal(f->slots[i].crc_len,
				 file_piece_len(e, size, i));
	eng_release(e, fp);
	assert_int_equal(eng_open(e, ino, O_RDONLY, &fp, NULL), 0);
	check_sealed_crcs(e, fp, ref, size);
	eng_release(e, fp);
	free(ref);
}

static void test_holes_and_truncate(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	struct eng_file *fp = create(e, "sparse", O_RDWR);
	struct eng_setattr sa = { .valid = ENG_SET_SIZE };
	uint8_t got[64], zero[64] = { 0 };
	struct statvfs before, after;
	struct stat st;

	assert_int_equal(eng_statfs(e, &before), 0);
	/* A huge sparse size allocates nothing. */
	sa.size = 100ULL << 30;
	assert_int_equal(eng_setattr(e, 0, fp, &sa, &st), 0);
	assert_int_equal(st.st_size, 100ULL << 30);
	assert_int_equal(eng_statfs(e, &after), 0);
	assert_int_equal(before.f_bfree, after.f_bfree);
	assert_int_equal(fx_read(e, fp, got, 64, 50LL << 30), 64);
	assert_memory_equal(got, zero, 64);
	sa.size = RFT_MAX_FILE_SIZE + 1;
	assert_int_equal(eng_setattr(e, 0, fp, &sa, &st), -EFBIG);
	assert_int_equal(eng_write(e, fp, "x", 1, (off_t)RFT_MAX_FILE_SIZE),
			 -EFBIG);

	/* Shrink into a written piece, grow again: the cut bytes are zero. */
	sa.size = 0;
	assert_int_equal(eng_setattr(e, 0, fp, &sa, &st), 0);
	assert_int_equal(eng_write(e, fp, "abcdefgh", 8, 100), 8);
	sa.size = 103;
	assert_int_equal(eng_setattr(e, 0, fp, &sa, &st), 0);
	sa.size = 200;
	assert_int_equal(eng_setattr(e, 0, fp, &sa, &st), 0);
	assert_int_equal(fx_read(e, fp, got, 64, 96), 64);
	assert_memory_equal(got, "\0\0\0\0abc\0\0", 10);
	assert_memory_equal(got + 7, zero, 57);
	eng_release(e, fp);
}

static void test_append_and_trunc_open(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	struct eng_file *fp = create(e, "log", O_WRONLY | O_APPEND);
	uint64_t ino = fp->inode->ino;
	char got[16];

	assert_int_equal(eng_write(e, fp, "abc", 3, 0), 3);
	assert_int_equal(eng_write(e, fp, "def", 3, 0), 3); /* offset ignored */
	eng_release(e, fp);
	assert_int_equal(eng_open(e, ino, O_RDONLY, &fp, NULL), 0);
	assert_int_equal(fx_read(e, fp, got, sizeof(got), 0), 6);
	assert_memory_equal(got, "abcdef", 6);
	eng_release(e, fp);
	assert_int_equal(eng_open(e, ino, O_WRONLY | O_TRUNC, &fp, NULL), 0);
	assert_int_equal(fp->inode->file.size, 0);
	assert_int_equal(fp->inode->file.resident, 0);
	eng_release(e, fp);
}

static void test_copy_on_write(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	struct eng_file *fp = create(e, "cow", O_RDWR);
	struct file *f = &fp->inode->file;
	uint32_t old;

	assert_int_equal(eng_write(e, fp, "before", 6, 0), 6);
	old = f->slots[0].chunk;
	store_get(&e->store, old); /* as a write-back in flight would */
	assert_int_equal(eng_write(e, fp, "AFTER!", 6, 0), 6);
	assert_int_not_equal(f->slots[0].chunk, old);
	assert_memory_equal(store_ptr(&e->store, old), "before", 6);
	assert_memory_equal(store_ptr(&e->store, f->slots[0].chunk), "AFTER!", 6);
	store_put(&e->store, old);
	eng_release(e, fp);
}

/*
 * A small file takes a block that fits and moves to bigger ones, copied, as
 * it grows (also while a write-back pins its block: the pinned bytes stay),
 * until it needs a second piece: then its first piece is a whole chunk.
 */
static void test_small_file_grows(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	struct eng_file *fp = create(e, "grow", O_RDWR);
	struct file *f = &fp->inode->file;
	static uint8_t ref[2 * MiB], got[2 * MiB];
	uint32_t pinned, old, old_cap;
	uint64_t size = 0;
	const uint32_t ends[] = { 100, 4096, 4097, 70000, 300000, 524288,
				  524289, MiB + 5 };

	for (uint32_t i = 0; i < sizeof(ref); i++)
		ref[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(eng_write(e, fp, ref, 10, 0), 10);
	assert_true(f->slots[0].chunk & STORE_SMALL);
	assert_int_equal(store_cap(&e->store, f->slots[0].chunk), 4096);
	pinned = f->slots[0].chunk;
	store_get(&e->store, pinned); /* as a write-back in flight would */
	size = 10;
	for (unsigned k = 0; k < sizeof(ends) / sizeof(ends[0]); k++) {
		old = f->slots[0].chunk;
		old_cap = store_cap(&e->store, old); /* while it is held */
		assert_int_equal(eng_write(e, fp, ref + size, ends[k] - size,
					   (off_t)size),
				 (ssize_t)(ends[k] - size));
		size = ends[k];
		if (size <= e->store.small_max) {
			/* The smallest block that holds it. */
			assert_true(f->slots[0].chunk & STORE_SMALL);
			assert_true(store_cap(&e->store, f->slots[0].chunk) >=
				    size);
			assert_true(store_cap(&e->store, f->slots[0].chunk) <
				    2 * (size < 4096 ? 4096 : size));
		} else {
			assert_false(f->slots[0].chunk & STORE_SMALL);
			if (f->nslots > 1)
				assert_false(f->slots[1].chunk & STORE_SMALL);
		}
		/* Copied only to grow or off the pinned block. */
		if (old != pinned && old_cap >= (size < MiB ? size : MiB))
			assert_int_equal(f->slots[0].chunk, old);
		else
			assert_int_not_equal(f->slots[0].chunk, old);
		assert_int_equal(fx_read(e, fp, got, size, 0), (ssize_t)size);
		assert_memory_equal(got, ref, size);
	}
	/* The write-back's bytes are the ones it pinned. */
	assert_memory_equal(store_ptr(&e->store, pinned), ref, 10);
	store_put(&e->store, pinned);
	/* Truncated back into one piece: still a whole chunk, still right. */
	{
		struct eng_setattr sa = { .valid = ENG_SET_SIZE, .size = 3000 };
		struct stat st;
		uint64_t ino = fp->inode->ino;

		assert_int_equal(eng_setattr(e, 0, fp, &sa, &st), 0);
		assert_int_equal(fx_read(e, fp, got, 3000, 0), 3000);
		assert_memory_equal(got, ref, 3000);
		eng_release(e, fp);
		assert_int_equal(eng_open(e, ino, O_RDONLY, &fp, NULL), 0);
		check_sealed_crcs(e, fp, ref, 3000);
		eng_release(e, fp);
	}
}

/*
 * A write that needs two chunks while one is free, with nothing to evict:
 * it waits --enospc-wait for the second and then writes what fits.  It
 * used to spin for ever: the wait came back at once while any chunk was
 * free, and the deadline was never looked at.
 */
static void test_enospc_wait_for_enough(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	uint8_t *buf = malloc(2 * MiB);
	struct eng_file *hog = create(e, "hog7", O_WRONLY);
	struct eng_file *fp = create(e, "two", O_WRONLY);
	struct timespec t0, t1;
	struct watchdog wd;
	ssize_t n;
	double ms;

	assert_non_null(buf);
	memset(buf, 0x3c, 2 * MiB);
	for (int i = 0; i < 7; i++)
		assert_int_equal(eng_write(e, hog, buf, MiB, (off_t)i * MiB),
				 (ssize_t)MiB);
	wd_arm(&wd, "test_enospc_wait_for_enough", 30, NULL, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* [0.5 MiB, 2.5 MiB) touches chunks 0, 1 and 2: three needed. */
	n = eng_write(e, fp, buf, 2 * MiB, MiB / 2);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	wd_disarm(&wd);
	ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
	     (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	/* The one free chunk holds the write's first half MiB. */
	assert_int_equal(n, (ssize_t)(MiB / 2));
	assert_true(ms >= 90.0); /* it waited (--enospc-wait 100 ms) */
	eng_release(e, fp);
	eng_release(e, hog);
	free(buf);
}

static void test_budget_enospc_and_recovery(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	uint8_t *buf = malloc(MiB);
	struct eng_file *fp = create(e, "hog", O_WRONLY);
	uint64_t ino = fp->inode->ino;
	struct eng_stats s;
	ssize_t n = 0;
	off_t off = 0;

	memset(buf, 0xab, MiB);
	/* 8 chunks: the ninth MiB cannot be had. */
	while ((n = eng_write(e, fp, buf, MiB, off)) > 0)
		off += n;
	assert_int_equal(n, -ENOSPC);
	assert_int_equal(off, 8 * MiB);
	eng_get_stats(e, &s);
	assert_true(s.enospc >= 1);
	assert_int_equal(s.chunks_used, 8);
	eng_release(e, fp);

	assert_int_equal(eng_unlink(e, RFT_ROOT_INO, "hog"), 0);
	eng_forget(e, ino, 1); /* the create's lookup */
	eng_get_stats(e, &s);
	assert_int_equal(s.chunks_used, 0);
	fp = create(e, "again", O_WRONLY);
	assert_int_equal(eng_write(e, fp, buf, MiB, 0), MiB);
	eng_release(e, fp);
	free(buf);
}

/* Chunks in use, from the engine's own count. */
static uint64_t chunks_used(struct eng *e)
{
	struct eng_stats s;

	eng_get_stats(e, &s);
	return s.chunks_used;
}

/*
 * fallocate without flags: memory for every piece now, the size grows, the
 * range reads zeros, and later writes there need no more memory; with
 * KEEP_SIZE the same without the size.
 */
static void test_fallocate_reserves(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	struct eng_file *fp = create(e, "pre", O_RDWR);
	struct eng_file *hog;
	uint8_t *buf = malloc(3 * MiB), zero[4096] = { 0 };
	struct stat st;

	assert_non_null(buf);
	memset(buf, 0x5a, 3 * MiB);
	/* [0.5 MiB, 2.5 MiB): pieces 0, 1, 2. */
	assert_int_equal(eng_fallocate(e, fp, 0, MiB / 2, 2 * MiB), 0);
	assert_int_equal(fp->inode->file.size, MiB / 2 + 2 * MiB);
	assert_int_equal(chunks_used(e), 3);
	assert_int_equal(fx_read(e, fp, buf, 4096, MiB), 4096);
	assert_memory_equal(buf, zero, 4096);

	/* KEEP_SIZE past the end: two more pieces, same size. */
	assert_int_equal(eng_fallocate(e, fp, ENG_FALLOC_KEEP_SIZE, 3 * MiB,
				       2 * MiB),
			 0);
	assert_int_equal(fp->inode->file.size, MiB / 2 + 2 * MiB);
	assert_int_equal(chunks_used(e), 5);

	/* The other 3 chunks go to another file: memory is full. */
	hog = create(e, "hog", O_WRONLY);
	memset(buf, 0x5a, 3 * MiB);
	assert_int_equal(eng_write(e, hog, buf, 3 * MiB, 0), 3 * MiB);
	assert_int_equal(chunks_used(e), 8);

	/* Writes into what was reserved still succeed, with no wait. */
	assert_int_equal(eng_write(e, fp, buf, 3 * MiB, 0), 3 * MiB);
	assert_int_equal(eng_write(e, fp, buf, 2 * MiB, 3 * MiB), 2 * MiB);
	assert_int_equal(fp->inode->file.size, 5 * MiB);
	assert_int_equal(chunks_used(e), 8);
	assert_int_equal(eng_getattr(e, fp->inode->ino, &st), 0);
	assert_int_equal(st.st_size, 5 * MiB);
	eng_release(e, hog);
	eng_release(e, fp);
	free(buf);
}

/* More than is free: -ENOSPC after the wait, and nothing changed. */
static void test_fallocate_enospc(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	struct eng_file *fp = create(e, "big", O_RDWR);
	uint64_t ino = fp->inode->ino, used;

	assert_int_equal(eng_write(e, fp, "abc", 3, 0), 3);
	used = chunks_used(e);
	/* 9 pieces with 7 chunks free: after the wait; 100 at once. */
	assert_int_equal(eng_fallocate(e, fp, 0, 2 * MiB, 9 * MiB), -ENOSPC);
	assert_int_equal(eng_fallocate(e, fp, 0, 0, 100 * MiB), -ENOSPC);
	assert_int_equal(fp->inode->file.size, 3);
	assert_int_equal(chunks_used(e), used);
	/* Bad arguments and flags. */
	assert_int_equal(eng_fallocate(e, fp, 0, -1, 10), -EINVAL);
	assert_int_equal(eng_fallocate(e, fp, 0, 0, 0), -EINVAL);
	assert_int_equal(eng_fallocate(e, fp, ENG_FALLOC_PUNCH_HOLE, 0, 10),
			 -EOPNOTSUPP);
	assert_int_equal(eng_fallocate(e, fp, 1u << 7, 0, 10), -EOPNOTSUPP);
	assert_int_equal(eng_fallocate(e, fp, 0, (off_t)RFT_MAX_FILE_SIZE, 1),
			 -EFBIG);
	eng_release(e, fp);
	assert_int_equal(eng_open(e, ino, O_RDONLY, &fp, NULL), 0);
	assert_int_equal(eng_fallocate(e, fp, 0, 0, 10), -EBADF);
	eng_release(e, fp);
}

/*
 * Punching: pieces covered whole become holes and give their chunks back,
 * the edges are zeroed in place, bytes outside the range stay, the size
 * stays, and the checksums at seal are those of what the file shows.
 */
static void test_fallocate_punch(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	struct eng_file *fp = create(e, "holey", O_RDWR);
	uint64_t ino = fp->inode->ino, size = 4 * MiB + 1000;
	uint8_t *ref = malloc(size), *got = malloc(size);
	uint32_t old;

	assert_non_null(ref);
	assert_non_null(got);
	for (uint64_t i = 0; i < size; i++)
		ref[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(eng_write(e, fp, ref, size, 0), (ssize_t)size);
	assert_int_equal(chunks_used(e), 5);

	/* [0.5 MiB, 3.25 MiB): pieces 1 and 2 whole, 0 and 3 in part. */
	old = fp->inode->file.slots[3].chunk;
	store_get(&e->store, old); /* a write-back holds piece 3 */
	assert_int_equal(eng_fallocate(e, fp,
				       ENG_FALLOC_PUNCH_HOLE |
					       ENG_FALLOC_KEEP_SIZE,
				       MiB / 2, 3 * MiB - MiB / 2 + MiB / 4),
			 0);
	memset(ref + MiB / 2, 0, 3 * MiB - MiB / 2 + MiB / 4);
	assert_int_equal(fp->inode->file.size, size);
	assert_int_equal(fp->inode->file.slots[1].where, PIECE_HOLE);
	assert_int_equal(fp->inode->file.slots[2].where, PIECE_HOLE);
	/* Piece 3 was copied, not zeroed under the write-back's feet. */
	assert_int_not_equal(fp->inode->file.slots[3].chunk, old);
	assert_int_equal(store_ptr(&e->store, old)[0], (uint8_t)(3 * MiB * 7 + 3));
	store_put(&e->store, old);
	assert_int_equal(chunks_used(e), 3);
	assert_int_equal(fx_read(e, fp, got, size, 0), (ssize_t)size);
	assert_memory_equal(got, ref, size);

	/* Past the end: nothing to zero, nothing changes. */
	assert_int_equal(eng_fallocate(e, fp,
				       ENG_FALLOC_PUNCH_HOLE |
					       ENG_FALLOC_KEEP_SIZE,
				       size + 10, MiB),
			 0);
	/* The tail piece to its end, and beyond: it empties. */
	assert_int_equal(eng_fallocate(e, fp,
				       ENG_FALLOC_PUNCH_HOLE |
					       ENG_FALLOC_KEEP_SIZE,
				       4 * MiB, 2 * MiB),
			 0);
	memset(ref + 4 * MiB, 0, 1000);
	assert_int_equal(fp->inode->file.size, size);
	assert_int_equal(chunks_used(e), 2);
	eng_release(e, fp); /* seals */
	assert_int_equal(eng_open(e, ino, O_RDONLY, &fp, NULL), 0);
	check_sealed_crcs(e, fp, ref, size);
	eng_release(e, fp);
	free(ref);
	free(got);
}

static _Atomic int done_calls;

static void count_done(void *ctx)
{
	free(ctx); /* the buffer the write came in: now no longer needed */
	atomic_fetch_add(&done_calls, 1);
}

/*
 * Queued writes land in the order they were accepted, reads see every
 * accepted write, and running out of memory is reported at once.
 */
static void test_async_writes(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	const size_t size = 3 * MiB;
	uint8_t *ref = calloc(1, size), *got = malloc(size);
	struct eng_file *fp = create(e, "async", O_RDWR);
	int queued_n = 0;
	uint32_t x = 99;

	atomic_store(&done_calls, 0);
	for (int i = 0; i < 300; i++) {
		size_t off, len;
		uint8_t *b;
		bool queued;
		ssize_t n;

		x = x * 1103515245u + 12345u;
		off = (x >> 4) % size;
		x = x * 1103515245u + 12345u;
		len = 1 + (x >> 8) % 200000;
		if (off + len > size)
			len = size - off;
		b = malloc(len);
		memset(b, i & 0xff, len); /* later writes overwrite earlier */
		/* Before the call: once queued, b is the copier's to free. */
		memcpy(ref + off, b, len);
		n = eng_write_async(e, fp, b, len, (off_t)off, count_done, b,
				    &queued);
		assert_int_equal(n, (ssize_t)len);
		if (queued)
			queued_n++;
		else
			free(b);
		/* Every so often read right behind the writes. */
		if (i % 50 == 49) {
			assert_int_equal(fx_read(e, fp, got, size, 0),
					 (ssize_t)fp->inode->file.size);
			assert_memory_equal(got, ref, fp->inode->file.size);
		}
	}
	assert_true(queued_n > 0);
	assert_int_equal(fx_read(e, fp, got, size, 0),
			 (ssize_t)fp->inode->file.size);
	assert_memory_equal(got, ref, fp->inode->file.size);
	assert_int_equal(eng_flush(e, fp), 0);
	assert_int_equal(atomic_load(&done_calls), queued_n);
	/* A FLUSH is any close(); only the last RELEASE seals. */
	assert_int_equal(file_state(&fp->inode->file), ENG_STATE_WRITING);
	{
		struct file *f = &fp->inode->file;

		eng_release(e, fp);
		assert_int_equal(file_state(f), ENG_STATE_SEALED);
	}

	/* The budget (8 chunks, 3 used) runs out synchronously. */
	fp = create(e, "async2", O_WRONLY);
	{
		uint8_t *b = malloc(MiB);
		bool queued;
		ssize_t n;
		off_t off = 0;

		memset(b, 1, MiB);
		while ((n = eng_write_async(e, fp, b, MiB, off, count_done,
					    NULL, &queued)) > 0)
			off += n;
		assert_int_equal(n, -ENOSPC);
		assert_int_equal(off, 5 * MiB);
		eng_release(e, fp); /* waits for the queued copies */
		free(b);
	}
	free(ref);
	free(got);
}

/*
 * Holds the copier's one worker until copier_stop has begun (its queue
 * refuses items), so that every write queued behind it is still queued
 * when the stop comes.
 */
struct plug {
	struct rft_wq_item w;
	struct rft_wq *wq;
};

static void tick_fn(struct rft_wq_item *w, bool cancel)
{
	(void)cancel;
	free(w);
}

static void plug_fn(struct rft_wq_item *w, bool cancel)
{
	struct plug *pl = (struct plug *)w;
	const struct timespec ms = { 0, 1000000 };

	(void)cancel;
	for (;;) {
		struct rft_wq_item *t = calloc(1, sizeof(*t));

		assert_non_null(t);
		t->fn = tick_fn;
		if (rft_wq_queue(pl->wq, t, RFT_WQ_HIGH) < 0) {
			free(t);
			break;
		}
		nanosleep(&ms, NULL);
	}
}

/*
 * copier_stop lands every queued copy, in the order queued (RFT_WQ_DRAIN
 * on one worker): overlapping writes, all queued behind a plug, read back
 * as the last of them wrote.  And file_range_queued sees them meanwhile.
 */
static void test_async_writes_drain(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	const size_t size = MiB, len = 64 * 1024;
	uint8_t *ref = calloc(1, size), *got = malloc(size);
	struct eng_file *fp = create(e, "drain", O_RDWR);
	struct file *f = &fp->inode->file;
	struct plug pl = { .w.fn = plug_fn, .wq = e->io->copier.wq };
	int queued_n = 0;

	atomic_store(&done_calls, 0);
	assert_int_equal(rft_wq_queue(e->io->copier.wq, &pl.w, RFT_WQ_HIGH), 0);
	for (int i = 0; i < 64; i++) {
		/* Half overlapping the one before: order shows. */
		size_t off = (size_t)i * len / 2 % (size - len);
		uint8_t *b = malloc(len);
		bool queued;

		memset(b, i + 1, len);
		memcpy(ref + off, b, len);
		assert_int_equal(eng_write_async(e, fp, b, len, (off_t)off,
						 count_done, b, &queued),
				 (ssize_t)len);
		assert_true(queued);
		queued_n++;
	}
	file_rdlock(f);
	assert_true(file_range_queued(e, f, 0, 1));
	assert_false(file_range_queued(e, f, size - len / 2 + 1, size));
	file_unlock(f);
	assert_int_equal(atomic_load(&f->pending), queued_n);

	copier_stop(e);
	assert_int_equal(atomic_load(&done_calls), queued_n);
	assert_int_equal(atomic_load(&f->pending), 0);
	assert_null(f->wjobs);
	assert_int_equal(fx_read(e, fp, got, size, 0), (ssize_t)f->size);
	assert_memory_equal(got, ref, f->size);
	eng_release(e, fp);
	free(ref);
	free(got);
}

/* crc_zeros() against the CRC of real zeros, and fast for huge holes. */
static void test_crc_zeros(void **state)
{
	uint8_t *z = calloc(1, 3 * MiB + 1);
	const uint64_t lens[] = { 0, 1, 7, 4096, 65535, 65536, 65537, MiB - 1,
				  MiB, MiB + 3, 3 * MiB + 1 };
	struct timespec t0, t1;
	uint32_t big;

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
		for (uint32_t seed = 0; seed < 3; seed++) {
			uint32_t c = seed * 0x9e3779b9u;

			assert_int_equal(crc_zeros(c, lens[i]),
					 ers_crc32c(c, z, lens[i]));
		}
	/* 1 TiB: split in two must agree, and take well under a second. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	big = crc_zeros(0, 1ULL << 40);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_int_equal(big, crc_zeros(crc_zeros(0, (1ULL << 39) + 12345),
					(1ULL << 39) - 12345));
	assert_true((t1.tv_sec - t0.tv_sec) * 1000000000L +
			    (t1.tv_nsec - t0.tv_nsec) <
		    100 * 1000000L);
	free(z);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc_zeros),
		cmocka_unit_test_setup_teardown(
			test_random_writes_match_reference, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_sequential_crc_is_incremental, setup, teardown),
		cmocka_unit_test_setup_teardown(test_holes_and_truncate, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_append_and_trunc_open,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_small_file_grows, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_copy_on_write, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_budget_enospc_and_recovery, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_enospc_wait_for_enough, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fallocate_reserves, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_fallocate_enospc, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_fallocate_punch, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_async_writes, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_async_writes_drain, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
