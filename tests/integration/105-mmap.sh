#!/usr/bin/env bash
# Shared and private mmap on files opened O_RDWR, coherent with read(2),
# write(2), truncate and fallocate(2) through other descriptors and
# processes, and with what is written back: tests/integration/mmap_fuzz.py,
# random operations
# checked against a model after each one (seed printed; MMAP_SEED
# replays).  It runs on a local directory first, so that a failure on the
# mount is reftfs's and not the exerciser's.  Then data written through
# mappings must survive an unmount (write-back) and a remount.
#
# The daemon must also take the fast path whenever it can: with libfuse
# 3.16+ on kernel 6.6+ every open is direct I/O and mmap still works; with
# an older libfuse, opens go through the page cache.  Both builds run this
# test (tools/test.sh: build/ and build-fuse-system/).
. "$(dirname "$0")/lib.sh"
need_fuse

MNT=$(new_dir mnt)
PERSIST=$(new_dir persist)
LOCAL=$(new_dir local)
OPS=${MMAP_OPS:-$(by_tier 150 300 3000)}

log "the exerciser on a local directory"
run_py mmap_fuzz.py "$LOCAL" --procs 2 --ops "$OPS" --fallocate >"$T_TMP/local.out" ||
	{ cat "$T_TMP/local.out" >&2; fail "mmap_fuzz fails on a local directory"; }

start_daemon "$MNT" --mem 256M --persist "$PERSIST"

want="opens through the page cache"
if version_ge "${RFT_LIBFUSE_VERSION:?}" 3.16 && version_ge "$KERNEL_VERSION" 6.6; then
	want="every open direct I/O, mmap allowed"
fi
wait_log "fuse: libfuse" || fail "the daemon did not log its FUSE capabilities"
grep "fuse: libfuse" "$DAEMON_LOG" | sed 's/^/    /' >&2
grep -qF "$want" "$DAEMON_LOG" ||
	fail "libfuse $RFT_LIBFUSE_VERSION on kernel $KERNEL_VERSION: want '$want'"

log "one process, then four on distinct files, on the mount"
run_py mmap_fuzz.py "$MNT" --procs 1 --ops $((OPS * 2)) --fallocate ||
	fail "mmap_fuzz, one process"
run_py mmap_fuzz.py "$MNT" --procs 4 --ops "$OPS" --fallocate --manifest "$T_TMP/manifest.json" ||
	fail "mmap_fuzz, four processes"
daemon_alive "$DAEMON_PID"


# A file mapped and written, then closed before the munmap: the stores after
# close reach the file when the mapping goes (munmap writes them back).
"$PY" - "$MNT/late" <<'PYEOF'
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, 3 << 20)
m = mmap.mmap(fd, 3 << 20, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
os.close(fd)
m[:] = bytes(range(256)) * ((3 << 20) // 256)
m.close()
PYEOF
want_sum=$("$PY" -c 'import hashlib; print(hashlib.sha256(bytes(range(256)) * ((3 << 20) // 256)).hexdigest())')
expect_eq "$(sha256sum <"$MNT/late" | cut -d' ' -f1)" "$want_sum" "stores after close, read back"

stop_daemon "$MNT" "$DAEMON_PID"
check_manifest "$T_TMP/manifest.json" "$PERSIST" || fail "the persist dir after unmount"
expect_eq "$(sha256sum <"$PERSIST/late" | cut -d' ' -f1)" "$want_sum" "stores after close, in the persist dir"

start_daemon "$MNT" --mem 256M --persist "$PERSIST"
check_manifest "$T_TMP/manifest.json" "$MNT" || fail "the mount after a remount"
expect_eq "$(sha256sum <"$MNT/late" | cut -d' ' -f1)" "$want_sum" "stores after close, after the remount"
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
