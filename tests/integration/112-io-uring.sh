#!/usr/bin/env bash
# FUSE over io_uring: reftfsd --io-uring (libfuse 3.18 and later; kernel
# 6.14 and later with the fuse module's enable_uring on).
#
# - The kernel's switch off: --io-uring warns, and the mount works over
#   /dev/fuse.
# - libfuse's own switch (FUSE_URING_ENABLE=1) without --io-uring starts no
#   rings: the daemon's own loop could not stop them at unmount.
# - On: requests come over the rings ("status" fuse.io_uring and its
#   metric); small and large files written by four processes at once,
#   each reading back the others', come back byte for byte, and so do
#   their copies in the persist dir.
# - A daemon killed while a writer keeps its rings busy leaves a mount
#   that unmounts lazily, and a new daemon serves what was written back.
#
# The suite 'io_uring' also runs the single-node tests with --io-uring
# (tests/integration/meson.build).
. "$(dirname "$0")/lib.sh"
need_fuse
need_root "the fuse module's enable_uring"

MNT=$(new_dir mnt)
PERSIST=$(new_dir persist)

log "the kernel's switch off: --io-uring warns, requests go over /dev/fuse"
uring_off
start_daemon "$MNT" --mem 256M --io-uring
grep -q "warning: --io-uring: the kernel's fuse module has io_uring off" "$DAEMON_LOG" ||
	fail "no warning that the kernel has io_uring off"
echo hello >"$MNT/a"
expect_eq "$(cat "$MNT/a")" hello "a file over /dev/fuse"
uring_used "$MNT" && fail "the kernel has io_uring off, yet status says requests came over it"
admin "$MNT" status | grep 'requests over /dev/fuse' >/dev/null ||
	fail "status does not say requests come over /dev/fuse"
stop_daemon "$MNT" "$DAEMON_PID"

log "libfuse's FUSE_URING_ENABLE without --io-uring: no rings"
uring_on
FUSE_URING_ENABLE=1 start_daemon "$MNT" --mem 256M
uring_used "$MNT" && fail "rings started without --io-uring"
grep -q 'requests arrive over io_uring' "$DAEMON_LOG" &&
	fail "the log says requests came over io_uring without --io-uring"
stop_daemon "$MNT" "$DAEMON_PID"

log "--io-uring: four processes write and read back each other's files"
start_daemon "$MNT" --mem 512M --persist "$PERSIST" --io-uring
uring_used "$MNT" || fail "--io-uring with the kernel's switch on: no request came over io_uring"
grep -q 'fuse: requests arrive over io_uring' "$DAEMON_LOG" ||
	fail "the daemon did not log that requests arrive over io_uring"
admin "$MNT" metrics >"$T_TMP/metrics"
expect_metric "$T_TMP/metrics" reftfs_fuse_io_uring -eq 1

SEED=${URING_SEED:-$RANDOM}
log "seed $SEED (URING_SEED=$SEED replays)"
"$PY" - "$MNT" "$SEED" <<'PYEOF' || fail "files written over io_uring do not read back"
import os, random, sys
from multiprocessing import Process, Queue

root, seed = sys.argv[1], int(sys.argv[2])
NPROC = 4

def plan(rank):
    rnd = random.Random(seed * 1000 + rank)
    files = [("p%d/small%03d" % (rank, i), rnd.randrange(1, 64 << 10))
             for i in range(150)]
    files.append(("p%d/large" % rank, (24 << 20) + rnd.randrange(1 << 20)))
    return files

def content(name, size):
    rnd = random.Random("%d:%s" % (seed, name))
    return rnd.randbytes(size)

def writer(rank):
    os.makedirs(os.path.join(root, "p%d" % rank), exist_ok=True)
    for name, size in plan(rank):
        data = content(name, size)
        with open(os.path.join(root, name), "wb") as f:
            for off in range(0, size, 1 << 20):
                f.write(data[off:off + (1 << 20)])

def reader(rank, q):
    bad = 0
    for other in range(NPROC):
        for name, size in plan((rank + other) % NPROC):
            with open(os.path.join(root, name), "rb") as f:
                got = f.read()
            if got != content(name, size):
                print("%s: %d bytes read, want %d as written" %
                      (name, len(got), size))
                bad += 1
    q.put(bad)

ps = [Process(target=writer, args=(r,)) for r in range(NPROC)]
for p in ps: p.start()
for p in ps: p.join()
if any(p.exitcode for p in ps):
    sys.exit("a writer failed")
q = Queue()
ps = [Process(target=reader, args=(r, q)) for r in range(NPROC)]
for p in ps: p.start()
bad = sum(q.get() for _ in range(NPROC))
for p in ps: p.join()
if any(p.exitcode for p in ps) or bad:
    sys.exit("%d files differ" % bad)
files = [f for r in range(NPROC) for f in plan(r)]
print("%d files, %d bytes, read back by every process" %
      (len(files), sum(size for _, size in files)))
PYEOF

run_py manifest.py save "$MNT" "$T_TMP/manifest.json"
admin "$MNT" flush --wait >/dev/null || fail "flush --wait"
run_py manifest.py compare "$PERSIST" "$T_TMP/manifest.json" --persist ||
	fail "the persist dir's copies differ"
log "the persist dir holds the same bytes"

log "a daemon killed while a writer keeps its rings busy"
dd if=/dev/urandom of="$MNT/busy" bs=1M count=2000 status=none 2>/dev/null &
DD=$!
sleep 0.5
kill_daemon "$MNT" "$DAEMON_PID"
wait "$DD" && fail "dd into a killed daemon's mount succeeded"
start_daemon "$MNT" --mem 512M --persist "$PERSIST" --io-uring
uring_used "$MNT" || fail "no request came over io_uring after the restart"
run_py manifest.py compare "$MNT" "$T_TMP/manifest.json" --subset ||
	fail "files read through from the persist dir differ"
log "after the restart, every file reads back from the persist dir"
stop_daemon "$MNT" "$DAEMON_PID"

# A write that waits for memory is answered from a lane thread, out of its
# ring entry; the rings go when the session ends.  SIGTERM must wait for
# that answer (ENOSPC here), then stop cleanly.
log "SIGTERM while a write waits for memory: its answer goes out first"
MNT2=$(new_dir mnt2)
start_daemon "$MNT2" --mem 64M --io-uring --enospc-wait 3000
head -c 60M /dev/zero >"$MNT2/full"
dd if=/dev/zero of="$MNT2/more" bs=1M count=16 2>"$T_TMP/dd.err" &
DD=$!
sleep 0.5
kill -TERM "$DAEMON_PID"
wait "$DD" && fail "dd into a full mount succeeded"
grep -q 'No space left' "$T_TMP/dd.err" ||
	fail "the waiting write was not answered ENOSPC: $(cat "$T_TMP/dd.err")"
for _ in $(seq 1 100); do
	pid_alive "$DAEMON_PID" || break
	sleep 0.1
done
pid_alive "$DAEMON_PID" && fail "reftfsd still runs 10 s after SIGTERM"
rc=0
wait "$DAEMON_PID" || rc=$?
expect_eq "$rc" 0 "reftfsd's exit status after SIGTERM"
grep -q 'the session ends once 1 owed answer is out' "$DAEMON_LOG" ||
	fail "the daemon did not wait for the write it owed an answer"
is_mounted "$MNT2" && fail "$MNT2 still mounted after SIGTERM"
log "PASS"
