#!/usr/bin/env bash
# Mounting the way mount(8) and fstab do: `mount -t fuse.reftfs SRC MNT -o
# mem=...,persist=...` makes mount.fuse3 run `reftfs SRC MNT -o
# rw,...,mem=...` (the program named by the subtype, from PATH).  Checked
# through mount.fuse3 with a `reftfs` link to the built daemon on PATH,
# and through mount(8) with the old `prog#source` form.  The daemon must go
# to the background once the mount is ready and take -o keys.
. "$(dirname "$0")/lib.sh"
need_fuse
command -v mount.fuse3 >/dev/null || skip "mount.fuse3 missing (apt-get install fuse3)"

MNT=$(new_dir mnt)
PERSIST=$(new_dir persist)
BIN=$(new_dir bin)
ln -s "$REFTFSD" "$BIN/reftfs"

# 1. What `mount -t fuse.reftfs reftfs MNT -o ...` runs.
_T_MOUNTS+=("$MNT")
rc=0
PATH=$BIN:$PATH timeout 60 mount.fuse3 reftfs "$MNT" -t fuse.reftfs \
	-o "rw,noatime,nodev,nosuid,mem=128M,persist=$PERSIST,keep=2" \
	>"$T_TMP/mount.out" 2>&1 || rc=$?
cat "$T_TMP/mount.out" >&2
[ "$rc" = 0 ] || fail "mount.fuse3 ... -t fuse.reftfs exited $rc"
is_mounted "$MNT" || fail "$MNT not mounted when mount.fuse3 returned"
expect_eq "$(mount_type "$MNT")" fuse.reftfs "filesystem type"
pid=$(daemon_pids_for "$MNT" | sed -n 1p)
[ -n "$pid" ] || fail "no daemon process for $MNT"
_T_PIDS+=("$pid")
total=$(($(stat -f -c '%b * %S' "$MNT")))
[ $((total - (128 << 20))) -le $((4 << 20)) ] && [ $(((128 << 20) - total)) -le $((4 << 20)) ] ||
	fail "-o mem=128M not applied: statfs total $total"
grep " $MNT " /proc/mounts | grep nosuid >/dev/null || fail "-o nosuid not applied: $(grep " $MNT " /proc/mounts)"
mkdir "$MNT/step_1"
head -c 1000000 /dev/urandom | tee "$T_TMP/data" >"$MNT/step_1/data"
admin "$MNT" status >/dev/null || fail "admin status on a mount made by mount.fuse3"
_T_LAST_LOG=/dev/null
stop_daemon "$MNT" "$pid" 60
cmp "$PERSIST/step_1/data" "$T_TMP/data" || fail "-o persist=DIR not applied (no write-back on unmount)"

# 2. mount(8) itself, root only: mount -t fuse 'PROGRAM#SOURCE' MNT -o ...
if is_root && command -v mount >/dev/null; then
	rc=0
	timeout 60 mount -t fuse "$REFTFSD#reftfs" "$MNT" \
		-o "mem=64M,persist=$PERSIST,allow_other,default_permissions" \
		>"$T_TMP/mount8.out" 2>&1 || rc=$?
	cat "$T_TMP/mount8.out" >&2
	[ "$rc" = 0 ] || fail "mount -t fuse '$REFTFSD#reftfs' exited $rc"
	expect_eq "$(mount_type "$MNT")" fuse.reftfs "filesystem type (mount(8))"
	grep " $MNT " /proc/mounts | grep allow_other >/dev/null || fail "allow_other not applied"
	pid=$(daemon_pids_for "$MNT" | sed -n 1p)
	[ -n "$pid" ] || fail "no daemon for the mount(8) mount"
	_T_PIDS+=("$pid")
	cmp "$MNT/step_1/data" "$T_TMP/data" || fail "persisted data not visible via mount(8) mount"
	timeout 60 umount "$MNT" || fail "umount $MNT"
	for i in $(seq 1 100); do pid_alive "$pid" || break; sleep 0.1; done
	pid_alive "$pid" && fail "daemon still running 10 s after umount"

	# 3. An fstab entry (mount -T FILE reads it instead of /etc/fstab).
	printf '%s %s fuse mem=64M,persist=%s,keep=2,nofail,_netdev 0 0\n' \
		"$REFTFSD#reftfs" "$MNT" "$PERSIST" >"$T_TMP/fstab"
	rc=0
	timeout 60 mount -T "$T_TMP/fstab" "$MNT" >"$T_TMP/mount9.out" 2>&1 || rc=$?
	cat "$T_TMP/mount9.out" >&2
	[ "$rc" = 0 ] || fail "mount -T fstab $MNT exited $rc ($(cat "$T_TMP/fstab"))"
	expect_eq "$(mount_type "$MNT")" fuse.reftfs "filesystem type (fstab)"
	pid=$(daemon_pids_for "$MNT" | sed -n 1p)
	_T_PIDS+=("$pid")
	cmp "$MNT/step_1/data" "$T_TMP/data" || fail "persisted data not visible via the fstab mount"
	_T_LAST_LOG=/dev/null
	stop_daemon "$MNT" "$pid" 60
else
	log "not root: mount(8) part skipped"
fi
log "PASS"
