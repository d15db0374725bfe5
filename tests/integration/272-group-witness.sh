#!/usr/bin/env bash
# Witnesses (issue 27, item 2): voters of the namespace log that hold no
# data and mount nothing, so that a group keeps a majority through as many
# lost data nodes as --protect tolerates.
#
# rs:2+2 on four data nodes and one witness (five voters): the group
# tolerates 2 in both counts.  Two data nodes are lost for good (killed,
# their state dirs gone); their replacements, started on empty disks,
# join the namespace log and rebuild by themselves, with no operator
# step; every file reads the same on every node.  Then two other data
# nodes are lost: the survivors (two data nodes and the witness) still
# read every file and still change names.  The witness is stopped and
# restarted on its state dir on the way, and holds no file's bytes.
#
# (full tier) The same through a --registry group (memcached), where
# --witnesses is a number: replicate:2 on two data nodes and a witness
# tolerates 1; one data node lost for good is replaced and rebuilt.
. "$(dirname "$0")/lib.sh"
need_fuse

group_init 4 1
REF=$(new_dir ref)
W=4
start_node() { group_node "$1" --mem 256M --protect rs:2+2 "${@:2}"; }

# --- options refused (exit 2, the reason) ---------------------------------
# refused WANT ARGS...: reftfsd ARGS exits 2 within 20 s saying WANT.
refused() {
	local want=$1 rc=0 out
	shift
	out=$(timeout 20 "$REFTFSD" "$@" 2>&1) || rc=$?
	[ "$rc" = 2 ] || fail "reftfsd $* exited $rc, want 2: $out"
	grep -q -- "$want" <<<"$out" || fail "reftfsd $*: no '$want' in: $out"
}
G=(--peers "$PEERS" --witnesses "$WITNESSES" --secret-file "$SECRET"
	--state-dir "$T_TMP/state.unused")
mkdir -p "$T_TMP/unused"
refused "a witness mounts nothing" "$T_TMP/unused" -f --witness --node 4 "${G[@]}"
refused "a witness holds no data" --witness -f --node 4 --mem 64M "${G[@]}"
refused "not a witness's id" --witness -f --node 1 "${G[@]}"
refused "start it with --witness" "$T_TMP/unused" -f --node 4 "${G[@]}"
refused "is not in --peers or --witnesses" "$T_TMP/unused" -f --node 5 "${G[@]}"
refused "only for a group" "$T_TMP/unused" -f --witnesses "$WITNESSES"
refused "needs 5 nodes, the group has 4" "$T_TMP/unused" -f --node 0 \
	"${G[@]}" --protect replicate:5
refused "the number of witnesses" --witness -f --node 2 --registry \
	127.0.0.1:1 --group-size 2 --witnesses one --listen 127.0.0.1:1 \
	--secret-file "$SECRET"
is_mounted "$T_TMP/unused" && fail "a refused daemon mounted"
log "witness options refused with their reasons"

# tol MNT: "tolerates data namespace voters witnesses" as MNT says.
tol() {
	admin "$1" group --json | "$PY" -c '
import json, sys
g = json.load(sys.stdin)["group"]
print(g["tolerates"], g["tolerates_data"], g["tolerates_namespace"],
      g["voters"], g["witnesses"])'
}

# check_all NODE...: every file of REF reads the same on each node.
check_all() { same_files "$REF" ck "$@"; }

group_witness "$W" --protect rs:2+2
WLOG=$DAEMON_LOG
for n in 0 1 2 3; do start_node "$n"; done
wait_states "${M[0]}" "self up up up up"
wait_agree 30 0 1 2 3 "$W"
for n in 0 1 2 3 "$W"; do
	expect_eq "$(tol "${M[$n]}")" "2 2 2 5 1" \
		"node $n: tolerates, data, namespace, voters, witnesses"
done
out=$(admin "${M[$W]}" group)
grep -q "witness $W (a namespace log voter, no data), 4 data nodes" <<<"$out" ||
	fail "the witness's group does not say it is one: $out"
grep -q "^ *4  witness " <<<"$(admin "${M[0]}" group)" ||
	fail "node 0's member table does not show node 4 as a witness"
! grep -q "tolerates .* the namespace log only" "$WLOG" ||
	fail "a warning with five voters: $(grep tolera "$WLOG")"
admin "${M[0]}" metrics >"$T_TMP/metrics"
expect_metric "$T_TMP/metrics" reftfs_group_witnesses -eq 1
expect_metric "$T_TMP/metrics" reftfs_group_tolerates -eq 2
log "rs:2+2 on 4 data nodes and 1 witness: tolerates 2 (data 2, namespace 2 of 5)"

# Files from every data node, of sizes across stripes.
mkdir "${M[0]}/ck"
i=0
for size in 0 4096 1048576 3145728 5000000; do
	for n in 0 1 2 3; do
		head -c "$size" /dev/urandom >"$REF/f$i"
		cp "$REF/f$i" "${M[$n]}/ck/f$i"
		i=$((i + 1))
	done
done
for n in 0 1 2 3; do
	admin "${M[$n]}" protect --wait >/dev/null || fail "protect --wait on node $n"
done
check_all 0 1 2 3
# The witness applied every name, and holds none of their bytes.
expect_eq "$(admin "${M[$W]}" status --json | "$PY" -c '
import json, sys
s = json.load(sys.stdin)
print(s["namespace"]["files"], s["memory"]["used_bytes"])')" "20 0" \
	"the witness's files and bytes in memory"

# The witness restarts on its state dir, and is a voter again.
stop_witness "$W"
group_witness "$W" --protect rs:2+2
wait_agree 30 0 1 2 3 "$W"
log "witness restarted on its state dir"

# --- two data nodes lost for good ------------------------------------------
for n in 2 3; do
	kill_daemon "${M[$n]}" "${PID[$n]}"
	rm -rf "$T_TMP/state$n"
done
wait_states "${M[0]}" "self up dead dead up" 30
check_all 0 1
mkdir "${M[1]}/after-loss" || fail "mkdir with 3 of 5 voters up"
log "two data nodes lost: the other two read every file, names change"

# Replacements on new machines (empty state dirs): they join as new raft
# ids and rebuild, with nobody's help.
for n in 2 3; do start_node "$n" --join-timeout 60; done
rebuild_wait 2 3
wait_states "${M[0]}" "self up up up up" 30
MIN_COMMIT=1
wait_agree 30 0 1 2 3 "$W"
for n in 0 1 2 3 "$W"; do
	expect_eq "$(group_log "${M[$n]}" log_voters)" 5 "voters as node $n sees them"
done
check_all 0 1 2 3
log "replacements of nodes 2 and 3 joined and rebuilt: every file the same everywhere"

# --- two other data nodes lost ---------------------------------------------
for n in 0 1; do kill_daemon "${M[$n]}" "${PID[$n]}"; done
wait_states "${M[2]}" "dead dead self up up" 30
check_all 2 3
mkdir "${M[3]}/after-second-loss" || fail "mkdir after the second loss"
[ -d "${M[2]}/after-second-loss" ] || fail "node 2 does not see the new dir"
log "nodes 0 and 1 lost too: nodes 2 and 3 read every file, names change"

for n in 2 3; do stop_daemon "${M[$n]}" "${PID[$n]}"; done
stop_witness "$W"

# --- a registry group: replicate:2 on two data nodes and a witness -------
[ "$(by_tier quick full full)" = full ] || exit 0
need_memcached
rm -rf "$T_TMP"/state* "$REF"/*
read -r MC P0 P1 P2 <<<"$(free_ports 4)"
PORT=("$P0" "$P1" "$P2")
M=("$(new_dir r0)" "$(new_dir r1)" "$T_TMP/rwitness.sock")
FIND=(--registry "127.0.0.1:$MC" --group job27 --group-size 2 --witnesses 1
	--secret-file "$SECRET" --dead-after 2)
reg_node() {
	start_daemon "${M[$1]}" --mem 128M --no-prefault --node "$1" \
		--listen "127.0.0.1:${PORT[$1]}" "${FIND[@]}" \
		--state-dir "$T_TMP/state$1" --protect replicate:2
	PID[$1]=$DAEMON_PID
}
start_memcached "$MC"
start_witness 2 "${M[2]}" --listen "127.0.0.1:${PORT[2]}" "${FIND[@]}" \
	--state-dir "$T_TMP/state2" --protect replicate:2
for n in 0 1; do reg_node "$n"; done
wait_states "${M[0]}" "self up up" 30
MIN_COMMIT=0
wait_agree 30 0 1 2
for n in 0 1 2; do
	expect_eq "$(tol "${M[$n]}")" "1 1 1 3 1" \
		"registry node $n: tolerates, data, namespace, voters, witnesses"
done
mkdir "${M[0]}/ck"
for n in 0 1; do
	head -c 2097152 /dev/urandom >"$REF/r$n"
	cp "$REF/r$n" "${M[$n]}/ck/r$n"
	admin "${M[$n]}" protect --wait >/dev/null || fail "protect --wait on r$n"
done
kill_daemon "${M[1]}" "${PID[1]}"
rm -rf "$T_TMP/state1"
wait_states "${M[0]}" "self dead up" 30
check_all 0
reg_node 1
rebuild_wait 1
MIN_COMMIT=1
wait_agree 30 0 1 2
check_all 0 1
log "registry group: node 1 of two lost for good, replaced and rebuilt (the witness kept the majority)"
for n in 0 1; do stop_daemon "${M[$n]}" "${PID[$n]}"; done
stop_witness 2
