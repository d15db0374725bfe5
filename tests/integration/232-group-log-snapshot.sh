#!/usr/bin/env bash
# The group's log compacts itself (docs/design.md, "Log snapshots"): three
# daemons on loopback; tens of thousands of namespace changes from every
# node (chmods mostly, creates, renames, hard links, removals, files
# written on each node) take the log past several snapshots; node 2 is
# SIGKILLed, more changes are made, and it starts again on its state dir:
# it must come back (its snapshot, then the leader's or the entries after
# it, as its log says) with the namespace and the bytes of every node,
# every node listing every file in the same state with the same holders
# once it is rebuilt and protected, its state dir holding raft snapshot
# files and staying small.
. "$(dirname "$0")/lib.sh"
need_fuse

group_init 3
# chmods per writer, 6 writers: past a snapshot (every 8192 entries) in
# the quick tier too, with room to spare (1000 made 8184 entries once,
# the seals and protect records being as many as the timing makes them).
CHANGES=${SNAP_CHANGES:-$(by_tier 1400 2800 20000)}
start_node() { group_node "$1" --mem 256M --protect replicate:2; }
start_node 0
start_node 1
start_node 2
wait_states "${M[0]}" "self up up"
MIN_COMMIT=2
wait_agree 30 0 1 2
log "group up: leader $LEADER"

# A tree from every node: files with bytes, hard links, symlinks.
for n in 0 1 2; do
	mkdir "${M[$n]}/n$n"
	for k in $(seq 0 19); do
		head -c $((k * 5000 + 1)) /dev/urandom >"${M[$n]}/n$n/f$k"
	done
	ln "${M[$n]}/n$n/f1" "${M[$n]}/n$n/hard"
	ln -s f2 "${M[$n]}/n$n/sym"
done

# Many cheap entries from every node at once.
churn() {
	"$PY" -c 'import os, sys
root, count, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
files = [os.path.join(root, "f%d" % k) for k in range(20)]
for i in range(count):
    os.chmod(files[i % 20], 0o600 | (i & 0o77))
    if i % 500 == 0:
        p = os.path.join(root, "t%s-%d" % (tag, i))
        open(p, "w").close()
        os.rename(p, p + ".r")
        if i % 1000 == 0:
            os.unlink(p + ".r")' "$@"
}
round() {
	local pids=() rc=0 p
	for n in "$@"; do
		churn "${M[$n]}/n$n" "$CHANGES" "a$1" & pids+=($!)
		churn "${M[$n]}/n$n" "$CHANGES" "b$1" & pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || rc=$?; done
	[ "$rc" = 0 ] || fail "a writer failed (exit $rc)"
}
t0=$(date +%s)
round 0 1 2
log "$((6 * CHANGES)) changes from three nodes in $(($(date +%s) - t0)) s," \
	"commit index $(group_log "${M[0]}" log_commit_index)"
ls "$T_TMP/state2" | grep '^snapshot-' >/dev/null ||
	fail "node 2's state dir has no raft snapshot: $(ls "$T_TMP/state2")"

# Node 2 goes; the others go on without it.
kill_daemon "${M[2]}" "${PID[2]}"
wait_states "${M[0]}" "self up dead" 30
round 0 1
mv "${M[0]}/n0/f3" "${M[0]}/n0/f3.moved"
rm "${M[1]}/n1/f4"
ln "${M[1]}/n0/f5" "${M[1]}/n1/from0"
head -c 70000 /dev/urandom >"${M[1]}/n1/late"
log "node 2 dead; $((4 * CHANGES)) changes more"

# Back on its state dir: a snapshot and the entries after it.
t0=$(date +%s%N)
start_node 2
wait_states "${M[0]}" "self up up" 30
wait_agree 30 0 1 2
log "node 2 back in $((($(date +%s%N) - t0) / 1000000)) ms"
grep -E "namespace: the log's snapshot at entry [0-9]+ restored" \
	"$DAEMON_LOG" >&2 || fail "node 2 came back without its snapshot"
"$PY" "$HELPERS/tree_manifest.py" "${M[0]}" >"$T_TMP/want"
for n in 1 2; do
	"$PY" "$HELPERS/tree_manifest.py" "${M[$n]}" >"$T_TMP/got$n" ||
		fail "tree walk on node $n"
	diff "$T_TMP/want" "$T_TMP/got$n" >&2 ||
		fail "node $n's namespace differs from node 0's"
done
# Every node says the same of every file (a restored node once showed a
# file protected that the others showed sealed): once node 2 has its
# files back and every node protected its own.
admin "${M[2]}" rebuild --wait >/dev/null || fail "rebuild --wait on node 2"
for n in 0 1 2; do
	admin "${M[$n]}" protect --wait >/dev/null ||
		fail "protect --wait on node $n"
done
states() {
	for d in n0 n1 n2; do
		admin "$1" ls "/$d" --json | "$PY" -c '
import json, sys
for f in json.load(sys.stdin):
    print(f["path"], f["state"], f["holders"])'
	done | sort
}
states "${M[0]}" >"$T_TMP/states0"
grep -q " protected " "$T_TMP/states0" ||
	fail "no file protected on node 0: $(head -3 "$T_TMP/states0")"
for n in 1 2; do
	states "${M[$n]}" >"$T_TMP/states$n"
	diff "$T_TMP/states0" "$T_TMP/states$n" >&2 ||
		fail "node $n lists other states or holders than node 0"
done
log "every node lists every file in the same state, with the same holders"
for n in 0 1 2; do
	bytes=$(du -sb "$T_TMP/state$n" | cut -f1)
	log "node $n: state dir $bytes bytes"
	[ "$bytes" -lt $((96 << 20)) ] ||
		fail "node $n's state dir holds $bytes bytes: not compacted"
done
log "node 2 restarted after $((10 * CHANGES)) changes shows the group's namespace"
