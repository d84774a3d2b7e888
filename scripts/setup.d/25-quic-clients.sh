#!/usr/bin/env bash
# Installs the QUIC clients cmd/dohfwd's DNS-over-QUIC tests use besides
# kdig +quic (05-base): AdGuard dnsproxy as a client (`-u quic://...`),
# built once from the Go module proxy inside a throwaway module (its
# go.mod has replace directives, so `go install pkg@version` is refused)
# into GOPATH/bin. (A Python DoQ client, dnspython's dns.query.quic, needs
# aioquic, which Debian 12 does not package.) Idempotent: nothing is done
# when the pinned version is there.
# Never vendors or commits either client's code.
set -u
export PATH="/usr/local/go/bin:$PATH"

DNSPROXY_VERSION=v0.84.1

gobin="$(go env GOBIN)"
[ -n "$gobin" ] || gobin="$(go env GOPATH)/bin"
failed=0

if go version -m "$gobin/dnsproxy" 2>/dev/null | grep -q "github.com/AdguardTeam/dnsproxy[[:space:]]*${DNSPROXY_VERSION}"; then
	echo "25-quic-clients: dnsproxy ${DNSPROXY_VERSION} present"
else
	echo "25-quic-clients: building dnsproxy ${DNSPROXY_VERSION} into $gobin"
	tmp="$(mktemp -d)"
	if ! (cd "$tmp" && go mod init tmp >/dev/null 2>&1 &&
		go get "github.com/AdguardTeam/dnsproxy@${DNSPROXY_VERSION}" >/dev/null 2>&1 &&
		mkdir -p "$gobin" && go build -o "$gobin/dnsproxy" github.com/AdguardTeam/dnsproxy); then
		echo "!!! 25-quic-clients: WARNING: could not build dnsproxy; the DoQ dnsproxy test FAILS under CI=true." >&2
		failed=1
	fi
	rm -rf "$tmp"
fi

exit "$failed"
