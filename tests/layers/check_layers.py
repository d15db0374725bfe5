#!/usr/bin/env python3
"""The engine's layers, checked (issue 26).

- engine/'s call graph between source files, from the symbols each object
  file defines and uses (nm), has no cycle: each file calls only the files
  below it.  A cycle fails, and the files in it are printed.
- No file of engine/ outside rftengine includes its private header
  engine_i.h: the group (gns.c, protect.c, parity.c) reaches core through
  core.h.  Core's own private header, core_i.h, is included only by the
  files of core (CORE below) and core's white-box unit tests.
- The tiers (passthrough, persist, eviction, spill) are reached through
  their own headers (pass.h, persist.h, evict.h, spill.h), which no file
  of core includes: core tells the tiers by events and hooks, never by
  name.
  Each structure of a tier's or of core's own state is defined in one
  file only (OWNED below), so no other file sees inside it.
- State with one writer stays so: no source file of engine/ but its
  writer assigns it (ONE_WRITER below: the durability record f->dur,
  its news f->dur_news and the log's record f->log, all file.c's).

usage: check_layers.py SRCDIR ARCHIVE...   (the static libraries)
       check_layers.py --graph ARCHIVE...  (print the graph)
"""
import os
import re
import subprocess
import sys


def objects(archives):
    """{source file name: (defined symbols, undefined symbols)}."""
    objs = {}
    for a in archives:
        out = subprocess.run(["nm", "-A", a], capture_output=True,
                             text=True, check=True).stdout
        for line in out.splitlines():
            # "lib.a:file.c.o:0000000000000010 T name" or
            # "lib.a:file.c.o:                 U name"
            m = re.match(r"^[^:]+:([^:]+):\s*(?:[0-9a-f]+\s+)?(\w)\s+(\S+)$",
                         line)
            if not m:
                continue
            obj, kind, sym = m.groups()
            src = re.sub(r"\.o$", "", os.path.basename(obj))
            d, u = objs.setdefault(src, (set(), set()))
            if kind == "U":
                u.add(sym)
            elif kind in "TDBRC":  # global text, data, bss, rodata, common
                d.add(sym)
    return objs


def graph(objs):
    owner = {}
    for src, (d, _) in objs.items():
        for s in d:
            owner[s] = src
    g = {src: set() for src in objs}
    for src, (_, u) in objs.items():
        for s in u:
            o = owner.get(s)
            if o and o != src:
                g[src].add(o)
    return g


def sccs(g):
    """Tarjan's strongly connected components, those of more than one."""
    index, low, stack, on, out = {}, {}, [], set(), []
    n = [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def includers(srcdir, header):
    """engine/ sources (any folder below it) that include @header."""
    found = set()
    for root, _, files in os.walk(os.path.join(srcdir, "engine")):
        for f in files:
            if not f.endswith((".c", ".h")) or f == header:
                continue
            text = open(os.path.join(root, f), errors="replace").read()
            if re.search(r'#include\s+"%s"' % re.escape(header), text):
                found.add(f)
    for root, _, files in os.walk(srcdir):
        if "/engine" in root or "/build" in root or "/subprojects" in root:
            continue
        for f in files:
            if f.endswith((".c", ".h")):
                text = open(os.path.join(root, f), errors="replace").read()
                if re.search(r'#include\s+"%s"' % re.escape(header), text):
                    found.add(os.path.relpath(os.path.join(root, f), srcdir))
    return found


def private_includers(srcdir):
    """engine/ sources outside rftengine that include engine_i.h."""
    mb = open(os.path.join(srcdir, "engine", "meson.build")).read()
    m = re.search(r"static_library\('rftengine',(.*?)include_directories",
                  mb, re.S)
    core = set(re.findall(r"'([\w.]+\.c)'", m.group(1)))
    found = set()
    for root, _, files in os.walk(os.path.join(srcdir, "engine")):
        for f in files:
            if (not f.endswith((".c", ".h")) or f in core or
                    f in ("engine_i.h", "core_i.h")):
                continue
            text = open(os.path.join(root, f), errors="replace").read()
            if re.search(r'#include\s+"engine_i\.h"', text):
                found.add(f)
    return found


# The files of core: only they include core_i.h.
CORE = {"core.c", "file.c", "ns.c", "read.c", "record.c", "store.c",
        "write.c"}

# Tiers' public headers: no file of core (nor a header core includes)
# includes them.
TIER_HEADERS = {"pass.h", "persist.h", "evict.h", "spill.h"}
CORE_HEADERS = {"core.h", "core_i.h", "engine_i.h", "store.h", "nsop.h"}

# Private state: struct NAME is defined in this one file.
OWNED = {
    "pass_ctl": "pass.c", "pass": "pass.c", "early": "pass.c",
    "evictor": "evict.c", "persist": "persist.c", "spill": "spill.c",
    "core_io": "core_i.h", "copier": "core_i.h", "fetcher": "core_i.h",
    "loads": "core_i.h", "wjob": "core_i.h",
}


def engine_code(srcdir):
    """(file name, its text without comments) of every engine/ source:
    comments say what assigns or defines what; only code counts."""
    for root, _, files in os.walk(os.path.join(srcdir, "engine")):
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                text = open(os.path.join(root, f), errors="replace").read()
                yield f, re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def owned_violations(srcdir):
    """Private structures defined outside their owner."""
    bad = []
    for f, code in engine_code(srcdir):
        for m in re.finditer(r"\bstruct\s+(\w+)\s*\{", code):
            owner = OWNED.get(m.group(1))
            if owner and owner != f:
                bad.append("%s defines struct %s, which only %s may"
                           % (f, m.group(1), owner))
    return bad


# Fields with one writer: (what, a regular expression of an assignment,
# the one file that may make it).
ONE_WRITER = [
    ("the durability record (struct file.dur)",
     r"\bdur(\.\w+)?\s*=[^=]", "file.c"),
    # What its writer made true, posted by file_dur_unlock.
    ("the durability record's news (struct file.dur_news)",
     r"\bdur_news\s*[|&^]?=(?!=)", "file.c"),
    # A file's log record is reached as f->log or file.log (other structs
    # have a "log" too); compound assignments and ++/-- count as well.
    ("the log's record of a file (struct file.log)",
     r"\b(?:f|file)(?:->|\.)log\b(\.\w+)?\s*"
     r"(?:[|&^+*/-]?=(?!=)|\+\+|--)", "file.c"),
]


def writer_violations(srcdir):
    """Assignments of one-writer state outside its writer."""
    bad = []
    for f, code in engine_code(srcdir):
        for what, pat, owner in ONE_WRITER:
            if f == owner:
                continue
            for m in re.finditer(pat, code):
                line = code[:m.start()].count("\n") + 1
                bad.append("%s assigns %s (line %d of the code without "
                           "comments): only %s may" % (f, what, line, owner))
    return bad


def main():
    if sys.argv[1] == "--graph":
        g = graph(objects(sys.argv[2:]))
        for v in sorted(g):
            print("%-12s -> %s" % (v, " ".join(sorted(g[v])) or "nothing"))
        for c in sccs(g):
            print("cycle:", " ".join(sorted(c)))
        return 0
    srcdir, archives = sys.argv[1], sys.argv[2:]
    bad = []
    for c in sccs(graph(objects(archives))):
        bad.append("a call cycle: %s" % " ".join(sorted(c)))
    for f in sorted(private_includers(srcdir)):
        bad.append("%s includes engine_i.h, the engine's private header"
                   % f)
    # White-box unit tests of core (tests/unit) may look inside it.
    for f in sorted(f for f in includers(srcdir, "core_i.h") - CORE -
                    {"core_i.h"} if not f.startswith("tests/unit/")):
        bad.append("%s includes core_i.h, core's private header, and is "
                   "not in core" % f)
    for h in sorted(TIER_HEADERS):
        for f in sorted(includers(srcdir, h) & (CORE | CORE_HEADERS)):
            bad.append("%s, of core, includes %s: core reaches a tier by "
                       "its events and hooks, not by name" % (f, h))
    bad += owned_violations(srcdir)
    bad += writer_violations(srcdir)
    for b in bad:
        print("FAIL: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
