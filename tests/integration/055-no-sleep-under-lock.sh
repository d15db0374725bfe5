#!/usr/bin/env bash
# No thread sleeps while it holds a namespace or file lock (issue 7,
# defect 5).  A writer that finds memory full waits --enospc-wait for
# eviction; the namespace must stay usable meanwhile.  It used to hold its
# file lock through that wait while the persist worker, holding the
# namespace lock for writing, waited for the file: every lookup and
# `reftfs-admin status` then hung for the whole wait.
. "$(dirname "$0")/lib.sh"
need_fuse

MNT=$(new_dir mnt)
P=$(new_dir persist)
start_daemon "$MNT" --mem 64M --persist "$P" --enospc-wait 4000
mkdir "$MNT/c1"
# Fill memory with data that may not be evicted: the newest checkpoint.
head -c 60M /dev/zero >"$MNT/c1/a"
admin "$MNT" flush --wait >/dev/null

# This writer runs out of memory and waits 4 s for space that never comes.
dd if=/dev/zero of="$MNT/c1/b" bs=1M count=16 2>"$T_TMP/dd.err" &
DD=$!
_T_PIDS+=("$DD")
sleep 0.5

worst=0
for i in $(seq 1 8); do
	t0=$(date +%s%N)
	stat "$MNT/c1/new-$i" >/dev/null 2>&1 || true # a lookup the kernel has not cached
	admin "$MNT" status >/dev/null
	ms=$((($(date +%s%N) - t0) / 1000000))
	[ "$ms" -gt "$worst" ] && worst=$ms
	sleep 0.3
done
log "slowest lookup + status while a writer waits for memory: ${worst} ms"
wait "$DD" && fail "dd into a full mount succeeded"
grep -q 'No space left' "$T_TMP/dd.err" || fail "dd: $(cat "$T_TMP/dd.err")"
[ "$worst" -lt 1000 ] || fail "namespace blocked ${worst} ms behind a writer waiting for memory"
daemon_alive "$DAEMON_PID"
rm "$MNT/c1/b"
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
