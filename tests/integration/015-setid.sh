#!/usr/bin/env bash
# Set-user-ID and set-group-ID bits (issue 7, defect 17): a write or
# truncate by an unprivileged user, and any chown, clear them as on tmpfs;
# root's own writes keep them.  The same steps run on tmpfs side by side
# and every resulting mode must match.
. "$(dirname "$0")/lib.sh"
need_fuse
need_root
command -v setpriv >/dev/null || skip "setpriv not installed (util-linux)"

MNT=$(new_dir mnt)
start_daemon "$MNT" -o allow_other,default_permissions
tmpfs_dir ref 64M
chmod 0755 "$T_TMP"
chmod 0777 "$MNT" "$TMPFS_DIR"

as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

# steps DIR: the sequence; prints "name mode" for each file.
steps() {
	local d=$1 f
	for f in w t c r g; do
		echo x >"$d/$f"
		chmod 06777 "$d/$f"
	done
	chmod 02767 "$d/g" # set-group-ID without group execute: kept
	as_nobody sh -c "echo more >>'$d/w'" || fail "write as nobody in $d"
	as_nobody truncate -s 1 "$d/t" || fail "truncate as nobody in $d"
	chown 65534:65534 "$d/c"
	echo more >>"$d/r" # root: CAP_FSETID
	as_nobody sh -c "echo more >>'$d/g'" || fail "write as nobody in $d"
	for f in w t c r g; do
		printf '%s %s\n' "$f" "$(stat -c %a "$d/$f")"
	done
}

got=$(steps "$MNT")
want=$(steps "$TMPFS_DIR")
log "reftfs: $(echo $got)"
log "tmpfs:  $(echo $want)"
[ "$got" = "$want" ] || fail "modes differ from tmpfs"
# And the daemon's own view agrees after the kernel's caches are gone.
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
