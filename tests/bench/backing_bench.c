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
 * usage: backing_bench DIR [GIB] [ROUNDS]   DIR: a tmpfs mounted huge=always
 * (run_backing_bench.sh mounts one).  Prints GB/s per round and the median.
 */
#include <errno.h>
#include <fcntl.h>
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

enum mode { ARENA, BACKING, BACKING_PRE, PWRITE, READ_ARENA, READ_BACKING };

static const char *const names[] = { "arena write", "backing write",
				     "backing+pre write", "pwrite",
				     "arena read", "backing read" };

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
	}
	t1 = now_s();
	if (fd >= 0) {
		close(fd);
		unlink(path);
	}
	return (double)bytes / (t1 - t0) / 1e9;
}

int main(int argc, char **argv)
{
	static double res[READ_BACKING + 1][100];
	size_t bytes;
	int rounds;
	uint8_t *src, *out, *arena;

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

	printf("backing_bench: %.2f GiB a round, %d rounds, pieces of 1 MiB, "
	       "tmpfs %s\n", (double)bytes / (1u << 30), rounds, argv[1]);
	/* Rounds interleaved, so that the machine's noise hits every mode. */
	for (int i = 0; i < rounds; i++)
		for (enum mode m = ARENA; m <= READ_BACKING; m++)
			res[m][i] = one_round(m, argv[1], bytes, src, arena,
					      out);
	for (enum mode m = ARENA; m <= READ_BACKING; m++) {
		double *r = res[m];

		printf("%-18s", names[m]);
		for (int i = 0; i < rounds; i++)
			printf(" %6.2f", r[i]);
		qsort(r, (size_t)rounds, sizeof(r[0]), cmp_double);
		printf("   median %6.2f GB/s\n", r[rounds / 2]);
		fflush(stdout);
	}
	munmap(arena, bytes);
	free(src);
	free(out);
	return 0;
}
