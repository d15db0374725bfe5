"""Random operations on files that pass through (reftfsd's default),
checked against a model of each file after every operation.

usage: pass_fuzz.py DIR --ctl-json CMD [--files N] [--ops N] [--seed S]
                   [--manifest F]

Each file DIR/pt-K starts as a sealed file of a few MiB, written and
closed.  A reader then opens it read-only with nothing else open (so it
passes through to a backing copy) and keeps that descriptor and a shared
mapping of it across operations, while writers come and go; every open
while the reader holds it must pass through too.  Operations, at random:

  write      a writer's pwrite(2), some past EOF (a hole between)
  map write  stores through a writer's shared mapping (msync'd or not)
  truncate   ftruncate(2) of a writer's descriptor, or truncate(2) by path
  punch      fallocate(PUNCH_HOLE | KEEP_SIZE) through a writer
  otrunc     open(O_WRONLY | O_TRUNC), write, close: torch.save's pattern
  recreate   rm, and a new file of the same name written and closed: the
             next checkpoint's save (its copy is made over the spare the
             old copy left); a reader of the old file sometimes stays, and
             must still read the old bytes
  close      a writer closes (its bytes are taken then), mapping or not
  fsync      a writer's fsync(2)
  reread     (no writer open) the reader closes and opens again: the
             copy kept since must be the file's bytes, or be dropped
             (sometimes after a truncate by path, or a cut and a grow)
  cycle      everything closed: the engine must hold the model's bytes
             (read through a direct open for writing, which drops a copy
             kept for the next reader); then a new read-only open

After every operation the reader's descriptor, its mapping and stat(2)
must show the model.  At the end every file is closed and compared once
more.  --ctl-json CMD prints the daemon's `status --json`: the run fails
unless opens passed through and files were copied.  --in-place: the
daemon writes large files in place (its default), and the run fails unless
its status says so and a copy at seal used bytes written in place.  --manifest F: each
file's size and sha256 at the end, as JSON, for the caller to check after
a remount.  The seed is printed
first; PASS_SEED replays a run.
"""

import argparse
import hashlib
import json
import mmap
import os
import random
import subprocess
import sys

from mmap_fuzz import FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, fallocate
from mmap_fuzz import first_diff

MiB = 1 << 20


class Mismatch(Exception):
    pass


class PassFile:
    def __init__(self, path, rng):
        self.path = path
        self.rng = rng
        self.model = bytearray(rng.randbytes(rng.randrange(2, 6) * MiB +
                                             rng.randrange(4096)))
        with open(path, "wb") as f:
            f.write(self.model)
        self.reader = None
        self.rmap = None
        self.writers = []  # [fd, mapping or None]
        self.last = "create"

    def open_reader(self):
        self.reader = os.open(self.path, os.O_RDONLY)
        self.remap_reader()

    def remap_reader(self):
        if self.rmap:
            self.rmap.close()
            self.rmap = None
        size = os.fstat(self.reader).st_size
        if size:
            self.rmap = mmap.mmap(self.reader, size, mmap.MAP_SHARED,
                                  mmap.PROT_READ)

    def close_all(self):
        for w in self.writers:
            if w[1]:
                w[1].close()
            os.close(w[0])
        self.writers = []
        if self.rmap:
            self.rmap.close()
            self.rmap = None
        if self.reader is not None:
            os.close(self.reader)
            self.reader = None

    def writer(self):
        if not self.writers or self.rng.random() < 0.2:
            self.writers.append([os.open(self.path, os.O_RDWR), None])
        return self.rng.choice(self.writers)

    def payload(self, n):
        return self.rng.randbytes(n)

    def op_write(self):
        w = self.writer()
        off = self.rng.randrange(len(self.model) + MiB)
        data = self.payload(self.rng.randrange(1, 2 * MiB))
        os.pwrite(w[0], data, off)
        if off > len(self.model):
            self.model.extend(bytes(off - len(self.model)))
        self.model[off:off + len(data)] = data
        self.last = f"write {len(data)} at {off}"

    def op_map_write(self):
        w = self.writer()
        size = len(self.model)
        if not size:
            return self.op_write()
        if w[1] is None or len(w[1]) != size:
            if w[1]:
                w[1].close()
            w[1] = mmap.mmap(w[0], size, mmap.MAP_SHARED,
                             mmap.PROT_READ | mmap.PROT_WRITE)
        off = self.rng.randrange(size)
        data = self.payload(min(size - off, self.rng.randrange(1, MiB)))
        w[1][off:off + len(data)] = data
        self.model[off:off + len(data)] = data
        if self.rng.random() < 0.5:
            w[1].flush()
        self.last = f"map write {len(data)} at {off}"

    def drop_maps(self):
        """A truncate below a mapping: its pages past the end would fault."""
        for w in self.writers:
            if w[1]:
                w[1].close()
                w[1] = None

    def op_truncate(self):
        size = self.rng.randrange(len(self.model) + 2 * MiB)
        self.drop_maps()
        if self.rmap:
            self.rmap.close()
            self.rmap = None
        if self.rng.random() < 0.5:
            w = self.writer()
            os.ftruncate(w[0], size)
            how = "ftruncate"
        else:
            os.truncate(self.path, size)
            how = "truncate by path"
        if size < len(self.model):
            del self.model[size:]
        else:
            self.model.extend(bytes(size - len(self.model)))
        self.remap_reader()
        self.last = f"{how} to {size}"

    def op_punch(self):
        if not self.model:
            return self.op_write()
        w = self.writer()
        off = self.rng.randrange(len(self.model))
        n = self.rng.randrange(1, 2 * MiB)
        fallocate(w[0], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, n)
        end = min(off + n, len(self.model))
        self.model[off:end] = bytes(end - off)
        self.last = f"punch {n} at {off}"

    def op_otrunc(self):
        self.drop_maps()
        if self.rmap:
            self.rmap.close()
            self.rmap = None
        data = self.payload(self.rng.randrange(1, 4 * MiB))
        fd = os.open(self.path, os.O_WRONLY | os.O_TRUNC)
        os.write(fd, data)
        os.close(fd)
        self.model = bytearray(data)
        self.remap_reader()
        self.last = f"O_TRUNC open, write {len(data)}, close"

    def op_recreate(self):
        # Every writer gone; sometimes the reader's descriptor and mapping
        # stay on the removed file, which must read its old bytes still.
        for m in self.writers_gone_maps:
            m.close()
        self.writers_gone_maps = []
        old = None
        if self.rng.random() < 0.3:
            old = (self.reader, self.rmap, bytes(self.model))
            self.reader = self.rmap = None
        self.close_all()
        os.unlink(self.path)
        size = self.rng.randrange(2, 6) * MiB + self.rng.randrange(4096)
        data = self.payload(size)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        off = 0
        while off < size:
            n = min(size - off, self.rng.choice([4096, MiB, 3 * MiB]))
            os.pwrite(fd, data[off:off + n], off)
            off += n
        os.close(fd)
        self.model = bytearray(data)
        self.last = f"rm, and a new file of {size} bytes written"
        if old:
            fd, m, want = old
            got = os.pread(fd, len(want) + 4096, 0)
            n = min(len(m), len(want)) if m is not None else 0
            ok = got == want and (m is None or m[:n] == want[:n])
            if m is not None:
                m.close()
            os.close(fd)
            if not ok:
                raise Mismatch(f"{self.path}: a reader of the removed file "
                               f"sees other bytes, after {self.last}")
        self.open_reader()

    def op_close(self):
        if not self.writers:
            return self.op_write()
        w = self.writers.pop(self.rng.randrange(len(self.writers)))
        os.close(w[0])
        # The mapping may outlive the descriptor; it goes later or now.
        if w[1] and self.rng.random() < 0.5:
            w[1].close()
        elif w[1]:
            self.writers_gone_maps.append(w[1])
        self.last = "writer close"

    def op_fsync(self):
        w = self.writer()
        os.fsync(w[0])
        self.last = "fsync"

    def op_reread(self):
        if self.writers or self.writers_gone_maps:
            return self.op_fsync() if self.writers else None
        if self.rmap:
            self.rmap.close()
            self.rmap = None
        os.close(self.reader)
        self.reader = None
        # Another process changes nothing meanwhile; a truncate by path
        # sometimes does, so a kept copy must not be used after it.  Cut
        # and grown again, the file has a hole where the copy dropped (a
        # spare, which the next copy may be made over) had bytes.
        if self.rng.random() < 0.3:
            sizes = [self.rng.randrange(len(self.model) + MiB)]
            if self.rng.random() < 0.5 and len(self.model) > 1:
                cut = self.rng.randrange(len(self.model))
                sizes = [cut, self.rng.randrange(cut, len(self.model) + 1)]
            for size in sizes:
                os.truncate(self.path, size)
                if size < len(self.model):
                    del self.model[size:]
                else:
                    self.model.extend(bytes(size - len(self.model)))
        self.open_reader()
        self.last = "reread"

    def op_cycle(self):
        for m in self.writers_gone_maps:
            m.close()
        self.writers_gone_maps = []
        self.close_all()
        # Opened for writing: a copy kept for the next reader is dropped
        # and this open is direct, so it reads the engine's own bytes.
        fd = os.open(self.path, os.O_RDWR)
        try:
            got = os.pread(fd, len(self.model) + 4096, 0)
        finally:
            os.close(fd)
        self.expect(got, "after every descriptor closed (the engine's bytes)")
        self.open_reader()
        self.last = "cycle"

    def expect(self, got, how):
        if got != self.model:
            at = first_diff(got, self.model)
            raise Mismatch(f"{self.path}: {how}: {len(got)} bytes, want "
                           f"{len(self.model)}; first difference at {at}, "
                           f"after {self.last}")

    def check(self):
        st = os.stat(self.path)
        if st.st_size != len(self.model):
            raise Mismatch(f"{self.path}: stat size {st.st_size}, want "
                           f"{len(self.model)}, after {self.last}")
        got = os.pread(self.reader, len(self.model) + 4096, 0)
        self.expect(got, "the reader's pread")
        if self.rmap is not None:
            n = min(len(self.rmap), len(self.model))
            if self.rmap[:n] != self.model[:n]:
                raise Mismatch(f"{self.path}: the reader's mapping differs "
                               f"at {first_diff(self.rmap[:n], self.model)}"
                               f", after {self.last}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--ctl-json", required=True)
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--ops", type=int, default=200)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--manifest")
    ap.add_argument("--in-place", action="store_true")
    args = ap.parse_args()
    seed = args.seed
    if seed is None:
        seed = int(os.environ.get("PASS_SEED", random.randrange(1 << 31)))
    print(f"pass_fuzz: seed {seed} (PASS_SEED={seed} replays)", flush=True)
    rng = random.Random(seed)

    files = [PassFile(os.path.join(args.dir, f"pt-{k}"), rng)
             for k in range(args.files)]
    for f in files:
        f.writers_gone_maps = []
        f.open_reader()
    ops = ["write", "map_write", "truncate", "punch", "otrunc", "close",
           "fsync", "reread", "cycle", "recreate"]
    weights = [6, 4, 2, 2, 1, 3, 1, 2, 1, 2]
    counts = dict.fromkeys(ops, 0)
    try:
        for i in range(args.ops):
            f = rng.choice(files)
            op = rng.choices(ops, weights)[0]
            getattr(f, "op_" + op)()
            counts[op] += 1
            f.check()
        for f in files:
            f.op_cycle()
            f.check()
    except Mismatch as e:
        print(f"pass_fuzz: FAIL (seed {seed}, op {i}): {e}", flush=True)
        return 1
    finally:
        for f in files:
            for m in f.writers_gone_maps:
                m.close()
            f.close_all()

    if args.manifest:
        with open(args.manifest, "w") as m:
            json.dump([{"path": f.path, "size": len(f.model),
                        "sha256": hashlib.sha256(f.model).hexdigest()}
                       for f in files], m)
    st = json.loads(subprocess.run(args.ctl_json, shell=True, check=True,
                                   capture_output=True, text=True).stdout)
    c = st["counters"]
    print(f"pass_fuzz: {args.ops} operations {counts}; "
          f"{c['passthrough_opens']} opens passed through, "
          f"{c['passthrough_files']} files copied, "
          f"{c['passthrough_reused']} of them over a spare, "
          f"{c['passthrough_early_bytes']} bytes copied early "
          f"({c['passthrough_early_used_bytes']} used), "
          f"{c['passthrough_placed_bytes']} bytes written in place "
          f"({c['passthrough_placed_used_bytes']} used)", flush=True)
    if not st["fuse"]["passthrough"]:
        print("pass_fuzz: FAIL: passthrough is off", flush=True)
        return 1
    # Each file's first reader at least, and its backing copy.
    if c["passthrough_opens"] < args.files or \
            c["passthrough_files"] < args.files:
        print("pass_fuzz: FAIL: too few opens passed through", flush=True)
        return 1
    # Rewrites drop copies: later copies are made over their spares, and
    # the model checked every read of them (a reread that cuts and grows
    # the file leaves holes over a spare's bytes: with the punch of what
    # a copy leaves unwritten switched off, this fails within 700 ops).
    if c["passthrough_reused"] < 1:
        print("pass_fuzz: FAIL: no copy was made over a spare", flush=True)
        return 1
    # Recreated files are written into their names' spares.
    if args.in_place and not st["fuse"]["passthrough_in_place"]:
        print("pass_fuzz: FAIL: in place is off", flush=True)
        return 1
    if args.in_place and c["passthrough_placed_used_bytes"] == 0:
        print("pass_fuzz: FAIL: no copy at seal used bytes written in "
              "place", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
