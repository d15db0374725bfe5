#!/usr/bin/env bash
# Memory budget: writing past --mem gives ENOSPC after a bounded wait (not
# a crash, not a hang), what was written stays intact, the daemon keeps
# answering, and space is usable again after rm.  Then: with --keep 1 and
# a persist dir, an older checkpoint that is written back is evicted to make
# room for the newest, and still reads back (through the persist tier).
. "$(dirname "$0")/lib.sh"
need_fuse

MNT=$(new_dir mnt)
MiB=$((1 << 20))

# --- 1. ENOSPC at the budget, no persist dir: nothing can be evicted.
start_daemon "$MNT" --mem 64M --enospc-wait 500
SECONDS=0
out=$(run_py fill.py "$MNT/big" $((256 * MiB)) 1) || fail "filling the mount"
log "fill: $out"
[ "$SECONDS" -lt 60 ] || fail "reaching ENOSPC took ${SECONDS}s"
written=$(echo "$out" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["size"])')
[ "$written" -ge $((32 * MiB)) ] || fail "ENOSPC after only $written bytes of a 64M budget"
[ "$written" -le $((66 * MiB)) ] || fail "$written bytes stored in a 64M budget"
maxw=$(echo "$out" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["max_write_s"])')
"$PY" -c "import sys; sys.exit(not ($maxw < 10))" ||
	fail "one write blocked ${maxw}s with --enospc-wait 500"
daemon_alive "$DAEMON_PID"
admin "$MNT" status >"$T_TMP/status.txt" || fail "reftfs-admin status after ENOSPC"
admin "$MNT" metrics >"$T_TMP/metrics.txt" || fail "reftfs-admin metrics after ENOSPC"
expect_metric "$T_TMP/metrics.txt" reftfs_enospc_total -ge 1

# A second writer while full also gets ENOSPC, and a small file too.
run_py fill.py "$MNT/second" $((8 * MiB)) 2 >/dev/null ||
	fail "a second file while the budget is full must get ENOSPC"
rm -f "$MNT/second"

# Space comes back after rm.
rm -f "$MNT/big"
for i in $(seq 1 50); do
	free=$(($(stat -f -c '%f * %S' "$MNT")))
	[ "$free" -ge $((60 * MiB)) ] && break
	sleep 0.1
done
[ "$free" -ge $((60 * MiB)) ] || fail "only $free bytes free after rm"
out=$(run_py fill.py "$MNT/again" $((48 * MiB)) 3 --expect-ok) ||
	fail "writing 48M after rm"
rm -f "$MNT/again"
# And it can be filled (and emptied) again: nothing leaked.
run_py fill.py "$MNT/big2" $((256 * MiB)) 4 >/dev/null || fail "second fill"
rm -f "$MNT/big2"
run_py fill.py "$MNT/again2" $((48 * MiB)) 5 --expect-ok >/dev/null ||
	fail "writing 48M after the second fill and rm"
daemon_alive "$DAEMON_PID"
stop_daemon "$MNT" "$DAEMON_PID"

# --- 2. --keep 1 + persist: step_1 (written back) is evicted for step_2.
PERSIST=$(new_dir persist)
start_daemon "$MNT" --mem 64M --keep 1 --persist "$PERSIST" --enospc-wait 5000
mkdir "$MNT/step_1"
run_py fill.py "$MNT/step_1/a.bin" $((40 * MiB)) 11 --expect-ok >/dev/null ||
	fail "writing step_1"
mkdir "$MNT/step_2"
run_py fill.py "$MNT/step_2/b.bin" $((40 * MiB)) 12 --expect-ok >/dev/null ||
	fail "step_2 could not be written although step_1 is outside --keep 1 and can be written back and evicted"
admin "$MNT" --json ls /step_1 >"$T_TMP/ls1.json" || fail "admin ls /step_1"
"$PY" - "$T_TMP/ls1.json" <<'PYEOF' || fail "step_1/a.bin should not be fully resident any more"
import json, sys
from rftest import find_entry
e = find_entry(json.load(open(sys.argv[1])), "a.bin")
assert e is not None, "a.bin not in ls output"
print("step_1/a.bin tier:", e.get("tier"))
sys.exit(0 if e.get("tier") in ("persist", "partial") else 1)
PYEOF
# Reading it back needs memory while step_2 fills most of the budget: the
# chunks read in are themselves persisted, so they can make room.
"$PY" - "$MNT" <<'PYEOF' || fail "reading back the evicted checkpoint step_1 while step_2 fills memory"
import errno, os, sys, time
from rftest import pattern, check_bytes, drop_caches
mnt = sys.argv[1]
drop_caches()
for rel, seed in (("step_1/a.bin", 11), ("step_2/b.bin", 12)):
    want = pattern(1 << 20, seed)
    t = time.monotonic()
    with open(os.path.join(mnt, rel), "rb", buffering=0) as f:
        for i in range(40):
            try:
                b = b""
                while len(b) < (1 << 20):
                    x = f.read((1 << 20) - len(b))
                    if not x:
                        break
                    b += x
            except OSError as e:
                sys.exit("%s: read of MiB %d failed after %.1f s: %s" % (
                    rel, i, time.monotonic() - t, errno.errorcode.get(e.errno)))
            check_bytes(b, want, "%s MiB %d" % (rel, i))
        assert f.read(1) == b"", rel + ": longer than 40 MiB"
    print("%s read back in %.2f s" % (rel, time.monotonic() - t))
PYEOF
cmp "$MNT/step_1/a.bin" "$PERSIST/step_1/a.bin" || fail "step_1/a.bin differs from its persisted copy"
daemon_alive "$DAEMON_PID"
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
