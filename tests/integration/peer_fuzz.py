#!/usr/bin/env python3
"""Fuzz a running reftfsd's peer port (docs/protocol.md, "Peer protocol").

usage: peer_fuzz.py --port P --secret FILE --group NAME --nodes N --as ID
                    [--to NODE] [--seed S] [--rounds R]

Each round opens a connection to 127.0.0.1:P and does one of:
  - random bytes;
  - a valid-looking header, then one field of it mutated (CRC fixed up or
    not), or lengths over the limits, or a truncated frame;
  - a handshake with the wrong secret, or the wrong group;
  - a correct handshake as node ID to node NODE (the one listening on P,
    0 unless given; the secret is known), then frames with
    mutated headers, unknown types, garbage membership frames, frames
    before their seq, or a frame cut off in the middle.
The daemon must close every such connection (or ignore what it may) and
stay up; the shell test around this then checks that the group still
works and that the drops were counted.  Prints the seed first; the same
seed replays the same rounds.
"""
import argparse
import hashlib
import hmac
import os
import random
import socket
import struct
import sys
import time

MAGIC = 0x50544652
HDR = 48

_T = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _T.append(_c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _T[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def frame(ftype, meta=b"", **kw):
    """A whole frame without bulk: header, then meta."""
    return header(ftype, meta, **kw) + meta


def header(ftype, meta=b"", bulk_len=0, bulk_crc=0, seq=1, rid=0, flags=0,
           version=1, magic=MAGIC, reserved=0, fix_crc=True):
    h = struct.pack("<IHHHHIIIQQI", magic, version, ftype, flags, reserved,
                    len(meta), bulk_len, bulk_crc, rid, seq,
                    crc32c(meta) if meta else 0)
    return h + struct.pack("<I", crc32c(h) if fix_crc else 0)


# The link handshake (docs/protocol.md, "Handshake"), written from the
# document: a peer link is link kind 1, its ids are incarnations.
HS_MAGIC = b"RFTH"
HS_VERSION = 2
LINK_PEER = 1


def mac(key, label, group, id_c, id_s, inc_c, inc_s, n_c, n_s):
    parts = [label, bytes([LINK_PEER]), group,
             struct.pack("<IIQQ", id_c, id_s, inc_c, inc_s), n_c, n_s]
    m = hmac.new(key, digestmod=hashlib.sha256)
    for p in parts:
        m.update(struct.pack("<Q", len(p)))
        m.update(p)
    return m.digest()


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=3)
        self.seq = 1

    def send(self, data):
        try:
            self.s.sendall(data)
            return True
        except OSError:
            return False

    def recv_frame(self):
        try:
            h = b""
            while len(h) < HDR:
                c = self.s.recv(HDR - len(h))
                if not c:
                    return None
                h += c
            meta_len = struct.unpack_from("<I", h, 12)[0]
            meta = b""
            while len(meta) < meta_len:
                c = self.s.recv(meta_len - len(meta))
                if not c:
                    return None
                meta += c
            return struct.unpack_from("<H", h, 6)[0], meta
        except OSError:
            return None

    def closed_by_peer(self, wait=3.0):
        """True once the daemon has closed the connection."""
        self.s.settimeout(wait)
        try:
            while True:
                if not self.s.recv(4096):
                    return True
        except socket.timeout:
            return False
        except OSError:
            return True

    def close(self):
        self.s.close()


def handshake(c, key, group, me, to, rnd, wrong_group=False):
    """Run the client side towards node @to; True if WELCOME came."""
    nonce = bytes(rnd.getrandbits(8) for _ in range(32))
    g = group + (b"x" if wrong_group else b"")
    meta = HS_MAGIC + struct.pack("<HBBIIQQ", HS_VERSION, LINK_PEER, len(g),
                                  me, to, 1000 + me, 0) + nonce + g
    if not c.send(frame(1, meta, seq=1)):
        return False
    f = c.recv_frame()
    if not f or f[0] != 2 or len(f[1]) != 80:
        return False
    inc_s, = struct.unpack_from("<Q", f[1], 8)
    n_s = f[1][16:48]
    m = mac(key, b"reftfs link client v2", group, me, to, 1000 + me, inc_s,
            nonce, n_s)
    if not c.send(frame(3, m, seq=2)):
        return False
    f = c.recv_frame()
    c.seq = 3
    return bool(f and f[0] == 4)


def mutate_header(rnd, ftype, meta, seq):
    kind = rnd.randrange(9)
    if kind == 0:
        return header(ftype, meta, seq=seq, magic=rnd.getrandbits(32)), kind
    if kind == 1:
        return header(ftype, meta, seq=seq, version=rnd.randrange(2, 9)), kind
    if kind == 2:
        return header(ftype, meta, seq=seq, fix_crc=False), kind
    if kind == 3:
        return header(ftype, meta, seq=seq, reserved=1), kind
    if kind == 4:
        return header(ftype, meta, seq=seq, flags=rnd.choice([4, 2, 0x80])), kind
    if kind == 5:
        return header(ftype, meta, seq=seq + rnd.randrange(1, 5)), kind
    if kind == 6:
        # Oversized lengths, CRC fixed up: the limits must refuse them.
        h = bytearray(header(ftype, meta, seq=seq))
        struct.pack_into("<I", h, 16, (64 << 20) + 1 + rnd.randrange(1 << 20))
        struct.pack_into("<I", h, 44, crc32c(bytes(h[:44])))
        return bytes(h), kind
    if kind == 7:
        h = bytearray(header(ftype, meta, seq=seq))
        struct.pack_into("<I", h, 12, (64 << 10) + 1 + rnd.randrange(1000))
        struct.pack_into("<I", h, 44, crc32c(bytes(h[:44])))
        return bytes(h), kind
    # a type nobody registered, or a handshake type after the handshake
    return header(rnd.choice([1, 2, 3, 4, 5, 200, 255]), meta, seq=seq), kind


def round_(rnd, args, key):
    c = Conn(args.port)
    try:
        what = rnd.randrange(6)
        if what == 0:
            c.send(bytes(rnd.getrandbits(8)
                         for _ in range(rnd.randrange(1, 400))))
            return "random", c.closed_by_peer()
        if what == 1:
            meta = b"x" * rnd.randrange(0, 60)
            h, k = mutate_header(rnd, 1, meta, 1)
            c.send(h + meta)
            return "bad-header-%d" % k, c.closed_by_peer()
        if what == 2:
            wrong = bytes(rnd.getrandbits(8) for _ in range(32))
            ok = handshake(c, wrong, args.group.encode(), args.me,
                           args.to, rnd)
            return "wrong-secret", (not ok) and c.closed_by_peer()
        if what == 3:
            ok = handshake(c, key, args.group.encode(), args.me, args.to,
                           rnd, wrong_group=True)
            return "wrong-group", (not ok) and c.closed_by_peer()
        if what == 4:
            # A header, then a truncated meta: the daemon waits idle_ms
            # at most; we close first, which must also be handled.
            c.send(frame(1, b"y" * 100)[:HDR + rnd.randrange(0, 99)])
            return "truncated", True
        # Authenticated, then nonsense.
        if not handshake(c, key, args.group.encode(), args.me, args.to,
                         rnd):
            return "handshake", False
        sub = rnd.randrange(3)
        if sub == 0:
            meta = b"z" * rnd.randrange(0, 80)
            h, k = mutate_header(rnd, 16, meta, c.seq)
            c.send(h + meta)
            return "auth-bad-header-%d" % k, c.closed_by_peer()
        if sub == 1:
            # A membership frame with garbage inside: memb refuses it.
            meta = bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(1, 300)))
            c.send(frame(16, meta, seq=c.seq))
            return "auth-garbage-memb", c.closed_by_peer()
        # A frame cut off in the middle of its meta, then silence.
        c.send(frame(16, b"w" * 200, seq=c.seq)[:HDR + 50])
        return "auth-cut", True
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--secret", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--as", dest="me", type=int, required=True)
    ap.add_argument("--to", type=int, default=0)
    ap.add_argument("--seed", type=int,
                    default=int(os.environ.get("PEER_FUZZ_SEED", "0")) or
                    random.randrange(1 << 31))
    ap.add_argument("--rounds", type=int, default=1000)
    args = ap.parse_args()
    print("peer_fuzz: port %d, seed=%d, rounds=%d" % (
        args.port, args.seed, args.rounds),
          flush=True)
    with open(args.secret, "rb") as f:
        key = f.read()
    if key.endswith(b"\n"):
        key = key[:-1]
    rnd = random.Random(args.seed)
    kinds = {}
    bad = []
    t0 = time.time()
    for i in range(args.rounds):
        kind, ok = round_(rnd, args, key)
        kinds[kind] = kinds.get(kind, 0) + 1
        if not ok:
            bad.append((i, kind))
    print("peer_fuzz: %d rounds in %.1f s: %s" % (
        args.rounds, time.time() - t0,
        ", ".join("%s %d" % kv for kv in sorted(kinds.items()))))
    if bad:
        print("peer_fuzz: %d rounds not refused as they should be, first: %s"
              % (len(bad), bad[:10]))
        print("peer_fuzz: replay with --seed %d" % args.seed)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
