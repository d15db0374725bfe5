#!/usr/bin/env bash
# Persist tier: write-back on unmount, lazy read-through after mounting
# again, flush --wait then SIGKILL + lazy unmount, plain identical files and
# no temp files in the persist dir, --persist-every 0 with each
# --unmount-flush policy, and a persist dir that runs out of space at run
# time (data stays readable, status shows the error, retry succeeds), and
# an immediate restart on the same persist dir.
. "$(dirname "$0")/lib.sh"
need_fuse
need_torch

MNT=$(new_dir mnt)
PERSIST=$(new_dir persist)
REF=$(new_dir ref)

# json_has_error FILE: true if reftfs-admin status --json reports a persist
# error (an "*error*" field that is set, or a "*healthy*" field false).
json_has_error() {
	"$PY" - "$1" <<'PYEOF'
import json, sys
from rftest import walk_json
bad = []
for d in walk_json(json.load(open(sys.argv[1]))):
    for k, v in d.items():
        kl = k.lower()
        if "error" in kl and not isinstance(v, (dict, list)) and v not in (
                None, "", 0, False, "none", "0"):
            if "time" not in kl:
                bad.append("%s=%r" % (k, v))
        if "healthy" in kl and v is False:
            bad.append("%s=%r" % (k, v))
print(" ".join(bad))
sys.exit(0 if bad else 1)
PYEOF
}

# --- A. save, unmount (write-back), mount again, lazy read-through.
start_daemon "$MNT" --mem 512M --persist "$PERSIST"
run_py ckpt_tool.py save "$MNT/step_100/model.pt" 100 "$REF/step_100/model.pt" >&2
run_py ckpt_tool.py save "$MNT/step_100/optim.pt" 101 "$REF/step_100/optim.pt" --mib 4 >&2
mkdir -p "$MNT/step_100/extra" "$REF/step_100/extra"
echo "hello" >"$MNT/step_100/extra/small.txt"
: >"$MNT/step_100/empty"
cp "$MNT/step_100/extra/small.txt" "$REF/step_100/extra/"
: >"$REF/step_100/empty"
echo 100 >"$MNT/latest"
echo 100 >"$REF/latest"
run_py manifest.py save "$REF" "$T_TMP/ref.json"
run_py manifest.py compare "$MNT" "$T_TMP/ref.json" || fail "mount differs from what was written"
stop_daemon "$MNT" "$DAEMON_PID"

run_py manifest.py compare "$PERSIST" "$T_TMP/ref.json" --persist ||
	fail "after unmount the persist dir must hold exactly the written files (no temp files)"
cmp "$PERSIST/step_100/model.pt" "$REF/step_100/model.pt" || fail "persisted model.pt differs"

start_daemon "$MNT" --mem 512M --persist "$PERSIST"
# Lazy: nothing copied up front.
free=$(($(stat -f -c '%f * %S' "$MNT")))
total=$(($(stat -f -c '%b * %S' "$MNT")))
[ $((total - free)) -le $((4 << 20)) ] ||
	fail "$((total - free)) bytes in use right after mount: persist dir copied up front?"
admin "$MNT" --json ls /step_100 >"$T_TMP/ls.json" || fail "reftfs-admin ls /step_100"
tier=$("$PY" -c "
import json, sys
from rftest import find_entry
e = find_entry(json.load(open('$T_TMP/ls.json')), 'model.pt')
print(e.get('tier') if e else 'MISSING')")
expect_eq "$tier" persist "tier of step_100/model.pt before the first read"
admin "$MNT" ls /step_100 || fail "reftfs-admin ls (text)"
admin "$MNT" status || fail "reftfs-admin status"
expect_eq "$(stat -c %s "$MNT/step_100/model.pt")" "$(stat -c %s "$REF/step_100/model.pt")" "size of model.pt"
run_py ckpt_tool.py check "$MNT/step_100/model.pt" 100 || fail "load after remount"
run_py ckpt_tool.py check "$MNT/step_100/optim.pt" 101 --mib 4 || fail "load optim.pt after remount"
run_py manifest.py compare "$MNT" "$T_TMP/ref.json" || fail "tree after remount"

# --- B. flush --wait, SIGKILL, lazy unmount, mount again.
run_py ckpt_tool.py save "$MNT/step_200/model.pt" 200 "$REF/step_200/model.pt" >&2
admin "$MNT" flush --wait || fail "reftfs-admin flush --wait"
cmp "$PERSIST/step_200/model.pt" "$REF/step_200/model.pt" ||
	fail "step_200/model.pt not in the persist dir after flush --wait"
kill_daemon "$MNT" "$DAEMON_PID"
start_daemon "$MNT" --mem 512M --persist "$PERSIST"
run_py ckpt_tool.py check "$MNT/step_200/model.pt" 200 || fail "load step_200 after SIGKILL"
run_py ckpt_tool.py check "$MNT/step_100/model.pt" 100 || fail "load step_100 after SIGKILL"
run_py manifest.py save "$REF" "$T_TMP/ref2.json"
run_py manifest.py compare "$MNT" "$T_TMP/ref2.json" || fail "tree after SIGKILL and remount"
stop_daemon "$MNT" "$DAEMON_PID"
run_py manifest.py compare "$PERSIST" "$T_TMP/ref2.json" --persist ||
	fail "persist dir after the last unmount"

# --- C. --persist-every 0: written back only on flush / unmount policy.
P0=$(new_dir persist0)
start_daemon "$MNT" --mem 256M --persist "$P0" --persist-every 0 --unmount-flush none
mkdir "$MNT/step_1"
head -c 3000000 /dev/urandom >"$MNT/step_1/x"
sleep 2
stop_daemon "$MNT" "$DAEMON_PID"
[ ! -e "$P0/step_1/x" ] || fail "--persist-every 0 --unmount-flush none still wrote step_1/x back"
start_daemon "$MNT" --mem 256M --persist "$P0" --persist-every 0 --unmount-flush all
mkdir "$MNT/step_2"
head -c 3000000 /dev/urandom | tee "$T_TMP/x2" >"$MNT/step_2/x"
sleep 1
[ ! -e "$P0/step_2/x" ] || fail "--persist-every 0 wrote step_2/x back before any flush"
stop_daemon "$MNT" "$DAEMON_PID"
cmp "$P0/step_2/x" "$T_TMP/x2" || fail "--unmount-flush all did not write step_2/x back"

# --- D. restart at once: the new daemon waits for the old one's write-back.
PH=$(new_dir persist_handover)
start_daemon "$MNT" --mem 512M --persist "$PH" --persist-every 0
old_pid=$DAEMON_PID
run_py ckpt_tool.py save "$MNT/step_300/model.pt" 300 "$REF/step_300/model.pt" --mib 160 >&2
fusermount3 -u "$MNT" || fail "fusermount3 -u"
start_daemon "$MNT" --mem 512M --persist "$PH" --persist-every 0
# The old daemon lets the persist dir go only after its write-back, so the
# copy is whole by the time the new one mounts (the old process may still
# be tearing down: under ASan, its leak check takes a while).
cmp "$PH/step_300/model.pt" "$REF/step_300/model.pt" ||
	fail "new daemon mounted before the old one's write-back was done"
wait "$old_pid" || fail "old daemon exited $? after its write-back"
run_py ckpt_tool.py check "$MNT/step_300/model.pt" 300 --mib 160 || fail "handover: load after immediate restart"
stop_daemon "$MNT" "$DAEMON_PID"

# --- E. persist dir full at run time (a 1 MiB tmpfs; root only).
if ! is_root; then
	log "not root: persist-dir-full part skipped"
	log "PASS"
	exit 0
fi
PS=$T_TMP/small
mount_tmpfs "$PS" 1M
# Retries every half second: the test waits for one, not for the default 5 s.
start_daemon "$MNT" --mem 256M --persist "$PS" --retry 500
mkdir "$MNT/step_1"
head -c $((4 << 20)) /dev/urandom >"$T_TMP/big"
# Written by one open file descriptor: a shell redirection (and dd) opens,
# dup2s and closes, and that close (a FUSE FLUSH) seals the still-empty
# file, which then gets written back as an empty earlier version.
"$PY" -c 'import shutil, sys; shutil.copyfile(sys.argv[1], sys.argv[2])' \
	"$T_TMP/big" "$MNT/step_1/big.bin"
rc=0
admin "$MNT" flush --wait >"$T_TMP/flush.out" 2>&1 || rc=$?
cat "$T_TMP/flush.out" >&2
[ "$rc" != 0 ] || fail "flush --wait exit 0 although the persist dir is full"
[ "$rc" != 124 ] || fail "flush --wait hung with a full persist dir"
daemon_alive "$DAEMON_PID"
cmp "$MNT/step_1/big.bin" "$T_TMP/big" || fail "data not readable while the persist dir is full"
if [ -e "$PS/step_1/big.bin" ]; then
	fail "a partial step_1/big.bin ($(stat -c %s "$PS/step_1/big.bin") bytes) is in the full persist dir"
fi
admin "$MNT" --json status >"$T_TMP/status.json" || fail "status while the persist dir is full"
err=$(json_has_error "$T_TMP/status.json") ||
	fail "status --json shows no persist error: $(cat "$T_TMP/status.json")"
log "status shows: $err"
admin "$MNT" status >"$T_TMP/status.txt" || fail "status (text)"
grep -qiE 'error|fail|no space' "$T_TMP/status.txt" ||
	fail "text status does not mention the persist error: $(cat "$T_TMP/status.txt")"
admin "$MNT" metrics >"$T_TMP/metrics.txt" || fail "metrics while the persist dir is full"
expect_metric "$T_TMP/metrics.txt" reftfs_persist_errors_total -ge 1
expect_metric "$T_TMP/metrics.txt" reftfs_persist_healthy -eq 0

# Make space: the daemon retries by itself; flush --wait must then succeed.
mount -o remount,size=64M "$PS" || fail "remount of the persist tmpfs"
ok=0
for i in $(seq 1 300); do
	if [ -e "$PS/step_1/big.bin" ] && cmp -s "$PS/step_1/big.bin" "$T_TMP/big"; then
		ok=1
		break
	fi
	sleep 0.1
done
[ "$ok" = 1 ] || fail "no write-back by itself within 30 s of making space (--retry 500)"
admin "$MNT" flush --wait || fail "flush --wait after making space"
cmp "$PS/step_1/big.bin" "$T_TMP/big" || fail "step_1/big.bin not written back after making space"
admin "$MNT" --json status >"$T_TMP/status2.json" || fail "status after recovery"
admin "$MNT" metrics >"$T_TMP/metrics2.txt" || fail "metrics after recovery"
expect_metric "$T_TMP/metrics2.txt" reftfs_persist_healthy -eq 1
if err=$(json_has_error "$T_TMP/status2.json"); then
	log "note: status still shows after recovery: $err"
	grep -q '"persist_healthy": *false\|"healthy": *false' "$T_TMP/status2.json" &&
		fail "persist still unhealthy after a successful write-back"
fi
leftover=$(find "$PS" -type f ! -name '*.rftsum' ! -name .reftfs-lock ! -path "$PS/step_1/big.bin")
[ -z "$leftover" ] || fail "temp files left in the persist dir: $leftover"
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
