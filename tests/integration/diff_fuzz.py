"""Randomized differential test: reftfs against a local directory (the model).

usage: diff_fuzz.py --mnt MNT --work DIR

Each trial starts reftfsd on MNT with a fresh persist dir, runs random
operations on a small set of names (root files, checkpoint directories, a
nested directory) on the mount and, the same way, on a model directory on
the local disk, and compares every result (value or errno).  Operations:
open, pwrite at random offsets (some far past EOF: holes), ftruncate,
truncate, fsync, close, whole-file writes, the atomic-replace pattern
(write NAME.tmp, rename it over NAME), rename, rename and RENAME_EXCHANGE
of two checkpoint directories, unlink, `reftfs-admin flush
--wait`, a read of the whole tree, and the daemon's end: clean unmount,
lazy unmount with files still open for writing, SIGKILL; after each the
daemon is started again on the same persist dir and every file is checked:

  after a clean unmount: the persist dir and the mount hold exactly the
      model (plain files, no temporaries);
  after SIGKILL: each name holds the version it had at the last successful
      flush --wait (or mount), or any version it had since; absent counts
      as a version (a name created after the flush may be missing, one
      unlinked after it may come back).  A name whose file was open for
      writing at the flush keeps its older allowed versions, since only
      sealed files are written back.  The model then continues from what
      the mount holds.  A name must never hold a version only another name
      had: renaming NAME.tmp over NAME must leave NAME's old copy or the
      new data in the persist dir, not an older copy of NAME.tmp.

Some mounts after a remount get a small --mem (16M, --keep 0) and only
read, to check read-through under memory pressure (sparse files included).

Environment:
  DIFF_SEED    seed of the run (default: random); printed first
  DIFF_TRIALS  number of trials (default 200; 100-differential.sh sets it
               by RFT_TIER)
  DIFF_ONLY    run only trial N of the seed (replays one failure fast)
  DIFF_OPS     maximum operations per trial (default 30)
  DIFF_STOP    1: stop at the first failing trial (default: run them all
               and sum up the failures by class)

Trial N draws everything from random.Random("SEED:N"), so a failing trial
replays alone with DIFF_SEED=SEED DIFF_ONLY=N; the daemon's own timing
(background write-back) may still differ between runs.
"""

import argparse
import ctypes
import errno
import hashlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

CHUNK = 1 << 20
# Root files belong to no checkpoint and are never evicted: keep them
# small, as `latest` is, so the small-memory mounts can hold them.
ROOT_NAMES = ["latest", "latest.tmp"]
# ck2 and ck3 hold the same names, so that renames and exchanges of the
# two directories (HF's tmp-checkpoint-N -> checkpoint-N) move files
# between names the model tracks.
SWAP_DIRS = ["ck2", "ck3"]
SWAP_NAMES = ["x.bin", "x.bin.tmp"]
NAMES = ROOT_NAMES + ["ck/model.pt", "ck/model.pt.tmp", "ck/optim.pt",
                      "ck/sub/shard.bin"] + [
    d + "/" + n for d in SWAP_DIRS for n in SWAP_NAMES]
REPLACEABLE = [n for n in NAMES if n + ".tmp" in NAMES]
MAX_FDS = 4
NORMAL_OPTS = ["--mem", "128M", "--no-prefault"]
SMALL_MEM = 16 << 20
SMALL_OPTS = ["--mem", "%dM" % (SMALL_MEM >> 20), "--keep", "0",
              "--no-prefault"]
FAR_MAX = 32 << 20  # sparse files reach past the small mounts' --mem


def errname(e):
    return errno.errorcode.get(e, str(e))


class Fail(Exception):
    """A difference between reftfs and what the model allows.

    kind: a short class for the summary; detail: what was expected and
    what was found.
    """

    def __init__(self, kind, detail):
        super().__init__(kind)
        self.kind = kind
        self.detail = detail


_libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_EXCHANGE = 2


def exchange(a, b):
    """renameat2(a, b, RENAME_EXCHANGE); raises OSError."""
    if _libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b),
                       RENAME_EXCHANGE) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), a)


def digest_file(path):
    """(size, hash) of the file at path; raises OSError."""
    h = hashlib.blake2b(digest_size=12)
    n = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                break
            h.update(b)
            n += len(b)
    return (n, h.hexdigest())


def digest_or_none(path):
    try:
        return digest_file(path)
    except FileNotFoundError:
        return None


def show(d):
    return "absent" if d is None else "%d bytes %s" % (d[0], d[1][:8])


def sparse_copy(src, dst):
    """Copy src to dst leaving all-zero blocks as holes."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        off = 0
        while True:
            b = fi.read(CHUNK)
            if not b:
                break
            if b.count(0) != len(b):
                fo.seek(off)
                fo.write(b)
            off += len(b)
        fo.truncate(off)


def first_diff(a, b):
    """First offset where files a and b differ, or None if equal."""
    off = 0
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x = fa.read(CHUNK)
            y = fb.read(CHUNK)
            if x != y:
                n = min(len(x), len(y))
                for i in range(n):
                    if x[i] != y[i]:
                        return off + i
                return off + n
            if not x:
                return None
            off += len(x)


def is_mounted(mnt):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == mnt for line in f)


def list_tree(root, persist=False):
    """(set of dirs, set of files) under root, relative.  persist: root is
    a persist dir, skip its bookkeeping (lock, staging dir, sidecars)."""
    dirs, files = set(), set()
    for dp, dns, fns in os.walk(root):
        rel = os.path.relpath(dp, root)
        if persist:
            if rel == ".":
                dns[:] = [d for d in dns if d != ".reftfs-tmp"]
                fns = [f for f in fns if f != ".reftfs-lock"]
            fns = [f for f in fns
                   if not (f.startswith(".") and f.endswith(".rftsum"))]
        for d in dns:
            dirs.add(os.path.normpath(os.path.join(rel, d)))
        for f in fns:
            files.add(os.path.normpath(os.path.join(rel, f)))
    return dirs, files


class Daemon:
    """One reftfsd in the foreground, our child, logging to a file."""

    def __init__(self, run, opts):
        self.run = run
        # The suites 'passthrough' and 'direct' (tests/integration/lib.sh).
        if os.environ.get("RFT_TEST_PASSTHROUGH") == "1":
            opts = opts + ["--no-in-place"]
        if os.environ.get("RFT_TEST_DIRECT") == "1":
            opts = opts + ["--no-passthrough"]
        self.opts = opts
        run.ndaemon += 1
        # lib.sh scans $T_TMP/daemon.*.log for sanitizer reports.
        self.log = os.path.join(run.work, "daemon.d%d.log" % run.ndaemon)
        with open(self.log, "wb") as lf:
            self.proc = subprocess.Popen(
                [run.reftfsd, run.mnt, "-f", "--persist", run.persist] +
                opts, stdin=subprocess.DEVNULL, stdout=lf,
                stderr=subprocess.STDOUT)
        end = time.monotonic() + 30
        while not is_mounted(run.mnt):
            if self.proc.poll() is not None:
                raise Fail("daemon start", "reftfsd %s exited %d before "
                           "mounting\n%s" % (" ".join(opts),
                                             self.proc.returncode,
                                             self.log_tail()))
            if time.monotonic() > end:
                raise Fail("daemon start", "not mounted after 30 s\n" +
                           self.log_tail())
            time.sleep(0.005)
        if "--no-in-place" in opts:
            self.wait_passthrough()

    def wait_passthrough(self):
        """Said at FUSE INIT, which may come after the mount shows."""
        end = time.monotonic() + 10
        while time.monotonic() < end:
            with open(self.log, errors="replace") as f:
                said = f.read()
            if "passthrough: on" in said:
                return
            if "passthrough: off" in said:
                break
            time.sleep(0.01)
        raise Fail("daemon start", "started with --no-in-place, but "
                   "passthrough is not on\n" + self.log_tail())

    def log_tail(self, n=30):
        try:
            with open(self.log, errors="replace") as f:
                lines = f.readlines()[-n:]
        except OSError:
            return ""
        return "".join("    daemon: " + ln for ln in lines)

    def alive(self):
        return self.proc.poll() is None

    def check_alive(self):
        if not self.alive():
            raise Fail("daemon died", "reftfsd exited %d\n%s" % (
                self.proc.returncode, self.log_tail()))

    def unmount(self, lazy=False):
        args = ["fusermount3", "-uz" if lazy else "-u", self.run.mnt]
        for _ in range(10):
            r = subprocess.run(args, capture_output=True, text=True)
            if r.returncode == 0 or not is_mounted(self.run.mnt):
                return
            time.sleep(0.2)
        raise Fail("unmount", "%s: %s" % (" ".join(args), r.stderr.strip()))

    def wait_exit(self, what):
        """Wait for the daemon to write back and exit; returns its status."""
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise Fail("daemon still running after " + what,
                       "reftfsd still running 60 s after %s\n%s" % (
                           what, self.log_tail()))
        if is_mounted(self.run.mnt):
            raise Fail("unmount", "still mounted after the daemon exited")
        return rc

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def teardown(self):
        """Best effort after a failure: unmount, stop, kill."""
        if is_mounted(self.run.mnt):
            subprocess.run(["fusermount3", "-u", self.run.mnt],
                           capture_output=True)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()
        if is_mounted(self.run.mnt):
            subprocess.run(["fusermount3", "-uz", self.run.mnt],
                           capture_output=True)


class Fd:
    def __init__(self, num, name, lfd, mfd):
        self.num = num
        self.name = name  # at open; the file may have moved since
        self.lfd = lfd  # on the model
        self.mfd = mfd  # on the mount

    def __str__(self):
        return "fd%d(%s)" % (self.num, self.name)


class Trial:
    def __init__(self, run, idx):
        self.run = run
        self.idx = idx
        self.rng = random.Random("%d:%d" % (run.seed, idx))
        self.oplog = []
        self.fds = []
        self.nfd = 0
        self.daemon = None
        self.persist_every = self.rng.choice(["0", "1"])
        self.model = os.path.join(run.work, "model")
        self.snap = os.path.join(run.work, "snap")
        for d in (self.model, self.snap, run.persist):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        # hist[n]: the versions of n in order (digest or None), from the
        # last point where n was known to be written back: hist[n][0].
        self.hist = {n: [None] for n in NAMES}
        # Every version each name had in this trial, to say what a wrong
        # file holds.
        self.seen = {n: {None} for n in NAMES}

    # --- bookkeeping -------------------------------------------------

    def say(self, msg):
        self.oplog.append("  #%d %s" % (len(self.oplog), msg))

    def mpath(self, n):
        return os.path.join(self.model, n)

    def fpath(self, n):
        return os.path.join(self.run.mnt, n)

    def record(self, names):
        for n in names:
            d = digest_or_none(self.mpath(n))
            if d != self.hist[n][-1]:
                self.hist[n].append(d)
                self.seen[n].add(d)

    def names_of(self, fd):
        """Names the file open as fd is linked under now (in the model)."""
        st = os.fstat(fd.lfd)
        out = []
        for n in NAMES:
            try:
                s = os.stat(self.mpath(n))
            except FileNotFoundError:
                continue
            if (s.st_dev, s.st_ino) == (st.st_dev, st.st_ino):
                out.append(n)
        return out

    def written_back(self, names):
        """names now hold their written-back version: forget older ones,
        keep a copy of it to show differences against."""
        for n in names:
            self.hist[n] = [digest_or_none(self.mpath(n))]
            self.seen[n].add(self.hist[n][0])
            sp = os.path.join(self.snap, n)
            if os.path.exists(sp):
                os.unlink(sp)
            if self.hist[n][0] is not None:
                sparse_copy(self.mpath(n), sp)

    def both(self, what, fn):
        """Run fn(side) on the model (side 0) then on the mount (side 1);
        results and errnos must be equal.  Returns the result."""
        res = []
        for side in (0, 1):
            try:
                res.append(("ok", fn(side)))
            except OSError as e:
                res.append(("err", errname(e.errno)))
        self.say("%s -> %s" % (what, res[0][1]))
        if res[0] != res[1]:
            raise Fail("op %s: model %s, reftfs %s" % (
                what.split()[0], res[0][1] if res[0][0] == "err" else "ok",
                res[1][1] if res[1][0] == "err" else "ok"),
                "%s: model %r, reftfs %r" % (what, res[0], res[1]))
        return res[0][1] if res[0][0] == "ok" else None

    def mkdirs(self, n):
        d = os.path.dirname(n)
        if d:
            os.makedirs(os.path.join(self.model, d), exist_ok=True)
            os.makedirs(os.path.join(self.run.mnt, d), exist_ok=True)

    # --- random choices ------------------------------------------------

    def size_for(self, n, cur):
        """A random offset or size for name n of current size cur."""
        r = self.rng.random()
        if n in ROOT_NAMES:
            return self.rng.randrange(0, 128 << 10)
        if r < 0.4:
            return self.rng.randrange(0, cur + (64 << 10) + 1)
        if r < 0.55:  # around a chunk boundary
            return max(0, self.rng.randrange(1, 4) * CHUNK +
                       self.rng.randrange(-4096, 4097))
        if r < 0.93:
            return self.rng.randrange(0, 3 * CHUNK)
        return self.far()

    def far(self):
        """An offset past the small mounts' memory: a large hole."""
        return self.rng.randrange(SMALL_MEM, FAR_MAX)

    def length_for(self, n):
        r = self.rng.random()
        if n in ROOT_NAMES or r < 0.6:
            return self.rng.randrange(1, 4096)
        if r < 0.9:
            return self.rng.randrange(4096, 256 << 10)
        return self.rng.randrange(256 << 10, 1536 << 10)

    def cur_size(self, n):
        try:
            return os.stat(self.mpath(n)).st_size
        except FileNotFoundError:
            return 0

    # --- operations ----------------------------------------------------

    def op_open(self):
        n = self.rng.choice(NAMES)
        flags = os.O_RDWR | os.O_CREAT
        if self.rng.random() < 0.3:
            flags |= os.O_TRUNC
        self.mkdirs(n)
        fds = [None, None]

        def fn(side):
            fds[side] = os.open(self.mpath(n) if side == 0 else self.fpath(n),
                                flags, 0o644)
            return "ok"
        self.nfd += 1
        fd = Fd(self.nfd, n, None, None)
        r = self.both("open %s %s%s" % (
            fd, "rw,creat", ",trunc" if flags & os.O_TRUNC else ""), fn)
        if r is None:
            for f in fds:
                if f is not None:
                    os.close(f)
            return
        fd.lfd, fd.mfd = fds
        self.fds.append(fd)
        self.record([n])

    def op_pwrite(self):
        fd = self.rng.choice(self.fds)
        names = self.names_of(fd)
        n = names[0] if names else fd.name
        off = self.size_for(n, os.fstat(fd.lfd).st_size)
        data = self.rng.randbytes(self.length_for(n))
        self.both("pwrite %s off=%d len=%d" % (fd, off, len(data)),
                  lambda s: os.pwrite(fd.lfd if s == 0 else fd.mfd, data,
                                      off))
        self.record(names)

    def op_ftruncate(self):
        fd = self.rng.choice(self.fds)
        names = self.names_of(fd)
        n = names[0] if names else fd.name
        size = self.size_for(n, os.fstat(fd.lfd).st_size)
        if self.rng.random() < 0.2:
            size = 0
        self.both("ftruncate %s %d" % (fd, size),
                  lambda s: os.ftruncate(fd.lfd if s == 0 else fd.mfd, size))
        self.record(names)

    def op_fsync(self):
        fd = self.rng.choice(self.fds)
        self.both("fsync %s" % fd,
                  lambda s: os.fsync(fd.lfd if s == 0 else fd.mfd))

    def op_close(self, fd=None):
        if fd is None:
            fd = self.rng.choice(self.fds)
        self.fds.remove(fd)
        self.both("close %s" % fd,
                  lambda s: os.close(fd.lfd if s == 0 else fd.mfd))

    def op_dup_close(self):
        """close() of a duplicate while the file stays open (a FUSE FLUSH
        without RELEASE), as a shell redirection or dd does."""
        fd = self.rng.choice(self.fds)
        dups = [os.dup(fd.lfd), os.dup(fd.mfd)]
        self.both("close dup of %s" % fd, lambda s: os.close(dups[s]))
        self.run.count["dup-closes"] += 1

    def close_all(self):
        while self.fds:
            self.op_close(self.rng.choice(self.fds))

    def write_whole(self, n):
        """open O_TRUNC, a few writes, close: what torch.save does."""
        self.mkdirs(n)
        pieces = []
        off = 0
        for _ in range(self.rng.randrange(1, 4)):
            b = self.rng.randbytes(self.length_for(n))
            pieces.append((off, b))
            off += len(b)
        if n not in ROOT_NAMES and self.rng.random() < 0.15:
            b = self.rng.randbytes(self.length_for(n))
            off = self.far()
            pieces.append((off, b))
            off += len(b)

        def fn(side):
            p = self.mpath(n) if side == 0 else self.fpath(n)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                for o, b in pieces:
                    if os.pwrite(fd, b, o) != len(b):
                        raise OSError(errno.EIO, "short write")
            finally:
                os.close(fd)
            return off
        self.both("write_whole %s" % n, fn)
        self.record([n])

    def op_write_whole(self):
        self.write_whole(self.rng.choice(NAMES))

    def rename(self, a, b):
        self.mkdirs(b)
        self.both("rename %s %s" % (a, b), lambda s: os.rename(
            self.mpath(a) if s == 0 else self.fpath(a),
            self.mpath(b) if s == 0 else self.fpath(b)))
        self.record([a, b])

    def op_atomic_replace(self):
        n = self.rng.choice(REPLACEABLE)
        self.run.count["atomic-replaces"] += 1
        self.write_whole(n + ".tmp")
        self.rename(n + ".tmp", n)

    def op_rename(self):
        a, b = self.rng.sample(NAMES, 2)
        self.rename(a, b)

    def op_dir_rename(self):
        """Rename one of SWAP_DIRS to the other (absent or empty) or
        exchange the two; their files' histories go along: a name may
        then hold what the same name in the other directory had since
        the last write-back, or what it had itself."""
        a, b = self.rng.sample(SWAP_DIRS, 2)
        pa, pb = self.mpath(a), self.mpath(b)
        if not os.path.isdir(pa):
            return
        swap = os.path.isdir(pb) and (os.listdir(pb) or
                                      self.rng.random() < 0.5)
        move = exchange if swap else os.rename

        def fn(side):
            move(pa if side == 0 else self.fpath(a),
                 pb if side == 0 else self.fpath(b))
            return "ok"
        if self.both("%s %s %s" % ("exchange" if swap else "rename", a, b),
                     fn) is None:
            return
        self.run.count["dir-exchanges" if swap else "dir-renames"] += 1
        for n in SWAP_NAMES:
            na, nb = a + "/" + n, b + "/" + n
            ha, hb = self.hist[na], self.hist[nb]
            self.hist[nb] = hb + ha
            self.hist[na] = ha + hb if swap else ha + [None]
            seen = self.seen[na] | self.seen[nb]
            self.seen[na], self.seen[nb] = set(seen), set(seen)
            self.record([na, nb])

    def op_truncate(self):
        n = self.rng.choice(NAMES)
        size = self.size_for(n, self.cur_size(n))
        self.both("truncate %s %d" % (n, size), lambda s: os.truncate(
            self.mpath(n) if s == 0 else self.fpath(n), size))
        self.record([n])

    def op_unlink(self):
        n = self.rng.choice(NAMES)
        self.both("unlink %s" % n, lambda s: os.unlink(
            self.mpath(n) if s == 0 else self.fpath(n)))
        self.record([n])

    def op_flush(self):
        r = subprocess.run([self.run.admin, "-m", self.run.mnt, "flush",
                            "--wait"], capture_output=True, text=True,
                           timeout=120)
        self.say("flush --wait -> %d" % r.returncode)
        self.run.count["flushes"] += 1
        if r.returncode != 0:
            raise Fail("flush --wait exit %d" % r.returncode,
                       r.stdout + r.stderr)
        # Only sealed files are written back: a file open for writing
        # keeps whatever older version the persist dir has.
        open_names = set()
        for fd in self.fds:
            open_names.update(self.names_of(fd))
        self.written_back([n for n in NAMES if n not in open_names])

    def op_verify(self):
        self.say("verify (live)")
        self.check_exact("live mount", self.run.mnt)

    # --- checks --------------------------------------------------------

    def read_mount(self, n):
        """Digest of n on the mount, None if absent; errors are failures."""
        p = self.fpath(n)
        try:
            d = digest_file(p)
            st = os.stat(p)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise Fail("%s reading a file" % errname(e.errno),
                       "read %s: %s" % (n, e))
        if st.st_size != d[0]:
            raise Fail("stat size != bytes read",
                       "%s: st_size %d, read %d bytes" % (n, st.st_size,
                                                           d[0]))
        return d

    def check_tree(self, what, root, exact_dirs):
        dirs, files = list_tree(root, persist=root == self.run.persist)
        mdirs, mfiles = list_tree(self.model)
        extra = sorted(files - set(NAMES))
        if extra:
            raise Fail("%s: files that never existed" % what,
                       "%s: unexpected %s" % (what, extra))
        if exact_dirs and dirs != mdirs:
            raise Fail("%s: directories differ" % what,
                       "%s: directories %s, model %s" % (
                           what, sorted(dirs), sorted(mdirs)))

    def check_exact(self, what, root):
        """root (the mount or the persist dir) must equal the model."""
        persist = root == self.run.persist
        self.check_tree(what, root, exact_dirs=not persist)
        for n in NAMES:
            want = digest_or_none(self.mpath(n))
            if persist:
                got = digest_or_none(os.path.join(root, n))
            else:
                got = self.read_mount(n)
            if got == want:
                continue
            kind = ("missing" if got is None else
                    "should not exist" if want is None else "content differs")
            detail = "%s: %s: want %s, found %s" % (what, n, show(want),
                                                    show(got))
            if got is not None and want is not None:
                detail += ", first difference at offset %s" % first_diff(
                    self.mpath(n), os.path.join(root, n))
            raise Fail("%s: file %s" % (what, kind), detail)

    def stopped(self, what):
        """The daemon was told to end: wait for it, check the persist dir
        (first: lost data says more than an exit status), then its status,
        which must be 0."""
        rc = self.daemon.wait_exit(what)
        self.check_persist_dir()
        if rc != 0:
            raise Fail("daemon exit %d after %s" % (rc, what),
                       "reftfsd exited %d after %s (want 0); the persist dir "
                       "matched the model\n%s" % (
                           rc, what, self.daemon.log_tail()))

    def check_persist_dir(self):
        """After a clean unmount: plain files equal to the model."""
        p = self.run.persist
        self.check_exact("persist dir after unmount", p)
        tmp = os.path.join(p, ".reftfs-tmp")
        left = os.listdir(tmp) if os.path.isdir(tmp) else []
        if left:
            # Class by pattern: park.7 and park.9 are the same failure.
            pat = " ".join(sorted({re.sub(r"[0-9]+", "N", x) for x in left}))
            raise Fail("persist dir after unmount: .reftfs-tmp holds " + pat,
                       ".reftfs-tmp holds %s" % left)

    def check_allowed(self, what):
        """After SIGKILL: each name holds an allowed version."""
        self.check_tree(what, self.run.mnt, exact_dirs=False)
        for n in NAMES:
            got = self.read_mount(n)
            if got in self.hist[n]:
                continue
            # Say whose version it is: another name's since the last
            # write-back (a stale copy moved by a rename), this name's from
            # before it (a rollback), an old one of another name, or none.
            recent = [m for m in NAMES if m != n and got in self.hist[m]]
            others = [m for m in NAMES if m != n and got in self.seen[m]]
            if got is None:
                kind = "missing"
            elif recent:
                kind = ("holds a version another name had since the last "
                        "write-back")
            elif got in self.seen[n]:
                kind = "holds a version older than the last write-back"
            elif others:
                kind = "holds an old version of another name"
            else:
                kind = "holds content no name ever had"
            lines = ["%s: %s: found %s; allowed (last written back "
                     "first): %s" % (what, n, show(got),
                                     ", ".join(map(show, self.hist[n])))]
            if others:
                lines.append("  that version was held by %s" % others)
            if got is not None:
                sp = os.path.join(self.snap, n)
                if os.path.exists(sp):
                    lines.append("  vs written-back version: first "
                                 "difference at offset %s" %
                                 first_diff(sp, self.fpath(n)))
                if os.path.exists(self.mpath(n)):
                    lines.append("  vs latest version: first difference "
                                 "at offset %s" % first_diff(
                                     self.mpath(n), self.fpath(n)))
            raise Fail("%s: file %s" % (what, kind), "\n".join(lines))

    def resync_model(self):
        """After SIGKILL the mount's state is the truth to go on from."""
        shutil.rmtree(self.model)
        os.makedirs(self.model)
        dirs, files = list_tree(self.run.mnt)
        for d in dirs:
            os.makedirs(os.path.join(self.model, d), exist_ok=True)
        for f in files:
            sparse_copy(self.fpath(f), self.mpath(f))
        self.written_back(NAMES)

    # --- the daemon's life ----------------------------------------------

    def start(self, small=False):
        opts = (SMALL_OPTS if small else NORMAL_OPTS) + [
            "--persist-every", self.persist_every]
        self.say("mount %s" % " ".join(opts))
        self.daemon = Daemon(self.run, opts)
        self.run.mounts += 1

    def after_mount(self, killed):
        """Check the new mount; sometimes on a small-memory mount first."""
        small = self.rng.random() < 0.3
        self.start(small)
        what = "after SIGKILL" if killed else "after unmount"
        try:
            if killed:
                self.check_allowed(what)
                self.resync_model()
            else:
                self.check_exact(what, self.run.mnt)
        except Fail as f:
            if small:
                f.detail += "\n(on a mount with %s)" % " ".join(SMALL_OPTS)
            raise
        if small:
            self.run.count["small-mem-mounts"] += 1
            for n in NAMES:
                if self.cur_size(n) > SMALL_MEM:
                    self.run.count["sparse-files-read-on-them"] += 1
            self.say("unmount (small mount, read only)")
            self.daemon.unmount()
            self.stopped("unmount")
            self.start(False)

    def op_unmount(self):
        self.close_all()
        self.say("unmount")
        self.daemon.unmount()
        self.run.remounts += 1
        self.stopped("unmount")
        self.written_back(NAMES)
        self.after_mount(False)

    def op_lazy_unmount(self):
        """Unmount with files open for writing: they go on being written
        and are closed afterwards; the daemon ends after the last close."""
        if not self.fds:
            return self.op_unmount()
        self.say("lazy unmount with %s open" % " ".join(map(str, self.fds)))
        self.run.count["lazy-unmounts-with-open-files"] += 1
        self.daemon.unmount(lazy=True)
        if self.rng.random() < 0.7:
            self.op_pwrite()
        self.close_all()
        self.run.remounts += 1
        self.stopped("lazy unmount and the last close")
        self.written_back(NAMES)
        self.after_mount(False)

    def op_kill(self):
        self.say("SIGKILL")
        self.daemon.kill()
        for fd in self.fds:
            os.close(fd.lfd)
            try:
                os.close(fd.mfd)
            except OSError:
                pass
        self.fds = []
        self.daemon.unmount(lazy=True)
        self.run.kills += 1
        self.after_mount(True)

    # --- driver ----------------------------------------------------------

    def pick(self):
        ops = [(self.op_write_whole, 8), (self.op_atomic_replace, 8),
               (self.op_rename, 3), (self.op_dir_rename, 3),
               (self.op_truncate, 3),
               (self.op_unlink, 4), (self.op_flush, 8),
               (self.op_verify, 2), (self.op_unmount, 2),
               (self.op_lazy_unmount, 2), (self.op_kill, 3)]
        if len(self.fds) < MAX_FDS:
            ops.append((self.op_open, 10))
        if self.fds:
            ops += [(self.op_pwrite, 25), (self.op_ftruncate, 4),
                    (self.op_fsync, 2), (self.op_close, 9),
                    (self.op_dup_close, 2)]
        fns, weights = zip(*ops)
        return self.rng.choices(fns, weights)[0]

    def run_ops(self):
        self.start()
        for _ in range(self.rng.randrange(4, self.run.max_ops + 1)):
            self.daemon.check_alive()
            self.pick()()
            self.run.ops += 1
        self.daemon.check_alive()
        # Every trial ends with the daemon's end and a check after it.
        end = self.rng.choices([self.op_unmount, self.op_lazy_unmount,
                                self.op_kill], [3, 2, 4])[0]
        end()
        self.close_all()
        self.say("unmount (end of trial)")
        self.daemon.unmount()
        self.stopped("unmount")

    def cleanup(self):
        for fd in self.fds:
            for f in (fd.lfd, fd.mfd):
                try:
                    if f is not None:
                        os.close(f)
                except OSError:
                    pass
        self.fds = []
        if self.daemon is not None:
            self.daemon.teardown()


class Run:
    def __init__(self, args):
        self.mnt = os.path.realpath(args.mnt)
        self.work = os.path.realpath(args.work)
        self.persist = os.path.join(self.work, "persist")
        self.reftfsd = os.environ["REFTFSD"]
        self.admin = os.environ["REFTFS_ADMIN"]
        env_seed = os.environ.get("DIFF_SEED", "")
        self.seed = int(env_seed) if env_seed else random.SystemRandom(
        ).randrange(1, 1 << 31)
        self.trials = int(os.environ.get("DIFF_TRIALS", "") or 200)
        self.max_ops = max(4, int(os.environ.get("DIFF_OPS", "") or 30))
        self.stop = os.environ.get("DIFF_STOP", "") == "1"
        only = os.environ.get("DIFF_ONLY", "")
        self.only = int(only) if only else None
        self.ndaemon = 0
        self.ops = self.mounts = self.remounts = self.kills = 0
        self.count = {k: 0 for k in (
            "flushes", "atomic-replaces", "dir-renames", "dir-exchanges",
            "dup-closes",
            "lazy-unmounts-with-open-files", "small-mem-mounts",
            "sparse-files-read-on-them")}

    def main(self):
        print("seed=%d" % self.seed, flush=True)
        todo = [self.only] if self.only is not None else range(self.trials)
        failures = {}  # kind -> list of trials
        done = 0
        t0 = time.monotonic()
        for i in todo:
            t = Trial(self, i)
            try:
                t.run_ops()
            except Fail as f:
                failures.setdefault(f.kind, []).append(i)
                self.report(t, f)
            finally:
                t.cleanup()
            if is_mounted(self.mnt):
                print("FATAL: %s still mounted after trial %d" % (
                    self.mnt, i), flush=True)
                return 1
            done += 1
            if failures and self.stop:
                break
        print("differential: %d trials, %d ops, %d remounts, %d kills, "
              "seed %d (%.0f s)" % (done, self.ops, self.remounts,
                                    self.kills, self.seed,
                                    time.monotonic() - t0), flush=True)
        print("covered: " + ", ".join("%d %s" % (v, k)
                                      for k, v in self.count.items()))
        if not failures:
            return 0
        print("FAILED: %d of %d trials" % (
            sum(map(len, failures.values())), done))
        for kind, trials in sorted(failures.items()):
            print("  %d x %s; replay: DIFF_SEED=%d DIFF_ONLY=%d" % (
                len(trials), kind, self.seed, trials[0]))
        return 1

    def report(self, t, f):
        print("FAIL seed=%d trial=%d: %s" % (self.seed, t.idx, f.kind))
        print(f.detail)
        print("operations of trial %d (persist-every %s):" % (
            t.idx, t.persist_every))
        print("\n".join(t.oplog))
        print("replay: DIFF_SEED=%d DIFF_ONLY=%d meson test -C build "
              "100-differential -v   (or DIFF_SEED=%d DIFF_TRIALS=%d)" % (
                  self.seed, t.idx, self.seed, t.idx + 1), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mnt", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    # Meson's timeout sends SIGTERM: leave through the finally clauses so
    # no daemon or mount of ours is left (lib.sh's trap is the backstop).
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    return Run(args).main()


if __name__ == "__main__":
    sys.exit(main())
