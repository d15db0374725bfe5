"""Random operations on files opened O_RDWR, mapped shared, checked against
a model of each file after every operation.

usage: mmap_fuzz.py DIR [--procs N] [--ops N] [--fallocate] [--manifest F]

Each worker process owns one file DIR/mmap-K (K = 0..N-1) and a model of
it (a bytearray) and runs random operations on it:

  write      pwrite(2) at a random offset, some past EOF (a hole between)
  read       pread(2) of a random range, compared with the model
  map write  stores through a MAP_SHARED mapping of the whole file, kept
             across operations; msync'd or not, at random
  map read   loads through that mapping, compared with the model
  private    a MAP_PRIVATE mapping: its stores must not reach the file
  truncate   ftruncate(2) down or up; the mapping is made again
  fallocate  (--fallocate) mode 0 and KEEP_SIZE preallocation, PUNCH_HOLE
  reopen     close every descriptor and mapping, open again
  remap      unmap and map again

After every operation the whole file is compared with the model through a
second descriptor (opened O_RDONLY at the start, kept open: the coherence
of one descriptor's writes with another's reads) and its size through
fstat.  Every few operations a separate checker process, which keeps its
own descriptor and mapping of the file, reads it whole both ways and
answers with a digest (coherence across processes).  Stores through the
mapping are checked without msync: reads through other descriptors must
see them, as on tmpfs.

--manifest F: at the end, write each file's size and sha256 to F (JSON),
for the caller to check after a remount.  The seed is printed first;
MMAP_SEED replays a run (worker K draws from random.Random("SEED:K")).
Exit status 0 when every check held; 1 with the first difference of each
failed worker (offset, expected, got, the operation before it).
"""

import argparse
import hashlib
import json
import mmap
import os
import random
import sys
import traceback

CHUNK = 1 << 20
MAX_SIZE = 3 * CHUNK + 12345
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02


class Mismatch(Exception):
    pass


def first_diff(a, b):
    n = min(len(a), len(b))
    for i in range(0, n, 4096):
        if a[i:i + 4096] != b[i:i + 4096]:
            for j in range(i, min(i + 4096, n)):
                if a[j] != b[j]:
                    return j
    return n


def fallocate(fd, mode, off, length):
    """fallocate(2) through libc: os.posix_fallocate has no mode."""
    import ctypes
    import ctypes.util
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int,
                               ctypes.c_longlong, ctypes.c_longlong]
    if libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def checker(path, conn):
    """Another process: its own descriptor and mapping, digests on demand."""
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            if conn.recv() is None:
                return
            size = os.fstat(fd).st_size
            data = os.pread(fd, size + 1, 0)
            mapped = b""
            if size:
                with mmap.mmap(fd, size, mmap.MAP_SHARED,
                               mmap.PROT_READ) as m:
                    mapped = m[:]
            conn.send((size, hashlib.sha256(data).hexdigest(),
                       hashlib.sha256(mapped).hexdigest()))
    finally:
        os.close(fd)


class Worker:
    def __init__(self, path, rng, use_fallocate):
        self.path = path
        self.rng = rng
        self.use_fallocate = use_fallocate
        self.model = bytearray()
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.rfd = os.open(path, os.O_RDONLY)
        self.map = None
        self.last = "open"
        self.ops = {}

    def remap(self):
        if self.map is not None:
            self.map.close()
            self.map = None
        if self.model:
            self.map = mmap.mmap(self.fd, len(self.model), mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE)

    def payload(self, n):
        return self.rng.randbytes(n)

    def span(self, within):
        """A random (offset, length) inside [0, within)."""
        if within == 0:
            return 0, 0
        off = self.rng.randrange(within)
        n = self.rng.choice([1, 17, 4096, 65536, CHUNK, CHUNK + 3])
        return off, min(n, within - off)

    def op_write(self):
        size = len(self.model)
        off = self.rng.randrange(min(size + CHUNK + 5000, MAX_SIZE))
        n = self.rng.choice([1, 100, 4096, 4097, 65536, CHUNK, 2 * CHUNK])
        n = min(n, MAX_SIZE - off) or 1
        data = self.payload(n)
        if os.pwrite(self.fd, data, off) != n:
            raise Mismatch("short pwrite")
        if off > size:
            self.model.extend(bytes(off - size))
        self.model[off:off + n] = data
        self.last = f"pwrite off={off} len={n}"
        if len(self.model) != size:
            self.remap()

    def op_read(self):
        off, n = self.span(len(self.model) + 100)
        got = os.pread(self.fd, n, off)
        want = bytes(self.model[off:off + n])
        if got != want:
            raise Mismatch(f"pread off={off} len={n}: got {len(got)} bytes,"
                           f" first difference at {off + first_diff(got, want)}")
        self.last = f"pread off={off} len={n}"

    def op_map_write(self):
        if self.map is None:
            return self.op_write()
        off, n = self.span(len(self.model))
        data = self.payload(n)
        self.map[off:off + n] = data
        self.model[off:off + n] = data
        synced = self.rng.random() < 0.5
        if synced:
            self.map.flush()
        self.last = f"map write off={off} len={n} msync={synced}"

    def op_map_read(self):
        if self.map is None:
            return self.op_read()
        off, n = self.span(len(self.model))
        got = self.map[off:off + n]
        want = bytes(self.model[off:off + n])
        if got != want:
            raise Mismatch(f"map read off={off} len={n}: first difference at"
                           f" {off + first_diff(got, want)}")
        self.last = f"map read off={off} len={n}"

    def op_private(self):
        size = len(self.model)
        if size == 0:
            return self.op_write()
        with mmap.mmap(self.fd, size, mmap.MAP_PRIVATE,
                       mmap.PROT_READ | mmap.PROT_WRITE) as m:
            off, n = self.span(size)
            if m[off:off + n] != bytes(self.model[off:off + n]):
                raise Mismatch(f"private map read off={off} len={n}")
            m[off:off + n] = self.payload(n)
        self.last = f"private map write off={off} len={n} (not to the file)"

    def op_truncate(self):
        size = self.rng.choice([0, self.rng.randrange(MAX_SIZE),
                                len(self.model) // 2,
                                len(self.model) + self.rng.randrange(CHUNK)])
        size = min(size, MAX_SIZE)
        if self.map is not None:
            self.map.close()
            self.map = None
        os.ftruncate(self.fd, size)
        if size < len(self.model):
            del self.model[size:]
        else:
            self.model.extend(bytes(size - len(self.model)))
        self.last = f"ftruncate {size}"
        self.remap()

    def op_fallocate(self):
        size = len(self.model)
        kind = self.rng.choice(["alloc", "keep", "punch"])
        off = self.rng.randrange(min(size + CHUNK, MAX_SIZE))
        n = self.rng.choice([1, 4096, 70000, CHUNK, 2 * CHUNK + 5])
        n = max(1, min(n, MAX_SIZE - off))
        if kind == "alloc":
            fallocate(self.fd, 0, off, n)
            if off + n > size:
                self.model.extend(bytes(off + n - size))
        elif kind == "keep":
            fallocate(self.fd, FALLOC_FL_KEEP_SIZE, off, n)
        else:
            fallocate(self.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      off, n)
            end = min(off + n, size)
            if off < end:
                self.model[off:end] = bytes(end - off)
        self.last = f"fallocate {kind} off={off} len={n}"
        if len(self.model) != size:
            self.remap()

    def op_reopen(self):
        if self.map is not None:
            self.map.close()
            self.map = None
        os.close(self.fd)
        os.close(self.rfd)
        self.fd = os.open(self.path, os.O_RDWR)
        self.rfd = os.open(self.path, os.O_RDONLY)
        self.remap()
        self.last = "close and reopen"

    def op_remap(self):
        self.remap()
        self.last = "remap"

    def check(self):
        size = os.fstat(self.rfd).st_size
        if size != len(self.model):
            raise Mismatch(f"size {size}, model {len(self.model)}")
        got = os.pread(self.rfd, size + 1, 0)
        if got != self.model:
            off = first_diff(got, self.model)
            raise Mismatch(f"read through another descriptor: {len(got)}"
                           f" bytes, first difference at {off}"
                           f" (got {got[off:off + 8].hex()},"
                           f" want {bytes(self.model[off:off + 8]).hex()})")

    def check_remote(self, conn):
        conn.send(True)
        size, h_read, h_map = conn.recv()
        want = hashlib.sha256(self.model).hexdigest()
        if size != len(self.model) or h_read != want or h_map != want:
            raise Mismatch(f"another process sees size {size}"
                           f" (model {len(self.model)}), read "
                           f"{'ok' if h_read == want else 'differs'}, mmap "
                           f"{'ok' if h_map == want else 'differs'}")

    def run(self, nops, conn):
        table = [(self.op_write, 5), (self.op_read, 3),
                 (self.op_map_write, 5), (self.op_map_read, 3),
                 (self.op_private, 1), (self.op_truncate, 2),
                 (self.op_reopen, 1), (self.op_remap, 1)]
        if self.use_fallocate:
            table.append((self.op_fallocate, 3))
        ops = [f for f, w in table for _ in range(w)]
        for i in range(nops):
            op = self.rng.choice(ops)
            before = self.last
            try:
                op()
                self.ops[op.__name__] = self.ops.get(op.__name__, 0) + 1
                self.check()
                if i % 8 == 7:
                    self.check_remote(conn)
            except (Mismatch, OSError) as e:
                raise Mismatch(f"op {i} ({self.last}; before it: {before}):"
                               f" {e}") from None
        if self.map is not None:
            self.map.flush()
            self.map.close()
        os.close(self.fd)
        os.close(self.rfd)


def work(args, k, seed):
    import multiprocessing
    path = os.path.join(args.dir, f"mmap-{k}")
    rng = random.Random(f"{seed}:{k}")
    w = Worker(path, rng, args.fallocate)
    parent, child = multiprocessing.Pipe()
    p = multiprocessing.Process(target=checker, args=(path, child))
    p.start()
    try:
        w.run(args.ops, parent)
        w.check_remote(parent)
        return {"path": path, "size": len(w.model),
                "sha256": hashlib.sha256(w.model).hexdigest(), "ops": w.ops}
    finally:
        try:
            parent.send(None)
        except OSError:
            pass
        p.join(30)
        if p.is_alive():
            p.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--ops", type=int, default=300)
    ap.add_argument("--fallocate", action="store_true")
    ap.add_argument("--manifest")
    args = ap.parse_args()
    seed = os.environ.get("MMAP_SEED") or str(random.randrange(1 << 32))
    print(f"mmap_fuzz: seed {seed} (MMAP_SEED={seed} replays),"
          f" {args.procs} process(es), {args.ops} ops each,"
          f" fallocate {'on' if args.fallocate else 'off'}", flush=True)

    pids = {}
    rfds = {}
    for k in range(args.procs):
        r, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            status = 1
            try:
                res = work(args, k, seed)
                os.write(wfd, json.dumps(res).encode())
                status = 0
            except Mismatch as e:
                os.write(wfd, json.dumps({"error": str(e)}).encode())
            except BaseException:
                os.write(wfd, json.dumps(
                    {"error": traceback.format_exc()}).encode())
            finally:
                os._exit(status)
        os.close(wfd)
        pids[pid] = k
        rfds[k] = r

    results = {}
    for k, r in rfds.items():
        chunks = []
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            chunks.append(b)
        os.close(r)
        results[k] = json.loads(b"".join(chunks) or b'{"error": "no result"}')
    failed = 0
    for pid, k in pids.items():
        _, st = os.waitpid(pid, 0)
        if st != 0 or "error" in results[k]:
            failed += 1
            print(f"mmap_fuzz: worker {k} (MMAP_SEED={seed}): FAILED:"
                  f" {results[k].get('error')}", file=sys.stderr)
        else:
            print(f"mmap_fuzz: worker {k}: {results[k]['size']} bytes,"
                  f" ops {results[k]['ops']}")
    if args.manifest and not failed:
        with open(args.manifest, "w") as f:
            json.dump([results[k] for k in sorted(results)], f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
