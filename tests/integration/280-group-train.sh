#!/usr/bin/env bash
# A DDP training job through a node's loss (issue 29): three ranks (CPU,
# gloo, started as torchrun would), each checkpointing every 4 steps into
# its own node of a 3-node xor group (fsync, then a tracker per rank, as
# Megatron's and DCP's writers do).  Mid-run node 1's daemon is SIGKILLed
# and the job with it; a replacement starts with node 1's id, and the job
# restarts on the same three mounts: every rank loads the newest step all
# trackers name (rank 1 from the replacement, which decodes it) and trains
# on to step 24.  The final model is that of the same stop and resume on
# local directories, on every rank.
. "$(dirname "$0")/lib.sh"
need_fuse
need_torch

STEPS=24
EVERY=4

# ranks TAG PORT DIR0 DIR1 DIR2 [train_ddp.py options...]: start the three
# ranks in the background (rank r in DIR r), each in a process group of
# its own (timeout and python: killed together), their pids in RANKS[].
ranks() {
	local tag=$1 port=$2 r
	local dirs=("$3" "$4" "$5")
	shift 5
	RANKS=()
	for r in 0 1 2; do
		MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=3 \
			setsid timeout 300 "$PY" "$HELPERS/train_ddp.py" --dir "${dirs[$r]}" \
			--out "$T_TMP/$tag.rank$r" --log "$T_TMP/$tag.log" \
			--steps "$STEPS" --every "$EVERY" "$@" \
			>>"$T_TMP/$tag.out" 2>&1 &
		RANKS+=($!)
		_T_PIDS+=($!)
	done
}

# ranks_wait TAG: every rank exited 0.
ranks_wait() {
	local p
	for p in "${RANKS[@]}"; do
		wait "$p" || fail "$1: a rank failed: $(grep -v "^  \|^Traceback" "$T_TMP/$1.out" | head -20)"
	done
}

# tracked DIR: the newest step every rank's tracker names (0: none).
tracked() {
	local r s min=
	for r in 0 1 2; do
		s=$(cat "$1/latest.rank$r" 2>/dev/null) || s=0
		[ -z "$min" ] || [ "$s" -lt "$min" ] && min=$s
	done
	echo "$min"
}

read -r P1 P2 P3 P4 <<<"$(free_ports 4)"

# --- the group: trained, node 1 lost mid-run ---------------------------------
group_init 3
for n in 0 1 2; do group_node "$n" --mem 256M --protect xor; done
wait_states "${M[0]}" "self up up" 30
mkdir "${M[0]}/job"
ranks group "$P1" "${M[0]}/job" "${M[1]}/job" "${M[2]}/job" --step-sleep 0.3
for i in $(seq 1 600); do
	[ "$(tracked "${M[0]}/job")" -ge 8 ] && break
	for p in "${RANKS[@]}"; do pid_alive "$p" || fail "a rank ended: $(tail -20 "$T_TMP/group.out")"; done
	sleep 0.1
done
[ "$(tracked "${M[0]}/job")" -ge 8 ] || fail "no checkpoint of step 8 in 60 s"
kill_daemon "${M[1]}" "${PID[1]}"
t_loss=$(date +%s.%N)
# The scheduler ends the job: its ranks are stuck on the lost node.
for p in "${RANKS[@]}"; do kill -KILL -- -"$p" 2>/dev/null || true; done
for p in "${RANKS[@]}"; do wait "$p" 2>/dev/null || true; done
resumed=$(tracked "${M[0]}/job")
log "node 1 lost with the job at step $(grep -o '"event": "step", "step": [0-9]*' "$T_TMP/group.log" | awk '{ s = $NF } END { print s }'); the trackers name step $resumed"
wait_states "${M[0]}" "self dead up" 30
group_node 1 --mem 256M --protect xor
wait_states "${M[0]}" "self up up" 30
ranks group2 "$P2" "${M[0]}/job" "${M[1]}/job" "${M[2]}/job" --resume
ranks_wait group2
t_step=$("$PY" -c '
import json, sys
print(min(e["t"] for e in map(json.loads, open(sys.argv[1]))
          if e["event"] == "step"))' "$T_TMP/group2.log")
grep -q "\"event\": \"load\", \"step\": $resumed, " "$T_TMP/group2.log" ||
	fail "the job did not resume from step $resumed: $(grep load "$T_TMP/group2.log")"
[ "$(grep -c '"event": "load"' "$T_TMP/group2.log")" = 3 ] ||
	fail "not every rank loaded its checkpoint"
log "resumed from step $resumed on every rank; $(awk -v a="$t_loss" -v b="$t_step" 'BEGIN { printf "%.1f", b - a }') s from the loss to the first step (replacement started and caught up, ranks started, checkpoint loaded)"
admin "${M[1]}" rebuild --wait >/dev/null || fail "rebuild --wait on the replacement"

# --- the same stop and resume on local directories ----------------------------
L=$(new_dir local)
mkdir -p "$L/0" "$L/1" "$L/2"
ranks local "$P3" "$L/0" "$L/1" "$L/2" --steps "$resumed"
ranks_wait local
ranks local2 "$P4" "$L/0" "$L/1" "$L/2" --resume
ranks_wait local2
for r in 0 1 2; do
	[ -s "$T_TMP/group2.rank$r" ] || fail "rank $r wrote no digest"
	cmp -s "$T_TMP/group2.rank$r" "$T_TMP/local2.rank$r" ||
		fail "rank $r: the model after the group's resume differs from the local stop and resume"
done
log "every rank's final model equals the local stop-and-resume's: $(cut -c1-16 "$T_TMP/group2.rank0")"
for n in 0 1 2; do stop_daemon "${M[$n]}" "${PID[$n]}"; done
log "PASS"
