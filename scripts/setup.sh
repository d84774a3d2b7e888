#!/usr/bin/env bash
# Installs what `make test` needs: runs every scripts/setup.d/*.sh in order.
# Each part is idempotent and skips what is already there; a part that
# fails prints a loud warning, the other parts still run, and setup exits
# non-zero so that `make test` stops: tests run without their tools would
# fail (under CI=true) or skip (elsewhere) rather than test anything.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin:$PATH"

status=0
for part in scripts/setup.d/*.sh; do
	[ -e "$part" ] || continue
	echo "setup: $part"
	if ! bash "$part"; then
		echo "!!! setup: $part failed; tests that need what it installs will fail or say so" >&2
		status=1
	fi
done
exit $status
