#!/usr/bin/env bash
# What reftfs saves a training job (issue 29), side by side in one run: a
# DDP training loop (tests/integration/train_ddp.py: an MLP of LAYERS
# layers of HIDDEN x HIDDEN with Adam, CPU, gloo, three ranks started as
# torchrun would), checkpointing every EVERY steps, each rank its own file
# (model and optimizer state), fsynced, then a tracker per rank.  Each
# configuration trains STEPS steps, loses node 1 (its daemon and the job
# are SIGKILLed, as a machine's loss ends a job), starts again (a
# replacement daemon with node 1's id) and resumes the job from the newest
# checkpoint every tracker names, for RESUME steps:
#   - none: no checkpoints (the iteration time that everything else costs
#     against);
#   - shared: straight to a directory standing in for shared storage, each
#     rank's saves and loads paced to RATE MB/s (its share of the shared
#     file system's bandwidth when every node saves at once: 100 GB/s
#     over 400 nodes is 250 MB/s); the job's restart reads from it;
#   - reftfs: a 3-node group on loopback, one node per rank, --protect
#     replicate:2, xor and rs:2+1, --sync protect (fsync returns once the
#     file is protected), write-back every checkpoint to a persist dir on
#     this machine's disk (not paced: its cost shows in the iteration
#     time, not in the saves).
# It reports per configuration: the median step time and its overhead
# against none (steps without a save), the blocking save (torch.save and
# fsync, then the barrier), the time from the loss to the first step of
# the resumed job (replacement started, ranks started, checkpoint loaded),
# where the lost rank's bytes came from (node 1's counters: copies fetched
# from peers, decoded, read from the persist dir), and Gemini's time lost
# per failure (t_save + interval / 2 + t_recovery) against the checkpoint
# interval, for failure rates of one per 1, 6 and 24 hours per job.  Writes
# the table, training_bench.json and training_bench.png (time lost against
# checkpoint interval, reftfs beside shared storage alone) to OUT.
#
# usage: tests/bench/run_training_bench.sh [OUT]
#        env: HIDDEN (2048) LAYERS (8) STEPS (15) EVERY (5) RESUME (5)
#        RATE (250, MB/s) SCHEMES ("replicate:2 xor rs:2+1"), KEEP (set:
#        the work dir, logs included, is kept).  Root.
set -euo pipefail

SRCDIR=$(cd "$(dirname "$0")/../.." && pwd)
: "${BUILDDIR:=$SRCDIR/build}"
REFTFSD=$BUILDDIR/fs/reftfsd
ADMIN=$BUILDDIR/tools/reftfs-admin
PY=/usr/bin/python3
TRAIN=$SRCDIR/tests/integration/train_ddp.py
OUT=$(mkdir -p "${1:-.}" && cd "${1:-.}" && pwd)
HIDDEN=${HIDDEN:-2048}
LAYERS=${LAYERS:-8}
STEPS=${STEPS:-15}
EVERY=${EVERY:-5}
RESUME=${RESUME:-5}
RATE=${RATE:-250}
SCHEMES=${SCHEMES:-replicate:2 xor rs:2+1}
[ -x "$REFTFSD" ] || { echo "reftfsd not built: $REFTFSD" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root (FUSE mounts, apt-get)" >&2; exit 1; }
"$PY" -c 'import torch' || { echo "needs python3-torch" >&2; exit 1; }
"$PY" -c 'import matplotlib' 2>/dev/null ||
	{ apt-get install -y -q --no-install-recommends python3-matplotlib >/dev/null; }
# One checkpoint of a rank: parameters and Adam's two moments.
CKPT=$((3 * LAYERS * (HIDDEN * HIDDEN + HIDDEN) * 4))
# Room for every checkpoint of the run (write-back to the persist dir may
# lag behind the saves, and until then nothing can be evicted), their
# copies or parity for the others, and what a restart brings back.
MEM=$((CKPT * ((STEPS + RESUME) / EVERY + 1) * 2 / 1048576 + 256))M

WORK=$(mktemp -d /var/tmp/reftfs-tbench.XXXXXX)
MOUNTS=()
JOB=()
cleanup() {
	local rc=$? m
	set +e
	kill -KILL "${JOB[@]}" 2>/dev/null
	for m in "${MOUNTS[@]}"; do
		grep -q " $m " /proc/mounts && { fusermount3 -u "$m" 2>/dev/null || umount -l "$m"; }
	done
	sleep 1
	pkill -KILL -f "reftfsd $WORK/" 2>/dev/null
	if [ "$rc" != 0 ]; then
		for m in "$WORK"/*.out "$WORK/daemons.log"; do
			[ -s "$m" ] && { echo "--- $m (last 20 lines):" >&2; tail -20 "$m" >&2; }
		done
	fi
	if [ -n "${KEEP:-}" ]; then
		echo "kept: $WORK" >&2
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

ports() { "$PY" "$SRCDIR/tools/free_ports.py" "$1"; }
SECRET=$WORK/secret
(umask 077 && head -c 48 /dev/urandom | base64 -w0 >"$SECRET")

# node NAME I SCHEME: start node I of group NAME (ports in P[]).
node() {
	local name=$1 i=$2 scheme=$3
	"$REFTFSD" "$WORK/$name$i" --node "$i" \
		--peers "127.0.0.1:${P[0]},127.0.0.1:${P[1]},127.0.0.1:${P[2]}" \
		--secret-file "$SECRET" --state-dir "$WORK/state-$name$i" \
		--protect "$scheme" --mem "$MEM" --prefault \
		--persist "$WORK/persist-$name" --dead-after 2 \
		2>>"$WORK/daemons.log"
}

# states NAME: the members' states as node 0 of group NAME sees them.
states() {
	"$ADMIN" -m "$WORK/${1}0" group --json 2>/dev/null | "$PY" -c '
import json, sys
print(" ".join(m["state"] for m in json.load(sys.stdin)["members"]))' || true
}

# until_states NAME STATES: wait (30 s at most) until node 0 sees STATES.
until_states() {
	local i
	for i in $(seq 1 300); do
		[ "$(states "$1")" = "$2" ] && return 0
		sleep 0.1
	done
	echo "group $1: '$(states "$1")', want '$2'" >&2
	return 1
}

# job TAG DIR0 DIR1 DIR2 [train_ddp.py options...]: the three ranks, in
# the background (pids in JOB[]).
job() {
	local tag=$1 port r
	local dirs=("$2" "$3" "$4")
	shift 4
	port=$(ports 1)
	JOB=()
	for r in 0 1 2; do
		MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=3 \
			"$PY" "$TRAIN" --dir "${dirs[$r]}" --log "$WORK/$tag.log" \
			--hidden "$HIDDEN" --layers "$LAYERS" "$@" \
			>>"$WORK/$tag.out" 2>&1 &
		JOB+=($!)
	done
}

job_wait() {
	local p
	for p in "${JOB[@]}"; do wait "$p"; done
	JOB=()
}

echo "== training benchmark: 3 ranks, MLP ${LAYERS}x${HIDDEN} (a checkpoint of $((CKPT >> 20)) MiB per rank), $STEPS steps, a save every $EVERY, then node 1 lost and $RESUME steps resumed; shared storage paced to $RATE MB/s per node; $(nproc) CPUs, $(uname -r)"
RESULTS=()

# --- none ---------------------------------------------------------------------
mkdir -p "$WORK/none"
job none "$WORK/none" "$WORK/none" "$WORK/none" --steps "$STEPS"
job_wait
RESULTS+=("none|$WORK/none.log|")
echo "none: done"

# --- shared storage alone -----------------------------------------------------
mkdir -p "$WORK/shared/0" "$WORK/shared/1" "$WORK/shared/2"
job shared "$WORK/shared/0" "$WORK/shared/1" "$WORK/shared/2" \
	--steps "$STEPS" --every "$EVERY" --throttle "$RATE" --step-sleep 0
job_wait
sync
echo 3 >/proc/sys/vm/drop_caches # the restarted job reads from storage
t=$(date +%s.%N)
job shared2 "$WORK/shared/0" "$WORK/shared/1" "$WORK/shared/2" \
	--steps $((STEPS + RESUME)) --every "$EVERY" --throttle "$RATE" --resume
job_wait
RESULTS+=("shared|$WORK/shared.log|$WORK/shared2.log|$t|")
echo "shared: done"

# --- reftfs groups -----------------------------------------------------------------
k=0
for scheme in $SCHEMES; do
	k=$((k + 1))
	name=g$k
	read -r -a P <<<"$(ports 3)"
	mkdir -p "$WORK/persist-$name"
	for i in 0 1 2; do
		mkdir -p "$WORK/$name$i"
		MOUNTS+=("$WORK/$name$i")
		node "$name" "$i" "$scheme" &
	done
	wait
	until_states "$name" "self up up"
	mkdir "$WORK/${name}0/job"
	job "$name" "$WORK/${name}0/job" "$WORK/${name}1/job" "$WORK/${name}2/job" \
		--steps "$STEPS" --every "$EVERY"
	job_wait
	# Node 1 lost: its daemon killed, its mount gone.
	t=$(date +%s.%N)
	pkill -KILL -f "reftfsd $WORK/${name}1 " || true
	sleep 0.2
	fusermount3 -uz "$WORK/${name}1" 2>/dev/null || umount -l "$WORK/${name}1"
	# The replacement, once the others see the loss.
	until_states "$name" "self dead up"
	node "$name" 1 "$scheme"
	until_states "$name" "self up up"
	job "${name}r" "$WORK/${name}0/job" "$WORK/${name}1/job" "$WORK/${name}2/job" \
		--steps $((STEPS + RESUME)) --every "$EVERY" --resume
	job_wait
	"$ADMIN" -m "$WORK/${name}1" metrics >"$WORK/$name.metrics"
	RESULTS+=("$scheme|$WORK/$name.log|$WORK/${name}r.log|$t|$WORK/$name.metrics")
	for i in 0 1 2; do
		fusermount3 -u "$WORK/$name$i" 2>/dev/null || umount -l "$WORK/$name$i"
	done
	sleep 1
	echo "$scheme: done"
done

"$PY" "$SRCDIR/tests/bench/training_report.py" "$OUT" "$EVERY" "$CKPT" "$RATE" "${RESULTS[@]}"
