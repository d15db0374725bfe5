"""POSIX behaviour that checkpointing frameworks rely on, checked on a mount.

usage: posix_check.py MOUNT MEM_BYTES CHUNK_BYTES

Every check runs even if an earlier one failed; each failure is printed
with what was expected, and the exit status is 1 if any failed.
The mount must be made with -o allow_other,default_permissions for the
ownership check (run as root; skipped otherwise).
"""

import ctypes
import ctypes.util
import errno
import mmap
import os
import random
import shutil
import stat
import sys
import traceback

from rftest import check, check_bytes, expect_errno, pattern, read_file, say

MNT = sys.argv[1]
MEM = int(sys.argv[2])
CHUNK = int(sys.argv[3])
MiB = 1 << 20
GiB = 1 << 30
CHECKS = []


def p(*parts):
    return os.path.join(MNT, *parts)


def case(fn):
    CHECKS.append(fn)
    return fn


def write_file(path, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
    fd = os.open(path, flags, 0o644)
    try:
        off = 0
        while off < len(data):
            off += os.write(fd, data[off:off + 3 * MiB])
    finally:
        os.close(fd)


def statfs_free():
    sv = os.statvfs(MNT)
    return sv.f_bfree * sv.f_frsize


@case
def create_trunc_append():
    d = p("t_create")
    os.mkdir(d)
    f = os.path.join(d, "a")
    write_file(f, b"hello world")
    check(os.stat(f).st_size == 11, "size after write")
    expect_errno(errno.EEXIST, os.open, f, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                 what="O_CREAT|O_EXCL on an existing file")
    fd = os.open(f, os.O_WRONLY | os.O_TRUNC)
    check(os.fstat(fd).st_size == 0, "O_TRUNC did not empty the file")
    os.write(fd, b"abc")
    os.close(fd)
    check_bytes(read_file(f), b"abc", "after O_TRUNC + write")
    fd = os.open(f, os.O_WRONLY | os.O_APPEND)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, b"def")          # O_APPEND: goes to the end regardless
    os.write(fd, b"ghi")
    os.close(fd)
    check_bytes(read_file(f), b"abcdefghi", "O_APPEND writes")
    with open(f, "ab") as fh:     # python's append mode
        fh.write(pattern(2 * CHUNK + 5, 1))
    check_bytes(read_file(f), b"abcdefghi" + pattern(2 * CHUNK + 5, 1),
                "append across chunks")
    with open(f, "rb") as fh:
        fh.seek(10 * CHUNK)
        check(fh.read(100) == b"", "read past EOF must return nothing")
    # An empty file.
    write_file(os.path.join(d, "empty"), b"")
    check(os.stat(os.path.join(d, "empty")).st_size == 0, "empty file size")
    check(read_file(os.path.join(d, "empty")) == b"", "empty file data")


@case
def sequential_and_random_pwrite():
    f = p("t_pwrite")
    size = 5 * CHUNK + 12345
    data = pattern(size, 2)
    # Sequential, with unaligned write sizes.
    fd = os.open(f, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    off = 0
    sizes = [1, 4095, 4097, 131072, CHUNK - 1, CHUNK + 1, 3 * MiB]
    i = 0
    while off < size:
        n = min(sizes[i % len(sizes)], size - off)
        check(os.pwrite(fd, data[off:off + n], off) == n, "short pwrite")
        off += n
        i += 1
    os.close(fd)
    check(os.stat(f).st_size == size, "size after sequential writes")
    check_bytes(read_file(f), data, "sequential write")
    # Random pwrites over a file with holes, against a bytearray model.
    rnd = random.Random(3)
    g = p("t_random")
    model = bytearray()
    fd = os.open(g, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    for k in range(300):
        off = rnd.randrange(0, 9 * CHUNK)
        n = rnd.choice([1, 7, 512, 4096, 65536, 300000, CHUNK + 17])
        buf = pattern(n, 1000 + k)
        check(os.pwrite(fd, buf, off) == n, "short random pwrite")
        if len(model) < off + n:
            model.extend(b"\0" * (off + n - len(model)))
        model[off:off + n] = buf
    os.fsync(fd)
    check(os.fstat(fd).st_size == len(model), "size after random pwrites")
    # pread at odd offsets while still open
    for k in range(200):
        off = rnd.randrange(0, len(model))
        n = rnd.choice([1, 100, 4096, 1 << 17, 2 * CHUNK])
        check_bytes(os.pread(fd, n, off), bytes(model[off:off + n]),
                    "pread(%d, %d) of open file" % (n, off))
    os.close(fd)
    check_bytes(read_file(g), bytes(model), "random pwrite after close")
    # Holes read as zeros: a file with data only far apart.
    h = p("t_holes")
    fd = os.open(h, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.pwrite(fd, b"X" * 10, 3 * CHUNK + 100)
    os.pwrite(fd, b"Y" * 10, 7 * CHUNK - 7)
    os.close(fd)
    want = bytearray(7 * CHUNK + 3)
    want[3 * CHUNK + 100:3 * CHUNK + 110] = b"X" * 10
    want[7 * CHUNK - 7:7 * CHUNK + 3] = b"Y" * 10
    check_bytes(read_file(h), bytes(want), "file with holes")
    # Rewriting a sealed file reopens it (copy-on-write of chunks).
    fd = os.open(f, os.O_WRONLY)
    os.pwrite(fd, b"Z" * 1000, CHUNK - 500)
    os.close(fd)
    want = bytearray(data)
    want[CHUNK - 500:CHUNK + 500] = b"Z" * 1000
    check_bytes(read_file(f), bytes(want), "overwrite of a sealed file")


@case
def truncate_up_down():
    f = p("t_trunc")
    data = pattern(3 * CHUNK + 777, 4)
    write_file(f, data)
    os.truncate(f, CHUNK + 10)       # down, inside a chunk
    check(os.stat(f).st_size == CHUNK + 10, "size after truncate down")
    check_bytes(read_file(f), data[:CHUNK + 10], "after truncate down")
    os.truncate(f, 4 * CHUNK)        # up: the cut part must now read zeros
    check(os.stat(f).st_size == 4 * CHUNK, "size after truncate up")
    check_bytes(read_file(f), data[:CHUNK + 10] + bytes(3 * CHUNK - 10),
                "after truncate down then up (old bytes must not reappear)")
    fd = os.open(f, os.O_RDWR)
    os.ftruncate(fd, 100)
    check(os.fstat(fd).st_size == 100, "size after ftruncate")
    os.ftruncate(fd, 0)
    os.pwrite(fd, b"abc", 5)
    os.close(fd)
    check_bytes(read_file(f), b"\0" * 5 + b"abc", "ftruncate 0 then pwrite")


@case
def rename_replace():
    d = p("t_rename")
    os.mkdir(d)
    a, b = os.path.join(d, "a"), os.path.join(d, "b")
    write_file(a, b"new contents")
    write_file(b, b"old contents, longer")
    fd_old = os.open(b, os.O_RDONLY)
    os.rename(a, b)                   # atomic replace
    check(not os.path.exists(a), "source still exists after rename")
    check_bytes(read_file(b), b"new contents", "target after rename")
    # The replaced inode stays readable through an open descriptor.
    check_bytes(os.pread(fd_old, 100, 0), b"old contents, longer",
                "replaced file read through an fd opened before rename")
    os.close(fd_old)
    # Write to temp + os.replace: the checkpoint-pointer idiom.
    for i in range(20):
        tmp = os.path.join(d, "latest.tmp")
        write_file(tmp, b"%d" % i)
        os.replace(tmp, os.path.join(d, "latest"))
    check_bytes(read_file(os.path.join(d, "latest")), b"19", "latest")
    check(sorted(os.listdir(d)) == ["b", "latest"],
          "directory after renames: %s" % sorted(os.listdir(d)))
    # Directories: into another directory, over an empty dir, not over a
    # non-empty one.
    os.makedirs(os.path.join(d, "x", "y"))
    write_file(os.path.join(d, "x", "y", "f"), b"f")
    os.mkdir(os.path.join(d, "empty"))
    os.rename(os.path.join(d, "x"), os.path.join(d, "empty"))
    check_bytes(read_file(os.path.join(d, "empty", "y", "f")), b"f",
                "file after renaming its directory over an empty dir")
    os.makedirs(os.path.join(d, "full", "z"))
    expect_errno((errno.ENOTEMPTY, errno.EEXIST), os.rename,
                 os.path.join(d, "empty"), os.path.join(d, "full"),
                 what="rename dir over non-empty dir")
    expect_errno(errno.ENOENT, os.rename, os.path.join(d, "nope"),
                 os.path.join(d, "nope2"), what="rename of missing file")
    # Across directories.
    os.rename(os.path.join(d, "b"), os.path.join(d, "full", "z", "b"))
    check_bytes(read_file(os.path.join(d, "full", "z", "b")), b"new contents",
                "file renamed into another directory")


@case
def renameat2_flags():
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if not hasattr(libc, "renameat2"):
        say("  note: libc has no renameat2; RENAME_NOREPLACE/EXCHANGE not checked")
        return
    AT_FDCWD = -100
    NOREPLACE, EXCHANGE = 1, 2

    def r2(a, b, flags):
        rc = libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(),
                            ctypes.c_uint(flags))
        return 0 if rc == 0 else ctypes.get_errno()

    d = p("t_rename2")
    os.mkdir(d)
    a, b, c = (os.path.join(d, n) for n in "abc")
    write_file(a, b"AAA")
    write_file(b, b"BBBB")
    e = r2(a, b, NOREPLACE)
    if e == errno.EINVAL:
        say("  note: RENAME_NOREPLACE gives EINVAL (allowed by the issue)")
    else:
        check(e == errno.EEXIST, "RENAME_NOREPLACE onto existing: %s, want "
              "EEXIST" % errno.errorcode.get(e, e))
        check_bytes(read_file(b), b"BBBB", "target after refused NOREPLACE")
        check(r2(a, c, NOREPLACE) == 0, "RENAME_NOREPLACE to a free name")
        check_bytes(read_file(c), b"AAA", "after RENAME_NOREPLACE")
        os.rename(c, a)
    e = r2(a, b, EXCHANGE)
    if e == errno.EINVAL:
        say("  note: RENAME_EXCHANGE gives EINVAL (allowed by the issue)")
    else:
        check(e == 0, "RENAME_EXCHANGE: %s" % errno.errorcode.get(e, e))
        check_bytes(read_file(a), b"BBBB", "a after RENAME_EXCHANGE")
        check_bytes(read_file(b), b"AAA", "b after RENAME_EXCHANGE")
        check(r2(a, c, EXCHANGE) == errno.ENOENT,
              "RENAME_EXCHANGE with a missing target must be ENOENT")


@case
def rename_ctimes():
    """A rename changes the ctime of every inode it touches, as on tmpfs:
    the one moved, the one it replaces (whose link count drops, seen here
    through its other hard link) and, with RENAME_EXCHANGE, the other."""
    import time
    d = p("t_rename_ctime")
    os.mkdir(d)
    a, b, b2 = (os.path.join(d, n) for n in ("a", "b", "b2"))
    write_file(a, b"a")
    write_file(b, b"b")
    os.link(b, b2)
    before = os.stat(b2).st_ctime_ns
    time.sleep(0.02)
    os.rename(a, b)
    st = os.stat(b2)
    check(st.st_nlink == 1, "nlink of the replaced inode: %d" % st.st_nlink)
    check(st.st_ctime_ns > before, "rename over a name of an inode with "
          "another hard link left that inode's ctime unchanged")
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if not hasattr(libc, "renameat2"):
        return
    x, y = os.path.join(d, "x"), os.path.join(d, "y")
    write_file(x, b"x")
    write_file(y, b"y")
    cx, cy = os.stat(x).st_ctime_ns, os.stat(y).st_ctime_ns
    time.sleep(0.02)
    rc = libc.renameat2(-100, x.encode(), -100, y.encode(), ctypes.c_uint(2))
    if rc != 0:
        return  # RENAME_EXCHANGE refused: renameat2_flags says so
    check(os.stat(y).st_ctime_ns > cx,
          "RENAME_EXCHANGE left the ctime of the source unchanged")
    check(os.stat(x).st_ctime_ns > cy,
          "RENAME_EXCHANGE left the ctime of the target unchanged")


@case
def unlink_rmdir_rmtree():
    d = p("t_tree")
    for i in range(4):
        os.makedirs(os.path.join(d, "s%d" % i, "deep", "er"))
        for j in range(5):
            write_file(os.path.join(d, "s%d" % i, "deep", "f%d" % j),
                       pattern(1000 * j, j))
    write_file(os.path.join(d, "top"), pattern(CHUNK + 1, 5))
    expect_errno(errno.ENOTEMPTY, os.rmdir, d, what="rmdir of non-empty dir")
    expect_errno((errno.ENOTDIR,), os.rmdir, os.path.join(d, "top"),
                 what="rmdir of a file")
    expect_errno((errno.EISDIR, errno.EPERM), os.unlink, os.path.join(d, "s0"),
                 what="unlink of a directory")
    # An unlinked file stays readable while open.
    fd = os.open(os.path.join(d, "top"), os.O_RDONLY)
    os.unlink(os.path.join(d, "top"))
    check(not os.path.exists(os.path.join(d, "top")), "unlinked file visible")
    check_bytes(os.pread(fd, CHUNK + 10, 0), pattern(CHUNK + 1, 5),
                "unlinked file read through open fd")
    os.close(fd)
    shutil.rmtree(d)
    check(not os.path.exists(d), "rmtree left the directory")
    expect_errno(errno.ENOENT, os.stat, d, what="stat after rmtree")
    # Many entries: readdir must page correctly.
    d = p("t_many")
    os.mkdir(d)
    names = ["file_%04d_%s" % (i, "x" * (i % 40)) for i in range(1500)]
    for n in names:
        os.close(os.open(os.path.join(d, n), os.O_CREAT | os.O_WRONLY, 0o644))
    got = sorted(os.listdir(d))
    check(got == sorted(names), "readdir of 1500 entries: %d names, %d "
          "missing" % (len(got), len(set(names) - set(got))))
    # Unlink while iterating (what rmtree does with scandir).
    with os.scandir(d) as it:
        for ent in it:
            os.unlink(ent.path)
    check(os.listdir(d) == [], "entries left after unlinking during readdir")
    os.rmdir(d)


@case
def symlink_hardlink():
    d = p("t_links")
    os.mkdir(d)
    f = os.path.join(d, "target")
    write_file(f, b"linked data")
    os.symlink("target", os.path.join(d, "sym"))
    os.symlink("/nonexistent/dangling", os.path.join(d, "dangling"))
    check(os.readlink(os.path.join(d, "sym")) == "target", "readlink")
    check(stat.S_ISLNK(os.lstat(os.path.join(d, "sym")).st_mode),
          "lstat of symlink is not a link")
    check(os.path.islink(os.path.join(d, "dangling")), "dangling symlink")
    check_bytes(read_file(os.path.join(d, "sym")), b"linked data",
                "read through symlink")
    long_target = "x/" * 1000 + "y"
    os.symlink(long_target, os.path.join(d, "long"))
    check(os.readlink(os.path.join(d, "long")) == long_target,
          "readlink of a 2001-byte target")
    os.link(f, os.path.join(d, "hard"))
    check(os.stat(f).st_nlink == 2, "st_nlink after link: %d" % os.stat(f).st_nlink)
    check(os.stat(f).st_ino == os.stat(os.path.join(d, "hard")).st_ino,
          "hard link has a different inode number")
    with open(os.path.join(d, "hard"), "r+b") as fh:
        fh.write(b"LINKED")
    check_bytes(read_file(f), b"LINKED data", "write through a hard link")
    os.unlink(f)
    check(os.stat(os.path.join(d, "hard")).st_nlink == 1, "nlink after unlink")
    check_bytes(read_file(os.path.join(d, "hard")), b"LINKED data",
                "hard link after unlinking the other name")


@case
def chmod_utimens_owner():
    f = p("t_attr")
    write_file(f, b"x")
    st = os.stat(f)
    check(st.st_uid == os.getuid() and st.st_gid == os.getgid(),
          "new file owned by %d:%d, want %d:%d" % (
              st.st_uid, st.st_gid, os.getuid(), os.getgid()))
    check(stat.S_IMODE(st.st_mode) == 0o644 & ~current_umask(),
          "create mode %o" % stat.S_IMODE(st.st_mode))
    os.chmod(f, 0o600)
    check(stat.S_IMODE(os.stat(f).st_mode) == 0o600, "chmod 600")
    os.chmod(f, 0o4755)
    check(stat.S_IMODE(os.stat(f).st_mode) in (0o4755, 0o755), "chmod 4755")
    ns = (1_600_000_000_123_456_789, 1_500_000_000_987_654_321)
    os.utime(f, ns=ns)
    st = os.stat(f)
    check((st.st_atime_ns, st.st_mtime_ns) == ns, "utimens: got %s want %s" % (
        (st.st_atime_ns, st.st_mtime_ns), ns))
    before = os.stat(f).st_mtime_ns
    with open(f, "ab") as fh:
        fh.write(b"y")
    check(os.stat(f).st_mtime_ns > before, "mtime not updated by a write")
    os.utime(f)                                 # UTIME_NOW
    import time
    check(abs(os.stat(f).st_mtime - time.time()) < 60, "utime(now)")
    d = p("t_attrdir")
    os.mkdir(d, 0o750)
    check(stat.S_IMODE(os.stat(d).st_mode) == 0o750 & ~current_umask(),
          "mkdir mode %o" % stat.S_IMODE(os.stat(d).st_mode))
    if os.getuid() == 0:
        os.chown(f, 1234, 5678)
        st = os.stat(f)
        check((st.st_uid, st.st_gid) == (1234, 5678), "chown 1234:5678")


def current_umask():
    m = os.umask(0)
    os.umask(m)
    return m


@case
def ownership_other_user():
    """New files take the caller's uid/gid; default_permissions applies."""
    if os.getuid() != 0:
        say("  note: not root, other-user checks skipped")
        return
    d = p("t_users")
    os.mkdir(d)
    os.chmod(d, 0o777)
    priv = os.path.join(d, "root_only")
    write_file(priv, b"secret")
    os.chmod(priv, 0o600)
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        msg = b"ok"
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            f = os.path.join(d, "mine")
            with open(f, "wb") as fh:
                fh.write(b"nobody's")
            st = os.stat(f)
            if (st.st_uid, st.st_gid) != (65534, 65534):
                msg = b"new file owned by %d:%d, want 65534:65534" % (
                    st.st_uid, st.st_gid)
            else:
                try:
                    open(priv, "rb").read()
                    msg = b"uid 65534 could read a 0600 root file"
                except PermissionError:
                    pass
        except Exception as e:  # noqa: BLE001 - reported to the parent
            msg = ("%s: %s" % (type(e).__name__, e)).encode()
        os.write(wfd, msg)
        os._exit(0)
    os.close(wfd)
    msg = os.read(rfd, 4096)
    os.close(rfd)
    os.waitpid(pid, 0)
    check(msg == b"ok", "as uid 65534: %s" % msg.decode(errors="replace"))


@case
def statfs_budget():
    sv = os.statvfs(MNT)
    total = sv.f_blocks * sv.f_frsize
    check(abs(total - MEM) <= max(CHUNK, MEM // 100),
          "statfs total %d, want --mem %d" % (total, MEM))
    check(sv.f_bfree <= sv.f_blocks and sv.f_bavail <= sv.f_blocks,
          "statfs free > total")
    check(sv.f_namemax >= 255, "f_namemax %d" % sv.f_namemax)
    free0 = statfs_free()
    f = p("t_statfs")
    write_file(f, pattern(8 * MiB, 6))
    used = free0 - statfs_free()
    check(8 * MiB <= used <= 8 * MiB + 2 * CHUNK,
          "writing 8 MiB changed statfs free by %d bytes" % used)
    os.unlink(f)
    # The kernel may send FORGET for the unlinked inode a little later.
    import time
    for _ in range(50):
        freed = statfs_free() - (free0 - used)
        if freed >= 8 * MiB - CHUNK:
            break
        time.sleep(0.1)
    check(freed >= 8 * MiB - CHUNK,
          "unlink of 8 MiB gave back only %d bytes (after 5 s)" % freed)


@case
def mmap_read():
    f = p("t_mmap.bin")
    data = pattern(3 * CHUNK + 4321, 7)
    write_file(f, data)
    with open(f, "rb") as fh:
        with mmap.mmap(fh.fileno(), 0, flags=mmap.MAP_SHARED,
                       prot=mmap.PROT_READ) as m:
            check(len(m) == len(data), "mmap length")
            check_bytes(m[:], data, "mmap MAP_SHARED read")
            check_bytes(m[CHUNK - 3:CHUNK + 3], data[CHUNK - 3:CHUNK + 3],
                        "mmap read across a chunk boundary")
        with mmap.mmap(fh.fileno(), 0, flags=mmap.MAP_PRIVATE,
                       prot=mmap.PROT_READ) as m:
            check_bytes(m[:], data, "mmap MAP_PRIVATE read")
    try:
        import numpy as np
    except ImportError:
        say("  note: numpy missing, memmap not checked")
        return
    arr = np.frombuffer(pattern(4 * MiB, 8), dtype=np.float32).reshape(1024, 1024)
    g = p("t_memmap.npy")
    np.save(g, arr)
    m = np.load(g, mmap_mode="r")
    check(m.tobytes() == arr.tobytes(), "np.load(mmap_mode='r') differs")
    del m
    raw = p("t_memmap.raw")
    arr.tofile(raw)
    m = np.memmap(raw, dtype=np.float32, mode="r", shape=(1024, 1024))
    check(m.tobytes() == arr.tobytes(), "np.memmap(mode='r') differs")
    del m
    # A rewritten file must not be seen stale through a new mapping.
    data2 = pattern(len(data), 9)
    write_file(f, data2)
    with open(f, "rb") as fh:
        with mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as m:
            check_bytes(m[:], data2, "mmap after the file was rewritten")


@case
def fsync_fdatasync():
    f = p("t_fsync")
    fd = os.open(f, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, pattern(CHUNK + 3, 10))
    os.fsync(fd)
    os.write(fd, b"more")
    os.fdatasync(fd)
    os.close(fd)
    dfd = os.open(MNT, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)                     # fsync of a directory (rename idiom)
    os.close(dfd)
    check_bytes(read_file(f), pattern(CHUNK + 3, 10) + b"more", "after fsync")


@case
def sparse_huge():
    f = p("t_sparse")
    free0 = statfs_free()
    fd = os.open(f, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fd, 100 * GiB)
    check(os.fstat(fd).st_size == 100 * GiB, "size after truncate to 100 GiB")
    check(statfs_free() == free0,
          "truncate to 100 GiB changed statfs free by %d" % (
              free0 - statfs_free()))
    check(os.fstat(fd).st_blocks * 512 <= CHUNK,
          "st_blocks %d for an empty sparse file" % os.fstat(fd).st_blocks)
    check(os.pread(fd, 4096, 50 * GiB) == bytes(4096), "hole at 50 GiB")
    os.pwrite(fd, b"tail", 100 * GiB - 4)
    check(os.pread(fd, 8, 100 * GiB - 8) == b"\0\0\0\0tail", "tail write")
    check(free0 - statfs_free() <= CHUNK,
          "one small write at 100 GiB used %d bytes" % (free0 - statfs_free()))
    try:
        os.ftruncate(fd, 1 << 50)     # 1 PiB: EFBIG allowed, crash not
    except OSError as e:
        check(e.errno in (errno.EFBIG, errno.EINVAL, errno.ENOSPC),
              "truncate to 1 PiB: %s" % errno.errorcode.get(e.errno))
    try:
        os.pwrite(fd, b"x", (1 << 50) + 5)
    except OSError as e:
        check(e.errno in (errno.EFBIG, errno.EINVAL, errno.ENOSPC),
              "pwrite at 1 PiB: %s" % errno.errorcode.get(e.errno))
    os.close(fd)
    os.unlink(f)
    import time
    for _ in range(50):
        if abs(statfs_free() - free0) <= CHUNK:
            break
        time.sleep(0.1)
    check(abs(statfs_free() - free0) <= CHUNK, "space not returned after "
          "unlinking the sparse file")


@case
def survives_everything():
    # The mount is still there and answers.
    check(os.path.ismount(MNT), "mount point no longer mounted")
    check(isinstance(os.listdir(MNT), list), "listdir of the root")


def main():
    failed = 0
    for fn in CHECKS:
        try:
            fn()
            say("ok   %s" % fn.__name__)
        except Exception as e:  # noqa: BLE001 - report every check
            failed += 1
            say("FAIL %s: %s" % (fn.__name__, e))
            if not isinstance(e, AssertionError):
                traceback.print_exc(file=sys.stdout)
    say("%d of %d POSIX checks failed" % (failed, len(CHECKS)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
