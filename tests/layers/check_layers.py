#!/usr/bin/env python3
"""The engine's call graph between source files, from the symbols each
object file defines and uses (nm), and its cycles against a baseline.

Issue 26: engine/ is to become layers that each call only the layers below
them.  Until the cycles are gone, this check is a ratchet: each strongly
connected component of the graph (a set of files that call each other,
directly or around a loop) must lie inside one set of the baseline
(tests/layers/cycles.txt), so no cycle can appear or grow.  A baseline set
that no longer is one cycle fails the check too, so the baseline says what
is true; the message prints the line to put there instead.  Once the file
is empty, engine/ has no cycle and none can come back.

Also: no file outside rftengine includes its private header engine_i.h,
except those listed in the baseline's "private:" lines (the same ratchet).
Core's own private header, core_i.h, is included only by the files of
core (the baseline's "core:" line).  And state with one writer stays so:
no source file of engine/ but its writer assigns it (ONE_WRITER below:
the durability record f->dur and the log's record f->log, both file.c's).

usage: check_layers.py BASELINE SRCDIR ARCHIVE...   (the static libraries)
       check_layers.py --graph ARCHIVE...           (print the graph)
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


# Fields with one writer: (what, a regular expression of an assignment,
# the one file that may make it).
ONE_WRITER = [
    ("the durability record (struct file.dur)",
     r"\bdur(\.\w+)?\s*=[^=]", "file.c"),
    # A file's log record is reached as f->log or file.log (other structs
    # have a "log" too); compound assignments and ++/-- count as well.
    ("the log's record of a file (struct file.log)",
     r"\b(?:f|file)(?:->|\.)log\b(\.\w+)?\s*"
     r"(?:[|&^+*/-]?=(?!=)|\+\+|--)", "file.c"),
]


def writer_violations(srcdir):
    """Assignments of one-writer state outside its writer."""
    bad = []
    for root, _, files in os.walk(os.path.join(srcdir, "engine")):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            text = open(os.path.join(root, f), errors="replace").read()
            # Comments say what assigns what; only code counts.
            code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
            for what, pat, owner in ONE_WRITER:
                if f == owner:
                    continue
                for m in re.finditer(pat, code):
                    line = code[:m.start()].count("\n") + 1
                    bad.append("%s assigns %s (line %d of the code without "
                               "comments): only %s may" % (f, what, line,
                                                           owner))
    return bad


def main():
    if sys.argv[1] == "--graph":
        g = graph(objects(sys.argv[2:]))
        for v in sorted(g):
            print("%-12s -> %s" % (v, " ".join(sorted(g[v])) or "nothing"))
        for c in sccs(g):
            print("cycle:", " ".join(sorted(c)))
        return 0
    base_path, srcdir, archives = sys.argv[1], sys.argv[2], sys.argv[3:]
    allowed, private, core = [], set(), set()
    for line in open(base_path):
        line = line.split("#", 1)[0].strip()
        if line.startswith("private:"):
            private |= set(line[len("private:"):].split())
        elif line.startswith("core:"):
            core |= set(line[len("core:"):].split())
        elif line:
            allowed.append(set(line.split()))
    found = sccs(graph(objects(archives)))
    bad = []
    for c in found:
        if not any(c <= a for a in allowed):
            bad.append("new or larger cycle: %s (the baseline allows %s)" % (
                " ".join(sorted(c)),
                "; ".join(" ".join(sorted(a)) for a in allowed) or "none"))
    for a in allowed:
        if not any(c == a for c in found):
            now = [c for c in found if c <= a]
            bad.append("the baseline's cycle %s is no longer one: put %s "
                       "in its place" % (
                           " ".join(sorted(a)),
                           "; ".join(" ".join(sorted(c)) for c in now)
                           or "nothing"))
    inc = private_includers(srcdir)
    for f in sorted(inc - private):
        bad.append("%s includes engine_i.h, core's private header" % f)
    for f in sorted(includers(srcdir, "core_i.h") - core - {"core_i.h"}):
        bad.append("%s includes core_i.h, core's private header, and is "
                   "not in core" % f)
    bad += writer_violations(srcdir)
    for f in sorted(private - inc):
        bad.append("%s no longer includes engine_i.h: take it out of the "
                   "baseline's private: line" % f)
    for c in found:
        print("cycle (allowed for now): " + " ".join(sorted(c)))
    for b in bad:
        print("FAIL: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
