#!/usr/bin/env bash
# One namespace and replicated data across a group (issue 8): three daemons
# on loopback with --protect replicate:2.  Namespace changes made on one node
# are seen on the others when the call returns; files written on each node
# read back byte-identical on every node; exclusive creates of one name race
# from two nodes (one wins); a rank-0 rename of a directory of every rank's
# files moves them everywhere; then a node is SIGKILLed, its mount cleared,
# and a replacement with the same id and empty memory reads everything back
# from its peers, before and after its rebuild.
. "$(dirname "$0")/lib.sh"
need_fuse

group_init 3
REF=$(new_dir ref)
start_node() { group_node "$1" --mem 256M --protect replicate:2; }

start_node 0
start_node 1
start_node 2
wait_states "${M[0]}" "self up up"
MIN_COMMIT=2
wait_agree 30 0 1 2
log "group up: leader $LEADER"

# --- namespace changes are seen on every node when the call returns -------
mkdir "${M[0]}/a"
for n in 1 2; do
	[ -d "${M[$n]}/a" ] || fail "mkdir on node 0 not seen on node $n"
done
echo hello >"${M[1]}/a/note"
for n in 0 2; do
	expect_eq "$(cat "${M[$n]}/a/note")" hello "a/note written on node 1, read on node $n"
done
mv "${M[2]}/a/note" "${M[2]}/a/note2"
for n in 0 1; do
	[ -e "${M[$n]}/a/note" ] && fail "a/note still on node $n after rename on 2"
	[ -f "${M[$n]}/a/note2" ] || fail "a/note2 missing on node $n"
done
rm "${M[0]}/a/note2"
rmdir "${M[1]}/a"
for n in 0 1 2; do
	[ -e "${M[$n]}/a" ] && fail "a still on node $n after rmdir on node 1"
done
log "mkdir, create, rename, unlink, rmdir seen on every node"

# Every rank makes the same directories at once (exist_ok=True).  Each
# call has a time limit (exit 124) where the daemon has not read its
# request yet; one it has read waits past any signal, and the test's
# deadline (lib.sh) reports it (hung once in CI, 2026-11-28).
# Each job is waited for by its pid: bash 5.2's `wait -n` does not report
# a job that ended before it was called (`sleep 9 & true & sleep 1; wait
# -n` waits 9 s), and the daemons are this shell's jobs too, so it hung
# here for good when a quick job ended first.
HANG="timeout -k 5 60"
pids=()
for n in 0 1 2; do
	$HANG "$PY" -c 'import os, sys
for i in range(20):
    os.makedirs(os.path.join(sys.argv[1], "tmp-checkpoint-1", "sub%d" % i), exist_ok=True)' "${M[$n]}" &
	pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
[ "$rc" = 0 ] || fail "concurrent os.makedirs(exist_ok=True) failed on some node (exit $rc; 124: hung for 60 s)"
# Exclusive creates of one name from two nodes: exactly one wins.
wins=0
for k in $(seq 1 10); do
	pids=()
	for n in 0 1; do
		$HANG "$PY" -c 'import os, sys
try:
    os.close(os.open(sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
except FileExistsError:
    sys.exit(3)' "${M[$n]}/tmp-checkpoint-1/excl$k" &
		pids+=($!)
	done
	ok=0 ex=0
	for p in "${pids[@]}"; do
		if wait "$p"; then ok=$((ok + 1)); else
			rc=$?; [ "$rc" = 3 ] || fail "O_EXCL create failed with $rc (124: hung for 60 s)"; ex=$((ex + 1)); fi
	done
	[ "$ok" = 1 ] && [ "$ex" = 1 ] || fail "O_EXCL race $k: $ok won, $ex got EEXIST"
	wins=$((wins + 1))
done
log "makedirs(exist_ok) from 3 nodes at once, 10 O_EXCL races: one winner each"

# Every node renames files in one directory at once (each rank's file, then
# its tracker).  A peer confirms another's rename without waiting for its
# kernel to drop the file's old name (the kernel revalidates it at its next
# use): when it waited, each invalidation queued behind the peer's own
# rename, which holds the directory's lock there while it waits for the
# group, and every rename took the 500 ms cap.
mkdir "${M[0]}/renames"
pids=()
for n in 0 1 2; do
	$HANG "$PY" -c 'import os, sys, time
d, n = sys.argv[1], sys.argv[2]
for i in range(10):
    tmp = os.path.join(d, "n%s.%d.tmp" % (n, i))
    with open(tmp, "wb") as f:
        f.write(b"%s %d" % (n.encode(), i))
        f.flush()
        os.fsync(f.fileno())
    t = time.monotonic()
    os.rename(tmp, os.path.join(d, "n%s.%d" % (n, i)))
    print("%.4f" % (time.monotonic() - t))' "${M[$n]}/renames" "$n" \
		>"$T_TMP/renames.$n" &
	pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
[ "$rc" = 0 ] || fail "concurrent renames in one directory failed (exit $rc; 124: hung for 60 s)"
log "renames in one directory from 3 nodes at once, seconds each: $(sort -n "$T_TMP"/renames.? | awk '{ a[NR] = $1 } END { printf "median %s, max %s", a[int((NR + 1) / 2)], a[NR] }')"
for n in 0 1 2; do
	expect_eq "$(ls "${M[$n]}/renames" | wc -l)" 30 "names in renames/ on node $n"
	expect_eq "$(cat "${M[$n]}/renames/n2.9")" "2 9" "renames/n2.9 on node $n"
	expect_eq "$(group_log "${M[$n]}" log_waits_capped)" 0 \
		"node $n: peers' renames confirmed at the invalidation cap"
	[ "$(group_log "${M[$n]}" log_waits)" -gt 0 ] ||
		fail "node $n confirmed no peer's change"
done
# A directory moved to another parent on one node is moved back on another
# right after: that one's kernel must have dropped the old name when the
# first move returned (it keeps a directory under one name, and cannot
# move that alias while its own rename holds the rename lock: ESTALE).
mkdir -p "${M[1]}/renames/a/d0" "${M[1]}/renames/b"
for k in 1 2 3 4 5; do
	stat "${M[1]}/renames/a/d$((k - 1))" >/dev/null
	mv "${M[0]}/renames/a/d$((k - 1))" "${M[0]}/renames/b/x$k"
	mv "${M[1]}/renames/b/x$k" "${M[1]}/renames/a/d$k" ||
		fail "a directory moved on node 0 could not be moved again on node 1"
done
[ -d "${M[2]}/renames/a/d5" ] || fail "renames/a/d5 missing on node 2"
rm -r "${M[0]}/renames"
log "30 renames in one directory from 3 nodes at once, none at the invalidation cap; a directory moved on two nodes in turn"

# --- each rank writes its files on its own node --------------------------
SIZES="0 100 4096 1048593 9437201"
write_ranks tmp-checkpoint-1
# Every rank's files on the nodes given, under $DIR (it is renamed).
check_all() { check_ranks "$1" "$DIR" "${@:2}"; }
# torch.save of each rank's state dict on its own node; torch.load of
# every rank's file on every node equals the reference saved outside.
if "$PY" -c 'import torch' 2>/dev/null; then
	for n in 0 1 2; do
		"$PY" -c 'import sys, torch
torch.manual_seed(int(sys.argv[1]))
sd = {"w%d" % i: torch.randn(256, 257 + i) for i in range(6)}
sd["step"] = 1200
torch.save(sd, sys.argv[2])
torch.save(sd, sys.argv[3])' "$n" "${M[$n]}/tmp-checkpoint-1/model_rank$n.pt" "$REF/model_rank$n.pt" ||
			fail "torch.save on node $n failed"
	done
	pairs=()
	for n in 0 1 2; do
		for r in 0 1 2; do
			cmp "$REF/model_rank$r.pt" "${M[$n]}/tmp-checkpoint-1/model_rank$r.pt" ||
				fail "model_rank$r.pt differs on node $n"
			pairs+=("${M[$n]}/tmp-checkpoint-1/model_rank$r.pt" "$REF/model_rank$r.pt")
		done
	done
	# Every rank's file on every node, loaded in one process (one
	# import of torch, not nine).
	"$PY" -c 'import sys, torch
for got, ref in zip(sys.argv[1::2], sys.argv[2::2]):
    a, b = torch.load(got), torch.load(ref)
    assert a.keys() == b.keys() and all(
        (a[k] == b[k]).all() if torch.is_tensor(a[k]) else a[k] == b[k]
        for k in a), got' "${pairs[@]}" ||
		fail "torch.load of a rank's file differs on some node (above)"
	log "torch.save on each node, torch.load of every rank on every node"
else
	log "python3-torch missing: torch part skipped"
fi
DIR=tmp-checkpoint-1
check_all "written" 0 1 2
log "every rank's files read back byte-identical on every node"
mv "${M[0]}/tmp-checkpoint-1" "${M[0]}/checkpoint-1"
DIR=checkpoint-1
for n in 0 1 2; do
	[ -e "${M[$n]}/tmp-checkpoint-1" ] && fail "tmp-checkpoint-1 still on node $n"
done
check_all "after rank 0's rename" 0 1 2
log "rank 0's rename moved every rank's files on every node"

# --- every file protected ------------------------------------------------
# wait_protected MNT [SECONDS]: until every file under /checkpoint-1 is
# protected as MNT's daemon sees it (reftfs-admin wait, given the path in
# the mount as a job script would).
wait_protected() {
	local m=$1 secs=${2:-60} out rc=0
	out=$(admin "$m" wait "$m/checkpoint-1" --protected --timeout "$secs" 2>&1) || rc=$?
	[ "$rc" = 0 ] && return 0
	admin "$m" ls /checkpoint-1 | grep -v '^protected' >&2
	fail "files under /checkpoint-1 on $m: wait --protected exited $rc: $out"
}
for n in 0 1 2; do
	out=$(admin "${M[$n]}" protect --wait) || fail "protect --wait on node $n: $out"
	grep -q "0 files of this node not protected" <<<"$out" ||
		fail "protect --wait on node $n: $out"
done
for n in 0 1 2; do wait_protected "${M[$n]}" 5; done
expect_eq "$(admin "${M[1]}" checkpoints --json | "$PY" -c 'import json, sys
c = json.load(sys.stdin)
print(c["newest_protected"], c["newest_persisted"],
      [(k["state"], k["files"] == k["protected_files"] >= 15) for k in c["checkpoints"] if k["name"] == "checkpoint-1"])')" \
	"checkpoint-1 None [('protected', True)]" "checkpoints on node 1 (no persist dir)"
out=$(admin "${M[0]}" metrics)
for f in "reftfs_protect_unprotected_files 0" "reftfs_rebuild_files_not_back 0"; do
	grep -Fx "$f" <<<"$out" >/dev/null || fail "metrics: no '$f'"
done
grep -E '^reftfs_protect_bytes_held [1-9]' <<<"$out" >/dev/null ||
	fail "metrics: node 0 holds no bytes for peers"
# ls: each rank's files are owned by its node, with a copy on the next
# node of the ring.
for n in 0 1 2; do
	got=$(admin "${M[$n]}" ls /checkpoint-1 --json | "$PY" -c '
import json, sys
print(" ".join(sorted({"%s:%s" % (f["path"].split("/")[-1].split(".")[0], f["holders"])
                       for f in json.load(sys.stdin) if f["path"].split("/")[-1].startswith("rank")})))')
	expect_eq "$got" "rank0:0+1 rank1:1+2 rank2:2+0" "owners and holders as node $n lists them"
done
# placement: every piece of rank 1's 9 MiB file, its checksum, held by 1+2.
got=$(admin "${M[0]}" placement /checkpoint-1/rank1.9437201 --json | "$PY" -c '
import json, sys
p = json.load(sys.stdin)
print(len(p), sum(x["size"] for x in p), sorted({x["nodes"] for x in p}),
      all(len(x["crc32c"]) == 8 for x in p))')
expect_eq "$got" "10 9437201 ['1+2'] True" "placement of rank1.9437201 on node 0"
log "every file protected (replicate:2) as every node sees it, copies on the next node"

# --- a truncate on another node brings in a piece longer than the file ----
# A 600000-byte file of node 2 truncated to 440000 on node 1: node 1 takes
# it over and loads its piece, whose holders send the sealed 600000 bytes,
# into memory of its own.  A block for the 440000 bytes the file keeps
# would be too small: 512 KiB, the same slab's next block just behind it.
# Node 1's own files of 500000 bytes sit two to a slab; every other one is
# unlinked first, so that the load gets the block in front of one of them.
mkdir "${M[1]}/trunc"
head -c 600000 /dev/urandom >"$REF/long"
cp "$REF/long" "${M[2]}/trunc/long"
for k in $(seq 0 7); do
	head -c 500000 /dev/urandom >"$REF/y$k"
	cp "$REF/y$k" "${M[1]}/trunc/y$k"
done
admin "${M[1]}" protect --wait >/dev/null || fail "protect --wait on node 1 (trunc/)"
for k in 0 2 4 6; do rm "${M[1]}/trunc/y$k"; done
truncate -s 440000 "${M[1]}/trunc/long"
head -c 440000 "$REF/long" >"$REF/long.440000"
for n in 1 0 2; do
	cmp "$REF/long.440000" "${M[$n]}/trunc/long" ||
		fail "trunc/long, truncated on node 1, differs on node $n"
	for k in 1 3 5 7; do
		cmp "$REF/y$k" "${M[$n]}/trunc/y$k" ||
			fail "trunc/y$k differs on node $n after node 1 loaded trunc/long"
	done
done
rm -r "${M[1]}/trunc"
log "a file truncated on another node: its piece loaded without touching memory beside it"

# --- node 1 lost: its files come from their replicas ---------------------
kill_daemon "${M[1]}" "${PID[1]}"
wait_states "${M[0]}" "self dead up" 30
check_all "node 1 dead" 0 2
log "node 1 SIGKILLed: its files read back from replicas on nodes 0 and 2"
# Node 0's copies go to node 1 (ring placement): what node 0 writes now
# cannot be protected, and protect --wait says why.
head -c 300000 /dev/urandom >"$REF/after"
cp "$REF/after" "${M[0]}/$DIR/after"
if out=$(admin "${M[0]}" protect --wait 2>&1); then
	fail "protect --wait on node 0 with its holder dead exited 0: $out"
fi
grep -q "node 1, a holder of its copies, is dead" <<<"$out" ||
	fail "protect --wait on node 0 with its holder dead: $out"
log "protect --wait with a holder dead: $out"

# --- a replacement with node 1's id and empty memory ---------------------
start_node 1
check_all "replacement, before rebuild" 1 0 2
log "replacement node 1 reads every file back byte-identical"
out=$(admin "${M[1]}" rebuild --wait) || fail "rebuild --wait on node 1: $out"
grep -q "rebuild: done" <<<"$out" || fail "rebuild --wait on node 1: $out"
for n in 0 1 2; do
	admin "${M[$n]}" protect --wait >/dev/null || fail "protect --wait on node $n after the rebuild"
done
for n in 0 1 2; do wait_protected "${M[$n]}" 5; done
expect_eq "$(admin "${M[1]}" checkpoints --json | "$PY" -c 'import json, sys
c = json.load(sys.stdin)
print(c["newest_protected"], c["newest_persisted"],
      [(k["state"], k["files"] == k["protected_files"] >= 15) for k in c["checkpoints"] if k["name"] == "checkpoint-1"])')" \
	"checkpoint-1 None [('protected', True)]" "checkpoints on node 1 (no persist dir)"
check_all "after rebuild" 1 0 2
for n in 0 1 2; do
	cmp "$REF/after" "${M[$n]}/$DIR/after" || fail "after differs on node $n"
done
log "rebuild --wait, protect --wait: every file protected again and read back on every node"

# --- a paced rebuild does not hold up an unmount --------------------------
# With --protect-bw 16K, once a 1 MB file of node 1 is back the rebuild
# owes a minute before its next file: an unmount meanwhile must not wait.
kill_daemon "${M[1]}" "${PID[1]}"
wait_states "${M[0]}" "self dead up" 30
group_node 1 --mem 256M --protect replicate:2 --protect-bw 16K
PID[1]=$DAEMON_PID
for i in $(seq 1 300); do
	back=$(admin "${M[1]}" rebuild --json | "$PY" -c '
import json, sys
print(json.load(sys.stdin)["bytes"])')
	[ "$back" -ge 1048593 ] && break
	sleep 0.1
done
[ "$back" -ge 1048593 ] || fail "the paced rebuild brought back $back bytes in 30 s"
# The others see it rebuilding (its heartbeats say so).
wait_states "${M[0]}" "self rebuilding up" 10
log "paced rebuild: $back bytes back, node 0 sees node 1 rebuilding; unmounting"
stop_daemon "${M[1]}" "${PID[1]}" 10
start_node 1
admin "${M[1]}" rebuild --wait >/dev/null || fail "rebuild --wait on node 1"
wait_states "${M[0]}" "self up up" 10
log "a replacement with a paced rebuild unmounted at once; restarted, it rebuilt"

# --- more losses than replicate:2 tolerates ------------------------------
# Files node 1 writes now have their copies on nodes 1 and 2 only, and node
# 0 never read them (what it read it keeps, checked, as a cache).  Both
# lost, no persist dir: EIO, never other bytes, and in bounded time.
for s in 100 9437201; do
	head -c "$s" /dev/urandom >"$REF/late.$s"
	cp "$REF/late.$s" "${M[1]}/$DIR/late.$s"
done
for n in 0 1 2; do wait_protected "${M[$n]}"; done
kill_daemon "${M[1]}" "${PID[1]}"
kill_daemon "${M[2]}" "${PID[2]}"
wait_states "${M[0]}" "self dead dead" 30
for s in $SIZES; do
	cmp "$REF/rank0.$s" "${M[0]}/$DIR/rank0.$s" || fail "node 0's own rank0.$s after two losses"
done
t0=$(date +%s)
for s in 100 9437201; do
	if out=$(timeout 60 cat "${M[0]}/$DIR/late.$s" 2>&1 >/dev/null); then
		fail "late.$s read on node 0 with both its holders dead"
	fi
	grep -q 'Input/output error' <<<"$out" || fail "late.$s: want EIO, got: $out"
done
t1=$(date +%s)
[ $((t1 - t0)) -le 20 ] || fail "EIO for lost files took $((t1 - t0)) s"
check_all "two nodes lost, what node 0 read before" 0
log "two nodes lost: node 0's files and what it read before read back, node 1's new files give EIO in $((t1 - t0)) s"
