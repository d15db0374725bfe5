#!/usr/bin/env bash
# Files that cannot come back (issue 30, parts 3 and 6), with three daemons
# on loopback.
#
# - A file whose owner died right after close, before it was protected
#   (--protect-bw keeps its copy slow): once the owner's replacement says
#   LOST, every node's ls shows it "lost" (and status, metrics and the
#   checkpoint count it), reads give EIO at once, `rebuild --wait` and
#   `protect --wait` on the replacement end with exit 1 naming it, and a
#   write or an unlink of it ends the mark.
# - A node only hung (SIGSTOP) past --dead-after keeps its memory: its
#   unprotected file is never marked lost.
# - A graceful stop (SIGTERM, fusermount3 -u) of a node with a sealed
#   file not yet protected: with time enough it finishes the protection
#   first, exits 0, and the others read the file from its copy; when
#   --stop-wait runs out it names the file in its log, exits 1, and the
#   others show it "lost" at once, not "sealed".
# - A holder without memory (xor, replicate:2): `protect --wait` on the
#   writer says who refuses and why while it waits, the writer logs it
#   once per file and counts it, and its retries send only the pieces
#   the holder lacks.
. "$(dirname "$0")/lib.sh"
need_fuse

group_init 3
REF=$(new_dir ref)
# replicate:2: node n's copies go to node n + 1 (ring placement).
start_node() { group_node "$1" --mem 128M --protect replicate:2 "${@:2}"; }

# ls_state MNT PATH: the state reftfs-admin ls gives the file PATH on MNT.
ls_state() {
	admin "$1" ls "$2" --json | "$PY" -c '
import json, sys
print(json.load(sys.stdin)[0]["state"])'
}

# wait_state MNT PATH WANT [SECONDS]: until ls_state MNT PATH is WANT.
wait_state() {
	local secs=${4:-20}
	_t_wait_output "$secs" "$3" ls_state "$1" "$2" ||
		fail "$2 on $1: state '$GOT' after ${secs}s, want '$3'"
}

# status_get MNT EXPR: a Python expression over status --json (as s).
status_get() {
	admin "$1" status --json | "$PY" -c '
import json, sys
s = json.load(sys.stdin)
print(eval(sys.argv[1]))' "$2"
}

# read_err PATH: "ok" when PATH reads, else the errno's name; at most
# SECONDS (default 30) of waiting.
read_err() {
	timeout "${2:-30}" "$PY" -c '
import errno, sys
try:
    open(sys.argv[1], "rb").read()
    print("ok")
except OSError as e:
    print(errno.errorcode[e.errno])' "$1" || echo "timeout"
}

start_node 0
start_node 1 --protect-bw 16K
start_node 2
wait_states "${M[0]}" "self up up"
MIN_COMMIT=2
wait_agree 30 0 1 2
mkdir "${M[0]}/ck"

# --- a file whose owner died before it was protected ----------------------
head -c 4096 /dev/urandom >"$REF/kept"
cp "$REF/kept" "${M[1]}/ck/kept"
admin "${M[1]}" protect --wait >/dev/null ||
	fail "protect --wait of ck/kept on node 1"
# 3 MiB at 16 KiB/s: minutes to protect (--protect-bw lets a piece of
# 1 MiB go after a second, in debt; the next waits a minute); node 1
# dies long before.
for f in gone gone2; do
	head -c 3145728 /dev/urandom >"$REF/$f"
	cp "$REF/$f" "${M[1]}/ck/$f"
done
wait_state "${M[0]}" /ck/gone sealed 5
kill_daemon "${M[1]}" "${PID[1]}"
wait_states "${M[0]}" "self dead up" 30
start_node 1
for n in 0 1 2; do
	for f in gone gone2; do wait_state "${M[$n]}" "/ck/$f" lost 30; done
	cmp "$REF/kept" "${M[$n]}/ck/kept" || fail "ck/kept differs on node $n"
done
log "node 1 replaced: its unprotected files show lost on every node"

t0=$(date +%s)
got=$(read_err "${M[0]}/ck/gone")
expect_eq "$got" EIO "reading lost ck/gone on node 0"
[ $(($(date +%s) - t0)) -le 2 ] ||
	fail "reading lost ck/gone on node 0 took $(($(date +%s) - t0)) s"
for n in 0 1 2; do
	expect_eq "$(status_get "${M[$n]}" 's["namespace"]["lost_files"]')" 2 \
		"status: lost files on node $n"
	expect_eq "$(status_get "${M[$n]}" \
		'[(c["state"], c["lost_files"]) for c in s["checkpoints"] if c["name"] == "ck"][0]')" \
		"('incomplete', 2)" "status: checkpoint ck on node $n"
done
# A job script's wait for it ends at once, exit 1, saying why.
rc=0
out=$(admin "${M[2]}" wait /ck --protected --timeout 30 2>&1) || rc=$?
expect_eq "$rc" 1 "wait /ck --protected with 2 files lost: exit status"
grep -q "incomplete: 2 files lost" <<<"$out" || fail "wait /ck --protected: $out"
admin "${M[2]}" metrics >"$T_TMP/metrics"
expect_metric "$T_TMP/metrics" reftfs_files_lost -eq 2
# Told once each as the record's writer changed them (EV_LOST,
# EV_PROTECTED): the two lost, ck/kept protected.
expect_metric "$T_TMP/metrics" reftfs_lost_versions_total -eq 2
expect_metric "$T_TMP/metrics" reftfs_protected_versions_total -ge 1
admin "${M[2]}" status | grep "lost .*2 files whose data is gone" >/dev/null ||
	fail "status on node 2 does not count the lost files"

# rebuild --wait and protect --wait end, exit 1, and name the files.
for cmd in rebuild protect; do
	rc=0
	out=$(admin "${M[1]}" "$cmd" --wait 2>&1) || rc=$?
	[ "$rc" = 1 ] || fail "$cmd --wait on node 1 exited $rc, want 1: $out"
	for f in gone gone2; do
		grep -q "$cmd: lost: /ck/$f\$" <<<"$out" ||
			fail "$cmd --wait on node 1 does not name ck/$f: $out"
	done
	grep -q "2 files of this node are lost" <<<"$out" ||
		fail "$cmd --wait on node 1 does not say why: $out"
done
log "rebuild --wait and protect --wait on node 1: exit 1, the lost files named"

# A write (from another node) and an unlink end the mark.
head -c 70000 /dev/urandom >"$REF/gone"
cp "$REF/gone" "${M[0]}/ck/gone"
rm "${M[2]}/ck/gone2"
for n in 0 1 2; do
	got=$(ls_state "${M[$n]}" /ck/gone)
	[ "$got" = sealed ] || [ "$got" = protected ] ||
		fail "ck/gone written again: '$got' on node $n"
	cmp "$REF/gone" "${M[$n]}/ck/gone" || fail "ck/gone differs on node $n"
	expect_eq "$(status_get "${M[$n]}" 's["namespace"]["lost_files"]')" 0 \
		"status: lost files on node $n after the write and the unlink"
done
out=$(admin "${M[1]}" rebuild --wait 2>&1) ||
	fail "rebuild --wait on node 1 with nothing lost: $out"
log "written again and unlinked: nothing lost, rebuild --wait exits 0"

# --- a graceful stop protects first ---------------------------------------
# Node 1 again, its copies paced at 1 MiB/s: a 2 MiB file is protected
# about two seconds after its close, so SIGTERM right after the close
# must wait for it.
stop_sig() {
	local n=$1 sig=$2 rc=0
	kill "-$sig" "${PID[$n]}"
	wait "${PID[$n]}" || rc=$?
	is_mounted "${M[$n]}" && fail "node $n still mounted after SIG$sig"
	STOP_RC=$rc
}
stop_daemon "${M[1]}" "${PID[1]}"
start_node 1 --protect-bw 1M --stop-wait 30
admin "${M[1]}" rebuild --wait >/dev/null || fail "rebuild --wait on node 1"
head -c 2097152 /dev/urandom >"$REF/slow"
cp "$REF/slow" "${M[1]}/ck/slow"
stop_sig 1 TERM
expect_eq "$STOP_RC" 0 "node 1's exit after SIGTERM with time to protect"
grep -q "stop: protecting [0-9]* sealed files of this node first" "$DAEMON_LOG" ||
	fail "node 1 did not say it protects before it stops"
wait_states "${M[0]}" "self dead up" 30
for n in 0 2; do
	expect_eq "$(read_err "${M[$n]}/ck/slow")" ok "reading ck/slow on node $n"
	cmp "$REF/slow" "${M[$n]}/ck/slow" || fail "ck/slow differs on node $n"
done
log "SIGTERM: node 1 protected ck/slow first, exited 0; the others read it"

# With --stop-wait 2 and 16 KiB/s, it cannot: named, exit 1, lost.
start_node 1 --protect-bw 16K --stop-wait 2
admin "${M[1]}" rebuild --wait >/dev/null || fail "rebuild --wait on node 1"
wait_states "${M[0]}" "self up up" 30
# But first: a node only hung (SIGSTOP past --dead-after) keeps its
# memory, so its unprotected file is never marked lost, and reads right
# once it runs again.
head -c 3145728 /dev/urandom >"$REF/hung"
cp "$REF/hung" "${M[1]}/ck/hung"
kill -STOP "${PID[1]}"
wait_states "${M[0]}" "self dead up" 30
sleep 1
for n in 0 2; do
	expect_eq "$(ls_state "${M[$n]}" /ck/hung)" sealed "ck/hung on node $n while node 1 is stopped"
done
kill -CONT "${PID[1]}"
wait_states "${M[0]}" "self up up" 30
for n in 0 2; do
	expect_eq "$(ls_state "${M[$n]}" /ck/hung)" sealed "ck/hung on node $n once node 1 runs again"
	cmp "$REF/hung" "${M[$n]}/ck/hung" || fail "ck/hung differs on node $n"
done
log "node 1 hung past --dead-after and back: ck/hung not lost, read right"
head -c 3145728 /dev/urandom >"$REF/late"
cp "$REF/late" "${M[1]}/ck/late"
LOG1=$DAEMON_LOG
stop_sig 1 TERM
expect_eq "$STOP_RC" 1 "node 1's exit after SIGTERM with ck/late unprotected"
for f in hung late; do
	grep -q "stop: left unprotected: ck/$f\$" "$LOG1" ||
		fail "node 1 did not name ck/$f at its stop: $(tail -5 "$LOG1")"
done
for n in 0 2; do
	wait_state "${M[$n]}" /ck/late lost 5
	wait_state "${M[$n]}" /ck/hung lost 5
	expect_eq "$(read_err "${M[$n]}/ck/late" 5)" EIO "reading ck/late on node $n"
done
log "SIGTERM past --stop-wait: ck/late named, exit 1, lost on the others"

# fusermount3 -u is a graceful stop too.
start_node 1 --protect-bw 16K --stop-wait 1
head -c 3145728 /dev/urandom >"$REF/late2"
cp "$REF/late2" "${M[1]}/ck/late2"
LOG1=$DAEMON_LOG
fusermount3 -u "${M[1]}"
rc=0
wait "${PID[1]}" || rc=$?
expect_eq "$rc" 1 "node 1's exit after fusermount3 -u with ck/late2 unprotected"
grep -q "stop: left unprotected: ck/late2\$" "$LOG1" ||
	fail "node 1 did not name ck/late2 at its unmount"
wait_state "${M[0]}" /ck/late2 lost 5
log "fusermount3 -u past --stop-wait: ck/late2 named, exit 1, lost on the others"

start_node 1
out=$(admin "${M[1]}" rebuild --wait 2>&1) && fail "rebuild --wait with ck/late lost exited 0"
grep -q "rebuild: lost: /ck/late\$" <<<"$out" || fail "rebuild --wait: $out"
for n in 0 1 2; do stop_daemon "${M[$n]}" "${PID[$n]}"; done
rm -rf "$T_TMP"/state*	# a new group below, not this one's log

# --- a holder without memory ------------------------------------------------
# holder_full SCHEME H FILL: a new group of three with --protect SCHEME,
# node H a holder of node 0's copies (replicate:2) or of rows of half of
# its pieces (xor), with 16 MiB of which its own file takes FILL MiB, so
# that it refuses some of node 0's 8 MiB file.  Node 0's retries send
# only the pieces H refused, protect --wait on node 0 says who and why
# while it waits, node 0 logs it once, and once H has room the file is
# protected and the wait ends.
holder_full() {
	local scheme=$1 h=$2 fill=$3 what n i rc out r0 b0 t0 s0 r1 b1 t1 s1
	group_init 3
	for n in 0 1 2; do
		if [ "$n" = "$h" ]; then
			group_node "$n" --mem 16M --protect "$scheme"
		else
			group_node "$n" --mem 128M --protect "$scheme"
		fi
		[ "$n" = 0 ] && LOG0=$DAEMON_LOG
	done
	wait_states "${M[0]}" "self up up"
	wait_agree 30 0 1 2
	mkdir "${M[0]}/ck"
	head -c $((fill << 20)) /dev/urandom >"${M[$h]}/ck/fill"
	admin "${M[$h]}" protect --wait >/dev/null ||
		fail "$scheme: protect --wait of ck/fill on node $h"
	head -c $((8 << 20)) /dev/urandom >"$REF/big"
	cp "$REF/big" "${M[0]}/ck/big"
	# Its retries (1 s, 2 s, 4 s apart) send node H only what it
	# lacks: per retry, the pieces it refused, not the file again.
	# From the first retry on (the first try sends every piece).
	for i in $(seq 1 300); do
		read -r r0 b0 t0 s0 <<<"$(counters "$h")"
		[ "$t0" -ge 1 ] && [ "$r0" -ge 1 ] && break
		sleep 0.1
	done
	[ "$t0" -ge 1 ] && [ "$r0" -ge 1 ] ||
		fail "$scheme: node $h refused nothing of ck/big in 30 s"
	read -r r0 b0 t0 s0 <<<"$(settled "$h")"
	for i in $(seq 1 300); do
		read -r r1 b1 t1 s1 <<<"$(counters "$h")"
		[ "$t1" -ge $((t0 + 2)) ] && [ "$r1" -gt "$r0" ] && break
		sleep 0.1
	done
	[ "$t1" -ge $((t0 + 2)) ] && [ "$r1" -gt "$r0" ] ||
		fail "$scheme: node 0 tried $((t1 - t0)) times again in 30 s, node $h refused $((r1 - r0)) pieces"
	read -r r1 b1 t1 s1 <<<"$(settled "$h")"
	log "$scheme: $((t1 - t0)) retries: node 0 sent $((s1 - s0)) bytes ($((b1 - b0)) came to node $h), node $h refused $((r1 - r0)) pieces"
	if [ "$scheme" = xor ]; then
		# Folds it took are not sent again: a piece's bytes per
		# refusal (before: its whole share each time).  Counted
		# between whole retries (settled), from what node 0 sent
		# to protect: in a retry only node H's refused folds.
		[ $(((s1 - s0) / (r1 - r0))) -le $(((1 << 20) + (64 << 10))) ] ||
			fail "xor: node 0 sent node $h $(((s1 - s0) / (r1 - r0))) bytes per refused fold: it sends again what was folded"
	else
		# A holder counts a piece it has already as refused too:
		# per retry at most half the file (before: all of it).
		[ $(((s1 - s0) / (t1 - t0))) -le $((4 << 20)) ] ||
			fail "$scheme: node 0 sent $(((s1 - s0) / (t1 - t0))) bytes per retry: it sends again what node $h has"
	fi
	# protect --wait says who refuses and why, and waits (the holder
	# may make room); status and metrics count the file.
	what="copies"
	[ "$scheme" = xor ] && what="parity folds"
	rc=0
	out=$(timeout 8 "$REFTFS_ADMIN" -m "${M[0]}" protect --wait 2>&1) || rc=$?
	[ "$rc" = 124 ] || fail "$scheme: protect --wait on node 0 with node $h full exited $rc, want it still waiting (124): $out"
	grep -q "protect: waiting: 1 files of this node are not protected: node $h refused the $what of 1 of them (No space left on device: no memory for them there)" <<<"$out" ||
		fail "$scheme: protect --wait on node 0 with node $h full does not say why: $out"
	log "$scheme: protect --wait with a holder full: $(grep refused <<<"$out")"
	# (0 for the moment a retry runs.)
	for i in $(seq 1 50); do
		admin "${M[0]}" metrics >"$T_TMP/metrics"
		grep -qx "reftfs_protect_stalled_files 1" "$T_TMP/metrics" && break
		sleep 0.1
	done
	expect_metric "$T_TMP/metrics" reftfs_protect_stalled_files -eq 1
	what="copy"
	[ "$scheme" = xor ] && what="parity folds"
	n=$(grep -c "protect: ck/big: node $h refused its $what (No space left on device: no memory there)" "$LOG0") || true
	expect_eq "$n" 1 "$scheme: node 0's log lines about node $h refusing ck/big"
	# Room again on node H: the next retry (at most 30 s later)
	# protects it, and protect --wait ends.
	rm "${M[$h]}/ck/fill"
	out=$(admin "${M[0]}" protect --wait 2>&1) ||
		fail "$scheme: protect --wait on node 0 once node $h has room: $out"
	for n in 1 2; do
		cmp "$REF/big" "${M[$n]}/ck/big" || fail "$scheme: ck/big differs on node $n"
	done
	log "$scheme: node $h with room again: ck/big protected, read back everywhere"
	for n in 0 1 2; do stop_daemon "${M[$n]}" "${PID[$n]}"; done
	rm -rf "$T_TMP"/state*
}

# counters H: "REFUSED BYTES_IN RETRIES SENT": the pieces node H refused
# (folds under xor), the bytes it had from node 0, and node 0's retries
# and bytes sent.
# settled H: counters H once node H's refusals and node 0's retries and
# bytes sent held still for half a second: between two retries, none
# half done.
settled() {
	local c d i
	c=$(counters "$1")
	for i in $(seq 1 60); do
		sleep 0.5
		d=$(counters "$1")
		[ "$(cut -d' ' -f1,3,4 <<<"$c")" = "$(cut -d' ' -f1,3,4 <<<"$d")" ] &&
			break
		c=$d
	done
	echo "$d"
}

counters() {
	local a b
	a=$(admin "${M[$1]}" group --json | "$PY" -c '
import json, sys
g = json.load(sys.stdin)
m = [m for m in g["members"] if m["node"] == "0"][0]
gr = g["group"]
r = gr.get("parity_refused")
print(gr["protect_pieces_refused"] if r is None else r, m["bytes_in"])')
	b=$(admin "${M[0]}" group --json | "$PY" -c '
import json, sys
g = json.load(sys.stdin)["group"]
print(g["protect_retries"], g["protect_bytes_sent"])')
	echo "$a $b"
}

# xor: half of node 0's pieces have their rows on node 2, which has room
# for two rows.  replicate:2: node 0's copies go to node 1, which has
# room for six of its eight pieces.
# (The quick tier: xor alone; copies are refused as folds are.)
holder_full xor 2 14
if [ "$(by_tier quick full full)" = full ]; then
	holder_full replicate:2 1 10
fi
