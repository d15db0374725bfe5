#!/usr/bin/env bash
# reftfs demo, end to end on this machine:
#   install + build (tools/setup.sh), mount reftfs with a persist dir,
#   torch.save a model into it, show reftfs-admin status / ls, flush --wait,
#   unmount (write-back), mount again on the same persist dir, show that the
#   file is there but not yet in RAM, torch.load it and compare every tensor
#   with a reference copy kept outside the mount; then save step_200, flush,
#   SIGKILL the daemon, mount again and load step_200.  Prints PASS or FAIL.
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
mkdir -p "$MNT" "$PERSIST" "$REF" "$REF2"

daemon_pid() { # the reftfsd serving $MNT
	local p arg
	for p in /proc/[0-9]*; do
		[ "$(cat "$p/comm" 2>/dev/null)" = reftfsd ] || continue
		while IFS= read -r -d '' arg; do
			[ "$arg" = "$MNT" ] && { echo "${p#/proc/}"; return 0; }
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
	local rc=$? pid
	set +e
	pid=$(daemon_pid)
	if grep -q " $MNT " /proc/mounts; then
		fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT"
	fi
	if [ -n "$pid" ] && ! wait_exit "$pid" 30; then
		kill -KILL "$pid"
	fi
	grep -q " $MNT " /proc/mounts && fusermount3 -uz "$MNT"
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

echo
if [ "$result" = PASS ]; then
	echo "PASS: both checkpoints came back byte-identical: after unmount and mount again, and after the daemon was killed"
else
	echo "FAIL: the checkpoint did not come back identical (see above)"
	exit 1
fi
