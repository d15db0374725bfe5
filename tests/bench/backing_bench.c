/*
 * backing_bench.c - what FUSE passthrough would cost the write side (issue 10, docs/design.md
 * "Caching and mmap"): passthrough reads a file's bytes from a backing file,
 * so the bytes would have to live in one file per reftfs file (in a private
 * tmpfs) instead of the daemon's anonymous arena.  This measures, for one
 * checkpoint-sized file written 1 MiB at a time, the memory the bytes land
 * in:
 *
 *   arena        anonymous memory faulted in beforehand, huge pages asked
 *                for (what the engine's store writes into today)
 *   backing      a new file in a tmpfs mounted huge=always, mapped shared
 *                by the writer and written through the mapping (the daemon
 *                copying a FUSE WRITE into a backing file): its pages are
 *                allocated and zeroed on first touch
 *   backing+pre  the same file fallocate'd first (pages zeroed ahead, off
 *                the write path, as a pool of ready backing files would be)
 *   pwrite       write(2) into a new tmpfs file (what passthrough of the
 *                writes themselves would cost, and what tmpfs itself does)
 *
 * and the read side, read(2) of the backing file into a buffer (what a
 * passthrough read costs: tmpfs's own read) against memcpy out of the
 * arena (the copy the kernel makes from the daemon's reply today).
 *
 * Then the arena's slots mapped onto a backing file, a piece at a time
 * (docs/design.md: store ids and store_ptr kept, each chunk given to a
 * file's piece mapped onto that piece's range of the file's backing file):
 *
 *   slot migrate     a sealed file's chunks moved onto its backing file:
 *                    pwrite of the chunk's bytes to the piece's offset,
 *                    then mmap(MAP_FIXED | MAP_SHARED) of that range over
 *                    the chunk (same bytes, so a reader never sees a gap)
 *   slot read 1st    memcpy out of the slots just mapped (each page
 *                    faulted in: what a read or a checksum pays first)
 *   slot read        the same again, pages mapped
 *   slot move-out    copy on write that keeps the live bytes at their
 *                    offset: the chunk's bytes copied to new anonymous
 *                    memory, mremap'd over the chunk (a reader of the
 *                    chunk sees the same bytes before and after)
 *   slot free        a chunk given back: anonymous memory mapped over it
 *                    again, its range punched out of the backing file
 *   reuse after free the freed chunks written again (faulted and zeroed
 *                    anew, where a chunk of the arena never left)
 *
 * Then a sealed file's copy at seal (engine/pass.c, --passthrough): the
 * arena's bytes (just written, so the source is as the engine's is)
 * copied into a backing file in runs of 8 MiB:
 *
 *   copy to new      pwrite(2) into a new file, as the first copy does
 *   copy over spare  the same into the file just written, whose pages
 *                    exist (a spare backing file reused)
 *   mapped over, 2T  the same through a shared mapping of that file, by
 *                    two threads (what copy_over does: pwrite(2) holds
 *                    the file's inode lock, so two threads writing one
 *                    file run one at a time)
 *
 * usage: backing_bench DIR [GIB] [ROUNDS]   DIR: a tmpfs mounted huge=always
 * (run_backing_bench.sh mounts one).  Prints GB/s per round and the median.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PIECE (1u << 20)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "backing_bench: %s: %s\n", what, strerror(errno));
	exit(1);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Copy @src (one piece) over @dst, @bytes long, a piece at a time. */
static void fill(uint8_t *dst, const uint8_t *src, size_t bytes)
{
	for (size_t off = 0; off < bytes; off += PIECE)
		memcpy(dst + off, src, PIECE);
}

static uint8_t *map_file(int fd, size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		die("mmap of the backing file");
	return p;
}

enum mode {
	ARENA,
	BACKING,
	BACKING_PRE,
	PWRITE,
	READ_ARENA,
	READ_BACKING,
	SLOT_MIGRATE,
	SLOT_READ_FIRST,
	SLOT_READ,
	SLOT_MOVE_OUT,
	SLOT_FREE,
	SLOT_REUSE,
	COPY_NEW,
	COPY_OVER,
	COPY_MAPPED,
	NMODES
};

static const char *const names[] = {
	"arena write",	 "backing write", "backing+pre write",
	"pwrite",	 "arena read",	  "backing read",
	"slot migrate",	 "slot read 1st", "slot read",
	"slot move-out", "slot free",	  "reuse after free",
	"copy to new",	 "copy over spare", "mapped over, 2T",
};

static double one_round(enum mode m, const char *dir, size_t bytes,
			const uint8_t *src, uint8_t *arena, uint8_t *out)
{
	char path[4096];
	double t0 = 0, t1;
	uint8_t *p;
	int fd = -1;

	snprintf(path, sizeof(path), "%s/backing.%d", dir, (int)m);
	if (m != ARENA && m != READ_ARENA) {
		unlink(path);
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0)
			die(path);
	}
	switch (m) {
	case ARENA:
		t0 = now_s();
		fill(arena, src, bytes);
		break;
	case BACKING:
		t0 = now_s();
		/* The daemon would size the file as writes extend it. */
		if (ftruncate(fd, (off_t)bytes) < 0)
			die("ftruncate");
		p = map_file(fd, bytes);
		fill(p, src, bytes);
		munmap(p, bytes);
		break;
	case BACKING_PRE:
		if (fallocate(fd, 0, 0, (off_t)bytes) < 0)
			die("fallocate");
		p = map_file(fd, bytes);
		/* Map the pages in: a pool's files would be mapped already. */
		for (size_t off = 0; off < bytes; off += 4096)
			*(volatile uint8_t *)(p + off);
		t0 = now_s();
		fill(p, src, bytes);
		munmap(p, bytes);
		break;
	case PWRITE:
		t0 = now_s();
		for (size_t off = 0; off < bytes; off += PIECE)
			if (pwrite(fd, src, PIECE, (off_t)off) != PIECE)
				die("pwrite");
		break;
	case READ_ARENA:
		t0 = now_s();
		for (size_t off = 0; off < bytes; off += PIECE)
			memcpy(out, arena + off, PIECE);
		break;
	case READ_BACKING:
		for (size_t off = 0; off < bytes; off += PIECE)
			if (pwrite(fd, src, PIECE, (off_t)off) != PIECE)
				die("pwrite");
		t0 = now_s();
		for (size_t off = 0; off < bytes; off += PIECE)
			if (pread(fd, out, PIECE, (off_t)off) != PIECE)
				die("pread");
		break;
	default: /* the slot modes: slot_round() */
		abort();
	}
	t1 = now_s();
	if (fd >= 0) {
		close(fd);
		unlink(path);
	}
	return (double)bytes / (t1 - t0) / 1e9;
}

#define RUN (8u * PIECE) /* engine/pass.c: PASS_RUN_MAX pieces a pwritev */

struct half {
	uint8_t *dst;
	const uint8_t *src;
	size_t bytes;
};

static void *copy_half(void *arg)
{
	const struct half *h = arg;

	memcpy(h->dst, h->src, h->bytes);
	return NULL;
}

static void pwrite_runs(int fd, const uint8_t *src, size_t bytes)
{
	for (size_t off = 0; off < bytes; off += RUN) {
		size_t n = bytes - off < RUN ? bytes - off : RUN;

		if (pwrite(fd, src + off, n, (off_t)off) != (ssize_t)n)
			die("pwrite");
	}
}

/* The copy-at-seal rounds, from @arena (written just before). */
static void copy_round(const char *dir, size_t bytes, uint8_t *arena,
		       const uint8_t *src, double *gbs)
{
	struct half h[2];
	pthread_t other;
	char path[4096];
	double t0;
	uint8_t *p;
	int fd;

	fill(arena, src, bytes);
	snprintf(path, sizeof(path), "%s/backing.copy", dir);
	unlink(path);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		die(path);
	t0 = now_s();
	pwrite_runs(fd, arena, bytes);
	gbs[COPY_NEW] = (double)bytes / (now_s() - t0) / 1e9;
	t0 = now_s();
	pwrite_runs(fd, arena, bytes);
	gbs[COPY_OVER] = (double)bytes / (now_s() - t0) / 1e9;
	t0 = now_s();
	p = map_file(fd, bytes);
	h[0] = (struct half){ p, arena, bytes / 2 };
	h[1] = (struct half){ p + bytes / 2, arena + bytes / 2,
			      bytes - bytes / 2 };
	if (pthread_create(&other, NULL, copy_half, &h[1]) != 0)
		die("pthread_create");
	copy_half(&h[0]);
	pthread_join(other, NULL);
	munmap(p, bytes);
	gbs[COPY_MAPPED] = (double)bytes / (now_s() - t0) / 1e9;
	close(fd);
	unlink(path);
}

/* Anonymous memory at @p again, huge pages asked, faulted in with @src. */
static void anon_at(uint8_t *p, size_t bytes, const uint8_t *src)
{
	if (mmap(p, bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
		die("mmap of anonymous memory over the slots");
	madvise(p, bytes, MADV_HUGEPAGE);
	fill(p, src, bytes);
}

/* Map each piece of @slots onto its range of @fd, its bytes written first. */
static void migrate(int fd, uint8_t *slots, size_t bytes)
{
	for (size_t off = 0; off < bytes; off += PIECE) {
		if (pwrite(fd, slots + off, PIECE, (off_t)off) != PIECE)
			die("pwrite of a slot");
		if (mmap(slots + off, PIECE, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_FIXED, fd, (off_t)off) == MAP_FAILED)
			die("mmap of a slot onto the backing file");
	}
}

/*
 * The slot rounds, in order, on @slots (anonymous, faulted in, holding
 * @src's pattern); leaves @slots as it found them.
 */
static void slot_round(const char *dir, size_t bytes, const uint8_t *src,
		       uint8_t *slots, uint8_t *out, double *gbs)
{
	char path[4096];
	double t;
	int fd;

	snprintf(path, sizeof(path), "%s/backing.slots", dir);
	unlink(path);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		die(path);
#define TIMED(m, body)                                                       \
	do {                                                                 \
		t = now_s();                                                 \
		body;                                                        \
		gbs[m] = (double)bytes / (now_s() - t) / 1e9;                \
	} while (0)
	TIMED(SLOT_MIGRATE, migrate(fd, slots, bytes));
	TIMED(SLOT_READ_FIRST, for (size_t off = 0; off < bytes; off += PIECE)
				       memcpy(out, slots + off, PIECE));
	TIMED(SLOT_READ, for (size_t off = 0; off < bytes; off += PIECE)
				 memcpy(out, slots + off, PIECE));
	if (memcmp(out, src, PIECE) != 0) {
		fprintf(stderr, "backing_bench: a slot reads wrong bytes\n");
		exit(1);
	}
	TIMED(SLOT_MOVE_OUT, for (size_t off = 0; off < bytes; off += PIECE) {
		uint8_t *tmp = mmap(NULL, PIECE, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (tmp == MAP_FAILED)
			die("mmap of a piece's new memory");
		memcpy(tmp, slots + off, PIECE);
		if (mremap(tmp, PIECE, PIECE, MREMAP_MAYMOVE | MREMAP_FIXED,
			   slots + off) == MAP_FAILED)
			die("mremap over a slot");
	});
	if (memcmp(slots + bytes - PIECE, src, PIECE) != 0) {
		fprintf(stderr, "backing_bench: a moved-out slot reads wrong "
				"bytes\n");
		exit(1);
	}
	anon_at(slots, bytes, src);
	migrate(fd, slots, bytes);
	TIMED(SLOT_FREE, for (size_t off = 0; off < bytes; off += PIECE) {
		if (mmap(slots + off, PIECE, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
			 0) == MAP_FAILED)
			die("mmap of anonymous memory over a slot");
		if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			      (off_t)off, PIECE) < 0)
			die("punching a slot's range out");
	});
	TIMED(SLOT_REUSE, fill(slots, src, bytes));
#undef TIMED
	close(fd);
	unlink(path);
	anon_at(slots, bytes, src);
}

int main(int argc, char **argv)
{
	static double res[NMODES][100];
	size_t bytes;
	int rounds;
	uint8_t *src, *out, *arena, *slots;

	if (argc < 2) {
		fprintf(stderr, "usage: backing_bench DIR [GIB] [ROUNDS]\n");
		return 2;
	}
	bytes = (size_t)(argc > 2 ? atof(argv[2]) : 2.0) * (1u << 30);
	bytes -= bytes % PIECE;
	rounds = argc > 3 ? atoi(argv[3]) : 5;
	if (bytes == 0 || rounds < 1 || rounds > 100) {
		fprintf(stderr, "backing_bench: bad size or rounds\n");
		return 2;
	}
	src = aligned_alloc(4096, PIECE);
	out = aligned_alloc(4096, PIECE);
	if (!src || !out)
		die("malloc");
	for (size_t i = 0; i < PIECE; i++)
		src[i] = (uint8_t)(i * 131 + 7);
	memset(out, 0, PIECE);
	/* The arena as the store makes it: huge pages asked, faulted in. */
	arena = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (arena == MAP_FAILED)
		die("mmap of the arena");
	madvise(arena, bytes, MADV_HUGEPAGE);
	memset(arena, 0, bytes);
	slots = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (slots == MAP_FAILED)
		die("mmap of the slots");
	anon_at(slots, bytes, src);

	printf("backing_bench: %.2f GiB a round, %d rounds, pieces of 1 MiB, "
	       "tmpfs %s\n", (double)bytes / (1u << 30), rounds, argv[1]);
	/* Rounds interleaved, so that the machine's noise hits every mode. */
	for (int i = 0; i < rounds; i++) {
		double gbs[NMODES];

		for (enum mode m = ARENA; m <= READ_BACKING; m++)
			res[m][i] = one_round(m, argv[1], bytes, src, arena,
					      out);
		slot_round(argv[1], bytes, src, slots, out, gbs);
		copy_round(argv[1], bytes, arena, src, gbs);
		for (enum mode m = SLOT_MIGRATE; m < NMODES; m++)
			res[m][i] = gbs[m];
	}
	for (enum mode m = ARENA; m < NMODES; m++) {
		double *r = res[m];

		printf("%-18s", names[m]);
		for (int i = 0; i < rounds; i++)
			printf(" %6.2f", r[i]);
		qsort(r, (size_t)rounds, sizeof(r[0]), cmp_double);
		printf("   median %6.2f GB/s\n", r[rounds / 2]);
		fflush(stdout);
	}
	munmap(arena, bytes);
	munmap(slots, bytes);
	free(src);
	free(out);
	return 0;
}
