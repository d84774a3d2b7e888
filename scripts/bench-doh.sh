#!/usr/bin/env bash
# Side-by-side DoH load: dohfwd against dnsdist, in the same run, on the
# same machine, against the same upstream (one nsd on loopback). Figures
# are reported as ratios dohfwd/dnsdist; nothing is asserted (noisy: compare
# only within one run).
#
# Four loads, each against both servers:
#   cache on,  same name    - one name repeated: the cache-hit path;
#   cache on,  distinct     - N different names: every question misses
#                             and is inserted;
#   cache off, same name    - every request goes upstream (dohfwd may
#                             share one upstream question among concurrent
#                             identical ones);
#   cache off, distinct     - every request goes upstream, no sharing.
# Load shape: 4 HTTP/2 connections x 10 streams over TLS (h2load).
#
# Distinct names: `h2load -c 4 -i FILE` makes every connection walk FILE
# from its first line, so N/4 names would each be asked 4 times at about
# the same moment. Instead 4 h2load processes run at once (-c 1 -m 10
# each, same total shape) on 4 disjoint quarters of the N names; their
# req/s is the sum of successes over the wall time of the group.
#
# Usage: scripts/bench-doh.sh
# Env:   N (30000) requests per load; CACHE_ENTRIES (100000) cache size for
#        the "cache on" loads; LOG_LEVEL (error) dohfwd's log level (info
#        logs two events per question); PERF_DIR=dir records a perf CPU
#        profile of dohfwd (unstripped build) during one load into
#        dir/perf.data; PERF_LOAD picks it: cache-same, cache-distinct,
#        nocache-same or nocache-distinct (the default); PROFILE_DIR=dir
#        writes a Go CPU profile (pprof) of a separate dohfwd with the cache
#        on during the cache-on, same-name load to dir/cpu.pprof;
#        PROFILE_N (10 x N) requests of that load; LATENCY_N (5000)
#        requests of the one-connection, one-stream latency load;
#        DOHFWD_BIN runs that binary instead of building one (a baseline).
# Besides req/s, each load reports the CPU each server spent per answered
# request (user + system time from /proc/PID/stat), and a last load on
# the cache-on servers measures latency with one connection and one
# stream (h2load --log-file; the median of the per-request times).
# Installs dnsdist and nghttp2-client (h2load) with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

N=${N:-30000}
CACHE_ENTRIES=${CACHE_ENTRIES:-100000}
LOG_LEVEL=${LOG_LEVEL:-error}
PERF_DIR=${PERF_DIR:-}
PERF_LOAD=${PERF_LOAD:-nocache-distinct}
PROFILE_DIR=${PROFILE_DIR:-}
LATENCY_N=${LATENCY_N:-5000}
PROFILE_N=${PROFILE_N:-$((10 * N))}
CONNS=4
STREAMS=10

log() { echo "bench-doh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

# --- tools -----------------------------------------------------------------
missing=()
command -v dnsdist >/dev/null || missing+=(dnsdist)
command -v h2load >/dev/null || missing+=(nghttp2-client)
command -v nsd >/dev/null || [ -x /usr/sbin/nsd ] || missing+=(nsd)
command -v openssl >/dev/null || missing+=(openssl)
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null ||
		{ apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
fi
export PATH="$PATH:/usr/sbin"
command -v python3 >/dev/null || die "python3 is needed to write the query URIs"
if [ -n "$PERF_DIR" ]; then command -v perf >/dev/null || die "PERF_DIR needs perf (apt-get install linux-perf)"; fi

# --- scratch space and cleanup -----------------------------------------------
work=$(mktemp -d)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh

# --- dohfwd ----------------------------------------------------------------
if [ -n "${DOHFWD_BIN:-}" ]; then
	dohfwd_bin=$DOHFWD_BIN
else
	log "building dohfwd (make build)"
	make -s build >/dev/null
	dohfwd_bin=bin/dohfwd
fi
if [ -n "$PERF_DIR" ]; then
	# bin/dohfwd is stripped (-s -w): perf needs the symbol table.
	dohfwd_bin=$work/dohfwd-syms
	CGO_ENABLED=0 go build -trimpath -o "$dohfwd_bin" ./cmd/dohfwd
fi

# --- upstream: one nsd, rate limiting off ----------------------------------
nsdport=$(freeport)
start_bench_nsd "$nsdport"

# --- certificate for 127.0.0.1 ---------------------------------------------
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
	-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
	-keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null

# --- servers: dohfwd and dnsdist, one of each with the cache on and off ---
# dohfwd_conf PORT MAX_ENTRIES
dohfwd_conf() {
	cat <<YAML
listen: {https: "127.0.0.1:$1", admin: ""}
tls: {mode: files, cert_file: "$work/cert.pem", key_file: "$work/key.pem"}
scopes:
  - {name: bench, default_route: true, servers: ["127.0.0.1:$nsdport"]}
fallback_servers: []
cache: {max_entries: $2}
log: {level: $LOG_LEVEL, format: json}
YAML
}
# dnsdist_conf PORT MAX_ENTRIES (0: no packet cache)
dnsdist_conf() {
	cat <<LUA
setSecurityPollSuffix("")
setACL({"127.0.0.0/8"})
addDOHLocal("127.0.0.1:$1", "$work/cert.pem", "$work/key.pem", "/dns-query")
newServer({address="127.0.0.1:$nsdport", checkName="bench.test."})
LUA
	if [ "$2" -gt 0 ]; then
		echo "getPool(\"\"):setCache(newPacketCache($2))"
	fi
}

declare -A port pid
# start NAME KIND(dohfwd|dnsdist) MAX_ENTRIES
start() {
	local name=$1 kind=$2 entries=$3 p
	p=$(freeport)
	port[$name]=$p
	if [ "$kind" = dohfwd ]; then
		dohfwd_conf "$p" "$entries" >"$work/$name.yaml"
		"$dohfwd_bin" serve --config "$work/$name.yaml" 2>"$work/$name.log" &
	else
		dnsdist_conf "$p" "$entries" >"$work/$name.conf"
		dnsdist --supervised --disable-syslog -C "$work/$name.conf" >"$work/$name.log" 2>&1 </dev/null &
	fi
	pid[$name]=$!
	pids+=($!)
}
start dohfwd-cache dohfwd "$CACHE_ENTRIES"
start dohfwd-nocache dohfwd 0
start dnsdist-cache dnsdist "$CACHE_ENTRIES"
start dnsdist-nocache dnsdist 0
for name in "${!port[@]}"; do waitport "${port[$name]}"; done

# --- queries -----------------------------------------------------------------
same_path=$bench_same_path
# N distinct names (nI.bench.test A; the zone's wildcard answers them), one
# request path a line, split into $CONNS disjoint files.
write_distinct_paths "$N" >"$work/paths"
split -n "l/$CONNS" -d "$work/paths" "$work/part."

H2=(-H 'accept: application/dns-message')
# Parse h2load's summary: "finished in 1.2s, 16260.16 req/s, ..." and
# "requests: ... 20000 succeeded, ...".
status_of() { sed -n 's/^status codes: \([0-9]*\) 2xx.*/\1/p'; }

# Every request of a warm-up must succeed before the server is measured
# (dnsdist marks its backend up after its first health check). Bounded.
warm() { # port
	local out _
	for _ in $(seq 1 50); do
		out=$(timeout 20 h2load -n 200 -c 2 -m 4 "${H2[@]}" "https://127.0.0.1:$1$same_path" 2>&1 || true)
		[ "$(echo "$out" | status_of)" = 200 ] && return 0
		sleep 0.2
	done
	die "warm-up on port $1 never got 200 answers: $out"
}
for name in "${!port[@]}"; do warm "${port[$name]}"; done

# load_same PORT -> "REQ/S OK"
load_same() {
	local out
	out=$(timeout 600 h2load -n "$N" -c "$CONNS" -m "$STREAMS" "${H2[@]}" "https://127.0.0.1:$1$same_path" 2>&1) || true
	echo "$(echo "$out" | rps_of) $(echo "$out" | status_of)"
}
# load_distinct PORT -> "REQ/S OK": $CONNS h2load processes on disjoint names.
load_distinct() {
	local p=$1 f i t0 t1 ok=0 n
	local -a hp=()
	i=0
	for f in "$work"/part.*; do
		# h2load -i takes the scheme and authority from the first line.
		sed "1s|^|https://127.0.0.1:$p|" "$f" >"$work/uris.$i"
		i=$((i + 1))
	done
	t0=$(date +%s.%N)
	for ((i = 0; i < CONNS; i++)); do
		n=$(wc -l <"$work/uris.$i")
		timeout 600 h2load -n "$n" -c 1 -m "$STREAMS" "${H2[@]}" -i "$work/uris.$i" >"$work/h2load.$i" 2>&1 &
		hp+=($!)
	done
	for i in "${hp[@]}"; do wait "$i" || true; done
	t1=$(date +%s.%N)
	for ((i = 0; i < CONNS; i++)); do
		ok=$((ok + $(status_of <"$work/h2load.$i" || echo 0)))
	done
	echo "$(echo "$ok / ($t1 - $t0)" | bc -l) $ok"
}

vmhwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
# cpu_ticks PID: user + system CPU time of the process so far, in ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
clk_tck=$(getconf CLK_TCK)
# cpu_us TICKS OK: CPU microseconds per answered request.
cpu_us() { echo "if ($2 > 0) $1 * 1000000 / $clk_tck / $2 else 0" | bc -l; }

# latency PORT: median microseconds of one request at a time on one
# connection.
latency() {
	timeout 600 h2load -n "$LATENCY_N" -c 1 -m 1 "${H2[@]}" --log-file="$work/lat.log" \
		"https://127.0.0.1:$1$same_path" >/dev/null 2>&1 || true
	awk -F'\t' '$2 == 200 {print $3}' "$work/lat.log" | sort -n | awk '{v[NR] = $1} END {print (NR ? v[int((NR + 1) / 2)] : 0)}'
}

# --- runs --------------------------------------------------------------------
log "load: N=$N, $CONNS connections x $STREAMS streams, HTTP/2 over TLS; dohfwd log level $LOG_LEVEL"
results=()
for cache in cache nocache; do
	for kind in same distinct; do
		d=dohfwd-$cache s=dnsdist-$cache
		perfpid=""
		if [ -n "$PERF_DIR" ] && [ "$cache-$kind" = "$PERF_LOAD" ]; then
			mkdir -p "$PERF_DIR"
			perf record -F 999 -g -o "$PERF_DIR/perf.data" -p "${pid[$d]}" >/dev/null 2>&1 &
			perfpid=$!
			pids+=("$perfpid")
			sleep 0.5
		fi
		d_t0=$(cpu_ticks "${pid[$d]}")
		read -r d_rps d_ok <<<"$("load_$kind" "${port[$d]}")"
		d_cpu=$(cpu_us $(($(cpu_ticks "${pid[$d]}") - d_t0)) "${d_ok:-0}")
		if [ -n "$perfpid" ]; then
			kill -INT "$perfpid"
			wait "$perfpid" || true
			cp "$dohfwd_bin" "$PERF_DIR/dohfwd"
		fi
		s_t0=$(cpu_ticks "${pid[$s]}")
		read -r s_rps s_ok <<<"$("load_$kind" "${port[$s]}")"
		s_cpu=$(cpu_us $(($(cpu_ticks "${pid[$s]}") - s_t0)) "${s_ok:-0}")
		results+=("$cache $kind ${d_rps:-0} ${d_ok:-0} ${s_rps:-0} ${s_ok:-0} $d_cpu $s_cpu")
		if [ "$cache-$kind" = cache-same ]; then
			# The peak so far: start-up, warm-up and the cache-hit load.
			rss_same="$(vmhwm_kb "${pid[$d]}") $(vmhwm_kb "${pid[$s]}")"
		fi
		log "done: $cache $kind"
	done
done

d_lat=$(latency "${port[dohfwd-cache]}")
s_lat=$(latency "${port[dnsdist-cache]}")
log "done: latency"

if [ -n "$PROFILE_DIR" ]; then
	mkdir -p "$PROFILE_DIR"
	port[dohfwd-prof]=$(freeport)
	dohfwd_conf "${port[dohfwd-prof]}" "$CACHE_ENTRIES" >"$work/dohfwd-prof.yaml"
	DOHFWD_SERVER_CPUPROFILE="$PROFILE_DIR/cpu.pprof" "$dohfwd_bin" serve --config "$work/dohfwd-prof.yaml" 2>"$work/dohfwd-prof.log" &
	pid[dohfwd-prof]=$!
	pids+=($!)
	waitport "${port[dohfwd-prof]}"
	warm "${port[dohfwd-prof]}"
	N=$PROFILE_N load_same "${port[dohfwd-prof]}" >/dev/null
	kill -TERM "${pid[dohfwd-prof]}"
	wait "${pid[dohfwd-prof]}" || true
	cp "$dohfwd_bin" "$PROFILE_DIR/dohfwd"
	log "done: profile"
fi

# --- table -------------------------------------------------------------------
echo
printf '%-10s %-9s %12s %12s %7s %18s %12s %12s %7s\n' cache names "dohfwd r/s" "dnsdist r/s" ratio "200s (d / s)" \
	"dohfwd us" "dnsdist us" ratio
for r in "${results[@]}"; do
	read -r cache kind d_rps d_ok s_rps s_ok d_cpu s_cpu <<<"$r"
	ratio=$(echo "if ($s_rps > 0) $d_rps / $s_rps else 0" | bc -l)
	cratio=$(echo "if ($s_cpu > 0) $d_cpu / $s_cpu else 0" | bc -l)
	[ "$cache" = cache ] && cache="on ($CACHE_ENTRIES)" || cache=off
	printf '%-10s %-9s %12.0f %12.0f %7.2f %18s %12.1f %12.1f %7.2f\n' "${cache%% *}" "$kind" "$d_rps" "$s_rps" "$ratio" \
		"$d_ok / $s_ok" "$d_cpu" "$s_cpu" "$cratio"
done
echo "(us: CPU microseconds per answered request, user + system)"
echo
printf 'one connection, one stream, cache on, same name: median latency dohfwd %s us, dnsdist %s us, ratio %.2f\n' \
	"$d_lat" "$s_lat" "$(echo "if ($s_lat > 0) $d_lat / $s_lat else 0" | bc -l)"
echo
read -r d_kb s_kb <<<"$rss_same"
printf 'peak RSS after the cache-hit load (cache on, same name): dohfwd %.1f MiB, dnsdist %.1f MiB, ratio %.2f\n' \
	"$(echo "$d_kb / 1024" | bc -l)" "$(echo "$s_kb / 1024" | bc -l)" "$(echo "$d_kb / $s_kb" | bc -l)"
echo "peak RSS (VmHWM) after the runs:"
for c in cache nocache; do
	d_kb=$(vmhwm_kb "${pid[dohfwd-$c]}")
	s_kb=$(vmhwm_kb "${pid[dnsdist-$c]}")
	printf '  cache %-3s  dohfwd %7.1f MiB   dnsdist %7.1f MiB   ratio %.2f\n' \
		"$([ "$c" = cache ] && echo on || echo off)" "$(echo "$d_kb / 1024" | bc -l)" "$(echo "$s_kb / 1024" | bc -l)" "$(echo "$d_kb / $s_kb" | bc -l)"
done
echo "($N requests per load per server; each 200s column should read $N)"
if [ -n "$PROFILE_DIR" ]; then
	echo "profile: go tool pprof -top $PROFILE_DIR/dohfwd $PROFILE_DIR/cpu.pprof"
fi
if [ -n "$PERF_DIR" ]; then
	echo "profile: perf report -i $PERF_DIR/perf.data --no-children --sort symbol"
fi
