"""The service manager's end of sd_notify(3), for 096-service.

    notify_listen.py SOCKET LOG [MOUNTPOINT]

Binds a datagram socket at SOCKET, as systemd does for a Type=notify
service, and appends each message to LOG as one line: the message with its
newlines as " | ", then, when MOUNTPOINT is given, " [mounted]" or
" [not mounted]" as /proc/self/mountinfo says at its arrival.  Runs until
killed.
"""
import os
import socket
import sys


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def main():
    path, log = sys.argv[1], sys.argv[2]
    mnt = sys.argv[3] if len(sys.argv) > 3 else None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    with open(log, "a") as out:
        print("LISTENING", file=out, flush=True)
        while True:
            msg = s.recv(4096).decode(errors="replace")
            line = msg.replace("\n", " | ")
            if mnt:
                line += " [mounted]" if mounted(mnt) else " [not mounted]"
            print(line, file=out, flush=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        os._exit(0)
