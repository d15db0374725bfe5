#!/usr/bin/env bash
# What fsync costs a checkpoint save under each --sync mode (issue 28), side
# by side in one run: a DCP-style save (fsync_save.py: FILES data files of
# SIZE_MIB, each fsynced, then .metadata) into
#   - tmpfs (the floor: memory, no barrier),
#   - a directory of this machine's disk alone (the stand-in for shared
#     storage: what saving straight to it costs, fsync included),
#   - a reftfs mount alone, --sync none and --sync persist (its persist dir
#     on that same disk),
#   - a 3-node xor group on loopback, --sync none, protect and persist
#     (the save on node 0, the persist dir shared on that disk).
# ROUNDS saves each, alternating; the median is reported, with the ratio
# to tmpfs and to the disk alone.
#
# usage: tests/bench/run_fsync_bench.sh [SIZE_MIB [FILES [ROUNDS]]]
#        (default 256 4 3).  Run as root (tmpfs).
set -euo pipefail

SRCDIR=$(cd "$(dirname "$0")/../.." && pwd)
: "${BUILDDIR:=$SRCDIR/build}"
REFTFSD=$BUILDDIR/fs/reftfsd
ADMIN=$BUILDDIR/tools/reftfs-admin
PY=/usr/bin/python3
MIB=${1:-256}
FILES=${2:-4}
ROUNDS=${3:-3}
SIZE=$((MIB << 20))
MEM=$((MIB * FILES * 5 / 4 + 64))M	# the save, and room for its parity rows
[ -x "$REFTFSD" ] || { echo "reftfsd not built: $REFTFSD" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root (tmpfs)" >&2; exit 1; }

WORK=$(mktemp -d /var/tmp/reftfs-fbench.XXXXXX)
MOUNTS=()
cleanup() {
	local rc=$? m
	set +e
	for m in "${MOUNTS[@]}"; do
		grep -q " $m " /proc/mounts && { fusermount3 -u "$m" 2>/dev/null || umount "$m" 2>/dev/null || umount -l "$m"; }
	done
	sleep 1
	pkill -f "reftfsd $WORK/" 2>/dev/null
	if [ "$rc" != 0 ] && [ -s "$WORK/daemons.log" ]; then
		echo "--- daemons' log (last 40 lines):" >&2
		tail -40 "$WORK/daemons.log" >&2
	fi
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

ports() { "$PY" "$SRCDIR/tools/free_ports.py" "$1"; }
SECRET=$WORK/secret
(umask 077 && head -c 48 /dev/urandom | base64 -w0 >"$SECRET")

mkdir -p "$WORK/tmpfs" "$WORK/disk"
mount -t tmpfs -o size=$((MIB * FILES + 64))M tmpfs "$WORK/tmpfs"
MOUNTS+=("$WORK/tmpfs")

# single NAME SYNC: a reftfs mount alone, its persist dir on the disk.
single() {
	mkdir -p "$WORK/$1" "$WORK/persist-$1"
	MOUNTS+=("$WORK/$1")
	"$REFTFSD" "$WORK/$1" --mem "$MEM" --prefault --persist "$WORK/persist-$1" \
		--persist-every 0 --sync "$2" 2>>"$WORK/daemons.log"
}

# group NAME SYNC: three daemons, --protect xor, mounts $WORK/NAME0..2.
group() {
	local name=$1 sync=$2 n p
	p=($(ports 3))
	mkdir -p "$WORK/persist-$name"
	for n in 0 1 2; do
		mkdir -p "$WORK/$name$n"
		MOUNTS+=("$WORK/$name$n")
		"$REFTFSD" "$WORK/$name$n" --node "$n" \
			--peers "127.0.0.1:${p[0]},127.0.0.1:${p[1]},127.0.0.1:${p[2]}" \
			--secret-file "$SECRET" --state-dir "$WORK/state-$name$n" \
			--protect xor --sync "$sync" --mem "$MEM" --prefault \
			--persist "$WORK/persist-$name" --persist-every 0 \
			--dead-after 2 2>>"$WORK/daemons.log" &
	done
	wait
	for n in 0 1 2; do "$ADMIN" -m "$WORK/$name$n" ls / >/dev/null; done
}

echo "== fsync benchmark: $FILES files of $MIB MiB + .metadata, each fsynced; $ROUNDS rounds; $(nproc) CPUs, $(uname -r)"
single sn none
single sp persist
group gn none
group gr protect
group gp persist

# name label dir admin-mount (empty: not reftfs)
CONFIGS=(
	"tmpfs|tmpfs (the floor)|$WORK/tmpfs|"
	"disk|the disk alone (shared storage's stand-in)|$WORK/disk|"
	"sn|reftfs alone, --sync none|$WORK/sn|$WORK/sn"
	"sp|reftfs alone, --sync persist|$WORK/sp|$WORK/sp"
	"gn|xor group, --sync none|$WORK/gn0|$WORK/gn0"
	"gr|xor group, --sync protect|$WORK/gr0|$WORK/gr0"
	"gp|xor group, --sync persist|$WORK/gp0|$WORK/gp0"
)
declare -A T F
for r in $(seq 1 "$ROUNDS"); do
	for c in "${CONFIGS[@]}"; do
		IFS='|' read -r name label dir mnt <<<"$c"
		rm -rf "$dir/step"
		[ -n "$mnt" ] && "$ADMIN" -m "$mnt" flush --wait >/dev/null
		sync
		read -r s f <<<"$("$PY" "$SRCDIR/tests/bench/fsync_save.py" "$dir/step" "$SIZE" "$FILES")"
		T[$name]="${T[$name]:-} $s"
		F[$name]="${F[$name]:-} $f"
	done
done
median() { printf '%s\n' $1 | sort -n | sed -n "$((($(wc -w <<<"$1") + 1) / 2))p"; }
tm=$(median "${T[tmpfs]}")
dm=$(median "${T[disk]}")
printf '%-44s %9s %8s %10s %8s %8s\n' "" "median s" "GB/s" "max fsync" "/tmpfs" "/disk"
for c in "${CONFIGS[@]}"; do
	IFS='|' read -r name label dir mnt <<<"$c"
	m=$(median "${T[$name]}")
	fm=$(median "${F[$name]}")
	"$PY" -c '
import sys
label = sys.argv[1]
m, tm, dm, fm, size = map(float, sys.argv[2:])
print("%-44s %9.3f %8.2f %8.1f ms %7.2fx %7.2fx" % (label, m, size / m / 1e9, fm, m / tm, m / dm))' \
		"$label" "$m" "$tm" "$dm" "$fm" "$((SIZE * FILES))"
done
echo "(rounds, s:$(for c in "${CONFIGS[@]}"; do IFS='|' read -r name _ <<<"$c"; printf ' %s=%s' "$name" "$(tr ' ' ',' <<<"${T[$name]# }")"; done))"
