#!/usr/bin/env bash
# The memory budget is a ceiling, not a reservation (issue 7, defect 15):
# an idle mount takes little memory, the next checkpoint's worth is faulted
# in ahead of use once the size of one is known, and the memory of deleted
# checkpoints is given back beyond that.  Measured as the daemon's VmRSS.
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
log "PASS"
