#!/usr/bin/env bash
# The write and read sides of per-file backing files (FUSE passthrough's
# prerequisite) against the engine's anonymous arena, and the arena's
# chunks mapped onto backing files: tests/bench/backing_bench.c in a
# private tmpfs mounted huge=always, as the daemon would mount one.  As root.
#   bash tests/bench/run_backing_bench.sh [GIB] [ROUNDS]   (default 2 5)
# HUGE=never: the tmpfs with 4 KiB pages instead (as a default tmpfs, the
# baseline of the filesystem benchmarks, has them).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BUILDDIR=${BUILDDIR:-$here/../../build}
bin=$BUILDDIR/tests/bench/backing_bench
[ -x "$bin" ] || { echo "run_backing_bench: build $bin first (ninja -C $BUILDDIR)" >&2; exit 2; }
gib=${1:-2}
dir=$(mktemp -d "${TMPDIR:-/tmp}/reftfs-backing.XXXXXX")
cleanup() { umount "$dir" 2>/dev/null || true; rmdir "$dir"; }
trap cleanup EXIT
mount -t tmpfs -o "size=$((gib * 2 + 1))G,huge=${HUGE:-always},mode=0700" reftfs-backing "$dir"
echo "kernel $(uname -r), $(nproc) CPUs, THP $(cat /sys/kernel/mm/transparent_hugepage/enabled), tmpfs huge=${HUGE:-always}"
"$bin" "$dir" "$gib" "${2:-5}"
