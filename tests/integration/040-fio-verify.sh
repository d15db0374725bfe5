#!/usr/bin/env bash
# fio with verify=crc32c on the mount: sequential and random writes, 1 MiB
# and 4 KiB blocks, buffered and O_DIRECT, two writers at once; every block
# read back and checked (do_verify=1, verify_fatal=1).
. "$(dirname "$0")/lib.sh"
need_fuse
command -v fio >/dev/null || skip "fio not installed (apt-get install fio)"

MNT=$(new_dir mnt)
start_daemon "$MNT" --mem 1G

# run_fio NAME ARGS...: fail on any fio error; output kept in the log.
run_fio() {
	local name=$1 rc=0
	shift
	log "fio $name: $*"
	timeout 300 fio --name="$name" --directory="$MNT" --ioengine=psync \
		--verify=crc32c --do_verify=1 --verify_fatal=1 \
		--verify_dump=1 --error_dump=1 --verify_state_save=0 \
		--group_reporting \
		--output="$T_TMP/fio-$name.out" "$@" >"$T_TMP/fio-$name.err" 2>&1 ||
		rc=$?
	if [ "$rc" != 0 ]; then
		cat "$T_TMP/fio-$name.err" "$T_TMP/fio-$name.out" >&2 || true
		return "$rc"
	fi
	grep -E 'WRITE:|READ:' "$T_TMP/fio-$name.out" | sed 's/^ */    /' >&2 || true
	rm -f "$MNT/$name".*
}

run_fio seq1m --rw=write --bs=1M --size=256M --direct=0 ||
	fail "fio sequential 1M buffered"
run_fio rand4k --rw=randwrite --bs=4k --size=32M --direct=0 ||
	fail "fio random 4k buffered"
run_fio randmix --rw=randwrite --bsrange=4k-1M --size=128M --direct=0 \
	--numjobs=2 || fail "fio random 4k-1M, two writers"
run_fio overwrite --rw=randwrite --bs=64k --size=64M --direct=0 \
	--loops=2 || fail "fio random overwrite"
daemon_alive "$DAEMON_PID"

# O_DIRECT: fine if the filesystem refuses it with EINVAL at open.
rc=0
run_fio dseq1m --rw=write --bs=1M --size=256M --direct=1 || rc=$?
if [ "$rc" != 0 ]; then
	if grep -q 'Invalid argument' "$T_TMP/fio-dseq1m.err" "$T_TMP/fio-dseq1m.out" &&
		! grep -q 'verify' "$T_TMP/fio-dseq1m.err"; then
		log "O_DIRECT refused with EINVAL: direct runs skipped"
		rm -f "$MNT"/dseq1m.*
	else
		fail "fio sequential 1M O_DIRECT"
	fi
else
	run_fio drand4k --rw=randwrite --bs=4k --size=32M --direct=1 ||
		fail "fio random 4k O_DIRECT"
fi
daemon_alive "$DAEMON_PID"
[ -z "$(ls -A "$MNT")" ] || fail "files left after fio: $(ls -A "$MNT")"
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
