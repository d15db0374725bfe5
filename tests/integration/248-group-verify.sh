#!/usr/bin/env bash
# reftfs-admin verify (issue 8): the CRC32C of every piece recomputed where
# it is held, on this node and on each node with a copy.  A byte of a
# replica is then really corrupted in its holder's memory (written through
# /proc/PID/mem, as a memory fault would): verify on any node must find it
# and exit 1, reads elsewhere must stay right while the owner serves them,
# and once the owner is gone a read of that piece must fail with EIO,
# never return the wrong bytes.
. "$(dirname "$0")/lib.sh"
need_fuse
need_root # writes another process's memory

MEM=96 # MiB: the arena is the daemon's one mapping of this size
group_init 3
for n in 0 1 2; do group_node "$n" --mem ${MEM}M --protect replicate:2; done
wait_states "${M[0]}" "self up up"
MIN_COMMIT=2
wait_agree 30 0 1 2

REF=$(new_dir ref)
head -c 3145728 /dev/urandom >"$REF/a"
head -c 3145728 /dev/urandom >"$REF/b"
head -c 100000 /dev/urandom >"$REF/small"
mkdir "${M[0]}/v"
cp "$REF/a" "${M[0]}/v/a"
cp "$REF/b" "${M[0]}/v/b"
cp "$REF/small" "${M[0]}/v/small"
admin "${M[0]}" protect --wait >/dev/null || fail "protect --wait on node 0"

# Who holds node 0's copies, and the node that holds none.
H=$(admin "${M[0]}" placement /v/a --json | "$PY" -c '
import json, sys
nodes = {p["nodes"] for p in json.load(sys.stdin)}
assert len(nodes) == 1, nodes
print(nodes.pop().split("+")[1])')
T=$((3 - H))
log "node 0's copies are on node $H; node $T holds none"

# group: the bytes of node 0's files node H holds, seen from both ends.
copies() { # MNT NODE FIELD
	admin "$1" group --json | "$PY" -c '
import json, sys
print([m for m in json.load(sys.stdin)["members"] if m["node"] == sys.argv[1]][0][sys.argv[2]])' "$2" "$3"
}
want=$((2 * 3145728 + 100000))
expect_eq "$(copies "${M[0]}" "$H" copies_there_bytes)" $want "node 0: node $H's copies"
expect_eq "$(copies "${M[$H]}" 0 copies_here_bytes)" $want "node $H: node 0's copies here"
expect_eq "$(copies "${M[0]}" "$T" copies_there_bytes)" 0 "node 0: node $T's copies"

# --- all good: every copy checked, exit 0 --------------------------------
out=$(admin "${M[0]}" verify /v) || fail "verify /v on node 0: exit $?: $out"
log "$out"
grep -Eq "^ +0  ok +3 +0 +0  /v/a$" <<<"$out" || fail "node 0's copy of /v/a: $out"
grep -Eq "^ +$H  ok +3 +0 +0  /v/a$" <<<"$out" || fail "node $H's copy of /v/a: $out"
grep -q "3 files: 6 copies checked, 14 pieces" <<<"$out" || fail "summary: $out"
# Asked on the node with no copy, both copies are checked where they are.
out=$(admin "${M[$T]}" verify /v/a) || fail "verify /v/a on node $T: exit $?: $out"
grep -q "1 file: 2 copies checked, 6 pieces" <<<"$out" || fail "node $T: $out"

# --- a byte of piece 1 of node H's copies of a and b goes bad ---------------
for f in a b; do
	"$PY" "$SRCDIR/tests/integration/poke_mem.py" "${PID[$H]}" \
		$((MEM << 20)) 1048576 "$REF/$f" 1048576 >/dev/null ||
		fail "corrupting node $H's copy of $f"
done
if out=$(admin "${M[0]}" verify /v 2>&1); then
	fail "verify on node 0 passed with node $H's copy corrupted: $out"
fi
grep -Eq "^ +$H  bad +3 +1 +0  /v/a$" <<<"$out" || fail "node $H's bad copy: $out"
grep -Eq "^ +0  ok +3 +0 +0  /v/a$" <<<"$out" || fail "node 0's copy: $out"
grep -Eq "^ +$H  bad +3 +1 +0  /v/b$" <<<"$out" || fail "node $H's bad copy of b: $out"
grep -q "verify: 2 bad pieces" <<<"$out" || fail "no bad-piece error: $out"
js=$(admin "${M[$H]}" verify /v/a --json 2>/dev/null) &&
	fail "verify on node $H passed with its copy corrupted: $js"
got=$(echo "$js" | "$PY" -c '
import json, sys
v = json.load(sys.stdin)
print([(c["node"], c["result"], c["first_bad_piece"]) for c in v["copies"]],
      v["pieces_bad"])')
expect_eq "$got" "[($H, 'bad', 1), (0, 'ok', None)] 1" "verify --json on node $H"
log "verify found the bad byte in node $H's copy, from node 0 and from node $H"

# Read-ahead: a read of c's first 64 KiB on node T brings the next four
# pieces (one per fetch thread) behind it, and no more; and no piece is
# fetched twice (a reader that meets read-ahead on a piece waits for it).
head -c 7340032 /dev/urandom >"$REF/c"
cp "$REF/c" "${M[0]}/c"
out0=$(copies "${M[0]}" "$T" bytes_out)
dd if="${M[$T]}/c" of=/dev/null bs=64k count=1 status=none || fail "read of c on node $T"
for i in $(seq 1 50); do
	here=$(admin "${M[$T]}" placement /c --json | "$PY" -c '
import json, sys
print(" ".join(p["here"].split()[0] for p in json.load(sys.stdin)))')
	[ "$here" = "ram ram ram ram ram peers peers" ] && break
	sleep 0.1
done
expect_eq "$here" "ram ram ram ram ram peers peers" "c's pieces on node $T after a 64 KiB read"
cmp "$REF/c" "${M[$T]}/c" || fail "c read on node $T"
sent=$(($(copies "${M[0]}" "$T" bytes_out) - out0))
[ "$sent" -ge 7340032 ] && [ "$sent" -lt $((7340032 + 524288)) ] ||
	fail "node 0 sent node $T $sent bytes for a 7 MiB file read once"

# Node T reads from the owner first: right bytes.  (It keeps what it read:
# b is left unread for what follows.)
cmp "$REF/a" "${M[$T]}/v/a" || fail "/v/a read on node $T while node 0 is up"

# --- verify --repair ------------------------------------------------------
# On the holder its copy is the owner's to put right: reported, not fixed.
js=$(admin "${M[$H]}" verify --repair /v/a --json 2>/dev/null) &&
	fail "verify --repair on node $H passed: $js"
got=$(echo "$js" | "$PY" -c '
import json, sys
c = [c for c in json.load(sys.stdin)["copies"] if c["node"] == int(sys.argv[1])][0]
print(c["result"], "/", c["repair_error"])' "$H")
expect_eq "$got" "bad / a copy held for the owner: repair it there" "verify --repair on node $H"
# A byte of the owner's own copy of small goes bad too.
"$PY" "$SRCDIR/tests/integration/poke_mem.py" "${PID[0]}" $((MEM << 20)) \
	1048576 "$REF/small" 0 >/dev/null || fail "corrupting node 0's small"
out=$(admin "${M[0]}" verify /v/small 2>&1) && fail "verify of small passed: $out"
grep -Eq "^ +0  bad +1 +1 +0  /v/small$" <<<"$out" || fail "node 0's bad small: $out"
# On the owner: node H's bad piece of a is dropped there and sent again;
# the owner's bad piece of small is read back from node H's good copy.
out=$(admin "${M[0]}" verify --repair /v/a 2>&1) || fail "verify --repair /v/a: $out"
grep -Eq "^ +$H  resending +3 +1 +0  /v/a$" <<<"$out" || fail "repair of a: $out"
out=$(admin "${M[0]}" verify --repair /v/small 2>&1) || fail "verify --repair /v/small: $out"
grep -Eq "^ +0  repaired +1 +1 +0  /v/small$" <<<"$out" || fail "repair of small: $out"
admin "${M[0]}" protect --wait >/dev/null || fail "protect --wait after the repairs"
for n in 0 "$H"; do
	out=$(admin "${M[$n]}" verify /v/a 2>&1) || fail "verify /v/a on node $n after repair: $out"
	out=$(admin "${M[$n]}" verify /v/small 2>&1) || fail "verify /v/small on node $n after repair: $out"
done
cmp "$REF/small" "${M[0]}/v/small" || fail "small read on node 0 after its repair"
log "verify --repair: node $H's copy of a sent again, node 0's small read back"

# --- the owner is lost: node H's bad piece must not be served -------------
kill_daemon "${M[0]}" "${PID[0]}"
wait_states "${M[$T]}" "$(for n in 0 1 2; do
	if [ "$n" = 0 ]; then printf dead; elif [ "$n" = "$T" ]; then printf self
	else printf up; fi; [ "$n" != 2 ] && printf ' '; done)" 30
"$PY" - "${M[$T]}/v/b" "$REF/b" "$REF/small" "${M[$T]}/v/small" <<'PYEOF' ||
import errno, os, sys
ref = open(sys.argv[2], "rb").read()
fd = os.open(sys.argv[1], os.O_RDONLY)
assert os.pread(fd, 1 << 20, 0) == ref[:1 << 20], "piece 0"
assert os.pread(fd, 1 << 20, 2 << 20) == ref[2 << 20:], "piece 2"
try:
    data = os.pread(fd, 1 << 20, 1 << 20)
except OSError as e:
    assert e.errno == errno.EIO, e
else:
    sys.exit("piece 1 read %d bytes, %s" %
             (len(data), "right" if data == ref[1 << 20:2 << 20] else "WRONG"))
os.close(fd)
assert open(sys.argv[4], "rb").read() == open(sys.argv[3], "rb").read(), "small"
PYEOF
	fail "reads of /v/b on node $T with the owner gone"
cmp "$REF/a" "${M[$T]}/v/a" || fail "/v/a (read before) on node $T after the loss"
n=$(admin "${M[$T]}" metrics | awk '/^reftfs_crc_errors_total /{print $2}')
[ "${n:-0}" -ge 1 ] || fail "node $T counted no checksum error (got '$n')"
log "owner lost: the bad piece gave EIO on node $T, the good ones their bytes"
