#!/usr/bin/env bash
# Small files, reftfs side by side with tmpfs in one run
# (tests/bench/small_bench.py): create+write+close, stat, open+read+close,
# unlink of N files of SIZE bytes, us per file and budget per file; the
# first round on a reftfs mounted just before (fresh: nothing faulted in,
# nothing cached), the others warm.
#
# usage: tests/bench/run_small_bench.sh [small_bench.py options]
#          [-- reftfsd options]      (default: --files 2000 --size 4096)
# Run as root: a private tmpfs, and page-cache drops before reads.
set -euo pipefail

SRCDIR=$(cd "$(dirname "$0")/../.." && pwd)
: "${BUILDDIR:=$SRCDIR/build}"
: "${REFTFSD:=$BUILDDIR/fs/reftfsd}"
PY=/usr/bin/python3
ARGS=()
EXTRA=()
while [ $# -gt 0 ]; do
	case $1 in
	--) shift; EXTRA=("$@"); break ;;
	*) ARGS+=("$1"); shift ;;
	esac
done
[ -x "$REFTFSD" ] || { echo "reftfsd not built: $REFTFSD" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root (tmpfs mount, drop_caches)" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/reftfs-small.XXXXXX")
WORK=$(cd "$WORK" && pwd -P)
MNT=$WORK/mnt
TMPFS=$WORK/tmpfs
mkdir -p "$MNT" "$TMPFS"
PID=""
cleanup() {
	local rc=$?
	set +e
	grep -q " $MNT " /proc/mounts && { fusermount3 -u "$MNT" || fusermount3 -uz "$MNT"; }
	[ -n "$PID" ] && wait "$PID"
	grep -q " $TMPFS " /proc/mounts && umount "$TMPFS"
	rm -rf "$WORK"
	declare -F uring_restore >/dev/null && uring_restore
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# --io-uring: the fuse module's enable_uring, on until the cleanup.
. "$SRCDIR/tests/bench/uring.sh"

mount -t tmpfs -o size=4G tmpfs "$TMPFS"
"$REFTFSD" "$MNT" -f --mem 4G "${EXTRA[@]}" >"$WORK/reftfsd.log" 2>&1 &
PID=$!
for _ in $(seq 1 300); do
	grep -q " $MNT fuse.reftfs " /proc/mounts && break
	sleep 0.1
done
grep -q " $MNT fuse.reftfs " /proc/mounts || { cat "$WORK/reftfsd.log" >&2; exit 1; }
grep 'fuse: libfuse' "$WORK/reftfsd.log" || true
"$PY" "$SRCDIR/tests/bench/small_bench.py" --target "tmpfs=$TMPFS" \
	--target "reftfs=$MNT" "${ARGS[@]}"
