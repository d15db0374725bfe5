#!/usr/bin/env bash
# FUSE passthrough on this kernel (issue 10; docs/benchmarks.md "FUSE
# passthrough, probed"): passthrough_probe.c serves one file whose opens
# pass through to a backing file.  Side by side in one run, GB/s per
# round: dd and mapped reads of a default tmpfs (4 KiB pages, the
# benchmarks' baseline), of the probe passing through to a file there, of
# a tmpfs with huge=always, and of the probe passing through to that one.
# Then the kernel's rules: whether a direct open of an inode may join a
# passthrough one, or a second passthrough open (with a backing id of its
# own, or the first one's), what a writer passing through does (rw), and
# what reaches the daemon of a writer's mapping that outlives its descriptor.
# As root (passthrough needs CAP_SYS_ADMIN); built against the bundled
# libfuse (3.18+) of $BUILDDIR, with cc, not by meson.
#   bash tests/bench/run_passthrough_probe.sh [GIB] [ROUNDS]   (default 2 5)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
BUILDDIR=${BUILDDIR:-$src/build}
lib=$BUILDDIR/subprojects/fuse3/lib/libfuse3.a
[ -f "$lib" ] || { echo "run_passthrough_probe: no bundled libfuse at $lib (tools/setup.sh, ninja -C $BUILDDIR)" >&2; exit 2; }
gib=${1:-2}
rounds=${2:-5}
dir=$(mktemp -d "${TMPDIR:-/tmp}/reftfs-ptprobe.XXXXXX")
bin=$dir/passthrough_probe
pids=()
cleanup() {
	for m in "$dir"/mnt4k "$dir"/mnthuge "$dir"/mntmix "$dir"/mntshared "$dir"/mntrw; do
		fusermount3 -u "$m" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	umount "$dir/4k" "$dir/huge" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
cc -O2 -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 \
	-I "$src/subprojects/fuse3/include" -I "$BUILDDIR/subprojects/fuse3" \
	-I "$BUILDDIR/subprojects/fuse3/include" \
	"$here/passthrough_probe.c" "$lib" -lpthread -ldl -luring -lnuma -o "$bin"
mkdir "$dir"/4k "$dir"/huge "$dir"/mnt4k "$dir"/mnthuge "$dir"/mntmix \
	"$dir"/mntshared "$dir"/mntrw
mount -t tmpfs -o "size=$((gib + 1))G" ptprobe-4k "$dir/4k"
mount -t tmpfs -o "size=$((gib + 1))G,huge=always" ptprobe-huge "$dir/huge"
head -c "${gib}G" /dev/urandom >"$dir/huge/data"
cp "$dir/huge/data" "$dir/4k/data"
start() { "$bin" "$@" 2>>"$dir/probe.log" & pids+=($!); }
start "$dir/mnt4k" "$dir/4k/data"
start "$dir/mnthuge" "$dir/huge/data"
for i in $(seq 1 50); do
	[ -e "$dir/mnt4k/data" ] && [ -e "$dir/mnthuge/data" ] && break
	sleep 0.1
done
echo "kernel $(uname -r), $(nproc) CPUs, ${gib} GiB file, $rounds rounds, GB/s"
files=("$dir/4k/data" "$dir/mnt4k/data" "$dir/huge/data" "$dir/mnthuge/data")
names=("tmpfs (4 KiB pages)" "passthrough to it" "tmpfs huge=always" "passthrough to it")
python3 - "$rounds" "${files[@]}" -- "${names[@]}" <<'PYEOF'
import mmap, os, statistics, subprocess, sys, time
rounds = int(sys.argv[1])
sep = sys.argv.index("--")
files, names = sys.argv[2:sep], sys.argv[sep + 1:]
step = 1 << 20

def dd(p):
    size = os.stat(p).st_size
    t = time.monotonic()
    subprocess.run(["dd", "if=" + p, "of=/dev/null", "bs=1M"], check=True,
                   stderr=subprocess.DEVNULL)
    return size / (time.monotonic() - t) / 1e9

def mapped(p):
    fd = os.open(p, os.O_RDONLY)
    size = os.fstat(fd).st_size
    t = time.monotonic()
    mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    for off in range(0, size, step):
        mm[off:off + step]
    mm.close()
    os.close(fd)
    return size / (time.monotonic() - t) / 1e9

for what, fn in (("dd read", dd), ("mmap read", mapped)):
    res = {p: [] for p in files}
    for _ in range(rounds):  # interleaved: noise hits every file alike
        for p in files:
            res[p].append(fn(p))
    for p, n in zip(files, names):
        print("%-10s %-21s %s   median %.2f" % (
            what, n, " ".join("%6.2f" % x for x in res[p]),
            statistics.median(res[p])))
PYEOF
# A direct open of an inode while a passthrough open of it is held.
start "$dir/mntmix" "$dir/huge/data" mix
for i in $(seq 1 50); do [ -e "$dir/mntmix/data" ] && break; sleep 0.1; done
exec 3<"$dir/mntmix/data"
if dd if="$dir/mntmix/data" of=/dev/null bs=1M count=1 2>/dev/null; then
	echo "a direct open beside a passthrough open of the same inode: allowed"
else
	echo "a direct open beside a passthrough open of the same inode: refused (EIO)"
fi
exec 3<&-

# Two passthrough opens of one inode at once: each with a backing id of
# its own (mnthuge), or both with the one registered at the first (shared).
start "$dir/mntshared" "$dir/huge/data" shared
for i in $(seq 1 50); do [ -e "$dir/mntshared/data" ] && break; sleep 0.1; done
for m in mnthuge mntshared; do
	exec 3<"$dir/$m/data"
	if dd if="$dir/$m/data" of=/dev/null bs=1M count=1 2>/dev/null; then
		r=allowed
	else
		r="refused (EIO)"
	fi
	exec 3<&-
	[ $m = mnthuge ] && w="a backing id of its own" || w="the first open's backing id"
	echo "a second passthrough open with $w while the first is held: $r"
done

# Writers passing through (rw): a small file, the probe answering GETATTR
# with the size the file had at start.
head -c 4M /dev/urandom >"$dir/huge/small"
start "$dir/mntrw" "$dir/huge/small" rw
for i in $(seq 1 50); do [ -e "$dir/mntrw/data" ] && break; sleep 0.1; done
python3 - "$dir/mntrw/data" "$dir/huge/small" <<'PYEOF'
import mmap, os, sys
path, backing = sys.argv[1], sys.argv[2]
def say(what, res):
    print("rw: %-62s %s" % (what, res))
r = os.open(path, os.O_RDONLY)
mm = mmap.mmap(r, 1 << 20, prot=mmap.PROT_READ)
try:
    w = os.open(path, os.O_RDWR)
except OSError as e:
    say("a writer's open beside a passthrough reader", "refused (%s)" % e.strerror)
    sys.exit(0)
say("a writer's open beside a passthrough reader", "allowed")
os.pwrite(w, b"\xab" * 4096, 0)
with open(backing, "rb") as f:
    say("a write through it is in the backing file at once",
        "yes" if f.read(4096) == b"\xab" * 4096 else "no")
say("the reader's mapping sees it", "yes" if mm[:4096] == b"\xab" * 4096 else "no")
size0 = os.fstat(w).st_size
os.pwrite(w, b"\xcd" * 4096, size0 + (1 << 20))
say("size after a write past the end, fstat (was %d)" % size0, os.fstat(w).st_size)
say("the same, stat by path (GETATTR answers %d)" % size0, os.stat(path).st_size)
say("the backing file's size", os.stat(backing).st_size)
os.fsync(w)
os.close(w)
mm.close()
os.close(r)
PYEOF
for what in flush fsync getattr; do
	echo "rw: FUSE_${what^^} reached the daemon: $(grep -c "probe: $what" "$dir/probe.log" || true) times"
done
# A writer's shared mapping through a passthrough open: what reaches the
# daemon, and when, if the mapping outlives the descriptor (legal, and what
# numpy.memmap does when its file object is closed first).
python3 - "$dir/mntrw/data" "$dir/huge/small" "$dir/probe.log" <<'PYEOF'
import mmap, os, sys
path, backing, log = sys.argv[1], sys.argv[2], sys.argv[3]
seen = len(open(log).read().splitlines())
def say(what, res):
    print("rw map: %-55s %s" % (what, res))
def daemon(what):
    """What reached the daemon since the last step (stat makes a GETATTR)."""
    global seen
    os.stat(path)
    lines = open(log).read().splitlines()
    got = [l[len("probe: "):] for l in lines[seen:] if l.startswith("probe: ")]
    seen = len(lines)
    say(what, "; ".join(got) or "nothing")
r = os.open(path, os.O_RDONLY)
daemon("a reader open")
w = os.open(path, os.O_RDWR)
daemon("a writer open beside it")
mw = mmap.mmap(w, 1 << 20, flags=mmap.MAP_SHARED,
               prot=mmap.PROT_READ | mmap.PROT_WRITE)
mw[0:4096] = b"\x11" * 4096
daemon("the writer mapped the file and stored through the mapping")
os.close(w)
daemon("the writer closed its descriptor, mapping kept")
mw[4096:8192] = b"\x22" * 4096
with open(backing, "rb") as f:
    f.seek(4096)
    say("a store after the close is in the backing file",
        "yes" if f.read(4096) == b"\x22" * 4096 else "no")
daemon("after that store")
mw.flush()
daemon("msync")
mw.close()
daemon("munmap")
os.close(r)
daemon("the reader closed")
PYEOF
cat "$dir/probe.log" | grep -v '^probe: ' >&2 || true
