#!/usr/bin/env bash
# edge-ab.sh ROUNDS N: serve, base edge and new edge in turns, one load kind per call (from the
# lead's /work/notes/s5-edgeab.sh; summary: python3 /work/notes/s5-edgeab-sum.py OUT).
# Env: CACHE (0) max_entries; LOAD same|distinct|single; SERVE BASE_EDGE BASE_MOD NEW_EDGE NEW_MOD binaries;
# TCP=1 runs the edges' engines TCP-only (dohfwd-edge -tcp-only, as on Workers: both edges must
# have the flag, e.g. the same binary with the two modules); serve stays on UDP (it has no such option).
# NEW_FLAGS: more flags for the new edge only, e.g. NEW_FLAGS=-native-hits=false (every hit in the module).
# Prints per round: name req/s cpu-us/request mean-latency-us (distinct: no latency; 4 h2load on disjoint quarters, session 7)
set -euo pipefail
cd "${REPO:-/work/main}" # for scripts/bench-lib.sh
R=${1:-5} N=${2:-20000} CACHE=${CACHE:-0} LOAD=${LOAD:-distinct}
work=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
. scripts/bench-lib.sh
dnsport=$(freeport); start_bench_nsd "$dnsport"
conf() { cat <<YAML
listen: {https: "127.0.0.1:$1", admin: ""}
scopes:
  - {name: bench, default_route: true, servers: ["127.0.0.1:$dnsport"]}
fallback_servers: []
cache: {max_entries: $CACHE}
log: {level: error}
YAML
}
declare -A port pid
start() { local name=$1; shift; local p; p=$(freeport); port[$name]=$p; conf "$p" >"$work/$name.yaml"; "$@" --config "$work/$name.yaml" 2>"$work/$name.log" & pid[$name]=$!; pids+=($!); }
start serve "$SERVE" serve
tcp=(); [ -n "${TCP:-}" ] && tcp=(-tcp-only)
start base "$BASE_EDGE" --module "$BASE_MOD" --instances 1 "${tcp[@]}"
read -ra newflags <<<"${NEW_FLAGS:-}"
start new "$NEW_EDGE" --module "$NEW_MOD" --instances 1 "${tcp[@]}" "${newflags[@]}"
write_distinct_paths $((N * R)) >"$work/paths"
for n in serve base new; do waitport "${port[$n]}"; h2load -n 500 -c 2 -m 4 -H 'accept: application/dns-message' "https://127.0.0.1:${port[$n]}$bench_same_path" >/dev/null 2>&1; done
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
for r in $(seq "$R"); do
  for n in serve base new; do
    c0=$(cpu "${pid[$n]}")
    case $LOAD in
    same) out=$(h2load -n "$N" -c 4 -m 10 -H 'accept: application/dns-message' "https://127.0.0.1:${port[$n]}$bench_same_path" 2>&1); k=$N ;;
    single) k=$((N / 10)); out=$(h2load -n "$k" -c 1 -m 1 -H 'accept: application/dns-message' "https://127.0.0.1:${port[$n]}$bench_same_path" 2>&1) ;;
    distinct)
      # names of this round only, fresh for every server (cache off: all go upstream)
      # in 4 disjoint quarters, one h2load (1 connection x 10 streams) each: with one h2load -c 4 -i
      # every connection walks the same list and about half the questions join one in flight
      sed -n "$(( (r-1)*N + 1 )),$(( r*N ))p" "$work/paths" >"$work/round"; rm -f "$work"/q.*; split -n l/4 -d "$work/round" "$work/q."
      t0=$(date +%s.%N); hp=()
      for f in "$work"/q.??; do sed "1s|^|https://127.0.0.1:${port[$n]}|" "$f" >"$f.u"; h2load -n "$(wc -l <"$f")" -c 1 -m 10 -H 'accept: application/dns-message' -i "$f.u" >"$f.out" 2>&1 & hp+=($!); done
      for p in "${hp[@]}"; do wait "$p" || true; done; t1=$(date +%s.%N)
      okn=$(cat "$work"/q.??.out | sed -n 's/.*requests: .* \([0-9]*\) succeeded.*/\1/p' | awk '{s+=$1} END {print s}')
      out="finished in x, $(echo "$okn / ($t1 - $t0)" | bc -l) req/s"; k=$N ;;
    esac
    c1=$(cpu "${pid[$n]}")
    rps=$(echo "$out" | sed -n 's/^finished in .*, \([0-9.]*\) req\/s.*/\1/p')
    lat=$(echo "$out" | sed -n 's/^time for request: *[^ ]* *[^ ]* *\([0-9.]*[mu]*s\).*/\1/p' | head -1)
    echo "$r $n $rps $(echo "($c1-$c0)*1000000/$tck/$k" | bc -l | cut -c1-6) $lat"
  done
done
