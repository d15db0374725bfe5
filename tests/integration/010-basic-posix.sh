#!/usr/bin/env bash
# POSIX operations frameworks rely on: create/O_TRUNC/O_APPEND, sequential
# and random pwrite with holes, truncate, rename (replace, NOREPLACE,
# EXCHANGE), unlink/rmdir/rmtree, symlink, hard link, chmod/utimens,
# ownership, statfs = --mem, mmap and numpy memmap reads, fsync, sparse
# truncate to 100 GiB, the ctimes a rename changes.  The checks themselves
# are in posix_check.py.
. "$(dirname "$0")/lib.sh"
need_fuse
need_numpy

MNT=$(new_dir mnt)
MEM=$((512 << 20))
CHUNK=$((1 << 20))
opts=()
if is_root; then
	opts=(-o allow_other,default_permissions)
	chmod 0711 "$T_TMP" # other users must reach the mount point
fi
start_daemon "$MNT" --mem 512M --chunk-size 1M "${opts[@]}"

run_py posix_check.py "$MNT" "$MEM" "$CHUNK" || fail "POSIX checks failed"
daemon_alive "$DAEMON_PID"

# Same checks with 4 MiB chunks (chunk-boundary arithmetic differs).
stop_daemon "$MNT" "$DAEMON_PID"
start_daemon "$MNT" --mem 512M --chunk-size 4M "${opts[@]}"
run_py posix_check.py "$MNT" "$MEM" $((4 << 20)) || fail "POSIX checks failed (4M chunks)"
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
