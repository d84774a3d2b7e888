#!/usr/bin/env bash
# Installs zbarimg (zbar-tools): cmd/dohfwd's setup page test reads the QR
# code back from the Chromium screenshot with it. Idempotent: does nothing
# when zbarimg is there. Never fails the run: the test fails loudly instead.
set -u
if command -v zbarimg >/dev/null 2>&1; then
	echo "setup 61-zbar: zbarimg present"
	exit 0
fi
echo "setup 61-zbar: installing zbar-tools"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
install() { $sudo apt-get install -y -qq --no-install-recommends zbar-tools >/dev/null 2>&1; }
if ! install && ! { $sudo apt-get update -qq >/dev/null 2>&1 && install; }; then
	echo "!!! setup 61-zbar: WARNING: could not install zbar-tools; the setup page test will FAIL !!!" >&2
fi
exit 0
