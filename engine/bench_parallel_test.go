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
	for _, n := range benchNetworks {
		b.Run(n.name, func(b *testing.B) { benchmarkForwardUDPLoad(b, n.network(b), 20) })
	}
}

// BenchmarkForwardUDPOneAtATime is the same with one question in flight
// (the one-stream latency run's shape).
func BenchmarkForwardUDPOneAtATime(b *testing.B) {
	for _, n := range benchNetworks {
		b.Run(n.name, func(b *testing.B) { benchmarkForwardUDPLoad(b, n.network(b), 0) })
	}
}

// benchNetworks are the ways of waiting for a UDP reply compared: the
// runtime's poller (engine.NativeNetwork), and a receiver thread of our
// own (receiverNetwork, receiver_bench_test.go).
var benchNetworks = []struct {
	name    string
	network func(testing.TB) engine.Network
}{
	{"poller", func(testing.TB) engine.Network { return engine.NativeNetwork{} }},
	{"receiver", func(tb testing.TB) engine.Network {
		n, err := newReceiverNetwork(tb)
		if err != nil {
			tb.Fatal(err)
		}
		return n
	}},
}

// benchmarkForwardUDPLoad runs distinct questions, parallelism × GOMAXPROCS
// at once (one at a time when 0).
func benchmarkForwardUDPLoad(b *testing.B, network engine.Network, parallelism int) {
	if _, ok := upstreamtest.NSDPath(); !ok {
		b.Skip("nsd is not installed")
	}
	addr := startNSDWith(b, upstreamtest.NSDOptions{})
	e, err := engine.New(engine.Config{Scopes: []engine.ScopeConfig{{Name: "test", DefaultRoute: true, Servers: []string{addr}}}},
		engine.Options{Network: network})
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
	ask := func(i int64, buf []byte) bool {
		r := e.ResolveWire(ctx, queries[i], buf)
		if r.Result != engine.ResultAnswer && r.Result != engine.ResultNXDomain {
			b.Errorf("result %v", r.Result)
			return false
		}
		return true
	}
	b.ReportAllocs()
	b.ResetTimer()
	user0, sys0 := cpuTime()
	if parallelism == 0 {
		buf := make([]byte, 0, 4096)
		for i := range int64(b.N) {
			if !ask(i, buf) {
				return
			}
		}
	} else {
		var next atomic.Int64
		b.SetParallelism(parallelism)
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 0, 4096)
			for pb.Next() {
				if !ask((next.Add(1)-1)%int64(b.N), buf) {
					return
				}
			}
		})
	}
	reportCPU(b, user0, sys0, "own-cpu-ns/op")
	b.ReportMetric(float64(e.IdleSockets()), "pooled-sockets")
}
