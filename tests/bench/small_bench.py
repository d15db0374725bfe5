"""Small files, side by side: tmpfs vs reftfs (run by run_small_bench.sh).

usage: small_bench.py --target NAME=DIR [--target NAME=DIR ...]
                      [--files N] [--size BYTES] [--rounds R]

For each round, for each target in turn (order alternating), in a fresh
subdirectory: create+write+close N files of SIZE bytes (one write each,
as Python's open/write/close does), stat each, open+read+close each (page
cache dropped first when root, so the file system really serves them),
unlink each.  Prints microseconds per file for each phase, the bytes of
the target's budget (statfs: blocks in use) that N files took, and the
ratios to the first target.  Round 1 runs on whatever state the targets
are in (run_small_bench.sh starts reftfs fresh just before: the "fresh
mount" figure); later rounds are the warm ones.  Every file read back is
compared with what was written.
"""

import argparse
import os
import statistics
import sys
import time


def drop_caches():
    if os.geteuid() != 0:
        return
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def used_bytes(d):
    st = os.statvfs(d)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def one_round(d, n, size, tag):
    sub = os.path.join(d, "small-%s" % tag)
    os.mkdir(sub)
    names = [os.path.join(sub, "f%05d.json" % i) for i in range(n)]
    datas = [(b"%05d" % i) * (size // 5) + b"x" * (size % 5) for i in range(n)]
    res = {}
    before = used_bytes(d)

    t = time.perf_counter()
    for p, data in zip(names, datas):
        with open(p, "wb") as f:
            f.write(data)
    res["create+write+close"] = time.perf_counter() - t
    res["budget"] = used_bytes(d) - before

    t = time.perf_counter()
    for p in names:
        os.stat(p)
    res["stat"] = time.perf_counter() - t

    drop_caches()
    t = time.perf_counter()
    got = []
    for p in names:
        with open(p, "rb") as f:
            got.append(f.read())
    res["open+read+close"] = time.perf_counter() - t
    if got != datas:
        bad = next(i for i in range(n) if got[i] != datas[i])
        sys.exit("%s: %s reads back different bytes" % (d, names[bad]))

    t = time.perf_counter()
    for p in names:
        os.unlink(p)
    res["unlink"] = time.perf_counter() - t
    os.rmdir(sub)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", action="append", required=True)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    targets = [tuple(t.split("=", 1)) for t in args.target]
    phases = ["create+write+close", "stat", "open+read+close", "unlink"]
    runs = {name: [] for name, _ in targets}
    for r in range(args.rounds):
        order = targets if r % 2 == 0 else targets[::-1]
        for name, d in order:
            res = one_round(d, args.files, args.size, "%d" % r)
            runs[name].append(res)
            print("round %d %-14s " % (r + 1, name) + "  ".join(
                "%s %.1f us" % (p, res[p] / args.files * 1e6)
                for p in phases) + "  budget %.1f KiB/file" % (
                res["budget"] / args.files / 1024), flush=True)

    base = targets[0][0]
    print()
    print("%d files of %d bytes; us per file (ratio = %s time / target"
          " time: higher is better for the target)" % (
              args.files, args.size, base))
    for label, sel in (("fresh (round 1)", slice(0, 1)),
                       ("warm (median of rounds 2-%d)" % args.rounds,
                        slice(1, None))):
        print(label)
        for p in phases:
            line = "  %-20s" % p
            bt = None
            for name, _ in targets:
                vals = [x[p] for x in runs[name][sel]]
                if not vals:
                    continue
                v = statistics.median(vals) / args.files * 1e6
                line += " %10s %8.1f" % (name[:10], v)
                if bt is None:
                    bt = v
                else:
                    line += " (%.2fx)" % (bt / v)
            print(line)
    print("budget per file (statfs blocks in use, round 1):")
    for name, _ in targets:
        b = runs[name][0]["budget"] / args.files
        print("  %-10s %8.1f KiB (%.2fx the %d bytes stored)" % (
            name, b / 1024, b / args.size, args.size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
