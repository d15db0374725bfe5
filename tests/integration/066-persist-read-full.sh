#!/usr/bin/env bash
# Read-through with memory full (issue 30, finding 4): alone, with a
# persist dir, --keep 1 and --persist-every 0.  An older checkpoint is
# written back and evicted, a newer one (not written back) and the
# current one fill all but one chunk, and nothing else may be evicted.
# Reading the old checkpoint back must run at the persist dir's speed:
# each piece read in makes room for the next at once (it is itself
# persisted), not one piece a second while each reader waited for the
# persist worker's next eviction (32 MiB took 32 s, with a log line
# "evicted 1 persisted pieces" a second).  The loads that found memory
# full are counted (status, metrics), the log says so in a line or two,
# not one per piece, and the bytes are right.
. "$(dirname "$0")/lib.sh"
need_fuse

MNT=$(new_dir mnt)
PERSIST=$(new_dir persist)
REF=$(new_dir ref)
MiB=$((1 << 20))

start_daemon "$MNT" --mem 256M --keep 1 --persist "$PERSIST" \
	--persist-every 0
mkdir "$MNT/c1" "$MNT/c2" "$MNT/c3"
head -c $((32 * MiB)) /dev/urandom >"$REF/old"
cp "$REF/old" "$MNT/c1/old"
admin "$MNT" flush --wait >/dev/null || fail "flush --wait of c1"
# 120 + 135 MiB: c1 (written back, outside --keep 1) is evicted for them.
run_py fill.py "$MNT/c2/a" $((120 * MiB)) 21 --expect-ok >/dev/null ||
	fail "writing c2"
run_py fill.py "$MNT/c3/b" $((135 * MiB)) 22 --expect-ok >/dev/null ||
	fail "writing c3"

stat_json() {
	admin "$MNT" status --json | "$PY" -c '
import json, sys
s = json.load(sys.stdin)
m, c = s["memory"], s["counters"]
# .get: a daemon without these counters fails below, by what it does.
print(m["chunks_total"] - m["chunks_used"], m["chunks_evictable"],
      c["evicted_chunks"], c.get("fetch_stalls", 0),
      c.get("reads_uncached", 0))'
}
read -r free evictable evicted0 stalls0 _ <<<"$(stat_json)"
log "before the read: $free chunks free, $evictable evictable, $evicted0 evicted"
[ "$free" -le 2 ] || fail "$free chunks free: the setup wants memory full"
expect_eq "$evictable" 0 "evictable chunks with c2 and c3 in memory"
lines0=$(grep -c "evicted" "$DAEMON_LOG" || true)

echo 3 >/proc/sys/vm/drop_caches
t0=$(date +%s.%N)
timeout 120 dd if="$MNT/c1/old" of="$T_TMP/got" bs=32k status=none ||
	fail "reading c1/old back (32 MiB) did not finish in 120 s"
t1=$(date +%s.%N)
secs=$("$PY" -c "print('%.2f' % ($t1 - $t0))")
cmp "$REF/old" "$T_TMP/got" || fail "c1/old read back differs"
read -r free evictable evicted1 stalls1 uncached <<<"$(stat_json)"
log "32 MiB read back in ${secs}s: $((evicted1 - evicted0)) pieces evicted," \
	"$((stalls1 - stalls0)) loads found memory full, $uncached reads" \
	"served uncached, $evictable evictable now"
# One piece a second before: 32 s.
"$PY" -c "import sys; sys.exit(not ($secs < 8))" ||
	fail "32 MiB read back from the persist dir took ${secs}s with memory full"
[ "$stalls1" -gt "$stalls0" ] || fail "no load counted as finding memory full"
[ "$evicted1" -gt "$evicted0" ] || fail "nothing evicted while reading c1 back"
[ "$evictable" -ge 1 ] || fail "what was read in last is not counted evictable"
admin "$MNT" status | grep "memory full: [0-9]* pieces brought in while full" >/dev/null ||
	fail "status does not say reads found memory full"
admin "$MNT" metrics >"$T_TMP/metrics.txt" || fail "reftfs-admin metrics"
expect_metric "$T_TMP/metrics.txt" reftfs_fetch_stalls_total -ge 1
expect_metric "$T_TMP/metrics.txt" reftfs_reads_uncached_total -ge 0
lines=$(($(grep -c "evicted" "$DAEMON_LOG" || true) - lines0))
[ "$lines" -le 4 ] || fail "$lines log lines about eviction for one read: want a summary"

# The rest is still there and right, and c1 reads back a second time.
cmp "$REF/old" "$MNT/c1/old" || fail "c1/old read a second time differs"
cmp "$PERSIST/c1/old" "$REF/old" || fail "the persisted c1/old differs"
daemon_alive "$DAEMON_PID"
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
