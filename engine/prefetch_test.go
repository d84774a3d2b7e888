package engine_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/memnet"
	"github.com/miekg/dns"
)

// Prefetch (README.md, "Serve-stale and prefetch"), under synctest on memnet.

// prefetchRig is a rig whose two servers answer with TTL 100 and whose
// cache prefetches entries asked twice.
func prefetchRig(t *testing.T, ceiling int) *rig {
	cfg := rigScope(2)
	cfg.InFlightCeiling = ceiling
	cfg.Scopes = append(cfg.Scopes, engine.ScopeConfig{Name: "corp", Domains: []string{"corp."}, Servers: []string{rigServer(3).String()}})
	cfg.Cache = engine.CacheConfig{MaxEntries: 100, PrefetchMinHits: 2}
	r := newRig(t, cfg)
	r.serve(memnet.Respond(memnet.Answer("@ 100 IN A 192.0.2.1")))
	return r
}

// hitAt sleeps until at (since start), asks www.example. and checks that
// the client was answered at once from the cache.
func (r *rig) hitAt(start time.Time, at time.Duration) enginetest.Response {
	r.t.Helper()
	time.Sleep(time.Until(start.Add(at)))
	resp, took := r.timed(queryFor("www.example.", dns.TypeA))
	if !resp.CacheHit || took != 0 {
		r.t.Fatalf("at %v: hit %v after %v, want a hit at once", at, resp.CacheHit, took)
	}
	return resp
}

func TestPrefetchBeforeExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := prefetchRig(t, 0)
		start := time.Now()
		r.timed(queryFor("www.example.", dns.TypeA)) // fetched: asked once
		r.hitAt(start, 50*time.Second)               // twice
		r.hitAt(start, 89*time.Second)               // 11 s of 100 left: not yet
		synctest.Wait()
		if n := len(r.net.Transactions()); n != 1 {
			t.Fatalf("%d transactions before the last tenth, want 1", n)
		}
		r.hitAt(start, 95*time.Second) // in the last tenth: prefetch
		synctest.Wait()
		txs := r.net.Transactions()
		if len(txs) != 2 || txs[1].Sent.Sub(start) != 95*time.Second {
			t.Fatalf("%d transactions; want the prefetch sent at 95 s, before expiry", len(txs))
		}
		r.hitAt(start, 96*time.Second) // once only
		resp := r.hitAt(start, 101*time.Second)
		if ttl := resp.Msg.Answer[0].Header().Ttl; ttl != 94 {
			t.Fatalf("after expiry of the first entry: TTL %d, want 94 (the prefetched entry)", ttl)
		}
		synctest.Wait()
		if n := len(r.net.Transactions()); n != 2 {
			t.Fatalf("%d transactions, want 2 (one prefetch)", n)
		}
		c := r.e.Counters()
		if c.Prefetches != 1 || c.PrefetchResults["answer"] != 1 {
			t.Fatalf("prefetch counters %d %v", c.Prefetches, c.PrefetchResults)
		}
	})
}

func TestPrefetchNotWithoutHits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := prefetchRig(t, 0)
		start := time.Now()
		r.timed(queryFor("www.example.", dns.TypeA)) // asked once
		r.hitAt(start, 95*time.Second)               // the second ask is in the last tenth
		synctest.Wait()
		if n := len(r.net.Transactions()); n != 1 || r.e.Counters().Prefetches != 0 {
			t.Fatalf("%d transactions: a name asked once was prefetched", n)
		}
		time.Sleep(time.Until(start.Add(100 * time.Second)))
		if resp, _ := r.timed(queryFor("www.example.", dns.TypeA)); resp.CacheHit {
			t.Fatal("hit after expiry without a prefetch")
		}
	})
}

// A prefetch spends attempts, demotes and counts upstream_failed like any
// question, but a ceiling refusal is not a client's, and no client waits.
func TestPrefetchFollowsEngineRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := prefetchRig(t, 0)
		start := time.Now()
		r.timed(queryFor("www.example.", dns.TypeA))
		r.hitAt(start, 50*time.Second)
		r.serve(memnet.Silent())
		r.hitAt(start, 95*time.Second)
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if got := r.log.outcomes(); !equalStrings(got, []string{"udp/answer", "udp/timeout", "udp/timeout", "udp/timeout"}) {
			t.Fatalf("attempts %v", got)
		}
		c := r.e.Counters()
		if c.UpstreamFailed != 3 || !r.demoted(rigServer(1)) || c.PrefetchResults["unavailable"] != 1 || c.Questions["unavailable"] != 0 {
			t.Fatalf("upstream_failed %d, prefetch results %v, questions %v", c.UpstreamFailed, c.PrefetchResults, c.Questions)
		}
	})
}

func TestPrefetchAtCeilingNotRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := prefetchRig(t, 1)
		start := time.Now()
		r.timed(queryFor("www.example.", dns.TypeA))
		r.hitAt(start, 50*time.Second)
		time.Sleep(44 * time.Second)
		fill(t, r, 1, "corp.") // the one slot, to the silent server 3
		r.hitAt(start, 95*time.Second)
		synctest.Wait()
		c := r.e.Counters()
		if c.Refused != 0 || c.Prefetches != 1 || c.PrefetchResults["unavailable"] != 1 {
			t.Fatalf("refused %d, prefetches %d %v; want a prefetch refused but not counted", c.Refused, c.Prefetches, c.PrefetchResults)
		}
		time.Sleep(6 * time.Second)
	})
}
