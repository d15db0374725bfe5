#!/usr/bin/env bash
# Erasure-coded protection across a group: --protect xor and
# --protect rs:K+M, the daemon options otherwise those of 240-group-data.
# For each scheme and group size: every node but the last writes files of
# many sizes (0 bytes to ~7 MiB, around the 1 MiB chunk) into one
# checkpoint, the last writes nothing (stripes with empty slots);
# protect --wait on every node; every file reads back on every node.  Then
# each node in turn (ERASURE_SINGLES) is SIGKILLed: every file reads back byte-identical on
# the survivors, including the files of a fresh checkpoint written just
# before the loss that no survivor ever read (those reads are decoded from
# the stripes, and the survivors' decode counters say so); a replacement
# with the same id and empty memory reads everything before and after its
# rebuild, and protect --wait on every node protects everything again.
# With two parity rows (rs:K+2) every pair of nodes is lost at once as
# well (or a seeded sample of the pairs: ERASURE_PAIRS), each pair the same
# way: a fresh (smaller) checkpoint that no survivor read before, the pair
# killed, every file read back on the survivors, both replaced, every file
# read on the replacements before their rebuild, rebuild --wait, protect
# --wait everywhere, every file read back everywhere.  Node 0
# rewrites, truncates and unlinks protected files, then node 1 is lost: the
# decode must use the updated parity.  Last, one loss more than the scheme
# tolerates: a read of a lost node's file gives EIO in bounded time, never
# other bytes.
#
# Environment:
#   ERASURE_SCHEMES  which runs, "SCHEME:NODES" separated by spaces or
#                    commas, NODES after the last colon (RFT_TIER quick:
#                    "rs:2+2:4"; full: the same; soak:
#                    "xor:3 xor:4 rs:2+1:3 rs:2+2:4 rs:4+2:6"); e.g.
#                    ERASURE_SCHEMES=rs:2+2:4 runs rs:2+2 on 4 nodes only
#   ERASURE_PAIRS    with two parity rows or more, which pairs of nodes are
#                    lost at once: "all" (every pair; RFT_TIER soak), or
#                    N: a random sample of N pairs per scheme, drawn from
#                    the seed (ERASURE_SEED replays it; quick and full: 1)
#   ERASURE_SINGLES  which nodes are lost one at a time: "all" (every node
#                    in turn; soak), or N: a sample drawn from the seed
#                    (quick and full: 1)
#   ERASURE_SEED     replays the file contents and the sample of pairs of
#                    an earlier run (its log prints the seed)
#
# Each run is a subshell with its own temp dir, daemons and EXIT trap
# (lib.sh's _t_cleanup): its daemons are stopped and its mounts cleared
# when it ends, passed or failed, before the next run starts; a failed run
# fails the test at once.
. "$(dirname "$0")/lib.sh"
need_fuse

ALL_SCHEMES="xor:3 xor:4 rs:2+1:3 rs:2+2:4 rs:4+2:6"
# The quick tier: rs:2+2 alone (single and pair losses); xor decodes and
# rebuilds in 243, 254, 256+xor, 258 and 264 there too.  The full tier:
# rs with K 2 and 4 (xor:3, xor:4 and rs:2+1 run the same code with
# another K or M: soak).
# rs:4+2 on 6 nodes (six daemons on CI's 2 cores: 55 s) runs in the soak
# tier; the full tier's rs:2+2 loses a node and a pair as well.
SCHEMES=${ERASURE_SCHEMES:-$(by_tier "rs:2+2:4" "rs:2+2:4" "$ALL_SCHEMES")}
PAIRS=${ERASURE_PAIRS:-$(by_tier 1 1 all)}
SINGLES=${ERASURE_SINGLES:-$(by_tier 0 1 all)}
[ "$SINGLES" = all ] || [[ $SINGLES =~ ^[0-9]+$ ]] ||
	fail "ERASURE_SINGLES='$SINGLES': want all or a number of nodes"
[ "$PAIRS" = all ] || [[ $PAIRS =~ ^[0-9]+$ ]] ||
	fail "ERASURE_PAIRS='$PAIRS': want all or a number of pairs"
SEED=${ERASURE_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
log "seed $SEED (ERASURE_SEED=$SEED replays the file contents and the sample of pairs)"
log "schemes: $SCHEMES; nodes lost one at a time: $SINGLES; pairs lost with two parity rows or more: $PAIRS"
# 0, 1, 100, 4096 bytes; one chunk (1 MiB, the default); one chunk + 17;
# 2.5 chunks; ~7 MiB.
SIZES_LIST="0 1 100 4096 1048576 1048593 2621440 7340035"
# The fresh checkpoint of each pair's round: less to write and read, still
# a file smaller than a chunk and one larger (one chunk + 17).
PAIR_SIZES="100 1048593"
# A read that must end (bytes or EIO) within this many seconds.
READ_DEADLINE=60
TOP_TMP=$T_TMP

# --- files and their manifest ---------------------------------------------
# erasure_files.py CMD MANIFEST ROOT ...: writes, rewrites, truncates and
# unlinks files under ROOT (a node's mount) and keeps MANIFEST (JSON: each
# file's size, sha256, the seed of its contents and its owner; the paths
# unlinked); "check" reads every file of the manifest through ROOT and
# compares it, the listings of its directories, and that unlinked paths
# are gone.  Paths in the manifest are relative to the mount root.
EF=$TOP_TMP/erasure_files.py
cat >"$EF" <<'PYEOF'
import errno, hashlib, json, os, random, shutil, sys, threading, time

def gen(seed, n):
    return random.Random(seed).randbytes(n)

def load(man):
    try:
        with open(man) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"files": {}, "gone": []}

def save(man, m):
    with open(man + ".tmp", "w") as f:
        json.dump(m, f, sort_keys=True)
    os.replace(man + ".tmp", man)

def put(m, root, rel, seed, size, owner, version):
    data = gen(seed, size)
    with open(os.path.join(root, rel), "wb") as f:
        f.write(data)
    m["files"][rel] = {"size": size, "gen": size, "seed": seed,
                       "sha256": hashlib.sha256(data).hexdigest(),
                       "owner": owner, "version": version}
    if rel in m["gone"]:
        m["gone"].remove(rel)

def want_bytes(e):
    return gen(e["seed"], e["gen"])[:e["size"]]

def under(rel, only):
    return not only or rel == only or rel.startswith(only + "/")

def cmd_write(man, root, owner, tag, d, *sizes):
    m = load(man)
    os.makedirs(os.path.join(root, d), exist_ok=True)
    for s in sizes:
        rel = "%s/f.%s" % (d, s)
        put(m, root, rel, "%s:%s:v1" % (tag, rel), int(s), int(owner), 1)
    save(man, m)

def cmd_rewrite(man, root, tag, rel, size):
    m = load(man)
    e = m["files"][rel]
    v = e["version"] + 1
    put(m, root, rel, "%s:%s:v%d" % (tag, rel, v), int(size), e["owner"], v)
    save(man, m)

def cmd_truncate(man, root, rel, size):
    m = load(man)
    e = m["files"][rel]
    size = int(size)
    assert size < e["size"], (rel, size, e["size"])
    os.truncate(os.path.join(root, rel), size)
    e["size"] = size
    e["sha256"] = hashlib.sha256(want_bytes(e)).hexdigest()
    save(man, m)

def cmd_unlink(man, root, rel):
    m = load(man)
    os.unlink(os.path.join(root, rel))
    del m["files"][rel]
    m["gone"].append(rel)
    save(man, m)

def cmd_rmtree(man, root, d):
    m = load(man)
    shutil.rmtree(os.path.join(root, d))
    for rel in [r for r in m["files"] if under(r, d)]:
        del m["files"][rel]
    m["gone"] = [g for g in m["gone"] if not under(g, d)] + [d]
    save(man, m)

def cmd_dirs(man, only=""):
    m = load(man)
    for d in sorted({os.path.dirname(r) for r in m["files"] if under(r, only)}):
        print(d)

def read_all(path, out):
    try:
        h = hashlib.sha256()
        data = bytearray()
        with open(path, "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                data += b
        out.append(("ok", bytes(data)))
    except OSError as ex:
        out.append(("err", ex))

def cmd_check(man, root, *opts):
    # [--only DIR] [--lenient N,N...] [--deadline S]: with --lenient, a
    # file owned by one of those nodes may fail with EIO (never another
    # error, never other bytes).  Prints "files=N eio=E ok=K": E and K
    # count the lenient files that gave EIO and the right bytes.
    opts = list(opts)
    only, lenient, deadline = "", set(), 60.0
    while opts:
        o = opts.pop(0)
        if o == "--only":
            only = opts.pop(0)
        elif o == "--lenient":
            lenient = {int(x) for x in opts.pop(0).split(",") if x}
        elif o == "--deadline":
            deadline = float(opts.pop(0))
        else:
            sys.exit("check: unknown option " + o)
    m = load(man)
    bad = []
    eio = ok = n = 0
    files = {r: e for r, e in m["files"].items() if under(r, only)}
    for rel in sorted(files):
        e = files[rel]
        out = []
        t0 = time.monotonic()
        t = threading.Thread(target=read_all,
                             args=(os.path.join(root, rel), out), daemon=True)
        t.start()
        t.join(deadline)
        if t.is_alive():
            print("%s: read of %s (owner %d) still not done after %g s"
                  % (root, rel, e["owner"], deadline), file=sys.stderr)
            sys.stderr.flush()
            os._exit(1)
        dt = time.monotonic() - t0
        n += 1
        kind, val = out[0]
        if kind == "err":
            if e["owner"] in lenient and val.errno == errno.EIO:
                eio += 1
                continue
            bad.append("%s (owner %d): %s after %.1f s"
                       % (rel, e["owner"], val, dt))
            continue
        if hashlib.sha256(val).hexdigest() == e["sha256"]:
            if e["owner"] in lenient:
                ok += 1
            continue
        want = want_bytes(e)
        if len(val) != len(want):
            bad.append("%s (owner %d): %d bytes, want %d"
                       % (rel, e["owner"], len(val), len(want)))
        else:
            off = next(i for i in range(len(want)) if val[i] != want[i])
            bad.append("%s (owner %d): DIFFERENT BYTES from offset %d "
                       "(chunk %d)" % (rel, e["owner"], off, off >> 20))
    for d in sorted({os.path.dirname(r) for r in files}):
        want = {os.path.basename(r) for r in files
                if os.path.dirname(r) == d}
        try:
            got = {x.name for x in os.scandir(os.path.join(root, d))
                   if x.is_file(follow_symlinks=False)}
        except OSError as ex:
            bad.append("listing %s: %s" % (d, ex))
            continue
        if got != want:
            bad.append("listing %s: extra %s, missing %s"
                       % (d, sorted(got - want), sorted(want - got)))
    for g in m["gone"]:
        if under(g, only) and os.path.lexists(os.path.join(root, g)):
            bad.append("%s: still there after its unlink" % g)
    for b in bad[:20]:
        print("%s: %s" % (root, b), file=sys.stderr)
    if bad:
        print("%s: %d problems" % (root, len(bad)), file=sys.stderr)
        sys.exit(1)
    print("files=%d eio=%d ok=%d" % (n, eio, ok))

cmds = {"write": cmd_write, "rewrite": cmd_rewrite, "truncate": cmd_truncate,
        "unlink": cmd_unlink, "rmtree": cmd_rmtree, "dirs": cmd_dirs,
        "check": cmd_check}
cmds[sys.argv[1]](*sys.argv[2:])
PYEOF

# ef CMD ARGS...: the helper above, on this run's manifest.
ef() {
	local c=$1
	shift
	timeout 600 "$PY" "$EF" "$c" "$MAN" "$@"
}

# --- one run ----------------------------------------------------------------

# The state of every member as node V sees it with nodes DEAD... lost:
# "self up dead ...".
states_for() {
	local v=$1 i s=""
	shift
	for ((i = 0; i < NODES; i++)); do
		if [ "$i" = "$v" ]; then
			s+=" self"
		elif [[ " $* " == *" $i "* ]]; then
			s+=" dead"
		else
			s+=" up"
		fi
	done
	echo "${s# }"
}

# Every node but those given.
others() {
	local i s=""
	for ((i = 0; i < NODES; i++)); do
		[[ " $* " == *" $i "* ]] || s+=" $i"
	done
	echo "${s# }"
}

start_node() { group_node "$1" --mem 256M --protect "$SCHEME"; }

# write_set DIR NODE...: each NODE writes DIR/rankNODE/f.SIZE, for each
# SIZE of $ROUND_SIZES (default SIZES_LIST).
write_set() {
	local d=$1 n
	shift
	for n in "$@"; do
		# shellcheck disable=SC2086
		ef write "${M[$n]}" "$n" "$SEED:$SCHEME:$NODES" "$d/rank$n" \
			${ROUND_SIZES:-$SIZES_LIST} || fail "writing $d/rank$n on node $n"
	done
}

# check_on WHAT NODE...: every file of the manifest reads back
# byte-identical through each NODE's mount (listings, unlinks too).
check_on() {
	local what=$1 n out
	shift
	for n in "$@"; do
		out=$(ef check "${M[$n]}" --deadline "$READ_DEADLINE") ||
			fail "$what: files read through node $n differ (above)"
	done
	log "$what: every file reads back byte-identical on nodes $*"
}

# wait_protected MNT DIR [SECONDS]: until every file in DIR (not below)
# is protected as MNT's daemon sees it (as in 240-group-data).
wait_protected() {
	local m=$1 d=$2 secs=${3:-60} i got=""
	for i in $(seq 1 $((secs * 10))); do
		got=$(admin "$m" ls "/$d" --json | "$PY" -c '
import json, sys
print(" ".join(sorted({f["state"] for f in json.load(sys.stdin) if f["type"] == "file"})))') || got=""
		[ "$got" = protected ] && return 0
		sleep 0.1
	done
	admin "$m" ls "/$d" >&2 || true
	fail "files under /$d on $m: states '$got' after ${secs}s, want protected"
}

# protect_on NODE...: protect --wait on each NODE; none of its files left
# unprotected; then every file of the manifest protected as each sees it.
protect_on() {
	local n d out
	for n in "$@"; do
		out=$(admin "${M[$n]}" protect --wait 2>&1) ||
			fail "protect --wait on node $n: $out"
		expect_eq "$(group_log "${M[$n]}" protect_unprotected)" 0 \
			"protect_unprotected on node $n after protect --wait"
	done
	for d in $(ef dirs); do
		for n in "$@"; do wait_protected "${M[$n]}" "$d" 10; done
	done
}

# rebuilt NODE...: the pieces each NODE has decoded from stripes so far.
rebuilt() {
	local n v
	for n in "$@"; do
		v=$(group_log "${M[$n]}" parity_rebuilt_pieces) ||
			fail "group --json on node $n: no parity_rebuilt_pieces"
		printf '%s ' "$v"
	done
	echo
}

# replace NODE...: replacements with the same ids and empty memory; each
# reads every file before its rebuild; then rebuild --wait on each, every
# node sees every other up, protect --wait on every node, and every file
# reads back on every node.
replace() {
	local v out all
	all=$(others)
	for v in "$@"; do
		start_node "$v"
		check_on "replacement node $v, before its rebuild" "$v"
	done
	for v in "$@"; do
		out=$(admin "${M[$v]}" rebuild --wait 2>&1) ||
			fail "rebuild --wait on node $v: $out"
		if [ "$v" = "$EMPTY" ]; then
			# This node wrote nothing: nothing of its own to bring back.
			grep -Eq "rebuild: (done|nothing to bring back)" <<<"$out" ||
				fail "rebuild --wait on node $v: $out"
		else
			grep -q "rebuild: done" <<<"$out" ||
				fail "rebuild --wait on node $v: $out"
		fi
		log "node $v: ${out##*$'\n'}"
	done
	for v in $all; do wait_states "${M[$v]}" "$(states_for "$v")" 30; done
	# shellcheck disable=SC2086
	protect_on $all
	# shellcheck disable=SC2086
	check_on "replaced node(s) $* rebuilt, every file protected again" $all
}

# lose ROUND VICTIM...: a fresh checkpoint ROUND written by every writer
# and protected, that no other node reads; (with MODIFY=1, node 0 then
# rewrites, truncates and unlinks protected files of ROUND and ckpt-1 and
# protects them again); the VICTIMs SIGKILLed; every file reads back
# byte-identical on the survivors, the victims' files of ROUND decoded
# there; then the victims replaced.  ROUND is removed at the end.  With
# ROUND_SIZES set, ROUND has those sizes only, and its removal is checked for
# ROUND alone (the rest was read everywhere just before).
lose() {
	local round=$1 v s d before after i
	shift
	local victims="$*" surv
	surv=$(others "$@")
	# shellcheck disable=SC2086
	write_set "$round" $WRITERS
	# shellcheck disable=SC2046
	protect_on $(others)
	if [ "${MODIFY:-0}" = 1 ]; then
		for d in "$round" ckpt-1; do
			ef rewrite "${M[0]}" "$SEED:$SCHEME:$NODES" \
				"$d/rank0/f.7340035" 5242883 ||
				fail "rewrite $d/rank0/f.7340035 on node 0"
			ef truncate "${M[0]}" "$d/rank0/f.2621440" 1572870 ||
				fail "truncate $d/rank0/f.2621440 on node 0"
			ef unlink "${M[0]}" "$d/rank0/f.1048576" ||
				fail "unlink $d/rank0/f.1048576 on node 0"
		done
		protect_on 0
		log "node 0 rewrote, truncated and unlinked protected files of $round and ckpt-1; protected again"
	fi
	# shellcheck disable=SC2086
	before=$(rebuilt $surv) || fail "parity_rebuilt_pieces of nodes $surv"
	read -r -a before <<<"$before"
	for v in "$@"; do kill_daemon "${M[$v]}" "${PID[$v]}"; done
	# shellcheck disable=SC2086
	for s in $surv; do wait_states "${M[$s]}" "$(states_for "$s" "$@")" 30; done
	# shellcheck disable=SC2086
	check_on "nodes $victims lost" $surv
	# The victims' files of ROUND were never read on a survivor: each
	# survivor decoded them from the stripes.
	local owned=0
	for v in "$@"; do
		if [[ " $WRITERS " == *" $v "* ]]; then owned=1; fi
	done
	if [ "$owned" = 1 ]; then
		# shellcheck disable=SC2086
		after=$(rebuilt $surv) || fail "parity_rebuilt_pieces of nodes $surv"
		read -r -a after <<<"$after"
		i=0
		for s in $surv; do
			[ "${after[$i]}" -gt "${before[$i]}" ] ||
				fail "node $s read the files of lost node(s) $victims in $round without decoding a piece (parity_rebuilt_pieces ${before[$i]} -> ${after[$i]})"
			i=$((i + 1))
		done
		log "survivors $surv decoded pieces: parity_rebuilt_pieces ${before[*]} -> ${after[*]}"
	fi
	replace "$@"
	ef rmtree "${M[0]}" "$round" || fail "rm -r $round on node 0"
	if [ -n "${ROUND_SIZES:-}" ]; then
		for s in $(others); do
			ef check "${M[$s]}" --only "$round" >/dev/null ||
				fail "$round removed: still seen through node $s (above)"
		done
		log "$round removed: gone on nodes $(others)"
	else
		# shellcheck disable=SC2046
		check_on "$round removed" $(others)
	fi
}

# pairs_for: the pairs of nodes to lose at once ("I,J ..."): every pair, or
# with ERASURE_PAIRS=N a sample of N drawn from the seed and the scheme.
# singles_for: the nodes to lose one at a time, the same way from
# ERASURE_SINGLES.
pairs_for() { sample_of 2 "$PAIRS"; }
singles_for() { sample_of 1 "$SINGLES"; }
sample_of() { # sample_of K WANT: every K nodes at once, or WANT of them
	"$PY" - "$NODES" "$1" "$2" "$SEED:$SCHEME:$NODES:$1" <<'PYEOF'
import itertools, random, sys
nodes, k, want, seed = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
# The seed string of pairs as it was, so that earlier seeds replay.
seed = seed[:-2] + ":pairs" if k == 2 else seed
sets = list(itertools.combinations(range(nodes), k))
if want != "all" and int(want) < len(sets):
    sets = sorted(random.Random(seed).sample(sets, int(want)))
print(" ".join(",".join("%d" % n for n in c) for c in sets))
PYEOF
}

# run_scheme SCHEME NODES: the whole test for one scheme and group size.
run_scheme() {
	SCHEME=$1 NODES=$2
	local want n s surv v r out
	MAN=$T_TMP/manifest.json
	case $SCHEME in
	xor) PM=1 want="xor:$((NODES - 1))" ;;
	xor:*) PM=1 want=$SCHEME ;;
	rs:*+*) PM=${SCHEME##*+} want=$SCHEME ;;
	*) fail "unknown scheme '$SCHEME'" ;;
	esac
	[ "$NODES" -ge 3 ] || fail "$SCHEME:$NODES: this test needs 3 nodes or more"
	log "=== --protect $SCHEME on $NODES nodes (tolerates $PM lost) ==="
	EMPTY=$((NODES - 1)) # writes nothing: stripes with empty slots
	WRITERS=$(others "$EMPTY")
	ALLN=$(others)

	group_init "$NODES"
	for ((n = 0; n < NODES; n++)); do start_node "$n"; done
	wait_states "${M[0]}" "$(states_for 0)"
	# The bootstrap configuration is entry 1 of the namespace log, the
	# leader's barrier entry 2 (230-group-log), whatever the group's size:
	# committed means a majority has it.
	# shellcheck disable=SC2034 # read by wait_agree (lib.sh)
	MIN_COMMIT=2
	# shellcheck disable=SC2086
	wait_agree 30 $ALLN
	log "group up: leader $LEADER"

	# --- 1, 2: every writer's files, protected, read on every node -----
	# shellcheck disable=SC2086
	write_set ckpt-1 $WRITERS
	# shellcheck disable=SC2086
	protect_on $ALLN
	# shellcheck disable=SC2086
	check_on "ckpt-1 written by nodes $WRITERS (node $EMPTY wrote nothing), protected" $ALLN

	# --- 6: status -------------------------------------------------------
	out=$(admin "${M[0]}" status --json) || fail "status --json on node 0: $out"
	"$PY" -c 'import json, sys
g = json.load(sys.stdin)["group"]
assert g["protect_on"] is True, g
assert g["protect_scheme"] == sys.argv[1], (g["protect_scheme"], sys.argv[1])
assert g["protect_unprotected"] == 0, g' "$want" <<<"$out" ||
		fail "status --json on node 0: $out"
	# Node 0 holds parity rows for the others (rows rotate over every
	# node), counted against its memory: status shows them as parity.
	"$PY" -c 'import json, sys
j = json.load(sys.stdin)
g, m = j["group"], j["memory"]
assert g["parity_rows"] > 0, g
# Rows are as long as their longest member: a block of 4 KiB and up,
# at most a chunk.
assert 4096 * g["parity_rows"] <= g["parity_bytes"] <= g["parity_rows"] * m["chunk_size_bytes"], (g, m)
assert m["parity_bytes"] == g["parity_bytes"], (g, m)' <<<"$out" ||
		fail "status --json on node 0: parity rows and bytes: $out"
	log "status: scheme $want, parity $(
		"$PY" -c 'import json, sys
g = json.load(sys.stdin)["group"]
print(g["parity_bytes"], "in", g["parity_rows"], "rows")' <<<"$out")"

	# --- 3: each node lost in turn (or ERASURE_SINGLES of them), then
	# replaced ----------------------------------------------------------
	local singles
	singles=$(singles_for) || fail "choosing the nodes to lose"
	log "nodes lost one at a time (ERASURE_SINGLES=$SINGLES): $singles"
	r=0
	for v in $singles; do
		r=$((r + 1))
		lose "round-$r" "$v"
	done
	# Two parity rows: every pair of nodes (or ERASURE_PAIRS of them) lost
	# at once (with 4 nodes, the namespace log has no majority until a
	# replacement is up: reads only).
	if [ "$PM" -ge 2 ]; then
		local pairs p
		pairs=$(pairs_for) || fail "choosing the pairs of nodes to lose"
		log "pairs of nodes lost at once (ERASURE_PAIRS=$PAIRS): $pairs"
		for p in $pairs; do
			r=$((r + 1))
			ROUND_SIZES=$PAIR_SIZES lose "round-$r" "${p%,*}" "${p#*,}"
		done
	fi

	# --- 5: rewrite, truncate, unlink, then a loss ----------------------
	r=$((r + 1))
	MODIFY=1 lose "round-$r" 1

	# --- 4: one loss more than the scheme tolerates -------------------
	# Victims 1..PM+1; node 0 (at least) survives.  Every node writes a
	# fresh checkpoint (full stripes: no empty slot) that no survivor
	# reads before: once its owner and PM more are gone, a read of a
	# victim's file of it gives EIO (or, never other bytes, the right
	# ones), within READ_DEADLINE.
	if [ $((PM + 1)) -ge "$NODES" ]; then
		log "no loss beyond $PM to try with $NODES nodes"
		return 0
	fi
	local victims="" lenient
	for ((v = 1; v <= PM + 1; v++)); do victims+="$v "; done
	# shellcheck disable=SC2086
	surv=$(others $victims)
	# shellcheck disable=SC2086
	write_set lost $ALLN
	# shellcheck disable=SC2086
	protect_on $ALLN
	# shellcheck disable=SC2086
	for v in $victims; do kill_daemon "${M[$v]}" "${PID[$v]}"; done
	for s in $surv; do
		# shellcheck disable=SC2086
		wait_states "${M[$s]}" "$(states_for "$s" $victims)" 30
	done
	lenient=$(tr ' ' , <<<"${victims% }")
	# Files of the survivors' nodes read back strictly, the victims'
	# (--lenient) with EIO or the right bytes.
	for s in $surv; do
		# ckpt-1 was read on every node before: EIO or the right bytes.
		ef check "${M[$s]}" --only ckpt-1 --lenient "$lenient" \
			--deadline "$READ_DEADLINE" >/dev/null ||
			fail "ckpt-1 on node $s with nodes $victims lost: other bytes, another error, or too slow"
		# lost/ was never read here: EIO for some file of every victim
		# at least (its stripes cannot be decoded), never other bytes.
		out=$(ef check "${M[$s]}" --only lost --lenient "$lenient" \
			--deadline "$READ_DEADLINE") ||
			fail "lost/ on node $s with nodes $victims lost: other bytes, another error, or too slow"
		out=${out##*$'\n'}
		[[ $out =~ ^files=[0-9]+\ eio=([0-9]+)\ ok=[0-9]+$ ]] ||
			fail "check of lost/ on node $s said '$out'"
		[ "${BASH_REMATCH[1]}" -gt 0 ] ||
			fail "node $s read every file of lost nodes $victims under lost/ with $((PM + 1)) nodes lost ($out): decoded from what?"
		log "node $s with nodes $victims lost: its own files read back; the lost nodes' files under lost/: $out"
	done
	log "=== --protect $SCHEME on $NODES nodes: passed ==="
}

# --- the runs ---------------------------------------------------------------
runs=0
for item in ${SCHEMES//,/ }; do
	scheme=${item%:*} nodes=${item##*:}
	if [ "$scheme" = "$item" ] || ! [[ $nodes =~ ^[0-9]+$ ]]; then
		fail "ERASURE_SCHEMES: bad entry '$item' (want SCHEME:NODES, e.g. xor:3 or rs:2+2:4)"
	fi
	runs=$((runs + 1))
	(
		# A temp dir, daemons and mounts of its own; lib.sh's cleanup
		# stops them when the subshell exits, however it exits.
		T_TMP=$TOP_TMP/run$runs
		mkdir "$T_TMP"
		_T_MOUNTS=() _T_TMPFS=() _T_PIDS=() _T_RM=() _T_CGROUPS=()
		trap _t_cleanup EXIT
		trap 'exit 143' TERM
		trap 'exit 130' INT
		run_scheme "$scheme" "$nodes"
	)
done
[ "$runs" -gt 0 ] || fail "ERASURE_SCHEMES='$SCHEMES' names no run"
log "passed: $SCHEMES"
