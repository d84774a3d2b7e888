#!/usr/bin/env bash
# Figures for the edge build (edge/README.md), all from one run on one machine:
#   1. requests per second through `dohfwd-edge` (the module under wazero)
#      against `dohfwd serve`, same upstream (nsd on loopback), same load;
#   2. the latency each adds per request (one client, one stream);
#   3. per-request latency of the module under workerd (TCP upstream),
#      misses (cache off) and hits (cache on), one stream;
#   4. the memory of `dohfwd-edge` with 4 096 questions in flight (a silent
#      upstream holds them), beside `dohfwd serve` (and BASELINE) under the
#      same load.
# The cache is off, so every request goes upstream through the engine.
# Two loads: the same name repeated (where one engine shares one upstream
# question among concurrent identical ones: serve, and the edge host's one
# instance), and distinct names (no sharing). A third load repeats the name
# with the cache on (CACHE_ENTRIES, the same for every server, as operators
# run it): after the first, every request is a cache hit.
# Usage: scripts/bench-edge.sh [REQUESTS]   (default 20000)
# Env: INSTANCES (1: one engine for the host); CACHE_ENTRIES (100000, the
# default cache size) and HITS_N (3 x REQUESTS) for the cache-on load, which
# also reports each server's CPU per request (steadier than req/s);
# BASELINE=path/to/another/dohfwd-edge also measures it
# `edge` in the same run (before/after figures), BASELINE_MODULE its module,
# BASELINE_WORKERS=dir another checkout's edge/workers (its glue under
# workerd, with BASELINE_MODULE); WD_WARM, WD_ROUNDS, WD_N: the workerd
# one-stream runs (below); PROFILE_DIR=dir writes a
# CPU profile of the edge process there (go tool pprof dohfwd-edge edge.pprof).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

N=${1:-20000}
INSTANCES=${INSTANCES:-1}
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

need() { command -v "$1" >/dev/null || { echo "bench-edge: $1 is not installed (${2})" >&2; exit 1; }; }
need nsd "apt-get install nsd"
need h2load "apt-get install nghttp2-client"

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh

echo "building dohfwd and the module..."
go build -trimpath -o "$work/dohfwd" ./cmd/dohfwd
go build -trimpath -o "$work/dohfwd-edge" ./cmd/dohfwd-edge
make -s wasm >/dev/null
wasm=dist/dohfwd.wasm

# The upstream: nsd with one zone, rate limiting off.
dnsport=$(freeport)
start_bench_nsd "$dnsport"

CACHE_ENTRIES=${CACHE_ENTRIES:-100000}
HITS_N=${HITS_N:-$((3 * N))} # hits are quick: a longer load, steadier figures
config() { # https port [upstream port [cache entries]]
	cat <<YAML
listen: {https: "127.0.0.1:$1", admin: ""}
scopes:
  - {name: bench, default_route: true, servers: ["127.0.0.1:${2:-$dnsport}"]}
fallback_servers: []
cache: {max_entries: ${3:-0}}
log: {level: error}
YAML
}
serveport=$(freeport); edgeport=$(freeport); wdport=$(freeport); baseport=$(freeport)
config "$serveport" >"$work/serve.yaml"
config "$edgeport" >"$work/edge.yaml"
config "$baseport" >"$work/base.yaml"
"$work/dohfwd" serve --config "$work/serve.yaml" 2>"$work/serve.log" &
pids+=($!)
DOHFWD_CPUPROFILE=${PROFILE_DIR:+$PROFILE_DIR/edge.pprof} "$work/dohfwd-edge" --config "$work/edge.yaml" --module "$wasm" --instances "$INSTANCES" 2>"$work/edge.log" &
edgepid=$!
pids+=($edgepid)
if [ -n "${BASELINE:-}" ]; then
	"$BASELINE" --config "$work/base.yaml" --module "${BASELINE_MODULE:-$wasm}" --instances "${BASELINE_INSTANCES:-$INSTANCES}" 2>"$work/base.log" &
	pids+=($!)
	waitport "$baseport"
fi
waitport "$serveport"
waitport "$edgeport"
# The same three with the cache on, for the cache-hit load.
cserveport=$(freeport); cedgeport=$(freeport); cbaseport=$(freeport)
config "$cserveport" "$dnsport" "$CACHE_ENTRIES" >"$work/serve-cache.yaml"
config "$cedgeport" "$dnsport" "$CACHE_ENTRIES" >"$work/edge-cache.yaml"
config "$cbaseport" "$dnsport" "$CACHE_ENTRIES" >"$work/base-cache.yaml"
"$work/dohfwd" serve --config "$work/serve-cache.yaml" 2>"$work/serve-cache.log" &
cservepid=$!
pids+=($!)
"$work/dohfwd-edge" --config "$work/edge-cache.yaml" --module "$wasm" --instances "$INSTANCES" 2>"$work/edge-cache.log" &
cedgepid=$!
pids+=($!)
if [ -n "${BASELINE:-}" ]; then
	"$BASELINE" --config "$work/base-cache.yaml" --module "${BASELINE_MODULE:-$wasm}" --instances "${BASELINE_INSTANCES:-$INSTANCES}" 2>"$work/base-cache.log" &
	cbasepid=$!
	pids+=($!)
	waitport "$cbaseport"
fi
waitport "$cserveport"
waitport "$cedgeport"

# workerd with the glue and the same module; TCP to nsd. Two per glue:
# the cache off (every question goes upstream, a miss) and on (hits).
# start_workerd NAME GLUEDIR MODULE CACHE_ENTRIES starts one in
# $work/NAME and sets wd_port to its port. (Not called in a command
# substitution: its subshell would keep the process out of pids, and
# cleanup would leave it running.)
start_workerd() {
	local dir="$work/$1" port
	port=$(freeport)
	mkdir "$dir"
	cp "$2"/workerd.capnp "$2"/*.mjs "$dir/"
	cp "$3" "$dir/dohfwd.wasm"
	config 0 "$dnsport" "$4" >"$dir/dohfwd.yaml" # encoded for the module, as make wasm-workers does
	"$work/dohfwd-edge" -encode-config -config "$dir/dohfwd.yaml" >"$dir/dohfwd.config.json"
	(cd "$dir" && exec "$OLDPWD/edge/workers/node_modules/.bin/workerd" serve workerd.capnp --socket-addr "http=127.0.0.1:$port" >"$dir/workerd.log" 2>&1) &
	pids+=($!)
	waitport "$port"
	wd_port=$port
}
if [ -x edge/workers/node_modules/.bin/workerd ]; then
	start_workerd workers edge/workers "$wasm" 0
	wdport=$wd_port
	start_workerd workers-hit edge/workers "$wasm" "$CACHE_ENTRIES"
	wdhit=$wd_port
	# BASELINE_WORKERS=dir (another checkout's edge/workers) runs its glue
	# with BASELINE_MODULE beside it, for a before/after Workers figure.
	if [ -n "${BASELINE_WORKERS:-}" ]; then
		start_workerd workers-base "$BASELINE_WORKERS" "${BASELINE_MODULE:-$wasm}" 0
		wdbase=$wd_port
		start_workerd workers-base-hit "$BASELINE_WORKERS" "${BASELINE_MODULE:-$wasm}" "$CACHE_ENTRIES"
		wdbasehit=$wd_port
	fi
else
	wdport=""
	echo "!!! workerd is not installed (scripts/setup.d/40-workerd.sh): no Workers figure" >&2
fi

path=$bench_same_path
# N distinct names (nI.bench.test A, the zone's wildcard answers), one
# request path a line, in 4 disjoint parts: h2load -c 4 -i FILE has every
# connection walk FILE from its first line, so each name would be asked 4
# times at about the same moment, and about half the questions would join
# one already in flight rather than go upstream.
write_distinct_paths "$N" >"$work/paths"
split -n l/4 -d "$work/paths" "$work/part."

mean() { sed -n 's/^time for request: *[^ ]* *[^ ]* *\([0-9.]*[mu]*s\).*/\1/p' | head -1; }
ok() { sed -n 's/.*requests: .* \([0-9]*\) succeeded.*/\1/p'; }
to_us() { awk '{v=$1; if (v ~ /ms$/) {sub(/ms/,"",v); v*=1000} else if (v ~ /us$/) {sub(/us/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000000}; print v}'; }

warm() { h2load -n 200 -c 2 -m 4 -H 'accept: application/dns-message' "$1" >/dev/null 2>&1 || true; }
targets=("serve:$serveport" "edge:$edgeport")
[ -n "${BASELINE:-}" ] && targets+=("edge-baseline:$baseport")
ctargets=("serve:$cserveport" "edge:$cedgeport")
[ -n "${BASELINE:-}" ] && ctargets+=("edge-baseline:$cbaseport")
declare -A cpid=([$cserveport]=$cservepid [$cedgeport]=$cedgepid)
[ -n "${BASELINE:-}" ] && cpid[$cbaseport]=$cbasepid
for t in "${targets[@]}" "${ctargets[@]}"; do warm "https://127.0.0.1:${t#*:}$path"; done

load() { h2load -n "${2:-$N}" -c 4 -m 10 -H 'accept: application/dns-message' "$1" 2>&1; }
# cpu_ticks PID: the process's user+system time so far, in clock ticks.
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
# load_distinct PORT: 4 h2load processes at once (1 connection x 10
# streams each: the same shape as load), each on its own part of the names;
# prints h2load's two summary lines for the group: its successes over the
# group's wall time.
load_distinct() {
	local f i=0 n t0 t1 ok=0
	local -a hp=()
	t0=$(date +%s.%N)
	for f in "$work"/part.*; do
		# h2load -i takes the scheme and authority from the first line.
		sed "1s|^|https://127.0.0.1:$1|" "$f" >"$work/uris.$1.$i"
		h2load -n "$(wc -l <"$f")" -c 1 -m 10 -H 'accept: application/dns-message' -i "$work/uris.$1.$i" >"$work/h2load.$1.$i" 2>&1 &
		hp+=($!)
		i=$((i + 1))
	done
	for f in "${hp[@]}"; do wait "$f" || true; done
	t1=$(date +%s.%N)
	for f in "$work"/h2load."$1".*; do n=$(ok <"$f"); ok=$((ok + ${n:-0})); done
	echo "finished in $(echo "$t1 - $t0" | bc -l)s, $(echo "$ok / ($t1 - $t0)" | bc -l) req/s"
	echo "requests: $N total, $N started, $N done, $ok succeeded"
}
single() { h2load -n 2000 -c 1 -m 1 -H 'accept: application/dns-message' "$@" 2>&1; }

echo "load: $N requests, 4 connections x 10 streams, HTTP/2 over TLS; cache off unless said; nsd upstream over UDP"
for kind in same distinct hits; do
	case $kind in
	same) echo " same name, cache off (coalescing)" ;;
	distinct) echo " distinct names (4 h2load processes, each on its own quarter of the names)" ;;
	hits) echo " same name, cache on (hits; $CACHE_ENTRIES entries; $HITS_N requests; CPU of the server process)" ;;
	esac
	s_rps=""
	tl=("${targets[@]}")
	[ "$kind" = hits ] && tl=("${ctargets[@]}")
	for t in "${tl[@]}"; do
		name=${t%%:*}; port=${t#*:}
		case $kind in
		distinct) out=$(load_distinct "$port") ;;
		same) out=$(load "https://127.0.0.1:$port$path") ;;
		hits)
			c0=$(cpu_ticks "${cpid[$port]}")
			out=$(load "https://127.0.0.1:$port$path" "$HITS_N")
			c1=$(cpu_ticks "${cpid[$port]}")
			;;
		esac
		r=$(echo "$out" | rps_of)
		[ -z "$s_rps" ] && s_rps=$r
		if [ "$kind" = hits ]; then
			printf '  %-22s %8.0f req/s  (%s ok)  %.2f of serve  %6.1f us CPU/request\n' "dohfwd $name:" "$r" "$(echo "$out" | ok)" "$(echo "$r / $s_rps" | bc -l)" \
				"$(echo "($c1 - $c0) * 1000000 / $(getconf CLK_TCK) / $HITS_N" | bc -l)"
		else
			printf '  %-22s %8.0f req/s  (%s ok)  %.2f of serve\n' "dohfwd $name:" "$r" "$(echo "$out" | ok)" "$(echo "$r / $s_rps" | bc -l)"
		fi
	done
done

echo "latency: 2000 requests, 1 connection x 1 stream"
s_lat=$(single "https://127.0.0.1:$serveport$path" | mean | to_us)
e_lat=$(single "https://127.0.0.1:$edgeport$path" | mean | to_us)
printf '  dohfwd serve:            %8.0f us/request\n' "$s_lat"
printf '  dohfwd edge (wazero):    %8.0f us/request\n' "$e_lat"
printf '  added by the module:     %8.0f us/request (x%.2f)\n' "$(echo "$e_lat - $s_lat" | bc -l)" "$(echo "$e_lat / $s_lat" | bc -l)"
if [ -n "${BASELINE:-}" ]; then
	b_lat=$(single "https://127.0.0.1:$baseport$path" | mean | to_us)
	printf '  dohfwd edge-baseline:    %8.0f us/request (x%.2f)\n' "$b_lat" "$(echo "$b_lat / $s_lat" | bc -l)"
fi

if [ -n "${PROFILE_DIR:-}" ]; then
	kill -TERM "$edgepid"; wait "$edgepid" 2>/dev/null || true
	cp "$work/dohfwd-edge" "$PROFILE_DIR/dohfwd-edge"
	echo "profile: go tool pprof $PROFILE_DIR/dohfwd-edge $PROFILE_DIR/edge.pprof"
fi

# workerd, one stream: WD_WARM requests first (default 2000: an isolate's
# first thousands run much of the module as Liftoff code while V8
# compiles it), then WD_ROUNDS rounds (default 3) of WD_N (1000) requests
# per target, the targets in turn, the order reversed every other round
# (ABBA). Each figure is the median over the rounds: of each run's mean
# (us/request, as h2load reports it) and of each run's median (from
# h2load's per-request log; the mean carries the stalls of a shared
# machine). Misses (cache off: each question goes upstream over a new TCP
# connection) and hits (cache on, the same name).
wd_run() { # URL -> "mean median ok req/s" of one run
	local out
	rm -f "$work/wd.tsv"
	out=$(h2load --h1 -n "${WD_N:-1000}" -c 1 -m 1 --log-file "$work/wd.tsv" "$1" 2>&1)
	echo "$(echo "$out" | mean | to_us) $(awk '{print $3}' "$work/wd.tsv" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') $(echo "$out" | ok) $(echo "$out" | rps_of)"
}
median_of() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
if [ -n "$wdport" ]; then
	wdt=("miss:$wdport" "hit:$wdhit")
	[ -n "${wdbase:-}" ] && wdt+=("basemiss:$wdbase" "basehit:$wdbasehit")
	for t in "${wdt[@]}"; do h2load --h1 -n "${WD_WARM:-2000}" -c 1 -m 1 "http://127.0.0.1:${t#*:}$path" >/dev/null 2>&1 || true; done
	for r in $(seq 1 "${WD_ROUNDS:-3}"); do
		order=("${wdt[@]}")
		if [ $((r % 2)) = 0 ]; then order=(); for ((i = ${#wdt[@]} - 1; i >= 0; i--)); do order+=("${wdt[$i]}"); done; fi
		for t in "${order[@]}"; do wd_run "http://127.0.0.1:${t#*:}$path" >>"$work/wd.${t%%:*}"; done
	done
	wd() { awk "{print \$$2}" "$work/wd.$1" | median_of; } # target column: 1 mean, 2 median, 3 ok, 4 req/s
	wd_ok() { awk '{n += $3} END {print n}' "$work/wd.$1"; }
	w_lat=$(wd miss 1)
	printf '  workerd (TCP upstream, HTTP/1.1, no TLS): %8.0f us/request, %s req/s (%s ok)\n' "$w_lat" "$(wd miss 4)" "$(wd_ok miss)"
	printf '  workerd / dohfwd serve latency:  x%.2f\n' "$(echo "$w_lat / $s_lat" | bc -l)"
	printf '  workerd median:                    %8.0f us/request; hits (cache on) %.0f us median, %.0f us mean (%s ok)\n' "$(wd miss 2)" "$(wd hit 2)" "$(wd hit 1)" "$(wd_ok hit)"
	if [ -n "${wdbase:-}" ]; then
		printf '  workerd baseline:                  %8.0f us/request (%s ok)\n' "$(wd basemiss 1)" "$(wd_ok basemiss)"
		printf '  workerd baseline median:           %8.0f us/request; hits (cache on) %.0f us median, %.0f us mean (%s ok)\n' "$(wd basemiss 2)" "$(wd basehit 2)" "$(wd basehit 1)" "$(wd_ok basehit)"
	fi
fi
# Memory with 4 096 questions in flight: a UDP port that never answers
# holds every question for its attempts (3 x 2 s); h2load keeps 64 x 64
# streams open; the resident set is read 3 s in, when all have arrived.
silent=$(freeport)
python3 -c "import socket,time; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(('127.0.0.1',$silent)); time.sleep(3600)" &
pids+=($!)
inflight() { # name binary-and-args...
	local name=$1 port; shift
	port=$(freeport)
	config "$port" "$silent" >"$work/$name-silent.yaml"
	"$@" --config "$work/$name-silent.yaml" 2>"$work/$name-silent.log" &
	local pid=$!
	pids+=($pid)
	waitport "$port"
	local before
	before=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
	h2load -n 4096 -c 64 -m 64 -H 'accept: application/dns-message' -i <({ echo "https://127.0.0.1:$port$(head -1 "$work/paths")"; sed -n '2,4096p' "$work/paths"; }) >"$work/$name-silent.h2load" 2>&1 &
	local h2=$!
	sleep 3
	local during
	during=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
	wait $h2 || true
	printf '  %-22s %6.1f MiB resident idle, %6.1f MiB with 4096 in flight (+%.1f)\n' "$name:" "$(echo "$before/1024" | bc -l)" "$(echo "$during/1024" | bc -l)" "$(echo "($during-$before)/1024" | bc -l)"
	kill "$pid"
}
echo "memory: 4096 questions in flight to a silent upstream"
inflight "dohfwd serve" "$work/dohfwd" serve
inflight "dohfwd edge" "$work/dohfwd-edge" --module "$wasm" --instances "$INSTANCES"
if [ -n "${BASELINE:-}" ]; then
	inflight "dohfwd edge-baseline" "$BASELINE" --module "${BASELINE_MODULE:-$wasm}" --instances "${BASELINE_INSTANCES:-$INSTANCES}"
fi

echo "module: $(stat -c %s $wasm) bytes raw, $(gzip -9c $wasm | wc -c) bytes gzipped"
