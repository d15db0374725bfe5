#!/usr/bin/env bash
# Truncates racing queued writes (issue 7, defect 1): fio keeps 16 async
# writes in flight on one file while a loop truncates it to zero.  The
# daemon used to write through a dropped slot (SIGSEGV within a second), or
# leave bytes past the new end that came back after a later extension.
. "$(dirname "$0")/lib.sh"
need_fuse
command -v fio >/dev/null || skip "fio not installed (apt-get install fio)"

MNT=$(new_dir mnt)
start_daemon "$MNT" --mem 512M
F=$MNT/f

timeout 60 fio --name=race --filename="$F" --size=64m --ioengine=libaio \
	--iodepth=16 --rw=randwrite --bs=64k --time_based --runtime=6 \
	--direct=1 --output="$T_TMP/fio.out" >"$T_TMP/fio.err" 2>&1 &
FIO=$!
_T_PIDS+=("$FIO")
n=0
end=$((SECONDS + 6))
while [ "$SECONDS" -lt "$end" ]; do
	truncate -s 0 "$F" 2>/dev/null || true
	n=$((n + 1))
	daemon_alive "$DAEMON_PID"
done
wait "$FIO" || true
log "$n truncates during fio"
daemon_alive "$DAEMON_PID"

# After the last truncate to zero, an extension must read as zeros only.
truncate -s 0 "$F"
truncate -s 64M "$F"
# (cmp against /dev/zero: od's hex dump of 64 MiB took 12 to 30 s.)
cmp -n $((64 << 20)) "$F" /dev/zero >"$T_TMP/cmp.out" 2>&1 ||
	fail "non-zero bytes after truncate 0 + extend: $(cat "$T_TMP/cmp.out")"

# And the file still takes writes and reads them back.
head -c 3M /dev/urandom >"$T_TMP/ref"
cp "$T_TMP/ref" "$F"
cmp "$T_TMP/ref" "$F" || fail "data after the race"
daemon_alive "$DAEMON_PID"
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
