#!/usr/bin/env bash
# reftfs demo, end to end on this machine:
#   install + build (tools/setup.sh), mount reftfs with a persist dir,
#   torch.save a model into it, show reftfs-admin status / ls, flush --wait,
#   unmount (write-back), mount again on the same persist dir, show that the
#   file is there but not yet in RAM, torch.load it and compare every tensor
#   with a reference copy kept outside the mount; then save step_200, flush,
#   SIGKILL the daemon, mount again and load step_200.  Then a sharding
#   group on this machine: three daemons on loopback ports with
#   --protect xor (each node holds XOR parity for the other two) and a
#   shared persist dir; two checkpoints, each rank saving on its own node,
#   seen going writing -> protected -> persisted (reftfs-admin checkpoints,
#   wait --protected); one daemon SIGKILLed (its memory gone), the newest
#   wholly protected checkpoint named by the survivors and the lost rank's
#   file loaded from it on another node, decoded from the others' pieces
#   and parity; a replacement started with its id that decodes its files
#   back, and the checkpoint loaded byte-identical there.  Prints PASS or
#   FAIL.
# Everything lives in a temp dir and is cleaned up, whatever happens.
#
# usage: bash tools/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

bash tools/setup.sh
export PATH="$ROOT/build/fs:$ROOT/build/tools:$PATH"
PY=/usr/bin/python3   # Debian's python3-torch
[ -c /dev/fuse ] || { echo "demo: /dev/fuse is missing: FUSE is not available here" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/reftfs-demo.XXXXXX")
WORK=$(cd "$WORK" && pwd -P)
MNT=$WORK/ckpt         # what training code writes to
PERSIST=$WORK/nfs      # stands in for shared storage (NFS, Lustre, ...)
REF=$WORK/ref          # reference copies, outside reftfs
REF2=$WORK/ref200
REFG=$WORK/refgroup     # the group's step_300
REFG4=$WORK/refgroup400 # ... and step_400
PERSISTG=$WORK/nfsgroup # the group's shared persist dir
G=("$WORK/node0" "$WORK/node1" "$WORK/node2") # the group's mounts
mkdir -p "$MNT" "$PERSIST" "$REF" "$REF2" "$REFG" "$REFG4" "$PERSISTG" "${G[@]}"

daemon_pid() { # daemon_pid [MNT]: the reftfsd serving MNT (default $MNT)
	local p arg m=${1:-$MNT}
	for p in /proc/[0-9]*; do
		[ "$(cat "$p/comm" 2>/dev/null)" = reftfsd ] || continue
		while IFS= read -r -d '' arg; do
			[ "$arg" = "$m" ] && { echo "${p#/proc/}"; return 0; }
		done <"$p/cmdline" 2>/dev/null
	done
	return 0
}

wait_exit() { # wait_exit PID SECONDS
	for _ in $(seq 1 $(($2 * 10))); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.1
	done
	return 1
}

cleanup() {
	local rc=$? pid m
	set +e
	for m in "$MNT" "${G[@]}"; do
		pid=$(daemon_pid "$m")
		if grep -q " $m " /proc/mounts; then
			fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m"
		fi
		if [ -n "$pid" ] && ! wait_exit "$pid" 30; then
			kill -KILL "$pid"
		fi
		grep -q " $m " /proc/mounts && fusermount3 -uz "$m"
	done
	grep -q " $WORK/" /proc/mounts || rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
[ -t 1 ] || step() { printf '\n== %s\n' "$*"; }
run() {
	printf '$ %s\n' "$*"
	"$@"
}

step "1. mount reftfs on $MNT (1 GiB of RAM, write-back to $PERSIST)"
run reftfsd "$MNT" --mem 1G --persist "$PERSIST"
run grep " $MNT " /proc/mounts

step "2. training code saves a checkpoint, unchanged: torch.save(..., '$MNT/step_100/model.pt')"
run "$PY" tools/demo_torch.py save "$MNT/step_100/model.pt" "$REF"

step "3. what reftfs holds"
run reftfs-admin -m "$MNT" status
run reftfs-admin -m "$MNT" ls /step_100

step "4. push everything to the persist dir now (the background write-back may have done it already)"
run reftfs-admin -m "$MNT" flush --wait
run ls -l "$PERSIST/step_100"

step "5. unmount: the daemon writes back what is left and exits"
pid=$(daemon_pid)
run fusermount3 -u "$MNT"
wait_exit "$pid" 120 || { echo "reftfsd did not exit after unmount" >&2; exit 1; }
echo "reftfsd (pid $pid) exited"

step "6. mount again on the same persist dir: the checkpoint is there, read lazily"
run reftfsd "$MNT" --mem 1G --persist "$PERSIST"
run reftfs-admin -m "$MNT" status
run reftfs-admin -m "$MNT" ls /step_100

step "7. torch.load it back and compare every tensor with the reference"
result=PASS
run "$PY" tools/demo_torch.py load "$MNT/step_100/model.pt" "$REF" || result=FAIL
run reftfs-admin -m "$MNT" ls /step_100

step "8. the job saves its next checkpoint, step_200, and it is written back"
run "$PY" tools/demo_torch.py save "$MNT/step_200/model.pt" "$REF2"
run reftfs-admin -m "$MNT" flush --wait

step "9. the node fails: reftfsd is killed (SIGKILL), no unmount, no clean shutdown"
pid=$(daemon_pid)
run kill -KILL "$pid"
wait_exit "$pid" 30 || { echo "reftfsd survived SIGKILL" >&2; exit 1; }
run fusermount3 -uz "$MNT"   # clear the dead mount, as an operator or the job's launcher would

step "10. a new reftfsd mounts the same persist dir; the job resumes from step_200"
run reftfsd "$MNT" --mem 1G --persist "$PERSIST"
run reftfs-admin -m "$MNT" status
run "$PY" tools/demo_torch.py load "$MNT/step_200/model.pt" "$REF2" || result=FAIL

step "11. unmount"
pid=$(daemon_pid)
run fusermount3 -u "$MNT"
wait_exit "$pid" 120 || result=FAIL

# --- a sharding group on this machine ----------------------------------
# Three free loopback ports (each daemon's raft takes the port above too).
read -r P0 P1 P2 <<<"$("$PY" "$ROOT/tools/free_ports.py" 3)"
PEERS=127.0.0.1:$P0,127.0.0.1:$P1,127.0.0.1:$P2
SECRET=$WORK/secret
(umask 077 && head -c 48 /dev/urandom | base64 -w0 >"$SECRET")
start_node() { # start_node N
	run reftfsd "${G[$1]}" --node "$1" --peers "$PEERS" --secret-file "$SECRET" \
		--state-dir "$WORK/state$1" --protect xor --mem 1G --dead-after 2 \
		--persist "$PERSISTG" --persist-every 0
}

step "12. a sharding group: three daemons on loopback ports, each node's files protected by XOR parity on the others (--protect xor: half the memory of a copy), written back to a shared persist dir when asked (--persist-every 0)"
for n in 0 1 2; do start_node "$n" & done
wait

step "13. each rank saves checkpoint step_300 on its own node; every node sees the whole tree; the job waits for it to be protected, then writes it back"
for n in 0 1 2; do
	run "$PY" tools/demo_torch.py save "${G[$n]}/step_300/rank$n.pt" "$REFG" "$n"
done
run reftfs-admin -m "${G[0]}" wait "${G[0]}/step_300" --protected
run reftfs-admin -m "${G[0]}" checkpoints
for n in 0 1 2; do run reftfs-admin -m "${G[$n]}" flush --wait; done
run reftfs-admin -m "${G[0]}" checkpoints

step "14. the next checkpoint, step_400: writing (a file still open), then protected; step_300 stays the newest persisted"
for n in 0 1 2; do
	run "$PY" tools/demo_torch.py save "${G[$n]}/step_400/rank$n.pt" "$REFG4" "$n"
done
exec 3>"${G[0]}/step_400/trainer_state.json"
echo '{"step": 400}' >&3
run reftfs-admin -m "${G[0]}" checkpoints
exec 3>&-
run reftfs-admin -m "${G[0]}" wait "${G[0]}/step_400" --protected
run reftfs-admin -m "${G[0]}" checkpoints
run reftfs-admin -m "${G[0]}" group
run reftfs-admin -m "${G[0]}" ls /step_400
# Each piece of rank 1's file: its stripe, the other data node, the parity node.
echo "$ reftfs-admin -m ${G[0]} placement /step_400/rank1.pt | head -4"
reftfs-admin -m "${G[0]}" placement /step_400/rank1.pt | sed -n 1,4p

step "15. node 1 fails: its daemon is SIGKILLed, its memory is gone; the job resumes from the newest wholly protected checkpoint, rank 1's file loaded on node 2, decoded"
pid=$(daemon_pid "${G[1]}")
run kill -KILL "$pid"
wait_exit "$pid" 30 || { echo "reftfsd survived SIGKILL" >&2; exit 1; }
run fusermount3 -uz "${G[1]}"
sleep 3   # --dead-after 2: the others declare it dead
run reftfs-admin -m "${G[2]}" checkpoints
CKPT=$(reftfs-admin -m "${G[2]}" checkpoints --json |
	"$PY" -c 'import json, sys; print(json.load(sys.stdin)["newest_protected"])')
echo "newest wholly protected checkpoint: $CKPT"
[ "$CKPT" = step_400 ] || result=FAIL
# Node 2 never read it: each piece is decoded from node 0's piece and the row.
run "$PY" tools/demo_torch.py load "${G[2]}/$CKPT/rank1.pt" "$REFG4" || result=FAIL

step "16. a replacement starts with node 1's id and empty memory, and decodes its files back from its peers"
start_node 1
run reftfs-admin -m "${G[1]}" rebuild --wait
run reftfs-admin -m "${G[1]}" ls /step_400

step "17. the lost rank's checkpoints, loaded on its new node and on another, are byte-identical"
run "$PY" tools/demo_torch.py load "${G[1]}/step_400/rank1.pt" "$REFG4" || result=FAIL
run "$PY" tools/demo_torch.py load "${G[2]}/step_400/rank1.pt" "$REFG4" || result=FAIL
run "$PY" tools/demo_torch.py load "${G[1]}/step_300/rank1.pt" "$REFG" || result=FAIL
run reftfs-admin -m "${G[1]}" protect --wait || result=FAIL
# Every piece's checksums where it is, every parity row against its stripe.
run reftfs-admin -m "${G[1]}" verify /step_400 || result=FAIL

step "18. unmount the group"
for n in 0 1 2; do
	pid=$(daemon_pid "${G[$n]}")
	run fusermount3 -u "${G[$n]}"
	wait_exit "$pid" 120 || result=FAIL
done

echo
if [ "$result" = PASS ]; then
	echo "PASS: every checkpoint came back byte-identical: after unmount and mount again, after the daemon was killed, and in the group from peers after a node was lost"
else
	echo "FAIL: the checkpoint did not come back identical (see above)"
	exit 1
fi
