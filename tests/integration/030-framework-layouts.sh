#!/usr/bin/env bash
# Megatron-LM (iter_0000100/mp_rank_00/model_optim_rng.pt + tracker file
# rewritten via temp+rename and in place), DeepSpeed (global_step100/ +
# `latest`), HF Trainer (tmp-checkpoint-N renamed to checkpoint-N,
# safetensors read through mmap, save_total_limit rmtree).  Run once on a
# RAM-only mount, once with a persist dir, where the tree must come back
# identical after unmount and mount again.
. "$(dirname "$0")/lib.sh"
need_fuse
need_torch
need_numpy

MNT=$(new_dir mnt)
start_daemon "$MNT" --mem 1G --keep 2
run_py layouts.py "$MNT" || fail "layouts on a RAM-only mount"
stop_daemon "$MNT" "$DAEMON_PID"

# With write-back running in the background while the frameworks rename
# and delete checkpoints.
PERSIST=$(new_dir persist)
start_daemon "$MNT" --mem 1G --keep 2 --persist "$PERSIST"
[ -z "$(ls -A "$MNT")" ] || fail "fresh mount on an empty persist dir is not empty: $(ls -A "$MNT")"
run_py layouts.py "$MNT" || fail "layouts on a mount with --persist"
run_py manifest.py save "$MNT" "$T_TMP/before.json"
stop_daemon "$MNT" "$DAEMON_PID"

run_py manifest.py compare "$PERSIST" "$T_TMP/before.json" --persist ||
	fail "persist dir after unmount does not hold exactly the mounted tree"
start_daemon "$MNT" --mem 1G --keep 2 --persist "$PERSIST"
run_py manifest.py compare "$MNT" "$T_TMP/before.json" ||
	fail "tree after mounting again differs from the tree at unmount"
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
