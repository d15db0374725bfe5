#!/usr/bin/env bash
# Checkpoint state for job scripts (issue 28, item 2), one node with a
# persist dir: reftfs-admin checkpoints counts each checkpoint's files by
# state and names the newest wholly persisted one (a checkpoint with a file
# still open is not it); reftfs-admin wait PATH --persisted waits for a
# checkpoint, exit 3 at its --timeout while a writer holds a file open
# (or while it has no file yet), exit 0 once it is closed and written back;
# user.reftfs.state says the same to getxattr.  The group's side (protected,
# incomplete) is in 240-group-data and 258-group-lost.  reftfs-admin
# advise (issue 29) reads the same checkpoints' times.
. "$(dirname "$0")/lib.sh"
need_fuse

MNT=$(new_dir mnt)
PERSIST=$(new_dir persist)
start_daemon "$MNT" --mem 256M --persist "$PERSIST"

# ckpts EXPR: a Python expression over checkpoints --json (as c).
ckpts() {
	admin "$MNT" checkpoints --json | "$PY" -c '
import json, sys
c = json.load(sys.stdin)
k = {x["name"]: x for x in c["checkpoints"]}
print(eval(sys.argv[1]))' "$1"
}

# advise (issue 29) with no checkpoint saved yet: it says so, exit 1.
rc=0
out=$(admin "$MNT" advise 2>&1) || rc=$?
expect_eq "$rc" 1 "advise with no checkpoint"
case $out in *"no checkpoint this daemon saw saved"*) ;; *) fail "advise: $out" ;; esac

mkdir "$MNT/step_1"
head -c 3000000 /dev/urandom >"$MNT/step_1/model.pt"
echo meta >"$MNT/step_1/meta.json"
admin "$MNT" wait "$MNT/step_1" --persisted --timeout 30 ||
	fail "wait $MNT/step_1 --persisted"
expect_eq "$(ckpts 'c["newest_persisted"], c["newest_protected"]')" \
	"('step_1', 'step_1')" "newest wholly persisted and protected (a persisted file is safe from a node's loss)"

# step_2: one file written and closed, one held open by a writer.
mkdir "$MNT/step_2"
head -c 2000000 /dev/urandom >"$MNT/step_2/a.pt"
exec 7>"$MNT/step_2/b.pt"
echo partial >&7
rc=0
out=$(admin "$MNT" wait /step_2 --persisted --timeout 1.5 2>&1) || rc=$?
expect_eq "$rc" 3 "wait /step_2 --persisted with a writer open: exit status"
grep -q "not persisted after" <<<"$out" || fail "wait at its timeout: $out"
grep -q "1 writing" <<<"$out" || fail "wait at its timeout does not count the writer: $out"
expect_eq "$(ckpts '(k["step_2"]["state"], k["step_2"]["files"], k["step_2"]["writing_files"], c["newest_persisted"])')" \
	"('writing', 2, 1, 'step_1')" "checkpoints with step_2 open"
admin "$MNT" checkpoints | grep "^newest wholly persisted: step_1$" >/dev/null ||
	fail "checkpoints text: $(admin "$MNT" checkpoints)"

# Closed: the same wait, now without a timeout, ends with exit 0.
admin "$MNT" wait /step_2 --persisted >"$T_TMP/wait.out" 2>&1 7>&- &
WAITER=$!
sleep 0.5
pid_alive "$WAITER" || fail "wait ended while b.pt was open: $(cat "$T_TMP/wait.out")"
exec 7>&-
rc=0
wait "$WAITER" || rc=$?
expect_eq "$rc" 0 "wait /step_2 --persisted once b.pt was closed ($(cat "$T_TMP/wait.out"))"
grep -q "^/step_2: persisted: 2 files" "$T_TMP/wait.out" ||
	fail "wait's line: $(cat "$T_TMP/wait.out")"
expect_eq "$(ckpts '(k["step_2"]["state"], k["step_2"]["persisted_files"], c["newest_persisted"])')" \
	"('persisted', 2, 'step_2')" "checkpoints once step_2 is written back"
admin "$MNT" metrics | grep '^reftfs_checkpoint_persisted_files{checkpoint="step_2"} 2$' >/dev/null ||
	fail "metrics: no reftfs_checkpoint_persisted_files for step_2: $(admin "$MNT" metrics | grep 'step_2')"

# An empty checkpoint (made, nothing written yet) is no loader's choice.
mkdir "$MNT/step_3"
expect_eq "$(ckpts 'c["newest_persisted"]')" step_2 "newest wholly persisted beside an empty step_3"
rc=0
admin "$MNT" wait /step_3 --sealed --timeout 0.5 >/dev/null 2>&1 || rc=$?
expect_eq "$rc" 3 "wait for an empty checkpoint"

# The same for a loader, with getxattr alone: user.reftfs.state on a
# checkpoint directory or a file, JSON; nothing else, and nothing to set.
# Where files open through the page cache (libfuse < 3.16) the mount has
# no extended attributes (each write would cost a GETXATTR).
if grep -q "opens through the page cache" "$DAEMON_LOG"; then
	expect_eq "$("$PY" -c 'import errno, os, sys
try:
    os.listxattr(sys.argv[1])
except OSError as x:
    print(errno.errorcode[x.errno])' "$MNT/step_2")" ENOTSUP \
		"listxattr where files open through the page cache"
else
expect_eq "$("$PY" - "$MNT" <<'PYEOF'
import errno, json, os, sys
m = sys.argv[1]
c = json.loads(os.getxattr(m + "/step_2", "user.reftfs.state"))
f = json.loads(os.getxattr(m + "/step_1/meta.json", "user.reftfs.state"))
e = json.loads(os.getxattr(m + "/step_3", "user.reftfs.state"))
out = [c["state"], c["files"], c["persisted"], f["state"], f["files"], e["files"],
       os.listxattr(m + "/step_2")]
for name in ("user.other", "trusted.reftfs.state"):
    try:
        os.getxattr(m + "/step_2", name)
    except OSError as x:
        out.append(errno.errorcode[x.errno])
try:
    os.setxattr(m + "/step_2", "user.reftfs.state", b"x")
except OSError as x:
    out.append(errno.errorcode[x.errno])
print(out)
PYEOF
)" "['persisted', 2, 2, 'persisted', 1, 0, ['user.reftfs.state'], 'ENODATA', 'ENODATA', 'ENOTSUP']" \
	"user.reftfs.state by getxattr"
fi

# advise: from the checkpoints this daemon saw saved (step_1 and step_2;
# step_3 has no file), the interval Young/Daly give for the save it
# measured and --mtbf, and --persist-every; bad --mtbf is refused.
for bad in 0 -1 soon 2000000; do
	rc=0
	admin "$MNT" advise --mtbf "$bad" >/dev/null 2>&1 || rc=$?
	expect_eq "$rc" 2 "advise --mtbf $bad"
done
expect_eq "$(admin "$MNT" advise --mtbf 6 --json | "$PY" -c '
import json, math, sys
a = json.load(sys.stdin)
d = max(a["save_ms"], 1) / 1000
t = math.sqrt(2 * d * 6 * 3600) - d
print(a["checkpoints_used"], a["mtbf_hours"], a["interval_ms"] > 0,
      a["persisted_after_ms"] is not None, a["protected_after_ms"],
      abs(a["interval_advised_seconds"] - t) <= 1,
      a["persist_every_advised"] >= 1, a["exposed_one_in"] > 0)')" \
	"2 6 True True None True True True" "advise --mtbf 6 --json"
admin "$MNT" advise | grep "^advice    checkpoint every [0-9]* s (Young/Daly)" >/dev/null ||
	fail "advise's text: $(admin "$MNT" advise)"
# No checkpoint read yet: no load.  step_2 read whole (a.pt and b.pt),
# then it is the load: its bytes, and the time lost counts it per failure
# (d / T + (T / 2 + R) / M).
expect_eq "$(admin "$MNT" advise --json | "$PY" -c '
import json, sys
print(json.load(sys.stdin).get("load_ms"))')" None "advise's load before any read"
# The load is made to take a second (both files held open that long),
# and the job to fail every 36 s: the load then weighs in the time lost.
"$PY" - "$MNT/step_2" <<'PYEOF'
import os, sys, time
fs = [open(os.path.join(sys.argv[1], n), "rb") for n in ("a.pt", "b.pt")]
for f in fs:
    f.read()
time.sleep(1)
for f in fs:
    f.close()
PYEOF
expect_eq "$(admin "$MNT" advise --mtbf 0.01 --json | "$PY" -c '
import json, math, sys
a = json.load(sys.stdin)
m = 0.01 * 3600
d = max(a["save_ms"], 1) / 1000
t = math.sqrt(2 * d * m) - d
r = a["load_ms"] / 1000
lost = 100 * (d / t + (t / 2 + r) / m)
print(a["loads_used"], a["load_bytes"], a["load_ms"] >= 1000,
      a["load_bytes_per_second"] > 0,
      abs(a["time_lost_advised"] - lost) < 0.2,
      a["time_lost_advised"] - 100 * (d / t + t / 2 / m) > 2)')" \
	"1 $(($(stat -c %s "$MNT/step_2/a.pt") + $(stat -c %s "$MNT/step_2/b.pt"))) True True True True" \
	"advise's load of step_2"
log "$(admin "$MNT" advise | grep "^load")"
admin "$MNT" advise | grep "^load      [0-9]* ms: of a checkpoint, the files read here" >/dev/null ||
	fail "advise's load line: $(admin "$MNT" advise)"

# A file alone, and a path that is not there.
admin "$MNT" wait /step_1/meta.json --sealed --timeout 5 >/dev/null ||
	fail "wait for a file"
rc=0
admin "$MNT" wait /step_9 --sealed --timeout 5 >/dev/null 2>&1 || rc=$?
expect_eq "$rc" 1 "wait for a path that is not there"
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
