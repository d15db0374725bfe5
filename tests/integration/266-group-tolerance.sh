#!/usr/bin/env bash
# What a group tolerates, said out loud (issue 27, item 1): the smaller of
# what its data survives (--protect: replicate:R R - 1, xor 1, rs:K+M M)
# and what its namespace log survives (a majority of its voters must live:
# (V - 1) / 2).  `reftfs-admin group` shows both, in text, JSON and
# metrics; a daemon whose --protect tolerates more than the namespace
# warns at start and says what would keep the promise.
#
# 1. Two nodes, replicate:2: data 1, namespace 0: the group tolerates 0,
#    and each daemon warns (a witness more, or a third node, tolerates 1).
# 2. (full tier) Three nodes, xor: 1 and 1, no warning.
. "$(dirname "$0")/lib.sh"
need_fuse

# tol MNT: "tolerates data namespace voters" as MNT's daemon says.
tol() {
	admin "$1" group --json | "$PY" -c '
import json, sys
g = json.load(sys.stdin)["group"]
print(g["tolerates"], g["tolerates_data"], g["tolerates_namespace"],
      g["voters"])'
}

# --- 1. replicate:2 on two nodes -----------------------------------------
group_init 2
LOGS=()
for n in 0 1; do
	group_node "$n" --protect replicate:2
	LOGS+=("$DAEMON_LOG")
done
wait_states "${M[0]}" "self up"
wait_agree 30 0 1
for n in 0 1; do
	expect_eq "$(tol "${M[$n]}")" "0 1 0 2" "node $n: tolerates, data, namespace, voters"
	grep -q "group .*: --protect replicate:2 tolerates 1 lost node, the namespace log only 0 (a majority of its 2 voters must live): past 0 lost, no change, replacement or rebuild can happen; with 1 witness more (--witnesses), or 3 data nodes, it tolerates 1 in both" "${LOGS[$n]}" ||
		fail "node $n did not warn that replicate:2 outlives the namespace: $(grep -i tolera "${LOGS[$n]}")"
done
out=$(admin "${M[0]}" group)
grep -q "tolerates *0 lost node(s) at once: data any 1 (--protect), namespace any 0 of 2 voters" <<<"$out" ||
	fail "group's text does not say what it tolerates: $out"
grep -q "the namespace tolerates fewer than the data" <<<"$out" ||
	fail "group's text does not say the namespace tolerates fewer: $out"
admin "${M[1]}" metrics >"$T_TMP/metrics"
expect_metric "$T_TMP/metrics" reftfs_group_tolerates -eq 0
expect_metric "$T_TMP/metrics" reftfs_group_tolerates_data -eq 1
expect_metric "$T_TMP/metrics" reftfs_group_tolerates_namespace -eq 0
log "replicate:2 on two nodes: tolerates 0 (data 1, namespace 0), warned"
for n in 0 1; do stop_daemon "${M[$n]}" "${PID[$n]}"; done
rm -rf "$T_TMP"/state*

# --- 2. xor on three nodes -------------------------------------------------
if [ "$(by_tier quick full full)" = full ]; then
	group_init 3
	LOGS=()
	for n in 0 1 2; do
		group_node "$n" --protect xor
		LOGS+=("$DAEMON_LOG")
	done
	wait_states "${M[0]}" "self up up"
	wait_agree 30 0 1 2
	for n in 0 1 2; do
		expect_eq "$(tol "${M[$n]}")" "1 1 1 3" "node $n: tolerates, data, namespace, voters"
		! grep -q "tolerates .* the namespace log only" "${LOGS[$n]}" ||
			fail "node $n warned with xor on three nodes: $(grep -i tolera "${LOGS[$n]}")"
	done
	out=$(admin "${M[2]}" group)
	grep -q "tolerates *1 lost node(s) at once: data any 1 (--protect), namespace any 1 of 3 voters" <<<"$out" ||
		fail "group's text (xor) does not say what it tolerates: $out"
	! grep -q "tolerates fewer" <<<"$out" || fail "xor on three nodes: $out"
	log "xor on three nodes: tolerates 1 (data 1, namespace 1), no warning"
fi
