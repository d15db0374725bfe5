#!/usr/bin/env bash
# The tests' own deadline (lib.sh): a test that hangs in a FUSE request
# says what hangs, gets its calls back, cleans up and fails, before meson's
# timeout would SIGKILL it with nothing said and its mounts left behind.
# Two tests of our own run inside this one with a 12 s timeout (a 6 s
# deadline): one hangs on a stopped daemon, one finishes in time.
. "$(dirname "$0")/lib.sh"
need_fuse

# inner NAME BODY: a test that sources lib.sh and runs BODY; its exit
# status, and its output in $T_TMP/NAME.out.
inner() {
	local name=$1 rc=0
	cat >"$T_TMP/$name.sh" <<-EOF
		. "$HELPERS/lib.sh"
		$2
	EOF
	RFT_TIMEOUT=12 RFT_TIMEOUT_MULT=1 bash "$T_TMP/$name.sh" \
		>"$T_TMP/$name.out" 2>&1 &
	INNER_PID=$!
	if ! timeout -k 5 60 tail --pid="$INNER_PID" -f /dev/null; then
		# Our cleanup stops what the inner test left.
		kill -KILL "$INNER_PID"
		if [ -s "$T_TMP/$name.what" ]; then
			read -r mnt pid <"$T_TMP/$name.what"
			_T_MOUNTS+=("$mnt")
			_T_PIDS+=("$pid")
			_T_RM+=("$(dirname "$mnt")")
		fi
		fail "$name still running after 60 s: the deadline did not end it"
	fi
	wait "$INNER_PID" || rc=$?
	return $rc
}

# The daemon stops (SIGSTOP) and a lookup waits on it for good.
rc=0
inner hang '
MNT=$(new_dir mnt)
start_daemon "$MNT"
echo "$MNT $DAEMON_PID" >"'"$T_TMP"'/hang.what"
kill -STOP "$DAEMON_PID"
"$PY" -c "import os, sys; os.stat(sys.argv[1])" "$MNT/nothing" &
wait
sleep 100' || rc=$?
out=$T_TMP/hang.out
[ "$rc" = 143 ] || { cat "$out" >&2; fail "the hung test exited $rc, want 143 (ended by its watchdog)"; }
read -r mnt pid <"$T_TMP/hang.what"
for want in "still running at its deadline" "blocked: pid .*os.stat" \
	"waits in request_wait_answer" "daemon pid $pid" \
	"last lines of daemon.1.log"; do
	grep -q -- "$want" "$out" || { cat "$out" >&2; fail "the hung test did not say '$want'"; }
done
is_mounted "$mnt" && fail "the hung test left $mnt mounted"
pid_alive "$pid" && fail "the hung test left its daemon (pid $pid) running"
pgrep -f "reftfs-deadline-$INNER_PID" >/dev/null &&
	fail "the hung test left its watchdog's sleep running"
log "a test hung in a FUSE request: reported, its calls aborted, cleaned up, exit 143"

# A test that ends in time: passes, and leaves no watchdog behind.
inner quick '
MNT=$(new_dir mnt)
start_daemon "$MNT"
echo "$MNT $DAEMON_PID" >"'"$T_TMP"'/quick.what"
echo data >"$MNT/f"
[ "$(cat "$MNT/f")" = data ]' || { cat "$T_TMP/quick.out" >&2; fail "the quick test failed"; }
pgrep -f "reftfs-deadline-$INNER_PID" >/dev/null &&
	fail "the quick test left its watchdog's sleep running"
read -r mnt pid <"$T_TMP/quick.what"
is_mounted "$mnt" && fail "the quick test left $mnt mounted"
pid_alive "$pid" && fail "the quick test left its daemon (pid $pid) running"
grep -q "deadline" "$T_TMP/quick.out" && fail "the quick test's watchdog spoke"
log "a test that ends in time: passes, no watchdog left"
log PASS
