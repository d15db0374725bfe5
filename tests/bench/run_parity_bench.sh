#!/usr/bin/env bash
# Erasure-coded protection (issue 9), side by side with its baselines in one
# run on this machine's loopback:
#   1. protection throughput: every node of a group writes a SIZE file at
#      once, then close -> PROTECTED on every node, for none (the writes
#      alone), replicate:2 and xor on 3 nodes and rs:4+2 on 6 nodes;
#      against codec_bench's encode rate
#      of the same code (the codec alone, in one process);
#   2. memory per protected GiB: the bytes of copies and parity rows every
#      node holds for the others (reftfs-admin group --json), over the data;
#   3. a lost node's file read on its replacement, rebuilt from the stripes
#      (xor on 3 nodes), against a local RAM read of a same-size file and
#      against the persist dir with the page cache dropped.
#
# usage: tests/bench/run_parity_bench.sh [SIZE_GIB]  (default 1)
# Run as root (drop_caches).  Prints one table; ratios are what count.
set -euo pipefail

SRCDIR=$(cd "$(dirname "$0")/../.." && pwd)
: "${BUILDDIR:=$SRCDIR/build}"
REFTFSD=$BUILDDIR/fs/reftfsd
ADMIN=$BUILDDIR/tools/reftfs-admin
CODEC_BENCH=$BUILDDIR/tests/bench/codec_bench
PY=/usr/bin/python3
GIB=${1:-1}
SIZE=$((GIB << 30))
MEM=$((GIB * 3 + 1))G	# own file, parity or copies of the others
[ -x "$REFTFSD" ] || { echo "reftfsd not built: $REFTFSD" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root (drop_caches)" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/reftfs-pbench.XXXXXX")
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

# node NAME N PROTECT [options]: start node N of group NAME (options:
# --prefault or --no-prefault, ...).
node() {
	local name=$1 n=$2 protect=$3
	shift 3
	mkdir -p "$WORK/$name$n" "$WORK/persist-$name"
	"$REFTFSD" "$WORK/$name$n" --node "$n" --peers "$(eval echo "\$PEERS_$name")" \
		--secret-file "$SECRET" --state-dir "$WORK/state-$name$n" \
		--protect "$protect" --mem "$MEM" \
		--persist "$WORK/persist-$name" --persist-every 0 \
		--dead-after "${DEAD:-10}" "$@"
}

# group NAME PROTECT NODES [options]: a group of NODES daemons, mounts
# $WORK/NAMEi.
group() {
	local name=$1 protect=$2 nodes=$3 n peers="" p
	shift 3
	for p in $(ports "$nodes"); do peers="$peers,127.0.0.1:$p"; done
	eval "PEERS_$name=${peers#,}"
	for ((n = 0; n < nodes; n++)); do
		MOUNTS+=("$WORK/$name$n")
		node "$name" "$n" "$protect" "$@" &
	done
	wait
	for ((n = 0; n < nodes; n++)); do
		"$ADMIN" -m "$WORK/$name$n" ls / >/dev/null
	done
}

stop_group() {
	local name=$1 nodes=$2 n
	for ((n = 0; n < nodes; n++)); do
		fusermount3 -u "$WORK/$name$n" 2>/dev/null || fusermount3 -uz "$WORK/$name$n"
	done
	sleep 1
}

ms() { date +%s%N | cut -c1-13; }
# cpu_ticks: "busy total" jiffies of all CPUs so far (/proc/stat).
cpu_ticks() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat; }
busy_pct() { # BEFORE AFTER ("busy total" each): busy share of all CPUs
	"$PY" -c "import sys; b0, t0, b1, t1 = map(int, sys.argv[1:]); print('%.0f' % (100 * (b1 - b0) / max(1, t1 - t0)))" $1 $2
}
ratio() { "$PY" -c "print('%.2f' % ($1 / $2))"; }
# held NAME NODES: bytes of copies and parity rows held, over all nodes.
held() {
	local name=$1 nodes=$2 n sum=0 b
	for ((n = 0; n < nodes; n++)); do
		b=$("$ADMIN" -m "$WORK/$name$n" group --json | "$PY" -c '
import json, sys
g = json.load(sys.stdin)["group"]
print((g.get("protect_bytes_held") or 0) + (g.get("parity_bytes") or 0))')
		sum=$((sum + b))
	done
	echo "$sum"
}

echo "== parity benchmark: ${GIB} GiB per node, $(nproc) CPUs, $(uname -r)"
codec=$("$CODEC_BENCH" 1 2>/dev/null || true)
# "encode" lines of our codec: xor k=3 and rs 4+2, GB/s of data in.
enc_rate() { awk -v want="$1" '$0 ~ want && /encode/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/) { print $i; exit } }' <<<"$codec"; }
xor_enc=$(enc_rate "^xor:3 ")
rs_enc=$(enc_rate "^rs:4\\+2 ")

echo
echo "1. every node writes ${GIB} GiB at once, then close -> PROTECTED on every node"
echo "   (times from the first write: to the last close, to every file PROTECTED)"
printf '   %-14s %5s %9s %9s %11s %8s %12s\n' scheme nodes "data" "closed" "PROTECTED" "GB/s" "held/GiB"
declare -A rate
for spec in none/3 replicate:2/3 xor/3 rs:4+2/6; do
	scheme=${spec%/*} nodes=${spec#*/} name=g${scheme//[^a-z0-9]/}
	# Memory faulted in on first touch, alike for every scheme.
	group "$name" "$scheme" "$nodes" --no-prefault
	# One namespace: each node its own file (rank n's shard).
	t0=$(ms)
	for ((n = 0; n < nodes; n++)); do
		"$PY" "$SRCDIR/tests/bench/group_bench.py" write "$WORK/$name$n/big$n" "$SIZE" >/dev/null &
	done
	wait
	tw=$(ms)
	for ((n = 0; n < nodes; n++)); do
		[ "$scheme" = none ] ||
			"$ADMIN" -m "$WORK/$name$n" protect --wait >/dev/null &
	done
	wait
	t1=$(ms)
	data=$((SIZE * nodes))
	wsecs=$("$PY" -c "print('%.3f' % (($tw - $t0) / 1000))")
	secs=$("$PY" -c "print('%.3f' % (($t1 - $t0) / 1000))")
	gbs=$("$PY" -c "print('%.3f' % ($data / (($t1 - $t0) / 1000) / 1e9))")
	h=$(held "$name" "$nodes")
	per=$("$PY" -c "print('%.3f' % ($h / $data))")
	rate[$scheme]=$gbs
	printf '   %-14s %5s %5s GiB %7s s %9s s %8s %8s GiB\n' "$scheme" "$nodes" \
		"$((GIB * nodes))" "$wsecs" "$secs" "$gbs" "$per"
	stop_group "$name" "$nodes"
done
printf '   codec_bench encode (one process): xor k=3 %s GB/s, rs 4+2 %s GB/s\n' \
	"${xor_enc:-?}" "${rs_enc:-?}"
printf '   ratio xor/replicate:2: %sx; rs:4+2/replicate:2: %sx\n' \
	"$(ratio "${rate[xor]}" "${rate[replicate:2]}")" \
	"$(ratio "${rate[rs:4+2]}" "${rate[replicate:2]}")"
[ -n "$xor_enc" ] && printf '   ratio xor/codec: %sx; rs:4+2/codec: %sx\n' \
	"$(ratio "${rate[xor]}" "$xor_enc")" "$(ratio "${rate[rs:4+2]}" "$rs_enc")"

# --- 3. a lost node's file, rebuilt from the stripes -------------------------
# A fresh xor group, its memory faulted in before mounting (as pinned RAM
# would be: a first touch of fresh pages costs more than the copy it
# serves); nodes 0 and 1 write a file each.
name=px
group "$name" xor 3 --prefault
for n in 0 1; do
	"$PY" "$SRCDIR/tests/bench/group_bench.py" write "$WORK/$name$n/big$n" "$SIZE" >/dev/null
	"$ADMIN" -m "$WORK/$name$n" protect --wait >/dev/null
done
"$ADMIN" -m "$WORK/${name}0" flush --wait >/dev/null
pid=$(pgrep -f "reftfsd $WORK/${name}0 " | head -1)
kill -KILL "$pid"
fusermount3 -uz "$WORK/${name}0"
# Declared dead after --dead-after (10 s: 6 daemons on a small machine
# miss heartbeats under load at 2 s).
for i in $(seq 1 300); do
	"$ADMIN" -m "$WORK/${name}1" group --json | "$PY" -c '
import json, sys
sys.exit(json.load(sys.stdin)["members"][0]["state"] != "dead")' && break
	sleep 0.1
done
# A survivor decodes with its own member or row of each stripe at hand.
sync
echo 3 >/proc/sys/vm/drop_caches
c0=$(cpu_ticks)
read -r sur_s sur_gbs <<<"$("$PY" "$SRCDIR/tests/bench/group_bench.py" read "$WORK/${name}1/big0")"
c1=$(cpu_ticks)
sur_busy=$(busy_pct "$c0" "$c1")
# The rebuild, paced to 1 MB/s, brings back almost nothing meanwhile: the
# read decodes.
node "$name" 0 xor --prefault --protect-bw 1M
# The others fold their pieces into the replacement's rows first (not
# paced): the read below is the decode alone, not racing that.
"$ADMIN" -m "$WORK/${name}1" protect --wait >/dev/null
"$ADMIN" -m "$WORK/${name}2" protect --wait >/dev/null
sync
echo 3 >/proc/sys/vm/drop_caches
c0=$(cpu_ticks)
read -r rep_s rep_gbs <<<"$("$PY" "$SRCDIR/tests/bench/group_bench.py" read "$WORK/${name}0/big0")"
c1=$(cpu_ticks)
rep_busy=$(busy_pct "$c0" "$c1")
read -r loc_s loc_gbs <<<"$("$PY" "$SRCDIR/tests/bench/group_bench.py" read "$WORK/${name}1/big1" | tail -1)"
# The persisted copy of node 0's file (flushed before the kill).
sync
echo 3 >/proc/sys/vm/drop_caches
read -r per_s per_gbs <<<"$("$PY" "$SRCDIR/tests/bench/group_bench.py" read "$WORK/persist-$name/big0")"
dec=$("$ADMIN" -m "$WORK/${name}0" group --json | "$PY" -c '
import json, sys
print(json.load(sys.stdin)["group"].get("parity_rebuilt_bytes", 0))')
echo
echo "3. reading the lost node's ${GIB} GiB file (xor, 3 nodes)"
printf '   %-40s %8s s  %7s GB/s  (CPUs %s%% busy)\n' "on a survivor (decoded)" "$sur_s" "$sur_gbs" "$sur_busy"
printf '   %-40s %8s s  %7s GB/s  (CPUs %s%% busy)\n' "on its replacement (decoded: $((dec >> 20)) MiB)" "$rep_s" "$rep_gbs" "$rep_busy"
printf '   %-40s %8s s  %7s GB/s\n' "on a peer, its own file (local RAM)" "$loc_s" "$loc_gbs"
printf '   %-40s %8s s  %7s GB/s\n' "persist dir, page cache dropped" "$per_s" "$per_gbs"
printf '   ratio survivor/local: %sx, survivor/persist: %sx\n' \
	"$(ratio "$sur_gbs" "$loc_gbs")" "$(ratio "$sur_gbs" "$per_gbs")"
printf '   ratio replacement/local: %sx, replacement/persist: %sx\n' \
	"$(ratio "$rep_gbs" "$loc_gbs")" "$(ratio "$rep_gbs" "$per_gbs")"
