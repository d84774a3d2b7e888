#!/usr/bin/env bash
# Installs h2spec, the HTTP/2 conformance suite ./doh runs against the
# DoH listeners (TestH2Spec). Idempotent: nothing happens when it is
# already in GOPATH/bin. Never fails the run: it warns loudly (and the
# test fails under CI=true).
set -u
export PATH="/usr/local/go/bin:$PATH"
bin="$(go env GOPATH)/bin/h2spec"
if [ -x "$bin" ]; then
	echo "20-h2spec: h2spec present"
	exit 0
fi
echo "20-h2spec: installing h2spec v2.2.1"
if ! go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible; then
	echo "!!! 20-h2spec: WARNING: could not install h2spec; TestH2Spec in ./doh will FAIL under CI=true." >&2
fi
