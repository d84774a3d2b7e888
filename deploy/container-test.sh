#!/usr/bin/env bash
# Container test: builds the image (deploy/build-image.sh), loads its OCI
# archive into a private podman store and runs it twice on loopback:
#
#   A. --network host, forwarding to a real nsd on 127.0.0.1 and to a
#      silent UDP port: DoH GET/POST/JSON with curl (and kdig when present),
#      curl --doh-url, /healthz /status /metrics on the admin port, the
#      image's own healthcheck command, and SIGTERM through `podman stop`
#      while a question is in flight: the question is answered, the drain
#      completes and the exit code is 0.
#   B. the default bridge network with -p 127.0.0.1:PORT:8443/9153: DoH
#      and /healthz through the published ports, then a clean stop.
#
# Everything it makes (store, containers, nsd, files) is removed on exit.
# Without a working podman it says so loudly and exits 1 under CI=true
# (CI installs podman: a skip there would pass untested), 0 elsewhere.
set -uo pipefail

cd "$(dirname "$0")/.."
repo=$PWD
: "${CONTAINERS_CONF:=$repo/deploy/containers.conf}"
export CONTAINERS_CONF

passed=0 failed=0
pass() { passed=$((passed + 1)); echo "  ok   $1"; }
fail() { failed=$((failed + 1)); echo "  FAIL $1"; [ $# -gt 1 ] && printf '       %s\n' "${@:2}"; }
# check NAME COMMAND...: one assertion; the command's status decides.
check() { local name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }
# loud_skip stops the test when a tool is missing: a failure under
# CI=true (CI installs every tool, so a skip there would pass untested), a
# loud skip elsewhere.
loud_skip() {
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
	echo "!!! container-test: NOT RUN: $*"
	echo "!!! the container image was NOT tested (scripts/setup.d/50-podman.sh)"
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
	case "${CI:-}" in true | 1) echo "container-test: FAIL (CI=$CI)"; exit 1 ;; esac
	exit 0
}

for tool in podman curl openssl nsd python3; do
	command -v $tool >/dev/null || loud_skip "$tool is not installed"
done

work=$(mktemp -d /tmp/dohfwd-container-test.XXXXXX)
P=(podman --root "$work/store" --runroot "$work/run")
bridge_before=$(ip -o link show cni-podman0 2>/dev/null | wc -l)
pids=()
cleanup() {
	"${P[@]}" rm -f -t 0 dohfwd-test-host dohfwd-test-bridge >/dev/null 2>&1
	"${P[@]}" rmi -a -f >/dev/null 2>&1
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
	wait 2>/dev/null
	# A leftover mount (a crashed run) would make rm fail; lift it first.
	findmnt -rn -o TARGET | grep "^$work" | sort -r | xargs -r umount -l 2>/dev/null
	rm -rf "$work"
	# The bridge is host state that the bridge run made; leave one that was there.
	if [ "$bridge_before" = 0 ] && ip link show cni-podman0 >/dev/null 2>&1; then
		ip link delete cni-podman0 2>/dev/null
	fi
}
trap cleanup EXIT

"${P[@]}" info >/dev/null 2>"$work/info.err" || loud_skip "podman cannot run here: $(tail -1 "$work/info.err")"

echo "container-test: building the image"
if ! bash deploy/build-image.sh >"$work/build.log" 2>&1; then
	tail -30 "$work/build.log"
	fail "image builds with podman --pull=never"
	echo "container-test: $passed passed, $failed failed"
	exit 1
fi
tail -1 "$work/build.log"
pass "image builds with podman --pull=never"
archive=dist/dohfwd-image.tar
check "OCI archive written ($archive)" test -s "$archive"
check "OCI archive loads into a fresh store" "${P[@]}" load -q -i "$archive"
image=$("${P[@]}" images -q | head -1)

size=$("${P[@]}" image inspect --format '{{.Size}}' "$image")
echo "  image size: $((size / 1024)) KiB"
# 28 MB: QUIC (quic-go, for DoH over HTTP/3 and DNS over QUIC) added
# 2.26 MB to the static binary (25 796 770 to 28 053 666 bytes, -s -w);
# the image was 25 415 KiB before it and 27 623 KiB with it.
check "image is at most 28 MB" test "$size" -le $((28 * 1024 * 1024))
user=$("${P[@]}" image inspect --format '{{.Config.User}}' "$image")
check "image runs as numeric non-root user ($user)" bash -c '[[ $0 =~ ^[1-9][0-9]*(:[0-9]+)?$ ]]' "$user"
labels=$("${P[@]}" image inspect --format '{{json .Labels}}' "$image")
check "OCI version label set" grep -q '"org.opencontainers.image.version":"[^"]' <<<"$labels"
version=$("${P[@]}" run --rm --network none "$image" version 2>&1)
check "dohfwd version runs in the image ($version)" grep -q '^dohfwd ' <<<"$version"

# free_port prints a TCP and UDP port nothing on 127.0.0.1 listens on.
free_port() {
	/usr/bin/python3 - <<'PY'
import socket
while True:
    t = socket.socket(); t.bind(("127.0.0.1", 0)); port = t.getsockname()[1]
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.bind(("127.0.0.1", port))
    except OSError:
        continue
    print(port); break
PY
}

# --- upstreams on loopback: nsd with a zone made for this run, and a UDP
# port that swallows questions (the drain test's slow question).
token="dohfwd-container-$RANDOM$RANDOM"
nsd_port=$(free_port)
mkdir -p "$work/nsd"
cat >"$work/nsd/example.test.zone" <<ZONE
\$TTL 60
@      IN SOA ns.example.test. hostmaster.example.test. 1 3600 600 86400 60
@      IN NS  ns.example.test.
ns     IN A   127.0.0.1
admin  IN A   127.0.0.1
token  IN TXT "$token"
ZONE
cat >"$work/nsd/nsd.conf" <<CONF
server:
  ip-address: 127.0.0.1@$nsd_port
  username: ""
  chroot: ""
  zonesdir: "$work/nsd"
  pidfile: "$work/nsd/nsd.pid"
  database: ""
  xfrdfile: "$work/nsd/xfrd.state"
  zonelistfile: "$work/nsd/zone.list"
  logfile: "$work/nsd/nsd.log"
  server-count: 1
  rrl-ratelimit: 0
remote-control:
  control-enable: no
zone:
  name: example.test
  zonefile: example.test.zone
CONF
nsd -d -c "$work/nsd/nsd.conf" &
pids+=($!)
hole_port=$(free_port)
/usr/bin/python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", int(sys.argv[1])))
time.sleep(120)' "$hole_port" &
pids+=($!)
for _ in $(seq 50); do ss -lun | grep -q "127.0.0.1:$nsd_port " && break; sleep 0.1; done

# --- TLS: tls.mode files with a certificate made for this run.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
	-subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
	-keyout "$work/tls.key" -out "$work/tls.crt" 2>/dev/null
chmod 0644 "$work/tls.key" "$work/tls.crt" # read by the image's user 65532

# dns_query NAME TYPE prints an RFC 8484 wire query (ID 0, RD) to stdout.
dns_query() {
	local name=$1 qtype=$2 label
	printf '\x00\x00\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00'
	IFS=. read -ra labels <<<"$name"
	for label in "${labels[@]}"; do printf "\\x$(printf %02x ${#label})%s" "$label"; done
	printf '\x00\x00'"\\x$(printf %02x "$qtype")"'\x00\x01'
}
b64url() { base64 -w0 | tr '+/' '-_' | tr -d '='; }

# status_ok JSON SERVER: /status (indented or not) names SERVER and has the
# counters and the in-flight figure.
status_ok() {
	grep -Eq "\"address\": *\"$2\"" <<<"$1" && grep -Eq '"counters": *\{' <<<"$1" &&
		grep -Eq '"in_flight": *[0-9]' <<<"$1"
}

# run_checks LABEL DOH ADMIN UPSTREAM: the DoH and admin checks both runs share.
run_checks() {
	local label=$1 doh=$2 admin=$3 upstream=$4 out q
	curl_tls=(curl -sS --max-time 10 --cacert "$work/tls.crt")
	for _ in $(seq 100); do curl -sf "http://$admin/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
	out=$(curl -sS --max-time 5 "http://$admin/healthz" 2>&1)
	check "$label: /healthz on the admin port answers ok" grep -qi ok <<<"$out"

	dns_query token.example.test 16 >"$work/q.bin"
	q=$(b64url <"$work/q.bin")
	out=$("${curl_tls[@]}" -D "$work/h" -w '%{http_version}' "https://$doh/dns-query?dns=$q" | tr -d '\0' 2>&1)
	check "$label: DoH GET over HTTP/2 answers the upstream's TXT" \
		bash -c '[[ $0 == *"$1"* && $0 == *2 ]]' "$out" "$token"
	check "$label: DoH answer is application/dns-message" grep -qi '^content-type: application/dns-message' "$work/h"
	out=$("${curl_tls[@]}" -H 'content-type: application/dns-message' --data-binary "@$work/q.bin" \
		"https://$doh/dns-query" | tr -d '\0')
	check "$label: DoH POST answers the upstream's TXT" grep -qF "$token" <<<"$out"
	out=$("${curl_tls[@]}" "https://$doh/resolve?name=admin.example.test&type=A")
	check "$label: JSON /resolve answers A 127.0.0.1" grep -q '"data":"127.0.0.1"' <<<"$out"
	# A real resolver through DoH: curl looks the name up over DoH, then
	# connects to the address it got (the admin port on 127.0.0.1).
	out=$(curl -sS --max-time 10 --doh-url "https://$doh/dns-query" --cacert "$work/tls.crt" \
		"http://admin.example.test:${admin##*:}/healthz" 2>&1)
	check "$label: curl --doh-url resolves through the container" grep -qi ok <<<"$out"
	if command -v kdig >/dev/null; then
		out=$(kdig +https +tls-ca="$work/tls.crt" +tls-hostname=localhost @127.0.0.1 -p "${doh##*:}" \
			+short token.example.test TXT 2>&1)
		check "$label: kdig +https answers the upstream's TXT" grep -qF "$token" <<<"$out"
	fi
	out=$(curl -sS --max-time 5 "http://$admin/status")
	check "$label: /status lists the scope's server, counters and in-flight" \
		status_ok "$out" "$upstream"
	out=$(curl -sS --max-time 5 "http://$admin/metrics")
	check "$label: /metrics has dohfwd_ series" grep -q '^dohfwd_' <<<"$out"
}

write_config() { # FILE HTTPS ADMIN UPSTREAM HOLE
	cat >"$1" <<YAML
listen:
  https: $2
  admin: $3
tls:
  mode: files
  cert_file: /etc/dohfwd/tls/tls.crt
  key_file: /etc/dohfwd/tls/tls.key
scopes:
  - name: test
    domains: [example.test]
    servers: ["$4"]
  - name: slow
    domains: [slow.test]
    servers: ["$5"]
fallback_servers: [] # nothing may leave loopback
log:
  format: json
YAML
	chmod 0644 "$1"
}
mounts=(-v "$work/tls.crt:/etc/dohfwd/tls/tls.crt:ro" -v "$work/tls.key:/etc/dohfwd/tls/tls.key:ro")

# --- A: host network.
doh_port=$(free_port) admin_port=$(free_port)
write_config "$work/host.yaml" "127.0.0.1:$doh_port" "127.0.0.1:$admin_port" "127.0.0.1:$nsd_port" "127.0.0.1:$hole_port"
echo "container-test: A, --network host (DoH 127.0.0.1:$doh_port, admin :$admin_port, nsd :$nsd_port)"
if "${P[@]}" run -d --name dohfwd-test-host --network host \
	-v "$work/host.yaml:/etc/dohfwd/dohfwd.yaml:ro" "${mounts[@]}" "$image" >/dev/null 2>"$work/run.err"; then
	pass "A: container starts with a mounted configuration"
	run_checks A "127.0.0.1:$doh_port" "127.0.0.1:$admin_port" "127.0.0.1:$nsd_port"
	check "A: the image's healthcheck command passes (no shell)" \
		"${P[@]}" exec dohfwd-test-host /dohfwd healthcheck --config /etc/dohfwd/dohfwd.yaml

	# Drain: a question to the silent server takes its three 2 s attempts;
	# SIGTERM arrives while it is in flight and it must still be answered.
	curl -sS --max-time 20 --cacert "$work/tls.crt" -o "$work/slow.json" -w '%{http_code}' \
		"https://127.0.0.1:$doh_port/resolve?name=x.slow.test&type=A" >"$work/slow.code" 2>&1 &
	slow=$!
	for _ in $(seq 50); do
		curl -s "http://127.0.0.1:$admin_port/status" | grep -Eq '"in_flight": *[1-9]' && break
		sleep 0.1
	done
	start=$(date +%s.%N)
	"${P[@]}" stop -t 25 dohfwd-test-host >/dev/null
	took=$(echo "$(date +%s.%N) - $start" | bc 2>/dev/null || echo "?")
	wait $slow
	code=$("${P[@]}" inspect --format '{{.State.ExitCode}}' dohfwd-test-host)
	logs=$("${P[@]}" logs dohfwd-test-host 2>&1)
	echo "  podman stop took ${took}s"
	check "A: podman stop (SIGTERM) exits with code 0 (got $code)" test "$code" = 0
	check "A: the question in flight at SIGTERM got its answer (HTTP $(cat "$work/slow.code"), SERVFAIL)" \
		bash -c 'grep -q "^200$" "$0" && grep -q "\"Status\":2" "$1"' "$work/slow.code" "$work/slow.json"
	check "A: log shows draining with a question in flight" grep -q '"message":"draining".*"in_flight":[1-9]\|"in_flight":[1-9].*"message":"draining"' <<<"$logs"
	check "A: log shows the drain completed" grep -q '"complete":true' <<<"$logs"
	check "A: one attempt event per upstream attempt is logged" grep -q '"message":"attempt"' <<<"$logs"
	[ "$failed" = 0 ] || { echo "  --- container log (last 15 lines):"; tail -15 <<<"$logs"; }
else
	fail "A: container starts with a mounted configuration" "$(cat "$work/run.err")"
fi
"${P[@]}" rm -f dohfwd-test-host >/dev/null 2>&1

# --- B: bridge network with published loopback ports. The container's own
# loopback has no upstream, so this run asks a static host entry.
pub_doh=$(free_port) pub_admin=$(free_port)
cat >"$work/bridge.yaml" <<YAML
listen:
  https: 0.0.0.0:8443
  admin: 0.0.0.0:9153
tls:
  mode: files
  cert_file: /etc/dohfwd/tls/tls.crt
  key_file: /etc/dohfwd/tls/tls.key
fallback_servers: []
hosts:
  pinned.test: [127.0.0.1]
log:
  format: json
YAML
chmod 0644 "$work/bridge.yaml"
echo "container-test: B, -p 127.0.0.1:$pub_doh:8443 -p 127.0.0.1:$pub_admin:9153"
if "${P[@]}" run -d --name dohfwd-test-bridge -p "127.0.0.1:$pub_doh:8443" -p "127.0.0.1:$pub_admin:9153" \
	-v "$work/bridge.yaml:/etc/dohfwd/dohfwd.yaml:ro" "${mounts[@]}" "$image" >/dev/null 2>"$work/run.err"; then
	pass "B: container starts with published 127.0.0.1 ports"
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$pub_admin/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
	check "B: /healthz through the published admin port" grep -qi ok <<<"$(curl -sS --max-time 5 "http://127.0.0.1:$pub_admin/healthz" 2>&1)"
	out=$(curl -sS --max-time 10 --cacert "$work/tls.crt" "https://127.0.0.1:$pub_doh/resolve?name=pinned.test&type=A" 2>&1)
	check "B: DoH through the published port answers the hosts entry" grep -q '"data":"127.0.0.1"' <<<"$out"
	dns_query pinned.test 1 >"$work/q.bin"
	out=$(curl -sS --max-time 10 --cacert "$work/tls.crt" -w '%{http_code} %{http_version}' -o /dev/null \
		"https://127.0.0.1:$pub_doh/dns-query?dns=$(b64url <"$work/q.bin")" 2>&1)
	check "B: DoH wire GET over HTTP/2 through the published port ($out)" test "$out" = "200 2"
	"${P[@]}" stop -t 25 dohfwd-test-bridge >/dev/null
	code=$("${P[@]}" inspect --format '{{.State.ExitCode}}' dohfwd-test-bridge)
	check "B: podman stop exits with code 0 (got $code)" test "$code" = 0
else
	fail "B: container starts with published 127.0.0.1 ports" "$(cat "$work/run.err")"
fi

echo "container-test: $passed passed, $failed failed"
[ "$failed" = 0 ]
