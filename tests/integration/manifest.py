"""Record or compare a directory tree: every file's size and SHA-256, every
directory, every symlink's target.

usage: manifest.py save ROOT OUT.json
       manifest.py compare ROOT IN.json [--persist] [--ignore-suffix SUF]
                                        [--subset]

compare exits 1 and lists the differences if ROOT differs from IN.json.
--persist: ROOT is a reftfs persist dir: its own bookkeeping is skipped
(checksum sidecars DIR/.NAME.rftsum, the top-level .reftfs-lock and the
.reftfs-tmp staging dir), but any file left in .reftfs-tmp is reported.
--ignore-suffix skips names ending in SUF; --subset allows ROOT to hold
more than IN.json.
"""

import json
import os
import sys

from rftest import sha256_file


PERSIST_META = (".reftfs-lock", ".reftfs-tmp")


def manifest(root, ignore=(), persist=False):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        if persist and rel == ".reftfs-tmp":
            pass      # the staging dir itself is fine; files in it are not
        elif rel != ".":
            out[rel] = "dir"
        if persist and rel == ".":
            filenames = [n for n in filenames if n not in PERSIST_META]
        for n in sorted(filenames + [d for d in dirnames
                                     if os.path.islink(os.path.join(dirpath, d))]):
            if any(n.endswith(s) for s in ignore):
                continue
            if persist and n.startswith(".") and n.endswith(".rftsum"):
                continue
            full = os.path.join(dirpath, n)
            r = os.path.normpath(os.path.join(rel, n))
            if os.path.islink(full):
                out[r] = "link:" + os.readlink(full)
            else:
                out[r] = "file:%d:%s" % (os.path.getsize(full),
                                         sha256_file(full))
    return out


def main(argv):
    ignore = []
    subset = False
    persist = False
    args = []
    i = 0
    while i < len(argv):
        if argv[i] == "--ignore-suffix":
            ignore.append(argv[i + 1])
            i += 2
            continue
        if argv[i] == "--subset":
            subset = True
        elif argv[i] == "--persist":
            persist = True
        else:
            args.append(argv[i])
        i += 1
    cmd, root, path = args
    if cmd == "save":
        with open(path, "w") as f:
            json.dump(manifest(root, ignore, persist), f, indent=1, sort_keys=True)
        return 0
    want = json.load(open(path))
    got = manifest(root, ignore, persist)
    bad = []
    for k, v in sorted(want.items()):
        if k not in got:
            bad.append("missing: %s (%s)" % (k, v[:40]))
        elif got[k] != v:
            bad.append("differs: %s: %s, want %s" % (k, got[k][:60], v[:60]))
    if not subset:
        for k in sorted(set(got) - set(want)):
            bad.append("unexpected: %s (%s)" % (k, got[k][:40]))
    for b in bad[:50]:
        print("  " + b)
    if bad:
        print("%s differs from %s in %d entries" % (root, path, len(bad)))
        return 1
    print("%s matches %s (%d entries)" % (root, path, len(want)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
