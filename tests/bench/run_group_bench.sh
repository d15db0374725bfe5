#!/usr/bin/env bash
# The group's benchmarks (issue 8), each side by side with its baseline in
# one run, on this machine's loopback:
#   1. replication: a SIZE file written on node 0 and protected on node 1
#      (replicate:2), close() to PROTECTED, against a plain TCP stream of
#      the same bytes between two processes;
#   2. torch.save of SIZE on a replicate:2 group against a --protect none
#      group (the writer's time; close never waits for peers), ROUNDS
#      rounds alternating;
#   3. the lost node's file read on its replacement (from its peer),
#      against a local RAM read of the same file on the peer that holds it,
#      and against the persist dir with the page cache dropped.
#
# usage: tests/bench/run_group_bench.sh [SIZE_GIB [ROUNDS]]  (default 2 3)
# Run as root (drop_caches).  Prints one table; ratios are what count.
set -euo pipefail

SRCDIR=$(cd "$(dirname "$0")/../.." && pwd)
: "${BUILDDIR:=$SRCDIR/build}"
REFTFSD=$BUILDDIR/fs/reftfsd
ADMIN=$BUILDDIR/tools/reftfs-admin
PY=/usr/bin/python3
GIB=${1:-2}
ROUNDS=${2:-3}
SIZE=$((GIB << 30))
MEM_R=$((GIB * 2 + 1))G	# own file + torch.save, or their copies
MEM_N=$((GIB + 1))G
[ -x "$REFTFSD" ] || { echo "reftfsd not built: $REFTFSD" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root (drop_caches)" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/reftfs-gbench.XXXXXX")
WORK=$(cd "$WORK" && pwd -P)
MOUNTS=()
cleanup() {
	local rc=$? m
	set +e
	for m in "${MOUNTS[@]}"; do
		grep -q " $m " /proc/mounts && { fusermount3 -u "$m" || fusermount3 -uz "$m"; }
	done
	sleep 1
	pkill -f "reftfsd $WORK/" 2>/dev/null
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

ports() { "$PY" "$SRCDIR/tools/free_ports.py" "$1"; }
SECRET=$WORK/secret
(umask 077 && head -c 48 /dev/urandom | base64 -w0 >"$SECRET")

# group NAME PROTECT MEM: a group of two daemons, mounts $WORK/NAME0 and
# NAME1, memory faulted in before mounting (as pinned RAM would be: a
# first touch of fresh pages costs more than the copy it serves).
group() {
	local name=$1 protect=$2 mem=$3 n p0 p1
	read -r p0 p1 <<<"$(ports 2)"
	mkdir -p "$WORK/persist-$name"
	for n in 0 1; do
		mkdir -p "$WORK/$name$n"
		MOUNTS+=("$WORK/$name$n")
		"$REFTFSD" "$WORK/$name$n" --node "$n" \
			--peers "127.0.0.1:$p0,127.0.0.1:$p1" \
			--secret-file "$SECRET" --state-dir "$WORK/state-$name$n" \
			--protect "$protect" --mem "$mem" --prefault \
			--persist "$WORK/persist-$name" --persist-every 0 \
			--dead-after 2 &
	done
	wait
	"$ADMIN" -m "$WORK/${name}0" ls / >/dev/null
	"$ADMIN" -m "$WORK/${name}1" ls / >/dev/null
	eval "PEERS_$name=127.0.0.1:$p0,127.0.0.1:$p1"
}

ms() { date +%s%N | cut -c1-13; }
ratio() { "$PY" -c "print('%.2f' % ($1 / $2))"; }

echo "== group benchmark: ${GIB} GiB, $ROUNDS rounds, $(nproc) CPUs, $(uname -r)"
group r replicate:2 "$MEM_R"
group n none "$MEM_N"

# --- 1. replication against a plain TCP stream ----------------------------
read -r st_s st_gbs <<<"$("$PY" "$SRCDIR/tests/bench/group_bench.py" stream "$SIZE")"
w=$("$PY" "$SRCDIR/tests/bench/group_bench.py" write "$WORK/r0/big" "$SIZE")
t0=$(ms)
"$ADMIN" -m "$WORK/r0" protect --wait >/dev/null
t1=$(ms)
prot_s=$("$PY" -c "print('%.3f' % (($t1 - $t0) / 1000))")
prot_gbs=$("$PY" -c "print('%.3f' % ($SIZE / (($t1 - $t0) / 1000) / 1e9))")
echo
echo "1. replication of ${GIB} GiB to one peer (close -> PROTECTED) vs a plain TCP stream"
printf '   %-34s %8s s  %7s GB/s\n' "plain TCP stream, 2 processes" "$st_s" "$st_gbs"
printf '   %-34s %8s s  %7s GB/s\n' "write on node 0 (to close)" "$w" "-"
printf '   %-34s %8s s  %7s GB/s\n' "close -> PROTECTED (replicate:2)" "$prot_s" "$prot_gbs"
printf '   ratio protect/stream: %sx\n' "$(ratio "$prot_gbs" "$st_gbs")"

# --- 2. torch.save with and without protection -----------------------------
echo
echo "2. torch.save of ${GIB} GiB: replicate:2 vs --protect none (writer's time)"
tr=() tn=()
for i in $(seq 1 "$ROUNDS"); do
	tn+=("$("$PY" "$SRCDIR/tests/bench/group_bench.py" save "$WORK/n0/model.pt" "$SIZE")")
	"$ADMIN" -m "$WORK/n0" flush --wait >/dev/null
	tr+=("$("$PY" "$SRCDIR/tests/bench/group_bench.py" save "$WORK/r0/model.pt" "$SIZE")")
	"$ADMIN" -m "$WORK/r0" protect --wait >/dev/null
	"$ADMIN" -m "$WORK/r0" flush --wait >/dev/null
done
best() { printf '%s\n' "$@" | sort -n | head -1; }
median() { printf '%s\n' "$@" | sort -n | sed -n "$((($# + 1) / 2))p"; }
bn=$(best "${tn[@]}") mn=$(median "${tn[@]}")
br=$(best "${tr[@]}") mr=$(median "${tr[@]}")
printf '   %-34s %s (best %s s, median %s s)\n' "--protect none" "${tn[*]}" "$bn" "$mn"
printf '   %-34s %s (best %s s, median %s s)\n' "replicate:2" "${tr[*]}" "$br" "$mr"
printf '   ratio replicate/none: best %sx, median %sx\n' "$(ratio "$br" "$bn")" \
	"$(ratio "$mr" "$mn")"

# --- 3. reading a lost node's file ----------------------------------------
"$ADMIN" -m "$WORK/r0" flush --wait >/dev/null
pid=$(pgrep -f "reftfsd $WORK/r0 " | head -1)
kill -KILL "$pid"
fusermount3 -uz "$WORK/r0"
sleep 3
"$REFTFSD" "$WORK/r0" --node 0 --peers "$PEERS_r" --secret-file "$SECRET" \
	--state-dir "$WORK/state-r0" --protect replicate:2 --mem "$MEM_R" \
	--prefault --persist "$WORK/persist-r" --persist-every 0 \
	--dead-after 2 --protect-bw 1M
# The rebuild, paced to 1 MB/s here, brings back almost nothing meanwhile:
# the read fetches from the peer.
sync
echo 3 >/proc/sys/vm/drop_caches
read -r rep_s rep_gbs <<<"$("$PY" "$SRCDIR/tests/bench/group_bench.py" read "$WORK/r0/big")"
read -r loc_s loc_gbs <<<"$("$PY" "$SRCDIR/tests/bench/group_bench.py" read "$WORK/r1/big" | tail -1)"
sync
echo 3 >/proc/sys/vm/drop_caches
read -r per_s per_gbs <<<"$("$PY" "$SRCDIR/tests/bench/group_bench.py" read "$WORK/persist-r/big")"
echo
echo "3. reading the lost node's ${GIB} GiB file"
printf '   %-34s %8s s  %7s GB/s\n' "on its replacement (from the peer)" "$rep_s" "$rep_gbs"
printf '   %-34s %8s s  %7s GB/s\n' "on the peer (local RAM)" "$loc_s" "$loc_gbs"
printf '   %-34s %8s s  %7s GB/s\n' "persist dir, page cache dropped" "$per_s" "$per_gbs"
printf '   ratio replacement/local: %sx, replacement/persist: %sx\n' \
	"$(ratio "$rep_gbs" "$loc_gbs")" "$(ratio "$rep_gbs" "$per_gbs")"
