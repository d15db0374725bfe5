#!/usr/bin/env bash
# fsync means persisted (issue 28, item 1, --sync persist): a writer's
# fsync returns once the file is in the persist dir as it was then, its
# writer still open, whatever --persist-every says (0 here: nothing else
# writes back), so a daemon SIGKILLed right after fsync returned loses
# nothing of it.  Writers as checkpoint code writes:
#  - torch.distributed.checkpoint's FileSystemWriter: each data file
#    written and fsynced, then .metadata written and fsynced; the daemon
#    dies with .metadata still open;
#  - an atomic-rename writer: a temp file written, fsynced, closed, renamed
#    to its final name.
# With the persist dir read-only, fsync fails with EIO at once, logged with
# the file's name, and the data stays readable in the mount; once the dir
# is writable, the next fsync writes the file back.
. "$(dirname "$0")/lib.sh"
need_fuse
need_root

MNT=$(new_dir mnt)
REF=$(new_dir ref)
P=$T_TMP/persist
mount_tmpfs "$P" 64M
start() { start_daemon "$MNT" --mem 128M --persist "$P" --persist-every 0 --sync persist; }
start
mkdir "$MNT/step_1"

# The writers, each file checked in the persist dir as its fsync returns.
fsync_writer "$MNT/step_1" "$REF" "$P/step_1"
# The instant fsync returned: the daemon dies, .metadata still open.
kill_daemon "$MNT" "$DAEMON_PID"
kill "$WRITER" 2>/dev/null || true
wait "$WRITER" 2>/dev/null || true
for f in "$REF"/* "$REF/.metadata"; do
	cmp "$f" "$P/step_1/${f##*/}" || fail "persist dir: step_1/${f##*/} after the kill"
done
[ -e "$P/step_1/model.pt.tmp" ] && fail "persist dir: model.pt.tmp still there after its rename"
start
for f in "$REF"/* "$REF/.metadata"; do
	cmp "$f" "$MNT/step_1/${f##*/}" || fail "step_1/${f##*/} after a restart on the persist dir"
done
log "SIGKILLed right after fsync returned: every file whole in the persist dir and read back after a restart"

# The persist dir read-only: EIO at once, the data kept in the mount.
head -c 1500000 /dev/urandom >"$REF/ro"
mount -o remount,ro "$P" || fail "remount the persist dir read-only"
"$PY" - "$MNT/step_1/ro" "$REF/ro" "$P/step_1/ro" "$T_TMP/go" <<'PYEOF' >"$T_TMP/ro.out" 2>&1 &
import errno, os, sys, time
data = open(sys.argv[2], "rb").read()
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, data)
t = time.monotonic()
try:
    os.fsync(fd)
    sys.exit("fsync returned 0 with the persist dir read-only")
except OSError as e:
    assert e.errno == errno.EIO, e
    # At the failure, not at the 30 s deadline for a file never tried.
    assert time.monotonic() - t < 15, time.monotonic() - t
print("fsync: EIO after %.1f s" % (time.monotonic() - t), flush=True)
while not os.path.exists(sys.argv[4]):
    time.sleep(0.05)
os.fsync(fd)
assert open(sys.argv[3], "rb").read() == data, "not in the persist dir after the second fsync"
os.close(fd)
print("fsync once the dir is writable: 0, the file in it", flush=True)
PYEOF
RO=$!
for i in $(seq 1 300); do
	grep -q '^fsync: EIO' "$T_TMP/ro.out" && break
	pid_alive "$RO" || break
	sleep 0.1
done
grep -q '^fsync: EIO' "$T_TMP/ro.out" || fail "fsync on a read-only persist dir: $(cat "$T_TMP/ro.out")"
grep -q "fsync of /\?step_1/ro: .*EIO" "$DAEMON_LOG" ||
	fail "the fsync's EIO is not in the daemon's log: $(grep -v "info:" "$DAEMON_LOG" | tail -20)"
log "daemon: $(grep -o 'fsync of .*' "$DAEMON_LOG" | tail -1)"
cmp "$REF/ro" "$MNT/step_1/ro" || fail "step_1/ro differs in the mount after fsync's EIO"
mount -o remount,rw "$P" || fail "remount the persist dir read-write"
touch "$T_TMP/go"
rc=0
wait "$RO" || rc=$?
[ "$rc" = 0 ] || fail "fsync once the persist dir is writable again: exit $rc, $(cat "$T_TMP/ro.out")"
log "$(tr '\n' ';' <"$T_TMP/ro.out")"
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
