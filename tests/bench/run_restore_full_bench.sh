#!/usr/bin/env bash
# A restore of an old checkpoint when memory is full (issue 30, finding 4):
# one daemon with --keep 1 --persist-every 0; an old checkpoint written
# back (and so evicted when memory is needed), then a newer one and the
# current one in memory, not written back, filling the budget so that
# nothing is evictable.  Each round drops the page cache and times a dd
# read (bs=1M, to /dev/null) of the old checkpoint's file through the
# mount, and, side by side, of the same file straight from the persist
# dir (the baseline: the source itself).  The medians and their ratio are
# printed, with the daemon's counters (fetch_stalls, reads_uncached).
#
# usage: tests/bench/run_restore_full_bench.sh [--mib M] [--rounds R]
#          [--persist DIR]
#   --mib M        the old checkpoint's file, MiB (default 200)
#   --rounds R     rounds (default 5)
#   --persist DIR  the persist dir (default: a new dir under $TMPDIR or
#                  /tmp, on whatever disk that is; it is emptied first)
# As root (it drops the page cache).
set -euo pipefail

SRCDIR=$(cd "$(dirname "$0")/../.." && pwd)
: "${BUILDDIR:=$SRCDIR/build}"
: "${REFTFSD:=$BUILDDIR/fs/reftfsd}"
: "${REFTFS_ADMIN:=$BUILDDIR/tools/reftfs-admin}"
MIB=200 ROUNDS=5 PERSIST=""
while [ $# -gt 0 ]; do
	case $1 in
	--mib) MIB=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--persist) PERSIST=$2; shift 2 ;;
	-h | --help) sed -n "2,/^set -euo/p" "$0" | sed "$ d"; exit 0 ;;
	*) echo "run_restore_full_bench.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "run_restore_full_bench.sh: run as root" >&2; exit 1; }
[ -x "$REFTFSD" ] || { echo "reftfsd not built: $REFTFSD" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/reftfs-restore.XXXXXX")
MNT=$WORK/mnt
: "${PERSIST:=$WORK/persist}"
mkdir -p "$MNT" "$PERSIST"
find "$PERSIST" -mindepth 1 -delete
PID=""
cleanup() {
	set +e
	if [ -n "$PID" ]; then
		fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT"
		for _ in $(seq 1 600); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$PID" 2>/dev/null
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT

# The budget: the old checkpoint, then two newer ones that fill the rest.
MEM=$((MIB * 2 + 64))
"$REFTFSD" "$MNT" -f --mem "${MEM}M" --keep 1 --persist-every 0 \
	--persist "$PERSIST" --no-prefault >"$WORK/daemon.log" 2>&1 &
PID=$!
for _ in $(seq 1 100); do mountpoint -q "$MNT" && break; sleep 0.1; done
mountpoint -q "$MNT" || { cat "$WORK/daemon.log"; exit 1; }
admin() { "$REFTFS_ADMIN" -m "$MNT" "$@"; }
stat_field() { admin status --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
def find(o, k):
    if isinstance(o, dict):
        for a, b in o.items():
            if a == k: return b
            r = find(b, k)
            if r is not None: return r
    return None
print(find(s, sys.argv[1]))' "$1"; }

mkdir "$MNT/step_1" "$MNT/step_2" "$MNT/step_3"
dd if=/dev/urandom of="$MNT/step_1/model.pt" bs=1M count="$MIB" status=none
admin flush --wait >/dev/null
# Newer checkpoints, not written back, until the budget is full: the old
# one's pieces are evicted to make room (they are in the persist dir).
half=$(((MEM - 8) / 2))
dd if=/dev/zero of="$MNT/step_2/model.pt" bs=1M count="$half" status=none || true
dd if=/dev/zero of="$MNT/step_3/model.pt" bs=1M count="$half" status=none 2>/dev/null || true
echo "budget ${MEM} MiB: $(stat_field chunks_used) of $(stat_field chunks_total) chunks used," \
	"$(stat_field chunks_evictable) evictable"

time_read() { # time_read FILE: seconds of a cold dd read of FILE
	echo 3 >/proc/sys/vm/drop_caches
	local t0 t1
	t0=$(date +%s.%N)
	dd if="$1" of=/dev/null bs=1M status=none
	t1=$(date +%s.%N)
	awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

: >"$WORK/mount.t"
: >"$WORK/persist.t"
for r in $(seq 1 "$ROUNDS"); do
	time_read "$MNT/step_1/model.pt" >>"$WORK/mount.t"
	time_read "$PERSIST/step_1/model.pt" >>"$WORK/persist.t"
	cmp -s "$MNT/step_1/model.pt" "$PERSIST/step_1/model.pt" ||
		{ echo "round $r: the mount read other bytes"; exit 1; }
done
m=$(median <"$WORK/mount.t")
p=$(median <"$WORK/persist.t")
printf 'old checkpoint, %d MiB, memory full, median of %d:\n' "$MIB" "$ROUNDS"
awk -v m="$m" -v p="$p" -v b="$((MIB * 1048576))" 'BEGIN {
	printf "  persist dir alone  %6.3f s  %6.2f GB/s\n", p, b / p / 1e9
	printf "  through reftfs     %6.3f s  %6.2f GB/s  (%.2fx the persist dir)\n",
		m, b / m / 1e9, p / m }'
echo "counters: fetch_stalls $(stat_field fetch_stalls)," \
	"reads_uncached $(stat_field reads_uncached)," \
	"evicted_chunks $(stat_field evicted_chunks)"
