"""Shared helpers for the reftfs integration tests (run by /usr/bin/python3).

Deterministic test data (fixed seeds), comparisons that say exactly what
differs, and small checks used by several tests.
"""

import errno
import hashlib
import json
import os
import random
import sys


def say(msg):
    print(msg, flush=True)


def check(cond, msg):
    """Assert with a message that survives python -O."""
    if not cond:
        raise AssertionError(msg)


def expect_errno(codes, fn, *args, what=""):
    """Call fn(*args); it must raise OSError with errno in codes.

    Returns the errno it got.
    """
    if isinstance(codes, int):
        codes = (codes,)
    try:
        fn(*args)
    except OSError as e:
        check(e.errno in codes,
              "%s: got %s, want one of %s" % (
                  what or fn.__name__, errno.errorcode.get(e.errno, e.errno),
                  [errno.errorcode[c] for c in codes]))
        return e.errno
    raise AssertionError("%s: succeeded, want %s" % (
        what or fn.__name__, [errno.errorcode[c] for c in codes]))


def pattern(nbytes, seed):
    """nbytes of reproducible pseudo-random data."""
    return random.Random(seed).randbytes(nbytes)


def sha256_file(path, bufsize=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(bufsize)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def drop_caches():
    """Drop the kernel page cache (root only, else a no-op) so the next read
    of a file on a FUSE mount reaches the daemon."""
    if os.geteuid() != 0:
        return
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


def first_diff(a, b):
    n = min(len(a), len(b))
    for i in range(0, n, 4096):
        if a[i:i + 4096] != b[i:i + 4096]:
            for j in range(i, min(i + 4096, n)):
                if a[j] != b[j]:
                    return j
    return n if len(a) != len(b) else -1


def check_bytes(got, want, what):
    if got == want:
        return
    d = first_diff(got, want)
    raise AssertionError(
        "%s: contents differ (len %d vs want %d), first difference at byte "
        "%d: got %r want %r" % (what, len(got), len(want), d,
                                got[d:d + 8], want[d:d + 8]))


# --- torch --------------------------------------------------------------

def make_state_dict(seed=1234, n=100, big_mib=24):
    """A state dict of n tensors of mixed dtypes and shapes.

    Includes 0-d, empty, non-contiguous and storage-sharing tensors, and a
    few multi-MiB tensors so files span several chunks.  big_mib is the
    approximate total size of the large tensors.
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.int64,
              torch.int8, torch.bool, torch.uint8, torch.float64,
              torch.int32, torch.int16]
    shapes = [(), (0,), (3, 0), (1,), (7,), (13, 17), (2, 3, 5), (64, 64),
              (1000,), (3, 1, 4, 1, 5), (257, 3)]
    sd = {}

    def rand(shape, dt):
        if dt == torch.bool:
            return torch.randint(0, 2, shape, generator=g).bool()
        if dt in (torch.int8, torch.int16, torch.int32, torch.int64):
            info = torch.iinfo(dt)
            lo, hi = max(info.min, -(1 << 31)), min(info.max, (1 << 31) - 1)
            return torch.randint(lo, hi, shape, generator=g,
                                 dtype=torch.int64).to(dt)
        if dt == torch.uint8:
            return torch.randint(0, 256, shape, generator=g).to(dt)
        return torch.randn(shape, generator=g, dtype=torch.float32).to(dt)

    i = 0
    while len(sd) < n - 8:
        dt = dtypes[i % len(dtypes)]
        shape = shapes[(i * 7) % len(shapes)]
        sd["layer%03d.%s" % (i, str(dt).split(".")[1])] = rand(shape, dt)
        i += 1
    # Large tensors crossing chunk boundaries at odd offsets.
    per = max(1, big_mib // 4)
    sd["big.f32"] = rand((per * 262144 + 3,), torch.float32)
    sd["big.f16"] = rand((per * 524288 + 5, 1), torch.float16)
    sd["big.bf16"] = rand((per * 262144, 2), torch.bfloat16)
    sd["big.u8"] = rand((per * 1048576 + 11,), torch.uint8)
    base = rand((128, 96), torch.float32)
    sd["view.t"] = base.t()                 # non-contiguous
    sd["view.base"] = base                  # shares storage with view.t
    sd["view.slice"] = base[10:20, 5:50]    # offset into the same storage
    sd["scalar.i64"] = torch.tensor(42, dtype=torch.int64)
    return sd


def compare_state_dicts(got, want, what="state dict"):
    import torch

    check(set(got) == set(want), "%s: keys differ: missing %s, extra %s" % (
        what, sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5]))
    for k in want:
        a, b = got[k], want[k]
        if isinstance(b, torch.Tensor):
            check(isinstance(a, torch.Tensor), "%s[%s]: not a tensor" % (what, k))
            check(a.dtype == b.dtype, "%s[%s]: dtype %s, want %s" % (
                what, k, a.dtype, b.dtype))
            check(a.shape == b.shape, "%s[%s]: shape %s, want %s" % (
                what, k, tuple(a.shape), tuple(b.shape)))
            check(torch.equal(a, b), "%s[%s]: values differ" % (what, k))
        elif isinstance(b, dict):
            check(isinstance(a, dict), "%s[%s]: not a dict" % (what, k))
            compare_state_dicts(a, b, "%s[%s]" % (what, k))
        else:
            check(a == b, "%s[%s]: %r, want %r" % (what, k, a, b))


# --- reftfs-admin ---------------------------------------------------------

def admin_json(mnt, *args):
    """Run reftfs-admin -m mnt --json args and return the parsed JSON."""
    import subprocess

    cmd = [os.environ.get("REFTFS_ADMIN", "reftfs-admin"), "-m", mnt,
           "--json"] + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, "%s: exit %d: %s" % (
        " ".join(cmd), p.returncode, p.stderr.strip()))
    try:
        return json.loads(p.stdout)
    except ValueError as e:
        raise AssertionError("%s: not JSON (%s): %r" % (
            " ".join(cmd), e, p.stdout[:300]))


def walk_json(obj):
    """Yield every dict inside a parsed JSON value."""
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from walk_json(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk_json(v)


def find_entry(obj, name):
    """The first JSON object describing the file whose path or name ends
    with name (reftfs-admin ls --json)."""
    for d in walk_json(obj):
        for key in ("path", "name"):
            v = d.get(key)
            if isinstance(v, str) and (v == name or v.rstrip("/").endswith(
                    "/" + name.lstrip("/")) or v.lstrip("/") == name.lstrip("/")):
                return d
    return None


if __name__ == "__main__":
    sys.exit("rftest.py is a module")
