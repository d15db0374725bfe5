#!/usr/bin/env bash
# fallocate(2) through a real mount: mode 0, KEEP_SIZE and PUNCH_HOLE give
# the same bytes and sizes as on a local file system (one sequence of
# util-linux fallocate(1), writes and truncates, run on both and compared),
# other modes are refused with EOPNOTSUPP, preallocation takes budget and a
# punch gives it back (statfs), a preallocation larger than the budget is
# ENOSPC with the file unchanged, and a punched file is written back to the
# persist dir and reads back the same after a remount.
. "$(dirname "$0")/lib.sh"
need_fuse
command -v fallocate >/dev/null || skip "fallocate(1) (util-linux) not installed"

MNT=$(new_dir mnt)
PERSIST=$(new_dir persist)
LOCAL=$(new_dir local)
MiB=$((1 << 20))
head -c $((3 * MiB + 4321)) /dev/urandom >"$T_TMP/data"

# steps DIR: the sequence, wherever it runs.
steps() {
	local d=$1
	cp "$T_TMP/data" "$d/f"
	fallocate -o $((MiB / 2)) -l $((2 * MiB)) "$d/g"     # mode 0, new file
	fallocate -n -o $((4 * MiB)) -l $((3 * MiB)) "$d/f" # KEEP_SIZE past EOF
	fallocate -o $((5 * MiB)) -l 1000 "$d/f"            # mode 0: grows
	fallocate -p -o $((MiB / 3)) -l $((2 * MiB)) "$d/f" # punch: edges, a whole piece
	fallocate -p -o $((5 * MiB - 10)) -l $MiB "$d/f"    # punch across EOF
	printf 'tail' | dd of="$d/g" bs=1 seek=$((2 * MiB)) conv=notrunc status=none
	fallocate -p -o 0 -l $((MiB / 2 + 7)) "$d/g"        # punch the head
	truncate -s $((6 * MiB)) "$d/f"                     # over the preallocation
	fallocate -o 100 -l 10 "$d/f"                       # inside: nothing changes
}

# same NAME: the file NAME on the mount and in the local dir agree.
same() {
	local a b
	a=$(stat -c %s "$MNT/$1")
	b=$(stat -c %s "$LOCAL/$1")
	expect_eq "$a" "$b" "size of $1"
	cmp "$MNT/$1" "$LOCAL/$1" || fail "$1 differs from the local file system's"
}

start_daemon "$MNT" --mem 64M --persist "$PERSIST" --enospc-wait 300
steps "$LOCAL"
steps "$MNT"
same f
same g

# Refused modes: as tmpfs, EOPNOTSUPP, and nothing changed.
for flag in -z -c -i; do
	if out=$(fallocate "$flag" -o 0 -l $MiB "$MNT/f" 2>&1); then
		fail "fallocate $flag succeeded on reftfs"
	fi
	case $out in
	*"not supported"*) ;;
	*) fail "fallocate $flag: '$out', want 'Operation not supported'" ;;
	esac
done
same f

# Budget: 16 MiB preallocated shows in statfs, a punch gives it back.
# Passthrough copies sealed files in the background (f and g, then "pre"
# once its writes stop), drops a copy at a writer's open and keeps its
# pages as a spare, and gives copies up under pressure: all of it budget
# that moves while the test looks (1 run in 20 or so failed).  So the
# budget is read once passthrough is still (nothing waiting, the same
# twice 300 ms apart), and what its copies hold counts as free.
avail() {
	local i a b=-1
	for i in $(seq 1 50); do
		a=$b
		b=$("$REFTFS_ADMIN" -m "$MNT" status --json |
			"$PY" -c 'import json, sys
f = json.load(sys.stdin)["fuse"]
print(-2 if f["passthrough_waiting"] else f["passthrough_held_bytes"])')
		b=$((b < 0 ? b : b + $(stat -f -c '%f * %S' "$MNT")))
		[ "$a" = "$b" ] && [ "$b" -ge 0 ] && break
		sleep 0.3
	done
	echo "$b"
}
free0=$(avail)
fallocate -l $((16 * MiB)) "$MNT/pre"
free1=$(avail)
[ $((free0 - free1)) -ge $((16 * MiB)) ] ||
	fail "16 MiB preallocated took only $((free0 - free1)) bytes of budget"
fallocate -p -o 0 -l $((16 * MiB)) "$MNT/pre"
free2=$(avail)
[ "$free2" -ge "$free0" ] || fail "a punch of all 16 MiB gave back $((free2 - free1)) bytes of $((free0 - free1))"
expect_eq "$(stat -c %s "$MNT/pre")" $((16 * MiB)) "size after the punch"
cmp -n $((16 * MiB)) "$MNT/pre" /dev/zero || fail "a punched file reads non-zero bytes"

# More than the budget: ENOSPC, the file unchanged.
sum=$(sha256sum <"$MNT/f")
if out=$(fallocate -o 0 -l $((200 * MiB)) "$MNT/f" 2>&1); then
	fail "fallocate of 200 MiB on a 64M mount succeeded"
fi
case $out in
*"No space left"*) ;;
*) fail "fallocate of 200 MiB: '$out', want ENOSPC" ;;
esac
expect_eq "$(sha256sum <"$MNT/f")" "$sum" "f after a refused fallocate"
same f
daemon_alive "$DAEMON_PID"

# Written back and read again after a remount.
rm "$MNT/pre"
stop_daemon "$MNT" "$DAEMON_PID"
cmp "$PERSIST/f" "$LOCAL/f" || fail "the persist dir's f differs"
cmp "$PERSIST/g" "$LOCAL/g" || fail "the persist dir's g differs"
start_daemon "$MNT" --mem 64M --persist "$PERSIST"
same f
same g
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
