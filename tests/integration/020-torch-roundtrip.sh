#!/usr/bin/env bash
# torch.save of a ~100-tensor state dict of mixed dtypes and shapes (0-d,
# empty, non-contiguous, shared storage, multi-chunk) into reftfs and into
# tmpfs: files byte-identical, torch.load gives equal tensors.  Also a
# model+optimizer checkpoint, the legacy format, and numpy save/load/mmap.
. "$(dirname "$0")/lib.sh"
need_fuse
need_torch
need_numpy

MNT=$(new_dir mnt)
tmpfs_dir shm 1G
start_daemon "$MNT" --mem 1G

run_py torch_roundtrip.py "$MNT" "$TMPFS_DIR" || fail "torch round trip failed"

# The same comparison with tools outside python.
for f in step_1/model.pt step_1/full.pt step_1/legacy.pt np/f32.npy; do
	cmp "$MNT/$f" "$TMPFS_DIR/$f" || fail "$f differs from the tmpfs copy"
done
daemon_alive "$DAEMON_PID"

# After a remount-free drop of the page cache the bytes still match (reads
# now come from the daemon, not the kernel's cache).
if is_root; then
	sync
	echo 3 >/proc/sys/vm/drop_caches
	cmp "$MNT/step_1/full.pt" "$TMPFS_DIR/step_1/full.pt" ||
		fail "full.pt differs after dropping the page cache"
fi
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
