#!/usr/bin/env bash
# Concurrent writers on several nodes over the same files, against a model
# of the group's rule (issue 30: whole file, last close wins in the log's
# order; a writer that cannot be sealed gets EIO, logged).  Three daemons
# with --protect replicate:2 (WRITERS_FUZZ_PROTECT=xor: the run meson
# calls 256-group-writers+xor) and --mem 96M; each node writes a 28 MiB
# ballast file the others read, so that fetched copies fill the arenas
# and must give way to the writers.  group_writers.py runs rounds where 1
# to 3 nodes write each of a few files at once (pwrite without O_TRUNC,
# overlapping ranges, across pieces and past EOF, ftruncate, truncate(2),
# now and then O_TRUNC, in free rounds an fsync midway: a seal of its own
# under --sync protect), some rounds with a barrier between the writes
# and the closes, readers of the other files meanwhile.  After each
# round's quiet point (every writer closed, protect --wait on each node)
# every node must read the same bytes of every file, one of the
# candidates the rule allows; no node may show a file as being written;
# verify must exit 0 on every node; a writer's EIO must be in its
# daemon's log.  Twice a node is SIGKILLed, in the middle of a round or
# after one: the others see it dead and agree, a replacement with its id
# agrees before and after its rebuild, and the rounds go on.
#
# The seed is printed first; WRITERS_FUZZ_SEED=... replays it (the same
# operations; their timing is the machine's).  WRITERS_FUZZ_ROUNDS and
# WRITERS_FUZZ_KILLS (by RFT_TIER: quick 6 and 1, full 12 and 2, soak 400
# and 12), WRITERS_FUZZ_FILES (6), WRITERS_FUZZ_MEM (96M),
# WRITERS_FUZZ_BALLAST (28, MiB; 0: no memory pressure),
# WRITERS_FUZZ_WRITERS (3: writers per file and round, at most) and
# WRITERS_FUZZ_SERIAL=1 (the writers of a round one after another: a
# check of the model itself) change the run.  `tools/test.sh --soak` runs
# it with replicate:2, xor and none.
. "$(dirname "$0")/lib.sh"
need_fuse

SEED=${WRITERS_FUZZ_SEED:-$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')}
log "seed $SEED (WRITERS_FUZZ_SEED=$SEED replays it)"
PROTECT=${WRITERS_FUZZ_PROTECT:-replicate:2}
ROUNDS=${WRITERS_FUZZ_ROUNDS:-$(by_tier 6 12 400)}
KILLS=${WRITERS_FUZZ_KILLS:-$(by_tier 1 2 12)}
FILES=${WRITERS_FUZZ_FILES:-6}
MEM=${WRITERS_FUZZ_MEM:-96M}
WRITERS=${WRITERS_FUZZ_WRITERS:-3} # at most, per file and round
BALLAST=${WRITERS_FUZZ_BALLAST:-28} # MiB each node writes, the others read
SERIAL=()
[ "${WRITERS_FUZZ_SERIAL:-0}" = 1 ] && SERIAL=(--serial)

group_init 3
STATE=$(new_dir model)
LOGS=()
start_node() {
	group_node "$1" --mem "$MEM" --protect "$PROTECT"
	LOGS[$1]=$DAEMON_LOG
}
writers() { # writers ARGS...: group_writers.py on the group; its status
	local logs
	logs=$(IFS=,; echo "${LOGS[*]}")
	timeout 900 "$PY" "$SRCDIR/tests/integration/group_writers.py" \
		"$(IFS=,; echo "${M[*]}")" --state "$STATE" --seed "$SEED" \
		--pids "$(IFS=,; echo "${PID[*]}")" --logs "$logs" \
		--rounds "$ROUNDS" --kills "$KILLS" --files "$FILES" \
		--writers "$WRITERS" --ballast "$BALLAST" \
		--protect "$PROTECT" "${SERIAL[@]}" "$@" 2>&1 |
		tee "$T_TMP/writers.out" >&2
}
# up_states NODE DEAD: what node NODE's group shows with node DEAD dead
# ("" for none).
up_states() {
	local n s=""
	for n in 0 1 2; do
		if [ "$n" = "$1" ]; then s+=" self"
		elif [ "$n" = "$2" ]; then s+=" dead"
		else s+=" up"; fi
	done
	echo "${s# }"
}

for n in 0 1 2; do start_node "$n"; done
wait_states "${M[0]}" "self up up"
MIN_COMMIT=2
wait_agree 30 0 1 2
log "$ROUNDS rounds, $FILES files, $KILLS kills, --protect $PROTECT --mem $MEM"

start=$SECONDS
while :; do
	rc=0
	writers || rc=$?
	[ "$rc" = 0 ] && break
	[ "$rc" = 3 ] || fail "group_writers.py exited $rc (seed $SEED)"
	# It SIGKILLed node K (last line "killed K"): reap and unmount it,
	# the others must see it dead and agree, then a replacement.
	k=$(tail -n1 "$T_TMP/writers.out" | sed -n 's/^killed \([0-9]\)$/\1/p')
	[ -n "$k" ] || fail "group_writers.py exited 3 without naming a node"
	kill_daemon "${M[$k]}" "${PID[$k]}"
	for n in 0 1 2; do
		[ "$n" = "$k" ] ||
			wait_states "${M[$n]}" "$(up_states "$n" "$k")" 30
	done
	writers --check || fail "after the kill of node $k (seed $SEED)"
	start_node "$k"
	for n in 0 1 2; do
		wait_states "${M[$n]}" "$(up_states "$n" "")" 30
	done
	writers --check --final ||
		fail "with the replacement of node $k (seed $SEED)"
done
log "seed $SEED: $ROUNDS rounds in $((SECONDS - start)) s: every node" \
	"agreed with the model at every quiet point"
