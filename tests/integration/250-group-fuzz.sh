#!/usr/bin/env bash
# Random operations on a group against a model (issue 8): three daemons
# with --protect replicate:2 (GROUP_FUZZ_PROTECT=xor: parity across the
# three instead, the run meson calls 250-group-fuzz+xor); group_fuzz.py
# creates, rewrites, patches, truncates, renames, unlinks files and
# directories from random nodes and checks every node against its model
# as it goes; then a node is SIGKILLed
# (its memory gone): the other two still agree with the model; a
# replacement with its id and empty memory agrees too, before and after its
# rebuild, and the random operations go on on all three.  The seed is
# printed; GROUP_FUZZ_SEED=... replays it.
. "$(dirname "$0")/lib.sh"
need_fuse

group_init 3
STATE=$T_TMP/model.json
OPS=${GROUP_FUZZ_OPS:-$(by_tier 60 150 1500)}
PROTECT=${GROUP_FUZZ_PROTECT:-replicate:2}
start_node() { group_node "$1" --mem 512M --protect "$PROTECT"; }
fuzz() { # fuzz MOUNTS ARGS...
	local mounts=$1
	shift
	"$PY" "$SRCDIR/tests/integration/group_fuzz.py" "$mounts" \
		--state "$STATE" "$@" >&2 || fail "group_fuzz.py $* failed"
}
ALL=${M[0]},${M[1]},${M[2]}

for n in 0 1 2; do start_node "$n"; done
wait_states "${M[0]}" "self up up"
MIN_COMMIT=2
wait_agree 30 0 1 2

fuzz "$ALL" --ops "$OPS"
for n in 0 1 2; do
	admin "${M[$n]}" protect --wait >/dev/null || fail "protect --wait on node $n"
done
log "$OPS random operations from all nodes; every file protected ($PROTECT)"

kill_daemon "${M[1]}" "${PID[1]}"
wait_states "${M[0]}" "self dead up" 30
fuzz "${M[0]},${M[2]}" --check-only
log "node 1 SIGKILLed: nodes 0 and 2 agree with the model"

start_node 1
fuzz "$ALL" --check-only
admin "${M[1]}" rebuild --wait >/dev/null || fail "rebuild --wait on node 1"
fuzz "$ALL" --check-only
log "replacement node 1: every node agrees with the model, before and after its rebuild"

fuzz "$ALL" --ops "$OPS"
for n in 0 1 2; do
	admin "${M[$n]}" protect --wait >/dev/null || fail "protect --wait on node $n"
done
log "$OPS more random operations after the replacement; every file protected"
