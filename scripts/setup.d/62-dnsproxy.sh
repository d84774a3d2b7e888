#!/usr/bin/env bash
# Builds AdGuard dnsproxy, a real DoH-over-HTTP/3 client (-u h3://) the
# end-to-end tests in ./cmd/dohfwd ask dohfwd through
# (TestDnsproxyOverHTTP3). Its module cannot be `go install`ed (it has
# replace directives), so it is built from the Go module proxy inside a
# throwaway module in a temporary folder, and only the binary is kept, in
# GOPATH/bin. Idempotent: nothing happens when that binary is there.
# Never fails the run: it warns loudly (and the test fails under CI=true).
set -u
export PATH="/usr/local/go/bin:$PATH"
version=v0.84.1
bin="$(go env GOPATH)/bin/dnsproxy"
if [ -x "$bin" ]; then
	echo "62-dnsproxy: dnsproxy present"
	exit 0
fi
echo "62-dnsproxy: building dnsproxy $version"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && go mod init tmp >/dev/null 2>&1 &&
	GOFLAGS=-mod=mod go get "github.com/AdguardTeam/dnsproxy@$version" >/dev/null 2>&1 &&
	GOFLAGS=-mod=mod go build -o "$bin.tmp" github.com/AdguardTeam/dnsproxy && mv "$bin.tmp" "$bin"); then
	echo "!!! 62-dnsproxy: WARNING: could not build dnsproxy; TestDnsproxyOverHTTP3 in ./cmd/dohfwd will FAIL under CI=true." >&2
fi
exit 0
