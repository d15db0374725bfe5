#!/usr/bin/env bash
# The group's namespace log inside reftfsd (issue 8, step 1): three daemons
# on loopback run raft on their peer port + 1, each with its own
# --state-dir, and agree on one leader and term; the leader SIGKILLed, the
# other two elect a new one in a higher term; the killed node restarted on
# its state dir rejoins as a follower and catches up (same commit index);
# a follower whose state dir is wiped rejoins as a replacement (new raft
# id).  A raft link with a bad handshake is refused and counted.  A state dir
# that belongs to another node or group stops a daemon before it mounts,
# and so does one in use by another daemon (exit 2; the first serves on).
. "$(dirname "$0")/lib.sh"
need_fuse

SECRET=$T_TMP/secret
new_secret "$SECRET"
read -r P0 P1 P2 <<<"$(free_ports 3)"
PORTS=("$P0" "$P1" "$P2")
PEERS=127.0.0.1:$P0,127.0.0.1:$P1,127.0.0.1:$P2
M=("$(new_dir m0)" "$(new_dir m1)" "$(new_dir m2)")
S=("$T_TMP/state0" "$T_TMP/state1" "$T_TMP/state2")
PID=("" "" "")
opts() { echo --mem 64M --no-prefault --node "$1" --peers "$PEERS" \
	--secret-file "$SECRET" --dead-after 1; }

start_node() {
	local i=$1
	if [ "$i" = 2 ]; then
		# The -o spelling of --state-dir.
		# shellcheck disable=SC2046
		start_daemon "${M[$i]}" $(opts "$i") -o "state_dir=${S[$i]}"
	else
		# shellcheck disable=SC2046
		start_daemon "${M[$i]}" $(opts "$i") --state-dir "${S[$i]}"
	fi
	PID[$i]=$DAEMON_PID
}

# --- three nodes found the log and elect a leader -----------------------
start_node 0
start_node 1
start_node 2
wait_states "${M[0]}" "self up up"
# The bootstrap configuration is entry 1, the leader's barrier entry 2
# (then its commit push, entry 3).
MIN_COMMIT=2
wait_agree 30 0 1 2
log "nodes 0 1 2 agree: leader $LEADER, term $TERM, commit $COMMIT"
for n in 0 1 2; do
	[ -s "${S[$n]}/nslog.state" ] || fail "no nslog.state in ${S[$n]}"
	[ "$(stat -c %a "${S[$n]}")" = 700 ] ||
		fail "${S[$n]} has mode $(stat -c %a "${S[$n]}"), want 700"
done
role=$(group_log "${M[$LEADER]}" log_role)
expect_eq "$role" leader "node $LEADER's role"
out=$(admin "${M[0]}" group)
grep -F "raft on 127.0.0.1:$((P0 + 1))" <<<"$out" >/dev/null ||
	fail "reftfs-admin group does not show raft on port $((P0 + 1)): $out"
out=$(admin "${M[0]}" status)
grep -F "namespace log term $TERM, leader node $LEADER" <<<"$out" \
	>/dev/null || fail "status does not show the log: $out"
out=$(admin "${M[0]}" metrics)
for f in "reftfs_group_log_term $TERM" "reftfs_group_log_leader $LEADER" \
	"reftfs_group_log_auth_failed_total 0"; do
	grep -Fx "$f" <<<"$out" >/dev/null || fail "metrics: no '$f'"
done
# The log goes on meanwhile (its own entries): at least what they agreed.
c=$(sed -n 's/^reftfs_group_log_commit_index //p' <<<"$out")
[ -n "$c" ] && [ "$c" -ge "$COMMIT" ] ||
	fail "metrics: reftfs_group_log_commit_index '$c', want $COMMIT or more"

log "status, group and metrics show the log"

# --- a second daemon on a state dir in use: refused, the first serves on --
# Node 1's id and state dir at another --listen (as a registry node's
# restart at another address would be), node 1's daemon still running.
# Two raft instances of one id on one set of files could lose votes or
# entries: it must exit 2 naming the dir and the daemon that holds it, and
# mount nothing.  In the background mode, as expect_refused below: a
# daemon let through returns 0 once mounted.
read -r PX <<<"$(free_ports 1)"
MX=$(new_dir mx)
_T_MOUNTS+=("$MX")
rc=0
# shellcheck disable=SC2046
out=$(timeout 20 "$REFTFSD" "$MX" $(opts 1) --listen "127.0.0.1:$PX" \
	--state-dir "${S[1]}" 2>&1) || rc=$?
[ "$rc" = 2 ] || fail "a second daemon on ${S[1]} exited $rc, want 2: $out"
want="state dir ${S[1]} is in use by another reftfsd (pid ${PID[1]})"
grep -F -- "$want" <<<"$out" >/dev/null ||
	fail "a second daemon on ${S[1]}: no '$want' in: $out"
is_mounted "$MX" && fail "a second daemon on a busy state dir mounted"
daemon_alive "${PID[1]}"
# The first goes on serving: a name made there is seen on every node, and
# the log still agrees on one leader with a commit past the change.
mkdir "${M[1]}/made-after-refusal" ||
	fail "node 1 cannot change the namespace after the refusal"
for n in 0 2; do
	for i in $(seq 1 100); do
		[ -d "${M[$n]}/made-after-refusal" ] && break
		sleep 0.1
	done
	[ -d "${M[$n]}/made-after-refusal" ] ||
		fail "node $n does not see node 1's directory"
done
rmdir "${M[1]}/made-after-refusal" ||
	fail "node 1 cannot remove its directory after the refusal"
MIN_COMMIT=$((COMMIT + 2))
wait_agree 30 0 1 2
log "a second daemon on node 1's state dir: exit 2, not mounted; node 1" \
	"serves on (commit $COMMIT)"

# --- a raft link with a bad handshake is refused and counted -------------
# A HELLO (docs/protocol.md, "Handshake": link 2, raft ids) for another
# group: closed unanswered.
"$PY" - "$((P0 + 1))" <<'PYEOF' || fail "the raft port answered a bad HELLO"
import os, socket, struct, sys


def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xFFFFFFFF


group = b"not-this-group"
# from node 1 (raft id 2) to node 0 (raft id 1)
meta = b"RFTH" + struct.pack("<HBBIIQQ", 2, 2, len(group), 1, 0, 2, 1) + \
    os.urandom(32) + group
h = struct.pack("<IHHHHIIIQQI", 0x50544652, 1, 1, 0, 0, len(meta), 0, 0,
                0, 1, crc32c(meta))
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(h + struct.pack("<I", crc32c(h)) + meta)
s.settimeout(5)
try:
    sys.exit(1 if s.recv(100) else 0)
except ConnectionResetError:
    sys.exit(0)
PYEOF
for i in $(seq 1 50); do
	af=$(group_log "${M[0]}" log_auth_failed)
	[ "$af" -gt 0 ] && break
	sleep 0.1
done
[ "$af" -gt 0 ] || fail "node 0 counted no refused raft link"
admin "${M[0]}" metrics | grep -Fx "reftfs_group_log_auth_failed_total $af" \
	>/dev/null || fail "metrics do not count the refused raft link"
log "a raft HELLO for another group refused and counted ($af)"

# --- the leader is killed: the others elect a new one in a higher term ---
OLD=$LEADER OLD_TERM=$TERM OLD_COMMIT=$COMMIT
kill_daemon "${M[$OLD]}" "${PID[$OLD]}"
REST=()
for n in 0 1 2; do [ "$n" = "$OLD" ] || REST+=("$n"); done
# The new leader's barrier commits with the two of them: an entry the
# killed node has not got.
MIN_COMMIT=$((OLD_COMMIT + 1))
wait_agree 30 "${REST[@]}"
[ "$LEADER" != "$OLD" ] || fail "the killed node $OLD still leads"
[ "$TERM" -gt "$OLD_TERM" ] ||
	fail "new leader $LEADER in term $TERM, not above $OLD_TERM"
log "leader $OLD killed: nodes ${REST[*]} elected $LEADER in term $TERM," \
	"commit $COMMIT"
MIN_COMMIT=$COMMIT

# --- the killed node comes back on its state dir and follows -------------
start_node "$OLD"
wait_agree 30 0 1 2
expect_eq "$(group_log "${M[$OLD]}" log_role)" follower \
	"node $OLD's role after its restart"
expect_eq "$(group_log "${M[$OLD]}" log_raft_id)" "$((OLD + 1))" \
	"node $OLD's raft id after its restart"
log "node $OLD rejoined: leader $LEADER, term $TERM, commit $COMMIT on all"

# --- a follower's state dir wiped: it rejoins as a replacement -----------
# (docs/operations.md, "The namespace log": how to wipe a node.)  Its old
# raft id is never used again: it gets the next generation's, 1 + node +
# 64, and becomes a voter once it has caught up.
W=$(( (LEADER + 1) % 3 ))
kill_daemon "${M[$W]}" "${PID[$W]}"
rm -rf "${S[$W]}"
start_node "$W"
want_id=$((W + 1 + 64))
for i in $(seq 1 300); do
	id=$(group_log "${M[$W]}" log_raft_id)
	voters=$(group_log "${M[$LEADER]}" log_voters)
	[ "$id" = "$want_id" ] && [ "$voters" = 3 ] && break
	sleep 0.1
done
expect_eq "$id" "$want_id" "node $W's raft id after its state dir was wiped"
expect_eq "$voters" 3 "voters after node $W's replacement"
MIN_COMMIT=$COMMIT
wait_agree 30 0 1 2
expect_eq "$(group_log "${M[$W]}" log_role)" follower \
	"node $W's role after its replacement"
log "node $W wiped and restarted: raft id $want_id, leader $LEADER," \
	"term $TERM, commit $COMMIT on all"

for n in 0 1 2; do
	daemon_alive "${PID[$n]}"
	stop_daemon "${M[$n]}" "${PID[$n]}"
done

# --- a state dir of another node or group: refused before mounting -------
# In the background mode: reftfsd returns once mounted, so a check made
# only after mounting would go unseen (exit 0, the error in syslog).
expect_refused() {
	local want=$1 rc=0 out
	shift
	_T_MOUNTS+=("$T_TMP/unused")
	out=$(timeout 20 "$REFTFSD" "$T_TMP/unused" "$@" 2>&1) || rc=$?
	[ "$rc" = 2 ] || fail "reftfsd $* exited $rc, want 2: $out"
	grep -F -- "$want" <<<"$out" >/dev/null ||
		fail "reftfsd $*: no '$want' in: $out"
	is_mounted "$T_TMP/unused" && fail "a refused daemon mounted"
	return 0
}
mkdir -p "$T_TMP/unused"
# shellcheck disable=SC2046
expect_refused "holds the namespace log of another node" $(opts 1) \
	--state-dir "${S[0]}"
# shellcheck disable=SC2046
expect_refused "holds the namespace log of another node" $(opts 0) \
	--group other --state-dir "${S[0]}"
log "another node's or group's state dir: exit 2, not mounted"
expect_refused "PORT must be below 65535" --node 0 \
	--peers "127.0.0.1:65535,127.0.0.1:$P1" --secret-file "$SECRET" \
	--state-dir "$T_TMP/state.unused"
log "a peer port of 65535 (no port above it for raft): exit 2"
log "PASS"
