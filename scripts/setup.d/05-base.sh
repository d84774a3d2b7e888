#!/usr/bin/env bash
# Installs the real DNS servers and clients the tests use: nsd (the
# upstream for the happy path and a real truncation in ./engine, ./doh and
# ./cmd/dohfwd), knot (forces TCP), dig, kdig, curl, h2load, and
# systemd-analyze (deploy/manifestcheck verifies the unit with it).
# Idempotent: apt-get runs only when a tool is missing, and `apt-get
# update` at most once (scripts/apt.sh). Exits 1, loudly, when it cannot install them.
set -u

declare -A need=(
	[nsd]=nsd
	[dig]=bind9-dnsutils
	[kdig]=knot-dnsutils
	[knotd]=knot
	[curl]=curl
	[h2load]=nghttp2-client
	[systemd-analyze]=systemd
)
missing=()
for tool in "${!need[@]}"; do
	command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || missing+=("${need[$tool]}")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "05-base: nsd dig kdig knotd curl h2load systemd-analyze present"
	exit 0
fi
echo "05-base: installing ${missing[*]}"
. "$(dirname "$0")/../apt.sh"
if ! apt_install "${missing[@]}"; then
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
	echo "!!! 05-base: WARNING: could not install ${missing[*]}." >&2
	echo "!!! The tests that use them FAIL under CI=true (and skip loudly elsewhere)." >&2
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
	failed=1
fi
# The Debian nsd/knot packages start system services on their default
# ports; tests run their own instances.
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
for svc in nsd knot; do
	command -v systemctl >/dev/null 2>&1 && $sudo systemctl disable --now "$svc" >/dev/null 2>&1 || true
done
exit "${failed:-0}"
