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
