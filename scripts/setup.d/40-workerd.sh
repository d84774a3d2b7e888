#!/usr/bin/env bash
# Installs workerd (Cloudflare Workers' runtime, pinned in
# edge/workers/package.json and package-lock.json) for the edge tests.
# Idempotent: does nothing when the pinned version already runs.
set -u

here="$(cd "$(dirname "$0")/../.." && pwd)"
dir="$here/edge/workers"
want="$(sed -n 's/.*"workerd": *"\([^"]*\)".*/\1/p' "$dir/package.json" | head -1)"
bin="$dir/node_modules/.bin/workerd"

installed="$(sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' "$dir/node_modules/workerd/package.json" 2>/dev/null | head -1)"
if [ "$installed" = "$want" ] && "$bin" --version >/dev/null 2>&1; then
	echo "40-workerd: workerd $want already installed in edge/workers"
	exit 0
fi

warn() {
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
	echo "!!! 40-workerd: WARNING: $1" >&2
	echo "!!! The Workers test in ./edge/workers FAILS under CI=true without it (and skips loudly elsewhere)." >&2
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
	exit 1
}

command -v npm >/dev/null || warn "npm is not installed (apt-get install -y nodejs npm)."
echo "40-workerd: npm ci in edge/workers (workerd $want)"
(cd "$dir" && npm ci --no-audit --no-fund) || warn "npm ci failed."
"$bin" --version >/dev/null 2>&1 || warn "workerd does not run after npm ci."
echo "40-workerd: installed $("$bin" --version)"
