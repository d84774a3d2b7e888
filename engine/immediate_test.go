package engine_test

import (
	"context"
	"testing"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// TestResolveImmediateOnlyFromMemory: ResolveImmediate answers a cached
// name and a local name at once, counted as Resolve counts them, and
// leaves a name it would have to ask upstream alone.
func TestResolveImmediateOnlyFromMemory(t *testing.T) {
	t.Parallel()
	srv := upstreamtest.Start(t, upstreamtest.Answer("@ 300 IN A 192.0.2.1"))
	cfg := engine.Config{
		FallbackServers: []string{srv.String()},
		Cache:           engine.CacheConfig{MaxEntries: 1000},
		Hosts:           map[string][]string{"box.home.": {"192.0.2.9"}},
	}
	e := startEngine(t, cfg, engine.NativeNetwork{})

	if _, ok := e.ResolveImmediate(queryFor("fresh.example.", dns.TypeA)); ok {
		t.Fatal("a name never asked was answered at once")
	}
	if n := len(srv.Queries()); n != 0 || e.Counters().CacheHits != 0 {
		t.Fatalf("a miss reached the upstream (%d queries) or counted a hit", n)
	}
	if r := e.Resolve(context.Background(), queryFor("fresh.example.", dns.TypeA)); r.CacheHit {
		t.Fatal("the first Resolve was a cache hit")
	}
	q := queryFor("fresh.example.", dns.TypeA)
	q.Id = 4711
	r, ok := e.ResolveImmediate(q)
	if !ok || !r.CacheHit || r.Result != engine.ResultLocal || r.Msg.Id != 4711 || len(r.Msg.Answer) != 1 {
		t.Fatalf("cached name: ok %v hit %v result %v msg %v", ok, r.CacheHit, r.Result, r.Msg)
	}
	if c := e.Counters(); c.CacheHits != 1 {
		t.Errorf("cache hits %d, want 1", c.CacheHits)
	}
	if r, ok := e.ResolveImmediate(queryFor("box.home.", dns.TypeA)); !ok || r.Result != engine.ResultLocal {
		t.Errorf("local name: ok %v result %v", ok, r.Result)
	}
	if n := len(srv.Queries()); n != 1 {
		t.Errorf("upstream read %d queries, want 1", n)
	}
}
