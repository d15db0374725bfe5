#!/usr/bin/env bash
# Fetched and decoded copies are a cache (issue 30, finding 2).  A node
# that reads another node's files keeps what it fetched as a clean cache:
# counted evictable, and dropped first when memory is short, before a
# reader waits or a writer gets ENOSPC; the next read fetches it again.
#
# 1. Two nodes, --mem 128M: node 1 writes a and b (16 MiB each), node 0
#    writes 112 MiB of its own and reads a: memory full, a's 16 MiB
#    counted evictable.  Reading b 32 KiB at a time must evict a's copies
#    and run at the network's speed (each read waited --enospc-wait, 2 s,
#    and 16 MiB did not finish in 300 s).
# 2. Node 0 drops its own file and reads 80 MiB of node 1's files, at the
#    root and in checkpoints inside and outside --keep; then it writes 112
#    MiB of its own in a new checkpoint: no ENOSPC (it got ENOSPC with 64
#    MiB "fetched by readers" and 0 evictable).  What was evicted reads
#    right again.  Once its own data fills the rest (every copy gone, then
#    ENOSPC), reads are served without keeping a copy, without waiting.
# 3. Three nodes with --protect xor: node 2 writes x and y and dies.  Node
#    0, nearly full of its own data, reads x (decoded from the stripes,
#    kept as fetched copies) and then y: x's decoded copies make room (a
#    1 MiB read took 4 s).
. "$(dirname "$0")/lib.sh"
need_fuse

MiB=$((1 << 20))
REF=$(new_dir ref)

# st MNT: "free evictable cached_mib evicted enospc stalls" of its daemon.
st() {
	admin "$1" status --json | "$PY" -c '
import json, sys
s = json.load(sys.stdin)
m, c = s["memory"], s["counters"]
# .get: a daemon without the counter fails below, by what it does.
print(m["chunks_total"] - m["chunks_used"], m["chunks_evictable"],
      m["cached_bytes"] >> 20, c["evicted_chunks"], c["enospc"],
      c.get("fetch_stalls", 0))'
}

# timed_read PATH REF BS SECONDS WHAT: read PATH with dd bs=BS, under a
# limit of SECONDS; fail unless it matches REF.  Sets SECS.
timed_read() {
	local t0 t1
	t0=$(date +%s.%N)
	timeout "$4" dd if="$1" of="$T_TMP/got" bs="$3" status=none ||
		fail "$5: not read in $4 s"
	t1=$(date +%s.%N)
	SECS=$("$PY" -c "print('%.2f' % ($t1 - $t0))")
	cmp "$2" "$T_TMP/got" || fail "$5: read back differs"
}

# faster SECS LIMIT WHAT: fail unless SECS < LIMIT.
faster() {
	"$PY" -c "import sys; sys.exit(not ($1 < $2))" ||
		fail "$3 took $1 s (want under $2 s)"
}

# --- 1. a full reader evicts what it fetched before ------------------------
group_init 2
for n in 0 1; do group_node "$n" --mem 128M; done
wait_states "${M[0]}" "self up"
MIN_COMMIT=2
wait_agree 30 0 1

for f in a b; do
	head -c $((16 * MiB)) /dev/urandom >"$REF/$f"
	cp "$REF/$f" "${M[1]}/$f"
done
dd if=/dev/urandom of="${M[0]}/own" bs=1M count=112 status=none ||
	fail "node 0 writing 112 MiB of its own"
echo 3 >/proc/sys/vm/drop_caches
timed_read "${M[0]}/a" "$REF/a" 1M 60 "a on node 0"
read -r free evictable cached evicted0 _ _ <<<"$(st "${M[0]}")"
log "node 0 after reading a: $free chunks free, $evictable evictable," \
	"$cached MiB fetched by readers"
[ "$free" -le 1 ] || fail "$free chunks free: the setup wants memory full"
expect_eq "$cached" 16 "MiB fetched by readers on node 0"
expect_eq "$evictable" 16 "evictable chunks on node 0 (a's fetched copies)"

timed_read "${M[0]}/b" "$REF/b" 32k 120 "b on node 0, 32 KiB at a time"
read -r free evictable cached evicted1 enospc stalls <<<"$(st "${M[0]}")"
log "b read in $SECS s: $((evicted1 - evicted0)) pieces evicted, $stalls" \
	"loads found memory full"
# 2 s a read before: 512 reads.
faster "$SECS" 10 "reading b (16 MiB) on a full node"
[ "$((evicted1 - evicted0))" -ge 8 ] ||
	fail "$((evicted1 - evicted0)) pieces evicted to read b: a's copies stayed"
[ "$stalls" -ge 1 ] || fail "no load counted as finding memory full"
admin "${M[0]}" metrics >"$T_TMP/m0.prom" || fail "metrics on node 0"
expect_metric "$T_TMP/m0.prom" reftfs_evicted_chunks_total -ge 8
expect_metric "$T_TMP/m0.prom" reftfs_chunks_evictable -ge 1
expect_metric "$T_TMP/m0.prom" reftfs_fetch_stalls_total -ge 1

# --- 2. a writer evicts copies, in any checkpoint, rather than ENOSPC ------
rm "${M[0]}/own"
for c in c1 c2 c3; do
	mkdir "${M[1]}/$c"
	head -c $((16 * MiB)) /dev/urandom >"$REF/$c"
	cp "$REF/$c" "${M[1]}/$c/x"
done
echo 3 >/proc/sys/vm/drop_caches
for f in a b c1/x c2/x c3/x; do
	cmp "$REF/${f%/x}" "${M[0]}/$f" || fail "$f read on node 0 differs"
done
read -r free evictable cached _ _ _ <<<"$(st "${M[0]}")"
log "node 0 after reading 80 MiB of node 1's: $cached MiB fetched by" \
	"readers, $evictable evictable, $free free"
[ "$cached" -ge 64 ] || fail "only $cached MiB kept of 80 MiB read"
[ "$evictable" -ge 64 ] || fail "$evictable chunks evictable with $cached MiB fetched"
mkdir "${M[0]}/c4"
# c1 and c2 are outside --keep 2 now, c3 inside: copies go from all.
out=$(run_py fill.py "${M[0]}/c4/own" $((112 * MiB)) 31 --expect-ok) ||
	fail "node 0 writing 112 MiB with 80 MiB of fetched copies in memory: $out"
read -r free evictable cached evicted2 enospc _ <<<"$(st "${M[0]}")"
log "node 0 wrote 112 MiB: $cached MiB still fetched, $((evicted2 - evicted1))" \
	"pieces evicted, enospc $enospc"
expect_eq "$enospc" 0 "ENOSPC count on node 0"
[ "$cached" -le 16 ] || fail "$cached MiB of fetched copies kept past a writer's need"
# Evicted copies are fetched again (checked against their CRC32C).
for f in a c1/x c3/x; do
	cmp "$REF/${f%/x}" "${M[0]}/$f" || fail "$f read again on node 0 differs"
done

# Node 0 fills the rest with its own data: every copy goes, then ENOSPC.
# A read then cannot keep its copy: it is served without, at once (each
# waited --enospc-wait first).
run_py fill.py "${M[0]}/c4/more" $((64 * MiB)) 32 >/dev/null ||
	fail "node 0 filling its memory: want ENOSPC once nothing is evictable"
read -r free evictable cached _ _ _ <<<"$(st "${M[0]}")"
log "node 0 full of its own data: $free free, $evictable evictable," 	"$cached MiB fetched"
expect_eq "$cached" 0 "MiB fetched by readers on node 0 once a writer needed it"
head -c $((16 * MiB)) /dev/urandom >"$REF/e"
cp "$REF/e" "${M[1]}/e" # never read on node 0: nothing of it there
echo 3 >/proc/sys/vm/drop_caches
timed_read "${M[0]}/e" "$REF/e" 1M 120 "e on node 0, full, nothing evictable"
uncached=$(admin "${M[0]}" status --json | "$PY" -c '
import json, sys
print(json.load(sys.stdin)["counters"].get("reads_uncached", 0))')
log "e read in $SECS s with nothing evictable: $uncached reads served uncached"
# 2 s a read before (each waited --enospc-wait, then went without).
faster "$SECS" 10 "reading e (16 MiB) with nothing evictable"
[ "$uncached" -ge 1 ] || fail "no read counted as served without its copy"
for n in 0 1; do stop_daemon "${M[$n]}" "${PID[$n]}"; done
rm -rf "$T_TMP"/state* # a new group below, not this one's log

# --- 3. decoded copies of a lost node's files are a cache too --------------
group_init 3
for n in 0 1 2; do group_node "$n" --mem 128M --protect xor; done
wait_states "${M[0]}" "self up up"
MIN_COMMIT=2
wait_agree 30 0 1 2
mkdir "${M[2]}/d"
for f in x y; do
	head -c $((16 * MiB)) /dev/urandom >"$REF/$f"
	cp "$REF/$f" "${M[2]}/d/$f"
done
admin "${M[2]}" protect --wait >/dev/null || fail "protect --wait on node 2"
kill_daemon "${M[2]}" "${PID[2]}"
wait_states "${M[0]}" "self up dead" 30
read -r free _ _ _ _ _ <<<"$(st "${M[0]}")"
# Room for x and 2 MiB: y must make room by evicting x's decoded copies.
own=$((free - 18))
[ "$own" -ge 16 ] || fail "only $free chunks free on node 0 for the setup"
dd if=/dev/urandom of="${M[0]}/own" bs=1M count=$own status=none ||
	fail "node 0 writing $own MiB of its own"
echo 3 >/proc/sys/vm/drop_caches
timed_read "${M[0]}/d/x" "$REF/x" 1M 120 "x on node 0, decoded"
read -r free evictable cached evicted0 _ _ <<<"$(st "${M[0]}")"
log "node 0 after decoding x: $free chunks free, $evictable evictable," \
	"$cached MiB fetched"
[ "$evictable" -ge 14 ] || fail "x's decoded copies are not evictable ($evictable)"
timed_read "${M[0]}/d/y" "$REF/y" 1M 120 "y on node 0, decoded"
read -r free evictable cached evicted1 _ _ <<<"$(st "${M[0]}")"
log "y decoded in $SECS s: $((evicted1 - evicted0)) pieces evicted"
# 2 s a piece or more before.
faster "$SECS" 10 "decoding y (16 MiB) on a full survivor"
[ "$((evicted1 - evicted0))" -ge 8 ] ||
	fail "$((evicted1 - evicted0)) pieces evicted to read y: x's copies stayed"
cmp "$REF/x" "${M[0]}/d/x" || fail "x decoded again on node 0 differs"
# own cannot be protected with node 2 gone: a stop would leave it, say
# so and exit 1 (258-group-lost tests that).
rm "${M[0]}/own"
for n in 0 1; do stop_daemon "${M[$n]}" "${PID[$n]}"; done
log "PASS"
