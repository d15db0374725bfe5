#!/usr/bin/env python3
"""A DDP training loop that checkpoints, one rank of it (CPU, gloo).

Started as torchrun starts a rank (Debian 12's torchrun fails on Python
3.11 in its own argument handling): RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT in the environment.  Each rank trains a replica of an MLP of
LAYERS layers of HIDDEN x HIDDEN on data that is a function of the step
and the rank alone, so a run that stops and resumes from a checkpoint ends
with the same model as any other that does the same.

Every EVERY steps each rank saves its model and Adam state as
DIR/step_S/rankR.pt and fsyncs it (under reftfs --sync protect the fsync
returns once the file is protected); after a barrier each rank writes its
tracker DIR/latest.rankR (written to a temporary name, fsynced, renamed),
so a tracker never names a step some rank has not saved.  With --resume
the ranks agree on the newest step every tracker names and load it.

--throttle MBPS paces every save and load to that rate (the stand-in for a
node's share of shared storage in run_training_bench.sh); --step-sleep
makes each step that much longer (a test's time to act mid-run).

Writes, per rank: --out FILE, the SHA-256 of the final parameters; --log
FILE, one JSON line per event with wall-clock times: start, load (its
seconds and step), step (its seconds), save (its blocking seconds), end.
"""
import argparse
import hashlib
import io
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

BATCH = 32
PIECE = 4 << 20


class Paced(io.RawIOBase):
    """A file read or written at no more than @rate bytes per second."""

    def __init__(self, f, rate):
        self.f, self.rate, self.t0, self.n = f, rate, time.monotonic(), 0

    def _pace(self, n):
        self.n += n
        if self.rate:
            ahead = self.n / self.rate - (time.monotonic() - self.t0)
            if ahead > 0:
                time.sleep(ahead)

    def readable(self):
        return True

    def writable(self):
        return True

    def seekable(self):
        return True

    def seek(self, off, whence=0):
        return self.f.seek(off, whence)

    def tell(self):
        return self.f.tell()

    def readinto(self, b):
        # Whole (torch's reader takes a short read for a failure).
        b = memoryview(b)
        done = 0
        while done < len(b):
            n = self.f.readinto(b[done:done + PIECE])
            if not n:
                break
            done += n
            self._pace(n)
        return done

    def write(self, b):
        b = memoryview(b)
        done = 0
        while done < len(b):
            n = self.f.write(b[done:done + PIECE])
            done += n
            self._pace(n)
        return done


def fsync_write(path, write, rate):
    """Write @path by a temporary name, fsync, rename: the seconds the
    rename took."""
    tmp = path + ".tmp"
    with open(tmp, "wb", buffering=0) as f:
        write(Paced(f, rate) if rate else f)
        os.fsync(f.fileno())
    t = time.time()
    os.rename(tmp, path)
    return time.time() - t


def digest(model):
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--every", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--throttle", type=float, default=0.0)
    ap.add_argument("--step-sleep", type=float, default=0.0)
    ap.add_argument("--out")
    ap.add_argument("--log")
    a = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    logf = open(a.log, "a") if a.log else None

    def say(**ev):
        if logf:
            ev.update(rank=rank, t=time.time())
            logf.write(json.dumps(ev) + "\n")
            logf.flush()

    say(event="start")
    torch.manual_seed(0)
    layers = []
    for _ in range(a.layers):
        layers += [torch.nn.Linear(a.hidden, a.hidden), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers)
    model = DDP(net)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    rate = a.throttle * 1e6
    first = 1

    if a.resume:
        mine = os.path.join(a.dir, "latest.rank%d" % rank)
        step = int(open(mine).read()) if os.path.exists(mine) else 0
        s = torch.tensor([step])
        dist.all_reduce(s, op=dist.ReduceOp.MIN)
        step = int(s)
        if step:
            t0 = time.time()
            path = os.path.join(a.dir, "step_%d" % step, "rank%d.pt" % rank)
            with open(path, "rb", buffering=0) as f:
                ck = torch.load(Paced(f, rate) if rate else f)
            net.load_state_dict(ck["model"])
            opt.load_state_dict(ck["optim"])
            assert ck["step"] == step
            say(event="load", step=step, secs=time.time() - t0)
        first = step + 1

    for step in range(first, a.steps + 1):
        t0 = time.time()
        g = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(BATCH, a.hidden, generator=g)
        y = torch.randn(BATCH, a.hidden, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        time.sleep(a.step_sleep)  # a longer step, for a test's timing
        say(event="step", step=step, secs=time.time() - t0)
        if a.every and step % a.every == 0:
            t0 = time.time()
            d = os.path.join(a.dir, "step_%d" % step)
            os.makedirs(d, exist_ok=True)
            state = {"model": net.state_dict(), "optim": opt.state_dict(),
                     "step": step}
            rename = fsync_write(os.path.join(d, "rank%d.pt" % rank),
                                 lambda f: torch.save(state, f), rate)
            secs = time.time() - t0
            dist.barrier()
            t1 = time.time()
            rename += fsync_write(os.path.join(a.dir, "latest.rank%d" % rank),
                                  lambda f: f.write(b"%d" % step), 0)
            # barrier: the wait for the others and the tracker; tracker:
            # the tracker alone; rename: both renames.
            say(event="save", step=step, secs=secs,
                barrier=time.time() - t0 - secs, tracker=time.time() - t1,
                rename=rename)
    if a.out:
        with open(a.out, "w") as f:
            f.write(digest(net) + "\n")
    say(event="end")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
