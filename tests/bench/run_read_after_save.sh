#!/usr/bin/env bash
# A read right after a save: what a job that loads the checkpoint it just
# wrote (an evaluation, a restart on the same node) sees.  Each round
# writes one file with dd (bs=1M; timed too: what in place costs the save),
# drops the page cache, and times a dd read of it at once (bs=1M, to
# /dev/null); the file is then removed, and
# the next round writes a new file of the same name, as the next
# checkpoint does.  Targets one after the other, each a fresh mount:
#   tmpfs
#   reftfs --no-passthrough                 no passthrough
#   reftfs --no-in-place                    the read's open makes the copy
#   reftfs (the default: in place)          the file written into the
#                                           spare its name's last copy left
# Round 1 of each mount is not counted (no spare of the name yet); the
# medians of the others are printed, with the ratio to tmpfs.
#
# usage: tests/bench/run_read_after_save.sh [--gib G] [--rounds R]
#          [--mem SIZE] [--targets "T..."]
#   --gib G     the file, GiB (default 2)
#   --rounds R  rounds per mount, the first not counted (default 6)
#   --mem SIZE  reftfsd --mem and the tmpfs's size (default 12G)
#   --targets   which of tmpfs reftfs passthrough in-place (default all)
# As root (passthrough needs it; the tmpfs is mounted for the run).
set -euo pipefail

SRCDIR=$(cd "$(dirname "$0")/../.." && pwd)
: "${BUILDDIR:=$SRCDIR/build}"
: "${REFTFSD:=$BUILDDIR/fs/reftfsd}"
: "${REFTFS_ADMIN:=$BUILDDIR/tools/reftfs-admin}"
PY=/usr/bin/python3
GIB=2 ROUNDS=6 MEM=12G
TARGETS=(tmpfs reftfs passthrough in-place)
while [ $# -gt 0 ]; do
	case $1 in
	--gib) GIB=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--mem) MEM=$2; shift 2 ;;
	--targets) read -ra TARGETS <<<"$2"; shift 2 ;;
	-h | --help) sed -n "2,/^set -euo/p" "$0" | sed "$ d"; exit 0 ;;
	*) echo "run_read_after_save.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "run_read_after_save.sh: run as root" >&2; exit 1; }
[ -x "$REFTFSD" ] || { echo "reftfsd not built: $REFTFSD" >&2; exit 1; }
for t in "${TARGETS[@]}"; do
	case $t in
	tmpfs | reftfs | passthrough | in-place) ;;
	*) echo "run_read_after_save.sh: unknown target $t" >&2; exit 2 ;;
	esac
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/reftfs-ras.XXXXXX")
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
	in-place) set -- ;;
	esac
	"$REFTFSD" "$MNT" -f --mem "$MEM" --prefault "$@" >"$WORK/reftfsd.log" 2>&1 &
	PID=$!
	for _ in $(seq 1 6000); do
		grep -q " $MNT fuse.reftfs " /proc/mounts && break
		kill -0 "$PID" 2>/dev/null || { cat "$WORK/reftfsd.log" >&2; exit 1; }
		sleep 0.1
	done
	grep -q " $MNT fuse.reftfs " /proc/mounts ||
		{ echo "reftfsd did not mount" >&2; exit 1; }
	if [ $# -gt 0 ]; then
		for _ in $(seq 1 50); do
			grep -q "passthrough: on" "$WORK/reftfsd.log" && break
			sleep 0.1 # decided at FUSE INIT
		done
		grep -q "passthrough: on" "$WORK/reftfsd.log" ||
			{ grep passthrough "$WORK/reftfsd.log" >&2; exit 1; }
	fi
}

unmount_target() {
	if [ "$TMPFS_ON" = 1 ]; then
		umount "$MNT"
		TMPFS_ON=0
	else
		# What passthrough did, for the record.
		"$REFTFS_ADMIN" -m "$MNT" status 2>/dev/null | grep -i passthrough || true
		fusermount3 -u "$MNT"
		wait "$PID"
		PID=""
	fi
}

now() { date +%s.%N; }

RESULTS=$WORK/results
: >"$RESULTS"
for t in "${TARGETS[@]}"; do
	mount_target "$t"
	mkdir -p "$MNT/step"
	line="$t:"
	for r in $(seq 1 "$ROUNDS"); do
		w0=$(now)
		dd if=/dev/zero of="$MNT/step/model.bin" bs=1M \
			count=$((GIB * 1024)) status=none
		w1=$(now)
		sync -f "$MNT" 2>/dev/null || true
		echo 3 >/proc/sys/vm/drop_caches
		t0=$(now)
		dd if="$MNT/step/model.bin" of=/dev/null bs=1M status=none
		t1=$(now)
		rm -f "$MNT/step/model.bin"
		sleep 1
		s=$("$PY" -c "print('%.3f %.3f' % ($w1 - $w0, $t1 - $t0))")
		line="$line ${s/ //}"
		[ "$r" = 1 ] || echo "$t $s" >>"$RESULTS"
	done
	echo "$line  (s, $GIB GiB: written/read right after)"
	unmount_target
done

"$PY" - "$RESULTS" "$GIB" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
gib = int(sys.argv[2])
med = {}
for t in ("tmpfs", "reftfs", "passthrough", "in-place"):
    w = [float(r[1]) for r in rows if r[0] == t]
    s = [float(r[2]) for r in rows if r[0] == t]
    if s:
        med[t] = (statistics.median(w), statistics.median(s), len(s))
print("medians over %d rounds each; GB/s = 1e9 B/s; ratio = tmpfs time / "
      "time" % next(iter(med.values()))[2])
print("%-12s %10s %10s %7s  %10s %10s %7s" % (
    "", "write s", "GB/s", "ratio", "read s", "GB/s", "ratio"))
for t, (w, s, n) in med.items():
    wr = "%.2fx" % (med["tmpfs"][0] / w) if "tmpfs" in med else "-"
    rr = "%.2fx" % (med["tmpfs"][1] / s) if "tmpfs" in med else "-"
    print("%-12s %10.3f %10.2f %7s  %10.3f %10.2f %7s" % (
        t, w, gib * 2**30 / w / 1e9, wr, s, gib * 2**30 / s / 1e9, rr))
EOF
