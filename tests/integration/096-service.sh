#!/usr/bin/env bash
# Running as a system service (issue 31).
#
# The units (packaging/, as meson configured them), and the metrics timer
# docs/operations.md gives: systemd-analyze verify finds no fault in them,
# and `systemd-analyze security` rates the witness's hardening better than
# the mount's, which may not have a mount namespace of its own (neither
# may get worse than it is).  The example configs pass reftfsd --check.
#
# sd_notify, against a socket of the test's own as systemd binds for a
# Type=notify service ($NOTIFY_SOCKET):
#   - a single mount: READY=1 once the mount is there; on SIGTERM
#     STOPPING=1, the write-back, exit 0, and the file in the persist dir;
#   - a node of a two-node group and a witness: the mount first, READY=1
#     only once the group has formed (its first start needs every member)
#     and the log took the node in; STOPPING=1 on SIGTERM;
#   - no $NOTIFY_SOCKET: the daemon runs as before.
# A restart after a crash (SIGKILL) mounts over the dead mount the crash
# left, as systemd's Restart=on-failure needs.
. "$(dirname "$0")/lib.sh"
need_fuse

# --- the units -------------------------------------------------------------
command -v systemd-analyze >/dev/null || skip "no systemd-analyze (Debian: systemd)"
UNITS=$T_TMP/units
mkdir -p "$UNITS" "$T_TMP/man/man5" "$T_TMP/man/man8"
# The units name the installed daemon; verify wants it executable, so the
# copies checked here name this build's.  Documentation= names the man
# pages, which verify looks up: this tree's.
for u in reftfsd@.service reftfs-witness@.service; do
	f=$BUILDDIR/packaging/$u
	[ -f "$f" ] || fail "$f not built"
	grep -E '^ExecStart=/[^ ]*/sbin/reftfsd ' "$f" >/dev/null ||
		fail "$u: ExecStart does not name the installed reftfsd: $(grep ^ExecStart "$f")"
	sed -E "s#^ExecStart=/[^ ]*/sbin/reftfsd #ExecStart=$REFTFSD #" "$f" >"$UNITS/$u"
done
ln -s "$SRCDIR/man/reftfsd.8" "$SRCDIR/man/reftfs-admin.8" "$T_TMP/man/man8/"
ln -s "$SRCDIR/man/reftfs.conf.5" "$T_TMP/man/man5/"
for u in reftfsd@ckpt.service reftfs-witness@ckpt.service; do
	out=$(MANPATH=$T_TMP/man systemd-analyze verify "$UNITS/$u" 2>&1) ||
		fail "systemd-analyze verify $u: $out"
	# It warns of an unknown key or a bad value and still exits 0.
	[ -z "$out" ] || fail "systemd-analyze verify $u said: $out"
done
# The metrics timer that docs/operations.md gives ("Logs and metrics"),
# as it is written there.
awk '/^# \/etc\/systemd\/system\/reftfs-metrics@\.service$/ { f = 1; next }
	/^# \/etc\/systemd\/system\/reftfs-metrics@\.timer$/ { f = 2; next }
	/^```/ { f = 0 }
	f == 1 { print > svc } f == 2 { print > tim }' \
	svc="$UNITS/reftfs-metrics@.service" tim="$UNITS/reftfs-metrics@.timer" \
	"$SRCDIR/docs/operations.md"
[ -s "$UNITS/reftfs-metrics@.service" ] && [ -s "$UNITS/reftfs-metrics@.timer" ] ||
	fail "no reftfs-metrics@ units found in docs/operations.md"
for u in reftfs-metrics@ckpt.service reftfs-metrics@ckpt.timer; do
	out=$(systemd-analyze verify "$UNITS/$u" 2>&1) || fail "systemd-analyze verify $u (docs/operations.md): $out"
	[ -z "$out" ] || fail "systemd-analyze verify $u (docs/operations.md) said: $out"
done
# exposure UNIT: systemd's rating of its hardening, 0 (best) to 10.
exposure() {
	systemd-analyze security --offline=true "$UNITS/$1" 2>/dev/null |
		sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p'
}
EXP_MOUNT=$(exposure reftfsd@ckpt.service)
EXP_WITNESS=$(exposure reftfs-witness@ckpt.service)
log "exposure: reftfsd@ $EXP_MOUNT, reftfs-witness@ $EXP_WITNESS (0 best, 10 worst)"
[ -n "$EXP_MOUNT" ] && [ -n "$EXP_WITNESS" ] || fail "systemd-analyze security gave no rating"
awk -v m="$EXP_MOUNT" -v w="$EXP_WITNESS" 'BEGIN { exit !(m <= 6.5 && w <= 2.5) }' ||
	fail "hardening weaker than shipped: exposure $EXP_MOUNT (want <= 6.5), witness $EXP_WITNESS (want <= 2.5)"
# The examples, as shipped.
for c in node witness; do
	out=$("$REFTFSD" --config "$SRCDIR/packaging/$c.conf" --check 2>&1) ||
		fail "packaging/$c.conf: $out"
done

# --- sd_notify ---------------------------------------------------------------
LISTENERS=()
_T_ATEXIT+=('kill "${LISTENERS[@]}" 2>/dev/null; wait "${LISTENERS[@]}" 2>/dev/null')
# listen NAME [MNT]: a notify socket $T_TMP/NAME.sock, its messages in
# $T_TMP/NAME.msgs (notify_listen.py); NOTIFY for the daemon.
listen() {
	local n=$1 i
	"$PY" "$HELPERS/notify_listen.py" "$T_TMP/$n.sock" "$T_TMP/$n.msgs" \
		${2:+"$2"} &
	LISTENERS+=($!)
	for i in $(seq 1 50); do
		grep -q LISTENING "$T_TMP/$n.msgs" 2>/dev/null && break
		sleep 0.1
	done
	[ -S "$T_TMP/$n.sock" ] || fail "notify listener $n did not start"
	NOTIFY=$T_TMP/$n.sock
}
# msg_wait NAME PATTERN [SECS]: until a message of NAME matches (grep -E).
msg_wait() {
	local i
	for i in $(seq 1 $((${3:-30} * 10))); do
		grep -E "$2" "$T_TMP/$1.msgs" >/dev/null && return 0
		sleep 0.1
	done
	fail "no message '$2' from $1 in ${3:-30} s; it sent: $(tr '\n' '/' <"$T_TMP/$1.msgs")"
}

MNT=$(new_dir mnt)
PERSIST=$(new_dir persist)
CONF=$T_TMP/node.conf
printf 'mountpoint = %s\nmem = 64M\npersist = %s\nno-prefault\n' "$MNT" \
	"$PERSIST" >"$CONF"

# A single mount: ready once mounted.
listen single "$MNT"
_T_MOUNTS+=("$MNT")
NOTIFY_SOCKET=$NOTIFY "$REFTFSD" -f --config "$CONF" >"$T_TMP/daemon.1.log" 2>&1 &
DPID=$!
_T_PIDS+=("$DPID")
_T_LAST_LOG=$T_TMP/daemon.1.log
msg_wait single "^READY=1"
grep -E "^READY=1 \| STATUS=mounted $MNT \[mounted\]$" "$T_TMP/single.msgs" >/dev/null ||
	fail "READY=1 not sent with the mount there: $(cat "$T_TMP/single.msgs")"
head -c 2000000 /dev/urandom >"$T_TMP/x"
mkdir "$MNT/step_1"
cp "$T_TMP/x" "$MNT/step_1/x"
# systemctl stop: SIGTERM to the daemon.
kill -TERM "$DPID"
wait "$DPID" || fail "reftfsd exited $? on SIGTERM"
is_mounted "$MNT" && fail "$MNT still mounted after SIGTERM"
msg_wait single "^STOPPING=1 \| STATUS=unmounting $MNT"
msg_wait single "^STATUS=writing back to $PERSIST"
cmp "$T_TMP/x" "$PERSIST/step_1/x" || fail "not written back before the exit"
log "single mount: $(tr '\n' '/' <"$T_TMP/single.msgs")"

# Without $NOTIFY_SOCKET, as before; then a crash, and a restart over the
# dead mount it left.
start_daemon "$MNT" --config "$CONF"
kill -KILL "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
stat "$MNT" >/dev/null 2>&1 && fail "$MNT answers after its daemon's SIGKILL"
# (start_daemon would take the dead mount for the new one.)
"$REFTFSD" -f --config "$CONF" >"$T_TMP/daemon.restart.log" 2>&1 &
DPID=$!
_T_PIDS+=("$DPID")
_T_LAST_LOG=$T_TMP/daemon.restart.log
for i in $(seq 1 100); do
	stat "$MNT" >/dev/null 2>&1 && break
	pid_alive "$DPID" || { cat "$_T_LAST_LOG" >&2; fail "the restart over the dead mount exited"; }
	sleep 0.1
done
grep -F "mount point $MNT was a dead reftfs mount" "$_T_LAST_LOG" >/dev/null ||
	fail "the restart did not say it cleared the dead mount: $(cat "$_T_LAST_LOG")"
cmp "$T_TMP/x" "$MNT/step_1/x" || fail "the file not read back from the persist dir after the restart"
stop_daemon "$MNT" "$DPID"

# --- a group member and a witness: ready once in the log ---------------------
group_init 2 1
listen node0 "${M[0]}"
_T_MOUNTS+=("${M[0]}")
NOTIFY_SOCKET=$NOTIFY "$REFTFSD" "${M[0]}" -f --no-prefault --mem 64M --node 0 \
	--peers "$PEERS" --witnesses "$WITNESSES" --secret-file "$SECRET" \
	--dead-after 2 --state-dir "$T_TMP/state0" >"$T_TMP/daemon.2.log" 2>&1 &
PID[0]=$!
_T_PIDS+=("${PID[0]}")
_T_LAST_LOG=$T_TMP/daemon.2.log
msg_wait node0 "^STATUS=mounted ${M[0]}; joining the group's namespace log \[mounted\]"
listen witness
NOTIFY_SOCKET=$NOTIFY start_witness 2 "${M[2]}" --peers "$PEERS" \
	--witnesses "$WITNESSES" --secret-file "$SECRET" --dead-after 2 \
	--state-dir "$T_TMP/state2"
# A group's first start needs every member up once: until node 1 comes,
# neither is ready.
sleep 3
grep READY "$T_TMP/node0.msgs" "$T_TMP/witness.msgs" >/dev/null &&
	fail "ready before the group formed: $(cat "$T_TMP/node0.msgs" "$T_TMP/witness.msgs")"
group_node 1 --mem 64M
msg_wait node0 "^READY=1 \| STATUS=mounted ${M[0]}, node 0 of group [^ ]+ \[mounted\]$"
msg_wait witness "^READY=1 \| STATUS=witness 2 of group "
echo hello >"${M[1]}/f"
expect_eq "$(cat "${M[0]}/f")" hello "a file node 1 wrote, read on node 0"
# The stop, node 0 first: it leaves a group that keeps its majority.
kill -TERM "${PID[0]}"
wait "${PID[0]}" || fail "node 0 exited $? on SIGTERM"
msg_wait node0 "^STOPPING=1"
is_mounted "${M[0]}" && fail "${M[0]} still mounted after SIGTERM"
stop_daemon "${M[1]}" "${PID[1]}"
kill -TERM "${PID[2]}"
wait "${PID[2]}" || fail "the witness exited $? on SIGTERM"
msg_wait witness "^STOPPING=1"
log "node 0: $(tr '\n' '/' <"$T_TMP/node0.msgs")"
log "witness: $(tr '\n' '/' <"$T_TMP/witness.msgs")"
