"""Write a file until the filesystem says ENOSPC, then check what was kept.

usage: fill.py PATH MAX_BYTES SEED [--expect-ok] [--block BYTES]

Writes blocks of reproducible data.  Without --expect-ok the filesystem
must report ENOSPC (at write, fsync or close) before MAX_BYTES; with it,
all MAX_BYTES must be written.  Then the file is read back (after dropping
the page cache when root): every byte it holds must be the data written
there, never anything else.  Prints one JSON line with what happened.
"""

import errno
import json
import os
import sys
import time

from rftest import check, check_bytes, drop_caches, pattern


def main():
    path, max_bytes, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    expect_ok = "--expect-ok" in sys.argv
    block = 1 << 20
    if "--block" in sys.argv:
        block = int(sys.argv[sys.argv.index("--block") + 1])
    blk = pattern(block, seed)
    res = {"written": 0, "enospc_at": None, "max_write_s": 0.0}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t0 = time.monotonic()
    try:
        while res["written"] < max_bytes:
            t = time.monotonic()
            try:
                n = os.write(fd, blk)
            except OSError as e:
                check(e.errno == errno.ENOSPC, "write failed with %s, want "
                      "ENOSPC" % errno.errorcode.get(e.errno, e.errno))
                res["enospc_at"] = "write"
                break
            finally:
                res["max_write_s"] = max(res["max_write_s"],
                                         time.monotonic() - t)
            res["written"] += n
            if n < len(blk):            # short write: the next one fails
                blk = blk[n:] + blk[:n]
        if res["enospc_at"] is None:
            try:
                os.fsync(fd)
            except OSError as e:
                check(e.errno == errno.ENOSPC, "fsync: %s" % e)
                res["enospc_at"] = "fsync"
    finally:
        try:
            os.close(fd)
        except OSError as e:
            check(e.errno == errno.ENOSPC, "close: %s" % e)
            res["enospc_at"] = res["enospc_at"] or "close"
    res["seconds"] = round(time.monotonic() - t0, 3)
    res["size"] = os.stat(path).st_size
    if expect_ok:
        check(res["enospc_at"] is None, "ENOSPC at %s after %d bytes, want "
              "all %d written" % (res["enospc_at"], res["written"], max_bytes))
    else:
        check(res["enospc_at"] is not None, "wrote %d bytes without ENOSPC "
              "(limit %d)" % (res["written"], max_bytes))
    # Whatever the file holds must be what was written there.
    drop_caches()
    size = res["size"]
    full = pattern(block, seed) * (size // block + 1)
    with open(path, "rb") as f:
        off = 0
        while off < size:
            b = f.read(min(8 << 20, size - off))
            check(len(b) > 0, "short read at %d of %d" % (off, size))
            check_bytes(b, full[off:off + len(b)], "%s at %d" % (path, off))
            off += len(b)
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
