#!/usr/bin/env bash
# fsync means protected (issue 28, item 1): in a group with --protect, a
# writer's fsync returns once its data is protected (--sync protect, the
# default there), so a node SIGKILLed right after fsync returned loses
# nothing of it.  Three nodes, --protect xor (parity on another node: the
# survivors decode).  Writers as checkpoint code writes:
#  - torch.distributed.checkpoint's FileSystemWriter: each data file
#    written and fsynced, then .metadata written and fsynced; the node dies
#    with the metadata file still open;
#  - an atomic-rename writer: write a temp file, fsync, close, rename it to
#    its final name; the node dies right after the rename.
# Every file reads back byte-identical on both survivors, and after the
# node's replacement rebuilt, on it too.  In the full tier also (not under
# the sanitizers): with the group short of its majority, fsync fails with
# EIO within its deadline and the data stays readable where it was
# written.
. "$(dirname "$0")/lib.sh"
need_fuse

REF=$(new_dir ref)
group_init 3
start_node() { group_node "$1" --mem 256M --protect xor "${@:2}"; }
for n in 0 1 2; do start_node "$n"; done
wait_states "${M[0]}" "self up up" 30
mkdir "${M[0]}/step_1"

# The writers on node 0 (fsync_writer.py): a DCP-style save and an
# atomic-rename save, each fsync timed; .metadata kept open until killed.
fsync_writer "${M[0]}/step_1" "$REF"
# The instant fsync returned: node 0 dies, .metadata still open.
kill_daemon "${M[0]}" "${PID[0]}"
kill "$WRITER" 2>/dev/null || true
wait "$WRITER" 2>/dev/null || true
wait_states "${M[1]}" "dead self up" 30
# same_files skips dot files.
same_meta() {
	local n
	for n in "$@"; do
		cmp "$REF/.metadata" "${M[$n]}/step_1/.metadata" ||
			fail "step_1/.metadata differs on node $n"
	done
}
same_files "$REF" step_1 1 2
same_meta 1 2
log "node 0 killed right after fsync returned: every file reads the same on nodes 1 and 2"

start_node 0
wait_states "${M[0]}" "self up up" 30
rebuild_wait 0
same_files "$REF" step_1 0 1 2
same_meta 0 1 2
log "node 0 replaced and rebuilt: every file reads the same on every node"

# (Not again under the sanitizers: the seal's log timeout, 10 s of nothing.)
if [ "$RFT_TIER" != quick ] && [ "${RFT_SANITIZE:-none}" = none ]; then
	# Short of its majority the seal cannot go round the log: fsync
	# fails with EIO within its deadline; the data stays readable here.
	# The file is opened while the group is whole (an open for writing
	# goes round the log too).
	head -c 1500000 /dev/urandom >"$REF/alone"
	"$PY" - "${M[0]}/step_1/alone" "$REF/alone" "$T_TMP/go" <<'PYEOF' >"$T_TMP/alone.out" 2>&1 &
import errno, os, sys, time
data = open(sys.argv[2], "rb").read()
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
print("opened", flush=True)
while not os.path.exists(sys.argv[3]):
    time.sleep(0.05)
os.write(fd, data)
t = time.monotonic()
try:
    os.fsync(fd)
except OSError as e:
    print("fsync: %s after %.1f s" % (errno.errorcode[e.errno], time.monotonic() - t), flush=True)
    sys.exit(3)
print("fsync returned 0", flush=True)
PYEOF
	ALONE=$!
	for i in $(seq 1 200); do
		grep -q '^opened' "$T_TMP/alone.out" && break
		sleep 0.1
	done
	grep -q '^opened' "$T_TMP/alone.out" || fail "open for writing: $(cat "$T_TMP/alone.out")"
	kill_daemon "${M[1]}" "${PID[1]}"
	kill_daemon "${M[2]}" "${PID[2]}"
	t0=$SECONDS
	touch "$T_TMP/go"
	rc=0
	wait "$ALONE" || rc=$?
	grep -q "^fsync: EIO" "$T_TMP/alone.out" ||
		fail "fsync short of the group's majority: exit $rc, $(cat "$T_TMP/alone.out") (want EIO)"
	[ $((SECONDS - t0)) -le 45 ] || fail "fsync's EIO took $((SECONDS - t0)) s"
	grep -q "fsync of /\?step_1/alone: " "$DAEMON_LOG" ||
		fail "the fsync's EIO is not in node 0's log: $(grep -v "info:" "$DAEMON_LOG" | tail -20)"
	cmp "$REF/alone" "${M[0]}/step_1/alone" || fail "alone differs on node 0 after fsync's EIO"
	log "short of its majority: $(cat "$T_TMP/alone.out"), the data still there"
fi
log "PASS"
