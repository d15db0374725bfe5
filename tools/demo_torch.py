"""The PyTorch side of tools/demo.sh: save a small model into reftfs, load it
back later and compare with a reference copy kept outside the mount.

usage: demo_torch.py save CKPT_FILE REF_DIR [RANK]
       demo_torch.py load CKPT_FILE REF_DIR

save trains a small MLP for a few steps and torch.saves model + optimizer
state to CKPT_FILE (on reftfs) and the same object to REF_DIR (outside).
load torch.loads both and compares every tensor and the file bytes.
Runs under /usr/bin/python3 (Debian's python3-torch).
"""

import hashlib
import os
import sys
import time

import torch


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def build(rank=0):
    torch.manual_seed(100 + rank)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 2048), torch.nn.GELU(),
        torch.nn.Linear(2048, 2048), torch.nn.GELU(),
        torch.nn.Linear(2048, 1024), torch.nn.GELU(),
        torch.nn.Linear(1024, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(3):
        opt.zero_grad()
        x = torch.randn(64, 1024)
        loss = torch.nn.functional.cross_entropy(
            model(x), torch.randint(0, 10, (64,)))
        loss.backward()
        opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict(),
            "step": 100, "rng": torch.get_rng_state()}


def tensors(obj, prefix=""):
    """Every tensor inside a nested dict/list, by a readable path."""
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from tensors(v, "%s/%s" % (prefix, k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from tensors(v, "%s[%d]" % (prefix, i))


def save(path, ref_dir, rank=0):
    ckpt = build(rank)
    n = sum(t.numel() * t.element_size() for _, t in tensors(ckpt))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    t = time.perf_counter()
    torch.save(ckpt, path)
    dt = time.perf_counter() - t
    os.makedirs(ref_dir, exist_ok=True)
    ref = os.path.join(ref_dir, os.path.basename(path))
    torch.save(ckpt, ref)
    size = os.path.getsize(path)
    print("torch.save %s: %d tensors, %.1f MB in %.3f s (%.2f GB/s)" % (
        path, len(list(tensors(ckpt))), size / 1e6, dt, size / 1e9 / dt))
    print("reference copy %s, sha256 %s" % (ref, sha256(ref)))


def load(path, ref_dir):
    ref = os.path.join(ref_dir, os.path.basename(path))
    t = time.perf_counter()
    got = torch.load(path, map_location="cpu")
    dt = time.perf_counter() - t
    want = torch.load(ref, map_location="cpu")
    print("torch.load %s in %.3f s" % (path, dt))
    g, w = dict(tensors(got)), dict(tensors(want))
    bad = []
    if set(g) != set(w):
        bad.append("tensor names differ: %s" % sorted(set(g) ^ set(w))[:5])
    for k in sorted(set(g) & set(w)):
        if g[k].dtype != w[k].dtype or g[k].shape != w[k].shape or \
                not torch.equal(g[k], w[k]):
            bad.append("tensor %s differs" % k)
    if got["step"] != want["step"]:
        bad.append("step %r != %r" % (got["step"], want["step"]))
    hs, hr = sha256(path), sha256(ref)
    if hs != hr:
        bad.append("file sha256 %s != reference %s" % (hs, hr))
    # The restored weights work in a model.
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 2048), torch.nn.GELU(),
        torch.nn.Linear(2048, 2048), torch.nn.GELU(),
        torch.nn.Linear(2048, 1024), torch.nn.GELU(),
        torch.nn.Linear(1024, 10))
    model.load_state_dict(got["model"])
    print("compared %d tensors; file sha256 %s" % (len(w), hs))
    for b in bad[:20]:
        print("  " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    if not (len(sys.argv) == 4 or (len(sys.argv) == 5 and
                                   sys.argv[1] == "save")) or \
            sys.argv[1] not in ("save", "load"):
        sys.exit(__doc__)
    if sys.argv[1] == "save":
        save(sys.argv[2], sys.argv[3],
             int(sys.argv[4]) if len(sys.argv) == 5 else 0)
        sys.exit(0)
    sys.exit(load(sys.argv[2], sys.argv[3]))
