#!/usr/bin/env bash
# Real network faults between real daemons (issue 27, item 5): three
# nodes, each in a network namespace of its own, joined by a bridge in a
# fourth (lib.sh's netns_group); --protect replicate:2.
#
# 1. A partition: node 2 cut off.  The majority (0, 1) declares it dead
#    and goes on: a mkdir and a protected save there.  The minority's
#    changes fail EIO within their deadline (10 s, docs/operations.md
#    "Deadlines in a group"); its own file still reads right; no read on
#    either side returns wrong bytes.
# 2. Healed: node 2 is up again for the others, sees what the majority
#    did, and every file reads the same on every node.
# 3. (full tier) A slow link that drops what overflows its queue: node 1
#    behind a token bucket (tc tbf; this kernel has no netem, so a rate
#    and a short queue stand in for delay and loss, and the drops are
#    counted).  Node 0's 8 MiB save is protected on node 1 through it,
#    packets were dropped, and every file reads right everywhere.
. "$(dirname "$0")/lib.sh"
need_fuse
need_netns

MiB=$((1 << 20))
REF=$(new_dir ref)

# same_everywhere FILE...: each FILE under ck/ reads as $REF/FILE on every
# node.
same_everywhere() {
	local f n
	for f in "$@"; do
		for n in 0 1 2; do
			cmp "$REF/$f" "${M[$n]}/ck/$f" ||
				fail "ck/$f differs on node $n"
		done
	done
}

netns_group 3
for n in 0 1 2; do netns_node "$n" --protect replicate:2; done
wait_states "${M[0]}" "self up up" 30
wait_agree 30 0 1 2
mkdir "${M[0]}/ck"
for n in 0 2; do
	head -c $((4 * MiB)) /dev/urandom >"$REF/f$n"
	cp "$REF/f$n" "${M[$n]}/ck/f$n"
	admin "${M[$n]}" protect --wait >/dev/null ||
		fail "protect --wait of ck/f$n on node $n"
done
same_everywhere f0 f2
log "three nodes across namespaces: files protected and read everywhere"

# --- 1. a partition ------------------------------------------------------
net_cut 2
wait_states "${M[0]}" "self up dead" 30
wait_states "${M[1]}" "up self dead" 30
t0=$SECONDS
rc=0
mkdir "${M[2]}/ck/minority" 2>"$T_TMP/err" || rc=$?
secs=$((SECONDS - t0))
[ "$rc" != 0 ] || fail "mkdir on the cut-off node succeeded"
grep -q "Input/output error" "$T_TMP/err" ||
	fail "mkdir on the cut-off node: $(cat "$T_TMP/err"), want EIO"
[ "$secs" -le 15 ] || fail "mkdir on the cut-off node took $secs s (deadline 10 s)"
log "minority: mkdir failed EIO after $secs s"
cmp "$REF/f2" "${M[2]}/ck/f2" || fail "node 2's own ck/f2 differs while cut off"
# The majority goes on.
mkdir "${M[0]}/ck/major"
head -c $((2 * MiB)) /dev/urandom >"$REF/f1"
cp "$REF/f1" "${M[1]}/ck/f1" # its copy goes to node 2: cut off
head -c $((3 * MiB)) /dev/urandom >"$REF/g0"
cp "$REF/g0" "${M[0]}/ck/g0" # its copy goes to node 1
admin "${M[0]}" protect --wait >/dev/null ||
	fail "protect --wait of ck/g0 on node 0 while node 2 is cut off"
for n in 0 1; do
	for f in f0 f2 f1 g0; do
		cmp "$REF/$f" "${M[$n]}/ck/$f" ||
			fail "ck/$f differs on node $n while node 2 is cut off"
	done
done
[ -d "${M[2]}/ck/major" ] && fail "the cut-off node shows the majority's mkdir"
log "majority: mkdir, saves and reads go on"

# --- 2. healed -----------------------------------------------------------
net_heal 2
wait_states "${M[0]}" "self up up" 30
wait_states "${M[2]}" "up up self" 30
for i in $(seq 1 300); do
	[ -d "${M[2]}/ck/major" ] && break
	sleep 0.1
done
[ -d "${M[2]}/ck/major" ] || fail "node 2 does not show ck/major 30 s after healing"
[ -d "${M[0]}/ck/minority" ] && fail "the minority's failed mkdir shows after healing"
admin "${M[1]}" protect --wait >/dev/null ||
	fail "protect --wait of ck/f1 on node 1 after healing"
same_everywhere f0 f2 f1 g0
for n in 1 2; do
	[ "$(ls "${M[$n]}/ck")" = "$(ls "${M[0]}/ck")" ] ||
		fail "ck on node $n: $(ls "${M[$n]}/ck" | tr '\n' ' '), node 0: $(ls "${M[0]}/ck" | tr '\n' ' ')"
done
log "healed: node 2 back, every file the same on every node"

# --- 3. a slow link that drops -------------------------------------------
if [ "$(by_tier quick full full)" = full ]; then
	net_slow 1 20mbit 24kb
	head -c $((8 * MiB)) /dev/urandom >"$REF/h0"
	t0=$(date +%s.%N)
	cp "$REF/h0" "${M[0]}/ck/h0" # its copy goes to node 1, slowly
	timeout 120 "$REFTFS_ADMIN" -m "${M[0]}" protect --wait >/dev/null ||
		fail "protect --wait of ck/h0 through the slow link"
	secs=$("$PY" -c "print('%.1f' % ($(date +%s.%N) - $t0))")
	drops=$(net_drops 1)
	log "8 MiB protected through a 20 Mbit/s link in $secs s, $drops packets dropped"
	# 8 MiB at 20 Mbit/s is 3.4 s: it went through the bucket.
	"$PY" -c "import sys; sys.exit(not $secs >= 3)" ||
		fail "8 MiB protected in $secs s: not through the slow link"
	[ "$drops" -gt 0 ] || fail "the slow link dropped nothing: no loss was tried"
	same_everywhere f0 f2 f1 g0 h0
	net_fast 1
	same_everywhere h0
	log "slow, lossy link: protected, every file the same on every node"
fi
