#!/usr/bin/env bash
# A group found through a real memcached (issue 8, --registry): three
# daemons that know only memcached's address and their own find each other
# and come up; memcached killed mid-run changes nobody's state; a node that
# starts while memcached is down waits, and comes up once memcached is back
# (empty) and everyone has registered again; a hung node replaced at another
# address, once woken, stops registering its old address.
. "$(dirname "$0")/lib.sh"
need_fuse
need_memcached

SECRET=$T_TMP/secret
new_secret "$SECRET"
read -r MC P0 P1 P2 <<<"$(free_ports 4)"
M0=$(new_dir m0)
M1=$(new_dir m1)
M2=$(new_dir m2)

# Each daemon its own state dir (the namespace log's): the replacement of
# node 1 below comes up on a disk of its own, as on another machine.
reg_opts() { echo --mem 64M --no-prefault --node "$1" --registry \
	"127.0.0.1:$MC" --group job42 --group-size 3 --listen \
	"127.0.0.1:$2" --secret-file "$SECRET" --dead-after 1 \
	--state-dir "$T_TMP/state.$1.$2"; }

# Bad registry options are refused before mounting.
rc=0
out=$(timeout 20 "$REFTFSD" "$M0" -f --node 0 --registry "127.0.0.1:$MC" \
	--secret-file "$SECRET" 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q -- "--group-size" <<<"$out" ||
	fail "--registry without --group-size: exit $rc: $out"

start_memcached "$MC"
# shellcheck disable=SC2046
start_daemon "$M0" $(reg_opts 0 "$P0")
PID0=$DAEMON_PID
# shellcheck disable=SC2046
start_daemon "$M1" $(reg_opts 1 "$P1")
PID1=$DAEMON_PID
wait_states "$M0" "self up unknown"
wait_states "$M1" "up self unknown"
# A heartbeat may come before the registry round that names node 1.
wait_field "$M0" 1 address "127.0.0.1:$P1" 10
admin "$M0" group | grep "memcached registry" >/dev/null ||
	fail "group does not say the registry is used"
log "two nodes found each other through memcached"

# memcached dies: nothing changes for the nodes that know each other.
stop_memcached
sleep 2
expect_eq "$(group_states "$M0")" "self up unknown" "node 0, memcached gone"
expect_eq "$(group_states "$M1")" "up self unknown" "node 1, memcached gone"

# A third node starts while memcached is down: it can find nobody yet.
# shellcheck disable=SC2046
start_daemon "$M2" $(reg_opts 2 "$P2")
PID2=$DAEMON_PID
sleep 1
expect_eq "$(group_states "$M2")" "unknown unknown self" \
	"node 2 with memcached down"

# memcached back, empty: all register again and node 2 joins.
start_memcached "$MC"
wait_states "$M2" "up up self" 30
wait_states "$M0" "self up up" 30
log "memcached lost and back: nothing lost, the late node joined"

# Node 1 hangs and a replacement takes its place at another address.
# The hung daemon, woken, finds the replacement's entry under its key:
# it stops registering (the others stay with the replacement) and says so.
read -r P1B <<<"$(free_ports 1)"
M1B=$(new_dir m1b)
kill -STOP "$PID1"
wait_states "$M0" "self dead up" 30
# shellcheck disable=SC2046
start_daemon "$M1B" $(reg_opts 1 "$P1B")
PID1B=$DAEMON_PID
wait_states "$M0" "self up up" 30
wait_states "$M2" "up up self" 30
wait_field "$M0" 1 address "127.0.0.1:$P1B" 10
kill -CONT "$PID1"
taken=""
for i in $(seq 1 100); do
	taken=$(admin "$M1" group) || taken=""
	grep "TAKEN OVER by a daemon started later" <<<"$taken" >/dev/null &&
		break
	sleep 0.1
done
grep "TAKEN OVER by a daemon started later" <<<"$taken" >/dev/null ||
	fail "the woken daemon does not say it was taken over: $taken"
admin "$M1" metrics | grep '^reftfs_group_taken_over 1$' >/dev/null ||
	fail "metrics do not say node 1's old daemon was taken over"
sleep 3	# heartbeats and registry rounds with both daemons of node 1 up
expect_eq "$(group_field "$M0" 1 address)" "127.0.0.1:$P1B" \
	"node 1's address for node 0 after the old daemon woke"
expect_eq "$(group_field "$M2" 1 address)" "127.0.0.1:$P1B" \
	"node 1's address for node 2 after the old daemon woke"
expect_eq "$(group_states "$M0")" "self up up" "node 0 after the wake-up"
log "a hung node's old daemon, taken over, stopped registering"

daemon_alive "$PID0"
daemon_alive "$PID1"
stop_daemon "$M0" "$PID0"
stop_daemon "$M1" "$PID1"
stop_daemon "$M1B" "$PID1B"
stop_daemon "$M2" "$PID2"
stop_memcached
log "PASS"
