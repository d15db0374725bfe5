#!/usr/bin/env bash
# Install what reftfs needs (Debian/Ubuntu), configure and build it.
# Idempotent and quick when everything is there: apt-get runs only if a
# package is missing, meson setup only if build/ is not configured yet.
#
# Debian 12's libfuse (3.14) cannot ask the kernel to map direct I/O files
# nor take requests over io_uring; tools/fetch-libfuse.sh puts Debian's
# fuse3 3.18 source in subprojects/, and meson builds it into build/ as a
# static library (with io_uring: liburing and libnuma below).  Without a
# network the build uses the system's libfuse (slower reads, same results)
# and says so.
#
# usage: bash tools/setup.sh        (from anywhere; builds in <repo>/build)
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(
	build-essential gcc clang meson ninja-build pkg-config
	dpkg-dev	# dpkg-source, for tools/fetch-libfuse.sh
	libclang-rt-dev	# clang's sanitizer runtimes (tools/test.sh)
	libfuse3-dev fuse3 libisal-dev libcmocka-dev
	liburing-dev libnuma-dev	# the bundled libfuse's io_uring
	libmemcached-dev memcached libraft-dev libuv1-dev libssl-dev
	python3 python3-torch python3-numpy
	fio psmisc util-linux mount
	procps gdb	# the tests' watchdog: pgrep, and a hung daemon's stacks
	debhelper systemd systemd-container	# the package, its units, and
			# the container 098-package boots them in
)

SUDO=()
if [ "$(id -u)" != 0 ]; then
	command -v sudo >/dev/null || {
		echo "setup: not root and no sudo: install ${PKGS[*]} by hand" >&2
		exit 1
	}
	SUDO=(sudo)
fi

missing=()
for p in "${PKGS[@]}"; do
	st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[ "$st" = installed ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "setup: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	"${SUDO[@]}" apt-get update -q
	"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ ! -e /dev/fuse ]; then
	command -v modprobe >/dev/null && { "${SUDO[@]}" modprobe fuse 2>/dev/null || true; }
	[ -e /dev/fuse ] || echo "setup: /dev/fuse missing; FUSE tests will be skipped" >&2
fi

if ! pkg-config --atleast-version=3.16 fuse3 && ! bash tools/fetch-libfuse.sh; then
	echo "setup: could not fetch libfuse 3.16+; building with the system's" \
		"$(pkg-config --modversion fuse3): every open goes through the page cache" >&2
fi

if [ ! -f build/meson-private/coredata.dat ]; then
	meson setup build
fi
ninja -C build
