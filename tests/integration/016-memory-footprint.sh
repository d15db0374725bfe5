#!/usr/bin/env bash
# The memory budget is a ceiling, not a reservation (issue 7, defect 15):
# an idle mount takes little memory, the next checkpoint's worth is faulted
# in ahead of use once the size of one is known, and the memory of deleted
# checkpoints is given back beyond that.  Measured as the daemon's VmRSS.
# With --lock-memory (issue 28) the same holds of what is locked in RAM:
# pages are locked as they are used, and given back all the same (the
# kernel refuses to drop locked pages: the arena unlocks them first);
# passthrough's backing tmpfs never swaps.
. "$(dirname "$0")/lib.sh"
need_fuse
case ${RFT_SANITIZE:-none} in
*thread*) skip "ThreadSanitizer's shadow memory is resident with the daemon's own" ;;
esac

MNT=$(new_dir mnt)
start_daemon "$MNT" --mem 4G

rss_mb() { awk '/^VmRSS:/ { print int($2 / 1024) }' "/proc/$DAEMON_PID/status"; }
# wait_rss OP LIMIT: wait up to 10 s for "rss OP LIMIT" to hold.
wait_rss() {
	local i r
	for i in $(seq 1 100); do
		r=$(rss_mb)
		[ "$r" "$1" "$2" ] && { echo "$r"; return 0; }
		sleep 0.1
	done
	echo "$r"
	return 1
}

sleep 3
idle=$(rss_mb)
log "idle mount with --mem 4G: ${idle} MiB resident"
[ "$idle" -lt 200 ] || fail "an idle mount holds ${idle} MiB"

mkdir "$MNT/step_1"
dd if=/dev/zero of="$MNT/step_1/model.pt" bs=1M count=256 status=none
# 256 MiB of data, and about as much again ready for the next checkpoint.
after=$(wait_rss -ge 480) || fail "next checkpoint not prepared: ${after} MiB"
log "after a 256 MiB checkpoint: ${after} MiB resident"
[ "$after" -lt 700 ] || fail "${after} MiB resident after a 256 MiB checkpoint"

rm -r "$MNT/step_1"
back=$(wait_rss -le 420) || fail "memory not given back: ${back} MiB resident"
log "after deleting it: ${back} MiB resident (256 MiB kept for the next one)"
daemon_alive "$DAEMON_PID"
stop_daemon "$MNT" "$DAEMON_PID"

# --lock-memory: what is locked follows what is used, never the budget.
start_daemon "$MNT" --mem 4G --lock-memory
locked_mb() {
	admin "$MNT" status --json |
		"$PY" -c 'import json, sys
print(json.load(sys.stdin)["memory"]["locked_bytes"] >> 20)'
}
# wait_locked OP LIMIT: wait up to 10 s for "locked OP LIMIT" to hold.
wait_locked() {
	local i r
	for i in $(seq 1 50); do
		r=$(locked_mb)
		[ "$r" "$1" "$2" ] && { echo "$r"; return 0; }
		sleep 0.2
	done
	echo "$r"
	return 1
}
sleep 3
idle=$(locked_mb)
log "--lock-memory, idle: ${idle} MiB locked"
[ "$idle" -lt 200 ] || fail "an idle mount with --lock-memory locks ${idle} MiB"
mkdir "$MNT/step_1"
dd if=/dev/zero of="$MNT/step_1/model.pt" bs=1M count=256 status=none
after=$(wait_locked -ge 256) || fail "a 256 MiB checkpoint is not locked: ${after} MiB"
log "--lock-memory, after a 256 MiB checkpoint: ${after} MiB locked"
admin "$MNT" status | grep -q "locked in RAM (--lock-memory)" ||
	fail "status does not say what is locked"
rm -r "$MNT/step_1"
back=$(wait_locked -le 420) || fail "locked memory not given back: ${back} MiB locked"
log "--lock-memory, after deleting it: ${back} MiB locked"
if grep -q "passthrough: on" "$DAEMON_LOG"; then
	grep "passthrough: on" "$DAEMON_LOG" | grep -q noswap ||
		fail "--lock-memory: passthrough's backing tmpfs may swap"
fi
daemon_alive "$DAEMON_PID"
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
