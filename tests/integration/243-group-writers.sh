#!/usr/bin/env bash
# Two nodes writing one file at once (issue 30): the file ends with one
# version on every node, pieces and checksums included, whatever the
# interleaving; a writer that loses gets an error the daemon's log
# explains; verify agrees on every node.  The rule (docs/design.md,
# "Several writers"): whole file, the last seal in the log wins; each
# node's writers change a version of its own until their last close.
#
# Three daemons, --protect xor.  Node 0 writes a file of 10 MiB; then, in
# each trial, nodes 1 and 2 open it without O_TRUNC at once and pwrite
# every byte of it in 64 KiB blocks ("A" on node 1, "B" on node 2), so
# each needs pieces of node 0's version for its first block of each
# piece.  After both close: every node reads the same bytes, all "A" or
# all "B" (a writer whose close succeeded), the placement's checksums are
# the same on every node, and verify passes on every node.  Before the
# fix one node kept its own bytes in 4 of 8 trials and verify saw
# nothing.  Then the same with O_TRUNC (nothing of the old version
# needed: the last close wins, no errors), and with a writer that changes
# only part of the file.
. "$(dirname "$0")/lib.sh"
need_fuse

group_init 3
for n in 0 1 2; do group_node "$n" --mem 256M --protect xor; done
wait_states "${M[0]}" "self up up"
MIN_COMMIT=2
wait_agree 30 0 1 2
TRIALS=${WRITERS_TRIALS:-$(by_tier 3 6 30)}
SIZE=$((10 << 20))

# writer MOUNT PATH LETTER BLOCK FLAGS FIRST COUNT: open PATH (FLAGS:
# trunc or plain), pwrite COUNT blocks of BLOCK bytes of LETTER from
# block FIRST, close; print "ok" or the errors, one line.
writer() {
	"$PY" - "$@" <<'PYEOF'
import os, sys
path, letter, bs, flags, first, count = sys.argv[1:7]
bs, first, count = int(bs), int(first), int(count)
fd = os.open(path, os.O_WRONLY | (os.O_TRUNC if flags == "trunc" else 0))
buf = letter.encode() * bs
errs = []
for i in range(first, first + count):
    try:
        os.pwrite(fd, buf, i * bs)
    except OSError as e:
        errs.append("pwrite %d: %s" % (i, e.strerror))
try:
    os.close(fd)
except OSError as e:
    errs.append("close: %s" % e.strerror)
print("ok" if not errs else "%d errors, first %s, last %s" %
      (len(errs), errs[0], errs[-1]))
PYEOF
}

# sums PATH: the md5 of PATH on every node, page cache dropped first.
sums() {
	echo 3 >/proc/sys/vm/drop_caches
	for n in 0 1 2; do md5sum <"${M[$n]}$1" | cut -c1-32; done | tr '\n' ' '
}

# placement_crcs PATH: each node's list of piece checksums of PATH.
placement_crcs() {
	for n in 0 1 2; do
		admin "${M[$n]}" placement "$1" --json | "$PY" -c '
import json, sys
j = json.load(sys.stdin)
print(",".join(p["crc32c"] for p in (j["pieces"] if isinstance(j, dict) else j)))'
	done
}

# race TRIAL FLAGS BLOCK FIRST1 COUNT1 FIRST2 COUNT2: one trial; sets
# WON to the letter of the version every node shows.
race() {
	local t=$1 flags=$2 bs=$3 f="/w$1" out1 out2 a b z s
	head -c $SIZE /dev/zero | tr '\0' Z >"${M[0]}$f"
	writer "${M[1]}$f" A "$bs" "$flags" "$4" "$5" >"$T_TMP/w1" &
	local p1=$!
	writer "${M[2]}$f" B "$bs" "$flags" "$6" "$7" >"$T_TMP/w2" &
	local p2=$!
	wait "$p1" "$p2" || fail "trial $t: a writer failed to run"
	out1=$(cat "$T_TMP/w1") out2=$(cat "$T_TMP/w2")
	read -r a b z <<<"$(sums "$f")"
	[ "$a" = "$b" ] && [ "$b" = "$z" ] ||
		fail "trial $t ($flags): the nodes read different bytes:" \
			"$a $b $z (node 1: $out1; node 2: $out2)"
	s=$(placement_crcs "$f" | sort -u | wc -l)
	[ "$s" = 1 ] || fail "trial $t: the nodes record different checksums:" \
		"$(placement_crcs "$f")"
	# The version they agree on is a writer's: its blocks over node 0's
	# Z (A, B), or over the other writer's version when its first write
	# came after the other's seal (AB: both, whoever sealed last).
	WON=""
	for L in AB A B; do
		[ "$a" = "$(expected "$L" "$bs" "$flags" "$4" "$5" "$6" "$7" |
			md5sum | cut -c1-32)" ] && WON=$L
	done
	[ -n "$WON" ] || fail "trial $t: the version every node shows is" \
		"no writer's (node 1: $out1; node 2: $out2)"
	# The winner's close succeeded.
	case $WON in
	A) [ "$out1" = ok ] || fail "trial $t: node 1's version won but its writer got: $out1" ;;
	B) [ "$out2" = ok ] || fail "trial $t: node 2's version won but its writer got: $out2" ;;
	AB) [ "$out1" = ok ] || [ "$out2" = ok ] ||
		fail "trial $t: both writers failed ($out1; $out2), yet both versions show" ;;
	esac
	for n in 0 1 2; do
		out=$(admin "${M[$n]}" verify "$f" 2>&1) ||
			fail "trial $t: verify $f on node $n: $out"
	done
	log "trial $t ($flags, blocks of $bs): every node shows $WON's version;" \
		"node 1: $out1; node 2: $out2"
}

# expected LETTERS BLOCK FLAGS FIRST1 COUNT1 FIRST2 COUNT2: the bytes of
# the version with each of LETTERS' writes, in that order, over node 0's.
expected() {
	"$PY" - "$@" "$SIZE" <<'PYEOF'
import sys
letter, bs, flags, f1, c1, f2, c2, size = sys.argv[1:9]
bs, size = int(bs), int(size)
data = bytearray(b"" if flags == "trunc" else b"Z" * size)
for l in letter:
    first, count = (int(f1), int(c1)) if l == "A" else (int(f2), int(c2))
    end = (first + count) * bs
    if len(data) < end:
        data.extend(b"\0" * (end - len(data)))
    data[first * bs:end] = l.encode() * (count * bs)
sys.stdout.buffer.write(bytes(data))
PYEOF
}

errs=0
for t in $(seq 1 "$TRIALS"); do
	race "$t" plain 65536 0 160 0 160
	grep -q "errors" "$T_TMP/w1" "$T_TMP/w2" && errs=$((errs + 1))
done
# A writer that lost with errors: its node says why.
if [ "$errs" -gt 0 ]; then
	grep -h "could not be sealed\|cannot be read" "$T_TMP"/daemon.*.log |
		head -n 2 | sed 's/^/    /' >&2
	grep -q "this node's changes could not be sealed" "$T_TMP"/daemon.*.log ||
		fail "$errs trials where a writer got errors, and no daemon said why"
fi
for t in $(seq 1 3); do
	race "t$t" trunc 1048576 0 10 0 10
	for w in w1 w2; do
		[ "$(cat "$T_TMP/$w")" = ok ] ||
			fail "trial t$t: O_TRUNC writers need nothing of the old version, but $w got: $(cat "$T_TMP/$w")"
	done
done
# Node 1 changes the first half, node 2 the second: whichever wins, the
# other half is node 0's.
race p1 plain 65536 0 80 80 80
log "two writers on one file end with one version everywhere ($errs of $TRIALS trials with a losing writer's errors, each logged)"
