#!/usr/bin/env bash
# A config file (issue 31): `reftfsd --config FILE` takes one option per
# line ("key = value", "key" alone for a flag, keys as -o takes them with
# dashes or underscores, "mountpoint", FUSE's allow_other; '#' comments),
# and the command line overrides it.  `--check` checks without mounting.
# Every bad line is refused before anything mounts, named FILE:LINE with
# its reason, exit 2 (and so does `reftfs-admin config --check`): an
# unknown key, a bad value, a value on a flag, a key
# with no value, a line too long, a config naming another; and a missing
# file, or --config twice (in any of its spellings).
. "$(dirname "$0")/lib.sh"
need_fuse

MNT=$(new_dir mnt)
PERSIST=$(new_dir persist)
CONF=$T_TMP/node.conf
cat >"$CONF" <<EOF
# a node's options, as /etc/reftfs/NAME.conf holds them
mountpoint = $MNT

mem = 96M
  persist=$PERSIST
persist_every = 1
keep = 3
no-prefault
allow-other
EOF

# --check: the file and the command line together, nothing mounted; the
# file given as --config FILE, --config=FILE or -o config=FILE (fstab).
for how in "--config $CONF" "--config=$CONF" "-o rw,config=$CONF,noatime"; do
	# shellcheck disable=SC2086
	out=$("$REFTFSD" $how --check 2>&1) || fail "--check of a good file ($how): $out"
	expect_eq "$out" "reftfsd: the options are valid" "--check's answer ($how)"
done
is_mounted "$MNT" && fail "--check mounted $MNT"
# reftfs-admin config --check FILE: the same parser ($REFTFSD's).
out=$("$REFTFS_ADMIN" config --check "$CONF" 2>&1) || fail "reftfs-admin config --check of a good file: $out"
expect_eq "$out" "reftfsd: the options are valid" "reftfs-admin config --check's answer"

# The file alone names the mount point; the daemon runs from it.
_T_MOUNTS+=("$MNT")
"$REFTFSD" --config "$CONF" -f >"$T_TMP/daemon.log" 2>&1 &
DAEMON_PID=$!
_T_PIDS+=("$DAEMON_PID")
wait_mounted "$MNT" "$DAEMON_PID" "$T_TMP/daemon.log"
expect_eq "$(($(stat -f -c '%b * %S' "$MNT") >> 20))" 96 "budget (MiB) from mem = 96M"
grep "allow_other" /proc/mounts | grep -F " $MNT " >/dev/null ||
	fail "allow_other not in the mount's options: $(grep -F " $MNT " /proc/mounts)"
head -c 3000000 /dev/urandom >"$T_TMP/x"
mkdir "$MNT/step_1"
cp "$T_TMP/x" "$MNT/step_1/x"
admin "$MNT" flush --wait >/dev/null || fail "flush --wait"
cmp "$T_TMP/x" "$PERSIST/step_1/x" || fail "persist = ... not written back to"
stop_daemon "$MNT" "$DAEMON_PID"

# The command line overrides the file: its mem, and its mount point.
MNT2=$(new_dir mnt2)
start_daemon "$MNT2" --config "$CONF" --mem 64M
expect_eq "$(($(stat -f -c '%b * %S' "$MNT2") >> 20))" 64 "budget (MiB) from --mem over the file's"
is_mounted "$MNT" && fail "the file's mount point mounted too"
cmp "$T_TMP/x" "$MNT2/step_1/x" || fail "the persist dir from the file not read through"
stop_daemon "$MNT2" "$DAEMON_PID"

# refused LINENO REASON TEXT: a file of the good lines and TEXT at line
# LINENO: exit 2, "FILE:LINENO: REASON" said, nothing mounted.
refused() {
	local n=$1 want=$2 text=$3 f=$T_TMP/bad.conf rc=0 out
	{ printf 'mountpoint = %s\n' "$MNT"; printf '# comment\n'
	  printf '%s\n' "$text"; printf 'mem = 64M\n'; } >"$f"
	expect_eq "$n" 3 "refused's line"
	out=$("$REFTFSD" --config "$f" -f 2>&1) || rc=$?
	expect_eq "$rc" 2 "exit status for '$text'"
	case $out in
	*"reftfsd: $f:$n: $want"*) ;;
	*) fail "for '$text', want '$f:$n: $want', got: $out" ;;
	esac
	is_mounted "$MNT" && fail "mounted with '$text' in the file"
	rc=0
	out=$("$REFTFS_ADMIN" config --check "$f" 2>&1) || rc=$?
	expect_eq "$rc" 2 "reftfs-admin config --check for '$text'"
	case $out in
	*"$f:$n: $want"*) ;;
	*) fail "reftfs-admin config --check for '$text': $out" ;;
	esac
	return 0
}
refused 3 "unknown key 'bogus'" "bogus = 1"
refused 3 "bad --mem 'lots'" "mem = lots"
refused 3 "--prefault takes no value" "prefault = yes"
refused 3 "'keep =' has no value" "keep ="
refused 3 "allow_other takes no value" "allow_other = 1"
refused 3 "mountpoint needs an absolute path" "mountpoint = ckpt"
refused 3 "a config file cannot name another" "config = /etc/reftfs/x.conf"
refused 3 "a value with no key" "= 5"
refused 3 "line longer than 4094 bytes" "persist = /$(head -c 5000 /dev/zero | tr '\0' a)"
# The command line is checked after the file: its own errors as before.
rc=0
out=$("$REFTFSD" --config "$CONF" --keep many --check 2>&1) || rc=$?
expect_eq "$rc" 2 "--keep many after a good file"
case $out in *"bad --keep 'many'"*) ;; *) fail "--keep many: $out" ;; esac
rc=0
out=$("$REFTFSD" --config "$T_TMP/none.conf" --check 2>&1) || rc=$?
expect_eq "$rc" 2 "a missing config file"
case $out in *"--config $T_TMP/none.conf: No such file or directory"*) ;; *) fail "missing file: $out" ;; esac
rc=0
out=$("$REFTFSD" --config "$CONF" -o "config=$CONF" --check 2>&1) || rc=$?
expect_eq "$rc" 2 "--config twice"
case $out in *"--config given twice"*) ;; *) fail "--config twice: $out" ;; esac
# -o refuses a value on a flag as the file does.
rc=0
out=$("$REFTFSD" "$MNT" -o prefault=1 --check 2>&1) || rc=$?
expect_eq "$rc" 2 "-o prefault=1"
log "a config file: mounted from it, overridden by the command line, every bad line refused with FILE:LINE"
