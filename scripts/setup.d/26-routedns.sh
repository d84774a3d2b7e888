#!/usr/bin/env bash
# Installs routedns, an independent ODoH client, relay (proxy) and target
# that cmd/dohfwd's Oblivious DoH interop tests run against dohfwd's own
# target, relay and client. `go install ...@version` fails on its module
# list, so it is built once inside a throwaway module that requires it and
# imports its command in a tools-tagged file, into GOPATH/bin.
# Idempotent: nothing is done when the pinned version is there. Never
# vendors or commits routedns's code.
set -u
export PATH="/usr/local/go/bin:$PATH"

ROUTEDNS_VERSION=v0.1.237

gobin="$(go env GOBIN)"
[ -n "$gobin" ] || gobin="$(go env GOPATH)/bin"
failed=0

if go version -m "$gobin/routedns" 2>/dev/null | grep -q "github.com/folbricht/routedns[[:space:]]*${ROUTEDNS_VERSION}"; then
	echo "26-routedns: routedns ${ROUTEDNS_VERSION} present"
else
	echo "26-routedns: building routedns ${ROUTEDNS_VERSION} into $gobin"
	tmp="$(mktemp -d)"
	if ! (cd "$tmp" && go mod init routednstool >/dev/null 2>&1 &&
		printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/folbricht/routedns/cmd/routedns"\n' >tools.go &&
		go mod edit -require="github.com/folbricht/routedns@${ROUTEDNS_VERSION}" &&
		go mod tidy >/dev/null 2>&1 &&
		mkdir -p "$gobin" && go build -o "$gobin/routedns" github.com/folbricht/routedns/cmd/routedns); then
		echo "!!! 26-routedns: WARNING: could not build routedns; the ODoH interop tests FAIL under CI=true." >&2
		failed=1
	fi
	rm -rf "$tmp"
fi

# The ODoH test vectors (doh/odoh's TestVectors) are read from the module
# cache: the odoh-go version routedns requires, whose test-vectors.json
# generated RFC 9230's Appendix A.
ODOH_GO=github.com/cloudflare/odoh-go@v1.0.1-0.20230926114050-f39fa019b017
if ! (tmp="$(mktemp -d)" && cd "$tmp" && go mod init vectors >/dev/null 2>&1 &&
	go mod download "$ODOH_GO" >/dev/null 2>&1; rc=$?; rm -rf "$tmp"; exit $rc); then
	echo "!!! 26-routedns: WARNING: could not download $ODOH_GO; doh/odoh's TestVectors FAILS under CI=true." >&2
	failed=1
fi

exit "$failed"
