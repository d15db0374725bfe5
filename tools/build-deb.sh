#!/usr/bin/env bash
# Build the Debian package from this tree (debian/): reftfs_VERSION_ARCH.deb
# in OUT.  The tree is copied (tracked and new files, and the libfuse
# source in subprojects/, fetched first if missing: tools/fetch-libfuse.sh),
# so that the build's files stay out of it.  Needs the Build-Depends of
# debian/control (tools/setup.sh installs them, and debhelper).
#
# usage: bash tools/build-deb.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# = 1 ] || { echo "usage: $0 OUT" >&2; exit 2; }
mkdir -p "$1"
OUT=$(cd "$1" && pwd)

[ -f subprojects/fuse3/meson.build ] || bash tools/fetch-libfuse.sh
WORK=$(mktemp -d "${TMPDIR:-/tmp}/reftfs-deb.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/reftfs"
{ git ls-files -co --exclude-standard -z; find subprojects/fuse3 -print0; } |
	tar -c --null --no-recursion --ignore-failed-read -T - 2>/dev/null |
	tar -x -C "$WORK/reftfs"
(cd "$WORK/reftfs" &&
	DEB_BUILD_OPTIONS="parallel=$(nproc) ${DEB_BUILD_OPTIONS:-}" \
		dpkg-buildpackage -b -us -uc >"$WORK/build.log" 2>&1) || {
	tail -n 40 "$WORK/build.log" >&2
	echo "build-deb: dpkg-buildpackage failed (the end of its log above)" >&2
	exit 1
}
cp "$WORK"/*.deb "$OUT"/
ls "$OUT"/*.deb
