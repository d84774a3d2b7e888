#!/usr/bin/env bash
# Soak: sustained mixed load with upstream faults for a configurable time,
# sampling what leaks show in: descriptors, goroutines (admin /status),
# RSS, engine in-flight and open client connections. It fails when any of
# them grows after the warm-up, or when, once the load stops, in-flight
# and connections do not fall back to 0 and goroutines and descriptors to
# near where they were before the load.
#
# Load, all on loopback, in rounds of ROUND seconds until DURATION:
#   - DoH: h2load over TLS, 4 connections x 8 streams at RPS per
#     connection, on SOAK_NAMES distinct names (cache hits and misses; the
#     answers' TTL is 5 s so the cache keeps churning); new connections
#     every round;
#   - plain DNS over UDP and DoT: dnsperf at DNS_QPS each;
#   - faults: every name goes to scripts/faultyupstream, which drops,
#     delays, SERVFAILs, truncates, garbles and mismatches a share of
#     queries (FAULTS), so attempts time out, retry over TCP, demote and
#     recover all the time.
# Limits are on at generous values (client_in_flight, client_connections)
# so their paths run too.
#
# Usage: scripts/soak.sh
# Env:   DURATION (900) seconds of load; WARMUP (120, at most a quarter of
#        DURATION) seconds before growth counts; SAMPLE_EVERY (10);
#        ROUND (30); RPS (200) per DoH connection; DNS_QPS (300);
#        SOAK_NAMES (20000); FAULTS (faultyupstream flags);
#        SAMPLES_OUT (file for the samples, default in the work folder).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

DURATION=${DURATION:-900}
WARMUP=${WARMUP:-120}
(( WARMUP > DURATION / 4 )) && WARMUP=$(( DURATION / 4 ))
SAMPLE_EVERY=${SAMPLE_EVERY:-10}
ROUND=${ROUND:-30}
RPS=${RPS:-200}
DNS_QPS=${DNS_QPS:-300}
SOAK_NAMES=${SOAK_NAMES:-20000}
FAULTS=${FAULTS:--drop 0.03 -servfail 0.03 -slow 0.05 -slow-delay 400ms -garbage 0.02 -mismatch 0.02 -truncate 0.03}

log() { echo "soak: $*" >&2; }
for tool in h2load dnsperf curl python3 openssl; do
	command -v "$tool" >/dev/null || { log "$tool is missing (scripts/setup.sh installs it)"; exit 1; }
done

work=$(mktemp -d /tmp/dohfwd-soak.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [[ ${KEEP_WORK:-} != 1 ]]; then rm -rf "$work"; fi
}
trap cleanup EXIT
# shellcheck source=bench-lib.sh
source scripts/bench-lib.sh
SAMPLES_OUT=${SAMPLES_OUT:-$work/samples.csv}

log "building dohfwd and faultyupstream"
go build -o "$work/dohfwd" ./cmd/dohfwd
go build -o "$work/faultyupstream" ./scripts/faultyupstream

up=$(freeport)
# shellcheck disable=SC2086
"$work/faultyupstream" -listen "127.0.0.1:$up" $FAULTS 2>"$work/upstream.log" &
pids+=($!)

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
	-addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
https=$(freeport); admin=$(freeport); dns=$(freeport); dot=$(freeport)
cat >"$work/dohfwd.yaml" <<YAML
listen:
  https: 127.0.0.1:$https
  dot: 127.0.0.1:$dot
  dns: 127.0.0.1:$dns
  admin: 127.0.0.1:$admin
tls:
  mode: files
  cert_file: $work/cert.pem
  key_file: $work/key.pem
scopes:
  - name: soak
    default_route: true
    servers: [127.0.0.1:$up]
fallback_servers: [127.0.0.1:$up]
engine:
  probe: true
cache:
  max_entries: 5000
limits:
  client_in_flight: 1024
  client_connections: 256
  connections: 4096
log:
  level: warn
  format: json
YAML
"$work/dohfwd" serve --config "$work/dohfwd.yaml" 2>"$work/dohfwd.log" &
dohfwd_pid=$!
pids+=("$dohfwd_pid")
waitport "$admin"
waitport "$https"

# Query files: DoH GET paths and dnsperf's "name type" lines.
python3 - "$SOAK_NAMES" "$work" <<'PY'
import base64, random, struct, sys
n, work = int(sys.argv[1]), sys.argv[2]
names = [f"n{i}.soak.test" for i in range(n)]
with open(f"{work}/paths", "w") as p, open(f"{work}/dnsperf", "w") as d:
    for i in range(n):
        name = random.choice(names)        # repeats: hits as well as misses
        qtype = 1 if i % 4 else 28         # mostly A, some AAAA (NODATA)
        q = struct.pack(">6H", 0, 0x0100, 1, 0, 0, 0)
        for label in name.split("."):
            q += bytes([len(label)]) + label.encode()
        q += b"\0" + struct.pack(">2H", qtype, 1)
        p.write("/dns-query?dns=" + base64.urlsafe_b64encode(q).decode().rstrip("=") + "\n")
        d.write(f"{name} {'A' if qtype == 1 else 'AAAA'}\n")
PY
sed -i "s#^#https://127.0.0.1:$https#" "$work/paths"

# sample prints one CSV row: seconds,fds,goroutines,rss_kib,in_flight,connections
sample() {
	local st
	st=$(curl -s --max-time 5 "http://127.0.0.1:$admin/status") || return 1
	python3 - "$1" "$dohfwd_pid" "$st" <<'PY'
import json, os, sys
t, pid, st = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
rss = 0
for line in open(f"/proc/{pid}/status"):
    if line.startswith("VmRSS:"):
        rss = int(line.split()[1])
fds = len(os.listdir(f"/proc/{pid}/fd"))
print(f"{t},{fds},{st['goroutines']},{rss},{st['in_flight']},{st['connections']}")
PY
}

echo "seconds,fds,goroutines,rss_kib,in_flight,connections" >"$SAMPLES_OUT"
echo "rest" >"$work/phase"
sample 0 >"$work/rest.csv"
log "at rest: $(cat "$work/rest.csv")  (fds,goroutines,rss_kib,in_flight,connections)"

start=$SECONDS
(
	while (( SECONDS - start < DURATION )); do
		sleep "$SAMPLE_EVERY"
		sample $(( SECONDS - start )) >>"$SAMPLES_OUT" || true
	done
) &
sampler=$!
pids+=("$sampler")

round=0
while (( SECONDS - start < DURATION )); do
	left=$(( DURATION - (SECONDS - start) ))
	d=$(( left < ROUND ? left : ROUND ))
	(( d >= 2 )) || break
	round=$((round + 1))
	h2load -c 4 -m 8 --rps "$RPS" -D "$d" -i "$work/paths" >"$work/h2load.$round" 2>&1 &
	h=$!
	dnsperf -s 127.0.0.1 -p "$dns" -d "$work/dnsperf" -l "$d" -Q "$DNS_QPS" -c 8 >"$work/dnsperf-udp.$round" 2>&1 &
	u=$!
	dnsperf -m dot -s 127.0.0.1 -p "$dot" -d "$work/dnsperf" -l "$d" -Q "$DNS_QPS" -c 4 >"$work/dnsperf-dot.$round" 2>&1 &
	o=$!
	wait "$h" "$u" "$o" || true
	log "round $round: $(sed -n 's/^requests: \(.*\)/DoH \1/p' "$work/h2load.$round" | head -1); \
UDP $(sed -n 's/.*Queries completed: *\([0-9]*\).*/\1 completed/p' "$work/dnsperf-udp.$round"); \
DoT $(sed -n 's/.*Queries completed: *\([0-9]*\).*/\1 completed/p' "$work/dnsperf-dot.$round")"
done
wait "$sampler" 2>/dev/null || true

log "load stopped; waiting for the engine's questions to end"
sleep 8
sample $(( SECONDS - start )) >"$work/after.csv"
log "after: $(cat "$work/after.csv")"
cp "$SAMPLES_OUT" "$work/samples.keep" 2>/dev/null || true
cat "$SAMPLES_OUT"

python3 - "$SAMPLES_OUT" "$WARMUP" "$work/rest.csv" "$work/after.csv" <<'PY'
import sys
rows = [list(map(float, l.split(","))) for l in open(sys.argv[1]).read().split("\n")[1:] if l]
warm = float(sys.argv[2])
rest = list(map(float, open(sys.argv[3]).read().split(",")))
after = list(map(float, open(sys.argv[4]).read().split(",")))
names = ["fds", "goroutines", "rss_kib", "in_flight", "connections"]
# Slack: what a steady server may move by between windows of a noisy load
# (ratio, and units added); a metric grows when its last quarter is past
# the first quarter's maximum by more than that AND its trend over the
# window after the warm-up is more than the units added.
slack = {"fds": (1.10, 32), "goroutines": (1.10, 64), "rss_kib": (1.10, 8192),
         "in_flight": (1.25, 64), "connections": (1.0, 16)}
after_warm = [r for r in rows if r[0] > warm]
fail = []
if len(after_warm) < 6:
    fail.append(f"only {len(after_warm)} samples after the warm-up: run longer")
else:
    q = max(2, len(after_warm) // 4)
    first, last = after_warm[:q], after_warm[-q:]
    ts = [r[0] for r in after_warm]
    tm = sum(ts) / len(ts)
    for i, n in enumerate(names, start=1):
        base = max(r[i] for r in first)
        end = sorted(r[i] for r in last)[len(last) // 2]   # median of the last quarter
        ratio, add = slack[n]
        # The least-squares trend over the whole window, in units over it:
        # load that swings with the faults moves the windows, a leak
        # moves both the windows and the trend.
        ys = [r[i] for r in after_warm]
        ym = sum(ys) / len(ys)
        slope = sum((t - tm) * (y - ym) for t, y in zip(ts, ys)) / max(1e-9, sum((t - tm) ** 2 for t in ts))
        trend = slope * (ts[-1] - ts[0])
        ok = end <= base * ratio + add or trend <= add
        print(f"soak: {n:12s} first quarter max {base:10.0f}   last quarter median {end:10.0f}   trend {trend:+9.0f}   {'ok' if ok else 'GROWS'}")
        if not ok:
            fail.append(f"{n} grows after the warm-up: {base:.0f} -> {end:.0f}")
# After the load: nothing in flight, no connection, and back near rest.
print(f"soak: at rest before {rest[1:]}, after the load {after[1:]}  (fds, goroutines, rss_kib, in_flight, connections)")
if after[4] != 0: fail.append(f"{after[4]:.0f} transactions still in flight after the load")
if after[5] != 0: fail.append(f"{after[5]:.0f} client connections still open after the load")
# The socket pool may hold up to 1 024 idle upstream sockets for 60 s.
if after[1] > rest[1] + 1024 + 32: fail.append(f"descriptors {rest[1]:.0f} at rest, {after[1]:.0f} after")
if after[2] > rest[2] + 64: fail.append(f"goroutines {rest[2]:.0f} at rest, {after[2]:.0f} after")
for f in fail: print("soak: FAIL:", f)
sys.exit(1 if fail else 0)
PY
