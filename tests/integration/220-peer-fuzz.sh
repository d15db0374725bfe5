#!/usr/bin/env bash
# The peer port under attack (issue 8): a fuzzer (peer_fuzz.py) opens
# connections to a live group member's peer port and sends random bytes, mutated
# and oversized headers, truncated frames, handshakes with the wrong secret
# or group, and, once authenticated with the right secret, frames of the
# wrong shape or type.  Every such connection must be closed, the daemon
# must stay up with its group and its mount working, and the drops must
# show in reftfs-admin group.  PEER_FUZZ_SEED replays a run,
# PEER_FUZZ_ROUNDS sets its length (default 600).
. "$(dirname "$0")/lib.sh"
need_fuse

SECRET=$T_TMP/secret
new_secret "$SECRET"
read -r P0 P1 P2 <<<"$(free_ports 3)"
PEERS=127.0.0.1:$P0,127.0.0.1:$P1,127.0.0.1:$P2
M0=$(new_dir m0)
M1=$(new_dir m1)
M2=$(new_dir m2)
opts() { echo --mem 64M --no-prefault --node "$1" --peers "$PEERS" \
	--secret-file "$SECRET" --dead-after 2 --state-dir "$T_TMP/state$1"; }
# A group founds its namespace log with every node up once; then node 2 is
# lost, and the fuzzer plays node 2 against a group that goes on without
# it (two of three is a majority).
# shellcheck disable=SC2046
start_daemon "$M0" $(opts 0)
PID0=$DAEMON_PID
# shellcheck disable=SC2046
start_daemon "$M1" $(opts 1)
PID1=$DAEMON_PID
# shellcheck disable=SC2046
start_daemon "$M2" $(opts 2)
PID2=$DAEMON_PID
wait_states "$M0" "self up up"
mkdir "$M0/before" || fail "no namespace on the group of three"
kill_daemon "$M2" "$PID2"
wait_states "$M0" "self up dead"

PY_TIMEOUT=600 run_py peer_fuzz.py --port "$P0" --secret "$SECRET" \
	--group reftfs --nodes 3 --as 2 --seed "${PEER_FUZZ_SEED:-0}" \
	--rounds "${PEER_FUZZ_ROUNDS:-$(by_tier 100 300 6000)}" ||
	fail "the peer port accepted what it must refuse (see above)"

daemon_alive "$PID0"
expect_eq "$(group_states "$M0")" "self up dead" "node 0 after the fuzzing"
expect_eq "$(group_states "$M1")" "up self dead" "node 1 after the fuzzing"
auth=$(group_field "$M0" 2 auth_failed)
badf=$(group_field "$M0" 2 bad_frames)
[ "$auth" -gt 0 ] || fail "no refused handshake counted for node 2"
[ "$badf" -gt 0 ] || fail "no bad frame counted for node 2"
log "node 0 refused $auth handshakes and $badf bad frames from 'node 2'"

# The mount still works, and its group with it.
head -c 3000000 /dev/urandom >"$T_TMP/ref"
cp "$T_TMP/ref" "$M0/after-fuzz"
cmp "$T_TMP/ref" "$M0/after-fuzz" || fail "the mount reads back other bytes"
cmp "$T_TMP/ref" "$M1/after-fuzz" || fail "node 1 reads back other bytes"
[ -d "$M1/before" ] || fail "node 1 lost a name"
stop_daemon "$M0" "$PID0"
stop_daemon "$M1" "$PID1"
log "PASS"
