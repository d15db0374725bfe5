#!/usr/bin/env bash
# Randomized differential test (issue 7): random pwrite, truncate, rename
# over, unlink, close, flush --wait, clean and lazy unmount, SIGKILL of the
# daemon, on reftfs and on a local directory as the model; after each mount
# every file must be a version the model allows (after SIGKILL: the last
# written-back one or a later one; after an unmount: the last one).  The
# driver is diff_fuzz.py (its docstring says what is checked); it prints
# its seed first and, for a failure, the trial's operations and a replay
# command.  DIFF_SEED, DIFF_ONLY, DIFF_OPS,
# DIFF_STOP: see diff_fuzz.py.  DIFF_TRIALS by RFT_TIER: quick 10,
# full 24, soak 2000 (more than fit meson's timeout: tools/test.sh
# --soak gives it the time).
. "$(dirname "$0")/lib.sh"
need_fuse
# Suites 'passthrough' and 'direct': diff_fuzz.py starts every daemon
# --no-in-place or --no-passthrough (lib.sh).
[ "${RFT_TEST_PASSTHROUGH:-0}" = 1 ] && need_passthrough

export DIFF_TRIALS=${DIFF_TRIALS:-$(by_tier 10 24 2000)}
MNT=$(new_dir mnt)
# The driver starts and stops its daemons itself (as children, on $MNT);
# registering the mount point makes lib.sh's trap unmount it and stop any
# reftfsd left on it, however the driver ends.
_T_MOUNTS+=("$MNT")

PY_TIMEOUT=${DIFF_TIMEOUT:-100000} run_py diff_fuzz.py --mnt "$MNT" \
	--work "$T_TMP" || fail "reftfs differs from the model (see above)"
log "PASS"
