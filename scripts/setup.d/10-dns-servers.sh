#!/usr/bin/env bash
# Installs the real DNS servers and clients the engine's tests use (nsd for
# the happy path and a real truncation; knot, kdig, dig for the end-to-end
# tests). Idempotent: nothing runs when they are all present (05-base.sh
# usually installed them already). Never fails the run: it warns loudly.
set -u
pkgs=()
[ -x /usr/sbin/nsd ] || pkgs+=(nsd)
[ -x /usr/sbin/knotd ] || pkgs+=(knot)
command -v kdig >/dev/null 2>&1 || pkgs+=(knot-dnsutils)
command -v dig >/dev/null 2>&1 || pkgs+=(bind9-dnsutils)
if [ ${#pkgs[@]} -eq 0 ]; then
	echo "10-dns-servers: nsd knotd kdig dig present"
	exit 0
fi
echo "10-dns-servers: installing ${pkgs[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends "${pkgs[@]}"; }; then
	echo "!!! 10-dns-servers: WARNING: could not install ${pkgs[*]}; engine's TestNSD* will skip LOUDLY" >&2
fi
# The packages start system services on their default ports; tests run
# their own instances.
for svc in nsd knot; do
	command -v systemctl >/dev/null 2>&1 && $sudo systemctl disable --now "$svc" >/dev/null 2>&1 || true
done
exit 0
