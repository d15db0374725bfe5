#!/usr/bin/env bash
# Install, build and run the tests, in one of three tiers, then print one
# summary line: `N passed, N failed, N skipped`, counting every run below,
# and before it the 20 slowest tests.  Exit status 0 only if nothing
# failed.  Benchmarks (suite 'bench') are not run here.
#
#   bash tools/test.sh          the quick tier (the README's test command):
#                 every feature once, in the build that ships (build/):
#                 suites unit and quick (every integration test once, and
#                 112-io-uring), RFT_TIER=quick: the randomized tests do
#                 a few trials each.  About 14 minutes on 2 cores.
#   bash tools/test.sh --full   what CI runs (.ci/run), about 35 minutes (35 the aim):
#     build/      unit + integration + io_uring + passthrough + direct:
#                 the build that ships, with libfuse 3.16+ (the system's,
#                 or Debian's 3.18 built in: setup.sh); integration with
#                 the daemon's defaults (as root: passthrough, in place);
#                 the other suites run again the single-node tests whose
#                 requests go another way: over io_uring (--io-uring),
#                 with copies at seal (--no-in-place), every read through
#                 the daemon (--no-passthrough)
#     build-fuse-system/  integration against the system's libfuse,
#                 however old (Debian 12: 3.14, where opens use the page
#                 cache): the single-node tests and 240-group-data
#     build-asan/ unit tests, and the integration tests over the code that
#                 races and maps (threads, the group, parity, passthrough,
#                 io_uring, in each mode), under ASan, UBSan and
#                 LeakSanitizer (they run build-asan's own reftfsd; the
#                 randomized ones with the quick tier's counts, every
#                 daemon being several times slower)
#     build-tsan/ unit tests of the threaded engine modules under TSan
#   bash tools/test.sh --soak [MINUTES]   the long randomized runs, on
#                 demand: RFT_TIER=soak (every pair of nodes lost in every
#                 erasure scheme, 2000 differential trials, 400 rounds of
#                 concurrent writers with replicate:2, xor and none, a
#                 million entries through the group's log, ...)
#                 in build/, then the integration suite against the TSan
#                 daemon; with MINUTES, the randomized tests again with
#                 new seeds until that many minutes have passed.
#
# Seeds and counts come from the caller's environment (DIFF_SEED,
# ERASURE_PAIRS, WRITERS_FUZZ_SEED, ...: each test's header), over the
# tier's.
#
# usage: bash tools/test.sh [--full | --soak [MINUTES]] [meson test args]
#        (the extra arguments go to every meson test run of build/ and
#        build-asan/)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

TIER=quick
SOAK_MINUTES=0
case ${1:-} in
--full) TIER=full; shift ;;
--soak)
	TIER=soak
	shift
	if [[ ${1:-} =~ ^[0-9]+$ ]]; then
		SOAK_MINUTES=$1
		shift
	fi
	;;
--quick) shift ;;
-h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$ d'; exit 0 ;;
esac
export RFT_TIER=$TIER
START=$SECONDS

NPROC=$(nproc 2>/dev/null || echo 2)
PASSED=0
FAILED=0
SKIPPED=0

# Failures are repeated at the end, with the tail of their output, so that a
# log read from its end (CI keeps only the end) names what failed and why.
FAILURES=""

# Every test's time, "SECONDS BUILD_DIR NAME" a line, for slowest().
TIMES=$(mktemp "${TMPDIR:-/tmp}/reftfs-test-times.XXXXXX")

slowest() {
	echo "test: the 20 slowest tests of this run ($TIER tier," \
		"$(((SECONDS - START) / 60)) min in all):" >&2
	sort -rn "$TIMES" | head -n 20 |
		awk '{ printf "test:   %7.1f s  %s  %s\n", $1, $2, $3 }' >&2
	rm -f "$TIMES"
}

summary() {
	slowest
	if [ -n "$FAILURES" ]; then
		echo "test: === what failed, again:" >&2
		printf '%s' "$FAILURES" >&2
	fi
	echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
	[ "$FAILED" = 0 ]
	exit $?
}

# Safety net: a test killed by a timeout must not leave a dead mount
# behind.  Only mounts whose daemon is gone (stat fails: "Transport endpoint
# is not connected") are cleared; live ones may belong to another run.
clear_dead_mounts() {
	awk '$3 == "fuse.reftfs" && $2 ~ "/reftfs-" { print $2 }' /proc/mounts |
		while read -r m; do
			timeout 5 stat -t "$m" >/dev/null 2>&1 && continue
			echo "test: clearing dead mount $m" >&2
			fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
		done
}

# count_results LOG: print "passed failed skipped" of a meson testlog.json.
count_results() {
	/usr/bin/python3 - "$1" <<'PYEOF'
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
}

# failed_tails DIR LOG: for each test of LOG that did not pass or skip, its
# name, result and the last lines of its output.
failed_tails() {
	/usr/bin/python3 - "$1" "$2" <<'PYEOF'
import json, sys
for line in open(sys.argv[2]):
    line = line.strip()
    if not line:
        continue
    t = json.loads(line)
    if t.get("result", "") in ("OK", "EXPECTEDFAIL", "SKIP"):
        continue
    out = (t.get("stdout") or "").splitlines()
    # A hung test's watchdog report (tests/unit/watchdog.h) is shown whole.
    wd = [i for i, l in enumerate(out) if l.startswith("watchdog:")]
    keep = out[wd[0]:][:400] if wd else out[-40:]
    # What the test said failed, and the seeds that replay it, may lie
    # above the last lines (daemon logs come after them): shown first.
    if not wd and len(out) > 40:
        said = [l for l in out[:-40] if "FAIL" in l or "seed" in l]
        keep = said[:40] + ["..."] + keep
    print(f"test: --- {sys.argv[1]}: {t.get('name')}: {t.get('result')} "
          f"after {t.get('duration', 0):.1f}s; {len(keep)} lines:")
    for l in keep:
        print("    " + l)
PYEOF
}

# prepare DIR [meson setup options...]: configure DIR the first time
# (afterwards ninja reconfigures it by itself when a meson.build changes)
# and build it.
prepare() {
	local dir=$1
	shift
	if [ ! -f "$dir/meson-private/coredata.dat" ]; then
		meson setup "$dir" "$@" || return 1
	fi
	ninja -C "$dir"
}

# run_suite DIR [meson test arguments...]: run meson test in DIR and add its
# results to PASSED, FAILED and SKIPPED.  Sanitizer options come from the
# caller's environment.
run_suite() {
	local dir=$1 log=$1/meson-logs/testlog.json p f s rc
	shift
	echo "test: === $dir: meson test $*" >&2
	rm -f "$log"
	# --no-stdsplit: a test's stderr (the engine's log, a watchdog's
	# report) is kept in its log with its stdout, in order.
	meson test -C "$dir" --print-errorlogs --no-stdsplit \
		--num-processes "$NPROC" "$@"
	rc=$?
	clear_dead_mounts
	if [ ! -s "$log" ]; then
		echo "test: $dir: meson test produced no $log (exit $rc)" >&2
		FAILED=$((FAILED + 1))
		return
	fi
	/usr/bin/python3 - "$dir" "$log" >>"$TIMES" <<'PYEOF'
import json, sys
for line in open(sys.argv[2]):
    if line.strip():
        t = json.loads(line)
        print("%.1f %s %s" % (t.get("duration", 0), sys.argv[1],
                              t.get("name", "?").split(" / ")[-1]))
PYEOF
	read -r p f s < <(count_results "$log")
	[ "${f:-0}" = 0 ] || FAILURES+=$(failed_tails "$dir" "$log")$'\n'
	if [ "$rc" != 0 ] && [ "${f:-0}" = 0 ]; then
		echo "test: $dir: meson test exited $rc" >&2
		f=1
	fi
	# Not in the "N passed, N failed" form: only the last line says that.
	echo "test: === $dir: passed ${p:-0}, failed ${f:-1}, skipped ${s:-0}" >&2
	PASSED=$((PASSED + ${p:-0}))
	FAILED=$((FAILED + ${f:-1}))
	SKIPPED=$((SKIPPED + ${s:-0}))
}

if ! bash tools/setup.sh; then
	echo "test: setup or build failed" >&2
	FAILED=1
	summary
fi

# The shipped build must be the fast path: with an older libfuse it would
# test the page-cache path twice and the direct one never.
check_fuse_version() {
	local fuse_v msg
	fuse_v=$(build/fs/reftfsd --version 2>/dev/null | sed -n 's/.*(libfuse \([0-9.]*\)).*/\1/p')
	if [ "$(printf '%s\n3.16\n' "$fuse_v" | sort -V | head -n1)" != 3.16 ]; then
		msg="test: build/ has libfuse '$fuse_v', not 3.16 or later: tools/fetch-libfuse.sh failed (see its output above)"
		echo "$msg" >&2
		FAILURES+="$msg"$'\n'
		FAILED=$((FAILED + 1))
	fi
}

# with_asan CMD...: CMD (run_suite) with the sanitizers' options, which
# halt at the first report.
with_asan() {
	ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$@"
}
with_tsan() {
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp "$@"
}

# The quick tier: every unit test, every integration test once (suite
# quick), in build/.  Unit tests run in parallel; integration tests are
# is_parallel: false, so meson runs them one at a time whatever
# --num-processes says.
quick_tier() {
	run_suite build --suite unit --suite quick "$@"
	check_fuse_version
}

full_tier() {
	# 1. The build that ships, every suite.
	run_suite build --suite unit --suite integration --suite io_uring \
		--suite passthrough --suite direct "$@"
	check_fuse_version

	# 1b. The same integration tests against the system's libfuse, to
	# keep its path (page cache, no FUSE_DIRECT_IO_ALLOW_MMAP on 3.14)
	# correct.  Where the system's is 3.16+ this runs the fast path again.
	if prepare build-fuse-system -Dlibfuse=system -Dcuda=disabled; then
		# Half the differential trials of build/: the same engine.
		DIFF_TRIALS=${DIFF_TRIALS:-12} \
			run_suite build-fuse-system --suite integration "$@"
	else
		echo "test: build-fuse-system: configure or build failed" >&2
		FAILED=$((FAILED + 1))
	fi

	# 2. ASan + UBSan, with leak detection: every daemon the integration
	# tests start is this build's.  clang, not gcc: GCC's UBSan ignores
	# log_path when ASan is linked in too (GCC bug 94328), and
	# tests/integration/lib.sh needs every report in a file, a background
	# daemon's stderr being /dev/null.  b_lundef=false is what meson asks
	# for with clang's sanitizers.  No CUDA in the sanitizer builds: nvcc's
	# code is not instrumented and the CUDA runtime maps memory where ASan
	# keeps its shadow; build/ covers gpu/.  The randomized tests do what
	# the quick tier does (lib.sh's by_tier).
	if CC=clang prepare build-asan -Db_sanitize=address,undefined \
		-Db_lundef=false -Dcuda=disabled; then
		with_asan run_suite build-asan --suite unit \
			--timeout-multiplier 2 "$@"
		# The integration tests over the code that races and maps
		# (threads, the group, parity, passthrough, io_uring), the
		# engine's random operations and bad input; the rest of the
		# suite runs the same code in build/.  The randomized ones with
		# the quick tier's counts (lib.sh's by_tier), the differential
		# test with 12 trials (half of build/'s).
		local asan_tests=() asan_list t
		asan_list=$(meson test -C build-asan --list 2>/dev/null)
		for t in 010-basic-posix 045-truncate-race 065-persist-faults \
			066-persist-read-full 068-spill 069-sync-persist \
			070-bad-input 100-differential \
			105-mmap 107-passthrough 112-io-uring 220-peer-fuzz \
			232-group-log-snapshot 240-group-data 243-group-writers \
			252-group-erasure 254-group-parity-faults \
			256-group-writers 264-group-cache \
			268-group-join 272-group-witness 274-group-force-remove \
			276-group-fsync \
			045-truncate-race+io_uring 107-passthrough+passthrough \
			105-mmap+direct; do
			grep -q " / $t\$" <<<"$asan_list" && asan_tests+=("$t")
		done
		DIFF_TRIALS=${DIFF_TRIALS:-12} \
		with_asan run_suite build-asan --timeout-multiplier 2 \
			"${asan_tests[@]}"
	else
		echo "test: build-asan: configure or build failed" >&2
		FAILED=$((FAILED + 1))
	fi

	# 3. TSan on the unit tests of the modules that take locks and run
	# threads (the common work queue, the engine's and the group's:
	# transports, membership, the raft log, the parity holders), and on
	# 'stress' (randomized concurrent operations).  They drive the
	# engine's threads directly, in seconds; the integration suite
	# against the TSan daemon is the soak tier's.
	# nssnap's log is 30000 entries here (a million in the soak tier).
	# TSan reports libuv racing with itself on a reused descriptor (its
	# thread pool closes files by a raw close(2), which TSan does not
	# see); tests/tsan.supp suppresses that report alone, since
	# suppressing libuv's calls would hide its locks too (tried).  parity
	# runs two of its schemes here, rs:2+2 and rs:2+1 on four nodes (the
	# same holders, folds, drops, orphans and decodes as the others, one
	# and two parity rows): 33 s, against 89 s for all five; build/ and
	# build-asan/ run them all.
	if prepare build-tsan -Db_sanitize=thread -Dcuda=disabled; then
		NSSNAP_ENTRIES=${NSSNAP_ENTRIES:-30000} \
		PARITY_TEST=${PARITY_TEST:-test_rs_2_*} \
		with_tsan run_suite build-tsan --timeout-multiplier 2 \
			common store ns file persist durability pass seal ctl \
			loop peer_tcp peer_fake hs memb registry nslog nssnap \
			parity stress
	else
		echo "test: build-tsan: configure or build failed" >&2
		FAILED=$((FAILED + 1))
	fi
}

# The randomized tests, which the soak tier gives their soak counts, and
# the long ones (a million entries through the group's log).
SOAK_TESTS=(100-differential 105-mmap 107-passthrough 110-small-files
	112-io-uring 220-peer-fuzz 243-group-writers 250-group-fuzz
	250-group-fuzz+xor 252-group-erasure 256-group-writers
	256-group-writers+xor 256-group-writers+none nssnap-million)

soak_tier() {
	local until=$((START + SOAK_MINUTES * 60)) pass=1 list t
	# Those this build has (112-io-uring needs libfuse 3.18).
	list=$(meson test -C build --setup soak --list 2>/dev/null)
	for t in "${!SOAK_TESTS[@]}"; do
		grep -q " / ${SOAK_TESTS[t]}\$" <<<"$list" || unset "SOAK_TESTS[t]"
	done
	# A soak run's test takes up to ten times its usual timeout.
	run_suite build --setup soak --timeout-multiplier 10 "${SOAK_TESTS[@]}" "$@"
	# The integration suite against the TSan daemon, with the counts
	# of a sanitizer build (by_tier).
	if prepare build-tsan -Db_sanitize=thread -Dcuda=disabled; then
		RFT_TIER=full with_tsan run_suite build-tsan \
			--suite integration --timeout-multiplier 4 "$@"
	else
		echo "test: build-tsan: configure or build failed" >&2
		FAILED=$((FAILED + 1))
	fi
	while [ "$SECONDS" -lt "$until" ] && [ "$FAILED" = 0 ]; do
		pass=$((pass + 1))
		echo "test: === soak pass $pass, $(((until - SECONDS) / 60)) min left" >&2
		run_suite build --setup soak --timeout-multiplier 10 "${SOAK_TESTS[@]}" "$@"
	done
}

if ! bash tools/setup.sh; then
	echo "test: setup or build failed" >&2
	FAILED=1
	summary
fi

case $TIER in
quick) quick_tier "$@" ;;
full) full_tier "$@" ;;
soak) soak_tier "$@" ;;
esac

summary
