#!/usr/bin/env bash
# Fetch Debian's own fuse3 source package (3.18 or later, from unstable)
# into subprojects/fuse3, where meson builds it as a static library into
# the build tree when the system's libfuse is older than 3.16
# (-Dlibfuse=auto, the default, or -Dlibfuse=bundled).
#
# Why: Debian 12's libfuse 3.14 cannot ask the kernel for
# FUSE_DIRECT_IO_ALLOW_MMAP, so a file opened for direct I/O cannot be
# mapped shared.  3.16+ can; with it reftfs opens every file direct
# (docs/design.md, "Caching and mmap").  3.18+ can also take requests
# over io_uring (reftfsd --io-uring), built in when liburing and libnuma
# are installed (tools/setup.sh installs them).
#
# apt-get fetches it from the Debian archive with a private list of
# sources in subprojects/.apt: the machine's apt configuration is not
# touched.  apt checks the files against the archive's signed index;
# dpkg-source unpacks them and applies Debian's patches.  Idempotent: does
# nothing once subprojects/fuse3 holds a 3.18+ tree.  An older 3.16+ tree
# is replaced only when the fetch succeeds.
#
# usage: bash tools/fetch-libfuse.sh
#   RFT_FUSE_SUITE   the Debian suite to take it from (default: sid, whose
#                    3.18.3 is what reftfs was tested with; trixie has
#                    3.17.2, without io_uring)
#   RFT_FUSE_MIRROR  the archive (default: http://deb.debian.org/debian)
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=${RFT_FUSE_SUITE:-sid}
MIRROR=${RFT_FUSE_MIRROR:-http://deb.debian.org/debian}
DEST=subprojects/fuse3
APT=subprojects/.apt

# The version a tree declares in its meson.build's project().
tree_version() {
	sed -n "s/^ *version *: *'\([0-9.]*\)'.*/\1/p" "$1/meson.build" | head -n1
}

# version_ge A B: A >= B for dotted versions.
version_ge() {
	[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

if [ -f "$DEST/meson.build" ]; then
	v=$(tree_version "$DEST")
	if [ -n "$v" ] && version_ge "$v" 3.18; then
		exit 0
	fi
	echo "fetch-libfuse: $DEST holds libfuse '$v', older than 3.18: fetching again" >&2
fi

for tool in apt-get dpkg-source; do
	command -v "$tool" >/dev/null || {
		echo "fetch-libfuse: $tool not found (Debian/Ubuntu: apt-get install dpkg-dev)" >&2
		exit 1
	}
done

rm -rf "$APT"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/src"
echo "deb-src $MIRROR $SUITE main" >"$APT/sources.list"
apt_opts=(
	-o "Dir::Etc::SourceList=$PWD/$APT/sources.list"
	-o "Dir::Etc::SourceParts=$PWD/$APT/none"
	-o "Dir::State::Lists=$PWD/$APT/lists"
	-o "Dir::Cache=$PWD/$APT/cache"
	-o "APT::Sandbox::User=$(id -un)"
	-q
)

echo "fetch-libfuse: fuse3 source from $MIRROR $SUITE" >&2
apt-get "${apt_opts[@]}" update >&2
(cd "$APT/src" && apt-get "${apt_opts[@]}" source --download-only fuse3 >&2)

dsc=$(ls "$APT"/src/fuse3_*.dsc 2>/dev/null | head -n1)
[ -n "$dsc" ] || {
	echo "fetch-libfuse: apt-get source gave no fuse3 .dsc" >&2
	exit 1
}
# The .dsc's hashes were checked by apt against the signed Sources index;
# its own signature needs the Debian developers' keyring, not installed.
rm -rf "$DEST.new"
dpkg-source --no-check -x "$dsc" "$DEST.new" >&2
# dpkg-source leaves the upstream tarball beside the tree.
rm -rf "$APT" subprojects/fuse3_*.orig.tar.*

v=$(tree_version "$DEST.new")
if [ -z "$v" ] || ! version_ge "$v" 3.16; then
	echo "fetch-libfuse: $SUITE has libfuse '$v', older than 3.16" >&2
	rm -rf "$DEST.new"
	exit 1
fi
rm -rf "$DEST"
mv "$DEST.new" "$DEST"
# The tarball's dates are older than a build tree configured against the
# tree replaced: a newer meson.build makes ninja configure again.
touch "$DEST/meson.build"
echo "fetch-libfuse: libfuse $v in $DEST" >&2
