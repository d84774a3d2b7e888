# Shared parts of the benchmark scripts (bench-doh.sh, bench-dot.sh,
# bench-http3.sh, bench-edge.sh). Sourced, not run: the caller sets `work`
# (a scratch folder it removes) and an array `pids` (processes its cleanup
# kills) before using these, or has bench_scratch set both.

# bench_scratch makes the scratch folder `work` and the array `pids`, and
# traps the script's exit to kill those processes and remove the folder.
bench_scratch() {
	work=$(mktemp -d)
	pids=()
	trap bench_cleanup EXIT
	trap 'exit 130' INT TERM
}

bench_cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}

# bench_same_path is the DoH GET path of www.bench.test A (ID 0, RD).
# CLIENT_EDNS=1 gives every query of the benchmarks an EDNS0 OPT record
# (UDP size 1232, no options), as browsers' queries carry one: a
# forwarder that passes queries through then sends the upstream the same
# OPT that dohfwd always sends (EDNS, 1232 bytes: engine/transaction.go), so both load nsd alike.
bench_same_path="/dns-query?dns=AAABAAABAAAAAAAAA3d3dwViZW5jaAR0ZXN0AAABAAE"
if [ "${CLIENT_EDNS:-}" = 1 ]; then
	bench_same_path="/dns-query?dns=AAABAAABAAAAAAABA3d3dwViZW5jaAR0ZXN0AAABAAEAACkE0AAAAAAAAA"
fi

# freeport prints a port free on 127.0.0.1 for both TCP and UDP (nsd binds
# both).
freeport() {
	python3 - <<'PY'
import socket
while True:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    port = u.getsockname()[1]
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        u.close()
    t.close()
    print(port)
    break
PY
}

# waitport waits (at most 30 s) until something accepts TCP on
# 127.0.0.1:$1.
waitport() {
	local _
	for _ in $(seq 1 300); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "bench: nothing listening on 127.0.0.1:$1 (logs in $work)" >&2
	return 1
}

# start_bench_nsd PORT starts nsd on 127.0.0.1:PORT for bench.test
# (www A, and a wildcard for distinct names), rate limiting off, and waits
# for it.
start_bench_nsd() {
	cat >"$work/bench.test.zone" <<'ZONE'
$TTL 3600
@   IN SOA ns.bench.test. admin.bench.test. 1 3600 600 86400 3600
@   IN NS  ns.bench.test.
ns  IN A   127.0.0.1
www IN A   192.0.2.80
*   IN A   192.0.2.81
ZONE
	cat >"$work/nsd.conf" <<CONF
server:
  ip-address: 127.0.0.1@$1
  username: ""
  chroot: ""
  zonesdir: "$work"
  database: ""
  pidfile: "$work/nsd.pid"
  xfrdfile: "$work/xfrd.state"
  xfrdir: "$work"
  zonelistfile: "$work/zone.list"
  logfile: "$work/nsd.log"
  rrl-ratelimit: 0
  server-count: 1
  verbosity: 0
remote-control:
  control-enable: no
zone:
  name: bench.test
  zonefile: bench.test.zone
CONF
	# BENCH_SERVE_PREFIX (e.g. "taskset -c 1") runs nsd where the servers run.
	${BENCH_SERVE_PREFIX:-} nsd -d -c "$work/nsd.conf" >"$work/nsd.out" 2>&1 &
	pids+=($!)
	waitport "$1"
}

# write_distinct_paths N [ZONE] prints N DoH GET paths, one a line, for
# distinct names nI.ZONE A (ZONE bench.test by default, whose wildcard
# answers them); with an OPT record when CLIENT_EDNS=1.
write_distinct_paths() {
	python3 - "$1" "${CLIENT_EDNS:-}" "${2:-bench.test}" <<'PY'
import base64, struct, sys
edns = sys.argv[2] == "1"
for i in range(int(sys.argv[1])):
    q = struct.pack(">6H", 0, 0x0100, 1, 0, 0, 1 if edns else 0)
    for label in f"n{i}.{sys.argv[3]}".split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">2H", 1, 1)
    if edns:
        q += b"\0" + struct.pack(">HHIH", 41, 1232, 0, 0)
    print("/dns-query?dns=" + base64.urlsafe_b64encode(q).decode().rstrip("="))
PY
}

# rps_of reads h2load's summary on stdin and prints its req/s.
rps_of() { sed -n 's/.*finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p'; }

# cpu_ns PID...: CPU time of the processes' threads so far, in
# nanoseconds (schedstat: finer than /proc/PID/stat's clock ticks).
cpu_ns() {
	local p
	for p in "$@"; do cat /proc/"$p"/task/*/schedstat 2>/dev/null; done | awk '{s += $1} END {printf "%.0f\n", s}'
}
