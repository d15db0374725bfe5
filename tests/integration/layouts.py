"""Checkpoint directory layouts of Megatron-LM, DeepSpeed and HF Trainer,
written the way those frameworks write them, then read back and checked.

usage: layouts.py MOUNT
"""

import json
import mmap
import os
import shutil
import struct
import sys

import numpy as np
import torch

from rftest import (check, check_bytes, compare_state_dicts, drop_caches,
                    make_state_dict, read_file, say)

MNT = sys.argv[1]


def p(*parts):
    return os.path.join(MNT, *parts)


def write_text_atomic(path, text):
    """Megatron/DeepSpeed style tracker update: temp file, fsync, rename."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# --- Megatron-LM -----------------------------------------------------------

def megatron():
    tracker = p("latest_checkpointed_iteration.txt")
    saved = {}
    for it in (100, 200, 300):
        d = p("iter_%07d" % it)
        for rank in range(2):
            os.makedirs(os.path.join(d, "mp_rank_%02d" % rank))
            sd = {
                "args": {"tensor_model_parallel_size": 2, "iteration": it},
                "checkpoint_version": 3.0,
                "iteration": it,
                "model": {"language_model": make_state_dict(
                    seed=it * 10 + rank, n=30, big_mib=4)},
                "optimizer": {"step": it, "exp_avg": torch.randn(1000)},
                "rng_state": [{"random_rng_state": torch.get_rng_state(),
                               "np_rng_state": np.random.get_state()}],
            }
            torch.save(sd, os.path.join(d, "mp_rank_%02d" % rank,
                                        "model_optim_rng.pt"))
            saved[(it, rank)] = sd
        if it == 100:
            # Megatron (older versions) rewrite the tracker in place.
            with open(tracker, "w") as f:
                f.write(str(it))
        else:
            write_text_atomic(tracker, str(it))
    check(read_file(tracker) == b"300", "tracker says %r" % read_file(tracker))
    check(not os.path.exists(tracker + ".tmp"), "tracker temp file left")
    # Rewrite in place, shorter than before: no stale trailing bytes.
    with open(tracker, "w") as f:
        f.write("42")
    check(read_file(tracker) == b"42", "in-place rewrite: %r" % read_file(tracker))
    write_text_atomic(tracker, "300")
    drop_caches()
    it = int(open(tracker).read().strip())
    for rank in range(2):
        got = torch.load(p("iter_%07d" % it, "mp_rank_%02d" % rank,
                           "model_optim_rng.pt"), map_location="cpu")
        want = saved[(it, rank)]
        compare_state_dicts(got["model"]["language_model"],
                            want["model"]["language_model"], "megatron model")
        check(got["iteration"] == it and got["args"] == want["args"],
              "megatron metadata")
        check(torch.equal(got["optimizer"]["exp_avg"],
                          want["optimizer"]["exp_avg"]), "megatron optimizer")
        npst = got["rng_state"][0]["np_rng_state"]
        check(np.array_equal(npst[1], want["rng_state"][0]["np_rng_state"][1]),
              "numpy rng state")
    # Retention: drop the oldest iteration.
    shutil.rmtree(p("iter_0000100"))
    check(not os.path.exists(p("iter_0000100")), "rmtree iter_0000100")
    check(sorted(x for x in os.listdir(MNT) if x.startswith("iter_")) ==
          ["iter_0000200", "iter_0000300"], "iter dirs after rmtree")
    got = torch.load(p("iter_0000200", "mp_rank_01", "model_optim_rng.pt"))
    compare_state_dicts(got["model"]["language_model"],
                        saved[(200, 1)]["model"]["language_model"],
                        "megatron iter 200 after rmtree of 100")
    say("ok   Megatron-LM layout")


# --- DeepSpeed ---------------------------------------------------------------

def deepspeed():
    saved = {}
    for step in (100, 200):
        tag = "global_step%d" % step
        d = p("ds", tag)
        os.makedirs(d)
        model = {"module": make_state_dict(seed=step, n=20, big_mib=4),
                 "global_steps": step, "ds_version": "0.9.0"}
        torch.save(model, os.path.join(d, "mp_rank_00_model_states.pt"))
        optim = []
        for dp in range(2):
            o = {"optimizer_state_dict": {
                "fp32_flat_groups": [torch.randn(50_000 + dp)],
                "loss_scaler": 65536.0},
                "ds_config": {"zero_optimization": {"stage": 2}}}
            torch.save(o, os.path.join(
                d, "zero_pp_rank_%d_mp_rank_00_optim_states.pt" % dp))
            optim.append(o)
        saved[step] = (model, optim)
        with open(p("ds", "latest"), "w") as f:   # DeepSpeed writes in place
            f.write(tag)
    tag = read_file(p("ds", "latest")).decode()
    check(tag == "global_step200", "latest says %r" % tag)
    drop_caches()
    model, optim = saved[200]
    got = torch.load(p("ds", tag, "mp_rank_00_model_states.pt"))
    compare_state_dicts(got["module"], model["module"], "deepspeed module")
    check(got["global_steps"] == 200, "global_steps")
    for dp in range(2):
        got = torch.load(p("ds", tag,
                           "zero_pp_rank_%d_mp_rank_00_optim_states.pt" % dp))
        check(torch.equal(got["optimizer_state_dict"]["fp32_flat_groups"][0],
                          optim[dp]["optimizer_state_dict"]["fp32_flat_groups"][0]),
              "zero optimizer shard %d" % dp)
    shutil.rmtree(p("ds", "global_step100"))
    check(sorted(os.listdir(p("ds"))) == ["global_step200", "latest"],
          "ds/ after rmtree: %s" % sorted(os.listdir(p("ds"))))
    say("ok   DeepSpeed layout")


# --- HF Trainer --------------------------------------------------------------

def save_safetensors(path, tensors):
    """Minimal safetensors writer (the format, without the package):
    8-byte little-endian header length, JSON header, raw data."""
    dt = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
          torch.int64: "I64", torch.uint8: "U8", torch.int8: "I8",
          torch.bool: "BOOL", torch.int32: "I32", torch.float64: "F64",
          torch.int16: "I16"}
    header, blobs, off = {}, [], 0
    for k, t in tensors.items():
        b = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() \
            if t.numel() else b""
        header[k] = {"dtype": dt[t.dtype], "shape": list(t.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_safetensors_mmap(path):
    """Read tensors straight out of a read-only shared mapping, as
    safetensors' safe_open does."""
    dt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "U8": torch.uint8, "I8": torch.int8,
          "BOOL": torch.bool, "I32": torch.int32, "F64": torch.float64,
          "I16": torch.int16}
    out = {}
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        try:
            (n,) = struct.unpack("<Q", m[:8])
            header = json.loads(m[8:8 + n])
            base = 8 + n
            for k, v in header.items():
                a, b = v["data_offsets"]
                raw = bytearray(m[base + a:base + b])
                t = torch.frombuffer(raw, dtype=torch.uint8) if raw else \
                    torch.empty(0, dtype=torch.uint8)
                out[k] = t.view(dt[v["dtype"]]).reshape(v["shape"]).clone()
        finally:
            m.close()
    return out


def hf_trainer():
    saved = {}
    for step in (500, 1000, 1500):
        tmp = p("hf", "tmp-checkpoint-%d" % step)
        final = p("hf", "checkpoint-%d" % step)
        os.makedirs(tmp)
        model = make_state_dict(seed=step, n=25, big_mib=4)
        model = {k: v.contiguous() for k, v in model.items()
                 if not k.startswith("view.")}
        save_safetensors(os.path.join(tmp, "model.safetensors"), model)
        torch.save({"state": {0: {"exp_avg": torch.randn(4096)}}},
                   os.path.join(tmp, "optimizer.pt"))
        torch.save({"last_epoch": step}, os.path.join(tmp, "scheduler.pt"))
        torch.save({"python": 1, "cpu": torch.get_rng_state()},
                   os.path.join(tmp, "rng_state.pth"))
        with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
            json.dump({"global_step": step, "log_history": []}, f)
        os.rename(tmp, final)       # transformers >= 4.39 does this
        saved[step] = model
        # save_total_limit=2: delete the oldest.
        cps = sorted((d for d in os.listdir(p("hf"))
                      if d.startswith("checkpoint-")),
                     key=lambda d: int(d.split("-")[1]))
        for old in cps[:-2]:
            shutil.rmtree(p("hf", old))
    check(sorted(os.listdir(p("hf"))) == ["checkpoint-1000", "checkpoint-1500"],
          "hf/ holds %s" % sorted(os.listdir(p("hf"))))
    drop_caches()
    for step in (1000, 1500):
        d = p("hf", "checkpoint-%d" % step)
        got = load_safetensors_mmap(os.path.join(d, "model.safetensors"))
        compare_state_dicts(got, saved[step], "safetensors (mmap) step %d" % step)
        st = json.load(open(os.path.join(d, "trainer_state.json")))
        check(st["global_step"] == step, "trainer_state.json")
        check(torch.load(os.path.join(d, "scheduler.pt"))["last_epoch"] == step,
              "scheduler.pt")
    say("ok   HF Trainer layout (tmp-checkpoint rename, safetensors mmap)")


def top_level_rename_and_replace():
    # Checkpoints are top-level directories: renaming one, and replacing a
    # file inside one with another, must keep contents.
    os.makedirs(p("step_tmp"))
    data = os.urandom(3 * (1 << 20) + 5)
    with open(p("step_tmp", "blob"), "wb") as f:
        f.write(data)
    os.rename(p("step_tmp"), p("step_final"))
    drop_caches()
    check_bytes(read_file(p("step_final", "blob")), data, "renamed checkpoint")
    say("ok   top-level checkpoint rename")


if __name__ == "__main__":
    megatron()
    deepspeed()
    hf_trainer()
    top_level_rename_and_replace()
    sys.exit(0)
