package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// Serve-stale and prefetch must not slow the question path down: the
// cache-hit and forward benchmarks with them off and on (the configuration
// defaults: stale_max 24h, the 1.8 s client timer, prefetch after 2
// asks), side by side in one run (scripts/bench-engine.sh).

var staleSettings = []struct {
	name string
	conf engine.CacheConfig
}{
	{"stale=off", engine.CacheConfig{MaxEntries: 100000}},
	{"stale=on", engine.CacheConfig{MaxEntries: 100000, StaleMax: 24 * time.Hour,
		StaleAnswerAfter: 1800 * time.Millisecond, PrefetchMinHits: 2}},
}

// BenchmarkStaleCacheHit answers one question from the cache per op, bytes
// in and bytes out, with serve-stale and prefetch off and on. The entry is
// asked far more than prefetch_min_hits times, as a popular name is.
func BenchmarkStaleCacheHit(b *testing.B) {
	up := upstreamtest.Start(b, upstreamtest.Answer("@ 300 IN A 192.0.2.1", "@ 300 IN A 192.0.2.2"))
	for _, s := range staleSettings {
		b.Run(s.name, func(b *testing.B) {
			e, err := engine.New(engine.Config{
				Cache:  s.conf,
				Scopes: []engine.ScopeConfig{{Name: "test", DefaultRoute: true, Servers: []string{up.String()}}},
			}, engine.Options{Network: engine.NativeNetwork{}})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			q := newQuery("www.example.test.", dns.TypeA)
			q.SetEdns0(1232, false)
			raw, _ := q.Pack()
			ctx := context.Background()
			buf := make([]byte, 0, 4096)
			e.Resolve(ctx, raw, buf)
			b.ReportAllocs()
			b.ResetTimer()
			user0, sys0 := cpuTime()
			for b.Loop() {
				if r := e.Resolve(ctx, raw, buf); !r.CacheHit {
					b.Fatalf("not a hit: %v", r.Result)
				}
			}
			reportCPU(b, user0, sys0, "own-cpu-ns/op")
		})
	}
}

// BenchmarkStaleForward forwards one question per op to nsd over pooled
// loopback UDP sockets with the cache on, every question a name not asked
// before (a miss, then an NXDOMAIN stored with its SOA), with serve-stale
// and prefetch off and on. It reports our own CPU per question as
// BenchmarkForwardUDP does.
func BenchmarkStaleForward(b *testing.B) {
	addr, metric := "", "own-cpu-ns/op"
	if _, ok := upstreamtest.NSDPath(); ok {
		addr = startNSDWith(b, upstreamtest.NSDOptions{})
	} else {
		addr = upstreamtest.Start(b, upstreamtest.Answer("@ 60 IN A 192.0.2.80")).String()
		metric = "cpu-with-upstream-ns/op"
	}
	const names = 1 << 16
	queries := make([][]byte, names)
	for i := range queries {
		q := newQuery(fmt.Sprintf("n%d.example.test.", i), dns.TypeA)
		q.SetEdns0(4096, false)
		queries[i], _ = q.Pack()
	}
	for _, s := range staleSettings {
		b.Run(s.name, func(b *testing.B) {
			e, err := engine.New(engine.Config{Cache: s.conf,
				Scopes: []engine.ScopeConfig{{Name: "test", DefaultRoute: true, Servers: []string{addr}}}},
				engine.Options{Network: engine.NativeNetwork{}})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			ctx := context.Background()
			buf := make([]byte, 0, 4096)
			// Fill the socket pool (256 idle sockets before it reuses
			// any), so both settings are timed on pooled sockets.
			for w := range 1024 {
				q := newQuery(fmt.Sprintf("warm%d.example.test.", w), dns.TypeA)
				raw, _ := q.Pack()
				e.Resolve(ctx, raw, buf)
			}
			i := 0
			b.ReportAllocs()
			b.ResetTimer()
			user0, sys0 := cpuTime()
			for b.Loop() {
				if r := e.Resolve(ctx, queries[i%names], buf); r.CacheHit || r.Result == engine.ResultUnavailable {
					b.Fatalf("op %d: result %v hit %v; want a forwarded answer", i, r.Result, r.CacheHit)
				}
				i++
			}
			reportCPU(b, user0, sys0, metric)
		})
	}
}
