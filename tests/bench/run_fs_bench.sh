#!/usr/bin/env bash
# Filesystem benchmark, reftfs side by side with tmpfs in one run:
#   torch.save / torch.load of a 2 GiB state dict (64 x 32 MiB fp32),
#   dd write / read of 4 GiB with bs=1M, mmap read of that file, mmap
#   write of a new one;
# one untimed warm-up round, then the median of 3, GB/s and the ratio
# reftfs/tmpfs.  Phase 1: tmpfs vs reftfs
# with default options; phase 2: tmpfs vs reftfs --direct-read (only when
# its libfuse is older than 3.16: newer ones open everything direct I/O
# anyway); phase 3 (--compare-build): tmpfs vs the reftfsd of another build
# dir, e.g. one against the system's libfuse.  Only one reftfs daemon runs
# at a time (memory).
#
# usage: tests/bench/run_fs_bench.sh [--size-gib N] [--dd-gib M] [--reps R]
#          [--mem SIZE] [--no-direct-read] [--compare-build DIR]
#          [--json-dir DIR] [-- reftfsd opts]
#   --size-gib N   torch state dict size (default 2)
#   --dd-gib M     dd file size (default 2 x N)
#   --reps R       repetitions, the median is reported (default 3)
#   --mem SIZE     reftfsd --mem (default: dd + state dict + 2 GiB, at least 6G)
#   --compare-build DIR  also measure DIR/fs/reftfsd (phase 3)
#   --json-dir DIR keep the raw per-round results (JSON) there, and
#                  each reftfsd's log (reftfsd-PHASE.log)
#   after --        extra options passed to both reftfsd runs
# Run as root to get a private tmpfs and page-cache drops before reads.
set -euo pipefail

SRCDIR=$(cd "$(dirname "$0")/../.." && pwd)
: "${BUILDDIR:=$SRCDIR/build}"
: "${REFTFSD:=$BUILDDIR/fs/reftfsd}"
PY=/usr/bin/python3
SIZE=2
DD=""
REPS=3
MEM=""
DIRECT=1
JSONDIR=""
COMPARE=""
EXTRA=()
while [ $# -gt 0 ]; do
	case $1 in
	--size-gib) SIZE=$2; shift 2 ;;
	--dd-gib) DD=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	--mem) MEM=$2; shift 2 ;;
	--no-direct-read) DIRECT=0; shift ;;
	--json-dir) JSONDIR=$2; shift 2 ;;
	--compare-build) COMPARE=$2; shift 2 ;;
	--) shift; EXTRA=("$@"); break ;;
	-h | --help) sed -n "2,/^set -euo/p" "$0" | sed "$ d"; exit 0 ;;
	*) echo "run_fs_bench.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
[ -n "$DD" ] || DD=$("$PY" -c "print(2 * float('$SIZE'))")
if [ -z "$MEM" ]; then
	MEM=$("$PY" -c "print(max(6, int(float('$DD') + float('$SIZE') + 2)))")G
fi
[ -x "$REFTFSD" ] || { echo "reftfsd not built: $REFTFSD (run: ninja -C build)" >&2; exit 1; }
"$PY" -c 'import torch' || { echo "needs python3-torch under $PY" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/reftfs-bench.XXXXXX")
WORK=$(cd "$WORK" && pwd -P)
if [ -n "$JSONDIR" ]; then mkdir -p "$JSONDIR"; else JSONDIR=$WORK; fi
TMPFS=$WORK/tmpfs
MNT=$WORK/mnt
mkdir -p "$TMPFS" "$MNT"
PID=""
TMPFS_MOUNTED=0

cleanup() {
	local rc=$?
	set +e
	if grep -q " $MNT " /proc/mounts; then
		fusermount3 -u "$MNT" || fusermount3 -uz "$MNT"
	fi
	if [ -n "$PID" ]; then
		for _ in $(seq 1 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$PID" 2>/dev/null
	fi
	[ "$TMPFS_MOUNTED" = 1 ] && umount "$TMPFS"
	if grep -q " $WORK/" /proc/mounts; then
		echo "mounts left under $WORK" >&2
	else
		rm -rf "$WORK" # raw results stay in --json-dir when given
	fi
	declare -F uring_restore >/dev/null && uring_restore
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# --io-uring: the fuse module's enable_uring, on until the cleanup.
. "$SRCDIR/tests/bench/uring.sh"

if [ "$(id -u)" = 0 ]; then
	mount -t tmpfs -o "size=$("$PY" -c "print(int(float('$DD') + float('$SIZE') + 1))")G" tmpfs "$TMPFS"
	TMPFS_MOUNTED=1
else
	echo "not root: tmpfs target is a /dev/shm directory, caches not dropped" >&2
	rmdir "$TMPFS"
	TMPFS=$(mktemp -d /dev/shm/reftfs-bench.XXXXXX)
fi

# libfuse_of REFTFSD: the libfuse version it was built with.
libfuse_of() {
	"$1" --version | sed -n 's/.*(libfuse \([0-9.]*\)).*/\1/p'
}

# start REFTFSD [options]: mount it on $MNT.
start() {
	local bin=$1
	shift
	"$bin" "$MNT" -f --mem "$MEM" "$@" >"$WORK/reftfsd.log" 2>&1 &
	PID=$!
	# --prefault faults the whole --mem in before mounting: minutes on a
	# VM whose memory is backed on first touch.
	for _ in $(seq 1 6000); do
		grep -q " $MNT fuse.reftfs " /proc/mounts && return 0
		kill -0 "$PID" 2>/dev/null || break
		sleep 0.1
	done
	cat "$WORK/reftfsd.log" >&2
	echo "reftfsd did not mount" >&2
	kill -KILL "$PID" 2>/dev/null
	wait "$PID" 2>/dev/null
	grep -q " $MNT " /proc/mounts && fusermount3 -uz "$MNT"
	exit 1
}

stop() { # stop NAME: unmount; the daemon's log kept as JSONDIR/NAME.log
	fusermount3 -u "$MNT"
	wait "$PID" || echo "reftfsd exited $?" >&2
	PID=""
	cp "$WORK/reftfsd.log" "$JSONDIR/reftfsd-$1.log"
}

run() { # run NAME JSON: tmpfs vs the mounted reftfs
	"$PY" "$SRCDIR/tests/bench/fs_bench.py" measure --target "tmpfs=$TMPFS" \
		--target "$1=$MNT" --size-gib "$SIZE" --dd-gib "$DD" --reps "$REPS" \
		--json "$2"
}

FUSE_V=$(libfuse_of "$REFTFSD")
NAME=reftfs-$FUSE_V
echo "== phase 1: tmpfs vs reftfsd (libfuse $FUSE_V) --mem $MEM ${EXTRA[*]}"
start "$REFTFSD" "${EXTRA[@]}"
run "$NAME" "$JSONDIR/fs_bench_default.json"
stop default
files=("$JSONDIR/fs_bench_default.json")
if [ "$DIRECT" = 1 ] &&
	[ "$(printf '%s\n3.16\n' "$FUSE_V" | sort -V | head -n1)" != 3.16 ]; then
	echo "== phase 2: tmpfs vs reftfsd (libfuse $FUSE_V) --mem $MEM --direct-read ${EXTRA[*]}"
	start "$REFTFSD" --direct-read "${EXTRA[@]}"
	run "$NAME-dread" "$JSONDIR/fs_bench_direct_read.json"
	stop direct_read
	files+=("$JSONDIR/fs_bench_direct_read.json")
fi
if [ -n "$COMPARE" ]; then
	bin=$COMPARE/fs/reftfsd
	[ -x "$bin" ] || { echo "not built: $bin" >&2; exit 1; }
	v=$(libfuse_of "$bin")
	echo "== phase 3: tmpfs vs $bin (libfuse $v) --mem $MEM ${EXTRA[*]}"
	start "$bin" "${EXTRA[@]}"
	run "reftfs-$v" "$JSONDIR/fs_bench_compare.json"
	stop compare
	files+=("$JSONDIR/fs_bench_compare.json")
fi
[ "$TMPFS_MOUNTED" = 1 ] || rm -rf "$TMPFS"
echo "== reftfsd options: --mem $MEM ${EXTRA[*]}"
"$PY" "$SRCDIR/tests/bench/fs_bench.py" report tmpfs "${files[@]}"
