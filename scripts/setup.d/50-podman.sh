#!/usr/bin/env bash
# Installs the rootful podman stack that deploy's container test and
# `make container` use (see TOOLING.md, Containers), busybox-static for the
# local stand-in builder image, and nsd (the container test's upstream).
# Idempotent: does nothing when every piece is there. Exits 1 when it
# cannot install: without podman the container test fails under CI=true
# (and skips loudly elsewhere).
set -u

packages=(podman buildah runc conmon fuse-overlayfs slirp4netns uidmap
	containernetworking-plugins golang-github-containers-common
	catatonit iptables busybox-static nsd)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "setup 50-podman: podman stack already installed"
	exit 0
fi

echo "setup 50-podman: installing ${missing[*]}"
. "$(dirname "$0")/../apt.sh"
if ! apt_install "${missing[@]}"; then
	echo "!!! setup 50-podman: WARNING: could not install the podman stack;" >&2
	echo "!!! the container test and 'make container' will NOT run !!!" >&2
	exit 1
fi
echo "setup 50-podman: $(podman --version 2>/dev/null) installed"
