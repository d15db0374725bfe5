"""The pieces of the group benchmark (tests/bench/run_group_bench.sh) that
need Python: a plain TCP stream between two processes on loopback, a big
file written from one pattern, a timed read, and torch.save of a given
size.

usage: group_bench.py stream SIZE
       group_bench.py write PATH SIZE        (prints seconds to close)
       group_bench.py read PATH [PATH...]    (prints seconds and GB/s each)
       group_bench.py save PATH SIZE         (prints seconds for torch.save)
"""

import os
import socket
import sys
import time

BLOCK = 64 << 20


def pattern():
    # One random block, repeated: cheap to make, not compressible or zero.
    return os.urandom(BLOCK)


def stream(size):
    """Bytes/s of SIZE bytes sent over loopback TCP to another process."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        srv.close()
        os.close(rd)
        buf = pattern()
        s = socket.create_connection(("127.0.0.1", port))
        left = size
        while left:
            n = min(left, len(buf))
            s.sendall(memoryview(buf)[:n])
            left -= n
        s.shutdown(socket.SHUT_WR)
        s.recv(1)
        s.close()
        os._exit(0)
    os.close(wr)
    c, _ = srv.accept()
    buf = bytearray(4 << 20)
    got = 0
    t = time.perf_counter()
    while got < size:
        n = c.recv_into(buf)
        if not n:
            break
        got += n
    dt = time.perf_counter() - t
    c.sendall(b"x")
    c.close()
    os.waitpid(pid, 0)
    if got != size:
        sys.exit("stream: got %d of %d bytes" % (got, size))
    print("%.3f %.3f" % (dt, size / dt / 1e9))


def write(path, size):
    buf = pattern()
    t = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    left = size
    while left:
        n = os.write(fd, memoryview(buf)[:min(left, len(buf))])
        left -= n
    os.close(fd)
    print("%.3f" % (time.perf_counter() - t))


def read(paths):
    buf = bytearray(16 << 20)
    for p in paths:
        t = time.perf_counter()
        got = 0
        with open(p, "rb", buffering=0) as f:
            while True:
                n = f.readinto(buf)
                if not n:
                    break
                got += n
        dt = time.perf_counter() - t
        print("%.3f %.3f" % (dt, got / dt / 1e9))


def save(path, size):
    import torch
    n = size // 4 // 16
    torch.manual_seed(0)
    sd = {"w%d" % i: torch.randn(n) for i in range(16)}
    t = time.perf_counter()
    torch.save(sd, path)
    print("%.3f" % (time.perf_counter() - t))


def main():
    cmd = sys.argv[1]
    if cmd == "stream":
        stream(int(sys.argv[2]))
    elif cmd == "write":
        write(sys.argv[2], int(sys.argv[3]))
    elif cmd == "read":
        read(sys.argv[2:])
    elif cmd == "save":
        save(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
