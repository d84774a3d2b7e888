#!/usr/bin/env bash
# Installs Pebble, Let's Encrypt's test ACME CA, for the ACME tests in doh/internal/certs.
# Idempotent: does nothing when the pinned version is already on PATH or in GOBIN.
set -u

PEBBLE_VERSION=v2.10.3
gobin="$(go env GOBIN)"
[ -n "$gobin" ] || gobin="$(go env GOPATH)/bin"

have_pinned() {
	local bin="$1"
	[ -x "$bin" ] || return 1
	go version -m "$bin" 2>/dev/null | grep -q "github.com/letsencrypt/pebble/v2[[:space:]]*${PEBBLE_VERSION}"
}

for candidate in "$gobin/pebble" "$(command -v pebble 2>/dev/null || true)"; do
	if [ -n "$candidate" ] && have_pinned "$candidate"; then
		echo "30-pebble: pebble ${PEBBLE_VERSION} already installed at $candidate"
		exit 0
	fi
done

echo "30-pebble: installing pebble ${PEBBLE_VERSION} into $gobin"
if ! go install "github.com/letsencrypt/pebble/v2/cmd/pebble@${PEBBLE_VERSION}"; then
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
	echo "!!! 30-pebble: WARNING: could not install pebble ${PEBBLE_VERSION}." >&2
	echo "!!! The ACME tests in ./certs will FAIL until pebble is installed." >&2
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
	exit 1
fi
echo "30-pebble: installed $gobin/pebble"
