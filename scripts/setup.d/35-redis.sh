#!/usr/bin/env bash
# Installs Debian's redis-server for the shared certificate store tests in
# doh/internal/certs and its redisstore (each test starts its own on a loopback
# port). Idempotent: apt-get runs only when redis-server is missing. Never
# fails the run: it warns loudly, and those tests then FAIL.
set -u

if command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ]; then
	echo "35-redis: redis-server present"
	exit 0
fi
echo "35-redis: installing redis-server"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends redis-server; }; then
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
	echo "!!! 35-redis: WARNING: could not install redis-server." >&2
	echo "!!! The Redis storage tests in ./certs and ./certs/redisstore will FAIL." >&2
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
	exit 0
fi
# The package starts a system service on 6379; tests run their own.
command -v systemctl >/dev/null 2>&1 && $sudo systemctl disable --now redis-server >/dev/null 2>&1 || true
