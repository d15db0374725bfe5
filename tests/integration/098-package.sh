#!/usr/bin/env bash
# The Debian package (issue 31), from the package to a mounted group member
# with one config file and `systemctl start`, on a machine that never had
# reftfs: a container that boots systemd (systemd-nspawn) over a throwaway
# overlay of this host's root, so that nothing it installs or starts stays.
#
#   - tools/build-deb.sh builds the package from this tree: the daemon with
#     libfuse linked in (no libfuse3 among its dependencies), the mount
#     helper's "reftfs", reftfs-admin, the units, man pages and examples;
#   - dpkg -i installs it in the container;
#   - `mount -t fuse.reftfs ... -o config=FILE` mounts from a config file;
#     torch.save there, torch.load back, unmount: written back;
#   - a group of two data nodes and a witness, each from its own config
#     under /etc/reftfs, started by `systemctl start reftfsd@n0 reftfsd@n1
#     reftfs-witness@w`, which returns once each is ready (Type=notify),
#     hardened as the units ship; a checkpoint saved on one node loads on
#     the other;
#   - a node killed (SIGKILL) is restarted by systemd (Restart=on-failure)
#     over the dead mount it left (its warning in the journal at priority
#     warning), and reads the checkpoint again;
#   - a rolling restart (systemctl restart, rebuild --wait, one node at a
#     time) keeps the checkpoint on both;
#   - `systemctl stop` ends each cleanly, its mount gone; dpkg -r removes
#     the package.
. "$(dirname "$0")/lib.sh"
need_fuse
need_root "installs a package and boots a container"
need_torch
for c in dpkg-buildpackage dh systemd-nspawn nsenter; do
	command -v "$c" >/dev/null ||
		skip "$c missing (tools/setup.sh installs debhelper and systemd-container)"
done

# --- the package -------------------------------------------------------------
SHARE=$(new_dir share)
t0=$SECONDS
# (No debug symbols' package: not needed here.)
DEB_BUILD_OPTIONS=noautodbgsym bash "$SRCDIR/tools/build-deb.sh" "$SHARE" \
	>"$T_TMP/build-deb.log" 2>&1 || {
	cat "$T_TMP/build-deb.log" >&2
	fail "tools/build-deb.sh failed"
}
DEB=$(ls "$SHARE"/reftfs_*.deb)
log "built ${DEB##*/} in $((SECONDS - t0)) s"
files=$(dpkg-deb -c "$DEB" | awk '{ print $6 }')
for f in ./usr/sbin/reftfsd ./usr/sbin/reftfs ./usr/bin/reftfs-admin \
	./usr/lib/systemd/system/reftfsd@.service \
	./usr/lib/systemd/system/reftfs-witness@.service \
	./usr/share/man/man8/reftfsd.8.gz ./usr/share/man/man8/reftfs-admin.8.gz \
	./usr/share/man/man5/reftfs.conf.5.gz \
	./usr/share/doc/reftfs/examples/node.conf ./etc/reftfs/; do
	grep -Fx "$f" <<<"$files" >/dev/null || fail "${DEB##*/} has no $f"
done
deps=$(dpkg-deb -f "$DEB" Depends)
case $deps in
*libfuse3*) fail "the package depends on the system's libfuse: $deps" ;;
esac
cat >"$SHARE/ckpt.py" <<'PYEOF'
# ckpt.py (save|load PATH)...: each in turn, in one process (torch's import
# is the slow part): a model's state saved with torch.save, or loaded with
# torch.load and compared with the same model made again.
import sys

import torch

torch.manual_seed(31)
model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.Linear(2048, 8))
want = model.state_dict()
args = sys.argv[1:]
for op, path in zip(args[::2], args[1::2]):
    if op == "save":
        torch.save(want, path)
        continue
    got = torch.load(path)
    assert got.keys() == want.keys(), (path, got.keys(), want.keys())
    for k in want:
        assert torch.equal(got[k], want[k]), (path, k)
    print("loaded", path)
PYEOF

# --- a machine of its own: systemd in a container -----------------------------
# (Before the package is in it: a container that cannot boot is this
# host's lack, a skip with nspawn's words, not the package's failure.)
# nspawn boots a root that is not / itself: / bound (not recursively) here,
# with a tmpfs over it (--volatile=overlay) for whatever the container
# writes.  It makes cgroups for its payload where it runs and leaves them:
# it runs in one of the test's own, removed at exit.
ROOT=$(new_dir root)
mount --bind / "$ROOT"
_T_TMPFS+=("$ROOT")
CG=()
while IFS=: read -r _ ctl path; do
	case $ctl in
	name=systemd) d=/sys/fs/cgroup/systemd ;;
	"") d=/sys/fs/cgroup/unified; [ -d "$d" ] || d=/sys/fs/cgroup ;;
	*) continue ;;
	esac
	[ -w "$d$path/cgroup.procs" ] || continue
	mkdir "$d${path%/}/reftfs-098-$$" || fail "cannot make a cgroup in $d$path"
	CG+=("$d${path%/}/reftfs-098-$$:$d$path")
done </proc/self/cgroup
[ ${#CG[@]} -gt 0 ] || skip "no writable cgroup hierarchy for the container"
NSPAWN=""
LEADER=""
C() { nsenter -t "$LEADER" -a "$@"; }
pkg_cleanup() {
	local c i
	if [ -n "$LEADER" ] && [ "${rc:-0}" != 0 ] && [ "${rc:-0}" != 77 ]; then
		echo "[$TEST_NAME] --- the container's journal:" >&2
		C journalctl --no-pager -o short-monotonic -n 60 2>&1 | sed 's/^/    /' >&2
	fi
	if [ -n "$NSPAWN" ] && kill -0 "$NSPAWN" 2>/dev/null; then
		kill -TERM "$NSPAWN"
		for i in $(seq 1 100); do
			kill -0 "$NSPAWN" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$NSPAWN" 2>/dev/null
		wait "$NSPAWN" 2>/dev/null
	fi
	for c in "${CG[@]}"; do
		find "${c%%:*}" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	# nspawn's own directories, if it made them and left them empty.
	rmdir /run/systemd/nspawn/propagate/reftfs-098 /run/systemd/nspawn/propagate \
		/run/systemd/nspawn/locks /run/systemd/nspawn 2>/dev/null
}
_T_ATEXIT+=(pkg_cleanup)
for c in "${CG[@]}"; do echo "$BASHPID" >"${c%%:*}/cgroup.procs"; done
t0=$SECONDS
# The container's own network (a loopback), /dev/fuse, and the package;
# basic.target only: none of the host's services start in it.
setsid systemd-nspawn -q -D "$ROOT" --volatile=overlay -b -M reftfs-098 \
	--register=no --keep-unit --link-journal=no --private-network \
	--console=pipe --bind=/dev/fuse --bind-ro="$SHARE:/share" \
	systemd.unit=basic.target >"$T_TMP/console.log" 2>&1 </dev/null &
NSPAWN=$!
for c in "${CG[@]}"; do echo "$BASHPID" >"${c#*:}/cgroup.procs"; done
for i in $(seq 1 100); do
	LEADER=$(awk '{ print $1 }' "/proc/$NSPAWN/task/$NSPAWN/children" 2>/dev/null || true)
	[ -n "$LEADER" ] && [ "$(cat "/proc/$LEADER/comm" 2>/dev/null)" = systemd ] && break
	kill -0 "$NSPAWN" 2>/dev/null || { cat "$T_TMP/console.log" >&2; skip "systemd-nspawn cannot boot a container here (its output above)"; }
	LEADER=""
	sleep 0.1
done
[ -n "$LEADER" ] || { cat "$T_TMP/console.log" >&2; skip "no systemd in the container after 10 s (nspawn's output above)"; }
# Its manager's socket comes a moment after PID 1 does.
for i in $(seq 1 300); do
	state=$(C timeout 60 systemctl is-system-running --wait 2>&1) || true
	case $state in
	running | degraded) break ;;
	esac
	sleep 0.1
done
case $state in
running | degraded) ;;
*) skip "the container's systemd does not come up: '$state'" ;;
esac
log "container booted ($state) in $((SECONDS - t0)) s, systemd pid $LEADER"

# --- install, and mount from a config file ------------------------------------
C test ! -e /usr/sbin/reftfsd || fail "reftfsd installed before the package"
C dpkg -i "/share/${DEB##*/}" >"$T_TMP/dpkg.log" 2>&1 ||
	{ cat "$T_TMP/dpkg.log" >&2; fail "dpkg -i failed"; }
C mkdir -p /ckpt/single /ckpt/n0 /ckpt/n1 /nfs/single
C sh -c 'cat >/etc/reftfs/single.conf' <<'EOF'
mem = 128M
persist = /nfs/single
no-prefault
EOF
C timeout 60 mount -t fuse.reftfs reftfs /ckpt/single -o config=/etc/reftfs/single.conf ||
	fail "mount -t fuse.reftfs -o config=... failed"
C findmnt -n -o FSTYPE /ckpt/single | grep -x fuse.reftfs >/dev/null ||
	fail "/ckpt/single is not a fuse.reftfs mount"
C mkdir /ckpt/single/step_1
C /usr/bin/python3 /share/ckpt.py save /ckpt/single/step_1/model.pt \
	load /ckpt/single/step_1/model.pt >/dev/null ||
	fail "torch.save and torch.load through the package's mount"
C umount /ckpt/single
for i in $(seq 1 100); do
	C pgrep -x reftfsd >/dev/null || break
	sleep 0.1
done
C pgrep -x reftfsd >/dev/null && fail "the daemon still runs 10 s after umount"
C /usr/bin/python3 /share/ckpt.py load /nfs/single/step_1/model.pt >/dev/null ||
	fail "the checkpoint not written back at umount"
log "mount -t fuse.reftfs -o config=: saved, loaded, unmounted, written back"

# --- a group from systemd ------------------------------------------------------
C sh -c 'head -c 32 /dev/urandom | od -An -tx1 | tr -d " \n" >/etc/reftfs/g.secret; chmod 600 /etc/reftfs/g.secret'
G="peers = 127.0.0.1:7700,127.0.0.1:7710
witnesses = 127.0.0.1:7720
secret_file = /etc/reftfs/g.secret
protect = replicate:2
dead_after = 2"
for n in 0 1; do
	printf 'mountpoint = /ckpt/n%s\nnode = %s\nmem = 128M\nno-prefault\n%s\n' \
		"$n" "$n" "$G" | C sh -c "cat >/etc/reftfs/n$n.conf"
done
printf 'witness\nnode = 2\n%s\n' "$G" | C sh -c 'cat >/etc/reftfs/w.conf'
t0=$SECONDS
C timeout 120 systemctl start reftfsd@n0 reftfsd@n1 reftfs-witness@w ||
	fail "systemctl start reftfsd@n0 reftfsd@n1 reftfs-witness@w"
log "a group of 2 nodes and a witness ready in $((SECONDS - t0)) s"
for u in reftfsd@n0 reftfsd@n1 reftfs-witness@w; do
	expect_eq "$(C systemctl is-active "$u")" active "$u's state"
done
expect_eq "$(C systemctl show -p StatusText --value reftfsd@n1)" \
	"mounted /ckpt/n1, node 1 of group reftfs" "reftfsd@n1's status"
C mkdir /ckpt/n0/step_2
C /usr/bin/python3 /share/ckpt.py save /ckpt/n0/step_2/model.pt \
	load /ckpt/n1/step_2/model.pt >/dev/null ||
	fail "node 1 does not load what node 0 saved"

# A crash: systemd restarts the node over its dead mount.
C systemctl kill -s KILL reftfsd@n1
for i in $(seq 1 300); do
	[ "$(C systemctl show -p NRestarts --value reftfsd@n1)" = 1 ] &&
		[ "$(C systemctl is-active reftfsd@n1)" = active ] && break
	sleep 0.1
done
expect_eq "$(C systemctl show -p NRestarts --value reftfsd@n1)" 1 "reftfsd@n1's restarts"
expect_eq "$(C systemctl is-active reftfsd@n1)" active "reftfsd@n1 after its restart"
C /usr/bin/python3 /share/ckpt.py load /ckpt/n1/step_2/model.pt >/dev/null ||
	fail "the restarted node 1 does not load the checkpoint"
# Its warning, at the journal's warning priority (the "<4>" on the line).
C journalctl -u reftfsd@n1 -p warning -o cat | grep -F "warning: mount point /ckpt/n1 was a dead reftfs mount" >/dev/null ||
	fail "the restart's warning is not in the journal at priority warning: $(C journalctl -u reftfsd@n1 -p warning -o cat)"
log "reftfsd@n1 killed, restarted by systemd, loads the checkpoint again"

# A rolling restart, as docs/operations.md gives it: one node at a time,
# `systemctl restart` (back once the node has rejoined), then `rebuild
# --wait` (its files back from its peers) before the next.
for n in 0 1; do
	C timeout 120 systemctl restart reftfsd@n$n || fail "systemctl restart reftfsd@n$n"
	C timeout 120 reftfs-admin -m /ckpt/n$n rebuild --wait >/dev/null ||
		fail "reftfs-admin rebuild --wait on node $n after its restart"
done
C /usr/bin/python3 /share/ckpt.py load /ckpt/n0/step_2/model.pt \
	load /ckpt/n1/step_2/model.pt >/dev/null ||
	fail "a node does not load the checkpoint after the rolling restart"
log "rolling restart of both nodes: the checkpoint loads on each"

C timeout 120 systemctl stop reftfsd@n0 reftfsd@n1 reftfs-witness@w ||
	fail "systemctl stop"
for u in reftfsd@n0 reftfsd@n1 reftfs-witness@w; do
	expect_eq "$(C systemctl show -p Result --value "$u")" success "$u's stop"
done
for n in 0 1; do
	C findmnt /ckpt/n$n >/dev/null && fail "/ckpt/n$n still mounted after the stop"
done
C dpkg -r reftfs >"$T_TMP/dpkg.log" 2>&1 || { cat "$T_TMP/dpkg.log" >&2; fail "dpkg -r failed"; }
C test ! -e /usr/sbin/reftfsd || fail "reftfsd left after dpkg -r"
log "stopped cleanly; package removed"
