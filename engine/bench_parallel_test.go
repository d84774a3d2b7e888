package engine_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// BenchmarkForwardUDPParallel is BenchmarkForwardUDP under the load shape
// of scripts/bench-doh.sh: 40 questions in flight at once on 2 cores,
// every name distinct (nothing coalesced), pooled sockets. How a reply
// reaches its transaction (the runtime's poller waking the goroutine, a
// read that finds the socket empty) costs differently when many wait at
// once than one at a time, so the socket choices are compared under both.
func BenchmarkForwardUDPParallel(b *testing.B) {
	if _, ok := upstreamtest.NSDPath(); !ok {
		b.Skip("nsd is not installed")
	}
	addr := startNSDWith(b, upstreamtest.NSDOptions{})
	e, err := engine.New(engine.Config{Scopes: []engine.ScopeConfig{{Name: "test", DefaultRoute: true, Servers: []string{addr}}}},
		engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	queries := make([][]byte, b.N+1024)
	for i := range queries {
		q := newQuery(fmt.Sprintf("w%d.example.test.", i), dns.TypeA)
		q.SetEdns0(4096, false)
		if queries[i], err = q.Pack(); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	// Warm the pool past its floor so the run reuses sockets.
	for i := range 1024 {
		e.ResolveWire(ctx, queries[b.N+i], make([]byte, 0, 4096))
	}
	var next atomic.Int64
	b.SetParallelism(20) // 40 goroutines with GOMAXPROCS=2
	b.ReportAllocs()
	b.ResetTimer()
	user0, sys0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 0, 4096)
		for pb.Next() {
			i := next.Add(1) - 1
			if r := e.ResolveWire(ctx, queries[i%int64(b.N)], buf); r.Result != engine.ResultAnswer && r.Result != engine.ResultNXDomain {
				b.Errorf("result %v", r.Result)
				return
			}
		}
	})
	reportCPU(b, user0, sys0, "own-cpu-ns/op")
	b.ReportMetric(float64(e.IdleSockets()), "pooled-sockets")
}
