#!/usr/bin/env bash
# Passthrough, reftfsd's default (docs/design.md, "Passthrough"): large sealed files
# opened when nothing else has them open pass through to a backing copy,
# every open of such a file passes through while one does, and writers
# passing through have their bytes taken at FLUSH, FSYNC and RELEASE.
# tests/integration/pass_fuzz.py runs random writes, mapped writes,
# truncates, hole punches, O_TRUNC rewrites, removals with a new file of
# the same name, and closes while a reader passes through, checked against a model after each one (seed printed;
# PASS_SEED replays); what it wrote must then be written back and read
# the same after a remount.  mmap_fuzz.py runs on the same mount, for
# files that writers open first (those stay direct).
#
# Where the libfuse of the build (3.16+) or the kernel (6.9+) cannot, the
# daemon must say so and serve as without the option.
. "$(dirname "$0")/lib.sh"
need_fuse
need_root "passthrough registers backing files (CAP_SYS_ADMIN)"

MNT=$(new_dir mnt)
PERSIST=$(new_dir persist)


# By default large files are written in place, into the spares their
# names' last copies left.  In suite passthrough (RFT_TEST_PASSTHROUGH=1),
# --early-copy instead: files are copied while written too (pass_fuzz's
# writes).
how=()
fuzz_how=(--in-place)
if [ "${RFT_TEST_PASSTHROUGH:-0}" = 1 ]; then
	how=(--early-copy)
	fuzz_how=()
fi
start_daemon "$MNT" --mem 512M --persist "$PERSIST" "${how[@]}"
if ! version_ge "${RFT_LIBFUSE_VERSION:?}" 3.16 || ! version_ge "$KERNEL_VERSION" 6.9; then
	log "libfuse $RFT_LIBFUSE_VERSION, kernel $KERNEL_VERSION: passthrough must be off, and say so"
	wait_log "passthrough: off" ||
		fail "passthrough without libfuse 3.16+ and kernel 6.9+: no 'passthrough: off' in the log"
	head -c 3M /dev/urandom >"$T_TMP/ref"
	cp "$T_TMP/ref" "$MNT/f"
	cmp "$T_TMP/ref" "$MNT/f" || fail "a file read back differs"
	stop_daemon "$MNT" "$DAEMON_PID"
	exit 0
fi
wait_log "passthrough: on" ||
	fail "libfuse $RFT_LIBFUSE_VERSION, kernel $KERNEL_VERSION, root: passthrough not on ($(grep passthrough "$DAEMON_LOG"))"
# Copies at seal wait for the writes to stop (test_pass has the timing).
grep -q "passthrough: on.*copied once the writes stop for 250 ms" "$DAEMON_LOG" ||
	fail "the daemon does not say that copies wait for the writes to stop: $(grep "passthrough: on" "$DAEMON_LOG")"

log "random operations while a reader passes through"
run_py pass_fuzz.py "$MNT" --files 3 --ops "${PASS_OPS:-$(by_tier 400 1000 10000)}" "${fuzz_how[@]}" \
	--manifest "$T_TMP/manifest.json" \
	--ctl-json "timeout 60 $REFTFS_ADMIN -m $MNT --json status" ||
	fail "pass_fuzz"
daemon_alive "$DAEMON_PID"

log "files that writers open first stay direct beside it"
run_py mmap_fuzz.py "$MNT" --procs 2 --ops 150 --fallocate || fail "mmap_fuzz on a passthrough mount"

admin "$MNT" flush --wait || fail "flush --wait"
stop_daemon "$MNT" "$DAEMON_PID"

log "what the writers passing through wrote, after a remount"
start_daemon "$MNT" --mem 512M --persist "$PERSIST"
check_manifest "$T_TMP/manifest.json" "$MNT" || fail "files differ after the remount"
stop_daemon "$MNT" "$DAEMON_PID"
