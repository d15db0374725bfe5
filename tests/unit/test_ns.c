/*
 * test_ns.c - the namespace: names, directories, renames, attributes,
 * checkpoints.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/sysmacros.h>

#include <cmocka.h>

#include "eng_fixture.h"

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	fx_dirs(fx);
	if (fx_start(fx, 16 * MiB, false, 2) < 0)
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

static uint64_t mkdir_ok(struct eng *e, uint64_t parent, const char *name)
{
	struct stat st;

	assert_int_equal(eng_mkdir(e, parent, name, 0750, 1000, 1000, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0750);
	assert_int_equal(st.st_uid, 1000);
	return st.st_ino;
}

static int collect(void *ctx, const char *name, const struct stat *st,
		   off_t next)
{
	char *out = ctx;

	strcat(out, name);
	strcat(out, " ");
	return 0;
}

static void test_dirs_and_lookup(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	struct stat st;
	struct eng_dir *d;
	char names[256] = "";
	uint64_t a = mkdir_ok(e, RFT_ROOT_INO, "a");
	uint64_t b = mkdir_ok(e, a, "b");

	assert_int_equal(eng_mkdir(e, RFT_ROOT_INO, "a", 0755, 0, 0, &st),
			 -EEXIST);
	assert_int_equal(eng_lookup(e, RFT_ROOT_INO, "a", &st), 0);
	assert_int_equal(st.st_ino, a);
	assert_int_equal(st.st_nlink, 3); /* ".", its name, b's ".." */
	assert_int_equal(eng_lookup(e, a, "nope", &st), -ENOENT);
	assert_int_not_equal(fx_put(e, a, "f", "x", 1), 0);
	assert_int_equal(eng_lookup(e, a, "f", &st), 0);
	assert_int_equal(eng_mkdir(e, st.st_ino, "x", 0755, 0, 0, &st),
			 -ENOTDIR);

	assert_int_equal(eng_opendir(e, a, &d), 0);
	assert_int_equal(eng_readdir(e, d, 0, collect, names), 0);
	eng_releasedir(e, d);
	assert_string_equal(names, ". .. b f "); /* creation order */

	assert_int_equal(eng_rmdir(e, RFT_ROOT_INO, "a"), -ENOTEMPTY);
	assert_int_equal(eng_unlink(e, a, "b"), -EISDIR);
	assert_int_equal(eng_rmdir(e, a, "f"), -ENOTDIR);
	assert_int_equal(eng_rmdir(e, a, "b"), 0);
	assert_int_equal(eng_unlink(e, a, "f"), 0);
	assert_int_equal(eng_rmdir(e, RFT_ROOT_INO, "a"), 0);
	assert_int_equal(eng_lookup(e, RFT_ROOT_INO, "a", &st), -ENOENT);
	/* The kernel may still hold b: it lives until forgotten. */
	assert_int_equal(eng_getattr(e, b, &st), 0);
	eng_forget(e, b, 1);
	assert_int_equal(eng_getattr(e, b, &st), -ENOENT);
}

static void test_names(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	char longname[NAME_MAX + 2];
	struct stat st;

	memset(longname, 'n', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	assert_int_equal(eng_mkdir(e, RFT_ROOT_INO, longname, 0755, 0, 0, &st),
			 -ENAMETOOLONG);
	/* Reserved for the persist dir's own use. */
	assert_int_equal(eng_mkdir(e, RFT_ROOT_INO, ".x.rftsum", 0755, 0, 0,
				   &st), -EINVAL);
	assert_int_equal(eng_mkdir(e, RFT_ROOT_INO, ".reftfs-tmp", 0755, 0, 0,
				   &st), -EINVAL);
	assert_int_equal(eng_mknod(e, RFT_ROOT_INO, "fifo", S_IFIFO | 0644, 0,
				   0, 0, &st), 0);
	assert_true(S_ISFIFO(st.st_mode));
	assert_int_equal(eng_mknod(e, RFT_ROOT_INO, "null", S_IFCHR | 0666,
				   makedev(1, 3), 0, 0, &st), 0);
	assert_true(S_ISCHR(st.st_mode));
	assert_int_equal(st.st_rdev, makedev(1, 3));
	assert_int_equal(eng_mknod(e, RFT_ROOT_INO, "dir", S_IFDIR | 0644, 0,
				   0, 0, &st), -EINVAL);
	assert_int_equal(eng_mknod(e, RFT_ROOT_INO, "plain", S_IFREG | 0600, 0,
				   7, 8, &st), 0);
	assert_int_equal(st.st_uid, 7);
	assert_int_equal(st.st_gid, 8);
	assert_int_equal(st.st_size, 0);
}

static void test_rename(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	struct stat st;
	uint64_t d = mkdir_ok(e, RFT_ROOT_INO, "r");
	uint64_t sub = mkdir_ok(e, d, "sub");
	uint64_t x = fx_put(e, d, "x", "xx", 2);
	uint64_t y = fx_put(e, d, "y", "yyy", 3);

	/* Plain replace: y now names x's inode. */
	assert_int_equal(eng_rename(e, d, "x", d, "y", 0), 0);
	assert_int_equal(eng_lookup(e, d, "y", &st), 0);
	assert_int_equal(st.st_ino, x);
	assert_int_equal(st.st_size, 2);
	assert_int_equal(eng_lookup(e, d, "x", &st), -ENOENT);
	(void)y;

	fx_put(e, d, "z", "z", 1);
	assert_int_equal(eng_rename(e, d, "z", d, "y", ENG_RENAME_NOREPLACE),
			 -EEXIST);
	assert_int_equal(eng_rename(e, d, "z", d, "y", ENG_RENAME_EXCHANGE),
			 0);
	assert_int_equal(eng_lookup(e, d, "z", &st), 0);
	assert_int_equal(st.st_ino, x);
	assert_int_equal(eng_rename(e, d, "nope", d, "y", ENG_RENAME_EXCHANGE),
			 -ENOENT);
	assert_int_equal(eng_rename(e, d, "z", d, "new", ENG_RENAME_EXCHANGE),
			 -ENOENT);
	assert_int_equal(eng_rename(e, d, "z", d, "q",
				    ENG_RENAME_EXCHANGE |
					    ENG_RENAME_NOREPLACE),
			 -EINVAL);

	/* Directories: not below themselves, not over files or full dirs. */
	assert_int_equal(eng_rename(e, RFT_ROOT_INO, "r", sub, "r", 0),
			 -EINVAL);
	assert_int_equal(eng_rename(e, d, "sub", d, "z", 0), -ENOTDIR);
	assert_int_equal(eng_rename(e, d, "z", d, "sub", 0), -EISDIR);
	fx_put(e, sub, "inner", "i", 1);
	mkdir_ok(e, d, "empty");
	assert_int_equal(eng_rename(e, d, "empty", d, "sub", 0), -ENOTEMPTY);
	assert_int_equal(eng_rename(e, d, "sub", d, "empty", 0), 0);
	assert_int_equal(eng_lookup(e, d, "empty", &st), 0);
	assert_int_equal(st.st_ino, sub);
	/* Across directories. */
	assert_int_equal(eng_rename(e, sub, "inner", RFT_ROOT_INO, "top", 0), 0);
	assert_int_equal(eng_lookup(e, RFT_ROOT_INO, "top", &st), 0);
	assert_int_equal(st.st_size, 1);
	/* Same name: nothing happens. */
	assert_int_equal(eng_rename(e, RFT_ROOT_INO, "top", RFT_ROOT_INO,
				    "top", 0), 0);
}

static void test_setattr_symlink_link(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	struct eng_setattr sa = { 0 };
	struct stat st;
	char buf[64];
	uint64_t f = fx_put(e, RFT_ROOT_INO, "attr", "abc", 3);

	sa.valid = ENG_SET_MODE | ENG_SET_UID | ENG_SET_GID | ENG_SET_MTIME;
	sa.mode = 0600;
	sa.uid = 42;
	sa.gid = 43;
	sa.mtime.tv_sec = 1000000;
	assert_int_equal(eng_setattr(e, f, NULL, &sa, &st), 0);
	assert_int_equal(st.st_mode, S_IFREG | 0600);
	assert_int_equal(st.st_uid, 42);
	assert_int_equal(st.st_gid, 43);
	assert_int_equal(st.st_mtim.tv_sec, 1000000);

	assert_int_equal(eng_symlink(e, RFT_ROOT_INO, "ln", "step_100", 0, 0,
				     &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(st.st_size, 8);
	assert_int_equal(eng_readlink(e, st.st_ino, buf, sizeof(buf)), 8);
	assert_memory_equal(buf, "step_100", 8);
	assert_int_equal(eng_readlink(e, f, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(eng_link(e, f, RFT_ROOT_INO, "hard", &st), 0);
	assert_int_equal(st.st_ino, f);
	assert_int_equal(st.st_nlink, 2);
	assert_int_equal(eng_link(e, f, RFT_ROOT_INO, "hard", &st), -EEXIST);
	assert_int_equal(eng_link(e, RFT_ROOT_INO, RFT_ROOT_INO, "d", &st),
			 -EPERM);
	assert_int_equal(eng_unlink(e, RFT_ROOT_INO, "hard"), 0);
	eng_forget(e, f, 1);

	sa.valid = ENG_SET_SIZE;
	sa.size = 1;
	assert_int_equal(eng_setattr(e, RFT_ROOT_INO, NULL, &sa, &st),
			 -EISDIR);
}

static int ckpt_cb(void *ctx, const struct eng_ckpt_info *ci)
{
	char *out = ctx;
	char line[64];

	snprintf(line, sizeof(line), "%s:%llu:%d ", ci->name,
		 (unsigned long long)ci->files, ci->in_keep_window);
	strcat(out, line);
	return 0;
}

static void test_checkpoints(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	char out[256] = "";
	uint64_t a = mkdir_ok(e, RFT_ROOT_INO, "step_1");
	uint64_t b = mkdir_ok(e, RFT_ROOT_INO, "step_2");
	uint64_t c = mkdir_ok(e, RFT_ROOT_INO, "step_3");

	fx_put(e, a, "m.pt", "1", 1);
	fx_put(e, b, "m.pt", "2", 1);
	fx_put(e, c, "m.pt", "3", 1);
	fx_put(e, c, "o.pt", "3", 1);
	fx_put(e, RFT_ROOT_INO, "latest", "step_3", 6);
	assert_int_equal(eng_list_checkpoints(e, ckpt_cb, out), 0);
	/* keep = 2: the oldest falls out of the window. */
	assert_string_equal(out, "step_1:1:0 step_2:1:1 step_3:2:1 ");
}

static void test_statfs(void **state)
{
	struct eng *e = ((struct fixture *)*state)->e;
	struct statvfs sv;
	uint8_t *big = malloc(3 * MiB);
	struct stat st;
	uint64_t ino;

	assert_non_null(big);
	assert_int_equal(eng_statfs(e, &sv), 0);
	assert_int_equal(sv.f_frsize * sv.f_blocks, 16 * MiB);
	assert_int_equal(sv.f_bfree, 16);
	fx_fill(big, 3 * MiB, 1);
	ino = fx_put(e, RFT_ROOT_INO, "big", big, 3 * MiB);
	assert_int_not_equal(ino, 0);
	assert_int_equal(eng_statfs(e, &sv), 0);
	assert_int_equal(sv.f_bfree, 13);

	/*
	 * The name goes at once; the kernel's lookup (from create) keeps the
	 * inode and its chunks until it forgets it.
	 */
	assert_int_equal(eng_unlink(e, RFT_ROOT_INO, "big"), 0);
	assert_int_equal(eng_lookup(e, RFT_ROOT_INO, "big", &st), -ENOENT);
	assert_int_equal(eng_getattr(e, ino, &st), 0);
	assert_int_equal(st.st_nlink, 0);
	assert_int_equal(eng_statfs(e, &sv), 0);
	assert_int_equal(sv.f_bfree, 13);
	eng_forget(e, 0, 0); /* unknown inode: ignored */
	assert_int_equal(eng_statfs(e, &sv), 0);
	assert_int_equal(sv.f_bfree, 13);

	/* The last forget frees the inode and gives the memory back. */
	eng_forget(e, ino, 1);
	assert_int_equal(eng_getattr(e, ino, &st), -ENOENT);
	assert_int_equal(eng_statfs(e, &sv), 0);
	assert_int_equal(sv.f_bfree, 16);
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_dirs_and_lookup, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rename, setup, teardown),
		cmocka_unit_test_setup_teardown(test_setattr_symlink_link,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_checkpoints, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_statfs, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
