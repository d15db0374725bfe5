#!/usr/bin/env bash
# The persist dir fails under the daemon (issue 7): it goes read-only
# while files are written, renamed over and removed in the mount.  Nothing
# in RAM is dropped, every failure is visible (flush --wait fails, status
# says FAILING) and retried, and once the dir is writable again the tree
# there matches the mount: renames and removals included, after a kill.
. "$(dirname "$0")/lib.sh"
need_fuse
need_root

MNT=$(new_dir mnt)
P=$T_TMP/persist
mount_tmpfs "$P" 64M
start_daemon "$MNT" --mem 128M --persist "$P" --retry 300

mkdir "$MNT/ck"
head -c 3M /dev/urandom >"$MNT/ck/model.pt"
echo v1 >"$MNT/ck/gone.txt"
admin "$MNT" flush --wait >/dev/null || fail "first flush"

mount -o remount,ro "$P" || fail "remount the persist dir read-only"
head -c 2M /dev/urandom >"$T_TMP/new"
cp "$T_TMP/new" "$MNT/ck/model.pt.tmp"
mv "$MNT/ck/model.pt.tmp" "$MNT/ck/model.pt" # rename over
rm "$MNT/ck/gone.txt"                      # a removal the dir refuses
echo later >"$MNT/ck/later.txt"
if admin "$MNT" flush --wait >"$T_TMP/flush.out" 2>&1; then
	fail "flush --wait succeeded on a read-only persist dir"
fi
admin "$MNT" status --json >"$T_TMP/status.json"
"$PY" - "$T_TMP/status.json" <<'PYEOF' || fail "status does not show the failure"
import json, sys
p = json.load(open(sys.argv[1]))["persist"]
assert p["healthy"] is False, p
assert "Read-only" in p["last_error"], p
PYEOF
admin "$MNT" metrics >"$T_TMP/metrics"
expect_metric "$T_TMP/metrics" reftfs_persist_healthy -eq 0
cmp "$T_TMP/new" "$MNT/ck/model.pt" || fail "data in RAM changed while the dir failed"
# The old model.pt is still the one in the persist dir.
[ -f "$P/ck/model.pt" ] || fail "the persisted model.pt is gone"

mount -o remount,rw "$P" || fail "remount the persist dir read-write"
# Retried on its own (every --retry ms, doubling): no flush asked for.
for i in $(seq 1 100); do
	[ ! -e "$P/ck/gone.txt" ] && [ -f "$P/ck/later.txt" ] &&
		cmp -s "$T_TMP/new" "$P/ck/model.pt" && break
	sleep 0.1
done
[ ! -e "$P/ck/gone.txt" ] || fail "the refused removal was not retried"
cmp "$T_TMP/new" "$P/ck/model.pt" || fail "model.pt not written back after recovery"
[ -f "$P/ck/later.txt" ] || fail "later.txt not written back after recovery"
admin "$MNT" flush --wait >/dev/null || fail "flush after recovery"
admin "$MNT" metrics >"$T_TMP/metrics"
expect_metric "$T_TMP/metrics" reftfs_persist_healthy -eq 1

# A kill now loses nothing: the persist dir matches the mount.
kill_daemon "$MNT" "$DAEMON_PID"
start_daemon "$MNT" --mem 128M --persist "$P"
cmp "$T_TMP/new" "$MNT/ck/model.pt" || fail "model.pt after a kill"
[ ! -e "$MNT/ck/gone.txt" ] || fail "a removed file came back after a kill"
[ ! -e "$MNT/ck/model.pt.tmp" ] || fail "the renamed name came back"
expect_eq "$(cat "$MNT/ck/later.txt")" later "later.txt after a kill"
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
