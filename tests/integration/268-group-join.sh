#!/usr/bin/env bash
# No unbounded wait on a group that has not formed (issue 27, item 4).  A
# node answers from the moment it mounts: stat of its mount point (and
# statfs) at once, every other call once it has joined the group's
# namespace, or EAGAIN after 10 s; --join-timeout SECONDS ends a daemon
# the group's log has not taken by then, exit 1, the reason logged.
# (Before, the mount showed in /proc/mounts and stat of it blocked in the
# kernel until the log was ready, with no limit.)
#
# 1. A lone node of a three-node group (the log's first start needs every
#    node), --join-timeout 10: stat, mountpoint(1) and df answer within
#    3 s; ls fails EAGAIN after about 10 s; the daemon exits 1 in time,
#    says why, and leaves no mount.
# 2. (full tier) The three together, --join-timeout 30: they join, ls
#    answers, and the timeout never fires once joined.
. "$(dirname "$0")/lib.sh"
need_fuse

# within SECS WHAT CMD...: CMD succeeds within SECS seconds.
within() {
	local secs=$1 what=$2 t0 rc=0
	shift 2
	t0=$(date +%s.%N)
	timeout "$secs" "$@" >/dev/null 2>"$T_TMP/err" || rc=$?
	[ "$rc" = 0 ] || fail "$what: exit $rc in $secs s: $(cat "$T_TMP/err")"
	log "$what: $("$PY" -c "print('%.2f' % ($(date +%s.%N) - $t0))") s"
}

# --- 1. a lone node --------------------------------------------------------
group_init 3
group_node 0 --join-timeout 10
T0=$SECONDS
within 3 "stat of the lone node's mount point" stat "${M[0]}"
within 3 "mountpoint(1)" mountpoint -q "${M[0]}"
within 3 "statfs (stat -f, what df asks)" stat -f "${M[0]}"
within 3 "reftfs-admin status" "$REFTFS_ADMIN" -m "${M[0]}" status
t0=$(date +%s.%N)
rc=0
timeout 20 ls "${M[0]}" >/dev/null 2>"$T_TMP/err" || rc=$?
secs=$("$PY" -c "print('%.1f' % ($(date +%s.%N) - $t0))")
[ "$rc" != 0 ] && [ "$rc" != 124 ] ||
	fail "ls of a node not joined: exit $rc after $secs s, want EAGAIN"
grep -q "Resource temporarily unavailable" "$T_TMP/err" ||
	fail "ls of a node not joined: $(cat "$T_TMP/err"), want EAGAIN"
"$PY" -c "import sys; sys.exit(not (8 <= $secs <= 15))" ||
	fail "ls of a node not joined failed after $secs s, want about 10"
log "ls before the join: EAGAIN after $secs s"
rc=0
for i in $(seq 1 200); do
	pid_alive "${PID[0]}" || break
	sleep 0.1
done
pid_alive "${PID[0]}" &&
	fail "--join-timeout 10: still running $((SECONDS - T0)) s after the mount"
wait "${PID[0]}" || rc=$?
expect_eq "$rc" 1 "exit status at --join-timeout"
grep -q "the group's namespace log did not take this node in 10 s (--join-timeout): .*; stopping" "$DAEMON_LOG" ||
	fail "the daemon did not say why it stopped: $(tail -5 "$DAEMON_LOG")"
is_mounted "${M[0]}" && fail "${M[0]} still mounted after --join-timeout"
log "--join-timeout 10: exit 1 after $((SECONDS - T0)) s, unmounted"
rm -rf "$T_TMP"/state*

# --- 2. the three together ---------------------------------------------------
# (full tier: every group test joins three nodes already)
if [ "$(by_tier quick full full)" = full ]; then
	group_init 3
	for n in 0 1 2; do group_node "$n" --join-timeout 30; done
	wait_states "${M[0]}" "self up up"
	wait_agree 30 0 1 2
	mkdir "${M[0]}/ck"
	echo joined >"${M[1]}/ck/f"
	for n in 0 1 2; do
		expect_eq "$(cat "${M[$n]}/ck/f")" joined "ck/f on node $n"
	done
	sleep 2 # well inside 30 s: a joined node never times out
	for n in 0 1 2; do
		pid_alive "${PID[$n]}" || fail "node $n stopped after it joined"
	done
	log "three nodes joined within --join-timeout 30: files read everywhere"
fi
