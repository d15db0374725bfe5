#!/usr/bin/env bash
# Persist in a group (issue 8): three daemons share one persist dir.  Each
# writes back the files it owns, under its own lock and staging dir; a
# writer's fsync returns once its file is there (--sync persist); name
# changes are mirrored once, by the node that made them (a rename or a
# removal that overtakes the owner's write-back ends with the copy under
# its new name, or gone, all the same); a lost node's files read back on
# the others from the persist dir (no --protect); and the whole group
# stopped and started again on its state dirs reads every file back.
. "$(dirname "$0")/lib.sh"
need_fuse

group_init 3
REF=$(new_dir ref)
P=$(new_dir persist)
start_node() { group_node "$1" --mem 128M --persist "$P" --persist-every 0 --sync persist; }

for n in 0 1 2; do start_node "$n"; done
wait_states "${M[0]}" "self up up"
MIN_COMMIT=2
wait_agree 30 0 1 2

SIZES="0 100 1048593 5242880"
mkdir "${M[0]}/ckpt"
write_ranks ckpt
for n in 0 1 2; do
	admin "${M[$n]}" flush --wait >/dev/null || fail "flush --wait on node $n"
done
for n in 0 1 2; do
	for s in $SIZES; do
		cmp "$REF/rank$n.$s" "$P/ckpt/rank$n.$s" ||
			fail "persist dir: ckpt/rank$n.$s is not what node $n wrote"
	done
	[ -e "$P/.reftfs-lock.node$n" ] || fail "no lock file of node $n in $P"
done
[ -e "$P/.reftfs-lock" ] && fail "a group node took the single-node lock"
log "each node wrote back its own files into the shared persist dir"

# --- name changes are mirrored once, by the node that made them ---------
mv "${M[2]}/ckpt/rank0.100" "${M[2]}/ckpt/renamed.100"
mv "$REF/rank0.100" "$REF/renamed.100"
rm "${M[1]}/ckpt/rank2.0"
rm "$REF/rank2.0"
mkdir "${M[0]}/ckpt/sub"
for n in 0 1 2; do
	admin "${M[$n]}" flush --wait >/dev/null || fail "flush --wait on node $n"
done
[ -e "$P/ckpt/rank0.100" ] && fail "persist dir: rank0.100 still there after rename on node 2"
cmp "$REF/renamed.100" "$P/ckpt/renamed.100" || fail "persist dir: renamed.100"
[ -e "$P/ckpt/rank2.0" ] && fail "persist dir: rank2.0 still there after unlink on node 1"
[ -d "$P/ckpt/sub" ] || fail "persist dir: no ckpt/sub"
log "rename, unlink and mkdir mirrored into the persist dir"

# --- a rename by another node racing the owner's write-back ---------------
# Node 2 renames node 1's checkpoint dir (rank 0 renaming the staging dir
# of every rank's files, as HF's Trainer does) while node 1 writes its files
# back.  Node 2 mirrors the rename when it applies it; a copy node 1 put in
# under the old name after that, before node 1 applied the rename, is found
# there by node 1 and written again under the new name.  Likewise for
# node 1's files that node 2 removes: no copy stays.
RACES=${RACES:-6}
for i in $(seq 1 "$RACES"); do
	mkdir "${M[1]}/stage.$i"
	for f in $(seq 1 12); do
		head -c $((4096 * f + i)) /dev/urandom >"$REF/race.$i.$f"
		cp "$REF/race.$i.$f" "${M[1]}/stage.$i/f$f"
	done
	mkdir "${M[1]}/gone.$i"
	for f in $(seq 1 6); do
		head -c $((8192 * f)) /dev/urandom >"${M[1]}/gone.$i/f$f"
	done
	admin "${M[1]}" flush --wait >/dev/null &
	flush_pid=$!
	sleep "0.0$((RANDOM % 10))"
	mv "${M[2]}/stage.$i" "${M[2]}/done.$i"
	rm -r "${M[2]}/gone.$i"
	wait "$flush_pid" || fail "flush --wait on node 1 (race $i)"
done
for n in 0 1 2; do
	admin "${M[$n]}" flush --wait >/dev/null || fail "flush --wait on node $n"
done
race_settled() {
	local i f
	for i in $(seq 1 "$RACES"); do
		[ -e "$P/stage.$i" ] || [ -e "$P/gone.$i" ] && return 1
		for f in $(seq 1 12); do
			cmp -s "$REF/race.$i.$f" "$P/done.$i/f$f" || return 1
			[ -e "$P/done.$i/.f$f.rftsum" ] || return 1
		done
	done
}
for t in $(seq 1 150); do
	race_settled && break
	sleep 0.1
	# A copy written again is queued: flush it through.
	[ $((t % 10)) -eq 0 ] && admin "${M[1]}" flush --wait >/dev/null
done
if ! race_settled; then
	# What is left where (sed reads all: no SIGPIPE under pipefail).
	find "$P" -path '*stage.*' -o -path '*gone.*' | sed -n 1,60p >&2
	fail "persist dir: node 1's copies are not all under done.N/ (and none under gone.N/) after node 2's renames and removals"
fi
for i in $(seq 1 "$RACES"); do
	rm -r "${M[0]}/done.$i"
	rm "$REF"/race.$i.*
done
log "renames and removals by node 2 racing node 1's write-back: every copy under its new name, none left of what was removed"

check_all() {
	local what=$1 n f
	shift
	for n in "$@"; do
		for f in "$REF"/*; do
			cmp "$f" "${M[$n]}/ckpt/${f##*/}" ||
				fail "$what: ${f##*/} differs on node $n"
		done
	done
}

# --- fsync on node 1 means persisted (--sync persist) ---------------------
# --persist-every 0: nothing else writes back.  Each file is in the shared
# persist dir the moment its fsync returned, .metadata with its writer
# still open; node 1 then dies (below) with it open.
mkdir -p "$T_TMP/dcp"
fsync_writer "${M[1]}/ckpt" "$T_TMP/dcp" "$P/ckpt"
cp "$T_TMP/dcp"/* "$REF/"

# --- node 1 lost: the others read its files from the persist dir --------
kill_daemon "${M[1]}" "${PID[1]}"
kill "$WRITER" 2>/dev/null || true
wait "$WRITER" 2>/dev/null || true
wait_states "${M[0]}" "self dead up" 30
check_all "node 1 dead" 0 2
for n in 0 2; do
	cmp "$T_TMP/dcp/.metadata" "${M[$n]}/ckpt/.metadata" ||
		fail "ckpt/.metadata (open on node 1 when it died) differs on node $n"
done
log "node 1 SIGKILLed (.metadata open, fsynced): its files read back on nodes 0 and 2 from the persist dir"

# --- a replacement: its own files from the persist dir too ---------------
start_node 1
check_all "replacement node 1" 1 0 2
log "replacement node 1 reads every file back"

# --- a node stopped with a file not written back yet ---------------------
# --persist-every 0: nothing is written back by itself.  Its stop writes
# the file back while the group still runs, so the others learn it is
# there (PERSIST) and read it from the persist dir: not lost.
head -c 300000 /dev/urandom >"$REF/late"
cp "$REF/late" "${M[1]}/ckpt/late"
stop_daemon "${M[1]}" "${PID[1]}"
wait_states "${M[0]}" "self dead up" 30
cmp "$REF/late" "$P/ckpt/late" || fail "persist dir: ckpt/late after node 1's stop"
for n in 0 2; do
	cmp "$REF/late" "${M[$n]}/ckpt/late" ||
		fail "ckpt/late on node $n after node 1's stop"
	st=$(admin "${M[$n]}" ls /ckpt/late --json | "$PY" -c '
import json, sys
print(json.load(sys.stdin)[0]["state"])')
	expect_eq "$st" persisted "ckpt/late on node $n after node 1's stop"
done
start_node 1
log "node 1 stopped with ckpt/late in memory only: written back at its stop, read on the others"

# --- the whole group stopped and started again on its state dirs ---------
for n in 0 1 2; do stop_daemon "${M[$n]}" "${PID[$n]}"; done
for n in 0 1 2; do start_node "$n"; done
wait_states "${M[0]}" "self up up"
check_all "group restarted" 0 1 2
log "the group restarted on its state dirs reads every file back from the persist dir"
