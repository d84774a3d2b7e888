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
# Besides req/s, each load reports the CPU each server spent per request
# (its threads' time from /proc/PID/task/*/schedstat over the load, in
# nanoseconds). After the loads:
#   - one stream (h2load -c 1 -m 1): median latency per request, cache off
#     with distinct names (the forwarding path) and cache on, one name;
#   - info against warn: a third dohfwd (cache off, log level info: an
#     attempt and a question event per question, as operators run it)
#     under the cache-off distinct load, next to the one at LOG_LEVEL;
#   - file descriptors each dohfwd holds at rest after the loads.
#
# Last, the forwarding goals (miss and hit req/s and CPU per request,
# the one-stream miss p50) as ratios to dnsdist with the goal beside
# each, met or not: printed, never asserted (`make bench` runs this).
#
# Usage: scripts/bench-doh.sh
# Env:   N (30000) requests per load; CACHE_ENTRIES (100000) cache size for
#        the "cache on" loads; LOG_LEVEL (warn) dohfwd's log level (info
#        logs two events per question); LAT_N (2000) requests of the
#        one-stream latency runs; PERF_DIR=dir records a perf CPU
#        profile of dohfwd (unstripped build) during one load into
#        dir/perf.data; PERF_LOAD picks it: cache-same, cache-distinct,
#        nocache-same or nocache-distinct (the default); BASE_REV=REV also
#        builds dohfwd at git revision REV and loads it in the same run, on
#        the same configuration, for a "dohfwd / base" ratio (the cost of a
#        change); OPS_OFF=1 adds dohfwd with listen.server_timing and
#        listen.trace_context off, for a "dohfwd / ops-off" ratio; both
#        also compare CPU per request (from schedstat), steadier than
#        req/s on a shared machine; ROUNDS (1) repeats those comparisons
#        and the info-against-warn one;
#        LOADS="cache-same nocache-distinct" runs only those loads;
#        OPS_OFF_KEYS=", trace_context: false" changes what ops-off turns off;
#        PEER_ROUNDS=1 also compares dohfwd with dnsdist that way, ROUNDS
#        times per load (dohfwd, dnsdist, dohfwd: drift on the shared
#        machine weighs on both), beside the one-shot table;
#        PIN=1 keeps the load generator (h2load) on CPU 0 and the servers
#        and nsd on CPU 1 (taskset), so neither server's threads compete
#        with h2load and both get the same one CPU (dnsdist's threads and
#        dohfwd's Go scheduler alike); default: no pinning;
#        SYS_STATS=1 also reports, for each server's first cache-off
#        distinct load, what it costs the rest of the machine: nsd's CPU
#        per request (the upstream's share), the server's context switches
#        per request (all threads; voluntary/involuntary), the response
#        header bytes per response h2load received, and the CPUs' idle
#        time per request (both servers answer at one concurrency, so idle
#        time is latency the load could not hide); and what it costs the
#        client and the sockets: h2load's CPU per response (each h2load
#        under perf stat: task-clock), its receive system calls and
#        epoll_waits per response, the frame-header and control-frame
#        bytes per response (h2load's traffic total less header and data
#        bytes: 18 is two frame headers, HEADERS and DATA), and the
#        server's send system calls per response from a perf stat on its
#        pid: write() by size (< 64 bytes: an upstream UDP query, a lone
#        control frame or a pipe hand-off; larger: TLS records to the
#        client), writev, sendmsg, sendto, sendmmsg. Needs perf with
#        syscall tracepoints;
#        LEVEL_HUP=1 runs the info loads on the cache-off dohfwd itself,
#        its log.level switched by SIGHUP between loads (warn, info, info,
#        warn), so info and warn are the same process, memory and TLS
#        state: steadier than a second server;
#        LEVEL_SIDE=1 loads the info dohfwd and the one at LOG_LEVEL at
#        the same time instead (each with its own h2load processes on the
#        same names), twice a round: the machine's drift and the other
#        work on it weigh on both alike;
#        BASE_INFO=1 (with BASE_REV) runs each info-against-warn round
#        on base too, after dohfwd's in odd rounds and before it in even
#        ones, with its own info server:
#        both ratios per round, from one run;
#        CLIENT_EDNS=1 sends every query with an EDNS0 OPT record, as
#        browsers do (scripts/bench-lib.sh): dnsdist then passes an OPT
#        upstream too, as dohfwd always does, so nsd's work is alike.
# Installs dnsdist and nghttp2-client (h2load) with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

N=${N:-30000}
CACHE_ENTRIES=${CACHE_ENTRIES:-100000}
LOG_LEVEL=${LOG_LEVEL:-warn}
LAT_N=${LAT_N:-2000}
PERF_DIR=${PERF_DIR:-}
PERF_LOAD=${PERF_LOAD:-nocache-distinct}
BASE_REV=${BASE_REV:-}
OPS_OFF=${OPS_OFF:-}
PEER_ROUNDS=${PEER_ROUNDS:-}
PIN=${PIN:-}
LEVEL_HUP=${LEVEL_HUP:-}
LEVEL_SIDE=${LEVEL_SIDE:-}
BASE_INFO=${BASE_INFO:-}
SYS_STATS=${SYS_STATS:-}
# gen and serve prefix the load generator's and the servers' commands.
gen=() serve=()
if [ -n "$PIN" ]; then
	gen=(taskset -c 0) serve=(taskset -c 1)
	BENCH_SERVE_PREFIX="taskset -c 1" # nsd, in bench-lib.sh (sourced below)
fi
ROUNDS=${ROUNDS:-1}
LOADS=${LOADS:-}
CONNS=4
STREAMS=10

log() { echo "bench-doh: $*" >&2; }
die() {
	log "$*"
	exit 1
}
[ -z "$LEVEL_HUP" ] || [ -z "$LEVEL_SIDE" ] || die "LEVEL_HUP and LEVEL_SIDE exclude each other"

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
if [ -n "$SYS_STATS" ]; then
	perf stat -e syscalls:sys_enter_write -- true >/dev/null 2>&1 ||
		die "SYS_STATS needs perf with syscall tracepoints (apt-get install linux-perf; perf_event_paranoid, tracefs)"
fi

# --- scratch space and cleanup -----------------------------------------------
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_scratch

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
nsd_pid=${pids[-1]}

# --- certificate for 127.0.0.1 ---------------------------------------------
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
	-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
	-keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null

# --- servers: dohfwd and dnsdist, one of each with the cache on and off ---
# dohfwd_conf PORT MAX_ENTRIES [LEVEL] [EXTRA_LISTEN_KEYS]
dohfwd_conf() {
	cat <<YAML
listen: {https: "127.0.0.1:$1", admin: ""$4}
tls: {mode: files, cert_file: "$work/cert.pem", key_file: "$work/key.pem"}
scopes:
  - {name: bench, default_route: true, servers: ["127.0.0.1:$nsdport"]}
fallback_servers: []
cache: {max_entries: $2}
log: {level: ${3:-$LOG_LEVEL}, format: json}
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
# start NAME KIND(dohfwd|base|opsoff|dnsdist) MAX_ENTRIES [LEVEL]
start() {
	local name=$1 kind=$2 entries=$3 p bin=$dohfwd_bin extra=""
	p=$(freeport)
	port[$name]=$p
	[ "$kind" = base ] && bin=$base_bin
	[ "$kind" = opsoff ] && extra=${OPS_OFF_KEYS:-", server_timing: false, trace_context: false"}
	if [ "$kind" != dnsdist ]; then
		dohfwd_conf "$p" "$entries" "${4:-}" "$extra" >"$work/$name.yaml"
		"${serve[@]}" "$bin" serve --config "$work/$name.yaml" 2>"$work/$name.log" &
	else
		dnsdist_conf "$p" "$entries" >"$work/$name.conf"
		"${serve[@]}" dnsdist --supervised --disable-syslog -C "$work/$name.conf" >"$work/$name.log" 2>&1 </dev/null &
	fi
	pid[$name]=$!
	pids+=($!)
}
start dohfwd-cache dohfwd "$CACHE_ENTRIES"
start dohfwd-nocache dohfwd 0
start dnsdist-cache dnsdist "$CACHE_ENTRIES"
start dnsdist-nocache dnsdist 0
# info is the dohfwd the info loads go to: its own server, or with
# LEVEL_HUP the cache-off one with its level switched by set_level.
info=dohfwd-info
dohfwds=(dohfwd-cache dohfwd-nocache)
if [ -n "$LEVEL_HUP" ]; then
	info=dohfwd-nocache
else
	start dohfwd-info dohfwd 0 info
	dohfwds+=(dohfwd-info)
fi
# set_level NAME LEVEL: reload dohfwd NAME at log level LEVEL.
set_level() {
	[ -n "$LEVEL_HUP" ] || return 0
	sed -i "s/^log: {level: [a-z]*/log: {level: $2/" "$work/$1.yaml"
	kill -HUP "${pid[$1]}"
	sleep 0.3
}
if [ -n "$BASE_REV" ]; then
	start base-cache base "$CACHE_ENTRIES"
	start base-nocache base 0
fi
base_info=""
if [ -n "$BASE_INFO" ]; then
	[ -n "$BASE_REV" ] || die "BASE_INFO needs BASE_REV"
	base_info=base-nocache
	if [ -z "$LEVEL_HUP" ]; then
		base_info=base-info
		start base-info base 0 info
	fi
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
		out=$(timeout 20 "${gen[@]}" h2load -n 200 -c 2 -m 4 "${H2[@]}" "https://127.0.0.1:$1$same_path" 2>&1 || true)
		[ "$(echo "$out" | status_of)" = 200 ] && return 0
		sleep 0.2
	done
	die "warm-up on port $1 never got 200 answers: $out"
}
for name in "${!port[@]}"; do warm "${port[$name]}"; done

# load_same PORT -> "REQ/S OK"
load_same() {
	local out
	out=$(timeout 600 "${gen[@]}" h2load -n "$N" -c "$CONNS" -m "$STREAMS" "${H2[@]}" "https://127.0.0.1:$1$same_path" 2>&1) || true
	echo "$(echo "$out" | rps_of) $(echo "$out" | status_of)"
}
# load_distinct PORT [TAG] -> "REQ/S OK": $CONNS h2load processes on
# disjoint names (TAG names their files, for loads at the same time).
load_distinct() {
	local p=$1 tag=${2:+-$2} f i t0 t1 ok=0 n
	local -a hp=()
	i=0
	for f in "$work"/part.*; do
		# h2load -i takes the scheme and authority from the first line.
		sed "1s|^|https://127.0.0.1:$p|" "$f" >"$work/uris$tag.$i"
		i=$((i + 1))
	done
	t0=$(date +%s.%N)
	for ((i = 0; i < CONNS; i++)); do
		n=$(wc -l <"$work/uris$tag.$i")
		# shellcheck disable=SC2086 # $cli_stat: words of a perf stat prefix
		timeout 600 "${gen[@]}" ${cli_stat:+$cli_stat -o "$work/clistat.$i"} h2load -n "$n" -c 1 -m "$STREAMS" "${H2[@]}" -i "$work/uris$tag.$i" >"$work/h2load$tag.$i" 2>&1 &
		hp+=($!)
	done
	for i in "${hp[@]}"; do wait "$i" || true; done
	t1=$(date +%s.%N)
	for ((i = 0; i < CONNS; i++)); do
		ok=$((ok + $(status_of <"$work/h2load$tag.$i" || echo 0)))
	done
	echo "$(echo "$ok / ($t1 - $t0)" | bc -l) $ok"
}

vmhwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
# cpu_time PID: CPU of the process's threads so far, in units of cpu_hz:
# nanoseconds from schedstat (cpu_ns, below). /proc/PID/stat counts in
# clock ticks (10 ms): a load of 20 000 cache-off requests is some 40 of
# them, so a reading was off by up to 2.5 %. (A thread that exits during
# a load takes its time with it; the servers keep theirs.)
cpu_time() { cpu_ns "$1"; }
cpu_hz=1000000000
hz=$(getconf CLK_TCK)
# measured NAME LOAD -> "REQ/S OK CPU_US_PER_OK": LOAD run against NAME with
# NAME's CPU read around it.
measured() {
	local name=$1 load=$2 c0 c1 rps ok
	c0=$(cpu_time "${pid[$name]}")
	read -r rps ok <<<"$("load_$load" "${port[$name]}")"
	c1=$(cpu_time "${pid[$name]}")
	echo "${rps:-0} ${ok:-0} $(echo "if (${ok:-0} > 0) ($c1 - $c0) * 1000000 / $cpu_hz / $ok else 0" | bc -l)"
}
# side_measured A B -> "REQ/S CPU_US_PER_OK" of A, then of B: the
# distinct load against both at the same time (LEVEL_SIDE).
side_measured() {
	local a=$1 b=$2 a0 a1 b0 b1 ra oka rb okb pa
	a0=$(cpu_time "${pid[$a]}")
	b0=$(cpu_time "${pid[$b]}")
	load_distinct "${port[$a]}" a >"$work/side.a" &
	pa=$!
	load_distinct "${port[$b]}" b >"$work/side.b"
	wait "$pa" || true
	a1=$(cpu_time "${pid[$a]}")
	b1=$(cpu_time "${pid[$b]}")
	read -r ra oka <"$work/side.a"
	read -r rb okb <"$work/side.b"
	echo "${ra:-0} $(echo "if (${oka:-0} > 0) ($a1 - $a0) * 1000000 / $cpu_hz / $oka else 0" | bc -l)" \
		"${rb:-0} $(echo "if (${okb:-0} > 0) ($b1 - $b0) * 1000000 / $cpu_hz / $okb else 0" | bc -l)"
}
# info_warn INFO WARN [FIRST_WARN] -> "I1_RPS I1_CPU I2_RPS I2_CPU W1_RPS
# W1_CPU W2_RPS W2_CPU": one round of info against warn: warn, info, info,
# warn (FIRST_WARN, "REQ/S CPU", stands for the first warn load when it
# was just measured), or with LEVEL_SIDE both at once, twice.
info_warn() {
	local i=$1 w=$2 i1r i1c i2r i2c w1r w1c w2r w2c
	if [ -n "$LEVEL_SIDE" ]; then
		read -r i1r i1c w1r w1c <<<"$(side_measured "$i" "$w")"
		read -r i2r i2c w2r w2c <<<"$(side_measured "$i" "$w")"
	else
		if [ -n "${3:-}" ]; then
			read -r w1r w1c <<<"$3"
		else
			read -r w1r _ w1c <<<"$(measured "$w" distinct)"
		fi
		set_level "$i" info
		read -r i1r _ i1c <<<"$(measured "$i" distinct)"
		read -r i2r _ i2c <<<"$(measured "$i" distinct)"
		set_level "$i" "$LOG_LEVEL"
		read -r w2r _ w2c <<<"$(measured "$w" distinct)"
	fi
	echo "$i1r $i1c $i2r $i2c $w1r $w1c $w2r $w2c"
}
# cpu_ns PID...: CPU time of the processes' threads so far, in
# nanoseconds (schedstat: finer than the clock ticks of /proc/PID/stat).
cpu_ns() {
	local p
	for p in "$@"; do cat /proc/"$p"/task/*/schedstat 2>/dev/null; done | awk '{s += $1} END {printf "%.0f\n", s}'
}
# proc_tree PID: PID and its descendants (nsd runs as three processes, the
# server a grandchild of the one started).
proc_tree() {
	local c
	echo "$1"
	for c in $(pgrep -P "$1" || true); do proc_tree "$c"; done
}
# switches PID: voluntary and involuntary context switches of its threads.
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt/ {v += $2} /^nonvoluntary_ctxt/ {n += $2} END {print v + 0, n + 0}'; }
# idle_ticks: idle time of all CPUs so far, in clock ticks.
idle_ticks() { awk '/^cpu / {print $5 + $6}' /proc/stat; }
# The client's side (SYS_STATS): each h2load runs under perf stat, which
# counts its CPU (task-clock) and its receive system calls; the server's
# send system calls are counted by a perf stat on its pid, writes by size
# (a response record is >= 64 bytes; an upstream UDP query or a lone
# control frame's record is smaller).
cli_events=task-clock,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_recvmsg,syscalls:sys_enter_readv,syscalls:sys_enter_epoll_wait
srv_events=(-e syscalls:sys_enter_write --filter 'count < 64' -e syscalls:sys_enter_write --filter 'count >= 64 && count < 1024'
	-e syscalls:sys_enter_write --filter 'count >= 1024' -e syscalls:sys_enter_writev -e syscalls:sys_enter_sendmsg
	-e syscalls:sys_enter_sendto -e syscalls:sys_enter_sendmmsg)
# perf_sum FILE... EVENT: the sum of EVENT's counts over perf stat -x, files
# (the n-th occurrence of EVENT with n as EVENT#n, for the filtered ones).
perf_sum() {
	local ev=${*: -1}
	awk -F, -v ev="$ev" 'FNR == 1 {seen = 0} $3 ~ /^(task-clock|syscalls:)/ {
		k = $3; c[FILENAME, k]++; if (c[FILENAME, k] > 1) k = k "#" c[FILENAME, k]
		if (k == ev && $1 ~ /^[0-9.]+$/) s += $1 } END {printf "%.3f\n", s + 0}' "${@:1:$#-1}"
}
# sys_measured NAME -> measured's "REQ/S OK CPU_US_PER_OK", and the
# SYS_STATS line for NAME in $work/sys.NAME.
sys_measured() {
	local name=$1 n0 n1 v0 i0 v1 i1 q0 q1 out ok hdr tot dat sp f cli rd ep w1 w2 w3 wv sm st smm
	rm -f "$work"/clistat.*
	perf stat -x, -o "$work/srvstat.$name" "${srv_events[@]}" -p "${pid[$name]}" &
	sp=$!
	sleep 0.3
	n0=$(cpu_ns $(proc_tree "$nsd_pid"))
	read -r v0 i0 < <(switches "${pid[$name]}")
	q0=$(idle_ticks)
	out=$(cli_stat="perf stat -x, -e $cli_events" measured "$name" distinct)
	q1=$(idle_ticks)
	read -r v1 i1 < <(switches "${pid[$name]}")
	n1=$(cpu_ns $(proc_tree "$nsd_pid"))
	kill -INT "$sp"
	wait "$sp" || true
	ok=$(echo "$out" | awk '{print $2}')
	# h2load: "traffic: 3.46MB (3628079) total, 632.79KB (647973) headers
	# (space savings ...), 2.14MB (2240000) data": what is neither is frame
	# headers and control frames.
	hdr=$(cat "$work"/h2load.* | sed -n 's/^traffic:.* (\([0-9]*\)) headers.*/\1/p' | awk '{s += $1} END {print s + 0}')
	tot=$(cat "$work"/h2load.* | sed -n 's/^traffic:[^(]*(\([0-9]*\)) total.*/\1/p' | awk '{s += $1} END {print s + 0}')
	dat=$(cat "$work"/h2load.* | sed -n 's/^traffic:.* (\([0-9]*\)) data.*/\1/p' | awk '{s += $1} END {print s + 0}')
	f=("$work"/clistat.*)
	cli=$(perf_sum "${f[@]}" task-clock)
	rd=0
	for e in read recvfrom recvmsg readv; do rd=$(echo "$rd + $(perf_sum "${f[@]}" syscalls:sys_enter_$e)" | bc -l); done
	ep=$(perf_sum "${f[@]}" syscalls:sys_enter_epoll_wait)
	f=("$work/srvstat.$name")
	w1=$(perf_sum "${f[@]}" syscalls:sys_enter_write)
	w2=$(perf_sum "${f[@]}" 'syscalls:sys_enter_write#2')
	w3=$(perf_sum "${f[@]}" 'syscalls:sys_enter_write#3')
	wv=$(perf_sum "${f[@]}" syscalls:sys_enter_writev)
	sm=$(perf_sum "${f[@]}" syscalls:sys_enter_sendmsg)
	st=$(perf_sum "${f[@]}" syscalls:sys_enter_sendto)
	smm=$(perf_sum "${f[@]}" syscalls:sys_enter_sendmmsg)
	if [ "${ok:-0}" -gt 0 ]; then
		echo "$name $(echo "($n1 - $n0) / 1000 / $ok" | bc -l) $(echo "($v1 - $v0) / $ok" | bc -l) $(echo "($i1 - $i0) / $ok" | bc -l) $(echo "$hdr / $ok" | bc -l) $(echo "($q1 - $q0) * 1000000 / $hz / $ok" | bc -l)" \
			"$(echo "$cli * 1000 / $ok" | bc -l) $(echo "$rd / $ok" | bc -l) $(echo "$ep / $ok" | bc -l) $(echo "($tot - $hdr - $dat) / $ok" | bc -l)" \
			"$(for x in $w1 $w2 $w3 $wv $sm $st $smm; do echo "$x / $ok" | bc -l; done | tr '\n' ' ')" >"$work/sys.$name"
	fi
	echo "$out"
}
# median_us PORT URIFILE|PATH: one connection, one stream; the median
# microseconds per request from h2load's per-request log.
median_us() {
	local p=$1 target=$2 out
	out=$work/lat.$p
	if [ -f "$target" ]; then
		sed "1s|^|https://127.0.0.1:$p|" "$target" | head -n "$LAT_N" >"$work/lat-uris.$p"
		timeout 600 "${gen[@]}" h2load -n "$LAT_N" -c 1 -m 1 "${H2[@]}" -i "$work/lat-uris.$p" --log-file="$out" >/dev/null 2>&1 || true
	else
		timeout 600 "${gen[@]}" h2load -n "$LAT_N" -c 1 -m 1 "${H2[@]}" "https://127.0.0.1:$p$target" --log-file="$out" >/dev/null 2>&1 || true
	fi
	awk -F'\t' '$2 == 200 {print $3}' "$out" | sort -n | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print 0}'
}

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
		if [ -n "$SYS_STATS" ] && [ "$cache-$kind" = nocache-distinct ]; then
			read -r d_rps d_ok d_cpu <<<"$(sys_measured "$d")"
		else
			read -r d_rps d_ok d_cpu <<<"$(measured "$d" "$kind")"
		fi
		if [ -n "$perfpid" ]; then
			kill -INT "$perfpid"
			wait "$perfpid" || true
			cp "$dohfwd_bin" "$PERF_DIR/dohfwd"
		fi
		if [ -n "$SYS_STATS" ] && [ "$cache-$kind" = nocache-distinct ]; then
			read -r s_rps s_ok s_cpu <<<"$(sys_measured "$s")"
		else
			read -r s_rps s_ok s_cpu <<<"$(measured "$s" "$kind")"
		fi
		results+=("$cache $kind $d_rps $d_ok $s_rps $s_ok $d_cpu $s_cpu")
		for round in $(seq 1 "$ROUNDS"); do
			for other in base opsoff dnsdist; do
				[ -n "${port[$other-$cache]:-}" ] || continue
				[ "$other" != dnsdist ] || [ -n "$PEER_ROUNDS" ] || continue
				# dohfwd, the other dohfwd, dohfwd again: the ratio uses the
				# mean of dohfwd's two loads around the other's, so drift on
				# the machine weighs on both sides alike.
				c0=$(cpu_time "${pid[$d]}")
				read -r d1_rps _ <<<"$("load_$kind" "${port[$d]}")"
				c1=$(cpu_time "${pid[$d]}")
				o0=$(cpu_time "${pid[$other-$cache]}")
				read -r o_rps o_ok <<<"$("load_$kind" "${port[$other-$cache]}")"
				o1=$(cpu_time "${pid[$other-$cache]}")
				read -r d2_rps _ <<<"$("load_$kind" "${port[$d]}")"
				c2=$(cpu_time "${pid[$d]}")
				# CPU microseconds per request
				d_cpu2=$(echo "($c2 - $c0) * 1000000 / $cpu_hz / (2 * $N)" | bc -l)
				o_cpu=$(echo "($o1 - $o0) * 1000000 / $cpu_hz / $N" | bc -l)
				compared+=("$other $cache $kind $(echo "(${d1_rps:-0} + ${d2_rps:-0}) / 2" | bc -l) ${o_rps:-0} ${o_ok:-0} $d_cpu2 $o_cpu")
			done
		done
		log "done: $cache $kind"
		if [ "$cache-$kind" = nocache-distinct ]; then
			# warn, info, info, warn: drift of the machine cancels out
			# (LEVEL_SIDE: info and warn at once, twice). ROUNDS repeats
			# it (the first round's first warn load is the one above);
			# the figures are the means over all loads.
			i_rps=0 i_cpu=0 w_rps=0 w_cpu=0 iw_rounds=() iw_rps_rounds=() biw_rounds=() biw_rps_rounds=()
			for round in $(seq 1 "$ROUNDS"); do
				w1=""
				[ "$round" -gt 1 ] || w1="$d_rps $d_cpu"
				if [ -n "$BASE_INFO" ] && [ $((round % 2)) = 0 ]; then # base first
					read -r bi1_rps bi1_cpu bi2_rps bi2_cpu bw1_rps bw1_cpu bw2_rps bw2_cpu <<<"$(info_warn "$base_info" base-nocache "")"
				fi
				read -r i1_rps i1_cpu i2_rps i2_cpu d_rps d_cpu w2_rps w2_cpu <<<"$(info_warn "$info" "$d" "$w1")"
				i_rps=$(echo "$i_rps + ($i1_rps + $i2_rps) / 2 / $ROUNDS" | bc -l)
				i_cpu=$(echo "$i_cpu + ($i1_cpu + $i2_cpu) / 2 / $ROUNDS" | bc -l)
				w_rps=$(echo "$w_rps + ($d_rps + $w2_rps) / 2 / $ROUNDS" | bc -l)
				w_cpu=$(echo "$w_cpu + ($d_cpu + $w2_cpu) / 2 / $ROUNDS" | bc -l)
				iw_rounds+=("$(echo "if ($d_cpu + $w2_cpu > 0) ($i1_cpu + $i2_cpu) / ($d_cpu + $w2_cpu) else 0" | bc -l)")
				iw_rps_rounds+=("$(echo "if ($d_rps + $w2_rps > 0) ($i1_rps + $i2_rps) / ($d_rps + $w2_rps) else 0" | bc -l)")
				if [ -n "$BASE_INFO" ]; then # the same for base, after (odd rounds) or before
					if [ $((round % 2)) = 1 ]; then
						read -r bi1_rps bi1_cpu bi2_rps bi2_cpu bw1_rps bw1_cpu bw2_rps bw2_cpu <<<"$(info_warn "$base_info" base-nocache "")"
					fi
					biw_rounds+=("$(echo "if ($bw1_cpu + $bw2_cpu > 0) ($bi1_cpu + $bi2_cpu) / ($bw1_cpu + $bw2_cpu) else 0" | bc -l)")
					biw_rps_rounds+=("$(echo "if ($bw1_rps + $bw2_rps > 0) ($bi1_rps + $bi2_rps) / ($bw1_rps + $bw2_rps) else 0" | bc -l)")
				fi
			done
			log "done: nocache distinct at log level info (twice) and $LOG_LEVEL (again), $ROUNDS round(s)"
		fi
	done
done
log "one-stream latency ($LAT_N requests each)"
lat_miss_d=$(median_us "${port[dohfwd-nocache]}" "$work/part.00")
lat_miss_s=$(median_us "${port[dnsdist-nocache]}" "$work/part.00")
lat_hit_d=$(median_us "${port[dohfwd-cache]}" "$same_path")
lat_hit_s=$(median_us "${port[dnsdist-cache]}" "$same_path")

# --- table -------------------------------------------------------------------
echo
printf '%-6s %-9s %11s %11s %7s %13s %13s %7s %16s\n' cache names "dohfwd r/s" "dnsdist r/s" ratio "dohfwd us/req" "dnsdist us/req" "cpu x" "200s (d / s)"
for r in "${results[@]}"; do
	read -r cache kind d_rps d_ok s_rps s_ok d_cpu s_cpu <<<"$r"
	ratio=$(echo "if ($s_rps > 0) $d_rps / $s_rps else 0" | bc -l)
	cpux=$(echo "if ($s_cpu > 0) $d_cpu / $s_cpu else 0" | bc -l)
	[ "$cache" = cache ] && cache=on || cache=off
	printf '%-6s %-9s %11.0f %11.0f %7.2f %13.1f %13.1f %7.2f %16s\n' "$cache" "$kind" "$d_rps" "$s_rps" "$ratio" "$d_cpu" "$s_cpu" "$cpux" "$d_ok / $s_ok"
done
if [ ${#compared[@]} -gt 0 ]; then
	echo
	echo "dohfwd against itself and, with PEER_ROUNDS, dnsdist, interleaved (base: dohfwd at ${BASE_REV:-(none)}; ops-off: ${OPS_OFF_KEYS:-server_timing and trace_context off}):"
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
printf 'one stream, median us/request: cache off distinct  dohfwd %s  dnsdist %s  ratio %.2f\n' \
	"$lat_miss_d" "$lat_miss_s" "$(echo "if ($lat_miss_s > 0) $lat_miss_d / $lat_miss_s else 0" | bc -l)"
printf '                               cache on, one name  dohfwd %s  dnsdist %s  ratio %.2f\n' \
	"$lat_hit_d" "$lat_hit_s" "$(echo "if ($lat_hit_s > 0) $lat_hit_d / $lat_hit_s else 0" | bc -l)"
if [ -n "${i_rps:-}" ]; then # only when the cache-off distinct load ran (LOADS)
	printf 'log level info vs %s (cache off, distinct; mean of 2 runs each, interleaved, %s round(s)%s): r/s %.0f vs %.0f (ratio %.2f), us/req %.1f vs %.1f (ratio %.2f), %s attempt events written\n' \
		"$LOG_LEVEL" "$ROUNDS" "${LEVEL_HUP:+, one process, level switched by SIGHUP}${LEVEL_SIDE:+, both loaded at once}" "$i_rps" "$w_rps" "$(echo "if ($w_rps > 0) $i_rps / $w_rps else 0" | bc -l)" \
		"$i_cpu" "$w_cpu" "$(echo "if ($w_cpu > 0) $i_cpu / $w_cpu else 0" | bc -l)" "$(grep -c '"message":"attempt"' "$work/$info.log" || true)"
	printf '  us/req ratio per round:'
	printf ' %.3f' "${iw_rounds[@]}"
	printf '\n  r/s ratio per round:'
	printf ' %.3f' "${iw_rps_rounds[@]}"
	echo
	if [ -n "$BASE_INFO" ]; then
		printf '  base (%s), the same in each round (after, before, ...): us/req ratio per round:' "$BASE_REV"
		printf ' %.3f' "${biw_rounds[@]}"
		printf '\n  base r/s ratio per round:'
		printf ' %.3f' "${biw_rps_rounds[@]}"
		echo
	fi
fi
if [ -n "$SYS_STATS" ] && [ -f "$work/sys.dohfwd-nocache" ] && [ -f "$work/sys.dnsdist-nocache" ]; then
	echo
	echo "the rest of the machine, per request (cache off, distinct; the first load of each):"
	printf '  %-16s %12s %16s %18s %16s %14s\n' server "nsd cpu/req" "voluntary cs/req" "involuntary cs/req" "header B/answer" "idle cpu/req"
	for name in dohfwd-nocache dnsdist-nocache; do
		read -r _ n v i h q _ <"$work/sys.$name"
		printf '  %-16s %10.1fus %16.2f %18.2f %16.0f %12.1fus\n' "$name" "$n" "$v" "$i" "$h" "$q"
	done
	echo "the client (4 h2load processes) and the server's sends, per response:"
	printf '  %-16s %12s %10s %11s %12s %8s %9s %8s %7s %8s %7s %8s\n' server "h2load cpu" "reads" "epoll_wait" "frame+ctl B" \
		"wr<64B" "wr<1KiB" "wr>=1KiB" writev sendmsg sendto sendmmsg
	for name in dohfwd-nocache dnsdist-nocache; do
		read -r _ _ _ _ _ _ c r e o w1 w2 w3 wv sm st smm <"$work/sys.$name"
		printf '  %-16s %10.1fus %10.3f %11.3f %12.1f %8.3f %9.3f %8.3f %7.3f %8.3f %7.3f %8.3f\n' "$name" "$c" "$r" "$e" "$o" "$w1" "$w2" "$w3" "$wv" "$sm" "$st" "$smm"
	done
	read -r _ _ _ _ _ _ c1 _ <"$work/sys.dohfwd-nocache"
	read -r _ _ _ _ _ _ c2 _ <"$work/sys.dnsdist-nocache"
	printf '  h2load cpu per response, dohfwd / dnsdist: %.2f\n' "$(echo "if ($c2 > 0) $c1 / $c2 else 0" | bc -l)"
fi
# --- goals ---------------------------------------------------------------------
# The forwarding goals as ratios dohfwd / dnsdist from this run: the
# one-shot table's, and with PEER_ROUNDS the mean of the interleaved
# rounds' too (steadier). Printed, never asserted.
# goal_line WHAT RATIO OP GOAL
goal_line() {
	local met="not met"
	[ "$(echo "$2 $3 $4" | bc -l)" = 1 ] && met=met
	printf '  %-22s %6.2f   goal %s %s   %s\n' "$1" "$2" "$3" "$4" "$met"
}
# peer_mean CACHE KIND FIELD(rps|cpu): the mean ratio over the
# interleaved dnsdist rounds, or nothing without them.
peer_mean() {
	local r other cache kind d_rps o_rps o_ok d_cpu o_cpu sum=0 n=0
	for r in "${compared[@]}"; do
		read -r other cache kind d_rps o_rps o_ok d_cpu o_cpu <<<"$r"
		[ "$other $cache $kind" = "dnsdist $1 $2" ] || continue
		if [ "$3" = rps ]; then
			sum=$(echo "$sum + if ($o_rps > 0) $d_rps / $o_rps else 0" | bc -l)
		else
			sum=$(echo "$sum + if ($o_cpu > 0) $d_cpu / $o_cpu else 0" | bc -l)
		fi
		n=$((n + 1))
	done
	[ "$n" -gt 0 ] && echo "$sum / $n" | bc -l
}
echo
echo "goals, dohfwd / dnsdist in this run:"
for r in "${results[@]}"; do
	read -r cache kind d_rps d_ok s_rps s_ok d_cpu s_cpu <<<"$r"
	case "$cache-$kind" in
	nocache-distinct) what=miss rps_op=">=" rps_goal=1.5 cpu_goal=0.6 ;;
	cache-same) what=hit rps_op=">=" rps_goal=2.0 cpu_goal=0.3 ;;
	*) continue ;;
	esac
	goal_line "cache-$what req/s" "$(echo "if ($s_rps > 0) $d_rps / $s_rps else 0" | bc -l)" "$rps_op" "$rps_goal"
	goal_line "cpu per $what" "$(echo "if ($s_cpu > 0) $d_cpu / $s_cpu else 0" | bc -l)" "<=" "$cpu_goal"
	if m=$(peer_mean "$cache" "$kind" rps); then
		goal_line "  interleaved req/s" "$m" "$rps_op" "$rps_goal"
		goal_line "  interleaved cpu" "$(peer_mean "$cache" "$kind" cpu)" "<=" "$cpu_goal"
	fi
done
goal_line "one-stream miss p50" "$(echo "if ($lat_miss_s > 0) $lat_miss_d / $lat_miss_s else 0" | bc -l)" "<=" 0.8
echo
echo "file descriptors at rest after the runs:"
for name in "${dohfwds[@]}"; do
	printf '  %-15s %s\n' "$name" "$(ls "/proc/${pid[$name]}/fd" | wc -l)"
done
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
