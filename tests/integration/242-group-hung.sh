#!/usr/bin/env bash
# A hung node in a group (issue 8): node 2 is stopped (SIGSTOP) past
# --dead-after while the others go on changing the namespace and writing
# files, then woken (SIGCONT).  It must learn it was declared dead and
# serve nothing stale: the first lookups and reads it answers after it
# wakes show the group's namespace as it is now, files written meanwhile
# included, byte-identical; and files it wrote before it hung are still
# read right everywhere.
. "$(dirname "$0")/lib.sh"
need_fuse

group_init 3
REF=$(new_dir ref)
for n in 0 1 2; do group_node "$n" --mem 128M --protect replicate:2; done
wait_states "${M[0]}" "self up up"
MIN_COMMIT=2
wait_agree 30 0 1 2

mkdir "${M[0]}/d"
head -c 3000000 /dev/urandom >"$REF/before2"
cp "$REF/before2" "${M[2]}/d/before2"
echo old >"${M[0]}/d/moved"
admin "${M[2]}" protect --wait >/dev/null || fail "protect --wait on node 2"

# --- node 2 hangs ---------------------------------------------------------
kill -STOP "${PID[2]}"
wait_states "${M[0]}" "self up dead" 30
head -c 2000000 /dev/urandom >"$REF/during"
cp "$REF/during" "${M[0]}/d/during"
mv "${M[0]}/d/moved" "${M[0]}/d/moved2"
mkdir "${M[1]}/d/newdir"
log "node 2 stopped and declared dead; nodes 0 and 1 changed the namespace"

# --- it wakes: its first answers are the group's namespace as it is now ---
kill -CONT "${PID[2]}"
[ -f "${M[2]}/d/during" ] || fail "node 2, woken, does not show d/during"
[ -e "${M[2]}/d/moved" ] && fail "node 2, woken, still shows d/moved"
[ -d "${M[2]}/d/newdir" ] || fail "node 2, woken, does not show d/newdir"
cmp "$REF/during" "${M[2]}/d/during" || fail "d/during read on node 2 after it woke"
expect_eq "$(cat "${M[2]}/d/moved2")" old "d/moved2 on node 2"
for n in 0 1 2; do
	cmp "$REF/before2" "${M[$n]}/d/before2" || fail "d/before2 on node $n"
done
wait_states "${M[0]}" "self up up" 30
log "node 2 woke, rejoined, and served the namespace as it is now"

# --- a seal that could not commit goes again ------------------------------
# A node that is not the leader closes a file while both others are
# stopped: its seal cannot reach the log (close gives EIO after the log's
# 10 s).  Unless its entry waited in the leader's socket meanwhile, only
# its retry (every second, from the ticker) brings the file to the
# others once they run.
wait_agree 30 0 1 2
w=$(((LEADER + 1) % 3))
o1=$(((w + 1) % 3)) o2=$(((w + 2) % 3))
head -c 3000000 /dev/urandom >"$REF/retried"
touch "${M[$w]}/d/retried"
"$PY" - "${M[$w]}/d/retried" "$REF/retried" "${PID[$o1]}" "${PID[$o2]}" <<'PYEOF' ||
import os, signal, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
os.write(fd, open(sys.argv[2], "rb").read())
for p in sys.argv[3:]:
    os.kill(int(p), signal.SIGSTOP)
try:
    os.close(fd)
except OSError as e:
    print("close: %s (the log could not take the seal)" % e)
for p in sys.argv[3:]:
    os.kill(int(p), signal.SIGCONT)
PYEOF
	fail "the writer of d/retried"
# The seal is in the log once the others show the new size (the touch
# left 0 bytes); then its bytes, read from the writer.  Before the fix
# the retry built the seal again, found its version sent, and dropped it:
# the others showed 0 bytes for good (3 runs of 7 here).
t0=$SECONDS
for i in $(seq 1 150); do
	[ "$(stat -c %s "${M[$o1]}/d/retried")" = 3000000 ] &&
		[ "$(stat -c %s "${M[$o2]}/d/retried")" = 3000000 ] && break
	sleep 0.2
done
for n in 0 1 2; do
	expect_eq "$(stat -c %s "${M[$n]}/d/retried")" 3000000 "d/retried's size on node $n: its seal did not go again"
done
for i in $(seq 1 150); do
	cmp -s "$REF/retried" "${M[$o1]}/d/retried" &&
		cmp -s "$REF/retried" "${M[$o2]}/d/retried" && break
	sleep 0.2
done
for n in 0 1 2; do
	cmp "$REF/retried" "${M[$n]}/d/retried" || fail "d/retried on node $n"
done
log "a seal the log could not take (both peers stopped) reached them $((SECONDS - t0)) s after they ran again"
