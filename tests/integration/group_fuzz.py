"""Random namespace and data operations on the nodes of a group, checked
against a model of the whole tree after every operation.

usage: group_fuzz.py MOUNT[,MOUNT...] --ops N [--state F] [--check-only]

Each operation runs on a node drawn at random (its mount point) and the
model (a dict of path -> bytes, and a set of directories) changes as a
POSIX file system would:

  create    a new file, written whole (0 bytes to 3 MiB + change)
  rewrite   an existing file opened O_TRUNC and written whole (the node
            that does it becomes its owner)
  patch     an existing file opened without O_TRUNC, pwrite at a random
            offset, some past EOF (a hole between)
  truncate  truncate(2) down or up
  rename    a file or a directory, sometimes over an existing file
  unlink    a file
  mkdir     a directory, sometimes nested
  rmdir     an empty directory
  read      a file, whole, on some node, compared with the model

After every operation the node that made it and one other node list the
directory it touched (names must equal the model's: a change is on every
node when the call returns) and, every few operations, every node lists
the whole tree and reads a few files back.

--state F: the model is loaded from F when it exists (a previous run's,
after the caller killed and replaced a node) and written there at the
end, so a run can go on where the last left off.  --check-only: load the
model, check every file on every node, change nothing.

The seed is printed first; GROUP_FUZZ_SEED replays a run.  Exit status 0
when every check held, 1 with the first difference and the operations
before it.
"""

import argparse
import base64
import collections
import errno
import json
import os
import random
import sys

CHUNK = 1 << 20
MAX_SIZE = 3 * CHUNK + 12345
# Contents kept per file for explaining a wrong read (the newest among them).
VERSIONS_KEPT = 8


class Mismatch(Exception):
    pass


class Fuzz:
    def __init__(self, mounts, rng, files=None, dirs=None):
        self.m = mounts
        self.rng = rng
        self.files = files if files is not None else {}
        self.dirs = dirs if dirs is not None else {""}
        self.recent = collections.deque(maxlen=12)
        self.n = 0
        # Per file: what was done to it (across renames), so a mismatch
        # can say which of its earlier contents a node returned.
        self.hist = {p: ["(from an earlier run)"] for p in self.files}
        self.versions = {p: [v] for p, v in self.files.items()}

    # --- helpers --------------------------------------------------------

    def path(self, node, rel):
        return os.path.join(self.m[node], rel) if rel else self.m[node]

    def node(self):
        return self.rng.randrange(len(self.m))

    def other(self, node):
        if len(self.m) == 1:
            return node
        return self.rng.choice([k for k in range(len(self.m)) if k != node])

    def data(self, size):
        # Patterned rather than random: cheap, and a misplaced piece shows.
        seed = self.rng.getrandbits(32).to_bytes(4, "little")
        block = (seed * 1024)[:4096]
        reps = size // 4096 + 1
        return (block * reps)[:size]

    def size(self):
        r = self.rng.random()
        if r < 0.3:
            return self.rng.randrange(0, 4096)
        if r < 0.6:
            return self.rng.randrange(0, CHUNK + 100)
        return self.rng.randrange(0, MAX_SIZE)

    def new_name(self, parent):
        while True:
            name = "f%d" % self.rng.randrange(1000)
            rel = os.path.join(parent, name) if parent else name
            if rel not in self.files and rel not in self.dirs:
                return rel

    def children(self, d):
        names = set()
        for p in list(self.files) + list(self.dirs):
            if p and os.path.dirname(p) == d:
                names.add(os.path.basename(p))
        return names

    def note(self, what):
        self.n += 1
        self.recent.append("%d: %s" % (self.n, what))

    def fail(self, msg):
        raise Mismatch("%s\n  operations before it:\n    %s" % (
            msg, "\n    ".join(self.recent)))

    def touched(self, rel, data=None):
        """Record the last note as a change of rel (data: its new bytes)."""
        self.hist.setdefault(rel, []).append(self.recent[-1])
        if data is not None:
            v = self.versions.setdefault(rel, [])
            v.append(data)
            del v[:-VERSIONS_KEPT]  # a file's contents, up to 3 MiB each

    def moved(self, move):
        self.hist = {move(p): h for p, h in self.hist.items()}
        self.versions = {move(p): v for p, v in self.versions.items()}

    def explain(self, rel, got):
        """Which earlier content of rel got matches, and rel's history."""
        olds = self.versions.get(rel, [])[:-1]
        what = "none of its %d earlier contents kept" % len(olds)
        for i in range(len(olds) - 1, -1, -1):
            if olds[i] == got:
                what = "its content %d change(s) back" % (len(olds) - i)
                break
        want = self.files[rel]
        pieces = []
        for off in range(0, max(len(got), len(want)), CHUNK):
            g = got[off:off + CHUNK]
            if g == want[off:off + CHUNK]:
                continue
            src = "no earlier content"
            for i in range(len(olds) - 1, -1, -1):
                o = olds[i][off:off + CHUNK]
                o += bytes(len(g) - len(o)) if len(o) < len(g) else b""
                if o[:len(g)] == g:
                    src = "content %d change(s) back" % (len(olds) - i)
                    break
            pieces.append("piece %d: %s (first bytes %s, want %s)" % (
                off // CHUNK, src, g[:8].hex(), want[off:off + 8].hex()))
        return "got %s\n  %s\n  history of the file:\n    %s" % (
            what, "\n  ".join(pieces), "\n    ".join(self.hist.get(rel, [])))

    # --- checks ---------------------------------------------------------

    def check_dir(self, node, d):
        try:
            got = set(os.listdir(self.path(node, d)))
        except OSError as e:
            self.fail("listdir /%s on node %d: %s" % (d, node, e))
        want = self.children(d)
        if got != want:
            self.fail("/%s on node %d: extra %s, missing %s" % (
                d, node, sorted(got - want), sorted(want - got)))

    def check_file(self, node, rel):
        want = self.files[rel]
        try:
            with open(self.path(node, rel), "rb") as f:
                got = f.read()
        except OSError as e:
            self.fail("read /%s on node %d: %s" % (rel, node, e))
        if got != want:
            at = next((i for i in range(min(len(got), len(want)))
                       if got[i] != want[i]), min(len(got), len(want)))
            self.fail("/%s on node %d: %d bytes, want %d; first "
                      "difference at %d; %s" % (rel, node, len(got),
                                                len(want), at,
                                                self.explain(rel, got)))

    def check_all(self, read_all=False):
        for node in range(len(self.m)):
            for d in sorted(self.dirs):
                self.check_dir(node, d)
            rels = sorted(self.files)
            if not read_all and len(rels) > 4:
                rels = self.rng.sample(rels, 4)
            for rel in rels:
                self.check_file(node, rel)

    # --- operations -----------------------------------------------------

    def write_whole(self, node, rel, data, flags):
        fd = os.open(self.path(node, rel), flags, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view[:CHUNK])
                view = view[n:]
        finally:
            os.close(fd)

    def op_create(self, node):
        rel = self.new_name(self.rng.choice(sorted(self.dirs)))
        data = self.data(self.size())
        self.note("create /%s (%d bytes) on node %d" % (rel, len(data), node))
        self.write_whole(node, rel, data,
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        self.files[rel] = data
        self.hist.pop(rel, None)
        self.versions.pop(rel, None)
        self.touched(rel, data)
        return os.path.dirname(rel)

    def op_rewrite(self, node):
        rel = self.rng.choice(sorted(self.files))
        data = self.data(self.size())
        self.note("rewrite /%s (%d bytes) on node %d" % (rel, len(data),
                                                       node))
        self.write_whole(node, rel, data, os.O_WRONLY | os.O_TRUNC)
        self.files[rel] = data
        self.touched(rel, data)
        return os.path.dirname(rel)

    def op_patch(self, node):
        rel = self.rng.choice(sorted(self.files))
        old = self.files[rel]
        off = self.rng.randrange(0, len(old) + CHUNK // 2 + 1)
        data = self.data(self.rng.randrange(1, CHUNK + 5000))
        self.note("patch /%s at %d (%d bytes) on node %d" % (
            rel, off, len(data), node))
        fd = os.open(self.path(node, rel), os.O_WRONLY)
        try:
            if os.pwrite(fd, data, off) != len(data):
                self.fail("short pwrite")
        finally:
            os.close(fd)
        new = bytearray(old)
        if off > len(new):
            new += bytes(off - len(new))
        new[off:off + len(data)] = data
        self.files[rel] = bytes(new)
        self.touched(rel, self.files[rel])
        return os.path.dirname(rel)

    def op_truncate(self, node):
        rel = self.rng.choice(sorted(self.files))
        old = self.files[rel]
        size = self.rng.randrange(0, len(old) + CHUNK + 1)
        self.note("truncate /%s to %d on node %d" % (rel, size, node))
        os.truncate(self.path(node, rel), size)
        self.files[rel] = old[:size] + bytes(max(0, size - len(old)))
        self.touched(rel, self.files[rel])
        return os.path.dirname(rel)

    def op_rename(self, node):
        if self.rng.random() < 0.25 and len(self.dirs) > 1:
            src = self.rng.choice(sorted(self.dirs - {""}))
            # Not into itself or below it.
            parents = [d for d in self.dirs
                       if d != src and not d.startswith(src + "/")]
            dst = self.new_name(self.rng.choice(sorted(parents)))
            self.note("rename dir /%s -> /%s on node %d" % (src, dst, node))
            os.rename(self.path(node, src), self.path(node, dst))
            move = lambda p: dst + p[len(src):] if (
                p == src or p.startswith(src + "/")) else p
            self.files = {move(p): v for p, v in self.files.items()}
            self.dirs = {move(d) for d in self.dirs}
            self.moved(move)
            for p in self.files:
                if p.startswith(dst + "/"):
                    self.touched(p)
            return os.path.dirname(src)
        src = self.rng.choice(sorted(self.files))
        if self.rng.random() < 0.3 and len(self.files) > 1:
            dst = self.rng.choice(sorted(set(self.files) - {src}))
        else:
            dst = self.new_name(self.rng.choice(sorted(self.dirs)))
        self.note("rename /%s -> /%s on node %d" % (src, dst, node))
        os.rename(self.path(node, src), self.path(node, dst))
        self.files[dst] = self.files.pop(src)
        self.hist[dst] = self.hist.pop(src, [])
        self.versions[dst] = self.versions.pop(src, [])
        self.touched(dst)
        return os.path.dirname(dst)

    def op_unlink(self, node):
        rel = self.rng.choice(sorted(self.files))
        self.note("unlink /%s on node %d" % (rel, node))
        os.unlink(self.path(node, rel))
        del self.files[rel]
        self.hist.pop(rel, None)
        self.versions.pop(rel, None)
        return os.path.dirname(rel)

    def op_mkdir(self, node):
        rel = self.new_name(self.rng.choice(sorted(self.dirs)))
        rel = os.path.join(os.path.dirname(rel),
                           "d" + os.path.basename(rel)[1:])
        if rel in self.dirs or rel in self.files:
            return None
        self.note("mkdir /%s on node %d" % (rel, node))
        os.mkdir(self.path(node, rel))
        self.dirs.add(rel)
        return os.path.dirname(rel)

    def op_rmdir(self, node):
        empty = [d for d in self.dirs if d and not self.children(d)]
        if not empty:
            return None
        rel = self.rng.choice(sorted(empty))
        self.note("rmdir /%s on node %d" % (rel, node))
        os.rmdir(self.path(node, rel))
        self.dirs.discard(rel)
        return os.path.dirname(rel)

    def op_read(self, node):
        rel = self.rng.choice(sorted(self.files))
        self.note("read /%s on node %d" % (rel, node))
        self.touched(rel)
        self.check_file(node, rel)
        return None

    OPS = [("create", 6), ("rewrite", 2), ("patch", 3), ("truncate", 2),
           ("rename", 3), ("unlink", 2), ("mkdir", 2), ("rmdir", 1),
           ("read", 4)]

    def step(self):
        names = [n for n, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        while True:
            name = self.rng.choices(names, weights)[0]
            if name not in ("create", "mkdir", "rmdir") and not self.files:
                continue
            break
        node = self.node()
        try:
            d = getattr(self, "op_" + name)(node)
        except OSError as e:
            self.fail("%s on node %d: %s" % (name, node, e))
        if d is not None:
            self.check_dir(node, d)
            self.check_dir(self.other(node), d)


def save_state(path, fz):
    st = {"files": {p: base64.b64encode(v).decode() for p, v in
                    fz.files.items()},
          "dirs": sorted(fz.dirs),
          "history": fz.hist}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(st, f)
    os.replace(tmp, path)


def load_state(path):
    if not path or not os.path.exists(path):
        return None, None, {}
    with open(path) as f:
        st = json.load(f)
    return ({p: base64.b64decode(v) for p, v in st["files"].items()},
            set(st["dirs"]), st.get("history", {}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mounts")
    ap.add_argument("--ops", type=int, default=200)
    ap.add_argument("--state")
    ap.add_argument("--check-only", action="store_true")
    a = ap.parse_args()
    seed = os.environ.get("GROUP_FUZZ_SEED") or str(random.getrandbits(48))
    print("group_fuzz: seed %s (GROUP_FUZZ_SEED=%s replays it)" % (
        seed, seed), flush=True)
    files, dirs, hist = load_state(a.state)
    fz = Fuzz(a.mounts.split(","), random.Random(seed), files, dirs)
    for p, h in hist.items():
        if p in fz.files:
            fz.hist[p] = h + ["(a run ends)"] if h[-1:] != [
                "(a run ends)"] else h
    try:
        if a.check_only:
            fz.check_all(read_all=True)
        else:
            for i in range(a.ops):
                fz.step()
                if i % 25 == 24:
                    fz.check_all()
            fz.check_all(read_all=True)
    except Mismatch as e:
        print("group_fuzz: FAIL (seed %s): %s" % (seed, e), flush=True)
        return 1
    if a.state:
        save_state(a.state, fz)
    print("group_fuzz: %d operations, %d files, %d directories: every node "
          "agrees with the model" % (fz.n, len(fz.files), len(fz.dirs)),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
