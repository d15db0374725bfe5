"""torch.save / torch.load and numpy save/load through a mount.

usage: torch_roundtrip.py MOUNT_DIR TMPFS_DIR

The same objects are saved into MOUNT_DIR and TMPFS_DIR under the same file
names (torch's zip archive embeds the file stem); the files must be
byte-identical, and what loads back from the mount must equal the original.
"""

import filecmp
import io
import os
import sys

import numpy as np
import torch

from rftest import (check, check_bytes, compare_state_dicts, drop_caches,
                    make_state_dict, read_file, say)

MNT, SHM = sys.argv[1], sys.argv[2]


def both(rel):
    a, b = os.path.join(MNT, rel), os.path.join(SHM, rel)
    for x in (a, b):
        os.makedirs(os.path.dirname(x), exist_ok=True)
    return a, b


def same_file(a, b):
    check(os.path.getsize(a) == os.path.getsize(b),
          "%s: size %d, tmpfs copy %d" % (a, os.path.getsize(a),
                                          os.path.getsize(b)))
    check_bytes(read_file(a), read_file(b), "%s vs the tmpfs copy" % a)


def save_rank(mnt, r):
    os.makedirs(os.path.join(mnt, "step_2"), exist_ok=True)
    torch.save(make_state_dict(seed=500 + r, n=40, big_mib=8),
               os.path.join(mnt, "step_2", "rank%d.pt" % r))


def main():
    torch.manual_seed(0)
    sd = make_state_dict(seed=20, n=100, big_mib=24)
    say("state dict: %d tensors, %.1f MiB" % (
        len(sd), sum(t.numel() * t.element_size() for t in sd.values()) / 2**20))

    # 1. torch.save by path (zip format), same name in both places.
    a, b = both("step_1/model.pt")
    torch.save(sd, a)
    torch.save(sd, b)
    same_file(a, b)
    drop_caches()
    got = torch.load(a, map_location="cpu")
    compare_state_dicts(got, sd, "torch.load(step_1/model.pt)")
    check(got["view.t"].data_ptr() != 0 and
          got["view.t"].storage().data_ptr() == got["view.base"].storage().data_ptr(),
          "shared storage not preserved")
    say("ok   torch.save/load by path, byte-identical to tmpfs")

    # 2. A full training-style checkpoint: model, optimizer, extras, saved
    #    through an open file object (buffered writes of odd sizes).
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(32, 256)).sum().backward()
        opt.step()
    ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(),
            "step": 300, "rng": torch.get_rng_state(), "note": "ünïcödé"}
    a, b = both("step_1/full.pt")
    for path in (a, b):
        with open(path, "wb") as fh:
            torch.save(ckpt, fh)
    same_file(a, b)
    drop_caches()
    with open(a, "rb") as fh:
        got = torch.load(fh, map_location="cpu")
    compare_state_dicts(got["model"], ckpt["model"], "full.pt model")
    check(got["step"] == 300 and got["note"] == ckpt["note"], "full.pt extras")
    check(torch.equal(got["rng"], ckpt["rng"]), "full.pt rng state")
    for k, v in ckpt["optimizer"]["state"].items():
        compare_state_dicts(got["optimizer"]["state"][k], v, "optim state %d" % k)
    m2 = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                             torch.nn.Linear(512, 10))
    m2.load_state_dict(got["model"])
    x = torch.randn(4, 256)
    check(torch.equal(m2(x), model(x)), "restored model computes differently")
    say("ok   model + optimizer checkpoint through a file object")

    # 3. Legacy (non-zip) serialization: many small writes.
    a, b = both("step_1/legacy.pt")
    small = {k: v for k, v in list(sd.items())[:40]}
    for path in (a, b):
        torch.save(small, path, _use_new_zipfile_serialization=False)
    same_file(a, b)
    compare_state_dicts(torch.load(a), small, "legacy format")
    say("ok   legacy torch serialization")

    # 4. Overwrite the same file with a different dict (O_TRUNC path).
    a, b = both("step_1/model.pt")
    sd2 = make_state_dict(seed=21, n=60, big_mib=8)
    torch.save(sd2, a)
    torch.save(sd2, b)
    same_file(a, b)
    drop_caches()
    compare_state_dicts(torch.load(a), sd2, "overwritten model.pt")
    say("ok   overwrite with a smaller checkpoint")

    # 5. torch.load from bytes read in one go and via an mmap'd buffer.
    import mmap
    with open(a, "rb") as fh, mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as m:
        got = torch.load(io.BytesIO(m[:]))
    compare_state_dicts(got, sd2, "torch.load from an mmap'd copy")
    say("ok   load via mmap")

    # 6. numpy: save/load, savez, savez_compressed, mmap_mode.
    rng = np.random.default_rng(5)
    arrays = {
        "f32": rng.standard_normal((512, 300), dtype=np.float32),
        "f64": rng.standard_normal(100_000),
        "i8": rng.integers(-128, 127, 3_000_001, dtype=np.int8),
        "u16": rng.integers(0, 65535, (7, 11, 13), dtype=np.uint16),
        "b": rng.integers(0, 2, 999).astype(bool),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "scalar": np.array(3.5),
    }
    for k, v in arrays.items():
        a, b = both("np/%s.npy" % k)
        np.save(a, v)
        np.save(b, v)
        same_file(a, b)
        got = np.load(a)
        check(got.dtype == v.dtype and got.shape == v.shape and
              np.array_equal(got, v), "np.load(%s)" % k)
        if v.size:
            got = np.load(a, mmap_mode="r")
            check(np.array_equal(got, v), "np.load(%s, mmap_mode='r')" % k)
            del got
    a, b = both("np/all.npz")
    np.savez(a, **arrays)
    np.savez(b, **arrays)     # zip timestamps differ: not compared
    with np.load(a) as z:
        for k, v in arrays.items():
            check(np.array_equal(z[k], v), "npz[%s]" % k)
    a, b = both("np/all_c.npz")
    np.savez_compressed(a, **arrays)
    np.savez_compressed(b, **arrays)
    with np.load(a) as z:
        for k, v in arrays.items():
            check(np.array_equal(z[k], v), "compressed npz[%s]" % k)
    say("ok   numpy save/load/savez/mmap")

    # 7. Four ranks saving at once (data-parallel checkpoint), then loading.
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=save_rank, args=(MNT, r)) for r in range(4)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(120)
        check(pr.exitcode == 0, "rank process exit code %s" % pr.exitcode)
    drop_caches()
    for r in range(4):
        compare_state_dicts(torch.load(os.path.join(MNT, "step_2",
                                                    "rank%d.pt" % r)),
                            make_state_dict(seed=500 + r, n=40, big_mib=8),
                            "rank%d.pt" % r)
    say("ok   four concurrent rank saves")

    # 8. Nothing unexpected in the directory listing.
    check(sorted(os.listdir(os.path.join(MNT, "step_1"))) ==
          ["full.pt", "legacy.pt", "model.pt"],
          "step_1 holds %s" % sorted(os.listdir(os.path.join(MNT, "step_1"))))
    cmp = filecmp.dircmp(os.path.join(MNT, "np"), os.path.join(SHM, "np"))
    check(not cmp.left_only and not cmp.right_only,
          "np/ listings differ: %s %s" % (cmp.left_only, cmp.right_only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
