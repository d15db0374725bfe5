#!/usr/bin/env bash
# The man pages (man/) cannot drift from the binaries (issue 31): the long
# options of reftfsd's getopt table (fs/main.c), of `reftfsd --help` and of
# reftfsd(8) are the same; reftfs.conf(5)'s keys are those options but the
# command line's own (config, check, help, version), with mountpoint and
# FUSE's three; reftfs-admin(8)'s commands are those of `reftfs-admin
# --help`; and man renders each page without a warning.
. "$(dirname "$0")/lib.sh"
command -v man >/dev/null || skip "man missing (apt-get install man-db)"

"$REFTFSD" --help >"$T_TMP/reftfsd.help"
"$REFTFS_ADMIN" --help >"$T_TMP/admin.help" 2>&1 || true
"$PY" - "$SRCDIR" "$T_TMP/reftfsd.help" "$T_TMP/admin.help" <<'PYEOF' || fail "the man pages differ from the binaries (above)"
import re, sys

src, dhelp, ahelp = sys.argv[1:4]
bad = []


def same(what, a, b, an, bn):
    for x in sorted(a - b):
        bad.append("%s: %s is in %s, not in %s" % (what, x, an, bn))
    for x in sorted(b - a):
        bad.append("%s: %s is in %s, not in %s" % (what, x, bn, an))


def section(page, name):
    text = open("%s/man/%s" % (src, page)).read()
    m = re.search(r"^\.SH %s\n(.*?)(?=^\.SH )" % name, text, re.S | re.M)
    return m.group(1) if m else ""


main = open(src + "/fs/main.c").read()
table = main[main.index("longopts[] = {"):]
table = table[:table.index("{ NULL, 0, NULL, 0 }")]
opts = set(re.findall(r'\{ "([a-z-]+)",', table))
helped = set(re.findall(r"^  (?:-[a-zA-Z], )?--([a-z-]+)", open(dhelp).read(), re.M))
paged = set(n.replace("\\-", "-") for n in re.findall(
    r"^\.B[IR]? \\-\\-((?:[a-z]|\\-)+)", section("reftfsd.8", "OPTIONS"), re.M))
paged |= set(n.replace("\\-", "-") for n in re.findall(
    r"^\.BR \\-[a-zA-Z] \", \" \\-\\-((?:[a-z]|\\-)+)", section("reftfsd.8", "OPTIONS"), re.M))
same("reftfsd", opts, helped, "fs/main.c's getopt table", "reftfsd --help")
same("reftfsd", opts, paged, "fs/main.c's getopt table", "reftfsd(8)")

keys = set(o.replace("-", "_") for o in opts) - {"config", "check", "help", "version"}
keys |= {"mountpoint", "allow_other", "allow_root", "default_permissions"}
conf = section("reftfs.conf.5", "KEYS")
listed = set(re.findall(r"^\.BI? \"?([a-z_]+)", conf, re.M))
for line in re.findall(r"^\.BR (.*)$", conf, re.M):
    listed |= set(re.findall(r"(?:^| )([a-z_]+)", line))
same("reftfs.conf", keys, listed, "reftfsd's options", "reftfs.conf(5)")

text = open(ahelp).read()
body = text[text.index("Commands"):text.index("Options:")]
cmds = set(re.findall(r"^  ([a-z]+(?: [a-z-]+)?)", body, re.M))
paged = set()
for m in re.finditer(r'^\.BI? "?([a-z]+(?: (?:[a-z]|\\-)+)?)', section("reftfs-admin.8", "COMMANDS"), re.M):
    paged.add(m.group(1).replace("\\-", "-"))
same("reftfs-admin", cmds, paged, "reftfs-admin --help", "reftfs-admin(8)")

for b in bad:
    print(b)
sys.exit(1 if bad else 0)
PYEOF
for p in reftfsd.8 reftfs.conf.5 reftfs-admin.8; do
	w=$(LC_ALL=C MANWIDTH=80 man --warnings -l "$SRCDIR/man/$p" 2>&1 >/dev/null)
	[ -z "$w" ] || fail "man warns about $p: $w"
done
log "reftfsd(8), reftfs.conf(5) and reftfs-admin(8) name every option, key and command the binaries take, and no other"
