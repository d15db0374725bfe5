#!/usr/bin/env bash
# Data in a --registry group (issue 8): three daemons that find each other
# only through a real memcached, --protect replicate:2; files written on
# each node read back byte-identical on every node; memcached killed (soft
# state: nothing is lost, the group goes on); a node SIGKILLed and its
# replacement started at another port, found through memcached again:
# every file reads back on every node, before and after its rebuild.
. "$(dirname "$0")/lib.sh"
need_fuse
need_memcached

SECRET=$T_TMP/secret
new_secret "$SECRET"
read -r MC P0 P1 P2 P3 <<<"$(free_ports 5)"
PORT=("$P0" "$P1" "$P2")
M=("$(new_dir m0)" "$(new_dir m1)" "$(new_dir m2)")
PID=("" "" "")
REF=$(new_dir ref)

start_node() { # start_node NODE [PORT]
	local i=$1 port=${2:-${PORT[$1]}}
	start_daemon "${M[$i]}" --mem 128M --no-prefault --node "$i" \
		--registry "127.0.0.1:$MC" --group job47 --group-size 3 \
		--listen "127.0.0.1:$port" --secret-file "$SECRET" \
		--dead-after 2 --state-dir "$T_TMP/state$i" \
		--protect replicate:2
	PID[$i]=$DAEMON_PID
}

start_memcached "$MC"
for n in 0 1 2; do start_node "$n"; done
wait_states "${M[0]}" "self up up" 30
MIN_COMMIT=2
wait_agree 30 0 1 2

SIZES="100 1048593 3145728"
mkdir "${M[0]}/ckpt"
write_ranks ckpt
check_all() { check_ranks "$1" ckpt "${@:2}"; }
check_all "written" 0 1 2
for n in 0 1 2; do
	admin "${M[$n]}" protect --wait >/dev/null || fail "protect --wait on node $n"
done
log "every rank's files on every node, protected"

stop_memcached
SIZES="$SIZES 2000000"
write_ranks ckpt 2000000
check_all "memcached gone" 0 1 2
for n in 0 1 2; do
	admin "${M[$n]}" protect --wait >/dev/null || fail "protect --wait on node $n without memcached"
done
log "memcached killed: files written, protected and read on every node"

start_memcached "$MC"
kill_daemon "${M[1]}" "${PID[1]}"
wait_states "${M[0]}" "self dead up" 30
check_all "node 1 dead" 0 2
start_node 1 "$P3"
check_all "replacement at another port" 1 0 2
admin "${M[1]}" rebuild --wait >/dev/null || fail "rebuild --wait on node 1"
check_all "after the rebuild" 1 0 2
log "node 1 replaced at another port through the registry: every file read back, before and after its rebuild"
