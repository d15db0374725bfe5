#!/usr/bin/env bash
# Copying a tree into the mount with the tools people use (issue 7, defect
# 18): cp -a and tar keep hard links, FIFOs, device nodes, symlinks and
# modes, as on tmpfs, and all of it survives an unmount and a new mount on
# the persist dir.  Each copy is compared with the source by manifest.
. "$(dirname "$0")/lib.sh"
need_fuse
need_root

SRC=$(new_dir src)
mkdir -p "$SRC/ck/sub" "$SRC/empty"
head -c 3M /dev/urandom >"$SRC/ck/model.pt"
echo '{"step": 7}' >"$SRC/ck/meta.json"
ln "$SRC/ck/model.pt" "$SRC/ck/sub/model-link.pt"
ln "$SRC/ck/meta.json" "$SRC/meta-hard.json"
ln -s ../model.pt "$SRC/ck/sub/rel-link"
ln "$SRC/ck/sub/rel-link" "$SRC/ck/sub/rel-link2" # a link of a symlink
mkfifo -m 0640 "$SRC/ck/fifo"
mknod -m 0666 "$SRC/ck/null" c 1 3
chmod 0751 "$SRC/ck/sub"
chmod 4755 "$SRC/ck/meta.json"

MNT=$(new_dir mnt)
P=$(new_dir persist)
start_daemon "$MNT" --mem 256M --persist "$P"
"$PY" "$HELPERS/tree_manifest.py" "$SRC" >"$T_TMP/want"

check_copy() { # DIR WHAT
	"$PY" "$HELPERS/tree_manifest.py" "$1" >"$T_TMP/got" ||
		fail "manifest of $2"
	diff -u "$T_TMP/want" "$T_TMP/got" >&2 || fail "$2 differs from the source"
}

cp -a "$SRC" "$MNT/cp" || fail "cp -a into the mount"
check_copy "$MNT/cp" "cp -a"
mkdir "$MNT/tar"
tar -C "$SRC" -cf - . | tar -C "$MNT/tar" -xpf - || fail "tar into the mount"
check_copy "$MNT/tar" "tar"
if command -v rsync >/dev/null; then
	rsync -aH "$SRC/" "$MNT/rsync/" || fail "rsync -aH into the mount"
	check_copy "$MNT/rsync" "rsync -aH"
fi

stop_daemon "$MNT" "$DAEMON_PID"
start_daemon "$MNT" --mem 256M --persist "$P"
check_copy "$MNT/cp" "cp -a after a remount"
check_copy "$MNT/tar" "tar after a remount"
stop_daemon "$MNT" "$DAEMON_PID"
log "PASS"
