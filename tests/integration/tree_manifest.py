"""Print a manifest of a directory tree that two copies of it share: per
entry its type, mode, size, content hash, symlink target, device number,
and which entries are hard links of one another (as a group index, since
inode numbers differ between filesystems).  Used by 018-tree-copy.sh.
"""
import hashlib
import os
import stat
import sys


def manifest(root):
    groups = {}
    lines = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            kind = stat.S_IFMT(st.st_mode)
            extra = ""
            if stat.S_ISREG(kind):
                with open(path, "rb") as f:
                    extra = hashlib.sha256(f.read()).hexdigest()[:16]
                extra += " size=%d" % st.st_size
            elif stat.S_ISLNK(kind):
                extra = "-> " + os.readlink(path)
            elif stat.S_ISCHR(kind) or stat.S_ISBLK(kind):
                extra = "dev=%d,%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))
            if not stat.S_ISDIR(kind) and st.st_nlink > 1:
                key = (st.st_dev, st.st_ino)
                groups.setdefault(key, len(groups))
                extra += " link#%d nlink=%d" % (groups[key], st.st_nlink)
            lines.append("%s %o %s" % (rel, st.st_mode, extra))
    return lines


if __name__ == "__main__":
    print("\n".join(manifest(sys.argv[1])))
