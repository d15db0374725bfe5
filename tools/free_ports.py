#!/usr/bin/env python3
"""usage: free_ports.py N

Print N TCP ports on 127.0.0.1 that were free a moment ago (each bound and
released; a daemon then binds it for good), each with the port above it
free too: a group's namespace log listens on PORT + 1.  For the tests,
the benchmarks and the demo, which start groups on loopback.
"""
import random
import socket
import sys

# Below the kernel's ephemeral range: a daemon restarted later on its port
# must not find it taken by some connection's local end meanwhile.
lo, hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
pool = range(10000, lo - 1) if lo > 11000 else range(hi + 1, 65000)
socks, ports = [], []
while len(ports) < int(sys.argv[1]):
    s = socket.socket()
    p = random.choice(pool)
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        s.close()
        continue
    socks.append(s)
    if p + 1 in ports or p - 1 in ports:
        continue
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", p + 1))
    except OSError:
        t.close()
        continue
    socks.append(t)
    ports.append(p)
print(" ".join(str(p) for p in ports))
for s in socks:
    s.close()
