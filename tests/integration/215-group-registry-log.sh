#!/usr/bin/env bash
# The namespace log in a --registry group (issue 8, step 1): three daemons
# that find each other only through a real memcached found the log once
# the registry has named every node (until then reftfs-admin group says
# it waits for the registry), and agree on a leader; the leader SIGKILLed,
# the other two elect another; with memcached killed the log goes on
# (its raft links are its own): a second leader killed, a new one elected
# and committing; memcached back, empty, and the killed node restarted on
# its state dir at another port rejoins with its raft id; a hung follower
# replaced by a daemon at another address on an empty disk joins as a
# replacement (3 voters again), and its old daemon, woken, disturbs
# nothing.  A --listen port of 65535 (no port above it for raft) is
# refused.
. "$(dirname "$0")/lib.sh"
need_fuse
need_memcached

SECRET=$T_TMP/secret
new_secret "$SECRET"
read -r MC P0 P1 P2 <<<"$(free_ports 4)"
PORT=("$P0" "$P1" "$P2")
M=("$(new_dir m0)" "$(new_dir m1)" "$(new_dir m2)")
S=("$T_TMP/state0" "$T_TMP/state1" "$T_TMP/state2")
PID=("" "" "")

# start_node NODE: node NODE's daemon on ${PORT[NODE]} and ${S[NODE]}.
start_node() {
	local i=$1
	start_daemon "${M[$i]}" --mem 64M --no-prefault --node "$i" \
		--registry "127.0.0.1:$MC" --group job43 --group-size 3 \
		--listen "127.0.0.1:${PORT[$i]}" --secret-file "$SECRET" \
		--dead-after 1 --state-dir "${S[$i]}"
	PID[$i]=$DAEMON_PID
}

# others NODE: the node ids other than NODE.
others() {
	local n
	for n in 0 1 2; do [ "$n" = "$1" ] || printf '%s ' "$n"; done
}

# states_of SELF DEAD: the states node SELF shows when node DEAD is dead
# and the third up ("self dead up", ...).
states_of() {
	local n out=""
	for n in 0 1 2; do
		if [ "$n" = "$1" ]; then out="$out self"
		elif [ "$n" = "$2" ]; then out="$out dead"
		else out="$out up"; fi
	done
	echo "${out# }"
}

# Raft listens on --listen's port + 1: a port of 65535 is refused.
_T_MOUNTS+=("${M[0]}")
rc=0
out=$(timeout 20 "$REFTFSD" "${M[0]}" -f --node 0 --registry \
	"127.0.0.1:$MC" --group job43 --group-size 3 --listen 127.0.0.1:65535 \
	--secret-file "$SECRET" 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -qF "PORT must be below 65535" <<<"$out" ||
	fail "--listen 127.0.0.1:65535 with --registry: exit $rc: $out"
is_mounted "${M[0]}" && fail "a refused daemon mounted"

# --- the log waits for the registry to name every node, then founds -----
start_memcached "$MC"
start_node 0
start_node 1
wait_states "${M[0]}" "self up unknown"
out=$(admin "${M[0]}" group)
grep -F "not running yet: waiting for the registry to name every node" \
	<<<"$out" >/dev/null || fail "node 0 does not say it waits: $out"
# Node 1's heartbeats can come before the registry round that names it.
wait_group_log "${M[0]}" log_addrs_unknown 1
expect_eq "$(group_log "${M[0]}" log_raft_id)" 0 \
	"node 0's raft id before node 2 started"
log "two of three: the log waits for the registry to name node 2"

start_node 2
# The bootstrap configuration is entry 1, the leader's barrier entry 2.
MIN_COMMIT=2
wait_agree 30 0 1 2
for n in 0 1 2; do
	expect_eq "$(group_log "${M[$n]}" log_raft_id)" "$((n + 1))" \
		"node $n's raft id"
	expect_eq "$(group_log "${M[$n]}" log_voters)" 3 "node $n's voters"
	expect_eq "$(group_log "${M[$n]}" log_addrs_unknown)" 0 \
		"node $n's unknown addresses"
done
out=$(admin "${M[0]}" group)
grep -F "raft on 127.0.0.1:$((P0 + 1))" <<<"$out" >/dev/null ||
	fail "reftfs-admin group does not show raft on port $((P0 + 1)): $out"
admin "${M[0]}" metrics | grep -Fx "reftfs_group_log_addrs_unknown 0" \
	>/dev/null || fail "metrics: no 'reftfs_group_log_addrs_unknown 0'"
log "registry group: leader $LEADER, term $TERM, commit $COMMIT on all"

# --- the leader is killed: the other two elect another --------------------
OLD=$LEADER OLD_TERM=$TERM
kill_daemon "${M[$OLD]}" "${PID[$OLD]}"
MIN_COMMIT=$((COMMIT + 1))
# shellcheck disable=SC2046
wait_agree 30 $(others "$OLD")
[ "$LEADER" != "$OLD" ] || fail "the killed node $OLD still leads"
[ "$TERM" -gt "$OLD_TERM" ] ||
	fail "new leader $LEADER in term $TERM, not above $OLD_TERM"
log "leader $OLD killed: $LEADER elected in term $TERM, commit $COMMIT"
start_node "$OLD"
MIN_COMMIT=$COMMIT
wait_agree 30 0 1 2
expect_eq "$(group_log "${M[$OLD]}" log_role)" follower \
	"node $OLD's role after its restart"

# --- memcached gone: the log goes on --------------------------------------
stop_memcached
sleep 1
OLD=$LEADER OLD_TERM=$TERM
kill_daemon "${M[$OLD]}" "${PID[$OLD]}"
MIN_COMMIT=$((COMMIT + 1))
# shellcheck disable=SC2046
wait_agree 30 $(others "$OLD")
[ "$LEADER" != "$OLD" ] || fail "the killed node $OLD still leads"
[ "$TERM" -gt "$OLD_TERM" ] ||
	fail "new leader $LEADER in term $TERM, not above $OLD_TERM"
log "memcached down, leader $OLD killed: $LEADER elected in term $TERM," \
	"commit $COMMIT (a new leader's barrier)"

# --- memcached back, empty; the killed node returns at another port ------
start_memcached "$MC"
read -r NEWP <<<"$(free_ports 1)"
PORT[$OLD]=$NEWP
start_node "$OLD"
MIN_COMMIT=$COMMIT
wait_agree 30 0 1 2
expect_eq "$(group_log "${M[$OLD]}" log_raft_id)" "$((OLD + 1))" \
	"node $OLD's raft id after its restart at another port"
expect_eq "$(group_log "${M[$OLD]}" log_role)" follower \
	"node $OLD's role after its restart at another port"
for n in $(others "$OLD"); do
	wait_field "${M[$n]}" "$OLD" address "127.0.0.1:$NEWP" 10
done
log "memcached back empty: node $OLD at port $NEWP rejoined (raft id" \
	"$((OLD + 1)), commit $COMMIT on all)"

# --- a hung follower replaced at another address, on an empty disk -------
F=$(( (LEADER + 1) % 3 ))
HUNG_M=${M[$F]} HUNG_PID=${PID[$F]}
kill -STOP "$HUNG_PID"
wait_states "${M[$LEADER]}" "$(states_of "$LEADER" "$F")" 30
read -r NEWP <<<"$(free_ports 1)"
PORT[$F]=$NEWP
M[$F]=$(new_dir "m$F.b")
S[$F]=$T_TMP/state$F.b
start_node "$F"
want_id=$((F + 1 + 64))
for i in $(seq 1 300); do
	id=$(group_log "${M[$F]}" log_raft_id)
	voters=$(group_log "${M[$LEADER]}" log_voters)
	[ "$id" = "$want_id" ] && [ "$voters" = 3 ] && break
	sleep 0.1
done
expect_eq "$id" "$want_id" "node $F's raft id once replaced"
expect_eq "$voters" 3 "voters after node $F's replacement"
wait_agree 30 0 1 2
expect_eq "$(group_log "${M[$F]}" log_voters)" 3 \
	"voters as node $F's replacement sees them"
log "hung node $F replaced at port $NEWP: raft id $want_id, 3 voters," \
	"leader $LEADER, term $TERM, commit $COMMIT"

# Its old daemon wakes: taken over; the log's leader and term stay.
kill -CONT "$HUNG_PID"
OLD_LEADER=$LEADER OLD_TERM=$TERM
for i in $(seq 1 100); do
	out=$(admin "$HUNG_M" group) || out=""
	grep "TAKEN OVER" <<<"$out" >/dev/null && break
	sleep 0.1
done
grep "TAKEN OVER" <<<"$out" >/dev/null ||
	fail "node $F's old daemon does not say it was taken over: $out"
sleep 3 # several election timeouts of the old daemon's raft
wait_agree 30 0 1 2
expect_eq "$LEADER $TERM" "$OLD_LEADER $OLD_TERM" \
	"leader and term after node $F's old daemon woke"
log "node $F's old daemon woke, taken over: leader $LEADER, term $TERM kept"

daemon_alive "$HUNG_PID"
stop_daemon "$HUNG_M" "$HUNG_PID"
for n in 0 1 2; do
	daemon_alive "${PID[$n]}"
	stop_daemon "${M[$n]}" "${PID[$n]}"
done
stop_memcached
log "PASS"
