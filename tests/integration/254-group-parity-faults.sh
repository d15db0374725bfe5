#!/usr/bin/env bash
# Faults under erasure-coded protection (issue 9): three daemons with
# --protect xor.  A byte of a parity row is corrupted in its holder's real
# memory (through /proc/PID/mem): verify's scrub finds the stripe, and once
# the data it protects must be decoded from it the read fails with EIO,
# never other bytes.  A byte of an owner's own piece is corrupted: other
# nodes still read the right bytes, decoded from the stripe.  And a full
# arena: pieces of a checkpoint that was written back and fell out of the
# --keep window leave the parity rows, so that their memory goes and new
# checkpoints fit.  And small files: 900 of 4 KiB cost rows of 4 KiB, not a
# chunk each; the members of a node stopped gracefully leave the rows when
# its files are removed while it is down; and a lost node's read back
# decoded.
. "$(dirname "$0")/lib.sh"
need_fuse
need_root "poke_mem.py writes a daemon's memory"

group_init 3
REF=$(new_dir ref)
MEM=64
start_node() { group_node "$1" --mem ${MEM}M --protect xor --chunk-size 1M; }
start_node 0
start_node 1
start_node 2
wait_states "${M[0]}" "self up up"
MIN_COMMIT=2
wait_agree 30 0 1 2

# Node 0 writes a, node 1 writes b: the first files of checkpoint c, so
# piece i of each is its node's chunk i (stripe 0 holds a's piece 0 and
# b's piece 0, its row on node 2).
mkdir "${M[0]}/c"
head -c 3145728 /dev/urandom >"$REF/a"
head -c 3145728 /dev/urandom >"$REF/b"
cp "$REF/a" "${M[0]}/c/a"
cp "$REF/b" "${M[1]}/c/b"
for n in 0 1 2; do
	admin "${M[$n]}" protect --wait >/dev/null || fail "protect --wait on node $n"
done
place() { # MNT PATH PIECE -> "stripe data parity"
	admin "$1" placement "$2" --json | "$PY" -c '
import json, sys
p = json.load(sys.stdin)[int(sys.argv[1])]
print(p["stripe"], p["stripe_data_nodes"], p["stripe_parity_nodes"])' "$3"
}
expect_eq "$(place "${M[0]}" c/a 0)" "0 0,1 2" "placement of a's piece 0"
expect_eq "$(place "${M[0]}" c/b 0)" "0 0,1 2" "placement of b's piece 0"
expect_eq "$(place "${M[0]}" c/a 1)" "1 0,2 1" "placement of a's piece 1"

# --- all good: the scrub matches every row -------------------------------
out=$(admin "${M[0]}" verify /c) || fail "verify /c: exit $?: $out"
grep -q "parity: 6 rows matched against their stripes' members, 0 bad, 0 not checked" \
	<<<"$out" || fail "scrub of /c: $out"
log "verify: $out"

# --- a byte of stripe 0's row (a0 xor b0, on node 2) goes bad -------------
"$PY" -c '
import sys
a = open(sys.argv[1], "rb").read(64)
b = open(sys.argv[2], "rb").read(64)
open(sys.argv[3], "wb").write(bytes(x ^ y for x, y in zip(a, b)))' \
	"$REF/a" "$REF/b" "$REF/row0"
"$PY" "$SRCDIR/tests/integration/poke_mem.py" "${PID[2]}" $((MEM << 20)) \
	1048576 "$REF/row0" 0 >/dev/null || fail "corrupting stripe 0's row on node 2"
if out=$(admin "${M[1]}" verify /c 2>&1); then
	fail "verify passed with stripe 0's row corrupted: $out"
fi
grep -q "parity bad" <<<"$out" || fail "no parity bad row: $out"
grep -q "verify: 2 parity rows do not match" <<<"$out" || fail "verify's error: $out"
js=$(admin "${M[0]}" verify /c/a --json 2>/dev/null) &&
	fail "verify /c/a passed with stripe 0's row corrupted: $js"
got=$("$PY" -c '
import json, sys
v = json.load(sys.stdin)
bad = [c for c in v["copies"] if c["result"] == "parity bad"]
print(v["parity_rows_checked"], v["parity_rows_bad"], bad[0]["first_bad_piece"])' <<<"$js")
expect_eq "$got" "3 1 0" "scrub of /c/a: rows checked, bad, first bad stripe"
log "a corrupted parity row: verify names stripe 0"

# --- a byte of a's piece 1 goes bad on its owner --------------------------
"$PY" "$SRCDIR/tests/integration/poke_mem.py" "${PID[0]}" $((MEM << 20)) \
	1048576 "$REF/a" 1048576 >/dev/null || fail "corrupting a's piece 1 on node 0"
# Node 2 never read a: its piece 1 from the owner fails its checksum, and
# is decoded from stripe 1 (node 1's row, nodes 0 and 2 its members).
cmp "$REF/a" "${M[2]}/c/a" || fail "a read on node 2 with its owner's piece 1 corrupted"
admin "${M[2]}" metrics >"$T_TMP/m2.prom" || fail "metrics on node 2"
expect_metric "$T_TMP/m2.prom" reftfs_crc_errors_total -ge 1
got=$(admin "${M[2]}" group --json | "$PY" -c '
import json, sys
print(json.load(sys.stdin)["group"]["parity_rebuilt_pieces"])')
[ "$got" -ge 1 ] || fail "node 2 decoded $got pieces"
log "a corrupted piece on its owner: node 2 reads the right bytes, decoded"

# --- b's owner is lost: b's piece 0 needs the bad row --------------------
kill_daemon "${M[1]}" "${PID[1]}"
wait_states "${M[0]}" "self dead up" 30
"$PY" - "${M[0]}/c/b" "$REF/b" <<'PYEOF'
import errno, os, sys
path, ref = sys.argv[1], open(sys.argv[2], "rb").read()
fd = os.open(path, os.O_RDONLY)
try:
    try:
        got = os.pread(fd, 4096, 0)
        sys.exit("b's piece 0 read %d bytes (%s) from a corrupt row" %
                 (len(got), "right" if got == ref[:4096] else "WRONG"))
    except OSError as e:
        if e.errno != errno.EIO:
            sys.exit("b's piece 0: %s, want EIO" % e)
    rest = os.pread(fd, len(ref), 1 << 20)
    if rest != ref[1 << 20:]:
        sys.exit("b's pieces 1 and 2 differ")
finally:
    os.close(fd)
PYEOF
[ $? = 0 ] || fail "reads of b with its owner dead"
log "owner of b lost: its piece 0 (bad row) reads EIO, pieces 1-2 read right"
stop_daemon "${M[0]}" "${PID[0]}"
stop_daemon "${M[2]}" "${PID[2]}"
rm -rf "$T_TMP"/state*	# a new group below, not this one's log

# --- eviction: written-back pieces leave the rows -------------------------
group_init 3
P=$(new_dir persist)
start_node() {
	group_node "$1" --mem 64M --protect xor --persist "$P" --keep 1 \
		--persist-every 0
}
start_node 0
start_node 1
start_node 2
wait_states "${M[0]}" "self up up"
wait_agree 30 0 1 2
# Per node and checkpoint: 12 MiB of data and 6 MiB of parity rows for the
# others; five checkpoints need 90 MiB of a 64 MiB arena unless evicted
# pieces give their rows back.
SIZES=12582912
for c in 1 2 3 4 5; do
	mkdir "${M[0]}/ck$c"
	write_ranks "ck$c"
	for n in 0 1 2; do
		admin "${M[$n]}" protect --wait >/dev/null || fail "protect --wait on node $n, ck$c"
		admin "${M[$n]}" flush --wait >/dev/null || fail "flush --wait on node $n, ck$c"
	done
done
check_ranks "after five checkpoints" ck5 0 1 2
rows=$(admin "${M[0]}" group --json | "$PY" -c '
import json, sys
print(json.load(sys.stdin)["group"]["parity_rows"])')
[ "$rows" -le 12 ] || fail "node 0 holds $rows parity rows after eviction, want <= 12"
log "five checkpoints in a 64 MiB arena: evicted pieces left the rows ($rows rows held)"

# --- small files: rows as small as their members --------------------------
# A new group: 300 files of 4 KiB per node, about 450 stripes of two 4 KiB
# members.  Rows a chunk each would need 150 MiB per node, more than the
# 64 MiB arena; rows as long as their members take 4 KiB.
for n in 0 1 2; do pid_alive "${PID[$n]}" && stop_daemon "${M[$n]}" "${PID[$n]}"; done
rm -rf "$T_TMP"/state*
group_init 3
start_node() { group_node "$1" --mem 64M --protect xor "${@:2}"; }
start_node 0
start_node 1 --protect-bw 1M --stop-wait 0
start_node 2
wait_states "${M[0]}" "self up up"
wait_agree 30 0 1 2
mkdir "${M[0]}/ck"
for n in 0 1 2; do
	"$PY" - "${M[$n]}/ck" "$REF/small$n" "$n" <<'PYEOF' || fail "small files on node $n"
import os, random, sys
d, ref, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(ref, exist_ok=True)
rnd = random.Random(n)
for i in range(300):
    data = rnd.randbytes(4096)
    with open(f"{d}/n{n}-{i}", "wb") as f:
        f.write(data)
    with open(f"{ref}/n{n}-{i}", "wb") as f:
        f.write(data)
PYEOF
done
for n in 0 1 2; do
	admin "${M[$n]}" protect --wait >/dev/null || fail "protect --wait of the small files on node $n"
done
for n in 0 1 2; do
	pb=$(admin "${M[$n]}" group --json | "$PY" -c '
import json, sys
g = json.load(sys.stdin)["group"]
print(g["parity_bytes"], g["parity_rows"])')
	log "node $n: parity rows for 900 small files: ${pb#* } rows, ${pb% *} bytes"
	[ "${pb% *}" -le $((2 << 20)) ] || fail "node $n holds ${pb% *} bytes of parity for 900 files of 4 KiB"
	[ "${pb#* }" -ge 100 ] || fail "node $n holds ${pb#* } rows for 900 small files"
done
# Node 1 stopped gracefully with a file left unprotected (--stop-wait 0,
# its protection paced): its memory goes with it and the group is told
# (LOST_STOP), so its members in the rows of nodes 0 and 2 are orphans at
# once, and when its files are removed while it is down the holders take
# those members out themselves, before it comes back; otherwise each
# stripe would count bytes nobody has, and the other member could not be
# decoded.
head -c 3145728 /dev/urandom >"${M[1]}/ck/late"
kill -TERM "${PID[1]}"
rc=0
wait "${PID[1]}" || rc=$?
expect_eq "$rc" 1 "node 1's exit after SIGTERM with ck/late unprotected"
wait_states "${M[0]}" "self dead up" 30
for i in $(seq 10 29); do
	rm "${M[0]}/ck/n1-$i" "$REF/small1/n1-$i"
done
rm "${M[0]}/ck/late"
dropped() {
	local n sum=0 v
	for n in 0 2; do
		v=$(admin "${M[$n]}" metrics | awk '$1 == "reftfs_parity_orphans_dropped_total" { print $2 }')
		sum=$((sum + ${v:-0}))
	done
	echo "$sum"
}
# 20 small members, and those of ck/late folded before the stop.
for i in $(seq 1 200); do
	[ "$(dropped)" -ge 20 ] && break
	sleep 0.1
done
[ "$(dropped)" -ge 20 ] ||
	fail "node 1 stopped, 20 of its files removed: the holders took $(dropped) of their members out of the rows, want 20 or more"
log "node 1 stopped, 21 of its files removed meanwhile: $(dropped) members taken out of the rows by their holders"
group_node 1 --mem 64M --protect xor
admin "${M[1]}" rebuild --wait >/dev/null || fail "rebuild --wait on node 1 after its stop"
for n in 0 1 2; do
	admin "${M[$n]}" protect --wait >/dev/null || fail "protect --wait on node $n after node 1's return"
done
# Node 1 lost with its memory: its small files read decoded on node 0.
kill_daemon "${M[1]}" "${PID[1]}"
wait_states "${M[0]}" "self dead up" 30
for i in 0 77 150 299; do
	cmp "$REF/small1/n1-$i" "${M[0]}/ck/n1-$i" ||
		fail "node 1's small file n1-$i differs on node 0 once node 1 is lost"
done
log "900 small files protected with small rows; a lost node's read back decoded"
stop_daemon "${M[0]}" "${PID[0]}"
stop_daemon "${M[2]}" "${PID[2]}"
