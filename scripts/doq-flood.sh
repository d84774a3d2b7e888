#!/usr/bin/env bash
# A flood of QUIC Initial packets from spoofed loopback addresses against
# dohfwd's DNS-over-QUIC listener, with a normal client's median latency
# measured before and during it (scripts/quicflood). Exits 1 when a median
# under the flood is more than MAX_RATIO (default 2) times its unloaded
# value. Loopback only; runs under the bench lock so loads never overlap.
#
#   scripts/doq-flood.sh                      # 5000 Initials/s from 256 addresses
#   RATE=20000 SOURCES=1024 scripts/doq-flood.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${RATE:-5000}
SOURCES=${SOURCES:-256}
PROBES=${PROBES:-200}
MAX_RATIO=${MAX_RATIO:-2}
LOCK=${LOCK:-/work/notes/bench.lock}

work=$(mktemp -d)
pid=""
cleanup() {
	[ -z "$pid" ] || { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/dohfwd" ./cmd/dohfwd
go build -o "$work/quicflood" ./scripts/quicflood
port=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
admin=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$work/dohfwd.yaml" <<YAML
listen:
  https: 127.0.0.1:0
  doq: 127.0.0.1:$port
  admin: 127.0.0.1:$admin
fallback_servers: [127.0.0.1:1]
hosts:
  flood.test: [192.0.2.1]
log:
  level: warn
  format: json
YAML
"$work/dohfwd" serve --config "$work/dohfwd.yaml" 2>"$work/dohfwd.log" &
pid=$!
sleep 1

cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; } # user + system, in clock ticks
mkdir -p "$(dirname "$LOCK")"
cpu0=$(cpu)
out=$(flock -o "$LOCK" "$work/quicflood" -target "127.0.0.1:$port" -insecure -name flood.test \
	-rate "$RATE" -sources "$SOURCES" -probes "$PROBES")
cpu1=$(cpu)
echo "$out"
echo "dohfwd cpu_s=$(awk -v a="$cpu0" -v b="$cpu1" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", (b-a)/hz}') rss_kb=$(ps -o rss= -p "$pid")"
curl -s "http://127.0.0.1:$admin/metrics" | grep -E '^dohfwd_(quic_retries_total|dns_questions_total)'
ratio=$(echo "$out" | awk '/^ratio/ {split($2,a,"="); split($3,b,"="); print (a[2] > b[2]) ? a[2] : b[2]}')
if awk -v r="$ratio" -v m="$MAX_RATIO" 'BEGIN { exit !(r > m) }'; then
	echo "FAIL: a median under the flood is ${ratio}x its unloaded value (bound ${MAX_RATIO}x)"
	exit 1
fi
echo "ok: worst median ratio ${ratio}x (bound ${MAX_RATIO}x)"
