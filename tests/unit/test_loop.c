/*
 * test_loop.c - fs/loop.c: how big its receive buffers are, and that the
 * count of every read of the device is the loop's own, never the size
 * libfuse keeps privately.
 *
 * Why: the loop used to call fuse_session_receive_buf(), which reads
 * se->bufsize bytes into whatever buffer it is handed.  Its buffers were
 * 256 pages + 4 KiB because that is what libfuse 3.14 reads; libfuse 3.17
 * reads up to the kernel's max_pages_limit (a sysctl, up to 65535 pages)
 * until INIT is answered, and the kernel fills a read of FORGETs up to its
 * count, so such a library would write past the buffer.  Both tests fail
 * on that loop: the first because 256 pages do not hold a 4 MiB max_write
 * (which 3.17 on Linux 6.13+ negotiates), the second because the library's
 * read was called.
 *
 * The second test serves a session over a socketpair standing for
 * /dev/fuse (fuse_session_custom_io(), libfuse 3.13+): the test thread
 * plays the kernel, sending INIT and a WRITE as large as max_write.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

#include "rfs.h"

/* --- sizes ---------------------------------------------------------- */

/* struct fuse_in_header + struct fuse_write_in (protocol 7.9 and later). */
#define WRITE_HEADERS 80
/* The kernel's FUSE_MIN_READ_BUFFER: a shorter read fails with EINVAL. */
#define KERNEL_MIN_READ 8192

static void test_bufsize_holds_max_write(void **state)
{
	/* From tiny to the kernel's limit of 65535 pages of 4 KiB. */
	static const unsigned mw[] = {
		0, 4096, 65536, 128 << 10, (1 << 20) - 1, 1 << 20,
		(1 << 20) + 1, 4 << 20, 16 << 20, 65535u * 4096,
	};

	for (size_t i = 0; i < sizeof(mw) / sizeof(mw[0]); i++) {
		size_t size = rfs_loop_bufsize(mw[i]);

		/* The largest WRITE fits, with its headers. */
		assert_true(size >= (size_t)mw[i] + WRITE_HEADERS);
		/* And the kernel accepts the read at all. */
		assert_true(size >= KERNEL_MIN_READ);
		/* No more than a page over what is needed. */
		assert_true(size <= (size_t)mw[i] + 4096 ||
			    size == KERNEL_MIN_READ);
	}
}

/* --- a loop over a fake device --------------------------------------- */

#if FUSE_VERSION >= FUSE_MAKE_VERSION(3, 13)

#define OP_WRITE 16
#define OP_INIT 26
#define INIT_BIG_WRITES (1u << 5)
#define INIT_MAX_PAGES (1u << 22)
#define TEST_MAX_WRITE (128u << 10)
#define TEST_UNIQUE 7

/* Protocol structures, as in linux/fuse.h (not installed by libfuse). */
struct k_in_header {
	uint32_t len, opcode;
	uint64_t unique, nodeid;
	uint32_t uid, gid, pid;
	uint16_t total_extlen, padding;
};

struct k_init_in {
	uint32_t major, minor, max_readahead, flags, flags2, unused[11];
};

struct k_write_in {
	uint64_t fh, offset;
	uint32_t size, write_flags;
	uint64_t lock_owner;
	uint32_t flags, padding;
};

struct k_out_header {
	uint32_t len;
	int32_t error;
	uint64_t unique;
};

struct k_init_out {
	uint32_t major, minor, max_readahead, flags;
	uint16_t max_background, congestion_threshold;
	uint32_t max_write;
};

struct fake {
	struct fuse_session *se;
	int lib_reads;		/* reads libfuse made itself */
	size_t write_size;	/* what the WRITE handler got */
	bool write_in_pool;	/* its data lay in a loop buffer */
	bool write_data_ok;
	int rc;			/* rfs_loop_run()'s */
};

static struct fake fake;

static uint8_t pattern(size_t i)
{
	return (uint8_t)(i * 7 + 3);
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *ud)
{
	return writev(fd, iov, count);
}

/* libfuse reads through this only when it chooses the count itself. */
static ssize_t io_read(int fd, void *buf, size_t len, void *ud)
{
	__atomic_add_fetch(&fake.lib_reads, 1, __ATOMIC_SEQ_CST);
	return read(fd, buf, len);
}

static void fake_init(void *ud, struct fuse_conn_info *conn)
{
	conn->max_write = TEST_MAX_WRITE;
	conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE |
			FUSE_CAP_SPLICE_MOVE);
}

static void fake_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		       size_t size, off_t off, struct fuse_file_info *fi)
{
	bool ok = true;

	for (size_t i = 0; i < size; i++)
		ok = ok && (uint8_t)buf[i] == pattern(i);
	fake.write_size = size;
	fake.write_in_pool = rfs_loop_buffer(buf, size) != NULL;
	fake.write_data_ok = ok;
	fuse_reply_write(req, size);
}

static const struct fuse_lowlevel_ops fake_ops = {
	.init = fake_init,
	.write = fake_write,
};

static void *run_loop(void *arg)
{
	fake.rc = rfs_loop_run(fake.se, 4, TEST_MAX_WRITE);
	return NULL;
}

/* Send one request made of a header and @len bytes of @arg. */
static void send_req(int fd, uint32_t opcode, const void *arg, size_t len,
		     const void *data, size_t dlen)
{
	struct k_in_header h = {
		.len = (uint32_t)(sizeof(h) + len + dlen),
		.opcode = opcode,
		.unique = TEST_UNIQUE,
		.nodeid = 1,
	};
	struct iovec iov[3] = {
		{ &h, sizeof(h) },
		{ (void *)arg, len },
		{ (void *)data, dlen },
	};

	assert_int_equal(writev(fd, iov, 3), (ssize_t)h.len);
}

static void test_loop_reads_with_its_own_count(void **state)
{
	static const struct fuse_custom_io io = {
		.writev = io_writev,
		.read = io_read,
	};
	char *argv[] = { "test_loop", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(1, argv);
	struct k_init_in init = {
		.major = 7,
		.minor = 31,
		.max_readahead = 1 << 20,
		.flags = INIT_BIG_WRITES | INIT_MAX_PAGES,
	};
	struct k_write_in wr = { .fh = 1, .size = TEST_MAX_WRITE };
	uint8_t reply[256], *data = malloc(TEST_MAX_WRITE);
	struct k_out_header *oh = (struct k_out_header *)reply;
	struct k_init_out *io_out = (struct k_init_out *)(oh + 1);
	int sv[2], sndbuf = 1 << 20;
	pthread_t th;

	assert_non_null(data);
	for (size_t i = 0; i < TEST_MAX_WRITE; i++)
		data[i] = pattern(i);
	memset(&fake, 0, sizeof(fake));
	/* Message boundaries, like /dev/fuse: one read, one request. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	/* Room for a WRITE of max_write; capped by net.core.wmem_max. */
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	fake.se = fuse_session_new(&args, &fake_ops, sizeof(fake_ops), NULL);
	assert_non_null(fake.se);
	assert_int_equal(fuse_session_custom_io(fake.se, &io, sv[0]), 0);
	assert_int_equal(pthread_create(&th, NULL, run_loop, NULL), 0);

	send_req(sv[1], OP_INIT, &init, sizeof(init), NULL, 0);
	assert_true(read(sv[1], reply, sizeof(reply)) >=
		    (ssize_t)(sizeof(*oh) + sizeof(*io_out)));
	assert_int_equal(oh->error, 0);
	assert_int_equal(io_out->max_write, TEST_MAX_WRITE);

	/* The largest request this connection can carry. */
	send_req(sv[1], OP_WRITE, &wr, sizeof(wr), data, TEST_MAX_WRITE);
	assert_true(read(sv[1], reply, sizeof(reply)) >=
		    (ssize_t)(sizeof(*oh) + 8));
	assert_int_equal(oh->error, 0);
	assert_int_equal(oh->unique, TEST_UNIQUE);
	assert_int_equal(*(uint32_t *)(oh + 1), TEST_MAX_WRITE);
	assert_int_equal(fake.write_size, TEST_MAX_WRITE);
	assert_true(fake.write_data_ok);
	/* Served from the pool: the zero-copy write path can keep it. */
	assert_true(fake.write_in_pool);

	/* Workers blocked in read() see end of file, then the exit. */
	fuse_session_exit(fake.se);
	shutdown(sv[1], SHUT_RDWR);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(fake.rc, 0);
	/* Every read was the loop's, with its buffer's size as the count. */
	assert_int_equal(fake.lib_reads, 0);

	fuse_session_destroy(fake.se); /* closes sv[0] */
	fuse_opt_free_args(&args);
	close(sv[1]);
	free(data);
}

#else

static void test_loop_reads_with_its_own_count(void **state)
{
	/* fuse_session_custom_io() came with libfuse 3.13. */
	skip();
}

#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bufsize_holds_max_write),
		cmocka_unit_test(test_loop_reads_with_its_own_count),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
