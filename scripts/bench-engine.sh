#!/usr/bin/env bash
# Engine speed and memory figures (reported, never asserted):
#  - BenchmarkForwardUDP: one forwarded question over loopback UDP to nsd
#    (a separate process), with our own CPU per question from getrusage
#    (own-cpu-ns/op) and allocations per question;
#    fresh socket per transaction and the pool of connected sockets side
#    by side (engine/pool.go), the wire path (ResolveWire) either way;
#  - BenchmarkForwardUDPParallel, BenchmarkForwardUDPOneAtATime: pooled
#    sockets, distinct names, 40 questions in flight and one at a time,
#    waiting for replies on the runtime's poller (the native network) and
#    on a receiver thread of our own (engine/receiver_bench_test.go);
#  - BenchmarkCacheHitWire: a cache hit, bytes in and bytes out;
#  - BenchmarkStaleCacheHit, BenchmarkStaleForward: a cache hit and a
#    forwarded miss with the cache on, serve-stale and prefetch off and on
#    side by side (the target: not slower with them on);
#  - BenchmarkInFlight4096: heap (and goroutine stacks) with 4 096
#    transactions in flight to a blackhole, and the descriptors held then
#    and after.
# Targets: <= 15 us own CPU and <= 30 allocs per question;
# <= 48 MiB heap for 4 096 in flight.
#
# BASE_REV=REV also runs BenchmarkForwardUDP and BenchmarkResolveInMemory
# (the engine alone on the in-memory network: far less noise than
# sockets; these benchmarks' files are copied into REV's tree when REV
# lacks them) on the
# engine at git revision REV, alternating with this tree's, BENCH_COUNT
# rounds each, for a
# "this / base" comparison in the same run (the cost of a change), shown
# by benchstat when it is installed
# (go install golang.org/x/perf/cmd/benchstat@latest).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${BASE_REV:-}" ]; then
	go test ./engine/ -run '^$' -bench 'BenchmarkForwardUDP|BenchmarkPeerMiekgExchange|BenchmarkCacheHitWire|BenchmarkStaleCacheHit|BenchmarkStaleForward' -benchtime "${BENCH_N:-50000}x" -count "${BENCH_COUNT:-3}"
	go test ./engine/ -run '^$' -bench 'BenchmarkInFlight4096' -benchtime 3x -count 1
	exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git archive "$BASE_REV" | tar -x -C "$work"
for f in bench_inmemory_test.go bench_parallel_test.go receiver_bench_test.go; do
	[ -f "$work/engine/$f" ] || cp "engine/$f" "$work/engine/"
done
here=$(pwd)
go test -c -o "$work/head.test" ./engine/
(cd "$work" && go test -c -o "$work/base.test" ./engine/)
for i in $(seq 1 "${BENCH_COUNT:-3}"); do
	for which in base head; do
		# Each binary runs in its own package folder (testdata, relative paths).
		dir=$here/engine
		[ "$which" = base ] && dir=$work/engine
		(cd "$dir" && "$work/$which.test" -test.run '^$' -test.bench 'BenchmarkForwardUDP' \
			-test.benchtime "${BENCH_N:-50000}x" -test.count 1) | grep '^Benchmark' >>"$work/$which.txt"
		(cd "$dir" && "$work/$which.test" -test.run '^$' -test.bench 'BenchmarkResolveInMemory$|BenchmarkCacheHitWire' \
			-test.benchtime 1s -test.count 1) | grep '^Benchmark' >>"$work/$which.txt"
	done
done
benchstat=$(command -v benchstat || echo "$(go env GOPATH)/bin/benchstat")
if [ -x "$benchstat" ]; then
	(cd "$work" && "$benchstat" base=base.txt head=head.txt)
else
	echo "base ($BASE_REV):"; cat "$work/base.txt"
	echo "head:"; cat "$work/head.txt"
fi
