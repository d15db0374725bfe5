# shellcheck shell=bash
# tests/bench/uring.sh - sourced by the benchmark scripts after their
# cleanup trap: with --io-uring among the daemon's options (the array
# EXTRA), turn the fuse module's enable_uring on; uring_restore (called by
# the cleanup) puts the value before back.  See docs/operations.md, "FUSE
# over io_uring".
URING_PARAM=/sys/module/fuse/parameters/enable_uring
URING_WAS=""
case " ${EXTRA[*]} " in
*" --io-uring "*)
	[ -w "$URING_PARAM" ] || { echo "--io-uring: no $URING_PARAM in this kernel" >&2; exit 1; }
	URING_WAS=$(cat "$URING_PARAM")
	echo Y >"$URING_PARAM"
	;;
esac

uring_restore() {
	[ -z "${URING_WAS:-}" ] || echo "$URING_WAS" >"$URING_PARAM"
}
