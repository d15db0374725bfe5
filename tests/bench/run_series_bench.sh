#!/usr/bin/env bash
# What passthrough's copies cost the writes beside them: a checkpoint of
# several files written back to back (each file's copy at seal runs while
# the next is written), then one large file, on tmpfs and on reftfs
# mounted three ways, one after the other, each a fresh mount:
#   reftfs --no-passthrough                no passthrough
#   reftfs --no-in-place                   copies at seal, once the
#                                          writes stop
#   reftfs --early-copy                    copies while written, too
#   reftfs (the default: in place)         written into their names'
#                                          spares (not a default target)
# Each round: N files of M MiB with dd (bs=1M), timed as one; a pause for
# the copies to end; one file of G GiB, timed; a pause; rm.  Round 1 of
# each mount is a warm-up (the backing tmpfs's first pages fault in) and
# not counted; the medians of the others over every pass are printed, with
# the ratio to tmpfs and to reftfs without passthrough.  Passes alternate
# the order of the targets.
#
# usage: tests/bench/run_series_bench.sh [--files N] [--mib M] [--gib G]
#          [--rounds R] [--passes P] [--mem SIZE] [--targets "T..."]
#   --files N   files per checkpoint (default 8)
#   --mib M     size of each, MiB (default 512)
#   --gib G     the large file, GiB (default 4)
#   --rounds R  rounds per mount, the first not counted (default 5)
#   --passes P  times each target is mounted (default 2)
#   --mem SIZE  reftfsd --mem and the tmpfs's size (default 12G)
#   --targets   which of tmpfs reftfs passthrough early-copy in-place
#               (default all but in-place; ratios need tmpfs, and "vs
#               ref" needs reftfs)
# As root (passthrough needs it; the tmpfs is mounted for the run).
set -euo pipefail

SRCDIR=$(cd "$(dirname "$0")/../.." && pwd)
: "${BUILDDIR:=$SRCDIR/build}"
: "${REFTFSD:=$BUILDDIR/fs/reftfsd}"
PY=/usr/bin/python3
FILES=8 MIB=512 GIB=4 ROUNDS=5 PASSES=2 MEM=12G
TARGETS=(tmpfs reftfs passthrough early-copy)
while [ $# -gt 0 ]; do
	case $1 in
	--files) FILES=$2; shift 2 ;;
	--mib) MIB=$2; shift 2 ;;
	--gib) GIB=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--passes) PASSES=$2; shift 2 ;;
	--mem) MEM=$2; shift 2 ;;
	--targets) read -ra TARGETS <<<"$2"; shift 2 ;;
	-h | --help) sed -n "2,/^set -euo/p" "$0" | sed "$ d"; exit 0 ;;
	*) echo "run_series_bench.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "run_series_bench.sh: run as root" >&2; exit 1; }
[ -x "$REFTFSD" ] || { echo "reftfsd not built: $REFTFSD" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/reftfs-series.XXXXXX")
MNT=$WORK/mnt
mkdir -p "$MNT"
PID=""
TMPFS_ON=0

cleanup() {
	local rc=$?
	set +e
	grep -q " $MNT fuse" /proc/mounts && { fusermount3 -u "$MNT" || fusermount3 -uz "$MNT"; }
	[ -n "$PID" ] && { wait "$PID" 2>/dev/null; PID=""; }
	[ "$TMPFS_ON" = 1 ] && umount "$MNT"
	grep -q " $MNT " /proc/mounts && echo "a mount is left on $MNT" >&2 ||
		rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

mount_target() { # mount_target NAME: on $MNT
	case $1 in
	tmpfs)
		mount -t tmpfs -o "size=$MEM" tmpfs "$MNT"
		TMPFS_ON=1
		return ;;
	reftfs) set -- --no-passthrough ;;
	passthrough) set -- --no-in-place ;;
	early-copy) set -- --early-copy ;;
	in-place) set -- ;;
	esac
	"$REFTFSD" "$MNT" -f --mem "$MEM" --prefault "$@" >"$WORK/reftfsd.log" 2>&1 &
	PID=$!
	for _ in $(seq 1 6000); do
		grep -q " $MNT fuse.reftfs " /proc/mounts && break
		kill -0 "$PID" 2>/dev/null || { cat "$WORK/reftfsd.log" >&2; exit 1; }
		sleep 0.1
	done
	if [ $# -gt 0 ] && ! grep -q "passthrough: on" "$WORK/reftfsd.log"; then
		sleep 1 # decided at FUSE INIT
		grep -q "passthrough: on" "$WORK/reftfsd.log" ||
			{ grep passthrough "$WORK/reftfsd.log" >&2; exit 1; }
	fi
}

unmount_target() {
	if [ "$TMPFS_ON" = 1 ]; then
		umount "$MNT"
		TMPFS_ON=0
	else
		fusermount3 -u "$MNT"
		wait "$PID"
		PID=""
	fi
}

now() { date +%s.%N; }

RESULTS=$WORK/results
: >"$RESULTS"
for t in "${TARGETS[@]}"; do
	case $t in
	tmpfs | reftfs | passthrough | early-copy | in-place) ;;
	*) echo "run_series_bench.sh: unknown target $t" >&2; exit 2 ;;
	esac
done
for pass in $(seq 1 "$PASSES"); do
	order=("${TARGETS[@]}")
	if [ $((pass % 2)) = 0 ]; then
		order=()
		for ((k = ${#TARGETS[@]} - 1; k >= 0; k--)); do
			order+=("${TARGETS[k]}")
		done
	fi
	for t in "${order[@]}"; do
		mount_target "$t"
		line="pass $pass, $t:"
		for r in $(seq 1 "$ROUNDS"); do
			t0=$(now)
			for k in $(seq 1 "$FILES"); do
				dd if=/dev/zero of="$MNT/shard$k" bs=1M count="$MIB" status=none
			done
			t1=$(now)
			sleep 6
			t2=$(now)
			dd if=/dev/zero of="$MNT/big" bs=1M count=$((GIB * 1024)) status=none
			t3=$(now)
			sleep 6
			rm -f "$MNT"/shard* "$MNT/big"
			sleep 1
			series=$("$PY" -c "print('%.3f' % ($t1 - $t0))")
			big=$("$PY" -c "print('%.3f' % ($t3 - $t2))")
			line="$line $series/$big"
			[ "$r" = 1 ] || echo "$t $series $big" >>"$RESULTS"
		done
		echo "$line  (s: $FILES x $MIB MiB / one $GIB GiB file)"
		unmount_target
	done
done

"$PY" - "$RESULTS" "$FILES" "$MIB" "$GIB" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
files, mib, gib = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
med = {}
for t in ("tmpfs", "reftfs", "passthrough", "early-copy", "in-place"):
    s = [float(r[1]) for r in rows if r[0] == t]
    b = [float(r[2]) for r in rows if r[0] == t]
    if s:
        med[t] = (statistics.median(s), statistics.median(b), len(s))
n = next(iter(med.values()))[2]
print("medians (s) over %d rounds each; ratio = tmpfs time / time, "
      "and time against reftfs without passthrough" % n)
print("%-12s %18s %8s %8s %14s %8s %8s" % (
    "target", "%d x %d MiB" % (files, mib), "ratio", "vs ref",
    "%d GiB file" % gib, "ratio", "vs ref"))
def ratio(t, i, s):
    return "%7.2fx" % (med[t][i] / s) if t in med else "%8s" % "-"
def vs(t, i, s):
    return "%+7.1f%%" % (100 * (s / med[t][i] - 1)) if t in med else \
        "%8s" % "-"
for t, (s, b, n) in med.items():
    print("%-12s %16.3f s %s %s %12.3f s %s %s" % (
        t, s, ratio("tmpfs", 0, s), vs("reftfs", 0, s),
        b, ratio("tmpfs", 1, b), vs("reftfs", 1, b)))
EOF
