#!/usr/bin/env bash
# Forced recovery after a lost majority (issue 27, item 3): `reftfs-admin
# group force-remove NODE...` on a survivor ends the lost nodes' votes, so
# that the namespace log goes on with the survivors and the lost ids are
# replaced on new machines, which join and rebuild by themselves.
#
# 1. replicate:2 on two nodes, no witness: one node lost for good leaves
#    its survivor without a majority.  force-remove is refused while the
#    node is up, for the survivor itself, and for a node with no vote; it
#    then makes the survivor the log's only voter, with every mount up
#    and every file read as before.  The lost node restarted on its old
#    disk is refused (it never joins: --join-timeout ends it), never a
#    second group; its replacement on an empty disk joins and rebuilds.
# 2. (full tier) rs:2+2 on four nodes, no witness: two nodes lost for
#    good.  force-remove on the survivor whose log is furthest along (the
#    other refuses and names it); the other survivor joins again under a
#    new raft id on its own, its mount up all along; both replacements
#    join and rebuild; every file reads the same on every node.
. "$(dirname "$0")/lib.sh"
need_fuse

REF=$(new_dir ref)

# force OUTVAR MNT NODE...: run group force-remove; its exit status in
# FORCE_RC, what it said in the variable OUTVAR.  A leader that has not
# yet seen its majority go is waited for (it steps down within an
# election timeout or two), as an operator told "try again" would.
force() {
	local -n out=$1
	local m=$2 k
	shift 2
	for k in $(seq 1 20); do
		FORCE_RC=0
		out=$(admin "$m" group force-remove "$@" 2>&1) || FORCE_RC=$?
		grep -q "try again in a few seconds" <<<"$out" || return 0
		sleep 0.5
	done
}

# refused MNT WANT NODE...: force-remove NODE... on MNT exits 1 saying WANT.
refused() {
	local m=$1 want=$2 said
	shift 2
	force said "$m" "$@"
	[ "$FORCE_RC" = 1 ] ||
		fail "force-remove $* on $m exited $FORCE_RC, want 1: $said"
	grep -q -- "$want" <<<"$said" ||
		fail "force-remove $* on $m does not say '$want': $said"
	log "force-remove $* refused: ${said#*refused: }"
}

# check_all NODE...: every file of REF reads the same on each node.
check_all() { same_files "$REF" ck "$@"; }

# write_files NODE...: files of a few sizes from each node, protected.
write_files() {
	local n size i=0
	mkdir -p "${M[$1]}/ck"
	for size in 0 4096 1048576 3145728; do
		for n in "$@"; do
			head -c "$size" /dev/urandom >"$REF/f$i"
			cp "$REF/f$i" "${M[$n]}/ck/f$i"
			i=$((i + 1))
		done
	done
	for n in "$@"; do
		admin "${M[$n]}" protect --wait >/dev/null ||
			fail "protect --wait on node $n"
	done
}

# --- 1. replicate:2 on two nodes ------------------------------------------
group_init 2
start_node() { group_node "$1" --mem 128M --protect replicate:2 "${@:2}"; }
start_node 0
LOG0=$DAEMON_LOG
start_node 1
wait_states "${M[0]}" "self up"
wait_agree 30 0 1
write_files 0 1
refused "${M[0]}" "node 1 is up" 1
refused "${M[0]}" "is not in this group" 7

kill_daemon "${M[1]}" "${PID[1]}"
mv "$T_TMP/state1" "$T_TMP/old-disk1"
wait_states "${M[0]}" "self dead" 30
refused "${M[0]}" "node 0 is this node" 0
force said "${M[0]}" 1
[ "$FORCE_RC" = 0 ] || fail "force-remove 1 on node 0 exited $FORCE_RC: $said"
log "force-remove 1: $said"
expect_eq "$(group_log "${M[0]}" log_voters)" 1 "voters after force-remove"
expect_eq "$(group_log "${M[0]}" log_role)" leader "node 0's role"
mkdir "${M[0]}/after" || fail "mkdir after force-remove"
check_all 0
refused "${M[0]}" "node 1 has no vote" 1

# The lost node on its old disk: refused, never a second group.
rc=0
start_node 1 --join-timeout 8 --state-dir "$T_TMP/old-disk1"
OLD=${PID[1]}
for i in $(seq 1 300); do pid_alive "$OLD" || break; sleep 0.1; done
pid_alive "$OLD" && fail "node 1 on its old disk still runs after 30 s"
wait "$OLD" || rc=$?
expect_eq "$rc" 1 "node 1's exit on its old disk"
grep -q "did not take this node" "$DAEMON_LOG" ||
	fail "node 1 on its old disk does not say why it stops"
expect_eq "$(group_log "${M[0]}" log_voters)" 1 "voters after the old disk came back"
expect_eq "$(group_log "${M[0]}" log_role)" leader "node 0's role after the old disk"
[ -d "${M[0]}/after" ] || fail "node 0 lost ck/after"
grep -q "an old raft id of a node replaced or removed" "$LOG0" ||
	fail "node 0 did not refuse node 1's old raft id"
log "node 1 on its old disk: refused, exit 1; node 0 leads on alone"

# Its replacement on an empty disk joins and rebuilds.
start_node 1
rebuild_wait 1
MIN_COMMIT=1
wait_agree 30 0 1
expect_eq "$(group_log "${M[1]}" log_voters)" 2 "voters with the replacement"
check_all 0 1
[ -d "${M[1]}/after" ] || fail "node 1 does not see ck/after"
log "node 1 replaced on an empty disk: joined, rebuilt, every file the same"
for n in 0 1; do stop_daemon "${M[$n]}" "${PID[$n]}"; done

[ "$(by_tier quick full full)" = full ] || exit 0

# --- 2. rs:2+2 on four nodes, two lost -------------------------------------
rm -rf "$T_TMP"/state* "$T_TMP/old-disk1" "$REF"/*
group_init 4
start_node() { group_node "$1" --mem 256M --protect rs:2+2 "${@:2}"; }
for n in 0 1 2 3; do start_node "$n"; done
wait_states "${M[0]}" "self up up up"
wait_agree 30 0 1 2 3
write_files 0 1 2 3
for n in 2 3; do
	kill_daemon "${M[$n]}" "${PID[$n]}"
	rm -rf "$T_TMP/state$n"
done
wait_states "${M[0]}" "self up dead dead" 30
refused "${M[0]}" "name it too, or start it" 2
check_all 0 1
force said "${M[0]}" 2 3
if [ "$FORCE_RC" != 0 ]; then
	grep -q "run force-remove on node 1" <<<"$said" ||
		fail "force-remove 2 3 on node 0: $said"
	log "node 0 defers to node 1: ${said#*refused: }"
	force said "${M[1]}" 2 3
	[ "$FORCE_RC" = 0 ] || fail "force-remove 2 3 on node 1: $said"
fi
log "force-remove 2 3: $said"
grep -q "joins it again" <<<"$said" || fail "the other survivor was not told: $said"
# The other survivor joins the forced log under a new raft id.
MIN_COMMIT=1
wait_agree 60 0 1
for n in 0 1; do
	expect_eq "$(group_log "${M[$n]}" log_voters)" 2 "voters on node $n after the rejoin"
done
mkdir "${M[1]}/after" || fail "mkdir on node 1 after force-remove"
[ -d "${M[0]}/after" ] || fail "node 0 does not see ck/after"
check_all 0 1
for n in 2 3; do start_node "$n" --join-timeout 60; done
rebuild_wait 2 3
wait_states "${M[0]}" "self up up up" 30
wait_agree 30 0 1 2 3
expect_eq "$(group_log "${M[0]}" log_voters)" 4 "voters with both replacements"
check_all 0 1 2 3
log "rs:2+2: two nodes lost, forced, replaced, rebuilt: every file the same everywhere"
for n in 0 1 2 3; do stop_daemon "${M[$n]}" "${PID[$n]}"; done
