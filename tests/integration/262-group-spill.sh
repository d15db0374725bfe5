#!/usr/bin/env bash
# The spill tier in a group (issue 28, item 3): with replicate:2, node 0's
# arena (24 MiB, --keep 1) holds its newest checkpoint, and the older ones
# go to its spill dir.  Its holder (node 1) is SIGKILLed and replaced: node
# 0 sends the replacement its copies again, reading the spilled pieces
# back from the spill dir (checked).  Then node 0 is SIGKILLed: every one
# of its files reads back on node 2, from node 1's copies.  Node 0 then
# starts again on its spill dir and takes its spilled pieces back.
. "$(dirname "$0")/lib.sh"
need_fuse

REF=$(new_dir ref)
group_init 3

# cmp_all N WHEN: every file of g1..g3 reads back on node N.
cmp_all() {
	local c f
	for c in 1 2 3; do
		for f in a b; do
			cmp "$REF/g$c.$f" "${M[$1]}/g$c/$f" ||
				fail "g$c/$f on node $1 $2"
		done
	done
}
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
admin "${M[0]}" metrics >"$T_TMP/metrics"
spilled=$(awk '$1 == "reftfs_spill_pieces" { print $2 }' "$T_TMP/metrics")
kill_daemon "${M[0]}" "${PID[0]}"
wait_states "${M[2]}" "dead up self" 30
cmp_all 2 "after node 0's loss"
log "replicate:2: node 0's spilled files sent again to its replaced holder; after node 0's loss every file reads back on node 2"

# Node 0 starts again on the same spill dir: after its LOST (its memory is
# gone), it takes back every piece it had spilled instead of fetching them
# from node 1, and its rebuild fetches only the rest (g3, in its memory
# only when it was killed).
group_node 0 --mem 24M --keep 1 --spill "$SG:1G" --protect replicate:2
wait_states "${M[0]}" "self up up" 30
rebuild_wait 0
admin "${M[0]}" metrics >"$T_TMP/metrics"
expect_metric "$T_TMP/metrics" reftfs_spill_found_pieces -eq "$spilled"
grep -q "spill dir $SG: $spilled pieces of 4 files taken back" "$DAEMON_LOG" ||
	fail "node 0 did not log what it took back: $(grep 'spill dir' "$DAEMON_LOG")"
rebuilt=$(admin "${M[0]}" rebuild --json | "$PY" -c '
import json, sys
print(json.load(sys.stdin)["bytes"])')
chunk=$(admin "${M[0]}" status --json | "$PY" -c '
import json, sys
print(json.load(sys.stdin)["memory"]["chunk_size_bytes"])')
# Every spilled piece is a whole chunk but the last of a file (4 files).
total=$((6 * 8 * 1048576 + 2 * (1 + 2 + 3)))
[ $((rebuilt + (spilled - 4) * chunk)) -le "$total" ] ||
	fail "node 0's rebuild fetched $rebuilt bytes, its spilled pieces too"
cmp_all 0 "after its restart"
admin "${M[0]}" protect --wait >/dev/null ||
	fail "protect --wait on node 0 after its restart"
log "node 0 restarted: $spilled spilled pieces taken back, $rebuilt bytes fetched by its rebuild, every file reads back"
for n in 0 1 2; do stop_daemon "${M[$n]}" "${PID[$n]}"; done
log "PASS"
