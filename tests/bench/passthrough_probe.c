/*
 * passthrough_probe.c - FUSE passthrough on this kernel, before reftfs
 * builds on it (issue 10; docs/design.md, "Caching and mmap"): a file
 * system of one read-only file, "data", whose opens hand the kernel a
 * backing file (fuse_passthrough_open), so reads and mappings of it never
 * reach this daemon.  run_passthrough_probe.sh compares reads through it
 * with reads of the backing file and of a default tmpfs.
 *
 * usage: passthrough_probe MOUNTPOINT BACKING_FILE [mix]
 *   mix: every other open is direct I/O instead (served here by splice),
 *        to see what the kernel does with both kinds on one inode.
 * Runs in the foreground until unmounted.  Built against libfuse 3.18+
 * (the bundled one) by run_passthrough_probe.sh, not by meson.
 */
#define FUSE_USE_VERSION 318
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATA_INO 2

static int backing_fd = -1;
static off_t backing_size;
static bool mix;
static atomic_uint opens;

static void attr_of(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = backing_size;
	}
}

static void probe_init(void *ud, struct fuse_conn_info *conn)
{
	(void)ud;
	if (!fuse_set_feature_flag(conn, FUSE_CAP_PASSTHROUGH))
		fprintf(stderr, "passthrough_probe: the kernel offers no "
				"FUSE passthrough\n");
	conn->max_readahead = 1u << 20;
}

static void probe_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e = { .ino = DATA_INO, .attr_timeout = 3600,
				      .entry_timeout = 3600 };

	if (parent != FUSE_ROOT_ID || strcmp(name, "data") != 0) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	attr_of(DATA_INO, &e.attr);
	fuse_reply_entry(req, &e);
}

static void probe_getattr(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct stat st;

	(void)fi;
	attr_of(ino, &st);
	fuse_reply_attr(req, &st, 3600);
}

static void probe_open(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	unsigned n = atomic_fetch_add(&opens, 1);

	if (ino != DATA_INO) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (mix && n % 2) {
		fi->direct_io = 1;
	} else {
		/* keep_cache must stay off: with it the kernel fails the open. */
		int id = fuse_passthrough_open(req, backing_fd);

		if (id <= 0) {
			fprintf(stderr, "passthrough_probe: "
					"fuse_passthrough_open failed\n");
			fuse_reply_err(req, EIO);
			return;
		}
		fi->backing_id = id;
	}
	fuse_reply_open(req, fi);
}

static void probe_release(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	(void)ino;
	if (fi->backing_id > 0)
		fuse_passthrough_close(req, fi->backing_id);
	fuse_reply_err(req, 0);
}

/* Only direct opens (mix) get here: the backing file's bytes, spliced. */
static void probe_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct fuse_bufvec b = FUSE_BUFVEC_INIT(size);

	(void)ino;
	(void)fi;
	b.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	b.buf[0].fd = backing_fd;
	b.buf[0].pos = off;
	fuse_reply_data(req, &b, FUSE_BUF_SPLICE_MOVE);
}

static const struct fuse_lowlevel_ops probe_ops = {
	.init = probe_init,
	.lookup = probe_lookup,
	.getattr = probe_getattr,
	.open = probe_open,
	.release = probe_release,
	.read = probe_read,
};

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *lc;
	struct fuse_session *se;
	struct stat st;
	int rc;

	if (argc < 3) {
		fprintf(stderr, "usage: passthrough_probe MOUNTPOINT "
				"BACKING_FILE [mix]\n");
		return 2;
	}
	mix = argc > 3 && strcmp(argv[3], "mix") == 0;
	backing_fd = open(argv[2], O_RDONLY | O_CLOEXEC);
	if (backing_fd < 0 || fstat(backing_fd, &st) < 0) {
		perror(argv[2]);
		return 1;
	}
	backing_size = st.st_size;
	if (fuse_opt_add_arg(&args, argv[0]) < 0)
		return 1;
	se = fuse_session_new(&args, &probe_ops, sizeof(probe_ops), NULL);
	if (!se)
		return 1;
	if (fuse_session_mount(se, argv[1]) < 0) {
		fuse_session_destroy(se);
		return 1;
	}
	lc = fuse_loop_cfg_create();
	rc = fuse_session_loop_mt(se, lc);
	fuse_loop_cfg_destroy(lc);
	fuse_session_unmount(se);
	fuse_session_destroy(se);
	fuse_opt_free_args(&args);
	return rc ? 1 : 0;
}
