"""Save or verify a deterministic torch checkpoint.

usage: ckpt_tool.py save PATH SEED [REF_PATH] [--mib N]
       ckpt_tool.py check PATH SEED [--mib N]

save writes make_state_dict(SEED) to PATH (and the same bytes to REF_PATH,
which must have the same file name, for byte comparison with cmp).
check torch.loads PATH and compares every tensor with make_state_dict(SEED).
"""

import os
import sys

import torch

from rftest import compare_state_dicts, drop_caches, make_state_dict


def main(argv):
    mib = 24
    if "--mib" in argv:
        i = argv.index("--mib")
        mib = int(argv[i + 1])
        del argv[i:i + 2]
    cmd, path, seed = argv[0], argv[1], int(argv[2])
    sd = make_state_dict(seed=seed, n=100, big_mib=mib)
    if cmd == "save":
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save(sd, path)
        if len(argv) > 3:
            ref = argv[3]
            assert os.path.basename(ref) == os.path.basename(path)
            os.makedirs(os.path.dirname(ref), exist_ok=True)
            torch.save(sd, ref)
        print("saved %s (%d bytes)" % (path, os.path.getsize(path)))
    elif cmd == "check":
        drop_caches()
        got = torch.load(path, map_location="cpu")
        compare_state_dicts(got, sd, path)
        print("ok   %s: %d tensors equal" % (path, len(sd)))
    else:
        sys.exit("unknown command " + cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
