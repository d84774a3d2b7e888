#!/usr/bin/env bash
# Installs the real encrypted upstream servers the DoT/DoH upstream tests
# and scripts/bench-upstream-tls.sh use: unbound (DoT and DoH server,
# `do-udp: no`), knot-resolver's kresd (a second DoT implementation) and
# dnsdist (the peer forwarding over DoT). Idempotent: apt-get runs only
# when one is missing. Exits 1, loudly, when it cannot install them.
set -u

declare -A need=(
	[unbound]=unbound
	[kresd]=knot-resolver
	[dnsdist]=dnsdist
)
missing=()
for tool in "${!need[@]}"; do
	command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || missing+=("${need[$tool]}")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "07-encrypted-upstreams: unbound kresd dnsdist present"
	exit 0
fi
echo "07-encrypted-upstreams: installing ${missing[*]}"
. "$(dirname "$0")/../apt.sh"
if ! apt_install "${missing[@]}"; then
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
	echo "!!! 07-encrypted-upstreams: WARNING: could not install ${missing[*]}." >&2
	echo "!!! The tests that use them FAIL under CI=true (and skip loudly elsewhere)." >&2
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
	failed=1
fi
# The packages start system services on their default ports; tests run
# their own instances.
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
for svc in unbound kresd@1 kresd.target dnsdist; do
	command -v systemctl >/dev/null 2>&1 && $sudo systemctl disable --now "$svc" >/dev/null 2>&1 || true
done
exit "${failed:-0}"
