#!/usr/bin/env bash
# Side-by-side DNS-over-TLS load: dohfwd's DoT listener against dnsdist's,
# in the same run, on the same machine, against the same upstream (one nsd
# on loopback), with dnsperf -m dot as the client. Figures are reported as
# ratios dohfwd/dnsdist, queries per second and CPU time per query;
# nothing is asserted (noisy: compare only within one run).
#
# Two loads, each against both servers:
#   cache on,  same name - one name repeated: the cache-hit path;
#   cache off, distinct  - N different names: every question goes upstream.
# Load shape: 4 TLS connections, at most 40 queries outstanding (dnsperf
# -c 4 -q 40), for SECONDS seconds.
#
# Usage: scripts/bench-dot.sh
# Env:   SECONDS_PER_LOAD (10); N (20000) distinct names; LOG_LEVEL (error).
# Installs dnsdist and dnsperf with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

SECONDS_PER_LOAD=${SECONDS_PER_LOAD:-10}
N=${N:-20000}
LOG_LEVEL=${LOG_LEVEL:-error}

log() { echo "bench-dot: $*" >&2; }
die() {
	log "$*"
	exit 1
}

missing=()
command -v dnsdist >/dev/null || missing+=(dnsdist)
command -v dnsperf >/dev/null || missing+=(dnsperf)
command -v nsd >/dev/null || [ -x /usr/sbin/nsd ] || missing+=(nsd)
command -v openssl >/dev/null || missing+=(openssl)
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null ||
		{ apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
fi
export PATH="$PATH:/usr/sbin"

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_scratch

log "building dohfwd (make build)"
make -s build >/dev/null

nsdport=$(freeport)
start_bench_nsd "$nsdport"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
	-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
	-keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null

# dohfwd_conf DOT_PORT MAX_ENTRIES
dohfwd_conf() {
	cat <<YAML
listen: {https: "127.0.0.1:$(freeport)", dot: "127.0.0.1:$1", admin: ""}
tls: {mode: files, cert_file: "$work/cert.pem", key_file: "$work/key.pem"}
scopes:
  - {name: bench, default_route: true, servers: ["127.0.0.1:$nsdport"]}
fallback_servers: []
cache: {max_entries: $2}
log: {level: $LOG_LEVEL, format: json}
YAML
}
# dnsdist_conf DOT_PORT MAX_ENTRIES (0: no packet cache)
dnsdist_conf() {
	cat <<LUA
setSecurityPollSuffix("")
setACL({"127.0.0.0/8"})
addTLSLocal("127.0.0.1:$1", "$work/cert.pem", "$work/key.pem")
newServer({address="127.0.0.1:$nsdport", checkName="bench.test."})
LUA
	if [ "$2" -gt 0 ]; then
		echo "getPool(\"\"):setCache(newPacketCache($2))"
	fi
}

declare -A port pid
start() { # NAME KIND MAX_ENTRIES
	local name=$1 kind=$2 entries=$3 p
	p=$(freeport)
	port[$name]=$p
	if [ "$kind" = dohfwd ]; then
		dohfwd_conf "$p" "$entries" >"$work/$name.yaml"
		bin/dohfwd serve --config "$work/$name.yaml" 2>"$work/$name.log" &
	else
		dnsdist_conf "$p" "$entries" >"$work/$name.conf"
		dnsdist --supervised --disable-syslog -C "$work/$name.conf" >"$work/$name.log" 2>&1 </dev/null &
	fi
	pid[$name]=$!
	pids+=($!)
}
start dohfwd-cache dohfwd 100000
start dohfwd-nocache dohfwd 0
start dnsdist-cache dnsdist 100000
start dnsdist-nocache dnsdist 0
for name in "${!port[@]}"; do waitport "${port[$name]}"; done

echo "www.bench.test A" >"$work/same"
for ((i = 0; i < N; i++)); do echo "n$i.bench.test A"; done >"$work/distinct"

# cpu_ticks PID: user + system clock ticks so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# perf_of FILE: "QPS COMPLETED LOST" from dnsperf's summary.
perf_of() {
	local qps done lost
	qps=$(sed -n 's/^ *Queries per second: *\([0-9.]*\).*/\1/p' "$1")
	done=$(sed -n 's/^ *Queries completed: *\([0-9]*\).*/\1/p' "$1")
	lost=$(sed -n 's/^ *Queries lost: *\([0-9]*\).*/\1/p' "$1")
	echo "${qps:-0} ${done:-0} ${lost:-0}"
}

# warm PORT: a short run whose every query must be answered (dnsdist marks
# its backend up after a health check).
warm() {
	local _ out
	for _ in $(seq 1 30); do
		dnsperf -m dot -s 127.0.0.1 -p "$1" -d "$work/same" -n 50 -c 1 >"$work/warm" 2>&1 || true
		read -r _ out _ <<<"$(perf_of "$work/warm")"
		[ "$out" = 50 ] && return 0
		sleep 0.3
	done
	die "warm-up on port $1 never got its answers: $(cat "$work/warm")"
}
for name in "${!port[@]}"; do warm "${port[$name]}"; done

# load NAME FILE -> "QPS COMPLETED LOST CPU_US_PER_QUERY"
load() {
	local name=$1 file=$2 t0 t1 qps done lost
	t0=$(cpu_ticks "${pid[$name]}")
	dnsperf -m dot -s 127.0.0.1 -p "${port[$name]}" -d "$file" -c 4 -q 40 -l "$SECONDS_PER_LOAD" >"$work/$name.perf" 2>&1 || true
	t1=$(cpu_ticks "${pid[$name]}")
	read -r qps done lost <<<"$(perf_of "$work/$name.perf")"
	echo "$qps $done $lost $(echo "if ($done > 0) ($t1 - $t0) * 1000000 / $hz / $done else 0" | bc -l)"
}

log "load: ${SECONDS_PER_LOAD}s each, dnsperf -m dot -c 4 -q 40; dohfwd log level $LOG_LEVEL"
results=()
for run in "cache same" "nocache distinct"; do
	read -r cache kind <<<"$run"
	read -r d_qps d_done d_lost d_cpu <<<"$(load "dohfwd-$cache" "$work/$kind")"
	read -r s_qps s_done s_lost s_cpu <<<"$(load "dnsdist-$cache" "$work/$kind")"
	results+=("$cache $kind $d_qps $s_qps $d_cpu $s_cpu $d_lost $s_lost")
	log "done: $cache $kind"
done

echo
printf '%-6s %-9s %11s %11s %7s %14s %14s %7s %15s\n' cache names "dohfwd q/s" "dnsdist q/s" ratio "dohfwd cpu/q" "dnsdist cpu/q" ratio "lost (d / s)"
for r in "${results[@]}"; do
	read -r cache kind d_qps s_qps d_cpu s_cpu d_lost s_lost <<<"$r"
	[ "$cache" = cache ] && cache=on || cache=off
	printf '%-6s %-9s %11.0f %11.0f %7.2f %12.1fus %12.1fus %7.2f %15s\n' "$cache" "$kind" "$d_qps" "$s_qps" \
		"$(echo "if ($s_qps > 0) $d_qps / $s_qps else 0" | bc -l)" "$d_cpu" "$s_cpu" \
		"$(echo "if ($s_cpu > 0) $d_cpu / $s_cpu else 0" | bc -l)" "$d_lost / $s_lost"
done
echo "(q/s ratio above 1: dohfwd answers more; cpu/q ratio below 1: dohfwd spends less CPU per query)"
