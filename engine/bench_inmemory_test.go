package engine_test

import (
	"context"
	"testing"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// BenchmarkResolveInMemory forwards one question per op, cache off, to a
// server on the in-memory network: the engine's own work on the question
// path (routing, packing, the attempt, matching and unpacking the reply,
// events, counters) without the kernel's socket work and its noise.
// scripts/bench-engine.sh runs it against another revision too (this file
// uses only what every revision has).
func BenchmarkResolveInMemory(b *testing.B) {
	benchmarkResolveInMemory(b, context.Background())
}

func benchmarkResolveInMemory(b *testing.B, ctx context.Context) {
	n := memnet.New()
	server := "127.0.1.1:53"
	e, err := engine.New(engine.Config{Scopes: []engine.ScopeConfig{{Name: "test", DefaultRoute: true, Servers: []string{server}}}},
		engine.Options{Network: n})
	if err != nil {
		b.Fatal(err)
	}
	ap, _ := engine.ParseServer(server)
	n.Handle(ap, memnet.Respond(memnet.Answer("@ 60 IN A 192.0.2.80")))
	q := newQuery("www.example.test.", dns.TypeA)
	q.SetEdns0(4096, false)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if r := enginetest.Resolve(e, ctx, q); r.Result != engine.ResultAnswer {
			b.Fatalf("result %v", r.Result)
		}
		if i%1024 == 0 {
			n.Reset() // memnet records every transaction
		}
	}
}
