"""Concurrent writers on several nodes of a group over the same files,
checked against a model of the group's rule (issue 30).

usage: group_writers.py MOUNT,MOUNT,... --state DIR --seed S --pids P,P,...
                        [--logs L,L,...] [--rounds N] [--kills K]
                        [--files N] [--writers N] [--ballast MIB]
                        [--protect SCHEME] [--serial] [--check] [--final]

256-group-writers.sh runs it (and says what each option is for).

The rule the model follows (issue 30; docs/design.md as built): a
file's content is whole-file, last close wins in the log's order.  Each
node that writes a file has its own version of it while its writers are
open: the file as that node had it at its first change (a write, a
truncate, an O_TRUNC open), plus its own changes; at the node's last close
the version is sealed through the log, and the seal that comes last is
the file's content on every node.  A writer whose version cannot be sealed
gets EIO (from a write or from close()), logged by its daemon.

So after a quiet point (every writer closed, `protect --wait` on each
node) every node must read the same bytes for every file, and those must
be one of the round's candidates: for each ordered sequence of distinct
writers w1..wk whose close succeeded (k >= 1), wk's changes applied to ...
applied to w1's changes applied to the content before the round; the
content before the round itself when no writer's close succeeded.  A
writer that got an error may or may not be sealed (its changes up to the
error are candidates, not required).  In a barrier round every writer
opens and makes its changes, then all wait at a barrier before any closes,
so every writer's base is the content before the round: the candidates
are each writer's changes on that content alone.  Then `reftfs-admin
verify` must exit 0 on every node.

A writer may fsync in the middle of its changes (free rounds; one writer
per file at most).  Under --sync protect (a group with --protect) an
fsync that returns 0 has sealed that node's version as it stood, through
the log, and protected it: so the writer's changes are two seals, the
ones before the fsync (sure) and the ones after it (sealed by the close,
as for any writer), each a member of the sequences above on its own; the
second never comes first, since its base is the first's seal or a later
one.  Under --protect none fsync seals nothing (--sync none): one seal,
at the close.

Each round (its operations drawn from the seed and the round's number,
so that a replay does the same):
  - sometimes a file is replaced first (unlinked, another created whole);
  - 1 to 4 files get 1 to 3 actors each, on distinct nodes, each in its
    own thread: a writer opens the file without O_TRUNC (sometimes with
    it), makes 1 to 6 changes (pwrite, a run of 64 KiB pwrites, ftruncate
    down or up; overlapping ranges, some across piece boundaries or past
    EOF) with short pauses, and closes; in a free round an actor may also
    be a truncate(2) of the path, a seal of its own;
  - readers on other nodes read files nobody writes this round: they must
    read the model's bytes while the others write;
  - a node may be SIGKILLed in the middle of the round (its writers then
    fail, any of them may or may not have been sealed) or after the
    round's quiet point: the driver exits 3 and the caller reaps it,
    waits for the others to see it dead, runs --check on the survivors,
    starts a replacement and runs --check --final on every node.

After a kill, a file whose only up-to-date copy may have been on the
dead node before it was protected may read EIO on any node: one that a
writer on the dead node may have sealed in the round it was killed, or
one written in that round with a piece on that node before it (a new
seal keeps the pieces it did not change where they are); with --protect
none, any file with a piece only that node held.  A check unlinks every
file that reads EIO (and the next round makes another); no other file
may read EIO.

Any errno other than EIO from a writer on a live node breaks the rule;
an EIO must have a line in its daemon's log (--logs), at level error or
warning, that names the file (its name, or "inode N"/"ino N").

The seed is printed first; the caller's WRITERS_FUZZ_SEED replays it.
Exit status: 0 all held, 3 a node was killed (its id on the last line,
"killed N"), 1 with the first difference, the round's operations and the
rounds before it.
"""

import argparse
import errno
import hashlib
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

CHUNK = 1 << 20
BLOCK = 64 << 10
MAX_SIZE = 4 * CHUNK + 300000  # no change makes a file larger
ADMIN = os.environ.get("REFTFS_ADMIN", "reftfs-admin")
# Recent rounds' operations kept for a failure's report.
HISTORY_KEPT = 6
# Errors a writer on a node that was killed under it may get.
DEAD_ERRNOS = {errno.ENOTCONN, errno.ECONNABORTED, errno.EIO, errno.ENOENT,
               errno.ESTALE, errno.EBADF}


class Fail(Exception):
    pass


def sha(b):
    return hashlib.sha1(b).hexdigest()[:16]


def ename(e):
    return errno.errorcode.get(e, str(e))


def apply_ops(content, ops):
    """content with ops applied: ("pwrite", off, bytes), ("trunc", size);
    ("fsync",) changes nothing."""
    b = bytearray(content)
    for op in ops:
        if op[0] == "fsync":
            continue
        if op[0] == "trunc":
            size = op[1]
            if size < len(b):
                del b[size:]
            else:
                b += bytes(size - len(b))
        else:
            _, off, data = op
            if off > len(b):
                b += bytes(off - len(b))
            b[off:off + len(data)] = data
    return bytes(b)


def op_str(op):
    if op[0] == "fsync":
        return "fsync"
    if op[0] == "trunc":
        return "truncate to %d" % op[1]
    return "pwrite %d+%d" % (op[1], len(op[2]))


# --- the model's state between runs ----------------------------------------

class State:
    """The model: each file's bytes (one file each under DIR/model), what
    the last rounds did, the round counter, the files a kill may have
    lost.  Kept in DIR so that a run goes on after a kill."""

    def __init__(self, d):
        self.dir = d
        self.mdir = os.path.join(d, "model")
        os.makedirs(self.mdir, exist_ok=True)
        self.round = 0
        self.files = {}       # name -> bytes
        self.next_name = 0
        self.history = []     # [[line, ...] per round], newest last
        self.lost_ok = {}     # name -> why it may read EIO
        self.dead = None      # a node killed and not yet replaced
        self.kills = []       # the kills so far, in words
        self.held = []        # files the kill to come may take
        p = os.path.join(d, "state.json")
        if os.path.exists(p):
            with open(p) as f:
                st = json.load(f)
            self.round = st["round"]
            self.next_name = st["next_name"]
            self.history = st["history"]
            self.lost_ok = st["lost_ok"]
            self.dead = st["dead"]
            self.kills = st["kills"]
            self.held = st["held"]
            for name in st["files"]:
                with open(os.path.join(self.mdir, name), "rb") as f:
                    self.files[name] = f.read()

    def save(self):
        for name in os.listdir(self.mdir):
            if name not in self.files:
                os.unlink(os.path.join(self.mdir, name))
        for name, data in self.files.items():
            p = os.path.join(self.mdir, name)
            with open(p + ".tmp", "wb") as f:
                f.write(data)
            os.replace(p + ".tmp", p)
        st = {"round": self.round, "next_name": self.next_name,
              "history": self.history[-HISTORY_KEPT:],
              "lost_ok": self.lost_ok, "dead": self.dead,
              "kills": self.kills, "held": self.held,
              "files": sorted(self.files)}
        p = os.path.join(self.dir, "state.json")
        with open(p + ".tmp", "w") as f:
            json.dump(st, f)
        os.replace(p + ".tmp", p)


# --- actors -----------------------------------------------------------------

class Actor:
    """One writer (or truncate(2)) on one node's mount, run in a thread.

    ops are made before the round starts (the seed decides them, not the
    threads' timing); done holds those that returned success, in order.
    """

    def __init__(self, node, name, kind, otrunc, ops, pauses):
        self.node = node
        self.name = name
        self.kind = kind      # "write" or "truncate(2)"
        self.otrunc = otrunc
        self.ops = ops        # [("pwrite", off, data) | ("trunc", size)
                              #  | ("fsync",)]
        self.pauses = pauses  # seconds before each op, and before close
        self.done = []
        self.errors = []      # (call, errno)
        self.closed = None    # True: close (or truncate(2)) returned 0

    def label(self):
        return "node %d %s" % (self.node, self.kind)

    def describe(self):
        head = "%s /%s%s:" % (self.label(), self.name,
                              " O_TRUNC" if self.otrunc else "")
        ops = ["%s%s" % (op_str(op), "" if i < len(self.done) else
                         " (not done)") for i, op in enumerate(self.ops)]
        if self.closed:
            end = "closed: 0"
        elif self.errors:
            end = "; ".join("%s: %s" % (c, ename(e))
                            for c, e in self.errors)
        else:
            end = "never closed"
        return "%s %s; %s" % (head, ", ".join(ops), end)

    def err(self, call, e):
        self.errors.append((call, e.errno))

    def run(self, path, barrier):
        if self.kind == "truncate(2)":
            time.sleep(self.pauses[0])
            try:
                os.truncate(path, self.ops[0][1])
                self.done.append(self.ops[0])
                self.closed = True
            except OSError as e:
                self.err("truncate(2)", e)
            return
        fd = None
        try:
            time.sleep(self.pauses[0])
            flags = os.O_WRONLY | (os.O_TRUNC if self.otrunc else 0)
            try:
                fd = os.open(path, flags)
            except OSError as e:
                self.err("open", e)
                return
            if self.otrunc:
                self.done.append(("trunc", 0))
            for i, op in enumerate(self.ops[1 if self.otrunc else 0:]):
                if i and self.pauses[i]:
                    time.sleep(self.pauses[i])
                try:
                    if op[0] == "fsync":
                        os.fsync(fd)
                    elif op[0] == "trunc":
                        os.ftruncate(fd, op[1])
                    else:
                        view = memoryview(op[2])
                        off = op[1]
                        while view:
                            n = os.pwrite(fd, view[:BLOCK], off)
                            view = view[n:]
                            off += n
                except OSError as e:
                    self.err({"fsync": "fsync", "trunc": "ftruncate"}.get(
                        op[0], "pwrite"), e)
                    # A short run of pwrites: what went in is a change.
                    if op[0] == "pwrite" and off > op[1]:
                        self.done.append(("pwrite", op[1],
                                          op[2][:off - op[1]]))
                    break
                self.done.append(op)
        finally:
            if barrier is not None:
                try:
                    barrier.wait()
                except threading.BrokenBarrierError:
                    pass
            if fd is not None:
                time.sleep(self.pauses[-1])
                try:
                    os.close(fd)
                    self.closed = not self.errors
                except OSError as e:
                    self.err("close", e)

    def sealed(self):
        """"sure": its close returned 0 with no error before; "maybe": an
        error, its changes up to it may or may not be the file's; "none":
        it changed nothing."""
        if not self.done:
            return "none"
        return "sure" if self.closed else "maybe"

    def seals(self, fsync_seals):
        """Its changes as the seals they make, [(ops, "sure" | "maybe")]:
        with fsync_seals (--sync protect) split at each fsync that
        returned 0, whose seal is sure; the changes after the last one
        are sealed as its close says."""
        segs, cur = [], []
        for op in self.done:
            if op[0] != "fsync":
                cur.append(op)
            elif fsync_seals and cur:
                segs.append((cur, "sure"))
                cur = []
        if cur:
            segs.append((cur, "sure" if self.closed else "maybe"))
        return segs


class Reader:
    """Reads a file nobody writes this round, on one node, meanwhile."""

    def __init__(self, node, name, want, pause):
        self.node = node
        self.name = name
        self.want = want
        self.pause = pause
        self.got = None
        self.error = None

    def run(self, path, barrier):
        time.sleep(self.pause)
        try:
            with open(path, "rb") as f:
                self.got = f.read()
        except OSError as e:
            self.error = e.errno


# --- the driver -------------------------------------------------------------

class Fuzz:
    def __init__(self, a, st):
        self.a = a
        self.st = st
        self.m = a.mounts.split(",")
        self.n = len(self.m)
        self.pids = [int(p) for p in a.pids.split(",")]
        self.logs = a.logs.split(",") if a.logs else [None] * self.n
        self.live = [k for k in range(self.n) if k != st.dead]
        self.lines = []   # this round's operations, as they are made
        self.peak = {}    # node -> its status at its most memory used
        self.broke = []   # errors of this round the rule does not allow

    def rng(self, what):
        return random.Random("%s:%d:%s" % (self.a.seed, self.st.round, what))

    def path(self, node, name):
        return os.path.join(self.m[node], name)

    def say(self, msg):
        print("group_writers: " + msg, flush=True)

    def note(self, line):
        self.lines.append(line)

    def fail(self, msg):
        if self.broke:
            msg += "\n  and errors the rule does not allow, this round:" \
                "\n    " + "\n    ".join(self.broke)
        hist = []
        for r in self.st.history[-HISTORY_KEPT:]:
            hist += r
        raise Fail("%s\n  this round's operations:\n    %s\n"
                   "  the rounds before it:\n    %s\n  kills so far: %s" % (
                       msg, "\n    ".join(self.lines) or "(none)",
                       "\n    ".join(hist) or "(none)",
                       "; ".join(self.st.kills) or "none"))

    def admin(self, node, *args, timeout=120):
        try:
            p = subprocess.run([ADMIN, "-m", self.m[node]] + list(args),
                               capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return 124, "(no answer in %d s)" % timeout
        return p.returncode, (p.stdout + p.stderr).strip()

    # --- drawing a round ------------------------------------------------

    def data(self, rng, n):
        return rng.randbytes(n)

    def draw_offset(self, rng, size, hot):
        r = rng.random()
        if r < 0.45:
            off = hot + rng.randrange(-100000, 100000)
        elif r < 0.7:
            off = CHUNK * rng.randrange(0, size // CHUNK + 2) + \
                rng.randrange(-5000, 5000)
        else:
            off = rng.randrange(0, size + 300000)
        return max(0, min(off, MAX_SIZE - 1))

    def draw_writer(self, rng, node, name, hot, size, fsync=False):
        otrunc = rng.random() < 0.07
        ops = [("trunc", 0)] if otrunc else []
        est = 0 if otrunc else size
        budget = rng.randrange(64 << 10, 640 << 10)
        for _ in range(rng.randrange(1, 7)):
            r = rng.random()
            if r < 0.15:
                r2 = rng.random()
                if r2 < 0.1:
                    new = 0
                elif r2 < 0.4:
                    new = CHUNK * rng.randrange(0, est // CHUNK + 2) + \
                        rng.randrange(-3000, 3000)
                else:
                    new = rng.randrange(0, est + 400000)
                new = max(0, min(new, MAX_SIZE))
                ops.append(("trunc", new))
                est = new
                continue
            if r < 0.35:
                # A run of 64 KiB pwrites, as a checkpoint's save does.
                off = self.draw_offset(rng, est, hot) // BLOCK * BLOCK
                n = BLOCK * rng.randrange(2, 17)
            else:
                off = self.draw_offset(rng, est, hot)
                n = rng.randrange(1, 200000)
            n = max(1, min(n, budget, MAX_SIZE - off))
            budget -= n
            ops.append(("pwrite", off, self.data(rng, n)))
            est = max(est, off + n)
            if budget <= 0:
                break
        if fsync:
            # After a change: the writer's version so far is sealed.
            ops.insert(rng.randrange(1, len(ops) + 1), ("fsync",))
        pauses = [rng.random() * 0.08] + [
            rng.random() * 0.03 if rng.random() < 0.5 else 0
            for _ in ops] + [rng.random() * 0.05]
        return Actor(node, name, "write", otrunc, ops, pauses)

    def draw_round(self, rng):
        """The actors, readers and kill of this round."""
        barrier = rng.random() < 0.35
        names = self.work_files()
        k = min(len(names), rng.choice([1, 2, 2, 3, 3, 4]))
        touched = rng.sample(names, k)
        actors = []
        for name in touched:
            size = len(self.st.files[name])
            hot = rng.randrange(0, max(size, 1) + 200000)
            nw = min(len(self.live), self.a.writers,
                     rng.choice([1, 2, 2, 2, 3, 3]))
            # One writer of the file may fsync midway (free rounds).
            fsyncer = rng.randrange(nw) if not barrier and \
                rng.random() < 0.5 else -1
            for i, node in enumerate(rng.sample(self.live, nw)):
                if not barrier and rng.random() < 0.1:
                    new = rng.randrange(0, size + CHUNK)
                    actors.append(Actor(node, name, "truncate(2)", False,
                                        [("trunc", min(new, MAX_SIZE))],
                                        [rng.random() * 0.15]))
                else:
                    actors.append(self.draw_writer(rng, node, name, hot,
                                                   size, i == fsyncer))
        readers = []
        calm = [nm for nm in names if nm not in touched]
        heavy = [nm for nm in sorted(self.st.files)
                 if nm.startswith("ballast")]
        for node in self.live:
            r = rng.random()
            if heavy and r < 0.4:
                nm = rng.choice(heavy)
            elif calm and r < 0.7:
                nm = rng.choice(calm)
            else:
                nm = None
            if nm:
                readers.append(Reader(node, nm, self.st.files[nm],
                                      rng.random() * 0.1))
        return barrier, actors, readers

    # --- candidates -----------------------------------------------------

    def candidates(self, before, acts, barrier):
        """{sha: (label, bytes)} of what the file may hold after the round."""
        fsync_seals = self.a.protect != "none"
        # The seals: (actor, its nth, ops, "sure" | "maybe").
        pool = [(a, j, ops, how) for a in acts
                for j, (ops, how) in enumerate(a.seals(fsync_seals))]
        cands = {}
        if not any(how == "sure" for _, _, _, how in pool):
            cands[sha(before)] = ("the content before the round", before)
        if barrier:
            seqs = [(u,) for u in pool]
        else:
            seqs = [s for k in range(1, len(pool) + 1)
                    for s in itertools.permutations(pool, k)
                    if s[0][1] == 0 and all(
                        s[x][1] < s[y][1] for x in range(len(s))
                        for y in range(x + 1, len(s))
                        if s[x][0] is s[y][0])]
        for s in seqs:
            c = before
            for _, _, ops, _ in s:
                c = apply_ops(c, ops)
            cands.setdefault(sha(c), (" then ".join(
                "node %d's%s" % (a.node, " after its fsync" if j else
                                 "") for a, j, _, _ in s) + " changes", c))
        return cands

    # --- checks -----------------------------------------------------------

    def read(self, node, name, drop=False):
        """bytes, or the errno a read of node's copy got."""
        try:
            fd = os.open(self.path(node, name), os.O_RDONLY)
        except OSError as e:
            return e.errno
        try:
            if drop:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            out = []
            while True:
                b = os.read(fd, 4 << 20)
                if not b:
                    break
                out.append(b)
            return b"".join(out)
        except OSError as e:
            return e.errno
        finally:
            os.close(fd)

    def explain(self, got, cands, before):
        """Which candidate got is, or per piece which candidate it matches."""
        for lab, c in cands.values():
            if c == got:
                return "candidate %s" % lab
        parts = []
        allc = list(cands.values()) + [("before the round", before)]
        for off in range(0, len(got), CHUNK):
            g = got[off:off + CHUNK]
            src = [lab for lab, c in allc if c[off:off + CHUNK] == g]
            parts.append("piece %d: %s" % (
                off // CHUNK, src[0] if src else "no candidate's"))
        return "none of the %d candidates (%d bytes; %s)" % (
            len(cands), len(got), "; ".join(parts))

    def placement(self, name, nodes):
        out = []
        for k in nodes:
            rc, txt = self.admin(k, "placement", "/" + name, timeout=30)
            out.append("placement /%s on node %d (exit %d):\n      %s" % (
                name, k, rc, "\n      ".join(txt.splitlines())))
        return "\n    ".join(out)

    def check_file(self, name, cands, before, nodes, lost_ok):
        """Every node reads the same candidate: the one it is, or fail."""
        got = {k: self.read(k, name) for k in nodes}
        if self.agree(got, cands, lost_ok):
            return got
        # Again from the daemons, past the page cache, after a moment:
        # is it the kernel's cache, or the node's own bytes, for good?
        time.sleep(2)
        again = {k: self.read(k, name, drop=True) for k in nodes}
        lines = []
        for k in nodes:
            for what, g in (("read", got[k]), ("2 s later, uncached",
                                               again[k])):
                if isinstance(g, int):
                    desc = ename(g)
                else:
                    desc = "%s: %s" % (sha(g), self.explain(g, cands,
                                                            before))
                lines.append("node %d %s: %s" % (k, what, desc))
        diff = self.odd_nodes(got)
        self.fail("/%s: the nodes do not read one candidate%s\n    %s\n"
                  "    %s" % (name, diff, "\n    ".join(lines),
                              self.placement(name, nodes)))

    def odd_nodes(self, got):
        """Which nodes differ from which, in words."""
        byval = {}
        for k, g in got.items():
            byval.setdefault(g if isinstance(g, int) else sha(g),
                             []).append(k)
        if len(byval) < 2:
            return ": every node reads the same, not a candidate" if \
                not isinstance(next(iter(got.values())), int) else ""
        groups = sorted(byval.values(), key=len)
        nodes = lambda g: "node%s %s" % ("s" if len(g) > 1 else "",
                                          ",".join(map(str, g)))
        if len(groups) == 2 and len(groups[0]) < len(groups[1]):
            return ": %s differ%s from %s" % (
                nodes(groups[0]), "" if len(groups[0]) > 1 else "s",
                nodes(groups[1]))
        return ": %d different contents on %d nodes" % (len(groups),
                                                        len(got))

    def agree(self, got, cands, lost_ok):
        vals = [g for g in got.values() if not isinstance(g, int)]
        errs = [g for g in got.values() if isinstance(g, int)]
        if errs and not (lost_ok and all(e == errno.EIO for e in errs)):
            return False
        if len({sha(v) for v in vals}) > 1:
            return False
        return not vals or sha(vals[0]) in cands

    def check_all(self, nodes, cands=None, verify=True, final=False,
                  ballast=True):
        """A quiet point: every file on every node in nodes against its
        candidates (the model's bytes for a file not written; the
        ballast only when asked: it is large and nobody writes it), then
        verify on each; the model takes what they read."""
        cands = cands or {}
        for name in sorted(self.st.files):
            if not ballast and name.startswith("ballast"):
                continue
            before = self.st.files[name]
            c = cands.get(name) or {sha(before): ("the model's", before)}
            lost = name in self.st.lost_ok
            got = self.check_file(name, c, before, nodes, lost)
            vals = [g for g in got.values() if not isinstance(g, int)]
            if len(vals) < len(got):
                # Lost with the node killed: it goes, so that nothing
                # later depends on what it held.
                self.say("/%s reads EIO on node(s) %s (%s): unlinked" % (
                    name, ",".join(str(k) for k, g in got.items()
                                   if isinstance(g, int)),
                    self.st.lost_ok[name]))
                self.drop_file(name, nodes[0])
                continue
            self.st.files[name] = vals[0]
        if final:
            self.st.lost_ok = {}
        if verify:
            self.verify(nodes)

    def drop_file(self, name, node):
        try:
            os.unlink(self.path(node, name))
        except OSError as e:
            self.fail("unlink of lost /%s on node %d: %s" % (
                name, node, ename(e.errno)))
        del self.st.files[name]
        self.st.lost_ok.pop(name, None)
        self.note("unlink /%s on node %d (it read EIO after the kill)" % (
            name, node))

    def listing(self, nodes):
        """ls of every node, for a report."""
        ls = []
        for j in nodes:
            rc, txt = self.admin(j, "ls", timeout=30)
            ls.append("ls on node %d (exit %d):\n      %s" % (
                j, rc, "\n      ".join(txt.splitlines())))
        return "\n    ".join(ls)

    def not_writing(self, nodes):
        """At a quiet point no node may show a file as being written:
        every writer closed (a writer's node that died has none).  A
        close returns before the kernel's RELEASE of the file reaches
        the daemon, so a node has 3 s to say so."""
        end = time.monotonic() + 3
        for k in nodes:
            while True:
                rc, txt = self.admin(k, "--json", "ls", timeout=30)
                if rc != 0:
                    self.fail("ls on node %d exits %d: %s" % (k, rc, txt))
                busy = ["/" + f["path"].lstrip("/")
                        for f in json.loads(txt)
                        if f.get("state") == "writing"]
                if not busy:
                    break
                if time.monotonic() > end:
                    self.fail("node %d shows %s as being written 3 s after "
                              "every writer closed\n    %s" % (
                                  k, " ".join(busy), self.listing(nodes)))
                time.sleep(0.2)

    def verify(self, nodes):
        self.not_writing(nodes)
        for k in nodes:
            rc, txt = self.admin(k, "verify")
            if rc == 0:
                continue
            # Is it for good?  What it says 2 s later goes with it.
            time.sleep(2)
            rc2, txt2 = self.admin(k, "verify")
            self.fail("verify on node %d exits %d:\n      %s\n"
                      "    2 s later it exits %d:\n      %s\n    %s" % (
                          k, rc, "\n      ".join(txt.splitlines()), rc2,
                          "\n      ".join(txt2.splitlines()),
                          self.listing(nodes)))

    def protect_wait(self, nodes):
        if self.a.protect == "none":
            return  # nothing to wait for (and protect says so, exit 1)
        for k in nodes:
            rc, txt = self.admin(k, "protect", "--wait", timeout=90)
            if rc != 0:
                # What it waits for, as it says without waiting.
                rc2, now = self.admin(k, "protect", timeout=30)
                self.fail("protect --wait on node %d exits %d: %s\n"
                          "    protect on node %d now (exit %d):\n"
                          "      %s\n    %s" % (
                              k, rc, txt.splitlines()[-1] if txt else "",
                              k, rc2, "\n      ".join(now.splitlines()),
                              self.listing(nodes)))

    def wait_dead(self, dead, secs=30):
        """Until every live node's membership says node dead is dead."""
        end = time.monotonic() + secs
        for k in self.live:
            while True:
                rc, txt = self.admin(k, "--json", "group", timeout=30)
                if rc == 0 and [m["state"] for m in json.loads(txt)[
                        "members"] if m["node"] == str(dead)] == ["dead"]:
                    break
                if time.monotonic() > end:
                    self.fail("node %d does not see node %d dead after "
                              "%d s" % (k, dead, secs))
                time.sleep(0.1)

    def pieces_on(self, node, names, only):
        """Of names, the files with a piece that node holds (only: that
        no other node holds), as the first live node's placement says."""
        out = []
        for name in names:
            rc, txt = self.admin(self.live[0], "--json", "placement",
                                 "/" + name, timeout=30)
            if rc != 0:
                self.fail("placement /%s on node %d exits %d: %s" % (
                    name, self.live[0], rc, txt))
            for pc in json.loads(txt):
                held = {int(x) for x in str(pc.get("nodes", "")).split("+")
                        if x.strip()}
                if node in held and (not only or held == {node}):
                    out.append(name)
                    break
        return out

    def mem_now(self, k):
        """Node k's arena: (used, budget, own, copies, fetched, parity,
        evictable chunks, chunks evicted, ENOSPC), or None."""
        rc, txt = self.admin(k, "--json", "status", timeout=30)
        if rc != 0:
            return None
        st = json.loads(txt)
        m, c = st["memory"], st["counters"]
        return (m["used_bytes"], m["budget_bytes"], m["data_bytes"],
                m["copies_bytes"], m["cached_bytes"], m["parity_bytes"],
                m["chunks_evictable"], c["evicted_chunks"], c["enospc"])

    @staticmethod
    def mem_str(p):
        mib = lambda b: "%.0f" % (b / (1 << 20))
        return ("%s of %s MiB (own %s, copies %s, fetched %s, parity %s), "
                "%d chunks evictable, %d evicted, %d ENOSPC" % (
                    mib(p[0]), mib(p[1]), mib(p[2]), mib(p[3]), mib(p[4]),
                    mib(p[5]), p[6], p[7], p[8]))

    def memory(self, nodes):
        """Each node's arena now: the peak of its use is in the report."""
        for k in nodes:
            now = self.mem_now(k)
            if now and now[0] >= self.peak.get(k, (-1,))[0]:
                self.peak[k] = now

    def memory_report(self):
        return "; ".join("node %d peak %s" % (k, self.mem_str(p))
                         for k, p in sorted(self.peak.items()))

    def log_size(self, k):
        try:
            return os.path.getsize(self.logs[k]) if self.logs[k] else 0
        except OSError:
            return 0

    def logged(self, k, start, name, ino):
        """Has node k's log a line since start naming the file?"""
        if not self.logs[k]:
            return True
        with open(self.logs[k], "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
        pat = re.compile(r"(error|warning):.*(\b%s\b|\bino(de)? %d\b)" % (
            re.escape(name), ino))
        return any(pat.search(line) for line in text.splitlines())

    # --- a round ------------------------------------------------------------

    def work_files(self):
        return sorted(n for n in self.st.files
                      if not n.startswith("ballast"))

    def create(self, node, name, data):
        fd = os.open(self.path(node, name),
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view[:CHUNK]):]
        finally:
            os.close(fd)
        self.st.files[name] = data
        self.note("create /%s (%d bytes) on node %d" % (name, len(data),
                                                        node))

    def setup(self, rng):
        """Files made or replaced before the writers start: the working
        files, and each node's ballast (written by that node, read by
        the others: their fetched copies fill the arenas)."""
        if self.a.ballast:
            for k in self.live:
                name = "ballast%d" % k
                if name not in self.st.files:
                    self.create(k, name, self.data(
                        rng, self.a.ballast << 20))
        work = self.work_files()
        if len(work) >= self.a.files and rng.random() < 0.08:
            name = rng.choice(work)
            node = rng.choice(self.live)
            os.unlink(self.path(node, name))
            del self.st.files[name]
            self.note("unlink /%s on node %d" % (name, node))
        while len(self.work_files()) < self.a.files:
            name = "f%d" % self.st.next_name
            self.st.next_name += 1
            size = rng.randrange(0, 4096) if rng.random() < 0.15 else \
                rng.randrange(0, 3 * CHUNK + 500000)
            self.create(rng.choice(self.live), name, self.data(rng, size))

    def round(self, kill_mid, kill_after):
        rng = self.rng("round")
        self.lines = []
        self.note("round %d (seed %s)" % (self.st.round, self.a.seed))
        try:
            self.setup(rng)
        except OSError as e:
            self.fail("creating the round's files: %s" % e)
        barrier, actors, readers = self.draw_round(rng)
        barrier = barrier and not self.a.serial
        ino = {}
        for name in {a.name for a in actors}:
            ino[name] = os.stat(self.path(self.live[0], name)).st_ino
        self.note("%s round: %d actors on %d files, %d readers" % (
            "barrier" if barrier else "free", len(actors),
            len(ino), len(readers)))
        if kill_mid is not None:
            # What the kill may take: with no protection every file with
            # a piece only that node holds; else a file written now with
            # a piece there (a seal of this round need not be protected
            # yet, and may keep pieces it did not change where they are).
            if self.a.protect == "none":
                self.st.held = self.pieces_on(
                    kill_mid, sorted(self.st.files), True)
            else:
                self.st.held = self.pieces_on(kill_mid, sorted(ino), False)
        logpos = {k: self.log_size(k) for k in self.live}
        bar = None
        if barrier:
            bar = threading.Barrier(len(actors), timeout=120)
        if self.a.serial:
            # One after another: what one writer at a time gives.
            work = [lambda: [a.run(self.path(a.node, a.name), None)
                             for a in actors]]
        else:
            work = [lambda a=a: a.run(self.path(a.node, a.name), bar)
                    for a in actors]
        work += [lambda r=r: r.run(self.path(r.node, r.name), None)
                 for r in readers]
        threads = [threading.Thread(target=w) for w in work]
        for t in threads:
            t.start()
        if kill_mid is not None:
            time.sleep(rng.random() * 0.4)
            os.kill(self.pids[kill_mid], signal.SIGKILL)
            self.note("node %d SIGKILLed in the middle of the round" %
                      kill_mid)
        for t in threads:
            t.join(300)
            if t.is_alive():
                self.fail("an actor's call has not returned in 300 s")
        for a in actors:
            self.note(a.describe())
        for r in readers:
            self.note("node %d reads /%s meanwhile: %s" % (
                r.node, r.name, ename(r.error) if r.error else
                "%d bytes" % len(r.got)))
        # Errors the rule allows: EIO on a live node (logged), anything
        # on the node killed under it.
        by_file = {}
        for a in actors:
            by_file.setdefault(a.name, []).append(a)
        if kill_mid is not None:
            self.st.dead = kill_mid
            self.live = [k for k in self.live if k != kill_mid]
            for name, acts in by_file.items():
                if any(a.node == kill_mid and a.done for a in acts):
                    self.st.lost_ok[name] = (
                        "written on node %d in the round it was killed" %
                        kill_mid)
            for name in self.st.held:
                self.st.lost_ok.setdefault(name, (
                    "pieces on node %d, killed before they were "
                    "protected" % kill_mid))
        broke = []
        for a in actors:
            dead = kill_mid == a.node
            for call, e in a.errors:
                if dead:
                    if e not in DEAD_ERRNOS:
                        broke.append("%s of /%s on node %d (killed): %s" % (
                            call, a.name, a.node, ename(e)))
                elif e == errno.ENOSPC:
                    # Nothing of ours fills the budget but fetched
                    # copies, which give way.
                    now = self.mem_now(a.node)
                    broke.append("%s of /%s on node %d: ENOSPC (the rule "
                                 "allows EIO; its memory now: %s)" % (
                                     call, a.name, a.node,
                                     self.mem_str(now) if now else "?"))
                elif e != errno.EIO:
                    broke.append("%s of /%s on node %d: %s (the rule "
                                 "allows EIO)" % (call, a.name, a.node,
                                                  ename(e)))
        for r in readers:
            if kill_mid == r.node or (r.error == errno.EIO and
                                      r.name in self.st.lost_ok):
                continue
            if r.error is not None:
                broke.append("node %d's read of /%s (not written this "
                             "round): %s" % (r.node, r.name,
                                             ename(r.error)))
            elif r.got != r.want:
                broke.append("node %d's read of /%s (not written this "
                             "round) during the round: %s, want the "
                             "model's %s" % (r.node, r.name, sha(r.got),
                                             sha(r.want)))
        cands = {}
        for name, acts in by_file.items():
            cands[name] = self.candidates(self.st.files[name], acts,
                                          barrier)
        self.broke = broke
        if kill_mid is None:
            self.protect_wait(self.live)
        else:
            self.wait_dead(kill_mid)
        self.check_all(self.live, cands, verify=kill_mid is None,
                       ballast=kill_mid is not None or
                       self.st.round % 4 == 3)
        if broke:
            self.broke = []
            self.fail("the rule broken:\n    " + "\n    ".join(broke))
        # Every EIO a live writer got is in its daemon's log, named.
        for a in actors:
            for call, e in a.errors:
                if a.node != kill_mid and e == errno.EIO and not \
                        self.logged(a.node, logpos[a.node], a.name,
                                    ino[a.name]):
                    self.fail("%s of /%s (inode %d) on node %d got EIO, "
                              "and node %d's log has no error or warning "
                              "naming it since the round began" % (
                                  call, a.name, ino[a.name], a.node,
                                  a.node))
        self.memory(self.live)
        nsure = sum(a.sealed() == "sure" for a in actors)
        nerr = sum(bool(a.errors) for a in actors)
        nsync = sum(("fsync",) in a.done for a in actors)
        self.note("quiet point: every node reads one candidate (%d "
                  "writers closed, %d with errors, %d fsynced midway)" % (
                      nsure, nerr, nsync))
        if kill_after is not None:
            if self.a.protect == "none":
                for name in self.pieces_on(kill_after,
                                           sorted(self.st.files), True):
                    self.st.lost_ok[name] = (
                        "pieces only on node %d, killed, no protection" %
                        kill_after)
            os.kill(self.pids[kill_after], signal.SIGKILL)
            self.st.dead = kill_after
            self.note("node %d SIGKILLed after the quiet point" %
                      kill_after)
        return nsure, nerr, nsync

    def kill_plan(self):
        """Rounds with a kill, and which: (round, node, mid) drawn once
        from the seed for the whole run."""
        rng = random.Random("%s:kills" % self.a.seed)
        rounds = list(range(2, max(3, self.a.rounds - 1)))
        picks = sorted(rng.sample(rounds, min(self.a.kills, len(rounds))))
        first_mid = rng.random() < 0.5
        return {r: (rng.randrange(self.n), (i % 2 == 0) == first_mid)
                for i, r in enumerate(picks)}

    def run(self):
        plan = self.kill_plan()
        stats = [0, 0, 0, 0]
        t0 = time.monotonic()
        while self.st.round < self.a.rounds:
            node, mid = plan.get(self.st.round, (None, False))
            nsure, nerr, nsync = self.round(node if mid else None,
                                            None if mid else node)
            stats[0] += 1
            stats[1] += nsure
            stats[2] += nerr
            stats[3] += nsync
            self.st.history.append(self.lines)
            self.st.round += 1
            if node is not None:
                what = "node %d killed %s round %d" % (
                    node, "in the middle of" if mid else "after",
                    self.st.round - 1)
                self.st.kills.append(what)
                self.st.save()
                self.say("%d rounds in %.0f s (%d writers closed, %d "
                         "with errors, %d fsynced midway); %s" % (
                             stats[0], time.monotonic() - t0, stats[1],
                             stats[2], stats[3], what))
                self.say("memory: " + self.memory_report())
                print("killed %d" % node, flush=True)
                return 3
        self.st.save()
        self.say("%d rounds in %.0f s (%d writers closed, %d with errors, "
                 "%d fsynced midway), %d files: every node reads the same "
                 "candidate, verify agrees" % (
                     stats[0], time.monotonic() - t0, stats[1], stats[2],
                     stats[3], len(self.st.files)))
        self.say("memory: " + self.memory_report())
        return 0

    def check(self, final):
        """After a kill: the survivors (not final), or every node with the
        replacement (final: protect --wait, verify, lost files unlinked,
        rebuild --wait)."""
        self.lines = ["check after the kill of node %d (%s)" % (
            self.st.dead, "replaced" if final else "survivors")]
        if not final:
            self.check_all(self.live, verify=False)
            self.st.save()
            self.say("nodes %s agree after node %d was killed" % (
                ",".join(map(str, self.live)), self.st.dead))
            return 0
        dead = self.st.dead
        self.st.dead = None
        self.live = list(range(self.n))
        self.check_all(self.live, verify=False, final=True)
        rc, txt = 0, ""
        if self.a.protect != "none":  # none: nothing to rebuild, exit 1
            rc, txt = self.admin(dead, "rebuild", "--wait", timeout=180)
        if rc != 0:
            self.fail("rebuild --wait on node %d exits %d: %s" % (
                dead, rc, txt))
        self.protect_wait(self.live)
        self.check_all(self.live, verify=True)
        self.st.history.append(self.lines)
        self.st.save()
        self.say("replacement node %d rebuilt: every node reads the "
                 "model, verify agrees" % dead)
        return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mounts")
    ap.add_argument("--state", required=True)
    ap.add_argument("--seed", required=True)
    ap.add_argument("--pids", required=True)
    ap.add_argument("--logs")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--files", type=int, default=6)
    ap.add_argument("--kills", type=int, default=2)
    ap.add_argument("--writers", type=int, default=3)
    ap.add_argument("--ballast", type=int, default=28)
    ap.add_argument("--serial", action="store_true")
    ap.add_argument("--protect", default="replicate:2")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--final", action="store_true")
    a = ap.parse_args()
    st = State(a.state)
    fz = Fuzz(a, st)
    if not a.check and st.round == 0:
        print("group_writers: seed %s (WRITERS_FUZZ_SEED=%s replays it)" % (
            a.seed, a.seed), flush=True)
    try:
        if a.check:
            return fz.check(a.final)
        return fz.run()
    except Fail as e:
        print("group_writers: FAIL (seed %s, round %d): %s" % (
            a.seed, st.round, e), flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
