#!/usr/bin/env bash
# DoH over HTTP/3 load, side by side in one run: dohfwd over HTTP/3,
# dohfwd over HTTP/2 (its own base) and AdGuard dnsproxy's DoH3 server
# (the peer; Debian's dnsdist 1.7 has no DoH3), all forwarding to one nsd.
# The load generator is scripts/h3load (quic-go's and net/http's clients;
# Debian's h2load has no HTTP/3), the same for every server, so only the
# servers differ. For each load (hits: one name asked again and again;
# misses: a distinct name per request, each asked upstream) it prints
# req/s and the server's CPU per request (its threads' time from
# /proc/PID/task/*/schedstat over the load), and the ratios
# dohfwd-h3/dohfwd-h2 and dohfwd-h3/dnsproxy-h3. Nothing is asserted
# (noisy: compare only within one run).
#
#   scripts/bench-http3.sh                  # N=20000 requests per load
#   N=50000 PIN=1 scripts/bench-http3.sh    # servers on CPU 1, the load on CPU 0
#
# Needs nsd, openssl, python3 and dnsproxy in GOPATH/bin
# (scripts/setup.d/25-quic-clients.sh builds it). Wrap it in
# `flock -o /work/notes/bench.lock` on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH:/usr/sbin"

N=${N:-20000}
CONNS=${CONNS:-4}
STREAMS=${STREAMS:-10}
PIN=${PIN:-}
gen=() serve=()
if [ -n "$PIN" ]; then
	gen=(taskset -c 0) serve=(taskset -c 1)
	BENCH_SERVE_PREFIX="taskset -c 1" # nsd, in bench-lib.sh
fi

log() { echo "bench-http3: $*" >&2; }
die() {
	log "$*"
	exit 1
}
dnsproxy="$(go env GOPATH)/bin/dnsproxy"
[ -x "$dnsproxy" ] || die "no $dnsproxy: run scripts/setup.d/25-quic-clients.sh"
command -v nsd >/dev/null || die "nsd is needed (scripts/setup.d/05-base.sh)"
command -v openssl >/dev/null || die "openssl is needed"

. scripts/bench-lib.sh
bench_scratch

log "building dohfwd and h3load"
CGO_ENABLED=0 go build -trimpath -o "$work/dohfwd" ./cmd/dohfwd
go build -o "$work/h3load" ./scripts/h3load

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
	-addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null

nsd_port=$(freeport)
start_bench_nsd "$nsd_port"

# dohfwd: HTTPS (HTTP/2) and its UDP twin (HTTP/3) on one port; the
# cache on, as dnsproxy's (--cache).
doh_port=$(freeport)
cat >"$work/dohfwd.yaml" <<EOF
listen:
  https: 127.0.0.1:$doh_port
  admin: ""
tls:
  mode: files
  cert_file: $work/cert.pem
  key_file: $work/key.pem
scopes:
  - name: bench
    default_route: true
    servers: [127.0.0.1:$nsd_port]
fallback_servers: []
log:
  level: warn
  format: json
EOF
"${serve[@]}" "$work/dohfwd" serve --config "$work/dohfwd.yaml" 2>"$work/dohfwd.log" &
pids+=($!)
dohfwd_pid=$!
waitport "$doh_port"

peer_port=$(freeport)
"${serve[@]}" "$dnsproxy" -l 127.0.0.1 -p 0 --https-port="$peer_port" --http3 --tls-crt="$work/cert.pem" \
	--tls-key="$work/key.pem" -u "127.0.0.1:$nsd_port" --cache --cache-size=$((64 << 20)) \
	>"$work/dnsproxy.log" 2>&1 &
pids+=($!)
peer_pid=$!
waitport "$peer_port"

echo "$bench_same_path" >"$work/hits.txt"
# A distinct name per request, and per server (its tag in the name), so
# every request of the misses load is asked upstream once.
for s in dohfwd-h3 dohfwd-h2 dnsproxy-h3; do
	python3 - "$N" "${s//-/}" >"$work/misses-$s.txt" <<'PY'
import base64, struct, sys
n, tag = int(sys.argv[1]), sys.argv[2]
for i in range(n):
    q = struct.pack(">6H", 0, 0x0100, 1, 0, 0, 0)
    for label in f"{tag}n{i}.bench.test".split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">2H", 1, 1)
    print("/dns-query?dns=" + base64.urlsafe_b64encode(q).decode().rstrip("="))
PY
done

cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f\n", s}'; }

# load SERVER PROTO PORT PID PATHS: prints "req/s cpu_us_per_request".
load() {
	local before after out rps ok
	before=$(cpu_ns "$4")
	out=$("${gen[@]}" "$work/h3load" -proto "$2" -url "https://127.0.0.1:$3" -paths "$5" -n "$N" \
		-c "$CONNS" -m "$STREAMS" -ca "$work/cert.pem")
	after=$(cpu_ns "$4")
	rps=$(sed -n 's/.*req\/s \([0-9.]*\).*/\1/p' <<<"$out")
	ok=$(sed -n 's/.*ok \([0-9]*\).*/\1/p' <<<"$out")
	[ "$ok" -gt 0 ] || die "$1: no request answered: $out"
	awk -v r="$rps" -v b="$before" -v a="$after" -v ok="$ok" 'BEGIN {printf "%s %.2f\n", r, (a - b) / 1000 / ok}'
}

declare -A rps cpu
for kind in hits misses; do
	for s in dohfwd-h3 dohfwd-h2 dnsproxy-h3; do
		case $s in
		dohfwd-h3) proto=h3 port=$doh_port pid=$dohfwd_pid ;;
		dohfwd-h2) proto=h2 port=$doh_port pid=$dohfwd_pid ;;
		dnsproxy-h3) proto=h3 port=$peer_port pid=$peer_pid ;;
		esac
		paths=$work/hits.txt
		[ "$kind" = hits ] || paths=$work/misses-$s.txt
		read -r r c < <(load "$s" "$proto" "$port" "$pid" "$paths")
		rps[$kind,$s]=$r cpu[$kind,$s]=$c
		log "$kind $s: $r req/s, $c µs CPU per request"
	done
done

printf '\n%-8s %-12s %10s %14s\n' load server req/s "cpu us/req"
for kind in hits misses; do
	for s in dohfwd-h3 dohfwd-h2 dnsproxy-h3; do
		printf '%-8s %-12s %10s %14s\n' "$kind" "$s" "${rps[$kind,$s]}" "${cpu[$kind,$s]}"
	done
done
echo
for kind in hits misses; do
	awk -v k="$kind" -v h3="${cpu[$kind,dohfwd-h3]}" -v h2="${cpu[$kind,dohfwd-h2]}" -v p="${cpu[$kind,dnsproxy-h3]}" \
		-v r3="${rps[$kind,dohfwd-h3]}" -v r2="${rps[$kind,dohfwd-h2]}" -v rp="${rps[$kind,dnsproxy-h3]}" 'BEGIN {
		printf "%s: CPU/request dohfwd-h3/dohfwd-h2 x%.2f (goal <= 1.5), dohfwd-h3/dnsproxy-h3 x%.2f; req/s dohfwd-h3/dohfwd-h2 x%.2f, dohfwd-h3/dnsproxy-h3 x%.2f\n",
			k, h3 / h2, h3 / p, r3 / r2, r3 / rp }'
done
