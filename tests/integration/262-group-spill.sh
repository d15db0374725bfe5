#!/usr/bin/env bash
# The spill tier in a group (issue 28, item 3): with replicate:2, node 0's
# arena (24 MiB, --keep 1) holds its newest checkpoint, and the older ones
# go to its spill dir.  Its holder (node 1) is SIGKILLed and replaced: node
# 0 sends the replacement its copies again, reading the spilled pieces
# back from the spill dir (checked).  Then node 0 is SIGKILLed: every one
# of its files reads back on node 2, from node 1's copies.
. "$(dirname "$0")/lib.sh"
need_fuse

REF=$(new_dir ref)
group_init 3
SG=$(new_dir spill0)
group_node 0 --mem 24M --keep 1 --spill "$SG:1G" --protect replicate:2
for n in 1 2; do group_node "$n" --mem 160M --protect replicate:2; done
wait_states "${M[0]}" "self up up" 30
for c in 1 2 3; do
	mkdir "${M[0]}/g$c"
	for f in a b; do
		head -c $((8 * 1048576 + c)) /dev/urandom >"$REF/g$c.$f"
		cp "$REF/g$c.$f" "${M[0]}/g$c/$f" || fail "g$c/$f on node 0"
	done
done
admin "${M[0]}" protect --wait >/dev/null || fail "protect --wait on node 0"
admin "${M[0]}" metrics >"$T_TMP/metrics"
expect_metric "$T_TMP/metrics" reftfs_spill_pieces -ge 8
# Node 1 holds node 0's copies (ring placement): lost and replaced.
kill_daemon "${M[1]}" "${PID[1]}"
wait_states "${M[0]}" "self dead up" 30
group_node 1 --mem 160M --protect replicate:2
wait_states "${M[0]}" "self up up" 30
rebuild_wait 1	# its LOST applied: node 0 sends its copies again
admin "${M[0]}" protect --wait >/dev/null ||
	fail "protect --wait on node 0 after its holder's replacement"
# The owner lost: its files read back from node 1's copies.
kill_daemon "${M[0]}" "${PID[0]}"
wait_states "${M[2]}" "dead up self" 30
for c in 1 2 3; do
	for f in a b; do
		cmp "$REF/g$c.$f" "${M[2]}/g$c/$f" ||
			fail "g$c/$f on node 2 after node 0's loss"
	done
done
log "replicate:2: node 0's spilled files sent again to its replaced holder; after node 0's loss every file reads back on node 2"
for n in 1 2; do stop_daemon "${M[$n]}" "${PID[$n]}"; done
log "PASS"
