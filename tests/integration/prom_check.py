"""Check Prometheus text exposition format (version 0.0.4) on stdin.

usage: reftfs-admin metrics | prom_check.py [REQUIRED_SUBSTRING...]

Every sample line must be `name{labels} value [timestamp]` with a valid
name starting with reftfs_, a float value, a preceding # TYPE for its
family, no duplicate series; each REQUIRED_SUBSTRING must occur in some
metric name.  Prints the number of samples.
"""

import re
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
SAMPLE = re.compile(r"^(%s)(\{(?:%s)(?:,%s)*,?\}|\{\})?\s+(\S+)(\s+-?\d+)?$" % (
    NAME, LABEL, LABEL))
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def family(name, types):
    if name in types:
        return name
    for suf in ("_total", "_created", "_bucket", "_sum", "_count", "_info"):
        if name.endswith(suf) and name[:-len(suf)] in types:
            return name[:-len(suf)]
    return None


def main():
    text = sys.stdin.read()
    errors = []
    types, helps, series, names = {}, set(), set(), set()
    if text and not text.endswith("\n"):
        errors.append("output does not end with a newline")
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] == "TYPE":
                if len(parts) < 4 or parts[3].strip() not in TYPES:
                    errors.append("line %d: bad TYPE: %s" % (n, line))
                elif parts[2] in types:
                    errors.append("line %d: second TYPE for %s" % (n, parts[2]))
                else:
                    types[parts[2]] = parts[3].strip()
            elif len(parts) >= 3 and parts[1] == "HELP":
                helps.add(parts[2])
            continue
        m = SAMPLE.match(line)
        if not m:
            errors.append("line %d: not a sample: %r" % (n, line))
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        if not name.startswith("reftfs_"):
            errors.append("line %d: %s does not start with reftfs_" % (n, name))
        try:
            float(value)
        except ValueError:
            errors.append("line %d: value %r is not a number" % (n, value))
        fam = family(name, types)
        if fam is None:
            errors.append("line %d: no # TYPE before %s" % (n, name))
        elif types[fam] == "counter" and not name.endswith(("_total", "_created")) \
                and name != fam:
            errors.append("line %d: counter sample %s" % (n, name))
        key = (name, labels)
        if key in series:
            errors.append("line %d: duplicate series %s%s" % (n, name, labels))
        series.add(key)
        names.add(name)
    if len(series) < 5:
        errors.append("only %d samples" % len(series))
    for want in sys.argv[1:]:
        if not any(want in x for x in names):
            errors.append("no metric name contains %r" % want)
    for e in errors[:30]:
        print(e)
    if errors:
        print("metrics: %d problems" % len(errors))
        return 1
    print("metrics: %d samples in %d families, format ok" % (len(series), len(types)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
