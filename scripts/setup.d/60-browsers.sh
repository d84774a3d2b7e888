#!/usr/bin/env bash
# Installs the real browsers cmd/dohfwd's browser test drives through
# dohfwd's DoH URL (Chromium in secure DoH mode, Firefox ESR in TRR mode 3)
# and certutil to make them trust the test CA. Idempotent: does nothing
# when all three are there. When it cannot install, it warns loudly, exits
# 1 and leaves a marker: the browser test then fails under CI=true and
# skips LOUDLY elsewhere.
set -u
marker="${TMPDIR:-/tmp}/dohfwd-setup-60-browsers.failed"

pkgs=()
command -v chromium >/dev/null 2>&1 || pkgs+=(chromium)
command -v firefox-esr >/dev/null 2>&1 || pkgs+=(firefox-esr)
command -v certutil >/dev/null 2>&1 || pkgs+=(libnss3-tools)
if [ ${#pkgs[@]} -eq 0 ]; then
	rm -f "$marker"
	echo "setup 60-browsers: chromium firefox-esr certutil present"
	exit 0
fi

echo "setup 60-browsers: installing ${pkgs[*]}"
. "$(dirname "$0")/../apt.sh"
if ! apt_install "${pkgs[@]}"; then
	echo "could not install ${pkgs[*]}" >"$marker"
	echo "!!! setup 60-browsers: WARNING: could not install ${pkgs[*]};" >&2
	echo "!!! cmd/dohfwd's TestBrowsers will FAIL under CI=true (SKIP elsewhere): real browsers are NOT tested !!!" >&2
	exit 1
fi
rm -f "$marker"
echo "setup 60-browsers: $(chromium --version 2>/dev/null); $(firefox-esr --version 2>/dev/null)"
