#!/usr/bin/env bash
# Cache misses over a DNS-over-TLS upstream, side by side in one run:
#   dohfwd-dot   dohfwd, server tls://127.0.0.1:T#localhost
#   dnsdist-dot  dnsdist 1.7, newServer({tls="openssl", subjectName=...})
#   dohfwd-udp   dohfwd, server 127.0.0.1:P (its own UDP path)
# all three in front of the same unbound (local data for bench.test and
# every name below it, no recursion; DoT on T, plain on P), with their
# caches off, loaded over DoH by h2load with distinct names (every
# question a miss). Reported: req/s, CPU per answered question of the
# forwarder (all its threads, from schedstat), and the ratios
# dohfwd-dot/dnsdist-dot and dohfwd-dot/dohfwd-udp. Nothing is asserted
# (noisy: compare only within one run). Run it under the machine's lock:
#
#   flock /work/notes/bench.lock scripts/bench-upstream-tls.sh
#
# Load shape: CONNS h2load processes at once, each one HTTP/2 connection
# with STREAMS streams, over disjoint names (h2load -i).
# Env: N (40000) names per load; CONNS (4); STREAMS (10); ROUNDS (1: each
#      forwarder loaded once, in turn; 2 or more alternate the order).
# Installs unbound, dnsdist and nghttp2-client (h2load) when missing
# (scripts/setup.d).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH:/usr/sbin"

N=${N:-40000}
CONNS=${CONNS:-4}
STREAMS=${STREAMS:-10}
ROUNDS=${ROUNDS:-1}

log() { echo "bench-upstream-tls: $*" >&2; }
die() {
	log "$*"
	exit 1
}

bash scripts/setup.d/05-base.sh >/dev/null
bash scripts/setup.d/07-encrypted-upstreams.sh >/dev/null

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_scratch

log "building dohfwd (make build)"
make -s build >/dev/null

# One certificate for everything: unbound's DoT, the forwarders' DoH.
# Self-signed for localhost and 127.0.0.1, a CA of its own (ca_file,
# caStore).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
	-subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
	-addext "basicConstraints=critical,CA:TRUE" \
	-keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null

plain=$(freeport)
dot=$(freeport)
cat >"$work/unbound.conf" <<CONF
server:
  interface: 127.0.0.1@$plain
  interface: 127.0.0.1@$dot
  tls-port: $dot
  tls-service-key: "$work/key.pem"
  tls-service-pem: "$work/cert.pem"
  use-syslog: no
  logfile: ""
  chroot: ""
  username: ""
  directory: "$work"
  pidfile: ""
  num-threads: 1
  incoming-num-tcp: 1000
  verbosity: 0
  local-zone: "bench.test." redirect
  local-data: "bench.test. 300 A 192.0.2.80"
remote-control:
  control-enable: no
CONF
unbound -d -c "$work/unbound.conf" >"$work/unbound.log" 2>&1 &
pids+=($!)
waitport "$dot"

declare -A port pid
dohfwd_conf() { # HTTPS_PORT SERVER
	cat <<YAML
listen: {https: "127.0.0.1:$1", http3: false, admin: ""}
tls: {mode: files, cert_file: "$work/cert.pem", key_file: "$work/key.pem"}
scopes:
  - {name: bench, default_route: true, servers: ["$2"]}
fallback_servers: []
upstream_tls: {ca_file: "$work/cert.pem"}
cache: {max_entries: 0, stale_max: 0s}
log: {level: error, format: json}
YAML
}
start_dohfwd() { # NAME SERVER
	local p
	p=$(freeport)
	port[$1]=$p
	dohfwd_conf "$p" "$2" >"$work/$1.yaml"
	bin/dohfwd serve --config "$work/$1.yaml" 2>"$work/$1.log" &
	pid[$1]=$!
	pids+=($!)
}
start_dohfwd dohfwd-dot "tls://127.0.0.1:$dot#localhost"
start_dohfwd dohfwd-udp "127.0.0.1:$plain"
p=$(freeport)
port[dnsdist-dot]=$p
cat >"$work/dnsdist.conf" <<LUA
setSecurityPollSuffix("")
setACL({"127.0.0.0/8"})
addDOHLocal("127.0.0.1:$p", "$work/cert.pem", "$work/key.pem", "/dns-query")
newServer({address="127.0.0.1:$dot", tls="openssl", subjectName="localhost", caStore="$work/cert.pem", checkName="bench.test."})
LUA
dnsdist --supervised --disable-syslog -C "$work/dnsdist.conf" >"$work/dnsdist.log" 2>&1 </dev/null &
pid[dnsdist-dot]=$!
pids+=($!)
for name in "${!port[@]}"; do waitport "${port[$name]}"; done

H2=(-H 'accept: application/dns-message')
status_of() { sed -n 's/^status codes: \([0-9]*\) 2xx.*/\1/p'; }
# warm PORT: every request of a short run answered (dnsdist marks its
# backend up after a health check; dohfwd opens its DoT connections).
warm() {
	local out _
	for _ in $(seq 1 50); do
		out=$(timeout 20 h2load -n 200 -c 2 -m 4 "${H2[@]}" "https://127.0.0.1:$1$bench_same_path" 2>&1 || true)
		[ "$(echo "$out" | status_of)" = 200 ] && return 0
		sleep 0.2
	done
	die "warm-up on port $1 never got 200 answers: $out"
}
for name in "${!port[@]}"; do warm "${port[$name]}"; done

# Distinct names: one file per load and forwarder (no name asked twice
# anywhere, so no cache on the way, unbound's included, sees it again),
# split in CONNS disjoint parts.
# load NAME K -> "REQ/S OK CPU_US_PER_OK", K numbering the load (its names
# are nI.rK.bench.test).
load() {
	local name=$1 p=${port[$1]} f i t0 t1 c0 c1 ok=0 n dir="$work/load.$2"
	mkdir "$dir"
	write_distinct_paths "$N" "r$2.bench.test" >"$dir/paths"
	split -n "l/$CONNS" -d "$dir/paths" "$dir/part."
	i=0
	for f in "$dir"/part.*; do
		sed "1s|^|https://127.0.0.1:$p|" "$f" >"$dir/uris.$i"
		i=$((i + 1))
	done
	local -a hp=()
	c0=$(cpu_ns "${pid[$name]}")
	t0=$(date +%s.%N)
	for ((i = 0; i < CONNS; i++)); do
		n=$(wc -l <"$dir/uris.$i")
		timeout 600 h2load -n "$n" -c 1 -m "$STREAMS" "${H2[@]}" -i "$dir/uris.$i" >"$dir/h2load.$i" 2>&1 &
		hp+=($!)
	done
	for i in "${hp[@]}"; do wait "$i" || true; done
	t1=$(date +%s.%N)
	c1=$(cpu_ns "${pid[$name]}")
	for ((i = 0; i < CONNS; i++)); do
		ok=$((ok + $(status_of <"$dir/h2load.$i" || echo 0)))
	done
	echo "$(echo "$ok / ($t1 - $t0)" | bc -l) $ok $(echo "if ($ok > 0) ($c1 - $c0) / 1000 / $ok else 0" | bc -l)"
}

order=(dohfwd-dot dnsdist-dot dohfwd-udp)
declare -A rps cpu okn
for name in "${order[@]}"; do rps[$name]=0 cpu[$name]=0 okn[$name]=0; done
for ((r = 0; r < ROUNDS; r++)); do
	[ $((r % 2)) = 1 ] && order=(dohfwd-udp dnsdist-dot dohfwd-dot) || order=(dohfwd-dot dnsdist-dot dohfwd-udp)
	for name in "${order[@]}"; do
		k=$((${k:-0} + 1))
		read -r q ok c <<<"$(load "$name" "$k")"
		log "round $((r + 1)) $name: $(printf '%.0f req/s, %d answered, %.1fus CPU each' "$q" "$ok" "$c")"
		rps[$name]=$(echo "${rps[$name]} + $q / $ROUNDS" | bc -l)
		cpu[$name]=$(echo "${cpu[$name]} + $c / $ROUNDS" | bc -l)
		okn[$name]=$((okn[$name] + ok))
	done
done

echo
echo "cache misses over DoH, $N distinct names per load, $CONNS x h2load -c 1 -m $STREAMS, $ROUNDS round(s); unbound $(unbound -V | head -1 | awk '{print $2}'), dnsdist $(dnsdist --version | head -1 | awk '{print $2}')"
printf '%-12s %10s %10s %14s\n' forwarder "req/s" answered "cpu/answer"
for name in dohfwd-dot dnsdist-dot dohfwd-udp; do
	printf '%-12s %10.0f %10d %12.1fus\n' "$name" "${rps[$name]}" "${okn[$name]}" "${cpu[$name]}"
done
ratio() { echo "if ($2 > 0) $1 / $2 else 0" | bc -l; }
printf '\ndohfwd-dot / dnsdist-dot: req/s %.2f, cpu/answer %.2f\n' \
	"$(ratio "${rps[dohfwd-dot]}" "${rps[dnsdist-dot]}")" "$(ratio "${cpu[dohfwd-dot]}" "${cpu[dnsdist-dot]}")"
printf 'dohfwd-dot / dohfwd-udp:  req/s %.2f, cpu/answer %.2f\n' \
	"$(ratio "${rps[dohfwd-dot]}" "${rps[dohfwd-udp]}")" "$(ratio "${cpu[dohfwd-dot]}" "${cpu[dohfwd-udp]}")"
