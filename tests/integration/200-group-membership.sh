#!/usr/bin/env bash
# The sharding group's membership (issue 8): three daemons on loopback
# ports authenticate each other with the shared secret and see each other
# up; bad group options and a secret file others can read are refused
# (exit 2); a daemon with the wrong secret is never let in and is counted;
# a SIGKILLed node is declared dead and its replacement (same id, new
# incarnation) is seen up; a hung node (SIGSTOP past --dead-after) is
# declared dead, and once it runs again it learns so and rejoins.
. "$(dirname "$0")/lib.sh"
need_fuse

SECRET=$T_TMP/secret
new_secret "$SECRET"
read -r P0 P1 P2 <<<"$(free_ports 3)"
PEERS=127.0.0.1:$P0,127.0.0.1:$P1,127.0.0.1:$P2
DEAD=1 # --dead-after, seconds
M0=$(new_dir m0)
M1=$(new_dir m1)
M2=$(new_dir m2)
grp_opts() { echo --mem 64M --no-prefault --node "$1" --peers "$PEERS" \
	--secret-file "$2" --dead-after "$DEAD" --state-dir "$T_TMP/state$1"; }

# --- options and the secret file, refused before mounting ----------------
expect_setup_error() {
	local want=$1 rc=0 out
	shift
	out=$(timeout 20 "$REFTFSD" "$T_TMP/unused" -f "$@" \
		--state-dir "$T_TMP/state.unused" 2>&1) || rc=$?
	[ "$rc" = 2 ] || fail "reftfsd $* exited $rc, want 2: $out"
	grep -q -- "$want" <<<"$out" || fail "reftfsd $*: no '$want' in: $out"
}
mkdir -p "$T_TMP/unused"
expect_setup_error "need --node" --peers "$PEERS" --secret-file "$SECRET"
expect_setup_error "not in --peers" --node 3 --peers "$PEERS" \
	--secret-file "$SECRET"
expect_setup_error "needs --secret-file" --node 0 --peers "$PEERS"
expect_setup_error "not HOST:PORT" --node 0 --peers "127.0.0.1,x:1" \
	--secret-file "$SECRET"
expect_setup_error "bad --dead-after" --node 0 --peers "$PEERS" \
	--secret-file "$SECRET" --dead-after -1
cp "$SECRET" "$T_TMP/secret.644"
chmod 644 "$T_TMP/secret.644"
expect_setup_error "mode 0644" --node 0 --peers "$PEERS" \
	--secret-file "$T_TMP/secret.644"
# Schemes that do not fit the group, an unknown codec.
expect_setup_error "needs 6 nodes" --node 0 --peers "$PEERS" \
	--secret-file "$SECRET" --protect rs:4+2
expect_setup_error "needs 5 nodes" --node 0 --peers "$PEERS" \
	--secret-file "$SECRET" --protect replicate:5
expect_setup_error "bad --codec 'cuda'" --node 0 --peers "$PEERS" \
	--secret-file "$SECRET" --protect xor --codec cuda
expect_setup_error "--protect 'rs:0+1'" --node 0 --peers "$PEERS" \
	--secret-file "$SECRET" --protect rs:0+1
is_mounted "$T_TMP/unused" && fail "a refused daemon mounted"
log "bad group options and a readable secret file: exit 2, not mounted"

# --- three nodes up ------------------------------------------------------
# shellcheck disable=SC2046
start_daemon "$M0" $(grp_opts 0 "$SECRET")
PID0=$DAEMON_PID
# shellcheck disable=SC2046
start_daemon "$M1" $(grp_opts 1 "$SECRET")
PID1=$DAEMON_PID
# shellcheck disable=SC2046
start_daemon "$M2" $(grp_opts 2 "$SECRET")
PID2=$DAEMON_PID
wait_states "$M0" "self up up"
wait_states "$M1" "up self up"
wait_states "$M2" "up up self"
admin "$M0" group
admin "$M0" status | grep "node 0 of 3, 3 up" >/dev/null ||
	fail "status does not show the group"
admin "$M0" metrics | grep '^reftfs_peer_state{peer="1",state="up"} 1' \
	>/dev/null ||
	fail "metrics do not show peer 1 up"
log "three nodes see each other up"

# --- a wrong secret is refused and counted --------------------------------
kill_daemon "$M2" "$PID2"
wait_states "$M0" "self up dead" $((DEAD * 10))
new_secret "$T_TMP/secret.wrong"
# shellcheck disable=SC2046
start_daemon "$M2" $(grp_opts 2 "$T_TMP/secret.wrong")
PIDW=$DAEMON_PID
for i in $(seq 1 100); do
	a0=$(group_field "$M0" 2 auth_failed)
	[ "$a0" -gt 0 ] && break
	sleep 0.1
done
[ "$a0" -gt 0 ] || fail "node 0 counted no failed handshake from node 2"
sleep $((DEAD * 2))
expect_eq "$(group_states "$M0")" "self up dead" \
	"node 0 after a node with the wrong secret came"
expect_eq "$(group_states "$M2")" "unknown unknown self" \
	"the node with the wrong secret"
kill_daemon "$M2" "$PIDW"
log "a node with the wrong secret stays out ($a0 handshakes refused)"

# --- SIGKILL and a replacement with the same id ---------------------------
inc_before=$(group_field "$M0" 1 incarnation)
kill_daemon "$M1" "$PID1"
wait_states "$M0" "self dead dead" $((DEAD * 10))
# shellcheck disable=SC2046
start_daemon "$M1" $(grp_opts 1 "$SECRET")
PID1=$DAEMON_PID
LOG1=$DAEMON_LOG
# shellcheck disable=SC2046
start_daemon "$M2" $(grp_opts 2 "$SECRET")
PID2=$DAEMON_PID
wait_states "$M0" "self up up"
wait_states "$M1" "up self up"
# Node 2 too, before node 1 hangs: a node never heard from stays
# "unknown", never "dead".
wait_states "$M2" "up up self"
inc_after=$(group_field "$M0" 1 incarnation)
[ "$inc_after" != "$inc_before" ] ||
	fail "node 1's replacement has the old incarnation $inc_before"
log "replacement of node 1 seen up, incarnation $inc_before -> $inc_after"

# --- a hung node --------------------------------------------------------
kill -STOP "$PID1"
wait_states "$M0" "self dead up" $((DEAD * 10))
wait_states "$M2" "up dead self" $((DEAD * 10))
kill -CONT "$PID1"
wait_states "$M0" "self up up" $((DEAD * 10))
wait_states "$M1" "up self up" $((DEAD * 10))
grep -q "declared this daemon dead" "$LOG1" ||
	fail "node 1 did not log that it had been declared dead"
log "hung node declared dead, then rejoined knowing it"

# A second daemon for a port in use is refused before it mounts.
expect_setup_error "cannot listen on 127.0.0.1:$P0" --node 0 \
	--peers "$PEERS" --secret-file "$SECRET"
is_mounted "$T_TMP/unused" && fail "a refused daemon mounted"

daemon_alive "$PID0"
stop_daemon "$M0" "$PID0"
stop_daemon "$M1" "$PID1"
stop_daemon "$M2" "$PID2"
log "PASS"
