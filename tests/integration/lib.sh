# shellcheck shell=bash
# tests/integration/lib.sh - sourced by every tests/integration/NNN-name.sh.
#
# Gives each test a private temp dir, starts real reftfsd daemons on real
# FUSE mounts, and guarantees that whatever the test started is stopped and
# unmounted when it exits, however it exits (trap on EXIT, INT, TERM).
#
# Environment (set by tests/integration/meson.build; defaults for running a
# test by hand from the repository root):
#   REFTFSD       path of reftfsd
#   REFTFS_ADMIN  path of reftfs-admin
#   SRCDIR        repository root
#   BUILDDIR      meson build dir
#   RFT_TEST_IO_URING=1  every daemon started by start_daemon or
#                 start_daemon_bg takes its requests over io_uring
#                 (--io-uring; the fuse module's enable_uring is turned on
#                 for the test and put back after); the test fails if the
#                 requests do not come over it.  The suite 'io_uring' runs
#                 tests so (tests/integration/meson.build).
#   RFT_TIER      quick, full (the default) or soak: how much a randomized
#                 or exhaustive test does (by_tier below).  tools/test.sh
#                 sets it; meson.build never does, so that it, and every
#                 count and seed a test reads (DIFF_TRIALS, ERASURE_PAIRS,
#                 ...), come from the caller's environment.
#
# Exit codes follow meson: 0 pass, 77 skip, anything else fail.

set -euo pipefail

: "${SRCDIR:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${BUILDDIR:=$SRCDIR/build}"
: "${REFTFSD:=$BUILDDIR/fs/reftfsd}"
: "${REFTFS_ADMIN:=$BUILDDIR/tools/reftfs-admin}"
export SRCDIR BUILDDIR REFTFSD REFTFS_ADMIN

# Debian's python3-torch lives only under the system interpreter.
PY=/usr/bin/python3
HELPERS=$SRCDIR/tests/integration
export PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$HELPERS${PYTHONPATH:+:$PYTHONPATH}"

TEST_NAME=$(basename "$0" .sh)
T_TMP=$(mktemp -d "${TMPDIR:-/tmp}/reftfs-${TEST_NAME}.XXXXXX")
T_TMP=$(cd "$T_TMP" && pwd -P) # absolute, as /proc/self/mountinfo shows it
# A group daemon run without --state-dir by a user other than root keeps
# its namespace log here, not in the user's home.  (Root's default is
# /var/lib/reftfs: group tests pass --state-dir under $T_TMP.)
export XDG_STATE_HOME=$T_TMP/state

# Sanitizer builds (tools/test.sh also runs this suite against build-asan):
# a background daemon's stderr is /dev/null after fuse_daemonize() and a
# foreground one's goes to a log nobody reads when the test passes, so every
# report goes to a file $T_TMP/sanitizer.PID instead; _t_cleanup prints them
# and fails the test.  Binaries built without sanitizers ignore these.
_T_SAN=$T_TMP/sanitizer
for _v in ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS; do
	export "$_v=${!_v:+${!_v}:}log_path=$_T_SAN"
done
unset _v

# by_tier QUICK FULL SOAK: the one of the three for this run's RFT_TIER.
# A sanitizer build runs every daemon several times slower: there the
# full tier takes what the quick one does (tools/test.sh's --full runs
# build/ with the full counts).
by_tier() {
	local tier=${RFT_TIER:-full}
	[ "$tier" = full ] && [ "${RFT_SANITIZE:-none}" != none ] && tier=quick
	case $tier in
	quick) echo "$1" ;;
	full) echo "$2" ;;
	soak) echo "$3" ;;
	*) fail "RFT_TIER='$RFT_TIER': want quick, full or soak" ;;
	esac
}

_T_MOUNTS=()	# FUSE mount points we made
_T_TMPFS=()	# other mounts we made (tmpfs), unmounted after the FUSE ones
_T_PIDS=()	# processes we started
_T_RM=()	# extra directories to remove (outside $T_TMP)
_T_CGROUPS=()	# cgroups we made: rmdir, once their processes are gone
_T_NETNS=()	# network namespaces we made: deleted, once the daemons are gone
_T_ATEXIT=()	# commands (eval'd) run first: what a test set up on its own
_T_NDAEMON=0
_T_LAST_LOG=""
_T_URING_PARAM=/sys/module/fuse/parameters/enable_uring
_T_URING_WAS=""	# the parameter's value before uring_set changed it
_T_URING_OPT=()	# what start_daemon adds: (--io-uring) or ()
_T_WATCHDOG=""	# the deadline's watchdog (below), while it runs

# Each line says the seconds since the test began: what is slow shows.
_T_T0=$SECONDS
log() { printf '[%s +%ds] %s\n' "$TEST_NAME" $((SECONDS - _T_T0)) "$*" >&2; }
fail() {
	printf '[%s] FAIL: %s\n' "$TEST_NAME" "$*" >&2
	exit 1
}
skip() {
	printf '[%s] SKIP: %s\n' "$TEST_NAME" "$*" >&2
	exit 77
}

# Is $1 a mount point right now?  Reads /proc (never stats the path, which
# could hang on a dead FUSE connection).
is_mounted() {
	awk -v m="$1" '$5 == m { found = 1 } END { exit !found }' \
		/proc/self/mountinfo
}

# Filesystem type of the mount at $1 ("" if none).
mount_type() {
	awk -v m="$1" '$5 == m {
		for (i = 7; $i != "-"; i++) ; t = $(i + 1)
	} END { print t }' /proc/self/mountinfo
}

pid_alive() {
	[ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null &&
		! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

# PIDs of reftfsd processes (command name reftfsd, or reftfs when started
# by mount.fuse3) with mount point $1 among their arguments, or with
# "under" as $2, any path below $1.  Used for daemons that went to the
# background and are not our children, and by the watchdog.
daemon_pids_for() {
	local m=$1 under=${2:-} p arg comm
	for p in /proc/[0-9]*; do
		comm=$(cat "$p/comm" 2>/dev/null) || continue
		case $comm in reftfsd | reftfs) ;; *) continue ;; esac
		while IFS= read -r -d '' arg; do
			if [ "$arg" = "$m" ] || { [ "$under" = under ] &&
				[ "${arg#"$m"/}" != "$arg" ]; }; then
				echo "${p#/proc/}"
				break
			fi
		done <"$p/cmdline" 2>/dev/null || true
	done
}

# Unmount $1 (FUSE); lazy unmount if a plain one fails.
unmount_fuse() {
	local m=$1 i
	is_mounted "$m" || return 0
	for i in 1 2 3 4 5; do
		fusermount3 -u "$m" 2>/dev/null && return 0
		is_mounted "$m" || return 0
		sleep 0.5
	done
	fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
}

# Print every sanitizer report a process of this test wrote; true if any.
# GCC's UBSan ignores log_path when ASan is linked in too (GCC bug 94328)
# and writes to stderr, so the foreground daemons' logs are searched as well
# (tools/test.sh builds build-asan with clang, which honours log_path), and
# for the engine's lock-order reports (engine_i.h), which abort a daemon
# even where the test would not notice it.
_t_san_reports() {
	local f found=1 pat='runtime error:|(ERROR|WARNING): [A-Za-z]+Sanitizer'
	pat+='|lock order: '
	for f in "$_T_SAN".*; do
		[ -s "$f" ] || continue
		printf '[%s] FAIL: sanitizer report from pid %s:\n' \
			"$TEST_NAME" "${f##*.}" >&2
		sed 's/^/    /' "$f" >&2
		found=0
	done
	for f in "$T_TMP"/daemon.*.log; do
		grep -qE "$pat" "$f" 2>/dev/null || continue
		printf '[%s] FAIL: sanitizer or lock-order report in %s:\n' \
			"$TEST_NAME" "${f##*/}" >&2
		sed 's/^/    /' "$f" >&2
		found=0
	done
	return $found
}

_t_cleanup() {
	local rc=$? m p i
	set +e
	trap - EXIT INT TERM
	_t_watchdog_stop
	for m in "${_T_ATEXIT[@]}"; do
		eval "$m"
	done
	for m in "${_T_MOUNTS[@]}"; do
		if is_mounted "$m"; then
			fusermount3 -u "$m" 2>/dev/null ||
				fusermount3 -uz "$m" 2>/dev/null ||
				umount -l "$m" 2>/dev/null
		fi
		_T_PIDS+=($(daemon_pids_for "$m"))
	done
	# Give daemons a moment to write back and exit on their own.
	for p in "${_T_PIDS[@]}"; do
		for i in $(seq 1 50); do
			pid_alive "$p" || break
			sleep 0.1
		done
		if pid_alive "$p"; then
			kill -TERM "$p" 2>/dev/null
			sleep 0.5
			pid_alive "$p" && kill -KILL "$p" 2>/dev/null
		fi
	done
	for m in "${_T_MOUNTS[@]}"; do
		is_mounted "$m" && fusermount3 -uz "$m" 2>/dev/null
	done
	# A failed test shows what each daemon it started said last
	# (RFT_LOG_LINES lines, 25 unless set).
	if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
		for m in "$T_TMP"/daemon.*.log; do
			[ -s "$m" ] || continue
			echo "[$TEST_NAME] --- last lines of ${m##*/}:" >&2
			tail -n ${RFT_LOG_LINES:-25} "$m" | sed 's/^/    /' >&2
		done
	fi
	# After the daemons exited: LeakSanitizer reports at exit.
	if _t_san_reports; then
		case $rc in 0 | 77) rc=1 ;; esac
	fi
	for m in "${_T_TMPFS[@]}"; do
		is_mounted "$m" && { umount "$m" 2>/dev/null || umount -l "$m"; }
	done
	for m in "${_T_RM[@]}"; do
		rm -rf "$m"
	done
	for m in "${_T_CGROUPS[@]}"; do
		[ -d "$m" ] && rmdir "$m"
	done
	for m in "${_T_NETNS[@]}"; do
		ip netns del "$m" 2>/dev/null
	done
	[ -n "$_T_URING_WAS" ] && echo "$_T_URING_WAS" >"$_T_URING_PARAM"
	# Never rm -rf through something still mounted.
	if awk -v t="$T_TMP/" 'index($5 "/", t) == 1 { f = 1 } END { exit !f }' \
		/proc/self/mountinfo; then
		echo "[$TEST_NAME] WARNING: mounts left under $T_TMP, not removed" >&2
		[ "$rc" = 0 ] && rc=1
	else
		rm -rf "$T_TMP"
	fi
	exit "$rc"
}
trap _t_cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# --- the deadline ----------------------------------------------------------
#
# meson ends a test that runs past its timeout with SIGTERM and, half a
# second later, SIGKILL: no cleanup (mounts and daemons left behind) and
# nothing said about what hung.  So a test run by meson (RFT_TIMEOUT, its
# timeout in seconds, from meson.build) has a deadline of its own, 10% (at
# least 30 s, at most half) before meson's, both scaled by the run's
# --timeout-multiplier.  At it the watchdog says what hangs
# (_t_hang_report), kills the test's daemons (their FUSE calls return),
# and ends the test with SIGTERM: the usual cleanup runs and prints the
# daemons' logs.

# The --timeout-multiplier of the meson test that runs us: RFT_TIMEOUT_MULT
# if set, else read from meson's command line; 1 if neither says.
_t_timeout_mult() {
	local a prev=""

	if [ -n "${RFT_TIMEOUT_MULT:-}" ]; then
		echo "$RFT_TIMEOUT_MULT"
		return
	fi
	while IFS= read -r -d '' a; do
		case $prev in --timeout-multiplier | -t)
			echo "$a"
			return
			;;
		esac
		case $a in
		--timeout-multiplier=*) echo "${a#*=}"; return ;;
		-t?*) echo "${a#-t}"; return ;;
		esac
		prev=$a
	done <"/proc/$PPID/cmdline" 2>/dev/null
	echo 1
}

# The watchdog is a copy of the test's shell made at the start: it sees
# the mounts and daemons the test made since through the system, as the
# FUSE mounts under $T_TMP and the reftfsd processes with a path there
# (daemon_pids_for "$T_TMP" under).

# The FUSE connection numbers (/sys/fs/fuse/connections/N) of the mounts
# under $T_TMP, from mountinfo's major:minor: a stat of a hung mount would
# hang too.
_t_fuse_conns() {
	awk -v t="$T_TMP/" 'index($5, t) == 1 {
		for (i = 7; i < NF && $i != "-"; i++) ;
		if ($(i + 1) ~ /^fuse/) { split($3, d, ":"); print d[2] } }' \
		/proc/self/mountinfo | sort -u
}

# The kernel's view of a process: state, where it waits, its stack (root).
_t_proc_report() {
	local p=$1 t

	for t in /proc/"$p"/task/*; do
		printf '      task %s %s: %s, waits in %s\n' "${t##*/}" \
			"$(cat "$t/comm" 2>/dev/null)" \
			"$(awk '{ print $3 }' "$t/stat" 2>/dev/null)" \
			"$(cat "$t/wchan" 2>/dev/null)"
		sed 's/^/        /' "$t/stack" 2>/dev/null
	done
}

# What hangs: each FUSE connection's waiting requests, every process of the
# machine waiting for a FUSE answer (request_wait_answer) or blocked in the
# kernel (state D), and each daemon of ours, thread by thread (with gdb
# where there is one: the daemon's own stacks).
_t_hang_report() {
	local c p

	echo "[$TEST_NAME] FAIL: still running at its deadline (${_T_DEADLINE} s; meson's timeout comes soon after): what hangs:"
	for c in $(_t_fuse_conns); do
		# fusectl, where it is mounted
		[ -r /sys/fs/fuse/connections/"$c"/waiting ] &&
			echo "  FUSE connection $c: $(cat /sys/fs/fuse/connections/"$c"/waiting) requests waiting"
	done
	for p in /proc/[0-9]*; do
		[ "$(cat "$p/wchan" 2>/dev/null)" = request_wait_answer ] ||
			[ "$(awk '{ print $3 }' "$p/stat" 2>/dev/null)" = D ] ||
			continue
		echo "  blocked: pid ${p#/proc/} $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-200)"
		_t_proc_report "${p#/proc/}"
	done
	for p in $(daemon_pids_for "$T_TMP" under); do
		echo "  daemon pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-200)"
		if command -v gdb >/dev/null; then
			timeout 20 gdb -p "$p" -batch -nx \
				-ex 'set pagination off' \
				-ex 'thread apply all bt 20' 2>&1 |
				grep -E '^(Thread|#)' | sed 's/^/      /'
		else
			_t_proc_report "$p"
		fi
	done
}

_t_watchdog() {
	local c p

	# Named, so that a test can see that none is left behind.
	(exec -a "reftfs-deadline-$$" sleep "$_T_DEADLINE") \
		</dev/null >/dev/null 2>&1
	_t_hang_report >&2
	# A caller whose request the daemon has read waits it out, even past
	# SIGKILL: only an aborted connection ends that wait, which a
	# daemon's death does too, but for a daemon that cannot die
	# (kill_daemon): fusectl, mounted if it is not.
	[ -n "$(ls /sys/fs/fuse/connections 2>/dev/null)" ] ||
		mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null
	for c in $(_t_fuse_conns); do
		[ -w /sys/fs/fuse/connections/"$c"/abort ] &&
			echo 1 >/sys/fs/fuse/connections/"$c"/abort
	done
	for p in $(daemon_pids_for "$T_TMP" under); do
		kill -KILL "$p" 2>/dev/null
	done
	# The shell takes the TERM once what it runs in the foreground ends,
	# and starts nothing more: so its children go too, after it.
	kill -TERM $$
	for p in $(pgrep -P $$); do
		[ "$p" = "$BASHPID" ] || kill -TERM "$p" 2>/dev/null
	done
}

# Stop the watchdog and its sleep (found first: once the watchdog is gone
# the sleep is no longer its child).
_t_watchdog_stop() {
	local kids

	[ -n "$_T_WATCHDOG" ] || return 0
	kids=$(pgrep -P "$_T_WATCHDOG")
	kill "$_T_WATCHDOG" $kids 2>/dev/null
	_T_WATCHDOG=""
}

_T_DEADLINE=$(awk -v t="${RFT_TIMEOUT:-0}" -v m="$(_t_timeout_mult)" 'BEGIN {
	if (t <= 0 || m <= 0) { print 0; exit }
	t *= m; s = t / 10 > 30 ? t / 10 : 30; if (s > t / 2) s = t / 2
	print int(t - s) }')
if [ "$_T_DEADLINE" -gt 0 ]; then
	(set +e; _t_watchdog) &
	_T_WATCHDOG=$!
fi

# --- preconditions ------------------------------------------------------

need_fuse() {
	[ -c /dev/fuse ] || skip "no /dev/fuse (modprobe fuse, or run where FUSE is allowed)"
	[ -r /dev/fuse ] && [ -w /dev/fuse ] || skip "/dev/fuse not accessible to uid $(id -u)"
	command -v fusermount3 >/dev/null || skip "fusermount3 missing (apt-get install fuse3)"
	[ -x "$REFTFSD" ] || fail "reftfsd not built: $REFTFSD"
	[ -x "$REFTFS_ADMIN" ] || fail "reftfs-admin not built: $REFTFS_ADMIN"
}

need_torch() {
	[ -x "$PY" ] || skip "$PY missing"
	"$PY" -c 'import torch' 2>/dev/null || skip "python3-torch not installed (apt-get install python3-torch)"
}

need_numpy() {
	[ -x "$PY" ] || skip "$PY missing"
	"$PY" -c 'import numpy' 2>/dev/null || skip "python3-numpy not installed"
}

need_root() {
	[ "$(id -u)" = 0 ] || skip "needs root: $*"
}

is_root() { [ "$(id -u)" = 0 ]; }

# version_ge A B: dotted A >= B.
version_ge() {
	[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}
# The running kernel's version, dotted numbers only (6.18.44).
KERNEL_VERSION=$(uname -r | sed 's/[^0-9.].*//')

# fsync_writer DIR REF [PERSIST]: run fsync_writer.py (checkpoint writers,
# every file fsynced; with PERSIST each one checked there as its fsync
# returns) in the background until it says "synced", then log what it said.
# Sets WRITER (its pid: it keeps .metadata open until killed).
fsync_writer() {
	local out=$T_TMP/writer.$$.$RANDOM i
	"$PY" "$SRCDIR/tests/integration/fsync_writer.py" "$@" >"$out" 2>&1 &
	WRITER=$!
	_T_PIDS+=("$WRITER")
	for i in $(seq 1 300); do
		grep -q '^synced' "$out" && break
		pid_alive "$WRITER" || fail "the writer ended: $(cat "$out")"
		sleep 0.1
	done
	grep -q '^synced' "$out" || fail "the writer did not finish in 30 s: $(cat "$out")"
	log "writer: $(cat "$out")"
}

# --- daemons -------------------------------------------------------------

# new_dir NAME: make $T_TMP/NAME and print it.
new_dir() {
	mkdir -p "$T_TMP/$1"
	echo "$T_TMP/$1"
}

# wait_mounted MNT PID LOG [SECONDS]: wait until MNT is a fuse.reftfs mount;
# fail (showing the log) if the daemon dies or it takes too long.
wait_mounted() {
	local m=$1 pid=$2 lf=$3 secs=${4:-30} i
	for i in $(seq 1 $((secs * 10))); do
		if is_mounted "$m"; then
			return 0
		fi
		if [ -n "$pid" ] && ! pid_alive "$pid"; then
			sed 's/^/    daemon: /' "$lf" >&2 || true
			fail "reftfsd exited before $m was mounted"
		fi
		sleep 0.1
	done
	sed 's/^/    daemon: /' "$lf" >&2 || true
	fail "$m not mounted after ${secs}s"
}

# wait_log PATTERN [SECS]: true once the last daemon's log has a line
# matching PATTERN (grep -E), false after SECS (default 10).  For what the
# daemon logs at FUSE INIT, which may come after the mount shows.
wait_log() {
	local pat=$1 secs=${2:-10} i
	for i in $(seq 1 $((secs * 10))); do
		grep -qE "$pat" "$DAEMON_LOG" && return 0
		sleep 0.1
	done
	return 1
}

# uring_on / uring_off: the fuse module's enable_uring (root; a kernel
# without it skips the test).  The value before is put back at exit.
uring_set() {
	need_root "the fuse module's enable_uring"
	[ -w "$_T_URING_PARAM" ] || skip "this kernel has no FUSE over io_uring ($_T_URING_PARAM)"
	[ -n "$_T_URING_WAS" ] || _T_URING_WAS=$(cat "$_T_URING_PARAM")
	echo "$1" >"$_T_URING_PARAM" || fail "cannot set $_T_URING_PARAM"
}
uring_on() { uring_set Y; }
uring_off() { uring_set N; }

# uring_used MNT: true once the daemon of MNT says a request came over
# io_uring ("status": fuse.io_uring).  The rings start after INIT: the
# first requests may still come over /dev/fuse, so it asks a few times,
# with listings (never answered from the kernel's cache).
uring_used() {
	local i
	for i in $(seq 1 50); do
		ls -a "$1" >/dev/null
		"$REFTFS_ADMIN" -m "$1" status --json 2>/dev/null |
			"$PY" -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["fuse"]["io_uring"] else 1)' &&
			return 0
		sleep 0.1
	done
	return 1
}

# With RFT_TEST_IO_URING=1: turn io_uring on and set _T_URING_OPT for
# start_daemon; then check that the requests come over it.
_t_uring_prepare() {
	_T_URING_OPT=()
	[ "${RFT_TEST_IO_URING:-0}" = 1 ] || return 0
	uring_on
	_T_URING_OPT=(--io-uring)
}
_t_uring_check() {
	[ "${RFT_TEST_IO_URING:-0}" = 1 ] || return 0
	uring_used "$1" || fail "reftfsd on $1 was started with --io-uring, but no request came over io_uring"
	log "requests to $1 come over io_uring"
}

# Passthrough is on by default where it can be: as root, on a kernel with
# FUSE passthrough (6.9+), with libfuse 3.16+, a node alone, without
# --io-uring; large files are then written in place.  Every daemon
# start_daemon or start_daemon_bg starts must say so, or say it is off
# where it cannot be on.  Other suites start every daemon another way:
#   RFT_TEST_DIRECT=1       (suite 'direct') --no-passthrough: every read
#                           and mapping through the daemon;
#   RFT_TEST_PASSTHROUGH=1  (suite 'passthrough') --no-in-place: large
#                           files copied for passthrough at seal; skipped
#                           where passthrough cannot be on.
# A test starting daemons that cannot have it (a group, --io-uring) has no
# place in suite 'passthrough'.
need_passthrough() {
	need_root "passthrough registers backing files (CAP_SYS_ADMIN)"
	version_ge "$KERNEL_VERSION" 6.9 ||
		skip "kernel $KERNEL_VERSION has no FUSE passthrough (6.9 and later do)"
	version_ge "${RFT_LIBFUSE_VERSION:-3.18}" 3.16 ||
		skip "libfuse $RFT_LIBFUSE_VERSION cannot ask for FUSE passthrough (3.16 and later can)"
}
# passthrough_possible: true where a node alone gets passthrough by default.
passthrough_possible() {
	[ "$(id -u)" = 0 ] && version_ge "$KERNEL_VERSION" 6.9 &&
		version_ge "${RFT_LIBFUSE_VERSION:-3.18}" 3.16
}
_t_pass_prepare() {
	_T_PASS_OPT=()
	if [ "${RFT_TEST_DIRECT:-0}" = 1 ]; then
		_T_PASS_OPT=(--no-passthrough)
	elif [ "${RFT_TEST_PASSTHROUGH:-0}" = 1 ]; then
		need_passthrough
		_T_PASS_OPT=(--no-in-place)
	fi
}
# _t_pass_check MNT [the daemon's options...]: what its status must say of
# passthrough and in place.  Not checked where the test chose the mode
# itself, or started a daemon that cannot have passthrough.
_t_pass_check() {
	local m=$1 i on="" want a prev="" where
	shift
	where=(-m "$m")
	for a in "$@"; do
		[ "$prev" = --ctl ] && where=(-s "$a")
		prev=$a
	done
	if [ "${RFT_TEST_DIRECT:-0}" = 1 ]; then
		want="False False"
	elif [ "${RFT_TEST_PASSTHROUGH:-0}" = 1 ]; then
		want="True False"
	else
		prev=""
		for a in "$@"; do
			case $a in
			--*passthrough | --*in-place | --early-copy | --io-uring | \
				--peers | --registry) return 0 ;;
			esac
			if [ "$prev" = -o ]; then
				case ,$a in
				*,*passthrough* | *,*in_place* | *,early_copy* | \
					*,io_uring* | *,peers=* | *,registry=*) return 0 ;;
				esac
			fi
			prev=$a
		done
		want="False False"
		passthrough_possible && want="True True"
	fi
	# Decided at FUSE INIT, which may come after the mount shows.
	for i in $(seq 1 100); do
		on=$(timeout 60 "$REFTFS_ADMIN" "${where[@]}" --json status | "$PY" -c '
import json, sys
f = json.load(sys.stdin)["fuse"]
print(f["passthrough"], f["passthrough_in_place"])' 2>/dev/null) || on=""
		[ "$on" = "$want" ] && break
		sleep 0.1
	done
	[ "$on" = "$want" ] ||
		fail "reftfsd on $m ($*): its status says passthrough, in place: '$on' (want '$want'; the daemon's log says why)"
	case $want in
	"True True") log "$m passes large sealed files through, written in place" ;;
	"True False") log "$m passes large sealed files through, copied at seal" ;;
	*) log "$m serves every read through the daemon" ;;
	esac
}

# In the log of a test: how much passed through before MNT is unmounted
# (tests without large files read back have none).
_t_pass_report() {
	log "$1: $(admin "$1" --json status 2>/dev/null | "$PY" -c '
import json, sys
s = json.load(sys.stdin)
c = s["counters"]
if not s["fuse"]["passthrough"]:
    print("passthrough off")
    sys.exit(0)
print("%d opens passed through, %d files copied, %d over a spare, "
      "%d bytes early (%d used), %d in place (%d used)" % (
    c["passthrough_opens"], c["passthrough_files"],
    c["passthrough_reused"], c["passthrough_early_bytes"],
    c["passthrough_early_used_bytes"], c["passthrough_placed_bytes"],
    c["passthrough_placed_used_bytes"]))' 2>/dev/null || echo "no status")"
}

# start_daemon MNT [reftfsd options...]: run reftfsd in the foreground (-f)
# as our child, wait until MNT is mounted.  Sets DAEMON_PID and DAEMON_LOG.
start_daemon() {
	local m=$1
	shift
	_t_uring_prepare
	_t_pass_prepare
	set -- "$@" "${_T_URING_OPT[@]}" "${_T_PASS_OPT[@]}"
	_T_NDAEMON=$((_T_NDAEMON + 1))
	DAEMON_LOG="$T_TMP/daemon.$_T_NDAEMON.log"
	_T_MOUNTS+=("$m")
	"$REFTFSD" "$m" -f "$@" >"$DAEMON_LOG" 2>&1 &
	DAEMON_PID=$!
	_T_PIDS+=("$DAEMON_PID")
	_T_LAST_LOG=$DAEMON_LOG
	wait_mounted "$m" "$DAEMON_PID" "$DAEMON_LOG"
	local t
	t=$(mount_type "$m")
	[ "$t" = fuse.reftfs ] || fail "$m mounted with type '$t', want fuse.reftfs"
	log "mounted $m (pid $DAEMON_PID): reftfsd $m -f $*"
	_t_uring_check "$m"
	_t_pass_check "$m" "$@"
}

# start_daemon_bg MNT [options...]: the ordinary background mode.  reftfsd
# must return only once the mount is usable (or with an error).
start_daemon_bg() {
	local m=$1 rc=0
	shift
	_t_uring_prepare
	_t_pass_prepare
	set -- "$@" "${_T_URING_OPT[@]}" "${_T_PASS_OPT[@]}"
	_T_NDAEMON=$((_T_NDAEMON + 1))
	DAEMON_LOG="$T_TMP/daemon.$_T_NDAEMON.log"
	_T_MOUNTS+=("$m")
	timeout 60 "$REFTFSD" "$m" "$@" >"$DAEMON_LOG" 2>&1 || rc=$?
	[ "$rc" = 0 ] || { cat "$DAEMON_LOG" >&2; fail "reftfsd $m $* exited $rc"; }
	wait_mounted "$m" "" "$DAEMON_LOG" 10
	DAEMON_PID=$(daemon_pids_for "$m" | sed -n 1p)
	[ -n "$DAEMON_PID" ] || fail "no reftfsd process found for $m"
	_T_PIDS+=("$DAEMON_PID")
	log "mounted $m (background pid $DAEMON_PID): reftfsd $m $*"
	_t_uring_check "$m"
	_t_pass_check "$m" "$@"
}

# stop_daemon MNT PID [SECONDS]: fusermount3 -u, then wait for the daemon to
# write back and exit; fail if it does not exit 0 in time.
stop_daemon() {
	local m=$1 pid=$2 secs=${3:-120} i rc=0
	_t_pass_report "$m"
	fusermount3 -u "$m" || fail "fusermount3 -u $m failed"
	for i in $(seq 1 $((secs * 10))); do
		pid_alive "$pid" || break
		sleep 0.1
	done
	if pid_alive "$pid"; then
		fail "reftfsd (pid $pid) still running ${secs}s after unmount of $m"
	fi
	if wait "$pid" 2>/dev/null; then rc=0; else rc=$?; fi
	# $pid was not our child (background mode): wait says 127, unknowable.
	if [ "$rc" != 0 ] && [ "$rc" != 127 ]; then
		sed 's/^/    daemon: /' "$_T_LAST_LOG" >&2 || true
		fail "reftfsd exited $rc after unmount of $m (want 0)"
	fi
	is_mounted "$m" && fail "$m still mounted after the daemon exited"
	log "unmounted $m, daemon exited 0"
}

# _t_gone PID: no thread of PID runs or waits any more (gone, or a zombie).
_t_gone() {
	local t
	for t in /proc/"$1"/task/*; do
		case $(awk '{ print $3 }' "$t/stat" 2>/dev/null) in
		Z | X | "") ;;
		*) return 1 ;;
		esac
	done
	return 0
}

# _t_abort MNT: abort the FUSE connection of MNT (fusectl, mounted if it
# is not): every request waiting on it fails ENOTCONN.
_t_abort() {
	local c
	c=$(awk -v m="$1" '$5 == m { split($3, d, ":"); print d[2] }' /proc/self/mountinfo | head -1)
	[ -n "$c" ] || return 0
	[ -e /sys/fs/fuse/connections/"$c" ] ||
		mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null || true
	[ -w /sys/fs/fuse/connections/"$c"/abort ] &&
		echo 1 >/sys/fs/fuse/connections/"$c"/abort
	log "aborted the FUSE connection of $1 (a thread of its killed daemon was stuck in the kernel)"
}

# kill_daemon MNT PID: SIGKILL and lazy unmount (simulated crash).  A
# daemon a test's helper killed already is reaped and unmounted the same.
# A killed daemon's thread may stay in the kernel, waiting for a lock
# that a request the daemon will never answer holds (a reverse
# invalidation, rft-inval, in a directory a rename is in): it holds
# /dev/fuse open, so the connection never ends by itself, and only its
# abort frees both (docs/operations.md, "A daemon that will not die").
kill_daemon() {
	local m=$1 pid=$2 i
	kill -KILL "$pid" 2>/dev/null || true
	for i in $(seq 1 30); do
		_t_gone "$pid" && break
		sleep 0.1
	done
	_t_gone "$pid" || _t_abort "$m"
	wait "$pid" 2>/dev/null || true
	fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	is_mounted "$m" && fail "$m still mounted after lazy unmount"
	log "killed daemon $pid, lazily unmounted $m"
}

# daemon_alive PID: fail unless it still runs.
daemon_alive() {
	pid_alive "$1" || {
		sed 's/^/    daemon: /' "$_T_LAST_LOG" >&2 || true
		fail "reftfsd (pid $1) died"
	}
}

# admin MNT ARGS...: run reftfs-admin -m MNT ARGS with a timeout.  MNT may
# be a control socket (*.sock: a witness's, which mounts nothing).
admin() {
	local m=$1
	shift
	case $m in
	*.sock) timeout 60 "$REFTFS_ADMIN" -s "$m" "$@" ;;
	*) timeout 60 "$REFTFS_ADMIN" -m "$m" "$@" ;;
	esac
}

# mount_tmpfs DIR SIZE: a private tmpfs (root only), unmounted at exit.
mount_tmpfs() {
	mkdir -p "$1"
	mount -t tmpfs -o "size=$2,mode=0755" tmpfs "$1" || fail "mount tmpfs on $1"
	_T_TMPFS+=("$1")
}

# tmpfs_dir NAME: set TMPFS_DIR to an empty directory on tmpfs: a private
# tmpfs mount when root, else a directory in /dev/shm.  Removed at exit.
tmpfs_dir() {
	if is_root; then
		TMPFS_DIR=$T_TMP/$1
		mount_tmpfs "$TMPFS_DIR" "${2:-4G}"
	else
		[ -d /dev/shm ] && [ -w /dev/shm ] || skip "no writable /dev/shm"
		TMPFS_DIR=$(mktemp -d "/dev/shm/reftfs-$TEST_NAME.XXXXXX")
		_T_RM+=("$TMPFS_DIR")
	fi
}

# check_manifest MANIFEST ROOT: every file of MANIFEST (JSON: path, size,
# sha256, as mmap_fuzz.py and pass_fuzz.py write it) under ROOT by its
# base name, with the same bytes.
check_manifest() {
	"$PY" - "$1" "$2" <<'PYEOF'
import hashlib, json, os, sys
bad = 0
for f in json.load(open(sys.argv[1])):
    p = os.path.join(sys.argv[2], os.path.basename(f["path"]))
    data = open(p, "rb").read()
    if len(data) != f["size"] or hashlib.sha256(data).hexdigest() != f["sha256"]:
        print(f"{p}: {len(data)} bytes, want {f['size']} with the manifest's sha256")
        bad += 1
sys.exit(1 if bad else 0)
PYEOF
}

# run_py SCRIPT ARGS...: run a helper under the system python with a timeout.
run_py() {
	local s=$1
	shift
	timeout "${PY_TIMEOUT:-240}" "$PY" "$HELPERS/$s" "$@"
}

# expect_eq GOT WANT WHAT
expect_eq() {
	[ "$1" = "$2" ] || fail "$3: got '$1', want '$2'"
}

# expect_metric FILE NAME OP VALUE: the unlabelled sample NAME in FILE
# (reftfs-admin metrics output) is there and is OP VALUE, OP one of test(1)'s
# integer comparisons (-eq, -ge, ...).  A missing metric is a failure.
expect_metric() {
	local v
	v=$(awk -v n="$2" '$1 == n { print $2 }' "$1")
	[ -n "$v" ] || fail "metric $2 missing from $(basename "$1")"
	[ "$v" "$3" "$4" ] || fail "metric $2 is $v, want $3 $4"
	log "metric $2 = $v"
}

# --- groups ---------------------------------------------------------------

# write_ranks DIR [SIZE...]: each node N of the group (M[]) writes
# $REF/rankN.SIZE, random bytes, as DIR/rankN.SIZE on its own mount, for
# each SIZE (default: $SIZES).
write_ranks() {
	local dir=$1 n s
	shift
	for n in "${!M[@]}"; do
		for s in ${@:-$SIZES}; do
			head -c "$s" /dev/urandom >"$REF/rank$n.$s"
			cp "$REF/rank$n.$s" "${M[$n]}/$dir/rank$n.$s"
		done
	done
}

# check_ranks WHAT DIR NODE...: every rank's files of write_ranks (sizes
# $SIZES) read byte-identical under DIR on each NODE's mount, else fail
# naming WHAT.
check_ranks() {
	local what=$1 dir=$2 n r s
	shift 2
	for n in "$@"; do
		for r in "${!M[@]}"; do
			for s in $SIZES; do
				cmp "$REF/rank$r.$s" "${M[$n]}/$dir/rank$r.$s" ||
					fail "$what: rank$r.$s differs on node $n"
			done
		done
	done
}

# free_ports N: print N TCP ports on 127.0.0.1 that were free a moment ago
# (each bound to port 0 and released; a daemon then binds it for good),
# each with the port above it free too: a group's namespace log listens on
# PORT + 1.
free_ports() { "$PY" "$SRCDIR/tools/free_ports.py" "$1"; }

# group_init N [W]: a group of N daemons on loopback, not started: a secret
# (SECRET), N free ports (PEERS, the --peers list) and mount points (M[],
# PID[] empty); and W witnesses, nodes N to N + W - 1 (WITNESSES, the
# --witnesses list; their M[] is the control socket, which admin takes).
group_init() {
	local n=$1 w=${2:-0} i ports
	SECRET=$T_TMP/secret
	new_secret "$SECRET"
	read -r -a ports <<<"$(free_ports $((n + w)))"
	PEERS=$(printf '127.0.0.1:%s,' "${ports[@]:0:n}")
	PEERS=${PEERS%,}
	WITNESSES=""
	if [ "$w" -gt 0 ]; then
		WITNESSES=$(printf '127.0.0.1:%s,' "${ports[@]:n}")
		WITNESSES=${WITNESSES%,}
	fi
	M=()
	PID=()
	for ((i = 0; i < n + w; i++)); do
		if [ "$i" -lt "$n" ]; then
			M+=("$(new_dir "m$i")")
		else
			M+=("$T_TMP/witness$i.sock")
		fi
		PID+=("")
	done
}

# group_node I [reftfsd options...]: start node I of the group made by
# group_init (in the foreground, its own state dir, --dead-after 2);
# sets PID[I].
group_node() {
	local i=$1
	shift
	start_daemon "${M[$i]}" --no-prefault --node "$i" --peers "$PEERS" \
		${WITNESSES:+--witnesses "$WITNESSES"} \
		--secret-file "$SECRET" --dead-after 2 \
		--state-dir "$T_TMP/state$i" "$@"
	PID[$i]=$DAEMON_PID
}

# start_witness I SOCK [reftfsd options...]: start reftfsd --witness (in
# the foreground) as node I with control socket SOCK; returns once the
# socket answers; sets PID[I] and DAEMON_LOG.
start_witness() {
	local i=$1 sock=$2 k
	shift 2
	_T_NDAEMON=$((_T_NDAEMON + 1))
	DAEMON_LOG="$T_TMP/daemon.$_T_NDAEMON.log"
	"$REFTFSD" --witness -f --node "$i" --ctl "$sock" "$@" \
		>"$DAEMON_LOG" 2>&1 &
	DAEMON_PID=$!
	_T_PIDS+=("$DAEMON_PID")
	_T_LAST_LOG=$DAEMON_LOG
	PID[$i]=$DAEMON_PID
	for k in $(seq 1 200); do
		admin "$sock" group >/dev/null 2>&1 && break
		daemon_alive "$DAEMON_PID"
		sleep 0.1
	done
	admin "$sock" group >/dev/null ||
		fail "witness $i's control socket $sock does not answer"
	log "witness $i started (pid $DAEMON_PID): reftfsd --witness --node $i $*"
}

# group_witness I [reftfsd options...]: start witness I of the group made
# by group_init N W, with its own state dir and control socket ${M[I]}.
group_witness() {
	local i=$1
	shift
	start_witness "$i" "${M[$i]}" --peers "$PEERS" \
		--witnesses "$WITNESSES" --secret-file "$SECRET" \
		--dead-after 2 --state-dir "$T_TMP/state$i" "$@"
}

# same_files REF DIR NODE...: every file of directory REF reads the same
# at ${M[NODE]}/DIR on each node.
same_files() {
	local ref=$1 dir=$2 n f
	shift 2
	for n in "$@"; do
		for f in "$ref"/*; do
			cmp "$f" "${M[$n]}/$dir/${f##*/}" ||
				fail "$dir/${f##*/} differs on node $n"
		done
	done
}

# rebuild_wait NODE...: reftfs-admin rebuild --wait on each node must
# exit 0 (its rebuild done, nothing lost).
rebuild_wait() {
	local n out
	for n in "$@"; do
		out=$(admin "${M[$n]}" rebuild --wait 2>&1) ||
			fail "rebuild --wait on node $n: $out"
	done
}

# stop_witness I: SIGTERM; it must exit 0 within 30 s.
stop_witness() {
	local i=$1 pid=${PID[$1]} k rc=0
	kill -TERM "$pid"
	for k in $(seq 1 300); do
		pid_alive "$pid" || break
		sleep 0.1
	done
	pid_alive "$pid" && fail "witness $i (pid $pid) still runs 30 s after SIGTERM"
	wait "$pid" || rc=$?
	[ "$rc" = 0 ] || fail "witness $i exited $rc after SIGTERM (want 0)"
	log "witness $i stopped"
}

# --- groups across network namespaces ---------------------------------------
#
# A group whose nodes each have a network of their own: one namespace per
# node (NETNS[i]) with a veth to a hub namespace (NETHUB) whose bridge
# joins them, addresses 10.77.0.(i+1)/24, all made by the test and
# deleted at its end.  The daemons enter only the node's network
# namespace (nsenter --net): their mounts, control sockets and files stay
# in the test's own mount namespace, where the test reads them.  Faults
# are made on the hub's side of a node's link: net_cut / net_heal (the
# link down and up: a partition), net_slow (a token bucket, tbf: a slow
# link that drops what overflows its queue: loss under load).

# need_netns: skip unless network namespaces, veth and a bridge can be made.
need_netns() {
	need_root "network namespaces"
	command -v ip >/dev/null && command -v nsenter >/dev/null ||
		skip "network namespaces: no ip(8) or nsenter(1)"
	local probe=rft-probe-$$
	ip netns add "$probe" 2>/dev/null ||
		skip "network namespaces: ip netns add fails here"
	if ! ip -n "$probe" link add rftbr type bridge 2>/dev/null ||
		! ip -n "$probe" link add rftv0 type veth peer name rftv1 2>/dev/null; then
		ip netns del "$probe"
		skip "network namespaces: no bridge or veth here"
	fi
	ip netns del "$probe"
}

# netns_group N: a group of N nodes, each in its own network namespace
# (like group_init: M[], PID[], SECRET, PEERS).
netns_group() {
	local n=$1 i ns
	SECRET=$T_TMP/secret
	new_secret "$SECRET"
	NETHUB=rft-$$-hub
	ip netns add "$NETHUB" || fail "ip netns add $NETHUB"
	_T_NETNS+=("$NETHUB")
	ip -n "$NETHUB" link add br0 type bridge
	ip -n "$NETHUB" link set br0 up
	M=()
	PID=()
	NETNS=()
	PEERS=""
	for ((i = 0; i < n; i++)); do
		ns=rft-$$-n$i
		ip netns add "$ns" || fail "ip netns add $ns"
		_T_NETNS+=("$ns")
		NETNS+=("$ns")
		ip -n "$NETHUB" link add "b$i" type veth peer name eth0 netns "$ns"
		ip -n "$NETHUB" link set "b$i" master br0
		ip -n "$NETHUB" link set "b$i" up
		ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0
		ip -n "$ns" link set eth0 up
		ip -n "$ns" link set lo up
		M+=("$(new_dir "m$i")")
		PID+=("")
		PEERS+="10.77.0.$((i + 1)):7070,"
	done
	PEERS=${PEERS%,}
	log "network namespaces: ${NETNS[*]}, hub $NETHUB (bridge br0)"
}

# netns_node I [options...]: start node I in its namespace (as group_node).
netns_node() {
	local i=$1 real=$REFTFSD
	shift
	printf '#!/bin/sh\nexec nsenter --net=/run/netns/%s %s "$@"\n' \
		"${NETNS[$i]}" "$real" >"$T_TMP/reftfsd-n$i"
	chmod +x "$T_TMP/reftfsd-n$i"
	REFTFSD=$T_TMP/reftfsd-n$i
	start_daemon "${M[$i]}" --no-prefault --node "$i" --peers "$PEERS" \
		--secret-file "$SECRET" --dead-after 2 \
		--state-dir "$T_TMP/state$i" "$@"
	REFTFSD=$real
	PID[$i]=$DAEMON_PID
}

# net_cut I / net_heal I: node I's link to the others down / up again.
net_cut() { ip -n "$NETHUB" link set "b$1" down; log "network: node $1 cut off"; }
net_heal() { ip -n "$NETHUB" link set "b$1" up; log "network: node $1 back"; }

# net_slow I RATE LIMIT: both ways of node I's link through a token
# bucket of RATE (tc's units, e.g. 20mbit) that queues LIMIT bytes and
# drops the rest; net_fast I takes it away.  net_drops I: packets dropped.
net_slow() {
	tc -n "$NETHUB" qdisc replace dev "b$1" root tbf rate "$2" \
		burst 16kb limit "$3"
	tc -n "${NETNS[$1]}" qdisc replace dev eth0 root tbf rate "$2" \
		burst 16kb limit "$3"
	log "network: node $1's link at $2, $3 queued at most"
}
net_fast() {
	tc -n "$NETHUB" qdisc del dev "b$1" root
	tc -n "${NETNS[$1]}" qdisc del dev eth0 root
	log "network: node $1's link unthrottled"
}
net_drops() {
	{
		tc -s -n "$NETHUB" qdisc show dev "b$1"
		tc -s -n "${NETNS[$1]}" qdisc show dev eth0
	} | grep -o 'dropped [0-9]*' | awk '{ n += $2 } END { print n + 0 }'
}

# new_secret FILE: a random group secret, mode 0600.
new_secret() {
	(umask 077 && head -c 48 /dev/urandom | base64 -w0 >"$1")
}

# group_states MNT: the state of every member as MNT's daemon sees it, in
# node order ("self up dead ..."), from reftfs-admin group --json.
group_states() {
	admin "$1" group --json | "$PY" -c '
import json, sys
g = json.load(sys.stdin)
print(" ".join(m["state"] for m in g["members"]))'
}

# group_log MNT FIELD: a field of the group object (log_term, log_leader,
# log_commit_index, log_role...) as MNT's daemon reports it.
group_log() {
	admin "$1" group --json | "$PY" -c '
import json, sys
print(json.load(sys.stdin)["group"][sys.argv[1]])' "$2"
}

# group_field MNT NODE FIELD: one field of member NODE as MNT sees it.
group_field() {
	admin "$1" group --json | "$PY" -c '
import json, sys
g = json.load(sys.stdin)
m = [m for m in g["members"] if m["node"] == sys.argv[1]][0]
print(m[sys.argv[2]])' "$2" "$3"
}

# _t_wait_output SECONDS WANT CMD...: until CMD prints WANT (every 0.1 s,
# SECONDS at most).  0 then; else 1, with what it printed last in GOT.
_t_wait_output() {
	local secs=$1 want=$2 i
	shift 2
	GOT=""
	for i in $(seq 1 $((secs * 10))); do
		GOT=$("$@" 2>/dev/null) || GOT=""
		[ "$GOT" = "$want" ] && return 0
		sleep 0.1
	done
	return 1
}

# wait_field MNT NODE FIELD WANT [SECONDS]: wait until group_field MNT NODE
# FIELD is WANT.  What a node learns from the registry comes at its next
# registry round, up to a backoff (1 s) after memcached is back, not with
# the namespace log's agreement.
wait_field() {
	local secs=${5:-20}
	_t_wait_output "$secs" "$4" group_field "$1" "$2" "$3" ||
		fail "node $2's $3 as $1 sees it: '$GOT' after ${secs}s," \
			"want '$4'"
}

# wait_group_log MNT FIELD WANT [SECONDS]: wait until group_log MNT FIELD
# is WANT.  A node learns a peer's address at its next registry round,
# which may come after the peer's first heartbeat.
wait_group_log() {
	local secs=${4:-20}
	_t_wait_output "$secs" "$3" group_log "$1" "$2" ||
		fail "$2 as $1 sees it: '$GOT' after ${secs}s, want '$3'"
}

# wait_states MNT WANT [SECONDS]: wait until group_states MNT is WANT.
wait_states() {
	local secs=${3:-20}
	_t_wait_output "$secs" "$2" group_states "$1" ||
		fail "group as $1 sees it: '$GOT' after ${secs}s, want '$2'"
}

# log_view MNT: "ROLE LEADER TERM COMMIT" of the namespace log as the
# daemon at MNT reports it.
log_view() {
	admin "$1" group --json | "$PY" -c '
import json, sys
g = json.load(sys.stdin)["group"]
print(g["log_role"], g["log_leader"], g["log_term"], g["log_commit_index"])'
}

# wait_agree SECONDS NODE...: until the daemons at ${M[NODE]} (the test's
# array of mount points, indexed by node id) all name the same leader, one
# of NODE..., in the same term with the same commit index, at least
# $MIN_COMMIT; sets LEADER, TERM and COMMIT.
MIN_COMMIT=0
wait_agree() {
	local secs=$1 i n views v l t c same
	shift
	for i in $(seq 1 $((secs * 10))); do
		views="" same=1 l="" t="" c=""
		for n in "$@"; do
			v=$(log_view "${M[$n]}" 2>/dev/null) || v="? ? ? 0"
			views="$views [$n: $v]"
			read -r _ vl vt vc <<<"$v"
			[ -z "$l" ] && { l=$vl; t=$vt; c=$vc; }
			[ "$vl" = "$l" ] && [ "$vt" = "$t" ] &&
				[ "$vc" = "$c" ] || same=0
		done
		if [ "$same" = 1 ] && [[ " $* " == *" $l "* ]] &&
			[ "$c" -ge "$MIN_COMMIT" ]; then
			LEADER=$l TERM=$t COMMIT=$c
			return 0
		fi
		sleep 0.1
	done
	fail "nodes $* do not agree on a leader after ${secs}s:$views"
}

# --- memcached (a group's registry) ----------------------------------------

# need_memcached: skip without a memcached binary; sets MEMCACHED.
need_memcached() {
	MEMCACHED=$(command -v memcached || true)
	[ -n "$MEMCACHED" ] || skip "memcached missing (apt-get install memcached)"
}

# start_memcached PORT: a fresh (empty) memcached on 127.0.0.1:PORT, as
# our child (stopped at exit like the daemons); sets MC_PID.
start_memcached() {
	local i
	# memcached refuses to run as root without -u.
	"$MEMCACHED" -p "$1" -l 127.0.0.1 -U 0 -u "$(id -un)" &
	MC_PID=$!
	_T_PIDS+=("$MC_PID")
	for i in $(seq 1 50); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	fail "memcached did not listen on $1"
}

# stop_memcached: SIGKILL the last one started (all it held is lost).
stop_memcached() {
	kill -KILL "$MC_PID"
	wait "$MC_PID" 2>/dev/null || true
}
