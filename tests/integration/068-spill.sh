#!/usr/bin/env bash
# The spill tier (issue 28, item 3): --spill DIR:SIZE, a local disk below
# RAM.  A daemon with a 64 MiB arena, --keep 1 and no persist dir: without
# a spill dir the third checkpoint of 40 MiB cannot be written (ENOSPC);
# with one, the older checkpoints go there as memory runs short, and every
# file reads back byte-identical, with ls showing them in tier spill, and
# status and metrics counting the pieces.  A spilled piece corrupted on
# disk reads EIO, never other bytes.  Alone without a persist dir nothing
# spilled can be found again: the directory is emptied when the daemon
# starts and when it stops.  Bad --spill options are refused (exit 2).  (In a group:
# 262-group-spill.)
. "$(dirname "$0")/lib.sh"
need_fuse

MNT=$(new_dir mnt)
REF=$(new_dir ref)
S=$(new_dir spill)

# write_ckpts N: checkpoints step_1..step_N, two files of 20 MiB each.
write_ckpts() {
	local c f
	for c in $(seq 1 "$1"); do
		mkdir -p "$MNT/step_$c"
		for f in a b; do
			[ -e "$REF/step_$c.$f" ] ||
				head -c $((20 * 1048576 + c * 4096)) /dev/urandom >"$REF/step_$c.$f"
			cp "$REF/step_$c.$f" "$MNT/step_$c/$f" || return 1
		done
	done
}

# --- without a spill dir: ENOSPC ------------------------------------------
start_daemon "$MNT" --mem 64M --keep 1 --enospc-wait 200
if write_ckpts 3 2>"$T_TMP/cp.err"; then
	fail "three checkpoints of 40 MiB fit a 64 MiB arena with nothing to evict"
fi
grep -q "No space left on device" "$T_TMP/cp.err" || fail "cp: $(cat "$T_TMP/cp.err")"
stop_daemon "$MNT" "$DAEMON_PID"
log "no spill dir: the third checkpoint of 40 MiB gets ENOSPC in a 64 MiB arena"

# --- with one: the older checkpoints go there -----------------------------
# What a daemon killed before left there is not this one's: removed.
echo stale >"$S/0123456789abcdef.spill"
start_daemon "$MNT" --mem 64M --keep 1 --enospc-wait 200 --spill "$S:1G"
[ -e "$S/0123456789abcdef.spill" ] && fail "a spill file of an earlier daemon is still there"
grep -q "spill dir $S: 0 pieces of 0 files taken back; 1 files of an earlier daemon removed" "$DAEMON_LOG" ||
	fail "the removal of an earlier daemon's spill file is not in the log"
write_ckpts 5 || fail "five checkpoints with a spill dir"
for c in 1 2 3 4 5; do
	for f in a b; do
		cmp "$REF/step_$c.$f" "$MNT/step_$c/$f" || fail "step_$c/$f differs"
	done
done
tier=$(admin "$MNT" ls /step_1/a --json | "$PY" -c '
import json, sys
print(json.load(sys.stdin)[0]["tier"])')
case $tier in spill | ram+spill) ;; *) fail "step_1/a in tier '$tier', want spill" ;; esac
admin "$MNT" metrics >"$T_TMP/metrics"
expect_metric "$T_TMP/metrics" reftfs_spill_enabled -eq 1
expect_metric "$T_TMP/metrics" reftfs_spill_pieces -ge 1
expect_metric "$T_TMP/metrics" reftfs_spill_written_pieces_total -ge 40
expect_metric "$T_TMP/metrics" reftfs_spill_read_pieces_total -ge 1
expect_metric "$T_TMP/metrics" reftfs_enospc_total -eq 0
admin "$MNT" status >"$T_TMP/status"
grep -q "^spill .*$S: [0-9]* pieces there now" "$T_TMP/status" ||
	fail "status: $(grep -i spill "$T_TMP/status")"
log "five checkpoints of 40 MiB in a 64 MiB arena: the older ones spilled, all read back; $(grep '^spill' "$T_TMP/status")"

# --- a spilled piece goes bad on disk: EIO --------------------------------
idx=$(admin "$MNT" placement /step_1/b --json | "$PY" -c '
import json, sys
print(next(p["piece"] for p in json.load(sys.stdin) if p["here"] == "spill"))') ||
	fail "no piece of step_1/b in the spill dir"
chunk=$(admin "$MNT" status --json | "$PY" -c '
import json, sys
print(json.load(sys.stdin)["memory"]["chunk_size_bytes"])')
for f in "$S"/*.spill; do
	"$PY" - "$f" $((idx * chunk + 100)) <<'PYEOF'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
off = int(sys.argv[2])
b = os.pread(fd, 1, off)
if b:
    os.pwrite(fd, bytes([b[0] ^ 0x5a]), off)
os.close(fd)
PYEOF
done
"$PY" - "$MNT/step_1/b" $((idx * chunk)) <<'PYEOF' || fail "reading step_1/b's corrupt spilled piece"
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
# Not the kernel's cached copy of what cmp read (opens through the page
# cache, libfuse before 3.16): the daemon's.
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
try:
    os.pread(fd, 4096, int(sys.argv[2]))
    sys.exit("read a corrupt spilled piece without an error")
except OSError as e:
    if e.errno != errno.EIO:
        sys.exit("%s, want EIO" % e)
PYEOF
grep -q "spill: .*fails its checksum" "$DAEMON_LOG" || fail "the daemon did not log the bad piece"
admin "$MNT" metrics >"$T_TMP/metrics"
expect_metric "$T_TMP/metrics" reftfs_spill_crc_errors_total -ge 1
log "a spilled piece corrupted on disk: EIO, logged and counted"

stop_daemon "$MNT" "$DAEMON_PID"
[ -z "$(ls -A "$S")" ] || fail "the spill dir holds $(ls "$S" | wc -l) files after the daemon stopped"

# --- bad options ------------------------------------------------------------
for bad in "$T_TMP/nowhere" "$S:0" "$S:lots"; do
	rc=0
	timeout 20 "$REFTFSD" "$MNT" -f --spill "$bad" >"$T_TMP/out" 2>&1 || rc=$?
	[ "$rc" = 2 ] || fail "--spill $bad: exit $rc, want 2: $(cat "$T_TMP/out")"
	grep -qi "spill" "$T_TMP/out" || fail "--spill $bad: $(cat "$T_TMP/out")"
done
is_mounted "$MNT" && fail "a refused daemon mounted $MNT"
log "PASS"
