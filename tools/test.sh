#!/usr/bin/env bash
# Install, build and run every test (unit + integration), then print one
# summary line: `N passed, N failed, N skipped`.  Exit status 0 only if
# nothing failed.  Benchmarks (suite 'bench') are not run here.
#
# usage: bash tools/test.sh [extra meson test arguments]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

summary() { # passed failed skipped
	echo "$1 passed, $2 failed, $3 skipped"
	[ "$2" = 0 ]
	exit $?
}

if ! bash tools/setup.sh; then
	echo "test: setup or build failed" >&2
	summary 0 1 0
fi

log=build/meson-logs/testlog.json
rm -f "$log"
# Unit tests run in parallel; integration tests are is_parallel: false, so
# meson runs them one at a time whatever --num-processes says.
meson test -C build --suite unit --suite integration --print-errorlogs \
	--num-processes "$(nproc 2>/dev/null || echo 2)" "$@"
mrc=$?

# Safety net: a test killed by a timeout must not leave a dead mount
# behind.  Only mounts whose daemon is gone (stat fails: "Transport endpoint
# is not connected") are cleared; live ones may belong to another run.
awk '$3 == "fuse.reftfs" && $2 ~ "/reftfs-" { print $2 }' /proc/mounts |
	while read -r m; do
		timeout 5 stat -t "$m" >/dev/null 2>&1 && continue
		echo "test: clearing dead mount $m" >&2
		fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done

if [ ! -s "$log" ]; then
	echo "test: meson test produced no $log (exit $mrc)" >&2
	summary 0 1 0
fi
read -r p f s < <(/usr/bin/python3 - "$log" <<'PYEOF'
import json, sys
p = f = s = 0
for line in open(sys.argv[1]):
    line = line.strip()
    if not line:
        continue
    r = json.loads(line).get("result", "")
    if r in ("OK", "EXPECTEDFAIL"):
        p += 1
    elif r == "SKIP":
        s += 1
    else:  # FAIL, TIMEOUT, ERROR, UNEXPECTEDPASS, INTERRUPT, ...
        f += 1
print(p, f, s)
PYEOF
)
if [ "$mrc" != 0 ] && [ "${f:-0}" = 0 ]; then
	echo "test: meson test exited $mrc" >&2
	f=1
fi
summary "${p:-0}" "${f:-1}" "${s:-0}"
