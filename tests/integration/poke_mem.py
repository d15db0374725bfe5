#!/usr/bin/env python3
"""Corrupt one byte of a piece in a running reftfsd's arena (root only).

usage: poke_mem.py PID ARENA_BYTES CHUNK_BYTES MARKER_FILE MARKER_OFFSET

The arena is the daemon's one anonymous mapping of ARENA_BYTES (--mem).
The piece is found by its first 64 bytes (MARKER_FILE's bytes at
MARKER_OFFSET, a chunk boundary of the file), which sit at the start of an
arena chunk; byte 100 of that chunk is inverted through /proc/PID/mem, as
a memory fault would.  Prints the chunk's address; exits 1 unless exactly
one chunk matched.
"""
import sys


def main():
    pid, arena, chunk = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    with open(sys.argv[4], "rb") as f:
        f.seek(int(sys.argv[5]))
        marker = f.read(64)
    if len(marker) != 64:
        sys.exit("poke_mem: marker file too short")
    spans = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if hi - lo == arena and parts[1].startswith("rw") and len(parts) == 5:
                spans.append(lo)
    found = []
    with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
        for lo in spans:
            for off in range(0, arena, chunk):
                mem.seek(lo + off)
                if mem.read(64) == marker:
                    found.append(lo + off)
        if len(found) != 1:
            sys.exit(f"poke_mem: {len(found)} chunks of pid {pid} match "
                     f"(arena candidates: {len(spans)})")
        mem.seek(found[0] + 100)
        b = mem.read(1)
        mem.seek(found[0] + 100)
        mem.write(bytes([b[0] ^ 0xFF]))
    print(hex(found[0]))


if __name__ == "__main__":
    main()
