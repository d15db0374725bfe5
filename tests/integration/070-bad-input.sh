#!/usr/bin/env bash
# Bad options and bad paths: exit 2 and a clear message, never a hang,
# never a mount left behind; -h and -V work; reftfs-admin errors.
. "$(dirname "$0")/lib.sh"
need_fuse

MNT=$(new_dir mnt)
GOODP=$(new_dir persist)

# expect_bad WORD [--one-line|--usage] -- ARGS...: reftfsd ARGS must exit 2
# within 20 s; the message (stderr up to the usage text) must mention WORD
# (case-insensitive); --one-line: stderr is exactly one line; --usage: the
# usage text follows.  Nothing may be mounted afterwards.
# How many mounts sit on $1 (a refused daemon must not stack one more).
mount_count() {
	awk -v m="$1" '$5 == m { n++ } END { print n + 0 }' /proc/self/mountinfo
}

NFAIL=0
soft_fail() {
	log "FAIL: $*"
	NFAIL=$((NFAIL + 1))
}

expect_bad() {
	local word=$1 oneline=0 wantusage=0 rc=0 err msg before
	shift
	case $1 in
	--one-line) oneline=1; shift ;;
	--usage) wantusage=1; shift ;;
	esac
	[ "$1" = -- ] && shift
	before=$(mount_count "$MNT")
	timeout 20 "$REFTFSD" "$@" >"$T_TMP/out" 2>"$T_TMP/err" </dev/null || rc=$?
	err=$(cat "$T_TMP/err")
	[ "$(mount_count "$MNT")" = "$before" ] || fail "reftfsd $* mounted $MNT"
	[ "$rc" != 124 ] || { soft_fail "reftfsd $* hung (killed after 20 s)"; return 0; }
	[ "$rc" = 2 ] || { soft_fail "reftfsd $*: exit $rc, want 2; stderr: $err"; return 0; }
	msg=$(sed '/^[Uu]sage:/,$d' "$T_TMP/err")
	grep -qiF -- "$word" <<<"$msg" || {
		soft_fail "reftfsd $*: the message does not mention '$word': $msg"
		return 0
	}
	if [ "$oneline" = 1 ] && [ "$(grep -c . "$T_TMP/err")" != 1 ]; then
		soft_fail "reftfsd $*: want one clear line on stderr, got: $err"
		return 0
	fi
	if [ "$wantusage" = 1 ] && ! grep -qi '^usage:' "$T_TMP/err"; then
		soft_fail "reftfsd $*: no usage text: $err"
		return 0
	fi
	log "ok: reftfsd $* -> exit 2: $(head -n1 "$T_TMP/err")"
}

# Usage errors: message + usage, exit 2.
expect_bad "mount point" --usage --
expect_bad bogus --usage -- "$MNT" -f --bogus
expect_bad mem --usage -- "$MNT" -f --mem 0
expect_bad mem --usage -- "$MNT" -f --mem garbage
expect_bad mem --usage -- "$MNT" -f --mem 12Q
expect_bad mem --usage -- "$MNT" -f --mem
expect_bad chunk --usage -- "$MNT" -f --chunk-size 3M
expect_bad chunk --usage -- "$MNT" -f --chunk-size 64K
expect_bad chunk --usage -- "$MNT" -f --chunk-size 8M
expect_bad keep --usage -- "$MNT" -f --keep -1
expect_bad keep --usage -- "$MNT" -f --keep x
expect_bad unmount-flush --usage -- "$MNT" -f --unmount-flush sometimes
expect_bad enospc --usage -- "$MNT" -f --enospc-wait -5
expect_bad persist-every --usage -- "$MNT" -f --persist-every -1
expect_bad "want protect, persist or none" -- "$MNT" -f --sync sometimes
expect_bad "no persist dir" -- "$MNT" -f --sync persist
expect_bad "nothing protects" -- "$MNT" -f --sync protect
expect_bad mem -- "$MNT" -f -o mem=garbage
expect_bad bogusopt -- "$MNT" -f -o bogusopt=1
expect_bad argument --usage -- "$MNT" "$T_TMP/extra" "$T_TMP/more" -f
expect_bad "early-copy and --no-passthrough do not go together" --usage -- \
	"$MNT" -f --no-passthrough --early-copy
expect_bad "early-copy and --no-passthrough do not go together" --usage -- \
	"$MNT" -f -o early_copy,no_passthrough
expect_bad join-timeout --usage -- "$MNT" -f --join-timeout soon
expect_bad "no group to join" -- "$MNT" -f --join-timeout 10
expect_bad "no group to join" -- "$MNT" -f -o join_timeout=10
# The defaults said outright are options no more (issue 26).
expect_bad "is not known" --usage -- "$MNT" -f --in-place

# A budget the machine cannot hold: refused at once, one line that says
# what there is, whether or not memory would be faulted in ahead.  Twice
# MemTotal is past any limit (a cgroup's is lower still).
MT_KB=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)
[ -n "$MT_KB" ] || fail "no MemTotal in /proc/meminfo"
BIG=$((MT_KB * 2 / 1024))M
for pf in "" --no-prefault --prefault; do
	expect_bad "more than this machine can hold" --one-line -- "$MNT" -f --mem "$BIG" $pf
	grep -q "MemAvailable [0-9]" "$T_TMP/err" ||
		soft_fail "--mem $BIG $pf: the refusal does not say what is available: $(cat "$T_TMP/err")"
done
expect_bad "more than this machine can hold" --one-line -- "$MNT" -f -o "mem=$BIG"

# mem_cgroup BYTES: make a child of our memory cgroup (v1, else v2) limited
# to BYTES; sets CG (its dir) and CGFILE (the limit's name), or leaves CG
# empty if we may not (not root, v2 without the memory controller
# delegated).  Not in a subshell: the cleanup must learn of the cgroup.
mem_cgroup() {
	local line ctl path dir="" file="" d
	CG=""
	while IFS= read -r line; do
		ctl=${line#*:}
		path=${ctl#*:}
		ctl=${ctl%%:*}
		case ",$ctl," in
		*,memory,*)
			dir=/sys/fs/cgroup/memory$path
			file=memory.limit_in_bytes
			break ;;
		,,)
			dir=/sys/fs/cgroup$path
			file=memory.max ;;
		esac
	done </proc/self/cgroup
	[ -n "$dir" ] && is_root || return 0
	d=${dir%/}/reftfs-test-$$
	mkdir "$d" 2>/dev/null || return 0
	_T_CGROUPS+=("$d")
	[ -f "$d/$file" ] && echo "$1" >"$d/$file" 2>/dev/null || return 0
	CG=$d
	CGFILE=$file
}

# Inside a cgroup limited to 1 GiB the machine is 1 GiB: 1/8 (at least
# 1 GiB, at most half) stays out, so 512M is the most --mem may be, and
# the default is half of the limit, not half of RAM.
mem_cgroup $((1 << 30))
if [ -n "$CG" ]; then
	INCG=$T_TMP/in-cgroup
	printf '#!/bin/sh\necho $$ >"%s/cgroup.procs" || exit 99\nexec "%s" "$@"\n' \
		"$CG" "$REFTFSD" >"$INCG"
	chmod +x "$INCG"
	REAL_REFTFSD=$REFTFSD
	REFTFSD=$INCG
	expect_bad "$CGFILE" --one-line -- "$MNT" -f --mem 513M --no-prefault
	start_daemon "$MNT" --no-prefault
	REFTFSD=$REAL_REFTFSD
	expect_eq "$(df -BM --output=size "$MNT" | tail -n1 | tr -d ' ')" 512M \
		"default budget in a cgroup limited to 1 GiB (df size)"
	stop_daemon "$MNT" "$DAEMON_PID"
else
	log "cgroup case not run: cannot make a memory cgroup here (uid $(id -u))"
fi

# --lock-memory past RLIMIT_MEMLOCK, without CAP_IPC_LOCK (which lifts
# it): refused at once, with the limit and how to raise it; within the
# limit, it mounts.  The limit is lowered (to 8 MiB at most: raising it
# needs a privilege a container may lack).
if is_root && command -v setpriv >/dev/null && command -v prlimit >/dev/null; then
	LIM=$(ulimit -H -l)
	[ "$LIM" = unlimited ] || [ "$LIM" -gt 8192 ] && LIM=8192
	LOWLOCK=$T_TMP/low-memlock
	printf '#!/bin/sh\nexec prlimit --memlock=%s:%s setpriv --bounding-set -ipc_lock "%s" "$@"\n' \
		$((LIM << 10)) $((LIM << 10)) "$REFTFSD" >"$LOWLOCK"
	chmod +x "$LOWLOCK"
	REAL_REFTFSD=$REFTFSD
	REFTFSD=$LOWLOCK
	expect_bad RLIMIT_MEMLOCK --one-line -- "$MNT" -f --mem 128M --lock-memory
	grep -q "ulimit -l" "$T_TMP/err" || fail "the --lock-memory refusal does not say how to raise the limit"
	[ "$LIM" -lt 1024 ] || grep -q "($((LIM >> 10)) MiB;" "$T_TMP/err" ||
		fail "the --lock-memory refusal does not name the limit: $(cat "$T_TMP/err")"
	if [ "$LIM" -ge 2048 ]; then
		start_daemon "$MNT" --mem $((LIM >> 10))M --lock-memory --no-passthrough
		echo data >"$MNT/f"
		expect_eq "$(cat "$MNT/f")" data "a file on a --lock-memory mount within RLIMIT_MEMLOCK"
		stop_daemon "$MNT" "$DAEMON_PID"
	fi
	REFTFSD=$REAL_REFTFSD
else
	log "--lock-memory refusal not run: needs root, setpriv and prlimit"
fi
expect_bad "no --mem, --persist, --spill or --lock-memory" --usage -- --witness \
	--node 1 --peers 127.0.0.1:1 --witnesses 127.0.0.1:2 --lock-memory
expect_bad "a witness holds no data" --usage -- --witness --node 1 \
	--peers 127.0.0.1:1 --witnesses 127.0.0.1:2 --spill "$T_TMP"

# Bad paths: exit 2, one clear line naming the path.  Also in the default
# background mode: the error must reach the caller's exit status.
for fg in -f ""; do
	expect_bad "$T_TMP/nonexistent" --one-line -- "$T_TMP/nonexistent" $fg
	: >"$T_TMP/afile"
	expect_bad "$T_TMP/afile" --one-line -- "$T_TMP/afile" $fg
	expect_bad "$T_TMP/nope" --one-line -- "$MNT" $fg --persist "$T_TMP/nope"
	expect_bad "$T_TMP/afile" --one-line -- "$MNT" $fg --persist "$T_TMP/afile"
done
if is_root; then
	# Root can write anywhere; a read-only filesystem it cannot.
	RO=$T_TMP/ro
	mkdir -p "$RO"
	mount -t tmpfs -o ro,size=1M tmpfs "$RO" || fail "mount read-only tmpfs"
	_T_TMPFS+=("$RO")
	expect_bad "$RO" --one-line -- "$MNT" -f --persist "$RO"
else
	chmod 0555 "$GOODP"
	expect_bad "$GOODP" --one-line -- "$MNT" -f --persist "$GOODP"
	chmod 0755 "$GOODP"
fi

# -h / -V: exit 0, on stdout.
rc=0
timeout 10 "$REFTFSD" -h >"$T_TMP/help" 2>&1 || rc=$?
expect_eq "$rc" 0 "reftfsd -h exit status"
grep -qi usage "$T_TMP/help" || fail "reftfsd -h prints no usage"
grep -q -- --mem "$T_TMP/help" || fail "reftfsd -h does not document --mem"
rc=0
timeout 10 "$REFTFSD" --version >"$T_TMP/ver" 2>&1 || rc=$?
expect_eq "$rc" 0 "reftfsd --version exit status"
grep -qi reftfs "$T_TMP/ver" || fail "reftfsd --version: $(cat "$T_TMP/ver")"

# Busy mount point and control socket in use.
CTL=$T_TMP/ctl.sock
start_daemon "$MNT" --mem 64M --ctl "$CTL"
echo data >"$MNT/f"
MNT2=$(new_dir mnt2)
expect_bad "$MNT" --one-line -- "$MNT" -f --mem 64M
rc=0
timeout 20 "$REFTFSD" "$MNT2" -f --mem 64M --ctl "$CTL" >"$T_TMP/out" 2>"$T_TMP/err" || rc=$?
[ "$rc" = 2 ] || fail "second daemon on a busy control socket: exit $rc, want 2: $(cat "$T_TMP/err")"
grep -qiE "socket|$CTL" "$T_TMP/err" || fail "socket in use: unclear message: $(cat "$T_TMP/err")"
[ "$(grep -c . "$T_TMP/err")" = 1 ] || fail "socket in use: want one line: $(cat "$T_TMP/err")"
is_mounted "$MNT2" && fail "$MNT2 mounted although the socket was in use"
daemon_alive "$DAEMON_PID"
expect_eq "$(cat "$MNT/f")" data "data on the first mount after the refused second daemon"
[ -S "$CTL" ] || fail "the refused daemon removed the live daemon's socket $CTL"
timeout 20 "$REFTFS_ADMIN" -s "$CTL" status >/dev/null || fail "admin -s CTL status on the first daemon after the refused second one"
stop_daemon "$MNT" "$DAEMON_PID"

# A stale socket (daemon killed) must not block a new daemon.
start_daemon "$MNT" --mem 64M --ctl "$CTL"
kill_daemon "$MNT" "$DAEMON_PID"
# Nothing runs at SIGKILL: the socket file must still be there, or the
# start below would not test a stale socket at all.
[ -S "$CTL" ] || fail "no stale socket $CTL after SIGKILL: the case below would test nothing"
start_daemon "$MNT" --mem 64M --ctl "$CTL"
stop_daemon "$MNT" "$DAEMON_PID"

# reftfs-admin errors.
rc=0
timeout 20 "$REFTFS_ADMIN" -m "$T_TMP/nonexistent" status >"$T_TMP/out" 2>"$T_TMP/err" || rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "admin on a missing mount point: exit $rc"
[ -s "$T_TMP/err" ] || fail "admin on a missing mount point: no message"
log "ok: admin -m missing -> exit $rc: $(head -n1 "$T_TMP/err")"
rc=0
timeout 20 "$REFTFS_ADMIN" -m "$MNT" status >"$T_TMP/out" 2>"$T_TMP/err" || rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "admin on an unmounted dir: exit $rc"
[ -s "$T_TMP/err" ] || fail "admin on an unmounted dir: no message"
log "ok: admin -m unmounted -> exit $rc: $(head -n1 "$T_TMP/err")"
if ! grep -q ' fuse.reftfs ' /proc/mounts; then
	rc=0
	timeout 20 "$REFTFS_ADMIN" status >"$T_TMP/out" 2>"$T_TMP/err" || rc=$?
	[ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "admin with nothing mounted: exit $rc"
	grep -qi 'reftfs\|mount' "$T_TMP/err" || fail "admin with nothing mounted: unclear: $(cat "$T_TMP/err")"
	log "ok: admin, nothing mounted -> exit $rc: $(head -n1 "$T_TMP/err")"
fi
start_daemon "$MNT" --mem 64M
for args in "frobnicate" "ls /does/not/exist" "--bogus status" "flush --bogus"; do
	rc=0
	# shellcheck disable=SC2086
	timeout 20 "$REFTFS_ADMIN" -m "$MNT" $args >"$T_TMP/out" 2>"$T_TMP/err" || rc=$?
	case $args in
	ls*) [ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "admin $args: exit $rc" ;;
	*) [ "$rc" = 2 ] || fail "admin $args: exit $rc, want 2" ;;
	esac
	[ -s "$T_TMP/err" ] || fail "admin $args: no message on stderr"
	log "ok: admin $args -> exit $rc: $(head -n1 "$T_TMP/err")"
done
rc=0
timeout 20 "$REFTFS_ADMIN" >"$T_TMP/out" 2>"$T_TMP/err" || rc=$?
expect_eq "$rc" 2 "reftfs-admin without a command"
daemon_alive "$DAEMON_PID"
stop_daemon "$MNT" "$DAEMON_PID"
[ "$NFAIL" = 0 ] || fail "$NFAIL of the checks above failed"
log "PASS"
