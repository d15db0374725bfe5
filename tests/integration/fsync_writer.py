#!/usr/bin/env python3
"""Writers as checkpoint code writes, each file fsynced (issue 28).

usage: fsync_writer.py DIR REF [PERSIST]

Into DIR (a checkpoint directory in a mount), with a copy of every file in
REF:
  - torch.distributed.checkpoint's FileSystemWriter: three data files, each
    written and fsynced, then .metadata written and fsynced;
  - an atomic-rename writer: model.pt.tmp written, fsynced, closed, renamed
    to model.pt.
With PERSIST (the same directory in the persist dir, --sync persist), each
file must be there, whole, the moment its fsync returned, before it is
closed.  Prints "synced: fsync took ... ms" and keeps .metadata open until
killed, so that the daemon can die with it open.
"""
import os
import sys
import time

d, ref = sys.argv[1], sys.argv[2]
pdir = sys.argv[3] if len(sys.argv) > 3 else None
times = []


def put(name, data, keep=False):
    with open(os.path.join(ref, name), "wb") as f:
        f.write(data)
    fd = os.open(os.path.join(d, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                 0o644)
    os.write(fd, data)
    t = time.monotonic()
    os.fsync(fd)
    times.append(time.monotonic() - t)
    if pdir:
        with open(os.path.join(pdir, name), "rb") as f:
            got = f.read()
        assert got == data, ("%s: %d bytes in the persist dir after fsync, "
                             "want those %d" % (name, len(got), len(data)))
    if keep:
        return fd
    os.close(fd)
    return None


for r in range(3):
    put("__%d_0.distcp" % r, os.urandom(3 * 1048576 + 4321 * r))
put("model.pt.tmp", os.urandom(2 * 1048576 + 7))
os.rename(os.path.join(d, "model.pt.tmp"), os.path.join(d, "model.pt"))
os.rename(os.path.join(ref, "model.pt.tmp"), os.path.join(ref, "model.pt"))
fd = put(".metadata", os.urandom(20000), keep=True)
print("synced: fsync took %s ms" %
      " ".join("%.1f" % (t * 1000) for t in times), flush=True)
time.sleep(600)
