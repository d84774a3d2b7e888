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
#        nocache-same or nocache-distinct (the default); BASE_REV=REV also
#        builds dohfwd at git revision REV and loads it in the same run, on
#        the same configuration, for a "dohfwd / base" ratio (the cost of a
#        change); OPS_OFF=1 adds dohfwd with listen.server_timing and
#        listen.trace_context off, for a "dohfwd / ops-off" ratio; both
#        also compare CPU per request (from /proc/PID/stat), steadier than
#        req/s on a shared machine; ROUNDS (1) repeats those comparisons;
#        LOADS="cache-same nocache-distinct" runs only those loads;
#        OPS_OFF_KEYS=", trace_context: false" changes what ops-off turns off.
# Installs dnsdist and nghttp2-client (h2load) with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

N=${N:-30000}
CACHE_ENTRIES=${CACHE_ENTRIES:-100000}
LOG_LEVEL=${LOG_LEVEL:-error}
PERF_DIR=${PERF_DIR:-}
PERF_LOAD=${PERF_LOAD:-nocache-distinct}
BASE_REV=${BASE_REV:-}
OPS_OFF=${OPS_OFF:-}
ROUNDS=${ROUNDS:-1}
LOADS=${LOADS:-}
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
log "building dohfwd (make build)"
make -s build >/dev/null
dohfwd_bin=bin/dohfwd
if [ -n "$PERF_DIR" ]; then
	# bin/dohfwd is stripped (-s -w): perf needs the symbol table.
	dohfwd_bin=$work/dohfwd-syms
	CGO_ENABLED=0 go build -trimpath -o "$dohfwd_bin" ./cmd/dohfwd
fi

base_bin=""
if [ -n "$BASE_REV" ]; then
	log "building dohfwd at $BASE_REV"
	mkdir -p "$work/base-src"
	git archive "$BASE_REV" | tar -x -C "$work/base-src"
	base_bin=$work/dohfwd-base
	(cd "$work/base-src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$base_bin" ./cmd/dohfwd)
fi

# --- upstream: one nsd, rate limiting off ----------------------------------
nsdport=$(freeport)
start_bench_nsd "$nsdport"

# --- certificate for 127.0.0.1 ---------------------------------------------
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
	-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
	-keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null

# --- servers: dohfwd and dnsdist, one of each with the cache on and off ---
# dohfwd_conf PORT MAX_ENTRIES [EXTRA_LISTEN_KEYS]
dohfwd_conf() {
	cat <<YAML
listen: {https: "127.0.0.1:$1", admin: ""$3}
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
# start NAME KIND(dohfwd|base|opsoff|dnsdist) MAX_ENTRIES
start() {
	local name=$1 kind=$2 entries=$3 p bin=$dohfwd_bin extra=""
	p=$(freeport)
	port[$name]=$p
	[ "$kind" = base ] && bin=$base_bin
	[ "$kind" = opsoff ] && extra=${OPS_OFF_KEYS:-", server_timing: false, trace_context: false"}
	if [ "$kind" != dnsdist ]; then
		dohfwd_conf "$p" "$entries" "$extra" >"$work/$name.yaml"
		"$bin" serve --config "$work/$name.yaml" 2>"$work/$name.log" &
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
if [ -n "$BASE_REV" ]; then
	start base-cache base "$CACHE_ENTRIES"
	start base-nocache base 0
fi
if [ -n "$OPS_OFF" ]; then
	start opsoff-cache opsoff "$CACHE_ENTRIES"
	start opsoff-nocache opsoff 0
fi
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

# cpu_ticks PID: user + system CPU of the process, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tick_hz=$(getconf CLK_TCK)

vmhwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

# --- runs --------------------------------------------------------------------
log "load: N=$N, $CONNS connections x $STREAMS streams, HTTP/2 over TLS; dohfwd log level $LOG_LEVEL"
results=()
compared=()
for cache in cache nocache; do
	for kind in same distinct; do
		if [ -n "$LOADS" ]; then
			case " $LOADS " in *" $cache-$kind "*) ;; *) continue ;; esac
		fi
		d=dohfwd-$cache s=dnsdist-$cache
		perfpid=""
		if [ -n "$PERF_DIR" ] && [ "$cache-$kind" = "$PERF_LOAD" ]; then
			mkdir -p "$PERF_DIR"
			perf record -F 999 -g -o "$PERF_DIR/perf.data" -p "${pid[$d]}" >/dev/null 2>&1 &
			perfpid=$!
			pids+=("$perfpid")
			sleep 0.5
		fi
		read -r d_rps d_ok <<<"$("load_$kind" "${port[$d]}")"
		if [ -n "$perfpid" ]; then
			kill -INT "$perfpid"
			wait "$perfpid" || true
			cp "$dohfwd_bin" "$PERF_DIR/dohfwd"
		fi
		read -r s_rps s_ok <<<"$("load_$kind" "${port[$s]}")"
		results+=("$cache $kind ${d_rps:-0} ${d_ok:-0} ${s_rps:-0} ${s_ok:-0}")
		for round in $(seq 1 "$ROUNDS"); do
			for other in base opsoff; do
				[ -n "${port[$other-$cache]:-}" ] || continue
				# dohfwd, the other dohfwd, dohfwd again: the ratio uses the
				# mean of dohfwd's two loads around the other's, so drift on
				# the machine weighs on both sides alike.
				c0=$(cpu_ticks "${pid[$d]}")
				read -r d1_rps _ <<<"$("load_$kind" "${port[$d]}")"
				c1=$(cpu_ticks "${pid[$d]}")
				o0=$(cpu_ticks "${pid[$other-$cache]}")
				read -r o_rps o_ok <<<"$("load_$kind" "${port[$other-$cache]}")"
				o1=$(cpu_ticks "${pid[$other-$cache]}")
				read -r d2_rps _ <<<"$("load_$kind" "${port[$d]}")"
				c2=$(cpu_ticks "${pid[$d]}")
				# CPU microseconds per request
				d_cpu=$(echo "($c2 - $c0) * 1000000 / $tick_hz / (2 * $N)" | bc -l)
				o_cpu=$(echo "($o1 - $o0) * 1000000 / $tick_hz / $N" | bc -l)
				compared+=("$other $cache $kind $(echo "(${d1_rps:-0} + ${d2_rps:-0}) / 2" | bc -l) ${o_rps:-0} ${o_ok:-0} $d_cpu $o_cpu")
			done
		done
		log "done: $cache $kind"
	done
done

# --- table -------------------------------------------------------------------
echo
printf '%-10s %-9s %12s %12s %10s %18s\n' cache names "dohfwd r/s" "dnsdist r/s" ratio "200s (d / s)"
for r in "${results[@]}"; do
	read -r cache kind d_rps d_ok s_rps s_ok <<<"$r"
	ratio=$(echo "if ($s_rps > 0) $d_rps / $s_rps else 0" | bc -l)
	[ "$cache" = cache ] && cache="on ($CACHE_ENTRIES)" || cache=off
	printf '%-10s %-9s %12.0f %12.0f %10.2f %18s\n' "${cache%% *}" "$kind" "$d_rps" "$s_rps" "$ratio" "$d_ok / $s_ok"
done
if [ ${#compared[@]} -gt 0 ]; then
	echo
	echo "dohfwd against itself (base: dohfwd at $BASE_REV; ops-off: server_timing and trace_context off):"
	printf '%-8s %-8s %-9s %12s %12s %8s %14s %14s %8s %8s\n' other cache names "dohfwd r/s" "other r/s" ratio \
		"dohfwd cpu/req" "other cpu/req" "ratio" "200s"
	for r in "${compared[@]}"; do
		read -r other cache kind d_rps o_rps o_ok d_cpu o_cpu <<<"$r"
		ratio=$(echo "if ($o_rps > 0) $d_rps / $o_rps else 0" | bc -l)
		cratio=$(echo "if ($o_cpu > 0) $d_cpu / $o_cpu else 0" | bc -l)
		printf '%-8s %-8s %-9s %12.0f %12.0f %8.3f %12.1fus %12.1fus %8.3f %8s\n' "$other" "$cache" "$kind" "$d_rps" "$o_rps" "$ratio" \
			"$d_cpu" "$o_cpu" "$cratio" "$o_ok"
	done
fi
echo
echo "peak RSS (VmHWM) after the runs:"
for c in cache nocache; do
	d_kb=$(vmhwm_kb "${pid[dohfwd-$c]}")
	s_kb=$(vmhwm_kb "${pid[dnsdist-$c]}")
	printf '  cache %-3s  dohfwd %7.1f MiB   dnsdist %7.1f MiB   ratio %.2f\n' \
		"$([ "$c" = cache ] && echo on || echo off)" "$(echo "$d_kb / 1024" | bc -l)" "$(echo "$s_kb / 1024" | bc -l)" "$(echo "$d_kb / $s_kb" | bc -l)"
done
echo "($N requests per load per server; each 200s column should read $N)"
if [ -n "$PERF_DIR" ]; then
	echo "profile: perf report -i $PERF_DIR/perf.data --no-children --sort symbol"
fi
