#!/usr/bin/env bash
# Engine speed and memory figures (reported, never asserted):
#  - BenchmarkForwardUDP: one forwarded question over loopback UDP to nsd
#    (a separate process), with our own CPU per question from getrusage
#    (own-cpu-ns/op) and allocations per question;
#    fresh socket per transaction and the pool of connected sockets side
#    by side (SPEC §1.3), the wire path (ResolveWire) either way;
#  - BenchmarkCacheHitWire: a cache hit, bytes in and bytes out;
#  - BenchmarkStaleCacheHit, BenchmarkStaleForward: a cache hit and a
#    forwarded miss with the cache on, serve-stale and prefetch off and on
#    side by side (issue 15: not slower with them on);
#  - BenchmarkInFlight4096: heap (and goroutine stacks) with 4 096
#    transactions in flight to a blackhole, and the descriptors held then
#    and after.
# Targets (issue 2): <= 15 us own CPU and <= 30 allocs per question;
# <= 48 MiB heap for 4 096 in flight.
set -euo pipefail
cd "$(dirname "$0")/.."
go test ./engine/ -run '^$' -bench 'BenchmarkForwardUDP|BenchmarkPeerMiekgExchange|BenchmarkCacheHitWire|BenchmarkStaleCacheHit|BenchmarkStaleForward' -benchtime "${BENCH_N:-50000}x" -count "${BENCH_COUNT:-3}"
go test ./engine/ -run '^$' -bench 'BenchmarkInFlight4096' -benchtime 3x -count 1
