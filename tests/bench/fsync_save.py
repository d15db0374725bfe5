#!/usr/bin/env python3
"""One checkpoint save as torch.distributed.checkpoint's FileSystemWriter
makes it: FILES data files of SIZE bytes, each written in 64 MiB writes and
fsynced before it is closed, then a 20 KB .metadata written and fsynced.

usage: fsync_save.py DIR SIZE FILES
Prints the save's seconds, and the slowest file's fsync in ms.
"""
import os
import sys
import time

d, size, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
buf = bytes(range(256)) * (64 << 12)  # 64 MiB
os.makedirs(d, exist_ok=True)
slowest = 0.0
t0 = time.monotonic()
for i in range(files):
    fd = os.open(os.path.join(d, "__%d_0.distcp" % i),
                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    left = size
    while left:
        left -= os.write(fd, buf[:min(left, len(buf))])
    t = time.monotonic()
    os.fsync(fd)
    slowest = max(slowest, time.monotonic() - t)
    os.close(fd)
fd = os.open(os.path.join(d, ".metadata"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
             0o644)
os.write(fd, b"m" * 20000)
os.fsync(fd)
os.close(fd)
print("%.3f %.1f" % (time.monotonic() - t0, slowest * 1000))
