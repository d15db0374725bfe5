#!/usr/bin/env bash
# reftfs-admin: status / ls / flush --wait / metrics, in text and --json;
# file states WRITING -> SEALED -> PERSISTED as ls shows them; metrics in
# Prometheus text format; the control socket is a 0600 socket; without -m
# the only mounted reftfs is found.
. "$(dirname "$0")/lib.sh"
need_fuse

MNT=$(new_dir mnt)
PERSIST=$(new_dir persist)
start_daemon "$MNT" --mem 256M --persist "$PERSIST" --persist-every 0

mkdir -p "$MNT/step_1/sub"
head -c $((3 << 20)) /dev/urandom >"$MNT/step_1/a.bin"
echo small >"$MNT/step_1/sub/b.txt"

# jq-less JSON checks: json_get FILE NAME KEY prints KEY of the entry NAME.
json_get() {
	"$PY" - "$@" <<'PYEOF'
import json, sys
from rftest import find_entry
e = find_entry(json.load(open(sys.argv[1])), sys.argv[2])
print("MISSING" if e is None else e.get(sys.argv[3], "NOKEY"))
PYEOF
}
# tree_get FILE NAME KEY: KEY of the tree below the directory entry NAME.
tree_get() {
	"$PY" - "$@" <<'PYEOF'
import json, sys
from rftest import find_entry
e = find_entry(json.load(open(sys.argv[1])), sys.argv[2])
print("MISSING" if e is None else (e.get("tree") or {}).get(sys.argv[3]))
PYEOF
}

# --- status
admin "$MNT" status >"$T_TMP/status.txt" || fail "status"
cat "$T_TMP/status.txt" >&2
[ -s "$T_TMP/status.txt" ] || fail "status printed nothing"
grep -q step_1 "$T_TMP/status.txt" || fail "status does not list checkpoint step_1"
admin "$MNT" --json status >"$T_TMP/status.json" || fail "status --json"
"$PY" -m json.tool "$T_TMP/status.json" >/dev/null || fail "status --json is not JSON: $(head -c 300 "$T_TMP/status.json")"

# --- ls: text and JSON; a file open for writing is WRITING, then SEALED.
admin "$MNT" ls >"$T_TMP/ls_root.txt" || fail "ls"
grep -q step_1 "$T_TMP/ls_root.txt" || fail "ls of the root does not show step_1"
admin "$MNT" ls /step_1 >"$T_TMP/ls.txt" || fail "ls /step_1"
cat "$T_TMP/ls.txt" >&2
grep -q a.bin "$T_TMP/ls.txt" || fail "ls /step_1 does not show a.bin"
admin "$MNT" ls step_1/a.bin >/dev/null || fail "ls of a single file"
admin "$MNT" --json ls /step_1 >"$T_TMP/ls.json" || fail "ls --json"
"$PY" -m json.tool "$T_TMP/ls.json" >/dev/null || fail "ls --json is not JSON"
expect_eq "$(json_get "$T_TMP/ls.json" a.bin size)" $((3 << 20)) "ls --json size of a.bin"
state=$(json_get "$T_TMP/ls.json" a.bin state)
case ${state,,} in sealed | persisted) ;; *) fail "state of a closed file: $state" ;; esac
crc=$(json_get "$T_TMP/ls.json" a.bin crc)
[ "$crc" = NOKEY ] && crc=$(json_get "$T_TMP/ls.json" a.bin checksum)
log "a.bin: state $state, crc $crc, tier $(json_get "$T_TMP/ls.json" a.bin tier)"
[ "$crc" != NOKEY ] || fail "ls --json shows no checksum state (crc) for a.bin"

# The writer is a separate process: a child of the writer would inherit
# its descriptor, and the child's exit (a close, so a FUSE FLUSH) counts.
"$PY" - "$MNT/step_1/open.bin" "$T_TMP/ready" <<'PYEOF' &
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"partial")
open(sys.argv[2], "w").close()
time.sleep(60)
PYEOF
writer=$!
_T_PIDS+=("$writer")
for i in $(seq 1 100); do [ -e "$T_TMP/ready" ] && break; sleep 0.1; done
[ -e "$T_TMP/ready" ] || fail "writer process did not start"
admin "$MNT" --json ls /step_1 >"$T_TMP/ls_open.json" || fail "ls with an open file"
state=$(json_get "$T_TMP/ls_open.json" open.bin state)
[ "${state,,}" = writing ] || fail "state of a file open for writing: $state, want writing"
# A directory: the weakest state of the files below it.
admin "$MNT" --json ls >"$T_TMP/ls_root_open.json" || fail "ls --json of the root"
expect_eq "$(tree_get "$T_TMP/ls_root_open.json" step_1 state)" writing \
	"ls: the state of /step_1 with a file open for writing"
expect_eq "$(tree_get "$T_TMP/ls_root_open.json" step_1 writing_files)" 1 \
	"ls: files of /step_1 being written"
# verify: every piece's CRC32C recomputed; a file being written is named,
# not checked, and fails nothing.
out=$(admin "$MNT" verify /step_1) || fail "verify /step_1: exit $?: $out"
grep -Eq '^ +-  ok +3 +0 +0  /step_1/a.bin$' <<<"$out" || fail "verify of a.bin: $out"
grep -Eq '^ +-  writing .*  /step_1/open.bin$' <<<"$out" || fail "verify of open.bin: $out"
grep -q '3 files: 2 copies checked, 4 pieces' <<<"$out" || fail "verify summary: $out"
kill "$writer"
wait "$writer" 2>/dev/null || true
for i in $(seq 1 50); do
	admin "$MNT" --json ls /step_1 >"$T_TMP/ls_closed.json" || fail "ls after close"
	state=$(json_get "$T_TMP/ls_closed.json" open.bin state)
	case ${state,,} in sealed | persisted) break ;; esac
	sleep 0.1
done
case ${state,,} in sealed | persisted) ;; *) fail "state after the last close: $state, want sealed" ;; esac

# A writer that forks while its file is open (subprocess, DataLoader
# workers): the child's close is not the last close.
"$PY" - "$MNT/step_1/fork.bin" "$REFTFS_ADMIN" "$MNT" <<'PYEOF' >&2 ||
import json, os, subprocess, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"x" * 1000)
subprocess.run(["true"])
out = subprocess.run([sys.argv[2], "-m", sys.argv[3], "--json", "ls", "/step_1/fork.bin"],
                     capture_output=True, text=True).stdout
st = [e for e in json.loads(out) if e["path"].endswith("fork.bin")][0]["state"]
os.close(fd)
print("state of an open file after its writer forked a child:", st)
sys.exit(0 if st == "writing" else 1)
PYEOF
	fail "a file open for writing is not 'writing' after its writer forked a child (a child's close must not seal it)"

# --- flush: plain lines when not on a terminal; then PERSISTED.
admin "$MNT" flush --wait </dev/null >"$T_TMP/flush.out" 2>&1 || {
	cat "$T_TMP/flush.out" >&2
	fail "flush --wait"
}
cat "$T_TMP/flush.out" >&2
if grep -q $'\r\|\x1b' "$T_TMP/flush.out"; then
	fail "flush --wait wrote terminal control characters to a file"
fi
cmp "$MNT/step_1/a.bin" "$PERSIST/step_1/a.bin" || fail "a.bin not in the persist dir after flush --wait"
admin "$MNT" --json ls /step_1 >"$T_TMP/ls2.json" || fail "ls after flush"
state=$(json_get "$T_TMP/ls2.json" a.bin state)
[ "${state,,}" = persisted ] || fail "state after flush --wait: $state, want persisted"
tier=$(json_get "$T_TMP/ls2.json" a.bin tier)
expect_eq "$tier" ram+persist "tier after flush --wait"
admin "$MNT" --json ls >"$T_TMP/ls_root2.json" || fail "ls --json of the root"
expect_eq "$(tree_get "$T_TMP/ls_root2.json" step_1 state)" persisted \
	"ls: the state of /step_1 after flush --wait"
expect_eq "$(tree_get "$T_TMP/ls_root2.json" step_1 files)" 4 \
	"ls: files below /step_1"
admin "$MNT" ls >"$T_TMP/ls_root2.txt" || fail "ls"
grep -Eq '^persisted +[0-9]+  - .*  /step_1/$' "$T_TMP/ls_root2.txt" ||
	fail "ls of the root: /step_1 not shown persisted: $(cat "$T_TMP/ls_root2.txt")"
admin "$MNT" flush >/dev/null || fail "flush without --wait"
admin "$MNT" --json flush --wait >"$T_TMP/flush.json" || fail "flush --wait --json"
"$PY" -m json.tool "$T_TMP/flush.json" >/dev/null || fail "flush --json is not JSON: $(head -c 300 "$T_TMP/flush.json")"

# --- metrics
admin "$MNT" metrics >"$T_TMP/metrics.txt" || fail "metrics"
run_py prom_check.py mem persist read write <"$T_TMP/metrics.txt" ||
	fail "metrics are not valid Prometheus text"
admin "$MNT" --json metrics >"$T_TMP/metrics.json" || fail "metrics --json"
"$PY" -m json.tool "$T_TMP/metrics.json" >/dev/null || fail "metrics --json is not JSON"

# --- the control socket: find it through the daemon's open sockets.
sock=$("$PY" - "$DAEMON_PID" <<'PYEOF'
import os, sys
pid = sys.argv[1]
inodes = set()
for fd in os.listdir("/proc/%s/fd" % pid):
    try:
        t = os.readlink("/proc/%s/fd/%s" % (pid, fd))
    except OSError:
        continue
    if t.startswith("socket:["):
        inodes.add(t[8:-1])
for line in open("/proc/net/unix").read().splitlines()[1:]:
    f = line.split()
    if len(f) >= 8 and f[6] in inodes and f[7].startswith("/"):
        print(f[7])
PYEOF
)
[ -n "$sock" ] || fail "no listening Unix socket with a path found in the daemon"
for s in $sock; do
	[ -S "$s" ] || fail "$s is not a socket"
	mode=$(stat -c %a "$s")
	expect_eq "$mode" 600 "mode of the control socket $s"
	log "control socket $s mode $mode"
done
if is_root && command -v setpriv >/dev/null; then
	for s in $sock; do
		rc=0
		setpriv --reuid=65534 --regid=65534 --clear-groups "$PY" -c '
import errno, socket, sys
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    c.connect(sys.argv[1])
except OSError as e:
    sys.exit(0 if e.errno in (errno.EACCES, errno.EPERM) else 3)
sys.exit(1)' "$s" || rc=$?
		[ "$rc" = 0 ] || fail "uid 65534 connecting to $s: want EACCES (exit $rc)"
	done
fi

# --- without -m: the only reftfs mounted on the machine.
if [ "$(grep -c ' fuse.reftfs ' /proc/mounts)" = 1 ]; then
	timeout 20 "$REFTFS_ADMIN" status >/dev/null || fail "status without -m"
else
	log "note: other reftfs mounts exist, 'status without -m' not checked"
fi

daemon_alive "$DAEMON_PID"
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
