"""Side-by-side filesystem benchmark: tmpfs vs reftfs (run by run_fs_bench.sh).

usage:
  fs_bench.py measure --target NAME=DIR [--target NAME=DIR ...]
              [--size-gib N] [--dd-gib M] [--reps R] [--warmup W] --json OUT
  fs_bench.py report BASELINE OUT.json [OUT.json ...]

measure: after W untimed warm-up rounds (default 1), for each repetition,
for each target in turn (interleaved, order alternating, so drift on a
shared machine hits all targets alike):
  torch.save of a state dict of N GiB (64 tensors of N/64 GiB fp32),
  torch.load of it (page cache dropped first, when root),
  dd write of M GiB with bs=1M from /dev/zero,
  dd read of it to /dev/null (page cache dropped first),
  mmap read of the same file (MAP_SHARED, read-only; checks mmap works),
  mmap write of a new file of that size (MAP_SHARED, msync, close).
The first torch.load of each target is compared tensor by tensor with what
was saved.  report: medians in GB/s (1e9 B/s) and the ratio of each target
to BASELINE, measured in the same run.
"""

import argparse
import json
import mmap
import os
import platform
import statistics
import subprocess
import sys
import time

GB = 1e9
MiB = 1 << 20
GiB = 1 << 30


def drop_caches():
    if os.geteuid() != 0:
        return False
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    return True


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def dd(args):
    subprocess.run(["dd"] + args + ["status=none"], check=True)


def machine():
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "mem_gib": round(mem / GiB, 1),
            "kernel": platform.release(),
            "date": time.strftime("%Y-%m-%d %H:%M %Z")}


def measure(args):
    import torch

    targets = []
    for t in args.target:
        name, _, d = t.partition("=")
        if not os.path.isdir(d):
            sys.exit("target %s: %s is not a directory" % (name, d))
        targets.append((name, d))
    n_tensors = 64
    numel = int(args.size_gib * GiB) // n_tensors // 4
    print("building the state dict: %d x %.1f MiB fp32 ..." % (
        n_tensors, numel * 4 / MiB), flush=True)
    g = torch.Generator().manual_seed(0)
    sd = {"layer%02d.weight" % i: torch.rand(numel, generator=g)
          for i in range(n_tensors)}
    dd_mib = int(args.dd_gib * 1024)
    res = {"machine": machine(), "size_gib": args.size_gib,
           "dd_gib": args.dd_gib, "reps": args.reps,
           "cache_dropped": os.geteuid() == 0,
           "targets": [n for n, _ in targets],
           "bytes": {}, "seconds": {n: {} for n, _ in targets}}

    def rec(name, what, nbytes, secs):
        if rep < 0:
            return
        res["bytes"][what] = nbytes
        res["seconds"][name].setdefault(what, []).append(
            None if secs != secs else secs)
        if secs == secs:
            print("  %-22s %-12s %6.3f s  %6.2f GB/s" % (
                name, what, secs, nbytes / GB / secs), flush=True)

    # Warm up torch's serialization paths (first calls are slower).
    for name, d in targets:
        f = os.path.join(d, "bench_warmup.pt")
        torch.save({"w": torch.zeros(1 << 20)}, f)
        torch.load(f)
        os.unlink(f)
    # One untimed round first: on a VM the first touch of guest memory (host
    # page faults) costs several times what later rounds do, for tmpfs and
    # reftfs alike.
    for rep in range(-args.warmup, args.reps):
        if rep < 0:
            print("warm-up round (not counted)", flush=True)
        else:
            print("repetition %d of %d" % (rep + 1, args.reps), flush=True)
        # Alternate the order so neither target always goes first.
        for name, d in (targets if rep % 2 == 0 else targets[::-1]):
            f = os.path.join(d, "bench_state.pt")
            if os.path.exists(f):
                os.unlink(f)
            s = timed(lambda: torch.save(sd, f))
            size = os.path.getsize(f)
            rec(name, "torch.save", size, s)
            drop_caches()
            box = {}
            s = timed(lambda: box.update(v=torch.load(f)))
            rec(name, "torch.load", size, s)
            if rep == -args.warmup:
                got = box["v"]
                bad = [k for k in sd if not torch.equal(got[k], sd[k])]
                if bad:
                    sys.exit("%s: torch.load returned different tensors: %s"
                             % (name, bad[:3]))
            box.clear()
            os.unlink(f)

            f = os.path.join(d, "bench_dd.bin")
            s = timed(lambda: dd(["if=/dev/zero", "of=" + f, "bs=1M",
                                  "count=%d" % dd_mib]))
            rec(name, "dd write", dd_mib * MiB, s)
            drop_caches()
            s = timed(lambda: dd(["if=" + f, "of=/dev/null", "bs=1M"]))
            rec(name, "dd read", dd_mib * MiB, s)
            drop_caches()

            def mmap_read():
                buf = bytearray(64 * MiB)
                with open(f, "rb") as fh, mmap.mmap(
                        fh.fileno(), 0, flags=mmap.MAP_SHARED,
                        prot=mmap.PROT_READ) as m:
                    mv = memoryview(m)
                    off, n = 0, len(m)
                    while off < n:
                        k = min(len(buf), n - off)
                        buf[:k] = mv[off:off + k]
                        off += k
                    mv.release()
                    if buf[:16] != bytes(16):
                        sys.exit("%s: mmap read returned non-zero bytes" % name)
            try:
                s = timed(mmap_read)
            except OSError as e:
                # e.g. ENODEV: reftfs --direct-read refuses shared mmap
                print("  %-22s %-12s failed: %s" % (name, "mmap read", e),
                      flush=True)
                s = float("nan")
            rec(name, "mmap read", dd_mib * MiB, s)
            os.unlink(f)

            # A file written through a shared mapping (numpy.memmap "w+",
            # torch.from_file(shared=True)): size it, store, msync, close.
            f = os.path.join(d, "bench_mmap.bin")
            pattern = bytes(range(1, 256)) * (64 * MiB // 255 + 1)
            pattern = pattern[:64 * MiB]

            def mmap_write():
                fd = os.open(f, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    os.ftruncate(fd, dd_mib * MiB)
                    with mmap.mmap(fd, dd_mib * MiB, flags=mmap.MAP_SHARED,
                                   prot=mmap.PROT_READ |
                                   mmap.PROT_WRITE) as m:
                        for off in range(0, dd_mib * MiB, len(pattern)):
                            k = min(len(pattern), dd_mib * MiB - off)
                            m[off:off + k] = pattern[:k]
                        m.flush()
                finally:
                    os.close(fd)
            try:
                s = timed(mmap_write)
                drop_caches()
                with open(f, "rb") as fh:
                    fh.seek(dd_mib * MiB - 64 * MiB)
                    if fh.read(64 * MiB) != pattern:
                        sys.exit("%s: a file written through a mapping"
                                 " reads back different bytes" % name)
            except OSError as e:
                # ENODEV: a writer's direct_io open with libfuse < 3.16
                print("  %-22s %-12s failed: %s" % (name, "mmap write", e),
                      flush=True)
                s = float("nan")
            rec(name, "mmap write", dd_mib * MiB, s)
            os.unlink(f)
    with open(args.json, "w") as fh:
        json.dump(res, fh, indent=1)
    return 0


def report(args):
    runs = [json.load(open(p)) for p in args.files]
    base = args.baseline
    ops = ["torch.save", "torch.load", "dd write", "dd read", "mmap read",
           "mmap write"]
    r0 = runs[0]
    m = r0["machine"]
    print()
    print("machine: %s, %s CPUs, %s GiB RAM, kernel %s, %s" % (
        m["cpu"], m["cpus"], m["mem_gib"], m["kernel"], m["date"]))
    print("torch state dict %.2f GiB (64 fp32 tensors), dd %.2f GiB bs=1M, "
          "median of %d, GB/s = 1e9 B/s%s" % (
              r0["size_gib"], r0["dd_gib"], r0["reps"],
              "" if r0["cache_dropped"] else
              " (NOT root: page cache not dropped before reads)"))
    cols = []
    for r in runs:
        for t in r["targets"]:
            cols.append((r, t))
    hdr = "%-12s" % "GB/s"
    for r, t in cols:
        hdr += " %19s" % t[:19]
        if t != base:
            hdr += " %8s" % "ratio"
    print(hdr)
    def med(r, t, op):
        v = r["seconds"][t][op]
        return None if None in v else statistics.median(v)

    for op in ops:
        line = "%-12s" % op
        for r, t in cols:
            m = med(r, t, op)
            if m is None:
                line += " %19s" % "fails"
            else:
                line += " %19.2f" % (r["bytes"][op] / GB / m)
            if t != base:
                bm = med(r, base, op)
                line += " %8s" % ("-" if m is None or bm is None
                                  else "%.2fx" % (bm / m))
        print(line)
    print("(ratio = target / %s of the same run; higher is better)" % base)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--target", action="append", required=True)
    m.add_argument("--size-gib", type=float, default=2.0)
    m.add_argument("--dd-gib", type=float, default=4.0)
    m.add_argument("--reps", type=int, default=3)
    m.add_argument("--warmup", type=int, default=1)
    m.add_argument("--json", required=True)
    r = sub.add_parser("report")
    r.add_argument("baseline")
    r.add_argument("files", nargs="+")
    args = ap.parse_args()
    return measure(args) if args.cmd == "measure" else report(args)


if __name__ == "__main__":
    sys.exit(main())
