/*
 * passthrough_probe.c - FUSE passthrough on this kernel, before reftfs
 * builds on it (issue 10; docs/design.md, "Caching and mmap"): a file
 * system of one read-only file, "data", whose opens hand the kernel a
 * backing file (fuse_passthrough_open), so reads and mappings of it never
 * reach this daemon.  run_passthrough_probe.sh compares reads through it
 * with reads of the backing file and of a default tmpfs.
 *
 * usage: passthrough_probe MOUNTPOINT BACKING_FILE [mix|shared|rw]
 *   mix:    every other open is direct I/O instead (served here by
 *           splice), to see what the kernel does with both kinds on one
 *           inode.
 *   shared: the backing file is registered once, at the first open, and
 *           every open while it is held gets that one id (by default each
 *           open registers it anew and gets an id of its own).
 *   rw:     shared, and the file may be opened for writing (mode 0644,
 *           attributes not cached): writes pass through to the backing
 *           file too.  GETATTR answers the size the file had at start,
 *           to see whether a stale answer undoes a passthrough write's
 *           size; FLUSH, FSYNC, RELEASE and GETATTR are logged ("probe:
 *           ...").
 * Runs in the foreground until unmounted.  Built against libfuse 3.18+
 * (the bundled one) by run_passthrough_probe.sh, not by meson.
 */
#define FUSE_USE_VERSION 318
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATA_INO 2

static int backing_fd = -1;
static off_t backing_size;
static bool mix, shared, rw;
static atomic_uint opens;

/* shared, rw: the one registration and the opens that hold it. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static int reg_id;
static unsigned reg_users;

static void attr_of(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | (rw ? 0644 : 0444);
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
	if (rw)
		e.attr_timeout = 0;
	fuse_reply_entry(req, &e);
}

static void probe_getattr(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct stat st;

	(void)fi;
	attr_of(ino, &st);
	if (rw && ino == DATA_INO)
		fprintf(stderr, "probe: getattr (answered size %lld)\n",
			(long long)st.st_size);
	fuse_reply_attr(req, &st, rw ? 0 : 3600);
}

/* The backing id for an open: a new one, or in shared mode the held one. */
static int backing_get(fuse_req_t req)
{
	int id;

	if (!shared)
		return fuse_passthrough_open(req, backing_fd);
	pthread_mutex_lock(&reg_lock);
	if (!reg_users)
		reg_id = fuse_passthrough_open(req, backing_fd);
	id = reg_id;
	if (id > 0)
		reg_users++;
	pthread_mutex_unlock(&reg_lock);
	return id;
}

static void backing_put(fuse_req_t req, int id)
{
	if (!shared) {
		fuse_passthrough_close(req, id);
		return;
	}
	pthread_mutex_lock(&reg_lock);
	if (--reg_users == 0)
		fuse_passthrough_close(req, reg_id);
	pthread_mutex_unlock(&reg_lock);
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
		int id = backing_get(req);

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
	if (rw)
		fprintf(stderr, "probe: release\n");
	if (fi->backing_id > 0)
		backing_put(req, fi->backing_id);
	fuse_reply_err(req, 0);
}

static void probe_flush(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	if (rw)
		fprintf(stderr, "probe: flush\n");
	fuse_reply_err(req, 0);
}

static void probe_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
			struct fuse_file_info *fi)
{
	(void)ino;
	(void)datasync;
	(void)fi;
	if (rw)
		fprintf(stderr, "probe: fsync\n");
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
	.flush = probe_flush,
	.fsync = probe_fsync,
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
				"BACKING_FILE [mix|shared|rw]\n");
		return 2;
	}
	mix = argc > 3 && strcmp(argv[3], "mix") == 0;
	rw = argc > 3 && strcmp(argv[3], "rw") == 0;
	shared = rw || (argc > 3 && strcmp(argv[3], "shared") == 0);
	backing_fd = open(argv[2], (rw ? O_RDWR : O_RDONLY) | O_CLOEXEC);
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
